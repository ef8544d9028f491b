"""Benchmark of the reference scheduler on the full Azure conversation trace.

Runs each policy (serial, static B = 8, continuous with reserve and on-demand admission,
continuous with chunked prefill (N = 2,048) under both admissions, and 256 closed-loop
clients sending the trace's lengths to continuous batching with chunked prefill; and 4 data-parallel replicas
behind each router) on all
requests of the shipped Azure conversation trace (``roofline.sim.shipped_trace("conv")``)
with Llama 3.1 8B on H100 SXM (exact Fractions unless ``--float``), each in a fresh
process, and reports wall time, simulated steps, time per step and peak memory (the child's peak RSS, and its growth
over the RSS after loading the trace). ``--profile POLICY`` prints the cProfile top
functions of one policy instead; ``--check-float`` runs every policy in both modes and
reports the largest relative difference of the hand-back times.

Run from the repository root::

    python benchmarks/bench_sim.py                    # step records kept (the default)
    python benchmarks/bench_sim.py --no-steps         # summary totals only (what the CLI table needs)
    python benchmarks/bench_sim.py --profile serial
    python benchmarks/bench_sim.py --check-float
    python benchmarks/bench_sim.py --policy continuous continuous-chunked   # the chunked modes against today's

Not a test: timings depend on the machine. The first target is each policy within 30 s
on 2 cores, exact; the chunked-prefill modes within 2x of continuous batching's time per
step ("us/step").
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing as mp
import pstats
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _shipped_conversation_trace() -> Path:
    from roofline.sim import shipped_trace

    return Path(shipped_trace("conv"))

POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "serial": ("serial", {}),
    "static": ("static", {"batch_size": 8}),
    "continuous": ("continuous", {"max_num_seqs": 256, "admission": "reserve"}),
    "continuous-on-demand": ("continuous", {"max_num_seqs": 256, "admission": "on_demand"}),
    "continuous-chunked": ("continuous", {"max_num_seqs": 256, "admission": "reserve", "prefill": "chunked",
                                          "max_num_batched_tokens": 2048}),
    "continuous-chunked-on-demand": ("continuous", {"max_num_seqs": 256, "admission": "on_demand",
                                                    "prefill": "chunked", "max_num_batched_tokens": 2048}),
    "closed-loop-256-separate": ("continuous", {"max_num_seqs": 256, "admission": "reserve", "clients": 256}),
    "closed-loop-256": ("continuous", {"max_num_seqs": 256, "admission": "reserve", "prefill": "chunked",
                                       "max_num_batched_tokens": 2048, "clients": 256}),
    # D = 4 data-parallel replicas behind each router (roofline.sim.serve_replicas), continuous batching, reserve
    "replicas-4-round-robin": ("replicas", {"data_parallel_size": 4, "router": "round-robin"}),
    "replicas-4-least-requests": ("replicas", {"data_parallel_size": 4, "router": "least-requests"}),
    "replicas-4-least-kv": ("replicas", {"data_parallel_size": 4, "router": "least-kv"}),
}


def _serve(policy: str, requests: Any, cost: Any, pool: Any, record: bool, options: dict[str, Any]) -> Any:
    """The SimResult of one policy (of the whole, for replicas)."""
    from roofline.sim import POLICIES as FUNCS
    from roofline.sim import serve_replicas

    if policy == "replicas":
        return serve_replicas(requests, cost, kv_pool=pool, record_steps=record, **options).whole
    return FUNCS[policy](requests, cost, kv_pool=pool, record_steps=record, **options)


def _workload(requests: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The requests, or closed-loop clients sending the trace's lengths when the options name clients."""
    from roofline.sim import ClosedLoop

    options = dict(options)
    clients = options.pop("clients", None)
    if clients is None:
        return requests, options
    return ClosedLoop(clients=clients, lengths=requests), options


