"""Output that fits a terminal: help without raw markup, within 100 columns; an unknown flag points to its
subcommand's help; default listings within 100 columns."""

from __future__ import annotations

import argparse

import pytest

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
