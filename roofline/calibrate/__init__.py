"""The measurement side: ``roofline calibrate`` measures, ``roofline validate`` compares.

One module per job:

* :mod:`~roofline.calibrate.plan`: what to measure (:class:`CalibrationPlan`, :data:`TINY_MODEL`);
* :mod:`~roofline.calibrate.device`: PyTorch, the device, its facts, timing calls on it;
* :mod:`~roofline.calibrate.microbench`: memory bandwidth and matmul FLOP/s;
* :mod:`~roofline.calibrate.decode_step`: the synthetic decode step and its timing;
* :mod:`~roofline.calibrate.run`: the whole run, one validated document;
* :mod:`~roofline.calibrate.schema`: the calibration file (read, check, write), the
  measured :class:`roofline.Accelerator`, and the :class:`Measurement` row type;
* :mod:`~roofline.calibrate.published`: the published points, quoted from their sources;
* :mod:`~roofline.calibrate.compare`: predictions with spec and measured constants (the
  bound) and an engine profile's estimate, their errors and medians (:func:`validate`);
* :mod:`~roofline.calibrate.fit`: the engine profiles of the estimate, fitted on the
  calibration subset only (:func:`get_engine_profile`, :func:`validate_with_estimates`).

The text of both commands is laid out in :mod:`roofline.commands.calibrate` and
:mod:`roofline.commands.validate`.

Measured constants: ``roofline calibrate`` and the calibration file it writes
-----------------------------------------------------------------------------

``roofline calibrate`` measures, on the local accelerator (or the CPU, with tiny
shapes), three things and writes them with their provenance to one JSON file:

1. the achievable memory bandwidth [bytes/s] (a large copy, 2 x the buffer counted,
   and a large read, the buffer counted once; the better one is used);
2. dense matmul FLOP/s [FLOP/s] in the model's weight dtype (BF16 by default) over a
   few shapes: best and typical;
3. decode step times [s] of a transformer with a given config's shapes and random
   weights (no download; Llama 3.1 8B shapes by default on a GPU): every layer's
   projections, the MLP, attention over a KV cache with
   ``torch.nn.functional.scaled_dot_product_attention`` and the lm_head, for each
   batch size and context, with or without CUDA graphs (said in the file).

:func:`load_calibration` reads such a file back, checking every field, and
:meth:`Calibration.accelerator` / :func:`measured_accelerator` turn it into a
measured :class:`roofline.Accelerator` (values with a :class:`roofline.Source` of
kind ``"measured"``). ``roofline validate`` compares the model's predictions with
the measured decode steps.

PyTorch is an optional dependency (``pip install 'roofline[calibrate]'``).
Neither ``import roofline`` nor ``import roofline.calibrate`` imports it: only the
measuring functions do, and they raise :class:`roofline.errors.RooflineError`
saying to install ``roofline[calibrate]`` when it is missing.

The file (schema 1)
-------------------
A JSON object; sizes in bytes, times in seconds, rates in bytes/s and FLOP/s::

    schema        1 (an integer; a reader refuses any other version)
    kind          "roofline-calibration"
    created       ISO 8601 UTC time of the run, "2025-01-31T12:00:00+00:00"
    device        type ("cuda" | "cpu"), name (as PyTorch reports it),
                  memory_total_bytes, preset (an accelerator preset key or null),
                  preset_from, driver (or null), and for CUDA: index,
                  multiprocessors, capability, power_limit_w (or null);
                  for CPU: threads
    software      python, torch, cuda (or null), cudnn (or null), numpy,
                  roofline, platform
    method        timer, warmup, repetitions, statistics, cuda_graphs (bool),
                  attention, dtype, threads, max_seconds
    bandwidth     value (best) and typical (median) [bytes/s] of the better method,
                  method ("copy" | "read"), buffer_bytes, methods: {copy, read}
                  each with bytes_per_repetition, times_s [s], best, median
                  [bytes/s], spread
    matmul        value (best over shapes) and typical (median over shapes)
                  [FLOP/s], dtype, shapes: [{m, n, k, flops, times_s, best,
                  median, spread}]
    decode        model (the ModelConfig fields), weights, weight_bytes,
                  kv_bytes_per_token, flops_per_token, attention_flops_per_token,
                  step (what one step runs), attention, cuda_graphs, batches,
                  contexts, points: [{batch, context, context_sum, times_s,
                  best_s, median_s, spread, cuda_graph, note?}],
                  skipped: [{batch, context, reason}]
    elapsed_s     wall time of the whole run [s]

``spread`` is (max - min) / median over the repetitions. A point's ``context`` is
the context of every sequence, the new token's KV included (docs/conventions.md, "One
step"). Points that cannot run (their KV cache does not fit, or the time limit was
reached) are listed under ``skipped`` with the reason, never silently dropped.

Shipped files: ``roofline/data/measurements/calibrate-*.json`` (see
:func:`calibration_files`); files measured on real accelerators are added there
as new entries, never edited.

Examples
--------
>>> from roofline.calibrate import CalibrationPlan, preset_for_device
>>> CalibrationPlan.default("cuda").model.name
'llama-3.1-8b'
>>> preset_for_device("NVIDIA H200")
'h200-sxm'
"""

from __future__ import annotations

from ..errors import MeasurementFileError
from .compare import (
    LEFT_OUT,
    Report,
    Row,
    calibration_measurements,
    default_measurements,
    estimate_step,
    predict,
    validate,
)
from .decode_step import decode_attention, measure_decode
from .device import import_torch, preset_for_device, resolve_device, spread
from .fit import (
    EngineProfile,
    engine_profiles,
    fit_profile,
    fit_profiles,
    get_engine_profile,
    validate_with_estimates,
)
from .microbench import measure_bandwidth, measure_matmul
from .plan import TINY_MODEL, CalibrationPlan
from .published import PUBLISHED_KIND, PendingPoint, load_published, pending_published, published_path
from .run import run_calibration
from .schema import (
    FILE_KIND,
    SCHEMA_VERSION,
    Calibration,
    DecodePoint,
    Measurement,
    calibration_files,
    load_calibration,
    measured_accelerator,
    measurements_dir,
    parse_calibration,
    read_json,
    write_calibration,
)

__all__ = [
    "SCHEMA_VERSION",
    "FILE_KIND",
    "TINY_MODEL",
    "CalibrationPlan",
    "Calibration",
    "DecodePoint",
    "MeasurementFileError",
    "run_calibration",
    "measure_bandwidth",
    "measure_matmul",
    "measure_decode",
    "decode_attention",
    "import_torch",
    "resolve_device",
    "load_calibration",
    "parse_calibration",
    "write_calibration",
    "measured_accelerator",
    "calibration_files",
    "measurements_dir",
    "preset_for_device",
    "read_json",
    "spread",
    "LEFT_OUT",
    "PUBLISHED_KIND",
    "Measurement",
    "PendingPoint",
    "Row",
    "Report",
    "published_path",
    "load_published",
    "pending_published",
    "calibration_measurements",
    "default_measurements",
    "predict",
    "estimate_step",
    "validate",
    "EngineProfile",
    "engine_profiles",
    "fit_profile",
    "fit_profiles",
    "get_engine_profile",
    "validate_with_estimates",
]
