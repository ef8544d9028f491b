"""Argument types and options shared by the subcommands.

The types raise ``argparse.ArgumentTypeError`` with the option and the value given, so
argparse prints one line (``roofline <command>: error: argument --x: --x='bad': ...``)
and exits with status 2.
"""

from __future__ import annotations

import argparse
import math
import re
from fractions import Fraction
from typing import Any

from .._io import exact_decimal
from ..deployment import Deployment, Parallelism, profile
from ..errors import FLAG_GIVEN, InvalidValueError, UnknownPresetError
from ..units import approx
from ._vllm import add_vllm_dtype_options, check_vllm_model, vllm_dtypes

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_ACCELERATOR = "h100-sxm"


#: Largest number any option takes: larger ones are typos, and would overflow floats.
MAXIMUM = 10**15


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.M)


def plain(doc: str | None) -> str:
    """A docstring as help text: reST roles (``:mod:`x```) and literals (````x````) shown as plain x, and a
    literal block's ``::`` at a line's end as one colon."""
    return _LITERAL_BLOCK.sub(":", _ROLE.sub(r"\1", doc or "").replace("``", ""))


def _ascii(name: str, text: str) -> None:
    """Numbers on the command line are ASCII: Python would read Arabic-Indic or full-width digits as 12."""
    if not text.isascii():
        raise argparse.ArgumentTypeError(f"{name}={text!r}: numbers must be written with ASCII digits")


def int_arg(name: str, minimum: int = 0, maximum: int = MAXIMUM) -> Any:
    """An argparse type: an integer in [``minimum``, ``maximum``]."""

    def parse(text: str) -> int:
        _ascii(name, text)
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r}: expected an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name}={text!r}: must be >= {minimum}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{name}={text!r}: must be <= {maximum:,}")
        return value

    return parse


def number_arg(name: str, *, positive: bool = False, at_most_one: bool = False) -> Any:
    """An argparse type: a finite decimal number read exactly as a Fraction, in [0, MAXIMUM]
    (> 0 if ``positive``; <= 1 if ``at_most_one``). NaN, infinity, fractions such as 1/3 and
    numbers too long to convert in bounded time (:func:`roofline._io.exact_decimal`) are refused."""

    def parse(text: str) -> Fraction:
        _ascii(name, text)
        try:
            value = exact_decimal(text)  # bounded: 1e999999999 is refused, not built digit by digit
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{name}={text!r}: expected a finite number ({exc})") from None
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"{name}={text!r}: must be {'>' if positive else '>='} 0")
        if at_most_one and value > 1:
            raise argparse.ArgumentTypeError(f"{name}={text!r}: must be <= 1")
        if value > MAXIMUM:
            raise argparse.ArgumentTypeError(f"{name}={text!r}: must be <= {MAXIMUM:.0e}")
        return value

    return parse


def add_model_options(parser: argparse.ArgumentParser, *, dtypes: bool = True) -> None:
    """--model, --accelerator and (with ``dtypes``) --weight-dtype and --kv-dtype."""
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="preset name, a preset's Hugging Face id (ORG/NAME, e.g. meta-llama/Llama-3.1-8B) or "
                             "path to a Hugging Face config.json (default: %(default)s)")
    parser.add_argument("--accelerator", default=DEFAULT_ACCELERATOR,
                        help="accelerator preset (default: %(default)s)")
    if dtypes:
        parser.add_argument("--weight-dtype", default=None,
                            help="override the weight dtype (bf16, fp8, int8, int4...): one flat width for every "
                                 "weight, embeddings and lm_head included, no group scales, the config's "
                                 "quantization_config dropped; a quantized config.json is priced exactly without it")
        parser.add_argument("--kv-dtype", "--kv-cache-dtype", dest="kv_dtype", default=None,
                            help="override the KV-cache dtype (vLLM's --kv-cache-dtype: fp8, fp8_e4m3, fp8_e5m2 "
                                 "store 1 byte per element; their per-layer scales are not counted)")
        add_vllm_dtype_options(parser)


def add_flops_option(parser: argparse.ArgumentParser, *, default: str) -> None:
    """--flops {exact,2p}: the FLOPs convention ("lesson" is read as "2p", its former name)."""
    parser.add_argument("--flops", type=_flops, choices=("exact", "2p"), default=default,
                        help="FLOPs convention: 'exact' (2 x matmul parameters + attention) or "
                             "'2p' (2 x P, the lesson's round figure; 'lesson' is read as '2p') "
                             "(default: %(default)s)")


def _flops(text: str) -> str:
    return {"lesson": "2p"}.get(text, text)


#: The shipped engine profiles' keys (roofline.calibrate.fit.profile_names(); a test keeps them equal).
ENGINE_PROFILES = ("vllm", "gpt-fast", "lmdeploy", "trtllm", "nim", "sglang")


