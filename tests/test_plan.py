"""``roofline plan`` and :func:`roofline.plan`: the percentile, the pruning rules (sound: every pruned
configuration also fails when simulated), the plan equal to brute force, executors, resume, bad input."""

from __future__ import annotations

import importlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _text import unwrapped
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import get_model, plan
from roofline.cli import main
from roofline.errors import InvalidValueError
from roofline.sim import Request, scale_rate, synthetic_workload

P = importlib.import_module("roofline.plan")  # the module (``roofline.plan`` is the function)
MODEL = get_model("llama-3.1-8b")
AXES: dict[str, Any] = {"tensor_parallel_size": [1, 2, 3], "max_num_seqs": [2, 64],
                        "max_num_batched_tokens": [32, 2048], "chunked_prefill": [True, False],
                        "admission": ["reserve", "on-demand"]}
SLOS: list[dict[str, Any]] = [dict(slo_tpot_s=Fraction(4, 1000)), dict(slo_ttft_s=Fraction(40, 1000)),
                              dict(slo_e2e_s=Fraction(4, 5)),
                              dict(slo_ttft_s=Fraction(3, 10), slo_tpot_s=Fraction(1, 100))]


def _workload(n: int = 60, rate: int = 40, seed: int = 3) -> list[Request]:
    return list(synthetic_workload(n, arrival="poisson", rate=rate, input_len=1500, output_len=64,
                                   input_distribution="uniform", output_distribution="uniform",
                                   range_ratio=Fraction(9, 10), seed=seed).requests)


REQUESTS = _workload()


# --------------------------------------------------------------------------- the percentile


def test_interpolated_percentile_hand_worked() -> None:
    """numpy's linear rule by hand: h = (n - 1) q / 100; [15, 20, 35, 40, 50] at 40: h = 1.6, 20 + 0.6 x 15 = 29."""
    assert P.interpolated_percentile([15, 20, 35, 40, 50], 40) == 29
    assert P.interpolated_percentile([1, 2, 3, 4], 50) == Fraction(5, 2)
    assert P.interpolated_percentile([Fraction(1, 3)], 99) == Fraction(1, 3)
    assert P.interpolated_percentile([5, 1], 100) == 5
    with pytest.raises(InvalidValueError, match="q"):
        P.interpolated_percentile([1], 101)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=40), st.integers(0, 100))
def test_interpolated_percentile_is_numpys(values: list[int], q: int) -> None:
    """Exact on ints; numpy.percentile (linear) agrees to rounding."""
    assert float(P.interpolated_percentile(values, q)) == pytest.approx(float(np.percentile(values, q)), rel=1e-12,
                                                                          abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.integers(0, 100), st.integers(-1, 51))
def test_percentile_exceeds_is_the_percentile_compared(values: list[int], q: int, limit: int) -> None:
    assert P.percentile_exceeds(values, q, limit) == (P.interpolated_percentile(values, q) > limit)


def test_queue_bounds_hand_worked() -> None:
    """S = 1, t_floor = 1, all at t = 0, outputs 3, 1, 2: request 1 waits for request 0's 3 tokens (3 + 1 = 4),
    request 2 for the 1 + 3 smallest... the two smallest of (3, 1): 1 + 3 = 4, so 4 + 1 = 5."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=o) for i, o in enumerate([3, 1, 2])]
    assert P._queue_bounds(reqs, 1, 1) == [1, 4, 5]
    assert P._queue_bounds(reqs, 2, 1) == [1, 1, Fraction(3, 2)]  # S = 2: request 2 after the smallest, O = 1


# --------------------------------------------------------------------------- soundness and brute force


def _context(**slo: Any) -> Any:
    return plan(MODEL, REQUESTS, axes={"tensor_parallel_size": [1]}, **slo).context


def _simulated_anyway(context: Any, record: dict[str, Any]) -> dict[str, Any] | None:
    """A record's configuration simulated without pruning (None: it cannot even be built or served)."""
    setup = P._setup(context, record["config"])
    if isinstance(setup, tuple):
        return None
    serve = setup.serve
    if serve["chunked"] and serve["max_num_batched_tokens"] < serve["max_num_seqs"]:
        return None  # the scheduler refuses it, as vLLM does
    return P._simulate(context, setup, scale_rate(context.requests, context.rate_scale))


@pytest.mark.parametrize("slo", SLOS, ids=lambda s: "+".join(s))
def test_every_pruned_configuration_fails_when_simulated(slo: dict[str, Any]) -> None:
    """The rules are sound: each configuration a rule drops, simulated anyway, misses the SLO."""
    result = plan(MODEL, REQUESTS, axes=AXES, **slo)
    assert sum(result.pruned.values()) > len(result.records) // 2  # the grid exercises the rules
    for record in result.records:
        if record["status"] == "pruned":
            sim = _simulated_anyway(result.context, record)
            assert sim is None or not sim["meets"], (record["key"], record["rule"], sim)


def test_the_kv_limited_queue_rule_is_sound() -> None:
    """40 requests (P = 100, O = 200) at t = 0 in a pool of about two requests' lifetime KV (utilization 0.1898:
    80 MB left by the weights, 19 blocks of 16 tokens each): the queue term counts the two that run, not
    max_num_seqs = 256; request 39 waits for 38 x 200 / 2 tokens of steps >= 4.79 ms, 18 s > 1 s. Pruned, and
    simulated anyway it fails."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=100, output_tokens=200) for i in range(40)]
    result = plan(MODEL, reqs, axes={"tensor_parallel_size": [1], "max_num_batched_tokens": [2048]},
                  slo_ttft_s=1, utilization=Fraction(1898, 10000))
    (record,) = result.records
    setup = P._setup(result.context, record["config"])
    assert not isinstance(setup, tuple)
    assert setup.pool.capacity_blocks // setup.pool.lifetime_blocks(100, 200) == 2
    assert record["rule"] == "rate"
    sim = _simulated_anyway(result.context, record)
    assert sim is not None and not sim["meets"] and sim["ttft_s"] > 10


def test_the_grid_exercises_every_rule() -> None:
    fired = {rule for slo in SLOS for rule, n in plan(MODEL, REQUESTS, axes=AXES, **slo).pruned.items() if n}
    assert fired == set(P.RULES)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10**6), st.integers(5, 80), st.sampled_from([1, 3, 8]), st.integers(2, 60), st.integers(3, 12),
       st.sampled_from([50, 90, 99]))
def test_pruning_sound_on_random_workloads(seed: int, rate: int, seqs: int, ttft_ms: int, tpot_ms: int,
                                           q: int) -> None:
    reqs = _workload(20, rate, seed)
    result = plan(MODEL, reqs, axes={"tensor_parallel_size": [1, 2], "max_num_seqs": [seqs],
                                     "chunked_prefill": [True, False], "max_num_batched_tokens": [2048, 4096]},
                  slo_ttft_s=Fraction(ttft_ms, 1000), slo_tpot_s=Fraction(tpot_ms, 1000),
                  slo_e2e_s=Fraction(ttft_ms * 20, 1000), percentile=q)
    for record in result.records:
        if record["status"] == "pruned":
            sim = _simulated_anyway(result.context, record)
            assert sim is None or not sim["meets"], (record["key"], record["rule"], sim)


def _brute_force(result: Any) -> tuple[Any, tuple[str, ...]]:
    """Every configuration simulated (none pruned): the winner's key and the front, ranked as the plan ranks."""
    records = []
    for record in result.records:
        sim = _simulated_anyway(result.context, record)
        r = dict(record, status="simulated" if sim else "pruned", at_rate=sim)
        records.append(r)
    feasible = [r for r in records if r["at_rate"] and r["at_rate"]["meets"]]
    best = min(feasible, key=lambda r: (r["gpus"], r["at_rate"]["tpot_s"] or 0, r["at_rate"]["ttft_s"], r["key"]),
               default=None)
    return (None if best is None else best["key"]), P.pareto_front(records)


