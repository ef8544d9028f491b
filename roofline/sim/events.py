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
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import policies as _policies
from .policies import _Chunked, _Continuous, _Run
from .requests import Request
from .results import Percentiles, RequestResult, SimResult, StepTable
from .stretch import TickCosts, _summary, blocks_growth, first_pool_overflow

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
        if not prefill_tokens:
            return _typed(costs.decode(decode_rows, context_sum), costs.decode_fraction)
        if costs.unit_prefill is not None:  # UnitCostModel.mixed_time: a step with prompt tokens takes `prefill`
            return _typed(costs.unit_prefill, costs.prefill_fraction)
        # roofline.formulas.mixed_step_time x D: bytes W + k (S + p0 + T), FLOPs (D + T) F + a (S + Q)
        m = costs.wm + costs.km * (context_sum + cached_tokens + prefill_tokens)
        c = costs.fc * (decode_rows + prefill_tokens) + costs.ac * (context_sum + attention_pairs)
        return _FractionTicks((m if m >= c else c) + costs.oh)


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
    if seg:
        big = max(s[1] + s[0] * s[2] for s in seg) * max(costs.km, costs.ac, 1) + costs.wm + costs.oh \
            + costs.fc * max(s[0] for s in seg) + (costs.unit_decode or 0)
        dtype: Any = np.int64 if big < 2 ** 61 else object
        batch = np.array([s[0] for s in seg], dtype=dtype)
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

    def step_values(context: Any) -> Any:
        if unit is not None:
            return np.full(len(seg), unit, dtype=object)
        m = costs.wm + costs.km * context
        c = costs.fc * batch + costs.ac * context
        return np.maximum(m, c) + costs.oh

    def segment_counts(x: int) -> Any:
        """Per segment: its steps whose duration is <= x ticks (a prefix of the segment)."""
        if unit is not None:
            return steps if unit <= x else steps * 0
        y = x - costs.oh
        none = start - batch  # gives 0 steps
        if costs.km:
            top = np.minimum(start + batch * steps, (y - costs.wm) // costs.km)
        else:
            top = start + batch * steps if y >= costs.wm else none
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
    coefficients = [costs.unit_decode] if unit is not None else [costs.wm, costs.km, costs.fc, costs.ac, costs.oh]
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
        if k > 1 and nxt < run.n and run.arrival[nxt] is not None:
            context = self.base + batch * (self.tick + 1)
            horizon = int(run.arrival[nxt]) - int(now)
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
                    else pool.lifetime_blocks(run.prompt[i], run.output[i]))
            if self.blocks + grow + need <= run.capacity:
                return 0
        return self._stretch_steps(now)


def serve_events(run: _Run, *, max_num_seqs: int, on_demand: bool, chunked: bool, budget: Any,
                 budget_name: str, policy: str, options: dict[str, Any]) -> SimResult | None:
    """Serve a prepared run of :func:`~roofline.sim.serve_continuous` on the event engine.

    Parameters
    ----------
    run : policies._Run
        The step engine's run state, validated and with its rejections on arrival made.
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
    SimResult equal to the step engine's, or None when the cost model has no stretch sums
    (:meth:`~roofline.sim.stretch.TickCosts.rationals`; the caller runs the step engine).

    Raises
    ------
    SimulationError
        ``max_steps`` passed (the same message as the step engine's).
    """
    cost = run.cost
    if TickCosts.rationals(cost) is None or run.windows is not None:
        return None  # no stretch sums for this cost model, or sliding windows (per-sequence sums)
    arrivals = [a for a in run.arrival if a is not None]
    think = run.think if run.closed is not None else None
    costs = TickCosts.build(cost, [*arrivals, *([think] if think is not None else []), run.idle])
    if costs is None:  # pragma: no cover - rationals() said it has them
        return None
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
    return _result(run, costs, gaps, policy, options, seconds)


def _result(run: _Run, costs: TickCosts, gaps: _Gaps, policy: str, options: dict[str, Any],
            seconds: Any) -> SimResult:
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
    view.admitted, view.admitted_fraction = split(run.admitted)
    view.first, view.first_fraction = split(run.first)
    view.handed, view.handed_fraction = split(run.handed)
    summary = _summary(view, policy)
    arrival = [seconds(v) for v in run.arrival]
    if run.closed is not None:
        requests = tuple(Request(id=j, arrival_s=arrival[j], prompt_tokens=p, output_tokens=o)
                         for j, (p, o) in enumerate(zip(run.prompt, run.output, strict=True)))
        options = dict(options, workload=run.closed.to_dict())
    else:
        requests = run.requests
        if run.spec is not None:
            options = dict(options, workload=run.spec)
    made: dict[Any, Any] = {}

    def time(value: Any) -> Any:
        if type(value) is not _FractionTicks:
            return None if value is None else value // costs.clock.denominator
        out = made.get(value)
        if out is None:
            out = made[value] = seconds(value)
        return out

    results = tuple(
        RequestResult(r, arrival[i], time(run.admitted[i]), time(run.first[i]), time(run.finish[i]),
                      time(run.handed[i]), run.preemptions[i], run.prefilled[i], run.generated[i], run.reason[i],
                      run.client[i])
        for i, r in enumerate(requests)
    )
    options = dict(options, kv_capacity_blocks=run.pool.capacity_blocks, block_size=run.pool.block_size)
    return SimResult(policy, options, results, run.table, summary)


_policies._EVENT_ENGINE["continuous"] = serve_events
