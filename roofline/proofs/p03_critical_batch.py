"""p03: math catches up with reading only at a few hundred sequences, and never at 1,000 tokens of context.

Claim
-----
In the idealized picture (weights only) the arithmetic intensity of a decode step is
B FLOP/byte, and the math catches up with the reading where it reaches the ridge point
peak / BW = 295.3 FLOP/byte: at B* = 296 sequences, the same number as
4.8 ms / 16 us (memory time over compute time per token). With each sequence's KV
reads at 1,000 tokens of context it never does: the intensity's limit as B grows,
(F + a c) / (k c), stays below the ridge for every context above the critical context
c* = F / (I* k - a), about 415 tokens with the lesson's 2 x P (393 exact), so there is
no critical batch at 1,000 tokens ("none", not a number).

Assumptions
-----------
* CONVENTIONS.md, "One step" and "Critical batch": I = FLOPs / bytes, I* = peak / BW,
  B* = the smallest integer batch with I >= I* (equality counts as compute-bound).
* FLOPs per token: the lesson's 2 x P (no attention FLOPs), and the exact count
  (2 x matmul parameters, 4 L H d c attention FLOPs), each named.

Sources
-------
Llama 3.1 8B config.json; H100 SXM datasheet and Hopper whitepaper (CONSTANTS.md);
the lesson, section 2; cases S1 and S2 of ../shared/cases/CASES.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

import sympy as sp

from ._proof import Proof, run_script, si

NAME = "p03_critical_batch"
CONTEXT = 1000


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..symbolic import intensity as si_
    from ..symbolic import symbols_for
    from ..symbolic._symbols import S

    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    W, k = model.weight_bytes, model.kv_bytes_per_token
    BW, PEAK = Fraction(gpu.bandwidth), Fraction(gpu.peak_flops)
    F2P, F_ex, a_ex = model.two_p_flops_per_token, model.matmul_flops_per_token, model.attention_flops_per_token
    ridge = PEAK / BW

    p.title("p03 critical batch and critical context (Llama 3.1 8B, BF16, H100 SXM)")

    p.section("Arithmetic intensity and the ridge point")
    p.show("intensity I(B, c)", si_.arithmetic_intensity)
    p.show("ridge point I*", si_.ridge_point, f"{float(ridge):.2f} FLOP/byte")
    p.legend("batch", "context", "attention_flops_per_token", "flops_per_token", "kv_bytes_per_token", "weight_bytes",
             "peak_flops", "bandwidth")
    weights_only = {S.context: 0}
    p.equal("weights only (c = 0): I = B F / W", si_.arithmetic_intensity.subs(weights_only),
            S.batch * S.flops_per_token / S.weight_bytes)
    p.equal("lesson (F = 2P FLOP, W = 2P bytes): I = B FLOP/byte",
            si_.arithmetic_intensity.subs(weights_only).subs(S.flops_per_token, S.weight_bytes), S.batch)
    p.equal("fast path ridge_point = peak / BW", f.ridge_point(peak_flops=PEAK, bandwidth=BW), ridge,
            value=f"{float(ridge):.2f} FLOP/byte")
    at_kv = f.arithmetic_intensity(batch=8, context=CONTEXT, weight_bytes=Fraction(W), kv_bytes_per_token=Fraction(k),
                                   flops_per_token=Fraction(F2P), attention_flops_per_token=0)
    p.equal(f"fast path arithmetic_intensity at B = 8, c = {CONTEXT:,} = 8 F / (W + 8 c k)", at_kv,
            Fraction(8 * F2P, W + 8 * CONTEXT * k), value=f"{float(at_kv):.2f} FLOP/byte")

    p.section("Critical batch without KV reads")
    p.show("B* (real) = solve(I = I*, B)", si_.critical_batch_real)
    kw = dict(context=0, weight_bytes=W, kv_bytes_per_token=0, flops_per_token=F2P, attention_flops_per_token=0,
              peak_flops=PEAK, bandwidth=BW)
    real = si_.critical_batch_real.subs(symbols_for(kw))
    memory_per_step, compute_per_token = Fraction(W) / BW, Fraction(F2P) / PEAK
    p.equal("B*(real) = I* W / F = (W / BW) / (F / peak): memory time / compute time per token", real,
            memory_per_step / compute_per_token,
            value=f"{si(memory_per_step, 's')} / {si(compute_per_token, 's')} = {float(real):.2f}")
    p.equal("fast path critical_batch_real = symbolic", f.critical_batch_real(**kw), real)
    b_star = si_.critical_batch.subs(symbols_for(kw))
    p.equal("B* = ceiling = 296 sequences [lesson 2 x P] (case S1)", b_star, 296)
    p.equal("fast path critical_batch = symbolic", f.critical_batch(**kw), b_star)
    p.within("'a few hundred sequences (4.8 ms / 16 us ~ 300)'", b_star, 250, 350)
    kw_ex = dict(kw, flops_per_token=F_ex)
    b_star_ex = f.critical_batch(**kw_ex)
    p.equal("exact matmul count: B* = ceiling(I* W / F_exact)", b_star_ex,
            si_.critical_batch.subs(symbols_for(kw_ex)), value=f"{b_star_ex} sequences [exact]")
    below = f.step_time(batch=b_star - 1, context_sum=0, weight_bytes=W, kv_bytes_per_token=0, flops_per_token=F2P,
                        attention_flops_per_token=0, bandwidth=BW, peak_flops=PEAK, overhead=0)
    p.equal(f"at B = {b_star - 1} the step is still W / BW (memory-bound)", below, memory_per_step)
    at_star = f.step_time(batch=b_star, context_sum=0, weight_bytes=W, kv_bytes_per_token=0, flops_per_token=F2P,
                          attention_flops_per_token=0, bandwidth=BW, peak_flops=PEAK, overhead=0)
    p.holds(f"at B = {b_star} compute time B F / peak >= memory time (compute-bound)",
            b_star * compute_per_token >= memory_per_step,
            f"{si(b_star * compute_per_token, 's')} >= {si(memory_per_step, 's')}")
    p.equal(f"so the fast path's step at B = {b_star} is B F / peak", at_star, b_star * compute_per_token)

    p.section("With KV reads: the intensity's limit and the critical context")
    p.show("lim_{B -> oo} I(B, c)", si_.intensity_limit)
    p.say("A second route to the limit, without SymPy's limit: the gap between the limit L and I(B) from the "
          "definition must be exactly L W / (W + k c B), which vanishes as B grows.")
    gap = sp.simplify(si_.intensity_limit - si_.arithmetic_intensity)
    p.equal("L - I(B) = L W / (W + k c B) (algebra on the definition of I)", gap,
            si_.intensity_limit * S.weight_bytes / (S.weight_bytes + S.kv_bytes_per_token * S.context * S.batch))
    big = 10**9
    lim_fast = f.intensity_limit(context=CONTEXT, kv_bytes_per_token=Fraction(k), flops_per_token=Fraction(F2P),
                                 attention_flops_per_token=0)
    i_big = Fraction(big * F2P) / (W + k * CONTEXT * big)  # I(B) from the definition, B F / (W + k c B)
    p.equal(f"fast path limit at c = {CONTEXT:,}: L - I(10^9) = L W / (W + k c 10^9) exactly", lim_fast - i_big,
            lim_fast * W / (W + k * CONTEXT * big), value=f"L = {float(lim_fast):.3f} FLOP/byte")
    p.show("c* = solve(limit = I*, c)", si_.critical_context)
    ckw = dict(kv_bytes_per_token=k, flops_per_token=F2P, attention_flops_per_token=0, peak_flops=PEAK, bandwidth=BW)
    c_star = si_.critical_context.subs(symbols_for(ckw))
    p.equal("c* = F / (I* k) [lesson 2 x P]", c_star, Fraction(F2P) / (ridge * k), value=f"{float(c_star):.1f} tokens")
    ckw_ex = dict(ckw, flops_per_token=F_ex, attention_flops_per_token=a_ex)
    c_star_ex = f.critical_context(**ckw_ex)
    p.equal("c* = F / (I* k - a) [exact]", c_star_ex, Fraction(F_ex) / (ridge * k - a_ex),
            value=f"{float(c_star_ex):.1f} tokens")
    p.within("c* is about 390 to 415 tokens (CONVENTIONS.md)", c_star_ex, 390, 415)
    p.within("c* is about 390 to 415 tokens (CONVENTIONS.md), lesson's 2 x P", c_star, 390, 416)
    lim = f.intensity_limit(context=CONTEXT, kv_bytes_per_token=k, flops_per_token=F2P, attention_flops_per_token=0)
    p.holds(f"at c = {CONTEXT:,} > c*, the limit stays below the ridge", lim < ridge,
            f"{float(lim):.1f} < {float(ridge):.1f} FLOP/byte")
    none_kw = dict(kw, context=CONTEXT, kv_bytes_per_token=k)
    p.equal(f"so B* = oo at {CONTEXT:,} tokens (the symbolic form)", si_.critical_batch.subs(symbols_for(none_kw)),
            sp.oo)
    p.holds("and the fast path says 'none' (None), not a number", f.critical_batch(**none_kw) is None)
    p.holds("[exact] too: no critical batch at 1,000 tokens",
            f.critical_batch(**dict(none_kw, flops_per_token=F_ex, attention_flops_per_token=a_ex)) is None)
    at_4096 = f.intensity_limit(context=4096, kv_bytes_per_token=k, flops_per_token=F2P, attention_flops_per_token=0)
    p.within("case S2: at 4,096 tokens the limit is about 30 FLOP/byte", at_4096, 29, 31)

    p.conclude(f"ridge {float(ridge):.1f} FLOP/byte; B* = {b_star} [2P] / {b_star_ex} [exact] = "
               f"{si(memory_per_step, 's')} / {si(compute_per_token, 's')}; c* = {float(c_star):.0f} [2P] / "
               f"{float(c_star_ex):.0f} [exact] tokens, so at {CONTEXT:,} tokens B* = none")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
