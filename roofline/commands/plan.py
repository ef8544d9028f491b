"""``roofline plan``: the cheapest deployment that meets a latency SLO on a workload.

Searches a grid of configurations (the axes: ``--accelerator``, ``--tensor-parallel-size``,
``--pipeline-parallel-size``, ``--data-parallel-size``, ``--prefill-decode NP:ND|off`` (a
disaggregated split), ``--enable-expert-parallel on|off``, ``--max-num-seqs``,
``--max-num-batched-tokens``, ``--enable-chunked-prefill on|off``, ``--enable-prefix-caching
on|off``, ``--kv-cache-dtype``, ``--admission``; repeat a flag to
search several values) for the cheapest one whose TTFT, TPOT and E2E at ``--slo-percentile``
(default 99, interpolated as ``vllm bench serve`` reports it) are within ``--slo-ttft``,
``--slo-tpot`` and ``--slo-e2e`` (ms) with every request served. Cheapest: GPUs x
``--price KEY=USD`` per GPU-hour (your prices), or the fewest GPUs without prices.

Before simulating, a configuration the step-time model proves unable to meet the SLO (it does
not fit; every step is slower than the TPOT limit; the prefill or the queue the peak throughput
allows already breaks the TTFT or E2E limit) is dropped with its rule; the output counts them.
``--search-rate`` also finds each configuration's highest rate (x the workload's own, by
bracketing to ``--rate-tolerance``). The workload is a trace or a generated one, with the flags of
``roofline simulate``; ``--rate-scale X`` serves it at X times its rate.

Runs on ``-j N`` local worker processes, or a Dask cluster (``--cluster tcp://HOST:PORT``, or
``--cluster local:N`` started for the run; the ``cluster`` extra). ``--out FILE`` keeps every
finished result (JSON lines, keyed by configuration, written atomically): run the same command
again and it resumes. Prints a ranked table, the Pareto front (output tokens/s per GPU against
TTFT and TPOT), the winner's ``vllm serve`` command; ``--json``, ``--csv FILE``, ``--plot FILE``.

Examples::

    roofline plan --model llama-3.1-70b --limit 2000 --slo-ttft 2000 --slo-tpot 50 \\
        --accelerator h100-sxm --accelerator h200 --price h100-sxm=2.5 --price h200=3.5
    roofline plan --model llama-3.1-8b --num-prompts 500 --request-rate 20 --slo-tpot 20 \\
        --tensor-parallel-size 1 --tensor-parallel-size 2 --search-rate -j 2
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from fractions import Fraction
from typing import Any

from .._io import atomic_write, check_outputs, check_own_csv, output_path
from ..errors import InvalidValueError, RooflineError
from ..plan import AXES, MAX_SCALE, MAX_WORKERS, RULES, PlanResult, plan
from ..sim import SHIPPED_TRACES
from ._args import add_estimate_option, add_flops_option, by_flag, given_value, int_arg, number_arg, plain
from .simulate import (
    _DESTS,
    _describe,
    _given,
    add_workload_options,
    build_workload,
    check_workload_flags,
    refuse_unscalable,
)


def _price(text: str) -> tuple[str, Fraction]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--price={text!r}: expected ACCELERATOR=USD_PER_GPU_HOUR")
    return key.strip(), number_arg("--price", positive=True)(value)


_SHORT = {"tensor_parallel_size": ("-tp", "--tp"), "pipeline_parallel_size": ("-pp",), "data_parallel_size": ("-dp",)}
"""vLLM's short spellings of the parallel sizes (``vllm serve -tp 8``), and ``--tp`` as report, fit and simulate
take it."""


def _axis_type(axis: Any) -> Any:
    def parse(text: str) -> Any:
        try:
            return axis.parse(text)
        except InvalidValueError as err:
            raise argparse.ArgumentTypeError(f"{axis.flag}={text!r}: {err.reason}") from None
    return parse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``plan`` subcommand."""
    p = sub.add_parser("plan", help="the cheapest deployment that meets a latency SLO (search, pruned by the bound)",
                       description=plain(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-3.1-8b", help="preset, Hugging Face id or config.json "
                   "(default: %(default)s)")
    p.add_argument("--weight-dtype", default=None, help="override the weight dtype (as roofline simulate)")
    a = p.add_argument_group("axes searched (several values: repeat a flag, or give it several: -tp 1 2 4)")
    for axis in AXES:
        a.add_argument(axis.flag, *_SHORT.get(axis.name, ()), action="extend", nargs="+", type=_axis_type(axis),
                       default=None, dest=axis.name, metavar="VALUE", help=axis.help)
    add_workload_options(p)
    add_flops_option(p, default="exact")
    add_estimate_option(p, instead=True)
    g = p.add_argument_group("service level objectives")
    for name, what in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "end-to-end latency")):
        g.add_argument(f"--slo-{name}", type=number_arg(f"--slo-{name}", positive=True), default=None, metavar="MS",
                       help=f"{what} limit in milliseconds, > 0")
    g.add_argument("--slo-percentile", type=number_arg("--slo-percentile", positive=True), default=Fraction(99),
                   help="percentile the limits hold at, in (0, 100] (default: 99)")
    p.add_argument("--price", type=_price, action="append", default=None, metavar="KEY=USD",
                   help="your price of one accelerator per GPU-hour (an example, not a fact of the package); "
                        "give one for every accelerator searched, or none for the fewest GPUs")
    p.add_argument("--utilization", "--gpu-memory-utilization",
                   type=number_arg("--utilization", positive=True, at_most_one=True), default=Fraction(9, 10),
                   help="share of usable memory the server may use (default: 0.9)")
    p.add_argument("--block-size", type=int_arg("--block-size", 1), default=16, help="KV block size (default: 16)")
    r = p.add_argument_group("rate")
    r.add_argument("--search-rate", action="store_true", help="also find each configuration's highest rate")
    r.add_argument("--rate-tolerance", type=number_arg("--rate-tolerance", positive=True), default=Fraction(1, 20),
                   help="the rate search stops when high / low <= 1 + this (default: 0.05)")
    x = p.add_argument_group("where it runs and what it writes")
    x.add_argument("-j", "--jobs", type=int_arg("--jobs", 1, MAX_WORKERS), default=1,
                   help="local worker processes (default: 1, in this process)")
    x.add_argument("--cluster", default=None, metavar="tcp://HOST:PORT|local:N",
                   help="run on a Dask cluster (the cluster extra); local:N starts N workers for the run")
    x.add_argument("--out", default=None, metavar="FILE",
                   help="keep every finished result here (JSON lines); an existing file of the same search "
                        "is resumed, never recomputed")
    x.add_argument("--json", action="store_true", help="print JSON instead of the table")
    x.add_argument("--csv", default=None, metavar="FILE", help="also write the ranked results as CSV")
    x.add_argument("--plot", default=None, metavar="FILE",
                   help="also draw the Pareto front (output tokens/s per GPU against TPOT and TTFT; matplotlib)")
    x.add_argument("--top", type=int_arg("--top", 1), default=10, help="rows of the ranked table (default: 10)")
    p.set_defaults(func=run)
    for action in p._actions:  # the workload flags are read by simulate's build_workload, which names them
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            action.__class__ = _given(type(action))
            for s in action.option_strings:
                _DESTS.setdefault(s, action.dest)
        if action.dest in ("max_concurrency", "think_time"):  # closed-loop clients: not modelled here, refused
            action.help = argparse.SUPPRESS
        if action.dest == "trace":  # the same flag without simulate's closed loop
            action.help = (action.help or "").replace("with --num-prompts or --max-concurrency", "with --num-prompts")


