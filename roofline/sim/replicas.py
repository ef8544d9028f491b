"""Data-parallel replicas behind a router: D copies of one deployment, each with its own KV pool and its own
continuous-batching scheduler, and a router that assigns each request to one of them at its arrival.

The replicas advance together, exactly: before each arrival every replica runs its step boundaries before the
arrival instant (:meth:`roofline.sim.continuous._Continuous.advance`; a stretch of decode steps stops at the first
boundary at or after it, as at an arrival of its own), the router reads every replica's state at that instant,
and the request joins the replica it picked (:meth:`~roofline.sim.continuous._Continuous.add`). The loop is the
one :func:`~roofline.sim.serve_continuous` runs, on either clock (the replicas share one).

Conventions: docs/conventions.md, "Data-parallel replicas" (the routers, what the router sees at an arrival, the
results).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._checks import check_count
from ..errors import InvalidValueError
from .clock import StepGaps
from .continuous import _Continuous
from .cost import RooflineCostModel
from .kv import KVPool
from .policies import (
    _check_transferred,
    _check_transferred_stop,
    _ContinuousPlan,
    _engine_options,
    _listed,
    _step_engine_reason,
)
from .requests import Request
from .results import SimResult
from .run import _Run
from .stretch import TickCosts, on_fine_enough_clock
from .workloads import ClosedLoop

__all__ = ["serve_replicas", "ReplicaLoad", "ReplicaResult", "ROUTERS", "round_robin"]

#: The routers (docs/conventions.md, "Data-parallel replicas"): round robin in arrival order, the fewest
#: outstanding requests (vLLM V0's virtual-engine rule too), the fewest KV blocks in use; ties to the lowest index.
#: The one table: data-parallel replicas and both pools of :func:`roofline.sim.serve_disaggregated` route by it.
ROUTERS = ("round-robin", "least-requests", "least-kv")


def round_robin(count: int, instances: int) -> list[int]:
    """Round robin: the j-th request (0-based, in the order it reaches the router) goes to instance j mod n.

    Parameters
    ----------
    count : int >= 0, the requests routed, in order
    instances : int >= 1, the replicas (or a pool's instances)

    Returns
    -------
    list of int, the instance (0-based) of each request.

    Examples
    --------
    >>> round_robin(5, 2)
    [0, 1, 0, 1, 0]
    """
    return [j % instances for j in range(count)]

#: The most replicas a run simulates (each has a scheduler of its own): a modelling limit, not an engine's.
MAX_REPLICAS = 4096


@dataclass(frozen=True)
class ReplicaLoad:
    """What one replica served.

    Attributes
    ----------
    replica : int, its index (0 .. D - 1)
    requests : int, requests the router assigned to it
    completed : int, of them handed back
    rejected : int, of them refused (each with its reason in the results)
    prompt_tokens : int, prompt tokens it prefilled (recompute prefills counted again; prefix-cache hits not)
    output_tokens : int, output tokens of its completed requests
    busy_s : [s] its busy time (first step's start to last step's end, less idle time)
    steps : int, its steps
    peak_kv_blocks : int, the most blocks of its pool in use at once
    kv_capacity_blocks : int or None, its pool (None: unlimited)
    """

    replica: int
    requests: int
    completed: int
    rejected: int
    prompt_tokens: int
    output_tokens: int
    busy_s: Any
    steps: int
    peak_kv_blocks: int
    kv_capacity_blocks: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times as floats)."""
        return {"replica": self.replica, "requests": self.requests, "completed": self.completed,
                "rejected": self.rejected, "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "busy_s": float(self.busy_s), "steps": self.steps, "peak_kv_blocks": self.peak_kv_blocks,
                "kv_capacity_blocks": self.kv_capacity_blocks}


@dataclass(frozen=True)
class ReplicaResult:
    """The outcome of D replicas behind a router.

    Attributes
    ----------
    router : str, one of :data:`ROUTERS`
    whole : SimResult
        All requests in the workload's order, each with its outcome in the replica that served it; its summary's
        TTFT, TPOT, ITL, E2E and queue-wait percentiles are over all requests (and all inter-token gaps) of all
        replicas; its makespan runs from the first arrival to the last hand-back; its steps, rows and busy time are
        the replicas' sums (busy: replica-seconds); its peak KV is the largest of any one replica's.
    replicas : tuple of SimResult, each replica's own run (its requests only)
    assignment : tuple of int, the replica of each request, in the workload's order
    loads : tuple of ReplicaLoad, per replica
    gpus_per_replica : int, GPUs one replica runs on
    """

    router: str
    whole: SimResult
    replicas: tuple[SimResult, ...]
    assignment: tuple[int, ...]
    loads: tuple[ReplicaLoad, ...]
    gpus_per_replica: int

    @property
    def data_parallel_size(self) -> int:
        """D, the replicas."""
        return len(self.replicas)

    @property
    def gpus(self) -> int:
        """GPUs of all replicas: D x the GPUs of one."""
        return self.data_parallel_size * self.gpus_per_replica

    @property
    def output_tokens_per_s_per_gpu(self) -> Any:
        """Output throughput per GPU [tokens/s/GPU]: the whole's output tokens / makespan / GPUs (None without a
        makespan)."""
        rate = self.whole.summary.output_tokens_per_s
        return None if rate is None else rate / self.gpus

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the router, D, GPUs, throughput per GPU and the per-replica loads."""
        per_gpu = self.output_tokens_per_s_per_gpu
        return {"router": self.router, "data_parallel_size": self.data_parallel_size,
                "gpus_per_replica": self.gpus_per_replica, "gpus": self.gpus,
                "output_tokens_per_s_per_gpu": None if per_gpu is None else float(per_gpu),
                "replicas": [load.to_dict() for load in self.loads]}


def serve_replicas(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    router: str = "round-robin",
    data_parallel_size: int | None = None,
    kv_pool: KVPool | Sequence[KVPool] | None = None,
    gpus_per_replica: int | None = None,
    max_num_seqs: int = 256,
    admission: str = "reserve",
    max_prefill_tokens: int | None = None,
    prefill: str = "separate",
    max_num_batched_tokens: int | None = None,
    max_model_len: int | None = None,
    record_steps: bool = False,
    max_steps: int | None = None,
    engine: str = "auto",
    enable_prefix_caching: bool = False,
    kv_transferred: bool = False,
    speculative: Any = None,
    stop_on_misses: dict[str, tuple[Any, int]] | None = None,
    itl: bool = True,
) -> ReplicaResult:
    """Serve a workload on D data-parallel replicas behind a router, each batching continuously.

    Parameters
    ----------
    requests : iterable of Request, in arrival order
        Closed-loop clients are refused (field ``requests``): a hand-back in any replica makes the next arrival,
        which the joint run cannot bound before it happens.
    cost_model : CostModel, a sequence of D cost models, or a Deployment
        A :class:`~roofline.Deployment`: its cost model
        (:meth:`~roofline.sim.RooflineCostModel.for_deployment`, exact, no overhead), D = its
        ``parallelism.data`` and its GPUs per replica; with P > 1 pipeline stages, D x P virtual engines of T GPUs
        each (vLLM V0's P per replica, one router over all of them; docs/conventions.md, "Pipeline
        parallelism"), each with the pipeline's step latency and the ``kv_pool`` given (one virtual engine's:
        :meth:`~roofline.Deployment.virtual_engine_kv_blocks`). A cost model: every replica's (D from
        ``data_parallel_size``). A sequence: one per replica, which must all be the same cost model (replicas on
        different ones are refused by name: the pooled inter-token percentiles of the stretch clock need one).
    router : {"round-robin", "least-requests", "least-kv"}, default "round-robin"
        :data:`ROUTERS` (docs/conventions.md, "Data-parallel replicas"): request j to replica j mod D; to the
        replica with the fewest outstanding requests at the arrival (assigned, not handed back or refused); to the
        one with the fewest KV blocks in use then. Ties to the lowest index.
    data_parallel_size : int >= 1 or None
        D (vLLM's ``--data-parallel-size``); None: the Deployment's, or the sequence's length, or 1. Given beside
        either, it must agree (beside a Deployment: its D, not D x P).
    kv_pool : KVPool, a sequence of D KVPools, or None
        Each replica's pool: one value for all (each replica has its own pool of that size), one per replica, or
        None (unlimited).
    gpus_per_replica : int >= 1 or None
        GPUs one replica runs on, for throughput per GPU; None: the Deployment's, else the cost model's
        ``tensor_parallel_size`` (1 without one).
    max_num_seqs, admission, max_prefill_tokens, prefill, max_num_batched_tokens, max_model_len, record_steps, \
max_steps, engine, enable_prefix_caching
        As :func:`~roofline.sim.serve_continuous`, for every replica; ``max_steps`` bounds each replica's steps;
        ``record_steps`` records each replica's steps (in ``ReplicaResult.replicas``).
    kv_transferred : bool, default False
        As :func:`~roofline.sim.serve_continuous`: the requests arrive with their KV computed (a disaggregated
        decode pool, :func:`~roofline.sim.serve_disaggregated`) and decode from the step boundary that admits
        them; only with ``prefill="separate"``, no prefix caching, every request of O >= 2.
    speculative : None
        Speculative decoding across replicas is not modelled yet: a :class:`~roofline.sim.Speculation` is
        refused by name (field ``speculative``); serve one engine with :func:`~roofline.sim.serve_continuous`.
    stop_on_misses : dict or None, default None
        As :func:`~roofline.sim.serve_continuous`, over the whole workload: the replicas count their misses
        together, and the run raises :class:`~roofline.errors.RunStopped` once more than ``allowed`` are known.
    itl : bool, default True
        As :func:`~roofline.sim.serve_continuous`: False keeps no inter-token gaps (every ``summary.itl`` None).

    Returns
    -------
    ReplicaResult; ``whole.options`` adds ``router`` and ``data_parallel_size`` to serve_continuous's options.

    Raises
    ------
    InvalidValueError
        An unknown router, D not an integer >= 1 or not agreeing with the replicas or pools given, a closed loop,
        replicas of different cost models, and every refusal of :func:`~roofline.sim.serve_continuous`.
    SimulationError
        ``max_steps`` passed in a replica.
    RunStopped
        With ``stop_on_misses``: more than ``allowed`` requests miss one of its limits.

    Examples
    --------
    Two replicas, round robin: requests 0 and 2 go to replica 0, so request 2 waits behind request 0.

    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=3) for i in range(3)]
    >>> r = serve_replicas(reqs, UnitCostModel(), data_parallel_size=2, max_num_seqs=1)
    >>> r.assignment, [x.handed_back_s for x in r.whole.requests]
    ((0, 1, 0), [3, 3, 6])
    """
    if not isinstance(router, str) or router not in ROUTERS:
        raise InvalidValueError("router", router, f"expected one of {', '.join(ROUTERS)}")
    if speculative is not None:
        raise InvalidValueError("speculative", type(speculative).__name__, "speculative decoding on data-parallel "
                                "replicas (data_parallel_size): not modelled yet; serve one engine (serve_continuous)")
    if isinstance(requests, ClosedLoop):
        raise InvalidValueError("requests", requests, "data-parallel replicas do not take closed-loop clients: a "
                                "hand-back in any replica makes the next arrival, which the joint run cannot bound "
                                "before it happens")
    cost_model, size, gpus = _replica_inputs(cost_model, data_parallel_size, gpus_per_replica)
    pools = _pools(kv_pool, size)
    plan = _ContinuousPlan(cost_model, pools[0], max_num_seqs=max_num_seqs, admission=admission,
                           max_prefill_tokens=max_prefill_tokens, prefill=prefill,
                           max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                           enable_prefix_caching=enable_prefix_caching, stop_on_misses=stop_on_misses, itl=itl)
    requests = _listed(requests)
    if not isinstance(kv_transferred, bool):
        raise InvalidValueError("kv_transferred", kv_transferred, "must be True or False")
    if kv_transferred:
        _check_transferred(requests, prefill, enable_prefix_caching)
        _check_transferred_stop(plan)
        plan.options["kv_transferred"] = True

    def new_run(reqs: Any, pool: KVPool | None, steps: bool = False) -> _Run:
        run = _Run(reqs, cost_model, pool, steps, max_steps, max_model_len=max_model_len, max_batch=max_num_seqs,
                   prefix_caching=enable_prefix_caching, streams=plan.itl)
        run.transferred = kv_transferred
        return run

    whole = new_run(requests, pools[0])  # checks the requests; holds the merged outcome
    for pool in pools[1:]:
        new_run((), pool)  # each pool checked against the cost model
    why = _step_engine_reason(engine, cost_model)
    # a bound on any replica's steps: serve_continuous's over the whole workload in an unlimited pool
    bound_run = new_run(whole.requests, None)
    for i in range(bound_run.n):
        plan.refuse_long_prompt(bound_run, i)
    limit = plan.scheduler(bound_run).step_limit()
    options = {**plan.options, "router": router, "data_parallel_size": size}

    def serve(tokens: int) -> ReplicaResult:
        merged = new_run(requests, pools[0])
        runs = [new_run((), pool, record_steps) for pool in pools]
        if why is None:
            costs = TickCosts.build(cost_model, [*merged.arrival, merged.idle], merged.windows,
                                    max_tokens=max(tokens, 1))
            assert costs is not None  # _step_engine_reason checked the stretch terms
            for run in (merged, *runs):
                run.on_ticks(costs)
        watch = plan.watch()  # one count of SLO misses over every replica
        schedulers = [plan.scheduler(run, watch) for run in runs]
        for scheduler in schedulers:
            scheduler.start(limit)
        owner = _route(merged, schedulers, router, plan)
        for scheduler in schedulers:
            scheduler.advance(None)
        engine_options = _engine_options(why)
        results = tuple(run.result("continuous", {**options, **engine_options, "replica": r})
                        for r, run in enumerate(runs))
        _merge(merged, runs, owner)
        whole_result = merged.result("continuous", {**options, **engine_options})
        loads = tuple(_load(r, run, result) for r, (run, result) in enumerate(zip(runs, results, strict=True)))
        return ReplicaResult(router, whole_result, results, tuple(r for r, _ in owner), loads, gpus)

    first = plan.first_tokens(whole.prompt, whole.output)
    result: ReplicaResult = serve(first) if why is not None else on_fine_enough_clock(serve, first)
    return result


def _replica_inputs(replicas: Any, size: Any, gpus: Any) -> tuple[Any, int, int]:
    """(the cost model, D, GPUs per replica) from ``serve_replicas``' arguments."""
    from ..deployment import Deployment

    if size is not None:
        check_count("data_parallel_size", size, minimum=1)
        if size > MAX_REPLICAS:
            raise InvalidValueError("data_parallel_size", size, f"more than {MAX_REPLICAS:,} replicas are not "
                                    "modelled (each is simulated)")
    if gpus is not None:
        check_count("gpus_per_replica", gpus, minimum=1)
    if isinstance(replicas, Deployment):
        d = replicas.parallelism.data
        if size is not None and size != d:
            raise InvalidValueError("data_parallel_size", size, f"given beside a Deployment of D = {d}, which "
                                    "holds it")
        # D replicas of a pipeline of P stages: D x P virtual engines of T GPUs each (P of them share a pipeline)
        engines = d * replicas.pipeline_parallel_size
        return (RooflineCostModel.for_deployment(replicas), engines,
                replicas.tensor_parallel_size if gpus is None else gpus)
    if isinstance(replicas, (list, tuple)):
        if not replicas:
            raise InvalidValueError("cost_model", replicas, "expected at least one cost model")
        if size is not None and size != len(replicas):
            raise InvalidValueError("data_parallel_size", size, f"given beside {len(replicas)} cost models")
        first = replicas[0]
        if any(c is not first for c in replicas[1:]):
            raise InvalidValueError("cost_model", replicas, "replicas of different cost models are not modelled (the "
                                    "pooled inter-token percentiles need one); give one cost model")
        cost_model, size = first, len(replicas)
    else:
        cost_model, size = replicas, 1 if size is None else size
    if gpus is None:
        t = getattr(cost_model, "tensor_parallel_size", 1)
        gpus = t if isinstance(t, int) and not isinstance(t, bool) and t >= 1 else 1
    return cost_model, size, gpus


