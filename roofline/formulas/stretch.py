"""Decode stretches: n consecutive decode steps of a fixed batch, in closed form.

Conventions (docs/conventions.md, "One step"): a decode step of B sequences whose
contexts sum to S costs max((W + k S) / BW, (B F + a S) / peak) + t0
(:func:`roofline.formulas.step_time`). In a stretch the batch is fixed and every
sequence's context grows by one per step, so step j (0-based) has context sum S + B j
and its memory and compute times are two lines in j,

    memory_j = m0 + ms j,   compute_j = c0 + cs j,
    m0 = (W + k S) / BW,  ms = k B / BW,  c0 = (B F + a S) / peak,  cs = a B / peak.

They meet at the crossover j* = (c0 - m0) / (ms - cs): the line with the smaller slope
is on top for the K = max(0, floor(j*) + 1) steps j <= j* and the other after, so the
sum of n step times is two arithmetic series (:func:`stretch_time`), and the first n
whose cumulative time reaches a time t solves a quadratic in n per regime
(:func:`stretch_steps_until`). Paged KV: B sequences of context c hold
B ceil((c + n) / b) blocks after n steps (:func:`stretch_blocks`), more than a pool of
P blocks from n = max(0, b floor(P / B) - c + 1) on (:func:`stretch_pool_overflow_step`).

Exactness: int and Fraction inputs give exact results (ints are divided exactly, as
Fractions); the step counts are found with integer square roots and checked by
evaluating the prefix sums at n - 1 and n, so they are exact, never rounded. Floats
give floats (step counts are computed exactly from the floats' binary values); numpy
arrays are evaluated element by element.

The line kernels (:func:`lines_sum`, :func:`lines_steps_until`, :func:`line_regimes`)
take the four line coefficients directly; the event engine (``roofline.sim.stretch``)
calls them on integer ticks. They are not registered (their inputs are not the
model's quantities); the registered formulas are built on them.

Derivations: ``roofline.symbolic.stretch``. Proof: ``proofs/p13_decode_stretch.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from ._core import formula, maximum

__all__ = [
    "stretch_crossover",
    "stretch_time",
    "stretch_time_no_overlap",
    "stretch_steps_until",
    "stretch_steps_until_no_overlap",
    "stretch_blocks",
    "stretch_pool_overflow_step",
]

_P13 = "p13_decode_stretch.py"

_SIZES: dict[str, Any] = dict(weight_bytes="positive", kv_bytes_per_token="nonnegative")
_FLOPS: dict[str, Any] = dict(flops_per_token="positive", attention_flops_per_token="nonnegative")
_HW: dict[str, Any] = dict(bandwidth="positive", peak_flops="positive")
_DECODE: dict[str, Any] = dict(batch="positive", context_sum="nonnegative", **_SIZES, **_FLOPS, **_HW)


# --------------------------------------------------------------------------- line kernels


def line_regimes(memory0: Any, memory_slope: Any, compute0: Any, compute_slope: Any) -> tuple[Any, Any, Any, Any, Any]:
    """The two regimes of max(memory0 + memory_slope j, compute0 + compute_slope j) over j = 0, 1, ...

    Returns
    -------
    (a1, s1, a2, s2, k)
        Steps j < k are on the line a1 + s1 j, steps j >= k on a2 + s2 j; ``k`` is an int
        >= 0, or None when the slopes are equal (one line, the larger intercept, for all j).
        The first line is the one with the smaller slope (on top for j <= j*), and
        k = max(0, floor(j*) + 1) with j* = (compute0 - memory0) / (memory_slope - compute_slope).
    """
    if memory_slope == compute_slope:
        top = compute0 if compute0 >= memory0 else memory0
        return top, memory_slope, top, memory_slope, None
    q = (compute0 - memory0) // (memory_slope - compute_slope)  # floor(j*), exact for int and Fraction
    if isinstance(q, float) and not math.isfinite(q):  # pragma: no cover - float overflow only
        return (compute0, compute_slope, compute0, compute_slope, None) if compute_slope < memory_slope \
            else (memory0, memory_slope, memory0, memory_slope, None)
    k = int(q) + 1 if q >= 0 else 0
    if compute_slope < memory_slope:
        return compute0, compute_slope, memory0, memory_slope, k
    return memory0, memory_slope, compute0, compute_slope, k


def line_sum(intercept: Any, slope: Any, lo: int, hi: int) -> Any:
    """sum_{j=lo}^{hi-1} (intercept + slope j), for integers 0 <= lo <= hi."""
    return intercept * (hi - lo) + slope * ((hi * (hi - 1) - lo * (lo - 1)) // 2)


def lines_sum(memory0: Any, memory_slope: Any, compute0: Any, compute_slope: Any, overhead: Any, steps: int) -> Any:
    """sum_{j=0}^{steps-1} max(memory0 + memory_slope j, compute0 + compute_slope j) + overhead (closed form)."""
    a1, s1, a2, s2, k = line_regimes(memory0, memory_slope, compute0, compute_slope)
    if k is None or steps <= k:
        return line_sum(a1, s1, 0, steps) + overhead * steps
    return line_sum(a1, s1, 0, k) + line_sum(a2, s2, k, steps) + overhead * steps


def _as_exact(x: Any) -> Any:
    return Fraction(x) if isinstance(x, float) else x


def line_steps_until(first: Any, slope: Any, need: Any) -> int:
    """Smallest i >= 0 with sum_{j=0}^{i-1} (first + slope j) >= need, for first > 0 and slope >= 0 (exact).

    The quadratic (slope / 2) i^2 + (first - slope / 2) i = need is solved with an integer
    square root on integers scaled by a common denominator (ints, the stretch clock's ticks, as they
    are); the estimate is then checked by evaluating the scaled prefix sum at i - 1 and i (and moved,
    at most a step or two).
    """
    if need <= 0:
        return 0
    if type(first) is int and type(slope) is int and type(need) is int:  # the stretch clock's ticks: no scaling
        f, s, w = first, slope, need
    else:
        first, slope, need = _as_exact(first), _as_exact(slope), _as_exact(need)
        scale = 1
        for v in (first, slope, need):
            if isinstance(v, Fraction):
                scale = math.lcm(scale, v.denominator)
        f, s, w = int(first * scale), int(slope * scale), int(need * scale)
    if s == 0:
        i = -(-w // f)
    else:
        estimate = _root_estimate(f, s, w) if max(f.bit_length(), w.bit_length()) > 256 else None
        if estimate is None:
            q = 2 * f - s
            r = math.isqrt(q * q + 8 * s * w)
            i = max(0, -((q - r) // (2 * s)))  # ceil((r - q) / (2 s)), within one of the root's ceiling
        else:
            i = estimate
    while f * i + s * (i * (i - 1) // 2) < w:
        i += 1
    while i > 0 and f * (i - 1) + s * ((i - 1) * (i - 2) // 2) >= w:
        i -= 1
    return i


def _root_estimate(f: int, s: int, w: int) -> int | None:
    """ceil of the root of (s / 2) i^2 + (f - s / 2) i = w, estimated in floats from the ratios s / f and
    w / f (integers of thousands of bits, a mixture of experts' ticks, make the exact integer square root
    the cost of a run); the caller settles it exactly by the prefix sums. None if the ratios leave the
    float range or the estimate is too large to trust to a step."""
    try:
        x, y = s / f, w / f  # correctly rounded; 1 + 1e-16 relative
    except OverflowError:
        return None
    q = 2.0 - x
    r = math.sqrt(q * q + 8.0 * x * y)
    root = 4.0 * y / (q + r) if q > 0 else (r - q) / (2.0 * x)  # no cancellation either way
    if not math.isfinite(root) or root > 2.0 ** 40:
        return None
    return max(0, math.ceil(root))


def lines_steps_until(memory0: Any, memory_slope: Any, compute0: Any, compute_slope: Any, overhead: Any,
                      target: Any) -> int:
    """Smallest n >= 0 with :func:`lines_sum` (n) >= target (exact for int and Fraction).

    Requires every step time to be > 0 (memory0 > 0 or compute0 > 0, slopes >= 0).
    """
    if target <= 0:
        return 0
    a1, s1, a2, s2, k = line_regimes(memory0, memory_slope, compute0, compute_slope)
    if k is not None:
        at_k = line_sum(a1, s1, 0, k) + overhead * k
        if target > at_k:
            return k + line_steps_until(a2 + s2 * k + overhead, s2, target - at_k)
    return line_steps_until(a1 + overhead, s1, target)


# --------------------------------------------------------------------------- helpers


def _exact(x: Any) -> Any:
    """``Fraction(x)`` for an int (so int / int stays exact); anything else unchanged."""
    if isinstance(x, int) and not isinstance(x, bool):
        return Fraction(x)
    return x


def _lines(batch: Any, context_sum: Any, weight_bytes: Any, kv_bytes_per_token: Any, flops_per_token: Any,
           attention_flops_per_token: Any, bandwidth: Any, peak_flops: Any) -> tuple[Any, Any, Any, Any]:
    bw, peak = _exact(bandwidth), _exact(peak_flops)
    return ((weight_bytes + kv_bytes_per_token * context_sum) / bw, kv_bytes_per_token * batch / bw,
            (batch * flops_per_token + attention_flops_per_token * context_sum) / peak,
            attention_flops_per_token * batch / peak)


def _scalar(x: Any) -> Any:
    """A numpy scalar as a Python number (object arrays already hold Python ints)."""
    return x.item() if isinstance(x, np.generic) else x


def _elementwise(kernel: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Apply a scalar kernel to broadcast numpy arrays; float array out (None -> inf)."""
    names = list(kwargs)
    arrays = np.broadcast_arrays(*(np.asarray(kwargs[n]) for n in names))
    out = np.empty(arrays[0].shape, dtype=float)
    for index in np.ndindex(out.shape):
        value = kernel(**{n: _scalar(a[index]) for n, a in zip(names, arrays, strict=True)})
        out[index] = np.inf if value is None else float(value)
    return out


