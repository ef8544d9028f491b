"""Hybrid models (recurrent layers beside attention): state and KV by hand, the qwen3_next reader, the
formulas against the reference scheduler, the pool's state blocks and the refusals."""

from __future__ import annotations

from fractions import Fraction

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
    for model_type in ("falcon_h1", "granitemoehybrid", "lfm2", "jamba", "minimax"):
        with pytest.raises(UnsupportedModelError, match=model_type):
            ModelConfig.from_hf_config({"model_type": model_type})
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
       st.none() | state_mixers(max_layers=3, max_width=16))
def test_scheduler_steps_equal_the_hybrid_formulas(requests, prompt, output, extra_blocks, mamba, mixer):
    """Every decode step the scheduler prices takes hybrid_step_time and moves hybrid_decode_bytes, and its first
    step admits min(requests, hybrid_sequences_that_fit) sequences of their lifetime's context (Gated DeltaNet
    and Mamba2 layouts, and drawn recurrent layers)."""
    model = _tiny(**_MAMBA) if mamba else _tiny()
    if mixer is not None:  # the drawn layers in place of the model's, one attention layer (and an MLP block) beside
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
    import attrs

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
