"""p18: a 1B draft speeds Llama 3.1 8B up 1.72x at batch 1 on an H100, and stops paying at batch 176.

Claim
-----
With Llama 3.2 1B proposing k = 4 tokens per step for Llama 3.1 8B on one H100 SXM, each
accepted with probability 0.7, a sequence gains (1 - 0.7^5) / 0.3 = 2.7731 tokens per step.
At 256 tokens of context a step of one sequence (the draft's 4 decode steps, then one
verification of 5 positions) takes less than twice a plain decode step, so speculation is
1.72x faster at batch 1. The verification step does 5 positions of matmuls for each
sequence's one read of the weights and its KV, so its intensity is about 5x the plain step's
and it turns compute-bound at batch 73 (plain decode: 907); from there its time grows with
the batch while the plain step's barely does, and the speed-up crosses 1 at batch 176: the
break-even batch, every batch below it faster with speculation. Where both steps read only
the weights, the speed-up is Leviathan et al.'s (1 - alpha^(k+1)) / ((1 - alpha)(1 + k r)),
maximised at a k given by a Lambert W. A head on the target: DeepSeek-V3's MTP module (k = 1,
alpha = 0.85) on 8 H200 (TP = 8) at 4,096 tokens is 1.42x faster at batch 1; its parameters
bring the 671B main model to 684.49B (685B published).

Assumptions
-----------
* docs/conventions.md, "Speculative decoding": independent acceptance with one alpha (or one per
  position, alpha_i given all before it accepted: the fold of one scalar formula); the
  verification step of B sequences at context c reads W + k_kv B (c + k) bytes and does
  B (k + 1)(F + a (c + k / 2)) FLOPs; the draft model runs its own k decode steps of the batch
  at contexts c .. c + k - 1 on the same GPU; the speed-up compares steps at the same contexts.
* An MTP proposal step is one decode step of the module (a one-layer model of the target's
  last-layer shape holding the shared embedding and lm_head) plus eh_proj's replicated read; a MoE
  verification reads the experts B (k + 1) tokens touch (uniform routing).
* The roofline bound: datasheet constants, no per-step overhead, BF16 weights and KV, the exact
  FLOPs convention.

Sources
-------
Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023 (equation 1, Theorem 3.8); vLLM's ``speculative_config`` (``method``, ``model``,
``num_speculative_tokens``); Llama 3.1 8B and Llama 3.2 1B config.json (1,235,814,400
parameters, the published figure); H100 SXM datasheet (roofline.hardware); DeepSeek-V3 technical
report (arXiv 2412.19437), section 2.2 (the MTP module) and 5.4.3 (85 % to 90 % acceptance), and its
README (671B + 14B MTP = 685B); zai-org/GLM-4.5's checkpoint (its MTP layer 92).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import sympy as sp

from ._proof import Proof, run_script

NAME = "p18_speculative_decoding"
CONTEXT, K, ALPHA = 256, 4, Fraction(7, 10)
#: DeepSeek-V3 technical report, section 5.4.3: the MTP token's acceptance rate is 85 % to 90 %
MTP_CONTEXT, MTP_ALPHA = 4096, Fraction(85, 100)


def _brute_tokens(k: int, alpha: Any) -> Any:
    """E[1 + accepted], over every accept/reject pattern of the k proposals (alpha: one rate, or one per position,
    each position's draw independent of the others; the run stops at the first rejection)."""
    rates = list(alpha) if isinstance(alpha, (tuple, list)) else [alpha] * k
    total = Fraction(0)
    for pattern in itertools.product((True, False), repeat=k):
        prob = Fraction(1)
        for ok, rate in zip(pattern, rates, strict=True):
            prob *= rate if ok else 1 - rate
        run = next((i for i, ok in enumerate(pattern) if not ok), k)
        total += prob * (run + 1)
    return total


def _step(t: dict[str, Any], hw: dict[str, Any], batch: Any, contexts: Sequence[int]) -> Any:
    """max(bytes / BW, FLOPs / peak) of one step of ``batch`` sequences, one row per context in ``contexts``."""
    read = t["weight_bytes"] + t["kv_bytes_per_token"] * batch * max(contexts)
    work = sum(batch * (t["flops_per_token"] + t["attention_flops_per_token"] * c) for c in contexts)
    return max(read / hw["bandwidth"], work / hw["peak_flops"]), read, work


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..deployment import Deployment
    from ..estimate import _hardware_terms, _model_terms
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..speculative import SpeculativeConfig, best_speculative_tokens, break_even_batch, speculative_step
    from ..symbolic import speculative as sd
    from ..symbolic import symbols_for

    target, draft, gpu = get_model("llama-3.1-8b"), get_model("llama-3.2-1b"), get_accelerator("h100-sxm")
    p.title("p18 speculative decoding: Llama 3.1 8B with a Llama 3.2 1B draft on an H100 SXM (BF16, bound)")

    p.section("Expected tokens per step: sum_{i=0}^{k} alpha^i (SymPy summation)")
    p.show("tokens(k, alpha)", sd.speculative_tokens_per_step)
    p.legend("speculative_tokens", "acceptance_rate")
    grid = [(k, a) for k in range(0, 7) for a in (Fraction(1, 10), Fraction(1, 2), ALPHA, Fraction(99, 100), 1)]
    p.holds("equals E[1 + accepted] over every accept/reject pattern (k < 7, five alphas)",
            all(f.speculative_tokens_per_step(speculative_tokens=k, acceptance_rate=a) == _brute_tokens(k, a)
                for k, a in grid), f"{len(grid)} cases")
    tokens = f.speculative_tokens_per_step(speculative_tokens=K, acceptance_rate=ALPHA)
    p.equal("k = 4, alpha = 0.7: (1 - 0.7^5) / 0.3", tokens, (1 - ALPHA ** 5) / (1 - ALPHA),
            value=f"{float(tokens):.4f} tokens")

    _positions(p)

    p.section("The verification step: k + 1 positions per sequence, the weights and each KV read once")
    p.show("bytes", sd.verify_bytes)
    p.show("FLOPs", sp.factor(sd.verify_flops))
    p.legend("batch", "context", "speculative_tokens", "weight_bytes", "kv_bytes_per_token", "flops_per_token",
             "attention_flops_per_token", "proposer_time")
    d = Deployment(target, gpu)
    terms, hw = _model_terms(target, "exact"), _hardware_terms(gpu, target)
    dterms = _model_terms(draft, "exact")
    cases = [(b, c, k) for b in (1, 3, 64, 1024) for c in (1, 256, 4000) for k in range(0, 6)]
    p.holds("its time equals max(bytes / BW, FLOPs / peak) summed position by position (position j at c + j)",
            all(f.speculative_step_time(**terms, **hw, batch=b, context=c, speculative_tokens=k, overhead=0,
                                        proposer_time=0) == _step(terms, hw, b, range(c, c + k + 1))[0]
                for b, c, k in cases), f"{len(cases)} cases")
    p.holds("its intensity equals those FLOPs / bytes", all(
        f.speculative_intensity(**{n: terms[n] for n in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                                         "attention_flops_per_token")},
                                batch=b, context=c, speculative_tokens=k)
        == _step(terms, hw, b, range(c, c + k + 1))[2] / _step(terms, hw, b, range(c, c + k + 1))[1]
        for b, c, k in cases))
    p.holds("with k = 0 it is the plain decode step", all(
        f.speculative_step_time(**terms, **hw, batch=b, context=c, speculative_tokens=0, overhead=0, proposer_time=0)
        == f.step_time(**terms, **hw, batch=b, context_sum=b * c, overhead=0) == _step(terms, hw, b, [c])[0]
        for b, c, _ in cases))

    p.section(f"One step at batch 1, context {CONTEXT}: the draft's {K} steps, then one verification")
    p.equal("Llama 3.2 1B: the published 1,235,814,400 parameters", draft.parameters, 1_235_814_400)
    config = SpeculativeConfig.parse(f'{{"model": "llama-3.2-1b", "num_speculative_tokens": {K}}}')
    one = speculative_step(d, config, batch=1, context=CONTEXT, acceptance_rate=ALPHA)
    draft_steps = sum(_step(dterms, hw, 1, [CONTEXT + j])[0] for j in range(K))
    p.equal("the proposer: the draft's 4 decode steps at contexts 256 .. 259", one.proposer_time, draft_steps,
            value=f"{float(draft_steps) * 1e3:.3f} ms")
    verify = _step(terms, hw, 1, range(CONTEXT, CONTEXT + K + 1))[0]
    p.equal("the step: proposer + verification of 5 positions", one.step_time, draft_steps + verify,
            value=f"{float(one.step_time) * 1e3:.3f} ms")
    plain = _step(terms, hw, 1, [CONTEXT])[0]
    p.equal("the plain decode step", one.plain_step_time, plain, value=f"{float(plain) * 1e3:.3f} ms")
    p.equal("speed-up = tokens x plain / step", one.speedup, tokens * plain / (draft_steps + verify),
            value=f"{float(one.speedup):.2f}x")
    p.equal("the registered speed-up formula gives it", f.speculative_speedup(
        **terms, **hw, batch=1, context=CONTEXT, speculative_tokens=K, overhead=0, proposer_time=draft_steps,
        acceptance_rate=ALPHA), tokens * plain / (draft_steps + verify))
    p.holds("above 1: speculation pays at batch 1", one.speedup > 1)

    p.section("Intensity, ridge and critical batch")
    p.show("B*_spec", sd.speculative_critical_batch)
    ridge = hw["peak_flops"] / hw["bandwidth"]

    def first_compute_bound(contexts: range) -> int:
        return next(b for b in itertools.count(1) if (lambda s: s[2] >= ridge * s[1])(_step(terms, hw, b, contexts)))

    p.equal("the ridge is the accelerator's, I* = peak / BW, whatever k", f.ridge_point(**hw), ridge,
            value=f"{float(ridge):.1f} FLOP/byte")
    p.equal("plain decode at 256 tokens: compute-bound from batch 907 (the first batch reaching I*, counted)",
            (one.plain_critical_batch, first_compute_bound(range(CONTEXT, CONTEXT + 1))), (907, 907),
            value="B* = 907")
    p.equal("verifying 5 positions: from batch 73", (one.critical_batch, first_compute_bound(
        range(CONTEXT, CONTEXT + K + 1))), (73, 73), value="B*_spec = 73")
    brute_plain = _step(terms, hw, 1, [CONTEXT])
    p.equal("the plain step's intensity at batch 1: FLOPs / bytes", one.plain_intensity,
            brute_plain[2] / brute_plain[1])
    at1 = one.intensity / one.plain_intensity
    p.holds("at batch 1 the verification's intensity is about k + 1 = 5 times the plain step's",
            Fraction(49, 10) < at1 < Fraction(51, 10), f"{float(at1):.4f}x")
    p.equal("with k = 0 it is the plain critical batch", f.speculative_critical_batch(
        **{n: terms[n] for n in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                 "attention_flops_per_token")}, **hw, context=CONTEXT, speculative_tokens=0), 907)

    p.section("The speed-up crossing 1 as the batch grows")
    be = break_even_batch(d, config, context=CONTEXT, acceptance_rate=ALPHA)

    def brute_speedup(b: int) -> Any:
        draft_time = sum(_step(dterms, hw, b, [CONTEXT + j])[0] for j in range(K))
        return tokens * _step(terms, hw, b, [CONTEXT])[0] / (draft_time + _step(
            terms, hw, b, range(CONTEXT, CONTEXT + K + 1))[0])

    first = next(b for b in itertools.count(1) if brute_speedup(b) <= 1)
    p.equal("the first batch whose speed-up is at most 1, every batch counted", (be, first), (176, 176),
            value="break-even at batch 176")
    rows = [(b, f"{float(brute_speedup(b)):.3f}") for b in (1, 8, 64, 73, 128, 175, 176, 256)]
    p.table(("batch", "speed-up"), rows)
    at = [speculative_step(d, config, batch=b, context=CONTEXT, acceptance_rate=ALPHA).speedup for b in (175, 176)]
    p.holds("1.000x and above at batch 175, below at 176", at[0] > 1 >= at[1], f"{float(at[0]):.4f}, "
            f"{float(at[1]):.4f}")

    p.section("Where only the weights are read: Leviathan et al.'s speed-up and the k that maximises it")
    p.show("speed-up(k)", sd.speculative_speedup_memory_bound)
    p.legend("draft_cost_ratio")
    r = f.speculative_speedup_memory_bound(speculative_tokens=1, acceptance_rate=ALPHA, draft_cost_ratio=0)
    p.equal("no proposer cost and k = 1: 1 + alpha", r, 1 + ALPHA)
    ratio = Fraction(draft.weight_bytes, target.weight_bytes)
    mb = [f.speculative_speedup_memory_bound(speculative_tokens=k, acceptance_rate=ALPHA, draft_cost_ratio=ratio)
          for k in range(0, 9)]
    p.holds("equals E[tokens] / (1 + k r) for k = 0 .. 8, r = the draft's weights / the target's",
            mb == [_brute_tokens(k, ALPHA) / (1 + k * ratio) for k in range(0, 9)], f"r = {float(ratio):.4f}")
    kk, mb_real, root = sd.k_real, sd.speculative_speedup_memory_bound_real, sd.optimal_speculative_tokens_real
    p.equal("for a real k (alpha < 1) it is (1 - alpha^(k+1)) / ((1 - alpha)(1 + k r)), at k = 3 too",
            mb_real.subs(symbols_for(dict(acceptance_rate=ALPHA, draft_cost_ratio=ratio))).subs(kk, 3), mb[3])
    p.show("k* (d/dk = 0, branch -1)", root)
    kstar = root.subs(symbols_for(dict(acceptance_rate=ALPHA, draft_cost_ratio=ratio))).evalf(30)
    slope = sp.diff(mb_real, kk).subs(symbols_for(dict(acceptance_rate=ALPHA, draft_cost_ratio=ratio)))
    p.holds("the derivative vanishes there", abs(slope.subs(kk, kstar).evalf(30)) < sp.Float(1e-20), f"k* = "
            f"{float(kstar):.3f}")
    best = max(range(9), key=lambda k: mb[k])
    p.holds("the best whole k is floor(k*) or ceil(k*)", best in (int(sp.floor(kstar)), int(sp.ceiling(kstar))),
            f"k = {best}")
    full = best_speculative_tokens(d, config, batch=1, context=CONTEXT, acceptance_rate=ALPHA)
    p.equal("the roofline's own best k at batch 1 (k = 0 .. 16 compared) is that k", full, best,
            value=f"k = {full}")
    mtp_speedup = _mtp(p)
    p.conclude(f"Llama 3.1 8B with a 1B draft (k = 4, alpha = 0.7) on an H100 at {CONTEXT} tokens: "
               f"{float(one.speedup):.2f}x at batch 1; the verification is compute-bound from batch 73 (plain: 907), "
               f"and speculation stops paying at batch 176; DeepSeek-V3's MTP module (k = 1, alpha = 0.85) on 8 "
               f"H200: {float(mtp_speedup):.2f}x at batch 1")


