"""Benchmark of the event engine (serial and static batching) against the step engine and a plain float loop.

On the Azure conversation trace (``../shared/traces/azure_llm_2023_conv.csv``; ``--trace``
for another), Llama 3.1 8B on H100 SXM, the KV pool vLLM's 90 % budget leaves in 16-token
blocks, in one process:

* the event engine (``roofline.sim.stretch.serve_serial_events`` / ``serve_static_events``),
  exact Fractions, with and without the step table (best of ``--repeat`` runs);
* the step engine (``serve_serial`` / ``serve_static``), exact, once (``--no-step-engine``
  skips it), and the check that both give the same results, field by field;
* a plain float step loop of the same policy written here (one iteration per step, the
  step engine's float arithmetic in the same order), checked bit-identical against the
  step engine's float mode, and against the exact event engine to float rounding.

Times are wall-clock (``perf_counter``) and CPU (``process_time``) of the call alone, the
trace already loaded. On a shared machine the CPU time is the steadier figure.
``--profile serial|static`` prints the cProfile top functions of the event engine.

Run from the repository root::

    python benchmarks/bench_events.py
    python benchmarks/bench_events.py --profile serial

Targets (the issue "The formulas as the simulator"): serial and static at most 0.1 s
each, at least 20x faster than the float loop. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TRACE = REPO.parent / "shared" / "traces" / "azure_llm_2023_conv.csv"
BATCH = 8


def setup(trace: Path) -> tuple[Any, Any, Any, Any]:
    from roofline import get_accelerator, get_model
    from roofline.estimate import kv_budget_for
    from roofline.sim import KVPool, RooflineCostModel, load_trace

    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    pool = KVPool.from_budget(budget=kv_budget_for(model, acc), kv_bytes_per_token=model.kv_bytes_per_token,
                              block_size=16)
    exact = RooflineCostModel.for_model(model, acc)
    floats = RooflineCostModel.for_model(model, acc, exact=False)
    return load_trace(trace), exact, floats, pool


def timed(fn: Any, *args: Any, **kw: Any) -> tuple[Any, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kw)
    return out, time.perf_counter() - w, time.process_time() - c


def best(repeat: int, fn: Any, *args: Any, **kw: Any) -> tuple[Any, float, float]:
    runs = [timed(fn, *args, **kw) for _ in range(repeat)]
    return runs[-1][0], min(r[1] for r in runs), min(r[2] for r in runs)


# --------------------------------------------------------------------------- the plain float loops


def float_serial(requests: Any, cost: Any, pool: Any) -> list[float]:
    """Serial serving, one iteration per step, floats: the hand-back time of each request (None if rejected)."""
    t = cost._terms
    w, k, fl, a, bw, peak, oh = (t[n] for n in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                                "attention_flops_per_token", "bandwidth", "peak_flops", "overhead"))
    cap, b = pool.capacity_blocks, pool.block_size
    out: list[Any] = [None] * len(requests)
    free = None
    for i, r in enumerate(requests):
        p, o = r.prompt_tokens, r.output_tokens
        if -(-(p + o - 1) // b) > cap:
            continue
        arrival = float(r.arrival_s)
        start = arrival if free is None or arrival > free else free
        pairs = p * (p + 1) // 2
        mem, comp = (w + k * p) / bw, (p * fl + a * pairs) / peak
        now = start + ((mem if mem >= comp else comp) + oh)
        for j in range(1, o):
            s = p + j
            mem, comp = (w + k * s) / bw, (fl + a * s) / peak
            now = now + ((mem if mem >= comp else comp) + oh)
        out[i] = free = now
    return out


def float_static(requests: Any, cost: Any, pool: Any, batch: int) -> list[float]:
    """Static batching (no max_wait), one iteration per step, floats: each request's hand-back time."""
    t = cost._terms
    w, k, fl, a, bw, peak, oh = (t[n] for n in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                                "attention_flops_per_token", "bandwidth", "peak_flops", "overhead"))
    cap, b = pool.capacity_blocks, pool.block_size
    arr = [float(r.arrival_s) for r in requests]
    eligible = [i for i, r in enumerate(requests) if -(-(r.prompt_tokens + r.output_tokens - 1) // b) <= cap]
    out: list[Any] = [None] * len(requests)
    free = None
    x = 0
    while x < len(eligible):
        head = eligible[x]
        stop, p_max, o_max, ready = x + 1, requests[head].prompt_tokens, requests[head].output_tokens, None
        while stop - x < batch and stop < len(eligible):
            r = requests[eligible[stop]]
            pm, om = max(p_max, r.prompt_tokens), max(o_max, r.output_tokens)
            if (stop - x + 1) * -(-(pm + om - 1) // b) > cap:
                ready = arr[eligible[stop]]
                break
            stop, p_max, o_max = stop + 1, pm, om
        if ready is None:
            ready = arr[eligible[stop - 1]] if stop - x == batch else arr[-1]
        start = ready if free is None or ready > free else free
        while arr[eligible[stop - 1]] > start:
            stop -= 1
        members = eligible[x:stop]
        x = stop
        m = len(members)
        p_max = max(requests[i].prompt_tokens for i in members)
        o_max = max(requests[i].output_tokens for i in members)
        tokens, pairs = m * p_max, m * (p_max * (p_max + 1) // 2)
        mem, comp = (w + k * tokens) / bw, (tokens * fl + a * pairs) / peak
        now = start + ((mem if mem >= comp else comp) + oh)
        for j in range(1, o_max):
            s = m * (p_max + j)
            mem, comp = (w + k * s) / bw, (m * fl + a * s) / peak
            now = now + ((mem if mem >= comp else comp) + oh)
        for i in members:
            out[i] = now
        free = now
    return out


# --------------------------------------------------------------------------- checks


def same_results(x: Any, y: Any) -> bool:
    """Every request field and summary figure equal (values and number types)."""
    for p, q in zip(x.requests, y.requests, strict=True):
        for f in attrs.fields(type(p)):
            a, b = getattr(p, f.name), getattr(q, f.name)
            if a != b or type(a) is not type(b):
                return False
    return bool(x.summary == y.summary)


def max_relative(exact: Any, floats: list[Any]) -> float:
    worst = 0.0
    for r, v in zip(exact.requests, floats, strict=True):
        if r.handed_back_s is None:
            assert v is None
            continue
        worst = max(worst, abs(float(r.handed_back_s) - v) / float(r.handed_back_s))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-step-engine", action="store_true", help="skip the exact step engine (seconds)")
    parser.add_argument("--profile", choices=["serial", "static"])
    args = parser.parse_args(argv)

    from roofline.sim import serve_serial, serve_static
    from roofline.sim.stretch import serve_serial_events, serve_static_events

    requests, exact, floats, pool = setup(args.trace)
    policies = {
        "serial": (serve_serial_events, serve_serial, {}, lambda: float_serial(requests, floats, pool)),
        "static": (serve_static_events, serve_static, {"batch_size": BATCH},
                   lambda: float_static(requests, floats, pool, BATCH)),
    }
    if args.profile:
        events, _, kw, _ = policies[args.profile]
        profile = cProfile.Profile(time.process_time)
        profile.runcall(events, requests, exact, kv_pool=pool, **kw)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
        return 0

    steps_total = sum(r.output_tokens for r in requests)
    print(f"trace {args.trace.name}: {len(requests):,} requests, {steps_total:,} output tokens; "
          f"Llama 3.1 8B on H100 SXM, KV pool {pool.capacity_blocks:,} blocks of {pool.block_size}; "
          f"static batch {BATCH}; times in s, wall / CPU, best of {args.repeat}")
    for name, (events, step, kw, plain) in policies.items():
        result, wall, cpu = best(args.repeat, events, requests, exact, kv_pool=pool, **kw)
        _, wall_ns, cpu_ns = best(args.repeat, events, requests, exact, kv_pool=pool, record_steps=False, **kw)
        looped, wall_loop, cpu_loop = timed(plain)
        reference, _, _ = timed(step, requests, floats, kv_pool=pool, record_steps=False, **kw)
        identical = looped == [r.handed_back_s for r in reference.requests]
        print(f"{name:7s} events exact {wall:.3f} / {cpu:.3f} (no step table {wall_ns:.3f} / {cpu_ns:.3f}); "
              f"{result.summary.steps:,} steps in {len(result.steps or ()):,}-step table")
        print(f"{'':7s} plain float loop {wall_loop:.3f} / {cpu_loop:.3f}: events are {cpu_loop / cpu:.1f}x faster "
              f"(CPU); loop bit-identical to the step engine's float mode: {identical}; "
              f"largest relative difference to exact: {max_relative(result, looped):.1e}")
        if not args.no_step_engine:
            ref, wall_step, cpu_step = timed(step, requests, exact, kv_pool=pool, **kw)
            print(f"{'':7s} step engine exact {wall_step:.2f} / {cpu_step:.2f}: events are {cpu_step / cpu:.0f}x "
                  f"faster (CPU); same results: {same_results(result, ref)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
