"""Model families by ``model_type``: the one table of what the package models and what it refuses.

A Hugging Face ``config.json`` is read by its ``model_type`` (docs/conventions.md,
"Architectures"). Each family in :data:`FAMILIES` maps its
own field names (``n_layer``, ``n_embd``, ``num_local_experts``, ``n_routed_experts``...)
to the keyword arguments of :class:`roofline.ModelConfig`; nothing is guessed. A
``model_type`` in :data:`REFUSED`, or any type not in :data:`FAMILIES`, is refused with
an :class:`~roofline.errors.UnsupportedModelError` naming the type and the reason; so is a
known family using a feature the package does not model (a vision tower other than CLIP
or SigLIP, an unknown quantization method, a layer type other than full or sliding
attention).

Families (MLP shape in brackets):

* dense, gated MLP: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3
* dense, plain MLP (up, down): gpt2, gpt_neox, opt, falcon
* mixture of experts: mixtral, qwen2_moe, qwen3_moe, gpt_oss, deepseek_v2 and
  deepseek_v3 (these two with multi-head latent attention)
* multimodal wrappers read through their ``text_config``: llava (CLIP vision tower),
  gemma3 (SigLIP vision tower); the tower and projector weights are counted as the
  "towers" tensor class (memory), never as decode FLOPs.

Sliding windows (docs/conventions.md, same section): which layers slide comes from
``layer_types``, else ``sliding_window_pattern`` (every n-th layer global; Gemma 2's
and Gemma 3's defaults are 2 and 6, as in transformers' Gemma2Config and Gemma3TextConfig),
else ``use_sliding_window`` with ``max_window_layers``, else ``sliding_window`` on every
layer.

Quantization (``quantization_config``): gptq, awq, fp8, compressed-tensors and mxfp4; any
other ``quant_method`` is refused by name (:func:`read_quantization`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from ._checks import is_plain_int
from .errors import ConfigError, UnsupportedModelError, shown
from .quantization import Quantization, quantized_matrix_bytes

__all__ = ["Family", "FAMILIES", "REFUSED", "read_config", "read_quantization", "quantized_matrix_bytes",
           "supported_model_types", "Quantization"]

#: Largest size accepted for any dimension of a config (layers, widths, vocabulary).
MAX_DIMENSION = 1 << 32
#: Largest number of layers accepted (a few hundred exist): readers build per-layer lists, and
#: 2**32 layers made them hang or run out of memory.
MAX_LAYERS = 1 << 16
_LAYER_KEYS = ("num_hidden_layers", "n_layer")


# --------------------------------------------------------------------------- field readers


def field(cfg: dict[str, Any], key: str, *, source: str, required: bool = True, default: Any = None) -> Any:
    """A positive integer field of a config (ConfigError naming the field when missing or bad)."""
    if key not in cfg or cfg[key] is None:
        if required:
            raise ConfigError(f"{source}: required field {key!r} is missing")
        return default
    value = cfg[key]
    if not is_plain_int(value) or value <= 0:
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise ConfigError(f"{source}: field {key!r}={value!r} must be finite")
        raise ConfigError(f"{source}: field {key!r}={value!r} must be a positive integer")
    if value > MAX_DIMENSION:
        raise ConfigError(f"{source}: field {key!r}={value!r} is implausibly large (> {MAX_DIMENSION:,})")
    if key in _LAYER_KEYS and value > MAX_LAYERS:
        raise ConfigError(f"{source}: field {key!r}={value!r} is implausibly large (> {MAX_LAYERS:,} layers)")
    return value


def _count(cfg: dict[str, Any], key: str, *, source: str, default: int = 0) -> int:
    """A non-negative integer field (0 allowed)."""
    value = cfg.get(key, default)
    if value is None:
        return default
    if not is_plain_int(value) or value < 0 or value > MAX_DIMENSION:
        raise ConfigError(f"{source}: field {key!r}={value!r} must be an integer >= 0")
    return value


def flag(cfg: dict[str, Any], key: str, default: bool, *, source: str) -> bool:
    """A true/false field (ConfigError naming the field otherwise)."""
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: field {key!r}={value!r} must be true or false")
    return value


def _first(cfg: dict[str, Any], *keys: str, source: str = "config", prefix: str = "") -> str:
    """The first of ``keys`` present (non-null) in ``cfg``, else the first key (for the error message).

    Two of these aliases present with different values (gpt-oss's num_experts_per_tok and
    experts_per_token, GPT-2's n_embd and hidden_size...) are refused by name, never one of them
    chosen silently.
    """
    present = [key for key in keys if cfg.get(key) is not None]
    for other in present[1:]:
        a, b = cfg[present[0]], cfg[other]
        if a != b or type(a) is not type(b):
            raise ConfigError(f"{source}: fields '{prefix}{present[0]}'={shown(a)} and '{prefix}{other}'={shown(b)} "
                              "name the same quantity and disagree")
    return present[0] if present else keys[0]


def _head_dim(cfg: dict[str, Any], hidden: int, heads: int, source: str, default: int | None = None) -> int:
    head_dim = field(cfg, "head_dim", source=source, required=False, default=default)
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f"{source}: head_dim is absent and hidden_size={hidden} is not divisible by "
                f"num_attention_heads={heads}"
            )
        head_dim = hidden // heads
    return head_dim


def _llama_like(cfg: dict[str, Any], source: str, *, tied: bool, head_dim: int | None = None) -> dict[str, Any]:
    """Fields named as in LlamaConfig (llama, mistral, mixtral, qwen*, gemma*, phi3, deepseek)."""
    layers = field(cfg, "num_hidden_layers", source=source)
    hidden = field(cfg, "hidden_size", source=source)
    heads = field(cfg, "num_attention_heads", source=source)
    return dict(
        num_hidden_layers=layers,
        hidden_size=hidden,
        intermediate_size=field(cfg, "intermediate_size", source=source),
        num_attention_heads=heads,
        num_key_value_heads=field(cfg, "num_key_value_heads", source=source, required=False, default=heads),
        head_dim=_head_dim(cfg, hidden, heads, source, head_dim),
        vocab_size=field(cfg, "vocab_size", source=source),
        max_position_embeddings=field(cfg, "max_position_embeddings", source=source, required=False),
        tie_word_embeddings=flag(cfg, "tie_word_embeddings", tied, source=source),
        qkv_bias=flag(cfg, "attention_bias", False, source=source),
        o_bias=flag(cfg, "attention_bias", False, source=source),
        mlp_bias=flag(cfg, "mlp_bias", False, source=source),
    )


# --------------------------------------------------------------------------- sliding windows


def _layer_windows(cfg: dict[str, Any], layers: int, source: str, *, default_pattern: int | None = None,
                   model_type: str = "", default_window: int | None = None,
                   use_flag: bool = False) -> tuple[int | None, ...]:
    """Per-layer windows in the order of docs/conventions.md (layer_types, pattern, use_sliding_window, window).

    ``default_window`` is the family's ``sliding_window`` when the key is absent (Gemma 2 and 3:
    4,096, as transformers' configs; an explicit null is no window). ``use_flag`` marks the
    families whose windows are off unless ``use_sliding_window`` is true (Qwen2, Qwen3 and their
    MoE: transformers' default is false, and ``max_window_layers`` defaults to 28).
    """
    # a positive integer [tokens] or null (no window); absent: the family's default
    window = field(cfg, "sliding_window", source=source, required=False) if "sliding_window" in cfg else default_window

    def need_window() -> int:
        if window is None:
            raise ConfigError(f"{source}: sliding layers are declared but field 'sliding_window' is missing")
        return window

    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ConfigError(f"{source}: field 'layer_types' must list one type per layer ({layers})")
        out: list[int | None] = []
        for t in types:
            if t == "full_attention":
                out.append(None)
            elif t == "sliding_attention":
                out.append(need_window())
            else:
                raise UnsupportedModelError(model_type or "config", f"layer type {t!r} (only full_attention and "
                                            "sliding_attention layers hold a modelled KV cache)")
        return tuple(out) if any(w is not None for w in out) else ()
    pattern = cfg.get("sliding_window_pattern", default_pattern)
    if pattern is not None:
        if not is_plain_int(pattern) or pattern <= 0:
            raise ConfigError(f"{source}: field 'sliding_window_pattern'={pattern!r} must be a positive integer")
        if window is None:
            return ()
        windows = tuple(window if (i + 1) % pattern else None for i in range(layers))
        return windows if any(w is not None for w in windows) else ()  # pattern 1: every layer global
    if "use_sliding_window" in cfg or use_flag:
        if not flag(cfg, "use_sliding_window", False, source=source) or window is None:
            return ()
        first = _count(cfg, "max_window_layers", source=source, default=28 if use_flag else layers)
        return tuple(window if i >= first else None for i in range(layers)) if first < layers else ()
    if window is not None:
        return (window,) * layers
    return ()


# --------------------------------------------------------------------------- mixture of experts


def _moe_layers_qwen(cfg: dict[str, Any], layers: int, source: str) -> int:
    """Qwen2/Qwen3-MoE: layer i is sparse iff not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    step = field(cfg, "decoder_sparse_step", source=source, required=False, default=1)
    only = cfg.get("mlp_only_layers")
    only = [] if only is None else only  # 0, false or "" are not an empty list: refused below
    if not isinstance(only, list) or not all(is_plain_int(i) for i in only):
        raise ConfigError(f"{source}: field 'mlp_only_layers'={shown(only)} must be a list of layer indices")
    if any(not 0 <= i < layers for i in only):
        raise ConfigError(f"{source}: field 'mlp_only_layers'={shown(only)} names a layer outside 0 .. {layers - 1}")
    dense = set(only)
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


_MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "num_shared_experts",
             "shared_expert_intermediate_size", "shared_expert_gate", "router_score_bias")


def _dense_without_moe_layers(kw: dict[str, Any]) -> dict[str, Any]:
    """A MoE family whose config leaves no layer sparse (first_k_dense_replace >= layers, every layer in
    mlp_only_layers, decoder_sparse_step > layers) is the dense model transformers builds: every layer
    an MLP of intermediate_size."""
    if kw.get("num_moe_layers") == 0:
        for key in (*_MOE_KEYS, "num_moe_layers"):
            kw.pop(key, None)
    return kw


def _moe_layers_deepseek(cfg: dict[str, Any], layers: int, source: str) -> int:
    """DeepSeek-V2/V3: layer i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0."""
    first = _count(cfg, "first_k_dense_replace", source=source, default=0)
    freq = field(cfg, "moe_layer_freq", source=source, required=False, default=1)
    return sum(1 for i in range(layers) if i >= first and i % freq == 0)


def _experts(cfg: dict[str, Any], source: str, experts_key: str) -> dict[str, Any]:
    experts = field(cfg, experts_key, source=source)
    k = field(cfg, _first(cfg, "num_experts_per_tok", "experts_per_token", source=source), source=source)
    if k > experts:
        raise ConfigError(f"{source}: field 'num_experts_per_tok'={k} exceeds {experts_key}={experts}")
    return dict(num_experts=experts, num_experts_per_tok=k)


# --------------------------------------------------------------------------- family readers


def _read_llama(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _llama_like(cfg, source, tied=False)
    if cfg.get("layer_types") is not None:
        # LlamaConfig has no window, but vLLM's llama.py gives a layer_types "sliding_attention" layer
        # config.sliding_window: read from layer_types alone (a bare sliding_window stays unused, as there)
        kw["layer_windows"] = _layer_windows({"layer_types": cfg["layer_types"],
                                              "sliding_window": cfg.get("sliding_window")},
                                             kw["num_hidden_layers"], source, model_type="llama")
    return kw


def _read_mistral(cfg: dict[str, Any], source: str, *, default_window: int | None = 4096) -> dict[str, Any]:
    kw = _llama_like(cfg, source, tied=False)
    # transformers' MistralConfig defaults sliding_window to 4,096 (Mistral 7B v0.1); v0.2 and later write null
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="mistral",
                                         default_window=default_window)
    return kw


def _read_mixtral(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _read_mistral(cfg, source, default_window=None)  # MixtralConfig's default is null
    kw.update(_experts(cfg, source, "num_local_experts"), moe_intermediate_size=kw["intermediate_size"],
              num_moe_layers=kw["num_hidden_layers"])
    return kw


def _read_qwen2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _llama_like(cfg, source, tied=False)
    kw.update(qkv_bias=True, o_bias=False)
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="qwen2", use_flag=True)
    return kw


def _read_qwen2_moe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _read_qwen2(cfg, source)
    kw.update(_experts(cfg, source, "num_experts"))
    shared = _count(cfg, "shared_expert_intermediate_size", source=source)
    kw.update(moe_intermediate_size=field(cfg, "moe_intermediate_size", source=source),
              num_moe_layers=_moe_layers_qwen(cfg, kw["num_hidden_layers"], source),
              shared_expert_intermediate_size=shared, num_shared_experts=1 if shared else 0,
              shared_expert_gate=bool(shared))
    return _dense_without_moe_layers(kw)


def _read_qwen3(cfg: dict[str, Any], source: str, *, head_dim: int | None = 128) -> dict[str, Any]:
    # Qwen3Config's head_dim defaults to 128 (not hidden / heads); Qwen3MoeConfig has none (hidden / heads)
    kw = _llama_like(cfg, source, tied=False, head_dim=head_dim)
    kw["qk_norm"] = True
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="qwen3", use_flag=True)
    return kw


