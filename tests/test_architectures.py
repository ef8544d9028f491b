"""Architectures: MoE, MLA, sliding windows, quantized weights, families, bad input.

Properties (Hypothesis) and hand-worked checks of docs/conventions.md, "Architectures beyond
the dense Llama shape"; the scheduler's steps on a MoE and an MLA model against the formulas.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import ConfigError, InvalidValueError, ModelConfig, get_accelerator, get_model
from roofline.errors import UnsupportedModelError
from roofline.estimate import decode_step, kv_capacity
from roofline.families import FAMILIES, REFUSED
from roofline.sim import Request, RooflineCostModel, serve_continuous
from roofline.testing.strategies import model_configs

H100 = get_accelerator("h100-sxm")

# ------------------------------------------------------------------ presets

PRESETS = {  # name -> published total (exact int, or the rounded figure it must round to)
    "llama-3.3-70b": 70_553_706_496, "llama-3.1-405b": 405_853_388_800, "mixtral-8x7b": 46_702_792_704,
    "qwen3-30b-a3b": "30.5B", "qwen3-235b-a22b": "235B", "deepseek-v3": "671B", "gemma-3-27b": "27.4B",
    "mistral-small-24b": "23.6B", "phi-4": "14.7B", "gpt-oss-120b": "116.83B",
    "nemotron-h-56b": "56B", "jamba-1.5-mini": "52B",
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_new_presets_equal_their_published_totals(name):
    """Each new preset's total equals its published total (rounded ones: what it rounds to); it names a source."""
    model, published = get_model(name), PRESETS[name]
    assert "config.json" in model.source
    if isinstance(published, int):
        assert model.parameters == published
    else:
        digits = published[:-1]
        places = len(digits.split(".")[1]) if "." in digits else 0
        assert round(model.parameters / 1e9, places) == float(digits)


def test_mixtral_by_hand():
    """Mixtral 8x7B: 8 experts of 3 x 4096 x 14336 and a 4096 x 8 router per layer; 12.9 B active per token."""
    m = get_model("mixtral-8x7b")
    attn, expert = 2 * 4096 * 4096 + 2 * 4096 * 1024, 3 * 4096 * 14336
    per_layer = attn + 8 * expert + 4096 * 8 + 2 * 4096
    assert m.parameters == 2 * 32000 * 4096 + 32 * per_layer + 4096
    assert m.active_parameters == m.parameters - 32 * 6 * expert == 12_879_925_248
    assert m.matmul_parameters == 32 * (attn + 2 * expert + 4096 * 8) + 32000 * 4096


def test_deepseek_v3_mla_kv_and_absorbed_attention_flops():
    """DeepSeek-V3: 61 x (512 + 64) cached values per token; absorbed attention 128 x (2 x 576 + 2 x 512) per layer."""
    m = get_model("deepseek-v3")
    assert m.kv_bytes_per_token == 61 * 576 * 2
    assert m.attention_flops_per_token == 61 * 128 * (2 * 576 + 2 * 512)
    assert m.head_dim == 192  # qk_nope + qk_rope, never hidden / heads = 56
    assert (m.num_moe_layers, m.num_experts, m.num_experts_per_tok, m.num_shared_experts) == (58, 256, 8, 1)


def test_fp8_checkpoint_uses_the_fp8_peak_and_weight_only_does_not():
    """DeepSeek-V3 (FP8 weights, FP8 activations) runs at the FP8 peak; gpt-oss (mxfp4 weight-only) at BF16's."""
    from roofline.estimate import compute_peak

    assert compute_peak(get_model("deepseek-v3"), H100) == H100.peak("fp8")
    assert compute_peak(get_model("gpt-oss-120b"), H100) == H100.peak_flops
    assert compute_peak(get_model("deepseek-v3").with_dtypes(weight_dtype="bf16"), H100) == H100.peak_flops


def test_weight_dtype_override_replaces_the_quantization():
    """--weight-dtype names every tensor class: bf16 on gpt-oss gives 2 bytes per parameter."""
    m = get_model("gpt-oss-120b").with_dtypes(weight_dtype="bf16")
    assert m.weight_bytes == 2 * m.parameters
    assert get_model("gpt-oss-120b").weight_bytes < m.weight_bytes


def test_gemma3_windowed_capacity_at_32k():
    """Gemma 3 1B at 32,768 tokens: 511 sequences fit on an H100 (85 if priced as full attention)."""
    from pathlib import Path

    m = ModelConfig.from_hf_config(Path(__file__).parent / "data" / "configs" / "gemma-3-1b-pt.json")
    from roofline.estimate import kv_budget_for

    budget = kv_budget_for(m, H100)
    cap = kv_capacity(m, budget=budget, context=32768)
    assert cap.sequences == budget // ((4 * 32768 + 22 * 512) * 1024) == 511
    assert budget // (26 * 1024 * 32768) == 85


# ------------------------------------------------------------------ MoE properties


