"""Break-it faults: each test is an input that once misbehaved, and the value it must give."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from roofline.sim import Request, UnitCostModel, serve_continuous


def test_the_event_engines_requests_take_a_numpy_index_as_the_step_engines_tuple_does():
    """RequestTable[np.int64(1)] raised IndexError ("request index 1 out of range for 10 requests") where the step
    engine's tuple gives the record; a float or str index raised IndexError where a tuple raises TypeError."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=3, output_tokens=2) for i in range(4)]
    event, step = serve_continuous(reqs, UnitCostModel()), serve_continuous(reqs, UnitCostModel(), engine="step")
    assert event.options["engine"] == "event"
    for i in (np.int64(1), np.int32(-1), np.intp(0)):
        assert event.requests[i] == step.requests[i]
    for bad in (1.0, "a"):
        with pytest.raises(TypeError):
            step.requests[bad]  # type: ignore[call-overload]
        with pytest.raises(TypeError):
            event.requests[bad]  # type: ignore[call-overload]
    with pytest.raises(IndexError):
        event.requests[np.int64(4)]


class _Custom:
    """A custom cost model (every step takes 1) whose stretch_terms() states ``terms``."""

    exact = True

    def __init__(self, terms: object) -> None:
        self.terms = terms

    def stretch_terms(self) -> object:
        return self.terms

    def to_time(self, value: object) -> object:
        return value

    def decode_time(self, batch: int, context_sum: int) -> int:
        return 1

    def prefill_time(self, prefill_tokens: int, attention_pairs: int) -> int:
        return 1

    def mixed_time(self, *args: int) -> int:
        return 1

    def decode_work(self, batch: int, context_sum: int) -> tuple[None, None]:
        return None, None

    def prefill_work(self, prefill_tokens: int, attention_pairs: int) -> tuple[None, None]:
        return None, None

    def mixed_work(self, *args: int) -> tuple[None, None]:
        return None, None


@pytest.mark.parametrize("terms", [
    dict(unit_decode=-1, unit_prefill=1),  # ran: hand-back times before the arrivals
    dict(unit_decode=1, unit_prefill=0),  # ran: prefills that take no time
    dict(unit_decode=float("nan"), unit_prefill=1),  # InvalidValueError naming "seconds"
    dict(unit_decode=0.5, unit_prefill=1),  # InvalidValueError naming "seconds"
    dict(),  # TypeError: 'NoneType' object is not callable
    dict(km=-1, weights=lambda n: 1),  # TypeError: 'NoneType' object is not callable
    dict(fc=float("inf"), weights=lambda n: 1),
    dict(weights=3),
])
def test_junk_stretch_terms_are_refused_naming_the_cost_model(terms: dict[str, object]) -> None:
    """A custom cost model whose stretch_terms() states negative, zero, float or missing terms ran on the event engine
    (negative or zero unit durations: wrong times, silently) or raised a TypeError; refused by name on every policy."""
    from roofline.errors import InvalidValueError
    from roofline.sim import serve_serial, serve_static
    from roofline.sim.cost import StretchTerms

    reqs = [Request(id=i, arrival_s=i, prompt_tokens=5, output_tokens=4) for i in range(3)]
    cost = _Custom(StretchTerms(**terms))
    for policy in (serve_serial, serve_static, serve_continuous):
        for engine in ("auto", "event"):
            with pytest.raises(InvalidValueError) as caught:
                policy(reqs, cost, engine=engine)
            assert caught.value.field == "cost_model"


@pytest.mark.parametrize("cost", [UnitCostModel, None, "unit", object()])
def test_not_a_cost_model_is_refused_naming_the_cost_model_under_engine_event(cost: object) -> None:
    """serve_serial / serve_static with a class (UnitCostModel), None or a string as the cost model and engine="event"
    raised InvalidValueError naming ``engine`` ("the stretch clock cannot run this: not a cost model"), where
    engine="auto" and serve_continuous name ``cost_model``; now every policy and engine names ``cost_model``."""
    from roofline.errors import InvalidValueError
    from roofline.sim import serve_serial, serve_static

    reqs = [Request(id=0, arrival_s=0, prompt_tokens=5, output_tokens=4)]
    for policy in (serve_serial, serve_static, serve_continuous):
        for engine in ("auto", "event", "step"):
            with pytest.raises(InvalidValueError) as caught:
                policy(reqs, cost, engine=engine)
            assert caught.value.field == "cost_model", (policy.__name__, engine, caught.value)


