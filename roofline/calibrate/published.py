"""The published points: measured decode step times quoted from public sources, as :class:`Measurement` rows.

Data: ``roofline/data/measurements/published.json`` (schema 1, kind
``roofline-published-points``): per point the model, dtypes, accelerator preset, the
metric and value as published, the step composition assumed (batch, context sum) and
the source (citation, date, verbatim quotes); optionally the engine profiles and the
fixed calibration/validation split. Points this version cannot price yet (tensor
parallelism, a missing preset, a MoE model) are :class:`PendingPoint` rows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from ..errors import RooflineError
from ..hardware import Accelerator, get_accelerator
from ..models import ModelConfig, dtype_bytes, get_model
from .schema import FieldReader, Measurement, measurements_dir, read_json

__all__ = ["PUBLISHED_KIND", "PendingPoint", "published_path", "load_published", "pending_published"]

#: ``"kind"`` of the published-points file.
PUBLISHED_KIND = "roofline-published-points"

_METRICS = {
    # metric -> (unit it must be published in, rule turning it into seconds per step)
    "tokens_per_second_per_sequence": ("tokens/s", "1 / value"),
    "median_tpot_ms": ("ms", "value / 1000"),
    "mean_tpot_ms": ("ms", "value / 1000"),
    "step_time_ms": ("ms", "value / 1000"),
    "itl_ms": ("ms", "value / 1000"),
    "output_tokens_per_second": ("tokens/s", "batch / value"),
    "output_tokens_per_second_per_gpu": ("tokens/s", "batch / (value x tensor_parallel)"),
    "median_batch_latency_ms": ("ms", "value / output_len / 1000"),
}


def _step_seconds(metric: str, value: float, *, batch: int, tensor_parallel: int, output_len: int | None) -> float:
    """A published value turned into seconds per decode step by the rule of :data:`_METRICS`."""
    if metric == "tokens_per_second_per_sequence":
        return 1 / value
    if metric == "output_tokens_per_second":
        return batch / value
    if metric == "output_tokens_per_second_per_gpu":
        return batch / (value * tensor_parallel)
    if metric == "median_batch_latency_ms":
        assert output_len is not None  # checked by the loader
        return value / output_len / 1000
    return value / 1000


@attrs.frozen
class PendingPoint:
    """A published point this version cannot price yet, and why.

    Attributes
    ----------
    id : str
    model, accelerator : str
        The preset names the point asks for.
    tensor_parallel : int, >= 1
    batch : int [sequences]
    measured_s : float [s]
        The measured step time, by the metric's rule.
    metric : str
    source : str
    reasons : tuple of str
        What the package lacks for this point (a preset, tensor parallelism).
    engine_profile, split : str
    """

    id: str
    model: str
    accelerator: str
    tensor_parallel: int
    batch: int
    measured_s: float
    metric: str
    source: str
    reasons: tuple[str, ...]
    engine_profile: str = ""
    split: str = ""


def published_path() -> Path:
    """The shipped published-points file, ``roofline/data/measurements/published.json``."""
    return measurements_dir() / "published.json"


def load_published(path: str | os.PathLike[str] | None = None) -> list[Measurement]:
    """The published points this version can price, as :class:`Measurement` rows.

    Parameters
    ----------
    path : path, optional
        A published-points file (default: :func:`published_path`). Each point gives
        model, dtypes, accelerator preset, metric and value as published, batch,
        context_sum, composition and source (citation, date, verbatim quotes); optional
        fields: engine_version, tensor_parallel (default 1), concurrency, input_len,
        output_len, power_cap_w, assumptions, pending_presets. Optional top-level
        ``engine_profiles`` (profile name -> point ids) and ``split`` (``calibration`` and
        ``validation`` lists naming every point exactly once).

    Returns
    -------
    list of Measurement
        Spec constants: the accelerator preset; measured constants: its
        :meth:`roofline.Accelerator.measured` copy. Points this version cannot price
        (tensor parallelism, a preset named in the point's ``pending_presets``) are left
        out here and returned by :func:`pending_published`.

    Raises
    ------
    MeasurementFileError
        A missing or bad field (named with the file and the dotted path), an unknown
        model or accelerator preset not declared in ``pending_presets``, a metric whose
        unit does not match, a split that does not name every point exactly once.

    References
    ----------
    pytorch-labs/gpt-fast README.md, "Benchmarks" (Llama-2-7B, A100-80GB at 330 W, 104.9 tokens/s);
    LambdaLabsML/vllm-benchmark, results/prompt_10/1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json
    (median TPOT 7.558 ms). Quotes, URLs and conditions of every point are in the file.

    Examples
    --------
    >>> [m.id for m in load_published()][:2]
    ['gpt-fast-llama-2-7b-a100-330w', 'vllm-llama-3-8b-h100-10req']
    >>> round(load_published()[0].measured_s * 1e3, 3)
    9.533
    """
    return _read_published(path)[0]


def pending_published(path: str | os.PathLike[str] | None = None) -> list[PendingPoint]:
    """The published points this version cannot price yet, each with its reasons.

    Parameters
    ----------
    path : path, optional
        As :func:`load_published`.

    Returns
    -------
    list of PendingPoint
        One per point whose model or accelerator preset the package lacks (declared by the
        point's ``pending_presets``). Tensor-parallel points are priced per GPU with the
        all-reduce, MoE points by the experts their batch touches
        (:func:`roofline.calibrate.compare.predict`).

    Raises
    ------
    MeasurementFileError
        As :func:`load_published`.
    """
    return _read_published(path)[1]


def _read_published(path: str | os.PathLike[str] | None) -> tuple[list[Measurement], list[PendingPoint]]:
    name = os.fspath(path) if path is not None else str(published_path())
    doc = read_json(name)
    r = FieldReader(name)
    if r.get(doc, "schema") != 1:
        raise r.fail("schema", f"{doc.get('schema')!r} is not supported; this roofline reads schema 1")
    if r.get(doc, "kind") != PUBLISHED_KIND:
        raise r.fail("kind", f"{doc.get('kind')!r} must be {PUBLISHED_KIND!r}")
    points = r.array(doc, "points")
    ids = []
    for i, _ in enumerate(points):
        pid = r.text(doc, f"points.{i}.id")
        if pid in ids:
            raise r.fail(f"points.{i}.id", f"{pid!r} appears twice")
        ids.append(pid)
    split = _read_split(r, doc, ids)
    profiles = _read_profiles(r, doc, ids)
    priced: list[Measurement] = []
    pending: list[PendingPoint] = []
    for i, pid in enumerate(ids):
        base = f"points.{i}"
        pending_presets = _strings(r, doc, base + ".pending_presets")
        reasons = []
        model_name = r.text(doc, base + ".model")
        dtypes = {f: r.text(doc, f"{base}.{f}") for f in ("weight_dtype", "kv_dtype")}
        for f, dtype in dtypes.items():
            try:
                dtype_bytes(dtype, field=f)
            except RooflineError as exc:
                raise r.fail(f"{base}.{f}", str(exc)) from None
        try:
            model: ModelConfig | None = get_model(model_name).with_dtypes(**dtypes)
        except RooflineError as exc:
            if model_name not in pending_presets:
                raise r.fail(base + ".model", str(exc)) from None
            model = None
            reasons.append(f"no model preset {model_name!r} yet")
        acc_name = r.text(doc, base + ".accelerator")
        try:
            spec: Accelerator | None = get_accelerator(acc_name)
        except RooflineError as exc:
            if acc_name not in pending_presets:
                raise r.fail(base + ".accelerator", str(exc)) from None
            spec = None
            reasons.append(f"no accelerator preset {acc_name!r} yet")
        metric = r.text(doc, base + ".metric")
        if metric not in _METRICS:
            raise r.fail(base + ".metric", f"{metric!r} must be one of {', '.join(_METRICS)}")
        unit, rule = _METRICS[metric]
        value = r.positive(doc, base + ".published_value")
        if r.text(doc, base + ".published_unit") != unit:
            given = doc["points"][i]["published_unit"]
            raise r.fail(base + ".published_unit", f"{given!r} must be {unit!r} for {metric}")
        batch = r.integer(doc, base + ".batch", 1)
        has = {f: r.optional(doc, f"{base}.{f}") is not None for f in ("tensor_parallel", "concurrency")}
        tp = r.integer(doc, base + ".tensor_parallel", 1) if has["tensor_parallel"] else 1
        concurrency = r.integer(doc, base + ".concurrency", 1) if has["concurrency"] else None
        for field in ("input_len", "output_len"):
            if r.optional(doc, f"{base}.{field}") is not None:
                r.integer(doc, f"{base}.{field}", 1)
        output_len = r.optional(doc, base + ".output_len")
        if metric == "median_batch_latency_ms" and output_len is None:
            raise r.fail(base + ".output_len", f"is missing; {metric} needs the output length")
        if r.optional(doc, base + ".power_cap_w") is not None:
            r.positive(doc, base + ".power_cap_w")
        r.optional_text(doc, base + ".engine_version")
        measured = _step_seconds(metric, value, batch=batch, tensor_parallel=tp, output_len=output_len)
        quotes = r.array(doc, base + ".source.quote")
        for j, q in enumerate(quotes):
            if not isinstance(q, str) or not q.strip():
                raise r.fail(f"{base}.source.quote.{j}", "must be a non-empty string")
        left_out = _strings(r, doc, base + ".left_out")
        assumptions = _strings(r, doc, base + ".assumptions")
        citation = r.text(doc, base + ".source.citation")
        date = r.text(doc, base + ".source.date")
        engine = r.text(doc, base + ".engine")
        composition = r.text(doc, base + ".composition")
        context_sum = r.integer(doc, base + ".context_sum", 0)
        profile = profiles.get(pid, "")
        metric_text = (
            f"{metric} = {value:g} {unit}; step time = {rule} = {measured * 1e3:.3f} ms ({engine})"
        )
        if reasons or model is None or spec is None:
            pending.append(PendingPoint(
                id=pid,
                model=model_name,
                accelerator=acc_name,
                tensor_parallel=tp,
                batch=batch,
                measured_s=measured,
                metric=metric_text,
                source=f"{citation} ({date})",
                reasons=tuple(reasons),
                engine_profile=profile,
                split=split.get(pid, ""),
            ))
            continue
        priced.append(Measurement(
            id=pid,
            group="published",
            model=model,
            spec=spec,
            measured_constants=spec.measured(),
            batch=batch,
            context_sum=context_sum,
            measured_s=measured,
            metric=metric_text,
            source=f"{citation} ({date})",
            composition=composition,
            left_out=left_out,
            quotes=tuple(quotes),
            engine_profile=profile,
            split=split.get(pid, ""),
            tensor_parallel=tp,
            concurrency=concurrency,
            assumptions=assumptions,
        ))
    return priced, pending


def _strings(r: FieldReader, doc: Any, field: str) -> tuple[str, ...]:
    """An optional array of non-empty strings (absent: empty)."""
    value = r.optional(doc, field)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, str) and x.strip() for x in value):
        raise r.fail(field, "must be an array of non-empty strings")
    return tuple(value)


def _read_profiles(r: FieldReader, doc: Any, ids: list[str]) -> dict[str, str]:
    """The optional engine profiles: point id -> profile name (each point in at most one)."""
    if r.optional(doc, "engine_profiles") is None:
        return {}
    table = r.obj(doc, "engine_profiles")
    out: dict[str, str] = {}
    for name in table:
        for j, pid in enumerate(r.array(doc, f"engine_profiles.{name}")):
            if pid not in ids:
                raise r.fail(f"engine_profiles.{name}.{j}", f"{pid!r} is not the id of a point")
            if pid in out:
                raise r.fail(f"engine_profiles.{name}.{j}", f"{pid!r} is already in profile {out[pid]!r}")
            out[pid] = name
    return out


def _read_split(r: FieldReader, doc: Any, ids: list[str]) -> dict[str, str]:
    """The optional fit/validate split: point id -> "calibration" or "validation"."""
    if r.optional(doc, "split") is None:
        return {}
    out: dict[str, str] = {}
    for part in ("calibration", "validation"):
        for j, pid in enumerate(r.array(doc, f"split.{part}")):
            if pid not in ids:
                raise r.fail(f"split.{part}.{j}", f"{pid!r} is not the id of a point")
            if pid in out:
                raise r.fail(f"split.{part}.{j}", f"{pid!r} is already in the {out[pid]} subset")
            out[pid] = part
    missing = [pid for pid in ids if pid not in out]
    if missing:
        raise r.fail("split", f"every point must be in one subset; missing {', '.join(missing)}")
    return out
