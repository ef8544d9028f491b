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
* ``eagle``, ``eagle3``, ``medusa``, ``mlp_speculator``, ``mtp``, ``deepseek_mtp``: a head on the target,
  refused by name (not modelled yet).

All numbers are the roofline bound (no overhead) in SI units, exact Fractions for the presets.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import numpy as np

from . import formulas as f
from ._checks import check_int
from .deployment import Deployment
from .errors import InvalidValueError
from .estimate import _hardware_terms, _model_terms
from .models import ModelConfig, load_model

__all__ = ["SpeculativeConfig", "SpeculativeStep", "speculative_step", "break_even_batch",
           "best_speculative_tokens", "METHODS", "HEAD_METHODS", "MAX_SPECULATIVE_TOKENS", "MAX_BREAK_EVEN_BATCH"]

#: methods modelled: a draft model's own decode steps, or n-gram lookup at no cost
METHODS = ("draft_model", "ngram")
#: vLLM's methods that put a head on the target (EAGLE, Medusa, MTP): refused by name, not modelled yet
HEAD_METHODS = ("eagle", "eagle3", "medusa", "mlp_speculator", "mtp", "deepseek_mtp")
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
    method : "draft_model" or "ngram"
    num_speculative_tokens : int in 1 .. 64 [tokens] (k, proposed per sequence per step)
    draft : ModelConfig or None (the draft model for ``draft_model``; None for ``ngram``)
    """

    method: str
    num_speculative_tokens: int
    draft: ModelConfig | None = None

    @classmethod
    def parse(cls, value: str | dict[str, Any]) -> SpeculativeConfig:
        """The config from its JSON text (or the decoded dict).

        Parameters
        ----------
        value : str or dict
            ``{"method": ..., "model": ..., "num_speculative_tokens": k}``; ``method`` defaults to
            ``draft_model`` when ``model`` is given (vLLM's rule), ``model`` is a preset name or a
            config.json path (:func:`roofline.load_model`).

        Returns
        -------
        SpeculativeConfig

        Raises
        ------
        InvalidValueError
            Text that is not a JSON object, a field vLLM has that is not modelled here or one it does
            not have, a method unknown or not modelled (each named: ``speculative_config.<field>``),
            k not an integer in 1 .. 64, a draft model missing for ``draft_model`` or given for ``ngram``.
        UnknownPresetError, ConfigError
            A draft model that is neither a preset nor a readable config.

        Examples
        --------
        >>> c = SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 4}')
        >>> c.method, c.num_speculative_tokens, c.draft.name
        ('draft_model', 4, 'llama-3.2-1b')
        """
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise InvalidValueError("speculative_config", value, f"is not JSON ({error.msg} at column "
                                        f"{error.colno})") from None
        if not isinstance(value, dict):
            raise InvalidValueError("speculative_config", value, "expected a JSON object with method, model and "
                                    "num_speculative_tokens")
        for key in value:
            if key not in _FIELDS:
                raise InvalidValueError(f"speculative_config.{key}", value[key],
                                        f"not modelled (the fields modelled are {', '.join(_FIELDS)})")
        model = value.get("model")
        method = value.get("method", "draft_model" if model is not None else None)
        if method in HEAD_METHODS:
            raise InvalidValueError("speculative_config.method", method, "a head on the target (EAGLE, Medusa, "
                                    "MTP): not modelled yet; modelled: " + ", ".join(METHODS))
        if method not in METHODS:
            raise InvalidValueError("speculative_config.method", method, "expected one of " + ", ".join(METHODS))
        if "num_speculative_tokens" not in value:
            raise InvalidValueError("speculative_config.num_speculative_tokens", None, "is required")
        k = value["num_speculative_tokens"]
        check_int("speculative_config.num_speculative_tokens", k, minimum=1)
        if k > MAX_SPECULATIVE_TOKENS:
            raise InvalidValueError("speculative_config.num_speculative_tokens", k,
                                    f"more than {MAX_SPECULATIVE_TOKENS} proposed tokens per step: not modelled")
        if method == "ngram":
            if model is not None:
                raise InvalidValueError("speculative_config.model", model, "ngram lookup has no draft model")
            return cls("ngram", k)
        if not isinstance(model, str) or not model:
            raise InvalidValueError("speculative_config.model", model, "draft_model needs a preset name or a "
                                    "config.json path")
        return cls("draft_model", k, load_model(model))


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


def _check_deployment(deployment: Any) -> None:
    if not isinstance(deployment, Deployment):
        raise InvalidValueError("deployment", deployment, "expected a roofline.Deployment")
    if deployment.tensor_parallel_size != 1:
        raise InvalidValueError("tensor_parallel_size", deployment.tensor_parallel_size,
                                "speculative decoding under tensor parallelism: not modelled yet")
    if deployment.estimate is not None:
        raise InvalidValueError("estimate", deployment.estimate.name,
                                "speculative decoding is priced with the bound only: not modelled yet")
    _check_dense(deployment.model, "model")


def _check_dense(model: ModelConfig, field: str) -> None:
    if model.is_moe:
        raise InvalidValueError(field, model.name, "speculative decoding of a mixture of experts (the experts a "
                                "step of B (k + 1) tokens touches): not modelled yet")
    if model.has_sliding_window:
        raise InvalidValueError(field, model.name, "speculative decoding with sliding-window layers: not "
                                "modelled yet")


def _proposer_time(d: Deployment, config: SpeculativeConfig, batch: Any, context: int, k: int) -> Any:
    """The proposer's time for the batch's k proposals [s]: 0 for n-gram, else the draft's k decode steps."""
    if config.method == "ngram":
        return 0
    assert config.draft is not None
    _check_dense(config.draft, "speculative_config.model")
    terms: dict[str, Any] = _model_terms(config.draft, d.flops)
    hw: dict[str, Any] = _hardware_terms(d.accelerator, config.draft)
    if isinstance(batch, np.ndarray):
        terms, hw = {n: float(v) for n, v in terms.items()}, {n: float(v) for n, v in hw.items()}
    return f.stretch_time(steps=k, batch=batch, context_sum=batch * context, overhead=0,
                          **terms, **hw)


