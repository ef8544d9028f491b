"""Engine profiles: the estimate's constants, each with its source, and the shipped ones.

The **estimate** (docs/conventions.md, "Bound and estimate") is the bound's step with an
engine's constants::

    step = max(bytes / (eta_bw x bandwidth), FLOPs / (eta_mm x peak)) + t_step + L x t_layer + B x t_seq

An :class:`EngineProfile` holds one engine's five constants, each a :class:`roofline.Sourced`
value whose :class:`roofline.Source` says where it comes from (``"fitted"``, naming the
calibration rows, or ``"measured"``).

The shipped profiles (:func:`engine_profiles`, :func:`get_engine_profile`) are read from
``roofline/data/engine_profiles.json``: the constants :func:`roofline.calibrate.fit.fit_profiles`
fits on the calibration rows of the published set, written down with their sources
(:func:`profiles_document` writes the file; a test re-fits them and compares, so the file
cannot drift from the fit). This module sits beside the model and the accelerator, outside
``roofline.calibrate``: a :class:`roofline.Deployment` and the scheduler's cost model
(``roofline.sim``) take a profile without importing the measurement side. ``roofline.calibrate``
re-exports every name here.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from importlib import resources
from typing import Any

import attrs

from ._checks import name_key
from ._io import parse_json
from .errors import InvalidValueError, UnknownPresetError
from .hardware import Accelerator, Source, Sourced, _optional_sourced, _sourced
from .models import flops_convention

__all__ = [
    "EngineProfile",
    "ErrorBand",
    "FittedRange",
    "OUTSIDE_FITTED_RANGE",
    "SchedulerDefaults",
    "SCHEDULER_OPTIONS",
    "engine_versions",
    "version_names",
    "resolve_engine_profile",
    "version_note",
    "VERSIONS_FILE",
    "AT_BOUND_KIND",
    "NOT_FITTED_KIND",
    "format_constant",
    "PROFILE_KEYS",
    "engine_profiles",
    "unavailable_profiles",
    "get_engine_profile",
    "profile_names",
    "profiles_document",
    "PROFILES_FILE",
]

#: Short command-line keys of the published set's engine profiles (the profile names are the file's).
PROFILE_KEYS: dict[str, str] = {
    "gpt-fast compiled": "gpt-fast",
    "LMDeploy TurboMind": "lmdeploy",
    "vLLM with CUDA graphs": "vllm",
    "TensorRT-LLM static batch": "trtllm",
    "NVIDIA NIM (backend not stated)": "nim",
    "SGLang": "sglang",
}

def _share(instance: object, attribute: attrs.Attribute, value: Sourced) -> None:
    _sourced(instance, attribute, value)
    if not 0 < value.value <= 1:
        raise InvalidValueError(attribute.name, float(value.value), "must be in (0, 1]")


#: The words every printed estimate carries when its request lies outside the rows its profile was fitted on.
OUTSIDE_FITTED_RANGE = "estimate, outside the fitted range"


def _percent(x: float) -> str:
    return f"{x * 100:+.1f} %"


@attrs.frozen
class ErrorBand:
    """The validation residuals of a profile's estimate: how far it was from rows it never saw.

    Attributes
    ----------
    rows : tuple of str
        Ids of the profile's validation rows priced (never a calibration row).
    median : float [1]
        Median of the signed relative errors (estimate - measured) / measured.
    p10, p90 : float [1]
        Their 10th and 90th percentiles, interpolated linearly between order statistics
        (``numpy.percentile``'s default, as ``vllm bench serve`` computes percentiles).
    median_abs : float [1]
        Median of the absolute errors.

    An empty band (no validation row) has ``rows == ()`` and every statistic None.
    """

    rows: tuple[str, ...] = ()
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    median_abs: float | None = None

    @classmethod
    def of(cls, errors: dict[str, float]) -> ErrorBand:
        """The band of ``errors`` (row id -> signed relative error [1]); rows sorted by id.

        Raises
        ------
        InvalidValueError
            An error that is not a finite number (field ``errors``).
        """
        import math

        import numpy as np

        for row, e in errors.items():
            if isinstance(e, bool) or not isinstance(e, (int, float, Fraction)) or not math.isfinite(e):
                raise InvalidValueError("errors", e, f"row {row!r}: expected a finite relative error")
        if not errors:
            return cls()
        ids = tuple(sorted(errors))
        xs = np.array([float(errors[i]) for i in ids])
        p10, median, p90 = (float(v) for v in np.percentile(xs, [10, 50, 90]))
        return cls(rows=ids, median=median, p10=p10, p90=p90, median_abs=float(np.median(np.abs(xs))))

    def describe(self) -> str:
        """One line: ``"validation residuals: median +3.2 %, 10th-90th percentile -8.1 % to +12.0 % (5 rows)"``."""
        if not self.rows or self.median is None or self.p10 is None or self.p90 is None:
            return "validation residuals: none (no validation row of this profile is priced)"
        rows = f"{len(self.rows)} row{'s' if len(self.rows) != 1 else ''}"
        return (f"validation residuals: median {_percent(self.median)}, 10th-90th percentile "
                f"{_percent(self.p10)} to {_percent(self.p90)} ({rows})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: rows, median, p10, p90, median_abs (floats [1]) and n."""
        return {"rows": list(self.rows), "n": len(self.rows), "median": self.median, "p10": self.p10,
                "p90": self.p90, "median_abs": self.median_abs}


@attrs.frozen
class FittedRange:
    """What a profile's calibration rows span: outside it an estimate is an extrapolation, and says so.

    Attributes
    ----------
    model_types : tuple of str
        Hugging Face families (:attr:`roofline.ModelConfig.model_type`) of the rows.
    accelerators : tuple of str
        Accelerator preset keys of the rows.
    weight_dtypes : tuple of str
        Weight storage of the rows (:meth:`roofline.ModelConfig.weight_storage` wording, e.g. ``"bfloat16"``).
    batch_min, batch_max : int [sequences]
        The smallest and largest batch of the rows.
    """

    model_types: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    weight_dtypes: tuple[str, ...] = ()
    batch_min: int = 1
    batch_max: int = 1

    def outside(self, model: Any, accelerator: Any, batch: int | None = None) -> tuple[str, ...]:
        """Why ``model`` on ``accelerator`` at ``batch`` lies outside the rows (empty: inside).

        Parameters
        ----------
        model : ModelConfig (a whole model or one GPU's share)
        accelerator : Accelerator (its preset ``key``; a profile-scaled key counts as its preset)
        batch : int >= 1 or None [sequences]
            None: the batch is not judged (a simulation's batches vary step to step).

        Returns
        -------
        tuple of str
            One phrase per field outside: ``"model family 'qwen2' (fitted: llama)"``, ...
        """
        out = []
        if model.model_type not in self.model_types:
            out.append(f"model family {model.model_type!r} (fitted: {', '.join(self.model_types)})")
        key = str(accelerator.key).split(":")[0]
        if key not in self.accelerators:
            out.append(f"accelerator {key} (fitted: {', '.join(self.accelerators)})")
        if model.weight_dtype not in self.weight_dtypes:
            out.append(f"weights {model.weight_dtype} (fitted: {', '.join(self.weight_dtypes)})")
        if batch is not None and not self.batch_min <= batch <= self.batch_max:
            out.append(f"batch {batch} (fitted: {batch_span(self.batch_min, self.batch_max)})")
        return tuple(out)

    def describe(self) -> str:
        """One line: the families, accelerators, weight dtypes and batch range of the rows."""
        return (f"fitted on {', '.join(self.model_types)} models, {', '.join(self.accelerators)}, weights "
                f"{', '.join(self.weight_dtypes)}, {batch_span(self.batch_min, self.batch_max)}")


def batch_span(low: int, high: int) -> str:
    """The batches a profile was fitted on, in words: ``"batch 8"`` for one, ``"batches 8 to 64"`` for a range.

    Examples
    --------
    >>> batch_span(8, 8), batch_span(1, 64)
    ('batch 8', 'batches 1 to 64')
    """
    return f"batch {low:,}" if low == high else f"batches {low:,} to {high:,}"


#: The scheduler options an engine version can set, as :func:`roofline.sim.serve_continuous` and the other
#: policies name them: the policy ("serial", "static", "continuous"), ``max_num_seqs`` [sequences],
#: ``max_num_batched_tokens`` [tokens], ``prefill`` ("separate", "chunked"), ``admission`` ("reserve",
#: "on_demand") and ``cuda_graphs`` (bool; the constants were fitted with graphs when True).
SCHEDULER_OPTIONS = ("policy", "max_num_seqs", "max_num_batched_tokens", "prefill", "admission", "cuda_graphs")

_CHOICES: dict[str, tuple[Any, ...]] = {"policy": ("serial", "static", "continuous"),
                                         "prefill": ("separate", "chunked"),
                                         "admission": ("reserve", "on_demand"), "cuda_graphs": (True, False)}

#: An accelerator that vLLM V1 gives its larger defaults: memory >= 70 GiB and not an A100
#: (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults).
_LARGE_GPU_BYTES = 70 * 2**30


@attrs.frozen
class SchedulerDefaults:
    """An engine version's scheduler defaults, each with its source (``roofline/data/engine_versions.json``).

    Attributes
    ----------
    settings : tuple of (name, value, Source)
        ``name`` one of :data:`SCHEDULER_OPTIONS`; ``value`` an int, a str, a bool, or for a default that
        depends on the accelerator a dict ``{"large_gpu": v, "other": v, "rule": text}``.
    not_published : tuple of str
        The defaults no stored source states, and why: the scheduler's own defaults run for them.

    Raises
    ------
    InvalidValueError
        An unknown option or a value outside its choices (field ``scheduler``).
    """

    settings: tuple[tuple[str, Any, Source], ...] = ()
    not_published: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        for name, value, _ in self.settings:
            if name not in SCHEDULER_OPTIONS:
                raise InvalidValueError("scheduler", name, f"expected one of {', '.join(SCHEDULER_OPTIONS)}")
            values = [value["large_gpu"], value["other"]] if isinstance(value, dict) else [value]
            for v in values:
                if name in _CHOICES and v not in _CHOICES[name]:
                    raise InvalidValueError("scheduler", v, f"{name}: expected one of {_CHOICES[name]}")
                if name not in _CHOICES and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                    raise InvalidValueError("scheduler", v, f"{name}: expected an integer >= 1")

    def options(self, accelerator: Any = None) -> dict[str, Any]:
        """The defaults as the scheduler's options: name -> value, for ``accelerator`` where a value depends on it.

        An accelerator-dependent value takes ``large_gpu`` on a GPU of at least 70 GiB usable memory that is not
        an A100 (vLLM V1's rule), else ``other``; with no accelerator, ``other``.
        """
        large = (accelerator is not None and accelerator.usable_memory >= _LARGE_GPU_BYTES
                 and "a100" not in str(accelerator.key).lower())
        out = {}
        for name, value, _ in self.settings:
            out[name] = (value["large_gpu"] if large else value["other"]) if isinstance(value, dict) else value
        return out

    def flags(self, accelerator: Any = None) -> dict[str, tuple[str, Any]]:
        """The defaults as the command line takes them (``roofline simulate``'s flags, ``roofline plan``'s axes):
        argparse dest -> (flag, value), in :data:`SCHEDULER_OPTIONS` order, for ``accelerator`` as
        :meth:`options` (``cuda_graphs`` has no flag). ``prefill`` becomes ``chunked_prefill`` (True for
        "chunked"), ``admission`` takes the flag's spelling ("on-demand").

        >>> d = SchedulerDefaults(settings=(("prefill", "chunked", None), ("admission", "on_demand", None)))
        >>> d.flags()
        {'chunked_prefill': ('--chunked-prefill', True), 'admission': ('--admission', 'on-demand')}
        """
        out: dict[str, tuple[str, Any]] = {}
        for name, value in self.options(accelerator).items():
            if name == "prefill":
                out["chunked_prefill"] = ("--chunked-prefill", value == "chunked")
            elif name != "cuda_graphs":
                out[name] = ("--" + name.replace("_", "-"), value.replace("_", "-") if name == "admission" else value)
        return out

    def source(self, name: str) -> Source | None:
        """The source of option ``name`` (None: not stated by any stored source)."""
        return next((src for n, _, src in self.settings if n == name), None)

    def describe(self, accelerator: Any = None) -> str:
        """One line: ``"continuous, max_num_seqs 1024, ..., admission on_demand"`` (unstated ones left out)."""
        opts = self.options(accelerator)
        if not opts:
            return "none published (the scheduler's defaults run)"
        return ", ".join(str(v) if n == "policy" else f"{n} {v}" for n, v in opts.items())


def _band(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, (ErrorBand, FittedRange)):
        raise InvalidValueError(attribute.name, value, "expected an ErrorBand or FittedRange (or None)")


@attrs.frozen
class EngineProfile:
    """One engine's estimate constants, each with its source.

    Parameters
    ----------
    key : str
        Short name for the command line (``"vllm"``).
    name : str
        The profile as the published set names it (``"vLLM with CUDA graphs"``).
    eta_bw : Sourced [1], in (0, 1]
        Achieved share of the datasheet HBM bandwidth.
    eta_mm : Sourced [1], in (0, 1]
        Achieved share of the dense matmul peak.
    t_step : Sourced or None [s]
        Fixed time per step; None is 0 s (see ``fixed``).
    t_layer : Sourced or None [s]
        Fixed time per layer per step; None is 0 s (see ``fixed``).
    t_seq : Sourced or None [s]
        Time per running sequence per decode step (B x t_seq joins the step); None is 0 s
        (see ``fixed``).
    calibration : tuple of str
        Ids of the rows the constants were fitted on.
    fixed : tuple of str
        Each constant not fitted, and why.
    left_out : tuple of str
        Calibration rows of the profile not used by the fit, and why.
    band : ErrorBand or None
        The estimate's residuals on the profile's validation rows (None: not judged).
    fitted_range : FittedRange or None
        What the calibration rows span (None: unknown, every request counts as outside).
    version : str
        The engine version this profile stands for (``"vLLM V1 engine"``); empty for a fitted profile
        looked up by its constants' name.
    scheduler : SchedulerDefaults or None
        The engine's scheduler defaults, each quoted (``roofline/data/engine_versions.json``); None: none.
    eta_bw_by_accelerator : tuple of (accelerator key, Sourced [1])
        eta_bw fitted on one accelerator's own calibration rows, where the profile's rows span several
        accelerators and one has at least two rows (:meth:`eta_bw_for`); every other accelerator takes
        ``eta_bw``, the profile default, named so.
    eta_bw_by_weight_dtype : tuple of (weight dtype, Sourced [1])
        eta_bw fitted on the calibration rows of one weight dtype (``"int4"``, ``"bfloat16"``), where the
        profile's rows span several weight dtypes: one value for each dtype with a row; it comes before the
        accelerator's own (:meth:`eta_bw_for`), every other dtype takes the accelerator's or the default.

    Notes
    -----
    docs/conventions.md, "Bound and estimate". The constants feed
    :func:`roofline.formulas.estimated_step_time` (:meth:`constants`).
    """

    key: str
    name: str
    eta_bw: Sourced = attrs.field(validator=_share)
    eta_mm: Sourced = attrs.field(validator=_share)
    t_step: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    t_layer: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    t_seq: Sourced | None = attrs.field(default=None, validator=_optional_sourced)
    calibration: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    band: ErrorBand | None = attrs.field(default=None, validator=_band)
    fitted_range: FittedRange | None = attrs.field(default=None, validator=_band)
    version: str = ""
    scheduler: SchedulerDefaults | None = None
    eta_bw_by_accelerator: tuple[tuple[str, Sourced], ...] = ()
    eta_bw_by_weight_dtype: tuple[tuple[str, Sourced], ...] = ()

    def eta_bw_for(self, accelerator: Any, weight_dtype: str | None = None) -> tuple[Fraction, str]:
        """eta_bw [1] on ``accelerator`` for weights of ``weight_dtype`` and how it was obtained: the weight
        dtype's own where the profile's rows fit one for it (``"fitted on int4's own rows"``), else the
        accelerator's own (``"fitted on h200-sxm's own rows"``), else ``"profile default"``
        (docs/conventions.md, "Bound and estimate")."""
        value, how = self.eta_bw_sourced(accelerator, weight_dtype)
        return Fraction(value.value), how

    def eta_bw_sourced(self, accelerator: Any, weight_dtype: str | None = None) -> tuple[Sourced, str]:
        """The stored eta_bw :meth:`eta_bw_for` takes (with its source) and how it was obtained."""
        for dtype, value in self.eta_bw_by_weight_dtype:
            if dtype == weight_dtype:
                return value, f"{value.source.kind} on {dtype}'s own rows"
        key = str(getattr(accelerator, "key", "")).split(":")[0]
        for acc, value in self.eta_bw_by_accelerator:
            if acc == key:
                return value, f"{value.source.kind} on {acc}'s own rows"
        return self.eta_bw, "profile default"

    def outside(self, model: Any, accelerator: Any, batch: int | None = None) -> tuple[str, ...]:
        """Why a request lies outside the fitted rows (:meth:`FittedRange.outside`; empty: inside)."""
        if self.fitted_range is None:
            return ("no fitted range recorded",)
        return self.fitted_range.outside(model, accelerator, batch)

    def error_band(self, model: Any = None, accelerator: Any = None, batch: int | None = None) -> str:
        """The line every printed estimate carries: its validation residuals, and whether the request is
        inside the fitted rows.

        ``"validation residuals: median +3.2 %, 10th-90th percentile -8.1 % to +12.0 % (5 rows)"``, then, when
        ``model`` and ``accelerator`` are given and lie outside (:meth:`outside`),
        ``"; estimate, outside the fitted range: accelerator h200-sxm (fitted: a100-80gb)"``.
        """
        band = (self.band or ErrorBand()).describe()
        if model is None or accelerator is None:
            return band
        why = self.outside(model, accelerator, batch)
        return band + (f"; {OUTSIDE_FITTED_RANGE}: {'; '.join(why)}" if why else "; inside the fitted range")

    def constants(self, accelerator: Any = None, weight_dtype: str | None = None) -> dict[str, Fraction]:
        """``eta_bw``, ``eta_mm``, ``t_step`` [s], ``t_layer`` [s], ``t_seq`` [s] as exact Fractions (0 for
        an absent time); with ``accelerator`` (and ``weight_dtype``), the eta_bw of :meth:`eta_bw_for`.

        Pass them with ``**`` to :func:`roofline.formulas.estimated_step_time` and
        :func:`~roofline.formulas.estimated_throughput` (a prefill step takes all but ``t_seq``).
        """
        return {
            "eta_bw": (Fraction(self.eta_bw.value) if accelerator is None and weight_dtype is None
                       else self.eta_bw_for(accelerator, weight_dtype)[0]),
            "eta_mm": Fraction(self.eta_mm.value),
            "t_step": Fraction(self.t_step.value) if self.t_step is not None else Fraction(0),
            "t_layer": Fraction(self.t_layer.value) if self.t_layer is not None else Fraction(0),
            "t_seq": Fraction(self.t_seq.value) if self.t_seq is not None else Fraction(0),
        }

    def overhead(self, num_hidden_layers: int) -> Fraction:
        """t_step + L x t_layer [s] for a model of ``num_hidden_layers`` layers (the fixed part of a step)."""
        c = self.constants()
        return c["t_step"] + num_hidden_layers * c["t_layer"]

    def per_sequence(self) -> Fraction:
        """t_seq [s]: what each running sequence adds to a decode step (0 when absent)."""
        return self.constants()["t_seq"]

    def sources(self) -> dict[str, Sourced]:
        """Every stored constant by name (absent times left out)."""
        return {n: v for n in _CONSTANTS if (v := getattr(self, n)) is not None}

    def scaled(self, accelerator: Accelerator, weight_dtype: str | None = None) -> Accelerator:
        """``accelerator`` with its bandwidth times eta_bw and its peaks times eta_mm (sources ``"derived"``).

        The roofline of the returned accelerator is the estimate's max(bytes / (eta_bw BW),
        FLOPs / (eta_mm peak)), eta_bw the weight dtype's or the accelerator's own where fitted
        (:meth:`eta_bw_for`); links (tensor parallelism) are kept as they are.
        """
        eta = self.eta_bw_for(accelerator, weight_dtype)[0]
        return _scaled(accelerator, eta, Fraction(self.eta_mm.value), self.name)

    def kind(self, name: str) -> str:
        """How constant ``name`` was obtained, one wording for every command.

        The stored constant's source kind (``"fitted"``, ``"measured"``); for an absent time,
        :data:`AT_BOUND_KIND` when the fit put it at its bound 0 (a negative time is not
        allowed), else :data:`NOT_FITTED_KIND` (the rows cannot separate it; see ``fixed``).

        Raises
        ------
        InvalidValueError
            ``name`` is not one of eta_bw, eta_mm, t_step, t_layer, t_seq.
        """
        if name not in _CONSTANTS:
            raise InvalidValueError("name", name, "expected eta_bw, eta_mm, t_step, t_layer or t_seq")
        value = getattr(self, name)
        if value is not None:
            return str(value.source.kind)
        return AT_BOUND_KIND if f"{name} = 0 s: {_AT_BOUND}" in self.fixed else NOT_FITTED_KIND

    def describe(self) -> str:
        """One line: the five constants with their kinds (times in us, :func:`format_constant`)."""
        c = self.constants()
        return ", ".join(format_constant(n, c[n], self.kind(n)) for n in _CONSTANTS)


#: Kind of an absent time the fit put at its bound 0 (:meth:`EngineProfile.kind`).
AT_BOUND_KIND = "fitted at its bound: 0"
#: Kind of an absent time the rows cannot separate (:meth:`EngineProfile.kind`).
NOT_FITTED_KIND = "not fitted: 0"
_AT_BOUND = "fitted at its bound (a negative time is not allowed)"


def format_constant(name: str, value: float | Fraction, kind: str) -> str:
    """A profile constant as ``validate`` and ``report`` print it: ``"t_layer 76.8 us [fitted]"``.

    Parameters
    ----------
    name : {"eta_bw", "eta_mm", "t_step", "t_layer", "t_seq"}
    value : real [1] for the etas, [s] for the times
    kind : str
        :meth:`EngineProfile.kind`.

    Returns
    -------
    str
        Etas to 4 decimals; times in us to 0.1 us, the fit's rounding (:data:`FIT_METHOD`).
    """
    text = f"{float(value) * 1e6:,.1f} us" if name.startswith("t_") else f"{float(value):.4f}"
    return f"{name} {text} [{kind}]"


def _scaled(acc: Accelerator, eta_bw: Fraction, eta_mm: Fraction, label: str) -> Accelerator:
    def scale(v: Sourced, eta: Fraction, what: str) -> Sourced:
        return Sourced(v.value * eta, v.unit, Source("derived", f"{what} {float(eta):.4f} x {v.source.citation}",
                                                     v.source.date, label))

    return attrs.evolve(
        acc,
        key=f"{acc.key}:{label}",
        name=f"{acc.name} ({label})",
        hbm_bandwidth=scale(acc.hbm_bandwidth, eta_bw, "eta_bw"),
        peak_bf16=scale(acc.peak_bf16, eta_mm, "eta_mm"),
        peak_fp8=None if acc.peak_fp8 is None else scale(acc.peak_fp8, eta_mm, "eta_mm"),
        peak_fp4=None if acc.peak_fp4 is None else scale(acc.peak_fp4, eta_mm, "eta_mm"),
    )


def _key(name: str) -> str:
    return PROFILE_KEYS.get(name) or re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")



#: The shipped profiles' file, under roofline/data (written by :func:`profiles_document`).
PROFILES_FILE = "engine_profiles.json"
_FILE_KIND = "roofline-engine-profiles"
#: The constants of a profile, in the order they are printed.
_CONSTANTS = ("eta_bw", "eta_mm", "t_step", "t_layer", "t_seq")


def _sourced_json(value: Sourced | None) -> dict[str, Any] | None:
    if value is None:
        return None
    v = Fraction(value.value)
    return {"value": f"{v.numerator}/{v.denominator}", "unit": value.unit, "source": attrs.asdict(value.source)}


def _sourced_from(doc: dict[str, Any] | None) -> Sourced | None:
    if doc is None:
        return None
    return Sourced(Fraction(doc["value"]), doc["unit"], Source(**doc["source"]))


def profiles_document(fits: dict[str, tuple[dict[str, EngineProfile], dict[str, str]]]) -> dict[str, Any]:
    """The JSON document of the shipped profiles: per FLOPs convention, the fitted profiles and the unavailable.

    Parameters
    ----------
    fits : dict
        FLOPs convention ("exact", "2p") -> (profiles, unavailable) as
        :func:`roofline.calibrate.fit.fit_profiles` returns them.

    Returns
    -------
    dict
        ``{"kind": "roofline-engine-profiles", "schema": 1, "conventions": {flops: {"profiles": [...],
        "unavailable": {name: why}}}}``; each constant's value is an exact fraction written "n/d".

    Raises
    ------
    InvalidValueError
        An unknown FLOPs convention (field ``flops``).
    """
    conventions: dict[str, Any] = {}
    for flops, (profiles, unavailable) in fits.items():
        rows = []
        for p in profiles.values():
            row: dict[str, Any] = {"key": p.key, "name": p.name}
            row.update({n: _sourced_json(getattr(p, n)) for n in _CONSTANTS})
            row.update(calibration=list(p.calibration), fixed=list(p.fixed), left_out=list(p.left_out))
            row.update(eta_bw_by_accelerator=[[k, _sourced_json(v)] for k, v in p.eta_bw_by_accelerator])
            row.update(eta_bw_by_weight_dtype=[[k, _sourced_json(v)] for k, v in p.eta_bw_by_weight_dtype])
            row.update(band=None if p.band is None else attrs.asdict(p.band),
                       fitted_range=None if p.fitted_range is None
                       else attrs.asdict(p.fitted_range))
            rows.append(row)
        conventions[flops_convention(flops)] = {"profiles": rows, "unavailable": dict(unavailable)}
    return {"kind": _FILE_KIND, "schema": 1, "fitted_by": "roofline.calibrate.fit.fit_profiles(load_published(), "
            "flops=...)", "conventions": conventions}


def _sourced_json_required(doc: dict[str, Any]) -> Sourced:
    value = _sourced_from(doc)
    if value is None:
        raise InvalidValueError("eta_bw_by_accelerator", doc, "expected a sourced value")
    return value


def _record(cls: Any, doc: dict[str, Any] | None) -> Any:
    """An ErrorBand or FittedRange from its JSON dict (lists back to tuples), or None."""
    if doc is None:
        return None
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()})