def _read_qwen3_moe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _read_qwen3(cfg, source, head_dim=None)
    kw.update(_experts(cfg, source, "num_experts"))
    kw.update(moe_intermediate_size=field(cfg, "moe_intermediate_size", source=source),
              num_moe_layers=_moe_layers_qwen(cfg, kw["num_hidden_layers"], source))
    return _dense_without_moe_layers(kw)


def _read_gemma(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    return _llama_like(cfg, source, tied=True, head_dim=256)  # Gemma*Config head_dim: 256


def _read_gemma2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _llama_like(cfg, source, tied=True, head_dim=256)  # Gemma*Config head_dim: 256
    kw["norms_per_layer"] = 4
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, default_pattern=2, model_type="gemma2",
                                         default_window=4096)
    return kw


def _read_gemma3_text(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _llama_like(cfg, source, tied=True, head_dim=256)  # Gemma*Config head_dim: 256
    kw.update(norms_per_layer=4, qk_norm=True)
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, default_pattern=6,
                                         model_type="gemma3_text", default_window=4096)
    return kw


def _read_phi3(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _llama_like(cfg, source, tied=False)
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="phi3")
    return kw


def _read_gpt2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    hidden = field(cfg, _first(cfg, "n_embd", "hidden_size", source=source), source=source)
    heads = field(cfg, _first(cfg, "n_head", "num_attention_heads", source=source), source=source)
    if hidden % heads:
        raise ConfigError(f"{source}: n_embd={hidden} is not divisible by n_head={heads}")
    positions = field(cfg, _first(cfg, "n_positions", "max_position_embeddings", source=source), source=source)
    return dict(
        num_hidden_layers=field(cfg, _first(cfg, "n_layer", "num_hidden_layers", source=source), source=source),
        hidden_size=hidden, intermediate_size=field(cfg, "n_inner", source=source, required=False,
                                                    default=4 * hidden),
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=hidden // heads,
        vocab_size=field(cfg, "vocab_size", source=source), max_position_embeddings=positions,
        tie_word_embeddings=flag(cfg, "tie_word_embeddings", True, source=source),
        qkv_bias=True, o_bias=True, mlp_bias=True, gated_mlp=False, norm="layernorm",
        learned_positions=positions,
    )


