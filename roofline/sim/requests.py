"""Requests and the trace loaders (Azure LLM inference trace, plain CSV, JSONL).

A :class:`Request` is what a client sends: when it arrives, how many prompt tokens
it carries and how many output tokens it will produce. Traces are read exactly:
arrival times become ``fractions.Fraction`` seconds (no float rounding), token counts
must be integers, and every bad row raises :class:`roofline.errors.TraceError`
naming the file, the line and the field. Nothing is skipped or reordered.

Formats (chosen from the header line, or ``format=``):

* Azure (``TIMESTAMP,ContextTokens,GeneratedTokens``, as in the Azure Public Dataset's
  ``AzureLLMInferenceTrace_conv.csv``): the timestamp ``YYYY-MM-DD HH:MM:SS[.fffffff]``
  becomes seconds since the first row's timestamp, so the first request arrives at 0.
* plain CSV (``arrival_s,prompt_tokens,output_tokens``): arrival in seconds, a decimal
  number such as ``0.125`` (read exactly).
* JSONL (``.jsonl`` or ``.ndjson``): one object per line with the keys
  ``arrival_s``, ``prompt_tokens``, ``output_tokens`` (numbers read exactly).
* Mooncake JSONL (``format="mooncake"``, or a JSONL whose first row has ``input_length``):
  ``timestamp`` [ms], ``input_length``, ``output_length`` and ``hash_ids``, the ids of the
  prompt's 512-token blocks (one per block, the last one partial), which become
  :attr:`Request.block_hashes` with ``hash_block_size=512``.

Any of them may be gzip-compressed (``.csv.gz``, ``.jsonl.gz``): :func:`load_trace`
decompresses it with the same checks (the size limit applies to the decompressed text).

Shipped traces: the two Azure LLM inference traces of 2023 (Azure Public Dataset,
github.com/Azure/AzurePublicDataset; CC-BY 4.0; Patel et al., "Splitwise: Efficient
generative LLM inference using phase splitting", ISCA 2024) are package data,
``roofline/data/traces/``: :func:`shipped_trace` gives their paths by name
(:data:`SHIPPED_TRACES`), and ``roofline/data/traces/NOTICE`` gives the license,
source and citation. The two Mooncake traces (kvcache-ai/Mooncake, ``FAST25-release/traces``;
Apache-2.0; Qin et al., "Mooncake: Trading More Storage for Less Computation -- A
KVCache-centric Architecture for Serving LLM Chatbot", FAST 2025), the conversation trace
(12,031 requests) and the synthetic one (3,993), are shipped beside them
(``mooncake-conv``, ``mooncake-synthetic``).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import os
import re
from collections.abc import Iterable, Iterator
from fractions import Fraction
from importlib import resources
from numbers import Real
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from .._io import MAX_NUMBER_CHARS, exact_decimal, parse_json, read_text_file
from ..errors import FileReadError, InvalidValueError, TraceError
from ..formulas import lifetime_kv_slots

__all__ = ["Request", "load_trace", "parse_trace", "check_requests", "scale_rate", "shipped_trace", "TRACE_FORMATS",
           "SHIPPED_TRACES", "MAX_TOKENS", "MAX_ARRIVAL_S", "MOONCAKE_BLOCK_TOKENS"]

#: Most tokens a request may carry in its prompt or its output [tokens]: 10^15, a million times
#: any model's context, and small enough that every count converts to a float exactly.
MAX_TOKENS = 10**15

#: Latest arrival time a request may have [s]: 10^15 s (31.7 million years), so that every time
#: the scheduler derives from it stays a finite float when printed or summed.
MAX_ARRIVAL_S = 10**15

#: The formats :func:`load_trace` reads, and the columns each needs.
TRACE_FORMATS: dict[str, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "csv": ("arrival_s", "prompt_tokens", "output_tokens"),
    "jsonl": ("arrival_s", "prompt_tokens", "output_tokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
}

#: Tokens per block of a Mooncake trace's ``hash_ids`` (its README: "each block is 512 tokens").
MOONCAKE_BLOCK_TOKENS = 512

#: The traces shipped as package data (``roofline/data/traces/``), by name: the Azure LLM
#: inference traces of 2023, conversation (19,366 requests) and code (8,819 requests).
SHIPPED_TRACES: dict[str, str] = {
    "conv": "azure_llm_2023_conv.csv.gz",
    "code": "azure_llm_2023_code.csv.gz",
    "mooncake-conv": "mooncake_conversation_trace.jsonl.gz",
    "mooncake-synthetic": "mooncake_synthetic_trace.jsonl.gz",
}


def _arrival(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if type(value) is int and 0 <= value <= MAX_ARRIVAL_S:  # the usual cases, at once
        return
    if type(value) is Fraction and 0 <= value.numerator <= MAX_ARRIVAL_S * value.denominator:
        return
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidValueError(attribute.name, value, "expected a real number of seconds")
    if not isinstance(value, (int, Fraction)) and not math.isfinite(value):
        raise InvalidValueError(attribute.name, value, "must be finite")
    if value < 0:
        raise InvalidValueError(attribute.name, value, "must be >= 0")
    if value > MAX_ARRIVAL_S:  # type: ignore[operator]  # a Real, compared as such
        raise InvalidValueError(attribute.name, value, f"must be <= {MAX_ARRIVAL_S:.0e} s (MAX_ARRIVAL_S)")


def _int_at_least(minimum: int, maximum: int | None = None) -> Any:
    def check(instance: object, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidValueError(attribute.name, value, "expected an integer")
        if value < minimum:
            raise InvalidValueError(attribute.name, value, f"must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise InvalidValueError(attribute.name, value, f"must be <= {maximum:.0e} (MAX_TOKENS)")

    return check


def _hash_tuple(value: Any) -> tuple[Any, ...]:
    """``block_hashes`` as a tuple (a list or any iterable is taken; each id is checked after)."""
    if type(value) is tuple:
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidValueError("block_hashes", value, "expected a sequence of integer block ids")
    return tuple(value)


@attrs.frozen
class Request:
    """One request of a workload (attrs, frozen, validated).

    Parameters
    ----------
    id : int >= 0
        Identifier, unique within a workload (the loaders use the 0-based row index).
    arrival_s : int, Fraction or float [s], finite, in [0, :data:`MAX_ARRIVAL_S`]
        Arrival time. Exact (int or Fraction) values keep the simulation exact.
    prompt_tokens : int in [1, :data:`MAX_TOKENS`] [tokens]
        P, the prompt length.
    output_tokens : int in [1, :data:`MAX_TOKENS`] [tokens]
        O, the tokens the request produces: the first from the prefill step, the other
        O - 1 from decode steps (docs/conventions.md, "One step").

    block_hashes : tuple of int >= 0, default () (keyword only)
        Ids of the prompt's leading blocks of ``hash_block_size`` tokens, in order: two prompts
        hold the same tokens in block j iff their ids agree for blocks 0 .. j (ids are
        taken as chained, as vLLM's and Mooncake's are; a list is taken as given, never checked
        for consistency with other prompts: docs/conventions.md, "Prefix caching"). At most
        ceil(P / hash_block_size) ids (the last block may be partial); () means the prompt shares
        nothing with any other (it can still hit its own blocks after a preemption).
    hash_block_size : int >= 1 or None [tokens/block], default None (keyword only)
        Tokens per block of ``block_hashes`` (512 in the Mooncake traces); required with
        hashes, and may differ from the engine's block size.

    Raises
    ------
    InvalidValueError
        A field of the wrong type or out of range; the message names the field and value
        (too many hashes for the prompt, a hash that is not an integer >= 0, hashes without a
        ``hash_block_size``).

    Examples
    --------
    >>> Request(id=0, arrival_s=0, prompt_tokens=200, output_tokens=50).lifetime_kv_slots
    249
    """

    id: int = attrs.field(validator=_int_at_least(0))
    arrival_s: int | Fraction | float = attrs.field(validator=_arrival)
    prompt_tokens: int = attrs.field(validator=_int_at_least(1, MAX_TOKENS))
    output_tokens: int = attrs.field(validator=_int_at_least(1, MAX_TOKENS))
    block_hashes: tuple[int, ...] = attrs.field(default=(), converter=_hash_tuple, kw_only=True, repr=False)
    hash_block_size: int | None = attrs.field(default=None, kw_only=True, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.hash_block_size is not None:
            _int_at_least(1)(self, attrs.fields(Request).hash_block_size, self.hash_block_size)
        if not self.block_hashes:
            return
        if self.hash_block_size is None:
            raise InvalidValueError("hash_block_size", None, "required with block_hashes (tokens per hashed block)")
        for j, h in enumerate(self.block_hashes):
            if isinstance(h, bool) or not isinstance(h, int) or h < 0:
                raise InvalidValueError(f"block_hashes[{j}]", h, "expected an integer >= 0")
        most = -(-self.prompt_tokens // self.hash_block_size)
        if len(self.block_hashes) > most:
            raise InvalidValueError("block_hashes", f"{len(self.block_hashes)} hashes",
                                    f"a prompt of {self.prompt_tokens} tokens has {most} blocks of "
                                    f"{self.hash_block_size}")

    def _arriving_at(self, arrival_s: int | Fraction) -> Request:
        """This request arriving at ``arrival_s`` instead, without the checks: for an exact arrival [s] the
        caller has checked (an int or Fraction in [0, :data:`MAX_ARRIVAL_S`]); every other field is this one's,
        already checked. ``roofline plan``'s rate search makes a workload's copy at each rate factor with it
        (:func:`attrs.evolve` would check every field of every request again)."""
        new = object.__new__(type(self))
        for name in _FIELDS:
            object.__setattr__(new, name, getattr(self, name))
        object.__setattr__(new, "arrival_s", arrival_s)
        return new

    @property
    def lifetime_kv_slots(self) -> int:
        """KV slots the request writes over its life, P + O - 1 [tokens] (the last token is never fed back)."""
        return int(lifetime_kv_slots.unchecked(prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens))


_FIELDS = tuple(f.name for f in attrs.fields(Request) if f.name != "arrival_s")


class CheckedRequests(tuple):  # type: ignore[type-arg]
    """A workload :func:`check_requests` has passed (a tuple of Requests in arrival order with unique ids; a
    tuple and frozen Requests, so it stays so): given it again, the check returns it at once, so a workload
    served many times (the plan's rate search) is checked once."""

    __slots__ = ()


def check_requests(requests: Iterable[Request]) -> tuple[Request, ...]:
    """Validate a workload for the policies: Requests in arrival order with unique ids.

    Parameters
    ----------
    requests : iterable of Request
        Already in arrival order (ties keep their order: first come first served).

    Returns
    -------
    tuple of Request, the same objects in the same order: a :class:`CheckedRequests`, returned as it is when
    given one (checked already).

    Raises
    ------
    InvalidValueError
        Not an iterable (field ``requests``), an item that is not a Request (field ``requests[i]``),
        an arrival earlier than the one before it (field ``requests[i].arrival_s``), or a repeated
        id (``requests[i].id``).
        Nothing is reordered silently.

    Examples
    --------
    >>> len(check_requests([Request(id=0, arrival_s=0, prompt_tokens=1, output_tokens=1)]))
    1
    """
    if type(requests) is CheckedRequests:
        return requests
    if isinstance(requests, (str, bytes, dict)) or not isinstance(requests, Iterable):
        raise InvalidValueError("requests", requests, "expected an iterable of roofline.sim.Request")
    out = tuple(requests)
    seen: set[int] = set()
    previous: Any = None
    for i, r in enumerate(out):
        if not isinstance(r, Request):
            raise InvalidValueError(f"requests[{i}]", r, "expected a roofline.sim.Request")
        if previous is not None and r.arrival_s < previous:
            raise InvalidValueError(
                f"requests[{i}].arrival_s", r.arrival_s, f"earlier than the request before it ({previous})"
            )
        if r.id in seen:
            raise InvalidValueError(f"requests[{i}].id", r.id, "repeated id")
        seen.add(r.id)
        previous = r.arrival_s
    return CheckedRequests(out)


def scale_rate(requests: Iterable[Request], rate_scale: Any) -> list[Request]:
    """The workload at ``rate_scale`` times its own rate: every arrival [s] divided by it, exactly; ids, lengths
    and prefix hashes unchanged, so the gaps between arrivals shrink by the factor and their pattern (bursts,
    lulls) is kept (docs/conventions.md, "A workload at a scaled rate"). ``roofline plan --rate-scale`` and its
    rate search serve a workload so, and so does ``roofline simulate --rate-scale``.

    Parameters
    ----------
    requests : iterable of Request
        In any order (the order is kept; :func:`check_requests` checks it where a run needs it).
    rate_scale : real, finite, > 0
        x the rate (an int or Fraction exactly; a float as the exact value it holds). 1 gives the same Requests.

    Returns
    -------
    list of Request, in the given order.

    Raises
    ------
    InvalidValueError
        ``rate_scale`` not a finite real > 0 (a bool or a string too), an item that is not a Request (field
        ``requests[i]``), or a factor putting an arrival past :data:`MAX_ARRIVAL_S` (field ``rate_scale``).

    Examples
    --------
    >>> two = [Request(id=0, arrival_s=0, prompt_tokens=8, output_tokens=4),
    ...        Request(id=1, arrival_s=3, prompt_tokens=8, output_tokens=4)]
    >>> [r.arrival_s for r in scale_rate(two, 2)]
    [Fraction(0, 1), Fraction(3, 2)]
    """
    from .._checks import check_positive, check_scalar
    from ..units import approx

    if isinstance(requests, (str, bytes, dict)) or not isinstance(requests, Iterable):
        raise InvalidValueError("requests", requests, "expected an iterable of roofline.sim.Request")
    out = list(requests)
    for i, r in enumerate(out):
        if not isinstance(r, Request):
            raise InvalidValueError(f"requests[{i}]", r, "expected a roofline.sim.Request")
    check_scalar("rate_scale", rate_scale)
    if isinstance(rate_scale, (bool, np.bool_)) or not isinstance(rate_scale, Real):
        raise InvalidValueError("rate_scale", rate_scale, "expected a real number")
    check_positive("rate_scale", rate_scale)
    if rate_scale == 1:
        return out
    # a numpy or other Real as the exact value of its float (np.float32(0.5) is 1/2); int and Fraction as they are
    scale = Fraction(rate_scale) if isinstance(rate_scale, (int, Fraction, float)) else Fraction(float(rate_scale))
    arrivals: list[Fraction] = [r.arrival_s / scale for r in out]  # type: ignore[misc]  # int or Fraction / Fraction: exact
    late = next((i for i, a in enumerate(arrivals) if a > MAX_ARRIVAL_S), None)
    if late is not None:
        raise InvalidValueError("rate_scale", rate_scale, f"puts request {out[late].id}'s arrival at "
                                f"{approx(arrivals[late])} s, past {MAX_ARRIVAL_S:g} s (MAX_ARRIVAL_S): "
                                "give a larger one")
    return [r._arriving_at(a) for r, a in zip(out, arrivals, strict=True)]  # each exact, in [0, MAX_ARRIVAL_S]


# --------------------------------------------------------------------------- loaders

# re.ASCII: numbers in files are ASCII (``\d`` would also match Arabic-Indic digits, which int() reads).
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?", re.ASCII)
_INTEGER = re.compile(r"[+]?\d+(?:\.0*)?", re.ASCII)  # a token count; "100.0" is 100 (a column of floats)


def _timestamp_seconds(text: str) -> Fraction | None:
    """Seconds since 0001-01-01 of an Azure timestamp, exactly; None if unparsable."""
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        days = _dt.date(year, month, day).toordinal()
    except ValueError:
        return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    whole = ((days * 24 + hour) * 60 + minute) * 60 + second
    frac = m.group(7)
    return Fraction(whole) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)


