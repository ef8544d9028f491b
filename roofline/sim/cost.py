"""Cost models: how long one step of the reference scheduler takes.

A cost model turns a step's composition into a duration. The scheduler calls it
once per step, so its two hot methods take positional arguments:

* ``decode_time(batch, context_sum)``: a decode step of ``batch`` sequences whose
  contexts (KV incl. the new token) sum to ``context_sum`` tokens;
* ``prefill_time(prefill_tokens, attention_pairs)``: a prefill step over
  ``prefill_tokens`` tokens (padding included) with ``attention_pairs`` causal
  query-key pairs.

Chunked prefill (``serve_continuous(prefill="chunked")``) also needs
``mixed_time(decode_rows, context_sum, prefill_tokens, cached_tokens, attention_pairs)``
(and ``mixed_work``): a step that gives ``decode_rows`` running sequences their token and
processes prompt chunks of ``prefill_tokens`` tokens in all, after ``cached_tokens`` prompt
tokens already cached, with ``attention_pairs`` query-key pairs (docs/conventions.md,
"Chunked prefill and mixed steps"). Both shipped models have it; the CostModel protocol
does not require it, so a model without it can still run the other modes.

Sliding-window models (:class:`RooflineCostModel` with ``layer_windows``): ``context_sum``,
``cached_tokens`` and ``attention_pairs`` count **token-layers** (one token's KV, or one
query-key pair, in one layer; :class:`~roofline.sim.LayerWindows`), which the policies sum
per sequence as sum over layers of min(c_i, w_l); ``prefill_tokens`` still counts tokens.

Sparse-attention models (:class:`RooflineCostModel` with ``index_topk``, DeepSeek-V3.2): the hot
methods also take R = sum min(c_i, K) (``capped_sum``) and a prompt's capped pairs Q_K
(``capped_pairs``), which the policies count with a one-window :class:`~roofline.sim.LayerWindows`
of K beside the pool's tokens; every step is priced by :mod:`roofline.formulas.sparse`, on the
step clock only (docs/conventions.md, "Sparse attention").

``decode_work`` and ``prefill_work`` give the same steps' (bytes, FLOPs), for the
step records. ``to_time`` converts an arrival time to the model's time type, and
``exact`` says whether times are exact (int/Fraction) or floats.

Two models ship:

* :class:`UnitCostModel`: every step takes a fixed time (1 by default, so time counts
  steps): for counting proofs and the lesson's "~5 ms per step" arithmetic.
* :class:`RooflineCostModel`: the roofline step time of ``roofline.formulas``
  (:func:`~roofline.formulas.step_time`, :func:`~roofline.formulas.prefill_step_time`)
  from each step's exact composition. With int/Fraction constants (the presets) every
  duration is an exact Fraction; ``exact=False`` computes in floats for speed and agrees
  with the exact mode to float rounding (tested).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from .. import formulas as f
from .._checks import check_int, check_nonnegative, check_positive, check_scalar
from ..deployment import Deployment, as_deployment, profile
from ..errors import InvalidValueError, UnsupportedModelError
from ..hardware import Accelerator
from ..models import ModelConfig
from .kv import _windows

__all__ = ["CostModel", "UnitCostModel", "RooflineCostModel", "StretchTerms", "stretch_terms"]

#: Durations memoised per cost model and kind of step (a bounded cache, cleared when full).
_CACHE_SIZE = 1 << 17


@runtime_checkable
class CostModel(Protocol):
    """What the policies need from a cost model (see the module docstring)."""

    exact: bool

    def to_time(self, value: Any) -> Any:
        """An arrival time [s] in the model's time type."""

    def decode_time(self, batch: int, context_sum: int) -> Any:
        """Duration [s] of a decode step."""

    def prefill_time(self, prefill_tokens: int, attention_pairs: int) -> Any:
        """Duration [s] of a prefill step."""

    def decode_work(self, batch: int, context_sum: int) -> tuple[Any, Any]:
        """(bytes, FLOPs) of a decode step; (None, None) where not modelled."""

    def prefill_work(self, prefill_tokens: int, attention_pairs: int) -> tuple[Any, Any]:
        """(bytes, FLOPs) of a prefill step; (None, None) where not modelled."""


@attrs.frozen
class StretchTerms:
    """A cost model's step times as the stretch clock needs them: exact terms [s], fixed or set by the batch alone.

    The event engine (:mod:`roofline.sim.stretch`) prices every step from these, on integer
    ticks, and never re-derives a step time. A cost model states them with ``stretch_terms()``
    (or says why it cannot, by returning a reason: the engine then runs the step engine, or
    refuses ``engine="event"`` naming it). With n = the step's tokens (decode rows plus prompt
    tokens), S the context sum, p0 the cached prompt tokens, T the prompt tokens and Q the
    attention pairs (token-layers where the model has sliding windows):

    * decode of B rows: max(weights(B) + B state + km S, fc B + ac S) + overhead + link(B) + B per_row;
    * prefill: max(weights(T) + kt T, fc T + ac Q) + overhead + link(T);
    * mixed: max(weights(n) + B state + km (S + p0) + kt T, fc n + ac (S + Q)) + overhead + link(n) + B per_row
      (B: its decode rows);

    link(n) = link_latency + link_per_token x n for n >= 1 (0 at n = 0): the tensor-parallel
    all-reduces (:func:`roofline.formulas.decode_allreduce_latency_time` and
    ``decode_allreduce_bandwidth_time``). A unit model gives ``unit_decode`` and
    ``unit_prefill`` instead (every other term unused).

    Attributes
    ----------
    km, kt, fc, ac, overhead : int or Fraction [s per token-layer, token, token, pair; s]
        The roofline's slopes: KV bytes per context unit / BW, per prompt token written / BW,
        matmul FLOPs per token / peak, attention FLOPs per context unit / peak; the fixed overhead.
    weights : callable int -> int or Fraction [s]
        Memory time of the weights a step of n tokens reads: W / BW for a dense model, (W + X E
        (1 - (1 - k/E)^n)) / BW for a mixture of experts (:func:`roofline.formulas.experts_touched`).
    weights_denominator : callable int -> int
        A common multiple of the denominators of ``weights(m)`` for every m <= n (the tick clock
        covers every step up to n tokens with it).
    link_latency, link_per_token : int or Fraction [s, s/token]
    state : int or Fraction [s per decode row], default 0
        A hybrid model's recurrent state, read and written back by each decode row: memory time
        2 x state_bytes / BW per row, inside the max (:func:`roofline.formulas.hybrid_step_time`).
    per_row : int or Fraction [s per decode row], default 0
        A time each decode row adds to its step, outside the max (the estimate's per-sequence
        term t_seq: scheduling, sampling and detokenisation on the CPU; docs/conventions.md).
    unit_decode, unit_prefill : int, Fraction or None [s]
    weights_power : (base, scale, miss, limit) or None
        A mixture of experts' ``weights(n)`` as base - scale x miss^n for 1 <= n <= limit
        (miss = 1 - k/E; the same value, rearranged, so the tick clock computes it in integers).
    """

    km: Any = 0
    kt: Any = 0
    fc: Any = 0
    ac: Any = 0
    overhead: Any = 0
    weights: Any = None
    weights_denominator: Any = None
    link_latency: Any = 0
    link_per_token: Any = 0
    per_row: Any = 0
    state: Any = 0
    unit_decode: Any = None
    unit_prefill: Any = None
    weights_power: Any = None

    @property
    def constant_weights(self) -> bool:
        """True when the weights a step reads do not depend on its tokens (a dense model)."""
        return self.weights_denominator is None

    def constants(self) -> tuple[Any, ...]:
        """The terms that do not depend on the step [s] (for the tick clock's denominator)."""
        if self.unit_decode is not None:
            return (self.unit_decode, self.unit_prefill)
        fixed = (self.km, self.kt, self.fc, self.ac, self.overhead, self.link_latency, self.link_per_token,
                 self.per_row, self.state)
        return (*fixed, self.weights(1)) if self.constant_weights else fixed


