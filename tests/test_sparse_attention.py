"""DeepSeek sparse attention (DeepSeek-V3.2): the registered fast paths against independent counts.

Each formula of roofline.formulas.sparse is checked here against a count made another way
(layer by layer, query by query, or the dense formulas where they must agree); the SymPy
equality of every fast path is tests/test_formulas.py's, the proof is p24's.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import Deployment, get_accelerator, get_model
from roofline.errors import InvalidValueError
from roofline.estimate import criticality
from roofline.sim import RooflineCostModel

V32 = get_model("deepseek-v3.2")

sizes = st.integers(min_value=0, max_value=400)
rates = st.integers(min_value=0, max_value=50)


@given(c=sizes, K=st.integers(min_value=1, max_value=300), km=rates, ki=rates, layers=st.integers(1, 6))
def test_read_bytes_equal_the_layer_by_layer_count(c, K, km, ki, layers):
    """k_m min(c, K) + k_i c with the rates summed over L layers equals L x (min(c, K) x m + c x i)."""
    count = sum(sum(km for _ in range(min(c, K))) + sum(ki for _ in range(c)) for _ in range(layers))
    assert f.sparse_read_bytes(context=c, index_topk=K, latent_bytes_per_token=layers * km,
                               index_bytes_per_token=layers * ki) == count


@given(contexts=st.lists(sizes, min_size=1, max_size=8), K=st.integers(1, 300), km=rates, ki=rates, am=rates,
       ai=rates, W=st.integers(1, 10**6), F=st.integers(1, 10**4), bw=st.integers(1, 100), peak=st.integers(1, 100))
def test_step_time_is_the_max_of_its_rows_summed(contexts, K, km, ki, am, ai, W, F, bw, peak):
    """A step over rows c_i: max((W + sum read(c_i)) / BW, (B F + sum flops(c_i)) / peak), row by row."""
    B = len(contexts)
    read = sum(f.sparse_read_bytes(context=c, index_topk=K, latent_bytes_per_token=km, index_bytes_per_token=ki)
               for c in contexts)
    flops = sum(f.sparse_attention_flops(context=c, index_topk=K, latent_attention_flops_per_token=am,
                                         index_flops_per_token=ai) for c in contexts)
    t = f.sparse_step_time(batch=B, context_sum=sum(contexts), capped_context_sum=sum(min(c, K) for c in contexts),
                           weight_bytes=W, latent_bytes_per_token=km, index_bytes_per_token=ki, flops_per_token=F,
                           latent_attention_flops_per_token=am, index_flops_per_token=ai,
                           bandwidth=Fraction(bw), peak_flops=Fraction(peak), overhead=0)
    assert t == max(Fraction(W + read, bw), Fraction(B * F + flops, peak))


@given(contexts=st.lists(st.integers(0, 300), min_size=1, max_size=6), km=rates, ki=rates, am=rates, ai=rates)
def test_below_the_cap_it_is_the_dense_step(contexts, km, ki, am, ai):
    """With every c_i <= K (R = S) the sparse step is step_time at k = k_m + k_i, a = a_m + a_i."""
    S = sum(contexts)
    kw = dict(weight_bytes=1000, flops_per_token=7, bandwidth=Fraction(3), peak_flops=Fraction(5), overhead=0)
    sparse = f.sparse_step_time(batch=len(contexts), context_sum=S, capped_context_sum=S, latent_bytes_per_token=km,
                                index_bytes_per_token=ki, latent_attention_flops_per_token=am,
                                index_flops_per_token=ai, **kw)
    assert sparse == f.step_time(batch=len(contexts), context_sum=S, kv_bytes_per_token=km + ki,
                                 attention_flops_per_token=am + ai, **kw)


@given(q=st.integers(0, 60), p0=st.integers(0, 60), K=st.integers(1, 80))
def test_mixed_step_counts_the_cap_query_by_query(q, p0, K):
    """A chunk of q tokens after p0: FLOPs a_m sum min(t, K) + a_i sum t over its queries, bytes (k_m + k_i)(p0 + q)."""
    km, ki, am, ai, F, W = 5, 2, 11, 3, 13, 17
    capped = sum(min(t, K) for t in range(p0 + 1, p0 + q + 1))
    causal = sum(range(p0 + 1, p0 + q + 1))
    t = f.sparse_mixed_step_time(
        decode_rows=0, context_sum=0, capped_context_sum=0, prefill_tokens=q, cached_tokens=p0,
        attention_pairs=causal, capped_attention_pairs=f.window_attention_pairs(chunk_tokens=q, cached_tokens=p0,
                                                                                sliding_window=K),
        weight_bytes=W, latent_bytes_per_token=km, index_bytes_per_token=ki, flops_per_token=F,
        latent_attention_flops_per_token=am, index_flops_per_token=ai, bandwidth=Fraction(1), peak_flops=Fraction(2),
        overhead=0)
    assert t == max(Fraction(W + (km + ki) * (p0 + q)), Fraction(q * F + am * capped + ai * causal, 2))


def test_a_capped_sum_above_the_context_sum_is_refused_by_name():
    with pytest.raises(InvalidValueError, match="capped_context_sum"):
        f.sparse_decode_bytes(context_sum=10, capped_context_sum=11, weight_bytes=1, latent_bytes_per_token=1,
                              index_bytes_per_token=1)


@given(c=st.integers(0, 300_000))
def test_model_read_and_flops_are_the_registered_formulas(c):
    """DeepSeek-V3.2: kv_read_bytes(c) = 61 x (min(c, 2,048) x 1,152 + c x 132) and attention_flops(c) likewise
    (128 heads: 128 x (2 x 576 + 2 x 512) per selected token, 2 x 64 x 128 per cached token, per layer)."""
    assert V32.kv_read_bytes(c) == 61 * (min(c, 2048) * 1152 + c * 132)
    assert V32.attention_flops(c) == 61 * (min(c, 2048) * 128 * (2 * 576 + 2 * 512) + c * 2 * 64 * 128)
    assert V32.kv_bytes(c) == 78_324 * c  # held: every token, no window frees any


def test_the_estimates_critical_context_is_the_two_part_formula():
    """criticality's c* for V3.2 on 8 H200 equals the dense part F / (I* (k_m + k_i) - a_m - a_i), by hand."""
    gpu = get_accelerator("h200")
    d = Deployment(V32, gpu, 8)
    share = d.share
    F = share.step_terms()["flops_per_token"]
    ridge = Fraction(gpu.peak(V32.compute_dtype)) / Fraction(gpu.bandwidth)
    L = 61
    by_hand = Fraction(F) / (ridge * L * (1152 + 132) - L * (16 * 2176 + 2 * 64 * 128))
    assert by_hand < 2048
    assert criticality(d, context=1000).critical_context == by_hand


