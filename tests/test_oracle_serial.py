"""One-by-one (serial) serving: completion times and waits against roofline.formulas.batching.

Served one at a time, first come first served (docs/conventions.md, "Serving policies"):
request i alone takes its service time S_i = prefill(P_i) + decodes at contexts
P_i + 1, ..., P_i + O_i - 1. With everyone at t = 0, request j finishes at
S_1 + ... + S_j; with equal service times S that is j S, it waits (j - 1) S and the
mean wait is (n - 1) S / 2 (exact Fractions, roofline or unit step times).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import get_accelerator, get_model
from roofline.sim import Request, RooflineCostModel, serve_serial
from roofline.testing.strategies import cost_models, workloads

#: Cheap simulation oracles run at least 200 examples, more under a bigger profile (tests/conftest.py).
AT_LEAST_200 = settings(settings.get_profile("simulation_oracle"))


def service_time(cost: Any, prompt: int, output: int) -> Any:
    """Time to serve one request alone: its prefill, then O - 1 decode steps of batch 1."""
    total = cost.prefill_time(prompt, f.causal_attention_pairs(prompt_tokens=prompt))
    return total + sum(cost.decode_time(1, prompt + j) for j in range(1, output))


@AT_LEAST_200
@given(requests=workloads(max_size=12, max_output_tokens=40, max_prompt_tokens=300, arrivals="zero"),
       cost=cost_models(kind="any", overhead=True))
def test_completion_times_are_prefix_sums_of_service_times(requests: Any, cost: Any) -> None:
    """Everyone at t = 0: request j is handed back at S_1 + ... + S_j and starts at S_1 + ... + S_(j-1)."""
    result = serve_serial(requests, cost, record_steps=True)
    elapsed: Any = 0
    for r in result.requests:
        assert r.admitted_s == elapsed
        elapsed += service_time(cost, r.request.prompt_tokens, r.request.output_tokens)
        assert r.handed_back_s == r.finish_s == elapsed


@AT_LEAST_200
@given(requests=workloads(max_size=12, max_output_tokens=40, max_prompt_tokens=300, rate=Fraction(1, 20)),
       cost=cost_models(kind="unit"))
def test_completions_follow_the_queue_recursion_with_arrivals(requests: Any, cost: Any) -> None:
    """Any arrivals: finish_j = max(arrival_j, finish_(j-1)) + S_j (a single FIFO server)."""
    result = serve_serial(requests, cost, record_steps=True)
    free: Any = 0
    for r in result.requests:
        start = max(r.request.arrival_s, free)
        assert r.admitted_s == start
        free = start + service_time(cost, r.request.prompt_tokens, r.request.output_tokens)
        assert r.handed_back_s == free


@AT_LEAST_200
@given(n=st.integers(1, 40), prompt=st.integers(1, 4000), output=st.integers(1, 40),
       cost=cost_models(kind="any", overhead=True))
def test_identical_requests_wait_by_the_serial_wait_formulas(n: int, prompt: int, output: int, cost: Any) -> None:
    """n identical requests at 0: request j finishes at j S, waits (j - 1) S; mean wait = serial_mean_wait."""
    requests = [Request(id=i, arrival_s=0, prompt_tokens=prompt, output_tokens=output) for i in range(n)]
    result = serve_serial(requests, cost, record_steps=True)
    s = service_time(cost, prompt, output)
    for j, r in enumerate(result.requests, start=1):
        assert r.handed_back_s == f.serial_completion_time(position=j, service_time=s)
        assert r.queue_wait_s == f.serial_wait(position=j, service_time=s)
    assert result.summary.queue_wait.mean == f.serial_mean_wait(requests=n, service_time=s)
    assert sum(r.queue_wait_s for r in result.requests) / n == (n - 1) * Fraction(s) / 2


def test_lesson_the_hundredth_request_waits_for_all_99() -> None:
    """Llama 3.1 8B on H100 SXM, 100 identical requests: the last waits 99 service times, the mean 49.5."""
    cost = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    requests = [Request(id=i, arrival_s=0, prompt_tokens=200, output_tokens=50) for i in range(100)]
    result = serve_serial(requests, cost, record_steps=True)
    s = service_time(cost, 200, 50)
    assert 0.24 < float(s) < 0.25  # 50 steps of about 4.8 ms
    assert result.requests[-1].queue_wait_s == 99 * s
    assert result.summary.queue_wait.mean == Fraction(99, 2) * s
