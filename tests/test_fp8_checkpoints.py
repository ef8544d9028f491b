"""Qwen3's FP8 checkpoints list every layer's norms and router in modules_to_not_convert: they price.

docs/conventions.md, "Architectures" (weight dtypes per tensor class): a norm entry
(``input_layernorm``, ``post_attention_layernorm``, ``q_norm``, ``model.norm``) is the
"norms" class, never quantized; ``mlp.gate`` is the router. The 30B config is real
(tests/data/configs/qwen3-30b-a3b-thinking-2507-fp8.json, MANIFEST.json); the 235B one is
the shipped qwen3-235b-a22b preset with the same quantization_config written for its 94 layers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline import ModelConfig, get_model
from roofline.errors import UnsupportedModelError

HERE = Path(__file__).parent / "data" / "configs"
FP8_30B = HERE / "qwen3-30b-a3b-thinking-2507-fp8.json"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _fp8_block_bytes(rows: int, cols: int) -> int:
    """1 byte per weight plus a 4-byte scale per 128 x 128 block."""
    return rows * cols + _ceil(rows, 128) * _ceil(cols, 128) * 4


def test_qwen3_30b_a3b_fp8_prices_with_the_bf16_checkpoints_parameters():
    """Every norm and router entry maps to its class: the same 30,532,122,624 parameters as the BF16 checkpoint;
    the source's count of stored elements, 30,533,947,392, is these plus the 1,824,768 block scales."""
    m = ModelConfig.from_hf_config(FP8_30B)
    assert m.parameters == ModelConfig.from_hf_config(HERE / "qwen3-30b-a3b.json").parameters == 30_532_122_624
    scales = 48 * (4096 // 128 * 16 + 2 * (512 // 128) * 16 + 16 * 32) + 48 * 128 * 3 * (6 * 16)
    assert scales == 1_824_768 and m.parameters + scales == 30_533_947_392
    assert (m.num_experts, m.quantization.method, m.quantization.block, m.activation_dtype) == (128, "fp8",
                                                                                                (128, 128), "fp8")


def test_qwen3_30b_a3b_fp8_weight_bytes_by_hand():
    """FP8 projections and experts with FP32 block scales; embeddings, lm_head, router and norms in BF16."""
    m = ModelConfig.from_hf_config(FP8_30B)
    h, V, L, E = 2048, 151936, 48, 128
    attention = _fp8_block_bytes(h, 4096) + 2 * _fp8_block_bytes(h, 512) + _fp8_block_bytes(4096, h)
    experts = E * 3 * _fp8_block_bytes(h, 768)
    bf16 = 2 * (2 * V * h + L * (h * E + 2 * h + 2 * 128) + h)
    assert m.weight_bytes == L * (attention + experts) + bf16 == 31_174_545_408
    assert round(m.weight_bytes / 2**30, 2) == 29.03  # the source's file total, 29.03 GB (GiB)


def test_qwen3_235b_a22b_fp8_prices(tmp_path):
    """The 235B preset with Qwen's FP8 modules_to_not_convert for 94 layers: priced, parameters unchanged."""
    preset = json.loads((Path(__file__).parents[1] / "roofline/data/models/qwen3-235b-a22b.json").read_text())
    skip = ["lm_head"] + [f"model.layers.{i}.{name}" for i in range(94)
                          for name in ("input_layernorm", "mlp.gate", "post_attention_layernorm")]
    preset["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "modules_to_not_convert": skip,
                                     "quant_method": "fp8", "weight_block_size": [128, 128]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(preset))
    m = ModelConfig.from_hf_config(path)
    assert m.parameters == get_model("qwen3-235b-a22b").parameters
    h, E = 4096, 128
    per_layer = (_fp8_block_bytes(h, 8192) + 2 * _fp8_block_bytes(h, 512) + _fp8_block_bytes(8192, h)
                 + E * 3 * _fp8_block_bytes(h, 1536))
    bf16 = 2 * (2 * 151936 * h + 94 * (h * E + 2 * h + 2 * 128) + h)
    assert m.weight_bytes == 94 * per_layer + bf16


@pytest.mark.parametrize("entry", ["model.layers.0.self_attn.q_norm", "model.norm", "model.layers.3.input_layernorm",
                                   "model.layers.*.post_attention_layernorm"])
def test_norm_entries_are_the_norms_class(entry):
    """A norm entry leaves the pricing as without it (norms are never quantized)."""
    cfg = json.loads(FP8_30B.read_text())
    base = ModelConfig.from_hf_config(cfg).weight_bytes
    cfg["quantization_config"]["modules_to_not_convert"] = ["lm_head", entry]
    assert ModelConfig.from_hf_config(cfg).weight_bytes == base


@pytest.mark.parametrize("entry", ["model.layers.0.mlp.experts.0.down_proj", "model.layers.0.normalizer_proj"])
def test_an_entry_that_is_no_norm_or_router_is_still_refused(entry):
    """A projection or an unknown module left unquantized is still refused by name, not priced as quantized."""
    cfg = json.loads(FP8_30B.read_text())
    cfg["quantization_config"]["modules_to_not_convert"] = [entry]
    with pytest.raises(UnsupportedModelError, match=entry.replace(".", r"\.")):
        ModelConfig.from_hf_config(cfg)


# ------------------------------------------------------------------ NVFP4, FP4 peaks, FP8 KV cache

NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}


