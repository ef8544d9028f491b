"""The run state every serving policy shares, on either clock, and its one result builder.

A run (:class:`_Run`) holds the inputs (per-request prompt and output lengths, arrivals,
rejection reasons), the per-request outcomes (admitted, first token, finish, hand-back,
preemptions, tokens prefilled and generated) and the running totals (steps, rows, peak KV,
idle time) that :mod:`roofline.sim.batches` (serial, static) and
:mod:`roofline.sim.continuous` (continuous batching) fill. Each policy is written once, over
this state, and runs on one of two clocks (:mod:`roofline.sim.clock`):

* the **step clock**: times in seconds as the cost model gives them (Fractions exact, floats
  in float mode), one step at a time: the oracle and the teaching form;
* the **stretch clock**: times as integer ticks of the run's common denominator
  (:class:`~roofline.sim.stretch.TickClock`), whose schedulers jump a stretch of decode steps
  of a fixed batch in closed form (:class:`~roofline.sim.stretch.TickCosts`).

:meth:`_Run.on_ticks` moves a validated run onto the stretch clock (arrivals, think time and
idle time become ticks; the scheduler's step durations come from the tick costs; gaps are
kept as stretch segments). :meth:`_Run.result` builds the :class:`~roofline.sim.SimResult`:
on the step clock from the seconds (:func:`~roofline.sim.results.summarize`), on the stretch
clock from the ticks (:func:`roofline.sim.clock.tick_result`), equal field by field and type
by type.

Conventions: docs/conventions.md, "Serving policies", "Two clocks, one result".
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from .._checks import check_count
from ..errors import InvalidValueError, SimulationError
from .clock import StepGaps, _FractionTicks, _Gaps, _seconds, _TickCostModel, _TicksTable, _typed, tick_result
from .cost import CostModel
from .kv import KVPool, LayerWindows, held_kv, prompt_pairs
from .prefix import PrefixCache
from .requests import Request, check_requests
from .results import RequestResult, SimResult, StepTable, summarize
from .speculative import _Drafts
from .stretch import StretchTable, TickCosts
from .workloads import ClosedLoop, Workload

__all__: list[str] = []


class _Run:
    """The state every policy shares: inputs, per-request outcomes, running totals."""

    def __init__(self, requests: Iterable[Request] | ClosedLoop, cost_model: Any, kv_pool: KVPool | None,
                 record_steps: bool, max_steps: int | None, *, max_model_len: int | None = None,
                 max_batch: int = 1, streams: bool = True, prefix_caching: bool = False,
                 speculative: Any = None) -> None:
        if isinstance(cost_model, type):
            raise InvalidValueError("cost_model", cost_model, "a class, not a cost model: pass an instance "
                                    "(RooflineCostModel.for_model(model, accelerator) or UnitCostModel())")
        if not isinstance(cost_model, CostModel):
            raise InvalidValueError("cost_model", cost_model, "expected a cost model (roofline.sim.RooflineCostModel, "
                                    "UnitCostModel or an object with the CostModel methods)")
        if kv_pool is not None and not isinstance(kv_pool, KVPool):
            raise InvalidValueError("kv_pool", kv_pool, "expected a roofline.sim.KVPool or None")
        if not isinstance(record_steps, bool):
            raise InvalidValueError("record_steps", record_steps, "must be True or False")
        if max_steps is not None:
            check_count("max_steps", max_steps, minimum=0)
        if max_model_len is not None:
            check_count("max_model_len", max_model_len, minimum=1)
        self.cost: Any = cost_model
        self.step_cost: Any = cost_model  # what a step adds to the clock: seconds here, ticks on the stretch clock
        self.costs: TickCosts | None = None  # the stretch clock's tick costs (on_ticks), None on the step clock
        self.gaps: Any = StepGaps()  # inter-token gaps as the clock keeps them
        self.windows, self.pool = _windowed_pool(cost_model, kv_pool if kv_pool is not None else KVPool.unlimited())
        #: sparse attention's read cap: one "layer" of window K counting R = sum min(c_i, K) and a prompt's
        #: capped pairs beside the pool's tokens (docs/conventions.md, "Sparse attention"), or None
        topk = getattr(cost_model, "index_topk", None)
        self.cap = LayerWindows((topk,)) if topk is not None else None
        self.closed = requests if isinstance(requests, ClosedLoop) else None
        self.spec: dict[str, Any] | None = None
        self.client: list[int | None]
        self.arrival: list[Any]
        if isinstance(requests, ClosedLoop):
            self.closed = requests
            lengths = requests.lengths
            n = len(lengths)
            self.requests: tuple[Request, ...] = ()
            self.prompt = [p for p, _ in lengths]
            self.output = [o for _, o in lengths]
            zero = cost_model.to_time(0)
            self.arrival = [zero if j < requests.clients else None for j in range(n)]
            self.client = [j if j < requests.clients else None for j in range(n)]
            self.think = cost_model.to_time(requests.think_time_s)
            self.sent = min(n, requests.clients)  # requests given to a client so far (indices 0 .. sent - 1)
        else:
            self.spec = requests.spec if isinstance(requests, Workload) else None
            self.requests = check_requests(requests)
            n = len(self.requests)
            self.arrival = [cost_model.to_time(r.arrival_s) for r in self.requests]
            self.prompt = [r.prompt_tokens for r in self.requests]
            self.output = [r.output_tokens for r in self.requests]
            self.client = [None] * n
            self.sent = n
        self.n = n
        self.pending: list[tuple[Any, int, int | None]] = []  # closed loop: (next arrival, order, client)
        self.pending_order: list[None] = []
        self.started = False
        self.max_model_len = max_model_len
        #: speculative decoding (continuous batching with speculative=...): its state, or None
        self.drafts = None if speculative is None else _Drafts(speculative, self.request_id)
        self.slots = 0 if self.drafts is None else self.drafts.k  # KV slots a step's proposals hold beyond P + O - 1
        self.reason: list[str | None] = [None] * n
        if self.pool.capacity_blocks is not None or max_model_len is not None:
            refusal = self.refusal
            self.reason = [refusal(p, o) for p, o in zip(self.prompt, self.output, strict=True)]
        self.admitted: list[Any] = [None] * n
        self.first: list[Any] = [None] * n
        self.finish: list[Any] = [None] * n
        self.handed: list[Any] = [None] * n
        self.preemptions = [0] * n
        self.prefilled = [0] * n
        self.generated = [0] * n
        self.table: Any = StepTable(cost_model) if record_steps else None  # StretchTable or _TicksTable on ticks
        self.capacity = math.inf if self.pool.capacity_blocks is None else self.pool.capacity_blocks
        self.steps = 0
        self.prefill_steps = 0
        self.mixed_steps = 0
        self.useful_rows = 0
        self.rows = 0
        self.slot_rows = 0
        self.peak_running = 0  # the most sequences holding a slot in one step
        self.max_batch = max_batch
        self.batch_share_sum: Any = 0
        self.batches = 0
        self.streams = streams
        self.peak_tokens = 0
        self.peak_blocks = 0
        self.first_start: Any = None
        self.end: Any = None
        self.idle = cost_model.to_time(0)
        self.max_steps = max_steps
        self.handed_count = 0  # requests handed back so far (a replica's router reads it: roofline.sim.replicas)
        self.refused_count = 0  # requests refused so far: on arrival (add) or at a recompute prefill
        self.step_blocks = 0  # KV blocks in use during the latest step (its hand-backs free theirs at its end)
        #: a disaggregated decode pool's run: requests arrive with their prompt KV computed (continuous batching)
        self.transferred = False
        #: the prefix cache (continuous batching with enable_prefix_caching), or None
        self.prefix = PrefixCache(self.requests, n, self.pool.block_size, self.capacity) if prefix_caching else None

    def refusal(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request of these lengths is rejected on arrival (it never fits the pool, or it exceeds
        ``max_model_len``), or None."""
        p, o = prompt_tokens, output_tokens
        if self.max_model_len is not None and p + o > self.max_model_len:
            return f"prompt + output of {p + o} tokens ({p} + {o}) exceeds max_model_len={self.max_model_len}"
        pool = self.pool
        if pool.capacity_blocks is None:
            return None
        o += self.slots  # speculative decoding: the proposals of its last step are held too
        if not pool.layer_windows:  # pool.never_fits_reason, asked only of those that do not fit
            if -(-(p + o - 1) // pool.block_size) <= pool.capacity_blocks - pool.state_blocks:  # a hybrid's state
                return None
        return pool.never_fits_reason(p, o)

    def add(self, request: Request) -> int:
        """Append one request (a data-parallel replica's, routed to it at its arrival: roofline.sim.replicas), on the
        run's clock, rejected on arrival where :meth:`refusal` says so; its index. Only for an open-loop run whose
        requests are in arrival order (the router checked them)."""
        i = self.n
        if i == 0:
            self.requests = []  # type: ignore[assignment]  # a tuple again when the run is read (result)
        self.requests.append(request)  # type: ignore[attr-defined]
        seconds = self.cost.to_time(request.arrival_s)
        if self.costs is not None:
            self.arrival_s.append(seconds)
        self.arrival.append(self.clock_time(seconds))
        p, o = request.prompt_tokens, request.output_tokens
        self.prompt.append(p)
        self.output.append(o)
        self.client.append(None)
        why = self.refusal(p, o)
        self.reason.append(why)
        self.refused_count += why is not None
        for values in (self.admitted, self.first, self.finish, self.handed):
            values.append(None)
        for counts in (self.preemptions, self.prefilled, self.generated):
            counts.append(0)
        if self.prefix is not None:
            self.prefix.add(request)
        self.n = self.sent = i + 1
        return i

    def request_id(self, i: int) -> int:
        """Request i's id (a closed loop's requests are numbered in the order they are sent)."""
        return self.requests[i].id if self.closed is None else i

    def held(self, context: int) -> int:
        """KV one sequence at ``context`` tokens holds: tokens, or token-layers with sliding windows."""
        return held_kv(self.windows, context)

    def prompt_pairs(self, prompt_tokens: int) -> int:
        """Causal query-key pairs of a whole prompt (summed over layers with sliding windows)."""
        return prompt_pairs(self.windows, prompt_tokens)

    def step_limit(self) -> int:
        """max_steps, or the bound sum(O) over the requests not rejected on arrival."""
        if self.max_steps is not None:
            return self.max_steps
        return sum(o for o, why in zip(self.output, self.reason, strict=True) if why is None)

    def check_steps(self, limit: int) -> None:
        """Raise SimulationError once more than ``limit`` steps have run."""
        if self.steps > limit:
            why = ("a fault: every step produces a new token, so sum(O) steps always suffice"
                   if self.max_steps is None else "the simulation needs more steps")
            raise SimulationError(f"max_steps={limit}: passed after {self.steps} steps ({why})")

    def hand_back(self, i: int, t: Any) -> None:
        """Request i's last token came at t and it is handed back then; a closed-loop client sends its next."""
        self.finish[i] = self.handed[i] = t
        self.handed_count += 1
        self.release(i, t)

    def release(self, i: int, t: Any) -> None:
        """Closed loop: request i's client is free at t (handed back, or rejected after admission); its next
        request arrives at t + the think time (sent in time order by :meth:`send`)."""
        if self.closed is not None:
            self._free(t, self.client[i])

    def _free(self, t: Any, client: int | None) -> None:
        heapq.heappush(self.pending, (t + self.think, len(self.pending_order), client))
        self.pending_order.append(None)

    def send(self, now: Any) -> None:
        """Closed loop: give the next request indices, in arrival order, to the clients whose next request has
        arrived by ``now`` (None: the earliest one only, whenever it arrives). A request that is rejected on
        arrival frees its client at that arrival (``vllm bench serve --max-concurrency``; docs/conventions.md,
        "Closed-loop clients"), so the client's next request is ranked among the others by its own time."""
        if self.closed is None:
            return
        if not self.started:  # the first requests, sent at 0: a rejected one frees its client at once
            self.started = True
            for j in range(self.sent):
                if self.reason[j] is not None:
                    self._free(self.arrival[j], self.client[j])
        pending = self.pending
        while pending and self.sent < self.n and (now is None or pending[0][0] <= now):
            t, _, client = heapq.heappop(pending)
            j = self.sent
            self.arrival[j], self.client[j] = t, client
            self.sent += 1
            if self.reason[j] is not None:
                self._free(t, client)
            if now is None:
                return

    def next_arrival(self, i: int) -> Any:
        """The arrival of request i, or, for a closed-loop request not yet sent, the earliest pending one
        (None: none pending)."""
        if i < self.sent:
            return self.arrival[i]
        return self.pending[0][0] if self.pending else None

    def on_ticks(self, costs: TickCosts, *, stretch_table: bool = False) -> None:
        """Move this run, validated and not started, onto the stretch clock of ``costs``.

        Its arrivals, think time and idle time become typed ticks (``clock._FractionTicks`` where the
        step clock's value is a Fraction), its steps are priced in ticks (``clock._TickCostModel``),
        its gaps kept as stretch segments (``clock._Gaps``), and its step table, when recorded, is a
        :class:`~roofline.sim.stretch.StretchTable` (``stretch_table``: one row per static batch) or
        the step table written in seconds.
        """
        ticks = self.clock_time
        self.costs = costs
        self.arrival_s = self.arrival
        tick, fraction_ticks = costs.clock.ticks, _FractionTicks
        self.arrival = [a if a is None else tick(a) if isinstance(a, int) else fraction_ticks(tick(a))
                        for a in self.arrival]
        if self.closed is not None:
            self.think = ticks(self.think)
        self.idle = ticks(self.idle)
        self.step_cost = _TickCostModel(self.cost, costs)
        self.gaps = _Gaps()
        if self.table is not None:
            if stretch_table:
                self.table = StretchTable(self.cost, costs, self.pool)
            else:
                self.table = _TicksTable(self.table, functools.partial(_seconds, costs.clock))

    def hold_slots(self, sequences: int, steps: int = 1) -> None:
        """``sequences`` hold a slot (a place in the batch, ``max_num_seqs``' unit) through ``steps`` steps."""
        self.slot_rows += sequences * steps
        if sequences > self.peak_running:
            self.peak_running = sequences

    def peak(self, tokens: int, blocks: int) -> None:
        """A step holds ``tokens`` KV tokens in ``blocks`` blocks (before its hand-backs free theirs)."""
        self.step_blocks = blocks
        if tokens > self.peak_tokens:
            self.peak_tokens = tokens
        if blocks > self.peak_blocks:
            self.peak_blocks = blocks

    def clock_time(self, seconds: Any) -> Any:
        """``seconds`` (an int or Fraction, or None) on the run's clock: as given on the step clock, typed ticks on
        the stretch clock."""
        if seconds is None or self.costs is None:
            return seconds
        return _typed(self.costs.clock.ticks(seconds), not isinstance(seconds, int))

    def result(self, policy: str, options: dict[str, Any]) -> SimResult:
        """The run's :class:`~roofline.sim.SimResult` (one builder per clock, equal results)."""
        if self.prefix is not None:
            options = dict(options, prefix_cache=self.prefix.summary())
        if self.drafts is not None:
            options = dict(options, speculative=self.drafts.summary())
        self.requests = tuple(self.requests)
        if self.costs is not None:
            return tick_result(self, policy, options)
        if self.closed is not None:
            if any(t is None for t in self.arrival):  # pragma: no cover - every client hands back
                raise SimulationError("a closed-loop request was never sent")
            self.requests = tuple(Request(id=j, arrival_s=self.arrival[j], prompt_tokens=p, output_tokens=o)
                                  for j, (p, o) in enumerate(zip(self.prompt, self.output, strict=True)))
            options = dict(options, workload=self.closed.to_dict())
        elif self.spec is not None:
            options = dict(options, workload=self.spec)
        results = tuple(
            RequestResult(r, self.arrival[i], self.admitted[i], self.first[i], self.finish[i], self.handed[i],
                          self.preemptions[i], self.prefilled[i], self.generated[i], self.reason[i], self.client[i])
            for i, r in enumerate(self.requests)
        )
        zero = self.cost.to_time(0)
        busy = zero if self.first_start is None else self.end - self.first_start - self.idle
        options = dict(options, kv_capacity_blocks=self.pool.capacity_blocks, block_size=self.pool.block_size)
        if self.windows is not None:
            options["kv_units"] = "token-layers"
        summary = summarize(
            policy, results, steps=self.steps, prefill_steps=self.prefill_steps, busy=busy,
            useful_rows=self.useful_rows, rows=self.rows, peak_kv_tokens=self.peak_tokens,
            peak_kv_blocks=self.peak_blocks, kv_capacity_blocks=self.pool.capacity_blocks,
            block_size=self.pool.block_size, mixed_steps=self.mixed_steps,
            per_batch_useful_share=Fraction(self.batch_share_sum) / self.batches if self.batches else None,
            slot_rows=self.slot_rows, max_batch=self.max_batch, itl=self.gaps.counts if self.streams else None,
            peak_running=self.peak_running,
        )
        return SimResult(policy, options, results, self.table, summary)


def _windowed_pool(cost_model: Any, pool: KVPool) -> tuple[LayerWindows | None, KVPool]:
    """The sliding windows a run counts KV by, and its pool (an unlimited pool counts the same layers).

    A cost model that prices windows (``layer_windows``) and a limited pool must count the same
    layers: a pool of full-attention blocks beside a windowed cost model (or the reverse) would
    admit by one model and price by another, so it is refused by name.
    """
    priced = getattr(cost_model, "layer_windows", None)
    if priced is None:  # a cost model that does not look at contexts (UnitCostModel) or a custom one
        return pool.windows, pool
    priced = tuple(priced) if any(w is not None for w in priced) else ()
    if pool.capacity_blocks is not None and priced != pool.layer_windows:
        if priced:
            why = ("the cost model's model has sliding-window layers, the pool counts full-attention blocks: "
                   "build it with KVPool.for_model(model, budget=...)")
        else:
            why = "the pool counts sliding-window layers the cost model does not price"
        raise InvalidValueError("kv_pool", pool, why)
    if not priced:
        return None, pool
    if not pool.layer_windows:  # an unlimited pool counting the same layers
        pool = KVPool.unlimited(block_size=pool.block_size, layer_windows=priced)
    return pool.windows, pool
