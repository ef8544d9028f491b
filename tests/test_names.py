"""Names users type: "did you mean" for a mistyped preset, vLLM's flags."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from roofline import UnknownPresetError, get_accelerator, get_model
from roofline.cli import main
from roofline.deployment import profile


@pytest.mark.parametrize("call, typed, meant", [
    (get_model, "llama-3.1-8bb", "llama-3.1-8b"), (get_model, "qwen3-30b-a3", "qwen3-30b-a3b"),
    (get_accelerator, "h10", "h100"), (get_accelerator, "h100-sxn", "h100-sxm"), (get_accelerator, "a10", "a100"),
    (profile, "vlm", "vllm"), (profile, "trt-llm", "trtllm")])
def test_a_mistyped_name_asks_did_you_mean(call, typed, meant):
    """difflib's closest known name (aliases included for accelerators) is offered, before the list."""
    with pytest.raises(UnknownPresetError) as err:
        call(typed)
    assert err.value.suggestion == meant and f"(did you mean {meant!r}?)" in str(err.value)


def test_a_name_like_nothing_gets_no_guess():
    with pytest.raises(UnknownPresetError) as err:
        get_model("zzzzzz")
    assert err.value.suggestion is None and "did you mean" not in str(err.value)


def test_a_hugging_face_id_no_preset_knows_gets_no_guess_among_preset_names(capsys):
    """An ORG/NAME no preset knows keeps the download advice (roofline.models.preset_for_hf_id), unguessed."""
    assert main(["report", "--model", "Qwen/Qwen3-9B"]) == 2
    err = capsys.readouterr().err
    assert "https://huggingface.co/Qwen/Qwen3-9B/blob/main/config.json" in err and "did you mean" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("hf_id, preset", [("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
                                            ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
                                            ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
                                            ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b")])
def test_a_llama_instruct_id_is_its_base_preset(hf_id, preset):
    """Meta's instruction-tuned Llama checkpoints share the base's config.json but for eos_token_id (the same
    architecture, counts and max_position_embeddings): ``--model meta-llama/Llama-3.1-70B-Instruct`` was unknown.
    The plan's ``vllm serve`` line still names the preset's first id, the base."""
    from roofline.models import preset_for_hf_id

    assert preset_for_hf_id(hf_id) == preset and preset_for_hf_id(hf_id.upper()) == preset
    assert get_model(preset).name == preset


def _report(capsys, *args):
    assert main(["report", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)["model"]


@pytest.mark.parametrize("vllm, ours", [
    (["--dtype", "half"], ["--weight-dtype", "float16"]), (["--dtype", "float"], ["--weight-dtype", "float32"]),
    (["--dtype", "auto"], []), (["--kv-cache-dtype", "auto"], []),
    (["--kv-cache-dtype", "fp8_e5m2"], ["--kv-dtype", "fp8_e5m2"]),
    (["--model", "deepseek-v3", "--quantization", "fp8", "--tp", "8", "--accelerator", "h200"],
     ["--model", "deepseek-v3", "--tp", "8", "--accelerator", "h200"])])
def test_vllm_dtype_names_mean_what_ours_do(capsys, vllm, ours):
    """vLLM's --dtype and --quantization (of the config's own method) give the report ours give."""
    assert _report(capsys, *vllm) == _report(capsys, *ours)


@pytest.mark.parametrize("args, text", [
    (["--dtype", "bfloat16", "--weight-dtype", "int8"], "--dtype='bfloat16': beside --weight-dtype='int8'"),
    (["--quantization", "fp8"], "--quantization='fp8': llama-3.1-8b is not quantized: quantizing a checkpoint on"),
    (["--model", "deepseek-v3", "--quantization", "awq"], "deepseek-v3 is quantized with fp8"),
    (["--model", "deepseek-v3", "--dtype", "half"], "--dtype='half': deepseek-v3 is quantized (fp8)"),
    (["--dtype", "int8"], "argument --dtype: invalid choice: 'int8'")])
def test_vllm_names_whose_meaning_differs_are_refused_by_name(capsys, args, text):
    try:
        status = main(["report", *args])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and text in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["report", "fit", "simulate"])
def test_gpu_memory_utilization_is_utilization_on_every_command_that_has_it(command):
    """vLLM's --gpu-memory-utilization sets the same value as --utilization wherever the command takes it."""
    from roofline.cli import build_parser

    parser = build_parser()
    a = parser.parse_args([command, "--gpu-memory-utilization", "0.8"])
    b = parser.parse_args([command, "--utilization", "0.8"])
    assert a.utilization == b.utilization == Fraction(4, 5)


@pytest.mark.parametrize("command", ["report", "fit", "simulate", "plan"])
def test_vllm_short_parallel_flags_set_the_long_ones(command):
    """``-tp``, ``-pp`` and ``-dp`` (vLLM's spellings) parse as ``--tensor-parallel-size`` and the others do, on
    every command that takes them (plan's axes append: ``-tp 2 -tp 4`` is the axis [2, 4])."""
    from roofline.cli import build_parser

    parser = build_parser()
    taken = 0
    for short, long in (("-tp", "--tensor-parallel-size"), ("-pp", "--pipeline-parallel-size"),
                        ("-dp", "--data-parallel-size")):
        try:
            ours = parser.parse_args([command, long, "2", long, "4"] if command == "plan" else [command, long, "2"])
        except SystemExit:  # the command has no such size (report and fit take no -dp)
            assert command in ("report", "fit") and short == "-dp", (command, short)
            continue
        vllm = parser.parse_args([command, short, "2", short, "4"] if command == "plan" else [command, short, "2"])
        spelled = vars(vllm).pop("given_flags", {}), vars(ours).pop("given_flags", {})
        assert vars(vllm) == vars(ours)
        assert spelled == ({}, {}) or (short in spelled[0].values() and long in spelled[1].values())  # as given
        taken += 1
    assert taken == (2 if command in ("report", "fit") else 3)
