"""``roofline validate``: the model's decode step times against measured ones.

Rows: the shipped published points (``roofline/data/measurements/published.json``),
the shipped calibration files, and any ``--measurements FILE`` written by ``roofline
calibrate``. Prints, per row, the prediction with spec and with measured constants,
their errors, the median absolute errors, the sources and what the model leaves out,
then the published points this version cannot price yet and why (tensor parallelism, a
missing preset); ``--json`` prints the same as JSON. The rows and predictions:
:mod:`roofline.calibrate.compare`; the published points: :mod:`roofline.calibrate.published`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..units import format_share, format_time

if TYPE_CHECKING:
    from ..calibrate.compare import Report
    from ..calibrate.published import PendingPoint

__all__ = ["register", "run", "format_report"]


def register(subparsers: Any) -> None:
    """Add the ``validate`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "validate",
        help="compare predicted with measured decode step times (published points, calibrate files)",
        description="Predict every measured decode step (published points and calibration files) "
        "with spec and with measured constants, and print the errors and their medians. "
        "Constants are never fitted.",
    )
    p.add_argument("--measurements", action="append", default=[], metavar="FILE",
                   help="a calibration file from roofline calibrate (repeatable)")
    p.add_argument("--no-published", action="store_true", help="leave out the published points")
    p.add_argument("--no-shipped", action="store_true", help="leave out the shipped calibration files")
    p.add_argument("--flops", choices=("exact", "lesson"), default="exact",
                   help="FLOP convention: exact matmul count + attention (default) or the lesson's 2 x P")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``roofline validate``; return 0.

    Raises
    ------
    RooflineError
        A measurement file is missing or invalid (the message names the file and the
        field), or nothing is left to validate.
    """
    from ..calibrate.compare import default_measurements, validate
    from ..calibrate.published import pending_published

    rows = default_measurements(
        args.measurements, published=not args.no_published, shipped=not args.no_shipped
    )
    report = validate(rows, flops=args.flops)
    pending = [] if args.no_published else pending_published()
    if args.json:
        doc = report.to_dict()
        doc["pending_published"] = [
            {"id": p.id, "model": p.model, "accelerator": p.accelerator, "tensor_parallel": p.tensor_parallel,
             "batch": p.batch, "measured_s": p.measured_s, "metric": p.metric, "source": p.source,
             "reasons": list(p.reasons)}
            for p in pending
        ]
        print(json.dumps(doc, indent=1, allow_nan=False))
    else:
        print(format_report(report, pending=pending))
    return 0


def format_report(report: Report, *, pending: Sequence[PendingPoint] = ()) -> str:
    """``roofline validate``'s table as text: one line per row, the medians, constants, sources, omissions.

    Parameters
    ----------
    report : roofline.calibrate.Report
    pending : sequence of roofline.calibrate.PendingPoint
        Published points this version cannot price (:func:`roofline.calibrate.pending_published`),
        listed last with their measured step time [ms] and reasons; none by default.

    Returns
    -------
    str, without a final newline. Times in ms, errors in percent.
    """
    from ..calibrate.compare import LEFT_OUT

    lines = [
        "Predicted vs measured decode step time: roofline max(bytes / bandwidth, FLOPs / peak), "
        f"overhead 0, FLOPs {report.flops}; constants never fitted; error = (predicted - measured) / measured",
        "",
    ]
    header = ("id", "model", "B", "ctx sum", "measured", "spec pred", "error", "meas. pred", "error", "bound")
    table = [header]
    for r in report.rows:
        m = r.measurement
        table.append((
            m.id, m.model.name, str(m.batch), f"{m.context_sum:,}", _ms(m.measured_s),
            _ms(r.predicted_spec_s), _pct(r.error_spec), _ms(r.predicted_measured_s),
            _pct(r.error_measured), r.bound_measured,
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    left = {0, 1}
    for row in table:
        cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    n_spec = sum(r.error_spec is not None for r in report.rows)
    lines.append(
        f"median |error|: spec constants {_pct(report.median_abs_error_spec, signed=False)} "
        f"({n_spec} rows); measured constants {_pct(report.median_abs_error_measured, signed=False)} "
        f"({len(report.rows)} rows)"
    )
    groups = report.groups()
    if len(groups) > 1:
        for name, g in groups.items():
            lines.append(
                f"  {name}: spec {_pct(g['median_abs_error_spec'], signed=False)}, "
                f"measured {_pct(g['median_abs_error_measured'], signed=False)} ({g['rows']} rows)"
            )
    lines.append("")
    lines.append("Constants (bandwidth, dense BF16 peak):")
    seen = set()
    for r in report.rows:
        m = r.measurement
        for label, acc in (("spec", m.spec), ("measured", m.measured_constants)):
            if acc is None or (label, acc.key) in seen:
                continue
            seen.add((label, acc.key))
            lines.append(
                f"  {label:8} {acc.key}: {float(acc.bandwidth) / 1e9:,.0f} GB/s "
                f"[{acc.hbm_bandwidth.source.kind}: {acc.hbm_bandwidth.source.citation}], "
                f"{float(acc.peak_flops) / 1e12:,.1f} TFLOP/s [{acc.peak_bf16.source.kind}: "
                f"{acc.peak_bf16.source.citation}]"
            )
    published = [r.measurement for r in report.rows if r.measurement.group == "published"]
    if published:
        lines.append("")
        lines.append("Published points (source; step composition assumed):")
        for m in published:
            lines.append(f"  {m.id}: {m.source}")
            for q in m.quotes:
                lines.append(f"    quote: {q}")
            lines.append(f"    measured: {m.metric}")
            lines.append(f"    composition: {m.composition}")
            for item in m.left_out:
                lines.append(f"    leaves out: {item}")
    calibrations = [g for g in groups if g != "published"]
    if calibrations:
        lines.append("")
        lines.append("Calibration files (roofline calibrate, random weights):")
        for name in calibrations:
            first = next(r.measurement for r in report.rows if r.measurement.group == name)
            lines.append(f"  {name}: {first.source}")
    lines.append("")
    lines.append("Left out of the model (why predictions can fall short of measurements):")
    for item in LEFT_OUT:
        lines.append(f"  - {item}")
    if pending:
        lines.append("")
        lines.append(f"Published points not priced by this version ({len(pending)}; measured step time, why):")
        for p in pending:
            lines.append(f"  {p.id}: {p.measured_s * 1e3:.3f} ms; {'; '.join(p.reasons)}")
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return format_time(seconds, unit="ms", decimals=(3, 3, 3))


def _pct(value: float | None, *, signed: bool = True) -> str:
    return format_share(value, signed=signed)
