"""Arithmetic intensity, ridge point, critical batch and critical context, derived.

For B sequences at context c (S = B c in the step's bytes and FLOPs)::

    I(B, c) = FLOPs / bytes
    ridge_point = peak / BW
    intensity_limit = limit_{B -> oo} I(B, c)                 (SymPy ``limit``)
    critical_batch_real = solve(I(B, c) = ridge, B)           (SymPy ``solve``),
        valid where its denominator is positive, else oo (never compute-bound)
    critical_batch = ceiling(critical_batch_real)
    critical_context = solve(intensity_limit(c) = ridge, c),  oo where it does not exist

Fast paths: :mod:`roofline.formulas.intensity`. Proof: proofs/p03_critical_batch.py.
"""

from __future__ import annotations

import sympy as sp

from . import step_time as _st
from ._symbols import S

B, c = S.batch, S.context
W, k, F, a = S.weight_bytes, S.kv_bytes_per_token, S.flops_per_token, S.attention_flops_per_token
peak, BW = S.peak_flops, S.bandwidth

arithmetic_intensity = sp.simplify((_st.decode_flops / _st.decode_bytes).subs(S.context_sum, B * c))
ridge_point = peak / BW

# The limit needs c > 0 and k > 0 (otherwise the bytes do not grow with B).
_c_pos = sp.Symbol("context", positive=True)
_k_pos = sp.Symbol("kv_bytes_per_token", positive=True)
intensity_limit = sp.limit(arithmetic_intensity.subs({c: _c_pos, k: _k_pos}), B, sp.oo).subs(
    {_c_pos: S.context, _k_pos: S.kv_bytes_per_token}
)

_B_real = sp.Symbol("B_real")
(_sol,) = sp.solve(sp.Eq(arithmetic_intensity.subs(B, _B_real), ridge_point), _B_real)
_existence = sp.denom(sp.together(_sol))  # the solve's denominator: > 0 iff B* exists
critical_batch_real = sp.Piecewise((_sol, sp.Gt(sp.numer(sp.together(_sol)) * _existence, 0)), (sp.oo, True))
critical_batch = sp.Piecewise((sp.ceiling(_sol), sp.Gt(sp.numer(sp.together(_sol)) * _existence, 0)), (sp.oo, True))

_c_star = sp.Symbol("c_star")
(_csol,) = sp.solve(sp.Eq(intensity_limit.subs(S.context, _c_star), ridge_point), _c_star)
_csol_sign = sp.numer(sp.together(_csol)) * sp.denom(sp.together(_csol))
critical_context = sp.Piecewise((_csol, sp.Gt(_csol_sign, 0)), (sp.oo, True))