def _positions(p: Proof) -> None:
    """The per-position acceptance vector: the fold of one scalar formula against the sum of products."""
    from .. import formulas as f
    from ..speculative import expected_tokens_per_step
    from ..symbolic import speculative as sd

    p.section("A per-position acceptance vector: T_i = 1 + alpha_i T_{i+1}, T_{k+1} = 1, E = T_1")
    p.show("T_i", sd.speculative_tokens_from_position)
    p.legend("acceptance_rate", "tokens_after_position")
    folds = []
    for n in range(1, 7):
        rates = list(sp.symbols(f"alpha_1:{n + 1}", positive=True))
        products = 1 + sum(sp.Mul(*rates[: i + 1]) for i in range(n))
        folds.append(sp.expand(sd.positional_tokens_per_step(rates) - products) == 0)
    p.holds("the fold of k symbols is 1 + sum_i prod_{j<=i} alpha_j (SymPy, k = 1 .. 6)", all(folds))
    (at_one, _), (general, _) = sd.speculative_tokens_per_step.args  # Piecewise: alpha = 1, else
    same = [sp.cancel(fold_n - general.subs(sd.k, n)) == 0 and fold_n.subs(sd.alpha, 1) == at_one.subs(sd.k, n)
            for n in range(1, 7) for fold_n in [sd.positional_tokens_per_step([sd.alpha] * n)]]  # each branch
    p.holds("k equal rates fold to sum_{i=0}^{k} alpha^i, the one-rate formula (SymPy, k = 1 .. 6)", all(same))
    vectors = [(Fraction(9, 10), Fraction(8, 10), Fraction(7, 10)), (Fraction(1, 2),), (1, Fraction(1, 3)),
               (Fraction(1, 10), 1, Fraction(99, 100), Fraction(1, 2)), (Fraction(3, 4),) * 5]

    def fold(rates: Any) -> Any:
        tokens: Any = 1
        for rate in reversed(rates):
            tokens = f.speculative_tokens_from_position(acceptance_rate=rate, tokens_after_position=tokens)
        return tokens

    p.holds("the registered fast path, folded, equals E[1 + accepted] over every accept/reject pattern "
            "(proposal i drawn against alpha_i, the run ended by the first rejection)",
            all(fold(v) == _brute_tokens(len(v), v) for v in vectors), f"{len(vectors)} vectors")
    p.holds("and roofline.speculative.expected_tokens_per_step gives the same",
            all(expected_tokens_per_step(len(v), v) == _brute_tokens(len(v), v) for v in vectors))
    e = fold(vectors[0])
    p.equal("alpha = 0.9, 0.8, 0.7: 1 + 0.9 + 0.72 + 0.504", e, Fraction(3124, 1000), value=f"{float(e):.3f} tokens")


