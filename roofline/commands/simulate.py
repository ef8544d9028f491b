"""``roofline simulate``: serve a request trace under each policy and compare them.

Runs the exact step-level reference scheduler (:mod:`roofline.sim`) on a trace for a
model on an accelerator: one-by-one (serial), static batching and continuous batching,
with roofline step times (exact Fractions unless ``--float``), and prints one row per
policy: requests handed back and rejected, steps, makespan, output tokens/s, useful
share, TTFT, TPOT and E2E percentiles (nearest rank), peak KV and preemptions.

The KV pool is the budget the accelerator leaves at ``--utilization`` (usable memory x
utilization - weight bytes), in paged blocks of ``--block-size`` tokens, for every
policy (a request whose lifetime KV exceeds it is rejected).

The trace: by default the Azure LLM inference trace 2023 of a conversation service
shipped with the package (19,366 requests over one hour; Azure Public Dataset, CC-BY 4.0;
Patel et al., "Splitwise", ISCA 2024); ``--trace code`` the shipped coding-service trace
(8,819 requests); any other value is a file (``.gz`` read as gzip).

Examples: ``roofline simulate --limit 1000``; ``roofline simulate --trace code --float``;
``roofline simulate --trace my_trace.jsonl``
"""

from __future__ import annotations

import argparse
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

from .. import estimate
from ..errors import InvalidValueError
from ..hardware import get_accelerator
from ..models import load_model
from ..sim import POLICIES, SHIPPED_TRACES, KVPool, RooflineCostModel, SimResult, load_trace, shipped_trace
from ..units import GB, format_time
from ._args import add_estimate_option, add_flops_option, add_model_options, int_arg, number_arg, plain

