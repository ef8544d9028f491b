"""Expected useful share of static batching: fast paths against SymPy, limits, Monte Carlo.

The exact formulas are compared with SymPy exactly in tests/test_formulas.py; the expected shares
whose values are transcendental (continuous uniform: Lerch's transcendent; truncated
exponential: a numerical integral) are compared with SymPy's 30-digit evaluation to a
stated tolerance. Monte Carlo checks are seeded and use 4-standard-error bounds
(a false alarm about once in 16,000 runs under the normal approximation).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.errors import InvalidValueError
from roofline.sim import Request, UnitCostModel, serve_static
from roofline.symbolic import symbols_for
from roofline.symbolic import useful_share as sb

spreads = st.fractions(min_value=Fraction(1, 1000), max_value=1, max_denominator=1000)

# The exact expected shares (the discrete-uniform sum included) are checked against their
# SymPy derivations by the registry-wide test in tests/test_formulas.py; here, the two whose
# values are transcendental, to a stated tolerance.


@settings(max_examples=15)
@given(batch=st.integers(1, 100), spread=spreads)
def test_continuous_uniform_matches_lerchphi_to_1e_13(batch, spread):
    """The continuous-uniform fast path (series/recurrence) matches SymPy's Lerch form to 1e-13 relative."""
    fast = f.expected_useful_share_uniform(batch=batch, spread=spread)
    expected = sp.re(sp.N(sb.expected_useful_share_uniform.subs(symbols_for(dict(batch=batch, spread=spread))), 30))
    note(f"fast={fast!r} symbolic={expected}")
    assert math.isclose(float(fast), float(expected), rel_tol=1e-13)


@pytest.mark.parametrize("batch, scale, cap", [(2, Fraction(1, 3), Fraction(7, 2)), (64, 1, 40), (5, 100, 3)])
def test_truncated_exponential_matches_the_symbolic_integral_to_1e_12(batch, scale, cap):
    """The truncated-exponential quadrature matches SymPy's integral (mpmath, 30 digits) to 1e-12."""
    fast = f.expected_useful_share_exponential(batch=batch, scale=scale, cap=cap)
    expected = sp.N(sb.expected_useful_share_exponential.subs(symbols_for(dict(batch=batch, scale=scale, cap=cap))), 30)
    assert abs(fast - float(expected)) <= 1e-12


def test_exact_cases_of_the_expected_shares_are_fractions():
    """At spread 1, at batch 1 and for equal lengths the expected shares are exact Fractions."""
    assert f.expected_useful_share_uniform(batch=4, spread=1) == Fraction(5, 8)
    assert f.expected_useful_share_uniform(batch=1, spread=Fraction(1, 2)) == 1
    assert f.expected_useful_share_exponential(batch=1, scale=128, cap=32) == 1
    assert f.expected_useful_share_discrete_uniform(batch=9, min_length=5, length_range=0) == 1
    assert f.approx_useful_share_uniform(batch=4, spread=1) == f.expected_useful_share_uniform(batch=4, spread=1)


@given(batch=st.integers(2, 200), a=spreads, b=spreads)
def test_share_falls_as_the_spread_grows(batch, a, b):
    """For B >= 2 the expected share is strictly smaller at a larger spread."""
    if a == b:
        return
    low, high = sorted((a, b))
    assert f.expected_useful_share_uniform(batch=batch, spread=low) > f.expected_useful_share_uniform(
        batch=batch, spread=high)


@given(a=st.integers(1, 300), b=st.integers(1, 300), spread=spreads)
def test_share_falls_as_the_batch_grows(a, b, spread):
    """At any spread the expected share is strictly smaller for a larger batch."""
    if a == b:
        return
    small, large = sorted((a, b))
    assert f.expected_useful_share_uniform(batch=small, spread=spread) > f.expected_useful_share_uniform(
        batch=large, spread=spread)


