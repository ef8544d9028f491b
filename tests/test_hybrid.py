"""Hybrid models (recurrent layers beside attention): state and KV by hand, the qwen3_next reader, the
formulas against the reference scheduler, the pool's state blocks and the refusals."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import ConfigError, InvalidValueError, ModelConfig, get_accelerator, get_model
from roofline.errors import UnsupportedModelError
from roofline.estimate import criticality, decode_step, kv_capacity
from roofline.hybrid import StateMixer
from roofline.sim import KVPool, Request, RooflineCostModel, serve_continuous, serve_serial
from roofline.testing.strategies import state_mixers

#: Half the active profile's examples (30 by default): each example runs the scheduler.
HYBRID = settings(max_examples=max(5, settings().max_examples // 2))

#: Qwen3-Next-80B-A3B's shapes (transformers' Qwen3NextConfig defaults, the preset's source).
QWEN3_NEXT = dict(model_type="qwen3_next", vocab_size=151936, hidden_size=2048, intermediate_size=5632,
                  num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                  num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                  shared_expert_intermediate_size=512, tie_word_embeddings=False, torch_dtype="bfloat16",
                  linear_num_value_heads=32, linear_value_head_dim=128, linear_num_key_heads=16,
                  linear_key_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4)
#: What the state of one Qwen3-Next sequence is, by hand: 36 Gated DeltaNet layers x (conv (4 - 1) x
#: (2 x 16 x 128 + 32 x 128) + recurrent 32 x 128 x 128) elements x 2 B (BF16, vLLM's "auto").
STATE = 36 * (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2
#: KV per token, by hand: 2 x 12 attention layers x 2 KV heads x 256 x 2 B.
KV = 2 * 12 * 2 * 256 * 2


#: nvidia/Nemotron-H-8B-Base-8K (the preset's config: a trimmed public copy of its config.json).
NEMOTRON_H_8B = dict(model_type="nemotron_h",
                     hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", hidden_size=4096,
                     num_hidden_layers=52, num_attention_heads=32, num_key_value_heads=8,
                     ssm_state_size=128, mamba_num_heads=128, mamba_head_dim=64, n_groups=8, conv_kernel=4,
                     vocab_size=131072, torch_dtype="bfloat16")
#: Its state by hand: 24 Mamba2 layers x (conv (4 - 1) x (128 x 64 + 2 x 8 x 128) x 2 B (BF16) + SSM
#: 128 x 64 x 128 x 4 B (float32: NemotronHConfig's mamba_ssm_cache_dtype)); KV: 2 x 4 x 8 x 128 x 2 B.
NEMOTRON_STATE = 24 * (3 * (128 * 64 + 2 * 8 * 128) * 2 + 128 * 64 * 128 * 4)
NEMOTRON_KV = 2 * 4 * 8 * 128 * 2


def _tiny(**changes):
    """A small dense hybrid: 4 layers, 3 of them Gated DeltaNet (fast for the scheduler oracles)."""
    kw = dict(name="tiny-hybrid", num_hidden_layers=4, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, vocab_size=256,
              state_mixer=StateMixer("gated_deltanet", layers=3, heads=4, head_dim=16, key_heads=2, key_dim=16,
                                     conv_kernel=4))
    kw.update(changes)
    return ModelConfig(**kw)


def test_qwen3_next_state_and_kv_bytes_at_1000_and_32768_tokens_equal_the_hand_derivation():
    """Qwen3-Next: 39,518,208 B of state and 24,576 B/token of KV; a sequence holds 64,094,208 B at 1,000 tokens
    and 844,824,576 B at 32,768, and a decode row moves its KV plus twice its state."""
    model = get_model("qwen3-next-80b-a3b")
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (STATE, KV) == (39_518_208, 24_576)
    assert model.attention_layers == 12 and model.state_mixer.layers == 36
    for context, held in ((1_000, 64_094_208), (32_768, 844_824_576)):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == KV * context + STATE == held
        assert model.decode_bytes(1, context) - model.decode_weight_bytes(1) == KV * context + 2 * STATE
        assert kv_capacity(model, budget=10**12, context=context).kv_bytes_per_sequence == held


def test_qwen3_next_parameters_equal_the_published_total():
    """79,674,391,296 parameters and 3,874,929,408 active: the published safetensors total of the same shapes
    (Qwen/Qwen3-Coder-Next, quoted in a public test found with the search tool; the MTP layer not counted)."""
    model = get_model("qwen3-next-80b-a3b")
    assert model.parameters == 79_674_391_296
    assert model.active_parameters == 3_874_929_408
    # one Gated DeltaNet layer's tensors, by hand: qkvz, ba, conv1d, dt_bias, A_log, norm, out_proj
    gdn = 2048 * (2 * 16 * 128 + 2 * 4096) + 2048 * 64 + 8192 * 4 + 32 + 32 + 128 + 4096 * 2048
    attn = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 256  # q_proj with its gate, k, v, o, q/k norms
    assert sum(g.numel * g.count for g in model.tensor_groups() if g.name.startswith("linear_attn.")) == 36 * gdn
    assert sum(g.numel * g.count for g in model.tensor_groups()
               if g.name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")) == 12 * attn


def test_qwen3_next_defaults_are_transformers_own():
    """A config that omits head_dim, the linear_* fields and full_attention_interval reads as Qwen3NextConfig's
    defaults; a layer_types list and another interval move the layers."""
    omitted = {k: v for k, v in QWEN3_NEXT.items() if not k.startswith(("linear_", "full_attention", "head_dim"))}
    assert ModelConfig.from_hf_config(omitted).state_mixer == ModelConfig.from_hf_config(QWEN3_NEXT).state_mixer
    assert ModelConfig.from_hf_config(omitted).parameters == 79_674_391_296
    types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(48)]
    assert ModelConfig.from_hf_config({**omitted, "layer_types": types}).state_mixer.layers == 36
    half = ModelConfig.from_hf_config({**omitted, "full_attention_interval": 2})
    assert (half.state_mixer.layers, half.attention_layers, half.kv_bytes_per_token) == (24, 24, 2 * KV)


def test_nemotron_h_8b_parameters_state_and_kv_equal_the_hand_derivation():
    """Nemotron-H-8B: 8,100,852,736 parameters (published); 102,137,856 B of state (float32 SSM, BF16 conv) and
    16,384 B/token of KV in its 4 attention blocks; at 1,000 and 32,768 tokens a sequence holds KV + state."""
    model = get_model("nemotron-h-8b")
    assert model.parameters == model.published_parameters == 8_100_852_736
    assert ModelConfig.from_hf_config(NEMOTRON_H_8B).parameters == model.parameters
    assert (model.state_mixer.layers, model.attention_layers, model.mlp_layers) == (24, 4, 24)
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (NEMOTRON_STATE, NEMOTRON_KV)
    assert NEMOTRON_STATE == 102_137_856
    for context, held in ((1_000, 118_521_856), (32_768, 639_008_768)):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == held
        assert NEMOTRON_KV * context + NEMOTRON_STATE == held
    # one Mamba2 block by hand: in_proj (4096 x (2 x 8192 + 2 x 8 x 128 + 128)), conv1d and its bias, dt_bias,
    # A_log, D, the gated norm, out_proj, the block's norm
    mamba = 4096 * 18560 + 10240 * 4 + 10240 + 3 * 128 + 8192 + 8192 * 4096 + 4096
    mlp = 2 * 4096 * 21504 + 4096  # up and down (squared ReLU, not gated), the block's norm
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 4096
    assert model.parameters == 2 * 131072 * 4096 + 4096 + 24 * mamba + 24 * mlp + 4 * attention


def test_nemotron_h_defaults_are_transformers_own():
    """A Nemotron-H config without its Mamba, MLP and head fields reads as NemotronHConfig's defaults; an explicit
    mamba_ssm_cache_dtype, layers_block_type and the older field names are read too."""
    omitted = {"model_type": "nemotron_h", "hybrid_override_pattern": NEMOTRON_H_8B["hybrid_override_pattern"]}
    assert ModelConfig.from_hf_config(omitted).parameters == 8_100_852_736
    assert ModelConfig.from_hf_config(omitted).state_bytes_per_sequence == NEMOTRON_STATE
    bf16 = ModelConfig.from_hf_config({**omitted, "mamba_ssm_cache_dtype": "bfloat16"})
    assert bf16.state_bytes_per_sequence == 24 * (3 * 10240 + 128 * 64 * 128) * 2
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    listed = {"model_type": "nemotron_h", "layers_block_type": [names[c] for c in omitted["hybrid_override_pattern"]],
              "mamba_n_groups": 8, "mamba_d_conv": 4, "attention_head_dim": 128}
    assert ModelConfig.from_hf_config(listed).parameters == 8_100_852_736
    assert ModelConfig.from_hf_config({**omitted, "n_groups": 4}).state_mixer.conv_dim == 8192 + 2 * 4 * 128


def test_state_dtype_follows_the_engine_default_and_the_config():
    """The state is in the model's dtype (vLLM's mamba_ssm_cache_dtype "auto") unless the config names one."""
    assert ModelConfig.from_hf_config(QWEN3_NEXT).state_dtype == "bfloat16"
    fp32 = ModelConfig.from_hf_config({**QWEN3_NEXT, "mamba_ssm_cache_dtype": "float32"})
    assert fp32.state_bytes_per_sequence == 36 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4)
    assert fp32.conv_state_dtype == "bfloat16" and fp32.state_dtype == "float32"


def test_refusals_name_the_model_and_the_reason():
    """Other hybrids are refused by name; so are unknown layer types, an all-recurrent stack and T > 1."""
    for model_type in ("zamba", "bamba", "mamba2"):
        with pytest.raises(UnsupportedModelError, match=f"{model_type}.*state-space or hybrid"):
            ModelConfig.from_hf_config({"model_type": model_type})
    with pytest.raises(UnsupportedModelError, match="granitemoehybrid.*no attention layer"):
        ModelConfig.from_hf_config({"model_type": "granitemoehybrid"})  # the class's default: every layer Mamba2
    with pytest.raises(UnsupportedModelError, match="falcon_h1.*attn_layer_indices"):
        ModelConfig.from_hf_config({"model_type": "falcon_h1", "attn_layer_indices": [0]})
    with pytest.raises(UnsupportedModelError, match="jamba.*sliding_window"):
        ModelConfig.from_hf_config({"model_type": "jamba", "sliding_window": 4096})
    with pytest.raises(UnsupportedModelError, match="minimax.*layer type 'sliding_attention'"):
        ModelConfig.from_hf_config({"model_type": "minimax", "num_hidden_layers": 2,
                                    "layer_types": ["sliding_attention", "full_attention"]})
    with pytest.raises(UnsupportedModelError, match="lfm2.*no attention layer"):
        ModelConfig.from_hf_config({"model_type": "lfm2", "num_hidden_layers": 2, "layer_types": ["conv", "conv"]})
    with pytest.raises(ConfigError, match="mamba_n_heads'=24 x 'mamba_d_head'=64 must equal.*1024"):
        ModelConfig.from_hf_config({"model_type": "falcon_h1", "mamba_n_heads": 24, "mamba_d_head": 64})
    with pytest.raises(ConfigError, match="attn_layer_offset'=8 must be below attn_layer_period=8"):
        ModelConfig.from_hf_config({"model_type": "jamba", "attn_layer_offset": 8})
    with pytest.raises(InvalidValueError, match="mamba intermediate size=8192 is not divisible by 3"):
        ModelConfig.from_hf_config({"model_type": "jamba", "num_attention_heads": 3, "num_key_value_heads": 3,
                                    "head_dim": 128, "intermediate_size": 14334}).per_gpu(3)
    with pytest.raises(UnsupportedModelError, match="nemotron_h.*mixture-of-experts blocks"):
        ModelConfig.from_hf_config({"model_type": "nemotron_h", "hybrid_override_pattern": "ME*-"})
    with pytest.raises(UnsupportedModelError, match="nemotron_h.*no attention block"):
        ModelConfig.from_hf_config({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M-"})
    with pytest.raises(ConfigError, match="hybrid_override_pattern.*unknown block types"):
        ModelConfig.from_hf_config({"model_type": "nemotron_h", "hybrid_override_pattern": "M*X"})
    with pytest.raises(UnsupportedModelError, match="sliding_attention"):
        ModelConfig.from_hf_config({**QWEN3_NEXT, "layer_types": ["sliding_attention"] * 48})
    with pytest.raises(UnsupportedModelError, match="no attention layer"):
        ModelConfig.from_hf_config({**QWEN3_NEXT, "layer_types": ["linear_attention"] * 48})
    with pytest.raises(InvalidValueError, match="tensor_parallel_size.*mamba2 blocks"):
        get_model("nemotron-h-8b").per_gpu(2)
    with pytest.raises(InvalidValueError, match="linear_num_key_heads=6 is not divisible by 4"):
        ModelConfig.from_hf_config({**QWEN3_NEXT, "linear_num_key_heads": 6}).per_gpu(4)
    with pytest.raises(InvalidValueError, match="state_mixer"):
        _tiny(num_hidden_layers=3)
    with pytest.raises(InvalidValueError, match="state_blocks"):
        KVPool(10, 16, state_blocks=-1)


def test_tensor_parallel_gated_deltanet_splits_heads_and_states_as_vllm():
    """Qwen3-Next at T = 2, 4, 8: each GPU holds S / T of every sequence's state (key and value heads / T, vLLM's
    gated_delta_net_state_shape), one KV head of the 2 (replicated from T = 2), and a decode step of the group adds
    the 2 L all-reduces to hybrid_step_time."""
    model, gpu = get_model("qwen3-next-80b-a3b"), get_accelerator("h200")
    for T in (2, 4, 8):
        share = model.per_gpu(T)
        assert share.state_bytes_per_sequence == 36 * (3 * (2 * 16 * 128 + 32 * 128) // T + 32 * 128 * 128 // T) * 2
        assert share.state_bytes_per_sequence * T == STATE and share.kv_bytes_per_token == KV // 2
    cost = RooflineCostModel.for_model(model, gpu, tensor_parallel_size=2)
    share = model.per_gpu(2)
    F, a = share.flops_per_token("exact")
    expected = f.hybrid_step_time(batch=4, context_sum=400, weight_bytes=share.decode_weight_bytes(4),
                                  kv_bytes_per_token=share.kv_bytes_per_token, flops_per_token=F,
                                  attention_flops_per_token=a, state_bytes=share.state_bytes_per_sequence,
                                  bandwidth=Fraction(gpu.bandwidth), peak_flops=Fraction(gpu.peak("bf16")), overhead=0)
    assert cost.decode_time(4, 400) == expected + cost.allreduce_time(4) and cost.allreduce_time(4) > 0


def test_the_estimate_prices_the_state_in_every_decode_row():
    """decode_step's bytes = hybrid_decode_bytes, and criticality uses the hybrid B* and c*."""
    model, gpu = _tiny(), get_accelerator("h100-sxm")
    step = decode_step(model, gpu, batch=8, context=100)
    assert step.bytes == f.hybrid_decode_bytes(batch=8, context_sum=800, weight_bytes=model.weight_bytes,
                                               kv_bytes_per_token=model.kv_bytes_per_token,
                                               state_bytes=model.state_bytes_per_sequence)
    c = criticality(model, gpu, context=100)
    F, a = model.flops_per_token("exact")
    terms = dict(kv_bytes_per_token=model.kv_bytes_per_token, flops_per_token=F, attention_flops_per_token=a,
                 state_bytes=model.state_bytes_per_sequence, peak_flops=gpu.peak("bf16"), bandwidth=gpu.bandwidth)
    assert c.critical_context == f.hybrid_critical_context(**terms)
    assert c.critical_batch == f.hybrid_critical_batch(context=100, weight_bytes=model.weight_bytes, **terms)


