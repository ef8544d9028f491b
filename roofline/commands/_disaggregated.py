"""``roofline simulate`` with disaggregated prefill and decode: the flags of the two pools and their output.

Given ``--num-prefill-instances`` or ``--num-decode-instances``, ``roofline simulate`` serves the
workload with :func:`roofline.sim.serve_disaggregated` instead of comparing the policies: a prefill
pool of ``--num-prefill-instances`` deployments of ``--prefill-tensor-parallel-size`` GPUs of
``--prefill-accelerator``, a decode pool likewise, the KV moved over the accelerators' NICs or over
``--kv-transfer-bandwidth`` / ``--kv-transfer-latency`` (docs/conventions.md, "Disaggregated prefill
and decode"). vLLM runs one engine per server and has no flag for a pool; the names follow its own
(``--tensor-parallel-size``) with the pool in front, as NVIDIA Dynamo's prefill and decode workers
are configured one pool at a time.
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from typing import Any

from ..errors import InvalidValueError, UnknownPresetError
from ..sim import Pool, TransferLink, serve_disaggregated
from ..units import GB, fit_width, format_time
from ._args import deployment_from_args, given_value, int_arg, number_arg

__all__ = ["add_arguments", "wanted", "check_unused", "run"]

#: Flags of the policy comparison a disaggregated run has no use for, refused by name when given.
_NOT_HERE = (("enable_prefix_caching", "--enable-prefix-caching"), ("out", "--out"), ("steps", "--steps"),
             ("max_concurrency", "--max-concurrency"), ("think_time", "--think-time"), ("batch_size", "--batch-size"),
             ("max_wait", "--max-wait"), ("max_prefill_tokens", "--max-prefill-tokens"), ("slo_ttft", "--slo-ttft"),
             ("slo_tpot", "--slo-tpot"), ("slo_e2e", "--slo-e2e"),
             ("speculative_config", "--speculative-config"), ("acceptance_rate", "--acceptance-rate"),
             ("acceptance_mode", "--acceptance-mode"), ("speculative_seed", "--speculative-seed"),
             # a pool's instance is one tensor-parallel group: its sizes are the instance counts and the pools' TP
             ("data_parallel_size", "--data-parallel-size"), ("pipeline_parallel_size", "--pipeline-parallel-size"))
#: The pools' own flags, which only a disaggregated run takes.
_OWN = (("prefill_tensor_parallel_size", "--prefill-tensor-parallel-size"),
        ("decode_tensor_parallel_size", "--decode-tensor-parallel-size"),
        ("prefill_accelerator", "--prefill-accelerator"), ("decode_accelerator", "--decode-accelerator"),
        ("kv_transfer_bandwidth", "--kv-transfer-bandwidth"), ("kv_transfer_latency", "--kv-transfer-latency"))


def _given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the user gave the option ``dest`` (its value differs from the parser's default)."""
    given = getattr(args, "given_flags", None)
    if isinstance(given, dict) and dest in given:
        return True
    return getattr(args, dest, None) not in (None, False, _DEFAULTS.get(dest))


_DEFAULTS: dict[str, Any] = {}


