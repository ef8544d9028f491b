"""The table of quantities: one description of every argument the formulas take.

Each :class:`Quantity` gives the name (equal to the fast paths' keyword argument and
the SymPy symbol's name), the short symbol proofs and docs print, the SI unit, what it
means, its domain and the assumptions behind it. Three readers use this one table:

* :mod:`roofline.symbolic` creates each symbol with the SymPy assumptions of its domain;
* :func:`roofline.formulas._core.formula` checks each fast path's argument against its
  domain (a formula may narrow it, e.g. ``kv_bytes_per_token`` > 0 where it divides, or
  ``batch`` an integer where the formula counts sequences; never widen it);
* the proofs print the short symbols and the legend.

Conventions: ``docs/conventions.md`` ("Units": bytes, seconds, FLOP, tokens inside the
library). Importing this module does not import SymPy.
"""

from __future__ import annotations

import attrs

__all__ = ["Quantity", "QUANTITIES", "DOMAINS", "quantity", "narrows"]

#: Domain kinds a quantity may have, and the SymPy assumptions each one means.
DOMAINS: dict[str, dict[str, bool]] = {
    "positive": dict(positive=True),
    "nonnegative": dict(nonnegative=True),
    "positive_int": dict(positive=True, integer=True),
    "nonnegative_int": dict(nonnegative=True, integer=True),
    "share": dict(positive=True),  # 0 < x <= 1
    "real": dict(real=True),
}

#: general domain -> the domains a formula may narrow it to.
_NARROWER: dict[str, frozenset[str]] = {
    "real": frozenset(DOMAINS),
    "nonnegative": frozenset({"nonnegative", "positive", "nonnegative_int", "positive_int", "share"}),
    "positive": frozenset({"positive", "positive_int", "share"}),
    "nonnegative_int": frozenset({"nonnegative_int", "positive_int"}),
    "positive_int": frozenset({"positive_int"}),
    "share": frozenset({"share"}),
}


def narrows(general: str, specific: str) -> bool:
    """Whether domain ``specific`` is ``general`` or a subset of it.

    >>> narrows("nonnegative", "positive_int"), narrows("positive_int", "positive")
    (True, False)
    """
    return specific in _NARROWER[general]


@attrs.frozen
class Quantity:
    """One quantity of the model.

    Attributes
    ----------
    name : str
        Keyword argument of the fast paths and name of the SymPy symbol.
    symbol : str
        Short name printed by proofs and docs (``"B"``, ``"W"``).
    unit : str
        SI unit inside the library (``"bytes"``, ``"s"``, ``"FLOP/s"``, ``"tokens"``; ``"1"`` for a ratio).
    meaning : str
        What it is, in one line.
    domain : str
        A key of :data:`DOMAINS`: the widest range any formula accepts.
    assumptions : str
        What the model assumes about it (empty when nothing beyond the domain).
    """

    name: str
    symbol: str
    unit: str
    meaning: str
    domain: str = attrs.field(validator=attrs.validators.in_(DOMAINS))
    assumptions: str = ""


