"""Expert parallelism: distinct ranks by enumeration, the all-to-all by hand, EP against TP inside the experts,
the cost model against the registered step time, both clocks, refusals by name (docs/conventions.md,
"Expert parallelism")."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import Deployment, get_accelerator, get_model
from roofline.deployment import Parallelism
from roofline.errors import InvalidValueError
from roofline.sim import Request, RooflineCostModel, serve_continuous
from roofline.testing.compare import assert_same_results

DSV3 = get_model("deepseek-v3")
H200 = get_accelerator("h200")


def enumerate_ranks(E: int, k: int, R: int) -> tuple[Fraction, Fraction]:
    """(mean distinct ranks, mean remote ranks) over every k-subset of E experts and every own rank, by counting."""
    per = E // R
    subsets = list(itertools.combinations(range(E), k))
    reached = [frozenset(e // per for e in s) for s in subsets]
    distinct = Fraction(sum(len(r) for r in reached), len(subsets))
    remote = Fraction(sum(len(r - {own}) for r in reached for own in range(R)), len(subsets) * R)
    return distinct, remote


def test_distinct_ranks_by_hand():
    """E = 8, k = 2, R = 4 (2 experts per rank): of the 28 pairs, 4 lie on one rank and 24 on two, so a token
    reaches (4 x 1 + 24 x 2) / 28 = 13/7 ranks; its own rank is reached with probability 13/28, so 13/7 - 13/28 =
    39/28 are remote."""
    assert enumerate_ranks(8, 2, 4) == (Fraction(13, 7), Fraction(39, 28))
    kw = dict(num_experts=8, experts_per_token=2, expert_parallel_size=4)
    assert f.ranks_reached(**kw) == Fraction(13, 7)
    assert f.remote_ranks_reached(**kw) == Fraction(39, 28)


@settings(max_examples=150)
@given(per=st.integers(1, 4), R=st.integers(1, 4), data=st.data())
def test_distinct_and_remote_ranks_equal_enumeration(per: int, R: int, data: st.DataObject) -> None:
    """Every small group (E = R x experts per rank <= 16, every k): the formulas equal the count over all k-subsets."""
    E = per * R
    k = data.draw(st.integers(1, E), label="k")
    kw = dict(num_experts=E, experts_per_token=k, expert_parallel_size=R)
    assert (f.ranks_reached(**kw), f.remote_ranks_reached(**kw)) == enumerate_ranks(E, k, R)


def test_the_all_to_all_by_hand():
    """E = 8, k = 2, R = 4, B = 8 tokens of h = 4 elements of 2 bytes: each GPU owns 2 tokens, sends each to 39/28
    remote ranks on average: 2 x 39/28 x 8 = 156/7 bytes; over 1 byte/s with a 3 s latency, 3 + 156/7 s. On nodes of
    2 GPUs (R = 4: 1 other rank on the node, 2 off it) at 1/2 byte/s of NIC and 5 s of network latency: per copy
    2 x 13/28 x 8 = 52/7 bytes, on the node 52/7 s, off it 2 x 52/7 / (1/2) = 208/7 s, latency 5 s."""
    base = dict(batch=8, hidden_size=4, activation_bytes=2, num_experts=8, experts_per_token=2, expert_parallel_size=4)
    assert f.alltoall_bytes(**base) == Fraction(156, 7)
    one_node = dict(base, scale_up_bandwidth=Fraction(1), scale_up_latency=3, node_gpus=4, network_bandwidth=1,
                    network_latency=100)
    assert f.alltoall_time(**one_node) == 3 + Fraction(156, 7)
    two_nodes = dict(one_node, node_gpus=2, network_bandwidth=Fraction(1, 2), network_latency=5)
    assert f.alltoall_time(**two_nodes) == Fraction(208, 7) + 5
    assert f.decode_alltoall_time(num_moe_layers=3, **two_nodes) == 6 * (Fraction(208, 7) + 5)
    one_rank = dict(one_node, expert_parallel_size=1, node_gpus=1)
    assert f.alltoall_bytes(**base | {"expert_parallel_size": 1}) == 0 and f.alltoall_time(**one_rank) == 0


def test_experts_touched_per_rank_is_the_mean_of_the_ranks():
    """One token of E = 8, k = 2 over R = 4: 2 experts touched, half an expert per rank; B = 3: E (1 - (3/4)^3) / 4."""
    assert f.experts_touched_per_rank(num_experts=8, experts_per_token=2, expert_parallel_size=4, batch=1) == \
        Fraction(1, 2)
    assert f.experts_touched_per_rank(num_experts=8, experts_per_token=2, expert_parallel_size=4, batch=3) == \
        Fraction(37, 32)


def _deployments(T: int) -> tuple[Deployment, Deployment]:
    return Deployment(DSV3, H200, Parallelism(T)), Deployment(DSV3, H200, Parallelism(T, expert=True))


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"])
def test_what_each_gpu_reads_and_computes_equals_tp_inside_the_experts(name: str) -> None:
    """At R = T the routed experts' expected bytes per GPU (X (E/R)(1 - (1 - k/E)^B)) and every FLOP per GPU equal
    tensor parallelism inside the experts; the shared weights differ by the shared experts' (1 - 1/T) part only
    (replicated under EP); the KV per GPU is the same."""
    model = get_model(name)
    T = 8 if model.num_experts % 8 == 0 else 4
    tp = Deployment(model, H200, T).cost_terms()
    ep = Deployment(model, H200, Parallelism(T, expert=True)).cost_terms()
    for B in (1, 7, 256):
        mine = model.routed_expert_bytes * f.experts_touched_per_rank(
            num_experts=model.num_experts, experts_per_token=model.num_experts_per_tok, expert_parallel_size=T, batch=B)
        assert ep["routed_expert_bytes"] * f.experts_touched(
            num_experts=model.num_experts, experts_per_token=model.num_experts_per_tok, batch=B) == mine
        assert tp["routed_expert_bytes"] * f.experts_touched(
            num_experts=model.num_experts, experts_per_token=model.num_experts_per_tok, batch=B) == mine
    for key in ("flops_per_token", "attention_flops_per_token", "kv_bytes_per_token"):
        assert ep[key] == tp[key]
    shared = Fraction(model.shared_expert_bytes)
    assert ep["weight_bytes"] - tp["weight_bytes"] == shared * (1 - Fraction(1, T))
    assert (shared > 0) == (name == "deepseek-v3")


def test_communication_replaces_the_moe_all_reduce_and_keeps_the_attention_one():
    """DeepSeek-V3 on 8 H200: EP's communication of n tokens = TP's 2 L all-reduces minus L_moe of them, plus L_moe
    all-gathers and 2 L_moe all-to-alls; the dense model keeps all its all-reduces."""
    tp, ep = (RooflineCostModel.for_deployment(d) for d in _deployments(8))
    link = H200.link(8)
    beta, alpha = Fraction(link.bandwidth.value), Fraction(link.latency.value)
    L, L_moe, h, e = 61, 58, 7168, 2
    for n in (1, 3, 256):
        ring = dict(message_bytes=n * h * e, tensor_parallel_size=8, link_bandwidth=beta, link_latency=alpha)
        a2a = f.alltoall_time(batch=n, hidden_size=h, activation_bytes=e, num_experts=256, experts_per_token=8,
                              expert_parallel_size=8, scale_up_bandwidth=beta, scale_up_latency=alpha, node_gpus=8,
                              network_bandwidth=1, network_latency=0)
        assert tp.allreduce_time(n) == 2 * L * f.ring_allreduce_time(**ring)
        assert ep.allreduce_time(n) == (tp.allreduce_time(n) - L_moe * f.ring_allreduce_time(**ring)
                                        + L_moe * f.ring_allgather_time(**ring) + 2 * L_moe * a2a)
    assert f.ring_allgather_time(message_bytes=n * h * e, tensor_parallel_size=8, link_bandwidth=beta,
                                 link_latency=alpha) * 2 == f.ring_allreduce_time(**ring)


@pytest.mark.parametrize("T", [2, 4, 8])
def test_the_cost_models_decode_step_is_the_registered_ep_step_time(T: int) -> None:
    """Every decode step of the EP cost model equals step_time_ep of its per-GPU terms, exactly."""
    d = Deployment(DSV3, H200, Parallelism(T, expert=True))
    cost = RooflineCostModel.for_deployment(d)
    t = d.cost_terms()
    ar = d.allreduce_terms()
    for B, S in ((1, 0), (1, 4096), (64, 64 * 2048), (256, 0)):
        weights = t["weight_bytes"] + t["routed_expert_bytes"] * f.experts_touched(
            num_experts=256, experts_per_token=8, batch=B)
        expected = f.step_time_ep(
            batch=B, context_sum=S, weight_bytes=weights, kv_bytes_per_token=t["kv_bytes_per_token"],
            flops_per_token=t["flops_per_token"], attention_flops_per_token=t["attention_flops_per_token"],
            bandwidth=t["bandwidth"], peak_flops=t["peak_flops"], overhead=0, num_hidden_layers=61, num_moe_layers=58,
            tensor_parallel_size=T, hidden_size=7168, activation_bytes=2, num_experts=256, experts_per_token=8,
            expert_parallel_size=T, link_bandwidth=ar["link_bandwidth"], link_latency=ar["link_latency"],
            scale_up_bandwidth=ar["link_bandwidth"], scale_up_latency=ar["link_latency"], node_gpus=T,
            network_bandwidth=1, network_latency=0)
        assert cost.decode_time(B, S) == expected


def test_at_one_gpu_expert_parallelism_changes_nothing():
    """--enable-expert-parallel at T = 1 is accepted and prices exactly the one-GPU deployment; step_time_ep at
    R = T = 1 is step_time."""
    qwen = get_model("qwen3-30b-a3b")
    one = RooflineCostModel.for_deployment(Deployment(qwen, H200))
    ep = RooflineCostModel.for_deployment(Deployment(qwen, H200, Parallelism(1, expert=True)))
    assert [ep.decode_time(b, 100 * b) for b in (1, 9, 300)] == [one.decode_time(b, 100 * b) for b in (1, 9, 300)]


def test_stretch_clock_equals_step_clock_for_an_ep_deployment():
    """DeepSeek-V3 on 8 H200 with EP: serve_continuous on the event engine (stretch clock) equals the step engine,
    field by field, separate and chunked prefill; the stretch terms' link latency + slope x n is the cost model's
    communication of n tokens."""
    cost = RooflineCostModel.for_deployment(_deployments(8)[1])
    terms = cost.stretch_terms()
    assert not isinstance(terms, str)
    for n in (1, 2, 5, 256, 8192):
        assert terms.link_latency + terms.link_per_token * n == cost.allreduce_time(n)
    reqs = [Request(id=i, arrival_s=Fraction(i, 200), prompt_tokens=30 + 7 * i, output_tokens=5 + 3 * i)
            for i in range(8)]
    for kw in ({}, {"prefill": "chunked", "max_num_batched_tokens": 64, "max_num_seqs": 4}):
        a = serve_continuous(reqs, cost, engine="event", record_steps=True, **kw)
        b = serve_continuous(reqs, cost, engine="step", record_steps=True, **kw)
        assert_same_results(a, b)


@settings(max_examples=60, deadline=None)
@given(per=st.integers(1, 4), R=st.integers(2, 4), data=st.data())
def test_small_ep_cost_models_run_on_the_stretch_clock(per: int, R: int, data: st.DataObject) -> None:
    """Generated small EP cost models and workloads: the event engine equals the step engine."""
    E = per * R
    cost = RooflineCostModel(
        weight_bytes=data.draw(st.integers(1, 80)), kv_bytes_per_token=data.draw(st.integers(0, 9)),
        flops_per_token=data.draw(st.integers(1, 60)), attention_flops_per_token=1,
        bandwidth=data.draw(st.integers(1, 20)),
        peak_flops=data.draw(st.integers(1, 40)), routed_expert_bytes=data.draw(st.integers(0, 30)), num_experts=E,
        experts_per_token=data.draw(st.integers(1, E)), tensor_parallel_size=R, num_hidden_layers=3,
        hidden_size=data.draw(st.integers(1, 16)), link_bandwidth=data.draw(st.integers(1, 50)),
        link_latency=data.draw(st.sampled_from([0, Fraction(1, 100), Fraction(3, 7)])), expert_parallel_size=R,
        num_moe_layers=data.draw(st.integers(0, 3)), node_gpus=data.draw(st.integers(1, R)),
        scale_up_bandwidth=data.draw(st.integers(1, 50)),
        scale_up_latency=data.draw(st.sampled_from([0, Fraction(1, 7)])),
        network_bandwidth=data.draw(st.integers(1, 9)), network_latency=data.draw(st.sampled_from([0, Fraction(1, 3)])))
    n = data.draw(st.integers(1, 6))
    reqs = [Request(id=i, arrival_s=Fraction(data.draw(st.integers(0, 20)), 4),
                    prompt_tokens=data.draw(st.integers(1, 20)), output_tokens=data.draw(st.integers(1, 12)))
            for i in range(n)]
    reqs.sort(key=lambda r: r.arrival_s)
    assert_same_results(serve_continuous(reqs, cost, engine="event", record_steps=True),
                        serve_continuous(reqs, cost, engine="step", record_steps=True))


def test_refusals_by_name():
    """A dense model, ranks that do not divide E, a non-bool flag; a cost model's EP on a dense model or without its
    tensor-parallel group; the formulas' relation (R dividing E)."""
    with pytest.raises(InvalidValueError, match="dense model") as err:
        Deployment(get_model("llama-3.1-8b"), H200, Parallelism(2, expert=True))
    assert err.value.field == "enable_expert_parallel"
    with pytest.raises(InvalidValueError, match=r"num_experts=8 of mixtral-8x7b is not divisible by the 16") as err:
        Deployment(get_model("mixtral-8x7b"), H200, Parallelism(16, expert=True))
    assert err.value.field == "enable_expert_parallel"
    with pytest.raises(InvalidValueError) as err:
        Parallelism(2, expert="yes")  # type: ignore[arg-type]
    assert err.value.field == "enable_expert_parallel"
    base = dict(weight_bytes=10, kv_bytes_per_token=1, flops_per_token=1, attention_flops_per_token=0, bandwidth=1,
                peak_flops=1, tensor_parallel_size=2, num_hidden_layers=2, hidden_size=4, expert_parallel_size=2)
    with pytest.raises(InvalidValueError, match="dense model") as err:
        RooflineCostModel(**base)
    assert err.value.field == "expert_parallel_size"
    with pytest.raises(InvalidValueError, match="tensor-parallel group") as err:
        RooflineCostModel(**dict(base, tensor_parallel_size=1), num_experts=4, experts_per_token=1)
    with pytest.raises(InvalidValueError, match="dividing num_experts") as err:
        RooflineCostModel(**dict(base, expert_parallel_size=3, tensor_parallel_size=3), num_experts=4,
                          experts_per_token=1, num_moe_layers=1)
    assert err.value.field == "expert_parallel_size"
    with pytest.raises(InvalidValueError, match="dividing num_experts"):
        f.ranks_reached(num_experts=10, experts_per_token=2, expert_parallel_size=4)
    with pytest.raises(InvalidValueError, match="num_moe_layers <= num_hidden_layers"):
        RooflineCostModel(**base, num_experts=4, experts_per_token=1, num_moe_layers=3)
    with pytest.raises(InvalidValueError, match="pipeline") as err:
        Deployment(get_model("qwen3-30b-a3b"), H200, Parallelism(2, pipeline=2, expert=True))
    assert err.value.field == "enable_expert_parallel"


