"""p19: prefix caching: a prefill after h cached tokens is the chunk formula, and shared blocks count once.

Claim
-----
Under prefix caching (vLLM V1's automatic prefix caching) a prompt of P tokens whose m
leading full blocks of b tokens are held reuses h = b min(m, floor((P - 1) / b)) tokens (its
last token is always computed), and its prefill is the chunk of q = P - h tokens after h
cached ones with no decode row: the h tokens' matmuls and their h (h + 1) / 2 attention pairs
are saved, their KV is still read. On Llama 3.1 8B in BF16 on an H100 SXM a 2,048-token
prompt whose first 1,536 tokens are cached takes 8.3 ms instead of 32.2 ms. B sequences of c
tokens sharing their first S_p tokens hold the shared full blocks once: vLLM's pool of 5,691
16-token blocks, which runs 90 sequences of 1,000 tokens, holds 182 of them when they share a
512-token system prompt. The reference scheduler, with the prefix cache on, prefills exactly
the formula's tokens and attention pairs and peaks at exactly the formula's blocks.

Assumptions
-----------
* docs/conventions.md, "Prefix caching": block-granular sharing of full blocks with a
  reference count, chained block hashes, the last prompt token always computed; the cost of
  a step as docs/conventions.md, "One step" and "Chunked prefill" (the roofline bound,
  datasheet constants, perfect overlap, overhead 0).
* The pool of 5,691 blocks of 16 tokens is vLLM's own log for Llama 3.1 8B on an 80 GB
  card (vLLM issue #12330), as in p04.

Sources
-------
vLLM V1 ``KVCacheManager.get_computed_blocks`` (``max_cache_hit_length = num_tokens - 1``)
and the vLLM docs, "Automatic Prefix Caching" (design: block hashes chained over the prefix,
reference counts, an LRU free-block queue); vLLM issue #12330 (5,691 blocks); Llama 3.1 8B
config.json and the H100 SXM datasheet (roofline.models, roofline.hardware).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script

NAME = "p19_prefix_caching"
BLOCK, POOL = 16, 5691


def _brute_cached(p: int, m: int, b: int) -> int:
    """Tokens hit, block by block: a held leading block counts if all its tokens are among the first P - 1."""
    hit = 0
    for j in range(m):
        if (j + 1) * b > p - 1:
            break
        hit += b
    return hit


def _brute_blocks(n: int, c: int, s: int, b: int) -> int:
    """Distinct blocks of n sequences of c tokens sharing their first s tokens, by naming every block."""
    held = set()
    for seq in range(n):
        for j in range(-(-c // b)):
            shared = (j + 1) * b <= min(s, c - 1)  # a full block inside the shared prefix (never the last token)
            held.add(("shared", j) if shared else (seq, j))
    return len(held)


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import KVPool, Request, UnitCostModel, serve_continuous
    from ..symbolic import kv_cache as kc
    from ..symbolic import step_time as st
    from ..symbolic import symbols_for

    p.title("p19 prefix caching: the cost of a cached prefill and the blocks of a shared prefix")

    p.section("Tokens a hit saves: full blocks of the first P - 1 tokens")
    p.show("h", kc.prefix_cached_tokens)
    p.legend("prompt_tokens", "matched_blocks", "block_size")
    grid = [(pt, m, b) for pt in range(1, 36) for m in range(0, 7) for b in (1, 3, 16)]
    p.holds("equals the held leading blocks counted one by one", all(
        f.prefix_cached_tokens(prompt_tokens=pt, matched_blocks=m, block_size=b) == _brute_cached(pt, m, b)
        for pt, m, b in grid), f"{len(grid)} cases")
    p.equal("a 64-token prompt with all 4 of its 16-token blocks held still computes its last block",
            f.prefix_cached_tokens(prompt_tokens=64, matched_blocks=4, block_size=16), 48)

    p.section("A prefill of q new tokens after h cached ones: the chunk formula, no decode row")
    p.show("t(q, h)", st.cached_prefill_time)
    p.legend("chunk_tokens", "cached_tokens")
    p.equal("is the mixed step with D = 0, S = 0, one chunk of q after h (SymPy)", st.cached_prefill_time,
            st.mixed_step_time.subs(symbols_for(dict(decode_rows=0, context_sum=0))).subs(
                {st._T: st.chunk_tokens, st._Q: st.chunk_attention_pairs}))
    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    bw, peak = Fraction(gpu.bandwidth), Fraction(gpu.peak("bf16"))
    per_token, attention = model.flops_per_token()
    p.equal("Llama 3.1 8B in BF16: W, k = 2 x 32 x 8 x 128 x 2 B, F (2 x matmul parameters) and a = 4 x 32 x 32 x 128",
            (model.weight_bytes, model.kv_bytes_per_token, per_token, attention),
            (16_060_522_496, 2 * 32 * 8 * 128 * 2, 15_009_316_864, 4 * 32 * 32 * 128))
    terms = dict(weight_bytes=model.weight_bytes, kv_bytes_per_token=model.kv_bytes_per_token,
                 flops_per_token=per_token, attention_flops_per_token=attention, bandwidth=bw, peak_flops=peak,
                 overhead=0)
    full = f.cached_prefill_time(chunk_tokens=2048, cached_tokens=0, **terms)
    pairs = 2048 * 2049 // 2
    flops_full = 2048 * per_token + attention * pairs
    bytes_full = model.weight_bytes + 2048 * model.kv_bytes_per_token
    p.equal("h = 0: a whole prefill of 2,048 tokens, max(bytes / BW, FLOPs / peak) with P (P + 1) / 2 pairs", full,
            max(Fraction(bytes_full) / bw, Fraction(flops_full) / peak),
            value=f"{float(full) * 1e3:.1f} ms")
    cached = f.cached_prefill_time(chunk_tokens=512, cached_tokens=1536, **terms)
    q, h = 512, 1536
    flops = q * per_token + attention * (q * h + q * (q + 1) // 2)
    bytes_ = model.weight_bytes + (q + h) * model.kv_bytes_per_token
    p.equal("h = 1,536 cached: q F + a (q h + q (q + 1) / 2) FLOPs; the KV of all 2,048 tokens moved", cached,
            max(Fraction(bytes_) / bw, Fraction(flops) / peak),
            value=f"{float(cached) * 1e3:.1f} ms")
    p.equal("FLOPs saved: h F + a h (h + 1) / 2", flops_full - flops,
            h * per_token + attention * h * (h + 1) // 2)
    p.holds("both are compute-bound, so the time saved is the FLOPs saved / peak",
            Fraction(flops) / peak > Fraction(bytes_) / bw,
            f"{float(full) * 1e3:.1f} ms -> {float(cached) * 1e3:.1f} ms")
    one = f.cached_prefill_time(chunk_tokens=1, cached_tokens=8191, **terms)
    p.equal("one new token after 8,191 cached is memory-bound: (W + 8,192 k) / BW", one,
            Fraction(model.weight_bytes + 8192 * model.kv_bytes_per_token) / bw, value=f"{float(one) * 1e3:.3f} ms")

    p.section("Blocks of B sequences sharing a prefix: the shared full blocks once")
    p.show("blocks(B)", kc.shared_prefix_blocks)
    p.show("fit(C)", kc.shared_prefix_sequences_that_fit)
    p.legend("batch", "context", "shared_prefix_tokens", "block_size", "pool_blocks")
    cases = [(n, c, s, b) for n in (1, 3) for c in range(1, 30, 3) for s in range(0, 33, 8) for b in (1, 3, 8)]
    p.holds("equals the distinct blocks of the sequences, every block named", all(
        f.shared_prefix_blocks(batch=n, context=c, shared_prefix_tokens=s, block_size=b) == _brute_blocks(n, c, s, b)
        for n, c, s, b in cases), f"{len(cases)} cases")
    fits = [(cap, c, s, b) for cap in (0, 7, 40) for c in (1, 5, 17) for s in (0, 4, 16) for b in (1, 4)]

    def most(cap: int, c: int, s: int, b: int) -> int:
        n = 0
        while f.shared_prefix_blocks(batch=n + 1, context=c, shared_prefix_tokens=s, block_size=b) <= cap:
            n += 1
        return n
    p.holds("is the largest B whose blocks fit C", all(
        f.shared_prefix_sequences_that_fit(pool_blocks=cap, context=c, shared_prefix_tokens=s, block_size=b)
        == most(cap, c, s, b) for cap, c, s, b in fits), f"{len(fits)} cases")
    alone = f.shared_prefix_sequences_that_fit(pool_blocks=POOL, context=1000, shared_prefix_tokens=0, block_size=BLOCK)
    p.equal("S_p = 0: vLLM #12330's 5,691 blocks of 16 run 90 sequences of 1,000 tokens",
            alone, f.sequences_that_fit_blocks(budget=POOL * BLOCK, kv_bytes_per_token=1, block_size=BLOCK,
                                               context=1000), value=f"{alone} sequences")
    shared = f.shared_prefix_sequences_that_fit(pool_blocks=POOL, context=1000, shared_prefix_tokens=512,
                                                block_size=BLOCK)
    p.equal("sharing a 512-token prompt: floor((5,691 - 32) / (63 - 32))", shared, (POOL - 32) // 31,
            value=f"{shared} sequences")

    p.section("The reference scheduler with the prefix cache on (unit step times, exact counts)")
    n, c_prompt, s_tokens, out = 6, 100, 64, 13  # P + O - 1 = 112, 7 full blocks
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=c_prompt, output_tokens=out,
                    block_hashes=tuple(range(s_tokens // BLOCK)) + tuple(1000 * (i + 1) + j for j in range(3)),
                    hash_block_size=BLOCK) for i in range(n)]
    res = serve_continuous(reqs, UnitCostModel(), max_num_seqs=n, kv_pool=KVPool.unlimited(block_size=BLOCK),
                           enable_prefix_caching=True, record_steps=True)
    saved = sum(r.prompt_tokens for r in reqs) - sum(r.prefill_tokens for r in res.requests)
    hit = f.prefix_cached_tokens(prompt_tokens=c_prompt, matched_blocks=s_tokens // BLOCK, block_size=BLOCK)
    p.equal(f"{n} prompts of {c_prompt} tokens sharing {s_tokens}, all at t = 0: all but the first hit h", saved,
            (n - 1) * _brute_cached(c_prompt, s_tokens // BLOCK, BLOCK), value=f"{saved} tokens saved")
    p.equal("h = prefix_cached_tokens(100, 4, 16)", hit, s_tokens)
    p.equal("the prefix cache reports the same", res.options["prefix_cache"]["prefill_tokens_saved"], saved)
    assert res.steps is not None  # recorded
    pairs = sum(s.attention_pairs for s in res.steps if s.kind != "decode")
    brute = sum(range(1, c_prompt + 1)) + (n - 1) * sum(hit + i for i in range(1, c_prompt - hit + 1))
    p.equal("its prefill's attention pairs: the first prompt's, then n - 1 chunks of P - h after h, query by query",
            pairs, brute)
    top = res.summary.peak_kv_blocks
    context = c_prompt + out - 1
    p.equal("the pool peaks at shared_prefix_blocks(n, P + O - 1, S_p, b), every block named", (top, top),
            (f.shared_prefix_blocks(batch=n, context=context, shared_prefix_tokens=s_tokens, block_size=BLOCK),
             _brute_blocks(n, context, s_tokens, BLOCK)), value=f"{top} blocks, not {n * -(-context // BLOCK)}")
    p.conclude(f"a 2,048-token prompt with 1,536 cached: {float(full) * 1e3:.1f} ms -> {float(cached) * 1e3:.1f} ms "
               f"on Llama 3.1 8B, H100; 5,691 blocks hold {shared} sequences of 1,000 sharing 512 ({alone} unshared)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
