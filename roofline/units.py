"""Units and how numbers are printed: the scaled units at the edges, and one formatter each
for times, sizes and shares.

Inside the library every quantity is in SI base units (bytes, seconds, FLOP, FLOP/s,
bytes/s, tokens; ``docs/conventions.md``, "Units"). Scaled units appear only where
numbers are parsed or printed: GB = 1e9 bytes and GiB = 2**30 bytes, never mixed.

Examples
--------
>>> GB, GiB, TB
(1000000000, 1073741824, 1000000000000)
>>> format_time(0.0047941, decimals=(3, 3, 2)), format_time(1.5e-5)
('4.794 ms', '15.00 us')
>>> format_share(0.40), si(16_060_522_496, "B")
('40.0%', '16.06 GB')
"""

from __future__ import annotations

import math
import textwrap
from fractions import Fraction
from typing import Any

from .errors import InvalidValueError

__all__ = ["KiB", "MiB", "GiB", "GB", "TB", "TFLOP", "format_time", "format_share", "si", "WIDTH", "fit_width"]

KiB = 2**10
MiB = 2**20
GiB = 2**30
GB = 10**9
TB = 10**12
TFLOP = 10**12

_TIME_UNITS = (("s", 1), ("ms", Fraction(1, 10**3)), ("us", Fraction(1, 10**6)))


def format_time(
    seconds: Any, *, decimals: tuple[int, int, int] = (3, 3, 2), whole_from: float | None = None,
    unit: str | None = None, none: str = "n/a",
) -> str:
    """A time [s] as text in s, ms or us with a fixed number of decimals per unit.

    Parameters
    ----------
    seconds : real number [s] or None
    decimals : (int, int, int)
        Decimals printed in s, ms and us.
    whole_from : float [s], optional
        At or above this, whole seconds with thousands separators (``"20,070 s"``).
    unit : {"s", "ms", "us"}, optional
        Always this unit (default: the largest unit in which the value is at least 1).
    none : str
        Printed for ``None``.

    Returns
    -------
    str
    """
    if seconds is None:
        return none
    x = float(seconds)
    if whole_from is not None and x >= whole_from and unit is None:
        return f"{x:,.0f} s"
    for index, (name, scale) in enumerate(_TIME_UNITS):
        if name == unit or (unit is None and (x >= float(scale) or name == "us")):
            return f"{x / float(scale):.{decimals[index]}f} {name}"
    raise ValueError(f"unit={unit!r}: expected s, ms or us")


def format_share(value: Any, *, decimals: int = 1, signed: bool = False, none: str = "n/a") -> str:
    """A share or relative error (0.4 is 40 %) as a percentage: ``"40.0%"``, ``"+32.9%"`` when ``signed``."""
    if value is None:
        return none
    return f"{float(value):{'+' if signed else ''}.{decimals}%}"


_PREFIXES = [(10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"), (1, ""), (Fraction(1, 10**3), "m"),
             (Fraction(1, 10**6), "u"), (Fraction(1, 10**9), "n")]


def si(value: Any, unit: str, digits: int = 4) -> str:
    """``value`` [unit] with an SI prefix and ``digits`` significant digits: ``si(0.004794, "s") == "4.794 ms"``.

    Parameters
    ----------
    value : real number (int, Fraction, float, SymPy number)
    unit : str, appended after the prefix
    digits : int >= 1, significant digits

    Returns
    -------
    str

    Examples
    --------
    >>> si(Fraction(16_060_522_496, 3_350_000_000_000), "s")
    '4.794 ms'
    >>> si(16_060_522_496, "B")
    '16.06 GB'
    """
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return f"{x:g} {unit}"
    scale, prefix = _PREFIXES[-1]
    for scale, prefix in _PREFIXES:  # noqa: B007 - the first prefix that fits is kept
        if abs(x) >= float(scale):
            break
    scaled = x / float(scale)
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(scaled)))))
    return f"{scaled:.{decimals}f} {prefix}{unit}"


def approx(value: Any, digits: int = 6) -> str:
    """``value`` to ``digits`` significant digits as ``%g`` writes it, also outside a float's range (an exact int
    or Fraction of any size: ``approx(Fraction(10**400, 3)) == '3.33333e+399'``, ``approx(Fraction(1, 10**400))
    == '1e-400'``), for a message that shows a number it refuses. ``value``: a real number; ``digits`` >= 1.
    Raises nothing for those.

    >>> approx(Fraction(1, 3)), approx(10**400), approx(-(10**309) * 7, 3), approx(Fraction(2, 10**330))
    ('0.333333', '1e+400', '-7e+309', '2e-330')
    """
    try:
        f = float(value)
    except OverflowError:  # beyond a float
        f = math.inf
    if math.isfinite(f) and (f != 0 or value == 0):
        return f"{f:.{digits}g}"
    x = Fraction(value)  # the exponent from the logarithms (exact ints of any size), the mantissa from the quotient
    sign, x = ("-" if x < 0 else ""), abs(x)
    e = math.floor(math.log10(x.numerator) - math.log10(x.denominator))
    m = float(x / Fraction(10) ** e)
    while m >= 10:
        m, e = m / 10, e + 1
    while m < 1:
        m, e = m * 10, e - 1
    text = f"{m:.{digits}g}"
    if float(text) >= 10:  # 9.9999999 rounded up to 10
        text, e = f"{m / 10:.{digits}g}", e + 1
    return f"{sign}{text}e{e:+d}"


#: Columns of a terminal the commands' default text keeps within.
WIDTH = 100


def fit_width(text: str, width: int = WIDTH) -> str:
    """``text`` with every line longer than ``width`` columns wrapped at spaces (:mod:`textwrap`).

    A wrapped line's continuations are indented 4 columns more than the line itself; words are never
    broken (a URL longer than the width stays whole), and a line within the width is left as it is
    (the spaces that align its columns included).

    Parameters
    ----------
    text : str, lines separated by newlines
    width : int >= 20 [columns], default :data:`WIDTH`

    Returns
    -------
    str

    Raises
    ------
    InvalidValueError
        A width that is not an integer >= 20 (nothing readable fits in less), field ``width``.

    Examples
    --------
    >>> print(fit_width("  a line " + "word " * 8, width=24))
      a line word word word
          word word word
          word word
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < 20:
        raise InvalidValueError("width", width, "expected an integer >= 20")
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(line, width, initial_indent="", subsequent_indent=indent + "    ",
                             break_long_words=False, break_on_hyphens=False, drop_whitespace=True) or [line]
    return "\n".join(out)