def test_pool_state_blocks_admit_and_reject_by_one_rule():
    """A pool of 100 blocks of 16 with 7 state blocks: a 1,000-token sequence needs 63 + 7 blocks; 1 fits, not 1.5;
    a request whose lifetime needs more than the pool is rejected naming its blocks."""
    pool = KVPool(100, 16, state_blocks=7)
    assert (pool.blocks_for(0), pool.blocks_for(1), pool.blocks_for(1000)) == (0, 8, 70)
    assert pool.sequences_that_fit(1000) == f.hybrid_sequences_that_fit(pool_blocks=100, context=1000, block_size=16,
                                                                        state_blocks=7) == 1
    assert pool.sequences_that_fit(16) == 12 and KVPool(100, 16).sequences_that_fit(16) == 100
    assert "needs 101 blocks" in pool.never_fits_reason(1500, 1)
    model = get_model("qwen3-next-80b-a3b")
    assert KVPool.for_model(model, budget=16 * KV * 1000).state_blocks == -(-STATE // (16 * KV)) == 101


#: A Nemotron-H-shaped tiny model: 2 Mamba2 blocks, 1 attention block, 1 MLP block.
_MAMBA = dict(state_mixer=StateMixer("mamba2", layers=2, heads=4, head_dim=16, key_heads=2, key_dim=16, conv_kernel=4,
                                     conv_bias=True), mlp_only_layers=1, mixer_only=True, gated_mlp=False,
              norms_per_layer=1, state_dtype="float32")


@HYBRID
@given(st.integers(1, 6), st.integers(1, 200), st.integers(2, 6), st.integers(1, 40), st.booleans(),
       st.none() | state_mixers(max_layers=3, max_width=16), st.booleans())
def test_scheduler_steps_equal_the_hybrid_formulas(requests, prompt, output, extra_blocks, mamba, mixer, parallel):
    """Every decode step the scheduler prices takes hybrid_step_time and moves hybrid_decode_bytes, and its first
    step admits min(requests, hybrid_sequences_that_fit) sequences of their lifetime's context (Gated DeltaNet
    and Mamba2 layouts, and drawn recurrent layers of every kind, beside attention or in parallel with it)."""
    model = _tiny(**_MAMBA) if mamba else _tiny()
    if mixer is not None:  # the drawn layers in place of the model's, one attention layer (and an MLP block) beside
        mixer = attrs.evolve(mixer, parallel=parallel)
        model = _tiny(**{**(_MAMBA if mamba else {}), "state_mixer": mixer,
                         "num_hidden_layers": mixer.layers + 1 + (1 if mamba else 0)})
    gpu = get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_model(model, gpu)
    state = f.hybrid_state_blocks(state_bytes=model.state_bytes_per_sequence, block_size=16,
                                  kv_bytes_per_token=model.kv_bytes_per_token)
    lifetime = prompt + output - 1
    capacity = -(-lifetime // 16) + state + extra_blocks
    pool = KVPool(capacity, 16, state_blocks=state)
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=prompt, output_tokens=output) for i in range(requests)]
    result = serve_continuous(reqs, cost, kv_pool=pool, record_steps=True)
    assert result.summary.completed == requests
    fit = f.hybrid_sequences_that_fit(pool_blocks=capacity, context=lifetime, block_size=16, state_blocks=state)
    assert result.steps[0].batch == min(requests, fit)
    F, a = model.flops_per_token("exact")
    hw = dict(bandwidth=Fraction(gpu.bandwidth), peak_flops=Fraction(gpu.peak("bf16")), overhead=0)
    decodes = [s for s in result.steps if s.kind == "decode"]
    assert decodes
    for s in decodes:
        kw = dict(batch=s.batch, context_sum=s.context_sum, weight_bytes=model.weight_bytes,
                  kv_bytes_per_token=model.kv_bytes_per_token, state_bytes=model.state_bytes_per_sequence)
        assert s.bytes == f.hybrid_decode_bytes(**kw)
        assert s.duration_s == f.hybrid_step_time(**kw, flops_per_token=F, attention_flops_per_token=a, **hw)
        assert s.kv_blocks <= capacity