def _read_gpt_neox(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    layers = field(cfg, "num_hidden_layers", source=source)
    hidden = field(cfg, "hidden_size", source=source)
    heads = field(cfg, "num_attention_heads", source=source)
    if hidden % heads:
        raise ConfigError(f"{source}: hidden_size={hidden} is not divisible by num_attention_heads={heads}")
    bias = flag(cfg, "attention_bias", True, source=source)
    return dict(
        num_hidden_layers=layers, hidden_size=hidden,
        intermediate_size=field(cfg, "intermediate_size", source=source),
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=hidden // heads,
        vocab_size=field(cfg, "vocab_size", source=source),
        max_position_embeddings=field(cfg, "max_position_embeddings", source=source, required=False),
        tie_word_embeddings=flag(cfg, "tie_word_embeddings", False, source=source),
        qkv_bias=bias, o_bias=bias, mlp_bias=True, gated_mlp=False, norm="layernorm",
    )


def _read_opt(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    hidden = field(cfg, "hidden_size", source=source)
    heads = field(cfg, "num_attention_heads", source=source)
    if hidden % heads:
        raise ConfigError(f"{source}: hidden_size={hidden} is not divisible by num_attention_heads={heads}")
    max_pos = field(cfg, "max_position_embeddings", source=source)
    # OPTConfig: word_embed_proj_dim null (or absent) is hidden_size
    if field(cfg, "word_embed_proj_dim", source=source, required=False, default=hidden) != hidden:
        raise UnsupportedModelError("opt", "word_embed_proj_dim != hidden_size (projected embeddings, OPT-350m)")
    if not flag(cfg, "do_layer_norm_before", True, source=source):
        raise UnsupportedModelError("opt", "do_layer_norm_before=false (post-norm, OPT-350m)")
    bias = flag(cfg, "enable_bias", True, source=source)
    return dict(
        num_hidden_layers=field(cfg, "num_hidden_layers", source=source), hidden_size=hidden,
        intermediate_size=field(cfg, "ffn_dim", source=source), num_attention_heads=heads,
        num_key_value_heads=heads, head_dim=hidden // heads, vocab_size=field(cfg, "vocab_size", source=source),
        max_position_embeddings=max_pos, tie_word_embeddings=flag(cfg, "tie_word_embeddings", True, source=source),
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, gated_mlp=False, norm="layernorm", learned_positions=max_pos + 2,
    )


def _read_falcon(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    hidden = field(cfg, "hidden_size", source=source)
    heads = field(cfg, _first(cfg, "num_attention_heads", "n_head", source=source), source=source)
    if hidden % heads:
        raise ConfigError(f"{source}: hidden_size={hidden} is not divisible by num_attention_heads={heads}")
    new_arch = flag(cfg, "new_decoder_architecture", False, source=source)
    if new_arch:
        kv_heads = field(cfg, _first(cfg, "num_kv_heads", "n_head_kv", source=source), source=source)
        norms = 2 if field(cfg, "num_ln_in_parallel_attn", source=source, required=False, default=2) == 2 else 1
    else:
        kv_heads = 1 if flag(cfg, "multi_query", True, source=source) else heads
        norms = 1 if flag(cfg, "parallel_attn", True, source=source) else 2
    bias = flag(cfg, "bias", False, source=source)
    return dict(
        num_hidden_layers=field(cfg, _first(cfg, "num_hidden_layers", "n_layer", source=source), source=source),
        hidden_size=hidden, intermediate_size=field(cfg, "ffn_hidden_size", source=source, required=False,
                                                    default=4 * hidden),
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        vocab_size=field(cfg, "vocab_size", source=source),
        max_position_embeddings=field(cfg, "max_position_embeddings", source=source, required=False),
        tie_word_embeddings=flag(cfg, "tie_word_embeddings", True, source=source),
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, gated_mlp=False, norm="layernorm", norms_per_layer=norms,
    )


def _read_deepseek(cfg: dict[str, Any], source: str, *, v3: bool) -> dict[str, Any]:
    mla = dict(
        q_lora_rank=field(cfg, "q_lora_rank", source=source, required=False),
        kv_lora_rank=field(cfg, "kv_lora_rank", source=source),
        qk_nope_head_dim=field(cfg, "qk_nope_head_dim", source=source),
        qk_rope_head_dim=field(cfg, "qk_rope_head_dim", source=source),
        v_head_dim=field(cfg, "v_head_dim", source=source),
    )
    # a query/key head is qk_nope_head_dim + qk_rope_head_dim wide, never hidden / heads (56 for V3)
    kw = _llama_like({**cfg, "head_dim": mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]}, source, tied=False)
    kw.update(mla)
    layers = kw["num_hidden_layers"]
    if _count(cfg, "n_routed_experts", source=source):  # null or 0: dense; a bool or a float: refused
        kw.update(_experts(cfg, source, "n_routed_experts"))
        shared = _count(cfg, "n_shared_experts", source=source)
        width = field(cfg, "moe_intermediate_size", source=source)
        kw.update(moe_intermediate_size=width, num_moe_layers=_moe_layers_deepseek(cfg, layers, source),
                  num_shared_experts=shared, shared_expert_intermediate_size=shared * width,
                  router_score_bias=v3 or cfg.get("topk_method") == "noaux_tc")
    return _dense_without_moe_layers(kw)


def _read_gpt_oss(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _llama_like(cfg, source, tied=False)
    kw.update(_experts(cfg, source, "num_local_experts"))
    kw.update(moe_intermediate_size=kw["intermediate_size"], num_moe_layers=kw["num_hidden_layers"],
              router_bias=True, expert_bias=True, attention_sinks=True,
              qkv_bias=flag(cfg, "attention_bias", True, source=source),
              o_bias=flag(cfg, "attention_bias", True, source=source))
    # without layer_types, transformers' GptOssConfig alternates: even layers slide, odd ones are global
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, default_pattern=2, model_type="gpt_oss",
                                         default_window=128)
    return kw


# --------------------------------------------------------------------------- multimodal towers

#: transformers' LlamaConfig defaults, which a llava ``text_config`` relies on for the fields it omits.
_LLAMA_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, max_position_embeddings=2048)
#: transformers' Gemma3TextConfig defaults, which a gemma3 ``text_config`` relies on for the fields it omits
#: (google/gemma-3-4b-it's config.json gives only hidden_size, intermediate_size, num_hidden_layers and
#: sliding_window: its 8 heads, 4 KV heads, head_dim 256 and vocabulary of 262,208 are these defaults).
_GEMMA3_TEXT_DEFAULTS = dict(vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                             num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                             max_position_embeddings=131_072, tie_word_embeddings=True, attention_bias=False,
                             sliding_window=4096, sliding_window_pattern=6)
#: transformers' CLIPVisionConfig defaults.
_CLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                      image_size=224, patch_size=32, num_channels=3)
#: transformers' SiglipVisionConfig defaults.
_SIGLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                        image_size=224, patch_size=16, num_channels=3)


