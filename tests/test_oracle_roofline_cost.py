"""The roofline step-time formulas against the reference scheduler's simulated steps.

Every step the scheduler runs under :class:`~roofline.sim.RooflineCostModel` must take
exactly the roofline time of that step's composition (docs/conventions.md, "One step"):
max((W + k S) / BW, (B F + a S) / peak) + overhead for a decode step, and
max((W + k T) / BW, (T F + a Q) / peak) + overhead for a prefill. The expected value is
written out here from the conventions (not taken from ``roofline.formulas``) and also
compared with the fast path, so a fault in either the formulas, the cost model or the
scheduler's bookkeeping shows up. Models are the presets and generated configs; parts
are the presets, their measured copies and generated ones; everything exact (Fractions).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import get_accelerator, get_model
from roofline.estimate import criticality, decode_step
from roofline.sim import (
    KVPool,
    Request,
    RooflineCostModel,
    SimResult,
    serve_continuous,
    serve_serial,
    serve_static,
)
from roofline.testing.strategies import (
    accelerators,
    batch_sizes,
    cost_models,
    kv_pools,
    model_configs,
    workloads,
)

TERMS = ("weight_bytes", "kv_bytes_per_token", "flops_per_token", "attention_flops_per_token", "bandwidth",
         "peak_flops", "overhead")

#: Cheap simulation oracles run at least 200 examples, more under a bigger profile (tests/conftest.py).
AT_LEAST_200 = settings(settings.get_profile("simulation_oracle"))


def _terms(cost: RooflineCostModel) -> dict[str, Fraction]:
    return {name: Fraction(getattr(cost, name)) for name in TERMS}


def roofline_decode(t: dict[str, Fraction], batch: int, context_sum: int) -> tuple[Fraction, Fraction, Fraction]:
    """(bytes, FLOPs, step time) of a decode step, written out from docs/conventions.md."""
    nbytes = t["weight_bytes"] + t["kv_bytes_per_token"] * context_sum
    flops = batch * t["flops_per_token"] + t["attention_flops_per_token"] * context_sum
    return nbytes, flops, max(nbytes / t["bandwidth"], flops / t["peak_flops"]) + t["overhead"]


def roofline_prefill(t: dict[str, Fraction], tokens: int, pairs: int) -> tuple[Fraction, Fraction, Fraction]:
    """(bytes, FLOPs, step time) of a prefill step over ``tokens`` tokens with ``pairs`` causal pairs."""
    nbytes = t["weight_bytes"] + t["kv_bytes_per_token"] * tokens
    flops = tokens * t["flops_per_token"] + t["attention_flops_per_token"] * pairs
    return nbytes, flops, max(nbytes / t["bandwidth"], flops / t["peak_flops"]) + t["overhead"]


def _run(policy: str, requests: Any, cost: Any, batch: int, pool: KVPool | None, admission: str) -> SimResult:
    if policy == "serial":
        return serve_serial(requests, cost, kv_pool=pool, record_steps=True)
    if policy == "static":
        return serve_static(requests, cost, batch_size=batch, kv_pool=pool, record_steps=True)
    return serve_continuous(requests, cost, max_num_seqs=batch, admission=admission, kv_pool=pool, record_steps=True)


@AT_LEAST_200
@given(
    cost=cost_models(kind="roofline", overhead=True),
    requests=st.one_of([workloads(max_size=8, max_prompt_tokens=64, max_output_tokens=16, rate=rate)
                        for rate in (1, 1000, 10**6)]),
    policy=st.sampled_from(["serial", "static", "continuous"]),
    batch=batch_sizes(max_value=6),
    pool=st.one_of(st.none(), kv_pools(max_blocks=64, max_block_size=8)),
    admission=st.sampled_from(["reserve", "on_demand"]),
)
def test_every_simulated_step_takes_the_roofline_step_time_of_its_composition(
    cost: RooflineCostModel, requests: Any, policy: str, batch: int, pool: KVPool | None, admission: str
) -> None:
    """Each simulated step's duration, bytes and FLOPs equal the roofline formulas on that step's composition."""
    result = _run(policy, requests, cost, batch, pool, admission)
    t = _terms(cost)
    end = None
    busy = Fraction(0)
    for step in result.steps:
        if step.kind == "decode":
            nbytes, flops, expected = roofline_decode(t, step.batch, step.context_sum)
            fast = f.step_time(batch=step.batch, context_sum=step.context_sum, **t)
        else:
            nbytes, flops, expected = roofline_prefill(t, step.prefill_tokens, step.attention_pairs)
            fast = f.prefill_step_time(prefill_tokens=step.prefill_tokens, attention_pairs=step.attention_pairs, **t)
        note(f"{step}")
        assert isinstance(step.duration_s, Fraction)
        assert step.duration_s == expected == fast
        assert (step.bytes, step.flops) == (nbytes, flops)
        assert end is None or step.start_s >= end  # one step at a time
        end = step.end_s
        busy += step.duration_s
    assert result.summary.busy_s == busy


@AT_LEAST_200
@given(
    model=model_configs(presets=True, max_layers=64),
    accelerator=accelerators(),
    flops=st.sampled_from(["exact", "2p"]),
    batch=batch_sizes(max_value=512),
    prompt=st.integers(1, 4096),
    output=st.integers(2, 4),
    policy=st.sampled_from(["static", "continuous"]),
)
def test_identical_sequences_give_batch_over_step_time_tokens_per_second(
    model: Any, accelerator: Any, flops: str, batch: int, prompt: int, output: int, policy: str
) -> None:
    """B identical sequences: every decode step makes B tokens, throughput B / step time = formulas.throughput."""
    cost = RooflineCostModel.for_model(model, accelerator, flops=flops)
    requests = [Request(id=i, arrival_s=0, prompt_tokens=prompt, output_tokens=output) for i in range(batch)]
    result = _run(policy, requests, cost, batch, None, "reserve")
    decodes = [s for s in result.steps if s.kind == "decode"]
    assert len(decodes) == output - 1
    t = _terms(cost)
    for j, step in enumerate(decodes, start=1):
        context = prompt + j  # every row attends over its prompt and j generated tokens
        assert (step.batch, step.useful_rows, step.context_sum) == (batch, batch, batch * context)
        simulated = Fraction(step.useful_rows) / step.duration_s
        assert simulated == f.throughput(batch=batch, context_sum=batch * context, **t)
        assert simulated == batch / roofline_decode(t, batch, batch * context)[2]
        assert simulated == decode_step(model, accelerator, batch=batch, context=context, flops=flops).throughput


@st.composite
def _near_critical(draw: st.DrawFn) -> tuple[Any, Any, str, int, int, Any]:
    """A model, part, convention, context (often below c*) and a batch often at B* - 1, B* or B* + 1."""
    model = draw(model_configs(presets=True, max_layers=64))
    accelerator = draw(accelerators())
    flops = draw(st.sampled_from(["exact", "2p"]))
    c_star = criticality(model, accelerator, context=1, flops=flops).critical_context
    if c_star is not None and c_star > 3 and draw(st.booleans()):
        context = draw(st.integers(2, min(1200, math.ceil(c_star) - 1)))  # a critical batch exists
    else:
        context = draw(st.integers(2, 1200))
    crit = criticality(model, accelerator, context=context, flops=flops).critical_batch
    offset = draw(st.sampled_from([None, -1, 0, 1]))
    if crit is not None and crit <= 1500 and offset is not None:
        batch = max(1, crit + offset)
    else:
        batch = draw(st.integers(1, 1500))
    return model, accelerator, flops, context, batch, crit


@AT_LEAST_200
@given(_near_critical())
def test_a_step_is_compute_bound_exactly_when_its_batch_reaches_the_critical_batch(case: Any) -> None:
    """B identical sequences at context c: the simulated step is compute-bound iff B >= B*(c) (never if B* is none)."""
    model, accelerator, flops, context, batch, crit = case
    note(f"B*={crit}")
    terms_crit = f.critical_batch(context=context, **{k: v for k, v in _terms(
        RooflineCostModel.for_model(model, accelerator, flops=flops)).items() if k != "overhead"})
    assert terms_crit == crit
    cost = RooflineCostModel.for_model(model, accelerator, flops=flops)
    requests = [Request(id=i, arrival_s=0, prompt_tokens=context - 1, output_tokens=2) for i in range(batch)]
    (step,) = [s for s in serve_static(requests, cost, batch_size=batch, record_steps=True).steps if s.kind == "decode"]
    assert step.context_sum == batch * context
    bw, peak = Fraction(accelerator.bandwidth), Fraction(accelerator.peak_flops)
    compute_bound = step.flops / peak >= step.bytes / bw
    assert compute_bound == (crit is not None and batch >= crit)
    assert compute_bound == (decode_step(model, accelerator, batch=batch, context=context, flops=flops).bound
                             == "compute")


def test_pinned_llama_on_h100_turns_compute_bound_exactly_at_its_critical_batch() -> None:
    """Llama 3.1 8B on H100 SXM (lesson FLOPs) at context 100: B* = 390; the simulated step at 389 is memory-bound."""
    model, accelerator = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    crit = criticality(model, accelerator, context=100, flops="2p").critical_batch
    assert crit == 390
    cost = RooflineCostModel.for_model(model, accelerator, flops="2p")
    bounds = []
    for batch in (crit - 1, crit):
        requests = [Request(id=i, arrival_s=0, prompt_tokens=99, output_tokens=2) for i in range(batch)]
        (step,) = [s for s in serve_static(requests, cost, batch_size=batch,
                                           record_steps=True).steps if s.kind == "decode"]
        bounds.append(step.flops * accelerator.bandwidth >= step.bytes * accelerator.peak_flops)
    assert bounds == [False, True]


def test_pinned_llama_on_h100_has_no_critical_batch_above_the_critical_context() -> None:
    """Llama 3.1 8B on H100 SXM (lesson FLOPs) at context 4,096: B* is none; even 2,000 sequences are memory-bound."""
    model, accelerator = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
    assert criticality(model, accelerator, context=4096, flops="2p").critical_batch is None
    cost = RooflineCostModel.for_model(model, accelerator, flops="2p")
    requests = [Request(id=i, arrival_s=0, prompt_tokens=4095, output_tokens=2) for i in range(2000)]
    (step,) = [s for s in serve_static(requests, cost, batch_size=2000, record_steps=True).steps if s.kind == "decode"]
    assert step.flops * accelerator.bandwidth < step.bytes * accelerator.peak_flops


def test_a_moe_mixed_step_reads_the_experts_its_decode_rows_and_prompt_tokens_touch() -> None:
    """Mixtral 8x7B: a mixed step of 2 decode rows and a 100-token chunk reads the shared weights plus the
    routed experts 102 tokens touch (8 (1 - (6/8)^102) per layer), priced like a decode step of that size."""
    from fractions import Fraction

    import roofline.formulas as fm
    from roofline import get_accelerator, get_model
    from roofline.sim import RooflineCostModel

    model = get_model("mixtral-8x7b")
    cost = RooflineCostModel.for_model(model, get_accelerator("h100-sxm"))
    touched = fm.experts_touched(num_experts=8, experts_per_token=2, batch=102)
    assert touched == 8 * (1 - Fraction(6, 8) ** 102)
    weights = model.shared_weight_bytes + model.routed_expert_bytes * touched
    expected = fm.mixed_step_time(
        decode_rows=2, context_sum=2000, prefill_tokens=100, cached_tokens=0, attention_pairs=5050,
        weight_bytes=weights, kv_bytes_per_token=model.kv_bytes_per_token, flops_per_token=cost.flops_per_token,
        attention_flops_per_token=cost.attention_flops_per_token, bandwidth=cost.bandwidth, peak_flops=cost.peak_flops,
        overhead=0)
    assert cost.mixed_time(2, 2000, 100, 0, 5050) == expected
    assert cost.mixed_work(2, 2000, 100, 0, 5050)[0] == weights + model.kv_bytes_per_token * (2000 + 100)
