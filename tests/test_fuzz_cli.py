"""The command line in-process (``roofline.cli.main(argv)``) under generated argv for every command:
exit status 0, or 2 with exactly one line on stderr naming an option or field and the value given;
never a traceback, another exception or a hang.

Options and their kinds are read from the parser itself, so a new option is fuzzed without a change
here. Runs stay small: simulate gets a tiny trace and ``--limit``, prove only lists (``--list``),
calibrate's measurement is replaced by a stub that records the plan it would have run, and every
output goes to a temporary folder.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import json
import math
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from roofline import cli

FUZZ = settings(settings.get_profile("fuzz"), deadline=timedelta(seconds=20))

PARSER = cli.build_parser()
_SUB = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
COMMANDS: dict[str, argparse.ArgumentParser] = dict(_SUB.choices)

#: Numbers as users and fuzzers type them: good small ones, and every bad form the parser must refuse.
_NUMBERS = ["0", "1", "2", "3", "8", "16", "0.5", "100", "-1", "-0.5", "1e3", "nan", "inf", "-inf", "1e400",
            "1e999999999", "1e-999999999", "\u0661\u0662", "\uff18", "", " ", "abc", "9" * 200, "9" * 20, "1/3",
            "0x10", "1_000", "1,000", "\x00", "--", "true", "None", "\u00b2", "1e15", "1000000000000000"]
_GOOD = ["1", "2", "3", "8", "0.5", "100"]
_TEXT = ["x", "", "\u0661", "../../etc/passwd", "a" * 500, "llama-3.1-8b", "h100-sxm", "vllm", "none", "\n"]


def _files(root: Path) -> dict[str, list[str]]:
    """Tiny good and bad input files, by the kind of option that reads them."""
    def w(name: str, text: str) -> str:
        (root / name).write_text(text, encoding="utf-8")
        return str(root / name)

    head = "arrival_s,prompt_tokens,output_tokens\n"
    traces = [
        w("good.csv", head + "0,12,3\n0.5,7,2\n1.25,30,4\n"),
        w("good.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n'
                        '{"arrival_s": 0.25, "prompt_tokens": 9, "output_tokens": 3}\n'),
        w("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,37,4\n"
                       "2023-11-16 18:15:47.0,39,10\n"),
        w("digits.csv", head + "0,\u0661\u0662,3\n"),
        w("dup.csv", "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,1,2,3\n"),
        w("huge.csv", head + "0," + "9" * 200_000 + ",3\n"),
        w("e400.jsonl", '{"arrival_s": 1e400, "prompt_tokens": 5, "output_tokens": 2}\n'),
        w("nested.jsonl", '{"arrival_s": 0, "x": ' + "[" * 5000 + "]" * 5000 + "}\n"),
        w("empty.csv", ""),
        str(root), "/nonexistent/trace.csv", "/dev/zero",
    ]
    preset = json.loads((Path(cli.__file__).parent / "data" / "models" / "llama-3.2-1b.json").read_text())
    configs = [
        w("config.json", json.dumps(preset)),
        w("dtype.json", json.dumps({**preset, "torch_dtype": ""})),
        w("type.json", json.dumps({**preset, "model_type": ["llama"]})),
        w("dupkey.json", json.dumps(preset)[:-1] + ', "hidden_size": 1}'),
        w("deep.json", json.dumps({**preset, "x": [[[[]]]]}).replace("[[[[]]]]", "[" * 100 + "]" * 100)),
        w("notjson.json", "{"), "/nonexistent/config.json",
    ]
    measurements = [w("m_empty.json", "{}"), w("m_bad.json", "[1e400]"), w("m_nan.json", '{"a": NaN}'),
                    "/nonexistent/m.json"]
    outs = [str(root / "out"), str(root / "out.json"), str(root / "sub" / "deeper"), "", "/nonexistent/dir/out"]
    return {"trace": traces, "model": configs, "measurements": measurements, "out": outs}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The tiny files every generated command line may name."""
    return _files(tmp_path_factory.mktemp("cli_inputs"))


