"""`roofline report`: the lesson's numbers on the default, --json, options, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _text import unwrapped

from roofline.cli import main


def _json(capsys, *args):
    assert main(["report", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_default_report_text(capsys):
    """The default report prints the lesson's numbers with their derivations."""
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    for text in ("llama-3.1-8b", "H100 SXM", "16.06 GB", "4.794 ms", "16.23 us", "0.34 %", "295.3 FLOP/byte",
                 "296 [2P]", "none [2P]", "415 tokens [2P]", "393 tokens [exact]", "131,072 B",
                 "128 KiB", "404 sequences", "461 sequences", "memory KV limit", "[exact]", "[2P]",
                 "(KV limit: the most sequences the upper-bound budget (reserve 0) holds)"):
        assert text in out, text


def test_the_real_budget_subtracts_a_sourced_reserve_and_the_upper_bound_is_named(capsys):
    """Real budget = 79.2 GiB x 0.9 - 16.06 GB - 3.05 GiB (vLLM log) = 57.20 GB: 436 sequences, 432 in blocks."""
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    # 79.2 GiB x 0.9 = 76,536,317,214.72 B; - 16,060,522,496 B of weights = 60,475,794,718.72 B (the upper bound);
    # - 3.05 GiB = 3,274,912,563.2 B gives 57,200,882,155.52 B; / 131,072 B = 436,408.4 tokens -> 436 sequences
    # of 1,000; / (16 x 131,072) = 27,275.5 -> 27,275 blocks / 63 per sequence -> 432 sequences.
    assert "real budget               57.20 GB    = 79.2 GiB x 0.9 - weights - 3.05 GiB reserve" in out
    assert "436 sequences of 1,000 tokens (token-level); 432 with 16-token blocks" in out
    assert "reserve source        vLLM log, 2024-12-14: https://github.com/vllm-project/vllm/pull/10511" in out
    assert "upper bound, reserve 0    60.48 GB" in out and "461 sequences" in out
    r = _json(capsys)
    assert r["kv"]["real_budget"]["sequences"] == 436 and r["kv"]["real_budget"]["sequences_blocks"] == 432
    assert r["kv"]["real_budget"]["blocks"] == 27_275 and r["kv"]["real_budget"]["tokens"] == 436_408
    assert r["kv"]["reserve"]["bytes"] == 3_274_912_563.2 and r["kv"]["reserve"]["date"] == "2024-12-14"
    assert "non_torch_memory 1.79GiB; PyTorch activation peak memory 1.26GiB" in r["kv"]["reserve"]["citation"]


def test_no_published_reserve_means_no_real_budget_only_the_upper_bound(capsys):
    """OPT-13B on an A100 40GB: no engine log is known, so the real budget is not given; reserve 0 is."""
    assert main(["report", "--model", "opt-13b", "--accelerator", "a100-40gb"]) == 0
    out = capsys.readouterr().out
    assert "real budget           not given: no published engine log" in out
    assert "upper bound, reserve 0    12.46 GB" in out
    r = _json(capsys, "--model", "opt-13b", "--accelerator", "a100-40gb")
    assert r["kv"]["real_budget"] is None and r["kv"]["reserve"] is None
    assert r["kv"]["upper_bound_budget"]["sequences"] == 15


def test_default_report_json(capsys):
    """--json carries the same numbers, machine-readable, in SI units."""
    r = _json(capsys)
    assert r["weights"]["bytes"] == 16_060_522_496
    assert round(r["single"]["2p"]["step_time_s"] * 1e3, 3) == 4.794
    assert round(r["single"]["2p"]["compute_time_s"] * 1e6) == 16
    assert round(r["criticality"]["2p"]["ridge_point_flop_per_byte"], 1) == 295.3
    assert r["criticality"]["2p"]["critical_batch_weights_only"] == 296
    assert r["criticality"]["2p"]["critical_batch"] is None
    assert r["kv"]["kv_bytes_per_token"] == 131_072
    assert r["kv"]["given_budget"]["sequences"] == 404
    assert r["kv"]["real_budget"]["sequences"] == 436
    assert r["kv"]["upper_bound_budget"]["sequences"] == 461
    assert [row["batch"] for row in r["table"]] == [1, 8, 64, 256, 457]
    eight = r["eight"]["weights_only"]
    assert eight["step_time_s"] == r["single"]["exact"]["step_time_s"]
    assert round(eight["throughput_tokens_per_s"] / r["single"]["exact"]["throughput_tokens_per_s"], 6) == 8


