"""Latency percentiles as ``vllm bench serve`` reports them (docs/conventions.md, "Latency percentiles").

The default is ``numpy.percentile``'s "linear" method, exact on ints and Fractions; nearest rank is
``method="inverted_cdf"`` (numpy's name). ITL is over the requests handed back: the gaps of a request
refused after a preemption are left out. numpy.percentile is the oracle for floats; the exact values
are worked by hand.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from roofline.errors import InvalidValueError
from roofline.sim import KVPool, Percentiles, Request, RooflineCostModel, UnitCostModel, percentile, serve_continuous
from roofline.testing.compare import assert_same_results
from roofline.testing.strategies import kv_pools, workloads

QS = (0, 50, 90, 99, 100)

# --------------------------------------------------------------------------- by hand


@pytest.mark.parametrize(("values", "expected"), [
    # n = 1: every percentile is the value
    ([7], [7, 7, 7, 7, 7]),
    # n = 2, sorted 1, 4: h = q / 100; q = 50: 1 + 3/2; 90: 1 + 27/10; 99: 1 + 297/100
    ([4, 1], [1, Fraction(5, 2), Fraction(37, 10), Fraction(397, 100), 4]),
    # n = 5, sorted 15, 20, 35, 40, 50: h = 4 q / 100; q = 50: h = 2, the element 35; q = 90: h = 3.6,
    # 40 + 0.6 x 10 = 46; q = 99: h = 3.96, 40 + 0.96 x 10 = 49.6
    ([50, 15, 40, 35, 20], [15, 35, 46, Fraction(248, 5), 50]),
])
def test_linear_percentiles_by_hand_and_against_numpy(values: list[int], expected: list[Any]) -> None:
    """n = 1, 2, 5 at q = 0, 50, 90, 99, 100: the exact values by hand, and numpy.percentile's floats."""
    got = [percentile(values, q) for q in QS]
    assert got == expected
    assert [float(x) for x in got] == pytest.approx(list(np.percentile(values, QS)), rel=1e-15)
    # an element where the rank falls on one (its int type kept), a Fraction between two
    for g, q in zip(got, QS, strict=True):
        on_an_element = Fraction(q * (len(values) - 1), 100).denominator == 1
        assert isinstance(g, int) if on_an_element else type(g) is Fraction


def test_nearest_rank_is_kept_under_its_own_name() -> None:
    """inverted_cdf (numpy's name; "nearest-rank" too): rank ceil(q n / 100), the smallest at q = 0."""
    values = [50, 15, 40, 35, 20]
    # ranks 1 (q = 0), ceil(2.5) = 3, ceil(4.5) = 5, ceil(4.95) = 5, 5
    assert [percentile(values, q, method="inverted_cdf") for q in QS] == [15, 35, 50, 50, 50]
    assert [percentile(values, q, method="nearest-rank") for q in QS] == [15, 35, 50, 50, 50]
    assert percentile(values, 30, method="inverted_cdf") == 20  # ceil(1.5) = 2
    assert [percentile(values, q, method="inverted_cdf") for q in QS] == list(
        np.percentile(values, QS, method="inverted_cdf"))


def test_mixed_number_types_interpolate_exactly_then_round_once() -> None:
    """An int and a Fraction give a Fraction; a float neighbour gives a float, the exact value rounded once."""
    assert percentile([Fraction(1, 3), 1], 50) == Fraction(2, 3)
    assert percentile([0.1, 0.2], 50) == float(Fraction(0.1) + (Fraction(0.2) - Fraction(0.1)) / 2)
    assert percentile([2, 2.0, 5], 25) == 2  # both neighbours equal: the element itself
    assert percentile([1, 2], Fraction(1, 3)) == 1 + Fraction(1, 300)  # a Fraction q: exact too
    # a float beside an int beyond a float's range: the exact value (no OverflowError)
    assert percentile([1.0, 10**400], 50) == Fraction(1 + 10**400, 2)


