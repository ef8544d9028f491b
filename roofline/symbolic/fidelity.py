"""The estimate beside the bound, derived (docs/conventions.md, "Bound and estimate").

The bound (:mod:`roofline.symbolic.step_time`) reads every byte at the datasheet bandwidth, runs every
FLOP at the dense peak and pays no time outside the roofline. The estimate keeps the
bound's bytes and FLOPs and changes only its constants: an engine reaches a share
eta_bw of the bandwidth and eta_mm of the peak, and pays t_step per step plus t_layer
per layer (CPU scheduling, kernel launches) plus t_seq per running sequence of a decode
step (sampling, detokenisation, the scheduler's per-sequence bookkeeping):

Definitions (the inputs of the derivation)::

    bound  = Max(bytes / BW, FLOPs / peak) + t0            (roofline.symbolic.step_time)
    BW -> eta_bw BW,  peak -> eta_mm peak,  t0 -> t_step + L t_layer + B t_seq   (decode, B sequences)
                                            t0 -> t_step + L t_layer             (prefill: no sequence count)

Derived (by substitution into the bound, never typed in)::

    estimated_step_time = Max(bytes / (eta_bw BW), FLOPs / (eta_mm peak)) + t_step + L t_layer + B t_seq
    estimated_throughput = B / estimated_step_time
    estimated_prefill_step_time = the prefill bound with the same substitution

At eta_bw = eta_mm = 1 and t_step = t_layer = t_seq = 0 each estimate is its bound.

Fast paths: :mod:`roofline.formulas.fidelity`. Proof: proofs/p15_estimate.py.
"""

from __future__ import annotations

from . import step_time as _st
from ._symbols import S

eta_bw, eta_mm, t_step, t_layer, L = S.eta_bw, S.eta_mm, S.t_step, S.t_layer, S.num_hidden_layers
t_seq, B = S.t_seq, S.batch
BW, peak, t0 = S.bandwidth, S.peak_flops, S.overhead

#: The substitution that turns a bound into an estimate (a prefill step: no per-sequence term).
SUBSTITUTION = {BW: eta_bw * BW, peak: eta_mm * peak, t0: t_step + L * t_layer}
#: The substitution of a decode step of B sequences: the per-sequence time joins the fixed ones.
DECODE_SUBSTITUTION = {BW: eta_bw * BW, peak: eta_mm * peak, t0: t_step + L * t_layer + B * t_seq}

estimated_step_time = _st.step_time.subs(DECODE_SUBSTITUTION, simultaneous=True)
estimated_throughput = _st.throughput.subs(DECODE_SUBSTITUTION, simultaneous=True)
estimated_prefill_step_time = _st.prefill_step_time.subs(SUBSTITUTION, simultaneous=True)
