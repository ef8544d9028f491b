"""Disaggregated prefill and decode: the KV a request's transfer moves and how long it takes.

Derived (docs/conventions.md, "Disaggregated prefill and decode"): every GPU has its own NIC and
all of them move their shares at once; a prefill GPU sends the KV it holds (k_p bytes per token),
a decode GPU receives the KV it will hold (k_d), so the busiest NIC moves, summed over the P
prompt tokens,

    kv_transfer_bytes = sum_{j=1..P} max(k_p, k_d) = P max(k_p, k_d)

and the transfer ends when that NIC has delivered them: the t solving
beta_n (t - alpha_n) = M_kv (nothing arrives before the latency has passed),

    kv_transfer_time = M_kv / beta_n + alpha_n.

Fast paths: :mod:`roofline.formulas.disaggregated`. Proof: proofs/p22_disaggregated.py.
"""

from __future__ import annotations

import sympy as sp

from ._symbols import S, declare

_j = declare("transfer_token", positive=True, integer=True)
_t = declare("transfer_end", positive=True)

kv_transfer_bytes = sp.summation(sp.Max(S.prefill_kv_bytes_per_token, S.decode_kv_bytes_per_token),
                                 (_j, 1, S.prompt_tokens))
kv_transfer_time = sp.solve(sp.Eq(S.transfer_bandwidth * (_t - S.transfer_latency), S.transfer_bytes), _t)[0]