def test_bad_arguments_are_refused_by_name() -> None:
    for kwargs, field in ((dict(q=-1), "q"), (dict(q=100.5), "q"), (dict(q=50, method="nearest"), "method"),
                          (dict(q=50, method="lower"), "method")):
        with pytest.raises(InvalidValueError) as err:
            percentile([1, 2, 3], **kwargs)
        assert err.value.field == field


def test_a_summary_s_percentiles_are_interpolated() -> None:
    """Percentiles.of: p50, p90, p99 linear (the n = 5 case above), the mean and max plain."""
    p = Percentiles.of([50, 15, 40, 35, 20])
    assert p == Percentiles(35, 46, Fraction(248, 5), mean=32, max=50)
    assert Percentiles.of_counts({15: 1, 20: 1, 35: 1, 40: 1, 50: 1}) == p
    # counts: 1 x 3, 4 x 1: sorted 1, 1, 1, 4; p90 at h = 2.7: 1 + 0.7 x 3; p99 at h = 2.97: 1 + 0.97 x 3
    assert Percentiles.of_counts({1: 3, 4: 1}) == Percentiles(1, Fraction(31, 10), Fraction(391, 100),
                                                              mean=Fraction(7, 4), max=4)


# --------------------------------------------------------------------------- against numpy


_FLOATS = st.lists(st.floats(0, 1e6, allow_nan=False, allow_infinity=False), min_size=1, max_size=60)
_FRACTIONS = st.lists(st.fractions(0, 100, max_denominator=50), min_size=1, max_size=60)


@given(_FLOATS, st.integers(0, 100) | st.floats(0, 100))
def test_floats_match_numpy(values: list[float], q: Any) -> None:
    got = percentile(values, q)
    assert isinstance(got, float)
    assert got == pytest.approx(float(np.percentile(values, q)), rel=1e-12, abs=1e-300)
    assert percentile(values, q, method="inverted_cdf") == float(np.percentile(values, q, method="inverted_cdf"))


