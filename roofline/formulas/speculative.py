"""Speculative decoding: tokens per step, the verification step, the speed-up, its critical batch.

Conventions (docs/conventions.md, "Speculative decoding"): a proposer offers k tokens per
sequence per step; the target verifies the k + 1 positions of each sequence in one step;
each proposed token is accepted with probability alpha, independently, and the first
rejection ends the run (Leviathan, Kalman and Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023). For B sequences at context c (the first new token's
context, as in a plain decode step):

* tokens per step per sequence = (1 - alpha^(k+1)) / (1 - alpha), k + 1 at alpha = 1
* bytes = W + k_kv B (c + k); FLOPs = B (k + 1) (F + a (c + k / 2))
* step time = max(bytes / BW, FLOPs / peak) + overhead + proposer time
* speed-up = tokens per step x plain step time / step time
* critical batch of the verification step: ceil(I* W / ((k + 1)(F + a (c + k / 2)) - I* k_kv (c + k)))
* memory-bound speed-up (the paper's Theorem 3.8): (1 - alpha^(k+1)) / ((1 - alpha)(1 + k r))

Derivations: ``roofline.symbolic.speculative``; proof: ``proofs/p18_speculative_decoding.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._core import ceil, formula, maximum
from .step_time import step_time

__all__ = [
    "speculative_tokens_per_step",
    "speculative_tokens_from_position",
    "speculative_step_time",
    "speculative_speedup",
    "speculative_intensity",
    "speculative_critical_batch",
    "speculative_speedup_memory_bound",
]

_P18 = "p18_speculative_decoding.py"
#: alpha^(k+1) of exact Fractions grows with k: tests draw k (and the rest) up to 24
_LIMIT = 24
_MODEL: dict[str, Any] = dict(weight_bytes="positive", kv_bytes_per_token="nonnegative",
                              flops_per_token="positive", attention_flops_per_token="nonnegative")
_STEP: dict[str, Any] = dict(batch="positive", context="nonnegative", speculative_tokens="nonnegative_int",
                             bandwidth="positive", peak_flops="positive", overhead="nonnegative",
                             proposer_time="nonnegative", **_MODEL)


@formula(result="positive", topic="speculative", proof=_P18, max_test_value=_LIMIT,
         speculative_tokens="nonnegative_int", acceptance_rate="share")
def speculative_tokens_per_step(*, speculative_tokens: Any, acceptance_rate: Any) -> Any:
    """Expected tokens one sequence gains per verification step [tokens/step].

    Parameters
    ----------
    speculative_tokens : [tokens], int >= 0 (k, proposed per sequence per step; 0 = plain decode)
    acceptance_rate : (0, 1] (alpha, each proposed token's acceptance probability, independent)

    Returns
    -------
    [tokens/step], in [1, k + 1]: sum_{i=0}^{k} alpha^i = (1 - alpha^(k+1)) / (1 - alpha), and k + 1
    at alpha = 1. Exact for Fractions.

    Raises
    ------
    InvalidValueError
        A negative or fractional k, or alpha outside (0, 1].

    Notes
    -----
    Leviathan, Kalman and Matias, ICML 2023, equation (1): the accepted run stops at the first
    rejection; the target's token there (or the bonus token after k acceptances) is always kept.

    Examples
    --------
    >>> from fractions import Fraction
    >>> speculative_tokens_per_step(speculative_tokens=2, acceptance_rate=Fraction(1, 2))
    Fraction(7, 4)
    """
    k, alpha = speculative_tokens, acceptance_rate
    if isinstance(alpha, np.ndarray) or isinstance(k, np.ndarray):
        alpha_b, k_b = np.broadcast_arrays(np.asarray(alpha), np.asarray(k))
        one = alpha_b == 1
        safe = np.where(one, 0.5, alpha_b)
        return np.where(one, k_b + 1, (1 - safe ** (k_b + 1)) / (1 - safe))
    if alpha == 1:
        return k + 1
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@formula(result="positive", topic="speculative", proof=_P18, acceptance_rate="share",
         tokens_after_position="positive")
def speculative_tokens_from_position(*, acceptance_rate: Any, tokens_after_position: Any) -> Any:
    """One position of the per-position acceptance fold: the expected tokens from position i on [tokens/step].

    Parameters
    ----------
    acceptance_rate : (0, 1] (alpha_i: proposal i accepted, given that every proposal before it was)
    tokens_after_position : [tokens] > 0 (T_{i+1}, the expected tokens from position i + 1 on given proposal i
        accepted; 1 after the last proposal: the bonus token)

    Returns
    -------
    [tokens/step]: T_i = 1 + alpha_i T_{i+1} (the target's token at position i is always kept; the rest
    follows only if proposal i is accepted). Folded from T_{k+1} = 1 back to T_1, it is the expected tokens
    per step 1 + sum_{i=1}^{k} prod_{j<=i} alpha_j (docs/conventions.md, "Speculative decoding": a
    per-position acceptance vector); with k equal rates, (1 - alpha^(k+1)) / (1 - alpha)
    (:func:`speculative_tokens_per_step`; proof p18). Exact for Fractions.

    Raises
    ------
    InvalidValueError
        alpha outside (0, 1], or T not positive.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t3 = speculative_tokens_from_position(acceptance_rate=Fraction(7, 10), tokens_after_position=1)
    >>> t2 = speculative_tokens_from_position(acceptance_rate=Fraction(8, 10), tokens_after_position=t3)
    >>> speculative_tokens_from_position(acceptance_rate=Fraction(9, 10), tokens_after_position=t2)
    Fraction(781, 250)
    """
    return 1 + acceptance_rate * tokens_after_position


def _verify(kw: dict[str, Any]) -> tuple[Any, Any]:
    """(bytes, FLOPs) of the verification step of B sequences at context c with k proposals each."""
    B, c, k = kw["batch"], kw["context"], kw["speculative_tokens"]
    bytes_ = kw["weight_bytes"] + kw["kv_bytes_per_token"] * B * (c + k)
    # position j of k + 1 attends over c + j tokens: sum_j (c + j) = (k + 1) c + k (k + 1) / 2, a whole k (k + 1) / 2
    flops = B * ((k + 1) * kw["flops_per_token"] + kw["attention_flops_per_token"] * ((k + 1) * c + k * (k + 1) // 2))
    return bytes_, flops


@formula(result="positive", topic="speculative", proof=_P18, max_test_value=_LIMIT, **_STEP)
def speculative_step_time(**kw: Any) -> Any:
    """One speculative step of B sequences: the proposer, then the verification of k + 1 positions each [s].

    Parameters
    ----------
    batch : [sequences], > 0
    context : [tokens], >= 0 (each sequence's context for its first new token, as in a plain decode step)
    speculative_tokens : [tokens], int >= 0 (k)
    weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops_per_token, bandwidth,
    peak_flops, overhead : as :func:`roofline.formulas.step_time`
    proposer_time : [s], >= 0 (the proposer's time for the batch's k proposals: a draft model's k
        decode steps, a head's, or 0 for n-gram lookup)

    Returns
    -------
    [s]: max((W + k_kv B (c + k)) / BW, B (k + 1)(F + a (c + k / 2)) / peak) + overhead + proposer time.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    The verification step is the mixed step of chunked prefill (docs/conventions.md, "Chunked
    prefill") with one chunk of k + 1 tokens after c - 1 cached tokens per sequence: the weights
    read once, each sequence's KV read once plus its k + 1 new tokens. With k = 0 and no proposer
    it is the plain decode step.

    Examples
    --------
    >>> speculative_step_time(batch=2, context=3, speculative_tokens=1, weight_bytes=100, kv_bytes_per_token=1,
    ...     flops_per_token=10, attention_flops_per_token=2, bandwidth=1, peak_flops=1, overhead=0, proposer_time=5)
    113.0
    """
    bytes_, flops = _verify(kw)
    return maximum(bytes_ / kw["bandwidth"], flops / kw["peak_flops"]) + kw["overhead"] + kw["proposer_time"]


@formula(result="positive", topic="speculative", proof=_P18, max_test_value=_LIMIT, acceptance_rate="share", **_STEP)
def speculative_speedup(**kw: Any) -> Any:
    """Speed-up of speculative decoding over plain decode at the same batch and context [1].

    Parameters
    ----------
    acceptance_rate : (0, 1] (alpha)
    the others : as :func:`speculative_step_time`

    Returns
    -------
    [1]: speculative_tokens_per_step x step_time(B, S = B c) / speculative_step_time; above 1 where
    speculation pays, below 1 where it costs.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    Both steps at the same contexts (docs/conventions.md, "Speculative decoding"); tokens per
    second scale by the same factor.

    Examples
    --------
    >>> from fractions import Fraction
    >>> speculative_speedup(batch=1, context=0, speculative_tokens=2, acceptance_rate=Fraction(1, 2),
    ...     weight_bytes=100, kv_bytes_per_token=0, flops_per_token=1, attention_flops_per_token=0,
    ...     bandwidth=1, peak_flops=1, overhead=0, proposer_time=0)
    1.75
    """
    tokens = speculative_tokens_per_step.unchecked(speculative_tokens=kw["speculative_tokens"],
                                                   acceptance_rate=kw["acceptance_rate"])
    plain = step_time.unchecked(
        batch=kw["batch"], context_sum=kw["batch"] * kw["context"], weight_bytes=kw["weight_bytes"],
        kv_bytes_per_token=kw["kv_bytes_per_token"], flops_per_token=kw["flops_per_token"],
        attention_flops_per_token=kw["attention_flops_per_token"], bandwidth=kw["bandwidth"],
        peak_flops=kw["peak_flops"], overhead=kw["overhead"])
    spec = speculative_step_time.unchecked(**{n: v for n, v in kw.items() if n != "acceptance_rate"})
    return tokens * plain / spec


@formula(result="positive", topic="speculative", proof=_P18, max_test_value=_LIMIT, batch="positive",
         context="nonnegative", speculative_tokens="nonnegative_int", **_MODEL)
def speculative_intensity(**kw: Any) -> Any:
    """Arithmetic intensity of the verification step [FLOP/byte].

    Parameters
    ----------
    batch, context, speculative_tokens, weight_bytes, kv_bytes_per_token, flops_per_token,
    attention_flops_per_token : as :func:`speculative_step_time`

    Returns
    -------
    [FLOP/byte]: B (k + 1)(F + a (c + k / 2)) / (W + k_kv B (c + k)); about k + 1 times the plain
    step's while the weights dominate the bytes.

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> speculative_intensity(batch=8, context=0, speculative_tokens=3, weight_bytes=2, kv_bytes_per_token=0,
    ...     flops_per_token=2, attention_flops_per_token=0)
    32.0
    """
    bytes_, flops = _verify(kw)
    return flops / bytes_


@formula(result="positive_int", topic="speculative", proof=_P18, none_when_infinite=True, max_test_value=_LIMIT,
         context="nonnegative", speculative_tokens="nonnegative_int", peak_flops="positive", bandwidth="positive",
         **_MODEL)
def speculative_critical_batch(**kw: Any) -> Any:
    """The smallest whole batch whose verification step is compute-bound [sequences].

    Parameters
    ----------
    context, speculative_tokens, weight_bytes, kv_bytes_per_token, flops_per_token,
    attention_flops_per_token : as :func:`speculative_step_time`
    peak_flops : [FLOP/s], > 0 (dense)
    bandwidth : [bytes/s], > 0

    Returns
    -------
    [sequences], int: ceil(I* W / ((k + 1)(F + a (c + k / 2)) - I* k_kv (c + k))), I* = peak / BW;
    ``None`` (scalar) or ``inf`` (array) where the step is memory-bound at every batch. About the
    plain critical batch / (k + 1) at short contexts.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    docs/conventions.md, "Critical batch" and "Speculative decoding". With k = 0 it is
    :func:`roofline.formulas.critical_batch`.

    Examples
    --------
    >>> critical = speculative_critical_batch(context=0, speculative_tokens=3, weight_bytes=2, kv_bytes_per_token=0,
    ...     flops_per_token=2, attention_flops_per_token=0, peak_flops=989.4e12, bandwidth=3.35e12)
    >>> critical
    74
    """
    ridge = kw["peak_flops"] / kw["bandwidth"]
    k, c = kw["speculative_tokens"], kw["context"]
    num = ridge * kw["weight_bytes"]
    den = ((k + 1) * kw["flops_per_token"] + kw["attention_flops_per_token"] * ((k + 1) * c + k * (k + 1) // 2)
           - ridge * kw["kv_bytes_per_token"] * (c + k))
    if isinstance(den, np.ndarray) or isinstance(num, np.ndarray):
        exists = np.asarray(den > 0)
        return np.where(exists, np.ceil(num / np.where(exists, den, 1)), np.inf)
    return ceil(num / den) if den > 0 else None


@formula(result="positive", topic="speculative", proof=_P18, max_test_value=_LIMIT,
         speculative_tokens="nonnegative_int", acceptance_rate="share", draft_cost_ratio="nonnegative")
def speculative_speedup_memory_bound(*, speculative_tokens: Any, acceptance_rate: Any, draft_cost_ratio: Any) -> Any:
    """Speed-up where both steps are bound by reading the weights [1].

    Parameters
    ----------
    speculative_tokens : [tokens], int >= 0 (k)
    acceptance_rate : (0, 1] (alpha)
    draft_cost_ratio : [1], >= 0 (r: the proposer's time per proposed token / a target step; 0 for n-gram)

    Returns
    -------
    [1]: (1 - alpha^(k+1)) / ((1 - alpha)(1 + k r)).

    Raises
    ------
    InvalidValueError

    Notes
    -----
    Leviathan, Kalman and Matias, ICML 2023, Theorem 3.8 (their gamma = k, c = r): the
    verification step costs one target step and the proposer k r of them. The k that maximises
    it solves d/dk = 0 (a Lambert W of branch -1; proofs/p18_speculative_decoding.py), and
    :func:`roofline.speculative.best_speculative_tokens` finds the whole k.

    Examples
    --------
    >>> from fractions import Fraction
    >>> speculative_speedup_memory_bound(speculative_tokens=3, acceptance_rate=Fraction(1, 2),
    ...     draft_cost_ratio=Fraction(1, 10))
    Fraction(75, 52)
    """
    tokens = speculative_tokens_per_step.unchecked(speculative_tokens=speculative_tokens,
                                                   acceptance_rate=acceptance_rate)
    return tokens / (1 + speculative_tokens * draft_cost_ratio)
