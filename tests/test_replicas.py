"""Data-parallel replicas behind a router (roofline.sim.replicas; docs/conventions.md, "Data-parallel replicas").

Hand-worked routing cases (what the router sees at an arrival instant), round robin against the trace split and
served alone, the stretch clock against the step clock on the shipped and generated cost models (dense, MoE,
tensor parallel), conservation (each request handed back or refused once, KV never over any replica's pool), and
the refusals by name.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import Deployment, Parallelism, get_accelerator, get_model
from roofline.errors import InvalidValueError
from roofline.sim import (
    ROUTERS,
    ClosedLoop,
    KVPool,
    Percentiles,
    Request,
    RooflineCostModel,
    UnitCostModel,
    serve_continuous,
    serve_replicas,
)
from roofline.testing.compare import assert_same_results, same
from roofline.testing.strategies import cost_models, kv_pools, workloads

_ORACLE = settings.get_profile("simulation_oracle")

LLAMA = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
MIXTRAL = RooflineCostModel.for_model(get_model("mixtral-8x7b"), get_accelerator("h200-sxm"))
LLAMA_70B_TP4 = RooflineCostModel.for_model(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"),
                                            tensor_parallel_size=4)
SMALL = RooflineCostModel(weight_bytes=50, kv_bytes_per_token=3, flops_per_token=7, attention_flops_per_token=2,
                          bandwidth=10, peak_flops=30, overhead=Fraction(1, 10))
SMALL_MOE = RooflineCostModel(weight_bytes=40, kv_bytes_per_token=2, flops_per_token=9, attention_flops_per_token=1,
                              bandwidth=7, peak_flops=25, num_experts=8, experts_per_token=2, routed_expert_bytes=30)
SMALL_TP = RooflineCostModel(weight_bytes=40, kv_bytes_per_token=2, flops_per_token=9, attention_flops_per_token=1,
                             bandwidth=7, peak_flops=25, tensor_parallel_size=4, num_hidden_layers=2, hidden_size=8,
                             link_bandwidth=30, link_latency=Fraction(1, 100))
COSTS = cost_models(overhead=True) | st.sampled_from(
    [SMALL, SMALL_MOE, SMALL_TP, LLAMA, MIXTRAL, LLAMA_70B_TP4, UnitCostModel(decode=Fraction(2, 3), prefill=2)])
WORK = workloads(min_size=0, max_size=14, max_prompt_tokens=40, max_output_tokens=30)
ONE = UnitCostModel()  # every step 1 s


def r(i: int, t: Any, p: int, o: int) -> Request:
    return Request(id=i, arrival_s=t, prompt_tokens=p, output_tokens=o)


def options(data: st.DataObject, reqs: Any, size: int) -> dict[str, Any]:
    """serve_continuous's options for a drawn run: one pool or one per replica (tight ones preempt), reserve or
    on-demand admission, separate (with a budget) or chunked prefill, max_model_len."""
    pool = kv_pools(min_blocks=0, max_blocks=80, max_block_size=8, unlimited=None, tight_for=reqs)
    kv = data.draw(st.one_of(pool, st.lists(pool, min_size=size, max_size=size)))
    seqs = data.draw(st.integers(1, 6))
    kw: dict[str, Any] = dict(kv_pool=kv, max_num_seqs=seqs, admission=data.draw(st.sampled_from(["reserve",
                                                                                                  "on_demand"])),
                              max_model_len=data.draw(st.one_of(st.none(), st.integers(1, 80))),
                              enable_prefix_caching=data.draw(st.booleans()))
    if data.draw(st.booleans()):
        kw.update(prefill="chunked", max_num_batched_tokens=data.draw(st.integers(seqs, seqs + 60)))
    else:
        kw.update(max_prefill_tokens=data.draw(st.one_of(st.none(), st.integers(1, 120))))
    return kw


# ----------------------------------------------------------------------------- by hand


def test_round_robin_by_hand():
    """Two replicas, one sequence each: requests 0 and 2 share replica 0, so request 2 starts at 3 s."""
    reqs = [r(i, 0, 4, 3) for i in range(3)]
    res = serve_replicas(reqs, ONE, data_parallel_size=2, max_num_seqs=1)
    assert res.assignment == (0, 1, 0)
    assert [x.handed_back_s for x in res.whole.requests] == [3, 3, 6]
    assert [x.first_token_s for x in res.whole.requests] == [1, 1, 4]
    assert [(load.requests, load.completed, load.output_tokens, load.busy_s) for load in res.loads] == [
        (2, 2, 6, 6), (1, 1, 3, 3)]
    s = res.whole.summary
    assert (s.completed, s.output_tokens, s.makespan_s, s.busy_s, s.steps) == (3, 9, 6, 9, 9)
    assert res.gpus == 2 and res.output_tokens_per_s_per_gpu == Fraction(9, 6 * 2)
    assert s.ttft == Percentiles.of([1, 1, 4])


def test_least_requests_counts_a_hand_back_at_the_arrival_instant_and_not_one_in_flight():
    """Replica 0 runs request 0 until 5 s; replica 1 hands request 1 back at exactly 2 s, so request 2 arriving at
    2 s sees it free (a hand-back at t comes before the arrival at t) and goes there; request 2's only token comes
    at 3 s, so at 2.5 s replica 1 still has it outstanding: request 3 ties and goes to the lowest index."""
    reqs = [r(0, 0, 4, 5), r(1, 0, 4, 2), r(2, 2, 4, 1), r(3, Fraction(5, 2), 4, 1)]
    res = serve_replicas(reqs, ONE, data_parallel_size=2, router="least-requests")
    assert res.assignment == (0, 1, 1, 0)
    # request 3 is prefilled at the boundary at 3 s, [3, 4], and request 0's last two decodes follow it
    assert [x.handed_back_s for x in res.whole.requests] == [6, 2, 3, 4]
    for engine in ("event", "step"):
        assert serve_replicas(reqs, SMALL, data_parallel_size=2, router="least-requests", engine=engine).assignment \
            == serve_replicas(reqs, SMALL, data_parallel_size=2, router="least-requests", engine="step").assignment


def test_same_instant_arrivals_see_the_ones_before_as_outstanding():
    """Three requests at 0 s on two replicas: the second sees the first outstanding (not yet admitted), the third
    ties 1 : 1 and goes to replica 0."""
    res = serve_replicas([r(i, 0, 2, 2) for i in range(3)], ONE, data_parallel_size=2, router="least-requests")
    assert res.assignment == (0, 1, 0)


def test_least_kv_reads_the_blocks_a_step_in_flight_holds():
    """Token blocks, reserve admission: request 0 (P 1, O 10) holds 10 blocks on replica 0 from 0 s; request 1
    (P 10, O 3) goes to the empty replica 1 at 0.5 s and holds 12 blocks until its last decode ends at 3.5 s. At 3 s
    that decode is in flight: replica 1 holds 12 > 10, so request 2 goes to replica 0 (after the step it would hold
    0)."""
    reqs = [r(0, 0, 1, 10), r(1, Fraction(1, 2), 10, 3), r(2, 3, 1, 1)]
    res = serve_replicas(reqs, ONE, data_parallel_size=2, router="least-kv", kv_pool=KVPool.tokens(100))
    assert res.assignment == (0, 1, 0)
    assert [load.peak_kv_blocks for load in res.loads] == [11, 12]
    assert res.whole.requests[1].handed_back_s == Fraction(7, 2)
    # round robin sends it to replica 0 as well, least-requests to the lowest index of a 1 : 1 tie
    assert serve_replicas(reqs, ONE, data_parallel_size=2, router="least-requests").assignment == (0, 1, 0)


def test_least_kv_balances_where_round_robin_does_not():
    """Alternating long and short requests: round robin puts every long one on replica 0; least-kv spreads them."""
    reqs = [r(i, i, 20 if i % 2 == 0 else 1, 30 if i % 2 == 0 else 1) for i in range(8)]
    rr = serve_replicas(reqs, ONE, data_parallel_size=2, kv_pool=KVPool.tokens(1000))
    kv = serve_replicas(reqs, ONE, data_parallel_size=2, router="least-kv", kv_pool=KVPool.tokens(1000))
    assert rr.assignment == (0, 1) * 4
    # r1 at 1 s: replica 0 holds r0's 49 blocks, replica 1 none; r2 at 2 s: r1 was handed back at 2 s, so replica 1
    # is empty again; r3 at 3 s: 49 : 49, the lowest index; r4 at 4 s: r3 handed back at 4 s, 49 : 49 again
    assert kv.assignment[:5] == (0, 1, 1, 0, 0)
    assert set(kv.assignment[0::2]) == {0, 1}


def test_a_deployment_gives_d_and_the_gpus():
    deployment = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"),
                            parallelism=Parallelism(tensor=2, data=4))
    assert deployment.gpus == 8 and deployment.parallelism.replica_gpus == 2
    reqs = [r(i, Fraction(i, 10), 100, 20) for i in range(9)]
    res = serve_replicas(reqs, deployment, router="least-requests")
    assert res.data_parallel_size == 4 and res.gpus == 8 and res.gpus_per_replica == 2
    assert sum(load.requests for load in res.loads) == 9
    assert res.whole.options["data_parallel_size"] == 4 and res.whole.options["router"] == "least-requests"
    one = serve_continuous(reqs, RooflineCostModel.for_deployment(deployment))
    assert res.whole.summary.ttft.p99 <= one.summary.ttft.p99
    data = res.to_dict()
    assert data["gpus"] == 8 and [x["requests"] for x in data["replicas"]] == [load.requests for load in res.loads]


def test_refusals_name_the_field():
    reqs = [r(0, 0, 4, 3)]
    with pytest.raises(InvalidValueError, match="router"):
        serve_replicas(reqs, ONE, router="least-connections")
    with pytest.raises(InvalidValueError, match="data_parallel_size"):
        serve_replicas(reqs, ONE, data_parallel_size=0)
    with pytest.raises(InvalidValueError, match="requests"):
        serve_replicas(ClosedLoop(clients=2, lengths=((4, 3),) * 4), ONE, data_parallel_size=2)
    with pytest.raises(InvalidValueError, match="cost_model"):
        serve_replicas(reqs, [ONE, UnitCostModel()])
    with pytest.raises(InvalidValueError, match="data_parallel_size"):
        serve_replicas(reqs, [ONE, ONE], data_parallel_size=3)
    with pytest.raises(InvalidValueError, match="kv_pool"):
        serve_replicas(reqs, ONE, data_parallel_size=2, kv_pool=[KVPool.tokens(10)])
    deployment = Deployment(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), parallelism=Parallelism(data=2))
    with pytest.raises(InvalidValueError, match="data_parallel_size"):
        serve_replicas(reqs, deployment, data_parallel_size=3)
    with pytest.raises(InvalidValueError, match="data_parallel_size"):
        Parallelism(data=0)
    with pytest.raises(InvalidValueError, match="data_parallel_size"):
        serve_replicas(reqs, ONE, data_parallel_size=10**40)
    with pytest.raises(InvalidValueError, match="cost_model"):
        serve_replicas(reqs, None, data_parallel_size=2)


# ----------------------------------------------------------------------------- generated


def _same_request(x: Any, y: Any, where: str) -> None:
    for field in attrs.fields(type(x)):
        same(getattr(x, field.name), getattr(y, field.name), f"{where}.{field.name}")


@settings(_ORACLE)
@given(reqs=WORK, cost=COSTS, data=st.data(), size=st.integers(1, 4))
def test_round_robin_is_the_trace_split_and_served_alone(reqs: Any, cost: Any, data: st.DataObject,
                                                         size: int) -> None:
    """Request j to replica j mod D: each replica's results are those of its part served alone, and the whole's
    TTFT, TPOT and E2E percentiles are those of all the parts' requests together."""
    kw = options(data, reqs, size)
    engine = data.draw(st.sampled_from(["auto", "step"]))
    res = serve_replicas(reqs, cost, data_parallel_size=size, engine=engine, **kw)
    assert res.assignment == tuple(j % size for j in range(len(reqs)))
    pools = kw.pop("kv_pool")
    done, parts = [], []
    for k in range(size):
        pool = pools[k] if isinstance(pools, list) else pools
        alone = serve_continuous(reqs[k::size], cost, kv_pool=pool, engine=engine, **kw)
        part = res.replicas[k]
        assert len(part.requests) == len(alone.requests)
        for i, (x, y) in enumerate(zip(part.requests, alone.requests, strict=True)):
            _same_request(x, y, f"replica {k} request {i}")
            _same_request(res.whole.requests[k + size * i], y, f"whole request {k + size * i}")
        for name in ("steps", "busy_s", "peak_kv_blocks", "output_tokens", "preemptions", "makespan_s"):
            same(getattr(part.summary, name), getattr(alone.summary, name), f"replica {k} {name}")
        assert part.summary.itl == alone.summary.itl
        done += [x for x in alone.requests if x.handed_back_s is not None]
        parts.append(alone.options.get("prefix_cache"))
    if kw["enable_prefix_caching"]:
        for name in ("queried_tokens", "hit_tokens", "queried_blocks", "hit_blocks", "evictions"):
            assert res.whole.options["prefix_cache"][name] == sum(p[name] for p in parts)
    s = res.whole.summary
    assert s.ttft == Percentiles.of([x.ttft_s for x in done])
    assert s.e2e == Percentiles.of([x.e2e_s for x in done])
    assert s.tpot == Percentiles.of([x.tpot_s for x in done if x.request.output_tokens >= 2])
    assert s.steps == sum(p.summary.steps for p in res.replicas)


