"""p07: the Anyscale measurement set beside the roofline model's prediction, gap stated.

Claim
-----
From the facts of the Sources in roofline.hardware and the model presets alone (OPT-13B in FP16 on one A100 40GB;
1,000 requests of 512 prompt tokens; output lengths exponential of mean 128 truncated at
a cap of 32, 128, 512 or 1,536; static batch sizes 16, 12, 8, 4), the roofline model
predicts, per cap:

* naive static throughput, two ways: (A) static batching as the conventions and the
  lesson define it (each batch runs to its own longest request; output tokens/s), an
  exact expectation over the integer length distribution; (B) the benchmark's naive
  Hugging Face server as its code ran it (every batch generated to the longest
  response of the whole run, and tokens/s counted prompt + response tokens);
* continuous (iteration-level) batching throughput with the KV budget an A100 40GB
  leaves, from the reference scheduler;
* the continuous / static ratio.

Set beside the published ~81 tokens/s (naive, cap 1,536) and ~8x (continuous batching
engines; vLLM up to 23x): the roofline is a lower bound on time, so its throughput must
be at least the measured one (checked); the measured 81 tokens/s is about 57 % of the
prediction (B), i.e. ~14 ms of overhead per ~19 ms roofline step. The predicted
continuous / static ratio grows with the spread of lengths and exceeds 1 at every cap;
at cap 1,536 it is ~6x in output tokens (A) and ~22x as the benchmark counted (B),
bracketing the published ~8x and close to vLLM's 23x. Likely causes of the gaps are
listed at the end; they are not measured here.

Assumptions
-----------
* Roofline step times (docs/conventions.md, "One step"), exact FLOPs convention, no per-step
  overhead, datasheet bandwidth and dense peak; prefill of the padded prompts is one step.
* Lengths: the benchmark's ``capped_exponential`` sampler, round(X) with X exponential of
  mean 128, kept if <= cap (integers 0..cap); a length of 0 is served as 1 token (the
  scheduler's minimum; probability (1 - e^(-1/256)) / (1 - e^(-(cap + 1/2)/128)), computed
  for each cap: 1.74 %, 0.62 %, 0.40 %, 0.39 % at caps 32, 128, 512, 1,536). Expectations are exact sums over this
  integer distribution; the simulations draw 1,000 such lengths with a fixed seed.
* Requests: ceil(1,000 / B) x B of them (the benchmark's config), all present at t = 0.
* Continuous batching: the reference scheduler, KV pool = 39.5 GiB usable x 0.9 -
  weight bytes in 16-token blocks, lifetime KV reserved at admission (the lengths are
  known to the server, as TGI was given max_new_tokens), at most 256 sequences.

Sources
-------
Anyscale, "How continuous batching enables 23x throughput in LLM inference while
reducing p50 latency" (2023); its benchmark code anyscale/llm-continuous-batching-benchmarks:
benchmark_throughput.py (``gen_random_response_lens``: capped_exponential;
``calculate_throughput``: tokens counted as prompt + response), benchmark_configs/
naive_hf_variable_size (caps, batch sizes, ceil(1000 / B) x B prompts of 512 tokens),
launch_scripts/launch_vanilla_hf (one pipeline call over all requests with
min_length = max_length = the largest prompt + response); OPT-13B config; NVIDIA A100
datasheet; all as summarized in the Sources in roofline.hardware and the model presets.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ._audit import audit_run
from ._proof import Proof, run_script, si

NAME = "p07_anyscale"
PROMPT, SCALE, TARGET = 512, 128, 1000
SETTINGS = ((32, 16), (128, 12), (512, 8), (1536, 4))  # (cap, static batch size)
PUBLISHED_NAIVE, PUBLISHED_RATIO, PUBLISHED_VLLM = 81, 8, 23
SEED = 2023


def sampled_distribution(cap: int, scale: int = SCALE) -> tuple[np.ndarray, np.ndarray]:
    """Integer lengths 0..cap and their probabilities under the benchmark's capped_exponential sampler.

    round(X) = n for X in [n - 1/2, n + 1/2) (n >= 1) and 0 for X < 1/2, X exponential of mean
    ``scale``, kept if <= cap.
    """
    n = np.arange(0, cap + 1)
    low = np.maximum(n - 0.5, 0)
    weights = np.exp(-low / scale) - np.exp(-(n + 0.5) / scale)
    return n, weights / weights.sum()


def length_distribution(cap: int, scale: int = SCALE) -> tuple[np.ndarray, np.ndarray]:
    """Integer lengths 1..cap and their probabilities as served: the sampler's mass at 0 is moved to 1."""
    n, probs = sampled_distribution(cap, scale)
    probs = probs.copy()
    probs[1] += probs[0]
    return n[1:], probs[1:]


