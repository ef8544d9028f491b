"""Chunked prefill and mixed steps (continuous batching, ``prefill="chunked"``), by Hypothesis and by hand.

The fast scheduler is checked step by step against a naive oracle written here, which
keeps every sequence's phase, KV and blocks explicitly and loops over all of them at
every step; then the claims of docs/conventions.md, "Chunked prefill and mixed steps":
a prompt of P tokens on an idle server takes ceil(P / N) steps to its first token, decode
rows are never held back by prefill (every running sequence gets a token in every step,
and a step holds at most N tokens), and iteration-level scheduling with mixed steps hands
every request back no later than static batching, under the conditions stated there.
"""

from __future__ import annotations

from collections import deque
from fractions import Fraction
from typing import Any

import _naive  # tests/_naive.py (tests/conftest.py puts tests/ on the path)
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.errors import InvalidValueError
from roofline.sim import KVPool, Request, RooflineCostModel, UnitCostModel, serve_continuous, serve_static
from roofline.testing.strategies import cost_models, kv_pools, layer_windows, workloads


def naive_chunked(reqs: tuple[Request, ...], cost: Any, *, max_num_seqs: int, budget: int, on_demand: bool,
                  pool: KVPool | None, windows: tuple = ()) -> tuple[list[tuple], list[tuple]]:
    """Chunked prefill with every sequence's phase, KV and blocks held explicitly (``windows``: a model's sliding
    windows, KV counted in token-layers and layer-blocks by brute force, tests/_naive.py)."""
    cap = None if pool is None else pool.capacity_blocks
    b = 1 if pool is None else pool.block_size

    def _blocks(tokens: int, b: int) -> int:
        return _naive.blocks(tokens, b, windows)

    def kv_of(tokens: int) -> int:
        return _naive.held(tokens, windows)
    n = len(reqs)
    arr = [cost.to_time(r.arrival_s) for r in reqs]
    prompt = [r.prompt_tokens for r in reqs]
    out_len = [r.output_tokens for r in reqs]
    gen, kv, held, done, target = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    phase = ["new"] * n  # new, waiting, prefilling, decoding, done, rejected
    res: list[dict[str, Any]] = [dict(adm=None, first=None, fin=None, pre=0, pf=0) for _ in reqs]
    life = [_naive.lifetime(prompt[i], out_len[i], b, windows) for i in range(n)]
    for i in range(n):
        if cap is not None and life[i] > cap:
            phase[i] = "rejected"
    order: list[int] = []  # admitted sequences, admission order
    waiting: deque[int] = deque()
    steps: list[tuple] = []
    used = 0
    now = arr[0] if n else None
    nxt = 0
    while True:
        while nxt < n and arr[nxt] <= now:
            if phase[nxt] == "new":
                phase[nxt] = "waiting"
                waiting.append(nxt)
            nxt += 1
        if not order and not waiting:
            if nxt < n:
                now = arr[nxt]
                continue
            break
        if on_demand:
            while cap is not None and used + sum(_blocks(kv[i] + 1, b) - held[i] for i in order
                                                 if phase[i] == "decoding") > cap:
                victim = order.pop()
                used -= held[victim]
                held[victim] = kv[victim] = done[victim] = 0
                phase[victim] = "waiting"
                res[victim]["pre"] += 1
                waiting.appendleft(victim)
        decoding = [i for i in order if phase[i] == "decoding"]
        left = budget - len(decoding)
        chunks = []
        for i in order:
            if phase[i] == "prefilling" and left:
                q = min(target[i] - done[i], left)
                chunks.append((i, q, done[i]))
                left -= q
        while waiting and left and len(order) < max_num_seqs:
            i = waiting[0]
            t = prompt[i] + gen[i]
            need = _blocks(t, b) if on_demand else life[i]
            grow = sum(_blocks(kv[j] + 1, b) - held[j] for j in decoding) if on_demand else 0
            if cap is not None and used + grow + need > cap:
                break
            waiting.popleft()
            used += need
            held[i] = need
            target[i], done[i], phase[i] = t, 0, "prefilling"
            order.append(i)
            if res[i]["adm"] is None:
                res[i]["adm"] = now
            q = min(t, left)
            chunks.append((i, q, 0))
            left -= q
        for i in decoding:
            kv[i] += 1
            gen[i] += 1
            if on_demand:
                used += _blocks(kv[i], b) - held[i]
                held[i] = _blocks(kv[i], b)
        context = sum(kv_of(kv[i]) for i in decoding)
        tokens = sum(q for _, q, _ in chunks)
        cached = sum(_naive.chunk_cached(q, p0, windows) for _, q, p0 in chunks)
        pairs = sum(_naive.chunk_pairs(q, p0, windows) for _, q, p0 in chunks)
        end = now + (cost.mixed_time(len(decoding), context, tokens, cached, pairs) if tokens
                     else cost.decode_time(len(decoding), context))
        completed = 0
        for i, q, _ in chunks:
            done[i] += q
            res[i]["pf"] += q
            if done[i] == target[i]:
                completed += 1
                gen[i] += 1
                kv[i] = target[i]
                phase[i] = "decoding"
                if res[i]["first"] is None:
                    res[i]["first"] = end
        kv_tokens = context + sum(kv_of(done[i]) for i in order if phase[i] == "prefilling") + sum(
            kv_of(target[i]) for i, _, _ in chunks if phase[i] == "decoding")
        kind = "decode" if not tokens else ("mixed" if decoding else "prefill")
        steps.append((kind, now, end, len(decoding) + len(chunks), len(decoding) + completed, context, tokens,
                      pairs, kv_tokens, used, len(decoding), cached, len(chunks) - completed))
        for i in list(order):
            if phase[i] == "decoding" and gen[i] == out_len[i]:
                order.remove(i)
                phase[i] = "done"
                res[i]["fin"] = end
                used -= held[i]
        now = end
    out = [(x["adm"], x["first"], x["fin"], x["fin"], x["pre"], x["pf"], gen[i], phase[i] == "rejected")
           for i, x in enumerate(res)]
    return steps, out