@given(st.integers(1, 512), st.integers(1, 64), st.integers(1, 16))
def test_experts_touched_rises_between_k_and_min_e_kb(experts, k, batch):
    """E (1 - (1 - k/E)^B): k at B = 1, rising with B, between k and min(E, k B)."""
    k = min(k, experts)
    t = f.experts_touched(num_experts=experts, experts_per_token=k, batch=batch)
    assert k <= t <= min(experts, k * batch)
    assert f.experts_touched(num_experts=experts, experts_per_token=k, batch=1) == k
    assert f.experts_touched(num_experts=experts, experts_per_token=k, batch=batch + 1) >= t


def test_experts_touched_tends_to_e():
    """As B grows the expected experts touched tend to E (within 1e-9 of 128 by B = 400 for k = 8)."""
    assert 128 - f.experts_touched(num_experts=128, experts_per_token=8, batch=400) < Fraction(1, 10**9)


@pytest.mark.parametrize("experts,k,batch", [(8, 2, 3), (128, 8, 16), (64, 6, 40)])
def test_experts_touched_matches_seeded_monte_carlo(experts, k, batch):
    """A seeded simulation of uniform routing (each token picks k distinct experts) agrees within 4 standard errors."""
    rng = random.Random(20260101)
    trials = 4000
    counts = [len({e for _ in range(batch) for e in rng.sample(range(experts), k)}) for _ in range(trials)]
    mean = sum(counts) / trials
    var = sum((c - mean) ** 2 for c in counts) / (trials - 1)
    expected = float(f.experts_touched(num_experts=experts, experts_per_token=k, batch=batch))
    assert abs(mean - expected) <= 4 * (var / trials) ** 0.5 + 1e-9


@given(model_configs(max_layers=8, max_hidden=1024))
def test_one_expert_with_k1_equals_the_dense_layer(model):
    """A MoE model with one expert of the dense width and k = 1 has the dense model's counts, bytes and FLOPs."""
    moe = attrs.evolve(model, num_experts=1, num_experts_per_tok=1, moe_intermediate_size=model.intermediate_size,
                       num_moe_layers=model.num_hidden_layers)
    router = model.num_hidden_layers * model.hidden_size  # h x 1 per layer
    assert moe.parameters == model.parameters + router
    assert moe.matmul_parameters == model.matmul_parameters + router
    assert moe.active_parameters == moe.parameters
    expected = model.weight_bytes + router * model.weight_bytes_per_parameter
    assert moe.decode_weight_bytes(7) == moe.weight_bytes == expected


@given(model_configs(architecture="moe", max_layers=8, max_hidden=1024))
def test_moe_totals_and_active(model):
    """Total parameters count every expert, active ones k; weights read lie between batch 1's and all experts'."""
    assert model.active_parameters <= model.parameters
    assert model.decode_weight_bytes(1) <= model.decode_weight_bytes(64) <= model.weight_bytes


# ------------------------------------------------------------------ MLA, windows, quantization


@given(model_configs(architecture="mla", max_layers=8, max_hidden=2048))
def test_mla_kv_is_below_the_same_models_mha_kv(model):
    """MLA caches kv_lora_rank + qk_rope_head_dim per layer: below 2 x heads x (nope + rope) of the MHA it replaces."""
    mha = 2 * model.num_attention_heads * (model.qk_nope_head_dim + model.qk_rope_head_dim)
    if model.kv_lora_rank + model.qk_rope_head_dim < mha:
        assert model.layer_kv_elements < mha
    assert model.kv_bytes(100) == 100 * model.num_hidden_layers * model.layer_kv_elements * model.kv_bytes_per_element


@given(model_configs(architecture="sliding", max_layers=8, max_hidden=1024), st.integers(1, 10_000))
def test_windows_at_least_the_context_equal_full_attention(model, context):
    """Every window >= c: KV bytes and attention FLOPs equal full attention's; shorter windows never hold more."""
    full = attrs.evolve(model, layer_windows=())
    assert model.kv_bytes(context) <= full.kv_bytes(context)
    long = attrs.evolve(model, layer_windows=tuple(None if w is None else max(w, context) for w in model.layer_windows))
    assert long.kv_bytes(context) == full.kv_bytes(context) == full.kv_bytes_per_token * context
    assert long.attention_flops(context) == full.attention_flops(context)


@given(model_configs(architecture="quantized", max_layers=8, max_hidden=2048))
def test_quantized_bytes_below_unquantized_and_other_classes_keep_torch_dtype(model):
    """Quantized projections cost less than BF16 ones; embeddings, lm_head and norms keep torch_dtype (BF16)."""
    plain = model.with_dtypes(weight_dtype="bfloat16")
    by_class, plain_by_class = model.weight_bytes_by_class(), plain.weight_bytes_by_class()
    assert by_class["projections"] < plain_by_class["projections"]
    for cls in ("embedding", "lm_head", "norms", "router"):
        assert by_class[cls] == plain_by_class[cls]
    assert model.weight_bytes < plain.weight_bytes


# ------------------------------------------------------------------ scheduler


