"""The estimate beside the bound: engine profiles fitted on the calibration subset, and where they are used."""

from __future__ import annotations

import json
import statistics
from fractions import Fraction

import attrs
import pytest
from _text import unwrapped

import roofline.formulas as f
from roofline import Source, get_accelerator, get_model
from roofline.calibrate.fit import (
    EngineProfile,
    engine_profiles,
    estimate_row,
    fit_profile,
    fit_profiles,
    get_engine_profile,
)
from roofline.cli import main
from roofline.errors import InvalidValueError, UnknownPresetError
from roofline.estimate import decode_step
from roofline.sim import RooflineCostModel
from roofline.validate import load_published, validate_with_estimates

ROWS = load_published()
BY_ID = {m.id: m for m in ROWS}
VLLM_CAL = ("vllm-llama-3-70b-tp4-b8-h200", "vllm-llama-3.1-8b-b8-a100", "vllm-llama-3.1-8b-b8-h200")


def _calibration(name: str) -> list:
    return [m for m in ROWS if m.engine_profile == name and m.split == "calibration"]


def _memory_time(m) -> Fraction:
    """One GPU's bytes (its share under tensor parallelism; experts its batch touches) / datasheet bandwidth [s]."""
    share = m.model.per_gpu(m.tensor_parallel)
    read = share.decode_weight_bytes(m.batch) + share.kv_bytes_per_token * m.context_sum
    return Fraction(read) / Fraction(m.spec.bandwidth)


def _allreduce(m) -> Fraction:
    """2 L ring all-reduces of B x h x 2 bytes over the row's link, by hand [s] (0 on one GPU)."""
    T = m.tensor_parallel
    if T == 1:
        return Fraction(0)
    link = m.spec.link(T)
    ring = Fraction(2 * (T - 1), T) * m.batch * m.model.hidden_size * 2 / Fraction(link.bandwidth.value)
    return 2 * m.model.num_hidden_layers * (ring + 2 * (T - 1) * Fraction(link.latency.value))


# --------------------------------------------------------------------------- the fit


def test_fit_is_reproducible_in_any_row_order():
    """Same calibration rows in, same constants out: twice, reversed, and from a fresh load of the file."""
    for name in engine_profiles():
        rows = _calibration(name)
        first = fit_profile(name, rows)
        assert fit_profile(name, rows) == first
        assert fit_profile(name, list(reversed(rows))) == first
        assert fit_profile(name, [m for m in load_published() if m.id in {r.id for r in rows}]) == first


def test_no_validation_row_is_used_in_a_fit():
    """Every fitted profile names only calibration rows, and no validation measurement moves any constant."""
    profiles, _ = fit_profiles(ROWS)
    split = {m.id: m.split for m in ROWS}
    for p in profiles.values():
        assert p.calibration and all(split[i] == "calibration" for i in p.calibration)
        assert all(i in p.eta_bw.source.citation for i in p.calibration)
    # double every validation measurement: the fitted constants do not change
    moved = [attrs.evolve(m, measured_s=2 * m.measured_s) if m.split == "validation" else m for m in ROWS]
    refit = fit_profiles(moved)[0]
    assert {n: attrs.evolve(p, band=None) for n, p in refit.items()} == {
        n: attrs.evolve(p, band=None) for n, p in profiles.items()}
    # only the band, which judges the validation rows, sees them: doubled measurements, residuals near -50 %
    assert all(p.band is not None and p.band.median is not None and p.band.median < -0.4 for p in refit.values())
    # and a calibration measurement does move its profile's constants
    cal = [attrs.evolve(m, measured_s=2 * m.measured_s) if m.id == VLLM_CAL[0] else m for m in ROWS]
    assert fit_profiles(cal)[0]["vLLM with CUDA graphs"] != profiles["vLLM with CUDA graphs"]


def test_a_validation_row_is_refused_by_the_fit():
    """fit_profile refuses a validation row by name (field split), and a row of another profile."""
    rows = _calibration("vLLM with CUDA graphs") + [BY_ID["vllm-llama-3.1-8b-b8-h100"]]
    with pytest.raises(InvalidValueError) as info:
        fit_profile("vLLM with CUDA graphs", rows)
    assert info.value.field == "split" and "vllm-llama-3.1-8b-b8-h100" in str(info.value)
    with pytest.raises(InvalidValueError) as info:
        fit_profile("vLLM with CUDA graphs", _calibration("LMDeploy TurboMind"))
    assert info.value.field == "engine_profile"
    with pytest.raises(InvalidValueError) as info:
        fit_profile("vLLM with CUDA graphs", [])
    assert info.value.field == "rows"


def test_vllm_constants_are_the_least_squares_solution_worked_by_hand():
    """The three vLLM calibration rows (70B TP4 with its all-reduce, two 8B): t_step at its bound 0, and
    eta_bw, t_layer the 2 x 2 normal equations of m = M / eta_bw + A + L t_layer in relative error, by hand."""
    p = engine_profiles()["vLLM with CUDA graphs"]
    assert p.calibration == VLLM_CAL
    rows = [BY_ID[i] for i in VLLM_CAL]
    m = [Fraction(r.measured_s) for r in rows]
    c1 = [_memory_time(r) / t for r, t in zip(rows, m, strict=True)]
    c2 = [Fraction(r.model.num_hidden_layers) / t for r, t in zip(rows, m, strict=True)]
    y = [(t - _allreduce(r)) / t for r, t in zip(rows, m, strict=True)]
    a11, a12, a22 = sum(x * x for x in c1), sum(x * z for x, z in zip(c1, c2, strict=True)), sum(z * z for z in c2)
    b1, b2 = sum(x * t for x, t in zip(c1, y, strict=True)), sum(z * t for z, t in zip(c2, y, strict=True))
    det = a11 * a22 - a12 * a12
    x, tl = (b1 * a22 - a12 * b2) / det, (a11 * b2 - a12 * b1) / det
    assert p.eta_bw.value == Fraction(round(10**4 / x), 10**4) == Fraction(8052, 10**4)
    assert p.t_layer is not None and p.t_layer.value == Fraction(round(tl * 10**7), 10**7)
    assert p.t_step is None and "fitted at its bound" in p.fixed[0]
    assert _allreduce(rows[0]) > 0 and p.eta_bw.source.kind == "fitted" and p.t_layer.source.kind == "fitted"


def test_fit_recovers_constants_that_generated_the_rows():
    """Rows made by the estimate with eta_bw 0.8, t_step 1 ms, t_layer 20 us give back exactly those constants."""
    name = "gpt-fast compiled"
    eta, ts, tl = Fraction(8, 10), Fraction(1, 1000), Fraction(2, 100_000)
    rows = []
    for m in _calibration(name):
        t = _memory_time(m) / eta + _allreduce(m) + ts + m.model.num_hidden_layers * tl
        rows.append(attrs.evolve(m, measured_s=float(t)))
    assert len({m.model.num_hidden_layers for m in rows}) == 2  # 32 and 80 layers: t_layer is separable
    p = fit_profile(name, rows)
    assert p.constants()["eta_bw"] == eta and p.constants()["t_step"] == ts and p.constants()["t_layer"] == tl
    assert p.fixed == ("t_seq = 0 s: not fitted, the rows cannot separate it from t_step (every row has batch 1)",)


