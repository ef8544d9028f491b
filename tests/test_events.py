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
from roofline.testing.strategies import closed_loops, cost_models, kv_pools, layer_windows, workloads

_ORACLE = settings.get_profile("simulation_oracle")
AT_LEAST_500 = settings(_ORACLE, max_examples=_ORACLE.max_examples if _ORACLE.max_examples < 200
                        else max(500, _ORACLE.max_examples))

LLAMA = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
MIXTRAL = RooflineCostModel.for_model(get_model("mixtral-8x7b"), get_accelerator("h200-sxm"))
LLAMA_70B_TP4 = RooflineCostModel.for_model(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"),
                                            tensor_parallel_size=4)
SMALL = RooflineCostModel(weight_bytes=50, kv_bytes_per_token=3, flops_per_token=7, attention_flops_per_token=2,
                          bandwidth=10, peak_flops=30, overhead=Fraction(1, 10))
COSTS = cost_models(overhead=True) | st.sampled_from([SMALL, LLAMA, UnitCostModel(decode=Fraction(2, 3), prefill=2)])


WORK = workloads(min_size=0, max_size=12, max_prompt_tokens=40, max_output_tokens=30)


def pools(reqs: Any) -> st.SearchStrategy[KVPool]:
    """Unlimited, roomy or tight pools (tight: every request fits alone but few together, so preemption)."""
    return kv_pools(min_blocks=0, max_blocks=80, max_block_size=8, unlimited=None, tight_for=reqs)


def both(requests: Any, cost: Any, **kw: Any) -> None:
    """Serve with both engines and compare field by field (step records included unless ``record_steps=False``)."""
    kw.setdefault("record_steps", True)
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


@AT_LEAST_500
@given(reqs=WORK, windows=layer_windows(max_window=30), data=st.data(), seqs=st.integers(1, 6),
       on_demand=st.booleans(), chunked=st.booleans(), record=st.booleans())
def test_sliding_windows_under_continuous_batching_equal_the_step_engine(reqs: Any, windows: tuple,
                                                                         data: st.DataObject, seqs: int,
                                                                         on_demand: bool, chunked: bool,
                                                                         record: bool) -> None:
    """Sliding windows under continuous batching on the stretch clock (a row crossing a window ends a stretch, as a
    finish does): separate or chunked prefill, reserve or on-demand admission, windowed pools, ITL and step records
    equal to the step clock's."""
    cost = data.draw(cost_models(overhead=True, layer_windows=windows))
    pool = data.draw(kv_pools(unlimited=None, max_blocks=300, max_block_size=8, layer_windows=windows))
    kw: dict[str, Any] = dict(max_num_seqs=seqs, admission="on_demand" if on_demand else "reserve", kv_pool=pool,
                              record_steps=record)
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=data.draw(st.integers(seqs, seqs + 60)))
    both(reqs, cost, **kw)


def test_a_window_crossed_ends_a_stretch_by_hand():
    """Gemma 3 27B (1,024-token windows on 5 of 6 layers): one request of 100 + 10^6 tokens under continuous
    batching runs on the stretch clock at once (its stretch cut where its context passes the window) and equals
    serial serving of it (priced piece by piece, ``TickCosts.batch_stretch``), ITL included; a request of 3,000
    tokens equals the step clock step by step."""
    gemma = RooflineCostModel.for_model(get_model("gemma-3-27b"), get_accelerator("h200-sxm"))
    long = [Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=10**6)]
    r, s = serve_continuous(long, gemma), serve_serial(long, gemma)
    assert r.options["engine"] == s.options["engine"] == "event"
    assert r.requests[0].handed_back_s == s.requests[0].handed_back_s and r.summary.itl == s.summary.itl
    short = [Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=3000)]
    step = serve_continuous(short, gemma, engine="step", record_steps=True)
    held = sum(101 if w is None else min(101, w) for w in gemma.layer_windows)  # token-layers at context 101
    assert step.steps is not None and step.steps[1].context_sum == held
    assert_same_results(serve_continuous(short, gemma, record_steps=True), step)


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
    r = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2, record_steps=True)
    assert [x.handed_back_s for x in r.requests] == [3, 2]
    assert r.summary.itl is not None and r.summary.itl.max == 1 and r.summary.itl.mean == 1


