"""Decode stretches: n consecutive decode steps of a fixed batch, summed in closed form, derived.

Conventions (docs/conventions.md, "One step"): a decode step of B sequences whose
contexts sum to S costs max((W + k S) / BW, (B F + a S) / peak) + t0. In a **stretch**
the batch is fixed and every context grows by one per step, so step j (0-based) has
context sum S + B j, and its memory and compute times are two lines in j:

    memory_j  = (W + k S) / BW   + (k B / BW) j
    compute_j = (B F + a S) / peak + (a B / peak) j

Derived here:

* ``stretch_crossover``: the real index j* where the two lines meet (``solve``);
  ``oo`` when the slopes are equal (they never swap).
* ``stretch_time``: the sum of the n step times, roofline max form. The difference
  compute_j - memory_j is linear in j, so the step is bound by one resource for the
  first K = max(0, floor(j*) + 1) steps and by the other after (which one comes first
  follows from the slopes: the line with the smaller slope is on top before j*). Each
  part is a ``summation`` of a line over its steps (a polynomial in the bounds); the
  total is a ``Piecewise`` over the slopes' order with K capped at n.
* ``stretch_time_no_overlap``: the sum of memory + compute + t0 over the n steps.
* ``stretch_steps_until``: the first n whose cumulative time reaches ``target_time``:
  the prefix sum of each regime is a quadratic in n (``solve`` gives its larger root,
  a linear root where the regime's slope is 0) and the answer is its ``ceiling``.
* ``stretch_steps_until_no_overlap``: the same for the no-overlap form (one regime).
* ``stretch_blocks``: blocks held by B sequences of context c after n steps, in paged
  blocks of b tokens: ``summation`` over the sequences of ceiling((c + n) / b). A batch of
  unequal contexts is the sum of this over its groups of equal context.
* ``stretch_pool_overflow_step``: the first n at which those blocks exceed a pool of P
  blocks: B ceiling(y) > P iff ceiling(y) > floor(P / B) iff y > floor(P / B) for
  integer-valued ceiling(y); ``solve`` gives the boundary of y = (c + n) / b.

Fast paths: :mod:`roofline.formulas.stretch`. Proof: proofs/p13_decode_stretch.py.
"""

from __future__ import annotations

import sympy as sp

from . import step_time as _st
from ._symbols import S

__all__ = [
    "stretch_crossover",
    "stretch_time",
    "stretch_time_no_overlap",
    "stretch_steps_until",
    "stretch_steps_until_no_overlap",
    "stretch_blocks",
    "stretch_pool_overflow_step",
    "step_memory",
    "step_compute",
]

B, Ssum, t0 = S.batch, S.context_sum, S.overhead
n = S.steps  # steps in the stretch
target = S.target_time  # [s] from the stretch's start
pool = S.pool_blocks  # [blocks]

_j = sp.Symbol("j", nonnegative=True, integer=True)  # step index in the stretch, 0-based
_x = sp.Symbol("x", real=True)  # a real step index (solve)
_m = sp.Symbol("m", nonnegative=True, integer=True)  # a bound of a sum

# The memory and compute times of step j: the context sum has grown by B per step.
step_memory = _st.memory_time.subs(Ssum, Ssum + B * _j)
step_compute = _st.compute_time.subs(Ssum, Ssum + B * _j)
_slope_memory = sp.diff(step_memory, _j)
_slope_compute = sp.diff(step_compute, _j)

# ----------------------------------------------------------------------------- crossover
_meet = sp.solve(sp.Eq(step_memory.subs(_j, _x), step_compute.subs(_j, _x)), _x)
if len(_meet) != 1:  # pragma: no cover - derivation guard
    raise AssertionError(f"expected one crossover, got {_meet}")
stretch_crossover = sp.Piecewise((sp.oo, sp.Eq(_slope_memory, _slope_compute)), (sp.factor(_meet[0]), True))

#: Steps at the start of the stretch bound by the resource whose line has the smaller slope
#: (the steps j <= j*); at least 0 (j* < 0: none). Used only where the slopes differ; its
#: denominator is replaced by 1 where they are equal (a Kronecker delta) so that the unused
#: branches of the Piecewise forms below stay finite when they are evaluated.
_numerator, _denominator = sp.fraction(sp.together(_meet[0]))
_safe = _denominator + sp.KroneckerDelta(_denominator, 0)  # a Piecewise guard would be folded away by SymPy
_first_regime = sp.Max(0, sp.floor(_numerator / _safe) + 1)


