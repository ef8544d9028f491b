"""The lesson's two charts: their numbers, and both rendered to PNG and SVG."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from roofline import get_accelerator, get_model  # noqa: E402
from roofline.cli import main as cli_main  # noqa: E402
from roofline.errors import InvalidValueError  # noqa: E402
from roofline.plotting import (  # noqa: E402
    CHART_NAMES,
    throughput_chart,
    throughput_curves,
    useful_share_chart,
    useful_share_curves,
    write_charts,
)

LLAMA, H100 = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")


def test_throughput_curves_carry_the_lessons_numbers():
    """Weights only: 8 sequences give 8x one; the ridge at 296; the KV curve stops at 404 sequences (53 GB)."""
    c = throughput_curves(LLAMA, H100, flops="2p")
    assert c["critical_batch"] == 296 and c["kv_limit"] == 404
    assert math.isclose(c["weights_only"][7], 8 * c["weights_only"][0], rel_tol=1e-12)
    assert math.isclose(c["weights_only"][0], 3.35e12 / LLAMA.weight_bytes, rel_tol=1e-12)
    assert np.all(np.isnan(c["with_kv"][404:])) and not np.any(np.isnan(c["with_kv"][:404]))
    assert np.all(c["with_kv"][:404] < c["weights_only"][:404])
    assert math.isclose(c["weights_only"][-1], c["ceiling"], rel_tol=1e-12)  # compute-bound past the ridge


def test_useful_share_curves_start_at_one_and_end_at_b_plus_one_over_two_b():
    """The share is 1 at spread 0 and (B + 1) / (2B) at spread 1, exact and approximation alike."""
    c = useful_share_curves([2, 8], points=11)
    for b in (2, 8):
        for curve in (c["exact"][b], c["approx"][b]):
            assert curve[0] == 1 and math.isclose(curve[-1], (b + 1) / (2 * b), rel_tol=1e-12)
            assert np.all(np.diff(curve) < 0)


def test_write_charts_renders_both_to_png_and_svg(tmp_path):
    """Both charts are written as non-trivial PNG and SVG files with their axis labels."""
    paths = write_charts(tmp_path / "charts", LLAMA, H100)
    assert sorted(p.name for p in paths) == sorted(f"{n}.{e}" for n in CHART_NAMES for e in ("png", "svg"))
    for path in paths:
        assert path.stat().st_size > 20_000, path
    for name in CHART_NAMES:
        assert (tmp_path / "charts" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "charts" / "throughput_vs_batch.svg").read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "batch size B [sequences]" in svg and "404 sequences" in svg
    assert "useful share" in (tmp_path / "charts" / "useful_share_vs_spread.svg").read_text(encoding="utf-8")


def test_charts_draw_into_given_axes():
    """Both charts can be drawn side by side into one figure's axes (the lesson's left and right)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5))
    left, right = fig.subplots(1, 2)
    assert throughput_chart(LLAMA, H100, ax=left, flops="exact") is fig
    assert useful_share_chart(ax=right) is fig
    assert left.get_xlabel() == "batch size B [sequences]" and "[%]" in right.get_ylabel()
    assert len(left.get_legend().get_texts()) == 4


def test_throughput_legend_covers_no_data_and_stays_in_the_figure():
    """The legend sits below the axes: it overlaps neither the plotting area (so not the KV curve's end at 404
    sequences) nor falls off the figure, for the lesson's 53 GB and a budget whose KV curve ends at the right edge."""
    for budget in (53 * 10**9, 64 * 10**9):
        fig = throughput_chart(LLAMA, H100, flops="2p", kv_budget=budget)
        fig.draw_without_rendering()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent()
        area = ax.get_window_extent()
        assert legend.y1 <= area.y0 and not legend.overlaps(area)
        assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1)
        end = ax.lines[2]  # the KV-full marker
        x, y = ax.transData.transform((end.get_xdata()[0], end.get_ydata()[0]))
        assert area.contains(x, y) and not legend.contains(x, y)


