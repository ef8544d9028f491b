"""KV-cache bytes per token, the KV budget, and how many tokens, blocks and sequences fit.

Conventions (docs/conventions.md, "The model" and "Memory"):

* KV bytes per token k = 2 x n_layers x n_kv_heads x head_dim x kv_bytes
* KV budget = usable memory x utilization - weight bytes - reserved
* capacity in tokens = floor(budget / k); paged blocks of b tokens:
  floor(budget / (b k)); a sequence holding c tokens needs ceil(c / b) blocks
* sequences that fit at context c: floor(tokens / c) (token-level) or
  floor(blocks / ceil(c / b)) (block-level, can be fewer)
* KV slots a finished request wrote: P + O - 1

* prefix caching (docs/conventions.md, "Prefix caching"): a prompt of P tokens whose m leading
  full blocks are held reuses b min(m, floor((P - 1) / b)) tokens; n sequences of c tokens
  sharing S_p leading tokens hold the shared full blocks once

Derivations: ``roofline.symbolic.kv_cache``; proof: ``proofs/p04_kv_cache.py``.
"""

from __future__ import annotations

from typing import Any

from ._core import formula, maximum, minimum

__all__ = [
    "kv_bytes_per_token",
    "kv_budget",
    "kv_capacity_tokens",
    "kv_capacity_blocks",
    "blocks_per_sequence",
    "window_blocks_per_sequence",
    "sequences_that_fit",
    "sequences_that_fit_blocks",
    "lifetime_kv_slots",
    "prefix_cached_tokens",
    "shared_prefix_blocks",
    "shared_prefix_sequences_that_fit",
]

_P4 = "p04_kv_cache.py"


@formula(result="positive",
         topic="kv_cache", proof=_P4, num_hidden_layers="positive_int", num_key_value_heads="positive_int",
         head_dim="positive_int", kv_bytes="positive")
def kv_bytes_per_token(*, num_hidden_layers: Any, num_key_value_heads: Any, head_dim: Any, kv_bytes: Any) -> Any:
    """KV-cache bytes per token [bytes/token]: 2 L H_kv d e (keys and values).

    Parameters
    ----------
    num_hidden_layers : int > 0
    num_key_value_heads : int > 0 (KV heads, not query heads: 70B KV tables that count query heads)
    head_dim : int > 0 (from the config when present: LMCache #688)
    kv_bytes : [bytes/element] > 0 (BF16: 2)

    Returns
    -------
    [bytes/token], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> kv_bytes_per_token(num_hidden_layers=32, num_key_value_heads=8, head_dim=128, kv_bytes=2)
    131072
    """
    return 2 * num_hidden_layers * num_key_value_heads * head_dim * kv_bytes


@formula(result="real", topic="kv_cache", proof=_P4, memory="positive", utilization="share", weight_bytes="positive",
         reserved="nonnegative")
def kv_budget(*, memory: Any, utilization: Any, weight_bytes: Any, reserved: Any) -> Any:
    """Bytes left for the KV cache [bytes]: memory x utilization - weights - reserved.

    Parameters
    ----------
    memory : [bytes] > 0, usable memory as seen by software (not the label)
    utilization : in (0, 1] (vLLM's gpu_memory_utilization)
    weight_bytes : [bytes] > 0
    reserved : [bytes] >= 0 (activations, runtime)

    Returns
    -------
    [bytes], scalar or broadcast shape; negative when the weights do not fit
    (callers such as :func:`roofline.estimate.kv_capacity` raise on that).

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> kv_budget(memory=80, utilization=1, weight_bytes=16, reserved=11)
    53
    """
    return memory * utilization - weight_bytes - reserved


