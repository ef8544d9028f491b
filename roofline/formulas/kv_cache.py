"""KV-cache bytes per token, the KV budget, and how many tokens, blocks and sequences fit.

Conventions (docs/conventions.md, "The model" and "Memory"):

* KV bytes per token k = 2 x n_layers x n_kv_heads x head_dim x kv_bytes
* KV budget = usable memory x utilization - weight bytes - reserved
* capacity in tokens = floor(budget / k); paged blocks of b tokens:
  floor(budget / (b k)); a sequence holding c tokens needs ceil(c / b) blocks
* sequences that fit at context c: floor(tokens / c) (token-level) or
  floor(blocks / ceil(c / b)) (block-level, can be fewer)
* KV slots a finished request wrote: P + O - 1

Derivations: ``roofline.symbolic.kv_cache``; proof: ``proofs/p04_kv_cache.py``.
"""

from __future__ import annotations

from typing import Any

from ._core import formula, maximum

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
