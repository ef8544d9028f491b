"""p09: a MoE model needs a far larger batch than a dense one of the same active size to become compute-bound.

Claim
-----
On an H100 SXM (weights only, exact matmul count), Mixtral 8x7B turns compute-bound at
a batch of 1,082 sequences and Qwen3-30B-A3B at 2,965, while dense models with the same
active parameters (same FLOPs per token, weights = the active weights) do at about 300.
The reason: a decode step's FLOPs grow with the active parameters, but the bytes it
reads grow with the experts its B tokens touch, E (1 - (1 - k/E)^B), which tends to E
long before B reaches the ridge; near the critical batch every expert is read, so B*
approaches ridge x total weight bytes / FLOPs per token: the dense figure times about
total / active parameters (3.6 for Mixtral, 9.1 for Qwen3-30B-A3B).

Assumptions
-----------
* docs/conventions.md, "Architectures": uniform independent
  routing (each token picks k distinct experts, every k-subset equally likely); FLOPs
  per token = 2 x active matmul parameters; bytes = shared weights + one expert's bytes
  (over the MoE layers) x experts touched.
* The roofline bound: compute-bound when FLOPs / peak >= bytes / bandwidth; BF16 weights
  and the dense BF16 peak; no KV (context 0), where a critical batch always exists.

Sources
-------
Mixtral 8x7B and Qwen3-30B-A3B config.json (model cards); H100 SXM datasheet
(roofline.hardware); the expected number of distinct experts is an expectation of a
sum of indicators (linearity of expectation).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

import sympy as sp

from ._proof import Proof, run_script

NAME = "p09_moe"


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..estimate import criticality
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..symbolic import moe as sm
    from ..symbolic import symbols_for

    gpu = get_accelerator("h100-sxm")
    BW, PEAK = Fraction(gpu.bandwidth), Fraction(gpu.peak_flops)
    ridge = PEAK / BW
    E, k, B = sm.E, sm.k, sm.B

    p.title("p09 mixture of experts: experts touched and the critical batch (H100 SXM, BF16, weights only)")

    p.section("Expected distinct experts touched by B tokens (uniform routing)")
    p.show("P(an expert is not among one token's k)", sm.miss_one_token)
    p.equal("C(E - 1, k) / C(E, k) = (E - k) / E", sm.miss_one_token, (E - k) / E)
    p.show("experts_touched = sum_e P(e touched) (linearity of expectation)", sm.experts_touched)
    p.equal("k at B = 1", sm.experts_touched.subs(B, 1), k)
    p.equal("tends to E as B grows (SymPy limit, 1 <= k < E)",
            sp.limit(sm.experts_touched.subs({E: 8, k: 2}), B, sp.oo), 8)
    p.equal("fast path == symbolic (E = 128, k = 8, B = 64)",
            f.experts_touched(num_experts=128, experts_per_token=8, batch=64),
            sm.experts_touched.subs(symbols_for(dict(num_experts=128, experts_per_token=8, batch=64))))

    p.section("The compute margin is convex in B: one crossing, found exactly by bisection")
    p.show("margin g(B) = FLOPs / peak - bytes / BW", sm.moe_compute_margin)
    second = sp.simplify(sp.diff(sm.moe_compute_margin, B, 2))
    p.show("d2g/dB2", second)
    q = sp.Symbol("q", positive=True)
    convex = sm.X * E * q**B * sp.log(q) ** 2 / sm.BW
    p.equal("d2g/dB2 = X E q^B log(q)^2 / BW with q = 1 - k/E", second, convex.subs(q, (E - k) / E))
    p.holds("which is >= 0 (SymPy: nonnegative for positive X, E, BW, q)", convex.is_nonnegative)
    p.equal("g(0) = -W_s / BW < 0", sp.simplify(sm.moe_compute_margin.subs(B, 0)), -sm.W_s / sm.BW)

    p.section("The intensity rises with B (monotone), so 'compute-bound' holds from B* on")
    t = sm.experts_touched
    t2 = sp.simplify(sp.diff(t, B, 2))
    p.equal("t''(B) = -E q^B log(q)^2 <= 0: experts touched are concave in B", t2,
            -(E * q**B * sp.log(q) ** 2).subs(q, (E - k) / E))
    gap = t - B * sp.diff(t, B)
    p.equal("u(B) = t - B t' has u(0) = 0", sp.simplify(gap.subs(B, 0)), 0)
    p.equal("and u'(B) = -B t''(B) >= 0, so u(B) >= 0", sp.simplify(sp.diff(gap, B) + B * t2), 0)
    per_seq = sp.Symbol("f_seq", positive=True)  # F + a c, FLOPs per sequence
    kc = sp.Symbol("kc", nonnegative=True)  # KV bytes per sequence
    intensity = B * per_seq / (sm.W_s + sm.X * t + kc * B)
    num = sp.numer(sp.together(sp.diff(intensity, B)))
    p.equal("numerator of dI/dB = f_seq (W_s + X (t - B t')) > 0", sp.simplify(num - per_seq * (sm.W_s + sm.X * gap)),
            0)

    rows = []
    results = {}
    for name in ("mixtral-8x7b", "qwen3-30b-a3b"):
        m = get_model(name)
        F = m.matmul_flops_per_token
        b_star = criticality(m, gpu, context=0).critical_batch
        # the dense model of the same active size: the same F, and W = the active weights (BF16)
        dense_w = m.active_parameters * m.weight_bytes_per_parameter
        dense = f.critical_batch(context=0, weight_bytes=dense_w, kv_bytes_per_token=0, flops_per_token=F,
                                 attention_flops_per_token=0, peak_flops=PEAK, bandwidth=BW)
        full = f.critical_batch(context=0, weight_bytes=m.weight_bytes,
                                kv_bytes_per_token=0, flops_per_token=F, attention_flops_per_token=0,
                                peak_flops=PEAK, bandwidth=BW)
        results[name] = (b_star, dense, full, m)
        kw = dict(context=0, shared_weight_bytes=m.shared_weight_bytes, routed_expert_bytes=m.routed_expert_bytes,
                  num_experts=m.num_experts, experts_per_token=m.num_experts_per_tok, kv_bytes_per_token=0,
                  flops_per_token=F, attention_flops_per_token=0, peak_flops=PEAK, bandwidth=BW)
        p.section(f"{name}: E = {m.num_experts}, k = {m.num_experts_per_tok}, "
                  f"{m.parameters / 1e9:.2f} B total, {m.active_parameters / 1e9:.2f} B active")
        crit = criticality(m, gpu, context=0)
        p.equal("the ridge point is peak / bandwidth", crit.ridge_point, ridge, value=f"{float(ridge):.1f} FLOP/byte")
        c_star = Fraction(F) / (ridge * m.kv_bytes_per_token - m.attention_flops_per_token)
        p.equal("c* = F / (ridge x k - a), as for a dense model (experts touched tend to E)", crit.critical_context,
                c_star, value=f"{float(c_star):.0f} tokens")
        margin = f.moe_compute_margin(batch=b_star, **kw)
        p.equal("the compute margin at B* = its SymPy form", margin,
                sm.moe_compute_margin.subs(symbols_for({**kw, "batch": b_star})))
        p.holds(f"B* = {b_star}: compute-bound there", margin >= 0)
        p.holds(f"and memory-bound at {b_star - 1}", f.moe_compute_margin(batch=b_star - 1, **kw) < 0)
        touched = f.experts_touched(num_experts=m.num_experts, experts_per_token=m.num_experts_per_tok, batch=b_star)
        p.holds(f"at B* the tokens touch {float(touched):.6f} of {m.num_experts} experts (all but 1e-6 of them)",
                m.num_experts - touched < Fraction(1, 10**6))
        p.holds(f"so B* is within 1 of ceil(ridge x all weights / F) = {full}", abs(b_star - full) <= 1)
        # the intensity of a step of 64 sequences at context 1,000, from its FLOPs and bytes written out here
        b, c, e, kk = 64, 1000, m.num_experts, m.num_experts_per_tok
        step_flops = b * F + m.attention_flops_per_token * b * c
        step_bytes = (m.shared_weight_bytes + m.routed_expert_bytes * e * (1 - Fraction(e - kk, e) ** b)
                      + m.kv_bytes_per_token * b * c)
        step = {n: v for n, v in kw.items() if n not in ("peak_flops", "bandwidth")}
        at_64 = f.moe_arithmetic_intensity(**dict(step, batch=b, context=c, kv_bytes_per_token=m.kv_bytes_per_token,
                                                  attention_flops_per_token=m.attention_flops_per_token))
        p.equal("the intensity at B = 64, c = 1,000 = its FLOPs / its bytes (experts touched E (1 - (1 - k/E)^B))",
                at_64, step_flops / step_bytes, value=f"{float(at_64):.1f} FLOP/byte")
        at_star = f.moe_arithmetic_intensity(**dict(step, batch=b_star))
        p.holds("below the ridge there; at B* (c = 0) the intensity reaches it", at_64 < ridge <= at_star,
                f"{float(at_64):.1f} < {float(ridge):.1f} <= {float(at_star):.1f} FLOP/byte")
        p.equal(f"the dense model of the same active size: B* = {dense} = ceil(ridge x W_active / F)", dense,
                -(-(ridge * dense_w) // F))
        p.holds("about 300, as for any dense model (W ~ F bytes per FLOP)", 280 <= dense <= 340)
        rows.append((name, m.num_experts, m.num_experts_per_tok, f"{m.parameters / m.active_parameters:.2f}",
                     dense, b_star, f"{b_star / dense:.2f}"))

    p.section(f"Summary (H100 SXM, ridge {float(ridge):.1f} FLOP/byte)")
    p.table(("model", "E", "k", "total/active", "B* dense", "B* MoE", "ratio"), rows)
    mix, qwen = results["mixtral-8x7b"][0], results["qwen3-30b-a3b"][0]
    p.equal("Mixtral 8x7B: B* = 1,082", mix, 1082)
    p.equal("Qwen3-30B-A3B: B* = 2,965", qwen, 2965)
    p.holds("both far above the dense ~300: 3.6x and 9.1x", mix > 3 * results["mixtral-8x7b"][1]
            and qwen > 8 * results["qwen3-30b-a3b"][1])
    dense_mix, dense_qwen = results["mixtral-8x7b"][1], results["qwen3-30b-a3b"][1]
    p.conclude(f"B* = {mix:,} (Mixtral 8x7B) and B* = {qwen:,} (Qwen3-30B-A3B) vs B* = {dense_mix} and "
               f"{dense_qwen} for dense models of the same active size: every expert is read long "
               "before the ridge, so B* ~ ridge x total weights / F")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
