"""parse_trace and load_trace under generated CSV and JSONL text: every row read exactly, or the
first bad one refused with a TraceError naming its line and field; never another exception or a hang.

Each generated trace is a list of rows whose cells are good (with the value they must give) or bad
(with the field the error must name); a model of the reader says which error comes first, so the
test checks the value of every accepted row and the line and field of every refusal.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from roofline.errors import InvalidValueError, TraceError
from roofline.sim import Request, load_trace, parse_trace
from roofline.sim.requests import MAX_ARRIVAL_S, MAX_TOKENS

FUZZ = settings(settings.get_profile("fuzz"), deadline=timedelta(seconds=5))
COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
_CSV_FIELD_LIMIT = csv.field_size_limit()

# A cell is (text, value): value is the exact number it must give, or None if the reader must refuse it.
_BAD_TOKENS = st.sampled_from([
    "0", "-1", "\u0661\u0662", "\uff11\uff12", "1.5", "", "abc", "1e3", "12a", "0x10", "+", "1_000",
    str(MAX_TOKENS + 1), "9" * 101, "9" * 5000, "9" * 200_000, "\x00", "1\x00", "nan", "inf", "\u00b2",
])
_BAD_SECONDS = st.sampled_from([
    "-1", "-0.5", "\u0661", "\uff10.5", "1e400", "1e999999999", "1e-999999999", "nan", "inf", "-inf", "",
    "1/3", "0x10", "abc", "1,5", "9" * 101, "9" * 200_000, "1e", ".", str(MAX_ARRIVAL_S + 1), "\u00bd",
])


@st.composite
def _seconds(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A decimal number of seconds as written (plain, padded or with an exponent) and its exact value."""
    scale = draw(st.integers(0, 6))
    units = draw(st.integers(0, 10**9))
    value = Fraction(units, 10**scale)
    whole, part = divmod(units, 10**scale)
    text = f"{whole}.{part:0{scale}d}" if scale else str(whole)
    form = draw(st.sampled_from(["plain", "exponent", "padded", "plus"]))
    if form == "exponent":
        text = f"{units}e-{scale}"
    elif form == "padded":
        text = f" {text} "
    elif form == "plus":
        text = "+" + text
    return text, value


_GOOD_TOKENS = st.integers(1, MAX_TOKENS).map(lambda n: (str(n), n)) | st.integers(1, 10**4).map(
    lambda n: (f" {n} ", n)) | st.integers(1, 10**4).map(lambda n: (f"{n}.0", n))  # a dataframe's float column


@st.composite
def _rows(draw: st.DrawFn) -> list[list[tuple[str, Any]]]:
    """Rows of three cells; arrivals are mostly in order, sometimes not (then refused as out of order)."""
    n = draw(st.integers(0, 6))
    rows = []
    for _ in range(n):
        t = draw(_seconds() | _BAD_SECONDS.map(lambda s: (s, None)))
        p = draw(_GOOD_TOKENS | _BAD_TOKENS.map(lambda s: (s, None)))
        o = draw(_GOOD_TOKENS | _BAD_TOKENS.map(lambda s: (s, None)))
        rows.append([t, p, o])
    if draw(st.booleans()):  # mostly nondecreasing arrivals, so later cells are reached
        good = sorted(Fraction(t[1]) for t, _, _ in rows if t[1] is not None)
        it = iter(good)
        for row in rows:
            if row[0][1] is not None:
                value = next(it)
                row[0] = (_decimal(value), value)  # type: ignore[assignment]
    return rows


def _decimal(value: Fraction) -> str:
    """The decimal text of a Fraction whose denominator is a power of ten."""
    scale = 0
    while (value * 10**scale).denominator != 1:
        scale += 1
    units = int(value * 10**scale)
    whole, part = divmod(units, 10**scale)
    return f"{whole}.{part:0{scale}d}" if scale else str(whole)