def test_engine_is_checked():
    """An unknown engine is refused by name."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=1, output_tokens=2)]
    for serve in (serve_continuous, serve_serial):
        with pytest.raises(InvalidValueError) as err:
            serve(reqs, UnitCostModel(), engine="fast")
        assert err.value.field == "engine"


def test_moe_and_tensor_parallel_models_run_on_the_stretch_clock():
    """MoE (weights read set by the step's tokens) and tensor-parallel (all-reduce) cost models run on the event
    engine under every policy, equal to the step engine; the result says which ran."""
    from roofline.sim import serve_static
    from roofline.sim.stretch import StretchTable, TickCosts

    moe = RooflineCostModel(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10, attention_flops_per_token=1,
                            bandwidth=1, peak_flops=1, routed_expert_bytes=40, num_experts=8, experts_per_token=2)
    tp = RooflineCostModel(weight_bytes=100, kv_bytes_per_token=2, flops_per_token=10, attention_flops_per_token=1,
                           bandwidth=1, peak_flops=1, tensor_parallel_size=2, num_hidden_layers=2, hidden_size=4)
    for cost in (moe, tp):
        costs = TickCosts.build(cost)
        assert costs is not None and costs.varying
    reqs = [Request(id=i, arrival_s=Fraction(i, 2), prompt_tokens=3 + i, output_tokens=4 + i) for i in range(5)]
    for cost in (moe, tp, MIXTRAL, LLAMA_70B_TP4):
        for serve, kw in ((serve_serial, {}), (serve_static, {"batch_size": 3}), (serve_continuous, {}),
                          (serve_continuous, {"prefill": "chunked", "max_num_batched_tokens": 8, "max_num_seqs": 4})):
            a = serve(reqs, cost, record_steps=True, **kw)
            b = serve(reqs, cost, engine="step", record_steps=True, **kw)
            assert_same_results(a, b)
            if serve is not serve_continuous:
                assert isinstance(a.steps, StretchTable)


def test_the_tensor_parallel_terms_are_the_all_reduce_by_hand():
    """Llama 3.1 70B at T = 4 on H100 SXM: the stretch terms' link latency + n x per-token time is the cost model's
    all-reduce of n tokens (2 L ring all-reduces: latency 2 L 2 (T - 1) alpha, bandwidth 2 L 2 (T - 1) / T n h e /
    beta)."""
    terms = LLAMA_70B_TP4.stretch_terms()
    assert not isinstance(terms, str)
    link = get_accelerator("h100-sxm").link(4)
    L, h = 80, 8192
    assert terms.link_latency == 2 * L * 2 * 3 * Fraction(link.latency.value)
    assert terms.link_per_token == 2 * L * Fraction(2 * 3, 4) * h * 2 / Fraction(link.bandwidth.value)
    for n in (1, 2, 7, 256, 8192):
        assert terms.link_latency + terms.link_per_token * n == LLAMA_70B_TP4.allreduce_time(n)


def test_the_moe_weights_in_ticks_are_the_cost_models_and_a_coarse_clock_starts_over():
    """Mixtral 8x7B: the integer form of the weights read (D (base - scale (3/4)^n)) equals weights_read(n) / BW x D
    for every n the clock covers; a step of more tokens than the clock covers raises ClockTooCoarse, and a run
    whose prefill needs more tokens than its first clock (3 prompts of 300 at once) starts over and is exact."""
    from roofline.sim.stretch import ClockTooCoarse, TickCosts

    costs = TickCosts.build(MIXTRAL, max_tokens=64)
    assert costs is not None
    bw = Fraction(get_accelerator("h200-sxm").bandwidth)
    for n in (1, 2, 3, 17, 64):
        assert Fraction(costs.weights(n), costs.clock.denominator) == MIXTRAL.weights_read(n) / bw
    assert costs.clock.denominator % 4 ** 64 == 0  # (3/4)^n: the clock holds 4^64
    with pytest.raises(ClockTooCoarse):  # 4^1000 divides no clock built for 64 tokens
        costs.weights(1000)
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=300, output_tokens=5) for i in range(3)]
    assert_same_results(serve_continuous(reqs, MIXTRAL, record_steps=True),
                        serve_continuous(reqs, MIXTRAL, engine="step", record_steps=True))


def test_which_engine_ran_is_said_and_event_is_refused_by_name():
    """Float mode and a custom cost model that prices its own steps take the step engine under engine="auto",
    saying why; engine="event" refuses them naming the reason; a sliding-window model under continuous batching too."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=5, output_tokens=4) for i in range(3)]
    floats = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), exact=False)

    class Priced(UnitCostModel):
        def decode_time(self, batch: int, context_sum: int) -> Any:
            return batch

    gemma = RooflineCostModel.for_model(get_model("gemma-3-27b"), get_accelerator("h200-sxm"))
    cases = [(floats, serve_serial, "float mode"), (Priced(), serve_continuous, "prices its own decode_time")]
    for cost, serve, why in cases:
        r = serve(reqs, cost)
        assert r.options["engine"] == "step" and why in r.options["engine_reason"]
        with pytest.raises(InvalidValueError, match=why) as err:
            serve(reqs, cost, engine="event")
        assert err.value.field == "engine"
    assert serve_serial(reqs, gemma, record_steps=True).options["engine"] == "event"
    assert serve_continuous(reqs, gemma).options["engine"] == "event"  # sliding windows: windows crossed are events
    assert serve_serial(reqs, LLAMA, engine="step",
                        record_steps=True).options == {"max_model_len": None, "engine": "step",
                                                                 "engine_reason": "asked for (engine='step')",
                                                                 "kv_capacity_blocks": None, "block_size": 1}


