"""Benchmark: every cost model on the stretch clock, against the dense run of the same policy.

On the shipped Azure conversation trace (19,366 requests), exact, ``record_steps=False``, each
policy (serial, static batch 8, continuous reserve, continuous on demand, chunked prefill) is
timed (CPU seconds, ``process_time``, the trace already loaded) for:

* Llama 3.1 8B on H100 SXM (the dense reference),
* Mixtral 8x7B on H200 (mixture of experts), Llama 3.1 70B at TP 4 on H100 SXM (tensor parallel),
  Gemma 3 27B on H200 (sliding windows: continuous batching takes the step clock, said),
* every ``--estimate`` engine profile on Llama 3.1 8B,

with the KV pool vLLM's 90 % budget leaves (16-token blocks). Each row gives the engine that ran
(``options["engine"]``) and the ratio to the dense run of the same policy (the issue's target: at
most 1.5x). ``--check N`` also serves the first N requests on the step clock and checks the two
results equal field by field. Then one request of 10^9 output tokens with default arguments
(time and peak traced memory; target under 10 ms and 100 MB).

Run from the repository root::

    python benchmarks/bench_deployments.py
    python benchmarks/bench_deployments.py --only mixtral-8x7b --check 500

Not a test: timings depend on the machine (a shared one inflates them; CPU time is steadier).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "serial": ("serve_serial", {}),
    "static": ("serve_static", {"batch_size": 8}),
    "reserve": ("serve_continuous", {}),
    "on-demand": ("serve_continuous", {"admission": "on_demand"}),
    "chunked": ("serve_continuous", {"prefill": "chunked"}),
}


def deployments() -> list[tuple[str, Any, Any]]:
    """(label, cost model, KV pool) for every deployment benchmarked."""
    from roofline import get_accelerator, get_model
    from roofline.calibrate.fit import profile_names
    from roofline.estimate import kv_budget_for
    from roofline.sim import KVPool, RooflineCostModel

    out = []
    for label, model, gpu, tp, estimate in (
        ("llama-3.1-8b", "llama-3.1-8b", "h100-sxm", 1, None),
        ("mixtral-8x7b", "mixtral-8x7b", "h200-sxm", 1, None),
        ("llama-3.1-70b tp4", "llama-3.1-70b", "h100-sxm", 4, None),
        ("gemma-3-27b", "gemma-3-27b", "h200-sxm", 1, None),
        *((f"llama-3.1-8b {p}", "llama-3.1-8b", "h100-sxm", 1, p) for p in profile_names()),
    ):
        m, a = get_model(model), get_accelerator(gpu)
        cost = RooflineCostModel.for_model(m, a, tensor_parallel_size=tp, estimate=estimate)
        budget = kv_budget_for(m, a, tensor_parallel_size=tp)
        out.append((label, cost, KVPool.for_model(m.per_gpu(tp) if tp > 1 else m, budget=budget, block_size=16)))
    return out


def main() -> None:
    import roofline.sim as sim
    from roofline.testing.compare import assert_same_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="benchmark only this deployment label (repeatable)")
    parser.add_argument("--policy", action="append", choices=POLICIES, help="only this policy (repeatable)")
    parser.add_argument("--check", type=int, default=0, metavar="N",
                        help="also check the first N requests against the step clock")
    args = parser.parse_args()
    requests = sim.load_trace(sim.shipped_trace("conv"))
    dense: dict[str, float] = {}
    print(f"{'deployment':<24} {'policy':<10} {'engine':<6} {'CPU s':>8} {'vs dense':>9}")
    for label, cost, pool in deployments():
        if args.only and label not in args.only and label != "llama-3.1-8b":
            continue
        for name, (fn, kw) in POLICIES.items():
            if args.policy and name not in args.policy:
                continue
            serve = getattr(sim, fn)
            start = time.process_time()
            result = serve(requests, cost, kv_pool=pool, record_steps=False, **kw)
            cpu = time.process_time() - start
            dense.setdefault(name, cpu)
            engine = result.options["engine"]
            print(f"{label:<24} {name:<10} {engine:<6} {cpu:>8.2f} {cpu / dense[name]:>8.1f}x"
                  + (f"  ({result.options['engine_reason']})" if engine == "step" else ""), flush=True)
            if args.check:
                head = requests[:args.check]
                event = serve(head, cost, kv_pool=pool, record_steps=False, **kw)
                if event.options["engine"] == "event":
                    assert_same_results(event, serve(head, cost, kv_pool=pool, record_steps=False, engine="step", **kw))
    one = [sim.Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=10**9)]
    llama = deployments()[0][1]
    start = time.perf_counter()
    result = sim.serve_continuous(one, llama)
    wall = time.perf_counter() - start
    tracemalloc.start()  # the memory on a second run (tracing slows the run itself several times)
    sim.serve_continuous(one, llama)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"\none request of 10^9 output tokens, default arguments: {wall * 1e3:.1f} ms, peak traced memory "
          f"{peak / 1e6:.1f} MB, {result.summary.steps:,} steps, engine {result.options['engine']}")


if __name__ == "__main__":
    main()
