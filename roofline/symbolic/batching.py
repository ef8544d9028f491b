"""Batching: serial waits, static batching's useful share of a given batch and its waits, derived.

Conventions (docs/conventions.md, "Serving policies"): a static batch of B requests runs
until its longest request finishes; finished rows keep their slot; all results are handed
back at the end. The per-batch useful share = sum(O_i) / (B x max O_i). Serving one by
one, request j of n (all at t = 0) finishes at the sum of the service times of requests
1..j.

Definitions, written as SymPy sums (a proof calls them definitions):

* ``static_useful_share`` = useful row-steps / occupied row-steps, the occupied ones
  summed over the batch's ``length_max`` steps.
* ``serial_completion_time``, ``serial_wait``: sums of the service times over the queue.
* ``static_handback_delay``, ``static_join_wait``: ready time against hand-back time.

Derived (SymPy's ``summation`` does the work): ``serial_mean_wait``, the mean of the
waits over the n requests.

The expectation of the share over random lengths: :mod:`roofline.symbolic.useful_share`.
Fast paths: :mod:`roofline.formulas.batching`. Proofs: proofs/p01_one_request.py
(serial waits), proofs/p05_static_batching.py.
"""

from __future__ import annotations

import sympy as sp

from ._symbols import S

__all__ = [
    "static_useful_share",
    "serial_completion_time",
    "serial_wait",
    "serial_mean_wait",
    "static_handback_delay",
    "static_join_wait",
]

B = S.batch
_i = sp.Symbol("i", positive=True, integer=True)
_j = sp.Symbol("j", positive=True, integer=True)
_t = sp.Symbol("t", positive=True, integer=True)

# --------------------------------------------------------------------------- static batching
# Every one of the length_max steps occupies all B rows; row i does useful work in O_i of
# them, so the useful row-steps are sum(O_i) = length_sum.
_occupied = sp.summation(B, (_t, 1, S.length_max))
static_useful_share = S.length_sum / _occupied

# --------------------------------------------------------------------------- serial waits
# Request j (all at t = 0, equal service times s) finishes after requests 1..j are served
# and starts its own work after requests 1..j-1.
serial_completion_time = sp.summation(S.service_time, (_i, 1, S.position))
serial_wait = sp.summation(S.service_time, (_i, 1, S.position - 1))
serial_mean_wait = sp.factor(sp.summation(serial_wait.subs(S.position, _j), (_j, 1, S.requests)) / S.requests)

# --------------------------------------------------------------------------- static waits
# With one step time for every step (the prefill makes the first token, docs/conventions.md),
# a request of O tokens has its last token after O steps; the batch hands it back after
# length_max steps. A request arriving at arrival_time cannot join: it waits for the end.
_ready = sp.summation(S.step_time, (_t, 1, S.output_tokens))
_handed_back = sp.summation(S.step_time, (_t, 1, S.length_max))
static_handback_delay = sp.expand(_handed_back - _ready)
static_join_wait = _handed_back - S.arrival_time
