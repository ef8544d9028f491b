"""What a simulation returns: per-step records, per-request results and a summary.

All times are in seconds from the workload's time origin (the trace's first request
arrives at 0), exact Fractions or ints under an exact cost model, floats otherwise.
Latency metrics follow docs/conventions.md ("Latency metrics"):

* queue wait = admission - arrival; TTFT = first token - arrival (queueing included);
* E2E = handed back - arrival (for static batching, the end of the batch);
* TPOT = (E2E - TTFT) / (O - 1) for O >= 2, None for O = 1 (vLLM PR #17802).

Percentiles are **interpolated** as ``vllm bench serve`` reports them (``numpy.percentile``'s
default, "linear"): at the rank h = (n - 1) q / 100 between the order statistics floor(h) and
ceil(h), exact on ints and Fractions (the weight is rational). Nearest rank is
``percentile(values, q, method="inverted_cdf")``. docs/conventions.md, "Latency percentiles".

Output is deterministic: the same workload, policy and cost model give the same
results and byte-identical CSV and JSON.
"""

from __future__ import annotations

import csv
import json
import math
import operator
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from fractions import Fraction
from typing import IO, Any, overload

import attrs

from ..errors import InvalidValueError
from .requests import Request

__all__ = [
    "StepRecord",
    "StepTable",
    "RequestResult",
    "RequestTable",
    "Percentiles",
    "Summary",
    "SimResult",
    "Goodput",
    "percentile",
]

PREFILL = "prefill"
DECODE = "decode"
MIXED = "mixed"
_KINDS = (PREFILL, DECODE, MIXED)
_CHECKPOINT = 4096  # exact start time kept every this many steps (random access)


PERCENTILE_METHODS = ("linear", "inverted_cdf")
"""The percentile methods, by ``numpy.percentile``'s names ("nearest-rank" is accepted for "inverted_cdf")."""
SUMMARY_QUANTILES = (50, 90, 99)  # a summary's p50, p90, p99


def percentile(values: Sequence[Any], q: int | Any, method: str = "linear") -> Any:
    """The q-th percentile of ``values``, interpolated (the default) or by nearest rank.

    ``method="linear"`` (``numpy.percentile``'s default, what ``vllm bench serve`` reports):
    at the rank h = (n - 1) q / 100 of the sorted values ``x[0] .. x[n - 1]``,
    ``x[floor(h)] + (h - floor(h)) (x[ceil(h)] - x[floor(h)])``. ``method="inverted_cdf"`` (numpy's
    name; ``"nearest-rank"`` too): the value at rank ceil(q n / 100), 1-based (the smallest for
    q = 0). Convention: docs/conventions.md, "Latency percentiles".

    Parameters
    ----------
    values : sequence of numbers (int, Fraction, float), n >= 1
    q : number in [0, 100]
    method : {"linear", "inverted_cdf", "nearest-rank"}

    Returns
    -------
    An element of ``values`` (its type kept) where the rank falls on one or between equal values
    (always, for nearest rank); else the interpolation: a Fraction, exact, when both neighbours
    are ints or Fractions, a float (the exact value rounded once) when either is a float (the Fraction
    where that float would overflow: an int neighbour beyond a float's range).

    Raises
    ------
    InvalidValueError
        Empty ``values``, a value that is not a finite int, Fraction or float (``values[i]``),
        ``q`` outside [0, 100], or an unknown ``method`` (a ValueError, named by the argument).

    Examples
    --------
    >>> percentile([15, 20, 35, 40, 50], 30), percentile([15, 20, 35, 40, 50], 100)
    (Fraction(23, 1), 50)
    >>> percentile([15, 20, 35, 40, 50], 30, method="inverted_cdf")
    20
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise InvalidValueError("values", values, "percentile of no values" if not values else
                                "expected a sequence of numbers")
    if isinstance(q, bool) or not isinstance(q, (int, Fraction, float)) or not 0 <= q <= 100:
        raise InvalidValueError("q", q, "must be a number in [0, 100]")
    if method not in (*PERCENTILE_METHODS, "nearest-rank"):
        raise InvalidValueError("method", method, "expected one of 'linear', 'inverted_cdf' (or 'nearest-rank')")
    for i, v in enumerate(values):  # a string, a bool, NaN or an infinity has no rank among times
        if isinstance(v, bool) or not isinstance(v, (int, Fraction, float)) or (isinstance(v, float)
                                                                                and not math.isfinite(v)):
            raise InvalidValueError(f"values[{i}]", v, "expected a finite int, Fraction or float")
    ordered = _sorted_exactly(values)
    if method == "linear":
        return _linear(ordered.__getitem__, len(ordered), q)
    return _nearest_rank(ordered, q)


def _sorted_exactly(values: Sequence[Any]) -> list[Any]:
    """``sorted(values)``, exact and stable, but ordered by each value's nearest float first (the exact value breaks
    a tie of floats only): Fraction comparisons are what made a serving run's percentiles slow."""
    try:
        return sorted(values, key=lambda v: (float(v), v))
    except OverflowError:  # an int or Fraction beyond a float's range: the exact sort
        return sorted(values)


