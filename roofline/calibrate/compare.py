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

Constants are never fitted per row or to the rows. The relative error of a row is
(predicted - measured) / measured; the summary is the median of its absolute value.

What the model leaves out (so predictions fall below measurements): see
:data:`LEFT_OUT`, printed with every table.

Data: the published points (:mod:`roofline.calibrate.published`) and the calibration
files (``roofline calibrate``; :mod:`roofline.calibrate`). The text table is
``roofline validate``'s (:mod:`roofline.commands.validate`). Conventions: ../shared/design/CONVENTIONS.md, "One step".
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..errors import InvalidValueError
from ..formulas import step_time
from ..hardware import Accelerator, get_accelerator
from .published import load_published
from .schema import Calibration, Measurement, calibration_files, load_calibration

__all__ = [
    "LEFT_OUT",
    "Row",
    "Report",
    "calibration_measurements",
    "default_measurements",
    "predict",
    "validate",
]

#: What the roofline step time leaves out; every table prints it.
LEFT_OUT: tuple[str, ...] = (
    "CPU overhead per step (Python, the serving engine's scheduler, sampling, "
    "detokenization, HTTP streaming): the overhead term is 0 in every prediction and is never fitted.",
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


def predict(
    measurement: Measurement, accelerator: Accelerator, *, flops: str = "exact"
) -> tuple[float, str]:
    """Predicted step time of a measurement's step on ``accelerator`` [s], and its bound.

    Parameters
    ----------
    measurement : Measurement
    accelerator : Accelerator
        Its ``bandwidth`` [bytes/s] and ``peak_flops`` [FLOP/s] are used.
    flops : {"exact", "lesson"}
        FLOP convention (:meth:`roofline.ModelConfig.flops_per_token`).

    Returns
    -------
    (float, str)
        Step time [s] from :func:`roofline.formulas.step_time` with overhead 0, and
        ``"memory"`` or ``"compute"``: which side of the roofline sets it.

    Raises
    ------
    InvalidValueError
        For an unknown FLOP convention.

    Examples
    --------
    >>> m = load_published()[0]
    >>> t, bound = predict(m, m.spec)
    >>> round(t * 1e3, 3), bound
    (6.637, 'memory')
    """
    model = measurement.model
    kw = dict(
        batch=measurement.batch,
        context_sum=measurement.context_sum,
        **model.step_terms(flops),
        **accelerator.step_terms(),
    )
    t = float(step_time(**kw, overhead=0))
    memory = float(model.weight_bytes + model.kv_bytes_per_token * measurement.context_sum) / float(
        accelerator.bandwidth
    )
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
    """

    measurement: Measurement
    predicted_spec_s: float | None
    predicted_measured_s: float
    error_spec: float | None
    error_measured: float
    bound_spec: str | None
    bound_measured: str


def _median_abs(values: Iterable[float | None]) -> float | None:
    xs = [abs(v) for v in values if v is not None]
    return statistics.median(xs) if xs else None


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

    @property
    def median_abs_error_spec(self) -> float | None:
        """Median over the rows of ``|error|`` with spec constants [1] (None: no row has one)."""
        return _median_abs(r.error_spec for r in self.rows)

    @property
    def median_abs_error_measured(self) -> float | None:
        """Median over the rows of ``|error|`` with measured constants [1] (None: no rows)."""
        return _median_abs(r.error_measured for r in self.rows)

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
                "rows_spec": sum(r.error_spec is not None for r in self.rows),
                "rows_measured": len(self.rows),
            },
            "groups": self.groups(),
            "left_out": list(LEFT_OUT),
        }


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


def validate(measurements: Sequence[Measurement] | None = None, *, flops: str = "exact") -> Report:
    """Predict every measurement with spec and measured constants; the errors and their medians.

    Parameters
    ----------
    measurements : sequence of Measurement, optional
        Default: :func:`default_measurements` (published points and shipped files).
    flops : {"exact", "lesson"}
        FLOP convention (:meth:`roofline.ModelConfig.flops_per_token`).

    Returns
    -------
    Report
        One :class:`Row` per measurement; ``median_abs_error_spec`` and
        ``median_abs_error_measured`` [dimensionless, e.g. 0.33 for 33%].

    Raises
    ------
    InvalidValueError
        For an unknown FLOP convention or an empty list of measurements.

    Notes
    -----
    Prediction: :func:`roofline.formulas.step_time` with overhead 0 (CONVENTIONS.md,
    "One step"). Constants are the accelerators' as given; nothing is fitted.

    Examples
    --------
    >>> report = validate(load_published()[:2])
    >>> [round(r.error_spec, 3) for r in report.rows]
    [-0.304, -0.354]
    >>> round(report.median_abs_error_measured, 3)
    0.222
    """
    if flops not in ("exact", "lesson"):
        raise InvalidValueError("flops", flops, "expected 'exact' or 'lesson'")
    items = list(default_measurements() if measurements is None else measurements)
    if not items:
        raise InvalidValueError("measurements", items, "no measurement to validate")
    rows = []
    for m in items:
        if not isinstance(m, Measurement):
            raise InvalidValueError("measurements", m, "every item must be a Measurement")
        pm, bm = predict(m, m.measured_constants, flops=flops)
        if m.spec is not None:
            ps, bs = predict(m, m.spec, flops=flops)
            es: float | None = (ps - m.measured_s) / m.measured_s
        else:
            ps, bs, es = None, None, None
        rows.append(Row(
            measurement=m,
            predicted_spec_s=ps,
            predicted_measured_s=pm,
            error_spec=es,
            error_measured=(pm - m.measured_s) / m.measured_s,
            bound_spec=bs,
            bound_measured=bm,
        ))
    return Report(rows=tuple(rows), flops=flops)
