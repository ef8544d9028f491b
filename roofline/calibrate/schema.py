"""The measurement files and rows: the calibration file (schema 1) and the :class:`Measurement` row.

This module never imports PyTorch: reading a calibration file, listing the shipped
ones and building a measured accelerator work on a plain install. The layout of the
file is documented in :mod:`roofline.calibrate`. :class:`FieldReader` checks the dotted
fields of this file and of the published-points file; :class:`Measurement` is the row
that both sources give ``roofline validate`` (:mod:`roofline.calibrate.compare`).
"""

from __future__ import annotations

import json
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from .._io import parse_json, read_text_file
from ..errors import FileReadError, InvalidValueError, MeasurementFileError, RooflineError
from ..hardware import Accelerator, Source, Sourced, get_accelerator
from ..models import ModelConfig

__all__ = [
    "SCHEMA_VERSION",
    "FILE_KIND",
    "MeasurementFileError",
    "DecodePoint",
    "Calibration",
    "load_calibration",
    "parse_calibration",
    "write_calibration",
    "measured_accelerator",
    "calibration_files",
    "measurements_dir",
    "read_json",
    "FieldReader",
    "Measurement",
]

#: Version of the calibration file layout this package writes and reads.
SCHEMA_VERSION = 1
#: Value of the ``"kind"`` field of every calibration file.
FILE_KIND = "roofline-calibration"


# --------------------------------------------------------------------------- field checks