@pytest.mark.parametrize("extra", [dict(overhead=1e308),
                                   dict(num_experts=8, experts_per_token=2, routed_expert_bytes=10**400)])
def test_step_times_beyond_a_floats_range_give_the_step_engines_results(extra: dict[str, object]) -> None:
    """A cost model whose steps take more than 1.8e308 s (overhead 1e308 s; routed experts of 10^400 bytes): the step
    engine serves it exactly, the event engine raised OverflowError (TPOT percentiles ordered by floats; continuous
    batching's ITL float search). Both now order the exact values when a float overflows: equal field by field."""
    from roofline.sim import RooflineCostModel, serve_serial, serve_static
    from roofline.testing.compare import assert_same_results

    cost = RooflineCostModel(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10, attention_flops_per_token=1,
                             bandwidth=7, peak_flops=3, **extra)  # type: ignore[arg-type]
    reqs = [Request(id=i, arrival_s=i, prompt_tokens=3, output_tokens=4) for i in range(3)]
    for policy in (serve_serial, serve_static, serve_continuous):
        assert_same_results(policy(reqs, cost, record_steps=True), policy(reqs, cost, engine="step", record_steps=True))


def test_numpy_expert_counts_keep_the_exact_mode_exact():
    """RooflineCostModel(num_experts=np.int64(8), experts_per_token=np.int64(2), ...): the step engine's times were
    floats (15.803571428571429) in exact mode, the event engine's Fractions (885/56); the counts are now ints."""
    from fractions import Fraction

    from roofline.sim import RooflineCostModel, serve_serial
    from roofline.testing.compare import assert_same_results

    kw: dict[str, object] = dict(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10,
                                 attention_flops_per_token=1, bandwidth=7, peak_flops=3, routed_expert_bytes=1)
    cost = RooflineCostModel(num_experts=np.int64(8), experts_per_token=np.int64(2), **kw)  # type: ignore[arg-type]
    assert cost.decode_time(3, 5) == RooflineCostModel(num_experts=8, experts_per_token=2, **kw).decode_time(3, 5)  # type: ignore[arg-type]
    assert type(cost.decode_time(3, 5)) is Fraction and type(cost.prefill_time(3, 5)) is Fraction
    reqs = [Request(id=i, arrival_s=i, prompt_tokens=3, output_tokens=4) for i in range(3)]
    step = serve_serial(reqs, cost, engine="step")
    assert step.requests[0].first_token_s == Fraction(885, 56)
    assert_same_results(serve_serial(reqs, cost), step)


@pytest.mark.parametrize("terms", [
    dict(weights=lambda n: Fraction(1, 3) + Fraction(1, 7**n), weights_denominator=lambda n: 3),  # hung
    dict(weights=lambda n: 0.5, weights_denominator=lambda n: 2),  # AttributeError: no denominator
    dict(weights=lambda n: Fraction(1, 3), weights_denominator=lambda n: 0),  # ZeroDivisionError
    dict(weights=lambda n: -5),  # ran, negative weights' time
    dict(weights=lambda n: 0.5),  # InvalidValueError naming "seconds"
])
def test_junk_stated_weights_are_refused_naming_the_cost_model(terms: dict[str, object]) -> None:
    """A custom cost model's stretch_terms() whose weights(n) are floats or negative, or whose weights_denominator is 0
    or does not cover weights(n): the event engine hung (restarting on ever finer clocks that never covered the
    weights), raised AttributeError or ZeroDivisionError, or ran on negative times; refused naming cost_model."""
    from roofline.errors import InvalidValueError
    from roofline.sim import serve_serial, serve_static
    from roofline.sim.cost import StretchTerms

    reqs = [Request(id=i, arrival_s=i, prompt_tokens=5, output_tokens=4) for i in range(3)]
    cost = _Custom(StretchTerms(**terms))
    for policy in (serve_serial, serve_static, serve_continuous):
        with pytest.raises(InvalidValueError) as caught:
            policy(reqs, cost, engine="event")
        assert caught.value.field == "cost_model"


