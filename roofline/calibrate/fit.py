"""Engine profiles fitted: the estimate's constants, fitted on the calibration subset only.

The profile type (:class:`~roofline.profiles.EngineProfile`) and the shipped profiles
(:func:`~roofline.profiles.get_engine_profile`, read from ``roofline/data/engine_profiles.json``)
live in :mod:`roofline.profiles`, outside the measurement side; this module fits them
(:func:`fit_shipped` is what that file holds) and re-exports those names.

The **estimate** (docs/conventions.md, "Bound and estimate") is the bound's step with an
engine's constants::

    step = max(bytes / (eta_bw x bandwidth), FLOPs / (eta_mm x peak)) + t_step + L x t_layer + B x t_seq

(+ whatever :func:`roofline.calibrate.compare.predict` adds to the roofline, such as the
all-reduce of tensor parallelism, once it prices it). An :class:`EngineProfile` holds one
engine's four constants, each a :class:`roofline.Sourced` value whose :class:`roofline.Source`
says where it comes from: ``"fitted"`` (naming the calibration rows) or ``"measured"``.

The fit (:func:`fit_profile`)
-----------------------------
* Rows: the profile's points of the published set that the file's fixed split puts in the
  ``calibration`` subset and that this version prices. A row of the ``validation`` subset is
  refused by name: no constant is ever fitted to a row it is judged on.
* Base constants: each row's spec (datasheet) bandwidth and dense peak, so eta_bw is the
  achieved share of the datasheet bandwidth.
* eta_mm is not fitted: no published row is compute-bound, so the data cannot see it. It is
  the measured share of the matmul peak (``Accelerator.measured_bf16 / peak_bf16``,
  stas00/ml-engineering's "Maximum Achievable Matmul FLOPS" table) of the accelerator the
  calibration rows ran on: the lowest over those of their accelerators that have a
  measurement (vLLM's rows ran on H200 SXM and A100 SXM 80GB, and only the A100 has one, so
  the A100's share serves both); H100 SXM's where none has a measurement. Its source names
  the accelerators the rows ran on and the one the share comes from. Rows that are
  compute-bound at eta_bw = 1 are left out of the fit (they would calibrate eta_mm) and listed.
* For memory-bound rows the estimate is linear in x = 1 / eta_bw, t_step, t_layer and t_seq:
  ``estimate_i = x M_i + A_i + t_step + L_i t_layer + B_i t_seq``, with M_i the row's memory time at the
  datasheet bandwidth and A_i what ``predict`` adds beyond the roofline (0 on one GPU); both
  are read off ``predict`` itself at eta_bw = 1 and 1/2, so the fit prices each row exactly
  as ``validate`` does.
* Objective: least squares on relative error, sum_i ((estimate_i - measured_i) / measured_i)^2,
  under eta_bw <= 1 (x >= 1), t_step >= 0, t_layer >= 0, t_seq >= 0. Solved exactly in Fractions: the
  unconstrained normal equations of every choice of free constants (the others at their
  bound), the feasible solution of least cost wins (for a convex objective with bounds this
  is the constrained optimum). Exact arithmetic makes the result independent of row order.
* What the rows can separate: constants enter in the order eta_bw, t_step, t_layer, t_seq,
  each one that raises the design's rank (the rows determine it beside those before it): one
  row fits eta_bw alone; rows with a single layer count cannot tell t_layer from t_step, so
  t_layer is 0 and t_step carries it; rows of a single batch cannot tell t_seq from t_step. Each
  profile lists what it left out and why (:attr:`EngineProfile.fixed`).
* The fitted values are rounded (eta to 4 decimals, times to 0.1 us) and stored as exact
  Fractions.

Same rows in, same constants out; tests check it, and that no validation row enters a fit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from fractions import Fraction

import attrs

from ..errors import InvalidValueError
from ..hardware import Source, Sourced, get_accelerator
from ..profiles import _AT_BOUND, EngineProfile, ErrorBand, FittedRange, _key, _scaled
from ..profiles import AT_BOUND_KIND as AT_BOUND_KIND  # re-exported: they lived here before roofline.profiles
from ..profiles import NOT_FITTED_KIND as NOT_FITTED_KIND
from ..profiles import PROFILE_KEYS as PROFILE_KEYS
from ..profiles import engine_profiles as engine_profiles
from ..profiles import format_constant as format_constant
from ..profiles import get_engine_profile as get_engine_profile
from ..profiles import profile_names as profile_names
from ..profiles import unavailable_profiles as unavailable_profiles
from .compare import Report, estimate_step, predict, validate
from .schema import Measurement

__all__ = [  # and, re-exported from roofline.profiles: EngineProfile, get_engine_profile, engine_profiles, ...
    "FIT_METHOD",
    "fit_profile",
    "fit_profiles",
    "fit_shipped",
    "error_band",
    "estimate_row",
    "validate_with_estimates",
]

#: How every fitted constant was obtained (its Source's ``conditions``).
FIT_METHOD = (
    "least squares on relative error, sum ((estimate - measured) / measured)^2, over the named calibration rows "
    "only, with eta_bw <= 1, t_step >= 0, t_layer >= 0, t_seq >= 0, solved exactly (Fractions); base constants: the "
    "datasheet bandwidth and dense peak of each row's accelerator; eta to 4 decimals, times to 0.1 us "
    "(roofline.calibrate.fit)"
)

#: The date the fit's rule and the published set's split were fixed.
FIT_DATE = "2026-12-01"

_ETA_DIGITS = 10**4
_TIME_UNITS = 10**7  # 0.1 us
_NAMES = ("eta_bw", "t_step", "t_layer", "t_seq")
_FALLBACK_MM = "h100-sxm"


def _eta_mm(rows: Sequence[Measurement]) -> Sourced:
    """The measured matmul share of the calibration rows' accelerators (the lowest; H100 SXM's if none).

    The citation ends with which accelerators the rows ran on and which of them the share comes
    from: an accelerator without a measured matmul peak (H200 SXM) takes the share of one that has
    it, and the citation says so.
    """
    ran_on = sorted({m.spec.key for m in rows if m.spec is not None})
    candidates = []
    for m in rows:
        acc = m.spec
        if acc is not None and acc.measured_bf16 is not None:
            candidates.append((Fraction(acc.measured_bf16.value) / Fraction(acc.peak_bf16.value), acc.key, acc))
    measured = sorted({c[1] for c in candidates})
    rows_ran = f"the calibration rows ran on {', '.join(ran_on)}"
    if not candidates:
        acc = get_accelerator(_FALLBACK_MM)
        assert acc.measured_bf16 is not None
        candidates.append((Fraction(acc.measured_bf16.value) / Fraction(acc.peak_bf16.value), acc.key, acc))
        where = f"{rows_ran}, none with a measured matmul peak; {acc.key}'s share is used for every row"
    elif len(ran_on) == 1:
        where = f"the calibration rows' accelerator ({ran_on[0]})"
    elif measured == ran_on:
        where = f"the lowest over the calibration rows' accelerators ({', '.join(ran_on)})"
    elif len(measured) == 1:
        where = (f"{rows_ran}; only {measured[0]} has a measured matmul peak, so its share is used for every "
                 "row")
    else:
        where = (f"{rows_ran}; the lowest over those with a measured matmul peak ({', '.join(measured)}), "
                 "used for every row")
    eta, key, acc = min(candidates, key=lambda c: (c[0], c[1]))
    assert acc.measured_bf16 is not None
    mm = acc.measured_bf16
    citation = (
        f"{mm.source.citation}: {float(mm.value) / 1e12:.1f} TFLOP/s achieved of the dense "
        f"{float(acc.peak_bf16.value) / 1e12:.1f} TFLOP/s ({acc.name}) = {float(eta):.4f}; {where}"
    )
    return Sourced(eta, "1", Source("measured", citation, mm.source.date,
                                    "not fitted: no calibration row is compute-bound; " + mm.source.conditions))


def _row_parts(m: Measurement, eta_mm: Fraction, flops: str) -> tuple[Fraction, Fraction] | None:
    """(M, A): the row's memory time at the datasheet bandwidth and what predict adds [s]; None if compute-bound."""
    assert m.spec is not None
    one, bound = predict(m, _scaled(m.spec, Fraction(1), eta_mm, "fit"), flops=flops)
    if bound != "memory":
        return None
    two, _ = predict(m, _scaled(m.spec, Fraction(1, 2), eta_mm, "fit"), flops=flops)
    memory = Fraction(two) - Fraction(one)
    return memory, Fraction(one) - memory


