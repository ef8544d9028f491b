"""p23: the pruning rules of ``roofline plan`` follow from the bound.

Claim
-----
Every step time of the roofline bound (decode, prefill, mixed) is nondecreasing in each of its
counts (rows, tokens, context, attention pairs), so t_floor, the least of a one-row decode at
context 1, a one-token prefill and a one-row, one-token mixed step, is a lower bound on every
step: 4.794 ms for Llama 3.1 8B in BF16 on one H100 SXM (the weights' 16.06 GB over 3.35 TB/s).
A prompt prefilled in chunks costs at least its whole prefill (the chunks' FLOPs add up to the
whole's, their bytes exceed it by the weights and the cached KV read again). The interpolated
percentile (numpy's linear rule, as ``vllm bench serve``) is nondecreasing in every value, so a
lower bound on each request's TTFT, TPOT or E2E bounds the percentile. First come first served
with at most S running gives the queue bound: request i starts only after i - S + 1 earlier
requests finished, whose tokens took steps of at most S tokens each: on three requests of 3, 1
and 2 output tokens, S = 1, unit steps, all at t = 0, the scheduler's TTFTs are 1, 4 and 5, the
bound's; D round-robin replicas serve each part j mod D so, and meet the bound per part (TTFTs
1, 1 and 4 on two replicas). Hence rules fit, tpot, ttft and rate (docs/conventions.md,
"Deployment search") drop only configurations that fail the SLO.

Assumptions
-----------
* docs/conventions.md, "One step", "Chunked prefill" and "Deployment search" (the roofline
  bound, datasheet constants, perfect overlap, overhead 0; continuous batching first come first
  served, reserve admission for the queue term).

Sources
-------
Llama 3.1 8B config.json and the H100 SXM datasheet (roofline.models, roofline.hardware);
numpy.percentile's linear method (Hyndman and Fan 1996, definition 7), which ``vllm bench serve``
uses for its percentiles.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script

NAME = "p23_plan_pruning"


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    import sympy as sp

    from ..deployment import Deployment
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..plan import _floor_time, _queue_bounds, interpolated_percentile
    from ..sim import KVPool, Request, RooflineCostModel, UnitCostModel, serve_continuous, serve_replicas
    from ..symbolic import step_time as st

    p.title("p23 plan pruning: the rules of roofline plan follow from the bound")

    p.section("Each step's bytes and FLOPs are nondecreasing in its counts (derivatives >= 0, SymPy)")
    counts = {
        "decode bytes": (st.decode_bytes, (st.B, st.Ssum)),
        "decode FLOPs": (st.decode_flops, (st.B, st.Ssum)),
        "prefill bytes": (st.prefill_bytes, (st.S.prefill_tokens,)),
        "prefill FLOPs": (st.prefill_flops, (st.S.prefill_tokens, st.S.attention_pairs)),
        "mixed bytes": (st.mixed_step_bytes, (st.decode_rows, st.Ssum, st.cached_tokens, st._T)),
        "mixed FLOPs": (st.mixed_step_flops, (st.decode_rows, st.Ssum, st._T, st._Q)),
    }
    for label, (expr, xs) in counts.items():
        derivatives = [sp.diff(expr, x) for x in xs]
        p.holds(f"{label}: d/d({', '.join(map(str, xs))}) = {', '.join(map(str, derivatives))}, each >= 0",
                all(d.is_nonnegative for d in derivatives))
    p.say("the max of nondecreasing terms, plus t0 >= 0, is nondecreasing: each step is least at its least counts")

    p.section("Chunks cost at least the whole prefill")
    q1, q2 = sp.symbols("q1 q2", positive=True, integer=True)
    whole = st.causal_attention_pairs.subs(st.S.prompt_tokens, q1 + q2)
    split = (st.chunk_attention_pairs.subs({st.chunk_tokens: q1, st.cached_tokens: 0}, simultaneous=True)
             + st.chunk_attention_pairs.subs({st.chunk_tokens: q2, st.cached_tokens: q1}, simultaneous=True))
    p.equal("attention pairs: chunk (q1 after 0) + chunk (q2 after q1) = whole prompt of q1 + q2", split, whole)
    chunk_bytes = (st.mixed_step_bytes.subs({st.decode_rows: 0, st.Ssum: 0, st.cached_tokens: 0, st._T: q1})
                   + st.mixed_step_bytes.subs({st.decode_rows: 0, st.Ssum: 0, st.cached_tokens: q1, st._T: q2}))
    extra = sp.expand(chunk_bytes - st.prefill_bytes.subs(st.S.prefill_tokens, q1 + q2))
    p.equal("bytes: the chunks move W + k q1 more than the whole (the weights and the cached KV again)", extra,
            st.W + st.k * q1)
    p.say("max(a1, b1) + max(a2, b2) >= max(a1 + a2, b1 + b2): the chunks' time >= the whole prefill's")

    p.section("t_floor of Llama 3.1 8B in BF16 on one H100 SXM: the least step, by hand")
    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_deployment(Deployment(model, gpu))
    bw, peak = Fraction(gpu.bandwidth), Fraction(gpu.peak("bf16"))
    W, k = model.weight_bytes, model.kv_bytes_per_token
    F, a = model.flops_per_token()
    decode = cost.decode_time(1, 1)
    p.equal("decode of one row at context 1: max((W + k) / BW, (F + a) / peak)", decode,
            max(Fraction(W + k) / bw, Fraction(F + a) / peak), value=f"{float(decode) * 1e3:.3f} ms")
    prefill = cost.prefill_time(1, 1)
    p.equal("prefill of one token: the same bytes and FLOPs", prefill,
            max(Fraction(W + k) / bw, Fraction(F + a) / peak))
    mixed = cost.mixed_time(1, 1, 1, 0, 1)
    p.equal("mixed, one decode row and one prompt token: max((W + 2 k) / BW, (2 F + 2 a) / peak)", mixed,
            max(Fraction(W + 2 * k) / bw, Fraction(2 * F + 2 * a) / peak))
    floor = _floor_time(cost)
    p.equal("t_floor = their least", floor, min(decode, prefill, mixed), value=f"{float(floor) * 1e3:.3f} ms")
    p.equal("their bytes and FLOPs: (W + k, F + a), (W + k, F + a), (W + 2 k, 2 F + 2 a)",
            (cost.decode_work(1, 1), cost.prefill_work(1, 1), cost.mixed_work(1, 1, 1, 0, 1)),
            ((W + k, F + a), (W + k, F + a), (W + 2 * k, 2 * F + 2 * a)))
    n = 4096
    n_pairs = n * (n + 1) // 2
    whole = cost.prefill_time(n, n_pairs)
    p.equal("a 4,096-token prefill is compute-bound: (n F + a n (n + 1) / 2) / peak", whole,
            Fraction(n * F + a * n_pairs) / peak, value=f"{float(whole) * 1e3:.2f} ms")
    wide = cost.decode_time(1024, 1024)
    p.equal("a decode of 1,024 rows at context 1 is compute-bound: 1,024 (F + a) / peak", wide,
            Fraction(1024 * (F + a)) / peak, value=f"{float(wide) * 1e3:.2f} ms")
    chunk = cost.mixed_time(1, 1, n, 0, n_pairs)
    p.equal("a mixed step of one row and a 4,096-token chunk: ((n + 1) F + a (1 + n (n + 1) / 2)) / peak", chunk,
            Fraction((n + 1) * F + a * (1 + n_pairs)) / peak)
    big = cost.decode_time(64, 64_000)
    p.holds("a decode step of 64 rows at 64,000 context tokens is no shorter", big >= floor,
            f"{float(big) * 1e3:.3f} ms")

    p.section("The interpolated percentile is nondecreasing in every value")
    values = [0, 1, 3, 7]
    pairs = [(x, y) for x in itertools.product(values, repeat=3) for y in itertools.product(values, repeat=3)
             if all(u <= v for u, v in zip(x, y, strict=True))]
    p.holds("x <= y elementwise => p_q(x) <= p_q(y), for q in 0, 10, ..., 100", all(
        interpolated_percentile(list(x), q) <= interpolated_percentile(list(y), q)
        for x, y in pairs for q in range(0, 101, 10)), f"{len(pairs)} pairs x 11 percentiles")
    p.equal("p40 of 15, 20, 35, 40, 50: h = 1.6, 20 + 0.6 x 15 (numpy's linear rule)",
            interpolated_percentile([15, 20, 35, 40, 50], 40), 29)

    p.section("The queue bound: first come first served, at most S running")
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=o) for i, o in enumerate([3, 1, 2])]
    res = serve_continuous(reqs, UnitCostModel(), max_num_seqs=1, record_steps=True,
                           kv_pool=KVPool.blocks(10, block_size=2))
    ttfts = [r.ttft_s for r in res.requests]
    assert res.steps is not None  # recorded
    p.equal("its steps: three prefills of 4 (4 + 1) / 2 = 10 attention pairs, and three decodes",
            [(x.kind, x.attention_pairs) for x in res.steps if x.kind == "prefill"], [("prefill", 10)] * 3)
    p.equal("its peak KV: request 0's P + O - 1 = 6 tokens, 3 blocks of 2 (one request at a time)",
            (res.summary.peak_kv_tokens, res.summary.peak_kv_blocks), (6, 3))
    bounds = _queue_bounds(reqs, 1, 1)
    p.equal("S = 1, unit steps, outputs 3, 1, 2 at t = 0: the bound a_1 + t_floor (D_i / S + 1) - a_i", bounds,
            [1, 4, 5])
    p.equal("the scheduler's TTFTs meet it exactly", ttfts, bounds, value="TTFTs 1, 4 and 5")
    wide = [Request(id=i, arrival_s=Fraction(i, 3), prompt_tokens=2, output_tokens=1 + (7 * i) % 5)
            for i in range(12)]
    for s in (1, 2, 3):
        run = serve_continuous(wide, UnitCostModel(), max_num_seqs=s)
        lows = _queue_bounds(wide, s, 1)
        p.holds(f"12 requests arriving every 1/3 step, S = {s}: every TTFT >= its bound",
                all(r.ttft_s >= low for r, low in zip(run.requests, lows, strict=True)))

    p.section("More than one scheduler: round-robin replicas serve their parts first come first served")
    two = serve_replicas(reqs, UnitCostModel(), data_parallel_size=2, max_num_seqs=1,
                         kv_pool=KVPool.blocks(10, block_size=2))
    p.equal("D = 2, S = 1, outputs 3, 1, 2: requests 0 and 2 to replica 0, request 1 to replica 1",
            two.assignment, (0, 1, 0))
    per_part = _queue_bounds(reqs[0::2], 1, 1) + _queue_bounds(reqs[1::2], 1, 1)
    p.equal("the bound per part (0, 2) and (1): 1, 4 and 1", per_part, [1, 4, 1])
    p.equal("the replicas' TTFTs meet it exactly", [two.whole.requests[i].ttft_s for i in (0, 2, 1)], per_part,
            value="TTFTs 1, 4 and 1 of requests 0, 2 and 1")
    for s in (1, 2):
        for d in (2, 3):
            run = serve_replicas(wide, UnitCostModel(), data_parallel_size=d, max_num_seqs=s).whole
            lows = [0] * len(wide)
            for k in range(d):
                for i, low in zip(range(k, len(wide), d), _queue_bounds(wide[k::d], s, 1), strict=True):
                    lows[i] = low
            p.holds(f"12 requests every 1/3 step, D = {d} round robin, S = {s}: every TTFT >= its part's bound",
                    all(r.ttft_s >= low for r, low in zip(run.requests, lows, strict=True)))
    p.conclude(f"t_floor {float(floor) * 1e3:.3f} ms on Llama 3.1 8B, H100 SXM; chunks >= the whole prefill; "
               "percentiles monotone; queue bound met exactly (TTFTs 1, 4 and 5), per round-robin replica too")


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