def fast_view(r: Any) -> tuple[list[tuple], list[tuple]]:
    """The fast scheduler's result in the oracle's shape."""
    steps = [(s.kind, s.start_s, s.end_s, s.batch, s.useful_rows, s.context_sum, s.prefill_tokens,
              s.attention_pairs, s.kv_tokens, s.kv_blocks, s.decode_rows, s.cached_tokens, s.partial_rows)
             for s in r.steps]
    out = [(x.admitted_s, x.first_token_s, x.finish_s, x.handed_back_s, x.preemptions, x.prefill_tokens,
            x.generated_tokens, x.rejected) for x in r.requests]
    return steps, out


def tight_pools(reqs: tuple[Request, ...]) -> st.SearchStrategy[KVPool]:
    """Often a pool where every request fits alone but few together (so on-demand admission preempts)."""
    return kv_pools(min_blocks=0, max_blocks=60, max_block_size=8, unlimited=None, tight_for=reqs)


_WORK = workloads(min_size=0, max_size=10, arrivals="boundaries", max_prompt_tokens=40, max_output_tokens=25)


@given(_WORK, cost_models(kind="unit") | st.sampled_from([
    RooflineCostModel(weight_bytes=50, kv_bytes_per_token=3, flops_per_token=7, attention_flops_per_token=2,
                      bandwidth=10, peak_flops=30, overhead=Fraction(1, 10))]),
       st.data(), st.integers(1, 5), st.integers(0, 30), st.booleans())
