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
    assert fit_profiles(moved)[0] == profiles
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
    assert p.fixed == ()


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
        get_engine_profile("sglang")


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
    """On one GPU, validate's estimate of every priced row equals estimated_step_time with the profile's constants."""
    profiles = engine_profiles()
    for m in ROWS:
        if m.engine_profile not in profiles or m.tensor_parallel != 1:
            continue
        p = profiles[m.engine_profile]
        expected = f.estimated_step_time(batch=m.batch, context_sum=m.context_sum, **m.model.step_terms("exact"),
                                         **m.spec.step_terms(), num_hidden_layers=m.model.num_hidden_layers,
                                         **p.constants())
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
    assert [t["met"] for t in targets] == [val["estimate_median"] <= 0.15, val["batch1_estimate_median"] <= 0.10]
    assert all(t["met"] for t in targets)  # the targets: 15 % (10 % at batch 1)


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
    assert f"target: median |error| of the estimate, validation subset <= 15%: {val['estimate_median']:.1%}, met" \
        in out
    line = next(x for x in out.splitlines() if x.startswith("vllm-llama-3.1-8b-b8-h100 "))
    row = next(r for r in report.rows if r.measurement.id == "vllm-llama-3.1-8b-b8-h100")
    assert f"{row.estimate_s * 1e3:.3f} ms" in line and f"{row.error_estimate:+.1%}" in line and " val " in line
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
                "t_layer 76.8 us [fitted]",
        "trtllm": "eta_bw 0.7371 [fitted], eta_mm 0.8030 [measured], t_step 0.0 us [not fitted: 0], "
                  "t_layer 0.0 us [not fitted: 0]",
        "gpt-fast": "eta_bw 0.8338 [fitted], eta_mm 0.8692 [measured], t_step 455.8 us [fitted], "
                    "t_layer 69.5 us [fitted]",
    }
    assert main(["validate"]) == 0
    validate_out = capsys.readouterr().out
    for key, text in expected.items():
        assert get_engine_profile(key).describe() == text
        assert f"(--estimate {key}): {text}\n" in unwrapped(validate_out)
        assert main(["report", "--estimate", key]) == 0
        assert f"  constants             {text}\n" in unwrapped(capsys.readouterr().out)
        assert main(["report", "--estimate", key, "--json"]) == 0
        constants = json.loads(capsys.readouterr().out)["estimate"]["profile"]["constants"]
        assert {n: c["kind"] for n, c in constants.items()} == {n: get_engine_profile(key).kind(n) for n in constants}
    assert " ms [" not in validate_out.split("Engine profiles")[1].split("Published points")[0]


def test_report_without_estimate_prints_the_same_numbers(capsys):
    """Without --estimate the report's lesson numbers are unchanged (4.794 ms, 296, 404 sequences)."""
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    assert "4.794 ms" in out and "296 [2P]" in out and "404 sequences" in out and "[estimate]:" not in out


@pytest.mark.parametrize("args,needle", [(["--estimate", "sglang"], "unknown engine profile 'sglang'")])
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