def _expected(rows: list[list[tuple[str, Any]]], *, first_line: int, csv_text: bool) -> tuple[int, str] | None:
    """(line, field) of the first refusal the reader must make, or None if every row is good."""
    previous = None
    for k, (t, p, o) in enumerate(rows):
        line = first_line + k
        if csv_text and any(len(text) > _CSV_FIELD_LIMIT for text, _ in (t, p, o)):
            return line, "row"
        if t[1] is None:
            return line, "arrival_s"
        if previous is not None and t[1] < previous:
            return line, "arrival_s"
        previous = t[1]
        for (_, value), col in ((p, "prompt_tokens"), (o, "output_tokens")):
            if value is None:
                return line, col
    return None


def _check(rows: list[list[tuple[str, Any]]], expected: tuple[int, str] | None, parse: Any) -> None:
    try:
        out = parse()
    except TraceError as exc:
        note(f"refused: {exc}")
        message = str(exc)
        assert "\n" not in message and len(message) < 2500, message
        assert expected is not None, f"refused a good trace: {message}"
        assert (exc.line, exc.field) == expected, message
        assert f"field {exc.field!r}" in message
        return
    assert expected is None, f"accepted a trace with a bad cell at {expected}"
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in out] == [
        (t[1], p[1], o[1]) for t, p, o in rows
    ]
    for r in out:
        assert isinstance(r, Request) and math.isfinite(float(r.arrival_s)) and 0 <= r.arrival_s <= MAX_ARRIVAL_S
        assert 1 <= r.prompt_tokens <= MAX_TOKENS and 1 <= r.output_tokens <= MAX_TOKENS


def _csv_cell(text: str) -> str:
    """A cell as CSV writes it: quoted when it holds a comma, a quote or a line break."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


@FUZZ
@given(rows=_rows(), newline=st.sampled_from(["\n", "\r\n", "\r"]), bom=st.booleans(),
       final=st.booleans(), extra=st.sampled_from([(), ("note",), ("note", "z")]))
def test_generated_csv_is_read_exactly_or_refused_at_the_first_bad_cell(
    rows: list[list[tuple[str, Any]]], newline: str, bom: bool, final: bool, extra: tuple[str, ...]
) -> None:
    """A generated CSV trace (any line ending, BOM, extra columns) gives each row's exact values, or the
    TraceError names the first bad cell's line and column (a field past the csv size limit: 'row')."""
    header = ",".join((*COLUMNS, *extra))
    lines = [header] + [",".join([*(_csv_cell(c[0]) for c in row), *("x" for _ in extra)]) for row in rows]
    text = ("\ufeff" if bom else "") + newline.join(lines) + (newline if final else "")
    expected = _expected(rows, first_line=2, csv_text=True)
    _check(rows, expected, lambda: parse_trace(text, path="t.csv"))


def _json_value(text: str, value: Any, draw: st.DrawFn) -> str:
    """A cell as a JSONL value: a good number as a JSON number or a JSON string of its text; a bad one as a string."""
    if value is not None and draw(st.booleans()):
        return str(value) if isinstance(value, int) else _decimal(value)
    return json.dumps(text)


