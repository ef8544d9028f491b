"""ModelConfig: presets, exact parameter counts, FLOPs and KV per token, config.json parsing, errors."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given

from roofline import ConfigError, InvalidValueError, ModelConfig, UnknownPresetError, get_model, model_names
from roofline.models import load_model
from roofline.testing.strategies import model_configs

KiB, GiB = 2**10, 2**30

PUBLISHED = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "mistral-7b-v0.1": 7_241_732_096,
    "qwen2.5-7b": 7_615_616_512,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-2-7b": 6_738_415_616,
    "llama-3.2-1b": 1_235_814_400,
}

# (preset, KV bytes per token in its config dtype) from the published model cards shapes: 2 L H_kv d x 2 B
KV = {
    "llama-3.1-8b": 128 * KiB,
    "llama-3.1-70b": 320 * KiB,
    "mistral-7b-v0.1": 128 * KiB,
    "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,
    "qwen3-4b": 144 * KiB,
    "qwen3-0.6b": 112 * KiB,
    "llama-2-13b": 800 * KiB,
    "llama-2-7b": 512 * KiB,
    "opt-13b": 800 * KiB,
}


def test_every_constants_model_has_a_preset():
    """Every model of the published model cards (and the cases' small models) ships as a preset."""
    assert set(PUBLISHED) | set(KV) <= set(model_names())


@pytest.mark.parametrize("name,total", sorted(PUBLISHED.items()))
def test_preset_parameter_count_equals_published_total(name, total):
    """Each preset's exact parameter count equals the total published with the checkpoint."""
    model = get_model(name)
    assert model.parameters == total
    assert model.published_parameters == total


@pytest.mark.parametrize("name,kv", sorted(KV.items()))
def test_preset_kv_bytes_per_token(name, kv):
    """KV bytes per token = 2 x layers x KV heads x head_dim x KV bytes for every preset."""
    assert get_model(name).kv_bytes_per_token == kv


@pytest.mark.parametrize("name", sorted(set(PUBLISHED) | set(KV)))
def test_preset_has_a_source(name):
    """Every preset names its source (the model card's config.json)."""
    assert "config.json" in get_model(name).source


def test_derived_counts_of_models_without_a_published_total():
    """Qwen3 4B (q/k norms, tied, explicit head_dim) and OPT-13B counts, derived by hand."""
    per_layer_q3 = (2560 * 4096 + 2 * 2560 * 1024 + 4096 * 2560) + 3 * 2560 * 9728 + 2 * 2560 + 2 * 128
    assert get_model("qwen3-4b").parameters == 151936 * 2560 + 36 * per_layer_q3 + 2560 == 4_022_468_096
    per_layer_opt = 4 * (5120 * 5120 + 5120) + (5120 * 20480 + 20480) + (20480 * 5120 + 5120) + 4 * 5120
    assert get_model("opt-13b").parameters == (50272 + 2050) * 5120 + 40 * per_layer_opt + 2 * 5120


def test_llama3_8b_kv():
    """vLLM PR #29736: Llama 3 8B BF16 KV is 128 KiB per token and an 8,192-token sequence holds 1.00 GiB."""
    m = get_model("llama-3-8b")
    assert m.kv_bytes_per_token == 131_072
    assert m.kv_bytes_per_token * 8192 == 1 * GiB
    assert 2 * m.num_hidden_layers * m.hidden_size * 2 == 512 * KiB != m.kv_bytes_per_token  # the wrong width


def test_explicit_head_dim():
    """LMCache #688: Qwen3 head_dim is read from the config (128), not hidden / heads."""
    q4, q06 = get_model("qwen3-4b"), get_model("qwen3-0.6b")
    assert q4.head_dim == 128 and q4.hidden_size // q4.num_attention_heads == 80
    assert q4.kv_bytes_per_token == 144 * KiB and q4.kv_bytes_per_token * 32768 == Fraction(9, 2) * GiB
    assert q06.kv_bytes_per_token == 112 * KiB and q06.kv_bytes_per_token * 40960 == Fraction(35, 8) * GiB


def test_llama_70b_uses_kv_heads():
    """Llama 3.1 70B KV uses the 8 KV heads: 320 KiB per token, 2.5/10/40 GiB at 8K/32K/128K."""
    # source: 70B KV tables that count query heads
    m = get_model("llama-3.1-70b")
    assert m.kv_bytes_per_token == 320 * KiB
    assert [m.kv_bytes_per_token * n / GiB for n in (8192, 32768, 131072)] == [2.5, 10, 40]


def test_matmul_flops_count_lm_head_not_embedding():
    """Llama 3 8B matmul FLOPs/token = 2 x 7,504,658,432; Llama 3.2 1B counts its tied matrix once in bytes."""
    # source: trl #6708
    m = get_model("llama-3-8b")
    assert m.matmul_parameters == 7_504_658_432
    assert m.matmul_flops_per_token == 15_009_316_864
    assert m.two_p_flops_per_token == 2 * 8_030_261_248
    small = get_model("llama-3.2-1b")
    assert small.weight_bytes == 2 * 1_235_814_400
    assert round(small.matmul_flops_per_token / 1e9, 2) == 2.47


def test_weight_and_kv_dtypes_are_separate():
    """Weight and KV dtypes are independent settings (int8 weights with BF16 KV)."""
    m = ModelConfig.from_preset("llama-3.1-8b", weight_dtype="int8")
    assert m.weight_bytes == 8_030_261_248 and m.kv_bytes_per_token == 131_072
    assert ModelConfig.from_preset("llama-3.1-8b", weight_dtype="int4").weight_bytes == 4_015_130_624
    assert ModelConfig.from_preset("llama-3.1-8b", kv_dtype="fp8").kv_bytes_per_token == 65_536


@given(model_configs(attention="gqa"))
def test_gqa_kv_at_most_mha(model):
    """GQA's KV per token is at most MHA's with the same query heads (equal only for group 1)."""
    import attrs

    mha = attrs.evolve(model, num_key_value_heads=model.num_attention_heads)
    assert model.kv_bytes_per_token <= mha.kv_bytes_per_token
    group = model.num_attention_heads // model.num_key_value_heads
    assert model.kv_bytes_per_token * group == mha.kv_bytes_per_token


@given(model_configs(attention="mha"))
def test_mqa_kv_is_mha_over_heads(model):
    """MQA's KV per token equals MHA's divided by the number of heads."""
    import attrs

    mqa = attrs.evolve(model, num_key_value_heads=1)
    assert mqa.kv_bytes_per_token * model.num_attention_heads == model.kv_bytes_per_token


@given(model_configs())
def test_tied_counts_shared_matrix_once(model):
    """Tying removes exactly vocab x hidden parameters and never the lm_head's matmul FLOPs."""
    import attrs

    untied = attrs.evolve(model, tie_word_embeddings=False)
    tied = attrs.evolve(model, tie_word_embeddings=True)
    assert untied.parameters - tied.parameters == model.vocab_size * model.hidden_size
    assert untied.matmul_flops_per_token == tied.matmul_flops_per_token


def _cfg(**changes):
    base = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "vocab_size": 100}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def test_hf_config_defaults():
    """Absent num_key_value_heads means MHA; absent head_dim means hidden / heads."""
    m = ModelConfig.from_hf_config(_cfg())
    assert m.num_key_value_heads == 4 and m.head_dim == 16 and not m.tie_word_embeddings
    assert m.weight_dtype == m.kv_dtype == "bfloat16"


