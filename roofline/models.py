"""Model configurations: built from a Hugging Face ``config.json`` or a shipped preset.

A :class:`ModelConfig` describes a decoder-only transformer closely enough to count
its parameters exactly (total, and active per token for a mixture of experts), its weight
bytes by tensor class, its matmul FLOPs per token and its KV cache (per token at full
attention, and per sequence at a context with sliding windows or latent attention);
conventions: docs/conventions.md, "The model" and "Architectures beyond the dense Llama
shape". Families are read by ``model_type`` (:mod:`roofline.families`).

Presets are the ``config.json`` files under ``roofline/data/models/`` (one per model
of the Sources in roofline.hardware and the model presets, plus the small models of the cases), each with the
published parameter total where one exists; a test checks the computed count equals it.
"""

from __future__ import annotations

import math
import os
import re
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from ._checks import name_key
from ._checks import positive_int_field as _pos_int
from ._io import MAX_JSON_DEPTH, MAX_NUMBER_CHARS, parse_json, read_text_file
from .errors import ConfigError, FileReadError, InvalidValueError, UnknownPresetError, shown
from .hybrid import StateMixer
from .quantization import Quantization, _to_quantization, quantized_matrix_bytes

__all__ = [
    "ModelConfig",
    "ModelShare",
    "Quantization",
    "TensorGroup",
    "TENSOR_CLASSES",
    "DTYPE_BYTES",
    "DTYPE_ALIASES",
    "canonical_dtype",
    "dtype_bytes",
    "model_names",
    "get_model",
    "load_model",
    "hf_ids",
    "preset_for_hf_id",
]

#: Bytes per element of each supported dtype (int4 is half a byte, exactly).
DTYPE_BYTES: dict[str, int | Fraction] = {
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8": 1,
    "float8": 1,
    "float8_e4m3fn": 1,
    "fp8_e4m3": 1,  # vLLM's --kv-cache-dtype names
    "fp8_e5m2": 1,
    "int8": 1,
    "int4": Fraction(1, 2),
}

#: Other names of one format in :data:`DTYPE_BYTES` -> the name :func:`canonical_dtype` gives (vLLM's ``fp8`` is
#: e4m3, as ``fp8_e4m3``; ``fp8_e5m2`` is another format of the same size and stays apart).
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "float8": "fp8", "float8_e4m3fn": "fp8",
                 "fp8_e4m3": "fp8"}


def canonical_dtype(dtype: str) -> str:
    """One name per format of :data:`DTYPE_BYTES` (``"BF16"`` -> ``"bfloat16"``, ``"fp8_e4m3"`` -> ``"fp8"``): two
    names of one format describe one deployment. Raises InvalidValueError (field ``dtype``) for an unknown one."""
    dtype_bytes(dtype)
    key = dtype.strip().lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(key, key)


#: dtypes of :data:`DTYPE_BYTES` refused as a config.json's ``torch_dtype`` / ``dtype``: integer weights are a
#: quantization scheme (``quantization_config``, ``--weight-dtype``) and vLLM has no integer KV cache
#: (docs/conventions.md, "Architectures")
CHECKPOINT_REFUSED_DTYPES = ("int8", "int4")


def dtype_bytes(dtype: str, *, field: str = "dtype") -> int | Fraction:
    """Bytes per element of ``dtype`` (a key of :data:`DTYPE_BYTES`, case-insensitive).

    Raises
    ------
    InvalidValueError
        For an unknown dtype, naming ``field``.
    """
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        if key in DTYPE_BYTES:
            return DTYPE_BYTES[key]
    raise InvalidValueError(field, dtype, f"unknown dtype; known: {', '.join(DTYPE_BYTES)}")