def _nearest_rank(ordered: Sequence[Any], q: Any) -> Any:
    rank = -(-q * len(ordered) // 100)  # ceil(q n / 100), exact for int and Fraction q
    return ordered[max(int(rank), 1) - 1]


def _linear_ranks(n: int, q: Any) -> tuple[int, ...]:
    """The 0-based ranks the linear percentile q of n values reads: floor(h), and ceil(h) when h is no integer."""
    h = Fraction(q) * (n - 1) / 100
    low = h.numerator // h.denominator
    return (low,) if h.denominator == 1 else (low, low + 1)


def _linear(select: Callable[[int], Any], n: int, q: Any) -> Any:
    """The linear percentile q of n values, given ``select(k)``: the value at 0-based rank k (each clock its own).

    Both clocks compute every summary percentile here, so their results are equal type by type.
    """
    h = Fraction(q) * (n - 1) / 100
    low = h.numerator // h.denominator
    a = select(low)
    weight = h - low
    if not weight:
        return a
    b = select(low + 1)
    if a == b:
        return a
    exact = Fraction(a) + weight * (Fraction(b) - Fraction(a))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return float(exact)
        except OverflowError:  # an int neighbour beyond a float's range: the exact value, not a traceback
            return exact
    return exact


def _summary_ranks(n: int) -> list[int]:
    """Every 0-based rank the p50, p90 and p99 of n values read, ascending."""
    return sorted({k for q in SUMMARY_QUANTILES for k in _linear_ranks(n, q)})


def _num(x: Any) -> Any:
    """A JSON/CSV-ready number: ints stay ints, Fractions and floats become floats."""
    if x is None or isinstance(x, (int, str)):
        return x
    return float(x)


# --------------------------------------------------------------------------- steps


@attrs.frozen
class StepRecord:
    """One step of a simulation (a prefill or a decode iteration of the batch).

    Attributes
    ----------
    index : int, 0-based position in the run
    kind : {"prefill", "decode", "mixed"}
        "mixed" (chunked prefill only): decode rows and prompt chunks in one step; a
        chunked-prefill step with only chunks is "prefill", with only decode rows "decode".
    start_s, duration_s : [s]; ``end_s`` = start + duration
    batch : int [rows], sequences in the step (static batching: all rows of the batch,
        finished ones included; chunked prefill: decode rows + rows carrying a chunk)
    useful_rows : int [rows], rows that produce a new output token; ``padded_rows`` =
        batch - useful_rows - partial_rows (static batching's finished rows)
    context_sum : int [tokens], decode rows: sum of c_i (KV incl. the new token); prefill: 0
    prefill_tokens : int [tokens], prompt tokens processed (incl. padding, or the chunks'); decode: 0
    padding_tokens : int [tokens], prefill: padding among ``prefill_tokens``; decode: 0
    attention_pairs : int [pairs], prefill: causal query-key pairs (chunks: q p0 + q (q + 1) / 2 each); decode: 0
    kv_tokens : int [tokens], KV written and held at the end of the step (all rows)
    kv_blocks : int [blocks], pool blocks held at the end of the step (reserved ones
        included under reserve-the-lifetime admission)
    bytes : int or None [bytes], FLOPs : int or None [FLOP]
        From the cost model (None for :class:`~roofline.sim.UnitCostModel`).
    decode_rows : int [rows], rows advanced by one decode token (a decode step: ``batch``;
        a prefill step: 0)
    cached_tokens : int [tokens], chunked prefill: sum over the step's chunks of the prompt
        tokens cached before each (read as KV); 0 otherwise
    partial_rows : int [rows], chunked prefill: rows whose chunk does not finish their prompt
        (working, but producing no token yet); 0 otherwise
    """

    index: int
    kind: str
    start_s: Any
    duration_s: Any
    batch: int
    useful_rows: int
    context_sum: int
    prefill_tokens: int
    padding_tokens: int
    attention_pairs: int
    kv_tokens: int
    kv_blocks: int
    bytes: Any
    flops: Any
    decode_rows: int = 0
    cached_tokens: int = 0
    partial_rows: int = 0

    @property
    def end_s(self) -> Any:
        """start_s + duration_s [s]."""
        return self.start_s + self.duration_s

    @property
    def padded_rows(self) -> int:
        """Rows that ride along without producing a token or processing a prompt chunk [rows]."""
        return self.batch - self.useful_rows - self.partial_rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (times as floats)."""
        d = {k: _num(v) for k, v in attrs.asdict(self).items()}
        d["padded_rows"] = self.padded_rows
        return d


_STEP_FIELDS = ("index", "kind", "start_s", "duration_s", "batch", "useful_rows", "padded_rows", "context_sum",
                "prefill_tokens", "padding_tokens", "attention_pairs", "kv_tokens", "kv_blocks", "bytes", "flops",
                "decode_rows", "cached_tokens", "partial_rows")


class StepTable(Sequence[StepRecord]):
    """The steps of one simulation, stored compactly in columns; a sequence of :class:`StepRecord`.

    Only the composition of each step is stored (kind, batch, useful rows, context or
    prefill tokens, KV blocks; the prefill-only fields for prefill steps); durations,
    bytes and FLOPs are recomputed from the cost model when a record is read, and start
    times from the previous step's end (idle gaps and a checkpoint every 4,096 steps are
    stored), so that a run of millions of steps stays small and exact.

    Built by the policies; read with ``len``, indexing (negative indices too) and
    iteration (sequential iteration is the fast way).
    """

    def __init__(self, cost_model: Any) -> None:
        self._cost = cost_model
        self._kind = array("b")
        self._batch = array("q")
        self._useful = array("q")
        self._tokens = array("q")  # decode: context_sum (= KV tokens held); prefill: prefill_tokens
        self._blocks = array("q")
        self._pf_step = array("q")  # step index of each prefill step, increasing
        self._pf_padding = array("q")
        self._pf_pairs = array("q")
        self._pf_kv = array("q")
        self._mx_step = array("q")  # step index of each chunked-prefill step with prompt tokens, increasing
        self._mx = array("q")  # 6 per such step: decode_rows, context_sum, cached, pairs, kv_tokens, partial
        self._gaps: dict[int, Any] = {}
        #: sparse attention: step index -> (R, Q_K), the capped context sum and pairs its duration needs
        self._capped: dict[int, tuple[int, int]] = {}
        self._checkpoints: list[Any] = []
        self._end: Any = None
        self._wide = False

    def _widen(self) -> None:
        """Turn the int64 columns into lists, the first time a count passes 2**63 - 1 (a prompt of
        10**15 tokens has 5 x 10**29 attention pairs): counts stay exact, the table only grows larger."""
        self._wide = True
        for name, value in vars(self).items():
            if isinstance(value, array) and value.typecode == "q":
                setattr(self, name, list(value))

    def _start(self, start: Any, end: Any) -> None:
        i = len(self._kind)
        if start is not self._end and start != self._end:
            self._gaps[i] = start
        if i % _CHECKPOINT == 0:
            self._checkpoints.append(start)
        self._end = end

    def add_prefill(self, start: Any, end: Any, rows: int, prefill_tokens: int, padding_tokens: int,
                    attention_pairs: int, kv_tokens: int, kv_blocks: int,
                    capped: tuple[int, int] | None = None) -> None:
        """Append a prefill step (used by the policies); ``capped``: sparse attention's (R, Q_K)."""
        if capped is not None:
            self._capped[len(self._kind)] = capped
        if not self._wide and (prefill_tokens | padding_tokens | attention_pairs | kv_tokens | kv_blocks) >> 63:
            self._widen()
        self._pf_step.append(len(self._kind))
        self._start(start, end)
        self._kind.append(0)
        self._batch.append(rows)
        self._useful.append(rows)
        self._tokens.append(prefill_tokens)
        self._blocks.append(kv_blocks)
        self._pf_padding.append(padding_tokens)
        self._pf_pairs.append(attention_pairs)
        self._pf_kv.append(kv_tokens)

    def add_decode(self, start: Any, end: Any, batch: int, useful: int, context_sum: int, kv_blocks: int,
                   capped: tuple[int, int] | None = None) -> None:
        """Append a decode step (used by the policies); ``capped``: sparse attention's (R, Q_K)."""
        if capped is not None:
            self._capped[len(self._kind)] = capped
        if not self._wide and (context_sum | kv_blocks) >> 63:
            self._widen()
        self._start(start, end)
        self._kind.append(1)
        self._batch.append(batch)
        self._useful.append(useful)
        self._tokens.append(context_sum)
        self._blocks.append(kv_blocks)

    def add_mixed(self, start: Any, end: Any, batch: int, useful: int, decode_rows: int, context_sum: int,
                  prefill_tokens: int, cached_tokens: int, attention_pairs: int, kv_tokens: int, kv_blocks: int,
                  partial_rows: int, capped: tuple[int, int] | None = None) -> None:
        """Append a chunked-prefill step with prompt chunks (used by the policies); ``capped``: sparse
        attention's (R, Q_K)."""
        if capped is not None:
            self._capped[len(self._kind)] = capped
        if not self._wide and (context_sum | prefill_tokens | cached_tokens | attention_pairs | kv_tokens
                               | kv_blocks) >> 63:
            self._widen()
        self._mx_step.append(len(self._kind))
        self._start(start, end)
        self._kind.append(2)
        self._batch.append(batch)
        self._useful.append(useful)
        self._tokens.append(prefill_tokens)
        self._blocks.append(kv_blocks)
        self._mx.extend((decode_rows, context_sum, cached_tokens, attention_pairs, kv_tokens, partial_rows))

    def __len__(self) -> int:
        return len(self._kind)

    def _duration(self, i: int, pf: int, mx: int) -> Any:
        kind = self._kind[i]
        capped = self._capped.get(i) if self._capped else None
        if capped is not None:  # sparse attention: the capped sums beside the stored composition
            if kind == 1:
                return self._cost.decode_time(self._batch[i], self._tokens[i], capped[0])
            if kind == 2:
                m = self._mx
                return self._cost.mixed_time(m[6 * mx], m[6 * mx + 1], self._tokens[i], m[6 * mx + 2],
                                             m[6 * mx + 3], *capped)
            return self._cost.prefill_time(self._tokens[i], self._pf_pairs[pf], capped[1])
        if kind == 1:
            return self._cost.decode_time(self._batch[i], self._tokens[i])
        if kind == 2:
            m = self._mx
            return self._cost.mixed_time(m[6 * mx], m[6 * mx + 1], self._tokens[i], m[6 * mx + 2], m[6 * mx + 3])
        return self._cost.prefill_time(self._tokens[i], self._pf_pairs[pf])

    def _record(self, i: int, pf: int, mx: int, start: Any, duration: Any) -> StepRecord:
        batch, tokens, kind = self._batch[i], self._tokens[i], self._kind[i]
        capped = self._capped.get(i) if self._capped else None
        if kind == 1:
            nbytes, flops = (self._cost.decode_work(batch, tokens) if capped is None
                             else self._cost.decode_work(batch, tokens, capped[0]))
            return StepRecord(i, DECODE, start, duration, batch, self._useful[i], tokens, 0, 0, 0, tokens,
                              self._blocks[i], nbytes, flops, decode_rows=batch)
        if kind == 2:
            rows, context, cached, pairs, kv, partial = self._mx[6 * mx: 6 * mx + 6]
            nbytes, flops = (self._cost.mixed_work(rows, context, tokens, cached, pairs) if capped is None
                             else self._cost.mixed_work(rows, context, tokens, cached, pairs, *capped))
            return StepRecord(i, MIXED if rows else PREFILL, start, duration, batch, self._useful[i], context, tokens,
                              0, pairs, kv, self._blocks[i], nbytes, flops, decode_rows=rows, cached_tokens=cached,
                              partial_rows=partial)
        pairs = self._pf_pairs[pf]
        work = (self._cost.prefill_work(tokens, pairs) if capped is None
                else self._cost.prefill_work(tokens, pairs, capped[1]))
        return StepRecord(i, PREFILL, start, duration, batch, self._useful[i], 0, tokens, self._pf_padding[pf],
                          pairs, self._pf_kv[pf], self._blocks[i], *work)

    def _walk(self, first: int, last: int) -> Iterator[StepRecord]:
        """Records first..last-1, starting from the checkpoint at or before ``first``."""
        j = first - first % _CHECKPOINT
        t = self._checkpoints[j // _CHECKPOINT] if j < len(self._kind) else None
        pf = _bisect(self._pf_step, j)
        mx = _bisect(self._mx_step, j)
        gaps, kinds = self._gaps, self._kind
        while j < last:
            start = gaps.get(j, t)
            d = self._duration(j, pf, mx)
            if j >= first:
                yield self._record(j, pf, mx, start, d)
            if kinds[j] == 0:
                pf += 1
            elif kinds[j] == 2:
                mx += 1
            t = start + d
            j += 1

    def __iter__(self) -> Iterator[StepRecord]:
        return self._walk(0, len(self))

    @overload
    def __getitem__(self, index: int) -> StepRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[StepRecord]: ...

    def __getitem__(self, index: int | slice) -> StepRecord | list[StepRecord]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return list(self._walk(start, stop)) if start < stop else []
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"step index {index} out of range ({n} steps)")
        return next(self._walk(i, i + 1))

    def write_csv(self, stream: IO[str]) -> None:
        """Write every step as CSV (header + one row per step; times as floats)."""
        w = csv.writer(stream, lineterminator="\n")
        w.writerow(_STEP_FIELDS)
        for rec in self:
            d = rec.to_dict()
            w.writerow(["" if d[k] is None else d[k] for k in _STEP_FIELDS])


