"""Hypothesis strategies for roofline's inputs, for our tests and for tools that use us.

Written by hand (``st.builds`` does not honour attrs validators), in Hypothesis's
house style: plural names, ``min_value``/``max_value``, keyword-only options, and
:class:`hypothesis.errors.InvalidArgument` for impossible combinations.

Every strategy draws only valid values (its output never raises in roofline's
validators) and shrinks towards small, simple cases.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from ..hardware import ACCELERATORS, Accelerator, Source, Sourced
from ..models import ModelConfig

__all__ = [
    "positive_fractions",
    "domain_values",
    "model_configs",
    "accelerators",
]


def _check_range(min_value: Any, max_value: Any) -> None:
    if min_value is not None and max_value is not None and min_value > max_value:
        raise InvalidArgument(f"min_value={min_value!r} is greater than max_value={max_value!r}")


def positive_fractions(
    *, min_value: Fraction | int = Fraction(1, 1000), max_value: Fraction | int = 10**6, max_denominator: int = 1000
) -> st.SearchStrategy[Fraction]:
    """Exact positive Fractions in [min_value, max_value].

    Raises
    ------
    InvalidArgument
        If ``min_value <= 0`` or ``min_value > max_value``.
    """
    if min_value <= 0:
        raise InvalidArgument(f"min_value={min_value!r} must be > 0")
    _check_range(min_value, max_value)
    return st.fractions(min_value=min_value, max_value=max_value, max_denominator=max_denominator)


def domain_values(kind: str, *, max_value: int = 10**6) -> st.SearchStrategy[Any]:
    """Exact values (Fraction or int) of a formula argument domain (``roofline.formulas.DOMAINS``).

    ``"positive"``, ``"nonnegative"``, ``"share"`` give Fractions; ``"positive_int"`` and
    ``"nonnegative_int"`` give ints.

    Raises
    ------
    InvalidArgument
        For an unknown domain kind.
    """
    if kind == "positive":
        return positive_fractions(max_value=max_value)
    if kind == "nonnegative":
        return st.one_of(st.just(Fraction(0)), positive_fractions(max_value=max_value))
    if kind == "positive_int":
        return st.integers(min_value=1, max_value=max_value)
    if kind == "nonnegative_int":
        return st.integers(min_value=0, max_value=max_value)
    if kind == "share":
        return st.fractions(min_value=Fraction(1, 1000), max_value=1, max_denominator=1000)
    if kind == "real":
        return st.fractions(min_value=-max_value, max_value=max_value, max_denominator=1000)
    raise InvalidArgument(f"unknown domain kind {kind!r}")


@st.composite
def _model_configs(
    draw: st.DrawFn, attention: str, explicit_head_dim: bool | None, tied: bool | None,
    max_layers: int, max_hidden: int,
) -> ModelConfig:
    kv_heads = draw(st.integers(1, 16))
    if attention == "mha":
        heads = kv_heads
    elif attention == "mqa":
        kv_heads = 1
        heads = draw(st.integers(1, 64))
    else:  # gqa (any group size, MHA and MQA included when attention == "any")
        heads = kv_heads * draw(st.integers(1 if attention == "any" else 2, 8))
    explicit = draw(st.booleans()) if explicit_head_dim is None else explicit_head_dim
    if explicit:
        head_dim = draw(st.sampled_from([32, 64, 80, 96, 128, 256]))
        hidden = draw(st.integers(1, max(1, max_hidden // 64))) * 64
    else:
        head_dim = draw(st.sampled_from([16, 32, 64, 128]))
        hidden = heads * head_dim
    return ModelConfig(
        name="generated",
        num_hidden_layers=draw(st.integers(1, max_layers)),
        hidden_size=hidden,
        intermediate_size=draw(st.integers(1, 4 * max_hidden)),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=draw(st.integers(1, 256_000)),
        tie_word_embeddings=draw(st.booleans()) if tied is None else tied,
        qkv_bias=draw(st.booleans()),
        gated_mlp=draw(st.booleans()),
        weight_dtype=draw(st.sampled_from(["bfloat16", "float16", "fp8", "int8", "int4", "float32"])),
        kv_dtype=draw(st.sampled_from(["bfloat16", "fp8", "float32"])),
    )


def model_configs(
    *,
    attention: str = "any",
    explicit_head_dim: bool | None = None,
    tied: bool | None = None,
    max_layers: int = 128,
    max_hidden: int = 16384,
) -> st.SearchStrategy[ModelConfig]:
    """Valid :class:`~roofline.ModelConfig` values of decoder-only transformers.

    Parameters
    ----------
    attention : {"any", "mha", "gqa", "mqa"}
        "gqa" draws a group size >= 2; "any" includes MHA (group 1) and MQA.
    explicit_head_dim : bool or None
        True: head_dim drawn independently of hidden / heads (Qwen3-like); False:
        head_dim = hidden / heads; None: either.
    tied : bool or None
        Tied embeddings, or either.
    max_layers : int >= 1
    max_hidden : int >= 64

    Raises
    ------
    InvalidArgument
        For an unknown ``attention`` or out-of-range maxima.
    """
    if attention not in ("any", "mha", "gqa", "mqa"):
        raise InvalidArgument(f"attention={attention!r}: expected 'any', 'mha', 'gqa' or 'mqa'")
    if max_layers < 1:
        raise InvalidArgument(f"max_layers={max_layers!r} must be >= 1")
    if max_hidden < 64:
        raise InvalidArgument(f"max_hidden={max_hidden!r} must be >= 64")
    return _model_configs(attention, explicit_head_dim, tied, max_layers, max_hidden)


def _sourced(value: Any, unit: str) -> Sourced:
    return Sourced(value, unit, Source("derived", "drawn by roofline.testing.strategies", "2026"))


@st.composite
def _generated_accelerators(draw: st.DrawFn) -> Accelerator:
    bandwidth = draw(st.integers(100, 10_000)) * 10**9
    peak = draw(st.integers(10, 5_000)) * 10**12
    memory = draw(st.integers(8, 300)) * 10**9
    return Accelerator(
        key="generated",
        name="generated accelerator",
        memory_label=_sourced(memory, "bytes"),
        memory_usable=_sourced(memory, "bytes"),
        hbm_bandwidth=_sourced(bandwidth, "bytes/s"),
        peak_bf16=_sourced(peak, "FLOP/s"),
    )


def accelerators(*, presets: bool = True, measured: bool = True, generated: bool = True) -> st.SearchStrategy[Accelerator]:
    """Accelerators: the shipped presets, their measured copies, and generated parts.

    Parameters
    ----------
    presets : bool
        Include the datasheet presets of :data:`roofline.hardware.ACCELERATORS`.
    measured : bool
        Include ``preset.measured()`` (achieved bandwidth and GEMM FLOP/s where published).
    generated : bool
        Include accelerators with drawn bandwidth (0.1 to 10 TB/s), dense peak
        (10 to 5,000 TFLOP/s) and memory (8 to 300 GB).

    Raises
    ------
    InvalidArgument
        If every option is False.
    """
    options: list[st.SearchStrategy[Accelerator]] = []
    parts = [ACCELERATORS[k] for k in sorted(ACCELERATORS)]
    if presets:
        options.append(st.sampled_from(parts))
    if measured:
        options.append(st.sampled_from([a.measured() for a in parts]))
    if generated:
        options.append(_generated_accelerators())
    if not options:
        raise InvalidArgument("at least one of presets, measured, generated must be True")
    return st.one_of(options)
