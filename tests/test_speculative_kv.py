"""A proposer's memory comes out of the KV budget (docs/conventions.md, "Speculative decoding", the proposer's memory).

vLLM V1 loads the draft's weights on the target's GPUs at the target's T before it sizes the KV cache, and
the draft's layers hold KV in the same block pool. Every number here is worked by hand from the models'
config.json numbers (Llama 3.1 70B, Llama 3.2 1B, Llama 3.1 8B) and the H100's usable memory.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from roofline import Deployment, get_accelerator, get_model
from roofline.cli import main
from roofline.commands.report import build_report
from roofline.deployment import Parallelism
from roofline.errors import InvalidValueError, NoKVBudgetError
from roofline.estimate import kv_budget_for, kv_capacity, pool_kv_bytes_per_token
from roofline.sim import KVPool, Speculation
from roofline.speculative import ProposerMemory, SpeculativeConfig, proposer_memory

H100 = get_accelerator("h100-sxm")
DRAFT = SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 4}')
TP4 = Deployment(get_model("llama-3.1-70b"), H100, 4)
BLOCK = 16


def _per_gpu_weights(*, h, layers, heads, kv_heads, d, ffn, vocab, tied, T, bytes_per=2):
    """A Llama's weights on one GPU of T [bytes]: q, k, v, o and the MLP split by T, the embedding and lm_head
    split by vocabulary (ceil(V / T) rows; a tied lm_head holds none), the norms whole on every GPU."""
    layer = h * heads * d + 2 * h * kv_heads * d + heads * d * h + 3 * h * ffn
    rows = -(-vocab // T)
    norms = layers * 2 * h + h
    return bytes_per * (layers * layer // T + rows * h * (1 if tied else 2) + norms)


# Llama 3.1 70B: h 8192, 80 layers, 64 heads, 8 KV heads of 128, MLP 28672, vocab 128256, lm_head untied
TARGET_W = _per_gpu_weights(h=8192, layers=80, heads=64, kv_heads=8, d=128, ffn=28672, vocab=128256, tied=False,
                            T=4)
TARGET_KV = 2 * 80 * (8 // 4) * 128 * 2  # K and V, 80 layers, 2 KV heads a GPU of 128, BF16 [bytes/token]
# Llama 3.2 1B: h 2048, 16 layers, 32 heads, 8 KV heads of 64, MLP 8192, vocab 128256, tied embeddings
DRAFT_W = _per_gpu_weights(h=2048, layers=16, heads=32, kv_heads=8, d=64, ffn=8192, vocab=128256, tied=True, T=4)
DRAFT_KV = 2 * 16 * (8 // 4) * 64 * 2


def test_the_hand_numbers_are_the_models():
    assert (TARGET_W, TARGET_KV, DRAFT_W, DRAFT_KV) == (35_278_831_616, 81_920, 618_008_576, 8_192)
    assert TP4.share.weight_bytes == TARGET_W and TP4.share.kv_bytes_per_token == TARGET_KV


def test_a_draft_on_four_h100s_takes_its_weights_and_its_kv_from_the_pool():
    held = proposer_memory(TP4, DRAFT)
    assert held == ProposerMemory("draft_model", DRAFT_W, DRAFT_KV)
    room = Fraction(H100.usable_memory) * Fraction(9, 10)  # vLLM's gpu_memory_utilization 0.9
    plain_blocks = (room - TARGET_W) // (BLOCK * TARGET_KV)
    with_blocks = (room - TARGET_W - DRAFT_W) // (BLOCK * (TARGET_KV + DRAFT_KV))
    assert (plain_blocks, with_blocks) == (31_476, 28_186)
    assert kv_budget_for(TP4, proposer=held) == room - TARGET_W - DRAFT_W
    assert KVPool.for_model(TP4, budget=kv_budget_for(TP4)).capacity_blocks == plain_blocks
    pool = KVPool.for_model(TP4, budget=kv_budget_for(TP4, proposer=held), proposer=held)
    assert pool.capacity_blocks == with_blocks
    assert pool_kv_bytes_per_token(TP4.share, held) == TARGET_KV + DRAFT_KV
    cap = kv_capacity(TP4, budget=kv_budget_for(TP4, proposer=held), context=1000, proposer=held)
    assert (cap.blocks, cap.sequences_blocks) == (with_blocks, with_blocks // 63)  # 63 blocks of 16 per 1,000


def test_simulate_runs_speculation_in_the_smaller_pool_and_the_rows_without_it_in_the_plain_one(capsys):
    assert main(["simulate", "--model", "llama-3.1-70b", "--accelerator", "h100-sxm", "--tensor-parallel-size", "4",
                 "--policy", "continuous", "--num-prompts", "4", "--random-input-len", "64", "--random-output-len",
                 "8", "--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 4}',
                 "--acceptance-rate", "0.7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pool = out["kv_pool"]
    assert (pool["capacity_blocks"], pool["proposer"]["capacity_blocks_without"]) == (28_186, 31_476)
    assert pool["proposer"]["weight_bytes"] == DRAFT_W and pool["proposer"]["kv_bytes_per_token"] == DRAFT_KV
    assert pool["budget_bytes"] == float(Fraction(H100.usable_memory) * Fraction(9, 10) - TARGET_W - DRAFT_W)
    row = out["results"][0]
    assert row["summary"]["kv_capacity_blocks"] == 28_186
    assert row["without_speculative"]["kv_capacity_blocks"] == 31_476


def test_a_given_kv_budget_is_kv_memory_the_draft_shares_and_a_request_can_fit_only_without_it(capsys):
    """--kv-budget-gb is the pool's bytes: the draft's weights are not taken from it, its KV is. Llama 3.1 8B
    (KV 131,072 bytes a token: 2 x 32 layers x 8 x 128 x 2) with Llama 3.2 1B (32,768: 2 x 16 x 8 x 64 x 2) on
    one H100: 65 blocks of the plain pool are 52 with the draft; a request of 1,000 + 24 tokens reserves
    ceil((1,000 + 23 + 4) / 16) = 65 blocks with k = 4 (64 without), so only the plain row serves it."""
    budget = 65 * BLOCK * 131_072
    assert budget // (BLOCK * (131_072 + 32_768)) == 52
    assert main(["simulate", "--policy", "continuous", "--num-prompts", "1", "--random-input-len", "1000",
                 "--random-output-len", "24", "--kv-budget-gb", str(budget / 1e9), "--speculative-config",
                 '{"model": "llama-3.2-1b", "num_speculative_tokens": 4}', "--acceptance-rate", "0.7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_pool"]["budget_bytes"] == budget and out["kv_pool"]["capacity_blocks"] == 52
    row = out["results"][0]
    assert (row["summary"]["rejected"], row["summary"]["completed"]) == (1, 0)
    assert (row["without_speculative"]["rejected"], row["without_speculative"]["completed"]) == (0, 1)


def test_the_report_gives_the_kv_limit_with_the_draft_and_a_row_at_it():
    r = build_report(TP4, context=1000, batches=(1, 8), speculative=DRAFT, acceptance_rate=Fraction(7, 10))
    kv = r["speculative"]["kv"]
    assert (kv["kv_limit"], kv["plain_kv_limit"]) == (28_186 // 63, 31_476 // 63) == (447, 499)
    assert kv["proposer_weight_bytes"] == DRAFT_W and kv["kv_bytes_per_token"] == TARGET_KV + DRAFT_KV
    rows = {row["batch"]: row for row in r["speculative"]["table"]}
    assert sorted(rows) == [1, 8, 447, 499]
    assert rows[447]["kv_limit"] and rows[447]["fits"] and rows[499]["fits"] is False


def test_the_reports_kv_limit_holds_each_sequences_k_proposals():
    """At c = 1,008 tokens (63 blocks of 16) each sequence holds c + k = 1,012 while its 4 proposals are verified:
    64 blocks, so 28,186 // 64 = 440 sequences (counting c alone gave 28,186 // 63 = 447, one block short each);
    the plain limit stays at c: 31,476 // 63 = 499. The table's KV limit row is at 440."""
    r = build_report(TP4, context=1008, batches=(1,), speculative=DRAFT, acceptance_rate=Fraction(7, 10))
    kv = r["speculative"]["kv"]
    assert (kv["kv_limit"], kv["held_context"], kv["plain_kv_limit"]) == (28_186 // 64, 1012, 31_476 // 63)
    assert (kv["kv_limit"], kv["plain_kv_limit"]) == (440, 499)
    assert [row["batch"] for row in r["speculative"]["table"] if row["kv_limit"]] == [440]


def test_the_held_proposals_stop_at_the_models_length():
    """At Llama 3.1 70B's full 131,072 positions no proposal is held past it (vLLM proposes none past
    max_model_len): the held context is 131,072, and the limit is the pool's at that context; 4 short of it, the
    4 proposals fit: 131,072 again."""
    for context in (131_072, 131_068):
        r = build_report(TP4, context=context, batches=(1,), speculative=DRAFT, acceptance_rate=Fraction(7, 10))
        kv = r["speculative"]["kv"]
        assert kv["held_context"] == 131_072 and kv["kv_limit"] == 28_186 // (131_072 // 16) == 3


def test_a_head_takes_its_layer_and_its_extra_matmul_not_the_shared_embedding():
    """An EAGLE head derived from Llama 3.1 8B on one H100: one decoder layer (q 4096 x 4096, k and v
    4096 x 1024, o, the MLP 3 x 4096 x 14336, two norms and the final one) and its fc 2h x h + h, BF16; the
    embedding and lm_head are the target's. Its KV: one layer, 2 x 8 x 128 x 2 bytes. DeepSeek-V3's MTP
    module on 8 H200: one MLA layer's latent, (512 + 64) x 2 bytes, replicated."""
    d = Deployment(get_model("llama-3.1-8b"), H100)
    eagle = SpeculativeConfig.parse('{"method": "eagle", "model": "x/eagle-head", "num_speculative_tokens": 3}')
    h = 4096
    layer = 2 * h * h + 2 * h * 1024 + 3 * h * 14336 + 3 * h
    assert proposer_memory(d, eagle) == ProposerMemory("eagle", 2 * (layer + 2 * h * h + h), 2 * 8 * 128 * 2)
    v3 = Deployment(get_model("deepseek-v3"), get_accelerator("h200-sxm"), 8)
    mtp = proposer_memory(v3, SpeculativeConfig.parse('{"method": "deepseek_mtp", "num_speculative_tokens": 1}'))
    assert mtp.kv_bytes_per_token == (512 + 64) * 2
    whole = get_model("deepseek-v3").mtp_module.per_gpu(8)
    assert mtp.weight_bytes < whole.weight_bytes  # its embedding and lm_head shares are not held twice
    ngram = proposer_memory(d, SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 3}'))
    assert (ngram.weight_bytes, ngram.kv_bytes_per_token) == (0, 0)


def test_target_and_draft_weights_that_leave_no_kv_budget_are_refused_by_name(capsys):
    """Llama 3.1 8B (16,060,522,496 bytes) and its 1B draft (2,471,628,800) at utilization 0.2: 17.0 GB of
    the H100 holds the target alone (0.95 GB of KV) but not both; check_draft's fit (usable memory) passes."""
    d = Deployment(get_model("llama-3.1-8b"), H100)
    held = proposer_memory(d, DRAFT)
    assert held.weight_bytes == 2_471_628_800
    room = Fraction(H100.usable_memory) / 5
    assert kv_budget_for(d, utilization=Fraction(1, 5)) == room - 16_060_522_496 > 0
    with pytest.raises(NoKVBudgetError) as error:
        kv_budget_for(d, utilization=Fraction(1, 5), proposer=held)
    assert error.value.field == "budget" and error.value.value == float(room - 16_060_522_496 - 2_471_628_800)
    assert "llama-3.1-8b weights (16.06 GB) and the draft_model proposer's (2.47 GB) leave no KV budget" \
        in str(error.value)
    status = main(["simulate", "--policy", "continuous", "--num-prompts", "1", "--gpu-memory-utilization", "0.2",
                   "--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 4}',
                   "--acceptance-rate", "0.7"])
    err = capsys.readouterr().err
    assert status == 2 and "the draft_model proposer's (2.47 GB) leave no KV budget" in err, err


def test_a_proposer_beside_windows_recurrent_state_or_stages_is_refused_and_memory_is_checked():
    held = ProposerMemory("draft_model", 0, 8192)
    for name in ("gemma-3-27b", "jamba-1.5-mini"):
        with pytest.raises(InvalidValueError) as error:
            KVPool.for_model(get_model(name), budget=10**10, proposer=held)
        assert error.value.field == "proposer"
    with pytest.raises(InvalidValueError) as error:
        kv_budget_for(Deployment(get_model("llama-3.1-70b"), H100, Parallelism(2, pipeline=2)), proposer=held)
    assert error.value.field == "pipeline_parallel_size"
    with pytest.raises(InvalidValueError) as error:
        Speculation(4, Fraction(7, 10), memory=(0, 8192))
    assert error.value.field == "memory"


def test_from_config_sets_the_memory_given_the_target_only():
    with_target = Speculation.from_config(DRAFT, H100, acceptance_rate=Fraction(7, 10), target=TP4)
    assert with_target.memory == ProposerMemory("draft_model", DRAFT_W, DRAFT_KV)
    assert Speculation.from_config(DRAFT, H100, acceptance_rate=Fraction(7, 10)).memory is None
