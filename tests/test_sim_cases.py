"""The lesson's scheduling claims and worked cases from public bug reports, with their right values."""

from __future__ import annotations

from fractions import Fraction
from itertools import groupby

import pytest

from roofline import formulas as f
from roofline import get_accelerator, get_model
from roofline.errors import InvalidValueError
from roofline.sim import (
    KVPool,
    Request,
    RooflineCostModel,
    UnitCostModel,
    serve_continuous,
    serve_serial,
    serve_static,
)

LLAMA = get_model("llama-3.1-8b")
H100 = get_accelerator("h100-sxm")
ROOFLINE = RooflineCostModel.for_model(LLAMA, H100)


def reqs(*pairs: tuple[int, int], arrival: object = 0) -> list[Request]:
    """Requests (P, O) all arriving at ``arrival``, ids 0, 1, ..."""
    return [Request(id=i, arrival_s=arrival, prompt_tokens=p, output_tokens=o) for i, (p, o) in enumerate(pairs)]


def runs(result: object) -> list[tuple[str, int, int]]:
    """The steps as (kind, batch, how many in a row)."""
    return [(k, b, len(list(g))) for (k, b), g in groupby(result.steps, key=lambda s: (s.kind, s.batch))]


def policies(**pool: object) -> list[tuple[str, object]]:
    """Every policy (and both continuous admissions) as (name, function of (requests, cost))."""
    return [
        ("serial", lambda r, c: serve_serial(r, c, record_steps=True, **pool)),
        ("static", lambda r, c: serve_static(r, c, batch_size=4, record_steps=True, **pool)),
        ("continuous-reserve", lambda r, c: serve_continuous(r, c, record_steps=True, **pool)),
        ("continuous-on-demand", lambda r, c: serve_continuous(r, c, admission="on_demand", record_steps=True, **pool)),
    ]


# --------------------------------------------------------------------------- the lesson


def test_lesson_static_batch_runs_1000_steps_with_40_percent_useful() -> None:
    """Replies of 100, 200, 300, 1,000 tokens in one static batch: 1,000 steps of 4 rows, useful share 40%."""
    r = serve_static(reqs((10, 100), (10, 200), (10, 300), (10, 1000)), UnitCostModel(), batch_size=4,
                     record_steps=True)
    assert r.summary.steps == 1000 and r.summary.prefill_steps == 1
    assert r.summary.long_run_useful_share == Fraction(2, 5)
    assert runs(r) == [("prefill", 4, 1), ("decode", 4, 999)]
    useful = [s.useful_rows for s in r.steps]
    # step k (0 = the prefill) makes token k + 1: the 100-token row's last token is made in step 99
    assert useful[99] == 4 and useful[100] == 3 and useful[200] == 2 and useful[300] == 1 and useful[999] == 1
    assert sum(useful) == 1600 and sum(s.padded_rows for s in r.steps) == 2400


def test_lesson_short_reply_ready_after_half_a_second_handed_back_after_five() -> None:
    """At 5 ms per step the 100-token reply is ready after 0.5 s but handed back with the others after 5 s."""
    five_ms = UnitCostModel(decode=Fraction(1, 200), prefill=Fraction(1, 200))
    r = serve_static(reqs((10, 100), (10, 200), (10, 300), (10, 1000)), five_ms, batch_size=4, record_steps=True)
    short = r.requests[0]
    assert short.finish_s == Fraction(1, 2) and short.handed_back_s == 5
    assert [x.handed_back_s for x in r.requests] == [5, 5, 5, 5]
    assert [x.finish_s for x in r.requests] == [Fraction(1, 2), 1, Fraction(3, 2), 5]


