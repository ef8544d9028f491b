"""The KV-cache pool of the reference scheduler: capacity and the one block rule.

The pool counts **blocks** of ``block_size`` tokens; token-level accounting is the
same pool with ``block_size = 1``. A sequence holding c tokens of KV needs
``blocks_for(c) = ceil(c / b)`` blocks (:func:`roofline.formulas.blocks_per_sequence`).
That single rule is used for everything ():

* reserve-the-lifetime admission reserves ``lifetime_blocks(P, O) = blocks_for(P + O - 1)``
  (:func:`roofline.formulas.lifetime_kv_slots`);
* on-demand admission takes ``blocks_for`` of the tokens the prefill writes, and a
  running sequence grows by ``blocks_for(c + 1) - blocks_for(c)`` blocks when its KV
  goes from c to c + 1 tokens, so at the end of its life it holds exactly
  ``lifetime_blocks(P, O)``;
* a request whose lifetime blocks exceed the whole pool can never run and is rejected.

Conventions: docs/conventions.md, "Memory" and "Serving policies".
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from .. import formulas as f
from .._checks import check_count
from ..errors import InvalidValueError

__all__ = ["KVPool"]


def _python_int(value: Any) -> Any:
    """A numpy integer as a Python int (int64 arithmetic on the pool's counts could wrap); anything else as is."""
    return int(value) if isinstance(value, np.integer) else value


def _capacity(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        check_count(attribute.name, value, minimum=0)


def _block_size(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count(attribute.name, value, minimum=1)


@attrs.frozen
class KVPool:
    """A KV-cache pool of ``capacity_blocks`` blocks of ``block_size`` tokens (frozen spec).

    Parameters
    ----------
    capacity_blocks : int >= 0 [blocks] or None
        Blocks in the pool; None means unlimited (nothing is ever rejected for KV).
    block_size : int >= 1 [tokens/block], default 1
        1 is token-level accounting (a block is a token slot).
        Numpy integers are taken as Python ints, so the pool's products never wrap.

    Raises
    ------
    InvalidValueError
        A negative or non-integer capacity, a block size below 1.

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

    @classmethod
    def tokens(cls, capacity_tokens: int) -> KVPool:
        """A pool with token-level accounting holding ``capacity_tokens`` tokens (block size 1)."""
        return cls(capacity_tokens, 1)

    @classmethod
    def blocks(cls, capacity_blocks: int, *, block_size: int) -> KVPool:
        """A paged pool of ``capacity_blocks`` blocks of ``block_size`` tokens."""
        return cls(capacity_blocks, block_size)

    @classmethod
    def unlimited(cls, *, block_size: int = 1) -> KVPool:
        """A pool that never runs out (KV use is still counted and reported)."""
        return cls(None, block_size)

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
        blocks = f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=kv_bytes_per_token, block_size=block_size)
        return cls(int(blocks), block_size)

    @property
    def capacity_tokens(self) -> int | None:
        """Token slots in the pool, capacity_blocks x block_size [tokens] (None if unlimited)."""
        return None if self.capacity_blocks is None else self.capacity_blocks * self.block_size

    def blocks_for(self, tokens: int) -> int:
        """Blocks a sequence holding ``tokens`` tokens of KV needs: ceil(tokens / block_size)."""
        return f.blocks_per_sequence.unchecked(context=tokens, block_size=self.block_size)

    def lifetime_blocks(self, prompt_tokens: int, output_tokens: int) -> int:
        """Blocks a request holds at the end of its life: blocks_for(P + O - 1) (pegainfer #288)."""
        return self.blocks_for(f.lifetime_kv_slots.unchecked(prompt_tokens=prompt_tokens, output_tokens=output_tokens))

    def fits(self, blocks: int) -> bool:
        """True if ``blocks`` blocks fit in the whole (empty) pool."""
        return self.capacity_blocks is None or blocks <= self.capacity_blocks

    def sequences_that_fit(self, tokens: int) -> int | None:
        """How many sequences of ``tokens`` tokens the empty pool holds (None if unlimited)."""
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
        return (f"lifetime KV of {slots} tokens needs {need} blocks of {self.block_size}; "
                f"the pool has {self.capacity_blocks}")
