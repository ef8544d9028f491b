"""Predicted against measured decode step times: the model checked on real measurements.

Every row is one measured decode step (or per-token time) with its step composition
(batch B and context sum S, inputs stated with the data), the model, the accelerator
and its source. The prediction is :func:`roofline.formulas.step_time`,
max((W + k S) / bandwidth, (B F + a S) / peak) with overhead 0, computed twice:

* with the **spec** constants: the accelerator preset's datasheet bandwidth and
  dense BF16 peak (none for a device without a preset, such as a CPU);
* with the **measured** constants: ``Accelerator.measured()`` for a published point
  (achieved values published for that part, each with its Source), or the
  bandwidth and matmul peak of the calibration file itself.

These two are the **bound** (docs/conventions.md, "Bound and estimate"): their constants
are never fitted. Beside them, a published row of an engine profile gets the **estimate**
of that profile (:mod:`roofline.calibrate.fit`): the same bytes and FLOPs with constants
eta_bw, eta_mm, t_step, t_layer, t_seq fitted on the profile's calibration rows only, never on a
row of the validation subset. The relative error of a row is (predicted - measured) /
measured; the summaries are the median and maximum of its absolute value, per subset
(calibration, validation) of the file's fixed split.

What the model leaves out (so predictions fall below measurements): see
:data:`LEFT_OUT`, printed with every table.

Data: the published points (:mod:`roofline.calibrate.published`) and the calibration
files (``roofline calibrate``; :mod:`roofline.calibrate`). The text table is
``roofline validate``'s (:mod:`roofline.commands.validate`). Conventions: docs/conventions.md, "One step".
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..deployment import Deployment, per_sequence_time
from ..errors import InvalidValueError
from ..formulas import decode_allreduce_time, step_time
from ..hardware import Accelerator, get_accelerator
from ..models import flops_convention
from .published import load_published
from .schema import Calibration, Measurement, calibration_files, load_calibration

__all__ = [
    "LEFT_OUT",
    "TARGETS",
    "Row",
    "Report",
    "calibration_measurements",
    "measurement_deployment",
    "default_measurements",
    "predict",
    "estimate_step",
    "validate",
]

#: What the roofline step time leaves out; every table prints it.
LEFT_OUT: tuple[str, ...] = (
    "CPU overhead per step (Python, the serving engine's scheduler, sampling, "
    "detokenization, HTTP streaming): the bound's overhead term is 0 and never fitted; the estimate's t_step, "
    "t_layer and t_seq (per running sequence) stand for it, fitted on the calibration subset.",
    "Kernel launch gaps and synchronisation between kernels (CUDA graphs remove most of "
    "them; gpt-fast and calibrate's GPU default use graphs).",
    "Kernels below the constants: small batch-1 GEMMs, attention kernels and element-wise "
    "ops (norms, RoPE, activations) do not all stream at the given bandwidth or run at the given peak.",
    "Bytes besides weights and KV reads: activations, logits, the new token's KV write.",
    "FP8 and int8/int4 rows: weights and KV are priced at their stated bytes per element (int4 group scales "
    "and BF16 embeddings not counted), and compute always at the dense BF16 peak, never the FP8 or int8 peak.",
    "Power and clock limits (the gpt-fast A100 ran capped at 330 W), and prefill steps "
    "interleaved with decode in a serving engine.",
)


def measurement_deployment(measurement: Measurement, accelerator: Accelerator, *, flops: str = "exact") -> Deployment:
    """The :class:`roofline.Deployment` a row ran: its model at its ``tensor_parallel`` T on ``accelerator``.

    Parameters
    ----------
    measurement : Measurement
    accelerator : Accelerator
        The row's spec or measured constants (:func:`predict` prices both).
    flops : {"exact", "2p"}

    Returns
    -------
    Deployment
        The bound (no profile): :func:`estimate_step` scales the accelerator itself.

    Raises
    ------
    InvalidValueError
        A bad convention or accelerator, or a T the row's model refuses, naming the field.
    """
    return Deployment(measurement.model, accelerator, measurement.tensor_parallel, flops=flops)


def predict(
    measurement: Measurement, accelerator: Accelerator, *, flops: str = "exact"
) -> tuple[float, str]:
    """Predicted step time of a measurement's step on ``accelerator`` [s], and its bound.

    Parameters
    ----------
    measurement : Measurement
    accelerator : Accelerator
        Its ``bandwidth`` [bytes/s] and ``peak_flops`` [FLOP/s] are used.
    flops : {"exact", "2p"}
        FLOP convention (:meth:`roofline.ModelConfig.flops_per_token`).

    Returns
    -------
    (float, str)
        Step time [s] from :func:`roofline.formulas.step_time` with overhead 0, and
        ``"memory"`` or ``"compute"``: which side of the roofline sets it. A row with
        ``tensor_parallel`` T > 1 is priced on one GPU's share of the model
        (:meth:`roofline.ModelConfig.per_gpu`) plus the 2 L ring all-reduces of its batch over
        ``accelerator.link(T)`` (:func:`roofline.formulas.decode_allreduce_time`); a MoE row reads
        the experts its batch touches (uniform routing; docs/conventions.md, "Tensor parallelism"
        and "Architectures"); a sliding-window model's row reads min(c, w) tokens per windowed
        layer, each sequence at context_sum / batch.

    Raises
    ------
    InvalidValueError
        For an unknown FLOP convention; naming ``context_sum`` when a sliding-window model's
        context_sum is not a multiple of its batch (one context per sequence is priced).

    Examples
    --------
    >>> m = load_published()[0]
    >>> t, bound = predict(m, m.spec)
    >>> round(t * 1e3, 3), bound
    (6.637, 'memory')
    """
    from ..estimate import _model_terms

    deployment = measurement_deployment(measurement, accelerator, flops=flops)
    model = deployment.share
    context = 0
    if model.has_sliding_window:  # windows price each sequence at its own context: one context for the batch
        context, rest = divmod(measurement.context_sum, measurement.batch)
        if rest:
            raise InvalidValueError("context_sum", measurement.context_sum,
                                    f"{model.name} has sliding windows, priced at one context per sequence: "
                                    f"context_sum must be a multiple of batch ({measurement.batch})")
    # the step reads the experts its batch touches (MoE) and min(c, w) tokens per windowed layer
    terms = _model_terms(model, deployment.flops, measurement.batch, context)
    kw = dict(
        batch=measurement.batch,
        context_sum=measurement.context_sum,
        **terms,
        **accelerator.step_terms(),
    )
    allreduce = 0.0
    if deployment.tensor_parallel_size > 1:
        allreduce = float(decode_allreduce_time(batch=measurement.batch, **deployment.allreduce_terms()))
    t = float(step_time(**kw, overhead=0)) + allreduce
    memory = float(terms["weight_bytes"] + terms["kv_bytes_per_token"] * measurement.context_sum) / float(
        accelerator.bandwidth
    ) + allreduce
    return t, "memory" if math.isclose(t, memory, rel_tol=1e-12) else "compute"


@attrs.frozen
class Row:
    """One validated row: the measurement and its two predictions.

    Attributes
    ----------
    measurement : Measurement
    predicted_spec_s : float or None [s]
        With the spec constants; None without a preset.
    predicted_measured_s : float [s]
        With the measured constants.
    error_spec, error_measured : float or None [1]
        (predicted - measured) / measured; negative when the model is faster.
    bound_spec, bound_measured : str or None
        ``"memory"`` or ``"compute"``.
    estimate_s : float or None [s]
        The estimate of the row's engine profile (:func:`roofline.calibrate.fit.estimate_row`);
        None for a row without a fitted profile or without spec constants.
    error_estimate : float or None [1]
        (estimate - measured) / measured.
    """

    measurement: Measurement
    predicted_spec_s: float | None
    predicted_measured_s: float
    error_spec: float | None
    error_measured: float
    bound_spec: str | None
    bound_measured: str
    estimate_s: float | None = None
    error_estimate: float | None = None


def _median_abs(values: Iterable[float | None]) -> float | None:
    xs = [abs(v) for v in values if v is not None]
    return statistics.median(xs) if xs else None


def _max_abs(values: Iterable[float | None]) -> float | None:
    xs = [abs(v) for v in values if v is not None]
    return max(xs) if xs else None


#: Why rows measured on a CPU are kept out of every median and shown apart.
CPU_NOTE = ("CPU rows are kept out of the medians: the calibration's tiny shapes take microseconds of arithmetic, "
            "so per-step launch and Python overhead, which the bound leaves out, dominate the measured time")


#: The estimate's targets on the validation subset: (label, rows, statistic, limit) (issue 24; issue 15's were
#: 15 % and 10 %). :meth:`Report.targets` adds one per engine profile: its own validation rows, at most
#: :data:`ENGINE_TARGET`.
TARGETS: tuple[tuple[str, str, str, float], ...] = (
    ("estimate, validation subset", "all", "median", 0.10),
    ("estimate, validation subset, batch 1", "batch1", "median", 0.05),
)
#: The target on each engine profile's own validation rows: median ``|error|`` of the estimate at most 15 %.
ENGINE_TARGET = 0.15
#: What the estimate lacks where a target of :data:`TARGETS` is missed (by its label), printed under it with the
#: rows beyond the limit (``beyond``, which carries the numbers); docs/conventions.md, "Bound and estimate".
TARGET_GAPS: dict[str, str] = {
    "estimate, validation subset, batch 1": (
        "a cost of quantised kernels that does not scale as the bytes they read (int4/int8 dequantisation), and "
        "torch.compile's fused kernels (SGLang's compiled row; its profile is fitted on CUDA-graph rows). A per-layer "
        "dequantisation time per weight dtype is no such term: on gpt-fast's two int8 calibration rows it fits at "
        "-45.7 us per layer (the 70B row is the cheaper per layer) and int4 has one calibration row"),
}


def _summary(rows: Sequence[Row]) -> dict[str, Any]:
    batch1 = [r for r in rows if r.measurement.batch == 1]
    out: dict[str, Any] = {"rows": len(rows), "batch1_rows": len(batch1)}
    for label, part in (("", rows), ("batch1_", batch1)):
        for what, errors in (("bound", [r.error_spec for r in part]), ("estimate", [r.error_estimate for r in part])):
            out[f"{label}{what}_rows"] = sum(e is not None for e in errors)
            out[f"{label}{what}_median"] = _median_abs(errors)
            out[f"{label}{what}_max"] = _max_abs(errors)
    return out


@attrs.frozen
class Report:
    """The rows, the FLOP convention and the median absolute errors.

    Attributes
    ----------
    rows : tuple of Row
    flops : str
        The FLOP convention used.
    """

    rows: tuple[Row, ...]
    flops: str = "exact"
    profiles: tuple[Any, ...] = ()
    unavailable: tuple[tuple[str, str], ...] = ()

    @property
    def accelerator_rows(self) -> tuple[Row, ...]:
        """The rows measured on an accelerator (GPU): every row but the CPU ones (:data:`CPU_NOTE`)."""
        return tuple(r for r in self.rows if r.measurement.device_type != "cpu")

    @property
    def cpu_rows(self) -> tuple[Row, ...]:
        """The rows measured on a CPU, summarised apart (:data:`CPU_NOTE`)."""
        return tuple(r for r in self.rows if r.measurement.device_type == "cpu")

    def subsets(self) -> dict[str, dict[str, Any]]:
        """Per subset of the split (``"calibration"``, ``"validation"``, then ``""`` for rows of no subset).

        Each: ``rows``, ``batch1_rows``, and for the bound (spec constants) and the estimate
        the number of rows with a value, the median and the maximum absolute error [1], over all
        rows of the subset (``bound_median``, ``estimate_max``, ...) and over its batch-1 rows
        (``batch1_bound_median``, ...); None where no row has a value.
        """
        out = {}
        for name in ("calibration", "validation", ""):
            rows = [r for r in self.accelerator_rows if r.measurement.split == name]
            if rows:
                out[name] = _summary(rows)
        return out

    def targets(self) -> list[dict[str, Any]]:
        """The estimate's targets on the validation subset: label, value [1], limit [1], met (None: no value), and
        ``beyond``: the judged rows whose ``|error|`` exceeds the limit, largest first, as (id, error [1],
        estimate - measured [s]), so a missed target names the rows that miss it and by how much; ``lacks``: the
        term the estimate lacks there (:data:`TARGET_GAPS`), or None."""
        validation = [r for r in self.accelerator_rows if r.measurement.split == "validation"]

        def beyond(rows: Sequence[Row], limit: float) -> list[tuple[str, float, float]]:
            out = [(r.measurement.id, r.error_estimate, float(r.estimate_s) - float(r.measurement.measured_s))
                   for r in rows if r.error_estimate is not None and r.estimate_s is not None
                   and abs(r.error_estimate) > limit]
            return sorted(out, key=lambda x: -abs(x[1]))

        summary = self.subsets().get("validation")
        out = []
        for label, rows, stat, limit in TARGETS:
            prefix = "batch1_" if rows == "batch1" else ""
            value = None if summary is None else summary[f"{prefix}estimate_{stat}"]
            judged = [r for r in validation if rows != "batch1" or r.measurement.batch == 1]
            out.append({"target": f"{stat} |error| of the {label} <= {limit:.0%}", "value": value, "limit": limit,
                        "met": None if value is None else value <= limit, "beyond": beyond(judged, limit),
                        "lacks": TARGET_GAPS.get(label)})
        for name in dict.fromkeys(r.measurement.engine_profile for r in validation if r.measurement.engine_profile):
            own = [r for r in validation if r.measurement.engine_profile == name]
            errors = [r.error_estimate for r in own]
            value = _median_abs(errors)
            n = sum(e is not None for e in errors)
            out.append({"target": f"median |error| of the estimate, validation rows of {name!r} ({n} rows) <= "
                                  f"{ENGINE_TARGET:.0%}", "value": value, "limit": ENGINE_TARGET,
                        "met": None if value is None else value <= ENGINE_TARGET,
                        "beyond": beyond(own, ENGINE_TARGET), "lacks": None})
        return out

    @property
    def median_abs_error_spec(self) -> float | None:
        """Median over the accelerator rows of ``|error|`` with spec constants [1] (None: no row has one)."""
        return _median_abs(r.error_spec for r in self.accelerator_rows)

    @property
    def median_abs_error_measured(self) -> float | None:
        """Median over the accelerator rows of ``|error|`` with measured constants [1] (None: no rows);
        CPU rows are left out (:data:`CPU_NOTE`)."""
        return _median_abs(r.error_measured for r in self.accelerator_rows)

    def groups(self) -> dict[str, dict[str, Any]]:
        """Per group (``"published"`` or a calibration file): rows and median ``|errors|``."""
        out: dict[str, dict[str, Any]] = {}
        for name in dict.fromkeys(r.measurement.group for r in self.rows):
            rows = [r for r in self.rows if r.measurement.group == name]
            out[name] = {
                "rows": len(rows),
                "median_abs_error_spec": _median_abs(r.error_spec for r in rows),
                "median_abs_error_measured": _median_abs(r.error_measured for r in rows),
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: every row with its inputs, predictions, errors and source."""
        rows = []
        for r in self.rows:
            m = r.measurement
            rows.append({
                "id": m.id,
                "group": m.group,
                "model": m.model.name,
                "weight_dtype": m.model.weight_dtype,
                "kv_dtype": m.model.kv_dtype,
                "batch": m.batch,
                "context_sum": m.context_sum,
                "measured_s": m.measured_s,
                "spec": _constants(m.spec),
                "measured_constants": _constants(m.measured_constants),
                "predicted_spec_s": r.predicted_spec_s,
                "error_spec": r.error_spec,
                "bound_spec": r.bound_spec,
                "predicted_measured_s": r.predicted_measured_s,
                "error_measured": r.error_measured,
                "bound_measured": r.bound_measured,
                "engine_profile": m.engine_profile,
                "split": m.split,
                "estimate_s": r.estimate_s,
                "error_estimate": r.error_estimate,
                "metric": m.metric,
                "source": m.source,
                "composition": m.composition,
                "left_out": list(m.left_out),
                "quotes": list(m.quotes),
            })
        return {
            "flops": self.flops,
            "overhead_s": 0,
            "error": "(predicted - measured) / measured",
            "rows": rows,
            "median_abs_error": {
                "spec": self.median_abs_error_spec,
                "measured": self.median_abs_error_measured,
                "rows_spec": sum(r.error_spec is not None for r in self.accelerator_rows),
                "rows_measured": len(self.accelerator_rows),
            },
            "cpu_rows": {"rows": len(self.cpu_rows),
                         "median_abs_error_measured": _median_abs(r.error_measured for r in self.cpu_rows),
                         "note": CPU_NOTE},
            "groups": self.groups(),
            "subsets": self.subsets(),
            "targets": self.targets(),
            "profiles": [_profile_dict(p) for p in self.profiles],
            "profiles_unavailable": dict(self.unavailable),
            "left_out": list(LEFT_OUT),
        }


