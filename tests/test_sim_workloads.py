"""Workloads: closed-loop clients (Little's law, exactly) and the seeded generators' distributions."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.errors import InvalidValueError, WorkloadSizeError
from roofline.sim import (
    ClosedLoop,
    KVPool,
    Request,
    UnitCostModel,
    anyscale_workload,
    arrival_times,
    lengths,
    serve_continuous,
    serve_serial,
    serve_static,
    synthetic_workload,
)
from roofline.testing import strategies
from roofline.testing.strategies import cost_models

_LOOPS = strategies.closed_loops(max_clients=5, max_size=14, max_prompt_tokens=40, max_output_tokens=20)
_MODES = st.sampled_from([{}, {"prefill": "chunked", "max_num_batched_tokens": 24}])


@given(_LOOPS, cost_models(), _MODES, st.integers(1, 4))
def test_closed_loop_obeys_littles_law_exactly(loop, cost, mode, max_num_seqs):
    """Over whole client cycles, requests per second (M over the clients' mean span) = N / (mean E2E + Z),
    the registered formula, exactly with Fractions."""
    clients, think, pairs = loop.clients, loop.think_time_s, loop.lengths
    r = serve_continuous(loop, cost, max_num_seqs=max_num_seqs, record_steps=True, **mode)
    done = r.requests
    if not done:
        return
    assert all(x.handed_back_s is not None for x in done)
    n = min(clients, len(pairs))  # clients that send anything
    ends = {}
    for x in done:  # each client's span: its last hand-back + Z
        ends[x.client] = max(ends.get(x.client, 0), x.handed_back_s + think)
    assert sorted(ends) == list(range(n))
    rate = len(done) / (Fraction(sum(ends.values())) / n)
    mean_e2e = Fraction(sum(x.e2e_s for x in done)) / len(done)
    assert rate == f.closed_loop_throughput(clients=n, e2e_latency=mean_e2e, think_time=think)


@given(_LOOPS, cost_models(kind="unit"), _MODES)
def test_each_client_sends_its_next_request_at_its_hand_back_plus_think_time(loop, cost, mode):
    """Requests 0..N-1 arrive at 0; every later one arrives Z after the hand-back of its client's previous one, and
    the k-th hand-back (in time order) releases request N + k."""
    clients, think = loop.clients, loop.think_time_s
    r = serve_continuous(loop, cost, max_num_seqs=3, record_steps=True, **mode)
    last: dict[int, Any] = {}
    for x in r.requests:
        if x.request.id < clients:
            assert x.arrival_s == 0 and x.client == x.request.id
        else:
            assert x.arrival_s == last[x.client] + think
        last[x.client] = x.handed_back_s
    backs = sorted(x.handed_back_s for x in r.requests)
    later = [x.arrival_s - think for x in r.requests[clients:]]
    assert later == backs[: len(later)]


@given(strategies.closed_loops(max_clients=1, max_size=14, max_prompt_tokens=40, max_output_tokens=20), cost_models())
def test_one_closed_loop_client_is_one_by_one_serving(loop, cost):
    """N = 1: continuous batching of one client's requests equals serial serving of the same arrivals."""
    think = loop.think_time_s
    r = serve_continuous(loop, cost, record_steps=True)
    serial = serve_serial([x.request for x in r.requests], cost, record_steps=True)
    assert [x.handed_back_s for x in r.requests] == [x.handed_back_s for x in serial.requests]
    assert [x.ttft_s for x in r.requests] == [x.ttft_s for x in serial.requests]
    t = 0
    for x in r.requests:
        assert x.arrival_s == t and x.queue_wait_s == 0
        t = x.handed_back_s + think


def test_closed_loop_with_a_rejected_request_moves_the_client_on():
    """A request rejected on arrival counts as handed back at its arrival: its client sends the next one then."""
    loop = ClosedLoop(clients=1, lengths=[(4, 3), (50, 3), (4, 2)], think_time_s=1)
    r = serve_continuous(loop, UnitCostModel(), max_model_len=20, record_steps=True)
    assert [x.arrival_s for x in r.requests] == [0, 4, 5]
    assert r.requests[1].rejected and r.requests[2].handed_back_s == 7


def test_serial_and_static_refuse_closed_loop_clients():
    """Serial and static batching need their arrivals up front: a closed loop is refused, naming the argument."""
    loop = ClosedLoop(clients=2, lengths=[(4, 3)] * 3)
    for serve in (serve_serial, serve_static):
        with pytest.raises(InvalidValueError, match="does not take closed-loop clients") as err:
            serve(loop, UnitCostModel())
        assert err.value.field == "requests"


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(clients=0, lengths=[(1, 1)]), "clients"),
    (dict(clients=1, lengths=[(0, 1)]), "lengths[0].prompt_tokens"),
    (dict(clients=1, lengths=[(1, 1), 3]), "lengths[1]"),
    (dict(clients=1, lengths=[(1, 1)], think_time_s=-1), "think_time_s"),
    (dict(clients=1, lengths=[(1, 1)], think_time_s=10**15 + 1), "think_time_s"),
    (dict(clients=1, lengths=[(1, 1)], think_time_s=10**400), "think_time_s"),
])
def test_bad_closed_loops_raise_naming_the_field(kwargs, field):
    """A bad client count, length pair or think time raises InvalidValueError naming it."""
    with pytest.raises(InvalidValueError) as err:
        ClosedLoop(**kwargs)
    assert err.value.field == field