@pytest.mark.parametrize("slo", SLOS, ids=lambda s: "+".join(s))
def test_plan_equals_brute_force(slo: dict[str, Any]) -> None:
    """Same winner, same front, with and without pruning (the front is over configurations meeting the SLO)."""
    result = plan(MODEL, REQUESTS, axes=AXES, **slo)
    winner, front = _brute_force(result)
    assert (None if result.winner is None else result.winner["key"]) == winner
    assert result.front == front


def test_winner_hand_checked_and_prices_change_it() -> None:
    """At 40 rps of 1,500-token prompts one H100 (T = 1, 2,048-token steps) has TPOT p99 32 ms: it wins at a
    40 ms limit; at 20 ms T = 2 wins (14 ms); at 4 ms T = 1 is pruned (every step >= 4.79 ms, the weights'
    16.06 GB over 3.35 TB/s); prices make the dearer card lose a tie on GPUs."""
    grid = {"tensor_parallel_size": [1, 2]}
    easy = plan(MODEL, REQUESTS, axes=grid, slo_tpot_s=Fraction(40, 1000))
    assert easy.winner is not None
    assert easy.winner["key"] == "h100-sxm/tp1/pp1/dp1/colocated/noep/seqs256/mbt2048/chunked/noprefix/kvauto/reserve"
    assert easy.winner["at_rate"]["tpot_s"] == pytest.approx(0.0322, abs=5e-4)
    hard = plan(MODEL, REQUESTS, axes=grid, slo_tpot_s=Fraction(20, 1000))
    assert hard.winner is not None
    assert hard.winner["key"] == "h100-sxm/tp2/pp1/dp1/colocated/noep/seqs256/mbt2048/chunked/noprefix/kvauto/reserve"
    one = next(r for r in hard.records if r["config"]["tensor_parallel_size"] == 1)
    floor = P._floor_time(P._setup(hard.context, one["config"]).cost)
    assert float(floor) == pytest.approx(MODEL.weight_bytes / 3.35e12, rel=2e-3)
    tight = plan(MODEL, REQUESTS, axes={"tensor_parallel_size": [1]}, slo_tpot_s=Fraction(4, 1000))
    assert tight.pruned["tpot"] == 2 and tight.winner is None and tight.simulated == 0
    priced = plan(MODEL, REQUESTS, axes={"tensor_parallel_size": [1], "accelerator": ["h100-sxm", "h200"]},
                  slo_tpot_s=Fraction(40, 1000), prices={"h100-sxm": 3, "h200": 2})
    assert priced.winner is not None
    assert priced.winner["config"]["accelerator"] == "h200-sxm" and priced.winner["cost"] == 2


def test_expert_parallel_axis_prices_the_ep_step_and_drops_a_dense_model_by_name() -> None:
    """The --enable-expert-parallel axis: a dense model with it on is skipped by name (the same deployment as
    off; it was pruned by the fit rule, which proves nothing there); a MoE model's EP configuration is priced by
    the EP cost model (the all-to-alls: another step time than tensor parallelism inside the experts) and its
    vllm serve line says so."""
    dense = plan(MODEL, REQUESTS[:5], axes={"tensor_parallel_size": [2], "enable_expert_parallel": [True, False]},
                 slo_tpot_s=Fraction(1))
    on = next(r for r in dense.records if r["config"]["enable_expert_parallel"])
    assert on["status"] == "skipped" and on["rule"] is None and "enable_expert_parallel" in on["reason"]
    moe = get_model("mixtral-8x7b")
    result = plan(moe, REQUESTS[:5], axes={"tensor_parallel_size": [2], "enable_expert_parallel": [True, False],
                                           "accelerator": ["h100-sxm"]}, slo_tpot_s=Fraction(1))
    setups = {r["config"]["enable_expert_parallel"]: P._setup(result.context, r["config"]) for r in result.records}
    from roofline import Deployment, Parallelism, get_accelerator
    from roofline.sim import RooflineCostModel

    ep = Deployment(moe, get_accelerator("h100-sxm"), Parallelism(tensor=2, expert=True))
    assert setups[True].cost.decode_time(8, 8000) == RooflineCostModel.for_deployment(ep).decode_time(8, 8000)
    assert setups[True].cost.decode_time(8, 8000) != setups[False].cost.decode_time(8, 8000)
    record = next(r for r in result.records if r["config"]["enable_expert_parallel"])
    assert "--enable-expert-parallel" in P.vllm_serve_command(moe, record)
    assert "/ep/" in record["key"]


def test_rate_search_brackets_to_its_tolerance() -> None:
    """The highest rate factor met, and the next one up (the bracket) missed, within 1 + tolerance."""
    result = plan(MODEL, REQUESTS, axes={"tensor_parallel_size": [1], "max_num_batched_tokens": [2048]},
                  slo_ttft_s=Fraction(1, 10), search_rate=True, rate_tolerance=Fraction(1, 10))
    (record,) = result.records
    mr = record["max_rate"]
    assert mr["bracket_high"] / mr["scale"] <= 1.1 + 1e-12
    context, setup = result.context, P._setup(result.context, record["config"])
    assert P._meets_at(context, setup, Fraction(mr["scale"]), [0])
    assert not P._meets_at(context, setup, Fraction(mr["bracket_high"]), [0])


# --------------------------------------------------------------------------- more than one scheduler


#: D replicas, P virtual engines and disaggregated splits (with the combinations not modelled, skipped by name).
MULTI: dict[str, Any] = {"tensor_parallel_size": [1, 2], "pipeline_parallel_size": [1, 2],
                         "data_parallel_size": [1, 2], "prefill_decode": ["off", "1:1", "2:1"],
                         "max_num_seqs": [2, 64], "chunked_prefill": [True, False]}


def _kind(config: dict[str, Any]) -> str:
    if config["prefill_decode"] != "off":
        return "split"
    return "dp" if config["data_parallel_size"] > 1 else "pp" if config["pipeline_parallel_size"] > 1 else "one"


