"""The commands' text as one logical line per line: :func:`roofline.units.fit_width` undone, for tests that
look for a phrase a 100-column wrap may have split."""

from __future__ import annotations

import re

#: A continuation of a wrapped two-space-indented line starts with exactly 6 spaces (2 + 4); a table row
#: with a right-aligned number ("      64 |    4.794 ms ...") has a column bar and is not one.
_CONTINUATION = re.compile(r"\n {6}(?=\S)(?![^\n]*\|)")


def unwrapped(text: str) -> str:
    """``text`` with each wrapped line joined back (its continuation lines appended with one space)."""
    return _CONTINUATION.sub(" ", text)
