"""Deployment search: the cheapest configuration that meets a latency SLO (docs/conventions.md, "Deployment search").

:func:`plan` takes a model, a workload (requests in arrival order), the SLO limits [s] at a
percentile, and the axes to search (:data:`AXES`, one row per axis: its name, its flag, its
default values and where a value enters the :class:`roofline.Deployment` or the
:func:`roofline.sim.serve_continuous` call). Each configuration of the grid is first checked
against the rules of :func:`prune` (the step-time model proves it cannot meet the SLO), and
simulated only when no rule drops it; with ``search_rate`` the highest rate it still meets the
SLO at is found by bracketing. The configurations run on local worker processes or on a Dask
cluster through one work function (:func:`evaluate`), a configuration to a task, each after its parent
(:func:`_parents`): those differing only in ``max_num_seqs`` (a family) one after another (they share the runs a
cap does not change, :class:`_SharedRuns`), and each rate search starting at its parent's answer; every result is
a pure function of its configuration, the inputs and its parent's record, so every executor gives the same
answer.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import heapq
import json
import logging
import math
import numbers
import os
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs

from ._checks import check_count, check_positive, check_scalar
from ._io import parse_json
from .errors import InvalidValueError, RooflineError, shown

__all__ = ["AXES", "Axis", "PlanResult", "plan", "evaluate", "prune", "interpolated_percentile", "percentile_exceeds",
           "misses_allowed",
           "RULES", "KV_TRANSFER_CONFIG", "pareto_front", "vllm_serve_command"]

#: The pruning rules, in the order they are tried (docs/conventions.md, "Deployment search").
RULES = ("fit", "tpot", "ttft", "rate")
#: Largest and smallest rate factor the rate search tries [1] (x the workload's own rate).
MAX_SCALE = Fraction(64)
MIN_SCALE = Fraction(1, 64)
DEFAULT_UTILIZATION = Fraction(9, 10)
DEFAULT_BLOCK_SIZE = 16
#: Finest rate tolerance accepted: the search's factors (:func:`_lattice`) have denominators up to 2**20, each within
#: 1e-6 of its value, fine enough for a step of 1 + 1e-4 at the lowest factor, 1/64.
MIN_RATE_TOLERANCE = Fraction(1, 10**4)
#: Prices accepted [USD per GPU-hour]: a goodput per dollar stays a finite float (an example's range, far wider
#: than any cloud's).
MIN_PRICE = Fraction(1, 10**6)
MAX_PRICE = 10**6
#: Highest own rate of a workload the rate search scales [requests/s] (a mean gap under a picosecond is no
#: workload; its rates stay finite floats).
MAX_OWN_RATE = 10**12
#: Most local worker processes (``jobs``, ``-j``) and Dask workers a ``local:N`` cluster starts.
MAX_WORKERS = 1024


def _on_off(flag: str) -> Callable[[str], bool]:
    def parse(text: str) -> bool:
        key = text.strip().lower()
        if key in ("on", "true", "yes", "1"):
            return True
        if key in ("off", "false", "no", "0"):
            return False
        raise InvalidValueError(flag, text, "expected on or off")
    return parse


#: The largest count an axis takes (GPUs, sequences, tokens): the command line's bound on integers.
MAX_COUNT = 10**15


def _count(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isascii():  # Python reads Arabic-Indic or full-width digits as numbers too
            raise InvalidValueError(flag, text, "numbers must be written with ASCII digits")
        if not text.strip().isdecimal():  # int() also takes "1_6" and "+16"
            raise InvalidValueError(flag, text, "expected an integer >= 1, in ASCII digits only")
        value = int(text.strip())
        if value < 1:
            raise InvalidValueError(flag, text, "expected an integer >= 1")
        if value > MAX_COUNT:
            raise InvalidValueError(flag, text, f"must be <= {MAX_COUNT:.0e}")
        return value
    return parse


def _choice(flag: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        key = text.strip().lower().replace("_", "-")
        if key not in choices:
            raise InvalidValueError(flag, text, f"expected one of {', '.join(choices)}")
        return key
    return parse


def _split(flag: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        key = text.strip().lower()
        if key in ("off", "colocated", "none"):
            return "off"
        a, sep, b = key.partition(":")
        if sep and a.isdigit() and b.isdigit() and int(a) >= 1 and int(b) >= 1:
            from .sim.replicas import MAX_REPLICAS  # each instance is simulated, as a replica is

            if max(int(a), int(b)) > MAX_REPLICAS:
                raise InvalidValueError(flag, text, f"more than {MAX_REPLICAS:,} instances in a pool are not "
                                        "modelled (each is simulated)")
            return f"{int(a)}:{int(b)}"
        raise InvalidValueError(flag, text, "expected NP:ND (prefill and decode instances, each >= 1) or off")
    return parse


def _text(flag: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip():
            raise InvalidValueError(flag, text, "expected a name")
        return text.strip().lower()
    return parse


@attrs.frozen
class Axis:
    """One searched axis: ``name`` (the configuration's key), ``flag`` (vLLM's name where it has one),
    ``default`` (the values searched when the flag is not given), ``parse`` (a flag's text -> value,
    raising InvalidValueError naming the flag), ``label`` (value -> its part of the key) and ``into``
    (value, parts) -> None: where the value enters (``parts``: ``accelerator``, ``parallelism`` kwargs,
    ``kv_dtype``, ``serve`` kwargs of :func:`roofline.sim.serve_continuous`)."""

    name: str
    flag: str
    default: tuple[Any, ...]
    parse: Callable[[str], Any]
    label: Callable[[Any], str]
    into: Callable[[Any, dict[str, Any]], None]
    help: str


def _serve(key: str) -> Callable[[Any, dict[str, Any]], None]:
    def into(value: Any, parts: dict[str, Any]) -> None:
        parts["serve"][key] = value
    return into


def _set(key: str) -> Callable[[Any, dict[str, Any]], None]:
    def into(value: Any, parts: dict[str, Any]) -> None:
        parts[key] = value
    return into


def _parallel(key: str) -> Callable[[Any, dict[str, Any]], None]:
    def into(value: Any, parts: dict[str, Any]) -> None:
        parts["parallelism"][key] = value
    return into


#: The axes, in key order (docs/conventions.md, "Deployment search"); a new axis is one more row.
AXES: tuple[Axis, ...] = (
    Axis("accelerator", "--accelerator", ("h100-sxm",), _text("--accelerator"), str, _set("accelerator"),
         "accelerator preset (default: the priced ones, else h100-sxm)"),
    Axis("tensor_parallel_size", "--tensor-parallel-size", (1, 2, 4, 8), _count("--tensor-parallel-size"),
         lambda v: f"tp{v}", _parallel("tensor"), "T, GPUs of the tensor-parallel group (default: 1 2 4 8)"),
    Axis("pipeline_parallel_size", "--pipeline-parallel-size", (1,), _count("--pipeline-parallel-size"),
         lambda v: f"pp{v}", _parallel("pipeline"),
         "P, pipeline stages of T GPUs each, served as P virtual engines (default: 1)"),
    Axis("data_parallel_size", "--data-parallel-size", (1,), _count("--data-parallel-size"),
         lambda v: f"dp{v}", _parallel("data"),
         "D, replicas behind a round-robin router, each its own KV pool and scheduler (default: 1)"),
    Axis("prefill_decode", "--prefill-decode", ("off",), _split("--prefill-decode"),
         lambda v: "colocated" if v == "off" else f"pd{v}", _set("split"),
         "NP:ND, a disaggregated split: NP prefill and ND decode instances of T GPUs, or off "
         "(default: off, prefill and decode on the same GPUs)"),
    Axis("enable_expert_parallel", "--enable-expert-parallel", (False,), _on_off("--enable-expert-parallel"),
         lambda v: "ep" if v else "noep", _parallel("expert"),
         "on or off: a MoE model's experts spread whole over the T GPUs (default: off; a dense model with it on "
         "is dropped by the fit rule, named)"),
    Axis("max_num_seqs", "--max-num-seqs", (256,), _count("--max-num-seqs"), lambda v: f"seqs{v}",
         _serve("max_num_seqs"), "most sequences running at once (default: 256, vLLM's)"),
    Axis("max_num_batched_tokens", "--max-num-batched-tokens", (2048, 8192), _count("--max-num-batched-tokens"),
         lambda v: f"mbt{v}", _serve("max_num_batched_tokens"),
         "per-step token budget (without chunked prefill: the prefill budget) (default: 2048 8192)"),
    Axis("chunked_prefill", "--enable-chunked-prefill", (True,), _on_off("--enable-chunked-prefill"),
         lambda v: "chunked" if v else "separate", _serve("chunked"), "on or off (default: on, vLLM V1's)"),
    Axis("enable_prefix_caching", "--enable-prefix-caching", (False,), _on_off("--enable-prefix-caching"),
         lambda v: "prefix" if v else "noprefix", _serve("enable_prefix_caching"), "on or off (default: off)"),
    Axis("kv_cache_dtype", "--kv-cache-dtype", ("auto",), _text("--kv-cache-dtype"), lambda v: f"kv{v}",
         _set("kv_dtype"), "auto (the model's), fp8, bf16... (default: auto)"),
    Axis("admission", "--admission", ("reserve",), _choice("--admission", ("reserve", "on-demand")), str,
         _serve("admission"), "reserve or on-demand (default: reserve)"),
)
_AXIS = {a.name: a for a in AXES}


def key_of(config: dict[str, Any]) -> str:
    """A configuration's key: its axes' labels in table order, joined by ``/``."""
    return "/".join(a.label(config[a.name]) for a in AXES)


# --------------------------------------------------------------------------- percentiles


def interpolated_percentile(values: Sequence[Any], q: Any) -> Any:
    """The q-th percentile as ``numpy.percentile`` (linear) computes it, exact on ints and Fractions.

    The package's one percentile, :func:`roofline.sim.results.percentile` with ``method="linear"``:
    rank h = (n - 1) q / 100 of the n sorted values; v[floor h] + (h - floor h) (v[floor h + 1] -
    v[floor h]) (docs/conventions.md, "Latency percentiles": the one ``vllm bench serve`` reports).

    Parameters
    ----------
    values : non-empty sequence of numbers [any unit]
    q : number in [0, 100]

    Raises
    ------
    InvalidValueError
        Empty ``values`` (field ``values``); q outside [0, 100] (field ``q``); a value that is no
        finite number (``values[i]``).

    Examples
    --------
    >>> interpolated_percentile([1, 2, 3, 4], 50), interpolated_percentile([15, 20, 35, 40, 50], 40)
    (Fraction(5, 2), Fraction(29, 1))
    """
    from .sim.results import percentile

    return percentile(list(values), q)


def percentile_exceeds(values: Sequence[Any], q: Any, limit: Any) -> bool:
    """Whether :func:`interpolated_percentile` (values, q) > ``limit``, exactly, without sorting: with h = (n - 1)
    q / 100 and j = floor h, it is > limit when at most j values are <= limit, not when j + 2 or more are; else
    from the two order statistics around the limit. Same domain as :func:`interpolated_percentile`."""
    if not values:
        raise InvalidValueError("values", values, "percentile of no values")
    h = (len(values) - 1) * Fraction(q) / 100
    j = math.floor(h)
    below = [v for v in values if v <= limit]
    if len(below) <= j:
        return True
    if len(below) >= j + 2 or j + 1 >= len(values):
        return False
    a, b = max(below), min(v for v in values if v > limit)  # v[j] and v[j + 1]
    return bool(Fraction(a) + (h - j) * (Fraction(b) - Fraction(a)) > limit)


# --------------------------------------------------------------------------- the inputs


@attrs.frozen
class Context:
    """What every configuration's evaluation shares (pickled once per worker): the model, the
    workload's requests, the SLO limits [s] (None: not limited), the percentile, the FLOPs
    convention, the estimate profile (None: the bound), utilization, block size and the rate search."""

    model: Any
    requests: tuple[Any, ...]
    ttft_s: Any
    tpot_s: Any
    e2e_s: Any
    percentile: Any
    flops: str
    estimate: Any
    utilization: Any
    block_size: int
    search_rate: bool
    rate_scale: Any
    rate_tolerance: Any
    #: the requests' arrivals [s] as Fractions and the workload's own rate (:func:`_own_rate`): made once
    arrivals: tuple[Fraction, ...] = attrs.field(init=False, eq=False, repr=False)
    own_rate: Fraction | None = attrs.field(init=False, eq=False, repr=False)

    @arrivals.default
    def _arrivals(self) -> tuple[Fraction, ...]:
        return tuple(Fraction(r.arrival_s) for r in self.requests)

    @own_rate.default
    def _rate(self) -> Fraction | None:
        return _own_rate(self.requests, self.arrivals)

    def arrivals_at(self, scale: Any) -> list[Fraction]:
        """The arrivals [s] at rate factor ``scale`` (> 0, exact): each divided by it, as
        :func:`roofline.sim.requests.scale_rate` divides them."""
        return [a / scale for a in self.arrivals]


def _build(context: Context, config: dict[str, Any]) -> tuple[Any, dict[str, Any], str]:
    """(Deployment, serve keywords, split) of a configuration: each axis's value where the table says it enters
    (``split``: ``"off"`` or ``"NP:ND"``)."""
    from .deployment import Deployment, Parallelism
    from .hardware import get_accelerator

    parts: dict[str, Any] = {"accelerator": None, "parallelism": {}, "kv_dtype": "auto", "split": "off", "serve": {}}
    for axis in AXES:
        axis.into(config[axis.name], parts)
    model = context.model
    if parts["kv_dtype"] != "auto":
        model = model.with_dtypes(kv_dtype=parts["kv_dtype"])
    deployment = Deployment(model, get_accelerator(parts["accelerator"]), Parallelism(**parts["parallelism"]),
                            flops=context.flops, estimate=context.estimate)
    serve = dict(parts["serve"])
    serve["admission"] = serve.get("admission", "reserve").replace("-", "_")
    return deployment, serve, parts["split"]


def _floor_time(cost: Any) -> Any:
    """t_floor [s]: the least step of each kind at its smallest arguments (step times are nondecreasing)."""
    return min(cost.decode_time(1, 1), cost.prefill_time(1, 1), cost.mixed_time(1, 1, 1, 0, 1))


@attrs.frozen
class _Setup:
    """A configuration's simulation parts: the Deployment (one replica's, one instance's in a split), the serve
    keywords, one scheduler's KV pool and cost model, max_model_len, the GPUs of the whole, the schedulers that
    serve the workload (1; D replicas; P virtual engines; a split's prefill instances) and their router, and a
    split's (prefill Pool, decode Pool, TransferLink) or None."""

    deployment: Any
    serve: dict[str, Any]
    pool: Any
    cost: Any
    max_model_len: Any
    gpus: int = 0
    schedulers: int = 1
    router: str | None = None
    split: tuple[Any, Any, Any] | None = None


def _not_modelled(deployment: Any, serve: dict[str, Any], split: str) -> str | None:
    """Why the package cannot serve the combination (docs/conventions.md, "Deployment search"), or None."""
    from .sim.replicas import MAX_REPLICAS

    P, D = deployment.pipeline_parallel_size, deployment.parallelism.data
    if D > MAX_REPLICAS:
        return f"data_parallel_size={D}: more than {MAX_REPLICAS:,} replicas are not modelled (each is simulated)"
    if P > 1 and D > 1:
        return "pipeline stages beside data-parallel replicas are not modelled (roofline simulate refuses them)"
    if split != "off" and (P > 1 or D > 1):
        return "a disaggregated split of pipeline stages or data-parallel replicas is not modelled"
    if split != "off" and serve.get("enable_prefix_caching"):
        return "prefix caching in disaggregated pools is not modelled (serve_disaggregated has none)"
    return None


def _setup(context: Context, config: dict[str, Any]) -> _Setup | tuple[str, str]:
    """The simulation's parts of a configuration, or ("fit", why) when it cannot be built, or ("skip", why)
    when the package does not model it."""
    from .estimate import kv_budget_for
    from .sim import KVPool, Pool, RooflineCostModel, TransferLink
    from .sim.policies import prefix_caching_refusal

    P, L = config["pipeline_parallel_size"], context.model.num_hidden_layers
    if P > L:  # vLLM refuses it too: a stage holds >= 1 layer
        return ("skip", f"pipeline_parallel_size={P}: more stages than the model's {L} layers is not modelled")
    if config["enable_expert_parallel"] and not context.model.is_moe:  # vLLM's flag changes no layer of it
        return ("skip", f"enable_expert_parallel=True: {context.model.name} is a dense model (no routed experts "
                        "to place): the configuration with it off is the same deployment")
    try:
        deployment, serve, split = _build(context, config)
        why = _not_modelled(deployment, serve, split)
        if why is not None:
            return ("skip", why)
        P = deployment.pipeline_parallel_size
        if P > 1:  # one virtual engine's blocks: the least over the stages, // P (vLLM V0)
            blocks = deployment.virtual_engine_kv_blocks(block_size=context.block_size,
                                                         utilization=context.utilization)
            if blocks <= 0:
                return ("fit", f"the stages' weights leave no KV blocks for one of {P} virtual engines")
            pool = KVPool.blocks(blocks, block_size=context.block_size)
        else:
            budget = kv_budget_for(deployment, utilization=context.utilization)
            if budget <= 0:
                return ("fit", f"the weights leave no KV budget ({float(budget) / 1e9:.2f} GB)")
            pool = KVPool.for_model(deployment.share, budget=budget, block_size=context.block_size)
        cost = RooflineCostModel.for_deployment(deployment)
        _floor_time(cost)  # the links of the group priced here: a group they cannot hold is refused
        why = prefix_caching_refusal(cost, pool) if serve.get("enable_prefix_caching") else None
        if why is not None:  # the scheduler refuses it: skipped by name, as it would refuse the run
            return ("skip", f"enable_prefix_caching=True: {why}")
    except RooflineError as err:
        return ("skip" if "not modelled" in str(err) else "fit", str(err))
    max_model_len = deployment.share.max_position_embeddings
    if split == "off":
        D = deployment.parallelism.data
        schedulers, router = (D, "round-robin") if D > 1 else (P, "least-requests") if P > 1 else (1, None)
        return _Setup(deployment, serve, pool, cost, max_model_len, deployment.gpus, schedulers, router)
    prefill_n, decode_n = (int(x) for x in split.split(":"))
    common = dict(utilization=context.utilization, block_size=context.block_size,
                  max_num_seqs=serve["max_num_seqs"], admission=serve["admission"])
    try:
        prefill = Pool.for_deployment(deployment, instances=prefill_n, **common,
                                      prefill="chunked" if serve["chunked"] else "separate",
                                      max_num_batched_tokens=serve["max_num_batched_tokens"])
        decode = Pool.for_deployment(deployment, instances=decode_n, **common)
        link = TransferLink.between(deployment.accelerator, deployment.accelerator)
    except RooflineError as err:  # a model whose transfer is not modelled, an accelerator without a NIC
        return ("skip", str(err))
    return _Setup(deployment, serve, pool, cost, max_model_len, (prefill_n + decode_n) * deployment.gpus,
                  prefill_n, "round-robin", (prefill, decode, link))


def prune(context: Context, setup: _Setup, requests: Sequence[Any],
          bounds: _Bounds | tuple[str, str] | None = None) -> tuple[str, str] | None:
    """The first rule of :data:`RULES` that proves the configuration fails the SLO on ``requests``, as
    (rule, reason), or None (docs/conventions.md, "Deployment search": each rule and why it is sound, with one
    scheduler or several). ``bounds``: :func:`_bounds` of ``requests`` when already computed.

    Raises nothing a valid setup can raise.
    """
    if bounds is None:
        bounds = _bounds(context, setup, requests)
    if isinstance(bounds, tuple):
        return bounds
    return _judge(context, bounds, [Fraction(r.arrival_s) for r in requests])


@attrs.frozen
class _Bounds:
    """What the rules read of a workload that its arrivals do not change (the rate search scales only those):
    t_floor [s], each request's first term of rule 3 [s] (its prefill), its O, and its queue term
    (:class:`_Queue`; ``None``: no queue term)."""

    floor: Any
    first: list[Any]
    outputs: list[int]
    queued: _Queue | None


@attrs.frozen
class _Queue:
    """The queue term of rule 3 but the arrivals: per request (k, m), its first-come-first-served part k and the
    integer m = D_i + S (:func:`_queue_loads`), its term a_1 of part k + c - a_i with c = t_floor m / S; S is
    ``running``, the most that can run together."""

    parts: list[tuple[int, int]]
    floor: Any
    running: int

    def cost(self, m: int) -> Any:
        """c = t_floor m / S [s], exact."""
        return self.floor * Fraction(m, self.running)


def _bounds(context: Context, setup: _Setup, requests: Sequence[Any]) -> _Bounds | tuple[str, str]:
    """The rules that do not read arrivals (fit, tpot) as (rule, reason), or what the others need (:class:`_Bounds`)."""
    serve, pool, cost = setup.serve, setup.pool, setup.cost
    chunked = serve["chunked"]
    budget = serve["max_num_batched_tokens"]
    S = serve["max_num_seqs"]
    if chunked and budget < S:
        return ("fit", f"max_num_batched_tokens {budget} < max_num_seqs {S} (vLLM refuses it)")
    longest = max(requests, key=lambda r: r.prompt_tokens + r.output_tokens)  # its lifetime KV is the most
    if (pool.never_fits_reason(longest.prompt_tokens, longest.output_tokens) is None
            and (setup.max_model_len is None or longest.prompt_tokens + longest.output_tokens <= setup.max_model_len)
            and (chunked or max(r.prompt_tokens for r in requests) <= budget)):
        scan: Sequence[Any] = ()  # each test is nondecreasing in P + O or P: none fails
    else:
        scan = requests  # the first that fails, in order, is named
    for r in scan:
        why = pool.never_fits_reason(r.prompt_tokens, r.output_tokens)
        if why is None and setup.max_model_len is not None and r.prompt_tokens + r.output_tokens > setup.max_model_len:
            why = f"prompt + output {r.prompt_tokens + r.output_tokens} > max_model_len {setup.max_model_len}"
        if why is None and not chunked and r.prompt_tokens > budget:
            why = f"prompt of {r.prompt_tokens} tokens > max_num_batched_tokens {budget} without chunked prefill"
        if why is not None:
            return ("fit", f"request {r.id}: {why}")
    floor = _floor_time(cost)
    if context.tpot_s is not None and floor > context.tpot_s and any(r.output_tokens >= 2 for r in requests):
        return ("tpot", f"every step takes >= {float(floor) * 1e3:.3g} ms > TPOT limit "
                        f"{float(context.tpot_s) * 1e3:g} ms")
    prefix = serve.get("enable_prefix_caching", False)
    prefills: dict[int, Any] = {}  # prompt length -> its prefill [s]: a trace repeats lengths
    first = [floor if prefix else prefills.get(p) or prefills.setdefault(p, cost.prefill_time(p, 0))
             for p in (r.prompt_tokens for r in requests)]
    return _Bounds(floor, first, [r.output_tokens for r in requests], _queue_parts(setup, requests, floor))


def _judge(context: Context, bounds: _Bounds, arrivals: Sequence[Any]) -> tuple[str, str] | None:
    """The rules that read arrivals (ttft, rate) on the workload of ``bounds`` with these arrivals [s]."""
    if context.ttft_s is None and context.e2e_s is None:
        return None
    q, floor, first = context.percentile, bounds.floor, bounds.first
    ttft = [max(a, b) for a, b in zip(first, _queue_waits(bounds.queued, arrivals), strict=True)]
    if context.ttft_s is not None and percentile_exceeds(ttft, q, context.ttft_s):
        rule = "ttft" if percentile_exceeds(first, q, context.ttft_s) else "rate"
        return (rule, f"TTFT p{float(q):g} of the lower bounds > limit {float(context.ttft_s) * 1e3:g} ms")
    if context.e2e_s is not None:
        e2e = [t + (o - 1) * floor for t, o in zip(ttft, bounds.outputs, strict=True)]
        if percentile_exceeds(e2e, q, context.e2e_s):
            return ("rate", f"E2E p{float(q):g} of the lower bounds > limit {float(context.e2e_s) * 1e3:g} ms")
    return None


def _exceeds_above(bounds: _Bounds, arrivals: Sequence[Any], limit: Any, steps: Sequence[int] | None = None
                   ) -> tuple[list[Any], list[float]]:
    """Per request i, the rate factor t_i above which its lower bound max(l_i, a_1 + c_i - a_i) (:func:`_judge`,
    on the arrivals divided by x) exceeds L_i = ``limit`` - s_i t_floor [s] (``steps`` s_i >= 0; None: all 0),
    sorted (0: at every x > 0; math.inf: at none), and their floats (each the correctly rounded quotient of its
    integers, as float() of the Fraction gives; the order is by float, exact among equal floats). ``arrivals``
    [s]: ints or Fractions.

    On arrivals a / x the queue term is c_i - d_i / x, d_i = a_i - (its part's first arrival) >= 0, nondecreasing
    in x: it exceeds L_i iff c_i > L_i and x > d_i / (c_i - L_i) (every x when d_i = 0); l_i does not read the
    arrivals. With c_i = t_floor m_i / S (:class:`_Queue`), c_i > L_i iff M_i = m_i + s_i S > L S / t_floor, and
    t_i = d_i S / (t_floor M_i - L S): integers, one Fraction a request.
    """
    first, queued, floor = bounds.first, bounds.queued, bounds.floor
    zero = [0] * len(first)
    steps = zero if steps is None else steps
    limits = [limit] * len(first) if steps is zero else [limit - s * floor for s in steps]
    if queued is None or not floor:  # no queue term, or c_i = 0 < L_i
        out = sorted((0.0, 0) if f > L else (math.inf, math.inf) for f, L in zip(first, limits, strict=True))
        return [t for _, t in out], [key for key, _ in out]
    S, F, L = queued.running, Fraction(floor), Fraction(limit)
    fn, fd, ln, ld = F.numerator, F.denominator, L.numerator, L.denominator
    top = math.floor(L * S / F)  # M_i > L S / t_floor iff M_i > top (M_i an integer)
    A, B, C = S * fd * ld, fn * ld, ln * fd * S  # t_i = d_i A / (B M_i - C), B M_i - C > 0 when M_i > top
    starts = {k: Fraction(a) for k, a in _part_starts(queued.parts, arrivals).items()}
    pairs: list[tuple[float, Any]] = []  # (float, exact): sorted, the floats first (float() is nondecreasing)
    for f, (k, m), a, s, L_i in zip(first, queued.parts, arrivals, steps, limits, strict=True):
        if f > L_i:
            pairs.append((0.0, 0))
        elif m + s * S > top:
            start = starts[k]  # d_i = a_i - a_1 on integers: (an sd - sn ad) / (ad sd)
            d = a.numerator * start.denominator - start.numerator * a.denominator
            if d:
                num, den = d * A, a.denominator * start.denominator * (B * (m + s * S) - C)
                pairs.append((num / den, Fraction(num, den)))
            else:
                pairs.append((0.0, 0))
        else:
            pairs.append((math.inf, math.inf))
    pairs.sort()
    return [t for _, t in pairs], [key for key, _ in pairs]


def _count_below(above: list[Any], keys: list[float], x: Any) -> int:
    """How many of the sorted exact ``above`` (``keys``: their floats) are < x: bisection on the floats, exact only
    among those whose float is x's (float() is nondecreasing: a float below x's is a value below x)."""
    fx = float(x)
    lo, hi = bisect.bisect_left(keys, fx), bisect.bisect_right(keys, fx)
    return bisect.bisect_left(above, x, lo, hi)


@attrs.frozen
class _Ceilings:
    """The rules that read arrivals (ttft, rate: :func:`_judge`) as rate factors, for the rate search: per limit
    (TTFT; E2E) the sorted :func:`_exceeds_above` of the workload, or None without that limit. At rate factor x,
    the lower bounds that exceed a limit are those of t_i < x, counted by bisection (:func:`_pruned_at`, on the
    floats ``keys`` of each list, :func:`_count_below`)."""

    ttft: list[Any] | None
    e2e: list[Any] | None
    keys: dict[str, list[float]]


def _ceilings(context: Context, bounds: _Bounds) -> _Ceilings:
    """:class:`_Ceilings` of the workload (its own arrivals) and ``bounds``."""
    arrivals = context.arrivals
    ttft = e2e = None
    keys = {}
    if context.ttft_s is not None:
        ttft, keys["ttft"] = _exceeds_above(bounds, arrivals, context.ttft_s)
    if context.e2e_s is not None:  # E2E >= TTFT + (O - 1) t_floor: the TTFT bound against the limit less that
        e2e, keys["e2e"] = _exceeds_above(bounds, arrivals, context.e2e_s, [o - 1 for o in bounds.outputs])
    return _Ceilings(ttft, e2e, keys)


def _pruned_at(context: Context, bounds: _Bounds, ceilings: _Ceilings, scale: Any) -> bool:
    """Whether :func:`_judge` prunes the workload at rate factor ``scale`` (the same answer, from
    :func:`_ceilings`): a percentile exceeds its limit when at most j = floor((n - 1) q / 100) bounds are within
    it, not when j + 2 or more are (:func:`percentile_exceeds`); the case between is judged in full."""
    borderline = False
    for name, above in (("ttft", ceilings.ttft), ("e2e", ceilings.e2e)):
        if above is None:
            continue
        n = len(above)
        j = math.floor((n - 1) * Fraction(context.percentile) / 100)
        within = n - _count_below(above, ceilings.keys[name], scale)
        if within <= j:
            return True
        borderline = borderline or (within < j + 2 and j + 1 < n)
    return borderline and _judge(context, bounds, context.arrivals_at(scale)) is not None


def _queue_term(setup: _Setup, requests: Sequence[Any], floor: Any) -> list[Any]:
    """The queue's lower bound on each request's TTFT [s] (0 where none holds): per first-come-first-served part
    of a round-robin router (the whole with one scheduler; a split's prefill instances, each request there of
    one output token), none for P virtual engines routed least-requests or without reserve admission."""
    return _queue_waits(_queue_parts(setup, requests, floor), [Fraction(r.arrival_s) for r in requests])


def _queue_waits(queue: _Queue | None, arrivals: Sequence[Any]) -> list[Any]:
    """:func:`_queue_term` from :func:`_queue_parts` and the arrivals [s]: a_1 of the part + c - a_i, or 0s."""
    if queue is None:
        return [0] * len(arrivals)
    starts, cost = _part_starts(queue.parts, arrivals), queue.cost
    return [starts[k] + cost(m) - a for (k, m), a in zip(queue.parts, arrivals, strict=True)]


def _part_starts(parts: list[tuple[int, int]], arrivals: Sequence[Any]) -> dict[int, Any]:
    """Each first-come-first-served part's first arrival a_1 [s] (``parts``: :attr:`_Queue.parts`; ``arrivals``
    nondecreasing, as :func:`plan` checks them: a part's first is its earliest)."""
    starts: dict[int, Any] = {}
    for (k, _), a in zip(parts, arrivals, strict=True):
        if k not in starts:
            starts[k] = a
    return starts


def _queue_parts(setup: _Setup, requests: Sequence[Any], floor: Any) -> _Queue | None:
    """What :func:`_queue_term` needs but the arrivals (:class:`_Queue`); None where no queue term holds."""
    n = len(requests)
    serve, pool = setup.serve, setup.pool
    if serve["admission"] != "reserve" or (setup.schedulers > 1 and setup.router != "round-robin"):
        return None
    outputs = [1] * n if setup.split is not None else [r.output_tokens for r in requests]  # a split: prefill side
    running = S = serve["max_num_seqs"]
    if not serve.get("enable_prefix_caching", False) and pool.capacity_blocks is not None:
        # each running request holds its lifetime blocks (reserved, never shared without prefix caching): at
        # most as many run as the smallest lifetimes of the workload that fit together (>= any part's own cap)
        held, running = 0, 0
        lifetimes = (pool.lifetime_blocks_unchecked(r.prompt_tokens, o) for r, o in zip(requests, outputs, strict=True))
        for blocks in sorted(lifetimes):  # the requests were checked (Request's fields), the outputs are theirs or 1
            if held + blocks > pool.capacity_blocks or running == S:
                break
            held, running = held + blocks, running + 1
        running = max(1, running)
    out: list[tuple[int, int]] = [(0, 0)] * n
    parts = setup.schedulers
    for k in range(parts):
        for i, m in zip(range(k, n, parts), _queue_loads(outputs[k::parts], running), strict=True):
            out[i] = (k, m)
    return _Queue(out, floor, running)


def _queue_bounds(requests: Sequence[Any], S: int, floor: Any) -> list[Any]:
    """Per request i (0-based): a_1 + t_floor (D_i / S + 1) - a_i, D_i the sum of the i - S + 1 smallest output
    lengths among the requests before i (0 while i < S): the TTFT first come first served allows at best."""
    start = min(Fraction(r.arrival_s) for r in requests)
    loads = _queue_loads([r.output_tokens for r in requests], S)
    return [start + floor * Fraction(m, S) - Fraction(r.arrival_s) for m, r in zip(loads, requests, strict=True)]


def _queue_loads(outputs: Sequence[int], S: int) -> list[int]:
    """Per request i (0-based) of a first-come-first-served sequence of output lengths: D_i + S, D_i the sum of
    the i - S + 1 smallest among those before it; t_floor (D_i + S) / S [s] is the part of :func:`_queue_bounds`
    that its arrivals do not change."""
    chosen: list[int] = []  # max-heap (negated) of the smallest outputs taken
    rest: list[int] = []  # min-heap of the others
    total = 0
    out = []
    for i, o in enumerate(outputs):
        need = max(0, i - S + 1)
        while len(chosen) < need and rest:
            x = heapq.heappop(rest)
            heapq.heappush(chosen, -x)
            total += x
        out.append(total + S)
        if chosen and o < -chosen[0]:  # request i joins the earlier ones: keep the chosen ones the smallest
            big = -heapq.heappushpop(chosen, -o)
            total += o - big
            heapq.heappush(rest, big)
        else:
            heapq.heappush(rest, o)
    return out


def misses_allowed(n: int, q: Any) -> int:
    """The most of n values that may exceed a limit with their percentile q still possibly within it: n - floor(h)
    - 1, h = (n - 1) q / 100 (:func:`interpolated_percentile`). Once more exceed it, v[floor h] does, and so does
    the percentile, v[floor h] + (h - floor h) (v[floor h + 1] - v[floor h]) >= v[floor h] (docs/conventions.md,
    "Stopping a run early"). n >= 1, q in [0, 100] (exact: an int or Fraction). Raises nothing for those.

    >>> misses_allowed(19366, 99), misses_allowed(500, 99), misses_allowed(10, 100), misses_allowed(4, 50)
    (194, 5, 0, 2)
    """
    return n - math.floor(Fraction(n - 1) * Fraction(q) / 100) - 1


def _stop_on_misses(context: Context, requests: Sequence[Any]) -> dict[str, tuple[Any, int]] | None:
    """The schedulers' ``stop_on_misses`` for a run whose verdict only is wanted: each TTFT and TPOT limit with the
    misses its percentile allows (TTFT over all requests, TPOT over those of O >= 2), or None without either."""
    stop = {}
    if context.ttft_s is not None:
        stop["ttft_s"] = (context.ttft_s, misses_allowed(len(requests), context.percentile))
    decoded = sum(1 for r in requests if r.output_tokens >= 2)
    if context.tpot_s is not None and decoded:
        stop["tpot_s"] = (context.tpot_s, misses_allowed(decoded, context.percentile))
    return stop or None


def _simulate(context: Context, setup: _Setup, requests: Sequence[Any], verdict_only: bool = False) -> dict[str, Any]:
    """Serve ``requests`` with the setup (one scheduler, D replicas or P virtual engines behind their router, or a
    disaggregated split); the SLO metrics at the percentile [s] over all requests and whether it met them.

    ``verdict_only`` (the rate search): the run stops once more requests miss the TTFT or the TPOT limit than the
    percentile allows (the schedulers' ``stop_on_misses``, :func:`misses_allowed`), and the answer is only
    ``{"meets": ...}`` (with ``"stopped": True`` for a stopped run): the verdict of the whole run, exactly. Without
    an E2E limit (which no count watches), a run of one scheduler that ends with nothing refused and each count
    below its allowance gives its verdict without building its result (``verdict_only`` of
    :func:`roofline.sim.serve_continuous`, :class:`roofline.errors.RunMet`).

    Either answer has ``"peak_running"``: the most sequences holding a slot in a step (``Summary.peak_running``;
    up to the stop for a stopped run; None where not known), what :class:`_SharedRuns` reads."""
    from .errors import RunMet, RunStopped

    try:
        # a met run's verdict without its result where the counts decide it: one scheduler, no E2E limit (unwatched)
        result = _served(setup, requests, _stop_on_misses(context, requests) if verdict_only else None,
                         settle=verdict_only and context.e2e_s is None)
    except RunStopped as stopped:
        return {"meets": False, "stopped": True, "peak_running": stopped.peak_running}
    except RunMet as met:
        return {"meets": True, "peak_running": met.peak_running}
    summary = result.summary
    stats: dict[str, Any] = {"rejected": summary.requests - summary.completed}  # not handed back
    meets = not stats["rejected"]
    read = _SUMMARY_RANK.get(context.percentile)
    if read is not None:  # the summary's own percentile: the same values, already computed on the run's clock
        for name, metric in _METRICS:
            p = getattr(summary, metric)
            stats[name] = None if p is None else getattr(p, read)
    else:
        done = [r for r in result.requests if r.handed_back_s is not None]
        by_metric = {"ttft_s": [r.ttft_s for r in done], "tpot_s": [v for r in done if (v := r.tpot_s) is not None],
                     "e2e_s": [r.e2e_s for r in done]}
        if verdict_only:  # the same verdict as below, each percentile compared without computing it
            for name, values in by_metric.items():
                limit = getattr(context, name)
                if meets and limit is not None and values and percentile_exceeds(values, context.percentile, limit):
                    meets = False
            return {"meets": meets, "peak_running": summary.peak_running}
        for name, values in by_metric.items():
            stats[name] = interpolated_percentile(values, context.percentile) if values else None
    for name, _ in _METRICS:
        limit = getattr(context, name)
        if limit is not None and stats[name] is not None and stats[name] > limit:
            meets = False
    if verdict_only:
        return {"meets": meets, "peak_running": summary.peak_running}
    stats["output_tokens_per_s"] = summary.output_tokens_per_s
    stats["meets"] = meets
    stats["peak_running"] = summary.peak_running
    return {k: (float(v) if isinstance(v, Fraction) else v) for k, v in stats.items()}


#: The plan's metrics and the :class:`roofline.sim.Summary` field of each (over the same requests: TTFT and E2E of
#: those handed back, TPOT of those with O >= 2).
_METRICS = (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2e"))
#: A percentile the summary holds -> its :class:`roofline.sim.Percentiles` field.
_SUMMARY_RANK = {Fraction(50): "p50", Fraction(90): "p90", Fraction(99): "p99"}


class _SharedRuns:
    """The runs of one family of configurations (those differing only in ``max_num_seqs``; docs/conventions.md,
    "Deployment search", runs shared across ``--max-num-seqs``): per (rate factor, verdict only) the answers of
    runs whose cap never bound (peak p < their ``max_num_seqs``), each with its p. A configuration of cap m takes
    such an answer when p < m, else simulates (and keeps its answer when its own cap did not bind).
    ``shared`` counts the answers taken. Small (answers only, no workload): it travels from one configuration's
    task to the next of its family (:func:`_chained`)."""

    def __init__(self) -> None:
        self.answers: dict[tuple[Any, bool], list[tuple[int, dict[str, Any]]]] = {}
        self.shared = 0
        #: the ``max_rate`` of the configuration's parent (:func:`_parents`; None: none, or it has none): where its
        #: rate search starts (:func:`_hint_index`)
        self.hint: dict[str, Any] | None = None

    def simulate(self, context: Context, setup: _Setup, scale: Any, verdict_only: bool = False) -> dict[str, Any]:
        """:func:`_simulate` of the workload at rate factor ``scale``, or the answer of a run it equals. A split
        (its pools' caps are their own) is never shared."""
        cap = setup.serve["max_num_seqs"]
        known = self.answers.setdefault((scale, verdict_only), []) if setup.split is None else []
        for peak, answer in known:
            if peak < cap:
                self.shared += 1
                return answer
        answer = _simulate(context, setup, _workload(context, scale), verdict_only)
        peak = answer["peak_running"]
        if setup.split is None and peak is not None and peak < cap:
            known.append((peak, answer))
        return answer


#: How many rate factors' workloads a process keeps (:func:`_workload`; about 4 MB each on the whole shipped
#: conversation trace): the search's factors are lattice points (:func:`_lattice`) that repeat across a family and
#: its parents' (a search starts at its parent's answer), so a few dozen serve the grid.
WORKLOADS_KEPT = 32
_WORKLOADS: dict[Any, Sequence[Any]] = {}
_WORKLOADS_OF: list[Context] = []  # the context they are of


def _workload(context: Context, scale: Any) -> Sequence[Any]:
    """The context's workload at rate factor ``scale`` (:func:`roofline.sim.requests.scale_rate`), made once per
    process and factor while among the :data:`WORKLOADS_KEPT` last used. A process keeps those of one context (by
    identity: a worker holds one), dropped when another comes, and the in-process search drops them when it ends."""
    from .sim.requests import check_requests, scale_rate

    if not _WORKLOADS_OF or _WORKLOADS_OF[0] is not context:
        _forget_workloads()
        _WORKLOADS_OF.append(context)
    requests = _WORKLOADS.pop(scale, None)
    if requests is None:
        # checked once here (CheckedRequests): each run of it skips the check
        requests = check_requests(scale_rate(context.requests, scale))
        if len(_WORKLOADS) >= WORKLOADS_KEPT:
            del _WORKLOADS[next(iter(_WORKLOADS))]
    _WORKLOADS[scale] = requests  # the last used last
    return requests


def _forget_workloads() -> None:
    _WORKLOADS.clear()
    _WORKLOADS_OF.clear()


def _family(config: dict[str, Any]) -> str:
    """The key a configuration shares with those whose runs it may share (:class:`_SharedRuns`): its own key but
    ``max_num_seqs``, a split's whole key."""
    return key_of(config) if config["prefill_decode"] != "off" else key_of({**config, "max_num_seqs": 0})


def _families(configs: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The configurations grouped by :func:`_family`, in the order each family first appears, each from the
    largest ``max_num_seqs`` down (the order :func:`_chained` shares runs in)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in configs:
        groups.setdefault(_family(c), []).append(c)
    return [sorted(g, key=lambda c: -c["max_num_seqs"]) for g in groups.values()]


def _served(setup: _Setup, requests: Sequence[Any], stop: dict[str, tuple[Any, int]] | None,
            settle: bool = False) -> Any:
    """The SimResult of ``requests`` served with the setup (``stop``: the schedulers' ``stop_on_misses``;
    ``settle``: with ``stop``, one scheduler's run that met its limits raises RunMet, ``verdict_only``)."""
    from .sim import serve_continuous, serve_disaggregated, serve_replicas

    serve = setup.serve
    if setup.split is not None:
        prefill, decode, link = setup.split
        return serve_disaggregated(requests, prefill, decode, link=link, max_model_len=setup.max_model_len,
                                   stop_on_misses=stop)
    kw = dict(max_num_seqs=serve["max_num_seqs"], admission=serve["admission"], kv_pool=setup.pool,
              max_model_len=setup.max_model_len, enable_prefix_caching=serve["enable_prefix_caching"],
              stop_on_misses=stop, itl=False)  # the plan reads TTFT, TPOT and E2E: no inter-token gaps kept
    if serve["chunked"]:
        kw.update(prefill="chunked", max_num_batched_tokens=serve["max_num_batched_tokens"])
    else:
        kw.update(max_prefill_tokens=serve["max_num_batched_tokens"])
    if setup.schedulers > 1:
        return serve_replicas(requests, setup.cost, router=setup.router or "round-robin",
                              data_parallel_size=setup.schedulers,
                              gpus_per_replica=setup.deployment.tensor_parallel_size, **kw).whole
    return serve_continuous(requests, setup.cost, verdict_only=settle and stop is not None, **kw)


def _meets_at(context: Context, setup: _Setup, scale: Any, runs: list[int],
              bounds: _Bounds | tuple[str, str] | None = None, shared: _SharedRuns | None = None,
              ceilings: _Ceilings | None = None) -> bool:
    """Whether the configuration meets the SLO at rate factor ``scale``: pruned by the rules (no run), or the
    verdict of its run (``runs[0]`` counts the verdicts, simulated or taken from ``shared``, the family's runs).
    ``bounds``: :func:`_bounds` of the workload (the same at every scale: only the arrivals change), and
    ``ceilings`` (:func:`_ceilings`) of them, computed here when None."""
    if bounds is None:
        bounds = _bounds(context, setup, context.requests)
    if isinstance(bounds, tuple):
        return False
    if _pruned_at(context, bounds, _ceilings(context, bounds) if ceilings is None else ceilings, scale):
        return False
    runs[0] += 1
    if shared is None:
        from .sim.requests import scale_rate

        return bool(_simulate(context, setup, scale_rate(context.requests, scale), verdict_only=True)["meets"])
    return bool(shared.simulate(context, setup, scale, verdict_only=True)["meets"])


def _lattice(start: Fraction, tolerance: Fraction) -> tuple[int, int, int, Callable[[int], Fraction]]:
    """The rate factors the search tries (docs/conventions.md, "Deployment search", the highest rate): x_k =
    ``start`` x 2^(k / N) for integers k, N the least power of 2 whose step 2^(1 / N) stays within 1 +
    ``tolerance`` (with a 1e-5 margin for the rounding below; N = 16 at 0.05), kept inside [MIN_SCALE, MAX_SCALE]
    with those ends as the last points. Gives (N, kmin, kmax, x): x(0) = ``start``, x(kmax) = MAX_SCALE
    (kmax = 0 when ``start`` is it), x(kmin) = MIN_SCALE, and between them start x 2^(k / N) rounded to a
    Fraction of denominator <= 2^20 (within 1e-6 of it: the workloads' arrivals stay small Fractions), so
    that x(k) is one number whatever the path that reached k. ``start`` in [MIN_SCALE, MAX_SCALE] and
    ``tolerance`` >= MIN_RATE_TOLERANCE (N <= 8,192), as :func:`plan` checks. Raises nothing for those."""
    n = 1
    while 2 ** (1 / n) * (1 + 1e-5) > 1 + float(tolerance):
        n *= 2
    s = float(start)

    def rounded(k: int) -> Fraction:
        return Fraction(s * 2.0 ** (k / n)).limit_denominator(1 << 20)

    def end(sign: int, bound: Fraction) -> int:
        if (start >= bound) if sign > 0 else (start <= bound):
            return 0
        k = sign * max(1, math.floor(n * abs(math.log2(bound / start))) - 2)  # a step or two short of it
        while (rounded(k) < bound) if sign > 0 else (rounded(k) > bound):
            k += sign
        return k

    kmin, kmax = end(-1, MIN_SCALE), end(1, MAX_SCALE)

    def x(k: int) -> Fraction:
        return start if k == 0 else MAX_SCALE if k == kmax else MIN_SCALE if k == kmin else rounded(k)
    return n, kmin, kmax, x


def _hint_index(max_rate: dict[str, Any] | None, n: int, start: Fraction, kmin: int, kmax: int) -> int | None:
    """Where a configuration's rate search starts: the lattice index (:func:`_lattice`) nearest the answer of the
    configuration's parent (:func:`_parents`) (``max_rate``, its record's; None: no hint, the search starts from
    ``start``); kmin when even MIN_SCALE failed it, kmax when MAX_SCALE met it."""
    if not max_rate:
        return None
    if max_rate.get("scale") is None:
        return kmin
    if max_rate.get("bracket_high") is None:
        return kmax
    return min(max(round(n * math.log2(max_rate["scale"] / float(start))), kmin), kmax)


def _rate_search(context: Context, setup: _Setup, start: Any, meets_start: bool,
                 shared: _SharedRuns | None = None, bounds: _Bounds | tuple[str, str] | None = None,
                 ceilings: _Ceilings | None = None) -> dict[str, Any]:
    """The largest rate factor of the lattice x_k (:func:`_lattice`, from ``start``, whose verdict is
    ``meets_start``) found to meet the SLO with x_(k+1) failing it (a bracket of ratio <= 1 + tolerance); None
    when even MIN_SCALE fails. Without a hint: doubling x (k + N) while it meets, or halving (k - N) while it
    fails, to the lattice's ends, then bisecting k. With ``shared.hint`` (the parent's answer, :func:`_parents`,
    :func:`_hint_index`): that index first, then steps of 1, 2, 4, ... (at most N) away from it, up from the
    highest index met or down from the lowest failed, until the bracket is found, then bisecting. As meeting the
    SLO is taken to fall as the rate rises, both give the same answer, the hint in fewer runs. ``shared``: the
    family's runs; ``bounds``: :func:`_bounds` of the workload and ``ceilings`` (:func:`_ceilings`) of them,
    computed here when None."""
    runs = [0]
    if bounds is None:  # what the rules need, but the arrivals: once
        bounds = _bounds(context, setup, context.requests)
    if ceilings is None and not isinstance(bounds, tuple):
        ceilings = _ceilings(context, bounds)
    n, kmin, kmax, x = _lattice(Fraction(start), context.rate_tolerance)
    lo: int | None = 0 if meets_start else None  # the highest index found to meet
    hi: int | None = None if meets_start else 0  # the lowest found to fail

    def probe(k: int) -> bool:
        nonlocal lo, hi
        met = _meets_at(context, setup, x(k), runs, bounds, shared, ceilings)
        if met:
            lo = k
        else:
            hi = k
        return met

    hint = None if shared is None else _hint_index(shared.hint, n, Fraction(start), kmin, kmax)
    step, up = (n if hint is None else 1), meets_start
    if hint is not None and (lo is None or hint > lo) and (hi is None or hint < hi):
        up = probe(hint)
    while True:  # the bracket: up from the highest index met, or down from the lowest failed, in growing steps
        if up:
            assert lo is not None
            k = min(lo + step, kmax)
            if lo == kmax or hi is not None and k >= hi:
                break  # MAX_SCALE met, or the bracket is known
        else:
            assert hi is not None
            k = max(hi - step, kmin)
            if hi == kmin or lo is not None and k <= lo:
                break  # even MIN_SCALE failed, or the bracket is known
        if probe(k) != up:
            break
        step = min(2 * step, n)
    if lo is not None and hi is not None:
        while hi - lo > 1:
            probe((lo + hi) // 2)
    own = context.own_rate
    return {"scale": None if lo is None else float(x(lo)), "bracket_high": None if hi is None else float(x(hi)),
            "requests_per_s": None if lo is None or own is None else float(own * x(lo)), "runs": runs[0]}


def _own_rate(requests: Sequence[Any], arrivals: Sequence[Fraction] | None = None) -> Fraction | None:
    """A workload's own rate [requests/s]: (n - 1) / (last arrival - first), None when all arrive at once
    (``arrivals``: theirs as Fractions, when already made; a Context holds both, ``Context.own_rate``)."""
    arrivals = [Fraction(r.arrival_s) for r in requests] if arrivals is None else arrivals
    span = max(arrivals) - min(arrivals)
    return Fraction(len(requests) - 1) / span if span else None


def evaluate(context: Context, config: dict[str, Any], shared: _SharedRuns | None = None) -> dict[str, Any]:
    """One configuration's result (JSON-ready): skipped (not modelled, with its reason), pruned with its rule, or
    simulated at the given rate (and, with the rate search, its highest rate). Pure: the same inputs give the same
    record, with or without ``shared`` (its family's runs, :class:`_SharedRuns`: only fewer are simulated; its
    ``hint``, where the rate search starts, changes only the record's count of ``runs`` where meeting the SLO falls
    as the rate rises, :func:`_rate_search`). The
    workloads its runs were made at are dropped when it returns (the search's workers keep theirs across
    configurations, :func:`_workload`).

    Raises nothing a configuration can cause: a refusal is the ``fit`` rule.
    """
    try:
        return _evaluate(context, config, shared)
    finally:
        _forget_workloads()


def _evaluate(context: Context, config: dict[str, Any], shared: _SharedRuns | None = None) -> dict[str, Any]:
    """:func:`evaluate`, keeping the workloads made (a worker's, for the configurations after)."""
    shared = _SharedRuns() if shared is None else shared
    record: dict[str, Any] = {"key": key_of(config), "config": config}
    setup = _setup(context, config)
    if isinstance(setup, tuple):
        if setup[0] == "skip":
            record.update(status="skipped", rule=None, reason=setup[1], gpus=None)
        else:
            record.update(status="pruned", rule=setup[0], reason=setup[1], gpus=None)
        return record
    record["gpus"] = setup.gpus
    requests = _workload(context, context.rate_scale)
    bounds = _bounds(context, setup, requests)  # the same at every rate (only the arrivals change): once
    ceilings, pruned = None, True
    if context.search_rate and not isinstance(bounds, tuple):  # prune's answer from the search's rate factors
        ceilings = _ceilings(context, bounds)
        pruned = _pruned_at(context, bounds, ceilings, context.rate_scale)
    why = prune(context, setup, requests, bounds) if pruned else None  # in full: the reason of a pruned one
    if why is not None:
        record.update(status="pruned", rule=why[0], reason=why[1])
        if context.search_rate:
            record["max_rate"] = _rate_search(context, setup, context.rate_scale, False, shared, bounds, ceilings)
        return record
    record.update(status="simulated", at_rate=shared.simulate(context, setup, context.rate_scale))
    if context.search_rate:
        record["max_rate"] = _rate_search(context, setup, context.rate_scale, record["at_rate"]["meets"], shared,
                                          bounds, ceilings)
    return record


_Answer = tuple[dict[str, Any], int, "_SharedRuns"]


#: A configuration's rate-search hint when its parent (:func:`_parents`) was read back from ``--out`` (not
#: evaluated in this search): a 1-tuple of that record's ``max_rate`` (None when it has none).
_Seed = tuple[dict[str, Any] | None]


def _parents(configs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """Each configuration's **parent** in the grid ``configs``: the one whose answer its evaluation starts from
    (docs/conventions.md, "Deployment search", runs shared across ``--max-num-seqs``). In a family
    (:func:`_families`' order) the one before it, whose runs it shares and whose highest rate starts its rate
    search; a family's first takes the first of the family that differs from it only in a smaller
    ``--max-num-batched-tokens`` (the nearest in the grid), for the rate search alone; None: no parent."""
    groups = _families(configs)
    firsts = {_family(g[0]): g[0] for g in groups}
    budgets = sorted({c["max_num_batched_tokens"] for c in configs})
    parents: dict[str, dict[str, Any] | None] = {}
    for family in groups:
        head = family[0]
        smaller = (firsts.get(_family({**head, "max_num_batched_tokens": b}))
                   for b in reversed(budgets[:budgets.index(head["max_num_batched_tokens"])]))
        parents[key_of(head)] = next((c for c in smaller if c is not None), None)
        for before, config in zip(family, family[1:], strict=False):
            parents[key_of(config)] = before
    return parents


def _seeds(parents: Mapping[str, dict[str, Any] | None], done: Mapping[str, dict[str, Any]]) -> dict[str, _Seed]:
    """The :data:`_Seed` of each configuration not in ``done`` whose parent (:func:`_parents`) is: a resumed
    search starts each rate search where the whole one would."""
    return {key: (done[key_of(parent)].get("max_rate"),) for key, parent in parents.items()
            if key not in done and parent is not None and key_of(parent) in done}


def _evaluate_next(context: Context, config: dict[str, Any], shared: _SharedRuns) -> _Answer:
    """One configuration (:func:`evaluate`, sharing the runs of its family's configurations before it in
    ``shared``, its rate search starting at ``shared.hint``): its record, the answers it took from the family's
    runs (not simulated), and ``shared`` for the next one."""
    before = shared.shared
    record = _evaluate(context, config, shared)
    return record, shared.shared - before, shared


def _after(context: Context, config: dict[str, Any], previous: _Answer | None, seed: _Seed | None = None
           ) -> _Answer:
    """:func:`_evaluate_next` after ``previous``, the answer of the configuration's parent (:func:`_parents`;
    None: it has none, or it was read back: then ``seed`` holds that one's ``max_rate``; a Dask task is given the
    future, run where that answer is held): the parent's runs when it is of the same family, and its highest rate
    as the hint."""
    same = previous is not None and _family(previous[0]["config"]) == _family(config)
    shared = previous[2] if same and previous is not None else _SharedRuns()
    shared.hint = seed[0] if seed is not None else None if previous is None else previous[0].get("max_rate")
    return _evaluate_next(context, config, shared)


#: What an executor gives: (record, the answers its evaluation took from its family's runs), one a configuration.
_Records = Generator[tuple[dict[str, Any], int], None, None]


def _chained(configs: Sequence[dict[str, Any]], parents: Mapping[str, dict[str, Any] | None],
             submit: Callable[[dict[str, Any], Any], Any], first_done: Callable[[set[Any]], Iterable[Any]]
             ) -> _Records:
    """(record, answers shared) of each of ``configs``, a configuration a task: those whose parent
    (:func:`_parents`) is not among them at once, each other one submitted when its parent is done, after it
    (its family's :class:`_SharedRuns` passed on, so every record and count is the in-process one).
    ``submit(config, previous)`` gives a future whose ``result()`` is :func:`_after`'s answer, ``previous`` the
    parent's done future (None without one); ``first_done(futures)`` waits for one and gives those done. Every
    finished configuration is given before an interruption (Ctrl-C, SIGTERM, a failed record) is raised again;
    nothing more is started, and those in flight are lost (docs/conventions.md, "Deployment search", resume)."""
    todo = {key_of(c) for c in configs}
    children: dict[str, list[dict[str, Any]]] = {}
    running: dict[Any, dict[str, Any]] = {}
    for c in _in_order(configs):
        parent = parents.get(key_of(c))
        if parent is not None and key_of(parent) in todo:
            children.setdefault(key_of(parent), []).append(c)
        else:
            running[submit(c, None)] = c
    try:
        while running:
            for f in first_done(set(running)):
                config = running.pop(f)
                record, taken, _ = f.result()
                for child in children.pop(key_of(config), []):
                    running[submit(child, f)] = child
                yield record, taken
    except GeneratorExit:
        raise
    except BaseException:
        for f in list(running):
            if f.done() and not f.cancelled() and f.exception() is None:
                yield f.result()[:2]
        raise


def _in_order(configs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``configs`` family by family (:func:`_families`), the families of a smaller ``--max-num-batched-tokens``
    first: every parent (:func:`_parents`) before its children."""
    return [c for family in sorted(_families(configs), key=lambda g: g[0]["max_num_batched_tokens"]) for c in family]


# --------------------------------------------------------------------------- executors


@contextlib.contextmanager
def _forking_with_blocked(*names: str) -> Iterator[None]:
    """The signals ``names`` (``"SIGINT"``, ``"SIGTERM"``) blocked in this thread while worker processes are
    forked (local ones, a local Dask cluster's), so that none reaches the command's handler midway through a
    fork (it raised inside multiprocessing's or logging's at-fork hooks: the signal swallowed, a worker left
    behind, or the exit waiting on it). A signal meanwhile waits, pending, and is taken when the block ends.
    The workers inherit the mask: a local worker sets its own handlers and unblocks (:func:`_init_worker`); a
    Dask worker keeps SIGINT blocked, so a terminal's Ctrl-C, sent to the whole process group, reaches the
    parent alone, which stops the search and them (:func:`_stop_workers`, the cluster's close)."""
    import signal

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield  # pragma: no cover - signals reach the main thread only; Windows has no masks
        return
    blocked = {getattr(signal, name) for name in names}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


def _init_worker(context: Context) -> None:
    """A local worker's start: Ctrl-C ignored (the parent stops the search), SIGTERM its default (terminated, it
    stops: the command's handler, inherited by the fork, would raise in it), both unblocked (blocked while it
    was forked, :func:`_forking_with_blocked`), and the search's context."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _WORKER_CONTEXT[:] = [context]


_WORKER_CONTEXT: list[Context] = []


def _after_here(config: dict[str, Any], previous: _Answer | None, seed: _Seed | None) -> _Answer:
    return _after(_WORKER_CONTEXT[0], config, previous, seed)


def _run_local(context: Context, configs: list[dict[str, Any]], jobs: int,
               parents: Mapping[str, dict[str, Any] | None], seeds: Mapping[str, _Seed]) -> _Records:
    """(record, answers shared) of each configuration (:func:`_after`, each after its parent) on ``jobs`` local
    processes, a configuration a task (:func:`_chained`); in this process with ``jobs == 1`` or one family.
    ``parents``: :func:`_parents` of the whole grid; ``seeds``: the rate-search hints of those whose parent was
    read back (:func:`_seeds`)."""
    if jobs == 1 or len(_families(configs)) <= 1:
        answers: dict[str, _Answer] = {}
        try:
            for config in _in_order(configs):
                parent = parents.get(key_of(config))
                previous = None if parent is None else answers.get(key_of(parent))
                answers[key_of(config)] = answer = _after(context, config, previous, seeds.get(key_of(config)))
                yield answer[:2]
        finally:
            _forget_workloads()
        return
    import concurrent.futures as cf
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method),
                                initializer=_init_worker, initargs=(context,)) as pool:
        try:
            with _forking_with_blocked("SIGINT", "SIGTERM"):  # its workers start at the first task, all when forked
                pool.submit(int).result()
            yield from _chained(configs, parents, lambda config, previous: pool.submit(
                                    _after_here, config, None if previous is None else previous.result(),
                                    seeds.get(key_of(config))),
                                lambda fs: cf.wait(fs, return_when=cf.FIRST_COMPLETED).done)
        except BaseException:  # stopped (Ctrl-C, SIGTERM, a failed record): start nothing more, stop those running
            _stop_workers(pool)
            raise


def _stop_workers(pool: Any) -> None:
    """Cancel what a ProcessPoolExecutor has not started and terminate its worker processes (their
    configurations in flight are lost either way), so that leaving the pool does not wait for them:
    ``terminate_workers`` from Python 3.14; before, its processes, read before ``shutdown`` forgets them."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:  # pragma: no cover - Python 3.14
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()


#: What a local Dask cluster's workers are started with (docs/conventions.md, "Deployment search"): the
#: statistical profiler off (it samples the running task's stack every 10 ms; on this pure-Python work it cost
#: about 40 % more CPU per task), forked as the local executor's workers are (no fresh interpreter re-importing
#: the package: 0.7 s to start two instead of 4.9 s). Workers of a ``tcp://`` cluster are the user's: start them
#: with ``DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False`` for the same.
_DASK_WORKER_SETTINGS = {"distributed.worker.profile.enabled": False, "distributed.worker.profile.interval": "10s",
                         "distributed.worker.profile.cycle": "100s"}


#: [s] how long the first TCP connection to a ``tcp://`` scheduler may take before it is refused
CONNECT_TIMEOUT_S = 5
#: [s] how long a ``tcp://`` scheduler may take to answer Dask's handshake once connected
HANDSHAKE_TIMEOUT_S = 30


def _cluster_address(cluster: Any) -> tuple[str | None, int]:
    """(host, port) of a ``tcp://HOST:PORT`` cluster, (None, N) for ``local:N``, checked before any work.

    Raises
    ------
    InvalidValueError
        Field ``cluster``: not a string, neither form, ``local:N`` with N outside 1..:data:`MAX_WORKERS`, a
        ``tcp://`` address that is no URL (``tcp://[::1:8786``), no host, a port missing or outside 1..65535.
    """
    from urllib.parse import urlsplit

    if not isinstance(cluster, str):
        raise InvalidValueError("cluster", cluster, "expected tcp://HOST:PORT or local:N")
    if cluster.startswith("local:"):
        n = cluster[len("local:"):].strip()
        if not (n.isascii() and n.isdecimal()) or not 1 <= int(n) <= MAX_WORKERS:  # "local:²" too
            raise InvalidValueError("cluster", cluster, f"expected local:N with N in 1..{MAX_WORKERS:,} workers")
        return None, int(n)
    if not cluster.startswith("tcp://"):
        raise InvalidValueError("cluster", cluster, "expected tcp://HOST:PORT or local:N")
    try:
        parts = urlsplit(cluster)
        parts.hostname  # noqa: B018 -- an unclosed IPv6 bracket raises here or in urlsplit
    except ValueError:
        raise InvalidValueError("cluster", cluster, "expected tcp://HOST:PORT") from None
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is None or not 1 <= port <= 65535 or not parts.hostname:
        raise InvalidValueError("cluster", cluster, "expected tcp://HOST:PORT with a port in 1..65535")
    return parts.hostname, port


def _dask_client(client_class: Any, cluster: str) -> Any:
    """A Client of the scheduler at ``cluster``, connected within :data:`HANDSHAKE_TIMEOUT_S`, in a daemon thread:
    an endpoint that is no Dask scheduler (an HTTP server never answers Dask's handshake; a banner is read as
    frames of exabytes) is refused by name instead of hanging or raising from inside Dask.

    Raises InvalidValueError (field ``cluster``): no answer in time, or the handshake failed (its error named)."""
    import threading

    answer: list[Any] = []

    def connect() -> None:
        try:
            answer.append(client_class(cluster, timeout=HANDSHAKE_TIMEOUT_S))
        except BaseException as exc:  # noqa: BLE001 -- any failure of the handshake is this endpoint's
            answer.append(exc)

    thread = threading.Thread(target=connect, name="roofline-dask-connect", daemon=True)
    thread.start()
    thread.join(HANDSHAKE_TIMEOUT_S + CONNECT_TIMEOUT_S)
    if not answer:
        raise InvalidValueError("cluster", cluster, f"no Dask scheduler answered within {HANDSHAKE_TIMEOUT_S} s "
                                "(is it one? `dask scheduler` prints its tcp:// address)")
    if isinstance(answer[0], BaseException):
        exc = answer[0]
        raise InvalidValueError("cluster", cluster, f"not a Dask scheduler, or it failed the handshake "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from None
    return answer[0]


def _run_dask(context: Context, configs: list[dict[str, Any]], cluster: str,
              parents: Mapping[str, dict[str, Any] | None], seeds: Mapping[str, _Seed]) -> _Records:
    """(record, answers shared) of each configuration on a Dask cluster (``cluster`` as :func:`_cluster_address`
    reads it: a ``LocalCluster`` of N single-threaded worker processes started here, or a running one), a
    configuration a task (:func:`_chained`); ``parents`` and ``seeds`` as :func:`_run_local`'s."""
    try:
        from distributed import Client, LocalCluster, wait
    except ImportError:
        raise InvalidValueError("cluster", cluster, "needs Dask: pip install 'roofline[cluster]' (from a "
                                "clone: pip install -e '.[cluster]')") from None
    local = None
    host, port = _cluster_address(cluster)  # (None, N) for local:N
    if host is None:
        import multiprocessing

        import dask

        settings = dict(_DASK_WORKER_SETTINGS)
        if "fork" in multiprocessing.get_all_start_methods():
            settings["distributed.worker.multiprocessing-method"] = "fork"
        with dask.config.set(settings), _forking_with_blocked("SIGINT"):
            # a random port for its HTTP server: the default 8787 warns (an error under pytest) when taken
            # its warnings silenced (an interrupted search printed the workers' cancelled tasks); errors still show
            local = LocalCluster(n_workers=port, threads_per_worker=1, processes=True, dashboard_address=":0",
                                 silence_logs=logging.ERROR)
        client = Client(local)
    else:
        import socket

        try:  # a refused or unknown address answers at once; Client would retry it for its whole timeout
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise InvalidValueError("cluster", cluster, f"cannot connect: {exc}") from None
        client = _dask_client(Client, cluster)
    try:
        held = client.scatter(context, broadcast=True)
        yield from _chained(configs, parents,
                            lambda config, previous: client.submit(_after, held, config, previous,
                                                                   seeds.get(key_of(config)), pure=False),
                            lambda fs: wait(fs, return_when="FIRST_COMPLETED").done)
    finally:
        client.close()
        if local is not None:
            local.close()


# --------------------------------------------------------------------------- the answer


@attrs.frozen
class PlanResult:
    """A search's records and its answers.

    Attributes
    ----------
    records : tuple of dict, one per configuration, ordered by rank (:func:`plan`)
    winner : dict or None, the cheapest record that meets the SLO at the given rate
    front : tuple of str, the keys on the Pareto front (docs/conventions.md, "Deployment search")
    pruned : dict, rule -> configurations it removed
    skipped : int, configurations the package does not model (each record says why), neither pruned nor simulated
    simulated : int, configurations simulated at the given rate
    resumed : int, records read back from ``out`` (not recomputed)
    prices : dict, accelerator -> USD per GPU-hour (the user's), or empty
    shared_runs : int, this search's verdicts and runs taken from a run of its family instead of simulated
        (docs/conventions.md, "Deployment search": runs shared across ``--max-num-seqs``)
    """

    records: tuple[dict[str, Any], ...]
    winner: dict[str, Any] | None
    front: tuple[str, ...]
    pruned: dict[str, int]
    skipped: int
    simulated: int
    resumed: int
    prices: dict[str, Any]
    context: Context
    shared_runs: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the answer, the counts, and every record."""
        c = self.context
        return {"slo": {"ttft_s": _f(c.ttft_s), "tpot_s": _f(c.tpot_s), "e2e_s": _f(c.e2e_s),
                        "percentile": _f(c.percentile)},
                "prices_usd_per_gpu_hour": {k: float(v) for k, v in self.prices.items()},
                "objective": "cost" if self.prices else "gpus",
                "rate_scale": _f(c.rate_scale), "configurations": len(self.records), "pruned": self.pruned,
                "skipped": self.skipped, "simulated": self.simulated, "resumed": self.resumed,
                "shared_runs": self.shared_runs,
                "winner": None if self.winner is None else self.winner["key"],
                "vllm_serve": None if self.winner is None else vllm_serve_command(c.model, self.winner),
                "front": list(self.front), "results": list(self.records)}


def _f(x: Any) -> Any:
    return None if x is None else float(x)


def cost_of(record: dict[str, Any], prices: dict[str, Any]) -> Any:
    """GPUs x price per GPU-hour [USD/h] with prices, else the GPU count."""
    gpus = record.get("gpus")
    if gpus is None:
        return None
    return gpus * float(prices[record["config"]["accelerator"]]) if prices else gpus


def _rank_key(record: dict[str, Any], prices: dict[str, Any]) -> tuple[Any, ...]:
    at = record.get("at_rate") or {}
    meets = bool(at.get("meets"))
    cost = cost_of(record, prices)
    inf = float("inf")
    return (not meets, inf if cost is None else cost, record.get("gpus") or inf,
            at.get("tpot_s") if at.get("tpot_s") is not None else inf,
            at.get("ttft_s") if at.get("ttft_s") is not None else inf, record["key"])


def pareto_front(records: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """Keys of the records that meet the SLO at the given rate and that no other such record dominates on
    (output tokens/s per GPU: higher, TTFT: lower, TPOT: lower), in key order."""
    points = []
    for r in records:
        at = r.get("at_rate")
        if not at or not at["meets"] or at["output_tokens_per_s"] is None:
            continue
        points.append((r["key"], -at["output_tokens_per_s"] / r["gpus"], at["ttft_s"] or 0.0, at["tpot_s"] or 0.0))
    front = []
    for k, *p in points:
        dominated = any(all(b <= a for a, b in zip(p, o, strict=True)) and o != p for _, *o in points)
        if not dominated:
            front.append(k)
    return tuple(sorted(front))


#: vLLM's KV connector flag for a disaggregated pool (NIXL, both roles: the prefill instance sends, the decode
#: instance pulls), as vLLM's NixlConnector usage guide (docs.vllm.ai, features/nixl_connector_usage) starts them.
KV_TRANSFER_CONFIG = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'"""


def vllm_serve_command(model: Any, record: dict[str, Any]) -> str:
    """The ``vllm serve`` command line of a configuration: one line, or with a disaggregated split one line per
    pool, each ``# prefill pool: NP instances`` above its command (every instance of the pool runs it), with
    :data:`KV_TRANSFER_CONFIG`. ``--pipeline-parallel-size`` and ``--data-parallel-size`` appear above 1;
    admission has no vLLM flag (vLLM allocates on demand and preempts) and is left out. The decode pool's line
    keeps the prefill flags of the configuration (vLLM takes them; a decode instance prefills only what it
    recomputes). Raises KeyError for a record without a configuration."""
    c = record["config"]
    parts = [f"vllm serve {_hf_name(model)}", f"--tensor-parallel-size {c['tensor_parallel_size']}"]
    for key, flag in (("pipeline_parallel_size", "--pipeline-parallel-size"),
                      ("data_parallel_size", "--data-parallel-size")):
        if c.get(key, 1) > 1:
            parts.append(f"{flag} {c[key]}")
    parts += [f"--max-num-seqs {c['max_num_seqs']}", f"--max-num-batched-tokens {c['max_num_batched_tokens']}",
              "--enable-chunked-prefill" if c["chunked_prefill"] else "--no-enable-chunked-prefill",
              "--enable-prefix-caching" if c["enable_prefix_caching"] else "--no-enable-prefix-caching"]
    if c.get("enable_expert_parallel"):
        parts.append("--enable-expert-parallel")
    if c["kv_cache_dtype"] != "auto":
        parts.append(f"--kv-cache-dtype {c['kv_cache_dtype']}")
    line = " ".join(parts)
    split = c.get("prefill_decode", "off")
    if split == "off":
        return line
    counts = [int(x) for x in split.split(":")]
    return "\n".join(f"# {side} pool: {n} instance{'s' if n > 1 else ''}\n{line} {KV_TRANSFER_CONFIG}"
                     for side, n in zip(("prefill", "decode"), counts, strict=True))


def _hf_name(model: Any) -> str:
    """The model's Hugging Face id where its preset names one (its first), else its name."""
    from importlib import resources

    from ._io import parse_json

    path = resources.files("roofline.data").joinpath("models", f"{model.name}.json")
    try:
        ids = parse_json(path.read_text(encoding="utf-8")).get("_hf_id") or []
    except (OSError, ValueError):
        return str(model.name)
    ids = [ids] if isinstance(ids, str) else ids
    return str(ids[0]) if ids else str(model.name)


def axis_value(axis: Axis, value: Any) -> Any:
    """An API value of ``axis`` checked and normalised, of the type its defaults have: an integer >= 1
    (Python or numpy, not bool) for the sizes and budgets, a bool for the on/off axes, a string for the rest
    (parsed as its flag's text: ``"OFF"`` is ``"off"``).

    Raises
    ------
    InvalidValueError
        Naming the axis (``pipeline_parallel_size``) and the value as given: ``"2"``, ``2.0``, ``None``,
        ``True`` for a size; ``(1, 1)`` for ``prefill_decode``.
    """
    kind = type(axis.default[0])
    if kind is bool:
        if not isinstance(value, bool):
            raise InvalidValueError(axis.name, value, "expected True or False")
        return value
    if kind is int:
        check_count(axis.name, value, minimum=1)
        return int(value)
    if not isinstance(value, str):
        raise InvalidValueError(axis.name, value, "expected a string (as its flag takes)")
    try:
        return axis.parse(value)
    except InvalidValueError as err:
        raise InvalidValueError(axis.name, value, err.reason) from None


def _grid(axes: Mapping[str, Sequence[Any]] | None, prices: Mapping[str, Any],
          model: Any = None) -> list[dict[str, Any]]:
    """The configurations of the grid (each a dict axis name -> value), the axes checked: ``axes`` a mapping
    of known axis names to lists or tuples of values (:func:`axis_value`), ``prices`` for exactly the
    accelerators searched, each ``kv_cache_dtype`` one ``model`` takes. Raises InvalidValueError naming the
    field (the axis, ``axes``, ``--price``, ``kv_cache_dtype``)."""
    if axes is not None and not isinstance(axes, Mapping):
        raise InvalidValueError("axes", axes, "expected a dict of axis name -> list of values")
    given = dict(axes or {})
    for name, listed in given.items():
        if name in _AXIS and listed is not None and not isinstance(listed, (list, tuple)):
            raise InvalidValueError(name, listed, "expected a list or tuple of values (a str is not a list of values)")
    for name in given:
        if name not in _AXIS:
            raise InvalidValueError("axes", name, f"unknown axis; known: {', '.join(_AXIS)}")
    values = {}
    for a in AXES:
        v = given.get(a.name)
        if v is None and a.name == "accelerator" and prices:
            v = sorted(prices)
        if v is not None and a.name == "kv_cache_dtype" and model is not None:
            for x in v:  # a KV dtype the model cannot take is refused here, not pruned as a misfit
                if axis_value(a, x) != "auto":
                    try:
                        model.with_dtypes(kv_dtype=axis_value(a, x))
                    except InvalidValueError as err:
                        raise InvalidValueError(a.name, x, err.reason) from None
        v = a.default if v is None else tuple(dict.fromkeys(axis_value(a, x) for x in v))
        if a.name == "kv_cache_dtype" and model is not None:  # two names of one format: one configuration, the first
            from .models import canonical_dtype

            formats = {canonical_dtype(model.kv_dtype if x == "auto" else x): x for x in reversed(v)}
            v = tuple(x for x in v if x in formats.values())
        if not v:
            raise InvalidValueError(a.flag, list(v), "no values left to search (an empty grid)")
        values[a.name] = v
    from .hardware import get_accelerator

    values["accelerator"] = tuple(dict.fromkeys(get_accelerator(x).key for x in values["accelerator"]))
    if prices:
        for acc in prices:
            if acc not in values["accelerator"]:
                raise InvalidValueError("--price", acc, "is not an accelerator searched (--accelerator)")
        for acc in values["accelerator"]:
            if acc not in prices:
                raise InvalidValueError("--price", acc, "no price given for an accelerator searched")
    configs: list[dict[str, Any]] = [{}]
    for a in AXES:
        configs = [dict(c, **{a.name: v}) for c in configs for v in values[a.name]]
    return configs


def _fingerprint(context: Context) -> str:
    """A hash of the inputs every result depends on (the grid excepted): a resumed file must match it. The model
    and the engine profile enter whole (their attrs reprs, every field: a config.json edited between two runs is
    another search's; stable across processes and hash seeds)."""
    m = context.model
    text = json.dumps({
        "model": repr(m),
        "requests": hashlib.sha256(repr([(str(r.arrival_s), r.prompt_tokens, r.output_tokens, r.block_hashes)
                                         for r in context.requests]).encode()).hexdigest(),
        "slo": [str(context.ttft_s), str(context.tpot_s), str(context.e2e_s), str(context.percentile)],
        "rest": [context.flops, repr(context.estimate), str(context.utilization),
                 context.block_size, context.search_rate, str(context.rate_scale), str(context.rate_tolerance)],
    }, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_STATUSES = ("skipped", "pruned", "simulated")
_AT_RATE = ("ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s")
_MAX_RATE = ("scale", "bracket_high", "requests_per_s")


def _amount(x: Any) -> bool:
    """A finite number >= 0 (not a bool), as :func:`evaluate` writes one."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


#: The fields of a record :func:`evaluate` writes, of its ``at_rate`` and of its ``max_rate``.
_RECORD_KEYS = {"key", "config", "status", "rule", "reason", "gpus", "at_rate", "max_rate"}
_AT_RATE_KEYS = {"rejected", "meets", "peak_running", *_AT_RATE}
_MAX_RATE_KEYS = {"runs", *_MAX_RATE}


def _gpus_of(config: dict[str, Any]) -> int:
    """The GPUs a configuration holds: T x P x D, or (NP + ND) x T for a split NP:ND."""
    gpus = config["tensor_parallel_size"] * config["pipeline_parallel_size"] * config["data_parallel_size"]
    if config["prefill_decode"] != "off":
        gpus *= sum(int(x) for x in config["prefill_decode"].split(":"))
    return int(gpus)


def _count_ok(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _record_fault(key: Any, record: Any, context: Context | None = None, own: Fraction | None = None) -> str | None:
    """Why ``record`` (read back under ``key``) is not one :func:`evaluate` writes, or None
    (docs/conventions.md, "Deployment search", "Resuming"): its fields, its key, its GPUs (its configuration's),
    and with the search's ``context`` its numbers against the workload: a simulated record's ``meets`` its own
    metrics' verdict against the SLO (where the floats it holds decide it: a metric within a float's rounding
    of its limit is taken as written), TTFT and E2E null only when every request was rejected, and a highest
    rate the workload's own rate (``own``, :func:`_own_rate`; computed here when None) x its factor, to 12
    digits (the file holds the factor as a float)."""
    if not isinstance(key, str) or not isinstance(record, dict):
        return "not a key and a record"
    if set(record) - _RECORD_KEYS:
        return f"unknown field {sorted(set(record) - _RECORD_KEYS)[0]!r}"
    config = record.get("config")
    if not isinstance(config, dict) or set(config) != set(_AXIS):
        return "its config is not one value per axis"
    for name, v in config.items():
        try:
            ok = type(axis_value(_AXIS[name], v)) is type(v) and axis_value(_AXIS[name], v) == v
        except InvalidValueError:
            ok = False
        if not ok:
            return f"config {name}={shown(v)}"
    if record.get("key") != key or key_of(config) != key:
        return "its key is not its configuration's"
    status, rule, gpus = record.get("status"), record.get("rule"), record.get("gpus")
    if status not in _STATUSES:
        return f"status {shown(status)}; known: {', '.join(_STATUSES)}"
    if status != "simulated" and not isinstance(record.get("reason"), str):
        return f"a {status} record without its reason"
    if not isinstance(record.get("reason", ""), str):
        return "reason is not a string"
    if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1):
        return f"gpus {shown(gpus)}"
    if gpus is not None and gpus != _gpus_of(config):
        return f"gpus {gpus}, but its configuration holds {_gpus_of(config)}"
    if status == "skipped" and (rule is not None or gpus is not None):
        return "a skipped record with a rule or GPUs"
    if status == "pruned" and rule not in RULES:
        return f"rule {shown(rule)}; known: {', '.join(RULES)}"
    if status == "simulated":
        at = record.get("at_rate")
        if gpus is None or rule is not None or not isinstance(at, dict):
            return "a simulated record without GPUs or its metrics (at_rate)"
        if set(at) - _AT_RATE_KEYS:
            return f"unknown field at_rate {sorted(set(at) - _AT_RATE_KEYS)[0]!r}"
        if not isinstance(at.get("meets"), bool):
            return f"at_rate meets {shown(at.get('meets'))}"
        rejected = at.get("rejected")
        if not _count_ok(rejected):
            return f"at_rate rejected {shown(rejected)}"
        if not (at.get("peak_running") is None or _count_ok(at["peak_running"])):
            return f"at_rate peak_running {shown(at['peak_running'])}"
        for name in _AT_RATE:
            if name not in at or not (at[name] is None or _amount(at[name])):
                return f"at_rate {name} {shown(at.get(name))}: expected a number >= 0 or null"
        if context is not None:
            fault = _verdict_fault(at, context)
            if fault is not None:
                return fault
    if "max_rate" in record:
        mr = record["max_rate"]
        if not isinstance(mr, dict) or not isinstance(mr.get("runs"), int) or not _amount(mr["runs"]):
            return "max_rate is not the rate search's result"
        if set(mr) - _MAX_RATE_KEYS:
            return f"unknown field max_rate {sorted(set(mr) - _MAX_RATE_KEYS)[0]!r}"
        for name in _MAX_RATE:
            if name not in mr or not (mr[name] is None or _amount(mr[name])):
                return f"max_rate {name} {shown(mr.get(name))}: expected a number >= 0 or null"
        if context is not None:
            own = context.own_rate if own is None else own
            rate = None if own is None or mr["scale"] is None else float(own * Fraction(mr["scale"]))
            stated = mr["requests_per_s"]
            if (stated is None) != (rate is None) or (rate is not None and not math.isclose(stated, rate,
                                                                                            rel_tol=1e-12)):
                return f"max_rate requests_per_s {shown(stated)}, but its scale gives {shown(rate)}"
    return None


def _verdict_fault(at: dict[str, Any], context: Context) -> str | None:
    """Why a simulated record's metrics at the rate are not a run's of this search (:func:`_record_fault`)."""
    rejected, n = at["rejected"], len(context.requests)
    if rejected > n:
        return f"at_rate rejected {rejected}, of {n} requests"
    for name in ("ttft_s", "e2e_s"):
        if (at[name] is None) != (rejected == n):
            return f"at_rate {name} {shown(at[name])}, with {n - rejected} of {n} requests handed back"
    limits = {name: getattr(context, name) for name, _ in _METRICS}
    above = [m for m, lim in limits.items() if lim is not None and at[m] is not None and float(at[m]) > float(lim)]
    below = all(lim is None or (at[m] is not None and float(at[m]) < float(lim)) for m, lim in limits.items())
    if at["meets"] and (rejected or above):
        why = "requests were rejected" if rejected else f"{above[0]} is over its limit"
        return f"at_rate meets true, but {why}"
    if not at["meets"] and not rejected and below:
        return "at_rate meets false, but every metric is within its limit"
    return None


def _read_out(path: Path, fingerprint: str, context: Context | None = None) -> dict[str, dict[str, Any]]:
    """The records of an ``--out`` file of this search (an absent file: none), each read as strict JSON (no key
    twice, no NaN) and checked by :func:`_record_fault` (against ``context`` where given).

    Raises
    ------
    InvalidValueError
        Field ``out``: the file cannot be read; a line that is not JSON of a key, the inputs' fingerprint
        and a record :func:`evaluate` writes (:func:`_record_fault`, line N named); two lines of one
        configuration; another search's file.
    """
    if not path.exists():
        return {}
    done: dict[str, dict[str, Any]] = {}
    lines_of: dict[str, int] = {}
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidValueError("out", str(path), f"cannot read: {exc}") from None
    own = None if context is None or not lines else context.own_rate
    for n, line in enumerate(lines, 1):
        if not line.strip():  # a blank line (an editor's last newline): no record
            continue
        try:
            row = parse_json(line)  # strict: a key given twice is no record
            key, fp, record = row["key"], row["inputs"], row["result"]
        except (ValueError, KeyError, TypeError):
            raise InvalidValueError("out", str(path), f"line {n} is not a plan result (not a JSON record of one): "
                                    "give another file") from None
        if fp != fingerprint:
            raise InvalidValueError("out", str(path), "holds the results of a search with other inputs "
                                    "(workload, SLO, model or settings): give another file")
        fault = _record_fault(key, record, context, own)
        if fault is None and key in done:
            fault = f"its configuration is line {lines_of[key]}'s too"
        if fault is not None:
            raise InvalidValueError("out", str(path), f"line {n} is not a plan result ({fault}): give another file")
        done[key] = record
        lines_of[key] = n
    return done


def _write_out(path: Path, fingerprint: str, done: dict[str, dict[str, Any]]) -> None:
    from ._io import atomic_write

    with atomic_write(path) as fh:
        for key in sorted(done):
            # the record's own order (not sorted): a resumed search prints the same --json as an uninterrupted one
            fh.write(json.dumps({"key": key, "inputs": fingerprint, "result": done[key]}) + "\n")


def plan(
    model: Any,
    requests: Sequence[Any],
    *,
    slo_ttft_s: Any = None,
    slo_tpot_s: Any = None,
    slo_e2e_s: Any = None,
    percentile: Any = 99,
    axes: Mapping[str, Sequence[Any]] | None = None,
    prices: Mapping[str, Any] | None = None,
    flops: str = "exact",
    estimate: Any = None,
    utilization: Any = DEFAULT_UTILIZATION,
    block_size: int = DEFAULT_BLOCK_SIZE,
    search_rate: bool = False,
    rate_scale: Any = 1,
    rate_tolerance: Any = Fraction(1, 20),
    jobs: int = 1,
    cluster: str | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> PlanResult:
    """Search the grid for the cheapest configuration meeting the SLO (docs/conventions.md, "Deployment search").

    Parameters
    ----------
    model : ModelConfig, the whole model
    requests : sequence of :class:`roofline.sim.Request`, non-empty, in arrival order
    slo_ttft_s, slo_tpot_s, slo_e2e_s : [s] > 0 or None; at least one
    percentile : in (0, 100], default 99 (numpy's linear interpolation, as ``vllm bench serve``)
    axes : dict axis name -> values (:data:`AXES`); an axis not given searches its defaults
    prices : dict accelerator -> USD per GPU-hour (the user's, each in [1e-6, 1e6]), or None: the fewest GPUs
    flops, estimate : the Deployment's FLOPs convention and engine profile (an EngineProfile or its name, as
        :func:`roofline.deployment.profile` reads it; None: the bound)
    utilization : in (0, 1], default 0.9; block_size : int >= 1 [tokens], default 16
    search_rate : bool (not 1, not "yes"), also find each configuration's highest rate (bracketing)
    rate_scale : > 0, default 1: the rate the answer is at, x the workload's own
    rate_tolerance : >= 1e-4, default 0.05: the rate search stops when its bracket's ratio <= 1 + this
    jobs : int in 1..MAX_WORKERS (1,024), local worker processes; cluster : ``tcp://HOST:PORT`` or ``local:N``
        (Dask, N in 1..MAX_WORKERS) or None
    out : path or None, JSON lines of finished results; an existing file of the same inputs is resumed
    progress : callable or None, called with each record as it finishes (written to ``out`` before); an
        exception it raises stops the search (its workers terminated, nothing more started) and is raised here

    Returns
    -------
    PlanResult

    Raises
    ------
    InvalidValueError
        Naming the field: an unknown axis (``axes``), an axis left empty (its flag), no SLO or one <= 0,
        a percentile outside (0, 100], a price <= 0 or for an accelerator not searched or missing for one
        searched (``--price``), no requests, a bad ``cluster`` (a ``tcp://`` port outside 1..65535, checked before
        any work; an address refusing the connection, after one TCP try of :data:`CONNECT_TIMEOUT_S`), ``out``
        holding another search's results or a line that is not a record the search writes; an axis value not
        of its type (:func:`axis_value`, naming the axis) or an axis's values not a list or tuple (a str is
        not one); a ``kv_cache_dtype`` the model cannot take; an SLO or percentile that is not a real number
        (a bool, a string); ``rate_scale`` outside [MIN_SCALE, MAX_SCALE] with ``search_rate``, or one putting
        the last arrival past ``MAX_ARRIVAL_S``; ``rate_tolerance`` below :data:`MIN_RATE_TOLERANCE`; a request
        that is not a :class:`roofline.sim.Request` (``requests[j]``), an arrival earlier than the one before it
        (``requests[j].arrival_s``) or a repeated id (``requests[j].id``); with the rate search or a ``rate_scale``
        other than 1, requests all arriving at one time (no rate to scale) or at an own rate above
        :data:`MAX_OWN_RATE`, or with the search, a last arrival the slowest factor would put past
        ``MAX_ARRIVAL_S`` (field ``requests``); a price outside [:data:`MIN_PRICE`, :data:`MAX_PRICE`]; an
        ``estimate`` that names no engine profile; an ``out`` that is a folder, a device or a pipe, or in a
        folder that does not exist (before any work); a ``tcp://`` cluster that does not answer Dask's handshake
        within :data:`HANDSHAKE_TIMEOUT_S` or fails it; two prices of
        one accelerator (an alias: ``h100`` and ``h100-sxm``); ``flops`` not a convention, ``block_size`` not an
        integer >= 1, ``utilization`` outside (0, 1], ``search_rate`` not a bool, ``progress`` not callable,
        ``jobs`` outside 1..:data:`MAX_WORKERS`, ``local:N`` with N above it; a grid whose every configuration
        is skipped (field ``axes``, the reasons named; after the configurations are built, before any is
        simulated, since none is).
    """
    from .models import ModelConfig

    if not isinstance(model, ModelConfig):
        raise InvalidValueError("model", model, "expected a ModelConfig (roofline.get_model or load_model)")
    from .sim import Request
    from .sim.requests import MAX_ARRIVAL_S, check_requests, scale_rate

    requests = tuple(requests)
    if not requests:
        raise InvalidValueError("requests", requests, "no requests to serve")
    for j, r in enumerate(requests):
        if not isinstance(r, Request):
            raise InvalidValueError(f"requests[{j}]", r, "expected a roofline.sim.Request")
    check_requests(requests)  # in arrival order, unique ids: refused here, before any configuration is built
    slo_ttft_s, slo_tpot_s, slo_e2e_s, percentile, utilization, rate_scale, rate_tolerance, block_size = map(
        _plain, (slo_ttft_s, slo_tpot_s, slo_e2e_s, percentile, utilization, rate_scale, rate_tolerance, block_size))
    limits = {"slo_ttft_s": slo_ttft_s, "slo_tpot_s": slo_tpot_s, "slo_e2e_s": slo_e2e_s}
    if all(v is None for v in limits.values()):
        raise InvalidValueError("slo", None, "give at least one of the TTFT, TPOT and E2E limits")
    for name, v in limits.items():
        if v is not None:
            check_scalar(name, v)
            check_positive(name, v)  # a bool or a string is not a number of seconds
    check_scalar("percentile", percentile)
    check_positive("percentile", percentile)
    if not percentile <= 100:
        raise InvalidValueError("percentile", percentile, "must be in (0, 100]")
    for name, v in (("rate_scale", rate_scale), ("rate_tolerance", rate_tolerance)):
        check_scalar(name, v)  # one number: an array is refused by name
        check_positive(name, v)
    if rate_tolerance < MIN_RATE_TOLERANCE:
        raise InvalidValueError("rate_tolerance", rate_tolerance, f"must be >= {float(MIN_RATE_TOLERANCE):g} (the "
                                "search's rate factors are fractions of denominators up to 2**20: a finer bracket "
                                "could not be kept)")
    from .errors import UnknownPresetError
    from .hardware import get_accelerator

    if prices is not None and not isinstance(prices, Mapping):
        raise InvalidValueError("--price", prices, "expected a dict of accelerator -> USD per GPU-hour")
    named: dict[str, str] = {}
    for acc in prices or {}:
        try:
            canonical = get_accelerator(acc).key
        except UnknownPresetError as err:  # the accelerator a price names
            raise UnknownPresetError(err.kind, err.name, err.known, field="--price") from None
        if canonical in named:  # an alias of one already priced: the last would silently win
            raise InvalidValueError("--price", acc, f"given twice ({named[canonical]!r} is the same accelerator, "
                                    f"{canonical})")
        named[canonical] = acc
    prices = {get_accelerator(acc).key: p for acc, p in (prices or {}).items()}
    for acc, p in prices.items():
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not MIN_PRICE <= p <= MAX_PRICE:
            raise InvalidValueError("--price", f"{acc}={p}", f"a price must be a number in {float(MIN_PRICE):g}.."
                                    f"{MAX_PRICE:g} (USD per GPU-hour)")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_WORKERS:
        raise InvalidValueError("jobs", jobs, f"expected an integer in 1..{MAX_WORKERS:,}")
    if not isinstance(search_rate, bool):
        raise InvalidValueError("search_rate", search_rate, "expected True or False")
    if progress is not None and not callable(progress):
        raise InvalidValueError("progress", progress, "expected a callable taking a record, or None")
    from .models import flops_convention

    flops = flops_convention(flops)
    check_count("block_size", block_size, minimum=1)
    check_scalar("utilization", utilization)
    check_positive("utilization", utilization)
    if not utilization <= 1:
        raise InvalidValueError("utilization", utilization, "must be in (0, 1]")
    if search_rate and not MIN_SCALE <= rate_scale <= MAX_SCALE:
        raise InvalidValueError("rate_scale", rate_scale, f"the rate search covers {MIN_SCALE} to {MAX_SCALE} x the "
                                "workload's own rate: give a --rate-scale inside it")
    first = min(Fraction(r.arrival_s) for r in requests)
    last = max(Fraction(r.arrival_s) for r in requests)
    scale_rate(requests, rate_scale)  # refuses a factor putting an arrival past MAX_ARRIVAL_S, by name
    if search_rate or rate_scale != 1:
        if last == first:
            raise InvalidValueError("requests", f"{len(requests)} arriving at {float(first):g} s", "every request "
                                    "arrives at the same time: there is no rate to scale; give arrivals that differ")
        own = (len(requests) - 1) / (last - first)
        if own > MAX_OWN_RATE:
            raise InvalidValueError("requests", f"{len(requests)} arriving within {float(last - first):g} s",
                                    f"a workload's own rate above {MAX_OWN_RATE:g} requests/s cannot be scaled")
    if search_rate and last / MIN_SCALE > MAX_ARRIVAL_S:
        raise InvalidValueError("requests", f"last arrival {float(last):g} s", f"the rate search's slowest factor "
                                f"({MIN_SCALE}) would put it past {MAX_ARRIVAL_S:g} s")
    from .deployment import profile

    try:
        estimate = profile(estimate)
    except UnknownPresetError as err:
        raise UnknownPresetError(err.kind, err.name, err.known, field="estimate") from None
    if out is not None:
        from ._io import output_path

        target = output_path("out", out)
        if target.is_dir():
            raise InvalidValueError("out", str(out), "is a folder; name a file")
        if not target.absolute().parent.is_dir():
            raise InvalidValueError("out", str(out), f"the folder {target.absolute().parent} does not exist")
    if cluster is not None:
        _cluster_address(cluster)
    configs = _grid(axes, prices, model)
    context = Context(model, requests, _frac(slo_ttft_s), _frac(slo_tpot_s), _frac(slo_e2e_s), Fraction(percentile),
                      flops, estimate, Fraction(utilization), block_size, bool(search_rate), Fraction(rate_scale),
                      Fraction(rate_tolerance))
    fingerprint = _fingerprint(context)
    path = None if out is None else Path(out)
    done = {} if path is None else _read_out(path, fingerprint, context)
    keys = {key_of(c) for c in configs}
    resumed = sum(1 for k in done if k in keys)
    todo = [c for c in configs if key_of(c) not in done]
    for c in configs:
        if key_of(c) in done and progress is not None:
            progress(done[key_of(c)])
    parents = _parents(configs)
    seeds = _seeds(parents, done)
    results = (_run_dask(context, todo, cluster, parents, seeds) if cluster is not None
               else _run_local(context, todo, jobs, parents, seeds))
    shared_runs = 0
    try:
        for record, taken in results:
            shared_runs += taken
            done[record["key"]] = record
            if path is not None:
                _write_out(path, fingerprint, done)
            if progress is not None:
                progress(record)
    finally:  # stopped here (a progress callback, a full disk): the executor stops now, not when collected
        results.close()
    records = sorted((done[k] for k in keys), key=lambda r: _rank_key(r, prices))
    for r in records:
        r["cost"] = cost_of(r, prices)
        rate = (r.get("max_rate") or {}).get("requests_per_s")
        if rate is not None and r.get("gpus"):
            r["max_rate"]["requests_per_s_per_gpu"] = rate / r["gpus"]
            if prices:
                r["max_rate"]["requests_per_s_per_usd_hour"] = rate / r["cost"]
    if records and all(r["status"] == "skipped" for r in records):  # nothing to answer: say why
        reasons = sorted({r["reason"] for r in records})
        n = f"{len(records)} configuration{'s' if len(records) > 1 else ''}"
        raise InvalidValueError("axes", n, "every configuration is skipped (not modelled): " + "; ".join(reasons))
    winner = next((r for r in records if (r.get("at_rate") or {}).get("meets")), None)
    pruned = {rule: sum(1 for r in records if r.get("rule") == rule) for rule in RULES}
    simulated = sum(1 for r in records if r["status"] == "simulated")
    skipped = sum(1 for r in records if r["status"] == "skipped")
    return PlanResult(tuple(records), winner, pareto_front(records), pruned, skipped, simulated, resumed, prices,
                      context, shared_runs)


def _plain(x: Any) -> Any:
    """A numpy number as the Python number of its value (``np.int64`` as int, ``np.float32`` as float): a Fraction
    of a numpy integer keeps it and overflows int64 in the search's comparisons; anything else as given."""
    if isinstance(x, bool | int | float | Fraction) or not isinstance(x, numbers.Real):
        return x
    return int(x) if isinstance(x, numbers.Integral) else float(x)


def _frac(x: Any) -> Any:
    return None if x is None else Fraction(x)