def test_the_estimate_api_prices_the_same_ep_step():
    """roofline.estimate.decode_step of an EP deployment is the cost model's decode step, its communication the
    registered decode_comm_time_ep, split into latency and bandwidth parts that add up to it."""
    from roofline import estimate

    for T in (8, 16):
        d = Deployment(DSV3, H200, Parallelism(T, expert=True))
        cost = RooflineCostModel.for_deployment(d)
        for B in (1, 256):
            s = estimate.decode_step(d, batch=B, context=1000)
            assert s.step_time == cost.decode_time(B, 1000 * B)
            assert s.allreduce_time == cost.allreduce_time(B)
            assert s.allreduce_latency_time + s.allreduce_bandwidth_time == s.allreduce_time
            assert s.allreduce_latency_time == cost.stretch_terms().link_latency


def test_report_and_simulate_take_the_flag(capsys):
    """report prints the experts per GPU and the dispatch/combine bytes and time (text and JSON); a dense model
    is refused in one line naming the field; simulate runs an EP deployment."""
    import json

    from roofline.cli import main

    args = ["--model", "deepseek-v3", "--accelerator", "h200", "--tensor-parallel-size", "8"]
    assert main(["report", *args, "--enable-expert-parallel"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "32 whole routed experts per GPU (8 ranks); a token reaches 5.295 ranks, 4.633 remote" in text
    assert "all-to-all 2,125.3 kB sent per GPU, 5.32 us each; dispatch + combine 617.46 us per step" in text
    assert main(["report", "--json", *args, "--enable-expert-parallel"]) == 0
    ep = json.loads(capsys.readouterr().out)["tensor_parallel"]["expert_parallel"]
    assert ep["experts_per_gpu"] == 32 and ep["batch_1"]["dispatch_and_combine_per_step_s"] == pytest.approx(71.74e-6,
                                                                                                           rel=1e-3)
    assert main(["report", *args]) == 0
    assert "expert parallelism" not in capsys.readouterr().out
    assert main(["report", "--model", "llama-3.1-8b", "--tp", "2", "--enable-expert-parallel"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--enable-expert-parallel: llama-3.1-8b is a dense model" in err[0]
    assert main(["simulate", *args, "--enable-expert-parallel", "--num-prompts", "4", "--random-input-len", "64",
                 "--random-output-len", "8"]) == 0
    assert "(tensor and expert parallel: KV pool per GPU, all-reduces, all-gathers and all-to-alls" in \
        " ".join(capsys.readouterr().out.split())
    assert main(["simulate", "--json", *args, "--enable-expert-parallel", "--num-prompts", "4",
                 "--random-input-len", "64", "--random-output-len", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["enable_expert_parallel"] is True


# ---------------------------------------------------------------- the most loaded rank (roofline.expert_load)
def _brute_max_load(E, k, R, B):
    """E[max_r N_r] by listing every step of B tokens (each a k-subset of the E experts, equally likely)."""
    subsets = list(itertools.combinations(range(E), k))
    total = 0
    for picks in itertools.product(subsets, repeat=B):
        total += max(sum(1 for s in picks if any(e // (E // R) == r for e in s)) for r in range(R))
    return Fraction(total, len(subsets) ** B)


def test_most_loaded_rank_by_hand():
    """E = 4, k = 2, R = 2 (experts {0, 1} | {2, 3}): a token reaches both ranks with probability 4/6, one given
    rank alone with 1/6. Two tokens: the most loaded rank holds 2 unless they reach different single ranks
    (2 x 1/6 x 1/6 = 1/18), so E[max] = 2 - 1/18 = 35/18."""
    from roofline.expert_load import expected_max_rank_load, reach_set_counts

    assert reach_set_counts(num_experts=4, experts_per_token=2, expert_parallel_size=2) == (0, 1, 4)
    assert expected_max_rank_load(num_experts=4, experts_per_token=2, expert_parallel_size=2, batch=2) == Fraction(
        35, 18)
    # one token: the most loaded rank is one it reaches; one rank or k = E: every token reaches every rank
    assert expected_max_rank_load(num_experts=256, experts_per_token=8, expert_parallel_size=8, batch=1) == 1
    assert expected_max_rank_load(num_experts=16, experts_per_token=2, expert_parallel_size=1, batch=5) == 5
    assert expected_max_rank_load(num_experts=4, experts_per_token=4, expert_parallel_size=4, batch=3) == 3


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([(4, 1, 2), (4, 2, 2), (6, 2, 3), (6, 3, 2), (8, 3, 4), (6, 1, 3), (8, 2, 2)]),
       st.integers(1, 3))
def test_most_loaded_rank_equals_brute_force(ekr, B):
    """The dynamic programme equals listing every step, and lies between the mean B (1 - q) and B."""
    from math import comb

    from roofline.expert_load import expected_max_rank_load

    E, k, R = ekr
    exact = expected_max_rank_load(num_experts=E, experts_per_token=k, expert_parallel_size=R, batch=B)
    assert exact == _brute_max_load(E, k, R, B)
    mean = B * (1 - Fraction(comb(E - E // R, k), comb(E, k)))
    assert mean <= exact <= B


def test_sampled_most_loaded_rank_agrees_with_the_exact_one_and_is_seeded():
    from roofline.expert_load import expected_max_rank_load, sampled_max_rank_load

    exact = expected_max_rank_load(num_experts=256, experts_per_token=8, expert_parallel_size=16, batch=3)
    mean, se = sampled_max_rank_load(num_experts=256, experts_per_token=8, expert_parallel_size=16, batch=3,
                                     trials=4000, seed=1)
    assert abs(mean - float(exact)) < 4 * se and 0 < se < 0.05
    again = sampled_max_rank_load(num_experts=256, experts_per_token=8, expert_parallel_size=16, batch=3,
                                  trials=4000, seed=1)
    assert again == (mean, se)


def test_most_loaded_rank_refuses_by_name():
    from roofline.expert_load import expected_max_rank_load, sampled_max_rank_load

    kw = dict(num_experts=256, experts_per_token=8, expert_parallel_size=8)
    with pytest.raises(InvalidValueError, match="batch=64.*count vectors exceed") as info:
        expected_max_rank_load(**kw, batch=64)
    assert info.value.field == "batch"
    with pytest.raises(InvalidValueError, match="expert_parallel_size=3.*does not divide num_experts=256"):
        expected_max_rank_load(**{**kw, "expert_parallel_size": 3}, batch=2)
    with pytest.raises(InvalidValueError, match="experts_per_token=9.*exceeds num_experts=8"):
        expected_max_rank_load(num_experts=8, experts_per_token=9, expert_parallel_size=2, batch=2)
    with pytest.raises(InvalidValueError, match="trials"):
        sampled_max_rank_load(**kw, batch=2, trials=1)
