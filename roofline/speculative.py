"""Speculative decoding applied to a model on an accelerator: what ``roofline report --speculative-config`` prints.

The model is docs/conventions.md, "Speculative decoding": a proposer offers k tokens per
sequence per step, the target verifies the k + 1 positions of each sequence in one step
(:func:`roofline.formulas.speculative_step_time`), each proposed token is accepted with
probability alpha independently, so a sequence gains (1 - alpha^(k+1)) / (1 - alpha) tokens
per step (:func:`roofline.formulas.speculative_tokens_per_step`; Leviathan, Kalman and
Matias, ICML 2023). The proposer is vLLM's ``speculative_config`` (its JSON spelling:
``method``, ``model``, ``num_speculative_tokens``):

* ``draft_model`` (vLLM's default when ``model`` is given): a smaller model on the same
  accelerator, whose k decode steps of the batch, at contexts c .. c + k - 1, are priced by
  :func:`roofline.formulas.stretch_time`;
* ``ngram`` (prompt lookup): costs nothing;
* ``mtp`` / ``deepseek_mtp``: the target's own MTP module (``num_nextn_predict_layers``), one decode step
  of it per proposed token, and ``eagle`` / ``eagle3``: an EAGLE head, a one-layer decoder sharing the
  target's lm_head (:func:`proposer_model`);
* ``medusa``, ``mlp_speculator``: refused by name (not modelled yet).

A MoE target's verification reads the experts its B (k + 1) tokens touch; under tensor parallelism
every number is one GPU's share and each step adds its all-reduces. All numbers are the roofline
bound (no overhead) in SI units, exact Fractions for the presets.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import attrs
import numpy as np

from . import formulas as f
from ._checks import check_int, check_number
from ._io import unique_keys
from .deployment import Deployment, allreduce_terms
from .errors import ConfigError, InvalidValueError, UnknownPresetError
from .estimate import _hardware_terms, _model_terms
from .models import ModelConfig, load_model

__all__ = ["SpeculativeConfig", "SpeculativeStep", "speculative_step", "break_even_batch", "proposer_model",
           "proposer_extra", "ProposerMemory", "proposer_memory", "expected_tokens_per_step",
           "best_speculative_tokens", "check_draft",
           "METHODS", "HEAD_METHODS", "REFUSED_METHODS", "MAX_SPECULATIVE_TOKENS",
           "MAX_BREAK_EVEN_BATCH"]

#: methods modelled: a draft model's own decode steps, n-gram lookup at no cost, the target's MTP module(s), an
#: EAGLE / EAGLE-3 head (vLLM's names)
METHODS = ("draft_model", "ngram", "mtp", "deepseek_mtp", "eagle", "eagle3")
#: the methods whose proposer is a head on the target (its lm_head shared)
HEAD_METHODS = ("mtp", "deepseek_mtp", "eagle", "eagle3")
#: vLLM's methods refused by name: not modelled yet
REFUSED_METHODS = ("medusa", "mlp_speculator")
_FIELDS = ("method", "model", "num_speculative_tokens")
#: the most proposed tokens per step modelled (vLLM sets none; EAGLE and draft models use 1 to about 10)
MAX_SPECULATIVE_TOKENS = 64
#: the largest batch :func:`break_even_batch` scans by default [sequences]
MAX_BREAK_EVEN_BATCH = 4096
#: floats within this relative distance of a speed-up of 1 are decided with exact Fractions
_CLOSE = 1e-9


@attrs.frozen
class SpeculativeConfig:
    """A proposer, as vLLM's ``--speculative-config`` spells it.

    Attributes
    ----------
    method : one of :data:`METHODS`
    num_speculative_tokens : int in 1 .. 64 [tokens] (k, proposed per sequence per step)
    draft : ModelConfig or None (the draft model for ``draft_model``; the head's own config for ``eagle`` /
        ``eagle3`` when ``model`` is a preset or a config.json; None for ``ngram``, ``mtp`` and a derived head)
    model : str or None (``model`` as given: the draft's or the head's name, reported)
    """

    method: str
    num_speculative_tokens: int
    draft: ModelConfig | None = None
    model: str | None = None

    @classmethod
    def parse(cls, value: str | dict[str, Any]) -> SpeculativeConfig:
        """The config from its JSON text (or the decoded dict).

        Parameters
        ----------
        value : str or dict
            ``{"method": ..., "model": ..., "num_speculative_tokens": k}``; ``method`` defaults to
            ``draft_model`` when ``model`` is given (vLLM's rule), ``model`` is a preset name or a
            config.json path (:func:`roofline.load_model`). ``mtp`` / ``deepseek_mtp``: the target's own
            MTP module(s), no ``model`` needed (a ``model`` given is the target's own checkpoint and is only
            reported). ``eagle`` / ``eagle3``: ``model`` the head's checkpoint: a preset or a config.json
            is used as it is; any other name (a Hugging Face id such as ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``)
            is taken as a head derived from the target (:func:`proposer_model`).

        Returns
        -------
        SpeculativeConfig

        Raises
        ------
        InvalidValueError
            Text that is not a JSON object, a field vLLM has that is not modelled here or one it does
            not have, a method unknown or not modelled (``medusa``, ``mlp_speculator``; each named:
            ``speculative_config.<field>``), k not an integer in 1 .. 64, a draft model missing for
            ``draft_model`` or ``eagle`` / ``eagle3``, or given for ``ngram``.
        UnknownPresetError, ConfigError
            A draft model that is neither a preset nor a readable config.

        Examples
        --------
        >>> c = SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 4}')
        >>> c.method, c.num_speculative_tokens, c.draft.name
        ('draft_model', 4, 'llama-3.2-1b')
        >>> SpeculativeConfig.parse('{"method": "mtp", "num_speculative_tokens": 1}').method
        'mtp'
        """
        if isinstance(value, str):
            try:
                value = json.loads(value, object_pairs_hook=unique_keys)  # a key given twice is refused
            except json.JSONDecodeError as error:
                raise InvalidValueError("speculative_config", value, f"is not JSON ({error.msg} at column "
                                        f"{error.colno})") from None
            except ValueError as error:  # a key given twice
                raise InvalidValueError("speculative_config", value, f"is not JSON ({error})") from None
        if not isinstance(value, dict):
            raise InvalidValueError("speculative_config", value, "expected a JSON object with method, model and "
                                    "num_speculative_tokens")
        for key in value:
            if key not in _FIELDS:
                raise InvalidValueError(f"speculative_config.{key}", value[key],
                                        f"not modelled (the fields modelled are {', '.join(_FIELDS)})")
        model = value.get("model")
        if "model" in value and model is None and "method" not in value:
            raise InvalidValueError("speculative_config.model", None, "expected a preset name or a config.json path "
                                    "(or a method that needs none: ngram, mtp, deepseek_mtp)")
        method = value.get("method", "draft_model" if model is not None else None)
        if method in REFUSED_METHODS:
            raise InvalidValueError("speculative_config.method", method, "Medusa heads and MLP speculators: not "
                                    "modelled yet; modelled: " + ", ".join(METHODS))
        if method not in METHODS:
            raise InvalidValueError("speculative_config.method", method, "expected one of " + ", ".join(METHODS))
        if "num_speculative_tokens" not in value:
            raise InvalidValueError("speculative_config.num_speculative_tokens", None, "is required")
        k = value["num_speculative_tokens"]
        check_int("speculative_config.num_speculative_tokens", k, minimum=1)
        if k > MAX_SPECULATIVE_TOKENS:
            raise InvalidValueError("speculative_config.num_speculative_tokens", k,
                                    f"more than {MAX_SPECULATIVE_TOKENS} proposed tokens per step: not modelled")
        if model is not None and (not isinstance(model, str) or not model):
            raise InvalidValueError("speculative_config.model", model, "expected a preset name or a config.json path")
        if method == "ngram":
            if model is not None:
                raise InvalidValueError("speculative_config.model", model, "ngram lookup has no draft model")
            return cls("ngram", k)
        if method in ("mtp", "deepseek_mtp"):
            return cls(method, k, None, model)
        if model is None:
            raise InvalidValueError("speculative_config.model", model, f"{method} needs a preset name or a "
                                    "config.json path" + (" (the head's checkpoint)" if method != "draft_model"
                                                          else ""))
        if method == "draft_model":
            try:
                return cls("draft_model", k, load_model(model), model)
            except UnknownPresetError as err:  # the draft's name, as the config's field
                raise UnknownPresetError(err.kind, err.name, err.known, "speculative_config.model",
                                         hint=err.hint) from None
        try:  # an EAGLE head: its own config where the package can read one, else derived from the target
            return cls(method, k, load_model(model), model)
        except (UnknownPresetError, ConfigError, OSError):
            return cls(method, k, None, model)

    def describe(self) -> str:
        """The proposer in words, for the report (one line)."""
        if self.method == "ngram":
            return "n-gram lookup (no cost)"
        if self.method == "draft_model":
            return f"draft model {self.model}"
        if self.method in ("mtp", "deepseek_mtp"):
            return "the target's MTP module, run k times"
        kind = "EAGLE-3" if self.method == "eagle3" else "EAGLE"
        shape = f"{self.draft.name}'s config" if self.draft is not None else "one layer derived from the target"
        return f"{kind} head {self.model} ({shape})"


def proposer_model(target: ModelConfig, config: SpeculativeConfig) -> tuple[ModelConfig, int] | None:
    """The model one proposal step runs, and its replicated extra matmul parameters [parameters].

    Parameters
    ----------
    target : ModelConfig (the whole target)
    config : SpeculativeConfig

    Returns
    -------
    None for ``ngram``; else (model, extra): each of the k proposal steps is one decode step of ``model``
    (its own weights, KV and attention; a head's model holds the target's embedding and lm_head, read
    each step as the package's decode step reads a model's) plus ``extra`` parameters of matmul that are
    replicated on every GPU (vLLM builds them as plain ``nn.Linear``), at the target's unquantized weight
    dtype (docs/conventions.md, "Speculative decoding"):

    * ``draft_model``: the draft, extra 0;
    * ``mtp`` / ``deepseek_mtp``: :attr:`roofline.ModelConfig.mtp_module` (one decoder layer of the target's
      last-layer shape, MoE where it has MoE layers), extra eh_proj 2h x h and enorm, hnorm
      (:attr:`roofline.ModelConfig.mtp_projection_parameters`). vLLM runs the module k times when k exceeds
      ``num_nextn_predict_layers``; with more modules than one, step j runs module j (same shape);
    * ``eagle``: the head's config when given, else one decoder layer of the target's dense shape (its
      attention, its ``intermediate_size``); extra fc 2h x h + h (EAGLE's fc over [embedding, feature],
      with its bias); ``eagle3``: extra fc 3h x h (the fused hidden states of 3 target layers) and the
      wider q, k, v inputs of its layer (2h: [embedding, fused feature]), h (q + 2 kv) more.

    Raises
    ------
    InvalidValueError
        ``mtp`` on a target without ``num_nextn_predict_layers``; an EAGLE head derived from a MoE,
        hybrid or sliding-window target (give the head's config), each named.
    """
    if config.method == "ngram":
        return None
    h = target.hidden_size
    if config.method in ("mtp", "deepseek_mtp"):
        head = target.mtp_module
        if head is None:
            raise InvalidValueError("speculative_config.method", config.method, f"{target.name} has no MTP "
                                    "module (its config's num_nextn_predict_layers is 0 or absent)")
        return head, target.mtp_projection_parameters
    if config.method == "draft_model":
        assert config.draft is not None
        return config.draft, 0
    head = config.draft
    if head is None:
        if target.is_moe or target.is_hybrid or target.has_sliding_window or target.is_sparse_attention:
            raise InvalidValueError("speculative_config.model", config.model, f"an {config.method} head derived "
                                    f"from {target.name} (MoE, hybrid, sliding-window or sparse attention): not "
                                    "modelled; give the head's config.json")
        head = attrs.evolve(target, name=f"{config.method} head for {target.name}", num_hidden_layers=1,
                            published_parameters=None, tower_parameters=0, num_nextn_predict_layers=0)
    if config.method == "eagle":
        return head, 2 * h * h + h
    return head, 3 * h * h + h * (head.q_width + 2 * head.kv_width)


def expected_tokens_per_step(speculative_tokens: int, acceptance_rate: Any) -> Any:
    """The expected tokens per step per sequence of k proposals [tokens]: one rate or a per-position vector.

    Parameters
    ----------
    speculative_tokens : int in 0 .. 64 [tokens] (k)
    acceptance_rate : a number in [0, 1] (alpha, every position alike), or a sequence of exactly k numbers in
        [0, 1] (alpha_1 .. alpha_k, alpha_i given every proposal before i accepted)

    Returns
    -------
    One rate: (1 - alpha^(k+1)) / (1 - alpha) (:func:`roofline.formulas.speculative_tokens_per_step`, k + 1 at
    alpha = 1, 1 at alpha = 0). A vector: 1 + sum_i prod_{j<=i} alpha_j, the fold T_{k+1} = 1,
    T_i = 1 + alpha_i T_{i+1} of :func:`roofline.formulas.speculative_tokens_from_position`
    (docs/conventions.md, "Speculative decoding"). Exact for ints and Fractions.

    Raises
    ------
    InvalidValueError
        k not an integer >= 0 (``speculative_tokens``); a rate outside [0, 1] or a vector of another length
        than k (``acceptance_rate``).

    Examples
    --------
    >>> from fractions import Fraction
    >>> expected_tokens_per_step(3, (Fraction(9, 10), Fraction(8, 10), Fraction(7, 10)))
    Fraction(781, 250)
    >>> expected_tokens_per_step(2, (Fraction(1, 2), Fraction(1, 2))) == expected_tokens_per_step(2, Fraction(1, 2))
    True
    """
    check_int("speculative_tokens", speculative_tokens, minimum=0)
    if isinstance(acceptance_rate, (tuple, list)):
        if len(acceptance_rate) != speculative_tokens:
            raise InvalidValueError("acceptance_rate", list(acceptance_rate), f"a per-position vector needs "
                                    f"k = {speculative_tokens} rates, one per proposed token")
        tokens: Any = 1
        for rate in reversed(acceptance_rate):
            _check_rate(rate)
            tokens = f.speculative_tokens_from_position.unchecked(acceptance_rate=rate, tokens_after_position=tokens)
        return tokens
    _check_rate(acceptance_rate)
    return f.speculative_tokens_per_step.unchecked(speculative_tokens=speculative_tokens,
                                                   acceptance_rate=acceptance_rate)


def _check_rate(rate: Any) -> None:
    check_number("acceptance_rate", rate)
    if not 0 <= rate <= 1:
        raise InvalidValueError("acceptance_rate", rate, "expected a number in [0, 1] (alpha)")


def _rates_for(acceptance_rate: Any, k: int, override: bool) -> Any:
    """The report's rates, each in (0, 1], for k proposals: one rate as it is; a per-position vector's first k
    where k is given in place of the config's (``override``; at most the vector's length), else all of them."""
    rates = list(acceptance_rate) if isinstance(acceptance_rate, (tuple, list)) else [acceptance_rate]
    for rate in rates:
        check_number("acceptance_rate", rate)
        if isinstance(rate, np.ndarray) or not 0 < rate <= 1:
            raise InvalidValueError("acceptance_rate", rate, "must be in (0, 1]")
    if not isinstance(acceptance_rate, (tuple, list)):
        return acceptance_rate
    if override:
        if k > len(rates):
            raise InvalidValueError("speculative_tokens", k, f"more proposals than the {len(rates)} per-position "
                                    "rates given")
        return tuple(rates[:k])
    return tuple(rates)


def proposer_extra(model: ModelConfig, extra: int) -> tuple[Fraction, int]:
    """What a proposal step's replicated extra matmul adds to ``model``'s decode step: (bytes, FLOPs per token).

    Parameters
    ----------
    model : ModelConfig (the model one proposal step runs, :func:`proposer_model`)
    extra : int >= 0 [parameters] (its replicated extra matmul parameters, :func:`proposer_model`)

    Returns
    -------
    (extra x the model's bytes per parameter [bytes], an exact Fraction; 2 x extra [FLOP/token]): read once and
    done once per token at each proposal step, on every GPU whole (docs/conventions.md, "Speculative decoding";
    the one rule of ``roofline report`` and of the scheduler, :func:`roofline.sim.speculative.head_cost_model`).

    Raises
    ------
    InvalidValueError
        ``extra`` not an integer >= 0.

    Examples
    --------
    >>> from roofline import get_model
    >>> target = get_model("deepseek-v3")
    >>> proposer_extra(target.mtp_module, target.mtp_projection_parameters)
    (Fraction(205549568, 1), 205549568)
    """
    check_int("extra", extra, minimum=0)
    return extra * Fraction(model.weight_bytes_per_parameter), 2 * int(extra)


@attrs.frozen
class ProposerMemory:
    """What a speculative proposer holds on each GPU of the target's tensor-parallel group (exact, SI units).

    docs/conventions.md, "Speculative decoding" (the proposer's memory); made by :func:`proposer_memory`, used by
    :func:`roofline.estimate.kv_budget_for`, :func:`roofline.estimate.kv_capacity` and
    :meth:`roofline.sim.KVPool.for_model` (their ``proposer``).

    Attributes
    ----------
    method : str (the proposer's ``speculative_config`` method)
    weight_bytes : [bytes] >= 0, one GPU's (taken from the KV budget beside the target's share)
    kv_bytes_per_token : [bytes/token] >= 0, one GPU's (the proposer's layers' KV each token holds in the target's
        block pool, beside the target's own)
    """

    method: str
    weight_bytes: Any
    kv_bytes_per_token: Any


def proposer_memory(deployment: Deployment, config: SpeculativeConfig) -> ProposerMemory:
    """The weights and KV bytes per token a proposer adds on each GPU of the target's group (vLLM V1's rule).

    Parameters
    ----------
    deployment : Deployment (the target's: its model and T; no pipeline or expert parallelism)
    config : SpeculativeConfig

    Returns
    -------
    ProposerMemory, one GPU's share at the target's T (vLLM's ``draft_tensor_parallel_size`` defaulting to the
    target's; docs/conventions.md, "Speculative decoding"), exact:

    * ``ngram``: nothing (0, 0);
    * ``draft_model``: the draft's whole share (:meth:`roofline.ModelConfig.per_gpu`: its weights, its own
      embedding and lm_head included) and its KV bytes per token (every layer of the draft);
    * a head (``mtp``, ``deepseek_mtp``, ``eagle``, ``eagle3``): for each module vLLM loads (the target's
      ``num_nextn_predict_layers`` for MTP, 1 for EAGLE) the share of the model one proposal step runs
      (:func:`proposer_model`) without the embedding and lm_head it shares with the target (held once, in the
      target's weights), plus its replicated extra matmul (:func:`proposer_extra`, whole on every GPU); and its
      layer's KV bytes per token.

    Raises
    ------
    InvalidValueError
        Pipeline or expert parallelism (by their fields); as :func:`proposer_model` (``mtp`` on a target without
        MTP modules, a head derived from a MoE, hybrid, sliding-window or sparse-attention target) and
        :func:`check_draft` (a draft the step does not model or that does not fit beside the target).

    Examples
    --------
    >>> from roofline import Deployment, get_accelerator, get_model
    >>> d = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), 4)
    >>> m = proposer_memory(d, SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 4}'))
    >>> m.weight_bytes, m.kv_bytes_per_token  # Llama 3.2 1B's share of 4 GPUs [bytes], [bytes/token]
    (Fraction(618008576, 1), Fraction(8192, 1))
    """
    if not isinstance(deployment, Deployment):
        raise InvalidValueError("deployment", deployment, "expected a roofline.Deployment (the target's)")
    _check_parallelism(deployment)
    found = proposer_model(deployment.model, config)
    if found is None:
        return ProposerMemory(config.method, Fraction(0), Fraction(0))
    model, extra = found
    share = model.per_gpu(deployment.tensor_parallel_size)
    if config.method == "draft_model":
        check_draft(model, deployment)
        return ProposerMemory(config.method, Fraction(share.weight_bytes), Fraction(share.kv_bytes_per_token))
    check_draft(model)
    modules = deployment.model.num_nextn_predict_layers if config.method in ("mtp", "deepseek_mtp") else 1
    by_class = share.weight_bytes_by_class()
    own = Fraction(share.weight_bytes) - by_class["embedding"] - by_class["lm_head"]  # shared with the target
    extra_bytes, _ = proposer_extra(model, extra)
    return ProposerMemory(config.method, modules * (own + extra_bytes), modules * Fraction(share.kv_bytes_per_token))


@attrs.frozen
class SpeculativeStep:
    """One speculative step of ``batch`` sequences at ``context`` tokens beside a plain decode step (SI units).

    Attributes
    ----------
    batch [sequences], context [tokens], speculative_tokens [tokens] (k), acceptance_rate [1],
    method (``draft_model`` or ``ngram``), plain_step_time [s], proposer_time [s],
    step_time [s] (proposer + verification), tokens_per_step [tokens per sequence],
    speedup [1], throughput [tokens/s] (batch x tokens per step / step time),
    plain_throughput [tokens/s], intensity [FLOP/byte] (verification), plain_intensity [FLOP/byte],
    critical_batch and plain_critical_batch [sequences] (None: memory-bound at every batch).
    """

    batch: int
    context: int
    speculative_tokens: int
    acceptance_rate: Any
    method: str
    plain_step_time: Any
    proposer_time: Any
    step_time: Any
    tokens_per_step: Any
    speedup: Any
    throughput: Any
    plain_throughput: Any
    intensity: Any
    plain_intensity: Any
    critical_batch: Any
    plain_critical_batch: Any


def _check_parallelism(deployment: Deployment) -> None:
    """Refuse, by name, the parallelism a speculative step does not model: pipeline stages, expert parallelism."""
    if deployment.pipeline_parallel_size != 1:
        raise InvalidValueError("pipeline_parallel_size", deployment.pipeline_parallel_size,
                                "speculative decoding through pipeline stages: not modelled yet")
    if deployment.expert_parallel_size != 1:
        raise InvalidValueError("enable_expert_parallel", True, "speculative decoding with expert parallelism (the "
                                "all-to-alls of B (k + 1) tokens): not modelled yet")


def _check_deployment(deployment: Any) -> None:
    if not isinstance(deployment, Deployment):
        raise InvalidValueError("deployment", deployment, "expected a roofline.Deployment")
    _check_parallelism(deployment)
    if deployment.estimate is not None:
        raise InvalidValueError("estimate", deployment.estimate.name,
                                "speculative decoding is priced with the bound only: not modelled yet")
    _check_model(deployment.model, "model")


def check_draft(model: ModelConfig, target: Deployment | None = None) -> None:
    """Refuse a draft (or head) model the proposer's steps do not model, as ``speculative_config.model``.

    The one rule for drafts, in ``roofline report`` (:func:`speculative_step`) and the scheduler
    (:meth:`roofline.sim.Speculation.from_config`): sliding-window layers, a hybrid's recurrent state and
    sparse attention are not modelled in a speculative step (docs/conventions.md, "Speculative decoding").
    With ``target`` (the target's Deployment; give it for a ``draft_model``, not for a head, which shares
    the target's vocabulary by construction) a draft is also refused when its ``vocab_size`` differs from
    the target's (vLLM verifies the draft's token ids against the target's), when it has at least as many
    parameters as the target, or when its weights, one GPU's share at the target's T, do not fit beside
    the target's share in one GPU's usable memory (:attr:`roofline.Accelerator.usable_memory` [bytes]).

    Raises
    ------
    InvalidValueError
        Field ``speculative_config.model``, the draft's name, and what is not modelled or does not fit.

    Examples
    --------
    >>> from roofline import get_accelerator, get_model
    >>> check_draft(get_model("llama-3.1-405b"), Deployment(get_model("llama-3.1-8b"), get_accelerator("h100")))
    Traceback (most recent call last):
    ...
    roofline.errors.InvalidValueError: speculative_config.model='llama-3.1-405b': a draft model with at least as many \
parameters as the target (405,853,388,800 >= 8,030,261,248, llama-3.1-8b) cannot speed it up
    """
    field = "speculative_config.model"
    _check_model(model, field)
    if target is None:
        return
    whole = target.model
    if model.vocab_size != whole.vocab_size:
        raise InvalidValueError(field, model.name, f"a draft model's vocabulary ({model.vocab_size:,} tokens) "
                                f"differs from the target's ({whole.vocab_size:,}, {whole.name}): vLLM needs "
                                "one tokenizer and vocabulary for both")
    if model.parameters >= whole.parameters:
        raise InvalidValueError(field, model.name, f"a draft model with at least as many parameters as the target "
                                f"({model.parameters:,} >= {whole.parameters:,}, {whole.name}) cannot speed it up")
    T = target.tensor_parallel_size
    draft_bytes, target_bytes = model.per_gpu(T).weight_bytes, target.share.weight_bytes
    memory = target.accelerator.usable_memory
    if draft_bytes + target_bytes > memory:
        raise InvalidValueError(field, model.name, f"the draft's weights ({float(draft_bytes) / 1e9:.2f} GB a GPU "
                                f"at T = {T}) do not fit beside the target's ({float(target_bytes) / 1e9:.2f} GB) "
                                f"in one {target.accelerator.name}'s {float(memory) / 1e9:.2f} GB")


def _check_model(model: ModelConfig, field: str) -> None:
    """Refuse, by name, what the verification step and the proposer's steps do not model."""
    if model.has_sliding_window:
        raise InvalidValueError(field, model.name, "speculative decoding with sliding-window layers: not "
                                "modelled yet")
    if model.is_hybrid:
        raise InvalidValueError(field, model.name, "speculative decoding of a hybrid model (its recurrent state "
                                "over k + 1 positions): not modelled yet")
    if model.is_sparse_attention:
        raise InvalidValueError(field, model.name, "speculative decoding with sparse attention (index_topk): not "
                                "modelled yet")


def _as_float(terms: dict[str, Any]) -> dict[str, Any]:
    return {n: float(v) for n, v in terms.items()}


def _weights_terms(model: ModelConfig, flops: str, tokens: Any) -> dict[str, Any]:
    """The step formulas' model terms of ``model`` (one GPU's share) for a step of ``tokens`` rows: a MoE
    model's weight bytes are its shared weights plus the experts those tokens touch
    (:func:`roofline.formulas.moe_decode_weight_bytes`, uniform routing). Floats where ``tokens`` is an array."""
    terms: dict[str, Any] = _model_terms(model, flops)
    if isinstance(tokens, np.ndarray):
        terms = _as_float(terms)
    if model.is_moe:
        shared, routed = Fraction(model.shared_weight_bytes), Fraction(model.routed_expert_bytes)
        if isinstance(tokens, np.ndarray):
            shared, routed = float(shared), float(routed)  # type: ignore[assignment]
        terms["weight_bytes"] = f.moe_decode_weight_bytes(
            shared_weight_bytes=shared, routed_expert_bytes=routed, num_experts=model.num_experts,
            experts_per_token=model.num_experts_per_tok, batch=tokens)
    return terms


def _allreduce(model: ModelConfig, d: Deployment, tokens: Any) -> Any:
    """The tensor-parallel all-reduces of a step of ``tokens`` rows through ``model``'s layers [s] (0 at T = 1)."""
    T = d.tensor_parallel_size
    if T == 1:
        return 0
    ar = allreduce_terms(model.per_gpu(T), d.accelerator, T)
    if isinstance(tokens, np.ndarray):
        ar = {n: float(v) if isinstance(v, Fraction) else v for n, v in ar.items()}
    return f.decode_allreduce_time(**ar, batch=tokens)


@attrs.frozen
class _Priced:
    plain: Any
    proposer: Any
    step: Any
    verify_terms: dict[str, Any]
    plain_terms: dict[str, Any]
    hw: dict[str, Any]


def _price(d: Deployment, config: SpeculativeConfig, batch: Any, context: int, k: int) -> _Priced:
    """The plain step, the proposer's k steps and the speculative step of ``batch`` sequences at ``context`` [s].

    One GPU's share of T (the target's and the proposer's, vLLM's ``draft_tensor_parallel_size`` defaulting
    to the target's), each step adding its all-reduces; exact Fractions for an int batch, floats for an array.
    """
    T, flops = d.tensor_parallel_size, d.flops
    share = d.share
    hw: dict[str, Any] = _hardware_terms(d.accelerator, d.model)
    if isinstance(batch, np.ndarray):
        hw = _as_float(hw)
    verify_terms = _weights_terms(share, flops, batch * (k + 1))
    plain_terms = _weights_terms(share, flops, batch)
    proposer: Any = 0
    found = proposer_model(d.model, config)
    if found is not None and k:
        model, extra = found
        check_draft(model, d if config.method == "draft_model" else None)
        terms = _weights_terms(model.per_gpu(T), flops, batch)
        extra_bytes, extra_flops = proposer_extra(model, extra)
        terms["weight_bytes"] = terms["weight_bytes"] + (float(extra_bytes) if isinstance(batch, np.ndarray)
                                                         else extra_bytes)
        terms["flops_per_token"] = terms["flops_per_token"] + extra_flops
        own_hw: dict[str, Any] = _hardware_terms(d.accelerator, model)
        if isinstance(batch, np.ndarray):
            own_hw = _as_float(own_hw)
        proposer = f.stretch_time(steps=k, batch=batch, context_sum=batch * context,
                                  overhead=_allreduce(model, d, batch), **terms, **own_hw)
    step = f.speculative_step_time(**verify_terms, **hw, batch=batch, context=context, speculative_tokens=k,
                                   overhead=_allreduce(d.model, d, batch * (k + 1)), proposer_time=proposer)
    plain = f.step_time(**plain_terms, **hw, batch=batch, context_sum=batch * context,
                        overhead=_allreduce(d.model, d, batch))
    return _Priced(plain, proposer, step, verify_terms, plain_terms, hw)


_INTENSITY = ("weight_bytes", "kv_bytes_per_token", "flops_per_token", "attention_flops_per_token")


def _critical(d: Deployment, context: int, k: int) -> Any:
    """The smallest batch whose step of k + 1 positions per sequence is compute-bound on one GPU [sequences].

    Dense: :func:`roofline.formulas.speculative_critical_batch` (k = 0: the plain critical batch). MoE: the
    weights read grow with the batch (the experts touched), so every batch 1 .. 4,096 is compared in floats,
    its intensity (:func:`roofline.formulas.speculative_intensity`) against the ridge peak / BW; None where none is.
    """
    hw = _hardware_terms(d.accelerator, d.model)
    if not d.model.is_moe:
        terms = _model_terms(d.share, d.flops)
        return f.speculative_critical_batch(**{n: terms[n] for n in _INTENSITY}, context=context,
                                            speculative_tokens=k, peak_flops=hw["peak_flops"],
                                            bandwidth=hw["bandwidth"])
    batches = np.arange(1, MAX_BREAK_EVEN_BATCH + 1, dtype=np.int64)
    terms = _weights_terms(d.share, d.flops, batches * (k + 1))
    intensity = f.speculative_intensity(**{n: terms[n] for n in _INTENSITY}, batch=batches, context=context,
                                        speculative_tokens=k)
    bound = np.flatnonzero(intensity >= float(hw["peak_flops"] / hw["bandwidth"]))
    return int(bound[0]) + 1 if bound.size else None


def speculative_step(deployment: Deployment, config: SpeculativeConfig, *, batch: int, context: int,
                     acceptance_rate: Any, speculative_tokens: int | None = None) -> SpeculativeStep:
    """A speculative step beside a plain decode step, at ``batch`` sequences of ``context`` tokens.

    Parameters
    ----------
    deployment : Deployment (the bound; T GPUs of tensor parallelism, no pipeline or expert parallelism;
        a dense or MoE target without sliding windows, recurrent layers or sparse attention)
    config : SpeculativeConfig (its proposer; its k unless ``speculative_tokens`` is given)
    batch : int >= 1 [sequences]
    context : int >= 1 [tokens] (each sequence's context for its first new token)
    acceptance_rate : (0, 1] (alpha), or a sequence of k rates in (0, 1] (the per-position vector,
        :func:`expected_tokens_per_step`)
    speculative_tokens : int in 0 .. 64 or None (k in place of the config's; 0 is plain decode; with a
        vector at most its length, its first k rates used)

    Returns
    -------
    SpeculativeStep: one GPU's share at T > 1 (its bytes and FLOPs; the steps add the all-reduces of the
    B (k + 1) verified rows, of the B plain rows, of the proposer's B rows per proposal step). A MoE
    target's verification reads the experts B (k + 1) tokens touch, its plain step those B tokens touch
    (docs/conventions.md, "Speculative decoding"); the speed-up is tokens per step x plain step / step.

    Raises
    ------
    InvalidValueError
        Each bad argument named (a vector of another length than the config's k, or shorter than
        ``speculative_tokens``); pipeline or expert parallelism, an estimate, sliding windows, recurrent
        layers or sparse attention (target or proposer), ``mtp`` on a target without MTP modules: not
        modelled, refused by name; a draft model of another vocabulary than the target's, with at least its
        parameters, or whose weights do not fit beside the target's (:func:`check_draft`).

    Examples
    --------
    >>> from fractions import Fraction
    >>> from roofline import Deployment, get_accelerator, get_model
    >>> d = Deployment(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    >>> c = SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 3}')
    >>> s = speculative_step(d, c, batch=1, context=1000, acceptance_rate=Fraction(7, 10))
    >>> round(float(s.tokens_per_step), 4), round(float(s.speedup), 3)
    (2.533, 2.533)
    """
    _check_deployment(deployment)
    check_int("batch", batch, minimum=1)
    check_int("context", context, minimum=1)
    k = config.num_speculative_tokens if speculative_tokens is None else speculative_tokens
    check_int("speculative_tokens", k, minimum=0)
    if k > MAX_SPECULATIVE_TOKENS:
        raise InvalidValueError("speculative_tokens", k, f"more than {MAX_SPECULATIVE_TOKENS}: not modelled")
    d = deployment
    rates = _rates_for(acceptance_rate, k, speculative_tokens is not None)
    priced = _price(d, config, batch, context, k)
    tokens = expected_tokens_per_step(k, rates)
    vt, pt = priced.verify_terms, priced.plain_terms
    return SpeculativeStep(
        batch=batch, context=context, speculative_tokens=k, acceptance_rate=acceptance_rate, method=config.method,
        plain_step_time=priced.plain, proposer_time=priced.proposer, step_time=priced.step, tokens_per_step=tokens,
        speedup=tokens * priced.plain / priced.step,
        throughput=batch * tokens / priced.step, plain_throughput=batch / priced.plain,
        intensity=f.speculative_intensity(**{n: vt[n] for n in _INTENSITY}, batch=batch, context=context,
                                          speculative_tokens=k),
        plain_intensity=f.arithmetic_intensity(**{n: pt[n] for n in _INTENSITY}, batch=batch, context=context),
        critical_batch=_critical(d, context, k), plain_critical_batch=_critical(d, context, 0),
    )


def break_even_batch(deployment: Deployment, config: SpeculativeConfig, *, context: int, acceptance_rate: Any,
                     max_batch: int = MAX_BREAK_EVEN_BATCH) -> int | None:
    """The smallest batch at which speculation stops paying: its speed-up at most 1 [sequences].

    Parameters
    ----------
    deployment, config, context, acceptance_rate : as :func:`speculative_step`
    max_batch : int in 1 .. 2^20 [sequences] (the largest batch scanned; default 4,096)

    Returns
    -------
    int, or None where the speed-up stays above 1 up to ``max_batch``. Found by scanning every
    batch 1 .. max_batch, no monotonicity assumed: every batch in floats (the
    formulas broadcast), and a batch whose float speed-up lies within 1e-9 of 1 decided exactly.

    Raises
    ------
    InvalidValueError
        As :func:`speculative_step`; ``max_batch`` not an integer >= 1.

    Examples
    --------
    >>> from fractions import Fraction
    >>> from roofline import Deployment, get_accelerator, get_model
    >>> d = Deployment(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    >>> c = SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 4}')
    >>> break_even_batch(d, c, context=1000, acceptance_rate=Fraction(7, 10))
    1126
    >>> c = SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 3}')
    >>> break_even_batch(d, c, context=1000, acceptance_rate=Fraction(7, 10)) is None  # the KV reads dominate
    True
    """
    check_int("max_batch", max_batch, minimum=1)
    if max_batch > 2**20:
        raise InvalidValueError("max_batch", max_batch, "more than 2^20 batches to scan")
    exact = speculative_step(deployment, config, batch=1, context=context, acceptance_rate=acceptance_rate)
    if exact.speedup <= 1:
        return 1
    # every batch at once in floats, then each batch the floats cannot tell from 1 decided exactly
    batches = np.arange(1, max_batch + 1, dtype=np.int64)
    k = config.num_speculative_tokens
    priced = _price(deployment, config, batches, context, k)
    tokens = float(exact.tokens_per_step)
    speedup = tokens * priced.plain / priced.step
    for index in np.flatnonzero(speedup <= 1 + _CLOSE):
        batch = int(index) + 1
        if speedup[index] < 1 - _CLOSE or speculative_step(
                deployment, config, batch=batch, context=context, acceptance_rate=acceptance_rate).speedup <= 1:
            return batch
    return None


def best_speculative_tokens(deployment: Deployment, config: SpeculativeConfig, *, batch: int, context: int,
                            acceptance_rate: Any, max_tokens: int = 16) -> int:
    """The k in 0 .. max_tokens that maximises the speed-up at this batch and context [tokens].

    Parameters
    ----------
    deployment, config, batch, context, acceptance_rate : as :func:`speculative_step`
    max_tokens : int in 1 .. 64 [tokens] (default 16; with a per-position vector, at most its length: its first
        k rates for each k compared)

    Returns
    -------
    int: the smallest k with the largest speed-up (0: speculation does not pay here).

    Raises
    ------
    InvalidValueError
        As :func:`speculative_step`; ``max_tokens`` not an integer >= 1.

    Examples
    --------
    >>> from fractions import Fraction
    >>> from roofline import Deployment, get_accelerator, get_model
    >>> d = Deployment(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    >>> c = SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 4}')
    >>> best_speculative_tokens(d, c, batch=1, context=1000, acceptance_rate=Fraction(7, 10))
    3
    """
    check_int("max_tokens", max_tokens, minimum=1)
    if max_tokens > MAX_SPECULATIVE_TOKENS:
        raise InvalidValueError("max_tokens", max_tokens, f"more than {MAX_SPECULATIVE_TOKENS}: not modelled")
    if isinstance(acceptance_rate, (tuple, list)):
        max_tokens = min(max_tokens, len(acceptance_rate))
    speedups = [speculative_step(deployment, config, batch=batch, context=context, acceptance_rate=acceptance_rate,
                                 speculative_tokens=k).speedup for k in range(max_tokens + 1)]
    return max(range(max_tokens + 1), key=lambda k: (speedups[k], -k))

