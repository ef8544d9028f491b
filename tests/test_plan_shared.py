"""Runs shared across ``--max-num-seqs`` (docs/conventions.md, "Deployment search"): a run's peak of sequences
holding a slot, that a cap above it gives the same run, and that ``roofline plan``'s records with shared runs are
those of every configuration evaluated alone."""

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
from roofline.errors import RunStopped
from roofline.sim import (
    KVPool,
    Request,
    RooflineCostModel,
    UnitCostModel,
    serve_continuous,
    serve_replicas,
    serve_static,
    synthetic_workload,
)

P = importlib.import_module("roofline.plan")
MODEL = get_model("llama-3.1-8b")
COST = RooflineCostModel.for_deployment(Deployment(MODEL, get_accelerator("h100-sxm"), Parallelism(tensor=1)))


def _five() -> list[Request]:
    return [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=3) for i in range(5)]


def _same_run(a: Any, b: Any) -> bool:
    """Request by request and in every summary field but slot occupancy (over max_num_seqs x steps)."""
    return ([r.to_dict() for r in a.requests] == [r.to_dict() for r in b.requests]
            and attrs.evolve(a.summary, slot_occupancy=None) == attrs.evolve(b.summary, slot_occupancy=None))


def test_hand_worked_peaks() -> None:
    """Five requests at t = 0: a cap of 2 is reached (peak 2); a cap of 10 is not (all five at once, peak 5);
    static batches of 4 and 1 hold 4 rows; two round-robin replicas of cap 10 hold 3 and 2 (peak 3)."""
    assert serve_continuous(_five(), UnitCostModel(), max_num_seqs=2).summary.peak_running == 2
    assert serve_continuous(_five(), UnitCostModel(), max_num_seqs=10).summary.peak_running == 5
    assert serve_static(_five(), UnitCostModel(), batch_size=4).summary.peak_running == 4
    res = serve_replicas(_five(), UnitCostModel(), data_parallel_size=2, max_num_seqs=10)
    assert [part.summary.peak_running for part in res.replicas] == [3, 2] and res.whole.summary.peak_running == 3


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([20, 80, 300]), st.sampled_from([2, 5, 64]), st.booleans(),
       st.booleans(), st.sampled_from(["event", "step"]))
def test_a_cap_above_the_peak_gives_the_same_run(seed: int, rate: int, seqs: int, chunked: bool, on_demand: bool,
                                                 engine: str) -> None:
    """Random workloads, both prefill modes and admissions, both clocks: peak <= the cap; when below it, the
    caps peak + 1 and the largest allowed (10**6; chunked, the step budget) give the run request by request (the
    cap never stopped an admission)."""
    reqs = list(synthetic_workload(30, arrival="poisson", rate=rate, input_len=300, output_len=20,
                                   input_distribution="uniform", output_distribution="uniform",
                                   range_ratio=Fraction(9, 10), seed=seed).requests)
    kw: dict[str, Any] = dict(admission="on_demand" if on_demand else "reserve", engine=engine,
                              kv_pool=KVPool.tokens(6000))
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=512)
    run = serve_continuous(reqs, COST, max_num_seqs=seqs, **kw)
    peak = run.summary.peak_running
    assert 1 <= peak <= seqs
    if peak < seqs:
        for cap in (peak + 1, 512 if chunked else 10**6):  # chunked: the cap may not exceed the step budget
            assert _same_run(serve_continuous(reqs, COST, max_num_seqs=cap, **kw), run)


def test_a_stopped_run_says_its_peak_so_far() -> None:
    """One sequence at a time (cap 1): stopped on TTFT with its peak, 1. Cap 10: the first step admits all five,
    so the TPOT stop (every TPOT is 1 s per token against 0.5 s, none allowed) comes with a peak of 5."""
    with pytest.raises(RunStopped) as ttft:  # first tokens 1, 4, 7, 10, 13 against 3 s, 1 allowed
        serve_continuous(_five(), UnitCostModel(), max_num_seqs=1, stop_on_misses={"ttft_s": (Fraction(3), 1)})
    assert ttft.value.peak_running == 1
    with pytest.raises(RunStopped) as tpot:
        serve_continuous(_five(), UnitCostModel(), max_num_seqs=10, stop_on_misses={"tpot_s": (Fraction(1, 2), 0)})
    assert tpot.value.peak_running == 5


def _alone(result: Any, config: dict[str, Any]) -> dict[str, Any]:
    return P.evaluate(result.context, config)


