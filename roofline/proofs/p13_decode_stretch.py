"""p13: a stretch of decode steps of a fixed batch is priced in closed form: a simulator jumps event to event.

Claim
-----
Between two events (a request joins or leaves, an arrival, the KV pool running out) a
batch is fixed and each context grows by one token per step, so a step's memory and
compute times are two straight lines in the step index. Their crossover j* (solved) splits
the stretch into at most two regimes, and the time of n steps is a closed form: two
arithmetic series. For Llama 3.1 8B on an H100 SXM a batch of 512 starting at 100 tokens
is compute-bound through step 50 and memory-bound from step 51 (j* = 50.44); 100 steps
take exactly the sum of their step times, and so do they in the no-overlap form (memory +
compute + overhead per step: one line), whose step counts are found the same way. The
first step count whose cumulative time reaches a given time solves a quadratic: one
request decoding for a day on that GPU gets through 1,982,585 steps (found with an
integer square root, checked at n - 1 and n).
Paged KV grows by whole blocks: 10 sequences of 16 tokens in 16-token blocks outgrow a
25-block pool at step 17. An event engine built on these sums serves one request of 10^9
output tokens exactly without stepping through them.

Assumptions
-----------
* docs/conventions.md, "One step": step time = max((W + k S) / BW, (B F + a S) / peak) +
  overhead (0 here, the bound), S the sum of the contexts (KV incl. the new token); in a
  stretch step j has context sum S + B j.
* docs/conventions.md, "Memory": a sequence holding c tokens holds ceil(c / b) blocks.
* Llama 3.1 8B in BF16 (W = 16,060,522,496 B, k = 131,072 B/token, F = 15,009,316,864
  FLOP/token exact matmul count, a = 524,288 FLOP per token and context token) on an
  H100 SXM (3.35 TB/s, 989.4 TFLOP/s dense BF16).

Sources
-------
Meta, Llama 3.1 8B model card and config.json (hugging face, meta-llama/Llama-3.1-8B);
NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s, 989.4 TFLOP/s dense BF16);
Williams, Waterman and Patterson, "Roofline: an insightful visual performance model"
(CACM 2009); Kwon et al., "Efficient Memory Management for Large Language Model Serving
with PagedAttention" (SOSP 2023), paged KV blocks.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p13_decode_stretch"


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    import sympy as sp

    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import KVPool, Request, RooflineCostModel, serve_serial
    from ..symbolic import SYMBOLS, symbols_for
    from ..symbolic import stretch as ss

    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_model(model, gpu)
    terms = {k: Fraction(v) for k, v in model.step_terms("exact").items()}
    terms.update(bandwidth=Fraction(gpu.bandwidth), peak_flops=Fraction(gpu.peak_flops))

    p.title("p13 a stretch of decode steps of a fixed batch, in closed form (Llama 3.1 8B, H100 SXM)")

    p.section("Step j of a stretch: memory and compute times are lines in j")
    j = sp.Symbol("j", nonnegative=True, integer=True)
    p.show("memory_j", ss.step_memory)
    p.show("compute_j", ss.step_compute)
    p.equal("memory_j grows by k B / BW per step", sp.diff(ss.step_memory, j),
            SYMBOLS["kv_bytes_per_token"] * SYMBOLS["batch"] / SYMBOLS["bandwidth"])

    p.section("The crossover j*, solved; batch 512 from 100 tokens each")
    kw = dict(terms, batch=512, context_sum=51_200)
    crossover = f.stretch_crossover(**kw)
    p.equal("fast path = solve(memory_j = compute_j)", sp.Rational(crossover.numerator, crossover.denominator),
            ss.stretch_crossover.xreplace(symbols_for(kw)))
    p.holds("compute-bound through step 50, memory-bound from step 51", 50 < crossover < 51,
            f"j* = {float(crossover):.2f}")
    times = [f.step_time(batch=512, context_sum=51_200 + 512 * i, overhead=0, **terms) for i in range(100)]
    closed = f.stretch_time(steps=100, overhead=0, **kw)
    p.equal("100 steps: the closed form = the step times summed one by one (exact)", closed, sum(times),
            value=si(closed, "s"))
    p.equal("and = the SymPy form at these values", sp.Rational(closed.numerator, closed.denominator),
            ss.stretch_time.xreplace(symbols_for(dict(kw, steps=100, overhead=0))))

    p.section("The no-overlap form: one line, memory + compute + overhead per step")
    overhead = Fraction(1, 10**5)  # 10 us per step, so the per-step term is checked too

    def lines_at(i: int) -> tuple[Fraction, Fraction]:  # step i by hand: (W + k S_i) / BW and (B F + a S_i) / peak
        s_i = 51_200 + 512 * i
        return ((terms["weight_bytes"] + terms["kv_bytes_per_token"] * s_i) / terms["bandwidth"],
                (512 * terms["flops_per_token"] + terms["attention_flops_per_token"] * s_i) / terms["peak_flops"])

    prefix = [Fraction(0)]
    for i in range(100):
        prefix.append(prefix[-1] + sum(lines_at(i)) + overhead)
    closed_no = f.stretch_time_no_overlap(steps=100, overhead=overhead, **kw)
    p.equal("100 steps: the closed form = memory + compute + overhead summed step by step (exact)", closed_no,
            prefix[100], value=si(closed_no, "s"))
    p.equal("it exceeds the max form (plus the overheads) by the smaller of the two times, step by step",
            closed_no - closed - 100 * overhead, sum(min(lines_at(i)) for i in range(100)))
    reach = [f.stretch_steps_until_no_overlap(target_time=t, overhead=overhead, **kw)
             for t in (prefix[37], prefix[37] + Fraction(1, 10**12), prefix[99])]
    p.equal("the first n whose no-overlap prefix sum reaches the sum of 37, just above it, and of 99 steps",
            reach, [37, 38, 99])

    p.section("The first step count reaching a time: a quadratic in n (a day of batch-1 decode)")
    one_row = dict(terms, batch=1, context_sum=1, overhead=0)
    n = f.stretch_steps_until(target_time=86_400, **one_row)
    before, at = f.stretch_time(steps=n - 1, **one_row), f.stretch_time(steps=n, **one_row)
    p.holds("prefix sum at n - 1 < 1 day <= prefix sum at n", before < 86_400 <= at,
            f"n = {n:,} steps ({si(before, 's')} .. {si(at, 's')})")
    p.equal("n = 1,982,585 steps", n, 1_982_585)

    p.section("Paged KV: blocks after n steps, and the step that outgrows a pool")
    p.equal("10 sequences of 16 tokens, 1 more step: 20 blocks of 16",
            f.stretch_blocks(batch=10, context=16, steps=1, block_size=16), 20)
    step17 = f.stretch_pool_overflow_step(batch=10, context=16, block_size=16, pool_blocks=25)
    p.equal("a 25-block pool is outgrown at step 17 (33 tokens need a third block each)", step17, 17)
    p.holds("and not before", f.stretch_blocks(batch=10, context=16, steps=16, block_size=16) <= 25
            < f.stretch_blocks(batch=10, context=16, steps=17, block_size=16))

    p.section("An event engine on the closed forms equals the step engine, and does not step")
    # prompts of 1,500+ tokens make the prefill compute-bound; the pool holds exactly the largest request's
    # lifetime KV, 1,633 + 704 - 1 = 2,336 tokens = 146 blocks of 16 (the block boundary itself)
    reqs = [Request(id=i, arrival_s=Fraction(i, 10), prompt_tokens=1500 + 7 * i, output_tokens=1 + 37 * i)
            for i in range(20)]
    pool = KVPool.blocks(146, block_size=16)
    events = serve_serial(reqs, cost, kv_pool=pool, record_steps=True, engine="event")
    steps = serve_serial(reqs, cost, kv_pool=pool, engine="step", record_steps=True)
    p.equal("20 requests served one by one: every hand-back time is the same", [r.handed_back_s for r in
            events.requests], [r.handed_back_s for r in steps.requests])
    p.equal("none is rejected: the largest fits the 146-block pool exactly", steps.summary.rejected, 0)
    p.holds("and the summary is the same", events.summary == steps.summary)
    assert steps.steps is not None
    first, second = steps.steps[0], steps.steps[1]  # request 0 has O = 1: its prefill, then request 1's
    p.equal("request 0's prefill attends over 1,500 x 1,501 / 2 causal pairs (by hand)", first.attention_pairs,
            1500 * 1501 // 2)
    p.equal("and holds ceil(1,500 / 16) = 94 blocks (by hand)", first.kv_blocks, 94)
    p.equal("request 1's prefill: 1,507 tokens, ceil(1,507 / 16) = 95 blocks, 1,507 x 1,508 / 2 pairs",
            (second.prefill_tokens, second.kv_blocks, second.attention_pairs), (1507, 95, 1507 * 1508 // 2))
    big = serve_serial([Request(id=0, arrival_s=0, prompt_tokens=100, output_tokens=10**9)], cost, engine="event")
    decode = f.stretch_time(steps=10**9 - 1, batch=1, context_sum=101, overhead=0, **terms)
    p.equal("one request of 10^9 tokens: prefill + the closed-form stretch, exactly",
            big.requests[0].handed_back_s, cost.prefill_time(100, 5050) + decode,
            value=si(big.requests[0].handed_back_s, "s"))

    p.conclude(f"j* = {float(crossover):.2f} for batch 512 from 100 tokens; 100 steps = {si(closed, 's')} exactly; "
               f"a day of batch-1 decode = {n:,} steps; a 25-block pool outgrown at step 17; 10^9 tokens served "
               "exactly without stepping")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