def test_closed_loop_of_numpy_lengths_runs():
    """Break-it: numpy integer lengths (np.array([[3, 2], ...])) were taken, served, then refused at the end by
    the Requests made of them (field prompt_tokens=np.int64(3)); a think time of 10**400 ran, then raised an
    OverflowError. The lengths are Python ints; the think time is refused up front (test above)."""
    loop = ClosedLoop(clients=1, lengths=np.array([[3, 2], [4, 1]]))
    assert loop.lengths == ((3, 2), (4, 1)) and type(loop.lengths[0][0]) is int
    r = serve_continuous(loop, UnitCostModel(), record_steps=True)
    assert [x.handed_back_s for x in r.requests] == [2, 3]  # 1 prefill + 1 decode, then 1 prefill


# --------------------------------------------------------------------------- generators


def test_generators_are_seeded_and_record_their_seed():
    """The same seed gives the same workload; another seed another one; the spec records the seed."""
    kw = dict(arrival="gamma", rate=3, cv=2, input_len=300, output_len=50, input_distribution="lognormal",
              output_distribution="uniform", range_ratio=Fraction(1, 2))
    a, b, c = (synthetic_workload(200, seed=s, **kw) for s in (5, 5, 6))
    assert a == b and a.requests != c.requests and a.spec["seed"] == 5
    r = serve_continuous(a, UnitCostModel(), record_steps=True)
    assert r.options["workload"]["seed"] == 5 and r.summary.completed == 200


def test_poisson_and_gamma_arrivals_have_their_rate_and_variation():
    """Poisson gaps: mean 1 / rate, CV 1; gamma gaps: mean 1 / rate, CV as given (n = 40,000, 4 standard errors)."""
    n = 40_000
    for process, cv in (("poisson", 1), ("gamma", Fraction(1, 2)), ("gamma", 3)):
        t = np.array([float(x) for x in arrival_times(n, process=process, rate=8, cv=cv, seed=11)])
        gaps = np.diff(t)
        assert t[0] == 0 and np.all(gaps >= 0)
        se = float(cv) / 8 / math.sqrt(n)
        assert abs(gaps.mean() - 1 / 8) <= 4 * se + 1e-6
        assert abs(gaps.std() / gaps.mean() - float(cv)) <= 0.05 * float(cv) + 0.02
    assert arrival_times(3, process="burst", rate=None) == [0, 0, 0]


def test_capped_exponential_lengths_are_the_anyscale_sampler():
    """round(X), X exponential of mean 128, kept if <= cap, 0 served as 1: the sample mean matches the exact mean
    of that integer distribution, and nothing exceeds the cap."""
    for cap in (32, 512):
        drawn = lengths(20_000, distribution="exponential", mean=128, cap=cap, seed=2)
        assert max(drawn) == cap and min(drawn) >= 1
        # P(round(X) = k) for k = 0..cap, renormalised to the kept values; 0 is served as 1
        probs = [(1 - math.exp(-0.5 / 128))] + [math.exp(-(k - 0.5) / 128) - math.exp(-(k + 0.5) / 128)
                                                for k in range(1, cap + 1)]
        mean = (probs[0] * 1 + sum(k * p for k, p in enumerate(probs) if k)) / sum(probs)
        sd = math.sqrt(sum(p * (max(k, 1) - mean) ** 2 for k, p in enumerate(probs)) / sum(probs))
        assert abs(np.mean(drawn) - mean) <= 4 * sd / math.sqrt(len(drawn))


