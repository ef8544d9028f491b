"""Disaggregated prefill and decode: hand-worked runs, the transfer formula against the scheduler, both clocks,
conservation and refusals by name.

docs/conventions.md, "Disaggregated prefill and decode"; formulas: roofline.formulas.kv_transfer_bytes,
kv_transfer_time; proof p22.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.deployment import Deployment, Parallelism
from roofline.errors import InvalidValueError
from roofline.hardware import get_accelerator
from roofline.models import get_model
from roofline.sim import (
    ROUTERS,
    KVPool,
    Pool,
    Request,
    RooflineCostModel,
    TransferLink,
    UnitCostModel,
    round_robin,
    serve_continuous,
    serve_disaggregated,
)

UNIT = UnitCostModel(decode=Fraction(1, 10), prefill=Fraction(1, 2))
LINK = TransferLink(bandwidth=100, latency=Fraction(1, 4))  # a 40-token prompt of 5 B/token per GPU: 2 + 1/4 s


def _pool(**kw) -> Pool:
    return Pool(UNIT, kv_bytes_per_token=kw.pop("k", 5), **kw)


# ---------------------------------------------------------------- the formulas, by hand


def test_transfer_bytes_by_hand():
    """P k_d max(1, T_d / T_p): equal sizes, a change of T either way, a Fraction where T_p does not divide."""
    kw = dict(prompt_tokens=1000, decode_kv_bytes_per_token=163_840)
    assert f.kv_transfer_bytes(**kw, prefill_tensor_parallel_size=2, decode_tensor_parallel_size=2) == 163_840_000
    assert f.kv_transfer_bytes(prompt_tokens=1000, decode_kv_bytes_per_token=81_920, prefill_tensor_parallel_size=2,
                               decode_tensor_parallel_size=4) == 163_840_000  # each prefill NIC feeds two GPUs
    assert f.kv_transfer_bytes(**kw, prefill_tensor_parallel_size=4, decode_tensor_parallel_size=2) == 163_840_000
    assert f.kv_transfer_bytes(prompt_tokens=3, decode_kv_bytes_per_token=1, prefill_tensor_parallel_size=3,
                               decode_tensor_parallel_size=4) == Fraction(4)
    assert f.kv_transfer_bytes(prompt_tokens=1, decode_kv_bytes_per_token=1, prefill_tensor_parallel_size=3,
                               decode_tensor_parallel_size=4) == Fraction(4, 3)
    with pytest.raises(InvalidValueError, match="prefill_tensor_parallel_size"):
        f.kv_transfer_bytes(**kw, prefill_tensor_parallel_size=0, decode_tensor_parallel_size=2)


def test_transfer_time_by_hand():
    """163.84 MB over DGX H100's 400 Gb/s NIC (50 GB/s) after 2.7 us: 3.2795 ms."""
    gpu = get_accelerator("h100-sxm")
    link = TransferLink.between(gpu, gpu)
    t = f.kv_transfer_time(transfer_bytes=Fraction(163_840_000), transfer_bandwidth=link.bandwidth,
                           transfer_latency=link.latency)
    assert t == Fraction(163_840_000, 50 * 10**9) + Fraction(27, 10**7)
    assert f"{float(t) * 1e3:.4f}" == "3.2795"
    with pytest.raises(InvalidValueError, match="transfer_bandwidth"):
        f.kv_transfer_time(transfer_bytes=1, transfer_bandwidth=0, transfer_latency=0)


# ---------------------------------------------------------------- the scheduler, by hand


def test_a_lone_request_by_hand():
    """Prefill 1/2 s, transfer 40 x 5 / 100 + 1/4 = 9/4 s: TTFT 11/4 s; then O - 1 = 3 decode steps of 1/10 s."""
    r = serve_disaggregated([Request(id=7, arrival_s=1, prompt_tokens=40, output_tokens=4)], _pool(), _pool(),
                            link=LINK)
    x = r.requests[0]
    assert (x.admitted_s, x.first_token_s, x.handed_back_s) == (1, 1 + Fraction(11, 4), 1 + Fraction(11, 4)
                                                                 + Fraction(3, 10))
    assert (x.ttft_s, x.tpot_s, x.prefill_tokens, x.generated_tokens, x.preemptions) == (Fraction(11, 4),
                                                                                         Fraction(1, 10), 40, 4, 0)
    assert r.policy == "disaggregated" and r.options["gpus"] == 2 and r.options["router"] == "round-robin"
    s = r.summary
    assert (s.completed, s.rejected, s.steps, s.prefill_steps, s.decode_steps) == (1, 0, 4, 1, 3)
    assert s.busy_s == Fraction(1, 2) + Fraction(3, 10)
    assert s.slot_occupancy is None and s.long_run_useful_share is None and s.itl is None


