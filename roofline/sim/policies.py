"""The serving policies of the reference scheduler: serial, static batching, continuous batching
(prefill in steps of its own, or chunked prefill with mixed steps).

Each policy is a function ``serve_<name>(requests, cost_model, *, <options>)`` that
returns a :class:`~roofline.sim.SimResult`. They share these rules
(docs/conventions.md, "One step", "Serving policies"):

* A prefill step over a prompt produces the request's **first output token**; a
  request with O output tokens takes 1 prefill step and O - 1 decode steps (inference-sim #1097).
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
  raises :class:`SimulationError` if it is ever passed. With chunked prefill a step may
  only advance prompt chunks; such steps come in runs without preemption that end with a
  token within ceil(longest (re-)prefill / N) steps, so the bound is sum(O) x (1 + that).
* ``max_model_len``: a request whose prompt + output exceeds it is rejected on arrival with
  the reason, under every policy.
* Closed-loop workloads (:class:`~roofline.sim.ClosedLoop`) create arrivals as the run goes
  (a client's next request arrives at its previous one's hand-back plus the think time);
  :func:`serve_continuous` takes them, serial and static batching refuse them by name.

Costs come from a cost model (:mod:`roofline.sim.cost`): exact Fractions under an
exact model (the presets' constants are exact), floats otherwise.

Sliding-window models (a cost model or KV pool with ``layer_windows``): every context, cached
token count, attention pair count and KV token count the policies pass to the cost model and
record counts **token-layers**, summed per sequence (:class:`~roofline.sim.LayerWindows`): a
sequence at context c holds sum over layers of min(c, w_l) of them, L x c at full attention. The
pool counts layer-blocks (:class:`~roofline.sim.KVPool`), which a windowed layer frees as its
window moves on, so on-demand growth may be negative; a step's frees and takes are applied
together. The result's ``options["kv_units"]`` says "token-layers". Serial and static batching
run on the event engine (:mod:`roofline.sim.stretch` cuts a stretch at the windows it crosses);
continuous batching runs on the step engine, with O(batch) work per decode step for the
per-sequence sums.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

from .._checks import check_count, check_nonnegative, check_scalar
from ..errors import InvalidValueError, SimulationError
from .cost import CostModel, stretch_terms
from .kv import KVPool, LayerWindows, chunk_kv, held_kv, prompt_pairs
from .requests import Request, check_requests
from .results import RequestResult, SimResult, StepTable, summarize
from .workloads import ClosedLoop, Workload

__all__ = [
    "SimulationError",
    "serve_serial",
    "serve_static",
    "serve_continuous",
    "POLICIES",
    "ADMISSIONS",
    "PREFILL_MODES",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
]

#: Admission modes of continuous batching.
ADMISSIONS = ("reserve", "on_demand")

#: Prefill modes of continuous batching: admitted prompts in a step of their own, or in
#: chunks beside the running decodes under a per-step token budget.
PREFILL_MODES = ("separate", "chunked")

#: max_num_batched_tokens when chunked prefill is asked for without one: vLLM's default for
#: chunked prefill (``vllm/config.py``, ``_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048``; engine
#: arguments, ``--max-num-batched-tokens``).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048


class _Run:
    """The state every policy shares: inputs, per-request outcomes, running totals."""

    def __init__(self, requests: Iterable[Request] | ClosedLoop, cost_model: Any, kv_pool: KVPool | None,
                 record_steps: bool, max_steps: int | None, *, max_model_len: int | None = None,
                 max_batch: int = 1, streams: bool = True) -> None:
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
        self.windows, self.pool = _windowed_pool(cost_model, kv_pool if kv_pool is not None else KVPool.unlimited())
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
        self.reason: list[str | None] = [
            self.pool.never_fits_reason(p, o) for p, o in zip(self.prompt, self.output, strict=True)
        ]
        if max_model_len is not None:
            for i, (p, o) in enumerate(zip(self.prompt, self.output, strict=True)):
                if p + o > max_model_len:
                    self.reason[i] = (f"prompt + output of {p + o} tokens ({p} + {o}) exceeds "
                                      f"max_model_len={max_model_len}")
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
        self.mixed_steps = 0
        self.useful_rows = 0
        self.rows = 0
        self.slot_rows = 0
        self.max_batch = max_batch
        self.batch_share_sum: Any = 0
        self.batches = 0
        self.streams = streams
        self.itl: dict[Any, int] = {}
        self.peak_tokens = 0
        self.peak_blocks = 0
        self.first_start: Any = None
        self.end: Any = None
        self.idle = cost_model.to_time(0)
        self.max_steps = max_steps

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

    def add_itl(self, gap: Any, count: int = 1) -> None:
        """Count ``count`` inter-token gaps of ``gap`` seconds."""
        itl = self.itl
        itl[gap] = itl.get(gap, 0) + count

    def peak(self, tokens: int, blocks: int) -> None:
        if tokens > self.peak_tokens:
            self.peak_tokens = tokens
        if blocks > self.peak_blocks:
            self.peak_blocks = blocks

    def result(self, policy: str, options: dict[str, Any]) -> SimResult:
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
            per_batch_useful_share=self.batch_share_sum / self.batches if self.batches else None,
            slot_rows=self.slot_rows, max_batch=self.max_batch, itl=self.itl if self.streams else None,
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


def _opt_time(name: str, value: Any) -> None:
    if value is not None:
        check_scalar(name, value)
        check_nonnegative(name, value)
        try:
            float(value)  # compared with times that may be floats
        except OverflowError:
            raise InvalidValueError(name, value, "too large for a float") from None


# --------------------------------------------------------------------------- serial and static


def serve_serial(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    kv_pool: KVPool | None = None,
    max_model_len: int | None = None,
    record_steps: bool = False,
    max_steps: int | None = None,
    engine: str = "auto",
) -> SimResult:
    """Serve one request at a time, first come first served (batch of 1).

    Parameters
    ----------
    requests : iterable of Request, in arrival order
    cost_model : CostModel (:class:`~roofline.sim.RooflineCostModel` or :class:`~roofline.sim.UnitCostModel`)
    kv_pool : KVPool or None
        A request whose lifetime KV does not fit the pool is rejected; None: unlimited.
    max_model_len : int >= 1 or None
        A request whose prompt + output exceeds it is rejected with the reason (as engines
        refuse a request longer than the model's context); None: no limit.
    record_steps : bool, default False
        Keep every step's record (``SimResult.steps``, a :class:`~roofline.sim.StepTable`); False
        (the default, as on the command line) keeps only the summary totals, so a run's memory
        does not grow with its steps (one request of 10^9 output tokens costs O(1)).
    max_steps : int or None
        Safeguard (see the module docstring).
    engine : {"auto", "event", "step"}, default "auto"
        "event": the event engine (closed-form decode stretches on an integer tick clock,
        :mod:`roofline.sim.stretch` and :mod:`roofline.sim.events`), whose results equal the
        step engine's exactly, for every cost model that states its stretch terms
        (:meth:`~roofline.sim.RooflineCostModel.stretch_terms`: exact dense, mixture-of-experts,
        tensor-parallel, sliding-window and estimate models; exact unit models); a run it cannot
        take (float mode, a custom cost model without them) is refused naming why. "step": one
        step at a time (the reference). "auto": "event" where it can, else "step".
        ``result.options["engine"]`` says which ran (and ``"engine_reason"`` why the step engine).

    Returns
    -------
    SimResult with ``policy == "serial"``.

    Raises
    ------
    InvalidValueError
        Bad requests (not in arrival order, repeated ids) or options; a
        :class:`~roofline.sim.ClosedLoop` workload (field ``requests``: its arrivals are
        created as the run goes, which only :func:`serve_continuous` does).
    SimulationError
        ``max_steps`` passed.

    Notes
    -----
    Static batching with batch size 1 (one piece of code): each request is a prefill
    step then O - 1 decode steps at contexts P + 1, ..., P + O - 1, handed back when its
    last token is produced. With every request at t = 0, request j is handed back at
    the sum of the service times of requests 1..j (docs/conventions.md; the lesson's
    "the last waits for all 99").

    Examples
    --------
    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=10, output_tokens=o) for i, o in enumerate([3, 2])]
    >>> [r.handed_back_s for r in serve_serial(reqs, UnitCostModel()).requests]
    [3, 5]
    """
    _refuse_closed_loop(requests, "serve_serial")
    why = _step_engine_reason(engine, cost_model)
    if why is None:
        return _EVENT_ENGINE["serial"](requests, cost_model, kv_pool=kv_pool, max_model_len=max_model_len,
                                       record_steps=record_steps, max_steps=max_steps)
    run = _Run(requests, cost_model, kv_pool, record_steps, max_steps, max_model_len=max_model_len)
    _serve_batches(run, batch_size=1, max_wait=None, budget=math.inf)
    return run.result("serial", {"max_model_len": max_model_len, **_step_engine(why)})


def serve_static(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    batch_size: int = 8,
    max_wait: Any = None,
    kv_pool: KVPool | None = None,
    max_num_batched_tokens: int | None = None,
    max_model_len: int | None = None,
    record_steps: bool = False,
    max_steps: int | None = None,
    engine: str = "auto",
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
    max_num_batched_tokens : int >= 1 or None [tokens]
        Per-step token budget. The batch is **formed smaller**: a request joins only while
        the padded prefill, rows x p_max tokens, stays within the budget (it closes the
        batch like a KV overflow); a request whose prompt alone exceeds it is rejected.
        Decode steps (rows <= rows x p_max tokens) always fit. Chosen over prefilling the
        padded prompts in several steps because static batching has no per-row state to
        resume a half-prefilled prompt from, and engines that pad (Hugging Face TGI's
        ``--max-batch-prefill-tokens``) limit the batch they form. None: no budget.
    max_model_len : int >= 1 or None
        As :func:`serve_serial`.
    record_steps : bool, default False
        As :func:`serve_serial`.
    max_steps : int or None
    engine : {"auto", "event", "step"}, default "auto"
        As :func:`serve_serial`.

    Returns
    -------
    SimResult with ``policy == "static"``.

    Raises
    ------
    InvalidValueError
        Bad requests or options; a :class:`~roofline.sim.ClosedLoop` workload (as
        :func:`serve_serial`).
    SimulationError
        ``max_steps`` passed.

    Notes
    -----
    A batch of m rows (docs/conventions.md, "Serving policies"; the lesson):

    * one prefill step over the prompts padded to the longest, p_max:
      prefill_tokens = m p_max, attention_pairs = m p_max (p_max + 1) / 2, giving every
      row its first token;
    * o_max - 1 decode steps; at decode step j every row (finished or not: finished rows
      keep their slot and are computed, counted as padded rows) attends over p_max + j
      tokens, so context_sum = m (p_max + j) and the KV held is m (p_max + j) tokens;
    * a row's last token comes at the end of decode step O_i - 1 (``finish_s``), but every
      row is handed back at the end of the batch; nobody joins a running batch.

    Useful share per batch = sum(O_i) / (m x o_max) (the static-batching tutorials' example). Static batching with
    ``batch_size=1`` is :func:`serve_serial`.

    Examples
    --------
    The lesson's batch, replies of 100, 200, 300 and 1,000 tokens: 1,000 steps, 40% useful.

    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o)
    ...         for i, o in enumerate([100, 200, 300, 1000])]
    >>> s = serve_static(reqs, UnitCostModel(), batch_size=4).summary
    >>> s.steps, s.long_run_useful_share
    (1000, Fraction(2, 5))
    """
    _refuse_closed_loop(requests, "serve_static")
    why = _step_engine_reason(engine, cost_model)
    if why is None:
        return _EVENT_ENGINE["static"](requests, cost_model, batch_size=batch_size, max_wait=max_wait,
                                       kv_pool=kv_pool, max_num_batched_tokens=max_num_batched_tokens,
                                       max_model_len=max_model_len, record_steps=record_steps, max_steps=max_steps)
    check_count("batch_size", batch_size, minimum=1)
    _opt_time("max_wait", max_wait)
    if max_num_batched_tokens is not None:
        check_count("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    run = _Run(requests, cost_model, kv_pool, record_steps, max_steps, max_model_len=max_model_len,
               max_batch=batch_size, streams=False)
    budget = math.inf if max_num_batched_tokens is None else max_num_batched_tokens
    if max_num_batched_tokens is not None:
        for i, p in enumerate(run.prompt):
            if run.reason[i] is None and p > max_num_batched_tokens:
                run.reason[i] = f"prompt of {p} tokens exceeds max_num_batched_tokens={max_num_batched_tokens}"
    _serve_batches(run, batch_size=batch_size, max_wait=None if max_wait is None else cost_model.to_time(max_wait),
                   budget=budget)
    return run.result("static", {"batch_size": batch_size, "max_wait_s": None if max_wait is None else float(max_wait),
                                 "max_num_batched_tokens": max_num_batched_tokens, "max_model_len": max_model_len,
                                 **_step_engine(why)})


