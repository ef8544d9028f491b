"""Mixture of experts: expected experts touched, the bytes a decode step reads, intensity, compute margin.

Conventions (docs/conventions.md, "Architectures"): under
uniform independent routing, B tokens each picking k of E experts touch
E (1 - (1 - k/E)^B) distinct experts in expectation (k at B = 1, tending to E). A decode
step of B sequences at context c reads ``shared_weight_bytes`` (every weight but the
routed experts) + ``routed_expert_bytes`` (one expert summed over the MoE layers) x
experts touched + KV; its FLOPs use the active parameters (k routed + shared experts).

Derivations (an expectation of a sum of indicators): ``roofline.symbolic.moe``; proof:
``proofs/p09_moe.py``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ._core import formula

__all__ = ["experts_touched", "moe_decode_weight_bytes", "moe_arithmetic_intensity", "moe_compute_margin"]

_P9 = "p09_moe.py"
_K_LE_E = ("experts_per_token", "experts_per_token <= num_experts",
           lambda **kw: np.asarray(kw["experts_per_token"]) <= np.asarray(kw["num_experts"]))
_ROUTING: dict[str, Any] = dict(num_experts="positive_int", experts_per_token="positive_int", batch="positive_int")


#: Largest batch for which (1 - k/E)^B is raised exactly as a Fraction; above it the power is taken in
#: floating point (it is then below 2^-90 for every k/E >= 1/1024) and converted back to a Fraction.
EXACT_BATCH_LIMIT = 1 << 16


def _miss(num_experts: Any, experts_per_token: Any) -> Any:
    """(E - k) / E, exact for Python ints."""
    if isinstance(num_experts, int) and isinstance(experts_per_token, int):
        return Fraction(num_experts - experts_per_token, num_experts)
    return (num_experts - experts_per_token) / num_experts


@formula(result="positive", topic="moe", proof=_P9, max_test_value=40, requires=_K_LE_E, **_ROUTING)
def experts_touched(*, num_experts: Any, experts_per_token: Any, batch: Any) -> Any:
    """Expected distinct routed experts B tokens touch in one MoE layer, uniform routing [experts].

    Parameters
    ----------
    num_experts : int > 0, E routed experts per MoE layer
    experts_per_token : int in [1, E], k
    batch : int > 0 [tokens] (a decode step: one token per sequence)

    Returns
    -------
    [experts], E (1 - (1 - k/E)^B): exact Fraction for ints up to B = ``EXACT_BATCH_LIMIT``
    (65,536; above it the power is taken in floating point, where it has converged to
    within float rounding of 0, so that a huge batch never hangs); k at B = 1; rises with
    B towards E; between k and min(E, k B).

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive argument, or k > E.

    Examples
    --------
    >>> experts_touched(num_experts=8, experts_per_token=2, batch=1)
    Fraction(2, 1)
    >>> float(experts_touched(num_experts=8, experts_per_token=2, batch=16))
    7.919...
    """
    miss = _miss(num_experts, experts_per_token)
    if isinstance(miss, Fraction) and isinstance(batch, int) and batch > EXACT_BATCH_LIMIT:
        return num_experts * (1 - Fraction(float(miss) ** batch))
    return num_experts * (1 - miss**batch)


@formula(result="positive", topic="moe", proof=_P9, max_test_value=40, requires=_K_LE_E, shared_weight_bytes="positive",
         routed_expert_bytes="nonnegative", **_ROUTING)
def moe_decode_weight_bytes(
    *, shared_weight_bytes: Any, routed_expert_bytes: Any, num_experts: Any, experts_per_token: Any, batch: Any
) -> Any:
    """Weight bytes a decode step of B sequences reads from a MoE model, uniform routing [bytes].

    Parameters
    ----------
    shared_weight_bytes : [bytes] > 0, every weight but the routed experts
    routed_expert_bytes : [bytes] >= 0, one routed expert summed over the MoE layers
    num_experts, experts_per_token, batch : as :func:`experts_touched`

    Returns
    -------
    [bytes], W_s + X x E (1 - (1 - k/E)^B).

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> moe_decode_weight_bytes(shared_weight_bytes=10, routed_expert_bytes=4, num_experts=8,
    ...                         experts_per_token=2, batch=1)
    Fraction(18, 1)
    """
    return shared_weight_bytes + routed_expert_bytes * experts_touched.unchecked(
        num_experts=num_experts, experts_per_token=experts_per_token, batch=batch)


_STEP: dict[str, Any] = dict(context="nonnegative", shared_weight_bytes="positive", routed_expert_bytes="nonnegative",
                             kv_bytes_per_token="nonnegative", flops_per_token="positive",
                             attention_flops_per_token="nonnegative", **_ROUTING)


def _flops_bytes(kw: dict[str, Any]) -> tuple[Any, Any]:
    b, c = kw["batch"], kw["context"]
    flops = b * kw["flops_per_token"] + kw["attention_flops_per_token"] * b * c
    nbytes = moe_decode_weight_bytes.unchecked(
        shared_weight_bytes=kw["shared_weight_bytes"], routed_expert_bytes=kw["routed_expert_bytes"],
        num_experts=kw["num_experts"], experts_per_token=kw["experts_per_token"], batch=b,
    ) + kw["kv_bytes_per_token"] * b * c
    return flops, nbytes


@formula(result="positive", topic="moe", proof=_P9, max_test_value=40, requires=_K_LE_E, **_STEP)
def moe_arithmetic_intensity(**kw: Any) -> Any:
    """Arithmetic intensity of a MoE decode step of B sequences at context c [FLOP/byte].

    Parameters
    ----------
    batch : int > 0 [sequences]; context : [tokens] >= 0
    shared_weight_bytes, routed_expert_bytes : [bytes] (see :func:`moe_decode_weight_bytes`)
    num_experts, experts_per_token : E and k
    kv_bytes_per_token : [bytes/token] >= 0
    flops_per_token : [FLOP/token] > 0 (2 x active matmul parameters)
    attention_flops_per_token : [FLOP/(token x context token)] >= 0

    Returns
    -------
    [FLOP/byte]: (B F + a B c) / (W_s + X E (1 - (1 - k/E)^B) + k B c).

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> moe_arithmetic_intensity(batch=1, context=0, shared_weight_bytes=2, routed_expert_bytes=1,
    ...     num_experts=4, experts_per_token=2, kv_bytes_per_token=0, flops_per_token=4,
    ...     attention_flops_per_token=0)
    Fraction(1, 1)
    """
    flops, nbytes = _flops_bytes(kw)
    return flops / nbytes


@formula(topic="moe", proof=_P9, max_test_value=40, requires=_K_LE_E, peak_flops="positive", bandwidth="positive",
         **_STEP)
def moe_compute_margin(**kw: Any) -> Any:
    """Compute time minus memory time of a MoE decode step [s]: >= 0 iff the step is compute-bound.

    Parameters
    ----------
    As :func:`moe_arithmetic_intensity`, plus peak_flops [FLOP/s] > 0 and bandwidth [bytes/s] > 0.

    Returns
    -------
    [s]: (B F + a B c) / peak - (W_s + X E (1 - (1 - k/E)^B) + k B c) / BW; convex in B,
    negative at B = 0 (``roofline.symbolic.moe``).

    Raises
    ------
    InvalidValueError

    Examples
    --------
    >>> from fractions import Fraction
    >>> moe_compute_margin(batch=1, context=0, shared_weight_bytes=2, routed_expert_bytes=1,
    ...     num_experts=4, experts_per_token=2, kv_bytes_per_token=0, flops_per_token=4,
    ...     attention_flops_per_token=0, peak_flops=Fraction(1), bandwidth=Fraction(1))
    Fraction(0, 1)
    """
    flops, nbytes = _flops_bytes(kw)
    return flops / kw["peak_flops"] - nbytes / kw["bandwidth"]
