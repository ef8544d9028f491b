"""The KV-cache pool of the reference scheduler: capacity and the one block rule.

The pool counts **blocks** of ``block_size`` tokens; token-level accounting is the
same pool with ``block_size = 1``. A sequence holding c tokens of KV needs
``blocks_for(c) = ceil(c / b)`` blocks (:func:`roofline.formulas.blocks_per_sequence`).
That single rule is used for everything:

* reserve-the-lifetime admission reserves ``lifetime_blocks(P, O) = blocks_for(P + O - 1)``
  (:func:`roofline.formulas.lifetime_kv_slots`);
* on-demand admission takes ``blocks_for`` of the tokens the prefill writes, and a
  running sequence grows by ``blocks_for(c + 1) - blocks_for(c)`` blocks when its KV
  goes from c to c + 1 tokens, so at the end of its life it holds exactly
  ``lifetime_blocks(P, O)``;
* a request whose lifetime blocks exceed the whole pool can never run and is rejected.

Sliding-window layers (a pool made with ``layer_windows``, :meth:`KVPool.for_model`): the pool
accounts KV **by layer**, as vLLM V1's hybrid KV cache manager keeps one block table per
group of layers (vLLM docs, "Hybrid KV Cache Manager"). Its unit is a *layer-block*: b
tokens of one layer. A sequence at c tokens holds ceil(c / b) layer-blocks in each
full-attention layer and :func:`roofline.formulas.window_blocks_per_sequence` in each layer
with window w (the blocks covering its last w positions; blocks wholly outside the window
are freed), so ``blocks_for`` is no longer monotone in c and the lifetime reservation is
the most a sequence ever holds (:meth:`KVPool.lifetime_blocks`). vLLM pads its layer groups
to equal sizes so that every page has one size; this pool counts each layer's blocks
exactly instead (no padding).

Hybrid models (a pool made with ``state_blocks``, :meth:`KVPool.for_model`): each sequence also
holds its recurrent layers' fixed state, ``state_blocks`` whole blocks of the same pool for as long
as it holds any KV (vLLM V1's hybrid allocator gives each sequence state pages from the one pool
its attention blocks come from; docs/conventions.md, "Hybrid models"). ``blocks_for(c)`` is then
ceil(c / b) + state_blocks for c >= 1 (0 for c = 0), so admission, growth (which never needs a new
state block) and the lifetime reservation all keep the one rule.

Conventions: docs/conventions.md, "Memory", "Sliding-window attention", "Hybrid models" and
"Serving policies".
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

import attrs
import numpy as np

from .. import formulas as f
from .._checks import check_count
from ..errors import InvalidValueError

__all__ = ["KVPool", "LayerWindows", "MAX_BUDGET"]

#: The largest KV budget a pool is built from [bytes]: 10^24 (10^15 GB, the command line's largest
#: ``--kv-budget-gb``), a guard chosen so that an absurd budget is refused by name, not a sourced limit.
MAX_BUDGET = 10**24


def _python_int(value: Any) -> Any:
    """A numpy integer as a Python int (int64 arithmetic on the pool's counts could wrap); anything else as is."""
    return int(value) if isinstance(value, np.integer) else value


def _windows(value: Any) -> tuple[int | None, ...]:
    """Per-layer windows as a tuple, () when no layer slides (full attention throughout)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidValueError("layer_windows", value, "expected one window (int >= 1) or None per layer")
    windows = tuple(_python_int(w) for w in value)
    for w in windows:
        if w is not None:
            check_count("layer_windows", w, minimum=1)
    return windows if any(w is not None for w in windows) else ()


def _layer_list(value: Any) -> tuple[int | None, ...]:
    """Every layer's window kept, None ones included (all None is L full-attention layers, not ()); at least one."""
    windows = _windows(value)
    if not windows:  # all None, or empty: _windows folds both into ()
        windows = tuple(_python_int(w) for w in value)
        if not windows:
            raise InvalidValueError("layer_windows", value, "expected one window (int >= 1) or None per layer, "
                                    "for at least one layer")
    return windows


@attrs.frozen
class LayerWindows:
    """The layers of a model with sliding windows, grouped: what the scheduler counts per sequence.

    Parameters
    ----------
    layer_windows : tuple of (int >= 1 or None)
        One entry per layer: its sliding window [tokens], or None for full attention
        (:attr:`roofline.ModelConfig.layer_windows`).

    Notes
    -----
    The scheduler counts KV and attention of such a model in **token-layers** (one token's KV in
    one layer; a full-attention model at context c holds L x c of them). For one sequence
    (docs/conventions.md, "Sliding-window attention"):

    * :meth:`held`: the token-layers it holds and a decode step reads at context c,
      sum over layers of min(c, w_l);
    * :meth:`chunk`: a prompt chunk of q tokens after p0 cached ones reads min(p0, w_l - 1)
      cached tokens per layer (the keys its queries need before it; p0 at full attention) and has
      :func:`roofline.formulas.window_attention_pairs` query-key pairs per layer;
    * :meth:`pairs`: a whole prompt's pairs (p0 = 0).

    Raises
    ------
    InvalidValueError
        A window that is not an integer >= 1; no layers. (Windows that are all None are kept: L
        full-attention layers, L x c token-layers at context c.)

    Examples
    --------
    Two full layers and two with a window of 4: at 10 tokens 2 x 10 + 2 x 4 = 28 token-layers.

    >>> LayerWindows((None, 4, None, 4)).held(10), LayerWindows((None, 4, None, 4)).pairs(10)
    (28, 178)
    """

    layer_windows: tuple[int | None, ...] = attrs.field(converter=_layer_list)
    #: (full-attention layers, ((window, layers with it), ...) by increasing window), computed once.
    groups: tuple[int, tuple[tuple[int, int], ...]] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        counts = Counter(w for w in self.layer_windows if w is not None)
        full = sum(1 for w in self.layer_windows if w is None)
        object.__setattr__(self, "groups", (full, tuple(sorted(counts.items()))))

    @property
    def layers(self) -> int:
        """L, the number of layers."""
        return len(self.layer_windows)

    def held(self, context: int) -> int:
        """Token-layers one sequence holds (and a decode step reads) at ``context`` tokens: sum_l min(c, w_l)."""
        full, windowed = self.groups
        total = full * context
        for w, n in windowed:
            total += n * (context if context < w else w)
        return total

    def chunk(self, chunk_tokens: int, cached_tokens: int) -> tuple[int, int]:
        """(cached token-layers read, query-key pairs summed over layers) of one prompt chunk."""
        full, windowed = self.groups
        q, p0 = chunk_tokens, cached_tokens
        cached, pairs = chunk_kv(None, q, p0)
        cached, pairs = full * cached, full * pairs
        for w, n in windowed:
            cached += n * (p0 if p0 < w else w - 1)
            pairs += n * f.window_attention_pairs.unchecked(chunk_tokens=q, cached_tokens=p0, sliding_window=w)
        return cached, pairs

    def pairs(self, prompt_tokens: int) -> int:
        """Query-key pairs of a whole prompt of ``prompt_tokens`` tokens, summed over layers."""
        return self.chunk(prompt_tokens, 0)[1]

    def blocks(self, context: int, block_size: int) -> int:
        """Layer-blocks of ``block_size`` tokens one sequence holds at ``context`` tokens (module docstring)."""
        full, windowed = self.groups
        total = full * -(-context // block_size)
        for w, n in windowed:
            total += n * f.window_blocks_per_sequence.unchecked(context=context, block_size=block_size,
                                                                 sliding_window=w)
        return total


def held_kv(windows: LayerWindows | None, context: int) -> int:
    """KV one sequence at ``context`` tokens holds, in the scheduler's unit: tokens, or token-layers with windows."""
    return context if windows is None else windows.held(context)


def chunk_kv(windows: LayerWindows | None, chunk_tokens: int, cached_tokens: int) -> tuple[int, int]:
    """(cached KV read, query-key pairs) of one prompt chunk of q tokens after p0 cached ones: (p0, q p0 +
    q (q + 1) / 2) at full attention (:func:`roofline.formulas.chunk_attention_pairs`), token-layers with windows."""
    if windows is None:
        q, p0 = chunk_tokens, cached_tokens
        return p0, q * p0 + q * (q + 1) // 2
    return windows.chunk(chunk_tokens, cached_tokens)


def prompt_pairs(windows: LayerWindows | None, prompt_tokens: int) -> int:
    """Causal query-key pairs of a whole prompt (summed over layers with windows)."""
    if windows is None:
        return f.causal_attention_pairs.unchecked(prompt_tokens=prompt_tokens)
    return windows.pairs(prompt_tokens)


def _capacity(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        check_count(attribute.name, value, minimum=0)


def _block_size(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count(attribute.name, value, minimum=1)


def _state_blocks(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count(attribute.name, value, minimum=0)


@attrs.frozen(repr=False)
class KVPool:
    """A KV-cache pool of ``capacity_blocks`` blocks of ``block_size`` tokens (frozen spec).

    Parameters
    ----------
    capacity_blocks : int >= 0 [blocks] or None
        Blocks in the pool; None means unlimited (nothing is ever rejected for KV).
    block_size : int >= 1 [tokens/block], default 1
        1 is token-level accounting (a block is a token slot).
        Numpy integers are taken as Python ints, so the pool's products never wrap.
    layer_windows : tuple of (int >= 1 or None), default () (full attention)
        A model with sliding-window layers (:attr:`roofline.ModelConfig.layer_windows`): the
        pool then counts **layer-blocks** (b tokens of one layer) and ``capacity_blocks`` is in
        layer-blocks (module docstring; :meth:`for_model` builds it from a KV budget). Windows
        that are all None are full attention (stored as ()).
    state_blocks : int >= 0, default 0
        Blocks one sequence's recurrent state takes (a hybrid model; :func:`roofline.formulas.hybrid_state_blocks`),
        held beside its KV blocks while it holds any (module docstring). Only the step engine
        counts them: a run on the stretch clock needs a pool without them.

    Raises
    ------
    InvalidValueError
        A negative or non-integer capacity, a block size below 1, a window below 1.

    Notes
    -----
    The pool is a specification; the policies keep the count of blocks in use and
    check ``in use <= capacity_blocks`` on admission and on growth, with
    :meth:`blocks_for` as the only rule.

    Examples
    --------
    vLLM PR #57336: block 16, a pool of 100 blocks; 10 sequences of 17 tokens use 20 blocks,
    and the pool fits 50 such sequences, not 1,600 // 17 = 94.

    >>> pool = KVPool.blocks(100, block_size=16)
    >>> 10 * pool.blocks_for(17), pool.sequences_that_fit(17), KVPool.tokens(1600).sequences_that_fit(17)
    (20, 50, 94)
    """

    capacity_blocks: int | None = attrs.field(converter=_python_int, validator=_capacity)
    block_size: int = attrs.field(default=1, converter=_python_int, validator=_block_size)
    layer_windows: tuple[int | None, ...] = attrs.field(default=(), converter=_windows, kw_only=True)
    state_blocks: int = attrs.field(default=0, converter=_python_int, validator=_state_blocks, kw_only=True)
    _layers: LayerWindows | None = attrs.field(init=False, repr=False, eq=False, default=None)

    def __attrs_post_init__(self) -> None:
        if self.layer_windows:
            object.__setattr__(self, "_layers", LayerWindows(self.layer_windows))
            if self.state_blocks:
                raise InvalidValueError("state_blocks", self.state_blocks, "a recurrent state beside sliding-window "
                                        "layers is not modelled")

    def __repr__(self) -> str:
        """``KVPool(capacity_blocks=..., block_size=...)``, plus ``layer_windows`` when a layer slides."""
        windows = f", layer_windows={self.layer_windows!r}" if self.layer_windows else ""
        state = f", state_blocks={self.state_blocks!r}" if self.state_blocks else ""
        return f"KVPool(capacity_blocks={self.capacity_blocks!r}, block_size={self.block_size!r}{windows}{state})"

    @property
    def windows(self) -> LayerWindows | None:
        """The layers' windows when the pool counts layer-blocks, else None."""
        return self._layers

    @property
    def unit(self) -> str:
        """What ``capacity_blocks`` and :meth:`blocks_for` count: "blocks" or "layer-blocks"."""
        return "layer-blocks" if self.layer_windows else "blocks"

    @classmethod
    def tokens(cls, capacity_tokens: int) -> KVPool:
        """A pool with token-level accounting holding ``capacity_tokens`` tokens (block size 1)."""
        return cls(capacity_tokens, 1)

    @classmethod
    def blocks(cls, capacity_blocks: int, *, block_size: int) -> KVPool:
        """A paged pool of ``capacity_blocks`` blocks of ``block_size`` tokens."""
        return cls(capacity_blocks, block_size)

    @classmethod
    def unlimited(cls, *, block_size: int = 1, layer_windows: Any = ()) -> KVPool:
        """A pool that never runs out (KV use is still counted and reported)."""
        return cls(None, block_size, layer_windows=layer_windows)

    @classmethod
    def for_model(cls, model: Any, *, budget: Any, block_size: int = 16, proposer: Any = None) -> KVPool:
        """The pool a KV budget holds for ``model``, window-aware.

        Without sliding-window layers: :meth:`from_budget` at ``model.kv_bytes_per_token``; a hybrid
        model's pool also gives each sequence :func:`roofline.formulas.hybrid_state_blocks` blocks of
        state (``state_blocks``).
        With them: floor(budget / (b x one layer's KV bytes per token)) layer-blocks, with the
        model's ``layer_windows`` (module docstring), so that the pool holds
        floor(budget / bytes) sequences where ``bytes`` is the block-level KV of one sequence
        (:func:`roofline.estimate.windowed_block_bytes`).

        Parameters
        ----------
        model : roofline.ModelConfig or roofline.Deployment
            The model, or one GPU's share under tensor parallelism (``model.per_gpu(T)``; a
            Deployment gives its :attr:`~roofline.Deployment.share`).
        budget : [bytes] >= 0
        block_size : int >= 1 [tokens/block], default 16 (vLLM's)
        proposer : roofline.speculative.ProposerMemory or None (default: none)
            A speculative proposer's KV in the same blocks (vLLM V1): floor(budget / (b x (k_kv + k_p)))
            blocks, k_kv the model's and k_p the proposer's KV bytes per token
            (:func:`roofline.estimate.pool_kv_bytes_per_token`); give
            ``budget`` from :func:`roofline.estimate.kv_budget_for` with the same proposer (its weights out).

        Raises
        ------
        InvalidValueError
            Not a ModelConfig or Deployment; a bad budget or block size (as :meth:`from_budget`); a proposer
            beside sliding-window or recurrent layers (field ``proposer``).

        Examples
        --------
        >>> from roofline import Deployment, get_accelerator, get_model
        >>> from roofline.estimate import kv_budget_for
        >>> from roofline.speculative import SpeculativeConfig, proposer_memory
        >>> d = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), 4)
        >>> config = SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 4}')
        >>> draft = proposer_memory(d, config)
        >>> KVPool.for_model(d, budget=kv_budget_for(d)).capacity_blocks
        31476
        >>> KVPool.for_model(d, budget=kv_budget_for(d, proposer=draft), proposer=draft).capacity_blocks
        28186
        """
        from ..deployment import Deployment
        from ..estimate import pool_kv_bytes_per_token
        from ..models import ModelConfig

        if isinstance(model, Deployment):
            model = model.share
        if not isinstance(model, ModelConfig):
            raise InvalidValueError("model", model, "expected a roofline.ModelConfig (roofline.load_model(...)) or "
                                    "a roofline.Deployment")
        if proposer is not None:  # refused beside windows or recurrent state (pool_kv_bytes_per_token)
            return cls.from_budget(budget=budget, kv_bytes_per_token=pool_kv_bytes_per_token(model, proposer),
                                   block_size=block_size)
        if model.is_hybrid:
            pool = cls.from_budget(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token, block_size=block_size)
            state = f.hybrid_state_blocks(state_bytes=model.state_bytes_per_sequence, block_size=block_size,
                                          kv_bytes_per_token=model.kv_bytes_per_token)
            return cls(pool.capacity_blocks, pool.block_size, state_blocks=int(state))
        if not model.has_sliding_window:
            return cls.from_budget(budget=budget, kv_bytes_per_token=model.kv_bytes_per_token, block_size=block_size)
        per_layer = model.layer_kv_elements * model.kv_bytes_per_element
        pool = cls.from_budget(budget=budget, kv_bytes_per_token=per_layer, block_size=block_size)
        return cls(pool.capacity_blocks, pool.block_size, layer_windows=model.layer_windows)

    @classmethod
    def from_budget(cls, *, budget: Any, kv_bytes_per_token: Any, block_size: int = 16) -> KVPool:
        """The pool a KV budget holds: floor(budget / (block_size x k)) blocks.

        Parameters
        ----------
        budget : [bytes] >= 0 (e.g. :func:`roofline.estimate.kv_budget_for`)
        kv_bytes_per_token : [bytes/token] > 0
        block_size : int >= 1 [tokens/block], default 16 (vLLM's)

        Returns
        -------
        KVPool

        Raises
        ------
        InvalidValueError
            A bad budget, KV size or block size (:func:`roofline.formulas.kv_capacity_blocks`): not a
            finite number (an array, NaN, inf), out of range, an integer too large for a float beside
            a float, or a pool too large for a float (``budget / kv_bytes_per_token`` overflows).

        Examples
        --------
        >>> KVPool.from_budget(budget=5691 * 16 * 131_072, kv_bytes_per_token=131_072).capacity_tokens
        91056
        """
        for name, value in (("budget", budget), ("kv_bytes_per_token", kv_bytes_per_token), ("block_size", block_size)):
            if isinstance(value, np.ndarray):
                raise InvalidValueError(name, value, "expected a number (one pool), not an array")
        if not isinstance(budget, bool) and isinstance(budget, (int, float, Fraction)) and budget > MAX_BUDGET:
            raise InvalidValueError("budget", budget, f"exceeds {MAX_BUDGET:.0e} bytes (10^15 GB, the command line's "
                                    "largest --kv-budget-gb): not a memory a device has")
        blocks = f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=kv_bytes_per_token, block_size=block_size)
        return cls(int(blocks), block_size)

    @property
    def capacity_tokens(self) -> int | None:
        """Token slots in the pool, capacity_blocks x block_size [tokens] (None if unlimited)."""
        return None if self.capacity_blocks is None else self.capacity_blocks * self.block_size

    def blocks_for(self, tokens: int) -> int:
        """Blocks a sequence holding ``tokens`` tokens of KV needs: ceil(tokens / block_size), + ``state_blocks``
        for a hybrid model (tokens >= 1); with sliding-window layers, the layer-blocks of every layer
        (:meth:`LayerWindows.blocks`)."""
        if self._layers is not None:
            return self._layers.blocks(tokens, self.block_size)
        blocks = f.blocks_per_sequence.unchecked(context=tokens, block_size=self.block_size)
        return blocks + self.state_blocks if self.state_blocks and tokens else blocks

    def lifetime_blocks(self, prompt_tokens: int, output_tokens: int) -> int:
        """The most blocks a request ever holds: blocks_for(P + O - 1), at the end of its life (pegainfer #288).

        With sliding-window layers a sequence may hold more before its end (a windowed layer holds
        one block more just after its KV crosses into a new block): the lifetime is then the most
        over the contexts it holds after its prefill, max(P, C - b + 1) .. C with C = P + O - 1. No
        earlier context holds more, because every layer holds at least as many blocks at c + b as
        at c (ceil(c / b) rises by one; a window's count is periodic in c with period b once
        c >= w and never exceeds its value there before).

        Raises InvalidValueError naming ``prompt_tokens`` or ``output_tokens`` unless each is an
        integer >= 1 (:class:`roofline.sim.Request`'s ranges).
        """
        check_count("prompt_tokens", prompt_tokens, minimum=1)
        check_count("output_tokens", output_tokens, minimum=1)
        return self.lifetime_blocks_unchecked(prompt_tokens, output_tokens)

    def lifetime_blocks_unchecked(self, prompt_tokens: int, output_tokens: int) -> int:
        """:meth:`lifetime_blocks` without checking its arguments: for the scheduler's loops, whose requests
        were checked once (:func:`roofline.sim.check_requests`)."""
        slots = f.lifetime_kv_slots.unchecked(prompt_tokens=prompt_tokens, output_tokens=output_tokens)
        if not self.layer_windows:
            return self.blocks_for(slots)
        b = self.block_size
        first = max(prompt_tokens, slots - b + 1)
        # Over first..slots (at most b contexts) the count rises only at a c with c - 1 a multiple of b
        # (every layer takes a new block there) and falls or stays elsewhere (a window frees a block):
        # the most is at `first` or at the one such c in the range; two contexts, whatever b is.
        rise = first + (1 - first) % b
        return max(self.blocks_for(first), self.blocks_for(rise) if rise <= slots else 0)

    def fits(self, blocks: int) -> bool:
        """True if ``blocks`` blocks fit in the whole (empty) pool."""
        return self.capacity_blocks is None or blocks <= self.capacity_blocks

    def sequences_that_fit(self, tokens: int) -> int | None:
        """How many sequences of ``tokens`` tokens the empty pool holds (None if unlimited).

        Raises InvalidValueError naming ``tokens`` unless it is an integer >= 1 (a sequence holds
        at least its first token).
        """
        check_count("tokens", tokens, minimum=1)
        if self.capacity_blocks is None:
            return None
        return self.capacity_blocks // self.blocks_for(tokens)

    def never_fits_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request (P, O) can never run in this pool, or None if it can.

        A request can run iff its lifetime KV, blocks_for(P + O - 1), fits the empty pool.
        """
        need = self.lifetime_blocks(prompt_tokens, output_tokens)
        if self.fits(need):
            return None
        slots = f.lifetime_kv_slots.unchecked(prompt_tokens=prompt_tokens, output_tokens=output_tokens)
        return (f"lifetime KV of {slots} tokens needs {need} {self.unit} of {self.block_size}; "
                f"the pool has {self.capacity_blocks}")
