"""Nothing the user gave is lost: outputs checked before work, never over an input, written atomically.

Also the command line's completeness: ``--json`` on every command, ``--steps`` for per-step
tables, options that cancel each other refused, install hints that work from a clone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from _text import unwrapped

from roofline import cli
from roofline._io import atomic_write, check_outputs, check_own_csv, output_path, same_file
from roofline.cli import main
from roofline.errors import InvalidValueError, MissingExtraError

TRACE = "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,20,3\n0.2,7,4\n"
CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "bfloat16"}


def _snapshot(*paths: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in paths}


def _one_line_error(capsys: pytest.CaptureFixture, *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# --------------------------------------------------------------------------- the shared helpers


def test_atomic_write_replaces_the_file_only_on_success(tmp_path: Path) -> None:
    """A write that raises leaves the old bytes and no temporary file; a clean one replaces them."""
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write("half of the new")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    with atomic_write(target) as fh:
        fh.write("new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_atomic_write_keeps_the_old_mode_and_gives_new_files_the_umask_mode(tmp_path: Path) -> None:
    """A replaced file keeps its permission bits; a new one gets 0o666 less the umask (not mkstemp's 0o600)."""
    old = tmp_path / "old.json"
    old.write_text("{}")
    old.chmod(0o640)
    with atomic_write(old) as fh:
        fh.write("[]")
    assert old.stat().st_mode & 0o777 == 0o640
    mask = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "new.png", binary=True) as fh:
            fh.write(b"\x89PNG")
    finally:
        os.umask(mask)
    assert (tmp_path / "new.png").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "new.png").read_bytes() == b"\x89PNG"


