"""A corpus of real config.json files: each one priced exactly (or to its published rounding) or refused by name.

The files and where each comes from are listed in tests/data/configs/MANIFEST.json with
the published parameter total each is checked against (model card, safetensors total, or
the model's README table). KV per sequence at 1,000 and 32,768 tokens is worked out by
hand below for a representative subset: dense GQA, MoE, MLA, local/global windows,
alternating 128-token windows, a window on every layer, MQA, and a multimodal wrapper.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from roofline import ModelConfig
from roofline.errors import UnsupportedModelError

HERE = Path(__file__).parent / "data" / "configs"
MANIFEST = json.loads((HERE / "MANIFEST.json").read_text())
PRICED = sorted(k for k, v in MANIFEST.items() if "refused" not in v)
REFUSED = sorted(k for k, v in MANIFEST.items() if "refused" in v)
SCALE = {"M": 10**6, "B": 10**9}


def _load(name: str) -> ModelConfig:
    return ModelConfig.from_hf_config(HERE / f"{name}.json")


def _rounds_to(value: int, figure: str) -> bool:
    """Whether ``value`` rounds (half up) to the published figure, e.g. 30,532,122,624 -> "30.5B"."""
    number, unit = Decimal(figure[:-1]), SCALE[figure[-1]]
    step = Decimal(1).scaleb(number.as_tuple().exponent) * unit
    return abs(Decimal(value) - number * unit) <= step / 2


def test_corpus_has_at_least_25_files_each_with_a_source():
    """At least 25 config files, each listed with its model, how it was obtained and a published figure or refusal."""
    assert len(MANIFEST) >= 25
    for name, entry in MANIFEST.items():
        assert (HERE / f"{name}.json").is_file(), name
        assert entry["model"] and entry["how"]
        assert "published" in entry or "refused" in entry


@pytest.mark.parametrize("name", PRICED)
def test_parameters_match_the_published_total(name):
    """Exact totals are equal; rounded ones are what the count rounds to (the finest check a rounded figure allows)."""
    entry, model = MANIFEST[name], _load(name)
    published = entry["published"]
    if entry["published_kind"] == "exact":
        assert model.parameters == published
    elif entry["published_kind"] == "rounded":
        assert _rounds_to(model.parameters, published), (model.parameters, published)
    if "published_active" in entry:  # less the vocabulary matrices the vendor's figure leaves out (0, 1 or 2)
        left_out = entry.get("published_active_excludes", 0) * model.vocab_size * model.hidden_size
        assert _rounds_to(model.active_parameters - left_out, entry["published_active"]), model.active_parameters


def test_falcon_7b_hand_count():
    """Falcon-7B (label "7B"): fused MQA attention, plain MLP, one LayerNorm per layer, tied lm_head, by hand."""
    h, V, L = 4544, 65024, 32
    per_layer = h * (h + 2 * 64) + h * h + 2 * h * 4 * h + 2 * h
    assert _load("falcon-7b").parameters == V * h + L * per_layer + 2 * h == 6_921_720_704


def test_glm_4_7_flash_plus_its_mtp_layer_is_the_safetensors_total():
    """GLM-4.7-Flash: the 47 counted layers plus the MTP layer 47 (eh_proj 2h x h, three norms, copies of embed_tokens
    and lm_head, one MLA + MoE decoder layer) = 31,221,488,576, the report's safetensors inventory (MANIFEST)."""
    h, V, E, w = 2048, 154_880, 64, 1536
    attention = h * 768 + 768 + 768 * 20 * 256 + h * 576 + 512 + 512 * 20 * (192 + 256) + 20 * 256 * h
    layer = attention + 2 * h + E * 3 * h * w + E * h + E + 3 * h * w  # experts, router + its bias, shared expert
    mtp = 2 * h * h + 3 * h + 2 * V * h + layer
    assert _load("glm-4.7-flash").parameters + mtp == 31_221_488_576


