"""``roofline report``: the lesson's numbers for a model on an accelerator, one derivation each.

Default: Llama 3.1 8B in BF16 on H100 SXM, context 1,000 tokens, batch sizes 1, 8, 64,
256 and the KV limit, a 53 GB KV budget (the lesson's) beside the budget a real H100
leaves at 0.9 utilization: usable memory x 0.9 - weights - a reserve for the activation
peak and non-torch memory taken from a published vLLM log for the model size (named with
its source; not given where no log is known), and the upper bound with reserve 0. Every
number names its FLOPs convention where it depends on one: "exact" (2 x matmul parameters
+ 4 L H d c attention FLOPs) or "2p" (2 x P, the lesson's round figure).

The table's KV limit is the most sequences the upper-bound budget (reserve 0) holds at the
context, in paged blocks; when ``--kv-budget-gb`` is given, that budget is the table's KV
limit instead (``--utilization`` still sets the real and upper-bound budgets shown beside
it). The table gives the bound (memory or compute) of each half: weights only, and with
each sequence's KV reads; ``--json`` gives the inputs it used under ``inputs``.

Every time is the roofline bound (datasheet constants, no overhead: a lower bound) unless
marked [estimate]: with ``--estimate PROFILE`` (an engine profile such as ``vllm``,
``gpt-fast``, ``lmdeploy``, ``trtllm``) the report adds that profile's estimate beside the
bound, with the profile's constants and their sources (docs/conventions.md, "Bound and
estimate").
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from typing import Any

import attrs

from .. import estimate
from .. import estimate as estimate_mod
from .._checks import check_int, check_positive
from ..deployment import FROM_DEPLOYMENT, Deployment, as_deployment, profile
from ..errors import InvalidValueError
from ..hardware import Accelerator
from ..models import ModelConfig
from ..profiles import OUTSIDE_FITTED_RANGE, EngineProfile, batch_span, version_note
from ..units import GB, fit_width, format_time
from ._answers import add_answer_options, answer_context, answers, format_answers
from ._args import (
    acceptance_shown,
    add_estimate_option,
    add_expert_parallel_option,
    add_model_options,
    add_pipeline_parallel_option,
    add_speculative_options,
    add_tensor_parallel_option,
    chosen_tensor_parallel_note,
    citation_url,
    deployment_from_args,
    int_arg,
    number_arg,
    plain,
    speculative_pair,
)

DEFAULT_BATCHES = (1, 8, 64, 256)
LESSON_KV_BUDGET_GB = 53


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand."""
    p = sub.add_parser(
        "report",
        help="the lesson's numbers for a model on an accelerator",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(p)
    p.add_argument("--context", type=int_arg("--context", 1), default=None,
                   help="tokens of context per sequence (default: 1000; with --input-len P and --output-len O, "
                        "P + O - 1, the last decode step's)")
    p.add_argument("--batch", type=int_arg("--batch", 1), nargs="+", default=list(DEFAULT_BATCHES),
                   help="batch sizes for the table; the KV limit is added (default: 1 8 64 256)")
    p.add_argument("--kv-budget-gb", type=number_arg("--kv-budget-gb", positive=True), default=None,
                   help="a KV budget in GB (1e9 bytes) to set beside the real one; given, it is also the table's KV "
                        "limit (default: the lesson's 53, beside; the KV limit then comes from the upper bound); "
                        "per GPU under --tensor-parallel-size T > 1, the lesson's 53 included")
    p.add_argument("--utilization", "--gpu-memory-utilization",
                   type=number_arg("--utilization", positive=True, at_most_one=True),
                   default=Fraction(9, 10), help="share of usable memory the server may use (default: 0.9)")
    p.add_argument("--block-size", type=int_arg("--block-size", 1), default=16,
                   help="paged KV block size in tokens (default: %(default)s)")
    add_answer_options(p)
    add_estimate_option(p)
    add_tensor_parallel_option(p, default=None, budgets="every KV budget (the lesson's 53 GB, --kv-budget-gb, "
                                                          "the real one) is one GPU's")
    add_pipeline_parallel_option(p)
    add_expert_parallel_option(p)
    add_speculative_options(p)
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")
    p.set_defaults(func=run)


def build_report(
    model: ModelConfig | Deployment,
    accelerator: Accelerator | None = None,
    *,
    context: int = 1000,
    batches: tuple[int, ...] | list[int] = DEFAULT_BATCHES,
    kv_budget: Any = LESSON_KV_BUDGET_GB * GB,
    utilization: Any = Fraction(9, 10),
    block_size: int = 16,
    estimate: Any = FROM_DEPLOYMENT,
    kv_limit_from: str = "upper_bound",
    tensor_parallel_size: int = FROM_DEPLOYMENT,
    speculative: Any = None,
    acceptance_rate: Any = None,
) -> dict[str, Any]:
    """All the report's numbers as a JSON-ready dict (SI units, floats).

    Parameters
    ----------
    model : Deployment or ModelConfig
        A Deployment: its model, accelerator, T and profile (its FLOPs convention is not used: the
        report gives both, and its table the exact count). A ModelConfig takes them as the
        arguments (:func:`roofline.deployment.as_deployment`).
    accelerator : Accelerator (beside a ModelConfig only)
    context : int >= 1 [tokens] per sequence (its KV cache, the new token included)
    batches : sequence of int > 0 [sequences]; the KV limit at ``context`` is added
    kv_budget : [bytes] > 0, a budget to set beside the real one (lesson: 53e9); one GPU's under tensor parallelism
    utilization : in (0, 1], for the real budget
    block_size : int > 0 [tokens/block]
    estimate : str, EngineProfile or None (a Deployment's own by default)
        An engine profile (``"vllm"``, ...): adds key ``estimate`` with the profile's
        constants and the estimate of the batch-1, batch-8 and table steps; None: the
        bound only (every other key is the bound either way).
    kv_limit_from : {"upper_bound", "given"}
        The budget that sets the table's KV limit: the upper bound (usable x utilization -
        weights, reserve 0; the default) or ``kv_budget`` (what ``--kv-budget-gb`` gives).
    tensor_parallel_size : int >= 1, default 1 (a Deployment's own; beside a ModelConfig only)
        T > 1: every size is one GPU's share (:meth:`roofline.ModelConfig.per_gpu`), every step
        time adds the all-reduce, tokens/s are the group's, and key ``tensor_parallel`` holds the
        group's numbers (docs/conventions.md, "Tensor parallelism"). T = 1 gives the single-GPU
        report, without that key.
    speculative : SpeculativeConfig, its JSON text (vLLM's ``speculative_config``) or None
        Adds key ``speculative``: at the context, for each table batch, the speculative step beside the
        plain one (proposer, step, tokens per step, speed-up), the critical batches, the break-even batch
        and the best k at batch 1 (:mod:`roofline.speculative`; the bound on one GPU).
    acceptance_rate : in (0, 1], with ``speculative`` (alpha), or a tuple of k rates in (0, 1] (the per-position
        vector; docs/conventions.md, "Speculative decoding")

    Returns
    -------
    dict with keys ``model``, ``accelerator``, ``weights``, ``single``, ``criticality``,
    ``eight``, ``kv``, ``table`` (see the text output for what each holds), ``inputs`` (the
    context, batches, budgets, utilization, block size and KV-limit budget used), ``time_kind``
    (``"bound"``: every time above) and, with ``estimate``, ``estimate``.

    Raises
    ------
    InvalidValueError
        Bad context, batch, budget, utilization or block size; weights that leave no KV budget;
        a profile without constants (field ``estimate``); a speculative config or acceptance rate
        refused (:meth:`roofline.speculative.SpeculativeConfig.parse`, field ``acceptance_rate``), one
        without the other, or what speculative decoding does not model (T > 1, MoE, sliding windows).
    UnknownPresetError
        An unknown engine profile or draft model.
    """
    # ``estimate`` names the profile argument (the API's keyword); the body uses the module of that name
    if estimate is not FROM_DEPLOYMENT:
        estimate = profile(estimate)
    deployment, estimate = as_deployment(model, accelerator, tensor_parallel_size=tensor_parallel_size,
                                         estimate=estimate), estimate_mod
    check_int("context", context, minimum=1)
    for b in batches:
        check_int("batch", b, minimum=1)
    check_positive("kv_budget", kv_budget)
    check_int("block_size", block_size, minimum=1)
    if not 0 < utilization <= 1:
        raise InvalidValueError("utilization", float(utilization), "must be in (0, 1]")
    if kv_limit_from not in ("upper_bound", "given"):
        raise InvalidValueError("kv_limit_from", kv_limit_from, "expected 'upper_bound' or 'given'")
    # every number below is the bound's; the table's FLOPs are the exact count
    bound = as_deployment(deployment, flops="exact", estimate=None)
    whole, model, accelerator = bound.model, bound.share, bound.accelerator

    single = {conv: estimate.decode_step(bound, batch=1, context=0, flops=conv) for conv in ("2p", "exact")}
    crit = {conv: estimate.criticality(bound, context=context, flops=conv) for conv in ("2p", "exact")}
    upper_budget = estimate.kv_budget_for(bound, utilization=utilization)
    reserve = estimate.published_reserve(model, accelerator)  # one GPU's share: none is published at T > 1
    lesson_cap = estimate.kv_capacity(bound, budget=Fraction(kv_budget), context=context, block_size=block_size)
    upper_cap = estimate.kv_capacity(bound, budget=upper_budget, context=context, block_size=block_size)
    real_cap = None
    if reserve is not None:
        real_budget = estimate.kv_budget_for(bound, utilization=utilization, reserved=reserve.value)
        real_cap = estimate.kv_capacity(bound, budget=real_budget, context=context, block_size=block_size)
    # the table's KV limit: the upper bound (reserve 0), or the budget the user gave
    kv_limit = (lesson_cap if kv_limit_from == "given" else upper_cap).sequences_blocks
    table_batches = sorted(set(batches) | ({kv_limit} if kv_limit > 0 else set()))
    one_kv = estimate.decode_step(bound, batch=1, context=context)
    eight = estimate.decode_step(bound, batch=8, context=0)
    eight_kv = estimate.decode_step(bound, batch=8, context=context)

    def step_json(s: estimate.DecodeStep) -> dict[str, Any]:
        return {
            "batch": s.batch, "context": s.context, "bytes": float(s.bytes), "flops": float(s.flops),
            "memory_time_s": float(s.memory_time), "compute_time_s": float(s.compute_time),
            "step_time_s": float(s.step_time), "step_time_no_overlap_s": float(s.step_time_no_overlap),
            "throughput_tokens_per_s": float(s.throughput), "math_busy_share": float(s.math_busy_share),
            "bandwidth_share": float(s.bandwidth_share), "intensity_flop_per_byte": float(s.intensity),
            "bound": s.bound, "flops_convention": s.flops_convention,
        }

    def crit_json(c: estimate.Criticality) -> dict[str, Any]:
        return {
            "ridge_point_flop_per_byte": float(c.ridge_point), "context": c.context,
            "critical_batch": c.critical_batch,
            "critical_batch_weights_only": c.critical_batch_weights_only,
            "critical_context_tokens": None if c.critical_context is None else float(c.critical_context),
            "intensity_limit_flop_per_byte": None if c.intensity_limit is None else float(c.intensity_limit),
            "flops_convention": c.flops_convention,
        }

    def cap_json(c: estimate.KVCapacity) -> dict[str, Any]:
        return {
            "budget_bytes": float(c.budget), "tokens": c.tokens, "block_size": c.block_size,
            "blocks": c.blocks, "context": c.context, "sequences": c.sequences,
            "sequences_blocks": c.sequences_blocks,
        }

    rows = []
    for b in table_batches:
        without = estimate.decode_step(bound, batch=b, context=context, kv_reads=False)
        with_kv = estimate.decode_step(bound, batch=b, context=context)
        rows.append({"batch": b, "kv_limit": b == kv_limit, "fits": b <= kv_limit,
                     "weights_only": step_json(without), "with_kv": step_json(with_kv)})

    experts = None
    if model.is_moe:
        experts = {
            "num_experts": model.num_experts, "experts_per_token": model.num_experts_per_tok,
            "num_moe_layers": model.num_moe_layers, "num_shared_experts": model.num_shared_experts,
            "routing": "uniform routing",
            "touched": [{"batch": b, "experts_touched": float(model.experts_touched(b)),
                         "weight_bytes_read": float(model.decode_weight_bytes(b))} for b in table_batches],
        }
    out = {
        "time_kind": "bound",
        "inputs": {
            "context": context, "batches": list(batches), "kv_budget_bytes": float(kv_budget),
            "utilization": float(utilization), "block_size": block_size, "kv_limit_from": kv_limit_from,
            "kv_limit": kv_limit, "table_flops": "exact",
        },
        "model": {
            "name": model.name, "parameters": whole.parameters, "weight_dtype": model.weight_dtype,
            "model_type": model.model_type, "total_parameters": whole.parameters,
            "active_parameters": whole.active_parameters, "other_tower_parameters": model.tower_parameters,
            "experts": experts, "multi_head_latent_attention": model.is_mla,
            "sliding_windows": sorted({w for w in model.layer_windows if w is not None}),
            "quantization": None if model.quantization is None else model.quantization.method,
            "weight_format": model.weight_format, "compute_dtype": model.compute_dtype,
            "weight_bytes_by_class": {c: float(v) for c, v in model.weight_bytes_by_class().items() if v},
            "compute_peak_flops": float(estimate.compute_peak(model, accelerator)),
            "kv_dtype": model.kv_dtype, "matmul_parameters": model.matmul_parameters,
            "matmul_flops_per_token": model.matmul_flops_per_token,
            "two_p_flops_per_token": model.two_p_flops_per_token,
            "attention_flops_per_context_token": model.attention_flops_per_token,
            "max_position_embeddings": model.max_position_embeddings,
            "recurrent_state": None if model.state_mixer is None else {
                "kind": model.state_mixer.kind, "layers": model.state_mixer.layers,
                "attention_layers": model.attention_layers, "bytes_per_sequence": float(model.state_bytes_per_sequence),
                "state_dtype": model.state_dtype, "conv_state_dtype": model.conv_state_dtype,
                "recurrent_flops_per_token": model.recurrent_flops_per_token},
        },
        "accelerator": {
            "key": accelerator.key, "name": accelerator.name,
            "bandwidth_bytes_per_s": float(accelerator.bandwidth),
            "peak_flops": float(accelerator.peak_flops),
            "usable_memory_bytes": float(accelerator.usable_memory),
            "sources": {k: {"value": float(v.value), "unit": v.unit, "kind": v.source.kind,
                            "citation": v.source.citation, "date": v.source.date}
                        for k, v in accelerator.sources().items()},
        },
        "weights": {"bytes": float(model.weight_bytes)},
        "single": {conv: step_json(s) for conv, s in single.items()},
        "single_with_kv": step_json(one_kv),
        "criticality": {conv: crit_json(c) for conv, c in crit.items()},
        "eight": {"weights_only": step_json(eight), "with_kv": step_json(eight_kv)},
        "kv": {
            "kv_bytes_per_token": float(model.kv_bytes_per_token),
            "kv_bytes_per_sequence": float(model.kv_bytes(context)),
            "given_budget": cap_json(lesson_cap),
            "real_budget": None if real_cap is None else cap_json(real_cap),
            "reserve": None if reserve is None else {
                "bytes": float(reserve.value), "kind": reserve.source.kind, "citation": reserve.source.citation,
                "date": reserve.source.date, "conditions": reserve.source.conditions},
            "upper_bound_budget": cap_json(upper_cap),
            "utilization": float(utilization),
        },
        "table": rows,
    }
    if deployment.estimate is not None:
        out["estimate"] = _estimate_json(as_deployment(deployment, flops="exact"), context, table_batches, step_json)
    if bound.tensor_parallel_size > 1:
        out["tensor_parallel"] = _tensor_parallel_json(bound, upper_cap, rows)
    if speculative is not None or acceptance_rate is not None:
        limit_budget = Fraction(kv_budget) if kv_limit_from == "given" else None
        out["speculative"] = _speculative_json(bound, speculative, acceptance_rate, context, table_batches,
                                               kv=(utilization, block_size, limit_budget, kv_limit))
    return out


def _speculative_json(bound: Deployment, config: Any, alpha: Any, context: int, batches: list[int], *,
                      kv: tuple[Any, int, Any, int]) -> dict[str, Any]:
    """The speculative part of the report (docs/conventions.md, "Speculative decoding"); ``kv``: the utilization,
    the block size, the given budget that sets the KV limit (None: the upper bound) and the plain KV limit."""
    from .. import speculative as sd

    if config is None:
        shown = [float(a) for a in alpha] if isinstance(alpha, (tuple, list)) else float(alpha)
        raise InvalidValueError("acceptance_rate", shown, "given without --speculative-config")
    given = config if not isinstance(config, sd.SpeculativeConfig) else config.model or config.method
    if not isinstance(config, sd.SpeculativeConfig):  # the config's own faults first: then what it lacks
        config = sd.SpeculativeConfig.parse(config)
    if alpha is None:
        raise InvalidValueError("speculative_config", given, "needs acceptance_rate (alpha, in (0, 1])")
    utilization, block_size, given_budget, plain_limit = kv
    held = sd.proposer_memory(bound, config)  # its weights out of the budget, its KV in the blocks
    budget = estimate_mod.kv_budget_for(bound, utilization=utilization, proposer=held) if given_budget is None \
        else given_budget
    # each sequence holds its k proposals while they are verified: c + k tokens (the scheduler's rule, "KV"), up to
    # the model's length (vLLM proposes no token past max_model_len; a context already past it is the plain one's)
    most = bound.model.max_position_embeddings
    held_context = context + config.num_speculative_tokens
    if most is not None and held_context > most:
        held_context = max(context, most)
    cap = estimate_mod.kv_capacity(bound, budget=budget, context=held_context, block_size=block_size,
                                   proposer=held)
    batches = sorted(set(batches) | ({cap.sequences_blocks} if cap.sequences_blocks > 0 else set()))
    steps = [sd.speculative_step(bound, config, batch=b, context=context, acceptance_rate=alpha) for b in batches]
    first = steps[0]
    best = sd.best_speculative_tokens(bound, config, batch=1, context=context, acceptance_rate=alpha)
    return {
        "method": config.method, "draft_model": None if config.draft is None else config.draft.name,
        "proposer": config.describe(),
        "num_speculative_tokens": config.num_speculative_tokens,
        "acceptance_rate": [float(a) for a in alpha] if isinstance(alpha, (tuple, list)) else float(alpha),
        "context": context, "tokens_per_step": float(first.tokens_per_step),
        "critical_batch": first.critical_batch, "plain_critical_batch": first.plain_critical_batch,
        "break_even_batch": sd.break_even_batch(bound, config, context=context, acceptance_rate=alpha),
        "break_even_scanned_up_to": sd.MAX_BREAK_EVEN_BATCH,
        "best_num_speculative_tokens_batch_1": best,
        "best_compared_up_to": min(16, len(alpha)) if isinstance(alpha, (tuple, list)) else 16,
        "kv": {"proposer_weight_bytes": float(held.weight_bytes),
               "proposer_kv_bytes_per_token": float(held.kv_bytes_per_token),
               "kv_bytes_per_token": float(cap.kv_bytes_per_token), "budget_bytes": float(cap.budget),
               "blocks": cap.blocks, "kv_limit": cap.sequences_blocks, "held_context": held_context,
               "plain_kv_limit": plain_limit},
        "table": [{"batch": s.batch, "kv_limit": s.batch == cap.sequences_blocks,
                   "fits": s.batch <= cap.sequences_blocks, "plain_step_time_s": float(s.plain_step_time),
                   "proposer_time_s": float(s.proposer_time), "step_time_s": float(s.step_time),
                   "speedup": float(s.speedup), "throughput_tokens_per_s": float(s.throughput),
                   "plain_throughput_tokens_per_s": float(s.plain_throughput),
                   "intensity_flop_per_byte": float(s.intensity)} for s in steps],
    }


def _speculative_lines(r: dict[str, Any]) -> list[str]:
    """The report's speculative decoding section."""
    sp = r.get("speculative")
    if sp is None:
        return []
    k, alpha = sp["num_speculative_tokens"], sp["acceptance_rate"]
    proposer = sp["proposer"]
    be = sp["break_even_batch"]
    vector = isinstance(alpha, list)
    rates = f"acceptance rates {', '.join(f'{a:g}' for a in alpha)} by position" if vector else \
        f"acceptance rate {alpha:g}"
    formula = "1 + sum_i prod_{j<=i} alpha_j" if vector else "(1 - alpha^(k+1)) / (1 - alpha)"
    out = [
        "",
        f"Speculative decoding ({sp['method']}: {proposer}; k = {k} proposed tokens, {rates}; "
        f"context {sp['context']:,})",
        f"  tokens per step       {sp['tokens_per_step']:9.4f}    = {formula} per sequence",
        "  batch   plain step   proposer   spec. step   speed-up   tokens/s (plain)",
    ]
    for row in sp["table"]:
        out.append(f"  {row['batch']:>5,}  {_t(row['plain_step_time_s']):>11}  {_t(row['proposer_time_s']):>9}  "
                   f"{_t(row['step_time_s']):>11}  {row['speedup']:8.3f}x  {row['throughput_tokens_per_s']:,.0f} "
                   f"({row['plain_throughput_tokens_per_s']:,.0f})"
                   + (" KV limit" if row.get("kv_limit") else " over the KV limit" if row.get("fits") is False
                      else ""))
    out += [
        f"  critical batch        {_none(sp['critical_batch'])} (verifying k + 1 positions; plain decode: "
        f"{_none(sp['plain_critical_batch'])})",
        f"  break-even batch      {_none(be)}" + (" (speed-up at most 1 from this batch)" if be is not None else
                                                   f" (the speed-up stays above 1 up to batch "
                                                   f"{sp['break_even_scanned_up_to']:,})"),
        f"  best k at batch 1     {sp['best_num_speculative_tokens_batch_1']} (k = 0 .. "
        f"{sp.get('best_compared_up_to', 16)} compared)",
    ]
    kv = sp.get("kv")
    if kv is not None:
        k = sp["num_speculative_tokens"]
        held = (f"; its weights {kv['proposer_weight_bytes'] / 1e9:.2f} GB a GPU out of the budget, its KV "
                f"{kv['proposer_kv_bytes_per_token']:,.0f} of {kv['kv_bytes_per_token']:,.0f} bytes per token"
                if kv["proposer_weight_bytes"] or kv["proposer_kv_bytes_per_token"] else "")
        out.append(f"  KV limit              {kv['kv_limit']:,} sequences of {sp['context']:,} tokens, each holding "
                   f"{kv['held_context']:,} while its {k} proposed token{'s' if k > 1 else ''} "
                   f"{'are' if k > 1 else 'is'} verified (without speculation: {kv['plain_kv_limit']:,}{held})")
    return out


def _tensor_parallel_json(bound: Deployment, upper: estimate_mod.KVCapacity,
                          rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The group's numbers: link, per-GPU and whole-model sizes, the all-reduce, tokens/s of the group."""
    from .. import formulas as f

    whole, share, T = bound.model, bound.share, bound.tensor_parallel_size
    link = bound.accelerator.link(T)
    ar = bound.allreduce_terms()
    one = estimate_mod.decode_step(bound, batch=1, context=0)
    at_limit = next((row["with_kv"] for row in rows if row["kv_limit"]), None)
    return {
        "size": T,
        "link": {"name": link.name, "bandwidth_bytes_per_s": float(link.bandwidth.value),
                 "latency_s": float(link.latency.value), "bandwidth_kind": link.bandwidth.source.kind,
                 "latency_kind": link.latency.source.kind},
        "weight_bytes_whole_model": float(whole.weight_bytes),
        "weight_bytes_per_gpu": float(share.weight_bytes),
        "parameters_per_gpu": share.parameters,
        "weight_bytes_all_gpus": float(share.weight_bytes * T),
        "query_heads_per_gpu": share.num_attention_heads,
        "kv_heads_per_gpu": None if share.is_mla else share.num_key_value_heads,
        "kv_heads_replicated": (not share.is_mla) and whole.num_key_value_heads < T,
        "mla_latent_replicated": share.is_mla,
        "kv_bytes_per_token_whole_model": float(whole.kv_bytes_per_token),
        "kv_bytes_per_token_per_gpu": float(share.kv_bytes_per_token),
        "kv_budget_all_gpus_bytes": float(upper.budget * T),
        "allreduces_per_step": 2 * share.num_hidden_layers - (share.num_moe_layers if bound.expert_parallel_size > 1
                                                               else 0),
        "allreduce_message_bytes_per_token": share.hidden_size * share.activation_bytes,
        "batch_1": {"step_time_s": float(one.step_time), "allreduce_time_s": float(one.allreduce_time),
                    "allreduce_bandwidth_time_s": float(one.allreduce_bandwidth_time),
                    "allreduce_latency_time_s": float(one.allreduce_latency_time),
                    "group_throughput_tokens_per_s": float(one.throughput)},
        "allreduce_crossover_batch": float(f.allreduce_crossover_batch(
            hidden_size=ar["hidden_size"], activation_bytes=ar["activation_bytes"], tensor_parallel_size=T,
            link_bandwidth=ar["link_bandwidth"], link_latency=ar["link_latency"])),
        "group_throughput_at_kv_limit_tokens_per_s": None if at_limit is None
        else at_limit["throughput_tokens_per_s"],
        **({"expert_parallel": _expert_parallel_json(bound)} if bound.expert_parallel_size > 1 else {}),
    }


def _expert_parallel_json(bound: Deployment) -> dict[str, Any]:
    """Expert parallelism's numbers: experts per GPU, ranks a token reaches, dispatch and combine at batch 1 and 256."""
    from .. import formulas as f
    from ..deployment import expert_parallel_terms

    whole, R = bound.model, bound.expert_parallel_size
    ep = expert_parallel_terms(whole, bound.accelerator, R)
    group = dict(num_experts=whole.num_experts, experts_per_token=whole.num_experts_per_tok, expert_parallel_size=R)
    links = {k: ep[k] for k in ("scale_up_bandwidth", "scale_up_latency", "node_gpus", "network_bandwidth",
                                "network_latency")}
    ar = bound.allreduce_terms()
    out: dict[str, Any] = {
        "ranks": R, "experts_per_gpu": whole.num_experts // R, "moe_layers": whole.num_moe_layers,
        "ranks_reached_per_token": float(f.ranks_reached(**group)),
        "remote_ranks_per_token": float(f.remote_ranks_reached(**group)),
        "shared_experts_replicated_bytes_per_gpu": float(ep["replicated_bytes"]),
        "ranks_per_node": ep["node_gpus"],
    }
    for b in (1, 256):
        a2a = dict(group, batch=b, hidden_size=whole.hidden_size, activation_bytes=whole.activation_bytes)
        one = f.alltoall_time(**a2a, **links)
        ring = dict(message_bytes=b * whole.hidden_size * whole.activation_bytes,
                    tensor_parallel_size=bound.tensor_parallel_size, link_bandwidth=ar["link_bandwidth"],
                    link_latency=ar["link_latency"])
        out[f"batch_{b}"] = {
            "alltoall_bytes_per_gpu": float(f.alltoall_bytes(**a2a)), "alltoall_time_s": float(one),
            "dispatch_and_combine_per_step_s": float(f.decode_alltoall_time(num_moe_layers=whole.num_moe_layers,
                                                                            **a2a, **links)),
            "allgather_per_step_s": float(whole.num_moe_layers * f.ring_allgather_time(**ring)),
        }
    return out


def _expert_parallel_lines(tp: dict[str, Any]) -> list[str]:
    """The report's lines on expert parallelism (under the tensor-parallel head)."""
    e = tp["expert_parallel"]
    lines = [
        f"  expert parallelism    --enable-expert-parallel: {e['experts_per_gpu']} whole routed experts per GPU "
        f"({e['ranks']} ranks); a token reaches {e['ranks_reached_per_token']:.3f} ranks, "
        f"{e['remote_ranks_per_token']:.3f} remote (uniform routing); shared experts replicated "
        f"(+{e['shared_experts_replicated_bytes_per_gpu'] / 1e9:.2f} GB per GPU)",
        f"                        each of {e['moe_layers']} MoE layers: dispatch + combine (all-to-all) and an "
        "all-gather in place of its all-reduce; attention keeps its all-reduce",
    ]
    for b in (1, 256):
        x = e[f"batch_{b}"]
        lines.append(f"  batch {b:<3}             all-to-all {x['alltoall_bytes_per_gpu'] / 1e3:,.1f} kB sent per GPU, "
                     f"{_t(x['alltoall_time_s'])} each; dispatch + combine {_t(x['dispatch_and_combine_per_step_s'])} "
                     f"per step, all-gathers {_t(x['allgather_per_step_s'])}")
    return lines


def _tensor_parallel_lines(r: dict[str, Any]) -> list[str]:
    """The report's head under tensor parallelism: what is per GPU, what is the group's."""
    tp = r["tensor_parallel"]
    T, link, one = tp["size"], tp["link"], tp["batch_1"]
    heads = ("MLA latent KV replicated on every GPU" if tp["mla_latent_replicated"]
             else f"{tp['kv_heads_per_gpu']} KV head(s) per GPU"
             + (" (replicated: T exceeds the KV heads)" if tp["kv_heads_replicated"] else ""))
    limit = tp["group_throughput_at_kv_limit_tokens_per_s"]
    return [
        f"Tensor parallelism: {T} GPUs (--tensor-parallel-size {T}) over {link['name']}, "
        f"{link['bandwidth_bytes_per_s'] / 1e9:g} GB/s per direction, {link['latency_s'] * 1e6:g} us per ring step",
        "  below, bytes, FLOPs, KV and budgets are ONE GPU's share; step times include the all-reduce; "
        "tokens/s are the whole group's",
        f"  weights               {tp['weight_bytes_per_gpu'] / 1e9:9.2f} GB per GPU x {T} = "
        f"{tp['weight_bytes_all_gpus'] / 1e9:.2f} GB (whole model {tp['weight_bytes_whole_model'] / 1e9:.2f} GB; "
        "norms and replicated parts on every GPU)",
        f"  attention             {tp['query_heads_per_gpu']} query heads per GPU, {heads}; KV "
        f"{tp['kv_bytes_per_token_per_gpu']:,.0f} B per token per GPU (whole model "
        f"{tp['kv_bytes_per_token_whole_model']:,.0f} B)",
        f"  all-reduce            {tp['allreduces_per_step']} per step (after attention and after the MLP of "
        f"each {'layer' if 'expert_parallel' not in tp else 'dense layer'}) of B x "
        f"{tp['allreduce_message_bytes_per_token']:,} B",
        *(_expert_parallel_lines(tp) if "expert_parallel" in tp else []),
        f"  batch 1               {_t(one['step_time_s'])} = roofline of one GPU + "
        + ("all-reduce " if "expert_parallel" not in tp else "all-reduces, all-gathers and all-to-alls ")
        + f"{_t(one['allreduce_time_s'])} (latency {_t(one['allreduce_latency_time_s'])}, bandwidth "
        f"{_t(one['allreduce_bandwidth_time_s'])}); {one['group_throughput_tokens_per_s']:,.0f} tokens/s",
        f"  all-reduce crossover  bandwidth term above latency term from batch "
        f"{tp['allreduce_crossover_batch']:,.1f} = T x latency x bandwidth / (hidden x activation bytes)",
        f"  KV budget of the group {tp['kv_budget_all_gpus_bytes'] / 1e9:8.2f} GB (reserve 0"
        + ("; every GPU holds each sequence's whole latent, so the group holds no more sequences than one GPU"
           if tp["mla_latent_replicated"] else "") + "); "
        + ("tokens/s of the group at the table's KV limit "
           f"{limit:,.0f}" if limit is not None else "no sequence fits"),
        "",
    ]


def _estimate_json(deployment: Deployment, context: int, batches: list[int], step_json: Any) -> dict[str, Any]:
    """The estimate part of the report: the profile's constants and the estimated steps."""
    profile = deployment.estimate

    def step(batch: int, ctx: int) -> dict[str, Any]:  # the bound's step_json, on the profile's estimate
        return step_json(estimate_mod.decode_step(deployment, batch=batch, context=ctx))

    constants = {}
    values, eta_src = profile.constants(), None
    if isinstance(profile, EngineProfile):  # the eta_bw the steps below are priced at: the dtype's or accelerator's own
        values = profile.constants(deployment.accelerator, deployment.model.weight_dtype)
        eta_src = profile.eta_bw_sourced(deployment.accelerator, deployment.model.weight_dtype)[0]
    for name, value in values.items():
        src = eta_src if name == "eta_bw" and eta_src is not None else getattr(profile, name)
        constants[name] = {"value": float(value), "unit": "s" if name.startswith("t_") else "1",
                           "kind": profile.kind(name),
                           "citation": None if src is None else src.source.citation}
    band = getattr(profile, "band", None)
    outside = profile.outside(deployment.share, deployment.accelerator) if hasattr(profile, "outside") else ()
    return {
        "time_kind": f"estimate: {profile.name}",
        "profile": {"key": profile.key, "name": profile.name, "constants": constants,
                    "calibration": list(profile.calibration), "fixed": list(profile.fixed)},
        "error_band": None if band is None else band.to_dict(),
        "engine_version": version_note(profile),
        "scheduler_defaults": None if getattr(profile, "scheduler", None) is None
        else profile.scheduler.describe(deployment.accelerator),
        "outside_fitted_range": list(outside),
        "fitted_range": None if getattr(profile, "fitted_range", None) is None
        else attrs.asdict(profile.fitted_range),
        "band_line": profile.error_band(deployment.share, deployment.accelerator)
        if hasattr(profile, "error_band") else "validation residuals: none (a profile without a band)",
        "single": step(1, 0),
        "single_with_kv": step(1, context),
        "eight_with_kv": step(8, context),
        "table": [{"batch": b, "with_kv": step(b, context)} for b in batches],
    }


def _t(seconds: float) -> str:
    return format_time(seconds, decimals=(3, 3, 2))


def format_report(r: dict[str, Any]) -> str:
    """The report as text: one number per line with its derivation."""
    m, a, w = r["model"], r["accelerator"], r["weights"]
    lesson, exact = r["single"]["2p"], r["single"]["exact"]
    cl, ce = r["criticality"]["2p"], r["criticality"]["exact"]
    kv, given, real, upper = r["kv"], r["kv"]["given_budget"], r["kv"]["real_budget"], r["kv"]["upper_bound_budget"]
    bw, peak = a["bandwidth_bytes_per_s"], m["compute_peak_flops"]  # the peak of the matmul inputs' dtype
    ctx = cl["context"]
    from_given = r["inputs"]["kv_limit_from"] == "given"
    eight_wo, eight_kv, one_kv = r["eight"]["weights_only"], r["eight"]["with_kv"], r["single_with_kv"]
    tp = r.get("tensor_parallel")
    on = a["name"] if tp is None else f"{tp['size']} x {a['name']} (tensor parallel; sizes per GPU)"
    pipe = r.get("pipeline")
    if pipe is not None:  # P > 1: the sizes are one GPU of each stage together (docs/conventions.md)
        P = pipe["deployment"]["pipeline_parallel_size"]
        on = (f"{pipe['deployment']['gpus']} x {a['name']} (TP {pipe['deployment']['tensor_parallel_size']} x PP "
              f"{P}; sizes of one GPU per stage together, the stages in the pipeline section)")
    plus_ar = "" if tp is None else " + all-reduce"
    held = m["parameters"] if tp is None else tp["parameters_per_gpu"]
    given_label = f"in a {given['budget_bytes'] / 1e9:g} GB budget" + ("" if tp is None else " per GPU")
    out = [
        f"roofline report: {m['name']} (weights {m['weight_format']}, KV {m['kv_dtype']}) on {on}",
        f"  memory bandwidth {bw / 1e12:.3f} TB/s, dense {m['compute_dtype'].upper()} peak {peak / 1e12:,.1f} TFLOP/s, "
        f"usable memory {a['usable_memory_bytes'] / 2**30:.1f} GiB",
        "  (datasheet values with sources: roofline accelerators --verbose); every time is the roofline",
        "  bound (a lower bound: no overhead) unless marked [estimate]",
        "",
        "One request at a time (batch 1, weights only)",
        f"  weight bytes          {w['bytes'] / 1e9:9.2f} GB    = {held:,} parameters x "
        f"{w['bytes'] / held:g} B" + ("" if tp is None else " (one GPU's)"),
        f"  parameters            total {m['total_parameters']:,}, active per token {m['active_parameters']:,}"
        + (" (embedding table included)" if m["experts"] else "")
        + (f" (other towers {m['other_tower_parameters']:,})" if m["other_tower_parameters"] else ""),
        *_moe_lines(m),
        f"  step time             {_t(lesson['step_time_s']):>12} = "
        + ("weights read (shared + k experts per layer) / bandwidth " if m["experts"] else "weight bytes / bandwidth ")
        + f"= {lesson['bytes'] / 1e9:.2f} GB / {bw / 1e12:.2f} TB/s" + plus_ar,
        f"  compute time [2P]     {_t(lesson['compute_time_s']):>12} = 2 x P / peak "
        f"= {m['two_p_flops_per_token'] / 1e9:.2f} GFLOP / {peak / 1e12:.1f} TFLOP/s",
        f"  compute time [exact]  {_t(exact['compute_time_s']):>12} = 2 x matmul params / peak "
        f"= {m['matmul_flops_per_token'] / 1e9:.2f} GFLOP / {peak / 1e12:.1f} TFLOP/s",
        f"  math-busy share       {lesson['math_busy_share'] * 100:8.2f} %    = compute / step time [2P] "
        f"({exact['math_busy_share'] * 100:.2f} % [exact])",
        "",
        "Where math catches up with reading",
        f"  ridge point           {cl['ridge_point_flop_per_byte']:9.1f} FLOP/byte = peak / bandwidth",
        f"  critical batch, no KV {cl['critical_batch_weights_only']:9,d} [2P], "
        f"{ce['critical_batch_weights_only']:,} [exact] = "
        + ("first B with B x 2P / peak >= (W_shared + experts touched(B) x expert bytes) / bandwidth"
           if m["experts"] else "ceil(ridge x W / 2P) ~ step time / compute time"),
        f"  critical batch at {ctx:,} tokens: {_none(cl['critical_batch'])} [2P], "
        f"{_none(ce['critical_batch'])} [exact]"
        + (f"  (intensity limit as batch grows: {cl['intensity_limit_flop_per_byte']:.1f} [2P], "
           f"{ce['intensity_limit_flop_per_byte']:.1f} [exact] FLOP/byte, not above the ridge)"
           if cl["critical_batch"] is None and ce["critical_batch"] is None else ""),
        f"  critical context c*   {_tokens(cl['critical_context_tokens'])} [2P], "
        f"{_tokens(ce['critical_context_tokens'])} [exact] = "
        + ("solves F = (ridge x k_l - a_l) x sum over layers of min(c, w_l)" if m["sliding_windows"]
           else "(F - 2 x ridge x S) / (ridge x k - a), 0 when F <= 2 x ridge x S (S the recurrent state)"
           if m.get("recurrent_state") else "F / (ridge x k - a)")
        + ": above it, no batch is compute-bound",
        "",
        *(_tensor_parallel_lines(r) if "tensor_parallel" in r else []),
        "Batching: 8 requests side by side",
        f"  step time, batch 8    {_t(r['eight']['weights_only']['step_time_s']):>12} weights only "
        f"(batch 1: {_t(exact['step_time_s'])}), 8 tokens per step",
        f"  with KV at {ctx:,} tokens {_t(r['eight']['with_kv']['step_time_s'])} "
        f"(batch 1: {_t(r['single_with_kv']['step_time_s'])}) = "
        + ("(W + 8 x KV per sequence) / bandwidth" if m["sliding_windows"]
           else f"(W + 8 x ({ctx} x k + 2 x S)) / bandwidth, S the recurrent state" if m.get("recurrent_state")
           else f"(W + 8 x {ctx} x k) / bandwidth")
        + (", W the weights 8 tokens read" if m["experts"] else ""),
        f"  throughput            {eight_wo['throughput_tokens_per_s']:9,.0f} tokens/s vs "
        f"{exact['throughput_tokens_per_s']:,.0f} at batch 1 "
        f"({eight_wo['throughput_tokens_per_s'] / exact['throughput_tokens_per_s']:.2f}x), weights only; "
        f"with KV at {ctx:,} tokens {eight_kv['throughput_tokens_per_s']:,.0f} "
        f"vs {one_kv['throughput_tokens_per_s']:,.0f} "
        f"({eight_kv['throughput_tokens_per_s'] / one_kv['throughput_tokens_per_s']:.2f}x)",
        "",
        "KV cache",
        f"  KV bytes per token    {kv['kv_bytes_per_token']:9,.0f} B     = "
        + ("layers x (kv_lora_rank + qk_rope_head_dim) x KV bytes [MLA]" if m["multi_head_latent_attention"]
           else "2 x layers x KV heads x head_dim x KV bytes")
        + f" ({kv['kv_bytes_per_token'] / 1024:g} KiB)" + (", at full attention" if m["sliding_windows"] else ""),
        f"  KV per sequence       {kv['kv_bytes_per_sequence']:9,.0f} B     at {ctx:,} tokens"
        + (f" (windows {m['sliding_windows']} tokens: sum over layers of min(c, w) x per-layer bytes)"
           if m["sliding_windows"] else ""),
        *([f"  recurrent state       {m['recurrent_state']['bytes_per_sequence']:9,.0f} B     per sequence, "
           f"whatever the context ({m['recurrent_state']['layers']} {m['recurrent_state']['kind']} layers, "
           f"{m['recurrent_state']['attention_layers']} attention layers hold the KV; conv state "
           f"{m['recurrent_state']['conv_state_dtype']}, recurrent state {m['recurrent_state']['state_dtype']}); "
           "every decode step reads and writes it back once"] if m.get("recurrent_state") else []),
        *([f"  (the context exceeds the model's max_position_embeddings, {m['max_position_embeddings']:,} tokens: "
           "an engine refuses it by default; the numbers are what such a context would cost)"]
          if m["max_position_embeddings"] is not None and ctx > m["max_position_embeddings"] else []),
        f"  {given_label:<22}{given['sequences']:9,d} sequences of "
        f"{given['context']:,} tokens ("
        + ("full-attention " if m["sliding_windows"] else "")
        + f"tokens {given['tokens']:,}; {given['sequences_blocks']:,} with "
        f"{given['block_size']}-token blocks{'; the table' + chr(39) + 's KV limit' if from_given else ''})",
        *_given_budget_caveat(given, tp, from_given, upper, mla=m["multi_head_latent_attention"]),
        *_real_budget_lines(a, kv, real),
        f"  upper bound, reserve 0 {upper['budget_bytes'] / 1e9:8.2f} GB    = "
        + (f"{a['usable_memory_bytes'] / 2**30:.1f} GiB x {kv['utilization']:g} - weights" if pipe is None else
           f"least over the stages of ({a['usable_memory_bytes'] / 2**30:.1f} GiB x {kv['utilization']:g} - its "
           "weights) x k / its k"),
        f"  fits                  {upper['sequences']:9,d} sequences of {upper['context']:,} tokens "
        f"(token-level); {upper['sequences_blocks']:,} with {upper['block_size']}-token blocks"
        f"{'' if from_given else ' (the table' + chr(39) + 's KV limit)'}",
        "",
        f"Step time, throughput and intensity against batch size (context {ctx:,} tokens, FLOPs [exact])",
        f"  {'':>6} | {'weights only':<38}| with KV",
        f"  {'batch':>6} | {'step':>11} {'tokens/s':>9} {'FLOP/B':>7}  {'bound':<7} | {'step':>11} {'tokens/s':>9} "
        f"{'FLOP/B':>7}  bound",
    ]
    for row in r["table"]:
        wo, wk = row["weights_only"], row["with_kv"]
        note = _kv_note(row, from_given)
        out.append(
            f"  {row['batch']:>6,} | {_t(wo['step_time_s']):>11} {wo['throughput_tokens_per_s']:>9,.0f} "
            f"{wo['intensity_flop_per_byte']:>7,.1f}  {wo['bound']:<7} | {_t(wk['step_time_s']):>11} "
            f"{wk['throughput_tokens_per_s']:>9,.0f} {wk['intensity_flop_per_byte']:>7,.1f}  {wk['bound']}{note}"
        )
    legend = _kv_legend(r["table"], from_given)
    if legend is not None:
        out.append(legend)
    if "estimate" in r:
        out += _estimate_lines(r)
    out += _speculative_lines(r)
    return fit_width("\n".join(out))


def _moe_lines(m: dict[str, Any]) -> list[str]:
    """The experts a batch touches (MoE models only): E (1 - (1 - k/E)^B), uniform routing."""
    e = m["experts"]
    if not e:
        return []
    touched = ", ".join(f"B={t['batch']}: {t['experts_touched']:.2f}" for t in e["touched"])
    return [f"  experts (MoE)         {e['num_experts']} routed, {e['experts_per_token']} per token, "
            f"{e['num_shared_experts']} shared, {e['num_moe_layers']} MoE layers; touched per layer "
            f"({e['routing']}): {touched}"]


def _kv_note(row: dict[str, Any], from_given: bool) -> str:
    """A table row's KV mark: the KV limit's row, a batch whose KV does not fit, or nothing (:func:`_kv_legend`)."""
    if row["kv_limit"]:
        return " KV limit"
    return "" if row["fits"] else " no KV room"


def _kv_legend(table: list[dict[str, Any]], from_given: bool) -> str | None:
    """What the table's KV marks mean, or None when it has none."""
    budget = "the --kv-budget-gb budget" if from_given else "the upper-bound budget (reserve 0)"
    said = []
    if any(row["kv_limit"] for row in table):
        said.append(f"KV limit: the most sequences {budget} holds")
    if any(not row["fits"] for row in table):
        said.append(f"no KV room: their KV does not fit {budget}")
    return f"  ({'; '.join(said)})" if said else None


def _estimate_lines(r: dict[str, Any]) -> list[str]:
    """The [estimate] section: the profile's constants, then estimate beside bound."""
    from ..profiles import format_constant

    e, p = r["estimate"], r["estimate"]["profile"]
    ctx = r["criticality"]["2p"]["context"]
    c = p["constants"]
    out = [
        "",
        f"Estimate [estimate]: engine profile {p['name']!r} (--estimate {p['key']}), not a bound: "
        "constants fitted on published measurements (roofline validate)",
        "  constants             " + ", ".join(format_constant(n, v["value"], v["kind"]) for n, v in c.items()),
        "  step = max(bytes / (eta_bw x bandwidth), FLOPs / (eta_mm x peak)) + t_step + layers x t_layer"
        " + batch x t_seq",
        f"  band                  {e['band_line']}",
        *([f"  engine version        {e['engine_version']}; scheduler defaults (roofline simulate): "
           f"{e['scheduler_defaults']}"] if e.get("engine_version") else []),
        f"  batch 1, weights only {_t(e['single']['step_time_s']):>12} [estimate] "
        f"vs {_t(r['single']['exact']['step_time_s'])} [bound]",
        f"  batch 1, KV at {ctx:,} tokens {_t(e['single_with_kv']['step_time_s'])} [estimate] "
        f"vs {_t(r['single_with_kv']['step_time_s'])} [bound]",
        f"  batch 8, KV at {ctx:,} tokens {_t(e['eight_with_kv']['step_time_s'])} [estimate] "
        f"vs {_t(r['eight']['with_kv']['step_time_s'])} [bound]",
        f"  {'batch':>6} | {'with KV [bound]':>15} | {'with KV [estimate]':>18} {'tokens/s':>10}  regime",
    ]
    legend = _kv_legend(r["table"], r["inputs"]["kv_limit_from"] == "given")
    bounds = {row["batch"]: row for row in r["table"]}
    from_given = r["inputs"]["kv_limit_from"] == "given"
    fitted = e.get("fitted_range")
    any_beyond = False
    for row in e["table"]:
        est, bound = row["with_kv"], bounds[row["batch"]]
        beyond = fitted is not None and not fitted["batch_min"] <= row["batch"] <= fitted["batch_max"]
        any_beyond = any_beyond or beyond
        out.append(f"  {row['batch']:>6,} | {_t(bound['with_kv']['step_time_s']):>15} | "
                   f"{_t(est['step_time_s']):>18} {est['throughput_tokens_per_s']:>10,.0f}  {est['bound']}"
                   f"{_kv_note(bound, from_given)}" + (" (beyond fit)" if beyond else ""))
    if any_beyond:
        assert fitted is not None
        out.append(f"  (beyond fit: {OUTSIDE_FITTED_RANGE}: batch; fitted on "
                   f"{batch_span(fitted['batch_min'], fitted['batch_max'])})")
    return out if legend is None else [*out, legend]


def _given_budget_caveat(given: dict[str, Any], tp: dict[str, Any] | None, from_given: bool,
                         upper: dict[str, Any], *, mla: bool = False) -> list[str]:
    """Caveats of the given budget (the lesson's 53 GB unless --kv-budget-gb): under tensor parallelism it is each
    GPU's; above what the GPU leaves after the weights (reserve 0) it is a what-if, not this GPU."""
    gb = given["budget_bytes"] / 1e9
    what = "--kv-budget-gb" if from_given else "the lesson's one-GPU figure"
    out = []
    if tp is not None:
        T = tp["size"]
        out.append(f"  (that budget is per GPU: {gb:g} GB ({what}) on each of the {T} GPUs, {gb * T:g} GB for the "
                   "group; " + ("each GPU holds every sequence's whole MLA latent KV, replicated)" if mla
                                else "each GPU holds its share of every sequence's KV)"))
    if given["budget_bytes"] > upper["budget_bytes"]:
        out.append(f"  (more than this GPU has: {gb:g} GB ({what}) exceeds the {upper['budget_bytes'] / 1e9:.2f} GB "
                   "left after the weights even at reserve 0; the line above is a what-if)")
    return out


def _real_budget_lines(a: dict[str, Any], kv: dict[str, Any], real: dict[str, Any] | None) -> list[str]:
    """The real KV budget (usable x utilization - weights - the published reserve) and its source, or why not."""
    reserve = kv["reserve"]
    if real is None or reserve is None:
        return ["  real budget           not given: no published engine log of the reserve (activation peak, "
                "non-torch memory) for this model size on this card"]
    return [
        f"  real budget           {real['budget_bytes'] / 1e9:9.2f} GB    = {a['usable_memory_bytes'] / 2**30:.1f} GiB "
        f"x {kv['utilization']:g} - weights - {reserve['bytes'] / 2**30:.2f} GiB reserve",
        f"  fits                  {real['sequences']:9,d} sequences of {real['context']:,} tokens "
        f"(token-level); {real['sequences_blocks']:,} with {real['block_size']}-token blocks",
        f"  reserve source        vLLM log, {reserve['date']}: {citation_url(reserve['citation'])}",
    ]


def _none(value: Any) -> str:
    return "none" if value is None else f"{value:,}"


def _tokens(value: Any) -> str:
    return "none" if value is None else f"{value:,.0f} tokens"


def _pipeline_column(memory: dict[str, Any], pipe: dict[str, Any]) -> None:
    """At P > 1 the memory section is one GPU of each stage together (P GPUs, each holding its stage's layers):
    P x the usable memory and budget; it fits when every stage's GPU holds its weights and its layers' part
    k_s / k of the KV (the stages' own budgets, the pipeline section's)."""
    P = pipe["deployment"]["pipeline_parallel_size"]
    k = sum(st["kv_bytes_per_token_per_gpu"] for st in pipe["stages"])
    memory["usable_bytes"] *= P
    memory["budget_bytes"] *= P
    memory["free_bytes"] = (memory["budget_bytes"] - memory["weights_bytes"] - memory["kv_bytes"]
                            - memory["reserve_bytes"])
    memory["fits"] = all(st["kv_budget_per_gpu_bytes"] > 0 and memory["kv_bytes"] * st["kv_bytes_per_token_per_gpu"]
                         <= k * st["kv_budget_per_gpu_bytes"] for st in pipe["stages"])
    memory["pipeline_parallel_size"] = P


def run(args: argparse.Namespace) -> int:
    """Print the report for the parsed arguments; return 0."""
    # not given: one GPU, or the smallest group that fits, said so
    deployment, chosen = deployment_from_args(args, utilization=args.utilization)
    note = None
    if chosen:
        note = chosen_tensor_parallel_note(deployment)
    given = args.kv_budget_gb is not None
    context = answer_context(args)
    speculative_pair(args)  # --speculative-config and --acceptance-rate, both or neither, named by flag
    pipe = None
    if deployment.pipeline_parallel_size > 1:  # + its own section (docs/conventions.md, "Pipeline parallelism")
        from ._pipeline_report import build_pipeline_report

        pipe = build_pipeline_report(deployment, context=context, batches=args.batch, block_size=args.block_size,
                                     utilization=Fraction(9, 10) if args.utilization is None else args.utilization)
    try:
        report = build_report(
            deployment, context=context, batches=args.batch,
            kv_budget=(args.kv_budget_gb if given else LESSON_KV_BUDGET_GB) * GB, utilization=args.utilization,
            block_size=args.block_size, kv_limit_from="given" if given else "upper_bound",
            speculative=args.speculative_config, acceptance_rate=args.acceptance_rate,
        )
    except InvalidValueError as err:  # a vector of another length than k: the rates' own flag, as typed
        if err.field != "acceptance_rate" or args.acceptance_rate is None:
            raise
        raise InvalidValueError("--acceptance-rate", acceptance_shown(args.acceptance_rate), err.reason) from None
    if note is not None:
        report["tensor_parallel"]["chosen"] = "smallest that fits"
        report["tensor_parallel"]["note"] = note
    elif "tensor_parallel" in report:
        report["tensor_parallel"]["chosen"] = "given"
    report.update(answers(deployment, args, context=context))
    if pipe is not None:
        report["pipeline"] = pipe
        _pipeline_column(report["memory"], pipe)
    text = json.dumps(report, indent=2) if args.json else format_report(report) + "\n" + format_answers(report)
    if pipe is not None and not args.json:
        from ._pipeline_report import format_pipeline_report

        text += "\n\n" + format_pipeline_report(pipe)
    # every notice (the auto-T one above, any a section adds) within 100 columns, like the report itself
    print(text if args.json else fit_width(text if note is None else note + "\n\n" + text))
    return 0
