"""p24: DeepSeek sparse attention caps the read, not the cache: on 8 H200 a 128K decode step costs 0.27x DeepSeek-V3's.

Claim
-----
DeepSeek-V3.2 keeps every cached token (its MLA latent and its indexer key: 78,324 B per token
over 61 layers, 1.11x DeepSeek-V3's 70,272 B), but each decode query reads the indexer keys of
all c tokens and only the min(c, 2,048) latents the indexer selects. On one GPU of an 8-GPU
tensor-parallel H200 group, at a batch of 32, its decode step is slower than DeepSeek-V3's up to
a context just past index_topk = 2,048 tokens (it reads the indexer keys and the indexer's
weights too), the two cross at 2,741 tokens, and past it V3.2's step grows with the indexer's 8,052 B per
token instead of the full 70,272: at 131,072 tokens it takes 0.27x of V3's. The critical context
has two parts: the dense form up to 2,048 tokens, the indexer's past it.

Assumptions
-----------
* docs/conventions.md, "Sparse attention": per layer a query reads min(c, index_topk) latents
  (kv_lora_rank + qk_rope_head_dim values in the KV dtype) and c indexer keys (index_head_dim
  FP8 values and a float32 scale per 128, vLLM's ``DeepseekV32IndexerCache``); it spends the
  absorbed MLA FLOPs on the selected tokens and 2 x index_n_heads x index_head_dim on each
  cached one (the indexer's ReLU, weights and top-k selection are not counted).
* One GPU's share of the 8-GPU group (:class:`roofline.Deployment`), the roofline bound with
  datasheet constants, perfect overlap; the tensor-parallel all-reduces are left out (the same
  for both models at one batch, so they shift both step times equally).

Sources
-------
DeepSeek-V3.2-Exp paper, "DeepSeek Sparse Attention" (https://github.com/deepseek-ai/DeepSeek-V3.2-Exp,
DeepSeek_V3_2.pdf) and its config.json (index_n_heads 64, index_head_dim 128, index_topk 2,048);
vLLM ``vllm/model_executor/models/deepseek_v2.py`` (the indexer cache); H200 datasheet
(roofline.hardware).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p24_sparse_attention"
BATCH, TP = 32, 8
CONTEXTS = [1024 * 2 ** j for j in range(8)]  # 1K .. 128K


def _brute_read(model, c: int) -> int:
    """KV bytes one query reads, layer by layer: min(c, K) latents and c indexer keys in each."""
    latent = model.layer_kv_elements * model.kv_bytes_per_element
    return sum(min(c, model.index_topk) * latent + c * model.index_key_bytes for _ in range(model.attention_layers))


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..deployment import Deployment
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..symbolic import sparse as sy
    from ..symbolic import symbols_for

    gpu = get_accelerator("h200")
    v32, v3 = get_model("deepseek-v3.2"), get_model("deepseek-v3")
    p.title("p24 DeepSeek sparse attention: KV held against read, step time against DeepSeek-V3 (8 H200)")

    p.section("What a query reads (SymPy)")
    p.show("read(c)", sy.sparse_read_bytes)
    p.show("step time", sy.sparse_step_time)
    K: int = v32.sparse_terms()["index_topk"]
    at = {"index_topk": 8, "latent_bytes_per_token": 5, "index_bytes_per_token": 2}
    below = sy.sparse_read_bytes.subs(symbols_for(dict(at, context=6)))
    p.equal("up to K it is the dense read (k_m + k_i) c (K = 8, c = 6)", below, 7 * 6)
    p.equal("past K only the indexer's part grows: read(c + 1) - read(c) = k_i (c = 20)",
            sy.sparse_read_bytes.subs(symbols_for(dict(at, context=21)))
            - sy.sparse_read_bytes.subs(symbols_for(dict(at, context=20))), 2)
    terms = v32.sparse_terms()
    p.equal("DeepSeek-V3.2: K = 2,048; k_m = 61 x 1,152 B; k_i = 61 x (128 + 4) B",
            (K, terms["latent_bytes_per_token"], terms["index_bytes_per_token"]), (2048, 61 * 1152, 61 * 132))
    p.holds("sparse_read_bytes equals the read counted layer by layer (c = 0 .. 4,200 step 7, and 131,072)",
            all(f.sparse_read_bytes(context=c, **{k: terms[k] for k in at}) == _brute_read(v32, c)
                for c in [*range(0, 4200, 7), 131072]))
    p.equal("and ModelConfig.kv_read_bytes is it", v32.kv_read_bytes(131072),
            f.sparse_read_bytes(context=131072, **{k: terms[k] for k in at}))

    p.section("KV held against KV read, one sequence")
    held = [v32.kv_bytes(c) for c in CONTEXTS]
    p.equal("held: every token's latent and indexer key, 78,324 B per token (no window frees any)",
            held, [78324 * c for c in CONTEXTS], value=si(held[-1], "B") + " at 131,072")
    read = [f.sparse_read_bytes(context=c, **{k: terms[k] for k in at}) for c in CONTEXTS]
    p.holds("read = held up to 2,048 tokens, then less", all((r == h) == (c <= K) for r, h, c in
                                                             zip(read, held, CONTEXTS, strict=True)))
    p.equal("read at 131,072 tokens: 61 x (2,048 x 1,152 + 131,072 x 132) B", read[-1],
            61 * (2048 * 1152 + 131072 * 132), value=f"{si(read[-1], 'B')} = {float(read[-1] / held[-1]):.3f} of held")
    p.holds("DeepSeek-V3 holds and reads 70,272 B per token (dense MLA)", v3.kv_read_bytes(131072)
            == v3.kv_bytes(131072) == 70272 * 131072)

    p.section(f"Decode step time, batch {BATCH}, one GPU of {TP} (tensor parallel), contexts 1K .. 128K")
    d32, d3 = Deployment(v32, gpu, TP), Deployment(v3, gpu, TP)
    s32, s3 = d32.share, d3.share
    peak32, peak3 = Fraction(gpu.peak(v32.compute_dtype)), Fraction(gpu.peak(v3.compute_dtype))
    bw = Fraction(gpu.bandwidth)
    sparse = s32.sparse_terms()
    rates = {k: sparse[k] for k in ("latent_bytes_per_token", "index_bytes_per_token",
                                    "latent_attention_flops_per_token", "index_flops_per_token")}
    F32, F3 = s32.step_terms()["flops_per_token"], s3.step_terms()["flops_per_token"]
    W32, W3 = Fraction(s32.decode_weight_bytes(BATCH)), Fraction(s3.decode_weight_bytes(BATCH))

    def t32(c: int) -> Fraction:
        return f.sparse_step_time(batch=BATCH, context_sum=BATCH * c, capped_context_sum=BATCH * min(c, K),
                                  weight_bytes=W32, flops_per_token=F32, bandwidth=bw, peak_flops=peak32,
                                  overhead=0, **rates)

    def t3(c: int) -> Fraction:
        st = s3.step_terms()
        return f.step_time(batch=BATCH, context_sum=BATCH * c, weight_bytes=W3,
                           kv_bytes_per_token=st["kv_bytes_per_token"], flops_per_token=F3,
                           attention_flops_per_token=st["attention_flops_per_token"], bandwidth=bw,
                           peak_flops=peak3, overhead=0)

    rows = [(c, t32(c), t3(c)) for c in CONTEXTS]
    E, k_e = s32.num_experts, s32.num_experts_per_tok
    p.equal(f"a batch of {BATCH} touches E (1 - (1 - k/E)^B) of the E = {E} routed experts per MoE layer "
            f"(k = {k_e}; the weights both models read)",
            f.experts_touched(num_experts=E, experts_per_token=k_e, batch=BATCH),
            E * (1 - Fraction(E - k_e, E) ** BATCH))
    st3 = s3.step_terms()
    v3_flops = f.decode_flops(batch=BATCH, context_sum=BATCH * 131072, flops_per_token=F3,
                              attention_flops_per_token=st3["attention_flops_per_token"])
    p.equal("V3's step FLOPs at 131,072 tokens: B F + B a c (dense MLA, every token attended)", v3_flops,
            BATCH * F3 + BATCH * 131072 * st3["attention_flops_per_token"])
    p.equal("its compute time FLOPs / peak", f.compute_time(batch=BATCH, context_sum=BATCH * 131072,
                                                          flops_per_token=F3,
                                                          attention_flops_per_token=st3["attention_flops_per_token"],
                                                          peak_flops=peak3), v3_flops / peak3)
    for c, a, b in rows:
        p.say(f"  c = {c:>7,}: V3.2 {float(a) * 1e3:8.3f} ms   V3 {float(b) * 1e3:8.3f} ms   ratio {float(a / b):.3f}")
    dense = f.step_time(batch=BATCH, context_sum=BATCH * 1024, weight_bytes=W32,
                        kv_bytes_per_token=78324, flops_per_token=F32,
                        attention_flops_per_token=s32.step_terms()["attention_flops_per_token"], bandwidth=bw,
                        peak_flops=peak32, overhead=0)
    p.equal("at 1,024 tokens (below K) V3.2's step is the dense step_time at k = k_m + k_i", rows[0][1], dense)
    p.holds("V3.2 is the slower up to K (it also reads the indexer keys and weights)",
            all(a > b for c, a, b in rows if c <= K))
    p.holds("and the faster from 4,096 tokens on", all(a < b for c, a, b in rows if c > K))
    def nbytes(c: int) -> Fraction:
        return f.sparse_decode_bytes(context_sum=BATCH * c, capped_context_sum=BATCH * min(c, K), weight_bytes=W32,
                                     latent_bytes_per_token=rates["latent_bytes_per_token"],
                                     index_bytes_per_token=rates["index_bytes_per_token"])

    def nflops(c: int) -> Fraction:
        return f.sparse_decode_flops(batch=BATCH, context_sum=BATCH * c, capped_context_sum=BATCH * min(c, K),
                                     flops_per_token=F32, **{k: rates[k] for k in ("latent_attention_flops_per_token",
                                                                                 "index_flops_per_token")})

    p.holds("a step's bytes are the weights and B x the read counted layer by layer (one GPU's share)",
            all(nbytes(c) == W32 + BATCH * _brute_read(s32, c) for c in CONTEXTS))
    per_query = [f.sparse_attention_flops(context=c, index_topk=K, latent_attention_flops_per_token=rates[
        "latent_attention_flops_per_token"], index_flops_per_token=rates["index_flops_per_token"]) for c in CONTEXTS]
    p.holds("a query's attention FLOPs: min(c, K) x the MLA rate + c x the indexer's, layer by layer",
            all(a == s32.attention_layers * (min(c, K) * s32._mla_attention_flops
                                             + c * s32.index_flops_per_cached_token)
                for a, c in zip(per_query, CONTEXTS, strict=True)))
    p.holds("a step's FLOPs are B F + B x that", all(nflops(c) == BATCH * F32 + BATCH * a
                                                      for a, c in zip(per_query, CONTEXTS, strict=True)))
    p.holds("every V3.2 step is memory-bound at this batch: its time is bytes / BW > FLOPs / peak",
            all(t == nbytes(c) / bw > nflops(c) / peak32 for c, t, _ in rows))
    mixed = f.sparse_mixed_step_time(decode_rows=BATCH, context_sum=BATCH * 8192, capped_context_sum=BATCH * K,
                                     prefill_tokens=0, cached_tokens=0, attention_pairs=0, capped_attention_pairs=0,
                                     weight_bytes=W32, flops_per_token=F32, bandwidth=bw, peak_flops=peak32,
                                     overhead=0, **rates)
    p.equal("a mixed step without prompt tokens is the decode step (8,192 tokens)", mixed, t32(8192))
    q = 8192
    capped = f.window_attention_pairs(chunk_tokens=q, cached_tokens=0, sliding_window=K)
    p.equal("a prompt of 8,192 tokens: its queries attend sum min(t, K) pairs", capped,
            sum(min(t, K) for t in range(1, q + 1)))
    pairs = f.causal_attention_pairs(prompt_tokens=q)
    p.equal("beside the indexer's q (q + 1) / 2 causal pairs", pairs, q * (q + 1) // 2)
    prefill = f.sparse_mixed_step_time(decode_rows=0, context_sum=0, capped_context_sum=0, prefill_tokens=q,
                                       cached_tokens=0, attention_pairs=pairs, capped_attention_pairs=capped,
                                       weight_bytes=Fraction(s32.decode_weight_bytes(q)), flops_per_token=F32,
                                       bandwidth=bw, peak_flops=peak32, overhead=0, **rates)
    by_hand = max((s32.decode_weight_bytes(q) + q * 78324) / bw,
                  (q * F32 + rates["latent_attention_flops_per_token"] * capped
                   + rates["index_flops_per_token"] * pairs) / peak32)
    p.equal("its prefill writes 78,324 B per token and is priced max(bytes / BW, FLOPs / peak)", prefill, by_hand,
            value=f"{float(prefill) * 1e3:.3f} ms")
    # where the memory lines cross past K: W32 + B (k_m K + k_i c) = W3 + B k_3 c
    k3 = s3.step_terms()["kv_bytes_per_token"]
    cross = (W32 - W3 + BATCH * rates["latent_bytes_per_token"] * K) / (BATCH * (k3 - rates["index_bytes_per_token"]))
    p.holds("the step times cross just past K: solve W32 + B (k_m K + k_i c) = W3 + B k c",
            K < cross < 2 * K and t32(int(cross)) > t3(int(cross)) and t32(int(cross) + 1) < t3(int(cross) + 1),
            f"c = {float(cross):,.0f} tokens")
    growth32 = (rows[-1][1] - rows[-2][1]) / (CONTEXTS[-1] - CONTEXTS[-2])
    p.equal("past K V3.2's step grows by B k_i / BW per token of context", growth32,
            BATCH * rates["index_bytes_per_token"] / bw, value=f"{float(growth32) * 1e9:.3f} ns per token")
    p.equal("at 131,072 tokens", round(float(rows[-1][1] / rows[-1][2]), 2), 0.27,
            value=f"{float(rows[-1][1] / rows[-1][2]):.2f}x of V3's step")

    p.section("Critical context c*: two parts")
    cstar32 = f.sparse_critical_context(flops_per_token=F32, peak_flops=peak32, bandwidth=bw, index_topk=K,
                                        **rates)
    cstar3 = f.critical_context(kv_bytes_per_token=st3["kv_bytes_per_token"], flops_per_token=F3,
                                attention_flops_per_token=st3["attention_flops_per_token"], peak_flops=peak3,
                                bandwidth=bw)
    dense_part = F32 / (peak32 / bw * (rates["latent_bytes_per_token"] + rates["index_bytes_per_token"])
                        - rates["latent_attention_flops_per_token"] - rates["index_flops_per_token"])
    p.holds("V3.2's c* is the dense part F / (I* (k_m + k_i) - a_m - a_i), at most K", dense_part <= K and
            cstar32 == dense_part, f"{float(cstar32):,.0f} tokens")
    p.equal("V3's c* is F / (I* k - a) (dense MLA), in the same range", cstar3,
            F3 / (peak3 / bw * st3["kv_bytes_per_token"] - st3["attention_flops_per_token"]),
            value=f"{float(cstar3):,.0f} tokens")
    p.conclude("DeepSeek-V3.2 holds every token (78,324 B) but past 2,048 tokens reads only the indexer's 8,052 B "
               "per token more: its 128K decode step on 8 H200 costs 0.27x DeepSeek-V3's")


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
