"""The expected useful share of a static batch over random output lengths.

Conventions (docs/conventions.md, "Useful share and slot occupancy"): the **per-batch useful share**
of a static batch is sum(O_i) / (B x max O_i) (:func:`roofline.formulas.static_useful_share`);
this topic gives its **expectation** for B iid output lengths X_i,
E[sum X_i / (B max X_i)], which equals E[X_1 / max X_i] by symmetry. Three length laws:

- continuous uniform with relative ``spread`` s = (high - low) / (high + low) (half-width
  over mean, 0 < s <= 1): a closed form in Lerch's transcendent (logarithms for each
  integer B); the fast path evaluates it to double precision (float), exact at s = 1;
- discrete uniform on {min_length, ..., min_length + length_range}: a finite sum over
  order statistics, evaluated exactly (Fraction) for int inputs;
- exponential of mean ``scale`` truncated at ``cap`` (samples above the cap are
  discarded, as in the Anyscale benchmark): no closed form; the fast path integrates
  numerically (composite Gauss-Legendre with numpy, about 1e-14 relative), float.

The lesson's approximation "mean / longest" is :func:`approx_useful_share_uniform`,
read as E[X] / E[max] (our choice; the lesson does not say which "longest"). It is also
the limit of the **long-run useful share** of a run of many batches (useful rows over
occupied rows pooled over all steps), a different quantity from the expected per-batch
share.

Fast paths are keyword-only, with no float literals in the exact ones; the registry
entries carry ``exact`` (False where the result is a float) and ``max_test_value``
(bound on inputs for exact or symbolic evaluation in tests). Derivations:
``roofline.symbolic.useful_share``. Proof: ``proofs/p06_expected_useful_share.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from ._core import formula
from .batching import _exact

__all__ = [
    "expected_useful_share_uniform",
    "approx_useful_share_uniform",
    "expected_useful_share_discrete_uniform",
    "expected_useful_share_exponential",
]

_P6 = "p06_expected_useful_share.py"


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


# --------------------------------------------------------------------------- continuous uniform


#: Largest batch whose J_{B-1} is computed by the forward recurrence (B steps); larger batches use
#: the asymptotic series of :func:`_j_large`, whose terms then shrink by at least 10^4 each.
_RECURRENCE_MAX_BATCH = 10**4


def _j_large(n: int, r: float) -> float:
    """J_n = Integral(u^n / (1 + r u), u in [0, 1]) for large n, by integrating by parts repeatedly:
    J_n = sum_k k! r^k / ((1 + r)^(k+1) (n+1)(n+2)...(n+k+1)), each term below the one before it
    by a factor k r / ((1 + r)(n + k + 1)) < k / n, stopped at float precision."""
    term = 1 / ((n + 1) * (1 + r))
    total = term
    k = 0
    while term > total * 2**-60:
        k += 1
        term *= k * r / ((1 + r) * (n + k + 1))
        total += term
    return total


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
        if batch <= _RECURRENCE_MAX_BATCH:
            j = math.log1p(r) / r
            for n in range(1, batch):
                j = (1 / n - j) / r
        else:  # the recurrence would take B steps (10^9: minutes); J_{B-1} from its asymptotic series
            j = _j_large(batch - 1, r)
        low_over_max = batch * j
    # share = (B + 1) / (2B) + (B - 1) / (2B) E[low / M]
    return (batch + 1) / (2 * batch) + (batch - 1) / (2 * batch) * low_over_max


@formula(result="share",
         topic="useful_share", proof=_P6, batch="positive_int", spread="share", exact=False, max_test_value=1000)
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
    Derived in ``roofline.symbolic.useful_share`` by conditioning on the max and integrating
    over its density for symbolic B:

        share = (B + 1) / (2B) + (B - 1)/2 * lerchphi(-r, 1, B),  r = 2 s / (1 - s),

    and (B + 1) / (2B) at s = 1. Evaluated with the Pfaff series of
    B lerchphi(-r, 1, B) = 2F1(1, B; B + 1; -r) for r <= 3 and a stable forward
    recurrence for r > 3 (relative error about 1e-15 against mpmath). Falls as s and
    B grow (p06). docs/conventions.md, "Serving policies". Proof:
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


@formula(result="share", topic="useful_share", proof=_P6, batch="positive_int", spread="share")
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


#: Largest work the exact discrete-uniform sum accepts: n values x B x log2(n + 1) bits (about 1 s here).
MAX_DISCRETE_WORK = 5 * 10**7


def _discrete_work(batch: Any, length_range: Any) -> Any:
    n = np.asarray(length_range, dtype=object) + 1
    bits = np.frompyfunc(lambda v: int(v).bit_length(), 1, 1)(n)
    return n * np.asarray(batch, dtype=object) * bits


@formula(result="share", topic="useful_share", proof=_P6, batch="positive_int", min_length="positive_int",
         length_range="nonnegative_int", max_test_value=24,
         requires=("length_range", f"(length_range + 1) x batch x log2(length_range + 2) <= {MAX_DISCRETE_WORK:,} "
                   "(the exact sum's work; use expected_useful_share_uniform for wide ranges)",
                   lambda batch, min_length, length_range: _discrete_work(batch, length_range) <= MAX_DISCRETE_WORK))
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
        A non-integer or out-of-range argument, or a sum whose work (n x B x log2(n + 1),
        n = length_range + 1) exceeds :data:`MAX_DISCRETE_WORK` (5e7, about a second): the
        exact sum grows with the range, so wide ranges are refused instead of running for hours;
        the continuous-uniform form :func:`expected_useful_share_uniform` is their approximation.

    Notes
    -----
    Summed over the joint law of X_1 and the max M' of the other B - 1 rows, with
    P(M' <= m) = ((m - a + 1) / n)^(B - 1):

        share = n^-B sum_{j=1}^{n} [ j^(B-1) + (j^(B-1) - (j-1)^(B-1)) (j-1)(2a + j - 2) / (2 (a + j - 1)) ]

    (``roofline.symbolic.useful_share``, a finite ``Sum``). Cost: n big-integer terms of
    about B log2(n) bits. Proof: proofs/p06_expected_useful_share.py; cross-checked by
    Monte Carlo over the reference scheduler in tests/test_useful_share.py.

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


@formula(result="share", topic="useful_share", proof=_P6, batch="positive_int", scale="positive", cap="positive",
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
    ``roofline.symbolic.useful_share`` is an unevaluated ``Integral`` and this fast path
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
