"""Batching: serial waits, static batching's useful share of a given batch, and its waits.

Conventions (docs/conventions.md, "Serving policies" and "Useful share and slot occupancy"):

* one by one (serial), all n requests at t = 0, equal service time s: request j
  finishes at j s and waits (j - 1) s before its own work starts; mean wait (n - 1) s / 2;
* static batching: a batch of B requests runs until its longest request finishes
  (``length_max`` steps), finished rows keep their slot, everything is handed back at the
  end, nobody joins a running batch. The **per-batch useful share** of a given batch is
  sum(O_i) / (B x max O_i).

The expectation of that share over random output lengths is its own topic,
:mod:`roofline.formulas.useful_share`.

Fast paths are keyword-only, with no float literals; exact for int and Fraction inputs.
Derivations: ``roofline.symbolic.batching``. Proofs: ``proofs/p01_one_request.py``
(serial waits), ``proofs/p05_static_batching.py``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ._core import formula

__all__ = [
    "static_useful_share",
    "serial_completion_time",
    "serial_wait",
    "serial_mean_wait",
    "static_handback_delay",
    "static_join_wait",
]

_P1 = "p01_one_request.py"
_P5 = "p05_static_batching.py"


def _exact(x: Any) -> Any:
    """``Fraction(x)`` for an int (so int / int stays exact); anything else unchanged."""
    if isinstance(x, int) and not isinstance(x, bool):
        return Fraction(x)
    return x


# --------------------------------------------------------------------------- static batching


@formula(result="share",
         topic="batching", proof=_P5, batch="positive_int", length_sum="positive", length_max="positive",
         requires=("length_sum", "length_max <= length_sum <= batch x length_max",
                   lambda batch, length_sum, length_max: (length_max <= length_sum)
                   & (length_sum <= batch * length_max)))
def static_useful_share(*, batch: Any, length_sum: Any, length_max: Any) -> Any:
    """Per-batch useful share of a static batch: sum(O_i) / (B x max O_i) [1].

    Parameters
    ----------
    batch : int > 0 [sequences]
        B, the rows of the batch.
    length_sum : > 0 [tokens]
        sum of the rows' output lengths O_i (or of their prompt lengths, for prompt padding).
    length_max : > 0 [tokens]
        max O_i: the batch runs this many steps.

    Returns
    -------
    [dimensionless], in (0, 1] when max <= sum <= B max (the caller's lengths); scalar
    or the broadcast shape; exact (Fraction) for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A non-positive or non-finite argument, a non-integer batch, or a sum outside
        [length_max, batch x length_max] (impossible for a batch's lengths).

    Notes
    -----
    Every one of the ``length_max`` steps occupies all B rows; row i is useful in O_i of
    them (docs/conventions.md, "Static batching"). The static-batching tutorials' example:
    outputs 6, 50, 300 -> 356 / 900; 50, 500 -> 55 %; the lesson's 100, 200, 300, 1,000 -> 40 %. Proof:
    proofs/p05_static_batching.py.

    Examples
    --------
    >>> static_useful_share(batch=4, length_sum=100 + 200 + 300 + 1000, length_max=1000)
    Fraction(2, 5)
    >>> static_useful_share(batch=3, length_sum=6 + 50 + 300, length_max=300)
    Fraction(89, 225)
    """
    return _exact(length_sum) / (batch * length_max)


# --------------------------------------------------------------------------- serial waits


@formula(result="nonnegative", topic="batching", proof=_P1, position="positive_int", service_time="nonnegative")
def serial_completion_time(*, position: Any, service_time: Any) -> Any:
    """When request j finishes, served one by one from t = 0 with equal service times [s].

    Parameters
    ----------
    position : int > 0
        j, the request's place in the first-come-first-served queue (1 = first).
    service_time : [s] >= 0
        Time to serve one request alone (its prefill and decode steps).

    Returns
    -------
    [s], j x s; scalar or broadcast shape; exact for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive position, a negative or non-finite service time.

    Notes
    -----
    The sum of the service times of requests 1..j (docs/conventions.md, "One by one"). Proof:
    proofs/p01_one_request.py.

    Examples
    --------
    >>> serial_completion_time(position=100, service_time=2)
    200
    """
    return position * service_time


@formula(result="nonnegative", topic="batching", proof=_P1, position="positive_int", service_time="nonnegative")
def serial_wait(*, position: Any, service_time: Any) -> Any:
    """Time request j waits before its own work starts, served one by one from t = 0 [s].

    Parameters
    ----------
    position : int > 0
        j (1 = first served).
    service_time : [s] >= 0
        Equal service time of every request.

    Returns
    -------
    [s], (j - 1) x s: it waits for all j - 1 requests before it; scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive position, a negative or non-finite service time.

    Notes
    -----
    The lesson's "the last of 100 waits for all 99": j = 100 waits 99 s. Proof:
    proofs/p01_one_request.py.

    Examples
    --------
    >>> serial_wait(position=100, service_time=Fraction(3, 2))
    Fraction(297, 2)
    """
    return (position - 1) * service_time


@formula(result="nonnegative", topic="batching", proof=_P1, requests="positive_int", service_time="nonnegative")
def serial_mean_wait(*, requests: Any, service_time: Any) -> Any:
    """Mean wait before work starts over n requests served one by one from t = 0 [s].

    Parameters
    ----------
    requests : int > 0
        n, all arriving at t = 0.
    service_time : [s] >= 0
        Equal service time of every request.

    Returns
    -------
    [s], (n - 1) s / 2; scalar or broadcast shape; exact for int and Fraction inputs.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive count, a negative or non-finite service time.

    Notes
    -----
    (1 / n) sum_{j=1}^{n} (j - 1) s, summed with SymPy. Proof: proofs/p01_one_request.py.

    Examples
    --------
    >>> serial_mean_wait(requests=100, service_time=2)
    Fraction(99, 1)
    """
    return _exact(requests - 1) * service_time / 2


@formula(result="nonnegative", topic="batching", proof=_P5, output_tokens="positive_int", length_max="positive",
         step_time="nonnegative", requires=("output_tokens", "output_tokens <= length_max",
                                            lambda output_tokens, length_max, step_time: output_tokens <= length_max))
def static_handback_delay(*, output_tokens: Any, length_max: Any, step_time: Any) -> Any:
    """How long a finished answer waits in a static batch before it is handed back [s].

    Parameters
    ----------
    output_tokens : int > 0 [tokens]
        O, the request's output length: its last token comes after O steps.
    length_max : > 0 [tokens]
        The batch's longest output: the batch hands everything back after it.
    step_time : [s] >= 0
        Time of one step (taken equal for every step, prefill included).

    Returns
    -------
    [s], (length_max - O) x step time; >= 0 when O <= length_max; broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-positive or non-integer output length, a negative or non-finite time, or
        an output longer than the batch's longest (``output_tokens > length_max``).

    Notes
    -----
    Ready after O steps (the prefill makes the first token, docs/conventions.md), handed back
    after length_max steps. The lesson: at ~5 ms per step the 100-token answer is ready
    after 0.5 s and handed back after 5 s (4.5 s later). Proof: proofs/p05_static_batching.py.

    Examples
    --------
    >>> static_handback_delay(output_tokens=100, length_max=1000, step_time=Fraction(5, 1000))
    Fraction(9, 2)
    """
    return (length_max - output_tokens) * step_time


@formula(result="nonnegative", topic="batching", proof=_P5, arrival_time="nonnegative", length_max="positive",
         step_time="nonnegative",
         requires=("arrival_time", "arrival_time <= length_max x step_time (an arrival before the batch ends)",
                   lambda arrival_time, length_max, step_time: arrival_time <= length_max * step_time))
def static_join_wait(*, arrival_time: Any, length_max: Any, step_time: Any) -> Any:
    """How long a request arriving after a static batch started waits before its work starts [s].

    Parameters
    ----------
    arrival_time : [s] >= 0
        Arrival, measured from the start of the running batch (<= its end).
    length_max : > 0 [tokens]
        The running batch's longest output (its number of steps).
    step_time : [s] >= 0

    Returns
    -------
    [s], length_max x step time - arrival time; broadcast shape.

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or an arrival after the batch's end.

    Notes
    -----
    No request joins a running static batch (docs/conventions.md); the next batch starts when
    this one ends. The lesson: arriving one ~5 ms step after a 1,000-step batch started,
    it waits 999 steps, ~5 s. Proof: proofs/p05_static_batching.py.

    Examples
    --------
    >>> static_join_wait(arrival_time=Fraction(5, 1000), length_max=1000, step_time=Fraction(5, 1000))
    Fraction(999, 200)
    """
    return length_max * step_time - arrival_time