def speculative_step(deployment: Deployment, config: SpeculativeConfig, *, batch: int, context: int,
                     acceptance_rate: Any, speculative_tokens: int | None = None) -> SpeculativeStep:
    """A speculative step beside a plain decode step, at ``batch`` sequences of ``context`` tokens.

    Parameters
    ----------
    deployment : Deployment (one GPU, the bound; a dense target without sliding windows)
    config : SpeculativeConfig (its proposer; its k unless ``speculative_tokens`` is given)
    batch : int >= 1 [sequences]
    context : int >= 1 [tokens] (each sequence's context for its first new token)
    acceptance_rate : (0, 1] (alpha)
    speculative_tokens : int in 0 .. 64 or None (k in place of the config's; 0 is plain decode)

    Returns
    -------
    SpeculativeStep

    Raises
    ------
    InvalidValueError
        Each bad argument named; T > 1, an estimate, a mixture of experts or sliding windows
        (target or draft): not modelled yet, refused by name.

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
    terms = _model_terms(d.model, d.flops)
    hw = _hardware_terms(d.accelerator, d.model)
    proposer = _proposer_time(d, config, batch, context, k)
    kw = dict(terms, **hw, batch=batch, context=context, speculative_tokens=k, overhead=0, proposer_time=proposer)
    tokens = f.speculative_tokens_per_step(speculative_tokens=k, acceptance_rate=acceptance_rate)
    step = f.speculative_step_time(**kw)
    plain = f.step_time(**terms, **hw, batch=batch, context_sum=batch * context, overhead=0)
    model_kw = {n: terms[n] for n in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                      "attention_flops_per_token")}
    crit = dict(model_kw, context=context, peak_flops=hw["peak_flops"], bandwidth=hw["bandwidth"])
    return SpeculativeStep(
        batch=batch, context=context, speculative_tokens=k, acceptance_rate=acceptance_rate, method=config.method,
        plain_step_time=plain, proposer_time=proposer, step_time=step, tokens_per_step=tokens,
        speedup=f.speculative_speedup(**kw, acceptance_rate=acceptance_rate),
        throughput=batch * tokens / step, plain_throughput=batch / plain,
        intensity=f.speculative_intensity(**model_kw, batch=batch, context=context, speculative_tokens=k),
        plain_intensity=f.arithmetic_intensity(**model_kw, batch=batch, context=context),
        critical_batch=f.speculative_critical_batch(**crit, speculative_tokens=k),
        plain_critical_batch=f.critical_batch(**crit),
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
    batches = np.arange(1, max_batch + 1, dtype=float)
    k, d = config.num_speculative_tokens, deployment
    terms = {n: float(v) for n, v in _model_terms(d.model, d.flops).items()}
    hw = {n: float(v) for n, v in _hardware_terms(d.accelerator, d.model).items()}
    proposer = _proposer_time(d, config, batches, context, k)
    speedup = f.speculative_speedup(**terms, **hw, batch=batches, context=context, speculative_tokens=k, overhead=0,
                                    proposer_time=proposer, acceptance_rate=float(acceptance_rate))
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
    max_tokens : int in 1 .. 64 [tokens] (default 16)

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
    speedups = [speculative_step(deployment, config, batch=batch, context=context, acceptance_rate=acceptance_rate,
                                 speculative_tokens=k).speedup for k in range(max_tokens + 1)]
    return max(range(max_tokens + 1), key=lambda k: (speedups[k], -k))

