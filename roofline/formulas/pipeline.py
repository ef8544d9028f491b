"""Pipeline parallelism of P stages: the sends between stages, one batch's step, throughput, bubble.

Conventions (docs/conventions.md, "Pipeline parallelism"): the layers split into P contiguous
stages (vLLM's ``get_pp_indices``); each stage runs on its own tensor-parallel group of T GPUs.
One batch of B sequences goes through the stages in order; each of the P - 1 stage
boundaries sends B x hidden x activation bytes from every GPU of a stage to its peer in the
next (one send, point to point: bytes / bandwidth + latency), over the scale-up link when
both stages sit in one node and over the NIC when the boundary crosses nodes (TP groups
placed inside nodes, stages in order over the nodes).

The step of one batch (its latency, one batch in flight) keeps the package's one-max rule:

    max(sum over stages of memory time, sum over stages of compute time)
    + every stage's all-reduces + the P - 1 sends (+ overhead),

and the stage sums are the whole group's, so the first two terms are
:func:`roofline.formulas.step_time_tp` of one GPU's share of T alone. Pipeline parallelism
adds capacity (each GPU holds 1/P of the layers), not speed, and costs the sends. It stays a
lower bound: max(sum M, sum C) <= sum of max(M_s, C_s).

With n of P batches in flight (vLLM V0's virtual engines, one batch each) the pipeline emits
n x B tokens per step latency; the bubble share is 1 - n / P. A pipeline of unequal stages
with a batch in every stage is limited by its slowest stage: B / t_stage.

Derivations: ``roofline.symbolic.pipeline``; proof: ``proofs/p20_pipeline_parallel.py``.
"""

from __future__ import annotations

from typing import Any

from ._core import formula
from .parallel import _TP, step_time_tp

__all__ = [
    "pipeline_send_time",
    "pipeline_sends_time",
    "step_time_pp",
    "throughput_pp",
    "pipeline_bubble_share",
    "slowest_stage_throughput",
]

_P20 = "p20_pipeline_parallel.py"
_MSG: dict[str, Any] = dict(batch="positive", hidden_size="positive_int", activation_bytes="positive")
_SEND: dict[str, Any] = dict(send_bandwidth="positive", send_latency="nonnegative")
_SENDS: dict[str, Any] = dict(**_MSG, intra_node_sends="nonnegative_int", inter_node_sends="nonnegative_int",
                              **_SEND, network_bandwidth="positive", network_latency="nonnegative")
_PP: dict[str, Any] = {**_TP, **_SENDS}


@formula(topic="pipeline", proof=_P20, result="positive", **_MSG, **_SEND)
def pipeline_send_time(*, batch: Any, hidden_size: Any, activation_bytes: Any, send_bandwidth: Any,
                       send_latency: Any) -> Any:
    """Time of one stage boundary's send [s]: B h e / beta + alpha (one point-to-point send).

    Parameters
    ----------
    batch : [sequences], > 0
    hidden_size : [elements], integer >= 1
    activation_bytes : [bytes/element], > 0
    send_bandwidth : [bytes/s], > 0 (per GPU, per direction, of the link the boundary uses)
    send_latency : [s], >= 0

    Returns
    -------
    [s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-positive or non-finite argument (a negative latency).

    Notes
    -----
    docs/conventions.md, "Pipeline parallelism": every GPU of a stage sends the batch's
    hidden states to its peer in the next stage, in parallel, so the boundary costs one send.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = pipeline_send_time(batch=1, hidden_size=16384, activation_bytes=2, send_bandwidth=50 * 10**9,
    ...                        send_latency=Fraction(27, 10**7))
    >>> round(float(t) * 1e6, 5)  # [us]: 32 KiB over InfiniBand NDR, 0.65536 us + 2.7 us
    3.35536
    """
    return batch * hidden_size * activation_bytes / send_bandwidth + send_latency