def test_lesson_short_reply_on_h100_with_roofline_steps() -> None:
    """Llama 3.1 8B on H100 SXM: ~4.8 ms steps, so the 100-token reply is ready at ~0.48 s, handed back at ~4.9 s."""
    r = serve_static(reqs((10, 100), (10, 200), (10, 300), (10, 1000)), ROOFLINE, batch_size=4, record_steps=True)
    short = r.requests[0]
    assert isinstance(short.finish_s, Fraction)
    assert 0.47 < short.finish_s < 0.50 and 4.8 < short.handed_back_s < 5.0
    step = r.steps[500]
    assert step.duration_s == f.step_time(
        batch=4, context_sum=4 * (10 + 500), weight_bytes=LLAMA.weight_bytes,
        kv_bytes_per_token=LLAMA.kv_bytes_per_token, flops_per_token=LLAMA.matmul_flops_per_token,
        attention_flops_per_token=LLAMA.attention_flops_per_token, bandwidth=Fraction(H100.bandwidth),
        peak_flops=Fraction(H100.peak_flops), overhead=0,
    )


def test_lesson_request_arriving_one_step_late_waits_the_whole_batch() -> None:
    """A request arriving one step after a 1,000-step batch starts cannot join: it starts at step 1,000."""
    workload = reqs((10, 100), (10, 200), (10, 300), (10, 1000)) + [
        Request(id=4, arrival_s=1, prompt_tokens=10, output_tokens=5)
    ]
    r = serve_static(workload, UnitCostModel(), batch_size=4, record_steps=True)
    late = r.requests[4]
    assert late.admitted_s == 1000 and late.queue_wait_s == 999
    assert late.handed_back_s == 1005 and r.summary.steps == 1005


def test_lesson_serial_completions_are_prefix_sums_of_service_times() -> None:
    """Serving 100 requests one by one (all at t = 0): request j is handed back at the sum of service times 1..j."""
    workload = [Request(id=j, arrival_s=0, prompt_tokens=50 + 7 * j, output_tokens=1 + (13 * j) % 40)
                for j in range(100)]
    terms = dict(weight_bytes=LLAMA.weight_bytes, kv_bytes_per_token=LLAMA.kv_bytes_per_token,
                 flops_per_token=LLAMA.matmul_flops_per_token,
                 attention_flops_per_token=LLAMA.attention_flops_per_token,
                 bandwidth=Fraction(H100.bandwidth), peak_flops=Fraction(H100.peak_flops), overhead=0)

    def service(p: int, o: int) -> Fraction:
        prefill = f.prefill_step_time(prefill_tokens=p, attention_pairs=f.causal_attention_pairs(prompt_tokens=p),
                                      **terms)
        return prefill + sum(f.step_time(batch=1, context_sum=c, **terms) for c in range(p + 1, p + o))

    r = serve_serial(workload, ROOFLINE, record_steps=True)
    done = Fraction(0)
    for req, res in zip(workload, r.requests, strict=True):
        assert res.admitted_s == done
        done += service(req.prompt_tokens, req.output_tokens)
        assert res.handed_back_s == done == res.finish_s
    last = r.requests[-1]
    assert last.queue_wait_s == sum(service(q.prompt_tokens, q.output_tokens) for q in workload[:99])
    assert r.summary.steps == sum(q.output_tokens for q in workload)


# --------------------------------------------------------------------------- KV cache


def test_block_rounding_ten_sequences_of_17_tokens_use_20_percent_of_blocks() -> None:
    """block 16, 100 blocks: 10 sequences of 17 tokens use 20 blocks (20%) but 10.6% of slots; 50 fit, not 94."""
    # source: vLLM PR #57336
    pool = KVPool.blocks(100, block_size=16)
    assert 10 * pool.blocks_for(17) == 20
    assert Fraction(10 * pool.blocks_for(17), pool.capacity_blocks) == Fraction(1, 5)
    assert round(170 / pool.capacity_tokens, 3) == 0.106
    assert pool.sequences_that_fit(17) == 50 and KVPool.tokens(1600).sequences_that_fit(17) == 94