#: Engines: "auto" (the default: the event engine where the run can take the stretch clock, else the
#: step engine, saying why), "event" (closed-form decode stretches on an integer tick clock, see
#: roofline.sim.stretch; a run that cannot take it is refused by name) and "step" (one step at a
#: time, the oracle).
ENGINES = ("auto", "event", "step")

#: The event engine's entry points by policy, filled when roofline.sim.stretch (serial, static) and
#: roofline.sim.events (continuous) are imported (``import roofline.sim`` imports both), so that this
#: module, the step engine they build on, imports neither.
_EVENT_ENGINE: dict[str, Callable[..., SimResult]] = {}

#: Why continuous batching on a sliding-window model takes the step engine.
WINDOWS_CONTINUOUS = ("sliding windows under continuous batching: each running sequence crosses its windows at its "
                      "own step, so a stretch's context sum is not one line (per-sequence sums, step by step)")


def _check_engine(engine: Any) -> None:
    if not isinstance(engine, str) or engine not in ENGINES:
        raise InvalidValueError("engine", engine, f"expected one of {', '.join(ENGINES)}")


def _step_engine_reason(engine: Any, cost_model: Any, refusal: str | None = None) -> str | None:
    """None when the event engine runs; else why the step engine runs (``engine="event"`` refused by name).

    ``refusal``: a reason of the run's own (sliding windows under continuous batching) beside the
    cost model's (:func:`~roofline.sim.cost.stretch_terms`).
    """
    _check_engine(engine)
    if engine == "step":
        return "asked for (engine='step')"
    if isinstance(cost_model, type) or not isinstance(cost_model, CostModel):
        return "not a cost model"  # the step engine's checks refuse it, naming cost_model
    terms = stretch_terms(cost_model)
    why = terms if isinstance(terms, str) else refusal
    if why is not None and engine == "event":
        raise InvalidValueError("engine", engine, f"the stretch clock cannot run this: {why} "
                                "(engine='auto' runs the step engine instead)")
    return why


