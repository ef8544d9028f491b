"""The two clocks a policy runs on: seconds one step at a time, or integer ticks with closed-form stretches.

Every policy (:mod:`roofline.sim.batches`, :mod:`roofline.sim.continuous`) is written once,
over one run state (:class:`roofline.sim.run._Run`); what differs between the clocks is
only how time is kept and how a run of decode steps of a fixed batch is priced:

* **step clock**: the cost model's own step durations in seconds (Fractions, ints, or floats
  in float mode), one step at a time; gaps between tokens counted by value
  (:class:`StepGaps`). This is the oracle and the teaching form, and it serves every cost model.
* **stretch clock**: integer ticks of the run's common denominator D
  (:class:`~roofline.sim.stretch.TickClock`), the step durations from the cost model's stated
  terms (:class:`~roofline.sim.stretch.TickCosts`, :class:`_TickCostModel`); a scheduler may
  jump a stretch of decode steps in closed form, and the gaps of a stretch are kept as one
  segment (:class:`_Gaps`). A tick value remembers whether the step clock's value would be a
  Fraction or an int (``_FractionTicks``), so results carry the same number types; seconds
  appear only in the results (:func:`tick_result`).

The results of the two clocks are equal field by field and type by type (the tests hold
them so on generated workloads for every cost model, policy and mode).

Inter-token latency on the stretch clock: a stretch's gaps are kept as a segment (batch,
first context sum, steps, rows); each order statistic a percentile reads (one, or the two it
interpolates between: docs/conventions.md, "Latency percentiles") is found by a binary search over tick
values whose counting step is O(1) per segment (a step's duration grows with its context
sum, so the steps of a segment at or below a value are a prefix), vectorised with numpy.
Serial serving keeps no gaps at all: its ITL comes from a sweep over the requests' context
intervals (:func:`_serial_itl`).

Conventions: docs/conventions.md, "Two clocks, one result", "Latency metrics".
"""

from __future__ import annotations

import bisect
import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from .requests import Request
from .results import (
    SUMMARY_QUANTILES,
    Percentiles,
    RequestTable,
    SimResult,
    StepTable,
    Summary,
    _linear,
    _summary_ranks,
)
from .stretch import TickClock, TickCosts

__all__: list[str] = []


class StepGaps:
    """The step clock's inter-token gaps: value [s] -> count (a dict keeps each value's first number type)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}

    def add(self, gap: Any, count: int = 1) -> None:
        """Count ``count`` gaps of ``gap`` seconds."""
        counts = self.counts
        counts[gap] = counts.get(gap, 0) + count


class _FractionTicks(int):
    """Ticks of a time the step engine holds as a Fraction (an int, for arithmetic; the type is the mark)."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        return _FractionTicks(int.__add__(self, other))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        return _FractionTicks(int.__sub__(self, other))

    def __rsub__(self, other: Any) -> Any:
        return _FractionTicks(int.__rsub__(self, other))


def _typed(ticks: int, is_fraction: bool) -> int:
    return _FractionTicks(ticks) if is_fraction else ticks


class _TickCostModel:
    """The cost model's step durations in typed ticks (what the scheduler adds to its clock)."""

    def __init__(self, cost: Any, costs: TickCosts) -> None:
        self.cost, self.costs, self.clock = cost, costs, costs.clock

    def decode_time(self, batch: int, context_sum: int) -> int:
        return _typed(self.costs.decode(batch, context_sum), self.costs.decode_fraction)

    def prefill_time(self, prefill_tokens: int, attention_pairs: int) -> int:
        return _typed(self.costs.prefill(prefill_tokens, attention_pairs), self.costs.prefill_fraction)

    def mixed_time(self, decode_rows: int, context_sum: int, prefill_tokens: int, cached_tokens: int,
                   attention_pairs: int) -> int:
        costs = self.costs
        ticks = costs.mixed(decode_rows, context_sum, prefill_tokens, cached_tokens, attention_pairs)
        if not prefill_tokens:
            return _typed(ticks, costs.decode_fraction)
        if costs.unit_prefill is not None:  # UnitCostModel.mixed_time: a step with prompt tokens takes `prefill`
            return _typed(ticks, costs.prefill_fraction)
        return _FractionTicks(ticks)