def _prefix(line: sp.Expr) -> sp.Expr:
    """sum_{j=0}^{m-1} (line(j) + t0), a polynomial in m (``summation``)."""
    return sp.expand(sp.summation(line + t0, (_j, 0, _m - 1)))


_P_memory = _prefix(step_memory)
_P_compute = _prefix(step_compute)
# Equal slopes: the larger intercept stays on top, max(memory_j, compute_j) = max of the
# intercepts + slope j.
_P_equal = _prefix(sp.Max(step_memory.subs(_j, 0), step_compute.subs(_j, 0)) + _slope_memory * _j)


def _two_regimes(first: sp.Expr, second: sp.Expr, upto: sp.Expr) -> sp.Expr:
    """Sum of ``upto`` steps: the first min(upto, K) on ``first``'s line, the rest on ``second``'s."""
    k = sp.Min(upto, _first_regime)
    return first.subs(_m, k) + second.subs(_m, upto) - second.subs(_m, k)


stretch_time = sp.Piecewise(
    (_P_equal.subs(_m, n), sp.Eq(_slope_memory, _slope_compute)),
    (_two_regimes(_P_compute, _P_memory, n), sp.StrictLessThan(_slope_compute, _slope_memory)),
    (_two_regimes(_P_memory, _P_compute, n), True),
)
stretch_time_no_overlap = sp.factor(sp.summation(step_memory + step_compute + t0, (_j, 0, n - 1)))


# ----------------------------------------------------------------------------- first step reaching a time
_p, _q, _c = sp.symbols("p q c", real=True)
_quadratic_roots = sp.solve(_p * _x**2 + _q * _x + _c, _x)
# The larger root (p > 0): the one with +sqrt; picked by value at a sample point.
_larger = max(_quadratic_roots, key=lambda r: r.subs({_p: 1, _q: 0, _c: -1}))
_linear_root = sp.solve(_q * _x + _c, _x)[0]


def _first_reaching(prefix: sp.Expr, offset: sp.Expr, start: sp.Expr) -> sp.Expr:
    """ceiling of the real root of offset + prefix(x) - prefix(start) = target (the larger root).

    ``prefix`` is a polynomial in ``_m`` of degree <= 2; with a zero quadratic coefficient
    (slope 0) the root of the linear equation is used.
    """
    poly = sp.Poly(sp.expand(offset + prefix.subs(_m, _x) - prefix.subs(_m, start) - target), _x)
    coeffs = poly.all_coeffs()
    while len(coeffs) < 3:
        coeffs.insert(0, sp.Integer(0))
    a2, a1, a0 = coeffs
    linear = _linear_root.subs({_q: a1, _c: a0})
    quadratic = _larger.subs({_p: a2, _q: a1, _c: a0})
    return sp.ceiling(sp.Piecewise((linear, sp.Eq(a2, 0)), (quadratic, True)))


def _until_two_regimes(first: sp.Expr, second: sp.Expr) -> sp.Expr:
    k = _first_regime
    at_k = first.subs(_m, k)
    return sp.Piecewise(
        (_first_reaching(first, 0, 0), sp.LessThan(target, at_k)),
        (_first_reaching(second, at_k, k), True),
    )


stretch_steps_until = sp.Piecewise(
    (0, sp.Eq(target, 0)),
    (_first_reaching(_P_equal, 0, 0), sp.Eq(_slope_memory, _slope_compute)),
    (_until_two_regimes(_P_compute, _P_memory), sp.StrictLessThan(_slope_compute, _slope_memory)),
    (_until_two_regimes(_P_memory, _P_compute), True),
)
stretch_steps_until_no_overlap = sp.Piecewise(
    (0, sp.Eq(target, 0)),
    (_first_reaching(_prefix(step_memory + step_compute), 0, 0), True),
)

# ----------------------------------------------------------------------------- paged blocks
_i = sp.Symbol("i", positive=True, integer=True)
_c_blocks = S.context
stretch_blocks = sp.summation(sp.ceiling((_c_blocks + n) / S.block_size), (_i, 1, B))

# B ceiling(y) > P  <=>  ceiling(y) > floor(P / B)  <=>  y > floor(P / B)  (ceiling(y) is an integer);
# y = (c + n) / b crosses floor(P / B) at n = b floor(P / B) - c, an integer for integer c: the
# first n past it is that + 1 (0 if the pool is already exceeded).
_boundary = sp.solve(sp.Eq((_c_blocks + _x) / S.block_size, sp.floor(pool / B)), _x)[0]
stretch_pool_overflow_step = sp.Max(0, _boundary + 1)