@pytest.mark.parametrize("slo", SLOS, ids=lambda s: "+".join(s))
def test_pruning_stays_sound_with_more_than_one_scheduler(slo: dict[str, Any]) -> None:
    """Every configuration of the replica, pipeline and split axes a rule drops, simulated anyway (serve_replicas,
    serve_disaggregated), misses the SLO; the plan equals brute force over the same grid."""
    result = plan(MODEL, REQUESTS, axes=MULTI, **slo)
    assert result.skipped == 112  # of 192: P = 2 beside D = 2 (48), a split beside P or D > 1 (64)
    for record in result.records:
        if record["status"] == "pruned":
            sim = _simulated_anyway(result.context, record)
            assert sim is None or not sim["meets"], (record["key"], record["rule"], sim)
    winner, front = _brute_force(result)
    assert (None if result.winner is None else result.winner["key"]) == winner
    assert result.front == front


def test_every_rule_fires_on_the_multi_scheduler_axes() -> None:
    """The grid above exercises the rules where more than one scheduler serves: fit, tpot and ttft on replicas,
    virtual engines and splits, the queue term (rate) on round-robin replicas."""
    fired: dict[str, set[str]] = {}
    for slo in SLOS:
        for record in plan(MODEL, REQUESTS, axes=MULTI, **slo).records:
            if record["status"] == "pruned":
                fired.setdefault(_kind(record["config"]), set()).add(record["rule"])
    assert fired["dp"] == set(P.RULES)
    assert fired["pp"] >= {"fit", "tpot", "ttft"} and fired["split"] >= {"fit", "tpot", "ttft"}


@pytest.mark.parametrize("axes", [{"data_parallel_size": [2]}, {"prefill_decode": ["1:1"]}], ids=["dp2", "pd1:1"])
def test_the_queue_term_per_scheduler_is_sound(axes: dict[str, Any]) -> None:
    """40 requests (P = 100, O = 200) at t = 0, a pool of 38 blocks of 16 per scheduler (utilization 0.1898). Two
    round-robin replicas: each serves 20 of them, two at a time (19 blocks each), so its last waits for
    18 x 200 / 2 tokens of steps >= 4.79 ms (8.6 s > 1 s). A 1:1 split: the prefill instance serves all 40 as
    one-token requests, five at a time (7 blocks each), so request 39 waits (35 / 5 + 1) x 4.79 ms = 38 ms
    > 30 ms. Both pruned by the queue term (rule rate); each, simulated anyway, fails."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=100, output_tokens=200) for i in range(40)]
    limit = Fraction(3, 100) if "prefill_decode" in axes else Fraction(1)
    result = plan(MODEL, reqs, axes={"tensor_parallel_size": [1], "max_num_batched_tokens": [2048], **axes},
                  slo_ttft_s=limit, utilization=Fraction(1898, 10000))
    (record,) = result.records
    setup = P._setup(result.context, record["config"])
    assert not isinstance(setup, tuple) and setup.pool.capacity_blocks == 38
    floor = P._floor_time(setup.cost)
    last = P._queue_term(setup, reqs, floor)[-1]
    assert last == (floor * (18 * 200 / Fraction(2) + 1) if "data_parallel_size" in axes else floor * 8)
    assert record["rule"] == "rate"
    sim = _simulated_anyway(result.context, record)
    assert sim is not None and not sim["meets"]


def test_virtual_engines_have_no_queue_term() -> None:
    """P = 2 virtual engines are routed least-requests, which depends on the run: the queue term is 0."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=100, output_tokens=200) for i in range(40)]
    result = plan(MODEL, reqs, axes={"tensor_parallel_size": [1], "pipeline_parallel_size": [2],
                                     "max_num_batched_tokens": [2048]}, slo_ttft_s=Fraction(1))
    setup = P._setup(result.context, result.records[0]["config"])
    assert not isinstance(setup, tuple) and (setup.schedulers, setup.router) == (2, "least-requests")
    assert P._queue_term(setup, reqs, P._floor_time(setup.cost)) == [0] * 40


def test_replicas_pipeline_and_split_count_every_gpu_and_skip_by_name() -> None:
    """GPUs = T x P x D, or (NP + ND) x T; the combinations not modelled are skipped with their reason."""
    result = plan(MODEL, REQUESTS[:10], axes={"tensor_parallel_size": [2], "pipeline_parallel_size": [1, 2],
                                              "data_parallel_size": [1, 3], "prefill_decode": ["off", "1:2"],
                                              "max_num_batched_tokens": [2048]},
                  slo_tpot_s=Fraction(1))
    by = {(r["config"]["pipeline_parallel_size"], r["config"]["data_parallel_size"], r["config"]["prefill_decode"]): r
          for r in result.records}
    assert {k: r["gpus"] for k, r in by.items() if r["status"] == "simulated"} == {
        (1, 1, "off"): 2, (2, 1, "off"): 4, (1, 3, "off"): 6, (1, 1, "1:2"): 6}
    skipped = {k: r["reason"] for k, r in by.items() if r["status"] == "skipped"}
    assert sorted(skipped) == [(1, 3, "1:2"), (2, 1, "1:2"), (2, 3, "1:2"), (2, 3, "off")]
    assert all("not modelled" in why for why in skipped.values()) and result.skipped == 4
    assert "beside data-parallel replicas" in skipped[(2, 3, "off")]
    prefix = plan(MODEL, REQUESTS[:10], axes={"tensor_parallel_size": [2], "prefill_decode": ["1:1"],
                                              "enable_prefix_caching": [False, True], "max_num_batched_tokens": [2048]},
                  slo_tpot_s=Fraction(1))
    (rec,) = [r for r in prefix.records if r["config"]["enable_prefix_caching"]]
    assert rec["status"] == "skipped" and "prefix caching" in rec["reason"]
    assert prefix.winner is not None and not prefix.winner["config"]["enable_prefix_caching"]


def test_round_robin_replicas_are_the_parts_served_alone() -> None:
    """D = 2 round robin: the TTFT and TPOT percentiles over the two halves j mod 2, each served alone by
    serve_continuous on one replica's pool (docs/conventions.md, "Data-parallel replicas")."""
    from roofline.sim import serve_continuous

    result = plan(MODEL, REQUESTS, axes={"tensor_parallel_size": [1], "data_parallel_size": [2],
                                         "max_num_batched_tokens": [2048]}, slo_ttft_s=Fraction(1))
    (record,) = result.records
    setup = P._setup(result.context, record["config"])
    assert not isinstance(setup, tuple)
    done: list[Any] = []
    for part in (REQUESTS[0::2], REQUESTS[1::2]):
        done += serve_continuous(part, setup.cost, kv_pool=setup.pool, prefill="chunked",
                                 max_num_batched_tokens=2048, max_model_len=setup.max_model_len).requests
    assert record["at_rate"]["ttft_s"] == float(P.interpolated_percentile([r.ttft_s for r in done], 99))
    assert record["at_rate"]["tpot_s"] == float(P.interpolated_percentile([r.tpot_s for r in done], 99))