class _JSONNumber(str):
    """A JSONL number with a fraction or exponent, kept as written until its field reads it exactly."""


def _shown(text: Any) -> str:
    """A field's value for an error message, cut short if long (a 200,000-digit field is not echoed whole)."""
    shown = repr(str(text) if isinstance(text, _JSONNumber) else text)
    return shown if len(shown) <= 2 * MAX_NUMBER_CHARS else f"{shown[:MAX_NUMBER_CHARS]}... ({len(shown):,} characters)"


def _tokens(text: Any, *, path: str, line: int, field: str, minimum: int = 1) -> int:
    """A token count: an integer, written as one or as one with a zero fraction (``100.0``, how a dataframe writes
    a column of floats, in CSV and in JSON); ``100.5``, ``1e3`` and anything else are refused by line and field."""
    if isinstance(text, str):
        stripped = text.strip()
        if len(stripped) > MAX_NUMBER_CHARS or not _INTEGER.fullmatch(stripped):
            ascii_note = "" if text.isascii() else " (numbers are written with ASCII digits)"
            raise TraceError(path, line, field, f"expected an integer number of tokens, got {_shown(text)}{ascii_note}")
        value = int(stripped.partition(".")[0])
    elif isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        raise TraceError(path, line, field, f"expected an integer number of tokens, got {_shown(text)}")
    if value < minimum:
        raise TraceError(path, line, field, f"must be >= {minimum}, got {value}")
    if value > MAX_TOKENS:
        raise TraceError(path, line, field, f"must be <= {MAX_TOKENS:.0e} (MAX_TOKENS), got {_shown(value)}")
    return value