def test_past_the_cap_the_critical_context_is_the_indexers():
    """A model whose dense root lies past K: c* = (F + K (a_m - I* k_m)) / (I* k_i - a_i) (I* = 1)."""
    kw = dict(index_topk=4, latent_bytes_per_token=3, index_bytes_per_token=1, latent_attention_flops_per_token=0,
              index_flops_per_token=0, peak_flops=Fraction(1), bandwidth=Fraction(1))
    assert f.sparse_critical_context(flops_per_token=100, **kw) == (100 + 4 * (0 - 3)) / 1  # 88 tokens
    assert f.sparse_critical_context(flops_per_token=8, **kw) == 2  # the dense part: 8 / (1 x 4) <= K
    assert f.sparse_critical_context(flops_per_token=8, **dict(kw, index_flops_per_token=1)) == Fraction(8, 3)
    # the dense root 100 / 3 past K, and I* k_i = a_i: the indexer alone keeps every context below c*
    assert f.sparse_critical_context(flops_per_token=100, **dict(kw, index_flops_per_token=1)) is None


def test_the_scheduler_prices_it_with_the_sparse_step():
    """On 8 H200 a decode step of 4 rows at 4,096 tokens: sparse_step_time at R = 4 x 2,048, the share's MoE
    weights for 4 tokens and the all-reduce (tests/test_sparse_sim.py runs the policies)."""
    cost = RooflineCostModel.for_deployment(Deployment(V32, get_accelerator("h200"), 8))
    share = V32.per_gpu(8)
    terms = share.sparse_terms()
    rates = {k: terms[k] for k in terms if k != "index_topk"}
    F = share.step_terms()["flops_per_token"]
    expected = f.sparse_step_time(batch=4, context_sum=4 * 4096, capped_context_sum=4 * 2048,
                                  weight_bytes=cost.weights_read(4), flops_per_token=F,
                                  bandwidth=Fraction(cost.bandwidth), peak_flops=Fraction(cost.peak_flops), overhead=0,
                                  **rates)
    assert cost.decode_time(4, 4 * 4096, 4 * 2048) == expected + cost.allreduce_time(4)
    with pytest.raises(InvalidValueError, match="capped_sum"):
        cost.decode_time(4, 4 * 4096)
