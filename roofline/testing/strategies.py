"""Hypothesis strategies for roofline's inputs, for our tests and for tools that use us.

Written by hand (``st.builds`` does not honour attrs validators), in Hypothesis's
house style: plural names, ``min_value``/``max_value``, keyword-only options, and
:class:`hypothesis.errors.InvalidArgument` for impossible combinations (raised when
the strategy is built, not when it is drawn from).

Every strategy draws only valid values (its output never raises in roofline's
validators) and shrinks towards small, simple cases: fewer requests, shorter
prompts and answers, earlier arrivals, smaller batches and pools.

Strategies
----------
* :func:`positive_fractions`, :func:`domain_values`: exact arguments of the formulas.
* :func:`model_configs`: decoder-only transformers (MHA, GQA, MQA, explicit head_dim,
  tied or not), generated or the shipped presets.
* :func:`accelerators`: the presets, their measured copies, and generated parts.
* :func:`links`: GPU-to-GPU links (the presets' NVLink, Infinity Fabric and PCIe, and
  generated ones) for tensor parallelism.
* :func:`requests`, :func:`workloads`: one :class:`roofline.sim.requests.Request`, or a
  workload (a tuple of them in arrival order with ids 0, 1, ...) with a chosen arrival
  pattern and length distribution.
* :func:`batch_sizes`, :func:`kv_budgets`, :func:`kv_pools`: scheduler settings.
* :func:`cost_models`: the scheduler's unit and roofline cost models.

Examples
--------
>>> from hypothesis import given, settings
>>> @settings(max_examples=20, deadline=None)
... @given(workloads(max_size=4, arrivals="zero"))
... def test_all_at_zero(workload):
...     assert all(r.arrival_s == 0 for r in workload)
>>> test_all_at_zero()
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from ..errors import InvalidValueError
from ..hardware import ACCELERATORS, Accelerator, Link, Source, Sourced
from ..models import ModelConfig, Quantization, get_model, model_names
from ..sim.cost import RooflineCostModel, UnitCostModel
from ..sim.kv import KVPool
from ..sim.requests import Request
from ..sim.workloads import ClosedLoop

__all__ = [
    "positive_fractions",
    "domain_values",
    "model_configs",
    "accelerators",
    "links",
    "requests",
    "workloads",
    "closed_loops",
    "batch_sizes",
    "kv_budgets",
    "kv_pools",
    "layer_windows",
    "state_mixers",
    "cost_models",
    "decode_stretches",
    "ARRIVALS",
    "LENGTHS",
    "TIME_RESOLUTION",
]

#: Arrival patterns of :func:`workloads`.
ARRIVALS = ("zero", "poisson", "uniform", "bursty", "boundaries", "whole_steps", "any")
#: Length distributions of :func:`workloads`.
LENGTHS = ("identical", "narrow", "uniform", "wide", "any")
#: Arrival times drawn by :func:`workloads` are multiples of this [s] (exact Fractions
#: with a bounded denominator, so that exact simulations stay fast).
TIME_RESOLUTION = Fraction(1, 10**6)


def _check_range(min_value: Any, max_value: Any, *, names: tuple[str, str] = ("min_value", "max_value")) -> None:
    if min_value is not None and max_value is not None and min_value > max_value:
        raise InvalidArgument(f"{names[0]}={min_value!r} is greater than {names[1]}={max_value!r}")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an integer")
    if value < minimum:
        raise InvalidArgument(f"{name}={value!r} must be >= {minimum}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidArgument(f"{name}={value!r}: expected one of {', '.join(map(repr, choices))}")


def _check_positive_number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, Fraction)) or value <= 0:
        raise InvalidArgument(f"{name}={value!r} must be an int or Fraction > 0")


# --------------------------------------------------------------------------- formula arguments


def positive_fractions(
    *, min_value: Fraction | int = Fraction(1, 1000), max_value: Fraction | int = 10**6, max_denominator: int = 1000
) -> st.SearchStrategy[Fraction]:
    """Exact positive Fractions in [min_value, max_value].

    Parameters
    ----------
    min_value : int or Fraction > 0, default 1/1000
    max_value : int or Fraction >= min_value, default 10**6
    max_denominator : int >= 1, default 1000

    Returns
    -------
    SearchStrategy of Fraction

    Raises
    ------
    InvalidArgument
        If ``min_value <= 0`` or ``min_value > max_value``.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(positive_fractions(max_value=1), lambda x: x > Fraction(1, 2)) <= 1
    True
    """
    if min_value <= 0:
        raise InvalidArgument(f"min_value={min_value!r} must be > 0")
    _check_range(min_value, max_value)
    return st.fractions(min_value=min_value, max_value=max_value, max_denominator=max_denominator)


def domain_values(kind: str, *, max_value: int = 10**6) -> st.SearchStrategy[Any]:
    """Exact values (Fraction or int) of a formula argument domain (``roofline.formulas.DOMAINS``).

    Parameters
    ----------
    kind : {"positive", "nonnegative", "positive_int", "nonnegative_int", "share", "real"}
        ``"positive"``, ``"nonnegative"``, ``"share"`` and ``"real"`` give Fractions;
        ``"positive_int"`` and ``"nonnegative_int"`` give ints.
    max_value : int, default 10**6

    Returns
    -------
    SearchStrategy of Fraction or int

    Raises
    ------
    InvalidArgument
        For an unknown domain kind.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(domain_values("share"), lambda x: True)
    Fraction(1, 1000)
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


# --------------------------------------------------------------------------- models


def _attention_kind(model: ModelConfig) -> str:
    if model.num_key_value_heads == model.num_attention_heads:
        return "mha"
    if model.num_key_value_heads == 1:
        return "mqa"
    return "gqa"


