"""Tensor parallelism of degree T: the ring all-reduce and the decode step time of the group.

Conventions (docs/conventions.md, "Tensor parallelism"): each layer of a decode step ends
its attention and its MLP with an all-reduce of M = B x hidden x activation bytes. A ring
all-reduce over T GPUs takes

    2 (T - 1) / T x M / link_bandwidth + 2 (T - 1) x link_latency

(a reduce-scatter and an all-gather of T - 1 steps each; every step moves M / T bytes per
GPU and pays one link latency). The step time of the group is

    max(memory time, compute time) of one GPU's share + 2 L all-reduces (+ overhead),

with no overlap of communication and compute. The per-GPU weight bytes, KV bytes per token
and FLOPs per token are arguments (how a model splits over T GPUs is decided by the model);
with T = 1 every all-reduce term is exactly 0 and :func:`step_time_tp` equals
:func:`roofline.formulas.step_time`.

``link_bandwidth`` is per GPU and per direction (half the bidirectional figure vendors
print) and ``link_latency`` the small-message latency of one ring step: see
:class:`roofline.hardware.Link` for the sourced values of each accelerator.

Arithmetic intensity and the critical batch per GPU need no new form: they are
:func:`roofline.formulas.arithmetic_intensity` and :func:`roofline.formulas.critical_batch`
of one GPU's share (the all-reduce adds time to both regimes and moves neither side of
the roofline).

A group larger than one node (docs/conventions.md, "Groups that span nodes") all-reduces
hierarchically: :func:`hierarchical_allreduce_time`; it is linear in M like the ring, so it is
the ring at an effective per-step bandwidth and latency (:func:`hierarchical_link_bandwidth`,
:func:`hierarchical_link_latency`), which is how every decode-step formula above prices it.

Derivations (SymPy ``summation``, ``limit``, ``solve``): ``roofline.symbolic.parallel``;
proofs: ``proofs/p11_tensor_parallel.py``, ``proofs/p20_pipeline_parallel.py`` (the hierarchy).
"""

from __future__ import annotations

from typing import Any

from ._core import formula, maximum
from .step_time import _DECODE, _times

__all__ = [
    "allreduce_bytes",
    "ring_allreduce_time",
    "ring_allreduce_bandwidth_time",
    "ring_allreduce_latency_time",
    "decode_allreduce_time",
    "decode_allreduce_bandwidth_time",
    "decode_allreduce_latency_time",
    "step_time_tp",
    "throughput_tp",
    "allreduce_crossover_batch",
    "hierarchical_allreduce_time",
    "hierarchical_link_bandwidth",
    "hierarchical_link_latency",
]

_P11 = "p11_tensor_parallel.py"
_LINK: dict[str, Any] = dict(tensor_parallel_size="positive_int", link_bandwidth="positive", link_latency="nonnegative")
_MESSAGE: dict[str, Any] = dict(batch="positive", hidden_size="positive_int", activation_bytes="positive")
_DECODE_AR: dict[str, Any] = dict(num_hidden_layers="positive_int", **_MESSAGE, **_LINK)


@formula(topic="parallel", proof=_P11, **_MESSAGE)
def allreduce_bytes(*, batch: Any, hidden_size: Any, activation_bytes: Any) -> Any:
    """Bytes one tensor-parallel all-reduce of a decode step sums over the group [bytes]: B x h x e.

    Parameters
    ----------
    batch : [sequences], > 0
        B; each sequence contributes one token's activations.
    hidden_size : [elements], integer >= 1
    activation_bytes : [bytes/element], > 0
        2 for BF16/FP16 activations.

    Returns
    -------
    [bytes], scalar or the broadcast shape of the inputs.

    Raises
    ------
    InvalidValueError
        A non-positive or non-finite argument, or a non-integer hidden size.

    Notes
    -----
    docs/conventions.md, "Tensor parallelism".

    Examples
    --------
    >>> allreduce_bytes(batch=1, hidden_size=8192, activation_bytes=2)  # Llama 3.1 70B, BF16
    16384
    """
    return batch * hidden_size * activation_bytes