@given(batch=st.integers(1, 300), spread=spreads)
def test_share_is_bounded_and_tends_to_one_as_the_spread_vanishes(batch, spread):
    """(1 - s)/(1 + s) <= share <= 1 (every X / max is at least low / high), so share -> 1 as s -> 0."""
    share = float(f.expected_useful_share_uniform(batch=batch, spread=spread))
    assert float((1 - spread) / (1 + spread)) * (1 - 1e-14) <= share <= 1 + 1e-15
    assert share >= 1 / 2 * (1 - 1e-14)


@given(batch=st.integers(1, 100), spread=spreads)
def test_lessons_approximation_is_close_to_the_exact_share(batch, spread):
    """mean / E[max] is within 1.5 % of E[X / max] for uniform lengths (p06's grid, here drawn)."""
    exact = float(f.expected_useful_share_uniform(batch=batch, spread=spread))
    approx = float(f.approx_useful_share_uniform(batch=batch, spread=spread))
    assert abs(approx - exact) <= 0.015 * exact


def test_discrete_uniform_share_falls_with_the_batch():
    """Discrete uniform lengths 1..50: the exact share falls strictly from B = 1 to B = 12."""
    shares = [f.expected_useful_share_discrete_uniform(batch=b, min_length=1, length_range=49) for b in range(1, 13)]
    assert all(x > y for x, y in zip(shares, shares[1:], strict=False))


def test_exponential_share_falls_with_the_batch_and_depends_on_cap_over_scale_only():
    """Truncated exponential: the share falls with B and depends only on cap / scale."""
    shares = [f.expected_useful_share_exponential(batch=b, scale=128, cap=512) for b in (1, 2, 4, 8, 16, 64)]
    assert all(x > y for x, y in zip(shares, shares[1:], strict=False))
    assert math.isclose(f.expected_useful_share_exponential(batch=8, scale=1, cap=4), shares[3], rel_tol=1e-13)


def _scheduler_share(lengths: np.ndarray) -> Fraction:
    requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=int(o)) for i, o in enumerate(lengths)]
    return serve_static(requests, UnitCostModel(), batch_size=len(requests), record_steps=False).summary.useful_share


def test_monte_carlo_over_the_reference_scheduler_matches_the_discrete_uniform():
    """300 seeded single-batch scheduler runs (B = 8, lengths 20..220): the mean share is within 4 SE of E[X/max]."""
    rng = np.random.default_rng(7)
    shares = np.array([float(_scheduler_share(rng.integers(20, 221, size=8))) for _ in range(300)])
    exact = float(f.expected_useful_share_discrete_uniform(batch=8, min_length=20, length_range=200))
    se = shares.std(ddof=1) / math.sqrt(len(shares))
    assert abs(shares.mean() - exact) <= 4 * se


def test_pooled_share_over_many_batches_is_mean_over_expected_longest():
    """Over many batches the scheduler's pooled share (useful / occupied) tends to E[X] / E[max], within 4 SE."""
    rng = np.random.default_rng(11)
    requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=int(o))
                for i, o in enumerate(rng.integers(1, 101, size=8 * 300))]
    pooled = float(serve_static(requests, UnitCostModel(), batch_size=8, record_steps=False).summary.useful_share)
    lengths = np.array([r.output_tokens for r in requests], float).reshape(300, 8)
    useful, occupied = lengths.sum(axis=1), 8 * lengths.max(axis=1)
    assert math.isclose(pooled, useful.sum() / occupied.sum(), rel_tol=1e-12)
    e_max = sum(Fraction(m**8 - (m - 1) ** 8, 100**8) * m for m in range(1, 101))
    target = float(Fraction(101, 2) / e_max)
    se = (useful - pooled * occupied).std(ddof=1) / math.sqrt(300) / occupied.mean()
    assert abs(pooled - target) <= 4 * se


@pytest.mark.parametrize("batch, spread", [(4, 0.5), (16, 0.9)])
def test_monte_carlo_continuous_uniform(batch, spread):
    """200,000 seeded batches of uniform lengths: the mean of sum / (B max) is within 4 SE of the formula."""
    rng = np.random.default_rng(3)
    x = rng.uniform(1 - spread, 1 + spread, size=(200_000, batch))
    share = x.sum(axis=1) / (batch * x.max(axis=1))
    se = share.std(ddof=1) / math.sqrt(len(share))
    assert abs(share.mean() - f.expected_useful_share_uniform(batch=batch, spread=spread)) <= 4 * se