WINDOWED = ["gemma-3-27b", "gpt-oss-120b"]


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", *WINDOWED]), batch=st.integers(1, 16),
       prompt=st.integers(1, 3000), output=st.integers(2, 4))
def test_scheduler_steps_equal_the_formulas_on_moe_mla_and_windows(name, batch, prompt, output):
    """Each decode step of the scheduler takes decode_step's time and bytes at its batch and context: the experts
    its B tokens touch (Mixtral, Qwen3-30B-A3B, DeepSeek-V3), MLA's latent KV (DeepSeek-V3), the windows bounding
    the KV read (Gemma 3 27B: 1,024 on 5 layers in 6; gpt-oss-120b: 128 on every other layer)."""
    model, acc = get_model(name), get_accelerator("h200")
    cost = RooflineCostModel.for_model(model, acc)
    requests = [Request(id=i, arrival_s=0, prompt_tokens=prompt, output_tokens=output) for i in range(batch)]
    result = serve_continuous(requests, cost, max_num_seqs=batch, record_steps=True)
    decodes = [s for s in result.steps if s.kind == "decode"]
    assert len(decodes) == output - 1
    for j, step in enumerate(decodes, start=1):
        expected = decode_step(model, acc, batch=batch, context=prompt + j)
        assert step.duration_s == expected.step_time
        assert step.bytes == expected.bytes == model.decode_bytes(batch, prompt + j)


def test_scheduler_prices_unequal_contexts_per_sequence_under_windows():
    """gpt-oss-120b, prompts 100 and 5,000 (one inside the 128-token window, one past it): the decode step reads
    W + kv_bytes(101) + kv_bytes(5,001) and computes 2F + attention_flops of each, not of their summed context."""
    model, acc = get_model("gpt-oss-120b"), get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_model(model, acc)
    requests = [Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=2),
                Request(id=1, arrival_s=0, prompt_tokens=5000, output_tokens=2)]
    (step,) = [s for s in serve_continuous(requests, cost, record_steps=True).steps if s.kind == "decode"]
    held = 18 * 101 + 18 * 101 + 18 * 5001 + 18 * 128  # 18 full and 18 windowed layers: min(c, 128) in these
    assert step.context_sum == held
    assert step.bytes == model.decode_weight_bytes(2) + model.kv_bytes(101) + model.kv_bytes(5001)
    assert step.bytes == model.decode_bytes(2, [101, 5001])
    flops = 2 * cost.flops_per_token + model.attention_flops(101) + model.attention_flops(5001)
    assert step.flops == flops
    assert step.duration_s == max(Fraction(step.bytes) / acc.bandwidth, Fraction(flops) / acc.peak("bf16"))
    assert model.kv_bytes(5001) < 5001 * model.kv_bytes_per_token  # the full-attention price is larger


@pytest.mark.parametrize("admission", ["on_demand", "reserve"])
def test_scheduler_admits_exactly_the_sequences_that_fit_under_windows(admission):
    """Gemma 3 1B (26 layers, 512-token windows on 5 in 6) at 32,768 tokens in 53 GB: kv_capacity says 363
    sequences fit in 16-token blocks (60 would at full attention); the scheduler's first prefill admits 363."""
    from roofline import load_model
    from roofline.sim import KVPool

    model = load_model("tests/data/configs/gemma-3-1b-pt.json")
    capacity = kv_capacity(model, budget=53 * 10**9, context=32768, block_size=16)
    assert (capacity.sequences_blocks, capacity.tokens // 32768) == (363, 60)
    pool = KVPool.for_model(model, budget=53 * 10**9, block_size=16)
    assert pool.sequences_that_fit(32768) == 363
    requests = [Request(id=i, arrival_s=0, prompt_tokens=32768, output_tokens=1) for i in range(370)]
    result = serve_continuous(requests, RooflineCostModel.for_model(model, H100), max_num_seqs=1024,
                              admission=admission, kv_pool=pool, record_steps=True)
    assert [s.batch for s in result.steps] == [363, 7]
    assert result.steps[0].kv_blocks == 363 * pool.blocks_for(32768) <= pool.capacity_blocks


def test_a_pool_and_a_cost_model_that_count_different_layers_are_refused_by_name():
    """A windowed cost model beside a full-attention pool (or the reverse), a window of 0: one line naming the field."""
    from roofline.sim import KVPool, UnitCostModel

    gemma = get_model("gemma-3-27b")
    requests = [Request(id=0, arrival_s=0, prompt_tokens=10, output_tokens=2)]
    with pytest.raises(InvalidValueError, match=r"^kv_pool=.*KVPool.for_model") as e:
        serve_continuous(requests, RooflineCostModel.for_model(gemma, H100), kv_pool=KVPool.tokens(10**6))
    assert "\n" not in str(e.value)
    windowed = KVPool.for_model(gemma, budget=10**9)
    with pytest.raises(InvalidValueError, match=r"^kv_pool=.*does not price"):
        serve_continuous(requests, RooflineCostModel.for_model(get_model("llama-3.1-8b"), H100), kv_pool=windowed,
                         record_steps=True)
    assert serve_continuous(requests, UnitCostModel(), kv_pool=windowed,
                            record_steps=True).options["kv_units"] == "token-layers"
    with pytest.raises(InvalidValueError, match=r"^layer_windows=0"):
        KVPool(10, 16, layer_windows=(None, 0))


# ------------------------------------------------------------------ families and bad input


def test_family_table_lists_the_supported_and_refused_types():
    """The one table holds the families the issue names; refused types carry a reason."""
    for t in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
              "gemma3_text", "phi3", "gpt2", "gpt_neox", "opt", "falcon", "deepseek_v2", "deepseek_v3", "gpt_oss",
              "llava", "jamba", "falcon_h1", "granitemoehybrid", "lfm2", "minimax"):
        assert t in FAMILIES
    assert {"bert", "t5", "bart", "mamba", "zamba", "mllama"} <= set(REFUSED)