_TABLE = (
    # one step
    Quantity("batch", "B", "sequences", "sequences in the batch (one decode step advances each by a token)",
             "positive", "real in the solve for the critical batch; an integer wherever sequences are counted"),
    Quantity("context", "c", "tokens", "context of one sequence, its KV cache including the new token",
             "nonnegative"),
    Quantity("context_sum", "S", "tokens", "sum of the batch's contexts", "nonnegative"),
    Quantity("weight_bytes", "W", "bytes", "bytes of weights read once per step", "positive",
             "every weight is read once per step, shared by the batch"),
    Quantity("kv_bytes_per_token", "k", "bytes/token", "KV cache bytes of one token of context (full attention)",
             "nonnegative", "2 x layers x KV heads x head_dim x bytes per KV element"),
    Quantity("flops_per_token", "F", "FLOP/token", "matmul FLOPs per token (2 x matmul parameters, or 2P)",
             "positive"),
    Quantity("attention_flops_per_token", "a", "FLOP/token^2",
             "attention FLOPs per generated token per context token (4 x layers x heads x head_dim)", "nonnegative"),
    Quantity("bandwidth", "BW", "bytes/s", "HBM bandwidth", "positive", "datasheet value unless measured"),
    Quantity("peak_flops", "peak", "FLOP/s", "dense tensor-core peak", "positive",
             "the dense figure, never the 2:4 sparsity one"),
    Quantity("overhead", "t0", "s", "fixed per-step overhead", "nonnegative", "0 in the bound"),
    # prefill
    Quantity("prompt_tokens", "p", "tokens", "prompt tokens of one request", "nonnegative_int"),
    Quantity("prefill_tokens", "N_p", "tokens", "tokens processed by a prefill step", "nonnegative"),
    Quantity("attention_pairs", "Q", "token pairs", "causal attention pairs of a prefill step", "nonnegative"),
    Quantity("output_tokens", "O", "tokens", "output tokens of one request (the first from prefill)",
             "positive_int"),
    # mixed steps (chunked prefill)
    Quantity("decode_rows", "D", "rows", "decode rows of a mixed step (running sequences advanced by a token)",
             "nonnegative"),
    Quantity("chunk_tokens", "q", "tokens", "prompt tokens of one chunk", "nonnegative_int"),
    Quantity("cached_tokens", "p0", "tokens", "prompt tokens already cached before a chunk (summed over a "
             "step's chunks)", "nonnegative"),
    # prefix caching
    Quantity("matched_blocks", "m", "blocks", "a prompt's leading full blocks whose content the KV pool already holds",
             "nonnegative_int", "block-granular, as vLLM V1's prefix cache"),
    Quantity("shared_prefix_tokens", "S_p", "tokens", "leading tokens every sequence of a group has in common",
             "nonnegative_int"),
    # KV cache
    Quantity("num_hidden_layers", "L", "layers", "decoder layers", "positive_int"),
    Quantity("num_key_value_heads", "H_kv", "heads", "KV heads (GQA; equal to the query heads for MHA)",
             "positive_int"),
    Quantity("head_dim", "d", "elements", "width of one attention head", "positive_int",
             "from the config when present, else hidden / heads"),
    Quantity("kv_bytes", "e", "bytes/element", "bytes per KV element", "positive"),
    Quantity("memory", "Mem", "bytes", "usable device memory (as software sees it, not the label)", "positive"),
    Quantity("utilization", "u", "1", "share of memory the engine may use", "share"),
    Quantity("reserved", "R", "bytes", "memory reserved for activations and the runtime", "nonnegative"),
    Quantity("budget", "M", "bytes", "KV budget", "nonnegative"),
    Quantity("block_size", "b", "tokens/block", "tokens per paged KV block", "positive_int"),
    Quantity("sliding_window", "w", "tokens", "sliding window of one attention layer: the keys a query attends "
             "over, itself included", "positive_int"),
    # batching
    Quantity("length_sum", "O_sum", "tokens", "sum of the batch's output lengths", "positive"),
    Quantity("length_max", "O_max", "tokens", "longest output of the batch", "positive"),
    Quantity("spread", "s", "1", "(high - low) / (high + low) of uniform lengths", "share"),
    Quantity("min_length", "lo", "tokens", "shortest length of a discrete uniform", "positive_int"),
    Quantity("length_range", "r", "tokens", "longest - shortest of a discrete uniform", "nonnegative_int"),
    Quantity("scale", "mu", "tokens", "mean of the exponential before truncation", "positive"),
    Quantity("cap", "cap", "tokens", "truncation point of the exponential", "positive"),
    Quantity("position", "j", "requests", "place in a first-come-first-served queue", "positive_int"),
    Quantity("requests", "n", "requests", "requests served one after another", "positive_int"),
    Quantity("service_time", "T", "s", "service time of one request", "nonnegative"),
    Quantity("step_time", "t", "s", "time of one step", "nonnegative"),
    Quantity("arrival_time", "t_arr", "s", "arrival after the batch started", "nonnegative"),
    # decode stretches
    Quantity("steps", "n", "steps", "consecutive decode steps of a fixed batch (a stretch)", "nonnegative_int"),
    Quantity("target_time", "t_*", "s", "a time measured from the stretch's start (e.g. the next arrival)",
             "nonnegative"),
    Quantity("pool_blocks", "P", "blocks", "KV blocks a batch may hold", "nonnegative_int"),
    # closed-loop serving
    Quantity("clients", "N", "clients", "closed-loop clients (the concurrency)", "positive_int"),
    Quantity("e2e_latency", "T_e2e", "s", "mean end-to-end latency of the clients' requests", "positive"),
    Quantity("think_time", "Z", "s", "a client's pause between a hand-back and its next request", "nonnegative"),
    # mixture of experts
    Quantity("num_experts", "E", "experts", "routed experts of one MoE layer", "positive_int"),
    Quantity("experts_per_token", "k_e", "experts", "routed experts each token picks (k <= E)", "positive_int",
             "uniform routing: every k-subset equally likely, tokens independent"),
    Quantity("shared_weight_bytes", "W_s", "bytes", "weight bytes every step reads: all but the routed experts",
             "positive"),
    Quantity("routed_expert_bytes", "X", "bytes", "bytes of one routed expert summed over the MoE layers",
             "nonnegative", "each MoE layer routes on its own, with the same expectation"),
    # hybrid models (recurrent layers)
    Quantity("state_bytes", "S_st", "bytes", "recurrent state one sequence holds in a hybrid's recurrent layers "
             "(conv + SSM), fixed in the context", "nonnegative",
             "read and written back once per sequence by every decode step"),
    Quantity("state_blocks", "s_b", "blocks", "KV blocks one sequence's recurrent state occupies in a hybrid's pool",
             "nonnegative_int", "ceil(state bytes / (block size x KV bytes per token))"),
    # sparse attention (DeepSeek-V3.2's DSA; docs/conventions.md, "Sparse attention")
    Quantity("index_topk", "K", "tokens", "cached tokens each query's top-k attention reads (index_topk)",
             "positive_int", "the indexer picks them; the cache keeps every token"),
    Quantity("capped_context_sum", "R", "tokens", "sum over the batch of min(c_i, index_topk)", "nonnegative"),
    Quantity("capped_attention_pairs", "Q_K", "token pairs", "query-key pairs of a prefill step under the top-k "
             "cap: sum over its queries at position t of min(t, index_topk)", "nonnegative"),
    Quantity("latent_bytes_per_token", "k_m", "bytes/token", "MLA latent KV bytes of one token summed over "
             "the layers (the part the top-k attention reads)", "nonnegative"),
    Quantity("index_bytes_per_token", "k_i", "bytes/token", "indexer key bytes of one token summed over the "
             "layers (FP8 values and their float32 scales)", "nonnegative", "the indexer reads every cached token"),
    Quantity("latent_attention_flops_per_token", "a_m", "FLOP/token^2", "MLA attention FLOPs per query per "
             "selected token, summed over the layers (absorbed form)", "nonnegative"),
    Quantity("index_flops_per_token", "a_i", "FLOP/token^2", "indexer FLOPs per query per cached token summed "
             "over the layers (2 x index heads x index head dim)", "nonnegative"),
    # tensor parallelism
    Quantity("tensor_parallel_size", "T", "GPUs", "GPUs in the tensor-parallel group", "positive_int",
             "1 is one GPU: no all-reduce"),
    Quantity("hidden_size", "h", "elements", "hidden size (width of the activations all-reduced per token)",
             "positive_int"),
    Quantity("activation_bytes", "e_a", "bytes/element", "bytes per all-reduced activation element", "positive",
             "2 for BF16/FP16 activations"),
    Quantity("message_bytes", "M_ar", "bytes", "bytes one all-reduce sums over the group", "nonnegative"),
    Quantity("link_bandwidth", "beta", "bytes/s", "GPU-to-GPU link bandwidth per GPU per direction", "positive",
             "half the bidirectional figure vendors print (NVLink, Infinity Fabric, PCIe)"),
    Quantity("link_latency", "alpha", "s", "latency of one ring step of an all-reduce (small message)",
             "nonnegative"),
    # groups that span nodes and pipeline parallelism (docs/conventions.md, "Groups that span nodes",
    # "Pipeline parallelism")
    Quantity("node_gpus", "G", "GPUs", "GPUs of the tensor-parallel group inside each node", "positive_int",
             "the group fills whole nodes: T is a multiple of G"),
    Quantity("network_bandwidth", "beta_n", "bytes/s", "inter-node NIC bandwidth per GPU per direction",
             "positive", "one NIC per GPU (InfiniBand NDR 400 Gb/s: 50e9 bytes/s)"),
    Quantity("network_latency", "alpha_n", "s", "latency of one inter-node ring step or send over the NIC",
             "nonnegative"),
    Quantity("pipeline_parallel_size", "P", "stages", "pipeline stages (vLLM's --pipeline-parallel-size)",
             "positive_int", "1 is no pipeline"),
    Quantity("batches_in_flight", "n_f", "batches", "batches in the pipeline at once (one per virtual engine)",
             "positive_int", "at most P"),
    Quantity("intra_node_sends", "s_nv", "sends", "stage boundaries whose send stays inside a node",
             "nonnegative_int"),
    Quantity("inter_node_sends", "s_net", "sends", "stage boundaries whose send crosses nodes (over the NIC)",
             "nonnegative_int"),
    Quantity("send_bandwidth", "beta_pp", "bytes/s", "bandwidth of a send between stages inside a node "
             "(the scale-up link, per GPU per direction)", "positive"),
    Quantity("send_latency", "alpha_pp", "s", "latency of one send between stages inside a node", "nonnegative"),
    Quantity("stage_time", "t_stage", "s", "time one stage takes for its part of one batch's step", "positive"),
    # expert parallelism (docs/conventions.md, "Expert parallelism")
    Quantity("expert_parallel_size", "R", "GPUs", "ranks of the expert-parallel group (E / R whole experts each)",
             "positive_int", "R = T (the tensor-parallel group); 1 is no expert parallelism"),
    Quantity("num_moe_layers", "L_moe", "layers", "MoE layers of the model (each routes, dispatches and combines)",
             "nonnegative_int"),
    Quantity("scale_up_bandwidth", "beta_su", "bytes/s", "scale-up link (NVLink) bandwidth per GPU per direction "
             "of an all-to-all's transfers inside a node", "positive"),
    Quantity("scale_up_latency", "alpha_su", "s", "latency of one all-to-all over the scale-up link (small message)",
             "nonnegative"),
    # speculative decoding (docs/conventions.md, "Speculative decoding")
    Quantity("speculative_tokens", "k_s", "tokens", "tokens the proposer proposes per sequence per step "
             "(vLLM's num_speculative_tokens)", "nonnegative_int", "0 is plain decode"),
    Quantity("acceptance_rate", "alpha_s", "1", "probability that each proposed token is accepted",
             "share", "independent positions, the same probability at each (Leviathan et al. 2023); one "
             "position's, given all before it accepted, in the per-position fold"),
    Quantity("tokens_after_position", "T_s", "tokens", "expected tokens a speculative step makes from the next "
             "position on, given every proposal up to it accepted", "positive",
             "T_{i+1} of the fold T_i = 1 + alpha_i T_{i+1}; 1 after the last proposal (the bonus token)"),
    Quantity("proposer_time", "t_d", "s", "time the proposer takes per step for the whole batch's proposals",
             "nonnegative", "0 for n-gram lookup"),
    Quantity("draft_cost_ratio", "r_d", "1", "the proposer's time per proposed token as a share of a target decode "
             "step (Leviathan et al.'s c)", "nonnegative"),
    # disaggregated prefill and decode (docs/conventions.md, "Disaggregated prefill and decode")
    Quantity("decode_kv_bytes_per_token", "k_d", "bytes/token", "KV bytes per token one decode-side GPU holds",
             "nonnegative", "the decode deployment's share: the layout the transferred KV lands in"),
    Quantity("prefill_tensor_parallel_size", "T_p", "GPUs", "tensor-parallel size of one prefill instance",
             "positive_int"),
    Quantity("decode_tensor_parallel_size", "T_d", "GPUs", "tensor-parallel size of one decode instance",
             "positive_int"),
    Quantity("transfer_bytes", "M_kv", "bytes", "KV bytes one NIC moves for one request's transfer", "nonnegative",
             "every GPU has its own NIC; the busiest sets the time"),
    Quantity("transfer_bandwidth", "beta_n", "bytes/s", "KV transfer bandwidth per GPU per direction (the NIC)",
             "positive", "InfiniBand or RoCE per GPU, or a value given by the user"),
    Quantity("transfer_latency", "alpha_n", "s", "latency of one KV transfer between the pools", "nonnegative"),
    # the estimate (docs/conventions.md, "Bound and estimate")
    Quantity("eta_bw", "eta_bw", "1", "achieved share of the datasheet HBM bandwidth (an engine profile's constant)",
             "share", "1 in the bound; measured, published or fitted on named calibration rows in an estimate"),
    Quantity("eta_mm", "eta_mm", "1", "achieved share of the dense matmul peak (an engine profile's constant)",
             "share", "1 in the bound; measured or published in an estimate"),
    Quantity("t_step", "t_step", "s", "fixed time per step outside the roofline (CPU, scheduling, sampling)",
             "nonnegative", "0 in the bound"),
    Quantity("t_layer", "t_layer", "s", "fixed time per layer per step (kernel launches, small kernels)",
             "nonnegative", "0 in the bound"),
    Quantity("t_seq", "t_seq", "s", "time per running sequence per decode step (CPU scheduling, sampling, "
             "detokenisation per sequence)", "nonnegative", "0 in the bound"),
)

#: name -> Quantity, for every argument of every registered formula.
QUANTITIES: dict[str, Quantity] = {q.name: q for q in _TABLE}


def quantity(name: str) -> Quantity:
    """The :class:`Quantity` called ``name``.

    Raises
    ------
    KeyError
        If no quantity has that name (a programming error: add it to the table).
    """
    try:
        return QUANTITIES[name]
    except KeyError:
        raise KeyError(f"{name!r} is not in roofline.quantities.QUANTITIES; add it to the table") from None