def _bisect(a: array | list[int], x: int) -> int:
    """Number of items of the increasing array ``a`` below ``x``."""
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------- requests


@attrs.frozen
class RequestResult:
    """What happened to one request.

    Attributes
    ----------
    request : Request
    arrival_s : [s]
        The request's arrival time in the cost model's time type (exact, or a float in
        float mode); the latency metrics are measured from it.
    admitted_s : [s] or None
        First admission (start of its first prefill step); None if rejected before.
    first_token_s : [s] or None
        End of its first prefill step (the first output token comes from the prefill).
    finish_s : [s] or None
        When its last output token was produced.
    handed_back_s : [s] or None
        When the result is handed back: ``finish_s`` under continuous batching and serial
        serving, the end of the batch under static batching; None if rejected.
    preemptions : int
        Times it was preempted (continuous batching, on-demand admission).
    prefill_tokens : int [tokens]
        Tokens of it that prefill work processed, summed over every prefill step or chunk
        that processed some (padding excluded): P for a request never preempted; each
        re-prefill after a preemption adds its P + g tokens (g generated before it,
        inference-sim #1091). Chunked prefill counts each chunk when it is processed, so a
        request preempted mid-prefill (on-demand admission) counts the chunks done before
        the preemption, which were dropped with its KV, and then its whole re-prefill: a
        prompt of 8 with 2 tokens chunked before the preemption counts 2 + 8 = 10, not
        8 + 8. Every step's ``prefill_tokens`` (:class:`StepRecord`, padding aside) is
        counted for exactly one request.
    generated_tokens : int [tokens]
        Output tokens it produced (each counted once, preemption or not): equals
        ``request.output_tokens`` when handed back.
    rejected_reason : str or None
        Why it was rejected (it can never fit, or it exceeds ``max_model_len``), or None.
    client : int or None
        Closed-loop workloads: the client (0-based) that sent it; None for open-loop ones.
    """

    request: Request
    arrival_s: Any
    admitted_s: Any
    first_token_s: Any
    finish_s: Any
    handed_back_s: Any
    preemptions: int
    prefill_tokens: int
    generated_tokens: int
    rejected_reason: str | None
    client: int | None = None

    @property
    def rejected(self) -> bool:
        """True if the request was rejected (never handed back)."""
        return self.rejected_reason is not None

    @property
    def queue_wait_s(self) -> Any:
        """admitted - arrival [s], or None."""
        return None if self.admitted_s is None else self.admitted_s - self.arrival_s

    @property
    def ttft_s(self) -> Any:
        """Time to first token, first_token - arrival [s] (queueing included), or None."""
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> Any:
        """End to end, handed_back - arrival [s], or None if rejected."""
        return None if self.handed_back_s is None else self.handed_back_s - self.arrival_s

    @property
    def tpot_s(self) -> Any:
        """Time per output token, (E2E - TTFT) / (O - 1) [s]; None for O = 1 or if rejected (vLLM PR #17802)."""
        o = self.request.output_tokens
        if self.handed_back_s is None or o < 2:
            return None
        return _div(self.handed_back_s - self.first_token_s, o - 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (times as floats)."""
        r = self.request
        return {
            "id": r.id, "arrival_s": _num(self.arrival_s), "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens, "admitted_s": _num(self.admitted_s),
            "first_token_s": _num(self.first_token_s), "finish_s": _num(self.finish_s),
            "handed_back_s": _num(self.handed_back_s), "queue_wait_s": _num(self.queue_wait_s),
            "ttft_s": _num(self.ttft_s), "tpot_s": _num(self.tpot_s), "e2e_s": _num(self.e2e_s),
            "preemptions": self.preemptions, "prefill_tokens": self.prefill_tokens,
            "generated_tokens": self.generated_tokens, "rejected": self.rejected,
            "rejected_reason": self.rejected_reason, "client": self.client,
        }


class RequestTable(Sequence[RequestResult]):
    """The requests' results of an event-engine run, kept as integer ticks and built when read.

    A sequence of :class:`RequestResult` (``len``, indexing, slices, iteration, and ``==`` with
    any sequence of results, a tuple included) equal to the step engine's tuple, whose exact
    times are ``ticks / denominator`` seconds: a Fraction where the step engine's value is one
    (``fraction`` True), else the int. A run keeps one column of ticks per time (a tick value is
    a Python int: exact, however large the run's denominator), and a record's Fractions are
    made only when the record is read, once (then kept).

    Parameters
    ----------
    requests : tuple of Request
    arrival : list [s], the arrivals in the cost model's time type
    times : 4 lists of (ticks or None), admitted, first token, finish and hand-back
    fractions : 4 lists of bool, whether each time is a Fraction
    preemptions, prefill_tokens, generated_tokens : lists of int
    reasons : list of (str or None)
    clients : list of (int or None) or None
    denominator : int >= 1, ticks per second
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, requests: Sequence[Request], arrival: Sequence[Any], times: Sequence[Sequence[Any]],
                 fractions: Sequence[Sequence[bool]], preemptions: Sequence[int], prefill_tokens: Sequence[int],
                 generated_tokens: Sequence[int], reasons: Sequence[str | None],
                 clients: Sequence[int | None] | None, denominator: int) -> None:  # noqa: D107
        self._requests, self._arrival, self._times, self._fractions = requests, arrival, times, fractions
        self._preemptions, self._prefilled, self._generated = preemptions, prefill_tokens, generated_tokens
        self._reasons, self._clients, self._d = reasons, clients, denominator
        self._made: list[RequestResult | None] = [None] * len(requests)

    def __len__(self) -> int:
        return len(self._requests)

    def _time(self, k: int, i: int) -> Any:
        ticks = self._times[k][i]
        if ticks is None:
            return None
        return Fraction(ticks, self._d) if self._fractions[k][i] else ticks // self._d

    def _record(self, i: int) -> RequestResult:
        made = self._made[i]
        if made is None:
            t = self._time
            made = self._made[i] = RequestResult(
                self._requests[i], self._arrival[i], t(0, i), t(1, i), t(2, i), t(3, i), self._preemptions[i],
                self._prefilled[i], self._generated[i], self._reasons[i],
                None if self._clients is None else self._clients[i])
        return made

    @overload
    def __getitem__(self, index: int) -> RequestResult: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[RequestResult, ...]: ...

    def __getitem__(self, index: int | slice) -> RequestResult | tuple[RequestResult, ...]:
        if isinstance(index, slice):
            return tuple(self._record(i) for i in range(*index.indices(len(self))))
        n = len(self)
        i = operator.index(index)  # a numpy int as an int; a float or a str a TypeError, as a tuple's
        i = i + n if i < 0 else i
        if not 0 <= i < n:
            raise IndexError(f"request index {index} out of range for {n} requests")
        return self._record(i)

    def __iter__(self) -> Iterator[RequestResult]:
        return (self._record(i) for i in range(len(self)))

    @property
    def arrivals(self) -> Sequence[Any]:
        """Every request's arrival [s], without building the records."""
        return self._arrival

    @property
    def reasons(self) -> Sequence[str | None]:
        """Every request's rejection reason (None if served), without building the records."""
        return self._reasons

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __repr__(self) -> str:
        return f"RequestTable({len(self)} requests)"


_REQUEST_FIELDS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "admitted_s", "first_token_s", "finish_s",
                   "handed_back_s", "queue_wait_s", "ttft_s", "tpot_s", "e2e_s", "preemptions", "prefill_tokens",
                   "generated_tokens", "rejected", "rejected_reason", "client")