def test_chunked_matches_the_naive_oracle_step_by_step(reqs, cost, data, max_num_seqs, extra, on_demand):
    """Chunked prefill equals the naive explicit-state scheduler exactly: every step and every request."""
    pool = data.draw(tight_pools(reqs))
    budget = max_num_seqs + extra
    fast = serve_continuous(reqs, cost, max_num_seqs=max_num_seqs, admission="on_demand" if on_demand else "reserve",
                            kv_pool=pool, prefill="chunked", max_num_batched_tokens=budget, record_steps=True)
    steps, out = naive_chunked(reqs, cost, max_num_seqs=max_num_seqs, budget=budget, on_demand=on_demand, pool=pool)
    got_steps, got_out = fast_view(fast)
    note(f"steps: {len(steps)}; preemptions: {fast.summary.preemptions}")
    assert got_steps == steps
    assert got_out == out
    assert fast.summary.steps == len(steps)
    assert fast.summary.mixed_steps == sum(s[0] == "mixed" for s in steps)
    assert fast.summary.prefill_steps == sum(s[0] == "prefill" for s in steps)


@given(_WORK, layer_windows(), st.data(), st.integers(1, 5), st.integers(0, 30), st.booleans())
def test_chunked_with_sliding_windows_matches_the_naive_oracle(reqs, windows, data, max_num_seqs, extra, on_demand):
    """Sliding-window layers: every mixed step's token-layers, cached reads min(p0, w - 1), windowed pairs and
    layer-blocks, and every request, equal the brute-force naive chunked scheduler's."""
    pool = data.draw(kv_pools(min_blocks=0, max_blocks=200, max_block_size=8, unlimited=None, tight_for=reqs,
                              layer_windows=windows))
    cost = data.draw(cost_models(layer_windows=windows))
    budget = max_num_seqs + extra
    fast = serve_continuous(reqs, cost, max_num_seqs=max_num_seqs, admission="on_demand" if on_demand else "reserve",
                            kv_pool=pool, prefill="chunked", max_num_batched_tokens=budget, record_steps=True)
    steps, out = naive_chunked(reqs, cost, max_num_seqs=max_num_seqs, budget=budget, on_demand=on_demand, pool=pool,
                               windows=windows)
    note(f"steps: {len(steps)}; preemptions: {fast.summary.preemptions}")
    assert fast_view(fast) == (steps, out)


# --------------------------------------------------------------------------- claims


