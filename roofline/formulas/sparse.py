"""DeepSeek sparse attention (DeepSeek-V3.2): a step's bytes, FLOPs and time, and the critical context.

DeepSeek-V3.2 (arXiv:2512.02556, "DeepSeek Sparse Attention") keeps every cached token's MLA
latent and a small indexer key in each layer; a decode query at context c scores all c keys with
the lightning indexer and attends over the K = ``index_topk`` best latent entries
(docs/conventions.md, "Sparse attention"). Rates below are summed over the layers: k_m latent
bytes, k_i indexer-key bytes, a_m attention FLOPs, a_i indexer FLOPs per token. For B rows with
contexts summing to S and capped contexts min(c_i, K) summing to R:

* one query reads k_m min(c, K) + k_i c bytes and spends a_m min(c, K) + a_i c FLOPs;
* a decode step moves W + k_m R + k_i S bytes and B F + a_m R + a_i S FLOPs, and takes their
  roofline max + t0; past c = K only the indexer's part grows with the context;
* a mixed step (chunked prefill) reads its cached prompt whole, writes T tokens' latents and
  keys, and its queries attend Q_K = sum min(t, K) pairs (:func:`window_attention_pairs` at
  w = K) beside the indexer's Q causal pairs;
* c* (above it no batch is compute-bound) is where the intensity limit meets the ridge.

Derivations: :mod:`roofline.symbolic.sparse`; proof: ``proofs/p24_sparse_attention.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._core import formula, maximum, minimum

__all__ = ["sparse_read_bytes", "sparse_attention_flops", "sparse_decode_bytes", "sparse_decode_flops",
           "sparse_step_time", "sparse_mixed_step_time", "sparse_critical_context"]

_P = "p24_sparse_attention.py"
_RATES: dict[str, Any] = dict(latent_bytes_per_token="nonnegative", index_bytes_per_token="nonnegative")
_FLOPS: dict[str, Any] = dict(latent_attention_flops_per_token="nonnegative", index_flops_per_token="nonnegative")


def _capped_le(**kw: Any) -> Any:
    return (kw["capped_context_sum"] <= kw["context_sum"]) & (kw["capped_context_sum"] >= 0)


_REQ_R = ("capped_context_sum", "capped_context_sum <= context_sum (each min(c_i, K) is at most c_i)", _capped_le)


@formula(result="nonnegative", topic="sparse", proof=_P, context="nonnegative", index_topk="positive_int", **_RATES)
def sparse_read_bytes(*, context: Any, index_topk: Any, latent_bytes_per_token: Any, index_bytes_per_token: Any) -> Any:
    """KV bytes one decode query reads under DeepSeek sparse attention [bytes]: k_m min(c, K) + k_i c.

    Parameters
    ----------
    context : [tokens] >= 0 (c, the new token included)
    index_topk : [tokens] int >= 1 (K, ``index_topk`` of the config: 2,048 on DeepSeek-V3.2)
    latent_bytes_per_token : [bytes/token] >= 0 (k_m: L x (kv_lora_rank + qk_rope_head_dim) x KV bytes)
    index_bytes_per_token : [bytes/token] >= 0 (k_i: L x :attr:`roofline.ModelConfig.index_key_bytes`)

    Returns
    -------
    [bytes], scalar or broadcast shape; what the sequence *holds* is (k_m + k_i) c.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Sparse attention" (the indexer reads every cached key; the attention
    reads only the K selected latents).

    Examples
    --------
    DeepSeek-V3.2 (61 layers, 1,152 latent bytes and 132 indexer-key bytes per token-layer) at 4,096 tokens:

    >>> sparse_read_bytes(context=4096, index_topk=2048, latent_bytes_per_token=61 * 1152,
    ...                   index_bytes_per_token=61 * 132)
    176898048
    """
    return latent_bytes_per_token * minimum(context, index_topk) + index_bytes_per_token * context


@formula(result="nonnegative", topic="sparse", proof=_P, context="nonnegative", index_topk="positive_int", **_FLOPS)
def sparse_attention_flops(*, context: Any, index_topk: Any, latent_attention_flops_per_token: Any,
                           index_flops_per_token: Any) -> Any:
    """Attention FLOPs of one decode query under DeepSeek sparse attention [FLOP]: a_m min(c, K) + a_i c.

    Parameters
    ----------
    context : [tokens] >= 0; index_topk : [tokens] int >= 1
    latent_attention_flops_per_token : [FLOP/token^2] >= 0 (a_m: L x H (2 (r + d_rope) + 2 r), MLA absorbed)
    index_flops_per_token : [FLOP/token^2] >= 0 (a_i: L x 2 x index_n_heads x index_head_dim)

    Returns
    -------
    [FLOP], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    The indexer's ReLU, per-head weights and top-k selection are not counted, as softmax is not
    (docs/conventions.md, "Sparse attention").

    Examples
    --------
    >>> sparse_attention_flops(context=10, index_topk=4, latent_attention_flops_per_token=3, index_flops_per_token=1)
    22
    """
    return latent_attention_flops_per_token * minimum(context, index_topk) + index_flops_per_token * context


_STEP: dict[str, Any] = dict(batch="positive", context_sum="nonnegative", capped_context_sum="nonnegative",
                             weight_bytes="positive", **_RATES)


@formula(result="positive", topic="sparse", proof=_P, requires=_REQ_R,
         **{k: v for k, v in _STEP.items() if k != "batch"})
def sparse_decode_bytes(*, context_sum: Any, capped_context_sum: Any, weight_bytes: Any,
                        latent_bytes_per_token: Any, index_bytes_per_token: Any) -> Any:
    """Bytes a decode step moves under DeepSeek sparse attention [bytes]: W + k_m R + k_i S.

    Parameters
    ----------
    context_sum : [tokens] >= 0 (S = sum c_i)
    capped_context_sum : [tokens] >= 0, at most S (R = sum min(c_i, K))
    weight_bytes : [bytes] > 0; latent_bytes_per_token, index_bytes_per_token : [bytes/token] >= 0

    Returns
    -------
    [bytes], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A bad argument, or R > S.

    Examples
    --------
    >>> sparse_decode_bytes(context_sum=10, capped_context_sum=8, weight_bytes=100,
    ...                     latent_bytes_per_token=3, index_bytes_per_token=1)
    134
    """
    return weight_bytes + latent_bytes_per_token * capped_context_sum + index_bytes_per_token * context_sum


@formula(result="positive", topic="sparse", proof=_P, requires=_REQ_R, batch="positive", context_sum="nonnegative",
         capped_context_sum="nonnegative", flops_per_token="positive", **_FLOPS)
def sparse_decode_flops(*, batch: Any, context_sum: Any, capped_context_sum: Any, flops_per_token: Any,
                        latent_attention_flops_per_token: Any, index_flops_per_token: Any) -> Any:
    """FLOPs of a decode step under DeepSeek sparse attention [FLOP]: B F + a_m R + a_i S.

    Parameters
    ----------
    batch : [sequences] > 0; context_sum, capped_context_sum : [tokens] as :func:`sparse_decode_bytes`
    flops_per_token : [FLOP/token] > 0 (matmuls, the indexer's projections included)
    latent_attention_flops_per_token, index_flops_per_token : [FLOP/token^2] >= 0

    Returns
    -------
    [FLOP], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> sparse_decode_flops(batch=2, context_sum=10, capped_context_sum=8, flops_per_token=5,
    ...                     latent_attention_flops_per_token=2, index_flops_per_token=1)
    36
    """
    return (batch * flops_per_token + latent_attention_flops_per_token * capped_context_sum
            + index_flops_per_token * context_sum)


@formula(result="positive", topic="sparse", proof=_P, requires=_REQ_R, flops_per_token="positive",
         bandwidth="positive", peak_flops="positive", overhead="nonnegative", **_STEP, **_FLOPS)
def sparse_step_time(*, batch: Any, context_sum: Any, capped_context_sum: Any, weight_bytes: Any,
                     latent_bytes_per_token: Any, index_bytes_per_token: Any, flops_per_token: Any,
                     latent_attention_flops_per_token: Any, index_flops_per_token: Any, bandwidth: Any,
                     peak_flops: Any, overhead: Any) -> Any:
    """A decode step's time under DeepSeek sparse attention, roofline bound with perfect overlap [s].

    Parameters
    ----------
    As :func:`sparse_decode_bytes` and :func:`sparse_decode_flops`; bandwidth [bytes/s] > 0,
    peak_flops [FLOP/s] > 0 (dense), overhead [s] >= 0.

    Returns
    -------
    [s]: max((W + k_m R + k_i S) / BW, (B F + a_m R + a_i S) / peak) + t0. With every c_i <= K
    (R = S) it is :func:`roofline.formulas.step_time` at k = k_m + k_i, a = a_m + a_i.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> sparse_step_time(batch=2, context_sum=10, capped_context_sum=8, weight_bytes=100, latent_bytes_per_token=3,
    ...     index_bytes_per_token=1, flops_per_token=5, latent_attention_flops_per_token=2, index_flops_per_token=1,
    ...     bandwidth=2, peak_flops=1, overhead=0)
    67.0
    """
    memory = sparse_decode_bytes.unchecked(
        context_sum=context_sum, capped_context_sum=capped_context_sum, weight_bytes=weight_bytes,
        latent_bytes_per_token=latent_bytes_per_token, index_bytes_per_token=index_bytes_per_token) / bandwidth
    compute = sparse_decode_flops.unchecked(
        batch=batch, context_sum=context_sum, capped_context_sum=capped_context_sum, flops_per_token=flops_per_token,
        latent_attention_flops_per_token=latent_attention_flops_per_token,
        index_flops_per_token=index_flops_per_token) / peak_flops
    return maximum(memory, compute) + overhead


def _mixed_ok(**kw: Any) -> Any:
    return (kw["capped_context_sum"] <= kw["context_sum"]) & (kw["capped_attention_pairs"] <= kw["attention_pairs"])


@formula(result="positive", topic="sparse", proof=_P, requires=(
    "capped_attention_pairs", "capped_context_sum <= context_sum and capped_attention_pairs <= attention_pairs",
    _mixed_ok), decode_rows="nonnegative", context_sum="nonnegative", capped_context_sum="nonnegative",
    prefill_tokens="nonnegative", cached_tokens="nonnegative", attention_pairs="nonnegative",
    capped_attention_pairs="nonnegative", weight_bytes="positive", flops_per_token="positive", bandwidth="positive",
    peak_flops="positive", overhead="nonnegative", **_RATES, **_FLOPS)
def sparse_mixed_step_time(*, decode_rows: Any, context_sum: Any, capped_context_sum: Any, prefill_tokens: Any,
                           cached_tokens: Any, attention_pairs: Any, capped_attention_pairs: Any, weight_bytes: Any,
                           latent_bytes_per_token: Any, index_bytes_per_token: Any, flops_per_token: Any,
                           latent_attention_flops_per_token: Any, index_flops_per_token: Any, bandwidth: Any,
                           peak_flops: Any, overhead: Any) -> Any:
    """A mixed (chunked-prefill) or prefill step's time under DeepSeek sparse attention [s].

    Parameters
    ----------
    decode_rows : [rows] >= 0 (D); context_sum, capped_context_sum : the decode rows' S and R [tokens]
    prefill_tokens : [tokens] >= 0 (T, the step's prompt tokens); cached_tokens : [tokens] >= 0 (p0, summed
    over its chunks); attention_pairs : [token pairs] >= 0 (Q, causal: the indexer's);
    capped_attention_pairs : [token pairs] >= 0, at most Q (Q_K = sum min(t, K):
    :func:`roofline.formulas.window_attention_pairs` at sliding_window = K)
    weight_bytes, the rates, flops_per_token, bandwidth, peak_flops, overhead : as :func:`sparse_step_time`

    Returns
    -------
    [s]: max((W + k_m (R + p0) + k_i (S + p0) + (k_m + k_i) T) / BW,
    ((D + T) F + a_m (R + Q_K) + a_i (S + Q)) / peak) + t0; at T = 0 :func:`sparse_step_time`.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    A chunk's queries together select up to all p0 cached latents, so the chunk is priced reading
    the whole cached prompt (as a dense chunk does); its FLOPs use the cap (docs/conventions.md,
    "Sparse attention").

    Examples
    --------
    >>> sparse_mixed_step_time(decode_rows=0, context_sum=0, capped_context_sum=0, prefill_tokens=10,
    ...     cached_tokens=0, attention_pairs=55, capped_attention_pairs=34, weight_bytes=100,
    ...     latent_bytes_per_token=3, index_bytes_per_token=1, flops_per_token=5,
    ...     latent_attention_flops_per_token=2, index_flops_per_token=1, bandwidth=1, peak_flops=1, overhead=0)
    173.0
    """
    memory = (weight_bytes + latent_bytes_per_token * (capped_context_sum + cached_tokens)
              + index_bytes_per_token * (context_sum + cached_tokens)
              + (latent_bytes_per_token + index_bytes_per_token) * prefill_tokens) / bandwidth
    compute = ((decode_rows + prefill_tokens) * flops_per_token
               + latent_attention_flops_per_token * (capped_context_sum + capped_attention_pairs)
               + index_flops_per_token * (context_sum + attention_pairs)) / peak_flops
    return maximum(memory, compute) + overhead


@formula(result="nonnegative", topic="sparse", proof=_P, none_when_infinite=True, index_topk="positive_int",
         flops_per_token="positive", peak_flops="positive", bandwidth="positive", **_RATES, **_FLOPS)
def sparse_critical_context(*, index_topk: Any, latent_bytes_per_token: Any, index_bytes_per_token: Any,
                            flops_per_token: Any, latent_attention_flops_per_token: Any, index_flops_per_token: Any,
                            peak_flops: Any, bandwidth: Any) -> Any:
    """Critical context c* under DeepSeek sparse attention: above it no batch is compute-bound [tokens].

    Parameters
    ----------
    index_topk : [tokens] int >= 1; the rates : as :func:`sparse_read_bytes` and :func:`sparse_attention_flops`
    flops_per_token : [FLOP/token] > 0; peak_flops : [FLOP/s] > 0; bandwidth : [bytes/s] > 0

    Returns
    -------
    [tokens]: F / (I* (k_m + k_i) - a_m - a_i) where that denominator is > 0 and the root is at most K
    (the dense MLA c* of the summed rates); else max(K, (F + K (a_m - I* k_m)) / (I* k_i - a_i));
    ``None`` (scalar) or ``inf`` (array) when I* k_i <= a_i (the indexer alone keeps the limit above
    the ridge: no upper context). I* = peak / BW.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    Two parts: up to K the limit falls as the dense one does; past K the latent read is fixed and
    only the indexer's k_i c grows, so c* lies much further out (docs/conventions.md, "Sparse attention").

    Examples
    --------
    >>> sparse_critical_context(index_topk=4, latent_bytes_per_token=3, index_bytes_per_token=1, flops_per_token=80,
    ...     latent_attention_flops_per_token=0, index_flops_per_token=0, peak_flops=2, bandwidth=1)
    28.0
    """
    ridge = peak_flops / bandwidth
    den1 = ridge * (latent_bytes_per_token + index_bytes_per_token) - latent_attention_flops_per_token \
        - index_flops_per_token
    den2 = ridge * index_bytes_per_token - index_flops_per_token
    num2 = flops_per_token + index_topk * (latent_attention_flops_per_token - ridge * latent_bytes_per_token)
    arrays = [np.asarray(v, dtype=float) for v in (den1, den2, num2, flops_per_token, index_topk)]
    if any(isinstance(v, np.ndarray) for v in (den1, den2, num2, flops_per_token, index_topk)):
        d1, d2, n2, fl, k = np.broadcast_arrays(*arrays)
        with np.errstate(divide="ignore", invalid="ignore"):
            c1 = fl / np.where(d1 > 0, d1, 1)
            c2 = np.maximum(n2 / np.where(d2 > 0, d2, 1), k)
        return np.where((d1 > 0) & (c1 <= k), c1, np.where(d2 <= 0, np.inf, c2))
    if den1 > 0 and flops_per_token / den1 <= index_topk:
        return flops_per_token / den1
    if den2 <= 0:
        return None
    return maximum(num2 / den2, index_topk)
