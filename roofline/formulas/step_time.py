"""Decode and prefill step cost: bytes, FLOPs, memory time, compute time, step time.

Conventions (docs/conventions.md, "One step"):
a decode step advances each of B sequences by one token; sequence i attends over
c_i tokens (its KV cache including the new token), and ``context_sum`` = sum(c_i).

* bytes moved = weight_bytes + kv_bytes_per_token x context_sum
* FLOPs = batch x flops_per_token + attention_flops_per_token x context_sum
* memory time = bytes / bandwidth; compute time = FLOPs / peak_flops
* step time = max(memory time, compute time) + overhead (roofline, perfect overlap);
  the no-overlap upper bound is their sum + overhead.

``flops_per_token`` is the exact matmul count (2 x matmul parameters) or the lesson's
2 x P; ``attention_flops_per_token`` is 4 L H d (or 0 under the lesson's convention):
see :meth:`roofline.ModelConfig.flops_per_token`.  For B sequences of equal context c,
pass ``context_sum = batch * context``.

A mixed step (chunked prefill, docs/conventions.md "Chunked prefill and mixed steps")
gives D decode rows their token and processes prompt chunks of T tokens in all, after
sum p0 tokens already cached, with Q query-key pairs:

* bytes = weight_bytes + k x (context_sum + cached_tokens + prefill_tokens)
* FLOPs = (decode_rows + prefill_tokens) x F + a x (context_sum + attention_pairs)

With no chunk it is the decode step; with no decode row and nothing cached, the prefill step.

Derivations: ``roofline.symbolic.step_time``; proofs: ``proofs/p01_one_request.py``,
``proofs/p02_batching.py``.
"""

from __future__ import annotations

from typing import Any

from ._core import formula, maximum

__all__ = [
    "decode_bytes",
    "decode_flops",
    "memory_time",
    "compute_time",
    "step_time",
    "step_time_no_overlap",
    "throughput",
    "math_busy_share",
    "bandwidth_share",
    "causal_attention_pairs",
    "prefill_bytes",
    "prefill_flops",
    "prefill_step_time",
    "chunk_attention_pairs",
    "window_attention_pairs",
    "mixed_step_bytes",
    "mixed_step_flops",
    "mixed_step_time",
    "cached_prefill_time",
]

_P1 = "p01_one_request.py"
_P2 = "p02_batching.py"

_SIZES: dict[str, Any] = dict(weight_bytes="positive", kv_bytes_per_token="nonnegative")
_FLOPS: dict[str, Any] = dict(flops_per_token="positive", attention_flops_per_token="nonnegative")
_HW: dict[str, Any] = dict(bandwidth="positive", peak_flops="positive")
_DECODE: dict[str, Any] = dict(batch="positive", context_sum="nonnegative", **_SIZES, **_FLOPS, **_HW)


@formula(result="positive", topic="step_time", proof=_P1, context_sum="nonnegative", **_SIZES)
def decode_bytes(*, weight_bytes: Any, kv_bytes_per_token: Any, context_sum: Any) -> Any:
    """Bytes read from HBM by one decode step [bytes].

    Parameters
    ----------
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    context_sum : [tokens], >= 0
        Sum over the batch of each sequence's context c_i (KV cache incl. the new token).

    Returns
    -------
    [bytes], scalar or the broadcast shape of the inputs.

    Raises
    ------
    InvalidValueError
        A negative, zero (where > 0 is required) or non-finite argument.

    Notes
    -----
    W + k S (docs/conventions.md, "One step").

    Examples
    --------
    >>> decode_bytes(weight_bytes=16_060_522_496, kv_bytes_per_token=131_072, context_sum=8_000)
    17109098496
    """
    return weight_bytes + kv_bytes_per_token * context_sum


@formula(result="positive", topic="step_time", proof=_P1, batch="positive", context_sum="nonnegative", **_FLOPS)
def decode_flops(*, batch: Any, flops_per_token: Any, attention_flops_per_token: Any, context_sum: Any) -> Any:
    """FLOPs of one decode step [FLOP].

    Parameters
    ----------
    batch : [sequences], > 0
    flops_per_token : [FLOP/token], > 0
        Matmul FLOPs per token (exact count or the lesson's 2 x P).
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
        4 L H d under the exact convention, 0 under the lesson's.
    context_sum : [tokens], >= 0

    Returns
    -------
    [FLOP], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    B F + a S (docs/conventions.md, "One step").

    Examples
    --------
    >>> decode_flops(batch=1, flops_per_token=16_060_522_496, attention_flops_per_token=0, context_sum=1)
    16060522496
    """
    return batch * flops_per_token + attention_flops_per_token * context_sum


