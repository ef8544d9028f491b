"""This year's ordinary attention families (issue 23): each priced to its published count, KV by hand.

Families: llama4 / llama4_text, glm4_moe, kimi_k2, minimax_m2 (roofline/families.py, one row
each), and the presets Llama 4 Scout and Maverick, GLM-4.5, Kimi K2, MiniMax-M2 and
gpt-oss-20b. Each family's transformers defaults are tested with a config that omits them.
Published figures and their sources: tests/data/configs/MANIFEST.json and the presets'
``_source``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline import ConfigError, ModelConfig, get_model
from roofline.errors import UnknownPresetError, UnsupportedModelError
from roofline.models import load_model, model_names

HERE = Path(__file__).parent / "data" / "configs"


def _corpus(name: str) -> dict:
    return json.loads((HERE / f"{name}.json").read_text())


def _billions(value: int) -> int:
    """Rounded to whole billions, half up (the figure a vendor's "17B" is)."""
    return (value + 500_000_000) // 1_000_000_000


# ------------------------------------------------------------------ published totals

EXACT = {  # preset -> the checkpoint's count (sources in each preset's _source)
    "llama-4-scout": 108_641_793_536, "llama-4-maverick": 401_583_781_376, "glm-4.5": 352_797_829_024,
    "kimi-k2": 1_026_408_232_448, "minimax-m2": 228_689_764_864,
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_new_presets_equal_their_published_totals(name):
    """Each preset's parameters equal the checkpoint's count to the unit; its source names the config.json."""
    model = get_model(name)
    assert model.parameters == model.published_parameters == EXACT[name]
    assert "config.json" in model.source


def test_gpt_oss_20b_preset_is_the_corpus_checkpoint():
    """gpt-oss-20b ships as a preset: 20.91B total (card), the same model as the corpus config."""
    model = get_model("gpt-oss-20b")
    assert round(model.parameters / 1e9, 2) == 20.91
    assert model.parameters == ModelConfig.from_hf_config(HERE / "gpt-oss-20b.json").parameters


@pytest.mark.parametrize("name,active,left_out", [
    ("llama-4-scout", 17, 0), ("llama-4-maverick", 17, 0),  # Meta's 17B active counts the embeddings
    ("kimi-k2", 32, 1), ("minimax-m2", 10, 1),  # without the embedding lookup
    ("glm-4.5", 32, 2),  # without the embedding and the lm_head (33.6B with both, 32.9B with the lm_head)
])
def test_active_parameters_as_each_vendor_counts_them(name, active, left_out):
    """The card's active figure: our active count (embedding lookup and lm_head included), less the vocabulary
    matrices the vendor leaves out of its figure."""
    model = get_model(name)
    assert _billions(model.active_parameters - left_out * model.vocab_size * model.hidden_size) == active


def test_llama4_by_hand():
    """Scout: 48 MoE layers of 16 experts + a shared expert of 8,192; Maverick: 24 MoE (128 experts), 24 dense
    of 16,384;
    both with the 871,932,416-parameter vision encoder, adapter and projector."""
    h, V, L, width = 5120, 202_048, 48, 8192
    attention = 2 * h * 5120 + 2 * h * 1024 + 2 * h  # q, o (40 x 128), k, v (8 x 128); two RMSNorms
    base = 2 * V * h + h + L * attention
    moe = lambda E: E * 3 * h * width + h * E + 3 * h * width  # noqa: E731 - experts, router, shared expert
    vh, vi = 1408, 5632
    vision = (3 * 14 * 14 * vh + vh + (24 * 24 + 1) * vh + 4 * vh
              + 34 * (4 * (vh * vh + vh) + (vh * vi + vi) + (vi * vh + vh) + 4 * vh)
              + vi * 4096 + 4096 * 4096 + 4096 * h)
    assert vision == 871_932_416
    assert get_model("llama-4-scout").parameters == base + 48 * moe(16) + vision
    assert get_model("llama-4-maverick").parameters == base + 24 * moe(128) + 24 * 3 * h * 16_384 + vision
    assert get_model("llama-4-scout").text_parameters == 107_769_861_120


def test_glm_totals_plus_their_mtp_layer_are_the_safetensors_totals():
    """The MTP layer is not counted (as DeepSeek-V3's); adding it by hand gives each checkpoint's safetensors total:
    eh_proj (2h x h), three norms, one MoE decoder layer, and copies of embed_tokens and lm_head."""
    for model, total in ((ModelConfig.from_hf_config(HERE / "glm-4.5-air.json"), 110_468_824_832),
                         (get_model("glm-4.5"), 358_337_791_296)):
        h, V, E, w = model.hidden_size, model.vocab_size, model.num_experts, model.moe_intermediate_size
        attention = (h * model.q_width + 2 * h * model.kv_width + model.q_width * h + model.q_width
                     + 2 * model.kv_width + (2 * model.head_dim if model.qk_norm else 0))
        layer = attention + 2 * h + E * 3 * h * w + h * E + E + 3 * h * w
        assert model.parameters + 2 * h * h + 3 * h + layer + 2 * V * h == total


# ------------------------------------------------------------------ KV by hand

KV = {  # name -> bytes per token, from the config's numbers (every layer full attention)
    "llama-4-scout": 48 * 2 * 8 * 128 * 2,  # chunked layers held whole, as vLLM does by default
    "llama-4-maverick": 48 * 2 * 8 * 128 * 2,
    "glm-4.5": 92 * 2 * 8 * 128 * 2,
    "kimi-k2": 61 * (512 + 64) * 2,  # MLA latent + rope key, BF16 cache
    "minimax-m2": 62 * 2 * 8 * 128 * 2,
}


@pytest.mark.parametrize("name", sorted(KV))
def test_kv_per_sequence_at_1000_and_32768_tokens(name):
    """kv_bytes(c) = c x the hand-derived bytes per token at 1,000 and 32,768 tokens."""
    model = get_model(name)
    assert (model.kv_bytes(1000), model.kv_bytes(32768)) == (1000 * KV[name], 32768 * KV[name])


def test_glm_4_5_air_corpus_kv():
    """GLM-4.5-Air: 46 layers x 2 x 8 KV heads x 128 x 2 B = 188,416 B per token."""
    model = ModelConfig.from_hf_config(HERE / "glm-4.5-air.json")
    assert (model.kv_bytes(1000), model.kv_bytes(32768)) == (188_416_000, 188_416 * 32768)


# ------------------------------------------------------------------ defaults (configs that omit them)

def test_llama4_text_defaults_are_scouts_language_model():
    """An empty llama4_text config is Llama4TextConfig's defaults: Scout's language model, to the unit."""
    assert ModelConfig.from_hf_config({"model_type": "llama4_text"}).parameters == 107_769_861_120


def test_llama4_vision_defaults():
    """A llama4 wrapper without vision_config counts Llama4VisionConfig's default tower (768 wide, 448 px, 34 layers,
    output 7,680)."""
    h, i, out = 768, 5632, 7680
    tower = (3 * 14 * 14 * h + h + (32 * 32 + 1) * h + 4 * h
             + 34 * (4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h) + i * 4096 + 4096 * 4096 + out * 5120)
    model = ModelConfig.from_hf_config({"model_type": "llama4", "text_config": {}})
    assert model.tower_parameters == tower and model.text_parameters == 107_769_861_120


def test_llama4_moe_layers_default_from_the_interleave_step():
    """interleave_moe_layer_step 2 without moe_layers: layers 1, 3, ... are MoE (24 of 48); moe_layers wins."""
    step2 = ModelConfig.from_hf_config({"model_type": "llama4_text", "interleave_moe_layer_step": 2})
    assert step2.num_moe_layers == 24
    cfg = {"model_type": "llama4_text", "moe_layers": [0, 5, 7]}
    assert ModelConfig.from_hf_config(cfg).num_moe_layers == 3
    with pytest.raises(ConfigError, match="moe_layers"):
        ModelConfig.from_hf_config({"model_type": "llama4_text", "moe_layers": [48]})


def test_glm4_moe_defaults():
    """GLM-4.5-Air's config without the fields equal to Glm4MoeConfig's defaults prices the same
    (first_k_dense_replace 1, one shared expert, 128 experts of 1,408, top 8, no q/k norm)."""
    cfg = _corpus("glm-4.5-air")
    full = ModelConfig.from_hf_config(cfg)
    for key in ("first_k_dense_replace", "n_shared_experts", "n_routed_experts", "moe_intermediate_size",
                "num_experts_per_tok", "vocab_size", "num_hidden_layers", "intermediate_size", "tie_word_embeddings"):
        cfg.pop(key)
    bare = ModelConfig.from_hf_config(cfg)
    assert bare.parameters == full.parameters == 106_852_251_264
    assert (bare.num_moe_layers, bare.num_shared_experts, bare.qk_norm) == (45, 1, False)


def test_minimax_m2_defaults_are_minimax_m2():
    """An empty minimax_m2 config is MiniMaxM2Config's defaults: MiniMax-M2 itself, to the unit."""
    model = ModelConfig.from_hf_config({"model_type": "minimax_m2"})
    assert model.parameters == 228_689_764_864
    # q_norm over 48 x 128 and k_norm over 8 x 128 per layer, not one head's 128 each
    assert model.parameters_by_class()["norms"] == 62 * (2 * 3072 + 48 * 128 + 8 * 128 + 256) + 3072


def test_minimax_m2_other_qk_norm_types_are_refused():
    """A per-head q/k norm type is not MiniMax-M2's and is refused by name."""
    with pytest.raises(UnsupportedModelError, match="qk_norm_type"):
        ModelConfig.from_hf_config({"model_type": "minimax_m2", "qk_norm_type": "per_head"})


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-r1"])
def test_deepseek_moe_layer_freq_default_is_one(name):
    """Without moe_layer_freq, every layer from first_k_dense_replace is MoE (DeepseekV3Config's default 1): 58 of 61.
    A default of 2 would leave 29; the corpus configs all set it, so this omits it."""
    cfg = _corpus(name)
    assert cfg.pop("moe_layer_freq") == 1
    bare = ModelConfig.from_hf_config(cfg)
    assert bare.num_moe_layers == 58 and bare.parameters == ModelConfig.from_hf_config(_corpus(name)).parameters


def test_kimi_k2_is_deepseek_v3_under_its_own_name():
    """kimi_k2 reads as deepseek_v3: the same model from the same fields, named kimi_k2."""
    cfg = json.loads((Path(__file__).parents[1] / "roofline/data/models/kimi-k2.json").read_text())
    as_v3 = ModelConfig.from_hf_config({**cfg, "model_type": "deepseek_v3"})
    kimi = ModelConfig.from_hf_config(cfg)
    assert kimi.model_type == "kimi_k2" and kimi.parameters == as_v3.parameters
    assert (kimi.num_moe_layers, kimi.num_experts, kimi.num_attention_heads) == (60, 384, 64)


def test_llama4_other_layer_types_are_refused():
    """A layer type other than full or chunked attention is refused by name."""
    with pytest.raises(UnsupportedModelError, match="sliding_attention"):
        ModelConfig.from_hf_config({"model_type": "llama4_text", "num_hidden_layers": 2,
                                    "layer_types": ["full_attention", "sliding_attention"]})


# ------------------------------------------------------------------ --model ORG/NAME

def test_a_hugging_face_id_finds_its_preset():
    """--model ORG/NAME resolves to the preset that lists the id (case-insensitive)."""
    assert load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").name == "llama-4-scout"
    assert load_model("MOONSHOTAI/kimi-k2-instruct").name == "kimi-k2"
    new = {"llama-4-scout", "llama-4-maverick", "glm-4.5", "kimi-k2", "minimax-m2", "gpt-oss-20b"}
    assert new <= set(model_names())


def test_an_unknown_hugging_face_id_says_to_download_its_config():
    """An id no preset knows: refused naming it, with the config.json to download and pass."""
    with pytest.raises(UnknownPresetError, match=r"download its config\.json .*huggingface\.co/acme/Model-7B"):
        load_model("acme/Model-7B")


def test_the_cli_takes_a_hugging_face_id(capsys):
    """`roofline report --model ORG/NAME` prices the preset; an unknown id is one line and exit status 2."""
    from roofline.cli import main

    assert main(["report", "--model", "openai/gpt-oss-20b", "--accelerator", "h200", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["parameters"] == get_model("gpt-oss-20b").parameters
    assert main(["report", "--model", "acme/Model-7B"]) == 2
    err = capsys.readouterr().err.strip()
    assert "acme/Model-7B" in err and "config.json" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------ dense Llama-like families

DENSE = {  # corpus config -> (published total, KV bytes per token by hand)
    "smollm3-3b-base": (3_075_098_624, 36 * 2 * 4 * 128 * 2),  # head_dim 2048 / 16
    "olmo-2-1124-7b": (7_298_617_344, 32 * 2 * 32 * 128 * 2),
    "seed-oss-36b": (36_151_104_512, 64 * 2 * 8 * 128 * 2),
}


@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_families_to_the_unit_and_kv_by_hand(name):
    """Parameters equal the checkpoint's count; KV at 1,000 and 32,768 tokens is c x the hand-derived bytes."""
    model = ModelConfig.from_hf_config(HERE / f"{name}.json")
    total, per_token = DENSE[name]
    assert model.parameters == total
    assert (model.kv_bytes(1000), model.kv_bytes(32768)) == (1000 * per_token, 32768 * per_token)


def test_dense_family_defaults():
    """SmolLM3 ties its embeddings unless told not to; OLMo 2 does not; Seed-OSS has q/k/v biases and head_dim 128
    by default and an o_proj bias only with attention_out_bias."""
    smol = _corpus("smollm3-3b-base")
    smol.pop("tie_word_embeddings")
    assert ModelConfig.from_hf_config(smol).tie_word_embeddings is True
    olmo = _corpus("olmo-2-1124-7b")
    olmo.pop("tie_word_embeddings")
    bare = ModelConfig.from_hf_config(olmo)
    assert bare.tie_word_embeddings is False and bare.parameters == 7_298_617_344
    # OLMo 2's q_norm spans 32 x 128 and k_norm 32 x 128: 8,192 per layer, not 256
    assert bare.parameters_by_class()["norms"] == 32 * (2 * 4096 + 2 * 4096) + 4096
    seed = _corpus("seed-oss-36b")
    seed.pop("head_dim")
    model = ModelConfig.from_hf_config(seed)
    assert (model.head_dim, model.qkv_bias, model.o_bias) == (128, True, False)
    assert model.parameters == 36_151_104_512
    assert ModelConfig.from_hf_config({**seed, "attention_out_bias": True}).parameters == 36_151_104_512 + 64 * 5120


# ------------------------------------------------------------------ more of this year's rows

MOE = {  # corpus config -> (published total, active by hand, KV bytes per token by hand)
    # 16 layers; q/k norms over 2,048 each; 64 experts of 3 x 2,048 x 1,024, top 8; untied 50,304 vocabulary
    "olmoe-1b-7b-0924": (6_919_161_856, 6_919_161_856 - 16 * 56 * 3 * 2048 * 1024, 16 * 2 * 16 * 128 * 4),
    # 32 layers; 40 experts of 3 x 1,536 x 512, top 8; tied 49,155 vocabulary
    "granite-3.1-3b-a800m-instruct": (3_298_793_472, 3_298_793_472 - 32 * 32 * 3 * 1536 * 512, 32 * 2 * 8 * 64 * 2),
}


@pytest.mark.parametrize("name", sorted(MOE))
def test_moe_families_to_the_unit_and_kv_by_hand(name):
    """Totals as published, active = total less the unrouted experts, KV at 1,000 and 32,768 tokens by hand."""
    model = ModelConfig.from_hf_config(HERE / f"{name}.json")
    total, active, per_token = MOE[name]
    assert (model.parameters, model.active_parameters) == (total, active)
    assert (model.kv_bytes(1000), model.kv_bytes(32768)) == (1000 * per_token, 32768 * per_token)


SHAPES = {  # family readers on published shapes (fields as the model cards' config.json give them)
    "ibm-granite/granite-3.3-2b-instruct": ({"model_type": "granite", "hidden_size": 2048, "intermediate_size": 8192,
                                             "num_hidden_layers": 40, "num_attention_heads": 32,
                                             "num_key_value_heads": 8, "vocab_size": 49159,
                                             "tie_word_embeddings": True}, 2_533_539_840),
    "baidu/ERNIE-4.5-0.3B-PT": ({"model_type": "ernie4_5", "hidden_size": 1024, "intermediate_size": 3072,
                                 "num_hidden_layers": 18, "num_attention_heads": 16, "num_key_value_heads": 2,
                                 "vocab_size": 103424}, 360_748_032),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_family_readers_on_published_shapes(name):
    """Granite 3.3 2B (Llama shapes, tied), ERNIE 4.5 0.3B (tied and head_dim 128 by default): totals as listed by
    third-party inventories of the checkpoints (find_string file ids 71142266638, 69642363455). Granite 3.3 8B's
    real config.json is in the corpus (tests/test_corpus.py)."""
    cfg, total = SHAPES[name]
    assert ModelConfig.from_hf_config(cfg).parameters == total


def test_other_family_defaults_by_hand():
    """Each reader's class defaults where a config omits them, worked by hand on a small shape."""
    base = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 100}
    attn = 64 * 64 + 2 * 64 * 32 + 64 * 64  # q, k, v (2 KV heads of 16), o
    gated, plain = 3 * 64 * 128, 2 * 64 * 128
    # StarCoder2: biases, plain MLP, LayerNorm (weight and bias), tied
    sc = ModelConfig.from_hf_config({"model_type": "starcoder2", **base})
    assert sc.parameters == 100 * 64 + 4 * (attn + 128 + 64 + plain + 128 + 64 + 4 * 64) + 128
    # Nemotron: plain MLP, LayerNorm1P, untied, no biases
    nm = ModelConfig.from_hf_config({"model_type": "nemotron", **base})
    assert nm.parameters == 2 * 100 * 64 + 4 * (attn + plain + 2 * 128) + 128
    # Cohere2: one bias-free LayerNorm per layer, tied, every 4th layer global with a 4,096 window
    co = ModelConfig.from_hf_config({"model_type": "cohere2", **base})
    assert co.parameters == 100 * 64 + 4 * (attn + gated + 64) + 64
    assert co.layer_windows == (4096, 4096, 4096, None)
    # InternLM2: bias on wqkv and wo by default; InternLM3: none by default
    assert ModelConfig.from_hf_config({"model_type": "internlm2", **base}).parameters == \
        2 * 100 * 64 + 4 * (attn + 64 + 2 * 32 + 64 + gated + 128) + 64
    assert ModelConfig.from_hf_config({"model_type": "internlm3", **base}).parameters == \
        2 * 100 * 64 + 4 * (attn + gated + 128) + 64
    # EXAONE 4: per-head q/k norms, LLLG -> every 4th layer global
    ex = ModelConfig.from_hf_config({"model_type": "exaone4", **base, "sliding_window": 8,
                                     "sliding_window_pattern": "LLLG"})
    assert ex.layer_windows == (8, 8, 8, None) and ex.parameters == 2 * 100 * 64 + 4 * (attn + gated + 128 + 32) + 64
    # Phi-3.5-MoE: q/k/v/o biases with attention_bias, lm_head bias, LayerNorm, 2 experts of 128, top 1
    ph = ModelConfig.from_hf_config({"model_type": "phimoe", **base, "attention_bias": True, "lm_head_bias": True,
                                     "num_local_experts": 2, "num_experts_per_tok": 1})
    assert ph.parameters == (2 * 100 * 64 + 100 + 4 * (attn + 64 + 2 * 32 + 64 + 2 * gated + 64 * 2 + 4 * 64) + 128)
    # MiMo reads as Qwen2: q/k/v biases
    assert ModelConfig.from_hf_config({"model_type": "mimo", **base}).qkv_bias is True


LATE = {  # family readers on published shapes -> the count a third-party llama.cpp listing gives (n_params)
    "THUDM/GLM-4-9B-0414": ({"model_type": "glm4", "hidden_size": 4096, "intermediate_size": 13696,
                             "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 2,
                             "vocab_size": 151552}, 9_400_279_040, None),
    "zai-org/GLM-4.7-Flash": ({"model_type": "glm4_moe_lite", "vocab_size": 154880, "hidden_size": 2048,
                               "num_hidden_layers": 47, "num_attention_heads": 20, "num_key_value_heads": 20,
                               "intermediate_size": 10240, "kv_lora_rank": 512, "q_lora_rank": 768,
                               "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
                               "n_routed_experts": 64, "n_shared_experts": 1, "num_experts_per_tok": 4,
                               "moe_intermediate_size": 1536, "first_k_dense_replace": 1},
                              29_943_393_920, 3_896_766_080),
}


@pytest.mark.parametrize("name", sorted(LATE))
def test_glm_families_on_published_shapes(name):
    """GLM-4-0414 (four norms, q/k/v biases, head_dim 128) and GLM-4.7-Flash (MLA + MoE): totals (and active) as
    llama.cpp counts the checkpoints (find_string file ids 37074310570, 60005726306, 70898634227)."""
    cfg, total, active = LATE[name]
    model = ModelConfig.from_hf_config(cfg)
    assert model.parameters == total
    if active is not None:
        assert model.active_parameters == active


def test_dbrx_nested_config_and_defaults():
    """DBRX (132B total, 36B active: Databricks' announcement) from its nested attn_config / ffn_config; an empty
    config is DbrxConfig's defaults (24 layers of 2,048, 4 experts of 3,584, top 1, one KV head)."""
    cfg = {"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40, "vocab_size": 100352,
           "max_seq_len": 32768, "attn_config": {"kv_n_heads": 8},
           "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}
    model = ModelConfig.from_hf_config(cfg)
    assert (_billions(model.parameters), _billions(model.active_parameters)) == (132, 36)
    assert model.kv_bytes(32768) == 32768 * 40 * 2 * 8 * 128 * 2
    h, E, w = 2048, 4, 3584
    per_layer = (h * h + 2 * h * 128 + h * h) + E * 3 * h * w + h * E + 2 * h
    assert ModelConfig.from_hf_config({"model_type": "dbrx"}).parameters == 2 * 32000 * h + 24 * per_layer + h


def test_ernie4_5_moe_defaults_are_ernie_4_5_21b_a3b():
    """An empty ernie4_5_moe config is Ernie4_5_MoeConfig's defaults, ERNIE-4.5-21B-A3B's shape (moe_k 6, two shared
    experts), without the aux-free bias."""
    bare = ModelConfig.from_hf_config({"model_type": "ernie4_5_moe"})
    assert (bare.num_experts, bare.num_experts_per_tok, bare.num_shared_experts, bare.num_moe_layers) == (64, 6, 2, 27)
    assert bare.parameters == 21_825_437_888 - 27 * 64  # the worked count below, less its 27 x 64 bias


def test_dbrx_bad_nested_field_is_named():
    """A bad nested size is refused naming its object and field."""
    with pytest.raises(ConfigError, match="attn_config: .*'kv_n_heads'"):
        ModelConfig.from_hf_config({"model_type": "dbrx", "attn_config": {"kv_n_heads": 0}})


def test_ernie4_5_moe_layers_and_shared_experts_by_hand():
    """ERNIE-4.5-21B-A3B's shape: MoE from layer 1 (27 of 28), 64 experts of 1,536, top 6, two shared experts, an
    e_score_correction_bias per MoE layer; tied 103,424 vocabulary."""
    cfg = {"model_type": "ernie4_5_moe", "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
           "num_attention_heads": 20, "num_key_value_heads": 4, "vocab_size": 103424, "moe_num_experts": 64,
           "moe_k": 6, "moe_intermediate_size": 1536, "moe_num_shared_experts": 2, "moe_use_aux_free": True}
    model = ModelConfig.from_hf_config(cfg)
    h = 2560
    attention = h * 2560 + 2 * h * 512 + 2560 * h + 2 * h
    moe = 64 * 3 * h * 1536 + h * 64 + 64 + 2 * 3 * h * 1536
    assert model.num_moe_layers == 27
    assert model.parameters == 103424 * h + 28 * attention + 3 * h * 12288 + 27 * moe + h == 21_825_437_888


def test_hunyuan_dense_has_per_head_qk_norms_and_refuses_cla():
    """Hunyuan dense: 2 x head_dim q/k norm parameters per layer; cross-layer attention is refused by name."""
    base = {"model_type": "hunyuan_v1_dense", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}
    model = ModelConfig.from_hf_config(base)
    assert model.parameters == 100 * 64 + 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64 + 2 * 16) + 64
    with pytest.raises(UnsupportedModelError, match="use_cla"):
        ModelConfig.from_hf_config({**base, "use_cla": True})


@pytest.mark.parametrize("model_type,reason", [("qwen3_vl", "vision tower"), ("qwen3_vl_moe", "vision tower"),
                                               ("hunyuan_v1_moe", "per-layer lists"), ("hunyuan", "hunyuan_v1_dense")])
def test_refused_families_name_the_reason(model_type, reason):
    """Families the table refuses: by name, with the reason, in one line."""
    with pytest.raises(UnsupportedModelError, match=reason) as info:
        ModelConfig.from_hf_config({"model_type": model_type, "hidden_size": 64})
    assert info.value.model_type == model_type and "\n" not in str(info.value)


# ------------------------------------------------------------------ DeepSeek-V3.2 sparse attention (deepseek_v32)


def test_deepseek_v32_parameters_are_v3_plus_61_indexers():
    """DeepSeek-V3.2: V3's 671B plus one lightning indexer per layer, by hand: wq_b (1,536 x 64 x 128), wk
    (7,168 x 128), k_norm (weight and bias, 128 each), weights_proj (7,168 x 64); 685B published with the 14B
    MTP module, which is not counted (as V3's 671B leaves its 14B out)."""
    v32, v3 = get_model("deepseek-v3.2"), get_model("deepseek-v3")
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert v32.parameters - v3.parameters == 61 * indexer == 851_524_864
    assert v32.parameters == 671_877_944_064
    assert v32.active_parameters - v3.active_parameters == 61 * indexer


def test_deepseek_v32_kv_holds_every_token_and_reads_the_top_k():
    """Each token holds 61 x (576 x 2 B of MLA latent + 132 B of FP8 indexer key: 128 + one float32 scale) =
    78,324 B; a query at c reads 61 x (min(c, 2,048) x 1,152 + c x 132) B: all of it at 1,000 tokens, 6.3x
    less than held at 32,768; its FLOPs the same way (absorbed MLA on the top-k, 2 x 64 x 128 per key)."""
    model = get_model("deepseek-v3.2")
    assert model.index_key_bytes == 132 and model.kv_bytes_per_token == 61 * (1152 + 132) == 78_324
    for context, held, read in ((1_000, 78_324_000, 78_324_000), (32_768, 2_566_520_832, 407_764_992)):
        assert model.kv_bytes(context) == 78_324 * context == held
        assert model.kv_read_bytes(context) == 61 * (min(context, 2048) * 1152 + context * 132) == read
    mla = 128 * (2 * 576 + 2 * 512)
    assert model.attention_flops(32_768) == 61 * (2048 * mla + 32_768 * 2 * 64 * 128)
    assert model.decode_bytes(2, [1_000, 32_768]) == model.decode_weight_bytes(2) + 78_324_000 + 407_764_992


def _crosses_the_ridge(model, gpu, c_star):
    """The intensity limit (F + attention_flops(c)) / kv_read_bytes(c), from the model's own methods, is above
    the ridge just below c* and below it just above (c* is where it meets it)."""
    from fractions import Fraction

    ridge = Fraction(gpu.peak(model.compute_dtype)) / Fraction(gpu.bandwidth)
    F = model.flops_per_token("exact")[0]
    limit = lambda c: Fraction(F + model.attention_flops(c), model.kv_read_bytes(c))  # noqa: E731
    below, above = int(c_star), int(c_star) + 1
    assert limit(below) >= ridge > limit(above) or (below == c_star and limit(below) == ridge)


def test_deepseek_v32_estimate_prices_the_reads_and_the_scheduler_takes_it():
    """decode_step reads weights + the top-k reads; c* solves the piecewise limit (below 2,048 tokens for V3.2 on
    B200, past the top-k for a tiny model); the scheduler's cost model carries its read cap; the
    index fields are required."""
    from roofline import get_accelerator
    from roofline.estimate import criticality, decode_step
    from roofline.sim import RooflineCostModel

    model, gpu = get_model("deepseek-v3.2"), get_accelerator("b200")
    step = decode_step(model, gpu, batch=4, context=32_768, tensor_parallel_size=8)
    share = model.per_gpu(8)
    assert step.bytes == share.decode_weight_bytes(4) + 4 * share.kv_read_bytes(32_768)
    c = criticality(model, gpu, context=32_768, tensor_parallel_size=8)
    _crosses_the_ridge(share, gpu, c.critical_context)
    assert c.critical_context < 2048  # FP8 on B200: the limit meets the ridge before the top-k caps the reads
    tiny = ModelConfig(name="tiny-dsa", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                       num_attention_heads=4, num_key_value_heads=4, head_dim=24, vocab_size=100, q_lora_rank=16,
                       kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=2,
                       index_head_dim=16, index_topk=4)
    small = criticality(tiny, get_accelerator("h100-sxm"), context=100)
    assert small.critical_context > 4  # past the top-k: the indexer's keys alone set it
    _crosses_the_ridge(tiny, get_accelerator("h100-sxm"), small.critical_context)
    cost = RooflineCostModel.for_model(model, gpu, tensor_parallel_size=8)  # priced: tests/test_sparse_sim.py
    assert (cost.index_topk, cost.kv_bytes_per_token) == (2048, share.kv_bytes_per_token)
    cfg = {k2: v for k2, v in json.loads(
        (Path(__file__).parents[1] / "roofline/data/models/deepseek-v3.2.json").read_text()).items()
        if not k2.startswith("_")}
    with pytest.raises(ConfigError, match="index_topk"):
        ModelConfig.from_hf_config({k2: v for k2, v in cfg.items() if k2 != "index_topk"})
    assert ModelConfig.from_hf_config(cfg).parameters == model.parameters
