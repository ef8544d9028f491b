"""Continuous (iteration-level) batching, written once for both clocks: prefill in steps of its own, or
chunked prefill with mixed steps.

The schedulers here (:class:`_Continuous`, :class:`_Chunked`) decide at every step boundary, over
one run state (:class:`roofline.sim.run._Run`), as :func:`~roofline.sim.serve_continuous`
documents. On the step clock they take one step at a time. On the stretch clock
(:meth:`~roofline.sim.run._Run.on_ticks`) they take the same decisions, and where the decisions
repeat (the batch is fixed, nobody can be admitted, nobody finishes and the pool does not run
out) they jump a run of decode steps as one closed-form stretch
(:meth:`~roofline.sim.stretch.TickCosts.stretch`); a stretch ends at the first of

* the next finish (the smallest finishing tick of the running sequences),
* the first step boundary at or after the next arrival (the scheduler looks at arrivals at
  every boundary),
* the first step boundary at or after the horizon of :meth:`_Continuous.advance` (data-parallel
  replicas: the next arrival, which the router may send here; :mod:`roofline.sim.replicas`),
* the step before the KV pool would overflow (on-demand admission preempts then:
  :func:`~roofline.sim.stretch.first_pool_overflow`),
* the ``max_steps`` safeguard,
* with sliding windows, the first running sequence whose context passes a window (its token-layers
  then grow by fewer layers per step: the context sum is one line only between such crossings);

and every other step is taken one at a time, as on the step clock. Events are arrivals,
admissions, prefills, finishes, preemptions and windows crossed, so the cost grows with requests,
not tokens. Under on-demand admission with sliding windows, whose windowed layers free blocks as
they move on, decode steps are taken one at a time.

A run may be asked to stop early (``stop_on_misses``: :class:`_SLOWatch`, checked at every step
boundary on either clock; docs/conventions.md, "Stopping a run early").

Conventions: docs/conventions.md, "Serving policies", "Chunked prefill and mixed steps",
"Two clocks, one result".
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter, deque
from fractions import Fraction
from typing import Any

from ..errors import RunMet, RunStopped, SimulationError
from .clock import _FractionTicks, _typed
from .kv import chunk_kv
from .run import _Run
from .stretch import blocks_growth, first_pool_overflow

__all__: list[str] = []


class _SLOWatch:
    """The early stop of ``stop_on_misses`` (docs/conventions.md, "Stopping a run early"), one per run, shared by
    all its schedulers (data-parallel replicas count their misses together).

    ``limits``: metric (``"ttft_s"``, ``"tpot_s"``) -> (limit [s] > 0, allowed misses >= 0). Each scheduler
    counts, in index (= arrival) order, the requests known to miss a limit, and stops at the first one not
    decided yet (so each count is a lower bound on the misses, exact for the requests served once the run is
    over). TTFT: a first token more than the limit after the arrival, or none yet at a boundary more than the
    limit after it (it comes at the end of a later step). TPOT (requests of O >= 2): handed back with
    (handed back - first token) > limit x (O - 1), or not yet handed back at a boundary more than limit x (O - 1)
    after its first token (its hand-back is later). A rejected request misses both. :meth:`add` raises
    :class:`~roofline.errors.RunStopped` once a count exceeds its allowance, with the most sequences any
    watched run held at once so far (``runs``: each scheduler's, registered by ``watch_slo``).
    """

    METRICS = ("ttft_s", "tpot_s")

    def __init__(self, limits: dict[str, tuple[Any, int]], verdict_only: bool = False) -> None:
        self.limits = limits
        self.missed = dict.fromkeys(limits, 0)
        self.runs: list[_Run] = []
        self.verdict_only = verdict_only  # settle: a run that met every limit raises RunMet (no result built)

    def settle(self, run: _Run) -> None:
        """At the end of one scheduler's whole run (every request decided, so each count is exact): with
        ``verdict_only``, raise :class:`~roofline.errors.RunMet` when nothing was refused and every count is below
        its allowance (fewer than n - floor(h) - 1 of n values over a limit: v[floor h] and v[floor h + 1] are
        within it, and so is the percentile between them). Else nothing (the count at its allowance leaves the
        percentile's interpolation to decide)."""
        if self.verdict_only and run.reason.count(None) == run.n and all(
                self.missed[metric] < allowed for metric, (_, allowed) in self.limits.items()):
            raise RunMet(dict(self.missed), run.peak_running)

    def limit_on(self, run: _Run, metric: str) -> Any:
        """A metric's limit on ``run``'s clock (None when that metric is not watched): seconds on the step clock;
        on the stretch clock exact ticks, a Fraction (whose times are whole ticks, so a time exceeds x ticks iff it
        exceeds floor(x))."""
        if metric not in self.limits:
            return None
        limit = self.limits[metric][0]
        return limit if run.costs is None else Fraction(limit) * run.costs.clock.denominator

    def add(self, metric: str, missed: int) -> None:
        self.missed[metric] += missed
        limit, allowed = self.limits[metric]
        if self.missed[metric] > allowed:
            raise RunStopped(metric, limit, allowed, self.missed[metric],
                             peak_running=max(run.peak_running for run in self.runs))


class _Continuous:
    """The continuous-batching loop over a :class:`_Run` (prefill in steps of its own).

    Bookkeeping: ``tick`` counts decode steps. A running sequence i has generated
    g_i = tick + off_i tokens and holds P_i + g_i - 1 KV tokens before the next decode step,
    so the KV held by all running sequences is ``base + len(running) x tick`` with
    ``base`` = sum(P_i + off_i - 1); it finishes when tick reaches O_i - off_i. A sequence
    takes a new block in a decode step iff its KV before the step is a multiple of the block
    size: iff (P_i + off_i - 1 + tick) % b == 0, so sequences are counted by that residue.

    Inter-token latency: every running sequence got its last token at the end of the last
    decode step (``last_decode_end``), except those that joined since (``fresh``: the end
    of their prefill step), so a decode step counts its gaps in O(1 + joins). ITL is over the
    requests handed back (docs/conventions.md, "Latency percentiles"): where a request can be
    refused after a preemption (on-demand admission, a prompt budget, a request whose P + O - 1
    exceeds it), the gaps shared by the batch are kept in order (``ledger``: one entry per decode
    step or stretch) and each sequence's own gaps and ledger ranges (``own``), so a refusal takes
    that request's gaps back.
    """

    def __init__(self, run: _Run, max_num_seqs: int, on_demand: bool, max_prefill: int | None,
                 budget_name: str = "max_prefill_tokens") -> None:
        self.run = run
        self.max_num_seqs = max_num_seqs
        self.on_demand = on_demand
        self.max_prefill = math.inf if max_prefill is None else max_prefill
        self.budget_name = budget_name
        n = run.n
        self.off = [0] * n
        self.finish_tick = [-1] * n
        self.lifetimes = [-1] * n  # reserve admission: each sequence's lifetime blocks, made at its first need
        self.running: dict[int, None] = {}  # admission order: the last is preempted first
        self.waiting: deque[int] = deque()
        self.buckets: dict[int, list[int]] = {}  # tick -> sequences finishing then
        self.block_size = run.pool.block_size
        # residue -> sequences (sparse: a block size of 10**9 allocates nothing per token of it)
        self.residues: dict[int, int] = Counter()
        self.tick = 0
        self.base = 0
        self.blocks = 0
        self.last_decode_end: Any = None
        self.fresh: dict[int, Any] = {}  # running sequences whose last token is not from the last decode step
        self.last_token: dict[int, Any] = {}  # preempted sequences: time of their last token
        self.windows = run.windows  # sliding windows: per-sequence sums instead of the residues
        self.cap = run.cap  # sparse attention's read cap: R = sum min(c_i, K) beside S, per sequence
        # the stretch clock (run.on_ticks): decode stretches of a fixed batch are jumped in closed form
        self.costs = run.costs
        self.heap: list[tuple[int, int]] = []  # (finish tick, sequence): the next finish, on the stretch clock
        self.nxt = 0  # the next request not yet queued
        self.step_cap = 0
        #: what :meth:`_stretch_steps` read for the stretch of k steps it chose: (k, context sum, slope, the k
        #: steps' ticks or None where it did not price them); its :meth:`_jump` takes them, else None
        self.priced: tuple[int, int, int, int | None] | None = None
        self.cache = run.prefix  # the prefix cache (enable_prefix_caching), or None
        self.hit = [0] * n  # prompt tokens its current (re-)prefill found in the prefix cache
        # ITL over the requests handed back: kept only where a refusal after a preemption can come
        at_risk = on_demand and max_prefill is not None and any(
            why is None and p + o - 1 > max_prefill for p, o, why in zip(run.prompt, run.output, run.reason,
                                                                        strict=True))
        self.ledger: list[tuple[Any, Any]] | None = [] if at_risk and run.streams else None  # (gap, None) or
        # (segment, ticks); a run that keeps no ITL (run.streams False) keeps no gaps at all
        self.own: dict[int, tuple[list[Any], list[tuple[int, int]]]] = {}  # i -> (its own gaps, ledger ranges)
        self.since: dict[int, int] = {}  # running, not fresh: where in the ledger its shared gaps start
        # the resumable loop (advance): the next boundary, the step bound, and a horizon a stretch stops at
        self.now: Any = None
        self.limit = 0
        self.horizon: Any = None  # data-parallel replicas: the next arrival the router has not assigned yet
        self.last_handed = 0  # requests the latest step handed back (at its end)
        # speculative decoding (run.drafts): a running sequence's decode steps are tick + off, its tokens
        # min(O, pf + A(tick + off)), A its accepted-token sums and pf the tokens its prefills made
        self.drafts = run.drafts
        self.slots = run.slots  # KV slots a step's proposals hold (k; 0 without speculation)
        self.dsteps = [0] * n  # decode steps each request has had (kept across preemptions)
        self.pf = [0] * n
        self.sums: dict[int, list[int]] = {}
        # stop_on_misses (watch): the shared counts; per metric this run's limit on its clock (None: not watched)
        # and the next request not counted yet
        self.watch: _SLOWatch | None = None
        self.ttft_limit: Any = None
        self.tpot_limit: Any = None
        self.ttft_next = self.tpot_next = 0
        self.ttft_due: Any = math.inf  # the time after which the next request's TTFT is decided (-1: now)
        self.tpot_due: Any = math.inf  # the same for its TPOT (or at its hand-back)
        self.tpot_seen = 0  # the hand-backs the TPOT count has seen (a new one may decide the next request)
        self.rooms: dict[int, Any] = {}  # O -> the TPOT limit x (O - 1) on the run's clock (_tpot_room)

    # ------------------------------------------------------------------ prefix cache
    def _need(self, i: int, length: int) -> int:
        """Blocks sequence i takes on admission for a (re-)prefill of ``length`` tokens: its own, less those of
        its prefix-cache hit that running sequences already hold (they count once)."""
        need = self._admitted_blocks(i, length)
        if self.cache is not None:
            need -= self.cache.lookup(i, length, self.run.prompt[i])[1]
        return need

    def _acquire(self, i: int, length: int) -> int:
        """Admit sequence i into the prefix cache; the prompt tokens it hits (0 without the cache)."""
        hit = 0 if self.cache is None else self.cache.acquire(i, length, self.run.prompt[i])
        self.hit[i] = hit
        return hit

    def _release(self, i: int, blocks: int, kv_tokens: int) -> None:
        """Sequence i, holding ``blocks`` blocks and ``kv_tokens`` tokens of KV, frees them (the blocks other
        sequences still hold stay in use; its full blocks stay cached)."""
        if self.cache is not None:
            blocks -= self.cache.release(i, kv_tokens, self.run.prompt[i])
        self.blocks -= blocks

    def _trim(self) -> None:
        """Evict cached free blocks the blocks in use now need room from (LRU)."""
        if self.cache is not None:
            self.cache.trim(self.blocks)

    # ------------------------------------------------------------------ sequences
    def _held_blocks(self, i: int) -> int:
        run = self.run
        if self.on_demand:  # the blocks of the KV it holds now
            return run.pool.blocks_for(run.prompt[i] + self._made(i) - 1)
        return self._lifetime(i)

    def _lifetime(self, i: int) -> int:
        """Reserve admission: the blocks sequence i reserves, its lifetime KV (P + O - 1, + k proposal slots),
        computed once per sequence."""
        blocks = self.lifetimes[i]
        if blocks < 0:
            run = self.run
            blocks = self.lifetimes[i] = run.pool.lifetime_blocks_unchecked(run.prompt[i], run.output[i] + self.slots)
        return blocks

    def _made(self, i: int) -> int:
        """The tokens running sequence i has generated so far."""
        if self.drafts is None:
            return self.tick + self.off[i]
        return min(self.run.output[i], self.pf[i] + self.sums[i][self.tick + self.off[i]])

    def _contexts(self) -> list[int]:
        """Speculative decoding: each running sequence's context at the next step, P + g (its KV and the token
        it feeds)."""
        prompt, made = self.run.prompt, self._made
        return [prompt[i] + made(i) for i in self.running]

    def _running_kv(self) -> int:
        """The KV tokens the running sequences hold between steps."""
        if self.drafts is None:
            return self.base + len(self.running) * self.tick
        return sum(self._contexts()) - len(self.running)

    def _admitted_blocks(self, i: int, length: int) -> int:
        """Blocks a sequence took on admission for a (re-)prefill of ``length`` tokens."""
        if self.on_demand:
            return self.run.pool.blocks_for(length)
        return self._lifetime(i)

    def _held_sum(self, ahead: int) -> int:
        """Sliding windows: token-layers the running sequences hold ``ahead`` tokens after the last decode
        step's KV (1: the contexts of the next decode step)."""
        run, held, tick = self.run, self.run.held, self.tick + ahead
        return sum(held(run.prompt[i] + self.off[i] - 1 + tick) for i in self.running)

    def _capped_sum(self, ahead: int) -> int:
        """Sparse attention: R = sum min(c_i, K) over the running sequences ``ahead`` tokens after the last decode
        step's KV (1: the next decode step's)."""
        cap = self.cap
        assert cap is not None
        run, capped, tick = self.run, cap.held, self.tick + ahead
        return sum(capped(run.prompt[i] + self.off[i] - 1 + tick) for i in self.running)

    def _window_growth(self) -> int:
        """Sliding windows: the net blocks the next decode step takes (windowed layers free blocks)."""
        run, blocks_for, tick = self.run, self.run.pool.blocks_for, self.tick
        grow = 0
        for i in self.running:
            c = run.prompt[i] + self.off[i] - 1 + tick
            grow += blocks_for(c + 1) - blocks_for(c)
        return grow

    def _growth(self) -> int:
        """On-demand admission: the blocks the next decode step takes (net of what windows free)."""
        if self.windows is not None:
            return self._window_growth()
        if self.drafts is not None:  # the blocks of its k proposals, held while they are verified
            blocks_for, k = self.run.pool.blocks_for, self.slots
            return sum(blocks_for(c + k) - blocks_for(c - 1) for c in self._contexts())
        return self.residues[-self.tick % self.block_size]

    def _join(self, i: int, t: Any) -> None:
        """Sequence i, whose latest token came at t, starts decoding."""
        run = self.run
        self.running[i] = None
        if self.drafts is not None:  # its decode steps so far, and the tokens its prefills made
            sums = self.sums.get(i)
            if sums is None:
                sums = self.sums[i] = self.drafts.sums_of(i, run.output[i])
            done = self.dsteps[i]
            off = self.off[i] = done - self.tick
            pf = self.pf[i] = run.generated[i] - sums[done]
            fin = bisect.bisect_left(sums, run.output[i] - pf) - off
        else:
            off = run.generated[i] - self.tick
            self.off[i] = off
            key = run.prompt[i] + off - 1  # KV held = key + tick
            self.base += key
            if self.on_demand and self.windows is None:
                self.residues[key % self.block_size] += 1
            fin = run.output[i] - off
        self.finish_tick[i] = fin
        self.buckets.setdefault(fin, []).append(i)
        self.fresh[i] = t
        if self.costs is not None:
            heapq.heappush(self.heap, (fin, i))

    def _leave(self, i: int) -> None:
        """Remove running sequence i (it stays in ``running`` for the caller to delete)."""
        run = self.run
        made = self._made(i)
        self._release(i, self._held_blocks(i), run.prompt[i] + made - 1)
        if self.drafts is not None:
            self.dsteps[i] = self.tick + self.off[i]
        else:
            key = run.prompt[i] + self.off[i] - 1
            self.base -= key
            if self.on_demand and self.windows is None:
                self.residues[key % self.block_size] -= 1
        run.generated[i] = made
        self.finish_tick[i] = -1
        self.fresh.pop(i, None)
        if self.ledger is not None and i in self.since:
            self._own(i)[1].append((self.since.pop(i), len(self.ledger)))

    def _own(self, i: int) -> tuple[list[Any], list[tuple[int, int]]]:
        own = self.own.get(i)
        if own is None:
            own = self.own[i] = ([], [])
        return own

    def _take_back_gaps(self, i: int) -> None:
        """Request i is refused after a preemption: its gaps leave the ITL (counted over the requests handed back)."""
        gaps, ledger = self.run.gaps, self.ledger
        own = self.own.pop(i, None)
        if own is None or ledger is None:
            return
        for gap in own[0]:
            gaps.add(gap, -1)
        for first, stop in own[1]:
            for gap, ticks in ledger[first:stop]:
                if ticks is None:
                    gaps.add(gap, -1)
                else:
                    gaps.take_back_segment(gap, ticks)

    def _preempt(self, victim: int) -> None:
        """Preempt running sequence ``victim`` (already removed from ``running``)."""
        last = self.fresh.get(victim, self.last_decode_end)
        self._leave(victim)
        self.last_token[victim] = last
        self.run.preemptions[victim] += 1
        self.waiting.appendleft(victim)

    def _token_after_resume(self, i: int, t: Any) -> None:
        """Count the gap to the token a resumed sequence gets from its recompute prefill at t."""
        last = self.last_token.pop(i, None)
        if last is not None and self.run.streams:
            self.run.gaps.add(t - last)
            if self.ledger is not None:
                self._own(i)[0].append(t - last)

    def _decode_gaps(self, batch: int, end: Any) -> None:
        """Count the gaps of the ``batch`` running sequences' tokens at ``end`` (none when the run keeps no ITL);
        forget who is fresh."""
        run, fresh, ledger = self.run, self.fresh, self.ledger
        if not run.streams:
            fresh.clear()
            self.last_decode_end = end
            return
        for t in fresh.values():
            run.gaps.add(end - t)
        others = batch - len(fresh)
        if others:
            run.gaps.add(end - self.last_decode_end, others)
        if ledger is not None:
            for i, t in fresh.items():
                self._own(i)[0].append(end - t)
            if others:
                ledger.append((end - self.last_decode_end, None))
            for i in fresh:
                self.since[i] = len(ledger)
        fresh.clear()
        self.last_decode_end = end

    def _arrivals(self, nxt: int, now: Any) -> int:
        """Queue the requests that have arrived by ``now`` (rejecting those that never fit); the next index."""
        run, arr = self.run, self.run.arrival
        run.send(now)
        sent = run.sent
        while nxt < sent and arr[nxt] <= now:
            if run.reason[nxt] is None:  # a rejected request's client was freed at its arrival (run.send)
                self.waiting.append(nxt)
            nxt += 1
        return nxt

    def _idle_until(self, nxt: int, now: Any) -> Any:
        """Nothing to run: the time of the next arrival (counted as idle once the device has started)."""
        run = self.run
        if nxt >= run.sent:
            run.send(None)
        t = run.arrival[nxt]
        if t is None:  # pragma: no cover - a closed loop always has a client that was handed back
            raise SimulationError(f"closed-loop request {nxt} has no arrival while the server is idle")
        if run.first_start is not None:
            run.idle += t - now
        return t

    # ------------------------------------------------------------------ loop
    def step_limit(self) -> int:
        """max_steps, or the bound sum(O) over the requests not rejected on arrival (``_Run.step_limit``)."""
        return self.run.step_limit()

    def serve(self) -> None:
        """Run to the end: at each boundary queue the arrivals, then do the boundary's work (:meth:`_work`), or wait
        for the next arrival when there is none (:meth:`advance` with no horizon)."""
        self.start(self.step_limit())
        self.advance(None)
        if self.watch is not None:
            # the end decides every request left: one refused (no first token) misses both limits even when the
            # run ended before its arrival + the TTFT limit, which the boundaries' counts wait for
            self._count_misses(math.inf)
            self.watch.settle(self.run)

    def start(self, limit: int) -> None:
        """Get ready to run, raising SimulationError once more than ``limit`` steps have run."""
        self.limit = limit
        self.step_cap = limit + 1

    def add(self, request: Any) -> int:
        """Append a request routed to this scheduler (a data-parallel replica: roofline.sim.replicas); its index.
        Its arrival must not be before the horizon of the last :meth:`advance`."""
        run = self.run
        i = run.add(request)
        self.off.append(0)
        self.finish_tick.append(-1)
        self.lifetimes.append(-1)
        self.hit.append(0)
        self.dsteps.append(0)
        self.pf.append(0)
        if (self.ledger is None and run.streams and self.on_demand and run.reason[i] is None
                and run.prompt[i] + run.output[i] - 1 > self.max_prefill):
            # it may be refused after a preemption: keep the shared gaps from now on (it has none yet)
            self.ledger = []
        return i

    def advance(self, until: Any) -> None:
        """Run every boundary before ``until`` (a time on the run's clock; None: to the end) and stop at the first
        boundary at or after it, unprocessed: the arrivals of that instant are queued there, after the hand-backs
        of the step that ends then. A stretch of decode steps stops at that boundary, as it does at an arrival.
        ``serve`` is ``advance(None)``; a router calls it with each arrival, then :meth:`add` (docs/conventions.md,
        "Data-parallel replicas")."""
        run = self.run
        self.horizon = until
        now = self.now
        while True:
            if now is None:  # not started: the first arrival (none yet: wait for one)
                if self.nxt >= run.n:
                    break
                now = run.arrival[self.nxt]
            if until is not None and now >= until:
                break
            self.nxt = self._arrivals(self.nxt, now)
            handed = run.handed_count
            end = self._work(now)
            if end is not None:
                self.last_handed = run.handed_count - handed
                now = end
            elif self.nxt < run.n:
                self.last_handed = 0
                now = self._idle_until(self.nxt, now)
                continue
            else:
                break
            run.check_steps(self.limit)
            if self.watch is not None and (now > self.ttft_due or self.tpot_limit is not None and (
                    now > self.tpot_due or run.handed_count != self.tpot_seen)):
                self._count_misses(now)
        self.now = now
        run.end = now

    def watch_slo(self, watch: _SLOWatch | None) -> None:
        """Count this scheduler's SLO misses into ``watch`` at every boundary (None: no early stop)."""
        self.watch = watch
        if watch is None:
            return
        watch.runs.append(self.run)
        ttft, tpot = watch.limit_on(self.run, "ttft_s"), watch.limit_on(self.run, "tpot_s")
        ticks = self.run.costs is not None
        self.ttft_limit = math.floor(ttft) if ticks and ttft is not None else ttft  # whole ticks: the same test
        self.tpot_limit = tpot
        self.ttft_due = -1 if ttft is not None else math.inf
        self.tpot_due = -1 if tpot is not None else math.inf

    def _tpot_room(self, o: int) -> Any:
        """limit x (O - 1) on the run's clock (floored to whole ticks on the stretch clock: the same test), kept per
        O (a trace repeats its output lengths)."""
        room = self.rooms.get(o)
        if room is None:
            room = self.tpot_limit * (o - 1)
            room = self.rooms[o] = math.floor(room) if self.costs is not None else room
        return room

    def _count_misses(self, now: Any) -> None:
        """At boundary ``now``: count the requests, in index order from the first not yet counted, known to miss a
        limit (:class:`_SLOWatch`), up to the first that is not decided yet, and when to look again (``ttft_due``,
        ``tpot_due``: the time after which that one is decided, -1 at the next boundary; TPOT also at the next
        hand-back). A TTFT is decided by the time alone: the first token is late iff it has not come by arrival +
        limit; a TPOT at the hand-back, or once first token + limit x (O - 1) has passed without one."""
        run, watch = self.run, self.watch
        assert watch is not None
        first, reason, n = run.first, run.reason, run.sent
        if now > self.ttft_due:
            arrival, limit = run.arrival, self.ttft_limit
            i, missed = self.ttft_next, 0
            while i < n:
                a = arrival[i]
                if not now - a > limit:
                    break
                f = first[i]
                if f is None or f - a > limit:
                    missed += 1
                i += 1
            self.ttft_next = i
            self.ttft_due = arrival[i] + limit if i < n else -1
            if missed:
                watch.add("ttft_s", missed)
        if self.tpot_limit is not None and (now > self.tpot_due or run.handed_count != self.tpot_seen):
            output, handed = run.output, run.handed
            i, missed, due = self.tpot_next, 0, -1
            while i < n:
                o = output[i]
                if o >= 2:
                    f = first[i]
                    if f is None:
                        if reason[i] is None:  # not started: decided once its first token is known
                            break
                        missed += 1
                    else:
                        room, h = self._tpot_room(o), handed[i]
                        if h is not None:
                            missed += h - f > room
                        elif now - f > room:
                            missed += 1
                        else:  # decided at its hand-back, or once it is due
                            due = f + room
                            break
                i += 1
            self.tpot_next, self.tpot_due, self.tpot_seen = i, due, run.handed_count
            if missed:
                watch.add("tpot_s", missed)

    def _work(self, now: Any) -> Any:
        """One boundary's work: admit, then one prefill step, or decode (on the stretch clock a stretch of decode
        steps in one jump, where nothing can happen between them); its end, or None with nothing to run."""
        admitted = self._admit(now) if self.waiting else None
        if admitted and self.run.transferred:  # their KV came computed: they decode from this boundary
            admitted = self._receive(admitted, now)
        if admitted:
            return self._prefill(admitted, now)
        if self.running:
            k = self._stretch_steps(now) if self.costs is not None else 1
            return self._jump(now, k) if k > 1 else self._decode(now)
        if self.waiting:  # pragma: no cover - excluded by the never-fits rule
            raise SimulationError(f"request {self.waiting[0]} cannot be admitted into an empty pool")
        return None

    def _admit(self, now: Any) -> list[int]:
        run, waiting = self.run, self.waiting
        admitted: list[int] = []
        tokens = 0
        room = self.max_num_seqs - len(self.running)
        while waiting and len(admitted) < room:
            i = waiting[0]
            length = run.prompt[i] + run.generated[i]  # prompt, plus generated tokens when resuming
            if length > self.max_prefill:  # only a resumed request can get here
                waiting.popleft()
                run.reason[i] = (f"recompute prefill of {length} tokens after preemption exceeds "
                                 f"{self.budget_name}={self.max_prefill}")
                run.refused_count += 1
                self.last_token.pop(i, None)
                self._take_back_gaps(i)
                run.release(i, now)
                continue
            need = self._need(i, length)
            if tokens + length > self.max_prefill or self.blocks + need > run.capacity:
                break
            waiting.popleft()
            self.blocks += need
            tokens += length
            admitted.append(i)
            self._acquire(i, length)
            if self.cache is not None:  # scheduled: its blocks can be hit from now on
                self.cache.write(i, length, run.prompt[i])
        self._trim()
        return admitted

    def _prefill(self, admitted: list[int], now: Any) -> Any:
        run = self.run
        lengths = [run.prompt[i] + run.generated[i] for i in admitted]
        hits = [self.hit[i] for i in admitted]
        cached = sum(hits)
        tokens = sum(lengths) - cached
        if cached:  # a prefill after cached tokens: one chunk each, no decode row (formulas.cached_prefill_time)
            pairs = sum(chunk_kv(None, x - h, h)[1] for x, h in zip(lengths, hits, strict=True))
            end = now + run.step_cost.mixed_time(0, 0, tokens, cached, pairs)
        elif self.cap is None:
            pairs = sum(run.prompt_pairs(x) for x in lengths)
            end = now + run.step_cost.prefill_time(tokens, pairs)
        else:  # sparse attention: each prompt's queries attend min(t, K) keys
            pairs = sum(run.prompt_pairs(x) for x in lengths)
            capped_pairs = sum(self.cap.pairs(x) for x in lengths)
            end = now + run.step_cost.prefill_time(tokens, pairs, capped_pairs)
        if run.first_start is None:
            run.first_start = now
        if self.windows is None:
            kv_tokens = self._running_kv() + tokens + cached
        else:
            kv_tokens = self._held_sum(0) + sum(run.held(x) for x in lengths)
        if run.table is not None and cached:
            run.table.add_mixed(now, end, len(admitted), len(admitted), 0, 0, tokens, cached, pairs, kv_tokens,
                                self.blocks, 0)
        elif run.table is not None:
            run.table.add_prefill(now, end, len(admitted), tokens, 0, pairs, kv_tokens, self.blocks,
                                  capped=None if self.cap is None else (0, capped_pairs))
        run.peak(kv_tokens, self.blocks)
        run.hold_slots(len(self.running) + len(admitted))
        for i, length in zip(admitted, lengths, strict=True):
            if run.admitted[i] is None:
                run.admitted[i] = now
                run.first[i] = end
            run.prefilled[i] += length - self.hit[i]
            run.generated[i] += 1
            self._token_after_resume(i, end)
            if run.generated[i] == run.output[i]:  # done: it holds P + O - 1 tokens, what it took on admission
                self._release(i, self._admitted_blocks(i, length), length)
                self.own.pop(i, None)
                run.hand_back(i, end)
            else:
                self._join(i, end)
        run.steps += 1
        run.prefill_steps += 1
        run.useful_rows += len(admitted)
        run.rows += len(admitted)
        return end

    def _receive(self, admitted: list[int], now: Any) -> list[int]:
        """Admitted requests whose prompt KV arrived computed (a disaggregated decode pool) join the running batch
        with their first token, prefilling nothing; the rest (preempted here, re-prefilled here) are returned.

        Each holds its P prompt tokens of KV (the blocks :meth:`_admit` took for P + 0 tokens) and the first token,
        which came with its KV at its arrival here: its first gap runs from then to its first decode step.
        """
        run, resumed = self.run, []
        for i in admitted:
            if run.generated[i]:
                resumed.append(i)
                continue
            run.admitted[i] = now
            run.first[i] = run.arrival[i]
            run.generated[i] = 1
            self._join(i, run.arrival[i])
        if run.first_start is None:
            run.first_start = now
        return resumed

    def _grow(self) -> int:
        """On-demand admission: blocks the next decode step needs, preempting the most recent sequences
        until they fit."""
        run, running = self.run, self.running
        grow = self._growth()
        while self.blocks + grow > run.capacity:  # preempt the most recently admitted
            victim, _ = running.popitem()
            self._preempt(victim)
            grow = self._growth()
            if not running:  # pragma: no cover - a lone sequence always fits its lifetime
                raise SimulationError(f"request {victim} cannot grow in an empty pool")
        return grow

    def _decode(self, now: Any) -> Any:
        """One decode step of the running batch; with speculative decoding a verification of k + 1 positions each."""
        run, drafts = self.run, self.drafts
        grow = self._grow() if self.on_demand else 0
        batch = len(self.running)
        if drafts is not None:
            contexts = self._contexts()
            context_sum = sum(contexts)
            end = now + self._verify_time(batch, context_sum)
            kv_tokens = context_sum + batch * self.slots  # the proposals are held while verified
        else:
            context_sum = self.base + batch * (self.tick + 1) if self.windows is None else self._held_sum(1)
            if self.cap is None:
                end = now + run.step_cost.decode_time(batch, context_sum)
            else:
                capped = (self._capped_sum(1), 0)
                end = now + run.step_cost.decode_time(batch, context_sum, capped[0])
            kv_tokens = context_sum
        self.blocks += grow
        self._trim()
        self.tick += 1
        if run.table is not None:
            run.table.add_decode(now, end, batch, batch, context_sum, self.blocks,
                                 capped=None if self.cap is None else capped)
        run.peak(kv_tokens, self.blocks)
        if drafts is not None:
            self._verified(contexts)
        run.steps += 1
        run.useful_rows += batch
        run.rows += batch
        run.hold_slots(batch)
        self._decode_gaps(batch, end)
        self._finished(end)
        return end

    # ------------------------------------------------------------------ speculative decoding
    def _verify_time(self, rows: int, context_sum: int, tokens: int = 0, cached: int = 0, pairs: int = 0) -> Any:
        """A speculative step's duration on the run's clock: its ``rows`` sequences at context sum S verify k + 1
        positions each (B chunks of k + 1 tokens after S - B cached ones, beside ``tokens`` prompt-chunk tokens after
        ``cached`` with ``pairs`` pairs), then the proposer's k steps (docs/conventions.md, "Speculative decoding in
        the scheduler")."""
        assert self.drafts is not None
        k, run = self.slots, self.run
        verify_pairs = (k + 1) * context_sum + rows * (k * (k + 1) // 2)
        step = run.step_cost.mixed_time(0, 0, tokens + rows * (k + 1), cached + context_sum - rows,
                                        pairs + verify_pairs)
        return step + self.drafts.proposer_time(rows, context_sum) if rows else step

    def _verified(self, contexts: list[int]) -> None:
        """After a speculative step (``tick`` moved on): count the tokens made, free the rejected proposals' blocks
        (on-demand admission; ``contexts`` the rows' contexts in the step)."""
        drafts = self.drafts
        assert drafts is not None
        made = sum(self._contexts()) - sum(contexts)
        drafts.sequence_steps += len(contexts)
        drafts.tokens += made
        if self.on_demand:
            blocks_for, k, prompt, mine = self.run.pool.blocks_for, self.slots, self.run.prompt, self._made
            held = sum(blocks_for(c + k) for c in contexts)
            self.blocks -= held - sum(blocks_for(prompt[i] + mine(i) - 1) for i in self.running)

    def _finished(self, end: Any) -> None:
        """Hand back the running sequences whose last token came in the decode step that ended at ``end``."""
        run, running = self.run, self.running
        for i in self.buckets.pop(self.tick, ()):
            if self.finish_tick[i] == self.tick and i in running:
                self._leave(i)
                del running[i]
                self._drop(i)
                self.own.pop(i, None)
                run.hand_back(i, end)

    def _drop(self, i: int) -> None:
        """A sequence leaves the batch (chunked prefill also drops it from the admission order)."""

    # ------------------------------------------------------------------ stretches (the stretch clock)


    def _next_finish(self) -> int:
        heap, finish, running = self.heap, self.finish_tick, self.running
        while heap and (finish[heap[0][1]] != heap[0][0] or heap[0][1] not in running):
            heapq.heappop(heap)
        return heap[0][0]

    def _rotated(self) -> dict[int, int]:
        """Running sequences by KV before the next step, mod b: {residue: count}, the nonzero ones only
        (O(batch), not O(b): a block size of 10**9 is a valid pool)."""
        b, tick = self.block_size, self.tick
        return {(r + tick) % b: count for r, count in self.residues.items() if count}

    def _lines(self) -> tuple[int, int, float]:
        """(S, slope, steps): the running sequences' context sum at the next decode step, what it grows by per step,
        and for how many steps it stays one line (unbounded without sliding windows: every row grows by a token).

        With sliding windows a row at context c holds sum over layers of min(c, w_l) token-layers: one line in the
        steps until its context passes the smallest window w >= c (w - c + 1 steps), growing by the layers whose
        window is above c. A row crossing a window ends the stretch, as a finish does.
        """
        batch = len(self.running)
        windows = self.windows
        if windows is None:
            return self.base + batch * (self.tick + 1), batch, math.inf
        full, windowed = windows.groups
        sizes = [w for w, _ in windowed]  # ascending
        above = [0] * (len(windowed) + 1)  # above[j]: the layers of the windows sizes[j:]
        for j in range(len(windowed) - 1, -1, -1):
            above[j] = above[j + 1] + windowed[j][1]
        run, after = self.run, self.tick  # a row's context at the next step: P + off - 1 + tick + 1
        total = grow = 0
        steps: float = math.inf
        held = windows.held
        for i in self.running:
            c = run.prompt[i] + self.off[i] + after
            total += held(c)
            grow += full + above[bisect.bisect_right(sizes, c)]  # the layers whose window is above c
            j = bisect.bisect_left(sizes, c)  # the smallest window w >= c: one line up to context w
            if j < len(sizes) and sizes[j] - c + 1 < steps:
                steps = sizes[j] - c + 1
        return total, grow, steps

    def _stretch_steps(self, now: Any) -> int:
        """Decode steps that can run as one stretch from ``now`` (the first may need a preemption: 0 then)."""
        run, costs = self.run, self.costs
        assert costs is not None
        self.priced = None
        if self.windows is not None and self.on_demand:  # windowed layers free blocks as they go: step by step
            return 1
        if self.drafts is not None:  # each row grows by its own draws: the context sum is not one line
            return 1
        batch = len(self.running)
        context, slope, linear = self._lines()
        k = min(self._next_finish() - self.tick, self.step_cap - run.steps)
        if linear < k:
            k = int(linear)
        nxt = self.nxt
        coming = run.next_arrival(nxt) if k > 1 and nxt < run.n else None
        if k > 1 and self.horizon is not None and (coming is None or self.horizon < coming):
            coming = self.horizon  # a replica's next arrival may be routed to it: stop there as for an arrival
        whole = None
        if coming is not None:
            horizon = int(coming) - int(now)
            whole = costs.stretch(batch, context, k, slope)
            if whole >= horizon:  # the arrival comes within: stop at its boundary
                k, whole = costs.steps_until(batch, context, horizon, slope), None
        b = self.block_size
        # a sequence takes at most ceil(k / b) blocks in k steps: look for the overflow only when it may come
        if self.on_demand and batch * -(-k // b) > run.capacity - self.blocks:
            rotated = self._rotated()  # by KV before the stretch, mod b
            over = first_pool_overflow(rotated, b, run.capacity - self.blocks)
            if over is not None and over - 1 < k:
                k, whole = over - 1, None
        self.priced = (k, context, slope, whole)
        return k

    def _jump(self, now: Any, k: int) -> Any:
        """Run k >= 2 decode steps of the fixed batch as one stretch; returns its end (typed ticks)."""
        run, costs = self.run, self.costs
        assert costs is not None
        batch = len(self.running)
        b = self.block_size
        priced, self.priced = self.priced, None
        whole = None
        if priced is not None and priced[0] == k:  # what _stretch_steps read and priced just before
            _, c1, slope, whole = priced
        else:
            c1, slope, _ = self._lines()
        first = run.step_cost.decode_time(batch, c1)
        end1 = now + first
        self._decode_gaps(batch, end1)  # the first step's gaps (fresh rows differ); then a segment
        # the k steps' closed form less the first step is the closed form of the k - 1 after it: the same sum
        rest = whole - int(first) if whole is not None else costs.stretch(batch, c1 + slope, k - 1, slope)
        end = end1 + _typed(rest, costs.decode_fraction)
        if run.streams:
            run.gaps.add_segment(batch, c1 + slope, k - 1, isinstance(end1, _FractionTicks), rest, slope)
        if self.ledger is not None:
            self.ledger.append((len(run.gaps.segments) - 1, rest))
        self.last_decode_end = end
        if run.table is not None:  # expand the stretch into the step table (only when it is asked for)
            t, blocks, decode = now, self.blocks, run.step_cost.decode_time
            for j in range(k):
                context = c1 + slope * j
                if self.on_demand:
                    blocks += self.residues[(-(self.tick + j)) % b]
                s, t = t, t + decode(batch, context)
                run.table.add_decode(s, t, batch, batch, context, blocks)
        if self.on_demand:
            self.blocks += blocks_growth(self._rotated(), b, k)
            self._trim()
        self.tick += k
        run.peak(c1 + slope * (k - 1), self.blocks)
        run.steps += k
        run.useful_rows += batch * k
        run.rows += batch * k
        run.hold_slots(batch, k)
        self._finished(end)
        return end


class _Chunked(_Continuous):
    """Continuous batching with chunked prefill and mixed steps (see :func:`serve_continuous`).

    Decode rows keep the tick bookkeeping of :class:`_Continuous`; the sequences still
    prefilling are ``prefilling`` (sequence -> prompt tokens done, admission order), and
    ``order`` holds every admitted sequence in admission order (the last is preempted first).
    """

    def __init__(self, run: _Run, max_num_seqs: int, on_demand: bool, budget: int) -> None:
        super().__init__(run, max_num_seqs, on_demand, None)
        self.budget = budget
        self.prefilling: dict[int, int] = {}
        self.target = [0] * run.n  # tokens its (re-)prefill processes: P + g
        self.prefill_kv = 0  # sum of the chunks done over ``prefilling``
        self.order: dict[int, None] = {}

    def add(self, request: Any) -> int:
        """As :meth:`_Continuous.add`."""
        i = super().add(request)
        self.target.append(0)
        return i

    def step_limit(self) -> int:
        """max_steps, or a bound: a step with decode rows makes a token (sum(O) of them); a run of steps
        without one (no preemption happens then) gives the head prompt min(N, what is left) tokens each,
        so it ends within ceil(longest (re-)prefill / N) steps with a token."""
        run = self.run
        if run.max_steps is not None:
            return run.max_steps
        live = [(p, o) for p, o, why in zip(run.prompt, run.output, run.reason, strict=True) if why is None]
        longest = max((p + o - 1 for p, o in live), default=0)
        return sum(o for _, o in live) * (1 + -(-longest // self.budget))

    def _work(self, now: Any) -> Any:
        """One step (on the stretch clock a stretch of decode-only steps in one jump), or None with nothing to run."""
        if not (self.running or self.prefilling or self.waiting):
            return None
        k = self._pure_decode_steps(now) if self.costs is not None else 0
        return self._jump(now, k) if k > 1 else self._step(now)

    def _pure_decode_steps(self, now: Any) -> int:
        """0 unless the next step is decode only and no admission can happen: then the stretch's steps."""
        run = self.run
        if self.prefilling or not self.running or self.drafts is not None:
            return 0
        grow = 0
        if self.on_demand:
            grow = self.residues[-self.tick % self.block_size]
            if self.blocks + grow > run.capacity:
                return 0
        waiting = self.waiting
        if waiting and self.budget - len(self.running) and len(self.order) < self.max_num_seqs:
            i = waiting[0]
            need = self._need(i, run.prompt[i] + run.generated[i])
            if self.blocks + grow + need <= run.capacity:
                return 0
        return self._stretch_steps(now)

    def _drop(self, i: int) -> None:
        del self.order[i]

    def _held(self, i: int) -> int:
        """Blocks held by sequence i while it prefills."""
        return self._admitted_blocks(i, self.target[i])

    def _preempt_last(self) -> None:
        victim, _ = self.order.popitem()
        if victim in self.prefilling:
            done = self.prefilling.pop(victim)
            self.prefill_kv -= done
            self._release(victim, self._held(victim), done)
            self.run.preemptions[victim] += 1
            self.waiting.appendleft(victim)
            # its last token (if it had one) is still the one before its earlier preemption
        else:
            del self.running[victim]
            self._preempt(victim)

    def _step(self, now: Any) -> Any:
        run, running, prefilling = self.run, self.running, self.prefilling
        grow = 0
        if self.on_demand:
            grow = self._growth()
            while self.blocks + grow > run.capacity:
                self._preempt_last()
                grow = self._growth()
        decode = len(running)
        left = self.budget - decode * (1 + self.slots)  # a speculative row verifies k + 1 tokens of the budget
        chunks: list[tuple[int, int, int]] = []  # (sequence, chunk tokens, tokens done before it)
        for i, done in prefilling.items():
            if not left:
                break
            q = min(self.target[i] - done, left)
            chunks.append((i, q, done))
            left -= q
            if self.cache is not None:  # scheduled: the chunk's full blocks can be hit from now on (vLLM V1)
                self.cache.write(i, done + q, run.prompt[i])
        waiting = self.waiting
        while waiting and left and len(self.order) < self.max_num_seqs:
            i = waiting[0]
            target = run.prompt[i] + run.generated[i]
            need = self._need(i, target)
            if self.blocks + grow + need > run.capacity:
                break
            waiting.popleft()
            self.blocks += need
            self.target[i] = target
            hit = self._acquire(i, target)  # the tokens hit count as done: its chunks start after them
            prefilling[i] = hit
            self.prefill_kv += hit
            self.order[i] = None
            if run.admitted[i] is None:
                run.admitted[i] = now
            q = min(target - hit, left)
            chunks.append((i, q, hit))
            left -= q
            if self.cache is not None:
                self.cache.write(i, hit + q, run.prompt[i])
        if not decode and not chunks:  # pragma: no cover - an empty pool admits the head of the queue
            raise SimulationError(f"request {waiting[0]} cannot be admitted into an empty pool")
        if run.first_start is None:
            run.first_start = now
        windows, drafts = self.windows, self.drafts
        contexts = self._contexts() if drafts is not None else []
        if drafts is not None:
            context_sum = sum(contexts)
        else:
            context_sum = self.base + decode * (self.tick + 1) if windows is None else self._held_sum(1)
        tokens = cached = pairs = 0
        for _, q, done in chunks:
            tokens += q
            read, chunk_pairs = chunk_kv(windows, q, done)
            cached += read
            pairs += chunk_pairs
        capped = None
        if self.cap is not None:  # sparse attention: the rows' R, the chunks' capped pairs (window K's count)
            capped = (self._capped_sum(1) if decode else 0, sum(self.cap.chunk(q, done)[1] for _, q, done in chunks))
            end = now + run.step_cost.mixed_time(decode, context_sum, tokens, cached, pairs, *capped)
        elif drafts is not None:
            end = now + self._verify_time(decode, context_sum, tokens, cached, pairs)
        elif tokens:
            end = now + run.step_cost.mixed_time(decode, context_sum, tokens, cached, pairs)
        else:
            end = now + run.step_cost.decode_time(decode, context_sum)
        self.blocks += grow
        self._trim()
        run.hold_slots(len(self.order))
        self.prefill_kv += tokens
        if windows is None:
            kv_tokens = context_sum + decode * self.slots + self.prefill_kv
        else:  # what every prefilling sequence holds after its chunk
            done_after = dict(prefilling)
            done_after.update((i, done + q) for i, q, done in chunks)
            kv_tokens = context_sum + sum(run.held(d) for d in done_after.values())
        blocks = self.blocks
        if decode:
            self.tick += 1
            if drafts is not None:
                self._verified(contexts)
            self._decode_gaps(decode, end)
        completed = 0
        for i, q, done in chunks:
            run.prefilled[i] += q
            if done + q < self.target[i]:
                prefilling[i] = done + q
                continue
            completed += 1
            del prefilling[i]
            self.prefill_kv -= done + q
            run.generated[i] += 1
            if run.first[i] is None:
                run.first[i] = end
            self._token_after_resume(i, end)
            if run.generated[i] == run.output[i]:
                del self.order[i]
                self._release(i, self._held(i), self.target[i])
                run.hand_back(i, end)
            else:
                self._join(i, end)
        if decode:
            self._finished(end)
        useful = decode + completed
        if run.table is not None:
            if tokens:
                run.table.add_mixed(now, end, decode + len(chunks), useful, decode, context_sum, tokens, cached, pairs,
                                    kv_tokens, blocks, len(chunks) - completed, capped=capped)
            else:
                run.table.add_decode(now, end, decode, decode, context_sum, blocks, capped=capped)
        run.peak(kv_tokens, blocks)
        run.steps += 1
        if tokens:
            if decode:
                run.mixed_steps += 1
            else:
                run.prefill_steps += 1
        run.useful_rows += useful
        run.rows += useful
        return end
