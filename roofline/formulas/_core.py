"""The formula registry and the arithmetic helpers every fast path shares.

Each public fast path is declared with :func:`formula`, which

* checks that every keyword argument is a quantity of :data:`roofline.quantities.QUANTITIES`
  and that its domain is the table's or narrower (a programming error otherwise);
* records it in :data:`REGISTRY` with the name of its symbolic form
  (``roofline.symbolic.<topic>.<name>``, loaded lazily so that ``import roofline``
  never imports SymPy), the proof script that derives it and the domain of each
  keyword argument;
* wraps it so that every argument is checked against its domain (a
  :class:`roofline.errors.InvalidValueError` naming the argument and the value);
  the unchecked function stays available as ``f.unchecked`` for hot loops that
  have validated their inputs once (the reference scheduler).

Fast paths are plain arithmetic with no float literals: ``int`` and
``fractions.Fraction`` inputs give exact results, floats give floats, numpy arrays
broadcast.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Protocol

import attrs
import numpy as np

from .._checks import check_int, check_nonnegative, check_number, check_positive
from ..errors import InvalidValueError
from ..quantities import DOMAINS, QUANTITIES, narrows

__all__ = ["Formula", "FormulaSpec", "REGISTRY", "formula", "maximum", "minimum", "floor", "ceil", "DOMAINS"]



class Formula(Protocol):
    """A registered fast path: call it with keyword arguments; ``unchecked`` skips the checks."""

    unchecked: Callable[..., Any]

    def __call__(self, **kwargs: Any) -> Any: ...

def _check(kind: str, name: str, value: Any) -> None:
    if kind == "positive":
        check_positive(name, value)
    elif kind == "nonnegative":
        check_nonnegative(name, value)
    elif kind == "positive_int":
        check_int(name, value, minimum=1)
    elif kind == "nonnegative_int":
        check_int(name, value, minimum=0)
    elif kind == "share":
        check_positive(name, value)
        if not bool(np.all(np.asarray(value) <= 1)):
            raise InvalidValueError(name, value, "must be in (0, 1]")
    elif kind == "real":
        check_number(name, value)
    else:  # pragma: no cover - programming error
        raise AssertionError(kind)


@attrs.frozen
class FormulaSpec:
    """One registered formula.

    Attributes
    ----------
    name : str
        The fast path's name, equal to the symbolic expression's name.
    topic : str
        Module name shared by ``roofline.formulas``, ``roofline.symbolic``, ``tests`` and ``proofs``.
    fast : callable
        The checked fast path (keyword-only).
    domains : dict
        Keyword argument -> domain kind (a key of :data:`DOMAINS`).
    proof : str
        File name of the proof script under ``proofs/`` that derives or uses it.
    none_when_infinite : bool
        The fast path returns ``None`` (scalars) where the symbolic form is ``oo``.
    exact : bool
        Fraction in gives the exact value out; False for transcendental results and
        numerical integrals (float out, compared with the symbolic form to a tolerance).
    max_test_value : int or None
        Largest argument value tests draw, where evaluating the symbolic form grows
        with the inputs (exact finite sums); None for no limit.
    requires : tuple or None
        ``(field, text, predicate)``: a relation between arguments the formula needs
        (e.g. a batch's longest output at most its sum); the checked fast path raises
        InvalidValueError naming ``field`` when ``predicate(**kwargs)`` is false.
    result : str
        Domain of the result (a key of :data:`roofline.quantities.DOMAINS`); the checked
        fast path raises InvalidValueError naming the formula and its inputs when a result
        is not finite or outside it (float overflow or underflow of valid inputs), except
        the ``inf`` (arrays) or ``None`` (scalars) of ``none_when_infinite``.
    """

    name: str
    topic: str
    fast: Callable[..., Any]
    domains: dict[str, str]
    proof: str
    none_when_infinite: bool = False
    exact: bool = True
    max_test_value: int | None = None
    requires: tuple[str, str, Callable[..., Any]] | None = None
    result: str = "real"

    def admits(self, **kwargs: Any) -> bool:
        """Whether the arguments satisfy the relation in ``requires`` (always True without one)."""
        return self.requires is None or bool(np.all(self.requires[2](**kwargs)))

    def symbolic(self) -> Any:
        """The SymPy expression (imports ``roofline.symbolic.<topic>`` on first use)."""
        module = importlib.import_module(f"roofline.symbolic.{self.topic}")
        return getattr(module, self.name)


#: name -> FormulaSpec, for every fast path; tests iterate over it.
REGISTRY: dict[str, FormulaSpec] = {}


def formula(
    *,
    topic: str,
    proof: str,
    none_when_infinite: bool = False,
    exact: bool = True,
    max_test_value: int | None = None,
    requires: tuple[str, str, Callable[..., Any]] | None = None,
    result: str = "real",
    **domains: Any,
) -> Callable[[Callable[..., Any]], Formula]:
    """Register a fast path and wrap it with domain checks (see module docstring)."""
    if result not in DOMAINS:  # pragma: no cover - programming error
        raise AssertionError(result)
    for name, kind in domains.items():  # programming errors, caught at import
        if name not in QUANTITIES:
            raise AssertionError(f"{name!r} is not in roofline.quantities.QUANTITIES; add it to the table")
        if kind not in DOMAINS or not narrows(QUANTITIES[name].domain, kind):
            raise AssertionError(f"{name}: domain {kind!r} is not within the table's {QUANTITIES[name].domain!r}")

    def decorate(func: Callable[..., Any]) -> Formula:
        @functools.wraps(func)
        def checked(**kwargs: Any) -> Any:
            for name, value in kwargs.items():
                kind = domains.get(name)
                if kind is None:
                    raise InvalidValueError(name, value, f"is not an argument of {func.__name__}")
                _check(kind, name, value)
            missing = [n for n in domains if n not in kwargs]
            if missing:
                raise TypeError(f"{func.__name__}() missing keyword argument(s): {', '.join(missing)}")
            shapes = {n: v.shape for n, v in kwargs.items() if isinstance(v, np.ndarray)}
            if len(shapes) > 1:
                try:
                    np.broadcast_shapes(*shapes.values())
                except ValueError:
                    name = sorted(shapes)[-1]
                    raise InvalidValueError(
                        name, kwargs[name], f"shape {shapes[name]} does not broadcast with the other arrays {shapes}"
                    ) from None
            exact_ints = _exact_ints(kwargs)
            try:
                with np.errstate(all="ignore"):  # the relation on exact ints; a float overflow there refuses the input
                    admitted = spec.admits(**{**kwargs, **exact_ints})
                if not admitted:
                    assert requires is not None
                    field, text, _ = requires
                    raise InvalidValueError(field, kwargs[field], f"{func.__name__} requires {text}")
                with np.errstate(all="ignore"):  # float overflow becomes inf or 0, which the result check refuses
                    out = func(**{**kwargs, **exact_ints})  # integer arrays as Python ints: they never wrap
            except OverflowError:  # an exact int or Fraction too large for a float, met by a float argument
                field = _too_large_for_float(kwargs)
                raise InvalidValueError(field, kwargs[field], f"too large for a float, which {func.__name__} meets "
                                        "in another argument (pass ints or Fractions throughout)") from None
            except ZeroDivisionError:  # valid floats whose product underflows to 0, then divides
                inputs = ", ".join(f"{k}={np.array2string(v, threshold=6) if isinstance(v, np.ndarray) else repr(v)}"
                                   for k, v in kwargs.items())
                raise InvalidValueError(func.__name__, None, f"a float underflow divides by zero for {inputs} "
                                        "(pass ints or Fractions)") from None
            if exact_ints:
                out = _from_object(out)
            _check_result(func.__name__, result, none_when_infinite, out, kwargs)
            return out

        checked.unchecked = func  # type: ignore[attr-defined]
        spec = FormulaSpec(
            func.__name__, topic, checked, dict(domains), proof, none_when_infinite, exact, max_test_value, requires,
            result,
        )
        REGISTRY[func.__name__] = spec
        return checked  # type: ignore[return-value]  # carries .unchecked, set above

    return decorate


_INT64 = np.iinfo(np.int64)


def _exact_ints(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The numpy integers of ``kwargs`` as Python ints, which never wrap: an integer array as an object
    array of them (turned back into int64 by :func:`_from_object` where the result fits), a numpy
    integer scalar (``np.int64(2**40)``) as one Python int (the result is then exact, as for ints)."""
    out: dict[str, Any] = {}
    for name, value in kwargs.items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            out[name] = value.astype(object)
        elif isinstance(value, np.integer):
            out[name] = int(value)
    return out


def _from_object(out: Any) -> Any:
    """An object array computed from Python ints back to int64 or float64 where that is exact."""
    if not isinstance(out, np.ndarray) or out.dtype.kind != "O" or out.size == 0:
        return out
    values = out.ravel().tolist()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        if _INT64.min <= min(values) and max(values) <= _INT64.max:
            return out.astype(np.int64)
        return out  # exact Python ints too large for int64
    if all(isinstance(v, float) for v in values):
        return out.astype(np.float64)
    return out


def _too_large_for_float(kwargs: dict[str, Any]) -> str:
    """The first argument (by name) with a value float() cannot hold: the one to name in the error."""
    for name in sorted(kwargs):
        values = kwargs[name].ravel().tolist() if isinstance(kwargs[name], np.ndarray) else [kwargs[name]]
        for v in values:
            try:
                float(v)
            except OverflowError:
                return name
    return sorted(kwargs)[0]  # pragma: no cover - an overflow needs a value float() cannot hold


def _finite(value: Any) -> bool:
    return isinstance(value, (int, Fraction)) or math.isfinite(float(value))


def _check_result(name: str, kind: str, none_when_infinite: bool, out: Any, kwargs: dict[str, Any]) -> None:
    """Raise InvalidValueError when a result is not finite or outside its domain."""
    if out is None and none_when_infinite:
        return
    values = np.asarray(out, dtype=object).ravel().tolist() if isinstance(out, np.ndarray) else [out]
    for v in values:
        if v is None and none_when_infinite:
            continue
        if none_when_infinite and isinstance(v, float) and v == math.inf:
            continue
        ok = _finite(v)
        if ok and kind != "real":
            ok = v > 0 if kind.startswith("positive") or kind == "share" else v >= 0
            if ok and kind == "share":
                ok = v <= 1 if not isinstance(v, float) else v <= 1 + 1e-12
        if not ok:
            inputs = ", ".join(f"{k}={np.array2string(a, threshold=6) if isinstance(a, np.ndarray) else repr(a)}"
                               for k, a in kwargs.items())
            rng = {"real": "finite", "share": "in (0, 1]", "positive": "> 0", "positive_int": "> 0",
                   "nonnegative": ">= 0", "nonnegative_int": ">= 0"}[kind]
            raise InvalidValueError(
                name, v, f"result is not {rng} for {inputs} (float overflow or underflow: pass ints or Fractions)"
            )


# --------------------------------------------------------------------------- helpers


def _is_array(*values: Any) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def maximum(a: Any, b: Any) -> Any:
    """max(a, b), elementwise for numpy arrays; exact for int and Fraction."""
    if _is_array(a, b):
        return np.maximum(a, b)
    return a if a >= b else b


def minimum(a: Any, b: Any) -> Any:
    """min(a, b), elementwise for numpy arrays; exact for int and Fraction."""
    if _is_array(a, b):
        return np.minimum(a, b)
    return a if a <= b else b


def floor(x: Any) -> Any:
    """floor(x): int for int/Fraction/float scalars, elementwise for arrays."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "O":
            return np.frompyfunc(math.floor, 1, 1)(x)
        return np.floor(x)
    return math.floor(x)


def ceil(x: Any) -> Any:
    """ceil(x): int for int/Fraction/float scalars, elementwise for arrays."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "O":
            return np.frompyfunc(math.ceil, 1, 1)(x)
        return np.ceil(x)
    return math.ceil(x)