BASE = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "num_local_experts": 4,
        "num_experts_per_tok": 2}


@pytest.mark.parametrize("change,error,field", [
    ({"num_experts_per_tok": 5}, ConfigError, "num_experts_per_tok"),
    ({"model_type": "mistral", "sliding_window": 0}, ConfigError, "sliding_window"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, UnsupportedModelError, "quant_method"),
    ({"model_type": "whatever"}, UnsupportedModelError, "whatever"),
    ({"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": -1},
      "vision_config": {"model_type": "clip_vision_model"}}, ConfigError, "text_config.hidden_size"),
    ({"model_type": "llava", "text_config": {"model_type": "bert"}, "vision_config": {}}, UnsupportedModelError,
     "text_config"),
    ({"model_type": "gpt_oss", "layer_types": ["linear_attention", "full_attention"], "sliding_window": 128},
     UnsupportedModelError, "linear_attention"),
    ({"model_type": "gpt_oss", "layer_types": ["full_attention"], "sliding_window": 128}, ConfigError,
     "layer_types"),
    ({"quantization_config": "fp8"}, ConfigError, "quantization_config"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}, ConfigError,
     "quantization_config.weight_block_size"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 5}}, ConfigError, "quantization_config.bits"),
    ({"model_type": "llava", "text_config": {"model_type": "llama"}, "vision_config": {"model_type": "pixtral"}},
     UnsupportedModelError, "vision tower"),
    ({"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
      "mlp_only_layers": "all"}, ConfigError, "mlp_only_layers"),
    # transformers 5 writes num_local_experts for Qwen MoE: both present and different is refused by name
    ({"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
     ConfigError, "num_local_experts"),
])
def test_bad_input_is_one_line_naming_the_field(change, error, field, tmp_path):
    """k > E, a window of 0, an unknown quant method or type, an invalid text_config: one line naming the field."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, **change}))
    with pytest.raises(error) as info:
        ModelConfig.from_hf_config(path)
    assert field in str(info.value) and "\n" not in str(info.value)


def test_model_config_rejects_k_above_e():
    """ModelConfig itself refuses k > E, naming num_experts_per_tok."""
    with pytest.raises(InvalidValueError, match="num_experts_per_tok"):
        attrs.evolve(get_model("mixtral-8x7b"), num_experts_per_tok=9)


def test_cli_refuses_a_mamba_config_on_one_line(tmp_path, capsys):
    """`roofline report --model mamba.json`: exit status 2, one line naming mamba and why."""
    from roofline.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba", "d_model": 768, "n_layer": 24}))
    assert main(["report", "--model", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mamba" in err[0] and "state-space" in err[0]


def test_windowed_critical_context_by_hand():
    """c* with windows: all windows >= c* gives the dense c*; all windows of 100 never cross; half of them: solved."""
    from roofline.estimate import criticality

    dense = get_model("llama-3.1-8b")
    c_dense = criticality(dense, H100, context=0).critical_context
    wide = attrs.evolve(dense, layer_windows=(10**6,) * 32)
    assert criticality(wide, H100, context=0).critical_context == c_dense
    narrow = attrs.evolve(dense, layer_windows=(100,) * 32)
    assert criticality(narrow, H100, context=0).critical_context is None
    half = attrs.evolve(dense, layer_windows=(100, None) * 16)
    target = 32 * c_dense  # token-layers of KV at the dense c*
    assert criticality(half, H100, context=0).critical_context == (target - 16 * 100) / 16


def test_windowed_block_accounting():
    """Blocks of a windowed layer cover positions c - w .. c - 1: 1,000 tokens, window 512, blocks of 16 -> 33."""
    from roofline.estimate import windowed_block_bytes

    one = attrs.evolve(get_model("llama-3.2-1b"), layer_windows=(512,) + (None,) * 15)
    per_layer_token = one.layer_kv_elements * one.kv_bytes_per_element
    blocks = (999 // 16 - 488 // 16 + 1) + 15 * 63  # 62 - 30 + 1 = 33 for the windowed layer
    assert windowed_block_bytes(one, 1000, 16) == blocks * 16 * per_layer_token
    assert (999 // 16 - 488 // 16 + 1) == 33


def test_layer_windows_all_none_count_every_full_layer():
    """Break-it: LayerWindows((None, None)) folded its layers into () and counted nothing: held(10) = 0, pairs(10) = 0,
    blocks(10, 4) = 0. Two full-attention layers hold 2 x 10 = 20 token-layers, have 2 x 55 = 110 pairs and
    2 x ceil(10 / 4) = 6 layer-blocks; a chunk of 3 after 5 reads 2 x 5 and has 2 x (3 x 5 + 6) pairs. No layer:
    refused."""
    from roofline.sim import LayerWindows

    full = LayerWindows((None, None))
    assert full.layers == 2 and full.layer_windows == (None, None)
    assert (full.held(10), full.pairs(10), full.blocks(10, 4), full.chunk(3, 5)) == (20, 110, 6, (10, 42))
    with pytest.raises(InvalidValueError) as err:
        LayerWindows(())
    assert err.value.field == "layer_windows"


def test_expert_sizes_without_experts_are_refused():
    """Break-it: RooflineCostModel(routed_expert_bytes=100) with num_experts=0 priced a dense model, the 100 bytes
    never read (decode_time(2, 4) = 14 = (10 + 4) / 1, the same without them). Refused naming num_experts."""
    kw = dict(weight_bytes=10, kv_bytes_per_token=1, flops_per_token=1, attention_flops_per_token=0, bandwidth=1,
              peak_flops=10**9)
    for extra in (dict(routed_expert_bytes=100), dict(experts_per_token=2)):
        with pytest.raises(InvalidValueError) as err:
            RooflineCostModel(**kw, **extra)
        assert err.value.field == "num_experts"
    # with the experts: 2 tokens touch 4 (1 - (1 - 2/4)^2) = 3 experts of 100 bytes: (10 + 300 + 4) / 1
    assert RooflineCostModel(**kw, routed_expert_bytes=100, num_experts=4, experts_per_token=2).decode_time(2, 4) == 314


FAMILY_SHAPES = {  # model_type readers on published shapes; totals from the model pages (safetensors)
    "Qwen/Qwen1.5-MoE-A2.7B": ({"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048,
                                "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
                                "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                                "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936,
                                "tie_word_embeddings": False, "decoder_sparse_step": 1, "mlp_only_layers": []},
                               14_315_784_192),
    "google/gemma-7b": ({"model_type": "gemma", "num_hidden_layers": 28, "hidden_size": 3072,
                         "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
                         "intermediate_size": 24576, "vocab_size": 256000}, 8_537_680_896),
    "google/gemma-2-9b": ({"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584,
                           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                           "intermediate_size": 14336, "vocab_size": 256000, "sliding_window": 4096}, 9_241_705_984),
    "microsoft/Phi-3-mini-4k-instruct": ({"model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
                                          "num_attention_heads": 32, "num_key_value_heads": 32,
                                          "intermediate_size": 8192, "vocab_size": 32064,
                                          "tie_word_embeddings": False, "sliding_window": 2047}, 3_821_079_552),
}


@pytest.mark.parametrize("name", sorted(FAMILY_SHAPES))
def test_family_readers_on_published_shapes(name, tmp_path):
    """Qwen2-MoE (gated shared expert), Gemma (tied, head_dim 256), Gemma 2 (4 norms), Phi-3: totals as published."""
    cfg, total = FAMILY_SHAPES[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert ModelConfig.from_hf_config(path).parameters == total


def test_gemma2_alternates_local_and_global_layers(tmp_path):
    """Gemma 2 without layer_types: every 2nd layer global (transformers' default), 4,096-token windows."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FAMILY_SHAPES["google/gemma-2-9b"][0]))
    m = ModelConfig.from_hf_config(path)
    assert m.layer_windows == (4096, None) * 21
    per_layer = 2 * 8 * 256 * 2
    assert m.kv_bytes(8192) == (21 * 8192 + 21 * 4096) * per_layer


#: google/gemma-3-4b-it's config.json as published: the text_config gives four shape fields and leaves the rest to
#: transformers' Gemma3TextConfig defaults (8 heads, 4 KV heads, head_dim 256, vocabulary 262,208, pattern 6).
GEMMA3_4B_IT = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3", "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}