def _inputs(args: argparse.Namespace) -> list[str | None]:
    inputs: list[str | None] = [args.model if os.path.isfile(args.model) else None]
    if args.trace is not None and args.trace not in SHIPPED_TRACES:
        inputs.append(args.trace)
    return inputs


#: Flags a run reads only with another (dest, does this run use it, what it applies to): given without it, a
#: flag is refused by name rather than ignored (as roofline simulate's table does for its flags).
_USES: tuple[tuple[str, Any, str], ...] = (
    ("rate_tolerance", lambda a: a.search_rate, "the rate search (--search-rate)"),
    ("jobs", lambda a: a.cluster is None, "local worker processes (without --cluster)"),
)

#: The first bytes of a plot file of each format: an existing --plot file is overwritten only when it is one.
_PLOT_MAGIC = {"png": (b"\x89PNG",), "pdf": (b"%PDF",), "svg": (b"<?xml", b"<svg"), "eps": (b"%!PS",),
               "ps": (b"%!PS",), "jpg": (b"\xff\xd8",), "jpeg": (b"\xff\xd8",)}


def _plot_format(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower() or "png"


def _check_writable(flag: str, path: str) -> None:
    """Refuse, before the search, an output whose folder is missing, that is a folder, or that is a file of
    something else: --out and --csv only over a plan's own file, --plot only over a plot of its format."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InvalidValueError(flag, path, f"the folder {folder} does not exist")
    if os.path.isdir(path):
        raise InvalidValueError(flag, path, "is a folder; name a file")
    if flag == "--out" or not os.path.isfile(path) or os.path.getsize(path) == 0:
        return  # --out: plan() reads it back and refuses one that is not a plan's results
    if flag == "--csv":
        check_own_csv(flag, path, CSV_FIELDS, "a plan's CSV")
        return
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if not head.startswith(_PLOT_MAGIC.get(_plot_format(path), ())):
        raise InvalidValueError(flag, path, f"exists and is not a {_plot_format(path)} plot: give another file")


def _check_plot(path: str) -> None:
    """Refuse --plot before the search: matplotlib missing, or a format it cannot write, or one this command does
    not write (only those of :data:`_PLOT_MAGIC`, whose files it knows again: pgf needs a LaTeX installation
    and tif, webp and the rest have no known first bytes, so a second run could not overwrite its own)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise InvalidValueError("--plot", path, "needs matplotlib: pip install 'roofline[plot]'")
    from matplotlib.figure import Figure

    formats = sorted(set(Figure().canvas.get_supported_filetypes()) & set(_PLOT_MAGIC))
    if _plot_format(path) not in formats:
        raise InvalidValueError("--plot", path, f"format {_plot_format(path)!r} is not one roofline plan writes; "
                                f"known: {', '.join(sorted(formats))}")


#: plan()'s own fields that a flag sets: field -> (the flag, its argparse dest), for a refusal named as typed
_FLAG_OF_FIELD = {"cluster": ("--cluster", "cluster"), "out": ("--out", "out"),
                  "rate_scale": ("--rate-scale", "rate_scale"), "percentile": ("--slo-percentile", "slo_percentile"),
                  "rate_tolerance": ("--rate-tolerance", "rate_tolerance")}


def run_plan(args: argparse.Namespace) -> PlanResult:
    """The search the parsed flags ask for.

    Raises
    ------
    RooflineError
        Bad input, named by its flag (see :func:`roofline.plan.plan`).
    """
    from ..models import load_model

    if getattr(args, "max_concurrency", None) is not None:  # hidden from --help: never modelled here
        raise InvalidValueError("--max-concurrency", given_value(args, "max_concurrency"), "closed-loop clients are "
                                "not modelled by roofline plan (it serves each request at its arrival time); give "
                                "a trace or --num-prompts with --request-rate")
    given = getattr(args, "given_flags", {})
    for dest, uses, what in _USES:
        if dest in given and not uses(args):
            raise InvalidValueError(given[dest], given_value(args, dest),
                                    f"applies to {what}, which this run does not include")
    if args.plot is not None:
        _check_plot(args.plot)
    outputs = [(f, x) for f, x in (("--out", args.out), ("--csv", args.csv), ("--plot", args.plot)) if x is not None]
    for flag, value in outputs:
        check_outputs(flag, [output_path(flag, value)], _inputs(args))
        _check_writable(flag, value)
    for i, (flag, value) in enumerate(outputs):
        for other, before in outputs[:i]:
            if os.path.abspath(value) == os.path.abspath(before):
                raise InvalidValueError(flag, value, f"names the same file as {other}: --out, --csv and --plot must "
                                        "name different files")
    model = by_flag("--model", load_model, args.model)
    if args.weight_dtype is not None:
        model = model.with_dtypes(weight_dtype=args.weight_dtype)
    from ..deployment import profile

    estimate = by_flag("--estimate", profile, args.estimate)
    check_workload_flags(args)  # a workload flag this workload does not use is refused, as simulate refuses it
    requests, described = build_workload(args, scaled=False)  # the plan scales it, at each rate it tries
    if not requests:  # the API's refusal names its argument; here the file (or the flag) the requests came from
        flag, dest = ("--trace", "trace") if described["kind"] == "trace" else ("--num-prompts", "num_prompts")
        raise InvalidValueError(flag, given_value(args, dest), "holds no requests: there is nothing to serve")
    args.workload_text = ("trace " if described["kind"] == "trace" else "") + _describe(described)
    given = getattr(args, "given_flags", {})
    if "rate_scale" in given or args.search_rate:  # each refused by its own flag when there is no rate to scale
        refuse_unscalable(args, requests, "rate_scale" if "rate_scale" in given else "search_rate")
    prices = dict(args.price) if args.price else None
    if prices is not None and len(prices) < len(args.price):
        raise InvalidValueError("--price", args.price[-1][0], "given twice")
    args.engine_text = _engine_axes(args, estimate, prices)
    axes = {a.name: getattr(args, a.name) for a in AXES if getattr(args, a.name) is not None}
    slo = {k: None if getattr(args, k) is None else getattr(args, k) / 1000
           for k in ("slo_ttft", "slo_tpot", "slo_e2e")}
    if all(v is None for v in slo.values()):
        raise RooflineError("no SLO given: give at least one of --slo-ttft, --slo-tpot, --slo-e2e (ms)")
    if args.slo_percentile > 100:
        raise InvalidValueError("--slo-percentile", given_value(args, "slo_percentile"), "must be <= 100")
    bar = _Progress()
    try:
        result = plan(model, requests, slo_ttft_s=slo["slo_ttft"], slo_tpot_s=slo["slo_tpot"],
                      slo_e2e_s=slo["slo_e2e"], percentile=args.slo_percentile, axes=axes, prices=prices,
                      flops=args.flops, estimate=estimate, utilization=args.utilization, block_size=args.block_size,
                      search_rate=args.search_rate, rate_scale=args.rate_scale, rate_tolerance=args.rate_tolerance,
                      jobs=args.jobs, cluster=args.cluster, out=args.out, progress=bar)
    except InvalidValueError as err:
        if err.field == "axes":  # every configuration skipped: no one flag is to blame
            raise RooflineError(f"the grid: {err.reason}") from None
        if err.field in _FLAG_OF_AXIS:  # an axis value refused by the API (a --kv-cache-dtype the model lacks)
            raise InvalidValueError(_FLAG_OF_AXIS[err.field], err.value, err.reason) from None
        named = _FLAG_OF_FIELD.get(err.field)
        if named is None:
            raise
        flag, dest = named
        raise InvalidValueError(flag, given_value(args, dest), err.reason) from None
    finally:
        bar.close()
    return result


_FLAG_OF_AXIS = {a.name: a.flag for a in AXES}


#: The axes an engine version's scheduler defaults may set (argparse dests, as
#: :meth:`roofline.profiles.SchedulerDefaults.flags` names them), in the order the line names them.
_ENGINE_AXES = ("chunked_prefill", "admission", "max_num_seqs", "max_num_batched_tokens")


def _engine_axes(args: argparse.Namespace, estimate: Any, prices: dict[str, Any] | None) -> str | None:
    """Under ``--estimate`` of an engine version, its scheduler defaults (:class:`roofline.profiles.
    SchedulerDefaults`) become the values of the axes the user did not give, as ``roofline simulate`` takes
    them for its flags (docs/conventions.md, "Deployment search"): chunked prefill, ``--admission``,
    ``--max-num-seqs``, ``--max-num-batched-tokens``. A default no source states, or one that differs between
    the accelerators searched (vLLM V1's larger ones on GPUs of 70 GiB or more), leaves the plan's own
    values. Returns the line saying which were taken, or None without an engine version."""
    from ..hardware import get_accelerator

    scheduler = getattr(estimate, "scheduler", None)
    if scheduler is None:
        return None
    names = args.accelerator or (sorted(prices) if prices else [AXES[0].default[0]])
    try:
        flags = [scheduler.flags(get_accelerator(name)) for name in names]
    except RooflineError:  # an unknown accelerator: the search refuses it by name
        return None
    taken, mixed = [], []
    for name in _ENGINE_AXES:
        axis = next(a for a in AXES if a.name == name)
        values = {f[name][1] if name in f else None for f in flags}
        if getattr(args, name) is not None or None in values:
            continue
        if len(values) > 1:
            mixed.append(axis.flag)
            continue
        value = values.pop()
        setattr(args, name, [value])
        taken.append(f"{axis.flag} {('on' if value else 'off') if isinstance(value, bool) else value}")
    text = f"{estimate.key} defaults: {', '.join(taken) if taken else 'none taken'} (axes given win)"
    if mixed:
        text += f"; {', '.join(mixed)}: the plan's values (the engine's differ by accelerator)"
    return text


class _Progress:
    """A tqdm bar on stderr (a terminal only): configurations done, pruned, skipped, failing the SLO."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(desc="plan", unit="config", disable=not _isatty(), leave=False, file=sys.stderr)
        self.pruned = self.skipped = self.failing = 0

    def __call__(self, record: dict[str, Any]) -> None:
        if record["status"] == "pruned":
            self.pruned += 1
        elif record["status"] == "skipped":
            self.skipped += 1
        elif not record["at_rate"]["meets"]:
            self.failing += 1
        self.bar.update(1)
        self.bar.set_postfix_str(f"pruned {self.pruned}, skipped {self.skipped}, failing SLO {self.failing}")

    def close(self) -> None:
        self.bar.close()


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _ms(x: Any) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


def _short(key: str) -> str:
    """The key without the default values' labels (``pp1``, ``dp1``, ``colocated``, ``noprefix``...)."""
    for default in ("/pp1/", "/dp1/", "/colocated/", "/noep/", "/chunked/", "/noprefix/", "/kvauto/"):
        key = key.replace(default, "/")
    return key.removesuffix("/reserve")


def format_table(result: PlanResult, top: int, workload: str | None = None, engine: str | None = None) -> str:
    """The answer as text (<= 100 columns): the workload (``workload``: its name or generator, as roofline
    simulate prints it), the engine defaults taken (``engine``), counts, ranked rows, the front, the winner's
    vllm serve line. The cost column is USD per hour with prices, else the GPUs counted (its header says
    which)."""
    c = result.context
    q = f"p{float(c.percentile):.12g}"  # 99.9999999 is not p100
    limits = ", ".join(f"{n} {q} <= {float(v) * 1e3:g} ms" for n, v in (("TTFT", c.ttft_s), ("TPOT", c.tpot_s),
                                                                        ("E2E", c.e2e_s)) if v is not None)
    rules = ", ".join(f"{k} {v}" for k, v in result.pruned.items() if v)
    n = len(result.records)
    pruned = sum(result.pruned.values())
    lines = [f"roofline plan: {c.model.name}; SLO {limits}, every request served",
             f"  workload: {workload or 'the requests given'}; {len(c.requests):,} requests at "
             f"{float(c.rate_scale):.15g}x their rate",
             *([f"  {engine}"] if engine else []),
             f"  {n} configurations: {pruned} pruned by the "
             f"{'bound' if c.estimate is None else 'estimate'} ({rules or 'none'}), {result.simulated} simulated"
             + (f", {result.skipped} skipped (not modelled)" if result.skipped else "")
             + (f"; {result.resumed} of the {n} read back from --out, not evaluated again" if result.resumed else ""),
             *([f"  {result.shared_runs} runs shared across --max-num-seqs (a cap above a run's peak gives that run)"]
               if result.shared_runs else []),
             "  objective: " + ("cost = GPUs x your price per GPU-hour (" + ", ".join(
                 f"{k} ${float(v):g}" for k, v in result.prices.items()) + ")" if result.prices else "fewest GPUs"),
             ""]
    shown = [r for r in result.records if r["status"] != "skipped"][:top]  # skipped: counted above, in --json
    width = max([13, *(len(_short(r["key"])) for r in shown)])
    unit = "$/hour" if result.prices else "GPUs"
    head = (f"{'#':>3}  {'configuration':<{width}} {'GPUs':>4} {'cost ' + unit:>11} {'TTFT':>8} {'TPOT':>7} "
            f"{'tok/s/GPU':>9}")
    if c.search_rate:
        head += f" {'max req/s':>9}"
    lines.append(head)
    for i, r in enumerate(shown, 1):
        at = r.get("at_rate") or {}
        cost = "-" if r.get("cost") is None else (f"${r['cost']:,.2f}" if result.prices else f"{r['cost']}")
        tps = at.get("output_tokens_per_s")
        per_gpu = "-" if tps is None else f"{tps / r['gpus']:,.0f}"
        gpus = r["gpus"] or "-"
        row = (f"{i:>3}  {_short(r['key']):<{width}} {gpus:>4} {cost:>11} {_ms(at.get('ttft_s')):>8} "
               f"{_ms(at.get('tpot_s')):>7} {per_gpu:>9}")
        if c.search_rate:
            mr = r.get("max_rate") or {}
            m = mr.get("requests_per_s")
            capped = m is not None and mr.get("bracket_high") is None  # met at the search's ceiling, MAX_SCALE
            rate = "-" if m is None else (f">={m:,.0f}" if m < 1e6 else f">={m:.2g}") if capped else (
                f"{m:,.2f}" if m < 1e5 else f"{m:.3g}")  # fits its 9 columns
            row += f" {rate:>9}"
        mark = "meets" if at.get("meets") else (f"x {r['rule']}" if r["status"] == "pruned" else "fails")
        lines.append(f"{row}  {mark}")
    if n - result.skipped > len(shown):
        lines.append(f"     ... {n - result.skipped - len(shown)} more (--top, --json, --csv)")
    front = len(result.front)
    plural = "" if front == 1 else "s"
    lines += ["", f"  Pareto front (tok/s/GPU up, TTFT and TPOT down): {front} configuration{plural}"]
    lines += [f"    {_short(k)}" for k in result.front[:top]]
    w = result.winner
    lines.append("")
    if w is None:
        lines.append("  no configuration meets the SLO: widen the axes, relax the SLO or lower --rate-scale")
    else:
        from ..plan import vllm_serve_command

        lines += [f"  winner: {w['key']}", *(f"    {x}" for x in vllm_serve_command(c.model, w).splitlines()),
                  "    (--gpu-memory-utilization " + f"{float(c.utilization):g}; admission {w['config']['admission']} "
                  "is the scheduler's model: vLLM allocates on demand)"]
    lines += [f"  cost: {'USD per hour' if result.prices else 'GPUs (no --price)'}; TTFT, TPOT: ms at {q} "
              "(numpy linear, as vllm bench serve);",
              "  x RULE: pruned by the rule (fit, tpot, ttft, rate: docs/conventions.md, \"Deployment search\");",
              "  fails: simulated, missed it"]
    if c.search_rate:
        tol = f"{float(c.rate_tolerance) * 100:.4g}%"
        lines.append(f"  max req/s: the highest rate found to meet the SLO (bracketed to {tol}); >=: still met at "
                     f"the search's ceiling, {float(MAX_SCALE):g}x the workload's rate")
    fits: dict[str, int] = {}
    for r in result.records:  # why each fit prune happened, once per distinct reason (the most common first)
        if r.get("rule") == "fit":
            fits[r["reason"]] = fits.get(r["reason"], 0) + 1
    lines += [f"  x fit ({k}): {why}" for why, k in sorted(fits.items(), key=lambda kv: (-kv[1], kv[0]))]
    if result.skipped:
        lines.append("  skipped: not modelled, counted above and left out of the table (--json gives each reason)")
    from ..units import fit_width

    return fit_width("\n".join(lines))


CSV_FIELDS = ("rank", "key", *[a.name for a in AXES], "gpus", "cost", "status", "rule", "meets", "rejected",
              "ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "max_rate_scale", "max_requests_per_s", "reason")


def to_csv(result: PlanResult) -> str:
    """One row per configuration, in rank order."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for i, r in enumerate(result.records, 1):
        at, mr = r.get("at_rate") or {}, r.get("max_rate") or {}
        row = {"rank": i, "key": r["key"], **r["config"], "gpus": r["gpus"], "cost": r.get("cost"),
               "status": r["status"], "rule": r.get("rule"), "meets": at.get("meets"), "rejected": at.get("rejected"),
               "ttft_s": at.get("ttft_s"), "tpot_s": at.get("tpot_s"), "e2e_s": at.get("e2e_s"),
               "output_tokens_per_s": at.get("output_tokens_per_s"), "max_rate_scale": mr.get("scale"),
               "max_requests_per_s": mr.get("requests_per_s"), "reason": r.get("reason")}
        w.writerow(["" if row[k] is None else row[k] for k in CSV_FIELDS])
    return out.getvalue()


def draw(result: PlanResult, path: str) -> None:
    """The simulated configurations and the Pareto front: output tokens/s per GPU against TPOT and TTFT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = set(result.front)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    q = f"p{float(result.context.percentile):.12g}"
    for ax, metric, name in ((axes[0], "tpot_s", "TPOT"), (axes[1], "ttft_s", "TTFT")):
        for on, style in ((False, dict(c="0.7", s=14)), (True, dict(c="C3", s=30))):
            pts = [(r["at_rate"][metric] * 1e3, r["at_rate"]["output_tokens_per_s"] / r["gpus"]) for r in result.records
                   if r["status"] == "simulated" and r["at_rate"][metric] is not None and (r["key"] in front) == on]
            if pts:
                ax.scatter(*zip(*pts, strict=True), label="Pareto front" if on else "simulated", **style)
        ax.set_xlabel(f"{name} {q} [ms]")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("output tokens/s per GPU")
    if axes[0].get_legend_handles_labels()[0]:  # nothing simulated: no legend (matplotlib would warn)
        axes[0].legend()
    fig.suptitle(f"roofline plan: {result.context.model.name}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=_plot_format(path))
    plt.close(fig)
    with atomic_write(path, binary=True) as fh:
        fh.write(buf.getvalue())


def run(args: argparse.Namespace) -> int:
    """Search and print the answer; return 0."""
    result = run_plan(args)
    text = format_table(result, args.top, getattr(args, "workload_text", None), getattr(args, "engine_text", None))
    print(json.dumps(result.to_dict(), indent=2) if args.json else text)
    if args.csv is not None:
        with atomic_write(args.csv, newline="") as fh:
            fh.write(to_csv(result))
    if args.plot is not None:
        draw(result, args.plot)
    return 0


__all__ = ["register", "run", "run_plan", "format_table", "to_csv", "draw", "RULES"]
