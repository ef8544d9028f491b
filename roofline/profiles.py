"""Engine profiles: the estimate's constants, each with its source, and the shipped ones.

The **estimate** (docs/conventions.md, "Bound and estimate") is the bound's step with an
engine's constants::

    step = max(bytes / (eta_bw x bandwidth), FLOPs / (eta_mm x peak)) + t_step + L x t_layer

An :class:`EngineProfile` holds one engine's four constants, each a :class:`roofline.Sourced`
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

from ._io import parse_json
from .errors import InvalidValueError, UnknownPresetError
from .hardware import Accelerator, Source, Sourced, _optional_sourced, _sourced
from .models import flops_convention

__all__ = [
    "EngineProfile",
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
}

def _share(instance: object, attribute: attrs.Attribute, value: Sourced) -> None:
    _sourced(instance, attribute, value)
    if not 0 < value.value <= 1:
        raise InvalidValueError(attribute.name, float(value.value), "must be in (0, 1]")


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
    calibration : tuple of str
        Ids of the rows the constants were fitted on.
    fixed : tuple of str
        Each constant not fitted, and why.
    left_out : tuple of str
        Calibration rows of the profile not used by the fit, and why.

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
    calibration: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()

    def constants(self) -> dict[str, Fraction]:
        """``eta_bw``, ``eta_mm``, ``t_step`` [s], ``t_layer`` [s] as exact Fractions (0 for an absent time).

        Pass them with ``**`` to :func:`roofline.formulas.estimated_step_time` and its siblings.
        """
        return {
            "eta_bw": Fraction(self.eta_bw.value),
            "eta_mm": Fraction(self.eta_mm.value),
            "t_step": Fraction(self.t_step.value) if self.t_step is not None else Fraction(0),
            "t_layer": Fraction(self.t_layer.value) if self.t_layer is not None else Fraction(0),
        }

    def overhead(self, num_hidden_layers: int) -> Fraction:
        """t_step + L x t_layer [s] for a model of ``num_hidden_layers`` layers."""
        c = self.constants()
        return c["t_step"] + num_hidden_layers * c["t_layer"]

    def sources(self) -> dict[str, Sourced]:
        """Every stored constant by name (absent times left out)."""
        return {n: v for n in ("eta_bw", "eta_mm", "t_step", "t_layer") if (v := getattr(self, n)) is not None}

    def scaled(self, accelerator: Accelerator) -> Accelerator:
        """``accelerator`` with its bandwidth times eta_bw and its peaks times eta_mm (sources ``"derived"``).

        The roofline of the returned accelerator is the estimate's max(bytes / (eta_bw BW),
        FLOPs / (eta_mm peak)); links (tensor parallelism) are kept as they are.
        """
        return _scaled(accelerator, Fraction(self.eta_bw.value), Fraction(self.eta_mm.value), self.name)

    def kind(self, name: str) -> str:
        """How constant ``name`` was obtained, one wording for every command.

        The stored constant's source kind (``"fitted"``, ``"measured"``); for an absent time,
        :data:`AT_BOUND_KIND` when the fit put it at its bound 0 (a negative time is not
        allowed), else :data:`NOT_FITTED_KIND` (the rows cannot separate it; see ``fixed``).

        Raises
        ------
        InvalidValueError
            ``name`` is not one of eta_bw, eta_mm, t_step, t_layer.
        """
        if name not in ("eta_bw", "eta_mm", "t_step", "t_layer"):
            raise InvalidValueError("name", name, "expected eta_bw, eta_mm, t_step or t_layer")
        value = getattr(self, name)
        if value is not None:
            return str(value.source.kind)
        return AT_BOUND_KIND if f"{name} = 0 s: {_AT_BOUND}" in self.fixed else NOT_FITTED_KIND

    def describe(self) -> str:
        """One line: the four constants with their kinds (times in us, :func:`format_constant`)."""
        c = self.constants()
        return ", ".join(format_constant(n, c[n], self.kind(n)) for n in ("eta_bw", "eta_mm", "t_step", "t_layer"))


#: Kind of an absent time the fit put at its bound 0 (:meth:`EngineProfile.kind`).
AT_BOUND_KIND = "fitted at its bound: 0"
#: Kind of an absent time the rows cannot separate (:meth:`EngineProfile.kind`).
NOT_FITTED_KIND = "not fitted: 0"
_AT_BOUND = "fitted at its bound (a negative time is not allowed)"


def format_constant(name: str, value: float | Fraction, kind: str) -> str:
    """A profile constant as ``validate`` and ``report`` print it: ``"t_layer 76.8 us [fitted]"``.

    Parameters
    ----------
    name : {"eta_bw", "eta_mm", "t_step", "t_layer"}
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
_CONSTANTS = ("eta_bw", "eta_mm", "t_step", "t_layer")


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
            rows.append(row)
        conventions[flops_convention(flops)] = {"profiles": rows, "unavailable": dict(unavailable)}
    return {"kind": _FILE_KIND, "schema": 1, "fitted_by": "roofline.calibrate.fit.fit_profiles(load_published(), "
            "flops=...)", "conventions": conventions}


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
        constants: dict[str, Any] = {n: _sourced_from(row[n]) for n in _CONSTANTS}
        profiles[row["name"]] = EngineProfile(
            key=row["key"], name=row["name"], **constants,
            calibration=tuple(row["calibration"]), fixed=tuple(row["fixed"]), left_out=tuple(row["left_out"]))
    return profiles, dict(part["unavailable"])


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
    ['gpt-fast', 'lmdeploy', 'nim', 'trtllm', 'vllm']
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
    wanted = name.strip().lower()
    for profile in engine_profiles(flops=flops).values():
        if wanted in (profile.key, profile.name.lower()):
            return profile
    for pname, why in unavailable_profiles(flops=flops).items():
        if wanted in (_key(pname), pname.lower()):
            raise InvalidValueError("estimate", name, f"profile {pname!r} has no constants yet: {why}")
    raise UnknownPresetError("engine profile", name, profile_names())