class FieldReader:
    """Reads dotted fields (``bandwidth.value``, ``points.0.id``) of a parsed JSON document.

    Every check raises :class:`roofline.errors.MeasurementFileError` naming the file
    (``path``), the dotted field and what is wrong; ``fail`` builds one for a caller's
    own check. Used for the calibration file here and the published-points file
    (:mod:`roofline.calibrate.published`).
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, field: str, message: str) -> MeasurementFileError:
        return MeasurementFileError(self.path, field, message)

    def get(self, doc: Any, field: str) -> Any:
        node = doc
        for part in field.split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
                if node is None:
                    raise self.fail(field, "is missing")
                continue
            if not isinstance(node, dict):
                raise self.fail(field, "expected a JSON object above this field")
            if part not in node or node[part] is None:
                raise self.fail(field, "is missing")
            node = node[part]
        return node

    def optional(self, doc: Any, field: str) -> Any:
        node = doc
        for part in field.split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and node.get(part) is not None:
                node = node[part]
            else:
                return None
        return node

    def text(self, doc: Any, field: str) -> str:
        value = self.get(doc, field)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(field, f"{value!r} must be a non-empty string")
        return value

    def optional_text(self, doc: Any, field: str) -> str | None:
        value = self.optional(doc, field)
        if value is not None and not isinstance(value, str):
            raise self.fail(field, f"{value!r} must be a string or null")
        return value

    def positive(self, doc: Any, field: str) -> float:
        return self.check_positive(self.get(doc, field), field)

    def check_positive(self, value: Any, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"{value!r} must be a number")
        if not math.isfinite(value) or value <= 0:
            raise self.fail(field, f"{value!r} must be finite and > 0")
        return float(value)

    def nonnegative(self, doc: Any, field: str) -> float:
        value = self.get(doc, field)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"{value!r} must be a number")
        if not math.isfinite(value) or value < 0:
            raise self.fail(field, f"{value!r} must be finite and >= 0")
        return float(value)

    def integer(self, doc: Any, field: str, minimum: int) -> int:
        value = self.get(doc, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(field, f"{value!r} must be an integer >= {minimum}")
        return value

    def boolean(self, doc: Any, field: str) -> bool:
        value = self.get(doc, field)
        if not isinstance(value, bool):
            raise self.fail(field, f"{value!r} must be true or false")
        return value

    def obj(self, doc: Any, field: str) -> dict[str, Any]:
        value = self.get(doc, field)
        if not isinstance(value, dict):
            raise self.fail(field, "must be a JSON object")
        return value

    def array(self, doc: Any, field: str) -> list[Any]:
        value = self.get(doc, field)
        if not isinstance(value, list) or not value:
            raise self.fail(field, "must be a non-empty array")
        return value



def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a JSON object from ``path`` (NaN and Infinity rejected).

    Raises
    ------
    MeasurementFileError
        The file cannot be read, is not JSON, or is not a JSON object.
    """
    name = os.fspath(path)
    try:
        text = read_text_file(name)
    except FileReadError as exc:
        raise MeasurementFileError(name, "(file)", exc.reason) from None
    try:
        doc = parse_json(text)
    except ValueError as exc:
        raise MeasurementFileError(name, "(file)", f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MeasurementFileError(name, "(file)", f"expected a JSON object, got {type(doc).__name__}")
    return doc


# --------------------------------------------------------------------------- the file


@attrs.frozen
class DecodePoint:
    """One measured decode step: ``batch`` sequences, each attending over ``context`` tokens.

    Attributes
    ----------
    batch : int [sequences], >= 1
    context : int [tokens], >= 1
        Context of every sequence, the new token's KV included (CONVENTIONS.md, "One step").
    median_s, best_s : float [s], > 0
        Median and minimum over the repetitions.
    spread : float [1], >= 0
        (max - min) / median over the repetitions.
    times_s : tuple of float [s]
        Every repetition.
    cuda_graph : bool
        The step was replayed from a CUDA graph.
    """

    batch: int
    context: int
    median_s: float
    best_s: float
    spread: float
    times_s: tuple[float, ...]
    cuda_graph: bool

    @property
    def context_sum(self) -> int:
        """Sum of the contexts over the batch [tokens]: batch x context."""
        return self.batch * self.context


@attrs.frozen
class Calibration:
    """A validated calibration file (schema 1); see :mod:`roofline.calibrate` for the layout.

    Attributes
    ----------
    path : str
        Where it was read from (or ``"<document>"``).
    created : str
        ISO 8601 time of the measurement (UTC).
    device : dict
        ``type``, ``name``, ``preset`` (or None), ``memory_total_bytes``, driver and versions.
    software : dict
        Python, PyTorch, CUDA, roofline versions and the platform.
    method : dict
        Timer, warm-up and repetitions, CUDA graphs, attention, dtype.
    bandwidth, bandwidth_typical : float [bytes/s]
        Best and median achieved bandwidth of the best method.
    bandwidth_method : str
        The method (``"copy"`` or ``"read"``) the two values come from.
    bandwidth_spread : float [1]
    matmul, matmul_typical : float [FLOP/s]
        Best over shapes of the best repetition; median over shapes of the median repetition.
    model : ModelConfig
        The shapes the decode steps were measured with (random weights).
    points : tuple of DecodePoint
    document : dict
        The whole parsed file.
    """

    path: str
    created: str
    device: dict[str, Any]
    software: dict[str, Any]
    method: dict[str, Any]
    bandwidth: float
    bandwidth_typical: float
    bandwidth_method: str
    bandwidth_spread: float
    matmul: float
    matmul_typical: float
    model: ModelConfig
    points: tuple[DecodePoint, ...]
    document: dict[str, Any] = attrs.field(repr=False, eq=False)

    @property
    def date(self) -> str:
        """Measurement date, ``YYYY-MM-DD``."""
        return self.created[:10]

    @property
    def device_name(self) -> str:
        """The device's name as the framework reports it."""
        return str(self.device["name"])

    @property
    def preset(self) -> str | None:
        """The accelerator preset key this device is (None when no preset matches)."""
        return self.device.get("preset")

    def conditions(self) -> str:
        """One line of provenance: device, driver, versions, method, repetitions."""
        d, s, m = self.device, self.software, self.method
        parts = [
            d["name"],
            f"driver {d.get('driver') or 'n/a'}",
            f"torch {s.get('torch')}",
            f"CUDA {s.get('cuda') or 'n/a'}",
            f"timer {m.get('timer')}",
            f"{m.get('warmup')} warm-up + {m.get('repetitions')} repetitions",
            f"CUDA graphs {'on' if m.get('cuda_graphs') else 'off'}",
        ]
        if d.get("power_limit_w"):
            parts.append(f"power limit {d['power_limit_w']} W")
        return "; ".join(str(p) for p in parts)

    def accelerator(self) -> Accelerator:
        """The measured :class:`Accelerator`: bandwidth and BF16 peak from this file.

        Returns
        -------
        Accelerator
            Its ``bandwidth`` is the best achieved bandwidth [bytes/s, rounded to an
            integer] and its ``peak_flops`` the best matmul FLOP/s [FLOP/s, rounded],
            each a :class:`Sourced` of kind ``"measured"`` citing this file, with the
            conditions (device, driver, versions, repetitions, spread). Where the
            device is a preset (``device.preset``), the copy is that preset's
            ``measured()`` copy (key ``"<preset>:measured"``), so memory and FP8
            figures keep their datasheet sources; otherwise memory is the total the
            framework reports (kind "measured") and the key is ``"measured:<device>"``.
        """
        conditions = self.conditions()
        bw = Sourced(
            max(1, round(self.bandwidth)),
            "bytes/s",
            Source(
                "measured",
                f"roofline calibrate file {self.path}: bandwidth.value "
                f"(best of {self.bandwidth_method}, spread {self.bandwidth_spread:.1%})",
                self.date,
                conditions,
            ),
        )
        dtype = self.document.get("matmul", {}).get("dtype", "bfloat16")
        flops = Sourced(
            max(1, round(self.matmul)),
            "FLOP/s",
            Source(
                "measured",
                f"roofline calibrate file {self.path}: matmul.value (best {dtype} shape; "
                f"typical {self.matmul_typical / 1e12:.4g} TFLOP/s)",
                self.date,
                conditions,
            ),
        )
        if self.preset is not None:
            preset = get_accelerator(self.preset)
            return attrs.evolve(preset, measured_bandwidth=bw, measured_bf16=flops).measured()
        memory = Sourced(
            int(self.device["memory_total_bytes"]),
            "bytes",
            Source("measured", f"roofline calibrate file {self.path}: device.memory_total_bytes", self.date),
        )
        return Accelerator(
            key="measured:" + _slug(self.device_name),
            name=f"{self.device_name} (measured)",
            memory_label=memory,
            memory_usable=memory,
            hbm_bandwidth=bw,
            peak_bf16=flops,
            measured_bandwidth=bw,
            measured_bf16=flops,
        )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def parse_calibration(doc: dict[str, Any], *, path: str = "<document>") -> Calibration:
    """Validate a parsed calibration document and return a :class:`Calibration`.

    Parameters
    ----------
    doc : dict
        The parsed JSON (schema 1).
    path : str
        Named in error messages.

    Returns
    -------
    Calibration

    Raises
    ------
    MeasurementFileError
        A required field is missing or has a bad value (not a positive finite
        number, not an integer, an unknown preset, a schema other than 1...); the
        message names the file and the dotted field.
    """
    r = FieldReader(path)
    if not isinstance(doc, dict):
        raise r.fail("(file)", "expected a JSON object")
    schema = r.get(doc, "schema")
    if schema != SCHEMA_VERSION:
        raise r.fail("schema", f"{schema!r} is not supported; this roofline reads schema {SCHEMA_VERSION}")
    if r.get(doc, "kind") != FILE_KIND:
        raise r.fail("kind", f"{doc.get('kind')!r} must be {FILE_KIND!r}")
    created = r.text(doc, "created")
    if not re.match(r"^\d{4}-\d{2}-\d{2}", created):
        raise r.fail("created", f"{created!r} must be an ISO 8601 date-time")
    device = r.obj(doc, "device")
    r.text(doc, "device.type")
    r.text(doc, "device.name")
    r.integer(doc, "device.memory_total_bytes", 1)
    preset = r.optional_text(doc, "device.preset")
    if preset is not None:
        try:
            get_accelerator(preset)
        except RooflineError as exc:
            raise r.fail("device.preset", str(exc)) from None
    software = r.obj(doc, "software")
    r.text(doc, "software.python")
    r.text(doc, "software.torch")
    method = r.obj(doc, "method")
    r.text(doc, "method.timer")
    r.integer(doc, "method.warmup", 0)
    r.integer(doc, "method.repetitions", 1)
    r.boolean(doc, "method.cuda_graphs")
    r.text(doc, "method.attention")

    bandwidth = r.positive(doc, "bandwidth.value")
    bandwidth_typical = r.positive(doc, "bandwidth.typical")
    bw_method = r.text(doc, "bandwidth.method")
    methods = r.obj(doc, "bandwidth.methods")
    if bw_method not in methods:
        raise r.fail("bandwidth.method", f"{bw_method!r} is not one of bandwidth.methods ({', '.join(methods)})")
    for name in methods:
        base = f"bandwidth.methods.{name}"
        r.integer(doc, base + ".bytes_per_repetition", 1)
        r.positive(doc, base + ".best")
        r.positive(doc, base + ".median")
        r.nonnegative(doc, base + ".spread")
        _times(r, doc, base + ".times_s")
    bw_spread = r.nonnegative(doc, f"bandwidth.methods.{bw_method}.spread")

    matmul = r.positive(doc, "matmul.value")
    matmul_typical = r.positive(doc, "matmul.typical")
    r.text(doc, "matmul.dtype")
    for i, _ in enumerate(r.array(doc, "matmul.shapes")):
        base = f"matmul.shapes.{i}"
        for dim in ("m", "n", "k"):
            r.integer(doc, f"{base}.{dim}", 1)
        r.positive(doc, base + ".best")
        r.positive(doc, base + ".median")
        _times(r, doc, base + ".times_s")

    model = _model(r, doc)
    points = []
    seen = set()
    for i, _ in enumerate(r.array(doc, "decode.points")):
        base = f"decode.points.{i}"
        batch = r.integer(doc, base + ".batch", 1)
        context = r.integer(doc, base + ".context", 1)
        if (batch, context) in seen:
            raise r.fail(base, f"batch {batch}, context {context} appears twice")
        seen.add((batch, context))
        points.append(
            DecodePoint(
                batch=batch,
                context=context,
                median_s=r.positive(doc, base + ".median_s"),
                best_s=r.positive(doc, base + ".best_s"),
                spread=r.nonnegative(doc, base + ".spread"),
                times_s=tuple(_times(r, doc, base + ".times_s")),
                cuda_graph=r.boolean(doc, base + ".cuda_graph"),
            )
        )
    return Calibration(
        path=path,
        created=created,
        device=dict(device),
        software=dict(software),
        method=dict(method),
        bandwidth=bandwidth,
        bandwidth_typical=bandwidth_typical,
        bandwidth_method=bw_method,
        bandwidth_spread=bw_spread,
        matmul=matmul,
        matmul_typical=matmul_typical,
        model=model,
        points=tuple(points),
        document=doc,
    )


def _times(r: FieldReader, doc: Any, field: str) -> list[float]:
    values = r.array(doc, field)
    return [r.check_positive(v, f"{field}.{i}") for i, v in enumerate(values)]


def _model(r: FieldReader, doc: Any) -> ModelConfig:
    config = r.obj(doc, "decode.model")
    fields = {f.name for f in attrs.fields(ModelConfig)}
    unknown = sorted(set(config) - fields)
    if unknown:
        raise r.fail(f"decode.model.{unknown[0]}", "is not a ModelConfig field")
    for name in ("name", "num_hidden_layers", "hidden_size", "intermediate_size",
                 "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"):
        r.get(doc, f"decode.model.{name}")
    try:
        return ModelConfig(**config)
    except InvalidValueError as exc:
        raise r.fail(f"decode.model.{exc.field}", f"{exc.value!r}: {exc.reason}") from None
    except TypeError as exc:  # pragma: no cover - attrs reports a missing field this way
        raise r.fail("decode.model", str(exc)) from None


def load_calibration(path: str | os.PathLike[str]) -> Calibration:
    """Read and validate a calibration file written by ``roofline calibrate``.

    Parameters
    ----------
    path : str or path-like
        A JSON file of schema 1 (layout: :mod:`roofline.calibrate`).

    Returns
    -------
    Calibration

    Raises
    ------
    MeasurementFileError
        The file is unreadable, not JSON, or a field is missing or bad (the message
        names the file and the dotted field, e.g. ``bandwidth.value``).
    """
    name = os.fspath(path)
    return parse_calibration(read_json(name), path=name)


def measured_accelerator(path: str | os.PathLike[str]) -> Accelerator:
    """The measured :class:`Accelerator` of a calibration file (see :meth:`Calibration.accelerator`).

    Parameters
    ----------
    path : str or path-like
        A calibration file (schema 1).

    Returns
    -------
    Accelerator
        Bandwidth [bytes/s] and BF16 peak [FLOP/s] measured, with Sources of kind
        ``"measured"`` citing the file.

    Raises
    ------
    MeasurementFileError
        As :func:`load_calibration`.
    """
    return load_calibration(path).accelerator()


def write_calibration(doc: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate ``doc`` and write it as indented JSON to ``path`` atomically; return the path.

    The file is written beside ``path`` and renamed over it, so an interrupted write leaves the
    old file or the new one.

    Raises
    ------
    MeasurementFileError
        ``doc`` is not a valid calibration document (nothing is written).
    RooflineError
        The file cannot be written.
    """
    from .._io import atomic_write

    target = Path(path)
    parse_calibration(doc, path=str(target))
    try:
        with atomic_write(target) as fh:
            fh.write(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    except OSError as exc:
        raise RooflineError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def measurements_dir() -> Path:
    """The folder of shipped measurement data, ``roofline/data/measurements``."""
    return Path(str(resources.files("roofline.data").joinpath("measurements")))


def calibration_files(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Calibration files in ``directory`` (default: the shipped ones), sorted by name.

    A calibration file is any ``calibrate-*.json`` there. The package ships the
    files measured on real accelerators; none when no GPU run has been made.

    Parameters
    ----------
    directory : path, optional
        Where to look; default :func:`measurements_dir`.

    Returns
    -------
    list of Path
    """
    folder = Path(directory) if directory is not None else measurements_dir()
    return sorted(folder.glob("calibrate-*.json"))


# --------------------------------------------------------------------------- the rows validate checks


@attrs.frozen
class Measurement:
    """One measured decode step time with what is needed to predict it.

    Attributes
    ----------
    id : str
        Unique label (``"gpt-fast-llama-2-7b-a100-330w"``, ``"<file>:B8:c1000"``).
    group : str
        ``"published"`` or the calibration file's path.
    model : ModelConfig
        Shapes and dtypes (weight bytes, KV bytes per token, FLOPs per token).
    spec : Accelerator or None
        The spec (datasheet) constants; None when no preset describes the device.
    measured_constants : Accelerator
        The measured constants.
    batch : int [sequences], >= 1
    context_sum : int [tokens], >= 0
        Sum over the batch of each sequence's context (CONVENTIONS.md, "One step").
    measured_s : float [s], > 0
        The measured step time (or time per output token).
    metric : str
        What was measured and how it became seconds per step.
    source : str
        Citation, one line.
    composition : str
        How ``batch`` and ``context_sum`` were chosen (an input, not a fit).
    left_out : tuple of str
        What the model leaves out for this row in particular.
    quotes : tuple of str
        The source's own words, verbatim (published points).
    engine_profile : str
        The engine profile whose constants an estimate would use (``"gpt-fast compiled"``,
        ``"vLLM with CUDA graphs"``, ...) from the file's ``engine_profiles``; ``""`` if none.
    split : str
        ``"calibration"`` or ``"validation"`` when the published file fixes a split, else ``""``.
    tensor_parallel : int, >= 1
        Devices the model is split over (1 for every priced row in this version).
    concurrency : int or None
        Closed-loop clients when the source states a concurrency rather than a fixed batch.
    assumptions : tuple of str
        What was assumed where the source is silent.
    device_type : str
        ``"cpu"`` for a row measured on a CPU (kept out of the medians, see
        :data:`roofline.calibrate.compare.CPU_NOTE`), else ``"gpu"``.
    """

    id: str
    group: str
    model: ModelConfig
    spec: Accelerator | None
    measured_constants: Accelerator
    batch: int
    context_sum: int
    measured_s: float
    metric: str
    source: str
    composition: str = ""
    left_out: tuple[str, ...] = ()
    quotes: tuple[str, ...] = ()
    engine_profile: str = ""
    split: str = ""
    tensor_parallel: int = 1
    concurrency: int | None = None
    assumptions: tuple[str, ...] = ()
    device_type: str = "gpu"
