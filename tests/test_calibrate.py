"""roofline calibrate: the CPU path end to end, the file's schema and loader, the measured Accelerator.

The tests that measure need PyTorch (the ``calibrate`` extra, not the ``test`` one): they skip,
saying so, when it is not installed, and run when it is.
"""

from __future__ import annotations

import copy
import datetime
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import roofline.cli as cli
from roofline.calibrate import (
    SCHEMA_VERSION,
    TINY_MODEL,
    CalibrationPlan,
    MeasurementFileError,
    calibration_files,
    decode_attention,
    import_torch,
    load_calibration,
    measure_bandwidth,
    measure_decode,
    measure_matmul,
    measured_accelerator,
    parse_calibration,
    preset_for_device,
    run_calibration,
    spread,
    write_calibration,
)
from roofline.errors import InvalidValueError, RooflineError
from roofline.hardware import get_accelerator
from roofline.models import ModelConfig, get_model

BATCHES = (1, 2, 3)
CONTEXTS = (8, 33)
SHAPES = ((64, 64, 64), (96, 128, 32))
TORCH_MISSING = "PyTorch is not installed; these tests need the calibrate extra: pip install -e '.[calibrate]'"


@pytest.fixture(scope="module")
def torch() -> Any:
    """The torch module; the test skips, with the install line as its reason, when PyTorch is not installed.

    With ROOFLINE_REQUIRE_TORCH=1 (CI's run after installing the calibrate extra) a missing
    PyTorch fails the test instead, so that run cannot skip silently.
    """
    if os.environ.get("ROOFLINE_REQUIRE_TORCH") == "1":
        return importlib.import_module("torch")
    return pytest.importorskip("torch", reason=TORCH_MISSING)


def _commands() -> tuple[str, ...]:
    """The CLI's commands whose modules exist in this checkout (others land separately)."""
    return tuple(c for c in cli.COMMANDS if importlib.util.find_spec(f"roofline.commands.{c}"))


def _cli(argv: list[str]) -> int:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli, "COMMANDS", _commands())
        return cli.main(argv)