@pytest.mark.parametrize(("pool", "admitted"), [(KVPool.blocks(100, block_size=16), 50), (KVPool.tokens(1600), 94)])
def test_scheduler_admits_50_sequences_of_17_tokens_into_100_blocks(pool: KVPool, admitted: int) -> None:
    """In the scheduler: 100 waiting 17-token sequences, one prefill step admits 50 (blocks) or 94 (tokens)."""
    # source: vLLM PR #57336
    r = serve_continuous(reqs(*[(17, 1)] * 100), UnitCostModel(), max_num_seqs=1000, kv_pool=pool, record_steps=True)
    first = r.steps[0]
    assert first.batch == admitted and first.kv_tokens == 17 * admitted
    assert first.kv_blocks == admitted * pool.blocks_for(17) <= pool.capacity_blocks
    assert r.summary.completed == 100 and r.summary.peak_kv_blocks == first.kv_blocks


LIFETIME_BLOCKS = [((16, 17), 2), ((1, 16), 1), ((17, 16), 2), ((33, 100), 9)]


@pytest.mark.parametrize(("po", "blocks"), LIFETIME_BLOCKS)
def test_lifetime_blocks_at_block_boundaries(po: tuple[int, int], blocks: int) -> None:
    """pegainfer #288: lifetime blocks of (P, O) with block 16 are blocks_for(P + O - 1): 2, 1, 2, 9."""
    assert KVPool.blocks(1000, block_size=16).lifetime_blocks(*po) == blocks


@pytest.mark.parametrize(("po", "blocks"), LIFETIME_BLOCKS)
def test_admission_and_growth_use_the_same_rule(po: tuple[int, int], blocks: int) -> None:
    """on-demand growth ends at the lifetime blocks reserve admission takes; a pool one block short rejects."""
    # source: pegainfer #288
    for admission in ("reserve", "on_demand"):
        exact = serve_continuous(reqs(po), UnitCostModel(), admission=admission,
                                 kv_pool=KVPool.blocks(blocks, block_size=16), record_steps=True)
        assert exact.summary.completed == 1 and exact.summary.peak_kv_blocks == blocks
        assert exact.steps[-1].kv_blocks == blocks
        assert exact.steps[-1].kv_tokens == po[0] + po[1] - 1
        short = serve_continuous(reqs(po), UnitCostModel(), admission=admission,
                                 kv_pool=KVPool.blocks(blocks - 1, block_size=16), record_steps=True)
        assert short.summary.rejected == 1 and short.summary.steps == 0
        for serve in (serve_serial, serve_static):
            assert serve(reqs(po), UnitCostModel(), kv_pool=KVPool.blocks(blocks - 1, block_size=16)).summary.rejected


# --------------------------------------------------------------------------- scheduler semantics


@pytest.mark.parametrize(("name", "serve"), policies())
def test_first_token_from_prefill(name: str, serve: object) -> None:
    """P = 200, O = 50 takes 1 prefill step and 49 decode steps for 50 tokens; O = 1 takes no decode step."""
    # source: inference-sim #1097
    r = serve(reqs((200, 50)), UnitCostModel())
    assert runs(r) == [("prefill", 1, 1), ("decode", 1, 49)]
    assert r.requests[0].generated_tokens == 50 and r.requests[0].first_token_s == 1
    assert r.requests[0].handed_back_s == 50
    assert [s.context_sum for s in r.steps][1:] == list(range(201, 250))
    one = serve(reqs((200, 1)), UnitCostModel())
    assert runs(one) == [("prefill", 1, 1)] and one.summary.decode_steps == 0
    assert one.requests[0].handed_back_s == 1 and one.requests[0].tpot_s is None