@formula(result="positive", topic="step_time", proof=_P1, context_sum="nonnegative", bandwidth="positive", **_SIZES)
def memory_time(*, weight_bytes: Any, kv_bytes_per_token: Any, context_sum: Any, bandwidth: Any) -> Any:
    """Time to stream one decode step's bytes from HBM [s].

    Parameters
    ----------
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    context_sum : [tokens], >= 0
    bandwidth : [bytes/s], > 0

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    (W + k S) / BW.

    Examples
    --------
    >>> round(memory_time(weight_bytes=16_060_522_496, kv_bytes_per_token=0, context_sum=0,
    ...                   bandwidth=3_350_000_000_000) * 1e3, 3)
    4.794
    """
    return decode_bytes.unchecked(
        weight_bytes=weight_bytes, kv_bytes_per_token=kv_bytes_per_token, context_sum=context_sum
    ) / bandwidth


@formula(result="positive",
         topic="step_time", proof=_P1, batch="positive", context_sum="nonnegative", peak_flops="positive", **_FLOPS)
def compute_time(
    *, batch: Any, flops_per_token: Any, attention_flops_per_token: Any, context_sum: Any, peak_flops: Any
) -> Any:
    """Time for one decode step's FLOPs at the dense peak [s].

    Parameters
    ----------
    batch : [sequences], > 0
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
    context_sum : [tokens], >= 0
    peak_flops : [FLOP/s], > 0 (dense tensor-core peak, never the sparsity figure)

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    (B F + a S) / peak.

    Examples
    --------
    >>> round(compute_time(batch=1, flops_per_token=16_060_522_496, attention_flops_per_token=0,
    ...                    context_sum=0, peak_flops=989_400_000_000_000) * 1e6, 2)
    16.23
    """
    return decode_flops.unchecked(
        batch=batch, flops_per_token=flops_per_token,
        attention_flops_per_token=attention_flops_per_token, context_sum=context_sum,
    ) / peak_flops


def _times(kw: dict[str, Any]) -> tuple[Any, Any]:
    mem = memory_time.unchecked(
        weight_bytes=kw["weight_bytes"], kv_bytes_per_token=kw["kv_bytes_per_token"],
        context_sum=kw["context_sum"], bandwidth=kw["bandwidth"],
    )
    comp = compute_time.unchecked(
        batch=kw["batch"], flops_per_token=kw["flops_per_token"],
        attention_flops_per_token=kw["attention_flops_per_token"],
        context_sum=kw["context_sum"], peak_flops=kw["peak_flops"],
    )
    return mem, comp


@formula(result="positive", topic="step_time", proof=_P1, overhead="nonnegative", **_DECODE)
def step_time(**kw: Any) -> Any:
    """Decode step time, roofline lower bound with perfect overlap [s].

    Parameters
    ----------
    batch : [sequences], > 0
    context_sum : [tokens], >= 0
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
    bandwidth : [bytes/s], > 0
    peak_flops : [FLOP/s], > 0
    overhead : [s], >= 0 (fixed per-step overhead; 0 in the conventions' default)

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    max(memory time, compute time) + overhead (docs/conventions.md, "One step").

    Examples
    --------
    >>> t = step_time(batch=8, context_sum=0, weight_bytes=16_060_522_496, kv_bytes_per_token=0,
    ...               flops_per_token=16_060_522_496, attention_flops_per_token=0,
    ...               bandwidth=3_350_000_000_000, peak_flops=989_400_000_000_000, overhead=0)
    >>> round(t * 1e3, 3)
    4.794
    """
    mem, comp = _times(kw)
    return maximum(mem, comp) + kw["overhead"]


