"""p10: deciding the batch after every step, with chunked prefill, stops prefill from stalling decodes.

Claim
-----
Continuous (iteration-level) batching as engines run it today gives every running decode
its token in every step and fills the rest of a per-step token budget N with prompt
chunks (mixed steps). Then:

* a mixed step costs its exact composition, less than the decode step and the prefill
  step it replaces (the weights are read once); its attention pairs add up, over the
  chunks of a prompt, to the whole prompt's P (P + 1) / 2;
* a prompt of P tokens on an idle server takes ceil(P / N) steps to its first token, and
  under load no decode row waits: each gap between two tokens of a request is one step,
  holding at most N - D prompt tokens;
* with equal step times and the budget at least B x the longest prompt, every request is
  handed back no later than under static batching. Without chunking this fails on the
  lesson's own requests: the 1,000-token reply comes back 8 steps after static batching
  would hand it back, because prefill steps stall it;
* on Llama 3.1 8B (H100 SXM) the worst gap between two tokens falls from a decode step plus
  a prefill step to about one decode step as N shrinks, at the same throughput; on the
  first 1,000 requests of the Azure conversation trace the worst gap falls ~4x and the
  TPOT p99 falls, while the TTFT p99 rises (chunks spread a prompt over steps);
* N closed-loop clients obey Little's law exactly: requests per second = N / (E2E + Z).

Assumptions
-----------
* docs/conventions.md, "Chunked prefill and mixed steps", "Serving policies", "Latency
  metrics", "Workloads": the reference scheduler ``roofline.sim`` (exact Fractions);
  static batching as the lesson defines it (padded, run to the longest, handed back at the
  end); "separate" continuous batching prefills admitted prompts in a step of their own.
* The lesson's replies of 100, 200, 300 and 1,000 tokens, three times over, all at t = 0,
  4 slots; unit steps, then roofline step times of Llama 3.1 8B in BF16 on an H100 SXM
  with 512-token prompts (budgets N = 2,048, 512, 256; vLLM's default is 2,048). The
  trace: the shipped Azure LLM inference trace 2023 (conversation), first 1,000
  requests, the KV budget the H100 leaves at 0.9, static batches of 8, float step times.

Sources
-------
The lesson (iteration-level scheduling); Yu et al., "Orca" (OSDI 2022); Agrawal et al.,
"Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve" (OSDI 2024),
chunked prefill and stall-free batching; vLLM V1 scheduler (``max_num_batched_tokens``,
default 2,048); Azure Public Dataset, AzureLLMInferenceTrace 2023 (Patel et al.,
"Splitwise", ISCA 2024); J. D. C. Little, Operations Research 9(3), 1961.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ._audit import audit_run
from ._proof import Proof, run_script, si

NAME = "p10_chunked_prefill"
REPLIES = (100, 200, 300, 1000)
ROUNDS, SLOTS, PROMPT = 3, 4, 512
BUDGETS = (2048, 512, 256)
TRACE_REQUESTS = 1000


def _row(label: str, s: Any) -> list[str]:
    itl = "-" if s.itl is None else si(s.itl.max, "s")
    return [label, si(s.ttft.p50, "s"), si(s.ttft.p99, "s"), si(s.tpot.p50, "s"), si(s.tpot.p99, "s"), itl,
            f"{float(s.output_tokens_per_s):,.1f}"]


_HEADER = ["policy", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "worst ITL", "tokens/s"]


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    import sympy as sp

    from .. import formulas as f
    from .. import sim
    from ..estimate import kv_budget_for
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import ClosedLoop, KVPool, Request, RooflineCostModel, UnitCostModel, serve_continuous, serve_static
    from ..symbolic import step_time as st
    from ..symbolic.serving import closed_loop_throughput

    p.title("p10 chunked prefill: decode rows first, then prompt chunks, in every step")

    p.section("The mixed step, from its composition")
    p.show("mixed step time", st.mixed_step_time)
    p.equal("with no prompt chunk (T = Q = p0 = 0) it is the decode step",
            st.mixed_step_time.subs({st.S.prefill_tokens: 0, st.S.attention_pairs: 0, st.cached_tokens: 0,
                                     st.decode_rows: st.S.batch}), st.step_time)
    p.equal("with no decode row and nothing cached it is the prefill step",
            st.mixed_step_time.subs({st.decode_rows: 0, st.S.context_sum: 0, st.cached_tokens: 0}),
            st.prefill_step_time)
    q1, q2 = sp.symbols("q1 q2", positive=True, integer=True)
    split = (st.chunk_attention_pairs.subs({st.chunk_tokens: q1, st.cached_tokens: 0})
             + st.chunk_attention_pairs.subs({st.chunk_tokens: q2, st.cached_tokens: q1}))
    p.equal("a prompt split in two chunks has the whole prompt's pairs, P (P + 1) / 2",
            split, st.causal_attention_pairs.subs(st.S.prompt_tokens, q1 + q2))
    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_model(model, gpu)
    d, ctx, t, q = 3, 3 * 700, 509, 509 * 510 // 2
    mixed = cost.mixed_time(d, ctx, t, 0, q)
    apart = cost.decode_time(d, ctx) + cost.prefill_time(t, q)
    p.holds("Llama 3.1 8B: 3 decode rows (contexts 700) + a 509-token prompt cost less in one mixed step",
            mixed < apart, f"{si(mixed, 's')} against {si(apart, 's')} as a decode step and a prefill step")
    p.equal("and the scheduler's duration is the registered fast path", mixed,
            f.mixed_step_time(decode_rows=d, context_sum=ctx, prefill_tokens=t, cached_tokens=0, attention_pairs=q,
                              **model.step_terms("exact"), bandwidth=Fraction(gpu.bandwidth),
                              peak_flops=Fraction(gpu.peak_flops), overhead=0))

    p.section("A prompt on an idle server: ceil(P / N) steps to its first token")
    unit = UnitCostModel()
    chunks: list[tuple[int, int, int]] = []
    for prompt, budget in ((5000, 2048), (512, 512), (1, 256)):
        one = serve_continuous([Request(id=0, arrival_s=0, prompt_tokens=prompt, output_tokens=2)], unit,
                               max_num_seqs=4, prefill="chunked", max_num_batched_tokens=budget, record_steps=True)
        p.equal(f"P = {prompt:,}, N = {budget:,}: TTFT in steps", one.requests[0].ttft_s, -(-prompt // budget))
        if prompt == 5000:
            assert one.steps is not None
            chunks = [(s.prefill_tokens, s.cached_tokens, s.attention_pairs) for s in one.steps if s.prefill_tokens]
    p.equal("P = 5,000, N = 2,048: chunks of 2,048, 2,048 and 904 tokens after 0, 2,048 and 4,096 cached",
            [c[:2] for c in chunks], [(2048, 0), (2048, 2048), (904, 4096)])
    # each query at prompt position i (1-based) sees keys 1..i: counted query by query, not from q p0 + q (q + 1) / 2
    counted = [sum(range(p0 + 1, p0 + q + 1)) for q, p0, _ in chunks]
    p.equal("the fast path's pairs per chunk = the keys each query sees, counted query by query",
            [f.chunk_attention_pairs(chunk_tokens=q, cached_tokens=p0) for q, p0, _ in chunks], counted,
            value=", ".join(f"{n:,}" for n in counted))
    p.equal("= the pairs the scheduler priced each chunk with", [c[2] for c in chunks], counted)
    p.equal("a chunk of 3 after 2 cached: the pairs (query, key), key <= query, enumerated",
            f.chunk_attention_pairs(chunk_tokens=3, cached_tokens=2),
            len([(qi, kj) for qi in range(3, 6) for kj in range(1, qi + 1)]))

    lengths = [o for _ in range(ROUNDS) for o in REPLIES]
    requests = [Request(id=i, arrival_s=0, prompt_tokens=PROMPT, output_tokens=o) for i, o in enumerate(lengths)]
    p.section(f"The lesson's replies ({ROUNDS} x 100, 200, 300, 1,000 tokens), {SLOTS} slots, unit steps")
    static = serve_static(requests, unit, batch_size=SLOTS, record_steps=True)
    separate = serve_continuous(requests, unit, max_num_seqs=SLOTS, record_steps=True)
    chunked = serve_continuous(requests, unit, max_num_seqs=SLOTS, prefill="chunked",
                               max_num_batched_tokens=SLOTS * PROMPT, record_steps=True)
    late_sep = [a.handed_back_s - b.handed_back_s for a, b in zip(separate.requests, static.requests, strict=True)]
    late_chk = [a.handed_back_s - b.handed_back_s for a, b in zip(chunked.requests, static.requests, strict=True)]
    p.holds("without chunking, a request is handed back after static batching would (prefill steps stall it)",
            max(late_sep) > 0, f"request {late_sep.index(max(late_sep))} (1,000 tokens): {max(late_sep)} steps later")
    p.holds(f"with chunked prefill (N = {SLOTS * PROMPT:,} = B x P), every request no later than static batching",
            max(late_chk) <= 0, f"the latest is {max(late_chk)} steps after")
    assert separate.summary.itl is not None and chunked.summary.itl is not None
    p.equal("without chunking, some gap between two tokens spans 2 steps", separate.summary.itl.max, 2)
    p.equal("with chunking, every gap between two tokens is 1 step", chunked.summary.itl.max, 1)
    p.holds("mixed steps do the same work in fewer steps", chunked.summary.steps < separate.summary.steps,
            f"{chunked.summary.steps:,} ({chunked.summary.mixed_steps} mixed) against {separate.summary.steps:,} "
            f"(static {static.summary.steps:,})")

    p.section(f"Roofline step times: Llama 3.1 8B BF16 on an H100 SXM, {PROMPT}-token prompts")
    s_static = serve_static(requests, cost, batch_size=SLOTS, record_steps=True).summary
    separate_real = serve_continuous(requests, cost, max_num_seqs=SLOTS, record_steps=True)
    s_sep = separate_real.summary
    runs: dict[int, Any] = {
        n: serve_continuous(requests, cost, max_num_seqs=SLOTS, prefill="chunked", max_num_batched_tokens=n,
                            record_steps=True)
        for n in BUDGETS}
    p.table(_HEADER, [_row("static", s_static), _row("continuous, separate prefill", s_sep),
                      *(_row(f"chunked, N = {n:,}", r.summary) for n, r in runs.items())])
    audit_run(p, "continuous, separate prefill", separate_real, requests, policy="continuous", cost=cost)
    audit_run(p, f"chunked, N = {BUDGETS[-1]}", runs[BUDGETS[-1]], requests, policy="continuous", cost=cost)
    for n, r in runs.items():
        worst = max((s.decode_rows + s.prefill_tokens for s in r.steps), default=0)
        p.holds(f"N = {n:,}: no step holds more than N tokens (decode rows + chunks)", worst <= n, f"at most {worst:,}")
    assert s_sep.itl is not None and s_sep.tpot is not None
    small = runs[BUDGETS[-1]].summary
    assert small.itl is not None and small.tpot is not None
    decode4 = cost.decode_time(SLOTS, SLOTS * (PROMPT + 1000))
    p.holds(f"N = {BUDGETS[-1]}: the worst gap is about one decode step, not a decode step plus a prefill step",
            small.itl.max < s_sep.itl.max and small.itl.max <= decode4 * Fraction(101, 100),
            f"{si(small.itl.max, 's')} against {si(s_sep.itl.max, 's')} (a 4-row decode step at full context: "
            f"{si(decode4, 's')})")
    p.holds("and the worst gap grows with the budget", all(
        runs[a].summary.itl.max >= runs[b].summary.itl.max for a, b in zip(BUDGETS, BUDGETS[1:], strict=False)),
        ", ".join(si(runs[n].summary.itl.max, "s") for n in BUDGETS))
    p.holds("TPOT p99 no worse than without chunking", small.tpot.p99 <= s_sep.tpot.p99,
            f"{si(small.tpot.p99, 's')} against {si(s_sep.tpot.p99, 's')}")
    p.holds("throughput no lower (the weights are read once for decode and prefill)",
            all(r.summary.output_tokens_per_s >= s_sep.output_tokens_per_s for r in runs.values()),
            ", ".join(f"{float(r.summary.output_tokens_per_s):,.1f}" for r in runs.values())
            + f" against {float(s_sep.output_tokens_per_s):,.1f} tokens/s")

    p.section(f"The Azure conversation trace, first {TRACE_REQUESTS:,} requests (float step times)")
    trace = sim.load_trace(sim.shipped_trace("conv"))[:TRACE_REQUESTS]
    pool = KVPool.from_budget(budget=kv_budget_for(model, gpu), kv_bytes_per_token=model.kv_bytes_per_token)
    blocks = (Fraction(gpu.usable_memory) * Fraction(9, 10) - model.weight_bytes) // (16 * model.kv_bytes_per_token)
    p.equal("the KV pool: floor((usable memory x 0.9 - weights) / (16 k)) blocks of 16 tokens", pool.capacity_blocks,
            blocks, value=f"{blocks:,} blocks")
    fast = RooflineCostModel.for_model(model, gpu, exact=False)
    t_static: Any = serve_static(trace, fast, batch_size=8, kv_pool=pool, record_steps=False).summary
    t_sep: Any = serve_continuous(trace, fast, kv_pool=pool, record_steps=False).summary
    t_chk: Any = serve_continuous(trace, fast, kv_pool=pool, prefill="chunked", max_num_batched_tokens=2048,
                             record_steps=False).summary
    p.table(_HEADER, [_row("static, B = 8", t_static), _row("continuous, separate prefill", t_sep),
                      _row("chunked, N = 2,048", t_chk)])
    assert t_sep.itl is not None and t_chk.itl is not None and t_sep.tpot is not None and t_chk.tpot is not None
    p.holds("every request is served under each policy",
            t_static.completed == t_sep.completed == t_chk.completed == TRACE_REQUESTS)
    p.holds("chunked prefill cuts the worst gap between two tokens", t_chk.itl.max * 2 < t_sep.itl.max,
            f"{si(t_chk.itl.max, 's')} against {si(t_sep.itl.max, 's')}: "
            f"{float(t_sep.itl.max / t_chk.itl.max):.1f}x")
    p.holds("and the ITL and TPOT p99", t_chk.itl.p99 < t_sep.itl.p99 and t_chk.tpot.p99 < t_sep.tpot.p99,
            f"ITL {si(t_chk.itl.p99, 's')} against {si(t_sep.itl.p99, 's')}; TPOT {si(t_chk.tpot.p99, 's')} "
            f"against {si(t_sep.tpot.p99, 's')}")
    p.holds("at the price of a longer TTFT p99 (a long prompt is spread over steps)",
            t_chk.ttft.p99 > t_sep.ttft.p99, f"{si(t_chk.ttft.p99, 's')} against {si(t_sep.ttft.p99, 's')}")
    p.within("with the same throughput (ratio)", t_chk.output_tokens_per_s / t_sep.output_tokens_per_s,
             Fraction(99, 100), Fraction(101, 100))

    p.section("Closed loop: N clients, Little's law")
    p.show("requests per second", closed_loop_throughput)
    clients, think = 10, Fraction(1, 2)
    loop = serve_continuous(ClosedLoop(clients=clients, lengths=[(PROMPT, o) for o in lengths] * 3,
                                       think_time_s=think), cost, max_num_seqs=SLOTS, prefill="chunked",
                            max_num_batched_tokens=2048, record_steps=True)
    spans: dict[Any, Any] = {}
    for x in loop.requests:
        spans[x.client] = max(spans.get(x.client, 0), x.handed_back_s + think)
    rate = len(loop.requests) / (sum(spans.values()) / clients)
    mean_e2e = sum((x.e2e_s for x in loop.requests), start=Fraction(0)) / len(loop.requests)
    p.equal(f"{clients} clients, think time {think} s: requests / mean client span = N / (mean E2E + Z)", rate,
            f.closed_loop_throughput(clients=clients, e2e_latency=mean_e2e, think_time=think),
            value=f"{float(rate):.3f} requests/s")

    p.conclude(f"unit steps: separate prefill hands the 1,000-token reply back {max(late_sep)} steps after static "
               f"batching, chunked prefill never later; worst gap 2 -> 1 step; Llama 8B/H100: worst ITL "
               f"{si(s_sep.itl.max, 's')} -> {si(small.itl.max, 's')} at N = {BUDGETS[-1]}, same throughput")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
