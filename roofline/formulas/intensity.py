"""Arithmetic intensity, the ridge point, the critical batch and the critical context.

For B sequences of equal context c (docs/conventions.md, "One step"):

* intensity I(B, c) = (B F + a B c) / (W + k B c) [FLOP/byte]
* ridge point I* = peak_flops / bandwidth [FLOP/byte]
* critical batch B*: the smallest integer batch with I >= I* (compute-bound, at
  equality too); B* = ceil(I* W / (F + a c - I* k c)) when F + a c > I* k c, and
  "none" otherwise (``None`` for scalars, ``inf`` in arrays): memory-bound at every batch.
* intensity limit as B -> infinity: (F + a c) / (k c); the critical context c* solves
  limit = I*: c* = F / (I* k - a), and is ``None``/``inf`` when I* k <= a.

Derivations (SymPy ``solve`` and ``limit``): ``roofline.symbolic.intensity``;
proof: ``proofs/p03_critical_batch.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._core import ceil, formula

__all__ = [
    "arithmetic_intensity",
    "intensity_limit",
    "ridge_point",
    "critical_batch_real",
    "critical_batch",
    "critical_context",
]

_P3 = "p03_critical_batch.py"
_MODEL: dict[str, Any] = dict(
    weight_bytes="positive", kv_bytes_per_token="nonnegative",
    flops_per_token="positive", attention_flops_per_token="nonnegative",
)


@formula(result="positive", topic="intensity", proof=_P3, batch="positive", context="nonnegative", **_MODEL)
def arithmetic_intensity(
    *, batch: Any, context: Any, weight_bytes: Any, kv_bytes_per_token: Any,
    flops_per_token: Any, attention_flops_per_token: Any,
) -> Any:
    """Arithmetic intensity of a decode step of B sequences at context c [FLOP/byte].

    Parameters
    ----------
    batch : [sequences], > 0
    context : [tokens], >= 0 (each sequence's context; 0 = weights only)
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0

    Returns
    -------
    [FLOP/byte], scalar or broadcast shape. Increasing in ``batch``, bounded by
    :func:`intensity_limit`.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    (B F + a B c) / (W + k B c).

    Examples
    --------
    >>> arithmetic_intensity(batch=8, context=0, weight_bytes=2, kv_bytes_per_token=0,
    ...                      flops_per_token=2, attention_flops_per_token=0)
    8.0
    """
    s = batch * context
    return (batch * flops_per_token + attention_flops_per_token * s) / (weight_bytes + kv_bytes_per_token * s)


@formula(result="positive", topic="intensity", proof=_P3, context="positive", kv_bytes_per_token="positive",
         flops_per_token="positive", attention_flops_per_token="nonnegative")
def intensity_limit(*, context: Any, kv_bytes_per_token: Any, flops_per_token: Any,
                    attention_flops_per_token: Any) -> Any:
    """Limit of the intensity as the batch grows without bound [FLOP/byte].

    Parameters
    ----------
    context : [tokens], > 0
    kv_bytes_per_token : [bytes/token], > 0
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0

    Returns
    -------
    [FLOP/byte], scalar or broadcast shape: (F + a c) / (k c).

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> round(intensity_limit(context=4096, kv_bytes_per_token=131_072,
    ...       flops_per_token=16_060_522_496, attention_flops_per_token=0), 1)
    29.9
    """
    return (flops_per_token + attention_flops_per_token * context) / (kv_bytes_per_token * context)


@formula(result="positive", topic="intensity", proof=_P3, peak_flops="positive", bandwidth="positive")
def ridge_point(*, peak_flops: Any, bandwidth: Any) -> Any:
    """Ridge point I* = peak FLOP/s / HBM bandwidth [FLOP/byte].

    Parameters
    ----------
    peak_flops : [FLOP/s], > 0 (dense)
    bandwidth : [bytes/s], > 0

    Returns
    -------
    [FLOP/byte], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> round(ridge_point(peak_flops=989.4e12, bandwidth=3.35e12), 1)
    295.3
    """
    return peak_flops / bandwidth


_CRIT: dict[str, Any] = dict(context="nonnegative", peak_flops="positive", bandwidth="positive", **_MODEL)


def _crit_parts(kw: dict[str, Any]) -> tuple[Any, Any]:
    ridge = kw["peak_flops"] / kw["bandwidth"]
    c = kw["context"]
    numerator = ridge * kw["weight_bytes"]
    denominator = kw["flops_per_token"] + kw["attention_flops_per_token"] * c - ridge * kw["kv_bytes_per_token"] * c
    return numerator, denominator


def _none_or_inf(value: Any, exists: Any) -> Any:
    if isinstance(exists, np.ndarray):
        return np.where(exists, value, np.inf)
    return value if exists else None


@formula(result="positive", topic="intensity", proof=_P3, none_when_infinite=True, **_CRIT)
def critical_batch_real(**kw: Any) -> Any:
    """The real batch at which intensity equals the ridge point [sequences].

    Parameters
    ----------
    context : [tokens], >= 0
    weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops_per_token : as
        :func:`arithmetic_intensity`
    peak_flops : [FLOP/s], > 0
    bandwidth : [bytes/s], > 0

    Returns
    -------
    [sequences], scalar or broadcast shape: I* W / (F + a c - I* k c); ``None``
    (scalar) or ``inf`` (array) when no batch reaches the ridge.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> round(critical_batch_real(context=0, weight_bytes=2, kv_bytes_per_token=0,
    ...     flops_per_token=2, attention_flops_per_token=0, peak_flops=989.4e12, bandwidth=3.35e12), 2)
    295.34
    """
    num, den = _crit_parts(kw)
    if isinstance(den, np.ndarray):
        exists = den > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            return _none_or_inf(num / np.where(exists, den, 1), exists)
    return num / den if den > 0 else None


@formula(result="positive_int", topic="intensity", proof=_P3, none_when_infinite=True, **_CRIT)
def critical_batch(**kw: Any) -> Any:
    """Critical batch B*: the smallest integer batch whose decode step is compute-bound.

    Parameters as :func:`critical_batch_real`.

    Returns
    -------
    [sequences], int (scalar) or float array; ``None`` (scalar) or ``inf`` (array)
    when the step is memory-bound at every batch (context at or above c*).

    Raises
    ------
    InvalidValueError

    Notes
    -----
    ceil(critical_batch_real): at B = B* the compute time is >= the memory time
    (equality counts as compute-bound). FlashMLA #75: H100 SXM, FLOPs = bytes x B -> 296.

    Examples
    --------
    >>> critical_batch(context=0, weight_bytes=2, kv_bytes_per_token=0, flops_per_token=2,
    ...     attention_flops_per_token=0, peak_flops=989.4e12, bandwidth=3.35e12)
    296
    >>> critical_batch(context=4096, weight_bytes=16_060_522_496, kv_bytes_per_token=131_072,
    ...     flops_per_token=16_060_522_496, attention_flops_per_token=0,
    ...     peak_flops=989.4e12, bandwidth=3.35e12) is None
    True
    """
    real = critical_batch_real.unchecked(**kw)
    if isinstance(real, np.ndarray):
        return np.ceil(real)
    return None if real is None else ceil(real)


@formula(result="positive", topic="intensity", proof=_P3, none_when_infinite=True, kv_bytes_per_token="positive",
         flops_per_token="positive", attention_flops_per_token="nonnegative",
         peak_flops="positive", bandwidth="positive")
def critical_context(
    *, kv_bytes_per_token: Any, flops_per_token: Any, attention_flops_per_token: Any,
    peak_flops: Any, bandwidth: Any,
) -> Any:
    """Critical context c*: above it no batch size makes a decode step compute-bound [tokens].

    Parameters
    ----------
    kv_bytes_per_token : [bytes/token], > 0
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
    peak_flops : [FLOP/s], > 0
    bandwidth : [bytes/s], > 0

    Returns
    -------
    [tokens], real scalar or broadcast array: F / (I* k - a); ``None`` (scalar) or
    ``inf`` (array) when I* k <= a (attention alone reaches the ridge).

    Raises
    ------
    InvalidValueError

    Notes
    -----
    Solves intensity_limit(c) = I* (docs/conventions.md: about 390 to 415 tokens for
    Llama 3.1 8B on H100 SXM). A critical batch exists iff context < c*.

    Examples
    --------
    >>> round(critical_context(kv_bytes_per_token=131_072, flops_per_token=16_060_522_496,
    ...     attention_flops_per_token=0, peak_flops=989.4e12, bandwidth=3.35e12))
    415
    """
    ridge = peak_flops / bandwidth
    den = ridge * kv_bytes_per_token - attention_flops_per_token
    if isinstance(den, np.ndarray):
        exists = den > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            return _none_or_inf(flops_per_token / np.where(exists, den, 1), exists)
    return flops_per_token / den if den > 0 else None
