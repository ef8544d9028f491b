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

This module holds the public ``serve_*`` functions, their checks and the choice of clock
(``engine=``: :data:`ENGINES`); each policy itself is written once, for both clocks, in
:mod:`roofline.sim.batches` (serial, static) and :mod:`roofline.sim.continuous`, over the run
state of :mod:`roofline.sim.run`. Nothing registers itself at import; the clock is chosen by
what the cost model states (:func:`~roofline.sim.cost.stretch_terms`), never by its class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from .._checks import check_count, check_nonnegative, check_positive, check_scalar
from ..errors import InvalidValueError, SimulationError
from .batches import serve_batches
from .continuous import _Chunked, _Continuous, _SLOWatch
from .cost import CostModel, stretch_terms
from .kv import KVPool
from .requests import Request
from .results import SimResult
from .run import _Run
from .speculative import Speculation
from .stretch import TickCosts, on_fine_enough_clock
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
        "event": the stretch clock (closed-form decode stretches on an integer tick clock,
        :mod:`roofline.sim.clock`, :mod:`roofline.sim.stretch`), whose results equal the
        step clock's exactly, for every cost model that states its stretch terms
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
    requests = _listed(requests)

    def serve(tokens: int) -> SimResult:
        run = _Run(requests, cost_model, kv_pool, record_steps, max_steps, max_model_len=max_model_len)
        if why is None:
            _on_stretch_clock(run, tokens, ())
        serve_batches(run, batch_size=1, max_wait=None, budget=math.inf)
        return run.result("serial", {"max_model_len": max_model_len, **_engine_options(why)})

    return _on_clock(serve, why)


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
    check_count("batch_size", batch_size, minimum=1)
    _opt_time("max_wait", max_wait)
    if max_num_batched_tokens is not None:
        check_count("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    requests = _listed(requests)
    budget = math.inf if max_num_batched_tokens is None else max_num_batched_tokens

    def serve(tokens: int) -> SimResult:
        run = _Run(requests, cost_model, kv_pool, record_steps, max_steps, max_model_len=max_model_len,
                   max_batch=batch_size, streams=False)
        wait = None if max_wait is None else cost_model.to_time(max_wait)
        if max_num_batched_tokens is not None:
            for i, p in enumerate(run.prompt):
                if run.reason[i] is None and p > max_num_batched_tokens:
                    run.reason[i] = f"prompt of {p} tokens exceeds max_num_batched_tokens={max_num_batched_tokens}"
        if why is None:
            _on_stretch_clock(run, tokens, () if wait is None else (wait,))
        serve_batches(run, batch_size=batch_size, max_wait=run.clock_time(wait), budget=budget)
        return run.result("static", {"batch_size": batch_size,
                                     "max_wait_s": None if max_wait is None else float(max_wait),
                                     "max_num_batched_tokens": max_num_batched_tokens,
                                     "max_model_len": max_model_len, **_engine_options(why)})

    return _on_clock(serve, why)


#: Engines: "auto" (the default: the event engine where the run can take the stretch clock, else the
#: step engine, saying why), "event" (closed-form decode stretches on an integer tick clock, see
#: roofline.sim.stretch; a run that cannot take it is refused by name) and "step" (one step at a
#: time, the oracle).
ENGINES = ("auto", "event", "step")


def _check_engine(engine: Any) -> None:
    if not isinstance(engine, str) or engine not in ENGINES:
        raise InvalidValueError("engine", engine, f"expected one of {', '.join(ENGINES)}")


def _step_engine_reason(engine: Any, cost_model: Any) -> str | None:
    """None when the stretch clock runs; else why the step clock runs (``engine="event"`` refused by name)."""
    _check_engine(engine)
    if engine == "step":
        return "asked for (engine='step')"
    if isinstance(cost_model, type) or not isinstance(cost_model, CostModel):
        return "not a cost model"  # the run's checks refuse it, naming cost_model
    why = stretch_terms(cost_model)
    if not isinstance(why, str):
        return None
    if engine == "event":
        raise InvalidValueError("engine", engine, f"the stretch clock cannot run this: {why} "
                                "(engine='auto' runs the step engine instead)")
    return why


def _engine_options(why: str | None) -> dict[str, str]:
    """The options a result records: which engine ran, and why the step engine when it did."""
    return {"engine": "event"} if why is None else {"engine": "step", "engine_reason": why}


def _on_clock(serve: Callable[[int], SimResult], why: str | None, tokens: int = 1) -> SimResult:
    """``serve(tokens)`` on the step clock (``why``: the reason), or on a stretch clock fine enough for its
    steps (started again on a finer one while a step needs more tokens than the clock covers)."""
    return serve(tokens) if why is not None else on_fine_enough_clock(serve, tokens)


def _on_stretch_clock(run: _Run, tokens: int, times: tuple[Any, ...]) -> None:
    """Move a validated serial or static run onto the stretch clock of its cost model, its arrivals and
    ``times`` [s], covering steps of ``tokens`` tokens at least (and every prompt)."""
    tokens = max(tokens, max(run.prompt, default=1))
    costs = TickCosts.build(run.cost, [*run.arrival, *times], run.windows, max_tokens=tokens)
    assert costs is not None  # _step_engine_reason checked the stretch terms
    run.on_ticks(costs, stretch_table=True)


def _refuse_closed_loop(requests: Any, name: str) -> None:
    if isinstance(requests, ClosedLoop):
        raise InvalidValueError("requests", requests, f"{name} does not take closed-loop clients: their arrivals "
                                "are created as the run goes, which only serve_continuous does")


# --------------------------------------------------------------------------- continuous


def prefix_caching_refusal(cost_model: Any, kv_pool: Any) -> str | None:
    """Why prefix caching is not modelled with this cost model and KV pool, or None where it is (the reason
    :func:`serve_continuous` refuses ``enable_prefix_caching=True`` with, field ``enable_prefix_caching``; the
    plan skips such a configuration with it, docs/conventions.md "Deployment search"): sliding-window layers
    (a windowed layer's blocks of a shared prefix leave the window) or sparse attention (a prefill after a
    cached prefix has no capped pairs carried)."""
    if getattr(cost_model, "layer_windows", None) or getattr(kv_pool, "layer_windows", None):
        return ("prefix caching is not modelled with sliding-window layers (a windowed layer's blocks of a shared "
                "prefix leave the window)")
    if getattr(cost_model, "index_topk", None) is not None:
        return ("prefix caching is not modelled with sparse attention (a prefill after a cached prefix has no capped "
                "pairs carried)")
    return None


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
    enable_prefix_caching: bool = False,
    kv_transferred: bool = False,
    speculative: Speculation | None = None,
    stop_on_misses: dict[str, tuple[Any, int]] | None = None,
    itl: bool = True,
    verdict_only: bool = False,
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
        As :func:`serve_serial`. On the stretch clock a sliding-window model's stretch also ends where a
        running sequence's context crosses a window (its token-layers then grow more slowly); under
        on-demand admission with sliding windows decode steps are taken one at a time (a windowed layer
        frees blocks as it goes), on the same clock.
    enable_prefix_caching : bool, default False
        vLLM's ``--enable-prefix-caching`` (docs/conventions.md, "Prefix caching"): a prompt's
        leading full blocks whose content the pool holds (:attr:`Request.block_hashes`; a request
        without hashes shares only with itself, after a preemption) are not recomputed and count
        once in the pool; blocks no sequence holds stay cached until the pool needs them (LRU).
        A (re-)prefill of L tokens that hits h is priced as a chunk of L - h tokens after h cached
        ones (:func:`roofline.formulas.cached_prefill_time`; several in one step add up, as in a
        mixed step without decode rows). Both prefill modes, both admissions, both clocks. Not
        with sliding-window layers (refused by name). The KV tokens the result reports
        (``peak_kv_tokens``) are what attention reads, per sequence; its blocks count shared ones once.
    kv_transferred : bool, default False
        The decode pool of disaggregated serving (docs/conventions.md, "Disaggregated prefill and
        decode"; :func:`roofline.sim.serve_disaggregated` sets it): every request arrives with its
        prompt's KV computed elsewhere and its first token, so its ``arrival_s`` is when its KV
        transfer ended and its first token counts then. It is admitted when its KV fits (reserve:
        its lifetime; on demand: the blocks of its P tokens), prefills nothing and joins the running
        batch at once; its first decode step is the next. Preempted, it is re-prefilled here.
        Only with ``prefill="separate"``, without prefix caching and an open-loop workload whose
        requests have ``output_tokens >= 2`` (refused by name otherwise).
    speculative : Speculation or None, default None
        Speculative decoding (:class:`roofline.sim.speculative.Speculation`; docs/conventions.md,
        "Speculative decoding in the scheduler"): every decode step verifies k + 1 positions per
        running sequence and adds the proposer's time; each sequence gains its own accepted tokens
        (seeded draws or the expectation); KV holds the proposals while they are verified (reserve
        admission reserves blocks_for(P + O - 1 + k)); with chunked prefill each running sequence takes
        k + 1 tokens of ``max_num_batched_tokens``, which must be >= ``max_num_seqs`` x (k + 1). Both
        clocks (the stretch clock one step at a time). ``options["speculative"]`` reports it. Refused
        by name: ``record_steps``, sliding windows, a hybrid's state, an engine profile's per-sequence time.
    stop_on_misses : dict or None, default None
        Stop early once the SLO is lost (docs/conventions.md, "Stopping a run early"): ``{"ttft_s": (limit_s,
        allowed), "tpot_s": (limit_s, allowed)}``, either key or both, each limit [s] > 0 and ``allowed`` an int
        >= 0. At every step boundary (both clocks) the requests known to miss a limit are counted: TTFT, a first
        token more than the limit after the arrival, or none yet more than the limit after it; TPOT (O >= 2),
        handed back with (handed back - first token) > limit x (O - 1), or not handed back yet more than
        limit x (O - 1) after the first token; a rejected request misses both. Once more than ``allowed``
        requests are known to miss one limit, the run stops and raises :class:`~roofline.errors.RunStopped`
        (no result). A run that does not stop is the run without it, field by field. None: run to the end.
        With ``kv_transferred`` a TTFT limit is refused (the requests come with their first token).
    itl : bool, default True
        Keep the inter-token gaps for ``summary.itl``. False: none are kept and ``summary.itl`` is None; every
        other field is the same, and the run is cheaper (``roofline plan``'s runs, which read TTFT, TPOT and
        E2E only). Not a bool: InvalidValueError naming ``itl``.
    verdict_only : bool, default False
        With ``stop_on_misses``: a run that ends with no request refused and, for each limit, fewer misses than
        ``allowed`` (so each watched percentile is within its limit) raises :class:`~roofline.errors.RunMet`
        instead of building its result (the summary is the costly part of a verdict: ``roofline plan``'s rate
        search). Any other run is as without it: a result, or RunStopped. Not a bool, or True without
        ``stop_on_misses``: InvalidValueError naming ``verdict_only``.

    Returns
    -------
    SimResult with ``policy == "continuous"``; ``options["prefill"]`` names the mode;
    ``options["enable_prefix_caching"]`` says whether the prefix cache was on, and with it
    ``options["prefix_cache"]`` gives ``hit_rate_tokens`` (tokens hit / tokens looked up over every
    (re-)prefill), ``hit_rate_blocks`` (blocks hit / floor((L - 1) / b) looked up), the counts
    behind them, ``prefill_tokens_saved`` and ``evictions`` (cached free blocks evicted).

    Raises
    ------
    InvalidValueError
        Bad requests or options (an unknown ``prefill``, a budget below ``max_num_seqs``
        with chunking, both budgets given, a cost model without ``mixed_time`` with
        chunking).
    SimulationError
        ``max_steps`` passed.
    RunStopped
        With ``stop_on_misses``: more than ``allowed`` requests miss one of its limits.
    RunMet
        With ``verdict_only``: the run met every limit of ``stop_on_misses`` (no result built).

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
    plan = _ContinuousPlan(cost_model, kv_pool, max_num_seqs=max_num_seqs, admission=admission,
                           max_prefill_tokens=max_prefill_tokens, prefill=prefill,
                           max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                           enable_prefix_caching=enable_prefix_caching, stop_on_misses=stop_on_misses, itl=itl)
    if not isinstance(verdict_only, bool):
        raise InvalidValueError("verdict_only", verdict_only, "must be True or False")
    if verdict_only and stop_on_misses is None:
        raise InvalidValueError("verdict_only", verdict_only, "needs stop_on_misses (the limits it gives the "
                                "verdict of)")
    requests = _listed(requests)
    _check_speculative(speculative, cost_model, record_steps, plan)
    if not isinstance(kv_transferred, bool):
        raise InvalidValueError("kv_transferred", kv_transferred, "must be True or False")
    if kv_transferred:
        _check_transferred(requests, prefill, enable_prefix_caching)
        _check_transferred_stop(plan)
        plan.options["kv_transferred"] = True

    def make_run() -> _Run:
        run = _Run(requests, cost_model, kv_pool, record_steps, max_steps, max_model_len=max_model_len,
                   max_batch=max_num_seqs, prefix_caching=enable_prefix_caching, speculative=speculative,
                   streams=plan.itl)
        run.transferred = kv_transferred
        for i in range(run.n):
            plan.refuse_long_prompt(run, i)
        return run

    run = make_run()
    why = _step_engine_reason(engine, cost_model)
    if why is None and speculative is not None and speculative.proposer is not None:
        why = _step_engine_reason(engine, speculative.proposer)  # the proposer's steps are on the clock too
    first = plan.first_tokens(run.prompt, run.output)

    def serve(tokens: int) -> SimResult:
        r = run if tokens == first or why is not None else make_run()
        if why is None:
            times = [a for a in r.arrival if a is not None]
            times += [*([r.think] if r.closed is not None else []), r.idle]
            drafts = [] if r.drafts is None else r.drafts.constants(max(tokens, 1))
            costs = TickCosts.build(cost_model, [*times, *drafts], r.windows, max_tokens=max(tokens, 1))
            assert costs is not None  # _step_engine_reason checked the stretch terms
            r.on_ticks(costs)
            if r.drafts is not None:
                r.drafts.on_ticks(costs, times, max(tokens, 1))
        plan.scheduler(r, plan.watch(verdict_only)).serve()
        return r.result("continuous", {**plan.options, **_engine_options(why)})

    return _on_clock(serve, why, first)


class _ContinuousPlan:
    """The checked options of continuous batching (one place: :func:`serve_continuous` and
    :func:`roofline.sim.serve_replicas`): the result's ``options``, the prefill mode and budget, the scheduler."""

    def __init__(self, cost_model: Any, kv_pool: Any, *, max_num_seqs: int, admission: str,
                 max_prefill_tokens: int | None, prefill: str, max_num_batched_tokens: int | None,
                 max_model_len: int | None, enable_prefix_caching: bool,
                 stop_on_misses: dict[str, tuple[Any, int]] | None = None, itl: bool = True) -> None:
        check_count("max_num_seqs", max_num_seqs, minimum=1)
        self.stop_on_misses = _checked_stop(stop_on_misses)
        if not isinstance(itl, bool):
            raise InvalidValueError("itl", itl, "must be True or False")
        self.itl = itl  # keep the inter-token gaps (summary.itl); False: none kept, itl None
        if not isinstance(admission, str) or admission not in ADMISSIONS:
            raise InvalidValueError("admission", admission, f"expected one of {', '.join(ADMISSIONS)}")
        if not isinstance(prefill, str) or prefill not in PREFILL_MODES:
            raise InvalidValueError("prefill", prefill, f"expected one of {', '.join(PREFILL_MODES)}")
        if max_prefill_tokens is not None:
            check_count("max_prefill_tokens", max_prefill_tokens, minimum=1)
        if max_num_batched_tokens is not None:
            check_count("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
        if not isinstance(enable_prefix_caching, bool):
            raise InvalidValueError("enable_prefix_caching", enable_prefix_caching, "must be True or False")
        why = prefix_caching_refusal(cost_model, kv_pool) if enable_prefix_caching else None
        if why is not None:
            raise InvalidValueError("enable_prefix_caching", True, why)
        options: dict[str, Any] = {"max_num_seqs": max_num_seqs, "admission": admission,
                                   "max_prefill_tokens": max_prefill_tokens,
                                   "enable_prefix_caching": enable_prefix_caching}
        self.chunk_budget = 0
        if prefill == "chunked":
            if max_prefill_tokens is not None:
                raise InvalidValueError("max_prefill_tokens", max_prefill_tokens,
                                        "is the budget without chunking; with prefill='chunked' give "
                                        "max_num_batched_tokens")
            chunk_budget = DEFAULT_MAX_NUM_BATCHED_TOKENS if max_num_batched_tokens is None else max_num_batched_tokens
            budget: int | None = chunk_budget
            if chunk_budget < max_num_seqs:
                raise InvalidValueError("max_num_batched_tokens", budget, f"must be >= max_num_seqs={max_num_seqs}: "
                                        "each running decode row takes one token of the step's budget")
            if not callable(getattr(cost_model, "mixed_time", None)):
                raise InvalidValueError("cost_model", cost_model, "chunked prefill needs a cost model with mixed_time "
                                        "(roofline.sim.RooflineCostModel or UnitCostModel)")
            options.update(prefill=prefill, max_num_batched_tokens=budget, max_model_len=max_model_len)
            name: str = "max_num_batched_tokens"
            self.chunk_budget = chunk_budget
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
        self.options = options
        self.max_num_seqs = max_num_seqs
        self.on_demand = admission == "on_demand"
        self.chunked = prefill == "chunked"
        self.budget = budget
        self.name = name

    def refuse_long_prompt(self, run: _Run, i: int) -> None:
        """Without chunking, reject request i of ``run`` if its prompt alone exceeds the prefill budget."""
        budget = self.budget
        if not self.chunked and budget is not None and run.reason[i] is None and run.prompt[i] > budget:
            run.reason[i] = f"prompt of {run.prompt[i]} tokens exceeds {self.name}={budget}"
            run.refused_count += 1

    def first_tokens(self, prompt: list[int], output: list[int]) -> int:
        """The most tokens of one step the first stretch clock covers: a (re-)prefill of one request, or the
        step budget."""
        budget = self.budget
        if self.chunked and budget is not None:
            return budget
        longest = max((p + o - 1 for p, o in zip(prompt, output, strict=True)), default=1)
        return min(longest, budget if budget is not None else longest)

    def watch(self, verdict_only: bool = False) -> _SLOWatch | None:
        """A new count of SLO misses for one run (all its schedulers share it), or None without ``stop_on_misses``
        (``verdict_only``: one run of one scheduler, which raises RunMet when it met every limit)."""
        return None if self.stop_on_misses is None else _SLOWatch(self.stop_on_misses, verdict_only)

    def scheduler(self, run: _Run, watch: _SLOWatch | None = None) -> _Continuous:
        """The scheduler of this plan over ``run``, counting its SLO misses into ``watch`` (None: none)."""
        s: _Continuous
        if self.chunked:
            s = _Chunked(run, self.max_num_seqs, self.on_demand, self.chunk_budget)
        else:
            s = _Continuous(run, self.max_num_seqs, self.on_demand, self.budget, self.name)
        s.watch_slo(watch)
        return s


def _checked_stop(stop_on_misses: Any) -> dict[str, tuple[Any, int]] | None:
    """``stop_on_misses`` checked: None, or a dict of ``"ttft_s"`` and/or ``"tpot_s"`` -> (limit [s] > 0, a finite
    number; allowed, an int >= 0). Raises InvalidValueError naming the field (``stop_on_misses["ttft_s"]``)."""
    if stop_on_misses is None:
        return None
    if not isinstance(stop_on_misses, dict) or not stop_on_misses:
        raise InvalidValueError("stop_on_misses", stop_on_misses, "expected a dict of ttft_s and/or tpot_s -> "
                                "(limit_s, allowed), or None")
    checked = {}
    for metric, pair in stop_on_misses.items():
        if metric not in _SLOWatch.METRICS:
            raise InvalidValueError("stop_on_misses", metric, f"expected one of {', '.join(_SLOWatch.METRICS)}")
        field = f"stop_on_misses[{metric!r}]"
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidValueError(field, pair, "expected (limit_s, allowed)")
        limit, allowed = pair
        check_scalar(field, limit)
        check_positive(field, limit)
        check_count(field, allowed, minimum=0)
        checked[metric] = (limit, int(allowed))
    return checked


def _check_speculative(speculative: Any, cost_model: Any, record_steps: Any, plan: _ContinuousPlan) -> None:
    """Refuse by name what speculative decoding does not model (docs/conventions.md, "Speculative decoding in the
    scheduler"); record it in the plan's options."""
    if speculative is None:
        return
    if not isinstance(speculative, Speculation):
        raise InvalidValueError("speculative", speculative, "expected a roofline.sim.Speculation or None")
    if record_steps is True:
        raise InvalidValueError("record_steps", True, "per-step records of speculative steps: not modelled yet "
                                "(a record would be priced without the proposer)")
    for field, why in (("layer_windows", "sliding-window layers"), ("state_bytes", "a hybrid's recurrent state"),
                       ("per_sequence", "an engine profile's per-sequence time"),
                       ("index_topk", "sparse attention (its capped context sum)")):
        if getattr(cost_model, field, None):
            raise InvalidValueError("speculative", speculative.method, f"with {why}: not modelled yet (a "
                                    "verification step has no decode row to carry it)")
    rows = plan.max_num_seqs * (1 + speculative.num_speculative_tokens)
    if plan.chunked and plan.chunk_budget < rows:
        raise InvalidValueError("max_num_batched_tokens", plan.chunk_budget, f"must be >= max_num_seqs x (k + 1) = "
                                f"{rows}: each running sequence verifies k + 1 tokens of the step's budget")


def _check_transferred(requests: Any, prefill: Any, enable_prefix_caching: bool) -> None:
    """Refuse by name what a pool of requests that arrive with their KV computed does not take."""
    if prefill != "separate":
        raise InvalidValueError("prefill", prefill, "kv_transferred requests prefill nothing: only with "
                                "prefill='separate' (a preempted one is re-prefilled in a step of its own)")
    if enable_prefix_caching:
        raise InvalidValueError("enable_prefix_caching", True, "not modelled for kv_transferred requests")
    if isinstance(requests, ClosedLoop):
        raise InvalidValueError("requests", requests, "kv_transferred takes the requests of a prefill pool, "
                                "not closed-loop clients")
    if isinstance(requests, Iterable) and not isinstance(requests, (str, bytes)):
        for r in requests:
            if isinstance(r, Request) and r.output_tokens < 2:
                raise InvalidValueError("requests", r, "a kv_transferred request needs output_tokens >= 2 (its "
                                        "first token came from the prefill pool; O = 1 has no decode step)")


def _check_transferred_stop(plan: _ContinuousPlan) -> None:
    """Refuse a TTFT limit to stop on where the requests arrive with their first token (``kv_transferred``)."""
    if plan.stop_on_misses is not None and "ttft_s" in plan.stop_on_misses:
        raise InvalidValueError("stop_on_misses", "ttft_s", "kv_transferred requests come with their first token "
                                "(their TTFT is the prefill pool's): no TTFT limit to stop on here")


def _listed(requests: Any) -> Any:
    """Requests taken once, so that a run may read them again (a generator is read once); a closed loop, a
    workload or a tuple as they are, and a value that is not an iterable as it is (the checks name it)."""
    if isinstance(requests, (ClosedLoop, Workload, tuple, str, bytes)) or not isinstance(requests, Iterable):
        return requests
    return tuple(requests)


#: Policy name -> function, as the ``roofline simulate`` command lists them.
POLICIES: dict[str, Callable[..., SimResult]] = {
    "serial": serve_serial,
    "static": serve_static,
    "continuous": serve_continuous,
}