def _preset_matches(model: ModelConfig, attention: str, explicit_head_dim: bool | None, tied: bool | None) -> bool:
    if attention == "gqa" and model.num_attention_heads // model.num_key_value_heads < 2:
        return False
    if attention in ("mha", "mqa") and _attention_kind(model) != attention:
        return False
    explicit = model.head_dim != model.hidden_size // model.num_attention_heads
    if explicit_head_dim is not None and explicit != explicit_head_dim:
        return False
    return tied is None or model.tie_word_embeddings == tied


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


_ARCHITECTURES = ("dense", "moe", "mla", "sliding", "quantized", "hybrid", "any")


def _architecture_of(model: ModelConfig, architecture: str) -> bool:
    if model.is_hybrid:  # priced by the hybrid formulas: drawn only when asked for
        return architecture == "hybrid"
    kinds = {"moe": model.is_moe, "mla": model.is_mla, "sliding": model.has_sliding_window,
             "quantized": model.quantization is not None, "towers": bool(model.tower_parameters)}
    if architecture == "dense":
        return not any(kinds.values())
    return architecture == "any" or kinds.get(architecture, False)


def _with_architecture(base: st.SearchStrategy[ModelConfig], architecture: str) -> st.SearchStrategy[ModelConfig]:
    @st.composite
    def build(draw: st.DrawFn) -> ModelConfig:
        m = draw(base)
        kind = draw(st.sampled_from(["moe", "mla", "sliding", "quantized"])) if architecture == "any" else architecture
        L = m.num_hidden_layers
        if kind == "hybrid":
            mixer = draw(state_mixers(max_layers=max(1, min(L - 1, 8)), max_width=64))
            return attrs.evolve(m, num_hidden_layers=max(L, mixer.layers + 1), state_mixer=mixer,
                                state_dtype=draw(st.sampled_from(["bfloat16", "float32"])))
        if kind == "moe":
            experts = draw(st.integers(1, 256))
            return attrs.evolve(
                m, num_experts=experts, num_experts_per_tok=draw(st.integers(1, experts)),
                moe_intermediate_size=draw(st.integers(1, 4096)), num_moe_layers=draw(st.integers(1, L)),
                shared_expert_intermediate_size=draw(st.sampled_from([0, 0, 512, 1408])),
                router_bias=draw(st.booleans()), expert_bias=draw(st.booleans()))
        if kind == "mla":
            return attrs.evolve(
                m, q_lora_rank=draw(st.none() | st.integers(1, 2048)), kv_lora_rank=draw(st.integers(1, 1024)),
                qk_nope_head_dim=draw(st.sampled_from([32, 64, 128])), qk_rope_head_dim=draw(st.sampled_from([16, 64])),
                v_head_dim=draw(st.sampled_from([32, 64, 128])))
        if kind == "sliding":
            windows = draw(st.lists(st.none() | st.integers(1, 8192), min_size=L, max_size=L).filter(
                lambda ws: any(w is not None for w in ws)))
            return attrs.evolve(m, layer_windows=tuple(windows))
        quant = draw(st.sampled_from([
            Quantization("gptq", 4, "group+zero", 128), Quantization("awq", 4, "group+zero", 128),
            Quantization("gptq", 8, "group+zero", -1), Quantization("fp8", 8, "block", block=(128, 128)),
            Quantization("fp8", 8, "tensor"), Quantization("mxfp4", 4, "mxfp4", 32)]))
        return attrs.evolve(m, weight_dtype="bfloat16", quantization=quant,
                            activation_dtype="fp8" if quant.method == "fp8" else None)

    return build()


