"""Validation at the serving level: published runs under load, each simulated as it was run.

A **serving point** (``roofline/data/measurements/serving.json``) is one published run of an
engine under load: its model, accelerator and tensor-parallel size, its workload (a closed loop
of N clients at fixed prompt and output lengths, as AIPerf/GenAI-Perf and ``vllm bench serve
--max-concurrency`` run it) and what was measured (TTFT, ITL or TPOT, output tokens per second),
each quoted from its source. :func:`simulate_point` runs the package's scheduler
(:func:`roofline.sim.serve_continuous`) on the point's workload with the estimate of the point's
engine profile (its scheduler defaults where the profile states them, else the scheduler's own,
named so) and compares each metric: error = (simulated - measured) / measured.

No constant is fitted on a serving point: every point is in the validation subset (split fixed
before any fit); the estimate's constants come from the step-level calibration rows only
(:mod:`roofline.calibrate.fit`). The statistic compared is the one the source reports (the mean
for AIPerf's default table), taken from the simulated requests the same way.

Conventions: docs/conventions.md, "Validation at the serving level".
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import attrs

from .._io import parse_json
from ..errors import InvalidValueError
from ..hardware import Accelerator, get_accelerator
from ..models import ModelConfig, get_model

__all__ = ["ServingPoint", "ServingRow", "SERVING_FILE", "SERVING_TARGET", "load_serving", "simulate_point",
           "validate_serving", "serving_summary"]

#: The serving points' file, under roofline/data/measurements.
SERVING_FILE = "serving.json"
_KIND = "roofline-serving-points"
#: The serving-level target (issue 24): median ``|error|`` of TPOT (ITL where that is what is published) <= 15 %.
SERVING_TARGET = 0.15
#: Requests each closed-loop client sends in the simulation (the ramp up and down are then a small share).
REQUESTS_PER_CLIENT = 4
_METRICS = (("ttft_ms", "ttft", Fraction(1, 1000)), ("itl_ms", "itl", Fraction(1, 1000)),
            ("tpot_ms", "tpot", Fraction(1, 1000)), ("output_tokens_per_s", "throughput", 1))


@attrs.frozen
class ServingPoint:
    """One published run under load (see the module docstring).

    Attributes
    ----------
    id : str
    profile : str
        The engine profile or version key whose estimate prices the steps (``"nim"``, ``"vllm-v1"``).
    model : ModelConfig
    accelerator : Accelerator
    tensor_parallel : int >= 1
    concurrency : int >= 1 [clients], input_len, output_len : int >= 1 [tokens]
        A closed loop's clients and fixed lengths; for a burst (``lengths`` given) the number of requests
        and their mean lengths, for the table.
    lengths : tuple of (prompt, output) or ()
        A burst: every request sent at t = 0 with these lengths, in order (``vllm bench serve
        --request-rate inf``); empty for a closed loop.
    measured : dict
        Metric -> value as published: ``ttft_ms``, ``itl_ms`` or ``tpot_ms`` [ms], ``output_tokens_per_s``.
    statistic : str
        Which statistic the source reports (mean, median).
    split : str
        ``"validation"`` (no serving point is fitted on).
    source : dict
        citation, url, date, conditions and quote (list of lines copied from the source).
    step_row : str or None
        The published step-level row of the same run, if any; when that row is in the calibration
        subset its ITL fitted the profile's constants, so the point is not held out (``held_out``
        False) and stays out of the serving medians and the target.
    held_out : bool
    """

    id: str
    profile: str
    model: ModelConfig
    accelerator: Accelerator
    tensor_parallel: int
    concurrency: int
    input_len: int
    output_len: int
    measured: dict[str, float]
    statistic: str
    split: str
    source: dict[str, Any]
    step_row: str | None = None
    held_out: bool = True
    lengths: tuple[tuple[int, int], ...] = ()


@functools.lru_cache(maxsize=1)
def _document() -> dict[str, Any]:
    from .schema import measurements_dir

    doc = parse_json((measurements_dir() / SERVING_FILE).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != _KIND or doc.get("schema") != 1:
        raise InvalidValueError("serving", SERVING_FILE, f"is not a schema-1 {_KIND} file")
    return doc


def load_serving() -> list[ServingPoint]:
    """The shipped serving points, in the file's order.

    Raises
    ------
    InvalidValueError
        The file is not a schema-1 serving-points file; a point of another workload kind than
        ``closed_loop``, or of a split other than validation (field ``split``).
    UnknownPresetError
        A point names a model or accelerator preset the package lacks.
    """
    from .published import load_published

    calibration = {m.id for m in load_published() if m.split == "calibration"}
    out = []
    for p in _document()["points"]:
        w = p["workload"]
        if w["kind"] not in ("closed_loop", "burst"):
            raise InvalidValueError("workload", w["kind"], f"point {p['id']!r}: expected closed_loop or burst")
        lengths: tuple[tuple[int, int], ...] = ()
        if w["kind"] == "burst":
            lengths = tuple(zip((int(x) for x in w["input_lens"]), (int(x) for x in w["output_lens"]), strict=True))
            w = dict(w, concurrency=len(lengths), input_len=sum(a for a, _ in lengths) // len(lengths),
                     output_len=sum(b for _, b in lengths) // len(lengths))
        if p["split"] != "validation":
            raise InvalidValueError("split", p["split"], f"point {p['id']!r}: serving points are never fitted on")
        model = get_model(p["model"]).with_dtypes(weight_dtype=p["weight_dtype"], kv_dtype=p["kv_dtype"])
        out.append(ServingPoint(
            id=p["id"], profile=p["profile"], model=model, accelerator=get_accelerator(p["accelerator"]),
            tensor_parallel=int(p["tensor_parallel"]), concurrency=int(w["concurrency"]),
            input_len=int(w["input_len"]), output_len=int(w["output_len"]), measured=dict(p["measured"]),
            statistic=p["statistic"], split=p["split"], source=dict(p["source"]), step_row=p.get("step_row"),
            held_out=p.get("step_row") not in calibration, lengths=lengths))
    return out


@attrs.frozen
class ServingRow:
    """A serving point with its simulation: ``simulated`` and ``errors`` by metric (as ``measured``), the
    scheduler options run (``options``) and the number of requests simulated."""

    point: ServingPoint
    simulated: dict[str, float]
    errors: dict[str, float]
    options: dict[str, Any]
    requests: int


def simulate_point(point: ServingPoint, *, requests_per_client: int = REQUESTS_PER_CLIENT) -> ServingRow:
    """Run ``point``'s workload through the scheduler under its profile's estimate and compare.

    The deployment is the point's model on its accelerator at its T with the profile's estimate
    (:func:`roofline.profiles.resolve_engine_profile`); the KV pool is the upper-bound budget
    (:func:`roofline.estimate.kv_budget_for`, utilization 0.9, reserve 0); the scheduler runs the
    profile's defaults (:class:`roofline.profiles.SchedulerDefaults`) where stated, else
    :func:`roofline.sim.serve_continuous`'s. Clients: ``concurrency``, each sending
    ``requests_per_client`` requests of (input_len, output_len), no think time.

    Returns
    -------
    ServingRow
        TTFT and ITL/TPOT as the statistic the point reports (mean or median of the simulated
        requests) [ms], output tokens per second over the run.

    Raises
    ------
    InvalidValueError
        A requests_per_client below 1, a profile without constants, a T the model refuses.
    """
    from ..deployment import Deployment
    from ..estimate import kv_budget_for
    from ..profiles import resolve_engine_profile
    from ..sim import ClosedLoop, KVPool, Request, RooflineCostModel, serve_continuous

    if isinstance(requests_per_client, bool) or not isinstance(requests_per_client, int) or requests_per_client < 1:
        raise InvalidValueError("requests_per_client", requests_per_client, "expected an integer >= 1")
    profile, _ = resolve_engine_profile(point.profile)
    d = Deployment(point.model, point.accelerator, point.tensor_parallel, estimate=profile)
    cost = RooflineCostModel.for_deployment(d)
    pool = KVPool.for_model(d, budget=kv_budget_for(d))
    options: dict[str, Any] = {}
    scheduler = getattr(profile, "scheduler", None)
    if scheduler is not None:
        opts = scheduler.options(point.accelerator)
        for name in ("max_num_seqs", "admission", "max_num_batched_tokens"):
            if name in opts:
                options[name] = opts[name]
        if opts.get("prefill") == "chunked":
            options["prefill"] = "chunked"
        elif "max_num_batched_tokens" in options:
            options.pop("max_num_batched_tokens")
    if point.lengths:
        workload: Any = [Request(id=i, arrival_s=0, prompt_tokens=a, output_tokens=b)
                         for i, (a, b) in enumerate(point.lengths)]
        n = len(point.lengths)
    else:
        n = point.concurrency * requests_per_client
        workload = ClosedLoop(clients=point.concurrency, lengths=[(point.input_len, point.output_len)] * n)
    result = serve_continuous(workload, cost, kv_pool=pool, **options)
    s = result.summary
    median = "median" in point.statistic

    def stat(p: Any) -> float | None:
        # the summary's p50 interpolates between the two middle values, as vllm bench serve's np.median does,
        # over the requests handed back (docs/conventions.md, "Latency percentiles")
        return None if p is None else float(p.p50 if median else p.mean)

    values = {"ttft": stat(s.ttft), "tpot": stat(s.tpot), "itl": stat(s.itl),
              "throughput": None if s.output_tokens_per_s is None else float(s.output_tokens_per_s)}
    simulated, errors = {}, {}
    for key, metric, unit in _METRICS:
        value = values[metric]
        if key not in point.measured or value is None:
            continue
        v = value / float(unit)
        simulated[key] = v
        errors[key] = (v - point.measured[key]) / point.measured[key]
    return ServingRow(point=point, simulated=simulated, errors=errors, options=dict(result.options), requests=n)


def validate_serving(points: Sequence[ServingPoint] | None = None, **kw: Any) -> list[ServingRow]:
    """:func:`simulate_point` for each point (default: :func:`load_serving`); keywords pass through."""
    return [simulate_point(p, **kw) for p in (load_serving() if points is None else points)]


def serving_summary(rows: Sequence[ServingRow]) -> dict[str, Any]:
    """Per metric: rows and median ``|error|`` [1] over the held-out points (:attr:`ServingPoint.held_out`);
    ``tpot_target``: the TPOT (or ITL) median against :data:`SERVING_TARGET` (``met`` None without rows);
    ``engines`` and ``accelerators`` counted; ``not_held_out``: the ids left out and why."""
    left = [r.point.id for r in rows if not r.point.held_out]
    rows = [r for r in rows if r.point.held_out]
    out: dict[str, Any] = {"points": len(rows), "not_held_out": left,
                           "engines": sorted({r.point.profile for r in rows}),
                           "accelerators": sorted({r.point.accelerator.key for r in rows})}
    for key, _, _ in _METRICS:
        errs = [abs(r.errors[key]) for r in rows if key in r.errors]
        out[key] = {"rows": len(errs), "median_abs_error": statistics.median(errs) if errs else None}
    tpot = [abs(r.errors["tpot_ms"] if "tpot_ms" in r.errors else r.errors["itl_ms"]) for r in rows
            if "tpot_ms" in r.errors or "itl_ms" in r.errors]
    value = statistics.median(tpot) if tpot else None
    out["tpot_target"] = {"target": f"median |error| of TPOT (ITL where published) <= {SERVING_TARGET:.0%}",
                          "value": value, "rows": len(tpot), "met": None if value is None else value <= SERVING_TARGET}
    return out