@functools.lru_cache(maxsize=1)
def _document() -> dict[str, Any]:
    text = resources.files("roofline.data").joinpath(PROFILES_FILE).read_text(encoding="utf-8")
    doc = parse_json(text)
    if not isinstance(doc, dict) or doc.get("kind") != _FILE_KIND or doc.get("schema") != 1:
        raise InvalidValueError("engine_profiles", PROFILES_FILE, f"is not a schema-1 {_FILE_KIND} file")
    return doc


@functools.lru_cache(maxsize=4)
def _shipped(flops: str) -> tuple[dict[str, EngineProfile], dict[str, str]]:
    part = _document()["conventions"][flops_convention(flops)]
    profiles = {}
    for row in part["profiles"]:
        constants: dict[str, Any] = {n: _sourced_from(row.get(n)) for n in _CONSTANTS}
        profiles[row["name"]] = EngineProfile(
            key=row["key"], name=row["name"], **constants,
            calibration=tuple(row["calibration"]), fixed=tuple(row["fixed"]), left_out=tuple(row["left_out"]),
            band=_record(ErrorBand, row.get("band")), fitted_range=_record(FittedRange, row.get("fitted_range")),
            eta_bw_by_accelerator=tuple((k, _sourced_json_required(v))
                                        for k, v in row.get("eta_bw_by_accelerator", ())),
            eta_bw_by_weight_dtype=tuple((k, _sourced_json_required(v))
                                         for k, v in row.get("eta_bw_by_weight_dtype", ())))
    return profiles, dict(part["unavailable"])


