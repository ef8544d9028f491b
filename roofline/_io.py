"""Reading the user's text files (config.json, traces, calibration files) safely.

One rule for every file a user names: it must be a regular file (not a directory, a
device such as /dev/zero, or a pipe, which could hang a read), no larger than a limit,
and UTF-8 text (a byte-order mark is accepted). A gzip file (``.gz``, for callers that
accept one) obeys the same limit on its decompressed size, inflated no further than it, so a
small file that inflates without end (a gzip bomb) is refused, not decompressed. Callers
turn :class:`FileReadError` into their own error naming the file (ConfigError, TraceError,
MeasurementFileError).

One rule for every JSON document (:func:`parse_json`): strict JSON only. ``NaN`` and
``Infinity`` are refused, so is a number too large for a float (``1e400``) or too long to
convert in bounded time (:func:`exact_decimal`), an object with the same key twice is refused (the second value
would silently win), and nesting deeper than :data:`MAX_JSON_DEPTH` is refused instead of
overflowing Python's stack.

One rule for every file a command writes (:func:`atomic_write`, :func:`check_outputs`): the
output path is checked before any work starts (an empty path is refused, so is a device, a pipe
or a socket, and an output that is the same file as one the command reads is refused by name),
and the file is written to a temporary file in the same folder, then renamed over the target
(:func:`os.replace`; a symbolic link is written through, its target replaced), so an
interrupted run leaves the old file or the new one, never half of one. A folder of outputs is
locked while they are written (:func:`locked_folder`): a second run writing the same folder is
refused by name instead of mixing its files with the first's.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import re
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import IO, Any

from .errors import FileReadError, InvalidValueError

__all__ = ["FileReadError", "read_text_file", "parse_json", "exact_decimal", "MAX_BYTES", "MAX_JSON_DEPTH",
           "MAX_NUMBER_CHARS", "MAX_EXPONENT", "atomic_write", "check_outputs", "output_path", "same_file",
           "locked_folder", "check_own_csv"]

#: Largest file read [bytes]: far above any config.json or the Azure traces (2 MB).
MAX_BYTES = 1 << 30

#: Longest number accepted in a file or on the command line [characters]: a float's 17 significant
#: digits and an exponent fit many times over; a 200,000-digit field is refused, not converted.
MAX_NUMBER_CHARS = 100

#: Largest decimal exponent accepted (``1e400`` is read; ``1e999999999`` would build a
#: billion-digit integer, so it is refused before it is converted).
MAX_EXPONENT = 1000

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


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``json.loads`` ``object_pairs_hook``: the object, or ValueError naming a key given twice (JSON's own
    rule keeps the last, silently)."""
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