def _vision_tower(vision: Any, source: str, owner: str) -> tuple[int, int]:
    """(parameters of a CLIP or SigLIP vision encoder, its width); other towers are refused by name."""
    if not isinstance(vision, dict):
        raise ConfigError(f"{source}: field 'vision_config' must be an object")
    kind = vision.get("model_type")
    if kind == "clip_vision_model":
        v = {**_CLIP_DEFAULTS, **{k: x for k, x in vision.items() if x is not None}}
    elif kind == "siglip_vision_model":
        v = {**_SIGLIP_DEFAULTS, **{k: x for k, x in vision.items() if x is not None}}
    else:
        raise UnsupportedModelError(owner, f"vision tower {kind!r} (only clip_vision_model and siglip_vision_model "
                                    "are counted)", field="vision_config.model_type")
    h = field(v, "hidden_size", source=source + " vision_config")
    inter = field(v, "intermediate_size", source=source + " vision_config")
    layers = field(v, "num_hidden_layers", source=source + " vision_config")
    patch = field(v, "patch_size", source=source + " vision_config")
    image = field(v, "image_size", source=source + " vision_config")
    channels = field(v, "num_channels", source=source + " vision_config")
    if patch > image:
        raise ConfigError(f"{source}: field 'vision_config.patch_size'={patch} exceeds image_size={image} "
                          "(an image of no patch)")
    patches = (image // patch) ** 2
    # each encoder layer: q, k, v, o with biases, two LayerNorms, fc1 and fc2 with biases
    per_layer = 4 * (h * h + h) + 2 * 2 * h + (h * inter + inter) + (inter * h + h)
    if kind == "clip_vision_model":
        # class embedding, bias-free patch conv, positions (patches + class), pre- and post-LayerNorm
        embed = h + channels * patch * patch * h + (patches + 1) * h + 2 * h
        return embed + layers * per_layer + 2 * h, h
    embed = channels * patch * patch * h + h + patches * h
    head = 0
    if flag(v, "vision_use_head", True, source=source + " vision_config"):
        # attention-pooling head: probe, MultiheadAttention (in_proj 3h x h + 3h, out h x h + h), LayerNorm, MLP
        head = h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h)
    return embed + layers * per_layer + 2 * h + head, h


