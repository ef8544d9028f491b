"""Stopping a run early once its SLO is lost (``stop_on_misses``; docs/conventions.md, "Stopping a run early"):
the same verdict as the whole run on both clocks, one engine, replicas and a disaggregated split, and the rate
search of ``roofline plan`` that uses it."""

from __future__ import annotations

import importlib
import math
from fractions import Fraction
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import Deployment, Parallelism, get_accelerator, get_model, plan
from roofline.errors import InvalidValueError, RunMet, RunStopped
from roofline.sim import (
    KVPool,
    Pool,
    Request,
    RooflineCostModel,
    TransferLink,
    UnitCostModel,
    scale_rate,
    serve_continuous,
    serve_disaggregated,
    serve_replicas,
    synthetic_workload,
)

P = importlib.import_module("roofline.plan")
MODEL = get_model("llama-3.1-8b")


def _five() -> list[Request]:
    return [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=3) for i in range(5)]


def test_hand_worked_ttft_stop() -> None:
    """One sequence at a time, unit steps, five requests at t = 0 of P = 4, O = 3: each takes a prefill and two
    decode steps, so the first tokens come at 1, 4, 7, 10, 13. A 10 s limit: one miss (13); allowed 1 runs to
    the end (the same run as without the option), allowed 0 stops (one miss known, at the boundary 11 > 0 + 10)."""
    full = serve_continuous(_five(), UnitCostModel(), max_num_seqs=1)
    assert [r.ttft_s for r in full.requests] == [1, 4, 7, 10, 13]
    for engine in ("event", "step"):
        same = serve_continuous(_five(), UnitCostModel(), max_num_seqs=1, engine=engine,
                                stop_on_misses={"ttft_s": (10, 1)})
        assert [r.to_dict() for r in same.requests] == [r.to_dict() for r in full.requests]
        with pytest.raises(RunStopped) as err:
            serve_continuous(_five(), UnitCostModel(), max_num_seqs=1, engine=engine,
                             stop_on_misses={"ttft_s": (10, 0)})
        assert (err.value.metric, err.value.limit_s, err.value.allowed, err.value.missed) == ("ttft_s", 10, 0, 1)


def test_hand_worked_tpot_stop() -> None:
    """Two sequences at once, unit steps, P = 4, O = 3 at t = 0: requests 0 and 1 prefill together (0 -> 1) and
    decode at 2, 3: TPOT (3 - 1) / 2 = 1; requests 2 and 3 the same from 3: TPOT 1; request 4 alone: TPOT 1. A
    limit of 1/2 s: all five miss; allowed 4 stops (at the first boundary past 1 + 1/2 x 2 = 2 none is handed
    back yet, and the count reaches 5 by the end), allowed 5 runs to the end."""
    full = serve_continuous(_five(), UnitCostModel(), max_num_seqs=2)
    assert [r.tpot_s for r in full.requests] == [1, 1, 1, 1, 1]
    for engine in ("event", "step"):
        with pytest.raises(RunStopped, match="tpot_s"):
            serve_continuous(_five(), UnitCostModel(), max_num_seqs=2, engine=engine,
                             stop_on_misses={"tpot_s": (Fraction(1, 2), 4)})
        same = serve_continuous(_five(), UnitCostModel(), max_num_seqs=2, engine=engine,
                                stop_on_misses={"tpot_s": (Fraction(1, 2), 5)})
        assert [r.to_dict() for r in same.requests] == [r.to_dict() for r in full.requests]


def _misses(result: Any, metric: str, limit: Any) -> int:
    """Misses of the whole run: values over the limit, a rejected request missing (TPOT: of O >= 2 only)."""
    count = 0
    for r in result.requests:
        if metric == "tpot_s" and r.request.output_tokens < 2:
            continue
        value = getattr(r, metric)
        count += value is None or value > limit
    return count


