"""``roofline simulate``: the comparison table, JSON, output files, and one-line errors with exit status 2."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from _text import unwrapped

from roofline import get_accelerator, get_model
from roofline.cli import main
from roofline.estimate import kv_budget_for
from roofline.sim import (
    KVPool,
    RooflineCostModel,
    load_trace,
    serve_continuous,
    serve_serial,
    serve_static,
    shipped_trace,
)

TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{i // 4:02d}.{(i % 4) * 25:02d},{100 + 37 * i},{1 + (29 * i) % 60}\n" for i in range(40)
)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """A 40-request Azure-format trace."""
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def test_simulate_prints_one_row_per_policy_matching_the_library(trace: Path, capsys: pytest.CaptureFixture) -> None:
    """The default run compares serial, static (B = 8) and continuous with the library's numbers."""
    assert main(["simulate", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():  # the first table's rows (the latency table repeats the names)
        if line.split()[:1] in (["serial"], ["static"], ["continuous"]):
            rows.setdefault(line.split()[0], line.split())
    assert list(rows) == ["serial", "static", "continuous"]
    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    pool = KVPool.from_budget(budget=kv_budget_for(model, acc), kv_bytes_per_token=model.kv_bytes_per_token)
    assert "28,837 blocks x 16 tokens" in unwrapped(out) and pool.capacity_blocks == 28_837
    cost = RooflineCostModel.for_model(model, acc)
    reqs = load_trace(trace)
    for name, r in (("serial", serve_serial(reqs, cost, kv_pool=pool, record_steps=True)),
                    ("static", serve_static(reqs, cost, batch_size=8, kv_pool=pool, record_steps=True)),
                    ("continuous", serve_continuous(reqs, cost, max_num_seqs=256, kv_pool=pool, record_steps=True))):
        assert rows[name][1:4] == [f"{r.summary.completed:,}", "0", f"{r.summary.steps:,}"]
        assert f" {100 * float(r.summary.long_run_useful_share):.1f} " in " ".join(rows[name])  # a % column


def test_simulate_json_holds_each_policy_summary(trace: Path, capsys: pytest.CaptureFixture) -> None:
    """--json prints the inputs and every policy's summary; exact results become floats."""
    assert main(["simulate", "--trace", str(trace), "--json", "--batch-size", "4", "--admission", "on-demand"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in data["results"]] == ["serial", "static", "continuous"]
    assert data["trace"]["requests"] == 40 and data["kv_pool"]["block_size"] == 16
    static = data["results"][1]
    assert static["options"]["batch_size"] == 4 and data["results"][2]["options"]["admission"] == "on_demand"
    cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    expected = serve_static(load_trace(trace), cost, batch_size=4,
                            kv_pool=KVPool(data["kv_pool"]["capacity_blocks"], 16), record_steps=True).summary.to_dict()
    assert static["summary"] == expected
    assert data["units"]["*_s, queue_wait, ttft, tpot, e2e, itl (p50, p90, p99, mean, max)"] == "s"
    assert data["units"]["capacity_tokens, peak_kv_tokens"] == "tokens"
    assert data["units"]["capacity_blocks, peak_kv_blocks, kv_capacity_blocks"] == "blocks"


def test_simulate_out_files_are_byte_identical_across_runs(trace: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    """--out with --steps writes per-request and per-step CSVs; two runs give the same bytes."""
    for d in ("a", "b"):
        assert main(["simulate", "--trace", str(trace), "--policy", "continuous", "--out", str(tmp_path / d),
                     "--steps"]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["continuous-requests.csv", "continuous-steps.csv"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    lines = (tmp_path / "a" / "continuous-requests.csv").read_text().splitlines()
    assert lines[0].startswith("id,arrival_s,prompt_tokens,output_tokens,admitted_s") and len(lines) == 41


def test_simulate_float_mode_agrees_with_exact(trace: Path, capsys: pytest.CaptureFixture) -> None:
    """--float gives the exact run's summary to float rounding."""
    assert main(["simulate", "--trace", str(trace), "--json"]) == 0
    exact = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--trace", str(trace), "--json", "--float"]) == 0
    fast = json.loads(capsys.readouterr().out)
    for a, b in zip(exact["results"], fast["results"], strict=True):
        assert b["summary"]["steps"] == a["summary"]["steps"]
        assert b["summary"]["makespan_s"] == pytest.approx(a["summary"]["makespan_s"], rel=1e-12)
        assert b["summary"]["e2e"]["p99"] == pytest.approx(a["summary"]["e2e"]["p99"], rel=1e-12)


def test_simulate_real_trace_prefix(capsys: pytest.CaptureFixture) -> None:
    """No --trace: the shipped conversation trace; on its first 1,000 requests continuous beats static beats serial."""
    assert main(["simulate", "--limit", "1000", "--json", "--float"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["trace"]["path"] == str(shipped_trace("conv"))
    results = {r["policy"]: r["summary"] for r in data["results"]}
    tput = {k: v["output_tokens_per_s"] for k, v in results.items()}
    assert tput["continuous"] > tput["static"] > tput["serial"]
    assert all(v["completed"] == 1000 and v["rejected"] == 0 for v in results.values())
    assert results["continuous"]["ttft"]["p50"] < 0.1 < results["static"]["ttft"]["p50"]


def test_simulate_trace_names_the_shipped_traces(capsys: pytest.CaptureFixture) -> None:
    """--trace code serves the shipped code trace (its first request: 4,808 prompt and 10 output tokens)."""
    assert main(["simulate", "--trace", "code", "--limit", "1", "--policy", "serial", "--float"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("roofline simulate: 1 requests from azure_llm_2023_code.csv.gz (arrivals over 0.0 s)")
    assert main(["simulate", "--trace", "code", "--limit", "1", "--policy", "serial", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["results"][0]["summary"]
    assert summary["steps"] == 10  # one prefill step and O - 1 = 9 decode steps


def test_simulate_shipped_name_that_is_also_a_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--trace conv with a file named conv in the current folder is ambiguous: exit 2, one line saying ./conv."""
    (tmp_path / "conv").write_text(TRACE)
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--trace", "conv"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--trace='conv'" in err and "./conv" in err
    assert main(["simulate", "--trace", "./conv", "--limit", "2", "--policy", "serial"]) == 0
    assert "2 requests from conv" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "words"), [
    (["--utilization", "0.1", "--tensor-parallel-size", "1"], "leave no KV budget"),  # T given: not chosen
    (["--model", "gpt-17"], "unknown model 'gpt-17'"),
    (["--accelerator", "tpu"], "unknown accelerator 'tpu'"),
    (["--format", "jsonl"], "trace.csv:1: field 'row': not valid JSON"),
])
def test_simulate_bad_values_print_one_line_and_exit_2(
    trace: Path, capsys: pytest.CaptureFixture, args: list[str], words: str
) -> None:
    """A bad option value prints one error line naming it and returns 2."""
    assert main(["simulate", "--trace", str(trace), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roofline simulate: error: ") and words in err and err.count("\n") == 1


def test_simulate_tiny_kv_budget_rejects_every_request_without_failing(
    trace: Path, capsys: pytest.CaptureFixture
) -> None:
    """A 1 MB KV budget (7 blocks) cannot hold any request: all 40 are rejected under every policy, exit 0."""
    assert main(["simulate", "--trace", str(trace), "--kv-budget-gb", "0.001", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kv_pool"]["capacity_blocks"] == 0
    assert [r["summary"]["rejected"] for r in data["results"]] == [40, 40, 40]
    assert all(r["summary"]["steps"] == 0 for r in data["results"])


def test_simulate_bad_trace_row_prints_file_line_field(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A bad trace row prints one line naming the file, the line and the field, and returns 2."""
    path = tmp_path / "bad.csv"
    path.write_text(TRACE + "2023-11-16 18:16:00.00,12.5,3\n")
    assert main(["simulate", "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"roofline simulate: error: {path}:42: field 'ContextTokens': expected an integer number of " \
                  "tokens, got '12.5'\n"
    assert main(["simulate", "--trace", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "words"), [
    (["--batch-size", "0"], "--batch-size='0': must be >= 1"),
    (["--max-num-seqs", "x"], "--max-num-seqs='x': expected an integer"),
    (["--utilization", "1.5"], "--utilization='1.5': must be <= 1"),
    (["--kv-budget-gb", "-1"], "--kv-budget-gb='-1': must be > 0"),
    (["--overhead=-1e-3"], "--overhead='-1e-3': must be >= 0"),
    (["--max-wait", "soon"], "--max-wait='soon': expected a finite number"),
])
def test_simulate_bad_option_syntax_exits_2(trace: Path, capsys: pytest.CaptureFixture, args: list[str],
                                           words: str) -> None:
    """An option value out of range is refused by the parser with one line naming it and status 2."""
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(trace), *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_exact_times_reach_the_table_unrounded() -> None:
    """Sanity: the exact cost model's durations are Fractions, so the table's figures come from exact sums."""
    cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    assert isinstance(cost.decode_time(8, 8000), Fraction) and isinstance(cost.prefill_time(100, 5050), Fraction)


def test_simulate_chunked_prefill_adds_a_row_matching_the_library(trace: Path, capsys: pytest.CaptureFixture) -> None:
    """--chunked-prefill --max-num-batched-tokens 2048 adds continuous batching with chunked prefill beside the
    other policies (which run without a budget), with the library's summary, ITL and goodput."""
    args = ["simulate", "--trace", str(trace), "--chunked-prefill", "--max-num-batched-tokens", "2048", "--json",
            "--slo-ttft", "50", "--slo-tpot", "10"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in data["results"]] == ["serial", "static", "continuous", "continuous-chunked"]
    chunked = data["results"][3]
    assert chunked["options"]["prefill"] == "chunked" and chunked["options"]["max_num_batched_tokens"] == 2048
    assert data["results"][2]["options"]["max_prefill_tokens"] is None
    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    pool = KVPool(data["kv_pool"]["capacity_blocks"], 16)
    lib = serve_continuous(load_trace(trace), RooflineCostModel.for_model(model, acc), kv_pool=pool,
                           prefill="chunked", max_num_batched_tokens=2048, record_steps=True)
    assert chunked["summary"] == lib.summary.to_dict()
    assert chunked["summary"]["itl"]["p90"] is not None and data["results"][1]["summary"]["itl"] is None
    goodput = lib.goodput(ttft_s=Fraction(50, 1000), tpot_s=Fraction(10, 1000)).to_dict()
    assert chunked["goodput"] == goodput and 0 < goodput["met"] <= 40
    assert main(args[:-5]) == 0
    out = capsys.readouterr().out
    out = unwrapped(out)
    assert "continuous-chunked" in out and "useful = long-run useful share" in out and "per-batch useful" in out


def test_simulate_closed_loop_clients(capsys: pytest.CaptureFixture) -> None:
    """--max-concurrency 10 --num-prompts 200 runs ten closed-loop clients (continuous batching only), seeded."""
    args = ["simulate", "--max-concurrency", "10", "--num-prompts", "200", "--random-input-len", "256",
            "--random-output-len", "64", "--random-range-ratio", "0.5", "--seed", "3", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["kind"] == "closed_loop" and data["workload"]["seed"] == 3
    assert data["workload"]["clients"] == 10 and data["workload"]["input_distribution"] == "uniform"
    (cont,) = data["results"]
    assert cont["policy"] == "continuous" and cont["summary"]["completed"] == 200
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out) == data  # the seed makes it reproducible
    assert main(args[:-1] + ["--policy", "static"]) == 2
    assert "--max-concurrency=10: serve_static does not take closed-loop clients" in \
        capsys.readouterr().err


def test_simulate_generated_open_loop_and_the_anyscale_command(capsys: pytest.CaptureFixture) -> None:
    """--num-prompts with --request-rate gives Poisson arrivals; the Anyscale benchmark's command runs."""
    assert main(["simulate", "--num-prompts", "50", "--request-rate", "4", "--json", "--policy", "continuous"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["arrival"] == "poisson" and data["workload"]["rate"] == 4
    anyscale = ["simulate", "--model", "opt-13b", "--accelerator", "a100-40gb", "--num-prompts", "1000",
                "--random-input-len", "512", "--random-output-len", "128", "--output-len-dist", "exponential",
                "--output-len-cap", "32", "--batch-size", "16", "--float", "--json"]
    assert main(anyscale) == 0
    results = {r["label"]: r["summary"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert all(s["completed"] == 1000 for s in results.values())
    assert results["continuous"]["output_tokens_per_s"] > results["static"]["output_tokens_per_s"]


@pytest.mark.parametrize(("args", "words"), [
    (["--max-concurrency", "4", "--request-rate", "2"], "--request-rate=2: applies to generated open-loop arrivals"),
    (["--num-prompts", "4", "--output-len-dist", "exponential"], "--output-len-cap=None: the capped exponential"),
    (["--num-prompts", "4", "--random-range-ratio", "1"], "--random-range-ratio=1: must be in [0, 1)"),
    (["--num-prompts", "4", "--input-len-cap", "10"], "--input-len-cap=10: applies to exponential or lognormal prompt"),
    (["--num-prompts", "4", "--output-len-dist", "lognormal", "--random-output-len", "100000", "--len-sigma", "0.01",
      "--output-len-cap", "1"], "--output-len-cap=1: keeps a share 0 of the lognormal draws"),
    (["--num-prompts", "4", "--input-len-dist", "trace"], "--input-len-dist='trace': resampling a trace draws"),
    (["--num-prompts", "4", "--chunked-prefill", "--max-num-batched-tokens", "16"],
     "--max-num-batched-tokens=16: must be >= max_num_seqs=256"),
])
def test_simulate_generated_workload_errors_exit_2(args: list[str], words: str,
                                                   capsys: pytest.CaptureFixture) -> None:
    """Options that do not go together print one line naming them and return 2."""
    assert main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_simulate_resamples_lengths_from_the_shipped_trace(capsys: pytest.CaptureFixture) -> None:
    """--input-len-dist trace --output-len-dist trace draws (prompt, output) pairs of the trace (the shipped one)."""
    args = ["simulate", "--num-prompts", "30", "--request-rate", "5", "--input-len-dist", "trace", "--output-len-dist",
            "trace", "--policy", "continuous", "--json", "--float", "--seed", "1"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["input_distribution"] == "trace" and data["results"][0]["summary"]["requests"] == 30
    assert Path(data["workload"]["resampled_from"]) == shipped_trace("conv")


def test_a_resampled_workload_says_its_trace_not_the_unused_means(capsys: pytest.CaptureFixture) -> None:
    """The header of a workload resampled from the code trace names that trace; the generator's means (1,024 and
    128 by default), which resampling does not read, are not shown as its lengths."""
    assert main(["simulate", "--num-prompts", "5", "--input-len-dist", "trace", "--output-len-dist", "trace",
                 "--trace", "code", "--policy", "continuous"]) == 0
    head = " ".join(capsys.readouterr().out.split())
    assert ("5 requests from generated (all at t = 0; (prompt, output) pairs resampled from "
            "azure_llm_2023_code.csv.gz; seed 0)") in head, head
    assert "1,024" not in head.split("(arrivals")[0]


def test_simulate_json_says_a_windowed_pool_counts_token_layers(capsys: pytest.CaptureFixture) -> None:
    """Gemma 3 27B: the pool's capacity_tokens and the runs' peak_kv_tokens are token-layers, its blocks layer-blocks
    (the JSON named them tokens and blocks without a word)."""
    assert main(["simulate", "--model", "gemma-3-27b", "--num-prompts", "3", "--policy", "serial", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kv_pool"]["unit"] == "layer-blocks"
    assert data["units"]["capacity_tokens, peak_kv_tokens"].startswith("token-layers")
    assert data["units"]["capacity_blocks, peak_kv_blocks, kv_capacity_blocks"] == "layer-blocks"


def test_simulate_says_why_requests_were_rejected_and_the_budget_basis(capsys: pytest.CaptureFixture) -> None:
    """Prompts of 4,096 tokens with --max-num-batched-tokens 2048: static and continuous reject all 50 and the table
    says why (the reason was only in the CSVs); the pool line says its budget is reserve 0 and how to match
    report's real budget (60.48 GB - 3.05 GiB = 57.20 GB); gpt-oss-120b's weights are mxfp4/bfloat16, not bfloat16."""
    assert main(["simulate", "--num-prompts", "50", "--input-len", "4096", "--output-len", "64",
                 "--max-num-batched-tokens", "2048"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert "  static: 50 rejected; the first, request 0: prompt of 4096 tokens exceeds max_num_batched_tokens=2048" \
        in out
    assert "  continuous: 50 rejected; the first, request 0: prompt of 4096 tokens exceeds max_prefill_tokens=2048" \
        in out
    assert "serial: " not in out
    assert ("(60.48 GB = usable x 0.9 - weights, reserve 0; roofline report's real budget also subtracts a "
            "published 3.05 GiB reserve: --kv-budget-gb 57.20 for that)") in out
    assert main(["simulate", "--model", "gpt-oss-120b", "--num-prompts", "2", "--policy", "serial", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["weight_format"] == "mxfp4/bfloat16"
    assert data["kv_pool"]["budget_basis"] == "usable x 0.9 - weights, reserve 0"


def test_simulate_defaults_max_model_len_to_the_models_positions(capsys: pytest.CaptureFixture) -> None:
    """vLLM takes max_model_len from the model (Llama 2 7B: 4,096) and rejects longer requests; simulate served a
    4,000 + 200 token request on it. Now rejected by default, served when --max-model-len says more."""
    args = ["simulate", "--model", "llama-2-7b", "--num-prompts", "2", "--input-len", "4000", "--output-len", "200",
            "--policy", "serial"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["results"][0]
    assert data["options"]["max_model_len"] == 4096 and data["summary"]["rejected"] == 2
    assert main(args) == 0
    assert ("  serial: 2 rejected; the first, request 0: prompt + output of 4200 tokens (4000 + 200) exceeds "
            "max_model_len=4096") in unwrapped(capsys.readouterr().out)
    assert main([*args, "--max-model-len", "4200", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["summary"]["completed"] == 2


@pytest.mark.parametrize("args, needle", [
    (["--policy", "serial", "--batch-size", "4"],
     "--batch-size=4: applies to static batching, which this run (--policy serial: serial; generated arrivals "
     "all at t = 0 with fixed / fixed lengths) does not include"),
    (["--policy", "continuous", "--max-wait", "0.5"], "--max-wait=0.5: applies to static batching"),
    (["--policy", "static", "--max-num-seqs", "64"], "--max-num-seqs=64: applies to continuous batching"),
    (["--policy", "serial", "--admission", "on-demand"], "--admission='on-demand': applies to continuous batching"),
    (["--policy", "continuous", "--chunked-prefill", "--max-prefill-tokens", "100"],
     "--max-prefill-tokens=100: applies to continuous batching without chunked prefill, which this run (--policy "
     "continuous: continuous-chunked; generated arrivals all at t = 0 with fixed / fixed lengths) does not include"),
    (["--think-time", "1.5"], "--think-time=1.5: applies to closed-loop clients (--max-concurrency), which this run"),
    (["--burstiness", "2"], "--burstiness=2: applies to generated open-loop arrivals at a --request-rate"),
    # a disaggregated run checks its workload flags too (it ignored them: stop 21)
    (["--num-prefill-instances", "1", "--num-decode-instances", "1", "--burstiness", "2"],
     "--burstiness=2: applies to generated open-loop arrivals at a --request-rate"),
    (["--num-decode-instances", "2", "--think-time", "1"],
     "--think-time=1: applies to closed-loop clients (--max-concurrency)"),
    # a pool flag without a disaggregated run: the value as given (it printed Fraction(10, 1))
    (["--kv-transfer-bandwidth", "10"],
     "--kv-transfer-bandwidth=10: only with --num-prefill-instances or --num-decode-instances"),
    # a disaggregated run's pools are sized by their own flags; its link names the flag that gave the accelerator
    (["--num-prefill-instances", "1", "--num-decode-instances", "1", "-dp", "2"],
     "--data-parallel-size=2: not taken by a disaggregated run"),
    (["--num-prefill-instances", "1", "--num-decode-instances", "1", "--accelerator", "l40s"],
     "--accelerator='l40s': has no stated inter-node network to move KV between the pools: give "
     "--kv-transfer-bandwidth"),
    # a parallelism refusal names the flag, not the Deployment's field
    (["--enable-expert-parallel"],
     "--enable-expert-parallel: llama-3.1-8b is a dense model: expert parallelism needs routed experts"),
    (["--policy", "continuous", "-pp", "2", "--model", "gemma-3-27b"],
     "--pipeline-parallel-size=2: gemma-3-27b has sliding-window layers: their pool over pipeline stages is not "
     "modelled in simulate"),
])
def test_a_flag_the_run_cannot_use_is_refused_by_name(args: list[str], needle: str,
                                                      capsys: pytest.CaptureFixture) -> None:
    """Flags that change nothing in the chosen run were ignored without a word (a break-it pass); each is refused,
    one line, exit 2. The same flags where they apply run (static with --batch-size, a closed loop's think time)."""
    assert main(["simulate", "--num-prompts", "3", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
    assert main(["simulate", "--num-prompts", "3", "--policy", "static", "--batch-size", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["options"]["batch_size"] == 2
    assert main(["simulate", "--num-prompts", "3", "--max-concurrency", "2", "--think-time", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["think_time_s"] == 1


def test_simulate_says_which_engine_ran_and_refuses_event_by_flag(trace: Path, capsys: pytest.CaptureFixture) -> None:
    """The text output's engine line and --json's options say which engine ran; --float takes the step engine under
    --engine auto (the reason given), and --engine event with --float is refused in one line naming --engine."""
    assert main(["simulate", "--trace", str(trace), "--policy", "serial"]) == 0
    out = capsys.readouterr().out
    assert "  simulation engine: event (closed-form decode stretches on an integer tick clock; exact)" in out
    assert main(["simulate", "--trace", str(trace), "--engine", "step"]) == 0
    assert "  simulation engine: step, every policy: asked for (engine='step')\n" in capsys.readouterr().out
    assert main(["simulate", "--trace", str(trace), "--policy", "continuous", "--float", "--json"]) == 0
    options = json.loads(capsys.readouterr().out)["results"][0]["options"]
    assert options["engine"] == "step" and options["engine_reason"].startswith("float mode (exact=False)")
    assert main(["simulate", "--trace", str(trace), "--float", "--engine", "event"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roofline simulate: error: --engine='event': serial: the stretch clock cannot run this: "
                          "float mode") and err.count("\n") == 1


def test_a_generated_shared_prefix_and_conversation_from_the_command_line(capsys: pytest.CaptureFixture) -> None:
    """4 prompts of 32 shared + 16 drawn tokens at t = 0, 16-token blocks: the last three hit the 2 prefix blocks
    (floor(47 / 16) = 2 full blocks below the last token): 96 tokens of 192; 2 conversations of 2 turns without a
    prefix: turn 2 (16 + 4 + 16 = 36 tokens) hits turn 1's one full block, 2 x 16 tokens of 104."""
    base = ["simulate", "--random-input-len", "16", "--random-output-len", "4", "--policy", "continuous",
            "--enable-prefix-caching", "--json"]
    assert main([*base, "--num-prompts", "4", "--prefix-len", "32"]) == 0
    data = json.loads(capsys.readouterr().out)
    cache = data["results"][0]["options"]["prefix_cache"]
    assert (cache["hit_tokens"], cache["queried_tokens"]) == (96, 192)
    assert data["workload"]["prefix_len"] == 32 and data["workload"]["hash_block_size"] == 16
    assert main([*base, "--num-prompts", "2", "--num-turns", "2", "--turn-gap", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    cache = data["results"][0]["options"]["prefix_cache"]
    assert (cache["hit_tokens"], cache["queried_tokens"]) == (32, 104)
    assert data["workload"]["num_turns"] == 2 and data["workload"]["turn_gap_s"] == 100
    assert data["results"][0]["summary"]["requests"] == 4
    assert main([*base[:-1], "--num-prompts", "2", "--prefix-len", "32", "--num-prefixes", "2",
                 "--num-turns", "2"]) == 0
    assert "after one of 2 prefixes of 32; 2 turns each, 10 s apart" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("args", "needle"), [
    (["--turn-gap", "5"], "--turn-gap=5: applies to generated conversations of --num-turns above 1"),
    (["--num-prefixes", "2"], "--num-prefixes=2: distinct prefixes need a prefix_len above 0"),
    (["--max-concurrency", "2", "--prefix-len", "8"], "--prefix-len=8: applies to generated open-loop requests"),
    (["--num-turns", "0"], "--num-turns"), (["--prefix-len", "-1"], "--prefix-len"),
    (["--num-turns", "3", "--turn-gap", "-1"], "--turn-gap"),
])
def test_bad_prefix_and_turn_flags_are_refused_by_name(args: list[str], needle: str,
                                                       capsys: pytest.CaptureFixture) -> None:
    """One line on stderr naming the flag, exit 2 (argparse's own range checks exit through SystemExit)."""
    try:
        status = main(["simulate", "--num-prompts", "3", "--policy", "continuous", *args])
    except SystemExit as stop:
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


@pytest.mark.parametrize(("flags", "line"), [
    ([], "--num-turns=100000: the prompts of this workload total 7.200e+13 tokens, more than the simulator holds "
     "(about 1.600e+09: MAX_HASHED_BLOCKS = 100,000,000 blocks of 16 tokens): lower --num-turns, --num-prompts, "
     "--random-input-len or --random-output-len\n"),
    (["--enable-prefix-caching"], "--num-turns=100000: the prompts of this workload total 7.200e+13 tokens, more "
     "than the simulator holds (about 1.600e+09: MAX_HASHED_BLOCKS = 100,000,000 blocks of 16 tokens): lower "
     "--num-turns, --num-prompts, --random-input-len or --random-output-len (or a --block-size above 16)\n"),
])
def test_too_large_conversations_are_refused_at_once_in_the_commands_terms(flags: list[str], line: str,
                                                                           capsys: pytest.CaptureFixture) -> None:
    """Break-it finding 3: 10^5 turns hung for minutes, then named hashes and hash_block_size (no flag; no hashes
    are read with caching off). 50 x 10^5 turns of 256 + 288 (t - 1) tokens: 50 (256 T + 144 T (T - 1)) = 7.2e13."""
    import time

    start = time.perf_counter()
    assert main(["simulate", "--policy", "continuous", "--chunked-prefill", "--num-prompts", "50",
                 "--random-input-len", "256", "--random-output-len", "32", "--num-turns", "100000", *flags]) == 2
    assert time.perf_counter() - start < 30
    assert capsys.readouterr().err == "roofline simulate: error: " + line


@pytest.mark.parametrize("model", ["qwen3-next-80b-a3b", "llama-3.1-70b"])
def test_simulate_picks_the_smallest_tensor_parallel_size_that_fits_as_report_does(
        model: str, capsys: pytest.CaptureFixture) -> None:
    """A model that does not fit one H100 (a hybrid one included) runs on the smallest T that fits,
    roofline.estimate.smallest_tensor_parallel_size at vLLM's 0.9, said in a line within 100 columns, as
    report says it; a given --tensor-parallel-size is kept."""
    from roofline.estimate import smallest_tensor_parallel_size

    expected = smallest_tensor_parallel_size(get_model(model), get_accelerator("h100-sxm"), utilization=Fraction(9, 10))
    assert expected is not None and expected > 1
    args = ["simulate", "--model", model, "--num-prompts", "4", "--policy", "continuous"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tensor_parallel_size"] == expected and data["tensor_parallel_chosen"] == "smallest that fits"
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"the run below is for --tensor-parallel-size {expected}" in unwrapped(" ".join(out.split("\n    ")))
    assert all(len(line) <= 100 for line in out.splitlines())
    assert main(["report", "--model", model]) == 0
    assert f"the report below is for --tensor-parallel-size {expected}" in " ".join(
        capsys.readouterr().out.split("\n    "))
    assert main([*args, "--tensor-parallel-size", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tensor_parallel_size"] == 8 and "tensor_parallel_chosen" not in data


def test_a_long_value_widens_its_column_instead_of_wrapping_the_row() -> None:
    """The whole conversation trace served one by one (the default run's serial row): a makespan of 20,069.55 s
    passes its 8 columns and TTFT p99 16,369,267 ms its 9; the rows stay within 100 columns, one line each, every
    value right-aligned under its header (the label column narrowed to the longest label)."""
    from roofline.commands.simulate import COLUMNS, _table

    rows = [tuple(name for name, _, _ in COLUMNS), tuple(u for _, u, _ in COLUMNS),
            ("serial", "19,366", "0", "4,088,665", "20,069.55", "204", "100.0", "100.0", "3.1", "0"),
            ("continuous", "19,366", "0", "628,509", "3,503.18", "1,167", "100.0", "2.6", "11.7", "0")]
    lines = _table(rows, [w for _, _, w in COLUMNS])
    assert all(len(line) <= 100 for line in lines) and len(lines) == 4
    assert lines[2].startswith("serial      19,366") and lines[2].endswith("3.1        0")
    ends = {line.index(cell) + len(cell) for line, cell in zip(lines, ("makespan", "s", "20,069.55", "3,503.18"),
                                                                 strict=True)}
    assert len(ends) == 1  # one right edge for the column
    short = _table(rows[:2] + [("continuous-chunked", "1", "0", "2", "3.00", "4", "5.0", "6.0", "7.0", "0")],
                   [w for _, _, w in COLUMNS])
    assert [len(line) for line in short] == [100, 100, 100]  # nothing passes its width: the stated widths, as before


def test_a_plan_row_at_a_scaled_rate_is_rerun_by_simulate_rate_scale(capsys: pytest.CaptureFixture) -> None:
    """`roofline plan --rate-scale 4` simulates the trace at 4x its rate; `roofline simulate --rate-scale 4` with
    the row's flags serves the same workload: the same p99 TTFT, TPOT and E2E to the last digit, and its header and
    JSON say the factor (both make the workload with roofline.sim.scale_rate)."""
    row = ["--limit", "200", "--rate-scale", "4", "--max-num-seqs", "64", "--max-num-batched-tokens", "2048"]
    assert main(["plan", *row, "--slo-tpot", "20", "-tp", "1", "--json"]) == 0
    at = json.loads(capsys.readouterr().out)["results"][0]["at_rate"]
    sim = ["simulate", *row, "--policy", "continuous", "--chunked-prefill", "--admission", "reserve"]
    assert main([*sim, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    summary = data["results"][0]["summary"]
    assert data["workload"]["rate_scale"] == 4.0
    assert (summary["ttft"]["p99"], summary["tpot"]["p99"], summary["e2e"]["p99"]) == (
        at["ttft_s"], at["tpot_s"], at["e2e_s"])
    assert at["ttft_s"] == pytest.approx(0.10384567105727327, rel=1e-12)  # the run itself, pinned
    assert main(sim) == 0
    head = " ".join(capsys.readouterr().out.split())
    assert ("200 requests from azure_llm_2023_conv.csv.gz, served at 4x its rate: every arrival / 4 (arrivals over "
            "15.3 s)") in head, head


@pytest.mark.parametrize(("command", "flags", "message"), [
    ("simulate", ["--max-concurrency", "4", "--rate-scale", "2"], "--rate-scale=2: closed-loop clients "
     "(--max-concurrency) send as they are handed back: there is no rate to scale"),
    ("simulate", ["--num-prompts", "10", "--rate-scale", "1"], "--rate-scale=1: every request of this workload "
     "arrives at 0 s: there is no rate to scale; give --request-rate"),
    ("simulate", ["--num-prompts", "10", "--request-rate", "inf", "--rate-scale", "2"], "--rate-scale=2: every "
     "request of this workload arrives at 0 s: there is no rate to scale; give a finite --request-rate"),
    ("simulate", ["--limit", "3", "--rate-scale", "1e-20"], "--rate-scale=1e-20: puts request 1's arrival at "
     "4.31458e+20 s, past 1e+15 s (MAX_ARRIVAL_S): give a larger one"),
    ("simulate", ["--limit", "3", "--rate-scale", "1e-320"], "--rate-scale=1e-320: puts request 1's arrival at "
     "4.31458e+320 s, past 1e+15 s (MAX_ARRIVAL_S): give a larger one"),  # past a float: no OverflowError
    ("simulate", ["--trace", "SAME", "--rate-scale", "7"], "--rate-scale=7: every request of this workload arrives "
     "at 5 s: there is no rate to scale; give arrivals that differ"),
    ("plan", ["--num-prompts", "10", "--rate-scale", "2"], "--rate-scale=2: every request of this workload arrives "
     "at 0 s: there is no rate to scale; give --request-rate"),
    ("plan", ["--num-prompts", "10", "--search-rate"], "--search-rate: every request of this workload arrives at "
     "0 s: there is no rate to scale; give --request-rate"),
    ("plan", ["--limit", "50", "--rate-scale", "1e-400"], "--rate-scale=1e-400: puts request 1's arrival at "
     "4.31458e+400 s, past 1e+15 s (MAX_ARRIVAL_S): give a larger one"),
])
def test_a_rate_scale_with_no_rate_to_scale_is_refused_in_one_line(command: str, flags: list[str], message: str,
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """Each refusal names the flag as typed and says why (the break-it list of stop 30: a factor past a float's
    range raised OverflowError; a trace of one arrival time was served unchanged; plan named --request-rate='inf',
    a flag never given)."""
    same = tmp_path / "same.csv"
    same.write_text("arrival_s,prompt_tokens,output_tokens\n5,10,3\n5,12,2\n")
    flags = [str(same) if f == "SAME" else f for f in flags]
    extra = ["--slo-tpot", "20", "-tp", "1"] if command == "plan" else []
    assert main([command, *flags, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_multi_turn_workload_without_a_rate_is_scaled_by_its_turn_gaps(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """Conversations of 3 turns 10 s apart, all first turns at t = 0, have a rate to scale (the turns' gaps): at
    --rate-scale 2 they arrive 0, 5 and 10 s, the header says so, and plan takes the same workload (it refused
    it, naming --request-rate='inf')."""
    base = ["--num-prompts", "2", "--num-turns", "3", "--random-input-len", "64", "--random-output-len", "8"]
    assert main(["simulate", *base, "--rate-scale", "2", "--policy", "continuous", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["rate_scale"] == 2.0 and data["results"][0]["summary"]["requests"] == 6
    assert main(["simulate", *base, "--rate-scale", "2", "--policy", "continuous", "--out", str(tmp_path)]) == 0
    head = " ".join(capsys.readouterr().out.split())
    assert "3 turns each, 10 s apart; seed 0), served at 2x its rate: every arrival / 2 (arrivals over 10.0 s)" in head
    rows = (tmp_path / "continuous-requests.csv").read_text().splitlines()[1:]
    assert sorted(float(row.split(",")[1]) for row in rows) == [0.0, 0.0, 5.0, 5.0, 10.0, 10.0]
    assert main(["plan", *base, "--rate-scale", "2", "--slo-tpot", "50", "-tp", "1", "--max-num-seqs", "16"]) == 0
    assert "6 requests at 2x their rate" in " ".join(capsys.readouterr().out.split())