# --------------------------------------------------------------------------- summary


@attrs.frozen
class Percentiles:
    """p50, p90, p99 (interpolated, as ``vllm bench serve``: :func:`percentile`), and the mean and max, of one
    latency metric [s]."""

    p50: Any
    p90: Any
    p99: Any
    mean: Any
    max: Any

    @classmethod
    def of(cls, values: Sequence[Any]) -> Percentiles | None:
        """The statistics of ``values`` (None when empty); exact values stay exact."""
        if not values:
            return None
        ordered = sorted(values)
        n = len(ordered)
        p50, p90, p99 = (_linear(ordered.__getitem__, n, q) for q in SUMMARY_QUANTILES)
        return cls(p50, p90, p99, mean=_div(sum(ordered), n), max=ordered[-1])

    @classmethod
    def of_counts(cls, counts: dict[Any, int]) -> Percentiles | None:
        """The statistics of a multiset given as value -> count (None when empty); same as :meth:`of`."""
        items = sorted((v, c) for v, c in counts.items() if c)
        n = sum(c for _, c in items)
        if not n:
            return None
        ranks = _summary_ranks(n)
        found: dict[int, Any] = {}
        seen = j = 0
        for v, c in items:  # the values at the ranks, in one pass
            seen += c
            while j < len(ranks) and ranks[j] < seen:
                found[ranks[j]] = v
                j += 1
        total = sum((v * c for v, c in items), start=0 * items[0][0])
        p50, p90, p99 = (_linear(found.__getitem__, n, q) for q in SUMMARY_QUANTILES)
        return cls(p50, p90, p99, mean=_div(total, n), max=items[-1][0])
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {k: _num(v) for k, v in attrs.asdict(self).items()}