def _profile_dict(p: Any) -> dict[str, Any]:
    constants = {}
    for name, value in p.constants().items():
        src = getattr(p, name)
        constants[name] = {"value": float(value), "unit": "s" if name.startswith("t_") else "1",
                           "source": None if src is None else attrs.asdict(src.source)}
    return {"key": p.key, "name": p.name, "constants": constants, "calibration": list(p.calibration),
            "fixed": list(p.fixed), "left_out": list(p.left_out)}


def _constants(acc: Accelerator | None) -> dict[str, Any] | None:
    if acc is None:
        return None
    return {
        "key": acc.key,
        "bandwidth": float(acc.bandwidth),
        "bandwidth_source": attrs.asdict(acc.hbm_bandwidth.source),
        "peak_flops": float(acc.peak_flops),
        "peak_flops_source": attrs.asdict(acc.peak_bf16.source),
    }


def calibration_measurements(calibration: Calibration | str | os.PathLike[str]) -> list[Measurement]:
    """One :class:`Measurement` per decode point of a calibration file (median time).

    Parameters
    ----------
    calibration : Calibration or path
        A loaded calibration or the path of a calibration file.

    Returns
    -------
    list of Measurement
        Spec constants: the device's preset (None without one); measured constants:
        the file's own bandwidth and best matmul FLOP/s (:meth:`Calibration.accelerator`).

    Raises
    ------
    MeasurementFileError
        As :func:`roofline.calibrate.load_calibration`.
    """
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
    spec = get_accelerator(cal.preset) if cal.preset else None
    measured = cal.accelerator()
    stem = Path(cal.path).stem
    graphs = "CUDA graphs" if cal.method.get("cuda_graphs") else "no CUDA graphs"
    source = f"roofline calibrate, {cal.date}: {cal.conditions()}"
    out = []
    for p in cal.points:
        out.append(Measurement(
            id=f"{stem}:B{p.batch}:c{p.context}",
            group=cal.path,
            model=cal.model,
            spec=spec,
            measured_constants=measured,
            batch=p.batch,
            context_sum=p.context_sum,
            measured_s=p.median_s,
            metric=f"median of {len(p.times_s)} timed decode steps ({graphs if p.cuda_graph else 'eager'})",
            source=source,
            composition=f"{p.batch} sequences, each at context {p.context} (random weights, {cal.model.name} shapes)",
            left_out=(),
            device_type="cpu" if cal.device.get("type") == "cpu" else "gpu",
        ))
    return out


