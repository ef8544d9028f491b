"""What every registered fast path does with extreme input: exact integers, refused non-finite
values, and results that are finite and in range or an error naming the inputs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import roofline.formulas as f
from roofline.errors import InvalidValueError


def test_integer_arrays_never_wrap_around() -> None:
    """2**62 layers in an int64 array give the exact 2**62 x 8 x 128 x 2 x 2 bytes, not a wrapped 0."""
    out = f.kv_bytes_per_token(num_hidden_layers=np.array([2**62, 32]), num_key_value_heads=8, head_dim=128,
                               kv_bytes=2)
    assert out.tolist() == [2**62 * 4096, 131072]


def test_integer_arrays_that_fit_stay_int64() -> None:
    """Small integer arrays still give an int64 array (32 layers: 131,072 B per token)."""
    out = f.kv_bytes_per_token(num_hidden_layers=np.array([1, 32]), num_key_value_heads=8, head_dim=128, kv_bytes=2)
    assert out.dtype == np.int64 and out.tolist() == [4096, 131072]


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_object_arrays_holding_non_finite_values_are_refused(bad: float) -> None:
    """An object array holding inf or NaN is refused as not finite, naming the argument."""
    with pytest.raises(InvalidValueError, match=r"peak_flops=.*must be finite"):
        f.ridge_point(peak_flops=np.array([1.0, bad], dtype=object), bandwidth=1.0)


def test_object_arrays_holding_a_string_are_refused() -> None:
    """An object array holding a non-number is refused naming the argument."""
    with pytest.raises(InvalidValueError, match=r"bandwidth=.*numeric array"):
        f.ridge_point(peak_flops=1.0, bandwidth=np.array([1.0, "2"], dtype=object))


def test_float_underflow_to_zero_is_an_error_naming_the_inputs() -> None:
    """ridge_point(5e-324, 1e300) underflows to 0.0 in floats: refused; exact inputs give the exact ratio."""
    with pytest.raises(InvalidValueError, match=r"ridge_point=0\.0: result is not > 0 for peak_flops=5e-324"):
        f.ridge_point(peak_flops=5e-324, bandwidth=1e300)
    assert f.ridge_point(peak_flops=Fraction(5, 10**324), bandwidth=10**300) == Fraction(5, 10**624)


def test_float_overflow_to_inf_is_an_error() -> None:
    """A step of 1e308 bytes over 1e-10 bytes/s overflows to inf in floats: refused, not returned."""
    with pytest.raises(InvalidValueError, match="memory_time=inf: result is not > 0"):
        f.memory_time(context_sum=0, weight_bytes=1e308, kv_bytes_per_token=0, bandwidth=1e-10)


def test_a_join_wait_after_the_batch_ended_is_refused() -> None:
    """A request arriving after a 10-step batch of 1 s steps ended has no join wait (it was -5 s before)."""
    assert f.static_join_wait(arrival_time=4, length_max=10, step_time=1) == 6
    with pytest.raises(InvalidValueError, match="arrival_time=15"):
        f.static_join_wait(arrival_time=15, length_max=10, step_time=1)


def test_every_formula_declares_the_range_of_its_result() -> None:
    """Each registered formula states the domain its result must lie in (only the KV budget may be negative)."""
    assert {n for n, spec in f.REGISTRY.items() if spec.result == "real"} <= {"kv_budget"} | {
        n for n, spec in f.REGISTRY.items() if spec.topic not in ("step_time", "intensity", "kv_cache", "batching",
                                                                   "useful_share")
    }


def test_a_relation_between_arguments_is_checked_on_exact_integers():
    """An int8 array that would wrap in the relation's product (128 x 0 in int8) is checked exactly, not overflowed."""
    out = f.static_join_wait(arrival_time=0, length_max=128, step_time=np.array([0], dtype=np.int8))
    assert out.tolist() == [0]