@pytest.mark.parametrize("router", ROUTERS)
@settings(_ORACLE)
@given(reqs=WORK, cost=COSTS, data=st.data(), size=st.integers(1, 4))
def test_replicas_on_the_stretch_clock_equal_the_step_clock(router: str, reqs: Any, cost: Any, data: st.DataObject,
                                                            size: int) -> None:
    """Every router, dense / MoE / tensor-parallel / unit cost models, tight pools (one or one per replica), both
    admissions and prefill modes: the same assignment, and each replica's and the whole's results field by field
    (steps included when recorded)."""
    kw = options(data, reqs, size)
    kw["record_steps"] = data.draw(st.booleans())
    a = serve_replicas(reqs, cost, data_parallel_size=size, router=router, **kw)
    b = serve_replicas(reqs, cost, data_parallel_size=size, router=router, engine="step", **kw)
    assert a.assignment == b.assignment
    for x, y in zip(a.replicas, b.replicas, strict=True):
        assert_same_results(x, y)
    assert_same_results(a.whole, b.whole)
    assert a.loads == b.loads


@settings(_ORACLE)
@given(reqs=WORK, cost=COSTS, data=st.data(), size=st.integers(1, 4), router=st.sampled_from(ROUTERS))
def test_every_request_is_handed_back_or_refused_once_and_no_pool_overflows(reqs: Any, cost: Any,
                                                                             data: st.DataObject, size: int,
                                                                             router: str) -> None:
    kw = options(data, reqs, size)
    res = serve_replicas(reqs, cost, data_parallel_size=size, router=router, record_steps=True, **kw)
    ids = sorted(x.request.id for part in res.replicas for x in part.requests)
    assert ids == sorted(q.id for q in reqs)  # each request served by exactly one replica
    assert [load.requests for load in res.loads] == [res.assignment.count(k) for k in range(size)]
    for j, x in enumerate(res.whole.requests):
        assert x.request is reqs[j]
        assert (x.handed_back_s is None) != (x.rejected_reason is None), f"request {j}"
        if x.handed_back_s is not None:
            assert x.generated_tokens == x.request.output_tokens
    assert sum(load.completed + load.rejected for load in res.loads) == len(reqs)
    pools = kw["kv_pool"] if isinstance(kw["kv_pool"], list) else [kw["kv_pool"]] * size
    for k, (part, pool) in enumerate(zip(res.replicas, pools, strict=True)):
        capacity = pool.capacity_blocks
        if capacity is None:
            continue
        assert part.summary.peak_kv_blocks <= capacity, f"replica {k}"
        assert all(step.kv_blocks <= capacity for step in part.steps), f"replica {k}"


