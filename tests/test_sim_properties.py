"""Properties of the reference scheduler on generated workloads (Hypothesis).

Two kinds: invariants every run must satisfy (each request handed back or rejected
once, with exactly its tokens; KV within capacity; termination; determinism), and
exact agreement with naive oracles written here, which keep every sequence's state
explicitly and loop over the batch at every step (no running sums, no tick
arithmetic), so a fault in the fast bookkeeping shows up as a difference.
"""

from __future__ import annotations

import io
from collections import deque
from fractions import Fraction
from itertools import pairwise
from typing import Any

import _naive  # tests/_naive.py (tests/conftest.py puts tests/ on the path)
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from roofline import get_accelerator, get_model
from roofline.errors import InvalidValueError
from roofline.sim import (
    KVPool,
    Request,
    RooflineCostModel,
    SimResult,
    SimulationError,
    UnitCostModel,
    load_trace,
    serve_continuous,
    serve_serial,
    serve_static,
    shipped_trace,
)
from roofline.testing import strategies

# --------------------------------------------------------------------------- strategies

def workloads(*, max_requests: int = 10) -> st.SearchStrategy[tuple[Request, ...]]:
    """Requests in arrival order; gaps often 0 or a whole step so that arrivals fall on step boundaries."""
    return strategies.workloads(min_size=0, max_size=max_requests, arrivals="boundaries", lengths="uniform",
                                max_prompt_tokens=40, max_output_tokens=25)


cost_models = st.one_of(
    st.builds(UnitCostModel, decode=st.sampled_from([1, Fraction(1, 3)]), prefill=st.sampled_from([1, Fraction(5, 2)])),
    st.builds(
        RooflineCostModel,
        weight_bytes=st.integers(1, 100), kv_bytes_per_token=st.integers(0, 5), flops_per_token=st.integers(1, 100),
        attention_flops_per_token=st.integers(0, 3), bandwidth=st.integers(1, 100), peak_flops=st.integers(1, 1000),
        overhead=st.sampled_from([0, Fraction(1, 10)]),
    ),
)

pools = strategies.kv_pools(min_blocks=0, max_blocks=60, max_block_size=8, unlimited=None)


def tight_pools(reqs: tuple[Request, ...]) -> st.SearchStrategy[KVPool]:
    """Often a pool where every request fits alone but not many together (so on-demand admission preempts)."""
    return strategies.kv_pools(min_blocks=0, max_blocks=60, max_block_size=8, unlimited=None, tight_for=reqs)


# --------------------------------------------------------------------------- oracles