@given(st.integers(1, 5000), st.integers(1, 700), st.integers(1, 4), st.integers(1, 8))
def test_idle_server_gives_the_first_token_after_ceil_p_over_n_steps(prompt, budget, output, max_num_seqs):
    """A prompt of P tokens on an idle server takes ceil(P / N) steps to its first token, chunks of N tokens
    whose attention pairs add up to the whole prompt's P (P + 1) / 2."""
    budget = max(budget, max_num_seqs)
    req = Request(id=0, arrival_s=0, prompt_tokens=prompt, output_tokens=output)
    r = serve_continuous([req], UnitCostModel(), max_num_seqs=max_num_seqs, prefill="chunked",
                         max_num_batched_tokens=budget, record_steps=True)
    steps = -(-prompt // budget)
    assert r.requests[0].ttft_s == steps
    chunks = list(r.steps)[:steps]
    assert [s.prefill_tokens for s in chunks] == [budget] * (steps - 1) + [prompt - budget * (steps - 1)]
    assert [s.cached_tokens for s in chunks] == [budget * j for j in range(steps)]
    assert sum(s.attention_pairs for s in chunks) == prompt * (prompt + 1) // 2
    assert r.summary.steps == steps + output - 1 and r.requests[0].handed_back_s == steps + output - 1


@given(workloads(min_size=1, max_size=12, max_prompt_tokens=60, max_output_tokens=20), st.integers(1, 6),
       st.integers(0, 40), cost_models(kind="unit"))
def test_decode_rows_are_never_held_back_by_prefill(reqs, max_num_seqs, extra, cost):
    """With chunked prefill (no preemption), every running sequence gets a token in every step, so each of its
    inter-token gaps is one step; each step holds at most N tokens (decode rows + chunk tokens)."""
    budget = max_num_seqs + extra
    r = serve_continuous(reqs, cost, max_num_seqs=max_num_seqs, prefill="chunked", max_num_batched_tokens=budget,
                         record_steps=True)
    steps = list(r.steps)
    for s in steps:
        assert s.decode_rows + s.prefill_tokens <= budget
    ends = [s.end_s for s in steps]
    for x in r.requests:
        first, last = ends.index(x.first_token_s), ends.index(x.finish_s)
        assert last - first == x.request.output_tokens - 1  # one token per step from the first to the last
        assert all(s.decode_rows >= 1 for s in steps[first + 1: last + 1])
    if r.summary.itl is not None:
        assert r.summary.itl.max <= max(s.duration_s for s in steps)


def test_a_separate_prefill_step_holds_running_decodes_back():
    """Contrast: without chunking, a prefill step stalls the running decodes, so a gap between two tokens
    spans two steps (B = 2, outputs 3, 2, 2, unit steps: the gaps are 1, 1, 2, 1)."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=o) for i, o in enumerate([3, 2, 2])]
    sep = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2, record_steps=True)
    assert sep.summary.itl.max == 2 and sep.summary.itl.mean == Fraction(5, 4)
    chunked = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2, prefill="chunked", max_num_batched_tokens=8,
                               record_steps=True)
    assert chunked.summary.itl.max == 1 and chunked.summary.mixed_steps == 1
    assert [s.kind for s in chunked.steps] == ["prefill", "decode", "mixed", "decode"]


@given(st.sampled_from([1, Fraction(1, 3), 5]), st.data(), st.integers(1, 5), st.integers(0, 20),
       st.none() | st.integers(0, 6))
def test_mixed_steps_hand_every_request_back_no_later_than_static_batching(d, data, batch, spare, wait):
    """Under the stated conditions, continuous batching with chunked prefill hands every request back no
    later than static batching on the same arrivals.

    Conditions: every step (decode, prefill or mixed) takes the same time d; arrivals and
    static batching's max_wait are multiples of d (on step boundaries); max_num_seqs = B; the
    token budget N >= B x max P, so an admitted prompt is prefilled in its admission step; KV
    unlimited. Then a request occupies a slot for exactly O steps from the boundary where a
    slot frees, and by induction over static batches every request of batch k starts by the
    batch's start T_k and ends by T_k + O d <= T_k + max O d, static's hand-back.
    """
    reqs = data.draw(workloads(min_size=1, max_size=12, arrivals="whole_steps", rate=1 / Fraction(d),
                               max_prompt_tokens=30, max_output_tokens=25))
    cost = UnitCostModel(decode=d, prefill=d)
    budget = batch * max(r.prompt_tokens for r in reqs) + spare
    static = serve_static(reqs, cost, batch_size=batch, max_wait=None if wait is None else wait * d, record_steps=True)
    cont = serve_continuous(reqs, cost, max_num_seqs=batch, prefill="chunked", max_num_batched_tokens=budget,
                            record_steps=True)
    for a, b in zip(cont.requests, static.requests, strict=True):
        assert a.handed_back_s <= b.handed_back_s


@pytest.mark.parametrize(("rows", "kwargs", "why"), [
    # the counterexample of the issue: without chunking a prefill step stalls the running decodes
    ([(0, 4, 3), (0, 4, 2), (0, 4, 2)], dict(prefill="separate"), "separate prefill"),
    # an arrival between step boundaries waits for the next boundary
    ([(0, 4, 3), (Fraction(1, 2), 4, 3)], dict(prefill="chunked", max_num_batched_tokens=8), "off-boundary arrival"),
    # a budget below B x max P splits a prompt that static batching prefills in one padded step
    ([(0, 10, 1)], dict(prefill="chunked", max_num_batched_tokens=2), "budget below the prompt"),
])
def test_each_condition_of_the_static_comparison_is_needed(rows, kwargs, why):
    """Dropping a condition of the comparison gives a request handed back later than under static batching."""
    reqs = [Request(id=i, arrival_s=a, prompt_tokens=p, output_tokens=o) for i, (a, p, o) in enumerate(rows)]
    static = serve_static(reqs, UnitCostModel(), batch_size=2, record_steps=True)
    cont = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2, record_steps=True, **kwargs)
    late = [a.handed_back_s - b.handed_back_s for a, b in zip(cont.requests, static.requests, strict=True)]
    assert max(late) > 0, why


def test_chunked_prefill_on_the_lesson_requests_by_hand():
    """Four requests (outputs 100, 200, 300, 1,000; prompts 1), unit steps, 4 slots: all four prefill in one step,
    so each is handed back at its O-th step, the TTFT is 1 step for all, and there are 1,000 steps."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o) for i, o in enumerate([100, 200, 300, 1000])]
    r = serve_continuous(reqs, UnitCostModel(), max_num_seqs=4, prefill="chunked", max_num_batched_tokens=4,
                         record_steps=True)
    assert [x.handed_back_s for x in r.requests] == [100, 200, 300, 1000]
    assert [x.ttft_s for x in r.requests] == [1, 1, 1, 1]
    assert r.summary.steps == 1000 and r.summary.long_run_useful_share == 1
    assert r.summary.slot_occupancy == Fraction(100 + 200 + 300 + 1000, 4 * 1000)


def test_mixed_step_cost_is_its_exact_composition():
    """A mixed step's duration is roofline.formulas.mixed_step_time of its decode rows and chunks."""
    cost = RooflineCostModel(weight_bytes=1000, kv_bytes_per_token=7, flops_per_token=300, attention_flops_per_token=5,
                             bandwidth=10, peak_flops=1000)
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=3, output_tokens=6),
            Request(id=1, arrival_s=0, prompt_tokens=9, output_tokens=2)]
    r = serve_continuous(reqs, cost, max_num_seqs=2, prefill="chunked", max_num_batched_tokens=6, record_steps=True)
    steps = list(r.steps)
    # step 0: request 0 whole (3), request 1's first 3; step 1: request 0 decodes at context 4, request 1's next 5
    assert [(s.kind, s.decode_rows, s.context_sum, s.prefill_tokens, s.cached_tokens) for s in steps[:3]] == [
        ("prefill", 0, 0, 6, 0), ("mixed", 1, 4, 5, 3), ("mixed", 1, 5, 1, 8)]
    s = steps[1]
    assert s.attention_pairs == 5 * 3 + 15
    expected = f.mixed_step_time(decode_rows=1, context_sum=4, prefill_tokens=5, cached_tokens=3, attention_pairs=30,
                                 weight_bytes=1000, kv_bytes_per_token=7, flops_per_token=300,
                                 attention_flops_per_token=5, bandwidth=Fraction(10), peak_flops=Fraction(1000),
                                 overhead=0)
    assert s.duration_s == expected and s.bytes == 1000 + 7 * (4 + 3 + 5) and s.flops == 300 * 6 + 5 * (4 + 30)
    assert r.requests[1].first_token_s == steps[2].end_s


