"""Decode stretches: the closed forms against the steps summed one by one, and the event engine against the step engine.

A stretch is n decode steps of a fixed batch whose context sum grows by B per step
(docs/conventions.md, "One step"). Its time, the first step count reaching a time and its
paged blocks have closed forms (roofline.formulas.stretch); the event engine
(roofline.sim.stretch) serves serial and static batching with them on an integer tick
clock and must give the step engine's results exactly, field by field and type by type.
"""

from __future__ import annotations

import io
import math
from fractions import Fraction
from typing import Any

import attrs
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import get_accelerator, get_model
from roofline.errors import InvalidValueError
from roofline.sim import (
    KVPool,
    LayerWindows,
    Request,
    RooflineCostModel,
    SimulationError,
    UnitCostModel,
    serve_serial,
    serve_static,
)
from roofline.sim.cost import stretch_terms
from roofline.sim.stretch import (
    StretchTable,
    TickClock,
    TickCosts,
    advance,
    blocks_growth,
    first_pool_overflow,
)
from roofline.testing.compare import assert_same_results as _assert_same_results
from roofline.testing.strategies import (
    batch_sizes,
    cost_models,
    decode_stretches,
    kv_pools,
    layer_windows,
    workloads,
)


def _stretch_clock(serve: Any, requests: Any, cost: Any, **kw: Any) -> Any:
    """``serve(..., engine="auto")``, checked to have run on the stretch clock exactly when the cost model states
    its stretch terms (so an equality test never compares the step clock with itself unnoticed)."""
    result = serve(requests, cost, engine="auto", **kw)
    assert result.options["engine"] == ("step" if isinstance(stretch_terms(cost), str) else "event")
    return result


def serve_serial_events(requests: Any, cost: Any, **kw: Any) -> Any:
    """Serial serving on the stretch clock where it can run (the step clock, said so, where it cannot)."""
    return _stretch_clock(serve_serial, requests, cost, **kw)


def serve_static_events(requests: Any, cost: Any, **kw: Any) -> Any:
    """Static batching on the stretch clock where it can run."""
    return _stretch_clock(serve_static, requests, cost, **kw)


#: The event engine against the step engine: at least 500 workloads per policy (the issue's floor), except
#: under the wheel profile (a packaging check), which keeps its own count.
_ORACLE = settings.get_profile("simulation_oracle")
AT_LEAST_500 = settings(_ORACLE, max_examples=_ORACLE.max_examples if _ORACLE.max_examples < 200
                        else max(500, _ORACLE.max_examples))

LLAMA = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
TERMS = ("weight_bytes", "kv_bytes_per_token", "flops_per_token", "attention_flops_per_token", "bandwidth",
         "peak_flops")


def llama_terms() -> dict[str, Any]:
    """Llama 3.1 8B on H100 SXM, the lesson's scenario, as exact formula arguments (Fractions)."""
    return {name: Fraction(getattr(LLAMA, name)) for name in TERMS}


def step_by_step(kw: dict[str, Any], steps: int, *, overlap: bool = True) -> list[Any]:
    """Prefix sums of the stretch's step times, each step priced alone by roofline.formulas.step_time."""
    one = f.step_time if overlap else f.step_time_no_overlap
    args = {k: v for k, v in kw.items() if k not in ("batch", "context_sum")}
    total, out = Fraction(0), [Fraction(0)]
    for j in range(steps):
        total += one(batch=kw["batch"], context_sum=kw["context_sum"] + kw["batch"] * j, **args)
        out.append(total)
    return out


# --------------------------------------------------------------------------- the formulas


@given(kw=decode_stretches(), steps=st.integers(0, 120))
def test_stretch_time_is_the_sum_of_its_steps(kw: dict[str, Any], steps: int) -> None:
    """stretch_time and stretch_time_no_overlap equal the step times summed one by one, exactly (Fractions)."""
    assert f.stretch_time(steps=steps, **kw) == step_by_step(kw, steps)[-1]
    assert f.stretch_time_no_overlap(steps=steps, **kw) == step_by_step(kw, steps, overlap=False)[-1]