def _touched(model: Any, tokens: int) -> Any:
    """E (1 - (1 - k / E)^n): the expected distinct routed experts n tokens touch, uniform routing."""
    E, k = model.num_experts, model.num_experts_per_tok
    return E * (1 - (1 - Fraction(k, E)) ** tokens)


def _ring(ar: dict[str, Any], layers: int, rows: int) -> Any:
    """2 L ring all-reduces of rows x h x e bytes over T GPUs: 2 (T - 1) / T x M / beta + 2 (T - 1) alpha each."""
    T = ar["tensor_parallel_size"]
    message = rows * ar["hidden_size"] * ar["activation_bytes"]
    return 2 * layers * (Fraction(2 * (T - 1), T) * message / ar["link_bandwidth"] + 2 * (T - 1) * ar["link_latency"])


def _mtp(p: Proof) -> Any:
    """DeepSeek-V3's MTP module on 8 H200 (TP = 8): its parameters, its step, the MoE verification."""
    from ..deployment import allreduce_terms, as_deployment
    from ..estimate import _hardware_terms, _model_terms
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..speculative import SpeculativeConfig, break_even_batch, speculative_step

    v3, gpu, T, c, alpha = get_model("deepseek-v3"), get_accelerator("h200-sxm"), 8, MTP_CONTEXT, MTP_ALPHA
    p.section(f"A head on the target: DeepSeek-V3's MTP module, k = 1, alpha = 0.85, on {T} H200 (TP = {T})")
    p.equal("DeepSeek-V3's config: num_nextn_predict_layers = 1", v3.num_nextn_predict_layers, 1)
    total = v3.parameters + v3.mtp_parameters
    p.holds("671,026,419,200 + the MTP module (MoE layer, eh_proj, embedding, lm_head) ~ 685B",
            abs(total - 685 * 10**9) < 685 * 10**6, f"{total / 1e9:.2f}B")
    glm = get_model("glm-4.5")
    p.equal("GLM-4.5's MTP layer 92: the checkpoint's 5,539,962,272 parameters", glm.mtp_parameters, 5_539_962_272)
    d = as_deployment(v3, gpu, tensor_parallel_size=T)
    config = SpeculativeConfig.parse('{"method": "deepseek_mtp", "num_speculative_tokens": 1}')
    one = speculative_step(d, config, batch=1, context=c, acceptance_rate=alpha)
    head = v3.mtp_module
    assert head is not None
    hw = _hardware_terms(gpu, v3)
    ar = allreduce_terms(v3.per_gpu(T), gpu, T)

    def moe_terms(model: Any, tokens: int, extra: int = 0) -> dict[str, Any]:
        """One GPU's terms, the weights those tokens read (shared + one expert's bytes x the experts touched)."""
        share = model.per_gpu(T)
        terms = _model_terms(share, "exact")
        weights = share.shared_weight_bytes + share.routed_expert_bytes * _touched(share, tokens)
        return dict(terms, weight_bytes=weights + extra * model.weight_bytes_per_parameter,
                    flops_per_token=terms["flops_per_token"] + 2 * extra)

    head_terms = moe_terms(head, 1, v3.mtp_projection_parameters)
    proposer = _step(head_terms, hw, 1, [c])[0] + _ring(ar, 1, 1)
    p.equal("the proposer: a decode step of the module (its all-reduces) + eh_proj's read", one.proposer_time,
            proposer, value=f"{float(one.proposer_time) * 1e6:.1f} us")
    plain = _step(moe_terms(v3, 1), hw, 1, [c])[0] + _ring(ar, v3.num_hidden_layers, 1)
    p.equal("the plain step: 8 of 256 experts, 2 L all-reduces of one row", one.plain_step_time, plain,
            value=f"{float(plain) * 1e3:.3f} ms")
    verify = _step(moe_terms(v3, 2), hw, 1, range(c, c + 2))[0] + _ring(ar, v3.num_hidden_layers, 2)
    p.equal("verifying 2 positions: experts 2 tokens touch, their all-reduces", one.step_time - one.proposer_time,
            verify, value=f"verification {float(verify) * 1e3:.3f} ms")
    p.equal("tokens per step 1 + alpha", one.tokens_per_step, 1 + alpha, value="1.85 tokens")
    p.equal("speed-up = tokens x plain / (proposer + verification)", one.speedup,
            (1 + alpha) * plain / (proposer + verify), value=f"MTP speed-up {float(one.speedup):.3f}x")
    be = break_even_batch(d, config, context=c, acceptance_rate=alpha)
    p.holds(f"KV-bound at {c:,} tokens: no break-even up to batch 4,096",
            be is None and one.critical_batch is None, "MTP break-even: none")
    return one.speedup


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
