"""Serial and static batching, written once for both clocks.

Static batching (:func:`~roofline.sim.serve_static`) forms fixed batches first come first
served and runs each to its longest request; serial serving (:func:`~roofline.sim.serve_serial`)
is static batching with batches of one. The batch formation (:func:`serve_batches`) is one loop
over the run state (:class:`roofline.sim.run._Run`) on either clock; a batch
(:func:`_run_batch`) is one padded prefill step and o_max - 1 decode steps, taken one at a time
on the step clock and priced in closed form on the stretch clock (each row's finish is the
stretch to its last step, :meth:`~roofline.sim.stretch.TickCosts.batch_stretch`, cut at the
sliding windows it crosses), so a batch costs O(rows) whatever its lengths.

Conventions: docs/conventions.md, "Serving policies" (static batching, serial serving).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .clock import _FractionTicks, _typed
from .run import _Run

__all__: list[str] = []


def serve_batches(run: _Run, *, batch_size: int, max_wait: Any, budget: Any) -> None:
    """Static batching (serial when batch_size == 1), on the run's clock; fills ``run``.

    ``max_wait`` is on the run's clock (:meth:`~roofline.sim.run._Run.clock_time`); ``budget`` the
    padded prefill's token budget (``math.inf``: none).
    """
    arr, prompt, output, pool = run.arrival, run.prompt, run.output, run.pool
    eligible = [i for i, why in enumerate(run.reason) if why is None]
    count = len(eligible)
    last_arrival = arr[-1] if arr else None
    limit = run.step_limit()
    lifetime, capacity = pool.lifetime_blocks_unchecked, run.capacity  # the requests were checked (run.py)
    free_at: Any = None  # when the device is free
    k = 0
    while k < count:
        head = eligible[k]
        # candidates, first come first served, while the padded batch's lifetime KV fits
        stop, p_max, o_max, ready = k + 1, prompt[head], output[head], None
        while stop - k < batch_size and stop < count:
            j = eligible[stop]
            pm, om = max(p_max, prompt[j]), max(o_max, output[j])
            if (stop - k + 1) * lifetime(pm, om) > capacity or (stop - k + 1) * pm > budget:
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
        if run.steps > limit:
            run.check_steps(limit)
    run.end = free_at


def _run_batch(run: _Run, members: list[int], start: Any) -> Any:
    """One static batch: a padded prefill step, then decode steps to the longest request; returns its end."""
    prompt, output, pool, table, costs = run.prompt, run.output, run.pool, run.table, run.costs
    m = len(members)
    if m == 1:  # serial serving: the same values, without the reductions
        p_max, o_max = prompt[members[0]], output[members[0]]
        prompt_sum, useful, by_output = p_max, o_max, members
    else:
        p_max = max(prompt[i] for i in members)
        o_max = max(output[i] for i in members)
        prompt_sum = sum(prompt[i] for i in members)
        useful = sum(output[i] for i in members)
        by_output = sorted(members, key=output.__getitem__)  # rows in order of their last token
    tokens = m * p_max
    pairs = m * run.prompt_pairs(p_max)
    held, cap = run.held, run.cap
    if cap is None:
        t = start + run.step_cost.prefill_time(tokens, pairs)
    else:  # sparse attention: each padded row's queries attend min(t, K) keys (docs/conventions.md)
        capped_pairs = m * cap.pairs(p_max)
        t = start + run.step_cost.prefill_time(tokens, pairs, capped_pairs)
    if run.first_start is None:
        run.first_start = start
    if table is not None and costs is None:
        table.add_prefill(start, t, m, tokens, tokens - prompt_sum, pairs, m * held(p_max), m * pool.blocks_for(p_max),
                          capped=None if cap is None else (0, capped_pairs))
    admitted, first, prefilled, finish = run.admitted, run.first, run.prefilled, run.finish
    for i in members:
        admitted[i] = start
        first[i] = t
        prefilled[i] = prompt[i]
    if costs is None:  # the step clock: one decode step at a time
        q = 0  # row i's last token ends decode step O_i - 1
        while q < m and output[by_output[q]] == 1:
            finish[by_output[q]] = t
            q += 1
        decode_time = run.step_cost.decode_time
        serial = m == 1
        for j in range(1, o_max):
            s = t
            context_sum = m * held(p_max + j)
            if cap is None:
                t = s + decode_time(m, context_sum)
            else:  # sparse attention: R = m min(c, K) beside S
                capped_sum = m * cap.held(p_max + j)
                t = s + decode_time(m, context_sum, capped_sum)
            if serial:  # one request: its tokens stream, one per step
                run.gaps.add(t - s)
            if table is not None:  # rows still producing: those with O_i > j (q of them have finished)
                table.add_decode(s, t, m, m - q, context_sum, m * pool.blocks_for(p_max + j),
                                 capped=None if cap is None else (capped_sum, 0))
            while q < m and output[by_output[q]] == j + 1:
                finish[by_output[q]] = t
                q += 1
    else:  # the stretch clock: each row's finish is the closed-form stretch to its last step
        start_decode = t
        ends: dict[int, Any] = {1: t}
        for i in by_output:
            o = output[i]
            done = ends.get(o)
            if done is None:
                done = ends[o] = start_decode + _typed(costs.batch_stretch(m, p_max, o - 1), costs.decode_fraction)
            finish[i] = done
        t = ends[o_max]
        if table is not None:  # one row per batch, its steps expanded when read
            table.add_batch(start, type(start) is _FractionTicks, m, p_max, o_max, prompt_sum,
                            [output[i] for i in by_output] if m > 1 else None)
    handed, generated = run.handed, run.generated
    for i in members:
        handed[i] = t
        generated[i] = output[i]
    run.steps += o_max
    run.prefill_steps += 1
    run.useful_rows += useful
    run.rows += m * o_max
    run.hold_slots(m, o_max)
    run.batch_share_sum += 1 if useful == m * o_max else Fraction(useful, m * o_max)  # an int while every batch is full
    run.batches += 1
    kv = m * held(p_max + o_max - 1)
    blocks = m * (pool.blocks_for(p_max + o_max - 1) if not pool.layer_windows
                  else pool.lifetime_blocks_unchecked(p_max, o_max))
    if kv > run.peak_tokens or blocks > run.peak_blocks:
        run.peak(kv, blocks)
    if run.closed is not None:  # pragma: no cover - serial and static batching refuse closed loops
        for i in members:
            run.release(i, t)
    return t
