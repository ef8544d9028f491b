"""DeepSeek sparse attention (DeepSeek-V3.2): a step's bytes, FLOPs and time, and the critical context, derived.

(docs/conventions.md, "Sparse attention".) Each layer keeps every cached token's MLA latent and
its indexer key. A decode query at context c runs the lightning indexer over all c keys (k_i
bytes and a_i FLOPs per token, summed over the layers) and attends over the min(c, K) latent
entries it selects (k_m bytes, a_m FLOPs per token), K = ``index_topk``. For B rows with contexts
summing to S and capped contexts min(c_i, K) summing to R::

    sparse_decode_bytes = W + k_m R + k_i S
    sparse_decode_flops = B F + a_m R + a_i S
    sparse_step_time = Max(bytes / BW, FLOPs / peak) + t0
    sparse_read_bytes = k_m Min(c, K) + k_i c          (one query; B = 1, R = Min(c, K), S = c, less W)
    sparse_attention_flops = a_m Min(c, K) + a_i c

A mixed step (chunked prefill) of D decode rows and T prompt tokens after p0 cached ones, with Q
causal pairs and Q_K pairs under the cap (:func:`roofline.formulas.window_attention_pairs` with
w = K: query t attends min(t, K) tokens), reads the cached prompt whole (the union of its queries'
selections) and writes the T tokens' latents and keys::

    sparse_mixed_step_time = Max((W + k_m (R + p0) + k_i (S + p0) + (k_m + k_i) T) / BW,
                                 ((D + T) F + a_m (R + Q_K) + a_i (S + Q)) / peak) + t0

Critical context: the intensity limit (B -> oo, SymPy ``limit``) at a uniform context c is
(F + A(c)) / K(c); it is (F + (a_m + a_i) c) / ((k_m + k_i) c) up to K and
(F + a_m K + a_i c) / (k_m K + k_i c) past it. c* solves limit = I* = peak / BW in the first piece
when that root is in (0, K], else in the second (at least K); oo when I* k_i <= a_i (the indexer
alone keeps the limit above the ridge).

Fast paths: :mod:`roofline.formulas.sparse`. Proof: proofs/p24_sparse_attention.py.
"""

from __future__ import annotations

import sympy as sp

from ._symbols import S

B, Ssum, R, c = S.batch, S.context_sum, S.capped_context_sum, S.context
W, F, K = S.weight_bytes, S.flops_per_token, S.index_topk
km, ki, am, ai = S.latent_bytes_per_token, S.index_bytes_per_token, S.latent_attention_flops_per_token, \
    S.index_flops_per_token
peak, BW, t0 = S.peak_flops, S.bandwidth, S.overhead
D, T, p0, Q, QK = S.decode_rows, S.prefill_tokens, S.cached_tokens, S.attention_pairs, S.capped_attention_pairs

sparse_decode_bytes = W + km * R + ki * Ssum
sparse_decode_flops = B * F + am * R + ai * Ssum
sparse_step_time = sp.Max(sparse_decode_bytes / BW, sparse_decode_flops / peak) + t0

_one = {B: 1, R: sp.Min(c, K), Ssum: c}
sparse_read_bytes = sp.expand(sparse_decode_bytes.subs(_one, simultaneous=True) - W)
sparse_attention_flops = sp.expand(sparse_decode_flops.subs(_one, simultaneous=True) - F)

_mixed_bytes = sparse_decode_bytes.subs({R: R + p0, Ssum: Ssum + p0}, simultaneous=True) + (km + ki) * T
_mixed_flops = sparse_decode_flops.subs({B: D + T, R: R + QK, Ssum: Ssum + Q}, simultaneous=True)
sparse_mixed_step_time = sp.Max(_mixed_bytes / BW, _mixed_flops / peak) + t0

_ridge = peak / BW
_cp = sp.Symbol("c_pos", positive=True)
_Bp = sp.Symbol("B_pos", positive=True)


def _limit(capped: sp.Expr) -> sp.Expr:
    """The B -> oo limit of a uniform batch's intensity at context c_pos, min(c, K) given as ``capped``."""
    uniform = {B: _Bp, R: _Bp * capped, Ssum: _Bp * _cp}
    ratio = sparse_decode_flops.subs(uniform, simultaneous=True) / sparse_decode_bytes.subs(uniform, simultaneous=True)
    return sp.limit(ratio, _Bp, sp.oo)


_below = _limit(_cp)  # c <= K: Min(c, K) = c
_above = _limit(K)  # c >= K: Min(c, K) = K
(_c1,) = sp.solve(sp.Eq(_below, _ridge), _cp)
(_c2,) = sp.solve(sp.Eq(_above, _ridge), _cp)
_den1 = _ridge * (km + ki) - am - ai
_den2 = _ridge * ki - ai
_num2 = sp.cancel(_c2 * _den2)  # c2 = _num2 / _den2, so max(c2, K) compares _num2 with K _den2 (den2 > 0 here)
_past = sp.Piecewise((_c2, sp.Ge(_num2, K * _den2)), (K, True))
sparse_critical_context = sp.Piecewise(
    (_c1, sp.And(sp.Gt(_den1, 0), sp.Le(F, K * _den1))), (sp.oo, sp.Le(_den2, 0)), (_past, True))
# (the first piece's c1 <= K written F <= K den1, its equivalent for den1 > 0 that never divides by zero)
