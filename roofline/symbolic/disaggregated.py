"""Disaggregated prefill and decode: the KV a request's transfer moves and how long it takes.

Derived (docs/conventions.md, "Disaggregated prefill and decode"): every GPU has its own NIC and
all of them move their shares at once. The T_d decode GPUs each receive k_d bytes per token (the
decode side's layout); the T_p prefill GPUs send those T_d k_d bytes between them, evenly (every
unit of the KV, a KV head or an MLA latent, is held by as many prefill GPUs and needed by as many
decode GPUs as every other, so each holder sends the same share of its copies). The busiest NIC
moves, summed over the P prompt tokens,

    kv_transfer_bytes = sum_{j=1..P} max(k_d, T_d k_d / T_p) = P k_d max(1, T_d / T_p)

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

_received = S.decode_kv_bytes_per_token  # one decode GPU, per token
_sent = S.decode_tensor_parallel_size * S.decode_kv_bytes_per_token / S.prefill_tensor_parallel_size  # one prefill GPU
kv_transfer_bytes = sp.summation(sp.Max(_received, _sent), (_j, 1, S.prompt_tokens))
kv_transfer_time = sp.solve(sp.Eq(S.transfer_bandwidth * (_t - S.transfer_latency), S.transfer_bytes), _t)[0]
