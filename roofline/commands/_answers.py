"""``roofline report``'s answers to the questions users come with: one request's latency
(``--input-len``, ``--output-len``), the memory one GPU holds and one decode step by operator.

The numbers are :mod:`roofline.latency`'s; this module parses, calls and prints.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..deployment import Deployment
from ..errors import InvalidValueError
from ..latency import memory_breakdown, operator_breakdown, request_latency
from ..units import fit_width
from ._args import citation_url, int_arg

#: The report's context without --context and --input-len [tokens].
DEFAULT_CONTEXT = 1000


def add_answer_options(p: argparse.ArgumentParser) -> None:
    """--input-len, --output-len (vLLM bench's names) and --breakdown-batch."""
    p.add_argument("--input-len", type=int_arg("--input-len", 1), default=None, metavar="P",
                   help="prompt tokens of a request: with --output-len, print its TTFT, TPOT, E2E and tokens/s "
                        "for batch 1 and each --batch value (vLLM bench's name)")
    p.add_argument("--output-len", type=int_arg("--output-len", 1), default=None, metavar="O",
                   help="output tokens of a request, the first included (vLLM bench's name); with --input-len")
    p.add_argument("--breakdown-batch", type=int_arg("--breakdown-batch", 1), default=1, metavar="B",
                   help="sequences in the memory breakdown and the step by operator (default: %(default)s)")


def answer_context(args: argparse.Namespace) -> int:
    """The report's context [tokens]: --context; else P + O - 1 with --input-len and --output-len; else 1,000.

    Raises
    ------
    InvalidValueError
        One of --input-len and --output-len without the other.
    """
    given = {"--input-len": args.input_len, "--output-len": args.output_len}
    missing = [name for name, value in given.items() if value is None]
    if len(missing) == 1:
        other = "--output-len" if missing[0] == "--input-len" else "--input-len"
        raise InvalidValueError(missing[0], None, f"not given: {other} needs it (a request's prompt and output "
                                                  "tokens, vLLM bench's names, go together)")
    if args.context is not None:
        return int(args.context)
    if not missing:
        return int(args.input_len + args.output_len - 1)
    return DEFAULT_CONTEXT


def answers(deployment: Deployment, args: argparse.Namespace, *, context: int) -> dict[str, Any]:
    """The report's keys ``latency`` (with --input-len), ``memory`` and ``operators``, JSON-ready.

    ``latency`` holds ``bound`` (one row per batch: 1 and each --batch value) and, with --estimate,
    ``estimate``; each row says whether the batch's KV at its last step fits the memory left
    (``kv_fits``, :func:`roofline.latency.memory_breakdown` with the published reserve).
    """
    out: dict[str, Any] = {}
    batch = args.breakdown_batch
    if args.input_len is not None:
        prompt, output = args.input_len, args.output_len
        batches = sorted({1, *args.batch})
        kinds = {"bound": deployment.as_bound()}
        if deployment.estimate is not None:
            kinds["estimate"] = deployment
        latency: dict[str, Any] = {"input_tokens": prompt, "output_tokens": output}
        for kind, d in kinds.items():
            rows = []
            for b in batches:
                row = request_latency(d, input_tokens=prompt, output_tokens=output, batch=b).to_dict()
                row["kv_fits"] = memory_breakdown(d, batch=b, context=prompt + output - 1,
                                                 utilization=args.utilization).fits
                rows.append(row)
            latency[kind] = rows
        out["latency"] = latency
    out["memory"] = memory_breakdown(deployment, batch=batch, context=context, utilization=args.utilization).to_dict()
    out["operators"] = operator_breakdown(deployment, batch=batch, context=context).to_dict()
    return out


def _ms(seconds: float | None, width: int = 9) -> str:
    return f"{'-':>{width}}" if seconds is None else f"{seconds * 1e3:>{width},.3f}"


def format_answers(r: dict[str, Any]) -> str:
    """The latency, memory and operator sections as text, every line within 100 columns (ms, GB)."""
    out: list[str] = []
    if "latency" in r:
        lat = r["latency"]
        out += ["", f"Request latency: prompt P = {lat['input_tokens']:,} tokens, output O = "
                    f"{lat['output_tokens']:,}; B requests arrive at 0, served together",
                "  TTFT = the prefill step (it gives the first token); TPOT = mean of the O - 1 decode steps",
                "  at contexts P + 1 .. P + O - 1; E2E = TTFT + (O - 1) x TPOT; tokens/s = B x O / E2E"]
        for kind in ("bound", "estimate"):
            if kind not in lat:
                continue
            rows = lat[kind]
            label = "the bound" if kind == "bound" else f"[{rows[0]['time_kind']}]"
            out += [f"  {label}",
                    "  batch   TTFT ms   TPOT ms      E2E ms   tokens/s  per request  prefill  decode   KV fits"]
            for x in rows:
                decode = x["last_decode_bound"] or "-"
                out.append(f"  {x['batch']:>5,} {_ms(x['ttft_s'])} {_ms(x['tpot_s'])} {_ms(x['e2e_s'], 11)} "
                           f"{x['output_throughput_tokens_per_s']:>10,.1f} {x['request_tokens_per_s']:>12,.1f}  "
                           f"{x['prefill_bound']:<8} {decode:<8} {'yes' if x['kv_fits'] else 'no'}")
    m = r["memory"]
    tp = r.get("tensor_parallel")
    per = "" if tp is None else f" per GPU (of {tp['size']})"
    if "pipeline_parallel_size" in m:  # a pipeline: one GPU of each stage together (roofline report -pp)
        per = f" of one GPU per stage ({m['pipeline_parallel_size']} GPUs together)"
    out += ["", f"Memory{per or ' of the GPU'}: {m['usable_bytes'] / 2**30:,.1f} GiB usable x {m['utilization']:g} = "
                f"{m['budget_bytes'] / 1e9:,.2f} GB; KV of {m['batch']:,} x {m['context']:,} tokens"]
    for i, (cls, v) in enumerate(m["weights_by_class_bytes"].items()):
        out.append(f"  {'weights' if i == 0 else '':<9}{cls:<14}{v / 1e9:>12,.3f} GB")
    out.append(f"  {'weights total':<23}{m['weights_bytes'] / 1e9:>12,.3f} GB")
    out.append(f"  {'KV cache':<23}{m['kv_bytes'] / 1e9:>12,.3f} GB")
    source = ("none published for this size on this card: 0, the upper bound" if m["reserve_source"] is None
              else f"a published vLLM log, {citation_url(m['reserve_source'])}")
    out.append(f"  {'reserve':<23}{m['reserve_bytes'] / 1e9:>12,.3f} GB")
    out.append(f"    ({source})")
    free = m["free_bytes"]
    out.append(f"  {'free':<23}{free / 1e9:>12,.3f} GB" + ("" if m["fits"] else "  (does not fit)"))
    ops = r["operators"]
    t = ops["total"]
    out += ["", f"One decode step by operator: batch {ops['batch']:,}, context {ops['context']:,}; "
                + (f"{per.strip()}, " if per else "") + "the bound, exact FLOPs",
            "  operator     weights GB     KV GB      GFLOP  FLOP/byte  memory ms  compute ms  bound"]

    def row(name: str, w: float, kv: float, fl: float, ai: float | None, mt: float, ct: float, bound: str) -> str:
        ai_text = f"{'-':>10}" if ai is None else f"{ai:>10,.1f}"
        return (f"  {name:<11}{w / 1e9:>12,.3f}{kv / 1e9:>10,.3f}{fl / 1e9:>11,.2f} {ai_text} "
                f"{_ms(mt, 10)} {_ms(ct, 11)}  {bound}")

    for o in ops["operators"]:
        out.append(row(o["operator"], o["weight_bytes"], o["kv_bytes"], o["flops"], o["intensity_flop_per_byte"],
                       o["memory_time_s"], o["compute_time_s"], o["bound"]))
    weights = sum(o["weight_bytes"] for o in ops["operators"])
    kv = sum(o["kv_bytes"] for o in ops["operators"])
    out.append(row("total", weights, kv, t["flops"], t["intensity_flop_per_byte"], t["memory_time_s"],
                   t["compute_time_s"], t["bound"]))
    if ops["allreduce_time_s"]:
        out.append(f"  all-reduce: {ops['allreduce_link_bytes'] / 1e6:,.3f} MB over the link, "
                   f"{ops['allreduce_time_s'] * 1e3:,.3f} ms added (not overlapped)")
    out.append(f"  step time {t['step_time_s'] * 1e3:,.3f} ms = max(memory, compute)"
               + (" + all-reduce" if ops["allreduce_time_s"] else ""))
    if ops["tied_lm_head"]:
        out.append("  (tied embeddings: the lm_head's matmul reads the shared matrix, counted under lm_head)")
    return fit_width("\n".join(out))
