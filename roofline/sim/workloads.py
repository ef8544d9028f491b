"""Workloads: closed-loop clients and seeded open-loop generators (docs/conventions.md, "Workloads").

* :class:`ClosedLoop`: N clients, each sending its next request when its previous one is
  handed back, plus an optional think time ("concurrency N" benchmarks). The arrivals are
  created by the scheduler as it runs; :func:`~roofline.sim.serve_continuous` accepts it.
* Seeded generators (numpy's ``default_rng``; the same seed gives the same workload):
  arrival times (:func:`arrival_times`: Poisson at a rate, gamma with a coefficient of
  variation, or a burst at t = 0) and lengths (:func:`lengths`: fixed, uniform, capped
  exponential, lognormal, or resampled from a trace); :func:`synthetic_workload` combines
  them, :func:`anyscale_workload` is the Anyscale continuous-batching benchmark's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import attrs

from .._checks import check_int, check_nonnegative, check_positive
from ..errors import InvalidValueError
from .requests import Request

__all__ = [
    "ClosedLoop",
    "ARRIVAL_PROCESSES",
    "LENGTH_DISTRIBUTIONS",
    "TIME_RESOLUTION",
    "arrival_times",
    "lengths",
    "synthetic_workload",
    "anyscale_workload",
    "ANYSCALE_CAPS",
]


def _clients(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_int(attribute.name, value, minimum=1)


def _think(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_nonnegative(attribute.name, value)


def _lengths(value: Iterable[Any]) -> tuple[tuple[int, int], ...]:
    out = []
    for i, pair in enumerate(value):
        if isinstance(pair, Request):
            pair = (pair.prompt_tokens, pair.output_tokens)
        try:
            p, o = pair
        except (TypeError, ValueError):
            raise InvalidValueError(f"lengths[{i}]", pair, "expected (prompt_tokens, output_tokens)") from None
        check_int(f"lengths[{i}].prompt_tokens", p, minimum=1)
        check_int(f"lengths[{i}].output_tokens", o, minimum=1)
        out.append((p, o))
    return tuple(out)


@attrs.frozen
class ClosedLoop:
    """A closed-loop workload: ``clients`` clients send the requests of ``lengths`` in order.

    Parameters
    ----------
    clients : int >= 1
        N, the clients (the concurrency). Clients 0..N-1 send requests 0..N-1 at t = 0.
    lengths : sequence of (prompt_tokens, output_tokens) pairs, or of Requests (their arrival
        times are ignored)
        The requests in the order they are sent; M = len(lengths) requests in all.
    think_time_s : [s] >= 0, default 0
        Z: a client sends its next request Z after its previous one is handed back.
    seed : int or None
        The seed that drew the lengths (recorded with the result; not used here).

    Raises
    ------
    InvalidValueError
        A bad client count, think time or length.

    Notes
    -----
    docs/conventions.md, "Workloads": request N + k is sent by the client whose request is
    the (k + 1)-th to be handed back (ties: in the order the scheduler hands them back), at
    that hand-back time + Z. A request rejected on arrival (it can never fit, or exceeds
    ``max_model_len``) counts as handed back at its arrival. Over whole client cycles
    (Little's law), requests per second = N / (mean E2E + Z) exactly when rates are measured
    over the clients' mean span (see ``tests/test_sim_workloads.py``).

    Examples
    --------
    >>> from roofline.sim import UnitCostModel, serve_continuous
    >>> r = serve_continuous(ClosedLoop(clients=1, lengths=[(4, 3), (4, 2)]), UnitCostModel())
    >>> [(x.arrival_s, x.handed_back_s, x.client) for x in r.requests]
    [(0, 3, 0), (3, 5, 0)]
    """

    clients: int = attrs.field(validator=_clients)
    lengths: tuple[tuple[int, int], ...] = attrs.field(converter=_lengths)
    think_time_s: Any = attrs.field(default=0, validator=_think)
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description."""
        return {"kind": "closed_loop", "clients": self.clients, "requests": len(self.lengths),
                "think_time_s": float(self.think_time_s), "seed": self.seed}