def naive_continuous(reqs: list[Request], cost: Any, *, max_num_seqs: int, on_demand: bool, pool: KVPool | None,
                     max_prefill: int | None, windows: tuple = ()) -> tuple[list[tuple], list[tuple]]:
    """Continuous batching with every sequence's KV, tokens and blocks held explicitly (``windows``: a model's
    sliding windows, KV counted in token-layers and layer-blocks by brute force, tests/_naive.py)."""
    cap = None if pool is None else pool.capacity_blocks
    b = 1 if pool is None else pool.block_size

    def _blocks(tokens: int, b: int) -> int:
        return _naive.blocks(tokens, b, windows)

    def kv_of(tokens: int) -> int:
        return _naive.held(tokens, windows)

    n = len(reqs)
    arr = [cost.to_time(r.arrival_s) for r in reqs]
    gen, kv, held = [0] * n, [0] * n, [0] * n
    res: list[dict[str, Any]] = [dict(adm=None, first=None, fin=None, pre=0, pf=0, why=None) for _ in reqs]
    life = [_naive.lifetime(r.prompt_tokens, r.output_tokens, b, windows) for r in reqs]
    for i, r in enumerate(reqs):
        if cap is not None and life[i] > cap:
            res[i]["why"] = "never fits"
        elif max_prefill is not None and r.prompt_tokens > max_prefill:
            res[i]["why"] = "prompt too long"
    steps: list[tuple] = []
    running: list[int] = []
    waiting: deque[int] = deque()
    used = 0
    now = arr[0] if n else None
    nxt = 0
    while True:
        while nxt < n and arr[nxt] <= now:
            if res[nxt]["why"] is None:
                waiting.append(nxt)
            nxt += 1
        admitted, tokens = [], 0
        while waiting and len(running) + len(admitted) < max_num_seqs:
            i = waiting[0]
            length = reqs[i].prompt_tokens + gen[i]
            if max_prefill is not None and length > max_prefill:
                waiting.popleft()
                res[i]["why"] = "resume too long"
                continue
            need = _blocks(length, b) if on_demand else life[i]
            if (max_prefill is not None and tokens + length > max_prefill) or (cap is not None and used + need > cap):
                break
            waiting.popleft()
            used += need
            held[i] = need
            tokens += length
            admitted.append(i)
        if admitted:
            lengths = [reqs[i].prompt_tokens + gen[i] for i in admitted]
            pairs = sum(_naive.chunk_pairs(x, 0, windows) for x in lengths)
            end = now + cost.prefill_time(sum(lengths), pairs)
            steps.append(("prefill", now, end, len(admitted), len(admitted), 0, sum(lengths), pairs,
                          sum(kv_of(kv[i]) for i in running) + sum(kv_of(x) for x in lengths), used))
            for i, length in zip(admitted, lengths, strict=True):
                if res[i]["adm"] is None:
                    res[i]["adm"], res[i]["first"] = now, end
                res[i]["pf"] += length
                kv[i] = length
                gen[i] += 1
                if gen[i] == reqs[i].output_tokens:
                    res[i]["fin"] = end
                    used -= held[i]
                else:
                    running.append(i)
            now = end
        elif running:
            if on_demand:
                while cap is not None and used + sum(_blocks(kv[i] + 1, b) - held[i] for i in running) > cap:
                    victim = running.pop()
                    used -= held[victim]
                    held[victim] = kv[victim] = 0
                    res[victim]["pre"] += 1
                    waiting.appendleft(victim)
            for i in running:
                kv[i] += 1
                gen[i] += 1
                if on_demand:
                    used += _blocks(kv[i], b) - held[i]
                    held[i] = _blocks(kv[i], b)
            context = sum(kv_of(kv[i]) for i in running)
            end = now + cost.decode_time(len(running), context)
            steps.append(("decode", now, end, len(running), len(running), context, 0, 0, context, used))
            for i in [i for i in running if gen[i] == reqs[i].output_tokens]:
                running.remove(i)
                res[i]["fin"] = end
                used -= held[i]
            now = end
        elif nxt < n:
            now = arr[nxt]
        else:
            break
    out = [(x["adm"], x["first"], x["fin"], x["fin"], x["pre"], x["pf"], gen[i], x["why"] is not None)
           for i, x in enumerate(res)]
    return steps, out


