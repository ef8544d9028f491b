"""p17: in the same memory a Qwen3-Next-80B-A3B sequence reaches 195,000 tokens, 5.95x a dense Qwen3-4B's 32,768.

Claim
-----
Qwen3-Next-80B-A3B keeps KV in 12 of its 48 layers (gated attention, 2 KV heads of 256); the
other 36 are Gated DeltaNet layers, each holding a fixed state per sequence: a conv state of
3 x 8,192 and a recurrent state of 32 x 128 x 128 elements. In BF16 (vLLM's default state
dtype for a BF16 checkpoint) a sequence holds 24,576 B of KV per token plus 39,518,208 B of
state whatever its context. In the 4.5 GiB that the dense Qwen3-4B (4.02B parameters, against
Qwen3-Next's 3.87B active) needs for one 32,768-token sequence, one Qwen3-Next sequence reaches
195,000 tokens: 5.95x as long. The price is in every decode step: each sequence's state is read
and written back (79 MB a row), so Qwen3-Next's decode is memory-bound at every batch and every
context (c* = 0: its FLOPs per token are below twice the ridge times the state); the reference
scheduler admits by KV blocks plus 101 state blocks per sequence and prices each decode step
with the state's bytes.

Assumptions
-----------
* docs/conventions.md, "Hybrid models": a recurrent layer's state shapes as vLLM's
  ``MambaStateShapeCalculator.gated_delta_net_state_shape``; the state in the model's dtype
  (vLLM's ``mamba_ssm_cache_dtype`` default "auto"); a decode step reads and writes each
  sequence's state once; FLOPs per token fixed in the context.
* The same memory: M = 4.5 GiB of cache for one sequence (case K2: Qwen3-4B at 32,768 tokens,
  144 KiB per token); block paging in 16-token blocks with the state in whole blocks of the
  same pool; the KV budget of one B200 at utilization 0.9 with reserve 0 (the upper bound: no
  published engine log covers this pair); the roofline bound with datasheet constants.
* Qwen3-Next's multi-token-prediction layer is not counted (it is not used to decode).

Sources
-------
Qwen/Qwen3-Next-80B-A3B-Instruct shapes (transformers' Qwen3NextConfig defaults, the preset's
``_source``); vllm/model_executor/layers/mamba/mamba_utils.py (state shapes and dtypes) and
vllm/config/cache.py (``mamba_ssm_cache_dtype = "auto"``); Qwen3-4B config.json (LMCache #688:
head_dim 128); B200 datasheet (roofline.hardware).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p17_hybrid"
GiB = 1 << 30
SHORT, LONG, BLOCK = 1_000, 32_768, 16
PROMPT, OUTPUT, REQUESTS = 64, 3, 4


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..estimate import criticality, kv_budget_for, kv_capacity, published_reserve
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import KVPool, Request, RooflineCostModel, serve_continuous
    from ..symbolic import evaluate
    from ..symbolic import hybrid as hy

    model, dense, gpu = get_model("qwen3-next-80b-a3b"), get_model("qwen3-4b"), get_accelerator("b200")
    mixer = model.state_mixer
    assert mixer is not None
    p.title("p17 hybrid models: state, KV, what fits and a decode step (Qwen3-Next-80B-A3B, BF16, B200)")

    p.section("What one Gated DeltaNet layer keeps per sequence (vLLM's state shapes)")
    p.equal("conv state: (kernel - 1) x (2 x 16 key heads x 128 + 32 value heads x 128) elements",
            mixer.conv_state_elements, 3 * (2 * 16 * 128 + 32 * 128), value="24,576")
    p.equal("recurrent state: 32 value heads x 128 x 128 elements", mixer.ssm_state_elements, 32 * 128 * 128,
            value="524,288")
    p.equal("48 layers: 36 Gated DeltaNet, 12 attention (every 4th)", (mixer.layers, model.attention_layers), (36, 12))
    S = model.state_bytes_per_sequence
    p.equal("state per sequence = 36 x (24,576 + 524,288) x 2 B (BF16)", S, 36 * (24_576 + 524_288) * 2,
            value=si(S, "B"))
    k = model.kv_bytes_per_token
    p.equal("KV per token = 2 x 12 attention layers x 2 KV heads x 256 x 2 B", k, 2 * 12 * 2 * 256 * 2,
            value=f"{k:,} B")
    kd = dense.kv_bytes_per_token
    p.equal("Qwen3-4B, dense: 2 x 36 x 8 x 128 x 2 B per token", kd, 147_456, value=f"{kd:,} B")
    p.holds("a dense model of the same active size: Qwen3-4B's 4.02B parameters vs 3.87B active",
            abs(dense.parameters - model.active_parameters) < dense.parameters // 20,
            f"{dense.parameters:,} vs {model.active_parameters:,}")
    p.table(("context", "Qwen3-Next KV + state", "Qwen3-4B KV"),
            [(f"{c:,}", si(k * c + S, "B"), si(kd * c, "B")) for c in (SHORT, LONG)])
    p.equal(f"at {SHORT:,} and {LONG:,} tokens the state stays, the KV grows", (k * SHORT + S, k * LONG + S),
            (64_094_208, 844_824_576))

    p.section("How long a context one sequence reaches in the same memory")
    p.show("c_max(M)", hy.max_context_)
    p.legend("budget", "state_bytes", "kv_bytes_per_token")
    M = Fraction(9, 2) * GiB
    p.equal("M = 4.5 GiB: Qwen3-4B's KV at 32,768 tokens (case K2)", kd * LONG, M, value=si(M, "B"))
    reach = f.kv_capacity_tokens(budget=M - S, kv_bytes_per_token=k)
    p.equal("Qwen3-Next: the KV capacity of what the state leaves, floor((M - S) / k)", reach, (M - S) // k,
            value=f"{reach:,} tokens")
    p.equal("the symbolic form gives the same", evaluate(hy.max_context_, budget=M, state_bytes=S,
                                                          kv_bytes_per_token=k), reach)
    plain = f.kv_capacity_tokens(budget=M, kv_bytes_per_token=kd)
    p.equal("Qwen3-4B (no state): floor(M / k)", plain, LONG, value=f"{plain:,} tokens")
    p.equal("a context as long as", Fraction(reach, plain), Fraction(195_000, 32_768),
            value=f"{reach / plain:.2f}x")

    p.section("What the pool of one B200 holds (16-token blocks, the state in whole blocks)")
    budget = kv_budget_for(model, gpu)
    p.holds("no published engine log gives this pair's reserve: reserve 0, the upper bound",
            published_reserve(model, gpu) is None)
    p.equal("the KV budget = usable memory x 0.9 - weights", budget,
            Fraction(gpu.usable_memory) * Fraction(9, 10) - model.weight_bytes, value=si(budget, "B"))
    pool = KVPool.for_model(model, budget=budget, block_size=BLOCK)
    blocks = int(budget // (BLOCK * k))
    p.equal("blocks of 16 tokens of KV: floor(M / (16 k))", pool.capacity_blocks, blocks, value=f"{blocks:,}")
    p.equal("the state takes ceil(S / (16 k)) of them", pool.state_blocks, -(-S // (BLOCK * k)), value="101 blocks")
    fit = f.hybrid_sequences_that_fit(pool_blocks=blocks, context=LONG, block_size=BLOCK, state_blocks=101)
    p.equal(f"sequences of {LONG:,} tokens: floor(blocks / (2,048 + 101))", (fit, pool.sequences_that_fit(LONG)),
            (blocks // (LONG // BLOCK + 101),) * 2, value=f"{fit} sequences")
    cap = kv_capacity(model, budget=budget, context=LONG, block_size=BLOCK)
    p.equal("the estimate API counts the same (KV plus state per sequence)",
            (cap.sequences_blocks, cap.kv_bytes_per_sequence), (fit, k * LONG + S))

    p.section(f"The reference scheduler: {REQUESTS} requests of {PROMPT} prompt tokens, {OUTPUT} outputs")
    p.show("bytes of a decode step", hy.hybrid_decode_bytes)
    cost = RooflineCostModel.for_model(model, gpu)
    stated = cost.stretch_terms()
    p.holds("the cost model states the state as a term of the batch: 2 S / BW of memory time per decode row",
            not isinstance(stated, str) and stated.state == 2 * Fraction(S) / Fraction(gpu.bandwidth), str(stated))
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=PROMPT, output_tokens=OUTPUT) for i in range(REQUESTS)]
    run = serve_continuous(reqs, cost, kv_pool=pool, record_steps=True)
    p.holds("so the stretch clock runs it, equal to the step clock step by step",
            run.options["engine"] == "event"
            and list(run.steps or ()) == list(serve_continuous(reqs, cost, kv_pool=pool, record_steps=True,
                                                               engine="step").steps or ()))
    steps = run.steps
    assert steps is not None
    bw, peak = Fraction(gpu.bandwidth), Fraction(gpu.peak("bf16"))
    E, kx = model.num_experts, model.num_experts_per_tok
    shared, expert = Fraction(model.shared_weight_bytes), Fraction(model.routed_expert_bytes)

    def weights(tokens: int) -> Fraction:  # shared weights + experts touched, uniform routing, by hand
        return shared + expert * E * (1 - Fraction(E - kx, E) ** tokens)

    F, a = model.flops_per_token("exact")
    p.equal("F = 2 x active matmul parameters + the recurrent layers' FLOPs (36 x (2 x 4 x 8,192 + 6 x 524,288))",
            F, model.matmul_flops_per_token + 36 * (2 * 4 * 8192 + 6 * 524_288), value=si(F, "FLOP"))
    p.equal("a request ends holding P + O - 1 = 66 tokens: 5 blocks of KV and 101 of state",
            (f.lifetime_kv_slots(prompt_tokens=PROMPT, output_tokens=OUTPUT), pool.lifetime_blocks(PROMPT, OUTPUT)),
            (PROMPT + OUTPUT - 1, 5 + 101))
    p.equal("a step of B tokens reads the shared weights + one expert's bytes x E (1 - (1 - k/E)^B) (uniform routing)",
            f.moe_decode_weight_bytes(shared_weight_bytes=shared, routed_expert_bytes=expert, num_experts=E,
                                      experts_per_token=kx, batch=REQUESTS), weights(REQUESTS))
    first, n = steps[0], REQUESTS * PROMPT
    pairs = REQUESTS * PROMPT * (PROMPT + 1) // 2
    p.equal("the prefill admits all 4 and holds 4 x (ceil(66 / 16) + 101) blocks at its end",
            (first.kind, first.batch, first.kv_blocks), ("prefill", REQUESTS, REQUESTS * (5 + 101)))
    p.equal("it reads W(256 tokens) and writes 256 tokens of KV; 256 F + a x 4 x 64 x 65 / 2 FLOPs",
            (first.bytes, first.flops), (weights(n) + n * k, n * F + a * pairs))
    p.equal("and takes max(bytes / BW, FLOPs / peak)", first.duration_s, max(first.bytes / bw, first.flops / peak),
            value=f"{float(first.duration_s) * 1e3:.3f} ms")
    decode = steps[1]
    c = PROMPT + 1
    read = weights(REQUESTS) + REQUESTS * c * k + 2 * REQUESTS * S
    p.equal("its first decode step: W(4) + 4 x 65 x k + 2 x 4 x S (each state read and written back)",
            (decode.kind, decode.batch, decode.bytes), ("decode", REQUESTS, read), value=si(read, "B"))
    p.equal("FLOPs 4 F + a x 4 x 65, in compute time FLOPs / peak", (decode.flops, f.compute_time(
        batch=REQUESTS, flops_per_token=F, attention_flops_per_token=a, context_sum=REQUESTS * c, peak_flops=peak)),
        (REQUESTS * F + a * REQUESTS * c, (REQUESTS * F + a * REQUESTS * c) / peak))
    p.equal("and takes max(bytes / BW, FLOPs / peak), memory-bound", decode.duration_s, read / bw,
            value=f"{float(decode.duration_s) * 1e3:.3f} ms")
    terms = dict(weight_bytes=weights(REQUESTS), kv_bytes_per_token=k, flops_per_token=F,
                 attention_flops_per_token=a, bandwidth=bw, peak_flops=peak, overhead=0)
    p.equal("= hybrid_step_time", f.hybrid_step_time(batch=REQUESTS, context_sum=REQUESTS * c, state_bytes=S, **terms),
            decode.duration_s)
    p.equal("which is step_time when the state is 0",
            f.hybrid_step_time(batch=REQUESTS, context_sum=REQUESTS * c, state_bytes=0, **terms),
            f.step_time(batch=REQUESTS, context_sum=REQUESTS * c, **terms))
    p.equal("its intensity, the states among the bytes read once: 4 (F + a c) / (W(4) + 8 S + 4 k c)",
            f.arithmetic_intensity(batch=REQUESTS, context=c, weight_bytes=weights(REQUESTS) + 2 * REQUESTS * S,
                                   kv_bytes_per_token=k, flops_per_token=F, attention_flops_per_token=a),
            decode.flops / decode.bytes)

    p.section("Where math would catch up: never, at any batch or context")
    ridge = peak / bw
    p.show("c*", hy.hybrid_critical_context)
    limit0 = evaluate(hy.intensity_limit_, context=0, kv_bytes_per_token=k, flops_per_token=F,
                      attention_flops_per_token=a, state_bytes=S)
    p.equal("as the batch grows the intensity tends to (F + a c) / (k c + 2 S) (SymPy limit); at c = 0, F / (2 S)",
            limit0, F / (2 * S), value=f"{float(limit0):.1f} FLOP/byte")
    at_short = criticality(model, gpu, context=SHORT).intensity_limit
    p.equal("at 1,000 tokens: the estimate API's limit", at_short, (F + a * SHORT) / (k * SHORT + 2 * S),
            value=f"{float(at_short):.1f} FLOP/byte")
    p.holds("below the ridge: the state's traffic alone keeps every batch memory-bound", limit0 < ridge,
            f"ridge {float(ridge):.1f} FLOP/byte")
    crit = dict(kv_bytes_per_token=k, flops_per_token=F, attention_flops_per_token=a, peak_flops=peak, bandwidth=bw)
    p.equal("so c* = 0", f.hybrid_critical_context(state_bytes=S, **crit), 0)
    model_terms = dict(weight_bytes=weights(1), kv_bytes_per_token=k, flops_per_token=F, attention_flops_per_token=a,
                       peak_flops=peak, bandwidth=bw)
    p.holds("and no critical batch at 1,000 tokens",
            f.hybrid_critical_batch(context=SHORT, state_bytes=S, **model_terms) is None
            and criticality(model, gpu, context=SHORT).critical_batch is None)
    at = criticality(model, gpu, context=SHORT)
    p.equal("the estimate API says the same c*, at the ridge peak / BW", (at.critical_context, at.ridge_point),
            (0, ridge))
    lo, hi = 1, 1 << 14  # weights only (no KV, no state): the MoE's first compute-bound batch, by bisection
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mid * F / peak >= weights(mid) / bw else (mid, hi)
    p.equal("weights only (no KV, no state), the MoE's B*: first B with B F / peak >= W(B) / BW",
            at.critical_batch_weights_only, hi, value=f"B* = {hi:,}")
    margin = f.moe_compute_margin(batch=hi, context=0, shared_weight_bytes=shared, routed_expert_bytes=expert,
                                  num_experts=E, experts_per_token=kx, kv_bytes_per_token=k, flops_per_token=F,
                                  attention_flops_per_token=a, peak_flops=peak, bandwidth=bw)
    p.equal("where the compute margin B F / peak - W(B) / BW has turned >= 0", margin, hi * F / peak - weights(hi) / bw,
            value=f"{float(margin) * 1e6:.3f} us")
    p.equal("with the state free (S = 0) c* is the dense model's F / (ridge k - a)",
            f.hybrid_critical_context(state_bytes=0, **crit), f.critical_context(**crit),
            value=f"{float(f.critical_context(**crit)):,.0f} tokens")
    smallest = next(b for b in range(1, 10_000) if b * F / peak >= weights(1) / bw)
    p.equal("B* = the smallest integer batch there (searched)",
            f.hybrid_critical_batch(context=0, state_bytes=0, **model_terms), smallest, value=f"B* = {smallest}")
    p.conclude(f"Qwen3-Next-80B-A3B: in Qwen3-4B's 4.5 GiB one sequence reaches {reach:,} tokens, "
               f"{reach / plain:.2f}x; its decode is memory-bound at every batch (c* = 0)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