def _read_text_config(cfg: dict[str, Any], source: str, owner: str, default_type: str,
                      defaults: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError(f"{source}: field 'text_config' must be an object (the language model's config)")
    text = dict(text)
    kind = str(text.get("model_type") or default_type).lower()
    if kind == owner or kind not in FAMILIES or FAMILIES[kind].wrapper:
        raise UnsupportedModelError(owner, f"text_config of model_type {kind!r} is not a supported language model")
    if defaults and kind == default_type:  # the defaults are the default type's (LlamaConfig's), no other family's
        text = {**defaults, **{k: v for k, v in text.items() if v is not None}}
    if "tie_word_embeddings" in cfg and "tie_word_embeddings" not in text:
        text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    try:
        return kind, FAMILIES[kind].reader(text, f"{source} text_config")
    except ConfigError as exc:
        message = str(exc).replace(f"{source} text_config: ", f"{source}: ")
        message = message.replace("field '", "field 'text_config.")
        raise ConfigError(message) from None


def _read_llava(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kind, kw = _read_text_config(cfg, source, "llava", "llama", _LLAMA_DEFAULTS)
    vision, vh = _vision_tower(cfg.get("vision_config"), source, "llava")
    bias = flag(cfg, "multimodal_projector_bias", True, source=source)
    h = kw["hidden_size"]
    projector = vh * h + h * h + (2 * h if bias else 0)
    kw.update(tower_parameters=vision + projector, model_type=kind)
    return kw


def _read_gemma3(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kind, kw = _read_text_config(cfg, source, "gemma3", "gemma3_text", _GEMMA3_TEXT_DEFAULTS)
    vision, vh = _vision_tower(cfg.get("vision_config"), source, "gemma3")
    # multi_modal_projector: mm_input_projection_weight (vision h x text h) and mm_soft_emb_norm (vision h)
    kw.update(tower_parameters=vision + vh * kw["hidden_size"] + vh, model_type=kind)
    return kw


# --------------------------------------------------------------------------- the table


@attrs.frozen
class Family:
    """One supported ``model_type``.

    Attributes
    ----------
    model_type : str
    description : str
        MLP shape and features, for the README and ``--help``.
    reader : callable
        ``reader(config dict, source) -> ModelConfig keyword arguments``.
    wrapper : bool
        A multimodal wrapper read through its ``text_config``.
    """

    model_type: str
    description: str
    reader: Callable[[dict[str, Any], str], dict[str, Any]]
    wrapper: bool = False


def _deepseek_moe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """DeepSeekMoE (``model_type`` "deepseek"): Llama attention, DeepSeek's MoE with shared experts."""
    kw = _llama_like(cfg, source, tied=False)
    if _count(cfg, "n_routed_experts", source=source):  # null or 0: dense; a bool or a float: refused
        kw.update(_experts(cfg, source, "n_routed_experts"))
        shared = _count(cfg, "n_shared_experts", source=source)
        width = field(cfg, "moe_intermediate_size", source=source)
        kw.update(moe_intermediate_size=width,
                  num_moe_layers=_moe_layers_deepseek(cfg, kw["num_hidden_layers"], source),
                  num_shared_experts=shared, shared_expert_intermediate_size=shared * width)
    return _dense_without_moe_layers(kw)


def _deepseek_v2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    return _read_deepseek(cfg, source, v3=False)


def _deepseek_v3(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    return _read_deepseek(cfg, source, v3=True)


#: Supported families, by ``model_type``.
FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("llama", "dense, gated MLP (Llama 2, 3.x; also Mistral-Small, Vicuna)", _read_llama),
    Family("mistral", "dense, gated MLP, sliding_window on every layer when set", _read_mistral),
    Family("mixtral", "MoE: num_local_experts experts of intermediate_size, top num_experts_per_tok", _read_mixtral),
    Family("qwen2", "dense, gated MLP, q/k/v biases, use_sliding_window with max_window_layers", _read_qwen2),
    Family("qwen2_moe", "MoE with a gated shared expert; decoder_sparse_step, mlp_only_layers", _read_qwen2_moe),
    Family("qwen3", "dense, gated MLP, per-head q/k RMSNorm, explicit head_dim", _read_qwen3),
    Family("qwen3_moe", "MoE: num_experts of moe_intermediate_size; decoder_sparse_step, mlp_only_layers",
           _read_qwen3_moe),
    Family("gemma", "dense, gated MLP, tied embeddings, explicit head_dim", _read_gemma),
    Family("gemma2", "dense, 4 norms per layer, local/global layers (every 2nd global)", _read_gemma2),
    Family("gemma3_text", "dense, 4 norms and q/k norms per layer, local/global layers (every 6th global)",
           _read_gemma3_text),
    Family("gemma3", "multimodal wrapper: gemma3_text + SigLIP vision tower (counted in memory)", _read_gemma3,
           wrapper=True),
    Family("phi3", "dense, gated MLP (fused qkv and gate_up: same parameters); Phi-3, Phi-4", _read_phi3),
    Family("gpt2", "dense, plain MLP, learned positions, biases, LayerNorm (n_layer, n_embd, n_head, n_inner)",
           _read_gpt2),
    Family("gpt_neox", "dense, plain MLP, biases, LayerNorm, untied (Pythia)", _read_gpt_neox),
    Family("opt", "dense, plain MLP (ffn_dim), learned positions (+2), biases, LayerNorm", _read_opt),
    Family("falcon", "dense, plain MLP, multi_query or num_kv_heads, 1 or 2 LayerNorms per layer", _read_falcon),
    Family("deepseek", "DeepSeekMoE: Llama attention + MoE with shared experts, first_k_dense_replace", _deepseek_moe),
    Family("deepseek_v2", "MLA + MoE with shared experts, first_k_dense_replace dense layers", _deepseek_v2),
    Family("deepseek_v3", "MLA + MoE with shared experts and e_score_correction_bias; MTP layers not counted",
           _deepseek_v3),
    Family("gpt_oss", "MoE with expert and router biases, attention sinks, alternating 128-token windows",
           _read_gpt_oss),
    Family("llava", "multimodal wrapper: text_config (llama by default) + CLIP vision tower and projector",
           _read_llava, wrapper=True),
)}

_ENCODER = "encoder-only model: it has no autoregressive decode step to price"
_SEQ2SEQ = "encoder-decoder model: decode attends to an encoder's output through cross-attention, not modelled"
_SSM = "state-space or hybrid model: its recurrent layers hold a fixed state, not a KV cache; not modelled"
_TOWER = ("multimodal model whose vision tower is not modelled (only llava with CLIP and gemma3 with SigLIP are); "
          "its other towers' weights could not be counted")
_XATTN = "cross-attention decoder: its cross-attention layers to image features are not modelled"

#: Model types refused by name, with the reason.
REFUSED: dict[str, str] = {
    **dict.fromkeys(("bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
                     "modernbert", "camembert", "mpnet", "nomic_bert"), _ENCODER),
    **dict.fromkeys(("t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper", "led",
                     "prophetnet", "switch_transformers", "m2m_100", "nllb-moe", "blenderbot"), _SEQ2SEQ),
    **dict.fromkeys(("mamba", "mamba2", "falcon_mamba", "jamba", "zamba", "zamba2", "rwkv", "rwkv5", "rwkv6",
                     "recurrent_gemma", "bamba", "nemotron_h", "granitemoehybrid", "falcon_h1", "lfm2",
                     "qwen3_next", "plamo2", "minimax", "minimax_m1"), _SSM),
    **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", "qwen2_5_omni", "mistral3", "pixtral", "llava_next", "idefics3",
                     "paligemma", "internvl"), _TOWER),
    **dict.fromkeys(("mllama", "idefics", "flamingo"), _XATTN),
}