@st.composite
def _jsonl(draw: st.DrawFn) -> tuple[list[list[tuple[str, Any]]], str, tuple[int, str] | None]:
    rows = draw(_rows())
    lines = []
    for row in rows:
        cells = [f"{json.dumps(col)}: {_json_value(text, value, draw)}" for col, (text, value) in zip(COLUMNS, row,
                                                                                                      strict=True)]
        lines.append("{" + ", ".join(cells) + "}")
    expected = _expected(rows, first_line=1, csv_text=False)
    # Row-level faults, each refused as field 'row' (or the missing key) on its line.
    fault = draw(st.sampled_from([None, None, "duplicate", "nested", "huge_int", "huge_float", "not_object",
                                  "missing", "bool", "nan", "blank"]))
    if fault is not None and rows:
        k = draw(st.integers(0, len(rows) - 1))
        line, field = k + 1, "row"
        if fault == "duplicate":
            lines[k] = lines[k][:-1] + ', "prompt_tokens": 1}'
        elif fault == "nested":
            lines[k] = lines[k][:-1] + ', "x": ' + "[" * 70 + "]" * 70 + "}"
        elif fault == "huge_int":
            lines[k] = lines[k][:-1] + ', "x": ' + "9" * 5000 + "}"
        elif fault == "huge_float":
            lines[k] = lines[k][:-1] + ', "x": 1e999999999}'
        elif fault == "not_object":
            lines[k] = "[" + lines[k] + "]"
        elif fault == "nan":
            lines[k] = lines[k][:-1] + ', "x": NaN}'
        elif fault == "blank":
            lines.insert(k, "   ")
            line = k + 1
        elif fault == "missing":
            lines[k] = '{"arrival_s": 0}'
            line, field = k + 1, "prompt_tokens"
        elif fault == "bool":
            lines[k] = '{"arrival_s": true, "prompt_tokens": 1, "output_tokens": 1}'
            line, field = k + 1, "arrival_s"
        if expected is None or expected[0] >= line:
            expected = (line, field)
    return rows, "\n".join(lines), expected


@FUZZ
@given(case=_jsonl(), crlf=st.booleans())
def test_generated_jsonl_is_read_exactly_or_refused_at_the_first_bad_row(case: Any, crlf: bool) -> None:
    """A generated JSONL trace gives each row's exact values, or the TraceError names the first bad line and
    its field ('row' for duplicate keys, nesting, numbers too long or too large, non-objects, blank lines)."""
    rows, text, expected = case
    if crlf:
        text = text.replace("\n", "\r\n")
    try:
        _check(rows, expected, lambda: parse_trace(text, path="t.jsonl"))
    except AssertionError:
        note(text[:2000])
        raise


@FUZZ
@given(rows=_rows(), encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1", "gzip", "gzip-utf-16"]))
def test_load_trace_reads_utf8_files_plain_or_gzip_and_refuses_other_encodings(
    tmp_path_factory: pytest.TempPathFactory, rows: list[list[tuple[str, Any]]], encoding: str
) -> None:
    """load_trace reads UTF-8 (BOM or not, plain or gzip) like parse_trace; UTF-16, and Latin-1 with a
    non-ASCII header ("caf\u00e9"), are refused as not UTF-8 (field 'file', line 0)."""
    rows = [row for row in rows if all(len(c[0]) <= 1000 and c[0].isascii() for c in row)]
    header = ",".join((*COLUMNS, "caf\u00e9")) if encoding == "latin-1" else ",".join(COLUMNS)
    extra = ",x" if encoding == "latin-1" else ""
    text = "\n".join([header] + [",".join(_csv_cell(c[0]) for c in row) + extra for row in rows]) + "\n"
    path = tmp_path_factory.mktemp("trace") / ("t.csv.gz" if encoding.startswith("gzip") else "t.csv")
    data = text.encode({"gzip": "utf-8", "gzip-utf-16": "utf-16"}.get(encoding, encoding))
    path.write_bytes(gzip.compress(data) if encoding.startswith("gzip") else data)
    if encoding in ("utf-16", "gzip-utf-16", "latin-1"):
        with pytest.raises(TraceError) as exc:
            load_trace(path)
        assert (exc.value.line, exc.value.field) == (0, "file") and "not UTF-8" in str(exc.value)
        return
    _check(rows, _expected(rows, first_line=2, csv_text=True), lambda: load_trace(path))


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    ("arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,1,2,3\n", 1, "prompt_tokens", "twice"),
    ("arrival_s,prompt_tokens,output_tokens\n0,\u0661\u0662,2\n", 2, "prompt_tokens", "ASCII"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n\u0662\u0660\u0662\u0663-11-16 18:15:46.68,374,44\n", 2, "TIMESTAMP",
     "YYYY"),
    ("arrival_s,prompt_tokens,output_tokens\n0," + "9" * 200_000 + ",2\n", 2, "row", "field limit"),
    ("arrival_s,prompt_tokens,output_tokens\n1e400,1,2\n", 2, "arrival_s", "MAX_ARRIVAL_S"),
    ("arrival_s,prompt_tokens,output_tokens\n1e999999999,1,2\n", 2, "arrival_s", "exponent"),
    ('{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 2, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n", 1,
     "row", "nested"),
    ('{"arrival_s": 0, "prompt_tokens": "\u0661\u0662", "output_tokens": 2}\n', 1, "prompt_tokens", "ASCII"),
    ('{"arrival_s": 1e400, "prompt_tokens": 1, "output_tokens": 2}\n', 1, "arrival_s", "MAX_ARRIVAL_S"),
])
def test_each_listed_fault_is_one_trace_error_naming_line_and_field(text: str, line: int, field: str,
                                                                    words: str) -> None:
    """The issue's examples: duplicate column, Arabic-Indic digits, a 200,000-digit field, 1e400 and
    1e999999999 arrivals, deep nesting: each one TraceError at the right line and field."""
    with pytest.raises(TraceError) as exc:
        parse_trace(text)
    assert (exc.value.line, exc.value.field) == (line, field)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_a_json_string_holding_a_line_separator_stays_one_row() -> None:
    """JSONL lines end at \\n only: U+2028 or U+0085 inside a JSON string does not split the row."""
    text = '{"arrival_s": 0.5, "prompt_tokens": 3, "output_tokens": 2, "note": "a\u2028b\x85c"}\n'
    [r] = parse_trace(text, path="t.jsonl")
    assert (r.arrival_s, r.prompt_tokens, r.output_tokens) == (Fraction(1, 2), 3, 2)


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(text=None), "text"), (dict(text=b"arrival_s"), "text"), (dict(text="", path=None), "path"),
    (dict(text="", format=1), "format"), (dict(text="", format="xml"), "format"),
])
def test_parse_trace_checks_its_arguments(kwargs: dict[str, Any], field: str) -> None:
    """parse_trace(None), bytes, a non-str path or format: an InvalidValueError naming the argument."""
    with pytest.raises(InvalidValueError) as exc:
        parse_trace(**kwargs)
    assert exc.value.field == field