def _random_run(seed: int, rate: int, seqs: int, chunked: bool, on_demand: bool, engine: str,
                kv_tokens: int) -> tuple[list[Request], Any, dict[str, Any]]:
    """30 requests (Poisson at ``rate``/s, prompts ~300, outputs ~20 tokens), Llama 3.1 8B on one H100, and the
    serve keywords: the cap, the admission, the clock, a pool of ``kv_tokens`` tokens and the prefill mode."""
    reqs = list(synthetic_workload(30, arrival="poisson", rate=rate, input_len=300, output_len=20,
                                   input_distribution="uniform", output_distribution="uniform",
                                   range_ratio=Fraction(9, 10), seed=seed).requests)
    cost = RooflineCostModel.for_deployment(Deployment(MODEL, get_accelerator("h100-sxm"), Parallelism(tensor=1)))
    kw: dict[str, Any] = dict(max_num_seqs=seqs, admission="on_demand" if on_demand else "reserve", engine=engine,
                              kv_pool=KVPool.tokens(kv_tokens))
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=512)
    return reqs, cost, kw


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([20, 80, 300]), st.sampled_from([2, 8]), st.booleans(),
       st.booleans(), st.sampled_from(["ttft_s", "tpot_s"]), st.integers(1, 400), st.integers(0, 12),
       st.sampled_from(["event", "step"]))
def test_stop_gives_the_whole_runs_verdict(seed: int, rate: int, seqs: int, chunked: bool, on_demand: bool,
                                           metric: str, limit_ms: int, allowed: int, engine: str) -> None:
    """Random workloads, both prefill modes and admissions, both clocks: the run stops exactly when the whole run
    has more misses than allowed (the whole run ends with every request decided), and a run that does not stop
    is the whole run, request by request."""
    reqs, cost, kw = _random_run(seed, rate, seqs, chunked, on_demand, engine, 6000)
    limit = Fraction(limit_ms, 1000) if metric == "ttft_s" else Fraction(limit_ms, 40000)
    full = serve_continuous(reqs, cost, **kw)
    missed = _misses(full, metric, limit)
    try:
        result = serve_continuous(reqs, cost, stop_on_misses={metric: (limit, allowed)}, **kw)
    except RunStopped as err:
        assert missed > allowed and allowed < err.missed <= missed
        return
    assert missed <= allowed
    assert [r.to_dict() for r in result.requests] == [r.to_dict() for r in full.requests]
    assert result.summary == full.summary


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([20, 80, 300]), st.sampled_from([2, 8]), st.booleans(),
       st.booleans(), st.integers(1, 400), st.integers(1, 400), st.integers(0, 6), st.integers(0, 6),
       st.sampled_from(["event", "step"]), st.sampled_from([6000, 900]))
def test_a_verdict_only_run_met_says_so_without_a_result(seed: int, rate: int, seqs: int, chunked: bool,
                                                         on_demand: bool, ttft_ms: int, tpot_ms: int, ttft_allowed: int,
                                                         tpot_allowed: int, engine: str, kv_tokens: int) -> None:
    """Random workloads (a small pool too, where on-demand admission refuses some), both limits: with
    ``verdict_only`` a run raises RunMet exactly when nothing was refused and each limit has fewer misses than
    allowed (its counts the whole run's); RunStopped exactly when one has more; else the result is the whole
    run's."""
    reqs, cost, kw = _random_run(seed, rate, seqs, chunked, on_demand, engine, kv_tokens)
    limits = {"ttft_s": (Fraction(ttft_ms, 1000), ttft_allowed), "tpot_s": (Fraction(tpot_ms, 40000), tpot_allowed)}
    full = serve_continuous(reqs, cost, **kw)
    missed = {m: _misses(full, m, limit) for m, (limit, _) in limits.items()}
    refused = full.summary.rejected
    try:
        result = serve_continuous(reqs, cost, stop_on_misses=limits, verdict_only=True, **kw)
    except RunStopped:
        assert any(missed[m] > allowed for m, (_, allowed) in limits.items())
        return
    except RunMet as met:
        assert not refused and all(missed[m] < allowed for m, (_, allowed) in limits.items())
        assert met.missed == missed and met.peak_running == full.summary.peak_running
        return
    assert refused or any(missed[m] == allowed for m, (_, allowed) in limits.items())
    assert result.summary == full.summary