#: The engine versions' file, under roofline/data (hand-written, every default quoted).
VERSIONS_FILE = "engine_versions.json"
_VERSIONS_KIND = "roofline-engine-versions"


@functools.lru_cache(maxsize=1)
def _versions() -> tuple[dict[str, Any], ...]:
    text = resources.files("roofline.data").joinpath(VERSIONS_FILE).read_text(encoding="utf-8")
    doc = parse_json(text)
    if not isinstance(doc, dict) or doc.get("kind") != _VERSIONS_KIND or doc.get("schema") != 1:
        raise InvalidValueError("engine_versions", VERSIONS_FILE, f"is not a schema-1 {_VERSIONS_KIND} file")
    return tuple(doc["versions"])


def scaled_for(profile: Any, accelerator: Accelerator, model: Any) -> Accelerator:
    """``profile.scaled(accelerator)`` with ``model``'s weight dtype where the profile is an :class:`EngineProfile`
    (its per-dtype eta_bw, :meth:`EngineProfile.eta_bw_for`); any other estimate object's ``scaled(accelerator)``."""
    if isinstance(profile, EngineProfile):
        return profile.scaled(accelerator, getattr(model, "weight_dtype", None))
    return profile.scaled(accelerator)  # type: ignore[no-any-return]


def engine_of(key: str) -> str:
    """The engine an ``--estimate`` key belongs to: ``"vllm"`` for ``"vllm-v0"`` and ``"vllm"``; a key that is
    no engine version (a fitted profile's own key) is its own engine. Never raises for a string."""
    wanted = key.strip().lower()
    return next((r["engine"] for r in _versions() if wanted in (r["key"], r["engine"])), wanted)