class _OwnAllReduce:
    def allreduce_time(self, tokens: int) -> object:
        return 0 if not tokens else 1000


class _OwnWeights:
    def weights_read(self, tokens: int) -> object:
        return 5000


@pytest.mark.parametrize("mixin, extra", [
    (_OwnAllReduce, dict(tensor_parallel_size=2, num_hidden_layers=2, hidden_size=4)),
    (_OwnWeights, dict(num_experts=8, experts_per_token=2, routed_expert_bytes=10)),
    (_OwnWeights, {}),
])
def test_a_subclass_pricing_its_own_weights_or_all_reduce_runs_the_step_engine(mixin: type,
                                                                               extra: dict[str, object]) -> None:
    """A RooflineCostModel subclass overriding allreduce_time() or weights_read() (both called by its step times)
    inherited stretch_terms() and ran on the event engine with the base class's terms: first token at 778/7 s where
    its own step times give 7106/7 s. It now states no stretch terms (auto runs the step engine; event is refused)."""
    from roofline.errors import InvalidValueError
    from roofline.sim import RooflineCostModel, serve_serial

    cls = type("Own", (mixin, RooflineCostModel), {})
    cost = cls(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10, attention_flops_per_token=1, bandwidth=7,
               peak_flops=3, **extra)
    reqs = [Request(id=i, arrival_s=i, prompt_tokens=3, output_tokens=4) for i in range(3)]
    auto, step = serve_serial(reqs, cost), serve_serial(reqs, cost, engine="step")
    assert auto.options["engine"] == "step" and "stretch_terms" in auto.options["engine_reason"]
    assert auto.requests == step.requests
    with pytest.raises(InvalidValueError) as caught:
        serve_serial(reqs, cost, engine="event")
    assert caught.value.field == "engine"


class _Profile:
    """A duck-typed engine profile (the four methods Deployment accepts) whose overhead() or scaled() is junk."""

    name = "junk"

    def __init__(self, overhead: object, scaled: object) -> None:
        self._overhead, self._scaled = overhead, scaled

    def constants(self) -> dict[str, object]:
        return {}

    def overhead(self, layers: int) -> object:
        return self._overhead

    def scaled(self, accelerator: object) -> object:
        return accelerator if self._scaled is None else self._scaled


@pytest.mark.parametrize("overhead, scaled", [("x", None), (None, None), (0, "acc"), (0, 5)])
def test_a_duck_typed_profile_returning_junk_is_refused_naming_the_estimate(overhead: object, scaled: object) -> None:
    """Deployment(..., estimate=<object with constants/overhead/scaled/name>) whose overhead(L) returns a str or None,
    or whose scaled(accelerator) returns no Accelerator: RooflineCostModel.for_deployment raised TypeError or
    AttributeError ('str' object has no attribute 'step_terms'); now InvalidValueError naming estimate."""
    from roofline import Deployment, get_accelerator, get_model
    from roofline.errors import InvalidValueError
    from roofline.sim import RooflineCostModel

    deployment = Deployment(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), 1,
                            estimate=_Profile(overhead, scaled))
    with pytest.raises(InvalidValueError) as caught:
        RooflineCostModel.for_deployment(deployment)
    assert caught.value.field == "estimate"