def add_estimate_option(p: argparse.ArgumentParser, *, instead: bool = False) -> None:
    """``--estimate PROFILE``: an engine profile's estimate beside the bound (report) or instead of it (simulate)."""
    what = ("price every step with an engine profile's estimate instead of the bound" if instead
            else "also print an engine profile's estimate beside the bound")
    p.add_argument("--estimate", default=None, metavar="PROFILE",
                   help=f"{what}: {', '.join(ENGINE_PROFILES[:-1])} or {ENGINE_PROFILES[-1]} (constants fitted on "
                        "published measurements; see roofline validate), or an engine version (vllm-v0, vllm-v1, "
                        "trtllm-0.6, trtllm-1.0: its scheduler defaults too; an engine's name is its newest version) "
                        "(default: the bound only)")



def add_tensor_parallel_option(p: argparse.ArgumentParser, *, default: int | None = 1, budgets: str = "") -> None:
    """Add ``--tensor-parallel-size`` / ``--tp`` (vLLM's flag): T GPUs sharing the model.

    ``budgets``, when given, is a clause added to the help saying which of the command's
    budgets are per GPU.
    """
    p.add_argument("--tensor-parallel-size", "-tp", "--tp", type=int_arg("--tensor-parallel-size", 1), default=default,
                   dest="tensor_parallel_size", metavar="T",
                   help="GPUs in a tensor-parallel group: sizes are per GPU, step times add the all-reduce, "
                        "tokens/s are the group's" + (f"; {budgets}" if budgets else "")
                        + " (docs/conventions.md, \"Tensor parallelism\"; default: "
                        + ("the smallest that fits" if default is None else str(default)) + ")")


def add_data_parallel_option(p: argparse.ArgumentParser) -> None:
    """Add ``--data-parallel-size`` / ``-dp`` (vLLM's flag): D replicas of the deployment behind a router."""
    p.add_argument("--data-parallel-size", "-dp", type=int_arg("--data-parallel-size", 1), default=1,
                   dest="data_parallel_size", metavar="D",
                   help="data-parallel replicas: D copies of the deployment, each with its own KV pool and "
                        "scheduler, behind a router (--router); GPUs = D x the GPUs of one "
                        "(docs/conventions.md, \"Data-parallel replicas\"; default: 1)")


def add_pipeline_parallel_option(p: argparse.ArgumentParser) -> None:
    """Add ``--pipeline-parallel-size`` / ``-pp`` (vLLM's flag): P pipeline stages of T GPUs each."""
    p.add_argument("--pipeline-parallel-size", "-pp", type=int_arg("--pipeline-parallel-size", 1), default=1,
                   dest="pipeline_parallel_size", metavar="P",
                   help="pipeline stages, each a tensor-parallel group holding a run of layers: GPUs = T x P; "
                        "a step adds the sends between stages (docs/conventions.md, \"Pipeline parallelism\"; "
                        "default: 1)")


def add_speculative_options(p: argparse.ArgumentParser, *, scheduler: bool = False) -> None:
    """``--speculative-config`` (vLLM's JSON) and ``--acceptance-rate``, for ``roofline report`` and
    ``roofline simulate``; with ``scheduler`` also how the simulator makes each step's accepted tokens
    (``--acceptance-mode``, ``--speculative-seed``; docs/conventions.md, "Speculative decoding in the scheduler")."""
    p.add_argument("--speculative-config", default=None, metavar="JSON",
                   help="speculative decoding, as vLLM spells it: '{\"method\": \"draft_model\", \"ngram\", "
                        "\"mtp\", \"deepseek_mtp\", \"eagle\" or \"eagle3\", \"model\": DRAFT or HEAD, "
                        "\"num_speculative_tokens\": k}' (needs --acceptance-rate; docs/conventions.md, "
                        "\"Speculative decoding\")")
    p.add_argument("--acceptance-rate", type=acceptance_rate_arg, default=None, metavar="ALPHA[,ALPHA...]",
                   help="probability that each proposed token is accepted, in (0, 1] (with --speculative-config); "
                        "or k comma-separated values, one per position, each given all before it accepted "
                        "(e.g. 0.9,0.8,0.7 for k = 3)")
    if scheduler:
        from ..sim.speculative import ACCEPTANCE_MODES

        p.add_argument("--acceptance-mode", choices=ACCEPTANCE_MODES, default="seeded",
                       help="with --speculative-config: each step's accepted tokens drawn per request from a "
                            "generator seeded by (--speculative-seed, request id), or the exact expectation "
                            "(1 - a^(k+1)) / (1 - a) per step carried in whole tokens (default: %(default)s)")
        p.add_argument("--speculative-seed", type=int_arg("--speculative-seed", 0), default=0,
                       help="with --acceptance-mode seeded: the seed of the accepted-token draws (default: 0)")