def _values(dest: str, action: argparse.Action, files: dict[str, list[str]]) -> st.SearchStrategy[str]:
    """Strings for one option: its choices, files for file options, numbers and text for the rest."""
    junk = st.sampled_from(_GOOD) | st.sampled_from(_NUMBERS + _TEXT) | st.text(max_size=12)
    if action.choices:
        return st.sampled_from(sorted(map(str, action.choices))) | junk
    if dest in ("trace",):
        return st.sampled_from(files["trace"] + ["code"]) | junk
    if dest in ("model",):
        return st.sampled_from(files["model"] + ["llama-3.2-1b", "qwen3-0.6b", "opt-13b"]) | junk
    if dest in ("measurements",):
        return st.sampled_from(files["measurements"])
    if dest in ("out",):
        return st.sampled_from(files["out"])  # never the working tree
    return junk


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


#: Options each command always gets, so that a run stays small and writes only under tmp.
def _fixed(command: str, files: dict[str, list[str]]) -> list[str]:
    return {
        "simulate": ["--trace", files["trace"][0], "--limit", "3"],
        "prove": ["--list"],
        "plot": ["--out", files["out"][0], "--format", "svg", "--max-batch", "16"],
        "calibrate": ["--out", files["out"][1], "--device", "cpu"],
    }.get(command, [])


@st.composite
def _argv(draw: st.DrawFn, command: str, files: dict[str, list[str]]) -> list[str]:
    parser = COMMANDS[command]
    argv = [command, *_fixed(command, files)]
    options = _options(parser)
    for action in draw(st.lists(st.sampled_from(options), max_size=4)) if options else []:
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
            continue
        count = 2 if action.nargs in ("+", "*") and draw(st.booleans()) else 1
        argv.append(flag)
        argv.extend(draw(_values(action.dest, action, files)) for _ in range(count))
    if command == "prove":
        argv.extend(draw(st.lists(st.sampled_from(["p01", "p04_kv_cache", "p99", "", "p"]), max_size=2)))
    if draw(st.integers(0, 9)) == 0:  # sometimes a stray word or an unknown option
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(["--nope", "extra", "-x", "--"])))
    return argv


class _Measured(Exception):
    """Raised by the calibrate stub: the options were accepted and a measurement would have run."""


def _fake_calibration(plan: Any, **kwargs: Any) -> Any:
    for name in ("repetitions", "warmup", "bandwidth_bytes", "max_seconds"):
        value = getattr(plan, name, None)
        if value is not None:
            assert not isinstance(value, float) or math.isfinite(value), (name, value)
            assert value >= 0, (name, value)
    raise _Measured


#: The working folder of every in-process run: outputs named relative to it ("--out ''" is one) land
#: there, never in the working tree.
_CWD = Path(tempfile.mkdtemp(prefix="roofline-fuzz-cli-"))
atexit.register(shutil.rmtree, _CWD, ignore_errors=True)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(_CWD), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch("roofline.calibrate.run_calibration", _fake_calibration):
        try:
            status = cli.main(argv)
        except SystemExit as exc:  # argparse: a bad option (2) or --version (0)
            status = 0 if exc.code is None else int(exc.code)
        except _Measured:
            status = 0
    return status, out.getvalue(), err.getvalue()


def _names_something(line: str, argv: list[str]) -> bool:
    """The error line names an option, field or value the user gave (or the one missing)."""
    words = [a for a in argv if a] + ["field", "required", "unrecognized", "invalid choice", "argument", "="]
    return any(w in line for w in words)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@FUZZ
