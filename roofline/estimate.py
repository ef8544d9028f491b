"""The formulas applied to a model on an accelerator: what ``roofline report`` prints.

These functions take a :class:`roofline.Deployment` (the model, its accelerator, the
tensor-parallel size, the FLOPs convention and bound or estimate), or in its place a
:class:`roofline.ModelConfig` and a :class:`roofline.Accelerator` with those as keywords
(:func:`roofline.deployment.as_deployment` makes the Deployment either way), and return attrs
records of the fast paths' results, so that tools need not wire the keyword arguments themselves. All numbers
are in SI units (bytes, seconds, FLOP); exact (int or Fraction) whenever the
inputs are, as the presets are.

FLOPs conventions (docs/conventions.md, "The model"): ``flops="exact"`` counts
2 x matmul parameters per token plus 4 L H d x c attention FLOPs; ``flops="2p"``
is the lesson's round 2 x P with no attention FLOPs.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs
import numpy as np

from . import formulas as f
from ._checks import check_int, check_number
from .deployment import (
    FROM_DEPLOYMENT,
    Deployment,
    allreduce_terms,
    as_deployment,
    expert_parallel_terms,
    per_sequence_time,
)
from .errors import InvalidValueError, NoKVBudgetError
from .hardware import Accelerator, Source, Sourced
from .models import ModelConfig
from .units import GiB

__all__ = ["DecodeStep", "decode_step", "Criticality", "criticality", "KVCapacity", "kv_capacity", "kv_budget_for",
           "pool_kv_bytes_per_token",
           "compute_peak", "windowed_block_bytes", "published_reserve", "LLAMA3_8B_80GB_RESERVE",
           "allreduce_terms", "smallest_tensor_parallel_size", "TENSOR_PARALLEL_SIZES"]


_NO_ACCELERATOR = object()


def _check_parts(model: Any, accelerator: Any = _NO_ACCELERATOR) -> None:
    if not isinstance(model, ModelConfig):
        raise InvalidValueError("model", model, "expected a ModelConfig (roofline.get_model or load_model)")
    if accelerator is not _NO_ACCELERATOR and not isinstance(accelerator, Accelerator):
        raise InvalidValueError("accelerator", accelerator, "expected an Accelerator (roofline.get_accelerator)")


def _check_scalar(field: str, value: Any, *, minimum: int | None = None) -> None:
    """A real scalar (an integer >= ``minimum`` when one is given); arrays go to roofline.formulas."""
    if isinstance(value, np.ndarray):
        raise InvalidValueError(field, value, "expected a scalar; roofline.formulas takes arrays")
    if minimum is None:
        check_number(field, value)
    else:
        check_int(field, value, minimum=minimum)


def _check_flag(field: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidValueError(field, value, "expected True or False")


def _model_terms(model: ModelConfig, flops: str, batch: Any = 1, context: Any = 0) -> dict[str, Any]:
    """The step formulas' model inputs for ``batch`` sequences at ``context`` tokens each.

    The weight bytes are what the step reads (a MoE model's experts touched by ``batch``
    tokens, uniform routing); for a model with sliding-window layers, KV bytes and
    attention FLOPs per context token are the effective rates kv_bytes(c) / c and
    attention_flops(c) / c at this context, so that the formulas' k x B x c is exact.
    """
    terms = {name: Fraction(value) for name, value in model.step_terms(flops).items()}
    if model.is_moe:
        terms["weight_bytes"] = Fraction(model.decode_weight_bytes(batch))
    if (model.has_sliding_window or model.is_sparse_attention) and context:
        # sparse attention reads min(c, index_topk) latent tokens and all c indexer keys (kv_read_bytes)
        terms["kv_bytes_per_token"] = Fraction(model.kv_read_bytes(context)) / context
        if terms["attention_flops_per_token"]:
            terms["attention_flops_per_token"] = Fraction(model.attention_flops(context)) / context
    return terms


def _expert_parallel(d: Deployment, batch: Any, terms: dict[str, Any]) -> dict[str, Any] | None:
    """With expert parallelism (R > 1): the weight bytes one GPU reads set in ``terms`` (its shared weights, the
    replicated shared experts, its E / R experts' expected touched bytes) and the all-to-all's keywords of
    :func:`roofline.formulas.decode_comm_time_ep` beside the all-reduce's; None without it
    (docs/conventions.md, "Expert parallelism")."""
    R = d.expert_parallel_size
    if R == 1:
        return None
    ep = expert_parallel_terms(d.model, d.accelerator, R)
    share = d.share
    touched = f.experts_touched(num_experts=share.num_experts, experts_per_token=share.num_experts_per_tok,
                                batch=batch)
    terms["weight_bytes"] = (Fraction(share.shared_weight_bytes) + ep.pop("replicated_bytes")
                             + ep.pop("routed_expert_bytes") * touched)
    return dict(ep, num_experts=share.num_experts, experts_per_token=share.num_experts_per_tok)


def _profile_constants(profile: Any, accelerator: Accelerator, model: Any = None) -> dict[str, Any]:
    """A profile's constants on ``accelerator`` for ``model``'s weight dtype (the eta_bw of
    :meth:`roofline.profiles.EngineProfile.eta_bw_for`); a profile object whose ``constants()`` takes no
    accelerator gives its one set."""
    from .profiles import EngineProfile

    if isinstance(profile, EngineProfile):
        return dict(profile.constants(accelerator, getattr(model, "weight_dtype", None)))
    try:
        return dict(profile.constants(accelerator))
    except TypeError:
        return dict(profile.constants())


def compute_peak(model: ModelConfig, accelerator: Accelerator) -> Any:
    """The dense peak [FLOP/s] the model's matmuls run at: FP8 when weights and activations are FP8.

    Weight-only quantization (GPTQ, AWQ, w4a16, mxfp4) dequantizes to the activation dtype
    and uses its peak (BF16/FP16); docs/conventions.md, "Weight dtypes per tensor class".
    (:attr:`roofline.ModelConfig.compute_dtype`, :meth:`roofline.Accelerator.peak`.)

    Raises
    ------
    InvalidValueError
        FP8 activations on an accelerator without an FP8 peak.
    """
    return accelerator.peak(model.compute_dtype)


def _hardware_terms(accelerator: Accelerator, model: ModelConfig | None = None) -> dict[str, Fraction]:
    dtype = "bf16" if model is None else model.compute_dtype
    return {name: Fraction(value) for name, value in accelerator.step_terms(dtype).items()}


@attrs.frozen
class DecodeStep:
    """One decode step of ``batch`` sequences at ``context`` tokens each (all SI units).

    Attributes
    ----------
    batch [sequences], context [tokens], bytes [bytes], flops [FLOP],
    memory_time [s], compute_time [s], step_time [s] (roofline max + overhead),
    step_time_no_overlap [s], throughput [tokens/s], math_busy_share [1],
    bandwidth_share [1], intensity [FLOP/byte], bound ("memory" or "compute"),
    flops_convention ("exact" or "2p"),
    time_kind ("bound", or "estimate: " and the profile's name when the times are an
    engine profile's estimate: memory and compute time at eta_bw x bandwidth and
    eta_mm x peak, step time with t_step + L t_layer + B t_seq added; docs/conventions.md,
    "Bound and estimate").
    tensor_parallel_size [GPUs] (T; bytes, FLOPs, memory and compute times are one GPU's,
    throughput the group's), allreduce_time [s] (in step_time; 0 at T = 1; with expert
    parallelism the step's whole communication, roofline.formulas.decode_comm_time_ep) and its
    allreduce_bandwidth_time and allreduce_latency_time terms [s] (docs/conventions.md,
    "Tensor parallelism"); at P > 1 also pipeline_parallel_size and send_time [s] (the P - 1
    stage sends, in step_time; docs/conventions.md, "Pipeline parallelism").
    """

    batch: Any
    context: Any
    bytes: Any
    flops: Any
    memory_time: Any
    compute_time: Any
    step_time: Any
    step_time_no_overlap: Any
    throughput: Any
    math_busy_share: Any
    bandwidth_share: Any
    intensity: Any
    bound: str
    flops_convention: str
    time_kind: str = "bound"
    tensor_parallel_size: int = 1
    allreduce_time: Any = 0
    allreduce_bandwidth_time: Any = 0
    allreduce_latency_time: Any = 0
    pipeline_parallel_size: int = 1
    send_time: Any = 0


def decode_step(
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    batch: int,
    context: int,
    flops: str = FROM_DEPLOYMENT,
    overhead: Any = 0,
    kv_reads: bool = True,
    estimate: Any = FROM_DEPLOYMENT,
    tensor_parallel_size: int = FROM_DEPLOYMENT,
) -> DecodeStep:
    """Cost of one decode step of ``batch`` sequences, each at ``context`` tokens: the bound, or an estimate.

    Parameters
    ----------
    model : Deployment or ModelConfig
        A Deployment holds the accelerator, T, the convention and the profile (``flops`` and
        ``estimate`` given here replace its own); a ModelConfig takes them as the arguments below.
    accelerator : Accelerator (beside a ModelConfig only)
        Its ``bandwidth`` [bytes/s] and dense BF16 ``peak_flops`` [FLOP/s] are used.
    batch : int > 0 [sequences] (a Python or numpy integer scalar)
    context : int >= 0 [tokens], KV cache each sequence attends over
    flops : {"exact", "2p"}, default "exact" (a Deployment's own)
    overhead : [s] >= 0, fixed per-step overhead
    kv_reads : bool
        False drops the KV bytes (and attention FLOPs) and a hybrid's recurrent state: the weights-only
        picture.
    estimate : EngineProfile, str or None
        None (default; a Deployment's own): the roofline bound. An engine profile or its key
        (:func:`roofline.profiles.get_engine_profile`, e.g. ``get_engine_profile("vllm")``):
        that profile's estimate, :func:`roofline.formulas.estimated_step_time` (``overhead``
        is added to its t_step).
    tensor_parallel_size : int >= 1, default 1 (a Deployment's own; beside a ModelConfig only)
        T GPUs in a tensor-parallel group: bytes, FLOPs, memory and compute times are one GPU's
        share (:meth:`roofline.ModelConfig.per_gpu`; a ``model`` that is already a share is priced
        at its own T) and the step adds the 2 L ring all-reduces of
        B x hidden x activation bytes over :meth:`roofline.Accelerator.link` (T)
        (:func:`roofline.formulas.step_time_tp`; docs/conventions.md, "Tensor parallelism").
        T = 1 gives the single-GPU numbers exactly.
        A Deployment of P > 1 pipeline stages gives one batch's step through them
        (:func:`roofline.formulas.step_time_pp`: the sums over the stages are one GPU's share of T,
        plus the P - 1 sends, ``send_time``; docs/conventions.md, "Pipeline parallelism").

    Returns
    -------
    DecodeStep (scalars; exact Fractions for the presets); ``time_kind`` says bound or estimate.

    Raises
    ------
    InvalidValueError
        A batch that is not an integer >= 1, a context that is not an integer >= 0, a
        negative overhead, an unknown convention, a model/accelerator of the wrong type,
        an ``estimate`` that is not an engine profile, or a T the model's heads refuse
        (:class:`roofline.Deployment`, each naming its field).

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> s = decode_step(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), batch=1, context=0)
    >>> round(float(s.step_time) * 1e3, 2), s.bound
    (4.79, 'memory')
    >>> from roofline.calibrate import get_engine_profile
    >>> vllm = get_engine_profile("vllm")
    >>> e = decode_step(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), batch=1, context=0, estimate=vllm)
    >>> round(float(e.step_time) * 1e3, 2), e.time_kind
    (8.41, 'estimate: vLLM with CUDA graphs')
    """
    d = as_deployment(model, accelerator, tensor_parallel_size=tensor_parallel_size, flops=flops, estimate=estimate)
    _check_scalar("batch", batch, minimum=1)
    _check_scalar("context", context, minimum=0)
    _check_scalar("overhead", overhead)
    _check_flag("kv_reads", kv_reads)
    model, accelerator, group = d.share, d.accelerator, d.tensor_parallel_size
    ar = d.allreduce_terms() if group > 1 else None
    terms = _model_terms(model, d.flops, batch, context)
    ep = _expert_parallel(d, batch, terms)
    if not kv_reads:
        terms.update(kv_bytes_per_token=0, attention_flops_per_token=0)
    P = d.pipeline_parallel_size
    if P > 1:  # a tied lm_head's copy on the last stage (docs/conventions.md, "Pipeline parallelism")
        terms["weight_bytes"] = terms["weight_bytes"] + sum(st.weight_bytes for st in d.stages()) - model.weight_bytes
    if model.is_hybrid and kv_reads:
        # each sequence's recurrent state, read and written back once a step (docs/conventions.md, "Hybrid
        # models"), is a per-row constant: priced with the bytes the step reads once
        # (f.hybrid_decode_bytes: W + k S + 2 B S_st)
        terms["weight_bytes"] = terms["weight_bytes"] + 2 * batch * Fraction(model.state_bytes_per_sequence)
    if d.estimate is not None:
        profile = d.estimate
        f.estimated_step_time(  # checks the constants and the arguments, naming a bad one
            **terms, **_hardware_terms(accelerator, model), batch=batch, context_sum=batch * context,
            num_hidden_layers=model.num_hidden_layers,
            **{"t_seq": 0, **_profile_constants(profile, accelerator, model)})
        overhead = (Fraction(overhead) + profile.overhead(model.num_hidden_layers)
                    + batch * Fraction(per_sequence_time(profile)))
        from .profiles import scaled_for

        accelerator = scaled_for(profile, accelerator, model)
    kw = dict(terms, **_hardware_terms(accelerator, model), batch=batch, context_sum=batch * context,
              overhead=overhead)
    step = f.step_time(**kw)
    mem = f.memory_time(
        weight_bytes=kw["weight_bytes"], kv_bytes_per_token=kw["kv_bytes_per_token"],
        context_sum=kw["context_sum"], bandwidth=kw["bandwidth"],
    )
    comp = f.compute_time(
        batch=batch, flops_per_token=kw["flops_per_token"],
        attention_flops_per_token=kw["attention_flops_per_token"],
        context_sum=kw["context_sum"], peak_flops=kw["peak_flops"],
    )
    tp: dict[str, Any] = {}
    if ar is not None or P > 1:
        allreduce: Any = 0
        if ar is not None:
            ar_kw = dict(ar, batch=batch)
            if ep is not None:  # expert parallelism: all-reduces, all-gathers and all-to-alls, affine in the batch
                allreduce = f.decode_comm_time_ep(**ar_kw, **ep)
                latency = (2 * f.decode_comm_time_ep(**ar, **ep, batch=1)
                           - f.decode_comm_time_ep(**ar, **ep, batch=2))
                parts = dict(allreduce_bandwidth_time=allreduce - latency, allreduce_latency_time=latency)
            else:
                allreduce = f.decode_allreduce_time(**ar_kw)
                parts = dict(allreduce_bandwidth_time=f.decode_allreduce_bandwidth_time(**ar_kw),
                             allreduce_latency_time=f.decode_allreduce_latency_time(**ar_kw))
            tp = dict(tensor_parallel_size=group, allreduce_time=allreduce, **parts)
        if P > 1:  # one batch through the P stages: the sends between them (f.step_time_pp)
            sends = f.pipeline_sends_time(batch=batch, **d.send_terms())
            allreduce = allreduce + sends
            tp.update(pipeline_parallel_size=P, send_time=sends)
        step = step + allreduce
        shares = dict(step_time_no_overlap=f.step_time_no_overlap.unchecked(**kw) + allreduce,
                      throughput=batch / step, math_busy_share=comp / step, bandwidth_share=mem / step)
    else:
        shares = dict(step_time_no_overlap=f.step_time_no_overlap.unchecked(**kw),
                      throughput=f.throughput.unchecked(**kw),
                      math_busy_share=f.math_busy_share.unchecked(**kw),
                      bandwidth_share=f.bandwidth_share.unchecked(**kw))
    return DecodeStep(
        batch=batch,
        context=context,
        bytes=f.decode_bytes.unchecked(
            weight_bytes=kw["weight_bytes"], kv_bytes_per_token=kw["kv_bytes_per_token"],
            context_sum=kw["context_sum"],
        ),
        flops=f.decode_flops.unchecked(
            batch=batch, flops_per_token=kw["flops_per_token"],
            attention_flops_per_token=kw["attention_flops_per_token"], context_sum=kw["context_sum"],
        ),
        memory_time=mem,
        compute_time=comp,
        step_time=step,
        **shares,
        intensity=f.arithmetic_intensity(
            batch=batch, context=context, **{n: terms[n] for n in
            ("weight_bytes", "kv_bytes_per_token", "flops_per_token", "attention_flops_per_token")}
        ),
        bound="compute" if comp >= mem else "memory",
        flops_convention=d.flops,
        time_kind=d.time_kind,
        **tp,
    )


@attrs.frozen
class Criticality:
    """Where decode turns compute-bound, for one model, accelerator and context.

    Attributes
    ----------
    ridge_point : [FLOP/byte]
    context : [tokens]
    critical_batch : int or None [sequences] (None: memory-bound at every batch)
    critical_batch_weights_only : int [sequences] (no KV reads, no attention FLOPs)
    critical_context : [tokens] or None (c*; None: every context has a critical batch)
    intensity_limit : [FLOP/byte] or None (as batch -> infinity; None at context 0)
    flops_convention : "exact" or "2p"
    """

    ridge_point: Any
    context: Any
    critical_batch: Any
    critical_batch_weights_only: Any
    critical_context: Any
    intensity_limit: Any
    flops_convention: str


def criticality(
    model: ModelConfig | Deployment, accelerator: Accelerator | None = None, *, context: int,
    flops: str = FROM_DEPLOYMENT, tensor_parallel_size: int = FROM_DEPLOYMENT,
) -> Criticality:
    """Ridge point, critical batch (with and without KV), critical context c*.

    Parameters
    ----------
    model : Deployment or ModelConfig
        A Deployment's accelerator, T and convention (``flops`` given here replaces it); its
        profile is not used: criticality is the bound's.
    accelerator : Accelerator (beside a ModelConfig only)
    context : int >= 0 [tokens]
    flops : {"exact", "2p"}, default "exact" (a Deployment's own)
    tensor_parallel_size : int >= 1, default 1 (a Deployment's own; beside a ModelConfig only)
        T: the ridge point, critical batch and c* of one GPU's share
        (:meth:`roofline.ModelConfig.per_gpu`). The all-reduce adds time to both regimes and
        moves neither (docs/conventions.md, "Tensor parallelism").

    Returns
    -------
    Criticality (exact Fractions and ints for the presets).

    Raises
    ------
    InvalidValueError

    Notes
    -----
    ``roofline.formulas.intensity``; docs/conventions.md ("Critical batch").

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> c = criticality(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), context=1000, flops="2p")
    >>> c.critical_batch is None, c.critical_batch_weights_only, round(float(c.critical_context))
    (True, 296, 415)
    """
    d = as_deployment(model, accelerator, tensor_parallel_size=tensor_parallel_size, flops=flops)
    _check_scalar("context", context, minimum=0)
    model, accelerator, flops = d.share, d.accelerator, d.flops
    terms = _model_terms(model, flops, 1, context)
    hw = _hardware_terms(accelerator, model)
    weights_only = dict(terms, kv_bytes_per_token=Fraction(0), attention_flops_per_token=Fraction(0))
    full = {name: Fraction(value) for name, value in model.step_terms(flops).items()}
    state = Fraction(model.state_bytes_per_sequence)
    if model.is_moe:
        critical = _moe_critical_batch(model, terms, hw, context, state)
        critical_weights_only = _moe_critical_batch(model, weights_only, hw, 0)
    elif state:
        critical = f.hybrid_critical_batch(context=context, **terms, **hw, state_bytes=state)
        critical_weights_only = f.critical_batch(context=0, **weights_only, **hw)
    else:
        critical = f.critical_batch(context=context, **terms, **hw)
        critical_weights_only = f.critical_batch(context=0, **weights_only, **hw)
    if state:  # the attention share and the state set c* (roofline.formulas.hybrid)
        critical_ctx = f.hybrid_critical_context(
            kv_bytes_per_token=terms["kv_bytes_per_token"], flops_per_token=terms["flops_per_token"],
            attention_flops_per_token=terms["attention_flops_per_token"], state_bytes=state, **hw)
        return Criticality(
            ridge_point=f.ridge_point(**hw), context=context, critical_batch=critical,
            critical_batch_weights_only=critical_weights_only, critical_context=critical_ctx,
            # (F + a c) / (k c + 2 S): the dense limit with the state spread over the context's tokens
            intensity_limit=None if context == 0 else f.intensity_limit(
                context=context, kv_bytes_per_token=terms["kv_bytes_per_token"] + 2 * state / context,
                flops_per_token=terms["flops_per_token"],
                attention_flops_per_token=terms["attention_flops_per_token"]),
            flops_convention=flops)
    if model.has_sliding_window:
        critical_ctx = _windowed_critical_context(model, full, hw)
    elif model.is_sparse_attention:
        critical_ctx = _sparse_critical_context(model, full, hw)
    else:
        critical_ctx = f.critical_context(
            kv_bytes_per_token=terms["kv_bytes_per_token"], flops_per_token=terms["flops_per_token"],
            attention_flops_per_token=terms["attention_flops_per_token"], **hw,
        )
    return Criticality(
        ridge_point=f.ridge_point(**hw),
        context=context,
        critical_batch=critical,
        critical_batch_weights_only=critical_weights_only,
        critical_context=critical_ctx,
        intensity_limit=None if context == 0 else f.intensity_limit(
            context=context, kv_bytes_per_token=terms["kv_bytes_per_token"],
            flops_per_token=terms["flops_per_token"],
            attention_flops_per_token=terms["attention_flops_per_token"],
        ),
        flops_convention=flops,
    )


#: Largest batch the MoE critical-batch search tries before calling the step memory-bound.
_MAX_BATCH = 1 << 40


def _moe_critical_batch(model: ModelConfig, terms: dict[str, Any], hw: dict[str, Any], context: int,
                        state: Any = 0) -> int | None:
    """Smallest integer B whose MoE decode step is compute-bound (uniform routing), or None.

    The compute margin g(B) = FLOPs / peak - bytes / BW (:func:`roofline.formulas.moe_compute_margin`)
    is convex in B and negative at B = 0 (``roofline.symbolic.moe``; proofs/p09_moe.py),
    so {B : g(B) >= 0} is [B*, oo) or empty; it is non-empty iff F + a c > (peak / BW) k c
    (as B grows, experts touched tend to E and g grows like B (F + a c - ridge k c) / peak).
    B* is found exactly by doubling then bisection on integers. A hybrid's recurrent state
    (``state`` bytes per sequence, read and written back) subtracts 2 B state / BW from the
    margin: a linear term, so the margin stays convex and B* exists iff F + a c > ridge (k c + 2 state).
    """
    per_seq = terms["flops_per_token"] + terms["attention_flops_per_token"] * context
    if per_seq * hw["bandwidth"] <= hw["peak_flops"] * (terms["kv_bytes_per_token"] * context + 2 * state):
        return None
    kw = dict(context=context, shared_weight_bytes=Fraction(model.shared_weight_bytes),
              routed_expert_bytes=Fraction(model.routed_expert_bytes), num_experts=model.num_experts,
              experts_per_token=model.num_experts_per_tok, kv_bytes_per_token=terms["kv_bytes_per_token"],
              flops_per_token=terms["flops_per_token"], attention_flops_per_token=terms["attention_flops_per_token"],
              **hw)

    def bound(b: int) -> bool:
        return f.moe_compute_margin.unchecked(batch=b, **kw) - 2 * b * state / hw["bandwidth"] >= 0

    hi = 1
    while not bound(hi):
        hi *= 2
        if hi > _MAX_BATCH:  # pragma: no cover - unreachable when the limit exceeds the ridge
            return None
    lo = hi // 2  # bound(lo) is False (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bound(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _windowed_critical_context(model: ModelConfig, full: dict[str, Any], hw: dict[str, Any]) -> Any:
    """c* for a model with sliding-window layers: the context where the intensity limit meets the ridge.

    The limit as B grows is (F + A(c)) / K(c), with K(c) = sum_l min(c, w_l) x per-layer KV
    bytes and A(c) the same sum of per-layer attention FLOPs; every layer has the same
    ratio r = a_l / k_l, so the limit is F / K(c) + r, non-increasing in c. c* solves
    K(c) = F / (ridge - r) on the piecewise-linear held(c) = sum_l min(c, w_l); None when
    ridge <= r or when even the largest K (every window full) stays below it.
    """
    ridge = hw["peak_flops"] / hw["bandwidth"]
    per_layer_k = Fraction(model.layer_kv_elements * model.kv_bytes_per_element)
    per_layer_a = Fraction(full["attention_flops_per_token"], model.num_hidden_layers)
    den = ridge * per_layer_k - per_layer_a
    if den <= 0:
        return None
    target = full["flops_per_token"] / den  # token-layers of KV at c*
    windows = sorted(w for w in model.layer_windows if w is not None)
    unbounded = sum(1 for w in model.layer_windows if w is None)
    done, start = Fraction(0), 0  # held(c) = done + c x (layers whose window exceeds c)
    for i, w in enumerate(windows + [None]):
        slope = unbounded + (len(windows) - i)
        if slope == 0:
            return None
        c = (target - done) / slope
        if w is None or c <= w:
            return c if c >= start else Fraction(start)
        done += w
        start = w
    return None  # pragma: no cover


def _sparse_critical_context(model: ModelConfig, full: dict[str, Any], hw: dict[str, Any]) -> Any:
    """c* under DeepSeek sparse attention: :func:`roofline.formulas.sparse_critical_context` (the two-part
    critical context: the dense MLA form up to index_topk tokens, the indexer's past it) with the model's
    :meth:`roofline.ModelConfig.sparse_terms` (no attention FLOPs under the 2p convention, as ``full``
    counts none) (docs/conventions.md, "Sparse attention")."""
    terms = model.sparse_terms()
    if not full["attention_flops_per_token"]:  # the 2p convention counts no attention FLOPs
        terms.update(latent_attention_flops_per_token=0, index_flops_per_token=0)
    return f.sparse_critical_context(flops_per_token=full["flops_per_token"], **terms, **hw)


@attrs.frozen
class KVCapacity:
    """How much KV cache fits, and how many sequences of ``context`` tokens.

    Attributes
    ----------
    budget : [bytes]
    kv_bytes_per_token : [bytes/token]
    tokens : [tokens], floor(budget / k)
    block_size : [tokens/block]
    blocks : [blocks], floor(budget / (b k))
    context : [tokens]
    sequences : [sequences], token-level accounting
    sequences_blocks : [sequences], block-level accounting (<= sequences)
    kv_bytes_per_sequence : [bytes], KV one sequence holds at ``context`` (window-aware; a hybrid's
        recurrent state included, and its blocks in ``sequences_blocks``)

    For a model with sliding-window layers, ``tokens`` and ``blocks`` are at the full-attention
    rate (named so); ``sequences`` and ``sequences_blocks`` use the window-aware bytes.
    """

    budget: Any
    kv_bytes_per_token: Any
    tokens: int
    block_size: int
    blocks: int
    context: int
    sequences: int
    sequences_blocks: int
    kv_bytes_per_sequence: Any = None


def kv_budget_for(
    model: ModelConfig | Deployment, accelerator: Accelerator | None = None, *, utilization: Any = Fraction(9, 10),
    reserved: Any = 0, tensor_parallel_size: int = FROM_DEPLOYMENT, proposer: Any = None,
) -> Fraction:
    """KV budget [bytes] = usable memory x utilization - weight bytes - reserved.

    Parameters
    ----------
    model : Deployment or ModelConfig (a ModelConfig with ``accelerator`` and ``tensor_parallel_size``)
    accelerator : Accelerator (beside a ModelConfig only)
    utilization : in (0, 1], default 0.9 (as vLLM's gpu_memory_utilization)
    reserved : [bytes] >= 0, activations and runtime; 0 (the default) gives the upper bound. A
        budget called "real" passes a published reserve, e.g. ``published_reserve(model, accelerator)``
        (docs/conventions.md, "Memory").
    tensor_parallel_size : int >= 1, default 1 (a Deployment's own; beside a ModelConfig only)
        T: the budget of one GPU holding its share of the weights (:meth:`roofline.ModelConfig.per_gpu`);
        the group holds T such budgets, each caching its share of every token's KV
        (docs/conventions.md, "Tensor parallelism").
    proposer : roofline.speculative.ProposerMemory or None (default: none)
        A speculative proposer held beside the model (:func:`roofline.speculative.proposer_memory`): its
        weights, one GPU's share at T, are weight bytes too, taken from the budget as vLLM loads them before it
        sizes the KV cache (docs/conventions.md, "Speculative decoding"). Not with pipeline stages.

    Returns
    -------
    Fraction [bytes] (per GPU; with P > 1 pipeline stages, per column of P GPUs, one of each stage)
        A Deployment of P > 1 stages (docs/conventions.md, "Pipeline parallelism"): each stage's GPU
        has its own budget b_s = usable x utilization - its weights - reserved, and caches its layers'
        part k_s of each token's KV, so the pipeline holds min_s b_s / k_s tokens (vLLM takes the
        least num_gpu_blocks over its workers). The budget returned is that many tokens at one GPU's
        share of T of every layer, k = sum_s k_s: min_s (b_s x k / k_s), the KV memory of one GPU
        per stage together, limited by the tightest stage; so that :func:`kv_capacity` and
        :meth:`roofline.sim.KVPool.for_model` of it at :attr:`roofline.Deployment.share`'s k give the
        pipeline's tokens and blocks exactly (:meth:`roofline.Deployment.kv_blocks`). With equal
        stages it is P x one stage's b_s.

    Raises
    ------
    InvalidValueError
        A bad utilization, reserved or T (heads that T does not divide), or weights that leave no
        KV budget (names "budget"; the message gives the smallest T that fits when one does; with
        P > 1 it names the stage whose weights leave none; with a proposer it gives both shares);
        a proposer beside pipeline stages (``pipeline_parallel_size``).

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> llama, h100 = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    >>> round(float(kv_budget_for(llama, h100)) / 1e9, 2)  # reserve 0: the upper bound
    60.48
    >>> round(float(kv_budget_for(llama, h100, reserved=published_reserve(llama, h100).value)) / 1e9, 2)
    57.2
    """
    d = as_deployment(model, accelerator, tensor_parallel_size=tensor_parallel_size)
    _check_scalar("utilization", utilization)
    _check_scalar("reserved", reserved)
    extra = Fraction(0) if proposer is None else Fraction(proposer.weight_bytes)
    if d.pipeline_parallel_size > 1:
        if proposer is not None:
            raise InvalidValueError("pipeline_parallel_size", d.pipeline_parallel_size, "a speculative proposer "
                                    "beside pipeline stages: not modelled yet")
        return _pipeline_kv_budget(d, utilization, reserved)
    model, accelerator, share, group = d.model, d.accelerator, d.share, d.tensor_parallel_size
    budget = f.kv_budget(
        memory=Fraction(accelerator.usable_memory), utilization=utilization,
        weight_bytes=Fraction(share.weight_bytes) + extra, reserved=reserved,
    )
    if budget <= 0 and extra:
        raise NoKVBudgetError(
            float(budget),
            f"{model.name} weights ({float(share.weight_bytes) / 1e9:.2f} GB{' per GPU' if group > 1 else ''}) "
            f"and the {proposer.method} proposer's ({float(extra) / 1e9:.2f} GB) leave no KV budget on {d.where} "
            f"at utilization {float(utilization)}",
        )
    if budget <= 0:
        hint = ""
        smallest = smallest_tensor_parallel_size(model, accelerator, utilization=utilization, reserved=reserved)
        if smallest is not None and smallest > group:
            hint = f"; the smallest tensor-parallel size that fits is {smallest} (--tensor-parallel-size {smallest})"
        elif smallest is None:
            hint = (f"; no tensor-parallel size of {', '.join(map(str, TENSOR_PARALLEL_SIZES))} fits on one server "
                    "of it (groups across servers: roofline fit, T x P up to 64 GPUs)"
                    + _larger_cards(model, utilization, reserved))
        raise NoKVBudgetError(
            float(budget),
            f"{model.name} weights ({float(share.weight_bytes) / 1e9:.2f} GB"
            f"{' per GPU' if group > 1 else ''}) leave no KV budget on "
            f"{d.where} at utilization {float(utilization)}{hint}",
        )
    return Fraction(budget)


def _pipeline_kv_budget(d: Deployment, utilization: Any, reserved: Any) -> Fraction:
    """:func:`kv_budget_for` of P > 1 stages: min_s b_s x k / k_s [bytes] (its docstring)."""
    k = Fraction(d.share.kv_bytes_per_token)
    out = None
    for st in d.stages():
        b = f.kv_budget(memory=Fraction(d.accelerator.usable_memory), utilization=utilization,
                        weight_bytes=Fraction(st.weight_bytes), reserved=reserved)
        if b <= 0:
            last = st.first_layer + st.layers - 1
            raise NoKVBudgetError(float(b), f"{d.model.name}: stage {st.index}'s weights "
                                  f"({float(st.weight_bytes) / 1e9:.2f} GB per GPU, layers {st.first_layer}-{last}) "
                                  f"leave no KV budget on {d.where} at utilization {float(utilization)} "
                                  "(roofline fit: T x P)")
        room = b * k / Fraction(st.kv_bytes_per_token) if st.kv_bytes_per_token else None
        if room is not None and (out is None or room < out):
            out = room
    return Fraction(out if out is not None else 0)


def _larger_cards(model: ModelConfig, utilization: Any, reserved: Any) -> str:
    """'; it fits on h200-sxm at T = 8, ...': the accelerator presets where some T of one server fits."""
    from .hardware import accelerator_names, get_accelerator

    fits = []
    for name in accelerator_names():
        T = smallest_tensor_parallel_size(model, get_accelerator(name), utilization=utilization, reserved=reserved)
        if T is not None:
            fits.append(f"{name} at T = {T}")
    return f"; it fits on {', '.join(fits)} (--accelerator, --tensor-parallel-size)" if fits else ""


#: Tensor-parallel sizes :func:`smallest_tensor_parallel_size` tries: one server's GPU counts.
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


def smallest_tensor_parallel_size(
    model: ModelConfig, accelerator: Accelerator, *, utilization: Any = Fraction(9, 10), reserved: Any = 0,
    sizes: Any = TENSOR_PARALLEL_SIZES,
) -> int | None:
    """The smallest T of ``sizes`` whose per-GPU weights leave a KV budget > 0 on ``accelerator``, or None.

    Sizes that the model's heads or widths refuse (:meth:`roofline.ModelConfig.per_gpu`) or that
    the accelerator's links cannot hold (:meth:`roofline.Accelerator.link`) are skipped.

    Parameters
    ----------
    model : ModelConfig (a whole model)
    accelerator : Accelerator
    utilization, reserved : as :func:`kv_budget_for`
    sizes : iterable of int >= 1, default (1, 2, 4, 8)

    Returns
    -------
    int or None
        None when no size fits (the model needs more GPUs than one server holds, or other parts).

    Raises
    ------
    InvalidValueError
        A bad utilization or reserved.

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> smallest_tensor_parallel_size(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"))
    2
    """
    _check_parts(model, accelerator)
    _check_scalar("utilization", utilization)
    _check_scalar("reserved", reserved)
    for T in sizes:
        try:
            share = Deployment(model, accelerator, T).share
            if T > 1:
                accelerator.link(T)
        except InvalidValueError:
            continue
        budget = f.kv_budget(memory=Fraction(accelerator.usable_memory), utilization=utilization,
                             weight_bytes=Fraction(share.weight_bytes), reserved=reserved)
        if budget > 0:
            return int(T)
    return None


#: Memory vLLM keeps outside the weights and the KV cache for Llama 3 8B (8,030,261,248 parameters, BF16) on
#: an 80 GB GPU: non-torch memory (CUDA context, NCCL, CUDA graphs) + the PyTorch activation peak of its
#: profiling run, 1.79 GiB + 1.26 GiB = 3.05 GiB, as printed by vLLM (docs/conventions.md, "Memory").
LLAMA3_8B_80GB_RESERVE = Sourced(
    Fraction(179 + 126, 100) * GiB,
    "bytes",
    Source(
        "measured",
        "vLLM pull request #10511, \"[core] overhaul memory profiling and fix backward compatibility\", comment by "
        "youkaichao, https://github.com/vllm-project/vllm/pull/10511: `vllm serve meta-llama/Meta-Llama-3-8B` logs "
        "\"total_gpu_memory 79.22GiB; gpu_memory_utilization 0.90; model weights take 14.96GiB; non_torch_memory "
        "1.79GiB; PyTorch activation peak memory 1.26GiB; available_kv_cache_memory 53.29GiB\"",
        "2024-12-14",
        "vLLM main of December 2024, tensor parallel 1, default max_num_batched_tokens; reserve = non_torch_memory "
        "+ PyTorch activation peak memory",
    ),
)

_LLAMA3_8B_PARAMETERS = 8_030_261_248


def published_reserve(model: ModelConfig, accelerator: Accelerator) -> Sourced | None:
    """The reserve [bytes] a published engine log gives for this model size on this card, or None.

    A KV budget called "real" subtracts, besides the weights, the memory the engine keeps
    for the activation peak and non-torch allocations (docs/conventions.md, "Memory").
    The package knows one such log: :data:`LLAMA3_8B_80GB_RESERVE` (vLLM, Llama 3 8B,
    80 GB GPU, 3.05 GiB), used for a model of the same size (8,030,261,248 parameters,
    BF16 weights: Llama 3 and 3.1 8B) on a card showing 78 to 80 GiB to software.

    Parameters
    ----------
    model : ModelConfig
    accelerator : Accelerator

    Returns
    -------
    Sourced [bytes] or None
        None where no published log covers the pair: only the upper bound (reserve 0)
        can then be given, and is named so.

    Raises
    ------
    InvalidValueError
        ``model`` or ``accelerator`` of the wrong type.

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> float(published_reserve(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))) / 2**30
    3.05
    >>> published_reserve(get_model("opt-13b"), get_accelerator("a100-40gb")) is None
    True
    """
    _check_parts(model, accelerator)
    same_size = model.parameters == _LLAMA3_8B_PARAMETERS and model.weight_dtype == "bfloat16"
    card_80gb = 78 * GiB <= accelerator.usable_memory <= 80 * GiB
    return LLAMA3_8B_80GB_RESERVE if same_size and card_80gb else None


def pool_kv_bytes_per_token(model: Any, proposer: Any = None) -> Any:
    """KV bytes each token holds in the block pool [bytes/token]: the model's, plus a proposer's.

    Parameters
    ----------
    model : ModelConfig or ModelShare (one GPU's share under tensor parallelism)
    proposer : roofline.speculative.ProposerMemory or None (its ``kv_bytes_per_token``, one GPU's)

    Returns
    -------
    ``model.kv_bytes_per_token`` (+ the proposer's): vLLM V1 gives the proposer's attention layers KV in the
    same block pool, so a block of b tokens holds b tokens of every layer of both (docs/conventions.md,
    "Speculative decoding").

    Raises
    ------
    InvalidValueError
        A proposer beside a model with sliding-window layers or recurrent state (field ``proposer``: their
        pools hold per-layer or per-sequence blocks, not modelled with a proposer).
    """
    if proposer is None:
        return model.kv_bytes_per_token
    if model.has_sliding_window or model.is_hybrid:
        raise InvalidValueError("proposer", proposer.method, f"a proposer's KV beside {model.name}'s sliding-window "
                                "or recurrent layers: not modelled")
    return model.kv_bytes_per_token + proposer.kv_bytes_per_token


def kv_capacity(
    model: ModelConfig | Deployment, *, budget: Any, context: int, block_size: int = 16,
    tensor_parallel_size: int = FROM_DEPLOYMENT, proposer: Any = None,
) -> KVCapacity:
    """Tokens, blocks and sequences of ``context`` tokens a KV budget holds.

    Parameters
    ----------
    model : Deployment or ModelConfig (one GPU's ``kv_bytes_per_token``: :attr:`roofline.Deployment.share`)
    budget : [bytes] >= 0
    context : int > 0 [tokens]
    block_size : int > 0 [tokens/block], default 16 (vLLM's default)
    tensor_parallel_size : int >= 1, default 1 (a Deployment's own; beside a ModelConfig only)
        T: ``budget`` is one GPU's and the KV bytes per token are one GPU's share (KV heads split,
        or one replicated per GPU; MLA's latent replicated; :meth:`roofline.ModelConfig.per_gpu`).
        The sequences that fit are the group's: every GPU holds its share of each sequence.
    proposer : roofline.speculative.ProposerMemory or None (default: none)
        A speculative proposer's KV in the same pool: each token holds :func:`pool_kv_bytes_per_token`
        (``budget`` should then be :func:`kv_budget_for` with the same proposer).

    Returns
    -------
    KVCapacity (its ``kv_bytes_per_token`` the pool's, the proposer's included)

    Raises
    ------
    InvalidValueError
        A bad budget, context or block size; as :func:`pool_kv_bytes_per_token`.

    Examples
    --------
    >>> from roofline import get_model
    >>> kv_capacity(get_model("llama-3.1-8b"), budget=53_000_000_000, context=1000).sequences
    404
    """
    model = _share_of(model, tensor_parallel_size)
    _check_scalar("budget", budget)
    _check_scalar("context", context, minimum=1)
    _check_scalar("block_size", block_size, minimum=1)
    k = pool_kv_bytes_per_token(model, proposer)
    if model.is_hybrid:  # KV plus one fixed state per sequence (roofline.formulas.hybrid; "Hybrid models")
        state = model.state_bytes_per_sequence
        blocks = int(f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=k, block_size=block_size))
        state_blocks = f.hybrid_state_blocks(state_bytes=state, block_size=block_size, kv_bytes_per_token=k)
        return KVCapacity(
            budget=budget, kv_bytes_per_token=k,
            tokens=int(f.kv_capacity_tokens(budget=budget, kv_bytes_per_token=k)), block_size=block_size,
            blocks=blocks, context=context, sequences=int(Fraction(budget) // Fraction(k * context + state)),
            sequences_blocks=int(f.hybrid_sequences_that_fit(pool_blocks=blocks, context=context,
                                                             block_size=block_size, state_blocks=state_blocks)),
            kv_bytes_per_sequence=k * context + state,
        )
    if not model.has_sliding_window:
        return KVCapacity(
            budget=budget,
            kv_bytes_per_token=k,
            tokens=int(f.kv_capacity_tokens(budget=budget, kv_bytes_per_token=k)),
            block_size=block_size,
            blocks=int(f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=k, block_size=block_size)),
            context=context,
            sequences=int(f.sequences_that_fit(budget=budget, kv_bytes_per_token=k, context=context)),
            sequences_blocks=int(
                f.sequences_that_fit_blocks(budget=budget, kv_bytes_per_token=k, context=context,
                                            block_size=block_size)
            ),
            kv_bytes_per_sequence=k * context,
        )
    per_sequence = model.kv_bytes(context)
    return KVCapacity(
        budget=budget,
        kv_bytes_per_token=k,
        tokens=int(f.kv_capacity_tokens(budget=budget, kv_bytes_per_token=k)),
        block_size=block_size,
        blocks=int(f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=k, block_size=block_size)),
        context=context,
        sequences=int(Fraction(budget) // Fraction(per_sequence)),
        sequences_blocks=int(Fraction(budget) // Fraction(windowed_block_bytes(model, context, block_size))),
        kv_bytes_per_sequence=per_sequence,
    )


def _share_of(model: Any, tensor_parallel_size: Any) -> ModelConfig:
    """One GPU's share for the functions that need no accelerator: a Deployment's, or ``model.per_gpu(T)``
    (a share made by per_gpu is its own at T = 1)."""
    if isinstance(model, Deployment):
        return as_deployment(model, tensor_parallel_size=tensor_parallel_size).share
    _check_parts(model)
    T = 1 if tensor_parallel_size is FROM_DEPLOYMENT else tensor_parallel_size
    return model.per_gpu(T)


def windowed_block_bytes(model: ModelConfig, context: int, block_size: int) -> Any:
    """KV bytes one sequence at ``context`` tokens holds in paged blocks, window-aware [bytes].

    Each layer group keeps its own blocks of ``block_size`` tokens, as vLLM's hybrid KV
    cache manager does (vLLM V1 ``SlidingWindowManager.remove_skipped_blocks`` frees the
    blocks wholly before the window; vLLM docs, "Hybrid KV Cache Manager"): a full-attention
    layer holds ceil(c / b) blocks; a layer with window w < c holds the blocks covering
    token positions c - w .. c - 1, floor((c - 1) / b) - floor((c - w) / b) + 1 of them.
    Bytes = sum over layers of blocks x b x per-layer bytes per token.

    Raises
    ------
    InvalidValueError
        A context or block size that is not an integer >= 1.
    """
    check_int("context", context, minimum=1)
    check_int("block_size", block_size, minimum=1)
    b = block_size
    blocks = 0
    for w in model.layer_windows or (None,) * model.num_hidden_layers:
        if w is None or w >= context:
            blocks += -(-context // b)
        else:
            blocks += (context - 1) // b - (context - w) // b + 1
    return blocks * b * model.layer_kv_elements * model.kv_bytes_per_element
