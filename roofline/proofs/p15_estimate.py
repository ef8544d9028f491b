"""p15: the estimate is the bound with an engine's constants; two vLLM rows fix them, a third checks them.

Claim
-----
The estimate of a decode step, max(bytes / (eta_bw BW), FLOPs / (eta_mm peak)) + t_step +
L t_layer + B t_seq, is the roofline bound with bandwidth, peak and overhead substituted; at
eta_bw = eta_mm = 1 and t_step = t_layer = t_seq = 0 it is the bound, and it is never below the
bound. Two vLLM latency tests of Llama 3.1 8B at batch 8 (H200 SXM 6.516 ms and A100 SXM
80GB 12.339 ms per step, both memory-bound) fix eta_bw = 0.7830 and t_step = 2.2155 ms
(solved exactly with SymPy; the rows have one layer count, so t_layer is not separable and
is 0). On the held-out H100 SXM row (7.792 ms measured) the estimate is 8.377 ms (+7.5 %)
where the bound is 4.824 ms (-38.1 %).

Assumptions
-----------
* docs/conventions.md, "Bound and estimate" and "One step": bytes = W + k S, FLOPs = B F + a S,
  exact FLOP convention; context sum S = 8 x (32 + 128 / 2) = 768 (prompt 32, output 128).
* Datasheet constants: H200 SXM 4.8 TB/s, A100 SXM 80GB 2.039 TB/s, H100 SXM 3.35 TB/s.
* The three rows share the engine (vLLM's benchmark_latency.py, CUDA graphs) and the model,
  so one profile's constants apply to all three; the prefill inside each latency is spread
  over the 128 steps, as the published set states.

Sources
-------
vLLM continuous benchmarks (Buildkite vllm/performance-benchmark builds 9513, 9523, 9555,
"Latency tests": median latency 834.014 ms on H200, and the A100 and H100 rows, each for
128 output tokens), quoted in roofline/data/measurements/published.json; NVIDIA H100, H200
and A100 datasheets; meta-llama/Llama-3.1-8B config.json.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p15_estimate"
CALIBRATION = ("vllm-llama-3.1-8b-b8-h200", "vllm-llama-3.1-8b-b8-a100")
HELD_OUT = "vllm-llama-3.1-8b-b8-h100"


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    import sympy as sp

    from .. import formulas as f
    from ..calibrate.published import load_published
    from ..symbolic import fidelity as fs
    from ..symbolic import step_time as st
    from ..symbolic._symbols import S

    p.title("p15 the estimate beside the bound: vLLM's constants from two rows, checked on a third")

    p.section("The estimate is the bound with an engine's constants")
    p.show("t_est", fs.estimated_step_time)
    p.legend("eta_bw", "eta_mm", "t_step", "t_layer", "t_seq", "num_hidden_layers")
    typed = sp.Max((S.weight_bytes + S.kv_bytes_per_token * S.context_sum) / (S.eta_bw * S.bandwidth),
                   (S.batch * S.flops_per_token + S.attention_flops_per_token * S.context_sum)
                   / (S.eta_mm * S.peak_flops)) + S.t_step + S.num_hidden_layers * S.t_layer + S.batch * S.t_seq
    p.equal("it is max(bytes / (eta_bw BW), FLOPs / (eta_mm peak)) + t_step + L t_layer + B t_seq",
            fs.estimated_step_time, typed)
    p.equal("each running sequence adds t_seq: d/dB of (t_est - its roofline max) = t_seq",
            sp.diff(fs.estimated_step_time - sp.Max(
                (S.weight_bytes + S.kv_bytes_per_token * S.context_sum) / (S.eta_bw * S.bandwidth),
                (S.batch * S.flops_per_token + S.attention_flops_per_token * S.context_sum)
                / (S.eta_mm * S.peak_flops)), S.batch), S.t_seq)
    unit = {S.eta_bw: 1, S.eta_mm: 1, S.t_step: 0, S.t_layer: 0, S.t_seq: 0}
    p.equal("at eta_bw = eta_mm = 1, t_step = t_layer = t_seq = 0 it is the bound (overhead 0)",
            fs.estimated_step_time.subs(unit), st.step_time.subs(S.overhead, 0))
    p.equal("the same holds for the prefill step", fs.estimated_prefill_step_time.subs(unit),
            st.prefill_step_time.subs(S.overhead, 0))
    memory_side = (S.weight_bytes + S.kv_bytes_per_token * S.context_sum) / (S.eta_bw * S.bandwidth)
    p.holds("lowering eta_bw lengthens the memory side: d/d(eta_bw) < 0",
            bool(sp.diff(memory_side, S.eta_bw).is_negative))

    rows = {m.id: m for m in load_published()}
    model = rows[CALIBRATION[0]].model
    p.section(f"Two calibration rows: {model.name} at batch 8, context sum 768, vLLM with CUDA graphs")
    x, t = sp.symbols("x t_s", positive=True)  # x = 1 / eta_bw

    def memory_time(row_id: str) -> Fraction:
        """Bytes / BW by the definition (W + k S) / BW, checked against the fast path."""
        m = rows[row_id]
        assert m.spec is not None
        by_hand = Fraction(m.model.weight_bytes + m.model.kv_bytes_per_token * m.context_sum) / m.spec.bandwidth
        fast = f.memory_time(weight_bytes=m.model.weight_bytes, kv_bytes_per_token=m.model.kv_bytes_per_token,
                             context_sum=m.context_sum, bandwidth=Fraction(m.spec.bandwidth))
        p.equal(f"{row_id}: memory_time = (W + k S) / BW", fast, by_hand, value=si(by_hand, "s"))
        return by_hand

    equations = []
    table = []
    for row_id in CALIBRATION:
        m = rows[row_id]
        assert m.spec is not None
        mem = memory_time(row_id)
        terms = m.model.step_terms("exact")
        comp = Fraction(m.batch * terms["flops_per_token"] + terms["attention_flops_per_token"] * m.context_sum) \
            / m.spec.peak_flops
        p.equal(f"{row_id}: compute_time = (B F + a S) / peak", f.compute_time(
            batch=m.batch, flops_per_token=terms["flops_per_token"],
            attention_flops_per_token=terms["attention_flops_per_token"], context_sum=m.context_sum,
            peak_flops=Fraction(m.spec.peak_flops)), comp)
        p.holds(f"{row_id} is memory-bound: {si(mem, 's')} of reading > {si(comp, 's')} of math", mem > comp)
        measured = Fraction(m.measured_s)
        equations.append(sp.Eq(sp.Rational(mem.numerator, mem.denominator) * x + t,
                               sp.Rational(measured.numerator, measured.denominator)))
        table.append([row_id, m.spec.name, si(mem, "s"), si(measured, "s")])
    p.table(["row", "accelerator", "bytes / BW", "measured"], table)
    p.say("Each row: measured = (bytes / BW) / eta_bw + t_step (t_layer folds into t_step: one layer count).")
    solution = sp.solve(equations, [x, t], dict=True)
    p.require("two equations, two unknowns: one solution", len(solution) == 1)
    eta_bw = 1 / solution[0][x]
    t_step = solution[0][t]
    p.within("eta_bw = 1 / x", eta_bw, Fraction(78, 100), Fraction(79, 100))
    p.within("t_step", t_step, Fraction(22, 10**4), Fraction(223, 10**5), unit="s")
    p.say(f"eta_bw = {float(eta_bw):.4f}, t_step = {float(t_step) * 1e3:.4f} ms")
    profile = rows[CALIBRATION[0]].engine_profile
    shipped = sorted(r.id for r in rows.values() if r.engine_profile == profile and r.split == "calibration")
    layers = " and ".join(str(n) for n in sorted({rows[i].model.num_hidden_layers for i in shipped}))
    p.say(f"Why the shipped vLLM profile (--estimate vllm) differs: roofline validate fits it on all {len(shipped)} "
          f"calibration rows of {profile!r} ({', '.join(shipped)}), whose {layers} layers separate t_layer from "
          "t_step, by least squares on relative error with t_step, t_layer >= 0 (roofline.calibrate.fit): "
          "t_step lands at its bound 0 and the fixed time goes to t_layer; this teaching fit solves two rows "
          "exactly with t_layer = 0.")
    p.holds("eta_bw <= 1 and t_step >= 0: physical constants", eta_bw <= 1 and t_step >= 0)

    p.section(f"The held-out row: {HELD_OUT}")
    m = rows[HELD_OUT]
    assert m.spec is not None
    mem = memory_time(HELD_OUT)
    eta = Fraction(str(sp.Rational(eta_bw)))
    ts = Fraction(str(sp.Rational(t_step)))
    terms = m.model.step_terms("exact")
    kw = dict(batch=m.batch, context_sum=m.context_sum, **terms, bandwidth=m.spec.bandwidth,
              peak_flops=m.spec.peak_flops)
    est = f.estimated_step_time(**kw, eta_bw=eta, eta_mm=1, t_step=ts, t_layer=0, t_seq=0,
                                num_hidden_layers=m.model.num_hidden_layers)
    bound = f.step_time(**{**kw, "bandwidth": Fraction(m.spec.bandwidth)}, overhead=0)
    p.equal("estimate = (bytes / BW) / eta_bw + t_step (memory-bound)", est, mem / eta + ts,
            value=si(est, "s"))
    p.equal("bound = bytes / BW (memory-bound, overhead 0)", bound, mem, value=si(bound, "s"))
    tput = f.estimated_throughput(**kw, eta_bw=eta, eta_mm=1, t_step=ts, t_layer=0, t_seq=0,
                                  num_hidden_layers=m.model.num_hidden_layers)
    p.equal("estimated throughput = B / estimate", tput, m.batch / (mem / eta + ts),
            value=f"{float(tput):,.0f} tokens/s")
    measured = Fraction(m.measured_s)
    err_est = (est - measured) / measured
    err_bound = (bound - measured) / measured
    p.table(["", "step time", "error"], [
        ["measured", si(measured, "s"), ""],
        ["bound", si(bound, "s"), f"{float(err_bound) * 100:+.1f} %"],
        ["estimate", si(est, "s"), f"{float(err_est) * 100:+.1f} %"],
    ])
    p.holds("the bound is below the measurement", bound < measured)
    p.holds("the estimate is within 15 % of the held-out measurement", abs(err_est) <= Fraction(15, 100),
            f"{float(err_est) * 100:+.1f} %")

    p.section("A prefill under the same constants is compute-bound: there eta_mm matters")
    tokens = 4096
    pairs = tokens * (tokens + 1) // 2
    gemm = m.spec.measured_bf16
    assert gemm is not None
    eta_mm = Fraction(gemm.value) / Fraction(m.spec.peak_flops)
    p.say(f"eta_mm = measured GEMM / dense peak = {float(gemm.value) / 1e12:.1f} / "
          f"{float(m.spec.peak_flops) / 1e12:.1f} TFLOP/s = {float(eta_mm):.4f} ({gemm.source.citation})")
    flops = tokens * terms["flops_per_token"] + terms["attention_flops_per_token"] * pairs
    read = terms["weight_bytes"] + terms["kv_bytes_per_token"] * tokens
    p.equal("prefill bytes = W + k T (weights once, the prompt's KV written)",
            f.prefill_bytes(weight_bytes=terms["weight_bytes"], kv_bytes_per_token=terms["kv_bytes_per_token"],
                            prefill_tokens=tokens), read, value=si(read, "B"))
    mem_side = Fraction(read) / (eta * m.spec.bandwidth)
    math_side = Fraction(flops) / (eta_mm * m.spec.peak_flops)
    pre = f.estimated_prefill_step_time(**{k: v for k, v in kw.items() if k not in ("batch", "context_sum")},
                                        prefill_tokens=tokens, attention_pairs=pairs, eta_bw=eta, eta_mm=eta_mm,
                                        t_step=ts, t_layer=0, num_hidden_layers=m.model.num_hidden_layers)
    p.equal(f"{tokens:,}-token prefill = max(bytes / (eta_bw BW), FLOPs / (eta_mm peak)) + t_step", pre,
            max(mem_side, math_side) + ts, value=si(pre, "s"))
    p.holds("it is compute-bound", math_side > mem_side, f"{si(math_side, 's')} > {si(mem_side, 's')}")
    p.conclude(
        f"two vLLM rows give eta_bw = {float(eta_bw):.4f}, t_step = {float(t_step) * 1e3:.4f} ms; "
        f"held-out H100 row: estimate {float(est) * 1e3:.3f} ms ({float(err_est) * 100:+.1f} %), "
        f"bound {float(bound) * 1e3:.3f} ms ({float(err_bound) * 100:+.1f} %)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proof, print it, return 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
