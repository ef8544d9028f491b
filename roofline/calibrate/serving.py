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
            ("tpot_ms", "tpot", Fraction(1, 1000)), ("output_tokens_per_s", "throughput", 1),
            ("output_tokens_per_s_per_gpu", "throughput_per_gpu", 1))
_KINDS = ("closed_loop", "burst", "poisson")


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
        A burst of listed requests: every request sent at t = 0 with these lengths, in order (``vllm bench
        serve --request-rate inf``); empty otherwise.
    kind : {"closed_loop", "burst", "poisson"}
        A closed loop of ``concurrency`` clients; a burst of ``concurrency`` requests at t = 0 (``lengths``,
        or all of ``input_len`` / ``output_len``); ``concurrency`` requests arriving as a Poisson process at
        ``rate`` [requests/s] (seeded by ``seed``) with the fixed lengths.
    statistics : dict
        Metric -> the statistic the source reports for it where it differs per metric (LMDeploy: mean TTFT,
        median per-token latency); the others follow ``statistic``.
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
    kind: str = "closed_loop"
    rate: Fraction | None = None
    seed: int = 0
    statistics: dict[str, str] = attrs.field(factory=dict)

    @property
    def engine(self) -> str:
        """The engine of :attr:`profile` (``"vllm"`` for ``"vllm-v0"``; docs/conventions.md, "Engine profiles")."""
        from ..profiles import engine_of

        return engine_of(self.profile)

    def statistic_of(self, metric: str) -> str:
        """``"median"`` or ``"mean"``: the statistic the source reports for ``metric`` (``statistics``, else
        ``statistic``: median when it names the median, else the mean)."""
        text = self.statistics.get(metric, self.statistic)
        return "median" if "median" in text else "mean"


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
        ``closed_loop``, ``burst`` or ``poisson`` (field ``workload``), of a split other than validation
        (field ``split``), or measuring a metric the comparison does not know (field ``measured``).
    UnknownPresetError
        A point names a model or accelerator preset the package lacks.
    """
    from .published import load_published

    calibration = {m.id for m in load_published() if m.split == "calibration"}
    known = {key for key, _, _ in _METRICS}
    out = []
    for p in _document()["points"]:
        w = dict(p["workload"])
        if w["kind"] not in _KINDS:
            raise InvalidValueError("workload", w["kind"], f"point {p['id']!r}: expected one of {', '.join(_KINDS)}")
        lengths: tuple[tuple[int, int], ...] = ()
        if w["kind"] == "burst" and "input_lens" in w:
            lengths = tuple(zip((int(x) for x in w["input_lens"]), (int(x) for x in w["output_lens"]), strict=True))
            w.update(concurrency=len(lengths), input_len=sum(a for a, _ in lengths) // len(lengths),
                     output_len=sum(b for _, b in lengths) // len(lengths))
        elif w["kind"] == "burst":
            w["concurrency"] = int(w["requests"])
        elif w["kind"] == "poisson":
            w["concurrency"] = int(w["num_prompts"])
        if p["split"] != "validation":
            raise InvalidValueError("split", p["split"], f"point {p['id']!r}: serving points are never fitted on")
        unknown = sorted(set(p["measured"]) - known)
        if unknown:
            raise InvalidValueError("measured", unknown, f"point {p['id']!r}: expected metrics among {sorted(known)}")
        model = get_model(p["model"]).with_dtypes(weight_dtype=p["weight_dtype"], kv_dtype=p["kv_dtype"])
        out.append(ServingPoint(
            id=p["id"], profile=p["profile"], model=model, accelerator=get_accelerator(p["accelerator"]),
            tensor_parallel=int(p["tensor_parallel"]), concurrency=int(w["concurrency"]),
            input_len=int(w["input_len"]), output_len=int(w["output_len"]), measured=dict(p["measured"]),
            statistic=p["statistic"], split=p["split"], source=dict(p["source"]), step_row=p.get("step_row"),
            held_out=p.get("step_row") not in calibration, lengths=lengths, kind=w["kind"],
            rate=None if w.get("rate") is None else Fraction(str(w["rate"])), seed=int(w.get("seed", 0)),
            statistics=dict(p.get("statistics", {}))))
    return out


@attrs.frozen
class ServingRow:
    """A serving point with its simulation: ``simulated`` and ``errors`` by metric (as ``measured``), the
    scheduler options run (``options``) and the number of requests simulated; ``refused``: why the point is
    not priced (its profile has no constants), with ``simulated`` and ``errors`` empty, else None."""

    point: ServingPoint
    simulated: dict[str, float]
    errors: dict[str, float]
    options: dict[str, Any]
    requests: int
    refused: str | None = None


def simulate_point(point: ServingPoint, *, requests_per_client: int = REQUESTS_PER_CLIENT) -> ServingRow:
    """Run ``point``'s workload through the scheduler under its profile's estimate and compare.

    The deployment is the point's model on its accelerator at its T with the profile's estimate
    (:func:`roofline.profiles.resolve_engine_profile`); the KV pool is the upper-bound budget
    (:func:`roofline.estimate.kv_budget_for`, utilization 0.9, reserve 0). The profile's policy picks the
    scheduler: ``static`` runs :func:`roofline.sim.serve_static` with the burst as one batch (TensorRT-LLM's
    gptSessionBenchmark), ``serial`` :func:`roofline.sim.serve_serial` (gpt-fast), anything else
    :func:`roofline.sim.serve_continuous` with the profile's defaults (:class:`roofline.profiles.SchedulerDefaults`)
    where stated, else the scheduler's own. Workload: a closed loop of ``concurrency`` clients, each sending
    ``requests_per_client`` requests of (input_len, output_len) with no think time; a burst at t = 0; or a
    seeded Poisson stream at ``rate`` (:func:`roofline.sim.synthetic_workload`).

    Returns
    -------
    ServingRow
        TTFT and ITL/TPOT as the statistic the point reports for each (mean, or the median interpolated as
        ``numpy.median``) [ms], output tokens per second over the run (per GPU: divided by T). A profile
        without constants (SGLang) gives a row with ``refused`` set: refused by name, never priced as another.

    Raises
    ------
    InvalidValueError
        A requests_per_client below 1, a T the model refuses.
    """
    from ..deployment import Deployment
    from ..errors import RooflineError
    from ..estimate import kv_budget_for
    from ..profiles import resolve_engine_profile
    from ..sim import ClosedLoop, KVPool, Request, RooflineCostModel, serve_continuous, serve_serial, serve_static
    from ..sim.workloads import synthetic_workload

    if isinstance(requests_per_client, bool) or not isinstance(requests_per_client, int) or requests_per_client < 1:
        raise InvalidValueError("requests_per_client", requests_per_client, "expected an integer >= 1")
    try:
        profile, _ = resolve_engine_profile(point.profile)
    except RooflineError as e:
        return ServingRow(point=point, simulated={}, errors={}, options={}, requests=0, refused=str(e))
    d = Deployment(point.model, point.accelerator, point.tensor_parallel, estimate=profile)
    cost = RooflineCostModel.for_deployment(d)
    pool = KVPool.for_model(d, budget=kv_budget_for(d))
    options: dict[str, Any] = {}
    scheduler = getattr(profile, "scheduler", None)
    opts = {} if scheduler is None else scheduler.options(point.accelerator)
    for name in ("max_num_seqs", "admission", "max_num_batched_tokens"):
        if name in opts:
            options[name] = opts[name]
    if opts.get("prefill") == "chunked":
        options["prefill"] = "chunked"
    elif "max_num_batched_tokens" in options:
        options.pop("max_num_batched_tokens")
    workload: Any
    if point.kind == "closed_loop":
        n = point.concurrency * requests_per_client
        workload = ClosedLoop(clients=point.concurrency, lengths=[(point.input_len, point.output_len)] * n)
    elif point.kind == "poisson":
        n = point.concurrency
        workload = synthetic_workload(n, arrival="poisson", rate=point.rate, input_len=point.input_len,
                                      output_len=point.output_len, seed=point.seed).requests
    else:
        lengths = point.lengths or ((point.input_len, point.output_len),) * point.concurrency
        n = len(lengths)
        workload = [Request(id=i, arrival_s=0, prompt_tokens=a, output_tokens=b) for i, (a, b) in enumerate(lengths)]
    policy = opts.get("policy")
    if policy == "static":
        result = serve_static(workload, cost, kv_pool=pool, batch_size=n)
    elif policy == "serial":
        result = serve_serial(workload if point.kind != "closed_loop" else _serial(point, n), cost, kv_pool=pool)
    else:
        result = serve_continuous(workload, cost, kv_pool=pool, **options)
    s = result.summary

    def stat(key: str, p: Any) -> float | None:
        # the summary's p50 interpolates between the two middle values, as vllm bench serve's np.median does,
        # over the requests handed back (docs/conventions.md, "Latency percentiles")
        if p is None:
            return None
        return float(p.p50 if point.statistic_of(key) == "median" else p.mean)

    tput = None if s.output_tokens_per_s is None else float(s.output_tokens_per_s)
    values = {"ttft_ms": stat("ttft_ms", s.ttft), "tpot_ms": stat("tpot_ms", s.tpot), "itl_ms": stat("itl_ms", s.itl),
              "output_tokens_per_s": tput,
              "output_tokens_per_s_per_gpu": None if tput is None else tput / point.tensor_parallel}
    simulated, errors = {}, {}
    for key, _, unit in _METRICS:
        value = values[key]
        if key not in point.measured or value is None:
            continue
        v = value / float(unit)
        simulated[key] = v
        errors[key] = (v - point.measured[key]) / point.measured[key]
    return ServingRow(point=point, simulated=simulated, errors=errors, options=dict(result.options), requests=n)


def _serial(point: ServingPoint, n: int) -> list[Any]:
    """A one-client closed loop served one request at a time: the requests back to back, all queued at t = 0
    (serve_serial takes requests, not a ClosedLoop; with one client and no think time the two are the same run)."""
    from ..sim import Request

    if point.concurrency != 1:
        raise InvalidValueError("concurrency", point.concurrency,
                                f"point {point.id!r}: a serial engine serves one client; expected 1")
    return [Request(id=i, arrival_s=0, prompt_tokens=point.input_len, output_tokens=point.output_len)
            for i in range(n)]


def validate_serving(points: Sequence[ServingPoint] | None = None, **kw: Any) -> list[ServingRow]:
    """:func:`simulate_point` for each point (default: :func:`load_serving`); keywords pass through."""
    return [simulate_point(p, **kw) for p in (load_serving() if points is None else points)]


def _tpot_error(row: ServingRow) -> float | None:
    """``|error|`` of TPOT, else of ITL (what the source publishes), else None."""
    for key in ("tpot_ms", "itl_ms"):
        if key in row.errors:
            return abs(row.errors[key])
    return None


def _medians(rows: Sequence[ServingRow]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, _, _ in _METRICS:
        errs = [abs(r.errors[key]) for r in rows if key in r.errors]
        out[key] = {"rows": len(errs), "median_abs_error": statistics.median(errs) if errs else None}
    tpot = [e for e in map(_tpot_error, rows) if e is not None]
    out["tpot_or_itl"] = {"rows": len(tpot), "median_abs_error": statistics.median(tpot) if tpot else None}
    return out


def serving_summary(rows: Sequence[ServingRow]) -> dict[str, Any]:
    """The serving-level medians.

    Returns
    -------
    dict
        ``points``: the held-out priced points (:attr:`ServingPoint.held_out`, ``refused`` None); per metric
        key (``ttft_ms`` ...): rows and median ``|error|`` [1] over them; ``tpot_or_itl``: the same for TPOT,
        ITL where only that is published; ``by_engine``: engine -> those medians and ``points``;
        ``tpot_target``: the TPOT (or ITL) median against :data:`SERVING_TARGET` (``met`` None without rows);
        ``recorded``: every point in the file, ``recorded_engines`` and ``recorded_accelerators`` among them;
        ``engines`` and ``accelerators`` of the priced held-out points; ``not_held_out``: the ids left out
        because their step row fitted the constants; ``refused``: id -> why it is not priced.
    """
    left = [r.point.id for r in rows if not r.point.held_out]
    refused = {r.point.id: r.refused for r in rows if r.refused is not None}
    priced = [r for r in rows if r.point.held_out and r.refused is None]
    out: dict[str, Any] = {"points": len(priced), "not_held_out": left, "refused": refused,
                           "recorded": len(rows),
                           "recorded_engines": sorted({r.point.engine for r in rows}),
                           "recorded_accelerators": sorted({r.point.accelerator.key for r in rows}),
                           "engines": sorted({r.point.engine for r in priced}),
                           "accelerators": sorted({r.point.accelerator.key for r in priced})}
    out.update(_medians(priced))
    out["by_engine"] = {e: {"points": sum(r.point.engine == e for r in priced),
                            **_medians([r for r in priced if r.point.engine == e])} for e in out["engines"]}
    value = out["tpot_or_itl"]["median_abs_error"]
    out["tpot_target"] = {"target": f"median |error| of TPOT (ITL where published) <= {SERVING_TARGET:.0%}",
                          "value": value, "rows": out["tpot_or_itl"]["rows"],
                          "met": None if value is None else value <= SERVING_TARGET}
    return out
