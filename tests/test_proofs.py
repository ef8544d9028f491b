"""Proofs: each passes and prints its key numbers, every formula has one, `roofline prove` gives one verdict each.

Each proof runs once per test session, in this process (the ``proof_runs`` fixture of
tests/conftest.py, shared with tests/test_planted_faults.py). The scripts under proofs/ and
`roofline prove` are tested on replays of those runs, so no proof runs twice.
"""

from __future__ import annotations

import ast
import importlib
import runpy
from pathlib import Path

import pytest

import roofline.formulas as f
from roofline import proofs
from roofline.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "proofs"
NAMES = proofs.proof_names()

#: Numbers each proof must print (the lesson's values, derived).
KEY_NUMBERS = {
    "p01_one_request": ["16.06 GB", "4.794 ms", "0.339 %", "0.316 %", "190.3 s"],
    "p02_batching": ["+0 (roofline, weights only)", "+273.9 us", "x8"],
    "p03_critical_batch": ["B* = 296", "c* = 415", "393", "B* = none"],
    "p04_kv_cache": ["131,072 B", "404 sequences", "401 in 16-token blocks"],
    "p05_static_batching": ["1,000 steps", "40 % useful", "500.0 ms", "5.000 s", "4.995 s"],
    "p06_expected_useful_share": ["5/8 at s = 1", "0.772", "0.513, 0.475, 0.409, 0.510"],
    "p07_anyscale": ["predicted 143 tokens/s", "measured ~81", "6.1x", "21.6x", "1.74 %", "0.39 %"],
    "p08_continuous_batching": ["slot occupancy 70.5 %", "back at step 100"],
    "p13_decode_stretch": ["j* = 50.44", "1,982,585 steps", "outgrown at step 17"],
    "p10_chunked_prefill": ["8 steps after static", "worst gap 2 -> 1 step", "12.76 ms -> 4.941 ms"],
    "p12_anyscale_scheduler": ["1.5x, 2.5x, 4.3x, 6.0x", "chunked prefill adds 20 %"],
    "p09_moe": ["B* = 1,082", "B* = 2,965", "B* = 299", "B* = 326"],
    "p11_tensor_parallel": ["8,820,367,360 parameters", "40,960 B", "1.344 ms", "10.19 us", "the crossover is B = 132",
                            "131.84 sequences", "6.37x faster"],
    "p19_prefix_caching": ["32.2 ms -> 8.3 ms", "182 sequences", "90 sequences", "320 tokens saved",
                           "22 blocks, not 42"],
    "p22_disaggregated": ["163,840,000 B", "3.2795 ms", "TTFT 3.5150 ms", "TPOT 1.0107 ms and 2.0213 ms"],
    "p16_sliding_window": ["25 sequences", "4 sequences", "3.121 GB", "27.507 ms", "470.1 GB vs 132.0 GB"],
    "p17_hybrid": ["24,576", "524,288", "39.52 MB", "195,000 tokens", "32,768 tokens", "5.95x", "101 blocks",
                   "16 sequences", "2.180 ms", "91.6 FLOP/byte", "c* = 0"],
    "p18_speculative_decoding": ["2.7731 tokens", "1.72x", "B*_spec = 73", "B* = 907", "break-even at batch 176",
                                 "k* = 3.189", "684.49B", "176.0 us", "verification 2.851 ms",
                                 "MTP speed-up 1.423x", "MTP break-even: none"],
    "p20_pipeline_parallel": ["18.85 ms", "32.46 ms", "3.355 us", "(31, 32, 32, 31)", "460.0 ns", "293.5 GB/s"],
    "p21_expert_parallel": ["13/7", "39/28", "5.295 of 8", "6.523 of 16", "2.125 MB", "17.66 us", "2.575 ms",
                            "2.863 ms", "18.74 ms", "17.28 ms", "2.236 GB", "2.286 ms", "24.32 ms", "21,051",
                            "971/375"],
    "p23_plan_pruning": ["t_floor = their least: 4.794 ms", "TTFTs 1, 4 and 5", "20 + 0.6 x 15", "W + k q1"],
    "p24_sparse_attention": ["10.27 GB at 131,072", "1.199 GB = 0.117 of held", "c = 2,741 tokens",
                             "53.680 ns per token", "0.27x of V3's step", "at most K: 434 tokens",
                             "costs 0.27x DeepSeek-V3's"],
    "p15_estimate": ["eta_bw = 0.7830", "t_step = 2.2155 ms", "8.377 ms (+7.5 %)", "4.824 ms (-38.1 %)"],
}


