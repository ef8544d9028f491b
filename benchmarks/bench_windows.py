"""Benchmark of the reference scheduler on a sliding-window model (Gemma 3 27B by default).

On the shipped Azure conversation trace, Gemma 3 27B (52 of 62 layers with a 1,024-token
window) on H100 SXM, the window-aware KV pool of vLLM's 90 % budget in 16-token blocks
(``KVPool.for_model``), exact Fractions, in one process:

* serial and static batching on the event engine (stretches cut at the windows they cross),
  best of ``--repeat`` runs, without the step table;
* the same on the step engine, once, and the check that both give the same results, field by
  field (``--no-step-engine`` skips it: minutes);
* continuous batching (the step engine: per-sequence window sums, O(batch) per decode step).

Times are wall-clock (``perf_counter``) and CPU (``process_time``) of the call alone, the trace
already loaded. Not a test: timings depend on the machine.

Run from the repository root::

    python benchmarks/bench_windows.py
    python benchmarks/bench_windows.py --model gpt-oss-120b --accelerator h200 --no-step-engine
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(fn: Any, *args: Any, **kw: Any) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds) of one call."""
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kw)
    return out, time.perf_counter() - w, time.process_time() - c


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-27b")
    parser.add_argument("--accelerator", default="h100-sxm")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-step-engine", action="store_true", help="skip the step engine's serial and static runs")
    args = parser.parse_args(argv)

    from roofline import get_accelerator, get_model
    from roofline.estimate import kv_budget_for
    from roofline.sim import (
        KVPool,
        RooflineCostModel,
        load_trace,
        serve_continuous,
        serve_serial,
        serve_static,
        shipped_trace,
    )
    from roofline.testing.compare import assert_same_results

    model, acc = get_model(args.model), get_accelerator(args.accelerator)
    requests = load_trace(shipped_trace("conv"))
    pool = KVPool.for_model(model, budget=kv_budget_for(model, acc), block_size=16)
    cost = RooflineCostModel.for_model(model, acc)
    print(f"{len(requests):,} requests; {model.name} on {acc.name}; pool {pool.capacity_blocks:,} {pool.unit}; "
          f"windows: {sorted({w for w in model.layer_windows if w is not None})}")
    ok = True
    for name, fn, kw in (("serial", serve_serial, {}), ("static", serve_static, {"batch_size": 8})):
        runs = [timed(fn, requests, cost, kv_pool=pool, record_steps=False, **kw) for _ in range(args.repeat)]
        result, wall, cpu = min(runs, key=lambda r: r[2])
        print(f"{name:<11} event engine: {wall:7.3f} s wall, {cpu:7.3f} s CPU (best of {args.repeat}); "
              f"{result.summary.steps:,} steps")
        if not args.no_step_engine:
            step, wall, cpu = timed(fn, requests, cost, kv_pool=pool, record_steps=False, engine="step", **kw)
            try:
                assert_same_results(result, step)
                same = "same results"
            except AssertionError as e:  # reported, not raised: the benchmark prints what it found
                same, ok = f"DIFFERENT: {e}", False
            print(f"{name:<11} step engine:  {wall:7.3f} s wall, {cpu:7.3f} s CPU; {same}")
    result, wall, cpu = timed(serve_continuous, requests, cost, kv_pool=pool, record_steps=False)
    print(f"continuous  step engine:  {wall:7.3f} s wall, {cpu:7.3f} s CPU; {result.summary.steps:,} steps, "
          f"{result.summary.preemptions} preemptions")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
