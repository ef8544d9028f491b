"""p06: the expected useful share of a static batch with iid random lengths, exactly.

Claim
-----
For B output lengths drawn iid, the expected useful share E[sum X_i / (B max X_i)]
equals E[X_1 / max] and, by conditioning on the max,

    E[X_1 / max] = 1/B + (B - 1) Integral(G(m) F(m)^(B-2) f(m) / m, m)     (continuous X).

* Continuous uniform lengths of relative spread s (low = mu (1 - s), high = mu (1 + s)):
  (B + 1)/(2B) + (B - 1)/2 lerchphi(-2s/(1 - s), 1, B), derived by SymPy for symbolic B
  (logarithms for each integer B), and (B + 1)/(2B) at s = 1.
* Discrete uniform lengths: a finite sum over order statistics, exact.
* The Anyscale benchmark's capped (truncated) exponential: no closed form for symbolic
  B; evaluated numerically (and said so).

The lesson's approximation "mean / longest" (read as E[X] / E[max]) is
(B + 1) / (B + 1 + s (B - 1)) for the uniform: equal to the exact share at s = 1 and
within about 1 % of it at every spread and batch checked. It is also exactly the
**long-run** share over many batches (useful / occupied row-steps pooled), while
E[X / max] is the expected share of one batch. The share falls as the spread grows
and as the batch grows, and tends to 1 as the spread vanishes.

Assumptions
-----------
* Lengths iid within a batch; static batching as in CONVENTIONS.md (the batch runs
  max X_i steps, useful share sum X_i / (B max X_i)).
* The capped exponential: exponential of mean 128 before truncation, samples above the
  cap discarded (not clipped), lengths continuous (the benchmark rounded them to
  integers; see p07).
* Monotonicity and the size of the approximation's error are checked on a grid of
  spreads and batches (stated below), not proved for every real s and integer B.

Sources
-------
The lesson, section 4 and its right-hand chart; Anyscale, "How continuous batching
enables 23x throughput in LLM inference" (2023) and its benchmark code
(anyscale/llm-continuous-batching-benchmarks, benchmark_throughput.py,
``capped_exponential``), as in ../shared/design/CONSTANTS.md.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from ._proof import Proof, run_script

NAME = "p06_expected_useful_share"
ANYSCALE = ((32, 16), (128, 12), (512, 8), (1536, 4))  # (cap, static batch size)
SCALE = 128
SEED, RUNS = 20230615, 300


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..sim import Request, UnitCostModel, serve_static
    from ..symbolic import SYMBOLS, symbols_for
    from ..symbolic import batching as sb
    from ..symbolic._symbols import S

    B, s = S.batch, S.spread
    p.title("p06 expected useful share of static batching with iid random lengths")

    p.section("The share of a batch is X_1 / max on average (symmetry)")
    p.say("E[sum X_i / (B max)] = (1/B) sum_i E[X_i / max] = E[X_1 / max], since the X_i are exchangeable. "
          "Checked by enumerating every outcome of 3 lengths uniform on {2, ..., 6}:")
    outcomes = list(itertools.product(range(2, 7), repeat=3))
    mean_share = sum((Fraction(sum(v), 3 * max(v)) for v in outcomes), Fraction(0)) / len(outcomes)
    mean_first = sum((Fraction(v[0], max(v)) for v in outcomes), Fraction(0)) / len(outcomes)
    p.equal("E[sum X / (3 max)] = E[X_1 / max] over all 125 outcomes", mean_share, mean_first,
            value=f"{mean_share} = {float(mean_share):.6f}")

    p.section("Continuous uniform lengths: condition on the max and integrate (symbolic B)")
    p.say("Given max = m, one row holds m and the other B - 1 are iid uniform on [low, m], of mean "
          "(low + m)/2; the max has density B (m - low)^(B-1) / (high - low)^B. SymPy integrates over m "
          "with B left symbolic and returns Lerch's transcendent:")
    p.show("E[X_1/max] on [low, high]", sb.expected_useful_share_uniform_interval)
    p.show("with spread s = (high - low)/(high + low)", sb.expected_useful_share_uniform)
    p.legend("batch", "spread")
    low, high = sp.symbols("low high", positive=True)
    x1, x2 = sp.symbols("x1 x2", positive=True)
    direct2 = (sp.integrate(sp.integrate(x1 / x2, (x1, low, x2)), (x2, low, high)) + (high - low) ** 2 / 2) / (
        high - low) ** 2
    interval2 = sb.expected_useful_share_uniform_interval.subs(B, 2).subs(
        {SYMBOLS["low"]: low, SYMBOLS["high"]: high})
    p.equal("B = 2: equals the direct double integral of x1 / max(x1, x2)", sp.expand_func(interval2), direct2)
    spread_form = sb.expected_useful_share_uniform.args[0][0]
    for n in (2, 3, 4):
        logs = sp.simplify(sp.expand_func(spread_form.subs(B, n)))
        if n == 2:
            p.show("B = 2 in logarithms", logs)
        p.equal(f"B = {n}: as s -> 0 the share -> 1", sp.limit(logs, s, 0, "+"), 1)
        p.equal(f"B = {n}: as s -> 1 it tends to the s = 1 branch (B + 1)/(2B)", sp.limit(logs, s, 1, "-"),
                sp.Rational(n + 1, 2 * n))
    for n, spread in ((3, sp.Rational(1, 2)), (8, sp.Rational(9, 10)), (16, sp.Rational(1, 10))):
        fast = f.expected_useful_share_uniform(batch=n, spread=Fraction(spread.p, spread.q))
        exact = sp.re(sp.N(sb.expected_useful_share_uniform.subs({B: n, s: spread}), 30))
        p.holds(f"fast path (series / recurrence) = SymPy's lerchphi at B = {n}, s = {spread}",
                abs(fast - float(exact)) <= 1e-13 * float(exact), f"{fast:.15f} vs {float(exact):.15f}")

    p.section("The lesson's mean / longest")
    p.show("E[max] of B uniform on [low, high]", sb.expected_longest_uniform_interval)
    p.show("approximation E[X] / E[max]", sb.approx_useful_share_uniform)
    p.equal("at s = 1 the approximation is exact: (B + 1)/(2B) for every B",
            sb.approx_useful_share_uniform.subs(s, 1), sb.expected_useful_share_uniform.subs(s, 1))
    rows: list[list[Any]] = []
    worst = 0.0
    batches, spreads = (2, 4, 8, 16, 64), (Fraction(1, 10), Fraction(1, 4), Fraction(1, 2), Fraction(3, 4), 1)
    for n in batches:
        row: list[str] = [str(n)]
        for sv in spreads:
            exact_v = float(f.expected_useful_share_uniform(batch=n, spread=sv))
            approx_v = float(f.approx_useful_share_uniform(batch=n, spread=sv))
            worst = max(worst, abs(approx_v - exact_v) / exact_v)
            row.append(f"{exact_v:.4f}/{approx_v:.4f}")
        rows.append(row)
    p.say("exact E[X/max] / approximation E[X]/E[max], by batch (rows) and spread (columns):")
    p.table(["B", *(f"s={float(v):g}" for v in spreads)], rows)
    p.within("the approximation is within 1.5 % of the exact share on this grid", worst, 0, 0.015)

    p.section("Falls with the spread and with the batch; -> 1 as the spread vanishes")
    grid_s = [Fraction(i, 40) for i in range(1, 41)]
    grid_b = list(range(1, 65))
    table = np.array([[f.expected_useful_share_uniform(batch=n, spread=v) for v in grid_s] for n in grid_b], float)
    p.holds("strictly decreasing in s for every B in 2..64 (s = 1/40, ..., 1)",
            bool(np.all(np.diff(table[1:], axis=1) < 0)))
    p.holds("strictly decreasing in B for every s on the grid (B = 1..64)", bool(np.all(np.diff(table, axis=0) < 0)))
    tiny = f.expected_useful_share_uniform(batch=64, spread=Fraction(1, 10**6))
    p.holds("at s = 1e-6 even B = 64 is within 1e-5 of 1", 1 - tiny < 1e-5, f"{tiny:.9f}")
    p.equal("B = 1 is always 1", f.expected_useful_share_uniform(batch=1, spread=Fraction(1, 3)), 1)
    p.within("uniform on [0, 2 mu] (s = 1) the share falls towards 1/2 as B grows: B = 64", table[63, -1], 0.5, 0.51)

    p.section("Discrete uniform lengths: a finite sum over order statistics")
    p.show("E[X_1/max] on {lo, ..., lo + r}", sb.expected_useful_share_discrete_uniform)
    p.legend("batch", "min_length", "length_range")
    dkw = dict(batch=3, min_length=2, length_range=4)
    dsym = sb.expected_useful_share_discrete_uniform.subs(symbols_for(dkw)).doit()
    p.equal("B = 3 on {2, ..., 6}: the sum = the enumeration of all 125 outcomes", dsym, mean_share)
    p.equal("fast path = the symbolic sum (exact Fractions)", f.expected_useful_share_discrete_uniform(**dkw), dsym)
    fine = f.expected_useful_share_discrete_uniform(batch=4, min_length=1, length_range=999)
    p.holds("lengths 1..1,000 for B = 4 approach the continuous s = 1 value 5/8",
            abs(float(fine) - 5 / 8) < 1e-3, f"{float(fine):.5f}")

    p.section("Monte Carlo over the reference scheduler (discrete uniform, B = 8, lengths 1..200)")
    rng = np.random.default_rng(SEED)
    per_batch, useful, occupied = [], [], []
    for _ in range(RUNS):
        lengths = rng.integers(1, 201, size=8)
        requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=int(o)) for i, o in enumerate(lengths)]
        summary = serve_static(requests, UnitCostModel(), batch_size=8, record_steps=False).summary
        per_batch.append(float(summary.per_batch_useful_share))
        useful.append(int(lengths.sum()))
        occupied.append(8 * int(lengths.max()))
    exact_d = float(f.expected_useful_share_discrete_uniform(batch=8, min_length=1, length_range=199))
    mean = float(np.mean(per_batch))
    se = float(np.std(per_batch, ddof=1)) / math.sqrt(RUNS)
    p.holds(f"mean of {RUNS} scheduler shares within 4 standard errors of E[X/max] (seed {SEED})",
            abs(mean - exact_d) <= 4 * se, f"{mean:.4f} vs {exact_d:.4f}, SE {se:.4f}")
    u, o = np.array(useful, float), np.array(occupied, float)
    pooled = u.sum() / o.sum()
    e_max = sum(Fraction(m**8 - (m - 1) ** 8, 200**8) * m for m in range(1, 201))
    ratio_of_means = float(Fraction(201, 2) / e_max)
    se_pooled = float(np.std(u - pooled * o, ddof=1) / math.sqrt(RUNS) / o.mean())
    p.holds("pooled share (all useful / all occupied) within 4 SE of E[X] / E[max], the long-run share",
            abs(pooled - ratio_of_means) <= 4 * se_pooled, f"{pooled:.4f} vs {ratio_of_means:.4f}, SE {se_pooled:.4f}")

    p.section("The Anyscale benchmark's capped exponential (mean 128, truncated at the cap)")
    m = sp.Symbol("m", positive=True)
    F, G, dens = sp.Function("F"), sp.Function("G"), sp.Function("f")
    p.show("E[X_1/max]", 1 / B + (B - 1) * sp.Integral(G(m) * F(m) ** (B - 2) * dens(m) / m, (m, 0, S.cap)))
    p.show("F(m) = P(X <= m)", sb.truncated_exponential_cdf)
    p.show("G(m) = E[X; X <= m]", sb.truncated_exponential_partial_mean)
    p.legend("batch", "scale", "cap")
    p.say("SymPy integrates F and G in closed form but not the outer integral for symbolic B, so it stays an "
          "Integral and is evaluated numerically (mpmath at 20 digits); the fast path uses Gauss-Legendre "
          "quadrature between quantiles of the max.")
    rows = []  # the Anyscale table
    for cap, n in ANYSCALE:
        fast = f.expected_useful_share_exponential(batch=n, scale=SCALE, cap=cap)
        ref = float(sp.N(sb.expected_useful_share_exponential.subs(symbols_for(dict(batch=n, scale=SCALE, cap=cap))),
                         20))
        p.holds(f"cap {cap}, B = {n}: fast path = SymPy's numerical integral to 1e-12", abs(fast - ref) <= 1e-12,
                f"{fast:.12f}")
        mean_x, e_max_x = _truncated_exponential_moments(n, SCALE, cap)
        rows.append([cap, n, f"{mean_x:.1f}", f"{e_max_x:.1f}", f"{fast:.4f}", f"{mean_x / e_max_x:.4f}"])
    p.table(["cap", "B", "E[X]", "E[max]", "E[X/max]", "E[X]/E[max]"], rows)
    shares = [float(r[4]) for r in rows]
    p.holds("at the benchmark's settings only 40 % to 52 % of a static batch does useful work",
            all(0.40 < v < 0.52 for v in shares), ", ".join(f"{v:.3f}" for v in shares))

    p.conclude(f"uniform: B = 4 -> {float(f.expected_useful_share_uniform(batch=4, spread=Fraction(1, 2))):.3f} at "
               f"s = 0.5, 5/8 at s = 1; mean/longest within {worst * 100:.1f} %; falls with s and B, -> 1 as s -> 0; "
               f"Anyscale caps: {', '.join(f'{v:.3f}' for v in shares)}; scheduler Monte Carlo agrees")


def _truncated_exponential_moments(batch: int, scale: int, cap: int) -> tuple[float, float]:
    """E[X] and E[max of B] for the exponential of mean ``scale`` truncated at ``cap`` (SymPy, numerically)."""
    x = sp.Symbol("x", positive=True)
    z = 1 - sp.exp(-sp.Rational(cap, scale))
    cdf = (1 - sp.exp(-x / scale)) / z
    mean = sp.Rational(scale) - sp.Rational(cap) * sp.exp(-sp.Rational(cap, scale)) / z
    e_max = sp.Integral(1 - cdf**batch, (x, 0, cap))
    return float(sp.N(mean, 20)), float(sp.N(e_max, 20))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
