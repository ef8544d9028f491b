"""Input validation shared by the numeric fast paths, the presets and the scheduler.

Each check raises :class:`roofline.errors.InvalidValueError` naming the field and
the value; none of them converts or rounds what the user gave.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Real
from typing import Any

import numpy as np

from .errors import InvalidValueError

__all__ = ["name_key", "check_number", "check_positive", "check_nonnegative", "check_int", "check_count",
           "check_scalar"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (Real, np.number)) and not isinstance(value, (bool, np.bool_))


def is_plain_int(value: Any) -> bool:
    """True for a Python int that is not a bool: a JSON integer (4.0 and true are not, though 4.0 == 4)."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int_field(instance: object, attribute: Any, value: Any) -> None:
    """An attrs validator: ``value`` a Python int >= 1 (not a bool), else InvalidValueError naming the field."""
    if not is_plain_int(value) or value <= 0:
        raise InvalidValueError(attribute.name, value, "must be a positive integer")


def check_number(field: str, value: Any) -> None:
    """Raise unless ``value`` is a finite real number or an array of them."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf":
            if value.dtype.kind == "O":
                for v in value.flat:  # each element as a scalar: a real, finite number
                    if not _is_number(v):
                        raise InvalidValueError(field, value, f"expected a numeric array (holds {v!r})")
                    if not isinstance(v, (int, Fraction, np.integer)) and not math.isfinite(float(v)):
                        raise InvalidValueError(field, value, f"must be finite (holds {v!r})")
                return None
            raise InvalidValueError(field, value, "expected a numeric array")
        return _check_finite_array(field, value)
    if not _is_number(value):
        raise InvalidValueError(field, value, "expected a real number")
    if not isinstance(value, (int, Fraction)) and not math.isfinite(float(value)):
        raise InvalidValueError(field, value, "must be finite")
    return None


def _check_finite_array(field: str, value: np.ndarray) -> None:
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        raise InvalidValueError(field, value, "must be finite")


def _all(cond: Any) -> bool:
    return bool(np.all(cond))


def check_positive(field: str, value: Any) -> None:
    """Raise unless ``value`` (scalar or array) is finite and > 0."""
    check_number(field, value)
    if not _all(np.asarray(value) > 0) if isinstance(value, np.ndarray) else not value > 0:
        raise InvalidValueError(field, value, "must be > 0")


def check_nonnegative(field: str, value: Any) -> None:
    """Raise unless ``value`` (scalar or array) is finite and >= 0."""
    check_number(field, value)
    if not _all(np.asarray(value) >= 0) if isinstance(value, np.ndarray) else not value >= 0:
        raise InvalidValueError(field, value, "must be >= 0")


def check_int(field: str, value: Any, *, minimum: int = 0) -> None:
    """Raise unless ``value`` is an integer (Python or numpy, not bool) >= ``minimum``."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu":
            raise InvalidValueError(field, value, "expected an integer array")
        if not _all(value >= minimum):
            raise InvalidValueError(field, value, f"must be >= {minimum}")
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidValueError(field, value, "expected an integer")
    if value < minimum:
        raise InvalidValueError(field, value, f"must be >= {minimum}")


def check_count(field: str, value: Any, *, minimum: int = 0) -> None:
    """Raise unless ``value`` is one integer (Python or numpy, not bool, not an array) >= ``minimum``.

    For the simulator's options and sizes, which are counts, never arrays.
    """
    if isinstance(value, np.ndarray):
        raise InvalidValueError(field, value, "expected one integer, not an array")
    check_int(field, value, minimum=minimum)


def check_scalar(field: str, value: Any) -> None:
    """Raise if ``value`` is a numpy array: for parameters that take one number (a rate, a duration)."""
    if isinstance(value, np.ndarray):
        raise InvalidValueError(field, value, "expected one number, not an array")


def name_key(name: str) -> str:
    """The key a preset or option name is looked up by: ``name`` stripped of surrounding whitespace and
    lower-cased, so that ``"VLLM"``, ``" vllm"`` and ``"vllm\\n"`` all name ``vllm`` (docs/conventions.md,
    "Names").

    The one rule for every name the package looks up: model and accelerator presets, engine profiles,
    and the command line's choices (``--policy``, ``--engine``, ``--admission``, ...). Whitespace
    inside a name is not changed (``"v llm"`` stays unknown); a lookup's own aliases (an accelerator's
    ``h100_sxm`` for ``h100-sxm``) apply to the key.

    Parameters
    ----------
    name : str

    Returns
    -------
    str

    Raises
    ------
    InvalidValueError
        ``name`` is not a str (field ``name``).

    Examples
    --------
    >>> name_key(" Llama-3.1-8B\\n")
    'llama-3.1-8b'
    """
    if not isinstance(name, str):
        raise InvalidValueError("name", name, "expected a name (str)")
    return name.strip().lower()