def _solve(a: list[list[Fraction]], b: list[Fraction]) -> list[Fraction] | None:
    """Exact solution of the square system a x = b (Gauss-Jordan in Fractions); None when singular."""
    n = len(b)
    rows = [list(r) + [v] for r, v in zip(a, b, strict=True)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if pivot is None:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] / rows[i][i] for i in range(n)]


def _rank(columns: list[list[Fraction]]) -> int:
    """Rank of the matrix whose columns are given (exact)."""
    if not columns:
        return 0
    gram = [[sum((x * y for x, y in zip(ci, cj, strict=True)), Fraction(0)) for cj in columns] for ci in columns]
    n = len(gram)
    rank, rows = 0, [list(r) for r in gram]
    for col in range(n):
        pivot = next((r for r in range(rank, n) if rows[r][col] != 0), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for r in range(n):
            if r != rank and rows[r][col] != 0:
                factor = rows[r][col] / rows[rank][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[rank], strict=True)]
        rank += 1
    return rank


def _least_squares(columns: list[list[Fraction]], target: list[Fraction]) -> list[Fraction]:
    """Bounded least squares: minimise |sum_j p_j col_j - target|^2 with p_0 >= 1 and p_j >= 0 (j > 0)."""
    lower = [Fraction(1)] + [Fraction(0)] * (len(columns) - 1)
    best: tuple[Fraction, list[Fraction]] | None = None
    k = len(columns)
    for size in range(k, -1, -1):
        for free in itertools.combinations(range(k), size):
            fixed_part = [sum((lower[j] * columns[j][i] for j in range(k) if j not in free), Fraction(0))
                          for i in range(len(target))]
            residual_target = [t - f for t, f in zip(target, fixed_part, strict=True)]
            a = [[sum((x * y for x, y in zip(columns[p], columns[q], strict=True)), Fraction(0)) for q in free]
                 for p in free]
            b = [sum((x * y for x, y in zip(columns[p], residual_target, strict=True)), Fraction(0)) for p in free]
            solution = _solve(a, b) if free else []
            if solution is None:
                continue
            params = list(lower)
            for j, v in zip(free, solution, strict=True):
                params[j] = v
            if any(p < lo for p, lo in zip(params, lower, strict=True)):
                continue
            cost = sum(((sum((params[j] * columns[j][i] for j in range(k)), Fraction(0)) - target[i]) ** 2
                        for i in range(len(target))), Fraction(0))
            if best is None or cost < best[0]:
                best = (cost, params)
    assert best is not None  # all constants at their bounds is always feasible
    return best[1]


