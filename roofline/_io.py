"""Reading the user's text files (config.json, traces, calibration files) safely.

One rule for every file a user names: it must be a regular file (not a directory, a
device such as /dev/zero, or a pipe, which could hang a read), no larger than a limit,
and UTF-8 text (a byte-order mark is accepted). A gzip file (``.gz``, for callers that
accept one) obeys the same limit on its decompressed size, inflated no further than it, so a
small file that inflates without end (a gzip bomb) is refused, not decompressed. Callers
turn :class:`FileReadError` into their own error naming the file (ConfigError, TraceError, MeasurementFileError).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from .errors import RooflineError

__all__ = ["FileReadError", "read_text_file"]

#: Largest file read [bytes]: far above any config.json or the Azure traces (2 MB).
MAX_BYTES = 1 << 30


class FileReadError(RooflineError):
    """A user-named file cannot be read as text; ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


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