def test_one_output_token_is_done_at_its_prefill():
    """O = 1: the prefill pool's token is the whole answer; nothing moves, the decode pool never sees it."""
    r = serve_disaggregated([Request(id=0, arrival_s=0, prompt_tokens=40, output_tokens=1)], _pool(), _pool(),
                            link=LINK)
    x = r.requests[0]
    assert (x.first_token_s, x.handed_back_s, x.generated_tokens) == (Fraction(1, 2), Fraction(1, 2), 1)
    assert [i["requests"] for i in r.options["instances"]] == [1, 0]


def test_a_full_decode_pool_admits_the_next_at_a_finish():
    """A decode pool holding one lifetime (40 + 4 - 1 = 43 tokens: 3 blocks of 16): the second waits for the first."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=40, output_tokens=4) for i in range(2)]
    r = serve_disaggregated(reqs, _pool(), _pool(kv_pool=KVPool.blocks(3, block_size=16)), link=LINK)
    ready = Fraction(1, 2) + Fraction(9, 4)  # one prefill step for both; their transfers end together
    assert [x.first_token_s for x in r.requests] == [ready, ready]
    assert [x.handed_back_s for x in r.requests] == [ready + Fraction(3, 10), ready + Fraction(6, 10)]
    assert r.summary.peak_kv_blocks == 3 and r.summary.kv_capacity_blocks == 3


def test_round_robin_over_instances():
    """Round robin by arrival in the prefill pool, by transfer end in the decode pool."""
    assert round_robin(5, 2) == [0, 1, 0, 1, 0] and round_robin(0, 3) == []
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=40, output_tokens=4) for i in range(4)]
    r = serve_disaggregated(reqs, _pool(instances=2), _pool(instances=2, tensor_parallel_size=4), link=LINK)
    assert [(i["pool"], i["requests"]) for i in r.options["instances"]] == [("prefill", 2), ("prefill", 2),
                                                                            ("decode", 2), ("decode", 2)]
    assert r.options["gpus"] == 2 * 1 + 2 * 4
    # T 1 -> 4: each prefill NIC sends 4 decode GPUs' shares: 40 x 5 x 4 / 100 + 1/4 s
    assert r.requests[0].ttft_s == Fraction(1, 2) + Fraction(40 * 5 * 4, 100) + Fraction(1, 4)


def _three_for_the_routers():
    """r0 (O = 30) lands on decode instance 0 at 11/4 s and decodes till 5.65 s; r1 (O = 2) on instance 1 at
    3.75 s, done at 3.85 s; r2 (O = 2) lands at 4.75 s, when instance 0 is busy (max_num_seqs 1) and 1 idle."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=40, output_tokens=30),
            Request(id=1, arrival_s=1, prompt_tokens=40, output_tokens=2),
            Request(id=2, arrival_s=2, prompt_tokens=40, output_tokens=2)]
    return reqs, _pool(), _pool(instances=2, max_num_seqs=1, kv_pool=KVPool.blocks(100, block_size=16))