DEFAULT_BATCH_SIZE = 8
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_BLOCK_SIZE = 16
#: The trace ``simulate`` serves when ``--trace`` is not given: the shipped conversation trace.
DEFAULT_TRACE = "conv"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` subcommand."""
    p = sub.add_parser(
        "simulate",
        help="serve a request trace under serial, static and continuous batching and compare",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--trace", default=DEFAULT_TRACE, metavar="{conv,code} or FILE",
                   help="request trace: 'conv' or 'code' for the shipped Azure LLM inference traces of 2023 "
                        "(conversation, 19,366 requests; code, 8,819 requests), or a file: Azure CSV "
                        "(TIMESTAMP,ContextTokens,GeneratedTokens), plain CSV or JSONL "
                        "(arrival_s,prompt_tokens,output_tokens), optionally gzip-compressed (.gz) "
                        "(default: %(default)s)")
    p.add_argument("--format", choices=("azure", "csv", "jsonl"), default=None,
                   help="trace format (default: from the extension and header)")
    p.add_argument("--limit", type=int_arg("--limit", 1), default=None,
                   help="serve only the first N requests of the trace")
    p.add_argument("--policy", choices=("all", *POLICIES), default="all", help="policy to run (default: all)")
    add_model_options(p)
    add_flops_option(p, default="exact")
    add_estimate_option(p)
    p.add_argument("--overhead", type=number_arg("--overhead"), default=Fraction(0),
                   help="fixed per-step overhead in seconds (default: 0)")
    p.add_argument("--float", action="store_true", dest="float_mode",
                   help="compute step times in floats instead of exact Fractions (faster, agrees to rounding)")
    p.add_argument("--batch-size", type=int_arg("--batch-size", 1), default=DEFAULT_BATCH_SIZE,
                   help="static batching: rows per batch (default: %(default)s)")
    p.add_argument("--max-wait", type=number_arg("--max-wait"), default=None,
                   help="static batching: start a partial batch once its oldest request waited this many seconds "
                        "(default: wait for a full batch or the end of the trace)")
    p.add_argument("--max-num-seqs", type=int_arg("--max-num-seqs", 1), default=DEFAULT_MAX_NUM_SEQS,
                   help="continuous batching: most sequences running at once (default: %(default)s, vLLM's)")
    p.add_argument("--admission", choices=("reserve", "on-demand", "on_demand"), default="reserve",
                   help="continuous batching: reserve each request's lifetime KV (P + O - 1) on admission, or "
                        "allocate blocks on demand and preempt by recompute (default: reserve)")
    p.add_argument("--max-prefill-tokens", type=int_arg("--max-prefill-tokens", 1), default=None,
                   help="continuous batching: prefill token budget per step (default: none)")
    p.add_argument("--block-size", type=int_arg("--block-size", 1), default=DEFAULT_BLOCK_SIZE,
                   help="paged KV block size in tokens; 1 for token accounting (default: %(default)s)")
    p.add_argument("--utilization", type=number_arg("--utilization", positive=True, at_most_one=True),
                   default=Fraction(9, 10),
                   help="share of usable memory the server may use; KV budget = usable x this - weights "
                        "(default: 0.9)")
    p.add_argument("--kv-budget-gb", type=number_arg("--kv-budget-gb", positive=True), default=None,
                   help="KV budget in GB (1e9 bytes), instead of the one --utilization gives")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of the table")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="also write DIR/<policy>-requests.csv and DIR/<policy>-steps.csv")
    p.set_defaults(func=run)


def trace_path(value: str) -> str:
    """The file ``--trace`` names: a shipped trace's path for ``conv``/``code``, else ``value`` itself.

    Raises
    ------
    InvalidValueError
        ``value`` is a shipped name and also a file in the current folder (field ``--trace``):
        ambiguous, so refused rather than guessed; ``./conv`` names the file.
    """
    if value not in SHIPPED_TRACES:
        return value
    if os.path.lexists(value):
        raise InvalidValueError("--trace", value, f"names the shipped trace and a file here; write ./{value} "
                                                  "for the file")
    return str(shipped_trace(value))


def simulate_trace(args: argparse.Namespace) -> dict[str, Any]:
    """Run the policies the parsed arguments ask for; return the inputs and the SimResults.

    Returns
    -------
    dict with ``requests`` (list of Request), ``model``, ``accelerator``, ``pool`` (KVPool),
    ``budget`` [bytes], ``results`` (list of SimResult, in the order serial, static, continuous).

    Raises
    ------
    RooflineError
        A bad trace (TraceError), preset, option value or KV budget.
    """
    model = load_model(args.model, weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype)
    accelerator = get_accelerator(args.accelerator)
    if args.kv_budget_gb is not None:
        budget = args.kv_budget_gb * GB
    else:
        budget = estimate.kv_budget_for(model, accelerator, utilization=args.utilization)
    pool = KVPool.from_budget(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token, block_size=args.block_size)
    cost = RooflineCostModel.for_model(model, accelerator, flops=args.flops, overhead=args.overhead,
                                       exact=not args.float_mode, estimate=args.estimate)
    time_kind = "bound" if args.estimate is None else f"estimate: {_profile_name(args.estimate)}"
    requests = load_trace(trace_path(args.trace), format=args.format)
    if args.limit is not None:
        requests = requests[: args.limit]
    options = {
        "serial": {},
        "static": {"batch_size": args.batch_size, "max_wait": args.max_wait},
        "continuous": {"max_num_seqs": args.max_num_seqs, "admission": args.admission.replace("-", "_"),
                       "max_prefill_tokens": args.max_prefill_tokens},
    }
    names = list(POLICIES) if args.policy == "all" else [args.policy]
    record = args.out is not None
    results = [POLICIES[name](requests, cost, kv_pool=pool, record_steps=record, **options[name]) for name in names]
    return dict(requests=requests, model=model, accelerator=accelerator, pool=pool, budget=budget, results=results,
                time_kind=time_kind)


def _profile_name(name: str) -> str:
    from ..calibrate.fit import get_engine_profile

    return get_engine_profile(name).name


def _t(seconds: Any) -> str:
    return format_time(seconds, decimals=(2, 1, 0), whole_from=100, none="-")


def _p(stats: Any, q: str) -> str:
    return "-" if stats is None else _t(getattr(stats, q))


COLUMNS = (
    ("policy", 10), ("done", 7), ("rejected", 8), ("steps", 10), ("makespan", 10), ("tokens/s", 9),
    ("useful", 7), ("TTFT p50", 9), ("TTFT p99", 9), ("TPOT p50", 9), ("TPOT p99", 9), ("E2E p50", 9),
    ("E2E p99", 9), ("peak KV", 8), ("preempt", 8),
)


def format_table(run: dict[str, Any], trace: str) -> str:
    """The comparison table as text: one row per policy."""
    reqs, pool, model, acc = run["requests"], run["pool"], run["model"], run["accelerator"]
    last = float(reqs[-1].arrival_s) if reqs else 0.0
    lines = [
        f"roofline simulate: {len(reqs):,} requests from {os.path.basename(trace)} (arrivals over {last:,.1f} s)",
        f"  {model.name} (weights {model.weight_dtype}, KV {model.kv_dtype}) on {acc.name}; "
        f"KV pool {pool.capacity_blocks:,} blocks x {pool.block_size} tokens = {pool.capacity_tokens:,} tokens "
        f"({float(run['budget']) / 1e9:.2f} GB)",
        f"  step times: {_kind_text(run.get('time_kind', 'bound'))}",
        "",
        "  ".join(f"{name:>{w}}" if i else f"{name:<{w}}" for i, (name, w) in enumerate(COLUMNS)),
    ]
    for r in run["results"]:
        s = r.summary
        peak = "-" if not pool.capacity_blocks else f"{100 * s.peak_kv_blocks / pool.capacity_blocks:.1f}%"
        cells = (
            r.policy, f"{s.completed:,}", f"{s.rejected:,}", f"{s.steps:,}", _t(s.makespan_s),
            "-" if s.output_tokens_per_s is None else f"{float(s.output_tokens_per_s):,.0f}",
            "-" if s.useful_share is None else f"{100 * float(s.useful_share):.1f}%",
            _p(s.ttft, "p50"), _p(s.ttft, "p99"), _p(s.tpot, "p50"), _p(s.tpot, "p99"),
            _p(s.e2e, "p50"), _p(s.e2e, "p99"), peak, f"{s.preemptions:,}",
        )
        widths = [w for _, w in COLUMNS]
        lines.append("  ".join(f"{c:>{w}}" if i else f"{c:<{w}}"
                               for i, (c, w) in enumerate(zip(cells, widths, strict=True))))
    opts = {r.policy: r.options for r in run["results"]}
    lines += [
        "",
        "  static: batch size {batch_size}, max wait {wait}; continuous: max_num_seqs {max_num_seqs}, "
        "admission {admission}".format(
            batch_size=opts.get("static", {}).get("batch_size", "-"),
            wait="none" if opts.get("static", {}).get("max_wait_s") is None else f"{opts['static']['max_wait_s']} s",
            max_num_seqs=opts.get("continuous", {}).get("max_num_seqs", "-"),
            admission=opts.get("continuous", {}).get("admission", "-"),
        ),
        "  TTFT includes queueing; TPOT = (E2E - TTFT) / (O - 1); E2E ends when the result is handed back "
        "(static: at the end of its batch); percentiles are nearest-rank; useful = rows producing a token.",
    ]
    return "\n".join(lines)


def _kind_text(kind: str) -> str:
    if kind == "bound":
        return "roofline bound (datasheet constants, overhead as given: a lower bound)"
    return f"[{kind}] (engine profile constants fitted on published measurements; not a bound)"


def to_json(run: dict[str, Any], trace: str) -> str:
    """The comparison as JSON: inputs and each policy's options and summary (SI units, floats)."""
    model, acc, pool = run["model"], run["accelerator"], run["pool"]
    return json.dumps({
        "trace": {"path": trace, "requests": len(run["requests"])},
        "model": {"name": model.name, "weight_dtype": model.weight_dtype, "kv_dtype": model.kv_dtype},
        "accelerator": {"key": acc.key, "name": acc.name},
        "time_kind": run.get("time_kind", "bound"),
        "kv_pool": {"budget_bytes": float(run["budget"]), "capacity_blocks": pool.capacity_blocks,
                    "block_size": pool.block_size, "capacity_tokens": pool.capacity_tokens},
        "results": [r.to_dict() for r in run["results"]],
    }, indent=2)


def _write_out(results: list[SimResult], out: str) -> None:
    directory = Path(out)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for r in results:
            with open(directory / f"{r.policy}-requests.csv", "w", encoding="utf-8", newline="") as fh:
                r.write_requests_csv(fh)
            if r.steps is not None:
                with open(directory / f"{r.policy}-steps.csv", "w", encoding="utf-8", newline="") as fh:
                    r.steps.write_csv(fh)
    except OSError as exc:
        raise InvalidValueError("--out", out, f"cannot write: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    """Simulate and print the comparison for the parsed arguments; return 0."""
    result = simulate_trace(args)
    trace = trace_path(args.trace)
    print(to_json(result, trace) if args.json else format_table(result, trace))
    if args.out is not None:
        _write_out(result["results"], args.out)
    return 0
