"""Checks that a run of the reference scheduler priced and booked every step by the definitions.

The proofs that run ``roofline.sim`` compare what the scheduler did with what the lesson
says; those comparisons hold whatever price the scheduler put on a step. This audit
recomputes, from the definitions written out here (docs/conventions.md, "One step",
"Memory", "Serving policies") and not from the package's formulas, what each recorded
step must hold:

* every request reserves its lifetime KV, P + O - 1 slots (the last token is never fed back);
* the causal query-key pairs of the prefills, p (p + 1) / 2 per prompt of p tokens (a
  static batch pads every prompt to its longest);
* the KV blocks held after the first step, ceil(tokens / b) per sequence;
* with a roofline cost model: each step's bytes (W + k x tokens), FLOPs (B F + a S in a
  decode step, T F + a Q in a prefill) and duration max(bytes / BW, FLOPs / peak), and the
  compute time of the first and last decode step, FLOPs / peak.

A fault in any formula the scheduler uses for these numbers makes a check fail
(tests/test_planted_faults.py plants such faults).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ._proof import Proof

__all__ = ["audit_run"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pairs(p: int) -> int:
    return p * (p + 1) // 2


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return bool(a == b)


def audit_run(p: Proof, label: str, run: Any, requests: Sequence[Any], *, policy: str, batch_size: int = 1,
              cost: Any = None) -> None:
    """Check ``run`` (a ``SimResult`` with steps recorded) against the definitions (module docstring).

    Parameters
    ----------
    p : Proof
    label : str, names the run in the checks' labels
    run : roofline.sim.SimResult, from ``serve_static`` (``serve_serial`` is static with batch
        size 1) or ``serve_continuous`` with ``record_steps=True``, no preemption (lifetime KV
        reserved at admission)
    requests : the workload given to the scheduler, in arrival order, all at t = 0
    policy : {"static", "continuous"}
    batch_size : int, the static batch size (1 for serial)
    cost : RooflineCostModel or None, to check bytes, FLOPs and durations of every step

    The block size is the run's (``run.summary.block_size``; 1 for an unlimited pool).
    """
    if run.steps is None:  # pragma: no cover - programming error in a proof
        raise AssertionError("audit_run needs the steps recorded")
    steps = list(run.steps)  # built once (SimResult.steps walks its table on every pass)
    block_size = run.summary.block_size
    p.holds(f"{label}: every request reserves its lifetime KV, P + O - 1 slots",
            all(r.lifetime_kv_slots == r.prompt_tokens + r.output_tokens - 1 for r in requests))

    if policy == "static":
        batches = [requests[i:i + batch_size] for i in range(0, len(requests), batch_size)]
        pairs = sum(len(b) * _pairs(max(r.prompt_tokens for r in b)) for b in batches)
        first = batches[0]
        blocks = len(first) * _ceil_div(max(r.prompt_tokens for r in first), block_size)
        how = "B x ceil(padded prompt / b) for the first batch"
    else:
        pairs = sum(_pairs(r.prompt_tokens) for r in requests)
        first_start = steps[0].start_s
        joined = [r for r, done in zip(requests, run.requests, strict=True) if done.admitted_s == first_start]
        blocks = sum(_ceil_div(r.prompt_tokens + r.output_tokens - 1, block_size) for r in joined)
        how = "sum of ceil((P + O - 1) / b) over the requests that joined"
    recorded_pairs = sum(s.attention_pairs for s in steps if s.kind == "prefill")
    rule = "B p_max (p_max + 1) / 2 per batch (prompts padded)" if policy == "static" else "sum of p (p + 1) / 2"
    p.holds(f"{label}: the prefills' causal pairs = {rule}",
            recorded_pairs == pairs, f"{recorded_pairs:,} pairs")
    p.holds(f"{label}: KV blocks held after the first step = {how}", steps[0].kv_blocks == blocks,
            f"{steps[0].kv_blocks} blocks of {block_size}")

    if cost is None:
        return
    W, k, F, a = cost.weight_bytes, cost.kv_bytes_per_token, cost.flops_per_token, cost.attention_flops_per_token
    BW, peak = cost.bandwidth, cost.peak_flops
    exact = not any(isinstance(v, float) for v in (W, k, F, a, BW, peak))
    bad: list[int] = []
    seen: set[tuple[Any, ...]] = set()
    for s in steps:
        key = (s.kind, s.batch, s.context_sum, s.prefill_tokens, s.attention_pairs, s.bytes, s.flops, s.duration_s)
        if key in seen:  # a step like one already checked (a serial run repeats the same request)
            continue
        seen.add(key)
        if s.kind == "decode":
            nbytes, flops = W + k * s.context_sum, s.batch * F + a * s.context_sum
        else:
            nbytes, flops = W + k * s.prefill_tokens, s.prefill_tokens * F + a * s.attention_pairs
        if exact:
            duration = max(Fraction(nbytes) / Fraction(BW), Fraction(flops) / Fraction(peak))
        else:
            duration = max(nbytes / BW, flops / peak)
        if not (_same(s.bytes, nbytes) and _same(s.flops, flops) and _same(s.duration_s, duration)):
            bad.append(s.index)
    p.holds(f"{label}: every step's bytes, FLOPs and time = W + k tokens, B F + a S (prefill T F + a Q), "
            "max(bytes / BW, FLOPs / peak)", not bad,
            f"{len(steps):,} steps" + (f", first wrong: step {bad[0]}" if bad else ""))
    from .. import formulas as f

    decode = [s for s in steps if s.kind == "decode"]
    ends = [decode[0], decode[-1]] if decode else []
    p.holds(f"{label}: compute time of the first and last decode step = FLOPs / peak (formulas.compute_time)",
            all(_same(f.compute_time(batch=s.batch, context_sum=s.context_sum, flops_per_token=F,
                                     attention_flops_per_token=a, peak_flops=peak), s.flops / peak)
                for s in ends))
