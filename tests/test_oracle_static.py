"""Static batching: the closed forms of roofline.formulas.batching against the reference scheduler.

A static batch of m rows (docs/conventions.md, "Serving policies") is one padded prefill and
o_max - 1 decode steps: o_max steps in all; finished rows keep their slot; everything is
handed back at the end. The scheduler's per-step records must show exactly that, and
the useful share, makespan and waits must equal the formulas (exact Fractions).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.sim import Request, SimResult, UnitCostModel, serve_static
from roofline.testing.strategies import batch_sizes, cost_models, workloads

#: Cheap simulation oracles run at least 200 examples, more under a bigger profile (tests/conftest.py).
AT_LEAST_200 = settings(settings.get_profile("simulation_oracle"))


def batches_of(result: SimResult) -> list[tuple[list[Any], list[Any]]]:
    """(member requests, step records) of every batch: a batch starts at each prefill record."""
    out: list[tuple[list[Any], list[Any]]] = []
    for step in result.steps:
        if step.kind == "prefill":
            members = [r for r in result.requests if r.admitted_s == step.start_s]
            out.append((members, []))
        out[-1][1].append(step)
    return out


@AT_LEAST_200
@given(requests=workloads(max_size=14, max_output_tokens=40), batch=batch_sizes(max_value=6),
       cost=cost_models(kind="any"))
def test_each_batch_runs_as_many_steps_as_its_longest_output(requests: Any, batch: int, cost: Any) -> None:
    """Every static batch takes exactly max O_i steps (1 prefill + max O_i - 1 decodes), all rows every step."""
    result = serve_static(requests, cost, batch_size=batch, record_steps=True)
    total = 0
    groups = batches_of(result)
    for members, steps in groups:
        o_max = max(r.request.output_tokens for r in members)
        assert 1 <= len(members) <= batch
        assert len(steps) == o_max
        assert [s.kind for s in steps] == ["prefill"] + ["decode"] * (o_max - 1)
        assert all(s.batch == len(members) for s in steps)
        total += o_max
    assert sum(len(m) for m, _ in groups) == len(requests)
    assert result.summary.steps == total


@AT_LEAST_200
@given(requests=workloads(max_size=14, max_output_tokens=40), batch=batch_sizes(max_value=6),
       cost=cost_models(kind="any"))
def test_useful_share_is_sum_over_rows_times_longest_from_the_step_records(requests: Any, batch: int,
                                                                           cost: Any) -> None:
    """Per batch, useful rows / occupied rows over its step records = static_useful_share = sum O / (m max O);
    the summary's per-batch share is their mean, its long-run share useful rows / rows over all steps."""
    result = serve_static(requests, cost, batch_size=batch, record_steps=True)
    useful_all = rows_all = 0
    shares = []
    for members, steps in batches_of(result):
        outputs = [r.request.output_tokens for r in members]
        m, o_max = len(outputs), max(outputs)
        for j, step in enumerate(steps):  # step j: rows with O_i > j still produce a token
            assert step.useful_rows == sum(o > j for o in outputs)
        useful, rows = sum(s.useful_rows for s in steps), sum(s.batch for s in steps)
        share = Fraction(useful, rows)
        assert share == f.static_useful_share(batch=m, length_sum=sum(outputs), length_max=o_max)
        assert share == Fraction(sum(outputs), m * o_max)
        useful_all += useful
        rows_all += rows
        shares.append(share)
    if requests:
        assert result.summary.long_run_useful_share == Fraction(useful_all, rows_all)
        assert result.summary.per_batch_useful_share == sum(shares) / len(shares)
        assert result.summary.slot_occupancy == Fraction(rows_all, batch * result.summary.steps)


@AT_LEAST_200
@given(requests=workloads(max_size=14, max_output_tokens=40, max_prompt_tokens=300, arrivals="zero"),
       batch=batch_sizes(max_value=6), cost=cost_models(kind="any", overhead=True))