@pytest.fixture
def replayed(proof_runs, monkeypatch, request):
    """Every proof's ``derive`` replaced by a replay of its session run (same output, checks and summary).

    A test parametrized by one proof's ``name`` replays (and so runs, once per session) that proof only.
    """
    callspec = getattr(request.node, "callspec", None)
    names = [callspec.params["name"]] if callspec is not None and "name" in callspec.params else NAMES
    for name in names:
        verdict = proof_runs.verdicts[name]  # its session run, before derive is replaced

        def replay(p, verdict=verdict):
            p.stream.write(verdict.output)
            p.checks, p.failures, p.summary = verdict.checks, list(verdict.failures), verdict.summary
        monkeypatch.setattr(importlib.import_module(f"roofline.proofs.{name}"), "derive", replay)
    return proof_runs.verdicts


def test_the_proofs_folder_and_the_package_hold_the_same_proofs():
    """proofs/pNN_*.py (the scripts) and roofline/proofs/pNN_*.py (shipped) name the same eight or more claims."""
    assert sorted(p.stem for p in SCRIPTS.glob("p[0-9][0-9]_*.py")) == NAMES
    assert len(NAMES) >= 8


def test_every_registered_formula_has_a_proof():
    """Every REGISTRY entry names a proof that exists as a script and as a shipped module."""
    for name, spec in f.REGISTRY.items():
        assert (SCRIPTS / spec.proof).is_file(), f"{name}: proofs/{spec.proof} is missing"
        assert spec.proof.removesuffix(".py") in NAMES, f"{name}: roofline.proofs has no {spec.proof}"


@pytest.mark.parametrize("name", NAMES)
def test_each_proof_states_claim_assumptions_and_sources_and_does_no_work_at_import(name, capsys):
    """The shipped module's docstring has Claim, Assumptions, Sources; importing it prints nothing."""
    module = importlib.import_module(f"roofline.proofs.{name}")
    for heading in ("Claim", "Assumptions", "Sources"):
        assert f"\n{heading}\n" in module.__doc__, f"{name}: no {heading} section"
    assert callable(module.derive) and callable(module.main)
    assert capsys.readouterr().out == ""
    wrapper = ast.get_docstring(ast.parse((SCRIPTS / f"{name}.py").read_text(encoding="utf-8")))
    assert wrapper.startswith("Claim (") and f"roofline/proofs/{name}.py" in wrapper


@pytest.mark.parametrize("name", NAMES)
def test_each_proof_passes_and_prints_its_key_numbers(proof_runs, name):
    """The proof passes with no failed check and prints the claim's key numbers (derivation or summary)."""
    verdict = proof_runs.verdicts[name]
    assert verdict.passed, verdict.line() + "\n" + verdict.output[-3000:]
    assert "[FAIL]" not in verdict.output
    assert all(len(x) <= 100 for x in verdict.output.splitlines())  # long check lines wrap (continuations indented)
    text = " ".join((verdict.output + " " + verdict.summary).split())
    for number in KEY_NUMBERS[name]:
        assert number in text, f"{name}: {number!r} not printed"


def test_p15_says_why_its_fit_differs_from_the_shipped_vllm_profile(proof_runs):
    """p15's two-row fit (eta_bw 0.7830, t_step 2.2155 ms) is not the shipped profile (eta_bw 0.8052, t_layer 76.8 us):
    it prints why, and what it says of the shipped fit (its rows, layer counts, t_step at its bound 0) is true."""
    from roofline.calibrate.fit import AT_BOUND_KIND, get_engine_profile

    text = " ".join(proof_runs.verdicts["p15_estimate"].output.split())
    shipped = get_engine_profile("vllm")
    assert shipped.calibration == ("vllm-llama-3-70b-tp4-b8-h200", "vllm-llama-3.1-8b-b8-a100",
                                   "vllm-llama-3.1-8b-b8-h200")
    assert shipped.kind("t_step") == AT_BOUND_KIND and shipped.kind("t_layer") == "fitted"
    assert ("Why the shipped vLLM profile (--estimate vllm) differs: roofline validate fits it on all 3 calibration "
            f"rows of 'vLLM with CUDA graphs' ({', '.join(shipped.calibration)}), whose 32 and 80 layers separate "
            "t_layer from t_step, by least squares on relative error with t_step, t_layer >= 0 "
            "(roofline.calibrate.fit): t_step lands at its bound 0 and the fixed time goes to t_layer; this teaching "
            "fit solves two rows exactly with t_layer = 0.") in text