def _sends(kw: dict[str, Any]) -> Any:
    msg = dict(batch=kw["batch"], hidden_size=kw["hidden_size"], activation_bytes=kw["activation_bytes"])
    return (kw["intra_node_sends"] * pipeline_send_time.unchecked(
                **msg, send_bandwidth=kw["send_bandwidth"], send_latency=kw["send_latency"])
            + kw["inter_node_sends"] * pipeline_send_time.unchecked(
                **msg, send_bandwidth=kw["network_bandwidth"], send_latency=kw["network_latency"]))


@formula(topic="pipeline", proof=_P20, result="nonnegative", **_SENDS)
def pipeline_sends_time(**kw: Any) -> Any:
    """Time of one batch's P - 1 stage sends [s]: s_nv sends over the node's link + s_net over the NIC.

    Parameters
    ----------
    batch, hidden_size, activation_bytes : as :func:`pipeline_send_time`
    intra_node_sends : [sends], integer >= 0 (boundaries inside a node)
    inter_node_sends : [sends], integer >= 0 (boundaries across nodes); the two sum to P - 1
    send_bandwidth, send_latency : the scale-up link [bytes/s] > 0, [s] >= 0
    network_bandwidth, network_latency : the NIC [bytes/s] > 0, [s] >= 0

    Returns
    -------
    [s], scalar or broadcast shape (0 with no boundary).

    Raises
    ------
    InvalidValueError
        A negative or non-finite argument, or a non-integer count.

    Examples
    --------
    >>> from fractions import Fraction
    >>> t = pipeline_sends_time(batch=1, hidden_size=16384, activation_bytes=2, intra_node_sends=0,
    ...     inter_node_sends=1, send_bandwidth=450 * 10**9, send_latency=Fraction(6, 10**7),
    ...     network_bandwidth=50 * 10**9, network_latency=Fraction(27, 10**7))
    >>> round(float(t) * 1e6, 4)  # one boundary across nodes (Llama 3.1 405B, batch 1)
    3.3554
    """
    return _sends(kw)


@formula(topic="pipeline", proof=_P20, result="positive", **_PP)
def step_time_pp(**kw: Any) -> Any:
    """Step time of one batch through a pipeline of P stages of T GPUs each [s]: step_time_tp + the sends.

    Parameters
    ----------
    batch, context_sum, weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops_per_token,
    bandwidth, peak_flops, overhead, num_hidden_layers, hidden_size, activation_bytes,
    tensor_parallel_size, link_bandwidth, link_latency : as :func:`roofline.formulas.step_time_tp`,
        the sizes summed over the stages (one GPU of each stage: one GPU's share of T alone)
    intra_node_sends, inter_node_sends, send_bandwidth, send_latency, network_bandwidth,
    network_latency : as :func:`pipeline_sends_time`

    Returns
    -------
    [s], scalar or broadcast shape: the latency of one decode step of one batch.

    Raises
    ------
    InvalidValueError
        A negative, zero (where > 0 is required) or non-finite argument.

    Notes
    -----
    max(sum_s M_s, sum_s C_s) + 2 L all-reduces + sends + overhead (docs/conventions.md,
    "Pipeline parallelism"): the one-max rule over all the layers a batch passes, as for the
    layers of one GPU; a lower bound, since max(sum M, sum C) <= sum max(M_s, C_s).
    With no send it is :func:`roofline.formulas.step_time_tp`.

    Examples
    --------
    >>> step_time_pp(batch=1, context_sum=0, weight_bytes=10, kv_bytes_per_token=0, flops_per_token=1,
    ...     attention_flops_per_token=0, bandwidth=1, peak_flops=1, overhead=0, num_hidden_layers=1,
    ...     hidden_size=1, activation_bytes=1, tensor_parallel_size=1, link_bandwidth=1, link_latency=0,
    ...     intra_node_sends=1, inter_node_sends=1, send_bandwidth=1, send_latency=1, network_bandwidth=1,
    ...     network_latency=2)
    15.0
    """
    tp = {name: kw[name] for name in _TP}
    return step_time_tp.unchecked(**tp) + _sends(kw)