def test_a_huge_block_size_costs_nothing_per_token_of_the_block():
    """Break-it: a block of 10**6 or 10**9 tokens is a valid pool; both engines ran O(b) per run or per stretch
    (a list of b residues: 11 s and 8 GB at 10**9; the event engine's overflow search O(b^2): minutes at 10**5).

    On-demand admission with unit costs depends only on where each sequence crosses a block: prompts b - 10 + i
    at block b behave as prompts 990 + i at block 1,000 (same hand-backs, same preemptions)."""
    def serve(b: int, engine: str) -> Any:
        reqs = [Request(id=i, arrival_s=0, prompt_tokens=b - 10 + i, output_tokens=60) for i in range(4)]
        return serve_continuous(reqs, UnitCostModel(), kv_pool=KVPool(5, b), admission="on_demand", engine=engine,
                                record_steps=True)

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


def test_a_request_rejected_on_arrival_frees_its_client_at_that_arrival():
    """Closed loop, 2 clients, think 1/2 s, unit steps, max_model_len 10 (the 1 + 50 requests are rejected). Request 1
    (client 1) is rejected at 0, so client 1 sends request 2 at 1/2; it arrives mid-step and is rejected too, so
    client 1 sends its next at 1. Client 0's request 0 (one token) is handed back at 1, its next at 3/2. By hand:
    arrivals 0, 0, 1/2, 1, 3/2 from clients 0, 1, 1, 1, 0 (before: the hand-back at 1 was ranked first, and the
    next two arrivals came out of order, 3/2 then 1). Request 3 (3 tokens) is prefilled in [1, 2]; request 4 (2
    tokens) prefills in [2, 3] while it waits; both decode in [3, 4] (request 4 done), request 3 again in [4, 5]."""
    from roofline.sim import ClosedLoop

    loop = ClosedLoop(clients=2, lengths=[(1, 1), (1, 50), (1, 50), (1, 3), (1, 2)], think_time_s=Fraction(1, 2))
    for engine in ("event", "step"):
        r = serve_continuous(loop, UnitCostModel(), max_model_len=10, engine=engine, record_steps=True)
        assert [x.arrival_s for x in r.requests] == [0, 0, Fraction(1, 2), 1, Fraction(3, 2)]
        assert [x.client for x in r.requests] == [0, 1, 1, 1, 0]
        assert [x.rejected for x in r.requests] == [False, True, True, False, False]
        assert [x.handed_back_s for x in r.requests] == [1, None, None, 5, 4]
    assert_same_results(serve_continuous(loop, UnitCostModel(), max_model_len=10, record_steps=True),
                        serve_continuous(loop, UnitCostModel(), max_model_len=10, engine="step", record_steps=True))