@pytest.mark.parametrize("engine", ["event", "step"])
def test_a_request_preempted_mid_prefill_counts_its_dropped_chunk_and_its_whole_re_prefill(engine):
    """prefill_tokens counts every chunk processed: 2 tokens chunked before a preemption + the re-prefill of 8 = 10."""
    # N = 4 tokens a step, a pool of 10 one-token blocks, on-demand: step 1 prefills A (2 tokens, first token at
    # t = 1) and a first chunk of 2 of B's 8, B holding the 8 blocks of its whole prefill (2 + 8 = 10 blocks).
    # Step 2: A's decode needs an 11th block, so B, the most recently admitted, is preempted and drops its chunk.
    # A decodes alone (it holds 3..7 blocks; B's 8 never fit beside them) and is handed back at t = 6; B is then
    # re-admitted (g = 0), prefills 4 + 4 tokens in steps 7 and 8 (first token at t = 8) and decodes once.
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=2, output_tokens=6),
            Request(id=1, arrival_s=0, prompt_tokens=8, output_tokens=2)]
    r = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2, admission="on_demand",
                         kv_pool=KVPool.blocks(10, block_size=1), prefill="chunked", max_num_batched_tokens=4,
                         engine=engine, record_steps=True)
    a, b = r.requests
    assert (a.preemptions, a.prefill_tokens, a.first_token_s, a.handed_back_s) == (0, 2, 1, 6)
    assert (b.preemptions, b.prefill_tokens, b.first_token_s, b.handed_back_s) == (1, 2 + 8, 8, 9)
    assert b.generated_tokens == 2
    assert r.steps is not None
    assert [(s.decode_rows, s.prefill_tokens, s.cached_tokens) for s in r.steps] == \
        [(0, 4, 0)] + [(1, 0, 0)] * 5 + [(0, 4, 0), (0, 4, 4), (1, 0, 0)]
    assert sum(s.prefill_tokens for s in r.steps) == a.prefill_tokens + b.prefill_tokens


