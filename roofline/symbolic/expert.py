"""Expert parallelism: distinct ranks a token reaches, the all-to-all's bytes and time, the step, derived.

(docs/conventions.md, "Expert parallelism".)

R ranks hold E / R whole routed experts each (contiguous blocks); each token picks k distinct
experts of E, every k-subset equally likely, tokens independent (uniform routing, as
:mod:`roofline.symbolic.moe`). Definitions (the inputs of the derivation)::

    P(one token misses a given rank) = q = C(E - E/R, k) / C(E, k)   (none of k among the
                                                                       E - E/R experts elsewhere)
    dispatch: one copy of h e_a bytes to each remote rank reached; combine: one back from each
    each rank owns B / R of the step's tokens (after the attention's all-reduce)
    all-to-all time = max(on-node bytes / beta_su, off-node bytes / beta_net) + one latency
    (beta_su, alpha_su: the scale-up link; the rings' beta, alpha: the group's all-reduce per step)
    ring all-gather = T - 1 ring steps of alpha + (M / T) / beta

Derived::

    ranks_reached = sum over the R ranks of P(reached) = R (1 - q)          (SymPy ``summation``)
    remote_ranks_reached = ranks_reached - P(its own rank reached) = (R - 1)(1 - q)
    experts_touched_per_rank = (E / R)(1 - (1 - k/E)^B)      (experts_touched / R: E/R indicators)
    alltoall_bytes = (B / R) x remote_ranks_reached x h e_a   (per GPU, per all-to-all, one direction)
    alltoall_time = Max((min(R, G) - 1)(1 - q) (B/R) h e_a / beta_su,
                        max(R - G, 0)(1 - q) (B/R) h e_a / beta_net)
                    + Max(alpha_su min(R - 1, 1), alpha_net min(max(R - G, 0), 1))
    decode_alltoall_time = 2 L_moe x alltoall_time               (a dispatch and a combine per MoE layer)
    ring_allgather_time = sum_{s=1}^{T-1} (alpha + M / (T beta)) = (T - 1)/T M / beta + (T - 1) alpha
    decode_comm_time_ep = (2 L - L_moe) ring all-reduces + L_moe ring all-gathers (of B h e_a, over T)
                          + decode_alltoall_time
    step_time_ep = Max(memory time, compute time) of one GPU + decode_comm_time_ep + t0

At R = T = 1 every communication term is 0 (q = 0: the one rank is always reached, none is
remote; the latency factors min(R - 1, 1) and min(max(R - G, 0), 1) are 0).

Fast paths: :mod:`roofline.formulas.expert`. Proof: proofs/p21_expert_parallel.py.
"""

from __future__ import annotations

import sympy as sp

from . import moe as _moe
from . import parallel as _par
from . import step_time as _st
from ._symbols import S

E, k, R, B = S.num_experts, S.experts_per_token, S.expert_parallel_size, S.batch
T, h, e_a, L, L_moe = S.tensor_parallel_size, S.hidden_size, S.activation_bytes, S.num_hidden_layers, S.num_moe_layers
beta, alpha, G = S.link_bandwidth, S.link_latency, S.node_gpus
beta_su, alpha_su = S.scale_up_bandwidth, S.scale_up_latency
beta_net, alpha_net, M = S.network_bandwidth, S.network_latency, S.message_bytes

#: P(one token's k experts all lie outside a given rank's E / R).
miss_rank = sp.binomial(E - E / R, k) / sp.binomial(E, k)
_r = sp.Symbol("r", positive=True, integer=True)
ranks_reached = sp.summation(1 - miss_rank, (_r, 1, R))
remote_ranks_reached = sp.factor(ranks_reached - (1 - miss_rank))
experts_touched_per_rank = _moe.experts_touched / R

_per_copy = (B / R) * (1 - miss_rank) * h * e_a  # bytes per GPU to one other rank, per all-to-all
alltoall_bytes = (B / R) * remote_ranks_reached * h * e_a
_on_node = (sp.Min(R, G) - 1) * _per_copy
_off_node = sp.Max(R - G, 0) * _per_copy
alltoall_time = (sp.Max(_on_node / beta_su, _off_node / beta_net)
                 + sp.Max(alpha_su * sp.Min(R - 1, 1), alpha_net * sp.Min(sp.Max(R - G, 0), 1)))
decode_alltoall_time = 2 * L_moe * alltoall_time

_s = sp.Symbol("s", positive=True, integer=True)
ring_allgather_time = sp.collect(sp.expand(sp.summation(alpha + (M / T) / beta, (_s, 1, T - 1))), [alpha, M],
                                 sp.factor)

_message = {M: _par.allreduce_bytes}
decode_comm_time_ep = ((2 * L - L_moe) * _par.ring_allreduce_time.subs(_message)
                       + L_moe * ring_allgather_time.subs(_message) + decode_alltoall_time)
step_time_ep = sp.Max(_st.memory_time, _st.compute_time) + decode_comm_time_ep + S.overhead