def _nvfp4_bytes(rows: int, cols: int) -> int:
    """4 bits per weight, an E4M3 byte per 16 inputs and per output, one FP32 per-tensor scale."""
    return rows * cols // 2 + _ceil(rows, 16) * cols + 4


def test_nvfp4_weight_bytes_by_hand():
    """Llama 3.1 8B's config with ModelOpt's NVFP4 quantization_config: every projection at NVFP4, embeddings,
    lm_head and norms in BF16; the matmuls run at the FP4 peak."""
    cfg = json.loads((HERE / "llama-3.1-8b.json").read_text())
    model = ModelConfig.from_hf_config({**cfg, "quantization_config": NVFP4})
    h, kv, inter, V, L = 4096, 1024, 14336, 128256, 32
    layer = (2 * _nvfp4_bytes(h, h) + 2 * _nvfp4_bytes(h, kv) + 2 * _nvfp4_bytes(h, inter)
             + _nvfp4_bytes(inter, h))
    assert model.weight_bytes == L * layer + 2 * (2 * V * h + L * 2 * h + h)
    assert (model.quantization.scheme, model.compute_dtype) == ("nvfp4", "fp4")


def test_fp4_peaks_and_their_refusal_before_blackwell():
    """B200 and GB200 run NVFP4 at 9 and 10 PFLOP/s dense (datasheet 18 and 20 with sparsity); an H100 has no FP4
    tensor cores: refused by name, not priced at another peak."""
    from roofline import get_accelerator
    from roofline.errors import InvalidValueError
    from roofline.estimate import compute_peak

    cfg = json.loads((HERE / "llama-3.1-8b.json").read_text())
    model = ModelConfig.from_hf_config({**cfg, "quantization_config": NVFP4})
    assert compute_peak(model, get_accelerator("b200")) == 9 * 10**15
    assert compute_peak(model, get_accelerator("gb200")) == 10 * 10**15
    assert get_accelerator("b200").peak_fp4.value == 2 * get_accelerator("b200").peak_fp8.value
    with pytest.raises(InvalidValueError, match="no FP4 tensor cores"):
        compute_peak(model, get_accelerator("h100-sxm"))


def test_modelopt_other_algorithms_are_refused_by_name():
    """A ModelOpt quant_algo other than NVFP4 or FP8 is refused naming it."""
    cfg = json.loads((HERE / "llama-3.1-8b.json").read_text())
    with pytest.raises(UnsupportedModelError, match="W4A8_AWQ"):
        ModelConfig.from_hf_config({**cfg, "quantization_config": {"quant_method": "modelopt",
                                                                   "quant_algo": "W4A8_AWQ"}})


def test_fp8_kv_cache_dtype_vllm_names(capsys):
    """--kv-cache-dtype (vLLM's name) sets the KV dtype: fp8, fp8_e4m3 and fp8_e5m2 keep 1 byte per element."""
    from roofline.cli import main

    for name in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        assert get_model("llama-3.1-8b").with_dtypes(kv_dtype=name).kv_bytes(1000) == 1000 * 32 * 2 * 8 * 128
    assert main(["report", "--model", "llama-3.1-8b", "--accelerator", "h100-sxm", "--kv-cache-dtype", "fp8",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["model"]["kv_dtype"], doc["kv"]["kv_bytes_per_token"]) == ("fp8", 32 * 2 * 8 * 128)