def test_hybrid_runs_on_the_stretch_clock_equal_to_the_step_clock():
    """stretch_terms() states the recurrent state (2 x state bytes / BW per decode row); engine="auto" runs the
    stretch clock, equal to the step clock field by field."""
    from roofline.testing.compare import assert_same_results

    model = _tiny()
    gpu = get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_model(model, gpu)
    terms = cost.stretch_terms()
    assert terms.state == 2 * Fraction(model.state_bytes_per_sequence) / Fraction(gpu.bandwidth) > 0
    plain = RooflineCostModel.for_model(model.__class__(**{**_fields(model), "state_mixer": None}), gpu)
    assert plain.stretch_terms().state == 0
    reqs = [Request(id=i, arrival_s=Fraction(i, 1000), prompt_tokens=10 + i, output_tokens=4) for i in range(5)]
    auto, step = serve_serial(reqs, cost, engine="auto"), serve_serial(reqs, cost, engine="step")
    assert auto.options["engine"] == "event"
    assert_same_results(auto, step)


def _fields(model: ModelConfig) -> dict:
    return {a.name: getattr(model, a.name) for a in attrs.fields(ModelConfig)}


def test_report_and_simulate_say_the_state(capsys):
    """`roofline report --json` carries the recurrent state and the text says it; `simulate --json` the state blocks;
    a weights-only decode step (kv_reads=False) drops the state with the KV."""
    import json

    from roofline.cli import main

    assert main(["report", "--model", "nemotron-h-8b", "--context", "8192", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)["model"]["recurrent_state"]
    assert state == {"kind": "mamba2", "layers": 24, "attention_layers": 4, "bytes_per_sequence": NEMOTRON_STATE,
                     "state_dtype": "float32", "conv_state_dtype": "bfloat16",
                     "recurrent_flops_per_token": 24 * (2 * 4 * 10240 + 6 * 128 * 64 * 128)}
    assert main(["report", "--model", "nemotron-h-8b", "--context", "8192"]) == 0
    assert "recurrent state       102,137,856 B     per sequence" in capsys.readouterr().out
    assert main(["simulate", "--model", "nemotron-h-8b", "--num-prompts", "4", "--random-input-len", "64",
                 "--random-output-len", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_pool"]["state_blocks"] == -(-NEMOTRON_STATE // (16 * NEMOTRON_KV))
    model, gpu = get_model("nemotron-h-8b"), get_accelerator("h100-sxm")
    bare = decode_step(model, gpu, batch=8, context=100, kv_reads=False)
    assert bare.bytes == model.weight_bytes
    assert decode_step(model, gpu, batch=8, context=100).bytes == model.decode_bytes(8, 100)


# ------------------------------------------------------------------ this year's other hybrids (issue 23)

DATA = Path(__file__).parent / "data" / "configs"


def _billions(value: int | float, digits: int = 0) -> float:
    return round(value / 1e9, digits)


def test_jamba_1_5_mini_parameters_state_and_kv_by_hand():
    """AI21-Jamba-1.5-Mini (its config.json): 51,570,323,328 parameters (52B published), 12,110,311,296 active
    (12B); attention on layers 4, 12, 20, 28; MoE of 16 experts on the odd layers; 28 Mamba1 layers."""
    model = ModelConfig.from_hf_config(DATA / "ai21-jamba-1.5-mini.json")
    h, V, inner, N, R, K, width = 4096, 65536, 8192, 16, 256, 4, 14336
    attention = 2 * h * 4096 + 2 * h * 1024
    mamba = (h * 2 * inner + inner * K + inner + inner * (R + 2 * N) + R * inner + inner + inner * N + inner
             + R + 2 * N + inner * h)  # in_proj, conv and bias, x_proj, dt_proj and bias, A_log, D, dt/B/C norms, out
    mlp = 3 * h * width
    moe = 16 * mlp + h * 16
    total = 2 * V * h + 4 * attention + 28 * mamba + 16 * mlp + 16 * moe + 32 * 2 * h + h
    assert model.parameters == total == 51_570_323_328
    assert model.active_parameters == total - 16 * 14 * mlp == 12_110_311_296
    assert (_billions(model.parameters), _billions(model.active_parameters)) == (52, 12)
    state = 28 * ((K - 1) * inner * 2 + inner * N * 2)  # conv (3 x 8,192) and SSM (8,192 x 16), BF16
    kv = 4 * 2 * 8 * 128 * 2
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (state, kv) == (8_716_288, 16_384)
    for context, held in ((1_000, 25_100_288), (32_768, 545_587_200)):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == kv * context + state == held


def test_jamba_defaults_are_transformers_own():
    """{"model_type": "jamba"} reads as JambaConfig(): attention every 8th layer from 4, MoE every 2nd from 1,
    dt rank ceil(4096 / 16) = 256, state 16, kernel 4: the 1.5 Mini's shapes (its vocabulary too)."""
    default = ModelConfig.from_hf_config({"model_type": "jamba"})
    mini = ModelConfig.from_hf_config(DATA / "ai21-jamba-1.5-mini.json")
    assert default.parameters == mini.parameters and default.state_mixer == mini.state_mixer
    assert (default.attention_layers, default.num_moe_layers, default.state_mixer.key_heads) == (4, 16, 256)
    moved = ModelConfig.from_hf_config({"model_type": "jamba", "attn_layer_period": 4, "attn_layer_offset": 0,
                                        "expert_layer_period": 1, "expert_layer_offset": 0, "mamba_dt_rank": "auto",
                                        "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 8})
    assert (moved.attention_layers, moved.num_moe_layers, moved.state_mixer.key_heads) == (8, 32, 64)


#: tiiuae/Falcon-H1-0.5B-Base's shapes, as NVIDIA Megatron-Bridge's test quotes its config.json (search tool,
#: file id 54893243323; mamba_d_ssm, which that copy drops, is its heads x head width 24 x 64 = 1,536).
FALCON_H1_05B = {"model_type": "falcon_h1", "head_dim": 64, "hidden_size": 1024, "intermediate_size": 2048,
                 "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 64, "mamba_d_state": 128,
                 "mamba_d_ssm": 1536, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 24,
                 "mamba_proj_bias": False, "mamba_rms_norm": False, "num_attention_heads": 8, "num_hidden_layers": 36,
                 "num_key_value_heads": 2, "projectors_bias": False, "tie_word_embeddings": False,
                 "torch_dtype": "bfloat16", "vocab_size": 32784, "time_step_limit": [0.0, float("inf")]}


def test_falcon_h1_parallel_layers_by_hand():
    """Falcon-H1-0.5B: attention and Mamba2 in all 36 layers: 521,411,104 parameters (0.5B), KV in every layer
    (18,432 B/token) and a state in every layer (14,542,848 B); its Infinity in time_step_limit is not read."""
    model = ModelConfig.from_hf_config(FALCON_H1_05B)
    h, V, inner, G, N, heads, K = 1024, 32784, 1536, 1, 128, 24, 4
    conv = inner + 2 * G * N
    attention = 2 * h * 512 + 2 * h * 128
    mamba = h * (2 * inner + 2 * G * N + heads) + conv * K + conv + 3 * heads + inner * h  # no gated norm, no biases
    layer = attention + mamba + 3 * h * 2048 + 2 * h
    assert model.parameters == 2 * V * h + 36 * layer + h == 521_411_104
    assert _billions(model.parameters, 1) == 0.5
    assert (model.attention_layers, model.state_mixer.layers, model.state_mixer.parallel) == (36, 36, True)
    state, kv = 36 * ((K - 1) * conv * 2 + heads * 64 * N * 2), 36 * 2 * 2 * 64 * 2
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (state, kv) == (14_542_848, 18_432)
    for context in (1_000, 32_768):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == kv * context + state
    assert model.kv_bytes(1_000) + state == 32_974_848
    normed = ModelConfig.from_hf_config({**FALCON_H1_05B, "mamba_rms_norm": True, "projectors_bias": True})
    assert normed.parameters - model.parameters == 36 * (inner + h)  # the gated RMSNorm and out_proj's bias


def test_falcon_h1_defaults_are_transformers_own():
    """{"model_type": "falcon_h1"} reads as FalconH1Config(): mamba_d_ssm 1,024 over 128 heads of 8, state 256,
    1 group, kernel 4; an explicit null mamba_d_ssm is mamba_expand x hidden (8,192: heads of 64)."""
    mixer = ModelConfig.from_hf_config({"model_type": "falcon_h1"}).state_mixer
    assert (mixer.kind, mixer.layers, mixer.heads, mixer.head_dim, mixer.key_heads, mixer.key_dim,
            mixer.conv_kernel, mixer.norm, mixer.parallel) == ("mamba2", 32, 128, 8, 1, 256, 4, False, True)
    assert ModelConfig.from_hf_config({"model_type": "falcon_h1", "mamba_d_ssm": None}).state_mixer.head_dim == 64


#: ibm-granite/granite-4.0-h-tiny's shapes, as a public test quotes its config.json (search tool, file id
#: 65865534003; "verbatim ... minus the fields the importer does not read").
_GRANITE_TYPES = (["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9 + ["attention"]
                  + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4)
GRANITE_H_TINY = {"model_type": "granitemoehybrid", "hidden_size": 1536, "num_hidden_layers": 40,
                  "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 512,
                  "shared_intermediate_size": 1024, "num_local_experts": 64, "num_experts_per_tok": 6,
                  "vocab_size": 100352, "tie_word_embeddings": True, "mamba_d_state": 128, "mamba_n_groups": 1,
                  "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_expand": 2, "mamba_d_conv": 4,
                  "max_position_embeddings": 131072, "layer_types": _GRANITE_TYPES}


def test_granite_4_h_tiny_parameters_state_and_kv_by_hand():
    """Granite-4.0-H-Tiny: 6,939,037,248 parameters (IBM: 7B), 1,465,470,528 active (1B); 36 Mamba2 layers, 4
    attention layers, every layer a MoE of 64 experts and a shared MLP; its dense twin (H-1B) 1,461,538,368."""
    model = ModelConfig.from_hf_config(GRANITE_H_TINY)
    h, V, inner, N = 1536, 100352, 3072, 128
    attention = 2 * h * 1536 + 2 * h * 512
    conv = inner + 2 * N
    mamba = h * (2 * inner + 2 * N + 48) + conv * 4 + conv + 3 * 48 + inner + inner * h
    moe = 64 * 3 * h * 512 + h * 64 + 3 * h * 1024
    total = V * h + 4 * attention + 36 * mamba + 40 * moe + 40 * 2 * h + h
    assert model.parameters == total == 6_939_037_248
    assert model.active_parameters == total - 40 * 58 * 3 * h * 512 == 1_465_470_528
    assert (_billions(model.parameters), _billions(model.active_parameters)) == (7, 1)
    state, kv = 36 * (3 * conv * 2 + 48 * 64 * N * 2), 4 * 2 * 4 * 128 * 2
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (state, kv) == (29_030_400, 8_192)
    for context, held in ((1_000, 37_222_400), (32_768, 297_465_856)):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == kv * context + state == held
    dense = ModelConfig.from_hf_config({**GRANITE_H_TINY, "intermediate_size": 4096, "shared_intermediate_size": 4096,
                                        "num_local_experts": 0, "num_experts_per_tok": 0})
    assert not dense.is_moe and dense.parameters == total - 40 * moe + 40 * 3 * h * 4096 == 1_461_538_368


def test_granitemoehybrid_defaults_are_transformers_own():
    """With only layer_types, GraniteMoeHybridConfig's defaults: hidden 4,096, Mamba2 of 128 heads of 64 ("auto":
    2 x 4,096 / 128), 1 group, state 256; 8 experts of 11,008, top 2, a shared MLP of 1,024."""
    model = ModelConfig.from_hf_config({"model_type": "granitemoehybrid",
                                        "layer_types": ["mamba"] * 31 + ["attention"]})
    m = model.state_mixer
    assert (m.layers, m.heads, m.head_dim, m.key_heads, m.key_dim, m.conv_kernel, m.conv_bias) == \
        (31, 128, 64, 1, 256, 4, True)
    assert (model.num_experts, model.num_experts_per_tok, model.moe_intermediate_size,
            model.shared_expert_intermediate_size, model.vocab_size) == (8, 2, 11008, 1024, 32000)


def test_lfm2_1_2b_parameters_state_and_kv_by_hand():
    """LFM2-1.2B (its shapes: 16 layers, attention at 2, 5, 8, 10, 12, 14; block_ff_dim 12,288 adjusted to
    8,192): 1,170,340,608 parameters, the model card's (as public copies of its table quote it, search-tool file
    ids 42798516307 and 60099840099); 10 short-conv layers hold 2 x 2,048 BF16 each."""
    cfg = {"model_type": "lfm2", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
           "num_key_value_heads": 8, "block_ff_dim": 12288, "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0,
           "block_auto_adjust_ff_dim": True, "vocab_size": 65536, "conv_L_cache": 3, "conv_bias": False,
           "full_attn_idxs": [2, 5, 8, 10, 12, 14], "tie_embedding": True}
    model = ModelConfig.from_hf_config(cfg)
    h, V = 2048, 65536
    conv = h * 3 * h + h * 3 + h * h
    attention = 2 * h * h + 2 * h * 512 + 2 * 64
    total = V * h + 16 * 3 * h * 8192 + 10 * conv + 6 * attention + 16 * 2 * h + h
    assert model.parameters == total == 1_170_340_608
    state, kv = 10 * 2 * h * 2, 6 * 2 * 8 * 64 * 2
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (state, kv) == (81_920, 12_288)
    for context in (1_000, 32_768):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == kv * context + state
    types = ["full_attention" if i in cfg["full_attn_idxs"] else "conv" for i in range(16)]
    assert ModelConfig.from_hf_config({**cfg, "full_attn_idxs": None, "layer_types": types}).parameters == total


def test_lfm2_defaults_are_transformers_own():
    """Lfm2Config(): every layer attention (full_attn_idxs default), MLP int(2 x 12,288 / 3) = 8,192, tied."""
    model = ModelConfig.from_hf_config({"model_type": "lfm2"})
    assert (model.state_mixer, model.intermediate_size, model.tie_word_embeddings) == (None, 8192, True)
    odd = ModelConfig.from_hf_config({"model_type": "lfm2", "block_ff_dim": 1000, "block_multiple_of": 64,
                                      "block_ffn_dim_multiplier": 1.5})
    assert odd.intermediate_size == 64 * -(-int(1.5 * int(2000 / 3)) // 64) == 1024


def test_minimax_m1_parameters_state_and_kv_by_hand():
    """MiniMax-M1 (its config.json, the corpus's): 456,089,655,296 parameters (456B published), 45.9B active
    without the two vocabulary matrices; 70 lightning layers hold 64 x 128 x 128 each, 10 softmax layers KV."""
    model = ModelConfig.from_hf_config(DATA / "minimax-m1.json")
    h, V, H, d = 6144, 200064, 64, 128
    lightning = h * 3 * H * d + h * H * d + H * d + H * d * h
    attention = 2 * h * H * d + 2 * h * 8 * d
    moe = 32 * 3 * h * 9216 + h * 32
    total = 2 * V * h + 70 * lightning + 10 * attention + 80 * moe + 80 * 2 * h + h
    assert model.parameters == total == 456_089_655_296
    assert _billions(model.active_parameters - 2 * V * h, 1) == 45.9
    state, kv = 70 * H * d * d * 2, 10 * 2 * 8 * d * 2
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (state, kv) == (146_800_640, 40_960)
    for context, held in ((1_000, 187_760_640), (32_768, 1_488_977_920)):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == kv * context + state == held


def test_minimax_defaults_are_transformers_own():
    """MiniMaxConfig(): even layers softmax, odd lightning (16 each of 32), 8 experts top 2; layer_types moves them."""
    model = ModelConfig.from_hf_config({"model_type": "minimax"})
    assert (model.attention_layers, model.state_mixer.layers, model.num_experts, model.num_experts_per_tok) == \
        (16, 16, 8, 2)
    types = ["linear_attention"] * 31 + ["full_attention"]
    assert ModelConfig.from_hf_config({"model_type": "minimax", "layer_types": types}).attention_layers == 1
    with pytest.raises(UnsupportedModelError, match="minimax_m1.*shared expert"):
        ModelConfig.from_hf_config({"model_type": "minimax_m1", "shared_intermediate_size": 1024})


def test_nemotron_h_56b_preset_by_hand():
    """Nemotron-H-56B-Base-8K: 54 Mamba2, 54 MLP and 10 attention blocks (the paper's), 56,324,350,464 parameters
    (56B published); a sequence holds 912,605,184 B of state (float32 SSM) beside 40,960 B/token of KV."""
    model = get_model("nemotron-h-56b")
    h, V = 8192, 131072
    mamba = h * (2 * 16384 + 2 * 8 * 256 + 256) + 20480 * 4 + 20480 + 3 * 256 + 16384 + 16384 * h + h
    mlp, attention = 2 * h * 32768 + h, 2 * h * h + 2 * h * 1024 + h
    assert model.parameters == 2 * V * h + h + 54 * mamba + 54 * mlp + 10 * attention == 56_324_350_464
    assert _billions(model.parameters) == 56
    state, kv = 54 * (3 * 20480 * 2 + 256 * 64 * 256 * 4), 10 * 2 * 8 * 128 * 2
    assert (model.state_bytes_per_sequence, model.kv_bytes_per_token) == (state, kv) == (912_605_184, 40_960)
    for context, held in ((1_000, 953_565_184), (32_768, 2_254_782_464)):
        assert model.kv_bytes(context) + model.state_bytes_per_sequence == kv * context + state == held


def test_jamba_preset_is_the_fixture():
    """The jamba-1.5-mini preset is the corpus's config.json, found by its Hugging Face id."""
    from roofline.models import load_model

    assert load_model("ai21labs/AI21-Jamba-1.5-Mini").parameters == \
        ModelConfig.from_hf_config(DATA / "ai21-jamba-1.5-mini.json").parameters == 51_570_323_328


def test_tensor_parallel_lightning_attention_splits_the_heads():
    """MiniMax-M1 at T = 8: each GPU holds 64 / 8 heads of 128 x 128 state in each of the 70 lightning layers and
    one KV head of the 8 in each softmax layer; Mamba1 (Jamba) and parallel (Falcon-H1) layers are refused."""
    model = ModelConfig.from_hf_config(DATA / "minimax-m1.json")
    share = model.per_gpu(8)
    assert share.state_bytes_per_sequence == 70 * 8 * 128 * 128 * 2 == 18_350_080
    assert share.kv_bytes_per_token == 10 * 2 * 1 * 128 * 2 == 5_120
    lightning = 6144 * 3 * 1024 + 6144 * 1024 + 1024 + 1024 * 6144  # qkv, output_gate, norm, out_proj: 8 heads
    assert sum(g.numel * g.count for g in share.tensor_groups() if g.name.startswith("self_attn.")) == 70 * lightning
    with pytest.raises(InvalidValueError, match="tensor_parallel_size.*mamba2 blocks"):
        ModelConfig.from_hf_config(FALCON_H1_05B).per_gpu(2)


def test_tensor_parallel_mamba1_and_short_conv_split_the_channels():
    """Jamba 1.5 Mini at T = 2: each GPU holds half of every Mamba1 layer's conv and SSM state (8,192 / 2 channels)
    and its x_proj rows, the dt/B/C norms whole; LFM2-1.2B at T = 2 half of each conv state."""
    model = ModelConfig.from_hf_config(DATA / "ai21-jamba-1.5-mini.json")
    share = model.per_gpu(2)
    assert share.state_bytes_per_sequence * 2 == model.state_bytes_per_sequence == 8_716_288
    inner, h, N, R = 4096, 4096, 16, 256
    mamba = (h * 2 * inner + inner * 4 + inner + inner * (R + 2 * N) + R * inner + inner + inner * N + inner
             + R + 2 * N + inner * h)
    assert sum(g.numel * g.count for g in share.tensor_groups() if g.name.startswith("mamba.")) == 28 * mamba
    lfm = ModelConfig.from_hf_config({"model_type": "lfm2", "hidden_size": 2048, "num_hidden_layers": 16,
                                      "num_attention_heads": 32, "num_key_value_heads": 8, "block_ff_dim": 12288,
                                      "full_attn_idxs": [2, 5, 8, 10, 12, 14]})
    assert lfm.per_gpu(2).state_bytes_per_sequence == 10 * 2 * 1024 * 2 == 40_960
