"""KV budget, capacity in tokens and blocks, sequences that fit (vLLM #12330, lesson's 53 GB)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import get_accelerator, get_model
from roofline.estimate import kv_budget_for, kv_capacity

LLAMA = get_model("llama-3.1-8b")
K = 131_072


def test_paged_blocks():
    """vLLM #12330: 5,691 blocks of 16 tokens hold 91,056 tokens; 11 sequences of 8,192; 90 (not 91) of 1,000."""
    budget = 5691 * 16 * K
    assert f.kv_capacity_tokens(budget=budget, kv_bytes_per_token=K) == 91_056
    assert f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=K, block_size=16) == 5691
    assert f.sequences_that_fit_blocks(budget=budget, kv_bytes_per_token=K, context=8192, block_size=16) == 11
    assert f.blocks_per_sequence(context=1000, block_size=16) == 63
    assert f.sequences_that_fit_blocks(budget=budget, kv_bytes_per_token=K, context=1000, block_size=16) == 90
    assert f.sequences_that_fit(budget=budget, kv_bytes_per_token=K, context=1000) == 91


def test_lifetime_blocks():
    """pegainfer #288: lifetime blocks (P + O - 1 slots, block 16): (16,17)->2, (1,16)->1, (17,16)->2, (33,100)->9."""
    cases = {(16, 17): 2, (1, 16): 1, (17, 16): 2, (33, 100): 9}
    for (p, o), blocks in cases.items():
        slots = f.lifetime_kv_slots(prompt_tokens=p, output_tokens=o)
        assert f.blocks_per_sequence(context=slots, block_size=16) == blocks


def test_lesson_53_gb_cache():
    """The lesson's ~53 GB cache holds ~404 sequences of 1,000 tokens at 128 KiB per token."""
    cap = kv_capacity(LLAMA, budget=53 * 10**9, context=1000)
    assert cap.sequences == 404 and cap.tokens == 404_357


def test_real_h100_budget():
    """At 0.9 utilization an H100 (79.2 GiB seen) leaves 60.48 GB for KV: 461 sequences, 457 in blocks of 16."""
    budget = kv_budget_for(LLAMA, get_accelerator("h100-sxm"))
    assert budget == Fraction(792, 10) * 2**30 * Fraction(9, 10) - 16_060_522_496
    cap = kv_capacity(LLAMA, budget=budget, context=1000)
    assert (cap.sequences, cap.sequences_blocks) == (461, 457)


@given(st.integers(0, 10**12), st.integers(1, 10**6), st.integers(1, 10**5), st.integers(1, 256))
def test_block_accounting_never_fits_more(budget, k, context, block):
    """Block-level accounting never fits more sequences than token-level accounting."""
    tokens = f.sequences_that_fit(budget=budget, kv_bytes_per_token=k, context=context)
    blocks = f.sequences_that_fit_blocks(budget=budget, kv_bytes_per_token=k, context=context, block_size=block)
    assert blocks <= tokens
    if context % block == 0:
        assert blocks == (budget // (block * k)) * block // context


@given(st.integers(1, 10**12), st.integers(0, 10**12), st.integers(1, 10**6))
def test_capacity_monotone_in_memory(budget, more, k):
    """More memory never holds fewer tokens."""
    assert f.kv_capacity_tokens(budget=budget + more, kv_bytes_per_token=k) >= f.kv_capacity_tokens(
        budget=budget, kv_bytes_per_token=k)