@given(_FRACTIONS, st.integers(0, 100))
def test_fractions_are_exact_and_between_their_neighbours(values: list[Fraction], q: int) -> None:
    """On Fractions the percentile is a Fraction (or an element), between the order statistics it interpolates,
    and its float is numpy's on the floats of the values."""
    got = percentile(values, q)
    assert isinstance(got, (int, Fraction))
    ordered = sorted(values)
    h = Fraction(q * (len(values) - 1), 100)
    low, high = ordered[int(h)], ordered[-(-h.numerator // h.denominator)]
    assert low <= got <= high
    assert (got - low) * 100 == (high - low) * (q * (len(values) - 1) % 100)  # the weight is h - floor(h)
    assert float(got) == pytest.approx(float(np.percentile([float(v) for v in values], q)), rel=1e-12, abs=1e-300)


@given(_FRACTIONS)
def test_percentiles_of_counts_equal_those_of_the_values(values: list[Fraction]) -> None:
    assert Percentiles.of_counts(Counter(values)) == Percentiles.of(values)
    p = Percentiles.of(values)
    assert p is not None and [p.p50, p.p90, p.p99] == [percentile(values, q) for q in (50, 90, 99)]


# --------------------------------------------------------------------------- ITL over completed requests


# A decode step of B rows at context sum S lasts 10 + S s (10 weight bytes and 1 byte a token at 1 byte/s).
_LINEAR = RooflineCostModel(weight_bytes=10, kv_bytes_per_token=1, flops_per_token=1, attention_flops_per_token=0,
                            bandwidth=1, peak_flops=10**9)


@pytest.mark.parametrize("engine", ["step", "event"])
def test_itl_leaves_out_a_request_refused_after_a_preemption(engine: str) -> None:
    """Two requests of P = 2, O = 9, a pool of 12 one-token blocks, on-demand admission, a prefill budget of 4.

    Prefill both (14 s: 10 + the 4 prompt tokens), then decode steps at context sums 6, 8, 10, 12 (16, 18, 20,
    22 s; the event engine takes the last three as one stretch). The next step needs 14 blocks: request 1 is
    preempted, having generated 5 tokens; its recompute prefill of 7 tokens exceeds the budget of 4 and it is
    refused. Request 0 decodes alone at sums 7 .. 10 (17 .. 20 s). ITL is request 0's 8 gaps only: sorted 16, 17,
    18, 18, 19, 20, 20, 22; p50 at h = 3.5: 18.5; p90 at h = 6.3: 20 + 0.3 x 2 = 20.6; p99 at h = 6.93:
    20 + 0.93 x 2 = 21.86; mean 150 / 8. Counting request 1's 4 gaps (16, 18, 20, 22) too would give 12 gaps,
    mean 226 / 12.
    """
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=2, output_tokens=9) for i in range(2)]
    r = serve_continuous(reqs, _LINEAR, max_num_seqs=2, admission="on_demand",
                         kv_pool=KVPool(capacity_blocks=12, block_size=1), max_prefill_tokens=4, record_steps=True,
                         engine=engine)
    assert r.options["engine"] == engine
    kept, refused = r.requests
    assert kept.handed_back_s == 14 + 16 + 18 + 20 + 22 + 17 + 18 + 19 + 20 and kept.preemptions == 0
    assert refused.rejected and refused.preemptions == 1 and refused.generated_tokens == 5
    assert refused.rejected_reason is not None and "recompute prefill of 7 tokens" in refused.rejected_reason
    gaps = [16, 18, 20, 22, 17, 18, 19, 20]
    assert r.summary.itl == Percentiles(Fraction(37, 2), Fraction(103, 5), Fraction(1093, 50),
                                        mean=Fraction(150, 8), max=22)
    assert [float(x) for x in (r.summary.itl.p50, r.summary.itl.p90, r.summary.itl.p99)] == pytest.approx(
        list(np.percentile(gaps, [50, 90, 99])), rel=1e-15)
    # TTFT, TPOT and E2E: over the request handed back too
    assert r.summary.ttft == Percentiles(14, 14, 14, mean=14, max=14)
    assert r.summary.tpot is not None and r.summary.tpot.p50 == Fraction(150, 8)


_WORK = workloads(min_size=1, max_size=10, max_prompt_tokens=12, max_output_tokens=25)


@given(reqs=_WORK, data=st.data(), seqs=st.integers(2, 5), cost=st.sampled_from(
    [_LINEAR, UnitCostModel(decode=Fraction(2, 3), prefill=2), UnitCostModel()]))
def test_itl_counts_the_gaps_of_the_requests_handed_back_on_both_clocks(reqs: Any, data: st.DataObject, seqs: int,
                                                                          cost: Any) -> None:
    """Tight pools and small prefill budgets (refusals after preemption are common): the ITL's mean times the
    O - 1 gaps of each request handed back is their finish - first token, and both clocks agree exactly."""
    pool = data.draw(kv_pools(min_blocks=0, max_blocks=40, max_block_size=4, unlimited=None, tight_for=reqs))
    budget = data.draw(st.integers(1, 30))
    kw: dict[str, Any] = dict(max_num_seqs=seqs, admission="on_demand", kv_pool=pool, max_prefill_tokens=budget,
                              record_steps=True)
    event = serve_continuous(reqs, cost, **kw)
    step = serve_continuous(reqs, cost, engine="step", **kw)
    assert_same_results(event, step)
    done = [x for x in step.requests if x.handed_back_s is not None]
    gaps = sum(x.request.output_tokens - 1 for x in done)
    itl = step.summary.itl
    if gaps == 0:
        assert itl is None
    else:
        assert itl is not None and itl.mean * gaps == sum(x.finish_s - x.first_token_s for x in done)
        assert itl.p50 <= itl.p90 <= itl.p99 <= itl.max
