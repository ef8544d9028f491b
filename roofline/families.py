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
* hybrid (recurrent layers holding a fixed state, :mod:`roofline.hybrid`): qwen3_next
  (Gated DeltaNet + gated attention, MoE), nemotron_h (Mamba2, attention and MLP blocks),
  granitemoehybrid (Mamba2 or attention, MoE), falcon_h1 (Mamba2 beside attention in every
  layer), jamba (Mamba1 and attention, MoE), lfm2 (short convolutions and attention), minimax
  (lightning attention and softmax attention, MoE)
* multimodal wrappers read through their ``text_config``: llava (CLIP vision tower),
  gemma3 (SigLIP vision tower), llama4 (its own vision encoder, pixel-shuffle adapter and
  projector); the tower and projector weights are counted as the "towers" tensor class
  (memory), never as decode FLOPs.
* this year's families (issue 23; one row each, grouped at the end of :data:`FAMILIES`):
  dense glm4, olmo2, granite, cohere2, starcoder2, nemotron, internlm2, internlm3, exaone4,
  ernie4_5, hunyuan_v1_dense, smollm3, seed_oss, mimo; mixtures of experts llama4_text,
  glm4_moe, glm4_moe_lite and kimi_k2 (DeepSeek-V3's architecture), minimax_m2, olmoe,
  granitemoe, phimoe, dbrx, ernie4_5_moe. Each takes its transformers config class's
  defaults for the fields a config omits.

The ``model_type`` is read first (:func:`identify`), so a refusal always names the model.

Sliding windows (docs/conventions.md, same section): which layers slide comes from
``layer_types``, else ``sliding_window_pattern`` (every n-th layer global; Gemma 2's
and Gemma 3's defaults are 2 and 6, as in transformers' Gemma2Config and Gemma3TextConfig),
else ``use_sliding_window`` with ``max_window_layers``, else ``sliding_window`` on every
layer.

Quantization (``quantization_config``): gptq, awq, fp8, compressed-tensors and mxfp4; any
other ``quant_method`` is refused by name (:func:`read_quantization`). Norms, bias vectors and
the router in ``modules_to_not_convert`` map onto their tensor classes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from ._checks import is_plain_int
from .errors import ConfigError, UnsupportedModelError, shown
from .quantization import Quantization, quantized_matrix_bytes

__all__ = ["Family", "FAMILIES", "REFUSED", "identify", "read_config", "read_quantization", "quantized_matrix_bytes",
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


def _qwen_experts_key(cfg: dict[str, Any], source: str) -> str:
    """Qwen2/Qwen3-MoE name the experts ``num_experts``; transformers 5 writes ``num_local_experts``."""
    return _first(cfg, "num_experts", "num_local_experts", source=source)


def _read_qwen2_moe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kw = _read_qwen2(cfg, source)
    kw.update(_experts(cfg, source, _qwen_experts_key(cfg, source)))
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
    kw.update(_experts(cfg, source, _qwen_experts_key(cfg, source)))
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


def _read_deepseek_v32(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """DeepSeek-V3.2 (``deepseek_v32``): DeepSeek-V3's MLA and MoE plus DeepSeek sparse attention, a lightning
    indexer of ``index_n_heads`` heads of ``index_head_dim`` whose top ``index_topk`` cached tokens each query
    reads. The three index fields are required (no transformers class gives them defaults); the MTP layer is
    not counted, as for V3."""
    kw = _read_deepseek(cfg, source, v3=True)
    if kw.get("q_lora_rank") is None:
        raise ConfigError(f"{source}: field 'q_lora_rank' is missing (the indexer's queries are read from q's "
                          "latent)")
    kw.update(index_n_heads=field(cfg, "index_n_heads", source=source),
              index_head_dim=field(cfg, "index_head_dim", source=source),
              index_topk=field(cfg, "index_topk", source=source))
    return kw


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


# --------------------------------------------------------------------------- this year's families (issue 23)

#: transformers' Llama4TextConfig defaults (configuration_llama4.py), for the fields a config omits.
_LLAMA4_TEXT_DEFAULTS = dict(vocab_size=202_048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16_384,
                             num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                             max_position_embeddings=131_072, tie_word_embeddings=False, attention_bias=False,
                             num_experts_per_tok=1, num_local_experts=16, interleave_moe_layer_step=1,
                             attention_chunk_size=8192)
#: transformers' Llama4VisionConfig defaults.
_LLAMA4_VISION_DEFAULTS = dict(hidden_size=768, num_hidden_layers=34, num_attention_heads=16, num_channels=3,
                               intermediate_size=5632, vision_output_dim=7680, image_size=448, patch_size=14,
                               projector_input_dim=4096, projector_output_dim=4096)


def _with_defaults(cfg: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The config with its class's defaults for the fields it omits (an explicit null is omitted, as there)."""
    return {**defaults, **{k: v for k, v in cfg.items() if v is not None}}


def _layer_list(cfg: dict[str, Any], key: str, layers: int, source: str) -> list[int]:
    """A list of distinct layer indices in 0 .. layers - 1 (ConfigError naming the field otherwise)."""
    value = cfg.get(key)
    if not isinstance(value, list) or not all(is_plain_int(i) and 0 <= i < layers for i in value) \
            or len(set(value)) != len(value):
        raise ConfigError(f"{source}: field {key!r}={shown(value)} must list distinct layer indices in "
                          f"0 .. {layers - 1}")
    return value


def _read_llama4_text(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Llama 4's language model (Llama4TextConfig): MoE layers (``moe_layers``, else every
    ``interleave_moe_layer_step``-th) of ``num_local_experts`` experts of ``intermediate_size`` plus one shared
    expert of the same width; dense layers of ``intermediate_size_mlp``; parameter-free L2 q/k norms.

    Chunked local attention (``attention_chunk_size`` on the RoPE layers, every 4th layer global NoPE) holds the
    whole context in vLLM's default, which turns its hybrid KV cache manager off for chunked local attention:
    every layer is priced at full attention (docs/conventions.md, "Architectures").
    """
    cfg = _with_defaults(cfg, _LLAMA4_TEXT_DEFAULTS)
    kw = _llama_like({**cfg, "intermediate_size": cfg["intermediate_size_mlp"]}, source, tied=False)
    layers = kw["num_hidden_layers"]
    field(cfg, "intermediate_size_mlp", source=source)
    field(cfg, "attention_chunk_size", source=source, required=False)
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ConfigError(f"{source}: field 'layer_types' must list one type per layer ({layers})")
        for t in types:
            if t not in ("full_attention", "chunked_attention"):
                raise UnsupportedModelError("llama4_text", f"layer type {t!r} (full_attention and chunked_attention "
                                            "layers are modelled)")
    if "moe_layers" in cfg:
        moe = len(_layer_list(cfg, "moe_layers", layers, source))
    else:
        step = field(cfg, "interleave_moe_layer_step", source=source)
        moe = len(range(step - 1, layers, step))
    width = field(cfg, "intermediate_size", source=source)
    kw.update(_experts(cfg, source, "num_local_experts"), moe_intermediate_size=width, num_moe_layers=moe,
              num_shared_experts=1, shared_expert_intermediate_size=width)
    return _dense_without_moe_layers(kw)


def _llama4_vision(vision: Any, text_hidden: int, source: str) -> int:
    """Parameters of Llama 4's vision encoder, pixel-shuffle adapter and projector (modeling_llama4.py).

    Bias-free patch linear (channels x patch^2 -> h), class embedding, positions ((image/patch)^2 + 1),
    pre and post LayerNorm; per layer q, k, v, o with biases, fc1 and fc2 with biases, two LayerNorms; the
    adapter's fc1 (intermediate -> projector_input_dim) and fc2 (projector_output_dim squared), bias-free;
    the projector vision_output_dim -> text hidden, bias-free.
    """
    if vision is None:
        vision = {}
    if not isinstance(vision, dict):
        raise ConfigError(f"{source}: field 'vision_config' must be an object")
    if vision.get("model_type") not in (None, "llama4_vision_model"):
        raise UnsupportedModelError("llama4", f"vision tower {vision.get('model_type')!r} (llama4_vision_model is "
                                    "counted)")
    v = _with_defaults(vision, _LLAMA4_VISION_DEFAULTS)
    where = source + " vision_config"
    h, inter = field(v, "hidden_size", source=where), field(v, "intermediate_size", source=where)
    layers, channels = field(v, "num_hidden_layers", source=where, required=False, default=0), \
        field(v, "num_channels", source=where)
    image, patch = field(v, "image_size", source=where), field(v, "patch_size", source=where)
    if patch > image:
        raise ConfigError(f"{source}: field 'vision_config.patch_size'={patch} exceeds image_size={image}")
    embed = channels * patch * patch * h + h + ((image // patch) ** 2 + 1) * h + 2 * 2 * h
    per_layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * 2 * h
    projector_out = field(v, "projector_output_dim", source=where)
    adapter = inter * field(v, "projector_input_dim", source=where) + projector_out**2
    return embed + layers * per_layer + adapter + field(v, "vision_output_dim", source=where) * text_hidden


def _read_llama4(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    kind, kw = _read_text_config(cfg, source, "llama4", "llama4_text")
    kw.update(tower_parameters=_llama4_vision(cfg.get("vision_config"), kw["hidden_size"], source), model_type=kind)
    return kw


#: transformers' Glm4MoeConfig defaults (configuration_glm4_moe.py, transformers 4.57).
_GLM4_MOE_DEFAULTS = dict(vocab_size=151_552, hidden_size=4096, intermediate_size=10_944, num_hidden_layers=46,
                          num_attention_heads=96, num_key_value_heads=8, max_position_embeddings=131_072,
                          tie_word_embeddings=False, attention_bias=False, moe_intermediate_size=1408,
                          num_experts_per_tok=8, n_shared_experts=1, n_routed_experts=128, first_k_dense_replace=1,
                          use_qk_norm=False)


def _read_glm4_moe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """GLM-4.5 to 4.7 (Glm4MoeConfig): Llama attention with q/k/v biases (``attention_bias``; o_proj has none),
    optional per-head q/k norms (``use_qk_norm``), DeepSeek-V3's MoE (``n_routed_experts`` with
    ``e_score_correction_bias``, ``n_shared_experts`` of ``moe_intermediate_size``) on every layer from
    ``first_k_dense_replace``. The MTP layer (``num_nextn_predict_layers``) is not counted, as DeepSeek-V3's."""
    cfg = _with_defaults(cfg, _GLM4_MOE_DEFAULTS)
    kw = _llama_like(cfg, source, tied=False)
    layers = kw["num_hidden_layers"]
    kw.update(o_bias=False, qk_norm=flag(cfg, "use_qk_norm", False, source=source))
    experts = _first(cfg, "n_routed_experts", "num_local_experts", source=source)
    kw.update(_experts(cfg, source, experts))
    shared = _count(cfg, "n_shared_experts", source=source)
    width = field(cfg, "moe_intermediate_size", source=source)
    first = _count(cfg, "first_k_dense_replace", source=source)
    kw.update(moe_intermediate_size=width, num_moe_layers=max(layers - first, 0), num_shared_experts=shared,
              shared_expert_intermediate_size=shared * width, router_score_bias=True)
    return _dense_without_moe_layers(kw)


#: transformers' MiniMaxM2Config defaults (configuration_minimax_m2.py).
_MINIMAX_M2_DEFAULTS = dict(vocab_size=200_064, hidden_size=3072, intermediate_size=1536, num_hidden_layers=62,
                            num_attention_heads=48, num_key_value_heads=8, head_dim=128,
                            max_position_embeddings=196_608, tie_word_embeddings=False, num_experts_per_tok=8,
                            num_local_experts=256)


def _read_minimax_m2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """MiniMax-M2 (MiniMaxM2Config): full attention on every layer with RMSNorms over the whole q and k
    projections, and a MoE of ``num_local_experts`` experts of ``intermediate_size`` on every layer with a
    sigmoid router and ``e_score_correction_bias``; no shared expert. MTP modules are not counted."""
    cfg = _with_defaults(cfg, _MINIMAX_M2_DEFAULTS)
    kw = _llama_like(cfg, source, tied=False)
    if cfg.get("qk_norm_type", "per_layer") != "per_layer" or not flag(cfg, "use_qk_norm", True, source=source):
        raise UnsupportedModelError("minimax_m2", f"qk_norm_type {cfg.get('qk_norm_type')!r} with use_qk_norm "
                                    f"{cfg.get('use_qk_norm')!r} (per_layer q/k norms are modelled)")
    kw.update(qk_norm=True, qk_norm_whole=True, router_score_bias=True)
    kw.update(_experts(cfg, source, _first(cfg, "num_local_experts", "num_experts", source=source)),
              moe_intermediate_size=kw["intermediate_size"], num_moe_layers=kw["num_hidden_layers"])
    return kw


def _read_smollm3(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """SmolLM3 (SmolLM3Config): Llama with NoPE layers (no parameters, no KV change) and embeddings tied by
    default; ``use_sliding_window`` (default false) with ``sliding_window`` and ``max_window_layers``."""
    kw = _llama_like(cfg, source, tied=True)
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="smollm3", use_flag=True)
    return kw


def _read_olmo2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """OLMo 2 (Olmo2Config): Llama with norms after attention and after the MLP (two per layer, none before)
    and RMSNorms over the whole q and k projections."""
    kw = _llama_like(cfg, source, tied=False)
    kw.update(qk_norm=True, qk_norm_whole=True)
    return kw


def _read_seed_oss(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Seed-OSS (SeedOssConfig): Llama with q/k/v biases (``attention_bias``, default true) and an o_proj bias
    only with ``attention_out_bias`` (default false); explicit head_dim (default 128)."""
    kw = _llama_like(cfg, source, tied=False, head_dim=128)
    kw.update(qkv_bias=flag(cfg, "attention_bias", True, source=source),
              o_bias=flag(cfg, "attention_out_bias", False, source=source))
    return kw


def _read_olmoe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """OLMoE (OlmoeConfig): Llama attention with whole-projection q/k RMSNorms, every layer a MoE of
    ``num_experts`` experts of ``intermediate_size`` (top ``num_experts_per_tok``), bias-free router."""
    kw = _llama_like(cfg, source, tied=False)
    kw.update(qk_norm=True, qk_norm_whole=True)
    kw.update(_experts(cfg, source, "num_experts"), moe_intermediate_size=kw["intermediate_size"],
              num_moe_layers=kw["num_hidden_layers"])
    return kw


def _read_granite(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Granite (GraniteConfig): Llama's shapes; its multipliers (embedding, residual, attention, logits) hold no
    parameters."""
    return _llama_like(cfg, source, tied=False)


def _read_granitemoe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Granite MoE (GraniteMoeConfig): Llama attention, every layer a MoE of ``num_local_experts`` gated experts
    of ``intermediate_size`` (input_linear 2I x h, output_linear h x I), bias-free router; a
    ``shared_intermediate_size`` (GraniteMoeShared) adds a shared expert."""
    kw = _llama_like(cfg, source, tied=False)
    shared = _count(cfg, "shared_intermediate_size", source=source)
    kw.update(_experts(cfg, source, "num_local_experts"), moe_intermediate_size=kw["intermediate_size"],
              num_moe_layers=kw["num_hidden_layers"], shared_expert_intermediate_size=shared,
              num_shared_experts=1 if shared else 0)
    return kw


def _read_cohere2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Command R7B / Command A (Cohere2Config): attention and MLP in parallel after one bias-free LayerNorm per
    layer (a weight of h: counted as one RMSNorm-like vector), tied embeddings; every
    ``sliding_window_pattern``-th layer (default 4) global, the others a ``sliding_window`` (default 4,096)."""
    kw = _llama_like(cfg, source, tied=True)
    kw["norms_per_layer"] = 1
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, default_pattern=4,
                                         model_type="cohere2", default_window=4096)
    return kw


def _read_starcoder2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """StarCoder2 (Starcoder2Config): plain MLP (c_fc, c_proj), biases everywhere with ``use_bias`` (default
    true), LayerNorm with bias, tied embeddings by default; ``sliding_window`` on every layer when set."""
    kw = _llama_like(cfg, source, tied=True)
    bias = flag(cfg, "use_bias", True, source=source)
    kw.update(qkv_bias=bias, o_bias=bias, mlp_bias=bias, gated_mlp=False, norm="layernorm")
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="starcoder2")
    return kw


def _read_nemotron(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Nemotron (NemotronConfig): plain MLP (up, down; squared ReLU), LayerNorm1P with weight and bias,
    ``attention_bias`` and ``mlp_bias`` (default false), untied; partial rotary holds no parameters."""
    kw = _llama_like(cfg, source, tied=False)
    kw.update(gated_mlp=False, norm="layernorm")
    return kw


def _read_internlm3(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """InternLM3 (InternLM3Config): Llama with q/k/v biases from ``qkv_bias`` and an o_proj bias from ``bias``
    (both default false)."""
    kw = _llama_like(cfg, source, tied=False)
    kw.update(qkv_bias=flag(cfg, "qkv_bias", False, source=source), o_bias=flag(cfg, "bias", False, source=source))
    return kw


def _read_internlm2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """InternLM2 (InternLM2Config, remote code): fused wqkv and w1/w3 (the same parameters as Llama's q, k, v and
    gate, up); ``bias`` (default true in the class) on wqkv and wo."""
    kw = _llama_like(cfg, source, tied=False)
    bias = flag(cfg, "bias", True, source=source)
    kw.update(qkv_bias=bias, o_bias=bias)
    return kw


def _read_ernie4_5(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """ERNIE 4.5 dense (Ernie4_5Config): Llama with ``use_bias`` (default false) on every projection and tied
    embeddings by default; head_dim (default 128)."""
    kw = _llama_like(cfg, source, tied=True, head_dim=128)
    bias = flag(cfg, "use_bias", False, source=source)
    kw.update(qkv_bias=bias, o_bias=bias, mlp_bias=bias)
    return kw


def _read_mimo(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """MiMo (Xiaomi; remote code on Qwen2Config): Qwen2's shapes; its MTP layers (``num_nextn_predict_layers``)
    are not counted, as DeepSeek-V3's."""
    return _read_qwen2(cfg, source)


def _read_exaone4(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """EXAONE 4.0 (Exaone4Config): norms after attention and after the MLP (two per layer), per-head q/k
    RMSNorms; local/global layers from ``layer_types``, else ``sliding_window_pattern`` ("LLLG" or an integer:
    every n-th layer global)."""
    kw = _llama_like(cfg, source, tied=False)
    kw["qk_norm"] = True
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise ConfigError(f"{source}: field 'sliding_window_pattern'={shown(pattern)} must be letters L and G")
        layers = kw["num_hidden_layers"]
        types = ["sliding_attention" if pattern[i % len(pattern)] == "L" else "full_attention" for i in range(layers)]
        cfg = {**cfg, "layer_types": cfg.get("layer_types") or types}
        cfg.pop("sliding_window_pattern")
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="exaone4")
    return kw


def _read_phimoe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Phi-3.5-MoE (PhimoeConfig): biases on q, k, v, o (``attention_bias``, default false) and on the lm_head
    (``lm_head_bias``), LayerNorm with bias, every layer a MoE of ``num_local_experts`` experts of
    ``intermediate_size``; ``sliding_window`` on every layer when set."""
    kw = _llama_like(cfg, source, tied=False)
    kw.update(norm="layernorm", lm_head_bias=flag(cfg, "lm_head_bias", False, source=source))
    kw.update(_experts(cfg, source, "num_local_experts"), moe_intermediate_size=kw["intermediate_size"],
              num_moe_layers=kw["num_hidden_layers"])
    kw["layer_windows"] = _layer_windows(cfg, kw["num_hidden_layers"], source, model_type="phimoe")
    return kw


def _read_glm4(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """GLM-4-0414 (Glm4Config): q/k/v biases (``attention_bias``, default true; o_proj none), four norms per layer
    (before and after attention and the MLP), head_dim (default 128), untied."""
    kw = _llama_like(cfg, source, tied=False, head_dim=128)
    kw.update(qkv_bias=flag(cfg, "attention_bias", True, source=source), o_bias=False, norms_per_layer=4)
    return kw


def _read_hunyuan_dense(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Hunyuan dense (HunYuanDenseV1Config): Llama with per-head q/k norms (query_layernorm, key_layernorm) and tied
    embeddings by default; cross-layer attention (``use_cla``) is refused by name."""
    if flag(cfg, "use_cla", False, source=source):
        raise UnsupportedModelError("hunyuan_v1_dense", "use_cla (cross-layer attention shares KV across layers; "
                                    "not modelled)")
    kw = _llama_like(cfg, source, tied=True)
    kw["qk_norm"] = True
    return kw


def _read_dbrx(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """DBRX (DbrxConfig): d_model, n_heads, n_layers, vocab_size; attn_config.kv_n_heads; ffn_config with
    moe_num_experts gated experts of ffn_hidden_size, top moe_top_k; fused Wqkv (Llama's q, k, v parameters),
    no biases, bias-free LayerNorms (a weight of d_model each, two per layer), untied."""
    attn, ffn = cfg.get("attn_config") or {}, cfg.get("ffn_config") or {}
    for key, value in (("attn_config", attn), ("ffn_config", ffn)):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: field {key!r}={shown(value)} must be an object")
    # DbrxConfig's defaults (configuration_dbrx.py)
    d = _with_defaults({k: cfg.get(k) for k in ("d_model", "n_heads", "n_layers", "vocab_size", "max_seq_len")},
                       dict(d_model=2048, n_heads=16, n_layers=24, vocab_size=32000, max_seq_len=2048))
    a = _with_defaults(attn, dict(kv_n_heads=1))
    f = _with_defaults(ffn, dict(ffn_hidden_size=3584, moe_num_experts=4, moe_top_k=1))
    for key in d:  # each size named as the config spells it, nested ones with their object
        field(d, key, source=source)
    field(a, "kv_n_heads", source=source + " attn_config")
    for key in ("moe_num_experts", "moe_top_k"):
        field(f, key, source=source + " ffn_config")
    width = field(f, "ffn_hidden_size", source=source + " ffn_config")
    llama = dict(num_hidden_layers=d["n_layers"], hidden_size=d["d_model"], intermediate_size=width,
                 num_attention_heads=d["n_heads"], num_key_value_heads=a["kv_n_heads"], vocab_size=d["vocab_size"],
                 max_position_embeddings=d["max_seq_len"], tie_word_embeddings=cfg.get("tie_word_embeddings", False),
                 num_experts_per_tok=f["moe_top_k"], num_experts=f["moe_num_experts"])
    kw = _llama_like(llama, source, tied=False)
    kw.update(_experts(llama, source, "num_experts"), moe_intermediate_size=width,
              num_moe_layers=kw["num_hidden_layers"])
    return kw


#: transformers' Ernie4_5_MoeConfig defaults for the shape fields (configuration_ernie4_5_moe.py).
_ERNIE4_5_MOE_DEFAULTS = dict(vocab_size=103_424, hidden_size=2560, intermediate_size=12_288, num_hidden_layers=28,
                              num_attention_heads=20, num_key_value_heads=4, max_position_embeddings=131_072,
                              tie_word_embeddings=True, use_bias=False)


def _read_ernie4_5_moe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """ERNIE 4.5 MoE (Ernie4_5_MoeConfig): ERNIE 4.5 dense attention; MoE layers from ``moe_layer_start_index``
    (default 1) to ``moe_layer_end_index`` (default -1, the last), every ``moe_layer_interval``-th, of
    ``moe_num_experts`` (64) experts of ``moe_intermediate_size`` (1,536), top ``moe_k`` (6), plus
    ``moe_num_shared_experts`` (2) shared ones, and an e_score_correction_bias per MoE layer with Baidu's
    ``moe_use_aux_free`` (not a transformers field; default false)."""
    cfg = _with_defaults(cfg, _ERNIE4_5_MOE_DEFAULTS)
    kw = _read_ernie4_5(cfg, source)
    layers = kw["num_hidden_layers"]
    start = _count(cfg, "moe_layer_start_index", source=source, default=1)
    end = cfg.get("moe_layer_end_index", layers - 1)
    end = layers - 1 if end in (None, -1) else end
    if not is_plain_int(end) or not 0 <= end < layers:
        raise ConfigError(f"{source}: field 'moe_layer_end_index'={shown(end)} must be a layer index")
    step = field(cfg, "moe_layer_interval", source=source, required=False, default=1)
    moe = sum(1 for i in range(layers) if start <= i <= end and (i - start) % step == 0)
    experts = field(cfg, "moe_num_experts", source=source, required=False, default=64)
    k = field(cfg, "moe_k", source=source, required=False, default=6)
    if k > experts:
        raise ConfigError(f"{source}: field 'moe_k'={k} exceeds moe_num_experts={experts}")
    width = field(cfg, "moe_intermediate_size", source=source, required=False, default=1536)
    shared = _count(cfg, "moe_num_shared_experts", source=source, default=2)
    kw.update(num_experts=experts, num_experts_per_tok=k, moe_intermediate_size=width, num_moe_layers=moe,
              num_shared_experts=shared, shared_expert_intermediate_size=shared * width,
              router_score_bias=flag(cfg, "moe_use_aux_free", False, source=source))
    return _dense_without_moe_layers(kw)


# --------------------------------------------------------------------------- hybrid (recurrent) models


def _layer_kinds(cfg: dict[str, Any], key: str, layers: int, source: str, names: dict[str, str],
                 model_type: str) -> list[str] | None:
    """Per-layer kinds ("recurrent" or "attention") from the list ``cfg[key]`` of type names (``names`` maps
    each modelled name to its kind); None when the key is absent or null. Another name is refused by name."""
    types = cfg.get(key)
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != layers:
        raise ConfigError(f"{source}: field {key!r} must list one type per layer ({layers})")
    for t in types:
        if not isinstance(t, str) or t not in names:
            raise UnsupportedModelError(model_type, f"layer type {t!r} (modelled: {', '.join(names)})")
    return [names[t] for t in types]


def _recurrent_layers(cfg: dict[str, Any], layers: int, source: str, *, recurrent: str, interval_key: str,
                      model_type: str) -> list[str]:
    """Each layer's kind ("recurrent" or "attention"): ``layer_types`` (``recurrent`` or "full_attention"
    each), else every ``interval_key``-th layer full attention (transformers' default: 4), the others
    recurrent."""
    kinds = _layer_kinds(cfg, "layer_types", layers, source,
                         {recurrent: "recurrent", "full_attention": "attention"}, model_type)
    if kinds is not None:
        return kinds
    interval = field(cfg, interval_key, source=source, required=False, default=4)
    return ["recurrent" if (i + 1) % interval else "attention" for i in range(layers)]


def _kind_string(kinds: list[str]) -> str:
    """:attr:`roofline.hybrid.StateMixer.layer_kinds` of per-layer kinds ("recurrent", "attention", "mlp")."""
    return "".join({"recurrent": "r", "mamba": "r", "attention": "a", "mlp": "m"}[k] for k in kinds)


def _read_qwen3_next(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Qwen3-Next: Gated DeltaNet layers and gated attention (every 4th layer), a MoE with a gated shared expert.

    Defaults as transformers' Qwen3NextConfig (head_dim 256, linear_* 16 / 32 heads of 128,
    conv kernel 4, full_attention_interval 4); every attention layer's q_proj also computes a
    per-head output gate (``Qwen3NextAttention``), and q and k carry a per-head RMSNorm.
    """
    # the attention layers never slide (Qwen3NextAttention); layer_types names the recurrent layers, read below
    attention_cfg = {key: value for key, value in cfg.items() if key != "layer_types"}
    kw = _read_qwen2_moe({**attention_cfg, "use_sliding_window": False}, source)
    kw.update(qkv_bias=False, o_bias=False, qk_norm=True, attention_output_gate=True,
              head_dim=_head_dim(cfg, kw["hidden_size"], kw["num_attention_heads"], source, 256))
    layers = kw["num_hidden_layers"]
    kinds = _recurrent_layers(cfg, layers, source, recurrent="linear_attention",
                              interval_key="full_attention_interval", model_type="qwen3_next")
    recurrent = kinds.count("recurrent")
    if recurrent == layers:
        raise UnsupportedModelError("qwen3_next", "every layer linear_attention (no attention layer holds KV): "
                                    "a pure recurrent model is not modelled")
    if recurrent:
        kw["state_mixer"] = dict(
            kind="gated_deltanet", layers=recurrent,
            heads=field(cfg, "linear_num_value_heads", source=source, required=False, default=32),
            head_dim=field(cfg, "linear_value_head_dim", source=source, required=False, default=128),
            key_heads=field(cfg, "linear_num_key_heads", source=source, required=False, default=16),
            key_dim=field(cfg, "linear_key_head_dim", source=source, required=False, default=128),
            conv_kernel=field(cfg, "linear_conv_kernel_dim", source=source, required=False, default=4),
            layer_kinds=_kind_string(kinds))
    return kw


#: Nemotron-H block kinds: hybrid_override_pattern characters and layers_block_type names (both the
#: current ones and the older mamba / attention), as transformers' NemotronHConfig reads them.
_NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe", "mamba": "mamba",
                    "linear_attention": "mamba", "attention": "attention", "full_attention": "attention",
                    "mlp": "mlp", "moe": "moe"}


def _nemotron_blocks(cfg: dict[str, Any], source: str) -> list[str]:
    """Nemotron-H's blocks, one per layer: ``layers_block_type``, else ``hybrid_override_pattern``, else
    transformers' default (which holds a MoE block, refused below)."""
    types = cfg.get("layers_block_type")
    if types is None and cfg.get("layer_types") is not None:
        types = cfg["layer_types"]  # NemotronHConfig maps layer_types onto layers_block_type
    if types is not None:
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            raise ConfigError(f"{source}: field 'layers_block_type'={shown(types)} must be a list of block types")
        raw, key = types, "layers_block_type"
    else:
        pattern = cfg.get("hybrid_override_pattern")
        if pattern is None:
            raw, key = ["linear_attention", "moe", "full_attention", "mlp"], "layers_block_type (default)"
        elif not isinstance(pattern, str) or not pattern:
            raise ConfigError(f"{source}: field 'hybrid_override_pattern'={shown(pattern)} must be a string of "
                              "M, *, - and E")
        else:
            raw, key = list(pattern), "hybrid_override_pattern"
    unknown = sorted({t for t in raw if t not in _NEMOTRON_BLOCKS})
    if unknown:
        raise ConfigError(f"{source}: field {key.split()[0]!r} holds unknown block types {unknown}")
    if len(raw) > MAX_LAYERS:
        raise ConfigError(f"{source}: field {key.split()[0]!r} is implausibly long (> {MAX_LAYERS:,} layers)")
    return [_NEMOTRON_BLOCKS[t] for t in raw]


def _read_nemotron_h(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Nemotron-H: blocks of one kind each (Mamba2, attention, or a squared-ReLU MLP), one RMSNorm per block.

    Defaults as transformers' NemotronHConfig (hidden 4096, 32 heads, 8 KV heads of 128, MLP 21,504,
    128 Mamba heads of 64 with a 128-wide state in 8 groups, conv kernel 4 with a bias, vocabulary
    131,072, untied); the layer count is the blocks' (``num_hidden_layers`` is deprecated there).
    Mixture-of-experts blocks ("E", Nemotron 3) are refused by name.
    """
    blocks = _nemotron_blocks(cfg, source)
    if "moe" in blocks:
        raise UnsupportedModelError("nemotron_h", "mixture-of-experts blocks ('E' / moe, Nemotron 3) are not read "
                                    "yet (only Mamba2, attention and MLP blocks)")
    hidden = field(cfg, "hidden_size", source=source, required=False, default=4096)
    heads = field(cfg, "num_attention_heads", source=source, required=False, default=32)
    mamba = blocks.count("mamba")
    if "attention" not in blocks:
        raise UnsupportedModelError("nemotron_h", "no attention block (a pure state-space stack is not modelled)")
    kw = dict(
        num_hidden_layers=len(blocks), hidden_size=hidden,
        intermediate_size=field(cfg, "intermediate_size", source=source, required=False, default=21504),
        num_attention_heads=heads,
        num_key_value_heads=field(cfg, "num_key_value_heads", source=source, required=False, default=8),
        head_dim=field(cfg, _first(cfg, "head_dim", "attention_head_dim", source=source), source=source,
                       required=False, default=128),
        vocab_size=field(cfg, "vocab_size", source=source, required=False, default=131072),
        max_position_embeddings=field(cfg, "max_position_embeddings", source=source, required=False),
        tie_word_embeddings=flag(cfg, "tie_word_embeddings", False, source=source),
        qkv_bias=flag(cfg, "attention_bias", False, source=source),
        o_bias=flag(cfg, "attention_bias", False, source=source),
        mlp_bias=flag(cfg, "mlp_bias", False, source=source), gated_mlp=False, norms_per_layer=1,
        mlp_only_layers=blocks.count("mlp"), mixer_only=True,
    )
    if mamba:
        kw["state_mixer"] = dict(
            kind="mamba2", layers=mamba,
            heads=field(cfg, "mamba_num_heads", source=source, required=False, default=128),
            head_dim=field(cfg, "mamba_head_dim", source=source, required=False, default=64),
            key_heads=field(cfg, _first(cfg, "n_groups", "mamba_n_groups", source=source), source=source,
                            required=False, default=8),
            key_dim=field(cfg, "ssm_state_size", source=source, required=False, default=128),
            conv_kernel=field(cfg, _first(cfg, "conv_kernel", "mamba_d_conv", source=source), source=source,
                              required=False, default=4),
            conv_bias=flag(cfg, _first(cfg, "use_conv_bias", "mamba_conv_bias", source=source), True, source=source),
            proj_bias=flag(cfg, "mamba_proj_bias", flag(cfg, "use_bias", False, source=source), source=source),
            layer_kinds=_kind_string(blocks))
    return kw


def _need_attention(model_type: str, recurrent: int, layers: int) -> None:
    if recurrent >= layers:
        raise UnsupportedModelError(model_type, "no attention layer (a pure recurrent stack holds no KV cache and "
                                    "is not modelled)")


def _mamba2_mixer(cfg: dict[str, Any], source: str, *, layers: int, hidden: int, heads: int, state: int,
                  inner: int | None = None, **extra: Any) -> dict[str, Any]:
    """A Mamba2 mixer from the ``mamba_*`` fields Granite 4.0-H and Falcon-H1 share: ``mamba_n_heads`` heads
    of ``mamba_d_head`` ("auto": inner / heads), ``mamba_n_groups`` groups (default 1) of ``mamba_d_state``,
    kernel ``mamba_d_conv`` (default 4), inner ``mamba_expand`` x hidden (default 2) unless given."""
    if inner is None:
        inner = field(cfg, "mamba_expand", source=source, required=False, default=2) * hidden
    n_heads = field(cfg, "mamba_n_heads", source=source, required=False, default=heads)
    d_head = cfg.get("mamba_d_head", "auto")
    d_head = inner // n_heads if d_head in (None, "auto") else field(cfg, "mamba_d_head", source=source)
    if n_heads * d_head != inner:
        raise ConfigError(f"{source}: fields 'mamba_n_heads'={n_heads} x 'mamba_d_head'={d_head} must equal the "
                          f"Mamba intermediate size {inner}")
    return dict(kind="mamba2", layers=layers, heads=n_heads, head_dim=d_head,
                key_heads=field(cfg, "mamba_n_groups", source=source, required=False, default=1),
                key_dim=field(cfg, "mamba_d_state", source=source, required=False, default=state),
                conv_kernel=field(cfg, "mamba_d_conv", source=source, required=False, default=4),
                conv_bias=flag(cfg, "mamba_conv_bias", True, source=source),
                proj_bias=flag(cfg, "mamba_proj_bias", False, source=source), **extra)


#: transformers' GraniteMoeHybridConfig defaults (configuration_granitemoehybrid.py).
_GRANITE_HYBRID_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                num_attention_heads=32, max_position_embeddings=2048, num_local_experts=8,
                                num_experts_per_tok=2, shared_intermediate_size=1024)


def _read_granitemoehybrid(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Granite 4.0-H (GraniteMoeHybridConfig): Mamba2 or attention layers by ``layer_types`` ("mamba",
    "attention"; default every layer Mamba2, refused: no attention), each layer with a shared MLP of
    ``shared_intermediate_size`` and, when ``num_local_experts`` > 0, a MoE of that many gated experts of
    ``intermediate_size`` (bias-free router); two RMSNorms per layer.

    Defaults as the class (vocabulary 32,000, hidden 4,096, 32 layers and heads, 8 experts top 2, shared
    1,024; Mamba2: 128 heads of "auto" width, 1 group, state 256, kernel 4 with a conv bias, expand 2).
    """
    cfg = _with_defaults(cfg, _GRANITE_HYBRID_DEFAULTS)
    kw = _llama_like(cfg, source, tied=False)
    layers, hidden = kw["num_hidden_layers"], kw["hidden_size"]
    kinds = _layer_kinds(cfg, "layer_types", layers, source, {"mamba": "recurrent", "attention": "attention"},
                         "granitemoehybrid") or ["recurrent"] * layers
    recurrent = kinds.count("recurrent")
    _need_attention("granitemoehybrid", recurrent, layers)
    shared = field(cfg, "shared_intermediate_size", source=source)
    experts = _count(cfg, "num_local_experts", source=source, default=8)
    if experts:
        kw.update(_experts(cfg, source, "num_local_experts"), moe_intermediate_size=kw["intermediate_size"],
                  num_moe_layers=layers, shared_expert_intermediate_size=shared, num_shared_experts=1)
    else:  # no experts: the shared MLP is each layer's dense MLP
        kw["intermediate_size"] = shared
    if recurrent:
        kw["state_mixer"] = _mamba2_mixer(cfg, source, layers=recurrent, hidden=hidden, heads=128, state=256,
                                          layer_kinds=_kind_string(kinds))
    return kw


#: transformers' FalconH1Config defaults (configuration_falcon_h1.py).
_FALCON_H1_DEFAULTS = dict(vocab_size=128000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192)


def _read_falcon_h1(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Falcon-H1 (FalconH1Config): every layer runs attention and a Mamba2 mixer in parallel on the same
    input, then a gated MLP; two RMSNorms per layer. The attention layers keep KV and the Mamba2 layers a
    state, in every layer (:attr:`roofline.hybrid.StateMixer.parallel`).

    Defaults as the class (vocabulary 128,000, hidden 4,096, MLP 14,336, 32 layers, 32 heads, 8 KV heads;
    Mamba2 ``mamba_d_ssm`` 1,024 wide, an explicit null meaning ``mamba_expand`` x hidden as there, 128
    heads of "auto", 1 group, state 256, kernel 4 with a conv bias, no gated RMSNorm unless
    ``mamba_rms_norm``, ``projectors_bias`` on out_proj). The multipliers (µP) hold no parameters.
    ``attn_layer_indices`` other than null and ``mamba_use_mlp`` false are refused by name.
    """
    if cfg.get("attn_layer_indices") is not None:
        raise UnsupportedModelError("falcon_h1", "attn_layer_indices (attention in some layers only) is not read")
    if not flag(cfg, "mamba_use_mlp", True, source=source):
        raise UnsupportedModelError("falcon_h1", "mamba_use_mlp false (layers without an MLP) is not read")
    ssm = cfg.get("mamba_d_ssm", 1024)  # an explicit null: mamba_expand x hidden, as FalconH1Config reads it
    cfg = _with_defaults(cfg, _FALCON_H1_DEFAULTS)
    kw = _llama_like(cfg, source, tied=False)
    inner = None if ssm is None else field({"mamba_d_ssm": ssm}, "mamba_d_ssm", source=source)
    kw["state_mixer"] = _mamba2_mixer(cfg, source, layers=kw["num_hidden_layers"], hidden=kw["hidden_size"],
                                      heads=128, state=256, inner=inner, parallel=True,
                                      norm=flag(cfg, "mamba_rms_norm", False, source=source),
                                      out_bias=flag(cfg, "projectors_bias", False, source=source),
                                      layer_kinds="r" * kw["num_hidden_layers"])
    return kw


#: transformers' JambaConfig defaults (configuration_jamba.py).
_JAMBA_DEFAULTS = dict(vocab_size=65536, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=262144)


def _period(cfg: dict[str, Any], what: str, period: int, offset: int, source: str) -> tuple[int, int]:
    p = field(cfg, f"{what}_layer_period", source=source, required=False, default=period)
    o = _count(cfg, f"{what}_layer_offset", source=source, default=offset)
    if o >= p:
        raise ConfigError(f"{source}: field '{what}_layer_offset'={o} must be below {what}_layer_period={p}")
    return p, o


def _read_jamba(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """Jamba (JambaConfig): layer i is attention when i % ``attn_layer_period`` == ``attn_layer_offset``
    (defaults 8 and 4), else Mamba1; its MLP is a MoE of ``num_experts`` (16) experts of
    ``intermediate_size``, top ``num_experts_per_tok`` (2), when i % ``expert_layer_period`` ==
    ``expert_layer_offset`` (2 and 1), else a dense MLP of that width; two RMSNorms per layer.

    Mamba1 as ``JambaMambaMixer``: intermediate ``mamba_expand`` (2) x hidden, state ``mamba_d_state``
    (16), kernel ``mamba_d_conv`` (4) with a bias (``mamba_conv_bias``), dt rank ``mamba_dt_rank``
    ("auto": ceil(hidden / 16)), the dt, B and C RMSNorms. Other defaults as the class (vocabulary 65,536,
    hidden 4,096, MLP 14,336, 32 layers, 32 heads, 8 KV heads, untied). ``sliding_window`` is refused.
    """
    if cfg.get("sliding_window") is not None:
        raise UnsupportedModelError("jamba", "sliding_window beside Mamba layers is not modelled")
    cfg = _with_defaults(cfg, _JAMBA_DEFAULTS)
    kw = _llama_like(cfg, source, tied=False)
    layers, hidden = kw["num_hidden_layers"], kw["hidden_size"]
    ap, ao = _period(cfg, "attn", 8, 4, source)
    ep, eo = _period(cfg, "expert", 2, 1, source)
    recurrent = sum(1 for i in range(layers) if i % ap != ao)
    _need_attention("jamba", recurrent, layers)
    experts = field(cfg, "num_experts", source=source, required=False, default=16)
    moe = sum(1 for i in range(layers) if i % ep == eo)
    if experts > 1 and moe:
        cfg_k = {**cfg, "num_experts": experts}
        cfg_k.setdefault("num_experts_per_tok", 2)
        kw.update(_experts(cfg_k, source, "num_experts"), moe_intermediate_size=kw["intermediate_size"],
                  num_moe_layers=moe)
    rank = cfg.get("mamba_dt_rank", "auto")
    rank = math.ceil(hidden / 16) if rank == "auto" else field(cfg, "mamba_dt_rank", source=source)
    if recurrent:
        kw["state_mixer"] = dict(
            kind="mamba1", layers=recurrent,
            heads=field(cfg, "mamba_expand", source=source, required=False, default=2) * hidden, head_dim=1,
            key_heads=rank, key_dim=field(cfg, "mamba_d_state", source=source, required=False, default=16),
            conv_kernel=field(cfg, "mamba_d_conv", source=source, required=False, default=4),
            conv_bias=flag(cfg, "mamba_conv_bias", True, source=source),
            proj_bias=flag(cfg, "mamba_proj_bias", False, source=source),
            layer_kinds="".join("a" if i % ap == ao else "r" for i in range(layers)))
    return kw


#: transformers' Lfm2Config defaults (configuration_lfm2.py).
_LFM2_DEFAULTS = dict(vocab_size=65536, hidden_size=2560, intermediate_size=12288, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=128_000,
                      tie_word_embeddings=True)


def _lfm2_mlp_width(cfg: dict[str, Any], source: str) -> int:
    """Lfm2MLP's width: ``block_ff_dim`` (else ``intermediate_size``, else 12,288), x 2/3 when
    ``block_auto_adjust_ff_dim`` (default true), x ``block_ffn_dim_multiplier`` (default 1.0; null: none),
    rounded up to a multiple of ``block_multiple_of`` (default 256), each step truncated to an integer as
    there."""
    width = field(cfg, _first(cfg, "block_ff_dim", "intermediate_size", source=source), source=source,
                  required=False, default=12288)
    if flag(cfg, "block_auto_adjust_ff_dim", True, source=source):
        width = int(2 * width / 3)
        mult = cfg.get("block_ffn_dim_multiplier", 1.0)
        if mult is not None:
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < 1e6:
                raise ConfigError(f"{source}: field 'block_ffn_dim_multiplier'={shown(mult)} must be a positive "
                                  "number")
            width = int(mult * width)
        multiple = field(cfg, "block_multiple_of", source=source, required=False, default=256)
        width = multiple * ((width + multiple - 1) // multiple)
    if width <= 0:
        raise ConfigError(f"{source}: field 'block_ff_dim' leaves an MLP of width {width}")
    return width


def _read_lfm2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """LFM2 (Lfm2Config): short-convolution layers ("conv") and GQA attention layers with per-head q/k
    RMSNorms ("full_attention"), by ``layer_types``, else ``full_attn_idxs`` (default: every layer
    attention); every layer a gated MLP (:func:`_lfm2_mlp_width`) and two RMSNorms; tied embeddings.

    The short convolution (``Lfm2ShortConv``): in_proj h x 3h, a depthwise conv of ``conv_L_cache``
    (3) over h channels, out_proj h x h, biases with ``conv_bias`` (false); its state is the last
    ``conv_L_cache`` - 1 inputs of the h channels. Other defaults as the class (vocabulary 65,536, hidden
    2,560, 32 layers, 32 heads, 8 KV heads, tied; ``tie_embedding``, the original key, wins as there).
    """
    if cfg.get("tie_embedding") is not None:  # the original checkpoints' key, read by Lfm2Config first
        cfg = {**cfg, "tie_word_embeddings": cfg["tie_embedding"]}
    width = _lfm2_mlp_width(cfg, source)  # before the defaults: block_ff_dim, else intermediate_size, else 12,288
    cfg = _with_defaults(cfg, _LFM2_DEFAULTS)
    base = {**cfg, "intermediate_size": width}
    base.pop("block_ff_dim", None)
    kw = _llama_like(base, source, tied=True)
    kw.update(qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=True)
    layers, hidden = kw["num_hidden_layers"], kw["hidden_size"]
    kinds = _layer_kinds(cfg, "layer_types", layers, source, {"conv": "recurrent", "full_attention": "attention"},
                         "lfm2")
    if kinds is None:
        idxs = list(range(layers)) if cfg.get("full_attn_idxs") is None else _layer_list(cfg, "full_attn_idxs",
                                                                                         layers, source)
        kinds = ["attention" if i in idxs else "recurrent" for i in range(layers)]
    recurrent = kinds.count("recurrent")
    _need_attention("lfm2", recurrent, layers)
    if recurrent:
        kw["state_mixer"] = dict(kind="short_conv", layers=recurrent, heads=hidden, head_dim=1, key_heads=1,
                                 key_dim=1, conv_kernel=field(cfg, "conv_L_cache", source=source, required=False,
                                                              default=3),
                                 conv_bias=flag(cfg, "conv_bias", False, source=source),
                                 layer_kinds=_kind_string(kinds))
    return kw


#: transformers' MiniMaxConfig defaults (configuration_minimax.py).
_MINIMAX_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096 * 32,
                         num_local_experts=8, num_experts_per_tok=2)


def _read_minimax(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """MiniMax-Text-01 (MiniMaxConfig): lightning (linear) attention layers and softmax GQA attention layers
    by ``layer_types`` ("linear_attention", "full_attention"), else the original checkpoint's
    ``attn_type_list`` (1: softmax, 0: lightning), else the class's default (every even layer softmax);
    every layer a Mixtral MoE of ``num_local_experts`` experts of ``intermediate_size``; two RMSNorms
    per layer.

    Lightning attention (``MiniMaxLightningAttention``): qkv_proj h x 3 H d, output_gate h x H d, a
    RMSNorm of H d, out_proj H d x h, on all ``num_attention_heads`` heads; its state is H x d x d per
    sequence (vLLM's ``linear_attention_state_shape``), no conv state. Other defaults as the class
    (vocabulary 32,000, hidden 4,096, MLP 14,336, 32 layers, 32 heads, 8 KV heads, 8 experts top 2).
    ``sliding_window`` and a shared expert (MiniMax-M1's remote ``shared_intermediate_size``, 0 in its
    checkpoints) are refused. ``minimax_m1`` (MiniMax-M1, the same architecture under its remote-code
    class MiniMaxM1Config, read with ``attn_type_list``) takes the same reader and defaults.
    """
    owner = str(cfg.get("model_type") or "minimax").strip().lower()
    if cfg.get("sliding_window") is not None:
        raise UnsupportedModelError(owner, "sliding_window beside lightning attention is not modelled")
    if _count(cfg, "shared_intermediate_size", source=source):
        raise UnsupportedModelError(owner, "a shared expert (shared_intermediate_size > 0) is not read")
    cfg = _with_defaults(cfg, _MINIMAX_DEFAULTS)
    kw = _llama_like(cfg, source, tied=False)
    layers, heads, d = kw["num_hidden_layers"], kw["num_attention_heads"], kw["head_dim"]
    names = {"linear_attention": "recurrent", "full_attention": "attention"}
    kinds = _layer_kinds(cfg, "layer_types", layers, source, names, owner)
    if kinds is None and cfg.get("attn_type_list") is not None:
        kinds = _layer_kinds({"attn_type_list": [str(t) for t in cfg["attn_type_list"]]}
                             if isinstance(cfg["attn_type_list"], list) else cfg, "attn_type_list", layers, source,
                             {"0": "recurrent", "1": "attention"}, owner)
    if kinds is None:
        kinds = ["attention" if (i + 1) % 2 else "recurrent" for i in range(layers)]
    recurrent = kinds.count("recurrent")
    _need_attention(owner, recurrent, layers)
    kw.update(_experts(cfg, source, "num_local_experts"), moe_intermediate_size=kw["intermediate_size"],
              num_moe_layers=layers)
    if recurrent:
        kw["state_mixer"] = dict(kind="lightning", layers=recurrent, heads=heads, head_dim=d, key_heads=heads,
                                 key_dim=d, conv_kernel=1, layer_kinds=_kind_string(kinds))
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
    mtp_field : str or None
        The config field that counts the model's multi-token-prediction modules (DeepSeek-V3's
        ``num_nextn_predict_layers``), read into ``ModelConfig.num_nextn_predict_layers`` (absent: 0);
        None: the family has none (docs/conventions.md, "Speculative decoding": MTP heads).
    """

    model_type: str
    description: str
    reader: Callable[[dict[str, Any], str], dict[str, Any]]
    wrapper: bool = False
    mtp_field: str | None = None


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


#: the field counting DeepSeek-V3's (and GLM-4.5's, MiMo's) multi-token-prediction modules
_NEXTN = "num_nextn_predict_layers"

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
           _deepseek_v3, mtp_field=_NEXTN),
    Family("deepseek_v32", "DeepSeek-V3.2: DeepSeek-V3's MLA + MoE with sparse attention (a lightning indexer "
           "picks the index_topk cached tokens each query reads)", _read_deepseek_v32, mtp_field=_NEXTN),
    Family("gpt_oss", "MoE with expert and router biases, attention sinks, alternating 128-token windows",
           _read_gpt_oss),
    Family("qwen3_next", "hybrid: Gated DeltaNet layers (a fixed state per sequence) + gated attention every 4th "
           "layer; MoE with a gated shared expert", _read_qwen3_next),
    Family("nemotron_h", "hybrid: Mamba2 blocks (a fixed state per sequence), attention blocks and squared-ReLU "
           "MLP blocks (hybrid_override_pattern)", _read_nemotron_h),
    Family("granitemoehybrid", "hybrid: Granite 4.0-H, Mamba2 or attention layers by layer_types, each with a MoE "
           "and a shared MLP (dense with num_local_experts 0)", _read_granitemoehybrid),
    Family("falcon_h1", "hybrid: Falcon-H1, attention and Mamba2 in parallel in every layer, gated MLP",
           _read_falcon_h1),
    Family("jamba", "hybrid: Jamba, attention every attn_layer_period-th layer, Mamba1 elsewhere, MoE every "
           "expert_layer_period-th", _read_jamba),
    Family("lfm2", "hybrid: LFM2, short-convolution layers and GQA attention by layer_types / full_attn_idxs",
           _read_lfm2),
    Family("minimax", "hybrid: MiniMax-Text-01, lightning attention layers (an H x d x d state) and softmax "
           "attention, MoE on every layer", _read_minimax),
    Family("minimax_m1", "hybrid: MiniMax-M1, MiniMax-Text-01's architecture (attn_type_list)", _read_minimax),
    Family("llava", "multimodal wrapper: text_config (llama by default) + CLIP vision tower and projector",
           _read_llava, wrapper=True),
    # ---- this year's ordinary attention families (issue 23), kept together
    Family("llama4_text", "MoE with a shared expert, interleaved dense layers (intermediate_size_mlp), chunked "
           "local attention priced as full (vLLM's default)", _read_llama4_text),
    Family("llama4", "multimodal wrapper: llama4_text + Llama 4 vision encoder, pixel-shuffle adapter, projector",
           _read_llama4, wrapper=True),
    Family("glm4_moe", "GLM-4.5/4.6/4.7: q/k/v biases, optional q/k norms, DeepSeek-V3 MoE with shared experts from "
           "first_k_dense_replace; MTP layer not counted", _read_glm4_moe,
           mtp_field=_NEXTN),
    Family("kimi_k2", "Kimi K2: the DeepSeek-V3 architecture (MLA + MoE) under its own model_type", _deepseek_v3),
    Family("minimax_m2", "MiniMax-M2: full attention with whole-projection q/k norms, 256-expert MoE on every layer",
           _read_minimax_m2),
    Family("smollm3", "SmolLM3: Llama with NoPE layers, tied embeddings by default", _read_smollm3),
    Family("olmo2", "OLMo 2: post-attention and post-MLP norms, whole-projection q/k norms", _read_olmo2),
    Family("seed_oss", "Seed-OSS: Llama with q/k/v biases (attention_out_bias for o_proj), head_dim 128",
           _read_seed_oss),
    Family("olmoe", "OLMoE: whole-projection q/k norms, 64-expert MoE on every layer", _read_olmoe),
    Family("granite", "Granite: Llama shapes (multipliers hold no parameters)", _read_granite),
    Family("granitemoe", "Granite MoE: Llama attention, MoE of gated experts on every layer", _read_granitemoe),
    Family("cohere2", "Command R7B / A: one bias-free LayerNorm per layer, tied, every 4th layer global",
           _read_cohere2),
    Family("starcoder2", "StarCoder2: plain MLP, biases, LayerNorm, tied", _read_starcoder2),
    Family("nemotron", "Nemotron: plain MLP (squared ReLU), LayerNorm1P with bias, untied", _read_nemotron),
    Family("internlm3", "InternLM3: Llama with qkv_bias and bias (o_proj) switches", _read_internlm3),
    Family("internlm2", "InternLM2: fused wqkv and w1/w3 (Llama's parameters), bias on wqkv and wo",
           _read_internlm2),
    Family("ernie4_5", "ERNIE 4.5 dense: Llama with use_bias, tied, head_dim 128", _read_ernie4_5),
    Family("mimo", "MiMo: Qwen2's shapes; MTP layers not counted", _read_mimo, mtp_field=_NEXTN),
    Family("exaone4", "EXAONE 4.0: post-attention and post-MLP norms, q/k norms, LLLG local/global layers",
           _read_exaone4),
    Family("phimoe", "Phi-3.5-MoE: biases on attention and lm_head, LayerNorm, 16-expert MoE", _read_phimoe),
    Family("glm4", "GLM-4-0414: q/k/v biases, four norms per layer, head_dim 128", _read_glm4),
    Family("glm4_moe_lite", "GLM-4.7-Flash: DeepSeek-V3's MLA and MoE under its own model_type", _deepseek_v3),
    Family("hunyuan_v1_dense", "Hunyuan dense: Llama with per-head q/k norms, tied", _read_hunyuan_dense),
    Family("dbrx", "DBRX: nested attn_config/ffn_config, fused Wqkv, 16-expert MoE, bias-free LayerNorms",
           _read_dbrx),
    Family("ernie4_5_moe", "ERNIE 4.5 MoE: shared experts, MoE from moe_layer_start_index, aux-free bias",
           _read_ernie4_5_moe),
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
    **dict.fromkeys(("mamba", "mamba2", "falcon_mamba", "zamba", "zamba2", "rwkv", "rwkv5", "rwkv6",
                     "recurrent_gemma", "bamba", "plamo2"), _SSM),
    **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", "qwen2_5_omni", "mistral3", "pixtral", "llava_next", "idefics3",
                     "paligemma", "internvl"), _TOWER),
    **dict.fromkeys(("mllama", "idefics", "flamingo"), _XATTN),
    # Qwen3-VL's vision tower (deepstack mergers) is not counted: refused as the other towers are
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_moe"), _TOWER),
    "hunyuan_v1_moe": "Hunyuan MoE: per-layer lists of expert counts, widths and top-k (num_experts, moe_topk, "
                      "num_shared_expert) are not read",
    "hunyuan": "no transformers config class of this name: Hunyuan checkpoints are hunyuan_v1_dense (modelled) or "
               "hunyuan_v1_moe",
}


#: A family's default SSM state dtype where its transformers config has one (NemotronHConfig: float32).
_STATE_DTYPE_DEFAULTS = {"nemotron_h": "float32"}


def supported_model_types() -> list[str]:
    """The ``model_type`` values the package models, sorted."""
    return sorted(FAMILIES)


def _architectures(cfg: dict[str, Any]) -> str:
    """`` (architectures X, Y)`` when the config lists its classes as strings, else ``""`` (for a message)."""
    arch = cfg.get("architectures")
    if isinstance(arch, list) and arch and all(isinstance(a, str) for a in arch):
        return f" (architectures {', '.join(arch)})"
    return ""


def identify(cfg: dict[str, Any], *, source: str) -> str:
    """The family of a parsed ``config.json``: its ``model_type``, read before any other field.

    A config is named before it is read (docs/conventions.md, "Architectures", reading a
    config): a type refused by name (:data:`REFUSED`) or unknown is refused here, whatever the
    rest of the file holds, so the refusal always says which model it is; a missing
    ``model_type`` is refused naming the config's ``architectures`` where it lists them.

    Returns
    -------
    str
        The ``model_type``, stripped and lower-cased, a key of :data:`FAMILIES`.

    Raises
    ------
    UnsupportedModelError
        ``model_type`` missing, refused by name, or unknown.
    ConfigError
        ``model_type`` present but not a non-empty string (named with its value).
    """
    raw = cfg.get("model_type")
    if raw is not None and (not isinstance(raw, str) or not raw.strip()):
        raise ConfigError(f"{source}: field 'model_type'={shown(raw)} must be a non-empty string")
    if raw is None:
        raise UnsupportedModelError(
            "", f"{source}: field 'model_type' missing{_architectures(cfg)}: the family cannot be known "
            "and is not guessed "
            f"(supported: {', '.join(supported_model_types())})")
    model_type = raw.strip().lower()
    if model_type in REFUSED:
        raise UnsupportedModelError(model_type, REFUSED[model_type])
    if model_type not in FAMILIES:
        raise UnsupportedModelError(model_type, f"unknown model_type{_architectures(cfg)} "
                                    f"(supported: {', '.join(supported_model_types())})")
    return model_type


def read_config(cfg: dict[str, Any], *, source: str) -> dict[str, Any]:
    """ModelConfig keyword arguments for a parsed ``config.json`` (its family's reader).

    The family comes first (:func:`identify`), then the family's reader reads the fields it
    uses; a field it does not use is never looked at, so a non-finite number there is
    tolerated, while one in a used field is refused by name.

    Raises
    ------
    UnsupportedModelError
        A model_type refused by name or unknown, or a feature of a known family not modelled.
    ConfigError
        A required field missing or malformed (the message names the field and the value).
    """
    model_type = identify(cfg, source=source)
    kw = FAMILIES[model_type].reader(cfg, source)
    kw.setdefault("model_type", model_type)
    mtp = FAMILIES[model_type].mtp_field
    if mtp is not None and cfg.get(mtp) is not None:  # absent or null: no MTP module
        kw["num_nextn_predict_layers"] = _count(cfg, mtp, source=source)
    text = cfg.get("text_config") if FAMILIES[model_type].wrapper else None
    quant = cfg.get("quantization_config")
    if quant is None and isinstance(text, dict) and text.get("quantization_config") is not None:
        quant = text["quantization_config"]  # a wrapper's language model may carry it: never dropped
    kw.update(read_quantization(quant, source=source, model_type=model_type, cfg_moe=bool(kw.get("num_experts"))))
    # torch_dtype, else dtype (newer transformers), else the text_config's: a null is absent, not bfloat16
    dtype = (cfg.get("torch_dtype") or cfg.get("dtype") or (text or {}).get("torch_dtype")
             or (text or {}).get("dtype") or "bfloat16")
    kw["torch_dtype"] = dtype
    if kw.get("state_mixer") is not None:
        # vLLM keeps recurrent states in mamba_ssm_cache_dtype, "auto" by default: the model's dtype
        # (vllm/config/cache.py, CacheConfig; MambaStateDtypeCalculator), unless the model's config names
        # one, as its verifiers read it; transformers' NemotronHConfig defaults it to float32
        state = cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype") or _STATE_DTYPE_DEFAULTS.get(model_type)
        if state is not None and (not isinstance(state, str) or not state.strip()):
            raise ConfigError(f"{source}: field 'mamba_ssm_cache_dtype'={shown(state)} must be a dtype name")
        kw["state_dtype"] = state or dtype
        kw["conv_state_dtype"] = dtype  # vLLM's mamba_cache_dtype "auto"
    return kw


# --------------------------------------------------------------------------- quantization

_QUANT_METHODS = ("gptq", "awq", "fp8", "compressed-tensors", "mxfp4", "modelopt")


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


def _is_norm(entry: str) -> bool:
    """Whether a ``modules_to_not_convert`` entry names a norm (its last dotted part ends in "norm",
    or is "norm_f"/"ln_f"-like): ``model.layers.0.input_layernorm``, ``self_attn.q_norm``, ``model.norm``."""
    last = entry.rstrip("$").rstrip(".*").split(".")[-1].lower()
    return last.endswith(("norm", "layernorm")) or last in ("norm_f", "ln_f", "final_layernorm")


def _classes(q: dict[str, Any], model_type: str, default: tuple[str, ...], *, moe: bool) -> tuple[str, ...]:
    """Tensor classes a quantized checkpoint quantizes (lm_head only when the config says so).

    ``modules_to_not_convert`` / ``ignore`` entries are mapped onto tensor classes: the
    lm_head and embeddings (never quantized here unless ``lm_head`` is true), norms
    (``input_layernorm``, ``post_attention_layernorm``, ``q_norm``, ``model.norm``...: the
    "norms" class, never quantized; Qwen3's FP8 checkpoints list every layer's), the router
    (``mlp.gate``, ``router``), other towers (``vision``, ``visual``, ``multi_modal``), and
    attention (``self_attn``) when the model is a MoE whose only other quantized class is
    the experts (gpt-oss). Anything else is refused by name rather than guessed.
    """
    classes = list(default)
    skipped: list[tuple[str, Any]] = []
    # transformers writes modules_to_not_convert, compressed-tensors ignore, vLLM's fp8 ignored_layers: all read
    for key in ("modules_to_not_convert", "ignore", "ignored_layers", "exclude_modules"):
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
        if _is_norm(entry) or entry.rstrip("$").split(".")[-1] == "e_score_correction_bias":
            continue  # a norm or a bias vector is of the "norms" class, which no method here quantizes
        if "router" in entry or entry.rstrip("$").endswith(("mlp.gate", ".gate")) or entry == "gate":
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
    w4a16 groups), mxfp4 (gpt-oss experts: 4-bit weights with an E8M0 scale per 32) and modelopt
    (``quant_algo`` NVFP4: 4-bit weights and activations, an FP8 E4M3 scale per 16 inputs and an
    FP32 scale per tensor, at the FP4 peak; or FP8 per tensor).
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
    if method == "modelopt":
        # NVIDIA ModelOpt checkpoints: quant_algo NVFP4 (4-bit weights and activations, an E4M3 scale per
        # group_size = 16 inputs and an FP32 scale per tensor) or FP8 (per-tensor FP8 weights and activations)
        algo = q.get("quant_algo")
        if algo == "NVFP4":
            group = _group_size(q.get("group_size", 16), "quantization_config.group_size", source)
            return dict(quantization=Quantization("modelopt", 4, "nvfp4", group,
                                                  classes=_classes(q, model_type, linear, moe=moe)),
                        activation_dtype="fp4")
        if algo == "FP8":
            return dict(quantization=Quantization("modelopt", 8, "tensor", classes=_classes(q, model_type, linear,
                                                                                             moe=moe)),
                        activation_dtype="fp8")
        raise UnsupportedModelError(model_type, f"quantization_config.quant_algo {shown(algo)} of modelopt "
                                    "(modelled: NVFP4, FP8)")
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
