"""What a simulation returns: per-step records, per-request results and a summary.

All times are in seconds from the workload's time origin (the trace's first request
arrives at 0), exact Fractions or ints under an exact cost model, floats otherwise.
Latency metrics follow CONVENTIONS.md ("Latency metrics"):

* queue wait = admission - arrival; TTFT = first token - arrival (queueing included);
* E2E = handed back - arrival (for static batching, the end of the batch);
* TPOT = (E2E - TTFT) / (O - 1) for O >= 2, None for O = 1 (case Q5).

Percentiles are **nearest-rank**: the q-th percentile of n sorted values is the
value at rank ceil(q n / 100) (1-based), an element of the data, so it stays exact.

Output is deterministic: the same workload, policy and cost model give the same
results and byte-identical CSV and JSON.
"""

from __future__ import annotations

import csv
import json
from array import array
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from typing import IO, Any, overload

import attrs

from ..errors import InvalidValueError
from .requests import Request

__all__ = [
    "StepRecord",
    "StepTable",
    "RequestResult",
    "Percentiles",
    "Summary",
    "SimResult",
    "percentile",
]

PREFILL = "prefill"
DECODE = "decode"
_KINDS = (PREFILL, DECODE)
_CHECKPOINT = 4096  # exact start time kept every this many steps (random access)


def percentile(values: Sequence[Any], q: int | Any) -> Any:
    """Nearest-rank percentile: the value at rank ceil(q n / 100) of the sorted values.

    Parameters
    ----------
    values : sequence of numbers (int, Fraction, float), n >= 1
    q : number in (0, 100]

    Returns
    -------
    One of ``values`` (exact values stay exact).

    Raises
    ------
    InvalidValueError
        Empty ``values`` or ``q`` outside (0, 100] (a ValueError, named by the argument).

    Examples
    --------
    >>> percentile([15, 20, 35, 40, 50], 30), percentile([15, 20, 35, 40, 50], 100)
    (20, 50)
    """
    if not values:
        raise InvalidValueError("values", values, "percentile of no values")
    if isinstance(q, bool) or not isinstance(q, (int, Fraction, float)) or not 0 < q <= 100:
        raise InvalidValueError("q", q, "must be a number in (0, 100]")
    return _nearest_rank(sorted(values), q)