def stretch_terms(cost_model: Any) -> StretchTerms | str:
    """The cost model's own :class:`~roofline.sim.cost.StretchTerms`, or the reason it has none (a string).

    No choice by class: any cost model with a ``stretch_terms()`` method runs on the stretch clock.
    """
    if isinstance(cost_model, type):  # a class: the policies' checks refuse it by name
        return f"{cost_model.__name__} is a class, not a cost model"
    method = getattr(cost_model, "stretch_terms", None)
    if not callable(method):
        return f"the cost model ({type(cost_model).__name__}) has no stretch_terms() method"
    terms = method()
    if not isinstance(terms, (StretchTerms, str)):
        raise InvalidValueError("cost_model", cost_model,
                                "stretch_terms() must return a StretchTerms or a reason (str)")
    bad = _bad_terms(terms) if isinstance(terms, StretchTerms) else None
    if bad is not None:
        raise InvalidValueError("cost_model", cost_model, f"stretch_terms() returned {bad}")
    return terms


def _bad_terms(terms: StretchTerms) -> str | None:
    """What is wrong with a cost model's stated terms (the tick clock takes them as they are), or None."""
    def exact(value: Any) -> bool:
        return isinstance(value, (int, Fraction)) and not isinstance(value, bool)

    if terms.unit_decode is not None or terms.unit_prefill is not None:
        for name in ("unit_decode", "unit_prefill"):
            value = getattr(terms, name)
            if not exact(value) or value <= 0:
                return f"{name}={value!r}: a unit model's durations must be ints or Fractions > 0"
        return None
    for name in ("km", "kt", "fc", "ac", "overhead", "link_latency", "link_per_token"):
        value = getattr(terms, name)
        if not exact(value) or value < 0:
            return f"{name}={value!r}: expected an int or a Fraction >= 0"
    if not callable(terms.weights):
        return f"weights={terms.weights!r}: expected a callable (tokens -> seconds)"
    if terms.weights_denominator is not None and not callable(terms.weights_denominator):
        return f"weights_denominator={terms.weights_denominator!r}: expected a callable or None"
    return None


def _own_step_times(model: Any, base: type, method: str = "stretch_terms",
                    priced: tuple[str, ...] = ("decode_time", "prefill_time", "mixed_time")) -> str | None:
    """Why a subclass that prices its own steps (decode_time, prefill_time or mixed_time, or another method
    of ``priced`` the step times call, overridden) but inherits ``stretch_terms`` has no stretch terms: the
    inherited ones would price another model."""
    cls = type(model)
    if getattr(cls, method) is not getattr(base, method):
        return None
    for name in priced:
        if getattr(cls, name) is not getattr(base, name):
            return f"{cls.__name__} prices its own {name}() but states no stretch_terms() of its own"
    return None


def _exact_time(value: Any) -> Any:
    if isinstance(value, int) or (isinstance(value, Fraction) and type(value.numerator) is int
                                  and type(value.denominator) is int):
        return value
    exact = Fraction(value)  # of a numpy int: a Fraction of numpy ints, whose tick arithmetic would wrap at 2^63
    return Fraction(int(exact.numerator), int(exact.denominator))


def _check_duration(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, np.ndarray):
        raise InvalidValueError(attribute.name, value, "expected one duration, not an array")
    check_positive(attribute.name, value)
    try:
        float(value)  # the float mode converts every duration
    except OverflowError:
        raise InvalidValueError(attribute.name, value, "too large for a float") from None


@attrs.frozen
class UnitCostModel:
    """Every step takes a fixed duration: ``decode`` for a decode step, ``prefill`` for a prefill.

    Parameters
    ----------
    decode : int, Fraction or float [s] > 0, default 1
        Duration of every decode step (1: simulated time counts steps).
    prefill : int, Fraction or float [s] > 0, default 1
        Duration of every prefill step.

    Raises
    ------
    InvalidValueError
        A duration that is not one finite number > 0 (an array, NaN...), or too large for a float.

    Notes
    -----
    Bytes and FLOPs are not modelled (``decode_work`` returns ``(None, None)``).
    ``exact`` is True unless a duration is a float.

    Examples
    --------
    >>> UnitCostModel().decode_time(8, 8000), UnitCostModel(prefill=Fraction(1, 5)).prefill_time(10, 55)
    (1, Fraction(1, 5))
    """

    decode: Any = attrs.field(default=1, validator=_check_duration)
    prefill: Any = attrs.field(default=1, validator=_check_duration)

    @property
    def exact(self) -> bool:
        """True when both durations are int or Fraction."""
        return isinstance(self.decode, (int, Fraction)) and isinstance(self.prefill, (int, Fraction))

    def to_time(self, value: Any) -> Any:
        """``value`` as an exact number (exact model) or a float."""
        return _exact_time(value) if self.exact else float(value)

    def stretch_terms(self) -> StretchTerms | str:
        """The fixed durations as :class:`StretchTerms`, or why not (float durations: no integer tick clock)."""
        if not self.exact:
            return "float durations (a float has no exact tick clock; give ints or Fractions)"
        own = _own_step_times(self, UnitCostModel)
        if own is not None:
            return own
        return StretchTerms(unit_decode=self.decode, unit_prefill=self.prefill)

    def decode_time(self, batch: int, context_sum: int) -> Any:
        """The fixed decode duration [s]."""
        return self.decode

    def prefill_time(self, prefill_tokens: int, attention_pairs: int) -> Any:
        """The fixed prefill duration [s]."""
        return self.prefill

    def mixed_time(self, decode_rows: int, context_sum: int, prefill_tokens: int, cached_tokens: int,
                   attention_pairs: int) -> Any:
        """A step with prompt tokens takes the prefill duration, one without the decode duration [s]."""
        return self.prefill if prefill_tokens else self.decode

    def decode_work(self, batch: int, context_sum: int) -> tuple[None, None]:
        """Not modelled: ``(None, None)``."""
        return None, None

    def mixed_work(self, decode_rows: int, context_sum: int, prefill_tokens: int, cached_tokens: int,
                   attention_pairs: int) -> tuple[None, None]:
        """Not modelled: ``(None, None)``."""
        return None, None

    def prefill_work(self, prefill_tokens: int, attention_pairs: int) -> tuple[None, None]:
        """Not modelled: ``(None, None)``."""
        return None, None