def _pools(kv_pool: Any, size: int) -> list[KVPool | None]:
    """One pool per replica."""
    if isinstance(kv_pool, (list, tuple)):
        if len(kv_pool) != size:
            raise InvalidValueError("kv_pool", kv_pool, f"expected one KVPool per replica: {size}, not "
                                    f"{len(kv_pool)}")
        return list(kv_pool)
    return [kv_pool] * size


def _route(merged: _Run, schedulers: list[_Continuous], router: str, plan: _ContinuousPlan) -> list[tuple[int, int]]:
    """Assign every request at its arrival (docs/conventions.md, "Data-parallel replicas"): advance every replica
    to the arrival, read their states, add the request to the one picked; (replica, its index there) per request.
    Round robin reads no state, so the replicas are not advanced for it (they run to the end afterwards, each as
    its part of the trace served alone)."""
    size = len(schedulers)
    owner: list[tuple[int, int]] = []
    outstanding = [0] * size  # assigned so far; less the handed back and refused, read at each arrival
    dynamic = router != "round-robin"  # round robin reads no state: the replicas run after it, as parts served alone
    turns = round_robin(len(merged.requests), size)
    for j, request in enumerate(merged.requests):
        t = merged.arrival[j]
        if dynamic:
            for scheduler in schedulers:
                scheduler.advance(t)
        if not dynamic:
            r = turns[j]
        elif router == "least-requests":
            r = min(range(size), key=lambda k: _outstanding(schedulers[k], outstanding[k], t))
        else:
            r = min(range(size), key=lambda k: _blocks_in_use(schedulers[k], t))
        scheduler = schedulers[r]
        i = scheduler.add(request)
        plan.refuse_long_prompt(scheduler.run, i)
        outstanding[r] += 1
        owner.append((r, i))
    return owner


