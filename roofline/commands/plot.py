"""``roofline plot``: write the lesson's two charts to PNG and SVG.

* ``throughput_vs_batch``: decode throughput against batch size for a model on an
  accelerator (default Llama 3.1 8B in BF16 on an H100 SXM), weights only and with each
  sequence's KV reads at ``--context`` tokens (ending where a ``--kv-budget-gb`` cache is
  full), with the compute ceiling and the ridge (critical batch) marked;
* ``useful_share_vs_spread``: the expected useful share of a static batch against the
  spread of uniform random output lengths for batch sizes 2 to 64, exact E[X / max] and
  the lesson's mean / longest.

FLOPs per token follow ``--flops``: "exact" by default, as the table of ``roofline report``;
"2p" (2 x P) draws the lesson's own chart. ``--out`` is refused when empty or when it
names the config read; each file is written atomically.

Needs matplotlib (``pip install 'roofline[plot]'``; from a clone ``pip install -e '.[plot]'``).
Example: ``roofline plot --out charts``.
"""

from __future__ import annotations

import argparse
import json
import os
from fractions import Fraction
from typing import Any

from .. import estimate
from .._io import check_outputs, output_path
from ..errors import InvalidValueError
from ..units import GB
from ._args import (
    add_flops_option,
    add_model_options,
    add_pipeline_parallel_option,
    add_tensor_parallel_option,
    deployment_from_args,
    int_arg,
    number_arg,
    plain,
)
from .report import LESSON_KV_BUDGET_GB


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``plot`` subcommand."""
    p = sub.add_parser(
        "plot",
        help="write the lesson's two charts (throughput vs batch, useful share vs spread) to PNG and SVG",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="charts", help="output folder, created if missing (default: %(default)s)")
    p.add_argument("--format", dest="formats", choices=("png", "svg"), nargs="+", default=["png", "svg"],
                   help="file formats (default: png svg)")
    add_model_options(p, dtypes=False)
    p.add_argument("--context", type=int_arg("--context", 1), default=1000,
                   help="tokens of context per sequence for the KV curve (default: %(default)s)")
    p.add_argument("--kv-budget-gb", type=number_arg("--kv-budget-gb", positive=True), default=None,
                   help="KV cache size in GB (1e9 bytes) where the KV curve ends, per GPU under tensor parallelism "
                        "(default: the lesson's 53, or what the GPU leaves after the weights at utilization 0.9 and "
                        "reserve 0 when that is less)")
    p.add_argument("--max-batch", type=int_arg("--max-batch", 2, maximum=100_000), default=512,
                   help="largest batch size drawn (default: %(default)s)")
    add_flops_option(p, default="exact")
    add_tensor_parallel_option(p, default=None)
    add_pipeline_parallel_option(p)
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    p.set_defaults(func=run)


def run(args: Any) -> int:
    """Write the charts and print their paths; 0 on success."""
    from ..plotting import CHART_NAMES, _matplotlib, write_charts

    _matplotlib()  # refused before anything is written (no empty --out folder left behind)
    out = output_path("--out", args.out)
    inputs = [args.model if os.path.isfile(args.model) else None]
    check_outputs("--out", [out, *(out / f"{stem}.{fmt}" for stem in CHART_NAMES for fmt in args.formats)], inputs)
    # not given: one GPU, or the smallest group that fits, said so (as roofline report does)
    deployment, chosen = deployment_from_args(args)
    whole, accelerator, tp = deployment.model, deployment.accelerator, deployment.tensor_parallel_size
    notes = []
    if chosen:
        notes.append(f"{whole.name} does not fit one {accelerator.name} (weights "
                     f"{float(whole.weight_bytes) / 1e9:.2f} GB); the charts are for --tensor-parallel-size {tp}")
    # what the GPU leaves after the weights (reserve 0); refuses, naming the budget, when nothing is left
    room = estimate.kv_budget_for(deployment)
    per_gpu = "" if tp == 1 else " per GPU"
    if args.kv_budget_gb is None:
        kv_budget: Any = min(Fraction(LESSON_KV_BUDGET_GB * GB), room)
        if room < LESSON_KV_BUDGET_GB * GB:
            notes.append(f"the lesson's {LESSON_KV_BUDGET_GB} GB KV budget exceeds the {float(room) / 1e9:.2f} GB "
                         f"this GPU leaves after the weights (utilization 0.9, reserve 0): the KV curve ends at "
                         f"{float(room) / 1e9:.2f} GB{per_gpu}")
    else:
        kv_budget = args.kv_budget_gb * GB
        if kv_budget > room:
            notes.append(f"--kv-budget-gb {float(args.kv_budget_gb):g} exceeds the {float(room) / 1e9:.2f} GB this GPU "
                         "leaves after the weights (utilization 0.9, reserve 0): the KV curve is a what-if")
    try:
        paths = write_charts(args.out, deployment, formats=args.formats, context=args.context,
                             kv_budget=int(kv_budget), max_batch=args.max_batch)
    except InvalidValueError as err:  # the library's out_dir is the --out flag here
        if err.field != "out_dir":
            raise
        raise InvalidValueError("--out", args.out, err.reason) from None
    if args.json:
        print(json.dumps({"written": [str(path) for path in paths], "tensor_parallel_size": tp,
                          "kv_budget_bytes": int(kv_budget), "notes": notes}, indent=2))
    else:
        for line in (*notes, *map(str, paths)):
            print(line)
    return 0