def test_preemption_by_recompute_counts_tokens_once() -> None:
    """P = 500, O = 100 preempted after 60 tokens: a 560-token prefill, 100 tokens, 98 decodes, 1,060 prefilled."""
    # source: inference-sim #1091
    # a 719-token pool: the older request (100, 61) and the 500-token prompt both fit until
    # decode step 60 needs 720 slots; the younger is preempted with 60 tokens generated.
    r = serve_continuous(reqs((100, 61), (500, 100)), UnitCostModel(), admission="on_demand",
                         kv_pool=KVPool.tokens(719), record_steps=True)
    victim = r.requests[1]
    assert victim.preemptions == 1 and victim.generated_tokens == 100
    assert victim.prefill_tokens == 1060
    assert runs(r) == [("prefill", 2, 1), ("decode", 2, 59), ("decode", 1, 1), ("prefill", 1, 1), ("decode", 1, 39)]
    decodes_with_victim = 59 + 39
    assert decodes_with_victim == 98
    resume = r.steps[61]
    assert resume.kind == "prefill" and resume.prefill_tokens == 560
    assert resume.attention_pairs == f.causal_attention_pairs(prompt_tokens=560)
    assert r.steps[-1].kv_tokens == 500 + 100 - 1
    assert r.summary.output_tokens == 161 and sum(s.useful_rows for s in r.steps) == 161
    assert r.summary.peak_kv_tokens == 718 <= 719


@pytest.mark.parametrize("admission", ["reserve", "on_demand"])
def test_requests_that_can_never_fit_are_rejected_and_do_not_block(admission: str) -> None:
    """pool of 100 x 16-token blocks: R1 (2,000, 10) and R3 (1,500, 200; 107 blocks) are rejected, R2 runs."""
    # source: vLLM PR #1534
    pool = KVPool.blocks(100, block_size=16)
    workload = [Request(id=1, arrival_s=0, prompt_tokens=2000, output_tokens=10),
                Request(id=2, arrival_s=0, prompt_tokens=100, output_tokens=50),
                Request(id=3, arrival_s=0, prompt_tokens=1500, output_tokens=200)]
    assert pool.lifetime_blocks(1500, 200) == 107
    for r in (serve_continuous(workload, UnitCostModel(), admission=admission, kv_pool=pool, record_steps=True),
              serve_static(workload, UnitCostModel(), kv_pool=pool, record_steps=True),
              serve_serial(workload, UnitCostModel(), kv_pool=pool, record_steps=True)):
        r1, r2, r3 = r.requests
        assert r1.rejected and "2009 tokens needs 126 blocks" in r1.rejected_reason
        assert r3.rejected and "needs 107 blocks" in r3.rejected_reason and "has 100" in r3.rejected_reason
        assert r1.handed_back_s is None and r3.e2e_s is None
        assert not r2.rejected and r2.admitted_s == 0 and r2.handed_back_s == 50
        assert r.summary.rejected == 2 and r.summary.completed == 1 and r.summary.steps == 50


@pytest.mark.parametrize(("outputs", "steps", "share"), [
    ((6, 50, 300), 300, Fraction(356, 900)),
    ((50, 500), 500, Fraction(55, 100)),
    ((100, 200, 300, 1000), 1000, Fraction(40, 100)),
])
def test_static_batching_waste(outputs: tuple[int, ...], steps: int, share: Fraction) -> None:
    """one static batch runs max O steps with useful share sum(O) / (B x max O): 39.6%, 55%, 40%."""
    # source: the static-batching tutorials' example
    r = serve_static(reqs(*[(8, o) for o in outputs]), UnitCostModel(), batch_size=len(outputs), record_steps=True)
    assert r.summary.steps == steps and r.summary.long_run_useful_share == share
    assert {x.handed_back_s for x in r.requests} == {steps}