def _nearest_rank(ordered: Sequence[Any], q: Any) -> Any:
    rank = -(-q * len(ordered) // 100)  # ceil(q n / 100), exact for int and Fraction q
    return ordered[int(rank) - 1]


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
    kind : {"prefill", "decode"}
    start_s, duration_s : [s]; ``end_s`` = start + duration
    batch : int [rows], sequences in the step (static batching: all rows of the batch,
        finished ones included)
    useful_rows : int [rows], rows that produce a new output token; ``padded_rows`` =
        batch - useful_rows (static batching's finished rows)
    context_sum : int [tokens], decode: sum of c_i (KV incl. the new token); prefill: 0
    prefill_tokens : int [tokens], prefill: tokens processed incl. padding; decode: 0
    padding_tokens : int [tokens], prefill: padding among ``prefill_tokens``; decode: 0
    attention_pairs : int [pairs], prefill: causal query-key pairs; decode: 0
    kv_tokens : int [tokens], KV written and held at the end of the step (all rows)
    kv_blocks : int [blocks], pool blocks held at the end of the step (reserved ones
        included under reserve-the-lifetime admission)
    bytes : int or None [bytes], FLOPs : int or None [FLOP]
        From the cost model (None for :class:`~roofline.sim.UnitCostModel`).
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

    @property
    def end_s(self) -> Any:
        """start_s + duration_s [s]."""
        return self.start_s + self.duration_s

    @property
    def padded_rows(self) -> int:
        """Rows that ride along without producing a token [rows]."""
        return self.batch - self.useful_rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (times as floats)."""
        d = {k: _num(v) for k, v in attrs.asdict(self).items()}
        d["padded_rows"] = self.padded_rows
        return d


_STEP_FIELDS = ("index", "kind", "start_s", "duration_s", "batch", "useful_rows", "padded_rows", "context_sum",
                "prefill_tokens", "padding_tokens", "attention_pairs", "kv_tokens", "kv_blocks", "bytes", "flops")


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
        self._gaps: dict[int, Any] = {}
        self._checkpoints: list[Any] = []
        self._end: Any = None

    def _start(self, start: Any, end: Any) -> None:
        i = len(self._kind)
        if start is not self._end and start != self._end:
            self._gaps[i] = start
        if i % _CHECKPOINT == 0:
            self._checkpoints.append(start)
        self._end = end

    def add_prefill(self, start: Any, end: Any, rows: int, prefill_tokens: int, padding_tokens: int,
                    attention_pairs: int, kv_tokens: int, kv_blocks: int) -> None:
        """Append a prefill step (used by the policies)."""
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

    def add_decode(self, start: Any, end: Any, batch: int, useful: int, context_sum: int, kv_blocks: int) -> None:
        """Append a decode step (used by the policies)."""
        self._start(start, end)
        self._kind.append(1)
        self._batch.append(batch)
        self._useful.append(useful)
        self._tokens.append(context_sum)
        self._blocks.append(kv_blocks)

    def __len__(self) -> int:
        return len(self._kind)

    def _duration(self, i: int, pf: int) -> Any:
        if self._kind[i]:
            return self._cost.decode_time(self._batch[i], self._tokens[i])
        return self._cost.prefill_time(self._tokens[i], self._pf_pairs[pf])

    def _record(self, i: int, pf: int, start: Any, duration: Any) -> StepRecord:
        batch, tokens = self._batch[i], self._tokens[i]
        if self._kind[i]:
            work = self._cost.decode_work(batch, tokens)
            return StepRecord(i, DECODE, start, duration, batch, self._useful[i], tokens, 0, 0, 0, tokens,
                              self._blocks[i], *work)
        pairs = self._pf_pairs[pf]
        work = self._cost.prefill_work(tokens, pairs)
        return StepRecord(i, PREFILL, start, duration, batch, self._useful[i], 0, tokens, self._pf_padding[pf],
                          pairs, self._pf_kv[pf], self._blocks[i], *work)

    def _walk(self, first: int, last: int) -> Iterator[StepRecord]:
        """Records first..last-1, starting from the checkpoint at or before ``first``."""
        j = first - first % _CHECKPOINT
        t = self._checkpoints[j // _CHECKPOINT] if j < len(self._kind) else None
        pf = _bisect(self._pf_step, j)
        gaps, kinds = self._gaps, self._kind
        while j < last:
            start = gaps.get(j, t)
            d = self._duration(j, pf)
            if j >= first:
                yield self._record(j, pf, start, d)
            if not kinds[j]:
                pf += 1
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


def _bisect(a: array, x: int) -> int:
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
        Tokens prefilled for it: the prompt, plus prompt + generated tokens at every resume
        after a preemption (case Q2); padding excluded.
    generated_tokens : int [tokens]
        Output tokens it produced (each counted once, preemption or not): equals
        ``request.output_tokens`` when handed back.
    rejected_reason : str or None
        Why it was rejected (it can never fit), or None.
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
        """Time per output token, (E2E - TTFT) / (O - 1) [s]; None for O = 1 or if rejected (case Q5)."""
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
            "rejected_reason": self.rejected_reason,
        }


_REQUEST_FIELDS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "admitted_s", "first_token_s", "finish_s",
                   "handed_back_s", "queue_wait_s", "ttft_s", "tpot_s", "e2e_s", "preemptions", "prefill_tokens",
                   "generated_tokens", "rejected", "rejected_reason")


# --------------------------------------------------------------------------- summary


@attrs.frozen
class Percentiles:
    """Nearest-rank p50, p90, p99, and the mean and max, of one latency metric [s]."""

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
        p50, p90, p99 = (_nearest_rank(ordered, q) for q in (50, 90, 99))
        return cls(p50, p90, p99, mean=_div(sum(ordered), len(ordered)), max=ordered[-1])

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
    steps, prefill_steps, decode_steps : int
    output_tokens : int [tokens], sum of O over the requests handed back
    makespan_s : [s], last hand-back - first arrival (0 if nothing was handed back)
    busy_s : [s], sum of the step durations
    output_tokens_per_s : [tokens/s] or None (output_tokens / makespan)
    useful_share : [1] or None
        Rows producing a token / rows in the steps, over all steps (static batching:
        sum(O_i) / (B x max O_i) per batch; 1 for serial and continuous).
    queue_wait, ttft, e2e : Percentiles or None, over the requests handed back
    tpot : Percentiles or None, over the requests handed back with O >= 2
    peak_kv_tokens, peak_kv_blocks : int, the largest KV in use at the end of any step
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
    output_tokens: int
    makespan_s: Any
    busy_s: Any
    output_tokens_per_s: Any
    useful_share: Any
    queue_wait: Percentiles | None
    ttft: Percentiles | None
    tpot: Percentiles | None
    e2e: Percentiles | None
    peak_kv_tokens: int
    peak_kv_blocks: int
    kv_capacity_blocks: int | None
    block_size: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (times and shares as floats)."""
        out: dict[str, Any] = {}
        for a in attrs.fields(Summary):
            v = getattr(self, a.name)
            out[a.name] = v.to_dict() if isinstance(v, Percentiles) else _num(v)
        return out


@attrs.frozen
class SimResult:
    """The outcome of one policy on one workload.

    Attributes
    ----------
    policy : str, ``"serial"``, ``"static"`` or ``"continuous"``
    options : dict, the policy's options (JSON-ready)
    requests : tuple of RequestResult, in the workload's order
    steps : StepTable or None (None when run with ``record_steps=False``)
    summary : Summary
    """

    policy: str
    options: dict[str, Any]
    requests: tuple[RequestResult, ...]
    steps: StepTable | None
    summary: Summary

    def to_dict(self, *, requests: bool = False, steps: bool = False) -> dict[str, Any]:
        """JSON-ready dict: policy, options, summary, and optionally every request and step."""
        out: dict[str, Any] = {"policy": self.policy, "options": self.options, "summary": self.summary.to_dict()}
        if requests:
            out["requests"] = [r.to_dict() for r in self.requests]
        if steps and self.steps is not None:
            out["steps"] = [s.to_dict() for s in self.steps]
        return out

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
              kv_capacity_blocks: int | None, block_size: int) -> Summary:
    """Build the :class:`Summary` from the results and the run's running totals (used by the policies)."""
    results = list(results)
    done = [r for r in results if r.handed_back_s is not None]
    first_arrival = min((r.arrival_s for r in results), default=0)
    makespan = max((r.handed_back_s for r in done), default=first_arrival) - first_arrival
    output = sum(r.request.output_tokens for r in done)
    return Summary(
        policy=policy, requests=len(results), completed=len(done), rejected=sum(r.rejected for r in results),
        preemptions=sum(r.preemptions for r in results), steps=steps, prefill_steps=prefill_steps,
        decode_steps=steps - prefill_steps, output_tokens=output, makespan_s=makespan, busy_s=busy,
        output_tokens_per_s=_div(output, makespan) if makespan else None,
        useful_share=_div(useful_rows, rows) if rows else None,
        queue_wait=Percentiles.of([r.queue_wait_s for r in done]),
        ttft=Percentiles.of([r.ttft_s for r in done]),
        tpot=Percentiles.of([r.tpot_s for r in done if r.request.output_tokens >= 2]),
        e2e=Percentiles.of([r.e2e_s for r in done]),
        peak_kv_tokens=peak_kv_tokens, peak_kv_blocks=peak_kv_blocks,
        kv_capacity_blocks=kv_capacity_blocks, block_size=block_size,
    )


def _div(a: Any, b: Any) -> Any:
    """a / b, exact (a Fraction) when both are int or Fraction, else a float."""
    if isinstance(a, (int, Fraction)) and isinstance(b, (int, Fraction)):
        return Fraction(a) / b
    return a / b