@formula(topic="parallel", proof=_P11, message_bytes="nonnegative", **_LINK)
def ring_allreduce_time(
    *, message_bytes: Any, tensor_parallel_size: Any, link_bandwidth: Any, link_latency: Any
) -> Any:
    """Time of one ring all-reduce of M bytes over T GPUs [s].

    Parameters
    ----------
    message_bytes : [bytes], >= 0
        M, the size of the buffer every GPU holds and the group sums.
    tensor_parallel_size : [GPUs], integer >= 1
        T; T = 1 all-reduces nothing (0 s).
    link_bandwidth : [bytes/s], > 0
        Per GPU, per direction.
    link_latency : [s], >= 0
        Latency of one ring step.

    Returns
    -------
    [s], scalar or the broadcast shape of the inputs.

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or T not an integer >= 1.

    Notes
    -----
    2 (T - 1) / T x M / beta + 2 (T - 1) x alpha: the sum over the 2 (T - 1) steps of a
    reduce-scatter and an all-gather of alpha + (M / T) / beta (docs/conventions.md,
    "Tensor parallelism"). NCCL prices a ring all-reduce the same way plus a fixed
    per-call latency (NVIDIA/nccl, src/graph/tuning.cc), which this convention leaves out.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = ring_allreduce_time(message_bytes=Fraction(16384), tensor_parallel_size=8,
    ...                         link_bandwidth=450 * 10**9, link_latency=Fraction(6, 10**7))
    >>> t * 10**6  # [us]: 8.4 us of latency + 0.0637 us of bandwidth
    Fraction(238042, 28125)
    """
    t = tensor_parallel_size
    return 2 * (t - 1) * message_bytes / (t * link_bandwidth) + 2 * (t - 1) * link_latency


@formula(topic="parallel", proof=_P11, message_bytes="nonnegative", tensor_parallel_size="positive_int",
         link_bandwidth="positive")
def ring_allreduce_bandwidth_time(*, message_bytes: Any, tensor_parallel_size: Any, link_bandwidth: Any) -> Any:
    """The bandwidth term of one ring all-reduce [s]: 2 (T - 1) / T x M / beta.

    Parameters
    ----------
    message_bytes : [bytes], >= 0
    tensor_parallel_size : [GPUs], integer >= 1
    link_bandwidth : [bytes/s], > 0 (per GPU, per direction)

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or T not an integer >= 1.

    Notes
    -----
    The ring time with no link latency (docs/conventions.md, "Tensor parallelism").

    Examples
    --------
    >>> ring_allreduce_bandwidth_time(message_bytes=16, tensor_parallel_size=2, link_bandwidth=1)
    16.0
    """
    t = tensor_parallel_size
    return 2 * (t - 1) * message_bytes / (t * link_bandwidth)


@formula(topic="parallel", proof=_P11, tensor_parallel_size="positive_int", link_latency="nonnegative")
def ring_allreduce_latency_time(*, tensor_parallel_size: Any, link_latency: Any) -> Any:
    """The latency term of one ring all-reduce [s]: 2 (T - 1) x alpha, whatever the message size.

    Parameters
    ----------
    tensor_parallel_size : [GPUs], integer >= 1
    link_latency : [s], >= 0 (one ring step)

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A negative or non-finite latency, or T not an integer >= 1.

    Notes
    -----
    The limit of the ring time as the link bandwidth grows without bound (SymPy ``limit``).

    Examples
    --------
    >>> from fractions import Fraction
    >>> ring_allreduce_latency_time(tensor_parallel_size=8, link_latency=Fraction(6, 10**7)) * 10**6
    Fraction(42, 5)
    """
    return 2 * (tensor_parallel_size - 1) * link_latency


def _message(kw: dict[str, Any]) -> Any:
    return allreduce_bytes.unchecked(batch=kw["batch"], hidden_size=kw["hidden_size"],
                                     activation_bytes=kw["activation_bytes"])


def _bandwidth_term(kw: dict[str, Any]) -> Any:
    return 2 * kw["num_hidden_layers"] * ring_allreduce_bandwidth_time.unchecked(
        message_bytes=_message(kw), tensor_parallel_size=kw["tensor_parallel_size"],
        link_bandwidth=kw["link_bandwidth"],
    )