def default_measurements(
    extra: Sequence[str | os.PathLike[str]] = (), *, published: bool = True, shipped: bool = True
) -> list[Measurement]:
    """The rows ``roofline validate`` checks: published points, shipped and extra calibration files.

    Parameters
    ----------
    extra : sequence of paths
        Calibration files to add (``roofline validate --measurements FILE``).
    published : bool
        Include the shipped published points.
    shipped : bool
        Include the shipped calibration files (:func:`roofline.calibrate.calibration_files`).

    Returns
    -------
    list of Measurement

    Raises
    ------
    MeasurementFileError
        A file is missing or invalid.
    InvalidValueError
        Nothing to validate (every source excluded or empty).
    """
    rows: list[Measurement] = []
    if published:
        rows.extend(load_published())
    files = list(calibration_files()) if shipped else []
    files.extend(Path(p) for p in extra)
    for path in files:
        rows.extend(calibration_measurements(path))
    if not rows:
        raise InvalidValueError("measurements", [str(p) for p in extra], "no measurement to validate")
    return rows


def validate(
    measurements: Sequence[Measurement] | None = None,
    *,
    flops: str = "exact",
    profiles: Mapping[str, Any] | None = None,
    unavailable: Mapping[str, str] | None = None,
) -> Report:
    """Predict every measurement with spec and measured constants (the bound) and its profile's estimate.

    Parameters
    ----------
    measurements : sequence of Measurement, optional
        Default: :func:`default_measurements` (published points and shipped files).
    flops : {"exact", "2p"}
        FLOP convention (:meth:`roofline.ModelConfig.flops_per_token`).
    profiles : mapping, optional
        Engine profile name -> :class:`roofline.calibrate.fit.EngineProfile`: every row of a
        profile given here also gets that profile's estimate (``predict`` on the profile's
        scaled spec accelerator + t_step + L t_layer). None (default): the bound only.
        :func:`roofline.calibrate.fit.validate_with_estimates` fits them on the calibration
        rows and passes them.
    unavailable : mapping, optional
        Profile name -> why it has no constants, carried into the report.

    Returns
    -------
    Report
        One :class:`Row` per measurement; ``median_abs_error_spec`` and
        ``median_abs_error_measured`` [dimensionless, e.g. 0.33 for 33%]; per subset
        medians and maxima of bound and estimate (:meth:`Report.subsets`).

    Raises
    ------
    InvalidValueError
        For an unknown FLOP convention or an empty list of measurements.

    Notes
    -----
    Bound: :func:`roofline.formulas.step_time` with overhead 0 (docs/conventions.md,
    "One step"), the accelerators' constants as given. Estimate: docs/conventions.md,
    "Bound and estimate"; its constants come from the calibration rows only, so a
    validation row's estimate never saw the row.

    Examples
    --------
    >>> report = validate(load_published()[:2])
    >>> [round(r.error_spec, 3) for r in report.rows]
    [-0.304, -0.354]
    >>> round(report.median_abs_error_measured, 3)
    0.222
    """
    flops = flops_convention(flops)
    items = list(default_measurements() if measurements is None else measurements)
    if not items:
        raise InvalidValueError("measurements", items, "no measurement to validate")
    for m in items:
        if not isinstance(m, Measurement):
            raise InvalidValueError("measurements", m, "every item must be a Measurement")
    profiles = dict(profiles or {})
    rows = []
    for m in items:
        pm, bm = predict(m, m.measured_constants, flops=flops)
        if m.spec is not None:
            ps, bs = predict(m, m.spec, flops=flops)
            es: float | None = (ps - m.measured_s) / m.measured_s
        else:
            ps, bs, es = None, None, None
        est: float | None = None
        if m.engine_profile in profiles and m.spec is not None:
            est = estimate_step(m, profiles[m.engine_profile], flops=flops)
        rows.append(Row(
            measurement=m,
            predicted_spec_s=ps,
            predicted_measured_s=pm,
            error_spec=es,
            error_measured=(pm - m.measured_s) / m.measured_s,
            bound_spec=bs,
            bound_measured=bm,
            estimate_s=est,
            error_estimate=None if est is None else (est - m.measured_s) / m.measured_s,
        ))
    return Report(rows=tuple(rows), flops=flops, profiles=tuple(profiles.values()),
                  unavailable=tuple((unavailable or {}).items()))


