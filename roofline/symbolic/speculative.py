"""Speculative decoding, derived (docs/conventions.md, "Speculative decoding").

A proposer offers k tokens per sequence; the target verifies the k + 1 positions of each
sequence in one step; each proposed token is accepted with probability alpha,
independently, and the first rejection ends the run (the target's own token at that
position, or the bonus token after k acceptances, is always kept). So the tokens a
sequence gains in a step are 1 + N, with P(N >= i) = alpha^i for i = 1 .. k:

    speculative_tokens_per_step = sum_{i=0}^{k} alpha^i           (SymPy ``summation``)
                                = (1 - alpha^(k+1)) / (1 - alpha)  (alpha < 1), k + 1 (alpha = 1)

With a per-position vector alpha_1 .. alpha_k (alpha_i: proposal i accepted given all before it were),
P(N >= i) = alpha_1 .. alpha_i and E = 1 + sum_{i=1}^{k} prod_{j<=i} alpha_j, folded from the last position
back with one scalar formula (the registry's arguments are scalars):

    speculative_tokens_from_position = 1 + alpha_i T_{i+1}        (T_{k+1} = 1, E = T_1)

The verification step of B sequences at context c (the first new token's context, as in a
plain decode step) is the mixed step of chunked prefill with no decode row and one chunk of
k + 1 tokens after c - 1 cached ones per sequence (``roofline.symbolic.step_time``):

    bytes = W + k_kv B (c + k),   FLOPs = B (k + 1) F + a B sum_{i=1}^{k+1} (c - 1 + i)
    speculative_step_time = Max(bytes / BW, FLOPs / peak) + t0 + t_d
    speculative_speedup = tokens_per_step x step_time(B, S = B c) / speculative_step_time
    speculative_intensity = FLOPs / bytes
    speculative_critical_batch = ceiling(solve(speculative_intensity = ridge, B)), oo where none

Where the step is bound by the weights (Leviathan, Kalman and Matias, ICML 2023, Theorem
3.8), with the proposer costing r target steps per proposed token:

    speculative_speedup_memory_bound = (1 - alpha^(k+1)) / ((1 - alpha) (1 + k r))

and, for a real k (alpha < 1, r > 0), ``optimal_speculative_tokens_real`` solves d/dk = 0 (SymPy
``solve``): a Lambert W of branch -1 (no fast path: the whole k is found by comparing speed-ups,
:func:`roofline.speculative.best_speculative_tokens`).

Fast paths: :mod:`roofline.formulas.speculative`. Proof: proofs/p18_speculative_decoding.py.
"""

from __future__ import annotations

import sympy as sp

from . import step_time as _st
from ._symbols import S, declare

B, c = S.batch, S.context
W, kv, F, a = S.weight_bytes, S.kv_bytes_per_token, S.flops_per_token, S.attention_flops_per_token
peak, BW, t0 = S.peak_flops, S.bandwidth, S.overhead
k, alpha, t_d, r = S.speculative_tokens, S.acceptance_rate, S.proposer_time, S.draft_cost_ratio

_i = sp.Symbol("i", nonnegative=True, integer=True)
speculative_tokens_per_step = sp.summation(alpha**_i, (_i, 0, k))
# one position of the per-position fold: the tokens from position i on, given all proposals before i accepted
speculative_tokens_from_position = 1 + alpha * S.tokens_after_position


def positional_tokens_per_step(rates: list[sp.Expr]) -> sp.Expr:
    """E of the per-position rates (a list of SymPy expressions), by the fold T_i = 1 + alpha_i T_{i+1}."""
    tokens: sp.Expr = sp.Integer(1)
    for rate in reversed(rates):
        tokens = speculative_tokens_from_position.subs({alpha: rate, S.tokens_after_position: tokens},
                                                       simultaneous=True)
    return tokens

# the verification step: a mixed step with no decode row, a chunk of k + 1 tokens after c - 1 cached, per sequence
_pairs = B * _st.chunk_attention_pairs.subs({_st.chunk_tokens: k + 1, _st.cached_tokens: c - 1}, simultaneous=True)
_verify = {_st.decode_rows: 0, S.context_sum: 0, S.prefill_tokens: B * (k + 1), _st.cached_tokens: B * (c - 1),
           S.attention_pairs: _pairs}
verify_bytes = sp.expand(_st.mixed_step_bytes.subs(_verify, simultaneous=True))
verify_flops = sp.expand(_st.mixed_step_flops.subs(_verify, simultaneous=True))
speculative_step_time = _st.mixed_step_time.subs(_verify, simultaneous=True) + t_d

_plain = _st.step_time.subs(S.context_sum, B * c)
speculative_speedup = speculative_tokens_per_step * _plain / speculative_step_time
speculative_intensity = sp.factor(verify_flops) / verify_bytes

_B_real = sp.Symbol("B_real")
(_sol,) = sp.solve(sp.Eq(speculative_intensity.subs(B, _B_real), peak / BW), _B_real)
_sign = sp.numer(sp.together(_sol)) * sp.denom(sp.together(_sol))
speculative_critical_batch = sp.Piecewise((sp.ceiling(_sol), sp.Gt(_sign, 0)), (sp.oo, True))

speculative_speedup_memory_bound = speculative_tokens_per_step / (1 + k * r)

# the k that maximises it, k real (alpha < 1, r > 0): d/dk = 0 solved by SymPy (check=False: its own check of each
# root costs seconds; proofs/p18 checks the derivative there). Of the two roots the one with the Lambert W is the
# critical point; SymPy writes the principal branch, which gives a negative k: the maximum is on branch -1.
k_real = declare("k_real", positive=True)
speculative_speedup_memory_bound_real = (1 - alpha ** (k_real + 1)) / ((1 - alpha) * (1 + k_real * r))
(_root,) = [x for x in sp.solve(sp.diff(speculative_speedup_memory_bound_real, k_real), k_real, check=False,
                                simplify=False) if x.has(sp.LambertW)]
optimal_speculative_tokens_real = _root.replace(sp.LambertW, lambda x: sp.LambertW(x, -1))
