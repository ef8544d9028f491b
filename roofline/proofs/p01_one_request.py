"""p01: one request at a time reads all the weights for every token, and everyone else queues.

Claim
-----
Serving one request at a time, Llama 3.1 8B in BF16 on an H100 SXM reads ~16 GB of
weights per token; a decode step takes ~4.8 ms; the math units are busy ~0.33 % of it
(the GPU is loaded with reading, not thinking). Served one after another, 100 users
all there at t = 0: the last waits for all 99 before it, (100 - 1) x the service time
(about 190 s for replies of 400 tokens), and the mean wait is (n - 1) / 2 service times.

Assumptions
-----------
* Conventions of docs/conventions.md: weight bytes = parameters x 2 (BF16);
  a decode step streams the weights plus each sequence's KV over HBM bandwidth and does
  its FLOPs at the dense peak; step time = max(memory time, compute time) (roofline,
  perfect overlap, no per-step overhead).
* FLOPs per token: the lesson's round 2 x P (named "2p"), beside the exact matmul
  count 2 x (projections + lm_head) plus 4 L H d c attention FLOPs ("exact").
* The queue: 100 identical requests at t = 0, prompts of 100 tokens and replies of 400
  tokens (the mean of the lesson's replies 100, 200, 300, 1,000), first come first
  served; a request is 1 prefill step and 399 decode steps (the prefill makes the first
  token). The reference scheduler (``roofline.sim.serve_serial``) runs the same queue.

Sources
-------
Llama 3.1 8B config.json (model card; 8,030,261,248 parameters published); NVIDIA H100
datasheet (3.35 TB/s) and Hopper whitepaper (989.4 TFLOP/s dense BF16), as in
the Sources in roofline.hardware and the model presets; the lesson "One-by-One Serving vs Static Batching", section 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._audit import audit_run
from ._proof import Proof, run_script, si

NAME = "p01_one_request"
PROMPT, REPLY, USERS = 100, 400, 100


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import Request, RooflineCostModel, serve_serial
    from ..symbolic import batching as sb
    from ..symbolic import step_time as st
    from ..symbolic import symbols_for

    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    P, W, k = model.parameters, model.weight_bytes, model.kv_bytes_per_token
    BW, PEAK = Fraction(gpu.bandwidth), Fraction(gpu.peak_flops)
    F_lesson, F_exact = model.two_p_flops_per_token, model.matmul_flops_per_token
    a_exact = model.attention_flops_per_token

    p.title("p01 one request at a time: Llama 3.1 8B, BF16, H100 SXM (3.35 TB/s, 989.4 TFLOP/s dense)")

    p.section("Weights read per token")
    p.say("Producing one token multiplies the activations by every weight matrix once, so every decode "
          "step streams all the weights from HBM, whatever the batch.")
    p.equal("parameters P (counted from the config) = the published total", P, model.published_parameters,
            value=f"{P:,}")
    p.equal("weight bytes W = 2 bytes x P (BF16; the definition, checked on the preset)", W, 2 * P,
            value=f"{W:,} B = {si(W, 'B')}")
    p.within("~16 GB of weights read per token (lesson)", W, 15_500_000_000, 16_500_000_000, unit="B")

    p.section("Step time of one request (batch 1)")
    p.show("step_time", st.step_time)
    p.legend("overhead", "context_sum", "kv_bytes_per_token", "weight_bytes", "bandwidth", "attention_flops_per_token",
             "batch", "flops_per_token", "peak_flops")
    kw = dict(batch=1, context_sum=0, weight_bytes=W, kv_bytes_per_token=k, flops_per_token=F_lesson,
              attention_flops_per_token=0, bandwidth=BW, peak_flops=PEAK, overhead=0)
    t1 = st.step_time.subs(symbols_for(kw))
    memory, compute = Fraction(W) / BW, Fraction(F_lesson) / PEAK
    p.holds("memory time W / BW > compute time F / peak (memory-bound)", memory > compute,
            f"{si(memory, 's')} > {si(compute, 's')}")
    p.equal("step time (B = 1, weights only) = W / BW", t1, memory, value=si(memory, "s"))
    p.equal("fast path roofline.formulas.step_time = the symbolic form", f.step_time(**kw), t1)
    p.within("a step takes ~4.8 ms (lesson)", memory, Fraction(475, 100_000), Fraction(485, 100_000), unit="s")
    with_kv = dict(kw, context_sum=1000)
    t1_kv = f.step_time(**with_kv)
    p.equal("with its own KV at 1,000 tokens: (W + 1000 k) / BW", t1_kv, Fraction(W + 1000 * k) / BW,
            value=f"{si(t1_kv, 's')}, {si(1000 * k, 'B')} more read")

    p.section("How busy the math units are")
    p.show("math_busy_share", st.math_busy_share)
    share = st.math_busy_share.subs(symbols_for(kw))
    ridge = PEAK / BW
    p.equal("with F = 2P FLOP and W = 2P bytes: (F / peak) / (W / BW) = BW / peak = 1 / ridge", share, 1 / ridge,
            value=f"{float(share) * 100:.4f} % [lesson 2 x P]")
    exact_kw = dict(kw, flops_per_token=F_exact, attention_flops_per_token=a_exact)
    share_exact = f.math_busy_share(**exact_kw)
    p.equal("exact matmul count (context 0): F_exact / peak / (W / BW)", share_exact,
            Fraction(F_exact) / PEAK / memory, value=f"{float(share_exact) * 100:.4f} % [exact]")
    p.within("~0.33 % busy (lesson), 2 x P convention", share * 100, Fraction(30, 100), Fraction(35, 100))
    p.within("~0.33 % busy (lesson), exact convention", share_exact * 100, Fraction(30, 100), Fraction(35, 100))
    p.equal("HBM busy the whole step: bandwidth_share = 1", st.bandwidth_share.subs(symbols_for(kw)), 1)
    p.equal("fast path bandwidth_share = 1 too", f.bandwidth_share(**kw), 1)
    p.say("The lesson's 0.33 % lies between the two conventions (0.339 % with 2 x P, 0.316 % with the "
          "exact matmul count): the GPU is loaded with reading, not thinking.")

    p.section(f"{USERS} users served one after another")
    p.show("request j finishes at (definition: the service times of requests 1..j)", sb.serial_completion_time)
    p.show("request j waits before its work starts (definition: requests 1..j-1)", sb.serial_wait)
    p.show("mean wait over n requests (derived: SymPy sums the waits over j)", sb.serial_mean_wait)
    p.legend("position", "service_time", "requests")
    cost = RooflineCostModel.for_model(model, gpu, flops="2p")
    service = cost.prefill_time(PROMPT, f.causal_attention_pairs(prompt_tokens=PROMPT))
    service += sum(cost.decode_time(1, PROMPT + j) for j in range(1, REPLY))
    p.say(f"Service time of one request: 1 prefill step over {PROMPT} tokens (its first token) and "
          f"{REPLY - 1} decode steps at contexts {PROMPT + 1}..{PROMPT + REPLY - 1}: {si(service, 's')} "
          f"({si(service / REPLY, 's')} per token).")
    kv_read = PROMPT + sum(PROMPT + j for j in range(1, REPLY))  # tokens of KV over the request's steps
    by_hand = (REPLY * Fraction(W) + kv_read * Fraction(k)) / BW
    p.holds("every step of it is memory-bound: the prefill's FLOPs take less than its reads",
            Fraction(PROMPT * F_lesson) / PEAK < Fraction(W + PROMPT * k) / BW)
    p.equal(f"service time = ({REPLY} W + k x {kv_read:,} context tokens) / BW, written out from the definitions",
            service, by_hand, value=si(by_hand, "s"))
    wait_last = sb.serial_wait.subs(symbols_for(dict(position=USERS, service_time=service)))
    mean_wait = sb.serial_mean_wait.subs(symbols_for(dict(requests=USERS, service_time=service)))
    p.equal("fast path serial_wait = symbolic", f.serial_wait(position=USERS, service_time=service), wait_last,
            value=f"{USERS - 1} x {si(service, 's')} = {si(wait_last, 's')}")
    p.equal("fast path serial_mean_wait = symbolic", f.serial_mean_wait(requests=USERS, service_time=service),
            mean_wait, value=si(mean_wait, "s"))
    requests = [Request(id=i, arrival_s=0, prompt_tokens=PROMPT, output_tokens=REPLY) for i in range(USERS)]
    sim = serve_serial(requests, cost, record_steps=False)
    audit_run(p, "reference scheduler, first 2 users (the rest repeat them)",
              serve_serial(requests[:2], cost, record_steps=True), requests[:2], policy="static", batch_size=1,
              cost=cost)
    last = sim.requests[-1]
    measured = sim.requests[0].handed_back_s  # the first user's service time, as the scheduler ran it
    p.equal("reference scheduler: the last user's queue wait = the formula at its own first service time",
            last.queue_wait_s, f.serial_wait(position=USERS, service_time=measured),
            value=si(last.queue_wait_s, "s"))
    p.equal("reference scheduler: the last user is handed back at n s",
            last.handed_back_s, f.serial_completion_time(position=USERS, service_time=service),
            value=si(last.handed_back_s, "s"))
    assert sim.summary.queue_wait is not None
    p.equal("reference scheduler: mean queue wait = (n - 1) s / 2", sim.summary.queue_wait.mean, mean_wait)
    p.say(f"Meanwhile the GPU makes one token per step: {float(REPLY * USERS / last.handed_back_s):.0f} tokens/s "
          "for everyone together.")

    p.conclude(f"W = {si(W, 'B')} read per token, step {si(memory, 's')}, math busy "
               f"{float(share) * 100:.3f} % [2P] / {float(share_exact) * 100:.3f} % [exact]; "
               f"user {USERS} waits {si(wait_last, 's', 4)} ({USERS - 1} x {si(service, 's')})")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
