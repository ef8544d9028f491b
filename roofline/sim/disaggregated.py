"""Disaggregated prefill and decode: a prefill pool and a decode pool of instances, the KV moved between them.

A request is prefilled in the prefill pool (as a request of its P prompt tokens and one output
token: continuous batching there, whose prefill step gives the first token), its KV moves over
the link between the pools (:func:`roofline.formulas.kv_transfer_time` of
:func:`roofline.formulas.kv_transfer_bytes`, from the end of its prefill), and it decodes in the
decode pool, admitted when its KV fits, prefilling nothing there
(:func:`~roofline.sim.serve_continuous` with ``kv_transferred=True``). Each pool is served as
data-parallel replicas of its instance behind the router the run names
(:func:`~roofline.sim.serve_replicas`, its one router table :data:`ROUTERS`: round robin, least
outstanding requests, least KV in use), the prefill pool in arrival order, the decode pool in
the order the transfers end. Each instance runs exactly, on the clock the run asks for; the
whole is exact on both clocks because each of its instances is.

Conventions: docs/conventions.md, "Disaggregated prefill and decode".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import attrs
import numpy as np

from .._checks import check_count
from ..errors import InvalidValueError, RunStopped
from ..formulas import kv_transfer_bytes, kv_transfer_time
from .kv import KVPool
from .policies import ADMISSIONS, PREFILL_MODES, _check_engine, _checked_stop, _listed
from .replicas import ROUTERS, round_robin, serve_replicas
from .requests import Request, check_requests
from .results import RequestResult, SimResult, summarize
from .workloads import ClosedLoop

__all__ = ["Pool", "TransferLink", "serve_disaggregated", "round_robin", "ROUTERS"]  # the last two: replicas'

#: The old spelling of round robin here, still taken (the shared table spells it "round-robin").
_ALIASES = {"round_robin": "round-robin"}


def _positive(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count(attribute.name, value, minimum=1)


def _number(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (np.int64(0) -> 0); anything else as given."""
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