def fit_profile(name: str, rows: Sequence[Measurement], *, flops: str = "exact") -> EngineProfile:
    """Fit one engine profile's constants on its calibration rows (see the module docstring).

    Parameters
    ----------
    name : str
        The profile's name (every row's ``engine_profile`` must be it).
    rows : sequence of Measurement
        The profile's calibration rows: split ``"calibration"``, with a spec accelerator.
    flops : {"exact", "2p"}
        FLOP convention of the bytes-and-FLOPs side (:meth:`roofline.ModelConfig.flops_per_token`).

    Returns
    -------
    EngineProfile
        eta_bw, t_step, t_layer of kind ``"fitted"`` (naming the rows used), eta_mm of kind
        ``"measured"``; times the rows cannot separate are None (0 s), said in ``fixed``.

    Raises
    ------
    InvalidValueError
        No rows (field ``rows``); a row of another profile (``engine_profile``), of the
        validation subset or of no subset (``split``), without spec constants (``spec``),
        or twice (``id``).

    Notes
    -----
    docs/conventions.md, "Bound and estimate": a constant is never fitted to the row it is
    judged on. Same rows in (in any order), same constants out.
    """
    rows = list(rows)
    if not rows:
        raise InvalidValueError("rows", [], f"no calibration row to fit profile {name!r} on")
    seen: set[str] = set()
    for m in rows:
        if not isinstance(m, Measurement):
            raise InvalidValueError("rows", m, "every row must be a Measurement")
        if m.engine_profile != name:
            raise InvalidValueError("engine_profile", m.engine_profile, f"row {m.id!r} is not in profile {name!r}")
        if m.split != "calibration":
            raise InvalidValueError("split", m.split or "(none)",
                                    f"row {m.id!r} is not in the calibration subset; a constant is never fitted "
                                    "to a row it is judged on")
        if m.spec is None:
            raise InvalidValueError("spec", None, f"row {m.id!r} has no datasheet constants to scale")
        if m.id in seen:
            raise InvalidValueError("id", m.id, "appears twice in the rows")
        seen.add(m.id)
    rows.sort(key=lambda m: m.id)
    eta_mm = _eta_mm(rows)
    used, parts, left_out = [], [], []
    for m in rows:
        p = _row_parts(m, Fraction(eta_mm.value), flops)
        if p is None:
            left_out.append(f"{m.id}: compute-bound at eta_bw = 1 (it would calibrate eta_mm, which is not fitted)")
            continue
        used.append(m)
        parts.append(p)
    if not used:
        raise InvalidValueError("rows", [m.id for m in rows], f"no memory-bound calibration row for profile {name!r}")
    measured = [Fraction(m.measured_s) for m in used]
    all_columns = [
        [mem / t for (mem, _), t in zip(parts, measured, strict=True)],
        [1 / t for t in measured],
        [Fraction(m.model.num_hidden_layers) / t for m, t in zip(used, measured, strict=True)],
        [Fraction(m.batch) / t for m, t in zip(used, measured, strict=True)],
    ]
    target = [(t - extra) / t for (_, extra), t in zip(parts, measured, strict=True)]
    included = [0]
    for j in range(1, len(all_columns)):  # in order: each constant the rows separate from those before it
        if _rank([all_columns[i] for i in included + [j]]) == len(included) + 1:
            included.append(j)
    fitted = _least_squares([all_columns[i] for i in included], target)
    solution = [Fraction(0)] * len(all_columns)
    for i, v in zip(included, fitted, strict=True):
        solution[i] = v
    ids = ", ".join(m.id for m in used)
    citation = f"fitted on the {len(used)} calibration row(s) of profile {name!r} in the published set: {ids}"
    eta_bw = Fraction(round(_ETA_DIGITS / solution[0]), _ETA_DIGITS)
    values = {n: Fraction(round(solution[i] * _TIME_UNITS), _TIME_UNITS)
              for i, n in enumerate(("t_step", "t_layer", "t_seq"), start=1)}
    fixed = []
    layers = sorted({m.model.num_hidden_layers for m in used})
    batches = sorted({m.batch for m in used})
    reasons = {
        "t_step": f"the rows cannot separate it from eta_bw ({len(used)} row(s))",
        "t_layer": f"the rows cannot separate it from t_step (every row has {layers[0]} layers)" if len(layers) == 1
        else f"the rows cannot separate it from eta_bw and t_step ({len(used)} rows)",
        "t_seq": f"the rows cannot separate it from t_step (every row has batch {batches[0]})" if len(batches) == 1
        else f"the rows cannot separate it from eta_bw, t_step and t_layer ({len(used)} rows)",
    }
    times: dict[str, Sourced | None] = {}
    for i, n in enumerate(("t_step", "t_layer", "t_seq"), start=1):
        if i not in included:
            fixed.append(f"{n} = 0 s: not fitted, {reasons[n]}")
            times[n] = None
        elif values[n] == 0:
            fixed.append(f"{n} = 0 s: {_AT_BOUND}")
            times[n] = None
        else:
            times[n] = Sourced(values[n], "s", Source("fitted", citation, FIT_DATE, FIT_METHOD))
    return EngineProfile(
        key=_key(name),
        name=name,
        eta_bw=Sourced(eta_bw, "1", Source("fitted", citation, FIT_DATE, FIT_METHOD)),
        eta_mm=eta_mm,
        t_step=times["t_step"],
        t_layer=times["t_layer"],
        t_seq=times["t_seq"],
        calibration=tuple(m.id for m in used),
        fixed=tuple(fixed),
        left_out=tuple(left_out),
        fitted_range=_fitted_range(used),
        eta_bw_by_accelerator=_per_group(name, used, parts, measured, values, group=_accelerator_key,
                                         what="on", min_rows=2),
        eta_bw_by_weight_dtype=_per_group(name, used, parts, measured, values, group=_weight_dtype,
                                          what="with weights in", min_rows=1),
    )


