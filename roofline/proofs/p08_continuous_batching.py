"""p08: iteration-level scheduling keeps every slot busy while requests wait.

Claim
-----
Deciding who is in the batch after every step (continuous, iteration-level batching)
removes static batching's three wastes on the lesson's workload: a finished request
leaves at once and a waiting one takes its slot, so every slot is busy while requests
wait (static batching keeps finished rows: its long-run useful share, useful rows over
occupied rows, is 40 %); a finished answer is handed back at once (the 100-token reply at its 100th step, not
the batch's 1,000th), and a request arriving during a step joins at the next step
boundary when there is room (it waits less than one step, not ~5 s). On 12 requests
of the lesson's lengths the same 4 slots need 1,703 steps where static batching needs
3,000, and with roofline step times deliver ~1.8x the tokens per second. Slot
occupancy (occupied rows / (4 slots x steps), a third quantity beside the two useful
shares) is reported: about 70.5 %, the rest being the tail where fewer than 4 requests
remain.

Assumptions
-----------
* docs/conventions.md, "Serving policies": after every step finished requests leave (handed
  back at once) and waiting ones join, first come first served, while the batch is under
  its maximum and their KV fits; each join costs one prefill step (which gives the first
  token); a request arriving during a step is admitted at the next boundary at the earliest.
* Workload: replies of 100, 200, 300, 1,000 tokens (the lesson's), three times over,
  all at t = 0, prompts of 1 token; at most 4 sequences at once (static batches of 4);
  unlimited KV. Time in steps (unit cost), then roofline step times of Llama 3.1 8B on an
  H100 SXM with 100-token prompts.

Sources
-------
The lesson, section 3 and its closing note ("decide who's in the batch after every
single step: iteration-level scheduling"); Yu et al., "Orca: A Distributed Serving System
for Transformer-Based Generative Models" (OSDI 2022), iteration-level scheduling; the
reference scheduler ``roofline.sim.serve_continuous`` and ``serve_static``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._audit import audit_run
from ._proof import Proof, run_script, si

NAME = "p08_continuous_batching"
REPLIES = (100, 200, 300, 1000)
ROUNDS, SLOTS = 3, 4
STEP = Fraction(5, 1000)


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import Request, RooflineCostModel, UnitCostModel, serve_continuous, serve_static

    p.title("p08 continuous (iteration-level) batching on the lesson's replies of 100, 200, 300, 1,000 tokens")
    lengths = [o for _ in range(ROUNDS) for o in REPLIES]
    requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o) for i, o in enumerate(lengths)]
    unit = UnitCostModel()

    p.section(f"{len(requests)} requests, {SLOTS} slots, one step = one time unit")
    static = serve_static(requests, unit, batch_size=SLOTS, record_steps=True)
    cont = serve_continuous(requests, unit, max_num_seqs=SLOTS, record_steps=True)
    audit_run(p, "static", static, requests, policy="static", batch_size=SLOTS)
    audit_run(p, "continuous", cont, requests, policy="continuous")
    p.equal("static batching: long-run useful share (useful rows / occupied rows) 40 %, three batches of 100, 200, "
            "300, 1,000", static.summary.long_run_useful_share, Fraction(2, 5))
    assert cont.steps is not None and static.steps is not None
    occupied = sum(s.batch for s in cont.steps)
    p.equal("continuous: occupied row-steps = sum of O (each request holds its slot for its 1 prefill + O - 1 "
            "decode steps, and not one step more)", occupied, sum(lengths), value=f"{occupied:,} row-steps")
    occupancy = Fraction(occupied, SLOTS * len(cont.steps))
    static_occupancy = Fraction(sum(s.batch for s in static.steps), SLOTS * len(static.steps))
    p.say(f"Slot occupancy (occupied rows / ({SLOTS} slots x steps)): continuous {float(occupancy) * 100:.1f} % "
          f"({occupied:,} / ({SLOTS} x {len(cont.steps):,})), the idle part being the tail where fewer than "
          f"{SLOTS} requests remain; static {float(static_occupancy) * 100:.0f} %, its finished rows riding along.")
    decode = [s for s in cont.steps if s.kind == "decode"]
    admitted = [r.admitted_s for r in cont.requests]
    waiting_steps = [s for s in decode if any(a > s.start_s for a in admitted)]
    p.holds(f"while requests wait, every decode step runs all {SLOTS} slots", bool(waiting_steps)
            and all(s.batch == SLOTS for s in waiting_steps),
            f"{len(waiting_steps)} of {len(decode)} decode steps had a queue, all with {SLOTS} rows")
    p.equal("the same tokens are produced", cont.summary.output_tokens, static.summary.output_tokens,
            value=f"{cont.summary.output_tokens:,} tokens")
    ratio = Fraction(cont.summary.steps, static.summary.steps)
    p.holds("continuous needs fewer steps for them", cont.summary.steps < static.summary.steps,
            f"{cont.summary.steps:,} steps ({cont.summary.prefill_steps} prefill) against {static.summary.steps:,}: "
            f"{float(ratio):.2f}")
    lower = -(-sum(o - 1 for o in lengths) // SLOTS)
    p.holds("and no fewer decode steps than ceil(sum(O - 1) / slots) allows",
            cont.summary.decode_steps >= lower, f"{cont.summary.decode_steps:,} >= {lower:,}")

    p.section("A finished answer is handed back at once")
    first_static, first_cont = static.requests[0], cont.requests[0]
    p.equal("static: the 100-token answer, ready at step 100, is handed back at step 1,000",
            (first_static.finish_s, first_static.handed_back_s), (100, 1000))
    p.equal("continuous: handed back when its last token is made, step 100", (first_cont.finish_s,
                                                                              first_cont.handed_back_s), (100, 100))

    p.section("A request arriving during a step joins at the next step boundary (room for 8)")
    five = UnitCostModel(decode=STEP, prefill=STEP)
    late = [*requests[:SLOTS], Request(id=SLOTS, arrival_s=STEP / 2, prompt_tokens=1, output_tokens=100)]
    cont_late = serve_continuous(late, five, max_num_seqs=2 * SLOTS, record_steps=True)
    static_late = serve_static(late, five, batch_size=SLOTS, record_steps=True)
    newcomer, newcomer_static = cont_late.requests[-1], static_late.requests[-1]
    p.holds("continuous: it waits less than one ~5 ms step", 0 < newcomer.queue_wait_s <= STEP,
            si(newcomer.queue_wait_s, "s"))
    p.holds("static: it waits for the whole batch, ~5 s", newcomer_static.queue_wait_s > 990 * STEP,
            si(newcomer_static.queue_wait_s, "s"))

    p.section("Roofline step times: Llama 3.1 8B, BF16, H100 SXM, 100-token prompts")
    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    cost = RooflineCostModel.for_model(model, gpu, exact=False)
    real = [Request(id=i, arrival_s=0, prompt_tokens=100, output_tokens=o) for i, o in enumerate(lengths)]
    s_real = serve_static(real, cost, batch_size=SLOTS, record_steps=False).summary
    c_run = serve_continuous(real, cost, max_num_seqs=SLOTS, record_steps=True)
    audit_run(p, "continuous, roofline steps", c_run, real, policy="continuous", cost=cost)
    c_real = c_run.summary
    speedup = float(c_real.output_tokens_per_s) / float(s_real.output_tokens_per_s)
    p.holds("continuous batching delivers more tokens per second with the same 4 slots", speedup > 1,
            f"{float(c_real.output_tokens_per_s):,.0f} against {float(s_real.output_tokens_per_s):,.0f} tokens/s: "
            f"x{speedup:.2f}")
    assert c_real.e2e is not None and s_real.e2e is not None
    p.holds("and the mean end-to-end latency falls", c_real.e2e.mean < s_real.e2e.mean,
            f"{si(c_real.e2e.mean, 's')} against {si(s_real.e2e.mean, 's')}")

    p.conclude(f"slot occupancy {float(occupancy) * 100:.1f} % (static: long-run useful share 40 %); "
               f"{cont.summary.steps:,} steps against {static.summary.steps:,} "
               f"({float(ratio):.2f}); 100-token reply back at step 100 (static 1,000); a late arrival waits "
               f"{si(newcomer.queue_wait_s, 's')} (static {si(newcomer_static.queue_wait_s, 's')}); Llama 8B/H100 "
               f"x{speedup:.2f} tokens/s")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