def _finite(value: Any) -> bool:
    """An int or Fraction (exact, so finite), or a finite float; never a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, Fraction)) or (isinstance(value, float) and math.isfinite(value))


def _nonnegative_number(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not _finite(value) or not value >= 0:
        raise InvalidValueError(attribute.name, value, "must be a finite number >= 0")


@attrs.frozen
class TransferLink:
    """The link a request's KV moves over between the pools: bandwidth per GPU per direction and latency.

    Parameters
    ----------
    bandwidth : [bytes/s] > 0, per GPU per direction (every GPU has its own NIC)
    latency : [s] >= 0, one transfer's latency
    name : str, what the link is (a NIC, or "given")

    Raises
    ------
    InvalidValueError
        A bandwidth that is not a positive number, a negative latency.
    """

    bandwidth: Any = attrs.field(converter=_number)
    latency: Any = attrs.field(converter=_number, validator=_nonnegative_number)
    name: str = "given"

    @bandwidth.validator
    def _bandwidth(self, attribute: attrs.Attribute, value: Any) -> None:
        if not _finite(value) or not value > 0:
            raise InvalidValueError("bandwidth", value, "must be a finite number > 0 [bytes/s]")

    @classmethod
    def between(cls, prefill_accelerator: Any, decode_accelerator: Any) -> TransferLink:
        """The inter-node network of two accelerators (``Accelerator.network``): the smaller bandwidth, the larger
        latency, both sourced facts of :mod:`roofline.hardware`.

        Raises
        ------
        InvalidValueError
            An accelerator with no stated network (name the link's bandwidth and latency instead).
        """
        links = []
        for field, accelerator in (("prefill_accelerator", prefill_accelerator),
                                   ("decode_accelerator", decode_accelerator)):
            network = getattr(accelerator, "network", None)
            if network is None:
                raise InvalidValueError(field, getattr(accelerator, "name", accelerator),
                                        "has no stated inter-node network (Accelerator.network) to move KV between "
                                        "the pools: give the link's bandwidth and latency (TransferLink(...), "
                                        "--kv-transfer-bandwidth and --kv-transfer-latency)")
            links.append(network)
        bandwidth = min(Fraction(link.bandwidth.value) for link in links)
        latency = max(Fraction(link.latency.value) for link in links)
        names = sorted({link.name for link in links})
        return cls(bandwidth=bandwidth, latency=latency, name=" / ".join(names))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: bandwidth [bytes/s], latency [s], name."""
        return {"name": self.name, "bandwidth_bytes_per_s": float(self.bandwidth), "latency_s": float(self.latency)}


@attrs.frozen
class Pool:
    """One pool of identical instances (a deployment each) and the scheduler options of each instance.

    Parameters
    ----------
    cost_model : CostModel, one instance's step times (:meth:`roofline.sim.RooflineCostModel.for_deployment`)
    kv_bytes_per_token : [bytes/token] >= 0, KV one GPU of an instance holds per token (its share; a
        decode pool's is the layout the transfer lands in, :func:`roofline.formulas.kv_transfer_bytes`)
    instances : int >= 1, default 1
    tensor_parallel_size : int >= 1, default 1, GPUs of one instance (T)
    kv_pool : KVPool or None, one instance's KV pool (None: unlimited)
    max_num_seqs, admission, prefill, max_num_batched_tokens
        As :func:`~roofline.sim.serve_continuous`, for every instance of the pool (``prefill`` and
        ``max_num_batched_tokens`` matter only in the prefill pool: a decode instance prefills only what
        it preempted, in steps of its own).
    name : str, what runs there (printed)

    Use :meth:`for_deployment` to build one from a :class:`roofline.Deployment`.
    """

    cost_model: Any
    kv_bytes_per_token: Any = attrs.field(converter=_number, validator=_nonnegative_number)
    instances: int = attrs.field(default=1, validator=_positive)
    tensor_parallel_size: int = attrs.field(default=1, validator=_positive)
    kv_pool: KVPool | None = None
    max_num_seqs: int = attrs.field(default=256, validator=_positive)
    admission: str = attrs.field(default="reserve", validator=attrs.validators.in_(ADMISSIONS))
    prefill: str = attrs.field(default="separate", validator=attrs.validators.in_(PREFILL_MODES))
    max_num_batched_tokens: int | None = None
    name: str = ""

    @classmethod
    def for_deployment(cls, deployment: Any, *, instances: int = 1, utilization: Any = Fraction(9, 10),
                       kv_budget: Any = None, block_size: int = 16, exact: bool = True, overhead: Any = 0,
                       **options: Any) -> Pool:
        """A pool of ``instances`` copies of ``deployment``: its roofline cost model, its KV pool (one GPU's budget,
        usable x ``utilization`` - its weights, reserve 0, unless ``kv_budget`` [bytes] is given) and its per-GPU
        KV bytes per token; ``options`` as the fields of :class:`Pool`.

        Raises
        ------
        InvalidValueError
            A model with sliding-window or recurrent layers (their transfer is not modelled) or sparse
            attention (not modelled yet), a budget that leaves
            no KV, bad options.
        """
        from ..estimate import kv_budget_for
        from .cost import RooflineCostModel

        share = deployment.share
        if any(w is not None for w in getattr(share, "layer_windows", ()) or ()) or getattr(share, "is_hybrid", False):
            raise InvalidValueError("model", share.name, "disaggregated serving is modelled for full-attention "
                                    "models only (a sliding window's or a recurrent layer's transfer is not)")
        if getattr(share, "is_sparse_attention", False):
            raise InvalidValueError("model", share.name, "disaggregated serving with sparse attention: not modelled "
                                    "yet (the indexer keys' transfer and the decode pool's capped reads are not "
                                    "checked together; docs/conventions.md, \"Sparse attention\")")
        budget = kv_budget_for(deployment, utilization=utilization) if kv_budget is None else kv_budget
        if budget <= 0:
            raise InvalidValueError("kv_budget", float(budget), f"{deployment.where} leaves no KV budget")
        cost = RooflineCostModel.for_deployment(deployment, exact=exact, overhead=overhead)
        if deployment.gpus != deployment.tensor_parallel_size:
            raise InvalidValueError("deployment", deployment.where, "a disaggregated pool's instance is one "
                                    "tensor-parallel group here (pipeline stages are not modelled in pools)")
        return cls(cost, share.kv_bytes_per_token, instances=instances,
                   tensor_parallel_size=deployment.tensor_parallel_size,
                   kv_pool=KVPool.for_model(share, budget=budget, block_size=block_size), name=deployment.where,
                   **options)

    @property
    def total_gpus(self) -> int:
        """GPUs of the whole pool: instances x GPUs per instance."""
        return self.instances * self.tensor_parallel_size


def _reason(pool: KVPool | None, prompt: int, output: int) -> str | None:
    return None if pool is None else pool.never_fits_reason(prompt, output)


def serve_disaggregated(
    requests: Iterable[Request],
    prefill: Pool,
    decode: Pool,
    *,
    link: TransferLink,
    max_model_len: int | None = None,
    engine: str = "auto",
    router: str = "round-robin",
    stop_on_misses: dict[str, tuple[Any, int]] | None = None,
) -> SimResult:
    """Disaggregated prefill and decode: prefill in one pool, move the KV, decode in the other.

    Parameters
    ----------
    requests : iterable of Request, in arrival order (open loop; closed-loop clients are refused)
    prefill : Pool, the prefill instances (Np of them)
    decode : Pool, the decode instances (Nd of them)
    link : TransferLink, the link between the pools (:meth:`TransferLink.between` for the accelerators' NICs)
    max_model_len : int >= 1 or None, as :func:`~roofline.sim.serve_continuous`
    engine : {"auto", "event", "step"}, every instance's clock (as :func:`~roofline.sim.serve_continuous`)
    router : {"round-robin", "least-requests", "least-kv"}, default "round-robin"
        How each pool spreads its requests over its instances: :data:`roofline.sim.ROUTERS`, the table of
        :func:`~roofline.sim.serve_replicas` (docs/conventions.md, "Data-parallel replicas"), applied in each
        pool at each request's arrival there (the prefill pool: the workload's arrival; the decode pool: the end
        of its transfer). ``"round_robin"`` is read as ``"round-robin"`` (its former spelling here). With one
        instance in a pool every router gives the same run.
    stop_on_misses : dict or None, default None
        As :func:`~roofline.sim.serve_continuous` for its ``"ttft_s"`` limit, on the prefill pool
        (docs/conventions.md, "Stopping a run early"): a request refused before its prefill counts as a miss, and
        so does one whose prefill-pool first token is more than the limit after its arrival (its TTFT, the
        transfer's end, is later still). A ``"tpot_s"`` limit is checked and not watched (the run goes on).

    Returns
    -------
    SimResult with ``policy == "disaggregated"``, one record per request in the workload's order:
    ``admitted_s`` its prefill admission, ``first_token_s`` the end of its KV transfer (TTFT as the
    client sees it, the transfer included; a request of O = 1 ends at its prefill), ``finish_s`` and
    ``handed_back_s`` its last decode step's end, ``preemptions`` and ``prefill_tokens`` of both pools.
    The summary's percentiles are over every request; its steps, rows and busy time are summed over every
    instance; its peak KV, capacity and block size are the decode instances' (the largest peak); long-run
    useful share, slot occupancy and ITL percentiles are not reported for the whole (None).
    ``options["instances"]`` gives each instance's requests, steps, busy time, peak KV blocks and
    preemptions; ``options["engine"]`` "event" when every instance ran on the stretch clock.

    Raises
    ------
    InvalidValueError
        Bad pools, link, router or requests (closed-loop clients), a bad ``stop_on_misses``.
    RunStopped
        With ``stop_on_misses``: more than the allowed requests miss its TTFT limit.

    Notes
    -----
    docs/conventions.md, "Disaggregated prefill and decode". A request is refused, with its reason
    naming the pool, before it is prefilled when its prompt does not fit one prefill instance's KV
    pool or its lifetime KV (P + O - 1) one decode instance's; the prefill side frees its KV at the
    end of its prefill (the backpressure of a full decode pool on the prefill pool is not modelled);
    transfers start when their prefill ends and do not slow each other.

    Examples
    --------
    >>> from roofline.sim import Request, UnitCostModel
    >>> unit = Pool(UnitCostModel(), kv_bytes_per_token=1)
    >>> r = serve_disaggregated([Request(id=0, arrival_s=0, prompt_tokens=4, output_tokens=3)], unit, unit,
    ...                         link=TransferLink(bandwidth=2, latency=1))
    >>> x = r.requests[0]
    >>> x.first_token_s, x.handed_back_s  # prefill 1, transfer 4 / 2 + 1 = 3; two decode steps of 1
    (Fraction(4, 1), Fraction(6, 1))
    """
    _check_engine(engine)
    for field, pool in (("prefill", prefill), ("decode", decode)):
        if not isinstance(pool, Pool):
            raise InvalidValueError(field, pool, "expected a roofline.sim.disaggregated.Pool")
    if not isinstance(link, TransferLink):
        raise InvalidValueError("link", link, "expected a roofline.sim.disaggregated.TransferLink")
    router = _ALIASES.get(router, router) if isinstance(router, str) else router
    if not isinstance(router, str) or router not in ROUTERS:
        raise InvalidValueError("router", router, f"expected one of {', '.join(ROUTERS)}")
    if max_model_len is not None:
        check_count("max_model_len", max_model_len, minimum=1)
    if isinstance(requests, ClosedLoop):
        raise InvalidValueError("requests", requests, "serve_disaggregated takes an open-loop workload, not "
                                "closed-loop clients")
    reqs = check_requests(_listed(requests))
    n = len(reqs)
    reason: list[str | None] = [None] * n
    for i, r in enumerate(reqs):
        p, o = r.prompt_tokens, r.output_tokens
        if max_model_len is not None and p + o > max_model_len:
            reason[i] = f"prompt + output of {p + o} tokens ({p} + {o}) exceeds max_model_len={max_model_len}"
        elif (why := _reason(prefill.kv_pool, p, 1)) is not None:
            reason[i] = f"prefill pool: {why}"
        elif o >= 2 and (why := _reason(decode.kv_pool, p, o)) is not None:
            reason[i] = f"decode pool: {why}"

    stop = None
    watched = (_checked_stop(stop_on_misses) or {}).get("ttft_s")
    if watched is not None:  # the requests refused here have no first token: misses already
        limit, allowed = watched
        refused = sum(1 for why in reason if why is not None)
        if refused > allowed:
            raise RunStopped("ttft_s", limit, allowed, refused)
        stop = {"ttft_s": (limit, allowed - refused)}

    def pool_run(pool: Pool, batch: list[Request],
                 transferred: bool) -> tuple[tuple[SimResult, ...], Sequence[RequestResult]]:
        """The pool's instances as data-parallel replicas behind the router: each instance's result, and each
        request's in ``batch``'s order."""
        options: dict[str, Any] = dict(router=router, data_parallel_size=pool.instances, kv_pool=pool.kv_pool,
                                       max_num_seqs=pool.max_num_seqs, admission=pool.admission, engine=engine,
                                       gpus_per_replica=pool.tensor_parallel_size)
        if transferred:
            options["kv_transferred"] = True
        else:
            options.update(prefill=pool.prefill, max_num_batched_tokens=pool.max_num_batched_tokens,
                           stop_on_misses=stop)
        served = serve_replicas(batch, pool.cost_model, **options)
        return served.replicas, served.whole.requests

    # the prefill pool: each live request as its prompt and one output token, routed at its arrival
    live = [i for i in range(n) if reason[i] is None]
    first_runs, firsts = pool_run(prefill, [Request(id=reqs[i].id, arrival_s=reqs[i].arrival_s,
                                                    prompt_tokens=reqs[i].prompt_tokens, output_tokens=1)
                                            for i in live], False)
    pre: dict[int, RequestResult] = dict(zip(live, firsts, strict=True))
    # the transfer: from the end of the prefill, over the link
    ready: dict[int, Any] = {}
    for i, x in pre.items():
        if x.rejected_reason is not None:
            reason[i] = f"prefill pool: {x.rejected_reason}"
        elif reqs[i].output_tokens >= 2:
            moved = kv_transfer_bytes(prompt_tokens=reqs[i].prompt_tokens,
                                      decode_kv_bytes_per_token=decode.kv_bytes_per_token,
                                      prefill_tensor_parallel_size=prefill.tensor_parallel_size,
                                      decode_tensor_parallel_size=decode.tensor_parallel_size)
            moved = Fraction(moved) if isinstance(moved, int) else moved  # exact seconds from int bytes
            ready[i] = x.finish_s + kv_transfer_time(transfer_bytes=moved, transfer_bandwidth=link.bandwidth,
                                                     transfer_latency=link.latency)
    # the decode pool: in the order the transfers end (ties: the workload's order), routed as each lands
    order = sorted(ready, key=lambda i: (ready[i], i))
    second_runs, seconds = pool_run(decode, [Request(id=reqs[i].id, arrival_s=ready[i],
                                                     prompt_tokens=reqs[i].prompt_tokens,
                                                     output_tokens=reqs[i].output_tokens) for i in order], True)
    dec: dict[int, RequestResult] = dict(zip(order, seconds, strict=True))
    return _combine(reqs, reason, pre, ready, dec, first_runs, second_runs, prefill, decode, link, router)


def _combine(reqs: Sequence[Request], reason: list[str | None], pre: dict[int, RequestResult], ready: dict[int, Any],
             dec: dict[int, RequestResult], first_runs: Sequence[SimResult], second_runs: Sequence[SimResult],
             prefill: Pool,
             decode: Pool, link: TransferLink, router: str) -> SimResult:
    """One result from the instances' results (docs/conventions.md, "Disaggregated prefill and decode")."""
    zero = prefill.cost_model.to_time(0)
    results = []
    for i, r in enumerate(reqs):
        a, d = pre.get(i), dec.get(i)
        if d is not None and d.rejected_reason is not None:
            reason[i] = f"decode pool: {d.rejected_reason}"
        arrival = a.arrival_s if a is not None else prefill.cost_model.to_time(r.arrival_s)
        if reason[i] is not None or a is None:
            results.append(RequestResult(r, arrival, a.admitted_s if a else None, None, None, None,
                                         a.preemptions if a else 0, a.prefill_tokens if a else 0, 0, reason[i]))
        elif d is None:  # O = 1: done at its prefill
            results.append(RequestResult(r, arrival, a.admitted_s, a.first_token_s, a.finish_s, a.handed_back_s,
                                         a.preemptions, a.prefill_tokens, a.generated_tokens, None))
        else:
            results.append(RequestResult(r, arrival, a.admitted_s, ready[i], d.finish_s, d.handed_back_s,
                                         a.preemptions + d.preemptions, a.prefill_tokens + d.prefill_tokens,
                                         d.generated_tokens, None))
    runs = [*first_runs, *second_runs]
    decode_summaries = [x.summary for x in second_runs] or [x.summary for x in first_runs]
    summary = summarize(
        "disaggregated", results, steps=sum(x.summary.steps for x in runs),
        prefill_steps=sum(x.summary.prefill_steps for x in runs), busy=sum((x.summary.busy_s for x in runs), zero),
        useful_rows=0, rows=0, peak_kv_tokens=max(s.peak_kv_tokens for s in decode_summaries),
        peak_kv_blocks=max(s.peak_kv_blocks for s in decode_summaries),
        kv_capacity_blocks=decode.kv_pool.capacity_blocks if decode.kv_pool is not None else None,
        block_size=decode.kv_pool.block_size if decode.kv_pool is not None else 1,
        mixed_steps=sum(x.summary.mixed_steps for x in runs), itl=None,
        peak_running=max(x.summary.peak_running for x in runs))
    summary = attrs.evolve(summary, slot_occupancy=None, long_run_useful_share=None)
    engines = {x.options["engine"] for x in runs}
    options: dict[str, Any] = {
        "prefill_instances": prefill.instances, "decode_instances": decode.instances,
        "prefill_tensor_parallel_size": prefill.tensor_parallel_size,
        "decode_tensor_parallel_size": decode.tensor_parallel_size,
        "gpus": prefill.total_gpus + decode.total_gpus, "router": router, "link": link.to_dict(),
        "prefill": prefill.prefill, "admission": {"prefill": prefill.admission, "decode": decode.admission},
        "max_num_seqs": {"prefill": prefill.max_num_seqs, "decode": decode.max_num_seqs},
        "engine": "event" if engines == {"event"} else "step",
        "instances": [_instance(pool, k, x) for pool, group in (("prefill", first_runs), ("decode", second_runs))
                      for k, x in enumerate(group)],
    }
    if options["engine"] == "step":
        options["engine_reason"] = next(x.options.get("engine_reason") for x in runs if x.options["engine"] == "step")
    return SimResult("disaggregated", options, tuple(results), None, summary)


def _instance(pool: str, index: int, result: SimResult) -> dict[str, Any]:
    s = result.summary
    return {"pool": pool, "index": index, "requests": s.requests, "completed": s.completed, "steps": s.steps,
            "busy_s": float(s.busy_s), "peak_kv_blocks": s.peak_kv_blocks, "kv_capacity_blocks": s.kv_capacity_blocks,
            "preemptions": s.preemptions, "engine": result.options["engine"]}