@pytest.fixture(scope="module")
def calibration_file(torch: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A calibration file written by `roofline calibrate --device cpu` with tiny sizes, and its stdout."""
    out = tmp_path_factory.mktemp("calibrate") / "cpu.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = _cli([
            "calibrate", "--device", "cpu", "--out", str(out), "--quiet",
            "--batches", ",".join(map(str, BATCHES)), "--contexts", ",".join(map(str, CONTEXTS)),
            "--repetitions", "3", "--warmup", "1", "--bandwidth-mib", "4", "--max-spread", "1000",
            "--matmul", ",".join("x".join(map(str, s)) for s in SHAPES),
        ])
    assert status == 0
    return out, buf.getvalue()


@pytest.fixture()
def document(calibration_file: tuple[Path, str]) -> dict:
    """A fresh parsed copy of the CPU calibration document."""
    return json.loads(calibration_file[0].read_text())


# --------------------------------------------------------------------------- imports


def test_importing_roofline_and_calibrate_does_not_import_torch_or_sympy() -> None:
    """`import roofline`, roofline.calibrate, roofline.validate and both commands leave torch and sympy unimported."""
    code = (
        "import sys, roofline, roofline.calibrate, roofline.validate, "
        "roofline.commands.calibrate, roofline.commands.validate\n"
        "print(sorted(m for m in ('torch', 'sympy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_torch_gives_install_hint(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Without PyTorch, calibrate raises a RooflineError naming roofline[calibrate], and the CLI exits 2 on one line."""
    monkeypatch.setitem(sys.modules, "torch", None)
    hint = r"pip install 'roofline\[calibrate\]' \(from a clone: pip install -e '\.\[calibrate\]'\)"
    with pytest.raises(RooflineError, match=hint):
        import_torch()
    with pytest.raises(RooflineError, match=r"roofline\[calibrate\]"):
        run_calibration(device="cpu")
    assert _cli(["calibrate", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "roofline calibrate: error:" in err and "roofline[calibrate]" in err


# --------------------------------------------------------------------------- CPU end to end


def test_cli_calibrate_writes_every_requested_point(calibration_file: tuple[Path, str], document: dict) -> None:
    """Every requested (batch, context) is measured once, with positive finite times and nothing skipped."""
    points = document["decode"]["points"]
    assert sorted((p["batch"], p["context"]) for p in points) == sorted(
        (b, c) for b in BATCHES for c in CONTEXTS
    )
    assert document["decode"]["skipped"] == []
    for p in points:
        times = p["times_s"]
        assert len(times) == 3
        assert all(math.isfinite(t) and t > 0 for t in times)
        assert p["best_s"] == min(times)
        assert p["median_s"] == statistics.median(times)
        assert p["context_sum"] == p["batch"] * p["context"]
        assert p["spread"] == pytest.approx((max(times) - min(times)) / statistics.median(times))
        assert p["cuda_graph"] is False
    assert "wrote " + str(calibration_file[0]) in calibration_file[1]


def test_cli_calibrate_records_provenance(torch: Any, document: dict) -> None:
    """The file states schema 1, device, versions, date, timer, repetitions, CUDA graphs and the attention used."""
    assert document["schema"] == SCHEMA_VERSION == 1
    assert document["kind"] == "roofline-calibration"
    created = datetime.datetime.fromisoformat(document["created"])
    assert created.tzinfo is not None
    assert abs((datetime.datetime.now(datetime.UTC) - created).total_seconds()) < 3600
    dev = document["device"]
    assert dev["type"] == "cpu" and dev["name"].startswith("CPU") and dev["memory_total_bytes"] > 0
    assert dev["preset"] is None and dev["threads"] >= 1
    sw = document["software"]
    assert sw["torch"] == torch.__version__
    assert sw["python"] == ".".join(map(str, sys.version_info[:3]))
    assert sw["roofline"]
    method = document["method"]
    assert (method["repetitions"], method["warmup"], method["cuda_graphs"]) == (3, 1, False)
    assert method["timer"].startswith("time.perf_counter")
    assert "scaled_dot_product_attention" in method["attention"]
    assert document["decode"]["cuda_graphs"] is False
    assert document["elapsed_s"] > 0


def test_cli_calibrate_bandwidth_counts_bytes(document: dict) -> None:
    """The copy counts the buffer twice (read + write), the read once; value is the best of the better method."""
    bw = document["bandwidth"]
    size = 4 * 2**20
    assert bw["buffer_bytes"] == size
    assert bw["methods"]["copy"]["bytes_per_repetition"] == 2 * size
    assert bw["methods"]["read"]["bytes_per_repetition"] == size
    for m in bw["methods"].values():
        assert m["best"] == pytest.approx(m["bytes_per_repetition"] / min(m["times_s"]))
        assert m["median"] == pytest.approx(m["bytes_per_repetition"] / statistics.median(m["times_s"]))
    assert bw["value"] == max(m["best"] for m in bw["methods"].values())
    assert bw["value"] >= bw["typical"] > 0 and math.isfinite(bw["value"])
    assert bw["method"] in ("copy", "read")


def test_cli_calibrate_matmul_shapes_and_flops(document: dict) -> None:
    """Every requested matmul shape is timed; FLOPs are 2 m n k; best and typical follow from the times."""
    mm = document["matmul"]
    assert [(s["m"], s["n"], s["k"]) for s in mm["shapes"]] == list(SHAPES)
    assert mm["dtype"] == "bfloat16"
    for s in mm["shapes"]:
        assert s["flops"] == 2 * s["m"] * s["n"] * s["k"]
        assert s["best"] == pytest.approx(s["flops"] / min(s["times_s"]))
    assert mm["value"] == max(s["best"] for s in mm["shapes"])
    assert mm["typical"] == pytest.approx(statistics.median(s["median"] for s in mm["shapes"]))
    assert 0 < mm["typical"] <= mm["value"] and math.isfinite(mm["value"])


def test_cli_calibrate_default_cpu_model_is_tiny(document: dict) -> None:
    """On CPU the decode steps use TINY_MODEL's shapes, recorded so the model rebuilds exactly."""
    dec = document["decode"]
    assert ModelConfig(**dec["model"]) == TINY_MODEL
    assert dec["weight_bytes"] == TINY_MODEL.weight_bytes
    assert dec["kv_bytes_per_token"] == TINY_MODEL.kv_bytes_per_token == 2 * 2 * 2 * 64 * 2
    assert (dec["flops_per_token"], dec["attention_flops_per_token"]) == TINY_MODEL.flops_per_token("exact")


def test_loaded_calibration_gives_a_measured_accelerator(
    torch: Any, calibration_file: tuple[Path, str], document: dict
) -> None:
    """load_calibration returns the file's values; its Accelerator carries them as Sources of kind 'measured'."""
    path = calibration_file[0]
    cal = load_calibration(path)
    assert cal.bandwidth == document["bandwidth"]["value"]
    assert cal.matmul == document["matmul"]["value"]
    assert cal.model == TINY_MODEL and len(cal.points) == len(BATCHES) * len(CONTEXTS)
    acc = measured_accelerator(path)
    assert acc.bandwidth == round(document["bandwidth"]["value"])
    assert acc.peak_flops == round(document["matmul"]["value"])
    assert acc.key.startswith("measured:cpu")
    for field in ("hbm_bandwidth", "peak_bf16", "measured_bandwidth", "measured_bf16", "memory_usable"):
        source = getattr(acc, field).source
        assert source.kind == "measured" and str(path) in source.citation
    assert acc.hbm_bandwidth.source.date == document["created"][:10]
    assert torch.__version__ in acc.hbm_bandwidth.source.conditions
    assert "3 repetitions" in acc.hbm_bandwidth.source.conditions
    assert acc.measured().bandwidth == acc.bandwidth
    assert acc.ridge_point == pytest.approx(acc.peak_flops / acc.bandwidth)


def test_calibration_of_a_preset_device_keeps_datasheet_memory(document: dict) -> None:
    """A file whose device is a preset gives its measured copy: measured bandwidth, datasheet memory and FP8."""
    document["device"]["preset"] = "h100-sxm"
    acc = parse_calibration(document, path="h100.json").accelerator()
    h100 = get_accelerator("h100-sxm")
    assert acc.key == "h100-sxm:measured"
    assert acc.bandwidth == round(document["bandwidth"]["value"])
    assert acc.hbm_bandwidth.source.kind == "measured"
    assert acc.memory_usable == h100.memory_usable and acc.peak_fp8 == h100.peak_fp8


def test_cli_validate_reads_the_calibration(calibration_file: tuple[Path, str], capsys: pytest.CaptureFixture) -> None:
    """`roofline validate --measurements FILE --json` predicts each point from the file's own constants."""
    path, _ = calibration_file
    assert _cli(["validate", "--measurements", str(path), "--no-published", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    doc = json.loads(path.read_text())
    points = {(p["batch"], p["context"]): p for p in doc["decode"]["points"]}
    assert len(report["rows"]) == len(points)
    bw, peak = round(doc["bandwidth"]["value"]), round(doc["matmul"]["value"])
    f, a = TINY_MODEL.flops_per_token("exact")
    for row in report["rows"]:
        b, s = row["batch"], row["context_sum"]
        p = points[(b, s // b)]
        expected = max((TINY_MODEL.weight_bytes + TINY_MODEL.kv_bytes_per_token * s) / bw, (b * f + a * s) / peak)
        assert row["predicted_measured_s"] == pytest.approx(expected, rel=1e-12)
        assert row["measured_s"] == p["median_s"]
        assert row["error_measured"] == pytest.approx((expected - p["median_s"]) / p["median_s"])
        assert row["predicted_spec_s"] is None and row["spec"] is None
    errors = sorted(abs(r["error_measured"]) for r in report["rows"])
    # CPU rows are kept out of the medians (launch overhead dominates tiny shapes) and summarised apart
    assert report["median_abs_error"]["measured"] is None and report["median_abs_error"]["rows_measured"] == 0
    assert report["cpu_rows"]["median_abs_error_measured"] == pytest.approx(statistics.median(errors))
    assert report["cpu_rows"]["rows"] == len(points)
    assert report["median_abs_error"]["spec"] is None


def test_cli_validate_table_includes_calibration_rows(
    calibration_file: tuple[Path, str], capsys: pytest.CaptureFixture
) -> None:
    """The text table lists the published points and one row per calibration point, with 'n/a' spec on CPU."""
    path, _ = calibration_file
    assert _cli(["validate", "--measurements", str(path)]) == 0
    out = capsys.readouterr().out
    assert "gpt-fast-llama-2-7b-a100-330w" in out and "vllm-llama-3-8b-h100-10req" in out
    for b in BATCHES:
        for c in CONTEXTS:
            line = next(x for x in out.splitlines() if x.startswith(f"{path.stem}:B{b}:c{c} "))
            assert "n/a" in line
    assert f"{path}: spec n/a" in out


# --------------------------------------------------------------------------- measurement functions


def test_decode_attention_matches_repeated_kv_softmax(torch: Any) -> None:
    """decode_attention equals softmax(q k^T / sqrt(d)) v with KV heads repeated in Hugging Face order."""
    gen = torch.Generator().manual_seed(0)
    B, H, Hkv, c, d = 3, 8, 2, 11, 16
    q = torch.randn(B, H, d, generator=gen, dtype=torch.float64)
    k = torch.randn(B, Hkv, c, d, generator=gen, dtype=torch.float64)
    v = torch.randn(B, Hkv, c, d, generator=gen, dtype=torch.float64)
    kr = k.repeat_interleave(H // Hkv, dim=1)
    vr = v.repeat_interleave(H // Hkv, dim=1)
    scores = torch.einsum("bhd,bhcd->bhc", q, kr) / math.sqrt(d)
    expected = torch.einsum("bhc,bhcd->bhd", scores.softmax(-1), vr)
    assert torch.allclose(decode_attention(q, k, v), expected, rtol=1e-10, atol=1e-12)
    with pytest.raises(InvalidValueError, match="k="):
        decode_attention(q, k[:, :, :, :8], v[:, :, :, :8])


def test_measure_decode_skips_points_that_do_not_fit_and_runs_mha_non_gated(torch: Any) -> None:
    """A point whose KV cache exceeds memory is skipped with the reason; an MHA LayerNorm non-gated model runs."""
    opt_like = ModelConfig(
        name="tiny-opt", num_hidden_layers=1, hidden_size=64, intermediate_size=128,
        num_attention_heads=2, num_key_value_heads=2, head_dim=32, vocab_size=128,
        tie_word_embeddings=True, qkv_bias=True, o_bias=True, mlp_bias=True, gated_mlp=False, norm="layernorm",
    )
    huge = 10**12
    out = measure_decode("cpu", model=opt_like, batches=(2, 1), contexts=(5, huge), repetitions=2, warmup=0)
    assert [(p["batch"], p["context"]) for p in out["points"]] == [(1, 5), (2, 5)]
    assert [(s["batch"], s["context"]) for s in out["skipped"]] == [(1, huge), (2, huge)]
    assert all(s["reason"].startswith("KV cache needs") for s in out["skipped"])
    assert "ReLU" in out["step"]


def test_measure_decode_runs_qk_norm_and_tied_embeddings(torch: Any) -> None:
    """A Qwen3-like tiny model (explicit head_dim, q/k norms, tied lm_head, GQA 4:1) is measured at every point."""
    qwen_like = ModelConfig(
        name="tiny-qwen3", num_hidden_layers=2, hidden_size=96, intermediate_size=160,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, vocab_size=200,
        tie_word_embeddings=True, qk_norm=True,
    )
    out = measure_decode("cpu", model=qwen_like, batches=(1, 3), contexts=(2, 7), repetitions=2, warmup=1)
    assert sorted((p["batch"], p["context"]) for p in out["points"]) == [(1, 2), (1, 7), (3, 2), (3, 7)]
    assert out["weight_bytes"] == qwen_like.weight_bytes
    assert all(p["median_s"] > 0 for p in out["points"])


def test_measure_decode_time_limit_skips_with_reason(torch: Any) -> None:
    """Points not started within max_seconds are listed as skipped, with the time limit as the reason."""
    out = measure_decode("cpu", model=TINY_MODEL, batches=(1, 2), contexts=(4,), repetitions=1, warmup=0,
                         max_seconds=1e-9)
    assert out["points"] == []
    assert [s["reason"] for s in out["skipped"]] == ["time limit: 1e-09 s spent before this point"] * 2


def test_measure_functions_reject_bad_arguments(torch: Any) -> None:
    """Bad devices, CUDA graphs on CPU, unsupported dtypes and tiny buffers raise errors naming the field."""
    with pytest.raises(InvalidValueError, match="cuda_graphs"):
        measure_decode("cpu", model=TINY_MODEL, batches=(1,), contexts=(4,), cuda_graphs=True)
    with pytest.raises(InvalidValueError, match="weight_dtype"):
        measure_decode("cpu", model=TINY_MODEL.with_dtypes(weight_dtype="int8"), batches=(1,), contexts=(4,))
    with pytest.raises(InvalidValueError, match="kv_dtype"):
        measure_decode("cpu", model=TINY_MODEL.with_dtypes(kv_dtype="float32"), batches=(1,), contexts=(4,))
    with pytest.raises(InvalidValueError, match="batches"):
        measure_decode("cpu", model=TINY_MODEL, batches=(0,), contexts=(4,))
    with pytest.raises(InvalidValueError, match="nbytes"):
        measure_bandwidth("cpu", nbytes=1000)
    with pytest.raises(InvalidValueError, match="shapes"):
        measure_matmul("cpu", shapes=((4, 4),))
    with pytest.raises(InvalidValueError, match="device"):
        measure_matmul("meta", shapes=((4, 4, 4),))
    with pytest.raises(InvalidValueError, match="cuda_graphs"):
        run_calibration(CalibrationPlan(
            model=TINY_MODEL, batches=(1,), contexts=(4,), repetitions=1, warmup=0,
            bandwidth_bytes=2**20, matmul_shapes=((4, 4, 4),), cuda_graphs=True), device="cpu")


def test_default_plans() -> None:
    """GPU default: Llama 3.1 8B shapes, batches 1..256, contexts 128/1000/4096, CUDA graphs, a 150 s decode limit."""
    gpu = CalibrationPlan.default("cuda")
    assert gpu.model == get_model("llama-3.1-8b")
    assert gpu.batches == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert gpu.contexts == (128, 1000, 4096)
    assert gpu.cuda_graphs is True and gpu.max_seconds == 150.0 < 180
    assert gpu.bandwidth_bytes == 2 * 2**30
    cpu = CalibrationPlan.default("cpu")
    assert cpu.model == TINY_MODEL and cpu.cuda_graphs is False and cpu.max_seconds is None
    with pytest.raises(InvalidValueError, match="repetitions"):
        CalibrationPlan(
            model=TINY_MODEL, batches=(1,), contexts=(1,), repetitions=0, warmup=0,
            bandwidth_bytes=2**20, matmul_shapes=((1, 1, 1),))


def test_spread_is_range_over_median() -> None:
    """spread = (max - min) / median; 0 for equal times; bad inputs raise."""
    assert spread([2.0, 2.0]) == 0
    assert spread([1.0, 2.0, 4.0]) == 1.5
    with pytest.raises(InvalidValueError):
        spread([])
    with pytest.raises(InvalidValueError):
        spread([1.0, 0.0])


def test_preset_for_device_names() -> None:
    """PyTorch device names map to presets; parts without a preset (A100 PCIe, NVL, CPU) map to None."""
    assert preset_for_device("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert preset_for_device("NVIDIA H100 PCIe") == "h100-pcie"
    assert preset_for_device("NVIDIA H100 NVL") is None
    assert preset_for_device("NVIDIA H200") == "h200-sxm"
    assert preset_for_device("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert preset_for_device("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert preset_for_device("NVIDIA A100 80GB PCIe") is None
    assert preset_for_device("CPU: AMD EPYC") is None


# --------------------------------------------------------------------------- loader validation


def _delete(doc: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    del node[last]


def _set(doc: dict, dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


@pytest.mark.parametrize(
    "field",
    ["schema", "created", "device.name", "software.torch", "method.repetitions", "bandwidth.value",
     "bandwidth.typical", "matmul.value", "decode.model.hidden_size", "decode.points.0.median_s",
     "decode.points.1.times_s"],
)
def test_loader_names_a_missing_field(document: dict, field: str) -> None:
    """A calibration file missing a required field is refused with the file and the dotted field named."""
    _delete(document, field)
    with pytest.raises(MeasurementFileError, match=rf"^bad\.json: field '{field}': is missing"):
        parse_calibration(document, path="bad.json")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("schema", 2, "not supported; this roofline reads schema 1"),
        ("kind", "other", "must be 'roofline-calibration'"),
        ("bandwidth.value", -1.0, "must be finite and > 0"),
        ("bandwidth.value", "fast", "must be a number"),
        ("matmul.value", 0, "must be finite and > 0"),
        ("method.cuda_graphs", "yes", "must be true or false"),
        ("decode.points.0.batch", 0, "must be an integer >= 1"),
        ("decode.points.0.times_s", [], "must be a non-empty array"),
        ("decode.points.0.times_s.0", -0.5, "must be finite and > 0"),
        ("decode.model.hidden_size", 0, "must be a positive integer"),
        ("device.preset", "tpu-v9", "unknown accelerator"),
        ("bandwidth.method", "write", "is not one of bandwidth.methods"),
    ],
)
def test_loader_names_a_bad_field(document: dict, field: str, value: object, message: str) -> None:
    """A bad value is refused with the file, the dotted field and what is wrong."""
    _set(document, field, value)
    with pytest.raises(MeasurementFileError) as info:
        parse_calibration(document, path="bad.json")
    assert info.value.field == field and message in str(info.value)


def test_loader_rejects_unreadable_and_non_finite_files(tmp_path: Path, document: dict) -> None:
    """A missing file, NaN in the JSON, or a duplicate point are refused with the file named."""
    with pytest.raises(MeasurementFileError, match="cannot read"):
        load_calibration(tmp_path / "absent.json")
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(document).replace(str(document["bandwidth"]["value"]), "NaN", 1))
    with pytest.raises(MeasurementFileError, match="not valid JSON"):
        load_calibration(nan)
    document["decode"]["points"].append(copy.deepcopy(document["decode"]["points"][0]))
    with pytest.raises(MeasurementFileError, match="appears twice"):
        parse_calibration(document)


def test_write_then_load_round_trips_and_is_discovered(tmp_path: Path, document: dict) -> None:
    """write_calibration validates and writes; calibration_files finds calibrate-*.json files only."""
    target = tmp_path / "calibrate-cpu-test.json"
    write_calibration(document, target)
    (tmp_path / "other.json").write_text("{}")
    assert calibration_files(tmp_path) == [target]
    assert load_calibration(target).points == parse_calibration(document).points
    del document["bandwidth"]
    with pytest.raises(MeasurementFileError, match="bandwidth"):
        write_calibration(document, tmp_path / "calibrate-bad.json")
    assert not (tmp_path / "calibrate-bad.json").exists()
    for shipped in calibration_files():
        assert load_calibration(shipped).points
