"""The lesson's two charts: throughput against batch size, and static batching's useful share.

* :func:`throughput_chart` (the lesson's left chart): decode throughput of a model on an
  accelerator against the batch size, weights only (solid) and with each sequence's KV
  reads at ``context`` tokens (dashed, ending where the KV budget is full), with the
  compute ceiling (peak / FLOPs per token) and the ridge (the critical batch) marked.
* :func:`useful_share_chart` (the right chart): the expected useful share of a static
  batch against the spread of uniform random output lengths, for several batch sizes:
  the exact E[X / max] (solid) and the lesson's mean / longest (dashed).
* :func:`write_charts`: both, to PNG and SVG files (what ``roofline plot`` runs).

The numbers come from :mod:`roofline.formulas` (:func:`throughput_curves` and
:func:`useful_share_curves` return them without plotting). Matplotlib is optional
(``pip install roofline[plot]``); it is imported only when a chart is drawn, and the
figures are built without pyplot (no global state, any backend).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import formulas as f
from ._checks import check_count
from ._io import atomic_write, locked_folder
from .deployment import FROM_DEPLOYMENT, Deployment, as_deployment
from .errors import InvalidValueError, MissingExtraError
from .hardware import Accelerator
from .models import ModelConfig

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "throughput_curves",
    "useful_share_curves",
    "throughput_chart",
    "useful_share_chart",
    "write_charts",
    "CHART_NAMES",
]

#: File stems of the charts :func:`write_charts` writes.
CHART_NAMES = ("throughput_vs_batch", "useful_share_vs_spread")
_SHARE_BATCHES = (2, 4, 8, 16, 64)


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure as figure_class
    except ImportError:
        raise MissingExtraError("matplotlib", "plot", "charts need it") from None
    return matplotlib, figure_class


def throughput_curves(
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    context: int = 1000,
    kv_budget: Any = 53 * 10**9,
    max_batch: int = 512,
    flops: str = FROM_DEPLOYMENT,
) -> dict[str, Any]:
    """The numbers of the throughput chart.

    Parameters
    ----------
    model : Deployment or ModelConfig
        A Deployment (its accelerator, T and convention; its profile is not used: the chart is the
        bound's), a whole model, or one GPU's share (:meth:`roofline.ModelConfig.per_gpu`). At
        T > 1 the throughput is the tensor-parallel group's, each step adding its all-reduce over
        :meth:`roofline.Accelerator.link` (docs/conventions.md, "Tensor parallelism"), and
        ``kv_budget`` is one GPU's.
    accelerator : Accelerator (beside a ModelConfig only; its bandwidth [bytes/s] and dense peak [FLOP/s])
    context : int > 0 [tokens], each sequence's context for the KV curve
    kv_budget : > 0 [bytes], the KV cache size where the KV curve ends (the lesson's 53 GB)
    max_batch : int >= 2 [sequences], the last batch size drawn
    flops : {"exact", "2p"}, the FLOPs convention (docs/conventions.md); default "exact" (a Deployment's own)

    Returns
    -------
    dict with ``batch`` (int array 1..max_batch), ``weights_only`` and ``with_kv``
    [tokens/s] (float arrays; ``with_kv`` is NaN beyond ``kv_limit``), ``kv_limit``
    [sequences] (int), ``ceiling`` [tokens/s] (peak / FLOPs per token),
    ``critical_batch`` [sequences] (weights only; int), ``ridge`` [FLOP/byte], ``deployment``
    (the :class:`roofline.Deployment` priced).

    Raises
    ------
    InvalidValueError
        A bad context, budget, batch range or convention.

    Examples
    --------
    >>> from roofline import get_model, get_accelerator
    >>> c = throughput_curves(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    >>> c["kv_limit"], c["critical_batch"], round(c["ceiling"])
    (404, 317, 65919)
    >>> c = throughput_curves(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), flops="2p")
    >>> c["critical_batch"], round(c["ceiling"])
    (296, 61604)
    """
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 2:
        raise InvalidValueError("max_batch", max_batch, "must be an integer >= 2")
    from .estimate import _hardware_terms, _model_terms, criticality

    d = as_deployment(model, accelerator, flops=flops).as_bound()
    model, accelerator, flops = d.share, d.accelerator, d.flops
    batch = np.arange(1, max_batch + 1)
    # the step's inputs at this context (docs/conventions.md, "Architectures"): a MoE step reads the experts its
    # batch touches (uniform routing), windowed layers read min(c, w) tokens (effective per-token rates), other
    # towers are not read; the peak is that of the matmul inputs (FP8 with FP8 activations)
    terms = _model_terms(model, flops, 1, context)
    per_token, attention = terms["flops_per_token"], terms["attention_flops_per_token"]
    hardware = {name: float(value) for name, value in _hardware_terms(accelerator, model).items()}
    if model.is_moe:
        weights = np.array([float(model.decode_weight_bytes(int(b))) for b in batch])
    else:
        weights = np.full(max_batch, float(terms["weight_bytes"]))
    common = dict(weight_bytes=weights, flops_per_token=float(per_token), overhead=0, **hardware)
    weights_only = f.throughput(batch=batch, context_sum=np.zeros_like(batch), kv_bytes_per_token=0,
                                attention_flops_per_token=0, **common)
    with_kv = f.throughput(batch=batch, context_sum=batch * context,
                           kv_bytes_per_token=float(terms["kv_bytes_per_token"]),
                           attention_flops_per_token=float(attention), **common)
    kv_limit = int(f.sequences_that_fit(budget=kv_budget, kv_bytes_per_token=terms["kv_bytes_per_token"],
                                        context=context))
    if d.tensor_parallel_size > 1:  # one GPU's share (ModelConfig.per_gpu): add the all-reduce of every step
        ar_terms = d.allreduce_terms()
        ar = f.decode_allreduce_time(batch=batch, **{k: v if isinstance(v, int) else float(v)
                                                     for k, v in ar_terms.items()})
        weights_only = batch / (batch / weights_only + ar)
        with_kv = batch / (batch / with_kv + ar)
    with_kv = np.where(batch <= kv_limit, with_kv, np.nan)
    critical = criticality(d, context=0).critical_batch_weights_only
    return dict(batch=batch, weights_only=weights_only, with_kv=with_kv, kv_limit=kv_limit,
                ceiling=hardware["peak_flops"] / float(per_token), critical_batch=int(critical),
                ridge=hardware["peak_flops"] / hardware["bandwidth"], context=context, kv_budget=kv_budget, flops=flops,
                deployment=d)


def useful_share_curves(batches: Sequence[int] = _SHARE_BATCHES, *, points: int = 81) -> dict[str, Any]:
    """The numbers of the useful-share chart.

    Parameters
    ----------
    batches : sequence of int >= 1 [sequences]
    points : int >= 2, spreads drawn, evenly from 0 to 1

    Returns
    -------
    dict with ``spread`` (float array [0, 1]; (high - low) / (high + low) of the uniform
    lengths), and ``exact[B]`` and ``approx[B]`` (float arrays [1]) for each B: the
    expected useful share E[X / max] and the lesson's mean / longest (1 at spread 0).

    Raises
    ------
    InvalidValueError
        A batch that is not a positive integer, or fewer than 2 points.

    Examples
    --------
    >>> c = useful_share_curves([4], points=3)
    >>> [round(float(x), 4) for x in c["exact"][4]]
    [1.0, 0.772, 0.625]
    """
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise InvalidValueError("points", points, "must be an integer >= 2")
    spread = np.linspace(0, 1, points)
    positive = spread[1:]
    exact, approx = {}, {}
    for b in batches:
        exact[b] = np.concatenate([[1.0], f.expected_useful_share_uniform(batch=b, spread=positive)])
        approx[b] = np.concatenate([[1.0], np.asarray(f.approx_useful_share_uniform(batch=b, spread=positive), float)])
    return dict(spread=spread, exact=exact, approx=approx)


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    _, figure_class = _matplotlib()
    if ax is not None:
        return cast("Figure", ax.figure), ax
    fig = figure_class(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def throughput_chart(
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    ax: Axes | None = None,
    context: int = 1000,
    kv_budget: Any = 53 * 10**9,
    max_batch: int = 512,
    flops: str = FROM_DEPLOYMENT,
) -> Figure:
    """Draw decode throughput against batch size (the lesson's left chart).

    Parameters
    ----------
    model, accelerator, context, kv_budget, max_batch, flops
        As :func:`throughput_curves`.
    ax : matplotlib Axes or None
        Draw into these axes; None makes a new figure (6.4 x 5 in, the legend below the axes).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    InvalidValueError
        Bad inputs.
    MissingExtraError
        matplotlib is not installed.
    """
    c = throughput_curves(model, accelerator, context=context, kv_budget=kv_budget, max_batch=max_batch, flops=flops)
    d = c["deployment"]
    fig, ax = _new_axes(ax, (6.4, 5.0))
    kilo = 1000
    ax.plot(c["batch"], c["weights_only"] / kilo, color="tab:blue", lw=2, label="weights only")
    ax.plot(c["batch"], c["with_kv"] / kilo, color="tab:orange", lw=2, ls="--",
            label=f"+ each sequence's KV at {context:,} tokens")
    limit = c["kv_limit"]
    if limit <= max_batch:
        y = c["with_kv"][limit - 1] / kilo
        ax.plot([limit], [y], marker="o", color="tab:orange")
        gb = f"{float(kv_budget) / 1e9:.2f}".rstrip("0").rstrip(".")
        ax.annotate(f"KV cache full\n({gb} GB): {limit:,} sequences", (limit, y),
                    xytext=(0, -14), textcoords="offset points", ha="center", va="top", fontsize=9,
                    color="tab:orange",
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85))
    ax.axhline(c["ceiling"] / kilo, color="0.3", ls=":", lw=1.5,
               label=f"compute ceiling: peak / F = {c['ceiling'] / kilo:.1f}k tokens/s"
               + ("" if d.tensor_parallel_size == 1 else "\n(the all-reduce left out)"))
    ax.axvline(c["critical_batch"], color="tab:red", ls=":", lw=1.5,
               label=f"ridge: B* = {c['critical_batch']} ({c['ridge']:.0f} FLOP/byte)")
    ax.set_xlim(0, max_batch)
    ax.set_ylim(0, c["ceiling"] / kilo * 1.15)
    ax.set_xlabel("batch size B [sequences]")
    ax.set_ylabel("decode throughput [thousand tokens/s]")
    convention = "2 x P FLOPs per token" if d.flops == "2p" else "exact FLOPs"
    ax.set_title(f"{d.model.name} on {d.where}\n(roofline, {convention})", fontsize=10)
    ax.grid(True, alpha=0.3)
    # below the axes, outside the data: inside, any corner covers a curve (lower right hid the KV curve's end)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8.5, frameon=False)
    return fig


def useful_share_chart(
    *, ax: Axes | None = None, batches: Sequence[int] = _SHARE_BATCHES, points: int = 81
) -> Figure:
    """Draw the expected useful share against the spread of uniform lengths (the lesson's right chart).

    Parameters
    ----------
    ax : matplotlib Axes or None
        Draw into these axes; None makes a new figure (6.4 x 4.4 in).
    batches, points
        As :func:`useful_share_curves`.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    InvalidValueError
        Bad inputs.
    MissingExtraError
        matplotlib is not installed.
    """
    c = useful_share_curves(batches, points=points)
    fig, ax = _new_axes(ax, (6.4, 4.4))
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]
    percent = 100
    from matplotlib import patheffects

    # the approximation is drawn over the exact line, dashed with a white edge, so it stays visible where the
    # two overlap (large B, where mean / longest is within a fraction of a percent of E[X / max])
    dashed: dict[str, Any] = dict(lw=1.3, ls=(0, (4, 2.5)), zorder=3,
                  path_effects=[patheffects.Stroke(linewidth=2.6, foreground="white"), patheffects.Normal()])
    for i, b in enumerate(batches):
        color = colors[i % len(colors)]
        ax.plot(c["spread"], c["exact"][b] * percent, color=color, lw=2.6, alpha=0.55, zorder=2, label=f"B = {b}")
        ax.plot(c["spread"], c["approx"][b] * percent, color=color, **dashed)
    ax.plot([], [], color="0.2", lw=2.6, alpha=0.55, label="exact E[X / max]")
    ax.plot([], [], color="0.2", label="mean / longest", **dashed)
    ax.set_xlim(0, 1)
    ax.set_ylim(45, 101)
    ax.set_xlabel("spread s of output lengths [1]: uniform on [mean (1 - s), mean (1 + s)]")
    ax.set_ylabel("expected useful share of a static batch [%]")
    ax.set_title("Static batching of B requests with uniform random output lengths", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize=8.5, ncol=2)
    return fig


#: Largest ``dpi`` write_charts takes: a guard, not a measured limit; the larger chart, 6.4 x 5.0 inches, at 1,200 dpi
#: is 7,680 x 6,000 pixels (46 megapixels), print resolution; 10**6 would ask matplotlib for terapixels.
MAX_DPI = 1200


def write_charts(
    out_dir: str | os.PathLike[str],
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    formats: Sequence[str] = ("png", "svg"),
    context: int = 1000,
    kv_budget: Any = 53 * 10**9,
    max_batch: int = 512,
    flops: str = FROM_DEPLOYMENT,
    dpi: int = 150,
) -> list[Path]:
    """Write both charts to ``out_dir`` in each format; return the paths written.

    Parameters
    ----------
    out_dir : path, created if missing
    model, accelerator, context, kv_budget, max_batch, flops
        As :func:`throughput_curves`.
    formats : sequence of {"png", "svg"}
    dpi : int in [1, :data:`MAX_DPI`], resolution of the PNG files [dots per inch]

    Returns
    -------
    list of Path: ``throughput_vs_batch.<fmt>`` and ``useful_share_vs_spread.<fmt>``.

    Raises
    ------
    InvalidValueError
        An unknown format, a ``dpi`` that is not an int in [1, MAX_DPI], or bad inputs; ``out_dir``
        that cannot be written, or that another run is writing into now (it is locked while written).
    MissingExtraError
        matplotlib is not installed.
    """
    for fmt in formats:
        if fmt not in ("png", "svg"):
            raise InvalidValueError("format", fmt, "expected png or svg")
    check_count("dpi", dpi, minimum=1)
    if dpi > MAX_DPI:
        raise InvalidValueError("dpi", dpi, f"must be <= {MAX_DPI} (MAX_DPI)")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidValueError("out_dir", str(out_dir), f"cannot create the folder: {exc.strerror or exc}") from None
    figures = {
        CHART_NAMES[0]: throughput_chart(model, accelerator, context=context, kv_budget=kv_budget,
                                         max_batch=max_batch, flops=flops),
        CHART_NAMES[1]: useful_share_chart(),
    }
    written = []
    try:
        with locked_folder("out_dir", out):  # a second run writing here now is refused, not mixed in
            for stem, fig in figures.items():
                for fmt in formats:
                    path = out / f"{stem}.{fmt}"
                    metadata = {"Date": None} if fmt == "svg" else {}
                    try:
                        with atomic_write(path, binary=True) as fh:
                            fig.savefig(fh, format=fmt, dpi=dpi, metadata=metadata)
                    except OSError as exc:
                        reason = f"cannot write {path.name}: {exc.strerror or exc}"
                        raise InvalidValueError("out_dir", str(out_dir), reason) from None
                    written.append(path)
    except OSError as exc:  # the folder cannot be opened to lock it
        raise InvalidValueError("out_dir", str(out_dir), f"cannot open the folder: {exc.strerror or exc}") from None
    return written
