"""``roofline fit``: on how many GPUs a model fits, and how fast, for tensor-parallel sizes 1, 2, 4, 8.

For a model and an accelerator, one row per tensor-parallel size T (vLLM's
``--tensor-parallel-size``): one GPU's weight bytes (attention and MLP projections and
experts split 1/T, embeddings and lm_head split by vocabulary, norms and the router
replicated), its KV budget (usable memory x utilization - its weights - the reserve, as
``roofline report``'s real budget), KV heads and KV bytes per token per GPU (split, or one
replicated KV head per GPU when T exceeds the KV heads; MLA's latent on every GPU), the
sequences of ``--context`` tokens the group holds, the batch-1 step time with the
all-reduce split out (latency and bandwidth terms), and the group's tokens/s at the KV
limit. A size the model's heads or widths do not divide, or that the accelerator's links
cannot hold, is listed with the reason. The answer line names the smallest T that fits
(docs/conventions.md, "Tensor parallelism"). Times are the roofline bound (datasheet
constants, no overhead).

The reserve is the one ``roofline report`` subtracts for its real budget: the activation peak
and non-torch memory of a published vLLM log for that per-GPU model size on that card (3.05
GiB for Llama 3 and 3.1 8B at T = 1 on an 80 GB card). vLLM sizes its KV cache after taking
that memory (its log's available_kv_cache_memory), so a vLLM user comparing the sequences
here with vLLM's maximum concurrency expects it subtracted. Where no published log covers
the share, the reserve is 0 and the budget is the upper bound, marked * in the table
(docs/conventions.md, "Memory").

Example: ``roofline fit --model llama-3.1-70b --accelerator h100-sxm``.
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from typing import Any

import attrs

from .. import estimate
from .. import formulas as f
from .._checks import check_int
from ..deployment import FROM_DEPLOYMENT, Deployment, as_deployment
from ..errors import InvalidValueError
from ..hardware import Accelerator
from ..models import ModelConfig, ModelShare
from ..units import fit_width, format_time
from ._args import (
    add_flops_option,
    add_model_options,
    citation_url,
    deployment_from_args,
    int_arg,
    number_arg,
    plain,
)

DEFAULT_SIZES = (1, 2, 4, 8)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``fit`` subcommand."""
    p = sub.add_parser(
        "fit",
        help="how many GPUs a model needs: tensor-parallel sizes 1, 2, 4, 8 side by side",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(p)
    p.add_argument("--context", type=int_arg("--context", 1), default=1000,
                   help="tokens of context per sequence (default: %(default)s)")
    p.add_argument("--tensor-parallel-size", "--tp", type=int_arg("--tensor-parallel-size", 1), nargs="+",
                   default=list(DEFAULT_SIZES), dest="sizes", metavar="T",
                   help="tensor-parallel sizes to compare (default: 1 2 4 8)")
    p.add_argument("--utilization", "--gpu-memory-utilization",
                   type=number_arg("--utilization", positive=True, at_most_one=True),
                   default=Fraction(9, 10), help="share of usable memory the server may use (default: 0.9)")
    p.add_argument("--block-size", type=int_arg("--block-size", 1), default=16,
                   help="paged KV block size in tokens (default: %(default)s)")
    add_flops_option(p, default="exact")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of the table")
    p.set_defaults(func=run)


def _row(base: Deployment, T: int, *, context: int, utilization: Any, block_size: int) -> dict[str, Any]:
    """One tensor-parallel size: sizes per GPU, what fits, batch-1 step and throughput at the KV limit."""
    row: dict[str, Any] = {"tensor_parallel_size": T}
    try:
        deployment = attrs.evolve(base, parallelism=T)
        link = deployment.accelerator.link(T) if T > 1 else None
    except InvalidValueError as exc:
        return dict(row, status="refused", reason=f"{exc.field}={exc.value}: {exc.reason}")
    model, share, accelerator = deployment.model, deployment.share, deployment.accelerator
    reserve = estimate.published_reserve(share, accelerator)
    budget = f.kv_budget(memory=Fraction(accelerator.usable_memory), utilization=utilization,
                         weight_bytes=Fraction(share.weight_bytes), reserved=0 if reserve is None else reserve.value)
    row.update(
        reserve_bytes=0.0 if reserve is None else float(reserve.value),
        reserve=None if reserve is None else {"kind": reserve.source.kind, "citation": reserve.source.citation,
                                              "date": reserve.source.date, "conditions": reserve.source.conditions},
        kv_budget_kind="upper bound (reserve 0)" if reserve is None else "real (published reserve)",
        link=None if link is None else link.name,
        weight_bytes_per_gpu=float(share.weight_bytes),
        kv_heads_per_gpu=None if share.is_mla else share.num_key_value_heads,
        kv_heads_replicated=(not share.is_mla) and model.num_key_value_heads < T,
        kv_bytes_per_token_per_gpu=float(share.kv_bytes_per_token),
        kv_budget_per_gpu_bytes=float(budget),
    )
    one = estimate.decode_step(deployment, batch=1, context=context)
    row["batch_1"] = {"step_time_s": float(one.step_time), "allreduce_time_s": float(one.allreduce_time),
                      "allreduce_latency_time_s": float(one.allreduce_latency_time),
                      "allreduce_bandwidth_time_s": float(one.allreduce_bandwidth_time),
                      "memory_time_s": float(one.memory_time), "compute_time_s": float(one.compute_time),
                      "tokens_per_s": float(one.throughput)}
    if budget <= 0:
        return dict(row, status="does not fit", reason="the weights per GPU leave no KV budget",
                    sequences=0, sequences_blocks=0, kv_limit=None)
    cap = estimate.kv_capacity(deployment, budget=budget, context=context, block_size=block_size)
    row.update(sequences=cap.sequences, sequences_blocks=cap.sequences_blocks)
    if cap.sequences_blocks < 1:
        return dict(row, status="does not fit", reason=f"no sequence of {context:,} tokens fits the KV budget",
                    kv_limit=None)
    limit = estimate.decode_step(deployment, batch=cap.sequences_blocks, context=context)
    row.update(status="fits", kv_limit={
        "batch": cap.sequences_blocks, "step_time_s": float(limit.step_time),
        "allreduce_time_s": float(limit.allreduce_time), "tokens_per_s": float(limit.throughput),
        "tokens_per_s_per_gpu": float(limit.throughput) / T, "bound": limit.bound})
    return row


def build_fit(
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    context: int = 1000,
    sizes: tuple[int, ...] | list[int] = DEFAULT_SIZES,
    utilization: Any = Fraction(9, 10),
    block_size: int = 16,
    flops: str = FROM_DEPLOYMENT,
) -> dict[str, Any]:
    """The fit table as a JSON-ready dict (SI units, floats).

    Parameters
    ----------
    model : Deployment or ModelConfig (a whole model)
        A Deployment's model, accelerator and FLOPs convention (its T is replaced by each of
        ``sizes``; the table is the bound's).
    accelerator : Accelerator (beside a ModelConfig only)
    context : int >= 1 [tokens] per sequence
    sizes : sequence of int >= 1 [GPUs], the tensor-parallel sizes T to compare
    utilization : in (0, 1], share of usable memory the server may use
    block_size : int >= 1 [tokens/block]
    flops : {"exact", "2p"}, default "exact" (a Deployment's own)

    Returns
    -------
    dict with ``model``, ``accelerator``, ``context``, ``rows`` (one per T: ``status`` "fits",
    "does not fit" or "refused" with ``reason``; per-GPU weight bytes, KV heads, KV bytes per
    token and KV budget, with ``reserve_bytes``, ``reserve`` (its source, or None) and
    ``kv_budget_kind`` ("real (published reserve)" or "upper bound (reserve 0)");
    ``sequences`` the group holds; ``batch_1`` step time with the
    all-reduce and its latency and bandwidth terms; ``kv_limit`` batch, step time and tokens/s
    of the group and per GPU), ``smallest_fitting`` (T or None) and ``none_fit_because`` (None, or why no
    size fits: every size refused, or the largest that ran too small, and whether a larger group would
    need the network between servers).

    Raises
    ------
    InvalidValueError
        A bad context, size, utilization, block size or FLOPs convention; a model that is
        already one GPU's share.

    Notes
    -----
    Each GPU's KV budget subtracts the reserve of :func:`roofline.estimate.published_reserve`
    (the real budget of ``roofline report``), 0 where no published log covers the share: what
    vLLM leaves for its cache after the activation peak and non-torch memory, which is what a
    vLLM user compares with (docs/conventions.md, "Memory").
    """
    check_int("context", context, minimum=1)
    check_int("block_size", block_size, minimum=1)
    for T in sizes:
        check_int("tensor_parallel_size", T, minimum=1)
    if not 0 < utilization <= 1:
        raise InvalidValueError("utilization", float(utilization), "must be in (0, 1]")
    if isinstance(model, ModelShare):
        raise InvalidValueError("model", model.name, "expected a whole model, not one GPU's share")
    base = as_deployment(model, accelerator, flops=flops, estimate=None)  # names a bad convention
    model, accelerator, flops = base.model, base.accelerator, base.flops
    rows = [_row(base, T, context=context, utilization=utilization, block_size=block_size)
            for T in sorted(set(sizes))]
    smallest = next((r["tensor_parallel_size"] for r in rows if r["status"] == "fits"), None)
    return {
        "time_kind": "bound",
        "model": {"name": model.name, "weight_format": model.weight_format, "kv_dtype": model.kv_dtype,
                  "weight_bytes": float(model.weight_bytes), "num_attention_heads": model.num_attention_heads,
                  "num_key_value_heads": model.num_key_value_heads, "multi_head_latent_attention": model.is_mla},
        "accelerator": {"key": accelerator.key, "name": accelerator.name,
                        "usable_memory_bytes": float(accelerator.usable_memory)},
        "context": context, "utilization": float(utilization), "block_size": block_size, "flops_convention": flops,
        "rows": rows,
        "smallest_fitting": smallest,
        "none_fit_because": None if smallest is not None else _why_none(rows, accelerator),
    }


def _why_none(rows: list[dict[str, Any]], accelerator: Accelerator) -> str:
    """Why no size fits: each refused (the heads or widths do not divide, no link holds it), or the largest
    size that ran leaves too little memory, and whether a larger group would need the network between servers."""
    ran = [r["tensor_parallel_size"] for r in rows if r["status"] != "refused"]
    if not ran:
        return "every size is refused (the reasons above)"
    largest = max(ran)
    try:
        accelerator.link(largest + 1)
    except InvalidValueError:
        return (f"the weights and KV of T = {largest} do not fit, and a larger group needs the network between "
                "servers, which is not modelled")
    return f"the weights and KV of T = {largest} do not fit; try a larger --tensor-parallel-size"


def _t(seconds: float) -> str:
    return format_time(seconds, decimals=(3, 3, 2))


def format_fit(r: dict[str, Any]) -> str:
    """The fit table as text: what each GPU holds, then the times and rates, each table within 100 columns."""
    m, a = r["model"], r["accelerator"]
    out = [
        f"roofline fit: {m['name']} (weights {m['weight_format']}, {m['weight_bytes'] / 1e9:.2f} GB; KV "
        f"{m['kv_dtype']}) on {a['name']}",
        f"  {a['usable_memory_bytes'] / 2**30:.1f} GiB usable x {r['utilization']:g} per GPU",
        f"  tensor parallelism of degree T: sizes per GPU; sequences of {r['context']:,} tokens the group holds "
        f"({r['block_size']}-token blocks); times are the roofline bound, FLOPs [{r['flops_convention']}]",
        "",
        f"  {'T':>2} | {'weights/GPU':>11} {'KV budget/GPU':>13} {'KV heads':>8} {'KV B/token':>10} {'seqs':>6}",
    ]
    times = [f"  {'T':>2} | {'batch-1 step':>12} {'all-reduce':>10} {'(latency)':>10} | {'KV limit':>8} "
             f"{'tokens/s':>9} {'per GPU':>8}  link"]
    for row in r["rows"]:
        T = row["tensor_parallel_size"]
        if row["status"] == "refused":
            out.append(f"  {T:>2} | refused: {row['reason']}")
            continue
        heads = "latent" if row["kv_heads_per_gpu"] is None else (
            f"{row['kv_heads_per_gpu']}{' rep' if row['kv_heads_replicated'] else ''}")
        b1 = row["batch_1"]
        lim = row["kv_limit"]
        tail = (f"{lim['batch']:>8,} {lim['tokens_per_s']:>9,.0f} {lim['tokens_per_s_per_gpu']:>8,.0f}" if lim
                else f"{'-':>8} {'-':>9} {'-':>8}")
        budget = row["kv_budget_per_gpu_bytes"]
        mark = " " if row["reserve"] is not None else "*"
        ar, lat = ("-", "-") if T == 1 else (_t(b1["allreduce_time_s"]), _t(b1["allreduce_latency_time_s"]))
        out.append(
            f"  {T:>2} | {row['weight_bytes_per_gpu'] / 1e9:>8.2f} GB {budget / 1e9:>9.2f} GB{mark} {heads:>8} "
            f"{row['kv_bytes_per_token_per_gpu']:>10,.0f} {row['sequences_blocks']:>6,}"
            + ("" if row["status"] == "fits" else f"  ({row['reason']})"))
        times.append(f"  {T:>2} | {_t(b1['step_time_s']):>12} {ar:>10} {lat:>10} | {tail}  {row['link'] or '-'}")
    out += ["", *times]
    smallest = r["smallest_fitting"]
    out += [
        "",
        *_reserve_lines(r),
        f"  KV heads: per GPU (\"rep\": one replicated head per GPU when T exceeds the {m['num_key_value_heads']} KV "
        "heads; \"latent\": MLA's latent KV on every GPU); tokens/s at the KV limit are the group's",
        f"  answer: {m['name']} fits on {smallest} x {a['name']} (--tensor-parallel-size {smallest})"
        if smallest is not None else
        f"  answer: {m['name']} fits on none of these groups of {a['name']}: {r['none_fit_because']}",
    ]
    return fit_width("\n".join(out))


def _reserve_lines(r: dict[str, Any]) -> list[str]:
    """What the KV budget subtracts: the published reserve where one is known, else 0 (an upper bound, marked *)."""
    rows = [row for row in r["rows"] if row["status"] != "refused"]
    real = [row for row in rows if row["reserve"] is not None]
    out = [f"  KV budget/GPU = usable x {r['utilization']:g} - weights/GPU - reserve (activation peak and non-torch "
           "memory), as the real budget of roofline report"]
    for row in real:
        res = row["reserve"]
        out.append(f"    T = {row['tensor_parallel_size']}: reserve {row['reserve_bytes'] / 2**30:.2f} GiB from a "
                   f"published vLLM log, {citation_url(res['citation'])} ({res['date']}); --json quotes it")
    if len(real) < len(rows):
        out.append("    * reserve 0: no published log for that per-GPU model size on this card, so the budget is an "
                   "upper bound and so are the sequences")
    return out


def run(args: argparse.Namespace) -> int:
    """Print the fit table for the parsed arguments; return 0."""
    deployment, _ = deployment_from_args(args)
    r = build_fit(deployment, context=args.context, sizes=args.sizes, utilization=args.utilization,
                  block_size=args.block_size)
    print(json.dumps(r, indent=2) if args.json else format_fit(r))
    return 0
