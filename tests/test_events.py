"""The event engine for continuous batching equals the step engine exactly (roofline.sim.events).

Every generated workload (ties and arrivals on step boundaries, preemption-heavy pools,
rejections, chunked-prefill budgets, closed-loop clients, unit and roofline costs) is
served by both engines; every request's fields, every summary figure (ITL included) and
every step record must be equal, value and number type.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import get_accelerator, get_model
from roofline.errors import InvalidValueError
from roofline.sim import KVPool, Request, RooflineCostModel, UnitCostModel, serve_continuous, serve_serial
from roofline.testing.compare import assert_same_results
from roofline.testing.strategies import closed_loops, cost_models, kv_pools, workloads

_ORACLE = settings.get_profile("simulation_oracle")
AT_LEAST_500 = settings(_ORACLE, max_examples=_ORACLE.max_examples if _ORACLE.max_examples < 200
                        else max(500, _ORACLE.max_examples))

LLAMA = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
SMALL = RooflineCostModel(weight_bytes=50, kv_bytes_per_token=3, flops_per_token=7, attention_flops_per_token=2,
                          bandwidth=10, peak_flops=30, overhead=Fraction(1, 10))
COSTS = cost_models(overhead=True) | st.sampled_from([SMALL, LLAMA, UnitCostModel(decode=Fraction(2, 3), prefill=2)])


WORK = workloads(min_size=0, max_size=12, max_prompt_tokens=40, max_output_tokens=30)


def pools(reqs: Any) -> st.SearchStrategy[KVPool]:
    """Unlimited, roomy or tight pools (tight: every request fits alone but few together, so preemption)."""
    return kv_pools(min_blocks=0, max_blocks=80, max_block_size=8, unlimited=None, tight_for=reqs)


def both(requests: Any, cost: Any, **kw: Any) -> None:
    """Serve with both engines and compare field by field."""
    assert_same_results(serve_continuous(requests, cost, **kw), serve_continuous(requests, cost, engine="step", **kw))


@AT_LEAST_500
@given(reqs=WORK, cost=COSTS, data=st.data(), seqs=st.integers(1, 6), on_demand=st.booleans(),
       record=st.booleans())
def test_continuous_separate_prefill_equals_the_step_engine(reqs: Any, cost: Any, data: st.DataObject, seqs: int,
                                                             on_demand: bool, record: bool) -> None:
    """Separate prefill, reserve or on-demand admission (preemption), prefill budgets, max_model_len."""
    pool = data.draw(pools(reqs))
    budget = data.draw(st.one_of(st.none(), st.integers(1, 120)))
    max_len = data.draw(st.one_of(st.none(), st.integers(1, 80)))
    both(reqs, cost, max_num_seqs=seqs, admission="on_demand" if on_demand else "reserve", kv_pool=pool,
         max_prefill_tokens=budget, max_model_len=max_len, record_steps=record)


@AT_LEAST_500
@given(reqs=WORK, cost=COSTS, data=st.data(), seqs=st.integers(1, 6), on_demand=st.booleans(),
       record=st.booleans())
def test_continuous_chunked_prefill_equals_the_step_engine(reqs: Any, cost: Any, data: st.DataObject, seqs: int,
                                                            on_demand: bool, record: bool) -> None:
    """Chunked prefill with token budgets from max_num_seqs up, both admissions, tight pools."""
    pool = data.draw(pools(reqs))
    budget = data.draw(st.integers(seqs, seqs + 60))
    both(reqs, cost, max_num_seqs=seqs, admission="on_demand" if on_demand else "reserve", kv_pool=pool,
         prefill="chunked", max_num_batched_tokens=budget, record_steps=record)


@AT_LEAST_500
@given(loop=closed_loops(max_clients=5, max_size=12, max_prompt_tokens=40, max_output_tokens=30), cost=COSTS,
       data=st.data(), seqs=st.integers(1, 6), on_demand=st.booleans(), chunked=st.booleans())
def test_closed_loop_equals_the_step_engine(loop: Any, cost: Any, data: st.DataObject, seqs: int, on_demand: bool,
                                            chunked: bool) -> None:
    """Closed-loop clients (arrivals made as the run goes), both prefill modes and admissions."""
    pool = data.draw(kv_pools(min_blocks=0, max_blocks=80, max_block_size=8, unlimited=None))
    kw: dict[str, Any] = dict(max_num_seqs=seqs, admission="on_demand" if on_demand else "reserve", kv_pool=pool)
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=data.draw(st.integers(seqs, seqs + 60)))
    both(loop, cost, **kw)


def test_long_decodes_are_one_stretch_each():
    """Two requests at t = 0, 10^9 and 10^9 + 5 output tokens: served exactly at once (one stretch, then one)."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=10**9),
            Request(id=1, arrival_s=0, prompt_tokens=50, output_tokens=10**9 + 5)]
    r = serve_continuous(reqs, LLAMA, record_steps=False)
    assert r.summary.steps == 1 + 10**9 + 5 - 1  # one prefill of both, then decodes to the longer
    prefill = LLAMA.prefill_time(150, 100 * 101 // 2 + 50 * 51 // 2)
    two = sum(LLAMA.decode_time(2, 152 + 2 * j) for j in range(3))  # the first steps, by hand
    assert r.requests[0].first_token_s == prefill and r.requests[1].first_token_s == prefill
    assert r.requests[0].finish_s > prefill + two and isinstance(r.requests[0].finish_s, Fraction)
    itl = r.summary.itl
    # the longest gap: the last step of both, contexts 100 + 10^9 - 1 and 50 + 10^9 - 1
    assert itl is not None and itl.max == LLAMA.decode_time(2, 2 * 10**9 + 148)


def test_a_small_run_by_hand():
    """Unit costs, B = 2, outputs 3 and 2 at t = 0: one prefill, then decodes; hand-backs at 3 and 2 (by hand)."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=o) for i, o in enumerate([3, 2])]
    r = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2)
    assert [x.handed_back_s for x in r.requests] == [3, 2]
    assert r.summary.itl is not None and r.summary.itl.max == 1 and r.summary.itl.mean == 1


def test_engine_is_checked():
    """An unknown engine is refused by name."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=1, output_tokens=2)]
    for serve in (serve_continuous, serve_serial):
        with pytest.raises(InvalidValueError) as err:
            serve(reqs, UnitCostModel(), engine="fast")
        assert err.value.field == "engine"


def test_moe_and_tensor_parallel_models_fall_back_to_the_step_engine():
    """MoE (batch-dependent weight bytes) and tensor-parallel (all-reduce) cost models run on the step engine."""
    from roofline.sim.stretch import StretchTable, TickCosts

    moe = RooflineCostModel(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10, attention_flops_per_token=1,
                            bandwidth=1, peak_flops=1, routed_expert_bytes=40, num_experts=8, experts_per_token=2)
    tp = RooflineCostModel(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10, attention_flops_per_token=1,
                           bandwidth=1, peak_flops=1, tensor_parallel_size=2, num_hidden_layers=2, hidden_size=4)
    assert TickCosts.rationals(moe) is None and TickCosts.rationals(tp) is None
    assert TickCosts.rationals(SMALL) is not None
    reqs = [Request(id=i, arrival_s=Fraction(i, 2), prompt_tokens=3 + i, output_tokens=4 + i) for i in range(5)]
    for cost in (moe, tp):
        for serve, kw in ((serve_serial, {}), (serve_continuous, {}), (serve_continuous, {"prefill": "chunked"})):
            a, b = serve(reqs, cost, **kw), serve(reqs, cost, engine="step", **kw)
            assert a.requests == b.requests and a.summary == b.summary
            assert a.steps is not None and not isinstance(a.steps, StretchTable)


def test_a_huge_block_size_costs_nothing_per_token_of_the_block():
    """Break-it: a block of 10**6 or 10**9 tokens is a valid pool; both engines ran O(b) per run or per stretch
    (a list of b residues: 11 s and 8 GB at 10**9; the event engine's overflow search O(b^2): minutes at 10**5).

    On-demand admission with unit costs depends only on where each sequence crosses a block: prompts b - 10 + i
    at block b behave as prompts 990 + i at block 1,000 (same hand-backs, same preemptions)."""
    def serve(b: int, engine: str) -> Any:
        reqs = [Request(id=i, arrival_s=0, prompt_tokens=b - 10 + i, output_tokens=60) for i in range(4)]
        return serve_continuous(reqs, UnitCostModel(), kv_pool=KVPool(5, b), admission="on_demand", engine=engine)

    small = serve(1000, "step")
    assert sum(r.preemptions for r in small.requests) == 2
    for b in (10**6, 10**9):
        for engine in ("event", "step"):
            big = serve(b, engine)
            assert [(r.handed_back_s, r.preemptions) for r in big.requests] == \
                [(r.handed_back_s, r.preemptions) for r in small.requests]


def test_arrivals_of_many_denominators_keep_the_itl_search_short():
    """Break-it: 800 arrivals (1000 i + 1) / p_i over the first 800 primes put the tick clock at 1 / lcm (10**2400):
    the event engine's ITL percentiles bisected over tick values, ~8,000 passes over every segment of bigints:
    79 s against the step engine's 0.3 s. Every gap is a multiple of the step durations' common tick, and the
    search now runs on those; the results equal the step engine's (the time: benchmarks/bench_pathological.py)."""
    import sympy

    primes = list(sympy.primerange(sympy.prime(800) + 1))  # the first 800 primes
    arrivals = sorted(Fraction(1000 * i + 1, p) for i, p in enumerate(primes))
    reqs = [Request(id=i, arrival_s=a, prompt_tokens=50, output_tokens=200) for i, a in enumerate(arrivals)]
    events = serve_continuous(reqs, LLAMA, record_steps=False)
    assert_same_results(events, serve_continuous(reqs, LLAMA, record_steps=False, engine="step"))