def test_plot_command_writes_the_charts(tmp_path, capsys):
    """`roofline plot --out DIR --format svg` writes both SVG charts and prints their paths."""
    assert cli_main(["plot", "--out", str(tmp_path), "--format", "svg"]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(printed) == sorted(str(tmp_path / f"{n}.svg") for n in CHART_NAMES)


def test_bad_chart_inputs_are_errors(tmp_path, capsys):
    """An unknown format, a bad batch range or a non-positive KV budget raise or exit 2 with one line."""
    with pytest.raises(InvalidValueError):
        write_charts(tmp_path, LLAMA, H100, formats=["jpg"])
    with pytest.raises(InvalidValueError):
        throughput_curves(LLAMA, H100, max_batch=1)
    for bad in ("0", "nan", "inf", "-3"):
        with pytest.raises(SystemExit) as info:
            cli_main(["plot", "--out", str(tmp_path), "--kv-budget-gb", bad])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"--kv-budget-gb={bad!r}" in err and err.count("\n") == 1


def test_plot_out_that_cannot_be_a_folder(tmp_path, capsys):
    """--out naming an existing file is one line naming --out (the library's out_dir), exit 2 (no traceback)."""
    blocker = tmp_path / "file.csv"
    blocker.write_text("x")
    assert cli_main(["plot", "--out", str(blocker), "--format", "svg"]) == 2
    err = capsys.readouterr().err
    assert f"--out='{blocker}'" in err and "cannot create the folder" in err and err.count("\n") == 1


@pytest.mark.parametrize("name, tp, critical", [("mixtral-8x7b", 2, 1082), ("gemma-3-27b", 1, 296),
                                                 ("mistral-7b-v0.1", 1, 301)])
def test_throughput_curves_price_moe_and_windows_as_decode_step(name, tp, critical):
    """The chart priced Mixtral with all 8 experts read at every batch and Gemma 3 / Mistral v0.1 at full attention;
    each point is now decode_step's tokens/s (experts touched, min(c, w) per layer), the KV limit floor(budget /
    kv_bytes(c)) and the critical batch criticality's (Mixtral's 1,082 of proof p09)."""
    from fractions import Fraction

    from roofline.estimate import criticality, decode_step

    model, h100 = get_model(name), get_accelerator("h100-sxm")
    c = throughput_curves(model.per_gpu(tp), h100, context=8192, kv_budget=20 * 10**9, max_batch=64)
    for b in (1, 8, 16):
        step = decode_step(model, h100, batch=b, context=8192, tensor_parallel_size=tp)
        assert c["with_kv"][b - 1] == pytest.approx(float(b / step.step_time), rel=1e-12)
        assert c["weights_only"][b - 1] == pytest.approx(
            float(b / decode_step(model, h100, batch=b, context=8192, kv_reads=False,
                                  tensor_parallel_size=tp).step_time), rel=1e-12)
    share = model.per_gpu(tp)
    assert c["kv_limit"] == int(Fraction(20 * 10**9) / Fraction(share.kv_bytes(8192)))
    assert c["critical_batch"] == critical == criticality(model, h100, context=0, tensor_parallel_size=tp
                                                          ).critical_batch_weights_only


def test_plot_command_fits_the_budget_and_the_group_to_the_card(tmp_path, capsys):
    """plot drew the lesson's 53 GB for every model (Gemma 3 27B on an H100 leaves 21.67 GB) and drew a model that
    does not fit one GPU as if it did; it now ends the KV curve at what the GPU leaves, takes the smallest
    tensor-parallel size that fits (Mixtral 8x7B: 2, 29.83 GB per GPU) and says both, as report does."""
    import json

    assert cli_main(["plot", "--model", "gemma-3-27b", "--out", str(tmp_path / "g"), "--format", "png",
                     "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tensor_parallel_size"] == 1 and round(data["kv_budget_bytes"] / 1e9, 2) == 21.67
    assert data["notes"] == ["the lesson's 53 GB KV budget exceeds the 21.67 GB this GPU leaves after the weights "
                             "(utilization 0.9, reserve 0): the KV curve ends at 21.67 GB"]
    assert cli_main(["plot", "--model", "mixtral-8x7b", "--out", str(tmp_path / "m"), "--format", "png"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("mixtral-8x7b does not fit one NVIDIA H100 SXM5 80GB (weights 93.41 GB); the charts are for "
                      "--tensor-parallel-size 2")
    assert out[1].endswith("the KV curve ends at 29.83 GB per GPU")
    assert cli_main(["plot", "--out", str(tmp_path / "l"), "--format", "png", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["notes"] == [] and data["kv_budget_bytes"] == 53 * 10**9  # the lesson's chart is unchanged
    assert cli_main(["plot", "--model", "llama-3.1-70b", "--tp", "1", "--out", str(tmp_path / "x")]) == 2
    assert "KV budget -64.57 GB: llama-3.1-70b weights (141.11 GB) leave no KV budget" in capsys.readouterr().err


def test_plot_without_matplotlib_says_so_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """Without matplotlib, plot said 'matplotlib=None: is needed for charts' and left an empty --out folder; it says
    what is missing and how to install it, and creates nothing."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    out = tmp_path / "charts"
    assert cli_main(["plot", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == ("roofline plot: error: matplotlib is not installed; charts need it: pip install "
                   "'roofline[plot]' (from a clone: pip install -e '.[plot]')\n")
    assert not out.exists()