def _latency_term(kw: dict[str, Any]) -> Any:
    return 2 * kw["num_hidden_layers"] * ring_allreduce_latency_time.unchecked(
        tensor_parallel_size=kw["tensor_parallel_size"], link_latency=kw["link_latency"],
    )


@formula(topic="parallel", proof=_P11, **_DECODE_AR)
def decode_allreduce_time(**kw: Any) -> Any:
    """All-reduce time of one decode step of a tensor-parallel group [s]: 2 L ring all-reduces of B h e bytes.

    Parameters
    ----------
    num_hidden_layers : [layers], integer >= 1
        L; each layer all-reduces after attention and after the MLP.
    batch : [sequences], > 0
    hidden_size : [elements], integer >= 1
    activation_bytes : [bytes/element], > 0
    tensor_parallel_size : [GPUs], integer >= 1 (T = 1 gives 0)
    link_bandwidth : [bytes/s], > 0 (per GPU, per direction)
    link_latency : [s], >= 0 (one ring step)

    Returns
    -------
    [s], scalar or broadcast shape: :func:`decode_allreduce_bandwidth_time` +
    :func:`decode_allreduce_latency_time`.

    Raises
    ------
    InvalidValueError
        A negative, zero (where > 0 is required) or non-finite argument.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = decode_allreduce_time(num_hidden_layers=80, batch=1, hidden_size=8192, activation_bytes=2,
    ...     tensor_parallel_size=8, link_bandwidth=450 * 10**9, link_latency=Fraction(6, 10**7))
    >>> round(float(t) * 1e3, 4)  # Llama 3.1 70B on 8 H100 SXM, batch 1: 1.344 ms of latency + 10 us
    1.3542
    """
    return _bandwidth_term(kw) + _latency_term(kw)


@formula(topic="parallel", proof=_P11, **_DECODE_AR)
def decode_allreduce_bandwidth_time(**kw: Any) -> Any:
    """Bandwidth term of a decode step's all-reduces [s]: 2 L x 2 (T - 1) / T x B h e / beta; grows with B.

    Parameters and Raises as :func:`decode_allreduce_time` (``link_latency`` does not enter;
    it is accepted, and broadcast, so that both terms take the arguments of the whole).

    Returns
    -------
    [s], scalar or broadcast shape.

    Examples
    --------
    >>> t = decode_allreduce_bandwidth_time(num_hidden_layers=80, batch=1, hidden_size=8192,
    ...     activation_bytes=2, tensor_parallel_size=8, link_bandwidth=450 * 10**9, link_latency=0)
    >>> round(t * 1e6, 2)
    10.19
    """
    return _bandwidth_term(kw) + 0 * kw["link_latency"]


@formula(topic="parallel", proof=_P11, **_DECODE_AR)
def decode_allreduce_latency_time(**kw: Any) -> Any:
    """Latency term of a decode step's all-reduces [s]: 2 L x 2 (T - 1) x alpha, the same at every batch.

    Parameters and Raises as :func:`decode_allreduce_time` (the batch, hidden size,
    activation bytes and link bandwidth do not enter; they are accepted, and broadcast, so
    that both terms take the arguments of the whole).

    Returns
    -------
    [s], scalar or broadcast shape.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = decode_allreduce_latency_time(num_hidden_layers=80, batch=1, hidden_size=8192, activation_bytes=2,
    ...     tensor_parallel_size=8, link_bandwidth=450 * 10**9, link_latency=Fraction(6, 10**7))
    >>> round(float(t) * 1e3, 4)  # [ms]: 160 all-reduces x 14 ring steps x 0.6 us
    1.344
    """
    return _latency_term(kw) + 0 * _message(kw) * kw["link_bandwidth"]


_TP: dict[str, Any] = {"overhead": "nonnegative", **_DECODE, **_DECODE_AR}


def _step_kw(kw: dict[str, Any]) -> dict[str, Any]:
    return {name: kw[name] for name in _DECODE}


