"""Pipeline parallelism and groups that span nodes: stages, sends, the hierarchical all-reduce, the cost model.

Conventions: docs/conventions.md, "Groups that span nodes" and "Pipeline parallelism".
"""

from __future__ import annotations

from fractions import Fraction

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import Deployment, InvalidValueError, Parallelism, get_accelerator, get_model
from roofline.deployment import allreduce_terms, stage_layers
from roofline.sim import RooflineCostModel

US = Fraction(1, 10**6)
H100 = get_accelerator("h100-sxm")
L405 = get_model("llama-3.1-405b")
L70 = get_model("llama-3.1-70b")
NV = dict(link_bandwidth=Fraction(450 * 10**9), link_latency=Fraction(6, 10) * US)
IB = dict(network_bandwidth=Fraction(50 * 10**9), network_latency=Fraction(27, 10) * US)


def test_vllm_stage_split_by_hand():
    """get_pp_indices: L // P each, the L mod P left over to the stages before the last, from P - 2 down."""
    assert stage_layers(126, 2) == (63, 63)
    assert stage_layers(126, 4) == (31, 32, 32, 31)  # 2 left over: stages 2 and 1
    assert stage_layers(80, 3) == (27, 27, 26)  # 2 left over with P = 3: stages 1 and 0
    assert stage_layers(10, 4) == (2, 3, 3, 2)
    assert stage_layers(5, 5) == (1, 1, 1, 1, 1) and stage_layers(7, 1) == (7,)
    for L in range(1, 40):
        for P in range(1, L + 1):
            parts = stage_layers(L, P)
            assert sum(parts) == L and max(parts) - min(parts) <= 1 and parts[-1] == L // P


def test_pipeline_larger_than_the_layers_is_refused_by_name():
    with pytest.raises(InvalidValueError, match="pipeline_parallel_size=127.*126 layers") as info:
        Deployment(L405, H100, Parallelism(8, 127))
    assert info.value.field == "pipeline_parallel_size"
    with pytest.raises(InvalidValueError, match="pipeline_parallel_size"):
        Parallelism(1, 0)
    # a hybrid whose mixer does not say where its recurrent layers sit (built by hand): refused by name
    nemo = get_model("nemotron-h-8b")
    unplaced = attrs.evolve(nemo, state_mixer=attrs.evolve(nemo.state_mixer, layer_kinds=""))
    with pytest.raises(InvalidValueError, match="pipeline_parallel_size=2.*24 mamba2 layers sit is not held") as info:
        Deployment(unplaced, H100, Parallelism(1, 2))
    assert info.value.field == "pipeline_parallel_size"
    Deployment(unplaced, H100, Parallelism(1, 1))
    # a MoE family whose MoE layers' positions the package does not know, with some dense layers: refused
    mixtral = attrs.evolve(get_model("mixtral-8x7b"), num_moe_layers=30)
    with pytest.raises(InvalidValueError, match="pipeline_parallel_size=2.*30 MoE layers of 32.*'mixtral'") as info:
        Deployment(mixtral, H100, Parallelism(1, 2))
    assert info.value.field == "pipeline_parallel_size"
    Deployment(mixtral, H100, Parallelism(1, 1))  # one stage needs no positions


H200 = get_accelerator("h200-sxm")
V3 = get_model("deepseek-v3")


def _head_and_embedding(share):
    """(final norm + lm_head bytes, embedding bytes) of one GPU's share, from its tensor groups by name."""
    by = {g.name: share._group_bytes(g) * max(g.count, 1) for g in share.tensor_groups()}
    return by["final norm"] + by["lm_head"], by["embed_tokens"]


def test_dense_then_moe_stages_against_the_model_cut_to_their_layers():
    """DeepSeek-V3 TP 8 x PP 2: stage 0 = layers 0-30 (its 3 dense + 28 MoE), stage 1 = 31-60 (30 MoE); each stage's
    weights are those of the model cut to its layers (its own inventory, split over 8) less the end it lacks."""
    d = Deployment(V3, H200, Parallelism(8, 2))
    s0, s1 = d.stages()
    assert (s0.layers, s0.moe_layers, s1.layers, s1.moe_layers) == (31, 28, 30, 30)
    cut0 = attrs.evolve(V3, num_hidden_layers=31, num_moe_layers=28).per_gpu(8)
    cut1 = attrs.evolve(V3, num_hidden_layers=30, num_moe_layers=30).per_gpu(8)
    assert s0.weight_bytes == cut0.weight_bytes - _head_and_embedding(cut0)[0]
    assert s1.weight_bytes == cut1.weight_bytes - _head_and_embedding(cut1)[1]
    assert s0.flops_per_token == cut0.flops_per_token()[0] - 2 * cut0.lm_head_parameters
    assert s1.flops_per_token == cut1.flops_per_token()[0]
    assert (s0.routed_expert_bytes, s1.routed_expert_bytes) == (cut0.routed_expert_bytes, cut1.routed_expert_bytes)
    assert s1.shared_weight_bytes == cut1.shared_weight_bytes - _head_and_embedding(cut1)[1]
    assert (s0.kv_bytes_per_token, s1.kv_bytes_per_token) == (31 * 576 * 2, 30 * 576 * 2)  # MLA latent, BF16 KV
    # the step of one batch: the TP 8 step of the whole share + one send across the nodes (ranks 7 | 8)
    one = RooflineCostModel.for_deployment(Deployment(V3, H200, 8)).decode_time(256, 256 * 1000)
    send = Fraction(256 * 7168 * 2, 50 * 10**9) + Fraction(27, 10) * US
    assert RooflineCostModel.for_deployment(d).decode_time(256, 256 * 1000) == one + send