def _setup(trace: Path, exact: bool) -> tuple[Any, Any, Any]:
    from roofline import get_accelerator, get_model
    from roofline.estimate import kv_budget_for
    from roofline.sim import KVPool, RooflineCostModel, load_trace

    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    pool = KVPool.from_budget(budget=kv_budget_for(model, acc), kv_bytes_per_token=model.kv_bytes_per_token,
                              block_size=16)
    return load_trace(trace), RooflineCostModel.for_model(model, acc, exact=exact), pool


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _child(name: str, trace: str, exact: bool, record: bool, queue: Any) -> None:
    requests, cost, pool = _setup(Path(trace), exact)
    base = _rss_mib()
    policy, options = POLICIES[name]
    requests, options = _workload(requests, options)
    t0 = time.perf_counter()
    result = _serve(policy, requests, cost, pool, record, options)
    wall = time.perf_counter() - t0
    s = result.summary
    queue.put(dict(
        name=name, wall=wall, steps=s.steps, peak_rss=_rss_mib(), growth=_rss_mib() - base,
        makespan=float(s.makespan_s), tput=float(s.output_tokens_per_s), useful=float(s.long_run_useful_share),
        ttft50=float(s.ttft.p50), e2e99=float(s.e2e.p99), preempt=s.preemptions, rejected=s.rejected,
        requests=s.requests,
    ))


def bench(trace: Path, *, exact: bool, record: bool, names: list[str]) -> None:
    ctx = mp.get_context("spawn")
    print(f"trace {trace.name}; Llama 3.1 8B on H100 SXM; {'exact Fractions' if exact else 'floats'}; "
          f"step records {'kept' if record else 'off'}; Python {sys.version.split()[0]}")
    print(f"{'policy':<30}{'wall s':>8}{'steps':>11}{'us/step':>9}{'peak RSS MiB':>14}{'growth MiB':>12}"
          f"{'makespan s':>12}{'tok/s':>8}{'useful':>8}{'TTFT p50':>10}{'E2E p99':>10}{'preempt':>9}")
    for name in names:
        queue = ctx.Queue()
        proc = ctx.Process(target=_child, args=(name, str(trace), exact, record, queue))
        proc.start()
        r = queue.get()
        proc.join()
        print(f"{r['name']:<30}{r['wall']:>8.2f}{r['steps']:>11,}{r['wall'] / r['steps'] * 1e6:>9.1f}"
              f"{r['peak_rss']:>14.0f}{r['growth']:>12.0f}{r['makespan']:>12,.0f}{r['tput']:>8,.0f}"
              f"{r['useful']:>8.3f}{r['ttft50']:>10.3f}{r['e2e99']:>10.2f}{r['preempt']:>9,}")
    print(f"({r['requests']:,} requests)")


def profile(trace: Path, name: str, *, exact: bool, record: bool, top: int) -> None:
    requests, cost, pool = _setup(trace, exact)
    policy, options = POLICIES[name]
    requests, options = _workload(requests, options)
    prof = cProfile.Profile()
    prof.enable()
    _serve(policy, requests, cost, pool, record, options)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def check_float(trace: Path, names: list[str]) -> None:
    requests, exact_cost, pool = _setup(trace, True)
    _, float_cost, _ = _setup(trace, False)
    for name in names:
        policy, options = POLICIES[name]
        requests, options = _workload(requests, options)
        a = _serve(policy, requests, exact_cost, pool, False, options)
        b = _serve(policy, requests, float_cost, pool, False, options)
        worst = max((abs(y.handed_back_s - float(x.handed_back_s)) / float(x.handed_back_s)
                     for x, y in zip(a.requests, b.requests, strict=True) if x.handed_back_s), default=0.0)
        same = (a.summary.steps, a.summary.preemptions) == (b.summary.steps, b.summary.preemptions)
        print(f"{name:<30} same steps and preemptions: {same}; max relative hand-back difference {worst:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=None,
                        help="trace file (default: the shipped Azure conversation trace)")
    parser.add_argument("--float", action="store_true", help="float mode instead of exact Fractions")
    parser.add_argument("--no-steps", action="store_true", help="do not keep step records")
    parser.add_argument("--policy", nargs="+", choices=list(POLICIES), default=list(POLICIES))
    parser.add_argument("--profile", choices=list(POLICIES), help="cProfile one policy")
    parser.add_argument("--top", type=int, default=15, help="functions shown by --profile")
    parser.add_argument("--check-float", action="store_true", help="compare float mode with exact mode")
    args = parser.parse_args()
    if args.trace is None:
        args.trace = _shipped_conversation_trace()
    if args.profile:
        profile(args.trace, args.profile, exact=not args.float, record=not args.no_steps, top=args.top)
    elif args.check_float:
        check_float(args.trace, args.policy)
    else:
        bench(args.trace, exact=not args.float, record=not args.no_steps, names=args.policy)


if __name__ == "__main__":
    main()