def _accelerator_key(m: Measurement) -> str:
    return "" if m.spec is None else m.spec.key


def _weight_dtype(m: Measurement) -> str:
    return m.model.weight_dtype


def _per_group(name: str, used: Sequence[Measurement], parts: Sequence[tuple[Fraction, Fraction]],
               measured: Sequence[Fraction], times: dict[str, Fraction], *, group: Callable[[Measurement], str],
               what: str, min_rows: int) -> tuple[tuple[str, Sourced], ...]:
    """eta_bw of each group of the rows (an accelerator, a weight dtype) with ``min_rows`` or more rows, when the
    rows span several groups.

    The profile's times (t_step, t_layer, t_seq, as fitted and rounded) stay; x = 1 / eta_bw alone minimises the
    same relative least squares over that group's rows: x = sum c_i y_i / sum c_i^2 with c_i = M_i / m_i,
    y_i = (m_i - A_i - t_i) / m_i, and x >= 1 (eta_bw <= 1). Rounded as the profile's eta_bw.
    """
    keys = sorted({group(m) for m in used})
    if len(keys) < 2:
        return ()
    out = []
    for key in keys:
        idx = [i for i, m in enumerate(used) if group(m) == key]
        if len(idx) < min_rows:
            continue
        c = [parts[i][0] / measured[i] for i in idx]
        y = [(measured[i] - parts[i][1] - times["t_step"] - used[i].model.num_hidden_layers * times["t_layer"]
              - used[i].batch * times["t_seq"]) / measured[i] for i in idx]
        x = max(Fraction(1), sum((a * b for a, b in zip(c, y, strict=True)), Fraction(0)) / sum(a * a for a in c))
        ids = ", ".join(used[i].id for i in idx)
        citation = (f"fitted on the {len(idx)} calibration row(s) of profile {name!r} {what} {key}: {ids} (the "
                    "profile's times held)")
        out.append((key, Sourced(Fraction(round(_ETA_DIGITS / x), _ETA_DIGITS), "1",
                                 Source("fitted", citation, FIT_DATE, FIT_METHOD))))
    return tuple(out)


