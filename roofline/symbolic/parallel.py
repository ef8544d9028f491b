"""Tensor parallelism: the ring all-reduce and the decode step time of T GPUs, derived.

Conventions (docs/conventions.md, "Tensor parallelism"): each layer of a decode step
ends its attention and its MLP with an all-reduce of the batch's activations,
M = B x hidden x activation bytes. A ring all-reduce over T GPUs is a reduce-scatter
then an all-gather, T - 1 steps each; in every step each GPU sends one chunk of M / T
bytes to its neighbour over its link (bandwidth beta per direction, latency alpha per
step). The step time adds the all-reduces to the roofline of one GPU's share
(no overlap of communication with compute).

Definitions (the inputs of the derivation)::

    one ring step = alpha + (M / T) / beta
    M = B h e_a                                   (allreduce_bytes)

Derived::

    ring_allreduce_time = sum_{s=1}^{2 (T - 1)} one ring step      (SymPy ``summation``)
                        = 2 (T - 1) / T x M / beta + 2 (T - 1) x alpha
    ring_allreduce_bandwidth_time = ring time at alpha = 0
    ring_allreduce_latency_time   = limit of the ring time as beta -> oo   (SymPy ``limit``)
    decode_allreduce_time (and its two terms) = 2 L x ring time at M = B h e_a
    step_time_tp = Max(memory time, compute time) of one GPU's share + decode_allreduce_time + t0
    throughput_tp = B / step_time_tp               (tokens/s of the whole group)
    allreduce_crossover_batch = solve(bandwidth term = latency term, B)  (SymPy ``solve``)

The per-GPU quantities (weight bytes, KV bytes per token, FLOPs per token) are
arguments; how a model splits over T GPUs is the model's business. With T = 1 every
all-reduce term is 0 and ``step_time_tp`` is :mod:`roofline.symbolic.step_time`'s ``step_time``.

Fast paths: :mod:`roofline.formulas.parallel`. Proof: proofs/p11_tensor_parallel.py.
"""

from __future__ import annotations

import sympy as sp

from . import step_time as _st
from ._symbols import S

T, h, e_a = S.tensor_parallel_size, S.hidden_size, S.activation_bytes  # GPUs, elements, bytes/element
beta, alpha, M = S.link_bandwidth, S.link_latency, S.message_bytes  # bytes/s per direction, s per step, bytes
B, L = S.batch, S.num_hidden_layers

_s = sp.Symbol("s", positive=True, integer=True)
_one_step = alpha + (M / T) / beta
ring_allreduce_time = sp.collect(sp.expand(sp.summation(_one_step, (_s, 1, 2 * (T - 1)))), [alpha, M], sp.factor)
ring_allreduce_bandwidth_time = ring_allreduce_time.subs(alpha, 0)
ring_allreduce_latency_time = sp.limit(ring_allreduce_time, beta, sp.oo)

allreduce_bytes = B * h * e_a

_per_step = {M: allreduce_bytes}
decode_allreduce_bandwidth_time = sp.factor(2 * L * ring_allreduce_bandwidth_time.subs(_per_step))
decode_allreduce_latency_time = sp.factor(2 * L * ring_allreduce_latency_time.subs(_per_step))
decode_allreduce_time = decode_allreduce_bandwidth_time + decode_allreduce_latency_time

step_time_tp = sp.Max(_st.memory_time, _st.compute_time) + decode_allreduce_time + S.overhead
throughput_tp = B / step_time_tp

_B_real = sp.Symbol("B_real", positive=True)
(allreduce_crossover_batch,) = sp.solve(
    sp.Eq(decode_allreduce_bandwidth_time.subs(B, _B_real), decode_allreduce_latency_time.subs(B, _B_real)),
    _B_real,
)


# ------------------------------------------------------------------ groups that span nodes (p20)
# docs/conventions.md, "Groups that span nodes": intra-node reduce-scatter (G - 1 steps of M / G over the
# node's link), inter-node ring all-reduce of M / G among N = T / G GPUs (2 (N - 1) steps of M / (G N) over
# the NIC), intra-node all-gather (G - 1 steps of M / G).
G, beta_n, alpha_n = S.node_gpus, S.network_bandwidth, S.network_latency
_N = T / G
_intra = sp.summation(alpha + (M / G) / beta, (_s, 1, G - 1))
_inter = sp.summation(alpha_n + (M / (G * _N)) / beta_n, (_s, 1, 2 * (_N - 1)))
hierarchical_allreduce_time = sp.expand(2 * _intra + _inter)

_beta_eff, _alpha_eff = sp.symbols("beta_eff alpha_eff", positive=True)
_ring_eff = ring_allreduce_time.subs({beta: _beta_eff, alpha: _alpha_eff})
(hierarchical_link_bandwidth,) = sp.solve(
    sp.Eq(_ring_eff.subs(_alpha_eff, 0), hierarchical_allreduce_time.subs({alpha: 0, alpha_n: 0})), _beta_eff)
(hierarchical_link_latency,) = sp.solve(
    sp.Eq(_ring_eff.subs(M, 0), hierarchical_allreduce_time.subs(M, 0)), _alpha_eff)