def _nonneg_int(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidValueError(attribute.name, value, "must be an integer >= 0")


def _text(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidValueError(attribute.name, value, "expected a str")


def _bool(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidValueError(attribute.name, value, "must be true or false")


def _dtype(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    dtype_bytes(value, field=attribute.name)


def _norm(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value not in ("rmsnorm", "layernorm"):
        raise InvalidValueError(attribute.name, value, "must be 'rmsnorm' or 'layernorm'")


#: Matmul input dtypes :attr:`ModelConfig.compute_dtype` maps onto a peak (FP8, else the 16-bit peak).
_ACTIVATION_DTYPES = ("fp8", "float8", "float8_e4m3fn", "fp4", "bf16", "bfloat16", "fp16", "float16")


def _activation_dtype(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    # anything else (int8, float32, a typo) was priced at the BF16 peak without a word
    if value is not None and value not in _ACTIVATION_DTYPES:
        raise InvalidValueError(attribute.name, value, f"expected None or one of {', '.join(_ACTIVATION_DTYPES)}")


def _optional_pos_int(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        _pos_int(instance, attribute, value)


def _windows(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple):
        raise InvalidValueError(attribute.name, value, "must be a tuple with one window (or None) per layer")
    for w in value:
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w <= 0):
            raise InvalidValueError("sliding_window", w, "must be a positive integer (tokens) or null")


def _to_tuple(value: Any) -> Any:
    """Lists (from JSON or ``attrs.asdict``) to tuples, recursively; anything else unchanged."""
    if isinstance(value, list):
        return tuple(_to_tuple(v) for v in value)
    return value


def _class_dtypes(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple):
        raise InvalidValueError(attribute.name, value, "must be a tuple of (tensor class, dtype) pairs")
    for item in value:
        if not (isinstance(item, tuple) and len(item) == 2 and item[0] in TENSOR_CLASSES):
            raise InvalidValueError(attribute.name, item, f"expected (class, dtype), class one of {TENSOR_CLASSES}")
        dtype_bytes(item[1], field=f"dtype of {item[0]}")


def _check_context(context: Any) -> None:
    import numpy as np

    if isinstance(context, np.ndarray):
        if context.dtype.kind not in "iuO" or bool(np.any(context < 0)):
            raise InvalidValueError("context", context, "must be integers >= 0")
        return
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise InvalidValueError("context", context, "must be an integer >= 0 [tokens]")


def _minimum(a: Any, b: int) -> Any:
    import numpy as np

    if isinstance(a, np.ndarray):
        return np.minimum(a, b)
    return a if a <= b else b



def _to_state_mixer(value: Any) -> Any:
    """A StateMixer from itself or from its fields (a dict, as ``attrs.asdict`` writes it); None stays None."""
    if value is None or isinstance(value, StateMixer):
        return value
    if isinstance(value, dict):
        return StateMixer(**value)
    raise InvalidValueError("state_mixer", value, "expected a roofline.hybrid.StateMixer or None")


#: Tensor classes, each of which may carry its own dtype (docs/conventions.md, "Weight dtypes per
#: tensor class"): "norms" holds every vector (norms, biases, attention sinks); "towers" the
#: weights of a multimodal model's other towers (vision encoder and projector).
TENSOR_CLASSES = ("embedding", "lm_head", "projections", "experts", "router", "norms", "towers")


@attrs.frozen
class TensorGroup:
    """Tensors of one shape and class, as many as the model holds.

    Attributes
    ----------
    cls : str
        A tensor class of :data:`TENSOR_CLASSES`.
    name : str
        What they are (``"q_proj"``, ``"experts.down_proj"``, ``"input_layernorm"``...).
    shape : tuple of int
        ``(in_features, out_features)`` of a matmul weight; ``(n,)`` of a vector;
        ``(rows, width)`` of an embedding table.
    count : int >= 0
        Copies held in memory (0 for a tied lm_head, whose matrix is the embedding's).
    active : int >= 0
        Copies one token uses (k x MoE layers for routed experts; 1 for a tied lm_head).
    matmul : bool
        Takes part in a matmul (a gather or an element-wise vector does not).
    """

    cls: str
    name: str
    shape: tuple[int, ...]
    count: int
    active: int
    matmul: bool

    @property
    def numel(self) -> int:
        """Elements of one tensor."""
        return math.prod(self.shape)


@attrs.frozen
class ModelConfig:
    """A decoder-only transformer's shapes and dtypes (attrs, frozen, validated).

    Parameters
    ----------
    name : str (``source`` and ``model_type`` too: any other type is refused by field)
    num_hidden_layers, hidden_size, intermediate_size : int (> 0)
        Layers L, model width h, MLP width (of the dense layers).
    num_attention_heads, num_key_value_heads : int (> 0)
        Query heads H and KV heads (GQA groups; MHA when equal, MQA when 1).
        ``num_attention_heads`` must be divisible by ``num_key_value_heads``.
    head_dim : int (> 0)
        Width d of one head (explicit in Qwen3, Gemma; else hidden / heads).
    vocab_size : int (> 0)
    tie_word_embeddings : bool
        lm_head shares the embedding matrix (counted once in parameters and bytes).
    qkv_bias, o_bias, mlp_bias : bool
        Linear biases (Qwen2: q, k, v; OPT, GPT-2, GPT-NeoX: all).
    gated_mlp : bool
        Gate/up/down projections (Llama family) instead of up/down (OPT, GPT-2, GPT-NeoX, Falcon).
    norm : {"rmsnorm", "layernorm"}
        RMSNorm has a weight; LayerNorm a weight and a bias.
    norms_per_layer : int >= 0, default 2
        Hidden-width norms per layer (Falcon-7B: 1; Gemma 2/3: 4).
    qk_norm : bool
        Per-head RMSNorm on q and k (Qwen3, Gemma 3): 2 x head_dim parameters per layer.
    qk_norm_whole : bool, default False
        With ``qk_norm``: the norms span the whole projections (MiniMax-M2's q_norm of H x d and
        k_norm of H_kv x d), not one head: (H + H_kv) x d parameters per layer.
    lm_head_bias : bool, default False
        A bias on the lm_head (Phi-3.5-MoE): vocab parameters of the "norms" class.
    learned_positions : int (>= 0)
        Rows of a learned position-embedding table (OPT: max positions + 2); 0 for RoPE.
    max_position_embeddings : int or None
    weight_dtype, kv_dtype : str
        Keys of :data:`DTYPE_BYTES`; separate settings (int8 weights with BF16 KV is common).
    model_type : str, default "llama"
        The Hugging Face family (``roofline.families``).
    num_experts : int >= 0, default 0
        Routed experts E per MoE layer (0: a dense model).
    num_experts_per_tok : int >= 0
        Experts k routed per token (1 <= k <= E for a MoE model).
    moe_intermediate_size : int or None
        Width of one routed expert's MLP.
    num_moe_layers : int >= 0
        Layers whose MLP is a MoE layer (the others keep a dense MLP of ``intermediate_size``).
    shared_expert_intermediate_size : int >= 0
        Total width of the always-active shared expert(s) of a MoE layer (DeepSeek: S x
        moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size); 0 for none.
    num_shared_experts : int >= 0
        S, for reporting (the width above carries the parameters).
    shared_expert_gate : bool
        A sigmoid gate (h x 1) on the shared expert (Qwen2-MoE).
    router_bias, expert_bias, router_score_bias : bool
        A bias on the router (E), biases on every expert's projections (gpt-oss), and
        DeepSeek-V3's ``e_score_correction_bias`` (E per MoE layer).
    q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim : int or None
        Multi-head latent attention (DeepSeek-V2/V3) when ``kv_lora_rank`` is set.
    layer_windows : tuple of (int or None)
        One entry per layer: the sliding window [tokens] of that layer, or None for
        full attention; empty for a model whose every layer is full attention.
    attention_sinks : bool
        A learned sink logit per head and layer (gpt-oss).
    tower_parameters : int >= 0
        Weights of a multimodal model's other towers (vision encoder, projector): they
        occupy memory but take no part in decoding text.
    class_dtypes : tuple of (class, dtype)
        Tensor classes whose dtype differs from ``weight_dtype``.
    quantization : Quantization or None
        How a quantized checkpoint stores its matrices (``roofline.families.read_quantization``);
        None if unquantized.
    activation_dtype : str or None
        The dtype of matmul inputs when it is not the weights' (FP8 with FP8 activations:
        "fp8"); selects the compute peak.
    state_mixer : StateMixer or None
        A hybrid model's recurrent layers (Gated DeltaNet, Mamba2; :mod:`roofline.hybrid`): they
        hold a fixed state per sequence and no KV cache; the other layers are attention layers.
    state_dtype : str, default "bfloat16"
        The dtype the engine keeps the recurrent (SSM) states in (vLLM's ``mamba_ssm_cache_dtype``,
        whose default "auto" is the model's dtype; the config reader sets the config's
        ``mamba_ssm_cache_dtype``, else the family's transformers default, else ``torch_dtype``).
    conv_state_dtype : str, default "bfloat16"
        The dtype of the conv states (vLLM's ``mamba_cache_dtype``, "auto": the model's dtype).
    mlp_only_layers : int >= 0, default 0
        Layers holding only an MLP (Nemotron-H's "-" blocks): no attention, no recurrence.
    mixer_only : bool, default False
        The attention and recurrent layers hold no MLP (Nemotron-H: every block is one mixer or
        one MLP); the MLPs are then those of the ``mlp_only_layers``.
    attention_output_gate : bool
        A sigmoid output gate on each attention head, computed by q_proj (Qwen3-Next): q_proj
        is H x d x 2 wide.
    index_n_heads, index_head_dim, index_topk : int or None
        DeepSeek sparse attention (DeepSeek-V3.2, ``deepseek_v32``; all three or none, on MLA with a
        q_lora_rank): a lightning indexer of ``index_n_heads`` heads of ``index_head_dim`` scores every
        cached token and each query reads the ``index_topk`` best of the MLA cache
        (docs/conventions.md, "Sparse attention").
    published_parameters : int or None
        The total published with the checkpoint, for checking; never used in a formula.
    source : str
        Where the config comes from (model card, file path).

    Raises
    ------
    InvalidValueError
        For a zero, negative or non-integer size, an unknown dtype, heads not
        divisible by KV heads, k > E, or a window of 0; the message names the field and the value.
    """

    name: str = attrs.field(validator=_text)
    num_hidden_layers: int = attrs.field(validator=_pos_int)
    hidden_size: int = attrs.field(validator=_pos_int)
    intermediate_size: int = attrs.field(validator=_pos_int)
    num_attention_heads: int = attrs.field(validator=_pos_int)
    num_key_value_heads: int = attrs.field(validator=_pos_int)
    head_dim: int = attrs.field(validator=_pos_int)
    vocab_size: int = attrs.field(validator=_pos_int)
    tie_word_embeddings: bool = attrs.field(default=False, validator=_bool)
    qkv_bias: bool = attrs.field(default=False, validator=_bool)
    o_bias: bool = attrs.field(default=False, validator=_bool)
    mlp_bias: bool = attrs.field(default=False, validator=_bool)
    gated_mlp: bool = attrs.field(default=True, validator=_bool)
    norm: str = attrs.field(default="rmsnorm", validator=_norm)
    qk_norm: bool = attrs.field(default=False, validator=_bool)
    qk_norm_whole: bool = attrs.field(default=False, validator=_bool)
    lm_head_bias: bool = attrs.field(default=False, validator=_bool)
    learned_positions: int = attrs.field(default=0, validator=_nonneg_int)
    max_position_embeddings: int | None = attrs.field(default=None, validator=_optional_pos_int)
    weight_dtype: str = attrs.field(default="bfloat16", validator=_dtype)
    kv_dtype: str = attrs.field(default="bfloat16", validator=_dtype)
    published_parameters: int | None = attrs.field(default=None, validator=_optional_pos_int)
    source: str = attrs.field(default="", validator=_text)
    model_type: str = attrs.field(default="llama", validator=_text)
    norms_per_layer: int = attrs.field(default=2, validator=_nonneg_int)
    num_experts: int = attrs.field(default=0, validator=_nonneg_int)
    num_experts_per_tok: int = attrs.field(default=0, validator=_nonneg_int)
    moe_intermediate_size: int | None = attrs.field(default=None, validator=_optional_pos_int)
    num_moe_layers: int = attrs.field(default=0, validator=_nonneg_int)
    shared_expert_intermediate_size: int = attrs.field(default=0, validator=_nonneg_int)
    num_shared_experts: int = attrs.field(default=0, validator=_nonneg_int)
    shared_expert_gate: bool = attrs.field(default=False, validator=_bool)
    router_bias: bool = attrs.field(default=False, validator=_bool)
    expert_bias: bool = attrs.field(default=False, validator=_bool)
    router_score_bias: bool = attrs.field(default=False, validator=_bool)
    q_lora_rank: int | None = attrs.field(default=None, validator=_optional_pos_int)
    kv_lora_rank: int | None = attrs.field(default=None, validator=_optional_pos_int)
    qk_nope_head_dim: int | None = attrs.field(default=None, validator=_optional_pos_int)
    qk_rope_head_dim: int | None = attrs.field(default=None, validator=_optional_pos_int)
    v_head_dim: int | None = attrs.field(default=None, validator=_optional_pos_int)
    layer_windows: tuple[int | None, ...] = attrs.field(default=(), converter=_to_tuple, validator=_windows)
    attention_sinks: bool = attrs.field(default=False, validator=_bool)
    tower_parameters: int = attrs.field(default=0, validator=_nonneg_int)
    class_dtypes: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_to_tuple, validator=_class_dtypes)
    quantization: Quantization | None = attrs.field(default=None, converter=_to_quantization)
    activation_dtype: str | None = attrs.field(default=None, validator=_activation_dtype)
    state_mixer: StateMixer | None = attrs.field(default=None, converter=_to_state_mixer)
    state_dtype: str = attrs.field(default="bfloat16", validator=_dtype)
    attention_output_gate: bool = attrs.field(default=False, validator=_bool)
    conv_state_dtype: str = attrs.field(default="bfloat16", validator=_dtype)
    mlp_only_layers: int = attrs.field(default=0, validator=_nonneg_int)
    mixer_only: bool = attrs.field(default=False, validator=_bool)
    index_n_heads: int | None = attrs.field(default=None, validator=_optional_pos_int)
    index_head_dim: int | None = attrs.field(default=None, validator=_optional_pos_int)
    index_topk: int | None = attrs.field(default=None, validator=_optional_pos_int)
    num_nextn_predict_layers: int = attrs.field(default=0, validator=_nonneg_int)

    def __attrs_post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidValueError(
                "num_key_value_heads",
                self.num_key_value_heads,
                f"num_attention_heads={self.num_attention_heads} is not divisible by it",
            )
        if self.num_experts:
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise InvalidValueError(
                    "num_experts_per_tok", self.num_experts_per_tok,
                    f"must be between 1 and the number of experts ({self.num_experts})",
                )
            if self.moe_intermediate_size is None:
                raise InvalidValueError("moe_intermediate_size", None, "a MoE model needs the expert width")
            if not 1 <= self.num_moe_layers <= self.num_hidden_layers:
                raise InvalidValueError(
                    "num_moe_layers", self.num_moe_layers,
                    f"must be between 1 and num_hidden_layers ({self.num_hidden_layers})",
                )
        elif self.num_experts_per_tok or self.num_moe_layers:
            raise InvalidValueError("num_experts", 0, "num_experts_per_tok or num_moe_layers set without experts")
        if self.qk_norm_whole and not self.qk_norm:
            raise InvalidValueError("qk_norm_whole", True, "needs qk_norm (it says how wide the q/k norms are)")
        if self.kv_lora_rank is not None:
            for field in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, field) is None:
                    raise InvalidValueError(field, None, "multi-head latent attention (kv_lora_rank) needs it")
        dsa = (self.index_n_heads, self.index_head_dim, self.index_topk)
        if any(v is not None for v in dsa):
            if any(v is None for v in dsa):
                raise InvalidValueError("index_topk", self.index_topk, "DeepSeek sparse attention needs index_n_heads, "
                                        "index_head_dim and index_topk together")
            if self.kv_lora_rank is None or self.q_lora_rank is None:
                raise InvalidValueError("index_topk", self.index_topk, "DeepSeek sparse attention is modelled on "
                                        "multi-head latent attention with a q_lora_rank (its indexer reads q's latent)")
            if self.state_mixer is not None or self.layer_windows:
                raise InvalidValueError("index_topk", self.index_topk, "sparse attention beside recurrent or "
                                        "sliding-window layers is not modelled")
        if self.attention_layers < 1:
            raise InvalidValueError("state_mixer", self.num_hidden_layers - self.attention_layers,
                                    "recurrent and MLP-only layers must leave at least one attention layer of "
                                    f"num_hidden_layers={self.num_hidden_layers}")
        if self.num_moe_layers > self.mlp_layers:
            raise InvalidValueError("num_moe_layers", self.num_moe_layers, f"exceeds the layers with an MLP "
                                    f"({self.mlp_layers})")
        if self.state_mixer is not None:
            if self.state_mixer.parallel and self.state_mixer.layers > self.num_hidden_layers - self.mlp_only_layers:
                raise InvalidValueError("state_mixer", self.state_mixer.layers, "a mixer parallel to attention needs "
                                        f"a mixer layer each (num_hidden_layers={self.num_hidden_layers})")
            if self.layer_windows:
                raise InvalidValueError("layer_windows", self.layer_windows, "sliding windows beside recurrent "
                                        "layers are not modelled")
        if self.layer_windows and len(self.layer_windows) != self.num_hidden_layers:
            raise InvalidValueError(
                "layer_types", len(self.layer_windows),
                f"one entry per layer is needed (num_hidden_layers={self.num_hidden_layers})",
            )

    # ------------------------------------------------------------------ shapes
    @property
    def q_width(self) -> int:
        """Query projection width H x d [elements]."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Key (or value) projection width H_kv x d [elements]."""
        return self.num_key_value_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts (mixture of experts)."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention (``kv_lora_rank`` set)."""
        return self.kv_lora_rank is not None

    @property
    def is_hybrid(self) -> bool:
        """Whether some layers are recurrent (a fixed state per sequence, no KV cache)."""
        return self.state_mixer is not None

    @property
    def attention_layers(self) -> int:
        """Layers holding a KV cache [layers]: every layer but the recurrent ones of a hybrid (a mixer
        ``parallel`` to attention, Falcon-H1's, takes none away) and the MLP-only ones."""
        mixer = self.state_mixer
        recurrent = mixer.layers if mixer is not None and not mixer.parallel else 0
        return self.num_hidden_layers - recurrent - self.mlp_only_layers

    @property
    def mlp_layers(self) -> int:
        """Layers holding an MLP (dense or MoE) [layers]: every layer, or only the MLP-only ones of a
        model whose mixer layers hold none (``mixer_only``)."""
        return self.mlp_only_layers if self.mixer_only else self.num_hidden_layers

    @property
    def has_sliding_window(self) -> bool:
        """Whether any layer attends over a sliding window."""
        return any(w is not None for w in self.layer_windows)

    @property
    def _norm_size(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def _attention_groups(self) -> list[tuple[str, str, tuple[int, ...], bool]]:
        """(class, name, shape, matmul) of one layer's attention tensors."""
        h, H = self.hidden_size, self.num_attention_heads
        out: list[tuple[str, str, tuple[int, ...], bool]] = []
        if self.is_mla:
            assert self.kv_lora_rank is not None and self.qk_nope_head_dim is not None
            assert self.qk_rope_head_dim is not None and self.v_head_dim is not None
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank is not None:
                out += [("projections", "q_a_proj", (h, self.q_lora_rank), True),
                        ("norms", "q_a_layernorm", (self.q_lora_rank,), False),
                        ("projections", "q_b_proj", (self.q_lora_rank, H * qk), True)]
            else:
                out.append(("projections", "q_proj", (h, H * qk), True))
            out += [("projections", "kv_a_proj_with_mqa", (h, self.kv_lora_rank + self.qk_rope_head_dim), True),
                    ("norms", "kv_a_layernorm", (self.kv_lora_rank,), False),
                    ("projections", "kv_b_proj", (self.kv_lora_rank, H * (self.qk_nope_head_dim + self.v_head_dim)),
                     True),
                    ("projections", "o_proj", (H * self.v_head_dim, h), True)]
            if self.index_topk is not None:  # the lightning indexer (DeepSeek-V3.2's Indexer)
                assert self.index_n_heads is not None and self.index_head_dim is not None
                assert self.q_lora_rank is not None
                hi, di = self.index_n_heads, self.index_head_dim
                out += [("projections", "indexer.wq_b", (self.q_lora_rank, hi * di), True),
                        ("projections", "indexer.wk", (h, di), True),
                        ("norms", "indexer.k_norm", (2 * di,), False),
                        ("projections", "indexer.weights_proj", (h, hi), True)]
            return out
        q, kv = self.q_width, self.kv_width
        q_out = 2 * q if self.attention_output_gate else q  # Qwen3-Next: q_proj computes the query and its gate
        out += [("projections", "q_proj", (h, q_out), True), ("projections", "k_proj", (h, kv), True),
                ("projections", "v_proj", (h, kv), True), ("projections", "o_proj", (q, h), True)]
        if self.qkv_bias:
            out += [("norms", "q_proj.bias", (q,), False), ("norms", "k_proj.bias", (kv,), False),
                    ("norms", "v_proj.bias", (kv,), False)]
        if self.o_bias:
            out.append(("norms", "o_proj.bias", (h,), False))
        if self.qk_norm and self.qk_norm_whole:
            out += [("norms", "q_norm", (q,), False), ("norms", "k_norm", (kv,), False)]
        elif self.qk_norm:
            out += [("norms", "q_norm", (self.head_dim,), False), ("norms", "k_norm", (self.head_dim,), False)]
        if self.attention_sinks:
            out.append(("norms", "sinks", (H,), False))
        return out

    def _mlp_groups(
        self, width: int, cls: str, prefix: str, bias: bool
    ) -> list[tuple[str, str, tuple[int, ...], bool]]:
        h = self.hidden_size
        names = ("gate_proj", "up_proj", "down_proj") if self.gated_mlp else ("up_proj", "down_proj")
        out: list[tuple[str, str, tuple[int, ...], bool]] = [
            (cls, prefix + n, (width, h) if n == "down_proj" else (h, width), True) for n in names]
        if bias:
            out += [("norms", prefix + n + ".bias", (h,) if n == "down_proj" else (width,), False) for n in names]
        return out

    def tensor_groups(self) -> tuple[TensorGroup, ...]:
        """Every weight tensor of the model by class, with copies held and used per token.

        Returns
        -------
        tuple of :class:`TensorGroup`: the one inventory that parameters, active
        parameters, matmul FLOPs and weight bytes (by class) are all computed from.

        Notes
        -----
        docs/conventions.md, "The model" and "Architectures":
        embeddings + lm_head (none held when tied) + per layer (attention projections,
        MLP or MoE: routed experts, shared experts, router; norms; biases) + final norm
        + other towers.
        """
        L, h, V = self.num_hidden_layers, self.hidden_size, self.vocab_size
        groups: list[TensorGroup] = [TensorGroup("embedding", "embed_tokens", (V, h), 1, 1, False)]
        if self.learned_positions:
            groups.append(TensorGroup("embedding", "embed_positions", (self.learned_positions, h), 1, 1, False))
        A = self.attention_layers
        for cls, name, shape, mm in self._attention_groups():
            groups.append(TensorGroup(cls, name, shape, A, A, mm))
        if self.state_mixer is not None:
            n = self.state_mixer.layers
            for cls, name, shape, mm in self.state_mixer.tensors(h):
                groups.append(TensorGroup(cls, name, shape, n, n, mm))
        if self.norms_per_layer:
            groups.append(TensorGroup("norms", "layer norms", (self.norms_per_layer * self._norm_size,), L, L, False))
        dense = self.mlp_layers - self.num_moe_layers
        if dense:
            for cls, name, shape, mm in self._mlp_groups(self.intermediate_size, "projections", "mlp.", self.mlp_bias):
                groups.append(TensorGroup(cls, name, shape, dense, dense, mm))
        if self.is_moe:
            assert self.moe_intermediate_size is not None
            n, E, k = self.num_moe_layers, self.num_experts, self.num_experts_per_tok
            for cls, name, shape, mm in self._mlp_groups(self.moe_intermediate_size, "experts", "experts.",
                                                         self.expert_bias):
                groups.append(TensorGroup(cls, name, shape, n * E, n * k, mm))
            groups.append(TensorGroup("router", "router", (h, E), n, n, True))
            if self.router_bias:
                groups.append(TensorGroup("norms", "router.bias", (E,), n, n, False))
            if self.router_score_bias:
                groups.append(TensorGroup("norms", "e_score_correction_bias", (E,), n, n, False))
            if self.shared_expert_intermediate_size:
                for cls, name, shape, mm in self._mlp_groups(self.shared_expert_intermediate_size, "projections",
                                                             "shared_experts.", False):
                    groups.append(TensorGroup(cls, name, shape, n, n, mm))
            if self.shared_expert_gate:
                groups.append(TensorGroup("router", "shared_expert_gate", (h, 1), n, n, True))
        groups.append(TensorGroup("norms", "final norm", (self._norm_size,), 1, 1, False))
        groups.append(TensorGroup("lm_head", "lm_head", (h, V), 0 if self.tie_word_embeddings else 1, 1, True))
        if self.lm_head_bias:
            groups.append(TensorGroup("norms", "lm_head.bias", (V,), 1, 1, False))
        if self.tower_parameters:
            groups.append(TensorGroup("towers", "other towers", (self.tower_parameters,), 1, 0, False))
        return tuple(groups)

    # ------------------------------------------------------------------ counts
    @property
    def layer_matmul_parameters(self) -> int:
        """Weights of one dense layer's projections (q, k, v, o and MLP), biases excluded."""
        attn = sum(math.prod(s) for _, _, s, mm in self._attention_groups() if mm)
        mlp = (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size
        return attn + mlp

    @property
    def layer_other_parameters(self) -> int:
        """One dense layer's biases and norm parameters (no matmul)."""
        attn = sum(math.prod(s) for _, _, s, mm in self._attention_groups() if not mm)
        mlp = sum(math.prod(s) for _, _, s, mm in
                  self._mlp_groups(self.intermediate_size, "projections", "", self.mlp_bias) if not mm)
        return attn + mlp + self.norms_per_layer * self._norm_size

    @property
    def embedding_parameters(self) -> int:
        """Token embedding (vocab x h) plus any learned position table."""
        return (self.vocab_size + self.learned_positions) * self.hidden_size

    @property
    def lm_head_parameters(self) -> int:
        """lm_head weights (vocab x h); they take part in a matmul whether tied or not."""
        return self.vocab_size * self.hidden_size

    def parameters_by_class(self) -> dict[str, int]:
        """Parameters held in memory, by tensor class [parameters].

        Returns
        -------
        dict
            Tensor class (:data:`TENSOR_CLASSES`, every one present) -> parameters; the values
            sum to :attr:`parameters` (a tied lm_head holds none).
        """
        out = dict.fromkeys(TENSOR_CLASSES, 0)
        for g in self.tensor_groups():
            out[g.cls] += g.numel * g.count
        return out

    @property
    def parameters(self) -> int:
        """Exact parameter count (unique tensors: a tied lm_head counted once; every expert; other towers).

        embeddings + lm_head (if untied) + L x (projections + biases + norms) + final norm
        (+ for MoE: E routed experts, shared experts and router per MoE layer).
        """
        return sum(g.numel * g.count for g in self.tensor_groups())

    @property
    def mtp_module(self) -> ModelConfig | None:
        """One multi-token-prediction module's decoder, as a one-layer model (None without MTP modules).

        DeepSeek-V3's MTP module (its technical report, section 2.2; vLLM's ``DeepSeekMultiTokenPredictorLayer``):
        enorm and hnorm (h each), eh_proj (2h x h, :attr:`mtp_projection_parameters`), one decoder layer of the
        model's last-layer shape (MoE where the model has MoE layers), its final norm, and the embedding and
        lm_head it shares with the model. The one-layer model holds the layer, the final norm, the embedding and
        the lm_head; docs/conventions.md, "Speculative decoding".
        """
        if not self.num_nextn_predict_layers:
            return None
        return attrs.evolve(self, name=f"{self.name} MTP module", num_hidden_layers=1,
                            num_moe_layers=1 if self.is_moe else 0, mlp_only_layers=0, layer_windows=(),
                            published_parameters=None, num_nextn_predict_layers=0, tower_parameters=0)

    @property
    def mtp_projection_parameters(self) -> int:
        """One MTP module's parameters beside its one-layer model: eh_proj (2h x h) + enorm + hnorm (h each)."""
        h = self.hidden_size
        return 2 * h * h + 2 * h

    @property
    def mtp_parameters(self) -> int:
        """Parameters of the ``num_nextn_predict_layers`` MTP modules, each counted whole as the checkpoint
        holds it (its copies of the embedding and lm_head included; 0 without MTP) [parameters].

        DeepSeek-V3: 14B beside the main model's 671B, 685B published (its README).
        """
        head = self.mtp_module
        if head is None:
            return 0
        return self.num_nextn_predict_layers * (head.parameters + self.mtp_projection_parameters)

    @property
    def text_parameters(self) -> int:
        """Parameters of the language model alone (without other towers)."""
        return self.parameters - self.tower_parameters

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses (k routed experts + shared ones; equals ``text_parameters`` when dense).

        Notes
        -----
        docs/conventions.md, "Architectures" (mixture of experts):
        a tied lm_head is counted once; other towers are not used to decode text.
        """
        return sum(g.numel * min(g.count, g.active) for g in self.tensor_groups())

    @property
    def matmul_parameters(self) -> int:
        """Parameters that take part in a matmul per token: every projection and the lm_head.

        The embedding lookup is a gather and is not counted; biases and norms are
        element-wise and not counted (docs/conventions.md, "The model"). For MoE, the k
        routed experts, the shared experts and the router of every MoE layer.
        """
        return sum(g.numel * g.active for g in self.tensor_groups() if g.matmul)

    @property
    def weight_bytes_per_parameter(self) -> int | Fraction:
        """Bytes per weight of ``weight_dtype``."""
        return dtype_bytes(self.weight_dtype, field="weight_dtype")

    @property
    def weight_format(self) -> str:
        """How the weights are stored, in words: ``weight_dtype``, or e.g. ``"mxfp4/bfloat16"`` (quantized
        classes in the method's format, the others in ``weight_dtype``)."""
        if self.quantization is not None:
            return f"{self.quantization.method}/{self.weight_dtype}"
        if self.class_dtypes:
            return "/".join(dict.fromkeys([self.weight_dtype, *(d for _, d in self.class_dtypes)]))
        return self.weight_dtype

    @property
    def compute_dtype(self) -> str:
        """The dtype whose dense peak the matmuls run at: "fp8" for FP8 weights with FP8 activations,
        "fp4" for NVFP4 weights with FP4 activations, else "bf16" (weight-only quantization
        dequantizes to the activations' dtype)."""
        if self.activation_dtype == "fp4":
            return "fp4"
        return "fp8" if self.activation_dtype in ("fp8", "float8", "float8_e4m3fn") else "bf16"

    @property
    def kv_bytes_per_element(self) -> int | Fraction:
        """Bytes per KV-cache element of ``kv_dtype``."""
        return dtype_bytes(self.kv_dtype, field="kv_dtype")

    def _group_bytes(self, g: TensorGroup) -> int | Fraction:
        """Bytes of one tensor of group ``g`` (its class's dtype, or its quantized format)."""
        if self.quantization is not None and g.matmul and g.cls in self.quantization.classes and len(g.shape) == 2:
            return quantized_matrix_bytes(self.quantization, g.shape, self._class_dtype(g.cls))
        return g.numel * dtype_bytes(self._class_dtype(g.cls), field=f"dtype of {g.cls}")

    def _class_dtype(self, cls: str) -> str:
        for name, dtype in self.class_dtypes:
            if name == cls:
                return dtype
        return self.weight_dtype

    def weight_bytes_by_class(self) -> dict[str, int | Fraction]:
        """Bytes held in memory by tensor class [bytes] (:data:`TENSOR_CLASSES`); they sum to :attr:`weight_bytes`.

        The per-class split a tensor-parallel split starts from (projections and experts are
        split, norms replicated, embeddings and lm_head split by vocabulary).

        Each class has its own dtype (``class_dtypes``, else ``weight_dtype``); quantized
        matrices cost their packed weights plus their scales and zeros
        (docs/conventions.md, "Weight dtypes per tensor class").
        """
        out: dict[str, int | Fraction] = dict.fromkeys(TENSOR_CLASSES, 0)
        for g in self.tensor_groups():
            out[g.cls] += self._group_bytes(g) * g.count
        return out

    @property
    def weight_bytes(self) -> int | Fraction:
        """Bytes of all weights held in memory [bytes] (tied matrix once; every expert; other towers)."""
        if not self.class_dtypes and self.quantization is None:
            return self.parameters * self.weight_bytes_per_parameter
        return sum(self.weight_bytes_by_class().values())

    @property
    def routed_expert_bytes(self) -> int | Fraction:
        """Bytes of one routed expert summed over the MoE layers [bytes] (0 for a dense model)."""
        if not self.is_moe:
            return 0
        total = sum(self._group_bytes(g) * g.count for g in self.tensor_groups()
                    if g.cls == "experts" or g.name.startswith("experts."))
        per_expert = Fraction(total) / self.num_experts
        return int(per_expert) if per_expert.denominator == 1 else per_expert

    @property
    def shared_weight_bytes(self) -> int | Fraction:
        """Bytes every decode step reads whatever the routing [bytes]: all but the routed experts.

        Other towers are excluded: they hold memory but a text decode step does not read them.
        """
        tower = self._group_bytes_of("towers")
        return self.weight_bytes - self.num_experts * self.routed_expert_bytes - tower

    @property
    def shared_expert_bytes(self) -> int | Fraction:
        """Bytes of the shared experts summed over the MoE layers [bytes] (0 without any).

        Part of :attr:`shared_weight_bytes`; expert parallelism replicates them on every GPU
        (docs/conventions.md, "Expert parallelism").
        """
        return sum((self._group_bytes(g) * g.count for g in self.tensor_groups()
                    if g.name.startswith("shared_experts.")), 0)

    def _group_bytes_of(self, cls: str) -> int | Fraction:
        return sum((self._group_bytes(g) * g.count for g in self.tensor_groups() if g.cls == cls), 0)

    def experts_touched(self, batch: Any) -> Any:
        """Expected distinct routed experts B tokens touch in one MoE layer, uniform routing [experts].

        Parameters
        ----------
        batch : int >= 1 [tokens] (a decode step: one per sequence), or an integer array

        Returns
        -------
        E (1 - (1 - k/E)^B) (:func:`roofline.formulas.experts_touched`; docs/conventions.md,
        "Architectures"); 0 for a dense model.

        Raises
        ------
        InvalidValueError
            A batch that is not an integer >= 1.
        """
        if not self.is_moe:
            return 0
        from .formulas.moe import experts_touched

        return experts_touched(num_experts=self.num_experts, experts_per_token=self.num_experts_per_tok, batch=batch)

    def decode_weight_bytes(self, batch: Any) -> Any:
        """Weight bytes one decode step of ``batch`` sequences reads [bytes], uniform routing.

        Dense: every weight of the language model (other towers excluded; equal to
        ``weight_bytes`` for a text-only model). MoE: shared weights + one routed expert's
        bytes (over the MoE layers) x expected experts touched (docs/conventions.md,
        "Architectures").

        Parameters
        ----------
        batch : int >= 1 [sequences]

        Raises
        ------
        InvalidValueError
            A batch that is not an integer >= 1 (MoE models).
        """
        if not self.is_moe:
            return self.weight_bytes - self._group_bytes_of("towers") if self.tower_parameters else self.weight_bytes
        return self.shared_weight_bytes + self.routed_expert_bytes * self.experts_touched(batch)

    @property
    def matmul_flops_per_token(self) -> int:
        """Exact matmul FLOPs per token [FLOP]: 2 x matmul_parameters (active ones for MoE)."""
        return 2 * self.matmul_parameters

    @property
    def two_p_flops_per_token(self) -> int:
        """2 x P [FLOP per token], the lesson's round figure (a named approximation; P active for MoE)."""
        return 2 * (self.active_parameters if self.is_moe else self.parameters - self.tower_parameters)

    # ------------------------------------------------------------------ KV cache and attention
    @property
    def layer_kv_elements(self) -> int:
        """KV-cache elements one layer holds per token: 2 H_kv d (K and V); MLA: kv_lora_rank + qk_rope_head_dim."""
        if self.is_mla:
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_width

    @property
    def lesson_flops_per_token(self) -> int:
        """Former name of :attr:`two_p_flops_per_token` (kept so existing code keeps working)."""
        return self.two_p_flops_per_token

    @property
    def _mla_attention_flops(self) -> int:
        assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        return self.num_attention_heads * (2 * (self.kv_lora_rank + self.qk_rope_head_dim) + 2 * self.kv_lora_rank)

    @property
    def index_flops_per_cached_token(self) -> int:
        """FLOPs one query's indexer spends on one cached token in one layer [FLOP]: 2 x index_n_heads x
        index_head_dim (the q . k products; the ReLU, the per-head weights and the top-k selection are not
        counted, as softmax is not); 0 without sparse attention."""
        if self.index_n_heads is None or self.index_head_dim is None:
            return 0
        return 2 * self.index_n_heads * self.index_head_dim

    @property
    def layer_attention_flops(self) -> int:
        """Decode attention FLOPs of one layer per context token [FLOP]: 4 H d; MLA absorbed:
        H (2 (kv_lora_rank + qk_rope_head_dim) + 2 kv_lora_rank); sparse attention adds the indexer's
        :attr:`index_flops_per_cached_token` (the rate up to index_topk tokens: :meth:`attention_flops`)."""
        if self.is_mla:
            return self._mla_attention_flops + self.index_flops_per_cached_token
        return 4 * self.num_attention_heads * self.head_dim

    @property
    def attention_flops_per_token(self) -> int:
        """Decode attention FLOPs per token per context token [FLOP], every layer at full attention.

        4 x L x H x d (MLA: the absorbed form). Multiply by the context c (QK^T and AV,
        2 FLOP per multiply-add); for windowed layers use :meth:`attention_flops`.
        """
        return self.attention_layers * self.layer_attention_flops

    @property
    def is_sparse_attention(self) -> bool:
        """Whether each query reads only the ``index_topk`` cached tokens an indexer selects (DeepSeek-V3.2)."""
        return self.index_topk is not None

    @property
    def index_key_bytes(self) -> int:
        """Bytes of one token's indexer key in one layer [bytes]: index_head_dim FP8 values and one float32
        scale per 128 of them (vLLM's ``DeepseekV32IndexerCache``: head_dim + head_dim // 128 x 4), whatever
        the KV dtype; 0 without sparse attention."""
        if self.index_head_dim is None:
            return 0
        return self.index_head_dim + -(-self.index_head_dim // 128) * 4

    @property
    def kv_bytes_per_token(self) -> int | Fraction:
        """KV-cache bytes each token holds at full attention [bytes]: 2 x L x H_kv x d x kv bytes (MLA:
        L x (kv_lora_rank + qk_rope_head_dim) x kv bytes; sparse attention adds each layer's indexer key,
        :attr:`index_key_bytes`). Windowed layers: :meth:`kv_bytes`."""
        return self.attention_layers * (self.layer_kv_elements * self.kv_bytes_per_element + self.index_key_bytes)

    def kv_read_bytes(self, context: Any) -> Any:
        """KV bytes one decode query reads at ``context`` tokens [bytes]: :meth:`kv_bytes` (what the
        sequence holds), except under sparse attention, where each layer reads min(c, index_topk) tokens of
        the MLA cache and the indexer keys of all c tokens: L x (min(c, k) x latent bytes + c x
        :attr:`index_key_bytes`) (docs/conventions.md, "Sparse attention").

        Raises
        ------
        InvalidValueError
            A negative or non-integer context.
        """
        if self.index_topk is None:
            return self.kv_bytes(context)
        _check_context(context)
        from .formulas.sparse import sparse_read_bytes

        terms = self.sparse_terms()
        return sparse_read_bytes.unchecked(context=context, index_topk=terms["index_topk"],
                                           latent_bytes_per_token=terms["latent_bytes_per_token"],
                                           index_bytes_per_token=terms["index_bytes_per_token"])

    def sparse_terms(self, convention: str = "exact") -> dict[str, Any]:
        """The model's inputs to :mod:`roofline.formulas.sparse`, keyed by their keyword names.

        ``index_topk`` [tokens] (K), ``latent_bytes_per_token`` [bytes/token] (k_m = L x (kv_lora_rank +
        qk_rope_head_dim) x KV bytes), ``index_bytes_per_token`` [bytes/token] (k_i = L x
        :attr:`index_key_bytes`), ``latent_attention_flops_per_token`` and ``index_flops_per_token``
        [FLOP/token^2] (a_m, the absorbed MLA rate, and a_i = L x :attr:`index_flops_per_cached_token`;
        both 0 under the ``"2p"`` convention, which counts no attention FLOPs). docs/conventions.md,
        "Sparse attention".

        Raises
        ------
        InvalidValueError
            The model has no sparse attention (``index_topk``), or an unknown convention.
        """
        if self.index_topk is None:
            raise InvalidValueError("index_topk", None, f"{self.model_type} has no sparse attention")
        counted = bool(self.flops_per_token(convention)[1])
        L = self.attention_layers
        return dict(index_topk=self.index_topk,
                    latent_bytes_per_token=L * self.layer_kv_elements * self.kv_bytes_per_element,
                    index_bytes_per_token=L * self.index_key_bytes,
                    latent_attention_flops_per_token=L * self._mla_attention_flops if counted else 0,
                    index_flops_per_token=L * self.index_flops_per_cached_token if counted else 0)

    @property
    def state_bytes_per_sequence(self) -> int | Fraction:
        """Recurrent state one sequence holds [bytes], whatever its context: 0 without recurrent layers.

        recurrent layers x (conv state x bytes of ``conv_state_dtype`` + recurrent state x bytes of
        ``state_dtype``)
        (:mod:`roofline.hybrid`; docs/conventions.md, "Hybrid models"). A decode step reads it and
        writes it back once per sequence: :func:`roofline.formulas.hybrid_decode_bytes`.
        """
        if self.state_mixer is None:
            return 0
        mixer = self.state_mixer
        conv = mixer.conv_state_elements * dtype_bytes(self.conv_state_dtype, field="conv_state_dtype")
        return mixer.layers * (conv + mixer.ssm_state_elements * dtype_bytes(self.state_dtype, field="state_dtype"))

    @property
    def recurrent_flops_per_token(self) -> int:
        """FLOPs one token spends in the recurrent layers beyond their matmul weights [FLOP], fixed in the
        context (:attr:`roofline.hybrid.StateMixer.layer_recurrent_flops` x layers); 0 without them."""
        if self.state_mixer is None:
            return 0
        return self.state_mixer.layers * self.state_mixer.layer_recurrent_flops

    def _held(self, context: Any) -> Any:
        """Sum over layers of min(c, w_l) [token-layers]."""
        if not self.layer_windows:
            return self.attention_layers * context
        total: Any = 0
        for w in self.layer_windows:
            total = total + (context if w is None else _minimum(context, w))
        return total

    def kv_bytes(self, context: Any) -> Any:
        """KV-cache bytes one sequence holds (and a decode step reads) at ``context`` tokens [bytes].

        sum over layers of min(c, w_l) x per-layer bytes per token (w_l infinite for full
        attention); equals ``kv_bytes_per_token x c`` without sliding windows.

        Parameters
        ----------
        context : int >= 0 [tokens] (or a numpy array)

        Raises
        ------
        InvalidValueError
            A negative or non-integer context.
        """
        _check_context(context)
        if not self.layer_windows:
            return self.kv_bytes_per_token * context
        return self._held(context) * self.layer_kv_elements * self.kv_bytes_per_element

    def attention_flops(self, context: Any) -> Any:
        """Decode attention FLOPs of one token at ``context`` tokens [FLOP].

        Sum over layers of min(c, w_l) x the layer's rate (4 H d; MLA: the absorbed form);
        ``attention_flops_per_token x c`` without sliding windows (docs/conventions.md,
        "Architectures").

        Parameters
        ----------
        context : int >= 0 [tokens] (or an integer numpy array)

        Raises
        ------
        InvalidValueError
            A negative or non-integer context.
        """
        _check_context(context)
        if self.index_topk is not None:  # the attention over min(c, k) tokens, the indexer over all c
            from .formulas.sparse import sparse_attention_flops

            terms = self.sparse_terms()
            return sparse_attention_flops.unchecked(
                context=context, index_topk=terms["index_topk"],
                latent_attention_flops_per_token=self.attention_layers * self._mla_attention_flops,
                index_flops_per_token=self.attention_layers * self.index_flops_per_cached_token)
        if not self.layer_windows:
            return self.attention_flops_per_token * context
        return self._held(context) * self.layer_attention_flops

    def decode_bytes(self, batch: int, contexts: Any) -> Any:
        """Bytes one decode step reads [bytes]: weights (experts touched by ``batch`` tokens) + KV of each sequence.

        Parameters
        ----------
        batch : int >= 1 [sequences]
        contexts : int or sequence of int [tokens]
            Every sequence's context c_i, the new token included (one int: all equal).

        Returns
        -------
        decode_weight_bytes(batch) + sum_i kv_read_bytes(c_i) (:meth:`kv_bytes`, but for sparse
        attention; docs/conventions.md, "One step" and "Architectures"), + 2 x batch x
        :attr:`state_bytes_per_sequence` for a hybrid (each sequence's recurrent state read and
        written back; "Hybrid models").

        Raises
        ------
        InvalidValueError
            A bad batch or context, or a number of contexts other than ``batch``.
        """
        kv = self._kv_sum(batch, contexts)
        return self.decode_weight_bytes(batch) + kv + 2 * batch * self.state_bytes_per_sequence

    def _kv_sum(self, batch: int, contexts: Any) -> Any:
        if isinstance(contexts, (int, Fraction)):
            return batch * self.kv_read_bytes(contexts)
        contexts = list(contexts)
        if len(contexts) != batch:
            raise InvalidValueError("contexts", len(contexts), f"expected one context per sequence ({batch})")
        return sum((self.kv_read_bytes(c) for c in contexts), 0)

    def flops_per_token(self, convention: str = "exact") -> tuple[int, int]:
        """(matmul FLOPs per token, attention FLOPs per token per context token at full attention).

        ``convention="exact"``: the exact matmul count (plus a hybrid's recurrent FLOPs,
        :attr:`recurrent_flops_per_token`) and 4 L H d attention FLOPs (L: attention layers).
        ``convention="2p"``: 2 x P (the lesson's round figure) and no attention FLOPs;
        ``"lesson"`` is accepted as its former name (:func:`flops_convention`).

        Raises
        ------
        InvalidValueError
            For any other convention.
        """
        if flops_convention(convention) == "exact":
            # a hybrid's recurrent layers add their fixed FLOPs per token (docs/conventions.md, "Hybrid models")
            return self.matmul_flops_per_token + self.recurrent_flops_per_token, self.attention_flops_per_token
        return self.two_p_flops_per_token, 0

    def step_terms(self, convention: str = "exact") -> dict[str, int | Fraction]:
        """The model's inputs to the step-time formulas, keyed by their keyword names.

        ``weight_bytes`` [bytes], ``kv_bytes_per_token`` [bytes/token], ``flops_per_token``
        [FLOP/token] and ``attention_flops_per_token`` [FLOP/(token x context token)] under
        ``convention`` (see :meth:`flops_per_token`); pass them with ``**`` to
        :func:`roofline.formulas.step_time` and its siblings. ``weight_bytes`` is what a
        dense decode step reads (other towers excluded); for a MoE model it is the batch-1
        value: use :meth:`decode_weight_bytes` for a batch. For a model with sliding-window
        layers ``kv_bytes_per_token`` and ``attention_flops_per_token`` are the full-attention
        rates: a step at contexts c_i reads sum_i :meth:`kv_bytes` (c_i), not k x sum_i c_i.
        :func:`roofline.estimate.decode_step` applies both (docs/conventions.md, "Architectures").

        Raises
        ------
        InvalidValueError
            For an unknown convention.
        """
        per_token, attention = self.flops_per_token(convention)
        return dict(
            weight_bytes=self.decode_weight_bytes(1),
            kv_bytes_per_token=self.kv_bytes_per_token,
            flops_per_token=per_token,
            attention_flops_per_token=attention,
        )

    @property
    def activation_bytes(self) -> int:
        """Bytes per element of the hidden states a tensor-parallel all-reduce carries [bytes/element].

        The model's dtype when the weights are float32, float16 or bfloat16; 2 (BF16) for quantized
        and FP8 weights, whose matmuls dequantize to 16-bit activations (vLLM all-reduces the hidden
        states in the model's activation dtype; docs/conventions.md, "Tensor parallelism").
        """
        size = dtype_bytes(self.weight_dtype, field="weight_dtype")
        return 4 if size == 4 else 2

    def per_gpu(self, tensor_parallel_size: int) -> ModelConfig:
        """The share of the model one GPU of a tensor-parallel group of T GPUs holds and computes.

        Parameters
        ----------
        tensor_parallel_size : int >= 1
            T (vLLM's ``--tensor-parallel-size``).

        Returns
        -------
        ModelConfig
            ``self`` when T = 1 (every number unchanged); else a :class:`ModelShare` (a ModelConfig) of
            the same layers and hidden size whose shapes are one GPU's, so that every size it
            gives (``weight_bytes``, ``decode_weight_bytes``, ``kv_bytes_per_token``, ``kv_bytes``,
            ``flops_per_token``, ``step_terms``) is per GPU:

            - query heads H / T (attention projections split: q, k, v by columns, o by rows);
            - KV heads H_kv / T, or one per GPU (replicated) when T exceeds H_kv;
            - MLP width I / T (gate and up by columns, down by rows); each routed expert's and the
              shared experts' widths / T (tensor parallelism inside every expert, vLLM's default;
              expert parallelism, whole experts per GPU, is the Deployment's ``Parallelism.expert``);
              the router is replicated;
            - embedding and lm_head split by vocabulary: ceil(V / T) rows per GPU;
            - norms, biases of row-parallel layers (o_proj, down_proj), learned position embeddings
              and other towers replicated;
            - Gated DeltaNet layers (a hybrid's, :mod:`roofline.hybrid`): key and value heads / T, so
              in_proj_qkvz, in_proj_ba, the conv channels, dt_bias and A_log by columns and out_proj
              by rows, and each sequence's conv and recurrent states / T, as vLLM splits them
              (``MambaStateShapeCalculator.gated_delta_net_state_shape`` divides by the TP size);
            - lightning attention layers (MiniMax): the heads / T, so qkv_proj, output_gate and the norm
              by columns, out_proj by rows, and each sequence's H / T x d x d state
              (``linear_attention_state_shape`` divides the heads by the TP size);
            - Mamba1 (Jamba) and short-convolution (LFM2) layers: the channels / T, so in_proj, the conv,
              dt_proj, A_log and D by columns, x_proj and out_proj by rows (the dt, B and C norms and
              out_proj's bias replicated), and each sequence's conv and SSM states / T
              (``mamba1_state_shape``, ``short_conv_state_shape`` divide the channels by the TP size);
            - multi-head latent attention: the heads split (q_b_proj, kv_b_proj, o_proj); q_a_proj,
              kv_a_proj_with_mqa and the latent KV cache (kv_lora_rank + qk_rope_head_dim per token
              and layer) replicated on every GPU, as vLLM does (vllm/model_executor/models/deepseek_v2.py,
              ``DeepseekV2MLAAttention``, builds ``q_a_proj`` and ``kv_a_proj_with_mqa`` as
              ``ReplicatedLinear``; its MLA attention caches the whole latent on each rank).

            docs/conventions.md, "Tensor parallelism".

        Raises
        ------
        InvalidValueError
            T not an integer >= 1; query heads not divisible by T; KV heads not divisible by T
            when T <= H_kv, or T not divisible by the KV heads when T > H_kv; an MLP or expert
            width not divisible by T (vLLM's ``divide`` refuses all of these); a model that is
            already one GPU's share; Gated DeltaNet key or value heads (lightning heads, Mamba1 or
            short-convolution channels) not divisible by T; a hybrid with Mamba2, parallel or
            MLP-only blocks at T > 1 (how those split is not modelled). The message
            gives the numbers.

        Examples
        --------
        >>> m = get_model("llama-3.1-70b").per_gpu(8)
        >>> m.num_attention_heads, m.num_key_value_heads, m.intermediate_size, m.vocab_size
        (8, 1, 3584, 16032)
        >>> get_model("llama-3.1-70b").per_gpu(16).num_key_value_heads  # 8 KV heads: one replicated per GPU
        1
        """
        from ._checks import check_count

        check_count("tensor_parallel_size", tensor_parallel_size, minimum=1)  # one T, never an array
        T = int(tensor_parallel_size)
        if T == 1:
            return self
        mixer = self.state_mixer
        if mixer is not None and (mixer.kind == "mamba2" or self.mixer_only or mixer.parallel):
            raise InvalidValueError("tensor_parallel_size", T, f"{self.name}: tensor parallelism of a hybrid model's "
                                    f"{mixer.kind} blocks is not modelled (T = 1 only; Gated DeltaNet, lightning "
                                    "attention, Mamba1 and short-convolution layers split)")
        if isinstance(self, ModelShare):
            raise InvalidValueError("tensor_parallel_size", T,
                                    f"{self.name} is already one GPU's share of {self.tensor_parallel_size}")
        H, Hkv = self.num_attention_heads, self.num_key_value_heads
        if H % T:
            raise InvalidValueError("tensor_parallel_size", T,
                                    f"num_attention_heads={H} is not divisible by {T}")
        if self.is_mla:
            kv_heads = math.gcd(H // T, Hkv)  # not used by MLA (one latent per token), kept consistent
        elif Hkv >= T:
            if Hkv % T:
                raise InvalidValueError("tensor_parallel_size", T,
                                        f"num_key_value_heads={Hkv} is not divisible by {T}")
            kv_heads = Hkv // T
        else:
            if T % Hkv:
                raise InvalidValueError("tensor_parallel_size", T,
                                        f"it exceeds num_key_value_heads={Hkv} and is not a multiple of it")
            kv_heads = 1
        widths = {"intermediate_size": self.intermediate_size}
        if self.num_moe_layers == self.num_hidden_layers:
            widths.pop("intermediate_size")  # no dense MLP layer uses it
        if self.moe_intermediate_size is not None:
            widths["moe_intermediate_size"] = self.moe_intermediate_size
        if self.shared_expert_intermediate_size:
            widths["shared_expert_intermediate_size"] = self.shared_expert_intermediate_size
        for field, width in widths.items():
            if width % T:
                raise InvalidValueError("tensor_parallel_size", T, f"{field}={width} is not divisible by {T}")
        share: dict[str, Any] = {field: width // T for field, width in widths.items()}
        if "intermediate_size" not in share:
            share["intermediate_size"] = self.intermediate_size
        if mixer is not None:  # as vLLM splits them: heads (or channels) and each sequence's states / T
            if mixer.kind in ("mamba1", "short_conv"):  # the channels split; dt rank and state size do not
                name = "mamba intermediate size" if mixer.kind == "mamba1" else "hidden_size (conv channels)"
                if mixer.heads % T:
                    raise InvalidValueError("tensor_parallel_size", T, f"{name}={mixer.heads} is not divisible by {T}")
                share["state_mixer"] = attrs.evolve(mixer, heads=mixer.heads // T)
            else:
                names = (("linear_num_key_heads", "linear_num_value_heads") if mixer.kind == "gated_deltanet"
                         else ("num_attention_heads", "num_attention_heads"))  # lightning: every head, q, k and v
                for name, heads in zip(names, (mixer.key_heads, mixer.heads), strict=True):
                    if heads % T:
                        raise InvalidValueError("tensor_parallel_size", T, f"{name}={heads} is not divisible by {T}")
                share["state_mixer"] = attrs.evolve(mixer, heads=mixer.heads // T, key_heads=mixer.key_heads // T)
        fields = {a.name: getattr(self, a.name) for a in attrs.fields(ModelConfig)}
        fields.update(num_attention_heads=H // T, num_key_value_heads=kv_heads, vocab_size=-(-self.vocab_size // T),
                      published_parameters=None, **share)
        return ModelShare(**fields, whole=self, tensor_parallel_size=T)

    def with_dtypes(self, *, weight_dtype: str | None = None, kv_dtype: str | None = None) -> ModelConfig:
        """A copy with other weight and/or KV dtypes.

        A weight dtype overrides every tensor class and any quantization of the checkpoint.
        """
        changes: dict[str, Any] = {}
        if weight_dtype is not None:
            changes.update(weight_dtype=weight_dtype, class_dtypes=(), quantization=None, activation_dtype=None)
        if kv_dtype is not None:
            changes["kv_dtype"] = kv_dtype
        return attrs.evolve(self, **changes)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_hf_config(
        cls,
        config: str | os.PathLike[str] | dict[str, Any],
        *,
        name: str | None = None,
        weight_dtype: str | None = None,
        kv_dtype: str | None = None,
    ) -> ModelConfig:
        """Build from a Hugging Face ``config.json`` (a path, or the parsed dict).

        The config is read by its ``model_type`` through the family table
        (:mod:`roofline.families`): each family maps its own field names (layers, widths,
        heads, KV heads, head_dim when present else hidden // heads, vocabulary, tied
        embeddings with the family's default, biases, norms, MLP shape, experts, latent
        attention, sliding windows, a multimodal wrapper's ``text_config`` and towers) and
        its ``quantization_config``. The weight dtype and the KV dtype both default to
        torch_dtype (or dtype; bfloat16 if absent) and can be set separately; a weight
        dtype given here overrides every tensor class and any quantization.

        Raises
        ------
        UnsupportedModelError
            A model_type refused by name or unknown (or absent), or a feature of a known
            family that is not modelled (a vision tower, a quantization method).
        ConfigError
            File missing or not JSON, not an object, or a required field missing or
            not a positive integer (the message names the field and value).
        InvalidValueError
            Heads not divisible by KV heads, k > E, a window of 0, an unknown dtype or an integer
            ``torch_dtype`` (int4, int8: no checkpoint dtype, docs/conventions.md, "Architectures").
        """
        source = "dict"
        if not isinstance(config, dict):
            if not isinstance(config, (str, os.PathLike)):
                raise ConfigError(f"config={config!r}: expected a path to a config.json or a dict")
            path = Path(config)
            source = str(path)
            try:
                text = read_text_file(path, max_bytes=_MAX_CONFIG_BYTES)
            except FileReadError as exc:
                reason = exc.reason.replace("cannot read", "cannot read the model config", 1)
                raise ConfigError(f"{path}: {reason}") from None
            try:
                # NaN and Infinity are read (a config may hold them in a field no reader uses; the
                # readers refuse them in a used field by name)
                config = parse_json(text, allow_nonfinite=True)
            except ValueError as exc:
                raise ConfigError(f"{path}: not valid JSON: {exc}") from None
            if not isinstance(config, dict):
                raise ConfigError(f"{path}: expected a JSON object, got {type(config).__name__}")
        return _from_dict(config, name=name, source=source, weight_dtype=weight_dtype, kv_dtype=kv_dtype)

    @classmethod
    def from_preset(
        cls, name: str, *, weight_dtype: str | None = None, kv_dtype: str | None = None
    ) -> ModelConfig:
        """The shipped preset ``name`` (see :func:`model_names`).

        Raises
        ------
        UnknownPresetError
            If there is no such preset; the message lists the known ones.
        """
        return get_model(name).with_dtypes(weight_dtype=weight_dtype, kv_dtype=kv_dtype)



_MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few KB


def _check_values(value: Any, path: str, *, source: str, depth: int = 0) -> None:
    """Refuse, anywhere in a config, nesting deeper than a JSON file may have and an integer of
    more than a hundred digits (no dimension is that large, and its repr in a message would fail
    past 4,300 digits); a dict built in Python may even contain itself. A non-finite float is
    left to the readers: tolerated in a field none of them uses, refused by name in one they use."""
    if depth > MAX_JSON_DEPTH:
        raise ConfigError(f"{source}: field {path!r} is nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_values(item, f"{path}.{key}" if path else str(key), source=source, depth=depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_values(item, f"{path}[{i}]", source=source, depth=depth + 1)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_NUMBER_CHARS:
        raise ConfigError(f"{source}: field {path!r}={shown(value)} is implausibly large")


def _text_fields(cfg: dict[str, Any], *, source: str, name: Any, weight_dtype: Any, kv_dtype: Any) -> None:
    """Refuse a config's text fields (and the caller's overrides) of the wrong type, or empty.

    ``model_type``, ``torch_dtype``/``dtype`` and the names must be non-empty strings where
    given (null is absent): a list as ``model_type``, a number as a name or an empty
    ``torch_dtype`` would otherwise be turned into something the user did not write.
    Values anywhere in the config are checked first (:func:`_check_values`).
    """
    _check_values(cfg, "", source=source)
    for key in ("model_type", "torch_dtype", "dtype", "_name", "_name_or_path", "_source"):
        value = cfg.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{source}: field {key!r}={shown(value)} must be a non-empty string")
    text = cfg.get("text_config")
    if isinstance(text, dict):  # a multimodal wrapper's language model: the same text fields
        for key in ("model_type", "torch_dtype", "dtype"):
            value = text.get(key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{source}: field 'text_config.{key}'={shown(value)} must be a non-empty string")
    published = cfg.get("_published_parameters")
    if published is not None and (isinstance(published, bool) or not isinstance(published, int) or published <= 0):
        raise ConfigError(f"{source}: field '_published_parameters'={shown(published)} must be a positive integer")
    for key, value in (("name", name), ("weight_dtype", weight_dtype), ("kv_dtype", kv_dtype)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InvalidValueError(key, value, "must be a non-empty string or None")


def _from_dict(
    cfg: dict[str, Any],
    *,
    name: str | None,
    source: str,
    weight_dtype: str | None,
    kv_dtype: str | None,
) -> ModelConfig:
    from .families import identify, read_config

    identify(cfg, source=source)  # the model is named before any other field is read
    _text_fields(cfg, source=source, name=name, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    kw = read_config(cfg, source=source)
    dtype = kw.pop("torch_dtype")
    dtype_bytes(dtype, field="torch_dtype")
    if dtype.strip().lower().removeprefix("torch.") in CHECKPOINT_REFUSED_DTYPES:
        # int4 / int8 are quantization schemes (quantization_config, --weight-dtype), no checkpoint dtype, and
        # vLLM has no integer KV cache (its --kv-cache-dtype: auto, fp8*): refused, not priced as int weights and KV
        raise InvalidValueError("torch_dtype", dtype, f"is no checkpoint dtype (in {source}); an integer "
                                "checkpoint is quantized: give its quantization_config, or --weight-dtype")
    published = cfg.get("_published_parameters")
    try:
        model = ModelConfig(
            name=name or str(cfg.get("_name") or cfg.get("_name_or_path") or source),
            weight_dtype=dtype,
            kv_dtype=kv_dtype or dtype,
            published_parameters=published,
            source=str(cfg.get("_source") or source),
            **kw,
        )
    except InvalidValueError as exc:
        raise InvalidValueError(exc.field, exc.value, f"{exc.reason} (in {source})") from None
    return model.with_dtypes(weight_dtype=weight_dtype) if weight_dtype else model


# --------------------------------------------------------------------------- presets

_PRESET_CACHE: dict[str, ModelConfig] = {}


@attrs.frozen
class ModelShare(ModelConfig):
    """One GPU's share of a model under tensor parallelism: a ModelConfig of one GPU's shapes.

    Made by :meth:`ModelConfig.per_gpu` (never by hand); every size it gives is per GPU. The
    model itself (:class:`ModelConfig`) holds nothing about where it runs: the tensor-parallel
    size belongs to the deployment (:class:`roofline.Deployment`, docs/conventions.md,
    "Deployment"). A share remembers what it is a share of, so that it is never split again
    (:meth:`ModelConfig.per_gpu` refuses it by name) and so that an API given a share prices it
    at its own T (:func:`roofline.deployment.as_deployment`).

    Attributes
    ----------
    whole : ModelConfig
        The model this is a share of.
    tensor_parallel_size : int >= 2
        T, the GPUs the whole model is split over.
    """

    whole: ModelConfig = attrs.field(kw_only=True, repr=False)
    tensor_parallel_size: int = attrs.field(kw_only=True, validator=_pos_int)


#: FLOPs conventions by name: "exact" (2 x matmul parameters + attention FLOPs) and "2p"
#: (2 x parameters, the lesson's round figure); "lesson" is the former name of "2p".
FLOPS_CONVENTIONS = ("exact", "2p")
_FLOPS_ALIASES = {"exact": "exact", "2p": "2p", "lesson": "2p"}


def flops_convention(name: Any) -> str:
    """The FLOPs convention called ``name`` ("exact" or "2p"; "lesson" is read as "2p").

    Raises
    ------
    InvalidValueError
        For any other name (field ``flops``).

    Examples
    --------
    >>> flops_convention("lesson"), flops_convention("exact")
    ('2p', 'exact')
    """
    if not isinstance(name, str) or name not in _FLOPS_ALIASES:
        raise InvalidValueError("flops", name, "expected 'exact' or '2p' (2 x parameters)")
    return _FLOPS_ALIASES[name]


def model_names() -> list[str]:
    """Names of the shipped model presets, sorted."""
    files = resources.files("roofline.data").joinpath("models").iterdir()
    return sorted(f.name.removesuffix(".json") for f in files if f.name.endswith(".json"))


def get_model(name: str) -> ModelConfig:
    """The shipped preset called ``name`` (case-insensitive, e.g. ``"llama-3.1-8b"``).

    Raises
    ------
    UnknownPresetError
        If no preset has that name.
    InvalidValueError
        ``name`` not a str.

    Examples
    --------
    >>> get_model("llama-3.1-8b").parameters
    8030261248
    >>> get_model("llama-3.1-8b").kv_bytes_per_token
    131072
    """
    if not isinstance(name, str):
        raise InvalidValueError("name", name, "expected a preset name (str); see roofline.model_names()")
    key = name_key(name)
    if key not in _PRESET_CACHE:
        names = model_names()
        if key not in names:
            raise UnknownPresetError("model", str(name), names)
        path = resources.files("roofline.data").joinpath("models", key + ".json")
        cfg = parse_json(path.read_text(encoding="utf-8"))
        _PRESET_CACHE[key] = _from_dict(cfg, name=key, source=f"preset {key}", weight_dtype=None, kv_dtype=None)
    return _PRESET_CACHE[key]


#: A Hugging Face repository id: ORG/NAME (letters, digits, ``-``, ``_``, ``.``; one slash).
_HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)


def hf_ids() -> dict[str, str]:
    """Hugging Face repository ids the presets know, lower-cased, -> preset name.

    A preset names its repositories in ``_hf_id`` (a string or a list of strings: the base
    and the instruction-tuned checkpoint share one architecture and one count).
    """
    out: dict[str, str] = {}
    for name in model_names():
        path = resources.files("roofline.data").joinpath("models", name + ".json")
        cfg = parse_json(path.read_text(encoding="utf-8"))
        ids = cfg.get("_hf_id") or []
        for hf_id in [ids] if isinstance(ids, str) else ids:
            out[hf_id.lower()] = name
    return out


def preset_for_hf_id(hf_id: str) -> str:
    """The preset name that knows the Hugging Face repository ``hf_id`` (ORG/NAME, case-insensitive).

    Raises
    ------
    UnknownPresetError
        No preset knows it; the message says to download that repository's config.json and
        pass its path (nothing is fetched: the package reads no network).
    """
    ids = hf_ids()
    key = hf_id.strip().lower()
    if key not in ids:
        raise UnknownPresetError("model", hf_id, sorted(ids.values()),
                                 hint=f"no preset knows the Hugging Face repository {hf_id!r}: download its "
                                      f"config.json (https://huggingface.co/{hf_id.strip()}/blob/main/config.json) "
                                      "and pass that file's path")
    return ids[key]


def _is_file(text: str) -> bool:
    """Whether ``text`` names an existing file; False for a name the system cannot look up (too
    long, a NUL byte), which is then tried as a preset name, not reported as an output failure."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def load_model(
    spec: str | os.PathLike[str], *, weight_dtype: str | None = None, kv_dtype: str | None = None
) -> ModelConfig:
    """A preset name, a Hugging Face id a preset knows (``ORG/NAME``, :func:`preset_for_hf_id`) or a
    path to a ``config.json`` (a path if it names an existing file or ends in ``.json``), with
    optional dtype overrides.

    Raises
    ------
    UnknownPresetError, ConfigError, InvalidValueError
        (InvalidValueError for ``spec`` neither a str nor a path, or a dtype override not a str.)
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise InvalidValueError("spec", spec, "expected a preset name or a path to a config.json")
    text = os.fspath(spec)
    if not isinstance(text, str):
        raise InvalidValueError("spec", spec, "expected a str path, not bytes")
    if _HF_ID.fullmatch(text.strip()) and not _is_file(text) and not text.endswith(".json"):
        model = get_model(preset_for_hf_id(text))  # a Hugging Face id (ORG/NAME), not a file here
    elif text.endswith(".json") or os.path.sep in text or _is_file(text):
        model = ModelConfig.from_hf_config(text)
    else:
        model = get_model(text)
    return model.with_dtypes(weight_dtype=weight_dtype, kv_dtype=kv_dtype)
