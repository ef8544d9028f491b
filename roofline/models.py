"""Model configurations: built from a Hugging Face ``config.json`` or a shipped preset.

A :class:`ModelConfig` describes a decoder-only transformer closely enough to count
its parameters exactly, its weight bytes, its matmul FLOPs per token and its KV-cache
bytes per token (conventions: ../shared/design/CONVENTIONS.md, "The model").

Presets are the ``config.json`` files under ``roofline/data/models/`` (one per model
of ../shared/design/CONSTANTS.md, plus the small models of the cases), each with the
published parameter total where one exists; a test checks the computed count equals it.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from ._io import MAX_JSON_DEPTH, MAX_NUMBER_CHARS, parse_json, read_text_file
from .errors import ConfigError, FileReadError, InvalidValueError, UnknownPresetError, shown

__all__ = [
    "ModelConfig",
    "DTYPE_BYTES",
    "dtype_bytes",
    "model_names",
    "get_model",
    "load_model",
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
    "int8": 1,
    "int4": Fraction(1, 2),
}


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


def _pos_int(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidValueError(attribute.name, value, "must be a positive integer")


def _nonneg_int(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidValueError(attribute.name, value, "must be an integer >= 0")


def _bool(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidValueError(attribute.name, value, "must be true or false")


def _dtype(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    dtype_bytes(value, field=attribute.name)


def _norm(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value not in ("rmsnorm", "layernorm"):
        raise InvalidValueError(attribute.name, value, "must be 'rmsnorm' or 'layernorm'")


def _optional_pos_int(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        _pos_int(instance, attribute, value)


@attrs.frozen
class ModelConfig:
    """A decoder-only transformer's shapes and dtypes (attrs, frozen, validated).

    Parameters
    ----------
    name : str
    num_hidden_layers, hidden_size, intermediate_size : int (> 0)
        Layers L, model width h, MLP width.
    num_attention_heads, num_key_value_heads : int (> 0)
        Query heads H and KV heads (GQA groups; MHA when equal, MQA when 1).
        ``num_attention_heads`` must be divisible by ``num_key_value_heads``.
    head_dim : int (> 0)
        Width d of one head (explicit in Qwen3, Gemma; else hidden / heads).
    vocab_size : int (> 0)
    tie_word_embeddings : bool
        lm_head shares the embedding matrix (counted once in parameters and bytes).
    qkv_bias, o_bias, mlp_bias : bool
        Linear biases (Qwen2: q, k, v; OPT: all).
    gated_mlp : bool
        Gate/up/down projections (Llama family) instead of fc1/fc2 (OPT).
    norm : {"rmsnorm", "layernorm"}
        RMSNorm has a weight; LayerNorm a weight and a bias.
    qk_norm : bool
        Per-head RMSNorm on q and k (Qwen3): 2 x head_dim parameters per layer.
    learned_positions : int (>= 0)
        Rows of a learned position-embedding table (OPT: max positions + 2); 0 for RoPE.
    max_position_embeddings : int or None
    weight_dtype, kv_dtype : str
        Keys of :data:`DTYPE_BYTES`; separate settings (int8 weights with BF16 KV is common).
    published_parameters : int or None
        The total published with the checkpoint, for checking; never used in a formula.
    source : str
        Where the config comes from (model card, file path).

    Raises
    ------
    InvalidValueError
        For a zero, negative or non-integer size, an unknown dtype, or heads not
        divisible by KV heads; the message names the field and the value.
    """

    name: str
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
    learned_positions: int = attrs.field(default=0, validator=_nonneg_int)
    max_position_embeddings: int | None = attrs.field(default=None, validator=_optional_pos_int)
    weight_dtype: str = attrs.field(default="bfloat16", validator=_dtype)
    kv_dtype: str = attrs.field(default="bfloat16", validator=_dtype)
    published_parameters: int | None = attrs.field(default=None, validator=_optional_pos_int)
    source: str = ""

    def __attrs_post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidValueError(
                "num_key_value_heads",
                self.num_key_value_heads,
                f"num_attention_heads={self.num_attention_heads} is not divisible by it",
            )

    # ------------------------------------------------------------------ counts
    @property
    def q_width(self) -> int:
        """Query projection width H x d [elements]."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Key (or value) projection width H_kv x d [elements]."""
        return self.num_key_value_heads * self.head_dim

    @property
    def layer_matmul_parameters(self) -> int:
        """Weights of one layer's projections (q, k, v, o and MLP), biases excluded."""
        h, q, kv, m = self.hidden_size, self.q_width, self.kv_width, self.intermediate_size
        attn = h * q + 2 * h * kv + q * h
        mlp = (3 if self.gated_mlp else 2) * h * m
        return attn + mlp

    @property
    def layer_other_parameters(self) -> int:
        """One layer's biases and norm parameters (no matmul)."""
        h, q, kv, m = self.hidden_size, self.q_width, self.kv_width, self.intermediate_size
        n = 0
        if self.qkv_bias:
            n += q + 2 * kv
        if self.o_bias:
            n += h
        if self.mlp_bias:
            n += (2 * m if self.gated_mlp else m) + h
        n += 2 * self._norm_size
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    @property
    def _norm_size(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    @property
    def embedding_parameters(self) -> int:
        """Token embedding (vocab x h) plus any learned position table."""
        return (self.vocab_size + self.learned_positions) * self.hidden_size

    @property
    def lm_head_parameters(self) -> int:
        """lm_head weights (vocab x h); they take part in a matmul whether tied or not."""
        return self.vocab_size * self.hidden_size

    @property
    def parameters(self) -> int:
        """Exact parameter count (unique tensors: a tied lm_head counted once).

        embeddings + lm_head (if untied) + L x (projections + biases + norms) + final norm.
        """
        lm_head = 0 if self.tie_word_embeddings else self.lm_head_parameters
        per_layer = self.layer_matmul_parameters + self.layer_other_parameters
        return (
            self.embedding_parameters
            + lm_head
            + self.num_hidden_layers * per_layer
            + self._norm_size
        )

    @property
    def matmul_parameters(self) -> int:
        """Parameters that take part in a matmul per token: every projection and the lm_head.

        The embedding lookup is a gather and is not counted; biases and norms are
        element-wise and not counted (CONVENTIONS.md, "The model"; case S3).
        """
        return self.num_hidden_layers * self.layer_matmul_parameters + self.lm_head_parameters

    @property
    def weight_bytes_per_parameter(self) -> int | Fraction:
        """Bytes per weight of ``weight_dtype``."""
        return dtype_bytes(self.weight_dtype, field="weight_dtype")

    @property
    def kv_bytes_per_element(self) -> int | Fraction:
        """Bytes per KV-cache element of ``kv_dtype``."""
        return dtype_bytes(self.kv_dtype, field="kv_dtype")

    @property
    def weight_bytes(self) -> int | Fraction:
        """Bytes of all weights [bytes]: parameters x bytes per weight (tied matrix once)."""
        return self.parameters * self.weight_bytes_per_parameter

    @property
    def matmul_flops_per_token(self) -> int:
        """Exact matmul FLOPs per token [FLOP]: 2 x matmul_parameters."""
        return 2 * self.matmul_parameters

    @property
    def lesson_flops_per_token(self) -> int:
        """The lesson's round figure 2 x P [FLOP per token] (a named approximation)."""
        return 2 * self.parameters

    @property
    def attention_flops_per_token(self) -> int:
        """Decode attention FLOPs per token per context token [FLOP]: 4 x L x H x d.

        Multiply by the context c (QK^T and AV, 2 FLOP per multiply-add).
        """
        return 4 * self.num_hidden_layers * self.num_attention_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int | Fraction:
        """KV-cache bytes per token [bytes]: 2 x L x H_kv x d x kv bytes (K and V)."""
        return 2 * self.num_hidden_layers * self.kv_width * self.kv_bytes_per_element

    def flops_per_token(self, convention: str = "exact") -> tuple[int, int]:
        """(matmul FLOPs per token, attention FLOPs per token per context token).

        ``convention="exact"``: the exact matmul count and 4 L H d attention FLOPs.
        ``convention="lesson"``: the lesson's 2 x P and no attention FLOPs.

        Raises
        ------
        InvalidValueError
            For any other convention.
        """
        if convention == "exact":
            return self.matmul_flops_per_token, self.attention_flops_per_token
        if convention == "lesson":
            return self.lesson_flops_per_token, 0
        raise InvalidValueError("flops", convention, "expected 'exact' or 'lesson'")

    def step_terms(self, convention: str = "exact") -> dict[str, int | Fraction]:
        """The model's inputs to the step-time formulas, keyed by their keyword names.

        ``weight_bytes`` [bytes], ``kv_bytes_per_token`` [bytes/token], ``flops_per_token``
        [FLOP/token] and ``attention_flops_per_token`` [FLOP/(token x context token)] under
        ``convention`` (see :meth:`flops_per_token`); pass them with ``**`` to
        :func:`roofline.formulas.step_time` and its siblings.

        Raises
        ------
        InvalidValueError
            For an unknown convention.
        """
        per_token, attention = self.flops_per_token(convention)
        return dict(
            weight_bytes=self.weight_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            flops_per_token=per_token,
            attention_flops_per_token=attention,
        )

    def with_dtypes(self, *, weight_dtype: str | None = None, kv_dtype: str | None = None) -> ModelConfig:
        """A copy with other weight and/or KV dtypes."""
        changes: dict[str, Any] = {}
        if weight_dtype is not None:
            changes["weight_dtype"] = weight_dtype
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

        Reads num_hidden_layers, hidden_size, intermediate_size (``ffn_dim`` for OPT),
        num_attention_heads, num_key_value_heads (absent: = heads, MHA), head_dim
        (absent: hidden_size // heads), vocab_size, tie_word_embeddings (absent: the
        model type's default, False for llama/mistral/qwen2/qwen3, True for opt and
        unknown types as in transformers' PretrainedConfig), attention_bias / mlp_bias,
        and torch_dtype (or dtype). The weight dtype and the KV dtype both default to
        torch_dtype (bfloat16 if absent) and can be set separately.

        Raises
        ------
        ConfigError
            File missing or not JSON, not an object, or a required field missing or
            not a positive integer (the message names the field and value).
        InvalidValueError
            Heads not divisible by KV heads, unknown dtype.
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
                raise ConfigError(f"{path}: model config {exc.reason}") from None
            try:
                config = parse_json(text)
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
#: Largest size accepted for any dimension of a config (layers, widths, vocabulary).
_MAX_DIMENSION = 1 << 32

_TIED_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False, "opt": True}


def _field(cfg: dict[str, Any], key: str, *, source: str, required: bool = True, default: Any = None) -> Any:
    if key not in cfg or cfg[key] is None:
        if required:
            raise ConfigError(f"{source}: required field {key!r} is missing")
        return default
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise ConfigError(f"{source}: field {key!r}={value!r} must be finite")
        raise ConfigError(f"{source}: field {key!r}={value!r} must be a positive integer")
    if value > _MAX_DIMENSION:
        raise ConfigError(f"{source}: field {key!r}={value!r} is implausibly large (> {_MAX_DIMENSION:,})")
    return value


def _flag(cfg: dict[str, Any], key: str, default: bool, *, source: str) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: field {key!r}={value!r} must be true or false")
    return value


def _check_values(value: Any, path: str, *, source: str, depth: int = 0) -> None:
    """Refuse, anywhere in a config, nesting deeper than a JSON file may have, a non-finite float
    and an integer of more than a hundred digits (no dimension is that large, and its repr in a
    message would fail past 4,300 digits); a dict built in Python may even contain itself."""
    if depth > MAX_JSON_DEPTH:
        raise ConfigError(f"{source}: field {path!r} is nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_values(item, f"{path}.{key}" if path else str(key), source=source, depth=depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_values(item, f"{path}[{i}]", source=source, depth=depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{source}: field {path!r}={value!r} must be finite")
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
    _text_fields(cfg, source=source, name=name, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    model_type = str(cfg.get("model_type", "")).lower()
    is_opt = model_type == "opt"
    layers = _field(cfg, "num_hidden_layers", source=source)
    hidden = _field(cfg, "hidden_size", source=source)
    inter = _field(cfg, "ffn_dim" if is_opt else "intermediate_size", source=source)
    heads = _field(cfg, "num_attention_heads", source=source)
    kv_heads = _field(cfg, "num_key_value_heads", source=source, required=False, default=heads)
    head_dim = _field(cfg, "head_dim", source=source, required=False, default=None)
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f"{source}: head_dim is absent and hidden_size={hidden} is not divisible by "
                f"num_attention_heads={heads}"
            )
        head_dim = hidden // heads
    vocab = _field(cfg, "vocab_size", source=source)
    max_pos = _field(cfg, "max_position_embeddings", source=source, required=False)
    tied = _flag(cfg, "tie_word_embeddings", _TIED_DEFAULT.get(model_type, True), source=source)
    if is_opt:
        bias = _flag(cfg, "enable_bias", True, source=source)
        qkv_bias = o_bias = mlp_bias = bias
        if max_pos is None:
            raise ConfigError(f"{source}: required field 'max_position_embeddings' is missing")
        extra: dict[str, Any] = dict(gated_mlp=False, norm="layernorm", learned_positions=max_pos + 2)
        if cfg.get("word_embed_proj_dim", hidden) != hidden:
            raise ConfigError(f"{source}: word_embed_proj_dim != hidden_size is not supported")
    else:
        attn_bias = _flag(cfg, "attention_bias", False, source=source)
        qkv_bias = attn_bias or model_type == "qwen2"
        o_bias = attn_bias
        mlp_bias = _flag(cfg, "mlp_bias", False, source=source)
        extra = dict(qk_norm=model_type == "qwen3")
    dtype = cfg.get("torch_dtype", cfg.get("dtype")) or "bfloat16"
    dtype_bytes(dtype, field="torch_dtype")
    published = cfg.get("_published_parameters")
    try:
        return ModelConfig(
            name=name or str(cfg.get("_name") or cfg.get("_name_or_path") or source),
            num_hidden_layers=layers,
            hidden_size=hidden,
            intermediate_size=inter,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            vocab_size=vocab,
            tie_word_embeddings=tied,
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=mlp_bias,
            max_position_embeddings=max_pos,
            weight_dtype=weight_dtype or dtype,
            kv_dtype=kv_dtype or dtype,
            published_parameters=published,
            source=str(cfg.get("_source") or source),
            **extra,
        )
    except InvalidValueError as exc:
        raise InvalidValueError(exc.field, exc.value, f"{exc.reason} (in {source})") from None


# --------------------------------------------------------------------------- presets

_PRESET_CACHE: dict[str, ModelConfig] = {}


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
    key = name.strip().lower()
    if key not in _PRESET_CACHE:
        names = model_names()
        if key not in names:
            raise UnknownPresetError("model", str(name), names)
        path = resources.files("roofline.data").joinpath("models", key + ".json")
        cfg = parse_json(path.read_text(encoding="utf-8"))
        _PRESET_CACHE[key] = _from_dict(cfg, name=key, source=f"preset {key}", weight_dtype=None, kv_dtype=None)
    return _PRESET_CACHE[key]


def load_model(
    spec: str | os.PathLike[str], *, weight_dtype: str | None = None, kv_dtype: str | None = None
) -> ModelConfig:
    """A preset name or a path to a ``config.json`` (a path if it names an existing file
    or ends in ``.json``), with optional dtype overrides.

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
    if text.endswith(".json") or os.path.sep in text or Path(text).is_file():
        model = ModelConfig.from_hf_config(text)
    else:
        model = get_model(text)
    return model.with_dtypes(weight_dtype=weight_dtype, kv_dtype=kv_dtype)
