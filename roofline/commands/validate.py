"""``roofline validate``: the model's decode step times against measured ones.

Rows: the shipped published points (``roofline/data/measurements/published.json``),
the shipped calibration files, and any ``--measurements FILE`` written by ``roofline
calibrate``. Prints, per row, the bound with spec and with measured constants, the
estimate of the row's engine profile (constants fitted on the calibration subset only),
their errors, the median and maximum absolute errors per subset (calibration, validation)
with the estimate's targets, the profiles' constants with their sources, the sources of
the rows and what the model leaves out,
then the published points this version cannot price yet and why (tensor parallelism, a
missing preset); ``--json`` prints the same as JSON. The default text keeps within 100 columns
(the rows as two tables keyed by id; each source by a short key, listed once by ``--verbose``:
docs/conventions.md, "Names and text on the command line"). The rows and predictions:
:mod:`roofline.calibrate.compare`; the published points: :mod:`roofline.calibrate.published`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from ..units import fit_width, format_share
from ._args import add_flops_option

if TYPE_CHECKING:
    from ..calibrate.compare import Report
    from ..calibrate.published import PendingPoint

__all__ = ["register", "run", "format_report", "format_serving"]


def register(subparsers: Any) -> None:
    """Add the ``validate`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "validate",
        help="compare predicted with measured decode step times (published points, calibrate files)",
        description="Predict every measured decode step (published points and calibration files) "
        "with the bound (spec and measured constants, never fitted) and the estimate of the row's engine "
        "profile (constants fitted on the calibration subset only), and print the errors, their medians and "
        "maxima per subset.",
    )
    p.add_argument("--measurements", action="append", default=[], metavar="FILE",
                   help="a calibration file from roofline calibrate (repeatable)")
    p.add_argument("--no-published", action="store_true", help="leave out the published points")
    p.add_argument("--no-shipped", action="store_true", help="leave out the shipped calibration files")
    add_flops_option(p, default="exact")
    p.add_argument("--no-serving", action="store_true",
                   help="leave out the serving-level comparison (published runs under load, simulated as run)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--verbose", action="store_true",
                   help="also print each published point's source, quotes, metric, composition and omissions, each "
                        "constant's citation and each engine-profile constant's source (--json always has them)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``roofline validate``; return 0.

    Raises
    ------
    RooflineError
        A measurement file is missing or invalid (the message names the file and the
        field), or nothing is left to validate.
    """
    from ..calibrate.compare import default_measurements
    from ..calibrate.fit import validate_with_estimates
    from ..calibrate.published import pending_published

    rows = default_measurements(
        args.measurements, published=not args.no_published, shipped=not args.no_shipped
    )
    report = validate_with_estimates(rows, flops=args.flops)
    pending = [] if args.no_published else pending_published()
    serving = None if args.no_serving else _serving_rows()
    if args.json:
        doc = report.to_dict()
        doc["pending_published"] = [
            {"id": p.id, "model": p.model, "accelerator": p.accelerator, "tensor_parallel": p.tensor_parallel,
             "batch": p.batch, "measured_s": p.measured_s, "metric": p.metric, "source": p.source,
             "reasons": list(p.reasons), "engine_profile": p.engine_profile, "split": p.split}
            for p in pending
        ]
        if serving is not None:
            from ..calibrate.serving import serving_summary

            doc["serving"] = {"summary": serving_summary(serving), "rows": [
                {"id": r.point.id, "profile": r.point.profile, "accelerator": r.point.accelerator.key,
                 "concurrency": r.point.concurrency, "input_len": r.point.input_len, "output_len": r.point.output_len,
                 "requests": r.requests, "measured": r.point.measured, "simulated": r.simulated, "errors": r.errors,
                 "statistic": r.point.statistic, "split": r.point.split, "source": r.point.source,
                 "kind": r.point.kind, "rate": None if r.point.rate is None else float(r.point.rate),
                 "refused": r.refused, "engine": r.point.engine, "sim_engine": r.options.get("engine")}
                for r in serving]}
        print(json.dumps(doc, indent=1, allow_nan=False))
    else:
        keys = _SourceKeys()  # one key a source across both sections, listed once at the end (--verbose)
        text = format_report(report, pending=pending, verbose=args.verbose, sources=keys)
        if serving is not None:
            text += "\n" + format_serving(serving, verbose=args.verbose, sources=keys)
        if args.verbose:
            text += "\n" + "\n".join(keys.listing())
        print(text)
    return 0


def _serving_rows() -> list[Any]:
    """The shipped serving points simulated (:func:`roofline.calibrate.serving.validate_serving`), once per process."""
    from ..calibrate.serving import validate_serving

    global _SERVING
    if _SERVING is None:
        _SERVING = validate_serving()
    return _SERVING


_SERVING: list[Any] | None = None


def format_serving(rows: Sequence[Any], *, verbose: bool = True, sources: _SourceKeys | None = None) -> str:
    """The serving-level section: per point, measured against simulated TTFT, ITL/TPOT [ms] and output tokens/s
    with the errors, the medians, the TPOT target; each point's source by key and, with ``verbose``, its quotes.

    Parameters
    ----------
    rows : sequence of the rows of :func:`roofline.calibrate.serving.validate_serving`
    verbose : bool, default True
        True: each point's quotes (and, when ``sources`` is not given, the sources listed last, each once),
        lines unwrapped. False: every line within 100 columns (:func:`roofline.units.fit_width`).
    sources : _SourceKeys, optional
        The keys shared with :func:`format_report` (the command lists them once, at the end).

    Returns
    -------
    str, starting with an empty line, without a final newline.
    """
    from ..calibrate.serving import serving_summary

    keys = _SourceKeys() if sources is None else sources
    shown = [(key, label) for key, label in _NAMES if any(key in r.point.measured for r in rows)]
    lines = ["", "Serving level: published runs under load, each simulated as it was run (a closed loop at its "
             "concurrency, or a burst sent at t = 0; its lengths; the estimate and scheduler defaults of its "
             "profile; no constant fitted on these points, all validation); error = (simulated - measured) / "
             "measured, the statistic the source reports"]
    head = ("", *(label + (" [ms]" if key.endswith("_ms") else "") for key, label in shown))
    for r in rows:
        p = r.point
        held = "" if p.held_out else f" [not held out: its step row {p.step_row} is a calibration row]"
        lines.append(f"  {p.id} [{keys.key(_serving_source(p.source))}]{held}: "
                     f"--estimate {p.profile}, {p.accelerator.key} x {p.tensor_parallel}, {_workload(p, r.requests)}"
                     + ("" if r.refused else f" ({r.options.get('engine', 'step')} engine)"))
        if r.refused:
            lines.append(f"    not priced: {r.refused}")
            continue
        table = [head]
        for what in ("measured", "simulated", "error"):
            cells = []
            for key, _ in shown:
                if key not in p.measured or key not in r.simulated:
                    cells.append("-")
                elif what == "error":
                    cells.append(f"{r.errors[key]:+.1%}")
                else:
                    cells.append(f"{(p.measured if what == 'measured' else r.simulated)[key]:,.2f}")
            table.append((what, *cells))
        lines += ["    " + x for x in _aligned(table, gaps=(0, *([2] * len(shown))))]
        if verbose:
            lines.append(f"    statistic: {p.statistic}")
            lines += [f"    quote: {q}" for q in p.source.get("quote", ())]
    s = serving_summary(rows)
    lines += _serving_medians(s)
    if verbose:
        if sources is None:
            lines += keys.listing()
        return "\n".join(lines)
    lines.append("  sources, statistics and quotes: roofline validate --verbose")
    return fit_width("\n".join(lines))


_NAMES = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"), ("output_tokens_per_s", "tokens/s"),
          ("output_tokens_per_s_per_gpu", "tokens/s/GPU"))


def _workload(p: Any, requests: int) -> str:
    """A serving point's workload in words: clients or requests, lengths, rate."""
    if p.lengths:
        return f"{len(p.lengths)} requests sent at t = 0 (burst), mean {p.input_len} in / {p.output_len} out"
    if p.kind == "burst":
        return f"{p.concurrency} requests sent at t = 0 (burst), {p.input_len} in / {p.output_len} out"
    if p.kind == "poisson":
        return (f"{p.concurrency} requests, Poisson at {float(p.rate):g}/s (seed {p.seed}), "
                f"{p.input_len} in / {p.output_len} out")
    return f"{p.concurrency} client(s), {p.input_len} in / {p.output_len} out, {requests} requests"


def _serving_medians(s: dict[str, Any]) -> list[str]:
    """The serving medians: overall, per engine, the points left out, the TPOT target."""
    def med(m: dict[str, Any]) -> str:
        parts = [f"{label} {m[key]['median_abs_error']:.1%} ({m[key]['rows']})" for key, label in _NAMES
                 if m[key]["rows"]]
        return ", ".join(parts) if parts else "no rows"

    lines = [f"  median |error| (rows) over the {s['points']} held-out priced points: {med(s)}",
             f"    engines {', '.join(s['engines'])}; accelerators {', '.join(s['accelerators'])}; "
             f"{s['recorded']} points recorded (engines {', '.join(s['recorded_engines'])}; accelerators "
             f"{', '.join(s['recorded_accelerators'])})"]
    for engine, m in s["by_engine"].items():
        lines.append(f"    {engine} ({m['points']} points): {med(m)}")
    if s["not_held_out"]:
        lines.append(f"    not held out (their step row fitted the constants): {', '.join(s['not_held_out'])}")
    if s["refused"]:
        lines.append(f"    not priced ({len(s['refused'])}, no constants for their profile): {', '.join(s['refused'])}")
    t = s["tpot_target"]
    verdict = "no rows" if t["met"] is None else ("met" if t["met"] else "MISSED")
    lines.append(f"  target: {t['target']}: " + ("-" if t["value"] is None else f"{t['value']:.1%}")
                 + f" ({t['rows']} rows), {verdict}")
    return lines


def _serving_source(src: dict[str, Any]) -> str:
    """A serving point's source as one text: citation, URL (date)."""
    return f"{src['citation']}, {src['url']} ({src['date']})"


def _median(values: Any) -> float | None:
    import statistics

    xs = [abs(v) for v in values if v is not None]
    return statistics.median(xs) if xs else None


def format_report(report: Report, *, pending: Sequence[PendingPoint] = (), verbose: bool = True,
                  sources: _SourceKeys | None = None) -> str:
    """``roofline validate``'s table as text: one line per row, the medians, constants, sources, omissions.

    Parameters
    ----------
    report : roofline.calibrate.Report
    pending : sequence of roofline.calibrate.PendingPoint
        Published points this version cannot price (:func:`roofline.calibrate.pending_published`),
        listed last with their measured step time [ms] and reasons; none by default.
    verbose : bool, default True
        True: every published point's quotes, metric, composition and omissions, every constant's
        citation and every engine-profile constant's source, lines unwrapped, and (when ``sources``
        is not given) the sources listed last, each once by its key. False (the command without
        ``--verbose``): the published points counted, a pointer to ``--verbose``, and every line
        within 100 columns (:func:`roofline.units.fit_width`).
    sources : _SourceKeys, optional
        The keys ("S1", "S2", ...) the rows' sources get in the tables, shared with
        :func:`format_serving` by the command (which then lists them once, at the end); by default
        the report's own.

    Returns
    -------
    str, without a final newline. Times in ms (thousands separators), errors in percent.
    """
    from ..calibrate.compare import LEFT_OUT

    lines = [
        "Predicted vs measured decode step time, FLOPs "
        f"{report.flops}; error = (predicted - measured) / measured",
        "  bound: roofline max(bytes / bandwidth, FLOPs / peak), overhead 0, constants never fitted "
        "(spec = datasheet, meas. = measured constants)",
        "  estimate: max(bytes / (eta_bw x bandwidth), FLOPs / (eta_mm x peak)) + t_step + L x t_layer "
        "with the row's engine profile, constants fitted on the calibration subset only",
        "",
    ]
    keys = _SourceKeys() if sources is None else sources
    lines += _step_tables(report, keys)
    lines.append("")
    from ..calibrate.compare import CPU_NOTE

    n_spec = sum(r.error_spec is not None for r in report.accelerator_rows)
    lines.append(
        f"median |error|: spec constants {_pct(report.median_abs_error_spec, signed=False)} "
        f"({n_spec} rows); measured constants {_pct(report.median_abs_error_measured, signed=False)} "
        f"({len(report.accelerator_rows)} rows)"
    )
    cpu = report.cpu_rows
    if cpu:
        cpu_median = _median(r.error_measured for r in cpu)
        lines.append(f"  CPU rows: measured constants {_pct(cpu_median, signed=False)} ({len(cpu)} rows). {CPU_NOTE}.")
    groups = report.groups()
    if len(groups) > 1:
        for name, g in groups.items():
            lines.append(
                f"  {name}: spec {_pct(g['median_abs_error_spec'], signed=False)}, "
                f"measured {_pct(g['median_abs_error_measured'], signed=False)} ({g['rows']} rows)"
            )
    lines.extend(_subset_lines(report))
    lines.append("")
    lines.append("Constants (bandwidth, dense BF16 peak):")
    seen = set()
    for r in report.rows:
        m = r.measurement
        for label, acc in (("spec", m.spec), ("measured", m.measured_constants)):
            # two measured copies of one preset (published constants, a calibration file) share a key: both shown
            ident = None if acc is None else (label, acc.key, acc.bandwidth, acc.peak_flops)
            if acc is None or ident in seen:
                continue
            seen.add(ident)
            # the measured copy of a device nobody has measured falls back on its datasheet: said so in the label
            unmeasured = label == "measured" and "measured" not in (acc.hbm_bandwidth.source.kind,
                                                                   acc.peak_bf16.source.kind)
            # each citation by its key, given in both modes so a source's key is the same with and without --verbose
            bw_key, peak_key = keys.key(acc.hbm_bandwidth.source.citation), keys.key(acc.peak_bf16.source.citation)
            lines.append(
                f"  {label:8} {_device(acc.key)}{' (none published: its datasheet)' if unmeasured else ''}: "
                f"{float(acc.bandwidth) / 1e9:,.0f} GB/s "
                f"[{acc.hbm_bandwidth.source.kind}{': ' + bw_key if verbose else ''}], "
                f"{float(acc.peak_flops) / 1e12:,.1f} TFLOP/s [{acc.peak_bf16.source.kind}"
                f"{': ' + peak_key if verbose else ''}]"
            )
    unavailable = dict(report.unavailable)
    fitted = {p.name for p in report.profiles}
    for point in pending:
        if point.engine_profile and point.split == "calibration" and point.engine_profile not in fitted:
            why = unavailable.get(point.engine_profile, "its calibration rows are not priced yet:")
            unavailable[point.engine_profile] = f"{why} {point.id} ({'; '.join(point.reasons)})"
    if report.profiles or unavailable:
        lines.append("")
        lines.append("Engine profiles of the estimate (constants: value [kind: source]):")
        for p in report.profiles:
            lines.append(f"  {p.name} (--estimate {p.key}): {p.describe()}")
            lines.append(f"    band: {p.error_band()}")
            if p.fitted_range is not None:
                lines.append(f"    range: {p.fitted_range.describe()}")
            for acc, v in p.eta_bw_by_accelerator:
                lines.append(f"    eta_bw on {acc}: {float(v.value):.4f} [{v.source.kind}"
                             f"{': ' + v.source.citation if verbose else ''}]; "
                             f"other accelerators: the profile default {float(p.eta_bw.value):.4f}")
            if p.eta_bw_by_weight_dtype:
                per = ", ".join(f"{d} {float(v.value):.4f}" for d, v in p.eta_bw_by_weight_dtype)
                lines.append(f"    eta_bw by weight dtype [fitted, the profile's times held]: {per}; other dtypes: "
                             f"the accelerator's or the profile default {float(p.eta_bw.value):.4f}")
                if verbose:
                    lines += [f"      {d}: {v.source.citation}" for d, v in p.eta_bw_by_weight_dtype]
            if not verbose:
                continue
            for name, v in p.sources().items():
                lines.append(f"    {name}: {v.source.kind}: {v.source.citation}")
            for item in (*p.fixed, *p.left_out):
                lines.append(f"    {item}")
        if report.profiles:
            lines.append(f"  fit: {report.profiles[0].eta_bw.source.conditions}")
        for name, why in unavailable.items():
            lines.append(f"  {name}: no constants; {why}")
    published = [r.measurement for r in report.rows if r.measurement.group == "published"]
    if published:
        lines.append("")
        lines.append("Published points (source; step composition assumed):")
        if not verbose:
            lines.append(f"  {len(published)} points; roofline validate --verbose prints each one's source, the "
                         "quoted figures, the metric, the step composition assumed and what it leaves out")
        for m in published if verbose else ():
            lines.append(f"  {m.id} [{keys.key(m.source)}]:")
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
            lines.append(f"  {name} [{keys.key(first.source)}]: {first.source}")
    lines.append("")
    lines.append("Left out of the model (why predictions can fall short of measurements):")
    for item in LEFT_OUT:
        lines.append(f"  - {item}")
    if pending:
        lines.append("")
        lines.append(f"Published points not priced by this version ({len(pending)}; measured step time, why):")
        for p in pending:
            lines.append(f"  {p.id}: {p.measured_s * 1e3:.3f} ms; {'; '.join(p.reasons)}")
    if verbose:  # the long listing, one source a line: not wrapped
        if sources is None:
            lines += keys.listing()
        return "\n".join(lines)
    return fit_width("\n".join(lines))


_SUBSET = {"calibration": "cal", "validation": "val", "": "-"}


class _SourceKeys:
    """Short keys for sources ("S1", "S2", ... in order of first use), so a table names a row's source in 3
    columns and ``--verbose`` prints each source once (:meth:`listing`)."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}

    def key(self, source: str) -> str:
        """The key of ``source`` (a citation as text), given on first use."""
        return self._keys.setdefault(source, f"S{len(self._keys) + 1}")

    def listing(self) -> list[str]:
        """The sources, one a line by key (unwrapped: a citation's URL stays whole); none: no lines."""
        if not self._keys:
            return []
        return ["", "Sources (each once; the tables name them by key):",
                *(f"  {k:>4}  {source}" for source, k in self._keys.items())]


def _step_tables(report: Report, keys: _SourceKeys) -> list[str]:
    """The rows as two tables keyed by id, each within 100 columns for the shipped ids: the step times and
    errors (one unit a column), then what each row is (model, batch, context, subset, regime, source key)."""
    times = [("", "", "measured", "bound, spec", "", "bound, meas.", "", "estimate", ""),
             ("id", "", "[ms]", "[ms]", "error", "[ms]", "error", "[ms]", "error")]
    about = [("id", "model", "B", "ctx sum", "subset", "regime", "source")]
    for r in report.rows:
        m = r.measurement
        times.append((m.id, "", _ms(m.measured_s), _ms(r.predicted_spec_s), _pct(r.error_spec),
                      _ms(r.predicted_measured_s), _pct(r.error_measured), _ms(r.estimate_s), _pct(r.error_estimate)))
        about.append((m.id, m.model.name, f"{m.batch:,}", f"{m.context_sum:,}", _SUBSET.get(m.split, m.split),
                      r.bound_measured, keys.key(m.source)))
    lines = ["Decode step time [ms] and error: measured, the bound (spec, measured constants), the estimate"]
    lines += _aligned(times, gaps=(0, 0, 2, 2, 1, 2, 1, 2, 1), center={3, 5, 7})
    lines += ["", "The rows (B: sequences in the step; ctx sum: their contexts [tokens]; regime: of the bound "
              "with measured constants; source: --verbose lists it)"]
    lines += _aligned(about, gaps=(0, 2, 2, 2, 2, 2, 2), left={0, 1, 5, 6})
    return lines


def _aligned(table: Sequence[Sequence[str]], *, gaps: Sequence[int], left: AbstractSet[int] = frozenset({0}),
             center: AbstractSet[int] = frozenset()) -> list[str]:
    """``table``'s rows as lines: each column as wide as its widest cell, ``gaps[i]`` spaces before column i,
    numbers right-aligned; a header cell in ``center`` spans its column and the next (a two-row header)."""
    n = len(gaps)
    widths = [max(len(row[i]) for row in table if i not in center or row[i + 1 if i + 1 < n else i] != "")
              if any(row[i] for row in table) else 0 for i in range(n)]
    # a spanning header ("bound, spec" over "[ms] error") widens the pair if it needs more room than they have
    for i in center:
        span = widths[i] + gaps[i + 1] + widths[i + 1]
        head = max(len(row[i]) for row in table if row[i + 1] == "")
        widths[i] += max(0, head - span)
    out = []
    for row in table:
        cells, i = [], 0
        while i < n:
            if i in center and row[i + 1] == "" and row[i]:
                w = widths[i] + gaps[i + 1] + widths[i + 1]
                cells.append(" " * gaps[i] + row[i].rjust(w))
                i += 2
                continue
            c = row[i]
            cells.append(" " * gaps[i] + (c.ljust(widths[i]) if i in left else c.rjust(widths[i])))
            i += 1
        out.append("".join(cells).rstrip())
    return out


def _device(key: str) -> str:
    """An accelerator key without the "measured" tag its measured copy carries (the line's label says it).

    ``"a100-80gb:measured"`` (:meth:`roofline.Accelerator.measured`) and ``"measured:cpu"`` (a calibration
    file without a preset) become ``"a100-80gb"`` and ``"cpu"``.
    """
    return key.removesuffix(":measured").removeprefix("measured:")


def _subset_lines(report: Report) -> list[str]:
    """Median and maximum |error| of bound and estimate per subset, then the estimate's targets."""
    subsets = report.subsets()
    if set(subsets) <= {""} and not any(r.error_estimate is not None for r in report.rows):
        return []
    lines = ["", "Per subset (|error|: median / max; bound = spec constants):"]
    names = {"calibration": "calibration (constants fitted here)", "validation": "validation (held out)",
             "": "no subset"}
    for name, g in subsets.items():
        lines.append(
            f"  {names[name]}: {g['rows']} rows; bound {_pair(g, 'bound')}; estimate {_pair(g, 'estimate')}"
        )
        if g["batch1_rows"]:
            lines.append(
                f"    batch 1: {g['batch1_rows']} rows; bound {_pair(g, 'batch1_bound')}; "
                f"estimate {_pair(g, 'batch1_estimate')}"
            )
    for t in report.targets():
        verdict = "no estimate" if t["met"] is None else ("met" if t["met"] else "MISSED")
        lines.append(f"  target: {t['target']}: {_pct(t['value'], signed=False)}, {verdict}")
        if t["met"] is False and t["beyond"]:  # the rows that miss it, by how much (docs/conventions.md)
            lines.append("    beyond the limit: " + ", ".join(
                f"{i} {_pct(e)} ({d * 1e3:+,.2f} ms)" for i, e, d in t["beyond"]))
            if t["lacks"]:
                lines.append(f"    the estimate lacks: {t['lacks']}")
    return lines


def _pair(g: dict[str, Any], what: str) -> str:
    n = g[f"{what}_rows"]
    if not n:
        return "n/a"
    return f"{_pct(g[f'{what}_median'], signed=False)} / {_pct(g[f'{what}_max'], signed=False)} ({n} rows)"


def _ms(seconds: float | None) -> str:
    """A time [s] in ms with 3 decimals and thousands separators, without the unit (the column names it)."""
    return "n/a" if seconds is None else f"{float(seconds) * 1e3:,.3f}"


def _pct(value: float | None, *, signed: bool = True) -> str:
    return format_share(value, signed=signed)
