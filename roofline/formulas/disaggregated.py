"""Disaggregated prefill and decode: the KV transfer between the prefill and the decode pool.

Conventions (docs/conventions.md, "Disaggregated prefill and decode"): a request's KV moves when
its prefill ends; every GPU has its own NIC and all of them move their shares at once, so the
transfer is set by the busiest NIC, P k_d max(1, T_d / T_p) bytes (k_d: the KV bytes per token one
decode GPU holds; T_p, T_d: the two tensor-parallel sizes), and takes bytes / bandwidth + latency. Derivations:
``roofline.symbolic.disaggregated``; proof: ``proofs/p22_disaggregated.py``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ._core import _is_array, formula, maximum

__all__ = ["kv_transfer_bytes", "kv_transfer_time"]

_P22 = "p22_disaggregated.py"


@formula(result="nonnegative", topic="disaggregated", proof=_P22, prompt_tokens="nonnegative_int",
         decode_kv_bytes_per_token="nonnegative", prefill_tensor_parallel_size="positive_int",
         decode_tensor_parallel_size="positive_int")
def kv_transfer_bytes(*, prompt_tokens: Any, decode_kv_bytes_per_token: Any, prefill_tensor_parallel_size: Any,
                      decode_tensor_parallel_size: Any) -> Any:
    """KV bytes the busiest NIC moves for one request's transfer [bytes]: P k_d max(1, T_d / T_p).

    Each of the T_d decode GPUs receives the KV it will hold, P k_d (the decode side's layout: its
    share of the KV heads, one head per GPU when T_d exceeds them, the whole latent for MLA); the T_p
    prefill GPUs send those T_d P k_d bytes between them evenly, T_d P k_d / T_p each. Equal sizes give
    P k / T; T_p = 2 to T_d = 4: each prefill GPU sends to two decode GPUs, P k / 2 through its NIC
    (docs/conventions.md, "Disaggregated prefill and decode").

    Parameters
    ----------
    prompt_tokens : [tokens] int >= 0 (P)
    decode_kv_bytes_per_token : [bytes/token] >= 0 (k_d, one decode GPU's share)
    prefill_tensor_parallel_size : [GPUs] int >= 1 (T_p)
    decode_tensor_parallel_size : [GPUs] int >= 1 (T_d)

    Returns
    -------
    [bytes], scalar or broadcast shape; exact for int and Fraction inputs (an int when T_p divides
    T_d k_d, else a Fraction).

    Raises
    ------
    InvalidValueError
        A negative value or a count that is not a positive integer.

    Examples
    --------
    >>> kv_transfer_bytes(prompt_tokens=1000, decode_kv_bytes_per_token=163840, prefill_tensor_parallel_size=2,
    ...                   decode_tensor_parallel_size=2)
    163840000
    """
    tp, td = prefill_tensor_parallel_size, decode_tensor_parallel_size
    if isinstance(tp, int) and isinstance(td, int) and not _is_array(tp, td):
        share = Fraction(td, tp)
        ratio: Any = int(share) if share.denominator == 1 else share
    else:
        ratio = td / tp
    return prompt_tokens * decode_kv_bytes_per_token * maximum(1, ratio)


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