def test_a_verdict_only_run_by_hand_and_refused_by_name() -> None:
    """Five requests at t = 0 on one sequence: first tokens 1, 4, 7, 10, 13 s (UnitCostModel: 1 s a step, 3 steps
    each). A 5 s TTFT limit: three miss. Allowed 4: met (RunMet, three misses); allowed 3: the count is at the
    allowance, the result is built; allowed 2: stopped. A bad flag, or one without stop_on_misses: refused."""
    def serve(allowed: int, **kw: Any) -> Any:
        return serve_continuous(_five(), UnitCostModel(), max_num_seqs=1, stop_on_misses={"ttft_s": (5, allowed)},
                                **kw)

    assert [r.first_token_s for r in serve(3, verdict_only=True).requests] == [1, 4, 7, 10, 13]
    with pytest.raises(RunMet) as met:
        serve(4, verdict_only=True)
    assert met.value.missed == {"ttft_s": 3} and met.value.peak_running == 1
    with pytest.raises(RunStopped):
        serve(2, verdict_only=True)
    assert serve(4).summary.ttft.p99 > 5  # without verdict_only the same run gives its result
    for bad in ("yes", 1, None):
        with pytest.raises(InvalidValueError, match="verdict_only"):
            serve(4, verdict_only=bad)
    with pytest.raises(InvalidValueError, match="verdict_only.*needs stop_on_misses"):
        serve_continuous(_five(), UnitCostModel(), verdict_only=True)


