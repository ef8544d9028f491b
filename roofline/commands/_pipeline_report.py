"""``roofline report`` of a pipeline (``--pipeline-parallel-size P`` > 1): stages, sends, throughput in flight.

The stage split (vLLM's ``get_pp_indices``), each stage's weights, KV bytes per token, KV budget and
blocks on one GPU of its tensor-parallel group, the pipeline's KV blocks (the least over the stages)
and one virtual engine's 1/P of them, one batch's step (the one-max rule over every stage, the
all-reduces, the P - 1 sends inside a node or across nodes), and for each batch per virtual engine
the step latency, the throughput with 1 and with P batches in flight, the bubble with one in flight,
and the slowest stage's throughput (docs/conventions.md, "Pipeline parallelism"). Every time is the
roofline bound. ``roofline report -pp P`` prints it after the deployment's normal report (whose sizes
are then one GPU of each stage together: T's share of every layer).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .. import estimate
from .. import formulas as f
from ..deployment import Deployment
from ..units import fit_width, format_time

__all__ = ["build_pipeline_report", "format_pipeline_report"]


def _stage_time(d: Deployment, index: int, batch: int, context: int) -> Any:
    """One stage's own step for a batch [s]: its max(memory, compute) + its all-reduces + its send.

    Its memory: the weights it reads (its MoE layers' experts touched by the batch, uniform routing),
    the KV of its own layers (a windowed layer holds min(c, w)) and, for a hybrid, each row's state
    of its recurrent layers read and written back (2 B S_s); its compute likewise.
    """
    st = d.stages()[index]
    a = d.accelerator
    share = d.share
    touched = f.experts_touched(num_experts=share.num_experts, experts_per_token=share.num_experts_per_tok,
                                batch=batch) if st.routed_expert_bytes else 0
    held = batch * st.held_tokens(context)  # token-layers of KV the batch reads in this stage
    mem = f.memory_time(weight_bytes=st.read_weight_bytes(touched) + 2 * batch * Fraction(st.state_bytes),
                        kv_bytes_per_token=Fraction(st.kv_bytes_per_token, st.layers), context_sum=held,
                        bandwidth=Fraction(a.bandwidth))
    comp = f.compute_time(batch=batch, context_sum=held, flops_per_token=st.flops_per_token,
                          attention_flops_per_token=Fraction(st.attention_flops_per_token, st.layers),
                          peak_flops=Fraction(a.peak(share.compute_dtype)))
    ar = 0
    if d.tensor_parallel_size > 1:
        ar = f.decode_allreduce_time(batch=batch, **dict(d.allreduce_terms(), num_hidden_layers=st.layers))
    send = 0
    if index < d.pipeline_parallel_size - 1:
        node, T = a.node_gpus, d.tensor_parallel_size
        crosses = ((index + 1) * T - 1) // node != ((index + 1) * T) // node
        terms = d.send_terms()
        bw, lat = ((terms["network_bandwidth"], terms["network_latency"]) if crosses
                   else (terms["send_bandwidth"], terms["send_latency"]))
        send = f.pipeline_send_time(batch=batch, hidden_size=terms["hidden_size"],
                                    activation_bytes=terms["activation_bytes"], send_bandwidth=bw, send_latency=lat)
    return max(mem, comp) + ar + send


def build_pipeline_report(d: Deployment, *, context: int, batches: list[int] | tuple[int, ...],
                          utilization: Any = Fraction(9, 10), block_size: int = 16) -> dict[str, Any]:
    """The pipeline's numbers as a JSON-ready dict (SI units, floats).

    Parameters
    ----------
    d : Deployment with P > 1 (the bound is priced whatever its profile)
    context : int >= 1 [tokens] per sequence
    batches : batches per virtual engine [sequences], each >= 1
    utilization : in (0, 1]; block_size : int >= 1 [tokens/block]

    Returns
    -------
    dict with ``deployment``, ``stages`` (layers, weights, KV per token, KV budget and blocks of one
    GPU of each), ``kv`` (pipeline blocks, per virtual engine, sequences of ``context``), ``sends``,
    ``batch_1`` (memory, compute, all-reduce, sends, step and the dominating communication term) and
    ``rows`` (per batch: latency, tokens/s with 1 and with P in flight, bubble, slowest stage).

    Raises
    ------
    InvalidValueError
        A bad context, batch, utilization or block size; links the sends cannot use (by name).
    """
    d = d.as_bound()
    a, P, T = d.accelerator, d.pipeline_parallel_size, d.tensor_parallel_size
    stages = []
    for st in d.stages():
        budget = f.kv_budget(memory=Fraction(a.usable_memory), utilization=utilization,
                             weight_bytes=Fraction(st.weight_bytes), reserved=0)
        blocks = 0 if budget <= 0 else int(f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=st.kv_bytes_per_token,
                                                                block_size=block_size))
        stages.append({"stage": st.index, "first_layer": st.first_layer, "layers": st.layers,
                       "weight_bytes_per_gpu": float(st.weight_bytes),
                       "kv_bytes_per_token_per_gpu": float(st.kv_bytes_per_token),
                       "kv_budget_per_gpu_bytes": float(budget), "kv_blocks": blocks})
    blocks = d.kv_blocks(block_size=block_size, utilization=utilization)
    # a hybrid's sequence also holds its state blocks (the most over the stages, Deployment.state_blocks)
    per_seq = int(f.blocks_per_sequence(context=context, block_size=block_size)) + d.state_blocks(
        block_size=block_size)
    intra, inter = d.pipeline_sends()
    one = estimate.decode_step(d, batch=1, context=context)
    comm = {"all-reduces": float(one.allreduce_time), "pipeline sends": float(one.send_time)}
    rows = []
    for b in batches:
        step = estimate.decode_step(d, batch=b, context=context)
        slowest = max(_stage_time(d, i, b, context) for i in range(P))
        rows.append({"batch_per_virtual_engine": b, "fits": b * P * per_seq <= blocks,
                     "step_time_s": float(step.step_time), "send_time_s": float(step.send_time),
                     "tokens_per_s_one_in_flight": float(b / step.step_time),
                     "tokens_per_s_all_in_flight": float(P * b / step.step_time),
                     "bubble_share_one_in_flight": float(f.pipeline_bubble_share(batches_in_flight=1,
                                                                                 pipeline_parallel_size=P)),
                     "slowest_stage_s": float(slowest),
                     "slowest_stage_tokens_per_s": float(f.slowest_stage_throughput(batch=b, stage_time=slowest))})
    return {
        "deployment": {"model": d.model.name, "accelerator": a.name, "tensor_parallel_size": T,
                       "pipeline_parallel_size": P, "gpus": d.gpus, "nodes": a.nodes(d.gpus),
                       "node_gpus": a.node_gpus},
        "context": context, "utilization": float(utilization), "block_size": block_size,
        "stages": stages,
        "kv": {"blocks": blocks, "blocks_per_virtual_engine": d.virtual_engine_kv_blocks(
            block_size=block_size, utilization=utilization),
            "sequences": d.sequences_that_fit(context, block_size=block_size, utilization=utilization),
            "sequences_per_virtual_engine": (blocks // P) // per_seq},
        "sends": {"intra_node": intra, "inter_node": inter,
                  "bytes_per_token": d.share.hidden_size * d.share.activation_bytes,
                  "inside_link": a.link(2).name if intra else None,
                  "network": a.network.name if inter and a.network else None},
        "batch_1": {"memory_time_s": float(one.memory_time), "compute_time_s": float(one.compute_time),
                    "allreduce_time_s": float(one.allreduce_time), "send_time_s": float(one.send_time),
                    "step_time_s": float(one.step_time),
                    "largest_communication_term": max(comm, key=lambda k: comm[k])},
        "rows": rows,
    }


def format_pipeline_report(r: dict[str, Any]) -> str:
    """The pipeline report as text, within 100 columns."""
    d, kv, s, one = r["deployment"], r["kv"], r["sends"], r["batch_1"]
    T, P = d["tensor_parallel_size"], d["pipeline_parallel_size"]
    t = lambda x: format_time(x, decimals=(3, 3, 2))  # noqa: E731
    out = [
        f"Pipeline parallelism: {d['model']} on {d['gpus']} x {d['accelerator']} (TP {T} x PP {P}: "
        f"{d['nodes']} node(s) of {d['node_gpus']}); the roofline bound, context {r['context']:,}",
        "",
        f"Pipeline stages (vLLM's get_pp_indices), one GPU of each stage's group of {T}:",
        f"  {'stage':>5} {'layers':>11} {'weights/GPU':>12} {'KV B/token':>11} {'KV budget/GPU':>14} "
        f"{'KV blocks':>10}",
    ]
    for st in r["stages"]:
        last = st["first_layer"] + st["layers"] - 1
        out.append(f"  {st['stage']:>5} {st['first_layer']:>4}-{last:<3} ({st['layers']:>2}) "
                   f"{st['weight_bytes_per_gpu'] / 1e9:>9.2f} GB {st['kv_bytes_per_token_per_gpu']:>11,.0f} "
                   f"{st['kv_budget_per_gpu_bytes'] / 1e9:>11.2f} GB {st['kv_blocks']:>10,}")
    out += [
        f"  KV: the pipeline holds {kv['blocks']:,} blocks of {r['block_size']} tokens (the least over the stages); "
        f"each of the {P} virtual engines {kv['blocks_per_virtual_engine']:,}: {kv['sequences']:,} sequences of "
        f"{r['context']:,} tokens in all, {kv['sequences_per_virtual_engine']:,} per virtual engine",
        f"  sends: {P - 1} per step of B x {s['bytes_per_token']:,} B: {s['intra_node']} inside a node"
        + (f" ({s['inside_link']})" if s["inside_link"] else "") + f", {s['inter_node']} across nodes"
        + (f" ({s['network']})" if s["network"] else ""),
        "",
        "One batch through the pipeline, batch 1 (one max over every stage + all-reduces + sends):",
        f"  memory time {t(one['memory_time_s'])}, compute time {t(one['compute_time_s'])}, all-reduces "
        f"{t(one['allreduce_time_s'])}, sends {t(one['send_time_s'])}: step {t(one['step_time_s'])}; of the "
        f"communication the {one['largest_communication_term']} dominate",
        "",
        f"Per batch of each virtual engine: latency, tokens/s with 1 and with {P} in flight, the slowest stage",
        f"  {'batch':>6} {'latency':>11} {'sends':>9} {'1 in flight':>12} {f'{P} in flight':>12} "
        f"{'slowest stage':>14} {'its tokens/s':>12}",
    ]
    for row in r["rows"]:
        out.append(f"  {row['batch_per_virtual_engine']:>6,} {t(row['step_time_s']):>11} {t(row['send_time_s']):>9} "
                   f"{row['tokens_per_s_one_in_flight']:>12,.0f} {row['tokens_per_s_all_in_flight']:>12,.0f} "
                   f"{t(row['slowest_stage_s']):>14} {row['slowest_stage_tokens_per_s']:>12,.0f}"
                   + ("" if row["fits"] else "  (KV does not fit)"))
    out.append(f"  one batch in flight leaves {r['rows'][0]['bubble_share_one_in_flight']:.0%} of the stage time "
               f"idle (the bubble, 1 - 1/{P}); a full pipeline is held to its slowest stage")
    return fit_width("\n".join(out))