def test_fit_keeps_constants_physical():
    """Rows faster than the datasheet bandwidth allows give eta_bw = 1 (its bound), never above."""
    name = "vLLM with CUDA graphs"
    rows = [attrs.evolve(m, measured_s=float(_memory_time(m) / 2)) for m in _calibration(name)]
    p = fit_profile(name, rows)
    assert p.eta_bw.value == 1 and p.t_step is None


def test_one_row_fits_eta_bw_alone():
    """The single TensorRT-LLM calibration row fixes eta_bw = bytes / (BW x measured); times are 0 and say why."""
    p = engine_profiles()["TensorRT-LLM static batch"]
    (m,) = [BY_ID[i] for i in p.calibration]
    assert p.eta_bw.value == Fraction(round(10**4 * _memory_time(m) / Fraction(m.measured_s)), 10**4)
    assert p.t_step is None and p.t_layer is None and "1 row(s)" in p.fixed[0]


def test_eta_mm_is_measured_not_fitted():
    """eta_mm is the measured GEMM share of the calibration rows' accelerator: A100 271.2 / 312, H100 794.5 / 989.4."""
    profiles = engine_profiles()
    assert profiles["gpt-fast compiled"].eta_mm.value == Fraction(2712, 3120)
    assert profiles["TensorRT-LLM static batch"].eta_mm.value == Fraction(7945, 9894)
    for p in profiles.values():
        assert p.eta_mm.source.kind == "measured" and "Maximum Achievable Matmul FLOPS" in p.eta_mm.source.citation


def test_eta_mm_source_names_the_accelerators_the_rows_ran_on():
    """vLLM's rows ran on H200 and A100 and only the A100 has a measured GEMM peak: the source says so (not 'the
    calibration rows' accelerator'); one accelerator, several measured and none measured are worded each their way."""
    vllm = engine_profiles()["vLLM with CUDA graphs"].eta_mm
    assert vllm.value == Fraction(2712, 3120)
    assert vllm.source.citation.endswith("= 0.8692; the calibration rows ran on a100-80gb, h200-sxm; only a100-80gb "
                                         "has a measured matmul peak, so its share is used for every row")
    gpt_fast = engine_profiles()["gpt-fast compiled"].eta_mm.source.citation
    assert gpt_fast.endswith("= 0.8692; the calibration rows' accelerator (a100-80gb)")
    name = "vLLM with CUDA graphs"
    a100, h200 = BY_ID["vllm-llama-3.1-8b-b8-a100"], BY_ID["vllm-llama-3.1-8b-b8-h200"]
    on_h100 = attrs.evolve(a100, id="on-h100", spec=get_accelerator("h100-sxm"))
    both = fit_profile(name, [a100, on_h100]).eta_mm  # A100 271.2 / 312 = 0.8692 > H100 794.5 / 989.4 = 0.8030
    assert both.value == Fraction(7945, 9894)
    assert both.source.citation.endswith("; the lowest over the calibration rows' accelerators (a100-80gb, h100-sxm)")
    none = fit_profile(name, [h200]).eta_mm  # H200 has no measured GEMM peak: H100 SXM's share
    assert none.value == Fraction(7945, 9894)
    assert none.source.citation.endswith("; the calibration rows ran on h200-sxm, none with a measured matmul peak; "
                                         "h100-sxm's share is used for every row")


def test_nim_is_fitted_on_its_tensor_parallel_row():
    """NIM's only calibration row (Llama 3.3 70B FP8, 2 x H100) is priced per GPU with its all-reduce: one row
    fits eta_bw alone, m = M / eta_bw + A, by hand; an unknown profile is still refused."""
    p = get_engine_profile("nim")
    row = BY_ID["nim-llama-3.3-70b-fp8-tp2-c1-5000in-h100"]
    assert p.calibration == (row.id,) and row.tensor_parallel == 2
    x = (Fraction(row.measured_s) - _allreduce(row)) / _memory_time(row)
    assert p.eta_bw.value == Fraction(round(10**4 / x), 10**4) == Fraction(5868, 10**4)
    assert p.t_step is None and p.t_layer is None
    with pytest.raises(UnknownPresetError):
        get_engine_profile("nope")


def test_sglang_is_fitted_exactly_on_its_three_rows():
    """SGLang's three calibration rows (Llama 3 8B on H100: batch 1, batch 128, TP 8 batch 1; sglang issue #1008)
    separate eta_bw, t_step and t_seq (t_layer not: every row has 32 layers). Three rows, three constants: the
    fit solves m = M / eta_bw + t_step + B t_seq + A exactly, here by Cramer's rule on Fractions."""
    p = get_engine_profile("sglang")
    rows = [BY_ID[i] for i in ("sglang-llama-3-8b-b1-h100", "sglang-llama-3-8b-b128-h100",
                               "sglang-llama-3-8b-tp8-b1-h100")]
    assert sorted(p.calibration) == sorted(r.id for r in rows)
    a = [[_memory_time(r), Fraction(1), Fraction(r.batch)] for r in rows]
    b = [Fraction(r.measured_s) - _allreduce(r) for r in rows]

    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))

    x = [det([[b[i] if j == k else a[i][j] for j in range(3)] for i in range(3)]) / det(a) for k in range(3)]
    assert p.eta_bw.value == Fraction(round(10**4 / x[0]), 10**4)
    assert p.t_step.value == Fraction(round(x[1] * 10**7), 10**7)
    assert p.t_seq.value == Fraction(round(x[2] * 10**7), 10**7)
    assert 0.9 < float(p.eta_bw.value) < 0.95 and 25e-6 < float(p.t_seq.value) < 35e-6
    assert p.t_layer is None and any(f.startswith("t_layer = 0 s: not fitted") for f in p.fixed)


def test_profile_constants_are_sourced_and_checked():
    """Source takes the kinds published and fitted; a profile refuses an eta above 1."""
    assert Source("fitted", "rows a, b", "2026").kind == "fitted"
    assert Source("published", "a quote", "2026").kind == "published"
    with pytest.raises(InvalidValueError):
        Source("guessed", "x", "2026")
    p = get_engine_profile("vllm")
    with pytest.raises(InvalidValueError) as info:
        attrs.evolve(p, eta_bw=attrs.evolve(p.eta_bw, value=Fraction(3, 2)))
    assert info.value.field == "eta_bw"


# --------------------------------------------------------------------------- the estimate where it is used


