"""The command line as a whole: presets, --json everywhere, one-line errors, plain help texts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from roofline.cli import main


def test_models_lists_every_preset_with_its_facts(capsys: pytest.CaptureFixture[str]) -> None:
    """`roofline models --json` gives Llama 3.1 8B's 8,030,261,248 parameters and 131,072 KV bytes per token."""
    assert main(["models", "--json"]) == 0
    facts = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert facts["llama-3.1-8b"]["parameters"] == 8_030_261_248
    assert facts["llama-3.1-8b"]["kv_bytes_per_token"] == 131_072
    assert "meta-llama/Llama-3.1-8B" in facts["llama-3.1-8b"]["source"]


def test_models_text_shows_each_preset_once(capsys: pytest.CaptureFixture[str]) -> None:
    """The text listing has a line per preset with its parameter count."""
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "8,030,261,248" in out and "70,553,706,496" in out


def test_models_columns_stay_aligned_with_mixed_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    """A long dtype (deepseek-v3's fp8/bfloat16, gpt-oss-120b's mxfp4/bfloat16) no longer pushes the columns after
    it: every line's layers and KV/token columns end where the header's do; every line within 100 columns."""
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], [x for x in lines[1:] if x.endswith(" KiB")]
    assert len(rows) >= 20 and all(len(x) <= 100 for x in lines)
    layers_end = header.index("layers") + len("layers")
    kv_end = header.index("KV/token") + len("KV/token")
    for row in rows:
        assert row[layers_end - 1] != " " and row[layers_end] == " ", row
        assert row[kv_end - 3: kv_end] == "KiB" and len(row) == kv_end, row
    deepseek = next(x for x in rows if x.startswith("deepseek-v3 "))
    assert deepseek.split()[1:7] == ["671,026,419,200", "673.15", "GB", "fp8/bfloat16", "61", "128/128"]


def test_models_verbose_gives_each_hugging_face_id_and_source(capsys: pytest.CaptureFixture[str]) -> None:
    """--verbose adds a line per preset with the Hugging Face ids that name it and its source; --json has
    ``hf_ids``."""
    assert main(["models", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert ("    Hugging Face: meta-llama/llama-3.1-8b, meta-llama/llama-3.1-8b-instruct; source: "
            "meta-llama/Llama-3.1-8B config.json (model card)") in out
    assert main(["models", "--json"]) == 0
    facts = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert "qwen/qwen3-30b-a3b" in facts["qwen3-30b-a3b"]["hf_ids"]


def test_accelerators_list_aliases_and_keep_sources_behind_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    """The default listing fits 100 columns and names the aliases (h100, a100); --verbose adds every source."""
    assert main(["accelerators"]) == 0
    short = capsys.readouterr().out
    assert "  h100-sxm   h100, h100-sxm-80gb, h100-sxm5" in short and "  a100-80gb  a100, a100-80" in short
    assert "Sources (kind" not in short and len(short.splitlines()) < 40
    assert all(len(x) <= 100 for x in short.splitlines())
    assert main(["accelerators", "--verbose"]) == 0
    long = capsys.readouterr().out
    assert "Sources (kind: citation, date):" in long and long.startswith(short.split("Every value")[0])
    assert main(["accelerators", "--json"]) == 0
    facts = {a["key"]: a for a in json.loads(capsys.readouterr().out)}
    assert facts["h100-sxm"]["aliases"] == ["h100", "h100-sxm-80gb", "h100-sxm5"] and facts["gb200"]["aliases"] == []


def test_accelerators_gives_values_and_sources(capsys: pytest.CaptureFixture[str]) -> None:
    """`roofline accelerators --json`: H100 SXM at 3.35 TB/s, 989.4 TFLOP/s dense BF16, ridge 295.3, sourced."""
    assert main(["accelerators", "--json"]) == 0
    facts = {a["key"]: a for a in json.loads(capsys.readouterr().out)}
    h100 = facts["h100-sxm"]
    assert h100["bandwidth_bytes_per_s"] == 3.35e12 and h100["peak_bf16_flops"] == 989.4e12
    assert round(h100["ridge_point_flop_per_byte"], 1) == 295.3
    assert h100["sources"]["hbm_bandwidth"]["kind"] == "datasheet"


def test_prove_refuses_an_unknown_name_even_with_list(capsys: pytest.CaptureFixture[str]) -> None:
    """`prove --list p99` is an error (exit 2, one line naming p99), not a listing of everything."""
    assert main(["prove", "--list", "p99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "p99" in err


def test_prove_list_json_names_the_claims(capsys: pytest.CaptureFixture[str]) -> None:
    """`prove --list p01 --json` gives just that proof and its claim."""
    assert main(["prove", "--list", "p01", "--json"]) == 0
    claims = json.loads(capsys.readouterr().out)
    assert list(claims) == ["p01_one_request"] and "weights" in claims["p01_one_request"]


@pytest.mark.parametrize("value", ["١٢", "１２", "12\u0663"])
def test_numbers_must_be_ascii(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Arabic-Indic or full-width digits are refused (Python's int() would read them as 12)."""
    with pytest.raises(SystemExit) as exc:
        main(["report", "--context", value])
    assert exc.value.code == 2
    assert "ASCII" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "simulate", "prove", "plot", "models", "accelerators",
                                     "calibrate", "validate"])
def test_help_texts_show_no_raw_markup(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every --help is plain text: no ``literal`` or :role:`x` markup."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and ":mod:" not in out and ":func:" not in out and ":class:" not in out


def test_output_to_a_full_device_is_one_line_and_status_2() -> None:
    """`roofline models > /dev/full` prints one error line and exits 2 (1 is a failed check), no traceback."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "roofline", "models"], stdout=full, stderr=subprocess.PIPE,
                              text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "No space left on device" in proc.stderr


def test_a_flag_is_taken_only_as_spelled_in_full_and_trace_names_like_every_name(capsys) -> None:
    """`--max-num-seq 4` was run as --max-num-seqs (argparse's prefix matching): now an unknown flag, exit 2; a shipped
    trace's name is read as every name (`--trace CONV` is conv); a name that is neither a file nor a shipped trace is
    refused listing them; a broken --speculative-config is reported before the missing --acceptance-rate."""
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--max-num-seq", "4", "--limit", "3"])
    assert exc.value.code == 2 and "unrecognized arguments: --max-num-seq 4" in capsys.readouterr().err
    assert main(["simulate", "--trace", "CONV", "--limit", "3", "--policy", "serial", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["path"].endswith("azure_llm_2023_conv.csv.gz")
    assert main(["simulate", "--trace", "conversation"]) == 2
    err = capsys.readouterr().err
    assert "--trace='conversation': is neither a file nor a shipped trace (conv, code" in err
    assert len(err.splitlines()) == 1
    assert main(["report", "--speculative-config", '{"model": "llama-3.2-1b"']) == 2
    assert "is not JSON" in capsys.readouterr().err