def test_gemma3_wrapper_takes_transformers_defaults_for_omitted_text_fields(tmp_path):
    """The Hub's gemma-3-4b-it config was refused ('text_config.vocab_size' missing); with Gemma3TextConfig's defaults
    it is 4,300,079,472 parameters (model card: 4.3B), every 6th of 34 layers global, KV by hand."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3_4B_IT))
    m = ModelConfig.from_hf_config(path)
    assert m.parameters == 4_300_079_472 and round(m.parameters / 1e9, 1) == 4.3
    assert (m.vocab_size, m.num_attention_heads, m.num_key_value_heads, m.head_dim) == (262_208, 8, 4, 256)
    assert m.layer_windows == ((1024,) * 5 + (None,)) * 5 + (1024,) * 4
    per_layer = 2 * 4 * 256 * 2  # K and V, 4 KV heads, head_dim 256, BF16
    assert m.kv_bytes(1000) == 34 * 1000 * per_layer == 139_264_000
    assert m.kv_bytes(32768) == (5 * 32768 + 29 * 1024) * per_layer == 792_723_456
    given = dict(GEMMA3_4B_IT, text_config={**GEMMA3_4B_IT["text_config"], "num_key_value_heads": 8})
    path.write_text(json.dumps(given))
    assert ModelConfig.from_hf_config(path).num_key_value_heads == 8  # a field the config gives wins


def test_a_huge_batch_does_not_hang():
    """Above 65,536 tokens (1 - k/E)^B is taken in floats: B = 10^15 gives E at once, and stays a Fraction."""
    touched = f.experts_touched(num_experts=128, experts_per_token=8, batch=10**15)
    assert touched == 128 and isinstance(touched, Fraction)
    step = decode_step(get_model("qwen3-30b-a3b"), H100, batch=10**15, context=1000)
    assert step.bytes > get_model("qwen3-30b-a3b").weight_bytes


def test_gpt_oss_active_parameters_as_the_model_card_counts_them():
    """gpt-oss counts active parameters without the embedding gather: 5.13 B (120b) and 3.61 B (20b) per token."""
    from pathlib import Path

    big = get_model("gpt-oss-120b")
    small = ModelConfig.from_hf_config(Path(__file__).parent / "data" / "configs" / "gpt-oss-20b.json")
    for model, card in ((big, 5.13), (small, 3.61)):
        without_embedding = model.active_parameters - model.parameters_by_class()["embedding"]
        assert round(without_embedding / 1e9, 2) == card


def test_missing_model_type_and_missing_file_are_said_plainly(tmp_path):
    """A config without model_type said "model_type 'None': config.json has no model_type"; a missing file "model config
    cannot read". Both now name the file and the field or the failure in plain words."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 4}))
    with pytest.raises(UnsupportedModelError) as exc:
        ModelConfig.from_hf_config(path)
    assert str(exc.value).startswith(f"{path}: field 'model_type' missing: the family cannot be known and is not "
                                     "guessed (supported: cohere2, dbrx, deepseek, ")
    assert str(exc.value).endswith("; not supported") and exc.value.model_type == ""
    with pytest.raises(ConfigError, match=r"nope\.json: cannot read the model config: no such file$"):
        ModelConfig.from_hf_config(tmp_path / "nope.json")


