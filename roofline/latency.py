"""The answers a user comes for: one request's latency, a memory breakdown and a step by operator.

Three functions of a :class:`roofline.Deployment`, each built on the package's own
mechanisms (no second copy of a formula):

* :func:`request_latency`: TTFT, TPOT, E2E and tokens/s of B identical requests of P prompt
  and O output tokens, all arriving at t = 0 and served together (B = 1: one request). They
  are the reference scheduler's numbers for that workload (:func:`roofline.sim.serve_static`
  with one batch of B, priced by :meth:`roofline.sim.RooflineCostModel.for_deployment`): one
  prefill step of B x P tokens gives every request its first token, then O - 1 decode steps of
  B rows at contexts P + 1, ..., P + O - 1. The bound, or the deployment's engine profile's
  estimate.
* :func:`memory_breakdown`: what one GPU holds: weights by tensor class, the KV cache of B
  sequences at a context, the reserve, what is left of usable memory x utilization.
* :func:`operator_breakdown`: one decode step of B sequences at a context, split by operator
  (embedding, attention, MLP or experts, norms, lm_head, and the all-reduce at T > 1): HBM
  bytes, FLOPs, intensity, memory and compute time, bound. The operators' bytes and FLOPs sum
  to :func:`roofline.estimate.decode_step`'s exactly (the exact FLOPs count), and so do their
  memory and compute times.

Conventions: docs/conventions.md, "One request's latency" (what TPOT averages), "Breakdowns", "One step",
"Memory", "Latency metrics", "Tensor parallelism". Units: bytes, seconds, FLOP, tokens.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs

from . import estimate as est
from . import formulas as f
from ._checks import check_int
from .deployment import Deployment, as_deployment
from .errors import InvalidValueError
from .models import ModelConfig, TensorGroup

__all__ = ["RequestLatency", "request_latency", "MemoryBreakdown", "memory_breakdown", "Operator",
           "OperatorBreakdown", "operator_breakdown", "OPERATORS", "MAX_BATCH"]

#: The operators of :func:`operator_breakdown`, in the order a token meets them. ``"mlp"`` is a dense
#: layer's MLP; ``"experts"`` a MoE layer's routed and shared experts and router.
OPERATORS = ("embedding", "attention", "mlp", "experts", "norms", "lm_head")

#: Most requests :func:`request_latency` serves together [requests]: the scheduler keeps one record per
#: request (about 2 s for 65,536 on one core), so a larger batch is refused rather than left to run for minutes.
MAX_BATCH = 1 << 16


def _check_deployment(deployment: Any) -> Deployment:
    if not isinstance(deployment, Deployment):
        raise InvalidValueError("deployment", deployment,
                                "expected a roofline.Deployment (Deployment(get_model(...), get_accelerator(...)))")
    return deployment


# ---------------------------------------------------------------------------------------------- latency
@attrs.frozen
class RequestLatency:
    """B identical requests served together from t = 0 (all SI units; exact Fractions for the presets).

    Attributes
    ----------
    batch [requests], input_tokens P [tokens], output_tokens O [tokens]
    ttft [s]: time to first token, the prefill step of B x P tokens (no queue: all start at 0)
    tpot [s] or None: (E2E - TTFT) / (O - 1), the mean of the O - 1 decode steps at contexts
        P + 1 .. P + O - 1; None when O = 1 (no decode step)
    e2e [s]: TTFT + (O - 1) x TPOT
    output_throughput [tokens/s]: B x O / E2E (the batch's output tokens; vLLM bench's "output
        token throughput")
    total_throughput [tokens/s]: B x (P + O) / E2E (prompt and output tokens)
    request_tokens_per_s [tokens/s]: O / E2E, what one request sees
    prefill_bound, first_decode_bound, last_decode_bound: "memory" or "compute" (the roofline
        bound's regimes of those steps; the estimate's are the same shape at scaled constants)
    kv_bytes_peak [bytes]: one GPU's KV of the B sequences at their last decode step, B x
        kv_bytes(P + O - 1)
    time_kind: "bound" or "estimate: " and the profile's name
    tensor_parallel_size [GPUs]
    """

    batch: int
    input_tokens: int
    output_tokens: int
    ttft: Any
    tpot: Any
    e2e: Any
    output_throughput: Any
    total_throughput: Any
    request_tokens_per_s: Any
    prefill_bound: str
    first_decode_bound: str | None
    last_decode_bound: str | None
    kv_bytes_peak: Any
    time_kind: str
    tensor_parallel_size: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times in seconds (``*_s``), rates in tokens/s, bytes; floats."""
        return {
            "batch": self.batch, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "ttft_s": float(self.ttft), "tpot_s": None if self.tpot is None else float(self.tpot),
            "e2e_s": float(self.e2e), "output_throughput_tokens_per_s": float(self.output_throughput),
            "total_throughput_tokens_per_s": float(self.total_throughput),
            "request_tokens_per_s": float(self.request_tokens_per_s), "prefill_bound": self.prefill_bound,
            "first_decode_bound": self.first_decode_bound, "last_decode_bound": self.last_decode_bound,
            "kv_bytes_peak": float(self.kv_bytes_peak), "time_kind": self.time_kind,
            "tensor_parallel_size": self.tensor_parallel_size,
        }


def _bound(work: tuple[Any, Any], deployment: Deployment) -> str:
    """The regime of a step of (bytes, FLOPs) on one GPU of the deployment: compute when FLOPs / peak >= bytes / BW."""
    nbytes, flops = work
    acc, share = deployment.accelerator, deployment.share
    return "compute" if Fraction(flops) / Fraction(est.compute_peak(share, acc)) >= (
        Fraction(nbytes) / Fraction(acc.bandwidth)) else "memory"


def request_latency(deployment: Deployment, *, input_tokens: int, output_tokens: int, batch: int = 1) -> RequestLatency:
    """TTFT, TPOT, E2E and tokens/s of ``batch`` identical requests served together from t = 0.

    Parameters
    ----------
    deployment : Deployment
        The model on its accelerators; its FLOPs convention and engine profile (None: the bound;
        a profile: its estimate) price every step.
    input_tokens : int >= 1 [tokens], P (vLLM bench's ``--input-len``)
    output_tokens : int >= 1 [tokens], O, the first token included (vLLM bench's ``--output-len``)
    batch : int in [1, :data:`MAX_BATCH`] [requests], B served in one batch (1: one request)

    Returns
    -------
    RequestLatency
        The reference scheduler's TTFT, TPOT and E2E of these requests
        (:func:`roofline.sim.serve_static`, one batch of B, no KV limit: whether the KV fits is
        :func:`memory_breakdown`'s answer), with the throughputs derived from them.

    Raises
    ------
    InvalidValueError
        ``deployment`` not a Deployment; P, O or B not an integer >= 1, or B above :data:`MAX_BATCH`
        (field ``input_tokens``, ``output_tokens``, ``batch``); P + O beyond the model's
        ``max_position_embeddings`` (field ``input_tokens + output_tokens``); a group the accelerator's
        links cannot hold.

    Notes
    -----
    docs/conventions.md, "One request's latency": E2E = TTFT + (O - 1) x TPOT, TPOT the plain mean of
    the O - 1 decode steps over the growing context (each step weighs the same; the context grows
    by one token a step). TTFT = the prefill step, which gives the first token ("One step").

    Examples
    --------
    >>> from roofline import Deployment, get_model, get_accelerator
    >>> r = request_latency(Deployment(get_model("llama-3.1-8b"), get_accelerator("h100-sxm")),
    ...                     input_tokens=2000, output_tokens=500)
    >>> round(float(r.ttft) * 1e3, 2), round(float(r.tpot) * 1e3, 3), r.prefill_bound
    (31.4, 4.882, 'compute')
    """
    from .sim import Request, RooflineCostModel, serve_static

    d = _check_deployment(deployment)
    check_int("input_tokens", input_tokens, minimum=1)
    check_int("output_tokens", output_tokens, minimum=1)
    check_int("batch", batch, minimum=1)
    if batch > MAX_BATCH:
        raise InvalidValueError("batch", batch, f"more than {MAX_BATCH:,} requests served together is refused "
                                                "(the scheduler keeps one record per request)")
    share = d.share
    limit = share.max_position_embeddings
    if limit is not None and input_tokens + output_tokens > limit:
        raise InvalidValueError("input_tokens + output_tokens", input_tokens + output_tokens,
                                f"exceeds {d.model.name}'s max_position_embeddings, {limit:,}")
    cost = RooflineCostModel.for_deployment(d)
    requests = [Request(id=i, arrival_s=0, prompt_tokens=input_tokens, output_tokens=output_tokens)
                for i in range(batch)]
    result = serve_static(requests, cost, batch_size=batch).requests[0]
    ttft, e2e = result.ttft_s, result.e2e_s
    bound = d.as_bound()
    bound_cost = RooflineCostModel.for_deployment(bound)
    prefill = _bound(_prefill_work(bound_cost, share, batch, input_tokens), bound)
    steps = output_tokens - 1

    def decode_bound(context: int) -> str:
        s = est.decode_step(bound, batch=batch, context=context)
        return s.bound

    return RequestLatency(
        batch=batch, input_tokens=input_tokens, output_tokens=output_tokens, ttft=ttft,
        tpot=result.tpot_s, e2e=e2e,
        output_throughput=Fraction(batch * output_tokens) / e2e,
        total_throughput=Fraction(batch * (input_tokens + output_tokens)) / e2e,
        request_tokens_per_s=Fraction(output_tokens) / e2e,
        prefill_bound=prefill,
        first_decode_bound=decode_bound(input_tokens + 1) if steps else None,
        last_decode_bound=decode_bound(input_tokens + steps) if steps else None,
        kv_bytes_peak=batch * share.kv_bytes(input_tokens + steps),
        time_kind=d.time_kind, tensor_parallel_size=d.tensor_parallel_size,
    )


def _prefill_work(cost: Any, share: ModelConfig, batch: int, prompt: int) -> tuple[Any, Any]:
    """(bytes, FLOPs) of the prefill step of ``batch`` prompts of ``prompt`` tokens, counted as the scheduler
    counts them (query-key pairs in token-layers with sliding windows, :func:`roofline.sim.kv.prompt_pairs`)."""
    from .sim.kv import LayerWindows, prompt_pairs

    windows = LayerWindows(share.layer_windows) if share.has_sliding_window else None
    return cost.prefill_work(batch * prompt, batch * prompt_pairs(windows, prompt))


# ---------------------------------------------------------------------------------------------- memory
@attrs.frozen
class MemoryBreakdown:
    """What one GPU holds (bytes; exact for the presets).

    Attributes
    ----------
    usable [bytes]: what software sees of the card (:attr:`roofline.Accelerator.usable_memory`)
    utilization [1]: the share of it the engine may take (vLLM's ``gpu_memory_utilization``)
    budget [bytes]: usable x utilization
    weights_by_class [bytes]: one GPU's weights by tensor class, zero classes left out
        (:meth:`roofline.ModelConfig.weight_bytes_by_class`)
    weights [bytes]: their sum
    batch [sequences], context [tokens]: the KV cache counted
    kv [bytes]: batch x kv_bytes(context), one GPU's share
    reserve [bytes]: the published reserve (:func:`roofline.estimate.published_reserve`), or 0
    reserve_source: the citation of the reserve, or None (reserve 0: the upper bound)
    free [bytes]: budget - weights - kv - reserve (negative: it does not fit)
    fits: free >= 0
    """

    usable: Any
    utilization: Any
    budget: Any
    weights_by_class: dict[str, Any]
    weights: Any
    batch: int
    context: int
    kv: Any
    reserve: Any
    reserve_source: str | None
    free: Any
    fits: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: bytes as floats; ``parts_bytes`` sum to ``budget_bytes``."""
        return {
            "usable_bytes": float(self.usable), "utilization": float(self.utilization),
            "budget_bytes": float(self.budget),
            "weights_by_class_bytes": {c: float(v) for c, v in self.weights_by_class.items()},
            "weights_bytes": float(self.weights), "batch": self.batch, "context": self.context,
            "kv_bytes": float(self.kv), "reserve_bytes": float(self.reserve), "reserve_source": self.reserve_source,
            "free_bytes": float(self.free), "fits": self.fits,
        }


def memory_breakdown(deployment: Deployment, *, batch: int = 1, context: int, utilization: Any = Fraction(9, 10),
                     reserve: bool = True) -> MemoryBreakdown:
    """One GPU's memory: weights by tensor class, the KV of ``batch`` sequences at ``context``, reserve, free.

    Parameters
    ----------
    deployment : Deployment
    batch : int >= 1 [sequences]
    context : int >= 0 [tokens] each sequence holds
    utilization : in (0, 1], default 0.9 (vLLM's ``gpu_memory_utilization`` default)
    reserve : bool, default True
        True: subtract the published reserve where one is known for the model size on this card
        (docs/conventions.md, "Memory"); none known, or False: reserve 0, the upper bound.

    Returns
    -------
    MemoryBreakdown; its parts (weights + kv + reserve + free) sum to the budget exactly.

    Raises
    ------
    InvalidValueError
        ``deployment`` not a Deployment; a batch or context out of range; utilization outside (0, 1].
    """
    d = _check_deployment(deployment)
    check_int("batch", batch, minimum=1)
    check_int("context", context, minimum=0)
    if isinstance(utilization, bool) or not isinstance(utilization, (int, Fraction, float)) or not (
            0 < utilization <= 1):
        raise InvalidValueError("utilization", utilization, "must be a number in (0, 1]")
    share, acc = d.share, d.accelerator
    by_class = {c: v for c, v in share.weight_bytes_by_class().items() if v}
    weights = share.weight_bytes
    published = est.published_reserve(share, acc) if reserve else None
    held = 0 if published is None else published.value
    budget = Fraction(acc.usable_memory) * Fraction(utilization)
    kv = batch * share.kv_bytes(context)
    free = budget - weights - kv - Fraction(held)
    return MemoryBreakdown(
        usable=acc.usable_memory, utilization=utilization, budget=budget, weights_by_class=by_class,
        weights=weights, batch=batch, context=context, kv=kv, reserve=held,
        reserve_source=None if published is None else published.source.citation, free=free, fits=free >= 0)


# ---------------------------------------------------------------------------------------------- operators
@attrs.frozen
class Operator:
    """One operator's share of a decode step on one GPU (SI units).

    Attributes
    ----------
    name: one of :data:`OPERATORS`
    weight_bytes [bytes]: the weights it reads (a MoE layer's routed experts: those its tokens
        touch, uniform routing)
    kv_bytes [bytes]: the KV it reads (attention only)
    flops [FLOP]: exact count (2 x its matmul weights used per token x B; attention: the
        attention FLOPs of every sequence)
    intensity [FLOP/byte] or None (no bytes)
    memory_time [s]: bytes / bandwidth; compute_time [s]: FLOPs / peak
    bound: "memory" or "compute" (compute when compute_time >= memory_time); "none" when both are 0
    """

    name: str
    weight_bytes: Any
    kv_bytes: Any
    flops: Any
    memory_time: Any
    compute_time: Any

    @property
    def bytes(self) -> Any:
        """HBM bytes it reads [bytes]: weights + KV."""
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> Any:
        """FLOPs per byte [FLOP/byte], or None for an operator that reads nothing."""
        return Fraction(self.flops) / self.bytes if self.bytes else None

    @property
    def bound(self) -> str:
        """"compute" when its compute time reaches its memory time, else "memory"; "none" for an operator with
        neither bytes nor FLOPs (a tied embedding, whose matrix the lm_head reads)."""
        if not self.memory_time and not self.compute_time:
            return "none"
        return "compute" if self.compute_time >= self.memory_time else "memory"


@attrs.frozen
class OperatorBreakdown:
    """One decode step by operator (:func:`operator_breakdown`).

    Attributes
    ----------
    batch [sequences], context [tokens]
    operators: tuple of :class:`Operator` (those present in the model, :data:`OPERATORS` order)
    step: the step's :class:`roofline.estimate.DecodeStep` (the bound, exact FLOPs): the
        operators' bytes, FLOPs, memory and compute times sum to its own
    allreduce_time [s]: 2 L ring all-reduces of B x hidden x activation bytes (0 at T = 1), added
        to the step, not overlapped (docs/conventions.md, "Tensor parallelism")
    allreduce_link_bytes [bytes]: what those all-reduces carry over the link (0 at T = 1)
    tied_lm_head: True when the lm_head is the embedding's matrix: its bytes are then the
        lm_head's (the matmul reads the whole matrix; the lookup only B rows)
    """

    batch: int
    context: int
    operators: tuple[Operator, ...]
    step: Any
    allreduce_time: Any
    allreduce_link_bytes: Any
    tied_lm_head: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: one dict per operator and the step's totals (bytes, FLOP, seconds; floats)."""
        def row(o: Operator) -> dict[str, Any]:
            return {"operator": o.name, "weight_bytes": float(o.weight_bytes), "kv_bytes": float(o.kv_bytes),
                    "bytes": float(o.bytes), "flops": float(o.flops),
                    "intensity_flop_per_byte": None if o.intensity is None else float(o.intensity),
                    "memory_time_s": float(o.memory_time), "compute_time_s": float(o.compute_time),
                    "bound": o.bound}

        s = self.step
        return {
            "batch": self.batch, "context": self.context, "flops_convention": "exact", "time_kind": "bound",
            "operators": [row(o) for o in self.operators],
            "total": {"bytes": float(s.bytes), "flops": float(s.flops),
                      "intensity_flop_per_byte": float(s.intensity), "memory_time_s": float(s.memory_time),
                      "compute_time_s": float(s.compute_time), "step_time_s": float(s.step_time),
                      "bound": s.bound},
            "allreduce_time_s": float(self.allreduce_time), "allreduce_link_bytes": float(self.allreduce_link_bytes),
            "tied_lm_head": self.tied_lm_head,
        }


def _operator_of(g: TensorGroup) -> str:
    """The operator a tensor group belongs to (by its class and name, :meth:`roofline.ModelConfig.tensor_groups`)."""
    if g.cls == "embedding":
        return "embedding"
    if g.cls == "lm_head":
        return "lm_head"
    if g.cls in ("experts", "router") or g.name.startswith(("experts.", "shared_experts.", "router.")) or (
            g.name == "e_score_correction_bias"):
        return "experts"
    if g.name.startswith("mlp."):
        return "mlp"
    if g.name in ("layer norms", "final norm"):
        return "norms"
    return "attention"  # q/k/v/o projections (MLA's too), their biases and norms, attention sinks


def operator_breakdown(deployment: Deployment, *, batch: int = 1, context: int) -> OperatorBreakdown:
    """One decode step of ``batch`` sequences at ``context`` tokens, by operator, on one GPU (the bound).

    Parameters
    ----------
    deployment : Deployment
        Its share of the model (one GPU's at T > 1) and accelerator; the FLOPs are the exact count
        whatever its convention (an operator's FLOPs exist only in that count), the times the bound.
    batch : int >= 1 [sequences]
    context : int >= 1 [tokens], each sequence's KV, the new token included

    Returns
    -------
    OperatorBreakdown
        Each operator's weight and KV bytes, FLOPs and times; their sums equal the step's bytes,
        FLOPs, memory time and compute time (:func:`roofline.estimate.decode_step`, exactly).
        Other towers (a vision encoder) are not read by a text decode step and have no row.

    Raises
    ------
    InvalidValueError
        ``deployment`` not a Deployment; a batch or context out of range; a group the
        accelerator's links cannot hold (T > 1).

    Notes
    -----
    Weights read: every tensor once per step (docs/conventions.md, "One step"), a MoE layer's
    routed experts at the expected number touched by B tokens, E (1 - (1 - k/E)^B)
    ("Architectures"). FLOPs: 2 x numel x copies used per token x B for each matmul tensor;
    attention adds B x attention_flops(context).
    """
    d = _check_deployment(deployment)
    check_int("batch", batch, minimum=1)
    check_int("context", context, minimum=1)
    bound = as_deployment(d, flops="exact", estimate=None)
    share, acc = bound.share, bound.accelerator
    step = est.decode_step(bound, batch=batch, context=context)
    bandwidth = Fraction(acc.bandwidth)
    peak = Fraction(est.compute_peak(share, acc))
    touched = Fraction(share.experts_touched(batch)) if share.is_moe else Fraction(0)
    weights = dict.fromkeys(OPERATORS, Fraction(0))
    flops = dict.fromkeys(OPERATORS, Fraction(0))
    tied = share.tie_word_embeddings
    for g in share.tensor_groups():
        if g.cls == "towers":
            continue
        op = _operator_of(g)
        held = Fraction(share._group_bytes(g) * g.count)
        if share.is_moe and (g.cls == "experts" or g.name.startswith("experts.")):
            held = held * touched / share.num_experts  # routed: the experts B tokens touch
        if tied and g.name == "embed_tokens":
            op = "lm_head"  # the lm_head's matmul reads the tied matrix whole
        weights[op] += held
        if g.matmul:
            flops[_operator_of(g)] += 2 * g.numel * g.active * batch
    kv = Fraction(batch * share.kv_read_bytes(context))  # what the step reads (sparse attention: its top-k)
    flops["attention"] += batch * share.attention_flops(context)
    present = {"embedding", "attention", "norms", "lm_head"}
    if share.num_moe_layers < share.num_hidden_layers:
        present.add("mlp")
    if share.is_moe:
        present.add("experts")
    ops = []
    for name in OPERATORS:
        if name not in present:
            continue
        kv_read = kv if name == "attention" else Fraction(0)
        ops.append(Operator(name=name, weight_bytes=weights[name], kv_bytes=kv_read, flops=flops[name],
                            memory_time=(weights[name] + kv_read) / bandwidth, compute_time=flops[name] / peak))
    link = 0
    if bound.tensor_parallel_size > 1:
        link = 2 * share.num_hidden_layers * f.allreduce_bytes(batch=batch, hidden_size=share.hidden_size,
                                                               activation_bytes=share.activation_bytes)
    return OperatorBreakdown(batch=batch, context=context, operators=tuple(ops), step=step,
                             allreduce_time=step.allreduce_time, allreduce_link_bytes=link, tied_lm_head=tied)