def test_assert_same_results_reports_a_different_request_count_as_an_assertion():
    """assert_same_results on two runs of different request counts raised ValueError (zip strict) where it documents
    AssertionError at the first difference."""
    from roofline.testing.compare import assert_same_results

    reqs = [Request(id=i, arrival_s=0, prompt_tokens=3, output_tokens=2) for i in range(3)]
    with pytest.raises(AssertionError, match="requests: 3 vs 2"):
        assert_same_results(serve_continuous(reqs, UnitCostModel()),
                            serve_continuous(reqs[:2], UnitCostModel(), engine="step"))


@pytest.mark.parametrize("extra", [
    dict(tensor_parallel_size=2, num_hidden_layers=2, hidden_size=4, link_latency=1e-3, link_bandwidth=9,
         activation_bytes=2),
    dict(num_experts=8, experts_per_token=3, routed_expert_bytes=7),
    {},
])
def test_numpy_constants_give_the_python_constants_times(extra: dict[str, object]) -> None:
    """RooflineCostModel built from numpy scalars (np.int64 bytes and FLOPs, np.float64 peak and overhead): its exact
    Fractions held numpy ints, so the event engine's tick arithmetic wrapped at 2^63 (RuntimeWarning: overflow, then
    OverflowError: Python int too large to convert to C long). Now every engine gives the Python constants' times."""
    from roofline.sim import RooflineCostModel, serve_serial, serve_static
    from roofline.testing.compare import assert_same_results

    plain: dict[str, object] = dict(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10,
                                    attention_flops_per_token=1, bandwidth=7, peak_flops=3.5, overhead=0.25, **extra)
    numpy = {k: (np.int64(v) if isinstance(v, int) else np.float64(v)) for k, v in plain.items()}
    reference = RooflineCostModel(**plain)  # type: ignore[arg-type]
    cost = RooflineCostModel(**numpy)  # type: ignore[arg-type]
    reqs = [Request(id=i, arrival_s=i, prompt_tokens=3, output_tokens=4) for i in range(3)]
    for policy in (serve_serial, serve_static, serve_continuous):
        event, step = policy(reqs, cost), policy(reqs, cost, engine="step")
        assert_same_results(event, step)
        assert event.requests == policy(reqs, reference).requests


def test_absurd_budgets_arrays_and_junk_percentile_values_are_refused_by_name():
    """A KV budget of 10^400 bytes was a pool of 7.6e395 blocks; a RooflineCostModel given an array raised a bare
    TypeError; percentile returned a string or NaN it was given. Each is now an InvalidValueError naming the field."""
    from roofline import get_model
    from roofline.errors import InvalidValueError
    from roofline.sim import KVPool, RooflineCostModel, percentile
    from roofline.sim.kv import MAX_BUDGET

    with pytest.raises(InvalidValueError) as err:
        KVPool.for_model(get_model("llama-3.1-8b"), budget=10**400)
    assert err.value.field == "budget"
    assert KVPool.from_budget(budget=MAX_BUDGET, kv_bytes_per_token=131_072).capacity_blocks == \
        MAX_BUDGET // (16 * 131_072)
    terms = dict(weight_bytes=10, kv_bytes_per_token=1, flops_per_token=1, attention_flops_per_token=0, bandwidth=1,
                 peak_flops=1)
    for name in ("weight_bytes", "bandwidth", "link_latency", "state_bytes"):
        with pytest.raises(InvalidValueError) as err:
            RooflineCostModel(**{**terms, name: np.array([1, 2])})
        assert err.value.field == name
    for values, field in ((["a", 1], "values[0]"), ([1, float("nan")], "values[1]"), ([True], "values[0]"),
                          ("abc", "values"), ([], "values")):
        with pytest.raises(InvalidValueError) as err:
            percentile(values, 50)
        assert err.value.field == field
    # sorted 1/2, 2.0, 3, 10^400: linear rank h = 3 x 50 / 100 = 1.5, halfway from 2.0 to 3 (a float: 2.0 is one);
    # nearest rank ceil(4 x 50 / 100) = 2: the element 2.0
    assert percentile([3, Fraction(1, 2), 2.0, 10**400], 50) == 2.5
    assert percentile([3, Fraction(1, 2), 2.0, 10**400], 50, method="inverted_cdf") == 2.0
