"""The small toolkit every proof script uses: checked steps, readable printing, a verdict.

A :class:`Proof` collects the steps of one derivation. Each check is exact: SymPy
expressions are compared with ``sympy.simplify(lhs - rhs) == 0`` and numbers
(int, Fraction, SymPy Rational) with ``==``; the lesson's rounded claims ("~4.8 ms",
"about 300") are checked as stated ranges with :meth:`Proof.within`, never by
rounding a result until it matches. A failed check is printed as ``[FAIL]`` and
makes the script exit with status 1; nothing is skipped.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import IO, Any

from ..quantities import QUANTITIES
from ..units import fit_width, si

__all__ = ["Proof", "si", "pretty", "run_script", "CheckFailed"]


class CheckFailed(AssertionError):
    """Raised by :meth:`Proof.require` when a step that later steps depend on fails."""


#: Short names for printing (the symbols keep the fast paths' keyword names): name -> (short, meaning [unit]),
#: read from the table of quantities.
SHORT: dict[str, tuple[str, str]] = {
    q.name: (q.symbol, q.meaning if q.unit == "1" else f"{q.meaning} [{q.unit}]") for q in QUANTITIES.values()
}


def _shorten(expr: Any) -> Any:
    import sympy as sp

    mapping = {sym: sp.Symbol(SHORT[sym.name][0], **sym.assumptions0)
               for sym in expr.atoms(sp.Symbol) if sym.name in SHORT}
    return expr.xreplace(mapping)


def pretty(expr: Any, columns: int = 93) -> str:
    """A SymPy expression in SymPy's ASCII pretty form (multi-line, short symbol names), else ``str``; a form
    wider than ``columns`` is cut into pieces of at most that width by SymPy (``wrap_line``), each piece
    printed under the one before (the default leaves room for the 7-column indent of a derivation)."""
    import sympy as sp

    if isinstance(expr, Fraction):
        expr = sp.Rational(expr.numerator, expr.denominator)
    if isinstance(expr, sp.Basic):
        return sp.pretty(_shorten(expr), use_unicode=False, wrap_line=True, num_columns=columns)
    return str(expr)


def _is_zero(difference: Any) -> bool:
    import sympy as sp

    if isinstance(difference, (int, Fraction)):
        return difference == 0
    simplified = sp.simplify(difference)
    return bool(simplified == 0)


def _sympify(value: Any) -> Any:
    import sympy as sp

    if isinstance(value, Fraction):
        return sp.Rational(value.numerator, value.denominator)
    return sp.sympify(value)


class Proof:
    """One derivation: sections, shown expressions, exact checks, and a one-line summary.

    Parameters
    ----------
    name : str
        The proof's module name (``"p01_one_request"``).
    stream : text stream or None
        Where the derivation is printed (None: ``sys.stdout``).

    Attributes
    ----------
    checks : int
        Checks made so far.
    failures : list of str
        Labels of the checks that failed.
    summary : str
        The one-line verdict text set by :meth:`conclude`.
    """

    def __init__(self, name: str, *, stream: IO[str] | None = None) -> None:
        self.name = name
        self.stream = stream if stream is not None else sys.stdout
        self.checks = 0
        self.failures: list[str] = []
        self.summary = ""
        self._section = 0

    # ------------------------------------------------------------------ printing
    def _print(self, text: str = "") -> None:
        print(text, file=self.stream)

    def title(self, text: str) -> None:
        """Print the proof's title and the claim, wrapped."""
        self._print(text)
        self._print("=" * min(len(text), 88))

    def section(self, heading: str) -> None:
        """Start a numbered step of the derivation."""
        self._section += 1
        self._print()
        self._print(f"{self._section}. {heading}")

    def say(self, text: str) -> None:
        """A sentence of explanation (wrapped, indented)."""
        for line in textwrap.wrap(text, width=88, initial_indent="   ", subsequent_indent="   "):
            self._print(line)

    def legend(self, *names: str) -> None:
        """Print what the short symbol names of ``names`` stand for."""
        parts = [f"{SHORT[n][0]} = {SHORT[n][1]}" for n in names]
        self.say("where " + "; ".join(parts) + ".")

    def show(self, label: str, expr: Any, value: str | None = None) -> None:
        """Print ``label = expr`` (SymPy pretty form) and, if given, its value for the scenario."""
        body = pretty(expr)
        lines = body.splitlines() or [""]
        if len(lines) == 1:
            self._print(fit_width(f"   {label} = {lines[0]}" + (f"   ({value})" if value else "")))
            return
        self._print(f"   {label} =")
        for line in lines:
            self._print("       " + line)
        if value:
            self._print(fit_width(f"       = {value}"))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Print a plain-text table (right-aligned columns)."""
        cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
        for n, row in enumerate(cells):
            self._print("   " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=False)))
            if n == 0:
                self._print("   " + "  ".join("-" * w for w in widths))

    # ------------------------------------------------------------------ checks
    def _record(self, ok: bool, label: str, detail: str = "") -> bool:
        self.checks += 1
        mark = "[ok]  " if ok else "[FAIL]"
        self._print(fit_width(f"   {mark} {label}" + (f": {detail}" if detail else "")))  # 100 columns
        if not ok:
            self.failures.append(label)
        return ok

    def equal(self, label: str, lhs: Any, rhs: Any, *, value: str | None = None) -> bool:
        """Check ``lhs == rhs`` exactly: ``simplify(lhs - rhs) == 0`` for SymPy, ``==`` for numbers.

        Prints the check; ``value`` is the scenario's value in readable units.
        """
        try:
            if isinstance(lhs, (int, Fraction)) and isinstance(rhs, (int, Fraction)):
                ok = lhs == rhs
            else:
                left, right = _sympify(lhs), _sympify(rhs)
                ok = bool(left == right) or _is_zero(left - right)
        except Exception as exc:  # a comparison that cannot be made is a failed check
            return self._record(False, label, f"cannot compare: {exc}")
        return self._record(ok, label, value or "")

    def holds(self, label: str, condition: Any, detail: str = "") -> bool:
        """Check a stated condition (an inequality, a regime); ``detail`` shows the numbers."""
        return self._record(bool(condition), label, detail)

    def within(self, label: str, value: Any, low: Any, high: Any, *, unit: str = "", digits: int = 4) -> bool:
        """Check low <= value <= high: a claim the lesson states as a rounded figure."""
        ok = low <= value <= high
        shown = si(value, unit, digits) if unit else f"{float(value):.{digits}g}"
        bounds = (f"[{si(low, unit, digits)}, {si(high, unit, digits)}]" if unit
                  else f"[{float(low):.{digits}g}, {float(high):.{digits}g}]")
        return self._record(ok, label, f"{shown} in {bounds}")

    def require(self, label: str, condition: Any, detail: str = "") -> None:
        """Like :meth:`holds`, but stop the proof (later steps depend on it) when it fails."""
        if not self.holds(label, condition, detail):
            raise CheckFailed(label)

    def conclude(self, summary: str) -> None:
        """Set the one-line summary printed by ``roofline prove`` and at the end of the script."""
        self.summary = summary

    @property
    def ok(self) -> bool:
        """True when at least one check was made and none failed."""
        return self.checks > 0 and not self.failures


def run_script(name: str, derive: Callable[[Proof], None], argv: Sequence[str] | None = None) -> int:
    """Run a proof as a script: print the derivation and the verdict; 0 if every check passed, else 1."""
    proof = Proof(name)
    try:
        derive(proof)
    except CheckFailed:
        pass
    status = "PASS" if proof.ok else "FAIL"
    print()
    print(fit_width(f"{status} {name}: {proof.summary or '(no summary)'} [{proof.checks} checks, "
                    f"{len(proof.failures)} failed]"))
    return 0 if proof.ok else 1
