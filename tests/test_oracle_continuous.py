"""Continuous (iteration-level) batching against static batching and against an independent replay.

Continuous vs static (FCFS, unlimited memory, everyone at t = 0, the same maximum
batch B): counted in **decode steps**, every request starts and finishes no later under
continuous batching than under static batching. Counted in wall-clock time it does
not hold under the conventions (docs/conventions.md: a prefill is a step of its own, and the
running sequences wait during it): a request already running can be overtaken by the
prefill of a request that joins, which static batching never does; the pinned
counterexample below shows it with exact values.

The other properties replay a continuous run from its per-request results alone
(who was admitted when, first token, finish) and rebuild every step's composition:
batch, context sum, prefill tokens, KV tokens and blocks; and check that no request
waits while a slot is free.
"""

from __future__ import annotations

import bisect
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.sim import KVPool, Request, SimResult, UnitCostModel, serve_continuous, serve_static
from roofline.testing.strategies import batch_sizes, cost_models, kv_pools, workloads

#: Cheap simulation oracles run at least 200 examples, more under a bigger profile (tests/conftest.py).
AT_LEAST_200 = settings(settings.get_profile("simulation_oracle"))


def decode_clock(result: SimResult) -> Any:
    """t -> number of decode steps that have ended by time t."""
    ends = [s.end_s for s in result.steps if s.kind == "decode"]
    return lambda t: bisect.bisect_right(ends, t)


@AT_LEAST_200
@given(requests=workloads(max_size=16, max_output_tokens=40, arrivals="zero"), batch=batch_sizes(max_value=6),
       cost=cost_models(kind="any"))
def test_continuous_starts_and_finishes_no_later_than_static_in_decode_steps(requests: Any, batch: int,
                                                                             cost: Any) -> None:
    """All at 0, unlimited KV: each request starts and gets its last token after no more decode steps than in static."""
    static = serve_static(requests, cost, batch_size=batch, record_steps=True)
    cont = serve_continuous(requests, cost, max_num_seqs=batch, record_steps=True)
    d_static, d_cont = decode_clock(static), decode_clock(cont)
    for s, c in zip(static.requests, cont.requests, strict=True):
        note(f"id={s.request.id}: start {d_cont(c.admitted_s)} vs {d_static(s.admitted_s)}, "
             f"finish {d_cont(c.finish_s)} vs {d_static(s.finish_s)}")
        assert d_cont(c.admitted_s) <= d_static(s.admitted_s)
        assert d_cont(c.finish_s) <= d_static(s.finish_s) <= d_static(s.handed_back_s)
    assert sum(x.kind == "decode" for x in cont.steps) <= sum(x.kind == "decode" for x in static.steps)


def test_in_wall_clock_a_running_request_can_finish_later_than_under_static_batching() -> None:
    """B = 2, outputs 3, 2, 2, unit steps: request 0 is handed back at 4 under continuous, 3 under static."""
    requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o) for i, o in enumerate([3, 2, 2])]
    static = serve_static(requests, UnitCostModel(), batch_size=2, record_steps=True)
    cont = serve_continuous(requests, UnitCostModel(), max_num_seqs=2, record_steps=True)
    assert [r.handed_back_s for r in static.requests] == [3, 3, 5]
    assert [r.handed_back_s for r in cont.requests] == [4, 2, 4]
    assert [s.kind for s in cont.steps] == ["prefill", "decode", "prefill", "decode"]  # request 2's prefill
    d_static, d_cont = decode_clock(static), decode_clock(cont)
    assert [d_cont(r.finish_s) for r in cont.requests] == [2, 1, 2]
    assert [d_static(r.finish_s) for r in static.requests] == [2, 1, 3]


@AT_LEAST_200
@given(requests=workloads(max_size=16, max_output_tokens=30), batch=batch_sizes(max_value=6),
       cost=cost_models(kind="unit"))