def _vectorized(kernel: Callable[..., Any]) -> Callable[..., Any]:
    def run(**kw: Any) -> Any:
        if any(isinstance(v, np.ndarray) for v in kw.values()):
            return _elementwise(kernel, kw)
        return kernel(**kw)

    return run


def _decode_lines(kw: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    return _lines(kw["batch"], kw["context_sum"], kw["weight_bytes"], kw["kv_bytes_per_token"],
                  kw["flops_per_token"], kw["attention_flops_per_token"], kw["bandwidth"], kw["peak_flops"])


def _crossover(**kw: Any) -> Any:
    m0, ms, c0, cs = _decode_lines(kw)
    if ms == cs:
        return None
    return (c0 - m0) / (ms - cs)


def _time(**kw: Any) -> Any:
    m0, ms, c0, cs = _decode_lines(kw)
    return lines_sum(m0, ms, c0, cs, kw["overhead"], kw["steps"])


def _time_no_overlap(**kw: Any) -> Any:
    m0, ms, c0, cs = _decode_lines(kw)
    return line_sum(m0 + c0 + kw["overhead"], ms + cs, 0, kw["steps"])


def _until(**kw: Any) -> Any:
    m0, ms, c0, cs = _decode_lines(kw)
    return lines_steps_until(m0, ms, c0, cs, kw["overhead"], kw["target_time"])


def _until_no_overlap(**kw: Any) -> Any:
    m0, ms, c0, cs = _decode_lines(kw)
    return line_steps_until(m0 + c0 + kw["overhead"], ms + cs, kw["target_time"])


# --------------------------------------------------------------------------- registered formulas


@formula(topic="stretch", proof=_P13, none_when_infinite=True, **_DECODE)
def stretch_crossover(**kw: Any) -> Any:
    """Step index where a stretch's memory and compute times meet, j* = (c0 - m0) / (ms - cs) [steps].

    Parameters
    ----------
    batch : [sequences], > 0
        B, fixed over the stretch.
    context_sum : [tokens], >= 0
        S, the sum of the contexts at the stretch's first step (step 0); step j has S + B j.
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
    bandwidth : [bytes/s], > 0
    peak_flops : [FLOP/s], > 0

    Returns
    -------
    [steps], a real number (negative: the swap happened before the stretch), or None when
    the two slopes k B / BW and a B / peak are equal (the times never swap; inf in arrays).

    Raises
    ------
    InvalidValueError
        An argument out of its domain.

    Notes
    -----
    Before j* the step is bound by the resource whose time grows more slowly per step
    (usually compute: a / peak < k / BW), after it by the other (docs/conventions.md,
    "One step"). Derived with ``solve`` in ``roofline.symbolic.stretch``.

    Examples
    --------
    Llama 3.1 8B on H100 SXM, batch 512 starting at 100 tokens each: compute-bound for
    steps 0 to 50, memory-bound from step 51 on.

    >>> j = stretch_crossover(batch=512, context_sum=51_200, weight_bytes=16_060_522_496,
    ...     kv_bytes_per_token=131_072, flops_per_token=15_009_316_864, attention_flops_per_token=524_288,
    ...     bandwidth=3_350_000_000_000, peak_flops=989_400_000_000_000)
    >>> round(float(j), 2)
    50.44
    """
    return _vectorized(_crossover)(**kw)


@formula(result="nonnegative", topic="stretch", proof=_P13, steps="nonnegative_int", overhead="nonnegative",
         **_DECODE)
def stretch_time(**kw: Any) -> Any:
    """Time of n consecutive decode steps of a fixed batch, roofline max form [s].

    Parameters
    ----------
    steps : [steps], int >= 0
        n.
    batch, context_sum, weight_bytes, kv_bytes_per_token, flops_per_token,
    attention_flops_per_token, bandwidth, peak_flops : as :func:`stretch_crossover`
    overhead : [s], >= 0 (per step)

    Returns
    -------
    [s], sum over j = 0..n-1 of step_time(batch, context_sum + batch j); exact for int and
    Fraction inputs; float array for numpy arrays.

    Raises
    ------
    InvalidValueError
        An argument out of its domain.

    Notes
    -----
    Closed form: K = max(0, floor(j*) + 1) steps on the smaller-slope line, the rest on the
    other, each an arithmetic series (``roofline.symbolic.stretch``); equals the sum of
    :func:`roofline.formulas.step_time` over the steps exactly (docs/conventions.md,
    "One step"). Cost O(1) whatever n.

    Examples
    --------
    Two steps of batch 1 (memory time 2 + j, compute time 3) with overhead 1: 4 + 4.

    >>> stretch_time(steps=2, batch=1, context_sum=1, weight_bytes=1, kv_bytes_per_token=1, flops_per_token=3,
    ...     attention_flops_per_token=0, bandwidth=1, peak_flops=1, overhead=1)
    Fraction(8, 1)
    """
    return _vectorized(_time)(**kw)


@formula(result="nonnegative", topic="stretch", proof=_P13, steps="nonnegative_int", overhead="nonnegative",
         **_DECODE)
def stretch_time_no_overlap(**kw: Any) -> Any:
    """Time of n consecutive decode steps, no-overlap form (memory + compute + overhead per step) [s].

    Parameters and Raises as :func:`stretch_time`.

    Returns
    -------
    [s], sum over j = 0..n-1 of step_time_no_overlap(batch, context_sum + batch j).

    Examples
    --------
    >>> stretch_time_no_overlap(steps=2, batch=1, context_sum=1, weight_bytes=1, kv_bytes_per_token=1,
    ...     flops_per_token=3, attention_flops_per_token=0, bandwidth=1, peak_flops=1, overhead=1)
    Fraction(13, 1)
    """
    return _vectorized(_time_no_overlap)(**kw)


@formula(result="nonnegative_int", topic="stretch", proof=_P13, target_time="nonnegative",
         overhead="nonnegative", **_DECODE)
def stretch_steps_until(**kw: Any) -> Any:
    """First step count n whose cumulative stretch time reaches a time: min n with stretch_time(n) >= t [steps].

    Parameters
    ----------
    target_time : [s], >= 0
        t, measured from the stretch's start (e.g. the next arrival): the stretch's first
        step boundary at or after it is the end of step n.
    batch, context_sum, weight_bytes, kv_bytes_per_token, flops_per_token,
    attention_flops_per_token, bandwidth, peak_flops, overhead : as :func:`stretch_time`

    Returns
    -------
    [steps], int >= 0 (0 for t = 0); float array for numpy arrays.

    Raises
    ------
    InvalidValueError
        An argument out of its domain.

    Notes
    -----
    Each regime's prefix sum is a quadratic in n; its larger root's ceiling is found with
    an integer square root and checked by evaluating :func:`stretch_time` at n - 1 and n,
    so the count is exact for int and Fraction inputs (``roofline.symbolic.stretch``).

    Examples
    --------
    Steps of 4, 4, 5, 6, ... (memory 2 + j, compute 3, overhead 1): 8 s are reached after 2.

    >>> kw = dict(batch=1, context_sum=1, weight_bytes=1, kv_bytes_per_token=1, flops_per_token=3,
    ...           attention_flops_per_token=0, bandwidth=1, peak_flops=1, overhead=1)
    >>> stretch_steps_until(target_time=8, **kw), stretch_steps_until(target_time=9, **kw)
    (2, 3)
    """
    return _vectorized(_until)(**kw)


@formula(result="nonnegative_int", topic="stretch", proof=_P13, target_time="nonnegative",
         overhead="nonnegative", **_DECODE)
def stretch_steps_until_no_overlap(**kw: Any) -> Any:
    """First step count n with stretch_time_no_overlap(n) >= t [steps].

    Parameters, Returns and Raises as :func:`stretch_steps_until`.

    Examples
    --------
    >>> stretch_steps_until_no_overlap(target_time=13, batch=1, context_sum=1, weight_bytes=1,
    ...     kv_bytes_per_token=1, flops_per_token=3, attention_flops_per_token=0, bandwidth=1, peak_flops=1,
    ...     overhead=1)
    2
    """
    return _vectorized(_until_no_overlap)(**kw)


@formula(result="nonnegative_int", topic="stretch", proof=_P13, batch="positive_int", context="nonnegative_int",
         steps="nonnegative_int", block_size="positive_int")
def stretch_blocks(*, batch: Any, context: Any, steps: Any, block_size: Any) -> Any:
    """Blocks B sequences of context c hold after n more decode steps: B ceil((c + n) / b) [blocks].

    Parameters
    ----------
    batch : [sequences], int > 0
    context : [tokens], int >= 0
        KV tokens each sequence holds before the stretch.
    steps : [steps], int >= 0
    block_size : [tokens/block], int > 0

    Returns
    -------
    [blocks], int or integer array.

    Raises
    ------
    InvalidValueError
        An argument out of its domain.

    Notes
    -----
    A sequence holding c tokens needs ceil(c / b) blocks (docs/conventions.md, "Memory");
    a batch of unequal contexts needs the sum of this over its groups of equal context.

    Examples
    --------
    >>> stretch_blocks(batch=10, context=16, steps=1, block_size=16)
    20
    """
    return batch * -(-(context + steps) // block_size)


@formula(result="nonnegative_int", topic="stretch", proof=_P13, batch="positive_int", context="nonnegative_int",
         block_size="positive_int", pool_blocks="nonnegative_int")
def stretch_pool_overflow_step(*, batch: Any, context: Any, block_size: Any, pool_blocks: Any) -> Any:
    """First step count n at which B sequences of context c need more than a pool of P blocks [steps].

    Parameters
    ----------
    batch : [sequences], int > 0
    context : [tokens], int >= 0
    block_size : [tokens/block], int > 0
    pool_blocks : [blocks], int >= 0
        P, the blocks the batch may hold.

    Returns
    -------
    [steps], int >= 0: min n with :func:`stretch_blocks` (n) > P, = max(0, b floor(P / B) - c + 1)
    (0: already over the pool).

    Raises
    ------
    InvalidValueError
        An argument out of its domain.

    Examples
    --------
    10 sequences of 16 tokens in 16-token blocks, pool of 25 blocks: they fit 2 blocks
    each up to 32 tokens, so the 17th step needs a third.

    >>> stretch_pool_overflow_step(batch=10, context=16, block_size=16, pool_blocks=25)
    17
    """
    return maximum(0, block_size * (pool_blocks // batch) - context + 1)
