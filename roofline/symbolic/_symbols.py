"""Every symbol of the derivations, created once from the table of quantities.

Names equal the fast paths' keyword arguments (``roofline.formulas``); each symbol's
assumptions are those of its quantity's domain in :data:`roofline.quantities.QUANTITIES`
(``positive``, ``nonnegative``, ``integer``). Topic modules declare their own auxiliary
symbols (bounds of a sum, a solve's unknown) with :func:`declare`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import sympy as sp

from ..quantities import DOMAINS, QUANTITIES

__all__ = ["SYMBOLS", "S", "symbols_for", "evaluate"]

#: name -> sympy.Symbol, the only place symbols are created.
SYMBOLS: dict[str, sp.Symbol] = {q.name: sp.Symbol(q.name, **DOMAINS[q.domain]) for q in QUANTITIES.values()}


class _Namespace:
    def __getattr__(self, name: str) -> sp.Symbol:
        try:
            return SYMBOLS[name]
        except KeyError:
            raise AttributeError(name) from None


#: Attribute access to the symbols: ``S.batch``.
S = _Namespace()


def declare(name: str, **assumptions: bool) -> sp.Symbol:
    """Declare a further symbol (used by topic modules for their own quantities)."""
    if name in SYMBOLS:
        if SYMBOLS[name].assumptions0 != sp.Symbol(name, **assumptions).assumptions0:
            raise ValueError(f"symbol {name!r} declared twice with different assumptions")
        return SYMBOLS[name]
    SYMBOLS[name] = sp.Symbol(name, **assumptions)
    return SYMBOLS[name]


def _to_sympy(value: Any) -> Any:
    if isinstance(value, Fraction):
        return sp.Rational(value.numerator, value.denominator)
    if isinstance(value, int):
        return sp.Integer(value)
    return sp.sympify(value)


def symbols_for(kwargs: dict[str, Any]) -> dict[sp.Symbol, Any]:
    """Map fast-path keyword arguments to a SymPy substitution dict (Fractions -> Rationals)."""
    return {SYMBOLS[name]: _to_sympy(value) for name, value in kwargs.items()}


def evaluate(expr: sp.Expr, **kwargs: Any) -> Any:
    """``expr`` with the keyword arguments substituted, simplified to a number where possible."""
    return sp.simplify(expr.subs(symbols_for(kwargs)))