def _ar_kw(kw: dict[str, Any]) -> dict[str, Any]:
    return {name: kw[name] for name in _DECODE_AR}


@formula(topic="parallel", proof=_P11, **_TP)
def step_time_tp(**kw: Any) -> Any:
    """Decode step time of a tensor-parallel group of T GPUs [s]: one GPU's roofline + the all-reduces + overhead.

    Parameters
    ----------
    batch : [sequences], > 0 (the whole batch; every GPU works on all B sequences)
    context_sum : [tokens], >= 0 (sum of the B contexts)
    weight_bytes : [bytes], > 0, **per GPU**
    kv_bytes_per_token : [bytes/token], >= 0, **per GPU**
    flops_per_token : [FLOP/token], > 0, **per GPU**
    attention_flops_per_token : [FLOP/(token x context token)], >= 0, **per GPU**
    bandwidth : [bytes/s], > 0 (one GPU's HBM)
    peak_flops : [FLOP/s], > 0 (one GPU's dense peak)
    overhead : [s], >= 0
    num_hidden_layers, hidden_size, activation_bytes, tensor_parallel_size, link_bandwidth,
    link_latency : as :func:`decode_allreduce_time`

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A negative, zero (where > 0 is required) or non-finite argument.

    Notes
    -----
    max(memory time, compute time) + decode_allreduce_time + overhead: the roofline of one
    GPU's share plus communication that does not overlap it (docs/conventions.md, "Tensor
    parallelism"). With T = 1 (and the whole model's sizes) it is exactly
    :func:`roofline.formulas.step_time`. With per-GPU sizes at least 1/T of the whole
    model's, it is never below max(memory, compute) of the whole model / T.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = step_time_tp(batch=1, context_sum=0, weight_bytes=17_640_734_720, kv_bytes_per_token=40_960,
    ...     flops_per_token=17_375_428_608, attention_flops_per_token=327_680, bandwidth=3_350 * 10**9,
    ...     peak_flops=989_400 * 10**9, overhead=0, num_hidden_layers=80, hidden_size=8192, activation_bytes=2,
    ...     tensor_parallel_size=8, link_bandwidth=450 * 10**9, link_latency=Fraction(6, 10**7))
    >>> round(float(t) * 1e3, 3)  # Llama 3.1 70B on 8 H100 SXM: 5.266 ms of HBM + 1.354 ms of all-reduce
    6.62
    """
    mem, comp = _times(_step_kw(kw))
    return maximum(mem, comp) + decode_allreduce_time.unchecked(**_ar_kw(kw)) + kw["overhead"]


@formula(topic="parallel", proof=_P11, **_TP)
def throughput_tp(**kw: Any) -> Any:
    """Decode throughput of the whole tensor-parallel group [tokens/s]: B / step_time_tp.

    Parameters and Raises as :func:`step_time_tp`.

    Returns
    -------
    [tokens/s], scalar or broadcast shape (the group's, not one GPU's).

    Examples
    --------
    >>> throughput_tp(batch=4, context_sum=0, weight_bytes=1, kv_bytes_per_token=0, flops_per_token=1,
    ...     attention_flops_per_token=0, bandwidth=1, peak_flops=4, overhead=0, num_hidden_layers=1,
    ...     hidden_size=1, activation_bytes=1, tensor_parallel_size=1, link_bandwidth=1, link_latency=1)
    4.0
    """
    return kw["batch"] / step_time_tp.unchecked(**kw)


_CROSS: dict[str, Any] = dict(hidden_size="positive_int", activation_bytes="positive", **_LINK)