def test_uniform_lognormal_and_trace_lengths():
    """Uniform lengths stay in [len (1 - r), len (1 + r)] and cover it; lognormal ones have the given mean;
    trace resampling keeps each (prompt, output) pair of the trace together."""
    u = lengths(5000, distribution="uniform", mean=100, range_ratio=Fraction(1, 4), seed=1)
    assert min(u) == 75 and max(u) == 125
    ln = lengths(40_000, distribution="lognormal", mean=200, sigma=Fraction(1, 2), seed=1)
    assert abs(np.mean(ln) - 200) <= 4 * 200 * math.sqrt(math.exp(0.25) - 1) / math.sqrt(len(ln)) + 0.5
    trace = [Request(id=i, arrival_s=i, prompt_tokens=10 + i, output_tokens=100 + i) for i in range(7)]
    w = synthetic_workload(300, arrival="poisson", rate=2, input_distribution="trace", output_distribution="trace",
                           trace=trace, seed=4)
    assert {(r.prompt_tokens, r.output_tokens) for r in w} == {(10 + i, 100 + i) for i in range(7)}


def test_anyscale_workload():
    """The Anyscale benchmark's workload: 1,000 requests at t = 0 with 512-token prompts, outputs capped."""
    for cap in (32, 128, 512, 1536):
        w = anyscale_workload(cap, seed=0)
        assert len(w) == 1000 and {r.prompt_tokens for r in w} == {512} and {r.arrival_s for r in w} == {0}
        assert max(r.output_tokens for r in w) <= cap


@pytest.mark.parametrize(("call", "field"), [
    (lambda: arrival_times(3, process="weibull", rate=1), "process"),
    (lambda: arrival_times(3, rate=None), "rate"),
    (lambda: arrival_times(3, process="gamma", rate=1, cv=0), "cv"),
    (lambda: lengths(3, distribution="zipf", mean=3), "distribution"),
    (lambda: lengths(3, distribution="exponential", mean=3), "cap"),
    (lambda: lengths(3, distribution="uniform", mean=3, range_ratio=1), "range_ratio"),
    (lambda: lengths(3, mean=0), "mean"),
    (lambda: synthetic_workload(3, arrival="burst", seed=-1), "seed"),
    (lambda: synthetic_workload(3, arrival="burst", input_distribution="trace", output_distribution="trace"), "trace"),
])
def test_bad_generator_arguments_raise_naming_the_field(call, field):
    """A bad generator argument raises InvalidValueError naming it."""
    with pytest.raises(InvalidValueError) as err:
        call()
    assert err.value.field == field


def test_a_cap_that_keeps_almost_no_draws_or_caps_nothing_is_refused():
    """Break-it: lognormal lengths of mean 100,000 (sigma 0.01) capped at 1 redrew for ever (a hang), an exponential
    of mean 10**6 capped at 1 keeps 1.5e-6 of its draws; a cap on fixed or uniform lengths was ignored (lengths of
    1,024 under a cap of 10). Refused naming the cap; a cap that keeps 1% or more still draws."""
    for kw in (dict(distribution="lognormal", mean=100_000, cap=1, sigma=Fraction(1, 100)),
               dict(distribution="exponential", mean=10**6, cap=1),
               dict(distribution="fixed", mean=1024, cap=10),
               dict(distribution="uniform", mean=1024, range_ratio=Fraction(1, 2), cap=10)):
        with pytest.raises(InvalidValueError) as err:
            lengths(3, **kw)
        assert err.value.field == "cap" and err.value.value == kw["cap"]
    with pytest.raises(InvalidValueError) as err:
        synthetic_workload(3, arrival="burst", input_len=1024, input_cap=10)
    assert err.value.field == "input_cap"
    # 1 - exp(-(cap + 1/2) / mean) = 1 - exp(-1/2) = 0.39 of the draws are kept: fine
    assert max(lengths(50, distribution="exponential", mean=3, cap=1)) == 1


def test_generated_workload_runs_under_every_policy_with_a_pool():
    """A generated open-loop workload is a sequence of Requests every policy serves."""
    w = synthetic_workload(40, rate=5, input_len=64, output_len=16, output_distribution="lognormal", seed=9)
    pool = KVPool.blocks(40, block_size=16)
    for r in (serve_serial(w, UnitCostModel(), kv_pool=pool, record_steps=True),
              serve_static(w, UnitCostModel(), kv_pool=pool, record_steps=True),
              serve_continuous(w, UnitCostModel(), kv_pool=pool, admission="on_demand", prefill="chunked",
                               max_num_batched_tokens=256, record_steps=True)):
        assert r.summary.completed + r.summary.rejected == 40


# --------------------------------------------------------------------------- shared prefixes and conversations