_FLIGHT = ("batches_in_flight", "at most pipeline_parallel_size (one batch per virtual engine)",
           lambda **kw: bool(__import__("numpy").all(
               __import__("numpy").asarray(kw["batches_in_flight"]) <= kw["pipeline_parallel_size"])))


@formula(topic="pipeline", proof=_P20, requires=_FLIGHT, result="positive", **_PP,
         batches_in_flight="positive_int", pipeline_parallel_size="positive_int")
def throughput_pp(**kw: Any) -> Any:
    """Decode throughput of a pipeline with n of P batches in flight [tokens/s]: n x B / step_time_pp.

    Parameters
    ----------
    as :func:`step_time_pp`, and
    batches_in_flight : [batches], integer in [1, P] (n; vLLM V0 runs one per virtual engine)
    pipeline_parallel_size : [stages], integer >= 1 (P)

    Returns
    -------
    [tokens/s], scalar or broadcast shape (the whole pipeline's).

    Raises
    ------
    InvalidValueError
        As :func:`step_time_pp`; n above P (field ``batches_in_flight``).

    Notes
    -----
    Each batch takes one step latency to pass all P stages; n of them in flight overlap.
    With stages of unequal time the steady state is bounded by the slowest stage
    (:func:`slowest_stage_throughput`); this form spreads the latency evenly over the stages.

    Examples
    --------
    >>> throughput_pp(batch=2, context_sum=0, weight_bytes=10, kv_bytes_per_token=0, flops_per_token=1,
    ...     attention_flops_per_token=0, bandwidth=1, peak_flops=1, overhead=0, num_hidden_layers=1,
    ...     hidden_size=1, activation_bytes=1, tensor_parallel_size=1, link_bandwidth=1, link_latency=0,
    ...     intra_node_sends=1, inter_node_sends=0, send_bandwidth=1, send_latency=0, network_bandwidth=1,
    ...     network_latency=0, batches_in_flight=2, pipeline_parallel_size=2)
    0.3333333333333333
    """
    step = step_time_pp.unchecked(**{name: kw[name] for name in _PP})
    return kw["batches_in_flight"] * kw["batch"] / step + 0 * kw["pipeline_parallel_size"]


@formula(topic="pipeline", proof=_P20, requires=_FLIGHT, result="nonnegative",
         batches_in_flight="positive_int", pipeline_parallel_size="positive_int")
def pipeline_bubble_share(*, batches_in_flight: Any, pipeline_parallel_size: Any) -> Any:
    """Share of the pipeline's stage time left idle with n of P batches in flight [1]: 1 - n / P.

    Parameters
    ----------
    batches_in_flight : [batches], integer in [1, P]
    pipeline_parallel_size : [stages], integer >= 1

    Returns
    -------
    [1], in [0, 1 - 1/P]; scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-integer or non-positive argument; n above P.

    Examples
    --------
    >>> pipeline_bubble_share(batches_in_flight=1, pipeline_parallel_size=4)
    0.75
    """
    return 1 - batches_in_flight / pipeline_parallel_size


@formula(topic="pipeline", proof=_P20, result="positive", batch="positive", stage_time="positive")
def slowest_stage_throughput(*, batch: Any, stage_time: Any) -> Any:
    """Throughput of a full pipeline whose slowest stage takes t_stage per batch [tokens/s]: B / t_stage.

    Parameters
    ----------
    batch : [sequences], > 0 (per batch in flight)
    stage_time : [s], > 0: the slowest stage's own step (its max(memory, compute), its
        all-reduces and its send)

    Returns
    -------
    [tokens/s], scalar or broadcast shape.

    Raises
    ------
    InvalidValueError
        A non-positive or non-finite argument.

    Notes
    -----
    With a batch in every stage each stage hands on one batch per t_stage of the slowest;
    at most :func:`throughput_pp` with n = P when the stages are equal, and below it by the
    ratio of the slowest stage to the mean when L mod P != 0 (docs/conventions.md,
    "Pipeline parallelism").

    Examples
    --------
    >>> slowest_stage_throughput(batch=8, stage_time=2)
    4.0
    """
    return batch / stage_time