def _in_flight(scheduler: _Continuous, t: Any) -> bool:
    """Whether a step of ``scheduler`` is running at instant t (it started before t and ends after)."""
    return scheduler.now is not None and scheduler.now > t


def _outstanding(scheduler: _Continuous, assigned: int, t: Any) -> int:
    """Requests assigned to the replica and not handed back or refused at instant t (the step in flight at t hands
    its back after t)."""
    run = scheduler.run
    done = run.handed_count + run.refused_count
    if _in_flight(scheduler, t):
        done -= scheduler.last_handed
    return assigned - done


def _blocks_in_use(scheduler: _Continuous, t: Any) -> int:
    """KV blocks the replica holds at instant t (a step in flight holds what it took at its start)."""
    return scheduler.run.step_blocks if _in_flight(scheduler, t) else scheduler.blocks


def _merge(merged: _Run, runs: list[_Run], owner: list[tuple[int, int]]) -> None:
    """Fill ``merged`` (the whole workload, not run) with each request's outcome in its replica, the replicas'
    summed totals (prefix-cache counts included), their busy times (as one busy span), their largest peaks and
    their pooled inter-token gaps."""
    for j, (r, i) in enumerate(owner):
        run = runs[r]
        merged.reason[j] = run.reason[i]
        merged.admitted[j] = run.admitted[i]
        merged.first[j] = run.first[i]
        merged.finish[j] = run.finish[i]
        merged.handed[j] = run.handed[i]
        merged.preemptions[j] = run.preemptions[i]
        merged.prefilled[j] = run.prefilled[i]
        merged.generated[j] = run.generated[i]
    for name in ("steps", "prefill_steps", "mixed_steps", "useful_rows", "rows", "slot_rows"):
        setattr(merged, name, sum(getattr(run, name) for run in runs))
    merged.peak_tokens = max(run.peak_tokens for run in runs)
    merged.peak_blocks = max(run.peak_blocks for run in runs)
    merged.peak_running = max(run.peak_running for run in runs)
    started = [run for run in runs if run.first_start is not None]
    if started:
        busy = merged.idle  # zero on the run's clock
        for run in started:
            busy = busy + (run.end - run.first_start - run.idle)
        merged.first_start, merged.end = merged.idle, busy
    if merged.prefix is not None:  # the prefix caches' counts, summed (each replica's cache is its own)
        for name in ("queried_tokens", "hit_tokens", "queried_blocks", "hit_blocks", "evictions"):
            setattr(merged.prefix, name, sum(getattr(run.prefix, name) for run in runs))
    if isinstance(merged.gaps, StepGaps):
        for run in runs:
            for gap, count in run.gaps.counts.items():
                merged.gaps.add(gap, count)
    else:
        for run in runs:
            merged.gaps.merge(run.gaps)


def _load(r: int, run: _Run, result: SimResult) -> ReplicaLoad:
    s = result.summary
    return ReplicaLoad(replica=r, requests=run.n, completed=s.completed, rejected=s.rejected,
                       prompt_tokens=sum(run.prefilled), output_tokens=s.output_tokens, busy_s=s.busy_s,
                       steps=s.steps, peak_kv_blocks=s.peak_kv_blocks, kv_capacity_blocks=s.kv_capacity_blocks)