def test_tpot_divides_by_output_tokens_minus_one() -> None:
    """E2E 2.00 s, TTFT 0.20 s, 101 tokens: TPOT = 1.80 / 100 = 18.0 ms (not 17.8 ms, not E2E / N = 19.8 ms)."""
    # source: vLLM PR #17802
    cost = UnitCostModel(prefill=Fraction(1, 5), decode=Fraction(18, 1000))
    r = serve_serial(reqs((20, 101)), cost, record_steps=True).requests[0]
    assert r.ttft_s == Fraction(1, 5) and r.e2e_s == 2
    assert r.tpot_s == Fraction(18, 1000)
    assert round(float((r.e2e_s - r.ttft_s) / 101) * 1e3, 1) == 17.8 and round(float(r.e2e_s / 101) * 1e3, 1) == 19.8
    assert serve_continuous(reqs((20, 101)), cost, record_steps=True).requests[0].tpot_s == Fraction(18, 1000)


# ------------------------------------------------------------------ extreme sizes (counts past 64 bits, huge blocks)


@pytest.mark.parametrize("policy", ["serial", "static", "continuous", "chunked"])
def test_step_records_keep_counts_past_64_bits(policy: str) -> None:
    """A prompt of 10**15 tokens (Request's limit) has 5 x 10**29 attention pairs, past int64: the step engine records
    them exactly (it raised OverflowError from the step table)."""
    p = 10**15
    workload = reqs((p, 2), (5, 3))
    run = {"serial": lambda: serve_serial(workload, ROOFLINE, engine="step", record_steps=True),
           "static": lambda: serve_static(workload, ROOFLINE, batch_size=2, engine="step", record_steps=True),
           "continuous": lambda: serve_continuous(workload, ROOFLINE, engine="step", record_steps=True),
           "chunked": lambda: serve_continuous(workload, ROOFLINE, engine="step", prefill="chunked",
                                               max_num_batched_tokens=p + 300, record_steps=True)}[policy]
    r = run()
    assert r.summary.completed == 2
    pairs = p * (p + 1) // 2  # the causal pairs of the long prompt
    first = r.steps[0]
    if policy == "static":  # both rows padded to P
        assert first.attention_pairs == 2 * pairs and first.prefill_tokens == 2 * p
    elif policy == "serial":
        assert first.attention_pairs == pairs
    else:  # both prompts in the first step
        assert first.attention_pairs == pairs + 15 and first.prefill_tokens == p + 5
    assert first.duration_s == ROOFLINE.prefill_time(first.prefill_tokens, first.attention_pairs)


def test_sequences_that_fit_refuses_an_empty_sequence_by_name() -> None:
    """sequences_that_fit(0) raised ZeroDivisionError (0 blocks per sequence); now the field and value are named."""
    for pool in (KVPool.blocks(100, block_size=16), KVPool(100, 16, layer_windows=(4, None))):
        with pytest.raises(InvalidValueError, match=r"^tokens=0"):
            pool.sequences_that_fit(0)
        assert pool.sequences_that_fit(17) == (50 if not pool.layer_windows else 100 // (2 + 2))


def test_windowed_lifetime_blocks_do_not_scale_with_the_block_size() -> None:
    """Windows (4, full), blocks of 10**12, (P, O) = (5, 10**12): the most held is at c = 10**12 + 1 (2 blocks in
    each layer), 4 layer-blocks; the lifetime scanned every context of a block (10**12 of them) before."""
    b = 10**12
    pool = KVPool(3, b, layer_windows=(4, None))
    assert pool.blocks_for(b) == 2 and pool.blocks_for(b + 1) == 4 and pool.blocks_for(b + 4) == 3
    assert pool.lifetime_blocks(5, b) == 4
    assert pool.never_fits_reason(5, b) == f"lifetime KV of {b + 4} tokens needs 4 layer-blocks of {b}; the pool has 3"
    for pool in (KVPool(3, 16, layer_windows=(4, None)), KVPool.blocks(3, block_size=16)):
        # O = 0 (no request has it) raised ValueError from an empty max with windows: refused by name
        with pytest.raises(InvalidValueError, match=r"^output_tokens=0"):
            pool.lifetime_blocks(5, 0)
        with pytest.raises(InvalidValueError, match=r"^prompt_tokens=0"):
            pool.never_fits_reason(0, 5)