def test_hf_config_from_file(tmp_path):
    """A config.json path is read, including torch_dtype for both dtypes."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_cfg(num_key_value_heads=2, torch_dtype="float16")))
    m = load_model(str(path))
    assert m.num_key_value_heads == 2 and m.weight_dtype == "float16" and m.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_hidden_layers": -3}, "num_hidden_layers"),
        ({"vocab_size": 10.5}, "vocab_size"),
        ({"intermediate_size": "128"}, "intermediate_size"),
        ({"hidden_size": float("inf")}, "hidden_size"),
    ],
)
def test_bad_config_field_is_named(changes, field):
    """A missing, zero, negative, non-integer or non-finite size is a ConfigError naming the field."""
    with pytest.raises(ConfigError, match=field):
        ModelConfig.from_hf_config(_cfg(**changes))


def test_heads_not_divisible_by_kv_heads():
    """Heads not divisible by KV heads is an error naming num_key_value_heads and its value."""
    with pytest.raises(InvalidValueError, match="num_key_value_heads=3"):
        ModelConfig.from_hf_config(_cfg(num_key_value_heads=3))


def test_not_json_and_missing_file(tmp_path):
    """A file that is not JSON, holds NaN in a field it uses, or does not exist is a ConfigError naming it."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(str(bad))
    nan = tmp_path / "nan.json"
    nan.write_text('{"model_type": "llama", "num_hidden_layers": NaN}')
    with pytest.raises(ConfigError, match="field 'num_hidden_layers'=nan must be finite"):
        load_model(str(nan))
    with pytest.raises(ConfigError, match="cannot read"):
        load_model(str(tmp_path / "absent.json"))
    arr = tmp_path / "list.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        load_model(str(arr))


