"""Weights by tensor class and quantization_config: packed weights plus scales (and zeros), worked by hand.

docs/conventions.md, "Weight dtypes per tensor class": GPTQ/AWQ b-bit weights cost b/8
bytes each plus a 2-byte scale (and a b/8-byte zero) per group of ``group_size`` inputs;
FP8 checkpoints 1 byte per weight plus a 4-byte scale per block (or per matrix); mxfp4 4
bits plus a 1-byte E8M0 scale per 32 inputs; embeddings, lm_head and norms keep torch_dtype.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import ModelConfig, get_accelerator
from roofline.errors import ConfigError, InvalidValueError, UnsupportedModelError
from roofline.estimate import compute_peak, decode_step
from roofline.families import quantized_matrix_bytes
from roofline.models import Quantization

H100 = get_accelerator("h100-sxm")

MISTRAL_7B = {"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": False,
              "torch_dtype": "float16"}
#: TheBloke/zephyr-7B-alpha-AWQ's quantization_config, as quoted in the transformers documentation ("AWQ").
AWQ = {"quant_method": "awq", "zero_point": True, "group_size": 128, "bits": 4, "version": "gemm"}


def _model(tmp_path, **extra) -> ModelConfig:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MISTRAL_7B, **extra}))
    return ModelConfig.from_hf_config(path)


@pytest.mark.parametrize("quant,shape,expected", [
    (Quantization("gptq", 4, "group+zero", 128), (4096, 4096), 4096 * 4096 // 2 + 32 * 4096 * 2 + 32 * 4096 // 2),
    (Quantization("awq", 4, "group", 128), (14336, 4096), 14336 * 4096 // 2 + 112 * 4096 * 2),
    (Quantization("gptq", 8, "group+zero", -1), (4096, 1024), 4096 * 1024 + 1024 * (2 + 1)),
    (Quantization("fp8", 8, "block", block=(128, 128)), (7168, 2048), 7168 * 2048 + 56 * 16 * 4),
    (Quantization("fp8", 8, "tensor"), (4096, 4096), 4096 * 4096 + 4),
    (Quantization("mxfp4", 4, "mxfp4", 32), (2880, 5760), 2880 * 5760 // 2 + 90 * 5760),
    (Quantization("compressed-tensors", 4, "group", 128), (4096, 4096), 4096 * 4096 // 2 + 32 * 4096 * 2),
])
def test_quantized_matrix_bytes_by_hand(quant, shape, expected):
    """Packed weights plus scales (and zeros) per group, block or matrix, for each scheme."""
    assert quantized_matrix_bytes(quant, shape, "float16") == expected


def test_awq_mistral_7b_by_hand(tmp_path):
    """Mistral 7B in AWQ 4-bit g128: 4,150,796,288 bytes (the zephyr-7B AWQ checkpoint is 4.15 GB)."""
    m = _model(tmp_path, quantization_config=AWQ)
    per_layer_weights = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336
    per_layer_groups = 32 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336) + 112 * 4096  # groups x outputs
    projections = 32 * (per_layer_weights // 2 + per_layer_groups * 5 // 2)  # 2-byte scale + 4-bit zero per group
    assert m.weight_bytes_by_class()["projections"] == projections == 3_625_975_808
    assert m.weight_bytes == projections + 2 * 32000 * 4096 * 2 + (2 * 32 + 1) * 4096 * 2 == 4_150_796_288
    assert compute_peak(m, H100) == H100.peak_flops  # weight-only: the FP16 peak


def test_fp8_dynamic_checkpoint_uses_fp8_peak(tmp_path):
    """An FP8 checkpoint with dynamic activation scales runs its matmuls at the FP8 peak (2x BF16 on H100)."""
    q = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    m = _model(tmp_path, quantization_config=q, torch_dtype="bfloat16")
    assert compute_peak(m, H100) == H100.peak("fp8")
    step = decode_step(m, H100, batch=64, context=0)
    assert step.compute_time == step.flops / H100.peak("fp8")


@pytest.mark.parametrize("scheme,peak", [
    ({"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}, "fp8"),
    ({"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True},
      "input_activations": None}, "bf16"),
    ({"weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
      "input_activations": None}, "bf16"),
])
def test_compressed_tensors_schemes(tmp_path, scheme, peak):
    """compressed-tensors FP8 (W8A8), w4a16 and int8 weight-only: below BF16 bytes, peak of the matmul inputs."""
    q = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"targets": ["Linear"], **scheme}},
         "ignore": ["lm_head"]}
    m = _model(tmp_path, quantization_config=q, torch_dtype="bfloat16")
    assert m.weight_bytes < m.with_dtypes(weight_dtype="bfloat16").weight_bytes
    assert compute_peak(m, H100) == H100.peak(peak)


def test_int8_activations_are_refused_by_name(tmp_path):
    """compressed-tensors W8A8 int8 needs an INT8 peak the accelerator tables do not hold: refused by name."""
    q = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}}}
    with pytest.raises(UnsupportedModelError, match="INT8"):
        _model(tmp_path, quantization_config=q)


@pytest.mark.parametrize("method", ["bitsandbytes", "hqq", "eetq", "quanto", "aqlm"])
def test_other_quant_methods_are_refused_by_name(tmp_path, method):
    """Any quant_method but gptq, awq, fp8, compressed-tensors and mxfp4 is refused, naming the method."""
    with pytest.raises(UnsupportedModelError, match=method):
        _model(tmp_path, quantization_config={"quant_method": method})


def test_weight_dtype_override_wins(tmp_path):
    """--weight-dtype int4 replaces the checkpoint's AWQ format everywhere it names: P x 1/2 byte."""
    m = _model(tmp_path, quantization_config=AWQ).with_dtypes(weight_dtype="int4")
    assert m.weight_bytes == m.parameters / 2
    assert m.quantization is None