@attrs.frozen
class Summary:
    """Aggregate figures of one simulation.

    Attributes
    ----------
    policy : str
    requests, completed, rejected, preemptions : int
    steps, prefill_steps, decode_steps, mixed_steps : int
        ``mixed_steps``: chunked-prefill steps with decode rows and prompt chunks (0 in the
        other modes); decode_steps = steps - prefill_steps - mixed_steps.
    output_tokens : int [tokens], sum of O over the requests handed back
    makespan_s : [s], last hand-back - first arrival (0 if nothing was handed back)
    busy_s : [s], sum of the step durations
    output_tokens_per_s : [tokens/s] or None (output_tokens / makespan)
    long_run_useful_share : [1] or None
        The **long-run useful share** (docs/conventions.md, "Latency metrics"): rows producing
        a token / occupied rows, summed over all steps (static batching: padded finished rows
        count as occupied; 1 for serial and continuous). Rows carrying a prompt chunk that
        does not finish the prompt count in neither. ``useful_share`` is an alias.
    per_batch_useful_share : [1] or None
        Static batching (and serial, 1): the mean over its batches of the **per-batch useful
        share** sum(O_i) / (m x max O_i) of a batch of m rows; None for continuous batching.
    slot_occupancy : [1] or None
        Slots held / (max batch x steps): the sequences holding a slot during each step
        (static: the batch's rows; continuous: running sequences, those waiting through a
        prefill step included), summed over the steps, over ``max batch`` (serial: 1; static:
        ``batch_size``; continuous: ``max_num_seqs``) times the steps.
    queue_wait, ttft, e2e : Percentiles or None, over the requests handed back
    tpot : Percentiles or None, over the requests handed back with O >= 2
    itl : Percentiles or None
        Inter-token latency: every gap between two consecutive output tokens of a request
        where tokens stream (serial and continuous batching; None for static batching, whose
        tokens all arrive at hand-back). A gap includes steps the request waited through
        (a prefill step of others, a preemption). Over the requests handed back only, as
        ``vllm bench serve``: the gaps of a request rejected after a preemption are left out.
    peak_kv_tokens, peak_kv_blocks : int, the largest KV in use at the end of any step
    peak_running : int, the most sequences holding a slot in one step (continuous batching: running ones and
        those prefilling; static: the largest batch; serial: 1; 0 with no step): ``max_num_seqs`` bound the run
        only if it equals it (a larger ``max_num_seqs`` gives the same run when it is below)
    kv_capacity_blocks : int or None, block_size : int, the pool's
    """

    policy: str
    requests: int
    completed: int
    rejected: int
    preemptions: int
    steps: int
    prefill_steps: int
    decode_steps: int
    mixed_steps: int
    output_tokens: int
    makespan_s: Any
    busy_s: Any
    output_tokens_per_s: Any
    long_run_useful_share: Any
    per_batch_useful_share: Any
    slot_occupancy: Any
    queue_wait: Percentiles | None
    ttft: Percentiles | None
    tpot: Percentiles | None
    e2e: Percentiles | None
    itl: Percentiles | None
    peak_kv_tokens: int
    peak_kv_blocks: int
    kv_capacity_blocks: int | None
    block_size: int
    peak_running: int = 0

    @property
    def useful_share(self) -> Any:
        """Alias of :attr:`long_run_useful_share` (the name before both shares were named)."""
        return self.long_run_useful_share

    def __str__(self) -> str:
        """A readable summary: counts with thousands separators, latencies in ms, shares in %, rounded.

        ``repr`` keeps the exact values (Fractions of thousands of digits on a long run); ``str``
        (what ``print(summary)`` shows) is for reading, like ``roofline simulate``'s table.
        """
        def ms(value: Any) -> str:
            return f"{float(value) * 1e3:,.1f} ms"

        def pct(value: Any) -> str:
            return "-" if value is None else f"{float(value) * 100:.1f} %"

        rate = "-" if self.output_tokens_per_s is None else f"{float(self.output_tokens_per_s):,.1f}"
        lines = [f"{self.policy}: {self.completed:,} of {self.requests:,} requests handed back, {self.rejected:,} "
                 f"rejected, {self.preemptions:,} preemptions; {self.steps:,} steps ({self.prefill_steps:,} prefill, "
                 f"{self.decode_steps:,} decode, {self.mixed_steps:,} mixed)",
                 f"  makespan {float(self.makespan_s):,.3f} s, busy {float(self.busy_s):,.3f} s, "
                 f"{self.output_tokens:,} output tokens, {rate} tokens/s",
                 f"  long-run useful share {pct(self.long_run_useful_share)}, slot occupancy {pct(self.slot_occupancy)}"
                 f", peak KV {self.peak_kv_tokens:,} tokens in {self.peak_kv_blocks:,} blocks of {self.block_size}"]
        for name in ("queue_wait", "ttft", "tpot", "itl", "e2e"):
            p = getattr(self, name)
            if p is not None:
                lines.append(f"  {name:<10} p50 {ms(p.p50)}, p90 {ms(p.p90)}, p99 {ms(p.p99)}, mean {ms(p.mean)}, "
                             f"max {ms(p.max)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (times and shares as floats)."""
        out: dict[str, Any] = {}
        for a in attrs.fields(Summary):
            v = getattr(self, a.name)
            out[a.name] = v.to_dict() if isinstance(v, Percentiles) else _num(v)
        return out


@attrs.frozen
class Goodput:
    """Requests that met every latency limit given (an SLO), and their rate.

    Attributes
    ----------
    ttft_s, tpot_s, e2e_s : [s] or None, the limits (None: not limited)
    met : int, requests handed back within every limit (a request with O = 1 has no TPOT:
        the TPOT limit does not apply to it); rejected requests never meet it
    requests : int, all requests of the run
    requests_per_s : [requests/s] or None, met / makespan (None for a zero makespan)
    output_tokens_per_s : [tokens/s] or None, the output tokens of those requests / makespan
    """

    ttft_s: Any
    tpot_s: Any
    e2e_s: Any
    met: int
    requests: int
    requests_per_s: Any
    output_tokens_per_s: Any

    @property
    def share(self) -> Any:
        """met / requests [1] (None without requests)."""
        return _div(self.met, self.requests) if self.requests else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {k: _num(v) for k, v in attrs.asdict(self).items()}


@attrs.frozen
class SimResult:
    """The outcome of one policy on one workload.

    Attributes
    ----------
    policy : str, ``"serial"``, ``"static"`` or ``"continuous"``
    options : dict, the policy's options (JSON-ready)
    requests : sequence of RequestResult, in the workload's order (a tuple from the step engine, a
        :class:`RequestTable` from the event engine: the same records, built when read)
    steps : StepTable or None (None when run with ``record_steps=False``)
    summary : Summary
    """

    policy: str
    options: dict[str, Any]
    requests: Sequence[RequestResult]
    steps: StepTable | None
    summary: Summary

    def rejections(self) -> list[tuple[Request, str]]:
        """(request, reason) of every rejected request, in the workload's order (the records are not built)."""
        requests = self.requests
        if isinstance(requests, RequestTable):
            return [(requests._requests[i], why) for i, why in enumerate(requests.reasons) if why is not None]
        return [(r.request, r.rejected_reason) for r in requests if r.rejected_reason is not None]

    def last_arrival_s(self) -> Any:
        """The latest arrival [s] of the run's requests (0 without requests; the records are not built)."""
        requests = self.requests
        arrivals = requests.arrivals if isinstance(requests, RequestTable) else [r.arrival_s for r in requests]
        return max(arrivals, default=0)

    def to_dict(self, *, requests: bool = False, steps: bool = False) -> dict[str, Any]:
        """JSON-ready dict: policy, options, summary, and optionally every request and step."""
        out: dict[str, Any] = {"policy": self.policy, "options": self.options, "summary": self.summary.to_dict()}
        if requests:
            out["requests"] = [r.to_dict() for r in self.requests]
        if steps and self.steps is not None:
            out["steps"] = [s.to_dict() for s in self.steps]
        return out

    def goodput(self, *, ttft_s: Any = None, tpot_s: Any = None, e2e_s: Any = None) -> Goodput:
        """Goodput under an SLO: the requests handed back within every limit given, per second.

        Parameters
        ----------
        ttft_s, tpot_s, e2e_s : [s] >= 0 or None
            Limits on TTFT, TPOT and E2E (docs/conventions.md, "Latency metrics"); None: no
            limit on that metric.

        Returns
        -------
        Goodput

        Raises
        ------
        InvalidValueError
            A negative or non-numeric limit.

        Examples
        --------
        >>> from roofline.sim import Request, UnitCostModel, serve_continuous
        >>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=4, output_tokens=o) for i, o in enumerate([3, 5])]
        >>> g = serve_continuous(reqs, UnitCostModel(), max_num_seqs=1).goodput(ttft_s=2)
        >>> g.met, g.requests_per_s
        (1, Fraction(1, 8))
        """
        from .._checks import check_nonnegative

        for name, value in (("ttft_s", ttft_s), ("tpot_s", tpot_s), ("e2e_s", e2e_s)):
            if value is not None:
                check_nonnegative(name, value)
        met, tokens = 0, 0
        for r in self.requests:
            if r.handed_back_s is None:
                continue
            if ttft_s is not None and r.ttft_s > ttft_s:
                continue
            tpot = r.tpot_s
            if tpot_s is not None and tpot is not None and tpot > tpot_s:
                continue
            if e2e_s is not None and r.e2e_s > e2e_s:
                continue
            met += 1
            tokens += r.request.output_tokens
        span = self.summary.makespan_s
        return Goodput(ttft_s, tpot_s, e2e_s, met, len(self.requests), _div(met, span) if span else None,
                       _div(tokens, span) if span else None)

    def to_json(self, *, requests: bool = False, steps: bool = False) -> str:
        """:meth:`to_dict` as JSON text (deterministic: byte-identical for the same run)."""
        return json.dumps(self.to_dict(requests=requests, steps=steps), indent=2, sort_keys=False)

    def write_requests_csv(self, stream: IO[str]) -> None:
        """Write the per-request results as CSV (header + one row per request; times as floats)."""
        w = csv.writer(stream, lineterminator="\n")
        w.writerow(_REQUEST_FIELDS)
        for r in self.requests:
            d = r.to_dict()
            w.writerow(["" if d[k] is None else d[k] for k in _REQUEST_FIELDS])


def summarize(policy: str, results: Iterable[RequestResult], *, steps: int, prefill_steps: int, busy: Any,
              useful_rows: int, rows: int, peak_kv_tokens: int, peak_kv_blocks: int,
              kv_capacity_blocks: int | None, block_size: int, mixed_steps: int = 0,
              per_batch_useful_share: Any = None, slot_rows: int = 0, max_batch: int = 1,
              itl: dict[Any, int] | None = None, peak_running: int = 0) -> Summary:
    """Build the :class:`Summary` from the results and the run's running totals (used by the policies)."""
    results = list(results)
    done = [r for r in results if r.handed_back_s is not None]
    first_arrival = min((r.arrival_s for r in results), default=0)
    makespan = max((r.handed_back_s for r in done), default=first_arrival) - first_arrival
    output = sum(r.request.output_tokens for r in done)
    return Summary(
        policy=policy, requests=len(results), completed=len(done), rejected=sum(r.rejected for r in results),
        preemptions=sum(r.preemptions for r in results), steps=steps, prefill_steps=prefill_steps,
        decode_steps=steps - prefill_steps - mixed_steps, mixed_steps=mixed_steps, output_tokens=output,
        makespan_s=makespan, busy_s=busy, output_tokens_per_s=_div(output, makespan) if makespan else None,
        long_run_useful_share=_div(useful_rows, rows) if rows else None,
        per_batch_useful_share=per_batch_useful_share,
        slot_occupancy=_div(slot_rows, max_batch * steps) if steps else None,
        queue_wait=Percentiles.of([r.queue_wait_s for r in done]),
        ttft=Percentiles.of([r.ttft_s for r in done]),
        tpot=Percentiles.of([r.tpot_s for r in done if r.request.output_tokens >= 2]),
        e2e=Percentiles.of([r.e2e_s for r in done]),
        itl=None if itl is None else Percentiles.of_counts(itl),
        peak_kv_tokens=peak_kv_tokens, peak_kv_blocks=peak_kv_blocks,
        kv_capacity_blocks=kv_capacity_blocks, block_size=block_size, peak_running=peak_running,
    )


def _div(a: Any, b: Any) -> Any:
    """a / b, exact (a Fraction) when both are int or Fraction, else a float."""
    if isinstance(a, (int, Fraction)) and isinstance(b, (int, Fraction)):
        return Fraction(a) / b
    return a / b
