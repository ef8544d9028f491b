"""Pipeline parallelism of P stages: the sends, one batch's step, throughput and bubble, derived.

Conventions (docs/conventions.md, "Pipeline parallelism"): P contiguous stages of T GPUs
each; a stage boundary sends M = B h e_a bytes from each GPU to its peer (one send:
alpha + M / beta over the boundary's link: the scale-up link inside a node, the NIC across
nodes). One batch's step keeps the one-max rule over every layer it passes:

Definitions (the inputs of the derivation)::

    sum_s M_s = memory time of one GPU's share of T alone     (the stages' sizes sum to it)
    sum_s C_s = compute time of the same
    one send  = alpha + B h e_a / beta

Derived::

    pipeline_send_time  = one send
    pipeline_sends_time = s_nv x one send (scale-up) + s_net x one send (NIC)
    step_time_pp  = step_time_tp + pipeline_sends_time
    throughput_pp = n_f x B / step_time_pp
    pipeline_bubble_share = 1 - n_f / P
    slowest_stage_throughput = B / t_stage

Fast paths: :mod:`roofline.formulas.pipeline`. Proof: proofs/p20_pipeline_parallel.py.
"""

from __future__ import annotations

from . import parallel as _par
from ._symbols import S

B, h, e_a = S.batch, S.hidden_size, S.activation_bytes

pipeline_send_time = B * h * e_a / S.send_bandwidth + S.send_latency
_net_send = pipeline_send_time.subs({S.send_bandwidth: S.network_bandwidth, S.send_latency: S.network_latency},
                                    simultaneous=True)
pipeline_sends_time = S.intra_node_sends * pipeline_send_time + S.inter_node_sends * _net_send
step_time_pp = _par.step_time_tp + pipeline_sends_time
throughput_pp = S.batches_in_flight * B / step_time_pp
pipeline_bubble_share = 1 - S.batches_in_flight / S.pipeline_parallel_size
slowest_stage_throughput = B / S.stage_time