def _fitted_range(rows: Sequence[Measurement]) -> FittedRange:
    """The model families, accelerators, weight dtypes and batch range of the rows a profile was fitted on."""
    return FittedRange(
        model_types=tuple(sorted({m.model.model_type for m in rows})),
        accelerators=tuple(sorted({m.spec.key for m in rows if m.spec is not None})),
        weight_dtypes=tuple(sorted({m.model.weight_dtype for m in rows})),
        batch_min=min(m.batch for m in rows),
        batch_max=max(m.batch for m in rows),
    )


def error_band(profile: EngineProfile, measurements: Sequence[Measurement], *, flops: str = "exact") -> ErrorBand:
    """The residuals of ``profile``'s estimate on its validation rows among ``measurements``.

    Parameters
    ----------
    profile : EngineProfile
    measurements : sequence of Measurement
        Rows of any subset: only those of ``profile.name`` in the validation subset, with spec constants,
        are judged (a calibration row never is: the band measures rows the constants never saw).
    flops : {"exact", "2p"}

    Returns
    -------
    ErrorBand
        Signed (estimate - measured) / measured per row, their median and 10th-90th percentiles
        (:meth:`roofline.profiles.ErrorBand.of`).

    Raises
    ------
    InvalidValueError
        As :func:`estimate_row`.
    """
    errors = {}
    for m in measurements:
        if m.engine_profile == profile.name and m.split == "validation" and m.spec is not None:
            errors[m.id] = (estimate_row(m, profile, flops=flops) - m.measured_s) / m.measured_s
    return ErrorBand.of(errors)