def test_a_split_is_served_by_serve_disaggregated_on_the_nics() -> None:
    """A 1:2 split of T = 2 on H100 SXM: the pools as roofline simulate builds them (Pool.for_deployment, the
    NICs' link), the same TTFT percentile; the winner prints one vllm serve line per pool."""
    from roofline import Deployment, Parallelism, get_accelerator
    from roofline.sim import Pool, TransferLink, serve_disaggregated

    result = plan(MODEL, REQUESTS, axes={"tensor_parallel_size": [2], "prefill_decode": ["1:2"],
                                         "max_num_batched_tokens": [2048]}, slo_ttft_s=Fraction(1))
    (record,) = result.records
    h100 = get_accelerator("h100-sxm")
    d = Deployment(MODEL, h100, Parallelism(tensor=2))
    prefill = Pool.for_deployment(d, instances=1, prefill="chunked", max_num_batched_tokens=2048)
    decode = Pool.for_deployment(d, instances=2)
    sim = serve_disaggregated(REQUESTS, prefill, decode, link=TransferLink.between(h100, h100),
                              max_model_len=MODEL.max_position_embeddings)
    assert record["at_rate"]["ttft_s"] == float(P.interpolated_percentile([r.ttft_s for r in sim.requests], 99))
    assert record["gpus"] == 6 and result.winner is record
    line = ("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 --max-num-seqs 256 "
            "--max-num-batched-tokens 2048 --enable-chunked-prefill --no-enable-prefix-caching "
            """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'""")
    assert P.vllm_serve_command(MODEL, record).splitlines() == [
        "# prefill pool: 1 instance", line, "# decode pool: 2 instances", line]


def test_cli_prints_the_parallel_flags_of_the_winner(capsys: pytest.CaptureFixture) -> None:
    args = ["plan", "--limit", "40", "--slo-tpot", "3", "--tensor-parallel-size", "2", "--data-parallel-size", "1",
            "--data-parallel-size", "2", "--pipeline-parallel-size", "1", "--pipeline-parallel-size", "2",
            "--max-num-batched-tokens", "2048"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 100
    assert "4 configurations: 0 pruned by the bound (none), 3 simulated, 1 skipped (not modelled)" in out
    assert "--tensor-parallel-size 2 --data-parallel-size 2" in out or "--pipeline-parallel-size 2" in out


# --------------------------------------------------------------------------- executors and resume


SMALL: dict[str, Any] = {"tensor_parallel_size": [1, 2], "max_num_batched_tokens": [512, 2048]}


def _answer(result: Any) -> dict[str, Any]:
    d = result.to_dict()
    d.pop("resumed")
    d.pop("shared_runs")  # fewer shared when some of a family were read back
    return d


def test_local_processes_and_dask_agree() -> None:
    """The same grid on two local processes and on a two-worker local Dask cluster: identical answers."""
    pytest.importorskip("distributed")  # the test extra installs it: this never skips under the README's command
    kw: dict[str, Any] = dict(axes=SMALL, slo_ttft_s=Fraction(1, 5), slo_tpot_s=Fraction(1, 100), search_rate=True)
    local = plan(MODEL, REQUESTS[:30], jobs=2, **kw)
    dask = plan(MODEL, REQUESTS[:30], cluster="local:2", **kw)
    here = plan(MODEL, REQUESTS[:30], **kw)
    assert _answer(local) == _answer(dask) == _answer(here)


def test_a_local_dask_cluster_starts_when_its_default_dashboard_port_is_taken() -> None:
    """Port 8787 held by another process (another cluster, a notebook): the plan still runs, with no warning
    (the fault: Dask's fallback warning failed the run under pytest's warnings-as-errors)."""
    pytest.importorskip("distributed")  # the test extra installs it: this never skips under the README's command
    import socket
    import warnings

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("", 8787))
    except OSError:
        pass  # already held by someone else: the condition under test holds either way
    else:
        holder.listen()
    try:
        kw: dict[str, Any] = dict(axes=SMALL, slo_ttft_s=Fraction(1, 5), slo_tpot_s=Fraction(1, 100))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dask = plan(MODEL, REQUESTS[:10], cluster="local:1", **kw)
        assert _answer(dask) == _answer(plan(MODEL, REQUESTS[:10], **kw))
    finally:
        holder.close()


