"""Reading the user's text files (config.json, traces, calibration files) safely.

One rule for every file a user names: it must be a regular file (not a directory, a
device such as /dev/zero, or a pipe, which could hang a read), no larger than a limit,
and UTF-8 text (a byte-order mark is accepted). A gzip file (``.gz``, for callers that
accept one) obeys the same limit on its decompressed size, inflated no further than it, so a
small file that inflates without end (a gzip bomb) is refused, not decompressed. Callers
turn :class:`FileReadError` into their own error naming the file (ConfigError, TraceError,
MeasurementFileError).

One rule for every JSON document (:func:`parse_json`): strict JSON only. ``NaN`` and
``Infinity`` are refused, an object with the same key twice is refused (the second value
would silently win), and nesting deeper than :data:`MAX_JSON_DEPTH` is refused instead of
overflowing Python's stack.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import FileReadError

__all__ = ["FileReadError", "read_text_file", "parse_json", "MAX_BYTES", "MAX_JSON_DEPTH"]

#: Largest file read [bytes]: far above any config.json or the Azure traces (2 MB).
MAX_BYTES = 1 << 30

#: Deepest nesting of arrays and objects accepted in a JSON document (a config.json nests 3 deep).
MAX_JSON_DEPTH = 64


def read_text_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES, gzip_ok: bool = False) -> str:
    """The text of a regular UTF-8 file of at most ``max_bytes`` bytes.

    Parameters
    ----------
    path : str or path-like
    max_bytes : int [bytes]
        Largest file accepted; for a gzip file, the largest decompressed size too.
    gzip_ok : bool
        Read a file whose name ends in ``.gz`` as gzip-compressed text.

    Raises
    ------
    FileReadError
        Missing, not a regular file, too large (compressed or decompressed), unreadable,
        not valid gzip (for ``.gz``), or not UTF-8.
    """
    p = Path(path)
    try:
        if not p.exists():
            raise FileReadError(str(p), "cannot read: no such file")
        if not p.is_file():
            raise FileReadError(str(p), "cannot read: not a regular file")
        size = p.stat().st_size
        if size > max_bytes:
            raise FileReadError(str(p), f"cannot read: {size:,} bytes is more than the {max_bytes:,} allowed")
        if gzip_ok and p.name.endswith(".gz"):
            data = _read_gzip(p, max_bytes)
        else:
            data = p.read_bytes()
        return data.decode("utf-8-sig")
    except OSError as exc:
        raise FileReadError(str(p), f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FileReadError(str(p), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_gzip(p: Path, max_bytes: int) -> bytes:
    """The decompressed bytes of a gzip file, refused once they pass ``max_bytes`` (never inflated further)."""
    try:
        with gzip.open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise FileReadError(str(p), f"not a valid gzip file ({exc or type(exc).__name__})") from None
    if len(data) > max_bytes:
        raise FileReadError(str(p), f"cannot read: decompresses to more than the {max_bytes:,} bytes allowed")
    return data


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not allowed")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r} in one object")
        obj[key] = value
    return obj


def _depth(text: str) -> int:
    """Deepest bracket nesting outside strings (a cheap scan run before the parser recurses)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json(text: str, *, parse_float: Callable[[str], Any] | None = None) -> Any:
    """Parse strict JSON: no NaN/Infinity, no duplicate keys, at most :data:`MAX_JSON_DEPTH` deep.

    Parameters
    ----------
    text : str
        The document.
    parse_float : callable, optional
        Passed to :func:`json.loads` (``fractions.Fraction`` keeps decimals exact).

    Returns
    -------
    The parsed document (any JSON value).

    Raises
    ------
    ValueError
        With a one-line reason; callers wrap it in the error naming their file.

    Examples
    --------
    >>> parse_json('{"a": 1}')
    {'a': 1}
    >>> parse_json('{"a": 1, "a": 2}')
    Traceback (most recent call last):
    ...
    ValueError: duplicate key 'a' in one object
    """
    if _depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text, parse_float=parse_float, parse_constant=_reject_constant,
                          object_pairs_hook=_unique_keys)
    except RecursionError:  # pragma: no cover - the depth scan comes first
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
