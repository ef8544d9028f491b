"""Closed-loop serving (Little's law): the request rate of N clients with latency E and think time Z.

Conventions (docs/conventions.md, "Workloads"): each of N clients sends its next request
when its previous one is handed back, plus a think time Z; over whole client cycles
(Little's law) the rate is N / (E + Z) requests per second, E the mean end-to-end latency.
Derivation: ``roofline.symbolic.serving``; proof: ``proofs/p10_chunked_prefill.py``.
"""

from __future__ import annotations

from typing import Any

from ._core import formula

__all__ = ["closed_loop_throughput"]


@formula(result="positive", topic="serving", proof="p10_chunked_prefill.py", clients="positive_int",
         e2e_latency="positive", think_time="nonnegative")
def closed_loop_throughput(*, clients: Any, e2e_latency: Any, think_time: Any) -> Any:
    """Requests per second of N closed-loop clients [requests/s]: N / (E + Z).

    Parameters
    ----------
    clients : int >= 1 (N, the concurrency)
    e2e_latency : [s] > 0 (E, the mean end-to-end latency of their requests)
    think_time : [s] >= 0 (Z, each client's pause between a hand-back and its next request)

    Returns
    -------
    [requests/s], scalar or broadcast shape (exact for Fractions).

    Raises
    ------
    InvalidValueError
        A client count below 1, a latency <= 0 or a negative think time.

    Notes
    -----
    Little's law, L = lambda W, with L = N clients and W = E + Z per cycle (J. D. C. Little,
    "A proof for the queuing formula L = lambda W", Operations Research 9(3), 1961). Exact
    for the reference scheduler when the rate is measured over the clients' mean span
    (tests/test_sim_workloads.py).

    Examples
    --------
    >>> from fractions import Fraction
    >>> closed_loop_throughput(clients=10, e2e_latency=Fraction(3, 2), think_time=Fraction(1, 2))
    Fraction(5, 1)
    """
    return clients / (e2e_latency + think_time)
