"""Inputs ``roofline plan`` refuses by name, found by a break-it pass at stop 26 (docs/conventions.md, "Deployment
search"): a resume file of another model, outputs that are devices, pipes or links, workloads without a rate to
scale, prices and tolerances outside what the search keeps finite, workload flags the workload does not use, a
``tcp://`` endpoint that is no Dask scheduler, and two names of one KV dtype searched twice."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import threading
from fractions import Fraction
from pathlib import Path

import attrs
import numpy as np
import pytest
from _text import unwrapped

from roofline import get_model, plan
from roofline._io import atomic_write, output_path
from roofline.cli import main
from roofline.deployment import profile
from roofline.errors import InvalidValueError, UnknownPresetError
from roofline.sim import Request

P = importlib.import_module("roofline.plan")
MODEL = get_model("llama-3.1-8b")
GRID = {"tensor_parallel_size": [1], "max_num_batched_tokens": [2048]}
REQUESTS = [Request(id=i, arrival_s=Fraction(i, 2), prompt_tokens=64, output_tokens=8) for i in range(6)]
_W = ["plan", "--limit", "5", "--slo-tpot", "50", "--tensor-parallel-size", "1", "--max-num-batched-tokens", "2048"]


def _status(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_a_resume_file_of_an_edited_model_is_another_searchs(tmp_path: Path) -> None:
    """The fingerprint holds the whole model: the same name with fewer KV heads (a config.json edited between two
    runs) is refused as another search's file, and the file is left as it was; the same model resumes it."""
    out = tmp_path / "plan.jsonl"
    first = plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), out=out)
    kept = out.read_bytes()
    edited = attrs.evolve(MODEL, num_key_value_heads=2)
    assert edited.name == MODEL.name
    with pytest.raises(InvalidValueError, match="a search with other inputs"):
        plan(edited, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), out=out)
    assert out.read_bytes() == kept
    again = plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), out=out)
    assert (again.resumed, again.records) == (1, first.records)
    assert P._fingerprint(attrs.evolve(first.context, model=edited)) != P._fingerprint(first.context)