@given(data=st.data())
def test_generated_command_lines_exit_0_or_2_with_one_line(command: str, files: dict[str, list[str]],
                                                          data: st.DataObject) -> None:
    """Every generated command line of every command exits 0, or 2 with one stderr line naming what was
    wrong; never another exit status or exception (which would fail this test with its traceback)."""
    argv = data.draw(_argv(command, files), label="argv")
    status, out, err = _run(argv)
    note(f"status {status}; stderr {err!r}")
    assert status in (0, 2), (status, err)
    if status == 2:
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("roofline") and "error:" in lines[0], lines[0]
        assert _names_something(lines[0], argv), lines[0]
        assert "Traceback" not in err


@pytest.mark.parametrize(("argv", "words"), [
    (["simulate", "--trace", "{digits}", "--limit", "2"], ["prompt_tokens", "\u0661\u0662"]),
    (["simulate", "--trace", "{dup}", "--limit", "2"], ["prompt_tokens", "twice"]),
    (["simulate", "--trace", "{huge}", "--limit", "2"], ["huge.csv:2", "field limit"]),
    (["simulate", "--trace", "{e400}", "--limit", "2"], ["arrival_s", "1e400"]),
    (["simulate", "--trace", "{nested}", "--limit", "2"], ["nested.jsonl:1", "nested more than 64"]),
    (["report", "--model", "{dtype}"], ["torch_dtype", "''"]),
    (["report", "--model", "{dupkey}"], ["duplicate key 'hidden_size'"]),
    (["report", "--context", "1e999999999"], ["--context", "1e999999999"]),
    (["report", "--kv-budget-gb", "1e999999999"], ["--kv-budget-gb", "exponent"]),
    (["simulate", "--overhead", "\u0661", "--limit", "2"], ["--overhead", "ASCII"]),
    (["calibrate", "--repetitions", "\u0661\u0662"], ["--repetitions", "ASCII"]),
    (["calibrate", "--max-seconds", "nan"], ["--max-seconds", "nan"]),
    (["calibrate", "--batches", "\u0661,2"], ["--batches", "comma-separated integers"]),
    (["models", "a\nb"], ["a\\nb"]),
    (["report", "--model", "x\ry.json"], ["x\\ry.json"]),
])
def test_each_listed_fault_is_one_line_and_status_2(files: dict[str, list[str]], argv: list[str],
                                                    words: list[str]) -> None:
    """The issue's faults on the command line: one line on stderr naming the file or option and the value."""
    by_name = {Path(p).stem: p for p in files["trace"] + files["model"]}
    argv = [a.format(**by_name) if a.startswith("{") else a for a in argv]
    status, _, err = _run(argv)
    assert status == 2, err
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)


# --------------------------------------------------------------------------- simulate: no flag silently ignored

