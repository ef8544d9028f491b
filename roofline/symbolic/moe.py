"""Mixture of experts: experts a batch touches, the bytes it reads, its intensity, derived.

(docs/conventions.md, "Architectures", mixture of experts.)

A MoE layer has E routed experts; each token picks k distinct ones. Under uniform
independent routing (the stated default, named "uniform routing") every k-subset is
equally likely for each token, independently of the other tokens.

* P(a given expert is not among one token's k) = C(E - 1, k) / C(E, k) = (E - k) / E
  (SymPy ``combsimp``);
* P(it is untouched by B tokens) = ((E - k) / E)^B (independence);
* experts touched = sum over the E experts of the indicator "touched"; its expectation is
  the sum of the probabilities (linearity of expectation, SymPy ``summation``):
  experts_touched = E (1 - (1 - k / E)^B).

A decode step of B sequences reads the weights every token uses (everything but the
routed experts: ``shared_weight_bytes``) plus, per expert touched, one routed expert's
bytes summed over the MoE layers (``routed_expert_bytes``); each layer routes on its own,
and the expectation is the same in every layer:

    moe_decode_weight_bytes = W_s + X experts_touched
    moe_arithmetic_intensity = (B F + a B c) / (W_s + X experts_touched + k B c)
    moe_compute_margin = (B F + a B c) / peak - (W_s + X experts_touched + k B c) / BW

The intensity rises with B: experts touched t(B) are concave (t'' <= 0) with t(0) = 0,
so t - B t' >= 0 and dI/dB has the sign of W_s + X (t - B t') > 0 (proofs/p09_moe.py).
The step is compute-bound iff the margin is >= 0. Its second derivative in B is
X E q^B log(q)^2 / BW >= 0 (q = 1 - k / E): the margin is convex in B and negative at
B = 0, so it crosses zero at most once and stays >= 0 after; the critical batch is the
first integer where it is >= 0, found by exact doubling and bisection
(:func:`roofline.estimate.criticality`), and it exists iff F + a c > (peak / BW) k c,
as for a dense model. Proof: proofs/p09_moe.py.

Fast paths: :mod:`roofline.formulas.moe`.
"""

from __future__ import annotations

import sympy as sp

from ._symbols import S

E, k = S.num_experts, S.experts_per_token
W_s, X = S.shared_weight_bytes, S.routed_expert_bytes
B, c = S.batch, S.context
kv, F, a = S.kv_bytes_per_token, S.flops_per_token, S.attention_flops_per_token
peak, BW = S.peak_flops, S.bandwidth

# P(a given expert is not among the k distinct experts one token picks).
miss_one_token = sp.simplify(sp.combsimp(sp.binomial(E - 1, k) / sp.binomial(E, k)))
_e = sp.Symbol("e", positive=True, integer=True)
# Expectation of the sum over the E experts of the indicator "touched by one of B tokens".
experts_touched = sp.summation(1 - miss_one_token**B, (_e, 1, E))

moe_decode_weight_bytes = W_s + X * experts_touched
_flops = B * F + a * B * c
_bytes = moe_decode_weight_bytes + kv * B * c
moe_arithmetic_intensity = _flops / _bytes
moe_compute_margin = _flops / peak - _bytes / BW