def check_unused(args: argparse.Namespace) -> None:
    """Refuse by name a pool flag given without a disaggregated run (it would change nothing, silently)."""
    if wanted(args):
        return
    for dest, flag in _OWN:
        if getattr(args, dest, None) is not None:
            raise InvalidValueError(flag, given_value(args, dest), "only with --num-prefill-instances or "
                                    "--num-decode-instances (a disaggregated run)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the two pools (one argument group)."""
    _DEFAULTS.update((dest, p.get_default(dest)) for dest, _ in _NOT_HERE)
    g = p.add_argument_group("disaggregated prefill and decode",
                             "either of the first two flags runs it in place of the policy comparison\n"
                             "(docs/conventions.md, 'Disaggregated prefill and decode')")
    g.add_argument("--num-prefill-instances", type=int_arg("--num-prefill-instances", 1), default=None,
                   metavar="NP", help="prefill instances (default with --num-decode-instances: 1)")
    g.add_argument("--num-decode-instances", type=int_arg("--num-decode-instances", 1), default=None,
                   metavar="ND", help="decode instances (default with --num-prefill-instances: 1)")
    g.add_argument("--prefill-tensor-parallel-size", "--prefill-tp", type=int_arg("--prefill-tensor-parallel-size", 1),
                   default=None, metavar="TP", help="GPUs of one prefill instance (default: --tensor-parallel-size)")
    g.add_argument("--decode-tensor-parallel-size", "--decode-tp", type=int_arg("--decode-tensor-parallel-size", 1),
                   default=None, metavar="TD", help="GPUs of one decode instance (default: --tensor-parallel-size)")
    g.add_argument("--prefill-accelerator", default=None, metavar="NAME",
                   help="accelerator of the prefill pool (default: --accelerator)")
    g.add_argument("--decode-accelerator", default=None, metavar="NAME",
                   help="accelerator of the decode pool (default: --accelerator)")
    g.add_argument("--kv-transfer-bandwidth", type=number_arg("--kv-transfer-bandwidth", positive=True),
                   default=None, metavar="GB/S", help="KV transfer bandwidth per GPU per direction [GB/s] "
                   "(default: the accelerators' NIC, Accelerator.network)")
    g.add_argument("--kv-transfer-latency", type=number_arg("--kv-transfer-latency"), default=None, metavar="US",
                   help="latency of one KV transfer [us] (default: the NIC's; 0 with --kv-transfer-bandwidth)")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the flags ask for a disaggregated run."""
    return getattr(args, "num_prefill_instances", None) is not None or \
        getattr(args, "num_decode_instances", None) is not None


def _deployment(args: argparse.Namespace, side: str) -> Any:
    """One pool's Deployment: the command's flags with the pool's accelerator and tensor-parallel size.

    A refusal of the accelerator or of T names the flag that gave it: the pool's own
    (``--prefill-accelerator``, ``--prefill-tensor-parallel-size``) where given, else the command's.
    """
    flags = argparse.Namespace(**vars(args))
    accelerator = getattr(args, f"{side}_accelerator")
    if accelerator is not None:
        flags.accelerator = accelerator
    size = getattr(args, f"{side}_tensor_parallel_size")
    flags.tensor_parallel_size = size if size is not None else (args.tensor_parallel_size or 1)
    try:
        deployment, _ = deployment_from_args(flags)
    except UnknownPresetError as err:
        if err.field != "--accelerator" or accelerator is None:
            raise
        raise UnknownPresetError(err.kind, err.name, err.known, f"--{side}-accelerator", hint=err.hint,
                                 aliases=[err.suggestion] if err.suggestion else ()) from None
    except InvalidValueError as err:
        if err.field != "--tensor-parallel-size" or size is None:
            raise
        raise InvalidValueError(f"--{side}-tensor-parallel-size", size, err.reason) from None
    return deployment


def _link(args: argparse.Namespace, prefill: Any, decode: Any) -> TransferLink:
    if args.kv_transfer_bandwidth is not None:
        latency = Fraction(0) if args.kv_transfer_latency is None else args.kv_transfer_latency / 10**6
        return TransferLink(bandwidth=args.kv_transfer_bandwidth * GB, latency=latency)
    if args.kv_transfer_latency is not None:
        raise InvalidValueError("--kv-transfer-latency", float(args.kv_transfer_latency),
                                "give --kv-transfer-bandwidth with it (the NIC's latency goes with its bandwidth)")
    try:
        return TransferLink.between(prefill.accelerator, decode.accelerator)
    except InvalidValueError as err:  # the field by the flag that gave its accelerator (its own, or --accelerator)
        side = "prefill" if err.field == "prefill_accelerator" else "decode"
        dest = f"{side}_accelerator" if getattr(args, f"{side}_accelerator") is not None else "accelerator"
        flag = "--" + dest.replace("_", "-")  # the value as typed ('mi300x'), not the accelerator's name
        raise InvalidValueError(flag, given_value(args, dest), "has no stated inter-node network to move KV "
                                "between the pools: give --kv-transfer-bandwidth (and --kv-transfer-latency)") from None


def simulate(args: argparse.Namespace, build_workload: Any, default_utilization: Any) -> dict[str, Any]:
    """Run the disaggregated simulation the flags ask for; the inputs and the SimResult.

    ``build_workload`` and ``default_utilization`` are ``roofline simulate``'s own (the workload its flags
    describe; vLLM's 0.9), so that both runs read the same flags the same way.

    Raises
    ------
    RooflineError
        A bad flag value (named), a trace that cannot be read, a link an accelerator does not have.
    """
    for dest, flag in _NOT_HERE:
        if _given(args, dest):
            raise InvalidValueError(flag, given_value(args, dest), "not taken by a disaggregated run "
                                    "(--num-prefill-instances / --num-decode-instances)")
    if args.policy not in ("all", "continuous"):
        raise InvalidValueError("--policy", args.policy, "a disaggregated run serves each pool by continuous "
                                "batching")
    if args.kv_budget_gb is not None and args.utilization is not None:
        raise InvalidValueError("--utilization", float(args.utilization), "the KV budget given by --kv-budget-gb "
                                "replaces the one --utilization gives; give one of them")
    prefill_d, decode_d = _deployment(args, "prefill"), _deployment(args, "decode")
    link = _link(args, prefill_d, decode_d)
    utilization = default_utilization if args.utilization is None else args.utilization
    budget = None if args.kv_budget_gb is None else args.kv_budget_gb * GB
    common = dict(utilization=utilization, kv_budget=budget, block_size=args.block_size,
                  exact=not args.float_mode, overhead=args.overhead, max_num_seqs=args.max_num_seqs,
                  admission=args.admission.replace("-", "_"))
    prefill = Pool.for_deployment(prefill_d, instances=args.num_prefill_instances or 1,
                                  prefill="chunked" if args.chunked_prefill else "separate",
                                  max_num_batched_tokens=args.max_num_batched_tokens, **common)
    decode = Pool.for_deployment(decode_d, instances=args.num_decode_instances or 1, **common)
    requests, workload = build_workload(args)
    model = prefill_d.share
    max_model_len = args.max_model_len if args.max_model_len is not None else model.max_position_embeddings
    result = serve_disaggregated(requests, prefill, decode, link=link, max_model_len=max_model_len,
                                 engine=args.engine, router=args.router)
    return dict(result=result, workload=workload, prefill=prefill, decode=decode, link=link,
                prefill_deployment=prefill_d, decode_deployment=decode_d)


def _t(seconds: Any) -> str:
    return format_time(seconds, decimals=(2, 1, 0), whole_from=100, none="-")


def _rate(rate: float | None, spec: str) -> str:
    """A tokens/s figure: thousands separators, 3 significant digits below 1 (a starved run's is not 0)."""
    return "-" if rate is None else f"{rate:.3g}" if 0 < rate < 1 else f"{rate:,{spec}}"


def _pool_line(name: str, pool: Pool, deployment: Any) -> str:
    kv = pool.kv_pool
    blocks = ("unlimited" if kv is None or kv.capacity_blocks is None
              else f"{kv.capacity_blocks:,} blocks of {kv.block_size}")
    many = "instance" if pool.instances == 1 else "instances"
    return (f"  {name + ' pool:':<14}{pool.instances} {many} of {deployment.where} ({pool.total_gpus} GPUs), KV "
            f"{blocks} each")


def format_text(run: dict[str, Any], describe: Any) -> str:
    """The disaggregated run as text (lines of at most 100 columns); ``describe`` names the workload."""
    r, link = run["result"], run["link"]
    s, o = r.summary, r.options
    gpus = o["gpus"]
    model = run["prefill_deployment"].share
    rate = None if s.output_tokens_per_s is None else float(s.output_tokens_per_s)
    lines = [
        f"roofline simulate: {s.requests:,} requests from {describe(run['workload'])}, disaggregated",
        f"  {model.name} (weights {model.weight_format}, KV {model.kv_dtype}); step times: the roofline bound"
        if run["prefill_deployment"].estimate is None else f"  {model.name}; step times: the estimate",
        _pool_line("prefill", run["prefill"], run["prefill_deployment"]),
        _pool_line("decode", run["decode"], run["decode_deployment"]),
        f"  KV transfer: {link.name}, {float(link.bandwidth) / 1e9:g} GB/s per GPU, "
        f"{float(link.latency) * 1e6:g} us; {run['decode'].kv_bytes_per_token:,} B/token per decode GPU",
        f"  each instance: continuous batching, max_num_seqs {run['decode'].max_num_seqs}, "
        f"{run['decode'].admission.replace('_', '-')} admission; {run['prefill'].prefill} prefill",
        f"  routing: {o['router']} in each pool (--router); simulation engine: {o['engine']}",
        "",
        f"  {'':<10} {'p50':>11} {'p90':>11} {'p99':>11}",
    ]
    for label, stats in (("TTFT", s.ttft), ("TPOT", s.tpot), ("E2E", s.e2e), ("queue wait", s.queue_wait)):
        cells = ["-" if stats is None else _t(getattr(stats, q)) for q in ("p50", "p90", "p99")]
        lines.append(f"  {label:<10}" + "".join(f" {c:>11}" for c in cells))  # a space keeps wide cells apart
    lines += [
        "",
        f"  completed {s.completed:,}, rejected {s.rejected:,}, preemptions {s.preemptions:,}; makespan "
        f"{_t(s.makespan_s)}",
        f"  throughput {_rate(rate, '.0f')} output tokens/s on {gpus} GPUs = "
        f"{_rate(None if rate is None else rate / gpus, '.1f')} tokens/s per GPU",
    ]
    for inst in o["instances"]:
        cap = inst["kv_capacity_blocks"]
        peak = f"{inst['peak_kv_blocks']:,}" + ("" if cap is None else f" of {cap:,}")
        lines.append(f"    {inst['pool']} {inst['index']}: {inst['requests']:,} requests, {inst['steps']:,} steps, "
                     f"busy {_t(inst['busy_s'])}, peak KV blocks {peak}, preemptions {inst['preemptions']:,}")
    rejected = r.rejections()
    if rejected:
        request, why = rejected[0]
        lines.append(f"  {len(rejected):,} rejected; the first, request {request.id}: {why}")
    lines += ["  TTFT ends when the KV has reached the decode pool (the transfer included); TPOT = (E2E - TTFT) /",
              "  (O - 1); the prefill pool's KV is freed at the end of its prefill (no backpressure modelled);",
              "  percentiles are interpolated (numpy.percentile's default, as vllm bench serve)."]
    return fit_width("\n".join(lines))


def to_json(run: dict[str, Any]) -> str:
    """The disaggregated run as JSON: the pools, the link and the result's options and summary."""
    r = run["result"]
    pools = {}
    for side in ("prefill", "decode"):
        pool, d = run[side], run[f"{side}_deployment"]
        kv = pool.kv_pool
        pools[side] = {"instances": pool.instances, "tensor_parallel_size": pool.tensor_parallel_size,
                       "accelerator": {"key": d.accelerator.key, "name": d.accelerator.name},
                       "kv_capacity_blocks": None if kv is None else kv.capacity_blocks,
                       "block_size": None if kv is None else kv.block_size,
                       "kv_bytes_per_token_per_gpu": pool.kv_bytes_per_token, "admission": pool.admission}
    model = run["prefill_deployment"].share
    return json.dumps({"workload": run["workload"],
                       "model": {"name": model.name, "weight_dtype": model.weight_dtype, "kv_dtype": model.kv_dtype},
                       "pools": pools, "link": run["link"].to_dict(), "result": r.to_dict()}, indent=2)


def run(args: argparse.Namespace, *, build_workload: Any, describe: Any, default_utilization: Any) -> int:
    """Simulate and print the disaggregated run; return 0 (the arguments as :func:`simulate` and
    :func:`format_text` take them)."""
    result = simulate(args, build_workload, default_utilization)
    print(to_json(result) if args.json else format_text(result, describe))
    return 0
