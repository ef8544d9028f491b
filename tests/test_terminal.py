"""Output that fits a terminal: help without raw markup, within 100 columns; an unknown flag points to its
subcommand's help; default listings within 100 columns."""

from __future__ import annotations

import argparse

import pytest
from _text import unwrapped

from roofline.cli import build_parser, main

_SUB = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
COMMANDS = sorted(_SUB.choices)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_raw_markup_and_fits_100_columns(command, capsys):
    """Every subcommand's --help: no reST roles, literals or '::' blocks; no line over 100 columns."""
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and ":func:" not in text and ":mod:" not in text and ":class:" not in text
    assert not any(line.rstrip().endswith("::") for line in text.splitlines())
    assert [line for line in text.splitlines() if len(line) > 100] == []


def test_simulate_help_shows_its_examples_as_shell_lines(capsys):
    """The examples keep their shell continuations (a backslash at the line's end), not one joined line."""
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "Examples:\n" in text and "--random-input-len 512 \\\n        --random-output-len 128" in text


@pytest.mark.parametrize("argv, prog", [(["report", "--foo"], "roofline report"),
                                        (["simulate", "--limit", "3", "--bar", "x"], "roofline simulate"),
                                        (["--foo"], "roofline")])
def test_an_unknown_flag_points_to_its_subcommands_help(argv, prog, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err == f"{prog}: error: unrecognized arguments: {' '.join(argv[-2:] if 'x' in argv else argv[-1:])} " \
                  f"(see {prog} --help)\n"


@pytest.mark.parametrize("argv", [
    ["report"], ["report", "--input-len", "2000", "--output-len", "500", "--batch", "16", "--estimate", "vllm"],
    ["report", "--model", "qwen3-30b-a3b"], ["report", "--model", "llama-3.1-70b", "--tp", "4"],
    ["report", "--model", "gemma-3-27b", "--context", "32768"], ["models"], ["accelerators"],
    ["fit"], ["fit", "--model", "deepseek-v3", "--accelerator", "h200"]])
def test_default_text_fits_100_columns(argv, capsys):
    """The default text of report (MoE, tensor-parallel, windowed and estimate variants too), fit, models and
    accelerators: no line over 100 columns (long derivations wrap, their continuations indented); prove's is
    tests/test_proofs.py's, validate's (all but its table's rows) tests/test_validate.py's."""
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 10 and [x for x in lines if len(x) > 100] == []


@pytest.mark.parametrize("model", ["llama-3.1-70b", "deepseek-v3", "qwen3-next-80b-a3b", "gemma-3-27b"])
@pytest.mark.parametrize("extra", [[], ["--estimate", "vllm"], ["--input-len", "2000", "--output-len", "500"]])
def test_report_notices_fit_100_columns(model, extra, capsys):
    """report's notices wrap too: a model that needs T > 1 (llama-3.1-70b and qwen3-next on an H100: T = 2 and 4;
    deepseek-v3 on an H200: T = 8) opens with the auto-T notice, wrapped like every other line."""
    acc = ["--accelerator", "h200-sxm"] if model == "deepseek-v3" else []
    assert main(["report", "--model", model, *acc, *extra]) == 0
    out = capsys.readouterr().out
    assert [x for x in out.splitlines() if len(x) > 100] == []
    chosen = {"llama-3.1-70b": 2, "deepseek-v3": 8, "qwen3-next-80b-a3b": 4}.get(model)
    notice = out.split("\n\n")[0].replace("\n    ", " ")
    assert notice.endswith(f"the report below is for --tensor-parallel-size {chosen}") if chosen else \
        "does not fit one" not in notice


def test_validate_default_text_fits_100_columns_and_verbose_cites_every_source(capsys):
    """validate's default text, its tables and serving section included, keeps within 100 columns and leaves the
    citations to --verbose, which prints every source (published points, serving points, constants, profiles)
    once, by the key the tables show."""
    from roofline.calibrate.compare import default_measurements
    from roofline.calibrate.fit import validate_with_estimates
    from roofline.calibrate.serving import validate_serving
    from roofline.hardware import get_accelerator

    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert [x for x in out.splitlines() if len(x) > 100] == []
    report = validate_with_estimates(default_measurements())
    serving = validate_serving()
    cited = {r.measurement.source for r in report.rows} | {
        f"{r.point.source['citation']}, {r.point.source['url']} ({r.point.source['date']})" for r in serving}
    devices = [acc for r in report.rows for acc in (r.measurement.spec, r.measurement.measured_constants)]
    constants = {c.source.citation for acc in devices if acc is not None for c in (acc.hbm_bandwidth, acc.peak_bf16)}
    profiles = {v.source.citation for p in report.profiles for v in p.sources().values()}
    # 22 step-level and early serving sources, + LMDeploy's A100 page, TensorRT-LLM's v0.6.1 and v0.5 tables,
    # Oracle's MI300X post, SGLang's v0.3.0 README and four gpt-fast README rows' citations as serving sources,
    # + SGLang's step-level issue #1008 and pull request #1401
    assert len(cited) == 33 and len(constants) >= 6 and profiles
    for text in cited | constants:
        assert text not in out
    assert "roofline validate --verbose prints each one's source" in unwrapped(out)
    assert "sources, statistics and quotes: roofline validate --verbose" in out
    assert main(["validate", "--verbose"]) == 0
    long = capsys.readouterr().out
    listing = long.split("\nSources (each once; the tables name them by key):\n")[1].splitlines()
    keys = dict(line.split(None, 1) for line in listing)
    assert list(keys) == [f"S{i}" for i in range(1, len(keys) + 1)] and len(set(keys.values())) == len(keys)
    assert set(keys.values()) == cited | constants  # each source once, the constants' citations by key too
    for text in profiles:
        assert text in long
    by_key = {text: key for key, text in keys.items()}
    h200 = get_accelerator("h200-sxm")
    bw, peak = by_key[h200.hbm_bandwidth.source.citation], by_key[h200.peak_bf16.source.citation]
    assert f"  spec     h200-sxm: 4,800 GB/s [datasheet: {bw}], 989.4 TFLOP/s [datasheet: {peak}]\n" in long
    # a row's key in the table is its source's: the first gpt-fast row is S1, the three LMDeploy llama2-7b rows S8
    rows = {x.split()[0]: x.split()[-1] for x in out.split("\nThe rows")[1].split("\n\n")[0].splitlines()[3:]}
    assert keys[rows["gpt-fast-llama-2-7b-a100-330w"]].startswith("pytorch-labs/gpt-fast README.md, 'Benchmarks'")
    assert {rows[f"lmdeploy-llama-2-7b-b{b}-a100"] for b in (1, 16, 32)} == {"S8"}
    assert "'llama2-7b'" in keys["S8"]


def test_fit_width_leaves_short_lines_and_long_words_whole():
    """A line within the width keeps its aligning spaces; a longer one wraps at spaces, never inside a URL."""
    from roofline.errors import InvalidValueError
    from roofline.units import fit_width

    table = "  a    |    1,234 ms   memory"
    url = "https://github.com/vllm-project/vllm/pull/10511"
    assert fit_width(table, width=30) == table
    assert fit_width(f"  source {url} and more", width=30) == f"  source\n      {url}\n      and more"
    with pytest.raises(InvalidValueError, match="width"):
        fit_width("x", width=10)


def _readme_samples() -> list[tuple[str, str]]:
    """The README's command samples: each fenced block that opens with "$ roofline ...", as (command, shown)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    samples = []
    for block in text.split("```\n")[1::2]:
        if block.startswith("$ roofline "):
            command, _, shown = block.partition("\n")
            while command.endswith("\\"):  # a shell continuation
                more, _, shown = shown.partition("\n")
                command = command[:-1] + more
            samples.append((command[2:], shown))
    return samples


@pytest.mark.parametrize("command, shown", _readme_samples(), ids=[c.split(" --")[0] for c, _ in _readme_samples()])
def test_readme_samples_are_the_commands_output(command, shown, capsys):
    """Every command sample in the README is what the command prints now: each run of lines between "..."
    elisions appears, whole and in order, in the output."""
    import shlex

    assert main(shlex.split(command)[1:]) == 0
    out = capsys.readouterr().out
    parts = [p.strip("\n") for p in ("\n" + shown).split("\n...\n")]
    at = 0
    for part in parts:
        if part:
            at = out.index(part, at) + len(part)  # ValueError: the README shows what the command no longer prints
    assert len(_readme_samples()) >= 2


_GEN = ["--num-prompts", "40", "--request-rate", "4", "--random-input-len", "1000", "--random-output-len", "50"]
#: simulate's variants: every policy, chunked prefill, prefix caching on a shared prefix and on conversations,
#: goodput, closed loop, data-parallel replicas, pipeline stages, tensor parallel, disaggregated, an estimate,
#: a hybrid and a windowed model, the shipped trace (its first 200 requests), --out with --steps, --verbose,
#: speculative decoding with a draft model.
_SIMULATE = {
    "all policies": [*_GEN, "--chunked-prefill"],
    "prefix caching": [*_GEN, "--policy", "continuous", "--enable-prefix-caching", "--prefix-len", "2048",
                       "--num-prefixes", "3"],
    "conversations": [*_GEN, "--chunked-prefill", "--policy", "continuous", "--enable-prefix-caching",
                      "--num-turns", "3", "--turn-gap", "5"],
    "goodput": [*_GEN, "--slo-ttft", "100", "--slo-tpot", "20", "--slo-e2e", "2000"],
    "closed loop": ["--max-concurrency", "4", "--num-prompts", "20", "--think-time", "1"],
    "data parallel": [*_GEN, "--policy", "continuous", "--data-parallel-size", "2"],
    "pipeline": [*_GEN, "--policy", "continuous", "--pipeline-parallel-size", "2"],
    "tensor parallel": [*_GEN, "--model", "llama-3.1-70b", "--tensor-parallel-size", "4"],
    "disaggregated": [*_GEN, "--num-prefill-instances", "1", "--num-decode-instances", "2"],
    "estimate": [*_GEN, "--estimate", "vllm"],
    "hybrid": [*_GEN, "--model", "qwen3-next-80b-a3b", "--tensor-parallel-size", "4", "--policy", "continuous"],
    "windowed": [*_GEN, "--model", "gemma-3-27b", "--policy", "continuous"],
    "trace": ["--trace", "mooncake-conv", "--limit", "200", "--policy", "continuous", "--enable-prefix-caching"],
    "verbose": [*_GEN, "--verbose", "--policy", "static"],
    "speculative": [*_GEN, "--policy", "continuous", "--speculative-config",
                    '{"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}',
                    "--acceptance-rate", "0.7"],
}


@pytest.mark.parametrize("variant", sorted(_SIMULATE))
def test_simulate_text_fits_100_columns(variant, capsys, tmp_path):
    """Every variant of simulate's default text: no line over 100 columns; latencies in ms (the tables name the
    unit once, on the header's second line), counts with thousands separators."""
    argv = ["simulate", *_SIMULATE[variant]]
    if variant == "all policies":
        argv += ["--out", str(tmp_path), "--steps"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) > 8 and [x for x in lines if len(x) > 100] == []
    if variant != "disaggregated":
        header = next(i for i, x in enumerate(lines) if x.startswith("policy") and "TTFT p50" in x)
        assert lines[header + 1].split() == ["ms"] * 7
        assert " ms" not in "\n".join(lines[header + 2:header + 6])  # the unit is in the header, not the cells
    if variant == "verbose":
        assert "queue wait" in out and "p90" in out
    else:
        assert "queue wait and p90s: --verbose" in out or variant == "disaggregated"


def test_fit_names_each_link_by_a_key_listed_once(capsys):
    """fit's times table names a group's link by a key (L1...) listed once below it, the link of
    roofline.hardware's accelerator; a row that does not fit says why by a key listed below the sizes table."""
    from roofline.hardware import get_accelerator

    argv = ["fit", "--model", "llama-3.1-70b", "--accelerator", "h100-sxm", "--tp", "1", "2", "8", "-pp", "1"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.count(f"  L1: {get_accelerator('h100-sxm').link(8).name}") == 1
    rows = [x for x in lines if x.startswith(("   1 ", "   2 ", "   8 "))]
    assert [x.split()[-1] for x in rows[3:]] == ["-", "L1", "L1"]
    assert rows[0].endswith("(a)") and "  (a) the weights per GPU leave no KV budget" in lines