def test_makespan_is_the_sum_of_each_batch_prefill_and_longest_decode(requests: Any, batch: int, cost: Any) -> None:
    """All at t = 0: makespan = sum over consecutive batches of B of (padded prefill + o_max - 1 decode steps)."""
    result = serve_static(requests, cost, batch_size=batch, record_steps=True)
    expected = 0
    for k in range(0, len(requests), batch):
        chunk = requests[k:k + batch]
        m, p_max = len(chunk), max(r.prompt_tokens for r in chunk)
        o_max = max(r.output_tokens for r in chunk)
        expected += cost.prefill_time(m * p_max, m * f.causal_attention_pairs(prompt_tokens=p_max))
        expected += sum(cost.decode_time(m, m * (p_max + j)) for j in range(1, o_max))
    note(f"expected makespan {expected}")
    assert result.summary.makespan_s == expected
    assert result.summary.busy_s == expected  # no idle time: everyone is there at 0


@AT_LEAST_200
@given(requests=workloads(min_size=1, max_size=14, max_output_tokens=60, arrivals="zero"),
       batch=batch_sizes(max_value=6),
       step=st.fractions(min_value=Fraction(1, 1000), max_value=10, max_denominator=1000))
def test_a_short_answer_waits_for_the_longest_by_the_handback_delay_formula(requests: Any, batch: int,
                                                                             step: Fraction) -> None:
    """Equal step times s: request i is ready after O_i steps and handed back (max O - O_i) s later."""
    result = serve_static(requests, UnitCostModel(decode=step, prefill=step), batch_size=batch, record_steps=True)
    for members, _ in batches_of(result):
        o_max = max(r.request.output_tokens for r in members)
        for r in members:
            o = r.request.output_tokens
            assert r.finish_s - r.admitted_s == o * step
            assert r.handed_back_s - r.finish_s == f.static_handback_delay(output_tokens=o, length_max=o_max,
                                                                            step_time=step)


@st.composite
def _late_arrivals(draw: st.DrawFn) -> tuple[list[Request], int, int, Fraction]:
    """A full batch of B at t = 0, then 1..B requests arriving while it runs (0 <= a <= its end)."""
    batch = draw(batch_sizes(max_value=6))
    step = draw(st.fractions(min_value=Fraction(1, 100), max_value=5, max_denominator=100))
    first = draw(workloads(min_size=batch, max_size=batch, arrivals="zero", max_output_tokens=50))
    o_max = max(r.output_tokens for r in first)
    times = sorted(draw(st.lists(st.fractions(min_value=0, max_value=o_max * step, max_denominator=100),
                                 min_size=1, max_size=batch)))
    late = [Request(id=batch + i, arrival_s=t, prompt_tokens=draw(st.integers(1, 50)),
                    output_tokens=draw(st.integers(1, 50))) for i, t in enumerate(times)]
    return list(first) + late, batch, o_max, step


@AT_LEAST_200
@given(_late_arrivals())
def test_a_request_arriving_during_a_batch_waits_by_the_join_wait_formula(case: Any) -> None:
    """A request arriving at a while a batch of o_max steps of s runs starts at its end: waits o_max s - a."""
    requests, batch, o_max, step = case
    result = serve_static(requests, UnitCostModel(decode=step, prefill=step), batch_size=batch, record_steps=True)
    for r in result.requests[batch:]:
        a = r.request.arrival_s
        assert r.queue_wait_s == f.static_join_wait(arrival_time=a, length_max=o_max, step_time=step)
        assert r.admitted_s == o_max * step


def test_lesson_batch_short_answer_and_late_request_waits() -> None:
    """The lesson at 5 ms a step: 100-token answer waits 4.5 s; a request one step late waits 4.995 s."""
    step = Fraction(5, 1000)
    requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o)
                for i, o in enumerate([100, 200, 300, 1000])]
    requests.append(Request(id=4, arrival_s=step, prompt_tokens=1, output_tokens=10))
    result = serve_static(requests, UnitCostModel(decode=step, prefill=step), batch_size=4, record_steps=True)
    short, late = result.requests[0], result.requests[4]
    assert short.handed_back_s - short.finish_s == Fraction(9, 2)
    assert late.queue_wait_s == Fraction(999, 200)
    assert result.requests[3].handed_back_s == 5