@pytest.mark.parametrize("path", [None, 5, b"t.csv", ["t.csv"]])
def test_load_trace_checks_its_path(path: Any) -> None:
    """load_trace(None) and other non-paths: a TraceError naming the field 'path'."""
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    assert exc.value.field == "path"


def test_a_bom_in_a_string_is_dropped_as_in_a_file(tmp_path: Path) -> None:
    """parse_trace drops a leading byte-order mark, as load_trace's UTF-8 reader does: the header is found."""
    text = "\ufeffarrival_s,prompt_tokens,output_tokens\r\n0.25,7,3\r\n"
    [r] = parse_trace(text)
    assert (r.arrival_s, r.prompt_tokens, r.output_tokens) == (Fraction(1, 4), 7, 3)


@pytest.mark.parametrize(("text", "words"), [
    ("[1e400]", "too large for a float"),
    ("[1e999999999]", "exponent"),
    ("[" + "9" * 5000 + "]", "an integer of 5,000 digits"),
    ("[0." + "1" * 200 + "]", "longer than the 100 allowed"),
])
def test_strict_json_refuses_numbers_that_overflow_or_take_unbounded_time(text: str, words: str) -> None:
    """parse_json refuses 1e400 as a float (once inf; exact as a Fraction), 1e999999999 (a billion-digit
    Fraction), a 5,000-digit integer (Python's message suggested raising the limit) and a 200-digit float."""
    from fractions import Fraction as F

    from roofline._io import parse_json

    for parse_float in (None, F):
        if parse_float is F and text == "[1e400]":  # read exactly: a Fraction of 401 digits is fine
            assert parse_json(text, parse_float=F) == [F(10**400)]
            continue
        with pytest.raises(ValueError, match=words):
            parse_json(text, parse_float=parse_float)