def _contents(w: Any, prefix_len: int, turns: int, prefix_of: dict[int, int]) -> list[list[tuple[Any, ...]]]:
    """Each request's prompt as named tokens, built turn by turn from the spec's rule (docs/conventions.md,
    "Workloads"): prefix k's tokens, then per turn the new message and the previous turn's output, so that
    equal lists mean equal content. Conversations are recovered by arrival order (burst: conversation-major)."""
    out = []
    for c in range(len(w) // turns):
        reqs = [r for r in w.requests if r.id in range(c, len(w), len(w) // turns)] if turns > 1 else [w[c]]
        tokens: list[tuple[Any, ...]] = [("p", prefix_of[c], i) for i in range(prefix_len)]
        prev_out = 0
        for t, r in enumerate(reqs):
            if t:
                tokens = tokens + [("o", c, t - 1, i) for i in range(prev_out)]
            tokens = tokens + [("u", c, t, i) for i in range(r.prompt_tokens - len(tokens))]
            assert len(tokens) == r.prompt_tokens
            out.append(tokens)
            prev_out = r.output_tokens
    return out


@given(n=st.integers(1, 4), prefix_len=st.integers(0, 40), prefixes=st.integers(1, 3), turns=st.integers(1, 3),
       block=st.sampled_from([1, 4, 16]), dist=st.sampled_from(["fixed", "uniform"]), seed=st.integers(0, 3))
def test_generated_hashes_are_equal_exactly_where_the_content_is(n, prefix_len, prefixes, turns, block, dist, seed):
    """Every pair of generated prompts (bursts: turns t of every conversation at t x gap) has equal hashes for
    its full block j iff its tokens up to that block's end are equal, by an independent token-by-token model;
    turn t + 1's prompt is turn t's prompt + output + a new message; the prefix is prepended to the drawn length."""
    if prefix_len == 0:
        prefixes = 1
    kw = dict(arrival="burst", input_len=12, output_len=5, input_distribution=dist, output_distribution=dist,
              range_ratio=0.5, seed=seed, num_turns=turns, turn_gap_s=7, hash_block_size=block)
    w = synthetic_workload(n, prefix_len=prefix_len, num_prefixes=prefixes, **kw)
    plain = synthetic_workload(n * turns, **{**kw, "num_turns": 1})  # the same draws, one per turn
    assert len(w) == n * turns and [r.id for r in w] == list(range(n * turns))
    assert [r.arrival_s for r in w] == [Fraction(7 * t) for t in range(turns) for _ in range(n)]
    first = [r.prompt_tokens for r in w][:n]
    assert first == [prefix_len + plain[c * turns].prompt_tokens for c in range(n)]
    prefix_of = {}
    for c in range(n):  # which prefix: the block hashes of the shared part name it (the first conversation's)
        prefix_of[c] = w[c].block_hashes[:prefix_len // block] if prefix_len >= block else 0
    names = {key: k for k, key in enumerate(dict.fromkeys(prefix_of.values()))}
    tokens = _contents(w, prefix_len, turns, {c: names[prefix_of[c]] for c in range(n)})
    order = [r for c in range(n) for r in (w.requests[c::n] if turns > 1 else [w[c]])]
    for (a, ta), (b, tb) in ((x, y) for x in zip(order, tokens, strict=True) for y in zip(order, tokens, strict=True)):
        for j in range(min(len(a.block_hashes), len(b.block_hashes))):
            end = (j + 1) * block
            assert (a.block_hashes[j] == b.block_hashes[j]) == (ta[:end] == tb[:end])
    for r in w:
        full = r.prompt_tokens // block if turns > 1 else min(r.prompt_tokens, prefix_len) // block
        assert len(r.block_hashes) == full and (r.hash_block_size == block if full else not r.block_hashes)


def test_prefixes_are_drawn_on_their_own_stream_and_uniformly():
    """Changing the number of prefixes changes no arrival or length; 3 prefixes over 30,000 conversations are
    drawn about a third each; a workload without a prefix or turns has no hashes, as before."""
    kw = dict(rate=5, input_len=100, output_len=20, input_distribution="uniform", range_ratio=0.5, seed=11)
    one = synthetic_workload(30_000, prefix_len=32, **kw)
    three = synthetic_workload(30_000, prefix_len=32, num_prefixes=3, **kw)
    none = synthetic_workload(30_000, **kw)
    assert [(r.arrival_s, r.prompt_tokens) for r in one] == [(r.arrival_s, r.prompt_tokens) for r in three]
    assert [r.prompt_tokens - 32 for r in one] == [r.prompt_tokens for r in none]
    assert all(not r.block_hashes for r in none) and {r.block_hashes for r in one} == {(0, 1)}
    counts: dict[tuple[int, ...], int] = {}
    for r in three:
        counts[r.block_hashes] = counts.get(r.block_hashes, 0) + 1
    assert len(counts) == 3 and all(abs(c / 30_000 - 1 / 3) < 0.01 for c in counts.values())
    assert three.spec["num_prefixes"] == 3 and three.spec["prefix_len"] == 32 and three.spec["hash_block_size"] == 16
    assert none.spec["hash_block_size"] is None and none.spec["turn_gap_s"] is None
    again = synthetic_workload(30_000, prefix_len=32, num_prefixes=3, **kw)
    assert again == three


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"prefix_len": -1}, "prefix_len"), ({"prefix_len": 1.5}, "prefix_len"), ({"prefix_len": 10**16}, "prefix_len"),
    ({"num_prefixes": 0}, "num_prefixes"), ({"num_prefixes": 2}, "num_prefixes"),
    ({"num_turns": 0}, "num_turns"), ({"num_turns": True}, "num_turns"), ({"num_turns": 10**7}, "num_turns"),
    ({"num_turns": 2, "turn_gap_s": -1}, "turn_gap_s"), ({"num_turns": 2, "turn_gap_s": "1"}, "turn_gap_s"),
    ({"num_turns": 3, "turn_gap_s": 10**15}, "turn_gap_s"), ({"hash_block_size": 0}, "hash_block_size"),
    ({"num_turns": 3, "input_len": 10**15 // 2}, "num_turns"), ({"num_turns": 2, "input_len": 10**12}, "num_turns"),
    ({"prefix_len": 10**12}, "prefix_len"),
])
def test_bad_prefix_and_turn_arguments_raise_naming_the_field(kwargs, field):
    with pytest.raises(InvalidValueError) as err:
        synthetic_workload(2, arrival="burst", **{"input_len": 8, "output_len": 4, **kwargs})
    assert err.value.field == field


@pytest.mark.parametrize(("turns", "tokens", "blocks"), [
    # prompt of turn t = 256 + 288 (t - 1) tokens = 16 + 18 (t - 1) blocks of 16; 50 conversations of T turns:
    # tokens 50 (256 T + 144 T (T - 1)), blocks 50 (16 T + 9 T (T - 1))
    (1000, 50 * (256 * 1000 + 144 * 1000 * 999), 50 * (16 * 1000 + 9 * 1000 * 999)),      # 450,350,000 blocks
    (100_000, 50 * (256 * 10**5 + 144 * 10**5 * 99_999), 50 * (16 * 10**5 + 9 * 10**5 * 99_999)),
])
def test_too_many_block_hashes_are_refused_from_the_sizes_before_any_request(turns, tokens, blocks):
    """Break-it finding 3: 50 conversations of 10^5 turns ran for minutes (a Python loop over 5 million turns)
    before the refusal 10^3 turns get at once; now refused from the drawn sizes (numpy), the counts hand-derived."""
    import time

    start = time.perf_counter()
    with pytest.raises(WorkloadSizeError) as info:
        synthetic_workload(50, arrival="burst", input_len=256, output_len=32, num_turns=turns)
    assert time.perf_counter() - start < 20  # was > 60 s at 10^5 turns (the drawing itself takes about 2 s)
    err = info.value
    assert (err.field, err.value, err.block) == ("num_turns", turns, 16)
    assert err.blocks == blocks and err.prompt_tokens == tokens  # float64 sums, exact at these sizes
    assert str(err).startswith(f"num_turns={turns}: the prompts need {blocks:.3e} block hashes of 16 tokens, more "
                               "than MAX_HASHED_BLOCKS = 100,000,000")


def test_a_hash_count_near_the_limit_is_decided_exactly_by_the_requests_loop():
    """Within 1 % of MAX_HASHED_BLOCKS the float64 check decides nothing and the requests' loop decides exactly:
    with the limit moved to one block under the 450,350,000 that 50 fixed conversations of 1,000 turns need,
    they are refused with the loop's int counts."""
    from unittest import mock

    from roofline.sim import workloads

    kw = dict(arrival="burst", input_len=256, output_len=32, num_turns=1000)
    with mock.patch.object(workloads, "MAX_HASHED_BLOCKS", 450_350_000 - 1), pytest.raises(WorkloadSizeError) as info:
        synthetic_workload(50, **kw)
    assert info.value.blocks == 450_350_000 and isinstance(info.value.blocks, int)  # the loop's, not float64's
    assert info.value.prompt_tokens == 50 * (256 * 1000 + 144 * 1000 * 999)
