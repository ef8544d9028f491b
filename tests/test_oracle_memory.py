"""KV memory: the capacity formulas of roofline.formulas.kv_cache against the reference scheduler.

Two claims (docs/conventions.md, "Memory"): the KV in use never exceeds the pool, whatever
the policy, admission mode and workload; and with identical requests the most
sequences the scheduler ever runs at once is the sequences-that-fit formula at their
lifetime context P + O - 1: floor(floor(budget / k) / c) with token accounting,
floor(blocks / ceil(c / b)) with paged blocks (vLLM #12330, vLLM PR #57336, pegainfer #288). Budgets are the real
ones of the preset models on the preset parts, and generated ones.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import get_accelerator, get_model
from roofline.estimate import kv_budget_for, kv_capacity
from roofline.sim import KVPool, Request, UnitCostModel, serve_continuous, serve_serial, serve_static
from roofline.testing.strategies import (
    accelerators,
    batch_sizes,
    cost_models,
    kv_budgets,
    kv_pools,
    model_configs,
    workloads,
)

#: Cheap simulation oracles run at least 200 examples, more under a bigger profile (tests/conftest.py).
AT_LEAST_200 = settings(settings.get_profile("simulation_oracle"))


@AT_LEAST_200
@given(
    requests=workloads(max_size=12, max_prompt_tokens=60, max_output_tokens=30),
    pool=kv_pools(max_blocks=80, max_block_size=16),
    policy=st.sampled_from(["serial", "static", "reserve", "on_demand"]),
    batch=batch_sizes(max_value=8),
    cost=cost_models(kind="any"),
)
def test_kv_in_use_never_exceeds_the_pool(requests: Any, pool: KVPool, policy: str, batch: int, cost: Any) -> None:
    """At the end of every step the blocks in use are <= the pool's blocks and the tokens held fit in them."""
    if policy == "serial":
        result = serve_serial(requests, cost, kv_pool=pool, record_steps=True)
    elif policy == "static":
        result = serve_static(requests, cost, batch_size=batch, kv_pool=pool, record_steps=True)
    else:
        result = serve_continuous(requests, cost, max_num_seqs=batch, admission=policy, kv_pool=pool, record_steps=True)
    peak = 0
    for step in result.steps:
        assert step.kv_blocks <= pool.capacity_blocks
        assert step.kv_tokens <= step.kv_blocks * pool.block_size <= pool.capacity_tokens
        peak = max(peak, step.kv_blocks)
    assert result.summary.peak_kv_blocks == peak <= pool.capacity_blocks
    for r in result.requests:  # rejected exactly when the lifetime KV can never fit
        assert r.rejected == (pool.lifetime_blocks(r.request.prompt_tokens, r.request.output_tokens)
                              > pool.capacity_blocks)


@st.composite
def _identical_fill(draw: st.DrawFn) -> tuple[Any, Any, int, int, int, int]:
    """A budget (real or generated), KV bytes per token, block size, and (P, O) with 1 to 48 sequences fitting."""
    if draw(st.booleans()):
        accelerator = draw(accelerators(generated=False))
        model = draw(model_configs(presets=True, generated=False).filter(
            lambda m: m.weight_bytes < accelerator.usable_memory))  # 70B does not fit 40 GB
        budget = draw(kv_budgets(model=model, accelerator=accelerator))
    else:
        model = draw(model_configs(max_layers=8, max_hidden=1024))
        budget = draw(kv_budgets(min_value=1, max_value=10**12))
    k = model.kv_bytes_per_token
    block = draw(st.sampled_from([1, 16]) | st.integers(1, 64))
    blocks = f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=k, block_size=block)
    tokens = blocks * block
    if tokens < 2:  # nothing of 2 tokens fits: draw again on a bigger budget
        budget = (2 * block) * k * draw(st.integers(1, 1000))
        tokens = f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=k, block_size=block) * block
    context = draw(st.integers(max(2, -(-tokens // 48)), tokens))
    output = draw(st.integers(2, min(4, context)))
    return budget, k, block, context - output + 1, output, context


@AT_LEAST_200
@given(case=_identical_fill(), extra=st.integers(0, 3), admission_cap=st.booleans())
def test_most_sequences_running_at_once_is_the_sequences_that_fit_formula(case: Any, extra: int,
                                                                          admission_cap: bool) -> None:
    """Identical (P, O) at t = 0, reserve-the-lifetime: max running = sequences_that_fit(_blocks) at P + O - 1."""
    budget, k, block, prompt, output, context = case
    pool = KVPool.from_budget(budget=budget, kv_bytes_per_token=k, block_size=block)
    if block == 1:
        fit = f.sequences_that_fit(budget=budget, kv_bytes_per_token=k, context=context)
    else:
        fit = f.sequences_that_fit_blocks(budget=budget, kv_bytes_per_token=k, context=context, block_size=block)
    note(f"pool={pool} fit={fit}")
    assert 1 <= fit <= 48
    n = fit + extra
    requests = [Request(id=i, arrival_s=0, prompt_tokens=prompt, output_tokens=output) for i in range(n)]
    max_num_seqs = n + 1 if admission_cap else 256
    result = serve_continuous(requests, UnitCostModel(), max_num_seqs=max_num_seqs, kv_pool=pool, record_steps=True)
    running = max(s.batch for s in result.steps if s.kind == "decode")
    assert running == min(n, fit)
    assert result.summary.completed == n
    static = serve_static(requests, UnitCostModel(), batch_size=n, kv_pool=pool, record_steps=True)
    assert max(s.batch for s in static.steps) == min(n, fit)  # a static batch closes when the next row won't fit


@AT_LEAST_200
@given(model=model_configs(presets=True, generated=False), accelerator=accelerators(generated=False),
       context=st.integers(1, 200_000), block=st.sampled_from([1, 8, 16, 32]))
def test_block_accounting_never_fits_more_than_token_accounting(model: Any, accelerator: Any, context: int,
                                                                block: int) -> None:
    """Real budgets: sequences fitting in blocks <= sequences fitting in tokens, and the pool agrees with both."""
    try:
        budget = kv_budget_for(model, accelerator)
    except ValueError:  # 70B weights do not fit a 40 GB part
        assert model.weight_bytes >= accelerator.usable_memory * Fraction(9, 10)
        return
    cap = kv_capacity(model, budget=budget, context=context, block_size=block)
    assert cap.sequences_blocks <= cap.sequences
    assert KVPool.from_budget(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token,
                              block_size=block).sequences_that_fit(context) == cap.sequences_blocks
    assert KVPool.tokens(cap.tokens).sequences_that_fit(context) == cap.sequences


def test_the_scheduler_runs_90_sequences_of_1000_tokens_in_5691_blocks() -> None:
    """vLLM #12330: 5,691 blocks of 16 run 90 sequences of 1,000 tokens at once (not 91); 91,056 token slots run 91."""
    k = get_model("llama-3.1-8b").kv_bytes_per_token
    budget = 5691 * 16 * k
    requests = [Request(id=i, arrival_s=0, prompt_tokens=998, output_tokens=3) for i in range(100)]
    for block, expected in ((16, 90), (1, 91)):
        pool = KVPool.from_budget(budget=budget, kv_bytes_per_token=k, block_size=block)
        result = serve_continuous(requests, UnitCostModel(), kv_pool=pool, record_steps=True)
        assert max(s.batch for s in result.steps if s.kind == "decode") == expected
    assert get_accelerator("h100-sxm").usable_memory > budget