def test_estimate_row_is_the_registered_formula():
    """On one GPU, validate's estimate of every priced row equals estimated_step_time with the profile's constants
    (its weight dtype's eta_bw where the profile fits one)."""
    profiles = engine_profiles()
    for m in ROWS:
        if m.engine_profile not in profiles or m.tensor_parallel != 1:
            continue
        p = profiles[m.engine_profile]
        expected = f.estimated_step_time(batch=m.batch, context_sum=m.context_sum, **m.model.step_terms("exact"),
                                         **m.spec.step_terms(), num_hidden_layers=m.model.num_hidden_layers,
                                         **p.constants(m.spec, m.model.weight_dtype))
        assert estimate_row(m, p) == pytest.approx(float(expected), rel=1e-12)


def test_validate_reports_bound_and_estimate_per_subset():
    """Medians and maxima per subset are those of the rows' errors; the targets judge the validation subset."""
    report = validate_with_estimates(ROWS)
    for name in ("calibration", "validation"):
        rows = [r for r in report.rows if r.measurement.split == name]
        s = report.subsets()[name]
        est = [abs(r.error_estimate) for r in rows if r.error_estimate is not None]
        bound = [abs(r.error_spec) for r in rows]
        assert s["estimate_median"] == statistics.median(est) and s["estimate_max"] == max(est)
        assert s["bound_median"] == statistics.median(bound) and s["bound_max"] == max(bound)
        b1 = [abs(r.error_estimate) for r in rows if r.measurement.batch == 1 and r.error_estimate is not None]
        assert s["batch1_estimate_median"] == statistics.median(b1)
    val = report.subsets()["validation"]
    assert val["estimate_median"] < val["bound_median"]  # the estimate is closer than the bound
    targets = report.targets()
    assert [t["met"] for t in targets[:2]] == [val["estimate_median"] <= 0.10, val["batch1_estimate_median"] <= 0.05]
    # issue 24's targets: 10 % met (6.3 %), batch 1 at 5 % met (4.8 %, since SGLang's and LMDeploy's t_seq rows
    # entered the fit; 6.5 % before); each engine's own rows at 15 % met
    assert [t["met"] for t in targets[:2]] == [True, True]
    engines = {t["target"].split("'")[1]: t for t in targets[2:]}
    assert set(engines) == {m.engine_profile for m in ROWS if m.split == "validation"}
    for name, t in engines.items():
        errors = [abs(r.error_estimate) for r in rows if r.measurement.engine_profile == name]
        assert t["value"] == statistics.median(errors) and t["met"] is (t["value"] <= 0.15)
    assert all(t["met"] for t in engines.values())


def test_validate_estimate_of_the_held_out_h100_row():
    """The vLLM H100 row (validation) is estimated as 8.449 ms against 7.792 measured, +8.4 % (bound -38.1 %)."""
    p = engine_profiles()["vLLM with CUDA graphs"]
    assert p.calibration == VLLM_CAL
    row = next(r for r in validate_with_estimates(ROWS).rows if r.measurement.id == "vllm-llama-3.1-8b-b8-h100")
    m = row.measurement
    by_hand = _memory_time(m) / Fraction(8052, 10**4) + 32 * Fraction(768, 10**7)
    assert p.t_layer is not None and p.t_layer.value == Fraction(768, 10**7)
    assert row.estimate_s == pytest.approx(float(by_hand), rel=1e-12)
    assert round(row.estimate_s * 1e3, 3) == 8.449 and round(row.error_estimate, 3) == 0.084
    assert round(row.error_spec, 3) == -0.381


def test_validate_text_shows_both_subsets_and_targets(capsys):
    """`roofline validate` prints the estimate column, per-subset medians/maxima, targets and profile sources."""
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    report = validate_with_estimates(ROWS)
    val = report.subsets()["validation"]
    assert f"estimate {val['estimate_median']:.1%} / {val['estimate_max']:.1%} ({val['estimate_rows']} rows)" in out
    assert f"bound {val['bound_median']:.1%} / {val['bound_max']:.1%}" in out
    assert "calibration (constants fitted here):" in out and "validation (held out):" in out
    assert f"target: median |error| of the estimate, validation subset <= 10%: {val['estimate_median']:.1%}, met" \
        in out
    times, about = [x for x in out.splitlines() if x.startswith("vllm-llama-3.1-8b-b8-h100 ")]  # the two tables
    row = next(r for r in report.rows if r.measurement.id == "vllm-llama-3.1-8b-b8-h100")
    assert times.split()[-2:] == [f"{row.estimate_s * 1e3:.3f}", f"{row.error_estimate:+.1%}"]  # [ms], error
    assert about.split()[1:6] == ["llama-3.1-8b", "8", "768", "val", "memory"]
    assert "vLLM with CUDA graphs (--estimate vllm): eta_bw 0.8052 [fitted]" in out
    assert "eta_mm: measured: stas00/ml-engineering" not in out  # the constants' sources: behind --verbose
    assert main(["validate", "--verbose"]) == 0
    assert "eta_mm: measured: stas00/ml-engineering" in capsys.readouterr().out
    assert "NVIDIA NIM (backend not stated) (--estimate nim): eta_bw 0.5868 [fitted]" in out


