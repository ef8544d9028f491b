"""The prefix cache of continuous batching: block keys, reference counts, an LRU queue of cached free blocks.

One :class:`PrefixCache` serves one run (:class:`roofline.sim.run._Run`), for both clocks and
both prefill modes of :mod:`roofline.sim.continuous`, which keeps the count of blocks in use
and asks the cache, on admission, how many of a prompt's leading blocks it hits
(:meth:`PrefixCache.lookup`, :meth:`PrefixCache.acquire`), and on a sequence's leave, how many
of its blocks other sequences still hold (:meth:`PrefixCache.release`).

Rules (docs/conventions.md, "Prefix caching"; vLLM V1's automatic prefix caching):

* Block j of request i (tokens j b .. (j + 1) b - 1 at the engine's block size b) is named by a
  key. Where the request has hashes (:attr:`roofline.sim.Request.block_hashes`, blocks of B
  tokens) and its hashed blocks cover block j of the prompt, the key is (the chain of the
  hashes of trace blocks 0 .. t, j) with t = floor(((j + 1) b - 1) / B) the trace block of
  its last token: two prompts share engine block j iff their hashes agree up to t. Otherwise
  (a generated token in it, no hashes) the key is private to the request, (-(i + 1), j), so
  only the request itself hits it again (a recompute prefill after a preemption).
* A prompt of L tokens (a recompute prefill: prompt and generated tokens) hits its leading
  blocks whose keys are held (referenced or cached free), at most floor((L - 1) / b) of them
  (:func:`roofline.formulas.prefix_cached_tokens`).
* A block held by k running sequences counts once in the pool; a block no sequence holds
  stays cached, taking no room from admission, until the pool needs the room: then cached
  free blocks are evicted least recently freed first (a sequence's blocks are freed last
  block first, so its first blocks are evicted last).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__: list[str] = []


class PrefixCache:
    """Block keys, reference counts and the LRU queue of one run (module docstring)."""

    def __init__(self, requests: Sequence[Any], n: int, block_size: int, capacity: float) -> None:
        self.b = block_size
        self.capacity = capacity
        self.hashes: list[tuple[int, ...]] = [()] * n
        self.hash_block: list[int] = [1] * n
        for i, r in enumerate(requests):
            if r.block_hashes:
                self.hashes[i], self.hash_block[i] = r.block_hashes, r.hash_block_size
        self._chains: dict[tuple[int, int], int] = {}
        self._chain_of: dict[int, list[int]] = {}
        self.ref: dict[tuple[int, int], int] = {}  # key -> sequences holding it (>= 1)
        # cached free blocks, least recently freed first: an OrderedDict, whose popitem(last=False) is O(1) (a dict's
        # next(iter(...)) after deletions at its front walks the deleted slots: quadratic over a long run)
        self.free: OrderedDict[tuple[int, int], None] = OrderedDict()
        self.mine: dict[int, set[tuple[int, int]]] = {}  # sequence -> the keys it holds a reference to
        self.upto: dict[int, int] = {}  # sequence -> its leading blocks hit or written
        self.queried_tokens = 0
        self.hit_tokens = 0
        self.queried_blocks = 0
        self.hit_blocks = 0
        self.evictions = 0

    def add(self, request: Any) -> None:
        """One more request of the run (a data-parallel replica's: ``_Run.add``)."""
        hashes = request.block_hashes
        self.hashes.append(hashes if hashes else ())
        self.hash_block.append(request.hash_block_size if hashes else 1)

    # ------------------------------------------------------------------ keys
    def _chain(self, i: int) -> list[int]:
        chain = self._chain_of.get(i)
        if chain is None:
            chain, prev, chains = [], -1, self._chains
            for h in self.hashes[i]:
                prev = chains.setdefault((prev, h), len(chains))
                chain.append(prev)
            self._chain_of[i] = chain
        return chain

    def key(self, i: int, j: int, prompt_tokens: int) -> tuple[int, int]:
        """The key of block j of request i (module docstring)."""
        return self.keys(i, j, j + 1, prompt_tokens)[0]

    def keys(self, i: int, lo: int, hi: int, prompt_tokens: int) -> list[tuple[int, int]]:
        """The keys of blocks lo .. hi - 1 of request i, in order (:meth:`key` of each, in one pass)."""
        private = -(i + 1)
        if not self.hashes[i]:
            return [(private, j) for j in range(lo, hi)]
        b, per, chain = self.b, self.hash_block[i], self._chain(i)
        # block j is named by its hashes iff its last token is a prompt token inside the hashed blocks
        named = min(hi, prompt_tokens // b, len(chain) * per // b)
        out = [(chain[((j + 1) * b - 1) // per], j) for j in range(lo, max(lo, named))]
        out += [(private, j) for j in range(max(lo, named), hi)]
        return out

    # ------------------------------------------------------------------ admission
    def lookup(self, i: int, length: int, prompt_tokens: int) -> tuple[int, int]:
        """(blocks hit, of them held by running sequences) for a (re-)prefill of ``length`` tokens; no change."""
        ref, free = self.ref, self.free
        most = (length - 1) // self.b
        m = shared = 0
        while m < most:
            k = self.key(i, m, prompt_tokens)
            if k in ref:
                shared += 1
            elif k not in free:
                break
            m += 1
        return m, shared

    def acquire(self, i: int, length: int, prompt_tokens: int) -> int:
        """Admit sequence i for a (re-)prefill of ``length`` tokens: hold its hit blocks; the tokens hit."""
        m, _ = self.lookup(i, length, prompt_tokens)
        ref, free = self.ref, self.free
        held = self.keys(i, 0, m, prompt_tokens)
        for k in held:
            if k in free:
                del free[k]
            ref[k] = ref.get(k, 0) + 1
        self.mine[i] = set(held)
        self.upto[i] = m
        self.queried_tokens += length
        self.hit_tokens += m * self.b
        self.queried_blocks += (length - 1) // self.b
        self.hit_blocks += m
        return m * self.b

    def write(self, i: int, tokens: int, prompt_tokens: int) -> None:
        """Sequence i's first ``tokens`` tokens are computed (or scheduled): its full blocks become shareable."""
        ref, free, mine = self.ref, self.free, self.mine[i]
        upto = tokens // self.b
        for k in self.keys(i, self.upto[i], upto, prompt_tokens):
            if k in ref:  # another sequence holds this block (past the hit limit): ours is a private copy
                continue
            free.pop(k, None)  # a stale cached copy the prefix walk did not reach: the new block replaces it
            ref[k] = 1
            mine.add(k)
        if upto > self.upto[i]:
            self.upto[i] = upto

    def release(self, i: int, kv_tokens: int, prompt_tokens: int) -> int:
        """Sequence i leaves holding ``kv_tokens`` tokens of KV: drop its references, cache its full blocks
        (last block first), and return how many of its blocks other sequences still hold."""
        ref, free = self.ref, self.free
        mine = self.mine.pop(i, set())
        self.upto.pop(i, None)
        still = 0
        for k in reversed(self.keys(i, 0, kv_tokens // self.b, prompt_tokens)):
            if k in mine:
                count = ref[k] - 1
                if count:
                    ref[k] = count
                    still += 1
                    continue
                del ref[k]
            if k not in ref:
                free.pop(k, None)
                free[k] = None
        return still

    def trim(self, in_use: int) -> None:
        """Evict cached free blocks, least recently freed first, until they fit beside ``in_use`` blocks."""
        free = self.free
        room = self.capacity - in_use
        while len(free) > room and free:
            free.popitem(last=False)
            self.evictions += 1

    def summary(self) -> dict[str, Any]:
        """The run's hit rates (tokens, blocks), prefill tokens saved and evictions."""
        return {  # JSON-ready (SimResult.options): the counts exact, the rates their float quotients
            "hit_rate_tokens": self.hit_tokens / self.queried_tokens if self.queried_tokens else None,
            "hit_rate_blocks": self.hit_blocks / self.queried_blocks if self.queried_blocks else None,
            "queried_tokens": self.queried_tokens, "hit_tokens": self.hit_tokens,
            "queried_blocks": self.queried_blocks, "hit_blocks": self.hit_blocks,
            "prefill_tokens_saved": self.hit_tokens, "evictions": self.evictions,
        }