@given(kw=decode_stretches(crossing=True), steps=st.integers(0, 120))
def test_stretch_time_across_the_crossover(kw: dict[str, Any], steps: int) -> None:
    """A stretch that crosses from one bound to the other sums exactly; the crossover is where the bound swaps."""
    args = {k: v for k, v in kw.items() if k != "overhead"}
    j = f.stretch_crossover(**args)
    note(f"crossover {j}")
    assert j is not None and 0 <= j <= 60
    assert f.stretch_time(steps=steps, **kw) == step_by_step(kw, steps)[-1]
    for step in range(max(0, math.floor(j) - 1), math.floor(j) + 3):
        s = kw["context_sum"] + kw["batch"] * step
        memory = f.memory_time(weight_bytes=kw["weight_bytes"], kv_bytes_per_token=kw["kv_bytes_per_token"],
                               context_sum=s, bandwidth=kw["bandwidth"])
        compute = f.compute_time(batch=kw["batch"], flops_per_token=kw["flops_per_token"],
                                 attention_flops_per_token=kw["attention_flops_per_token"], context_sum=s,
                                 peak_flops=kw["peak_flops"])
        slower_memory = kw["kv_bytes_per_token"] / kw["bandwidth"] < kw["attention_flops_per_token"] / kw["peak_flops"]
        # before j* the line with the smaller slope is on top
        if step < j:
            assert (memory > compute) == slower_memory
        elif step > j:
            assert (memory > compute) != slower_memory
        else:
            assert memory == compute


def test_stretches_of_length_zero_and_one():
    """0 steps take 0 s; 1 step takes one step_time; the step count for 0 s is 0 and for a tiny time 1."""
    kw = dict(llama_terms(), batch=8, context_sum=8 * 1000, overhead=Fraction(1, 10**4))
    one = f.step_time(**kw)
    assert f.stretch_time(steps=0, **kw) == 0 and f.stretch_time_no_overlap(steps=0, **kw) == 0
    assert f.stretch_time(steps=1, **kw) == one
    assert f.stretch_steps_until(target_time=0, **kw) == 0
    assert f.stretch_steps_until(target_time=Fraction(1, 10**30), **kw) == 1
    assert f.stretch_steps_until(target_time=one, **kw) == 1
    assert f.stretch_steps_until(target_time=one + Fraction(1, 10**30), **kw) == 2


def test_llama_crossover_by_hand():
    """Batch 512 at 100 tokens: compute-bound through step 50, memory-bound from 51 (worked by hand)."""
    kw = dict(llama_terms(), batch=512, context_sum=51_200)
    # j* = (c0 - m0) / (ms - cs) with the exact constants
    m0 = Fraction(16_060_522_496 + 131_072 * 51_200, 3_350_000_000_000)
    c0 = Fraction(512 * 15_009_316_864 + 524_288 * 51_200, 989_400_000_000_000)
    ms, cs = Fraction(131_072 * 512, 3_350_000_000_000), Fraction(524_288 * 512, 989_400_000_000_000)
    assert f.stretch_crossover(**kw) == (c0 - m0) / (ms - cs)
    assert 50 < f.stretch_crossover(**kw) < 51
    # 100 steps: 51 compute-bound steps, then 49 memory-bound ones
    expected = sum(c0 + cs * j for j in range(51)) + sum(m0 + ms * j for j in range(51, 100))
    assert f.stretch_time(steps=100, overhead=0, **kw) == expected


def test_equal_slopes_have_no_crossover():
    """When k / BW = a / peak the times never swap: no crossover (None), and the sum follows the top line."""
    kw = dict(batch=2, context_sum=4, weight_bytes=10, kv_bytes_per_token=1, flops_per_token=1,
              attention_flops_per_token=2, bandwidth=1, peak_flops=2)
    assert f.stretch_crossover(**kw) is None
    # memory 14 + 2j, compute 5 + 2j: 14 + 16 + 18
    assert f.stretch_time(steps=3, overhead=0, **kw) == 48


@given(kw=st.one_of(decode_stretches(), decode_stretches(crossing=True)), steps=st.integers(0, 80), data=st.data())
def test_steps_until_is_the_first_prefix_sum_reaching_the_time(kw: dict[str, Any], steps: int,
                                                              data: st.DataObject) -> None:
    """stretch_steps_until(t) is the least n with sum of n steps >= t, exactly at and around every boundary."""
    prefix = step_by_step(kw, steps + 1)
    nudge = data.draw(st.sampled_from([Fraction(0), Fraction(-1, 10**9), Fraction(1, 10**9)]))
    target = max(Fraction(0), prefix[steps] + nudge * prefix[1])
    expected = next(n for n, total in enumerate(prefix) if total >= target)
    assert f.stretch_steps_until(target_time=target, **kw) == expected
    prefix = step_by_step(kw, steps + 1, overlap=False)
    target = max(Fraction(0), prefix[steps] + nudge * prefix[1])
    expected = next(n for n, total in enumerate(prefix) if total >= target)
    assert f.stretch_steps_until_no_overlap(target_time=target, **kw) == expected