@pytest.mark.parametrize("batch, cap", [(4, 1536), (16, 32), (8, 512)])
def test_monte_carlo_truncated_exponential(batch, cap):
    """200,000 seeded batches of exponential(128) lengths kept <= cap: mean share within 4 SE of the formula."""
    rng = np.random.default_rng(5)
    z = -math.expm1(-cap / 128)
    x = -128 * np.log1p(-rng.random((200_000, batch)) * z)  # inverse CDF of the truncated law
    share = x.sum(axis=1) / (batch * x.max(axis=1))
    se = share.std(ddof=1) / math.sqrt(len(share))
    assert abs(share.mean() - f.expected_useful_share_exponential(batch=batch, scale=128, cap=cap)) <= 4 * se


def test_arrays_broadcast_elementwise():
    """numpy arrays give the elementwise scalar results (float arrays for the expected shares)."""
    spread = np.array([0.1, 0.5, 1.0])
    got = f.expected_useful_share_uniform(batch=np.array([2, 4, 8]), spread=spread)
    assert got.dtype == float and got.shape == (3,)
    for i, (b, s) in enumerate([(2, 0.1), (4, 0.5), (8, 1.0)]):
        assert math.isclose(got[i], float(f.expected_useful_share_uniform(batch=b, spread=s)), rel_tol=1e-15)
    grid = f.expected_useful_share_exponential(batch=np.array([[1], [4]]), scale=128, cap=np.array([32, 1536]))
    assert grid.shape == (2, 2) and np.all(grid[0] == 1)
    disc = f.expected_useful_share_discrete_uniform(batch=np.array([2, 3]), min_length=1, length_range=np.array([1, 2]))
    assert disc[0] == 7 / 8 and math.isclose(disc[1], float(f.expected_useful_share_discrete_uniform(
        batch=3, min_length=1, length_range=2)))


@pytest.mark.parametrize("kwargs, field", [
    (dict(batch=4, spread=Fraction(3, 2)), "spread"),
    (dict(batch=0, spread=Fraction(1, 2)), "batch"),
    (dict(batch=2.0, spread=Fraction(1, 2)), "batch"),
])
def test_bad_inputs_name_the_argument(kwargs, field):
    """A spread outside (0, 1] or a non-integer or zero batch raises InvalidValueError naming it."""
    with pytest.raises(InvalidValueError) as info:
        f.expected_useful_share_uniform(**kwargs)
    assert info.value.field == field


def test_numerical_formulas_say_so():
    """The expected shares carry `exact` and `max_test_value`, so generic tests can compare them fairly."""
    spec = f.REGISTRY
    assert spec["expected_useful_share_uniform"].exact is False
    assert spec["expected_useful_share_exponential"].exact is False
    assert spec["expected_useful_share_discrete_uniform"].exact is True
    for name in ("expected_useful_share_uniform", "expected_useful_share_exponential",
                 "expected_useful_share_discrete_uniform"):
        assert spec[name].max_test_value >= 20


def test_discrete_uniform_refuses_work_beyond_its_documented_limit() -> None:
    """10^8 lengths in batches of 10^9 would never return: refused by name; 200,001 lengths in batches of 8 run."""
    from roofline.formulas.useful_share import MAX_DISCRETE_WORK

    with pytest.raises(InvalidValueError, match="length_range=100000000"):
        f.expected_useful_share_discrete_uniform(batch=10**9, min_length=1, length_range=10**8)
    assert 8 * 200_001 * (200_001).bit_length() <= MAX_DISCRETE_WORK
    share = f.expected_useful_share_discrete_uniform(batch=8, min_length=1, length_range=200_000)
    assert abs(float(share) - 0.5625) < 1e-5  # (B + 1) / (2B) for lengths from 1 to a wide range