@formula(result="positive", topic="step_time", proof=_P2, overhead="nonnegative", **_DECODE)
def step_time_no_overlap(**kw: Any) -> Any:
    """Decode step time, no-overlap upper bound [s]: memory time + compute time + overhead.

    Parameters and Raises as :func:`step_time`.

    Returns
    -------
    [s], scalar or broadcast shape.

    Examples
    --------
    >>> t = step_time_no_overlap(batch=1, context_sum=0, weight_bytes=2, kv_bytes_per_token=0,
    ...     flops_per_token=2, attention_flops_per_token=0, bandwidth=1, peak_flops=1, overhead=0)
    >>> t
    4.0
    """
    mem, comp = _times(kw)
    return mem + comp + kw["overhead"]


@formula(result="positive", topic="step_time", proof=_P2, overhead="nonnegative", **_DECODE)
def throughput(**kw: Any) -> Any:
    """Decode throughput [tokens/s]: batch / step time (one token per sequence per step).

    Parameters and Raises as :func:`step_time`.

    Returns
    -------
    [tokens/s], scalar or broadcast shape.

    Examples
    --------
    >>> round(throughput(batch=8, context_sum=0, weight_bytes=16_060_522_496, kv_bytes_per_token=0,
    ...     flops_per_token=16_060_522_496, attention_flops_per_token=0,
    ...     bandwidth=3_350_000_000_000, peak_flops=989_400_000_000_000, overhead=0))
    1669
    """
    return kw["batch"] / step_time.unchecked(**kw)


@formula(result="share", topic="step_time", proof=_P1, overhead="nonnegative", **_DECODE)
def math_busy_share(**kw: Any) -> Any:
    """Share of the step the math units are busy: compute time / step time [1], in (0, 1].

    The model's upper bound on MFU. Parameters and Raises as :func:`step_time`.

    Returns
    -------
    [dimensionless], scalar or broadcast shape.

    Examples
    --------
    >>> s = math_busy_share(batch=1, context_sum=0, weight_bytes=16_060_522_496,
    ...     kv_bytes_per_token=0, flops_per_token=16_060_522_496, attention_flops_per_token=0,
    ...     bandwidth=3_350_000_000_000, peak_flops=989_400_000_000_000, overhead=0)
    >>> round(s * 100, 2)
    0.34
    """
    mem, comp = _times(kw)
    return comp / (maximum(mem, comp) + kw["overhead"])


@formula(result="share", topic="step_time", proof=_P1, overhead="nonnegative", **_DECODE)
def bandwidth_share(**kw: Any) -> Any:
    """Share of the step HBM is streaming: memory time / step time [1], in (0, 1].

    The model's upper bound on MBU. Parameters and Raises as :func:`step_time`.

    Returns
    -------
    [dimensionless], scalar or broadcast shape.

    Examples
    --------
    >>> bandwidth_share(batch=1, context_sum=0, weight_bytes=2, kv_bytes_per_token=0,
    ...     flops_per_token=2, attention_flops_per_token=0, bandwidth=1, peak_flops=1, overhead=0)
    1.0
    """
    mem, comp = _times(kw)
    return mem / (maximum(mem, comp) + kw["overhead"])


# --------------------------------------------------------------------------- prefill


@formula(result="nonnegative", topic="step_time", proof=_P1, prompt_tokens="nonnegative_int")
def causal_attention_pairs(*, prompt_tokens: Any) -> Any:
    """Query-key pairs of causal attention over a prompt of p tokens: p (p + 1) / 2.

    Token i (1-based) attends over i tokens; summed with SymPy in
    ``roofline.symbolic.step_time``.

    Parameters
    ----------
    prompt_tokens : [tokens], integer >= 0

    Returns
    -------
    [token pairs], int (or integer array).

    Raises
    ------
    InvalidValueError
        A negative or non-integer prompt length.

    Examples
    --------
    >>> causal_attention_pairs(prompt_tokens=4)
    10
    """
    return prompt_tokens * (prompt_tokens + 1) // 2


@formula(result="positive", topic="step_time", proof=_P1, prefill_tokens="nonnegative", **_SIZES)
def prefill_bytes(*, weight_bytes: Any, kv_bytes_per_token: Any, prefill_tokens: Any) -> Any:
    """Bytes moved by one prefill step [bytes]: weights read once + KV written for every token.

    Parameters
    ----------
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    prefill_tokens : [tokens], >= 0
        Tokens processed in the step, padding included (sum over rows).

    Returns
    -------
    [bytes], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> prefill_bytes(weight_bytes=100, kv_bytes_per_token=2, prefill_tokens=10)
    120
    """
    return weight_bytes + kv_bytes_per_token * prefill_tokens


