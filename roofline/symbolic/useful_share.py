"""The expected useful share of a static batch over random output lengths, derived.

Conventions (docs/conventions.md, "Useful share and slot occupancy"): the per-batch
useful share of a static batch of B rows is sum(O_i) / (B x max O_i)
(:mod:`roofline.symbolic.batching`); this module derives its **expectation**
E[sum X_i / (B max X_i)] for B iid output lengths X_i. By symmetry and linearity it
equals E[X_1 / M] (M = max). Conditioning on M = m, one row holds m and the other
B - 1 are iid from the distribution cut at m, so

    E[X_1 / M] = 1/B + (B - 1) * Integral(G(m) F(m)^(B - 2) f(m) / m, m),

with f the density, F the CDF and G(m) = Integral(x f(x), x <= m) (a continuous
distribution; :func:`share_integrand` builds it from ``f`` with ``integrate``).

- ``expected_useful_share_uniform_interval``: continuous uniform on [low, high],
  integrated for a **symbolic** batch B: SymPy returns Lerch's transcendent,
  ``lerchphi(-(high - low)/low, 1, B)`` (for integer B it expands to logarithms:
  ``sympy.expand_func``). ``expected_useful_share_uniform``: the same with
  low = mu (1 - spread), high = mu (1 + spread); the mean mu cancels. At spread 1
  (low = 0) it is derived again from the integral with low = 0: (B + 1) / (2 B).
- ``expected_useful_share_discrete_uniform``: integer lengths uniform on
  {min_length, ..., min_length + length_range}; ties make the conditioning above
  inexact, so it is summed over the joint law of (X_1, max of the others), from
  P(max of B - 1 <= m) = ((m - min_length + 1) / n)^(B - 1). The inner sum over
  X_1 is closed by ``summation``; the outer sum over m stays a finite ``Sum``
  (no closed form for symbolic B); ``.doit()`` evaluates it exactly.
- ``expected_useful_share_exponential``: the exponential of mean ``scale``,
  truncated (samples above ``cap`` discarded, not clipped), as in the Anyscale
  benchmark. F and G are integrated in closed form; the outer integral has no
  elementary closed form (SymPy cannot integrate it for symbolic B; for B = 2 it
  returns exponential integrals Ei), so it is kept as an unevaluated ``Integral``:
  ``.evalf()`` evaluates it (mpmath).
- ``approx_useful_share_uniform``: the lesson's "mean / longest", read as
  E[X] / E[max of B] for the uniform of the given spread (E[max] integrated from the
  density of the max), = (B + 1) / (B + 1 + spread (B - 1)). Exact at spread 1. It is
  also the limit of the long-run useful share (useful over occupied rows pooled over
  many batches), a different quantity from the expected per-batch share.

The expected shares take a few seconds to derive; they are derived on first access
(a module ``__getattr__``) and cached, so importing this module stays fast.

Fast paths: :mod:`roofline.formulas.useful_share`. Proof:
proofs/p06_expected_useful_share.py.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import sympy as sp

from ._symbols import S, declare

__all__ = [
    "expected_useful_share_uniform_interval",
    "expected_useful_share_uniform",
    "approx_useful_share_uniform",
    "expected_longest_uniform_interval",
    "expected_useful_share_discrete_uniform",
    "expected_useful_share_exponential",
    "truncated_exponential_cdf",
    "truncated_exponential_partial_mean",
    "share_integrand",
]

if TYPE_CHECKING:  # derived on first access, see __getattr__ at the end
    expected_useful_share_uniform_interval: sp.Expr
    expected_useful_share_uniform: sp.Expr
    approx_useful_share_uniform: sp.Expr
    expected_longest_uniform_interval: sp.Expr
    expected_useful_share_discrete_uniform: sp.Expr
    expected_useful_share_exponential: sp.Expr
    truncated_exponential_cdf: sp.Expr
    truncated_exponential_partial_mean: sp.Expr

B = S.batch

_x = sp.Symbol("x", positive=True)
_m = sp.Symbol("m", positive=True)
_u = sp.Symbol("u", positive=True)


def share_integrand(pdf: sp.Expr, x: sp.Symbol, lower: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(F(m), G(m), integrand) of the expected useful share for the density ``pdf`` of ``x``.

    F(m) = Integral(pdf, (x, lower, m)), G(m) = Integral(x pdf, (x, lower, m)) and the
    integrand (B - 1) G(m) F(m)^(B - 2) f(m) / m, whose integral over the support plus
    1 / B is E[X_1 / max] for B iid lengths (module docstring). ``m`` is the symbol
    ``_m`` of this module.
    """
    f = pdf.subs(x, _m)
    cdf = sp.integrate(pdf, (x, lower, _m), conds="none")
    first_moment = sp.integrate(x * pdf, (x, lower, _m), conds="none")
    return cdf, first_moment, (B - 1) * first_moment * cdf ** (B - 2) * f / _m


def _unpolar(expr: sp.Expr) -> sp.Expr:
    """Replace SymPy's polar helpers (exp_polar(I pi) z -> -z) once the branch is known."""
    expr = expr.replace(lambda e: isinstance(e, sp.exp_polar), lambda e: sp.exp(e.args[0]))
    return expr.replace(lambda e: isinstance(e, sp.polar_lift), lambda e: e.args[0])