class _TicksTable:
    """Writes steps given in ticks into the step engine's table, in seconds."""

    def __init__(self, table: StepTable, seconds: Any) -> None:
        self.table, self.seconds = table, seconds

    def add_prefill(self, start: int, end: int, *args: Any, **kw: Any) -> None:
        self.table.add_prefill(self.seconds(start), self.seconds(end), *args, **kw)

    def add_decode(self, start: int, end: int, *args: Any, **kw: Any) -> None:
        self.table.add_decode(self.seconds(start), self.seconds(end), *args, **kw)

    def add_mixed(self, start: int, end: int, *args: Any, **kw: Any) -> None:
        self.table.add_mixed(self.seconds(start), self.seconds(end), *args, **kw)


class _Gaps:
    """The run's inter-token gaps in ticks: single values (value -> count) and stretch segments."""

    def __init__(self) -> None:
        self.single: dict[int, int] = {}
        # a value's first insertion (seq, and whether a Fraction), kept once its count is 0, as a dict keeps its key
        self.first_seen: dict[int, int] = {}
        self.fraction: dict[int, bool] = {}
        # batch, context sum, steps, rows, seq, frac, slope (the context sum's growth per step)
        self.segments: list[tuple[int, int, int, int, int, bool, int]] = []
        self.seq = 0
        self.segment_ticks = 0  # sum of the segments' gaps

    def add(self, gap: int, count: int = 1) -> None:
        single = self.single
        if gap in single:
            single[gap] += count
        else:
            single[gap] = count
            self.first_seen[gap] = self.seq
            self.fraction[gap] = isinstance(gap, _FractionTicks)
        self.seq += 1

    def take_back_segment(self, index: int, ticks: int) -> None:
        """Take one row's gaps of segment ``index`` (lasting ``ticks`` in all) back: a request refused after a
        preemption (ITL is over the requests handed back). Kept as a segment of -1 rows, first seen as the original."""
        batch, context_sum, steps, _, seq, is_fraction, slope = self.segments[index]
        self.segments.append((batch, context_sum, steps, -1, seq, is_fraction, slope))
        self.segment_ticks -= ticks

    def merge(self, other: _Gaps) -> None:
        """Count another run's gaps, on the same clock, after these (data-parallel replicas pooled, in replica
        order: roofline.sim.replicas; a value keeps the number type of its first count, as a dict keeps its first
        key)."""
        offset = self.seq
        single, first_seen = self.single, self.first_seen
        for gap, count in other.single.items():
            if gap in single:
                single[gap] += count
            else:
                single[gap] = count
                first_seen[gap] = other.first_seen[gap] + offset
                self.fraction[gap] = other.fraction[gap]
        self.segments.extend((b, c, k, rows, seq + offset, frac, slope)
                             for b, c, k, rows, seq, frac, slope in other.segments)
        self.segment_ticks += other.segment_ticks
        self.seq += other.seq

    def add_segment(self, batch: int, context_sum: int, steps: int, is_fraction: bool, ticks: int,
                    slope: int | None = None) -> None:
        """``steps`` decode steps of ``batch`` rows from ``context_sum``, growing by ``slope`` per step (None:
        ``batch``), lasting ``ticks`` in all; each step gives every row one gap."""
        self.segments.append((batch, context_sum, steps, batch, self.seq, is_fraction,
                              batch if slope is None else slope))
        self.segment_ticks += ticks * batch
        self.seq += 1


