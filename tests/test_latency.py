"""One request's latency, the memory one GPU holds, a decode step by operator (roofline.latency),
and `roofline report --input-len/--output-len` printing them (docs/conventions.md, "One request's latency")."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roofline import Deployment, InvalidValueError, get_accelerator, get_model
from roofline import estimate as est
from roofline.cli import main
from roofline.deployment import profile
from roofline.latency import MAX_BATCH, OPERATORS, memory_breakdown, operator_breakdown, request_latency

H100 = get_accelerator("h100-sxm")


def _d(name: str = "llama-3.1-8b", T: int = 1, acc: str = "h100-sxm", estimate: str | None = None) -> Deployment:
    return Deployment(get_model(name), get_accelerator(acc), T, estimate=profile(estimate))


# ------------------------------------------------------------------------------------------- latency
@pytest.mark.parametrize("batch", [1, 4])
def test_ttft_is_the_prefill_step_and_e2e_adds_the_decode_steps_over_the_growing_context(batch):
    """Llama 3.1 8B, P = 2,000, O = 500, by hand from docs/conventions.md ("One step"): TTFT =
    max((W + k B P) / BW, (B P F + a B P (P + 1) / 2) / peak); E2E = TTFT + sum over j = 1 .. O - 1 of
    max((W + k B (P + j)) / BW, (B F + a B (P + j)) / peak); TPOT = (E2E - TTFT) / (O - 1). Exact."""
    m = get_model("llama-3.1-8b")
    W, k, F, a = m.weight_bytes, m.kv_bytes_per_token, m.matmul_flops_per_token, m.attention_flops_per_token
    BW, peak = Fraction(H100.bandwidth), Fraction(H100.peak_flops)
    P, O, B = 2000, 500, batch  # noqa: E741 (the conventions' names)
    ttft = max((W + k * B * P) / BW, (B * P * F + a * B * P * (P + 1) // 2) / peak)
    decode = sum(max((W + k * B * (P + j)) / BW, (B * F + a * B * (P + j)) / peak) for j in range(1, O))
    r = request_latency(_d(), input_tokens=P, output_tokens=O, batch=B)
    assert (r.ttft, r.e2e, r.tpot) == (ttft, ttft + decode, decode / (O - 1))
    assert r.output_throughput == Fraction(B * O) / r.e2e and r.request_tokens_per_s == Fraction(O) / r.e2e
    assert r.total_throughput == Fraction(B * (P + O)) / r.e2e
    assert r.kv_bytes_peak == B * k * (P + O - 1) and r.time_kind == "bound"
    # the prefill of 2,000 tokens is compute-bound, a decode step memory-bound
    assert (r.prefill_bound, r.first_decode_bound, r.last_decode_bound) == ("compute", "memory", "memory")


@pytest.mark.parametrize("name, T, acc", [("gemma-3-27b", 1, "h100-sxm"), ("qwen3-30b-a3b", 1, "h100-sxm"),
                                          ("llama-3.1-70b", 4, "h100-sxm"), ("deepseek-v3", 8, "h200-sxm")])
def test_tpot_is_the_mean_decode_step_of_estimate_decode_step(name, T, acc):
    """Windows, experts, MLA and tensor parallelism: the O - 1 decode steps are decode_step's at contexts
    P + 1 .. P + O - 1 (sliding windows' KV, experts touched, all-reduce included), summed exactly."""
    d = _d(name, T, acc)
    P, O, B = 300, 40, 3  # noqa: E741 (the conventions' names)
    r = request_latency(d, input_tokens=P, output_tokens=O, batch=B)
    steps = [est.decode_step(d, batch=B, context=P + j).step_time for j in range(1, O)]
    assert r.e2e - r.ttft == sum(steps) and r.tpot == sum(steps) / (O - 1)
    assert r.kv_bytes_peak == B * d.share.kv_bytes(P + O - 1) and r.tensor_parallel_size == T


def test_the_estimate_prices_every_step_with_the_profile():
    """--estimate vllm: the decode steps are decode_step's estimates, each longer than the bound's."""
    d = _d(estimate="vllm")
    r = request_latency(d, input_tokens=100, output_tokens=20)
    bound = request_latency(d.as_bound(), input_tokens=100, output_tokens=20)
    steps = [est.decode_step(d, batch=1, context=100 + j).step_time for j in range(1, 20)]
    assert r.e2e - r.ttft == sum(steps) and r.time_kind == "estimate: vLLM with CUDA graphs"
    assert r.ttft > bound.ttft and r.tpot > bound.tpot


def test_one_output_token_has_no_decode_step():
    """O = 1: the prefill gives the only token; TPOT is undefined (None), E2E = TTFT."""
    r = request_latency(_d(), input_tokens=10, output_tokens=1)
    assert r.tpot is None and r.e2e == r.ttft and r.first_decode_bound is None
    assert r.to_dict()["tpot_s"] is None


@pytest.mark.parametrize("kw, field", [
    (dict(input_tokens=0, output_tokens=5), "input_tokens"), (dict(input_tokens=5, output_tokens=0), "output_tokens"),
    (dict(input_tokens=5, output_tokens=5, batch=0), "batch"),
    (dict(input_tokens=131_000, output_tokens=100), "input_tokens + output_tokens"),
    (dict(input_tokens=5.0, output_tokens=5), "input_tokens"),
    (dict(input_tokens=5, output_tokens=5, batch=MAX_BATCH + 1), "batch")])
def test_bad_requests_are_refused_naming_the_field(kw, field):
    with pytest.raises(InvalidValueError) as err:
        request_latency(_d(), **kw)
    assert err.value.field == field


def test_a_model_and_not_a_deployment_is_refused_by_name():
    with pytest.raises(InvalidValueError, match="deployment"):
        request_latency(get_model("llama-3.1-8b"), input_tokens=5, output_tokens=5)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- memory
def test_memory_parts_sum_to_the_budget_with_the_published_reserve():
    """Llama 3.1 8B on an H100: 79.2 GiB x 0.9 = weights (16.06 GB by class) + KV + 3.05 GiB (vLLM PR #10511) + free."""
    m = memory_breakdown(_d(), batch=2, context=2499)
    assert m.budget == Fraction(H100.usable_memory) * Fraction(9, 10)
    assert sum(m.weights_by_class.values()) == m.weights == 16_060_522_496
    assert m.kv == 2 * 131_072 * 2499 and m.reserve == Fraction("3.05") * 2**30
    assert m.weights + m.kv + m.reserve + m.free == m.budget and m.fits
    assert "vllm-project/vllm/pull/10511" in m.reserve_source
    upper = memory_breakdown(_d(), batch=2, context=2499, reserve=False)
    assert upper.reserve == 0 and upper.reserve_source is None and upper.free == m.free + m.reserve


def test_memory_that_does_not_fit_says_so():
    """1,000 sequences of 2,499 tokens need 327.5 GB of KV: more than the card; free is negative."""
    m = memory_breakdown(_d(), batch=1000, context=2499)
    assert not m.fits and m.free < 0


@pytest.mark.parametrize("kw, field", [(dict(context=-1), "context"), (dict(context=5, batch=0), "batch"),
                                       (dict(context=5, utilization=0), "utilization"),
                                       (dict(context=5, utilization=1.5), "utilization")])
def test_bad_memory_arguments_are_refused_naming_the_field(kw, field):
    with pytest.raises(InvalidValueError) as err:
        memory_breakdown(_d(), **kw)
    assert err.value.field == field


# ------------------------------------------------------------------------------------------- operators
_MODELS = [("llama-3.1-8b", 1, "h100-sxm"), ("gemma-3-27b", 1, "h100-sxm"), ("qwen3-30b-a3b", 1, "h100-sxm"),
           ("deepseek-v3", 8, "h200-sxm"), ("gpt-oss-120b", 1, "h100-sxm"), ("llama-3.1-70b", 4, "h100-sxm"),
           ("qwen3-0.6b", 1, "h100-sxm"), ("opt-13b", 2, "a100-80gb")]


@given(case=st.sampled_from(_MODELS), batch=st.integers(1, 512), context=st.integers(1, 40_000))
def test_the_operators_sum_to_the_step_totals(case, batch, context):
    """Bytes, FLOPs, memory and compute times of the operators sum exactly to decode_step's (exact FLOPs),
    for dense, windowed, MoE, MLA, mxfp4, tensor-parallel and tied-embedding models."""
    name, T, acc = case
    ob = operator_breakdown(_d(name, T, acc), batch=batch, context=context)
    s = ob.step
    ops = ob.operators
    assert sum(o.bytes for o in ops) == s.bytes and sum(o.flops for o in ops) == s.flops
    assert sum(o.memory_time for o in ops) == s.memory_time and sum(o.compute_time for o in ops) == s.compute_time
    assert s.step_time == max(s.memory_time, s.compute_time) + ob.allreduce_time
    assert [o.name for o in ops] == [n for n in OPERATORS if n in {o.name for o in ops}]
    assert (ob.allreduce_time > 0) == (T > 1) and (ob.allreduce_link_bytes > 0) == (T > 1)


def test_operators_of_llama_by_hand():
    """Llama 3.1 8B, batch 4 at 1,000 tokens: lm_head 128,256 x 4,096 x 2 B and 2 x 128,256 x 4,096 x 4 FLOPs;
    attention reads 4 x 1,000 x 128 KiB of KV and adds 4 x 4 L H d x 1,000 FLOPs (vLLM PR #29736's 128 KiB)."""
    ob = operator_breakdown(_d(), batch=4, context=1000)
    ops = {o.name: o for o in ob.operators}
    assert set(ops) == {"embedding", "attention", "mlp", "norms", "lm_head"}
    assert ops["lm_head"].weight_bytes == 128_256 * 4096 * 2 and ops["lm_head"].flops == 2 * 128_256 * 4096 * 4
    assert ops["embedding"].weight_bytes == 128_256 * 4096 * 2 and ops["embedding"].flops == 0
    assert ops["attention"].kv_bytes == 4 * 1000 * 131_072
    # q, k, v, o of 32 layers: 4,096 x (4,096 + 1,024 + 1,024) + 4,096 x 4,096 weights each
    proj = 32 * (4096 * (4096 + 1024 + 1024) + 4096 * 4096)
    assert ops["attention"].flops == 2 * proj * 4 + 4 * (4 * 32 * 32 * 128 * 1000)
    assert ops["mlp"].weight_bytes == 32 * 3 * 4096 * 14_336 * 2
    assert ops["mlp"].bound == "memory" and ops["attention"].intensity == ops["attention"].flops / ops[
        "attention"].bytes


def test_a_tied_embedding_is_read_by_the_lm_head():
    """Qwen3 0.6B ties its embeddings: the lm_head row reads the shared matrix; the lookup row reads nothing."""
    ob = operator_breakdown(_d("qwen3-0.6b"), batch=1, context=10)
    ops = {o.name: o for o in ob.operators}
    m = get_model("qwen3-0.6b")
    assert ob.tied_lm_head and ops["embedding"].bytes == 0 and ops["embedding"].bound == "none"
    assert ops["lm_head"].weight_bytes == m.vocab_size * m.hidden_size * 2


def test_moe_experts_read_the_experts_touched():
    """Qwen3 30B-A3B, batch 1: the experts row reads k = 8 of the 128 experts per layer (uniform routing)."""
    m = get_model("qwen3-30b-a3b")
    one = {o.name: o for o in operator_breakdown(_d("qwen3-30b-a3b"), batch=1, context=100).operators}
    routed = m.routed_expert_bytes * 8
    assert one["experts"].weight_bytes == routed + m.weight_bytes_by_class()["router"]
    assert "mlp" not in one


# ------------------------------------------------------------------------------------------- the command
def _json(capsys, *args):
    assert main(["report", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_prints_one_requests_latency_in_ms(capsys):
    """`roofline report --input-len 2000 --output-len 500 --batch 16`: a row for batch 1 and for 16, in ms,
    each line within 100 columns; the context becomes P + O - 1 = 2,499."""
    assert main(["report", "--input-len", "2000", "--output-len", "500", "--batch", "16"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("Request latency"):]
    r = request_latency(_d(), input_tokens=2000, output_tokens=500)
    row = f"      1 {float(r.ttft) * 1e3:9,.3f} {float(r.tpot) * 1e3:9,.3f} {float(r.e2e) * 1e3:11,.3f}"
    assert row in section and "     16 " in section
    assert "Memory of the GPU" in section and "One decode step by operator: batch 1, context 2,499" in section
    assert all(len(line) <= 100 for line in section.splitlines())


def test_report_json_holds_latency_memory_and_operators(capsys):
    """--json: latency rows (bound; estimate with --estimate), the memory breakdown and the operator table."""
    r = _json(capsys, "--input-len", "2000", "--output-len", "500", "--batch", "4", "--estimate", "vllm",
              "--breakdown-batch", "4")
    lat = r["latency"]
    assert [x["batch"] for x in lat["bound"]] == [1, 4] and [x["batch"] for x in lat["estimate"]] == [1, 4]
    one = request_latency(_d(), input_tokens=2000, output_tokens=500)
    assert lat["bound"][0]["e2e_s"] == float(one.e2e) and lat["bound"][0]["kv_fits"] is True
    assert lat["estimate"][0]["time_kind"].startswith("estimate")
    assert r["inputs"]["context"] == 2499 and r["memory"]["batch"] == 4 and r["operators"]["batch"] == 4
    ops = r["operators"]
    assert sum(o["bytes"] for o in ops["operators"]) == pytest.approx(ops["total"]["bytes"], rel=1e-12)
    plain = _json(capsys)
    assert "latency" not in plain and plain["memory"]["context"] == 1000


def test_gpu_memory_utilization_is_vllms_name_for_utilization(capsys):
    a = _json(capsys, "--gpu-memory-utilization", "0.8")
    b = _json(capsys, "--utilization", "0.8")
    assert a["memory"] == b["memory"] and a["memory"]["utilization"] == 0.8


def _status(args: list[str]) -> object:
    try:
        return main(args)
    except SystemExit as exc:  # argparse's own errors
        return exc.code


@pytest.mark.parametrize("args, text", [(["--input-len", "10"], "--output-len=None: not given: --input-len needs it"),
                                        (["--output-len", "10"], "--input-len=None: not given: --output-len needs it"),
                                        (["--input-len", "0", "--output-len", "3"], "--input-len='0': must be >= 1"),
                                        (["--breakdown-batch", "0"], "--breakdown-batch='0': must be >= 1"),
                                        (["--input-len", "131000", "--output-len", "100"],
                                         "input_tokens + output_tokens=131100: exceeds")])
def test_report_latency_bad_input_is_one_line_and_status_2(capsys, args, text):
    assert _status(["report", *args]) == 2
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) == 1
