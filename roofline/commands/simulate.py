"""``roofline simulate``: serve a workload under each policy and compare them.

Runs the exact step-level reference scheduler (:mod:`roofline.sim`) for a model on an
accelerator: one-by-one (serial), static batching and continuous batching (and, with
``--chunked-prefill``, continuous batching with chunked prefill beside it), with roofline
step times (exact Fractions unless ``--float``), and prints one row per policy: requests
handed back and rejected, steps, makespan, output tokens/s, the long-run useful share,
slot occupancy, TTFT, TPOT, ITL and E2E p50 and p99 (interpolated, as ``vllm bench serve``), peak KV and
preemptions (``--verbose`` adds the queue wait and each latency at p50 / p90 / p99), and goodput
when SLOs are given (``--slo-ttft``, ``--slo-tpot``, ``--slo-e2e``, in milliseconds as
vLLM's ``--goodput``).

The workload is a trace (``--trace``), or generated with vLLM's benchmark flag names:
``--num-prompts M`` requests at ``--request-rate R`` (Poisson; ``--burstiness`` < 1 or > 1
for gamma arrivals; ``inf``, the default, sends them all at t = 0) with
``--random-input-len`` / ``--random-output-len`` lengths (``--input-len-dist``,
``--output-len-dist``: fixed, uniform with ``--random-range-ratio``, capped exponential,
lognormal, or trace pairs), or ``--max-concurrency N`` closed-loop clients, each sending
its next request when its previous one is handed back (plus ``--think-time``). ``--seed``
makes it reproducible and is printed with the results.

The KV pool is the budget the accelerator leaves at ``--utilization`` (usable memory x
utilization - weight bytes), or ``--kv-budget-gb`` (not both: the given budget replaces the
one the utilization gives), in paged blocks of ``--block-size`` tokens, for every
policy (a request whose lifetime KV exceeds it is rejected).

``--out DIR`` writes DIR/<policy>-requests.csv for each policy, and with ``--steps`` the
per-step tables DIR/<policy>-steps.csv too (one row per step: millions of rows, hundreds of
MB, on the shipped conversation trace); the command says on stderr how much it will write,
refuses an output that would write over the trace or the config it reads, and writes each
file atomically (the old file or the new one, never half of one).

``--data-parallel-size D`` (vLLM's flag) serves the workload on D replicas of the deployment,
each with its own KV pool and continuous-batching scheduler, behind the router ``--router``
(round-robin, least-requests or least-kv; docs/conventions.md, "Data-parallel replicas"): the
rows are continuous batching's, their percentiles over all requests of all replicas, followed
by a per-replica table (requests, tokens, busy time, peak KV) and the output throughput per
GPU; ``--json`` carries the per-replica load. With ``--pipeline-parallel-size P`` the replicas
are D x P virtual engines (P per pipeline) behind one router; a disaggregated run routes each of
its pools by ``--router`` too.

The trace: by default the Azure LLM inference trace 2023 of a conversation service
shipped with the package (19,366 requests over one hour; Azure Public Dataset, CC-BY 4.0;
Patel et al., "Splitwise", ISCA 2024); ``--trace code`` the shipped coding-service trace
(8,819 requests); any other value is a file (``.gz`` read as gzip).

Examples::

    roofline simulate --limit 1000
    roofline simulate --trace code --float
    roofline simulate --chunked-prefill --max-num-batched-tokens 2048
    roofline simulate --model llama-3.1-70b --tensor-parallel-size 2 --data-parallel-size 4 \\
        --router least-kv
    roofline simulate --max-concurrency 10 --num-prompts 200 --random-input-len 512 \\
        --random-output-len 128
    roofline simulate --model opt-13b --accelerator a100-40gb --num-prompts 1000 \\
        --random-input-len 512 --random-output-len 128 --output-len-dist exponential \\
        --output-len-cap 512   # the Anyscale benchmark
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import io
import json
import os
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs

from .. import estimate
from .._checks import name_key
from .._io import atomic_write, check_outputs, check_own_csv, locked_folder, output_path
from ..deployment import Deployment
from ..errors import FLAG_GIVEN, InvalidValueError, WorkloadSizeError
from ..sim import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ENGINES,
    LENGTH_DISTRIBUTIONS,
    POLICIES,
    ROUTERS,
    SHIPPED_TRACES,
    ClosedLoop,
    KVPool,
    RooflineCostModel,
    SimResult,
    Speculation,
    load_trace,
    scale_rate,
    serve_replicas,
    shipped_trace,
    synthetic_workload,
)
from ..sim.workloads import DEFAULT_HASH_BLOCK, DEFAULT_TURN_GAP_S, MAX_HASHED_BLOCKS
from ..units import GB, fit_width, format_time
from . import _disaggregated
from ._args import (
    acceptance_shown,
    add_data_parallel_option,
    add_estimate_option,
    add_expert_parallel_option,
    add_flops_option,
    add_model_options,
    add_pipeline_parallel_option,
    add_speculative_options,
    add_tensor_parallel_option,
    chosen_tensor_parallel_note,
    deployment_from_args,
    given_value,
    int_arg,
    number_arg,
    plain,
    speculative_pair,
)

DEFAULT_BATCH_SIZE = 8
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_BLOCK_SIZE = 16
#: Share of usable memory the server may use when neither --utilization nor --kv-budget-gb is given (vLLM's
#: ``--gpu-memory-utilization`` default).
DEFAULT_UTILIZATION = Fraction(9, 10)
#: The trace ``simulate`` serves when ``--trace`` is not given: the shipped conversation trace.
DEFAULT_TRACE = "conv"
#: vLLM's ``benchmark_serving.py`` defaults for the random dataset [tokens].
DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 128
#: The policies' row labels; continuous batching with chunked prefill is its own row.
CHUNKED = "continuous-chunked"


def _rate_arg(text: str) -> Fraction | None:
    """--request-rate: requests/s > 0, or ``inf`` (every request at t = 0; vLLM's default)."""
    if text.strip().lower() in ("inf", "infinity"):
        return None
    value: Fraction = number_arg("--request-rate", positive=True)(text)
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` subcommand."""
    p = sub.add_parser(
        "simulate",
        help="serve a trace or a generated workload under serial, static and continuous batching and compare",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_workload_options(p)
    p.add_argument("--policy", choices=("all", *POLICIES), default="all",
                   help="policy to run (default: all; with --estimate ENGINE, the engine's own)")
    add_model_options(p)
    add_flops_option(p, default="exact")
    add_estimate_option(p, instead=True)
    add_tensor_parallel_option(p, default=None, budgets="the KV pool")
    add_pipeline_parallel_option(p)
    add_data_parallel_option(p)
    p.add_argument("--router", choices=ROUTERS, default="round-robin",
                   help="with --data-parallel-size, -pp or a disaggregated run's pools: the replica (virtual "
                        "engine, pool instance) each arriving request goes to: round-robin, least-requests "
                        "(fewest outstanding), least-kv (fewest KV blocks in use); ties to the lowest index "
                        "(default: %(default)s; least-requests with -pp)")
    add_expert_parallel_option(p)
    p.add_argument("--overhead", type=number_arg("--overhead"), default=Fraction(0),
                   help="fixed per-step overhead in seconds (default: 0)")
    p.add_argument("--float", action="store_true", dest="float_mode",
                   help="compute step times in floats instead of exact Fractions (agrees to rounding); floats run "
                        "on the step engine, so this is slower than the exact default")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="event: closed-form decode stretches on an integer tick clock, cost grows with requests; "
                        "step: one step at a time (the reference; same results); auto (default): event where the "
                        "run can take it (not --float, nor continuous batching on sliding windows), else step; "
                        "the output says which ran")
    p.add_argument("--batch-size", type=int_arg("--batch-size", 1), default=DEFAULT_BATCH_SIZE,
                   help="static batching: rows per batch (default: %(default)s)")
    p.add_argument("--max-wait", type=number_arg("--max-wait"), default=None,
                   help="static batching: start a partial batch once its oldest request waited this many seconds "
                        "(default: wait for a full batch or the end of the trace)")
    p.add_argument("--max-num-seqs", type=int_arg("--max-num-seqs", 1), default=DEFAULT_MAX_NUM_SEQS,
                   help="continuous batching: most sequences running at once (default: %(default)s, vLLM's)")
    p.add_argument("--admission", choices=("reserve", "on-demand", "on_demand"), default="reserve",
                   help="continuous batching: reserve each request's lifetime KV (P + O - 1) on admission, or "
                        "allocate blocks on demand and preempt by recompute (default: reserve)")
    p.add_argument("--enable-prefix-caching", action="store_true", dest="enable_prefix_caching",
                   help="continuous batching: vLLM's automatic prefix caching (a prompt's leading full "
                   "blocks whose content is held are not recomputed and count once in the pool; the Mooncake "
                   "traces give their blocks' hashes; docs/conventions.md, \"Prefix caching\"); serial and static "
                   "batching do not share KV and refuse it (default: off; the output says whether it was on)")
    add_speculative_options(p, scheduler=True)  # continuous batching: each step verifies k + 1 tokens per sequence
    p.add_argument("--max-prefill-tokens", type=int_arg("--max-prefill-tokens", 1), default=None,
                   help="continuous batching without chunking: prefill token budget per step (default: none)")
    p.add_argument("--chunked-prefill", "--enable-chunked-prefill", action="store_true", dest="chunked_prefill",
                   help="continuous batching with chunked prefill: each step gives every running decode its "
                        "token, then fills --max-num-batched-tokens with prompt chunks (vLLM V1); with --policy all "
                        "it is one more row, with --policy continuous it replaces the prefill-only row")
    p.add_argument("--max-num-batched-tokens", type=int_arg("--max-num-batched-tokens", 1), default=None,
                   help="per-step token budget. With --chunked-prefill: the chunked row's decode rows + prompt "
                        f"chunks (default: {DEFAULT_MAX_NUM_BATCHED_TOKENS}, vLLM's), the other rows run without a "
                        "budget. Without: static batching forms batches whose padded prefill fits it, and continuous "
                        "batching uses it as --max-prefill-tokens (longer prompts are rejected, as vLLM without "
                        "chunked prefill does); one-by-one serving (serial) has no step budget: refused with "
                        "--policy serial")
    p.add_argument("--max-model-len", type=int_arg("--max-model-len", 1), default=None,
                   help="reject requests whose prompt + output exceed this many tokens (default: the model's "
                        "max_position_embeddings, as vLLM; no limit when the config has none)")
    g = p.add_argument_group("service level objectives (goodput)")
    g.add_argument("--slo-ttft", type=number_arg("--slo-ttft"), default=None, metavar="MS",
                   help="TTFT limit in milliseconds (as vLLM's --goodput ttft:MS)")
    g.add_argument("--slo-tpot", type=number_arg("--slo-tpot"), default=None, metavar="MS",
                   help="TPOT limit in milliseconds")
    g.add_argument("--slo-e2e", type=number_arg("--slo-e2e"), default=None, metavar="MS",
                   help="end-to-end latency limit in milliseconds")
    p.add_argument("--block-size", type=int_arg("--block-size", 1), default=DEFAULT_BLOCK_SIZE,
                   help="paged KV block size in tokens; 1 for token accounting (default: %(default)s)")
    p.add_argument("--utilization", "--gpu-memory-utilization",
                   type=number_arg("--utilization", positive=True, at_most_one=True),
                   default=None,
                   help="share of usable memory the server may use; KV budget = usable x this - weights "
                        f"(default: {float(DEFAULT_UTILIZATION):g}; not with --kv-budget-gb)")
    p.add_argument("--kv-budget-gb", type=number_arg("--kv-budget-gb", positive=True), default=None,
                   help="KV budget in GB (1e9 bytes), instead of the one --utilization gives")
    _disaggregated.add_arguments(p)
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of the table")
    p.add_argument("--verbose", action="store_true",
                   help="also print every latency's p50 / p90 / p99 (queue wait included)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="also write DIR/<policy>-requests.csv (one row per request); never over the trace or "
                        "config read")
    p.add_argument("--steps", action="store_true",
                   help="with --out, also write DIR/<policy>-steps.csv (one row per step: on the shipped "
                        "conversation trace about 4 million rows, several hundred MB)")
    p.set_defaults(func=run)
    for action in p._actions:  # every option remembers that it was given: one the run does not use is refused
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            action.__class__ = _given(type(action))
            _DESTS.update(dict.fromkeys(action.option_strings, action.dest))


def add_workload_options(p: argparse.ArgumentParser) -> None:
    """The workload's options: ``--trace``, ``--format``, ``--limit`` and the generated workload's (vLLM's
    benchmark names), read by :func:`build_workload`; ``roofline plan`` takes the same ones."""
    p.add_argument("--trace", default=DEFAULT_TRACE, metavar="{conv,code,mooncake-conv,mooncake-synthetic} or FILE",
                   help="request trace: 'conv' or 'code' for the shipped Azure LLM inference traces of 2023 "
                        "(conversation, 19,366 requests; code, 8,819 requests), 'mooncake-conv' or "
                        "'mooncake-synthetic' for the shipped Mooncake traces (FAST 2025: 12,031 and 3,993 requests, "
                        "with their prompts' 512-token block hashes), or a file: Azure CSV "
                        "(TIMESTAMP,ContextTokens,GeneratedTokens), plain CSV or JSONL "
                        "(arrival_s,prompt_tokens,output_tokens), optionally gzip-compressed (.gz) "
                        "(default: %(default)s); with --num-prompts or --max-concurrency, only the source of "
                        "'trace' lengths")
    p.add_argument("--format", choices=("azure", "csv", "jsonl", "mooncake"), default=None,
                   help="trace format (default: from the extension and header)")
    p.add_argument("--limit", type=int_arg("--limit", 1), default=None,
                   help="serve only the first N requests of the trace")
    p.add_argument("--rate-scale", type=number_arg("--rate-scale", positive=True), default=Fraction(1),
                   help="serve the workload at this many times its own rate (arrivals / X, gaps and bursts "
                        "kept) (default: 1)")
    w = p.add_argument_group("generated workload (vLLM benchmark_serving / vllm bench serve names)")
    w.add_argument("--num-prompts", "--requests", type=int_arg("--num-prompts", 1), default=None, dest="num_prompts",
                   help="generate this many requests instead of reading --trace")
    w.add_argument("--request-rate", "--rate", type=_rate_arg, default=None, dest="request_rate",
                   help="requests per second, Poisson arrivals (gamma with --burstiness); inf (default): all at t = 0")
    w.add_argument("--burstiness", type=number_arg("--burstiness", positive=True), default=Fraction(1),
                   help="gamma shape of the arrival gaps (vLLM's): 1 is Poisson; coefficient of variation "
                        "1 / sqrt(burstiness) (default: 1)")
    w.add_argument("--max-concurrency", "--concurrency", type=int_arg("--max-concurrency", 1), default=None,
                   dest="max_concurrency",
                   help="closed loop: N clients, each sending its next request when its previous one is handed "
                        "back (continuous batching only)")
    w.add_argument("--think-time", type=number_arg("--think-time"), default=Fraction(0),
                   help="closed loop: seconds a client waits after a hand-back before its next request (default: 0)")
    w.add_argument("--random-input-len", "--input-len", type=int_arg("--random-input-len", 1),
                   default=DEFAULT_INPUT_LEN, dest="input_len",
                   help="prompt tokens, the mean of --input-len-dist (default: %(default)s, vLLM's)")
    w.add_argument("--random-output-len", "--output-len", type=int_arg("--random-output-len", 1),
                   default=DEFAULT_OUTPUT_LEN, dest="output_len",
                   help="output tokens, the mean of --output-len-dist (default: %(default)s, vLLM's)")
    w.add_argument("--random-range-ratio", type=number_arg("--random-range-ratio"), default=Fraction(0),
                   help="uniform lengths in [len (1 - r), len (1 + r)] (default: 0, fixed lengths)")
    w.add_argument("--input-len-dist", choices=LENGTH_DISTRIBUTIONS, default=None,
                   help="prompt lengths: fixed, uniform, exponential (capped), lognormal, or trace (resample "
                        "(prompt, output) pairs of --trace) (default: uniform if --random-range-ratio > 0, else fixed)")
    w.add_argument("--output-len-dist", choices=LENGTH_DISTRIBUTIONS, default=None,
                   help="output lengths, as --input-len-dist")
    w.add_argument("--input-len-cap", type=int_arg("--input-len-cap", 1), default=None,
                   help="exponential / lognormal prompt lengths: keep only samples <= this")
    w.add_argument("--output-len-cap", type=int_arg("--output-len-cap", 1), default=None,
                   help="exponential / lognormal output lengths: keep only samples <= this (the Anyscale "
                        "benchmark's caps: 32, 128, 512, 1536)")
    w.add_argument("--len-sigma", type=number_arg("--len-sigma", positive=True), default=Fraction(1),
                   help="lognormal lengths: standard deviation of log(length) (default: 1)")
    w.add_argument("--seed", type=int_arg("--seed", 0), default=0, help="seed of the generated workload (default: 0)")
    w.add_argument("--prefix-len", type=int_arg("--prefix-len", 0), default=0, metavar="S",
                   help="a shared system prompt of S tokens before every first turn's drawn length (vLLM's "
                        "--random-prefix-len; default: 0)")
    w.add_argument("--num-prefixes", type=int_arg("--num-prefixes", 1), default=1, metavar="N",
                   help="N distinct prefixes of --prefix-len tokens, each conversation drawing one uniformly "
                        "(default: 1)")
    w.add_argument("--num-turns", type=int_arg("--num-turns", 1), default=1, metavar="T",
                   help="turns per conversation: each prompt extends the previous turn's prompt and output by "
                        "a drawn input length; --num-prompts counts conversations (default: 1)")
    w.add_argument("--turn-gap", type=number_arg("--turn-gap"), default=Fraction(DEFAULT_TURN_GAP_S), metavar="S",
                   help=f"seconds from one turn's arrival to the next (default: {DEFAULT_TURN_GAP_S})")


#: Each option string of the parser -> its dest (filled by :func:`register`).
_DESTS: dict[str, str] = {}


#: Each argparse action class -> its recording subclass (one class per kind, made once).
_GIVEN_KINDS: dict[type[argparse.Action], type[argparse.Action]] = {}


def _given(kind: type[argparse.Action]) -> type[argparse.Action]:
    """``kind`` (store, store_true...) that also records in ``namespace.given_flags`` the flag given, as typed."""
    if kind not in _GIVEN_KINDS:
        def __call__(self: argparse.Action, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: Any, option_string: str | None = None) -> None:
            kind.__call__(self, parser, namespace, values, option_string)
            namespace.given_flags = {**getattr(namespace, "given_flags", {}), self.dest: option_string or self.dest}

        _GIVEN_KINDS[kind] = type(f"Given{kind.__name__}", (kind,), {"__call__": __call__})
    return _GIVEN_KINDS[kind]


@attrs.frozen
class _Plan:
    """What a run will do, from its flags alone: the policy rows, the workload's kind (``trace``, ``open``:
    generated arrivals, ``closed``: closed-loop clients) and, for a generated one, its length distributions."""

    names: tuple[str, ...]
    kind: str
    dists: tuple[str, ...] = ()
    rate: bool = False
    replicas: int = 1
    speculative: str | None = None  # --acceptance-mode with --speculative-config, else None
    turns: int = 1

    def text(self, policy: str | None) -> str:
        """The run in words (``policy`` None: a command without --policy, the workload alone)."""
        workload = {"trace": "a trace", "open": "generated arrivals " + ("at a rate" if self.rate else "all at t = 0"),
                    "closed": "closed-loop clients"}[self.kind]
        dists = f" with {' / '.join(self.dists)} lengths" if self.dists else ""
        engines = f"; {self.replicas} engines" if self.replicas > 1 else ""
        if policy is None:
            return f"{workload}{dists}"
        return f"--policy {policy}: {', '.join(self.names)}{engines}; {workload}{dists}"


_CONTINUOUS = frozenset({"continuous", CHUNKED})
_GENERATED = ("open", "closed")


def _reads_trace(p: _Plan) -> bool:
    return p.kind == "trace" or "trace" in p.dists


#: Each option a run may leave unused: (dest, whether the planned run uses it, what it is for). An option
#: not listed in _USES is used by every run. A given option the run does not use is refused by name. The
#: workload's rows ask of the workload alone (a disaggregated run checks them too); the run's rows follow.
_WORKLOAD_USES: tuple[tuple[str, Any, str], ...] = (
    ("trace", _reads_trace, "the trace served, or resampled with --input-len-dist trace"),
    ("format", _reads_trace, "reading a trace file"),
    ("limit", lambda p: p.kind == "trace", "serving a trace (a generated workload has --num-prompts)"),
    ("request_rate", lambda p: p.kind == "open", "generated open-loop arrivals (--num-prompts; closed-loop "
                                                  "clients arrive as they are handed back)"),
    ("burstiness", lambda p: p.kind == "open" and p.rate, "generated open-loop arrivals at a --request-rate"),
    ("think_time", lambda p: p.kind == "closed", "closed-loop clients (--max-concurrency)"),
    ("seed", lambda p: p.kind in _GENERATED, "a generated workload (--num-prompts, --max-concurrency)"),
    ("input_len_dist", lambda p: p.kind in _GENERATED, "a generated workload (--num-prompts, --max-concurrency)"),
    ("output_len_dist", lambda p: p.kind in _GENERATED, "a generated workload (--num-prompts, --max-concurrency)"),
    ("input_len", lambda p: p.kind in _GENERATED and p.dists[0] != "trace", "generated prompt lengths"),
    ("output_len", lambda p: p.kind in _GENERATED and p.dists[1] != "trace", "generated output lengths"),
    ("random_range_ratio", lambda p: "uniform" in p.dists, "uniform generated lengths"),
    ("input_len_cap", lambda p: p.dists[:1] in (("exponential",), ("lognormal",)),
     "exponential or lognormal prompt lengths"),
    ("output_len_cap", lambda p: p.dists[1:] in (("exponential",), ("lognormal",)),
     "exponential or lognormal output lengths"),
    ("len_sigma", lambda p: "lognormal" in p.dists, "lognormal lengths"),
    ("prefix_len", lambda p: p.kind == "open", "generated open-loop requests (--num-prompts without "
                                              "--max-concurrency: closed-loop clients send lengths only)"),
    ("num_prefixes", lambda p: p.kind == "open", "generated open-loop requests with a --prefix-len"),
    ("num_turns", lambda p: p.kind == "open", "generated open-loop conversations (--num-prompts without "
                                             "--max-concurrency)"),
    ("turn_gap", lambda p: p.kind == "open" and p.turns > 1, "generated conversations of --num-turns above 1"),
)
_USES: tuple[tuple[str, Any, str], ...] = _WORKLOAD_USES + (
    ("router", lambda p: p.replicas > 1, "data-parallel replicas (--data-parallel-size above 1)"),
    ("batch_size", lambda p: "static" in p.names, "static batching"),
    ("max_wait", lambda p: "static" in p.names, "static batching"),
    ("max_num_seqs", lambda p: bool(_CONTINUOUS & set(p.names)), "continuous batching"),
    ("admission", lambda p: bool(_CONTINUOUS & set(p.names)), "continuous batching"),
    ("max_prefill_tokens", lambda p: "continuous" in p.names, "continuous batching without chunked prefill"),
    ("chunked_prefill", lambda p: CHUNKED in p.names, "continuous batching"),
    ("enable_prefix_caching", lambda p: bool(_CONTINUOUS & set(p.names)),
     "continuous batching (serial and static batching keep each request's KV to itself: no prefix is shared)"),
    ("max_num_batched_tokens", lambda p: bool(set(p.names) - {"serial"}),
     "static and continuous batching (one-by-one serving has no step budget)"),
    ("speculative_config", lambda p: set(p.names) <= _CONTINUOUS and p.replicas == 1,
     "continuous batching on one engine only (--policy continuous; serial and static batching, "
     "--data-parallel-size and --pipeline-parallel-size above 1 are not modelled with speculative decoding)"),
    ("acceptance_rate", lambda p: p.speculative is not None, "speculative decoding (--speculative-config)"),
    ("acceptance_mode", lambda p: p.speculative is not None, "speculative decoding (--speculative-config)"),
    ("speculative_seed", lambda p: p.speculative == "seeded", "seeded draws (--speculative-config, "
                                                               "--acceptance-mode seeded)"),
    ("steps", lambda p: p.speculative is None, "runs without speculative decoding (a speculative step's "
                                               "record is not modelled yet)"),
)


def plan_run(args: argparse.Namespace) -> _Plan:
    """The policy rows and the workload the flags ask for, and every given flag checked against them.

    Raises
    ------
    InvalidValueError
        A given option the planned run does not use (it would change nothing, silently), named by the
        flag as typed; ``--policy all`` given with closed-loop clients (serial and static batching need
        their arrivals up front).
    """
    given = getattr(args, "given_flags", {})
    generated = args.num_prompts is not None or args.max_concurrency is not None
    kind = "trace" if not generated else "open" if args.max_concurrency is None else "closed"
    dists = () if not generated else (_length_dist(args.input_len_dist, args.random_range_ratio),
                                      _length_dist(args.output_len_dist, args.random_range_ratio))
    replicas = getattr(args, "data_parallel_size", 1)
    stages = getattr(args, "pipeline_parallel_size", 1)
    if replicas > 1 and args.policy in ("serial", "static"):
        raise InvalidValueError(given.get("data_parallel_size", "--data-parallel-size"), replicas,
                                f"data-parallel replicas run continuous batching only, not --policy {args.policy}")
    if stages > 1 and args.policy in ("serial", "static"):
        raise InvalidValueError(given.get("pipeline_parallel_size", "--pipeline-parallel-size"), stages,
                                "pipeline stages are served by their P virtual engines, continuous batching "
                                f"only, not --policy {args.policy}")
    replicas = replicas * stages  # D x P virtual engines run through the replicas' router
    if args.policy == "all":
        if kind == "closed" and "policy" in given:
            raise InvalidValueError(given["policy"], "all", "closed-loop clients (--max-concurrency) are served by "
                                    "continuous batching only; give --policy continuous")
        names = ["continuous"] if kind == "closed" or replicas > 1 else ["serial", "static", "continuous"]
        if args.chunked_prefill:
            names.append(CHUNKED)
    elif args.policy == "continuous" and args.chunked_prefill:
        names = [CHUNKED]
    else:
        names = [args.policy]
    speculative = args.acceptance_mode if getattr(args, "speculative_config", None) is not None else None
    plan = _Plan(tuple(names), kind, dists, args.request_rate is not None, replicas, speculative, args.num_turns)
    _refuse_unused(args, plan, _USES)
    return plan


def _refuse_unused(args: argparse.Namespace, plan: _Plan, uses: tuple[tuple[str, Any, str], ...]) -> None:
    """Refuse by name the first given flag among ``uses`` (rows of :data:`_USES`) that ``plan`` does not use."""
    given = getattr(args, "given_flags", {})
    for dest, used, what in uses:
        if dest in given and not used(plan):
            raise InvalidValueError(given[dest], given_value(args, dest), f"applies to {what}, which this run "
                                    f"({plan.text(getattr(args, 'policy', None))}) does not include")


def check_workload_flags(args: argparse.Namespace) -> None:
    """A disaggregated run's workload flags checked as :func:`plan_run` checks them (the rows of
    :data:`_USES` that ask of the workload alone); raises as it does."""
    generated = args.num_prompts is not None or args.max_concurrency is not None
    kind = "trace" if not generated else "open" if args.max_concurrency is None else "closed"
    dists = () if not generated else (_length_dist(args.input_len_dist, args.random_range_ratio),
                                      _length_dist(args.output_len_dist, args.random_range_ratio))
    _refuse_unused(args, _Plan(("continuous",), kind, dists, args.request_rate is not None,
                               turns=args.num_turns), _WORKLOAD_USES)


#: The library's fields, by the flag that gives each here: a library refusal names the flag
#: (synthetic_workload's ``rate`` is ``--request-rate``).
_FLAG_OF_FIELD = {
    "num_prompts": "--num-prompts", "rate": "--request-rate", "cv": "--burstiness",
    "input_len": "--random-input-len", "output_len": "--random-output-len", "range_ratio": "--random-range-ratio",
    "input_cap": "--input-len-cap", "output_cap": "--output-len-cap", "sigma": "--len-sigma", "seed": "--seed",
    "input_distribution": "--input-len-dist", "output_distribution": "--output-len-dist", "trace": "--trace",
    "clients": "--max-concurrency", "think_time_s": "--think-time", "requests": "--max-concurrency",
    "max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
    "rate_scale": "--rate-scale",
    "max_prefill_tokens": "--max-prefill-tokens", "batch_size": "--batch-size", "max_wait": "--max-wait",
    "admission": "--admission", "engine": "--engine", "max_model_len": "--max-model-len",
    "block_size": "--block-size", "overhead": "--overhead", "router": "--router",
    "data_parallel_size": "--data-parallel-size",
    "speculative": "--speculative-config", "acceptance_rate": "--acceptance-rate",
    "prefix_len": "--prefix-len", "num_prefixes": "--num-prefixes",
    "num_turns": "--num-turns", "turn_gap_s": "--turn-gap", "hash_block_size": "--block-size",
}


def _by_flag(err: InvalidValueError, args: argparse.Namespace, policy: str | None = None) -> InvalidValueError:
    """A library refusal named by the flag that gave the field (the flag's value as typed), else ``err``."""
    flag = _FLAG_OF_FIELD.get(err.field)
    if flag == "--num-prompts" and args.num_prompts is None:  # the count came from --max-concurrency
        flag = "--max-concurrency"
    if flag is None:
        return err
    value = given_value(args, _DESTS[flag])
    reason = err.reason if policy is None or flag != "--engine" else f"{policy}: {err.reason}"
    return InvalidValueError(flag, err.value if value is None else value, reason)


def _too_large(err: WorkloadSizeError, args: argparse.Namespace) -> InvalidValueError:
    """A generated workload too large to hold, said with the command's flags: the prompts' total tokens and the
    flags that lower them (``--block-size`` only where prefix caching reads the hashes)."""
    flag = "--num-turns" if err.field == "num_turns" else "--prefix-len"
    count = "--num-prompts" if args.num_prompts is not None else "--max-concurrency"
    turns = err.field == "num_turns"  # every prompt token is hashed; single turns hash their shared prefix only
    lower = ["--num-turns", count, "--random-input-len", "--random-output-len"] if turns else [count]
    lower += ["--prefix-len"] if args.prefix_len else []
    what = "the prompts of this workload total" if turns else "the shared prefixes of this workload's prompts total"
    held = f"{MAX_HASHED_BLOCKS * err.block:.3e}"
    tail = f" (or a --block-size above {err.block})" if getattr(args, "enable_prefix_caching", False) else ""
    return InvalidValueError(flag, given_value(args, flag.lstrip("-").replace("-", "_")),
                             f"{what} {err.prompt_tokens:.3e} tokens, more than the "
                             f"simulator holds (about {held}: MAX_HASHED_BLOCKS = {MAX_HASHED_BLOCKS:,} blocks of "
                             f"{err.block} tokens): "
                             f"lower {', '.join(lower[:-1])} or {lower[-1]}{tail}")


def trace_path(value: str) -> str:
    """The file ``--trace`` names: a shipped trace's path for ``conv``/``code``, else ``value`` itself.

    Raises
    ------
    InvalidValueError
        ``value`` is empty (``--trace=``), or a shipped name and also a file in the current folder
        (field ``--trace``): ambiguous, so refused rather than guessed; ``./conv`` names the file.
    """
    if not value.strip():  # `--trace=` or `--trace ""`: no trace named (it would read the folder ".")
        raise InvalidValueError("--trace", value, "give conv, code or a trace file")
    key = name_key(value)
    if value not in SHIPPED_TRACES and key in SHIPPED_TRACES and not os.path.lexists(value):
        value = key  # a shipped name, read as every name is (case and surrounding spaces ignored)
    if value not in SHIPPED_TRACES:
        if not os.path.lexists(value) and os.sep not in value and "." not in value:  # not a file: a name
            close = difflib.get_close_matches(key, list(SHIPPED_TRACES), n=1)
            known = ", ".join(SHIPPED_TRACES)
            raise InvalidValueError("--trace", value, f"is neither a file nor a shipped trace ({known})"
                                    + (f"; did you mean {close[0]!r}?" if close else ""))
        return value
    if os.path.lexists(value):
        raise InvalidValueError("--trace", value, f"names the shipped trace and a file here; write ./{value} "
                                                  "for the file")
    return str(shipped_trace(value))


def _length_dist(dist: str | None, ratio: Fraction) -> str:
    if dist is not None:
        return dist
    return "uniform" if ratio > 0 else "fixed"


def build_workload(args: argparse.Namespace, *, scaled: bool = True) -> tuple[Any, dict[str, Any]]:
    """The workload the arguments ask for: (requests or ClosedLoop, JSON-ready description), at ``--rate-scale``
    times its rate (:func:`roofline.sim.scale_rate`; the description's ``rate_scale`` when not 1) unless
    ``scaled`` is False (``roofline plan`` scales it itself, at every rate its search tries).

    Raises
    ------
    RooflineError
        No workload given, a bad trace, or options that do not go together; ``--rate-scale`` given for
        closed-loop clients or for a workload whose every request arrives at one time (no rate to scale:
        :func:`refuse_unscalable`), or one putting an arrival past MAX_ARRIVAL_S.
    """
    requests, spec = _unscaled_workload(args)
    scale = args.rate_scale
    if not scaled or "rate_scale" not in getattr(args, "given_flags", {}):
        return requests, spec
    if spec["kind"] == "closed_loop":
        raise InvalidValueError("--rate-scale", given_value(args, "rate_scale"), "closed-loop clients "
                                "(--max-concurrency) send as they are handed back: there is no rate to scale")
    refuse_unscalable(args, requests, "rate_scale")
    if scale == 1:
        return requests, spec
    try:
        faster = scale_rate(requests, scale)
    except InvalidValueError as err:
        raise _by_flag(err, args) from None
    spec = dict(spec, rate_scale=float(scale))
    return (faster if spec["kind"] == "trace" else attrs.evolve(requests, requests=tuple(faster))), spec


def refuse_unscalable(args: argparse.Namespace, requests: Any, dest: str) -> None:
    """Refuse the flag of ``dest`` (``rate_scale``, or ``search_rate`` for ``roofline plan``) by name when every
    request of the open-loop workload arrives at one time: dividing the arrivals changes nothing (a trace of one
    time, or a generated workload without --request-rate and of one turn). An empty workload is left to the
    command's own refusal."""
    times = {r.arrival_s for r in requests}
    if len(times) != 1:
        return
    flag = "--rate-scale" if dest == "rate_scale" else "--search-rate"
    value = given_value(args, dest) if dest == "rate_scale" else FLAG_GIVEN
    at = next(iter(times))
    rate_given = "request_rate" in getattr(args, "given_flags", {})
    hint = ("; give arrivals that differ" if args.num_prompts is None else
            "" if args.request_rate is not None else
            "; give a finite --request-rate" if rate_given else "; give --request-rate")
    raise InvalidValueError(flag, value, f"every request of this workload arrives at {float(at):g} s: there is "
                            f"no rate to scale{hint}")


def _unscaled_workload(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """:func:`build_workload` at the workload's own rate."""
    generated = args.num_prompts is not None or args.max_concurrency is not None
    if not generated:
        if args.trace is None:
            raise InvalidValueError("--trace", None, "give a trace, or --num-prompts / --max-concurrency to generate "
                                    "a workload")
        path = trace_path(args.trace)
        requests = load_trace(path, format=args.format)
        if args.limit is not None:
            requests = requests[: args.limit]
        return requests, {"kind": "trace", "path": path, "requests": len(requests)}
    in_dist = _length_dist(args.input_len_dist, args.random_range_ratio)
    out_dist = _length_dist(args.output_len_dist, args.random_range_ratio)
    trace = load_trace(trace_path(args.trace), format=args.format) if "trace" in (in_dist, out_dist) else None
    count = args.num_prompts if args.num_prompts is not None else args.max_concurrency
    arrival = "burst" if args.request_rate is None else ("poisson" if args.burstiness == 1 else "gamma")
    cv = 1 / args.burstiness ** Fraction(1, 2) if arrival == "gamma" else 1
    try:  # the library checks the values (one rule, one place); its refusals are named by their flags here
        work = synthetic_workload(
            count, arrival=arrival, rate=args.request_rate, cv=float(cv) if arrival == "gamma" else 1,
            input_len=args.input_len, output_len=args.output_len, input_distribution=in_dist,
            output_distribution=out_dist, range_ratio=args.random_range_ratio, input_cap=args.input_len_cap,
            output_cap=args.output_len_cap, sigma=args.len_sigma, trace=trace, seed=args.seed,
            prefix_len=args.prefix_len, num_prefixes=args.num_prefixes, num_turns=args.num_turns,
            turn_gap_s=args.turn_gap, hash_block_size=getattr(args, "block_size", DEFAULT_HASH_BLOCK),
        )
        if args.max_concurrency is not None:
            closed = ClosedLoop(clients=args.max_concurrency, lengths=work.requests, think_time_s=args.think_time,
                                seed=args.seed)
    except WorkloadSizeError as err:  # in the command's own terms: the conversations' tokens, the flags to lower
        raise _too_large(err, args) from None
    except InvalidValueError as err:
        raise _by_flag(err, args) from None
    spec = dict(work.spec, burstiness=float(args.burstiness) if arrival == "gamma" else None)
    if trace is not None:  # the lengths are the trace's pairs: --random-input-len / --random-output-len unused
        spec["resampled_from"] = trace_path(args.trace)
    if args.max_concurrency is None:
        return work, spec
    spec = dict(spec, kind="closed_loop", clients=args.max_concurrency, think_time_s=float(args.think_time),
                arrival=None, rate=None)
    return closed, spec


def simulate_trace(args: argparse.Namespace) -> dict[str, Any]:
    """Run the policies the parsed arguments ask for; return the inputs and the SimResults.

    Returns
    -------
    dict with ``requests`` (list of Request, or a ClosedLoop), ``workload`` (its description,
    the seed included), ``model``, ``accelerator``, ``pool`` (KVPool), ``budget`` [bytes],
    ``results`` (list of SimResult, in the order serial, static, continuous, continuous with
    chunked prefill), ``labels`` (each result's row label) and ``slo`` (limits [s] or None).

    Raises
    ------
    RooflineError
        A bad trace (TraceError), preset, option value or KV budget; a closed loop with
        ``--policy serial`` or ``static``.
    """
    outputs = check_out_option(args)
    if args.kv_budget_gb is not None and args.utilization is not None:
        raise InvalidValueError("--utilization", float(args.utilization), "the KV budget given by --kv-budget-gb "
                                "replaces the one --utilization gives; give one of them")
    deployment, chosen = deployment_from_args(args, utilization=args.utilization)  # T as report chooses it
    tp_note = chosen_tensor_parallel_note(deployment, "run") if chosen else None
    stages = deployment.pipeline_parallel_size
    if stages > 1 and args.kv_budget_gb is not None:  # each stage's GPU has its own budget
        raise InvalidValueError("--kv-budget-gb", float(args.kv_budget_gb), "with --pipeline-parallel-size above 1 "
                                "each stage's budget follows from its weights: give --gpu-memory-utilization")
    scheduler_note = _engine_scheduler(args, deployment)
    names = list(plan_run(args).names)  # after the engine's scheduler defaults: they are flags the user did not give
    # one GPU's share: the KV pool and budget are per GPU, every step adds its all-reduce (docs/conventions.md,
    # "Tensor parallelism")
    model, accelerator = deployment.share, deployment.accelerator
    # vLLM's default max_model_len is the model's own (max_position_embeddings); longer requests are rejected
    max_model_len = args.max_model_len if args.max_model_len is not None else model.max_position_embeddings
    budget, budget_basis = _budget(args, deployment)
    # window-aware: a model with sliding-window layers gets a pool of layer-blocks (roofline.sim.kv)
    pool = KVPool.for_model(model, budget=budget, block_size=args.block_size)
    if stages > 1:  # one virtual engine's blocks: the least over the stages, // P (vLLM V0)
        if any(w is not None for w in model.layer_windows):
            # a windowed pool counts layer-blocks per window group; the stages hold different groups
            raise InvalidValueError("--pipeline-parallel-size", stages, f"{model.name} has sliding-window layers: "
                                    "their pool over pipeline stages is not modelled in simulate (roofline "
                                    "report -pp prices the stages)")
        utilization = DEFAULT_UTILIZATION if args.utilization is None else args.utilization
        pool = KVPool.blocks(deployment.virtual_engine_kv_blocks(block_size=args.block_size, utilization=utilization),
                             block_size=args.block_size)
        if model.is_hybrid:  # each sequence's state in the stages' pool: the most state blocks over the stages
            pool = KVPool(pool.capacity_blocks, args.block_size,
                          state_blocks=deployment.state_blocks(block_size=args.block_size))
        budget_basis = (f"one of {stages} virtual engines: the least over the stages of usable x "
                        f"{float(utilization):g} - the stage's weights, // {stages}")
        # in bytes: what one stage's GPU spends on those blocks, at the largest KV bytes per token of a stage
        budget = pool.capacity_blocks * args.block_size * max(Fraction(st.kv_bytes_per_token)
                                                              for st in deployment.stages())
    cost = RooflineCostModel.for_deployment(deployment, overhead=args.overhead, exact=not args.float_mode)
    time_kind = deployment.time_kind
    requests, workload = build_workload(args)
    budget_tokens = args.max_num_batched_tokens
    if budget_tokens is not None and args.max_prefill_tokens is not None and not args.chunked_prefill:
        raise InvalidValueError("--max-num-batched-tokens", budget_tokens, "give it or --max-prefill-tokens, not both")
    # with --chunked-prefill the budget is the chunked row's; the other rows run as without it
    shared_budget = None if args.chunked_prefill else budget_tokens
    separate_budget = args.max_prefill_tokens if args.max_prefill_tokens is not None else shared_budget
    common = {"kv_pool": pool, "record_steps": outputs is not None and args.steps,
              "max_model_len": max_model_len, "engine": args.engine}
    runs: dict[str, tuple[Any, dict[str, Any]]] = {
        "serial": (POLICIES["serial"], {}),
        "static": (POLICIES["static"], {"batch_size": args.batch_size, "max_wait": args.max_wait,
                                        "max_num_batched_tokens": shared_budget}),
        "continuous": (POLICIES["continuous"], {"max_num_seqs": args.max_num_seqs,
                                                "admission": args.admission.replace("-", "_"),
                                                "max_prefill_tokens": separate_budget,
                                                "enable_prefix_caching": args.enable_prefix_caching}),
        CHUNKED: (POLICIES["continuous"], {"max_num_seqs": args.max_num_seqs,
                                           "admission": args.admission.replace("-", "_"), "prefill": "chunked",
                                           "max_num_batched_tokens": budget_tokens,
                                           "enable_prefix_caching": args.enable_prefix_caching}),
    }
    speculation = _speculation(args, accelerator, deployment.estimate, deployment)
    plain_pool = pool  # the pool of a server without the proposer: the rows without speculation
    if speculation is not None:  # continuous batching's rows only (plan_run refused the others)
        # the proposer's weights come out of the budget and its KV shares the blocks (docs/conventions.md,
        # "Speculative decoding in the scheduler")
        budget, budget_basis = _budget(args, deployment, speculation.memory)
        pool = KVPool.for_model(model, budget=budget, block_size=args.block_size, proposer=speculation.memory)
        common["kv_pool"] = pool
        for name in (n for n in names if n in runs):
            runs[name][1]["speculative"] = speculation
    results = []
    replicas: list[Any] = []  # per row: its ReplicaResult (with --data-parallel-size), else None
    size, per_replica = deployment.parallelism.data, deployment.parallelism.replica_gpus
    router = args.router
    if stages > 1:  # D x P virtual engines (vLLM V0's P per replica), each its own scheduler, P sharing T x P GPUs
        size, per_replica = size * stages, deployment.tensor_parallel_size
        # a new request goes to the engine with the fewest unfinished requests (vLLM V0's rule) unless given
        router = args.router if "router" in getattr(args, "given_flags", {}) else "least-requests"
    with _progress(names, "simulate", "policy") as bar:
        for name in bar:
            bar.set_postfix_str(name)
            try:
                if size > 1:  # plan_run left continuous batching's rows only
                    replicated = serve_replicas(requests, cost, router=router, data_parallel_size=size,
                                                gpus_per_replica=per_replica, **common, **runs[name][1])
                    replicas.append(replicated)
                    results.append(replicated.whole)
                    continue
                replicas.append(None)
                results.append(runs[name][0](requests, cost, **common, **runs[name][1]))
            except InvalidValueError as err:  # the library's fields by their flags (engine= is --engine)
                raise _by_flag(err, args, policy=name) from None
    plain = None
    if speculation is not None:  # the same rows without it, for the speed-up
        try:
            plain = [runs[name][0](requests, cost, **dict(common, kv_pool=plain_pool),
                                   **dict(runs[name][1], speculative=None)) for name in names]
        except InvalidValueError as err:
            raise _by_flag(err, args) from None
    ms = Fraction(1, 1000)
    slo = {key: None if value is None else value * ms
           for key, value in (("ttft_s", args.slo_ttft), ("tpot_s", args.slo_tpot), ("e2e_s", args.slo_e2e))}
    return dict(requests=requests, workload=workload, deployment=deployment, model=model, accelerator=accelerator,
                pool=pool, budget=budget, plain_pool=plain_pool, proposer=speculation and speculation.memory,
                budget_basis=budget_basis, results=results, labels=names, replicas=replicas,
                slo=slo if any(v is not None for v in slo.values()) else None,
                time_kind=time_kind, band=_band_line(deployment), scheduler_note=scheduler_note, plain=plain,
                tp_note=tp_note)


def _budget(args: argparse.Namespace, deployment: Any, proposer: Any = None) -> tuple[Any, str]:
    """The run's KV budget [bytes] per GPU and its basis in words: ``--kv-budget-gb`` as given (KV memory: a
    proposer's weights are not taken from it), else usable x utilization - the weights (a proposer's too)."""
    if args.kv_budget_gb is not None:
        return args.kv_budget_gb * GB, "--kv-budget-gb"
    utilization = DEFAULT_UTILIZATION if args.utilization is None else args.utilization
    budget = estimate.kv_budget_for(deployment, utilization=utilization, proposer=proposer)
    held = "weights" if proposer is None or not proposer.weight_bytes else "the target's and the proposer's weights"
    basis = f"usable x {float(utilization):g} - {held}, reserve 0"
    reserve = estimate.published_reserve(deployment.share, deployment.accelerator)
    if reserve is not None:  # report's real budget subtracts it; say how to match it
        basis += (f"; roofline report's real budget also subtracts a published "
                  f"{float(reserve.value) / 2**30:.2f} GiB reserve: --kv-budget-gb "
                  f"{float(budget - reserve.value) / 1e9:.2f} for that")
    return budget, basis


def _speculation(args: argparse.Namespace, accelerator: Any, estimate: Any, deployment: Any) -> Speculation | None:
    """The run's speculative decoding from --speculative-config and --acceptance-rate (both or neither), or None;
    the draft runs on one GPU of the same accelerator, priced as the target is (the bound or ``estimate``), a head
    on the target's ``deployment`` (docs/conventions.md, "Speculative decoding in the scheduler")."""
    try:
        pair = speculative_pair(args)
    except InvalidValueError as err:
        if err.field.startswith("--"):
            raise
        raise InvalidValueError("--speculative-config", args.speculative_config, f"{err.field}: {err.reason}") \
            from None
    if pair is None:
        return None
    config, alpha = pair
    try:
        return Speculation.from_config(config, accelerator, acceptance_rate=alpha, mode=args.acceptance_mode,
                                       seed=args.speculative_seed, exact=not args.float_mode, estimate=estimate,
                                       target=deployment)
    except InvalidValueError as err:
        if err.field == "acceptance_rate":  # a vector of another length than k: the rates' own flag
            raise InvalidValueError("--acceptance-rate", acceptance_shown(alpha), err.reason) from None
        raise InvalidValueError("--speculative-config", config, f"{err.field}: {err.reason}") from None


def _speculative_lines(run: dict[str, Any]) -> list[str]:
    """What speculative decoding did to each row, beside the same row without it (text output)."""
    if not run.get("plain"):
        return []
    lines: list[str] = []
    for label, r, p in zip(run["labels"], run["results"], run["plain"], strict=True):
        sp = r.options["speculative"]
        draws = (f"seeded draws per request, seed {sp['seed']}" if sp["seed"] is not None
                 else "the expectation, in whole tokens")
        if not lines:
            method = sp["method"] if sp["model"] is None else f"{sp['method']} {sp['model']}"
            rate = sp["acceptance_rate"]
            rates = (f"rates {', '.join(f'{a:g}' for a in rate)} by position" if isinstance(rate, list)
                     else f"rate {rate:g}")
            lines.append(f"speculative decoding on: {method}, k = {sp['num_speculative_tokens']}, acceptance "
                         f"{rates}")
            lines.append(f"  accepted tokens: {draws}")
        tokens = "-" if sp["tokens_per_step"] is None else f"{sp['tokens_per_step']:.3f}"
        share = "-" if sp["achieved_acceptance"] is None else f"{100 * sp['achieved_acceptance']:.1f}%"
        lines.append(f"  {label}: {tokens} tokens per step (formula {sp['expected_tokens_per_step']:.3f}), "
                     f"proposals kept {share}")
        s, q = r.summary, p.summary
        tpot = _ratio(q.tpot and q.tpot.p50, s.tpot and s.tpot.p50)
        rate = _ratio(s.output_tokens_per_s, q.output_tokens_per_s)
        lines.append(f"    without it: TPOT p50 {_p(q.tpot, 'p50')}, "
                     f"{'-' if q.output_tokens_per_s is None else f'{float(q.output_tokens_per_s):,.0f}'} tokens/s; "
                     f"speed-up: TPOT p50 {tpot}, throughput {rate}")
    return lines


def _proposer_lines(run: dict[str, Any]) -> list[str]:
    """What the proposer takes from the KV pool (text output), beside the pool of the rows without it."""
    held = run.get("proposer")
    if held is None or not (held.weight_bytes or held.kv_bytes_per_token):
        return []
    model, plain = run["model"], run["plain_pool"]
    total = estimate.pool_kv_bytes_per_token(model, held)
    return [f"  the proposer ({held.method}) on each GPU: its weights {float(held.weight_bytes) / 1e9:.2f} GB out of "
            f"the budget, its KV {float(held.kv_bytes_per_token):,.0f} of {float(total):,.0f} bytes per token in "
            f"the blocks; the rows without it: {plain.capacity_blocks:,} blocks"]


def _ratio(a: Any, b: Any) -> str:
    return "-" if a is None or b is None or not b else f"x{float(a) / float(b):.2f}"


def _t(seconds: Any) -> str:
    return format_time(seconds, decimals=(2, 1, 0), whole_from=100, none="-")


def _secs(seconds: Any) -> str:
    """Seconds as a number of an s column, thousands separated."""
    return "-" if seconds is None else f"{float(seconds):,.2f}"


def _p(stats: Any, q: str) -> str:
    return "-" if stats is None else _t(getattr(stats, q))


def _share(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}%"


def _pct(x: Any) -> str:
    """A share as a number of a % column (the unit in the header)."""
    return "-" if x is None else f"{100 * float(x):.1f}"


def _ms(seconds: Any) -> str:
    """A latency in ms with thousands separators: 0.1 ms below 10 s, whole ms from there."""
    if seconds is None:
        return "-"
    ms = float(seconds) * 1e3
    return f"{ms:,.1f}" if ms < 1e4 else f"{ms:,.0f}"


def _pms(stats: Any, q: str) -> str:
    return "-" if stats is None else _ms(getattr(stats, q))


#: The run table (docs/conventions.md, "Text that fits a terminal"): (header, unit, width); one unit per
#: column, named on the header's second line. With the latency table below it, within 100 columns.
COLUMNS = (
    ("policy", "", 18), ("done", "", 6), ("rejected", "", 8), ("steps", "", 9), ("makespan", "s", 8),
    ("tokens/s", "", 8), ("useful", "%", 6), ("slots", "%", 5), ("peak KV", "%", 7), ("preempt", "", 7),
)
#: The latency table: each a (header, summary field, percentile) in ms.
LATENCY_COLUMNS = (("TTFT p50", "ttft", "p50"), ("TTFT p99", "ttft", "p99"), ("TPOT p50", "tpot", "p50"),
                   ("TPOT p99", "tpot", "p99"), ("ITL p99", "itl", "p99"), ("E2E p50", "e2e", "p50"),
                   ("E2E p99", "e2e", "p99"))
LATENCY = ("queue wait", "ttft", "tpot", "itl", "e2e")


def _row(cells: tuple[str, ...], widths: list[int]) -> str:
    return "  ".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def _table(rows: list[tuple[str, ...]], widths: list[int], indent: str = "") -> list[str]:
    """``rows`` (headers first) as aligned lines: each column as wide as its stated width or its widest cell; when
    that passes 100 columns, the first (label) column narrowed to its longest label, so that a long value
    (a makespan of 20,069.55 s, a TTFT of 16,369,267 ms) widens its column instead of wrapping the row."""
    widths = [max(w, *(len(r[i]) for r in rows)) for i, w in enumerate(widths)]
    if len(indent) + sum(widths) + 2 * (len(widths) - 1) > 100:
        widths[0] = max(len(r[0]) for r in rows)
    return [indent + _row(r, widths) for r in rows]


def _describe(workload: dict[str, Any]) -> str:
    scale = workload.get("rate_scale")
    text = _described(workload)
    if scale is None:
        return text
    return f"{text}, served at {scale:.15g}x its rate: every arrival / {scale:.15g}"


def _described(workload: dict[str, Any]) -> str:
    if workload["kind"] == "trace":
        return os.path.basename(workload["path"])
    if workload.get("resampled_from") is not None:
        lengths = f"(prompt, output) pairs resampled from {os.path.basename(workload['resampled_from'])}"
    else:
        lengths = (f"prompts {workload['input_distribution']} {workload['input_len']:,}, outputs "
                   f"{workload['output_distribution']} {workload['output_len']:,}")
    cap = workload.get("output_cap")
    if cap is not None:
        lengths += f" (cap {cap})"
    if workload.get("prefix_len"):
        n = workload["num_prefixes"]
        lengths += f", after {'a shared prefix' if n == 1 else f'one of {n:,} prefixes'} of {workload['prefix_len']:,}"
    if workload.get("num_turns", 1) > 1:
        lengths += f"; {workload['num_turns']} turns each, {workload['turn_gap_s']:g} s apart"
    if workload["kind"] == "closed_loop":
        return (f"{workload['clients']} closed-loop clients, think time {workload['think_time_s']} s, {lengths}, "
                f"seed {workload['seed']}")
    arrival = "all at t = 0" if workload["arrival"] == "burst" else f"{workload['arrival']} at {workload['rate']}/s"
    if workload["arrival"] == "gamma":
        arrival += f" (burstiness {workload['burstiness']})"
    return f"generated ({arrival}; {lengths}; seed {workload['seed']})"


def _on(deployment: Deployment) -> str:
    """The accelerator, or the tensor-parallel group, a run is on; with D > 1 data-parallel replicas, how many
    (each its own group and KV pool, so the pool the header states is one replica's)."""
    replicas = deployment.parallelism.data
    if deployment.tensor_parallel_size == 1:
        one = deployment.where
    elif deployment.expert_parallel_size > 1:
        one = (f"{deployment.where} (tensor and expert parallel: KV pool per GPU, all-reduces, all-gathers "
               "and all-to-alls in every step, tokens/s of the group)")
    else:
        one = f"{deployment.where} (tensor parallel: KV pool per GPU, all-reduce in every step, tokens/s of the group)"
    return one if replicas == 1 else f"{replicas} data-parallel replicas, each on {one}"


def _windows_text(windows: tuple[int | None, ...]) -> str:
    """"52 of 62 layers with a window of 1,024 tokens, 10 full", for the pool line."""
    counts: dict[int | None, int] = {}
    for w in windows:
        counts[w] = counts.get(w, 0) + 1
    parts = [f"{n} of {len(windows)} layers with a window of {w:,} tokens" for w, n in sorted(
        (w, n) for w, n in counts.items() if w is not None)]
    return ", ".join(parts + [f"{counts[None]} full"] if None in counts else parts)


def _engines_text(labels: list[str], results: list[Any]) -> str:
    """Which engine ran each policy: the event engine (the stretch clock) or the step engine, and why."""
    if not results:
        return "-"
    kinds = {label: (r.options.get("engine"), r.options.get("engine_reason")) for label, r in zip(labels, results,
                                                                                               strict=True)}
    if all(kind == "event" for kind, _ in kinds.values()):
        return "event (closed-form decode stretches on an integer tick clock; exact)"
    if len(set(kinds.values())) == 1:  # one engine and one reason for every policy: said once
        kind, why = next(iter(kinds.values()))
        return f"{kind}, every policy" + (f": {why}" if why else "")
    return "; ".join(f"{label}: {kind}" + (f" ({why})" if why and kind == "step" else "")
                     for label, (kind, why) in kinds.items())


def format_table(run: dict[str, Any], trace: str | None = None, *, verbose: bool = False) -> str:
    """The comparison as text within 100 columns (docs/conventions.md, "Text that fits a terminal").

    One row per policy in two tables sharing the policy column (the run: counts, makespan [s],
    output tokens/s, shares and peak KV [%]; latencies [ms]), then goodput and notes, every longer
    line wrapped by :func:`roofline.units.fit_width`; ``verbose`` adds every latency's p50 / p90 /
    p99 (queue wait included), one row per policy and latency.
    """
    pool, model = run["pool"], run["model"]
    reqs = run["results"][0].requests if run["results"] else ()
    last = float(run["results"][0].last_arrival_s()) if run["results"] else 0.0
    lines = [
        *([run["tp_note"]] if run.get("tp_note") else []),
        f"roofline simulate: {len(reqs):,} requests from {_describe(run['workload'])} (arrivals over {last:,.1f} s)",
        f"  {model.name} (weights {model.weight_format}, KV {model.kv_dtype}) on {_on(run['deployment'])}; "
        f"{'each replica' + chr(39) + 's ' if run['deployment'].parallelism.data > 1 else ''}KV pool "
        f"{pool.capacity_blocks:,} {pool.unit} x {pool.block_size} tokens = {pool.capacity_tokens:,} "
        f"{'token-layers' if pool.layer_windows else 'tokens'} ({float(run['budget']) / 1e9:.2f} GB"
        + (f" = {run['budget_basis']})" if run.get("budget_basis") else ")"),
        *_proposer_lines(run),
        *([f"  recurrent state: each sequence also holds {pool.state_blocks:,} blocks of the pool for its "
           f"{model.state_mixer.layers} {model.state_mixer.kind} layers' state "
           f"({float(model.state_bytes_per_sequence) / 1e6:.2f} MB), and each decode step reads and writes it "
           "back"] if pool.state_blocks and model.state_mixer is not None else []),
        *([f"  sliding windows: KV counted per layer ({_windows_text(pool.layer_windows)}); a windowed layer "
           "frees its blocks as its window moves on"] if pool.layer_windows else []),
        f"  step times: {_kind_text(run.get('time_kind', 'bound'))}",
        *([f"  estimate band: {run['band']}"] if run.get("band") else []),
        *([f"  engine scheduler: {run['scheduler_note']}"] if run.get("scheduler_note") else []),
        f"  simulation engine: {_engines_text(run['labels'], run['results'])}",
        "",
    ]
    rows = [tuple(name for name, _, _ in COLUMNS), tuple(u for _, u, _ in COLUMNS)]
    for label, r in zip(run["labels"], run["results"], strict=True):
        s = r.summary
        peak = "-" if not pool.capacity_blocks else f"{100 * s.peak_kv_blocks / pool.capacity_blocks:.1f}"
        rows.append((
            label, f"{s.completed:,}", f"{s.rejected:,}", f"{s.steps:,}", _secs(s.makespan_s),
            "-" if s.output_tokens_per_s is None else f"{float(s.output_tokens_per_s):,.0f}",
            _pct(s.long_run_useful_share), _pct(s.slot_occupancy), peak, f"{s.preemptions:,}",
        ))
    lines += _table(rows, [w for _, _, w in COLUMNS])
    rows = [("policy", *(h for h, _, _ in LATENCY_COLUMNS)), ("", *("ms" for _ in LATENCY_COLUMNS))]
    rows += [(label, *(_pms(getattr(r.summary, f), q) for _, f, q in LATENCY_COLUMNS))
             for label, r in zip(run["labels"], run["results"], strict=True)]
    lines += ["", *_table(rows, [18] + [9] * len(LATENCY_COLUMNS))]
    for label, r in zip(run["labels"], run["results"], strict=True):  # why requests were rejected, one line each
        rejected = r.rejections()
        if rejected:
            request, why = rejected[0]
            lines.append(f"  {label}: {len(rejected):,} rejected; the first, request {request.id}: {why}")
    for label, rep in zip(run["labels"], run.get("replicas") or [None] * len(run["labels"]), strict=True):
        if rep is not None:
            lines += ["", *_replica_table(label, rep, pool, run["deployment"].pipeline_parallel_size > 1)]
    if verbose:  # every latency's p50 / p90 / p99, one row per policy and latency
        lines += ["", "  latency p50 / p90 / p99 (--verbose):"]
        rows = [("policy", "latency", "p50", "p90", "p99"), ("", "", "ms", "ms", "ms")]
        for label, r in zip(run["labels"], run["results"], strict=True):
            s = r.summary
            rows += [(label, name, *(_pms(stats, q) for q in ("p50", "p90", "p99")))
                     for name, stats in zip(LATENCY, (s.queue_wait, s.ttft, s.tpot, s.itl, s.e2e), strict=True)]
        lines += _table(rows, [18, 10, 11, 11, 11], "  ")
    if run["slo"] is not None:
        limits = ", ".join(f"{k[:-2].upper()} <= {float(v) * 1e3:g} ms" for k, v in run["slo"].items() if v is not None)
        lines += ["", f"  goodput ({limits}):"]
        for label, r in zip(run["labels"], run["results"], strict=True):
            g = r.goodput(**run["slo"])
            rate = "-" if g.requests_per_s is None else f"{float(g.requests_per_s):,.2f} requests/s"
            tokens = "-" if g.output_tokens_per_s is None else f"{float(g.output_tokens_per_s):,.0f} tokens/s"
            lines.append(f"    {label:<18}  {g.met:,} of {g.requests:,} requests met it ({_share(g.share)}): "
                         f"{rate}, {tokens}")
    opts = {label: r.options for label, r in zip(run["labels"], run["results"], strict=True)}
    static = opts.get("static", {})
    notes = []
    if "static" in opts:
        per_batch = run["results"][run["labels"].index("static")].summary.per_batch_useful_share
        notes.append(f"static: batch size {static['batch_size']}, max wait "
                     f"{'none' if static.get('max_wait_s') is None else str(static['max_wait_s']) + ' s'}, "
                     f"per-batch useful share (mean over batches) {_share(per_batch)}")
    for label in ("continuous", CHUNKED):
        if label in opts:
            o = opts[label]
            text = f"{label}: max_num_seqs {o['max_num_seqs']}, admission {o['admission']}"
            if label == CHUNKED:
                text += f", max_num_batched_tokens {o['max_num_batched_tokens']:,} (decode rows first, then chunks)"
            cache = o.get("prefix_cache")
            if cache is None:
                text += ", prefix caching off"
            else:
                tokens, blocks = cache["hit_rate_tokens"], cache["hit_rate_blocks"]
                text += (f", prefix caching on: hit rate {_share(tokens)} of prompt tokens, {_share(blocks)} of "
                         f"blocks; {cache['prefill_tokens_saved']:,} prefill tokens saved, "
                         f"{cache['evictions']:,} blocks evicted")
            notes.append(text)
    notes += _speculative_lines(run)
    lines += ["", *(f"  {n}" for n in notes),
              "  tokens/s = output tokens per second; useful = long-run useful share: rows producing a token / "
              "occupied rows over all steps; slots = slot occupancy: sequences holding a slot / (max batch x "
              "steps); peak KV = the pool's peak use; preempt = preemptions.",
              "  TTFT includes queueing; TPOT = (E2E - TTFT) / (O - 1); ITL = gaps between a request's streamed "
              "tokens (none for static batching, which hands all tokens back at once); E2E ends when the result is "
              "handed back; percentiles are interpolated (numpy.percentile's default, as vllm bench serve), over the "
              "requests handed back" + ("." if verbose else "; queue wait and p90s: --verbose.")]
    if run["workload"]["kind"] == "closed_loop":
        lines.append("  closed-loop clients are served by continuous batching only (serial and static batching "
                     "need their arrivals up front).")
    return fit_width("\n".join(line.rstrip() for line in lines))


REPLICA_COLUMNS = (("replica", 9), ("requests", 9), ("done", 8), ("rejected", 8), ("prompt tok", 11),
                   ("output tok", 11), ("busy", 9), ("steps", 9), ("peak KV", 8))


def _replica_table(label: str, rep: Any, pool: Any, virtual: bool = False) -> list[str]:
    """The per-replica load of a replicated row (at most 100 columns), and its throughput per GPU."""
    per_gpu = rep.output_tokens_per_s_per_gpu
    kind = "virtual engines (pipeline stages shared)" if virtual else "data-parallel replicas"
    lines = [f"  {label}: {rep.data_parallel_size} {kind} x {rep.gpus_per_replica} GPU"
             f"{'s' if rep.gpus_per_replica > 1 else ''} = {rep.gpus} GPUs, router {rep.router}",
             f"  output throughput per GPU {'-' if per_gpu is None else f'{float(per_gpu):,.1f}'} tokens/s; "
             "percentiles over all replicas' requests",
             "  " + _row(tuple(name for name, _ in REPLICA_COLUMNS), [w for _, w in REPLICA_COLUMNS])]
    widths = [w for _, w in REPLICA_COLUMNS]
    for load in rep.loads:
        cap = load.kv_capacity_blocks
        peak = "-" if not cap else f"{100 * load.peak_kv_blocks / cap:.1f}%"
        lines.append("  " + _row((str(load.replica), f"{load.requests:,}", f"{load.completed:,}",
                                  f"{load.rejected:,}", f"{load.prompt_tokens:,}", f"{load.output_tokens:,}",
                                  _t(load.busy_s), f"{load.steps:,}", peak), widths))
    return lines


def _engine_scheduler(args: argparse.Namespace, deployment: Any) -> str | None:
    """Under ``--estimate`` of an engine version, its scheduler defaults become the flags the user did not give
    (the user's flags win); returns the line saying which defaults ran and what the name resolved to, or None.

    The defaults are the profile's :class:`roofline.profiles.SchedulerDefaults` on this accelerator, as flags
    (:meth:`~roofline.profiles.SchedulerDefaults.flags`, the table ``roofline plan`` takes them from too): the
    policy (``--policy``), ``--max-num-seqs``, ``--max-num-batched-tokens``, chunked prefill and ``--admission``.
    """
    from ..profiles import resolve_engine_profile

    p = deployment.estimate
    scheduler = getattr(p, "scheduler", None)
    if p is None or scheduler is None:
        return None
    note = resolve_engine_profile(args.estimate)[1] if isinstance(args.estimate, str) else None
    given = getattr(args, "given_flags", {})
    flags = scheduler.flags(deployment.accelerator)
    applied = []

    def take(dest: str) -> None:
        flag, value = flags[dest]
        setattr(args, dest, value)
        applied.append(flag if value is True else f"{flag} {value}")

    if "policy" in flags and "policy" not in given:
        take("policy")
    continuous = args.policy in ("all", "continuous")
    if flags.get("chunked_prefill", ("", False))[1] and not args.chunked_prefill and continuous:
        take("chunked_prefill")
    for dest in ("max_num_seqs", "admission"):
        if dest in flags and dest not in given and continuous:
            take(dest)
    if "max_num_batched_tokens" in flags and args.max_num_batched_tokens is None and args.chunked_prefill:
        take("max_num_batched_tokens")
    text = (f"{p.key} ({p.version}) defaults: {', '.join(applied)} (flags given win)" if applied
            else f"{p.key} ({p.version}): no scheduler default applied (flags given win)")
    if scheduler.not_published:
        text += "; not published, the scheduler's own: " + "; ".join(scheduler.not_published)
    return text if note is None else f"{note}; {text}"


def _band_line(deployment: Any) -> str | None:
    """The estimate's validation residuals and whether this model and accelerator lie in its fitted rows
    (:meth:`roofline.profiles.EngineProfile.error_band`; the batch varies step to step, so it is not judged)."""
    p = deployment.estimate
    if p is None or not hasattr(p, "error_band"):
        return None
    return str(p.error_band(deployment.share, deployment.accelerator))


def _kind_text(kind: str) -> str:
    if kind == "bound":
        return "roofline bound (datasheet constants, overhead as given: a lower bound)"
    return f"[{kind}] (engine profile constants fitted on published measurements; not a bound)"


def to_json(run: dict[str, Any], trace: str | None = None) -> str:
    """The comparison as JSON: inputs, the workload (seed included) and each policy's options and summary."""
    model, acc, pool = run["model"], run["accelerator"], run["pool"]
    results: list[dict[str, Any]] = []
    for label, r in zip(run["labels"], run["results"], strict=True):
        d = dict(r.to_dict(), label=label)
        replicated = (run.get("replicas") or [None] * len(run["labels"]))[len(results)]
        if replicated is not None:
            d["data_parallel"] = replicated.to_dict()
        if run["slo"] is not None:
            d["goodput"] = r.goodput(**run["slo"]).to_dict()
        if run.get("plain"):  # the same row without speculative decoding
            d["without_speculative"] = run["plain"][len(results)].summary.to_dict()
        results.append(d)
    workload = run["workload"]
    return json.dumps({
        "trace": {"path": workload.get("path"), "requests": len(run["results"][0].requests) if results else 0},
        "workload": workload,
        "model": {"name": model.name, "weight_dtype": model.weight_dtype, "weight_format": model.weight_format,
                  "kv_dtype": model.kv_dtype},
        "accelerator": {"key": acc.key, "name": acc.name},
        **({"tensor_parallel_size": T} if (T := run["deployment"].tensor_parallel_size) > 1 else {}),
        **({"tensor_parallel_chosen": "smallest that fits"} if run.get("tp_note") else {}),
        **({"data_parallel_size": D} if (D := run["deployment"].parallelism.data) > 1 else {}),
        **({"enable_expert_parallel": True} if run["deployment"].expert_parallel_size > 1 else {}),
        "time_kind": run.get("time_kind", "bound"),
        "flops_convention": run["deployment"].flops,
        **({"estimate_band": run["band"]} if run.get("band") else {}),
        **({"engine_scheduler": run["scheduler_note"]} if run.get("scheduler_note") else {}),
        "kv_pool": {"budget_bytes": float(run["budget"]), "budget_basis": run.get("budget_basis"),
                    "capacity_blocks": pool.capacity_blocks,
                    "block_size": pool.block_size, "capacity_tokens": pool.capacity_tokens, "unit": pool.unit,
                    "state_blocks": pool.state_blocks,
                    **({"proposer": {"method": held.method, "weight_bytes": float(held.weight_bytes),
                                     "kv_bytes_per_token": float(held.kv_bytes_per_token),
                                     "capacity_blocks_without": run["plain_pool"].capacity_blocks}}
                       if (held := run.get("proposer")) is not None else {})},
        "units": _json_units(pool),
        "results": results,
    }, indent=2)


def _json_units(pool: Any) -> dict[str, str]:
    """What the numbers of the JSON are in: the keys without a unit suffix, and the KV counts' unit."""
    kv = "token-layers (tokens summed over layers: the model has sliding windows)" if pool.layer_windows else "tokens"
    return {
        "*_s, queue_wait, ttft, tpot, e2e, itl (p50, p90, p99, mean, max)": "s",
        "output_tokens_per_s": "tokens/s",
        "capacity_tokens, peak_kv_tokens": kv,
        "capacity_blocks, peak_kv_blocks, kv_capacity_blocks": pool.unit,
        "shares and slot_occupancy": "1 (fractions of 1)",
        "peak_running": "sequences",
    }


def _progress(items: Any, desc: str, unit: str) -> Any:
    """A tqdm progress bar over ``items`` on stderr, shown only when stderr is a terminal (tqdm is a
    dependency; an install without it runs silently)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return _Silent(items)
    return tqdm(items, desc=desc, unit=unit, disable=not _stderr_is_terminal(), leave=False, file=sys.stderr)


class _Silent:
    """The part of a tqdm bar simulate uses, showing nothing."""

    def __init__(self, items: Any) -> None:
        self.items = items

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __iter__(self) -> Any:
        return iter(self.items)

    def set_postfix_str(self, text: str) -> None:
        return None


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


#: Every policy row label, so that --out can be checked before the run.
ALL_LABELS = (*POLICIES, CHUNKED)


def check_out_option(args: argparse.Namespace) -> list[Path] | None:
    """The files ``--out`` may write (every policy's), checked before any work; None without ``--out``.

    Raises
    ------
    InvalidValueError
        ``--out ""``; ``--out`` naming an existing file that is not a folder; an output that is
        the trace or the model config read, or an existing file of the folder that is not a table this
        command writes (its line 1 differs from the header: :func:`roofline._io.check_own_csv`; field
        ``--out``); ``--steps`` without ``--out``.
    """
    if args.out is None:
        if args.steps:
            raise InvalidValueError("--steps", FLAG_GIVEN, "writes per-step tables into the --out folder; "
                                    "give --out DIR")
        return None
    directory = output_path("--out", args.out)
    if directory.exists() and not directory.is_dir():
        raise InvalidValueError("--out", args.out, "is a file, not a folder")
    outputs = [directory / f"{label}-{kind}.csv" for label in ALL_LABELS for kind in ("requests", "steps")]
    inputs = [args.model if os.path.isfile(args.model) else None]
    if args.trace is not None and args.trace not in SHIPPED_TRACES:
        inputs.append(args.trace)
    check_outputs("--out", [directory, *outputs], inputs)
    from ..sim.results import _REQUEST_FIELDS, _STEP_FIELDS

    for path in outputs:  # never over a file this command did not write (line 1: its header)
        requests = path.name.endswith("-requests.csv")
        check_own_csv("--out", path, _REQUEST_FIELDS if requests else _STEP_FIELDS,
                      f"a simulate {'requests' if requests else 'steps'} CSV")
    return outputs


#: Rows serialised, from each end of a table, to estimate its size before it is written.
SAMPLE_ROWS = 100


def _estimate_bytes(fields: Any, records: Any) -> int:
    """Bytes a CSV table will take: its header plus its row count x the mean size of its first and last rows.

    ``records`` is a sequence (list, or the step log) of objects with ``to_dict()``.
    """
    n = len(records)
    picked = records[:n] if n <= 2 * SAMPLE_ROWS else [*records[:SAMPLE_ROWS], *records[n - SAMPLE_ROWS:n]]
    sample = io.StringIO()
    _write_rows(sample, fields, (x.to_dict() for x in picked))
    lines = sample.getvalue().splitlines(keepends=True)
    header, body = len(lines[0]), lines[1:]
    return header + (round(n * sum(map(len, body)) / len(body)) if body else 0)


def _write_rows(stream: Any, fields: Any, rows: Any) -> None:
    """Rows as the simulator's own CSV writers lay them out (header, then one line per row)."""
    import csv

    w = csv.writer(stream, lineterminator="\n")
    w.writerow(fields)
    for d in rows:
        w.writerow(["" if d[k] is None else d[k] for k in fields])


def _write_out(results: list[SimResult], labels: list[str], out: str) -> None:
    """Write each policy's tables into ``out``, saying first on stderr how much; each file atomically."""
    directory = Path(out)
    from ..sim.results import _REQUEST_FIELDS, _STEP_FIELDS

    tables: list[tuple[Path, Any, int, int]] = []
    for label, r in zip(labels, results, strict=True):
        tables.append((directory / f"{label}-requests.csv", r.write_requests_csv, len(r.requests),
                       _estimate_bytes(_REQUEST_FIELDS, r.requests)))
        if r.steps is not None:
            tables.append((directory / f"{label}-steps.csv", r.steps.write_csv, len(r.steps),
                           _estimate_bytes(_STEP_FIELDS, r.steps)))
    sizes = [size for _, _, _, size in tables]
    total_rows = sum(rows for _, _, rows, _ in tables)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with locked_folder("--out", directory):  # a second run writing here now is refused, not mixed in
            print(f"roofline simulate: writing {len(tables)} files, {total_rows:,} rows, about {_mb(sum(sizes))}, "
                  f"to {directory}{'' if any(r.steps is not None for r in results) else ' (per-step tables: --steps)'}",
                  file=sys.stderr, flush=True)
            for (path, write, _, _), size in zip(tables, sizes, strict=True):
                with atomic_write(path, newline="") as fh:
                    if _stderr_is_terminal() and size > 1 << 24 and importlib.util.find_spec("tqdm"):
                        from tqdm import tqdm

                        with tqdm.wrapattr(fh, "write", total=size, desc=path.name, unit="B", unit_scale=True,
                                           leave=False, file=sys.stderr) as wrapped:
                            write(wrapped)
                    else:
                        write(fh)
    except OSError as exc:
        raise InvalidValueError("--out", out, f"cannot write: {exc.strerror or exc}") from None


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB" if size >= 10**6 else f"{size / 1e3:,.1f} kB"


def run(args: argparse.Namespace) -> int:
    """Simulate and print the comparison for the parsed arguments; return 0."""
    if _disaggregated.wanted(args):  # disaggregated prefill and decode: its own run and output
        check_workload_flags(args)
        return _disaggregated.run(args, build_workload=build_workload, describe=_describe,
                                  default_utilization=DEFAULT_UTILIZATION)
    _disaggregated.check_unused(args)
    result = simulate_trace(args)
    print(to_json(result) if args.json else format_table(result, verbose=args.verbose))
    if args.out is not None:
        _write_out(result["results"], result["labels"], args.out)
    return 0