_TERMS = ("weight_bytes", "kv_bytes_per_token", "flops_per_token", "attention_flops_per_token",
          "bandwidth", "peak_flops", "overhead")
#: A sparse-attention model's rates (roofline.formulas.sparse; :meth:`roofline.ModelConfig.sparse_terms`).
_SPARSE = ("latent_bytes_per_token", "index_bytes_per_token", "latent_attention_flops_per_token",
           "index_flops_per_token")


@attrs.frozen
class RooflineCostModel:
    """Roofline step times from each step's composition (``roofline.formulas``).

    Parameters
    ----------
    weight_bytes : [bytes] > 0
    kv_bytes_per_token : [bytes/token] >= 0
    flops_per_token : [FLOP/token] > 0 (matmul FLOPs: exact count or the lesson's 2 x P)
    attention_flops_per_token : [FLOP/(token x context token)] >= 0
    bandwidth : [bytes/s] > 0
    peak_flops : [FLOP/s] > 0 (dense)
    overhead : [s] >= 0, fixed per-step overhead (default 0)
    exact : bool, default True
        True: constants are converted to Fractions (exactly; floats keep their binary
        value) and every duration is an exact Fraction. False: floats throughout.
    routed_expert_bytes : [bytes] >= 0, default 0
        Mixture of experts: one routed expert's bytes summed over the MoE layers; then
        ``weight_bytes`` is the shared weights (all but the routed experts) and a step of
        T tokens reads W + X x E (1 - (1 - k/E)^T) (uniform routing,
        :func:`roofline.formulas.moe_decode_weight_bytes`).
    num_experts, experts_per_token : int >= 0, default 0 (a dense model)
    tensor_parallel_size : int >= 1, default 1
        T GPUs in a tensor-parallel group. The sizes above are then one GPU's share
        (:meth:`roofline.ModelConfig.per_gpu`) and every step of n tokens (decode rows, prompt
        tokens, or both) adds 2 L ring all-reduces of n x ``hidden_size`` x ``activation_bytes``
        over a link of ``link_bandwidth`` [bytes/s] and ``link_latency`` [s]
        (:func:`roofline.formulas.decode_allreduce_time`; docs/conventions.md, "Tensor parallelism").
        At T = 1 nothing is added and the other fields below are ignored.
    num_hidden_layers, hidden_size : int >= 0, default 0 (needed when T > 1)
    activation_bytes, link_bandwidth, link_latency : default 2, 1, 0
    expert_parallel_size : int >= 1, default 1
        R ranks of an expert-parallel group (needs T > 1 and a mixture of experts; R divides E):
        each step of n tokens pays :func:`roofline.formulas.decode_comm_time_ep` (the attention's
        and dense layers' all-reduces, each MoE layer's all-gather, dispatch and combine) instead
        of the 2 L all-reduces, and ``routed_expert_bytes`` is one GPU's mean, X / R
        (docs/conventions.md, "Expert parallelism"; :func:`roofline.deployment.expert_parallel_terms`).
    num_moe_layers, node_gpus : int, default 0, 1 (used when R > 1; G the group's ranks per node)
    scale_up_bandwidth, scale_up_latency : [bytes/s, s], default 1, 0 (the all-to-all inside a node)
    network_bandwidth, network_latency : the NIC, also for the all-to-all's ranks beyond a node
    per_sequence : [s] >= 0, default 0
        An engine profile's t_seq: every decode row of a step (decode or mixed) adds it once;
        a prefill step adds none (docs/conventions.md, "Bound and estimate"). Not 0: the step
        clock runs (:meth:`stretch_terms` gives the reason).
    layer_windows : tuple of (int >= 1 or None), default () (full attention)
        One window [tokens] (or None) per layer (:attr:`roofline.ModelConfig.layer_windows`). When
        a layer slides, the context arguments of every method (``context_sum``, ``cached_tokens``,
        ``attention_pairs``) are token-layers and are priced at ``kv_bytes_per_token / L`` and
        ``attention_flops_per_token / L`` per token-layer (L = number of layers): a decode row at
        context c costs kv_bytes(c), as :meth:`roofline.ModelConfig.kv_bytes` (docs/conventions.md,
        "Sliding-window attention"). The policies pass token-layers when the cost model has windows.
    state_bytes : [bytes] >= 0, default 0
        A hybrid model's recurrent state per sequence (:attr:`roofline.ModelConfig.state_bytes_per_sequence`):
        every decode row reads it and writes it back, 2 x state_bytes per row per step
        (:func:`roofline.formulas.hybrid_step_time`; docs/conventions.md, "Hybrid models"). A prefill
        step's state writes are not counted (a prefill step's rows are not given to the cost model).
        Such a model has no stretch terms (:meth:`stretch_terms` says why): it runs on the step clock.
    index_topk : int >= 1 or None, default None (no sparse attention)
        K of DeepSeek sparse attention (:attr:`roofline.ModelConfig.index_topk`). When given, every
        step is priced by :mod:`roofline.formulas.sparse` from the four rates below
        (:meth:`roofline.ModelConfig.sparse_terms`; their bytes must sum to ``kv_bytes_per_token``,
        what the pool keeps per token) and the hot methods take R = sum min(c_i, K) (``capped_sum``)
        and the capped pairs Q_K (``capped_pairs``) beside S and Q; no stretch terms (the step clock
        runs). docs/conventions.md, "Sparse attention".
    latent_bytes_per_token, index_bytes_per_token : [bytes/token] >= 0, default 0 (k_m, k_i)
    latent_attention_flops_per_token, index_flops_per_token : [FLOP/(token x context token)] >= 0 (a_m, a_i)

    Raises
    ------
    InvalidValueError
        A constant out of its domain (the formulas' checks name it).

    Notes
    -----
    Decode step (docs/conventions.md, "One step"): max((W + k S) / BW, (B F + a S) / peak)
    + overhead, S = sum of the contexts c_i (KV incl. the new token).
    Prefill step: max((W + k T) / BW, (T F + a Q) / peak) + overhead, T = tokens
    processed (padding included), Q = causal query-key pairs. Durations are memoised
    per composition (a bounded cache): the same composition always gives the same value.

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    >>> d = cost.decode_time(8, 0)
    >>> type(d).__name__, round(float(d) * 1e3, 3)
    ('Fraction', 4.794)
    """

    weight_bytes: Any
    kv_bytes_per_token: Any
    flops_per_token: Any
    attention_flops_per_token: Any
    bandwidth: Any
    peak_flops: Any
    overhead: Any = 0
    exact: bool = True
    routed_expert_bytes: Any = 0
    num_experts: int = 0
    experts_per_token: int = 0
    tensor_parallel_size: int = 1
    num_hidden_layers: int = 0
    hidden_size: int = 0
    activation_bytes: Any = 2
    link_bandwidth: Any = 1
    link_latency: Any = 0
    layer_windows: tuple[int | None, ...] = attrs.field(default=(), converter=_windows)
    per_sequence: Any = 0
    state_bytes: Any = 0
    intra_node_sends: int = 0
    inter_node_sends: int = 0
    send_bandwidth: Any = 1
    send_latency: Any = 0
    network_bandwidth: Any = 1
    network_latency: Any = 0
    expert_parallel_size: int = 1
    num_moe_layers: int = 0
    node_gpus: int = 1
    scale_up_bandwidth: Any = 1
    scale_up_latency: Any = 0
    index_topk: int | None = None
    latent_bytes_per_token: Any = 0
    index_bytes_per_token: Any = 0
    latent_attention_flops_per_token: Any = 0
    index_flops_per_token: Any = 0
    _terms: dict[str, Any] = attrs.field(init=False, repr=False, eq=False)
    _decode_cache: dict[tuple[int, int], Any] = attrs.field(init=False, repr=False, eq=False, factory=dict)
    _prefill_cache: dict[tuple[int, int], Any] = attrs.field(init=False, repr=False, eq=False, factory=dict)
    _mixed_cache: dict[tuple[int, int, int, int, int], Any] = attrs.field(init=False, repr=False, eq=False,
                                                                       factory=dict)
    _routed: Any = attrs.field(init=False, repr=False, eq=False, default=0)
    _allreduce: dict[str, Any] | None = attrs.field(init=False, repr=False, eq=False, default=None)
    _sends: dict[str, Any] | None = attrs.field(init=False, repr=False, eq=False, default=None)
    _expert: dict[str, Any] | None = attrs.field(init=False, repr=False, eq=False, default=None)
    _layers: int = attrs.field(init=False, repr=False, eq=False, default=0)
    _state: Any = attrs.field(init=False, repr=False, eq=False, default=0)
    _sparse: dict[str, Any] | None = attrs.field(init=False, repr=False, eq=False, default=None)
    _sparse_cache: dict[tuple[int, ...], Any] = attrs.field(init=False, repr=False, eq=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.exact, bool):
            raise InvalidValueError("exact", self.exact, "must be True or False")
        for name in (*_TERMS, "routed_expert_bytes", "num_experts", "experts_per_token", "activation_bytes",
                     "link_bandwidth", "link_latency", "per_sequence", "state_bytes"):
            check_scalar(name, getattr(self, name))  # one cost model prices one deployment, not an array of them
        if not self.num_experts and (self.routed_expert_bytes or self.experts_per_token):
            # a dense model would read none of the experts given: refused rather than priced without them
            field = "routed_expert_bytes" if self.routed_expert_bytes else "experts_per_token"
            raise InvalidValueError("num_experts", self.num_experts, f"is 0 (a dense model) beside {field}="
                                    f"{getattr(self, field)!r}: give the experts' count for a mixture of experts")
        if self.num_experts:
            f.moe_decode_weight_bytes(
                shared_weight_bytes=self.weight_bytes, routed_expert_bytes=self.routed_expert_bytes,
                num_experts=self.num_experts, experts_per_token=self.experts_per_token, batch=1)
            for name in ("num_experts", "experts_per_token"):  # a numpy int would make every step time a float
                object.__setattr__(self, name, int(getattr(self, name)))
        # the checked fast paths validate every constant once, naming a bad one
        given = {name: getattr(self, name) for name in _TERMS}
        f.step_time(batch=1, context_sum=0, **given)
        f.prefill_step_time(prefill_tokens=0, attention_pairs=0, **given)
        convert = _exact_time if self.exact else float
        terms = {name: convert(value) for name, value in given.items()}
        if self.exact:  # int / int would be a float: make the divisors Fractions
            terms["bandwidth"] = Fraction(terms["bandwidth"])
            terms["peak_flops"] = Fraction(terms["peak_flops"])
        object.__setattr__(self, "_terms", terms)
        check_nonnegative("per_sequence", self.per_sequence)
        object.__setattr__(self, "per_sequence", convert(self.per_sequence))
        object.__setattr__(self, "_routed", convert(self.routed_expert_bytes))
        object.__setattr__(self, "_layers", len(self.layer_windows))
        if isinstance(self.state_bytes, np.ndarray):
            raise InvalidValueError("state_bytes", self.state_bytes, "expected one number [bytes], not an array")
        check_nonnegative("state_bytes", self.state_bytes)
        object.__setattr__(self, "_state", convert(self.state_bytes))
        if self.layer_windows and self.num_hidden_layers and len(self.layer_windows) != self.num_hidden_layers:
            # L prices a token-layer (kv_bytes_per_token / L): two counts of layers would price by the wrong one
            raise InvalidValueError("layer_windows", self.layer_windows, f"has {len(self.layer_windows)} windows, one "
                                    f"per layer, but num_hidden_layers={self.num_hidden_layers}")
        check_int("tensor_parallel_size", self.tensor_parallel_size, minimum=1)
        if self.tensor_parallel_size > 1:
            ar = dict(num_hidden_layers=self.num_hidden_layers, hidden_size=self.hidden_size,
                      activation_bytes=self.activation_bytes, tensor_parallel_size=self.tensor_parallel_size,
                      link_bandwidth=self.link_bandwidth, link_latency=self.link_latency)
            f.decode_allreduce_time(batch=1, **ar)  # names a bad field
            ar["activation_bytes"] = convert(ar["activation_bytes"])
            ar["link_latency"] = convert(ar["link_latency"])
            link = ar["link_bandwidth"]
            ar["link_bandwidth"] = Fraction(_exact_time(link)) if self.exact else float(link)
            for name in ("num_hidden_layers", "hidden_size", "tensor_parallel_size"):  # numpy ints as ints
                ar[name] = int(ar[name])
            object.__setattr__(self, "_allreduce", ar)
        if self.intra_node_sends or self.inter_node_sends:  # pipeline stages: one batch's sends between them
            sends = dict(hidden_size=self.hidden_size, activation_bytes=self.activation_bytes,
                         intra_node_sends=self.intra_node_sends, inter_node_sends=self.inter_node_sends,
                         send_bandwidth=self.send_bandwidth, send_latency=self.send_latency,
                         network_bandwidth=self.network_bandwidth, network_latency=self.network_latency)
            f.pipeline_sends_time(batch=1, **sends)  # names a bad field
            for name in ("activation_bytes", "send_latency", "network_latency"):
                sends[name] = convert(sends[name])
            for name in ("send_bandwidth", "network_bandwidth"):
                sends[name] = Fraction(_exact_time(sends[name])) if self.exact else float(sends[name])
            for name in ("hidden_size", "intra_node_sends", "inter_node_sends"):
                sends[name] = int(sends[name])
            object.__setattr__(self, "_sends", sends)
        check_int("expert_parallel_size", self.expert_parallel_size, minimum=1)
        if self.expert_parallel_size > 1:
            self._set_expert_parallel(convert)
        if self.index_topk is not None:
            self._set_sparse(convert)

    def _set_sparse(self, convert: Any) -> None:
        """Check and keep the sparse-attention rates (docs/conventions.md, "Sparse attention")."""
        topk = self.index_topk
        assert topk is not None
        check_int("index_topk", topk, minimum=1)
        object.__setattr__(self, "index_topk", int(topk))  # a numpy int as an int
        for name, why in (("layer_windows", "sliding-window layers"), ("state_bytes", "a recurrent state")):
            if getattr(self, name):
                raise InvalidValueError(name, getattr(self, name), f"beside sparse attention (index_topk="
                                        f"{self.index_topk}): {why} and a read cap together are not modelled")
        rates = {name: getattr(self, name) for name in _SPARSE}
        for name, value in rates.items():
            check_scalar(name, value)
        if rates["latent_bytes_per_token"] + rates["index_bytes_per_token"] != self.kv_bytes_per_token:
            raise InvalidValueError("kv_bytes_per_token", self.kv_bytes_per_token, "must be latent_bytes_per_token "
                                    "+ index_bytes_per_token under sparse attention (the pool keeps both for every "
                                    f"token): {rates['latent_bytes_per_token']} + {rates['index_bytes_per_token']}")
        t = self._terms
        f.sparse_step_time(batch=1, context_sum=0, capped_context_sum=0, weight_bytes=self.weight_bytes,
                           flops_per_token=self.flops_per_token, bandwidth=self.bandwidth, peak_flops=self.peak_flops,
                           overhead=self.overhead, **rates)  # names a bad rate
        object.__setattr__(self, "_sparse", dict(
            {name: convert(value) for name, value in rates.items()}, flops_per_token=t["flops_per_token"],
            bandwidth=t["bandwidth"], peak_flops=t["peak_flops"], overhead=t["overhead"]))

    def link_time(self, tokens: int) -> Any:
        """Communication time [s] of a step of ``tokens`` tokens: :meth:`allreduce_time` + :meth:`sends_time`."""
        return self.allreduce_time(tokens) + self.sends_time(tokens)

    def sends_time(self, tokens: int) -> Any:
        """Pipeline sends [s] of a step of ``tokens`` tokens through the P stages
        (:func:`roofline.formulas.pipeline_sends_time`); 0 at P = 1 or without tokens."""
        if self._sends is None or not tokens:
            return 0
        return f.pipeline_sends_time.unchecked(batch=tokens, **self._sends)

    def _set_expert_parallel(self, convert: Any) -> None:
        """Check and keep the expert-parallel communication's arguments (docs/conventions.md, "Expert parallelism")."""
        if not self.num_experts:
            raise InvalidValueError("expert_parallel_size", self.expert_parallel_size,
                                    "is > 1 for a dense model (num_experts=0): expert parallelism needs routed experts")
        if self._allreduce is None:
            raise InvalidValueError("expert_parallel_size", self.expert_parallel_size,
                                    "needs the tensor-parallel group it spans (tensor_parallel_size > 1, its link)")
        for name in ("network_bandwidth", "network_latency"):
            check_scalar(name, getattr(self, name))
        if self._sends is not None:
            raise InvalidValueError("expert_parallel_size", self.expert_parallel_size,
                                    "beside pipeline sends: expert parallelism across pipeline stages is not modelled")
        for name in ("scale_up_bandwidth", "scale_up_latency"):
            check_scalar(name, getattr(self, name))
        ep = dict(self._allreduce, num_experts=self.num_experts, experts_per_token=self.experts_per_token,
                  expert_parallel_size=self.expert_parallel_size, num_moe_layers=self.num_moe_layers,
                  node_gpus=self.node_gpus, network_bandwidth=self.network_bandwidth,
                  network_latency=self.network_latency, scale_up_bandwidth=self.scale_up_bandwidth,
                  scale_up_latency=self.scale_up_latency)
        f.decode_comm_time_ep(batch=1, **ep)  # names a bad field (R not dividing E, L_moe > L...)
        ep["network_bandwidth"] = (Fraction(_exact_time(self.network_bandwidth)) if self.exact
                                   else float(self.network_bandwidth))
        ep["network_latency"] = convert(self.network_latency)
        ep["scale_up_bandwidth"] = (Fraction(_exact_time(self.scale_up_bandwidth)) if self.exact
                                    else float(self.scale_up_bandwidth))
        ep["scale_up_latency"] = convert(self.scale_up_latency)
        for name in ("expert_parallel_size", "num_moe_layers", "node_gpus"):
            ep[name] = int(ep[name])
        object.__setattr__(self, "_expert", ep)

    def allreduce_time(self, tokens: int) -> Any:
        """Communication time [s] of a step of ``tokens`` tokens: 2 L ring all-reduces of tokens x h x e bytes
        (:func:`roofline.formulas.decode_allreduce_time`), or with expert parallelism the all-reduces,
        all-gathers and all-to-alls of :func:`roofline.formulas.decode_comm_time_ep`; 0 at T = 1 or
        without tokens."""
        if self._allreduce is None or not tokens:
            return 0
        if self._expert is not None:
            return f.decode_comm_time_ep.unchecked(batch=tokens, **self._expert)
        return f.decode_allreduce_time.unchecked(batch=tokens, **self._allreduce)

    def stretch_terms(self) -> StretchTerms | str:
        """This model's step times as :class:`StretchTerms` [s], or why it has none (float mode).

        Taken from the registered formulas: the dense roofline's lines
        (:func:`roofline.formulas.step_time`), the weights a step's tokens read
        (:meth:`weights_read`, :func:`roofline.formulas.experts_touched`) and the all-reduce's
        two terms (:func:`roofline.formulas.decode_allreduce_latency_time`,
        ``decode_allreduce_bandwidth_time`` at one token), each exact. Sliding windows: the
        context slopes are per token-layer (``kv_bytes_per_token / L``), a prompt token writes L.
        """
        if not self.exact:
            return "float mode (exact=False): the stretch clock counts exact integer ticks"
        if self._sparse is not None:
            return (f"sparse attention (index_topk={self.index_topk}): a step needs the capped context sum R "
                    "beside S, and the stretch clock's lines carry one context sum")
        own = _own_step_times(self, RooflineCostModel, priced=("decode_time", "prefill_time", "mixed_time",
                                                               "weights_read", "allreduce_time", "_tokens",
                                                               "link_time", "sends_time"))
        if own is not None:
            return own
        t = self._terms
        layers = self._layers or 1
        bw, peak = t["bandwidth"], t["peak_flops"]
        km = t["kv_bytes_per_token"] / (layers * bw)
        link: dict[str, Any] = {}
        if self._expert is not None:  # every term is latency + slope x n (n >= 1): two points give both, exactly
            one, two = self.allreduce_time(1), self.allreduce_time(2)
            link = dict(link_latency=2 * one - two, link_per_token=two - one)
        elif self._allreduce is not None:
            ar = dict(self._allreduce, batch=1)
            link = dict(link_latency=f.decode_allreduce_latency_time.unchecked(**ar),
                        link_per_token=f.decode_allreduce_bandwidth_time.unchecked(**ar))
        if self._sends is not None:  # the sends are affine in the tokens too: latency + per-token bytes
            fixed = f.pipeline_sends_time.unchecked(**dict(self._sends, batch=0))
            per_token = f.pipeline_sends_time.unchecked(**dict(self._sends, batch=1)) - fixed
            link = dict(link_latency=link.get("link_latency", 0) + fixed,
                        link_per_token=link.get("link_per_token", 0) + per_token)
        weights_denominator = power = None
        if self.num_experts:
            from ..formulas.moe import EXACT_BATCH_LIMIT

            weights_denominator = self._weights_denominator
            scale = Fraction(self._routed) * self.num_experts / bw  # weights_read / BW = base - scale miss^n
            power = (Fraction(t["weight_bytes"]) / bw + scale, scale,
                     Fraction(self.num_experts - self.experts_per_token, self.num_experts), EXACT_BATCH_LIMIT)

        def weights(tokens: int) -> Any:
            return self.weights_read(tokens) / bw

        return StretchTerms(km=km, kt=layers * km, fc=t["flops_per_token"] / peak,
                            ac=t["attention_flops_per_token"] / (layers * peak), overhead=t["overhead"],
                            weights=weights, weights_denominator=weights_denominator, weights_power=power,
                            per_row=self.per_sequence, state=2 * self._state / bw, **link)

    def _weights_denominator(self, tokens: int) -> int:
        """A common multiple of the denominators of ``weights_read(m) / bandwidth`` for every m <= ``tokens``.

        weights_read(m) / BW = (W + X E) / BW - (X E / BW) r^m with r = (E - k) / E = a / b in
        lowest terms: each denominator divides lcm(den((W + X E) / BW), den(X E / BW) b^m), and b^m
        divides b^tokens. Above :data:`roofline.formulas.moe.EXACT_BATCH_LIMIT` the power is a float
        (a dyadic rational of at most 1,074 fraction bits), so 2^1074 joins the multiple.
        """
        from ..formulas.moe import EXACT_BATCH_LIMIT

        bw = self._terms["bandwidth"]
        scale = Fraction(self._routed) * self.num_experts / bw
        base = (Fraction(self._terms["weight_bytes"]) / bw + scale).denominator
        miss = Fraction(self.num_experts - self.experts_per_token, self.num_experts)
        multiple = math.lcm(base, scale.denominator * miss.denominator ** min(tokens, EXACT_BATCH_LIMIT))
        if tokens > EXACT_BATCH_LIMIT:
            multiple = math.lcm(multiple, scale.denominator * 2 ** 1074)
        return multiple

    @classmethod
    def for_model(
        cls,
        model: ModelConfig,
        accelerator: Accelerator,
        *,
        flops: str = "exact",
        overhead: Any = 0,
        exact: bool = True,
        estimate: Any = None,
        tensor_parallel_size: int = 1,
    ) -> RooflineCostModel:
        """The cost model of ``model`` on ``accelerator``: the bound, or an engine profile's estimate.

        A thin form of :meth:`for_deployment`: the arguments make one :class:`roofline.Deployment`
        (:func:`roofline.deployment.as_deployment`).

        Parameters
        ----------
        model : ModelConfig
            Its ``weight_bytes``, ``kv_bytes_per_token`` and ``flops_per_token(flops)``.
        accelerator : Accelerator
            Its ``bandwidth`` [bytes/s] and dense ``peak_flops`` [FLOP/s].
        flops : {"exact", "2p"}
            FLOPs convention (:meth:`roofline.ModelConfig.flops_per_token`).
        overhead : [s] >= 0
        exact : bool
        estimate : str, EngineProfile or None
            None (default): the roofline bound. An engine profile (``"vllm"``, ...;
            :mod:`roofline.profiles`): the cost model gains its constants, bandwidth x
            eta_bw, peak x eta_mm and overhead + t_step + layers x t_layer, so every decode
            step costs :func:`roofline.formulas.estimated_step_time` and every prefill
            :func:`roofline.formulas.estimated_prefill_step_time` (docs/conventions.md,
            "Bound and estimate").
        tensor_parallel_size : int >= 1, default 1
            T: one GPU's share of the model (:meth:`roofline.ModelConfig.per_gpu`) and the
            all-reduces of every step over :meth:`roofline.Accelerator.link` (T); T = 1 gives
            today's durations exactly (docs/conventions.md, "Tensor parallelism").

        Returns
        -------
        RooflineCostModel

        Raises
        ------
        InvalidValueError
            ``model`` not a ModelConfig or ``accelerator`` not an Accelerator (a class, None...),
            an unknown FLOPs convention or a bad overhead; a profile without constants; a T the
            model's heads or widths refuse, or one the accelerator's links cannot hold.
        UnknownPresetError
            An unknown engine profile.

        Notes
        -----
        Mixture of experts: the weight bytes of a step are the shared weights plus the
        expected experts its tokens touch (uniform routing); multi-head latent attention
        needs nothing more (its KV bytes and attention FLOPs per token are constants).
        Sliding-window layers: the cost model gets the model's ``layer_windows`` and takes
        contexts in token-layers (class docstring); the policies sum them per sequence.
        The compute peak follows the matmul inputs (:attr:`roofline.ModelConfig.compute_dtype`).
        """
        if not isinstance(model, ModelConfig):
            raise InvalidValueError("model", model, "expected a roofline.ModelConfig (roofline.load_model(...))")
        if not isinstance(flops, str):
            raise InvalidValueError("flops", flops, "expected 'exact' or 'lesson'")
        deployment = as_deployment(model, accelerator, tensor_parallel_size=tensor_parallel_size, flops=flops,
                                   estimate=profile(estimate))
        return cls.for_deployment(deployment, exact=exact, overhead=overhead)

    @classmethod
    def for_deployment(cls, deployment: Deployment, *, exact: bool = True, overhead: Any = 0) -> RooflineCostModel:
        """The cost model of a :class:`roofline.Deployment`: its bound, or its profile's estimate.

        Parameters
        ----------
        deployment : Deployment
            One GPU's share of the model (:attr:`roofline.Deployment.share`), its accelerator, FLOPs
            convention and engine profile, and at T > 1 the all-reduces of every step over
            :meth:`roofline.Accelerator.link` (T) (docs/conventions.md, "Tensor parallelism").
        exact : bool, default True
            True: every duration an exact Fraction; False: floats.
        overhead : [s] >= 0, default 0
            Fixed per-step overhead; an estimate adds t_step + L t_layer to it.

        Returns
        -------
        RooflineCostModel
            With the fields :meth:`roofline.Deployment.cost_terms` gives.

        Raises
        ------
        InvalidValueError
            ``deployment`` not a Deployment, ``exact`` not a bool, a bad overhead (an array, or
            negative), or a group the accelerator's links cannot hold; each naming its field.
        UnsupportedModelError
            A model with sparse attention (DeepSeek-V3.2) on pipeline stages, refused by name (one
            stage or a tensor-parallel group: priced with :mod:`roofline.formulas.sparse`).

        Examples
        --------
        >>> from roofline import Deployment, get_model, get_accelerator
        >>> d = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), 4)
        >>> round(float(RooflineCostModel.for_deployment(d).decode_time(1, 0)) * 1e3, 3)
        11.116
        """
        if not isinstance(deployment, Deployment):
            raise InvalidValueError("deployment", deployment, "expected a roofline.Deployment")
        if deployment.model.is_sparse_attention and deployment.pipeline_parallel_size > 1:
            raise UnsupportedModelError(deployment.model.model_type, "sparse attention across pipeline stages "
                                        "(a stage's share of the indexer and its read cap are not split; "
                                        "docs/conventions.md, \"Sparse attention\")")
        if not isinstance(exact, bool):
            raise InvalidValueError("exact", exact, "must be True or False")
        return cls(**deployment.cost_terms(overhead=overhead), exact=exact)

    def _tokens(self, token_layers: int) -> Any:
        """A context argument in the formulas' unit: token-layers / L with sliding windows, else as is."""
        if not self._layers:
            return token_layers
        return Fraction(token_layers, self._layers) if self.exact else token_layers / self._layers

    def weights_read(self, tokens: int) -> Any:
        """Weight bytes a step of ``tokens`` tokens reads [bytes]: ``weight_bytes``, plus the routed
        experts they touch for a MoE model (uniform routing)."""
        if not self.num_experts:
            return self._terms["weight_bytes"]
        if tokens == 0:
            return self._terms["weight_bytes"]
        return self._terms["weight_bytes"] + self._routed * f.experts_touched.unchecked(
            num_experts=self.num_experts, experts_per_token=self.experts_per_token, batch=tokens)

    def _weights_exactness(self, tokens: int) -> Any:
        """Weight bytes of a step as given (dense) or as read by its tokens (MoE)."""
        return self.weight_bytes if not self.num_experts else self.weights_read(tokens)

    def to_time(self, value: Any) -> Any:
        """``value`` [s] as an exact number (exact mode) or a float."""
        return _exact_time(value) if self.exact else float(value)

    def _sparse_time(self, decode_rows: int, context_sum: int, capped_sum: int | None, prefill_tokens: int = 0,
                     cached_tokens: int = 0, attention_pairs: int = 0, capped_pairs: int | None = 0) -> Any:
        """A step's duration [s] under sparse attention: :func:`roofline.formulas.sparse_step_time` without
        prompt tokens, else :func:`roofline.formulas.sparse_mixed_step_time`; + rows x ``per_sequence`` and
        the step's communication, as the dense steps (docs/conventions.md, "Sparse attention")."""
        if capped_sum is None or capped_pairs is None:
            field = "capped_sum" if capped_sum is None else "capped_pairs"
            raise InvalidValueError(field, None, f"a sparse-attention cost model (index_topk={self.index_topk}) "
                                    "prices a step from R = sum min(c_i, K) and the capped pairs Q_K beside S and Q")
        cache = self._sparse_cache
        key = (decode_rows, context_sum, capped_sum, prefill_tokens, cached_tokens, attention_pairs, capped_pairs)
        duration = cache.get(key)
        if duration is None:
            sparse = self._sparse
            assert sparse is not None
            weights = self.weights_read(decode_rows + prefill_tokens)
            if prefill_tokens:
                duration = f.sparse_mixed_step_time.unchecked(
                    decode_rows=decode_rows, context_sum=context_sum, capped_context_sum=capped_sum,
                    prefill_tokens=prefill_tokens, cached_tokens=cached_tokens, attention_pairs=attention_pairs,
                    capped_attention_pairs=capped_pairs, weight_bytes=weights, **sparse)
            else:
                duration = f.sparse_step_time.unchecked(batch=decode_rows, context_sum=context_sum,
                                                        capped_context_sum=capped_sum, weight_bytes=weights, **sparse)
            duration = self._keep(cache, key, duration, decode_rows, decode_rows + prefill_tokens)
        return duration

    def _keep(self, cache: dict[Any, Any], key: Any, duration: Any, rows: int, tokens: int) -> Any:
        """``duration`` [s] + ``rows`` x ``per_sequence`` + the communication of a step of ``tokens`` tokens,
        memoised under ``key`` in ``cache`` (cleared when full)."""
        if self.per_sequence:
            duration = duration + rows * self.per_sequence
        if self._allreduce is not None or self._sends is not None:
            duration = duration + self.link_time(tokens)
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        cache[key] = duration
        return duration

    def decode_time(self, batch: int, context_sum: int, capped_sum: int | None = None) -> Any:
        """Decode step duration [s] (:func:`roofline.formulas.step_time`, + batch x ``per_sequence``).

        Under sparse attention (``index_topk``) ``capped_sum`` is R = sum min(c_i, K) [tokens], required
        (:func:`roofline.formulas.sparse_step_time`); ignored otherwise. Raises InvalidValueError
        (``capped_sum``) when a sparse model is not given it.
        """
        if self._sparse is not None:
            return self._sparse_time(batch, context_sum, capped_sum)
        cache = self._decode_cache
        key = (batch, context_sum)
        duration = cache.get(key)
        if duration is None:
            terms = self._terms if not self.num_experts else dict(self._terms, weight_bytes=self.weights_read(batch))
            if self._state:
                duration = f.hybrid_step_time.unchecked(batch=batch, context_sum=self._tokens(context_sum),
                                                        state_bytes=self._state, **terms)
            else:
                duration = f.step_time.unchecked(batch=batch, context_sum=self._tokens(context_sum), **terms)
            duration = self._keep(cache, key, duration, batch, batch)
        return duration

    def prefill_time(self, prefill_tokens: int, attention_pairs: int, capped_pairs: int | None = None) -> Any:
        """Prefill step duration [s] (:func:`roofline.formulas.prefill_step_time`). Under sparse attention
        ``capped_pairs`` is Q_K [token pairs], required (:func:`roofline.formulas.sparse_mixed_step_time` at
        no decode row and no cached token); ignored otherwise."""
        if self._sparse is not None:
            return self._sparse_time(0, 0, 0, prefill_tokens, 0, attention_pairs, capped_pairs)
        cache = self._prefill_cache
        key = (prefill_tokens, attention_pairs)
        duration = cache.get(key)
        if duration is None:
            terms = (self._terms if not self.num_experts
                     else dict(self._terms, weight_bytes=self.weights_read(prefill_tokens)))
            duration = f.prefill_step_time.unchecked(prefill_tokens=prefill_tokens,
                                                     attention_pairs=self._tokens(attention_pairs), **terms)
            duration = self._keep(cache, key, duration, 0, prefill_tokens)  # no decode row: no per-sequence time
        return duration

    def mixed_time(self, decode_rows: int, context_sum: int, prefill_tokens: int, cached_tokens: int,
                   attention_pairs: int, capped_sum: int | None = None, capped_pairs: int | None = None) -> Any:
        """Mixed step duration [s] (:func:`roofline.formulas.mixed_step_time`); a step without
        prompt tokens is a decode step (:meth:`decode_time`, the same value). For a MoE model the
        step's decode rows and prompt tokens together touch the routed experts. Under sparse attention
        ``capped_sum`` (the decode rows' R) and ``capped_pairs`` (the chunks' Q_K) are required
        (:func:`roofline.formulas.sparse_mixed_step_time`); ignored otherwise."""
        if self._sparse is not None:
            return self._sparse_time(decode_rows, context_sum, capped_sum, prefill_tokens, cached_tokens,
                                     attention_pairs, capped_pairs if prefill_tokens else 0)
        if not prefill_tokens:
            return self.decode_time(decode_rows, context_sum)
        cache = self._mixed_cache
        key = (decode_rows, context_sum, prefill_tokens, cached_tokens, attention_pairs)
        duration = cache.get(key)
        if duration is None:
            terms = (self._terms if not self.num_experts
                     else dict(self._terms, weight_bytes=self.weights_read(decode_rows + prefill_tokens)))
            if self._state:  # the decode rows' states: bytes the step moves whatever its contexts
                terms = dict(terms, weight_bytes=terms["weight_bytes"] + 2 * decode_rows * self._state)
            duration = f.mixed_step_time.unchecked(decode_rows=decode_rows, context_sum=self._tokens(context_sum),
                                                   prefill_tokens=prefill_tokens,
                                                   cached_tokens=self._tokens(cached_tokens),
                                                   attention_pairs=self._tokens(attention_pairs), **terms)
            duration = self._keep(cache, key, duration, decode_rows, decode_rows + prefill_tokens)
        return duration

    def mixed_work(self, decode_rows: int, context_sum: int, prefill_tokens: int, cached_tokens: int,
                   attention_pairs: int, capped_sum: int | None = None,
                   capped_pairs: int | None = None) -> tuple[Any, Any]:
        """(bytes, FLOPs) of a mixed step (:func:`~roofline.formulas.mixed_step_bytes`, ``mixed_step_flops``);
        under sparse attention a step without prompt tokens is :meth:`decode_work`, one with them
        ``(None, None)`` (not recorded: docs/conventions.md, "Sparse attention")."""
        if self._sparse is not None:
            return self.decode_work(decode_rows, context_sum, capped_sum) if not prefill_tokens else (None, None)
        context_sum, cached_tokens = self._tokens(context_sum), self._tokens(cached_tokens)
        return (
            f.mixed_step_bytes.unchecked(weight_bytes=self._weights_exactness(decode_rows + prefill_tokens)
                                         + 2 * decode_rows * self._state,
                                         kv_bytes_per_token=self.kv_bytes_per_token,
                                         context_sum=context_sum, cached_tokens=cached_tokens,
                                         prefill_tokens=prefill_tokens),
            f.mixed_step_flops.unchecked(decode_rows=decode_rows, prefill_tokens=prefill_tokens,
                                         flops_per_token=self.flops_per_token,
                                         attention_flops_per_token=self.attention_flops_per_token,
                                         context_sum=context_sum, attention_pairs=self._tokens(attention_pairs)),
        )

    def decode_work(self, batch: int, context_sum: int, capped_sum: int | None = None) -> tuple[Any, Any]:
        """(bytes [bytes], FLOPs [FLOP]) of a decode step (``roofline.formulas.decode_bytes``, ``decode_flops``;
        under sparse attention ``sparse_decode_bytes`` and ``sparse_decode_flops`` at R = ``capped_sum``)."""
        if self._sparse is not None:
            if capped_sum is None:
                self._sparse_time(batch, context_sum, None)  # raises, naming capped_sum
            return (f.sparse_decode_bytes.unchecked(
                        context_sum=context_sum, capped_context_sum=capped_sum,
                        weight_bytes=self._weights_exactness(batch),
                        latent_bytes_per_token=self.latent_bytes_per_token,
                        index_bytes_per_token=self.index_bytes_per_token),
                    f.sparse_decode_flops.unchecked(
                        batch=batch, context_sum=context_sum, capped_context_sum=capped_sum,
                        flops_per_token=self.flops_per_token,
                        latent_attention_flops_per_token=self.latent_attention_flops_per_token,
                        index_flops_per_token=self.index_flops_per_token))
        context_sum = self._tokens(context_sum)
        if self._state:  # a hybrid: each row's recurrent state read and written back
            nbytes = f.hybrid_decode_bytes.unchecked(batch=batch, weight_bytes=self._weights_exactness(batch),
                                                     kv_bytes_per_token=self.kv_bytes_per_token,
                                                     context_sum=context_sum, state_bytes=self._state)
        else:
            nbytes = f.decode_bytes.unchecked(weight_bytes=self._weights_exactness(batch),
                                              kv_bytes_per_token=self.kv_bytes_per_token, context_sum=context_sum)
        return (
            nbytes,
            f.decode_flops.unchecked(batch=batch, flops_per_token=self.flops_per_token,
                                     attention_flops_per_token=self.attention_flops_per_token,
                                     context_sum=context_sum),
        )

    def prefill_work(self, prefill_tokens: int, attention_pairs: int,
                     capped_pairs: int | None = None) -> tuple[Any, Any]:
        """(bytes, FLOPs) of a prefill step (:func:`~roofline.formulas.prefill_bytes`, ``prefill_flops``);
        ``(None, None)`` under sparse attention (not recorded: docs/conventions.md, "Sparse attention")."""
        if self._sparse is not None:
            return None, None
        return (
            f.prefill_bytes.unchecked(weight_bytes=self._weights_exactness(prefill_tokens),
                                      kv_bytes_per_token=self.kv_bytes_per_token, prefill_tokens=prefill_tokens),
            f.prefill_flops.unchecked(flops_per_token=self.flops_per_token,
                                      attention_flops_per_token=self.attention_flops_per_token,
                                      prefill_tokens=prefill_tokens, attention_pairs=self._tokens(attention_pairs)),
        )
