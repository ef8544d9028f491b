"""The estimate beside the bound: the bound's bytes and FLOPs with an engine's constants.

Conventions (docs/conventions.md, "Bound and estimate"): the **bound** is the roofline
step time of :mod:`roofline.formulas.step_time` (no efficiency factor, overhead 0 unless given); the
**estimate** is::

    max(bytes / (eta_bw x bandwidth), FLOPs / (eta_mm x peak)) + t_step + L x t_layer + B x t_seq

with eta_bw, eta_mm in (0, 1] (achieved shares of the datasheet bandwidth and dense
peak), t_step >= 0 [s] per step, t_layer >= 0 [s] per layer per step and t_seq >= 0 [s]
per running sequence per decode step (a prefill step has no B x t_seq term), each a named
constant of an engine profile with its source (:mod:`roofline.calibrate.fit`). At
eta_bw = eta_mm = 1 and t_step = t_layer = t_seq = 0 every estimate equals its bound.

Derivations: ``roofline.symbolic.fidelity`` (the bound with its constants substituted);
proof: ``proofs/p15_estimate.py``.
"""

from __future__ import annotations

from typing import Any

from ._core import formula
from .step_time import prefill_step_time, step_time

__all__ = ["estimated_step_time", "estimated_throughput", "estimated_prefill_step_time"]

_P15 = "p15_estimate.py"

_CONSTANTS: dict[str, Any] = dict(eta_bw="share", eta_mm="share", t_step="nonnegative", t_layer="nonnegative",
                                  num_hidden_layers="positive_int")
_SIZES: dict[str, Any] = dict(weight_bytes="positive", kv_bytes_per_token="nonnegative",
                              flops_per_token="positive", attention_flops_per_token="nonnegative",
                              bandwidth="positive", peak_flops="positive")
_DECODE: dict[str, Any] = dict(batch="positive", context_sum="nonnegative", t_seq="nonnegative", **_SIZES,
                               **_CONSTANTS)


def _bound_kw(kw: dict[str, Any]) -> dict[str, Any]:
    """The bound's keyword arguments with the estimate's constants folded into bandwidth, peak and overhead
    (a decode step's B x t_seq with them)."""
    out = {k: v for k, v in kw.items() if k not in _CONSTANTS and k != "t_seq"}
    out["bandwidth"] = kw["eta_bw"] * kw["bandwidth"]
    out["peak_flops"] = kw["eta_mm"] * kw["peak_flops"]
    out["overhead"] = kw["t_step"] + kw["num_hidden_layers"] * kw["t_layer"]
    if "t_seq" in kw:
        out["overhead"] = out["overhead"] + kw["batch"] * kw["t_seq"]
    return out


