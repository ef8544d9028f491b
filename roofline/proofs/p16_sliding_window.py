"""p16: sliding windows let Gemma 3 27B hold 25 sequences of 32K tokens on an H200, not 4; the scheduler admits 25.

Claim
-----
A layer with a sliding window of w tokens keeps and reads only the last min(c, w) tokens
of a sequence's KV, in the blocks covering those positions, and its queries attend over
min(t, w) keys. Gemma 3 27B slides a 1,024-token window on 52 of its 62 layers, so at
32,768 tokens a sequence holds 10 x 32,768 + 52 x 1,024 token-layers of KV, 0.19 of what
full attention would hold. In the KV budget of one H200 (80.81 GB at utilization 0.9
with reserve 0, the upper bound) 25 such sequences fit in vLLM's 16-token blocks, where full
attention would fit 4; the reference scheduler, accounting blocks per layer, admits
exactly 25 of 30 such requests in its first step, and each of its decode steps reads the
window-aware bytes of every sequence.

Assumptions
-----------
* docs/conventions.md, "Sliding-window attention": a layer with window w keeps token
  positions max(0, c - w) .. c - 1 of a sequence at context c (the new token included);
  query t attends over keys max(0, t - w) .. t - 1 (w keys, itself included).
* Paged blocks per layer, as vLLM V1's hybrid KV cache manager keeps one block table per
  group of layers and frees the blocks wholly outside a window
  (``SlidingWindowManager.remove_skipped_blocks``); vLLM pads its layer groups to one page
  size, which this count (exact per layer) leaves out.
* The KV budget of :func:`roofline.estimate.kv_budget_for`: usable memory x 0.9 - weights,
  with reserve 0 (no published engine log covers this pair: the upper bound); the roofline
  bound with datasheet constants (H200), BF16 weights and KV.

Sources
-------
Gemma 3 27B config.json (google/gemma-3-27b-it: 62 layers, sliding_window 1,024,
sliding_window_pattern 6, 16 KV heads of 128); vLLM docs, "Hybrid KV Cache Manager"
(https://docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager.html); H200 datasheet
(roofline.hardware).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p16_sliding_window"
CONTEXT, BLOCK, REQUESTS = 32768, 16, 30


def _brute_blocks(c: int, b: int, w: int) -> int:
    """Distinct blocks of the positions a window keeps, by enumeration."""
    return len({pos // b for pos in range(max(0, c - w), c)})


def _brute_pairs(q: int, p0: int, w: int) -> int:
    """Query-key pairs of a chunk, query by query."""
    return sum(min(t, w) for t in range(p0 + 1, p0 + q + 1))


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..estimate import kv_budget_for, kv_capacity, published_reserve
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import KVPool, Request, RooflineCostModel, serve_continuous
    from ..symbolic import kv_cache as kc
    from ..symbolic import step_time as st
    from ..symbolic import symbols_for

    model, gpu = get_model("gemma-3-27b"), get_accelerator("h200")
    p.title("p16 sliding windows: KV held, blocks and sequences that fit (Gemma 3 27B, BF16, H200)")

    p.section("Blocks a windowed layer holds: a count of block indices")
    p.show("blocks(c)", kc.window_blocks_per_sequence)
    p.legend("context", "block_size", "sliding_window")
    grid = [(c, b, w) for c in range(0, 70) for b in (1, 2, 3, 16) for w in (1, 4, 5, 16, 33)]
    p.holds("equals the distinct blocks of positions max(0, c - w) .. c - 1, enumerated (c < 70, b in 1, 2, 3, 16)",
            all(f.window_blocks_per_sequence(context=c, block_size=b, sliding_window=w) == _brute_blocks(c, b, w)
                for c, b, w in grid), f"{len(grid)} cases")
    p.holds("equals ceil(c / b) (full attention) while c <= w",
            all(f.window_blocks_per_sequence(context=c, block_size=b, sliding_window=w)
                == f.blocks_per_sequence(context=c, block_size=b) for c, b, w in grid if c <= w))
    p.holds("never fewer at c + b than at c, so a lifetime's most blocks lie in its last b contexts",
            all(f.window_blocks_per_sequence(context=c + b, block_size=b, sliding_window=w)
                >= f.window_blocks_per_sequence(context=c, block_size=b, sliding_window=w) for c, b, w in grid))
    at = [f.window_blocks_per_sequence(context=c, block_size=BLOCK, sliding_window=1024) for c in (1024, 1025, 1040)]
    p.equal("window 1,024 in 16-token blocks: 64 blocks at 1,024 tokens, 65 at 1,025 (a new block before the oldest "
            "leaves), 64 again at 1,040", at, [64, 65, 64])

    p.section("Attention pairs of a chunk under a window (SymPy summation)")
    p.show("pairs(q, p0)", st.window_attention_pairs)
    p.legend("chunk_tokens", "cached_tokens", "sliding_window")
    cases = [(q, p0, w) for q in range(0, 12) for p0 in range(0, 12) for w in (1, 3, 7, 30)]
    p.holds("equals sum_{t=p0+1}^{p0+q} min(t, w), query by query", all(
        f.window_attention_pairs(chunk_tokens=q, cached_tokens=p0, sliding_window=w) == _brute_pairs(q, p0, w)
        for q, p0, w in cases), f"{len(cases)} cases")
    p.equal("a window as long as the chunk's end is full causal attention (w = p0 + q)",
            st.window_attention_pairs.subs(symbols_for(dict(sliding_window=9, cached_tokens=4, chunk_tokens=5))),
            st.chunk_attention_pairs.subs(symbols_for(dict(cached_tokens=4, chunk_tokens=5))))

    p.section(f"KV one Gemma 3 27B sequence holds at {CONTEXT:,} tokens")
    windows = model.layer_windows
    full = sum(w is None for w in windows)
    p.equal("62 layers: 52 with a 1,024-token window, 10 full", (len(windows), len(windows) - full, full),
            (62, 52, 10))
    per_layer = model.layer_kv_elements * model.kv_bytes_per_element
    held = full * CONTEXT + (len(windows) - full) * 1024
    p.equal("token-layers held = 10 x 32,768 + 52 x 1,024", held, 380_928)
    p.equal("kv_bytes(c) = token-layers x one layer's bytes per token (2 x 16 x 128 x 2 B)",
            model.kv_bytes(CONTEXT), held * per_layer, value=si(model.kv_bytes(CONTEXT), "B"))
    share = Fraction(model.kv_bytes(CONTEXT), CONTEXT * model.kv_bytes_per_token)
    p.holds("a share of what full attention would hold", share < Fraction(1, 5), f"{float(share):.3f}")

    p.section("Sequences that fit in one H200's KV budget")
    budget = kv_budget_for(model, gpu)
    usable = Fraction(gpu.usable_memory) * Fraction(9, 10) - model.weight_bytes
    p.holds("no published engine log gives this pair's reserve, so the budget is the upper bound (reserve 0)",
            published_reserve(model, gpu) is None)
    p.equal("the KV budget = usable memory x 0.9 - weights", budget, usable, value=si(budget, "B"))
    cap = kv_capacity(model, budget=budget, context=CONTEXT, block_size=BLOCK)
    k = model.kv_bytes_per_token
    p.equal("full-attention token slots floor(M / k) and blocks floor(M / (b k))", (cap.tokens, cap.blocks),
            (int(budget // k), int(budget // (BLOCK * k))))
    p.equal(f"window-aware, in {BLOCK}-token blocks per layer", cap.sequences_blocks, 25, value="25 sequences")
    p.equal("as full attention would count them: floor(blocks / ceil(c / b))", cap.blocks // -(-CONTEXT // BLOCK), 4,
            value="4 sequences")
    pool = KVPool.for_model(model, budget=budget, block_size=BLOCK)
    p.equal("the scheduler's pool (layer-blocks) fits the same", pool.sequences_that_fit(CONTEXT), 25)

    p.section(f"The reference scheduler: {REQUESTS} requests of {CONTEXT:,} prompt tokens at t = 0")
    p.equal("each ends holding P + O - 1 = 32,770 tokens", f.lifetime_kv_slots(prompt_tokens=CONTEXT,
                                                                               output_tokens=3), CONTEXT + 2)
    cost = RooflineCostModel.for_model(model, gpu)
    requests = [Request(id=i, arrival_s=0, prompt_tokens=CONTEXT, output_tokens=3) for i in range(REQUESTS)]
    steps = serve_continuous(requests, cost, max_num_seqs=256, kv_pool=pool, record_steps=True).steps
    assert steps is not None  # recorded by default
    first = steps[0]
    p.equal("the first prefill admits 25 (reserve admission: each reserves its lifetime's most blocks)",
            first.batch, 25)
    bw, peak = Fraction(gpu.bandwidth), Fraction(gpu.peak("bf16"))
    weights, per_token = model.decode_weight_bytes(1), cost.flops_per_token
    pairs = 25 * (full * CONTEXT * (CONTEXT + 1) // 2 + (len(windows) - full) * (1024 * 1025 // 2
                                                                                  + (CONTEXT - 1024) * 1024))
    p.equal("its attention pairs: per prompt 10 x c (c + 1) / 2 + 52 x (1,024 x 1,025 / 2 + (c - 1,024) x 1,024)",
            first.attention_pairs, pairs)
    p.equal("it writes the KV of every prompt token in every layer and reads the weights once",
            (first.bytes, first.flops), (weights + 25 * CONTEXT * k,
                                         25 * CONTEXT * per_token + Fraction(pairs * model.layer_attention_flops)))
    p.equal("and takes max(bytes / BW, FLOPs / peak)", first.duration_s, max(first.bytes / bw, first.flops / peak),
            value=f"{float(first.duration_s):.3f} s")
    decode = next(s for s in steps if s.kind == "decode")
    read = weights + 25 * model.kv_bytes(CONTEXT + 1)
    flops = 25 * per_token + 25 * model.attention_flops(CONTEXT + 1)
    p.equal("its first decode step reads the weights plus 25 x kv_bytes(32,769)", decode.bytes, read,
            value=si(decode.bytes, "B"))
    p.equal("computes 25 F + 25 x attention_flops(32,769)", decode.flops, flops)
    comp = f.compute_time(batch=25, flops_per_token=per_token, attention_flops_per_token=cost.attention_flops_per_token,
                          context_sum=Fraction(decode.context_sum, len(windows)), peak_flops=peak)
    p.equal("its compute time: FLOPs / peak, the step's token-layers / L standing for the context sum", comp,
            flops / peak, value=f"{float(comp) * 1e3:.3f} ms")
    p.holds("below its memory time: the step is memory-bound", comp < read / bw, f"{float(read / bw) * 1e3:.3f} ms")
    p.equal("and takes max(bytes / BW, FLOPs / peak)", decode.duration_s, max(read / bw, flops / peak),
            value=f"{float(decode.duration_s) * 1e3:.3f} ms")
    as_full = weights + 25 * (CONTEXT + 1) * k
    p.holds("full attention would read more than twice as much", as_full > 2 * decode.bytes,
            f"{si(as_full, 'B')} vs {si(decode.bytes, 'B')}")
    p.conclude(f"Gemma 3 27B at {CONTEXT:,} tokens on an H200: 25 sequences fit with sliding windows (4 at full "
               "attention); the scheduler admits 25")


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
