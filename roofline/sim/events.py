"""The event engine for continuous batching: the step engine's scheduler on a tick clock, jumping decode stretches.

Continuous batching (:func:`~roofline.sim.serve_continuous`: reserve and on-demand
admission with preemption by recompute, separate and chunked prefill, closed-loop
clients) decides at every step boundary. Between two events the decisions repeat: the
batch is fixed, nobody can be admitted (the queue is empty or its head cannot be: the
batch is full, or the KV pool or the token budget has no room, and neither frees up
without a finish), nobody finishes and the pool does not run out. This module runs the
step engine's own scheduler (``policies._Continuous`` and ``policies._Chunked``) and
replaces each such run of decode steps by one closed-form stretch
(:meth:`~roofline.sim.stretch.TickCosts.stretch`); a stretch ends at the first of

* the next finish (the smallest finishing tick of the running sequences),
* the first step boundary at or after the next arrival (the step engine looks at arrivals
  at every boundary),
* the step before the KV pool would overflow (on-demand admission preempts then:
  :func:`~roofline.sim.stretch.first_pool_overflow`),
* the ``max_steps`` safeguard,

and every other step runs as in the step engine, one at a time. Events are arrivals,
admissions, prefills, finishes and preemptions, so the cost grows with requests, not
tokens.

Time is kept in integer ticks of the run's common denominator D
(:class:`~roofline.sim.stretch.TickClock`, computed from the cost model's constants, the
arrivals and the think time). A tick value remembers whether the step engine's value is
a Fraction or an int (``_FractionTicks``), so the results carry the step engine's number
types; seconds appear only in the results.

Inter-token latency: the gaps of a stretch's steps are kept as a segment (batch, first
context sum, steps, rows); the percentiles are found by a binary search over tick values
whose counting step is O(1) per segment (a step's duration grows with its context sum,
so the steps of a segment at or below a value are a prefix), vectorised with numpy.

The step table, when asked for, is the step engine's :class:`~roofline.sim.StepTable`;
a stretch is written into it step by step (the table's cost grows with steps; the
results and summary do not need it).

Runs with sliding-window layers (:class:`~roofline.sim.LayerWindows`) take the step engine:
the running sequences' contexts differ and each crosses the windows on its own, so a decode
stretch's context sum is not one line in its steps.

Conventions: docs/conventions.md, "Serving policies" and "Latency metrics".
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import policies as _policies
from .policies import _Chunked, _Continuous, _Run
from .requests import Request
from .results import Percentiles, RequestTable, SimResult, StepTable
from .stretch import TickCosts, _summary, blocks_growth, first_pool_overflow, on_fine_enough_clock

__all__: list[str] = []


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

    def add_prefill(self, start: int, end: int, *args: Any) -> None:
        self.table.add_prefill(self.seconds(start), self.seconds(end), *args)

    def add_decode(self, start: int, end: int, *args: Any) -> None:
        self.table.add_decode(self.seconds(start), self.seconds(end), *args)

    def add_mixed(self, start: int, end: int, *args: Any) -> None:
        self.table.add_mixed(self.seconds(start), self.seconds(end), *args)


class _Gaps:
    """The run's inter-token gaps in ticks: single values (value -> count) and stretch segments."""

    def __init__(self) -> None:
        self.single: dict[int, int] = {}
        self.first_seen: dict[int, int] = {}
        self.segments: list[tuple[int, int, int, int, int, bool]] = []  # batch, context sum, steps, rows, seq, frac
        self.seq = 0
        self.segment_ticks = 0  # sum of the segments' gaps

    def add(self, gap: int, count: int = 1) -> None:
        single = self.single
        if gap in single:
            single[gap] += count
        else:
            single[gap] = count
            self.first_seen[gap] = self.seq
        self.seq += 1

    def add_segment(self, batch: int, context_sum: int, steps: int, is_fraction: bool, ticks: int) -> None:
        self.segments.append((batch, context_sum, steps, batch, self.seq, is_fraction))
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
            fixed = {b: (costs.weights(b), costs.overhead(b)) for b in batches}
        big = max(s[1] + s[0] * s[2] for s in seg) * max(costs.km, costs.ac, 1) \
            + max((w + o for w, o in fixed.values()), default=0) + costs.fc * batches[-1] + (costs.unit_decode or 0)
        big = max(big, int(keys[-1]) if keys else 0)  # the search's values reach the largest single gap too
        dtype: Any = np.int64 if big < 2 ** 61 else object
        batch = np.array([s[0] for s in seg], dtype=dtype)
        wm = np.array([fixed[s[0]][0] if fixed else 0 for s in seg], dtype=dtype)  # per segment: weights, overhead
        oh = np.array([fixed[s[0]][1] if fixed else 0 for s in seg], dtype=dtype)
        start = np.array([s[1] for s in seg], dtype=dtype)
        steps = np.array([s[2] for s in seg], dtype=dtype)
        rows = np.array([s[3] for s in seg], dtype=dtype)
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
        none = start - batch  # gives 0 steps
        if costs.km:
            top = np.minimum(start + batch * steps, (y - wm) // costs.km)
        else:
            top = np.where(y >= wm, start + batch * steps, none)
        rhs = y - costs.fc * batch
        if costs.ac:
            top = np.minimum(top, rhs // costs.ac)
        else:
            top = np.where(rhs >= 0, top, none)
        return np.clip((top - start) // batch + 1, 0, steps)

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
        values += [int(step_values(start).min()), int(step_values(start + batch * (steps - 1)).max())]
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
        if value in gaps.single and gaps.single[value]:
            key = keys[_index(keys, value)]
            best = (gaps.first_seen[value], isinstance(key, _FractionTicks))
        if seg:
            has = (segment_counts(value) - segment_counts(value - 1)) > 0
            if has.any():
                k = min((seg[i][4], i) for i in np.nonzero(has)[0])
                if best is None or k[0] < best[0]:
                    best = (k[0], seg[k[1]][5])
        assert best is not None
        return clock.time(value, best[1])

    ranks = [-(-q * n // 100) for q in (50, 90, 99)]
    p50, p90, p99 = (typed_seconds(select(r)) for r in ranks)
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
        fixed = {b: (costs.weights(b) / d, costs.overhead(b) / d) for b in {s[0] for s in seg}}
        self.wm = np.array([fixed[s[0]][0] for s in seg], dtype=float)
        self.oh = np.array([fixed[s[0]][1] for s in seg], dtype=float)
        self.km, self.fc, self.ac = costs.km / d, costs.fc / d, costs.ac / d
        self.f_keys = np.array([int(k) / d for k in keys], dtype=float)
        self.f_prefix = np.cumsum(np.array(counts, dtype=float)) if counts else np.zeros(0)

    def values(self, j: Any) -> Any:
        """Per segment: the float duration [s] of its step j (an array of steps, or one index for all)."""
        context = self.start + self.batch * j
        return np.maximum(self.wm + self.km * context, self.fc * self.batch + self.ac * context) + self.oh

    def counts_le(self, x: float) -> Any:
        """Per segment: its steps whose float duration is <= x [s] (a prefix: durations grow with the context)."""
        y = x - self.oh
        top = self.start + self.batch * self.steps
        with np.errstate(divide="ignore", invalid="ignore"):
            top = np.minimum(top, (y - self.wm) / self.km) if self.km else np.where(y >= self.wm, top, -np.inf)
            rhs = y - self.fc * self.batch
            top = np.minimum(top, rhs / self.ac) if self.ac else np.where(rhs >= 0, top, -np.inf)
        return np.clip(np.floor((top - self.start) / self.batch) + 1, 0, self.steps)

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
            b, s0, _, rows, seq, frac = seg[i]
            for j in range(int(first[i]), int(last[i])):
                value = decode(b, s0 + b * j)
                if value <= lo:
                    below += rows
                elif value <= hi:
                    entry = inside.setdefault(value, [0, seq, frac])
                    entry[0] += rows
                    if seq < entry[1]:
                        entry[1], entry[2] = seq, frac
                else:  # pragma: no cover - float rounding far outside the band
                    return None
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
        picks = [self.select(-(-q * n // 100), low, top * (1 + 2 * self.BAND)) for q in (50, 90, 99)]
        biggest = self.select(n, low, top * (1 + 2 * self.BAND))
        if biggest is None or any(p is None for p in picks):
            return None
        p50, p90, p99 = picks
        return Percentiles(p50, p90, p99, mean=Fraction(total, self.d * n), max=biggest)


def _index(keys: list[int], value: int) -> int:
    return bisect.bisect_left(keys, value)


class _Jumps:
    """The stretch jump shared by both schedulers (mixed into subclasses of ``_Continuous``/``_Chunked``)."""

    run: _Run
    costs: TickCosts
    gaps: _Gaps
    heap: list[tuple[int, int]]
    nxt: int
    step_cap: int
    tick_cost: _TickCostModel

    def _next_finish(self: Any) -> int:
        heap, finish, running = self.heap, self.finish_tick, self.running
        while heap and (finish[heap[0][1]] != heap[0][0] or heap[0][1] not in running):
            heapq.heappop(heap)
        return heap[0][0]

    def _rotated(self: Any) -> dict[int, int]:
        """Running sequences by KV before the next step, mod b: {residue: count}, the nonzero ones only
        (O(batch), not O(b): a block size of 10**9 is a valid pool)."""
        b, tick = self.block_size, self.tick
        return {(r + tick) % b: count for r, count in self.residues.items() if count}

    def _stretch_steps(self: Any, now: int) -> int:
        """Decode steps that can run as one stretch from ``now`` (the first may need a preemption: 0 then)."""
        run, costs = self.run, self.costs
        batch = len(self.running)
        k = self._next_finish() - self.tick
        k = min(k, self.step_cap - run.steps)
        nxt = self.nxt
        coming = run.next_arrival(nxt) if k > 1 and nxt < run.n else None
        if coming is not None:
            context = self.base + batch * (self.tick + 1)
            horizon = int(coming) - int(now)
            if costs.stretch(batch, context, k) >= horizon:  # the arrival comes within: stop at its boundary
                k = costs.steps_until(batch, context, horizon)
        b = self.block_size
        # a sequence takes at most ceil(k / b) blocks in k steps: look for the overflow only when it may come
        if self.on_demand and batch * -(-k // b) > run.capacity - self.blocks:
            rotated = self._rotated()  # by KV before the stretch, mod b
            over = first_pool_overflow(rotated, b, run.capacity - self.blocks)
            if over is not None:
                k = min(k, over - 1)
        return k

    def _jump(self: Any, now: int, k: int, chunked: bool) -> int:
        """Run k >= 2 decode steps of the fixed batch as one stretch; returns its end (typed ticks)."""
        run, costs, running = self.run, self.costs, self.running
        batch = len(running)
        b = self.block_size
        c1 = self.base + batch * (self.tick + 1)
        end1 = now + self.tick_cost.decode_time(batch, c1)
        self._decode_gaps(batch, end1)  # the first step's gaps (fresh rows differ); then a segment
        rest = costs.stretch(batch, c1 + batch, k - 1)
        end = end1 + _typed(rest, costs.decode_fraction)
        self.gaps.add_segment(batch, c1 + batch, k - 1, isinstance(end1, _FractionTicks), rest)
        self.last_decode_end = end
        if run.table is not None:  # expand the stretch into the step table (only when it is asked for)
            t, blocks, decode = now, self.blocks, self.tick_cost.decode_time
            for j in range(k):
                context = c1 + batch * j
                if self.on_demand:
                    blocks += self.residues[(-(self.tick + j)) % b]
                s, t = t, t + decode(batch, context)
                run.table.add_decode(s, t, batch, batch, context, blocks)
        if self.on_demand:
            self.blocks += blocks_growth(self._rotated(), b, k)
        self.tick += k
        run.peak(c1 + batch * (k - 1), self.blocks)
        run.steps += k
        run.useful_rows += batch * k
        run.rows += batch * k
        run.slot_rows += batch * k
        for i in self.buckets.pop(self.tick, ()):
            if self.finish_tick[i] == self.tick and i in running:
                self._leave(i)
                del running[i]
                if chunked:
                    del self.order[i]
                run.hand_back(i, end)
        return end

    def _join(self: Any, i: int, t: Any) -> None:
        super()._join(i, t)  # type: ignore[misc]
        heapq.heappush(self.heap, (self.finish_tick[i], i))


class _EventContinuous(_Jumps, _Continuous):
    def serve(self) -> None:
        run = self.run
        n = run.n
        limit = run.step_limit()
        self.step_cap = limit + 1
        now: Any = run.arrival[0] if n else None
        self.nxt = 0
        while True:
            self.nxt = self._arrivals(self.nxt, now)
            admitted = self._admit(now) if self.waiting else None
            if admitted:
                now = self._prefill(admitted, now)
            elif self.running:
                k = self._stretch_steps(now)
                now = self._jump(now, k, False) if k > 1 else self._decode(now)
            elif self.waiting:  # pragma: no cover - excluded by the never-fits rule
                return super().serve()
            elif self.nxt < n:
                now = self._idle_until(self.nxt, now)
                continue
            else:
                break
            run.check_steps(limit)
        run.end = now


class _EventChunked(_Jumps, _Chunked):
    def serve(self) -> None:
        run = self.run
        n = run.n
        limit = self.step_limit()
        self.step_cap = limit + 1
        now: Any = run.arrival[0] if n else None
        self.nxt = 0
        while True:
            self.nxt = self._arrivals(self.nxt, now)
            if self.running or self.prefilling or self.waiting:
                k = self._pure_decode_steps(now)
                now = self._jump(now, k, True) if k > 1 else self._step(now)
            elif self.nxt < n:
                now = self._idle_until(self.nxt, now)
                continue
            else:
                break
            run.check_steps(limit)
        run.end = now

    def _pure_decode_steps(self, now: int) -> int:
        """0 unless the next step is decode only and no admission can happen: then the stretch's steps."""
        run = self.run
        if self.prefilling or not self.running:
            return 0
        grow = 0
        if self.on_demand:
            grow = self.residues[-self.tick % self.block_size]
            if self.blocks + grow > run.capacity:
                return 0
        waiting = self.waiting
        if waiting and self.budget - len(self.running) and len(self.order) < self.max_num_seqs:
            i = waiting[0]
            pool = run.pool
            need = (pool.blocks_for(run.prompt[i] + run.generated[i]) if self.on_demand
                    else pool.lifetime_blocks_unchecked(run.prompt[i], run.output[i]))
            if self.blocks + grow + need <= run.capacity:
                return 0
        return self._stretch_steps(now)


def serve_events(run: _Run, make_run: Callable[[], _Run], *, max_num_seqs: int, on_demand: bool, chunked: bool,
                 budget: Any, budget_name: str, policy: str, options: dict[str, Any]) -> SimResult:
    """Serve a run of :func:`~roofline.sim.serve_continuous` on the event engine.

    Parameters
    ----------
    run : policies._Run
        The step engine's run state, validated and with its rejections on arrival made, for a
        cost model with stretch terms (:func:`~roofline.sim.cost.stretch_terms`) and a model
        without sliding windows (the caller checks both).
    make_run : callable () -> policies._Run
        Makes the same run state again, for a run that starts over on a finer clock (a mixture
        of experts whose step needs more tokens than the clock covered,
        :class:`~roofline.sim.stretch.ClockTooCoarse`).
    max_num_seqs : int >= 1 [sequences]
    on_demand : bool
        On-demand KV admission (preemption by recompute) instead of reserving the lifetime.
    chunked : bool
        Chunked prefill with mixed steps (``budget`` is max_num_batched_tokens), else prefill
        in steps of their own (``budget`` is the prefill token budget or None).
    budget : int or None [tokens]
    budget_name : str, the option's name in rejection reasons
    policy : str, options : dict
        As the step engine puts them in the :class:`~roofline.sim.SimResult`.

    Returns
    -------
    SimResult equal to the step engine's, with ``options["engine"] == "event"``.

    Raises
    ------
    SimulationError
        ``max_steps`` passed (the same message as the step engine's).
    """
    # the most tokens of one step: a (re-)prefill of one request, or the step budget
    longest = max((p + o - 1 for p, o in zip(run.prompt, run.output, strict=True)), default=1)
    first = budget if chunked else min(longest, budget if budget is not None else longest)

    def serve(tokens: int) -> SimResult:
        return _serve_on_clock(run if tokens == first else make_run(), max(tokens, 1), max_num_seqs=max_num_seqs,
                               on_demand=on_demand, chunked=chunked, budget=budget, budget_name=budget_name,
                               policy=policy, options=options)

    return on_fine_enough_clock(serve, first)


def _serve_on_clock(run: _Run, max_tokens: int, *, max_num_seqs: int, on_demand: bool, chunked: bool, budget: Any,
                    budget_name: str, policy: str, options: dict[str, Any]) -> SimResult:
    """:func:`serve_events` on a clock that covers steps of up to ``max_tokens`` tokens."""
    cost = run.cost
    arrivals = [a for a in run.arrival if a is not None]
    think = run.think if run.closed is not None else None
    costs = TickCosts.build(cost, [*arrivals, *([think] if think is not None else []), run.idle],
                            max_tokens=max_tokens)
    assert costs is not None  # serve_events checked the stretch terms
    clock = costs.clock
    d = clock.denominator

    def ticks(value: Any) -> Any:
        if value is None:
            return None
        return _typed(clock.ticks(value), not isinstance(value, int))

    def seconds(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is _FractionTicks:
            return Fraction(int(value), d)
        return value // d

    arrivals_s = run.arrival
    run.arrival = [ticks(a) for a in run.arrival]
    if run.closed is not None:
        run.think = ticks(run.think)
    run.idle = ticks(run.idle)
    table = run.table
    if table is not None:
        run.table = _TicksTable(table, seconds)  # type: ignore[assignment]
    gaps = _Gaps()
    run.add_itl = gaps.add  # type: ignore[method-assign]
    run.cost = _TickCostModel(cost, costs)
    scheduler: Any
    if chunked:
        scheduler = _EventChunked(run, max_num_seqs, on_demand, budget)
    else:
        scheduler = _EventContinuous(run, max_num_seqs, on_demand, budget, budget_name)
    scheduler.costs, scheduler.gaps, scheduler.heap = costs, gaps, []
    scheduler.tick_cost = run.cost
    scheduler.serve()
    run.cost = cost
    run.table = table
    return _result(run, costs, gaps, policy, dict(options, engine="event"), seconds, arrivals_s)


def _result(run: _Run, costs: TickCosts, gaps: _Gaps, policy: str, options: dict[str, Any],
            seconds: Any, arrivals: list[Any]) -> SimResult:
    """The SimResult in seconds, its summary computed on ticks (``stretch._summary``)."""
    def split(values: list[Any]) -> tuple[list[Any], list[bool]]:
        return [None if v is None else int(v) for v in values], [type(v) is _FractionTicks for v in values]

    def pair(value: Any) -> tuple[int, bool] | None:
        return None if value is None else (int(value), type(value) is _FractionTicks)

    view = SimpleNamespace(clock=costs.clock, cost=run.cost, output=run.output, reason=run.reason, pool=run.pool,
                           steps=run.steps, prefill_steps=run.prefill_steps, mixed_steps=run.mixed_steps,
                           useful_rows=run.useful_rows, rows=run.rows, slot_rows=run.slot_rows, batch_share_sum=0,
                           batches=0, batch_size=run.max_batch, preemption_total=sum(run.preemptions),
                           peak_tokens=run.peak_tokens, peak_blocks=run.peak_blocks,
                           first_start=pair(run.first_start), end=pair(run.end), idle=pair(run.idle),
                           requests=range(run.n), itl=lambda: _itl(gaps, costs))
    view.arr, view.arr_fraction = split(run.arrival)
    times, flags = zip(*(split(values) for values in (run.admitted, run.first, run.finish, run.handed)), strict=True)
    view.admitted, view.first, _, view.handed = times
    view.admitted_fraction, view.first_fraction, _, view.handed_fraction = flags
    summary = _summary(view, policy)
    if run.closed is not None:
        arrival = [seconds(v) for v in run.arrival]
        requests = tuple(Request(id=j, arrival_s=arrival[j], prompt_tokens=p, output_tokens=o)
                         for j, (p, o) in enumerate(zip(run.prompt, run.output, strict=True)))
        options = dict(options, workload=run.closed.to_dict())
    else:
        requests = run.requests
        arrival = arrivals
        if run.spec is not None:
            options = dict(options, workload=run.spec)
    results = RequestTable(requests, arrival, times, flags, run.preemptions, run.prefilled, run.generated, run.reason,
                           run.client, costs.clock.denominator)
    options = dict(options, kv_capacity_blocks=run.pool.capacity_blocks, block_size=run.pool.block_size)
    return SimResult(policy, options, results, run.table, summary)


_policies._EVENT_ENGINE["continuous"] = serve_events
