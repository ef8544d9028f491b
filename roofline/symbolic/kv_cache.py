"""KV-cache bytes per token, budget and capacity, derived (docs/conventions.md, "Memory").

    kv_bytes_per_token = 2 (K and V) x layers x KV heads x head_dim x bytes per element
    kv_budget = memory x utilization - weight_bytes - reserved
    kv_capacity_tokens = floor(budget / k)
    kv_capacity_blocks = floor(budget / (b k))
    blocks_per_sequence = ceiling(c / b)
    sequences_that_fit = floor(kv_capacity_tokens / c)
    sequences_that_fit_blocks = floor(kv_capacity_blocks / blocks_per_sequence)
    lifetime_kv_slots = P + O - 1 (the prompt's slots plus one per fed-back output token)
    window_blocks_per_sequence = floor((c - 1) / b) - floor(max(0, c - w) / b) + 1

    prefix_cached_tokens = b min(m, floor((P - 1) / b))      (prefix caching)
    shared_prefix_blocks = floor(min(S_p, c - 1) / b) + B (ceil(c / b) - floor(min(S_p, c - 1) / b))
    shared_prefix_sequences_that_fit = max(0, floor(n)) of shared_prefix_blocks(n) = pool_blocks, solved for n

The last of the first group is one layer with window w: the blocks covering token positions max(0, c - w) .. c - 1.

Fast paths: :mod:`roofline.formulas.kv_cache`. Proofs: proofs/p04_kv_cache.py,
proofs/p16_sliding_window.py, proofs/p19_prefix_caching.py (prefix caching).
"""

from __future__ import annotations

import sympy as sp

from ._symbols import S

kv_bytes_per_token = 2 * S.num_hidden_layers * S.num_key_value_heads * S.head_dim * S.kv_bytes
kv_budget = S.memory * S.utilization - S.weight_bytes - S.reserved
kv_capacity_tokens = sp.floor(S.budget / S.kv_bytes_per_token)
kv_capacity_blocks = sp.floor(S.budget / (S.block_size * S.kv_bytes_per_token))
blocks_per_sequence = sp.ceiling(S.context / S.block_size)
sequences_that_fit = sp.floor(kv_capacity_tokens / S.context)
sequences_that_fit_blocks = sp.floor(kv_capacity_blocks / blocks_per_sequence)

# Tokens fed through the model: the P prompt tokens, then each output token but the last.
_j = sp.Symbol("j", positive=True, integer=True)
lifetime_kv_slots = S.prompt_tokens + sp.summation(1, (_j, 1, S.output_tokens - 1))

# A layer with a sliding window of w tokens keeps, for a sequence at context c, the KV of
# positions lo .. c - 1 with lo = max(0, c - w) (0-based; docs/conventions.md, "Sliding-window
# attention"). Block j covers positions j b .. (j + 1) b - 1, so the blocks held are those
# from the one holding lo to the one holding c - 1: a count of indices.
_block = sp.Symbol("block", integer=True)
window_blocks_per_sequence = sp.summation(
    1, (_block, sp.floor(sp.Max(0, S.context - S.sliding_window) / S.block_size),
        sp.floor((S.context - 1) / S.block_size)))

# Prefix caching (docs/conventions.md, "Prefix caching"): a prompt of P tokens whose m leading
# full blocks are held reuses them, but its last token is always computed (it gives the first
# output token's logits: vLLM's max_cache_hit_length = num_tokens - 1), so at most the full
# blocks of its first P - 1 tokens are hit.
prefix_cached_tokens = S.block_size * sp.Min(S.matched_blocks, sp.floor((S.prompt_tokens - 1) / S.block_size))

# B sequences of c tokens sharing their first S_p tokens: the shared full blocks (of at most the
# first c - 1 tokens, as above) count once, the rest once per sequence (a sum over the sequences).
_shared = sp.floor(sp.Min(S.shared_prefix_tokens, S.context - 1) / S.block_size)
_seq = sp.Symbol("seq", positive=True, integer=True)
shared_prefix_blocks = _shared + sp.summation(sp.ceiling(S.context / S.block_size) - _shared, (_seq, 1, S.batch))
_n = sp.Symbol("n", positive=True)
shared_prefix_sequences_that_fit = sp.Max(0, sp.floor(
    sp.solve(sp.Eq(shared_prefix_blocks.subs(S.batch, _n), S.pool_blocks), _n)[0]))
