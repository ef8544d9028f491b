"""p04: 128 KiB of KV per token; a ~53 GB cache is full at ~404 sequences of 1,000 tokens.

Claim
-----
Llama 3.1 8B keeps 2 (K and V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 B
= 128 KiB of KV cache per token in BF16. A sequence at 1,000 tokens of context holds
131 MB, so the lesson's ~53 GB cache is full at floor(53e9 / (1,000 x 131,072)) = 404
sequences (401 in vLLM's 16-token blocks): the dashed curve of the lesson's left chart
stops there.

Assumptions
-----------
* docs/conventions.md, "The model" and "Memory": k = 2 L H_kv d e (KV heads, not query
  heads; head_dim from the config); capacity = floor(budget / k) tokens; a sequence of
  c tokens needs ceil(c / b) blocks of b tokens.
* The KV budget is the lesson's 53 GB (= 53e9 bytes). Beside it, the real budget this
  package derives for an H100 SXM (docs/conventions.md, "Memory"): usable memory
  (79.2 GiB) x 0.9 - weight bytes - a reserve of 3.05 GiB for non-torch memory and the
  activation peak, taken from a published vLLM log of Llama 3 8B on an 80 GB GPU; and
  the upper bound with reserve 0.

Sources
-------
Llama 3.1 8B config.json (32 layers, 8 KV heads, head_dim 128); vLLM PR #29736 and vLLM #12330
(docs/conventions.md, "Sources of the worked cases"); the lesson, section 2 (the dashed curve); vLLM's default block
size (16) and gpu_memory_utilization (0.9); the reserve: vLLM pull request #10511
(https://github.com/vllm-project/vllm/pull/10511, comment of 2024-12-14), whose log of
``vllm serve meta-llama/Meta-Llama-3-8B`` reads non_torch_memory 1.79 GiB and PyTorch
activation peak memory 1.26 GiB.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p04_kv_cache"
CONTEXT, LESSON_BUDGET, BLOCK = 1000, 53 * 10**9, 16


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..estimate import kv_budget_for, published_reserve
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..symbolic import kv_cache as kc
    from ..symbolic import symbols_for

    model, gpu = get_model("llama-3.1-8b"), get_accelerator("h100-sxm")

    p.title("p04 KV cache: bytes per token and where a 53 GB cache is full (Llama 3.1 8B, BF16)")

    p.section("KV bytes per token")
    p.show("k", kc.kv_bytes_per_token)
    p.legend("num_hidden_layers", "num_key_value_heads", "head_dim", "kv_bytes")
    shape = dict(num_hidden_layers=model.num_hidden_layers, num_key_value_heads=model.num_key_value_heads,
                 head_dim=model.head_dim, kv_bytes=2)
    k = kc.kv_bytes_per_token.subs(symbols_for(shape))
    p.equal("k = 2 x 32 x 8 x 128 x 2 = 131,072 B = 128 KiB (the definition at the config's shape)", k, 128 * 1024,
            value=f"{int(k):,} B")
    p.equal("the preset's kv_bytes_per_token and the fast path agree", model.kv_bytes_per_token,
            f.kv_bytes_per_token(**shape))
    wrong = 2 * model.num_hidden_layers * model.hidden_size * 2
    p.holds("vLLM PR #29736: the wrong width (hidden_size, i.e. 32 query heads) would give 4x: 512 KiB",
            wrong == 4 * model.kv_bytes_per_token, f"{wrong // 1024} KiB")
    per_sequence = CONTEXT * model.kv_bytes_per_token
    p.equal(f"a request of 100 prompt + 901 output tokens ends holding P + O - 1 = {CONTEXT:,} tokens of KV "
            "(its last token is never fed back; fast path lifetime_kv_slots)",
            f.lifetime_kv_slots(prompt_tokens=100, output_tokens=901), CONTEXT)
    p.equal(f"one sequence at {CONTEXT:,} tokens holds c k", per_sequence, 131_072_000,
            value=si(per_sequence, "B"))

    p.section(f"Sequences of {CONTEXT:,} tokens in the lesson's 53 GB")
    p.show("tokens that fit", kc.kv_capacity_tokens)
    p.show("sequences that fit", kc.sequences_that_fit)
    p.legend("budget", "kv_bytes_per_token", "context")
    kw = dict(budget=LESSON_BUDGET, kv_bytes_per_token=model.kv_bytes_per_token, context=CONTEXT)
    tokens = kc.kv_capacity_tokens.subs(symbols_for(dict(budget=LESSON_BUDGET,
                                                         kv_bytes_per_token=model.kv_bytes_per_token)))
    sequences = kc.sequences_that_fit.subs(symbols_for(kw))
    p.equal("floor(53e9 / 131,072) tokens", tokens, 404_357, value=f"{int(tokens):,} tokens")
    p.equal("fast path kv_capacity_tokens = symbolic",
            f.kv_capacity_tokens(budget=LESSON_BUDGET, kv_bytes_per_token=model.kv_bytes_per_token), tokens)
    p.equal("floor(404,357 / 1,000) = 404 sequences (the lesson's ~404)", sequences, 404)
    p.equal("fast path sequences_that_fit = symbolic", f.sequences_that_fit(**kw), sequences)
    blocks_kw = dict(kw, block_size=BLOCK)
    in_blocks = kc.sequences_that_fit_blocks.subs(symbols_for(blocks_kw))
    blocks = f.kv_capacity_blocks(budget=LESSON_BUDGET, kv_bytes_per_token=model.kv_bytes_per_token, block_size=BLOCK)
    per_seq_blocks = f.blocks_per_sequence(context=CONTEXT, block_size=BLOCK)
    p.equal(f"fast path kv_capacity_blocks = floor(53e9 / ({BLOCK} x 131,072)) = 25,272 blocks", blocks,
            LESSON_BUDGET // (BLOCK * 131_072))
    p.equal(f"fast path blocks_per_sequence = ceil(1,000 / {BLOCK}) = 63 blocks", per_seq_blocks, -(-CONTEXT // BLOCK))
    p.equal(f"in {BLOCK}-token blocks: floor(floor(53e9 / ({BLOCK} k)) / ceil(1000 / {BLOCK})) = 401", in_blocks, 401,
            value=f"{blocks:,} blocks / {per_seq_blocks} per sequence")
    full = sequences * per_sequence
    p.holds("404 sequences fill the cache; a 405th would not fit",
            full <= LESSON_BUDGET < (sequences + 1) * per_sequence,
            f"{si(full, 'B')} <= 53 GB < {si((sequences + 1) * per_sequence, 'B')}")

    p.section("Where 53 GB comes from, and what this package's budget gives")
    reserve = published_reserve(model, gpu)
    if reserve is None:  # pragma: no cover - the preset pair has a published log
        raise AssertionError("no published reserve for Llama 3.1 8B on an H100 SXM")
    p.say(f"Reserve for non-torch memory and the activation peak: {float(reserve.value) / 2**30:.2f} GiB, from "
          f"{reserve.source.citation} ({reserve.source.date}).")
    p.equal("reserve = non_torch_memory 1.79 GiB + activation peak 1.26 GiB, as the log prints them",
            reserve.value, (Fraction(179, 100) + Fraction(126, 100)) * 2**30, value=si(reserve.value, "B"))
    budget = kv_budget_for(model, gpu, reserved=reserve.value)
    upper = kv_budget_for(model, gpu)
    p.equal("real budget = usable memory x 0.9 - weight bytes - reserve", budget,
            Fraction(gpu.usable_memory) * Fraction(9, 10) - model.weight_bytes - reserve.value, value=si(budget, "B"))
    p.equal("upper bound (reserve 0) = usable memory x 0.9 - weight bytes", upper,
            Fraction(gpu.usable_memory) * Fraction(9, 10) - model.weight_bytes, value=si(upper, "B"))
    real = f.sequences_that_fit(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token, context=CONTEXT)
    real_blocks = f.sequences_that_fit_blocks(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token,
                                              context=CONTEXT, block_size=BLOCK)
    most = f.sequences_that_fit(budget=upper, kv_bytes_per_token=model.kv_bytes_per_token, context=CONTEXT)
    p.equal(f"real budget: floor(budget / (1,000 k)) sequences of {CONTEXT:,} tokens", real,
            math.floor(budget / (CONTEXT * model.kv_bytes_per_token)), value=str(real))
    p.equal(f"in {BLOCK}-token blocks: floor(floor(budget / ({BLOCK} k)) / ceil(1000 / {BLOCK}))", real_blocks,
            math.floor(budget / (BLOCK * model.kv_bytes_per_token)) // -(-CONTEXT // BLOCK), value=str(real_blocks))
    p.say(f"The lesson does not say how it got ~53 GB. This package finds {si(budget, 'B')} with the published "
          f"reserve ({real} sequences of {CONTEXT:,} tokens, {real_blocks} in {BLOCK}-token blocks) and "
          f"{si(upper, 'B')} at most (reserve 0, {most} sequences). The same vLLM log reports "
          "available_kv_cache_memory 53.29 GiB (57.2 GB): the lesson's ~53 may be that figure read in GB.")
    p.holds("the lesson's 53 GB is below the real budget an H100 leaves at 0.9 utilization (a conservative budget)",
            LESSON_BUDGET < budget, f"53 GB < {si(budget, 'B')}")

    p.conclude(f"k = {model.kv_bytes_per_token:,} B = 128 KiB/token; 53 GB holds {int(tokens):,} tokens = "
               f"{int(sequences)} sequences of {CONTEXT:,} ({int(in_blocks)} in {BLOCK}-token blocks); "
               f"H100 at 0.9: real {si(budget, 'B')} ({float(reserve.value) / 2**30:.2f} GiB vLLM reserve), "
               f"{real} sequences; upper bound {si(upper, 'B')}, {most}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