def _itl(gaps: _Gaps, costs: TickCosts) -> Percentiles | None:
    """``Percentiles.of_counts`` over the singles and the segments, exact, with the step engine's key types."""
    clock = costs.clock
    keys = sorted(k for k, c in gaps.single.items() if c)
    counts = [gaps.single[k] for k in keys]
    prefix = list(np.cumsum(counts, dtype=object)) if counts else []
    seg = gaps.segments
    n_single = sum(counts)
    total = sum(int(k) * c for k, c in zip(keys, counts, strict=True)) + gaps.segment_ticks
    fixed: dict[int, tuple[int, int]] = {}
    if seg:
        batches = sorted({s[0] for s in seg})
        if costs.unit_decode is None:
            fixed = {b: (costs.decode_weights(b), costs.decode_overhead(b)) for b in batches}
        big = max(s[1] + s[6] * s[2] for s in seg) * max(costs.km, costs.ac, 1) \
            + max((w + o for w, o in fixed.values()), default=0) + costs.fc * batches[-1] + (costs.unit_decode or 0)
        big = max(big, int(keys[-1]) if keys else 0)  # the search's values reach the largest single gap too
        dtype: Any = np.int64 if big < 2 ** 61 else object
        batch = np.array([s[0] for s in seg], dtype=dtype)
        wm = np.array([fixed[s[0]][0] if fixed else 0 for s in seg], dtype=dtype)  # per segment: weights, overhead
        oh = np.array([fixed[s[0]][1] if fixed else 0 for s in seg], dtype=dtype)
        start = np.array([s[1] for s in seg], dtype=dtype)
        steps = np.array([s[2] for s in seg], dtype=dtype)
        rows = np.array([s[3] for s in seg], dtype=dtype)
        slope = np.array([s[6] for s in seg], dtype=dtype)
        flat = slope == 0  # every layer past its window: the segment's steps all last the same
        run = np.where(flat, 1, slope)
        n_seg = int((steps * rows).sum())
    else:
        n_seg = 0
    n = n_single + n_seg
    if not n:
        return None
    unit = costs.unit_decode
    if seg and unit is None and dtype is object:
        try:
            wide = _WideGaps(gaps, costs, keys, counts).percentiles(n, total)
        except OverflowError:  # a duration beyond a float's range: the exact bisection below
            wide = None
        if wide is not None:
            return wide

    def step_values(context: Any) -> Any:
        if unit is not None:
            return np.full(len(seg), unit, dtype=object)
        m = wm + costs.km * context
        c = costs.fc * batch + costs.ac * context
        return np.maximum(m, c) + oh

    def segment_counts(x: int) -> Any:
        """Per segment: its steps whose duration is <= x ticks (a prefix of the segment)."""
        if unit is not None:
            return steps if unit <= x else steps * 0
        y = x - oh
        none = start - run  # gives 0 steps
        if costs.km:
            top = np.minimum(start + run * steps, (y - wm) // costs.km)
        else:
            top = np.where(y >= wm, start + run * steps, none)
        rhs = y - costs.fc * batch
        if costs.ac:
            top = np.minimum(top, rhs // costs.ac)
        else:
            top = np.where(rhs >= 0, top, none)
        counted = np.clip((top - start) // run + 1, 0, steps)
        # a flat segment: all of its steps or none (the first step's context decides)
        return np.where(flat, np.where(top >= start, steps, 0), counted)

    def count_le(x: int) -> int:
        below = 0
        if keys:
            j = bisect.bisect_right(keys, x)
            below = int(prefix[j - 1]) if j else 0
        if seg:
            below += int((segment_counts(x) * rows).sum())
        return below

    values = [int(keys[0]), int(keys[-1])] if keys else []
    if seg:
        values += [int(step_values(start).min()), int(step_values(start + slope * (steps - 1)).max())]
    low, high = min(values), max(values)
    # every gap is a multiple of g ticks: the singles are, and a segment's steps are max(wm + km S, fc B + ac S) + oh
    # (or the unit's ticks). Arrivals of many denominators make the tick tiny beside the step durations (the clock's
    # denominator the lcm of theirs: 10**2400 for 800 prime ones), so the search runs on multiples of g, in
    # log2((high - low) / g) steps instead of log2(high - low) (thousands, each over every segment).
    coefficients = [costs.unit_decode] if unit is not None else [costs.km, costs.fc, costs.ac,
                                                                 *(v for pair in fixed.values() for v in pair)]
    g = math.gcd(*(int(k) for k in keys), *(coefficients if seg else ())) or 1

    def select(rank: int) -> int:
        lo, hi = low // g - 1, high // g  # count_le(lo g) < rank <= count_le(hi g)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if count_le(mid * g) >= rank:
                hi = mid
            else:
                lo = mid
        return hi * g

    def typed_seconds(value: int) -> Any:
        """The value with the number type of its first insertion (a dict keeps its first key)."""
        best: tuple[int, bool] | None = None
        if value in gaps.single:  # the dict's key: its first insertion, whatever its count now
            best = (gaps.first_seen[value], gaps.fraction[value])
        if seg:
            has = (segment_counts(value) - segment_counts(value - 1)) > 0
            if has.any():
                k = min((seg[i][4], i) for i in np.nonzero(has)[0])
                if best is None or k[0] < best[0]:
                    best = (k[0], seg[k[1]][5])
        assert best is not None
        return clock.time(value, best[1])

    found: dict[int, Any] = {}
    value = None
    for k in _summary_ranks(n):  # ascending: the next rank's gap is often the same value (one count, no search)
        if value is None or count_le(value) < k + 1:
            value = select(k + 1)
            typed = typed_seconds(value)
        found[k] = typed
    p50, p90, p99 = (_linear(found.__getitem__, n, q) for q in SUMMARY_QUANTILES)
    return Percentiles(p50, p90, p99, mean=Fraction(total, clock.denominator * n), max=typed_seconds(high))


class _WideGaps:
    """The ITL percentiles of a run whose ticks are too fine for a bisection over tick values (a mixture of
    experts' clock is 2^(thousands) per second): found in floats, then settled exactly in a narrow band.

    A float search over the step durations [s] finds a value x with about ``rank`` gaps at or below it; every
    gap within a relative 2^-20 of x is computed exactly (a few steps per segment near x), those below the band
    are counted from their floats (a step duration is a max of two lines in its context, computed to within
    ~1e-15 relative, far inside the band), and the rank is walked among the exact values in the band. Where the
    band does not hold the rank (it never should), :meth:`percentiles` returns None and the exact bisection runs.
    """

    BAND = 2.0 ** -20

    def __init__(self, gaps: _Gaps, costs: TickCosts, keys: list[int], counts: list[int]) -> None:
        self.gaps, self.costs, self.keys, self.counts = gaps, costs, keys, counts
        d = self.d = costs.clock.denominator
        seg = gaps.segments
        self.batch = np.array([s[0] for s in seg], dtype=float)
        self.start = np.array([s[1] for s in seg], dtype=float)  # context sums
        self.steps = np.array([s[2] for s in seg], dtype=float)
        self.rows = np.array([s[3] for s in seg], dtype=float)
        self.slope = np.array([s[6] for s in seg], dtype=float)
        fixed = {b: (costs.decode_weights(b) / d, costs.decode_overhead(b) / d) for b in {s[0] for s in seg}}
        self.wm = np.array([fixed[s[0]][0] for s in seg], dtype=float)
        self.oh = np.array([fixed[s[0]][1] for s in seg], dtype=float)
        self.km, self.fc, self.ac = costs.km / d, costs.fc / d, costs.ac / d
        self.f_keys = np.array([int(k) / d for k in keys], dtype=float)
        self.f_prefix = np.cumsum(np.array(counts, dtype=float)) if counts else np.zeros(0)

    def values(self, j: Any) -> Any:
        """Per segment: the float duration [s] of its step j (an array of steps, or one index for all)."""
        context = self.start + self.slope * j
        return np.maximum(self.wm + self.km * context, self.fc * self.batch + self.ac * context) + self.oh

    def counts_le(self, x: float) -> Any:
        """Per segment: its steps whose float duration is <= x [s] (a prefix: durations grow with the context)."""
        y = x - self.oh
        slope = self.slope
        top = self.start + slope * self.steps
        with np.errstate(divide="ignore", invalid="ignore"):
            top = np.minimum(top, (y - self.wm) / self.km) if self.km else np.where(y >= self.wm, top, -np.inf)
            rhs = y - self.fc * self.batch
            top = np.minimum(top, rhs / self.ac) if self.ac else np.where(rhs >= 0, top, -np.inf)
            counted = np.clip(np.floor((top - self.start) / np.where(slope == 0, 1, slope)) + 1, 0, self.steps)
        return np.where(slope == 0, np.where(top >= self.start, self.steps, 0), counted)

    def count_le(self, x: float) -> float:
        j = int(np.searchsorted(self.f_keys, x, side="right"))
        return (float(self.f_prefix[j - 1]) if j else 0.0) + float(self.counts_le(x) @ self.rows)

    def band(self, x: float) -> tuple[float, dict[int, list[Any]]] | None:
        """(gaps below the band, {exact value: [count, first seen, is Fraction]} inside) for the band around x."""
        lo_f, hi_f = x * (1 - self.BAND), x * (1 + self.BAND)
        first, last = self.counts_le(lo_f), self.counts_le(hi_f)
        lo, hi = math.floor(Fraction(lo_f) * self.d), math.ceil(Fraction(hi_f) * self.d)
        if hi - lo < 4:  # a tick too coarse for a band: the exact bisection is short then
            return None
        keys = self.keys
        j0, j1 = bisect.bisect_right(keys, lo), bisect.bisect_right(keys, hi)
        below = float(first @ self.rows) + (sum(self.counts[:j0]) if j0 else 0)
        inside: dict[int, list[Any]] = {}
        for k in range(j0, j1):
            key = keys[k]
            inside[int(key)] = [self.counts[k], self.gaps.first_seen[key], isinstance(key, _FractionTicks)]
        seg, decode = self.gaps.segments, self.costs.decode
        for i in np.nonzero(last > first)[0]:
            if last[i] - first[i] > 4096:
                return None
            b, s0, _, rows, seq, frac, slope = seg[i]
            for j in range(int(first[i]), int(last[i])):
                value = decode(b, s0 + slope * j)
                if value <= lo:
                    below += rows
                elif value <= hi:
                    entry = inside.setdefault(value, [0, seq, frac])
                    entry[0] += rows
                    if seq < entry[1]:
                        entry[1], entry[2] = seq, frac
                else:  # pragma: no cover - float rounding far outside the band
                    return None
        single = self.gaps.single
        for value, entry in inside.items():  # a single whose count was taken back to 0 still gives the type
            if value in single and not single[value] and self.gaps.first_seen[value] < entry[1]:
                entry[1], entry[2] = self.gaps.first_seen[value], self.gaps.fraction[value]
        return below, inside

    def select(self, rank: int, low: float, high: float) -> Any:
        """The rank-th gap [s] (nearest rank, 1-based) with the number type of its first insertion, or None."""
        for _ in range(2100):  # a float bisection: at most ~2,100 halvings between two doubles
            mid = (low + high) / 2
            if mid <= low or mid >= high:
                break
            if self.count_le(mid) >= rank:
                high = mid
            else:
                low = mid
        found = self.band(high)
        if found is None:
            return None
        below, inside = found
        if not below < rank <= below + sum(e[0] for e in inside.values()):
            return None
        for value in sorted(inside):
            below += inside[value][0]
            if below >= rank:
                return self.costs.clock.time(value, inside[value][2])
        return None  # pragma: no cover - the check above

    def percentiles(self, n: int, total: int) -> Percentiles | None:
        top = float(max(self.values(self.steps - 1).max(), self.f_keys[-1] if len(self.f_keys) else 0.0))
        bottom = float(min(self.values(0).min(), self.f_keys[0] if len(self.f_keys) else math.inf))
        low = bottom * (1 - 2 * self.BAND)
        found = {k: self.select(k + 1, low, top * (1 + 2 * self.BAND)) for k in _summary_ranks(n)}
        biggest = self.select(n, low, top * (1 + 2 * self.BAND))
        if biggest is None or any(p is None for p in found.values()):
            return None
        p50, p90, p99 = (_linear(found.__getitem__, n, q) for q in SUMMARY_QUANTILES)
        return Percentiles(p50, p90, p99, mean=Fraction(total, self.d * n), max=biggest)


def _tick_summary(self: Any, policy: str, clock: TickClock, arr: list[int], arr_fraction: list[bool],
                  times: tuple[list[Any], ...], fractions: tuple[list[bool], ...], itl: Percentiles | None) -> Summary:
    """:func:`~roofline.sim.results.summarize` computed on the ticks of run ``self`` (exact; the same values and
    number types): ``times`` and ``fractions`` are the admitted, first-token, finish and hand-back ticks and
    their number types."""
    admitted, first, _, handed = times
    admitted_fraction, first_fraction, _, handed_fraction = fractions
    time = clock.time
    n = self.n
    done = [i for i in range(n) if handed[i] is not None]
    # first_arrival = min(arrivals): the first request's (arrivals are in order; min keeps the first)
    fa, fa_fraction = (arr[0], arr_fraction[0]) if n else (0, False)
    done_handed = [handed[i] for i in done]
    if done:  # max keeps the first of equal maxima
        best = done[done_handed.index(max(done_handed))]  # type: ignore[type-var]
        last, last_fraction = handed[best], handed_fraction[best]
        assert last is not None
    else:
        last, last_fraction = fa, fa_fraction
    makespan = time(last - fa, last_fraction or fa_fraction)
    output = sum([self.output[i] for i in done])
    zero = self.cost.to_time(0)
    if self.first_start is None or self.end is None:
        busy = zero
    else:
        busy = _seconds(clock, self.end - self.first_start - self.idle)
    done_arr = [arr[i] for i in done]
    done_arr_fraction = [arr_fraction[i] for i in done]

    def since_arrival(ticks: list[Any], fractions: list[bool]) -> Percentiles | None:
        values = [t - a for t, a in zip(ticks, done_arr, strict=True)]
        flags = [x or y for x, y in zip(fractions, done_arr_fraction, strict=True)]
        return _percentiles(values, flags, clock)

    first_done = [first[i] for i in done]
    queue = since_arrival([admitted[i] for i in done], [admitted_fraction[i] for i in done])
    ttft = since_arrival(first_done, [first_fraction[i] for i in done])
    e2e = since_arrival(done_handed, [handed_fraction[i] for i in done])
    decoding = [k for k, i in enumerate(done) if self.output[i] >= 2]
    tpot = _percentiles_of_ratios([done_handed[k] - first_done[k] for k in decoding],  # type: ignore[operator]
                                  [self.output[done[k]] - 1 for k in decoding], clock.denominator)
    mixed = self.mixed_steps
    return Summary(
        policy=policy, requests=n, completed=len(done), rejected=n - self.reason.count(None),
        preemptions=sum(self.preemptions), steps=self.steps, prefill_steps=self.prefill_steps,
        decode_steps=self.steps - self.prefill_steps - mixed, output_tokens=output, makespan_s=makespan,
        busy_s=busy, mixed_steps=mixed, output_tokens_per_s=Fraction(output) / makespan if makespan else None,
        long_run_useful_share=Fraction(self.useful_rows, self.rows) if self.rows else None,
        per_batch_useful_share=Fraction(self.batch_share_sum) / self.batches if self.batches else None,
        slot_occupancy=Fraction(self.slot_rows, self.max_batch * self.steps) if self.steps else None,
        queue_wait=queue, ttft=ttft, tpot=tpot, e2e=e2e, itl=itl,
        peak_kv_tokens=self.peak_tokens, peak_kv_blocks=self.peak_blocks,
        kv_capacity_blocks=self.pool.capacity_blocks, block_size=self.pool.block_size,
        peak_running=self.peak_running,
    )


def _percentiles(values: list[int], flags: list[bool], clock: TickClock) -> Percentiles | None:
    """``Percentiles.of`` for times given in ticks with their number types: the same elements, exact mean."""
    if not values:
        return None
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)  # stable, as sorted(values)
    time = clock.time

    def at(k: int) -> Any:
        i = order[k]
        return time(values[i], flags[i])

    p50, p90, p99 = (_linear(at, n, q) for q in SUMMARY_QUANTILES)
    return Percentiles(p50, p90, p99, mean=Fraction(sum(values), clock.denominator * n), max=at(n - 1))


def _percentiles_of_ratios(ticks: list[int], divisors: list[int], denominator: int) -> Percentiles | None:
    """``Percentiles.of`` for the Fractions ticks / (denominator x divisor), found by selection, exact.

    Correctly rounded division is monotone, so ordering by the floats of the values orders the
    exact values up to ties among equal floats; each rank's element is then chosen exactly within
    its group of equal floats (compared by cross-multiplication), so the result is the element
    ``sorted`` of the Fractions would give, with no Fraction made but the five returned.
    """
    if not ticks:
        return None
    n = len(ticks)
    approx: list[Any]
    try:
        approx = [t / (q * denominator) for t, q in zip(ticks, divisors, strict=True)]  # [s], correctly rounded
    except OverflowError:  # a value beyond a float's range: order the exact values
        approx = [Fraction(t, q * denominator) for t, q in zip(ticks, divisors, strict=True)]
    order = sorted(range(n), key=approx.__getitem__)
    positions: dict[Any, tuple[int, int]] = {}  # float -> (first, last + 1) positions in ``order``
    for position, i in enumerate(order):
        value = approx[i]
        first, _ = positions.get(value, (position, position))
        positions[value] = (first, position + 1)

    def at_rank(rank: int) -> int:
        first, stop = positions[approx[order[rank]]]
        if stop - first == 1:
            return order[rank]
        def exact_order(a: int, b: int) -> int:
            return ticks[a] * divisors[b] - ticks[b] * divisors[a]

        group = sorted(order[first:stop], key=functools.cmp_to_key(exact_order))  # stable: ties keep their order
        return group[rank - first]

    def at(i: int) -> Fraction:
        return Fraction(ticks[i], denominator * divisors[i])

    by_divisor: dict[int, int] = {}  # divisor -> sum of its ticks (few divisors: one product each)
    for t, q in zip(ticks, divisors, strict=True):
        by_divisor[q] = by_divisor.get(q, 0) + t
    common = math.lcm(*by_divisor)
    mean = Fraction(sum(t * (common // q) for q, t in by_divisor.items()), denominator * common * n)
    p50, p90, p99 = (_linear(lambda k: at(at_rank(k)), n, q) for q in SUMMARY_QUANTILES)
    return Percentiles(p50, p90, p99, mean=mean, max=at(at_rank(n - 1)))


def _serial_itl(self: Any, first: list[Any], handed: list[Any], first_fraction: list[bool]) -> Percentiles | None:
    """Serial serving's ``Percentiles.of_counts`` of every decode step's duration, from the first-token and
    hand-back ticks of run ``self``, without expanding a stretch into its steps.

    Serial serving streams: request i's gaps are its decode steps, at contexts p_i + 1, ...,
    p_i + o_i - 1, and a batch-1 step's duration is a nondecreasing function of its context
    (the max of two lines with slopes >= 0, plus a constant). So the gap at rank k is the
    duration at the context of rank k in the multiset of contexts, a union of intervals: one
    sweep over their 2R endpoints, whatever the lengths, finds the ranks the percentiles read.
    """
    costs = self.costs
    clock = costs.clock
    delta: dict[int, int] = {}
    total_ticks = n = top = 0
    fraction: bool | None = None
    for i, h in enumerate(handed):
        o = self.output[i]
        if h is None or o < 2:
            continue
        if fraction is None:  # the multiset's keys keep the first gap's number type
            fraction = first_fraction[i] or costs.decode_fraction
        lo, hi = self.prompt[i] + 1, self.prompt[i] + o  # contexts lo .. hi - 1
        delta[lo] = delta.get(lo, 0) + 1
        delta[hi] = delta.get(hi, 0) - 1
        n += o - 1
        total_ticks += h - first[i]
        if hi - 1 > top:
            top = hi - 1
    if not n:
        return None
    assert fraction is not None
    ranks = [k + 1 for k in _summary_ranks(n)]  # 1-based, increasing
    found: list[int] = []
    seen = active = 0
    position = 0
    for x in sorted(delta):
        while len(found) < len(ranks) and active and seen + active * (x - position) >= ranks[len(found)]:
            found.append(position + -(-(ranks[len(found)] - seen) // active) - 1)
        seen += active * (x - position)
        active += delta[x]
        position = x
    time = clock.time

    def gap(context: int) -> Any:  # token-layers grow with the context too: still nondecreasing
        return time(costs.decode(1, costs.held(context)), fraction)

    mean = Fraction(total_ticks, clock.denominator * n)
    at = dict(zip(ranks, found, strict=True))
    p50, p90, p99 = (_linear(lambda k: gap(at[k + 1]), n, q) for q in SUMMARY_QUANTILES)
    return Percentiles(p50, p90, p99, mean=mean, max=gap(top))


def _seconds(clock: TickClock, value: Any) -> Any:
    """A typed tick value (``_FractionTicks`` or int) as seconds in the step clock's number type."""
    if value is None:
        return None
    if type(value) is _FractionTicks:
        return Fraction(int(value), clock.denominator)
    return value // clock.denominator


def tick_result(run: Any, policy: str, options: dict[str, Any]) -> SimResult:
    """The :class:`~roofline.sim.SimResult` of run ``run`` (a ``run._Run`` on the stretch clock), in seconds.

    The summary is computed on the ticks (:func:`_tick_summary`); the per-request times stay ticks
    in a :class:`~roofline.sim.results.RequestTable`, made seconds when read. Equal, field by field
    and type by type, to what the step clock's :meth:`~roofline.sim.run._Run.result` gives.
    """
    costs: TickCosts = run.costs
    clock = costs.clock

    def split(values: list[Any]) -> tuple[list[Any], list[bool]]:
        return [None if v is None else int(v) for v in values], [type(v) is _FractionTicks for v in values]

    arr, arr_fraction = split(run.arrival)
    times, flags = zip(*(split(values) for values in (run.admitted, run.first, run.finish, run.handed)), strict=True)
    if policy == "serial":
        itl = _serial_itl(run, times[1], times[3], flags[1])
    else:
        itl = _itl(run.gaps, costs) if run.streams else None
    summary = _tick_summary(run, policy, clock, arr, arr_fraction, times, flags, itl)
    if run.closed is not None:
        arrival = [_seconds(clock, v) for v in run.arrival]
        requests = tuple(Request(id=j, arrival_s=arrival[j], prompt_tokens=p, output_tokens=o)
                         for j, (p, o) in enumerate(zip(run.prompt, run.output, strict=True)))
        options = dict(options, workload=run.closed.to_dict())
    else:
        requests, arrival = run.requests, run.arrival_s
        if run.spec is not None:
            options = dict(options, workload=run.spec)
    results = RequestTable(requests, arrival, times, flags, run.preemptions, run.prefilled, run.generated, run.reason,
                           run.client, clock.denominator)
    options = dict(options, kv_capacity_blocks=run.pool.capacity_blocks, block_size=run.pool.block_size)
    if run.windows is not None:
        options["kv_units"] = "token-layers"
    table = run.table.table if isinstance(run.table, _TicksTable) else run.table
    return SimResult(policy, options, results, table, summary)