def test_options(capsys, tmp_path):
    """Model path, accelerator, context, batches, budget and dtype options change the numbers."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                               "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "vocab_size": 128256, "torch_dtype": "bfloat16"}))
    r = _json(capsys, "--model", str(cfg), "--accelerator", "h200-sxm", "--context", "300", "--batch", "2", "4",
              "--kv-budget-gb", "10", "--weight-dtype", "fp8")
    assert r["weights"]["bytes"] == 8_030_261_248
    assert r["accelerator"]["bandwidth_bytes_per_s"] == 4.8e12
    assert r["criticality"]["exact"]["critical_batch"] is not None  # 300 tokens < c*
    assert r["kv"]["given_budget"]["sequences"] == 10**10 // 131_072 // 300
    assert [row["batch"] for row in r["table"]][:2] == [2, 4]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "llama-9"], "unknown model 'llama-9'"),
        (["--accelerator", "tpu"], "unknown accelerator 'tpu'"),
        (["--context", "-5"], "--context='-5'"),
        (["--batch", "0"], "--batch='0'"),
        (["--kv-budget-gb", "nan"], "--kv-budget-gb='nan'"),
        (["--utilization", "1.5"], "utilization"),
        (["--weight-dtype", "int3"], "weight_dtype='int3'"),
        (["--model", "/nonexistent/config.json"], "cannot read"),
        (["--model", "llama-2-13b", "--accelerator", "a100-40gb", "--weight-dtype", "float32", "--tp", "1"],
         "leave no KV budget on NVIDIA A100 SXM4 40GB at utilization 0.9; the smallest tensor-parallel size that fits "
         "is 2"),
    ],
)
def test_bad_input_one_line_exit_2(args, needle, capsys):
    """Bad input prints one line naming the field and value, and exits with status 2 (no traceback)."""
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(["report", *args]))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1


def test_console_script_runs():
    """The installed `roofline` entry point runs the report (as a user types it)."""
    out = subprocess.run([sys.executable, "-m", "roofline.cli", "report"], capture_output=True, text=True, check=True)
    assert "4.794 ms" in out.stdout


def test_import_does_not_import_sympy():
    """`import roofline` (and its fast paths) does not import SymPy."""
    code = "import roofline, roofline.formulas, roofline.estimate, sys; print('sympy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_api_bad_input_names_what_the_user_gave():
    """decode_step and criticality name the argument the user passed, with its value, as a RooflineError."""
    import numpy as np

    from roofline import RooflineError, get_accelerator, get_model
    from roofline.estimate import criticality, decode_step

    m, h = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    cases = [(dict(batch=8, context=-1), "context=-1"), (dict(batch=8, context="1000"), "context='1000'"),
             (dict(batch=None, context=1), "batch=None"), (dict(batch=1.5, context=1), "batch=1.5"),
             (dict(batch=np.array([1, 8]), context=1), "batch=")]
    for kwargs, needle in cases:
        with pytest.raises(RooflineError, match=needle.replace("[", r"\[")):
            decode_step(m, h, **kwargs)
    with pytest.raises(RooflineError, match="model="):
        decode_step("llama-3.1-8b", h, batch=1, context=1)
    with pytest.raises(RooflineError, match="accelerator="):
        decode_step(m, "h100", batch=1, context=1)
    with pytest.raises(RooflineError, match="context=1.5"):
        criticality(m, h, context=1.5)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["report", "--kv-budget-gb", "1e300"], "--kv-budget-gb='1e300': must be <="),
        (["report", "--context", "0"], "--context='0': must be >= 1"),
        (["plot", "--max-batch", "1000000000"], "--max-batch='1000000000': must be <="),
        (["simulate", "--trace", "x.csv", "--max-wait", "1e400"], "--max-wait='1e400': must be <="),
        (["report", "--model", "/dev/zero"], "not a regular file"),
        (["simulate", "--trace", "/dev/zero"], "not a regular file"),
    ],
)
def test_found_by_a_fresh_user_one_line_exit_2(args, needle, capsys):
    """Huge numbers, context 0 and device files are refused with one line and status 2 (no hang, no traceback)."""
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(args))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_not_utf8_config_and_no_command(tmp_path, capsys):
    """A config.json that is not UTF-8 is a one-line error; `roofline` alone says a command is required."""
    cfg = tmp_path / "config.json"
    cfg.write_bytes(b"\xff\xfe{}")
    assert main(["report", "--model", str(cfg)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err
    assert main([]) == 2
    assert capsys.readouterr().err == "roofline: error: a command is required (see roofline --help)\n"


def test_kv_budget_is_said_to_be_per_gpu_under_tensor_parallelism(capsys):
    """Llama 3.1 70B, --tp 4: the lesson's 53 GB is each GPU's budget, 212 GB for the group, and the text and both
    flags' help say so; 53e9 B / 81,920 B per token per GPU = 646,972 tokens -> 646 sequences of 1,000."""
    assert main(["report", "--model", "llama-3.1-70b", "--tp", "4"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert "  in a 53 GB budget per GPU      646 sequences of 1,000 tokens (tokens 646,972;" in out
    assert ("  (that budget is per GPU: 53 GB (the lesson's one-GPU figure) on each of the 4 GPUs, 212 GB for the "
            "group; each GPU holds its share of every sequence's KV)") in out
    assert main(["report", "--model", "llama-3.1-70b", "--tp", "4", "--kv-budget-gb", "30"]) == 0
    assert "30 GB (--kv-budget-gb) on each of the 4 GPUs, 120 GB for the group" in unwrapped(capsys.readouterr().out)
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    assert "  in a 53 GB budget           404 sequences" in out and "per GPU" not in out
    helps = {a.dest: a.help for a in _subparser("report")._actions}
    assert helps["kv_budget_gb"].endswith("; per GPU under --tensor-parallel-size T > 1, the lesson's 53 included")
    assert "; every KV budget (the lesson's 53 GB, --kv-budget-gb, the real one) is one GPU's (" in \
        helps["tensor_parallel_size"]


def _subparser(name: str):
    """The argparse parser of one command."""
    import argparse

    from roofline.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_labels_a_fresh_user_found_wrong_on_moe_windows_and_small_cards(capsys):
    """Mixtral's batch-1 step reads the shared weights and k experts (12.88 GB per GPU at T = 2), not its 46.70 GB;
    Gemma 3 27B's step with KV is W + 8 x kv_bytes(c), not 8 x c x k, and its token count is at full attention; the
    lesson's 53 GB on an A100 40GB (22.11 GB left after Llama 3.1 8B's weights) and --kv-budget-gb 1000 are said to
    exceed the card; the bandwidth line is not called HBM (the L40S has GDDR6)."""
    assert main(["report", "--model", "mixtral-8x7b"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert ("step time                 3.923 ms = weights read (shared + k experts per layer) / bandwidth = 12.88 GB "
            "/ 3.35 TB/s + all-reduce") in out
    assert "active per token 12,879,925,248 (embedding table included)" in out
    assert main(["report", "--model", "gemma-3-27b", "--context", "32768"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert "with KV at 32,768 tokens 23.577 ms (batch 1: 17.056 ms) = (W + 8 x KV per sequence) / bandwidth" in out
    assert "16 sequences of 32,768 tokens (full-attention tokens 104,350; 16 with 16-token blocks)" in out
    assert "more than this GPU has: 53 GB (the lesson's one-GPU figure) exceeds the 21.67 GB" in out
    assert main(["report", "--accelerator", "a100-40gb"]) == 0
    assert ("(more than this GPU has: 53 GB (the lesson's one-GPU figure) exceeds the 22.11 GB left after the "
            "weights even at reserve 0; the line above is a what-if)") in unwrapped(capsys.readouterr().out)
    assert main(["report", "--kv-budget-gb", "1000"]) == 0
    assert "1000 GB (--kv-budget-gb) exceeds the 60.48 GB" in capsys.readouterr().out
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    assert "more than this GPU has" not in out and "HBM" not in out
    assert main(["report", "--accelerator", "l40s"]) == 0
    assert "  memory bandwidth 0.864 TB/s" in capsys.readouterr().out


def test_estimate_help_names_every_shipped_profile_and_what_each_command_does():
    """--estimate's help listed four profiles (nim was missing) and told report and simulate users both verbs."""
    from roofline.calibrate.fit import profile_names
    from roofline.commands._args import ENGINE_PROFILES

    assert sorted(ENGINE_PROFILES) == profile_names()
    report_help = {a.dest: a.help for a in _subparser("report")._actions}["estimate"]
    simulate_help = {a.dest: a.help for a in _subparser("simulate")._actions}["estimate"]
    assert report_help.startswith("also print an engine profile's estimate beside the bound: vllm, gpt-fast, "
                                  "lmdeploy, trtllm, nim or sglang")
    assert simulate_help.startswith("price every step with an engine profile's estimate instead of the bound")


def test_no_kv_budget_is_said_in_gb_with_the_cards_that_fit(capsys):
    """DeepSeek-V3 (673.15 GB of FP8/BF16 weights) on H100: 79.2 GiB x 0.9 - 673.15 GB = -596.61 GB, said in GB (it
    printed 'budget=-596614264897.28'), with the presets where some T <= 8 fits; the API keeps field and value."""
    from roofline import get_accelerator, get_model
    from roofline.errors import NoKVBudgetError
    from roofline.estimate import kv_budget_for

    assert main(["report", "--model", "deepseek-v3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("roofline report: error: KV budget -596.61 GB: deepseek-v3 weights (673.15 GB) leave no KV "
                          "budget on NVIDIA H100 SXM5 80GB at utilization 0.9; no tensor-parallel size of 1, 2, 4, 8 "
                          "fits on one server of it")
    assert "it fits on b200 at T = 4, gb200 at T = 4, h20 at T = 8, h200-sxm at T = 8, mi300x at T = 4" in err
    with pytest.raises(NoKVBudgetError) as exc:
        kv_budget_for(get_model("deepseek-v3"), get_accelerator("h100-sxm"))
    assert exc.value.field == "budget" and round(exc.value.value / 1e9, 2) == -596.61
    assert isinstance(exc.value, ValueError)


def test_context_beyond_the_model_and_estimate_rows_keep_their_kv_marks(capsys):
    """--context 200000 on Llama 3.1 8B (131,072 positions) ran without a word; the --estimate table dropped the
    bound table's '(KV limit ...)' and '(KV does not fit)' marks (Gemma 3 27B: 42 sequences fit at reserve 0)."""
    assert main(["report", "--context", "200000"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert ("  (the context exceeds the model's max_position_embeddings, 131,072 tokens: an engine refuses it by "
            "default; the numbers are what such a context would cost)") in out
    assert _json(capsys, "--context", "200000")["model"]["max_position_embeddings"] == 131_072
    assert main(["report", "--model", "gemma-3-27b", "--estimate", "vllm"]) == 0
    estimate = capsys.readouterr().out.split("Estimate [estimate]")[1]
    assert "      42 |       22.493 ms |          32.696 ms      1,285  memory KV limit (beyond fit)\n" in estimate
    assert "     256 |       54.938 ms |          72.991 ms      3,507  memory no KV room (beyond fit)\n" in estimate
    assert ("  (KV limit: the most sequences the upper-bound budget (reserve 0) holds; no KV room: their KV does "
            "not fit the upper-bound budget (reserve 0))") in unwrapped(estimate)
    helps = {a.dest: a.help for a in _subparser("report")._actions}
    assert "one flat width for every weight, embeddings and lm_head included, no group scales" in helps["weight_dtype"]


def test_windowed_batch_8_line_names_the_windowed_kv(capsys):
    """Mistral 7B (4,096-token windows) at 8,000 tokens: the batch-8 step reads W + 8 x kv_bytes(8000), and its
    line says so (it said 8 x 8000 x k, the full-attention KV, 1.6x the bytes behind the number)."""
    from roofline import get_accelerator, get_model

    assert main(["report", "--model", "mistral-7b-v0.1", "--context", "8000"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("with KV at 8,000 tokens"))
    assert line.endswith("= (W + 8 x KV per sequence) / bandwidth") and "8 x 8000 x k" not in line
    m, a = get_model("mistral-7b-v0.1"), get_accelerator("h100-sxm")
    assert m.kv_bytes(8000) == 32 * 4096 * 131_072 // 32  # 4,096 tokens held in each of 32 layers
    step = (m.weight_bytes + 8 * m.kv_bytes(8000)) / a.bandwidth
    assert f"{float(step) * 1e3:.3f} ms" in line


def test_mla_under_tensor_parallelism_says_the_latent_is_replicated(capsys):
    """DeepSeek-V3 on 8 H200: the budget caveat said each GPU holds 'its share' of every sequence's KV, but MLA's
    latent is whole on every GPU; the group's 404.31 GB holds no more sequences than one GPU's 50.54 GB."""
    assert main(["report", "--model", "deepseek-v3", "--accelerator", "h200-sxm", "--tp", "8"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert ("KV budget of the group   404.31 GB (reserve 0; every GPU holds each sequence's whole latent, so the group "
            "holds no more sequences than one GPU)") in out
    assert "each GPU holds every sequence's whole MLA latent KV, replicated)" in out and "its share" not in out
    assert main(["report", "--model", "llama-3.1-70b", "--tp", "4"]) == 0
    assert "each GPU holds its share of every sequence's KV)" in unwrapped(capsys.readouterr().out)