CT = "compressed-tensors"


@pytest.mark.parametrize("q,error,field", [
    # 4.0 == 4 passed the membership test and crashed in Fraction (TypeError) when pricing
    ({"quant_method": "gptq", "bits": 4.0, "group_size": 128}, "ConfigError", "quantization_config.bits"),
    ({"quant_method": "awq", "w_bit": 4.0, "q_group_size": 128}, "ConfigError", "quantization_config.w_bit"),
    ({"quant_method": "gptq", "bits": True}, "ConfigError", "quantization_config.bits"),
    # a config group, its weights or activations not objects: AttributeError
    ({"quant_method": CT, "config_groups": {"group_0": [1]}}, "ConfigError", "config_groups.group_0"),
    ({"quant_method": CT, "config_groups": {"group_0": {"weights": "x"}}}, "ConfigError", "group_0.weights"),
    ({"quant_method": CT, "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"},
                                                        "input_activations": "x"}}},
     "ConfigError", "group_0.input_activations"),
    ({"quant_method": CT, "config_groups": {"group_0": {"weights": {"num_bits": 4.0, "type": "int",
                                                                    "strategy": "group", "group_size": 128}}}},
     "ConfigError", "weights.num_bits"),
    # block_structure of 0 (ZeroDivisionError), 3 entries (unpacking ValueError), text (TypeError), negative
    # (priced as a negative number of blocks)
    *[({"quant_method": CT, "config_groups": {"group_0": {"weights": {
        "num_bits": 8, "type": "float", "strategy": "block", "block_structure": block}}}},
       "ConfigError", "weights.block_structure") for block in ([0, 128], [1, 2, 3], "ab", [-128, 128])],
    # a strategy the package does not price is refused by name, not priced as one scale per matrix
    ({"quant_method": CT, "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float",
                                                                    "strategy": "tokenwise"}}}},
     "UnsupportedModelError", "tokenwise"),
    # mxfp4 quantizes the experts only: on a dense model it quantized nothing and was priced as BF16
    ({"quant_method": "mxfp4"}, "UnsupportedModelError", "mxfp4"),
])
def test_malformed_quantization_configs_are_refused_naming_the_field(tmp_path, q, error, field):
    """Malformed or unmodelled quantization_config fields: one line naming the field, never a traceback."""
    from roofline import errors

    with pytest.raises(getattr(errors, error)) as info:
        m = _model(tmp_path, quantization_config=q)
        m.weight_bytes  # noqa: B018 (the crash was here, when pricing)
    assert field in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("args,kwargs,field", [
    (("gptq", 4, "group", 0), {}, "group_size"),  # ZeroDivisionError when pricing
    (("gptq", 4.0, "group", 128), {}, "bits"),  # TypeError when pricing
    (("fp8", 8, "block"), {}, "block"),  # AssertionError when pricing
    (("fp8", 8, "block"), {"block": (0, 128)}, "block"),
    (("fp8", 8, "blocks"), {}, "scheme"),  # an attrs ValueError holding a tuple, not a named error
])
def test_quantization_refuses_what_it_cannot_price(args, kwargs, field):
    """Quantization(...) built by hand: a field it could not price is refused by name (InvalidValueError)."""
    from roofline.errors import InvalidValueError

    with pytest.raises(InvalidValueError) as info:
        quantized_matrix_bytes(Quantization(*args, **kwargs), (256, 256))
    assert info.value.field == field