SMALL = {"num_hidden_layers": 30, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100}


@pytest.mark.parametrize("cfg,windows", [
    # Qwen2/Qwen3 (and their MoE): use_sliding_window defaults to false in transformers, so a sliding_window
    # without the flag is no window (was: the window on every layer); with the flag, max_window_layers
    # defaults to 28 (was: every layer full)
    ({"model_type": "qwen2", "sliding_window": 32}, ()),
    ({"model_type": "qwen3", "sliding_window": 32}, ()),
    ({"model_type": "qwen3_moe", "sliding_window": 32, "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32}, ()),
    ({"model_type": "qwen2", "sliding_window": 32, "use_sliding_window": True}, (None,) * 28 + (32, 32)),
    ({"model_type": "qwen2", "sliding_window": 32, "use_sliding_window": True, "max_window_layers": 0}, (32,) * 30),
    # gpt-oss without layer_types: transformers' GptOssConfig alternates (even layers slide), 128 by default
    ({"model_type": "gpt_oss", "sliding_window": 32, "num_local_experts": 4, "num_experts_per_tok": 2},
     (32, None) * 15),
    ({"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 2}, (128, None) * 15),
    # Gemma 2 and 3 without sliding_window: transformers' 4,096 (was: every layer full); null is no window
    ({"model_type": "gemma2"}, (4096, None) * 15),
    ({"model_type": "gemma3_text"}, ((4096,) * 5 + (None,)) * 5),
    ({"model_type": "gemma2", "sliding_window": None}, ()),
    # Mistral without sliding_window: MistralConfig's 4,096 (Mistral 7B v0.1); Mixtral's default is null
    ({"model_type": "mistral"}, (4096,) * 30),
    ({"model_type": "mistral", "sliding_window": None}, ()),
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}, ()),
])
def test_window_defaults_follow_the_family(cfg, windows):
    """Which layers slide when the config leaves a field out: the family's transformers default, by hand."""
    assert ModelConfig.from_hf_config({**SMALL, **cfg}).layer_windows == windows


def test_mistral_7b_preset_has_its_4096_window():
    """Mistral 7B v0.1's config.json sets sliding_window 4,096: the preset's KV at 32k is 32 x 4,096 tokens' worth."""
    m = get_model("mistral-7b-v0.1")
    assert m.layer_windows == (4096,) * 32
    assert m.kv_bytes(32768) == 32 * 4096 * 2 * 8 * 128 * 2


@pytest.mark.parametrize("cfg,error,field", [
    # windows beyond int64 were accepted and crashed numpy (OverflowError) in kv_bytes(array)
    ({"model_type": "mistral", "sliding_window": 2**63}, ConfigError, "sliding_window"),
    # a bool or a float count of routed experts read as a dense model
    ({"model_type": "deepseek_v3", "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
      "v_head_dim": 8, "n_routed_experts": False, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
     ConfigError, "n_routed_experts"),
    ({"model_type": "deepseek", "n_routed_experts": 0.0, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
     ConfigError, "n_routed_experts"),
])
def test_more_bad_fields_are_refused_by_name(cfg, error, field):
    """Out-of-range windows and non-integer expert counts: refused naming the field, one line."""
    with pytest.raises(error) as info:
        ModelConfig.from_hf_config({**SMALL, **cfg})
    assert field in str(info.value) and "\n" not in str(info.value)


def test_a_null_torch_dtype_falls_back_to_dtype():
    """torch_dtype null beside dtype float32: float32 (was bfloat16, the dtype field ignored)."""
    m = ModelConfig.from_hf_config({**SMALL, "model_type": "llama", "torch_dtype": None, "dtype": "float32"})
    assert m.weight_dtype == "float32" and m.weight_bytes == 4 * m.parameters



@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
@pytest.mark.parametrize("dtype", ["int4", "INT8", "torch.int4"])
def test_an_integer_torch_dtype_is_refused_by_name(key, dtype):
    """Break-it finding 2: torch_dtype int4 with no quantization_config was priced as int4 weights and an int4 KV
    cache (neither exists: vLLM has no integer KV cache); refused, naming the field and the value as written."""
    cfg = {**SMALL, "model_type": "llama", "torch_dtype": None, key: dtype}
    with pytest.raises(InvalidValueError) as info:
        ModelConfig.from_hf_config(cfg)
    assert info.value.field == "torch_dtype" and info.value.value == dtype
    assert "is no checkpoint dtype" in str(info.value) and "\n" not in str(info.value)
    # the same dtype asked for by flag is a quantization the package prices: half a byte (int4) or one (int8)
    m = ModelConfig.from_hf_config({**SMALL, "model_type": "llama"}, weight_dtype=dtype.lower().removeprefix("torch."))
    assert m.weight_bytes == m.parameters * (Fraction(1, 2) if "4" in dtype else 1)


LLAVA_VISION = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8}


def test_llava_text_config_quantization_is_read():
    """A quantization_config inside llava's text_config is priced (was ignored: BF16 bytes; bitsandbytes accepted)."""
    text = {**SMALL, "model_type": "llama", "quantization_config": {"quant_method": "gptq", "bits": 4}}
    m = ModelConfig.from_hf_config({"model_type": "llava", "text_config": text, "vision_config": LLAVA_VISION})
    assert m.quantization is not None and m.quantization.method == "gptq"
    with pytest.raises(UnsupportedModelError, match="bitsandbytes"):
        ModelConfig.from_hf_config({"model_type": "llava", "vision_config": LLAVA_VISION,
                                    "text_config": {**text, "quantization_config": {"quant_method": "bitsandbytes"}}})


def test_llava_llama_defaults_do_not_fill_another_family():
    """LlamaConfig's defaults (vocab 32,000...) fill a llama text_config only: a qwen2 one missing vocab_size is
    refused."""
    text = {k: v for k, v in SMALL.items() if k != "vocab_size"}
    with pytest.raises(ConfigError, match="text_config.vocab_size"):
        ModelConfig.from_hf_config({"model_type": "llava", "vision_config": LLAVA_VISION,
                                    "text_config": {**text, "model_type": "qwen2"}})
    llama = ModelConfig.from_hf_config({"model_type": "llava", "vision_config": LLAVA_VISION, "text_config": text})
    assert llama.vocab_size == 32000


@pytest.mark.parametrize("cfg", [
    {"model_type": "qwen2_moe", "mlp_only_layers": list(range(30))},
    {"model_type": "qwen2_moe", "decoder_sparse_step": 31},
    {"model_type": "qwen3_moe", "mlp_only_layers": list(range(30))},
    {"model_type": "deepseek", "n_routed_experts": 4, "first_k_dense_replace": 30},
])
def test_a_moe_config_without_sparse_layers_is_its_dense_model(cfg):
    """No layer sparse: the dense model transformers builds (was refused naming num_moe_layers, not a config field)."""
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
           "shared_expert_intermediate_size": 64, "n_shared_experts": 1}
    m = ModelConfig.from_hf_config({**SMALL, **moe, **cfg})
    dense = ModelConfig.from_hf_config({**SMALL, "model_type": "llama"})
    assert not m.is_moe
    assert m.parameters - dense.parameters == {"qwen2_moe": 30 * (64 + 32 + 32), "qwen3_moe": 30 * 2 * 16,
                                               "deepseek": 0}[cfg["model_type"]]  # q/k/v biases; q/k norms


@pytest.mark.parametrize("only", [[30], [-1], 0, False])
def test_mlp_only_layers_outside_the_model_are_refused(only):
    """mlp_only_layers naming no layer of the model (or 0, false for a list) is refused, not ignored."""
    cfg = {**SMALL, "model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "mlp_only_layers": only}
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        ModelConfig.from_hf_config(cfg)


def test_llama_layer_types_declare_windows():
    """vLLM's llama.py slides a layer_types "sliding_attention" layer over sliding_window: read (was ignored)."""
    cfg = {**SMALL, "model_type": "llama", "num_hidden_layers": 2, "sliding_window": 8,
           "layer_types": ["sliding_attention", "full_attention"]}
    m = ModelConfig.from_hf_config(cfg)
    assert m.layer_windows == (8, None)
    assert m.kv_bytes(100) == (8 + 100) * 2 * 2 * 16 * 2
    assert ModelConfig.from_hf_config({**cfg, "layer_types": None}).layer_windows == ()  # a bare window: unused


def test_a_patch_larger_than_the_image_is_refused():
    """A vision tower whose patch exceeds its image has no patch: refused by name (was counted with 0 patches)."""
    with pytest.raises(ConfigError, match="patch_size"):
        ModelConfig.from_hf_config({"model_type": "llava", "text_config": {**SMALL, "model_type": "llama"},
                                    "vision_config": {**LLAVA_VISION, "image_size": 4}})


@pytest.mark.parametrize("cfg", [
    {"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    {"model_type": "gemma2", "sliding_window": 8},
    {"model_type": "mistral", "sliding_window": 8},
])
def test_billions_of_layers_are_refused_at_once(cfg):
    """num_hidden_layers 2**32 (accepted as a dimension) hung the per-layer readers (> 40 s) or ran out of memory;
    it is refused before any per-layer work (the time: benchmarks/bench_pathological.py)."""
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        ModelConfig.from_hf_config({**SMALL, **cfg, "num_hidden_layers": 2**32})


def test_a_long_mlp_only_layers_list_is_read_quickly():
    """65,536 layers with every other one in mlp_only_layers: 32,768 MoE layers (the time, 12 s with a list search:
    benchmarks/bench_pathological.py)."""
    m = ModelConfig.from_hf_config({**SMALL, "model_type": "qwen2_moe", "num_hidden_layers": 65536, "num_experts": 4,
                                    "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                    "mlp_only_layers": list(range(0, 65536, 2))})
    assert m.num_moe_layers == 32768


def test_opt_word_embed_proj_dim_null_is_hidden_size():
    """OPTConfig reads word_embed_proj_dim null as hidden_size (was refused as projected embeddings)."""
    cfg = {"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 100, "ffn_dim": 128, "max_position_embeddings": 64}
    assert (ModelConfig.from_hf_config({**cfg, "word_embed_proj_dim": None}).parameters
            == ModelConfig.from_hf_config(cfg).parameters)
    with pytest.raises(ConfigError, match="word_embed_proj_dim"):
        ModelConfig.from_hf_config({**cfg, "word_embed_proj_dim": "64"})


@pytest.mark.parametrize("model_type,head_dim", [
    ("gemma", 256), ("gemma2", 256), ("gemma3_text", 256),  # GemmaConfig, Gemma2Config, Gemma3TextConfig
    ("qwen3", 128),  # Qwen3Config
    ("qwen2", 16), ("llama", 16),  # no head_dim field: hidden / heads = 64 / 4
])
def test_an_absent_head_dim_takes_the_familys_default(model_type, head_dim):
    """head_dim left out: the family's transformers default (was hidden / heads for every family: 16, not 256)."""
    cfg = {k: v for k, v in SMALL.items() if k != "head_dim"}
    m = ModelConfig.from_hf_config({**cfg, "model_type": model_type})
    assert m.head_dim == head_dim
    assert m.kv_bytes_per_token == 30 * 2 * 2 * head_dim * 2


@pytest.mark.parametrize("cfg,field", [
    ({"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 4, "experts_per_token": 2},
     "experts_per_token"),  # was: k = 4, experts_per_token ignored
    ({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "hidden_size": 128, "n_head": 4, "n_positions": 128},
     "hidden_size"),
    ({"model_type": "llama", "quantization_config": {"quant_method": "awq", "bits": 4, "w_bit": 8}},
     "quantization_config.w_bit"),
])
def test_aliases_that_disagree_are_refused(cfg, field):
    """Two names of one quantity with different values: refused naming both (was: the first silently chosen)."""
    with pytest.raises(ConfigError, match=field):
        ModelConfig.from_hf_config({**SMALL, **cfg})


def test_a_pattern_of_one_is_full_attention_like_no_window():
    """sliding_window_pattern 1 (every layer global) is the same model as no window: layer_windows () (was (None,)
    x L)."""
    cfg = {**SMALL, "model_type": "gemma3_text", "sliding_window": 8}
    assert ModelConfig.from_hf_config({**cfg, "sliding_window_pattern": 1}) == ModelConfig.from_hf_config(
        {**cfg, "sliding_window": None})