def _step_engine(why: str) -> dict[str, str]:
    """The options a step-engine result records: which engine ran and why."""
    return {"engine": "step", "engine_reason": why}


def _refuse_closed_loop(requests: Any, name: str) -> None:
    if isinstance(requests, ClosedLoop):
        raise InvalidValueError("requests", requests, f"{name} does not take closed-loop clients: their arrivals "
                                "are created as the run goes, which only serve_continuous does")


def _serve_batches(run: _Run, *, batch_size: int, max_wait: Any, budget: Any) -> None:
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
            if (stop - k + 1) * pool.lifetime_blocks(pm, om) > run.capacity or (stop - k + 1) * pm > budget:
                ready = arr[j]  # full for KV (or the token budget) once the one that does not fit is there
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
    pairs = m * run.prompt_pairs(p_max)
    held = run.held
    t = start + run.cost.prefill_time(tokens, pairs)
    if run.first_start is None:
        run.first_start = start
    if table is not None:
        table.add_prefill(start, t, m, tokens, tokens - sum(prompt[i] for i in members), pairs, m * held(p_max),
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
    serial = m == 1
    for j in range(1, o_max):
        s = t
        context_sum = m * held(p_max + j)
        t = s + decode_time(m, context_sum)
        if serial:  # one request: its tokens stream, one per step
            run.add_itl(t - s)
        if table is not None:  # rows still producing: those with O_i > j (q of them have finished)
            table.add_decode(s, t, m, m - q, context_sum, m * pool.blocks_for(p_max + j))
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
    run.slot_rows += m * o_max
    run.batch_share_sum += Fraction(sum(output[i] for i in members), m * o_max)
    run.batches += 1
    run.peak(m * held(p_max + o_max - 1), m * pool.lifetime_blocks(p_max, o_max))
    for i in members:
        run.release(i, t)
    return t


# --------------------------------------------------------------------------- continuous


def serve_continuous(
    requests: Iterable[Request] | ClosedLoop,
    cost_model: Any,
    *,
    max_num_seqs: int = 256,
    admission: str = "reserve",
    kv_pool: KVPool | None = None,
    max_prefill_tokens: int | None = None,
    prefill: str = "separate",
    max_num_batched_tokens: int | None = None,
    max_model_len: int | None = None,
    record_steps: bool = False,
    max_steps: int | None = None,
    engine: str = "auto",
) -> SimResult:
    """Continuous (iteration-level) batching: the batch is decided again after every step.

    Parameters
    ----------
    requests : iterable of Request, in arrival order, or a :class:`~roofline.sim.ClosedLoop`
        A closed loop's arrivals are created as the run goes: each client's next request
        arrives when its previous one is handed back (plus the think time).
    cost_model : CostModel
        ``prefill="chunked"`` also needs its ``mixed_time`` (both shipped models have it).
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
        exceeds it is rejected. None: no budget. Only with ``prefill="separate"``.
    prefill : {"separate", "chunked"}, default "separate"
        "separate": admitted prompts prefill in a step of their own while the running
        sequences wait (vLLM before its V1 engine). "chunked": chunked prefill with mixed
        steps (vLLM V1, SGLang, Sarathi-Serve; see the Notes).
    max_num_batched_tokens : int >= 1 or None [tokens]
        The per-step token budget N (vLLM's name). "chunked": every step's decode rows
        plus prompt-chunk tokens stay within N; it must be >= ``max_num_seqs`` (each running
        decode takes one token; vLLM refuses the same); None: 2,048
        (:data:`DEFAULT_MAX_NUM_BATCHED_TOKENS`). "separate": the prefill budget, the same as
        ``max_prefill_tokens`` (give one of the two).
    max_model_len : int >= 1 or None
        A request whose prompt + output exceeds it is rejected with the reason; None: no limit.
    record_steps : bool, default False
        As :func:`serve_serial`.
    max_steps : int or None
    engine : {"auto", "event", "step"}, default "auto"
        As :func:`serve_serial`; the event engine also refuses a sliding-window model here (each
        running sequence crosses its windows at its own step), which "auto" runs step by step.

    Returns
    -------
    SimResult with ``policy == "continuous"``; ``options["prefill"]`` names the mode.

    Raises
    ------
    InvalidValueError
        Bad requests or options (an unknown ``prefill``, a budget below ``max_num_seqs``
        with chunking, both budgets given, a cost model without ``mixed_time`` with
        chunking).
    SimulationError
        ``max_steps`` passed.

    Notes
    -----
    At every step boundary (docs/conventions.md, "Serving policies"):

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

    Preemption by recompute: a preempted sequence drops its KV and keeps its
    g generated tokens; when re-admitted, it is prefilled over P + g tokens, which gives
    token g + 1. Its tokens are never counted twice.

    Chunked prefill (``prefill="chunked"``; docs/conventions.md, "Chunked prefill and mixed
    steps"): every step first gives each running decode row its token (D rows, D <= N),
    then fills what is left of N with prompt chunks, first come first served: first the
    prompts already partly prefilled (in admission order), then waiting requests admitted
    while fewer than ``max_num_seqs`` hold a slot, budget is left and their KV fits. A
    prompt longer than what is left is split across steps; the step that processes its
    last chunk gives its first token, and it decodes from the next step on. The step's
    cost is its exact composition (:func:`roofline.formulas.mixed_step_time`): D rows of
    context sum S, chunk tokens T after sum p0 cached ones, Q = sum q p0 + q (q + 1) / 2
    pairs. KV: "reserve" reserves the lifetime on admission as before; "on_demand"
    allocates the blocks of the whole (re-)prefill, blocks_for(P + g), on admission (as
    vLLM's V0 block manager does with chunked prefill too), so a chunk never needs a block,
    and decode growth preempts the most recently admitted sequence, partly prefilled ones
    included (they drop the chunks done and start over). A step therefore always makes
    progress: a decode token, or a chunk. With a budget as large as every prompt, no
    waiting prefill step stalls the running decodes.

    KV accounting (:class:`~roofline.sim.KVPool`): a sequence holding c tokens holds
    blocks_for(c) blocks, on admission and on growth alike (pegainfer #288). The running
    totals (context sum, tokens and blocks in use, and the number of sequences crossing
    a block boundary, by residue of their KV modulo the block size) make a decode step
    cost O(1) Python work plus the sequences that finish or are preempted in it.

    Examples
    --------
    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=0, arrival_s=0, prompt_tokens=4, output_tokens=3),
    ...         Request(id=1, arrival_s=1, prompt_tokens=4, output_tokens=2)]
    >>> r = serve_continuous(reqs, UnitCostModel(), record_steps=True)
    >>> [x.handed_back_s for x in r.requests], [s.kind for s in r.steps]
    ([4, 3], ['prefill', 'prefill', 'decode', 'decode'])
    """
    _check_engine(engine)
    check_count("max_num_seqs", max_num_seqs, minimum=1)
    if not isinstance(admission, str) or admission not in ADMISSIONS:
        raise InvalidValueError("admission", admission, f"expected one of {', '.join(ADMISSIONS)}")
    if not isinstance(prefill, str) or prefill not in PREFILL_MODES:
        raise InvalidValueError("prefill", prefill, f"expected one of {', '.join(PREFILL_MODES)}")
    if max_prefill_tokens is not None:
        check_count("max_prefill_tokens", max_prefill_tokens, minimum=1)
    if max_num_batched_tokens is not None:
        check_count("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    options: dict[str, Any] = {"max_num_seqs": max_num_seqs, "admission": admission,
                               "max_prefill_tokens": max_prefill_tokens}
    if prefill == "chunked":
        if max_prefill_tokens is not None:
            raise InvalidValueError("max_prefill_tokens", max_prefill_tokens,
                                    "is the budget without chunking; with prefill='chunked' give "
                                    "max_num_batched_tokens")
        chunk_budget = DEFAULT_MAX_NUM_BATCHED_TOKENS if max_num_batched_tokens is None else max_num_batched_tokens
        budget: int | None = chunk_budget
        if chunk_budget < max_num_seqs:
            raise InvalidValueError("max_num_batched_tokens", budget, f"must be >= max_num_seqs={max_num_seqs}: each "
                                    "running decode row takes one token of the step's budget")
        if not callable(getattr(cost_model, "mixed_time", None)):
            raise InvalidValueError("cost_model", cost_model, "chunked prefill needs a cost model with mixed_time "
                                    "(roofline.sim.RooflineCostModel or UnitCostModel)")
        options.update(prefill=prefill, max_num_batched_tokens=budget, max_model_len=max_model_len)
        name: str = "max_num_batched_tokens"
    else:
        name = "max_prefill_tokens"
        if max_num_batched_tokens is not None:
            if max_prefill_tokens is not None:
                raise InvalidValueError("max_num_batched_tokens", max_num_batched_tokens,
                                        "give max_prefill_tokens or max_num_batched_tokens, not both")
            max_prefill_tokens, name = max_num_batched_tokens, "max_num_batched_tokens"
        budget = max_prefill_tokens
        options.update(max_prefill_tokens=max_prefill_tokens, prefill=prefill,
                       max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len)
    requests = _listed(requests)
    chunked = prefill == "chunked"

    def make_run() -> _Run:
        run = _Run(requests, cost_model, kv_pool, record_steps, max_steps, max_model_len=max_model_len,
                   max_batch=max_num_seqs)
        if not chunked and budget is not None:
            for i, p in enumerate(run.prompt):
                if run.reason[i] is None and p > budget:
                    run.reason[i] = f"prompt of {p} tokens exceeds {name}={budget}"
        return run

    run = make_run()
    on_demand = admission == "on_demand"
    why = _step_engine_reason(engine, cost_model, WINDOWS_CONTINUOUS if run.windows is not None else None)
    if why is None:
        result = _EVENT_ENGINE["continuous"](run, make_run, max_num_seqs=max_num_seqs, on_demand=on_demand,
                                             chunked=chunked, budget=budget, budget_name=name, policy="continuous",
                                             options=options)
        assert result is not None
        return result
    if chunked:
        _Chunked(run, max_num_seqs, on_demand, chunk_budget).serve()
    else:
        _Continuous(run, max_num_seqs, on_demand, budget, name).serve()
    return run.result("continuous", {**options, **_step_engine(why)})


def _listed(requests: Any) -> Any:
    """Requests taken once, so that a run may read them again (a generator is read once); a closed loop, a
    workload or a tuple as they are, and a value that is not an iterable as it is (the checks name it)."""
    if isinstance(requests, (ClosedLoop, Workload, tuple, str, bytes)) or not isinstance(requests, Iterable):
        return requests
    return tuple(requests)


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
    of their prefill step), so a decode step counts its gaps in O(1 + joins).
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

    # ------------------------------------------------------------------ sequences
    def _held_blocks(self, i: int) -> int:
        run = self.run
        if self.on_demand:  # the blocks of the KV it holds now
            return run.pool.blocks_for(run.prompt[i] + self.tick + self.off[i] - 1)
        return run.pool.lifetime_blocks_unchecked(run.prompt[i], run.output[i])

    def _admitted_blocks(self, i: int, length: int) -> int:
        """Blocks a sequence took on admission for a (re-)prefill of ``length`` tokens."""
        pool = self.run.pool
        if self.on_demand:
            return pool.blocks_for(length)
        return pool.lifetime_blocks_unchecked(self.run.prompt[i], self.run.output[i])

    def _held_sum(self, ahead: int) -> int:
        """Sliding windows: token-layers the running sequences hold ``ahead`` tokens after the last decode
        step's KV (1: the contexts of the next decode step)."""
        run, held, tick = self.run, self.run.held, self.tick + ahead
        return sum(held(run.prompt[i] + self.off[i] - 1 + tick) for i in self.running)

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
        return self.residues[-self.tick % self.block_size]

    def _join(self, i: int, t: Any) -> None:
        """Sequence i, whose latest token came at t, starts decoding."""
        run = self.run
        off = run.generated[i] - self.tick
        self.off[i] = off
        self.running[i] = None
        key = run.prompt[i] + off - 1  # KV held = key + tick
        self.base += key
        if self.on_demand and self.windows is None:
            self.residues[key % self.block_size] += 1
        fin = run.output[i] - off
        self.finish_tick[i] = fin
        self.buckets.setdefault(fin, []).append(i)
        self.fresh[i] = t

    def _leave(self, i: int) -> None:
        """Remove running sequence i (it stays in ``running`` for the caller to delete)."""
        run = self.run
        key = run.prompt[i] + self.off[i] - 1
        self.blocks -= self._held_blocks(i)
        self.base -= key
        if self.on_demand and self.windows is None:
            self.residues[key % self.block_size] -= 1
        run.generated[i] = self.tick + self.off[i]
        self.finish_tick[i] = -1
        self.fresh.pop(i, None)

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
        if last is not None:
            self.run.add_itl(t - last)

    def _decode_gaps(self, batch: int, end: Any) -> None:
        """Count the gaps of the ``batch`` running sequences' tokens at ``end``; forget who is fresh."""
        run, fresh = self.run, self.fresh
        for t in fresh.values():
            run.add_itl(end - t)
        others = batch - len(fresh)
        if others:
            run.add_itl(end - self.last_decode_end, others)
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
    def serve(self) -> None:
        run = self.run
        n = run.n
        limit = run.step_limit()
        now = run.arrival[0] if n else None
        nxt = 0
        while True:
            nxt = self._arrivals(nxt, now)
            admitted = self._admit(now) if self.waiting else None
            if admitted:
                now = self._prefill(admitted, now)
            elif self.running:
                now = self._decode(now)
            elif self.waiting:  # pragma: no cover - excluded by the never-fits rule
                raise SimulationError(f"request {self.waiting[0]} cannot be admitted into an empty pool")
            elif nxt < n:
                now = self._idle_until(nxt, now)
                continue
            else:
                break
            run.check_steps(limit)
        run.end = now

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
                self.last_token.pop(i, None)
                run.release(i, now)
                continue
            need = self._admitted_blocks(i, length)
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
        pairs = sum(run.prompt_pairs(x) for x in lengths)
        end = now + run.cost.prefill_time(tokens, pairs)
        if run.first_start is None:
            run.first_start = now
        if self.windows is None:
            kv_tokens = self.base + len(self.running) * self.tick + tokens
        else:
            kv_tokens = self._held_sum(0) + sum(run.held(x) for x in lengths)
        if run.table is not None:
            run.table.add_prefill(now, end, len(admitted), tokens, 0, pairs, kv_tokens, self.blocks)
        run.peak(kv_tokens, self.blocks)
        run.slot_rows += len(self.running) + len(admitted)
        for i, length in zip(admitted, lengths, strict=True):
            if run.admitted[i] is None:
                run.admitted[i] = now
                run.first[i] = end
            run.prefilled[i] += length
            run.generated[i] += 1
            self._token_after_resume(i, end)
            if run.generated[i] == run.output[i]:  # done: it holds P + O - 1 tokens, what it took on admission
                self.blocks -= self._admitted_blocks(i, length)
                run.hand_back(i, end)
            else:
                self._join(i, end)
        run.steps += 1
        run.prefill_steps += 1
        run.useful_rows += len(admitted)
        run.rows += len(admitted)
        return end

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
        run, running = self.run, self.running
        grow = self._grow() if self.on_demand else 0
        batch = len(running)
        context_sum = self.base + batch * (self.tick + 1) if self.windows is None else self._held_sum(1)
        end = now + run.cost.decode_time(batch, context_sum)
        self.blocks += grow
        self.tick += 1
        if run.table is not None:
            run.table.add_decode(now, end, batch, batch, context_sum, self.blocks)
        run.peak(context_sum, self.blocks)
        run.steps += 1
        run.useful_rows += batch
        run.rows += batch
        run.slot_rows += batch
        self._decode_gaps(batch, end)
        for i in self.buckets.pop(self.tick, ()):
            if self.finish_tick[i] == self.tick and i in running:
                self._leave(i)
                del running[i]
                run.hand_back(i, end)
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

    def serve(self) -> None:
        run = self.run
        n = run.n
        limit = self.step_limit()
        now = run.arrival[0] if n else None
        nxt = 0
        while True:
            nxt = self._arrivals(nxt, now)
            if self.running or self.prefilling or self.waiting:
                now = self._step(now)
            elif nxt < n:
                now = self._idle_until(nxt, now)
                continue
            else:
                break
            run.check_steps(limit)
        run.end = now

    def _held(self, i: int) -> int:
        """Blocks held by sequence i while it prefills."""
        return self._admitted_blocks(i, self.target[i])

    def _preempt_last(self) -> None:
        victim, _ = self.order.popitem()
        if victim in self.prefilling:
            self.prefill_kv -= self.prefilling.pop(victim)
            self.blocks -= self._held(victim)
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
        left = self.budget - decode
        chunks: list[tuple[int, int, int]] = []  # (sequence, chunk tokens, tokens done before it)
        for i, done in prefilling.items():
            if not left:
                break
            q = min(self.target[i] - done, left)
            chunks.append((i, q, done))
            left -= q
        waiting = self.waiting
        while waiting and left and len(self.order) < self.max_num_seqs:
            i = waiting[0]
            target = run.prompt[i] + run.generated[i]
            need = self._admitted_blocks(i, target)
            if self.blocks + grow + need > run.capacity:
                break
            waiting.popleft()
            self.blocks += need
            self.target[i] = target
            prefilling[i] = 0
            self.order[i] = None
            if run.admitted[i] is None:
                run.admitted[i] = now
            q = min(target, left)
            chunks.append((i, q, 0))
            left -= q
        if not decode and not chunks:  # pragma: no cover - an empty pool admits the head of the queue
            raise SimulationError(f"request {waiting[0]} cannot be admitted into an empty pool")
        if run.first_start is None:
            run.first_start = now
        windows = self.windows
        context_sum = self.base + decode * (self.tick + 1) if windows is None else self._held_sum(1)
        tokens = cached = pairs = 0
        for _, q, done in chunks:
            tokens += q
            read, chunk_pairs = chunk_kv(windows, q, done)
            cached += read
            pairs += chunk_pairs
        if tokens:
            end = now + run.cost.mixed_time(decode, context_sum, tokens, cached, pairs)
        else:
            end = now + run.cost.decode_time(decode, context_sum)
        self.blocks += grow
        run.slot_rows += len(self.order)
        self.prefill_kv += tokens
        if windows is None:
            kv_tokens = context_sum + self.prefill_kv
        else:  # what every prefilling sequence holds after its chunk
            done_after = dict(prefilling)
            done_after.update((i, done + q) for i, q, done in chunks)
            kv_tokens = context_sum + sum(run.held(d) for d in done_after.values())
        blocks = self.blocks
        if decode:
            self.tick += 1
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
                self.blocks -= self._held(i)
                run.hand_back(i, end)
            else:
                self._join(i, end)
        if decode:
            for i in self.buckets.pop(self.tick, ()):
                if self.finish_tick[i] == self.tick and i in running:
                    self._leave(i)
                    del running[i]
                    del self.order[i]
                    run.hand_back(i, end)
        useful = decode + completed
        if run.table is not None:
            if tokens:
                run.table.add_mixed(now, end, decode + len(chunks), useful, decode, context_sum, tokens, cached, pairs,
                                    kv_tokens, blocks, len(chunks) - completed)
            else:
                run.table.add_decode(now, end, decode, decode, context_sum, blocks)
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


#: Policy name -> function, as the ``roofline simulate`` command lists them.
POLICIES: dict[str, Callable[..., SimResult]] = {
    "serial": serve_serial,
    "static": serve_static,
    "continuous": serve_continuous,
}