@pytest.mark.parametrize("engine", ["step", "event"])
def test_routers_of_the_decode_pool_by_hand(engine):
    """Round robin sends r2 to instance 0, where it waits for r0 (5.65 s + 0.1); least-requests and least-kv to
    instance 1, idle since 3.85 s (4.75 s + 0.1). The prefill pool of one instance is the same under all three."""
    reqs, pre, dec = _three_for_the_routers()
    ready = [Fraction(11, 4) + j for j in range(3)]
    out = {}
    for router in ROUTERS:
        r = serve_disaggregated(reqs, pre, dec, link=LINK, router=router, engine=engine)
        assert [x.first_token_s for x in r.requests] == ready
        out[router] = [x.handed_back_s for x in r.requests]
        decode = [i["requests"] for i in r.options["instances"] if i["pool"] == "decode"]
        assert decode == ([2, 1] if router == "round-robin" else [1, 2])
    r0, r1 = ready[0] + 29 * Fraction(1, 10), ready[1] + Fraction(1, 10)
    assert out["round-robin"] == [r0, r1, r0 + Fraction(1, 10)]
    assert out["least-requests"] == out["least-kv"] == [r0, r1, ready[2] + Fraction(1, 10)]
    # the old spelling of round robin is the same router
    assert [x.handed_back_s for x in serve_disaggregated(reqs, pre, dec, link=LINK, router="round_robin",
                                                         engine=engine).requests] == out["round-robin"]


@settings(max_examples=25, deadline=None)
@given(raw=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 40), st.integers(1, 12)), min_size=0, max_size=8),
       blocks=st.sampled_from([None, 4, 9]), engine=st.sampled_from(["step", "event"]))
def test_one_instance_per_pool_every_router_is_round_robin(raw, blocks, engine):
    """With one instance in each pool a router has one choice: every router's run equals round robin's."""
    t, reqs = 0, []
    for j, (gap, p, o) in enumerate(raw):
        t += gap
        reqs.append(Request(id=j, arrival_s=Fraction(t, 3), prompt_tokens=p, output_tokens=o))
    pool = _pool(kv_pool=None if blocks is None else KVPool.blocks(blocks, block_size=8), max_num_seqs=2)
    base = serve_disaggregated(reqs, pool, pool, link=LINK, engine=engine)
    for router in ROUTERS[1:]:
        other = serve_disaggregated(reqs, pool, pool, link=LINK, engine=engine, router=router)
        assert tuple(other.requests) == tuple(base.requests) and other.summary == base.summary


def test_refusals_name_the_pool_before_any_prefill():
    """A prompt the prefill pool cannot hold, a lifetime the decode pool cannot, max_model_len: refused up front."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=40, output_tokens=4),
            Request(id=1, arrival_s=0, prompt_tokens=60, output_tokens=2),
            Request(id=2, arrival_s=0, prompt_tokens=20, output_tokens=40),
            Request(id=3, arrival_s=0, prompt_tokens=20, output_tokens=90)]
    r = serve_disaggregated(reqs, _pool(kv_pool=KVPool.blocks(3, block_size=16)),
                            _pool(kv_pool=KVPool.blocks(3, block_size=16)), link=LINK, max_model_len=100)
    reasons = [x.rejected_reason for x in r.requests]
    assert reasons[0] is None
    assert reasons[1] == "prefill pool: lifetime KV of 60 tokens needs 4 blocks of 16; the pool has 3"
    assert reasons[2] == "decode pool: lifetime KV of 59 tokens needs 4 blocks of 16; the pool has 3"
    assert reasons[3] == "prompt + output of 110 tokens (20 + 90) exceeds max_model_len=100"
    assert all(x.prefill_tokens == 0 and x.admitted_s is None for x in r.requests[1:])
    assert r.summary.rejected == 3 and r.summary.completed == 1


def test_refusals_by_name():
    with pytest.raises(InvalidValueError, match="decode_accelerator.*no stated inter-node network"):
        TransferLink.between(get_accelerator("h100-sxm"), get_accelerator("l40s"))
    with pytest.raises(InvalidValueError, match="bandwidth"):
        TransferLink(bandwidth=0, latency=0)
    with pytest.raises(InvalidValueError, match="latency"):
        TransferLink(bandwidth=1, latency=-1)
    with pytest.raises(InvalidValueError, match="instances"):
        _pool(instances=0)
    with pytest.raises(InvalidValueError, match="decode"):
        serve_disaggregated([], _pool(), "pool", link=LINK)
    with pytest.raises(InvalidValueError, match="router"):
        serve_disaggregated([], _pool(), _pool(), link=LINK, router="random")
    with pytest.raises(InvalidValueError, match="engine"):
        serve_disaggregated([], _pool(), _pool(), link=LINK, engine="fast")
    with pytest.raises(InvalidValueError, match="leave no KV budget"):
        Pool.for_deployment(Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm")))
    with pytest.raises(InvalidValueError, match="model.*full-attention"):
        Pool.for_deployment(Deployment(get_model("mistral-7b-v0.1"), get_accelerator("h100-sxm")))


def test_kv_transferred_refusals_and_its_first_decode_step():
    """serve_continuous(kv_transferred=True): no prefill step; refused with chunking, prefix caching, O = 1."""
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=4, output_tokens=3),
            Request(id=1, arrival_s=1, prompt_tokens=4, output_tokens=2)]
    for engine in ("step", "event"):
        r = serve_continuous(reqs, UnitCostModel(), kv_transferred=True, record_steps=True, engine=engine)
        assert [s.kind for s in r.steps] == ["decode", "decode"]
        assert [(x.admitted_s, x.first_token_s, x.handed_back_s, x.prefill_tokens) for x in r.requests] == [
            (0, 0, 2, 0), (1, 1, 2, 0)]
        assert r.summary.itl.max == 1
    with pytest.raises(InvalidValueError, match="prefill"):
        serve_continuous(reqs, UnitCostModel(), kv_transferred=True, prefill="chunked")
    with pytest.raises(InvalidValueError, match="enable_prefix_caching"):
        serve_continuous(reqs, UnitCostModel(), kv_transferred=True, enable_prefix_caching=True)
    with pytest.raises(InvalidValueError, match="output_tokens >= 2"):
        serve_continuous([Request(id=0, arrival_s=0, prompt_tokens=4, output_tokens=1)], UnitCostModel(),
                         kv_transferred=True)
    with pytest.raises(InvalidValueError, match="kv_transferred"):
        serve_continuous(reqs, UnitCostModel(), kv_transferred=1)


def test_a_preempted_transferred_request_is_recomputed_on_the_decode_side():
    """On demand, a decode pool of 4 blocks of 4: the later request is preempted and re-prefilled there."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=6) for i in range(2)]
    r = serve_continuous(reqs, UnitCostModel(), kv_transferred=True, admission="on_demand",
                         kv_pool=KVPool.blocks(4, block_size=4), record_steps=True)
    assert r.summary.preemptions >= 1 and r.summary.completed == 2
    assert "prefill" in [s.kind for s in r.steps]
    assert sum(x.prefill_tokens for x in r.requests) > 0


