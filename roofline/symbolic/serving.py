"""Closed-loop serving: Little's law for N clients, derived (docs/conventions.md, "Workloads").

N clients each cycle through one request (its end-to-end latency E) and a think time Z.
Little's law, L = lambda W, with the clients as the population (L = N) and the cycle as
the time each spends per request (W = E + Z), solved for the rate with SymPy:

    closed_loop_throughput = N / (E + Z)   [requests/s]

Fast path: :mod:`roofline.formulas.serving`. Proof: proofs/p10_chunked_prefill.py; the
scheduler check: tests/test_sim_workloads.py.
"""

from __future__ import annotations

import sympy as sp

from ._symbols import S, declare

clients, e2e_latency, think_time = S.clients, S.e2e_latency, S.think_time  # N, E [s], Z [s]
_rate = declare("rate", positive=True)  # the unknown of the solve [requests/s]

(closed_loop_throughput,) = sp.solve(sp.Eq(clients, _rate * (e2e_latency + think_time)), _rate)