def _scheduler(row: dict[str, Any]) -> SchedulerDefaults:
    settings = []
    for name, item in row["scheduler"].items():
        src = item["source"]
        quote = "; ".join(src.get("quote", ()))
        settings.append((name, item["value"], Source(src["kind"], src["citation"] + (f': "{quote}"' if quote else ""),
                                                     src["date"], src["conditions"])))
    return SchedulerDefaults(settings=tuple(settings), not_published=tuple(row.get("not_published", ())))


def engine_versions(*, flops: str = "exact") -> dict[str, EngineProfile | str]:
    """The engine versions of ``roofline/data/engine_versions.json``: key -> profile, or why it has none.

    Each versioned profile is the fitted profile of its ``constants`` (:func:`engine_profiles`) with the
    version's ``key``, ``version`` label and :class:`SchedulerDefaults`; a version whose engine has no priced
    row (SGLang) maps to the reason instead. Within an engine the keys run oldest to newest.

    Raises
    ------
    InvalidValueError
        The file is not a schema-1 engine-versions file, or names constants the shipped profiles lack.
    """
    fitted = engine_profiles(flops=flops)
    out: dict[str, EngineProfile | str] = {}
    for row in _versions():
        name = row["constants"]
        if name is None:
            out[row["key"]] = str(row.get("constants_note", "no constants"))
            continue
        if name not in fitted:
            raise InvalidValueError("engine_versions", name, f"version {row['key']!r} names constants that no "
                                    "shipped profile has")
        out[row["key"]] = attrs.evolve(fitted[name], key=row["key"], version=row["label"],
                                       scheduler=_scheduler(row))
    return out


