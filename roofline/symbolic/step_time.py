"""Decode and prefill step time, derived (conventions: docs/conventions.md, "One step").

Definitions (the inputs of the derivation)::

    bytes = W + k S,   FLOPs = B F + a S

Derived::

    memory_time = bytes / BW,  compute_time = FLOPs / peak
    step_time = Max(memory_time, compute_time) + t0          (perfect overlap)
    step_time_no_overlap = memory_time + compute_time + t0   (upper bound)
    throughput = B / step_time,  math_busy_share = compute_time / step_time,
    bandwidth_share = memory_time / step_time

Prefill of p tokens: causal attention pairs = sum_{i=1}^{p} i (SymPy ``summation``).
Mixed step (chunked prefill, docs/conventions.md "Chunked prefill and mixed steps"): D decode
rows of contexts summing to S, plus prompt chunks; a chunk of q tokens after p0 cached ones
has sum_{i=1}^{q} (p0 + i) query-key pairs (``summation``). Each chunk token is one more row
of the decode step and its KV read or written is one more context token, so the mixed step
is the decode step with B -> D + T and, for bytes, S -> S + sum p0 + T, for FLOPs,
S -> S + Q (T chunk tokens, Q their pairs).
Prefix caching (docs/conventions.md, "Prefix caching"): a prefill of q new tokens after h cached
ones is the mixed step with no decode row, one chunk of q tokens after h cached ones.
Sliding window of w tokens (docs/conventions.md, "Sliding-window attention"): query t attends over
min(t, w) keys, so a chunk has sum_{t=p0+1}^{p0+q} min(t, w) pairs: the causal pairs less
sum (t - w) over the queries past u = max(p0, w), m = max(0, p0 + q - u) of them (``summation``).

Fast paths: :mod:`roofline.formulas.step_time`. Proofs: proofs/p01_one_request.py,
proofs/p02_batching.py.
"""

from __future__ import annotations

import sympy as sp

from ._symbols import S

B, Ssum, W, k = S.batch, S.context_sum, S.weight_bytes, S.kv_bytes_per_token
F, a, BW, peak, t0 = S.flops_per_token, S.attention_flops_per_token, S.bandwidth, S.peak_flops, S.overhead

decode_bytes = W + k * Ssum
decode_flops = B * F + a * Ssum
memory_time = decode_bytes / BW
compute_time = decode_flops / peak
step_time = sp.Max(memory_time, compute_time) + t0
step_time_no_overlap = memory_time + compute_time + t0
throughput = B / step_time
math_busy_share = compute_time / step_time
bandwidth_share = memory_time / step_time

_i = sp.Symbol("i", positive=True, integer=True)
causal_attention_pairs = sp.factor(sp.summation(_i, (_i, 1, S.prompt_tokens)))

prefill_bytes = W + k * S.prefill_tokens
prefill_flops = S.prefill_tokens * F + a * S.attention_pairs
prefill_step_time = sp.Max(prefill_bytes / BW, prefill_flops / peak) + t0

# mixed step: decode rows plus prompt chunks (chunked prefill)
chunk_tokens = S.chunk_tokens  # q [tokens] of one chunk
cached_tokens = S.cached_tokens  # p0 [tokens] cached before it (or summed over a step's chunks)
decode_rows = S.decode_rows  # D [rows]
chunk_attention_pairs = sp.expand(sp.summation(cached_tokens + _i, (_i, 1, chunk_tokens)))

_T, _Q = S.prefill_tokens, S.attention_pairs
mixed_step_bytes = decode_bytes.subs(Ssum, Ssum + cached_tokens + _T)
mixed_step_flops = decode_flops.subs({B: decode_rows + _T, Ssum: Ssum + _Q}, simultaneous=True)
mixed_step_time = sp.Max(mixed_step_bytes / BW, mixed_step_flops / peak) + t0

# prefix caching: a prefill of q new tokens after h cached ones is one chunk, no decode row
cached_prefill_time = mixed_step_time.subs(
    {decode_rows: 0, Ssum: 0, _T: chunk_tokens, _Q: chunk_attention_pairs}, simultaneous=True)

# sliding window: query t (1-based) attends over min(t, w) keys, itself included
_w = S.sliding_window
_u = sp.Max(cached_tokens, _w)  # queries t <= u see min(t, w) = t ...
_m = sp.Max(0, cached_tokens + chunk_tokens - _u)  # ... the m queries t = u + 1 .. p0 + q see w = t - (t - w)
_j = sp.Symbol("j", positive=True, integer=True)
_past_window = sp.summation(_u + _j - _w, (_j, 1, _m))
window_attention_pairs = chunk_attention_pairs - _past_window