def parse_json(text: str, *, parse_float: Callable[[str], Any] | None = None, allow_nonfinite: bool = False) -> Any:
    """Parse strict JSON: no NaN/Infinity, no duplicate keys, at most :data:`MAX_JSON_DEPTH` deep.

    Parameters
    ----------
    text : str
        The document.
    parse_float : callable, optional
        Passed to :func:`json.loads` (``fractions.Fraction`` keeps decimals exact).
    allow_nonfinite : bool, default False
        Read Python's ``NaN``, ``Infinity`` and ``-Infinity`` as floats instead of refusing
        the document: a Hugging Face ``config.json`` may hold them in a field no reader uses
        (Nemotron-H's ``"time_step_limit": [0.0, Infinity]``); the readers refuse them by
        field where a field is used (docs/conventions.md, "Architectures", reading a config).

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
    convert = parse_float or float

    def number(token: str) -> Any:  # a float token: bounded before it is converted, finite after
        exact_decimal(token)
        value = convert(token)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"number {token} is too large for a float")
        return value

    def integer(token: str) -> int:  # an integer token: at most MAX_NUMBER_CHARS digits
        if len(token) > MAX_NUMBER_CHARS:
            raise ValueError(f"an integer of {len(token):,} digits is longer than the {MAX_NUMBER_CHARS} allowed")
        return int(token)

    try:
        return json.loads(text, parse_float=number, parse_int=integer,
                          parse_constant=float if allow_nonfinite else _reject_constant,
                          object_pairs_hook=unique_keys)
    except RecursionError:  # pragma: no cover - the depth scan comes first
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep") from None


#: A decimal number written with ASCII digits only (``re.ASCII``: ``\\d`` would also match
#: Arabic-Indic or full-width digits, which Python's ``int`` reads as numbers).
DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_EXPONENT = re.compile(r"[eE]([+-]?\d+)\Z", re.ASCII)


def exact_decimal(text: str) -> Fraction:
    """A decimal number written with ASCII digits (``0.125``, ``1e-3``), read exactly as a Fraction.

    Parameters
    ----------
    text : str
        The number as written; surrounding white space is ignored.

    Returns
    -------
    Fraction, exactly the value written.

    Raises
    ------
    ValueError
        With a one-line reason: not a decimal number in ASCII digits, longer than
        :data:`MAX_NUMBER_CHARS` characters, or an exponent beyond +-:data:`MAX_EXPONENT`
        (either would take unbounded time and memory to convert). Callers name the field.

    Examples
    --------
    >>> exact_decimal("0.125"), exact_decimal(" 1e3 ")
    (Fraction(1, 8), Fraction(1000, 1))
    >>> exact_decimal("\u0661\u0662")
    Traceback (most recent call last):
    ...
    ValueError: expected a decimal number written with ASCII digits
    """
    s = text.strip()
    if len(s) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(s):,} characters is longer than the {MAX_NUMBER_CHARS} allowed")
    if not DECIMAL.fullmatch(s):
        raise ValueError("expected a decimal number written with ASCII digits")
    exponent = _EXPONENT.search(s)
    if exponent is not None and abs(int(exponent.group(1))) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent.group(1)} is beyond +-{MAX_EXPONENT}")
    return Fraction(s)


def output_path(option: str, value: str | os.PathLike[str]) -> Path:
    """The path an output option names; an empty one is refused (it is not the current folder).

    Raises
    ------
    InvalidValueError
        ``value`` is empty or only blanks, or names something that is neither a regular file nor a folder (a
        device such as /dev/null, a pipe or a socket: the rename would replace it with a file; field ``option``).
    """
    if not str(value).strip():
        raise InvalidValueError(option, str(value), "is empty; name a file or folder")
    p = Path(value)
    _refuse_special(option, p)
    return p


def _refuse_special(option: str, path: str | os.PathLike[str]) -> None:
    """Refuse an existing output that is neither a regular file nor a folder (field ``option``)."""
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        raise InvalidValueError(option, str(path), "is not a regular file (a device, a pipe or a socket); name a file")


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: :func:`os.path.samefile` where both exist (hard and symbolic
    links included), else the resolved paths are equal."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError, ValueError):  # unresolvable (a link loop): compare the text
        return os.path.abspath(a) == os.path.abspath(b)


def check_outputs(option: str, outputs: Iterable[str | os.PathLike[str]],
                  inputs: Iterable[str | os.PathLike[str] | None]) -> None:
    """Refuse, before any work, an output that would write over a file the command reads.

    Parameters
    ----------
    option : str
        The output option (``--out``), named in the error.
    outputs : paths the command will write
    inputs : paths the command reads (None entries are skipped)

    Raises
    ------
    InvalidValueError
        An output is the same file as an input, or is a device, a pipe or a socket (field ``option``, the
        output path).
    """
    read = [i for i in inputs if i is not None and str(i)]
    for out in outputs:
        _refuse_special(option, out)
        for given in read:
            if same_file(out, given):
                raise InvalidValueError(option, str(out), f"would write over {given}, a file this command reads; "
                                                          "choose another path")


def check_own_csv(option: str, path: str | os.PathLike[str], fields: Iterable[str], what: str) -> None:
    """Refuse, before any work, writing over an existing file that is not a CSV this command writes.

    A file is the command's own when its line 1 is the header it writes (``fields`` joined by commas,
    as :mod:`csv` writes names without commas or quotes); a missing or empty file may be written.

    Parameters
    ----------
    option : str
        The output option (``--out``, ``--csv``), named in the error.
    path : the file the command will write
    fields : the column names of the header the command writes, in order
    what : str
        The file's kind in words, for the message ("a simulate requests CSV").

    Raises
    ------
    InvalidValueError
        ``path`` exists, is not empty and its line 1 differs (field ``option``, value the path), or cannot
        be read.
    """
    p = Path(path)
    if not p.is_file():
        return
    try:
        with open(p, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise InvalidValueError(option, str(path), f"exists and cannot be read: {exc.strerror or exc}") from None
    if head and head.split(b"\n", 1)[0].rstrip(b"\r") != ",".join(fields).encode():
        raise InvalidValueError(option, str(path), f"exists and is not {what} (line 1 differs): give another "
                                "path, or move the file")


def _mode_for(target: Path) -> int:
    """The permission bits of a new file: the old file's where it exists, else 0o666 less the umask."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], *, binary: bool = False,
                 newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on a clean exit rename it over ``path`` (atomic).

    Parameters
    ----------
    path : path of the file to write (its folder must exist)
    binary : bool
        Open in binary mode (default: UTF-8 text).
    newline : str, optional
        As :func:`open` (``""`` for the csv module).

    Yields
    ------
    The open file. If the block raises, the temporary file is removed and ``path`` is untouched. A ``path``
    that is a symbolic link is written through: its target is replaced and the link stays.

    Raises
    ------
    OSError
        The folder cannot be written; callers turn it into their own error naming the option.
    """
    target = Path(path)
    if target.is_symlink():  # write through the link, as a shell's > does: the link stays, its target is replaced
        target = Path(os.path.realpath(target))
    fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.",
                               suffix=".tmp")
    try:
        if binary:
            fh: IO[Any] = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding="utf-8", newline=newline)
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked_folder(option: str, folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on an existing output ``folder`` while a command writes its files into it.

    The lock is :func:`fcntl.flock` on the folder itself (no lock file is left behind), released when
    the block ends or the process dies. Where ``fcntl`` is missing (Windows) the block runs unlocked.

    Parameters
    ----------
    option : str
        The option that named the folder (``--out``), for the error.
    folder : path of an existing folder

    Raises
    ------
    InvalidValueError
        Another process holds the lock: two runs writing one folder would mix their files (field ``option``).
    OSError
        The folder cannot be opened; callers turn it into their own error naming the option.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InvalidValueError(option, os.fspath(folder), "another run is writing into this folder now; wait "
                                    "for it or give another folder (two runs would mix their files)") from None
        yield
    finally:
        os.close(fd)
