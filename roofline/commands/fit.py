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
from ..deployment import FROM_DEPLOYMENT, Deployment, Parallelism, as_deployment
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

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_PIPELINE_SIZES = (1, 2, 4, 8)
MAX_GPUS = 64


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``fit`` subcommand."""
    p = sub.add_parser(
        "fit",
        help="how many GPUs a model needs: tensor x pipeline parallel sizes up to 64 GPUs side by side",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(p)
    p.add_argument("--context", type=int_arg("--context", 1), default=1000,
                   help="tokens of context per sequence (default: %(default)s)")
    p.add_argument("--tensor-parallel-size", "-tp", "--tp", type=int_arg("--tensor-parallel-size", 1), nargs="+",
                   default=list(DEFAULT_SIZES), dest="sizes", metavar="T",
                   help="tensor-parallel sizes to compare (default: 1 2 4 8 16 32 64)")
    p.add_argument("--pipeline-parallel-size", "-pp", type=int_arg("--pipeline-parallel-size", 1), nargs="+",
                   default=list(DEFAULT_PIPELINE_SIZES), dest="pipeline_sizes", metavar="P",
                   help="pipeline-parallel sizes to combine with each T (default: 1 2 4 8)")
    p.add_argument("--max-gpus", type=int_arg("--max-gpus", 1), default=MAX_GPUS,
                   help="list only T x P up to this many GPUs (default: %(default)s)")
    p.add_argument("--utilization", "--gpu-memory-utilization",
                   type=number_arg("--utilization", positive=True, at_most_one=True),
                   default=Fraction(9, 10), help="share of usable memory the server may use (default: 0.9)")
    p.add_argument("--block-size", type=int_arg("--block-size", 1), default=16,
                   help="paged KV block size in tokens (default: %(default)s)")
    add_flops_option(p, default="exact")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of the table")
    p.set_defaults(func=run)


def _row(base: Deployment, T: int, *, context: int, utilization: Any, block_size: int,
         P: int = 1) -> dict[str, Any]:
    """One T x P: sizes per GPU, what fits, batch-1 step and throughput at the KV limit."""
    row: dict[str, Any] = {"tensor_parallel_size": T, "pipeline_parallel_size": P, "gpus": T * P}
    try:
        deployment = attrs.evolve(base, parallelism=Parallelism(T, P))
        link = deployment.accelerator.link(T) if T > 1 else None
        if P > 1:
            deployment.send_terms()  # the sends' links, refused by name
    except InvalidValueError as exc:
        return dict(row, status="refused", reason=f"{exc.field}={exc.value}: {exc.reason}")
    if P > 1:
        return _pipeline_row(row, deployment, link, context=context, utilization=utilization, block_size=block_size)
    model, share, accelerator = deployment.model, deployment.share, deployment.accelerator
    reserve = estimate.published_reserve(share, accelerator)
    budget = f.kv_budget(memory=Fraction(accelerator.usable_memory), utilization=utilization,
                         weight_bytes=Fraction(share.weight_bytes), reserved=0 if reserve is None else reserve.value)
    row.update(
        reserve_bytes=0.0 if reserve is None else float(reserve.value),
        reserve=None if reserve is None else {"kind": reserve.source.kind, "citation": reserve.source.citation,
                                              "date": reserve.source.date, "conditions": reserve.source.conditions},
        kv_budget_kind="upper bound (reserve 0)" if reserve is None else "real (published reserve)",
        link=_link_name(deployment, link),
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


def _pipeline_row(row: dict[str, Any], deployment: Deployment, link: Any, *, context: int, utilization: Any,
                  block_size: int) -> dict[str, Any]:
    """A row of P > 1 stages: the binding stage's sizes (the least KV blocks), the pipeline's sequences, one
    batch's step, and at the KV limit P virtual engines of KV-limit / P sequences each (throughput_pp, n = P)."""
    P, T, accelerator = deployment.pipeline_parallel_size, deployment.tensor_parallel_size, deployment.accelerator
    stages = deployment.stages()
    memory = Fraction(accelerator.usable_memory)
    budgets = [f.kv_budget(memory=memory, utilization=utilization, weight_bytes=Fraction(st.weight_bytes), reserved=0)
               for st in stages]
    blocks = deployment.kv_blocks(block_size=block_size, utilization=utilization)
    binding = min(range(P), key=lambda i: (budgets[i] // (block_size * stages[i].kv_bytes_per_token), i))
    st = stages[binding]
    per_seq = int(f.blocks_per_sequence(context=context, block_size=block_size))
    budget = budgets[binding]
    seqs_tokens = 0 if budget <= 0 else int(f.sequences_that_fit(
        budget=budget, kv_bytes_per_token=st.kv_bytes_per_token, context=context))
    row.update(reserve_bytes=0.0, reserve=None, kv_budget_kind="upper bound (reserve 0)",
               link=_link_name(deployment, link), weight_bytes_per_gpu=float(max(x.weight_bytes for x in stages)),
               kv_heads_per_gpu=None if deployment.share.is_mla else deployment.share.num_key_value_heads,
               kv_heads_replicated=(not deployment.share.is_mla) and deployment.model.num_key_value_heads < T,
               kv_bytes_per_token_per_gpu=float(st.kv_bytes_per_token), kv_budget_per_gpu_bytes=float(budget),
               stage_layers=[x.layers for x in stages], binding_stage=binding,
               pipeline_sends=list(deployment.pipeline_sends()))
    one = estimate.decode_step(deployment, batch=1, context=context)
    row["batch_1"] = {"step_time_s": float(one.step_time), "allreduce_time_s": float(one.allreduce_time),
                      "allreduce_latency_time_s": float(one.allreduce_latency_time),
                      "allreduce_bandwidth_time_s": float(one.allreduce_bandwidth_time),
                      "send_time_s": float(one.send_time),
                      "memory_time_s": float(one.memory_time), "compute_time_s": float(one.compute_time),
                      "tokens_per_s": float(one.throughput)}
    sequences = blocks // per_seq
    row.update(sequences=seqs_tokens if budget > 0 else 0, sequences_blocks=sequences)
    if budget <= 0:
        return dict(row, status="does not fit", reason="the weights per GPU leave no KV budget", kv_limit=None)
    per_engine = sequences // P
    if per_engine < 1:
        return dict(row, status="does not fit", reason=f"no sequence of {context:,} tokens per virtual engine "
                    "fits the KV budget", kv_limit=None)
    limit = estimate.decode_step(deployment, batch=per_engine, context=context)
    rate = float(P * per_engine / limit.step_time)  # throughput_pp with P batches in flight
    row.update(status="fits", kv_limit={
        "batch": per_engine * P, "batch_per_virtual_engine": per_engine, "step_time_s": float(limit.step_time),
        "allreduce_time_s": float(limit.allreduce_time), "send_time_s": float(limit.send_time),
        "tokens_per_s": rate, "tokens_per_s_per_gpu": rate / (T * P), "bound": limit.bound})
    return row


def _link_name(deployment: Deployment, link: Any) -> str | None:
    """The group's link, and the network where the group or a stage boundary crosses nodes."""
    a = deployment.accelerator
    crosses = deployment.gpus > a.node_gpus and a.network is not None
    names = [n for n in (None if link is None else link.name, a.network.name if crosses and a.network else None) if n]
    return " + ".join(names) or None


def build_fit(
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    context: int = 1000,
    sizes: tuple[int, ...] | list[int] = DEFAULT_SIZES,
    utilization: Any = Fraction(9, 10),
    block_size: int = 16,
    flops: str = FROM_DEPLOYMENT,
    pipeline_sizes: tuple[int, ...] | list[int] = DEFAULT_PIPELINE_SIZES,
    max_gpus: int = MAX_GPUS,
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
    pipeline_sizes : sequence of int >= 1 [stages], the pipeline sizes P combined with each T
    max_gpus : int >= 1 [GPUs], only T x P up to this many are listed (default 64; P = 1 always)
    utilization : in (0, 1], share of usable memory the server may use
    block_size : int >= 1 [tokens/block]
    flops : {"exact", "2p"}, default "exact" (a Deployment's own)

    Returns
    -------
    dict with ``model``, ``accelerator``, ``context``, ``rows`` (one per T x P, fewest GPUs first, with
    ``tensor_parallel_size``, ``pipeline_parallel_size`` and ``gpus``; at P > 1 the sizes are the binding
    stage's (the least KV blocks), ``stage_layers``, ``pipeline_sends`` (inside, across nodes), the batch-1
    step's ``send_time_s``, and the KV limit is P virtual engines of ``batch_per_virtual_engine`` each,
    tokens/s with P batches in flight; ``status`` "fits",
    "does not fit" or "refused" with ``reason``; per-GPU weight bytes, KV heads, KV bytes per
    token and KV budget, with ``reserve_bytes``, ``reserve`` (its source, or None) and
    ``kv_budget_kind`` ("real (published reserve)" or "upper bound (reserve 0)");
    ``sequences`` the group holds; ``batch_1`` step time with the
    all-reduce and its latency and bandwidth terms; ``kv_limit`` batch, step time and tokens/s
    of the group and per GPU), ``smallest_fitting`` (T of the smallest that fits: fewest GPUs,
    then the fastest batch-1 step; or None), ``smallest_fitting_pipeline`` (its P) and
    ``none_fit_because`` (None, or why no size fits: every size refused, or the largest that ran too
    small, and whether a larger group would need the network between servers).

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
    for P in pipeline_sizes:
        check_int("pipeline_parallel_size", P, minimum=1)
    check_int("max_gpus", max_gpus, minimum=1)
    if not 0 < utilization <= 1:
        raise InvalidValueError("utilization", float(utilization), "must be in (0, 1]")
    if isinstance(model, ModelShare):
        raise InvalidValueError("model", model.name, "expected a whole model, not one GPU's share")
    base = as_deployment(model, accelerator, flops=flops, estimate=None)  # names a bad convention
    model, accelerator, flops = base.model, base.accelerator, base.flops
    pairs = sorted(((T, P) for T in set(sizes) for P in set(pipeline_sizes) if T * P <= max_gpus or P == 1),
                   key=lambda tp: (tp[0] * tp[1], tp[1], tp[0]))
    rows = [_row(base, T, P=P, context=context, utilization=utilization, block_size=block_size) for T, P in pairs]
    fitting = [r for r in rows if r["status"] == "fits"]
    best = min(fitting, key=lambda r: (r["gpus"], r["batch_1"]["step_time_s"]), default=None)
    smallest = None if best is None else best["tensor_parallel_size"]
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
        "smallest_fitting_pipeline": None if best is None else best["pipeline_parallel_size"],
        "none_fit_because": None if smallest is not None else _why_none(rows, accelerator),
    }


def _why_none(rows: list[dict[str, Any]], accelerator: Accelerator) -> str:
    """Why no size fits: each refused (the heads or widths do not divide, no link holds it), or the largest
    size that ran leaves too little memory, and whether a larger group would need the network between servers."""
    ran = [r for r in rows if r["status"] != "refused"]
    if not ran:
        return "every size is refused (the reasons above)"
    top = max(ran, key=lambda r: (r["gpus"], r["tensor_parallel_size"]))
    largest, P = top["tensor_parallel_size"], top["pipeline_parallel_size"]
    what = f"T = {largest}" if P == 1 else f"T x P = {largest} x {P}"
    try:
        accelerator.link(largest + 1)
    except InvalidValueError:
        if accelerator.network is None:
            return (f"the weights and KV of {what} do not fit, and a larger group needs the network between "
                    "servers, which is not sourced for this part")
    return (f"the weights and KV of {what} do not fit; try a larger --tensor-parallel-size or "
            "--pipeline-parallel-size")


def _t(seconds: float) -> str:
    return format_time(seconds, decimals=(3, 3, 2))


def format_fit(r: dict[str, Any]) -> str:
    """The fit table as text: what each GPU holds, then the times and rates, each table within 100 columns."""
    m, a = r["model"], r["accelerator"]
    out = [
        f"roofline fit: {m['name']} (weights {m['weight_format']}, {m['weight_bytes'] / 1e9:.2f} GB; KV "
        f"{m['kv_dtype']}) on {a['name']}",
        f"  {a['usable_memory_bytes'] / 2**30:.1f} GiB usable x {r['utilization']:g} per GPU",
        f"  tensor parallelism T x pipeline stages P: sizes per GPU (P > 1: the stage with the least KV room); "
        f"sequences of {r['context']:,} tokens the deployment holds ({r['block_size']}-token blocks); times "
        f"are the roofline bound, FLOPs [{r['flops_convention']}]",
        "",
        f"  {_tp_head()} | {'weights/GPU':>11} {'KV budget/GPU':>13} {'KV heads':>8} {'KV B/token':>10} "
        f"{'seqs':>6}",
    ]
    times = [f"  {_tp_head()} | {'batch-1 step':>12} {'all-reduce':>10} {'(latency)':>10} {'sends':>9} | "
             f"{'KV limit':>8} {'tokens/s':>9} {'per GPU':>8}  link"]
    links: dict[str, str] = {}  # each link's name -> its key (L1, L2... in order of first use), listed once below
    remarks: dict[str, str] = {}  # each reason a row does not fit -> its key ((a), (b)...)
    for row in r["rows"]:
        T = _tp(row)
        if row["status"] == "refused":
            out.append(f"  {T} | refused: {row['reason']}")
            continue
        heads = "latent" if row["kv_heads_per_gpu"] is None else (
            f"{row['kv_heads_per_gpu']}{' rep' if row['kv_heads_replicated'] else ''}")
        b1 = row["batch_1"]
        lim = row["kv_limit"]
        tail = (f"{lim['batch']:>8,} {lim['tokens_per_s']:>9,.0f} {lim['tokens_per_s_per_gpu']:>8,.0f}" if lim
                else f"{'-':>8} {'-':>9} {'-':>8}")
        budget = row["kv_budget_per_gpu_bytes"]
        mark = " " if row["reserve"] is not None else "*"
        one_gpu = row["tensor_parallel_size"] == 1
        ar, lat = ("-", "-") if one_gpu else (_t(b1["allreduce_time_s"]), _t(b1["allreduce_latency_time_s"]))
        sends = _t(b1["send_time_s"]) if row["pipeline_parallel_size"] > 1 else "-"
        out.append(
            f"  {T} | {row['weight_bytes_per_gpu'] / 1e9:>8.2f} GB {budget / 1e9:>9.2f} GB{mark} {heads:>8} "
            f"{row['kv_bytes_per_token_per_gpu']:>10,.0f} {row['sequences_blocks']:>6,}"
            + ("" if row["status"] == "fits" else
               f"  {remarks.setdefault(row['reason'], '(' + chr(ord('a') + len(remarks)) + ')')}"))
        link = "-" if not row["link"] else links.setdefault(row["link"], f"L{len(links) + 1}")
        times.append(f"  {T} | {_t(b1['step_time_s']):>12} {ar:>10} {lat:>10} {sends:>9} | {tail}  {link}")
    out += [*(f"  {key} {reason}" for reason, key in remarks.items()), "", *times,
            *(f"  {key}: {name}" for name, key in links.items())]
    smallest = r["smallest_fitting"]
    out += [
        "",
        *_reserve_lines(r),
        f"  KV heads: per GPU (\"rep\": one replicated head per GPU when T exceeds the {m['num_key_value_heads']} KV "
        "heads; \"latent\": MLA's latent KV on every GPU); tokens/s at the KV limit are the group's",
        "  P > 1: the KV limit is P virtual engines (vLLM V0), each of KV limit / P sequences; tokens/s with P "
        "batches in flight; sends: one batch's P - 1 stage sends",
        _answer(r) if smallest is not None else
        f"  answer: {m['name']} fits on none of these groups of {a['name']}: {r['none_fit_because']}",
    ]
    return fit_width("\n".join(out))


def _tp_head() -> str:
    return f"{'T x P':>7}"


def _tp(row: dict[str, Any]) -> str:
    T, P = row["tensor_parallel_size"], row["pipeline_parallel_size"]
    return f"{T:>2}" + (f" x {P:<2}" if P > 1 else "     ")


def _answer(r: dict[str, Any]) -> str:
    m, a, T, P = r["model"], r["accelerator"], r["smallest_fitting"], r["smallest_fitting_pipeline"]
    if P == 1:
        return f"  answer: {m['name']} fits on {T} x {a['name']} (--tensor-parallel-size {T})"
    return (f"  answer: {m['name']} fits on {T * P} x {a['name']} (--tensor-parallel-size {T} "
            f"--pipeline-parallel-size {P})")


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
                  block_size=args.block_size, pipeline_sizes=args.pipeline_sizes, max_gpus=args.max_gpus)
    print(json.dumps(r, indent=2) if args.json else format_fit(r))
    return 0