def sample_lengths(cap: int, count: int, rng: np.random.Generator, scale: int = SCALE) -> list[int]:
    """``count`` lengths drawn as the benchmark does (round, keep if <= cap), 0 served as 1."""
    out: list[int] = []
    while len(out) < count:
        value = round(float(rng.exponential(scale)))
        if value <= cap:
            out.append(max(1, value))
    return out


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..estimate import kv_budget_for
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import KVPool, Request, RooflineCostModel, serve_continuous, serve_static

    model, gpu = get_model("opt-13b"), get_accelerator("a100-40gb")
    cost = RooflineCostModel.for_model(model, gpu, exact=False)
    p.title("p07 Anyscale: OPT-13B FP16 on one A100 40GB, 512-token prompts, capped exponential outputs")

    p.section("The hardware and the model")
    weights_time = Fraction(model.weight_bytes) / gpu.bandwidth
    p.equal("OPT-13B KV per token = 2 x 40 layers x 40 heads x 128 x 2 bytes = 800 KiB", model.kv_bytes_per_token,
            2 * 40 * 40 * 128 * 2, value=f"{model.kv_bytes_per_token:,} B")
    p.equal("a decode step streams at least the weights: W / BW", cost.decode_time(1, 0), float(weights_time),
            value=f"{si(model.weight_bytes, 'B')} / {si(gpu.bandwidth, 'B/s')} = {si(weights_time, 's')}")
    budget = kv_budget_for(model, gpu)
    pool = KVPool.from_budget(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token, block_size=16)
    assert pool.capacity_tokens is not None
    p.equal("KV budget, upper bound (reserve 0) = 39.5 GiB x 0.9 - weight bytes", budget,
            Fraction(gpu.usable_memory) * Fraction(9, 10) - model.weight_bytes,
            value=f"{si(budget, 'B')} = {pool.capacity_blocks} blocks of 16 = {pool.capacity_tokens:,} tokens, "
                  f"about {pool.capacity_tokens // (PROMPT + SCALE)} requests of {PROMPT} + {SCALE} tokens")
    p.say("No engine log for OPT-13B on an A100 40GB is at hand, so no reserve for activations and the runtime "
          "is subtracted: this pool (reserve 0) is an upper bound on what vLLM would leave.")
    p.equal("the pool holds floor(budget / (16 k)) blocks", pool.capacity_blocks,
            math.floor(budget / (16 * model.kv_bytes_per_token)))

    p.section("Zero-length outputs, per cap")
    p.say("The sampler rounds X and keeps it if <= cap, so a length of 0 (X < 1/2) is drawn with probability "
          "(1 - e^(-1/256)) / (1 - e^(-(cap + 1/2)/128)); the scheduler serves it as 1 token.")
    zero_rows = []
    for cap, _ in SETTINGS:
        lengths0, probs0 = sampled_distribution(cap)
        closed = -math.expm1(-0.5 / SCALE) / -math.expm1(-(cap + 0.5) / SCALE)
        p.holds(f"cap {cap}: P(length 0) from the sampler's distribution = the closed form",
                lengths0[0] == 0 and math.isclose(float(probs0[0]), closed, rel_tol=1e-12),
                f"{closed * 100:.2f} %")
        zero_rows.append([cap, f"{closed * 100:.2f} %", f"{closed * math.ceil(TARGET / _) * _:.1f}"])
    p.table(["cap", "P(length 0)", "expected zero-length requests in the run"], zero_rows)

    rng = np.random.default_rng(SEED)
    rows = []
    results = []
    for cap, batch in SETTINGS:
        count = math.ceil(TARGET / batch) * batch
        lengths, probs = length_distribution(cap)
        cdf = np.cumsum(probs)
        mean_out = float((lengths * probs).sum())
        prefill = float(cost.prefill_time(batch * PROMPT, batch * f.causal_attention_pairs(prompt_tokens=PROMPT)))
        decode = np.array([float(cost.decode_time(batch, batch * (PROMPT + j))) for j in range(1, cap)])
        batch_time = prefill + np.concatenate([[0.0], np.cumsum(decode)])  # T(M), M = 1..cap steps
        p_max_b = np.diff(np.concatenate([[0.0], cdf**batch]))  # P(max of B = M)
        static_a = batch * mean_out / float((p_max_b * batch_time).sum())
        p_max_all = np.diff(np.concatenate([[0.0], cdf**count]))  # P(max of the whole run = M)
        longest = float((p_max_all * lengths).sum())
        time_b = count / batch * float((p_max_all * batch_time).sum())
        static_b = count * (PROMPT + mean_out) / time_b

        drawn = sample_lengths(cap, count, rng)
        requests = [Request(id=i, arrival_s=0, prompt_tokens=PROMPT, output_tokens=o) for i, o in enumerate(drawn)]
        audit = cap == SETTINGS[0][0]  # audit the step records of the first cap's runs (the cheapest)
        sim_static = serve_static(requests, cost, batch_size=batch, record_steps=audit)
        if audit:
            audit_run(p, f"cap {cap}, static", sim_static, requests, policy="static", batch_size=batch, cost=cost)
        by_formula = sum(batch_time[max(drawn[i:i + batch]) - 1] for i in range(0, count, batch))
        sim_cont = serve_continuous(requests, cost, kv_pool=pool, record_steps=audit)
        if audit:
            audit_run(p, f"cap {cap}, continuous", sim_cont, requests, policy="continuous", cost=cost)
        cont = float(sim_cont.summary.output_tokens_per_s)
        cont_counted = float((count * PROMPT + sim_cont.summary.output_tokens) / sim_cont.summary.makespan_s)
        results.append(dict(cap=cap, batch=batch, count=count, static_a=static_a, static_b=static_b, time_b=time_b,
                            longest=longest, cont=cont, cont_counted=cont_counted, sim_static=sim_static,
                            by_formula=by_formula, mean_out=mean_out))
        simulated = float(sim_static.summary.output_tokens_per_s)
        rows.append([cap, batch, f"{mean_out:.1f}", f"{static_a:.0f}", f"{simulated:.0f}",
                     f"{static_b:.0f}", f"{cont:.0f}", f"{cont / static_a:.1f}x", f"{cont_counted / static_b:.1f}x"])

    p.section("Static batching per cap: expectation, and the scheduler on the same lengths")
    p.say("(A) expected output tokens/s = B E[O] / E[T(max of B)], T(M) = prefill of B x 512 padded tokens + "
          "decode steps 1..M-1 at contexts 512 + j, summed exactly over the integer length distribution. "
          "(B) every batch runs to the longest response of the whole run, tokens counted as prompt + response.")
    for r in results:
        busy, simulated = float(r["sim_static"].summary.busy_s), float(r["sim_static"].summary.output_tokens_per_s)
        p.holds(f"cap {r['cap']}: the scheduler's busy time = the sum of T(max) over its batches (same lengths)",
                math.isclose(busy, r["by_formula"], rel_tol=1e-9), f"{busy:.2f} s")
        p.holds(f"cap {r['cap']}: one seeded run of the scheduler is within 10 % of the expectation (A)",
                abs(simulated - r["static_a"]) <= r["static_a"] / 10,
                f"{simulated:.1f} vs {r['static_a']:.1f} tokens/s")
    p.table(["cap", "B", "E[O]", "(A) static", "sim", "(B) as run", "continuous", "ratio (A)", "ratio (B)"], rows)
    p.say("Throughputs in tokens/s: (A), sim and continuous count output tokens; (B) and ratio (B) count "
          "prompt + output tokens as the benchmark did (continuous counted the same way for ratio (B)).")

    p.section("Set beside the published figures")
    last = results[-1]
    static_b_1536 = last["static_b"]
    p.holds("the roofline (a lower bound on time) predicts at least the measured ~81 tokens/s at cap 1,536",
            static_b_1536 >= PUBLISHED_NAIVE, f"{static_b_1536:.0f} >= {PUBLISHED_NAIVE} tokens/s")
    measured_share = PUBLISHED_NAIVE / static_b_1536
    steps = last["count"] / last["batch"] * last["longest"]  # decode steps of the whole run (about)
    measured_time = last["count"] * (PROMPT + last["mean_out"]) / PUBLISHED_NAIVE
    extra = (measured_time - last["time_b"]) / steps
    roofline_step = last["time_b"] / steps
    p.say(f"The measured 81 tokens/s is {measured_share * 100:.0f} % of prediction (B): the run took about "
          f"{measured_time / 3600:.1f} h instead of {last['time_b'] / 3600:.1f} h, {si(extra, 's')} more per step "
          f"than the "
          f"roofline's {si(roofline_step, 's')} (a batch's time spread over its ~{last['longest']:.0f} steps).")
    ratios_a = [r["cont"] / r["static_a"] for r in results]
    ratios_b = [r["cont_counted"] / r["static_b"] for r in results]
    p.holds("continuous batching beats static batching at every cap (A)", all(r > 1 for r in ratios_a),
            ", ".join(f"{r:.1f}x" for r in ratios_a))
    p.holds("and as the benchmark counted (B)", all(r > 1 for r in ratios_b), ", ".join(f"{r:.1f}x" for r in ratios_b))
    p.holds("the gain grows with the spread of lengths (cap 32 -> 1,536), as counted (B)",
            all(x < y for x, y in zip(ratios_b, ratios_b[1:], strict=False)))
    p.holds(f"at cap 1,536 the published ~{PUBLISHED_RATIO}x lies between ratio (A) and ratio (B)",
            ratios_a[-1] < PUBLISHED_RATIO < ratios_b[-1],
            f"{ratios_a[-1]:.1f}x < {PUBLISHED_RATIO}x < {ratios_b[-1]:.1f}x "
            f"(vLLM: up to {PUBLISHED_VLLM}x)")
    p.say("The gap, stated honestly. The roofline assumes every decode step costs only its HBM traffic at the "
          "datasheet 1,555 GB/s. The naive baseline (Hugging Face transformers pipeline, 2023) adds, among "
          "other things: eager PyTorch with a kernel launch per operation and no CUDA graphs (Python overhead "
          "per step); a KV cache grown by concatenation each step (the cache is copied, not just read); "
          "attention in eager mode over padded rows; sampling over a 50k vocabulary; achieved bandwidth "
          "below the datasheet's; and tokenization and HTTP handling in the measured wall time. The "
          "continuous engines measured by Anyscale (TGI, Ray Serve; vLLM with paged attention) had their own "
          "overheads and KV policies, so the model brackets the published 8x rather than reproducing it. "
          "None of these causes is measured here; the numbers above are not tuned to match.")

    p.conclude(f"naive static at cap 1,536: predicted {static_b_1536:.0f} tokens/s as run (measured ~81, "
               f"{measured_share * 100:.0f} %: ~{si(extra, 's')}/step overhead); continuous/static "
               f"{', '.join(f'{r:.1f}x' for r in ratios_a)} (A) and {', '.join(f'{r:.1f}x' for r in ratios_b)} (B) "
               f"for caps 32..1,536 against the published ~8x (vLLM 23x)")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