def naive_static(reqs: list[Request], cost: Any, *, batch_size: int, max_wait: Any, pool: KVPool | None,
                 budget: int | None = None, windows: tuple = ()) -> tuple[list[tuple], list[tuple]]:
    """Static batching by scanning time forward event by event, with every row's state explicit (``windows``: as
    :func:`naive_continuous`)."""
    cap = None if pool is None else pool.capacity_blocks
    b = 1 if pool is None else pool.block_size

    def _blocks(tokens: int, b: int) -> int:
        return _naive.blocks(tokens, b, windows)

    def kv_of(tokens: int) -> int:
        return _naive.held(tokens, windows)

    arr = [cost.to_time(r.arrival_s) for r in reqs]
    prompt = [r.prompt_tokens for r in reqs]
    output = [r.output_tokens for r in reqs]

    def fits(rows: list[int]) -> bool:
        p_max, o_max = max(prompt[i] for i in rows), max(output[i] for i in rows)
        if budget is not None and len(rows) * p_max > budget:
            return False
        return cap is None or len(rows) * _naive.lifetime(p_max, o_max, b, windows) <= cap

    unserved = [i for i in range(len(reqs)) if fits([i])]
    res: dict[int, tuple] = {}
    steps: list[tuple] = []
    free = None
    while unserved:
        head = unserved[0]
        t = arr[head] if free is None else max(free, arr[head])
        while True:
            arrived = [i for i in unserved if arr[i] <= t]
            batch: list[int] = []
            blocked = False
            for i in arrived:
                if len(batch) == batch_size:
                    break
                if not fits(batch + [i]):
                    blocked = True
                    break
                batch.append(i)
            deadline = None if max_wait is None else arr[head] + max_wait
            if (len(batch) == batch_size or blocked or arr[-1] <= t
                    or (deadline is not None and deadline <= t)):
                break
            later = [a for a in arr if a > t] + ([deadline] if deadline is not None and deadline > t else [])
            t = min(later)
        p_max, m = max(prompt[i] for i in batch), len(batch)
        gen = {i: 1 for i in batch}
        pairs = m * _naive.chunk_pairs(p_max, 0, windows)
        end = first = t + cost.prefill_time(m * p_max, pairs)
        steps.append(("prefill", t, end, m, m, 0, m * p_max, pairs, m * kv_of(p_max), m * _blocks(p_max, b)))
        fin = {i: end for i in batch if output[i] == 1}
        j = 0
        while any(gen[i] < output[i] for i in batch):
            j += 1
            useful = [i for i in batch if gen[i] < output[i]]
            context = m * kv_of(p_max + j)
            start, end = end, end + cost.decode_time(m, context)
            steps.append(("decode", start, end, m, len(useful), context, 0, 0, context, m * _blocks(p_max + j, b)))
            for i in useful:
                gen[i] += 1
                if gen[i] == output[i]:
                    fin[i] = end
        for i in batch:
            res[i] = (t, first, fin[i], end, 0, prompt[i], output[i], False)
            unserved.remove(i)
        free = end
    out = [res.get(i, (None, None, None, None, 0, 0, 0, True)) for i in range(len(reqs))]
    return steps, out


def fast_view(r: SimResult) -> tuple[list[tuple], list[tuple]]:
    """The fast scheduler's result in the oracles' shape."""
    steps = [(s.kind, s.start_s, s.end_s, s.batch, s.useful_rows, s.context_sum, s.prefill_tokens,
              s.attention_pairs, s.kv_tokens, s.kv_blocks) for s in r.steps]
    out = [(x.admitted_s, x.first_token_s, x.finish_s, x.handed_back_s, x.preemptions, x.prefill_tokens,
            x.generated_tokens, x.rejected) for x in r.requests]
    return steps, out


# --------------------------------------------------------------------------- oracle agreement


@given(workloads(), cost_models, st.data(), st.integers(1, 5), st.booleans(), st.none() | st.integers(1, 80))
def test_continuous_matches_the_naive_oracle_step_by_step(
    reqs: list[Request], cost: Any, data: st.DataObject, max_num_seqs: int, on_demand: bool, max_prefill: int | None
) -> None:
    """Continuous batching equals the naive explicit-state scheduler exactly: every step and every request."""
    pool = data.draw(tight_pools(reqs))
    fast = serve_continuous(reqs, cost, max_num_seqs=max_num_seqs, admission="on_demand" if on_demand else "reserve",
                            kv_pool=pool, max_prefill_tokens=max_prefill, record_steps=True)
    steps, out = naive_continuous(reqs, cost, max_num_seqs=max_num_seqs, on_demand=on_demand, pool=pool,
                                  max_prefill=max_prefill)
    got_steps, got_out = fast_view(fast)
    note(f"steps: {len(steps)}; preemptions: {fast.summary.preemptions}")
    assert got_steps == steps
    assert got_out == out


