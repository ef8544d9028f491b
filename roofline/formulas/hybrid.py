"""Hybrid models (recurrent layers beside attention): a decode step's bytes and time, B*, c*, what fits.

A hybrid model's recurrent layers (Gated DeltaNet, Mamba2; :mod:`roofline.hybrid`) hold a fixed
state of S_st bytes per sequence and no KV cache; its attention layers hold k bytes of KV per
token (docs/conventions.md, "Hybrid models"). For B sequences whose contexts sum to S (each at
c in the critical forms):

* bytes = W + k S + 2 B S_st (each state read and written back once per step);
* step time = max(bytes / BW, (B F + a S) / peak) + t0 (F fixed per token: the recurrent layers'
  FLOPs included; a over the attention layers);
* B* = ceil(I* W / (F + a c - I* (k c + 2 S_st))) where that denominator is > 0, else none;
* c* = (F - 2 I* S_st) / (I* k - a): 0 when F <= 2 I* S_st, none when I* k <= a;
* blocks: the state takes ceil(S_st / (b k)) blocks of b tokens of KV; a pool of P blocks fits
  floor(P / (ceil(c / b) + state blocks)) sequences at c (one sequence in M bytes reaches
  floor((M - S_st) / k) tokens: :func:`roofline.formulas.kv_capacity_tokens` of M - S_st).

Derivations: :mod:`roofline.symbolic.hybrid`; proof: ``proofs/p17_hybrid.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._core import ceil, floor, formula, maximum
from .intensity import _none_or_inf

__all__ = ["hybrid_decode_bytes", "hybrid_step_time", "hybrid_critical_batch", "hybrid_critical_context",
           "hybrid_state_blocks", "hybrid_sequences_that_fit"]

_P = "p17_hybrid.py"
_MODEL: dict[str, Any] = dict(weight_bytes="positive", kv_bytes_per_token="nonnegative", flops_per_token="positive",
                              attention_flops_per_token="nonnegative", state_bytes="nonnegative")


@formula(result="positive", topic="hybrid", proof=_P, batch="positive", context_sum="nonnegative",
         weight_bytes="positive", kv_bytes_per_token="nonnegative", state_bytes="nonnegative")
def hybrid_decode_bytes(*, batch: Any, context_sum: Any, weight_bytes: Any, kv_bytes_per_token: Any,
                        state_bytes: Any) -> Any:
    """Bytes a hybrid model's decode step moves [bytes]: W + k S + 2 B S_st.

    Parameters
    ----------
    batch : [sequences] > 0
    context_sum : [tokens] >= 0, the contexts summed (KV of the attention layers)
    weight_bytes : [bytes] > 0
    kv_bytes_per_token : [bytes/token] >= 0, over the attention layers only
    state_bytes : [bytes] >= 0, one sequence's recurrent state (:attr:`roofline.ModelConfig.state_bytes_per_sequence`)

    Returns
    -------
    [bytes], scalar or broadcast shape; :func:`roofline.formulas.decode_bytes` at S_st = 0.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Hybrid models": each sequence's state is read and written back once per
    step, whatever its context.

    Examples
    --------
    >>> hybrid_decode_bytes(batch=2, context_sum=10, weight_bytes=100, kv_bytes_per_token=3, state_bytes=7)
    158
    """
    return weight_bytes + kv_bytes_per_token * context_sum + 2 * batch * state_bytes


@formula(result="positive", topic="hybrid", proof=_P, batch="positive", context_sum="nonnegative",
         bandwidth="positive", peak_flops="positive", overhead="nonnegative", **_MODEL)
def hybrid_step_time(*, batch: Any, context_sum: Any, weight_bytes: Any, kv_bytes_per_token: Any,
                     flops_per_token: Any, attention_flops_per_token: Any, state_bytes: Any, bandwidth: Any,
                     peak_flops: Any, overhead: Any) -> Any:
    """A hybrid model's decode step time, roofline bound with perfect overlap [s].

    Parameters
    ----------
    batch, context_sum, weight_bytes, kv_bytes_per_token, state_bytes : as :func:`hybrid_decode_bytes`
    flops_per_token : [FLOP/token] > 0 (matmuls and the recurrent layers' fixed FLOPs)
    attention_flops_per_token : [FLOP/(token x context token)] >= 0, attention layers only
    bandwidth : [bytes/s] > 0
    peak_flops : [FLOP/s] > 0 (dense)
    overhead : [s] >= 0

    Returns
    -------
    [s], scalar or broadcast shape: max((W + k S + 2 B S_st) / BW, (B F + a S) / peak) + t0.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> hybrid_step_time(batch=2, context_sum=10, weight_bytes=100, kv_bytes_per_token=3, flops_per_token=1,
    ...     attention_flops_per_token=0, state_bytes=7, bandwidth=2, peak_flops=1, overhead=0)
    79.0
    """
    memory = hybrid_decode_bytes.unchecked(batch=batch, context_sum=context_sum, weight_bytes=weight_bytes,
                                           kv_bytes_per_token=kv_bytes_per_token, state_bytes=state_bytes) / bandwidth
    compute = (batch * flops_per_token + attention_flops_per_token * context_sum) / peak_flops
    return maximum(memory, compute) + overhead


_CRIT: dict[str, Any] = dict(context="nonnegative", peak_flops="positive", bandwidth="positive", **_MODEL)


def _crit_den(kw: dict[str, Any]) -> Any:
    ridge = kw["peak_flops"] / kw["bandwidth"]
    c = kw["context"]
    return kw["flops_per_token"] + kw["attention_flops_per_token"] * c - ridge * (
        kw["kv_bytes_per_token"] * c + 2 * kw["state_bytes"])


def _critical_batch_real(kw: dict[str, Any]) -> Any:
    """I* W / (F + a c - I* (k c + 2 S_st)) where that denominator is > 0; None (scalars) or inf (arrays) else."""
    num = kw["peak_flops"] / kw["bandwidth"] * kw["weight_bytes"]
    den = _crit_den(kw)
    if isinstance(den, np.ndarray):
        exists = den > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            return _none_or_inf(num / np.where(exists, den, 1), exists)
    return num / den if den > 0 else None


@formula(result="positive_int", topic="hybrid", proof=_P, none_when_infinite=True, **_CRIT)
def hybrid_critical_batch(**kw: Any) -> Any:
    """A hybrid model's critical batch B*: the smallest integer batch whose decode step is compute-bound.

    Parameters
    ----------
    context : [tokens] >= 0
    weight_bytes : [bytes] > 0; kv_bytes_per_token : [bytes/token] >= 0; flops_per_token : [FLOP/token] > 0;
    attention_flops_per_token : >= 0; state_bytes : [bytes] >= 0 (as :func:`hybrid_step_time`)
    peak_flops : [FLOP/s] > 0; bandwidth : [bytes/s] > 0

    Returns
    -------
    [sequences], int (scalar) or float array: ceil(I* W / (F + a c - I* (k c + 2 S_st))); ``None``
    (scalar) or ``inf`` (array) when that denominator is <= 0: no batch is compute-bound (the
    state's traffic grows with B as the KV's does).

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> hybrid_critical_batch(context=0, weight_bytes=3, kv_bytes_per_token=0, flops_per_token=4,
    ...     attention_flops_per_token=0, state_bytes=1, peak_flops=1, bandwidth=1)
    2
    """
    real = _critical_batch_real(kw)
    if isinstance(real, np.ndarray):
        return np.ceil(real)
    return None if real is None else ceil(real)


@formula(result="nonnegative", topic="hybrid", proof=_P, none_when_infinite=True, kv_bytes_per_token="nonnegative",
         flops_per_token="positive", attention_flops_per_token="nonnegative", state_bytes="nonnegative",
         peak_flops="positive", bandwidth="positive")
def hybrid_critical_context(*, kv_bytes_per_token: Any, flops_per_token: Any, attention_flops_per_token: Any,
                            state_bytes: Any, peak_flops: Any, bandwidth: Any) -> Any:
    """A hybrid model's critical context c*: above it no batch makes a decode step compute-bound [tokens].

    Parameters
    ----------
    kv_bytes_per_token : [bytes/token] >= 0 (attention layers); flops_per_token : [FLOP/token] > 0;
    attention_flops_per_token : >= 0; state_bytes : [bytes] >= 0; peak_flops [FLOP/s] > 0; bandwidth [bytes/s] > 0

    Returns
    -------
    [tokens]: (F - 2 I* S_st) / (I* k - a) when both are > 0; 0 when F <= 2 I* S_st < ... (the state
    traffic alone keeps every batch memory-bound at every context); ``None`` (scalar) or ``inf``
    (array) when I* k <= a (the attention share alone reaches the ridge: no upper context).

    Raises
    ------
    InvalidValueError

    Notes
    -----
    The attention share sets c*: the smaller the attention layers' k against F, the longer c*;
    the state lowers it by 2 I* S_st / (I* k - a) tokens.

    Examples
    --------
    >>> hybrid_critical_context(kv_bytes_per_token=1, flops_per_token=10, attention_flops_per_token=0,
    ...     state_bytes=2, peak_flops=2, bandwidth=1)
    1.0
    """
    ridge = peak_flops / bandwidth
    num = flops_per_token - 2 * ridge * state_bytes
    den = ridge * kv_bytes_per_token - attention_flops_per_token
    if isinstance(num, np.ndarray) or isinstance(den, np.ndarray):
        num, den = np.broadcast_arrays(np.asarray(num, dtype=float), np.asarray(den, dtype=float))
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where((num > 0) & (den > 0), num / np.where(den > 0, den, 1), 0.0)
        return np.where(den <= 0, np.inf, value)
    if den <= 0:
        return None
    return num / den if num > 0 else 0


@formula(result="nonnegative", topic="hybrid", proof=_P, state_bytes="nonnegative", block_size="positive_int",
         kv_bytes_per_token="positive")
def hybrid_state_blocks(*, state_bytes: Any, block_size: Any, kv_bytes_per_token: Any) -> Any:
    """KV blocks one sequence's recurrent state takes in a hybrid's pool [blocks]: ceil(S_st / (b k)).

    Parameters
    ----------
    state_bytes : [bytes] >= 0; block_size : [tokens/block] int > 0; kv_bytes_per_token : [bytes/token] > 0

    Returns
    -------
    [blocks], int or array.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Hybrid models" (paging as vLLM V1's hybrid allocator: the state of a
    sequence occupies whole pages of the one pool the attention layers' KV blocks use).

    Examples
    --------
    >>> hybrid_state_blocks(state_bytes=39_518_208, block_size=16, kv_bytes_per_token=24_576)
    101
    """
    return ceil(state_bytes / (block_size * kv_bytes_per_token))


@formula(result="nonnegative", topic="hybrid", proof=_P, pool_blocks="nonnegative_int", context="positive_int",
         block_size="positive_int", state_blocks="nonnegative_int")
def hybrid_sequences_that_fit(*, pool_blocks: Any, context: Any, block_size: Any, state_blocks: Any) -> Any:
    """Sequences of c tokens a hybrid's pool of P blocks holds: floor(P / (ceil(c / b) + state blocks)).

    Parameters
    ----------
    pool_blocks : [blocks] int >= 0; context : [tokens] int > 0; block_size : [tokens/block] int > 0;
    state_blocks : [blocks] int >= 0 (:func:`hybrid_state_blocks`)

    Returns
    -------
    [sequences], int or array; :func:`roofline.formulas.sequences_that_fit_blocks` when state_blocks = 0.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> hybrid_sequences_that_fit(pool_blocks=1000, context=1000, block_size=16, state_blocks=101)
    6
    """
    return floor(pool_blocks / (ceil(context / block_size) + state_blocks))
