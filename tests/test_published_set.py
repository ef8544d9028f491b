"""The published measurement set: sources, step-time rules, compositions, the fixed split and unpriced points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.calibrate import MeasurementFileError
from roofline.hardware import accelerator_names
from roofline.models import model_names
from roofline.validate import load_published, pending_published, published_path, validate


@pytest.fixture(scope="module")
def doc() -> dict:
    """The shipped published-points file, parsed."""
    return json.loads(published_path().read_text())


@pytest.fixture(scope="module")
def steps() -> dict[str, float]:
    """Measured step time [s] of every point, priced or pending, by id."""
    out = {m.id: m.measured_s for m in load_published()}
    out.update({p.id: p.measured_s for p in pending_published()})
    return out


def test_set_has_at_least_fifteen_sourced_points(doc: dict) -> None:
    """36 points (29, then SGLang's 6 and LMDeploy's batch-64 row) with a verbatim quote, an https URL and a
    date; added points state engine version, assumptions."""
    points = doc["points"]
    assert len(points) == 36 >= 15
    for p in points:
        assert p["source"]["quote"] and all(q.strip() for q in p["source"]["quote"])
        assert p["source"]["url"].startswith("https://") and p["source"]["date"]
    for p in points[2:]:
        assert p["engine_version"] and p["assumptions"] and p["left_out"]
        assert p["input_len"] >= 1 and p["output_len"] >= 1


def test_step_times_follow_their_rules(steps: dict[str, float]) -> None:
    """Each metric becomes seconds per step by its rule: 1/rate, batch/throughput, latency/outputs, ITL."""
    assert steps["gpt-fast-llama-2-7b-int4-a100-330w"] == 1 / 196.80  # 5.081 ms
    assert steps["gpt-fast-llama-3.1-70b-int8-a100-330w"] == 1 / 18.04  # 55.43 ms
    assert steps["lmdeploy-llama-2-7b-b32-a100"] == 32 / 1462.12  # 21.89 ms
    assert steps["trtllm-llama-2-7b-fp8-b112-h100"] == 112 / (6818 * 1)  # per GPU, tensor parallel 1
    assert steps["trtllm-llama-2-7b-fp16-b60-a100"] == 60 / 1928
    assert steps["vllm-llama-3.1-8b-b8-h200"] == 834.014 / 128 / 1000  # 6.516 ms
    assert steps["vllm-llama-3-70b-tp4-b8-h200"] == 2075.36 / 128 / 1000
    assert steps["nim-llama-3.3-70b-fp8-tp2-c25-5000in-h100"] == 38.75 / 1000
    assert steps["sglang-llama-3-8b-b128-h100"] == 11.84 / 1000  # bench_latency's median decode step
    assert round(steps["lmdeploy-llama-2-70b-tp4-b1-a100"] * 1e3, 3) == 29.464


def test_compositions_are_batch_times_mean_decode_context(doc: dict) -> None:
    """Every added point's context sum is batch x (prompt + output/2): e.g. 112 x 1,152 and 25 x 5,250."""
    for p in doc["points"][2:]:
        assert p["context_sum"] == p["batch"] * (p["input_len"] + p["output_len"] // 2), p["id"]
        if p["concurrency"] is not None:
            assert p["concurrency"] == p["batch"]
    by_id = {p["id"]: p for p in doc["points"]}
    assert by_id["trtllm-llama-2-7b-fp8-b112-h100"]["context_sum"] == 129_024
    assert by_id["nim-llama-3.3-70b-fp8-tp2-c25-5000in-h100"]["context_sum"] == 131_250
    assert by_id["gpt-fast-llama-2-7b-int8-a100-330w"]["context_sum"] == 105


def test_split_is_fixed_disjoint_and_balanced(doc: dict) -> None:
    """Each point is in one subset; over a third is held out; batch-1 points and every profile are in both."""
    ids = [p["id"] for p in doc["points"]]
    cal, val = doc["split"]["calibration"], doc["split"]["validation"]
    assert sorted(cal + val) == sorted(ids) and not set(cal) & set(val)
    assert (len(cal), len(val)) == (17, 19) and 3 * len(val) >= len(ids)
    batch1 = {p["id"] for p in doc["points"] if p["batch"] == 1}
    assert batch1 & set(cal) and batch1 & set(val)
    for name, members in doc["engine_profiles"].items():
        assert set(members) & set(cal) and set(members) & set(val), name
    rows = {m.id: m for m in load_published()}
    assert rows["gpt-fast-llama-2-7b-a100-330w"].split == "calibration"
    assert rows["vllm-llama-3-8b-h100-10req"].engine_profile == "vLLM with CUDA graphs"


def test_unpriced_points_name_what_the_package_lacks(doc: dict) -> None:
    """A point is pending exactly when it names a missing preset (tensor-parallel and MoE points are priced)."""
    pending = {p.id: p for p in pending_published()}
    priced = {m.id for m in load_published()}
    assert len(pending) + len(priced) == len(doc["points"]) and not set(pending) & priced
    for p in doc["points"]:
        lacks = [n for n in (p["model"], p["accelerator"]) if n not in model_names() and n not in accelerator_names()]
        assert (p["id"] in pending) == bool(lacks), p["id"]
        if p["id"] in pending:
            reasons = pending[p["id"]].reasons
            assert all(any(repr(n) in r for r in reasons) for n in lacks)
            assert not any("tensor parallelism" in r or "MoE" in r for r in reasons)
    declared = {n for p in doc["points"] for n in p.get("pending_presets", [])}
    assert declared == {"llama-2-70b", "mixtral-8x7b", "l40s"}
    tp = {m.id: m.tensor_parallel for m in load_published()}
    assert tp["vllm-llama-3-70b-tp4-b8-h200"] == 4 and tp["gpt-fast-llama-3.1-70b-tp8-a100-330w"] == 8


def test_bound_lies_below_every_priced_measurement() -> None:
    """The roofline with datasheet constants is below every measured step (a lower bound): every error negative."""
    report = validate(load_published())
    assert len(report.rows) >= 17
    assert all(r.error_spec is not None and r.error_spec < 0 for r in report.rows)
    fp8 = next(r for r in report.rows if r.measurement.id == "trtllm-llama-2-7b-fp8-b112-h100")
    # 6,738,415,616 FP8 weight bytes + 129,024 x 262,144 FP8 KV bytes at 3.35 TB/s
    assert fp8.predicted_spec_s == pytest.approx((6_738_415_616 + 129_024 * 262_144) / 3.35e12, rel=1e-12)


def _edited(tmp_path: Path, edit) -> Path:
    doc = json.loads(published_path().read_text())
    edit(doc)
    path = tmp_path / "published.json"
    path.write_text(json.dumps(doc))
    return path


def _point(doc: dict, pid: str) -> dict:
    return next(p for p in doc["points"] if p["id"] == pid)


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda d: d["split"]["validation"].append("nope"), "split.validation.19", "not the id of a point"),
        (lambda d: d["split"]["validation"].pop(), "split", "missing"),
        (lambda d: d["split"]["validation"].append(d["split"]["calibration"][0]), "split.validation.19", "already in"),
        (lambda d: d["engine_profiles"]["x"].append("nope") if "x" in d["engine_profiles"]
         else d["engine_profiles"].update(x=["nope"]), "engine_profiles.x.0", "not the id of a point"),
        (lambda d: d["points"][2].update(tensor_parallel=0), "points.2.tensor_parallel", "integer >= 1"),
        (lambda d: _point(d, "vllm-llama-3.1-8b-b8-h200").pop("output_len"), "output_len", "needs the output length"),
        (lambda d: _point(d, "gpt-fast-llama-2-70b-int4-a100-330w").update(model="llama-9-1t"), "model",
         "unknown model"),
        (lambda d: d["points"][2].update(weight_dtype="int3"), "points.2.weight_dtype", "int3"),
    ],
)
def test_bad_set_fields_are_refused_by_name(tmp_path: Path, edit, field: str, message: str) -> None:
    """A bad split, profile, tensor_parallel, missing output_len, undeclared preset or dtype names its field."""
    path = _edited(tmp_path, edit)
    with pytest.raises(MeasurementFileError) as info:
        load_published(path)
    assert field in info.value.field and message in str(info.value)


