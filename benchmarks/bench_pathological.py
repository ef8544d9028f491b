"""Benchmark of inputs that once hung or took minutes (found by break-it passes), each timed once.

* a config of 2**32 layers (refused before any per-layer work; it hung the readers);
* 65,536 layers with every other one in ``mlp_only_layers`` (a list search took 12 s);
* continuous batching with blocks of 10**9 tokens, on-demand admission (the step engine kept a
  list of b residues, 8 GB; the event engine's overflow search was O(b^2));
* 800 arrivals at (1000 i + 1) / p_i over the first 800 primes, continuous batching on the event
  engine (its ITL search ran over ticks of 1 / lcm, ~10**2400: 79 s), against the step engine.

Times are wall-clock (``perf_counter``) of the call alone. Not a test: timings depend on the
machine; the tests check the results (tests/test_architectures.py, tests/test_events.py).

Run from the repository root::

    python benchmarks/bench_pathological.py
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(fn: Any) -> tuple[Any, float]:
    """(result or the error raised, wall seconds) of one call."""
    start = time.perf_counter()
    try:
        out = fn()
    except ValueError as exc:
        out = exc
    return out, time.perf_counter() - start


def main() -> int:
    import sympy

    from roofline import ModelConfig, get_accelerator, get_model
    from roofline.sim import KVPool, Request, RooflineCostModel, UnitCostModel, serve_continuous

    small = {"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 4,
             "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    out, t = timed(lambda: ModelConfig.from_hf_config({**small, "num_hidden_layers": 2**32}))
    print(f"2**32 layers refused: {type(out).__name__}, {t * 1e3:.1f} ms")
    out, t = timed(lambda: ModelConfig.from_hf_config({**small, "num_hidden_layers": 65536,
                                                       "mlp_only_layers": list(range(0, 65536, 2))}))
    print(f"65,536 layers, 32,768 in mlp_only_layers: {out.num_moe_layers:,} MoE layers, {t * 1e3:.1f} ms")
    b = 10**9
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=b - 10 + i, output_tokens=60) for i in range(4)]
    for engine in ("event", "step"):
        out, t = timed(lambda e=engine: serve_continuous(reqs, UnitCostModel(), kv_pool=KVPool(5, b),
                                                         admission="on_demand", engine=e))
        print(f"blocks of 10**9 tokens, on demand, {engine} engine: {out.summary.preemptions} preemptions, "
              f"{t:.2f} s")
    primes = list(sympy.primerange(sympy.prime(800) + 1))  # the first 800 primes
    arrivals = sorted(Fraction(1000 * i + 1, p) for i, p in enumerate(primes))
    many = [Request(id=i, arrival_s=a, prompt_tokens=50, output_tokens=200) for i, a in enumerate(arrivals)]
    cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    for engine in ("event", "step"):
        out, t = timed(lambda e=engine: serve_continuous(many, cost, record_steps=False, engine=e))
        print(f"800 arrivals over 800 prime denominators, {engine} engine: ITL p99 "
              f"{float(out.summary.itl.p99) * 1e3:.3f} ms, {t:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
