"""p02: 8 requests side by side make 8 tokens in about the same step, so throughput rises ~8x.

Claim
-----
Put 8 requests through the same weight read: the step still streams the 16 GB of
weights and still takes ~4.8 ms, but makes 8 tokens instead of one; throughput rises
~8x and nobody's step gets noticeably slower. Exactly how much longer the step gets:
0 in the roofline with weights only (the step stays memory-bound, max(memory, compute)
does not move); 7 x F / peak (+2.4 %) in the no-overlap upper bound; 7 x c x k / BW
(+5.7 % at 1,000 tokens of context) with each sequence's own KV reads.

Assumptions
-----------
* CONVENTIONS.md, "One step": bytes = W + k S, FLOPs = B F + a S, step time =
  max(bytes / BW, FLOPs / peak); the no-overlap bound is their sum.
* FLOPs: the lesson's 2 x P (the exact count is shown beside where it differs).
* With KV reads every sequence is at the same context c (1,000 tokens).

Sources
-------
Llama 3.1 8B config.json; H100 SXM datasheet and Hopper whitepaper (CONSTANTS.md);
the lesson, section 2 ("Batching: the cheapest speedup in decode").
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

import sympy as sp

from ._proof import Proof, run_script, si

NAME = "p02_batching"
BATCH, CONTEXT = 8, 1000


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..symbolic import step_time as st
    from ..symbolic import symbols_for
    from ..symbolic._symbols import S

    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    W, k = model.weight_bytes, model.kv_bytes_per_token
    BW, PEAK = Fraction(gpu.bandwidth), Fraction(gpu.peak_flops)
    F = model.two_p_flops_per_token
    B, c = S.batch, S.context

    p.title(f"p02 batching: {BATCH} requests share one weight read (Llama 3.1 8B, BF16, H100 SXM)")

    p.section("Bytes and FLOPs of a step of B sequences at context c (S = B c)")
    bytes_b = st.decode_bytes.subs(S.context_sum, B * c)
    flops_b = st.decode_flops.subs(S.context_sum, B * c)
    p.show("bytes", bytes_b)
    p.show("FLOPs", flops_b)
    p.legend("weight_bytes", "kv_bytes_per_token", "batch", "context", "flops_per_token", "attention_flops_per_token")
    p.say("The weights W are read once per step whatever B is; only the FLOPs (and each sequence's KV) grow with B.")
    p.equal("bytes(B) - bytes(1) = (B - 1) k c: the weights are shared", bytes_b - bytes_b.subs(B, 1),
            (B - 1) * S.kv_bytes_per_token * c)

    p.section(f"Weights only: {BATCH} sequences against 1")
    base = dict(weight_bytes=W, kv_bytes_per_token=0, flops_per_token=F, attention_flops_per_token=0,
                bandwidth=BW, peak_flops=PEAK, overhead=0, context_sum=0)
    t1 = st.step_time.subs(symbols_for(dict(base, batch=1)))
    t8 = st.step_time.subs(symbols_for(dict(base, batch=BATCH)))
    compute8 = Fraction(BATCH * F) / PEAK
    p.holds(f"still memory-bound at B = {BATCH}: {BATCH} F / peak < W / BW", compute8 < Fraction(W) / BW,
            f"{si(compute8, 's')} < {si(Fraction(W) / BW, 's')}")
    p.equal(f"step time at B = {BATCH} = step time at B = 1 = W / BW (roofline: exactly 0 longer)", t8 - t1, 0,
            value=f"both {si(t8, 's')}")
    ratio = (BATCH / t8) / (1 / t1)
    p.equal(f"throughput ratio B t(1) / t(B) = {BATCH} exactly", ratio, BATCH,
            value=f"{float(BATCH / t8):,.0f} tokens/s against {float(1 / t1):,.1f} tokens/s")
    p.equal("fast path throughput = symbolic", f.throughput(**dict(base, batch=BATCH)), BATCH / t8)
    nol1 = st.step_time_no_overlap.subs(symbols_for(dict(base, batch=1)))
    nol8 = st.step_time_no_overlap.subs(symbols_for(dict(base, batch=BATCH)))
    p.equal("fast path step_time_no_overlap = symbolic", f.step_time_no_overlap(**dict(base, batch=BATCH)), nol8)
    p.equal(f"fast path compute_time = {BATCH} F / peak", f.compute_time(
        batch=BATCH, flops_per_token=F, attention_flops_per_token=0, context_sum=0, peak_flops=PEAK), compute8)
    p.equal(f"no-overlap upper bound: {BATCH - 1} more tokens' FLOPs, + (B - 1) F / peak", nol8 - nol1,
            Fraction((BATCH - 1) * F) / PEAK,
            value=f"+{si(nol8 - nol1, 's')} (+{float((nol8 - nol1) / nol1) * 100:.2f} %)")

    p.section(f"With each sequence's KV reads at {CONTEXT:,} tokens")
    kv = dict(base, kv_bytes_per_token=k)
    t1_kv = f.step_time(**dict(kv, batch=1, context_sum=CONTEXT))
    t8_kv = f.step_time(**dict(kv, batch=BATCH, context_sum=BATCH * CONTEXT))
    growth = st.step_time.subs(symbols_for(dict(kv, batch=BATCH, context_sum=BATCH * CONTEXT))) - \
        st.step_time.subs(symbols_for(dict(kv, batch=1, context_sum=CONTEXT)))
    p.equal(f"step(B = {BATCH}) - step(B = 1) = (B - 1) c k / BW (still memory-bound)", growth,
            Fraction((BATCH - 1) * CONTEXT * k) / BW,
            value=f"+{si(growth, 's')} (+{float(growth / t1_kv) * 100:.2f} %): {si(t1_kv, 's')} -> {si(t8_kv, 's')}")
    kv_ratio = BATCH * t1_kv / t8_kv
    p.holds(f"throughput still rises ~{BATCH}x", 7 < kv_ratio <= BATCH, f"x{float(kv_ratio):.3f}")
    exact_kw = dict(kv, flops_per_token=model.matmul_flops_per_token,
                    attention_flops_per_token=model.attention_flops_per_token)
    t8_exact = f.step_time(**dict(exact_kw, batch=BATCH, context_sum=BATCH * CONTEXT))
    p.equal("the exact FLOPs convention gives the same step (memory-bound: FLOPs do not enter)", t8_exact, t8_kv)
    p.within("with KV reads the step is ~5 ms (the lesson's round step time of section 3)", t8_kv,
             Fraction(475, 100_000),
             Fraction(525, 100_000), unit="s")
    growth_sym = sp.simplify((st.decode_bytes.subs(S.context_sum, BATCH * c) - st.decode_bytes.subs(S.context_sum, c))
                             / S.bandwidth)
    p.show("step growth in general (memory-bound)", growth_sym)

    p.conclude(f"{BATCH} tokens per {si(t8, 's')} step: +0 (roofline, weights only), "
               f"+{si(nol8 - nol1, 's')} (no overlap), +{si(growth, 's')} (+{float(growth / t1_kv) * 100:.1f} %) "
               f"with KV at {CONTEXT:,} tokens; throughput x{float(ratio):.0f} / x{float(kv_ratio):.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