def test_an_interrupted_search_resumes_without_recomputing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "plan.jsonl"
    kw: dict[str, Any] = dict(axes=SMALL, slo_ttft_s=Fraction(1, 5), out=out)
    fresh = plan(MODEL, REQUESTS[:30], **{**kw, "out": None})
    seen: list[str] = []

    def stop_after_two(record: dict[str, Any]) -> None:
        seen.append(record["key"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plan(MODEL, REQUESTS[:30], progress=stop_after_two, **kw)
    assert len(out.read_text().splitlines()) == 2  # the finished ones were kept
    evaluated: list[str] = []
    real = P._evaluate
    def counted(c: Any, config: dict[str, Any], shared: Any = None) -> dict[str, Any]:
        evaluated.append(P.key_of(config))
        return real(c, config, shared)

    monkeypatch.setattr(P, "_evaluate", counted)
    resumed = plan(MODEL, REQUESTS[:30], **kw)
    assert sorted(evaluated) == sorted(set(r["key"] for r in fresh.records) - set(seen))
    assert resumed.resumed == 2 and _answer(resumed) == _answer(fresh)
    evaluated.clear()
    plan(MODEL, REQUESTS[:30], **kw)
    assert evaluated == []  # all done: nothing recomputed


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="the workers see the patched evaluate only when forked")
def test_a_stopped_local_search_keeps_each_finished_configuration_of_a_family_in_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-j 2, two families of three caps, one configuration (TP 2, 32 sequences) that never ends: the search stopped
    once the other family and TP 2's first cap are done keeps those four (the fault: a family was one task, its
    finished records written only with the whole family, so TP 2's first was lost), stops its workers instead of
    waiting for the one in flight, and a resumed search evaluates only the last two."""
    import time

    out = tmp_path / "plan.jsonl"
    kw: dict[str, Any] = dict(axes={"tensor_parallel_size": [1, 2], "max_num_seqs": [16, 32, 64],
                                    "max_num_batched_tokens": [2048]},
                              slo_ttft_s=Fraction(1, 5), out=out)
    fresh = plan(MODEL, REQUESTS[:20], **{**kw, "out": None})
    real = P._evaluate

    def stuck(c: Any, config: dict[str, Any], shared: Any = None) -> dict[str, Any]:
        if config["tensor_parallel_size"] == 2 and config["max_num_seqs"] == 32:
            time.sleep(600)
        return real(c, config, shared)

    seen: list[str] = []

    def stop_at_four(record: dict[str, Any]) -> None:
        seen.append(record["key"])
        if len(seen) == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(P, "_evaluate", stuck)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        plan(MODEL, REQUESTS[:20], jobs=2, progress=stop_at_four, **kw)
    assert time.monotonic() - start < 300  # the stuck worker was stopped, not waited for
    kept = {json.loads(line)["key"] for line in out.read_text().splitlines() if line.strip()}
    assert kept == set(seen) and len(kept) == 4
    assert {k for k in kept if "/tp2/" in k} == {next(k for k in kept if "/tp2/" in k)}
    assert any("/tp2/" in k and "seqs64" in k for k in kept)
    evaluated: list[str] = []

    def counted(c: Any, config: dict[str, Any], shared: Any = None) -> dict[str, Any]:
        evaluated.append(P.key_of(config))
        return real(c, config, shared)

    monkeypatch.setattr(P, "_evaluate", counted)
    resumed = plan(MODEL, REQUESTS[:20], **kw)
    assert sorted(evaluated) == sorted(set(r["key"] for r in fresh.records) - kept)
    assert resumed.resumed == 4 and _answer(resumed) == _answer(fresh)


def test_out_of_another_search_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "plan.jsonl"
    plan(MODEL, REQUESTS[:10], axes={"tensor_parallel_size": [1]}, slo_ttft_s=1, out=out)
    with pytest.raises(InvalidValueError, match="other inputs"):
        plan(MODEL, REQUESTS[:10], axes={"tensor_parallel_size": [1]}, slo_ttft_s=2, out=out)


# --------------------------------------------------------------------------- the command


def test_cli_table_json_csv_plot(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["plan", "--limit", "40", "--slo-ttft", "500", "--slo-tpot", "20", "--tensor-parallel-size", "1",
            "--tensor-parallel-size", "3", "--max-num-batched-tokens", "2048"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 100
    assert "1 pruned by the bound (fit 1), 1 simulated" in out
    assert "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 1" in out
    csv_path, png = tmp_path / "r.csv", tmp_path / "front.png"
    assert main([*args, "--json", "--csv", str(csv_path), "--plot", str(png)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["winner"] == "h100-sxm/tp1/pp1/dp1/colocated/noep/seqs256/mbt2048/chunked/noprefix/kvauto/reserve"
    assert d["pruned"] == {"fit": 1, "tpot": 0, "ttft": 0, "rate": 0} and d["objective"] == "gpus"
    assert csv_path.read_text().splitlines()[1].startswith("1,h100-sxm/tp1/")
    assert png.read_bytes()[:4] == b"\x89PNG"


def _status(argv: list[str]) -> int:
    """The exit status of the command line (argparse's refusals exit from within)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(("argv", "message"), [
    (["--pipeline-parallel-size", "0"], "--pipeline-parallel-size='0': expected an integer >= 1"),
    (["--data-parallel-size", "two"], "--data-parallel-size='two': expected an integer >= 1"),
    (["--prefill-decode", "1:0"], "--prefill-decode='1:0': expected NP:ND"),
    (["--prefill-decode", "3"], "--prefill-decode='3': expected NP:ND"),
    (["--router", "least-kv"], "unrecognized arguments: --router"),
    (["--accelerator", "h100-sxm", "--price", "b200=3"], "--price='b200': is not an accelerator searched"),
    (["--accelerator", "h100-sxm", "--accelerator", "h200", "--price", "h200=3"], "no price given"),
    (["--slo-ttft", "0"], "--slo-ttft='0': must be > 0"),
    (["--slo-tpot", "-5"], "--slo-tpot='-5': must be > 0"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size='0'"),
    (["--admission", "greedy"], "expected one of reserve, on-demand"),
    (["--enable-chunked-prefill", "maybe"], "expected on or off"),
    (["--cluster", "udp://x"], "--cluster='udp://x': expected tcp://HOST:PORT or local:N"),
    (["--cluster", "local:100000"], "--cluster='local:100000': expected local:N with N in 1..1,024 workers"),
    (["--cluster", "local:0"], "--cluster='local:0': expected local:N with N in 1..1,024 workers"),
    (["--cluster", "local:\u00b2"], "--cluster='local:\u00b2': expected local:N with N in 1..1,024 workers"),
    (["--cluster", "local:\u0661"], "--cluster='local:\u0661': expected local:N with N in 1..1,024 workers"),
    (["--cluster", "tcp://[::1:8786"], "--cluster='tcp://[::1:8786': expected tcp://HOST:PORT\n"),
    (["--price", "h100-sxm=2", "--price", "h100=3"],
     "--price='h100': given twice ('h100-sxm' is the same accelerator, h100-sxm)"),
    (["--kv-cache-dtype", "int3"], "--kv-cache-dtype='int3': unknown dtype; known: float32"),
    (["--max-concurrency", "4"], "--max-concurrency=4: closed-loop clients are not modelled by roofline plan"),
    (["--max-concurrency", "4", "--rate-scale", "2"], "--max-concurrency=4: closed-loop clients are not modelled"),
    (["--slo-ttft", "100", "--slo-percentile", "101"], "--slo-percentile=101: must be <= 100"),
    (["--tensor-parallel-size", "1", "--max-num-batched-tokens", "2048", "--prefill-decode", "1:1",
      "--enable-prefix-caching", "on"], "error: the grid: every configuration is skipped (not modelled): prefix "
     "caching in disaggregated pools is not modelled (serve_disaggregated has none)\n"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    full = ["plan", "--limit", "5", *argv]
    if not any(a.startswith("--slo") for a in argv):
        full += ["--slo-ttft", "100"]
    assert _status(full) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_no_slo_and_an_empty_grid_are_refused(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--limit", "5"]) == 2
    assert "give at least one of --slo-ttft" in capsys.readouterr().err
    with pytest.raises(InvalidValueError, match="empty grid"):
        plan(MODEL, REQUESTS, axes={"tensor_parallel_size": []}, slo_ttft_s=1)
    with pytest.raises(InvalidValueError, match="unknown axis"):
        plan(MODEL, REQUESTS, axes={"pipeline_stages": [2]}, slo_ttft_s=1)


def test_out_never_overwrites_an_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,20,5\n")
    assert main(["plan", "--trace", str(trace), "--slo-ttft", "100", "--out", str(trace)]) == 2
    assert "--out" in capsys.readouterr().err and trace.read_text().startswith("arrival_s")


# --------------------------------------------------------------------------- break-it findings mended (stop 21)


@pytest.mark.parametrize(("axis", "value", "reason"), [
    ("pipeline_parallel_size", "2", "expected an integer"),
    ("pipeline_parallel_size", 0, "must be >= 1"),
    ("pipeline_parallel_size", 2.0, "expected an integer"),
    ("pipeline_parallel_size", None, "expected an integer"),
    ("data_parallel_size", True, "expected an integer"),
    ("prefill_decode", (1, 1), "expected a string"),
    ("prefill_decode", None, "expected a string"),
    ("prefill_decode", "1:0", "expected NP:ND"),
    ("chunked_prefill", "on", "expected True or False"),
    ("kv_cache_dtype", "int3", "unknown dtype; known: float32"),
])
def test_api_axis_values_are_refused_up_front_by_axis(axis: str, value: Any, reason: str) -> None:
    """Findings 4, 10: refused before any configuration is built, naming the axis and the value as given."""
    with pytest.raises(InvalidValueError, match=reason) as exc:
        plan(MODEL, REQUESTS[:5], slo_tpot_s=Fraction(1, 20), axes={axis: [value]})
    assert exc.value.field == axis and exc.value.value is value


_OK: dict[str, Any] = dict(slo_tpot_s=Fraction(1, 20), axes={"tensor_parallel_size": [1]})


@pytest.mark.parametrize(("kwargs", "field", "reason"), [
    (dict(axes={"tensor_parallel_size": 1}), "tensor_parallel_size", "expected a list or tuple of values"),
    (dict(axes={"accelerator": "h100-sxm"}), "accelerator", "a str is not a list of values"),
    (dict(axes=[("tensor_parallel_size", [1])]), "axes", "expected a dict of axis name"),
    (dict(progress=5), "progress", "expected a callable"),
    (dict(search_rate="yes"), "search_rate", "expected True or False"),
    (dict(search_rate=1), "search_rate", "expected True or False"),
    (dict(flops="bogus"), "flops", "expected 'exact' or '2p'"),
    (dict(block_size=0), "block_size", "must be >= 1"),
    (dict(block_size=-16), "block_size", "must be >= 1"),
    (dict(block_size=16.0), "block_size", "expected an integer"),
    (dict(utilization=2), "utilization", "must be in \\(0, 1\\]"),
    (dict(utilization=0), "utilization", "must be > 0"),
    (dict(jobs=1025), "jobs", "expected an integer in 1..1,024"),
    (dict(cluster="local:5000"), "cluster", "expected local:N with N in 1..1,024"),
    (dict(cluster="tcp://[::1:8786"), "cluster", "expected tcp://HOST:PORT$"),
    (dict(prices={"h100-sxm": 2, "h100": 3}), "--price", "given twice \\('h100-sxm' is the same accelerator"),
])
def test_api_inputs_refused_up_front_by_name(kwargs: dict[str, Any], field: str, reason: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Break-it findings 2-5 of roofline plan: each refused by its field before anything is evaluated, never a
    TypeError, a hang or a record pruned ``fit`` for an input that is no configuration."""
    monkeypatch.setattr(P, "_evaluate", lambda *a: pytest.fail("the search ran"))
    with pytest.raises(InvalidValueError, match=reason) as exc:
        plan(MODEL, REQUESTS[:5], **{**_OK, **kwargs})
    assert exc.value.field == field


def test_a_grid_all_skipped_is_refused_naming_why() -> None:
    """Finding 7: nothing modelled is no answer, not "no configuration meets the SLO"."""
    axes: dict[str, Any] = {"tensor_parallel_size": [1], "prefill_decode": ["1:1"], "enable_prefix_caching": [True],
            "max_num_batched_tokens": [2048]}
    with pytest.raises(InvalidValueError, match=r"every configuration is skipped \(not modelled\): prefix caching "
                       r"in disaggregated pools is not modelled") as exc:
        plan(MODEL, REQUESTS[:5], slo_tpot_s=1, axes=axes)
    assert exc.value.field == "axes" and exc.value.value == "1 configuration"


def _edit(record: dict[str, Any], path: str, value: Any) -> None:
    *head, last = path.split(".")
    for k in head:
        record = record[k]
    if value is _DROP:
        del record[last]
    else:
        record[last] = value


_DROP = object()


@pytest.mark.parametrize(("line", "path", "value", "fault"), [
    (1, "at_rate.tpot_s", -1, "at_rate tpot_s -1: expected a number >= 0 or null"),
    (1, "at_rate.ttft_s", "x", "at_rate ttft_s 'x': expected a number >= 0 or null"),
    (1, "at_rate.e2e_s", float("inf"), "not a JSON record of one"),  # Infinity: not strict JSON
    (1, "at_rate.meets", 1, "at_rate meets 1"),
    (1, "at_rate.rejected", -2, "at_rate rejected -2"),
    (1, "at_rate", _DROP, "a simulated record without GPUs or its metrics (at_rate)"),
    (1, "gpus", 0, "gpus 0"),
    (1, "status", "done", "status 'done'; known: skipped, pruned, simulated"),
    (1, "config.tensor_parallel_size", "1", "config tensor_parallel_size='1'"),
    (1, "config.max_num_seqs", _DROP, "its config is not one value per axis"),
    (1, "key", "h100-sxm/tp9", "its key is not its configuration's"),
    (2, "rule", "slow", "rule 'slow'; known: fit, tpot, ttft, rate"),
    (2, "reason", 3, "a pruned record without its reason"),
    (2, "reason", _DROP, "a pruned record without its reason"),
    (1, "gpus", 7, "gpus 7, but its configuration holds 1"),
    (1, "extra", 1, "unknown field 'extra'"),
    (1, "at_rate.extra", 1, "unknown field at_rate 'extra'"),
    (1, "at_rate.peak_running", -1, "at_rate peak_running -1"),
    (1, "at_rate.ttft_s", None, "at_rate ttft_s None, with 5 of 5 requests handed back"),
    (1, "at_rate.rejected", 6, "at_rate rejected 6, of 5 requests"),
])
def test_an_edited_resume_file_is_refused_by_line(tmp_path: Path, capsys: pytest.CaptureFixture, line: int,
                                                  path: str, value: Any, fault: str) -> None:
    """Finding 1: a record read back from --out is checked against the shape evaluate writes; one edited is
    refused by its line, exit 2, one stderr line (never TPOT -1,000.0 ms, a TypeError or a KeyError)."""
    out = tmp_path / "p.jsonl"
    argv = [*_W, "--tensor-parallel-size", "3", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["result"]["status"] for r in rows] == ["simulated", "pruned"]  # tp1, then tp3 (fit)
    _edit(rows[line - 1]["result"], path, value)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _status(argv) == 2
    err = capsys.readouterr().err
    assert err == f"roofline plan: error: --out='{out}': line {line} is not a plan result ({fault}): give another " \
                  "file\n"


def test_a_resume_record_whose_verdict_is_not_its_metrics_or_a_line_twice_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A break-it finding: resume took a record's ``meets`` as written (an edited ``false`` made another winner)
    and a configuration's second line silently replaced its first. Now the verdict must be the record's own
    metrics against the SLO, and a configuration has one line."""
    out = tmp_path / "p.jsonl"
    argv = [*_W, "--tensor-parallel-size", "3", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    at = rows[0]["result"]["at_rate"]
    assert at["meets"] is True and at["rejected"] == 0 and at["tpot_s"] < 0.05  # the SLO: TPOT <= 50 ms
    for edit, fault in (({"meets": False}, "at_rate meets false, but every metric is within its limit"),
                        ({"tpot_s": 0.06}, "at_rate meets true, but tpot_s is over its limit"),
                        ({"rejected": 1}, "at_rate meets true, but requests were rejected")):
        edited = json.loads(json.dumps(rows))
        edited[0]["result"]["at_rate"].update(edit)
        out.write_text("".join(json.dumps(r) + "\n" for r in edited))
        assert _status(argv) == 2
        assert f"line 1 is not a plan result ({fault})" in capsys.readouterr().err
    out.write_text("".join(json.dumps(r) + "\n" for r in [*rows, rows[0]]))
    assert _status(argv) == 2
    assert "line 3 is not a plan result (its configuration is line 1's too)" in capsys.readouterr().err
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(argv) == 0  # the file as written resumes


def test_a_resumed_rate_search_record_is_checked_and_a_sound_one_taken(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """The rate search's fields read back: a sound file resumes (2 read back), a negative rate is refused."""
    out = tmp_path / "p.jsonl"
    argv = [*_W, "--tensor-parallel-size", "3", "--search-rate", "--out", str(out)]
    assert main(argv) == 0 and main(argv) == 0
    assert ("1 pruned by the bound (fit 1), 1 simulated; 2 of the 2 read back from --out, not evaluated again"
            in unwrapped(capsys.readouterr().out))
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    rate = rows[0]["result"]["max_rate"]["requests_per_s"]
    rows[0]["result"]["max_rate"]["requests_per_s"] = -3.0
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _status(argv) == 2
    assert "line 1 is not a plan result (max_rate requests_per_s -3.0: expected a number >= 0 or null)" in \
        capsys.readouterr().err
    rows[0]["result"]["max_rate"]["requests_per_s"] = 2 * rate  # not its scale's: made up
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _status(argv) == 2
    assert (f"line 1 is not a plan result (max_rate requests_per_s {2 * rate!r}, but its scale gives {rate!r})"
            in capsys.readouterr().err)
    line = out.read_text().splitlines()[1]
    out.write_text(line.replace('{"key": ', '{"key": "x", "key": ', 1) + "\n")  # a key twice: the last won
    assert _status(argv) == 2
    assert "line 1 is not a plan result (not a JSON record of one)" in capsys.readouterr().err


def test_fit_prunes_say_why_once_per_reason(capsys: pytest.CaptureFixture) -> None:
    """Finding 4: the table says why each fit prune happened (T = 3 does not divide Llama 3.1 8B's 32 heads)."""
    assert main([*_W, "--tensor-parallel-size", "3", "--tensor-parallel-size", "5"]) == 0
    out = capsys.readouterr().out
    assert "  x fit (1): tensor_parallel_size=3: num_attention_heads=32 is not divisible by 3\n" in out
    assert "  x fit (1): tensor_parallel_size=5: num_attention_heads=32 is not divisible by 5\n" in out


def test_output_clash_names_both_flags_and_max_concurrency_is_not_in_help(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Finding 8: the two flags naming one file; finding 6: --max-concurrency never works here, so --help
    does not offer it."""
    x = tmp_path / "X.png"
    assert _status([*_W, "--plot", str(x), "--csv", str(x)]) == 2
    assert capsys.readouterr().err == (f"roofline plan: error: --plot='{x}': names the same file as --csv: --out, "
                                       "--csv and --plot must name different files\n")
    assert _status(["plan", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "[--max-concurrency" not in shown and "\n  --max-concurrency" not in shown


def test_api_axis_values_normalised_as_the_flag_reads_them() -> None:
    """``"OFF"`` is the CLI's off; a numpy integer is an integer (finding 10)."""
    axes = {"prefill_decode": ["OFF"], "pipeline_parallel_size": [np.int64(1)], "tensor_parallel_size": [1],
            "max_num_batched_tokens": [2048]}
    r = plan(MODEL, REQUESTS[:5], slo_tpot_s=1, axes=axes)
    assert [x["key"] for x in r.records] == ["h100-sxm/tp1/pp1/dp1/colocated/noep/seqs256/mbt2048/chunked/"
                                             "noprefix/kvauto/reserve"]


@pytest.mark.parametrize(("field", "value"), [("slo_tpot_s", True), ("slo_tpot_s", "0.05"),
                                              ("percentile", True), ("percentile", "99")])
def test_api_slo_not_a_number_refused(field: str, value: Any) -> None:
    """Findings 6, 10: a bool is not a number of seconds; a string is refused by roofline.errors."""
    kwargs: dict[str, Any] = {"slo_tpot_s": Fraction(1, 20), field: value}
    with pytest.raises(InvalidValueError, match="expected a real number"):
        plan(MODEL, REQUESTS[:5], axes={"tensor_parallel_size": [1]}, **kwargs)


def test_api_numpy_percentile_taken() -> None:
    """Finding 23: percentile=np.int64(99) is 99."""
    axes = {"tensor_parallel_size": [1], "max_num_batched_tokens": [2048]}
    a = plan(MODEL, REQUESTS[:5], slo_tpot_s=1, percentile=np.int64(99), axes=axes)
    assert a.context.percentile == 99 and a.winner is not None


def test_more_stages_than_layers_is_skipped_not_pruned() -> None:
    """Finding 30: P = 33 on a 32-layer model is not modelled (vLLM refuses it too), not "pruned (fit)"."""
    r = plan(MODEL, REQUESTS[:5], slo_tpot_s=1, axes={"tensor_parallel_size": [1], "max_num_batched_tokens": [2048],
                                                      "pipeline_parallel_size": [1, 33]})
    (rec,) = [x for x in r.records if x["config"]["pipeline_parallel_size"] == 33]
    assert MODEL.num_hidden_layers == 32
    assert rec["status"] == "skipped" and rec.get("rule") is None
    assert rec["reason"] == "pipeline_parallel_size=33: more stages than the model's 32 layers is not modelled"
    assert r.skipped == 1 and sum(r.pruned.values()) == 0


def test_more_replicas_than_modelled_are_skipped_and_a_huge_split_refused_by_its_flag(
        capsys: pytest.CaptureFixture) -> None:
    """Finding 20: --prefill-decode 100000:100000 names --prefill-decode; -dp 5000 is skipped by name."""
    assert _status(["plan", "--limit", "5", "--slo-tpot", "50", "--prefill-decode", "100000:100000"]) == 2
    err = capsys.readouterr().err
    assert "--prefill-decode='100000:100000': more than 4,096 instances in a pool are not modelled" in err
    assert err.count("\n") == 1
    r = plan(MODEL, REQUESTS[:5], slo_tpot_s=1, axes={"tensor_parallel_size": [1], "max_num_batched_tokens": [2048],
                                                      "data_parallel_size": [1, 5000]})
    (rec,) = [x for x in r.records if x["config"]["data_parallel_size"] == 5000]
    assert rec["status"] == "skipped" and "more than 4,096 replicas" in rec["reason"]


_W = ["plan", "--limit", "5", "--slo-tpot", "50", "--tensor-parallel-size", "1", "--max-num-batched-tokens", "2048"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--rate-tolerance", "0.1"], "--rate-tolerance=0.1: applies to the rate search (--search-rate)"),
    (["-j", "2", "--cluster", "local:1"], "-j=2: applies to local worker processes (without --cluster)"),
    (["--cluster", "tcp://nohost:99999"], "--cluster='tcp://nohost:99999': expected tcp://HOST:PORT with a port"),
    (["--price", "foo=1"], "--price: unknown accelerator 'foo'"),
    (["--search-rate", "--rate-scale", "1e15"], "--rate-scale=1000000000000000: the rate search covers 1/64 to 64"),
])
def test_flags_refused_by_name_before_the_search(extra: list[str], message: str, capsys: pytest.CaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Findings 12, 13, 14, 21, 33: one line, exit 2, the flag as typed and its value; nothing evaluated."""
    monkeypatch.setattr(P, "_evaluate", lambda *a: pytest.fail("the search ran"))
    assert _status([*_W, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_refused_connection_is_reported_at_once(capsys: pytest.CaptureFixture) -> None:
    """Finding 12: nothing listens on port 1: refused in well under Dask's 30 s connect timeout."""
    import socket
    import time

    with socket.socket() as s:  # a port bound and not listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        t0 = time.monotonic()
        assert _status([*_W, "--cluster", f"tcp://127.0.0.1:{port}"]) == 2
        assert time.monotonic() - t0 < 10
    assert "cannot connect:" in capsys.readouterr().err


def test_no_slo_message_names_the_three_flags(capsys: pytest.CaptureFixture) -> None:
    """Finding 21: no ``--slo-ttft=None``."""
    assert _status(["plan", "--limit", "5"]) == 2
    assert capsys.readouterr().err == ("roofline plan: error: no SLO given: give at least one of --slo-ttft, "
                                       "--slo-tpot, --slo-e2e (ms)\n")


def test_outputs_checked_before_the_search(tmp_path: Path, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Findings 9, 22, 29: a plot format matplotlib cannot write, a missing folder, an unrelated file in the way:
    refused by flag and path before anything is evaluated, and the file left as it was."""
    monkeypatch.setattr(P, "_evaluate", lambda *a: pytest.fail("the search ran"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    png = tmp_path / "old.png"
    png.write_text("not a png\n")
    cases = [(["--plot", str(notes)], f"--plot='{notes}': format 'txt' is not one roofline plan writes"),
             (["--csv", str(notes)], f"--csv='{notes}': exists and is not a plan's CSV"),
             (["--plot", str(png)], f"--plot='{png}': exists and is not a png plot"),
             (["--csv", str(tmp_path / "no" / "x.csv")], f"the folder {tmp_path / 'no'} does not exist"),
             (["--out", str(tmp_path / "no" / "x.jsonl")], f"--out='{tmp_path / 'no' / 'x.jsonl'}': the folder"),
             (["--plot", str(tmp_path)], "is a folder")]
    for extra, message in cases:
        assert _status([*_W, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (extra, err)
    assert notes.read_text() == "my notes\n" and png.read_text() == "not a png\n"


def test_csv_and_plot_rewrite_their_own_files_and_no_warning_when_nothing_meets(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A plan's own CSV and PNG are rewritten; nothing meeting the SLO draws no legend and warns nothing
    (finding 28); the header names the workload and the cost column's unit."""
    import warnings

    csv_path, png = tmp_path / "r.csv", tmp_path / "f.png"
    assert main([*_W, "--csv", str(csv_path), "--plot", str(png)]) == 0
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main([*_W, "--slo-tpot", "1e-9", "--csv", str(csv_path), "--plot", str(png)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and png.read_bytes()[:4] == b"\x89PNG"
    assert csv_path.read_text().splitlines()[0].startswith("rank,key,accelerator,")
    assert "  workload: trace azure_llm_2023_conv.csv.gz; 5 requests at 1x their rate\n" in out
    assert " cost GPUs " in out and "cost: GPUs (no --price)" in out
    assert max(map(len, out.splitlines())) <= 100


def test_a_large_max_rate_keeps_its_column_and_a_price_says_dollars(capsys: pytest.CaptureFixture) -> None:
    """Finding 33: a max req/s above 100,000 in 3 significant digits, the status column kept; with --price the
    cost column is ``cost $/hour``. The workload line names the generator."""
    argv = ["plan", "--model", "llama-3.2-1b", "--num-prompts", "20", "--random-input-len", "128",
            "--random-output-len", "32", "--request-rate", "1e5", "--slo-e2e", "100000", "--tensor-parallel-size", "1",
            "--max-num-batched-tokens", "2048", "--search-rate", "--price", "h100-sxm=2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    head = next(x for x in out.splitlines() if x.lstrip().startswith("#"))
    row = next(x for x in out.splitlines() if x.lstrip().startswith("1  "))
    assert " cost $/hour " in head and "$2.00" in row and row.endswith("  meets")
    rate = row.split()[-2]
    assert "e+" in rate and len(rate) <= 9
    assert "workload: generated (poisson at 100000.0/s; prompts fixed 128, outputs fixed 32; seed 0)" in out


def test_a_bad_percentile_names_the_apis_own_field() -> None:
    """plan(percentile=...) refuses by that name (it said slo_percentile, the command line's)."""
    for bad in (0, -1, 101, "99"):
        with pytest.raises(InvalidValueError) as err:
            plan(MODEL, REQUESTS[:2], axes={"tensor_parallel_size": [1]}, slo_ttft_s=1, percentile=bad)
        assert err.value.field == "percentile"


def test_a_max_rate_met_at_the_ceiling_reads_as_at_least(capsys: pytest.CaptureFixture) -> None:
    """Stop 27 (a new user): with a TPOT limit only, T = 2 meets it at every rate up to the search's ceiling
    (64x); its max req/s read as a measured highest rate. It now says ``>=`` (bracket_high is None), one that
    was bracketed keeps its plain figure, and the legend says what the column is."""
    argv = ["plan", "--model", "llama-3.1-8b", "--num-prompts", "200", "--request-rate", "20", "--slo-tpot", "20",
            "--tensor-parallel-size", "1", "--tensor-parallel-size", "2", "--accelerator", "h100",
            "--max-num-seqs", "256", "--max-num-batched-tokens", "8192", "--search-rate", "--json"]
    assert main(argv) == 0
    records = {r["config"]["tensor_parallel_size"]: r["max_rate"]
               for r in json.loads(capsys.readouterr().out)["results"]}
    assert records[2]["scale"] == 64.0 and records[2]["bracket_high"] is None
    assert records[1]["bracket_high"] is not None and records[1]["scale"] < 64.0
    assert main(argv[:-1]) == 0
    out = capsys.readouterr().out
    rows = {x.split()[1]: x.split() for x in out.splitlines() if x.lstrip()[:3] in ("1  ", "2  ")}
    assert rows["h100-sxm/tp2/seqs256/mbt8192"][-2] == f">={records[2]['requests_per_s']:,.0f}"
    assert rows["h100-sxm/tp1/seqs256/mbt8192"][-2] == f"{records[1]['requests_per_s']:,.2f}"
    assert "  max req/s: the highest rate found to meet the SLO (bracketed to 5%); >=: still met at the" in out
    assert max(map(len, out.splitlines())) <= 100