def test_moe_point_is_priced_by_the_experts_its_batch_touches() -> None:
    """Mixtral int8 at batch 1 reads the shared weights + k = 2 experts (not all 8), worked by hand."""
    from fractions import Fraction

    from roofline.validate import predict

    m = next(x for x in load_published() if x.id == "gpt-fast-mixtral-8x7b-int8-a100-330w")
    model, acc = m.model, m.spec
    assert model.num_experts == 8 and model.num_experts_per_tok == 2 and m.batch == 1
    read = model.shared_weight_bytes + 2 * model.routed_expert_bytes
    assert read < model.weight_bytes
    by_hand = (Fraction(read) + Fraction(model.kv_bytes_per_token) * m.context_sum) / Fraction(acc.bandwidth)
    t, bound = predict(m, acc)
    assert bound == "memory" and t == pytest.approx(float(by_hand), rel=1e-12)


def test_tensor_parallel_point_is_priced_per_gpu_with_the_allreduce() -> None:
    """Llama 3.1 70B on 8 A100 (gpt-fast, batch 1): 1/8 of the weights and KV + 160 ring all-reduces, by hand."""
    from fractions import Fraction

    from roofline.validate import predict

    m = next(x for x in load_published() if x.id == "gpt-fast-llama-3.1-70b-tp8-a100-330w")
    acc = m.spec
    assert m.tensor_parallel == 8 and m.batch == 1 and m.context_sum == 105
    # per GPU (heads 64/8, KV heads 8/8, MLP 28,672/8, vocabulary 128,256/8): 17,640,734,720 B; KV 40,960 B/token
    weights, kv = 17_640_734_720, 2 * 80 * 1 * 128 * 2
    link = acc.link(8)
    bw, alpha = Fraction(link.bandwidth.value), Fraction(link.latency.value)
    allreduce = 2 * 80 * (Fraction(2 * 7, 8) * 8192 * 2 / bw + 2 * 7 * alpha)
    by_hand = (Fraction(weights) + kv * 105) / Fraction(acc.bandwidth) + allreduce
    t, bound = predict(m, acc)
    assert bound == "memory" and t == pytest.approx(float(by_hand), rel=1e-12)
