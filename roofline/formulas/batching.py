"""Batching: serial waits, static batching's useful share and waits, expected useful share.

Conventions (../shared/design/CONVENTIONS.md, "Serving policies"):

* one by one (serial), all n requests at t = 0, equal service time s: request j
  finishes at j s and waits (j - 1) s before its own work starts; mean wait (n - 1) s / 2;
* static batching: a batch of B requests runs until its longest request finishes
  (``length_max`` steps), finished rows keep their slot, everything is handed back at the
  end, nobody joins a running batch. Useful share = sum(O_i) / (B x max O_i);
* expected useful share for B iid output lengths X_i: E[sum X_i / (B max X_i)], which
  equals E[X_1 / max X_i] by symmetry. Three length laws:

  - continuous uniform with relative ``spread`` s = (high - low) / (high + low) (half-width
    over mean, 0 < s <= 1): a closed form in Lerch's transcendent (logarithms for each
    integer B); the fast path evaluates it to double precision (float), exact at s = 1;
  - discrete uniform on {min_length, ..., min_length + length_range}: a finite sum over
    order statistics, evaluated exactly (Fraction) for int inputs;
  - exponential of mean ``scale`` truncated at ``cap`` (samples above the cap are
    discarded, as in the Anyscale benchmark): no closed form; the fast path integrates
    numerically (composite Gauss-Legendre with numpy, about 1e-14 relative), float.

  The lesson's approximation "mean / longest" is :func:`approx_useful_share_uniform`,
  read as E[X] / E[max] (our choice; the lesson does not say which "longest").

Fast paths are keyword-only, with no float literals in the exact ones; the
expected shares' registry entries carry ``exact`` (False where the result is a float)
and ``max_test_value`` (bound on inputs for exact or symbolic evaluation in tests).
Derivations: ``roofline.symbolic.batching``. Proofs:
``proofs/p01_one_request.py`` (serial waits), ``proofs/p05_static_batching.py``,
``proofs/p06_expected_useful_share.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from ._core import formula

__all__ = [
    "static_useful_share",
    "serial_completion_time",
    "serial_wait",
    "serial_mean_wait",
    "static_handback_delay",
    "static_join_wait",
    "expected_useful_share_uniform",
    "approx_useful_share_uniform",
    "expected_useful_share_discrete_uniform",
    "expected_useful_share_exponential",
]

_P1 = "p01_one_request.py"
_P5 = "p05_static_batching.py"
_P6 = "p06_expected_useful_share.py"


def _exact(x: Any) -> Any:
    """``Fraction(x)`` for an int (so int / int stays exact); anything else unchanged."""
    if isinstance(x, int) and not isinstance(x, bool):
        return Fraction(x)
    return x


def _elementwise(kernel: Callable[..., Any], **kwargs: Any) -> Any:
    """Apply a scalar kernel to broadcast numpy arrays; float array out."""
    names = list(kwargs)
    arrays = np.broadcast_arrays(*(np.asarray(kwargs[n]) for n in names))
    out = np.empty(arrays[0].shape, dtype=float)
    for index in np.ndindex(out.shape):
        values = {n: getattr(a[index], "item", lambda v=a[index]: v)() for n, a in zip(names, arrays, strict=False)}
        out[index] = float(kernel(**values))
    return out


def _any_array(*values: Any) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


# --------------------------------------------------------------------------- static batching


@formula(result="share",
         topic="batching", proof=_P5, batch="positive_int", length_sum="positive", length_max="positive",
         requires=("length_sum", "length_max <= length_sum <= batch x length_max",
                   lambda batch, length_sum, length_max: (length_max <= length_sum)
                   & (length_sum <= batch * length_max)))
def static_useful_share(*, batch: Any, length_sum: Any, length_max: Any) -> Any:
    """Useful share of a static batch: sum(O_i) / (B x max O_i) [1].

    Parameters
    ----------
    batch : int > 0 [sequences]
        B, the rows of the batch.
    length_sum : > 0 [tokens]
        sum of the rows' output lengths O_i (or of their prompt lengths, for prompt padding).
    length_max : > 0 [tokens]
        max O_i: the batch runs this many steps.

    Returns
    -------
    [dimensionless], in (0, 1] when max <= sum <= B max (the caller's lengths); scalar
    or the broadcast shape; exact (Fraction) for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A non-positive or non-finite argument, a non-integer batch, or a sum outside
        [length_max, batch x length_max] (impossible for a batch's lengths).

    Notes
    -----
    Every one of the ``length_max`` steps occupies all B rows; row i is useful in O_i of
    them (CONVENTIONS.md, "Static batching"). Case Q4: outputs 6, 50, 300 -> 356 / 900;
    50, 500 -> 55 %; the lesson's 100, 200, 300, 1,000 -> 40 %. Proof:
    proofs/p05_static_batching.py.

    Examples
    --------
    >>> static_useful_share(batch=4, length_sum=100 + 200 + 300 + 1000, length_max=1000)
    Fraction(2, 5)
    >>> static_useful_share(batch=3, length_sum=6 + 50 + 300, length_max=300)
    Fraction(89, 225)
    """
    return _exact(length_sum) / (batch * length_max)


# --------------------------------------------------------------------------- serial waits


@formula(result="nonnegative", topic="batching", proof=_P1, position="positive_int", service_time="nonnegative")
def serial_completion_time(*, position: Any, service_time: Any) -> Any:
    """When request j finishes, served one by one from t = 0 with equal service times [s].

    Parameters
    ----------
    position : int > 0
        j, the request's place in the first-come-first-served queue (1 = first).
    service_time : [s] >= 0
        Time to serve one request alone (its prefill and decode steps).

    Returns
    -------
    [s], j x s; scalar or broadcast shape; exact for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive position, a negative or non-finite service time.

    Notes
    -----
    The sum of the service times of requests 1..j (CONVENTIONS.md, "One-by-one"). Proof:
    proofs/p01_one_request.py.

    Examples
    --------
    >>> serial_completion_time(position=100, service_time=2)
    200
    """
    return position * service_time


@formula(result="nonnegative", topic="batching", proof=_P1, position="positive_int", service_time="nonnegative")
def serial_wait(*, position: Any, service_time: Any) -> Any:
    """Time request j waits before its own work starts, served one by one from t = 0 [s].

    Parameters
    ----------
    position : int > 0
        j (1 = first served).
    service_time : [s] >= 0
        Equal service time of every request.

    Returns
    -------
    [s], (j - 1) x s: it waits for all j - 1 requests before it; scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive position, a negative or non-finite service time.

    Notes
    -----
    The lesson's "the last of 100 waits for all 99": j = 100 waits 99 s. Proof:
    proofs/p01_one_request.py.

    Examples
    --------
    >>> serial_wait(position=100, service_time=Fraction(3, 2))
    Fraction(297, 2)
    """
    return (position - 1) * service_time


@formula(result="nonnegative", topic="batching", proof=_P1, requests="positive_int", service_time="nonnegative")
def serial_mean_wait(*, requests: Any, service_time: Any) -> Any:
    """Mean wait before work starts over n requests served one by one from t = 0 [s].

    Parameters
    ----------
    requests : int > 0
        n, all arriving at t = 0.
    service_time : [s] >= 0
        Equal service time of every request.

    Returns
    -------
    [s], (n - 1) s / 2; scalar or broadcast shape; exact for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive count, a negative or non-finite service time.

    Notes
    -----
    (1 / n) sum_{j=1}^{n} (j - 1) s, summed with SymPy. Proof: proofs/p01_one_request.py.

    Examples
    --------
    >>> serial_mean_wait(requests=100, service_time=2)
    Fraction(99, 1)
    """
    return _exact(requests - 1) * service_time / 2


@formula(result="nonnegative", topic="batching", proof=_P5, output_tokens="positive_int", length_max="positive",
         step_time="nonnegative", requires=("output_tokens", "output_tokens <= length_max",
                                            lambda output_tokens, length_max, step_time: output_tokens <= length_max))
def static_handback_delay(*, output_tokens: Any, length_max: Any, step_time: Any) -> Any:
    """How long a finished answer waits in a static batch before it is handed back [s].

    Parameters
    ----------
    output_tokens : int > 0 [tokens]
        O, the request's output length: its last token comes after O steps.
    length_max : > 0 [tokens]
        The batch's longest output: the batch hands everything back after it.
    step_time : [s] >= 0
        Time of one step (taken equal for every step, prefill included).

    Returns
    -------
    [s], (length_max - O) x step time; >= 0 when O <= length_max; broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-positive or non-integer output length, a negative or non-finite time, or
        an output longer than the batch's longest (``output_tokens > length_max``).

    Notes
    -----
    Ready after O steps (the prefill makes the first token, CONVENTIONS.md), handed back
    after length_max steps. The lesson: at ~5 ms per step the 100-token answer is ready
    after 0.5 s and handed back after 5 s (4.5 s later). Proof: proofs/p05_static_batching.py.

    Examples
    --------
    >>> static_handback_delay(output_tokens=100, length_max=1000, step_time=Fraction(5, 1000))
    Fraction(9, 2)
    """
    return (length_max - output_tokens) * step_time


@formula(result="nonnegative", topic="batching", proof=_P5, arrival_time="nonnegative", length_max="positive",
         step_time="nonnegative",
         requires=("arrival_time", "arrival_time <= length_max x step_time (an arrival before the batch ends)",
                   lambda arrival_time, length_max, step_time: arrival_time <= length_max * step_time))
def static_join_wait(*, arrival_time: Any, length_max: Any, step_time: Any) -> Any:
    """How long a request arriving after a static batch started waits before its work starts [s].

    Parameters
    ----------
    arrival_time : [s] >= 0
        Arrival, measured from the start of the running batch (<= its end).
    length_max : > 0 [tokens]
        The running batch's longest output (its number of steps).
    step_time : [s] >= 0

    Returns
    -------
    [s], length_max x step time - arrival time; broadcast shape.

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or an arrival after the batch's end.

    Notes
    -----
    No request joins a running static batch (CONVENTIONS.md); the next batch starts when
    this one ends. The lesson: arriving one ~5 ms step after a 1,000-step batch started,
    it waits 999 steps, ~5 s. Proof: proofs/p05_static_batching.py.

    Examples
    --------
    >>> static_join_wait(arrival_time=Fraction(5, 1000), length_max=1000, step_time=Fraction(5, 1000))
    Fraction(999, 200)
    """
    return length_max * step_time - arrival_time


# --------------------------------------------------------------------------- continuous uniform


def _uniform_share_kernel(*, batch: int, spread: Any) -> Any:
    """E[X_1 / max] for B iid uniform lengths of relative spread s (see the formula)."""
    if batch == 1:
        return _exact(1)
    if spread == 1:
        return Fraction(batch + 1, 2 * batch) if isinstance(spread, (int, Fraction)) else (batch + 1) / (2 * batch)
    s = float(spread)
    r = 2 * s / (1 - s)  # (high - low) / low
    if r <= 3:
        # B Phi(-r, 1, B) = (1 - x) 2F1(1, 1; B + 1; x), x = r / (1 + r) <= 3/4 (Pfaff),
        # a series of positive terms with ratio < x.
        x = 2 * s / (1 + s)
        term = total = float(1)
        n = 0
        while term > total * 2**-60:
            term *= (n + 1) / (batch + 1 + n) * x
            total += term
            n += 1
        low_over_max = (1 - x) * total
    else:
        # J_n = Integral(u^n / (1 + r u), u in [0, 1]): J_0 = log(1 + r) / r and
        # J_n = (1/n - J_{n-1}) / r, stable forwards for r > 1 (errors shrink by 1/r).
        j = math.log1p(r) / r
        for n in range(1, batch):
            j = (1 / n - j) / r
        low_over_max = batch * j
    # share = (B + 1) / (2B) + (B - 1) / (2B) E[low / M]
    return (batch + 1) / (2 * batch) + (batch - 1) / (2 * batch) * low_over_max


@formula(result="share",
         topic="batching", proof=_P6, batch="positive_int", spread="share", exact=False, max_test_value=1000)
def expected_useful_share_uniform(*, batch: Any, spread: Any) -> Any:
    """Expected useful share of a static batch of B iid continuous-uniform output lengths [1].

    Lengths are uniform on [mu (1 - s), mu (1 + s)] (any mean mu; the share does not
    depend on it): ``spread`` s = (high - low) / (high + low), half-width over mean.

    Parameters
    ----------
    batch : int > 0 [sequences]
        B.
    spread : in (0, 1] [dimensionless]
        s; 1 means lengths uniform on [0, 2 mu]. (s -> 0: all lengths equal, share -> 1.)

    Returns
    -------
    [dimensionless], E[sum X_i / (B max X_i)] in [1/2, 1]; float, except an exact
    Fraction at s = 1 or B = 1 with exact inputs; numpy arrays give a float array.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive batch, a spread outside (0, 1].

    Notes
    -----
    Derived in ``roofline.symbolic.batching`` by conditioning on the max and integrating
    over its density for symbolic B:

        share = (B + 1) / (2B) + (B - 1)/2 * lerchphi(-r, 1, B),  r = 2 s / (1 - s),

    and (B + 1) / (2B) at s = 1. Evaluated with the Pfaff series of
    B lerchphi(-r, 1, B) = 2F1(1, B; B + 1; -r) for r <= 3 and a stable forward
    recurrence for r > 3 (relative error about 1e-15 against mpmath). Falls as s and
    B grow (p06). CONVENTIONS.md, "Static batching". Proof:
    proofs/p06_expected_useful_share.py.

    References
    ----------
    The lesson (one-by-one vs static batching), right-hand chart.

    Examples
    --------
    >>> expected_useful_share_uniform(batch=4, spread=1)
    Fraction(5, 8)
    >>> round(expected_useful_share_uniform(batch=4, spread=Fraction(1, 2)), 6)
    0.772005
    """
    if _any_array(batch, spread):
        return _elementwise(_uniform_share_kernel, batch=batch, spread=spread)
    return _uniform_share_kernel(batch=batch, spread=spread)


@formula(result="share", topic="batching", proof=_P6, batch="positive_int", spread="share")
def approx_useful_share_uniform(*, batch: Any, spread: Any) -> Any:
    """The lesson's approximation of the useful share, mean / longest, for uniform lengths [1].

    Parameters
    ----------
    batch : int > 0 [sequences]
    spread : in (0, 1] [dimensionless]
        As :func:`expected_useful_share_uniform`.

    Returns
    -------
    [dimensionless], (B + 1) / (B + 1 + s (B - 1)); scalar or broadcast shape; exact
    for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive batch, a spread outside (0, 1].

    Notes
    -----
    "Longest" read as the expected longest of B, E[max] = low + (high - low) B / (B + 1)
    (integrated from the density of the max), so the approximation is E[X] / E[max]
    rather than E[X / max]. It equals the exact share at s = 1 and is within a few
    per cent elsewhere (p06). Proof: proofs/p06_expected_useful_share.py.

    Examples
    --------
    >>> approx_useful_share_uniform(batch=4, spread=1)
    Fraction(5, 8)
    >>> approx_useful_share_uniform(batch=4, spread=Fraction(1, 2))
    Fraction(10, 13)
    """
    return _exact(batch + 1) / (batch + 1 + spread * (batch - 1))


# --------------------------------------------------------------------------- discrete uniform


def _discrete_share_kernel(*, batch: int, min_length: int, length_range: int) -> Fraction:
    """Exact E[X_1 / max] for integer lengths uniform on {a, ..., a + r} (see the formula)."""
    a, n, power = min_length, length_range + 1, batch - 1
    total = Fraction(0)
    previous = 0  # (j - 1)^(B - 1), with 0^0 = 1 handled by the loop (j = 1 first)
    for j in range(1, n + 1):
        current = j**power
        m = a + j - 1
        # X_1 = m, others <= m: m / m; X_1 = x < m, max of others = m: x / m (sum over x closed).
        total += Fraction(2 * m * current + (current - previous) * (j - 1) * (m + a - 1), 2 * m)
        previous = current
    return total / n**batch


@formula(result="share", topic="batching", proof=_P6, batch="positive_int", min_length="positive_int",
         length_range="nonnegative_int", max_test_value=24)
def expected_useful_share_discrete_uniform(*, batch: Any, min_length: Any, length_range: Any) -> Any:
    """Expected useful share of a static batch of B iid integer lengths, uniform on a range [1].

    Parameters
    ----------
    batch : int > 0 [sequences]
        B.
    min_length : int > 0 [tokens]
        a, the shortest possible output.
    length_range : int >= 0 [tokens]
        r: lengths are uniform on {a, a + 1, ..., a + r} (n = r + 1 values).

    Returns
    -------
    [dimensionless], E[sum X_i / (B max X_i)], an exact Fraction (ints in); numpy
    arrays give a float array (each element computed exactly, then rounded).

    Raises
    ------
    InvalidValueError
        A non-integer or out-of-range argument.

    Notes
    -----
    Summed over the joint law of X_1 and the max M' of the other B - 1 rows, with
    P(M' <= m) = ((m - a + 1) / n)^(B - 1):

        share = n^-B sum_{j=1}^{n} [ j^(B-1) + (j^(B-1) - (j-1)^(B-1)) (j-1)(2a + j - 2) / (2 (a + j - 1)) ]

    (``roofline.symbolic.batching``, a finite ``Sum``). Cost: n big-integer terms of
    about B log2(n) bits. Proof: proofs/p06_expected_useful_share.py; cross-checked by
    Monte Carlo over the reference scheduler in tests/test_batching.py.

    Examples
    --------
    >>> expected_useful_share_discrete_uniform(batch=2, min_length=1, length_range=1)
    Fraction(7, 8)
    >>> expected_useful_share_discrete_uniform(batch=5, min_length=7, length_range=0)
    Fraction(1, 1)
    """
    if _any_array(batch, min_length, length_range):
        return _elementwise(_discrete_share_kernel, batch=batch, min_length=min_length, length_range=length_range)
    return _discrete_share_kernel(batch=int(batch), min_length=int(min_length), length_range=int(length_range))


# --------------------------------------------------------------------------- truncated exponential


@lru_cache(maxsize=1)
def _gauss_legendre() -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(20)


def _psi(y: np.ndarray) -> np.ndarray:
    """E[X | X <= m] / m for an exponential of mean 1 at m = y: 1/y - 1/(e^y - 1)."""
    small = y < 1 / 8
    safe = np.where(small, 1, y)
    direct = 1 / safe - 1 / np.expm1(np.minimum(safe, 700))  # e^700 ~ 1e304: 1/(e^y - 1) is 0 beyond
    # Bernoulli series 1/2 - y/12 + y^3/720 - y^5/30240 + y^7/1209600 (error < 2e-16 at 1/8).
    y2 = y * y
    series = 1 / 2 - y * (1 / 12 - y2 * (1 / 720 - y2 * (1 / 30240 - y2 / 1209600)))
    return np.where(small, series, direct)


#: Breakpoints of the quadrature: quantiles t of the max, -log t = 64, 32, ..., 2^-60.
_LOG_QUANTILES = [2**k for k in range(6, -61, -1)]


def _exponential_share_kernel(*, batch: int, scale: Any, cap: Any) -> Any:
    """E[X_1 / max] for B iid exponential(mean scale) lengths truncated at cap (numerical)."""
    if batch == 1:
        return _exact(1)
    y_cap = float(cap) / float(scale)  # the share depends on cap / scale only
    z = -math.expm1(-y_cap)  # P(X <= cap) before truncation
    # Panels between quantiles of the max, where its CDF F(y)^B = exp(-2^k).
    edges = [float(0)]
    tail = math.exp(-y_cap)  # 1 - z
    for k in _LOG_QUANTILES:
        v = math.exp(-k / batch)  # F(y) at the quantile; y = -log(1 - z v), 1 - z v = (1 - v) + v (1 - z)
        y = -math.log(-math.expm1(-k / batch) + v * tail)
        edges.append(min(y, y_cap))
    edges.append(y_cap)
    nodes, weights = _gauss_legendre()
    lo = np.array(edges[:-1])
    hi = np.array(edges[1:])
    y = lo[:, None] + (hi - lo)[:, None] * (nodes[None, :] + 1) / 2
    cdf = -np.expm1(-y) / z
    density = batch * cdf ** (batch - 1) * np.exp(-y) / z  # of the max, in y = m / scale
    integral = float(np.sum((hi - lo)[:, None] / 2 * weights[None, :] * _psi(y) * density))
    # share = 1/B + (B - 1)/B E[E[X | X <= M] / M]
    return 1 / batch + (batch - 1) / batch * integral


@formula(result="share", topic="batching", proof=_P6, batch="positive_int", scale="positive", cap="positive",
         exact=False, max_test_value=64)
def expected_useful_share_exponential(*, batch: Any, scale: Any, cap: Any) -> Any:
    """Expected useful share of a static batch of B iid truncated-exponential lengths [1].

    Lengths are exponential with mean ``scale`` before truncation, keeping only samples
    at or below ``cap`` (truncated, not clipped), as in the Anyscale benchmark.

    Parameters
    ----------
    batch : int > 0 [sequences]
        B.
    scale : > 0 [tokens]
        Mean of the exponential before truncation (Anyscale: 128).
    cap : > 0 [tokens]
        The truncation point (Anyscale: 32, 128, 512, 1,536).

    Returns
    -------
    [dimensionless], E[sum X_i / (B max X_i)]: a float (numerical integral), exactly 1
    for B = 1; numpy arrays give a float array. Depends on cap / scale only.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive batch, a non-positive or non-finite scale or cap.

    Notes
    -----
    share = 1/B + (B - 1)/B E[psi(M)], psi(m) = E[X | X <= m] / m = scale/m - 1/(e^(m/scale) - 1),
    M the max of B (CDF F^B). SymPy finds no closed form for symbolic B (for B = 2 it
    returns exponential integrals Ei), so the symbolic form in
    ``roofline.symbolic.batching`` is an unevaluated ``Integral`` and this fast path
    integrates numerically: composite 20-point Gauss-Legendre between quantiles of the
    max (about 1e-14 relative against mpmath at 30 digits). Lengths are continuous;
    the benchmark rounded them to integers (p07 reports the difference). Proof:
    proofs/p06_expected_useful_share.py; used by proofs/p07_anyscale.py.

    References
    ----------
    Anyscale, "How continuous batching enables 23x throughput in LLM inference" (2023);
    anyscale/llm-continuous-batching-benchmarks, benchmark_throughput.py
    (``capped_exponential``).

    Examples
    --------
    >>> round(expected_useful_share_exponential(batch=4, scale=128, cap=1536), 4)
    0.5097
    >>> expected_useful_share_exponential(batch=1, scale=128, cap=32)
    Fraction(1, 1)
    """
    if _any_array(batch, scale, cap):
        return _elementwise(_exponential_share_kernel, batch=batch, scale=scale, cap=cap)
    return _exponential_share_kernel(batch=int(batch), scale=scale, cap=cap)
