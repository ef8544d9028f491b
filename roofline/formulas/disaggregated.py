"""Disaggregated prefill and decode: the KV transfer between the prefill and the decode pool.

Conventions (docs/conventions.md, "Disaggregated prefill and decode"): a request's KV moves when
its prefill ends; every GPU has its own NIC and all of them move their shares at once, so the
transfer is set by the busiest NIC, P x max(k_p, k_d) bytes (k_p, k_d: the KV bytes per token one
GPU of each side holds), and takes bytes / bandwidth + latency. Derivations:
``roofline.symbolic.disaggregated``; proof: ``proofs/p22_disaggregated.py``.
"""

from __future__ import annotations

from typing import Any

from ._core import formula, maximum

__all__ = ["kv_transfer_bytes", "kv_transfer_time"]

_P22 = "p22_disaggregated.py"


@formula(result="nonnegative", topic="disaggregated", proof=_P22, prompt_tokens="nonnegative_int",
         prefill_kv_bytes_per_token="nonnegative", decode_kv_bytes_per_token="nonnegative")
def kv_transfer_bytes(*, prompt_tokens: Any, prefill_kv_bytes_per_token: Any, decode_kv_bytes_per_token: Any) -> Any:
    """KV bytes the busiest NIC moves for one request's transfer [bytes]: P max(k_p, k_d).

    A prefill GPU sends the KV it holds of the P prompt tokens, a decode GPU receives the KV it will
    hold; with equal tensor-parallel sizes both are P k / T; a change of T is priced by the side
    whose GPUs hold more of each token (docs/conventions.md, "Disaggregated prefill and decode").

    Parameters
    ----------
    prompt_tokens : [tokens] int >= 0 (P)
    prefill_kv_bytes_per_token : [bytes/token] >= 0 (k_p, one prefill GPU's share)
    decode_kv_bytes_per_token : [bytes/token] >= 0 (k_d, one decode GPU's share)

    Returns
    -------
    [bytes], scalar or broadcast shape; exact for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A negative value or a non-integer token count.

    Examples
    --------
    >>> kv_transfer_bytes(prompt_tokens=1000, prefill_kv_bytes_per_token=163840, decode_kv_bytes_per_token=163840)
    163840000
    """
    return prompt_tokens * maximum(prefill_kv_bytes_per_token, decode_kv_bytes_per_token)


@formula(result="nonnegative", topic="disaggregated", proof=_P22, transfer_bytes="nonnegative",
         transfer_bandwidth="positive", transfer_latency="nonnegative")
def kv_transfer_time(*, transfer_bytes: Any, transfer_bandwidth: Any, transfer_latency: Any) -> Any:
    """Time of one request's KV transfer between the pools [s]: M_kv / beta_n + alpha_n.

    Parameters
    ----------
    transfer_bytes : [bytes] >= 0 (M_kv, :func:`kv_transfer_bytes`)
    transfer_bandwidth : [bytes/s] > 0 (beta_n, per GPU per direction: the NIC,
        :attr:`roofline.Accelerator.network`, or a value given by the user)
    transfer_latency : [s] >= 0 (alpha_n)

    Returns
    -------
    [s], scalar or broadcast shape; exact for Fraction inputs (or an int over a Fraction). The transfers of different
    requests do not slow each other (no contention is modelled).

    Raises
    ------
    InvalidValueError
        A negative value, or a bandwidth that is not positive.

    Examples
    --------
    >>> from fractions import Fraction
    >>> kv_transfer_time(transfer_bytes=Fraction(163840000), transfer_bandwidth=50 * 10**9,
    ...                  transfer_latency=Fraction(5, 10**6))  # [s]: 3.2768 ms + 5 us
    Fraction(16409, 5000000)
    """
    return transfer_bytes / transfer_bandwidth + transfer_latency
