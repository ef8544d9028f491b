"""The exact step-level reference scheduler and its cost models.

Build a workload (:class:`Request`, or :func:`load_trace` for an Azure, CSV or JSONL
trace, plain or gzip; :func:`shipped_trace` names the two Azure traces shipped with the
package), pick a cost model (:class:`UnitCostModel`: every step takes 1;
:class:`RooflineCostModel`: the roofline step time of ``roofline.formulas``, exact
Fractions for the presets) and a KV pool (:class:`KVPool`), and run a policy:

* :func:`serve_serial`: one request at a time, first come first served;
* :func:`serve_static`: static batching (fixed batches, padded, run to the longest);
* :func:`serve_continuous`: continuous (iteration-level) batching, KV admission by
  reserving the lifetime or on demand with preemption by recompute; admitted prompts
  prefill in a step of their own (``prefill="separate"``) or in chunks beside the running
  decodes under a per-step token budget (``prefill="chunked"``, mixed steps);
* :func:`serve_disaggregated`: disaggregated prefill and decode, a prefill :class:`Pool` and a
  decode pool of instances, the KV moved between them over a :class:`TransferLink`.

Continuous batching also runs speculative decoding (:class:`Speculation`, ``serve_continuous(speculative=...)``;
:mod:`roofline.sim.speculative`).

Workloads (:mod:`roofline.sim.workloads`): traces, seeded generators
(:func:`synthetic_workload`, :func:`anyscale_workload`) and closed-loop clients
(:class:`ClosedLoop`, served by :func:`serve_continuous`).

Each policy is written once (:mod:`roofline.sim.batches`: serial and static;
:mod:`roofline.sim.continuous`: continuous batching) over one run state
(:mod:`roofline.sim.run`) and runs on one of two clocks (:mod:`roofline.sim.clock`), which
give the same results exactly (``engine=`` on each policy; ``roofline simulate --engine``):
``"event"``, the stretch clock, prices each decode stretch between two events in closed form
on an integer tick clock (:mod:`roofline.sim.stretch`; its cost grows with requests, not
tokens) from the cost model's own stretch terms
(:class:`~roofline.sim.cost.StretchTerms`: dense, mixture-of-experts, tensor-parallel,
sliding-window and estimate models, exact); ``"step"`` runs one step at a time (the
reference, and the engine for float mode and for continuous batching on sliding windows).
``"auto"``, the default, takes the event engine where it can; ``result.options["engine"]``
says which ran, and ``options["engine_reason"]`` why the step engine did.

Each returns a :class:`SimResult`: per-request :class:`RequestResult`, per-step (with ``record_steps=True``)
:class:`StepRecord` (``result.steps``, a :class:`StepTable`) and a :class:`Summary`.

Conventions: docs/conventions.md ("One step", "Latency metrics",
"Memory", "Serving policies") are
tests in ``tests/test_sim_cases.py``.

Examples
--------
>>> from roofline import get_model, get_accelerator
>>> from roofline.sim import Request, RooflineCostModel, serve_static
>>> cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
>>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=10, output_tokens=o)
...         for i, o in enumerate([100, 200, 300, 1000])]
>>> result = serve_static(reqs, cost, batch_size=4)
>>> r100 = result.requests[0]
>>> round(float(r100.finish_s), 2), round(float(r100.handed_back_s), 2), float(result.summary.long_run_useful_share)
(0.48, 4.87, 0.4)
"""

from .cost import CostModel, RooflineCostModel, UnitCostModel
from .disaggregated import Pool, TransferLink, round_robin, serve_disaggregated
from .kv import KVPool, LayerWindows
from .policies import (
    ADMISSIONS,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ENGINES,
    POLICIES,
    PREFILL_MODES,
    SimulationError,
    serve_continuous,
    serve_serial,
    serve_static,
)
from .replicas import ROUTERS, ReplicaLoad, ReplicaResult, serve_replicas
from .requests import (
    SHIPPED_TRACES,
    TRACE_FORMATS,
    Request,
    check_requests,
    load_trace,
    parse_trace,
    scale_rate,
    shipped_trace,
)
from .results import Goodput, Percentiles, RequestResult, SimResult, StepRecord, StepTable, Summary, percentile
from .speculative import ACCEPTANCE_MODES, Speculation
from .stretch import StretchTable, TickClock, TickCosts
from .workloads import (
    ANYSCALE_CAPS,
    ARRIVAL_PROCESSES,
    LENGTH_DISTRIBUTIONS,
    ClosedLoop,
    Workload,
    anyscale_workload,
    arrival_times,
    lengths,
    synthetic_workload,
)

__all__ = [
    "Request",
    "load_trace",
    "parse_trace",
    "check_requests",
    "scale_rate",
    "TRACE_FORMATS",
    "shipped_trace",
    "SHIPPED_TRACES",
    "CostModel",
    "UnitCostModel",
    "RooflineCostModel",
    "KVPool",
    "LayerWindows",
    "serve_serial",
    "serve_static",
    "serve_continuous",
    "serve_replicas",
    "ROUTERS",
    "ReplicaResult",
    "ReplicaLoad",
    "serve_disaggregated",
    "Pool",
    "TransferLink",
    "round_robin",
    "POLICIES",
    "ADMISSIONS",
    "PREFILL_MODES",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "ENGINES",
    "SimulationError",
    "Speculation",
    "ACCEPTANCE_MODES",
    "StretchTable",
    "TickClock",
    "TickCosts",
    "ClosedLoop",
    "Workload",
    "synthetic_workload",
    "anyscale_workload",
    "arrival_times",
    "lengths",
    "ARRIVAL_PROCESSES",
    "LENGTH_DISTRIBUTIONS",
    "ANYSCALE_CAPS",
    "Goodput",
    "SimResult",
    "RequestResult",
    "StepRecord",
    "StepTable",
    "Summary",
    "Percentiles",
    "percentile",
]