def test_deepseek_v3_2_plus_its_mtp_layer_and_scales_is_the_safetensors_total():
    """DeepSeek-V3.2: the 61 counted layers + the MTP layer 61 (eh_proj, three norms, copies of embed_tokens and
    lm_head, one MLA + indexer + MoE layer) + the float32 block scales of every FP8 matrix (one per 128 x 128 block:
    3 dense MLPs, 62 attention blocks, 59 x (256 experts + the shared one)) = 685,396,921,376, the inventory."""
    h, V = 7168, 129_280
    attention = h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * (128 + 128) + 128 * 128 * h
    indexer = 1536 * 64 * 128 + h * 128 + h * 64 + 2 * 128  # wq_b, wk, weights_proj, k_norm (weight and bias)
    layer = attention + indexer + 2 * h + 256 * 3 * h * 2048 + 256 * h + 256 + 3 * h * 2048
    mtp = 2 * h * h + 3 * h + 2 * V * h + layer
    per_block = 12 * 56 + 192 * 12 + 5 * 56 + 256 * 4 + 56 * 128 + 64 * 12 + 1 * 56  # q_a q_b kv_a kv_b o wq_b wk
    scales = 3 * 3 * 56 * 144 + 62 * per_block + 59 * 257 * 3 * 16 * 56
    assert _load("deepseek-v3.2").parameters + mtp + scales == 685_396_921_376


def test_hy_mt2_7b_hand_count():
    """Hy-MT2-7B (label "7B"): GQA 32/8 heads of 128, per-head q/k RMSNorms, gated MLP, tied embeddings, by hand."""
    h, V, L, inter = 4096, 128_167, 32, 14_336
    per_layer = 2 * h * 4096 + 2 * h * 1024 + 2 * 128 + 3 * h * inter + 2 * h
    assert _load("hy-mt2-7b").parameters == V * h + L * per_layer + h == 7_504_568_320


def test_gpt_oss_20b_weight_bytes_equal_the_checkpoint():
    """gpt-oss-20b: mxfp4 experts (4 bits + an E8M0 scale per 32) and BF16 rest = the index's total_size."""
    assert _load("gpt-oss-20b").weight_bytes == MANIFEST["gpt-oss-20b"]["published_bytes"] == 13_761_264_768


# KV per sequence [bytes] at 1,000 and 32,768 tokens, worked by hand: sum over layers of min(c, w) x bytes per layer.
KV = {
    # 32 layers x 2 x 8 KV heads x 128 x 2 B = 131,072 B/token, full attention
    "llama-3.1-8b": (131_072 * 1000, 131_072 * 32768),
    # 48 layers x 2 x 4 x 128 x 2 B = 98,304 B/token
    "qwen3-30b-a3b": (98_304_000, 98_304 * 32768),
    # MLA: 27 layers x (512 + 64) x 2 B = 31,104 B/token
    "deepseek-v2-lite": (31_104_000, 31_104 * 32768),
    # MLA: 61 x 576 x 2 = 70,272 B/token
    "deepseek-v3": (70_272_000, 70_272 * 32768),
    # 26 layers, every 6th global (4 global, 22 with a 512 window), 2 x 1 x 256 x 2 = 1,024 B per layer-token
    "gemma-3-1b-pt": ((4 * 1000 + 22 * 512) * 1024, (4 * 32768 + 22 * 512) * 1024),
    # 24 layers alternating 128-token windows and full: 2 x 8 x 64 x 2 = 2,048 B per layer-token
    "gpt-oss-20b": ((12 * 1000 + 12 * 128) * 2048, (12 * 32768 + 12 * 128) * 2048),
    # a 4,096-token window on all 32 layers
    "mistral-7b-v0.1": (131_072 * 1000, 131_072 * 4096),
    # MLA with q_lora_rank: 60 x 576 x 2 = 69,120 B/token
    "deepseek-v2.5": (69_120_000, 69_120 * 32768),
    # DeepSeekMoE keeps MHA: 28 x 2 x 16 x 128 x 2 = 229,376 B/token
    "deepseek-moe-16b-base": (229_376_000, 229_376 * 32768),
    # MQA: 32 x 2 x 1 x 64 x 2 = 8,192 B/token
    "falcon-7b": (8_192_000, 8192 * 32768),
    # llava: the Vicuna-7B text model, 32 x 2 x 32 x 128 x 2 = 524,288 B/token
    "llava-1.5-7b-hf": (524_288_000, 524_288 * 32768),
    # gemma: MQA, 18 x 2 x 1 KV head x 256 x 2 B = 18,432 B/token
    "gemma-2b": (18_432_000, 18_432 * 32768),
    # starcoder2: a 4,096-token window on all 32 layers, 2 x 4 x 128 x 2 B = 2,048 B per layer-token
    "starcoder2-7b": (32 * 2048 * 1000, 32 * 2048 * 4096),
    # nemotron: 32 x 2 x 8 x 128 (kv_channels) x 2 B = 131,072 B/token
    "nemotron-mini-4b": (131_072_000, 131_072 * 32768),
    # glm4_moe_lite (MLA): 47 x (512 + 64) x 2 B = 54,144 B/token
    "glm-4.7-flash": (54_144_000, 54_144 * 32768),
    # gemma3 wrapper: 34 layers, every 6th global (5 global, 29 with a 1,024 window), 2 x 4 x 256 x 2 = 4,096 B
    "gemma-3-4b-it": (34 * 1000 * 4096, (5 * 32768 + 29 * 1024) * 4096),
    # internlm2: 32 x 2 x 8 x 128 x 2 B = 131,072 B/token
    "internlm2.5-7b": (131_072_000, 131_072 * 32768),
    # kimi_k2 (DeepSeek-V3's MLA): 61 x (512 + 64) x 2 B = 70,272 B/token
    "kimi-k2-instruct": (70_272_000, 70_272 * 32768),
    # deepseek_v32: MLA 576 x 2 B plus the indexer's FP8 key (128 B) and its float32 scale (4 B), 61 layers:
    # 61 x 1,284 = 78,324 B/token
    "deepseek-v3.2": (78_324_000, 78_324 * 32768),
    # minimax_m2: 62 full-attention layers x 2 x 8 x 128 x 2 B = 253,952 B/token
    "minimax-m2.7": (253_952_000, 253_952 * 32768),
    # qwen3_next: every 4th layer attention (12 of 48), 2 x 2 KV heads x 256 x 2 B = 2,048 B per layer-token
    "qwen3-next-80b-a3b-instruct": (12 * 2048 * 1000, 12 * 2048 * 32768),
    # granite: 40 x 2 x 8 x 128 x 2 B = 163,840 B/token
    "granite-3.3-8b-instruct": (163_840_000, 163_840 * 32768),
    # ernie4_5: 18 x 2 x 2 KV heads x 128 (head_dim, not 1,024 / 16) x 2 B = 18,432 B/token
    "ernie-4.5-0.3b": (18_432_000, 18_432 * 32768),
    # hunyuan_v1_dense: 32 x 2 x 8 x 128 x 2 B = 131,072 B/token (use_cla false: no cross-layer sharing)
    "hy-mt2-7b": (131_072_000, 131_072 * 32768),
}