@formula(result="nonnegative", topic="kv_cache", proof=_P4, budget="nonnegative", kv_bytes_per_token="positive")
def kv_capacity_tokens(*, budget: Any, kv_bytes_per_token: Any) -> Any:
    """Tokens of KV the budget holds: floor(budget / k) [tokens].

    Parameters
    ----------
    budget : [bytes] >= 0
    kv_bytes_per_token : [bytes/token] > 0

    Returns
    -------
    [tokens], int for int/Fraction/float scalars, floored array for arrays.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> kv_capacity_tokens(budget=53_000_000_000, kv_bytes_per_token=131_072)
    404357
    """
    return budget // kv_bytes_per_token


@formula(result="nonnegative", topic="kv_cache", proof=_P4, budget="nonnegative", kv_bytes_per_token="positive",
         block_size="positive_int")
def kv_capacity_blocks(*, budget: Any, kv_bytes_per_token: Any, block_size: Any) -> Any:
    """Paged blocks of b tokens the budget holds: floor(budget / (b k)) [blocks].

    Parameters
    ----------
    budget : [bytes] >= 0
    kv_bytes_per_token : [bytes/token] > 0
    block_size : [tokens/block] int > 0

    Returns
    -------
    [blocks], int or floored array.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> kv_capacity_blocks(budget=5691 * 16 * 131_072, kv_bytes_per_token=131_072, block_size=16)
    5691
    """
    return budget // (block_size * kv_bytes_per_token)