def _seconds(text: Any, *, path: str, line: int, field: str) -> Fraction:
    if isinstance(text, str):
        try:
            value = exact_decimal(text)
        except ValueError as exc:
            raise TraceError(path, line, field, f"expected a number of seconds: {exc}, got {_shown(text)}") from None
    elif isinstance(text, int) and not isinstance(text, bool):
        value = Fraction(text)
    else:
        raise TraceError(path, line, field, f"expected a number of seconds, got {_shown(text)}")
    if value < 0:
        raise TraceError(path, line, field, f"must be >= 0, got {_shown(text)}")
    if value > MAX_ARRIVAL_S:
        raise TraceError(path, line, field, f"must be <= {MAX_ARRIVAL_S:.0e} s (MAX_ARRIVAL_S), got {_shown(text)}")
    return value


def _rows_csv(text: str, path: str, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = [h.strip() for h in next(reader, [])]
    except csv.Error as exc:
        raise TraceError(path, reader.line_num or 1, "header", f"not valid CSV: {exc}") from None
    for col in required:
        if col not in header:
            raise TraceError(path, 1, col, f"missing from the header {_shown(','.join(header))}")
    for i, col in enumerate(header):
        if col in header[:i]:
            raise TraceError(path, 1, col, "appears twice in the header (which column is meant is not guessed)")
    trailing_blank = None
    while True:
        try:
            row = next(reader, None)
        except csv.Error as exc:  # e.g. a field over the csv module's size limit (131,072 characters)
            raise TraceError(path, reader.line_num, "row", f"not valid CSV: {exc}") from None
        if row is None:
            break
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            trailing_blank = trailing_blank or line
            continue
        if trailing_blank is not None:
            raise TraceError(path, trailing_blank, header[0], "blank line inside the trace")
        if len(row) < len(header):
            raise TraceError(path, line, header[len(row)], f"missing (the row has {len(row)} of {len(header)} columns)")
        if len(row) > len(header):
            raise TraceError(path, line, "row", f"{len(row)} columns, the header has {len(header)}")
        yield line, dict(zip(header, row, strict=True))


def _parse_rows(
    rows: Iterable[tuple[int, dict[str, Any]]], path: str, fmt: str
) -> list[Request]:
    t_col, p_col, o_col = TRACE_FORMATS[fmt]
    out: list[Request] = []
    origin: Fraction | None = None
    previous: Fraction | None = None
    for line, row in rows:
        for col in (t_col, p_col, o_col):
            if col not in row:
                raise TraceError(path, line, col, "missing")
        raw_t = row[t_col]
        if fmt == "mooncake":
            t = _seconds(raw_t, path=path, line=line, field=t_col) / 1000  # milliseconds
        elif fmt == "azure":
            stamp = _timestamp_seconds(raw_t) if isinstance(raw_t, str) else None
            if stamp is None:
                raise TraceError(path, line, t_col, f"expected YYYY-MM-DD HH:MM:SS[.fffffff], got {_shown(raw_t)}")
            if origin is None:
                origin = stamp
            t = stamp - origin
        else:
            t = _seconds(raw_t, path=path, line=line, field=t_col)
        if previous is not None and t < previous:
            raise TraceError(path, line, t_col, f"{_shown(raw_t)} is earlier than the row before it (out of order)")
        previous = t
        p = _tokens(row[p_col], path=path, line=line, field=p_col)
        o = _tokens(row[o_col], path=path, line=line, field=o_col)
        if fmt == "mooncake":
            out.append(Request(id=len(out), arrival_s=t, prompt_tokens=p, output_tokens=o,
                               block_hashes=_hash_ids(row, p, path=path, line=line),
                               hash_block_size=MOONCAKE_BLOCK_TOKENS))
        else:
            out.append(Request(id=len(out), arrival_s=t, prompt_tokens=p, output_tokens=o))
    return out


def _hash_ids(row: dict[str, Any], prompt_tokens: int, *, path: str, line: int) -> tuple[int, ...]:
    """A Mooncake row's ``hash_ids``: one integer >= 0 per 512-token block of the prompt."""
    ids = row.get("hash_ids")
    if ids is None:
        raise TraceError(path, line, "hash_ids", "missing")
    if not isinstance(ids, list):
        raise TraceError(path, line, "hash_ids", f"expected a list of block ids, got {_shown(ids)}")
    for h in ids:
        if isinstance(h, bool) or not isinstance(h, int) or h < 0:
            raise TraceError(path, line, "hash_ids", f"expected integers >= 0, got {_shown(h)}")
    blocks = -(-prompt_tokens // MOONCAKE_BLOCK_TOKENS)
    if len(ids) != blocks:
        raise TraceError(path, line, "hash_ids", f"{len(ids)} ids for input_length {prompt_tokens}: expected "
                         f"{blocks}, one per {MOONCAKE_BLOCK_TOKENS}-token block")
    return tuple(ids)


def _rows_jsonl(text: str, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    # Lines end at "\n" (and "\r\n"), as JSON Lines says; str.splitlines would also split at
    # U+2028 or U+0085 inside a JSON string.
    lines = [raw.removesuffix("\r") for raw in text.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            raise TraceError(path, n, "row", "blank line inside the trace")
        try:
            obj = parse_json(raw, parse_float=_JSONNumber)
        except ValueError as exc:
            raise TraceError(path, n, "row", f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise TraceError(path, n, "row", f"expected a JSON object, got {type(obj).__name__}")
        yield n, obj



def parse_trace(text: str, *, path: str = "<string>", format: str | None = None) -> list[Request]:
    """Parse a trace held in a string (see :func:`load_trace` for the formats).

    Parameters
    ----------
    text : str
        The file's content.
    path : str
        Name used in error messages.
    format : {"azure", "csv", "jsonl", "mooncake"} or None
        None: JSONL if ``path`` ends in ``.jsonl``/``.ndjson`` or the text starts with
        ``{`` (Mooncake's when its first line has ``"input_length"``); otherwise the CSV
        header decides between Azure and plain CSV.

    Returns
    -------
    list of Request, in file order, ids 0, 1, 2, ...

    Raises
    ------
    TraceError
        A bad header or row; the message names the file, line and field.
    InvalidValueError
        ``text`` or ``path`` not a str, an unknown ``format``.

    Examples
    --------
    >>> rows = "TIMESTAMP,ContextTokens,GeneratedTokens\\n2023-11-16 18:15:46.68,374,44\\n"
    >>> rows += "2023-11-16 18:15:47.0,396,109\\n"
    >>> [str(r.arrival_s) for r in parse_trace(rows)]
    ['0', '8/25']
    """
    if not isinstance(text, str):
        raise InvalidValueError("text", text, "expected the trace's text as a str")
    if not isinstance(path, str):
        raise InvalidValueError("path", path, "expected a str naming the trace in messages")
    if format is not None and not isinstance(format, str):
        raise InvalidValueError("format", format, f"expected one of {', '.join(TRACE_FORMATS)} or None")
    text = text.removeprefix("\ufeff")  # a byte-order mark, as load_trace's reader drops it
    if format is None:
        if path.endswith((".jsonl", ".ndjson")) or text.lstrip().startswith("{"):
            first_row = text.lstrip().split("\n", 1)[0]
            format = "mooncake" if '"input_length"' in first_row else "jsonl"
        else:
            first = text.splitlines()[0] if text.strip() else ""
            format = "azure" if first.split(",")[0].strip() == "TIMESTAMP" else "csv"
    if format not in TRACE_FORMATS:
        raise InvalidValueError("format", format, f"expected one of {', '.join(TRACE_FORMATS)}")
    if format in ("jsonl", "mooncake"):
        return _parse_rows(_rows_jsonl(text, path), path, format)
    return _parse_rows(_rows_csv(text, path, TRACE_FORMATS[format]), path, format)


def load_trace(path: str | os.PathLike[str], *, format: str | None = None) -> list[Request]:
    """Read a request trace from a file: Azure CSV, plain CSV or JSONL, plain or gzip-compressed.

    Parameters
    ----------
    path : str or path-like
        The file; a name ending in ``.gz`` is read as gzip (``.csv.gz``, ``.jsonl.gz``).
        For a shipped trace, pass ``shipped_trace("conv")`` or ``shipped_trace("code")``.
    format : {"azure", "csv", "jsonl", "mooncake"} or None
        None picks the format from the extension (ignoring ``.gz``) and header (see
        :func:`parse_trace`).

    Returns
    -------
    list of Request in file order (ids 0, 1, ...); arrival times exact Fractions [s]
    (Azure: seconds since the first row's timestamp).

    Raises
    ------
    TraceError
        The file cannot be read (missing, not a regular file, over 1 GiB on disk or
        decompressed, not valid gzip, not UTF-8), or a row is bad: a missing column, a token
        count that is negative, zero or not an integer (written as one, or with a zero fraction,
        ``100.0``, as a dataframe writes a column of floats: that is 100; ``1e3`` and ``100.5``
        are refused), an unparsable time, or a time earlier than the row before it. The message
        names the file, line and field.

    Notes
    -----
    Requests are never skipped or reordered; ties in arrival time keep file order
    (first come first served).

    Examples
    --------
    >>> reqs = load_trace(shipped_trace("code"))
    >>> len(reqs), reqs[0].prompt_tokens, reqs[0].output_tokens
    (8819, 4808, 10)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TraceError(repr(path), 0, "path", "expected a file path")
    try:
        text = read_text_file(path, gzip_ok=True)
    except FileReadError as exc:
        raise TraceError(exc.path, 0, "file", exc.reason) from None
    p = Path(path)
    if format is None and p.name.endswith((".jsonl.gz", ".ndjson.gz")):
        first = text.lstrip().split("\n", 1)[0]
        format = "mooncake" if '"input_length"' in first else "jsonl"
    return parse_trace(text, path=str(p), format=format)


def shipped_trace(name: str) -> Path:
    """The path of a trace shipped with the package, for :func:`load_trace`.

    Parameters
    ----------
    name : {"conv", "code", "mooncake-conv", "mooncake-synthetic"}
        ``"mooncake-conv"`` and ``"mooncake-synthetic"``: the Mooncake conversation trace
        (12,031 requests over about an hour, with the prompts' 512-token block ids) and its
        synthetic trace (3,993 requests), from kvcache-ai/Mooncake (Apache-2.0); cite Qin et
        al., FAST 2025 (``roofline/data/traces/NOTICE``).
        ``"conv"``: the Azure LLM inference trace 2023, conversation service (19,366
        requests over one hour); ``"code"``: the coding service (8,819 requests). Source:
        Azure Public Dataset, github.com/Azure/AzurePublicDataset (CC-BY 4.0); cite Patel
        et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA
        2024. The files are the publisher's bytes, gzip-compressed (``roofline/data/traces/NOTICE``).

    Returns
    -------
    pathlib.Path of ``roofline/data/traces/azure_llm_2023_<name>.csv.gz`` (or
    ``mooncake_<conversation|synthetic>_trace.jsonl.gz``).

    Raises
    ------
    InvalidValueError
        An unknown name (field ``name``); the message lists the shipped ones.

    Examples
    --------
    >>> shipped_trace("conv").name
    'azure_llm_2023_conv.csv.gz'
    """
    if not isinstance(name, str) or name not in SHIPPED_TRACES:
        raise InvalidValueError("name", name, f"expected a shipped trace: {', '.join(SHIPPED_TRACES)}")
    return Path(str(resources.files("roofline.data").joinpath("traces", SHIPPED_TRACES[name])))