def version_names() -> list[str]:
    """The version keys (``"vllm-v1"``, ``"trtllm-1.0"``, ...) and engine names (``"vllm"``) of the versions file."""
    rows = _versions()
    return list(dict.fromkeys([r["key"] for r in rows] + [r["engine"] for r in rows]))


def resolve_engine_profile(name: str, *, flops: str = "exact") -> tuple[EngineProfile, str | None]:
    """An ``--estimate`` value resolved: (profile, what it resolved to, or None when named exactly).

    A version key (``"vllm-v0"``, ``"trtllm-1.0"``) gives that version's profile; an engine's name
    (``"vllm"``, ``"trtllm"``) gives its newest version and says so: ``"--estimate vllm is vllm-v1 (vLLM
    V1 engine), the newest of vllm-v0, vllm-v1"``; anything else is looked up by
    :func:`get_engine_profile` (a fitted profile's key or name, no scheduler defaults).

    Raises
    ------
    InvalidValueError
        A version without constants (SGLang: no priced row), naming ``estimate`` and why.
    UnknownPresetError
        No version, engine or profile has that name.
    """
    if not isinstance(name, str):
        return get_engine_profile(name, flops=flops), None
    wanted = name.strip().lower()
    versions = engine_versions(flops=flops)
    rows = _versions()
    engine_keys = [r["key"] for r in rows if r["engine"] == wanted]
    note = None
    if wanted not in versions and engine_keys:
        newest = engine_keys[-1]
        label = next(r["label"] for r in rows if r["key"] == newest)
        note = (f"--estimate {name} is {newest} ({label}), the newest of {', '.join(engine_keys)}"
                if len(engine_keys) > 1 else None)
        wanted = newest
    if wanted in versions:
        found = versions[wanted]
        if isinstance(found, str):
            raise InvalidValueError("estimate", name, f"engine version {wanted!r} has no constants yet: {found}")
        return found, note
    return get_engine_profile(name, flops=flops), None