def test_no_request_waits_while_a_slot_is_free(requests: Any, batch: int, cost: Any) -> None:
    """Unlimited KV: every decode step runs min(B, requests arrived and not finished) sequences."""
    result = serve_continuous(requests, cost, max_num_seqs=batch, record_steps=True)
    for step in result.steps:
        if step.kind == "decode":
            present = sum(r.request.arrival_s <= step.start_s < r.finish_s for r in result.requests)
            assert step.batch == min(batch, present)


@AT_LEAST_200
@given(requests=workloads(max_size=14, max_prompt_tokens=50, max_output_tokens=30),
       batch=batch_sizes(max_value=8), pool=st.one_of(st.none(), kv_pools(max_blocks=60, max_block_size=8)),
       cost=cost_models(kind="any"))
def test_every_step_composition_is_rebuilt_from_the_per_request_results(requests: Any, batch: int,
                                                                        pool: KVPool | None, cost: Any) -> None:
    """Reserve admission: every step's batch, context sum, prefill tokens, KV tokens and blocks follow from who ran."""
    result = serve_continuous(requests, cost, max_num_seqs=batch, kv_pool=pool, record_steps=True)
    spec = pool if pool is not None else KVPool.unlimited()
    done = [r for r in result.requests if not r.rejected]
    generated = {r.request.id: 0 for r in done}
    lifetime = {r.request.id: spec.lifetime_blocks(r.request.prompt_tokens, r.request.output_tokens) for r in done}
    for step in result.steps:
        t = step.start_s
        running = [r for r in done if r.first_token_s <= t < r.finish_s]
        held_tokens = sum(r.request.prompt_tokens + generated[r.request.id] - 1 for r in running)
        held_blocks = sum(lifetime[r.request.id] for r in running)
        assert len(running) <= batch
        if step.kind == "prefill":
            joining = [r for r in done if r.admitted_s == t]
            prompts = [r.request.prompt_tokens for r in joining]
            assert (step.batch, step.prefill_tokens, step.padding_tokens) == (len(joining), sum(prompts), 0)
            assert step.attention_pairs == sum(f.causal_attention_pairs(prompt_tokens=p) for p in prompts)
            assert step.kv_tokens == held_tokens + sum(prompts)
            assert step.kv_blocks == held_blocks + sum(lifetime[r.request.id] for r in joining)
            for r in joining:
                generated[r.request.id] = 1
        else:
            contexts = [r.request.prompt_tokens + generated[r.request.id] for r in running]
            assert (step.batch, step.useful_rows, step.context_sum) == (len(running), len(running), sum(contexts))
            assert step.kv_tokens == sum(contexts) and step.kv_blocks == held_blocks
            for r in running:
                generated[r.request.id] += 1
    assert all(generated[r.request.id] == r.request.output_tokens == r.generated_tokens for r in done)
    assert all(r.handed_back_s == r.finish_s and r.request.arrival_s <= r.admitted_s for r in done)


@AT_LEAST_200
@given(requests=workloads(max_size=14, max_prompt_tokens=50, max_output_tokens=30, arrivals="zero"),
       batch=batch_sizes(max_value=8), pool=st.one_of(st.none(), kv_pools(max_blocks=60, max_block_size=8)),
       admission=st.sampled_from(["reserve", "on_demand"]), cost=cost_models(kind="roofline"))
def test_with_everyone_at_zero_the_schedule_does_not_depend_on_step_times(requests: Any, batch: int,
                                                                           pool: KVPool | None, admission: str,
                                                                           cost: Any) -> None:
    """All at t = 0: the sequence of step compositions is the same under roofline and unit step times."""
    def compositions(c: Any) -> list[tuple]:
        run = serve_continuous(requests, c, max_num_seqs=batch, admission=admission, kv_pool=pool, record_steps=True)
        return [(s.kind, s.batch, s.useful_rows, s.context_sum, s.prefill_tokens, s.attention_pairs, s.kv_tokens,
                 s.kv_blocks) for s in run.steps]

    assert compositions(cost) == compositions(UnitCostModel())
