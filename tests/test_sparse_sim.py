"""DeepSeek sparse attention in the scheduler: every step priced by roofline.formulas.sparse.

docs/conventions.md, "Sparse attention": a decode step costs sparse_step_time(B, S, R) with
R = sum min(c_i, K); a prefill or mixed step sparse_mixed_step_time with the chunks' capped pairs
Q_K (window_attention_pairs at w = K). The oracles here do not use the scheduler's sums: a hand
count on a tiny model with K = 4, K = 1 (every context >= 1, so R is the decode rows and Q_K the
prompt tokens), uniform contexts (R = B min(c, K)), and K above every context (the dense step at
k = k_m + k_i, a = a_m + a_i, whole runs equal).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import Deployment, ModelConfig, get_accelerator, get_model
from roofline.deployment import Parallelism
from roofline.errors import InvalidValueError, UnsupportedModelError
from roofline.sim import KVPool, Pool, Request, RooflineCostModel, serve_continuous, serve_serial, serve_static

H100 = get_accelerator("h100-sxm")


def tiny(index_topk: int = 4) -> ModelConfig:
    """A 2-layer DSA model: latent (16 + 8) x 2 B = 48 B a layer, indexer key 16 + 4 = 20 B a layer."""
    return ModelConfig(name="tiny-dsa", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                       num_attention_heads=4, num_key_value_heads=4, head_dim=24, vocab_size=100, q_lora_rank=16,
                       kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=2,
                       index_head_dim=16, index_topk=index_topk)


def _rates(cost: RooflineCostModel) -> dict:
    return dict(latent_bytes_per_token=cost.latent_bytes_per_token, index_bytes_per_token=cost.index_bytes_per_token,
                latent_attention_flops_per_token=cost.latent_attention_flops_per_token,
                index_flops_per_token=cost.index_flops_per_token, flops_per_token=cost.flops_per_token,
                bandwidth=Fraction(cost.bandwidth), peak_flops=Fraction(cost.peak_flops),
                overhead=Fraction(cost.overhead))


def _decode(cost, batch, S, R):
    return f.sparse_step_time(batch=batch, context_sum=S, capped_context_sum=R,
                              weight_bytes=cost.weights_read(batch), **_rates(cost))


def _mixed(cost, rows, S, R, T, p0, Q, QK):
    return f.sparse_mixed_step_time(decode_rows=rows, context_sum=S, capped_context_sum=R, prefill_tokens=T,
                                    cached_tokens=p0, attention_pairs=Q, capped_attention_pairs=QK,
                                    weight_bytes=cost.weights_read(rows + T), **_rates(cost))


def test_the_cost_model_carries_the_models_rates():
    """tiny: k_m = 2 x 24 x 2 = 96, k_i = 2 x 20 = 40, their sum the pool's 136 B a token; V3.2 on 8 H200: the
    share's 61 x 16 heads x 2,176 FLOPs of absorbed MLA, the indexer's 61 x 2 x 64 x 128 replicated."""
    cost = RooflineCostModel.for_model(tiny(), H100)
    assert (cost.index_topk, cost.latent_bytes_per_token, cost.index_bytes_per_token, cost.kv_bytes_per_token) == (
        4, 96, 40, 136)
    v32 = RooflineCostModel.for_deployment(Deployment(get_model("deepseek-v3.2"), get_accelerator("h200"), 8))
    assert (v32.latent_bytes_per_token, v32.index_bytes_per_token) == (61 * 1152, 61 * 132)
    assert (v32.latent_attention_flops_per_token, v32.index_flops_per_token) == (61 * 16 * 2176, 61 * 2 * 64 * 128)
    # 8 rows at 32,768 tokens: the MoE weights 8 tokens touch, the capped latents, all indexer keys, the all-reduce
    t = v32.decode_time(8, 8 * 32768, 8 * 2048)
    assert t == _decode(v32, 8, 8 * 32768, 8 * 2048) + v32.allreduce_time(8)
    assert t < v32.decode_time(8, 8 * 32768, 8 * 32768)  # the cap: fewer latents read


def test_a_serial_request_crossing_k_by_hand():
    """Prompt 3, output 4 on tiny (K = 4): prefill Q = 6 pairs, Q_K = 1 + 2 + 3 = 6; decode contexts 4, 5, 6
    read min(c, 4) = 4 latents each: bytes W + 96 x 4 + 40 c, FLOPs F + a_m 4 + a_i c."""
    cost = RooflineCostModel.for_model(tiny(), H100)
    r = serve_serial([Request(id=0, arrival_s=0, prompt_tokens=3, output_tokens=4)], cost, record_steps=True)
    steps = list(r.steps)
    assert [s.kind for s in steps] == ["prefill", "decode", "decode", "decode"]
    assert steps[0].duration_s == _mixed(cost, 0, 0, 0, 3, 0, 6, 6)
    W, F = cost.weight_bytes, cost.flops_per_token
    am, ai = cost.latent_attention_flops_per_token, cost.index_flops_per_token
    for s, c in zip(steps[1:], (4, 5, 6), strict=True):
        assert s.context_sum == c
        assert s.bytes == W + 96 * 4 + 40 * c
        assert s.flops == F + am * 4 + ai * c
        assert s.duration_s == max(Fraction(s.bytes) / Fraction(H100.bandwidth),
                                   Fraction(s.flops) / Fraction(H100.peak(tiny().compute_dtype)))
    assert r.requests[0].finish_s == sum(s.duration_s for s in steps)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 9)), min_size=1, max_size=6),
       gaps=st.lists(st.integers(0, 3), min_size=6, max_size=6), chunked=st.booleans(), on_demand=st.booleans(),
       blocks=st.integers(6, 40), budget=st.integers(6, 16))
def test_k1_every_step_is_the_formula(lengths, gaps, chunked, on_demand, blocks, budget):
    """K = 1: each row reads one latent and each prompt query attends one (R = decode rows, Q_K = prompt tokens),
    so every recorded step of continuous batching (either prefill mode and admission, preemptions in a small pool)
    is the sparse formula of its own record."""
    cost = RooflineCostModel.for_model(tiny(1), H100)
    t = Fraction(0)
    reqs = []
    for i, ((p, o), g) in enumerate(zip(lengths, gaps, strict=False)):
        t += Fraction(g, 10**5)
        reqs.append(Request(id=i, arrival_s=t, prompt_tokens=p, output_tokens=o))
    kw = dict(prefill="chunked", max_num_batched_tokens=max(budget, 8)) if chunked else {}
    r = serve_continuous(reqs, cost, record_steps=True, admission="on_demand" if on_demand else "reserve",
                         kv_pool=KVPool(capacity_blocks=blocks, block_size=2), max_num_seqs=4, **kw)
    for s in r.steps:
        if s.kind == "decode":
            assert s.duration_s == _decode(cost, s.batch, s.context_sum, s.batch)
        else:
            T, rows = s.prefill_tokens, s.decode_rows
            assert s.duration_s == _mixed(cost, rows, s.context_sum, rows, T, s.cached_tokens, s.attention_pairs, T)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 10), outputs=st.lists(st.integers(1, 12), min_size=1, max_size=5), K=st.integers(1, 12))
def test_uniform_contexts_cross_k(p, outputs, K):
    """Equal prompts arriving together: every decode step's rows share one context c = S / B, so R = B min(c, K);
    the steps cross K (c runs from p + 1 to p + max O - 1)."""
    cost = RooflineCostModel.for_model(tiny(K), H100)
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=p, output_tokens=o) for i, o in enumerate(outputs)]
    for r in (serve_continuous(reqs, cost, record_steps=True), serve_static(reqs, cost, record_steps=True)):
        decodes = [s for s in r.steps if s.kind == "decode"]
        for s in decodes:
            c = s.context_sum // s.batch
            assert s.context_sum == s.batch * c
            assert s.duration_s == _decode(cost, s.batch, s.context_sum, s.batch * min(c, K))


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 10), st.integers(1, 8)), min_size=1, max_size=5),
       chunked=st.booleans())
def test_k_above_every_context_is_the_dense_model(lengths, chunked):
    """K past every context (R = S, Q_K = Q): the run equals the dense cost model's at k = k_m + k_i and
    a = a_m + a_i, request by request."""
    sparse = RooflineCostModel.for_model(tiny(64), H100)
    dense = RooflineCostModel(sparse.weight_bytes, sparse.kv_bytes_per_token, sparse.flops_per_token,
                              sparse.latent_attention_flops_per_token + sparse.index_flops_per_token,
                              sparse.bandwidth, sparse.peak_flops)
    reqs = [Request(id=i, arrival_s=Fraction(i, 10**5), prompt_tokens=p, output_tokens=o)
            for i, (p, o) in enumerate(lengths)]
    kw = dict(prefill="chunked", max_num_batched_tokens=8, max_num_seqs=4) if chunked else {}
    for serve, extra in ((serve_continuous, kw), (serve_static, {}), (serve_serial, {})):
        a, b = serve(reqs, sparse, **extra), serve(reqs, dense, engine="step", **extra)
        assert [x.finish_s for x in a.requests] == [x.finish_s for x in b.requests]


def test_the_stretch_clock_is_refused_by_name_and_auto_runs_the_step_clock():
    cost = RooflineCostModel.for_model(tiny(), H100)
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=3, output_tokens=6)]
    r = serve_continuous(reqs, cost)
    assert r.options["engine"] == "step" and "sparse attention (index_topk=4)" in r.options["engine_reason"]
    with pytest.raises(InvalidValueError, match="engine.*sparse attention"):
        serve_serial(reqs, cost, engine="event")


def test_what_is_not_modelled_is_refused_by_name():
    with pytest.raises(UnsupportedModelError, match="sparse attention across pipeline stages"):
        RooflineCostModel.for_deployment(Deployment(tiny(), H100, Parallelism(1, 2)))
    with pytest.raises(InvalidValueError, match="disaggregated serving with sparse attention"):
        Pool.for_deployment(Deployment(tiny(), H100))
    cost = RooflineCostModel.for_model(tiny(), H100)
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=3, output_tokens=6)]
    with pytest.raises(InvalidValueError, match="enable_prefix_caching.*sparse attention"):
        serve_continuous(reqs, cost, enable_prefix_caching=True)
    with pytest.raises(InvalidValueError, match="capped_sum"):
        cost.decode_time(1, 5)  # a sparse model priced without R
    with pytest.raises(InvalidValueError, match="kv_bytes_per_token.*latent_bytes_per_token"):
        RooflineCostModel(100, 10, 5, 0, 1, 1, index_topk=4, latent_bytes_per_token=3, index_bytes_per_token=1)
    with pytest.raises(InvalidValueError, match="layer_windows.*sparse attention"):
        RooflineCostModel(100, 4, 5, 0, 1, 1, index_topk=4, latent_bytes_per_token=3, index_bytes_per_token=1,
                          layer_windows=(4, None))


def test_simulate_takes_deepseek_v32_and_refuses_what_it_cannot_price(capsys):
    """`roofline simulate --model deepseek-v3.2` runs every policy on the step clock (saying why), data-parallel
    replicas too; the stretch clock, prefix caching and a disaggregated split are one line and exit status 2."""
    from roofline.cli import main

    base = ["simulate", "--model", "deepseek-v3.2", "--accelerator", "h200", "--tp", "8", "--trace", "conv",
            "--limit", "4"]
    assert main([*base, "--chunked-prefill"]) == 0
    out = capsys.readouterr().out
    assert "simulation engine: step" in out and "sparse attention (index_topk=2048)" in " ".join(out.split())
    assert main([*base, "-dp", "2", "--policy", "continuous"]) == 0
    capsys.readouterr()
    for extra, why in ((["--engine", "event"], "stretch clock cannot run this: sparse attention"),
                       (["--enable-prefix-caching", "--policy", "continuous"], "prefix caching is not modelled with "
                                                                             "sparse attention"),
                       (["--num-prefill-instances", "1", "--num-decode-instances", "1"],
                        "disaggregated serving with sparse attention")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(("chunked", "preempted"), [(False, 4), (True, 3)])
def test_preempted_requests_are_recomputed_at_the_capped_price(chunked, preempted):
    """Four 6 + 9 requests in 12 blocks of 2 under on-demand admission: preemptions (4 separate, 3 chunked),
    and every step, the recomputing prefills included, is the K = 1 formula of its record."""
    cost = RooflineCostModel.for_model(tiny(1), H100)
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=6, output_tokens=9) for i in range(4)]
    kw = dict(prefill="chunked", max_num_batched_tokens=8) if chunked else {}
    r = serve_continuous(reqs, cost, record_steps=True, admission="on_demand", max_num_seqs=4,
                         kv_pool=KVPool(capacity_blocks=12, block_size=2), **kw)
    assert r.summary.preemptions == preempted
    for s in r.steps:
        T, rows = s.prefill_tokens, s.decode_rows
        expected = (_decode(cost, s.batch, s.context_sum, s.batch) if s.kind == "decode"
                    else _mixed(cost, rows, s.context_sum, rows, T, s.cached_tokens, s.attention_pairs, T))
        assert s.duration_s == expected
