"""``roofline calibrate``: measure bandwidth, matmul FLOP/s and decode steps; write a JSON file.

Needs PyTorch (``pip install 'roofline[calibrate]'``; from a clone ``pip install -e '.[calibrate]'``).
On a GPU the defaults measure Llama 3.1 8B shapes (random weights) at batches 1 to 256 and contexts 128, 1,000 and
4,096 with CUDA graphs, within 3 minutes; on a CPU, tiny shapes in seconds. The file
layout is documented in :mod:`roofline.calibrate`; ``roofline validate --measurements
FILE`` compares the model with it.

Results whose repetitions spread wider than ``--max-spread`` ((max - min) / median; default
100%, :data:`roofline.calibrate.run.MAX_SPREAD`) are refused, not written: the device was busy.
``--out`` is checked before anything is measured (an empty path, or the config read, is
refused) and the file is written atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from fractions import Fraction
from typing import Any

from .._io import check_outputs, output_path
from ..errors import InvalidValueError
from ._args import by_flag, int_arg, number_arg, plain

__all__ = ["register", "run", "parse_ints", "parse_shapes"]


def parse_ints(option: str, text: str) -> tuple[int, ...]:
    """Comma-separated integers >= 1 (``"1,2,4"``) as a tuple.

    Raises
    ------
    InvalidValueError
        Naming ``option``, for an empty list or an entry that is not an integer >= 1.

    Examples
    --------
    >>> parse_ints("--batches", "1, 2,4")
    (1, 2, 4)
    """
    try:
        if not text.isascii():  # int() would read Arabic-Indic or full-width digits
            raise ValueError(text)
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidValueError(option, text, "expected comma-separated integers, e.g. 1,2,4") from None
    if not values or any(v < 1 for v in values):
        raise InvalidValueError(option, text, "expected comma-separated integers >= 1")
    return values


def parse_shapes(option: str, text: str) -> tuple[tuple[int, int, int], ...]:
    """Comma-separated matmul shapes ``MxNxK`` (``"4096x4096x4096,8192x8192x8192"``).

    Raises
    ------
    InvalidValueError
        Naming ``option``, for a shape that is not three integers >= 1 joined by ``x``.

    Examples
    --------
    >>> parse_shapes("--matmul", "128x256x64")
    ((128, 256, 64),)
    """
    shapes = []
    for part in text.split(","):
        if not part.strip():
            continue
        dims = part.lower().split("x")
        try:
            if not part.isascii():  # int() would read Arabic-Indic or full-width digits
                raise ValueError(part)
            m, n, k = (int(d) for d in dims)
        except ValueError:
            raise InvalidValueError(option, text, f"{part.strip()!r} is not MxNxK") from None
        if min(m, n, k) < 1:
            raise InvalidValueError(option, text, "dimensions must be >= 1")
        shapes.append((m, n, k))
    if not shapes:
        raise InvalidValueError(option, text, "expected at least one MxNxK shape")
    return tuple(shapes)


def register(subparsers: Any) -> None:
    """Add the ``calibrate`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "calibrate",
        help="measure bandwidth, matmul FLOP/s and decode step times (needs PyTorch)",
        description="Measure on the local accelerator (or CPU): achievable memory bandwidth, "
        "dense matmul FLOP/s, and decode step times of a transformer with a config's shapes "
        "and random weights; write them with their provenance to a JSON file (schema 1). "
        "Needs PyTorch: pip install 'roofline[calibrate]' (from a clone: pip install -e '.[calibrate]'). "
        + plain(__doc__).split("\n\n")[-1].replace("\n", " "),
    )
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="where to write the JSON file (default calibrate-<device>-<date>.json)")
    p.add_argument("--model", default=None, metavar="NAME|config.json",
                   help="shapes to measure (default: llama-3.1-8b on a GPU, tiny shapes on CPU)")
    p.add_argument("--batches", default=None, metavar="LIST", help="batch sizes, e.g. 1,2,4,8")
    p.add_argument("--contexts", default=None, metavar="LIST",
                   help="context per sequence [tokens], e.g. 128,1000,4096")
    p.add_argument("--repetitions", type=int_arg("--repetitions", 1), default=None, metavar="N",
                   help="timed repetitions")
    p.add_argument("--warmup", type=int_arg("--warmup", 0), default=None, metavar="N", help="untimed warm-up runs")
    p.add_argument("--bandwidth-mib", type=int_arg("--bandwidth-mib", 1), default=None, metavar="MIB",
                   help="bandwidth buffer size [MiB] (GPU default 2048, CPU 256)")
    p.add_argument("--matmul", default=None, metavar="SHAPES", help="matmul shapes MxNxK,...")
    graphs = p.add_mutually_exclusive_group()
    graphs.add_argument("--cuda-graphs", dest="cuda_graphs", action="store_true", default=None,
                        help="replay decode steps from CUDA graphs (GPU default)")
    graphs.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                        help="time decode steps eagerly")
    p.add_argument("--max-seconds", type=number_arg("--max-seconds", positive=True), default=None, metavar="S",
                   help="skip decode points not started within S seconds (GPU default 150)")
    p.add_argument("--accelerator", default=None, metavar="PRESET",
                   help="the preset this device is (default: recognised from the GPU's name)")
    p.add_argument("--max-spread", type=number_arg("--max-spread", positive=True), default=None, metavar="F",
                   help="widest spread of repetitions, (max - min) / median, written (default: 1, i.e. 100%%); "
                        "wider results are refused")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true",
                   help="print the written path and the calibration document as JSON instead of the summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``roofline calibrate``; return 0.

    Raises
    ------
    RooflineError
        PyTorch missing (install roofline[calibrate]), a bad option, or a file that
        cannot be written.
    """
    import attrs

    from ..calibrate import CalibrationPlan, resolve_device, run_calibration, write_calibration
    from ..calibrate.run import MAX_SPREAD, check_spread
    from ..hardware import get_accelerator
    from ..models import load_model

    if args.out is not None:
        target = output_path("--out", args.out)
        if target.is_dir():
            raise InvalidValueError("--out", args.out, "is a folder; name the JSON file to write")
        if not target.resolve().parent.is_dir():
            raise InvalidValueError("--out", args.out, "its folder does not exist")
        check_outputs("--out", [args.out], [args.model if args.model and os.path.isfile(args.model) else None])
    # every option is checked before PyTorch is looked for: a bad option is named whatever is installed
    changes: dict[str, Any] = {}
    if args.batches is not None:
        changes["batches"] = parse_ints("--batches", args.batches)
    if args.contexts is not None:
        changes["contexts"] = parse_ints("--contexts", args.contexts)
    if args.matmul is not None:
        changes["matmul_shapes"] = parse_shapes("--matmul", args.matmul)
    model = by_flag("--model", load_model, args.model) if args.model else None
    dev = resolve_device(args.device)
    plan = CalibrationPlan.default(dev.type, model=model)
    if args.repetitions is not None:
        changes["repetitions"] = args.repetitions
    if args.warmup is not None:
        changes["warmup"] = args.warmup
    if args.bandwidth_mib is not None:
        if args.bandwidth_mib < 1:
            raise InvalidValueError("--bandwidth-mib", args.bandwidth_mib, "must be >= 1")
        changes["bandwidth_bytes"] = args.bandwidth_mib * 2**20
    if args.cuda_graphs is not None:
        changes["cuda_graphs"] = args.cuda_graphs
    if args.max_seconds is not None:
        changes["max_seconds"] = float(args.max_seconds)
    plan = attrs.evolve(plan, **changes)
    accelerator = by_flag("--accelerator", get_accelerator, args.accelerator).key if args.accelerator else None
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    doc = run_calibration(plan, device=str(dev), accelerator=accelerator, progress=progress)
    limit = Fraction(MAX_SPREAD) if args.max_spread is None else args.max_spread
    check_spread(doc, float(limit), field="--max-spread")
    out = args.out or _default_name(doc)
    path = write_calibration(doc, out)
    if args.json:
        print(json.dumps({"written": str(path), "calibration": doc}, indent=2))
    else:
        _summary(doc, str(path))
    return 0


def _default_name(doc: dict[str, Any]) -> str:
    import re

    slug = re.sub(r"[^a-z0-9]+", "-", doc["device"]["name"].lower()).strip("-")
    return f"calibrate-{slug}-{doc['created'][:10]}.json"


def _summary(doc: dict[str, Any], path: str) -> None:
    bw, mm, dec = doc["bandwidth"], doc["matmul"], doc["decode"]
    dev = doc["device"]
    print(f"device: {dev['name']} (preset: {dev.get('preset') or 'none'}); torch {doc['software']['torch']}")
    print(f"bandwidth: {bw['value'] / 1e9:,.1f} GB/s best ({bw['method']}), "
          f"{bw['typical'] / 1e9:,.1f} GB/s typical; buffer {bw['buffer_bytes'] / 2**20:,.0f} MiB")
    print(f"matmul {mm['dtype']}: {mm['value'] / 1e12:,.3f} TFLOP/s best, "
          f"{mm['typical'] / 1e12:,.3f} TFLOP/s typical over {len(mm['shapes'])} shapes")
    print(f"decode ({dec['model']['name']}, CUDA graphs {'on' if dec['cuda_graphs'] else 'off'}):")
    print(f"  {'batch':>5}  {'context':>7}  {'median':>11}  {'best':>11}  {'spread':>7}")
    for p in dec["points"]:
        print(f"  {p['batch']:>5}  {p['context']:>7}  {p['median_s'] * 1e3:>8.3f} ms  "
              f"{p['best_s'] * 1e3:>8.3f} ms  {p['spread']:>7.1%}")
    for s in dec["skipped"]:
        print(f"  skipped batch {s['batch']} context {s['context']}: {s['reason']}")
    print(f"wrote {path}  (compare: roofline validate --measurements {path})")