@formula(result="nonnegative",
         topic="step_time", proof=_P1, prefill_tokens="nonnegative", attention_pairs="nonnegative", **_FLOPS)
def prefill_flops(
    *, flops_per_token: Any, attention_flops_per_token: Any, prefill_tokens: Any, attention_pairs: Any
) -> Any:
    """FLOPs of one prefill step [FLOP]: T F + a Q.

    Parameters
    ----------
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
    prefill_tokens : [tokens], >= 0 (T, padding included)
    attention_pairs : [token pairs], >= 0
        Q = sum over rows of :func:`causal_attention_pairs` of the row's length.

    Returns
    -------
    [FLOP], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> prefill_flops(flops_per_token=10, attention_flops_per_token=1, prefill_tokens=4, attention_pairs=10)
    50
    """
    return prefill_tokens * flops_per_token + attention_flops_per_token * attention_pairs


@formula(result="positive",
    topic="step_time", proof=_P1, prefill_tokens="nonnegative", attention_pairs="nonnegative",
    overhead="nonnegative", **_SIZES, **_FLOPS, **_HW,
)
def prefill_step_time(**kw: Any) -> Any:
    """Prefill step time [s]: max(bytes / bandwidth, FLOPs / peak) + overhead.

    Parameters
    ----------
    weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops_per_token : as :func:`step_time`
    bandwidth, peak_flops, overhead : as :func:`step_time`
    prefill_tokens, attention_pairs : as :func:`prefill_flops`

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    A prefill produces the request's first output token (docs/conventions.md).

    Examples
    --------
    >>> prefill_step_time(weight_bytes=100, kv_bytes_per_token=0, flops_per_token=10,
    ...     attention_flops_per_token=0, prefill_tokens=100, attention_pairs=0,
    ...     bandwidth=1, peak_flops=1, overhead=0)
    1000.0
    """
    mem = prefill_bytes.unchecked(
        weight_bytes=kw["weight_bytes"], kv_bytes_per_token=kw["kv_bytes_per_token"],
        prefill_tokens=kw["prefill_tokens"],
    ) / kw["bandwidth"]
    comp = prefill_flops.unchecked(
        flops_per_token=kw["flops_per_token"], attention_flops_per_token=kw["attention_flops_per_token"],
        prefill_tokens=kw["prefill_tokens"], attention_pairs=kw["attention_pairs"],
    ) / kw["peak_flops"]
    return maximum(mem, comp) + kw["overhead"]


# --------------------------------------------------------------------------- mixed steps (chunked prefill)

_P10 = "p10_chunked_prefill.py"
_MIXED: dict[str, Any] = dict(decode_rows="nonnegative", context_sum="nonnegative", prefill_tokens="nonnegative",
                              cached_tokens="nonnegative", attention_pairs="nonnegative")


@formula(result="nonnegative", topic="step_time", proof=_P10, chunk_tokens="nonnegative_int",
         cached_tokens="nonnegative_int")
def chunk_attention_pairs(*, chunk_tokens: Any, cached_tokens: Any) -> Any:
    """Query-key pairs of a prompt chunk of q tokens after p0 cached ones: q p0 + q (q + 1) / 2.

    Query i (1-based) of the chunk attends over the p0 cached tokens and i of its own
    (causal); summed with SymPy in ``roofline.symbolic.step_time``. With p0 = 0 it is
    :func:`causal_attention_pairs`, and the pairs of a prompt split into chunks add up to
    those of the whole prompt.

    Parameters
    ----------
    chunk_tokens : [tokens], integer >= 0 (q)
    cached_tokens : [tokens], integer >= 0 (p0, the prompt tokens already prefilled)

    Returns
    -------
    [token pairs], int (or integer array).

    Raises
    ------
    InvalidValueError
        A negative or non-integer argument.

    Notes
    -----
    docs/conventions.md, "Chunked prefill and mixed steps".

    Examples
    --------
    A prompt of 10 tokens in chunks of 4, 4 and 2: 10 + 26 + 19 = 55 = 10 x 11 / 2.

    >>> [chunk_attention_pairs(chunk_tokens=q, cached_tokens=p0) for q, p0 in ((4, 0), (4, 4), (2, 8))]
    [10, 26, 19]
    """
    return chunk_tokens * cached_tokens + chunk_tokens * (chunk_tokens + 1) // 2


