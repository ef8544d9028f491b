"""Tensor parallelism: the ring all-reduce, the group's step time, the crossover batch.

Conventions: docs/conventions.md, "Tensor parallelism".
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given, note
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import InvalidValueError, get_accelerator
from roofline.symbolic import parallel as sym
from roofline.testing.strategies import accelerators, links, model_configs, positive_fractions

US = Fraction(1, 10**6)
NVLINK4 = dict(link_bandwidth=Fraction(450 * 10**9), link_latency=Fraction(6, 10) * US)  # H100 SXM, per direction; NCCL
LLAMA70 = dict(num_hidden_layers=80, hidden_size=8192, activation_bytes=2)


def test_ring_allreduce_worked_by_hand():
    """16 KiB over 8 GPUs on NVLink 4: 14 steps x 0.6 us + 14/8 x 16,384 B / 450 GB/s = 8.4 us + 63.7 ns."""
    kw = dict(message_bytes=Fraction(16_384), tensor_parallel_size=8, **NVLINK4)
    assert f.ring_allreduce_latency_time(tensor_parallel_size=8, link_latency=NVLINK4["link_latency"]) == 14 * (
        Fraction(6, 10) * US)
    bw = f.ring_allreduce_bandwidth_time(message_bytes=Fraction(16_384), tensor_parallel_size=8,
                                         link_bandwidth=450 * 10**9)
    assert bw == Fraction(14, 8) * 16_384 / (450 * 10**9)
    assert f.ring_allreduce_time(**kw) == Fraction(84, 10) * US + bw
    assert round(float(bw) * 1e9, 1) == 63.7


def test_decode_step_allreduces_llama_70b_on_8_h100():
    """Batch 1: 160 all-reduces of 16 KiB: 1.344 ms of latency and 10.19 us of bandwidth; exact Fractions."""
    kw = dict(batch=1, tensor_parallel_size=8, **LLAMA70, **NVLINK4)
    assert f.allreduce_bytes(batch=1, hidden_size=8192, activation_bytes=2) == 16_384
    lat, bw = f.decode_allreduce_latency_time(**kw), f.decode_allreduce_bandwidth_time(**kw)
    assert lat == 160 * 14 * Fraction(6, 10) * US == Fraction(1344, 10**6)
    assert bw == 160 * Fraction(14, 8) * 16_384 / (450 * 10**9)
    assert f.decode_allreduce_time(**kw) == lat + bw
    assert round(float(bw) * 1e6, 2) == 10.19


def test_crossover_batch_llama_70b():
    """B_x = T alpha beta / (h e) = 8 x 0.6 us x 450 GB/s / 16,384 B = 131.84: bandwidth dominates from B = 132."""
    b_x = f.allreduce_crossover_batch(hidden_size=8192, activation_bytes=2, tensor_parallel_size=8, **NVLINK4)
    assert b_x == Fraction(16875, 128)
    common = dict(tensor_parallel_size=8, **LLAMA70, **NVLINK4)
    assert f.decode_allreduce_bandwidth_time(batch=b_x, **common) == f.decode_allreduce_latency_time(batch=b_x,
                                                                                                     **common)
    assert f.decode_allreduce_latency_time(batch=131, **common) > f.decode_allreduce_bandwidth_time(batch=131, **common)
    assert f.decode_allreduce_bandwidth_time(batch=132, **common) > f.decode_allreduce_latency_time(batch=132, **common)


def test_crossover_needs_two_gpus():
    """One GPU has no all-reduce, so no crossover: T = 1 is refused naming tensor_parallel_size."""
    with pytest.raises(InvalidValueError, match="tensor_parallel_size=1"):
        f.allreduce_crossover_batch(hidden_size=8192, activation_bytes=2, tensor_parallel_size=1, **NVLINK4)


def test_step_time_tp_llama_70b_on_8_h100_worked_by_hand():
    """Per GPU: 17,640,734,720 B of weights, 40,960 B of KV per token; at B = 1, c = 1,000: 5.278 + 1.354 ms."""
    h100 = get_accelerator("h100-sxm")
    w, k = 17_640_734_720, 40_960
    kw = dict(batch=1, context_sum=1000, weight_bytes=w, kv_bytes_per_token=k, flops_per_token=17_375_428_608,
              attention_flops_per_token=327_680, bandwidth=Fraction(h100.bandwidth),
              peak_flops=Fraction(h100.peak_flops), overhead=0, tensor_parallel_size=8, **LLAMA70, **NVLINK4)
    memory = Fraction(w + k * 1000, 3_350 * 10**9)
    allreduce = Fraction(1344, 10**6) + 160 * Fraction(14, 8) * 16_384 / (450 * 10**9)
    assert f.step_time_tp(**kw) == memory + allreduce
    assert round(float(f.step_time_tp(**kw)) * 1e3, 3) == 6.632
    assert f.throughput_tp(**kw) == 1 / (memory + allreduce)


@given(model_configs(max_layers=8, max_hidden=2048), accelerators(), links(), st.integers(1, 512),
       st.integers(0, 10**5), positive_fractions(max_value=1))
def test_one_gpu_is_todays_step_exactly(model, acc, link, batch, context_sum, overhead):
    """T = 1: the all-reduce is 0 and step_time_tp == step_time exactly, whatever the link."""
    F, a = model.flops_per_token("exact")
    step = dict(batch=batch, context_sum=context_sum, weight_bytes=Fraction(model.weight_bytes),
                kv_bytes_per_token=Fraction(model.kv_bytes_per_token), flops_per_token=F,
                attention_flops_per_token=a, bandwidth=Fraction(acc.bandwidth), peak_flops=Fraction(acc.peak_flops),
                overhead=overhead)
    ar = dict(num_hidden_layers=model.num_hidden_layers, hidden_size=model.hidden_size, activation_bytes=2,
              tensor_parallel_size=1, link_bandwidth=Fraction(link.bandwidth.value),
              link_latency=Fraction(link.latency.value))
    assert f.decode_allreduce_time(batch=batch, **ar) == 0
    assert f.step_time_tp(**step, **ar) == f.step_time(**step)
    assert f.throughput_tp(**step, **ar) == f.throughput(**step)


def test_one_gpu_is_todays_step_symbolically():
    """The derivation itself: step_time_tp at T = 1 simplifies to step_time (no all-reduce term left)."""
    from roofline.symbolic import step_time as st_sym

    assert sp.simplify(sym.step_time_tp.subs(sym.T, 1) - st_sym.step_time) == 0
    assert sym.decode_allreduce_time.subs(sym.T, 1) == 0


@given(positive_fractions(max_value=4096), st.integers(1, 16_384), st.sampled_from([1, 2, 4]), links(),
       st.integers(1, 64), st.integers(1, 128))
def test_allreduce_zero_at_one_gpu_and_increasing_in_t(batch, hidden, e, link, layers, t):
    """The all-reduce time is 0 at T = 1 and strictly increasing in T (both its terms are)."""
    kw = dict(num_hidden_layers=layers, link_bandwidth=Fraction(link.bandwidth.value),
              link_latency=Fraction(link.latency.value), batch=batch, hidden_size=hidden, activation_bytes=e)
    assert f.decode_allreduce_time(tensor_parallel_size=1, **kw) == 0
    here, there = f.decode_allreduce_time(tensor_parallel_size=t, **kw), f.decode_allreduce_time(
        tensor_parallel_size=t + 1, **kw)
    note(f"T={t}: {here}; T={t + 1}: {there}")
    assert there > here
    assert f.decode_allreduce_bandwidth_time(tensor_parallel_size=t + 1, **kw) > f.decode_allreduce_bandwidth_time(
        tensor_parallel_size=t, **kw)


@given(positive_fractions(max_value=4096), st.integers(1, 16_384), st.sampled_from([1, 2, 4]), links(),
       st.integers(1, 64), st.integers(2, 128), positive_fractions(max_value=64))
def test_allreduce_increasing_in_batch(batch, hidden, e, link, layers, t, more):
    """With T >= 2 the all-reduce time strictly grows with the batch (its bandwidth term does; latency stays)."""
    kw = dict(num_hidden_layers=layers, tensor_parallel_size=t, link_bandwidth=Fraction(link.bandwidth.value),
              link_latency=Fraction(link.latency.value), batch=batch, hidden_size=hidden, activation_bytes=e)
    bigger = dict(kw, batch=kw["batch"] + more)
    assert f.decode_allreduce_time(**bigger) > f.decode_allreduce_time(**kw)
    assert f.decode_allreduce_latency_time(**bigger) == f.decode_allreduce_latency_time(**kw)


@given(model_configs(max_layers=8, max_hidden=2048), accelerators(), links(), st.integers(1, 64),
       st.integers(1, 512), st.integers(0, 10**5), st.lists(st.sampled_from([0, Fraction(1, 100), Fraction(1, 2), 1]),
                                                             min_size=4, max_size=4))
def test_group_never_beats_the_whole_roofline_over_t(model, acc, link, t, batch, context_sum, excess):
    """With per-GPU sizes >= the whole model's / T, step_time_tp >= max(memory, compute) of the whole model / T.

    ``excess``: what each per-GPU size carries above 1/T of the whole (replicated parts), as a share of it.
    """
    xw, xk, xf, xa = excess
    F, a = model.flops_per_token("exact")
    W, k = Fraction(model.weight_bytes), Fraction(model.kv_bytes_per_token)
    hw = dict(bandwidth=Fraction(acc.bandwidth), peak_flops=Fraction(acc.peak_flops), overhead=0)
    whole = f.step_time(batch=batch, context_sum=context_sum, weight_bytes=W, kv_bytes_per_token=k,
                        flops_per_token=F, attention_flops_per_token=a, **hw)
    per_gpu = dict(weight_bytes=W / t * (1 + xw), kv_bytes_per_token=k / t * (1 + xk),
                   flops_per_token=Fraction(F) / t * (1 + xf), attention_flops_per_token=Fraction(a) / t * (1 + xa))
    group = f.step_time_tp(batch=batch, context_sum=context_sum, **per_gpu, **hw,
                           num_hidden_layers=model.num_hidden_layers, hidden_size=model.hidden_size,
                           activation_bytes=2, tensor_parallel_size=t, link_bandwidth=Fraction(link.bandwidth.value),
                           link_latency=Fraction(link.latency.value))
    note(f"group {float(group)} s, whole / T {float(whole / t)} s")
    assert group >= whole / t
    if xw == xk == xf == xa == 0 and t >= 2:
        assert group > whole / t  # an exact 1/T split still pays the all-reduces


@given(links(generated=False), st.integers(2, 8), st.integers(1, 16_384), st.sampled_from([1, 2]))
def test_crossover_balances_the_two_terms(link, t, hidden, e):
    """At B = B_x (SymPy's solve) the bandwidth and latency terms are equal, for every preset link."""
    cross = dict(hidden_size=hidden, activation_bytes=e, tensor_parallel_size=t,
                 link_bandwidth=Fraction(link.bandwidth.value), link_latency=Fraction(link.latency.value))
    b_x = f.allreduce_crossover_batch(**cross)
    kw = dict(cross, batch=b_x, num_hidden_layers=1)
    assert f.decode_allreduce_bandwidth_time(**kw) == f.decode_allreduce_latency_time(**kw)


def test_latency_term_is_the_limit_of_infinite_bandwidth():
    """The latency term is derived as lim_{beta -> oo} of the ring time, and does not depend on M or beta."""
    assert sym.ring_allreduce_latency_time.free_symbols == {sym.T, sym.alpha}
    assert sp.simplify(sym.ring_allreduce_time - sym.ring_allreduce_bandwidth_time
                       - sym.ring_allreduce_latency_time) == 0