def acceptance_rate_arg(text: str) -> Fraction | tuple[Fraction, ...]:
    """An argparse type for ``--acceptance-rate``: one rate in (0, 1], or comma-separated rates (a per-position
    vector, a tuple of Fractions; its length is checked against k where the config is read). Each value as
    :func:`number_arg` reads it; an empty item is refused (docs/conventions.md, "Speculative decoding")."""
    one = number_arg("--acceptance-rate", positive=True, at_most_one=True)
    if "," not in text:
        return one(text)
    items = text.split(",")
    if any(not item.strip() for item in items):
        raise argparse.ArgumentTypeError(f"--acceptance-rate={text!r}: expected comma-separated numbers in (0, 1], "
                                         "one per proposed token")
    return tuple(one(item.strip()) for item in items)


def acceptance_shown(alpha: Any) -> Any:
    """``--acceptance-rate`` as the user typed it, for a message: 0.7 (1 for an integer), or the per-position
    rates joined by commas (``'0.9,0.8'``). ``alpha``: its parsed value, a Fraction or a tuple of them."""
    if isinstance(alpha, tuple):
        return ",".join(f"{float(a):g}" for a in alpha)
    return int(alpha) if alpha.denominator == 1 else float(alpha)


def speculative_pair(args: argparse.Namespace) -> tuple[Any, Any] | None:
    """``(--speculative-config, --acceptance-rate)`` as given, both or neither (None), for report and simulate.

    Raises
    ------
    InvalidValueError
        ``--acceptance-rate`` without ``--speculative-config``; ``--speculative-config`` without
        ``--acceptance-rate`` (after the config's own faults:
        :meth:`roofline.speculative.SpeculativeConfig.parse`), each named by its flag, one short line.
    """
    config: Any = getattr(args, "speculative_config", None)
    alpha: Any = getattr(args, "acceptance_rate", None)
    if config is None and alpha is None:
        return None
    if config is None:
        raise InvalidValueError("--acceptance-rate", acceptance_shown(alpha), "given without --speculative-config")
    if alpha is None:
        from ..speculative import SpeculativeConfig

        SpeculativeConfig.parse(config)  # the config's own faults first: then what it lacks
        raise InvalidValueError("--speculative-config", config, "needs --acceptance-rate (alpha, in (0, 1])")
    return config, alpha


def add_expert_parallel_option(p: argparse.ArgumentParser) -> None:
    """Add ``--enable-expert-parallel`` (vLLM's flag): a MoE model's routed experts spread whole over the group."""
    p.add_argument("--enable-expert-parallel", action="store_true", dest="enable_expert_parallel",
                   help="expert parallelism: E / T whole routed experts per GPU, each MoE layer's all-reduce "
                        "replaced by a dispatch and a combine (all-to-all) and an all-gather; attention stays "
                        "tensor-parallel (docs/conventions.md, \"Expert parallelism\"; default: off)")


def citation_url(citation: str) -> str:
    """The first URL of a source citation (the line a command prints), else the citation itself."""
    match = re.search(r"https?://\S+?(?=[:,;)\s]|$)", citation)
    return match.group(0) if match else citation


