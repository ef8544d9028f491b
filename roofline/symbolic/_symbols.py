"""Every symbol of the derivations, declared once with its assumptions.

Names equal the fast paths' keyword arguments (``roofline.formulas``); the
assumptions follow the argument's domain (``positive``, ``nonnegative``,
``integer``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import sympy as sp

__all__ = ["SYMBOLS", "S", "symbols_for", "evaluate"]

_POS = dict(positive=True)
_NONNEG = dict(nonnegative=True)
_POSINT = dict(positive=True, integer=True)
_NONNEGINT = dict(nonnegative=True, integer=True)

_DECLARED: dict[str, dict[str, bool]] = {
    # one step
    "batch": _POS,  # B [sequences]; integer in practice, real in the solve for B*
    "context": _NONNEG,  # c [tokens] per sequence
    "context_sum": _NONNEG,  # S = sum c_i [tokens]
    "weight_bytes": _POS,  # W [bytes]
    "kv_bytes_per_token": _NONNEG,  # k [bytes/token]
    "flops_per_token": _POS,  # F [FLOP/token]
    "attention_flops_per_token": _NONNEG,  # a [FLOP/(token x context token)]
    "bandwidth": _POS,  # [bytes/s]
    "peak_flops": _POS,  # [FLOP/s]
    "overhead": _NONNEG,  # t0 [s]
    # prefill
    "prompt_tokens": _NONNEGINT,  # p [tokens]
    "prefill_tokens": _NONNEG,  # T [tokens]
    "attention_pairs": _NONNEG,  # Q [token pairs]
    "output_tokens": _POSINT,  # O [tokens]
    # KV cache
    "num_hidden_layers": _POSINT,
    "num_key_value_heads": _POSINT,
    "head_dim": _POSINT,
    "kv_bytes": _POS,  # [bytes/element]
    "memory": _POS,  # [bytes]
    "utilization": _POS,  # (0, 1]
    "reserved": _NONNEG,  # [bytes]
    "budget": _NONNEG,  # [bytes]
    "block_size": _POSINT,  # [tokens/block]
    # batching
    "length_sum": _POS,  # sum of the batch's output lengths [tokens]
    "length_max": _POS,  # the batch's longest output [tokens]
    "spread": _POS,  # half-width / mean of uniform lengths, in (0, 1]
    "min_length": _POSINT,  # shortest output of a discrete uniform [tokens]
    "length_range": _NONNEGINT,  # longest - shortest of a discrete uniform [tokens]
    "scale": _POS,  # mean of the exponential before truncation [tokens]
    "cap": _POS,  # truncation point of the exponential [tokens]
    "position": _POSINT,  # j, place in a first-come-first-served queue
    "requests": _POSINT,  # n, requests served one after another
    "service_time": _NONNEG,  # [s] per request
    "step_time": _NONNEG,  # [s] per step
    "arrival_time": _NONNEG,  # [s] after the batch started
}

#: name -> sympy.Symbol, the only place symbols are created.
SYMBOLS: dict[str, sp.Symbol] = {name: sp.Symbol(name, **kw) for name, kw in _DECLARED.items()}


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
