"""Expert parallelism over R ranks: distinct ranks a token reaches, the all-to-all, the decode step.

Conventions (docs/conventions.md, "Expert parallelism"): R ranks hold E / R whole routed
experts each; under uniform routing (each token picks k distinct experts of E, every k-subset
equally likely, tokens independent) a token misses a given rank with probability
q = C(E - E/R, k) / C(E, k), so it reaches R (1 - q) distinct ranks, (R - 1)(1 - q) of them
remote. Each MoE layer dispatches one copy of each token's hidden state (h x activation bytes)
to every remote rank reached and combines one partial sum back from each: per GPU and per
all-to-all, (B / R)(R - 1)(1 - q) h e bytes each way. An all-to-all takes one latency plus its
bytes over the link, NVLink for ranks on the node and the NIC for ranks on other nodes
(nodes of G GPUs), both at once. The decode step of the group is

    max(memory time, compute time) of one GPU + (2L - L_moe) ring all-reduces over T
    + L_moe ring all-gathers over T + 2 L_moe all-to-alls (+ overhead),

with no overlap: attention (every layer) and the dense layers' MLPs keep their all-reduce, each
MoE layer all-gathers its output for the next attention (vLLM's all-to-all path). The per-GPU
bytes and FLOPs are arguments (:meth:`roofline.Deployment.cost_terms` gives them).

Derivations (SymPy ``summation``): ``roofline.symbolic.expert``; proof:
``proofs/p21_expert_parallel.py``.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb
from typing import Any

import numpy as np

from ._core import formula, maximum, minimum
from .moe import experts_touched
from .parallel import allreduce_bytes, ring_allreduce_time
from .step_time import _DECODE, _times

__all__ = [
    "ranks_reached",
    "remote_ranks_reached",
    "experts_touched_per_rank",
    "alltoall_bytes",
    "alltoall_time",
    "decode_alltoall_time",
    "ring_allgather_time",
    "decode_comm_time_ep",
    "step_time_ep",
]

_P21 = "p21_expert_parallel.py"


def _divides(kw: dict[str, Any]) -> Any:
    e, k, r = (np.asarray(kw[n], dtype=object) for n in ("num_experts", "experts_per_token", "expert_parallel_size"))
    return (e % r == 0) & (k <= e)


def _layers(kw: dict[str, Any]) -> Any:
    return np.asarray(kw["num_moe_layers"], dtype=object) <= np.asarray(kw["num_hidden_layers"], dtype=object)


_RANKS_OK = ("expert_parallel_size",
             "an expert-parallel size dividing num_experts and experts_per_token <= num_experts",
             lambda **kw: _divides(kw))
_LAYERS_OK = ("expert_parallel_size", "an expert-parallel size dividing num_experts, experts_per_token <= "
              "num_experts and num_moe_layers <= num_hidden_layers", lambda **kw: _divides(kw) & _layers(kw))
_GROUP: dict[str, Any] = dict(num_experts="positive_int", experts_per_token="positive_int",
                              expert_parallel_size="positive_int")
_MESSAGE: dict[str, Any] = dict(batch="positive", hidden_size="positive_int", activation_bytes="positive", **_GROUP)
_LINKS: dict[str, Any] = dict(scale_up_bandwidth="positive", scale_up_latency="nonnegative", node_gpus="positive_int",
                              network_bandwidth="positive", network_latency="nonnegative")
_A2A: dict[str, Any] = dict(**_MESSAGE, **_LINKS)
_COMM: dict[str, Any] = dict(num_hidden_layers="positive_int", num_moe_layers="nonnegative_int",
                             tensor_parallel_size="positive_int", link_bandwidth="positive", link_latency="nonnegative",
                             **_A2A)


def _miss_one(num_experts: int, experts_per_token: int, expert_parallel_size: int) -> Fraction:
    elsewhere = num_experts - num_experts // expert_parallel_size
    return Fraction(comb(elsewhere, experts_per_token), comb(num_experts, experts_per_token))


_miss_array = np.frompyfunc(_miss_one, 3, 1)


def _miss(kw: dict[str, Any]) -> Any:
    """q = C(E - E/R, k) / C(E, k): exact Fraction(s); for arrays an object array of Fractions."""
    args = [kw["num_experts"], kw["experts_per_token"], kw["expert_parallel_size"]]
    if any(isinstance(a, np.ndarray) for a in args):
        return _miss_array(*(np.asarray(a, dtype=object) for a in args))
    return _miss_one(*(int(a) for a in args))


@formula(result="positive", topic="expert", proof=_P21, max_test_value=40, requires=_RANKS_OK, **_GROUP)
def ranks_reached(*, num_experts: Any, experts_per_token: Any, expert_parallel_size: Any) -> Any:
    """Expected distinct ranks one token's k experts lie on, uniform routing [ranks]: R (1 - C(E - E/R, k) / C(E, k)).

    Parameters
    ----------
    num_experts : int > 0, E routed experts per MoE layer
    experts_per_token : int in [1, E], k
    expert_parallel_size : int > 0 dividing E, R ranks of E / R whole experts each

    Returns
    -------
    [ranks], exact Fraction for ints: 1 at R = 1, R when k > E - E/R (every rank reached);
    between 1 and min(k, R); rises with R.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive argument; R not dividing E, or k > E (field
        ``expert_parallel_size``).

    Notes
    -----
    The sum over the R ranks of P(a rank is reached) (docs/conventions.md, "Expert parallelism").

    Examples
    --------
    >>> ranks_reached(num_experts=8, experts_per_token=2, expert_parallel_size=4)  # 4 (1 - 15/28)
    Fraction(13, 7)
    >>> float(ranks_reached(num_experts=256, experts_per_token=8, expert_parallel_size=8))  # DeepSeek-V3, 8 GPUs
    5.29...
    """
    q = _miss(dict(num_experts=num_experts, experts_per_token=experts_per_token,
                   expert_parallel_size=expert_parallel_size))
    return expert_parallel_size * (1 - q)


@formula(result="nonnegative", topic="expert", proof=_P21, max_test_value=40, requires=_RANKS_OK, **_GROUP)
def remote_ranks_reached(*, num_experts: Any, experts_per_token: Any, expert_parallel_size: Any) -> Any:
    """Expected ranks other than its own that one token's experts lie on [ranks]: (R - 1)(1 - q).

    Parameters, Raises as :func:`ranks_reached`.

    Returns
    -------
    [ranks], exact for ints; 0 at R = 1; ranks_reached x (R - 1) / R (its own rank is reached
    with probability 1 - q, as every rank is).

    Examples
    --------
    >>> remote_ranks_reached(num_experts=8, experts_per_token=2, expert_parallel_size=4)
    Fraction(39, 28)
    """
    q = _miss(dict(num_experts=num_experts, experts_per_token=experts_per_token,
                   expert_parallel_size=expert_parallel_size))
    return (expert_parallel_size - 1) * (1 - q)


@formula(result="positive", topic="expert", proof=_P21, max_test_value=40,
         requires=("expert_parallel_size", "an expert-parallel size dividing num_experts and "
                   "experts_per_token <= num_experts", lambda **kw: _divides(kw)),
         batch="positive_int", **_GROUP)
def experts_touched_per_rank(*, num_experts: Any, experts_per_token: Any, expert_parallel_size: Any,
                             batch: Any) -> Any:
    """Expected routed experts one rank's E / R touches in a step of B tokens, uniform routing [experts].

    Parameters
    ----------
    num_experts, experts_per_token, expert_parallel_size : as :func:`ranks_reached`
    batch : int > 0 [tokens]

    Returns
    -------
    [experts]: (E / R)(1 - (1 - k/E)^B) = :func:`roofline.formulas.experts_touched` / R, the same
    expectation on every rank (the mean over ranks; the most loaded rank is not modelled).

    Raises
    ------
    InvalidValueError
        As :func:`ranks_reached`, and a batch that is not an integer >= 1.

    Examples
    --------
    >>> experts_touched_per_rank(num_experts=8, experts_per_token=2, expert_parallel_size=4, batch=1)
    Fraction(1, 2)
    """
    return experts_touched.unchecked(num_experts=num_experts, experts_per_token=experts_per_token,
                                     batch=batch) / expert_parallel_size


def _per_copy(kw: dict[str, Any]) -> Any:
    """(B / R)(1 - q) h e: bytes one GPU sends to one other rank in one all-to-all (expected)."""
    q = _miss(kw)
    return kw["batch"] * (1 - q) * kw["hidden_size"] * kw["activation_bytes"] / kw["expert_parallel_size"]


@formula(result="nonnegative", topic="expert", proof=_P21, max_test_value=40, requires=_RANKS_OK, **_MESSAGE)
def alltoall_bytes(**kw: Any) -> Any:
    """Bytes one GPU sends in one dispatch (and receives in one combine) of a step of B tokens [bytes].

    Parameters
    ----------
    batch : [tokens] > 0 (the step's tokens; each rank owns B / R of them)
    hidden_size : [elements], integer >= 1
    activation_bytes : [bytes/element] > 0
    num_experts, experts_per_token, expert_parallel_size : as :func:`ranks_reached`

    Returns
    -------
    [bytes]: (B / R) x (R - 1)(1 - q) x h x e, an expectation over the routing (mean over
    ranks); 0 at R = 1. The combine moves the same bytes the other way.

    Raises
    ------
    InvalidValueError
        As :func:`ranks_reached`; a non-positive batch, hidden size or activation bytes.

    Examples
    --------
    >>> alltoall_bytes(batch=4, hidden_size=1, activation_bytes=1, num_experts=8, experts_per_token=2,
    ...                expert_parallel_size=4)  # one token per rank, 39/28 remote copies of 1 byte
    Fraction(39, 28)
    """
    return (kw["expert_parallel_size"] - 1) * _per_copy(kw)


def _alltoall(kw: dict[str, Any]) -> Any:
    r, g = kw["expert_parallel_size"], kw["node_gpus"]
    copy = _per_copy(kw)
    off = maximum(r - g, 0)
    on_node = (minimum(r, g) - 1) * copy / kw["scale_up_bandwidth"]
    off_node = off * copy / kw["network_bandwidth"]
    latency = maximum(kw["scale_up_latency"] * minimum(r - 1, 1), kw["network_latency"] * minimum(off, 1))
    return maximum(on_node, off_node) + latency


@formula(result="nonnegative", topic="expert", proof=_P21, max_test_value=40, requires=_RANKS_OK, **_A2A)
def alltoall_time(**kw: Any) -> Any:
    """Time of one all-to-all (a dispatch, or a combine) of a step of B tokens over R ranks [s].

    Parameters
    ----------
    batch, hidden_size, activation_bytes, num_experts, experts_per_token, expert_parallel_size :
        as :func:`alltoall_bytes`
    scale_up_bandwidth : [bytes/s] > 0, the scale-up link (NVLink) per GPU per direction
    scale_up_latency : [s] >= 0, one all-to-all over it
    node_gpus : int > 0, G ranks of the group in each node (ranks beyond it are on other nodes)
    network_bandwidth : [bytes/s] > 0, NIC per GPU per direction (unused when R <= G)
    network_latency : [s] >= 0, one inter-node transfer (unused when R <= G)

    Returns
    -------
    [s]: max(on-node bytes / beta_su, off-node bytes / beta_net) + max(alpha_su, alpha_net if R > G);
    on-node bytes (min(R, G) - 1)(B / R)(1 - q) h e, off-node max(R - G, 0)(B / R)(1 - q) h e
    per GPU. 0 at R = 1.

    Raises
    ------
    InvalidValueError
        As :func:`alltoall_bytes`; a non-positive bandwidth, a negative latency.

    Notes
    -----
    The alpha-beta form, one latency per all-to-all: every GPU sends to all its peers at once
    (not a ring). docs/conventions.md, "Expert parallelism".

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = alltoall_time(batch=256, hidden_size=7168, activation_bytes=2, num_experts=256, experts_per_token=8,
    ...     expert_parallel_size=8, scale_up_bandwidth=450 * 10**9, scale_up_latency=Fraction(6, 10**7), node_gpus=8,
    ...     network_bandwidth=1, network_latency=0)
    >>> round(float(t) * 1e6, 2)  # DeepSeek-V3 on 8 H200, 256 tokens: 0.6 us + 2.13 MB over 450 GB/s
    5.32
    """
    return _alltoall(kw)


@formula(result="nonnegative", topic="expert", proof=_P21, max_test_value=40, requires=_RANKS_OK,
         num_moe_layers="nonnegative_int", **_A2A)
def decode_alltoall_time(**kw: Any) -> Any:
    """All-to-all time of one step [s]: 2 L_moe x :func:`alltoall_time` (a dispatch and a combine per MoE layer).

    Parameters
    ----------
    num_moe_layers : int >= 0, L_moe
    the others : as :func:`alltoall_time`

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        As :func:`alltoall_time`; a negative or non-integer number of layers.

    Examples
    --------
    >>> decode_alltoall_time(num_moe_layers=2, batch=4, hidden_size=1, activation_bytes=1, num_experts=8,
    ...     experts_per_token=2, expert_parallel_size=4, scale_up_bandwidth=1, scale_up_latency=1, node_gpus=4,
    ...     network_bandwidth=1, network_latency=0)  # 4 x (39/28 + 1)
    Fraction(67, 7)
    """
    return 2 * kw["num_moe_layers"] * _alltoall(kw)


@formula(result="nonnegative", topic="expert", proof=_P21, message_bytes="nonnegative",
         tensor_parallel_size="positive_int", link_bandwidth="positive", link_latency="nonnegative")
def ring_allgather_time(*, message_bytes: Any, tensor_parallel_size: Any, link_bandwidth: Any,
                        link_latency: Any) -> Any:
    """Time of one ring all-gather of M bytes in all over T GPUs [s]: (T - 1)/T x M / beta + (T - 1) x alpha.

    Parameters
    ----------
    message_bytes : [bytes] >= 0, M, the gathered buffer (each GPU holds M / T of it before)
    tensor_parallel_size : int >= 1, T (1: 0 s)
    link_bandwidth : [bytes/s] > 0, per GPU per direction
    link_latency : [s] >= 0, one ring step

    Returns
    -------
    [s]: half of :func:`roofline.formulas.ring_allreduce_time` (its all-gather half).

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or T not an integer >= 1.

    Examples
    --------
    >>> ring_allgather_time(message_bytes=16, tensor_parallel_size=2, link_bandwidth=1, link_latency=1)
    9.0
    """
    t = tensor_parallel_size
    return (t - 1) * message_bytes / (t * link_bandwidth) + (t - 1) * link_latency


def _comm(kw: dict[str, Any]) -> Any:
    message = allreduce_bytes.unchecked(batch=kw["batch"], hidden_size=kw["hidden_size"],
                                        activation_bytes=kw["activation_bytes"])
    ring = dict(message_bytes=message, tensor_parallel_size=kw["tensor_parallel_size"],
                link_bandwidth=kw["link_bandwidth"], link_latency=kw["link_latency"])
    moe = kw["num_moe_layers"]
    return ((2 * kw["num_hidden_layers"] - moe) * ring_allreduce_time.unchecked(**ring)
            + moe * ring_allgather_time.unchecked(**ring) + 2 * moe * _alltoall(kw))


@formula(result="nonnegative", topic="expert", proof=_P21, max_test_value=40, requires=_LAYERS_OK, **_COMM)
def decode_comm_time_ep(**kw: Any) -> Any:
    """Communication time of one step of an expert-parallel group [s] (no overlap with anything).

    (2L - L_moe) ring all-reduces over T (attention in every layer, the dense layers' MLPs),
    L_moe ring all-gathers over T (each MoE layer's output) and 2 L_moe all-to-alls over R, all
    of B h e bytes per token.

    Parameters
    ----------
    num_hidden_layers : int > 0, L
    num_moe_layers : int in [0, L], L_moe
    tensor_parallel_size : int > 0, T (the attention's group)
    link_bandwidth, link_latency : [bytes/s, s], the per-step values the group's ring all-reduces at (the
        scale-up link inside a node; the hierarchical all-reduce's effective values beyond one,
        :func:`roofline.deployment.group_link`)
    the others : as :func:`alltoall_time`

    Returns
    -------
    [s]; at R = T = 1, 0; with L_moe = 0, the tensor-parallel all-reduces
    (:func:`roofline.formulas.decode_allreduce_time`).

    Raises
    ------
    InvalidValueError
        As :func:`alltoall_time`; L_moe > L (field ``expert_parallel_size``, the relation named).

    Examples
    --------
    >>> from fractions import Fraction  # 1 all-reduce (2) + 1 all-gather (1) + 2 all-to-alls of 1/2
    >>> decode_comm_time_ep(num_hidden_layers=1, num_moe_layers=1, tensor_parallel_size=2, batch=2,
    ...     hidden_size=1, activation_bytes=1, num_experts=2, experts_per_token=1, expert_parallel_size=2,
    ...     link_bandwidth=Fraction(1), link_latency=0, scale_up_bandwidth=1, scale_up_latency=0, node_gpus=2,
    ...     network_bandwidth=1, network_latency=0)
    Fraction(4, 1)
    """
    return _comm(kw)


_STEP: dict[str, Any] = {"overhead": "nonnegative", **_DECODE, **_COMM}


@formula(result="positive", topic="expert", proof=_P21, max_test_value=40, requires=_LAYERS_OK, **_STEP)
def step_time_ep(**kw: Any) -> Any:
    """Decode step time of an expert-parallel group [s]: one GPU's roofline + :func:`decode_comm_time_ep` + overhead.

    Parameters
    ----------
    batch, context_sum : as :func:`roofline.formulas.step_time` (the whole batch)
    weight_bytes : [bytes] > 0, **per GPU**: its share of attention and dense layers, the whole
        shared experts and the expected touched experts of its E / R (the mean rank)
    kv_bytes_per_token, flops_per_token, attention_flops_per_token : **per GPU** (the mean rank)
    bandwidth, peak_flops : one GPU's
    overhead : [s] >= 0
    the others : as :func:`decode_comm_time_ep`

    Returns
    -------
    [s], scalar or broadcast shape; at R = T = 1 exactly :func:`roofline.formulas.step_time`.

    Raises
    ------
    InvalidValueError
        As :func:`roofline.formulas.step_time` and :func:`decode_comm_time_ep`.

    Examples
    --------
    >>> from fractions import Fraction  # one GPU: the roofline alone, 4 bytes / 2 bytes/s
    >>> step_time_ep(batch=1, context_sum=0, weight_bytes=4, kv_bytes_per_token=0, flops_per_token=1,
    ...     attention_flops_per_token=0, bandwidth=Fraction(2), peak_flops=1, overhead=0, num_hidden_layers=1,
    ...     num_moe_layers=1, tensor_parallel_size=1, hidden_size=1, activation_bytes=1, num_experts=2,
    ...     experts_per_token=1, expert_parallel_size=1, link_bandwidth=Fraction(1), link_latency=1,
    ...     scale_up_bandwidth=1, scale_up_latency=1, node_gpus=1, network_bandwidth=1, network_latency=1)
    Fraction(2, 1)
    """
    mem, comp = _times({name: kw[name] for name in _DECODE})
    return maximum(mem, comp) + _comm(kw) + kw["overhead"]