def test_unknown_preset_lists_known():
    """An unknown preset raises UnknownPresetError (a ValueError) listing the known ones."""
    with pytest.raises(UnknownPresetError, match="llama-3.1-8b") as info:
        get_model("llama-9")
    assert isinstance(info.value, ValueError)


def test_unknown_dtype():
    """An unknown dtype names the field."""
    with pytest.raises(InvalidValueError, match="weight_dtype='int3'"):
        ModelConfig.from_preset("llama-3.1-8b", weight_dtype="int3")


def test_wrong_types_and_implausible_sizes():
    """A config that is not a path or dict, or with an absurd size, is a ConfigError naming it (no overflow later)."""
    for bad in ([1, 2], None, 5):
        with pytest.raises(ConfigError, match="expected a path"):
            ModelConfig.from_hf_config(bad)
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        ModelConfig.from_hf_config(_cfg(num_hidden_layers=10**400))


def test_step_terms_feed_the_formulas():
    """step_terms gives the formulas' model inputs under each FLOPs convention (Llama 3.1 8B)."""
    m = get_model("llama-3.1-8b")
    assert m.step_terms("exact") == dict(weight_bytes=16_060_522_496, kv_bytes_per_token=131_072,
                                         flops_per_token=15_009_316_864, attention_flops_per_token=524_288)
    assert m.step_terms("lesson") == dict(weight_bytes=16_060_522_496, kv_bytes_per_token=131_072,
                                          flops_per_token=16_060_522_496, attention_flops_per_token=0)
    with pytest.raises(InvalidValueError, match="flops='2P'"):
        m.step_terms("2P")


@pytest.mark.parametrize("dtype", ["int8", "float32", "fp6", "FP8", 8])
def test_an_activation_dtype_without_a_peak_is_refused(dtype):
    """activation_dtype picks the compute peak: one it cannot map (int8, a typo) was priced at the BF16 peak
    silently."""
    import attrs

    with pytest.raises(InvalidValueError, match="activation_dtype"):
        attrs.evolve(get_model("llama-3.1-8b"), activation_dtype=dtype)


def test_float8_activations_use_the_fp8_peak():
    """activation_dtype "float8" (the name DTYPE_BYTES knows too) selects the FP8 peak, as "fp8" does."""
    import attrs

    assert attrs.evolve(get_model("llama-3.1-8b"), activation_dtype="float8").compute_dtype == "fp8"