def test_mxfp4_on_a_moe_model_quantizes_its_experts(tmp_path):
    """mxfp4 on a MoE model (gpt-oss's layout): the experts at 4 bits + a scale per 32 inputs, the rest BF16."""
    m = _model(tmp_path, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2,
               quantization_config={"quant_method": "mxfp4"}, torch_dtype="bfloat16")
    assert m.weight_bytes_by_class()["experts"] == 32 * 8 * 3 * (4096 * 14336 // 2 + 4096 * 14336 // 32)


@pytest.mark.parametrize("q,field", [
    # lm_head "true" was ignored (lm_head priced BF16); "dynamc" was read as weight-only
    ({"quant_method": "gptq", "bits": 4, "lm_head": "true"}, "quantization_config.lm_head"),
    ({"quant_method": "fp8", "activation_scheme": "dynamc"}, "quantization_config.activation_scheme"),
])
def test_misspelled_quantization_fields_are_refused(tmp_path, q, field):
    """A quantization field of the wrong type or value is refused by name, never read as its default."""
    from roofline.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        _model(tmp_path, quantization_config=q)


def test_fp8_ignored_layers_are_read(tmp_path):
    """vLLM's fp8 ignored_layers (beside modules_to_not_convert and ignore): an unmapped layer is refused by name."""
    with pytest.raises(UnsupportedModelError, match="model.layers.0.mlp.down_proj"):
        _model(tmp_path, quantization_config={"quant_method": "fp8",
                                              "ignored_layers": ["model.layers.0.mlp.down_proj"]})


@pytest.mark.parametrize("skipped,error", [
    (["model.layers.*.mlp.experts"], UnsupportedModelError),  # was priced mxfp4 though left unquantized
    ("lm_head", None),  # not a list: was accepted
])
def test_mxfp4_modules_to_not_convert_are_checked(tmp_path, skipped, error):
    """mxfp4's modules_to_not_convert is read like the other methods' (it was ignored)."""
    from roofline.errors import ConfigError

    with pytest.raises(error or ConfigError, match="modules_to_not_convert" if error is None else "experts"):
        _model(tmp_path, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2,
               quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": skipped})


_JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 2),
                          st.floats(allow_nan=False, allow_infinity=False),
                          st.sampled_from(["no", "false", "true", "yes", "", "0"]), st.just([]), st.just({}))


@settings(settings.get_profile("fuzz"))
@given(symmetric=_JSON_SCALARS)
def test_compressed_tensors_symmetric_is_a_json_boolean(symmetric: object) -> None:
    """``"symmetric"`` of compressed-tensors int4 weights: true (or absent, null) prices no zero point, false a
    zero point per group; any other value ("no", 0, "false") is refused naming the field, never read as truthy."""
    import tempfile

    weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": symmetric}
    q = {"quant_method": CT, "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}
    with tempfile.TemporaryDirectory() as tmp:
        if symmetric is None or isinstance(symmetric, bool):
            m = _model(Path(tmp), quantization_config=q)
            assert m.quantization.scheme == ("group+zero" if symmetric is False else "group")
        else:
            with pytest.raises(ConfigError, match=r"weights: field 'symmetric'=.* must be true or false"):
                _model(Path(tmp), quantization_config=q)


_CT_GOOD = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}
_QUANT_FIELDS = st.sampled_from([
    ("quant_method", ["mxfp4", "bitsandbytes", "MXFP4", 4]),
    ("modules_to_not_convert", [["model.layers.0.mlp.down_proj"], ["model.layers.*.mlp.experts"], ["lm_head"]]),
    ("ignore", [["model.layers.0.self_attn.q_proj"], ["vision_tower"], ["router"]]),
    ("config_groups", [{}, {"a": {"weights": _CT_GOOD}, "b": {"weights": _CT_GOOD}}]),
    ("weights.strategy", ["tensor", "channel", "group", "block", "token", "x"]),
    ("weights.type", ["int", "float", "fp4"]),
    ("weights.num_bits", [2, 4, 8, 16]),
    ("input_activations", [None, {"num_bits": 8, "type": "int"}, {"num_bits": 8, "type": "float"}]),
])


@settings(settings.get_profile("fuzz"))
@given(changes=st.lists(_QUANT_FIELDS.flatmap(lambda kv: st.tuples(st.just(kv[0]), st.sampled_from(kv[1]))),
                        min_size=1, max_size=3), moe=st.booleans())
def test_every_quantization_refusal_names_its_field(changes: list[tuple[str, object]], moe: bool) -> None:
    """A compressed-tensors config (or another method) with fields changed, on a dense or a MoE model: a model,
    or a refusal naming the config field (``field 'quantization_config.config_groups.group_0.weights.strategy'``),
    not only the model_type."""
    import tempfile

    q: dict = {"quant_method": CT, "config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(_CT_GOOD)}}}
    group = q["config_groups"]["group_0"]
    for key, value in changes:
        if key.startswith("weights."):
            group["weights"][key.split(".")[1]] = value
        elif key == "input_activations":
            group[key] = value
        else:
            q[key] = value
    extra = dict(model_type="mixtral", num_local_experts=8, num_experts_per_tok=2) if moe else {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            m = _model(Path(tmp), quantization_config=q, **extra)
        except (ConfigError, InvalidValueError) as exc:
            assert "quantization_config" in str(exc), exc
            if isinstance(exc, UnsupportedModelError):
                assert exc.field is not None and exc.field.startswith("quantization_config"), exc
                assert f"field {exc.field!r}" in str(exc), exc
            return
    assert 0 < m.weight_bytes < m.with_dtypes(weight_dtype="float32").weight_bytes