def estimate_step(measurement: Measurement, profile: Any, *, flops: str = "exact") -> float:
    """The estimate of a measurement's step under an engine profile [s].

    Parameters
    ----------
    measurement : Measurement
        With spec constants (``measurement.spec``).
    profile : EngineProfile
        :class:`roofline.calibrate.fit.EngineProfile` (its ``scaled`` and ``overhead``).
    flops : {"exact", "2p"}

    Returns
    -------
    float [s]
        :func:`predict` on the profile's scaled spec accelerator, max(bytes / (eta_bw BW),
        FLOPs / (eta_mm peak)) plus whatever ``predict`` adds beyond the roofline, + t_step +
        L t_layer + B t_seq (docs/conventions.md, "Bound and estimate"). On one GPU this is
        :func:`roofline.formulas.estimated_step_time` of the row (tested).

    Raises
    ------
    InvalidValueError
        The row has no spec constants (field ``spec``).
    """
    if measurement.spec is None:
        raise InvalidValueError("spec", None, f"row {measurement.id!r} has no datasheet constants to scale")
    from ..profiles import scaled_for

    t, _ = predict(measurement, scaled_for(profile, measurement.spec, measurement.model), flops=flops)
    return t + float(profile.overhead(measurement.model.num_hidden_layers)
                     + measurement.batch * per_sequence_time(profile))