def _integrate_u_power(integrand_u: sp.Expr) -> sp.Expr:
    """Integral over u in [0, 1] of u^(B - 1) R(u), R rational in u: partial fractions, term by term."""
    rational = sp.cancel(sp.powsimp(integrand_u / _u ** (B - 1), force=True))
    if rational.has(_u ** B) or not rational.is_rational_function(_u):  # pragma: no cover - derivation guard
        raise AssertionError(f"not of the form u**(B-1) R(u): {integrand_u}")
    total = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(sp.apart(sp.factor(rational), _u))):
        coefficient, rest = sp.factor(term).as_independent(_u)
        total += coefficient * sp.integrate(_u ** (B - 1) * sp.collect(rest, _u), (_u, 0, 1))
    return sp.gammasimp(_unpolar(total))


# The expected shares below take seconds to derive, so they are derived on first use
# (module ``__getattr__``) and cached: importing this module stays fast.
_low = declare("low", positive=True)
_high = declare("high", positive=True)
_mu = sp.Symbol("mu", positive=True)
_SPREAD = {_low: _mu * (1 - S.spread), _high: _mu * (1 + S.spread)}  # low = mu (1 - s), high = mu (1 + s)


@functools.cache
def _uniform() -> dict[str, sp.Expr]:
    """Continuous uniform on [low, high]: condition on the max, substitute m = low + (high - low) u."""
    pdf = 1 / (_high - _low)
    cdf, _, integrand = share_integrand(pdf, _x, _low)
    in_u = integrand.subs(_m, _low + (_high - _low) * _u) * (_high - _low)
    share = sp.expand(1 / B + _integrate_u_power(in_u))
    interval = sp.collect(share, list(share.atoms(sp.lerchphi)))
    # The same at low = 0 (spread 1): the lerchphi term's coefficient vanishes before integrating.
    at_zero = sp.factor(1 / B + _integrate_u_power(sp.simplify(in_u.subs(_low, 0))))
    # Spread s: the mean mu must cancel.
    spread = sp.simplify(interval.subs(_SPREAD))
    if _mu in spread.free_symbols:  # pragma: no cover - derivation guard
        raise AssertionError("the mean did not cancel from the uniform share")
    # E[max] of B iid uniform on [low, high], from the density of the max, d/dm F(m)^B.
    max_density = sp.diff(cdf**B, _m)
    longest = sp.factor(sp.simplify(sp.integrate(
        sp.powsimp(sp.expand_power_base((_m * max_density).subs(_m, _low + (_high - _low) * _u) * (_high - _low),
                                        force=True), force=True),
        (_u, 0, 1),
    )))
    mean = sp.integrate(_x * pdf, (_x, _low, _high))
    return {
        "expected_useful_share_uniform_interval": interval,
        "expected_useful_share_uniform": sp.Piecewise((spread, sp.Lt(S.spread, 1)), (at_zero, True)),
        "expected_longest_uniform_interval": longest,
        "approx_useful_share_uniform": sp.factor(sp.simplify((mean / longest).subs(_SPREAD))),
    }


@functools.cache
def _discrete_uniform() -> dict[str, sp.Expr]:
    """Integer lengths uniform on {a, ..., a + r}, n = r + 1 values; M' = max of the other B - 1 rows."""
    a, r = S.min_length, S.length_range
    n = r + 1
    m = sp.Symbol("m", positive=True, integer=True)
    x = sp.Symbol("x", positive=True, integer=True)
    cdf_others = ((m - a + 1) / n) ** (B - 1)  # P(M' <= m), a <= m <= a + r
    p_others_eq = cdf_others - cdf_others.subs(m, m - 1)  # P(M' = m)
    # X_1 = m with M' <= m contributes m / m; X_1 = x < m with M' = m contributes x / m.
    inner = sp.summation(x / m * (1 / n) * p_others_eq, (x, a, m - 1)) + (1 / n) * cdf_others
    return {"expected_useful_share_discrete_uniform": sp.Sum(inner, (m, a, a + r))}


@functools.cache
def _exponential() -> dict[str, sp.Expr]:
    """The exponential of mean ``scale`` truncated at ``cap``: F and G closed, the outer integral kept."""
    lam = 1 / S.scale
    pdf = lam * sp.exp(-lam * _x) / (1 - sp.exp(-lam * S.cap))
    cdf, partial_mean, integrand = share_integrand(pdf, _x, 0)
    return {
        "expected_useful_share_exponential": 1 / B + (B - 1) * sp.Integral(
            sp.simplify(integrand / (B - 1)), (_m, 0, S.cap)),
        "truncated_exponential_cdf": sp.simplify(cdf),
        "truncated_exponential_partial_mean": sp.simplify(partial_mean),
    }


_LAZY = {
    "expected_useful_share_uniform_interval": _uniform,
    "expected_useful_share_uniform": _uniform,
    "expected_longest_uniform_interval": _uniform,
    "approx_useful_share_uniform": _uniform,
    "expected_useful_share_discrete_uniform": _discrete_uniform,
    "expected_useful_share_exponential": _exponential,
    "truncated_exponential_cdf": _exponential,
    "truncated_exponential_partial_mean": _exponential,
}


def __getattr__(name: str) -> sp.Expr:
    """Derive the expected-share expressions on first access (see above)."""
    group = _LAZY.get(name)
    if group is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = group()[name]
    globals()[name] = value
    return value
