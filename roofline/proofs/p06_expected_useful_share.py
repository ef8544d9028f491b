"""p06: the expected useful share of a static batch with iid random lengths, exactly.

Topic ``useful_share``: ``roofline.symbolic.useful_share`` (derivations),
``roofline.formulas.useful_share`` (fast paths), ``tests/test_useful_share.py``.

Two shares, never one name for both (docs/conventions.md, "Useful share and slot occupancy"): the
**per-batch useful share** of a static batch, sum O_i / (B max O_i), and its expectation
over random lengths; the **long-run useful share** of a run, useful rows / occupied rows
summed over all its steps, which over many batches tends to E[X] / E[max X]. (Slot
occupancy, occupied rows / (max batch x steps), is a third quantity, not used here.)

Claim
-----
For B output lengths drawn iid, the expected per-batch useful share E[sum X_i / (B max X_i)]
equals E[X_1 / max] and, by conditioning on the max,

    E[X_1 / max] = 1/B + (B - 1) Integral(G(m) F(m)^(B-2) f(m) / m, m)     (continuous X).

* Continuous uniform lengths of relative spread s (low = mu (1 - s), high = mu (1 + s)):
  (B + 1)/(2B) + (B - 1)/2 lerchphi(-2s/(1 - s), 1, B), derived by SymPy for symbolic B
  (logarithms for each integer B), and (B + 1)/(2B) at s = 1; checked at B = 3 and 8
  against a seeded Monte Carlo of 200,000 batches.
* Discrete uniform lengths: a finite sum over order statistics, exact.
* The Anyscale benchmark's capped (truncated) exponential: no closed form for symbolic
  B; evaluated numerically (and said so), by two integration routes. At the benchmark's
  settings (caps 32, 128, 512, 1,536 with B = 16, 12, 8, 4) the expected per-batch useful
  share is 0.513, 0.475, 0.409 and 0.510: about half of a static batch's row-steps make
  a token, as in the lesson's own example (40 %).

The lesson's approximation "mean / longest" (read as E[X] / E[max]) is
(B + 1) / (B + 1 + s (B - 1)) for the uniform: equal to the exact share at s = 1 and
within 1 % of it at every spread and batch checked. It is the limit of the long-run
useful share over many batches, while E[X / max] is the expected per-batch share.
The expected per-batch share falls as the spread grows and as the batch grows, and
tends to 1 as the spread vanishes.

Assumptions
-----------
* Lengths iid within a batch; static batching as in docs/conventions.md (the batch runs
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
``capped_exponential``), as in the Sources in roofline.hardware and the model presets.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from ._audit import audit_run
from ._proof import Proof, run_script

NAME = "p06_expected_useful_share"
ANYSCALE = ((32, 16), (128, 12), (512, 8), (1536, 4))  # (cap, static batch size)
SCALE = 128
SEED, RUNS = 20230615, 300
MC_BATCHES = 200_000  # Monte Carlo batches for the continuous uniform
SIMPSON_PANELS = 20_000  # composite Simpson panels of the second route for the exponential


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..sim import Request, UnitCostModel, serve_static
    from ..symbolic import SYMBOLS, symbols_for
    from ..symbolic import useful_share as sb
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
        exact = _uniform_reference(n, spread)
        p.holds(f"fast path (series / recurrence) = SymPy's lerchphi at B = {n}, s = {spread}",
                abs(fast - float(exact)) <= 1e-13 * float(exact), f"{fast:.15f} vs {float(exact):.15f}")
    p.say(f"An independent route: {MC_BATCHES:,} batches of uniform lengths drawn with numpy (seed {SEED}), "
          "the mean of sum X / (B max X). Tolerance: 4 standard errors of that mean (a false alarm about once "
          "in 16,000 seeds); it is below 1/4 of 1 % of the share, so a formula 1 % off would sit more than "
          "16 standard errors away and fail.")
    mc_rng = np.random.default_rng(SEED)
    for n, spread in ((3, Fraction(1, 2)), (8, Fraction(9, 10))):
        draws = mc_rng.uniform(1 - float(spread), 1 + float(spread), size=(MC_BATCHES, n))
        shares_mc = draws.sum(axis=1) / (n * draws.max(axis=1))
        mc_mean, mc_tol = float(shares_mc.mean()), 4 * float(shares_mc.std(ddof=1)) / math.sqrt(MC_BATCHES)
        fast = float(f.expected_useful_share_uniform(batch=n, spread=spread))
        p.holds(f"B = {n}, s = {spread}: Monte Carlo within 4 SE of the formula, and 4 SE < 1/4 of 1 %",
                abs(mc_mean - fast) <= mc_tol < fast / 400,
                f"{mc_mean:.5f} vs {fast:.5f}, 4 SE = {mc_tol:.1e} ({mc_tol / fast * 100:.3f} %)")

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
    p.within("the approximation is within 1 % of the exact share on this grid", worst, 0, Fraction(1, 100))
    p.equal("fast path approx_useful_share_uniform = symbolic at B = 4, s = 1/2: 10/13",
            f.approx_useful_share_uniform(batch=4, spread=Fraction(1, 2)),
            sb.approx_useful_share_uniform.subs({B: 4, s: sp.Rational(1, 2)}))

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
    for run_index in range(RUNS):
        lengths = rng.integers(1, 201, size=8)
        requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=int(o)) for i, o in enumerate(lengths)]
        result = serve_static(requests, UnitCostModel(), batch_size=8, record_steps=run_index == 0)
        if run_index == 0:
            audit_run(p, "the first batch", result, requests, policy="static", batch_size=8)
        summary = result.summary
        per_batch.append(float(summary.per_batch_useful_share))
        useful.append(int(lengths.sum()))
        occupied.append(8 * int(lengths.max()))
    exact_d = float(f.expected_useful_share_discrete_uniform(batch=8, min_length=1, length_range=199))
    mean = float(np.mean(per_batch))
    se = float(np.std(per_batch, ddof=1)) / math.sqrt(RUNS)
    p.holds(f"mean of {RUNS} per-batch shares of the scheduler within 4 standard errors of E[X/max] (seed {SEED})",
            abs(mean - exact_d) <= 4 * se, f"{mean:.4f} vs {exact_d:.4f}, SE {se:.4f}")
    u, o = np.array(useful, float), np.array(occupied, float)
    pooled = u.sum() / o.sum()
    e_max = sum(Fraction(m**8 - (m - 1) ** 8, 200**8) * m for m in range(1, 201))
    ratio_of_means = float(Fraction(201, 2) / e_max)
    se_pooled = float(np.std(u - pooled * o, ddof=1) / math.sqrt(RUNS) / o.mean())
    p.holds("long-run useful share (all useful / all occupied row-steps) within 4 SE of E[X] / E[max]",
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
          "quadrature between quantiles of the max, in m / scale. A second route, independent of both: "
          f"substitute u = F(m) (so du = f(m) dm, m = -scale log(1 - u z), z = 1 - exp(-cap / scale)) and "
          f"integrate (B - 1) u^(B-2) G(m(u)) / m(u) over u in [0, 1] by composite Simpson ({SIMPSON_PANELS:,} "
          "panels, numpy), with G(m) = (scale - (m + scale) exp(-m / scale)) / z written out by hand.")
    rows = []  # the Anyscale table
    for cap, n in ANYSCALE:
        fast = f.expected_useful_share_exponential(batch=n, scale=SCALE, cap=cap)
        ref = _exponential_reference(n, SCALE, cap)
        p.holds(f"cap {cap}, B = {n}: fast path = SymPy's numerical integral to 1e-12", abs(fast - ref) <= 1e-12,
                f"{fast:.12f}")
        second = _exponential_share_in_u(n, SCALE, cap)
        p.holds(f"cap {cap}, B = {n}: fast path = the second route (u = F(m), Simpson) to 1e-6 (1 % would be 4e-3)",
                abs(fast - second) <= 1e-6, f"{second:.12f}, difference {abs(fast - second):.1e}")
        mean_x, e_max_x = _truncated_exponential_moments(n, SCALE, cap)
        rows.append([cap, n, f"{mean_x:.1f}", f"{e_max_x:.1f}", f"{fast:.4f}", f"{mean_x / e_max_x:.4f}"])
    p.say("E[X/max] is the expected per-batch useful share; E[X]/E[max] the limit of the long-run useful share "
          "over many batches:")
    p.table(["cap", "B", "E[X]", "E[max]", "E[X/max]", "E[X]/E[max]"], rows)
    shares = [float(r[4]) for r in rows]
    p.say("At the benchmark's settings the expected per-batch useful share is "
          f"{', '.join(f'{v:.3f}' for v in shares)} (caps 32 to 1,536): about half of a static batch's row-steps "
          "make a token, as in the lesson's own example (40 %).")

    p.conclude(f"uniform: B = 4 -> {float(f.expected_useful_share_uniform(batch=4, spread=Fraction(1, 2))):.3f} at "
               f"s = 0.5, 5/8 at s = 1; mean/longest within {worst * 100:.1f} %; falls with s and B, -> 1 as s -> 0; "
               f"Anyscale caps, expected per-batch share: {', '.join(f'{v:.3f}' for v in shares)}; "
               f"Monte Carlo and the scheduler agree")


def _exponential_share_in_u(batch: int, scale: int, cap: int) -> float:
    """E[X_1 / max] for the truncated exponential by the route u = F(m), composite Simpson in numpy."""
    z = -math.expm1(-cap / scale)
    u = np.linspace(0.0, 1.0, 2 * SIMPSON_PANELS + 1)
    m = -scale * np.log1p(-u * z)
    safe = np.where(m > 0, m, 1.0)
    g_over_m = (scale + -(safe + scale) * np.exp(-safe / scale)) / z / safe  # G(m) / m
    g_over_m[0] = 0.0  # G(m) / m -> 0 as m -> 0
    values = (batch - 1) * u ** (batch - 2) * g_over_m
    h = u[1] - u[0]
    simpson = h / 3 * (values[0] + values[-1] + 4 * values[1:-1:2].sum() + 2 * values[2:-1:2].sum())
    return 1 / batch + float(simpson)


@functools.cache
def _uniform_reference(batch: int, spread: sp.Rational) -> float:
    """SymPy's lerchphi form at 30 digits (cached: it takes seconds and uses no fast path)."""
    from ..symbolic import useful_share as sb
    from ..symbolic._symbols import S

    return float(sp.re(sp.N(sb.expected_useful_share_uniform.subs({S.batch: batch, S.spread: spread}), 30)))


@functools.cache
def _exponential_reference(batch: int, scale: int, cap: int) -> float:
    """SymPy's Integral evaluated by mpmath at 20 digits (cached: it takes seconds and uses no fast path)."""
    from ..symbolic import symbols_for
    from ..symbolic import useful_share as sb

    return float(sp.N(sb.expected_useful_share_exponential.subs(symbols_for(dict(batch=batch, scale=scale, cap=cap))),
                      20))


@functools.cache
def _truncated_exponential_moments(batch: int, scale: int, cap: int) -> tuple[float, float]:
    """E[X] and E[max of B] for the exponential of mean ``scale`` truncated at ``cap`` (SymPy, numerically; cached)."""
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
