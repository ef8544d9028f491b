"""Requests and the trace loaders: exact arrival times, every bad row named by file, line and field."""

from __future__ import annotations

import gzip
import hashlib
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import pytest

from roofline._io import read_text_file
from roofline.errors import FileReadError, InvalidValueError, TraceError
from roofline.sim import SHIPPED_TRACES, Request, check_requests, load_trace, parse_trace, shipped_trace

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


# The publisher's files (github.com/Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_{conv,code}.csv):
# rows after the header, first and last row, and SHA-256 of the bytes (roofline/data/traces/NOTICE).
PUBLISHED = {
    "conv": (19_366, "2023-11-16 18:15:46.6805900,374,44", "2023-11-16 19:14:08.4025270,197,183",
             "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"),
    "code": (8_819, "2023-11-16 18:17:03.9799600,4808,10", "2023-11-16 19:14:19.9280160,549,173",
             "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_trace_decompresses_to_the_publishers_bytes(name: str) -> None:
    """A shipped .csv.gz holds the publisher's bytes: the row count, first and last rows and SHA-256 match."""
    rows, first, last, sha256 = PUBLISHED[name]
    path = shipped_trace(name)
    assert path.name == SHIPPED_TRACES[name] == f"azure_llm_2023_{name}.csv.gz"
    data = gzip.decompress(path.read_bytes())
    lines = data.decode("ascii").split("\r\n")  # CRLF line ends; the last row has none
    assert lines[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    assert (len(lines) - 1, lines[1], lines[-1]) == (rows, first, last)
    assert hashlib.sha256(data).hexdigest() == sha256


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_trace_gzip_header_is_reproducible(name: str) -> None:
    """The shipped gzip header has time 0 and no file name: rebuilding (tools/ship_traces.py) gives the same bytes."""
    head = shipped_trace(name).read_bytes()[:10]
    assert head[:3] == b"\x1f\x8b\x08"  # gzip magic, deflate
    assert head[3] == 0  # FLG: no FNAME, FCOMMENT, FEXTRA
    assert int.from_bytes(head[4:8], "little") == 0  # MTIME


def test_unknown_shipped_trace_is_refused_by_name() -> None:
    """shipped_trace of an unknown name raises InvalidValueError listing the shipped ones."""
    with pytest.raises(InvalidValueError, match=r"name='azure': expected a shipped trace: conv, code"):
        shipped_trace("azure")


def test_azure_conversation_trace_loads_every_row_exactly() -> None:
    """The Azure conversation trace loads all 19,366 data rows, in order, with exact arrival seconds."""
    reqs = load_trace(shipped_trace("conv"))
    # 19,367 lines: the header and 19,366 rows; the last row has no line ending, so `wc -l` says 19,366.
    assert len(reqs) == 19_366
    assert reqs[0] == Request(id=0, arrival_s=Fraction(0), prompt_tokens=374, output_tokens=44)
    assert reqs[1].arrival_s == Fraction(43_145_790, 10**7) and reqs[1].prompt_tokens == 396
    assert reqs[-1].id == 19_365 and (reqs[-1].prompt_tokens, reqs[-1].output_tokens) == (197, 183)
    assert reqs[-1].arrival_s == Fraction("3501.7219370")  # 19:14:08.4025270 - 18:15:46.6805900
    assert all(a.arrival_s <= b.arrival_s for a, b in pairwise(reqs))
    assert sum(r.output_tokens for r in reqs) == 4_088_665


def test_azure_code_trace_loads_every_row() -> None:
    """The Azure code trace loads its 8,819 data rows."""
    reqs = load_trace(shipped_trace("code"))
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
    for plain in (csv_file, jsonl):
        packed = tmp_path / (plain.name + ".gz")
        packed.write_bytes(gzip.compress(plain.read_bytes()))
        assert load_trace(packed) == expected  # .csv.gz and .jsonl.gz: the format from the name without .gz


def test_token_counts_written_as_floats_with_a_zero_fraction_are_their_integers(tmp_path: Path) -> None:
    """A dataframe writes an integer column holding a gap as floats: 100.0 in CSV and in JSON is 100 tokens, and
    20.00 is 20 (a nonzero fraction or an exponent is refused, test_bad_rows_name_file_line_and_field)."""
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("arrival_s,prompt_tokens,output_tokens\n0,100.0,20.00\n1.5,7,3.0\n")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"arrival_s": 0, "prompt_tokens": 100.0, "output_tokens": 20.00}\n'
                     '{"arrival_s": 1.5, "prompt_tokens": 7, "output_tokens": 3.0}\n')
    expected = [Request(id=0, arrival_s=Fraction(0), prompt_tokens=100, output_tokens=20),
                Request(id=1, arrival_s=Fraction(3, 2), prompt_tokens=7, output_tokens=3)]
    for path in (csv_file, jsonl):
        got = load_trace(path)
        assert got == expected and all(type(r.prompt_tokens) is int for r in got), path


def test_gzip_trace_errors_name_the_file(tmp_path: Path) -> None:
    """A .gz trace that is not gzip, is cut short, or holds bad rows is a TraceError naming the file and line."""
    fake = tmp_path / "fake.csv.gz"
    fake.write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n")
    with pytest.raises(TraceError, match=r"fake\.csv\.gz: not a valid gzip file"):
        load_trace(fake)
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(gzip.compress(b"arrival_s,prompt_tokens,output_tokens\n0,1,1\n" * 50)[:-12])
    with pytest.raises(TraceError, match=r"cut\.csv\.gz: not a valid gzip file"):
        load_trace(cut)
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(gzip.compress(b"arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,0,1\n"))
    with pytest.raises(TraceError, match=r"bad\.csv\.gz:3: field 'prompt_tokens': must be >= 1, got 0"):
        load_trace(bad)
    latin = tmp_path / "latin.csv.gz"
    latin.write_bytes(gzip.compress("arrival_s,prompt_tokens,output_tokens\n0,1,1 \xe9\n".encode("latin-1")))
    with pytest.raises(TraceError, match=r"latin\.csv\.gz: not UTF-8"):
        load_trace(latin)


def test_gzip_size_limit_is_on_the_decompressed_text(tmp_path: Path) -> None:
    """A gzip file whose text passes the size limit is refused though the file itself is small (a gzip bomb)."""
    bomb = tmp_path / "bomb.csv.gz"
    bomb.write_bytes(gzip.compress(b"0" * 1_000_000))  # about 1 kB on disk, 10^6 bytes of text
    assert bomb.stat().st_size < 10_000
    with pytest.raises(FileReadError, match=r"decompresses to more than the 100,000 bytes allowed"):
        read_text_file(bomb, max_bytes=100_000, gzip_ok=True)
    assert len(read_text_file(bomb, max_bytes=1_000_000, gzip_ok=True)) == 1_000_000  # exactly at the limit


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
    ("jsonl", '{"arrival_s": 0, "prompt_tokens": 2.5, "output_tokens": 3}\n', 1, "prompt_tokens", "integer"),
    ("jsonl", '{"arrival_s": 0, "prompt_tokens": 2e1, "output_tokens": 3}\n', 1, "prompt_tokens", "integer"),
    ("csv", "arrival_s,prompt_tokens,output_tokens\n0,2,3.01\n", 2, "output_tokens", "integer"),
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


def test_a_trace_that_cannot_be_read_is_named_without_a_line(tmp_path):
    """A missing trace said 'nope.csv:0: field 'file': cannot read: no such file' (line 0, a field 'file'); the file
    is named alone, and the attributes keep line 0 and field 'file' for callers."""
    with pytest.raises(TraceError) as exc:
        load_trace(tmp_path / "nope.csv")
    assert str(exc.value) == f"{tmp_path / 'nope.csv'}: cannot read: no such file"
    assert (exc.value.line, exc.value.field) == (0, "file")


def test_a_request_arriving_elsewhere_is_the_evolved_one() -> None:
    """``Request._arriving_at`` (the rate search's copies) equals :func:`attrs.evolve` with the new arrival, field by
    field, hashes included, and leaves the original as it was."""
    import attrs

    r = Request(id=3, arrival_s=Fraction(7, 2), prompt_tokens=1030, output_tokens=9, block_hashes=(4, 5, 6),
                hash_block_size=512)
    moved = r._arriving_at(Fraction(7, 6))
    assert moved == attrs.evolve(r, arrival_s=Fraction(7, 6)) and moved.block_hashes == (4, 5, 6)
    assert attrs.asdict(moved) == {**attrs.asdict(r), "arrival_s": Fraction(7, 6)}
    assert r.arrival_s == Fraction(7, 2) and moved is not r


def test_a_checked_workload_is_checked_once() -> None:
    """check_requests returns a CheckedRequests (a tuple), and given one returns that very object (the plan's rate
    search serves one workload many times); a list or tuple of the same requests is checked again."""
    from roofline.sim.requests import CheckedRequests

    a = Request(id=0, arrival_s=0, prompt_tokens=1, output_tokens=1)
    b = Request(id=1, arrival_s=1, prompt_tokens=1, output_tokens=1)
    checked = check_requests([a, b])
    assert type(checked) is CheckedRequests and checked == (a, b)
    assert check_requests(checked) is checked
    with pytest.raises(InvalidValueError, match=r"requests\[1\]\.arrival_s=0"):
        check_requests((b, a))