_SIM = COMMANDS["simulate"]
#: Options about where and how the output is written, not about the run.
_OUTPUT_FLAGS = {"json", "out", "steps", "float_mode", "verbose"}
#: Two valid values of every other simulate option (None: not given; "": a switch given). A new option
#: fails test_every_simulate_option_has_two_values until it is given its two values here.
_PAIRS: dict[str, tuple[str | None, str | None]] = {
    "trace": ("{good.csv}", "{good.jsonl}"), "format": ("csv", "jsonl"), "limit": ("1", "2"),
    "policy": ("static", "continuous"), "engine": ("auto", "step"), "batch_size": ("1", "2"),
    "max_wait": ("0", "0.5"), "max_num_seqs": ("1", "2"), "admission": ("reserve", "on-demand"),
    "max_prefill_tokens": ("8", "16"), "chunked_prefill": (None, ""), "max_num_batched_tokens": ("8", "16"),
    "max_model_len": ("20", "30"), "num_prompts": ("2", "3"), "request_rate": ("1", "2"),
    "burstiness": ("2", "4"), "max_concurrency": ("1", "2"), "think_time": ("0", "1"),
    "input_len": ("8", "9"), "output_len": ("3", "4"), "random_range_ratio": ("0.25", "0.5"),
    "input_len_dist": ("fixed", "uniform"), "output_len_dist": ("lognormal", "exponential"),
    "input_len_cap": ("16", "32"), "output_len_cap": ("16", "32"), "len_sigma": ("0.5", "1.5"), "seed": ("0", "1"),
    "slo_ttft": ("1", "2"), "slo_tpot": ("1", "2"), "slo_e2e": ("1", "2"), "block_size": ("1", "16"),
    "utilization": ("0.5", "0.9"), "kv_budget_gb": ("10", "20"), "overhead": ("0", "0.001"),
    "flops": ("exact", "2p"), "estimate": (None, "vllm"), "tensor_parallel_size": ("1", "2"),
    "model": ("llama-3.2-1b", "qwen3-0.6b"), "accelerator": ("h100-sxm", "a100-80gb"),
    "weight_dtype": ("bf16", "fp8"), "kv_dtype": ("bf16", "fp8"), "dtype": (None, "float16"),
    "quantization": (None, "fp8"), "enable_prefix_caching": (None, ""),
    "pipeline_parallel_size": ("1", "2"), "data_parallel_size": ("1", "2"),
    "router": ("round-robin", "least-requests"), "enable_expert_parallel": (None, ""),
    "num_prefill_instances": ("1", "2"), "num_decode_instances": ("1", "2"),
    "prefill_tensor_parallel_size": ("1", "2"), "decode_tensor_parallel_size": ("1", "2"),
    "prefill_accelerator": ("h100-sxm", "h200"), "decode_accelerator": ("h100-sxm", "h200"),
    "kv_transfer_bandwidth": ("10", "50"), "kv_transfer_latency": ("1", "5"),
    "speculative_config": (None, '{"method": "ngram", "num_speculative_tokens": 2}'),
    "acceptance_rate": ("0.5", "0.9"), "acceptance_mode": ("seeded", "expectation"), "speculative_seed": ("0", "1"),
    "prefix_len": ("0", "4"), "num_prefixes": ("1", "2"), "num_turns": ("1", "2"), "turn_gap": ("1", "2"),
    "rate_scale": ("2", "3"),
}
_SIM_OPTIONS = {a.dest: a for a in _options(_SIM) if a.dest not in _OUTPUT_FLAGS}
_SIM_FLAGS = [flag for a in _options(_SIM) for flag in a.option_strings]
#: The workloads a run may have: a trace file, generated arrivals, closed-loop clients (all tiny).
_MODES = {
    "trace": ["--trace", "{good.csv}"],
    "open": ["--num-prompts", "3", "--random-input-len", "8", "--random-output-len", "3"],
    "closed": ["--max-concurrency", "2", "--num-prompts", "3", "--random-input-len", "8", "--random-output-len", "3"],
}


def test_every_simulate_option_has_two_values() -> None:
    """Every option of simulate's parser (but the output ones) is in the generated flag-use test below."""
    assert set(_SIM_OPTIONS) == set(_PAIRS)


def _fill(text: str, by_name: dict[str, str]) -> str:
    """``{good.csv}`` as the path of that tiny file (JSON, as --speculative-config's, as it is)."""
    return by_name[text[1:-1]] if text.startswith("{") and not text.startswith('{"') else text


def _with(argv: list[str], dest: str, value: str | None, by_name: dict[str, str]) -> list[str]:
    if value is None:
        return argv
    flag = _SIM_OPTIONS[dest].option_strings[0]
    return [*argv, flag] if value == "" else [*argv, flag, _fill(value, by_name)]