def supported_model_types() -> list[str]:
    """The ``model_type`` values the package models, sorted."""
    return sorted(FAMILIES)


def read_config(cfg: dict[str, Any], *, source: str) -> dict[str, Any]:
    """ModelConfig keyword arguments for a parsed ``config.json`` (its family's reader).

    Raises
    ------
    UnsupportedModelError
        A model_type refused by name or unknown, or a feature of a known family not modelled.
    ConfigError
        A required field missing or malformed (the message names the field and the value).
    """
    raw = cfg.get("model_type")
    if raw is None or not isinstance(raw, str) or not raw.strip():
        raise UnsupportedModelError(
            "" if raw is None else str(raw), f"{source}: field 'model_type' missing: the family cannot be known "
            "and is not guessed "
            f"(supported: {', '.join(supported_model_types())})")
    model_type = raw.strip().lower()
    if model_type in REFUSED:
        raise UnsupportedModelError(model_type, REFUSED[model_type])
    if model_type not in FAMILIES:
        raise UnsupportedModelError(model_type, f"unknown model_type (supported: {', '.join(supported_model_types())})")
    kw = FAMILIES[model_type].reader(cfg, source)
    kw.setdefault("model_type", model_type)
    text = cfg.get("text_config") if FAMILIES[model_type].wrapper else None
    quant = cfg.get("quantization_config")
    if quant is None and isinstance(text, dict) and text.get("quantization_config") is not None:
        quant = text["quantization_config"]  # a wrapper's language model may carry it: never dropped
    kw.update(read_quantization(quant, source=source, model_type=model_type, cfg_moe=bool(kw.get("num_experts"))))
    # torch_dtype, else dtype (newer transformers), else the text_config's: a null is absent, not bfloat16
    dtype = (cfg.get("torch_dtype") or cfg.get("dtype") or (text or {}).get("torch_dtype")
             or (text or {}).get("dtype") or "bfloat16")
    kw["torch_dtype"] = dtype
    return kw