def _deployed(kind: str) -> st.SearchStrategy[Any]:
    """Exact roofline cost models of one kind: mixture of experts, tensor parallel (both hand-built from small
    constants, which put many steps near the roofline's crossover), or a preset under an engine profile."""
    from roofline.calibrate.fit import profile_names

    if kind == "estimate":
        return st.builds(lambda name, model: RooflineCostModel.for_model(get_model(model), get_accelerator("h100-sxm"),
                                                                          estimate=name),
                         st.sampled_from(profile_names()), st.sampled_from(["llama-3.1-8b", "qwen2.5-7b"]))
    base = st.fixed_dictionaries(dict(
        weight_bytes=st.integers(1, 80), kv_bytes_per_token=st.integers(0, 9), flops_per_token=st.integers(1, 60),
        attention_flops_per_token=st.integers(0, 5), bandwidth=st.integers(1, 20), peak_flops=st.integers(1, 40),
        overhead=st.sampled_from([0, Fraction(1, 10), Fraction(2, 7)])))
    if kind == "moe":
        extra = st.integers(2, 16).flatmap(lambda e: st.fixed_dictionaries(dict(
            num_experts=st.just(e), experts_per_token=st.integers(1, e), routed_expert_bytes=st.integers(0, 60))))
        presets = [MIXTRAL]
    else:
        extra = st.fixed_dictionaries(dict(
            tensor_parallel_size=st.integers(2, 8), num_hidden_layers=st.integers(1, 4), hidden_size=st.integers(1, 16),
            link_bandwidth=st.integers(1, 50), link_latency=st.sampled_from([0, Fraction(1, 100), Fraction(3, 7)])))
        presets = [LLAMA_70B_TP4]
    return st.builds(lambda b, e: RooflineCostModel(**b, **e), base, extra) | st.sampled_from(presets)


@pytest.mark.parametrize("kind", ["moe", "tp", "estimate"])
@AT_LEAST_500
@given(data=st.data(), reqs=WORK, seqs=st.integers(1, 6), on_demand=st.booleans())
def test_every_deployment_equals_the_step_engine(kind: str, data: st.DataObject, reqs: Any, seqs: int,
                                                 on_demand: bool) -> None:
    """MoE, tensor-parallel and estimate cost models, each over 500 generated workloads, every policy drawn: serial,
    static (batch, max wait), continuous with separate or chunked prefill, reserve or on-demand admission, tight
    pools: the stretch clock equals the step clock field by field (step records included when drawn)."""
    from roofline.sim import serve_static

    cost = data.draw(_deployed(kind))
    record = data.draw(st.booleans())
    policy = data.draw(st.sampled_from(["serial", "static", "separate", "chunked"]))
    kw: dict[str, Any] = dict(record_steps=record, kv_pool=data.draw(pools(reqs)))
    if policy == "serial":
        a, b = serve_serial(reqs, cost, **kw), serve_serial(reqs, cost, engine="step", **kw)
    elif policy == "static":
        kw.update(batch_size=data.draw(st.integers(1, 5)), max_wait=data.draw(st.sampled_from([None, 0, 2])))
        a, b = serve_static(reqs, cost, **kw), serve_static(reqs, cost, engine="step", **kw)
    else:
        kw.update(max_num_seqs=seqs, admission="on_demand" if on_demand else "reserve")
        if policy == "chunked":
            kw.update(prefill="chunked", max_num_batched_tokens=data.draw(st.integers(seqs, seqs + 60)))
        a, b = serve_continuous(reqs, cost, **kw), serve_continuous(reqs, cost, engine="step", **kw)
    assert_same_results(a, b)


def test_a_single_gap_beyond_the_segments_bound_keeps_the_itl_search_exact():
    """Found by the deployment test above while the ITL search took per-segment weights and overheads: vLLM's
    estimate profile on Llama 3.1 8B, two requests of 23 tokens, on-demand admission in a pool of 8 blocks of 3.
    The gap to the first token after the preemption is a single gap larger than every decode segment's bound, and
    the search's int64 columns were sized by the segments alone: OverflowError. They now hold the largest single
    gap too; the result equals the step engine's."""
    cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), estimate="vllm")
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=23) for i in range(2)]
    kw: dict[str, Any] = dict(max_num_seqs=2, admission="on_demand", kv_pool=KVPool(8, 3))
    event, step = serve_continuous(reqs, cost, **kw), serve_continuous(reqs, cost, engine="step", **kw)
    assert_same_results(event, step)
    assert event.summary.preemptions == 1 and event.summary.itl is not None
