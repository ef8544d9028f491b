"""Arithmetic intensity, ridge point, critical batch and critical context (cases S1, S2)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import get_accelerator, get_model
from roofline.estimate import criticality, decode_step
from roofline.testing.strategies import accelerators, model_configs

LLAMA, H100 = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")
PEAK, BW = H100.peak_flops, H100.bandwidth


def test_s1_dense_peak_ridge_and_critical_batch():
    """S1: FLOPs = 2NB over 2N bytes gives intensity B; ridge 295.3; critical batch 296 (sparse figure: 591)."""
    kw = dict(weight_bytes=2, kv_bytes_per_token=0, flops_per_token=2, attention_flops_per_token=0)
    assert f.arithmetic_intensity(batch=37, context=0, **kw) == 37
    assert round(float(f.ridge_point(peak_flops=PEAK, bandwidth=BW)), 1) == 295.3
    assert f.critical_batch(context=0, peak_flops=PEAK, bandwidth=BW, **kw) == 296
    assert f.critical_batch(context=0, peak_flops=2 * PEAK, bandwidth=BW, **kw) == 591  # the wrong, sparse peak


def test_s2_no_critical_batch_at_long_context():
    """S2: under 2N FLOPs the limit is 16.06e9 / (c x 131,072): c* ~ 415, ~30 FLOP/byte and 'none' at 4,096."""
    kw = dict(kv_bytes_per_token=131_072, flops_per_token=16_060_522_496, attention_flops_per_token=0)
    assert round(f.intensity_limit(context=4096, **kw)) == 30
    c_star = f.critical_context(peak_flops=PEAK, bandwidth=BW, **kw)
    assert round(c_star) == 415
    assert f.critical_batch(context=4096, weight_bytes=16_060_522_496, peak_flops=PEAK, bandwidth=BW, **kw) is None
    assert f.critical_batch(context=414, weight_bytes=16_060_522_496, peak_flops=PEAK, bandwidth=BW, **kw) > 0
    assert f.critical_batch(context=416, weight_bytes=16_060_522_496, peak_flops=PEAK, bandwidth=BW, **kw) is None


def test_critical_context_both_conventions():
    """c* for Llama 3.1 8B on H100 SXM lies in 390-415 tokens: 415 (2 x P) and 393 (exact, with attention)."""
    lesson = criticality(LLAMA, H100, context=1000, flops="2p")
    exact = criticality(LLAMA, H100, context=1000, flops="exact")
    assert round(lesson.critical_context) == 415 and round(exact.critical_context) == 393
    assert lesson.critical_batch is None and exact.critical_batch is None
    assert lesson.critical_batch_weights_only == 296 and exact.critical_batch_weights_only == 317


def test_pinned_boundary_example():
    """At exactly B*, compute time equals memory time (compute-bound); at B* - 1 it is memory-bound."""
    # W = 1000 bytes, F = 10 FLOP/token, ridge = 2: B_real = 2 x 1000 / 10 = 200 exactly.
    kw = dict(weight_bytes=1000, kv_bytes_per_token=0, flops_per_token=10, attention_flops_per_token=0)
    b_star = f.critical_batch(context=0, peak_flops=2, bandwidth=1, **kw)
    assert b_star == 200
    step = dict(kw, context_sum=0, bandwidth=Fraction(1), peak_flops=Fraction(2), overhead=0)
    assert f.compute_time(batch=200, flops_per_token=10, attention_flops_per_token=0, context_sum=0, peak_flops=2) \
        == f.memory_time(weight_bytes=1000, kv_bytes_per_token=0, context_sum=0, bandwidth=1) == 1000
    assert f.math_busy_share(batch=200, **step) == 1 and f.bandwidth_share(batch=200, **step) == 1
    assert f.math_busy_share(batch=199, **step) < 1


@given(model_configs(max_layers=16, max_hidden=4096), accelerators(), st.integers(0, 5000), st.integers(1, 4000))
def test_bound_flips_at_critical_batch(model, acc, context, batch):
    """Below the critical batch a step is memory-bound; at or above it compute-bound; none: always memory."""
    crit = criticality(model, acc, context=context).critical_batch
    step = decode_step(model, acc, batch=batch, context=context)
    if crit is None or batch < crit:
        assert step.bound == "memory"
    else:
        assert step.bound == "compute"


@given(model_configs(max_layers=16, max_hidden=4096), st.integers(1, 5000), st.integers(1, 10**4))
def test_intensity_increasing_in_batch_and_bounded(model, context, batch):
    """Intensity increases with the batch and stays below its limit as the batch grows without bound."""
    F, a = model.flops_per_token("exact")
    kw = dict(context=context, kv_bytes_per_token=Fraction(model.kv_bytes_per_token), flops_per_token=F,
              attention_flops_per_token=a)
    i1 = f.arithmetic_intensity(batch=batch, weight_bytes=Fraction(model.weight_bytes), **kw)
    i2 = f.arithmetic_intensity(batch=batch + 1, weight_bytes=Fraction(model.weight_bytes), **kw)
    assert i1 < i2 < f.intensity_limit(**kw)
