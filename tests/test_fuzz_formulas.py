"""Every registered fast path under generated bad and extreme input: a project error naming an
argument, or a finite result in the formula's declared range; never another exception."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.errors import InvalidValueError, shown

NAMES = sorted(f.REGISTRY)

_SCALARS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.fractions(max_denominator=10**6).filter(lambda x: abs(x) < 10**30),
    st.sampled_from([0, 1, -1, 5e-324, 1e300, -1e300, 2**63, 2**64 + 1, 10**400, True, None, "1", 1j, Fraction(1, 3)]),
)

_DTYPES = ["int8", "int32", "int64", "uint8", "uint64", "float16", "float32", "float64", "bool", "object",
           "complex128"]


@st.composite
def _arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(st.sampled_from(_DTYPES))
    values = draw(st.lists(_SCALARS.filter(lambda v: not isinstance(v, (str, type(None)))), min_size=1, max_size=3))
    if dtype == "object":
        return np.array(values, dtype=object)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # building the input may lose precision; the input is what it is
        try:
            return np.array(values).astype(dtype)
        except (OverflowError, TypeError, ValueError):
            return np.array([1], dtype=dtype)


_VALUES = st.one_of(_SCALARS, _arrays())


def _in_range(kind: str, value: Any) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if kind == "real":
        return True
    if kind.startswith("positive"):
        return value > 0
    if kind == "share":
        return 0 < value <= 1 + 1e-12
    return value >= 0


@pytest.mark.parametrize("name", NAMES)
@settings(settings.get_profile("fuzz"))
@given(data=st.data())
def test_any_input_gives_a_project_error_or_a_finite_result_in_range(name: str, data: st.DataObject) -> None:
    """Any generated input (huge, tiny, NaN, inf, arrays of any dtype) is refused by name or gives a result in range."""
    spec = f.REGISTRY[name]
    kwargs = {arg: data.draw(_VALUES, label=arg) for arg in sorted(spec.domains)}
    try:
        out = spec.fast(**kwargs)
    except InvalidValueError as exc:
        assert exc.field in spec.domains or exc.field == name, exc
        return
    note(f"result {shown(out)}")  # an exact result may have more digits than repr allows: shown says so
    values = np.asarray(out, dtype=object).ravel().tolist() if isinstance(out, np.ndarray) else [out]
    for v in values:
        if spec.none_when_infinite and (v is None or v == math.inf):
            continue
        assert _in_range(spec.result, v), v


_MOE = ["experts_touched", "moe_decode_weight_bytes", "moe_arithmetic_intensity", "moe_compute_margin"]
#: Sizes up to 2**62: their products (bytes x experts, batch x context x bytes) pass 2**63 and would wrap in int64.
_BIG = st.integers(min_value=1, max_value=2**62)


@st.composite
def _moe_kwargs(draw: st.DrawFn, name: str) -> dict[str, int]:
    kwargs = {arg: draw(_BIG, label=arg) for arg in sorted(f.REGISTRY[name].domains)}
    kwargs["num_experts"] = draw(st.integers(1, 2**16), label="num_experts")
    kwargs["experts_per_token"] = draw(st.integers(1, kwargs["num_experts"]), label="experts_per_token")
    kwargs["batch"] = draw(st.integers(1, 2**16), label="batch")
    if "context" in kwargs:
        kwargs["context"] = draw(st.integers(0, 2**40), label="context")
    return kwargs


@pytest.mark.parametrize("name", _MOE)
@settings(settings.get_profile("fuzz"))
@given(data=st.data())
def test_moe_formulas_take_numpy_integers_exactly(name: str, data: st.DataObject) -> None:
    """numpy int64 scalars and arrays in the MoE formulas give the value of the same Python ints, never wrapped.

    As the dense formulas do; a result that floats cannot hold is refused by name."""
    spec = f.REGISTRY[name]
    exact = data.draw(_moe_kwargs(name), label="kwargs")
    kinds = {arg: data.draw(st.sampled_from(["int", "np.int64", "int64 array"]), label=f"{arg} as") for arg in exact}
    given_ = {arg: v if kinds[arg] == "int" else np.int64(v) if kinds[arg] == "np.int64" else np.array([v, 1])
              for arg, v in exact.items()}
    ones = {arg: 1 if kinds[arg] == "int64 array" else v for arg, v in exact.items()}
    ones["experts_per_token"] = 1 if kinds["num_experts"] == "int64 array" else ones["experts_per_token"]
    if not spec.admits(**ones):
        return  # the second element (all ones) breaks k <= E: not this test's subject
    want = spec.fast(**exact)
    try:
        out = spec.fast(**given_)
    except InvalidValueError as exc:  # refused by name (a float meets a huge exact int), never wrapped
        assert exc.field in spec.domains or exc.field == name, exc
        return
    got = np.asarray(out, dtype=object).ravel().tolist()[0]
    assert math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-300), (got, float(want))