def test_interleaved_moe_stages_of_llama_4():
    """Llama 4 Maverick: MoE on every second layer ((i + 1) % 2 == 0, vLLM's llama4.py): 12 of each stage's 24."""
    m = get_model("llama-4-maverick")
    d = Deployment(m, H200, Parallelism(8, 2))
    s0, s1 = d.stages()
    assert (s0.moe_layers, s1.moe_layers) == (12, 12)
    cut = attrs.evolve(m, num_hidden_layers=24, num_moe_layers=12, tower_parameters=0).per_gpu(8)
    assert s1.weight_bytes == cut.weight_bytes - _head_and_embedding(cut)[1]
    assert d.stages()[0].weight_bytes - s1.weight_bytes == (
        _head_and_embedding(cut)[1] - _head_and_embedding(cut)[0] + m.per_gpu(8)._group_bytes_of("towers"))


def test_sliding_window_stages_hold_their_own_windows():
    """gpt-oss-120b, P = 4 of 9 layers: each stage keeps its layers' windows (even layers slide over 128 tokens);
    a stage's KV held at context c is the sum of min(c, w) over its layers, and the stages sum to the model's."""
    m = get_model("gpt-oss-120b")
    d = Deployment(m, H100, Parallelism(1, 4))
    stages = d.stages()
    assert [s.layer_windows for s in stages] == [m.layer_windows[i:i + 9] for i in (0, 9, 18, 27)]
    assert stages[0].layer_windows[:2] == (128, None)
    for c in (1, 100, 5000):
        assert stages[0].held_tokens(c) == 5 * min(c, 128) + 4 * c  # layers 0, 2, 4, 6, 8 slide
        assert stages[1].held_tokens(c) == 4 * min(c, 128) + 5 * c
        assert sum(s.held_tokens(c) for s in stages) * m.layer_kv_elements * m.kv_bytes_per_element == m.kv_bytes(c)


@settings(max_examples=40, deadline=None)
@given(P=st.integers(1, 61), dense=st.integers(0, 60), T=st.sampled_from([1, 8]))
def test_dense_first_stages_sum_to_the_share(P, dense, T):
    """Any split of DeepSeek-V3 cut to `dense` dense layers first: the stages' MoE layers are those at index >= dense,
    and their weights, FLOPs, KV per token and routed-expert bytes sum to one GPU's share of T."""
    m = attrs.evolve(V3, num_moe_layers=61 - dense)
    d = Deployment(m, H200, Parallelism(T, P))
    share, stages = d.share, d.stages()
    starts = [s.first_layer for s in stages]
    assert [s.moe_layers for s in stages] == [sum(1 for i in range(a, a + s.layers) if i >= dense)
                                              for a, s in zip(starts, stages, strict=True)]
    assert sum(s.weight_bytes for s in stages) == share.weight_bytes
    assert sum(s.flops_per_token for s in stages) == share.flops_per_token()[0]
    assert sum(s.kv_bytes_per_token for s in stages) == share.kv_bytes_per_token
    assert sum(s.routed_expert_bytes for s in stages) == share.routed_expert_bytes
    assert sum(s.shared_weight_bytes for s in stages) == share.shared_weight_bytes