@pytest.mark.parametrize("refusing", [dict(max_model_len=50), dict(kv_pool=KVPool(60))], ids=["max_model_len", "kv"])
def test_a_request_refused_on_arrival_misses_both_limits_at_the_end(refusing: dict[str, Any]) -> None:
    """Stop 31 (break-it): three requests at 0, 1, 2 s, the second's 100 + 5 tokens over max_model_len 50 (or a pool
    of 60 one-token blocks): refused on arrival. The run ends at 7 s, before 1 + 100 s, so the boundaries' count
    never reached it: the end counts it, a miss of both limits (allowed 0 stops the run, as the whole run's
    percentiles would miss), and verdict_only gives the result (one refused), not RunMet."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=10, output_tokens=5),
            Request(id=1, arrival_s=1, prompt_tokens=100, output_tokens=5),
            Request(id=2, arrival_s=2, prompt_tokens=10, output_tokens=5)]
    for metric in ("ttft_s", "tpot_s"):
        with pytest.raises(RunStopped) as stopped:
            serve_continuous(reqs, UnitCostModel(), stop_on_misses={metric: (100, 0)}, **refusing)
        assert stopped.value.missed == 1
        result = serve_continuous(reqs, UnitCostModel(), stop_on_misses={metric: (100, 5)}, verdict_only=True,
                                  **refusing)
        assert result.summary.rejected == 1 and result.summary.completed == 2


def test_replicas_count_their_misses_together() -> None:
    """Two round-robin replicas of one sequence each, the five requests: each replica serves its own first come
    first served (first tokens 1, 1, 4, 4, 7); a 3 s limit: three miss over both replicas; allowed 2 stops,
    though neither replica alone has more than two."""
    kw: dict[str, Any] = dict(data_parallel_size=2, max_num_seqs=1)
    full = serve_replicas(_five(), UnitCostModel(), **kw).whole
    assert [r.ttft_s for r in full.requests] == [1, 1, 4, 4, 7]
    with pytest.raises(RunStopped):
        serve_replicas(_five(), UnitCostModel(), stop_on_misses={"ttft_s": (3, 2)}, **kw)
    same = serve_replicas(_five(), UnitCostModel(), stop_on_misses={"ttft_s": (3, 3)}, **kw).whole
    assert [r.to_dict() for r in same.requests] == [r.to_dict() for r in full.requests]


def test_disaggregated_stops_on_the_prefill_pool() -> None:
    """A prefill instance of one sequence at a time (unit steps, so prefills end at 1 .. 5) and a transfer of
    4 / 2 + 1 = 3 s: TTFTs 4 .. 8. The prefill pool's first tokens (1 .. 5) are a lower bound: a 3 s limit
    sees two misses there (4, 5) of the five the whole run has; allowed 1 stops, allowed 4 runs to the end."""
    unit = Pool(UnitCostModel(), kv_bytes_per_token=1, max_num_seqs=1)
    link = TransferLink(bandwidth=2, latency=1)
    full = serve_disaggregated(_five(), unit, unit, link=link)
    assert [r.ttft_s for r in full.requests] == [4, 5, 6, 7, 8]
    with pytest.raises(RunStopped):
        serve_disaggregated(_five(), unit, unit, link=link, stop_on_misses={"ttft_s": (3, 1)})
    same = serve_disaggregated(_five(), unit, unit, link=link, stop_on_misses={"ttft_s": (3, 4)})
    assert [r.to_dict() for r in same.requests] == [r.to_dict() for r in full.requests]


@pytest.mark.parametrize("bad", [{"e2e_s": (1, 0)}, {"ttft_s": (0, 1)}, {"ttft_s": (1, -1)}, {"tpot_s": 1}, {},
                                 (1, 0)])
def test_bad_stop_refused_by_name(bad: Any) -> None:
    with pytest.raises(InvalidValueError, match="stop_on_misses"):
        serve_continuous(_five(), UnitCostModel(), stop_on_misses=bad)


def test_ttft_stop_refused_where_the_first_token_comes_with_the_kv() -> None:
    """A disaggregated decode pool's requests arrive with their first token (kv_transferred): no TTFT to watch
    there, refused by name; a TPOT limit is taken."""
    reqs = _five()
    for serve in (serve_continuous, serve_replicas):
        with pytest.raises(InvalidValueError, match="stop_on_misses"):
            serve(reqs, UnitCostModel(), kv_transferred=True, stop_on_misses={"ttft_s": (1, 0)})
    same = serve_continuous(reqs, UnitCostModel(), kv_transferred=True, stop_on_misses={"tpot_s": (10, 0)})
    full = serve_continuous(reqs, UnitCostModel(), kv_transferred=True)
    assert [r.to_dict() for r in same.requests] == [r.to_dict() for r in full.requests]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=40), st.integers(0, 100), st.integers(0, 20))
def test_misses_allowed_is_sound_and_tight(values: list[int], q: int, limit: int) -> None:
    """More values over the limit than misses_allowed: the percentile is over it. Exactly that many, the
    largest of them limit + 1 and every other value 0: within it at an integer rank (the percentile is then
    v[floor h], which is 0)."""
    n = len(values)
    m = P.misses_allowed(n, q)
    if sum(v > limit for v in values) > m:
        assert P.interpolated_percentile(values, q) > limit
    edge = [0] * (n - m) + [limit + 1] * m
    if (n - 1) * q % 100 == 0:
        assert P.interpolated_percentile(edge, q) <= limit


REQUESTS = list(synthetic_workload(60, arrival="poisson", rate=40, input_len=1500, output_len=64,
                                   input_distribution="uniform", output_distribution="uniform",
                                   range_ratio=Fraction(9, 10), seed=3).requests)
GRID: dict[str, Any] = {"tensor_parallel_size": [2], "data_parallel_size": [1, 2], "prefill_decode": ["off", "1:1"],
                        "max_num_seqs": [2, 64], "chunked_prefill": [True, False]}


@pytest.mark.parametrize("slo", [dict(slo_ttft_s=Fraction(1, 10)), dict(slo_tpot_s=Fraction(12, 1000)),
                                 dict(slo_ttft_s=Fraction(3, 10), slo_tpot_s=Fraction(1, 100), slo_e2e_s=2)],
                         ids=lambda s: "+".join(s))
def test_the_rate_searchs_verdict_is_the_whole_runs(slo: dict[str, Any]) -> None:
    """Every configuration of a grid (one engine, replicas, a split) at rate factors 1/2 to 8: the verdict-only run
    (stopped early, percentiles compared without being computed) meets the SLO exactly when the whole run does,
    and some of them stop."""
    result = plan(MODEL, REQUESTS, axes=GRID, **slo)
    context, stopped, compared = result.context, 0, 0
    for record in result.records:
        setup = P._setup(context, record["config"])
        if isinstance(setup, tuple) or P.prune(context, setup, context.requests) is not None:
            continue
        for scale in (Fraction(1, 2), 2, 8):
            requests = scale_rate(context.requests, scale)
            whole = P._simulate(context, setup, requests)
            quick = P._simulate(context, setup, requests, verdict_only=True)
            assert quick["meets"] == whole["meets"], (record["key"], scale, whole)
            stopped += bool(quick.get("stopped"))
            compared += 1
    assert compared >= 10 and stopped >= 3


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([20, 300]), st.sampled_from([2, 8]), st.booleans(), st.booleans(),
       st.sampled_from(["event", "step"]), st.sampled_from([1, 2]))
def test_a_run_without_itl_differs_only_in_the_itl(seed: int, rate: int, seqs: int, chunked: bool, on_demand: bool,
                                                  engine: str, replicas: int) -> None:
    """``itl=False`` (the plan's runs): no inter-token gaps kept, and everything else the same, request by request
    and field by field, on both clocks, both prefill modes and admissions (preemptions included: on-demand in a
    small pool), one engine or two replicas."""
    import attrs

    reqs, cost, kw = _random_run(seed, rate, seqs, chunked, on_demand, engine, 3000)

    def serve(**more: Any) -> Any:
        if replicas == 1:
            return serve_continuous(reqs, cost, **kw, **more)
        return serve_replicas(reqs, cost, data_parallel_size=replicas, **kw, **more).whole

    full, quick = serve(), serve(itl=False)
    assert full.summary.itl is not None and quick.summary.itl is None
    assert quick.summary == attrs.evolve(full.summary, itl=None)
    assert [r.to_dict() for r in quick.requests] == [r.to_dict() for r in full.requests]


@pytest.mark.parametrize("bad", ["no", 0, None])
def test_a_bad_itl_is_refused_by_name(bad: Any) -> None:
    for serve in (serve_continuous, serve_replicas):
        with pytest.raises(InvalidValueError, match="itl"):
            serve(_five(), UnitCostModel(), itl=bad)


@pytest.mark.parametrize("slo", [dict(slo_ttft_s=Fraction(1, 10)), dict(slo_e2e_s=Fraction(3, 2)),
                                 dict(slo_ttft_s=Fraction(3, 10), slo_e2e_s=2, percentile=50)],
                         ids=lambda s: "+".join(s))
def test_the_searchs_pruning_by_rate_factor_is_the_rules(slo: dict[str, Any]) -> None:
    """The rate search's rules (``_pruned_at``: the rate factors above which each lower bound exceeds its limit,
    counted by bisection) give :func:`_judge`'s verdict at every rate factor: on a sweep from 1/64 to 64 and at
    each factor where a bound crosses its limit (and just above it), where the percentile's interpolation is
    decided in full; both verdicts occur."""
    result = plan(MODEL, REQUESTS, axes=GRID, **slo)
    context, verdicts, judged = result.context, set(), [0]
    judge = P._judge

    def counted(*args: Any) -> Any:
        judged[0] += 1
        return judge(*args)

    for record in result.records:
        setup = P._setup(context, record["config"])
        if isinstance(setup, tuple):
            continue
        bounds = P._bounds(context, setup, context.requests)
        if isinstance(bounds, tuple):
            continue
        ceilings = P._ceilings(context, bounds)
        crossings = {t for above in (ceilings.ttft, ceilings.e2e) if above for t in above if 0 < t < 64}
        scales = {Fraction(2) ** Fraction(k, 4) for k in range(-24, 25)}
        scales |= crossings | {t * Fraction(1001, 1000) for t in crossings}
        for x in sorted(scales)[::max(1, len(scales) // 60)]:
            P._judge = counted  # the borderline case, judged in full, is counted
            try:
                fast = P._pruned_at(context, bounds, ceilings, x)
            finally:
                P._judge = judge
            assert fast == (P._judge(context, bounds, context.arrivals_at(x)) is not None), (
                record["key"], x)
            verdicts.add(fast)
    assert verdicts == {True, False} and judged[0] >= 1  # both verdicts, and the interpolated case reached


def test_counting_rate_factors_below_a_probe_is_exact_where_floats_tie() -> None:
    """``_count_below`` bisects on floats and decides exactly among values whose float is the probe's: 1/3 and 1/3 +
    10^-30 have one float, and a probe between them counts the first only; 0 and inf count as themselves."""
    tiny = Fraction(1, 10**30)
    values = sorted([0, 0, Fraction(1, 3), Fraction(1, 3) + tiny, Fraction(1, 3) + 2 * tiny, Fraction(1, 2), math.inf],
                    key=lambda v: (float(v), v))  # as _exceeds_above sorts them
    keys = [float(v) for v in values]
    assert keys[2] == keys[3] == keys[4]
    assert P._count_below(values, keys, Fraction(1, 3) + tiny / 2) == 3
    assert P._count_below(values, keys, Fraction(1, 3) + tiny) == 3
    assert P._count_below(values, keys, Fraction(1, 3) + 3 * tiny) == 5
    assert P._count_below(values, keys, Fraction(1, 3)) == 2
    assert P._count_below(values, keys, 0) == 0 and P._count_below(values, keys, 64) == 6
    for x in (Fraction(1, 3) - tiny, Fraction(1, 3) + tiny / 2, Fraction(2, 5), Fraction(1, 2) + tiny):
        assert P._count_below(values, keys, x) == sum(1 for v in values if v < x), x


def test_a_scaled_arrival_past_the_limit_is_refused_by_name() -> None:
    """The scaled copies skip the Request checks only for arrivals within MAX_ARRIVAL_S: a rate factor that pushes
    one past it is refused naming ``rate_scale``, the request and the limit; within it the copies equal evolved ones."""
    from roofline.sim.requests import MAX_ARRIVAL_S

    requests = [Request(id=0, arrival_s=0, prompt_tokens=4, output_tokens=2),
                Request(id=7, arrival_s=MAX_ARRIVAL_S // 2, prompt_tokens=4, output_tokens=2)]
    with pytest.raises(InvalidValueError, match=r"rate_scale.*request 7's arrival at 2e\+15 s, past 1e\+15 s"):
        scale_rate(requests, Fraction(1, 4))
    assert scale_rate(requests, Fraction(1, 2)) == [attrs.evolve(r, arrival_s=Fraction(r.arrival_s) * 2)
                                                    for r in requests]


def test_scale_rate_divides_every_arrival_exactly_and_keeps_the_rest() -> None:
    """Arrivals 0, 1, 3 s at 4x the rate: 0, 1/4, 3/4 s (a float factor as the exact value it holds: 0.5 is 1/2),
    ids, lengths and hashes unchanged; 1 gives the same Requests; a bad factor or item is refused by name."""
    requests = [Request(id=i, arrival_s=a, prompt_tokens=16, output_tokens=3, block_hashes=(i,),
                        hash_block_size=16)
                for i, a in enumerate((0, 1, 3))]
    fast = scale_rate(requests, 4)
    assert [r.arrival_s for r in fast] == [0, Fraction(1, 4), Fraction(3, 4)]
    assert [attrs.evolve(r, arrival_s=0) for r in fast] == [attrs.evolve(r, arrival_s=0) for r in requests]
    assert [r.arrival_s for r in scale_rate(requests, 0.5)] == [0, 2, 6]
    import numpy as np  # a numpy scalar as the exact value of its float (Fraction() refused np.float32)

    assert [r.arrival_s for r in scale_rate(requests, np.float32(0.5))] == [0, 2, 6]
    assert [r.arrival_s for r in scale_rate(requests, np.int64(3))] == [0, Fraction(1, 3), 1]
    with pytest.raises(InvalidValueError, match=r"rate_scale=array\(2\.\): expected one number, not an array"):
        scale_rate(requests, np.array(2.0))
    with pytest.raises(InvalidValueError, match=r"rate_scale=5e-324: puts request 1's arrival at 2\.02402e\+323 s"):
        scale_rate(requests, 5e-324)  # past a float: the message itself raised OverflowError
    assert all(a is b for a, b in zip(scale_rate(requests, 1), requests, strict=True))
    for bad, why in ((0, "must be > 0"), (-2, "must be > 0"), (float("inf"), "must be finite"),
                     (True, "expected a real number"), ("2", "expected a real number")):
        with pytest.raises(InvalidValueError, match=f"rate_scale.*{why}"):
            scale_rate(requests, bad)
    with pytest.raises(InvalidValueError, match=r"requests\[1\]"):
        scale_rate([requests[0], "x"], 2)


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(8)])
def test_a_searchs_pruning_at_the_given_rate_is_the_rules(scale: Fraction) -> None:
    """With ``search_rate`` a configuration's pruning at the given rate reads the search's rate factors (judged in
    full only for a pruned one's reason): each record's status, rule and reason are what :func:`prune` gives on
    the workload at that rate, at the trace's rate and 8x it, and both statuses occur."""
    result = plan(MODEL, REQUESTS, axes=GRID, slo_ttft_s=Fraction(1, 10), rate_scale=scale, search_rate=True)
    context, statuses = result.context, set()
    for record in result.records:
        setup = P._setup(context, record["config"])
        if isinstance(setup, tuple):
            continue
        why = P.prune(context, setup, scale_rate(context.requests, scale))
        expected = ("pruned", *why) if why is not None else ("simulated", None, None)
        assert (record["status"], record.get("rule"), record.get("reason")) == expected, record["key"]
        statuses.add(record["status"])
    assert statuses == {"pruned", "simulated"}
