"""Step time: the lesson's numbers and properties of the roofline step (conventions: One step)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import get_accelerator, get_model
from roofline.estimate import decode_step
from roofline.testing.strategies import accelerators, model_configs

LLAMA, H100 = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")


def test_lesson_one_request():
    """Batch 1: ~16 GB of weights, ~4.8 ms step, ~16 us of math, math busy ~0.33% (lesson section 1)."""
    s = decode_step(LLAMA, H100, batch=1, context=0, flops="2p")
    assert s.bytes == 16_060_522_496
    assert s.step_time == Fraction(16_060_522_496, 3_350_000_000_000)  # 4.794 ms, exact
    assert round(float(s.step_time) * 1e3, 1) == 4.8
    assert round(float(s.compute_time) * 1e6) == 16
    assert 0.0030 < float(s.math_busy_share) < 0.0035
    assert s.bound == "memory" and s.bandwidth_share == 1


def test_lesson_eight_requests_same_step():
    """8 requests make 8 tokens in the same ~4.8 ms step; with 1,000 tokens of KV each it is 6.5% longer."""
    one = decode_step(LLAMA, H100, batch=1, context=0)
    eight = decode_step(LLAMA, H100, batch=8, context=0)
    assert eight.step_time == one.step_time
    assert eight.throughput == 8 * one.throughput
    eight_kv = decode_step(LLAMA, H100, batch=8, context=1000)
    extra = eight_kv.step_time - eight.step_time
    assert extra == Fraction(8 * 1000 * 131_072, 3_350_000_000_000)  # 0.313 ms of KV reads
    assert round(float(eight_kv.step_time / eight.step_time), 3) == 1.065


def _step_kwargs(model, acc, **kw):
    F, a = model.flops_per_token("exact")
    return dict(weight_bytes=Fraction(model.weight_bytes), kv_bytes_per_token=Fraction(model.kv_bytes_per_token),
                flops_per_token=F, attention_flops_per_token=a, bandwidth=acc.bandwidth,
                peak_flops=acc.peak_flops, overhead=0, **kw)


@given(model_configs(max_layers=8, max_hidden=2048), accelerators(), st.integers(1, 2000), st.integers(0, 10**5),
       st.integers(0, 10**5))
def test_step_time_non_decreasing_in_batch_and_context(model, acc, batch, context_sum, more):
    """Step time never falls when the batch grows or any sequence's context grows."""
    base = f.step_time(**_step_kwargs(model, acc, batch=batch, context_sum=context_sum))
    assert f.step_time(**_step_kwargs(model, acc, batch=batch + 1, context_sum=context_sum)) >= base
    assert f.step_time(**_step_kwargs(model, acc, batch=batch, context_sum=context_sum + more)) >= base


@given(model_configs(max_layers=8, max_hidden=2048), accelerators(), st.integers(1, 2000), st.integers(0, 10**5))
def test_overlap_bounds(model, acc, batch, context_sum):
    """max(memory, compute) <= step <= no-overlap sum <= 2 x step; shares in (0, 1], one of them 1."""
    kw = _step_kwargs(model, acc, batch=batch, context_sum=context_sum)
    t, t2 = f.step_time(**kw), f.step_time_no_overlap(**kw)
    assert t <= t2 <= 2 * t
    mbs, bws = f.math_busy_share(**kw), f.bandwidth_share(**kw)
    assert 0 < mbs <= 1 and 0 < bws <= 1 and max(mbs, bws) == 1


@given(st.integers(1, 10**6))
def test_step_time_tends_to_compute_time(exponent):
    """As intensity grows (huge batch, no KV) the step time equals the compute time."""
    kw = _step_kwargs(LLAMA, H100, batch=10**4 + exponent, context_sum=0)
    assert f.step_time(**kw) == f.compute_time(batch=kw["batch"], flops_per_token=kw["flops_per_token"],
                                               attention_flops_per_token=kw["attention_flops_per_token"],
                                               context_sum=0, peak_flops=kw["peak_flops"])


def test_prefill_causal_attention():
    """Prefill of p tokens costs p x F matmul FLOPs plus a x p(p+1)/2 causal attention FLOPs."""
    F, a = LLAMA.flops_per_token("exact")
    pairs = f.causal_attention_pairs(prompt_tokens=1000)
    assert pairs == 500_500
    assert f.prefill_flops(flops_per_token=F, attention_flops_per_token=a, prefill_tokens=1000,
                           attention_pairs=pairs) == 1000 * 15_009_316_864 + 524_288 * 500_500