def test_a_blank_line_in_a_resume_file_is_no_record(tmp_path: Path) -> None:
    """An editor's trailing blank line is skipped, not a reason to refuse the file."""
    out = tmp_path / "plan.jsonl"
    first = plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), out=out)
    out.write_text(out.read_text() + "\n  \n")
    again = plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), out=out)
    assert (again.resumed, again.records) == (1, first.records)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_a_pipe_is_no_output_and_a_link_is_written_through(tmp_path: Path) -> None:
    """An output that is a pipe (or a device) is refused before any work, one line, exit 2, and stays a pipe; a
    symbolic link is written through: the link stays and its target holds the new text."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidValueError, match="is not a regular file"):
        output_path("--out", fifo)
    for flag in ("--out", "--csv"):
        assert _status([*_W, flag, str(fifo)]) == 2
        assert fifo.is_fifo()
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old")
    link.symlink_to(target)
    with atomic_write(link) as fh:
        fh.write("new")
    assert link.is_symlink() and target.read_text() == "new"


def test_the_cli_refuses_a_pipe_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this platform")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _status([*_W, "--out", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert f"--out='{fifo}': is not a regular file (a device, a pipe or a socket)" in err and err.count("\n") == 1


@pytest.mark.parametrize(("requests", "kw", "field", "message"), [
    ([Request(id=0, arrival_s=3, prompt_tokens=8, output_tokens=2)], {"search_rate": True}, "requests",
     "every request arrives at the same time"),
    ([Request(id=i, arrival_s=0, prompt_tokens=8, output_tokens=2) for i in range(3)], {"rate_scale": 2},
     "requests", "every request arrives at the same time"),
    ([Request(id=0, arrival_s=0, prompt_tokens=8, output_tokens=2),
      Request(id=1, arrival_s=1e-310, prompt_tokens=8, output_tokens=2)], {"search_rate": True}, "requests",
     "own rate above 1e+12 requests/s"),
    ([Request(id=0, arrival_s=0, prompt_tokens=8, output_tokens=2),
      Request(id=1, arrival_s=1106166, prompt_tokens=8, output_tokens=2)], {"rate_scale": 1e-15}, "rate_scale",
     "puts request 1's arrival at 1.10617e+21 s, past 1e+15 s (MAX_ARRIVAL_S)"),
    ([Request(id=0, arrival_s=0, prompt_tokens=8, output_tokens=2),
      Request(id=1, arrival_s=10**14, prompt_tokens=8, output_tokens=2)], {"search_rate": True}, "requests",
     "slowest factor (1/64) would put it past 1e+15 s"),
    (REQUESTS, {"search_rate": True, "rate_tolerance": Fraction(1, 10**5)}, "rate_tolerance", "must be >= 0.0001"),
    (REQUESTS, {"rate_scale": np.array(2.0)}, "rate_scale", "expected one number, not an array"),
    (REQUESTS, {"prices": {"h100-sxm": float("inf")}}, "--price", "a price must be a number in 1e-06..1e+06"),
    (REQUESTS, {"prices": {"h100-sxm": 1e-300}}, "--price", "a price must be a number in 1e-06..1e+06"),
    ([1, 2], {}, "requests[0]", "expected a roofline.sim.Request"),
])
def test_inputs_the_search_cannot_scale_or_price_are_refused_by_name(requests: list, kw: dict, field: str,
                                                                       message: str) -> None:
    with pytest.raises(InvalidValueError) as err:
        plan(MODEL, requests, axes=GRID, slo_tpot_s=Fraction(1, 20), **kw)
    assert err.value.field == field and message in str(err.value), str(err.value)


def test_an_estimate_by_name_is_its_profile_and_an_unknown_one_is_refused() -> None:
    """``estimate="vllm"`` is ``profile("vllm")`` (the same records); a value that names no profile is refused
    naming ``estimate``."""
    by_name = plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), estimate="vllm")
    by_profile = plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), estimate=profile("vllm"))
    assert by_name.records == by_profile.records and by_name.context.estimate == profile("vllm")
    for bad in (5, "no-such-engine"):
        with pytest.raises(UnknownPresetError) as err:
            plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), estimate=bad)
        assert err.value.field == "estimate"


def test_an_out_in_a_missing_folder_is_refused_before_any_work(tmp_path: Path) -> None:
    seen: list = []
    for out, message in ((tmp_path / "no" / "plan.jsonl", "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(InvalidValueError, match=message) as err:
            plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), out=out, progress=seen.append)
        assert err.value.field == "out"
    assert seen == []


@pytest.mark.parametrize(("extra", "message"), [
    (["--burstiness", "2"], "--burstiness=2: applies to generated open-loop arrivals at a --request-rate, which "
                            "this run (a trace) does not include"),
    (["--seed", "3"], "--seed=3: applies to a generated workload"),
    (["--random-input-len", "10"], "--random-input-len=10: applies to generated prompt lengths"),
])
def test_workload_flags_the_workload_does_not_use_are_refused(extra: list[str], message: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """As ``roofline simulate`` refuses them: one line, exit 2, before any work."""
    assert _status([*_W, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_generated_workloads_unused_flags_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--num-prompts", "5", "--request-rate", "5", "--slo-tpot", "50", "-tp", "1",
            "--max-num-batched-tokens", "2048"]
    for extra, flag in ((["--think-time", "1"], "--think-time=1"), (["--turn-gap", "3"], "--turn-gap=3"),
                        (["--len-sigma", "2"], "--len-sigma=2")):
        assert _status([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"roofline plan: error: {flag}: applies to") and err.count("\n") == 1, err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="the plot extra is not installed")
def test_a_plot_format_the_plan_cannot_write_again_is_refused_before_the_search(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pgf needs LaTeX and tif has no known first bytes (a second run would refuse its own file): both are
    refused before the search, naming the formats it writes."""
    for name in ("q.pgf", "q.tif"):
        assert _status([*_W, "--plot", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert "is not one roofline plan writes; known: eps, jpeg, jpg, pdf, png, ps, svg" in err, err
    assert list(tmp_path.iterdir()) == []


def test_two_names_of_one_kv_dtype_are_one_configuration() -> None:
    """``auto`` on a bfloat16 model, ``bf16`` and ``bfloat16`` are one format, as ``fp8`` and ``fp8_e4m3`` are:
    the first name given of each is searched; ``fp8_e5m2`` is another format."""
    grid = P._grid({**GRID, "kv_cache_dtype": ["auto", "bf16", "bfloat16", "fp8", "float8", "fp8_e4m3",
                                               "fp8_e5m2"]}, {}, MODEL)
    assert [c["kv_cache_dtype"] for c in grid] == ["auto", "fp8", "fp8_e5m2"]
    grid = P._grid({**GRID, "kv_cache_dtype": ["fp8_e4m3", "auto", "fp8"]}, {}, MODEL)
    assert [c["kv_cache_dtype"] for c in grid] == ["fp8_e4m3", "auto"]


def _serve(reply: bytes | None) -> tuple[socket.socket, int]:
    """A listener on a free port answering each connection with ``reply`` (None: never answering)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="the cluster extra is not installed")
@pytest.mark.parametrize(("reply", "message"), [
    (b"SSH-2.0-OpenSSH_8.9\r\n" * 4, "not a Dask scheduler, or it failed the handshake"),
    (None, "no Dask scheduler answered within 2 s"),
])
def test_an_endpoint_that_is_no_dask_scheduler_is_refused_by_name(reply: bytes | None, message: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A banner (read by Dask as frames of exabytes) and a listener that never answers the handshake (an HTTP
    server): each refused naming ``cluster``, within the handshake timeout (2 s here), never a hang."""
    monkeypatch.setattr(P, "HANDSHAKE_TIMEOUT_S", 2)
    server, port = _serve(reply)
    try:
        with pytest.raises(InvalidValueError, match=message) as err:
            plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), cluster=f"tcp://127.0.0.1:{port}")
        assert err.value.field == "cluster"
    finally:
        server.close()


