"""``roofline validate``: the model's decode step times against measured ones.

Rows: the shipped published points (``roofline/data/measurements/published.json``),
the shipped calibration files, and any ``--measurements FILE`` written by ``roofline
calibrate``. Prints, per row, the prediction with spec and with measured constants,
their errors, the median absolute errors, the sources and what the model leaves out,
then the published points this version cannot price yet and why (tensor parallelism, a
missing preset); ``--json`` prints the same as JSON. See :mod:`roofline.validate`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register", "run"]


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
    from ..validate import default_measurements, pending_published, validate

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
        print(report.format())
        if pending:
            print("")
            print(f"Published points not priced by this version ({len(pending)}; measured step time, why):")
            for p in pending:
                print(f"  {p.id}: {p.measured_s * 1e3:.3f} ms; {'; '.join(p.reasons)}")
    return 0