def deployment_from_args(args: argparse.Namespace, *, utilization: Any = None) -> tuple[Deployment, bool]:
    """The one :class:`roofline.Deployment` of a command's flags, and whether T was chosen for it.

    Reads ``--model`` (with ``--weight-dtype`` and ``--kv-dtype`` where the command has them: the
    KV dtype is the model's, ``load_model(..., kv_dtype=...)``), ``--accelerator``,
    ``--tensor-parallel-size`` (absent: 1; not given where its default is None: the smallest T
    that fits, :func:`roofline.estimate.smallest_tensor_parallel_size` at ``utilization``, else 1),
    ``--pipeline-parallel-size`` (absent: 1; with P > 1 and T chosen, the smallest T whose stages all
    leave a KV budget), ``--flops`` (absent: "exact"), ``--estimate`` (absent: the bound) and
    ``--enable-expert-parallel`` (absent: off; :attr:`roofline.Parallelism.expert`).

    Returns
    -------
    (Deployment, bool)
        The bool is True when T > 1 was chosen as the smallest that fits (the command says so).

    Raises
    ------
    RooflineError
        An unknown preset or profile, an unreadable config, a T the model's heads refuse (each
        naming its flag's field, :class:`roofline.Deployment`).
    """
    from ..estimate import smallest_tensor_parallel_size
    from ..hardware import get_accelerator
    from ..models import load_model

    weight_dtype, kv_dtype = vllm_dtypes(args)
    model = by_flag("--model", load_model, args.model)
    check_vllm_model(args, model)
    model = model.with_dtypes(weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    accelerator = by_flag("--accelerator", get_accelerator, args.accelerator)
    T = getattr(args, "tensor_parallel_size", 1)
    P = getattr(args, "pipeline_parallel_size", 1)
    chosen = False
    if T is None and P > 1:  # the smallest T whose P stages leave every GPU a KV budget
        T = next((t for t in (1, 2, 4, 8, 16, 32, 64) if _pipeline_fits(model, accelerator, t, P, utilization)), 1)
        chosen = T > 1
    elif T is None:
        kw = {} if utilization is None else {"utilization": utilization}
        T = smallest_tensor_parallel_size(model, accelerator, **kw) or 1
        chosen = T > 1
    parallelism = Parallelism(tensor=T, pipeline=P, data=getattr(args, "data_parallel_size", 1),
                              expert=bool(getattr(args, "enable_expert_parallel", False)))
    estimate = by_flag("--estimate", profile, getattr(args, "estimate", None))
    try:
        return Deployment(model, accelerator, parallelism, flops=getattr(args, "flops", "exact"),
                          estimate=estimate), chosen
    except InvalidValueError as err:  # a refusal of the parallelism names its flag, as the user gave it
        flag = _PARALLELISM_FLAGS.get(err.field)
        if flag is None:
            raise
        value = given_value(args, err.field) if err.field == "enable_expert_parallel" else err.value  # a switch
        raise InvalidValueError(flag, value, err.reason) from None


#: the Deployment's parallelism fields, by the command-line flag that sets each
_PARALLELISM_FLAGS = {"enable_expert_parallel": "--enable-expert-parallel",
                      "tensor_parallel_size": "--tensor-parallel-size",
                      "pipeline_parallel_size": "--pipeline-parallel-size",
                      "data_parallel_size": "--data-parallel-size"}


def chosen_tensor_parallel_note(deployment: Deployment, command: str = "report") -> str:
    """The line a command prints when :func:`deployment_from_args` chose T (the model does not fit one GPU).

    ``command`` names what follows ("report": the report below; "run": the run below). Raises nothing.
    """
    model, accelerator, tp = deployment.model, deployment.accelerator, deployment.tensor_parallel_size
    return (f"{model.name} does not fit one {accelerator.name} (weights {float(model.weight_bytes) / 1e9:.2f} "
            f"GB); the smallest tensor-parallel size that fits is {tp}: the {command} below is for "
            f"--tensor-parallel-size {tp}")


def _pipeline_fits(model: Any, accelerator: Any, T: int, P: int, utilization: Any) -> bool:
    """Whether T x P GPUs of ``accelerator`` hold ``model`` with KV room on every stage (False where refused)."""
    try:
        d = Deployment(model, accelerator, Parallelism(T, P))
        return d.kv_blocks(utilization=Fraction(9, 10) if utilization is None else utilization) > 0
    except InvalidValueError:
        return False


def given_value(args: argparse.Namespace, dest: str) -> Any:
    """An option's value as the user wrote it, for a message: 1, not Fraction(1, 1); 0.5, not Fraction(1, 2);
    a switch given (``--enable-prefix-caching``, stored True) :data:`roofline.errors.FLAG_GIVEN`, so that the
    message reads as the flag was typed (``--enable-prefix-caching: ...``, not ``=True``)."""
    v = getattr(args, dest)
    if v is True:
        return FLAG_GIVEN
    if not isinstance(v, Fraction):
        return v
    if v.denominator == 1:
        return int(v)
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    return f if math.isfinite(f) and f != 0 else _AsTyped(approx(v))  # past a float: as %g writes it


class _AsTyped(str):
    """A number past a float's range, shown as written (``1e-400``, not ``0.0``) in a message."""

    def __repr__(self) -> str:
        return str(self)


def by_flag(flag: str, lookup: Any, name: Any, **kwargs: Any) -> Any:
    """``lookup(name, **kwargs)``, an unknown preset or profile refused by the flag that named it.

    Raises
    ------
    UnknownPresetError
        ``name`` is not known: the message starts with ``flag`` (``--model: unknown model 'x'; known: ...``).
    InvalidValueError
        Any other refusal; one naming the flag's own field (``estimate``) names ``flag`` instead.
    """
    try:
        return lookup(name, **kwargs)
    except UnknownPresetError as err:
        raise UnknownPresetError(err.kind, err.name, err.known, field=flag, hint=err.hint,
                                 aliases=[err.suggestion] if err.suggestion else ()) from None
    except InvalidValueError as err:  # the API's own field for the flag's value ("estimate" for --estimate)
        if err.field != flag.lstrip("-").replace("-", "_"):
            raise
        raise InvalidValueError(flag, err.value, err.reason) from None