# ---------------------------------------------------------------- Hypothesis: formula, clocks, conservation


@settings(max_examples=20, deadline=None)
@given(prompt=st.integers(1, 300), out=st.integers(2, 30), tp=st.sampled_from([1, 2, 4, 8]),
       td=st.sampled_from([1, 2, 4, 8]))
def test_a_lone_request_is_prefill_plus_the_transfer_formula(prompt, out, tp, td):
    """Llama 3.1 70B, H100 NICs: TTFT = the prefill deployment's prefill step + kv_transfer_time; TPOT = the decode
    deployment's batch-1 steps."""
    model, gpu = get_model("llama-3.1-70b"), get_accelerator("h100-sxm")
    if tp == 1 or td == 1:  # one GPU holds no KV of a 70B model: a small budget instead
        tp, td = max(tp, 2), max(td, 2)
    pre = Pool.for_deployment(Deployment(model, gpu, Parallelism(tensor=tp)))
    dec = Pool.for_deployment(Deployment(model, gpu, Parallelism(tensor=td)))
    link = TransferLink.between(gpu, gpu)
    r = serve_disaggregated([Request(id=0, arrival_s=0, prompt_tokens=prompt, output_tokens=out)], pre, dec,
                            link=link).requests[0]
    moved = f.kv_transfer_bytes(prompt_tokens=prompt, decode_kv_bytes_per_token=dec.kv_bytes_per_token,
                                prefill_tensor_parallel_size=tp, decode_tensor_parallel_size=td)
    transfer = f.kv_transfer_time(transfer_bytes=Fraction(moved), transfer_bandwidth=link.bandwidth,
                                  transfer_latency=link.latency)
    assert r.ttft_s == pre.cost_model.prefill_time(prompt, prompt * (prompt + 1) // 2) + transfer
    steps = [dec.cost_model.decode_time(1, prompt + j) for j in range(1, out)]
    assert r.tpot_s == sum(steps) / (out - 1)


_REQ = st.tuples(st.integers(0, 6), st.integers(1, 40), st.integers(1, 12))


@settings(max_examples=40, deadline=None)
@given(raw=st.lists(_REQ, min_size=0, max_size=10), np_=st.integers(1, 3), nd=st.integers(1, 3),
       pre_blocks=st.sampled_from([None, 2, 4, 8]), dec_blocks=st.sampled_from([None, 3, 5, 9]),
       on_demand=st.booleans(), chunked=st.booleans(), k=st.integers(0, 7), latency=st.integers(0, 3),
       router=st.sampled_from(ROUTERS))
def test_stretch_equals_step_and_conservation(raw, np_, nd, pre_blocks, dec_blocks, on_demand, chunked, k, latency,
                                              router):
    """Under every router: both clocks give the same result; every request is handed back or refused once,
    with a reason; KV never over any instance's pool; no transfer ends before its prefill plus the transfer
    time; no decode before it lands."""
    t = 0
    reqs = []
    for j, (gap, p, o) in enumerate(raw):
        t += gap
        reqs.append(Request(id=j, arrival_s=Fraction(t, 3), prompt_tokens=p, output_tokens=o))
    def pool(blocks: int | None) -> KVPool | None:
        return None if blocks is None else KVPool.blocks(blocks, block_size=8)
    admission = "on_demand" if on_demand else "reserve"
    pre = _pool(k=k, instances=np_, kv_pool=pool(pre_blocks), admission=admission,
                prefill="chunked" if chunked else "separate", max_num_seqs=4, max_num_batched_tokens=16)
    dec = _pool(k=k, instances=nd, kv_pool=pool(dec_blocks), admission=admission, max_num_seqs=3,
                tensor_parallel_size=2)
    link = TransferLink(bandwidth=50, latency=Fraction(latency, 7))
    step = serve_disaggregated(reqs, pre, dec, link=link, engine="step", router=router)
    event = serve_disaggregated(reqs, pre, dec, link=link, engine="event", router=router)
    assert step.options["router"] == router
    assert tuple(step.requests) == tuple(event.requests)
    assert step.summary == event.summary
    assert event.options["engine"] == "event" and step.options["engine"] == "step"
    assert len(step.requests) == len(reqs)
    for r, x in zip(reqs, step.requests, strict=True):
        done, refused = x.handed_back_s is not None, x.rejected_reason is not None
        assert done != refused  # exactly one of the two
        if done:
            assert x.generated_tokens == r.output_tokens
            if r.output_tokens >= 2:
                transfer = f.kv_transfer_time(
                    transfer_bytes=Fraction(f.kv_transfer_bytes(prompt_tokens=r.prompt_tokens,
                                                                decode_kv_bytes_per_token=k,
                                                                prefill_tensor_parallel_size=1,
                                                                decode_tensor_parallel_size=2)),
                    transfer_bandwidth=50, transfer_latency=Fraction(latency, 7))
                assert x.first_token_s >= x.admitted_s + UNIT.prefill + transfer  # never before its prefill ends
                assert x.handed_back_s >= x.first_token_s + (r.output_tokens - 1) * UNIT.decode
        else:
            assert x.rejected_reason.startswith(("prefill pool: ", "decode pool: "))
    for inst in step.options["instances"]:
        if inst["kv_capacity_blocks"] is not None:
            assert inst["peak_kv_blocks"] <= inst["kv_capacity_blocks"]
    assert step.summary.completed + step.summary.rejected == len(reqs)
    assert step.summary.output_tokens == sum(r.output_tokens for r, x in zip(reqs, step.requests, strict=True)
                                             if x.handed_back_s is not None)


def test_a_real_deployment_on_both_clocks():
    """Llama 3.1 8B, 1 prefill + 2 decode instances of one H100 each, 12 requests: the two clocks agree."""
    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    d = Deployment(model, gpu)
    pre, dec = Pool.for_deployment(d), Pool.for_deployment(d, instances=2, admission="on_demand")
    assert isinstance(pre.cost_model, RooflineCostModel) and pre.total_gpus == 1 and dec.total_gpus == 2
    reqs = [Request(id=i, arrival_s=Fraction(i, 20), prompt_tokens=100 + 37 * i, output_tokens=5 + 3 * i)
            for i in range(12)]
    link = TransferLink.between(gpu, gpu)
    a = serve_disaggregated(reqs, pre, dec, link=link, engine="step")
    b = serve_disaggregated(reqs, pre, dec, link=link, engine="event")
    assert tuple(a.requests) == tuple(b.requests) and a.summary == b.summary
    assert a.summary.completed == 12


# ---------------------------------------------------------------- the command


def _simulate(capsys, *flags: str) -> tuple[int, str, str]:
    from roofline.cli import main as cli_main

    code = cli_main(["simulate", "--model", "llama-3.1-70b", "--trace", "conv", "--limit", "40", *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_command_prints_the_pools_and_the_percentiles(capsys):
    code, out, _ = _simulate(capsys, "--num-prefill-instances", "1", "--num-decode-instances", "3", "--tp", "2")
    assert code == 0
    assert "prefill pool: 1 instance of 2 x NVIDIA H100 SXM5 80GB (2 GPUs), KV 2,281 blocks of 16 each" in out
    assert "decode pool:  3 instances of 2 x NVIDIA H100 SXM5 80GB (6 GPUs)" in out
    assert "KV transfer: InfiniBand NDR (ConnectX-7), 50 GB/s per GPU, 2.7 us; 163,840 B/token per decode GPU" in out
    assert "completed 40, rejected 0" in out and "on 8 GPUs" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_the_command_json_matches_the_api(capsys):
    import json

    code, out, _ = _simulate(capsys, "--num-decode-instances", "2", "--decode-tp", "4", "--prefill-tp", "2",
                             "--decode-accelerator", "h200-sxm", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["pools"]["decode"]["tensor_parallel_size"] == 4 and data["pools"]["decode"]["instances"] == 2
    assert data["pools"]["decode"]["accelerator"]["key"] == "h200-sxm"
    assert data["result"]["options"]["gpus"] == 2 + 2 * 4
    model, h100, h200 = get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), get_accelerator("h200-sxm")
    from roofline.sim import load_trace, shipped_trace
    reqs = load_trace(shipped_trace("conv"))[:40]
    api = serve_disaggregated(reqs, Pool.for_deployment(Deployment(model, h100, Parallelism(tensor=2))),
                              Pool.for_deployment(Deployment(model, h200, Parallelism(tensor=4)), instances=2),
                              link=TransferLink.between(h100, h200), max_model_len=model.max_position_embeddings)
    assert data["result"]["summary"]["ttft"]["p99"] == pytest.approx(float(api.summary.ttft.p99))
    assert data["result"]["summary"]["completed"] == api.summary.completed == 40


def test_the_command_routes_both_pools_by_its_router(capsys):
    """`--router least-kv` reaches both pools: the command's run is the API's with router="least-kv"."""
    import json

    code, out, _ = _simulate(capsys, "--num-prefill-instances", "2", "--num-decode-instances", "2", "--tp", "2",
                             "--router", "least-kv", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["result"]["options"]["router"] == "least-kv"
    from roofline.sim import load_trace, shipped_trace

    model, h100 = get_model("llama-3.1-70b"), get_accelerator("h100-sxm")
    d = Deployment(model, h100, Parallelism(tensor=2))
    reqs = load_trace(shipped_trace("conv"))[:40]
    api = serve_disaggregated(reqs, Pool.for_deployment(d, instances=2), Pool.for_deployment(d, instances=2),
                              link=TransferLink.between(h100, h100), max_model_len=model.max_position_embeddings,
                              router="least-kv")
    assert data["result"]["summary"]["ttft"]["p99"] == pytest.approx(float(api.summary.ttft.p99))
    assert [i["requests"] for i in data["result"]["options"]["instances"]] == [
        i["requests"] for i in api.options["instances"]]
    code, out, _ = _simulate(capsys, "--num-decode-instances", "2", "--tp", "2", "--router", "least-requests")
    assert code == 0 and "routing: least-requests in each pool (--router)" in out


@pytest.mark.parametrize(("flags", "line"), [
    (["--prefill-accelerator", "tpu"], "roofline simulate: error: --prefill-accelerator: unknown accelerator 'tpu'; "
     "known: a100-40gb, "),
    (["--decode-tensor-parallel-size", "3"], "roofline simulate: error: --decode-tensor-parallel-size=3: "
     "num_attention_heads=64 is not divisible by 3"),
    (["--prefill-accelerator", "mi300x"], "roofline simulate: error: --prefill-accelerator='mi300x': has no stated "
     "inter-node network to move KV between the pools: give --kv-transfer-bandwidth (and --kv-transfer-latency)"),
    (["--accelerator", "mi300x"], "roofline simulate: error: --accelerator='mi300x': has no stated inter-node network"),
    (["--enable-prefix-caching"], "roofline simulate: error: --enable-prefix-caching: not taken by a disaggregated "
     "run (--num-prefill-instances / --num-decode-instances)"),
])
def test_a_pool_refusal_names_the_flag_and_the_value_as_typed(capsys, flags, line):
    """Break-it finding 5: a pool's accelerator or T refused as --accelerator / --tensor-parallel-size, the
    accelerator's full name for the value typed ('AMD Instinct MI300X 192GB' for mi300x), a switch as ``=True``."""
    code, _, err = _simulate(capsys, "--num-prefill-instances", "1", "--num-decode-instances", "1", *flags)
    assert code == 2 and err.count("\n") == 1 and err.startswith(line), err


def test_the_command_refuses_by_flag(capsys):
    code, _, err = _simulate(capsys, "--num-decode-instances", "2", "--tp", "2", "--decode-accelerator", "l40s")
    assert code == 2 and "--decode-accelerator" in err and "no stated inter-node network" in err
    code, _, err = _simulate(capsys, "--num-decode-instances", "2", "--tp", "2", "--kv-transfer-latency", "5")
    assert code == 2 and "--kv-transfer-latency" in err
    code, _, err = _simulate(capsys, "--num-decode-instances", "2", "--tp", "2", "--enable-prefix-caching")
    assert code == 2 and "--enable-prefix-caching" in err
    code, _, err = _simulate(capsys, "--num-decode-instances", "1", "--tp", "2", "--decode-accelerator", "l40s",
                             "--kv-transfer-bandwidth", "25")
    assert code == 2 and "leave no KV budget on 2 x NVIDIA L40S 48GB" in err
    code, out, _ = _simulate(capsys, "--num-decode-instances", "1", "--prefill-tp", "2", "--decode-tp", "4",
                             "--decode-accelerator", "l40s", "--kv-transfer-bandwidth", "25",
                             "--kv-transfer-latency", "10")
    assert code == 0 and "KV transfer: given, 25 GB/s per GPU, 10 us" in out


def test_flags_a_run_does_not_use_are_refused(capsys):
    """A policy flag under a disaggregated run, or a pool flag without one, is refused by name (exit 2)."""
    for flags, named in ((("--num-decode-instances", "2", "--tp", "2", "--batch-size", "4"), "--batch-size=4"),
                         (("--num-decode-instances", "2", "--tp", "2", "--slo-ttft", "100"), "--slo-ttft=100"),
                         (("--num-decode-instances", "2", "--tp", "2", "--policy", "static"), "--policy"),
                         (("--tp", "2", "--decode-tp", "2"), "--decode-tensor-parallel-size=2")):
        code, _, err = _simulate(capsys, *flags)
        assert code == 2 and named in err, err


def test_a_link_takes_numpy_numbers_and_refuses_non_finite_ones() -> None:
    """np.int64(0) latency was refused as "not a number >= 0" (a break-it pass); numpy scalars are taken as the
    Python numbers they hold, and inf / nan / bools are refused by name."""
    import numpy as np

    link = TransferLink(np.float64(5e10), np.int64(0))
    assert link.bandwidth == 5e10 and type(link.bandwidth) is float and link.latency == 0 and type(link.latency) is int
    assert TransferLink(np.int64(50 * 10**9), Fraction(1, 10**6)).bandwidth == 50 * 10**9
    for bandwidth, latency, field in ((float("inf"), 0, "bandwidth"), (5e10, float("nan"), "latency"),
                                      (True, 0, "bandwidth"), (5e10, -1, "latency")):
        with pytest.raises(InvalidValueError) as err:
            TransferLink(bandwidth, latency)
        assert err.value.field == field