@formula(result="nonnegative", topic="step_time", proof="p16_sliding_window.py", chunk_tokens="nonnegative_int",
         cached_tokens="nonnegative_int", sliding_window="positive_int")
def window_attention_pairs(*, chunk_tokens: Any, cached_tokens: Any, sliding_window: Any) -> Any:
    """Query-key pairs of a chunk of q tokens after p0 cached ones in a layer with a sliding window of w tokens.

    Query t (1-based position) attends over min(t, w) keys, itself included, so the chunk has
    sum_{t=p0+1}^{p0+q} min(t, w) pairs: :func:`chunk_attention_pairs` less sum (t - w) over the
    m = max(0, p0 + q - u) queries past u = max(p0, w), derived with SymPy in
    ``roofline.symbolic.step_time``. A window at least as long as p0 + q gives
    :func:`chunk_attention_pairs`; p0 = 0 gives a whole prompt's pairs (a prefill step).

    Parameters
    ----------
    chunk_tokens : [tokens], integer >= 0 (q)
    cached_tokens : [tokens], integer >= 0 (p0, the prompt tokens already prefilled)
    sliding_window : [tokens], integer >= 1 (w; ``sliding_window`` of the config)

    Returns
    -------
    [token pairs], int (or integer array).

    Raises
    ------
    InvalidValueError
        A negative or non-integer argument, or a window below 1.

    Notes
    -----
    docs/conventions.md, "Sliding-window attention" (a layer with window w reads min(c, w) tokens
    of KV at context c, the new token included).

    Examples
    --------
    A prompt of 10 tokens under a window of 4: 1 + 2 + 3 + 4 x 7 = 34 pairs, not 55; split in
    chunks of 4 and 6 the pairs add up to the same.

    >>> window_attention_pairs(chunk_tokens=10, cached_tokens=0, sliding_window=4)
    34
    >>> [window_attention_pairs(chunk_tokens=q, cached_tokens=p0, sliding_window=4) for q, p0 in ((4, 0), (6, 4))]
    [10, 24]
    """
    past = maximum(cached_tokens, sliding_window)
    m = maximum(cached_tokens + chunk_tokens - past, 0)
    return (chunk_tokens * cached_tokens + chunk_tokens * (chunk_tokens + 1) // 2
            - m * (past - sliding_window) - m * (m + 1) // 2)


@formula(result="positive", topic="step_time", proof=_P10, context_sum="nonnegative", cached_tokens="nonnegative",
         prefill_tokens="nonnegative", **_SIZES)
def mixed_step_bytes(*, weight_bytes: Any, kv_bytes_per_token: Any, context_sum: Any, cached_tokens: Any,
                     prefill_tokens: Any) -> Any:
    """Bytes moved by a mixed step [bytes]: W + k (S + sum p0 + T).

    Parameters
    ----------
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    context_sum : [tokens], >= 0, S: the decode rows' contexts (KV incl. the new token)
    cached_tokens : [tokens], >= 0, sum over the chunks of the prompt tokens cached before each (read)
    prefill_tokens : [tokens], >= 0, T: the chunks' tokens (written)

    Returns
    -------
    [bytes], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Chunked prefill and mixed steps".

    Examples
    --------
    >>> mixed_step_bytes(weight_bytes=100, kv_bytes_per_token=2, context_sum=30, cached_tokens=8, prefill_tokens=2)
    180
    """
    return weight_bytes + kv_bytes_per_token * (context_sum + cached_tokens + prefill_tokens)


@formula(result="nonnegative", topic="step_time", proof=_P10, decode_rows="nonnegative", context_sum="nonnegative",
         prefill_tokens="nonnegative", attention_pairs="nonnegative", **_FLOPS)
def mixed_step_flops(*, decode_rows: Any, prefill_tokens: Any, flops_per_token: Any, attention_flops_per_token: Any,
                     context_sum: Any, attention_pairs: Any) -> Any:
    """FLOPs of a mixed step [FLOP]: (D + T) F + a (S + Q).

    Parameters
    ----------
    decode_rows : [rows], >= 0 (D)
    prefill_tokens : [tokens], >= 0 (T, the chunks' tokens)
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
    context_sum : [tokens], >= 0 (S, the decode rows' contexts)
    attention_pairs : [token pairs], >= 0
        Q = sum over the chunks of :func:`chunk_attention_pairs`.

    Returns
    -------
    [FLOP], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Chunked prefill and mixed steps".

    Examples
    --------
    >>> mixed_step_flops(decode_rows=3, prefill_tokens=2, flops_per_token=10, attention_flops_per_token=1,
    ...                  context_sum=30, attention_pairs=19)
    99
    """
    rows = decode_rows + prefill_tokens
    return rows * flops_per_token + attention_flops_per_token * (context_sum + attention_pairs)


@formula(result="positive", topic="step_time", proof=_P10, overhead="nonnegative", **_MIXED, **_SIZES, **_FLOPS, **_HW)
def mixed_step_time(**kw: Any) -> Any:
    """Mixed step time [s]: max(bytes / bandwidth, FLOPs / peak) + overhead.

    Parameters
    ----------
    decode_rows, context_sum, prefill_tokens, cached_tokens, attention_pairs :
        as :func:`mixed_step_bytes` and :func:`mixed_step_flops`
    weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops_per_token,
    bandwidth, peak_flops, overhead : as :func:`step_time`

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Chunked prefill and mixed steps". With ``prefill_tokens = 0`` it
    is :func:`step_time`; with no decode row and nothing cached, :func:`prefill_step_time`.

    Examples
    --------
    >>> mixed_step_time(decode_rows=3, context_sum=30, prefill_tokens=2, cached_tokens=8, attention_pairs=19,
    ...     weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10, attention_flops_per_token=1,
    ...     bandwidth=1, peak_flops=1, overhead=0)
    180.0
    """
    mem = mixed_step_bytes.unchecked(
        weight_bytes=kw["weight_bytes"], kv_bytes_per_token=kw["kv_bytes_per_token"], context_sum=kw["context_sum"],
        cached_tokens=kw["cached_tokens"], prefill_tokens=kw["prefill_tokens"],
    ) / kw["bandwidth"]
    comp = mixed_step_flops.unchecked(
        decode_rows=kw["decode_rows"], prefill_tokens=kw["prefill_tokens"], flops_per_token=kw["flops_per_token"],
        attention_flops_per_token=kw["attention_flops_per_token"], context_sum=kw["context_sum"],
        attention_pairs=kw["attention_pairs"],
    ) / kw["peak_flops"]
    return maximum(mem, comp) + kw["overhead"]


@formula(result="positive", topic="step_time", proof="p19_prefix_caching.py", chunk_tokens="nonnegative_int",
         cached_tokens="nonnegative_int", overhead="nonnegative", **_SIZES, **_FLOPS, **_HW)
def cached_prefill_time(*, chunk_tokens: Any, cached_tokens: Any, **kw: Any) -> Any:
    """Time of a prefill of q new tokens after h tokens found in the prefix cache [s].

    The h cached tokens are not recomputed, but the q new tokens' attention reads them: the
    step is :func:`mixed_step_time` with no decode row and one chunk of q tokens after h cached
    ones (bytes W + k (h + q), FLOPs q F + a (q h + q (q + 1) / 2)). With h = 0 it is
    :func:`prefill_step_time` of q tokens; the work saved against a full prefill of h + q
    tokens is h F + a h (h + 1) / 2 FLOPs.

    Parameters
    ----------
    chunk_tokens : [tokens] int >= 0 (q, the prompt tokens computed)
    cached_tokens : [tokens] int >= 0 (h, the prompt tokens hit: :func:`prefix_cached_tokens`)
    weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops_per_token,
    bandwidth, peak_flops, overhead : as :func:`step_time`

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        An argument out of its range (naming it).

    Notes
    -----
    docs/conventions.md, "Prefix caching"; proof p19.

    Examples
    --------
    >>> cached_prefill_time(chunk_tokens=2, cached_tokens=8, weight_bytes=100, kv_bytes_per_token=2,
    ...     flops_per_token=10, attention_flops_per_token=1, bandwidth=1, peak_flops=1, overhead=0)
    120.0
    """
    pairs = chunk_attention_pairs.unchecked(chunk_tokens=chunk_tokens, cached_tokens=cached_tokens)
    return mixed_step_time.unchecked(decode_rows=0, context_sum=0, prefill_tokens=chunk_tokens,
                                     cached_tokens=cached_tokens, attention_pairs=pairs, **kw)