def test_a_numpy_price_is_a_price() -> None:
    """A numpy integer or float is a real number of USD per GPU-hour (it was refused as 'not a number > 0')."""
    import numpy as np

    for price in (np.int64(2), np.float64(2.0)):
        result = plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), prices={"h100-sxm": price})
        assert result.records[0]["cost"] == 2.0 and result.to_dict()["prices_usd_per_gpu_hour"] == {"h100-sxm": 2.0}


def test_a_resumed_search_prints_the_same_json(tmp_path: Path) -> None:
    """The records read back keep the order of their fields: the results of a resumed search are the same JSON
    text, byte for byte, as those of the search that wrote them (they came back with sorted keys)."""
    import json

    out = tmp_path / "plan.jsonl"
    grid = {**GRID, "max_num_seqs": [8, 64]}
    first = plan(MODEL, REQUESTS, axes=grid, slo_tpot_s=Fraction(1, 20), search_rate=True, out=out)
    again = plan(MODEL, REQUESTS, axes=grid, slo_tpot_s=Fraction(1, 20), search_rate=True, out=out)
    assert again.resumed == 2
    assert json.dumps(again.to_dict()["results"]) == json.dumps(first.to_dict()["results"])


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="the cluster extra is not installed")
def test_a_running_dask_scheduler_answers_as_local_processes() -> None:
    """A ``tcp://`` scheduler that answers the handshake (connected from the handshake's thread) gives the same
    records as the search in-process."""
    import json

    from distributed import LocalCluster

    kw = dict(axes={**GRID, "max_num_seqs": [8, 64]}, slo_tpot_s=Fraction(1, 20), search_rate=True)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=":0",
                      host="127.0.0.1") as cluster:
        remote = plan(MODEL, REQUESTS, cluster=cluster.scheduler_address, **kw)
    assert json.dumps(remote.to_dict()) == json.dumps(plan(MODEL, REQUESTS, **kw).to_dict())