def test_plan_records_with_shared_runs_are_those_evaluated_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid of four caps (8 binds at T = 2, 64 and 256 do not), both budgets, the rate search: every record
    equals that configuration evaluated with no run shared and its rate search started cold (but for its count
    of runs, fewer in all from the answer of the configuration before); runs were shared, and the simulations run
    plus the answers shared are the verdicts the records count."""
    reqs = list(synthetic_workload(40, arrival="poisson", rate=40, input_len=1500, output_len=64,
                                   input_distribution="uniform", output_distribution="uniform",
                                   range_ratio=Fraction(9, 10), seed=3).requests)
    axes = {"tensor_parallel_size": [1, 2], "max_num_seqs": [2, 8, 64, 256], "max_num_batched_tokens": [2048, 4096]}
    kw: dict[str, Any] = dict(axes=axes, slo_ttft_s=Fraction(3, 10), slo_tpot_s=Fraction(1, 100), search_rate=True)
    simulations = [0]
    real = P._simulate

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        simulations[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(P, "_simulate", counted)
    result = plan(MODEL, reqs, **kw)
    verdicts = result.simulated + sum(r["max_rate"]["runs"] for r in result.records)
    assert result.shared_runs > 0 and simulations[0] + result.shared_runs == verdicts
    monkeypatch.setattr(P, "_simulate", real)
    peaks = {(r["config"]["tensor_parallel_size"], r["config"]["max_num_batched_tokens"], r["config"]["max_num_seqs"]):
             r["at_rate"]["peak_running"] for r in result.records if r["status"] == "simulated"}
    for budget in (2048, 4096):  # T = 2 (T = 1 at caps 2 and 8 is pruned by the rate rule, T = 2 at cap 2 too)
        assert peaks[2, budget, 8] == 8 and peaks[2, budget, 64] == peaks[2, budget, 256] == 25  # 8 binds
    hinted = cold = 0
    for record in result.records:  # the same answers; a search started at the answer before it runs fewer
        mine = {k: v for k, v in record.items() if k != "cost"}
        mine["max_rate"] = {k: v for k, v in mine["max_rate"].items() if k not in ("requests_per_s_per_gpu", "runs")}
        alone = P.evaluate(result.context, record["config"])
        hinted, cold = hinted + record["max_rate"]["runs"], cold + alone["max_rate"].pop("runs")
        assert mine == alone, record["key"]
    assert hinted < cold
    assert result.to_dict()["shared_runs"] == result.shared_runs
    two = plan(MODEL, reqs, jobs=2, **kw)
    assert two.to_dict() == result.to_dict()  # a family is one task: the same sharing on every executor


def test_families_group_by_everything_but_the_cap_largest_first() -> None:
    """Two T x two caps: two families, each from 256 down; a split is a family of its own per cap."""
    configs = P._grid({"tensor_parallel_size": [1, 2], "max_num_seqs": [16, 256], "max_num_batched_tokens": [2048]},
                      {})
    groups = P._families(configs)
    assert [[(c["tensor_parallel_size"], c["max_num_seqs"]) for c in g] for g in groups] == [
        [(1, 256), (1, 16)], [(2, 256), (2, 16)]]
    split = P._grid({"tensor_parallel_size": [1], "max_num_seqs": [16, 256], "max_num_batched_tokens": [2048],
                     "prefill_decode": ["1:1"]}, {})
    assert [len(g) for g in P._families(split)] == [1, 1]


def test_evaluate_keeps_no_workload_after_it_returns() -> None:
    """The public :func:`evaluate` drops the workloads its rate search made (a worker's search keeps them across
    configurations); the record is the plan's."""
    requests = [Request(id=i, arrival_s=Fraction(i, 4), prompt_tokens=64 + i, output_tokens=16) for i in range(40)]
    result = plan(MODEL, requests, axes={"tensor_parallel_size": [2], "max_num_seqs": [64]}, slo_ttft_s=Fraction(1, 2),
                  slo_tpot_s=Fraction(1, 20), search_rate=True)
    P._forget_workloads()
    record = P.evaluate(result.context, result.records[0]["config"])
    mine = result.records[0]
    assert record["at_rate"] == mine["at_rate"] and record["max_rate"]["scale"] == mine["max_rate"]["scale"]
    assert record["max_rate"]["runs"] == mine["max_rate"]["runs"] >= 2
    assert P._WORKLOADS == {} and P._WORKLOADS_OF == []


# --------------------------------------------------------------------------- the rate search's lattice and hints


def test_the_lattice_of_rate_factors_by_hand() -> None:
    """At 5 %: N = 16 (2^(1/16) = 1.0443 <= 1.05; 2^(1/8) = 1.0905 is not), from 1: x(0) = 1, x(16) = 2 exactly,
    the ends 1/64 and 64 at -96 and 96. From 3: x(0) = 3, the last point below 64 is 3 x 2^(70/16) = 62.25, and
    64 is x(71). At the finest tolerance, 1e-4: N = 8,192."""
    n, kmin, kmax, x = P._lattice(Fraction(1), Fraction(1, 20))
    assert (n, kmin, kmax) == (16, -96, 96)
    assert (x(0), x(16), x(-96), x(96)) == (1, 2, Fraction(1, 64), 64)
    assert float(x(8)) == pytest.approx(2 ** 0.5, rel=1e-9)  # a Fraction of denominator <= 2^20
    n, kmin, kmax, x = P._lattice(Fraction(3), Fraction(1, 20))
    assert (n, kmax, x(0), x(kmax)) == (16, 71, 3, 64)
    assert float(x(70)) == pytest.approx(3 * 2 ** (70 / 16), rel=1e-9) and float(x(70)) == pytest.approx(62.25, 1e-4)
    assert float(x(kmin)) == 1 / 64 and float(x(kmin + 1)) > 1 / 64
    assert P._lattice(Fraction(1), P.MIN_RATE_TOLERANCE)[0] == 8192
    assert P._lattice(Fraction(64), Fraction(1, 20))[2] == 0  # the start is the top


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([Fraction(1), Fraction(3), Fraction(1, 5), Fraction(64)]),
       st.sampled_from([Fraction(1, 20), Fraction(1, 10), Fraction(1, 100)]), st.floats(1 / 128, 128),
       st.one_of(st.none(), st.floats(1 / 100, 100)), st.booleans(), st.booleans())
