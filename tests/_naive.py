"""What one sequence holds and reads, by brute force over its token positions: the naive oracles' KV rules.

The scheduler's naive oracles (tests/test_sim_properties.py, tests/test_sim_chunked.py) count a
sequence's KV with these functions, which enumerate token positions and block indices one by one
instead of using the package's closed forms (:class:`roofline.sim.LayerWindows`,
:func:`roofline.formulas.window_blocks_per_sequence`, :func:`roofline.formulas.window_attention_pairs`).

``windows`` is a model's per-layer windows (None: full attention), or () for the package's token
accounting of a full-attention model (one "layer"; counts in tokens and blocks). With windows,
counts are token-layers and layer-blocks (docs/conventions.md, "Sliding-window attention"): a
layer with window w keeps the last w positions of a sequence at context c (0-based positions
c - w .. c - 1) and query t (1-based) attends over positions max(0, t - w) .. t - 1.
"""

from __future__ import annotations

from collections.abc import Sequence


def _layers(windows: Sequence[int | None]) -> Sequence[int | None]:
    return windows if windows else (None,)


def _kept(context: int, window: int | None) -> range:
    return range(0 if window is None else max(0, context - window), context)


def held(context: int, windows: Sequence[int | None] = ()) -> int:
    """KV one sequence at ``context`` tokens holds: positions kept, summed over layers."""
    return sum(len(_kept(context, w)) for w in _layers(windows))


def blocks(context: int, block_size: int, windows: Sequence[int | None] = ()) -> int:
    """Blocks one sequence holds: the distinct block indices of the positions each layer keeps."""
    return sum(len({pos // block_size for pos in _kept(context, w)}) for w in _layers(windows))


def lifetime(prompt: int, output: int, block_size: int, windows: Sequence[int | None] = ()) -> int:
    """The most blocks a request holds over its life: its contexts after prefill, P .. P + O - 1."""
    return max(blocks(c, block_size, windows) for c in range(prompt, prompt + output))


def chunk_pairs(chunk: int, cached: int, windows: Sequence[int | None] = ()) -> int:
    """Query-key pairs of a chunk of ``chunk`` tokens after ``cached`` ones, query by query, layer by layer."""
    return sum(len(_kept(t, w)) for w in _layers(windows) for t in range(cached + 1, cached + chunk + 1))


def chunk_cached(chunk: int, cached: int, windows: Sequence[int | None] = ()) -> int:
    """Cached positions (before the chunk) some query of the chunk attends to, summed over layers."""
    return sum(len({pos for t in range(cached + 1, cached + chunk + 1) for pos in _kept(t, w) if pos < cached})
               for w in _layers(windows))