def version_note(profile: Any) -> str | None:
    """Which engine version a profile is, among its engine's: ``"vllm-v1 (vLLM V1 engine), the newest of vllm-v0,
    vllm-v1"``; None for a profile that is no engine version (a fitted profile looked up by its own name)."""
    version = getattr(profile, "version", "")
    if not version:
        return None
    rows = _versions()
    engine = next((r["engine"] for r in rows if r["key"] == profile.key), None)
    keys = [r["key"] for r in rows if r["engine"] == engine]
    if len(keys) < 2:
        return f"{profile.key} ({version})"
    if keys[-1] == profile.key:
        return f"{profile.key} ({version}), the newest of {', '.join(keys)}"
    return f"{profile.key} ({version}), one of {', '.join(keys)}; the newest is {keys[-1]}"


def engine_profiles(*, flops: str = "exact") -> dict[str, EngineProfile]:
    """The shipped engine profiles: fitted on the calibration rows of the published set (cached).

    Parameters
    ----------
    flops : {"exact", "2p"}

    Returns
    -------
    dict
        Profile name -> EngineProfile, in the published file's order.

    Raises
    ------
    MeasurementFileError
        The shipped published set is unreadable.

    Examples
    --------
    >>> sorted(p.key for p in engine_profiles().values())
    ['gpt-fast', 'lmdeploy', 'nim', 'sglang', 'trtllm', 'vllm']
    """
    return dict(_shipped(flops)[0])