@formula(
    topic="parallel", proof=_P11,
    requires=("tensor_parallel_size", "a group of at least 2 GPUs (one GPU all-reduces nothing)",
              lambda **kw: kw["tensor_parallel_size"] >= 2),
    **_CROSS,
)
def allreduce_crossover_batch(
    *, hidden_size: Any, activation_bytes: Any, tensor_parallel_size: Any, link_bandwidth: Any, link_latency: Any
) -> Any:
    """The batch at which the all-reduce's bandwidth term equals its latency term [sequences]: T alpha beta / (h e).

    Below it the all-reduces cost mostly latency (the same at every batch); above it,
    mostly bandwidth (growing with the batch).

    Parameters
    ----------
    hidden_size : [elements], integer >= 1
    activation_bytes : [bytes/element], > 0
    tensor_parallel_size : [GPUs], integer >= 2
    link_bandwidth : [bytes/s], > 0 (per GPU, per direction)
    link_latency : [s], >= 0 (0 gives 0: bandwidth dominates at every batch)

    Returns
    -------
    [sequences], real, scalar or broadcast shape. The number of layers cancels.

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or T below 2.

    Notes
    -----
    solve(decode_allreduce_bandwidth_time = decode_allreduce_latency_time, B) (SymPy).

    Examples
    --------
    >>> from fractions import Fraction
    >>> b = allreduce_crossover_batch(hidden_size=8192, activation_bytes=2, tensor_parallel_size=8,
    ...     link_bandwidth=450 * 10**9, link_latency=Fraction(6, 10**7))
    >>> b, float(b)  # Llama 3.1 70B on 8 H100 SXM: from batch 132 on, bandwidth dominates
    (Fraction(16875, 128), 131.8359375)
    """
    return tensor_parallel_size * link_latency * link_bandwidth / (hidden_size * activation_bytes)


# ------------------------------------------------------------------ groups that span nodes

_P20 = "p20_pipeline_parallel.py"
_HIER: dict[str, Any] = dict(tensor_parallel_size="positive_int", node_gpus="positive_int",
                             link_bandwidth="positive", link_latency="nonnegative",
                             network_bandwidth="positive", network_latency="nonnegative")
_WHOLE_NODES = ("tensor_parallel_size", "a group of whole nodes (T a multiple of node_gpus, node_gpus <= T)",
                lambda **kw: _whole_nodes(kw["tensor_parallel_size"], kw["node_gpus"]))


def _whole_nodes(t: Any, g: Any) -> Any:
    import numpy as np

    t, g = np.asarray(t), np.asarray(g)
    return bool(np.all((g <= t) & (t % g == 0)))


@formula(topic="parallel", proof=_P20, requires=_WHOLE_NODES, message_bytes="nonnegative", **_HIER)
def hierarchical_allreduce_time(
    *, message_bytes: Any, tensor_parallel_size: Any, node_gpus: Any, link_bandwidth: Any, link_latency: Any,
    network_bandwidth: Any, network_latency: Any,
) -> Any:
    """Time of one hierarchical all-reduce of M bytes over T GPUs in T / G nodes of G [s].

    Intra-node reduce-scatter (G - 1 ring steps of M / G over the node's link), inter-node
    ring all-reduce of the M / G bytes each GPU then holds among the N = T / G GPUs of the
    same local rank (2 (N - 1) steps of M / (G N) over the NIC), intra-node all-gather
    (G - 1 steps of M / G).

    Parameters
    ----------
    message_bytes : [bytes], >= 0
    tensor_parallel_size : [GPUs], integer >= 1, a multiple of ``node_gpus``
    node_gpus : [GPUs], integer in [1, T]: G, the group's GPUs in each node
    link_bandwidth, link_latency : [bytes/s] > 0, [s] >= 0: the link inside a node
    network_bandwidth, network_latency : [bytes/s] > 0, [s] >= 0: the NIC, per GPU per direction

    Returns
    -------
    [s], scalar or broadcast shape:
    2 (G - 1) / G x M / beta + 2 (G - 1) alpha + 2 (T - G) / T x M / (G beta_n) + 2 (T - G) / G x alpha_n.

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or T not a multiple of G (field ``tensor_parallel_size``).

    Notes
    -----
    docs/conventions.md, "Groups that span nodes"; NCCL's inter-node ring likewise runs one
    ring per local rank over that rank's NIC. At G = T (one node) it is
    :func:`ring_allreduce_time` exactly.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = hierarchical_allreduce_time(message_bytes=32768, tensor_parallel_size=16, node_gpus=8,
    ...     link_bandwidth=450 * 10**9, link_latency=Fraction(6, 10**7), network_bandwidth=50 * 10**9,
    ...     network_latency=Fraction(27, 10**7))
    >>> round(float(t) * 1e6, 4)  # [us]: 8.4 + 0.1274 over NVLink, 5.4 + 0.0819 over InfiniBand
    14.0094
    """
    t, g = tensor_parallel_size, node_gpus
    return (2 * (g - 1) * message_bytes / (g * link_bandwidth) + 2 * (g - 1) * link_latency
            + 2 * (t - g) * message_bytes / (t * g * network_bandwidth) + 2 * (t - g) * network_latency / g)