@pytest.mark.parametrize("name", NAMES)
def test_each_script_prints_the_derivation_and_exits_with_the_verdict(replayed, name, capsys):
    """`python proofs/<name>.py` prints the derivation and a PASS verdict with the key numbers, and exits 0."""
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name="__main__")
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert all(len(x) <= 100 for x in out.splitlines())  # the verdict wraps, its continuations indented 4
    last = out.replace("\n    ", " ").strip().splitlines()[-1]
    assert last.startswith(f"PASS {name}: ")
    assert any(number in last for number in KEY_NUMBERS[name]), last


def test_roofline_prove_prints_one_passing_verdict_per_claim(replayed, capsys):
    """`roofline prove` prints PASS and the derived numbers for every claim, a total, and exits 0."""
    assert cli_main(["prove"]) == 0
    out = capsys.readouterr().out
    assert all(len(x) <= 100 for x in out.splitlines())  # a long verdict wraps, its continuations indented 4
    lines = out.replace("\n    ", " ").strip().splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [f"PASS {n}" for n in NAMES]
    for name, numbers in KEY_NUMBERS.items():
        line = next(x for x in lines if x.startswith(f"PASS {name}:"))
        assert any(n in line for n in numbers), line
    assert lines[-1].startswith(f"{len(NAMES)} of {len(NAMES)} claims pass")


def test_prove_selects_by_prefix_and_prints_the_derivation_when_verbose(replayed, capsys):
    """`roofline prove p04 --verbose` runs only p04 and prints its derivation before its verdict."""
    assert cli_main(["prove", "p04", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "1. KV bytes per token" in out and "PASS p04_kv_cache:" in out and "1 of 1 claims pass" in out
    assert "p01_one_request" not in out


def test_prove_list_names_every_claim(capsys):
    """`roofline prove --list` lists every proof with its claim and runs nothing."""
    assert cli_main(["prove", "--list"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in out] == NAMES


def test_unknown_proof_is_a_one_line_error(capsys):
    """An unknown proof name exits with status 2 and one line on stderr naming it."""
    assert cli_main(["prove", "p99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "p99" in err[0] and err[0].startswith("roofline prove: error:")


def test_a_failed_check_fails_the_claim_and_the_command(monkeypatch, capsys):
    """A proof whose check fails gives a FAIL verdict naming the check, and `roofline prove` exits 1."""
    module = importlib.import_module("roofline.proofs.p02_batching")

    def wrong(p):
        p.equal("1 = 2", 1, 2)
        p.conclude("a deliberately false step")

    monkeypatch.setattr(module, "derive", wrong)
    verdict = proofs.run_proof("p02")
    assert not verdict.passed and verdict.failures == ("1 = 2",)
    assert verdict.line().startswith("FAIL p02_batching: a deliberately false step (failed: 1 = 2)")
    assert cli_main(["prove", "p02"]) == 1
    assert "FAIL p02_batching" in capsys.readouterr().out


def test_a_crash_is_a_failed_claim_not_an_exception(monkeypatch):
    """A proof that raises is reported FAIL with the error, and its traceback is kept in the output."""
    module = importlib.import_module("roofline.proofs.p03_critical_batch")

    def crash(p):
        raise RuntimeError("boom")

    monkeypatch.setattr(module, "derive", crash)
    verdict = proofs.run_proof("p03_critical_batch.py")
    assert not verdict.passed and "error: RuntimeError: boom" in verdict.failures
    assert "Traceback" in verdict.output


def test_a_proof_without_checks_does_not_pass(monkeypatch):
    """A proof that checks nothing is not a PASS."""
    module = importlib.import_module("roofline.proofs.p04_kv_cache")
    monkeypatch.setattr(module, "derive", lambda p: p.conclude("nothing checked"))
    assert not proofs.run_proof("p04").passed


def test_proofs_run_on_worker_processes_give_the_same_verdicts() -> None:
    """run_proofs(jobs=2) (the docs build's) gives each proof's verdict and output as run here, in the order named;
    a bad name is refused before any runs, and jobs must be an integer >= 1."""
    from roofline.errors import InvalidValueError
    from roofline.proofs import run_proofs

    here, there = run_proofs(["p05", "p02"]), run_proofs(["p05", "p02"], jobs=2)
    assert [v.name for v in there] == ["p05_static_batching", "p02_batching"]
    assert [(v.passed, v.checks, v.output) for v in there] == [(v.passed, v.checks, v.output) for v in here]
    assert all(v.passed and v.checks > 0 for v in there)
    for bad in (0, True, 1.5):
        with pytest.raises(InvalidValueError, match="jobs"):
            run_proofs(["p02"], jobs=bad)
    with pytest.raises(InvalidValueError, match="proof='p99'"):
        run_proofs(["p02", "p99"], jobs=2)