@pytest.mark.parametrize("mode", sorted(_MODES))
@FUZZ
@given(data=st.data())
def test_a_simulate_flag_is_used_or_refused_by_name(mode: str, files: dict[str, list[str]],
                                                   data: st.DataObject) -> None:
    """Any combination of simulate's options, one of them run at two values: each run exits 2 with one line
    naming a flag (``--x=value:``) or the trace file and line, or both run and their JSON differ (the flag
    changed the run or is recorded in it). A flag the run does not use (--chunked-prefill with --policy
    serial, --limit or --format on a generated workload, --policy all with closed-loop clients) can only be
    refused: it changes nothing."""
    by_name = {Path(p).name: p for p in files["trace"]}
    base = [_fill(a, by_name) for a in ["simulate", *_MODES[mode], "--json"]]
    varied = data.draw(st.sampled_from(sorted(_PAIRS)), label="varied")
    others = sorted(set(_PAIRS) - {varied})
    for dest in data.draw(st.lists(st.sampled_from(others), max_size=3, unique=True), label="others"):
        base = _with(base, dest, _PAIRS[dest][data.draw(st.integers(0, 1))], by_name)
    outputs = []
    for value in _PAIRS[varied]:
        argv = _with(base, varied, value, by_name)
        status, out, err = _run(argv)
        note(f"{argv}: status {status}; stderr {err!r}")
        if status != 0:
            assert status == 2 and len(err.splitlines()) == 1, err
            named = [f"{flag}=" for flag in _SIM_FLAGS] + [f"{flag}:" for flag in _SIM_FLAGS]
            named += [f"{a}:" for a in argv if "/" in a]  # a bad row of a trace file read (--format jsonl on a CSV)
            assert any(n in err for n in named), err  # a flag (or the file), never a library field alone
            return
        outputs.append(out)
    assert outputs[0] != outputs[1], f"{varied} at {_PAIRS[varied]} changed nothing in {base}"


# --------------------------------------------------------------------------- one name rule

def _spelled(name: str) -> st.SearchStrategy[str]:
    """``name`` with its letters' case flipped at random and whitespace (space, tab, line break) around it."""
    space = st.text(alphabet=" \t\n\r", max_size=2)
    flips = st.lists(st.booleans(), min_size=len(name), max_size=len(name))
    return st.tuples(space, flips, space).map(
        lambda t: t[0] + "".join(c.upper() if up else c for c, up in zip(name, t[1], strict=True)) + t[2])


def _named() -> list[tuple[str, str, str]]:
    """(kind, canonical name, option) for every preset, engine profile and choice of every command."""
    import roofline
    from roofline.profiles import profile_names

    out = [("model", n, "--model") for n in roofline.model_names()]
    out += [("accelerator", n, "--accelerator") for n in roofline.accelerator_names()]
    out += [("profile", n, "--estimate") for n in profile_names()]
    for command, parser in sorted(COMMANDS.items()):
        for action in _options(parser):
            if action.choices and all(isinstance(c, str) for c in action.choices):
                out += [(command, str(c), action.option_strings[0]) for c in action.choices]
    return out


_NAMED = _named()


@FUZZ
@given(data=st.data())
def test_every_name_is_read_case_insensitively_after_stripping(data: st.DataObject) -> None:
    """Every preset, profile and choice name of every command, in any case and with surrounding whitespace,
    is the canonical name (docs/conventions.md, "Names"); whitespace inside a name is refused."""
    import roofline
    from roofline.profiles import get_engine_profile

    kind, name, option = data.draw(st.sampled_from(_NAMED), label="name")
    spelled = data.draw(_spelled(name), label="spelled")
    lookup = {"model": roofline.get_model, "accelerator": roofline.get_accelerator,
              "profile": get_engine_profile}.get(kind)
    if lookup is not None:
        assert lookup(spelled) == lookup(name)
        with pytest.raises(roofline.RooflineError):
            lookup(name[:1] + " " + name[1:])
        return
    args = PARSER.parse_args([kind, option, spelled, *(["--out", "x.json"] if kind == "calibrate" else [])])
    value = getattr(args, next(a.dest for a in _options(COMMANDS[kind]) if option in a.option_strings))
    want = PARSER.parse_args([kind, option, name, *(["--out", "x.json"] if kind == "calibrate" else [])])
    assert value == getattr(want, next(a.dest for a in _options(COMMANDS[kind]) if option in a.option_strings))