def unavailable_profiles(*, flops: str = "exact") -> dict[str, str]:
    """Profiles of the published set without constants yet, and why (their calibration rows are pending)."""
    return dict(_shipped(flops)[1])


def profile_names() -> list[str]:
    """Keys accepted by :func:`get_engine_profile` for the shipped profiles (fitted ones), sorted."""
    return sorted(p.key for p in engine_profiles().values())


def get_engine_profile(name: str | EngineProfile, *, flops: str = "exact") -> EngineProfile:
    """A shipped engine profile by key (``"vllm"``) or by name (``"vLLM with CUDA graphs"``), case-insensitive.

    Parameters
    ----------
    name : str or EngineProfile
        An EngineProfile is returned as it is.
    flops : {"exact", "2p"}

    Returns
    -------
    EngineProfile

    Raises
    ------
    UnknownPresetError
        No profile has that name; a profile whose calibration rows are not priced yet is
        refused with the reason (an InvalidValueError naming ``estimate``).

    Examples
    --------
    >>> get_engine_profile("vllm").name
    'vLLM with CUDA graphs'
    """
    if isinstance(name, EngineProfile):
        return name
    if not isinstance(name, str):
        raise UnknownPresetError("engine profile", repr(name), profile_names())
    wanted = name_key(name)
    for profile in engine_profiles(flops=flops).values():
        if wanted in (profile.key, profile.name.lower()):
            return profile
    for pname, why in unavailable_profiles(flops=flops).items():
        if wanted in (_key(pname), pname.lower()):
            raise InvalidValueError("estimate", name, f"profile {pname!r} has no constants yet: {why}")
    raise UnknownPresetError("engine profile", name, profile_names())