@formula(result="nonnegative", topic="kv_cache", proof=_P4, context="nonnegative_int", block_size="positive_int")
def blocks_per_sequence(*, context: Any, block_size: Any) -> Any:
    """Blocks a sequence holding c tokens needs: ceil(c / b) [blocks].

    Parameters
    ----------
    context : [tokens] int >= 0
    block_size : [tokens/block] int > 0

    Returns
    -------
    [blocks], int or integer array.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> blocks_per_sequence(context=1000, block_size=16)
    63
    """
    return -(-context // block_size)


@formula(result="nonnegative", topic="kv_cache", proof="p16_sliding_window.py", context="nonnegative_int",
         block_size="positive_int", sliding_window="positive_int")
def window_blocks_per_sequence(*, context: Any, block_size: Any, sliding_window: Any) -> Any:
    """Blocks one layer with a sliding window of w tokens holds for a sequence at c tokens [blocks].

    The layer keeps the KV of token positions max(0, c - w) .. c - 1 (0-based), in blocks of
    b tokens: floor((c - 1) / b) - floor(max(0, c - w) / b) + 1, a count of block indices
    derived with SymPy in ``roofline.symbolic.kv_cache``. While c <= w it is ceil(c / b)
    (:func:`blocks_per_sequence`); past the window it is ceil(w / b) or one more, periodic in
    c with period b: a block is freed once every position in it has left the window, and the
    next one is taken when the new token crosses into it (vLLM V1's hybrid KV cache manager,
    ``SlidingWindowManager.remove_skipped_blocks``; vLLM docs, "Hybrid KV Cache Manager").

    Parameters
    ----------
    context : [tokens] int >= 0 (c, the KV incl. the new token)
    block_size : [tokens/block] int > 0
    sliding_window : [tokens] int > 0

    Returns
    -------
    [blocks], int or integer array.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Sliding-window attention" and "Memory".

    Examples
    --------
    Window 4, blocks of 2: at 4 tokens 2 blocks, at 5 three (positions 1..4 span blocks 0..2), at 6 two again.

    >>> [window_blocks_per_sequence(context=c, block_size=2, sliding_window=4) for c in (0, 1, 4, 5, 6)]
    [0, 1, 2, 3, 2]
    """
    return (context - 1) // block_size - maximum(context - sliding_window, 0) // block_size + 1


@formula(result="nonnegative", topic="kv_cache", proof=_P4, budget="nonnegative", kv_bytes_per_token="positive",
         context="positive_int")
def sequences_that_fit(*, budget: Any, kv_bytes_per_token: Any, context: Any) -> Any:
    """Sequences of c tokens that fit, token-level accounting: floor(floor(budget / k) / c).

    Parameters
    ----------
    budget : [bytes] >= 0
    kv_bytes_per_token : [bytes/token] > 0
    context : [tokens] int > 0

    Returns
    -------
    [sequences], int or floored array.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> sequences_that_fit(budget=53_000_000_000, kv_bytes_per_token=131_072, context=1000)
    404
    """
    return (budget // kv_bytes_per_token) // context


@formula(result="nonnegative", topic="kv_cache", proof=_P4, budget="nonnegative", kv_bytes_per_token="positive",
         context="positive_int", block_size="positive_int")
def sequences_that_fit_blocks(*, budget: Any, kv_bytes_per_token: Any, context: Any, block_size: Any) -> Any:
    """Sequences of c tokens that fit in paged blocks: floor(blocks / ceil(c / b)).

    Parameters
    ----------
    budget : [bytes] >= 0
    kv_bytes_per_token : [bytes/token] > 0
    context : [tokens] int > 0
    block_size : [tokens/block] int > 0

    Returns
    -------
    [sequences], int or floored array; at most :func:`sequences_that_fit` (vLLM #12330).

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> sequences_that_fit_blocks(budget=5691 * 16 * 131_072, kv_bytes_per_token=131_072,
    ...                           context=1000, block_size=16)
    90
    """
    blocks = budget // (block_size * kv_bytes_per_token)
    return blocks // (-(-context // block_size))


@formula(result="nonnegative", topic="kv_cache", proof=_P4, prompt_tokens="nonnegative_int",
         output_tokens="positive_int")
def lifetime_kv_slots(*, prompt_tokens: Any, output_tokens: Any) -> Any:
    """KV slots a request writes over its life: P + O - 1 (the last token is never fed back).

    Parameters
    ----------
    prompt_tokens : [tokens] int >= 0
    output_tokens : [tokens] int > 0

    Returns
    -------
    [tokens], int or integer array.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> lifetime_kv_slots(prompt_tokens=16, output_tokens=17)
    32
    """
    return prompt_tokens + output_tokens - 1


_P19 = "p19_prefix_caching.py"


@formula(result="nonnegative", topic="kv_cache", proof=_P19, prompt_tokens="positive_int",
         matched_blocks="nonnegative_int", block_size="positive_int")
def prefix_cached_tokens(*, prompt_tokens: Any, matched_blocks: Any, block_size: Any) -> Any:
    """Prompt tokens a prefix-cache hit saves: h = b min(m, floor((P - 1) / b)) [tokens].

    Only full blocks are shared, and the prompt's last token is always computed (it gives the
    first output token's logits), so a prompt whose m leading blocks are held reuses at most
    the full blocks of its first P - 1 tokens (vLLM V1, ``KVCacheManager.get_computed_blocks``:
    ``max_cache_hit_length = request.num_tokens - 1``).

    Parameters
    ----------
    prompt_tokens : [tokens] int >= 1 (P)
    matched_blocks : [blocks] int >= 0 (m, the leading full blocks found in the pool)
    block_size : [tokens/block] int >= 1 (b)

    Returns
    -------
    [tokens], int or integer array: a multiple of b, below P.

    Raises
    ------
    InvalidValueError
        An argument out of its range (naming it).

    Notes
    -----
    docs/conventions.md, "Prefix caching"; proof p19.

    Examples
    --------
    A 1,000-token prompt in 16-token blocks: all 62 full blocks held gives 992 tokens; a prompt
    of exactly 64 tokens with its 4 blocks held still computes its last block.

    >>> prefix_cached_tokens(prompt_tokens=1000, matched_blocks=62, block_size=16)
    992
    >>> prefix_cached_tokens(prompt_tokens=64, matched_blocks=4, block_size=16)
    48
    """
    return block_size * minimum(matched_blocks, (prompt_tokens - 1) // block_size)


def _shared_blocks(shared_prefix_tokens: Any, context: Any, block_size: Any) -> Any:
    return minimum(shared_prefix_tokens, context - 1) // block_size


@formula(result="nonnegative", topic="kv_cache", proof=_P19, batch="positive_int", context="positive_int",
         shared_prefix_tokens="nonnegative_int", block_size="positive_int")
def shared_prefix_blocks(*, batch: Any, context: Any, shared_prefix_tokens: Any, block_size: Any) -> Any:
    """Blocks B sequences of c tokens hold when they share their first S_p tokens [blocks].

    floor(min(S_p, c - 1) / b) + B (ceil(c / b) - floor(min(S_p, c - 1) / b)): the shared full
    blocks count once (one block, a reference count per sequence), the rest once per sequence.
    At most the first c - 1 tokens are shared, as :func:`prefix_cached_tokens`. With S_p = 0 it
    is B x :func:`blocks_per_sequence`.

    Parameters
    ----------
    batch : [sequences] int >= 1 (B)
    context : [tokens] int >= 1 (c, each sequence's KV)
    shared_prefix_tokens : [tokens] int >= 0 (S_p)
    block_size : [tokens/block] int >= 1 (b)

    Returns
    -------
    [blocks], int or integer array.

    Raises
    ------
    InvalidValueError
        An argument out of its range (naming it).

    Notes
    -----
    docs/conventions.md, "Prefix caching"; proof p19.

    Examples
    --------
    10 sequences of 1,000 tokens sharing a 512-token system prompt, 16-token blocks: 32 shared
    blocks plus 10 x 31 of their own, against 630 unshared.

    >>> shared_prefix_blocks(batch=10, context=1000, shared_prefix_tokens=512, block_size=16)
    342
    """
    shared = _shared_blocks(shared_prefix_tokens, context, block_size)
    return shared + batch * (-(-context // block_size) - shared)


@formula(result="nonnegative", topic="kv_cache", proof=_P19, pool_blocks="nonnegative_int", context="positive_int",
         shared_prefix_tokens="nonnegative_int", block_size="positive_int")
def shared_prefix_sequences_that_fit(*, pool_blocks: Any, context: Any, shared_prefix_tokens: Any,
                                     block_size: Any) -> Any:
    """Sequences of c tokens sharing their first S_p tokens that a pool of C blocks holds [sequences].

    max(0, floor((C - s) / (ceil(c / b) - s))) with s = floor(min(S_p, c - 1) / b): the B that
    :func:`shared_prefix_blocks` solved for at C blocks, floored (SymPy ``solve`` in
    ``roofline.symbolic.kv_cache``). The denominator is at least 1 (a sequence's last token is
    never shared). With S_p = 0 it is :func:`sequences_that_fit_blocks`.

    Parameters
    ----------
    pool_blocks : [blocks] int >= 0 (C)
    context : [tokens] int >= 1 (c)
    shared_prefix_tokens : [tokens] int >= 0 (S_p)
    block_size : [tokens/block] int >= 1 (b)

    Returns
    -------
    [sequences], int or integer array; 0 when not even one fits.

    Raises
    ------
    InvalidValueError
        An argument out of its range (naming it).

    Notes
    -----
    docs/conventions.md, "Prefix caching"; proof p19.

    Examples
    --------
    A pool of 5,691 blocks of 16 (vLLM #12330, where it runs 90 unshared sequences of 1,000 tokens),
    at 1,000 tokens sharing 512:

    >>> shared_prefix_sequences_that_fit(pool_blocks=5691, context=1000, shared_prefix_tokens=512, block_size=16)
    182
    >>> shared_prefix_sequences_that_fit(pool_blocks=5691, context=1000, shared_prefix_tokens=0, block_size=16)
    90
    """
    shared = _shared_blocks(shared_prefix_tokens, context, block_size)
    return maximum((pool_blocks - shared) // (-(-context // block_size) - shared), 0)
