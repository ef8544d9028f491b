"""Benchmark of the event engine (serial and static batching) against the step engine and a plain float loop.

On the shipped Azure conversation trace (``roofline.sim.shipped_trace("conv")``; ``--trace``
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
from collections import deque
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BATCH = 8


def setup(trace: Path | None) -> tuple[Any, Any, Any, Any]:
    from roofline import get_accelerator, get_model
    from roofline.estimate import kv_budget_for
    from roofline.sim import KVPool, RooflineCostModel, load_trace, shipped_trace

    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    pool = KVPool.from_budget(budget=kv_budget_for(model, acc), kv_bytes_per_token=model.kv_bytes_per_token,
                              block_size=16)
    exact = RooflineCostModel.for_model(model, acc)
    floats = RooflineCostModel.for_model(model, acc, exact=False)
    return load_trace(trace or shipped_trace("conv")), exact, floats, pool


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


def float_continuous(requests: Any, cost: Any, pool: Any, max_num_seqs: int) -> list[float]:
    """Continuous batching (separate prefill, reserve admission), one iteration per step, floats: hand-backs."""
    t = cost._terms
    w, k, fl, a, bw, peak, oh = (t[n] for n in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                                "attention_flops_per_token", "bandwidth", "peak_flops", "overhead"))
    cap, b = pool.capacity_blocks, pool.block_size
    n = len(requests)
    arr = [float(r.arrival_s) for r in requests]
    prompt = [r.prompt_tokens for r in requests]
    output = [r.output_tokens for r in requests]
    need = [-(-(p + o - 1) // b) for p, o in zip(prompt, output, strict=True)]
    out: list[Any] = [None] * n
    waiting: deque[int] = deque()
    running = 0
    buckets: dict[int, list[int]] = {}
    ctx = blocks = tick = nxt = 0
    now = arr[0] if n else 0.0
    while True:
        while nxt < n and arr[nxt] <= now:
            if need[nxt] <= cap:
                waiting.append(nxt)
            nxt += 1
        admitted = []
        room = max_num_seqs - running
        while waiting and len(admitted) < room and blocks + need[waiting[0]] <= cap:
            i = waiting.popleft()
            blocks += need[i]
            admitted.append(i)
        if admitted:
            tokens = sum(prompt[i] for i in admitted)
            pairs = sum(prompt[i] * (prompt[i] + 1) // 2 for i in admitted)
            mem, comp = (w + k * tokens) / bw, (tokens * fl + a * pairs) / peak
            now = now + ((mem if mem >= comp else comp) + oh)
            for i in admitted:
                if output[i] == 1:
                    out[i] = now
                    blocks -= need[i]
                else:
                    running += 1
                    ctx += prompt[i] + 1
                    buckets.setdefault(tick + output[i] - 1, []).append(i)
        elif running:
            mem, comp = (w + k * ctx) / bw, (running * fl + a * ctx) / peak
            now = now + ((mem if mem >= comp else comp) + oh)
            ctx += running
            tick += 1
            for i in buckets.pop(tick, ()):
                out[i] = now
                running -= 1
                ctx -= prompt[i] + output[i]
                blocks -= need[i]
        elif nxt < n:
            now = arr[nxt]
        else:
            break
    return out


def scaled(requests: Any, copies: int) -> list[Any]:
    """The trace repeated ``copies`` times, each copy after the previous one's last arrival (the same load)."""
    from roofline.sim import Request

    span = requests[-1].arrival_s
    out = []
    for c in range(copies):
        shift = c * span
        out += [Request(id=c * len(requests) + r.id, arrival_s=r.arrival_s + shift, prompt_tokens=r.prompt_tokens,
                        output_tokens=r.output_tokens) for r in requests]
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
    parser.add_argument("--trace", type=Path, default=None, help="default: the shipped conversation trace")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--step-engine", action="store_true", help="also time the exact step engine (minutes)")
    parser.add_argument("--profile", choices=list(POLICY_NAMES))
    parser.add_argument("--scale", action="store_true", help="time 1x, 2x, 4x and 8x the trace")
    parser.add_argument("--million", action="store_true", help="time 10^6 requests (the trace repeated)")
    args = parser.parse_args(argv)

    from roofline.sim import serve_continuous, serve_serial, serve_static

    requests, exact, floats, pool = setup(args.trace)
    seqs = 256
    policies: dict[str, tuple[Any, dict[str, Any], Any]] = {
        "serial": (serve_serial, {}, lambda: float_serial(requests, floats, pool)),
        "static": (serve_static, {"batch_size": BATCH}, lambda: float_static(requests, floats, pool, BATCH)),
        "continuous": (serve_continuous, {"max_num_seqs": seqs},
                       lambda: float_continuous(requests, floats, pool, seqs)),
        "on_demand": (serve_continuous, {"max_num_seqs": seqs, "admission": "on_demand"}, None),
        "chunked": (serve_continuous, {"max_num_seqs": seqs, "prefill": "chunked"}, None),
    }
    if args.profile:
        serve, kw, _ = policies[args.profile]
        profile = cProfile.Profile(time.process_time)
        profile.runcall(serve, requests, exact, kv_pool=pool, record_steps=False, **kw)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return 0
    if args.scale or args.million:
        copies = [52] if args.million else [1, 2, 4, 8]
        print("requests     " + "".join(f"{name:>12s}" for name in policies) + "   (event engine, exact, CPU s)")
        for c in copies:
            reqs = scaled(requests, c)
            cells = []
            for serve, kw, _ in policies.values():
                _, _, cpu = timed(serve, reqs, exact, kv_pool=pool, record_steps=False, **kw)
                cells.append(f"{cpu:12.2f}")
            print(f"{len(reqs):>9,}    " + "".join(cells))
        return 0

    steps_total = sum(r.output_tokens for r in requests)
    print(f"{len(requests):,} requests, {steps_total:,} output tokens; Llama 3.1 8B on H100 SXM, KV pool "
          f"{pool.capacity_blocks:,} blocks of {pool.block_size}; static batch {BATCH}, max_num_seqs {seqs}; "
          f"times in s, wall / CPU, best of {args.repeat}, record_steps=False")
    for name, (serve, kw, plain) in policies.items():
        result, wall, cpu = best(args.repeat, serve, requests, exact, kv_pool=pool, record_steps=False, **kw)
        print(f"{name:10s} events exact {wall:.3f} / {cpu:.3f}; {result.summary.steps:,} steps")
        if plain is not None:
            looped, wall_loop, cpu_loop = timed(plain)
            reference, _, _ = timed(serve, requests, floats, kv_pool=pool, record_steps=False, **kw)
            identical = looped == [r.handed_back_s for r in reference.requests]
            print(f"{'':10s} plain float loop {wall_loop:.3f} / {cpu_loop:.3f}: events {cpu_loop / cpu:.1f}x faster "
                  f"(CPU); loop bit-identical to the step engine's float mode: {identical}; "
                  f"largest relative difference to exact: {max_relative(result, looped):.1e}")
        if args.step_engine:
            ref, wall_step, cpu_step = timed(serve, requests, exact, kv_pool=pool, record_steps=False, engine="step",
                                             **kw)
            print(f"{'':10s} step engine exact {wall_step:.2f} / {cpu_step:.2f}: events {cpu_step / cpu:.0f}x "
                  f"faster (CPU); same results: {same_results(result, ref)}")
    return 0


POLICY_NAMES = ("serial", "static", "continuous", "on_demand", "chunked")


if __name__ == "__main__":
    sys.exit(main())
