"""Hybrid models (recurrent layers beside attention): a step's bytes, its time, B*, c* and what fits, derived.

(docs/conventions.md, "Hybrid models".) A sequence holds KV in the attention layers (k bytes per
token of context) and a fixed recurrent state S_st in the recurrent layers, whatever its context.
A decode step reads the weights once, each sequence's KV, and reads and writes back each
sequence's state once; FLOPs are those of the dense step (F, fixed per token, includes the
recurrent layers' own FLOPs; a S over the attention layers)::

    hybrid_decode_bytes = W + k S + 2 B S_st
    hybrid_step_time = Max(hybrid_decode_bytes / BW, (B F + a S) / peak) + t0
    intensity = FLOPs / bytes at S = B c
    intensity_limit_ = limit_{B -> oo}: (F + a c) / (k c + 2 S_st)                (SymPy ``limit``)
    hybrid_critical_batch = ceiling(solve(intensity = peak / BW, B)), oo where it has no positive root
    hybrid_critical_context = solve(limit = peak / BW, c): (F - 2 I* S_st) / (I* k - a);
        0 when F <= 2 I* S_st (the state alone keeps every batch memory-bound), oo when I* k <= a

Memory, as vLLM V1's hybrid allocator pages it (one state block per sequence per group of
recurrent layers beside the attention layers' KV blocks; docs/conventions.md): in blocks of b
tokens of KV (b k bytes), the state takes hybrid_state_blocks = ceiling(S_st / (b k)) and a
sequence at context c takes ceiling(c / b) + that; a pool of P blocks fits
floor(P / (ceiling(c / b) + s_b)) such sequences. One sequence in M bytes reaches
``max_context_`` = max(0, floor((M - S_st) / k)) tokens (solve M = k c + S_st, rounded down; its
fast path is kv_capacity_tokens of M - S_st).

Fast paths: :mod:`roofline.formulas.hybrid`. Proof: proofs/p17_hybrid.py.
"""

from __future__ import annotations

import sympy as sp

from . import step_time as _st
from ._symbols import S

B, c, Ssum = S.batch, S.context, S.context_sum
W, k, F, a = S.weight_bytes, S.kv_bytes_per_token, S.flops_per_token, S.attention_flops_per_token
peak, BW, t0, Sst = S.peak_flops, S.bandwidth, S.overhead, S.state_bytes

hybrid_decode_bytes = _st.decode_bytes + 2 * B * Sst
hybrid_step_time = sp.Max(hybrid_decode_bytes / BW, _st.decode_flops / peak) + t0

_ridge = peak / BW
_intensity = sp.simplify((_st.decode_flops / hybrid_decode_bytes).subs(Ssum, B * c))

_c_pos = sp.Symbol("context", positive=True)
_k_pos = sp.Symbol("kv_bytes_per_token", positive=True)
intensity_limit_ = sp.simplify(sp.limit(_intensity.subs({c: _c_pos, k: _k_pos}), B, sp.oo)
                                     .subs({_c_pos: c, _k_pos: k}))

_B_real = sp.Symbol("B_real")
(_sol,) = sp.solve(sp.Eq(_intensity.subs(B, _B_real), _ridge), _B_real)
_sign = sp.numer(sp.together(_sol)) * sp.denom(sp.together(_sol))
hybrid_critical_batch = sp.Piecewise((sp.ceiling(_sol), sp.Gt(_sign, 0)), (sp.oo, True))

_c_star = sp.Symbol("c_star")
(_csol,) = sp.solve(sp.Eq(intensity_limit_.subs(c, _c_star), _ridge), _c_star)
_num = F - 2 * _ridge * Sst  # the limit at c = 0 against the ridge: F / (2 S_st) >= I* iff _num >= 0
_den = _ridge * k - a  # the limit's c -> oo value a / k against the ridge
hybrid_critical_context = sp.Piecewise((_csol, sp.And(sp.Gt(_num, 0), sp.Gt(_den, 0))), (sp.oo, sp.Le(_den, 0)),
                                       (0, True))

hybrid_state_blocks = sp.ceiling(Sst / (S.block_size * k))
hybrid_sequences_that_fit = sp.floor(S.pool_blocks / (sp.ceiling(c / S.block_size) + S.state_blocks))
_c_max = sp.Symbol("c_max")
(_msol,) = sp.solve(sp.Eq(k * _c_max + Sst, S.budget), _c_max)
max_context_ = sp.Max(0, sp.floor(_msol))  # 0: the state alone does not fit
