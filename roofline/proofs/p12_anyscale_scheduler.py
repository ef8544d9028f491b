"""p12: the Anyscale benchmark, run as one ``roofline simulate`` command per cap on the reference scheduler.

Claim
-----
The Anyscale continuous-batching benchmark (1,000 requests of 512 prompt tokens, outputs
exponential of mean 128 kept at or below a cap of 32, 128, 512 or 1,536, all sent at once,
OPT-13B on one A100 40GB) is one command per cap:

    roofline simulate --model opt-13b --accelerator a100-40gb --num-prompts 1000
        --random-input-len 512 --random-output-len 128 --output-len-dist exponential
        --output-len-cap CAP --batch-size B --chunked-prefill --float --json

(static batch sizes B = 16, 12, 8, 4 as the benchmark's), and its output shows: every
request served under each policy; continuous batching's output tokens per second over
static batching's grows with the spread of lengths (the cap), from ~1.5x at cap 32 to
~6x at cap 1,536 (proofs/p07_anyscale.py derives ~6.1x analytically for the expectation);
chunked prefill adds to continuous batching at every cap (admissions fold into decode
steps instead of stalling them), and the same seed gives the same output.

Assumptions
-----------
* docs/conventions.md, "Serving policies", "Chunked prefill and mixed steps", "Workloads";
  roofline step times (float), no per-step overhead; the KV pool the A100 40GB leaves at
  0.9 utilization in 16-token blocks (950 blocks), lifetime KV reserved at admission; at
  most 256 sequences; chunked prefill with vLLM's default budget of 2,048 tokens.
* Output lengths: round(X), X exponential of mean 128, kept if <= cap, 0 served as 1 (the
  benchmark's ``capped_exponential``), seed 0.

Sources
-------
Anyscale, "How continuous batching enables 23x throughput in LLM inference while reducing
p50 latency" (2023); anyscale/llm-continuous-batching-benchmarks (benchmark_throughput.py,
benchmark_configs); vLLM ``benchmarks/benchmark_serving.py`` flag names; OPT-13B config;
NVIDIA A100 datasheet.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ._proof import Proof, run_script

NAME = "p12_anyscale_scheduler"
CAPS_AND_BATCHES = ((32, 16), (128, 12), (512, 8), (1536, 4))


def command(cap: int, batch: int) -> list[str]:
    """The ``roofline simulate`` arguments of one cap of the benchmark."""
    return ["simulate", "--model", "opt-13b", "--accelerator", "a100-40gb", "--num-prompts", "1000",
            "--random-input-len", "512", "--random-output-len", "128", "--output-len-dist", "exponential",
            "--output-len-cap", str(cap), "--batch-size", str(batch), "--chunked-prefill", "--float", "--json"]


def _run(args: list[str]) -> tuple[int, str]:
    """Run ``roofline <args>`` in a child interpreter (the command as a user runs it); (status, stdout)."""
    done = subprocess.run([sys.executable, "-m", "roofline", *args], capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr[-300:]


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    p.title("p12 the Anyscale benchmark as roofline simulate commands (OPT-13B, A100 40GB)")
    p.say("roofline " + " ".join(command(1536, 4)))
    rows = []
    outputs: dict[int, Any] = {}
    for cap, batch in CAPS_AND_BATCHES:
        status, text = _run(command(cap, batch))
        p.require(f"cap {cap}, B = {batch}: the command runs", status == 0, "" if status == 0 else text[-300:])
        data = json.loads(text)
        outputs[cap] = (text, data)
        s = {r["label"]: r["summary"] for r in data["results"]}
        rows.append((cap, batch, s))
    p.section("Output tokens per second")
    p.table(["cap", "static B", "serial", "static", "continuous", "chunked", "continuous / static",
             "chunked / continuous"],
            [[f"{cap:,}", batch, *(f"{s[k]['output_tokens_per_s']:,.0f}"
                                   for k in ("serial", "static", "continuous", "continuous-chunked")),
              f"{s['continuous']['output_tokens_per_s'] / s['static']['output_tokens_per_s']:.2f}x",
              f"{s['continuous-chunked']['output_tokens_per_s'] / s['continuous']['output_tokens_per_s']:.2f}x"]
             for cap, batch, s in rows])
    served = all(v["completed"] == 1000 and v["rejected"] == 0 for _, _, s in rows for v in s.values())
    p.holds("every cap: all 1,000 requests served under every policy", served)
    ratios = [s["continuous"]["output_tokens_per_s"] / s["static"]["output_tokens_per_s"] for _, _, s in rows]
    p.holds("continuous batching beats static batching at every cap", min(ratios) > 1,
            ", ".join(f"{r:.2f}x" for r in ratios))
    p.holds("and its lead grows with the cap (the spread of lengths)",
            all(a < b for a, b in zip(ratios, ratios[1:], strict=False)))
    p.within("cap 1,536: about 6x in output tokens (p07's expectation: ~6.1x)", ratios[-1], 5.5, 6.7)
    gains = [s["continuous-chunked"]["output_tokens_per_s"] / s["continuous"]["output_tokens_per_s"]
             for _, _, s in rows]
    p.holds("chunked prefill adds to continuous batching at every cap", min(gains) > 1,
            ", ".join(f"{g:.2f}x" for g in gains))
    tpot = [(s["continuous-chunked"]["tpot"]["p99"], s["continuous"]["tpot"]["p99"]) for _, _, s in rows]
    p.holds("with a TPOT p99 no worse at caps 128 and above", all(a <= b for a, b in tpot[1:]),
            ", ".join(f"{a * 1e3:.1f} ms vs {b * 1e3:.1f} ms" for a, b in tpot))

    p.section("Static batching's per-batch useful share, from the same seeded workload")
    from .. import formulas as f
    from ..sim import anyscale_workload

    for cap, batch, s in rows:
        lengths = [r.output_tokens for r in anyscale_workload(cap, seed=0)]
        p.require(f"cap {cap}: the library's anyscale_workload(cap, seed=0) is the command's workload",
                  sum(lengths) == s["static"]["output_tokens"])
        batches = [lengths[i:i + batch] for i in range(0, len(lengths), batch)]
        shares = [f.static_useful_share(batch=len(b), length_sum=sum(b), length_max=max(b)) for b in batches]
        mean = sum(shares, start=Fraction(0)) / len(shares)
        p.equal(f"cap {cap}, B = {batch}: the command's per-batch useful share = mean of sum O / (B max O)",
                s["static"]["per_batch_useful_share"], float(mean), value=f"{float(mean) * 100:.1f} %")

    p.section("The seed is part of the result")
    text, data = outputs[32]
    p.equal("the workload records seed 0 and its sampler", (data["workload"]["seed"],
                                                            data["workload"]["output_distribution"],
                                                            data["workload"]["output_cap"]), (0, "exponential", 32))
    again = _run(command(32, 16))[1]
    p.holds("the same command prints the same bytes", again == text)
    p.conclude(f"continuous / static output tokens/s {', '.join(f'{r:.1f}x' for r in ratios)} at caps 32, 128, "
               f"512, 1,536; chunked prefill adds {', '.join(f'{(g - 1) * 100:.0f} %' for g in gains)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