def test_same_file_sees_links_and_relative_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hard link, a symbolic link and ./name are the same file; a missing sibling is not."""
    f = tmp_path / "trace.csv"
    f.write_text(TRACE)
    os.link(f, tmp_path / "hard.csv")
    (tmp_path / "soft.csv").symlink_to(f)
    monkeypatch.chdir(tmp_path)
    assert same_file("hard.csv", f) and same_file("soft.csv", f) and same_file("./trace.csv", str(f))
    assert not same_file("other.csv", f)
    assert same_file("sub/../missing.csv", "missing.csv")  # neither exists: resolved paths compared


def test_check_outputs_and_empty_output_paths_are_refused_by_name(tmp_path: Path) -> None:
    """An output equal to an input names the option, the output and the input; an empty path is refused."""
    f = tmp_path / "cfg.json"
    f.write_text("{}")
    with pytest.raises(InvalidValueError, match=r"--out=.*cfg\.json.*would write over .*cfg\.json"):
        check_outputs("--out", [tmp_path / "x.json", f], [None, str(f)])
    check_outputs("--out", [tmp_path / "x.json"], [None, str(f)])  # no clash: no error
    for empty in ("", "  "):
        with pytest.raises(InvalidValueError, match="is empty"):
            output_path("--out", empty)


# --------------------------------------------------------------------------- simulate


@pytest.mark.parametrize("name", ["serial-requests.csv", "continuous-steps.csv", "static-requests.csv"])
def test_simulate_out_refuses_to_write_over_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                      name: str) -> None:
    """A trace inside --out DIR with an output's name: exit 2 naming it, before any work; the trace is unchanged."""
    trace = tmp_path / name
    trace.write_text(TRACE)
    before = _snapshot(trace)
    assert main(["simulate", "--trace", str(trace), "--out", str(tmp_path)]) == 2
    _one_line_error(capsys, f"--out='{trace}'", "would write over", name)
    assert _snapshot(trace) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_simulate_out_refuses_to_write_over_the_config(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A config.json named like an output of --out DIR is refused; nothing is written."""
    trace, cfg = tmp_path / "t.csv", tmp_path / "out" / "serial-requests.csv"
    cfg.parent.mkdir()
    trace.write_text(TRACE)
    cfg.write_text(json.dumps(CONFIG))
    before = _snapshot(trace, cfg)
    assert main(["simulate", "--trace", str(trace), "--model", str(cfg), "--out", str(cfg.parent)]) == 2
    _one_line_error(capsys, "would write over", "serial-requests.csv")
    assert _snapshot(trace, cfg) == before


def test_check_own_csv_writes_only_over_a_file_whose_line_1_is_its_header(tmp_path: Path) -> None:
    """The one line-1 check of an existing output: missing, empty or the command's header (LF or CRLF): written;
    anything else refused by the option, naming the file."""
    f = tmp_path / "x.csv"
    check_own_csv("--out", f, ("a", "b"), "a test CSV")  # missing
    for text in ("", "a,b\n1,2\n", "a,b\r\n", "a,b"):
        f.write_bytes(text.encode())
        check_own_csv("--out", f, ("a", "b"), "a test CSV")
    for text in ("notes\n", "a,b,c\n", "b,a\n", "\na,b\n"):
        f.write_bytes(text.encode())
        with pytest.raises(InvalidValueError) as info:
            check_own_csv("--out", f, ("a", "b"), "a test CSV")
        assert info.value.field == "--out" and info.value.value == str(f)
        assert str(info.value) == f"--out='{f}': exists and is not a test CSV (line 1 differs): give another path, " \
                                  "or move the file"


@pytest.mark.parametrize(("name", "what"), [("continuous-requests.csv", "requests"),
                                            ("continuous-steps.csv", "steps")])
def test_simulate_out_refuses_to_write_over_a_file_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                    name: str, what: str) -> None:
    """Break-it finding 4: `echo notes > DIR/continuous-requests.csv` was replaced by --out DIR without a word; now
    exit 2, one line naming the file, before any work, the file unchanged; a table the command wrote is rewritten."""
    trace, out = tmp_path / "t.csv", tmp_path / "o"
    trace.write_text(TRACE)
    out.mkdir()
    (out / name).write_text("notes\n")
    assert main(["simulate", "--trace", str(trace), "--policy", "continuous", "--out", str(out), "--steps"]) == 2
    _one_line_error(capsys, f"--out='{out / name}': exists and is not a simulate {what} CSV (line 1 differs)")
    assert sorted(p.name for p in out.iterdir()) == [name] and (out / name).read_text() == "notes\n"
    (out / name).unlink()
    for _ in range(2):  # the second run writes over the first's tables
        assert main(["simulate", "--trace", str(trace), "--policy", "continuous", "--out", str(out), "--steps"]) == 0
    assert (out / "continuous-requests.csv").read_text().startswith("id,arrival_s,prompt_tokens,")
    assert (out / "continuous-steps.csv").read_text().startswith("index,kind,start_s,")


def test_simulate_inputs_are_byte_identical_after_a_run_into_their_folder(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """Trace and config inside the --out folder under other names are untouched; the outputs are written."""
    trace, cfg = tmp_path / "trace.csv", tmp_path / "config.json"
    trace.write_text(TRACE)
    cfg.write_text(json.dumps(CONFIG))
    before = _snapshot(trace, cfg)
    assert main(["simulate", "--trace", str(trace), "--model", str(cfg), "--out", str(tmp_path), "--steps"]) == 0
    assert _snapshot(trace, cfg) == before
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["config.json", "continuous-requests.csv", "continuous-steps.csv", "serial-requests.csv",
                     "serial-steps.csv", "static-requests.csv", "static-steps.csv", "trace.csv"]


def test_simulate_writes_step_tables_only_with_steps_and_says_how_much(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """Default --out: request tables only, one stderr line with the row count and an estimate within 10%."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i / 10},{20 + i},{5 + i % 7}\n"
                                                                         for i in range(300)))
    out = tmp_path / "o"
    assert main(["simulate", "--trace", str(trace), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["continuous-requests.csv", "serial-requests.csv",
                                                     "static-requests.csv"]
    assert err.count("\n") == 1 and "writing 3 files, 900 rows" in err and "(per-step tables: --steps)" in err
    written = sum(p.stat().st_size for p in out.iterdir())
    said = float(err.split("about ")[1].split(" kB")[0].replace(",", "")) * 1e3
    assert abs(said - written) <= 0.1 * written, (said, written)


def test_simulate_refuses_steps_without_out_empty_out_and_a_file_as_out(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """--steps without --out, --out '' and --out naming a file are each one line, exit 2."""
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    assert main(["simulate", "--trace", str(trace), "--steps"]) == 2
    _one_line_error(capsys, "--steps", "give --out DIR")
    assert main(["simulate", "--trace", str(trace), "--out", ""]) == 2
    _one_line_error(capsys, "--out=''", "is empty")
    assert main(["simulate", "--trace", str(trace), "--out", str(trace)]) == 2
    _one_line_error(capsys, "is a file, not a folder")
    assert trace.read_text() == TRACE


def test_simulate_refuses_utilization_with_kv_budget(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--kv-budget-gb replaces the budget --utilization gives, so giving both is refused; either alone runs."""
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    assert main(["simulate", "--trace", str(trace), "--utilization", "0.5", "--kv-budget-gb", "10"]) == 2
    _one_line_error(capsys, "--utilization=0.5", "--kv-budget-gb", "give one of them")
    assert main(["simulate", "--trace", str(trace), "--kv-budget-gb", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_pool"]["budget_bytes"] == 1e10
    assert main(["simulate", "--trace", str(trace), "--utilization", "0.9", "--json"]) == 0
    at_09 = json.loads(capsys.readouterr().out)["kv_pool"]["budget_bytes"]
    assert main(["simulate", "--trace", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_pool"]["budget_bytes"] == at_09  # the default is 0.9


# --------------------------------------------------------------------------- plot


def test_plot_refuses_to_write_over_the_config_and_empty_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A config named like a chart in --out is refused before matplotlib runs; --out '' is refused."""
    cfg = tmp_path / "throughput_vs_batch.svg"
    cfg.write_text(json.dumps(CONFIG))
    before = _snapshot(cfg)
    assert main(["plot", "--model", str(cfg), "--out", str(tmp_path), "--format", "svg"]) == 2
    _one_line_error(capsys, "would write over", "throughput_vs_batch.svg")
    assert _snapshot(cfg) == before and sorted(p.name for p in tmp_path.iterdir()) == [cfg.name]
    assert main(["plot", "--out", ""]) == 2
    _one_line_error(capsys, "--out=''", "is empty")


def test_plot_leaves_a_config_in_its_folder_byte_identical(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A config beside the charts is untouched; the charts use exact FLOPs by default (B* = 317, as report)."""
    pytest.importorskip("matplotlib")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIG))
    before = _snapshot(cfg)
    assert main(["plot", "--out", str(tmp_path), "--format", "svg", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["written"]) == 2
    assert _snapshot(cfg) == before
    assert main(["plot", "--out", str(tmp_path / "d"), "--format", "svg"]) == 0
    svg = (tmp_path / "d" / "throughput_vs_batch.svg").read_text(encoding="utf-8")
    assert "exact FLOPs" in svg and "B* = 317" in svg
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["throughput_vs_batch.svg",
                                                                  "useful_share_vs_spread.svg"]


# --------------------------------------------------------------------------- calibrate (refusals need no PyTorch)


def test_calibrate_refuses_to_write_over_its_config_before_measuring(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """--out naming the config (any spelling), a folder or a missing folder: exit 2 before PyTorch is looked for."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(CONFIG))
    before = _snapshot(cfg)
    for out in (str(cfg), str(tmp_path / "." / "cfg.json")):
        assert main(["calibrate", "--model", str(cfg), "--out", out]) == 2
        _one_line_error(capsys, "--out=", "would write over", "cfg.json")
    assert main(["calibrate", "--out", ""]) == 2
    _one_line_error(capsys, "--out=''", "is empty")
    assert main(["calibrate", "--out", str(tmp_path)]) == 2
    _one_line_error(capsys, "is a folder; name the JSON file")
    assert main(["calibrate", "--out", str(tmp_path / "missing" / "c.json")]) == 2
    _one_line_error(capsys, "its folder does not exist")
    assert _snapshot(cfg) == before


def _doc(bw: float, mm: list[float], dec: list[float]) -> dict:
    return {
        "bandwidth": {"method": "copy", "methods": {"copy": {"spread": bw}, "read": {"spread": 9.0}}},
        "matmul": {"shapes": [{"m": 64, "n": 64, "k": 8 * i + 8, "spread": s} for i, s in enumerate(mm)]},
        "decode": {"points": [{"batch": 2**i, "context": 128, "spread": s} for i, s in enumerate(dec)]},
    }


def test_calibrate_spread_limit_names_the_widest_measurement() -> None:
    """The widest spread of the reported bandwidth method, matmul shapes and decode points is checked."""
    from roofline.calibrate.run import MAX_SPREAD, check_spread, widest_spread

    assert MAX_SPREAD == 1
    doc = _doc(0.05, [0.1, 3.0], [0.2, 0.4])  # the unreported 'read' method's 9.0 does not count
    assert widest_spread(doc) == ("matmul 64x64x16", 3.0)
    with pytest.raises(InvalidValueError, match=r"matmul 64x64x16 spread 300% .* wider than the 100% limit"):
        check_spread(doc)
    check_spread(doc, 3.0)  # at the limit: accepted
    check_spread(_doc(0.05, [0.1], [1.0]))  # 100% is within the default limit
    with pytest.raises(InvalidValueError, match=r"--max-spread=0\.5: .*decode batch 2 context 128 spread 80%"):
        check_spread(_doc(0.05, [0.1], [0.2, 0.8]), 0.5, field="--max-spread")


# --------------------------------------------------------------------------- validate: CPU rows apart


def test_validate_keeps_cpu_rows_out_of_the_medians_and_says_why() -> None:
    """Two GPU rows (10%, 30%) and a CPU row (500%): the median is 20%, the CPU row is reported apart."""
    from roofline import get_accelerator, get_model
    from roofline.calibrate.compare import CPU_NOTE, Report, Row
    from roofline.calibrate.schema import Measurement
    from roofline.commands.validate import format_report

    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")

    def row(i: int, error: float, device_type: str) -> Row:
        m = Measurement(id=f"r{i}", group="g" if device_type == "gpu" else "cpu.json", model=model, spec=None,
                        measured_constants=acc, batch=1, context_sum=0, measured_s=0.01, metric="m", source="s",
                        device_type=device_type)
        return Row(measurement=m, predicted_spec_s=None, predicted_measured_s=0.01 * (1 + error), error_spec=None,
                   error_measured=error, bound_spec=None, bound_measured="memory")

    report = Report(rows=(row(0, 0.1, "gpu"), row(1, -0.3, "gpu"), row(2, 5.0, "cpu")))
    assert report.median_abs_error_measured == pytest.approx(0.2)
    assert [r.measurement.id for r in report.cpu_rows] == ["r2"]
    doc = report.to_dict()
    assert doc["median_abs_error"]["rows_measured"] == 2
    assert doc["cpu_rows"] == {"rows": 1, "median_abs_error_measured": 5.0, "note": CPU_NOTE}
    text = format_report(report)
    assert "measured constants 20.0% (2 rows)" in text
    assert "CPU rows: measured constants 500.0% (1 rows)" in text and "launch and Python overhead" in text


# --------------------------------------------------------------------------- report


def _report(capsys: pytest.CaptureFixture, *args: str) -> tuple[str, dict]:
    assert main(["report", *args]) == 0
    text = unwrapped(capsys.readouterr().out)
    assert main(["report", "--json", *args]) == 0
    return text, json.loads(capsys.readouterr().out)


def test_report_given_kv_budget_is_the_tables_kv_limit(capsys: pytest.CaptureFixture) -> None:
    """--kv-budget-gb 20: 20e9 / (63 blocks x 16 x 131,072 B) -> 151 sequences is the KV-limit row; 256 does not fit."""
    text, r = _report(capsys, "--kv-budget-gb", "20")
    # 20e9 B / (16 x 131,072 B) = 9,536.7 -> 9,536 blocks; a 1,000-token sequence takes 63: 151 sequences
    assert r["inputs"]["kv_limit"] == 151 and r["inputs"]["kv_limit_from"] == "given"
    assert [(row["batch"], row["kv_limit"], row["fits"]) for row in r["table"]] == [
        (1, False, True), (8, False, True), (64, False, True), (151, True, True), (256, False, False)]
    assert "151 with 16-token blocks; the table's KV limit)" in text
    assert "  (KV limit: the most sequences the --kv-budget-gb budget holds; no KV room: their KV does not fit " \
        "the --kv-budget-gb budget)" in text and "reserve 0) holds" not in text
    assert "     151 |" in text and text.split("     151 |")[1].split("\n")[0].endswith("memory KV limit")
    assert "457 with 16-token blocks\n" in text  # the upper bound no longer claims the KV limit


def test_report_default_kv_limit_is_the_upper_bound(capsys: pytest.CaptureFixture) -> None:
    """Without --kv-budget-gb the lesson's 53 GB is shown beside and the KV limit is the upper bound's 457."""
    text, r = _report(capsys)
    assert r["inputs"] == {"context": 1000, "batches": [1, 8, 64, 256], "kv_budget_bytes": 53e9,
                           "utilization": 0.9, "block_size": 16, "kv_limit_from": "upper_bound", "kv_limit": 457,
                           "table_flops": "exact"}
    assert "457 with 16-token blocks (the table's KV limit)" in text
    assert "(KV limit: the most sequences the upper-bound budget (reserve 0) holds)" in text


def test_report_bound_column_for_each_half_and_batch8_throughput_says_which(capsys: pytest.CaptureFixture) -> None:
    """At batch 457 the weights-only step is compute-bound (6.933 ms > 4.794 ms) while the KV step is memory-bound."""
    text, r = _report(capsys)
    last = r["table"][-1]
    assert last["batch"] == 457 and last["weights_only"]["bound"] == "compute" and last["with_kv"]["bound"] == "memory"
    row = "     457 |    6.933 ms    65,919   427.1  compute |   22.675 ms    20,155    93.5  memory KV limit"
    assert row in text
    # 8 / 4.794 ms = 1669 tokens/s weights only; 8 / 5.107 ms = 1566 with KV at 1,000 tokens, vs 1 / 4.833 ms = 207
    assert ("throughput                1,669 tokens/s vs 209 at batch 1 (8.00x), weights only; "
            "with KV at 1,000 tokens 1,566 vs 207 (7.57x)") in text


def test_report_counts_carry_thousands_separators(capsys: pytest.CaptureFixture) -> None:
    """tokens/s and sequence counts read like the report's other counts (404,357 tokens): 13,350 tokens/s at batch 64
    (64 / 4.794 ms), 1,037 sequences for Llama 3.1 8B at T = 2 in fit, 5,555 tokens/s in the estimate table."""
    text, _ = _report(capsys)
    row = "      64 |    4.794 ms    13,350    59.8  memory  |    7.298 ms     8,769    40.7  memory"
    assert row in text
    assert "(tokens 404,357; 401 with 16-token blocks)" in text
    assert cli.main(["report", "--estimate", "vllm"]) == 0
    assert "      64 |        7.298 ms |          11.521 ms      5,555  memory" in capsys.readouterr().out
    # context 100: 60,475,794,718.72 B / (100 x 131,072 B) = 4,613.9 sequences; 16-token blocks: 7 per sequence,
    # floor(60,475,794,718.72 / (16 x 131,072)) = 28,837 blocks -> 4,119 sequences, the table's last row
    assert cli.main(["report", "--context", "100", "--batch", "1"]) == 0
    text = capsys.readouterr().out
    assert "  fits                      4,613 sequences of 100 tokens (token-level); 4,119 with 16-token blocks" in text
    assert "   4,119 |   62.486 ms    65,919 3,849.4  compute |" in text
    assert cli.main(["fit"]) == 0
    text = capsys.readouterr().out
    assert "     65,536  1,037\n" in text and "|    1,037    43,264   21,632  L1\n" in text and "  L1: NVLink" in text


# --------------------------------------------------------------------------- the command line as a whole


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_has_json() -> None:
    """Every subcommand, models and accelerators included, takes --json."""
    subs = _subparsers()
    assert {"report", "simulate", "calibrate", "validate", "prove", "plot", "models", "accelerators"} <= set(subs)
    for name, sub in subs.items():
        assert "--json" in sub._option_string_actions, name


def test_every_output_option_refuses_an_empty_path(capsys: pytest.CaptureFixture) -> None:
    """Every command with --out refuses --out '' (not taken as the current folder)."""
    with_out = [name for name, sub in _subparsers().items() if "--out" in sub._option_string_actions]
    assert set(with_out) == {"simulate", "calibrate", "plot", "plan"}
    for name in with_out:
        assert main([name, "--out", ""]) == 2, name
        _one_line_error(capsys, "--out=''", "is empty")


def test_install_hints_work_from_a_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without matplotlib or PyTorch the hint gives the registry line and the clone's editable line."""
    from roofline import plotting
    from roofline.calibrate.device import import_torch

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError) as info:
        plotting._matplotlib()
    assert "pip install 'roofline[plot]'" in str(info.value) and "pip install -e '.[plot]'" in str(info.value)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError) as info2:
        import_torch()
    assert "pip install 'roofline[calibrate]'" in str(info2.value)
    assert "pip install -e '.[calibrate]'" in str(info2.value)


# --------------------------------------------------------------------------- calibrate runs (need PyTorch)

TINY = ["--device", "cpu", "--batches", "1", "--contexts", "8", "--repetitions", "3", "--warmup", "1",
        "--bandwidth-mib", "1", "--matmul", "32x32x32", "--quiet"]


@pytest.fixture(scope="module")
def torch_installed() -> None:
    """Skips, with the install line, when PyTorch (the calibrate extra) is not installed."""
    if os.environ.get("ROOFLINE_REQUIRE_TORCH") != "1":
        pytest.importorskip("torch", reason="PyTorch is not installed; pip install -e '.[calibrate]'")


def test_calibrate_json_and_config_left_byte_identical(torch_installed: None, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """--json prints the written path and the document; the config beside the output is unchanged."""
    cfg, out = tmp_path / "cfg.json", tmp_path / "cal.json"
    cfg.write_text(json.dumps(CONFIG))
    before = _snapshot(cfg)
    assert main(["calibrate", *TINY, "--model", str(cfg), "--out", str(out), "--json", "--max-spread", "1e6"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["written"] == str(out) and printed["calibration"] == json.loads(out.read_text())
    assert printed["calibration"]["decode"]["points"][0]["batch"] == 1
    assert _snapshot(cfg) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.json", "cfg.json"]


def test_calibrate_refuses_a_spread_above_the_limit_and_writes_nothing(torch_installed: None, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """With a limit no timing meets, the run ends with one line naming the spread and the limit, exit 2, no file."""
    out = tmp_path / "cal.json"
    out.write_text("old")
    assert main(["calibrate", *TINY, "--out", str(out), "--max-spread", "1e-12"]) == 2
    _one_line_error(capsys, "--max-spread=", "spread", "wider than the 1e-10% limit", "nothing was written")
    assert out.read_text() == "old"


# --------------------------------------------------------------------------- signals and a shared --out folder

_SIM_OUT = ["simulate", "--num-prompts", "4", "--random-input-len", "16", "--random-output-len", "4", "--steps"]


@pytest.mark.parametrize("phase", ["run", "requests table", "steps table"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_simulate_with_one_line_and_no_partial_file(phase: str, signum: int, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """SIGINT or SIGTERM while simulate runs or writes --out: one line ("SIGTERM: stopped"), status 128 + the
    signal (130, 143), no traceback, and no file half-written or hidden temporary file left in the folder."""
    from roofline.commands import simulate
    from roofline.sim import results

    def kill_then(original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if phase != "run":
                args[-1].write("id,partial\n")  # a first line reaches the temporary file
            os.kill(os.getpid(), signum)
            return original(*args, **kwargs)
        return call

    target = {"run": (simulate, "build_workload"), "requests table": (results.SimResult, "write_requests_csv"),
              "steps table": (results.StepTable, "write_csv")}[phase]
    out = tmp_path / "out"
    with mock.patch.object(*target, kill_then(getattr(*target))):
        status = main([*_SIM_OUT, "--out", str(out)])
    assert status == 128 + signum
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"roofline simulate: {signal.Signals(signum).name}: stopped; no output file was left half-written"
    assert len(err) == (1 if phase == "run" else 2)  # the run phase writes nothing; the others said what they write
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert not [name for name in left if name.startswith(".")], left
    for name in left:  # what was written before the signal is whole (a header and four rows)
        assert len((out / name).read_text().splitlines()) == 5, name
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back


@pytest.mark.parametrize("command", [
    [*_SIM_OUT, "--out", "{out}"],
    ["plot", "--out", "{out}", "--format", "svg", "--max-batch", "16"],
])
def test_a_folder_another_run_is_writing_is_refused(command: list[str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs writing one --out folder would mix their files: while one holds the folder, the other exits 2
    naming --out; once it is free, the same command writes."""
    import fcntl

    out = tmp_path / "shared"
    out.mkdir()
    argv = [str(out) if a == "{out}" else a for a in command]
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the other run, writing now
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out='{out}': another run is writing into this folder now" in err
        assert list(out.iterdir()) == []
    finally:
        os.close(fd)
    assert main(argv) == 0
    assert list(out.iterdir())
