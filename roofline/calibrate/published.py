"""The published points: measured decode step times quoted from public sources, as :class:`Measurement` rows.

Data: ``roofline/data/measurements/published.json`` (schema 1, kind
``roofline-published-points``): per point the model, dtypes, accelerator preset, the
metric and value as published, the step composition assumed (batch, context sum) and
the source (citation, date, verbatim quotes).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import RooflineError
from ..hardware import get_accelerator
from ..models import get_model
from .schema import FieldReader, Measurement, measurements_dir, read_json

__all__ = ["PUBLISHED_KIND", "published_path", "load_published"]

#: ``"kind"`` of the published-points file.
PUBLISHED_KIND = "roofline-published-points"

_METRICS = {
    # metric -> (unit it must be published in, rule turning it into seconds per step)
    "tokens_per_second_per_sequence": ("tokens/s", "1 / value"),
    "median_tpot_ms": ("ms", "value / 1000"),
    "mean_tpot_ms": ("ms", "value / 1000"),
    "step_time_ms": ("ms", "value / 1000"),
}


def published_path() -> Path:
    """The shipped published-points file, ``roofline/data/measurements/published.json``."""
    return measurements_dir() / "published.json"


def load_published(path: str | os.PathLike[str] | None = None) -> list[Measurement]:
    """The published points as :class:`Measurement` rows.

    Parameters
    ----------
    path : path, optional
        A published-points file (default: :func:`published_path`). Each point gives
        model, dtypes, accelerator preset, metric and value as published, batch,
        context_sum, composition and source (citation, date, verbatim quotes).

    Returns
    -------
    list of Measurement
        Spec constants: the accelerator preset; measured constants: its
        :meth:`roofline.Accelerator.measured` copy.

    Raises
    ------
    MeasurementFileError
        A missing or bad field (named with the file and the dotted path), an unknown
        model or accelerator preset, a metric whose unit does not match.

    References
    ----------
    pytorch-labs/gpt-fast README.md, "Benchmarks" (Llama-2-7B, A100-80GB at 330 W, 104.9 tokens/s);
    LambdaLabsML/vllm-benchmark, results/prompt_10/1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json
    (median TPOT 7.558 ms). Quotes and conditions are in the file, per point.

    Examples
    --------
    >>> [m.id for m in load_published()]
    ['gpt-fast-llama-2-7b-a100-330w', 'vllm-llama-3-8b-h100-10req']
    >>> round(load_published()[0].measured_s * 1e3, 3)
    9.533
    """
    name = os.fspath(path) if path is not None else str(published_path())
    doc = read_json(name)
    r = FieldReader(name)
    if r.get(doc, "schema") != 1:
        raise r.fail("schema", f"{doc.get('schema')!r} is not supported; this roofline reads schema 1")
    if r.get(doc, "kind") != PUBLISHED_KIND:
        raise r.fail("kind", f"{doc.get('kind')!r} must be {PUBLISHED_KIND!r}")
    out = []
    ids = set()
    for i, _ in enumerate(r.array(doc, "points")):
        base = f"points.{i}"
        pid = r.text(doc, base + ".id")
        if pid in ids:
            raise r.fail(base + ".id", f"{pid!r} appears twice")
        ids.add(pid)
        try:
            model = get_model(r.text(doc, base + ".model")).with_dtypes(
                weight_dtype=r.text(doc, base + ".weight_dtype"), kv_dtype=r.text(doc, base + ".kv_dtype")
            )
        except RooflineError as exc:
            raise r.fail(base + ".model", str(exc)) from None
        try:
            spec = get_accelerator(r.text(doc, base + ".accelerator"))
        except RooflineError as exc:
            raise r.fail(base + ".accelerator", str(exc)) from None
        metric = r.text(doc, base + ".metric")
        if metric not in _METRICS:
            raise r.fail(base + ".metric", f"{metric!r} must be one of {', '.join(_METRICS)}")
        unit, rule = _METRICS[metric]
        value = r.positive(doc, base + ".published_value")
        if r.text(doc, base + ".published_unit") != unit:
            given = doc["points"][i]["published_unit"]
            raise r.fail(base + ".published_unit", f"{given!r} must be {unit!r} for {metric}")
        batch = r.integer(doc, base + ".batch", 1)
        if metric == "tokens_per_second_per_sequence":
            measured = 1 / value
        else:
            measured = value / 1000
        quotes = r.array(doc, base + ".source.quote")
        for j, q in enumerate(quotes):
            if not isinstance(q, str) or not q.strip():
                raise r.fail(f"{base}.source.quote.{j}", "must be a non-empty string")
        left_out = r.optional(doc, base + ".left_out") or []
        if not isinstance(left_out, list) or not all(isinstance(x, str) for x in left_out):
            raise r.fail(base + ".left_out", "must be an array of strings")
        citation = r.text(doc, base + ".source.citation")
        date = r.text(doc, base + ".source.date")
        out.append(Measurement(
            id=pid,
            group="published",
            model=model,
            spec=spec,
            measured_constants=spec.measured(),
            batch=batch,
            context_sum=r.integer(doc, base + ".context_sum", 0),
            measured_s=measured,
            metric=f"{metric} = {value:g} {unit}; step time = {rule} = {measured * 1e3:.3f} ms "
                   f"({r.text(doc, base + '.engine')})",
            source=f"{citation} ({date})",
            composition=r.text(doc, base + ".composition"),
            left_out=tuple(left_out),
            quotes=tuple(quotes),
        ))
    return out