# ----------------------------------------------------------------------------- the command


def test_simulate_data_parallel_size_prints_the_per_replica_load(capsys) -> None:
    import json

    from roofline.cli import main

    assert main(["simulate", "--limit", "40", "--data-parallel-size", "2", "--router", "least-kv", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["data_parallel_size"] == 2 and [r["label"] for r in out["results"]] == ["continuous"]
    dp = out["results"][0]["data_parallel"]
    assert dp["router"] == "least-kv" and dp["gpus"] == 2
    assert sum(x["requests"] for x in dp["replicas"]) == 40 == out["results"][0]["summary"]["requests"]
    assert main(["simulate", "--limit", "40", "-dp", "3", "--tp", "2", "--model", "llama-3.1-70b"]) == 0
    text = capsys.readouterr().out
    assert "3 data-parallel replicas x 2 GPUs = 6 GPUs, router round-robin" in text
    header = " ".join(text[:text.index("step times:")].split())  # the header says the pool is one replica's
    assert ("llama-3.1-70b (weights bfloat16, KV bfloat16) on 3 data-parallel replicas, each on 2 x NVIDIA H100 SXM5 "
            "80GB (tensor parallel: KV pool per GPU, all-reduce in every step, tokens/s of the group); each "
            "replica's KV pool ") in header
    table = text[text.index("  replica "):].split("\n\n")[0].splitlines()
    assert len(table) == 4 and all(len(line) <= 100 for line in table)
    assert [int(line.split()[1]) for line in table[1:]] == [14, 13, 13]  # round robin of 40


@pytest.mark.parametrize("argv, flag", [
    (["--limit", "10", "--router", "least-kv"], "--router"),
    (["--limit", "10", "-dp", "2", "--policy", "static"], "-dp"),
    (["--limit", "10", "--data-parallel-size", "0"], "--data-parallel-size"),
    (["-dp", "2", "--max-concurrency", "2", "--num-prompts", "4", "--policy", "continuous"], "--max-concurrency"),
])
def test_simulate_refuses_by_flag(capsys, argv: list[str], flag: str) -> None:
    """One line naming the flag, exit status 2 (argparse's refusals exit, the library's are returned)."""
    from roofline.cli import main

    try:
        status = main(["simulate", *argv])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err


@settings(_ORACLE)
@given(reqs=WORK, cost=COSTS, data=st.data(), router=st.sampled_from(["least-requests", "least-kv"]))
def test_one_replica_advanced_to_every_arrival_is_serve_continuous(reqs: Any, cost: Any, data: st.DataObject,
                                                                   router: str) -> None:
    """D = 1 under a router that reads the state: the replica runs to each arrival, stops there (a stretch cut at
    it) and takes the request, which must change nothing against serving the workload in one loop."""
    kw = options(data, reqs, 1)
    engine = data.draw(st.sampled_from(["auto", "step"]))
    res = serve_replicas(reqs, cost, router=router, engine=engine, **kw)
    alone = serve_continuous(reqs, cost, engine=engine, **{**kw, "kv_pool": kw["kv_pool"][0]
                                                            if isinstance(kw["kv_pool"], list) else kw["kv_pool"]})
    for i, (x, y) in enumerate(zip(res.whole.requests, alone.requests, strict=True)):
        _same_request(x, y, f"request {i}")
    for field in attrs.fields(type(alone.summary)):
        same(getattr(res.whole.summary, field.name), getattr(alone.summary, field.name), f"summary.{field.name}")