def test_a_hinted_rate_search_finds_the_cold_ones_answer(start: Fraction, tolerance: Fraction, threshold: float,
                                                         hint: float | None, top: bool, bottom: bool) -> None:
    """On a verdict that falls as the rate rises (meets iff x <= threshold), the search from any hint (a parent's
    answer; none met, or all) gives the cold search's answer, a bracket of consecutive lattice points, in at most
    2 log2(N) + distance / N + 4 runs (steps of 1, 2, 4, ... up to N away from the hint, then bisection)."""
    context = attrs.evolve(_context_of(), rate_tolerance=tolerance)
    monkey = pytest.MonkeyPatch()

    def meets(context: Any, setup: Any, scale: Any, runs: list[int], *rest: Any) -> bool:
        runs[0] += 1
        return bool(scale <= threshold)

    monkey.setattr(P, "_meets_at", meets)
    try:
        cold = P._rate_search(context, None, start, start <= threshold, None, ("fit", "stub"))
        shared = P._SharedRuns()
        shared.hint = (None if hint is None else {"scale": None} if bottom and top else
                       {"scale": hint, "bracket_high": None} if top else {"scale": hint, "bracket_high": 2 * hint})
        warm = P._rate_search(context, None, start, start <= threshold, shared, ("fit", "stub"))
    finally:
        monkey.undo()
    assert {k: v for k, v in warm.items() if k != "runs"} == {k: v for k, v in cold.items() if k != "runs"}
    n, kmin, kmax, x = P._lattice(start, tolerance)
    if cold["scale"] is not None and cold["bracket_high"] is not None:
        assert cold["scale"] <= threshold < cold["bracket_high"]
        assert cold["bracket_high"] / cold["scale"] <= 1 + tolerance
    index = P._hint_index(shared.hint, n, start, kmin, kmax)
    if index is not None:
        answer = kmax if cold["bracket_high"] is None else kmin - 1 if cold["scale"] is None else \
            P._hint_index(cold, n, start, kmin, kmax)
        assert warm["runs"] <= 2 * math.log2(n) + abs(index - answer) / n + 4


def _context_of() -> Any:
    reqs = [Request(id=i, arrival_s=Fraction(i, 10), prompt_tokens=100, output_tokens=10) for i in range(10)]
    return plan(MODEL, reqs, axes={"tensor_parallel_size": [1]}, slo_ttft_s=1).context


def test_a_resumed_rate_search_starts_where_the_whole_one_did(tmp_path: Any) -> None:
    """Stopped after three configurations of two families of three caps and two budgets, the resumed search's
    records are the whole search's, field by field, the count of each rate search's runs too: a configuration
    whose parent was read back (the next cap; the next budget's first) starts from that record's answer."""
    reqs = list(synthetic_workload(40, arrival="poisson", rate=40, input_len=1500, output_len=64,
                                   input_distribution="uniform", output_distribution="uniform",
                                   range_ratio=Fraction(9, 10), seed=3).requests)
    kw: dict[str, Any] = dict(axes={"tensor_parallel_size": [2], "max_num_seqs": [8, 64, 256],
                                    "max_num_batched_tokens": [2048, 4096]},
                              slo_ttft_s=Fraction(3, 10), slo_tpot_s=Fraction(1, 100), search_rate=True, jobs=1)
    whole = plan(MODEL, reqs, **kw)
    parents = P._parents([r["config"] for r in whole.records])
    assert sum(p is not None for p in parents.values()) == 5  # two caps after each first; 4096's first after 2048's
    out, seen = tmp_path / "p.jsonl", []

    def stop_after_three(record: dict[str, Any]) -> None:
        seen.append(record)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plan(MODEL, reqs, out=out, progress=stop_after_three, **kw)
    resumed = plan(MODEL, reqs, out=out, **kw)
    assert resumed.resumed == 3
    assert [r["key"] for r in resumed.records] == [r["key"] for r in whole.records]
    assert [r["max_rate"] for r in resumed.records] == [r["max_rate"] for r in whole.records]
    assert any(r["max_rate"]["runs"] != P.evaluate(whole.context, r["config"])["max_rate"]["runs"]
               for r in whole.records)  # the hints changed some counts: the equality above needed the seeds