# --------------------------------------------------------------------------- quantization

_QUANT_METHODS = ("gptq", "awq", "fp8", "compressed-tensors", "mxfp4")


def _bits(q: dict[str, Any], *keys: str, source: str) -> int:
    key = _first(q, *keys, source=source, prefix="quantization_config.")
    bits = q.get(key)
    # 4.0 == 4 in Python: a float (or true == 1) would pass a plain membership test and fail later
    if not is_plain_int(bits) or bits not in (2, 3, 4, 8):
        raise ConfigError(f"{source}: field 'quantization_config.{key}'={bits!r} must be 2, 3, 4 or 8")
    return bits


def _group(q: dict[str, Any], *keys: str, source: str) -> int:
    key = _first(q, *keys, source=source, prefix="quantization_config.")
    return _group_size(q.get(key, 128), f"quantization_config.{key}", source)


def _group_size(g: Any, where: str, source: str) -> int:
    """A quantization group size: a positive integer, or -1 (one group per channel)."""
    if not is_plain_int(g) or (g <= 0 and g != -1):
        raise ConfigError(f"{source}: field '{where}'={shown(g)} must be a positive integer or -1")
    return g


def _block_shape(block: Any, where: str, source: str) -> tuple[int, int]:
    """A quantization block, [rows, cols] of positive integers."""
    if not isinstance(block, list) or len(block) != 2 or not all(is_plain_int(b) and b > 0 for b in block):
        raise ConfigError(f"{source}: field '{where}'={shown(block)} must be [rows, cols] of positive integers")
    return block[0], block[1]


def _classes(q: dict[str, Any], model_type: str, default: tuple[str, ...], *, moe: bool) -> tuple[str, ...]:
    """Tensor classes a quantized checkpoint quantizes (lm_head only when the config says so).

    ``modules_to_not_convert`` / ``ignore`` entries are mapped onto tensor classes: the
    lm_head and embeddings (never quantized here unless ``lm_head`` is true), the router
    (``mlp.gate``, ``router``), other towers (``vision``, ``visual``, ``multi_modal``), and
    attention (``self_attn``) when the model is a MoE whose only other quantized class is
    the experts (gpt-oss). Anything else is refused by name rather than guessed.
    """
    classes = list(default)
    skipped: list[tuple[str, Any]] = []
    # transformers writes modules_to_not_convert, compressed-tensors ignore, vLLM's fp8 ignored_layers: all read
    for key in ("modules_to_not_convert", "ignore", "ignored_layers"):
        value = q.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            raise ConfigError(f"field 'quantization_config.{key}'={shown(value)} must be a list")
        skipped += [(key, v) for v in value]
    for key, entry in ((k, str(v)) for k, v in skipped):
        where = f"quantization_config.{key}"
        if any(tag in entry for tag in ("lm_head", "embed_tokens", "vision", "visual", "multi_modal", "mm_")):
            continue
        if "router" in entry or entry.rstrip("$").endswith(("mlp.gate", ".gate")):
            classes = [c for c in classes if c != "router"]
        elif "self_attn" in entry and moe:
            classes = [c for c in classes if c != "projections"] if model_type == "gpt_oss" else classes
            if model_type != "gpt_oss":
                raise UnsupportedModelError(model_type, f"leaves {entry!r} unquantized: attention apart from the "
                                            "dense MLP is not a modelled tensor class", field=where)
        else:
            raise UnsupportedModelError(model_type, f"leaves {entry!r} unquantized: not mapped onto a tensor class "
                                        "(embeddings, lm_head, projections, experts, router)", field=where)
    lm_head = q.get("lm_head")
    if lm_head is not None and not isinstance(lm_head, bool):
        raise ConfigError(f"field 'quantization_config.lm_head'={shown(lm_head)} must be true or false")
    if lm_head:
        classes.append("lm_head")
    return tuple(dict.fromkeys(classes))