@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(2, 25), st.sampled_from([0, 0, 1, Fraction(5, 2)])),
             min_size=2, max_size=8),
    st.integers(1, 8), st.integers(0, 6), cost_models, st.integers(2, 6), st.none() | st.integers(40, 90),
)
def test_on_demand_preemption_matches_the_naive_oracle(
    rows: list[tuple[int, int, Any]], block_size: int, slack: int, cost: Any, max_num_seqs: int,
    max_prefill: int | None,
) -> None:
    """Under on-demand admission in a pool that fits each request alone but few together, preemption by
    recompute, resumes and their rejections match the naive scheduler exactly."""
    reqs, t = [], Fraction(0)
    for i, (p, o, gap) in enumerate(rows):
        t += gap
        reqs.append(Request(id=i, arrival_s=t, prompt_tokens=p, output_tokens=o))
    pool = KVPool(max(-(-(p + o - 1) // block_size) for p, o, _ in rows) + slack, block_size)
    fast = serve_continuous(reqs, cost, max_num_seqs=max_num_seqs, admission="on_demand", kv_pool=pool,
                            max_prefill_tokens=max_prefill, record_steps=True)
    note(f"preemptions: {fast.summary.preemptions}")
    assert fast_view(fast) == naive_continuous(reqs, cost, max_num_seqs=max_num_seqs, on_demand=True, pool=pool,
                                               max_prefill=max_prefill)


@given(workloads(), cost_models, pools, st.integers(1, 4), st.none() | st.sampled_from([0, Fraction(1, 2), 2, 7]),
       st.none() | st.integers(1, 120))
def test_static_matches_the_naive_oracle_step_by_step(
    reqs: list[Request], cost: Any, pool: KVPool | None, batch_size: int, max_wait: Any, budget: int | None
) -> None:
    """Static batching (with or without a token budget) equals the naive event-by-event scheduler exactly."""
    fast = serve_static(reqs, cost, batch_size=batch_size, max_wait=max_wait, kv_pool=pool,
                        max_num_batched_tokens=budget, record_steps=True)
    assert fast_view(fast) == naive_static(reqs, cost, batch_size=batch_size, max_wait=max_wait, pool=pool,
                                           budget=budget)


@given(workloads(), strategies.layer_windows(), st.data(), st.integers(1, 5), st.booleans(),
       st.none() | st.integers(1, 80))
def test_continuous_with_sliding_windows_matches_the_naive_oracle(
    reqs: list[Request], windows: tuple, data: st.DataObject, max_num_seqs: int, on_demand: bool,
    max_prefill: int | None,
) -> None:
    """Sliding-window layers: every step's token-layers, attention pairs and layer-blocks (freed as windows move,
    so on-demand growth may be negative), preemptions and requests equal the brute-force naive scheduler's."""
    pool = data.draw(strategies.kv_pools(min_blocks=0, max_blocks=200, max_block_size=8, unlimited=None,
                                         tight_for=reqs, layer_windows=windows))
    cost = data.draw(strategies.cost_models(layer_windows=windows))
    fast = serve_continuous(reqs, cost, max_num_seqs=max_num_seqs, admission="on_demand" if on_demand else "reserve",
                            kv_pool=pool, max_prefill_tokens=max_prefill, record_steps=True)
    steps, out = naive_continuous(reqs, cost, max_num_seqs=max_num_seqs, on_demand=on_demand, pool=pool,
                                  max_prefill=max_prefill, windows=windows)
    note(f"steps: {len(steps)}; preemptions: {fast.summary.preemptions}")
    assert fast_view(fast) == (steps, out)
    assert fast.options["kv_units"] == "token-layers"


@given(workloads(), strategies.layer_windows(), st.data(), st.integers(1, 4),
       st.none() | st.sampled_from([0, Fraction(1, 2), 2, 7]), st.none() | st.integers(1, 120))
def test_static_with_sliding_windows_matches_the_naive_oracle(
    reqs: list[Request], windows: tuple, data: st.DataObject, batch_size: int, max_wait: Any, budget: int | None
) -> None:
    """Sliding-window layers: static batching (padded rows, lifetime reservation) equals the naive scheduler."""
    pool = data.draw(strategies.kv_pools(min_blocks=0, max_blocks=200, max_block_size=8, unlimited=None,
                                         layer_windows=windows))
    cost = data.draw(strategies.cost_models(layer_windows=windows))
    fast = serve_static(reqs, cost, batch_size=batch_size, max_wait=max_wait, kv_pool=pool,
                        max_num_batched_tokens=budget, record_steps=True)
    assert fast_view(fast) == naive_static(reqs, cost, batch_size=batch_size, max_wait=max_wait, pool=pool,
                                           budget=budget, windows=windows)


@given(strategies.layer_windows(max_window=40), st.integers(1, 20), st.integers(1, 60), st.integers(1, 60))
def test_windowed_lifetime_blocks_equal_the_brute_force(windows: tuple, block_size: int, prompt: int,
                                                        output: int) -> None:
    """The lifetime reservation of a windowed pool (two contexts evaluated) is the most layer-blocks the brute force
    finds over every context the request holds after its prefill, P .. P + O - 1."""
    pool = KVPool(None, block_size, layer_windows=windows)
    assert pool.lifetime_blocks(prompt, output) == _naive.lifetime(prompt, output, block_size, windows)


@given(workloads(), cost_models, pools)
def test_continuous_with_one_sequence_is_serial_serving(reqs: list[Request], cost: Any, pool: KVPool | None) -> None:
    """Continuous batching with max_num_seqs = 1 serves exactly as one-by-one serving (same steps, same times)."""
    serial = serve_serial(reqs, cost, kv_pool=pool, record_steps=True)
    cont = serve_continuous(reqs, cost, max_num_seqs=1, kv_pool=pool, record_steps=True)
    assert [x.handed_back_s for x in cont.requests] == [x.handed_back_s for x in serial.requests]
    assert [x.first_token_s for x in cont.requests] == [x.first_token_s for x in serial.requests]
    assert [(s.kind, s.start_s, s.duration_s, s.context_sum, s.prefill_tokens) for s in cont.steps] == [
        (s.kind, s.start_s, s.duration_s, s.context_sum, s.prefill_tokens) for s in serial.steps]


# --------------------------------------------------------------------------- invariants


def all_policies(reqs: list[Request], cost: Any, pool: KVPool | None, **kw: Any) -> list[SimResult]:
    """The workload under every policy and admission mode (steps recorded unless ``record_steps=False``)."""
    kw.setdefault("record_steps", True)
    return [
        serve_serial(reqs, cost, kv_pool=pool, **kw),
        serve_static(reqs, cost, batch_size=3, max_wait=2, kv_pool=pool, **kw),
        serve_continuous(reqs, cost, max_num_seqs=4, kv_pool=pool, **kw),
        serve_continuous(reqs, cost, max_num_seqs=4, admission="on_demand", kv_pool=pool, max_prefill_tokens=60,
                         **kw),
        serve_continuous(reqs, cost, max_num_seqs=4, kv_pool=pool, prefill="chunked", max_num_batched_tokens=16, **kw),
        serve_continuous(reqs, cost, max_num_seqs=3, admission="on_demand", kv_pool=pool, prefill="chunked",
                         max_num_batched_tokens=7, **kw),
    ]


@given(workloads(), cost_models, pools)
def test_every_request_is_handed_back_or_rejected_once_with_its_tokens(
    reqs: list[Request], cost: Any, pool: KVPool | None
) -> None:
    """Each request is handed back (with exactly O tokens, in time order) or rejected with a reason; tokens add up."""
    for r in all_policies(reqs, cost, pool):
        assert [x.request for x in r.requests] == list(reqs)
        for x in r.requests:
            if x.rejected:
                assert x.handed_back_s is None and x.e2e_s is None and x.rejected_reason
                assert x.generated_tokens < x.request.output_tokens
            else:
                assert x.generated_tokens == x.request.output_tokens
                assert x.request.arrival_s <= x.admitted_s < x.first_token_s <= x.finish_s <= x.handed_back_s
        assert sum(s.useful_rows for s in r.steps) == sum(x.generated_tokens for x in r.requests)
        s = r.summary
        assert s.completed + s.rejected == len(reqs)
        assert s.output_tokens == sum(x.request.output_tokens for x in r.requests if not x.rejected)
        assert s.steps == len(r.steps) == s.prefill_steps + s.decode_steps + s.mixed_steps
        if r.options.get("prefill") != "chunked":
            assert s.steps <= sum(x.request.output_tokens for x in r.requests)
        elif s.preemptions == 0:  # a step makes a token, or prefills chunks of N tokens (the last may be less)
            budget = r.options["max_num_batched_tokens"]
            assert s.steps <= sum(x.request.output_tokens + -(-x.request.prompt_tokens // budget)
                                  for x in r.requests)


@given(workloads(), cost_models, pools)
def test_kv_in_use_never_exceeds_capacity_and_steps_do_not_overlap(
    reqs: list[Request], cost: Any, pool: KVPool | None
) -> None:
    """At the end of every step KV blocks in use <= capacity and tokens <= blocks x block size; steps follow in time."""
    cap = None if pool is None else pool.capacity_blocks
    b = 1 if pool is None else pool.block_size
    for r in all_policies(reqs, cost, pool):
        steps = list(r.steps)
        for s in steps:
            assert cap is None or s.kv_blocks <= cap
            assert s.kv_tokens <= s.kv_blocks * b
            assert s.duration_s > 0 and 0 < s.useful_rows + s.partial_rows and s.useful_rows <= s.batch
            assert s.padded_rows >= 0
        for a, c in pairwise(steps):
            assert c.start_s >= a.end_s
        assert r.summary.peak_kv_blocks == max((s.kv_blocks for s in steps), default=0)
        assert r.summary.peak_kv_tokens == max((s.kv_tokens for s in steps), default=0)
        assert r.summary.busy_s == sum((s.duration_s for s in steps), start=0)


@given(workloads(), cost_models, pools)
def test_results_are_deterministic_to_the_byte(reqs: list[Request], cost: Any, pool: KVPool | None) -> None:
    """Running the same input twice gives byte-identical JSON and CSV output, and equal records."""
    for a, b in zip(all_policies(reqs, cost, pool), all_policies(reqs, cost, pool), strict=True):
        assert a.to_json(requests=True, steps=True) == b.to_json(requests=True, steps=True)
        out_a, out_b = io.StringIO(), io.StringIO()
        a.write_requests_csv(out_a)
        b.write_requests_csv(out_b)
        a.steps.write_csv(out_a)
        b.steps.write_csv(out_b)
        assert out_a.getvalue() == out_b.getvalue()
        assert a.requests == b.requests and a.summary == b.summary


@given(workloads(max_requests=6), cost_models, pools)
def test_summary_without_step_records_is_the_same(reqs: list[Request], cost: Any, pool: KVPool | None) -> None:
    """record_steps=False changes nothing but the absence of the step table."""
    for a, b in zip(all_policies(reqs, cost, pool), all_policies(reqs, cost, pool, record_steps=False), strict=True):
        assert b.steps is None and a.summary == b.summary and a.requests == b.requests


@given(st.integers(2, 40), st.integers(1, 60), st.data())
def test_random_access_to_steps_matches_iteration(n: int, p: int, data: st.DataObject) -> None:
    """steps[i] and slices equal the records of sequential iteration (exact start times restored)."""
    reqs = [Request(id=i, arrival_s=Fraction(7 * i, 3), prompt_tokens=p + i, output_tokens=1 + (i * 5) % 9)
            for i in range(n)]
    r = serve_continuous(reqs, UnitCostModel(decode=Fraction(1, 3), prefill=2), max_num_seqs=3, record_steps=True)
    steps = list(r.steps)
    i = data.draw(st.integers(-len(steps), len(steps) - 1))
    assert r.steps[i] == steps[i]
    assert r.steps[2:7] == steps[2:7] and r.steps[::5] == steps[::5]
    with pytest.raises(IndexError):
        r.steps[len(steps)]


def test_step_table_random_access_across_checkpoints() -> None:
    """A run of more than 4,096 steps with idle gaps restores exact start times at any index."""
    reqs = [Request(id=i, arrival_s=Fraction(3000 * i, 1) + Fraction(1, 7), prompt_tokens=5, output_tokens=2500)
            for i in range(3)]
    r = serve_serial(reqs, UnitCostModel(decode=Fraction(1, 3)), record_steps=True)
    steps = list(r.steps)
    assert len(steps) == 7500
    for i in (0, 4095, 4096, 4097, 5000, 7499, -1):
        assert r.steps[i] == steps[i]
    assert steps[2500].start_s == Fraction(3000) + Fraction(1, 7)  # after an idle gap


# --------------------------------------------------------------------------- exact and float modes


def test_float_mode_agrees_with_exact_mode_on_the_azure_trace() -> None:
    """On 1,500 real requests, float-mode times agree with exact Fractions to 1e-9 relative, with the same steps."""
    reqs = load_trace(shipped_trace("conv"))[:1500]
    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    pool = KVPool.from_budget(budget=2 * 10**9, kv_bytes_per_token=model.kv_bytes_per_token)  # 953 blocks
    exact = RooflineCostModel.for_model(model, acc)
    fast = RooflineCostModel.for_model(model, acc, exact=False)
    for serve, kw in ((serve_serial, {}), (serve_static, {"batch_size": 8}),
                      (serve_continuous, {"admission": "on_demand", "max_num_seqs": 64})):
        a = serve(reqs, exact, kv_pool=pool, record_steps=False, **kw)
        b = serve(reqs, fast, kv_pool=pool, record_steps=False, **kw)
        assert isinstance(a.summary.makespan_s, Fraction) and isinstance(b.summary.makespan_s, float)
        assert (a.summary.steps, a.summary.preemptions) == (b.summary.steps, b.summary.preemptions)
        for x, y in zip(a.requests, b.requests, strict=True):
            assert y.handed_back_s == pytest.approx(float(x.handed_back_s), rel=1e-9)
            assert y.ttft_s == pytest.approx(float(x.ttft_s), rel=1e-9, abs=1e-12)
    assert a.summary.preemptions > 0  # the small pool makes on-demand admission preempt


# --------------------------------------------------------------------------- guards and bad options


def test_preempted_request_that_cannot_be_re_prefilled_is_rejected() -> None:
    """A preempted request whose recompute prefill exceeds max_prefill_tokens is rejected, and the run ends."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=61),
            Request(id=1, arrival_s=0, prompt_tokens=500, output_tokens=100)]
    # the budget of 550 prefills the two prompts in two steps; decode 60 needs 720 > 719 slots
    r = serve_continuous(reqs, UnitCostModel(), admission="on_demand", kv_pool=KVPool.tokens(719),
                         max_prefill_tokens=550, record_steps=True)
    victim = r.requests[1]
    assert victim.rejected and victim.preemptions == 1 and victim.generated_tokens == 60
    assert "recompute prefill of 560 tokens" in victim.rejected_reason and victim.handed_back_s is None
    assert r.requests[0].handed_back_s == 62 and r.summary.steps == 62 and r.summary.prefill_steps == 2


def test_max_steps_safeguard_raises_a_clear_error() -> None:
    """A run that needs more steps than max_steps raises SimulationError naming the limit."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=3, output_tokens=10)]
    for serve in (serve_serial, serve_static, serve_continuous):
        with pytest.raises(SimulationError, match="max_steps=5"):
            serve(reqs, UnitCostModel(), max_steps=5)
        assert serve(reqs, UnitCostModel(), max_steps=10).summary.steps == 10


@pytest.mark.parametrize(("call", "field"), [
    (lambda r, c: serve_static(r, c, batch_size=0, record_steps=True), "batch_size"),
    (lambda r, c: serve_static(r, c, max_wait=-1, record_steps=True), "max_wait"),
    (lambda r, c: serve_continuous(r, c, max_num_seqs=0, record_steps=True), "max_num_seqs"),
    (lambda r, c: serve_continuous(r, c, admission="lazy", record_steps=True), "admission"),
    (lambda r, c: serve_continuous(r, c, max_prefill_tokens=0, record_steps=True), "max_prefill_tokens"),
    (lambda r, c: serve_serial(r, c, kv_pool=100, record_steps=True), "kv_pool"),
    (lambda r, c: serve_serial(r, object(), record_steps=True), "cost_model"),
    (lambda r, c: serve_serial(r, c, max_steps=-1, record_steps=True), "max_steps"),
    (lambda r, c: serve_serial(r, c, record_steps=1), "record_steps"),
    (lambda r, c: serve_serial(list(reversed(r)), c, record_steps=True), "requests[1].arrival_s"),
])
def test_bad_options_raise_naming_the_field(call: Any, field: str) -> None:
    """Bad policy options raise InvalidValueError naming the option."""
    reqs = [Request(id=i, arrival_s=i, prompt_tokens=2, output_tokens=2) for i in range(2)]
    with pytest.raises(InvalidValueError) as err:
        call(reqs, UnitCostModel())
    assert err.value.field == field


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(bandwidth=0), "bandwidth"), (dict(weight_bytes=-1), "weight_bytes"), (dict(overhead=-1), "overhead"),
    (dict(exact="yes"), "exact"),
])
def test_bad_cost_constants_raise_naming_the_field(kwargs: dict, field: str) -> None:
    """A roofline cost model with a constant out of its domain raises InvalidValueError naming it."""
    base = dict(weight_bytes=10, kv_bytes_per_token=1, flops_per_token=10, attention_flops_per_token=0,
                bandwidth=1, peak_flops=1)
    with pytest.raises(InvalidValueError) as err:
        RooflineCostModel(**{**base, **kwargs})
    assert err.value.field == field
    with pytest.raises(InvalidValueError, match="decode"):
        UnitCostModel(decode=0)


def test_float_arrivals_stay_exact_under_an_exact_cost_model() -> None:
    """Float arrival times are taken at their exact binary value: every latency is a Fraction, none rounded."""
    reqs = [Request(id=0, arrival_s=0.1, prompt_tokens=3, output_tokens=3),
            Request(id=1, arrival_s=0.25, prompt_tokens=3, output_tokens=2)]
    results = all_policies(reqs, UnitCostModel(decode=Fraction(1, 3)), None)
    assert results[0].requests[0].ttft_s == 1  # serial: prefill from the arrival
    for r in results:
        first = r.requests[0]
        assert first.arrival_s == Fraction(0.1) and first.ttft_s == first.first_token_s - Fraction(0.1)
        assert all(isinstance(x.e2e_s, Fraction) and isinstance(x.queue_wait_s, Fraction) for x in r.requests)
        assert isinstance(r.summary.makespan_s, Fraction)


def test_empty_workload_gives_an_empty_result() -> None:
    """No requests: no steps, a zero makespan and no percentiles, under every policy."""
    for r in all_policies([], UnitCostModel(), None):
        assert len(r.steps) == 0 and r.summary.makespan_s == 0 and r.summary.ttft is None
        assert r.summary.output_tokens_per_s is None and r.summary.long_run_useful_share is None


def test_a_summary_prints_readably_and_keeps_its_exact_repr() -> None:
    """``print(summary)`` shows counts with separators, ms and % (the lesson's static batch: 1,000 steps, 40 %
    useful, E2E 1,001 s of unit steps); ``repr`` keeps the exact Fractions."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o) for i, o in enumerate([100, 200, 300, 1000])]
    s = serve_static(reqs, UnitCostModel(decode=Fraction(1, 3)), batch_size=4).summary
    text = str(s)
    assert text.splitlines()[0] == ("static: 4 of 4 requests handed back, 0 rejected, 0 preemptions; 1,000 steps "
                                    "(1 prefill, 999 decode, 0 mixed)")
    # prefill 1 s + 999 decode steps of 1/3 s = 334 s for every row (handed back together)
    assert "makespan 334.000 s" in text and "1,600 output tokens" in text and "long-run useful share 40.0 %" in text
    assert "  e2e        p50 334,000.0 ms, p90 334,000.0 ms, p99 334,000.0 ms" in text
    assert "itl" not in text  # static batching streams nothing
    assert "makespan_s=Fraction(334, 1)" in repr(s) and s.makespan_s == 334
