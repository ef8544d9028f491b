"""p05: static batching runs at the pace of its longest request: 1,000 steps, 40 % useful.

Claim
-----
A static batch of replies of 100, 200, 300 and 1,000 tokens runs 1,000 steps for its
longest row, and only sum(O_i) / (B max O_i) = 1,600 / 4,000 = 40 % of its row-steps
make a token; finished rows ride along. The lesson's table of wastes, at ~5 ms per step:

* padding: finished rows keep their slots until the longest reply ends, and short
  prompts are padded to the longest one at the start;
* short answers wait: the 100-token answer is ready after 0.5 s (100 steps) but handed
  back with the others after 5 s (1,000 steps), 4.5 s later;
* new requests wait: a request arriving one step after the batch starts cannot join;
  it waits 999 steps, ~5 s, before its own work begins.

The static-batching tutorials' example: outputs 6, 50, 300 -> 356 / 900 = 39.6 %; 50 and 500 -> 55 %.

Assumptions
-----------
* docs/conventions.md, "Serving policies", static batching: the batch is formed up front, its
  prompts padded to the longest, it runs until its longest request finishes, finished
  rows keep their slot, everything is handed back at the end, nobody joins.
* A request of O tokens takes 1 prefill step (its first token) and O - 1 decode steps,
  so with one step time for every step its last token comes after O steps.
* "~5 ms per step": a unit-step cost model of exactly 5 ms per step (the lesson's round
  figure); then the roofline step times of Llama 3.1 8B on an H100 SXM (exact FLOPs).

Sources
-------
The lesson, section 3 and its table; the reference
scheduler ``roofline.sim.serve_static``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._audit import audit_run
from ._proof import Proof, run_script, si

NAME = "p05_static_batching"
REPLIES = (100, 200, 300, 1000)
PROMPTS = (50, 100, 200, 400)
STEP = Fraction(5, 1000)  # the lesson's ~5 ms per step


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import Request, RooflineCostModel, UnitCostModel, serve_static
    from ..symbolic import batching as sb
    from ..symbolic import symbols_for

    B = len(REPLIES)
    p.title("p05 static batching: replies of 100, 200, 300 and 1,000 tokens in one batch of 4")

    p.section("Per-batch useful share: useful row-steps / occupied row-steps")
    p.show("static_useful_share (definition: sum O useful of B x O_max occupied row-steps)", sb.static_useful_share)
    p.legend("length_sum", "batch", "length_max")
    kw = dict(batch=B, length_sum=sum(REPLIES), length_max=max(REPLIES))
    share = sb.static_useful_share.subs(symbols_for(kw))
    p.equal("1,600 / (4 x 1,000) = 40 %", share, Fraction(2, 5), value=f"{float(share) * 100:.0f} %")
    p.equal("fast path = symbolic", f.static_useful_share(**kw), share)
    q4a = f.static_useful_share(batch=3, length_sum=6 + 50 + 300, length_max=300)
    q4b = f.static_useful_share(batch=2, length_sum=50 + 500, length_max=500)
    p.equal("static-batching tutorials: 6, 50, 300 -> 356 / 900", q4a, Fraction(356, 900),
            value=f"{float(q4a) * 100:.1f} %")
    p.equal("static-batching tutorials: 50, 500 -> 55 %", q4b, Fraction(55, 100))

    p.section("The reference scheduler runs the batch (one step = one time unit)")
    unit_requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o) for i, o in enumerate(REPLIES)]
    unit = serve_static(unit_requests, UnitCostModel(), batch_size=B, record_steps=True)
    audit_run(p, "one step = one unit", unit, unit_requests, policy="static", batch_size=B)
    p.equal("steps = 1 prefill + 999 decode = 1,000 (the longest row)", unit.summary.steps, max(REPLIES))
    p.equal("scheduler's long-run useful share (useful rows / occupied rows over its steps; one batch, so the "
            "per-batch share) = the formula", unit.summary.long_run_useful_share, share)
    assert unit.steps is not None  # recorded (record_steps defaults to True)
    padded = sum(int(s.padded_rows) for s in unit.steps)
    p.equal("row-steps spent on finished rows = B max - sum O", padded, B * max(REPLIES) - sum(REPLIES),
            value=f"{padded:,} of {B * max(REPLIES):,}")

    p.section("Short answers wait, at ~5 ms per step")
    p.show("static_handback_delay (definition: handed back after O_max steps, ready after O)", sb.static_handback_delay)
    p.legend("length_max", "step_time", "output_tokens")
    five = UnitCostModel(decode=STEP, prefill=STEP)
    timed = serve_static(unit_requests, five, batch_size=B, record_steps=True)
    first = timed.requests[0]
    p.equal("the 100-token answer is ready after 100 steps = 0.5 s", first.finish_s, 100 * STEP,
            value=si(first.finish_s, "s"))
    p.equal("but handed back with the others after 1,000 steps = 5 s", first.handed_back_s, 1000 * STEP,
            value=si(first.handed_back_s, "s"))
    delay = sb.static_handback_delay.subs(symbols_for(dict(output_tokens=100, length_max=1000, step_time=STEP)))
    p.equal("its delay = (O_max - O) t = 4.5 s (scheduler = formula)", first.handed_back_s - first.finish_s, delay,
            value=si(delay, "s"))
    p.equal("fast path = symbolic", f.static_handback_delay(output_tokens=100, length_max=1000, step_time=STEP), delay)

    p.section("New requests wait at the door")
    p.show("static_join_wait (definition: the batch ends after O_max steps)", sb.static_join_wait)
    p.legend("length_max", "step_time", "arrival_time")
    late = [*unit_requests, Request(id=B, arrival_s=STEP, prompt_tokens=1, output_tokens=100)]
    with_late = serve_static(late, five, batch_size=B, record_steps=True)
    newcomer = with_late.requests[-1]
    join = sb.static_join_wait.subs(symbols_for(dict(arrival_time=STEP, length_max=1000, step_time=STEP)))
    p.equal("arriving one step (5 ms) after the start, it waits 999 steps (scheduler = formula)",
            newcomer.queue_wait_s, join, value=si(join, "s"))
    p.equal("fast path = symbolic", f.static_join_wait(arrival_time=STEP, length_max=1000, step_time=STEP), join)
    p.within("~5 s before its own work begins (lesson)", join, Fraction(49, 10), Fraction(51, 10), unit="s")

    p.section("Padding of prompts at the start (Llama 3.1 8B on an H100 SXM, roofline step times)")
    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_model(model, gpu)
    real = [Request(id=i, arrival_s=0, prompt_tokens=pr, output_tokens=o)
            for i, (pr, o) in enumerate(zip(PROMPTS, REPLIES, strict=True))]
    run = serve_static(real, cost, batch_size=B, record_steps=True)
    audit_run(p, "roofline steps", run, real, policy="static", batch_size=B, cost=cost)
    assert run.steps is not None
    prefill = run.steps[0]
    p.equal(f"prompts {', '.join(map(str, PROMPTS))} padded to {max(PROMPTS)}: B x max - sum padding tokens",
            prefill.padding_tokens, B * max(PROMPTS) - sum(PROMPTS), value=f"{prefill.padding_tokens} tokens")
    prompt_share = f.static_useful_share(batch=B, length_sum=sum(PROMPTS), length_max=max(PROMPTS))
    p.equal("useful share of the prefill = the same formula over prompt lengths",
            Fraction(prefill.prefill_tokens - prefill.padding_tokens, prefill.prefill_tokens), prompt_share,
            value=f"{float(prompt_share) * 100:.1f} %")
    r100 = run.requests[0]
    p.holds("with roofline steps (~4.8 ms) the 100-token answer is ready after ~0.5 s and handed back after ~5 s",
            Fraction(45, 100) < r100.finish_s < Fraction(55, 100) and 4 < r100.handed_back_s < 6,
            f"{si(r100.finish_s, 's')} and {si(r100.handed_back_s, 's')}")
    p.equal("and the batch's useful share is still 40 % (the scheduler's count)", run.summary.long_run_useful_share,
            share)

    p.conclude(f"{max(REPLIES):,} steps, {float(share) * 100:.0f} % useful (tutorials: {float(q4a) * 100:.1f} %, "
               f"{float(q4b) * 100:.0f} %); at 5 ms/step the 100-token answer is ready at "
               f"{si(first.finish_s, 's')}, handed back at {si(first.handed_back_s, 's')}; a request 1 step late "
               f"waits {si(join, 's')}; Llama 8B/H100: {si(r100.finish_s, 's')} / {si(r100.handed_back_s, 's')}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