def test_max_model_len_rejects_with_the_reason_and_the_rest_run():
    """A request whose prompt + output exceeds max_model_len is rejected with the numbers; the others are served."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=10, output_tokens=7),
            Request(id=1, arrival_s=0, prompt_tokens=10, output_tokens=6)]
    for r in (serve_continuous(reqs, UnitCostModel(), max_model_len=16, prefill="chunked", max_num_batched_tokens=256,
                               record_steps=True),
              serve_continuous(reqs, UnitCostModel(), max_model_len=16, record_steps=True),
              serve_static(reqs, UnitCostModel(), max_model_len=16, record_steps=True)):
        assert r.requests[0].rejected_reason == "prompt + output of 17 tokens (10 + 7) exceeds max_model_len=16"
        assert r.requests[1].handed_back_s == 6 and r.summary.completed == 1


def test_static_token_budget_forms_smaller_batches():
    """Static batching with a token budget closes the batch when the padded prefill would exceed it, and rejects
    a prompt longer than the budget."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=p, output_tokens=2) for i, p in enumerate([3, 5, 4, 2, 9])]
    r = serve_static(reqs, UnitCostModel(), batch_size=4, max_num_batched_tokens=8, record_steps=True)
    prefills = [s for s in r.steps if s.kind == "prefill"]
    # [3] + 5 -> 2 x 5 = 10 > 8: alone; [5]; [4, 2] -> 2 x 4 = 8; the 9-token prompt is rejected
    assert [(s.batch, s.prefill_tokens) for s in prefills] == [(1, 3), (1, 5), (2, 8)]
    assert r.requests[4].rejected_reason == "prompt of 9 tokens exceeds max_num_batched_tokens=8"


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(prefill="eager"), "prefill"),
    (dict(prefill="chunked", max_num_batched_tokens=4, max_num_seqs=8), "max_num_batched_tokens"),
    (dict(prefill="chunked", max_prefill_tokens=64), "max_prefill_tokens"),
    (dict(max_prefill_tokens=64, max_num_batched_tokens=64), "max_num_batched_tokens"),
    (dict(max_model_len=0), "max_model_len"),
])
def test_bad_chunking_options_raise_naming_the_field(kwargs, field):
    """Bad chunked-prefill options raise InvalidValueError naming the option."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=2, output_tokens=2)]
    with pytest.raises(InvalidValueError) as err:
        serve_continuous(reqs, UnitCostModel(), record_steps=True, **kwargs)
    assert err.value.field == field


@given(_WORK, cost_models(kind="unit"), st.data(), st.integers(1, 4), st.booleans(), st.booleans())
def test_inter_token_gaps_add_up_to_each_request_s_decode_time(reqs, cost, data, max_num_seqs, on_demand, chunked):
    """ITL counts O - 1 gaps per request handed back, and they add up to finish - first token (so their mean is
    the requests' time-weighted TPOT), preemptions included; static batching reports none."""
    pool = data.draw(tight_pools(reqs))
    kw = dict(prefill="chunked", max_num_batched_tokens=max_num_seqs + 9) if chunked else {}
    r = serve_continuous(reqs, cost, max_num_seqs=max_num_seqs, admission="on_demand" if on_demand else "reserve",
                         kv_pool=pool, record_steps=True, **kw)
    done = [x for x in r.requests if not x.rejected]
    gaps = sum(x.request.output_tokens - 1 for x in done)
    itl = r.summary.itl
    if gaps == 0:
        assert itl is None
    else:
        assert itl.mean * gaps == sum(x.finish_s - x.first_token_s for x in done)
        assert itl.p50 <= itl.p90 <= itl.p99 <= itl.max
    assert serve_static(reqs, cost, batch_size=2, kv_pool=pool, record_steps=True).summary.itl is None


# --------------------------------------------------------------------------- metrics by hand


def test_goodput_by_hand():
    """B = 2, outputs 3, 2, 2, unit steps, prefill in its own step: TTFT 1, 1, 3; TPOT 3/2, 1, 1; makespan 4."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=o) for i, o in enumerate([3, 2, 2])]
    r = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2, record_steps=True)
    assert [x.ttft_s for x in r.requests] == [1, 1, 3] and [x.tpot_s for x in r.requests] == [Fraction(3, 2), 1, 1]
    g = r.goodput(ttft_s=2)
    assert (g.met, g.requests_per_s, g.output_tokens_per_s, g.share) == (2, Fraction(1, 2), Fraction(5, 4),
                                                                         Fraction(2, 3))
    assert r.goodput(tpot_s=1).met == 2 and r.goodput(ttft_s=3, tpot_s=2).met == 3
    assert r.goodput(e2e_s=3).met == 1 and r.goodput().met == 3
    one = serve_continuous([Request(id=0, arrival_s=0, prompt_tokens=4, output_tokens=1)], UnitCostModel(),
                           record_steps=True)
    assert one.goodput(tpot_s=0).met == 1  # O = 1 has no TPOT: the limit does not apply
    with pytest.raises(InvalidValueError) as err:
        r.goodput(ttft_s=-1)
    assert err.value.field == "ttft_s"


def test_slot_occupancy_and_shares_by_hand():
    """The same run: slots held 2, 2, 2, 2 of 2 (the waiting sequence holds its slot during a prefill step);
    static batching of B = 2: per-batch shares 5/6 and 1, long-run (5 + 2) / (6 + 2) = 7/8, slots 8 / (2 x 5)."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=o) for i, o in enumerate([3, 2, 2])]
    cont = serve_continuous(reqs, UnitCostModel(), max_num_seqs=2, record_steps=True).summary
    assert cont.slot_occupancy == 1 and cont.long_run_useful_share == 1 and cont.per_batch_useful_share is None
    static = serve_static(reqs, UnitCostModel(), batch_size=2, record_steps=True).summary
    assert static.per_batch_useful_share == (Fraction(5, 6) + 1) / 2
    assert static.long_run_useful_share == Fraction(7, 8) and static.slot_occupancy == Fraction(6 + 2, 2 * 5)


@given(st.lists(st.fractions(0, 10, max_denominator=7), min_size=1, max_size=40))
def test_percentiles_of_counts_equal_those_of_the_values(values):
    """Percentiles from value -> count equal the (interpolated) percentiles of the expanded values, exactly."""
    from collections import Counter

    from roofline.sim import Percentiles

    assert Percentiles.of_counts(Counter(values)) == Percentiles.of(values)