def test_validate_json_has_estimates_subsets_and_profiles(capsys):
    """`roofline validate --json` carries each row's estimate and split, the subsets, targets and profiles."""
    assert main(["validate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    report = validate_with_estimates(ROWS)
    assert [r["error_estimate"] for r in doc["rows"]] == [r.error_estimate for r in report.rows]
    assert doc["subsets"]["validation"]["estimate_median"] == report.subsets()["validation"]["estimate_median"]
    keys = {p["key"] for p in doc["profiles"]}
    assert {"vllm", "gpt-fast", "lmdeploy", "trtllm"} <= keys
    vllm = next(p for p in doc["profiles"] if p["key"] == "vllm")
    assert vllm["constants"]["eta_bw"]["source"]["kind"] == "fitted"


def test_decode_step_estimate_is_the_formula():
    """decode_step(estimate='vllm') is estimated_step_time exactly, labelled; the default stays the bound."""
    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    p = get_engine_profile("vllm")
    bound = decode_step(model, acc, batch=8, context=1000)
    est = decode_step(model, acc, batch=8, context=1000, estimate=p)
    assert bound.time_kind == "bound" and est.time_kind == "estimate: vLLM with CUDA graphs"
    expected = f.estimated_step_time(batch=8, context_sum=8000, **model.step_terms("exact"), **acc.step_terms(),
                                     num_hidden_layers=32, **p.constants())
    assert est.step_time == expected
    assert est.step_time > bound.step_time
    assert est.bytes == bound.bytes and est.flops == bound.flops  # same work, other constants
    with pytest.raises(InvalidValueError) as info:
        decode_step(model, acc, batch=1, context=0, estimate="vllm")  # a name: look the profile up first
    assert info.value.field == "estimate" and "get_engine_profile" in str(info.value)


def test_report_estimate_beside_the_bound(capsys):
    """`report --estimate vllm` keeps every bound number and adds the estimate: W / (eta_bw BW) + t_step at batch 1."""
    assert main(["report", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["report", "--json", "--estimate", "vllm"]) == 0
    both = json.loads(capsys.readouterr().out)
    est = both.pop("estimate")
    assert both == plain and plain["time_kind"] == "bound"
    c = get_engine_profile("vllm").constants()
    by_hand = Fraction(16_060_522_496) / (c["eta_bw"] * 3_350_000_000_000) + c["t_step"] + 32 * c["t_layer"]
    assert est["single"]["step_time_s"] == float(by_hand)
    assert est["time_kind"] == "estimate: vLLM with CUDA graphs"
    assert [row["batch"] for row in est["table"]] == [row["batch"] for row in plain["table"]]
    assert main(["report", "--estimate", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "unless marked [estimate]" in out and f"{float(by_hand) * 1e3:.3f} ms [estimate] vs 4.794 ms [bound]" in out


def test_constants_read_the_same_in_report_and_validate(capsys):
    """One wording and one unit for the times in both commands: vLLM's t_step 0.0 us [fitted at its bound: 0] (never
    'not fitted'), t_layer 76.8 us; TensorRT-LLM's times [not fitted: 0]; gpt-fast's t_step 455.8 us [fitted]."""
    vllm = get_engine_profile("vllm")
    assert vllm.kind("t_step") == "fitted at its bound: 0" and vllm.kind("t_layer") == "fitted"
    trt = get_engine_profile("trtllm")
    assert trt.kind("t_step") == trt.kind("t_layer") == "not fitted: 0" and trt.kind("eta_mm") == "measured"
    with pytest.raises(InvalidValueError):
        vllm.kind("overhead")
    expected = {
        "vllm": "eta_bw 0.8052 [fitted], eta_mm 0.8692 [measured], t_step 0.0 us [fitted at its bound: 0], "
                "t_layer 76.8 us [fitted], t_seq 0.0 us [not fitted: 0]",
        "trtllm": "eta_bw 0.7371 [fitted], eta_mm 0.8030 [measured], t_step 0.0 us [not fitted: 0], "
                  "t_layer 0.0 us [not fitted: 0], t_seq 0.0 us [not fitted: 0]",
        "gpt-fast": "eta_bw 0.8338 [fitted], eta_mm 0.8692 [measured], t_step 455.8 us [fitted], "
                    "t_layer 69.5 us [fitted], t_seq 0.0 us [not fitted: 0]",
    }
    assert main(["validate"]) == 0
    validate_out = capsys.readouterr().out
    for key, text in expected.items():
        assert get_engine_profile(key).describe() == text
        assert f"(--estimate {key}): {text}\n" in unwrapped(validate_out)
        # the report's model (BF16 weights) is priced at gpt-fast's BF16 eta_bw, and prints that one
        shown = text.replace("eta_bw 0.8338", "eta_bw 0.9426") if key == "gpt-fast" else text
        assert main(["report", "--estimate", key]) == 0
        assert f"  constants             {shown}\n" in unwrapped(capsys.readouterr().out)
        assert main(["report", "--estimate", key, "--json"]) == 0
        constants = json.loads(capsys.readouterr().out)["estimate"]["profile"]["constants"]
        eta = get_engine_profile(key).eta_bw_sourced(get_accelerator("h100-sxm"), "bfloat16")[0]
        assert constants["eta_bw"]["value"] == float(eta.value)
        assert constants["eta_bw"]["citation"] == eta.source.citation
        assert {n: c["kind"] for n, c in constants.items()} == {n: get_engine_profile(key).kind(n) for n in constants}
    assert " ms [" not in validate_out.split("Engine profiles")[1].split("Published points")[0]


def test_report_without_estimate_prints_the_same_numbers(capsys):
    """Without --estimate the report's lesson numbers are unchanged (4.794 ms, 296, 404 sequences)."""
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    assert "4.794 ms" in out and "296 [2P]" in out and "404 sequences" in out and "[estimate]:" not in out


@pytest.mark.parametrize("args,needle", [(["--estimate", "nope"], "unknown engine profile 'nope'")])
def test_report_bad_estimate_is_one_line(args, needle, capsys):
    """An unknown profile exits 2 with one line naming it."""
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_cost_model_gains_the_estimate_constants():
    """RooflineCostModel.for_model(estimate=...) prices decode and prefill by the estimate, exactly; default bound."""
    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    p = get_engine_profile("lmdeploy")
    bound = RooflineCostModel.for_model(model, acc)
    est = RooflineCostModel.for_model(model, acc, estimate="lmdeploy")
    kw = dict(**model.step_terms("exact"), **acc.step_terms(), num_hidden_layers=32, **p.constants())
    assert est.decode_time(8, 768) == f.estimated_step_time(batch=8, context_sum=768, **kw)
    kw.pop("t_seq")  # a prefill step has no per-sequence term
    assert est.prefill_time(512, 131_328) == f.estimated_prefill_step_time(prefill_tokens=512,
                                                                          attention_pairs=131_328, **kw)
    assert bound.decode_time(8, 768) == f.step_time(batch=8, context_sum=768, **model.step_terms("exact"),
                                                    bandwidth=Fraction(acc.bandwidth),
                                                    peak_flops=Fraction(acc.peak_flops), overhead=0)
    assert isinstance(est.decode_time(8, 768), Fraction)


def test_simulate_estimate(capsys):
    """`simulate --estimate vllm` labels its times as the estimate and is slower than the bound on the same trace."""
    assert main(["simulate", "--limit", "40", "--policy", "serial", "--float", "--json"]) == 0
    bound = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--limit", "40", "--policy", "serial", "--float", "--json", "--estimate", "vllm"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert bound["time_kind"] == "bound" and est["time_kind"] == "estimate: vLLM with CUDA graphs"
    sb, se = bound["results"][0]["summary"], est["results"][0]["summary"]
    assert se["steps"] == sb["steps"] and se["makespan_s"] > sb["makespan_s"]
    assert main(["simulate", "--limit", "40", "--policy", "serial", "--float", "--estimate", "vllm"]) == 0
    assert "step times: [estimate: vLLM with CUDA graphs]" in capsys.readouterr().out


def test_engine_profile_is_an_attrs_record():
    """EngineProfile.constants() are exact Fractions; absent times are 0."""
    p = get_engine_profile("trtllm")
    assert isinstance(p, EngineProfile)
    c = p.constants()
    assert c["t_step"] == 0 and c["t_layer"] == 0 and all(isinstance(v, Fraction) for v in c.values())
    assert p.overhead(80) == 0


# --------------------------------------------------------------------------- the per-sequence term (issue 24)


def _with_t_seq(profile: EngineProfile, t_seq: Fraction) -> EngineProfile:
    return attrs.evolve(profile, t_seq=attrs.evolve(profile.t_layer, value=t_seq))


def test_fit_recovers_a_per_sequence_time_when_the_rows_differ_in_batch():
    """LMDeploy's six rows (batches 1 to 64, 32 to 80 layers) made by the estimate with eta_bw 0.8, t_step 1 ms,
    t_layer 20 us, t_seq 170 us: the fit gives back all four, exactly (t_seq enters the design as B_i / m_i)."""
    eta, ts, tl, tq = Fraction(8, 10), Fraction(1, 1000), Fraction(2, 100_000), Fraction(17, 100_000)
    rows = [attrs.evolve(m, split="calibration", measured_s=float(
        _memory_time(m) / eta + _allreduce(m) + ts + m.model.num_hidden_layers * tl + m.batch * tq))
        for m in ROWS if m.engine_profile == "LMDeploy TurboMind"]
    assert sorted({m.batch for m in rows}) == [1, 16, 32, 64]
    p = fit_profile("LMDeploy TurboMind", rows)
    assert p.constants() == dict(eta_bw=eta, eta_mm=Fraction(113, 130), t_step=ts, t_layer=tl, t_seq=tq)
    assert p.fixed == () and p.t_seq is not None and p.t_seq.source.kind == "fitted" and p.kind("t_seq") == "fitted"
    assert p.describe().endswith("t_seq 170.0 us [fitted]")


def test_decode_step_adds_batch_times_t_seq_and_is_the_registered_formula():
    """vLLM's profile with t_seq 170 us: Llama 3.1 8B at batch 8, context 1,000 on H100 costs 8 x 170 us = 1.36 ms
    more than without it, and equals estimated_step_time(t_seq=...) exactly."""
    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    base = get_engine_profile("vllm")
    p = _with_t_seq(base, Fraction(17, 100_000))
    with_seq = decode_step(model, acc, batch=8, context=1000, estimate=p)
    without = decode_step(model, acc, batch=8, context=1000, estimate=base)
    assert with_seq.step_time - without.step_time == Fraction(136, 100_000)
    expected = f.estimated_step_time(batch=8, context_sum=8000, **model.step_terms("exact"), **acc.step_terms(),
                                     num_hidden_layers=32, **p.constants())
    assert with_seq.step_time == expected and with_seq.throughput == 8 / expected
    with pytest.raises(InvalidValueError, match="^t_seq="):
        f.estimated_step_time(batch=1, context_sum=0, **model.step_terms("exact"), **acc.step_terms(),
                              num_hidden_layers=32, **dict(p.constants(), t_seq=-1))


def test_cost_model_prices_t_seq_per_decode_row_on_both_clocks():
    """The scheduler's cost model adds B x t_seq to a decode step and decode_rows x t_seq to a mixed step, nothing to
    a prefill; it states t_seq as its stretch terms' per_row, so every policy runs on the stretch clock, equal to the
    step clock field by field."""
    from roofline import Deployment
    from roofline.sim import Request, serve_continuous, serve_serial, serve_static
    from roofline.testing.compare import assert_same_results

    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    base = get_engine_profile("vllm")
    tq = Fraction(17, 100_000)
    plain = RooflineCostModel.for_deployment(Deployment(model, acc, estimate=base))
    seq = RooflineCostModel.for_deployment(Deployment(model, acc, estimate=_with_t_seq(base, tq)))
    assert seq.per_sequence == tq and plain.per_sequence == 0
    assert seq.decode_time(8, 768) - plain.decode_time(8, 768) == 8 * tq
    assert seq.mixed_time(4, 400, 100, 0, 5050) - plain.mixed_time(4, 400, 100, 0, 5050) == 4 * tq
    assert seq.prefill_time(512, 131_328) == plain.prefill_time(512, 131_328)
    terms = seq.stretch_terms()
    assert not isinstance(terms, str) and terms.per_row == tq and plain.stretch_terms().per_row == 0
    requests = [Request(id=i, arrival_s=Fraction(i, 7), prompt_tokens=16 + i, output_tokens=8 + 5 * i)
                for i in range(6)]
    for serve, kw in ((serve_serial, {}), (serve_static, {"batch_size": 4}), (serve_continuous, {}),
                      (serve_continuous, {"prefill": "chunked", "max_num_batched_tokens": 24, "max_num_seqs": 4})):
        a, b = serve(requests, seq, record_steps=True, **kw), serve(requests, seq, record_steps=True, engine="step",
                                                                    **kw)
        assert_same_results(a, b)  # a on the stretch clock, b on the step clock
    with pytest.raises(InvalidValueError, match="^per_sequence="):
        RooflineCostModel(**dict(Deployment(model, acc).cost_terms(), per_sequence=-1))


# --------------------------------------------------------------------------- the error band (issue 24)


def test_error_band_interpolates_percentiles_between_order_statistics():
    """Errors -10, 0, +20, +30 %: median +10 %, 10th percentile -7 %, 90th +27 % (linear, as numpy.percentile),
    median |error| 15 %; a NaN is refused naming the field."""
    from roofline.profiles import ErrorBand

    band = ErrorBand.of({"d": 0.3, "a": -0.1, "c": 0.2, "b": 0.0})
    assert band.rows == ("a", "b", "c", "d")
    assert band.median == pytest.approx(0.1) and band.p10 == pytest.approx(-0.07) and band.p90 == pytest.approx(0.27)
    assert band.median_abs == pytest.approx(0.15)
    assert band.describe() == "validation residuals: median +10.0 %, 10th-90th percentile -7.0 % to +27.0 % (4 rows)"
    assert ErrorBand.of({}).describe().startswith("validation residuals: none")
    with pytest.raises(InvalidValueError, match="^errors="):
        ErrorBand.of({"x": float("nan")})


def test_shipped_bands_are_the_validation_rows_of_validate():
    """Each shipped profile's band is the residuals validate prints for its validation rows (vLLM: +12.8 %, +8.4 %,
    -10.4 %: median +8.4 %, 10th-90th -6.7 % to +11.9 %, 3 rows); no calibration row is in a band."""
    report = validate_with_estimates(ROWS)
    for p in engine_profiles().values():
        rows = {r.measurement.id: r.error_estimate for r in report.rows
                if r.measurement.engine_profile == p.name and r.measurement.split == "validation"}
        assert p.band is not None and p.band.rows == tuple(sorted(rows))
        assert p.band.median == pytest.approx(statistics.median(rows.values()), abs=1e-12)
        assert not set(p.band.rows) & set(p.calibration)
    vllm = get_engine_profile("vllm")
    assert vllm.error_band() == ("validation residuals: median +8.4 %, 10th-90th percentile -6.7 % to +11.9 % "
                                 "(3 rows)")


def test_every_printed_estimate_says_when_it_is_outside_the_fitted_range(capsys):
    """vLLM was fitted on Llama at batch 8 on A100 and H200: Llama 3.1 8B on H200 is inside; on H100 the accelerator
    is named outside; a Qwen model and batch 64 too; report, simulate and validate print the band."""
    vllm = get_engine_profile("vllm")
    llama, qwen = get_model("llama-3.1-8b"), get_model("qwen3-4b")
    h100, h200 = get_accelerator("h100-sxm"), get_accelerator("h200-sxm")
    assert vllm.outside(llama, h200, 8) == ()
    assert vllm.outside(llama, h100, 8) == ("accelerator h100-sxm (fitted: a100-80gb, h200-sxm)",)
    assert vllm.outside(qwen, h200, 64) == ("model family 'qwen3' (fitted: llama)", "batch 64 (fitted: batch 8)")
    assert vllm.error_band(llama, h200).endswith("; inside the fitted range")
    assert main(["report", "--estimate", "vllm"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert ("  band                  validation residuals: median +8.4 %, 10th-90th percentile -6.7 % to +11.9 % "
            "(3 rows); estimate, outside the fitted range: accelerator h100-sxm (fitted: a100-80gb, h200-sxm)\n") in out
    assert "memory (beyond fit)\n" in out and "  (beyond fit: estimate, outside the fitted range: batch; fitted on " \
        "batch 8)" in out
    assert main(["report", "--estimate", "vllm", "--json"]) == 0
    e = json.loads(capsys.readouterr().out)["estimate"]
    assert e["error_band"]["n"] == 3 and e["outside_fitted_range"] == [
        "accelerator h100-sxm (fitted: a100-80gb, h200-sxm)"]
    assert main(["simulate", "--limit", "5", "--policy", "serial", "--float", "--estimate", "vllm"]) == 0
    assert "  estimate band: validation residuals: median +8.4 %" in capsys.readouterr().out
    assert main(["validate"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert "    band: validation residuals: median +8.4 %, 10th-90th percentile -6.7 % to +11.9 % (3 rows)\n" in out
    assert "\nServing level: published runs under load" in out
    assert "  target: median |error| of TPOT (ITL where published) <= 15%: 11.7% (50 rows), met\n" in out
    assert ("  target: median |error| of the estimate, validation rows of 'vLLM with CUDA graphs' (3 rows) <= 15%: "
            "10.4%, met\n") in out and "validation subset, batch 1 <= 5%: 4.8%, met" in out


# --------------------------------------------------------------------------- engine versions (issue 24)


def test_an_engine_name_resolves_to_its_newest_version_and_says_so():
    """--estimate vllm is vllm-v1 (the newest of vllm-v0, vllm-v1), with vLLM's fitted constants; a version key
    resolves to itself without a note; a fitted profile's own name stays the fitted profile (no scheduler)."""
    from roofline.profiles import resolve_engine_profile

    v1, note = resolve_engine_profile("vllm")
    assert v1.key == "vllm-v1" and v1.version == "vLLM V1 engine" and v1.constants() == get_engine_profile(
        "vllm").constants()
    assert note == "--estimate vllm is vllm-v1 (vLLM V1 engine), the newest of vllm-v0, vllm-v1"
    v0, none = resolve_engine_profile("vllm-v0")
    assert none is None and v0.scheduler.options() == {"policy": "continuous", "prefill": "separate",
                                                       "admission": "on_demand"}
    trt, note = resolve_engine_profile("TRTLLM")
    assert trt.key == "trtllm-1.0" and "the newest of trtllm-0.6, trtllm-1.0" in note
    fitted, _ = resolve_engine_profile("vLLM with CUDA graphs")
    assert fitted.scheduler is None and fitted.key == "vllm"


def test_scheduler_defaults_follow_the_accelerator_and_every_one_is_quoted():
    """vLLM V1 on a GPU of >= 70 GiB that is not an A100 (H100) takes 1,024 sequences and 8,192 tokens, else (A100)
    256 and 2,048 (vllm/engine/arg_utils.py, get_batch_defaults); TensorRT-LLM in flight reserves (GUARANTEED_NO_EVICT);
    every stated default carries a published source with its quote; a bad option is refused by name."""
    from roofline.profiles import SchedulerDefaults, engine_versions

    versions = engine_versions()
    v1 = versions["vllm-v1"].scheduler
    assert v1.options(get_accelerator("h100-sxm"))["max_num_seqs"] == 1024
    assert v1.options(get_accelerator("h100-sxm"))["max_num_batched_tokens"] == 8192
    assert v1.options(get_accelerator("a100-80gb"))["max_num_seqs"] == 256
    assert v1.options(get_accelerator("a100-80gb"))["max_num_batched_tokens"] == 2048
    assert versions["trtllm-1.0"].scheduler.options() == {"policy": "continuous", "admission": "reserve"}
    assert versions["gpt-fast"].scheduler.options()["policy"] == "serial"
    assert versions["sglang"].name == "SGLang" and versions["sglang"].version == "SGLang"
    assert versions["sglang"].scheduler.options() == {"policy": "continuous"}
    assert versions["nim"].scheduler.options() == {} and versions["nim"].scheduler.not_published
    for p in versions.values():
        if isinstance(p, str):
            continue
        for name, _, src in p.scheduler.settings:
            assert src.kind == "published" and ': "' in src.citation and "http" in src.citation, (p.key, name)
    with pytest.raises(InvalidValueError, match="^scheduler="):
        SchedulerDefaults(settings=(("admission", "greedy", v1.settings[0][2]),))


def test_simulate_schedules_as_the_engine_does_unless_a_flag_says_otherwise(capsys):
    """--estimate vllm runs vLLM V1's chunked continuous batching at 1,024 sequences and 8,192 tokens on H100;
    --max-num-seqs 8 given wins; --estimate trtllm-1.0 reserves (no preemption); --estimate gpt-fast runs serial."""
    args = ["simulate", "--limit", "6", "--json"]
    assert main([*args, "--estimate", "vllm"]) == 0
    out = json.loads(capsys.readouterr().out)
    (r,) = out["results"]
    assert r["policy"] == "continuous" and r["options"]["prefill"] == "chunked"
    assert r["options"]["max_num_seqs"] == 1024 and r["options"]["max_num_batched_tokens"] == 8192
    assert out["engine_scheduler"].startswith("--estimate vllm is vllm-v1 (vLLM V1 engine), the newest")
    assert main([*args, "--estimate", "vllm", "--max-num-seqs", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["options"]["max_num_seqs"] == 8
    assert main([*args, "--estimate", "trtllm-1.0"]) == 0
    (r,) = json.loads(capsys.readouterr().out)["results"]
    assert r["options"]["admission"] == "reserve" and r["options"].get("prefill", "separate") == "separate"
    assert main([*args, "--estimate", "gpt-fast"]) == 0
    assert [x["policy"] for x in json.loads(capsys.readouterr().out)["results"]] == ["serial"]


def test_an_accelerator_with_its_own_rows_gets_its_own_eta_bw():
    """vLLM's calibration rows ran on A100 (one row) and H200 (two): H200 gets eta_bw 0.8079 fitted on its two rows
    with the profile's times held, the least squares worked by hand; A100 and H100 take the profile default 0.8052,
    named so, and the estimate on H200 reads at 0.8079 of 4.8 TB/s."""
    p = get_engine_profile("vllm")
    (acc, eta), = p.eta_bw_by_accelerator
    assert acc == "h200-sxm" and eta.value == Fraction(8079, 10**4) and "on h200-sxm" in eta.source.citation
    rows = [BY_ID[i] for i in VLLM_CAL if BY_ID[i].spec.key == "h200-sxm"]
    m = [Fraction(r.measured_s) for r in rows]
    c = [_memory_time(r) / t for r, t in zip(rows, m, strict=True)]
    y = [(t - _allreduce(r) - r.model.num_hidden_layers * p.constants()["t_layer"]) / t
         for r, t in zip(rows, m, strict=True)]
    x = sum(a * b for a, b in zip(c, y, strict=True)) / sum(a * a for a in c)
    assert eta.value == Fraction(round(10**4 / x), 10**4)
    assert p.eta_bw_for(get_accelerator("h100-sxm")) == (Fraction(2013, 2500), "profile default")
    assert p.eta_bw_for(get_accelerator("h200-sxm")) == (Fraction(8079, 10**4), "fitted on h200-sxm's own rows")
    model, h200 = get_model("llama-3.1-8b"), get_accelerator("h200-sxm")
    step = decode_step(model, h200, batch=1, context=0, estimate=p)
    assert step.memory_time == Fraction(model.weight_bytes) / (Fraction(8079, 10**4) * Fraction(h200.bandwidth))


def test_a_weight_dtype_with_its_own_rows_gets_its_own_eta_bw():
    """gpt-fast's calibration rows span BF16, int8 and int4 weights: each dtype gets an eta_bw fitted on its own rows
    with the profile's times held. int4 has one row (Llama 2 7B, 196.8 tokens/s): x = 1 / eta_bw =
    (m - t_step - L t_layer) / M by hand, 0.6993; a dtype without rows (FP16) and a profile of one dtype (vLLM)
    take the default, named so; a dtype's value comes before an accelerator's own; the estimate uses it."""
    p = get_engine_profile("gpt-fast")
    by = dict(p.eta_bw_by_weight_dtype)
    assert sorted(by) == ["bfloat16", "int4", "int8"] and get_engine_profile("vllm").eta_bw_by_weight_dtype == ()
    (row,) = [m for m in _calibration("gpt-fast compiled") if m.model.weight_dtype == "int4"]
    c = p.constants()
    x = (Fraction(row.measured_s) - c["t_step"] - row.model.num_hidden_layers * c["t_layer"]) / _memory_time(row)
    assert by["int4"].value == Fraction(round(10**4 / x), 10**4) == Fraction(6993, 10**4)
    assert "with weights in int4: gpt-fast-llama-2-7b-int4-a100-330w" in by["int4"].source.citation
    a100 = get_accelerator("a100-80gb")
    assert p.eta_bw_for(a100, "int4") == (Fraction(6993, 10**4), "fitted on int4's own rows")
    assert p.eta_bw_for(a100, "float16") == (Fraction(p.eta_bw.value), "profile default")
    both = attrs.evolve(p, eta_bw_by_accelerator=(("a100-80gb", by["int8"]),))
    assert both.eta_bw_for(a100, "int4")[0] == Fraction(6993, 10**4) and both.eta_bw_for(a100, "fp8")[0] == \
        Fraction(by["int8"].value)
    assert estimate_row(row, p) == pytest.approx(row.measured_s, rel=2e-4)  # one row: priced exactly, to rounding
    model = get_model("llama-2-7b").with_dtypes(weight_dtype="int4")
    step = decode_step(model, a100, batch=1, context=0, estimate=p)
    assert step.memory_time == Fraction(model.weight_bytes) / (Fraction(6993, 10**4) * Fraction(a100.bandwidth))


# --------------------------------------------------------------------------- serving level (issue 24)


def test_a_serving_point_runs_as_published_and_its_itl_is_the_step_estimate():
    """NIM's 500-in / 2,000-out run at concurrency 1 (TTFT 47.77 ms, ITL 18.91 ms, 52.85 tokens/s, quoted) simulated
    as a closed loop of one client: its mean ITL is the step-level estimate of the same run at the mean context
    1,500 (18.269 ms, -3.4 %), its TTFT the estimated 500-token prefill; the point is held out (its step row is a
    validation row) and no serving point is fitted on."""
    from roofline.calibrate.serving import load_serving, serving_summary, simulate_point

    points = {p.id: p for p in load_serving()}
    assert all(p.split == "validation" for p in points.values())
    p = points["serving-nim-llama-3.3-70b-fp8-tp2-c1-500in-h100"]
    assert p.held_out and p.measured == {"ttft_ms": 47.77, "itl_ms": 18.91, "output_tokens_per_s": 52.85}
    assert all(str(v) in " ".join(p.source["quote"]) for v in p.measured.values())
    row = simulate_point(p, requests_per_client=1)
    step = estimate_row(BY_ID[p.step_row], get_engine_profile("nim"))
    assert row.simulated["itl_ms"] == pytest.approx(step * 1e3, rel=2e-3)
    assert row.errors["itl_ms"] == pytest.approx((row.simulated["itl_ms"] - 18.91) / 18.91)
    assert -0.05 < row.errors["itl_ms"] < 0 and row.requests == 1
    assert not points["serving-nim-llama-3.3-70b-fp8-tp2-c1-5000in-h100"].held_out  # its step row fitted nim
    s = serving_summary([row])
    assert s["tpot_target"]["rows"] == 1 and s["tpot_target"]["met"] is True
    with pytest.raises(InvalidValueError, match="^requests_per_client="):
        simulate_point(p, requests_per_client=0)


def test_a_burst_point_runs_its_own_lengths_under_vllm_v0():
    """The LambdaLabs vLLM 0.5.4 run on H100 (10 ShareGPT prompts at t = 0, lengths as published): simulated with
    vllm-v0's scheduler (separate prefill, KV on demand); medians interpolate as vllm bench serve's (numpy); TPOT
    8.45 ms against 7.56 (+11.8 %), TTFT 26.5 ms against 62.2 (-57.4 %: the API server's time before the first token
    is not modelled)."""
    from roofline.calibrate.serving import load_serving, simulate_point

    p = next(x for x in load_serving() if x.id == "serving-vllm-llama-3-8b-h100-10req")
    assert p.profile == "vllm-v0" and p.held_out and len(p.lengths) == 10 and sum(b for _, b in p.lengths) == 1867
    row = simulate_point(p)
    assert row.requests == 10 and row.options["prefill"] == "separate" and row.options["admission"] == "on_demand"
    assert round(row.errors["tpot_ms"], 3) == 0.118 and round(row.errors["ttft_ms"], 3) == -0.574
    assert set(row.simulated) == {"ttft_ms", "tpot_ms", "output_tokens_per_s"}


def _quoted_numbers(lines) -> list[float]:
    """Every number in a point's quoted lines, thousands separators and Markdown bold dropped."""
    import re

    text = " ".join(lines).replace("**", "")
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]


def test_the_serving_set_spans_six_engines_and_four_accelerators_each_value_quoted():
    """At least 60 published runs under load, from vLLM, SGLang, TensorRT-LLM, NIM, LMDeploy and gpt-fast on at least
    four accelerators; every measured value stands in its own quote (as published, or in ms where the source gives
    seconds); the split is fixed in the file and every point is validation."""
    from roofline.calibrate.serving import _document, load_serving

    points = load_serving()
    assert len(points) >= 60 and all(p.split == "validation" for p in points)
    assert {p.engine for p in points} >= {"vllm", "sglang", "trtllm", "nim", "lmdeploy", "gpt-fast"}
    assert len({p.accelerator.key for p in points}) >= 4
    assert _document()["split"]["fixed"].startswith("2026-12-01") and len({p.id for p in points}) == len(points)
    for p in points:
        numbers = _quoted_numbers(p.source["quote"])
        for key, value in p.measured.items():
            assert any(abs(n - value) < 1e-9 or abs(n * 1000 - value) < 1e-6 for n in numbers), (p.id, key, value)
        assert p.source["url"].startswith("https://")


def test_an_lmdeploy_point_compares_mean_ttft_and_median_itl_with_the_step_estimate():
    """LMDeploy's batch-1 128-in / 128-out row on A100: FTL(ave) is a mean, 50%(s) the median per-token latency; one
    client's 127 gaps run at contexts 130 to 256, so the simulated median ITL is the LMDeploy estimate of the decode
    step at the middle context, 193 tokens (the 64th gap), worked by roofline.estimate.decode_step."""
    from roofline.calibrate.serving import load_serving, simulate_point

    p = next(x for x in load_serving() if x.id == "serving-lmdeploy-llama-2-7b-tp1-b1-128in-128out-a100")
    assert (p.statistic_of("ttft_ms"), p.statistic_of("itl_ms")) == ("mean", "median")
    assert p.measured == {"ttft_ms": 22.0, "itl_ms": 10.0, "output_tokens_per_s": 102.21}
    row = simulate_point(p)
    step = decode_step(p.model, p.accelerator, batch=1, context=192, estimate=get_engine_profile("lmdeploy"))
    assert row.simulated["itl_ms"] == pytest.approx(float(step.step_time) * 1e3, rel=1e-9)
    assert row.errors["itl_ms"] == pytest.approx((row.simulated["itl_ms"] - 10.0) / 10.0)


def test_a_static_trtllm_point_is_one_batch_of_its_requests():
    """TensorRT-LLM v0.5's L40S row (batch 16, 2,048 in / 2,048 out, 531 tokens/s): the trtllm-0.6 profile's policy is
    static, so the 16 requests run as one batch: 2,047 decode steps at batch 16 (contexts 2,049 to 4,095; memory-bound,
    so their sum is 2,047 x the mean of the first and last step) plus one prefill of 32,768 tokens no longer than its
    FLOPs at the profile's share of the dense BF16 peak."""
    from roofline.calibrate.serving import load_serving, simulate_point

    p = next(x for x in load_serving() if x.id == "serving-trtllm-llama-2-7b-fp8-tp1-b16-2048in-2048out-l40s")
    prof = get_engine_profile("trtllm")
    row = simulate_point(p)
    assert row.requests == 16 and row.options["batch_size"] == 16 and p.engine == "trtllm"

    def step(c):
        return float(decode_step(p.model, p.accelerator, batch=16, context=c, estimate=prof).step_time)

    decode = 2047 * (step(2049) + step(4095)) / 2
    prefill = 16 * 2048 / row.simulated["output_tokens_per_s"] - decode
    flops = 2 * p.model.parameters * 16 * 2048
    assert 0 < prefill <= 1.05 * flops / (float(prof.eta_mm.value) * float(p.accelerator.peak_flops))
    assert row.errors["output_tokens_per_s"] == pytest.approx((row.simulated["output_tokens_per_s"] - 531) / 531)


def test_a_poisson_point_arrives_at_its_rate_and_sglang_is_priced_with_its_own_profile():
    """vLLM 0.6.0 on ShareGPT at 4 requests/s (1,200 prompts, the dataset's mean lengths 230 / 194): 1,200 requests,
    their median TPOT at least one decode step at batch 1 (no gap is shorter); SGLang's point of the same table is
    priced with the sglang profile (fitted on SGLang's own rows), its TPOT at least its own batch-1 step."""
    from roofline.calibrate.serving import load_serving, serving_summary, simulate_point

    points = {p.id: p for p in load_serving()}
    p = points["serving-vllm-llama-3.1-8b-sharegpt-rps4-a100"]
    assert p.kind == "poisson" and p.rate == 4 and p.statistic_of("tpot_ms") == "median"
    row = simulate_point(p)
    one = decode_step(p.model, p.accelerator, batch=1, context=230, estimate=get_engine_profile("vllm"))
    assert row.requests == 1200 and row.simulated["tpot_ms"] >= float(one.step_time) * 1e3
    sp = points["serving-sglang-llama-3.1-8b-sharegpt-rps4-a100"]
    sg = simulate_point(sp)
    sg_one = decode_step(sp.model, sp.accelerator, batch=1, context=230, estimate=get_engine_profile("sglang"))
    assert sg.refused is None and sg.simulated["tpot_ms"] >= float(sg_one.step_time) * 1e3
    assert sg.errors["tpot_ms"] == pytest.approx((sg.simulated["tpot_ms"] - 13.17) / 13.17)
    s = serving_summary([row, sg])
    assert s["points"] == 2 and s["refused"] == {}
    assert s["recorded_engines"] == ["sglang", "vllm"]
    assert s["by_engine"]["vllm"]["tpot_ms"]["median_abs_error"] == pytest.approx(abs(row.errors["tpot_ms"]))


def test_a_per_layer_dequantisation_time_fits_negative_on_gpt_fasts_int8_rows():
    """The batch-1 gap's candidate term (TARGET_GAPS): a per-layer time d for int8 weights, fitted with eta_bw on
    gpt-fast's two int8 calibration rows (Llama 3.1 8B, 32 layers; 70B, 80 layers) with the profile's t_step and
    t_layer held. Two rows, two unknowns: m = M x + t_step + L (t_layer + d) solved by hand gives d = -45.7 us, a
    negative time, so the rows do not support the term."""
    p = get_engine_profile("gpt-fast")
    rows = [BY_ID["gpt-fast-llama-3.1-8b-int8-a100-330w"], BY_ID["gpt-fast-llama-3.1-70b-int8-a100-330w"]]
    assert all(r.split == "calibration" and r.tensor_parallel == 1 for r in rows)
    y = [Fraction(r.measured_s) - p.t_step.value - r.model.num_hidden_layers * p.t_layer.value for r in rows]
    (m1, l1), (m2, l2) = [(_memory_time(r), r.model.num_hidden_layers) for r in rows]
    d = (m1 * y[1] - m2 * y[0]) / (m1 * l2 - m2 * l1)
    assert round(float(d) * 1e6, 1) == -45.7
    from roofline.calibrate.compare import TARGET_GAPS

    assert "-45.7 us per layer" in TARGET_GAPS["estimate, validation subset, batch 1"]
