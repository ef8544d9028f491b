"""The whole ``roofline calibrate`` run: device facts, bandwidth, matmul and decode steps in one validated document."""

from __future__ import annotations

import datetime
import platform
import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidValueError
from .decode_step import ATTENTION, measure_decode
from .device import device_info, import_torch, resolve_torch_device
from .microbench import measure_bandwidth, measure_matmul
from .plan import CalibrationPlan
from .schema import FILE_KIND, SCHEMA_VERSION, parse_calibration

__all__ = ["run_calibration", "check_spread", "MAX_SPREAD", "widest_spread"]

#: Widest spread of repetitions, (max - min) / median [1], that ``roofline calibrate`` writes by default:
#: beyond it the device was busy or throttling (on a loaded CPU one run measured 2.1 GFLOP/s and the
#: next 650), and the best and typical values do not describe the device.
MAX_SPREAD = 1


def run_calibration(
    plan: CalibrationPlan | None = None,
    *,
    device: str = "auto",
    accelerator: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure bandwidth, matmul FLOP/s and decode step times; return the calibration document.

    Parameters
    ----------
    plan : CalibrationPlan, optional
        Default: :meth:`CalibrationPlan.default` for the device's type.
    device : str
        ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
    accelerator : str, optional
        The accelerator preset this device is (e.g. ``"h100-sxm"``), for the spec
        constants in ``roofline validate``; default: recognised from the CUDA device
        name (:func:`roofline.calibrate.preset_for_device`), none on CPU.
    progress : callable, optional
        Called with one human-readable line per measurement.

    Returns
    -------
    dict
        A document of schema 1 (layout: :mod:`roofline.calibrate`), already validated;
        write it with :func:`roofline.calibrate.write_calibration`.

    Raises
    ------
    RooflineError
        PyTorch is not installed (install roofline[calibrate]).
    InvalidValueError
        A bad device, preset or plan; CUDA graphs requested off CUDA; weights that do
        not fit.
    """
    torch = import_torch()
    dev = resolve_torch_device(torch, device)
    if plan is None:
        plan = CalibrationPlan.default(dev.type)
    if not isinstance(plan, CalibrationPlan):
        raise InvalidValueError("plan", plan, "must be a CalibrationPlan")
    if plan.cuda_graphs and dev.type != "cuda":
        raise InvalidValueError("cuda_graphs", True, f"CUDA graphs need a CUDA device, not {dev.type}")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    facts = device_info(torch, dev, accelerator)
    say(f"device: {facts['name']} ({dev})")

    bandwidth = measure_bandwidth(
        str(dev), nbytes=plan.bandwidth_bytes, repetitions=plan.repetitions, warmup=min(plan.warmup, 3)
    )
    say(f"bandwidth: {bandwidth['value'] / 1e9:.1f} GB/s best ({bandwidth['method']}), "
        f"{bandwidth['typical'] / 1e9:.1f} GB/s median")
    matmul = measure_matmul(
        str(dev), shapes=plan.matmul_shapes, dtype=plan.model.weight_dtype,
        repetitions=plan.repetitions, warmup=plan.warmup,
    )
    say(f"matmul {matmul['dtype']}: {matmul['value'] / 1e12:.2f} TFLOP/s best, "
        f"{matmul['typical'] / 1e12:.2f} TFLOP/s typical")
    remaining = None
    if plan.max_seconds is not None:
        remaining = max(plan.max_seconds - (time.perf_counter() - started), 1e-3)
    decode = measure_decode(
        str(dev), model=plan.model, batches=plan.batches, contexts=plan.contexts,
        repetitions=plan.repetitions, warmup=plan.warmup, cuda_graphs=plan.cuda_graphs,
        max_seconds=remaining, progress=say,
    )
    import numpy

    from .. import __version__

    doc = {
        "schema": SCHEMA_VERSION,
        "kind": FILE_KIND,
        "created": created,
        "device": facts,
        "software": {
            "python": platform.python_version(),
            "torch": str(torch.__version__),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
            "numpy": numpy.__version__,
            "roofline": __version__,
            "platform": platform.platform(),
        },
        "method": {
            "timer": "torch.cuda.Event per repetition" if dev.type == "cuda" else "time.perf_counter per repetition",
            "warmup": plan.warmup,
            "repetitions": plan.repetitions,
            "statistics": "best = fastest repetition; typical = median repetition; "
                          "spread = (max - min) / median",
            "cuda_graphs": plan.cuda_graphs,
            "attention": ATTENTION,
            "dtype": plan.model.weight_dtype,
            "threads": int(torch.get_num_threads()),
            "max_seconds": plan.max_seconds,
        },
        "bandwidth": bandwidth,
        "matmul": matmul,
        "decode": decode,
        "elapsed_s": time.perf_counter() - started,
    }
    if not decode["points"]:
        raise InvalidValueError("batches", plan.batches, "no decode point could be measured: "
                                + "; ".join(s["reason"] for s in decode["skipped"][:3]))
    parse_calibration(doc, path="<new calibration>")
    return doc


def widest_spread(doc: dict[str, Any]) -> tuple[str, float]:
    """The measurement whose repetitions spread widest, and that spread [1] ((max - min) / median).

    Looks at the bandwidth method reported (``bandwidth.method``), every matmul shape and every
    decode point of a calibration document (layout: :mod:`roofline.calibrate`).
    """
    bw = doc["bandwidth"]
    found = [(f"bandwidth ({bw['method']})", float(bw["methods"][bw["method"]]["spread"]))]
    found += [(f"matmul {s['m']}x{s['n']}x{s['k']}", float(s["spread"])) for s in doc["matmul"]["shapes"]]
    found += [(f"decode batch {p['batch']} context {p['context']}", float(p["spread"]))
              for p in doc["decode"]["points"]]
    return max(found, key=lambda item: item[1])


def check_spread(doc: dict[str, Any], limit: float = MAX_SPREAD, *, field: str = "max_spread") -> None:
    """Refuse a calibration whose repetitions spread wider than ``limit``.

    Parameters
    ----------
    doc : dict, a calibration document
    limit : float > 0 [1], the widest (max - min) / median accepted (default :data:`MAX_SPREAD`)
    field : str, the name the error gives the limit (``--max-spread`` on the command line)

    Raises
    ------
    InvalidValueError
        The widest spread is above ``limit`` (field ``field``, naming the measurement and its spread).
    """
    where, widest = widest_spread(doc)
    if widest > limit:
        raise InvalidValueError(field, float(limit), f"the repetitions of {where} spread {widest:.0%} "
                                f"((max - min) / median), wider than the {limit * 100:g}% limit: the device was "
                                "busy or throttling, so nothing was written; rerun on an idle device (or raise the "
                                "limit)")