@formula(result="positive", topic="fidelity", proof=_P15, **_DECODE)
def estimated_step_time(**kw: Any) -> Any:
    """Decode step time, the estimate of an engine profile [s].

    Parameters
    ----------
    batch : [sequences], > 0
    context_sum : [tokens], >= 0 (sum of the batch's contexts, the new tokens' KV included)
    weight_bytes : [bytes], > 0
    kv_bytes_per_token : [bytes/token], >= 0
    flops_per_token : [FLOP/token], > 0
    attention_flops_per_token : [FLOP/(token x context token)], >= 0
    bandwidth : [bytes/s], > 0 (the datasheet figure the share eta_bw applies to)
    peak_flops : [FLOP/s], > 0 (the dense peak the share eta_mm applies to)
    eta_bw : [1], in (0, 1], achieved share of ``bandwidth``
    eta_mm : [1], in (0, 1], achieved share of ``peak_flops``
    t_step : [s], >= 0, fixed time per step
    t_layer : [s], >= 0, fixed time per layer per step
    t_seq : [s], >= 0, time per running sequence per step (CPU scheduling, sampling, detokenisation)
    num_hidden_layers : [layers], integer > 0

    Returns
    -------
    [s], scalar or the broadcast shape of the inputs.

    Raises
    ------
    InvalidValueError
        An argument outside its domain (an eta above 1 or not positive, a negative time).

    Notes
    -----
    max((W + k S) / (eta_bw BW), (B F + a S) / (eta_mm peak)) + t_step + L t_layer + B t_seq
    (docs/conventions.md, "Bound and estimate"). The bound is the case eta = 1, t = 0.

    Examples
    --------
    Llama 3.1 8B at batch 1 on H100 SXM (16,060,522,496 B of weights) at 80 % of the
    bandwidth, with 2 ms per step and no per-layer time: 4.794 ms / 0.8 + 2 ms.

    >>> t = estimated_step_time(batch=1, context_sum=0, weight_bytes=16_060_522_496, kv_bytes_per_token=0,
    ...     flops_per_token=16_060_522_496, attention_flops_per_token=0, bandwidth=3_350_000_000_000,
    ...     peak_flops=989_400_000_000_000, eta_bw=0.8, eta_mm=0.8, t_step=0.002, t_layer=0, t_seq=0,
    ...     num_hidden_layers=32)
    >>> round(t * 1e3, 3)
    7.993

    The same at batch 8 with 0.17 ms per running sequence: 1.36 ms more.

    >>> t8 = estimated_step_time(batch=8, context_sum=0, weight_bytes=16_060_522_496, kv_bytes_per_token=0,
    ...     flops_per_token=16_060_522_496, attention_flops_per_token=0, bandwidth=3_350_000_000_000,
    ...     peak_flops=989_400_000_000_000, eta_bw=0.8, eta_mm=0.8, t_step=0.002, t_layer=0, t_seq=0.00017,
    ...     num_hidden_layers=32)
    >>> round((t8 - t) * 1e3, 3)
    1.36
    """
    return step_time.unchecked(**_bound_kw(kw))


@formula(result="positive", topic="fidelity", proof=_P15, **_DECODE)
def estimated_throughput(**kw: Any) -> Any:
    """Decode throughput under the estimate [tokens/s]: batch / :func:`estimated_step_time`.

    Parameters and Raises as :func:`estimated_step_time`.

    Returns
    -------
    [tokens/s], scalar or broadcast shape.

    Examples
    --------
    >>> round(estimated_throughput(batch=8, context_sum=0, weight_bytes=2, kv_bytes_per_token=0,
    ...     flops_per_token=1, attention_flops_per_token=0, bandwidth=1, peak_flops=8,
    ...     eta_bw=0.5, eta_mm=1, t_step=0, t_layer=0, t_seq=0, num_hidden_layers=1), 3)
    2.0
    """
    return kw["batch"] / estimated_step_time.unchecked(**kw)


@formula(result="positive", topic="fidelity", proof=_P15, prefill_tokens="nonnegative",
         attention_pairs="nonnegative", **_SIZES, **_CONSTANTS)
def estimated_prefill_step_time(**kw: Any) -> Any:
    """Prefill step time under the estimate [s]: the prefill bound with an engine's constants.

    Parameters
    ----------
    weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops_per_token,
    bandwidth, peak_flops, eta_bw, eta_mm, t_step, t_layer, num_hidden_layers :
        as :func:`estimated_step_time`
    prefill_tokens : [tokens], >= 0 (padding included)
    attention_pairs : [token pairs], >= 0 (causal query-key pairs)

    No t_seq: a prefill step has no count of running sequences (docs/conventions.md, "Bound and
    estimate").

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError

    Notes
    -----
    max((W + k T) / (eta_bw BW), (T F + a Q) / (eta_mm peak)) + t_step + L t_layer.
    A prefill is compute-bound for long prompts, so eta_mm matters here where it rarely
    does in decode.

    Examples
    --------
    >>> estimated_prefill_step_time(weight_bytes=100, kv_bytes_per_token=0, flops_per_token=10,
    ...     attention_flops_per_token=0, prefill_tokens=100, attention_pairs=0, bandwidth=1, peak_flops=1,
    ...     eta_bw=1, eta_mm=0.5, t_step=1, t_layer=0, num_hidden_layers=2)
    2001.0
    """
    return prefill_step_time.unchecked(**_bound_kw(kw))