def fit_profiles(
    measurements: Sequence[Measurement], *, flops: str = "exact"
) -> tuple[dict[str, EngineProfile], dict[str, str]]:
    """Fit every engine profile that has priced calibration rows among ``measurements``.

    Parameters
    ----------
    measurements : sequence of Measurement
        Rows of any subset; only the calibration rows of each profile are used.
    flops : {"exact", "2p"}

    Returns
    -------
    (profiles, unavailable)
        ``profiles``: profile name -> EngineProfile (each with its :func:`error_band` on the validation rows
        among ``measurements``); ``unavailable``: profile name -> why
        it has no constants (no priced calibration row).

    Raises
    ------
    InvalidValueError
        As :func:`fit_profile`.
    """
    names = list(dict.fromkeys(m.engine_profile for m in measurements if m.engine_profile))
    profiles: dict[str, EngineProfile] = {}
    unavailable: dict[str, str] = {}
    for name in names:
        rows = [m for m in measurements if m.engine_profile == name and m.split == "calibration"
                and m.spec is not None]
        if rows:
            fitted = fit_profile(name, rows, flops=flops)
            profiles[name] = attrs.evolve(fitted, band=error_band(fitted, measurements, flops=flops))
        else:
            unavailable[name] = "no calibration row of this profile is priced by this version"
    return profiles, unavailable


def fit_shipped(flops: str = "exact") -> tuple[dict[str, EngineProfile], dict[str, str]]:
    """The shipped profiles as the fit gives them today: (profiles, unavailable) on the published set.

    :func:`fit_profiles` on :func:`roofline.calibrate.load_published`, with the profiles whose
    calibration rows are pending listed as unavailable and why. ``roofline/data/engine_profiles.json``
    (what :func:`roofline.profiles.get_engine_profile` reads) is this, written by
    :func:`roofline.profiles.profiles_document`; a test keeps the two equal.

    Raises
    ------
    InvalidValueError
        An unknown FLOPs convention.
    MeasurementFileError
        The shipped published set is unreadable.
    """
    from .published import load_published, pending_published

    profiles, unavailable = fit_profiles(load_published(), flops=flops)
    pending: dict[str, list[str]] = {}
    for p in pending_published():
        if p.engine_profile and p.split == "calibration":
            pending.setdefault(p.engine_profile, []).append(f"{p.id} ({'; '.join(p.reasons)})")
    for name, why in pending.items():
        if name not in profiles:
            unavailable[name] = "its calibration rows are not priced yet: " + ", ".join(why)
    return profiles, unavailable


def estimate_row(m: Measurement, profile: EngineProfile, *, flops: str = "exact") -> float:
    """The estimate of a measurement's step under ``profile`` [s] (:func:`roofline.calibrate.compare.estimate_step`).

    Raises
    ------
    InvalidValueError
        The row has no spec constants (field ``spec``).
    """
    return estimate_step(m, profile, flops=flops)


def validate_with_estimates(measurements: Sequence[Measurement] | None = None, *, flops: str = "exact") -> Report:
    """:func:`roofline.calibrate.compare.validate` with each profile fitted on the calibration rows among them.

    Parameters
    ----------
    measurements : sequence of Measurement, optional
        Default: :func:`roofline.calibrate.compare.default_measurements`.
    flops : {"exact", "2p"}

    Returns
    -------
    Report
        Bound and estimate for every row; the profiles fitted on the calibration rows of
        ``measurements`` only (:func:`fit_profiles`), so a validation row's estimate never
        saw the row. Profiles without a priced calibration row are listed as unavailable.

    Raises
    ------
    InvalidValueError
        As :func:`roofline.calibrate.compare.validate` and :func:`fit_profile`.

    Examples
    --------
    >>> from roofline.calibrate import load_published
    >>> report = validate_with_estimates(load_published())
    >>> report.targets()[0]["met"]
    True
    """
    from .compare import default_measurements

    items = list(default_measurements() if measurements is None else measurements)
    profiles, unavailable = fit_profiles(items, flops=flops) if items else ({}, {})
    return validate(items, flops=flops, profiles=profiles, unavailable=unavailable)