def test_report_prices_each_dense_then_moe_stage_from_its_own_layers(capsys):
    """`report -pp 2` of DeepSeek-V3: the slowest stage at B = 256 by hand, its MoE layers' experts touched."""
    import json

    from roofline.cli import main

    assert main(["report", "--model", "deepseek-v3", "--accelerator", "h200-sxm", "--tp", "8", "-pp", "2",
                 "--batch", "256", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pipe = doc["pipeline"] if "pipeline" in doc else doc
    row = next(r for r in pipe["rows"] if r["batch_per_virtual_engine"] == 256)
    d = Deployment(V3, H200, Parallelism(8, 2))
    share, a = d.share, H200
    touched = 256 * (1 - Fraction(248, 256) ** 256)
    ring = 2 * Fraction(7, 8) * 256 * 7168 * 2 / Fraction(450 * 10**9) + 2 * 7 * Fraction(6, 10) * US

    def stage(s, send):
        mem = (s.shared_weight_bytes + s.routed_expert_bytes * touched + s.kv_bytes_per_token * 256 * 1000)
        comp = 256 * s.flops_per_token + s.attention_flops_per_token * 256 * 1000
        peak = Fraction(a.peak(share.compute_dtype))
        return max(mem / Fraction(a.bandwidth), comp / peak) + 2 * s.layers * ring + send

    s0, s1 = d.stages()
    hand = max(stage(s0, Fraction(256 * 7168 * 2, 50 * 10**9) + Fraction(27, 10) * US), stage(s1, 0))
    assert row["slowest_stage_s"] == pytest.approx(float(hand), rel=1e-12)


def test_gpus_are_t_times_p_and_stages_sum_to_the_share():
    """Per-stage sizes of one GPU sum to the share of T alone: weights, KV per token and FLOPs per token."""
    d = Deployment(L405, H100, Parallelism(4, 4))
    assert d.gpus == 16 and d.virtual_engines == 4 and d.where == "16 x NVIDIA H100 SXM5 80GB (TP 4 x PP 4)"
    stages = d.stages()
    assert [s.layers for s in stages] == [31, 32, 32, 31] and [s.first_layer for s in stages] == [0, 31, 63, 95]
    share = L405.per_gpu(4)
    assert sum(s.weight_bytes for s in stages) == share.weight_bytes
    assert sum(s.kv_bytes_per_token for s in stages) == share.kv_bytes_per_token
    assert sum(s.flops_per_token for s in stages) == share.step_terms()["flops_per_token"]
    # by hand: one layer of Llama 3.1 405B on one GPU of 4, BF16 (q, o: 16384 x 16384 / 4; k, v: 16384 x 1024 / 4;
    # MLP 3 x 16384 x 53248 / 4; two RMSNorms of 16384 replicated); the embedding 128256 / 4 rows on stage 0
    layer = 2 * (2 * 16384 * 16384 // 4 + 2 * 16384 * 1024 // 4 + 3 * 16384 * 53248 // 4 + 2 * 16384)
    emb = 2 * (128256 // 4) * 16384
    assert stages[0].weight_bytes == 31 * layer + emb
    assert stages[1].weight_bytes == 32 * layer
    assert stages[3].weight_bytes == 31 * layer + emb + 2 * 16384  # lm_head (same shape) + final norm
    assert stages[1].kv_bytes_per_token == 2 * 32 * 2 * 128 * 2  # 2 KV heads of 8 per GPU


def test_a_tied_lm_head_is_copied_onto_the_last_stage():
    m = get_model("llama-3.2-1b")
    d = Deployment(m, H100, Parallelism(1, 2))
    emb = 2 * m.vocab_size * m.hidden_size
    assert sum(s.weight_bytes for s in d.stages()) == m.weight_bytes + emb
    assert d.cost_terms()["weight_bytes"] == m.step_terms()["weight_bytes"] + emb


def test_boundaries_cross_nodes_where_the_ranks_do():
    """TP groups inside nodes of 8, stages in rank order: TP 2 x PP 8 crosses once (after stage 3)."""
    assert Deployment(L405, H100, Parallelism(2, 8)).pipeline_sends() == (6, 1)
    assert Deployment(L405, H100, Parallelism(8, 4)).pipeline_sends() == (0, 3)
    assert Deployment(L405, H100, Parallelism(16, 2)).pipeline_sends() == (0, 1)
    assert Deployment(L70, H100, Parallelism(2, 4)).pipeline_sends() == (3, 0)
    with pytest.raises(InvalidValueError, match="pipeline_parallel_size=2.*span 2 nodes.*no sourced network"):
        Deployment(L405, get_accelerator("a100-80gb"), Parallelism(8, 2)).send_terms()


def test_hierarchical_allreduce_by_hand():
    """32 KiB over 16 GPUs in 2 nodes of 8: 14 NVLink steps of 4 KiB, 2 InfiniBand steps of 2 KiB."""
    kw = dict(message_bytes=Fraction(32768), tensor_parallel_size=16, node_gpus=8, **NV, **IB)
    expected = (14 * Fraction(6, 10) * US + 14 * Fraction(4096) / (450 * 10**9)
                + 2 * Fraction(27, 10) * US + 2 * Fraction(2048) / (50 * 10**9))
    assert f.hierarchical_allreduce_time(**kw) == expected
    kw.pop("message_bytes")
    assert f.hierarchical_link_latency(**kw) == Fraction(46, 100) * US
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=12.*whole nodes"):
        f.hierarchical_allreduce_time(message_bytes=1, **dict(kw, tensor_parallel_size=12))


@given(t=st.sampled_from([1, 2, 4, 8]), m=st.fractions(min_value=0, max_value=10**9),
       beta=st.fractions(min_value=1, max_value=10**12), alpha=st.fractions(min_value=0, max_value=1),
       beta_n=st.fractions(min_value=1, max_value=10**12), alpha_n=st.fractions(min_value=0, max_value=1))
def test_one_node_is_the_ring_exactly(t, m, beta, alpha, beta_n, alpha_n):
    """At G = T the hierarchy is the ring, number for number; and any T = k G is the ring at the effective values."""
    ring = f.ring_allreduce_time(message_bytes=m, tensor_parallel_size=t, link_bandwidth=beta, link_latency=alpha)
    net = dict(network_bandwidth=beta_n, network_latency=alpha_n, link_bandwidth=beta, link_latency=alpha)
    assert f.hierarchical_allreduce_time(message_bytes=m, tensor_parallel_size=t, node_gpus=t, **net) == ring
    kw = dict(tensor_parallel_size=4 * t, node_gpus=t, **net)
    if 4 * t >= 2:
        eff = f.ring_allreduce_time(message_bytes=m, tensor_parallel_size=4 * t,
                                    link_bandwidth=f.hierarchical_link_bandwidth(**kw),
                                    link_latency=f.hierarchical_link_latency(**kw))
        assert eff == f.hierarchical_allreduce_time(message_bytes=m, **kw)


def test_groups_inside_a_node_keep_the_ring_and_larger_ones_are_hierarchical():
    for T in (2, 4, 8):
        terms = allreduce_terms(L70.per_gpu(T), H100, T)
        assert (terms["link_bandwidth"], terms["link_latency"]) == (NV["link_bandwidth"], NV["link_latency"])
    terms = allreduce_terms(L405.per_gpu(32), H100, 32)
    kw = dict(tensor_parallel_size=32, node_gpus=8, **NV, **IB)
    assert terms["link_bandwidth"] == f.hierarchical_link_bandwidth(**kw)
    assert terms["link_latency"] == f.hierarchical_link_latency(**kw)
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=16.*no sourced network"):
        allreduce_terms(L70.per_gpu(16), get_accelerator("a100-80gb"), 16)


def test_pipeline_formulas_by_hand():
    send = f.pipeline_send_time(batch=4, hidden_size=16384, activation_bytes=2, send_bandwidth=Fraction(50 * 10**9),
                                send_latency=Fraction(27, 10) * US)
    assert send == Fraction(4 * 32768, 50 * 10**9) + Fraction(27, 10) * US
    sends = f.pipeline_sends_time(batch=4, hidden_size=16384, activation_bytes=2, intra_node_sends=2,
                                  inter_node_sends=1, send_bandwidth=Fraction(450 * 10**9),
                                  send_latency=Fraction(6, 10) * US, **IB)
    assert sends == 2 * (Fraction(4 * 32768, 450 * 10**9) + Fraction(6, 10) * US) + send
    assert f.pipeline_bubble_share(batches_in_flight=1, pipeline_parallel_size=4) == Fraction(3, 4)
    assert f.pipeline_bubble_share(batches_in_flight=4, pipeline_parallel_size=4) == 0
    with pytest.raises(InvalidValueError, match="batches_in_flight=5"):
        f.pipeline_bubble_share(batches_in_flight=5, pipeline_parallel_size=4)
    assert f.slowest_stage_throughput(batch=Fraction(8), stage_time=Fraction(1, 100)) == 800


def _step_kw(d: Deployment, batch: int, context_sum: int) -> dict:
    terms = {"tensor_parallel_size": 1, "link_bandwidth": 1, "link_latency": 0, **d.cost_terms(), **d.send_terms()}
    names = [n for n in f.REGISTRY["step_time_pp"].domains if n not in ("batch", "context_sum")]
    exact = {n: terms[n] if n in _INTS else Fraction(terms[n]) for n in names}
    return dict(exact, batch=batch, context_sum=context_sum)


_INTS = ("num_hidden_layers", "hidden_size", "tensor_parallel_size", "intra_node_sends", "inter_node_sends")


def test_tp8_pp2_batch_1_by_hand():
    """Llama 3.1 405B, TP 8 x PP 2 on two H100 nodes, batch 1 at 1,000: T = 8's memory time + 252 NVLink
    all-reduces + one send over InfiniBand: 32.46 ms."""
    d = Deployment(L405, H100, Parallelism(8, 2))
    share = L405.per_gpu(8)
    memory = Fraction(share.weight_bytes + 1000 * share.kv_bytes_per_token, 3_350 * 10**9)
    ar = 252 * (14 * Fraction(6, 10) * US + Fraction(14, 8) * 32768 / (450 * 10**9))
    send = Fraction(32768, 50 * 10**9) + Fraction(27, 10) * US
    t = RooflineCostModel.for_deployment(d).decode_time(1, 1000)
    assert t == memory + ar + send == f.step_time_pp(**_step_kw(d, 1, 1000))
    assert round(float(t) * 1e3, 2) == 32.46


@settings(max_examples=30, deadline=None)
@given(tp=st.sampled_from([(1, 2), (2, 2), (8, 2), (4, 4), (2, 8), (16, 2), (8, 8)]),
       batch=st.integers(1, 512), context=st.integers(0, 4096))
def test_the_cost_model_prices_one_virtual_engine_as_step_time_pp(tp, batch, context):
    """decode_time of a P > 1 deployment == step_time_pp; its stretch terms carry the sends as link terms."""
    d = Deployment(L405, H100, Parallelism(*tp))
    cm = RooflineCostModel.for_deployment(d)
    kw = _step_kw(d, batch, batch * context)
    assert cm.decode_time(batch, batch * context) == f.step_time_pp(**kw)
    terms = cm.stretch_terms()
    sends = f.pipeline_sends_time(**{n: kw[n] for n in f.REGISTRY["pipeline_sends_time"].domains})
    ar = 0 if tp[0] == 1 else f.decode_allreduce_time(**{n: kw[n] for n in f.REGISTRY["decode_allreduce_time"].domains})
    assert terms.link_latency + terms.link_per_token * batch == ar + sends


def test_kv_blocks_are_the_least_over_stages_and_each_virtual_engine_gets_1_over_p():
    d = Deployment(L405, H100, Parallelism(4, 4))
    budget = Fraction(9, 10) * Fraction(H100.usable_memory)
    per_stage = [int((budget - s.weight_bytes) // (16 * s.kv_bytes_per_token)) for s in d.stages()]
    assert d.kv_blocks() == min(per_stage) == per_stage[1]  # a 32-layer stage holds the least
    assert d.virtual_engine_kv_blocks() == d.kv_blocks() // 4
    assert Deployment(L405, H100, 8).kv_blocks() == 0  # 101.5 GB per GPU: no room on one node


def test_the_estimate_api_prices_the_pipeline_as_the_cost_model():
    from roofline import estimate

    for tp in ((8, 2), (4, 4), (1, 2)):
        d = Deployment(L405, H100, Parallelism(*tp))
        s = estimate.decode_step(d, batch=3, context=700)
        assert s.step_time == RooflineCostModel.for_deployment(d).decode_time(3, 2100)
        assert s.pipeline_parallel_size == tp[1] and s.send_time == f.pipeline_sends_time(
            batch=3, **d.send_terms())


def test_report_prints_the_stages_the_sends_and_the_pipelines_throughput(capsys):
    from roofline.cli import main

    assert main(["report", "--model", "llama-3.1-405b", "--tp", "8", "-pp", "2"]) == 0
    text = capsys.readouterr().out
    assert "      0    0-62  (63)     50.74 GB      32,256       25.80 GB     49,992" in text
    assert "1 across nodes (InfiniBand NDR (ConnectX-7))" in text
    assert "       1   32.461 ms   3.36 us           31           62" in text  # 1 / 32.461 ms, x 2 in flight
    assert all(len(line) <= 100 for line in text.splitlines())
    # the deployment's normal report first, its sizes one GPU of each stage together, then the pipeline section
    assert text.startswith("roofline report: llama-3.1-405b (weights bfloat16, KV bfloat16) on 16 x NVIDIA H100")
    assert text.index("One request at a time") < text.index("Pipeline parallelism: llama-3.1-405b on 16 x")
    assert "Memory of one GPU per stage (2 GPUs together): 158.4 GiB usable x 0.9 = 153.07 GB" in text
    assert main(["report", "--model", "llama-3.1-405b", "--tp", "8", "-pp", "2", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    d = Deployment(L405, H100, Parallelism(8, 2))
    assert doc["pipeline"]["kv"]["blocks"] == d.kv_blocks() == doc["kv"]["upper_bound_budget"]["blocks"]
    assert doc["pipeline"]["batch_1"]["largest_communication_term"] == "all-reduces"
    assert doc["memory"]["fits"] and doc["single_with_kv"]["step_time_s"] == doc["pipeline"]["batch_1"]["step_time_s"]


def test_kv_budget_for_a_pipeline_is_the_tightest_stage_in_the_shares_layout():
    """kv_budget_for at P > 1: min_s b_s x k / k_s, b_s = usable x 0.9 - stage s's weights: with 63 | 63 layers
    (k_s = k / 2) twice the tighter stage's budget; a stage its weights fill is refused, naming it."""
    from roofline.errors import NoKVBudgetError
    from roofline.estimate import kv_budget_for, kv_capacity

    d = Deployment(L405, H100, Parallelism(8, 2))
    room = [Fraction(H100.usable_memory) * Fraction(9, 10) - s.weight_bytes for s in d.stages()]
    assert kv_budget_for(d) == 2 * min(room)
    uneven = Deployment(L405, H100, Parallelism(4, 4))  # 31, 32, 32, 31 layers
    k = uneven.share.kv_bytes_per_token
    by_hand = min((Fraction(H100.usable_memory) * Fraction(9, 10) - s.weight_bytes) * k / s.kv_bytes_per_token
                  for s in uneven.stages())
    assert kv_budget_for(uneven) == by_hand
    assert kv_capacity(uneven, budget=by_hand, context=1000).blocks == uneven.kv_blocks()
    with pytest.raises(NoKVBudgetError, match="stage 0's weights.*layers 0-62"):
        kv_budget_for(Deployment(L405, H100, Parallelism(4, 2)))


def test_simulate_refuses_what_a_pipeline_run_does_not_model_by_name(capsys):
    """-pp 2 with --kv-budget-gb, or beside -dp 2 with --policy static: one line naming the flag, exit 2."""
    from roofline.cli import main

    base = ["simulate", "--model", "llama-3.1-70b", "--tp", "2", "-pp", "2", "--num-prompts", "2"]
    assert main([*base, "--data-parallel-size", "2", "--policy", "static"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--data-parallel-size" in err and "--policy static" in err
    assert main([*base, "--kv-budget-gb", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--kv-budget-gb" in err and "--gpu-memory-utilization" in err


def test_fit_lists_t_times_p_and_answers_with_the_smallest(capsys):
    from roofline.cli import main
    from roofline.commands.fit import build_fit, format_fit

    r = build_fit(L405, H100, context=131_072)
    pairs = [(row["tensor_parallel_size"], row["pipeline_parallel_size"]) for row in r["rows"]]
    assert max(t * p for t, p in pairs) == 64 and (8, 8) in pairs and (16, 4) in pairs
    assert (r["smallest_fitting"], r["smallest_fitting_pipeline"]) == (16, 1)  # 16 GPUs, the fastest of them
    by = {(row["tensor_parallel_size"], row["pipeline_parallel_size"]): row for row in r["rows"]}
    assert by[(8, 1)]["status"] == "does not fit" and by[(8, 2)]["status"] == "fits"
    assert by[(8, 2)]["stage_layers"] == [63, 63] and by[(8, 2)]["pipeline_sends"] == [0, 1]
    assert by[(8, 2)]["kv_limit"]["batch_per_virtual_engine"] == by[(8, 2)]["sequences_blocks"] // 2
    assert by[(2, 8)]["status"] == "does not fit"  # 5 sequences over 8 virtual engines: none per engine
    text = format_fit(r)
    assert "answer: llama-3.1-405b fits on 16 x NVIDIA H100 SXM5 80GB (--tensor-parallel-size 16)" in text
    assert all(len(line) <= 100 for line in text.splitlines())
    only_pp = build_fit(L405, H100, sizes=[8], pipeline_sizes=[1, 2, 4])
    assert (only_pp["smallest_fitting"], only_pp["smallest_fitting_pipeline"]) == (8, 2)
    assert "(--tensor-parallel-size 8 --pipeline-parallel-size 2)" in " ".join(format_fit(only_pp).split())
    assert main(["fit", "--model", "llama-3.1-70b", "--accelerator", "a100-80gb", "--tp", "8", "-pp", "2"]) == 0
    assert "8 x 2  | refused: pipeline_parallel_size=2" in capsys.readouterr().out


@pytest.mark.parametrize("router", [None, "round-robin", "least-kv"])
def test_simulate_serves_d_replicas_of_a_pipeline_on_d_times_p_virtual_engines(capsys, router):
    """`simulate -pp 2 -dp 2`: 4 virtual engines of T = 2 GPUs (8 GPUs), each with one virtual engine's KV, behind one
    router (least-requests unless given), equal to serve_replicas of the Deployment on both clocks, and to
    serve_replicas of its cost model over 4."""
    import json

    from roofline.cli import main as cli_main
    from roofline.sim import KVPool, load_trace, serve_replicas, shipped_trace

    args = ["simulate", "--model", "llama-3.1-70b", "--tp", "2", "-pp", "2", "-dp", "2", "--limit", "40", "--json"]
    assert cli_main([*args, *(["--router", router] if router else [])]) == 0
    out = json.loads(capsys.readouterr().out)
    row = out["results"][0]
    d = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), Parallelism(tensor=2, pipeline=2, data=2))
    blocks = d.virtual_engine_kv_blocks(block_size=16, utilization=Fraction(9, 10))
    assert out["kv_pool"]["capacity_blocks"] == blocks
    dp = row["data_parallel"]
    assert (dp["router"], dp["data_parallel_size"], dp["gpus_per_replica"], dp["gpus"]) == (
        router or "least-requests", 4, 2, 8)
    requests = load_trace(shipped_trace("conv"))[:40]
    pool = KVPool.blocks(blocks, block_size=16)
    kw = dict(router=router or "least-requests", kv_pool=pool, max_model_len=131072)
    runs = [serve_replicas(requests, d, engine=engine, **kw) for engine in ("event", "step")]
    assert runs[0].whole.requests == runs[1].whole.requests and runs[0].whole.summary == runs[1].whole.summary
    assert (runs[0].data_parallel_size, runs[0].gpus_per_replica, runs[0].gpus) == (4, 2, 8)
    by_cost = serve_replicas(requests, RooflineCostModel.for_deployment(d), data_parallel_size=4, gpus_per_replica=2,
                             **kw)
    assert by_cost.whole.requests == runs[0].whole.requests and by_cost.assignment == runs[0].assignment
    assert [x["requests"] for x in dp["replicas"]] == [x.requests for x in runs[0].loads]
    assert row["summary"]["ttft"]["p99"] == pytest.approx(float(runs[0].whole.summary.ttft.p99))
    assert row["summary"]["completed"] == runs[0].whole.summary.completed
    with pytest.raises(InvalidValueError, match="data_parallel_size=4.*D = 2"):
        serve_replicas(requests, d, data_parallel_size=4)


def test_simulate_serves_a_pipeline_on_p_virtual_engines(capsys):
    """`simulate -pp 2` runs 2 virtual engines (vLLM V0) of a blocks // 2 pool each, least-requests routed, and equals
    serve_replicas on the deployment's cost model, on both clocks."""
    import json

    from roofline.cli import main as cli_main
    from roofline.sim import KVPool, load_trace, serve_replicas, shipped_trace

    args = ["simulate", "--model", "llama-3.1-70b", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2",
            "--limit", "60"]
    assert cli_main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = out["results"][0]
    d = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), Parallelism(tensor=2, pipeline=2))
    blocks = d.virtual_engine_kv_blocks(block_size=16, utilization=Fraction(9, 10))
    assert blocks == d.kv_blocks(block_size=16, utilization=Fraction(9, 10)) // 2
    assert out["kv_pool"]["capacity_blocks"] == blocks
    assert row["data_parallel"]["router"] == "least-requests" and row["data_parallel"]["gpus"] == 4
    requests = load_trace(shipped_trace("conv"))[:60]
    pool = KVPool.blocks(blocks, block_size=16)
    cost = RooflineCostModel.for_deployment(d)
    runs = [serve_replicas(requests, cost, router="least-requests", data_parallel_size=2, gpus_per_replica=2,
                           kv_pool=pool, max_model_len=131072, engine=engine) for engine in ("event", "step")]
    assert runs[0].whole.requests == runs[1].whole.requests
    assert [r.handed_back_s for r in runs[0].whole.requests] == [r.handed_back_s for r in runs[1].whole.requests]
    assert row["summary"]["completed"] == len(requests) == sum(x["completed"] for x in row["data_parallel"]["replicas"])
    assert [x["requests"] for x in row["data_parallel"]["replicas"]] == [x.requests for x in runs[0].loads]
    assert cli_main([*args, "--policy", "static"]) == 2
    err = capsys.readouterr().err
    assert "virtual engines" in err and "--policy static" in err and len(err.strip().splitlines()) == 1


QNEXT = get_model("qwen3-next-80b-a3b")
NEMO = get_model("nemotron-h-8b")


def _cut(model, first, layers):
    """The hybrid ``model`` cut to its layers first .. first + layers - 1: its own inventory of those layers."""
    kinds = model.state_mixer.layer_kinds[first:first + layers]
    mixer = attrs.evolve(model.state_mixer, layers=kinds.count("r"), layer_kinds=kinds)
    mlp = kinds.count("m") if model.mixer_only else layers
    return attrs.evolve(model, num_hidden_layers=layers, state_mixer=mixer, mlp_only_layers=kinds.count("m"),
                        num_moe_layers=mlp if model.is_moe else 0)


def test_layer_kinds_are_read_from_the_configs():
    """Qwen3-Next: every 4th layer full attention (full_attention_interval 4); Nemotron-H 8B: its
    hybrid_override_pattern M-M-M-M*-... read character by character (M r, - m, * a)."""
    assert QNEXT.state_mixer.layer_kinds == "rrra" * 12
    assert NEMO.state_mixer.layer_kinds.startswith("rmrmrmram") and len(NEMO.state_mixer.layer_kinds) == 52
    with pytest.raises(InvalidValueError, match="layer_kinds.*3 mixer layers.*layers=2"):
        attrs.evolve(NEMO.state_mixer, layers=2, layer_kinds="rrra")
    with pytest.raises(InvalidValueError, match="layer_kinds"):
        attrs.evolve(NEMO.state_mixer, layer_kinds="rx")


@pytest.mark.parametrize("model, T, P", [(QNEXT, 2, 2), (QNEXT, 1, 3), (QNEXT, 4, 5), (NEMO, 1, 2), (NEMO, 1, 3),
                                         (NEMO, 1, 7)])
def test_hybrid_stages_against_the_model_cut_to_their_layers(model, T, P):
    """Each stage of a hybrid holds what the model cut to its layers holds (its attention layers' KV, its
    recurrent layers' state, their weights and FLOPs), less the ends it lacks: embedding off the first, head off
    the last."""
    d = Deployment(model, H100, Parallelism(T, P))
    stages = d.stages()
    share = d.share
    for stage in stages:
        if "a" not in model.state_mixer.layer_kinds[stage.first_layer:stage.first_layer + stage.layers]:
            # no attention layer: not a model of its own (refused), so by the per-layer state alone
            per_layer = Fraction(share.state_bytes_per_sequence, share.state_mixer.layers)
            assert stage.kv_bytes_per_token == 0 and stage.state_bytes == per_layer * stage.recurrent_layers
            continue
        cut = _cut(model, stage.first_layer, stage.layers).per_gpu(T)
        head, embedding = _head_and_embedding(cut)
        ends = (0 if stage.index == 0 else embedding) + (0 if stage.index == P - 1 else head)
        assert stage.weight_bytes == cut.weight_bytes - ends
        assert stage.kv_bytes_per_token == cut.kv_bytes_per_token
        assert stage.state_bytes == cut.state_bytes_per_sequence
        assert stage.recurrent_layers == cut.state_mixer.layers
        lm = 0 if stage.index == P - 1 else 2 * cut.lm_head_parameters
        assert stage.flops_per_token == cut.flops_per_token()[0] - lm
        assert stage.attention_flops_per_token == cut.flops_per_token()[1]
    assert sum(stage.state_bytes for stage in stages) == share.state_bytes_per_sequence
    assert sum(stage.kv_bytes_per_token for stage in stages) == share.kv_bytes_per_token
    assert sum(stage.weight_bytes for stage in stages) == share.weight_bytes


def test_hybrid_stage_pools_by_hand():
    """Qwen3-Next TP 2 x PP 2 on H100: 18 Gated DeltaNet + 6 attention layers a stage, 9.88 MB state, 6,144 B/token.

    Per GPU, a stage's state is 18 x (3 x 4,096 conv + 16 x 128 x 128 recurrent) x 2 bytes, its KV 6 layers x 2
    (K, V) x 1 KV head x 256 x 2 bytes per token."""
    d = Deployment(QNEXT, H100, Parallelism(2, 2))
    s0, s1 = d.stages()
    # per GPU at T = 2: 16 of 32 value heads, 8 of 16 key heads; conv (4 - 1) x (2 x 8 x 128 + 16 x 128)
    conv, ssm = 3 * (2 * 8 * 128 + 16 * 128), 16 * 128 * 128
    assert s0.state_bytes == s1.state_bytes == 18 * (conv + ssm) * 2 == 9_879_552
    assert s0.kv_bytes_per_token == 6 * 2 * 1 * 256 * 2 == 6144  # 2 KV heads / 2 = 1 per GPU, head_dim 256
    sigma = -(-9_879_552 // (16 * 6144))
    assert d.state_blocks(block_size=16) == sigma == 101
    budget = [Fraction(H100.usable_memory) * Fraction(9, 10) - stage.weight_bytes for stage in (s0, s1)]
    blocks = [int(b // (16 * 6144)) for b in budget]
    assert d.kv_blocks(block_size=16) == min(blocks)
    assert d.sequences_that_fit(4096) == min(n // (256 + 101) for n in blocks)


@settings(max_examples=12, deadline=None)
@given(P=st.integers(2, 12), context=st.integers(1, 200_000))
def test_one_virtual_engine_pool_never_holds_more_than_any_stage(P, context):
    """The pipeline's one pool (least blocks, most state blocks over the stages) holds no more sequences than the
    exact least over the stages, and equals it when the stages agree (Nemotron-H 8B, T = 1)."""
    try:
        d = Deployment(NEMO, H100, Parallelism(1, P))
        sigma = d.state_blocks(block_size=16)
    except InvalidValueError as e:  # a stage of Mamba2 layers only: refused by name
        assert e.field == "pipeline_parallel_size" and "no attention layer" in str(e)
        return
    pooled = d.kv_blocks(block_size=16) // (-(-context // 16) + sigma)
    exact = d.sequences_that_fit(context, block_size=16)
    assert pooled <= exact
    if len({(stage.kv_bytes_per_token, stage.state_bytes, stage.weight_bytes) for stage in d.stages()}) == 1:
        assert pooled == exact


def test_simulate_serves_a_hybrid_pipeline_with_state_blocks_on_both_clocks(capsys):
    """`simulate -pp 2` of Nemotron-H 8B: 2 virtual engines whose pool holds each sequence's state blocks, equal
    to serve_replicas on both clocks; no virtual engine's pool over its capacity."""
    import json

    from roofline.cli import main as cli_main
    from roofline.sim import KVPool, load_trace, serve_replicas, shipped_trace

    args = ["simulate", "--model", "nemotron-h-8b", "--pipeline-parallel-size", "2", "--limit", "40", "--json"]
    assert cli_main(args) == 0
    out = json.loads(capsys.readouterr().out)
    d = Deployment(NEMO, H100, Parallelism(1, 2))
    blocks = d.virtual_engine_kv_blocks(block_size=16, utilization=Fraction(9, 10))
    assert out["kv_pool"]["capacity_blocks"] == blocks
    pool = KVPool(blocks, 16, state_blocks=d.state_blocks(block_size=16))
    assert pool.state_blocks == 390  # ceil(12 x 4,255,744 B / (16 x 8,192 B)), hand: 51,068,928 / 131,072
    requests = load_trace(shipped_trace("conv"))[:40]
    cost = RooflineCostModel.for_deployment(d)
    runs = [serve_replicas(requests, cost, router="least-requests", data_parallel_size=2, gpus_per_replica=1,
                           kv_pool=pool, max_model_len=NEMO.max_position_embeddings, engine=engine)
            for engine in ("event", "step")]
    assert [r.handed_back_s for r in runs[0].whole.requests] == [r.handed_back_s for r in runs[1].whole.requests]
    row = out["results"][0]
    assert row["summary"]["completed"] == len(requests)
    assert [x["requests"] for x in row["data_parallel"]["replicas"]] == [x.requests for x in runs[0].loads]
    for load in runs[0].loads:
        assert 0 < load.peak_kv_blocks <= load.kv_capacity_blocks


def test_report_of_a_hybrid_pipeline_counts_its_state_blocks_and_reads_its_state():
    """Qwen3-Next TP 2 x PP 2, context 1,000: a sequence holds 63 KV blocks + 101 state blocks, so the
    pipeline's 373,065 blocks hold 2,274 sequences (not 373,065 // 63 = 5,921), 1,137 per virtual engine; each
    stage's own step reads its weights (experts touched), its KV and 2 B x its 9.88 MB state."""
    from roofline.commands._pipeline_report import _stage_time, build_pipeline_report

    d = Deployment(QNEXT, H100, Parallelism(2, 2))
    r = build_pipeline_report(d, context=1000, batches=[8])
    assert r["kv"]["blocks"] == d.kv_blocks() and r["kv"]["sequences"] == d.kv_blocks() // (63 + 101)
    assert r["kv"]["sequences_per_virtual_engine"] == d.virtual_engine_kv_blocks() // (63 + 101)
    st0 = d.stages()[0]
    touched = f.experts_touched(num_experts=512, experts_per_token=10, batch=8)
    mem = (st0.read_weight_bytes(touched) + 8 * 1000 * st0.kv_bytes_per_token + 2 * 8 * st0.state_bytes) / Fraction(
        H100.bandwidth)
    comp = f.compute_time(batch=8, context_sum=8 * 1000 * st0.layers, flops_per_token=st0.flops_per_token,
                          attention_flops_per_token=Fraction(st0.attention_flops_per_token, st0.layers),
                          peak_flops=Fraction(H100.peak(d.share.compute_dtype)))
    ar = f.decode_allreduce_time(batch=8, **dict(d.allreduce_terms(), num_hidden_layers=st0.layers))
    send = f.pipeline_send_time(batch=8, hidden_size=2048, activation_bytes=2, send_bandwidth=d.send_terms()[
        "send_bandwidth"], send_latency=d.send_terms()["send_latency"])
    assert _stage_time(d, 0, 8, 1000) == max(mem, comp) + ar + send
