"""Speculative decoding in continuous batching: the accepted tokens of each step and the proposer's cost.

:class:`Speculation` states a run's speculative decoding (k proposed tokens per sequence per
step, the acceptance rate alpha, how accepted counts are made, the proposer's cost model);
:func:`roofline.sim.serve_continuous` takes it as ``speculative=``. The scheduler
(:mod:`roofline.sim.continuous`) keeps each running sequence's own decode-step count d and
asks the run's :class:`_Drafts` for A_i(d), the tokens its first d steps made (before the cut at
its output length), and for the proposer's time of a step.

Conventions: docs/conventions.md, "Speculative decoding in the scheduler": a step of B rows at
context sum S is the mixed step of B chunks of k + 1 tokens after S - B cached ones plus the
proposer's k decode steps at context sums S, S + B, .., S + (k - 1) B; accepted counts are
seeded draws (the default) or the exact expectation tau = (1 - alpha^(k+1)) / (1 - alpha) per
step carried in whole tokens (Leviathan, Kalman and Matias, ICML 2023); with a per-position vector
alpha_1 .. alpha_k, draw i against alpha_i and tau = 1 + sum_i prod_{j<=i} alpha_j.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import attrs
import numpy as np

from .._checks import check_int, check_number
from ..errors import InvalidValueError
from ..speculative import MAX_SPECULATIVE_TOKENS as _MAX_K  # the most proposed tokens per step modelled
from .cost import CostModel, RooflineCostModel, stretch_terms

__all__ = ["Speculation", "ACCEPTANCE_MODES", "head_cost_model"]

#: how accepted counts are made: seeded draws (the default) or the exact expectation in whole tokens
ACCEPTANCE_MODES = ("seeded", "expectation")
#: the largest denominator a seeded draw uses as it is (numpy's int64 draws); a larger one is rounded to 2^-62
_DRAW_SCALE = 2**62


def _alphas(value: Any) -> Fraction | tuple[Fraction, ...]:
    """One rate, or a per-position vector (a tuple or list of rates; its length is checked against k later)."""
    if isinstance(value, (tuple, list)):
        if not value:
            raise InvalidValueError("acceptance_rate", value, "expected one number in [0, 1] or k of them")
        return tuple(_alpha(v) for v in value)
    return _alpha(value)


def _alpha(value: Any) -> Fraction:
    if isinstance(value, bool) or isinstance(value, np.ndarray):
        raise InvalidValueError("acceptance_rate", value, "expected one number in [0, 1]")
    check_number("acceptance_rate", value)
    try:
        alpha = Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidValueError("acceptance_rate", value, "expected one number in [0, 1]") from None
    if not 0 <= alpha <= 1:
        raise InvalidValueError("acceptance_rate", value, "expected a number in [0, 1] (alpha)")
    return alpha


@attrs.frozen
class Speculation:
    """A run's speculative decoding (docs/conventions.md, "Speculative decoding in the scheduler").

    Parameters
    ----------
    num_speculative_tokens : int in 1 .. 64 [tokens] (k, vLLM's name)
    acceptance_rate : number in [0, 1] (alpha; kept as an exact Fraction, a float by its binary value; 0: every
        proposal rejected, one token per step), or a tuple or list of k such numbers (the per-position vector
        alpha_1 .. alpha_k, alpha_i given every proposal before i accepted; kept as a tuple of Fractions, or as
        the one Fraction where all k are equal: docs/conventions.md, "Speculative decoding")
    proposer : CostModel or None
        The draft model's (or a head's, :func:`head_cost_model`) cost model (its k
        decode steps per step are priced by its ``decode_time``); None: a proposer that costs nothing
        (``ngram``).
    mode : {"seeded", "expectation"}, default "seeded"
        ``seeded``: each step's accepted tokens drawn from a generator seeded by (seed, request id);
        ``expectation``: floor(d tau) tokens after d steps, tau the expected tokens per step.
    seed : int >= 0, default 0 (used by ``seeded``)
    method : str, default "draft_model" when a proposer is given, else "ngram" (reported only)
    model : str or None (the draft model's name, reported only)
    memory : roofline.speculative.ProposerMemory or None (what the proposer holds on each GPU beside the target:
        its weights and KV bytes per token, :func:`roofline.speculative.proposer_memory`; set by
        :meth:`from_config` given the target; None: not known). The scheduler does not read it: the run's pool is
        the caller's, built with it as ``KVPool.for_model(d, budget=kv_budget_for(d, proposer=memory),
        proposer=memory)`` (``roofline simulate`` does; docs/conventions.md, "Speculative decoding in the
        scheduler")

    Raises
    ------
    InvalidValueError
        Each bad field named: k not an integer in 1 .. 64, alpha outside [0, 1] (0 is taken here, the
        limit of every proposal rejected; the command line's ``--acceptance-rate`` is in (0, 1]) or a vector of
        another length than k (``acceptance_rate``), an unknown mode,
        a negative or non-integer seed, a proposer that is not a cost model.

    Examples
    --------
    >>> s = Speculation(num_speculative_tokens=2, acceptance_rate=Fraction(1, 2), mode="expectation")
    >>> s.tokens_per_step, s.method
    (Fraction(7, 4), 'ngram')
    >>> Speculation(num_speculative_tokens=2, acceptance_rate=[Fraction(1, 2), Fraction(1, 4)]).tokens_per_step
    Fraction(13, 8)
    """

    num_speculative_tokens: int
    acceptance_rate: Any = attrs.field(converter=_alphas)
    proposer: Any = None
    mode: str = "seeded"
    seed: int = 0
    method: str = attrs.field(default=attrs.Factory(lambda s: "ngram" if s.proposer is None else "draft_model",
                                                    takes_self=True))
    model: str | None = None
    memory: Any = None

    def __attrs_post_init__(self) -> None:
        k = self.num_speculative_tokens
        check_int("num_speculative_tokens", k, minimum=1)
        if k > _MAX_K:
            raise InvalidValueError("num_speculative_tokens", k, f"more than {_MAX_K} proposed tokens per step: "
                                    "not modelled")
        object.__setattr__(self, "num_speculative_tokens", int(k))
        rates = self.acceptance_rate
        if isinstance(rates, tuple):
            if len(rates) != k:
                raise InvalidValueError("acceptance_rate", [float(r) for r in rates], f"a per-position vector "
                                        f"needs k = {k} rates, one per proposed token")
            if len(set(rates)) == 1:  # k equal rates are that one rate: the same tokens per step, the same draws
                object.__setattr__(self, "acceptance_rate", rates[0])
        if not isinstance(self.mode, str) or self.mode not in ACCEPTANCE_MODES:
            raise InvalidValueError("acceptance_mode", self.mode, f"expected one of {', '.join(ACCEPTANCE_MODES)}")
        check_int("seed", self.seed, minimum=0)
        if self.proposer is not None and (isinstance(self.proposer, type) or not isinstance(self.proposer, CostModel)):
            raise InvalidValueError("proposer", self.proposer, "expected the draft model's cost model "
                                    "(roofline.sim.RooflineCostModel) or None (ngram)")
        if not isinstance(self.method, str):
            raise InvalidValueError("method", self.method, "expected a string")
        if self.model is not None and not isinstance(self.model, str):
            raise InvalidValueError("model", self.model, "expected the draft model's name or None")
        from ..speculative import ProposerMemory

        if self.memory is not None and not isinstance(self.memory, ProposerMemory):
            raise InvalidValueError("memory", self.memory, "expected a roofline.speculative.ProposerMemory or None")

    @classmethod
    def from_config(cls, config: Any, accelerator: Any, *, acceptance_rate: Any, mode: str = "seeded",
                    seed: int = 0, exact: bool = True, estimate: Any = None, target: Any = None) -> Speculation:
        """The speculation of vLLM's ``--speculative-config`` on ``accelerator``.

        Parameters
        ----------
        config : roofline.speculative.SpeculativeConfig, or its JSON text
        accelerator : Accelerator (the draft runs there, the bound: its ``RooflineCostModel.for_model``)
        acceptance_rate, mode, seed : as the class
        exact : bool, default True (the draft's cost model in Fractions; False: floats, for a float run)
        estimate : str, EngineProfile or None (the draft priced as the target is: the bound, or this profile)
        target : roofline.Deployment or None (the target's deployment; needed by a head on the target, which runs
            at its T with its estimate: :func:`head_cost_model`; a draft model given it runs
            at the target's T too, its accelerator, FLOPs convention and estimate, each step adding its
            all-reduces, as ``roofline report`` prices it: vLLM's ``draft_tensor_parallel_size`` defaults to the
            target's; without it, on one ``accelerator`` GPU)

        Returns
        -------
        Speculation (with ``target``, its ``memory``: :func:`roofline.speculative.proposer_memory` of the target)

        Raises
        ------
        InvalidValueError
            As :meth:`roofline.speculative.SpeculativeConfig.parse` and the class; a head on the target
            (``mtp``, ``deepseek_mtp``, ``eagle``, ``eagle3``) without ``target`` (field ``target``), or as
            :func:`head_cost_model`; a draft the speculative step does not model (sliding
            windows, recurrent state, sparse attention: :func:`roofline.speculative.check_draft`, the rule
            ``roofline report`` applies), as ``speculative_config.model``; with ``target``, also a draft of
            another vocabulary than the target's, with at least its parameters, or whose weights do not fit
            beside the target's on one GPU (the same rule).
        """
        from ..deployment import Deployment
        from ..speculative import HEAD_METHODS, SpeculativeConfig, check_draft, proposer_memory

        if not isinstance(config, SpeculativeConfig):
            config = SpeculativeConfig.parse(config)
        proposer = None
        if config.method in HEAD_METHODS:
            if not isinstance(target, Deployment):
                raise InvalidValueError("target", target, f"a head on the target ({config.method}) needs the "
                                        "target's roofline.Deployment")
            proposer = head_cost_model(target, config, exact=exact)
        elif config.draft is not None:
            check_draft(config.draft, target if isinstance(target, Deployment) else None)
            if isinstance(target, Deployment):  # at the target's T, as the report prices it (its all-reduces too)
                proposer = RooflineCostModel.for_deployment(Deployment(
                    config.draft, target.accelerator, target.tensor_parallel_size, flops=target.flops,
                    estimate=target.estimate), exact=exact)
            else:
                proposer = RooflineCostModel.for_model(config.draft, accelerator, exact=exact, estimate=estimate)
        memory = proposer_memory(target, config) if isinstance(target, Deployment) else None
        return cls(config.num_speculative_tokens, acceptance_rate, proposer, mode, seed, config.method,
                   config.model if config.draft is None else config.draft.name, memory)

    @property
    def tokens_per_step(self) -> Any:
        """The expected tokens per step per sequence, (1 - alpha^(k+1)) / (1 - alpha) [tokens]
        (:func:`roofline.formulas.speculative_tokens_per_step`; 1 at alpha = 0), or 1 + sum_i prod_{j<=i} alpha_j
        of a per-position vector (:func:`roofline.speculative.expected_tokens_per_step`), an exact Fraction."""
        from ..speculative import expected_tokens_per_step

        return Fraction(expected_tokens_per_step(self.num_speculative_tokens, self.acceptance_rate))

    def accepted(self, request_id: int, steps: int) -> list[int]:
        """A_i(0 .. steps): the tokens request ``request_id``'s first d decode steps make, before the cut at its
        output length [tokens]; A(0) = 0, each step adding 1 .. k + 1.

        ``request_id`` and ``steps`` are integers >= 0. A seeded draw accepts a proposal when a uniform integer
        below alpha's denominator is below its numerator (exactly alpha); an alpha whose denominator exceeds
        2^62 (a long decimal such as 0.12345678901234567890123, or 1e-30) is drawn as floor(alpha 2^62) / 2^62,
        within 2^-62 of it (docs/conventions.md, "Speculative decoding in the scheduler").

        Raises
        ------
        InvalidValueError
            ``request_id`` or ``steps`` not an integer >= 0, named.
        """
        check_int("request_id", request_id, minimum=0)
        check_int("steps", steps, minimum=0)
        request_id, steps = int(request_id), int(steps)
        k = self.num_speculative_tokens
        if self.mode == "expectation":
            tau = self.tokens_per_step
            return [(d * tau.numerator) // tau.denominator for d in range(steps + 1)]
        alpha = self.acceptance_rate
        rng = np.random.default_rng([self.seed, request_id])
        if alpha == 1:
            made = np.full(steps, k + 1, dtype=np.int64)
        elif isinstance(alpha, tuple):  # position i against its own alpha_i, each to its own denominator
            drawn = [_drawn(rate) for rate in alpha]
            below = np.array([b for b, _ in drawn], dtype=np.int64)
            scale = np.array([q for _, q in drawn], dtype=np.int64)
            accept = rng.integers(0, scale, size=(steps, k), dtype=np.int64) < below
            made = 1 + np.cumprod(accept, axis=1).sum(axis=1)  # proposal i counts only if all before it did
        else:
            below_one, scale_one = _drawn(alpha)
            accept = rng.integers(0, scale_one, size=(steps, k), dtype=np.int64) < below_one
            made = 1 + np.cumprod(accept, axis=1).sum(axis=1)
        return [0, *np.cumsum(made).tolist()]


def _drawn(alpha: Fraction) -> tuple[int, int]:
    """(numerator, denominator) a seeded draw compares against: alpha's own, or past int64's draws alpha to
    2^-62, rounded down (docs/conventions.md, "Speculative decoding in the scheduler")."""
    if alpha.denominator > _DRAW_SCALE:
        return alpha.numerator * _DRAW_SCALE // alpha.denominator, _DRAW_SCALE
    return alpha.numerator, alpha.denominator


class _Drafts:
    """A run's speculation state: each request's accepted-token sums, the proposer's clock, the counts reported."""

    def __init__(self, spec: Speculation, ids: Any) -> None:
        self.spec = spec
        self.k = spec.num_speculative_tokens
        self.ids = ids  # index -> request id (the seed's second part)
        self.sums: dict[int, list[int]] = {}
        self.proposer: Any = spec.proposer  # seconds; a _TickCostModel on the stretch clock
        self.sequence_steps = 0  # rows verified
        self.tokens = 0  # tokens those rows made (cut at each output length)

    def constants(self, max_tokens: int = 1) -> list[Any]:
        """The proposer's exact terms [s], for the run's tick clock (it then covers the proposer's steps).

        A mixture-of-experts proposer's weights depend on a step's tokens: its terms then hold
        1 / the common denominator of its weights up to ``max_tokens`` tokens (the run's clock
        covers every proposal step of at most that many rows; a step of more starts the run again on a
        finer clock, :class:`roofline.sim.stretch.ClockTooCoarse`)."""
        if self.proposer is None:
            return []
        terms = stretch_terms(self.proposer)
        if isinstance(terms, str):
            raise InvalidValueError("proposer", self.proposer, f"the stretch clock cannot price it: {terms}")
        if terms.constant_weights:
            return list(terms.constants())
        return [*terms.constants(), Fraction(1, terms.weights_denominator(max_tokens))]

    def on_ticks(self, costs: Any, times: list[Any], max_tokens: int = 1) -> None:
        """Price the proposer in ticks of ``costs``'s clock (its terms, :meth:`constants` of the same
        ``max_tokens``, were among the clock's values)."""
        if self.proposer is None:
            return
        from .clock import _TickCostModel
        from .stretch import TickCosts

        own = TickCosts.build(self.proposer, [Fraction(1, costs.clock.denominator), *times], max_tokens=max_tokens)
        assert own is not None and own.clock.denominator == costs.clock.denominator
        self.proposer = _TickCostModel(self.spec.proposer, own)

    def sums_of(self, i: int, output_tokens: int) -> list[int]:
        """A_i(0 .. O - 1) of request index i (drawn once, up front: at most O - 1 decode steps)."""
        sums = self.sums.get(i)
        if sums is None:
            sums = self.sums[i] = self.spec.accepted(self.ids(i), max(output_tokens - 1, 0))
        return sums

    def proposer_time(self, batch: int, context_sum: int) -> Any:
        """The proposer's time for a step of ``batch`` rows at context sum S: k draft decode steps at S + j B."""
        if self.proposer is None:
            return 0
        decode = self.proposer.decode_time
        total = decode(batch, context_sum)
        for j in range(1, self.k):
            total = total + decode(batch, context_sum + j * batch)
        return total

    def summary(self) -> dict[str, Any]:
        """``options["speculative"]`` (docs/conventions.md, "Speculative decoding in the scheduler")."""
        spec, rows = self.spec, self.sequence_steps
        accepted = self.tokens - rows
        return {  # JSON-ready: the ratios as floats (the counts behind them are exact)
            "method": spec.method, "model": spec.model, "num_speculative_tokens": self.k,
            "acceptance_rate": ([float(r) for r in spec.acceptance_rate] if isinstance(spec.acceptance_rate, tuple)
                                else float(spec.acceptance_rate)),
            "acceptance_mode": spec.mode, "seed": spec.seed if spec.mode == "seeded" else None,
            "sequence_steps": rows, "tokens": self.tokens, "proposed_tokens": self.k * rows,
            "accepted_tokens": accepted,
            "tokens_per_step": self.tokens / rows if rows else None,
            "achieved_acceptance": accepted / (self.k * rows) if rows else None,
            "expected_tokens_per_step": float(spec.tokens_per_step),
        }


def head_cost_model(deployment: Any, config: Any, *, exact: bool = True) -> RooflineCostModel:
    """The scheduler's cost model of a head on the target (``mtp``, ``deepseek_mtp``, ``eagle``, ``eagle3``).

    Parameters
    ----------
    deployment : Deployment (the target's: its accelerator, T, FLOPs convention and engine profile; no pipeline
        or expert parallelism)
    config : SpeculativeConfig (a head method)
    exact : bool, default True (False: floats, for a float run)

    Returns
    -------
    roofline.sim.RooflineCostModel: one proposal step is its ``decode_time(B, S)`` [s], the decode step of the
    model :func:`proposer_model` gives (one GPU's share at the target's T, its own layers' all-reduces of B
    rows, a MoE head's experts B tokens touch) with its weight bytes and FLOPs per token raised by
    :func:`proposer_extra` (docs/conventions.md, "Speculative decoding in the scheduler"); priced as
    :func:`speculative_step` prices the head's steps.

    Raises
    ------
    InvalidValueError
        A method that is not a head's (``speculative_config.method``); pipeline or expert parallelism (by their
        fields); as :func:`proposer_model` and :func:`check_draft` (a target without MTP modules, a head derived
        from a MoE, hybrid, sliding-window or sparse-attention target).

    Examples
    --------
    >>> from roofline import Deployment, get_accelerator, get_model
    >>> from roofline.speculative import SpeculativeConfig
    >>> d = Deployment(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))
    >>> c = SpeculativeConfig.parse('{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", '
    ...                             '"num_speculative_tokens": 3}')
    >>> head = head_cost_model(d, c)
    >>> round(float(head.decode_time(1, 1000)) * 1e6, 2)  # [us]
    778.74
    """
    from ..deployment import Deployment
    from ..speculative import HEAD_METHODS, _check_parallelism, check_draft, proposer_extra, proposer_model

    if not isinstance(deployment, Deployment):
        raise InvalidValueError("deployment", deployment, "expected a roofline.Deployment (the target's)")
    if config.method not in HEAD_METHODS:
        raise InvalidValueError("speculative_config.method", config.method, "expected a head on the target: "
                                + ", ".join(HEAD_METHODS))
    _check_parallelism(deployment)
    found = proposer_model(deployment.model, config)
    assert found is not None  # a head's method
    model, extra = found
    check_draft(model)
    own = Deployment(model, deployment.accelerator, deployment.tensor_parallel_size, flops=deployment.flops,
                     estimate=deployment.estimate)
    cost = RooflineCostModel.for_deployment(own, exact=exact)
    extra_bytes, extra_flops = proposer_extra(model, extra)
    return attrs.evolve(cost, weight_bytes=cost.weight_bytes + extra_bytes,
                        flops_per_token=cost.flops_per_token + extra_flops)