_HIER_T2 = ("tensor_parallel_size", "a group of at least 2 GPUs filling whole nodes (T a multiple of node_gpus)",
            lambda **kw: _whole_nodes(kw["tensor_parallel_size"], kw["node_gpus"])
            and bool(__import__("numpy").all(__import__("numpy").asarray(kw["tensor_parallel_size"]) >= 2)))


@formula(topic="parallel", proof=_P20, requires=_HIER_T2, result="positive", **_HIER)
def hierarchical_link_bandwidth(
    *, tensor_parallel_size: Any, node_gpus: Any, link_bandwidth: Any, link_latency: Any,
    network_bandwidth: Any, network_latency: Any,
) -> Any:
    """The per-step bandwidth at which the ring over T GPUs takes the hierarchical all-reduce's bandwidth time [bytes/s].

    1 / beta_eff = T / (T - 1) x ((G - 1) / (G beta) + (T - G) / (T G beta_n)); beta_eff = beta at G = T.

    Parameters
    ----------
    As :func:`hierarchical_allreduce_time` without ``message_bytes``; T >= 2. The latencies
    do not enter (accepted so that both effective values take the same arguments).

    Returns
    -------
    [bytes/s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-positive bandwidth, T below 2 or not a multiple of G.

    Notes
    -----
    solve(ring bandwidth term at beta_eff = hierarchical bandwidth term, beta_eff) (SymPy);
    docs/conventions.md, "Groups that span nodes".

    Examples
    --------
    >>> from fractions import Fraction
    >>> hierarchical_link_bandwidth(tensor_parallel_size=16, node_gpus=8, link_bandwidth=Fraction(450 * 10**9),
    ...     link_latency=0, network_bandwidth=Fraction(50 * 10**9), network_latency=0) / 10**9  # [GB/s]
    Fraction(6750, 23)
    """
    t, g = tensor_parallel_size, node_gpus
    return (t - 1) * t * g * link_bandwidth * network_bandwidth / (
        t * t * (g - 1) * network_bandwidth + t * (t - g) * link_bandwidth) + 0 * link_latency * network_latency


@formula(topic="parallel", proof=_P20, requires=_HIER_T2, result="nonnegative", **_HIER)
def hierarchical_link_latency(
    *, tensor_parallel_size: Any, node_gpus: Any, link_bandwidth: Any, link_latency: Any,
    network_bandwidth: Any, network_latency: Any,
) -> Any:
    """The per-step latency at which the ring over T GPUs takes the hierarchical all-reduce's latency time [s].

    alpha_eff = ((G - 1) alpha + (T - G) / G x alpha_n) / (T - 1); alpha_eff = alpha at G = T.

    Parameters
    ----------
    As :func:`hierarchical_link_bandwidth` (the bandwidths do not enter).

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A negative latency, T below 2 or not a multiple of G.

    Notes
    -----
    solve(ring latency term at alpha_eff = hierarchical latency term, alpha_eff) (SymPy).

    Examples
    --------
    >>> from fractions import Fraction
    >>> hierarchical_link_latency(tensor_parallel_size=16, node_gpus=8, link_bandwidth=1,
    ...     link_latency=Fraction(6, 10**7), network_bandwidth=1, network_latency=Fraction(27, 10**7)) * 10**6
    Fraction(23, 50)
    """
    t, g = tensor_parallel_size, node_gpus
    return ((g - 1) * link_latency + (t - g) * network_latency / g) / (t - 1) + 0 * link_bandwidth * network_bandwidth
