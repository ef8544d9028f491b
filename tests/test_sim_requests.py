"""Requests and the trace loaders: exact arrival times, every bad row named by file, line and field."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import pytest

from roofline.errors import InvalidValueError, TraceError
from roofline.sim import Request, check_requests, load_trace, parse_trace

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_azure_conversation_trace_loads_every_row_exactly(shared_dir: Path) -> None:
    """The Azure conversation trace loads all 19,366 data rows, in order, with exact arrival seconds."""
    reqs = load_trace(shared_dir / "traces" / "azure_llm_2023_conv.csv")
    # 19,367 lines: the header and 19,366 rows; the last row has no newline, so `wc -l` says 19,366
    # and ../shared/traces/README.md's "19,365 requests" is one short.
    assert len(reqs) == 19_366
    assert reqs[0] == Request(id=0, arrival_s=Fraction(0), prompt_tokens=374, output_tokens=44)
    assert reqs[1].arrival_s == Fraction(43_145_790, 10**7) and reqs[1].prompt_tokens == 396
    assert reqs[-1].id == 19_365 and (reqs[-1].prompt_tokens, reqs[-1].output_tokens) == (197, 183)
    assert reqs[-1].arrival_s == Fraction("3501.7219370")  # 19:14:08.4025270 - 18:15:46.6805900
    assert all(a.arrival_s <= b.arrival_s for a, b in pairwise(reqs))
    assert sum(r.output_tokens for r in reqs) == 4_088_665


def test_azure_code_trace_loads_every_row(shared_dir: Path) -> None:
    """The Azure code trace loads its 8,819 data rows."""
    reqs = load_trace(shared_dir / "traces" / "azure_llm_2023_code.csv")
    assert len(reqs) == 8_819 and reqs[0].prompt_tokens == 4808 and reqs[-1].output_tokens == 173


def test_plain_csv_and_jsonl_read_decimal_seconds_exactly(tmp_path: Path) -> None:
    """Plain CSV and JSONL arrival seconds such as 0.1 are read exactly (1/10, not the float 0.1)."""
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,20,1\n0.1,3,2\n2.5e1,4,4\n")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n'
                     '{"arrival_s": 0.1, "prompt_tokens": 20, "output_tokens": 1}\n'
                     '{"arrival_s": 0.1, "prompt_tokens": 3, "output_tokens": 2}\n'
                     '{"arrival_s": 25, "prompt_tokens": 4, "output_tokens": 4}\n\n')
    expected = [Request(id=0, arrival_s=Fraction(0), prompt_tokens=10, output_tokens=5),
                Request(id=1, arrival_s=Fraction(1, 10), prompt_tokens=20, output_tokens=1),
                Request(id=2, arrival_s=Fraction(1, 10), prompt_tokens=3, output_tokens=2),
                Request(id=3, arrival_s=Fraction(25), prompt_tokens=4, output_tokens=4)]
    assert load_trace(csv_file) == expected
    assert load_trace(jsonl) == expected
    assert load_trace(csv_file, format="csv") == expected


BAD = [
    # (format, text, line, field, words in the message)
    ("azure", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n", 1, "GeneratedTokens", "missing"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47.0,396\n", 3, "GeneratedTokens",
     "missing"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:46.68,-5,44\n", 2, "ContextTokens", "integer"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:46.68,12.5,44\n", 2, "ContextTokens", "integer"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:46.68,12,0\n", 2, "GeneratedTokens", ">= 1"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:46.68,12,\n", 2, "GeneratedTokens", "integer"),
    ("azure", AZURE_HEADER + "yesterday,12,3\n", 2, "TIMESTAMP", "YYYY-MM-DD"),
    ("azure", AZURE_HEADER + "2023-02-30 18:15:46.68,12,3\n", 2, "TIMESTAMP", "YYYY-MM-DD"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:47,12,3\n2023-11-16 18:15:46.9,1,1\n", 3, "TIMESTAMP", "out of order"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:47,12,3\n\n2023-11-16 18:15:48,1,1\n", 3, "TIMESTAMP", "blank line"),
    ("azure", AZURE_HEADER + "2023-11-16 18:15:47,12,3,9\n", 2, "row", "4 columns"),
    ("csv", "arrival_s,prompt_tokens,output_tokens\n1.5,2,3\n1.25,2,3\n", 3, "arrival_s", "out of order"),
    ("csv", "arrival_s,prompt_tokens,output_tokens\nnan,2,3\n", 2, "arrival_s", "number of seconds"),
    ("csv", "arrival_s,prompt_tokens,output_tokens\n-1,2,3\n", 2, "arrival_s", ">= 0"),
    ("csv", "arrival_s,prompt,output_tokens\n0,2,3\n", 1, "prompt_tokens", "missing"),
    ("jsonl", '{"arrival_s": 0, "prompt_tokens": 2}\n', 1, "output_tokens", "missing"),
    ("jsonl", '{"arrival_s": 0, "prompt_tokens": 2, "output_tokens": 3}\n[1, 2]\n', 2, "row", "JSON object"),
    ("jsonl", '{"arrival_s": NaN, "prompt_tokens": 2, "output_tokens": 3}\n', 1, "row", "not valid JSON"),
    ("jsonl", '{"arrival_s": 0, "prompt_tokens": 2.0, "output_tokens": 3}\n', 1, "prompt_tokens", "integer"),
    ("jsonl", '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 3}\n', 1, "prompt_tokens", "integer"),
    ("jsonl", '{"arrival_s": "x", "prompt_tokens": 2, "output_tokens": 3}\n', 1, "arrival_s", "seconds"),
]


@pytest.mark.parametrize(("fmt", "text", "line", "field", "words"), BAD)
def test_bad_rows_name_file_line_and_field(
    tmp_path: Path, fmt: str, text: str, line: int, field: str, words: str
) -> None:
    """A bad header or row raises TraceError naming the file, the line and the field; nothing is skipped."""
    path = tmp_path / ("bad.jsonl" if fmt == "jsonl" else "bad.csv")
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    e = err.value
    assert (e.path, e.line, e.field) == (str(path), line, field)
    assert str(e).startswith(f"{path}:{line}: field {field!r}: ") and words in str(e)
    assert isinstance(e, ValueError)


def test_unreadable_file_is_a_trace_error(tmp_path: Path) -> None:
    """A missing file raises TraceError naming it."""
    with pytest.raises(TraceError, match="nope.csv.*cannot read"):
        load_trace(tmp_path / "nope.csv")


def test_equal_timestamps_keep_file_order() -> None:
    """Rows with the same timestamp keep their file order (first come first served); ids follow the file."""
    text = AZURE_HEADER + "2023-11-16 18:15:47,5,1\n2023-11-16 18:15:47,4,1\n2023-11-16 18:15:47,3,1\n"
    assert [(r.id, r.prompt_tokens) for r in parse_trace(text)] == [(0, 5), (1, 4), (2, 3)]


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(id=-1, arrival_s=0, prompt_tokens=1, output_tokens=1), "id"),
    (dict(id=0, arrival_s=-1, prompt_tokens=1, output_tokens=1), "arrival_s"),
    (dict(id=0, arrival_s=float("inf"), prompt_tokens=1, output_tokens=1), "arrival_s"),
    (dict(id=0, arrival_s="0", prompt_tokens=1, output_tokens=1), "arrival_s"),
    (dict(id=0, arrival_s=0, prompt_tokens=0, output_tokens=1), "prompt_tokens"),
    (dict(id=0, arrival_s=0, prompt_tokens=1.0, output_tokens=1), "prompt_tokens"),
    (dict(id=0, arrival_s=0, prompt_tokens=1, output_tokens=True), "output_tokens"),
])
def test_request_fields_are_validated(kwargs: dict, field: str) -> None:
    """A Request with a field out of range raises InvalidValueError naming that field."""
    with pytest.raises(InvalidValueError) as err:
        Request(**kwargs)
    assert err.value.field == field


def test_workloads_must_be_in_arrival_order_with_unique_ids() -> None:
    """check_requests refuses requests out of arrival order or with a repeated id, and reorders nothing."""
    a = Request(id=0, arrival_s=1, prompt_tokens=1, output_tokens=1)
    b = Request(id=1, arrival_s=0, prompt_tokens=1, output_tokens=1)
    with pytest.raises(InvalidValueError, match=r"requests\[1\]\.arrival_s=0"):
        check_requests([a, b])
    with pytest.raises(InvalidValueError, match=r"requests\[1\]\.id=0: repeated"):
        check_requests([a, Request(id=0, arrival_s=2, prompt_tokens=1, output_tokens=1)])
    with pytest.raises(InvalidValueError, match=r"requests\[0\]"):
        check_requests([(0, 1, 1)])
    assert check_requests([b, a]) == (b, a)
