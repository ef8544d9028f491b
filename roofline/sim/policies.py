"""The serving policies of the reference scheduler: serial, static batching, continuous batching.

Each policy is a function ``serve_<name>(requests, cost_model, *, <options>)`` that
returns a :class:`~roofline.sim.SimResult`. They share these rules
(CONVENTIONS.md, "One step", "Serving policies"):

* A prefill step over a prompt produces the request's **first output token**; a
  request with O output tokens takes 1 prefill step and O - 1 decode steps (case Q1).
* A decode step advances every row by one token; row i attends over c_i tokens, its KV
  including the new token; after the last decode a request holds P + O - 1 KV slots.
* Time only moves at step boundaries: a request arriving during a step is considered
  at the next boundary at the earliest (arrival <= boundary time: it is there).
* Requests are served first come first served in the workload's order (ties in
  arrival time keep that order). Nothing is reordered.
* A request that can never fit (its lifetime KV, ``kv_pool.lifetime_blocks(P, O)``,
  exceeds the whole pool; or, under continuous batching, a prefill longer than
  ``max_prefill_tokens``) is rejected with a reason when it arrives (or, for a resumed
  request, when it would be re-prefilled) and never blocks the requests behind it.
* Every simulation terminates: each step produces at least one new output token and
  no token is produced twice (a preempted request keeps its tokens), so a run takes at
  most sum(O) steps over the requests not rejected; ``max_steps`` (default: that bound)
  raises :class:`SimulationError` if it is ever passed.

Costs come from a cost model (:mod:`roofline.sim.cost`): exact Fractions under an
exact model (the presets' constants are exact), floats otherwise.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from .. import formulas as f
from .._checks import check_int, check_nonnegative
from ..errors import InvalidValueError, SimulationError
from .cost import CostModel
from .kv import KVPool
from .requests import Request, check_requests
from .results import RequestResult, SimResult, StepTable, summarize

__all__ = [
    "SimulationError",
    "serve_serial",
    "serve_static",
    "serve_continuous",
    "POLICIES",
    "ADMISSIONS",
]

#: Admission modes of continuous batching.
ADMISSIONS = ("reserve", "on_demand")


class _Run:
    """The state every policy shares: inputs, per-request outcomes, running totals."""

    def __init__(self, requests: Iterable[Request], cost_model: Any, kv_pool: KVPool | None,
                 record_steps: bool, max_steps: int | None) -> None:
        if not isinstance(cost_model, CostModel):
            raise InvalidValueError("cost_model", cost_model, "expected a cost model (roofline.sim.RooflineCostModel, "
                                    "UnitCostModel or an object with the CostModel methods)")
        if kv_pool is not None and not isinstance(kv_pool, KVPool):
            raise InvalidValueError("kv_pool", kv_pool, "expected a roofline.sim.KVPool or None")
        if not isinstance(record_steps, bool):
            raise InvalidValueError("record_steps", record_steps, "must be True or False")
        if max_steps is not None:
            check_int("max_steps", max_steps, minimum=0)
        self.requests = check_requests(requests)
        self.cost = cost_model
        self.pool = kv_pool if kv_pool is not None else KVPool.unlimited()
        n = len(self.requests)
        self.arrival = [cost_model.to_time(r.arrival_s) for r in self.requests]
        self.prompt = [r.prompt_tokens for r in self.requests]
        self.output = [r.output_tokens for r in self.requests]
        self.reason: list[str | None] = [
            self.pool.never_fits_reason(p, o) for p, o in zip(self.prompt, self.output, strict=True)
        ]
        self.admitted: list[Any] = [None] * n
        self.first: list[Any] = [None] * n
        self.finish: list[Any] = [None] * n
        self.handed: list[Any] = [None] * n
        self.preemptions = [0] * n
        self.prefilled = [0] * n
        self.generated = [0] * n
        self.table = StepTable(cost_model) if record_steps else None
        self.capacity = math.inf if self.pool.capacity_blocks is None else self.pool.capacity_blocks
        self.steps = 0
        self.prefill_steps = 0
        self.useful_rows = 0
        self.rows = 0
        self.peak_tokens = 0
        self.peak_blocks = 0
        self.first_start: Any = None
        self.end: Any = None
        self.idle = cost_model.to_time(0)
        self.max_steps = max_steps

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

    def peak(self, tokens: int, blocks: int) -> None:
        if tokens > self.peak_tokens:
            self.peak_tokens = tokens
        if blocks > self.peak_blocks:
            self.peak_blocks = blocks

    def result(self, policy: str, options: dict[str, Any]) -> SimResult:
        results = tuple(
            RequestResult(r, self.arrival[i], self.admitted[i], self.first[i], self.finish[i], self.handed[i],
                          self.preemptions[i], self.prefilled[i], self.generated[i], self.reason[i])
            for i, r in enumerate(self.requests)
        )
        zero = self.cost.to_time(0)
        busy = zero if self.first_start is None else self.end - self.first_start - self.idle
        options = dict(options, kv_capacity_blocks=self.pool.capacity_blocks, block_size=self.pool.block_size)
        summary = summarize(
            policy, results, steps=self.steps, prefill_steps=self.prefill_steps, busy=busy,
            useful_rows=self.useful_rows, rows=self.rows, peak_kv_tokens=self.peak_tokens,
            peak_kv_blocks=self.peak_blocks, kv_capacity_blocks=self.pool.capacity_blocks,
            block_size=self.pool.block_size,
        )
        return SimResult(policy, options, results, self.table, summary)


def _opt_time(name: str, value: Any) -> None:
    if value is not None:
        check_nonnegative(name, value)


# --------------------------------------------------------------------------- serial and static


def serve_serial(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    kv_pool: KVPool | None = None,
    record_steps: bool = True,
    max_steps: int | None = None,
) -> SimResult:
    """Serve one request at a time, first come first served (batch of 1).

    Parameters
    ----------
    requests : iterable of Request, in arrival order
    cost_model : CostModel (:class:`~roofline.sim.RooflineCostModel` or :class:`~roofline.sim.UnitCostModel`)
    kv_pool : KVPool or None
        A request whose lifetime KV does not fit the pool is rejected; None: unlimited.
    record_steps : bool
        Keep every step's record (``SimResult.steps``); False keeps only the summary totals.
    max_steps : int or None
        Safeguard (see the module docstring).

    Returns
    -------
    SimResult with ``policy == "serial"``.

    Raises
    ------
    InvalidValueError
        Bad requests (not in arrival order, repeated ids) or options.
    SimulationError
        ``max_steps`` passed.

    Notes
    -----
    Static batching with batch size 1 (one piece of code): each request is a prefill
    step then O - 1 decode steps at contexts P + 1, ..., P + O - 1, handed back when its
    last token is produced. With every request at t = 0, request j is handed back at
    the sum of the service times of requests 1..j (CONVENTIONS.md; the lesson's
    "the last waits for all 99").

    Examples
    --------
    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=10, output_tokens=o) for i, o in enumerate([3, 2])]
    >>> [r.handed_back_s for r in serve_serial(reqs, UnitCostModel()).requests]
    [3, 5]
    """
    run = _Run(requests, cost_model, kv_pool, record_steps, max_steps)
    _serve_batches(run, batch_size=1, max_wait=None)
    return run.result("serial", {})


def serve_static(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    batch_size: int = 8,
    max_wait: Any = None,
    kv_pool: KVPool | None = None,
    record_steps: bool = True,
    max_steps: int | None = None,
) -> SimResult:
    """Static batching: fixed batches formed first come first served, run to their longest request.

    Parameters
    ----------
    requests : iterable of Request, in arrival order
    cost_model : CostModel
    batch_size : int >= 1 [requests], default 8
        B, the most rows of a batch.
    max_wait : [s] >= 0 or None, default None
        A batch starts when B requests are queued, or when its oldest request has waited
        ``max_wait``, or when the stream has ended (the workload's last request has
        arrived), whichever comes first, and the device is free. None: no time limit.
    kv_pool : KVPool or None
        The batch's padded KV, rows x blocks_for(p_max + o_max - 1), must fit: a batch
        closes early (fewer rows) when the next request would overflow it; a request that
        does not fit alone is rejected. None: unlimited.
    record_steps : bool
    max_steps : int or None

    Returns
    -------
    SimResult with ``policy == "static"``.

    Raises
    ------
    InvalidValueError
        Bad requests or options.
    SimulationError
        ``max_steps`` passed.

    Notes
    -----
    A batch of m rows (CONVENTIONS.md, "Serving policies"; the lesson):

    * one prefill step over the prompts padded to the longest, p_max:
      prefill_tokens = m p_max, attention_pairs = m p_max (p_max + 1) / 2, giving every
      row its first token;
    * o_max - 1 decode steps; at decode step j every row (finished or not: finished rows
      keep their slot and are computed, counted as padded rows) attends over p_max + j
      tokens, so context_sum = m (p_max + j) and the KV held is m (p_max + j) tokens;
    * a row's last token comes at the end of decode step O_i - 1 (``finish_s``), but every
      row is handed back at the end of the batch; nobody joins a running batch.

    Useful share per batch = sum(O_i) / (m x o_max) (case Q4). Static batching with
    ``batch_size=1`` is :func:`serve_serial`.

    Examples
    --------
    The lesson's batch, replies of 100, 200, 300 and 1,000 tokens: 1,000 steps, 40% useful.

    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o)
    ...         for i, o in enumerate([100, 200, 300, 1000])]
    >>> s = serve_static(reqs, UnitCostModel(), batch_size=4).summary
    >>> s.steps, s.useful_share
    (1000, Fraction(2, 5))
    """
    check_int("batch_size", batch_size, minimum=1)
    _opt_time("max_wait", max_wait)
    run = _Run(requests, cost_model, kv_pool, record_steps, max_steps)
    _serve_batches(run, batch_size=batch_size, max_wait=None if max_wait is None else cost_model.to_time(max_wait))
    return run.result("static", {"batch_size": batch_size, "max_wait_s": None if max_wait is None else float(max_wait)})


def _serve_batches(run: _Run, *, batch_size: int, max_wait: Any) -> None:
    """Static batching (serial when batch_size == 1); fills ``run``."""
    arr, prompt, output, pool = run.arrival, run.prompt, run.output, run.pool
    eligible = [i for i, why in enumerate(run.reason) if why is None]
    last_arrival = arr[-1] if arr else None
    limit = run.step_limit()
    free_at: Any = None  # when the device is free
    k = 0
    while k < len(eligible):
        head = eligible[k]
        # candidates, first come first served, while the padded batch's lifetime KV fits
        stop, p_max, o_max, ready = k + 1, prompt[head], output[head], None
        while stop - k < batch_size and stop < len(eligible):
            j = eligible[stop]
            pm, om = max(p_max, prompt[j]), max(o_max, output[j])
            if (stop - k + 1) * pool.lifetime_blocks(pm, om) > run.capacity:
                ready = arr[j]  # full for KV once the one that does not fit is there
                break
            stop, p_max, o_max = stop + 1, pm, om
        if ready is None:
            ready = arr[eligible[stop - 1]] if stop - k == batch_size else last_arrival
        if max_wait is not None and arr[head] + max_wait < ready:
            ready = arr[head] + max_wait
        start = ready if free_at is None or ready > free_at else free_at
        if free_at is not None and start > free_at:
            run.idle += start - free_at
        while arr[eligible[stop - 1]] > start:  # only the requests already there
            stop -= 1
        members = eligible[k:stop]
        k = stop
        free_at = _run_batch(run, members, start)
        run.check_steps(limit)
    run.end = free_at


def _run_batch(run: _Run, members: list[int], start: Any) -> Any:
    """One static batch: a padded prefill step, then decode steps to the longest request; returns its end."""
    prompt, output, pool, table = run.prompt, run.output, run.pool, run.table
    m = len(members)
    p_max = max(prompt[i] for i in members)
    o_max = max(output[i] for i in members)
    tokens = m * p_max
    pairs = m * f.causal_attention_pairs.unchecked(prompt_tokens=p_max)
    t = start + run.cost.prefill_time(tokens, pairs)
    if run.first_start is None:
        run.first_start = start
    if table is not None:
        table.add_prefill(start, t, m, tokens, tokens - sum(prompt[i] for i in members), pairs, tokens,
                          m * pool.blocks_for(p_max))
    for i in members:
        run.admitted[i] = start
        run.first[i] = t
        run.prefilled[i] = prompt[i]
    # rows in order of their last token; row i's last token ends decode step O_i - 1
    by_output = sorted(members, key=output.__getitem__)
    q = 0
    while q < m and output[by_output[q]] == 1:
        run.finish[by_output[q]] = t
        q += 1
    decode_time = run.cost.decode_time
    for j in range(1, o_max):
        s = t
        t = s + decode_time(m, m * (p_max + j))
        if table is not None:  # rows still producing: those with O_i > j (q of them have finished)
            table.add_decode(s, t, m, m - q, m * (p_max + j), m * pool.blocks_for(p_max + j))
        while q < m and output[by_output[q]] == j + 1:
            run.finish[by_output[q]] = t
            q += 1
    for i in members:
        run.handed[i] = t
        run.generated[i] = output[i]
    run.steps += o_max
    run.prefill_steps += 1
    run.useful_rows += sum(output[i] for i in members)
    run.rows += m * o_max
    run.peak(m * (p_max + o_max - 1), m * pool.lifetime_blocks(p_max, o_max))
    return t


# --------------------------------------------------------------------------- continuous


def serve_continuous(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    max_num_seqs: int = 256,
    admission: str = "reserve",
    kv_pool: KVPool | None = None,
    max_prefill_tokens: int | None = None,
    record_steps: bool = True,
    max_steps: int | None = None,
) -> SimResult:
    """Continuous (iteration-level) batching: the batch is decided again after every step.

    Parameters
    ----------
    requests : iterable of Request, in arrival order
    cost_model : CostModel
    max_num_seqs : int >= 1, default 256 (vLLM's default)
        Most sequences running at once.
    admission : {"reserve", "on_demand"}, default "reserve"
        "reserve": a request is admitted only if its lifetime KV, blocks_for(P + O - 1),
        fits beside what is reserved; it never needs more and is never preempted.
        "on_demand": a request is admitted if the blocks its prefill writes fit; running
        sequences take a block when their KV crosses a block boundary; when a decode step
        needs more blocks than are free, the most recently admitted sequences are
        preempted (vLLM's recompute preemption) until it fits.
    kv_pool : KVPool or None
        Capacity and block size (``KVPool.tokens(n)`` for token accounting); None: unlimited.
    max_prefill_tokens : int >= 1 or None
        Per-step prefill token budget (no chunking): the admissions of one boundary
        prefill at most this many tokens together; a request whose (re-)prefill alone
        exceeds it is rejected. None: no budget.
    record_steps : bool
    max_steps : int or None

    Returns
    -------
    SimResult with ``policy == "continuous"``.

    Raises
    ------
    InvalidValueError
        Bad requests or options.
    SimulationError
        ``max_steps`` passed.

    Notes
    -----
    At every step boundary (CONVENTIONS.md, "Serving policies"):

    1. requests that finished in the step leave and are handed back at once, freeing
       their KV;
    2. waiting requests (arrived by now, preempted ones first, then first come first
       served) are admitted while fewer than ``max_num_seqs`` run and their KV fits; the
       first that does not fit stops admission (no overtaking);
    3. if any were admitted, **one prefill step** processes all of them together
       (prefill_tokens = sum of their lengths, attention_pairs = sum of
       p (p + 1) / 2; no padding) and gives each its next token; the running sequences
       wait during it (prefill first, as vLLM's default scheduler). The new ones decode
       from the next step on;
    4. otherwise one decode step advances every running sequence by one token.

    Preemption by recompute (case Q2): a preempted sequence drops its KV and keeps its
    g generated tokens; when re-admitted, it is prefilled over P + g tokens, which gives
    token g + 1. Its tokens are never counted twice.

    KV accounting (:class:`~roofline.sim.KVPool`): a sequence holding c tokens holds
    blocks_for(c) blocks, on admission and on growth alike (case K6). The running
    totals (context sum, tokens and blocks in use, and the number of sequences crossing
    a block boundary, by residue of their KV modulo the block size) make a decode step
    cost O(1) Python work plus the sequences that finish or are preempted in it.

    Examples
    --------
    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=0, arrival_s=0, prompt_tokens=4, output_tokens=3),
    ...         Request(id=1, arrival_s=1, prompt_tokens=4, output_tokens=2)]
    >>> r = serve_continuous(reqs, UnitCostModel())
    >>> [x.handed_back_s for x in r.requests], [s.kind for s in r.steps]
    ([4, 3], ['prefill', 'prefill', 'decode', 'decode'])
    """
    check_int("max_num_seqs", max_num_seqs, minimum=1)
    if admission not in ADMISSIONS:
        raise InvalidValueError("admission", admission, f"expected one of {', '.join(ADMISSIONS)}")
    if max_prefill_tokens is not None:
        check_int("max_prefill_tokens", max_prefill_tokens, minimum=1)
    run = _Run(requests, cost_model, kv_pool, record_steps, max_steps)
    if max_prefill_tokens is not None:
        for i, p in enumerate(run.prompt):
            if run.reason[i] is None and p > max_prefill_tokens:
                run.reason[i] = f"prompt of {p} tokens exceeds max_prefill_tokens={max_prefill_tokens}"
    _Continuous(run, max_num_seqs, admission == "on_demand", max_prefill_tokens).serve()
    options = {"max_num_seqs": max_num_seqs, "admission": admission, "max_prefill_tokens": max_prefill_tokens}
    return run.result("continuous", options)


class _Continuous:
    """The continuous-batching loop over a :class:`_Run`.

    Bookkeeping: ``tick`` counts decode steps. A running sequence i has generated
    g_i = tick + off_i tokens and holds P_i + g_i - 1 KV tokens before the next decode step,
    so the KV held by all running sequences is ``base + len(running) x tick`` with
    ``base`` = sum(P_i + off_i - 1); it finishes when tick reaches O_i - off_i. A sequence
    takes a new block in a decode step iff its KV before the step is a multiple of the block
    size: iff (P_i + off_i - 1 + tick) % b == 0, so sequences are counted by that residue.
    """

    def __init__(self, run: _Run, max_num_seqs: int, on_demand: bool, max_prefill: int | None) -> None:
        self.run = run
        self.max_num_seqs = max_num_seqs
        self.on_demand = on_demand
        self.max_prefill = math.inf if max_prefill is None else max_prefill
        n = len(run.requests)
        self.off = [0] * n
        self.finish_tick = [-1] * n
        self.running: dict[int, None] = {}  # admission order: the last is preempted first
        self.waiting: deque[int] = deque()
        self.buckets: dict[int, list[int]] = {}  # tick -> sequences finishing then
        self.block_size = run.pool.block_size
        self.residues = [0] * self.block_size
        self.tick = 0
        self.base = 0
        self.blocks = 0

    # ------------------------------------------------------------------ sequences
    def _held_blocks(self, i: int) -> int:
        run = self.run
        if self.on_demand:  # the blocks of the KV it holds now
            return run.pool.blocks_for(run.prompt[i] + self.tick + self.off[i] - 1)
        return run.pool.lifetime_blocks(run.prompt[i], run.output[i])

    def _join(self, i: int) -> None:
        run = self.run
        off = run.generated[i] - self.tick
        self.off[i] = off
        self.running[i] = None
        key = run.prompt[i] + off - 1  # KV held = key + tick
        self.base += key
        if self.on_demand:
            self.residues[key % self.block_size] += 1
        fin = run.output[i] - off
        self.finish_tick[i] = fin
        self.buckets.setdefault(fin, []).append(i)

    def _leave(self, i: int) -> None:
        """Remove running sequence i (it stays in ``running`` for the caller to delete)."""
        run = self.run
        key = run.prompt[i] + self.off[i] - 1
        self.blocks -= self._held_blocks(i)
        self.base -= key
        if self.on_demand:
            self.residues[key % self.block_size] -= 1
        run.generated[i] = self.tick + self.off[i]
        self.finish_tick[i] = -1

    # ------------------------------------------------------------------ loop
    def serve(self) -> None:
        run = self.run
        arr, n = run.arrival, len(run.requests)
        limit = run.step_limit()
        now = arr[0] if n else None
        nxt = 0
        while True:
            while nxt < n and arr[nxt] <= now:
                if run.reason[nxt] is None:
                    self.waiting.append(nxt)
                nxt += 1
            admitted = self._admit() if self.waiting else None
            if admitted:
                now = self._prefill(admitted, now)
            elif self.running:
                now = self._decode(now)
            elif self.waiting:  # pragma: no cover - excluded by the never-fits rule
                raise SimulationError(f"request id={run.requests[self.waiting[0]].id} cannot be admitted "
                                      "into an empty pool")
            elif nxt < n:
                if run.first_start is not None:
                    run.idle += arr[nxt] - now
                now = arr[nxt]
                continue
            else:
                break
            run.check_steps(limit)
        run.end = now

    def _admit(self) -> list[int]:
        run, waiting, pool = self.run, self.waiting, self.run.pool
        admitted: list[int] = []
        tokens = 0
        room = self.max_num_seqs - len(self.running)
        while waiting and len(admitted) < room:
            i = waiting[0]
            length = run.prompt[i] + run.generated[i]  # prompt, plus generated tokens when resuming
            if length > self.max_prefill:  # only a resumed request can get here
                waiting.popleft()
                run.reason[i] = (f"recompute prefill of {length} tokens after preemption exceeds "
                                 f"max_prefill_tokens={self.max_prefill}")
                continue
            need = pool.blocks_for(length) if self.on_demand else pool.lifetime_blocks(run.prompt[i], run.output[i])
            if tokens + length > self.max_prefill or self.blocks + need > run.capacity:
                break
            waiting.popleft()
            self.blocks += need
            tokens += length
            admitted.append(i)
        return admitted

    def _prefill(self, admitted: list[int], now: Any) -> Any:
        run = self.run
        lengths = [run.prompt[i] + run.generated[i] for i in admitted]
        tokens = sum(lengths)
        pairs = sum(f.causal_attention_pairs.unchecked(prompt_tokens=x) for x in lengths)
        end = now + run.cost.prefill_time(tokens, pairs)
        if run.first_start is None:
            run.first_start = now
        kv_tokens = self.base + len(self.running) * self.tick + tokens
        if run.table is not None:
            run.table.add_prefill(now, end, len(admitted), tokens, 0, pairs, kv_tokens, self.blocks)
        run.peak(kv_tokens, self.blocks)
        for i, length in zip(admitted, lengths, strict=True):
            if run.admitted[i] is None:
                run.admitted[i] = now
                run.first[i] = end
            run.prefilled[i] += length
            run.generated[i] += 1
            if run.generated[i] == run.output[i]:  # done: it holds P + O - 1 tokens, its lifetime blocks
                self.blocks -= run.pool.lifetime_blocks(run.prompt[i], run.output[i])
                run.finish[i] = run.handed[i] = end
            else:
                self._join(i)
        run.steps += 1
        run.prefill_steps += 1
        run.useful_rows += len(admitted)
        run.rows += len(admitted)
        return end

    def _decode(self, now: Any) -> Any:
        run, running = self.run, self.running
        grow = 0
        if self.on_demand:
            r = -self.tick % self.block_size
            grow = self.residues[r]
            while self.blocks + grow > run.capacity:  # preempt the most recently admitted
                victim, _ = running.popitem()
                self._leave(victim)
                run.preemptions[victim] += 1
                self.waiting.appendleft(victim)
                grow = self.residues[r]
                if not running:  # pragma: no cover - a lone sequence always fits its lifetime
                    raise SimulationError(f"request id={run.requests[victim].id} cannot grow in an empty pool")
        batch = len(running)
        context_sum = self.base + batch * (self.tick + 1)
        end = now + run.cost.decode_time(batch, context_sum)
        self.blocks += grow
        self.tick += 1
        if run.table is not None:
            run.table.add_decode(now, end, batch, batch, context_sum, self.blocks)
        run.peak(context_sum, self.blocks)
        run.steps += 1
        run.useful_rows += batch
        run.rows += batch
        for i in self.buckets.pop(self.tick, ()):
            if self.finish_tick[i] == self.tick and i in running:
                self._leave(i)
                del running[i]
                run.finish[i] = run.handed[i] = end
        return end


#: Policy name -> function, as the ``roofline simulate`` command lists them.
POLICIES: dict[str, Callable[..., SimResult]] = {
    "serial": serve_serial,
    "static": serve_static,
    "continuous": serve_continuous,
}
