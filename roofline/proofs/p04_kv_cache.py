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
* CONVENTIONS.md, "The model" and "Memory": k = 2 L H_kv d e (KV heads, not query
  heads; head_dim from the config); capacity = floor(budget / k) tokens; a sequence of
  c tokens needs ceil(c / b) blocks of b tokens.
* The KV budget is the lesson's 53 GB (= 53e9 bytes). Beside it, the budget this
  package derives for an H100 SXM: usable memory (79.2 GiB) x 0.9 - weight bytes.

Sources
-------
Llama 3.1 8B config.json (32 layers, 8 KV heads, head_dim 128); case K1 and K4 of
../shared/cases/CASES.md; the lesson, section 2 (the dashed curve); vLLM's default block
size (16) and gpu_memory_utilization (0.9).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p04_kv_cache"
CONTEXT, LESSON_BUDGET, BLOCK = 1000, 53 * 10**9, 16


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..estimate import kv_budget_for
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
    p.equal("k = 2 x 32 x 8 x 128 x 2 = 131,072 B = 128 KiB", k, 128 * 1024, value=f"{int(k):,} B")
    p.equal("the preset's kv_bytes_per_token and the fast path agree", model.kv_bytes_per_token,
            f.kv_bytes_per_token(**shape))
    wrong = 2 * model.num_hidden_layers * model.hidden_size * 2
    p.holds("case K1: the wrong width (hidden_size, i.e. 32 query heads) would give 4x: 512 KiB",
            wrong == 4 * model.kv_bytes_per_token, f"{wrong // 1024} KiB")
    per_sequence = CONTEXT * model.kv_bytes_per_token
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
    budget = kv_budget_for(model, gpu)
    p.equal("budget = usable memory x 0.9 - weight bytes", budget,
            Fraction(gpu.usable_memory) * Fraction(9, 10) - model.weight_bytes, value=si(budget, "B"))
    real = f.sequences_that_fit(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token, context=CONTEXT)
    p.say(f"The lesson does not say how it got ~53 GB; one reading is 80 GB - 16 GB of weights - ~11 GB "
          f"for activations and the runtime. With 79.2 GiB usable at 0.9 utilization this package finds "
          f"{si(budget, 'B')}, "
          f"{real} sequences of {CONTEXT:,} tokens.")
    p.holds("the lesson's 53 GB is below what an H100 leaves at 0.9 utilization (a conservative budget)",
            LESSON_BUDGET < budget)

    p.conclude(f"k = {model.kv_bytes_per_token:,} B = 128 KiB/token; 53 GB holds {int(tokens):,} tokens = "
               f"{int(sequences)} sequences of {CONTEXT:,} ({int(in_blocks)} in {BLOCK}-token blocks); "
               f"H100 at 0.9: {si(budget, 'B')}, {real} sequences")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