def read_quantization(q: Any, *, source: str, model_type: str, cfg_moe: bool = False) -> dict[str, Any]:
    """ModelConfig keyword arguments (``quantization``, ``activation_dtype``) for a ``quantization_config``.

    Supported ``quant_method`` values: gptq and awq (weight-only b-bit, per-group fp16
    scales and packed zeros), fp8 (1-byte weights, block or per-tensor float32 scales,
    FP8 activations when ``activation_scheme`` is given), compressed-tensors (float 8-bit
    weights with or without FP8 activations, int 8-bit weights weight-only, int 4-bit
    w4a16 groups) and mxfp4 (gpt-oss experts: 4-bit weights with an E8M0 scale per 32).
    Layers the config leaves unquantized (embeddings, lm_head unless ``lm_head`` is true,
    ``modules_to_not_convert`` / ``ignore``) keep ``torch_dtype``.

    Raises
    ------
    UnsupportedModelError
        Any other method (bitsandbytes, hqq, eetq, ...) or an unsupported scheme, by name.
    ConfigError
        A malformed field of a supported method, named.
    """
    if q is None:
        return {}
    if not isinstance(q, dict):
        raise ConfigError(f"{source}: field 'quantization_config' must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method not in _QUANT_METHODS:
        raise UnsupportedModelError(model_type, f"{q.get('quant_method')!r} (supported: {', '.join(_QUANT_METHODS)})",
                                    field="quantization_config.quant_method")
    linear = ("projections", "experts")
    moe = bool(cfg_moe)
    if method == "gptq":
        bits = _bits(q, "bits", source=source)
        return dict(quantization=Quantization("gptq", bits, "group+zero", _group(q, "group_size", source=source),
                                              classes=_classes(q, model_type, linear, moe=moe)))
    if method == "awq":
        bits = _bits(q, "bits", "w_bit", source=source)
        zero = flag(q, "zero_point", True, source=source)
        return dict(quantization=Quantization("awq", bits, "group+zero" if zero else "group",
                                              _group(q, "group_size", "q_group_size", source=source),
                                              classes=_classes(q, model_type, linear, moe=moe)))
    if method == "mxfp4":
        if not moe:
            # mxfp4 checkpoints (gpt-oss) quantize the routed experts only: on a model without experts it
            # would quantize nothing, and the checkpoint would be priced as unquantized
            raise UnsupportedModelError(model_type, "'mxfp4' on a model without routed experts (mxfp4 is modelled "
                                        "for the experts of a MoE model only)",
                                        field="quantization_config.quant_method")
        # modules_to_not_convert (gpt-oss: attention, router, embeddings, lm_head) checked like the others':
        # an entry that leaves the experts unquantized, or one not mapped onto a class, is refused by name
        return dict(quantization=Quantization("mxfp4", 4, "mxfp4", 32,
                                              classes=_classes(q, model_type, ("experts",), moe=moe)))
    if method == "fp8":
        block = q.get("weight_block_size")
        classes = _classes(q, model_type, linear, moe=moe)
        scheme = q.get("activation_scheme")
        if scheme not in (None, "dynamic", "static"):
            raise ConfigError(f"{source}: field 'quantization_config.activation_scheme'={shown(scheme)} must be "
                              "'dynamic', 'static' or absent")
        act = "fp8" if scheme in ("dynamic", "static") else None
        if block is None:
            return dict(quantization=Quantization("fp8", 8, "tensor", classes=classes), activation_dtype=act)
        rows, cols = _block_shape(block, "quantization_config.weight_block_size", source)
        return dict(quantization=Quantization("fp8", 8, "block", block=(cols, rows), classes=classes),
                    activation_dtype=act)
    # compressed-tensors
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise UnsupportedModelError(model_type, "compressed-tensors with other than one config group",
                                    field="quantization_config.config_groups")
    ((group_name, scheme),) = groups.items()
    where = f"quantization_config.config_groups.{group_name}"
    if not isinstance(scheme, dict):
        raise ConfigError(f"{source}: field {where!r}={shown(scheme)} must be an object")
    weights = scheme.get("weights")
    acts = scheme.get("input_activations")
    for key, value in (("weights", weights), ("input_activations", acts)):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{source}: field '{where}.{key}'={shown(value)} must be an object or null")
    weights = weights or {}
    ct_bits, kind = weights.get("num_bits"), weights.get("type")
    if not is_plain_int(ct_bits):
        raise ConfigError(f"{source}: field '{where}.weights.num_bits'={shown(ct_bits)} must be an integer")
    strategy = weights.get("strategy")
    classes = _classes(q, model_type, linear, moe=moe)
    if kind == "float" and ct_bits == 8:
        if strategy not in (None, "tensor", "channel", "block"):
            raise UnsupportedModelError(model_type, f"compressed-tensors float8 weights with strategy {strategy!r} "
                                        "(modelled: tensor, channel, block)", field=f"{where}.weights.strategy")
        act = "fp8" if acts and acts.get("type") == "float" and acts.get("num_bits") == 8 else None
        if strategy == "block":
            block = weights.get("block_structure")
            bi, bo = _block_shape([128, 128] if block is None else block, f"{where}.weights.block_structure", source)
            return dict(quantization=Quantization("compressed-tensors", 8, "block", block=(bo, bi), classes=classes),
                        activation_dtype=act)
        if strategy == "channel":
            return dict(quantization=Quantization("compressed-tensors", 8, "group", -1, classes=classes),
                        activation_dtype=act)
        return dict(quantization=Quantization("compressed-tensors", 8, "tensor", classes=classes),
                    activation_dtype=act)
    if kind == "int" and ct_bits in (4, 8):
        if strategy not in (None, "tensor", "channel", "group"):
            raise UnsupportedModelError(model_type, f"compressed-tensors int{ct_bits} weights with strategy "
                                        f"{strategy!r} (modelled: tensor, channel, group)",
                                        field=f"{where}.weights.strategy")
        if acts:
            raise UnsupportedModelError(model_type, f"compressed-tensors int{ct_bits} weights with quantized "
                                        "activations (the accelerator tables hold no INT8 peak)",
                                        field=f"{where}.input_activations")
        group = _group_size(weights.get("group_size") if strategy == "group" else -1, f"{where}.weights.group_size",
                            source)
        symmetric = flag(weights, "symmetric", True, source=f"{source}: {where}.weights")  # "no" is not true
        ct_scheme = "group" if symmetric else "group+zero"
        return dict(quantization=Quantization("compressed-tensors", ct_bits, ct_scheme, group, classes=classes))
    raise UnsupportedModelError(model_type, f"compressed-tensors weights of type {kind!r} with {ct_bits!r} bits",
                                field=f"{where}.weights.type")