def model_configs(
    *,
    attention: str = "any",
    explicit_head_dim: bool | None = None,
    tied: bool | None = None,
    max_layers: int = 128,
    max_hidden: int = 16384,
    presets: bool = False,
    generated: bool = True,
    architecture: str = "dense",
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
        Generated models only (presets keep their own sizes).
    max_hidden : int >= 64
        Generated models only.
    presets : bool, default False
        Include the shipped presets (:func:`roofline.model_names`, in BF16 as shipped)
        that match ``attention``, ``explicit_head_dim`` and ``tied``.
    generated : bool, default True
        Include generated configs.
    architecture : {"dense", "moe", "mla", "sliding", "quantized", "hybrid", "any"}, default "dense"
        "dense" (the default): the dense Llama-shaped models, as before (presets with
        experts, latent attention, sliding windows, other towers, quantization or recurrent
        layers are left out). "moe": routed experts (E, k <= E, shared experts, dense layers
        among MoE layers); "mla": multi-head latent attention; "sliding": per-layer windows;
        "quantized": a GPTQ/AWQ/FP8/mxfp4 quantization_config; "hybrid": recurrent layers
        (:func:`state_mixers`) beside attention, priced by :mod:`roofline.formulas.hybrid`;
        "any": all of these but "hybrid".

    Returns
    -------
    SearchStrategy of ModelConfig

    Raises
    ------
    InvalidArgument
        For an unknown ``attention``, out-of-range maxima, or options that leave
        nothing to draw (``generated=False`` and no preset matches).

    Examples
    --------
    >>> from hypothesis import find
    >>> find(model_configs(attention="mqa"), lambda m: m.num_attention_heads > 1).num_key_value_heads
    1
    >>> find(model_configs(presets=True, generated=False, tied=True), lambda m: True).tie_word_embeddings
    True
    """
    if attention not in ("any", "mha", "gqa", "mqa"):
        raise InvalidArgument(f"attention={attention!r}: expected 'any', 'mha', 'gqa' or 'mqa'")
    if architecture not in _ARCHITECTURES:
        raise InvalidArgument(f"architecture={architecture!r}: expected one of {', '.join(_ARCHITECTURES)}")
    _check_int("max_layers", max_layers, 1)
    _check_int("max_hidden", max_hidden, 64)
    options: list[st.SearchStrategy[ModelConfig]] = []
    if generated:
        base = _model_configs(attention, explicit_head_dim, tied, max_layers, max_hidden)
        options.append(base if architecture == "dense" else _with_architecture(base, architecture))
    if presets:
        matching = [m for m in (get_model(n) for n in model_names())
                    if _preset_matches(m, attention, explicit_head_dim, tied) and _architecture_of(m, architecture)]
        if matching:
            options.insert(0, st.sampled_from(matching))
    if not options:
        raise InvalidArgument(
            f"no model to draw: generated=False and no preset has attention={attention!r}, "
            f"explicit_head_dim={explicit_head_dim!r}, tied={tied!r}"
        )
    return st.one_of(options)


# --------------------------------------------------------------------------- accelerators


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


def accelerators(
    *, presets: bool = True, measured: bool = True, generated: bool = True
) -> st.SearchStrategy[Accelerator]:
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

    Returns
    -------
    SearchStrategy of Accelerator

    Raises
    ------
    InvalidArgument
        If every option is False.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(accelerators(generated=False, measured=False), lambda a: True).key in ACCELERATORS
    True
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


_all_accelerators = accelerators  # for cost_models, whose keyword argument has this name


@st.composite
def _generated_links(draw: st.DrawFn) -> Link:
    bandwidth = draw(st.integers(1, 2_000)) * 10**9
    latency = Fraction(draw(st.integers(1, 100)), 10**7)  # 0.1 to 10 us in 0.1 us steps
    return Link(name="generated link", bandwidth=_sourced(bandwidth, "bytes/s"), latency=_sourced(latency, "s"))


def links(*, presets: bool = True, generated: bool = True) -> st.SearchStrategy[Link]:
    """GPU-to-GPU links (:class:`roofline.hardware.Link`): the presets' and generated ones.

    Parameters
    ----------
    presets : bool
        Include every scale-up and PCIe link of :data:`roofline.hardware.ACCELERATORS`.
    generated : bool
        Include links with drawn bandwidth (1 GB/s to 2 TB/s per direction) and latency
        (0.1 to 10 us per ring step).

    Returns
    -------
    SearchStrategy of Link

    Raises
    ------
    InvalidArgument
        If both options are False.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(links(generated=False), lambda link: link.name.startswith("NVLink 5")).bandwidth.value
    900000000000
    """
    options: list[st.SearchStrategy[Link]] = []
    if presets:
        parts = [ACCELERATORS[k] for k in sorted(ACCELERATORS)]
        preset_links = [link for a in parts for link in (a.scale_up, a.pcie) if link is not None]
        options.append(st.sampled_from(preset_links))
    if generated:
        options.append(_generated_links())
    if not options:
        raise InvalidArgument("at least one of presets, generated must be True")
    return st.one_of(options)


# --------------------------------------------------------------------------- requests and workloads


def _check_lengths(min_prompt_tokens: int, max_prompt_tokens: int, min_output_tokens: int,
                   max_output_tokens: int) -> None:
    _check_int("min_prompt_tokens", min_prompt_tokens, 1)
    _check_int("max_prompt_tokens", max_prompt_tokens, 1)
    _check_int("min_output_tokens", min_output_tokens, 1)
    _check_int("max_output_tokens", max_output_tokens, 1)
    _check_range(min_prompt_tokens, max_prompt_tokens, names=("min_prompt_tokens", "max_prompt_tokens"))
    _check_range(min_output_tokens, max_output_tokens, names=("min_output_tokens", "max_output_tokens"))


def _times(max_arrival_s: Any) -> st.SearchStrategy[Fraction]:
    steps = int(Fraction(max_arrival_s) / TIME_RESOLUTION)
    return st.integers(0, steps).map(lambda k: k * TIME_RESOLUTION)


def requests(
    *,
    id: int | None = None,
    min_prompt_tokens: int = 1,
    max_prompt_tokens: int = 2048,
    min_output_tokens: int = 1,
    max_output_tokens: int = 512,
    max_arrival_s: int | Fraction = 0,
) -> st.SearchStrategy[Request]:
    """One :class:`~roofline.sim.requests.Request` (exact arrival time, integer lengths).

    Parameters
    ----------
    id : int >= 0 or None
        The request's id; None draws one in [0, 10**6].
    min_prompt_tokens, max_prompt_tokens : int >= 1 [tokens]
        Range of P.
    min_output_tokens, max_output_tokens : int >= 1 [tokens]
        Range of O.
    max_arrival_s : int or Fraction >= 0 [s], default 0
        Arrival drawn in [0, max_arrival_s] on the :data:`TIME_RESOLUTION` grid.

    Returns
    -------
    SearchStrategy of Request

    Raises
    ------
    InvalidArgument
        A negative id or arrival bound, a length minimum below 1, or a minimum above
        its maximum.

    Notes
    -----
    Shrinks towards id 0, arrival 0, P = ``min_prompt_tokens``, O = ``min_output_tokens``.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(requests(min_output_tokens=5, max_output_tokens=9), lambda r: True)
    Request(id=0, arrival_s=Fraction(0, 1), prompt_tokens=1, output_tokens=5)
    """
    if id is not None:
        _check_int("id", id, 0)
    _check_lengths(min_prompt_tokens, max_prompt_tokens, min_output_tokens, max_output_tokens)
    if isinstance(max_arrival_s, bool) or not isinstance(max_arrival_s, (int, Fraction)) or max_arrival_s < 0:
        raise InvalidArgument(f"max_arrival_s={max_arrival_s!r} must be an int or Fraction >= 0")
    return st.builds(
        Request,
        id=st.just(id) if id is not None else st.integers(0, 10**6),
        arrival_s=_times(max_arrival_s),
        prompt_tokens=st.integers(min_prompt_tokens, max_prompt_tokens),
        output_tokens=st.integers(min_output_tokens, max_output_tokens),
    )


def _log_scale(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], spread evenly on a log scale (shrinks towards lo)."""
    if lo == hi:
        return st.just(lo)
    ratio = math.log(hi / lo)
    return st.integers(0, 1000).map(lambda e: min(hi, max(lo, round(lo * math.exp(ratio * e / 1000)))))


@st.composite
def _lengths(draw: st.DrawFn, n: int, kind: str, lo: int, hi: int) -> list[int]:
    if kind == "any":
        kind = draw(st.sampled_from(LENGTHS[:-1]))
    if kind == "identical":
        return [draw(st.integers(lo, hi))] * n
    if kind == "narrow":  # all within +-12.5% of a drawn centre
        centre = draw(st.integers(lo, hi))
        spread = centre // 8
        a, b = max(lo, centre - spread), min(hi, centre + spread)
        return [draw(st.integers(a, b)) for _ in range(n)]
    if kind == "wide":
        scale = _log_scale(lo, hi)
        return [draw(scale) for _ in range(n)]
    return [draw(st.integers(lo, hi)) for _ in range(n)]  # uniform: each from the whole range


def _quantise(seconds: float) -> Fraction:
    return round(Fraction(seconds) / TIME_RESOLUTION) * TIME_RESOLUTION


@st.composite
def _arrival_times(draw: st.DrawFn, n: int, kind: str, rate: Fraction) -> list[Fraction]:
    if kind == "any":
        kind = draw(st.sampled_from(ARRIVALS[:-1]))
    if kind == "zero" or n == 0:
        return [Fraction(0)] * n
    mean_gap = 1 / rate
    gaps: list[Fraction] = []
    if kind == "poisson":
        u = st.floats(min_value=0, max_value=1, exclude_max=True)
        gaps = [_quantise(-math.log1p(-draw(u)) * float(mean_gap)) for _ in range(n - 1)]
    elif kind == "uniform":
        gaps = [draw(_times(2 * mean_gap)) for _ in range(n - 1)]
    elif kind == "whole_steps":  # whole multiples of the mean gap (step boundaries when it is the step time)
        gaps = [draw(st.sampled_from([0, 0, 1, 2, 3])) * mean_gap for _ in range(n - 1)]
    elif kind == "boundaries":  # mostly 0, half a gap, one or three whole gaps; sometimes any gap in [0, 8 gaps]
        whole = st.sampled_from([Fraction(0), Fraction(0), mean_gap / 2, mean_gap, 3 * mean_gap])
        gaps = [draw(whole | _times(8 * mean_gap)) for _ in range(n - 1)]
    else:  # bursty: a request joins the current burst or opens a new one after a longer gap
        u = st.floats(min_value=0, max_value=1, exclude_max=True)
        for _ in range(n - 1):
            new_burst = draw(st.booleans())
            gaps.append(_quantise(-math.log1p(-draw(u)) * float(4 * mean_gap)) if new_burst else Fraction(0))
    times = [Fraction(0)]
    for g in gaps:
        times.append(times[-1] + g)
    return times


@st.composite
def _workloads(draw: st.DrawFn, min_size: int, max_size: int, arrivals: str, lengths: str, rate: Fraction,
               prompt: tuple[int, int], output: tuple[int, int]) -> tuple[Request, ...]:
    n = draw(st.integers(min_size, max_size))
    times = draw(_arrival_times(n, arrivals, rate))
    ps = draw(_lengths(n, lengths, *prompt))
    os_ = draw(_lengths(n, lengths, *output))
    return tuple(Request(id=i, arrival_s=t, prompt_tokens=p, output_tokens=o)
                 for i, (t, p, o) in enumerate(zip(times, ps, os_, strict=True)))


def workloads(
    *,
    min_size: int = 1,
    max_size: int = 16,
    arrivals: str = "any",
    lengths: str = "any",
    rate: int | Fraction = 1,
    min_prompt_tokens: int = 1,
    max_prompt_tokens: int = 256,
    min_output_tokens: int = 1,
    max_output_tokens: int = 64,
) -> st.SearchStrategy[tuple[Request, ...]]:
    """Workloads: tuples of :class:`~roofline.sim.requests.Request` in arrival order, ids 0, 1, ...

    Every workload passes :func:`roofline.sim.requests.check_requests`. Arrival times are
    exact Fractions on the :data:`TIME_RESOLUTION` grid; the first request arrives at 0.

    Parameters
    ----------
    min_size, max_size : int, 0 <= min_size <= max_size
        Number of requests.
    arrivals : {"zero", "poisson", "uniform", "bursty", "boundaries", "any"}
        ``"zero"``: everyone at t = 0. ``"poisson"``: exponential gaps of mean 1 / rate
        (a Poisson process, quantised). ``"uniform"``: gaps drawn from [0, 2 / rate].
        ``"bursty"``: requests come in bursts that share one arrival instant; bursts are
        separated by exponential gaps of mean 4 / rate. ``"boundaries"``: gaps mostly 0,
        1 / (2 rate), 1 / rate or 3 / rate (with unit steps and rate 1, arrivals fall on step
        boundaries and between them), sometimes any gap in [0, 8 / rate]. ``"whole_steps"``:
        gaps of 0, 1, 2 or 3 times 1 / rate exactly (with rate = 1 / step time, every arrival is
        on a step boundary). ``"any"``: one of these per workload. (``"boundaries"`` and
        ``"whole_steps"`` gaps are exact multiples of 1 / rate, on the :data:`TIME_RESOLUTION`
        grid only when 1 / rate is.)
    lengths : {"identical", "narrow", "uniform", "wide", "any"}
        How prompt and output lengths spread (each drawn separately, same kind):
        ``"identical"``: one P and one O for all requests. ``"narrow"`` (small spread):
        all within +-12.5% of a drawn centre. ``"uniform"``: each independently from the
        whole range. ``"wide"`` (large spread): each independently on a log scale over the
        range, so short and long requests mix. ``"any"``: one of these per workload.
    rate : int or Fraction > 0 [requests/s], default 1
        Mean arrival rate (1 request per unit-cost step by default).
    min_prompt_tokens, max_prompt_tokens : int >= 1 [tokens]
    min_output_tokens, max_output_tokens : int >= 1 [tokens]

    Returns
    -------
    SearchStrategy of tuple of Request

    Raises
    ------
    InvalidArgument
        ``min_size > max_size``, a negative size, an unknown ``arrivals`` or
        ``lengths``, ``rate <= 0``, a length minimum below 1 or above its maximum.

    Notes
    -----
    Hypothesis chooses the values to find failures, so the draws are **not** iid
    samples of the named distribution: use the names for coverage (small and large
    spread, simultaneous and spread-out arrivals), and a seeded sampler for statistics.
    Shrinks towards fewer requests, all arriving at 0, with the minimum lengths.

    Examples
    --------
    >>> from hypothesis import find
    >>> w = find(workloads(min_size=3, lengths="identical"), lambda w: w[0].output_tokens > 1)
    >>> [(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in w]
    [(0, Fraction(0, 1), 1, 2), (1, Fraction(0, 1), 1, 2), (2, Fraction(0, 1), 1, 2)]
    """
    _check_int("min_size", min_size, 0)
    _check_int("max_size", max_size, 0)
    _check_range(min_size, max_size, names=("min_size", "max_size"))
    _check_choice("arrivals", arrivals, ARRIVALS)
    _check_choice("lengths", lengths, LENGTHS)
    _check_positive_number("rate", rate)
    _check_lengths(min_prompt_tokens, max_prompt_tokens, min_output_tokens, max_output_tokens)
    return _workloads(min_size, max_size, arrivals, lengths, Fraction(rate),
                      (min_prompt_tokens, max_prompt_tokens), (min_output_tokens, max_output_tokens))


def closed_loops(
    *,
    min_clients: int = 1,
    max_clients: int = 8,
    min_size: int = 1,
    max_size: int = 16,
    lengths: str = "any",
    min_prompt_tokens: int = 1,
    max_prompt_tokens: int = 256,
    min_output_tokens: int = 1,
    max_output_tokens: int = 64,
    think: bool = True,
) -> st.SearchStrategy[ClosedLoop]:
    """Closed-loop workloads (:class:`roofline.sim.ClosedLoop`): N clients sending drawn lengths in turn.

    Parameters
    ----------
    min_clients, max_clients : int, 1 <= min_clients <= max_clients
    min_size, max_size : int, 0 <= min_size <= max_size, the requests sent in all
    lengths : as :func:`workloads`
    min_prompt_tokens, max_prompt_tokens, min_output_tokens, max_output_tokens : int >= 1 [tokens]
    think : bool, default True
        Draw a think time: 0, 1/2, 3, or an exact Fraction in [0, 4] with denominator <= 6 [s];
        False: always 0.

    Returns
    -------
    SearchStrategy of ClosedLoop (shrinks towards one client, few short requests, no think time)

    Raises
    ------
    InvalidArgument
        A bad range or an unknown ``lengths``.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(closed_loops(min_clients=2, min_size=3), lambda c: True)
    ClosedLoop(clients=2, lengths=((1, 1), (1, 1), (1, 1)), think_time_s=0, seed=None)
    """
    _check_int("min_clients", min_clients, 1)
    _check_int("max_clients", max_clients, 1)
    _check_range(min_clients, max_clients, names=("min_clients", "max_clients"))
    _check_int("min_size", min_size, 0)
    _check_int("max_size", max_size, 0)
    _check_range(min_size, max_size, names=("min_size", "max_size"))
    _check_choice("lengths", lengths, LENGTHS)
    _check_lengths(min_prompt_tokens, max_prompt_tokens, min_output_tokens, max_output_tokens)
    thinks = (st.sampled_from([0, Fraction(1, 2), 3]) | st.fractions(0, 4, max_denominator=6)) if think else st.just(0)
    return _closed_loops(min_clients, max_clients, min_size, max_size, lengths,
                         (min_prompt_tokens, max_prompt_tokens), (min_output_tokens, max_output_tokens), thinks)


@st.composite
def _closed_loops(draw: st.DrawFn, min_clients: int, max_clients: int, min_size: int, max_size: int, lengths: str,
                  prompt: tuple[int, int], output: tuple[int, int], thinks: st.SearchStrategy[Any]) -> ClosedLoop:
    clients = draw(st.integers(min_clients, max_clients))
    n = draw(st.integers(min_size, max_size))
    ps = draw(_lengths(n, lengths, *prompt))
    os_ = draw(_lengths(n, lengths, *output))
    return ClosedLoop(clients=clients, lengths=list(zip(ps, os_, strict=True)), think_time_s=draw(thinks))


# --------------------------------------------------------------------------- scheduler settings


def batch_sizes(*, min_value: int = 1, max_value: int = 64) -> st.SearchStrategy[int]:
    """Maximum batch sizes [sequences]: integers in [min_value, max_value].

    Parameters
    ----------
    min_value : int >= 1, default 1
    max_value : int >= min_value, default 64

    Returns
    -------
    SearchStrategy of int (shrinks towards ``min_value``)

    Raises
    ------
    InvalidArgument
        ``min_value < 1`` or ``max_value < min_value``.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(batch_sizes(min_value=4), lambda b: True)
    4
    """
    _check_int("min_value", min_value, 1)
    _check_int("max_value", max_value, 1)
    _check_range(min_value, max_value)
    return st.integers(min_value, max_value)


@st.composite
def _budgets_of(draw: st.DrawFn, model: ModelConfig, accelerator: Accelerator) -> Fraction:
    from ..estimate import kv_budget_for

    low = Fraction(model.weight_bytes) / Fraction(accelerator.usable_memory)  # utilization leaving 0 bytes
    grid = [Fraction(k, 100) for k in range(50, 101) if Fraction(k, 100) > low]
    utilization = draw(st.sampled_from(grid[::-1]))  # shrinks towards 1 (the largest budget)
    spare = Fraction(accelerator.usable_memory) * utilization - Fraction(model.weight_bytes)
    reserved = draw(st.integers(0, 20)) * (spare / 40)  # up to half the spare memory
    return kv_budget_for(model, accelerator, utilization=utilization, reserved=reserved)


def kv_budgets(
    *,
    min_value: int = 0,
    max_value: int = 10**12,
    model: ModelConfig | None = None,
    accelerator: Accelerator | None = None,
) -> st.SearchStrategy[Any]:
    """KV-cache budgets [bytes]: drawn integers, or the real budget of a model on an accelerator.

    Parameters
    ----------
    min_value, max_value : int [bytes], 0 <= min_value <= max_value
        Range of the drawn integer budgets (ignored when ``model`` is given).
    model : ModelConfig or None
    accelerator : Accelerator or None
        Both or neither. When given, the budget is
        :func:`roofline.estimate.kv_budget_for` at a drawn utilization in
        {0.50, 0.51, ..., 1} and a drawn reserved share of the spare memory (an exact
        Fraction > 0; shrinks towards utilization 1 and nothing reserved).

    Returns
    -------
    SearchStrategy of int or Fraction [bytes]

    Raises
    ------
    InvalidArgument
        A bad range, only one of ``model`` and ``accelerator``, or a model whose weights
        leave no KV budget on the accelerator even at utilization 1.

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> from roofline.estimate import kv_budget_for
    >>> from hypothesis import find
    >>> b = find(kv_budgets(model=get_model("llama-3.1-8b"), accelerator=get_accelerator("h100-sxm")), lambda b: True)
    >>> b == kv_budget_for(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), utilization=1)
    True
    """
    if (model is None) != (accelerator is None):
        raise InvalidArgument("give both model and accelerator, or neither")
    if model is not None and accelerator is not None:
        if Fraction(model.weight_bytes) >= Fraction(accelerator.usable_memory):
            raise InvalidArgument(f"{model.name} weights leave no KV budget on {accelerator.name}")
        return _budgets_of(model, accelerator)
    _check_int("min_value", min_value, 0)
    _check_int("max_value", max_value, 0)
    _check_range(min_value, max_value)
    return st.integers(min_value, max_value)


def kv_pools(
    *,
    min_blocks: int = 1,
    max_blocks: int = 4096,
    block_size: int | None = None,
    max_block_size: int = 32,
    unlimited: bool | None = False,
    tight_for: Sequence[Request] | None = None,
    layer_windows: Sequence[int | None] = (),
) -> st.SearchStrategy[KVPool]:
    """KV pools of the reference scheduler (:class:`roofline.sim.kv.KVPool`).

    Parameters
    ----------
    min_blocks, max_blocks : int, 0 <= min_blocks <= max_blocks [blocks]
    block_size : int >= 1 or None [tokens/block]
        A fixed block size (1 is token-level accounting), or None to draw one in
        [1, max_block_size].
    max_block_size : int >= 1
    unlimited : bool or None, default False
        False: finite pools only; True: unlimited pools only (``capacity_blocks=None``);
        None: either.
    tight_for : sequence of Request or None
        A workload to size the pool for: three draws in four give a pool of
        ``block_size`` (or a drawn one up to ``max_block_size``) blocks holding from one block
        less than the largest request's lifetime KV, blocks_for(P + O - 1), up to 1.5 times it
        plus 2 blocks, so that each request fits alone (the largest sometimes not) but few fit
        together and on-demand admission preempts; the fourth a pool drawn as without it.
        An empty workload draws as without it.
    layer_windows : sequence of (int >= 1 or None), default () (full attention)
        Pools of a model with these sliding windows (counted in layer-blocks; ``min_blocks`` and
        ``max_blocks`` then count layer-blocks, and ``tight_for`` sizes by
        :meth:`KVPool.lifetime_blocks`). Draw the windows from :func:`layer_windows`.

    Returns
    -------
    SearchStrategy of KVPool (shrinks towards few blocks of 1 token)

    Raises
    ------
    InvalidArgument
        A bad block range or block size.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(kv_pools(unlimited=None), lambda p: True)
    KVPool(capacity_blocks=1, block_size=1)
    """
    _check_int("min_blocks", min_blocks, 0)
    _check_int("max_blocks", max_blocks, 0)
    _check_range(min_blocks, max_blocks, names=("min_blocks", "max_blocks"))
    if block_size is not None:
        _check_int("block_size", block_size, 1)
    else:
        _check_int("max_block_size", max_block_size, 1)
    if unlimited not in (True, False, None):
        raise InvalidArgument(f"unlimited={unlimited!r} must be True, False or None")
    try:
        windows = KVPool(None, layer_windows=layer_windows).layer_windows
    except InvalidValueError as e:
        raise InvalidArgument(f"layer_windows={layer_windows!r}: {e}") from None
    plain = _kv_pools(min_blocks, max_blocks, block_size, max_block_size, unlimited, windows)
    if not tight_for:
        return plain
    if not all(isinstance(r, Request) for r in tight_for):
        raise InvalidArgument("tight_for must be a sequence of roofline.sim.Request")
    return _tight_pools(tuple(tight_for), block_size, max_block_size, plain, windows)


@st.composite
def _tight_pools(draw: st.DrawFn, reqs: tuple[Request, ...], block_size: int | None, max_block_size: int,
                 plain: st.SearchStrategy[KVPool], windows: tuple[int | None, ...]) -> KVPool:
    if draw(st.integers(0, 3)) == 0:
        return draw(plain)
    b = block_size if block_size is not None else draw(st.integers(1, max_block_size))
    sizer = KVPool(None, b, layer_windows=windows)
    need = max(sizer.lifetime_blocks(r.prompt_tokens, r.output_tokens) for r in reqs)
    return KVPool(draw(st.integers(max(need - 1, 0), need + need // 2 + 2)), b, layer_windows=windows)


@st.composite
def _kv_pools(draw: st.DrawFn, min_blocks: int, max_blocks: int, block_size: int | None, max_block_size: int,
              unlimited: bool | None, windows: tuple[int | None, ...]) -> KVPool:
    # the same draws on every branch, so that shrinking goes to the first (finite, small) one
    infinite = draw(st.booleans()) if unlimited is None else unlimited
    blocks = draw(st.integers(min_blocks, max_blocks))
    size = block_size if block_size is not None else draw(st.integers(1, max_block_size))
    return KVPool(None if infinite else blocks, size, layer_windows=windows)


def layer_windows(*, max_layers: int = 4, max_window: int = 12) -> st.SearchStrategy[tuple[int | None, ...]]:
    """Per-layer sliding windows with at least one windowed layer (:attr:`roofline.ModelConfig.layer_windows`).

    Parameters
    ----------
    max_layers : int >= 1
        Layers (1 to max_layers); each is full attention (None) or has a window in [1, max_window].
    max_window : int >= 1 [tokens]
        Small windows (with small prompts) make windows, block boundaries and full attention meet often.

    Returns
    -------
    SearchStrategy of tuple of (int or None), with at least one int (shrinks towards ``(1,)``)

    Raises
    ------
    InvalidArgument
        A bound below 1.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(layer_windows(), lambda w: True)
    (1,)
    """
    _check_int("max_layers", max_layers, 1)
    _check_int("max_window", max_window, 1)
    return _layer_windows(max_layers, max_window)


@st.composite
def _layer_windows(draw: st.DrawFn, max_layers: int, max_window: int) -> tuple[int | None, ...]:
    windowed = draw(st.integers(1, max_window))  # at least one layer slides
    others = draw(st.lists(st.none() | st.integers(1, max_window), max_size=max_layers - 1))
    at = draw(st.integers(0, len(others)))
    return (*others[:at], windowed, *others[at:])


def state_mixers(*, kind: str | None = None, max_layers: int = 3, max_width: int = 8) -> st.SearchStrategy[Any]:
    """Recurrent layers of a hybrid model (:class:`roofline.hybrid.StateMixer`), small.

    Parameters
    ----------
    kind : one of :data:`roofline.hybrid.STATE_KINDS` or None
        None draws any of them.
    max_layers : int >= 1
        Recurrent layers (1 to max_layers); a model holding them needs at least one more layer.
    max_width : int >= 1
        Heads, head widths, key heads (groups) and key (state) widths in [1, max_width]; conv kernel in [2, 4]
        (every model has one of at least 2: a kernel of 1 would leave a short convolution no state).

    Returns
    -------
    SearchStrategy of StateMixer (shrinks towards one Gated DeltaNet layer of width 1)

    Raises
    ------
    InvalidArgument
        An unknown kind or a bound below 1.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(state_mixers(), lambda m: True).layer_state_elements
    4
    """
    from ..hybrid import STATE_KINDS, StateMixer

    if kind is not None:
        _check_choice("kind", kind, STATE_KINDS)
    _check_int("max_layers", max_layers, 1)
    _check_int("max_width", max_width, 1)
    width = st.integers(1, max_width)
    return st.builds(StateMixer, st.just(kind) if kind else st.sampled_from(STATE_KINDS), st.integers(1, max_layers),
                     width, width, width, width, st.integers(2, 4), st.booleans(), st.booleans())


def cost_models(
    *,
    kind: str = "any",
    models: st.SearchStrategy[ModelConfig] | None = None,
    accelerators: st.SearchStrategy[Accelerator] | None = None,
    flops: str | None = None,
    overhead: bool = False,
    layer_windows: Sequence[int | None] = (),
) -> st.SearchStrategy[Any]:
    """Cost models of the reference scheduler: unit step times or the roofline of a model on a part.

    Parameters
    ----------
    kind : {"unit", "roofline", "any"}
        ``"unit"``: :class:`~roofline.sim.cost.UnitCostModel` with exact decode and prefill
        durations, each 1 or a Fraction in [1/100, 10] with denominator <= 100 (shrinks to
        1 and 1). ``"roofline"``: :meth:`RooflineCostModel.for_model` in exact mode.
        ``"any"``: either.
    models : strategy of ModelConfig or None
        Default: the presets and generated configs (:func:`model_configs` with ``presets=True``).
    accelerators : strategy of Accelerator or None
        Default: :func:`accelerators` (presets, measured copies, generated).
    flops : {"exact", "2p"} or None
        The FLOPs convention, or None to draw either.
    overhead : bool, default False
        Draw a fixed per-step overhead in [0, 1 ms] (exact) instead of 0.
    layer_windows : sequence of (int >= 1 or None), default ()
        Sliding windows (from :func:`layer_windows`): each drawn model gets these windows and
        ``len(layer_windows)`` layers, so its roofline cost model takes contexts in token-layers
        (:class:`~roofline.sim.RooflineCostModel`); pair it with a pool of the same windows
        (:func:`kv_pools`). Unit cost models are unchanged.

    Returns
    -------
    SearchStrategy of UnitCostModel or RooflineCostModel (exact: every duration an int or
    Fraction)

    Raises
    ------
    InvalidArgument
        An unknown ``kind`` or ``flops``.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(cost_models(), lambda c: True)
    UnitCostModel(decode=1, prefill=1)
    """
    _check_choice("kind", kind, ("unit", "roofline", "any"))
    if flops is not None:
        _check_choice("flops", flops, ("exact", "2p"))
    durations = st.fractions(min_value=Fraction(1, 100), max_value=10, max_denominator=100).map(
        lambda x: int(x) if x.denominator == 1 else x
    )
    unit = st.builds(UnitCostModel, decode=st.one_of(st.just(1), durations), prefill=st.one_of(st.just(1), durations))
    overheads = st.integers(0, 1000).map(lambda k: Fraction(k, 10**6)) if overhead else st.just(0)
    base = models if models is not None else model_configs(presets=True, max_layers=96)
    if layer_windows:
        try:
            windows = KVPool(None, layer_windows=layer_windows).layer_windows
        except InvalidValueError as e:
            raise InvalidArgument(f"layer_windows={layer_windows!r}: {e}") from None
        base = base.map(lambda m: attrs.evolve(m, num_hidden_layers=len(windows), layer_windows=windows))
    roof = st.builds(
        lambda m, a, fl, oh: RooflineCostModel.for_model(m, a, flops=fl, overhead=oh),
        base,
        accelerators if accelerators is not None else _all_accelerators(),
        st.just(flops) if flops is not None else st.sampled_from(["exact", "2p"]),
        overheads,
    )
    if kind == "unit":
        return unit
    if kind == "roofline":
        return roof
    return st.one_of(unit, roof)


# --------------------------------------------------------------------------- decode stretches

_STEP_TERMS = ("weight_bytes", "kv_bytes_per_token", "flops_per_token", "attention_flops_per_token", "bandwidth",
               "peak_flops")


@st.composite
def _decode_stretches(draw: st.DrawFn, crossing: bool, max_batch: int, max_context_sum: int,
                      max_crossover: int) -> dict[str, Any]:
    kw: dict[str, Any] = {name: draw(positive_fractions(max_value=1000)) for name in _STEP_TERMS}
    kw["batch"] = draw(st.integers(1, max_batch))
    kw["context_sum"] = draw(st.integers(0, max_context_sum))
    kw["overhead"] = draw(st.sampled_from([Fraction(0), Fraction(1, 7), Fraction(3)]))
    if not crossing:
        for name in ("kv_bytes_per_token", "attention_flops_per_token"):
            if draw(st.booleans()):
                kw[name] = Fraction(0)
        return kw
    # solve flops_per_token for a crossover j* drawn in [0, max_crossover]
    b, s = kw["batch"], kw["context_sum"]
    m0 = (kw["weight_bytes"] + kw["kv_bytes_per_token"] * s) / kw["bandwidth"]
    ms = kw["kv_bytes_per_token"] * b / kw["bandwidth"]
    cs = kw["attention_flops_per_token"] * b / kw["peak_flops"]
    if ms == cs:  # equal slopes never cross: tilt the compute slope
        kw["attention_flops_per_token"] *= 2
        cs *= 2
    j = draw(st.fractions(min_value=0, max_value=max_crossover, max_denominator=7))
    flops = ((m0 + j * (ms - cs)) * kw["peak_flops"] - kw["attention_flops_per_token"] * s) / b
    if flops <= 0:  # the compute line cannot start that high: move the crossover to where it can (j = 0 side)
        kw["attention_flops_per_token"] = Fraction(0)
        cs = Fraction(0)
        flops = (m0 + j * ms) * kw["peak_flops"] / b
    kw["flops_per_token"] = flops
    return kw


def decode_stretches(
    *, crossing: bool = False, max_batch: int = 64, max_context_sum: int = 10_000, max_crossover: int = 60
) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments of a decode stretch's formulas (:mod:`roofline.formulas.stretch`), exact Fractions.

    Parameters
    ----------
    crossing : bool, default False
        True: ``flops_per_token`` is solved so that the memory/compute crossover j* falls in
        [0, ``max_crossover``] (the stretch changes bound); False: constants drawn freely,
        ``kv_bytes_per_token`` and ``attention_flops_per_token`` sometimes 0.
    max_batch : int >= 1
    max_context_sum : int >= 0 [tokens]
    max_crossover : int >= 0 [steps]

    Returns
    -------
    SearchStrategy of dict: ``batch`` (int), ``context_sum`` (int), ``weight_bytes``,
    ``kv_bytes_per_token``, ``flops_per_token``, ``attention_flops_per_token``, ``bandwidth``,
    ``peak_flops`` and ``overhead`` (Fractions); no ``steps`` or ``target_time``.

    Raises
    ------
    InvalidArgument
        A maximum out of range.

    Examples
    --------
    >>> from hypothesis import find
    >>> sorted(find(decode_stretches(), lambda kw: True))[:3]
    ['attention_flops_per_token', 'bandwidth', 'batch']
    """
    _check_int("max_batch", max_batch, 1)
    _check_int("max_context_sum", max_context_sum, 0)
    _check_int("max_crossover", max_crossover, 0)
    return _decode_stretches(crossing, max_batch, max_context_sum, max_crossover)