# Recurrent state per sequence [bytes], independent of the context; 0 for every other file of KV.
STATE = {
    # 36 Gated DeltaNet layers, BF16: a 3-step conv window over 2 x 16 x 128 + 32 x 128 = 8,192 channels and a
    # 32-head 128 x 128 recurrent state: 36 x (3 x 8,192 x 2 + 32 x 128 x 128 x 2) = 36 x 1,097,728
    "qwen3-next-80b-a3b-instruct": 36 * (3 * 8192 * 2 + 32 * 128 * 128 * 2),
}


@pytest.mark.parametrize("name", sorted(KV))
def test_kv_per_sequence_at_1000_and_32768_tokens(name):
    """kv_bytes(c) equals the hand-worked sum over layers of min(c, w_l) x per-layer bytes."""
    model = _load(name)
    assert (model.kv_bytes(1000), model.kv_bytes(32768)) == KV[name]
    assert model.state_bytes_per_sequence == STATE.get(name, 0)


@pytest.mark.parametrize("name", REFUSED)
def test_refused_by_name(name):
    """Encoder-only, encoder-decoder and state-space configs are refused with their model_type and the reason."""
    entry = MANIFEST[name]
    with pytest.raises(UnsupportedModelError) as info:
        _load(name)
    assert info.value.model_type == entry["refused"]
    assert entry["reason"] in str(info.value)
    assert "\n" not in str(info.value)


def test_every_priced_file_reports(capsys):
    """`roofline report --model <config.json>` runs on every priced file (or says the weights do not fit one H200)."""
    from roofline.cli import main

    for name in PRICED:
        status = main(["report", "--model", str(HERE / f"{name}.json"), "--json", "--accelerator", "h200"])
        out = capsys.readouterr()
        if status == 2:  # only a model whose weights do not fit one H200 may stop, and it says so
            assert "leave no KV budget" in out.err and _load(name).weight_bytes > 130e9, (name, out.err)
            continue
        assert status == 0, (name, out.err)
        assert json.loads(out.out)["model"]["parameters"] == _load(name).parameters