def test_numpy_numbers_are_their_values() -> None:
    """Stop 27 (break-it): ``Fraction(np.int64(x))`` kept a numpy numerator, so the search's comparisons overflowed
    int64: ``slo_tpot_s=np.int64(10**9)`` pruned T = 2 by tpot (an int meets on both), ``np.int64(1)`` raised an
    OverflowError, ``np.float32`` a TypeError and ``block_size=np.int64(16)`` failed writing JSON. A numpy number
    now gives the records of the Python number of its value."""
    np = pytest.importorskip("numpy")
    axes = {"tensor_parallel_size": [1, 2], "max_num_batched_tokens": [2048]}
    for given, plain in (({"slo_tpot_s": np.int64(10**9)}, {"slo_tpot_s": 10**9}),
                         ({"slo_e2e_s": np.int64(10**12)}, {"slo_e2e_s": 10**12}),
                         ({"slo_tpot_s": np.int32(1), "block_size": np.int64(16), "percentile": np.int64(90)},
                          {"slo_tpot_s": 1, "block_size": 16, "percentile": 90}),
                         ({"slo_ttft_s": np.float32(0.5), "utilization": np.float32(0.5), "rate_scale": np.int64(3)},
                          {"slo_ttft_s": float(np.float32(0.5)), "utilization": 0.5, "rate_scale": 3})):
        got = plan(MODEL, REQUESTS, axes=axes, **given)
        want = plan(MODEL, REQUESTS, axes=axes, **plain)
        assert got.records == want.records and got.winner == want.winner
        assert all(r["status"] == "simulated" for r in got.records)


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-num-seqs", "\u0661\u0666"], "--max-num-seqs='\u0661\u0666': numbers must be written with ASCII digits"),
    (["--max-num-seqs", "\uff11\uff16"], "--max-num-seqs='\uff11\uff16': numbers must be written with ASCII digits"),
    (["--tensor-parallel-size", "1" + "0" * 16], "must be <= 1e+15"),
    (["--max-num-seqs", "1_6"], "--max-num-seqs='1_6': expected an integer >= 1, in ASCII digits only"),
    (["--max-num-seqs", "+16"], "--max-num-seqs='+16': expected an integer >= 1, in ASCII digits only"),
])
def test_axis_counts_in_other_digits_or_past_the_bound_are_refused(argv: list[str], message: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Python's int reads Arabic-Indic and full-width digits as 16 (a break-it finding: --max-num-seqs ١٦ was
    searched as 16); the command line's numbers are ASCII everywhere else."""
    assert _status([*_W, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_negative_rate_scale_is_named_as_not_positive() -> None:
    """-1 was refused with "must be >= 0", which 0 does not meet either."""
    with pytest.raises(InvalidValueError) as err:
        plan(MODEL, REQUESTS, axes=GRID, slo_tpot_s=Fraction(1, 20), rate_scale=-1)
    assert err.value.field == "rate_scale" and str(err.value) == "rate_scale=-1: must be > 0"


def test_a_speculative_config_with_a_key_given_twice_is_refused() -> None:
    """json.loads keeps the last of two keys (a break-it finding: `"num_speculative_tokens": 2, ... 3` ran k = 3
    silently); the config is read as the project's strict JSON."""
    from roofline.speculative import SpeculativeConfig

    with pytest.raises(InvalidValueError, match="duplicate key 'num_speculative_tokens'") as err:
        SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens": 3}')
    assert err.value.field == "speculative_config"
    assert SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 3}').num_speculative_tokens == 3


def test_an_engine_versions_scheduler_defaults_are_the_axes_not_given(capsys: pytest.CaptureFixture[str]) -> None:
    """A break-it finding: `plan --estimate vllm-v0` searched chunked prefill with reserve admission, V1's
    plan defaults, where `simulate --estimate vllm-v0` runs V0's scheduler. Now the axes not given take the
    engine's defaults, as simulate's flags do; an axis given wins; a default that differs by accelerator keeps
    the plan's values."""
    base = ["plan", "--limit", "20", "--slo-tpot", "50", "--tensor-parallel-size", "1", "--json"]
    assert main([*base, "--estimate", "vllm-v0"]) == 0
    keys = [r["key"] for r in json.loads(capsys.readouterr().out)["results"]]
    assert keys and all("/separate/" in k and k.endswith("/on-demand") for k in keys)
    assert main([*base, "--estimate", "vllm-v0", "--admission", "reserve"]) == 0
    assert all(r["key"].endswith("/reserve") for r in json.loads(capsys.readouterr().out)["results"])
    assert main([*base, "--estimate", "vllm", "--accelerator", "h100-sxm"]) == 0  # a large GPU: V1's 1024, 8192
    assert [r["key"] for r in json.loads(capsys.readouterr().out)["results"]] == [
        "h100-sxm/tp1/pp1/dp1/colocated/noep/seqs1024/mbt8192/chunked/noprefix/kvauto/on-demand"]
    assert main([*base[:-1], "--estimate", "vllm", "--accelerator", "h100-sxm", "--accelerator", "a100-80gb"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert ("vllm-v1 defaults: --enable-chunked-prefill on, --admission on-demand (axes given win); --max-num-seqs, "
            "--max-num-batched-tokens: the plan's values (the engine's differ by accelerator)") in out
    assert main(base) == 0  # the bound: the plan's own defaults
    assert all(r["key"].endswith("/chunked/noprefix/kvauto/reserve")
               for r in json.loads(capsys.readouterr().out)["results"])


def test_a_trace_without_requests_is_refused_naming_the_file(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A break-it finding: a trace of a header only was refused as `requests=()`, naming no file."""
    trace = tmp_path / "empty.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert _status(["plan", "--trace", str(trace), "--slo-ttft", "100"]) == 2
    assert capsys.readouterr().err == (f"roofline plan: error: --trace='{trace}': holds no requests: there is "
                                       "nothing to serve\n")


def test_a_workload_out_of_arrival_order_or_with_a_repeated_id_is_refused_before_any_work() -> None:
    """The plan checks the requests once, up front (its rules read the first arrival of a part as its earliest, and
    each run skips the check): an arrival earlier than the one before it and a repeated id are refused naming the
    request, before any configuration is built."""
    late = [*REQUESTS[:3], attrs.evolve(REQUESTS[3], arrival_s=Fraction(1, 4)), *REQUESTS[4:]]
    with pytest.raises(InvalidValueError) as order:
        plan(MODEL, late, axes=GRID, slo_tpot_s=Fraction(1, 20))
    assert order.value.field == "requests[3].arrival_s" and order.value.value == Fraction(1, 4)
    twice = [*REQUESTS[:5], attrs.evolve(REQUESTS[5], id=2)]
    with pytest.raises(InvalidValueError) as ids:
        plan(MODEL, twice, axes=GRID, slo_tpot_s=Fraction(1, 20))
    assert ids.value.field == "requests[5].id" and ids.value.value == 2


def test_prefix_caching_on_a_windowed_model_and_expert_parallelism_on_a_dense_one_are_skipped_by_name() -> None:
    """Both were found by a break-it pass: prefix caching beside sliding-window layers (Mistral 7B v0.1's 4,096)
    refused the whole search from inside a run; now that configuration alone is skipped, with the scheduler's own
    reason, and the one without it is simulated. ``--enable-expert-parallel on`` for a dense model was pruned by
    the fit rule (no bound proves anything there): it is the same deployment as off, skipped saying so."""
    windowed = plan(get_model("mistral-7b-v0.1"), REQUESTS, slo_tpot_s=Fraction(1, 20),
                    axes={**GRID, "enable_prefix_caching": [True, False]})
    by_prefix = {r["config"]["enable_prefix_caching"]: r for r in windowed.records}
    assert by_prefix[True]["status"] == "skipped" and by_prefix[False]["status"] == "simulated"
    assert by_prefix[True]["reason"] == ("enable_prefix_caching=True: prefix caching is not modelled with "
                                         "sliding-window layers (a windowed layer's blocks of a shared prefix leave "
                                         "the window)")
    dense = plan(MODEL, REQUESTS, slo_tpot_s=Fraction(1, 20), axes={**GRID, "enable_expert_parallel": [True, False]})
    by_ep = {r["config"]["enable_expert_parallel"]: r for r in dense.records}
    assert by_ep[True]["status"] == "skipped" and by_ep[True]["rule"] is None and dense.pruned["fit"] == 0
    assert "llama-3.1-8b is a dense model" in by_ep[True]["reason"] and by_ep[False]["status"] == "simulated"
    assert _status(["plan", "--limit", "5", "--slo-tpot", "50", "--tensor-parallel-size", "1",
                    "--enable-expert-parallel", "on"]) == 2  # every configuration skipped: refused, exit 2