def test_steps_until_a_day_is_exact_on_large_values():
    """A day of decode at batch 1 on Llama 3.1 8B: the count's prefix sum reaches 86,400 s and the one before not."""
    kw = dict(llama_terms(), batch=1, context_sum=1, overhead=0)
    n = f.stretch_steps_until(target_time=86_400, **kw)
    assert f.stretch_time(steps=n, **kw) >= 86_400 > f.stretch_time(steps=n - 1, **kw)
    # batch 1 is memory-bound throughout: step j takes (W + k (1 + j)) / BW; solve the quadratic in floats
    w, k, bw = 16_060_522_496, 131_072, 3.35e12
    a, b = k / bw / 2, (w + k) / bw - k / bw / 2
    assert abs(n - (-b + math.sqrt(b * b + 4 * a * 86_400)) / (2 * a)) < 1
    assert n == 1_982_585  # 2 million steps: by then the KV read dominates the 4.8 ms of weights


@given(batch=st.integers(1, 20), context=st.integers(0, 100), steps=st.integers(0, 100), block=st.integers(1, 32),
       pool=st.integers(0, 400))
def test_blocks_and_pool_overflow_against_counting(batch: int, context: int, steps: int, block: int,
                                                   pool: int) -> None:
    """stretch_blocks sums ceil((c + n) / b) over the rows; the overflow step is the first n past the pool."""
    assert f.stretch_blocks(batch=batch, context=context, steps=steps, block_size=block) == \
        sum(-(-(context + steps) // block) for _ in range(batch))
    n = f.stretch_pool_overflow_step(batch=batch, context=context, block_size=block, pool_blocks=pool)
    blocks = [f.stretch_blocks(batch=batch, context=context, steps=k, block_size=block) for k in range(n + 1)]
    assert blocks[n] > pool and all(x <= pool for x in blocks[:n])


@given(contexts=st.lists(st.integers(0, 80), min_size=1, max_size=12), block=st.integers(1, 16),
       free=st.integers(0, 60), steps=st.integers(0, 70))
def test_unequal_contexts_grow_and_overflow_as_counted(contexts: list[int], block: int, free: int,
                                                      steps: int) -> None:
    """blocks_growth and first_pool_overflow of a batch of unequal contexts equal counting each sequence."""
    residues = [0] * block
    for c in contexts:
        residues[c % block] += 1

    def growth(n: int) -> int:
        return sum(-(-(c + n) // block) - (-(-c // block)) for c in contexts)

    assert blocks_growth(residues, block, steps) == growth(steps)
    n = first_pool_overflow(residues, block, free)
    assert n is not None and n >= 1
    assert growth(n) > free and all(growth(k) <= free for k in range(n))
    assert first_pool_overflow(residues, block, math.inf) is None


# --------------------------------------------------------------------------- the tick clock and costs


def test_tick_clock_is_the_least_common_denominator():
    """D is the lcm of the values' denominators; times not on the clock are refused by name."""
    clock = TickClock.for_values([Fraction(1, 6), Fraction(3, 4), 5])
    assert clock.denominator == 12
    assert clock.ticks(Fraction(3, 4)) == 9 and clock.ticks(2) == 24
    assert clock.time(9, True) == Fraction(3, 4) and clock.time(24, False) == 2
    with pytest.raises(InvalidValueError, match="seconds"):
        clock.ticks(Fraction(1, 5))


def test_the_llama_clock_is_computed_not_assumed():
    """Llama 3.1 8B on H100 SXM: D = lcm of the denominators of W / BW, k / BW, F / peak, a / peak."""
    costs = TickCosts.build(LLAMA)
    assert costs is not None
    expected = math.lcm(*(x.denominator for x in (Fraction(16_060_522_496, 3_350_000_000_000),
                                                  Fraction(131_072, 3_350_000_000_000),
                                                  Fraction(15_009_316_864, 989_400_000_000_000),
                                                  Fraction(524_288, 989_400_000_000_000))))
    assert costs.clock.denominator == expected == 16_184_033_203_125
    with_arrivals = TickCosts.build(LLAMA, [Fraction(1, 10**7)])
    assert with_arrivals is not None and with_arrivals.clock.denominator == math.lcm(expected, 10**7)


def test_which_cost_models_have_stretch_sums():
    """Exact unit and roofline models have stretch sums; float-mode models and other classes do not."""
    assert TickCosts.build(UnitCostModel()) is not None
    assert TickCosts.build(LLAMA) is not None
    assert TickCosts.build(UnitCostModel(decode=0.5)) is None
    assert TickCosts.build(RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"),
                                                       exact=False)) is None

    class Priced(UnitCostModel):
        def decode_time(self, batch: int, context_sum: int) -> Any:
            return batch

    assert TickCosts.build(Priced()) is None


@given(cost=cost_models(overhead=True), batch=st.integers(1, 40), context=st.integers(0, 5000),
       steps=st.integers(0, 60), data=st.data())
def test_tick_costs_equal_the_cost_model(cost: Any, batch: int, context: int, steps: int,
                                         data: st.DataObject) -> None:
    """Ticks / D equal the cost model's decode and prefill durations; a stretch and advance match stepping."""
    costs = TickCosts.build(cost)
    assert costs is not None
    d = costs.clock.denominator
    s = batch * context
    assert Fraction(costs.decode(batch, s), d) == cost.decode_time(batch, s)
    assert Fraction(costs.prefill(context, context * 3), d) == cost.prefill_time(context, context * 3)
    ticks = [0]
    for j in range(steps + 1):
        ticks.append(ticks[-1] + costs.decode(batch, s + batch * j))
    assert costs.stretch(batch, s, steps) == ticks[steps]
    horizon = data.draw(st.integers(0, ticks[-1] + 1))
    n, took = advance(costs, batch, s, max_steps=steps, horizon=horizon)
    expected = min(steps, next(k for k, t in enumerate(ticks) if t >= horizon) if horizon <= ticks[-1] else steps + 1)
    assert (n, took) == (expected, ticks[expected])


# --------------------------------------------------------------------------- event engine == step engine


def assert_same_results(events: Any, steps: Any) -> None:
    """Identical results (roofline.testing.compare), and the event engine's steps kept as a compact stretch table."""
    assert steps.steps is None or isinstance(events.steps, StretchTable)
    _assert_same_results(events, steps)


max_model_lens = st.one_of(st.none(), st.integers(1, 300))
max_waits = st.one_of(st.none(), st.just(0), st.integers(1, 5), st.fractions(0, 5, max_denominator=9))


@AT_LEAST_500
@given(requests=workloads(max_size=12, max_output_tokens=40), cost=cost_models(overhead=True),
       pool=kv_pools(unlimited=None, max_blocks=300), record=st.booleans(), max_len=max_model_lens)
def test_serial_events_equal_the_step_engine(requests: Any, cost: Any, pool: KVPool, record: bool,
                                             max_len: int | None) -> None:
    """serve_serial_events == serve_serial, field by field (ITL included), on generated workloads, costs and pools."""
    kw = dict(kv_pool=pool, record_steps=record, max_model_len=max_len)
    assert_same_results(serve_serial_events(requests, cost, **kw), serve_serial(requests, cost, **kw, engine="step"))


@AT_LEAST_500
@given(requests=workloads(max_size=14, max_output_tokens=40), cost=cost_models(overhead=True),
       batch=batch_sizes(max_value=6), wait=max_waits, pool=kv_pools(unlimited=None, max_blocks=300),
       record=st.booleans(), max_len=max_model_lens, budget=st.one_of(st.none(), st.integers(1, 1200)))
def test_static_events_equal_the_step_engine(requests: Any, cost: Any, batch: int, wait: Any, pool: KVPool,
                                             record: bool, max_len: int | None, budget: int | None) -> None:
    """serve_static_events == serve_static, field by field, with max_wait, KV pools, token budgets and ties."""
    kw = dict(batch_size=batch, max_wait=wait, kv_pool=pool, record_steps=record, max_model_len=max_len,
              max_num_batched_tokens=budget)
    assert_same_results(serve_static_events(requests, cost, **kw), serve_static(requests, cost, **kw, engine="step"))


@AT_LEAST_500
@given(requests=workloads(max_size=12, max_prompt_tokens=40, max_output_tokens=40),
       windows=layer_windows(max_window=30), data=st.data(), batch=batch_sizes(max_value=6), wait=max_waits,
       record=st.booleans(), budget=st.one_of(st.none(), st.integers(1, 400)))
def test_sliding_window_serial_and_static_events_equal_the_step_engine(requests: Any, windows: tuple,
                                                                       data: st.DataObject, batch: int, wait: Any,
                                                                       record: bool, budget: int | None) -> None:
    """Sliding windows: serial and static batching on the event engine (stretches cut at the windows they cross)
    equal the step engine field by field, step tables (token-layers, layer-blocks) and ITL included."""
    cost = data.draw(cost_models(overhead=True, layer_windows=windows))
    pool = data.draw(kv_pools(unlimited=None, max_blocks=600, layer_windows=windows))
    kw = dict(kv_pool=pool, record_steps=record)
    assert_same_results(serve_serial_events(requests, cost, **kw), serve_serial(requests, cost, **kw, engine="step"))
    kw.update(batch_size=batch, max_wait=wait, max_num_batched_tokens=budget)
    assert_same_results(serve_static_events(requests, cost, **kw), serve_static(requests, cost, **kw, engine="step"))


def test_a_window_cuts_a_stretch_into_pieces_by_hand():
    """Two layers, one with window 3: at batch 2 from prompt 1, contexts 2..6 hold 2 x (c + min(c, 3)) token-layers:
    8, 12, 14, 16, 18; with 1 tick per token-layer and nothing else the stretch of 5 steps is 68 ticks."""
    costs = TickCosts(TickClock(1), km=1, windows=LayerWindows((None, 3)))
    assert [costs.batch_stretch(2, 1, n) for n in range(6)] == [0, 8, 20, 34, 50, 68]
    assert costs.batch_stretch(2, 1, 5) == sum(costs.decode(2, 2 * costs.held(c)) for c in range(2, 7))


@given(requests=workloads(max_size=6, max_output_tokens=30, arrivals="poisson"), data=st.data())
def test_integer_and_mixed_number_types_are_kept(requests: Any, data: st.DataObject) -> None:
    """Int arrivals with int unit durations stay ints; mixed int/Fraction runs keep the step engine's types."""
    ints = [attrs.evolve(r, arrival_s=int(r.arrival_s * 3)) for r in requests]
    # the same values, alternately int and Fraction: ties between 3 and Fraction(3) must pick the same element
    mixed = [attrs.evolve(r, arrival_s=Fraction(r.arrival_s) if i % 2 else r.arrival_s) for i, r in enumerate(ints)]
    cost = data.draw(st.sampled_from([UnitCostModel(), UnitCostModel(decode=1, prefill=Fraction(1, 3)),
                                      UnitCostModel(decode=Fraction(2, 3), prefill=2), LLAMA]))
    for workload in (ints, mixed):
        assert_same_results(serve_serial_events(workload, cost, record_steps=True),
                            serve_serial(workload, cost, engine="step", record_steps=True))
        assert_same_results(serve_static_events(workload, cost, batch_size=3, max_wait=1, record_steps=True),
                            serve_static(workload, cost, batch_size=3, max_wait=1, engine="step", record_steps=True))


def test_step_table_reads_like_the_step_engines():
    """Indexing (negative too), slices with a step, out-of-range errors and the CSV equal the step engine's table."""
    reqs = [Request(id=i, arrival_s=Fraction(i, 3), prompt_tokens=5 + i, output_tokens=1 + 3 * i) for i in range(9)]
    a = serve_static_events(reqs, LLAMA, batch_size=4, record_steps=True).steps
    b = serve_static(reqs, LLAMA, batch_size=4, engine="step", record_steps=True).steps
    assert a is not None and b is not None and len(a) == len(b) == 10 + 22 + 25
    for k in (0, 1, 9, 10, 11, 31, 32, 33, -1, -len(b)):  # batches of outputs up to 10, 22 and 25
        assert a[k] == b[k]
    assert a[3:30:4] == b[3:30:4] and a[5:20] == b[5:20] and a[7:3] == []
    with pytest.raises(IndexError):
        a[len(a)]
    out_a, out_b = io.StringIO(), io.StringIO()
    a.write_csv(out_a)
    b.write_csv(out_b)
    assert out_a.getvalue() == out_b.getvalue()
    with pytest.raises(TypeError):
        a.add_decode(0, 1, 1, 1, 1, 1)


def test_a_billion_output_tokens_are_served_exactly():
    """One request of 10^9 output tokens finishes at once, exactly: prefill + the closed-form stretch."""
    req = [Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=10**9)]
    result = serve_serial_events(req, LLAMA, record_steps=True)
    r = result.requests[0]
    prefill = LLAMA.prefill_time(100, 100 * 101 // 2)
    decode = f.stretch_time(steps=10**9 - 1, batch=1, context_sum=101, overhead=0, **llama_terms())
    assert r.handed_back_s == prefill + decode and isinstance(r.handed_back_s, Fraction)
    assert result.summary.steps == 10**9 and result.summary.tpot.p50 == decode / (10**9 - 1)
    assert result.steps is not None and len(result.steps) == 10**9
    # contexts 101 .. 10^9 + 99, n = 10^9 - 1 gaps; linear rank h = (n - 1) q / 100 (0-based): p50 at
    # h = 499,999,999 exactly (context 500,000,100); p99 at h = 989,999,998.02, 2/100 of the way from the gap at
    # context 990,000,099 to the one at 990,000,100
    itl = result.summary.itl
    assert itl is not None and itl.max == LLAMA.decode_time(1, 10**9 + 99) and itl.mean == decode / (10**9 - 1)
    below, above = LLAMA.decode_time(1, 990_000_099), LLAMA.decode_time(1, 990_000_100)
    assert itl.p50 == LLAMA.decode_time(1, 500_000_100) and itl.p99 == below + Fraction(1, 50) * (above - below)
    last = result.steps[-1]
    assert last.end_s == r.handed_back_s and last.context_sum == 100 + 10**9 - 1
    static = serve_static_events(req * 1, UnitCostModel(), batch_size=4, record_steps=True)
    assert static.requests[0].handed_back_s == 10**9


def test_float_mode_falls_back_to_the_step_engine():
    """A float-mode cost model has no stretch sums: the step engine serves it (same result, its StepTable)."""
    cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), exact=False)
    reqs = [Request(id=i, arrival_s=i, prompt_tokens=10, output_tokens=20) for i in range(3)]
    a, b = serve_serial_events(reqs, cost, record_steps=True), serve_serial(reqs, cost, record_steps=True)
    assert [r.handed_back_s for r in a.requests] == [r.handed_back_s for r in b.requests]
    assert a.steps is not None and not isinstance(a.steps, StretchTable)
    assert serve_static_events(reqs, cost, batch_size=2, record_steps=True).summary == \
        serve_static(reqs, cost, batch_size=2, record_steps=True).summary


@pytest.mark.parametrize("bad, field", [
    (dict(kv_pool=3), "kv_pool"), (dict(record_steps=1), "record_steps"), (dict(max_steps=-1), "max_steps"),
    (dict(batch_size=0), "batch_size"), (dict(max_wait=-1), "max_wait"),
])
def test_bad_options_are_refused_like_the_step_engine(bad: dict[str, Any], field: str) -> None:
    """A bad option raises InvalidValueError naming it, as serve_static does."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=1, output_tokens=2)]
    with pytest.raises(InvalidValueError) as mine:
        serve_static_events(reqs, UnitCostModel(), **bad)
    with pytest.raises(InvalidValueError) as theirs:
        serve_static(reqs, UnitCostModel(), **bad)
    assert mine.value.field == theirs.value.field == field and str(mine.value) == str(theirs.value)


def test_bad_workloads_and_max_steps_are_refused_like_the_step_engine():
    """Out-of-order arrivals, repeated ids and a passed max_steps raise the step engine's errors."""
    a = Request(id=0, arrival_s=1, prompt_tokens=1, output_tokens=3)
    b = Request(id=1, arrival_s=0, prompt_tokens=1, output_tokens=3)
    for reqs in ([a, b], [a, attrs.evolve(b, id=0, arrival_s=2)], [a, "x"]):
        with pytest.raises(InvalidValueError) as mine:
            serve_serial_events(reqs, UnitCostModel(), record_steps=True)
        with pytest.raises(InvalidValueError) as theirs:
            serve_serial(reqs, UnitCostModel(), record_steps=True)
        assert str(mine.value) == str(theirs.value)
    ok = [attrs.evolve(b, arrival_s=0), attrs.evolve(a, arrival_s=0)]
    for serve in ((serve_serial_events, serve_serial), (serve_static_events, serve_static)):
        with pytest.raises(SimulationError) as mine_err:
            serve[0](ok, UnitCostModel(), max_steps=2)
        with pytest.raises(SimulationError) as theirs_err:
            serve[1](ok, UnitCostModel(), max_steps=2)
        assert str(mine_err.value) == str(theirs_err.value)
