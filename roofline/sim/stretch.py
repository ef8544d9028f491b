"""The event engine's core: decode stretches on an integer tick clock, and serial and static serving on it.

Between two events (a batch starting, a request finishing, an arrival that matters, the
KV pool running out) a batch's composition is fixed and every sequence's context grows by
one per step, so its step times follow two lines in the step index and the time of a
stretch of n steps is a closed form (:mod:`roofline.formulas.stretch`). The event engine
jumps from event to event with those sums; its cost grows with events, not tokens.

Time is kept as integers: **ticks** of 1/D s, where D, the run's common denominator, is
the least common multiple of the denominators of the cost model's stretch terms
(:class:`~roofline.sim.cost.StretchTerms`: W / BW, k / BW, F / peak, a / peak, the overhead
and the all-reduce's two terms for the roofline model; the two durations for the unit model)
and of every arrival time and option given in seconds. It is computed for each run
(:meth:`TickCosts.build`), never assumed; every step duration and every time of the run is
then an exact integer number of ticks, and seconds appear only in the results (built when
read: :class:`~roofline.sim.results.RequestTable`).

Which cost models take the stretch clock: every one whose ``stretch_terms()`` states its terms
(:func:`~roofline.sim.cost.stretch_terms`; no choice by class). The shipped ones do in exact
mode: :class:`~roofline.sim.UnitCostModel` with int or Fraction durations, and
:class:`~roofline.sim.RooflineCostModel` dense, mixture-of-experts (the weights a step of n
tokens reads depend on n alone: D holds the denominators up to the run's largest step, and a
run whose step needs more starts again on a finer clock, :class:`ClockTooCoarse`),
tensor-parallel (the all-reduce of n tokens, latency + n x per-token time), sliding-window
and estimate models. Float mode and a subclass that prices its own steps without stating its
terms say why not; the policies then run the step engine (``engine="auto"``) or refuse
(``engine="event"``).

Sliding-window models (serial and static batching; continuous batching takes the step engine):
the cost model's contexts are token-layers (:class:`~roofline.sim.LayerWindows`), so the tick
costs price a token-layer (``km``, ``ac``) and a prompt token written (``kt`` = L ``km``)
apart. A batch's rows share one context c, whose token-layers sum over layers of min(c, w_l)
are linear in c between the windows, so a stretch is cut at the windows it crosses and each
piece is one closed-form sum (:meth:`TickCosts.batch_stretch`).

The core, for the policies built on it (continuous batching will reuse it):

* :class:`TickClock`: seconds <-> ticks, and results' time values in the step engine's
  types (an int where the step engine's arithmetic stays in ints, else a Fraction);
* :class:`TickCosts`: one step's duration in ticks (``decode``, ``prefill``), a stretch's
  (``stretch``) and the first step count whose cumulative time reaches a tick count
  (``steps_until``);
* :func:`advance`: how many steps of a fixed batch run before the next event (a finish
  after a known number of steps, or the first step boundary at or after an arrival) and
  their exact duration;
* :func:`blocks_growth` and :func:`first_pool_overflow`: paged KV of a batch of unequal
  contexts, counted by residue modulo the block size.

Policies: :func:`serve_serial_events` and :func:`serve_static_events` return results equal
to :func:`~roofline.sim.serve_serial` and :func:`~roofline.sim.serve_static` exactly,
field by field and type by type; their step table (:class:`StretchTable`) stores one row
per batch and expands a stretch into its steps only when they are read.

Conventions: docs/conventions.md, "One step" and "Serving policies".
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

from .._checks import check_count
from ..errors import InvalidValueError, SimulationError
from ..formulas.stretch import lines_steps_until, lines_sum
from . import policies as _policies
from .cost import CostModel, stretch_terms
from .kv import KVPool, LayerWindows, held_kv, prompt_pairs
from .policies import _listed, _opt_time, _refuse_closed_loop, _windowed_pool, serve_serial, serve_static
from .requests import Request, check_requests
from .results import DECODE, PREFILL, Percentiles, RequestTable, SimResult, StepRecord, StepTable, Summary
from .workloads import Workload

__all__ = [
    "TickClock",
    "TickCosts",
    "advance",
    "blocks_growth",
    "first_pool_overflow",
    "StretchTable",
    "serve_serial_events",
    "serve_static_events",
]


def _exact(value: Any) -> Any:
    """An exact number (int or Fraction) as the exact cost models' ``to_time`` gives it."""
    return value if isinstance(value, (int, Fraction)) else Fraction(value)


# --------------------------------------------------------------------------- clock


class TickClock:
    """Integer ticks of 1 / ``denominator`` seconds.

    Parameters
    ----------
    denominator : int >= 1
        D: one tick is 1/D s.

    Raises
    ------
    InvalidValueError
        A denominator that is not an integer >= 1.

    Examples
    --------
    >>> clock = TickClock.for_values([Fraction(1, 3), Fraction(1, 4), 2])
    >>> clock.denominator, clock.ticks(Fraction(5, 6)), clock.time(10, exact_type=True)
    (12, 10, Fraction(5, 6))
    """

    __slots__ = ("denominator",)

    def __init__(self, denominator: int) -> None:
        check_count("denominator", denominator, minimum=1)
        self.denominator = denominator

    @classmethod
    def for_values(cls, values: Iterable[Any]) -> TickClock:
        """The clock whose tick is the largest that divides every value [s] (int or Fraction)."""
        d = 1
        for v in values:
            if isinstance(v, Fraction):
                q = v.denominator
                if d % q:
                    d = math.lcm(d, q)
        return cls(d)

    def ticks(self, seconds: Any) -> int:
        """``seconds`` [s] (int or Fraction) as an exact number of ticks.

        Raises
        ------
        InvalidValueError
            A value that is not a whole number of ticks (the clock was built without it).
        """
        if isinstance(seconds, Fraction):
            q, r = divmod(self.denominator, seconds.denominator)
            if r:
                raise InvalidValueError("seconds", seconds, f"is not a multiple of 1/{self.denominator} s")
            return seconds.numerator * q
        if isinstance(seconds, int):
            return seconds * self.denominator
        raise InvalidValueError("seconds", seconds, "expected an int or a Fraction")

    def time(self, ticks: int, exact_type: bool) -> Any:
        """``ticks`` as seconds: a Fraction when ``exact_type`` is True, else an int (ticks must be whole seconds)."""
        if exact_type:
            return Fraction(ticks, self.denominator)
        return ticks // self.denominator


# --------------------------------------------------------------------------- costs in ticks


class ClockTooCoarse(Exception):
    """A step needs weights the run's tick clock does not cover (a mixture of experts at more tokens than
    the clock was built for); the run is started again on a finer clock. Internal: never reaches a user."""

    def __init__(self, tokens: int) -> None:
        super().__init__(tokens)
        self.tokens = tokens


class TickCosts:
    """A cost model's decode, prefill and mixed step durations as integer ticks of one clock.

    Built by :meth:`build` from the cost model's own :class:`~roofline.sim.cost.StretchTerms`.
    A decode step of ``batch`` rows at context sum S lasts
    max(wm(B) + km S, fc B + ac S) + oh(B) ticks and a prefill of T tokens and Q attention
    pairs max(wm(T) + kt T, fc T + ac Q) + oh(T) ticks, where wm(n) is the weights' memory time
    at n tokens (a constant for a dense model) and oh(n) the overhead plus the tensor-parallel
    all-reduces of n tokens (the unit model: fixed tick counts).

    Attributes
    ----------
    clock : TickClock
    decode_fraction, prefill_fraction : bool
        Whether the step engine's decode (prefill) durations are Fractions (True) or ints,
        so that results keep the step engine's number types.
    varying : bool
        Whether wm or oh depends on the step's tokens (mixture of experts, tensor parallelism).
    max_tokens : int
        The most tokens of one step the clock covers (a MoE step beyond raises ClockTooCoarse).
    """

    __slots__ = ("clock", "wm", "km", "kt", "fc", "ac", "oh", "unit_decode", "unit_prefill", "decode_fraction",
                 "prefill_fraction", "windows", "varying", "max_tokens", "_weights", "_wm", "_ar0", "_ar1", "_power",
                 "_model")

    def __init__(self, clock: TickClock, *, wm: int = 0, km: int = 0, fc: int = 0, ac: int = 0, oh: int = 0,
                 unit_decode: int | None = None, unit_prefill: int | None = None, decode_fraction: bool = True,
                 prefill_fraction: bool = True, kt: int | None = None, windows: LayerWindows | None = None,
                 weights: Any = None, link: tuple[int, int] = (0, 0), max_tokens: int = 0) -> None:
        self.clock = clock
        self.wm, self.km, self.fc, self.ac, self.oh = wm, km, fc, ac, oh
        self.kt = km if kt is None else kt  # ticks per prompt token written (L km with sliding windows)
        self.unit_decode, self.unit_prefill = unit_decode, unit_prefill
        self.decode_fraction, self.prefill_fraction = decode_fraction, prefill_fraction
        self.windows = windows
        self._weights = weights  # n -> seconds, for a MoE model (else None: wm is the constant)
        self._wm: dict[int, int] = {}
        self._ar0, self._ar1 = link
        self.varying = weights is not None or link != (0, 0)
        self.max_tokens = max_tokens
        self._power: tuple[int, int, int, int, int] | None = None  # MoE weights in integers (build)
        self._model: Any = None  # the cost model, named when its stated weights are junk (build)

    @classmethod
    def build(cls, cost_model: Any, times: Iterable[Any] = (), windows: LayerWindows | None = None, *,
              max_tokens: int = 1) -> TickCosts | None:
        """The tick costs of ``cost_model`` on the clock of its terms and ``times`` [s]; None without stretch terms.

        Parameters
        ----------
        cost_model : CostModel
        times : iterable of int or Fraction [s]
            Every time the run will put on the clock (arrivals, waits).
        windows : LayerWindows or None
            The run's sliding windows (``policies._windowed_pool``): contexts are then token-layers.
        max_tokens : int >= 1
            The most tokens of one step the clock must cover where the weights read depend on
            them (a mixture of experts); a later step of more raises :class:`ClockTooCoarse`.

        Returns
        -------
        TickCosts, or None for a cost model without stretch terms (:func:`stretch_terms`).

        Raises
        ------
        InvalidValueError
            A time in ``times`` that is not an int or a Fraction.
        """
        terms = stretch_terms(cost_model)
        if isinstance(terms, str):
            return None
        extra = []
        if terms.constant_weights and terms.unit_decode is None:
            w1 = terms.weights(1)
            if isinstance(w1, bool) or not isinstance(w1, (int, Fraction)) or w1 < 0:
                raise InvalidValueError("cost_model", cost_model, f"stretch_terms().weights(1) returned {w1!r}: "
                                        "expected an int or a Fraction >= 0")
        if not terms.constant_weights:
            denominator = terms.weights_denominator(max_tokens)
            if isinstance(denominator, bool) or not isinstance(denominator, int) or denominator < 1:
                raise InvalidValueError("cost_model", cost_model, f"stretch_terms().weights_denominator({max_tokens}) "
                                        f"returned {denominator!r}: expected an int >= 1")
            extra = [Fraction(1, denominator)]
        clock = TickClock.for_values([*terms.constants(), *extra, *times])
        t = clock.ticks
        if terms.unit_decode is not None:
            return cls(clock, unit_decode=t(terms.unit_decode), unit_prefill=t(terms.unit_prefill),
                       decode_fraction=isinstance(terms.unit_decode, Fraction),
                       prefill_fraction=isinstance(terms.unit_prefill, Fraction), windows=windows)
        weights = None if terms.constant_weights else terms.weights
        wm = t(terms.weights(1)) if weights is None else 0
        costs = cls(clock, wm=wm, km=t(terms.km), fc=t(terms.fc), ac=t(terms.ac), oh=t(terms.overhead),
                    kt=t(terms.kt), windows=windows, weights=weights,
                    link=(t(terms.link_latency), t(terms.link_per_token)), max_tokens=max_tokens)
        costs._model = cost_model
        if terms.weights_power is not None:  # D (base - scale (a/b)^n) = D base - K a^n b^(N - n), K = D scale / b^N
            base, scale, miss, limit = terms.weights_power
            top = min(limit, max_tokens)
            per = scale.denominator * miss.denominator ** top
            if clock.denominator % per == 0:
                costs._power = (t(base), scale.numerator * (clock.denominator // per), miss.numerator,
                                miss.denominator, top)
        return costs

    def weights(self, tokens: int) -> int:
        """Ticks of the weights' memory time of a step of ``tokens`` tokens (wm; constant when dense)."""
        if self._weights is None:
            return self.wm
        wm = self._wm.get(tokens)
        if wm is None and self._power is not None and tokens <= self._power[4]:
            base, k, a, b, top = self._power  # D (base - scale (a / b)^n), in integers (build)
            wm = self._wm[tokens] = base - k * a ** tokens * b ** (top - tokens)
        if wm is None:
            seconds = self._weights(tokens)
            if isinstance(seconds, bool) or not isinstance(seconds, (int, Fraction)) or seconds < 0:
                raise InvalidValueError("cost_model", self._model, f"stretch_terms().weights({tokens}) returned "
                                        f"{seconds!r}: expected an int or a Fraction >= 0")
            if self.clock.denominator % seconds.denominator:
                if tokens <= self.max_tokens:  # a finer clock would not help: the stated denominator is wrong
                    raise InvalidValueError("cost_model", self._model, "stretch_terms().weights_denominator("
                                            f"{self.max_tokens}) is not a multiple of weights({tokens})'s denominator")
                raise ClockTooCoarse(tokens)
            wm = self._wm[tokens] = self.clock.ticks(seconds)
        return wm

    def overhead(self, tokens: int) -> int:
        """Ticks outside the max of a step of ``tokens`` tokens: the overhead plus its all-reduces (oh)."""
        if not tokens or not self.varying:
            return self.oh
        return self.oh + self._ar0 + self._ar1 * tokens

    def held(self, context: int) -> int:
        """KV of one sequence at ``context`` tokens in the cost model's unit: tokens, or token-layers with windows."""
        return held_kv(self.windows, context)

    def pairs(self, prompt_tokens: int) -> int:
        """Causal query-key pairs of a prompt (summed over layers with windows)."""
        return prompt_pairs(self.windows, prompt_tokens)

    def batch_stretch(self, batch: int, prompt: int, steps: int) -> int:
        """Ticks of the first ``steps`` decode steps of a batch of ``batch`` rows that all start at ``prompt`` tokens.

        Step j (1-based) is at context p + j in every row: :meth:`stretch` at context sum
        batch (p + 1). With sliding windows the context sum batch x sum_l min(p + j, w_l) is
        linear in j between the windows, so the stretch is the sum of one :meth:`stretch`-like
        closed form per piece (at most one more piece than windows).
        """
        if self.windows is None or self.unit_decode is not None:
            return self.stretch(batch, batch * (prompt + 1), steps)
        _, windowed = self.windows.groups
        total, c, last = 0, prompt + 1, prompt + steps  # contexts c .. last
        for w, _ in windowed:
            if c > last:
                break
            if w < c:
                continue
            piece = (w if w < last else last) - c + 1
            total += self._piece(batch, c, piece)
            c += piece
        if c <= last:
            total += self._piece(batch, c, last - c + 1)
        return total

    def _piece(self, batch: int, context: int, steps: int) -> int:
        """Ticks of ``steps`` steps at contexts context, context + 1, ... within one linear piece of the windows."""
        assert self.windows is not None
        full, windowed = self.windows.groups
        slope = full + sum(n for w, n in windowed if w > context)  # layers still growing past this context
        s0 = batch * self.windows.held(context)
        return lines_sum(self.weights(batch) + self.km * s0, self.km * batch * slope, self.fc * batch + self.ac * s0,
                         self.ac * batch * slope, self.overhead(batch), steps)

    def decode(self, batch: int, context_sum: int) -> int:
        """Ticks of one decode step (:func:`roofline.formulas.step_time` x D)."""
        if self.unit_decode is not None:
            return self.unit_decode
        m = self.weights(batch) + self.km * context_sum
        c = self.fc * batch + self.ac * context_sum
        return (m if m >= c else c) + self.overhead(batch)

    def prefill(self, prefill_tokens: int, attention_pairs: int) -> int:
        """Ticks of one prefill step (:func:`roofline.formulas.prefill_step_time` x D)."""
        if self.unit_prefill is not None:
            return self.unit_prefill
        m = self.weights(prefill_tokens) + self.kt * prefill_tokens
        c = self.fc * prefill_tokens + self.ac * attention_pairs
        return (m if m >= c else c) + self.overhead(prefill_tokens)

    def mixed(self, decode_rows: int, context_sum: int, prefill_tokens: int, cached_tokens: int,
              attention_pairs: int) -> int:
        """Ticks of one mixed step (:func:`roofline.formulas.mixed_step_time` x D; a decode step without prompt
        tokens; the unit model's prefill duration with them)."""
        if not prefill_tokens:
            return self.decode(decode_rows, context_sum)
        if self.unit_prefill is not None:
            return self.unit_prefill
        n = decode_rows + prefill_tokens  # bytes W(n) + k (S + p0) + kt T, FLOPs n F + a (S + Q)
        m = self.weights(n) + self.km * (context_sum + cached_tokens) + self.kt * prefill_tokens
        c = self.fc * n + self.ac * (context_sum + attention_pairs)
        return (m if m >= c else c) + self.overhead(n)

    def lines(self, batch: int, context_sum: int) -> tuple[int, int, int, int, int]:
        """(m0, ms, c0, cs, oh): step j of the stretch lasts max(m0 + ms j, c0 + cs j) + oh ticks."""
        if self.unit_decode is not None:
            return self.unit_decode, 0, 0, 0, 0
        return (self.weights(batch) + self.km * context_sum, self.km * batch,
                self.fc * batch + self.ac * context_sum, self.ac * batch, self.overhead(batch))

    def stretch(self, batch: int, context_sum: int, steps: int) -> int:
        """Ticks of ``steps`` decode steps of a fixed batch whose context sum starts at ``context_sum``.

        :func:`roofline.formulas.stretch_time` x D, in O(1) (the line kernel on integers).
        """
        if self.unit_decode is not None:
            return self.unit_decode * steps
        return lines_sum(*self.lines(batch, context_sum), steps)

    def steps_until(self, batch: int, context_sum: int, target: int) -> int:
        """The least n >= 0 with ``stretch(batch, context_sum, n) >= target`` (exact; target in ticks)."""
        if self.unit_decode is not None:
            return 0 if target <= 0 else -(-target // self.unit_decode)
        return lines_steps_until(*self.lines(batch, context_sum), target)


def advance(costs: TickCosts, batch: int, context_sum: int, *, max_steps: int,
            horizon: int | None = None) -> tuple[int, int]:
    """Run a fixed batch until its next event: (steps run, ticks they take).

    Parameters
    ----------
    costs : TickCosts
    batch : int >= 1 [rows]
    context_sum : int >= 0 [tokens]
        Sum of the contexts (KV incl. the new token) at the first step; it grows by
        ``batch`` per step.
    max_steps : int >= 0 [steps]
        Steps until the next event the batch itself makes: the fewest decode steps any row
        still needs (its finish), or the steps before the KV pool overflows
        (:func:`first_pool_overflow` - 1).
    horizon : int or None [ticks]
        Ticks from the stretch's start to the next outside event (an arrival); the stretch
        stops at the first step boundary at or after it. None: no such event.

    Returns
    -------
    (steps, ticks)
        min(max_steps, the first n whose cumulative time reaches ``horizon``) and the exact
        duration of those steps.

    Raises
    ------
    Nothing for valid inputs (the caller's state); no checks are made (a hot path).

    Examples
    --------
    >>> from roofline.sim import UnitCostModel
    >>> costs = TickCosts.build(UnitCostModel(decode=Fraction(1, 2)))
    >>> advance(costs, 4, 40, max_steps=10, horizon=3)  # ticks of 1/2 s: steps end at 1, 2, 3, ...
    (3, 3)
    """
    n = max_steps
    if horizon is not None:
        until = costs.steps_until(batch, context_sum, horizon)
        if until < n:
            n = until
    return n, costs.stretch(batch, context_sum, n)


def blocks_growth(residues: Sequence[int] | Mapping[int, int], block_size: int, steps: int) -> int:
    """Blocks a batch takes over ``steps`` decode steps, by residue of its sequences' KV [blocks].

    Parameters
    ----------
    residues : sequence of int, length ``block_size``, or mapping {residue: count}
        ``residues[r]`` = number of sequences whose KV before the stretch is c with
        c % block_size == r (c >= 0); a mapping lists only the residues held (sparse).
    block_size : int >= 1 [tokens/block]
    steps : int >= 0

    Raises
    ------
    Nothing; no checks are made (a hot path).

    Returns
    -------
    int: sum over sequences of ceil((c + n) / b) - ceil(c / b), the sum over residues of
    :func:`roofline.formulas.stretch_blocks` differences (a sequence's c = b q + r holds
    q + ceil((r + n) / b) blocks after n steps).

    Examples
    --------
    >>> blocks_growth([1, 0, 0, 2], 4, 1)  # KV 0 mod 4 takes a block at once; 3 mod 4 after 1 step: no
    1
    """
    total = 0
    for r, count in _residue_items(residues):
        if count:
            total += count * (-(-(r + steps) // block_size) - (-(-r // block_size)))
    return total


def _residue_items(residues: Sequence[int] | Mapping[int, int]) -> Iterable[tuple[int, int]]:
    """(residue, count) pairs of a list indexed by residue or a {residue: count} mapping."""
    return residues.items() if isinstance(residues, Mapping) else enumerate(residues)


def first_pool_overflow(residues: Sequence[int] | Mapping[int, int], block_size: int, free_blocks: Any) -> int | None:
    """The first step count n >= 1 at which the batch's growth exceeds ``free_blocks``, or None if never.

    Parameters
    ----------
    residues, block_size : as :func:`blocks_growth`
    free_blocks : int >= 0 [blocks] or math.inf
        Blocks not yet held.

    Returns
    -------
    int or None: min n with ``blocks_growth(residues, block_size, n) > free_blocks``; None
    for an unlimited pool or an empty batch.

    Raises
    ------
    Nothing; no checks are made (a hot path).

    Notes
    -----
    With n = b t + u (0 <= u < b) the growth is B t + g(u), g nondecreasing, so t is the
    least with B t + g(b - 1) > free (a division) and u is then the least that exceeds it,
    found among the u where g rises (u = 1 for residue 0, b - r + 1 for residue r > 0):
    O(B^2) at most whatever n and b.

    Examples
    --------
    >>> first_pool_overflow([2, 0, 0, 0], 4, 3)  # two sequences at KV 0 mod 4: 2 blocks at once, 4 after 5 steps
    5
    """
    counts = {r: count for r, count in _residue_items(residues) if count}
    batch = sum(counts.values())
    if batch == 0 or free_blocks == math.inf:
        return None
    b = block_size
    t = max(0, (free_blocks - blocks_growth(counts, b, b - 1)) // batch + 1)
    base = batch * t
    # g(u) = blocks_growth(counts, b, u) only rises at u = 1 (residue 0) or u = b - r + 1 (residue r > 0):
    # the least u that exceeds is 0 or one of those, so O(batch) candidates, not O(b) (b may be 10**9)
    jumps = {1 if r == 0 else b - r + 1 for r in counts}
    for u in sorted({0} | {u for u in jumps if u < b}):
        if base + blocks_growth(counts, b, u) > free_blocks and b * t + u >= 1:
            return b * t + u
    # only u = 0 at t = 0 exceeded (growth 0 > free is impossible for free >= 0): next period
    return block_size * t + block_size  # pragma: no cover - unreachable for free_blocks >= 0


# --------------------------------------------------------------------------- step table


class StretchTable(StepTable):
    """The steps of a serial or static run, one row per batch, expanded into steps on demand.

    A :class:`~roofline.sim.StepTable` (same records, same CSV): ``len``, indexing (negative
    too, slices) and iteration give :class:`~roofline.sim.StepRecord` values equal to the
    step engine's; a record's start is the batch's start plus the closed-form sum of the
    steps before it, so random access costs O(log batches).
    """

    def __init__(self, cost_model: Any, costs: TickCosts, pool: KVPool) -> None:  # noqa: D107
        self._cost = cost_model
        self._costs = costs
        self._pool = pool
        # one entry per batch, in columns
        self._b_first: list[int] = []  # step index of the batch's prefill
        self._b_start: list[int] = []  # [ticks]
        self._b_start_fraction: list[bool] = []
        self._b_rows: list[int] = []
        self._b_p_max: list[int] = []
        self._b_o_max: list[int] = []
        self._b_prompt_sum: list[int] = []
        self._b_outputs: list[list[int] | None] = []  # the rows' outputs, sorted (None for one row: [o_max])
        self._n = 0

    def _add_batch(self, start: int, start_fraction: bool, rows: int, p_max: int, o_max: int, prompt_sum: int,
                   outputs: list[int] | None) -> None:
        self._b_first.append(self._n)
        self._b_start.append(start)
        self._b_start_fraction.append(start_fraction)
        self._b_rows.append(rows)
        self._b_p_max.append(p_max)
        self._b_o_max.append(o_max)
        self._b_prompt_sum.append(prompt_sum)
        self._b_outputs.append(outputs)
        self._n += o_max

    def add_prefill(self, *args: Any) -> None:
        """Not used: the events engine adds whole batches."""
        raise TypeError("a StretchTable is filled batch by batch")

    def add_decode(self, *args: Any) -> None:
        """Not used: the events engine adds whole batches."""
        raise TypeError("a StretchTable is filled batch by batch")

    def __len__(self) -> int:
        return self._n

    def _batch_records(self, b: int, first: int, last: int) -> Iterator[StepRecord]:
        """Records of batch ``b``'s local steps first..last-1 (0 = its prefill)."""
        start, start_fraction, m, p_max = self._b_start[b], self._b_start_fraction[b], self._b_rows[b], self._b_p_max[b]
        prompt_sum, outputs = self._b_prompt_sum[b], self._b_outputs[b] or [self._b_o_max[b]]
        costs, cost, clock, pool = self._costs, self._cost, self._costs.clock, self._pool
        work = cost.decode_work
        index = self._b_first[b]
        tokens = m * p_max
        pairs = m * costs.pairs(p_max)
        t = start + costs.prefill(tokens, pairs)
        fraction = start_fraction or costs.prefill_fraction
        held = costs.held
        if first == 0:
            yield StepRecord(index, PREFILL, clock.time(start, start_fraction), cost.prefill_time(tokens, pairs), m, m,
                             0, tokens, tokens - prompt_sum, pairs, m * held(p_max), m * pool.blocks_for(p_max),
                             *cost.prefill_work(tokens, pairs))
            first = 1
        if first >= last:
            return
        if first > 1:
            t += costs.batch_stretch(m, p_max, first - 1)
            fraction = fraction or costs.decode_fraction
        for j in range(first, last):
            context_sum = m * held(p_max + j)
            useful = m - bisect.bisect_right(outputs, j)
            nbytes, flops = work(m, context_sum)
            yield StepRecord(index + j, DECODE, clock.time(t, fraction), cost.decode_time(m, context_sum), m, useful,
                             context_sum, 0, 0, 0, context_sum, m * pool.blocks_for(p_max + j), nbytes, flops,
                             decode_rows=m)
            t += costs.decode(m, context_sum)
            fraction = fraction or costs.decode_fraction

    def _walk(self, first: int, last: int) -> Iterator[StepRecord]:
        b = bisect.bisect_right(self._b_first, first) - 1
        while first < last:
            begin = self._b_first[b]
            end = begin + self._b_o_max[b]
            stop = min(last, end)
            yield from self._batch_records(b, first - begin, stop - begin)
            first = stop
            b += 1

    def __iter__(self) -> Iterator[StepRecord]:
        return self._walk(0, self._n)


# --------------------------------------------------------------------------- serial and static


class _EventRun:
    """Inputs and outcomes of a serial or static run in ticks (the step engine's ``_Run``, on the tick clock)."""

    def __init__(self, requests: tuple[Request, ...], arrivals: list[Any], cost_model: Any, costs: TickCosts,
                 pool: KVPool, record_steps: bool, max_steps: int | None, *, max_model_len: int | None = None,
                 budget: int | None = None) -> None:
        self.requests = requests
        self.cost = cost_model
        self.costs = costs
        self.clock = costs.clock
        self.pool = pool
        n = len(requests)
        self.arrival = arrivals
        ticks = self.clock.ticks
        self.arr = [ticks(a) for a in self.arrival]
        _check_order(requests, self.arr)
        self.arr_fraction = [not isinstance(a, int) for a in self.arrival]
        self.prompt = [r.prompt_tokens for r in requests]
        self.output = [r.output_tokens for r in requests]
        self.reason: list[str | None] = [None] * n
        if pool.capacity_blocks is not None and pool.layer_windows:
            self.reason = [pool.never_fits_reason(p, o) for p, o in zip(self.prompt, self.output, strict=True)]
        elif pool.capacity_blocks is not None:  # pool.never_fits_reason, asked only of those that do not fit
            b, cap = pool.block_size, pool.capacity_blocks
            for i, (p, o) in enumerate(zip(self.prompt, self.output, strict=True)):
                if -(-(p + o - 1) // b) > cap:
                    self.reason[i] = pool.never_fits_reason(p, o)
        if max_model_len is not None:  # the step engine's order: the pool's reason, then max_model_len, then budget
            for i, (p, o) in enumerate(zip(self.prompt, self.output, strict=True)):
                if p + o > max_model_len:
                    self.reason[i] = (f"prompt + output of {p + o} tokens ({p} + {o}) exceeds "
                                      f"max_model_len={max_model_len}")
        if budget is not None:
            for i, p in enumerate(self.prompt):
                if self.reason[i] is None and p > budget:
                    self.reason[i] = f"prompt of {p} tokens exceeds max_num_batched_tokens={budget}"
        self.budget = math.inf if budget is None else budget
        self.spec: dict[str, Any] | None = None
        self.batch_size = 1
        self.policy = ""
        self.preemption_total = 0
        self.mixed_steps = 0
        self.batch_share_sum: Any = 0
        self.batches = 0
        self.capacity = math.inf if pool.capacity_blocks is None else pool.capacity_blocks
        # per request, in ticks, with the step engine's number type (True: Fraction)
        self.admitted: list[int | None] = [None] * n
        self.admitted_fraction = [False] * n
        self.first: list[int | None] = [None] * n
        self.first_fraction = [False] * n
        self.finish: list[int | None] = [None] * n
        self.finish_fraction = [False] * n
        self.handed: list[int | None] = [None] * n
        self.handed_fraction = [False] * n
        self.table = StretchTable(cost_model, costs, pool) if record_steps else None
        self.steps = 0
        self.prefill_steps = 0
        self.useful_rows = 0
        self.rows = 0
        self.peak_tokens = 0
        self.peak_blocks = 0
        self.first_start: tuple[int, bool] | None = None
        self.end: tuple[int, bool] | None = None
        self.idle = (0, False)
        self.max_steps = max_steps

    def step_limit(self) -> int:
        if self.max_steps is not None:
            return self.max_steps
        return sum(o for o, why in zip(self.output, self.reason, strict=True) if why is None)

    def check_steps(self, limit: int) -> None:
        if self.steps > limit:
            why = ("a fault: every step produces a new token, so sum(O) steps always suffice"
                   if self.max_steps is None else "the simulation needs more steps")
            raise SimulationError(f"max_steps={limit}: passed after {self.steps} steps ({why})")

    # ------------------------------------------------------------------ one batch
    def run_batch(self, members: list[int], start: int, start_fraction: bool) -> tuple[int, bool]:
        """A padded prefill step, then the decode stretch to the longest row; returns the end (ticks, type)."""
        prompt, output, costs = self.prompt, self.output, self.costs
        m = len(members)
        if m == 1:
            i = members[0]
            p_max = prompt_sum = prompt[i]
            o_max = output[i]
        else:
            p_max = max(prompt[i] for i in members)
            o_max = max(output[i] for i in members)
            prompt_sum = sum(prompt[i] for i in members)
        tokens = m * p_max
        pairs = m * costs.pairs(p_max)
        t = start + costs.prefill(tokens, pairs)
        t_fraction = start_fraction or costs.prefill_fraction
        if self.first_start is None:
            self.first_start = (start, start_fraction)
        end_fraction = t_fraction or (o_max > 1 and costs.decode_fraction)
        ends: dict[int, int] = {}
        for i in members:
            self.admitted[i] = start
            self.admitted_fraction[i] = start_fraction
            self.first[i] = t
            self.first_fraction[i] = t_fraction
            o = output[i]
            done = ends.get(o)
            if done is None:
                done = ends[o] = t + costs.batch_stretch(m, p_max, o - 1)
            self.finish[i] = done
            self.finish_fraction[i] = t_fraction or (o > 1 and costs.decode_fraction)
        end = ends[o_max]
        for i in members:
            self.handed[i] = end
            self.handed_fraction[i] = end_fraction
        if self.table is not None:
            self.table._add_batch(start, start_fraction, m, p_max, o_max, prompt_sum,
                                  sorted([output[i] for i in members]) if m > 1 else None)
        self.steps += o_max
        self.prefill_steps += 1
        useful = sum(output[i] for i in members) if m > 1 else o_max
        self.useful_rows += useful
        self.rows += m * o_max
        self.batch_share_sum += Fraction(useful, m * o_max)
        self.batches += 1
        tokens_held = m * costs.held(p_max + o_max - 1)
        if tokens_held > self.peak_tokens:
            self.peak_tokens = tokens_held
        blocks = m * self.pool.lifetime_blocks(p_max, o_max)
        if blocks > self.peak_blocks:
            self.peak_blocks = blocks
        return end, end_fraction

    # ------------------------------------------------------------------ serial
    def serve_one_by_one(self) -> None:
        """Serial serving: :meth:`serve_batches` with batch size 1, written out (one prefill + one stretch each)."""
        arr, arr_fraction, prompt, output = self.arr, self.arr_fraction, self.prompt, self.output
        costs, table, limit = self.costs, self.table, self.step_limit()
        admitted, admitted_fraction, first, first_fraction = (self.admitted, self.admitted_fraction, self.first,
                                                              self.first_fraction)
        finish, finish_fraction, handed, handed_fraction = (self.finish, self.finish_fraction, self.handed,
                                                            self.handed_fraction)
        unit_prefill, unit_decode = costs.unit_prefill, costs.unit_decode
        wm, km, fc, ac, oh = costs.wm, costs.km, costs.fc, costs.ac, costs.oh
        prefill_fraction, decode_fraction = costs.prefill_fraction, costs.decode_fraction
        windows, varying = costs.windows, costs.varying
        peak_blocks = 0
        free: int | None = None
        free_fraction = False
        idle, idle_fraction = self.idle
        steps = prefills = longest = 0
        if table is not None:  # StretchTable._add_batch for one row, inlined; the other columns are filled below
            table_first, table_start, table_start_fraction = (table._b_first.append, table._b_start.append,
                                                              table._b_start_fraction.append)
            table_p, table_o = table._b_p_max.append, table._b_o_max.append
        for i, why in enumerate(self.reason):
            if why is not None:
                continue
            a = arr[i]
            if free is None or a > free:
                if free is not None:
                    idle += a - free
                    idle_fraction = idle_fraction or arr_fraction[i] or free_fraction
                else:
                    self.first_start = (a, arr_fraction[i])
                start, start_fraction = a, arr_fraction[i]
            else:
                start, start_fraction = free, free_fraction
            p, o = prompt[i], output[i]
            if unit_prefill is not None and unit_decode is not None:
                t = start + unit_prefill
                end = t + unit_decode * (o - 1)
            elif windows is not None or varying:
                t = start + costs.prefill(p, costs.pairs(p))
                end = t + costs.batch_stretch(1, p, o - 1)
            else:  # TickCosts.prefill and .stretch for one row, inlined
                m = wm + km * p
                c = fc * p + ac * (p * (p + 1) // 2)
                t = start + (m if m >= c else c) + oh
                end = t + lines_sum(wm + km * (p + 1), km, fc + ac * (p + 1), ac, oh, o - 1) if o > 1 else t
            t_fraction = start_fraction or prefill_fraction
            end_fraction = t_fraction or (o > 1 and decode_fraction)
            admitted[i] = start
            admitted_fraction[i] = start_fraction
            first[i] = t
            first_fraction[i] = t_fraction
            finish[i] = handed[i] = end
            finish_fraction[i] = handed_fraction[i] = end_fraction
            if table is not None:
                table_first(steps)
                table_start(start)
                table_start_fraction(start_fraction)
                table_p(p)
                table_o(o)
            steps += o
            prefills += 1
            if p + o > longest:
                longest = p + o
            if windows is not None:  # a windowed layer's blocks are not monotone in the context
                peak_blocks = max(peak_blocks, self.pool.lifetime_blocks(p, o))
            free, free_fraction = end, end_fraction
            if steps > limit:
                self.steps = steps
                self.check_steps(limit)
        self.steps = self.useful_rows = self.rows = steps
        self.prefill_steps = self.batches = prefills
        self.batch_share_sum = Fraction(prefills)  # each batch of one row is fully useful
        if table is not None:
            table._b_rows = [1] * prefills
            table._b_prompt_sum = table._b_p_max
            table._b_outputs = [None] * prefills
            table._n = steps
        if prefills:
            self.peak_tokens = costs.held(longest - 1)
            self.peak_blocks = self.pool.blocks_for(longest - 1) if windows is None else peak_blocks
        self.idle = (idle, idle_fraction)
        self.end = None if free is None else (free, free_fraction)

    # ------------------------------------------------------------------ the batch loop
    def serve_batches(self, batch_size: int, max_wait: tuple[int, bool] | None) -> None:
        """Static batching (serial when batch_size == 1): the step engine's batch formation, on ticks."""
        arr, arr_fraction, prompt, output, pool = self.arr, self.arr_fraction, self.prompt, self.output, self.pool
        eligible = [i for i, why in enumerate(self.reason) if why is None]
        last = len(arr) - 1
        limit = self.step_limit()
        free_at: tuple[int, bool] | None = None
        idle, idle_fraction = self.idle
        k = 0
        count = len(eligible)
        block, capacity, budget = pool.block_size, self.capacity, self.budget
        lifetime = pool.lifetime_blocks if pool.layer_windows else None  # windows: blocks are not monotone in c
        while k < count:
            head = eligible[k]
            stop, p_max, o_max = k + 1, prompt[head], output[head]
            ready_i: int | None = None
            while stop - k < batch_size and stop < count:
                j = eligible[stop]
                pm = p_max if p_max >= prompt[j] else prompt[j]
                om = o_max if o_max >= output[j] else output[j]
                need = -(-(pm + om - 1) // block) if lifetime is None else lifetime(pm, om)
                if (stop - k + 1) * need > capacity or (stop - k + 1) * pm > budget:
                    ready_i = j  # full for KV (pool.lifetime_blocks) or the token budget once the next is there
                    break
                stop, p_max, o_max = stop + 1, pm, om
            if ready_i is None:
                ready_i = eligible[stop - 1] if stop - k == batch_size else last
            ready, ready_fraction = arr[ready_i], arr_fraction[ready_i]
            if max_wait is not None and arr[head] + max_wait[0] < ready:
                ready, ready_fraction = arr[head] + max_wait[0], arr_fraction[head] or max_wait[1]
            if free_at is None or ready > free_at[0]:
                start, start_fraction = ready, ready_fraction
                if free_at is not None:
                    idle += ready - free_at[0]
                    idle_fraction = idle_fraction or ready_fraction or free_at[1]
            else:
                start, start_fraction = free_at
            while arr[eligible[stop - 1]] > start:  # only the requests already there
                stop -= 1
            members = eligible[k:stop]
            k = stop
            free_at = self.run_batch(members, start, start_fraction)
            self.check_steps(limit)
        self.idle = (idle, idle_fraction)
        self.end = free_at

    # ------------------------------------------------------------------ results
    def result(self, policy: str, options: dict[str, Any]) -> SimResult:
        n = len(self.requests)
        prompt = [p if h is not None else 0 for p, h in zip(self.prompt, self.handed, strict=True)]
        output = [o if h is not None else 0 for o, h in zip(self.output, self.handed, strict=True)]
        results = RequestTable(self.requests, self.arrival, (self.admitted, self.first, self.finish, self.handed),
                               (self.admitted_fraction, self.first_fraction, self.finish_fraction,
                                self.handed_fraction), [0] * n, prompt, output, self.reason, None,
                               self.clock.denominator)
        if self.spec is not None:
            options = dict(options, workload=self.spec)
        options = dict(options, kv_capacity_blocks=self.pool.capacity_blocks, block_size=self.pool.block_size)
        if self.costs.windows is not None:
            options["kv_units"] = "token-layers"
        return SimResult(policy, options, results, self.table, self._summary(policy))

    def _summary(self, policy: str) -> Summary:
        self.policy = policy
        return _summary(self, policy)


    def itl(self) -> Percentiles | None:
        """The summary's ITL: serial streams its tokens, static batching hands them back at once (None)."""
        return self._serial_itl() if self.batch_size == 1 and self.policy == "serial" else None

    @property
    def slot_rows(self) -> int:
        return self.rows

    def _serial_itl(self) -> Percentiles | None:
        """``Percentiles.of_counts`` of every decode step's duration, without expanding a stretch into its steps.

        Serial serving streams: request i's gaps are its decode steps, at contexts p_i + 1, ...,
        p_i + o_i - 1, and a batch-1 step's duration is a nondecreasing function of its context
        (the max of two lines with slopes >= 0, plus a constant). So the q-th nearest-rank gap
        is the duration at the q-th nearest-rank context of the multiset of contexts, a union
        of intervals: one sweep over their 2R endpoints, whatever the lengths.
        """
        costs, clock = self.costs, self.clock
        delta: dict[int, int] = {}
        total_ticks = n = top = 0
        fraction: bool | None = None
        for i, h in enumerate(self.handed):
            o = self.output[i]
            if h is None or o < 2:
                continue
            if fraction is None:  # the multiset's keys keep the first gap's number type
                fraction = self.first_fraction[i] or costs.decode_fraction
            lo, hi = self.prompt[i] + 1, self.prompt[i] + o  # contexts lo .. hi - 1
            delta[lo] = delta.get(lo, 0) + 1
            delta[hi] = delta.get(hi, 0) - 1
            n += o - 1
            total_ticks += h - self.first[i]  # type: ignore[operator]
            if hi - 1 > top:
                top = hi - 1
        if not n:
            return None
        assert fraction is not None
        ranks = [-(-q * n // 100) for q in (50, 90, 99)]  # 1-based, increasing
        found: list[int] = []
        seen = active = 0
        position = 0
        for x in sorted(delta):
            while found.__len__() < 3 and active and seen + active * (x - position) >= ranks[len(found)]:
                found.append(position + -(-(ranks[len(found)] - seen) // active) - 1)
            seen += active * (x - position)
            active += delta[x]
            position = x
        time = clock.time

        def gap(context: int) -> Any:  # token-layers grow with the context too: still nondecreasing
            return time(costs.decode(1, costs.held(context)), fraction)

        mean = Fraction(total_ticks, clock.denominator * n)
        return Percentiles(gap(found[0]), gap(found[1]), gap(found[2]), mean=mean, max=gap(top))


def _summary(self: Any, policy: str) -> Summary:
    """The step engine's ``summarize``, computed on ticks (exact; the same values and number types)."""
    clock = self.clock
    time = clock.time
    n = len(self.requests)
    handed, handed_fraction = self.handed, self.handed_fraction
    done = [i for i in range(n) if handed[i] is not None]
    arr, arr_fraction = self.arr, self.arr_fraction
    # first_arrival = min(arrivals): the first request's (arrivals are in order; min keeps the first)
    fa, fa_fraction = (arr[0], arr_fraction[0]) if n else (0, False)
    done_handed = [handed[i] for i in done]
    if done:  # max keeps the first of equal maxima
        best = done[done_handed.index(max(done_handed))]  # type: ignore[type-var]
        last, last_fraction = handed[best], handed_fraction[best]
        assert last is not None
    else:
        last, last_fraction = fa, fa_fraction
    makespan = time(last - fa, last_fraction or fa_fraction)
    output = sum([self.output[i] for i in done])
    zero = self.cost.to_time(0)
    if self.first_start is None or self.end is None:
        busy = zero
    else:
        busy_ticks = self.end[0] - self.first_start[0] - self.idle[0]
        busy = time(busy_ticks, self.end[1] or self.first_start[1] or self.idle[1])
    done_arr = [arr[i] for i in done]
    done_arr_fraction = [arr_fraction[i] for i in done]

    def since_arrival(ticks: list[Any], fractions: list[bool]) -> Percentiles | None:
        values = [t - a for t, a in zip(ticks, done_arr, strict=True)]
        flags = [x or y for x, y in zip(fractions, done_arr_fraction, strict=True)]
        return _percentiles(values, flags, clock)

    first_done = [self.first[i] for i in done]
    queue = since_arrival([self.admitted[i] for i in done], [self.admitted_fraction[i] for i in done])
    ttft = since_arrival(first_done, [self.first_fraction[i] for i in done])
    e2e = since_arrival(done_handed, [handed_fraction[i] for i in done])
    decoding = [k for k, i in enumerate(done) if self.output[i] >= 2]
    tpot = _percentiles_of_ratios([done_handed[k] - first_done[k] for k in decoding],  # type: ignore[operator]
                                  [self.output[done[k]] - 1 for k in decoding], clock.denominator)
    mixed = self.mixed_steps
    return Summary(
        policy=policy, requests=n, completed=len(done), rejected=n - self.reason.count(None),
        preemptions=self.preemption_total, steps=self.steps, prefill_steps=self.prefill_steps,
        decode_steps=self.steps - self.prefill_steps - mixed, output_tokens=output, makespan_s=makespan,
        busy_s=busy, mixed_steps=mixed, output_tokens_per_s=Fraction(output) / makespan if makespan else None,
        long_run_useful_share=Fraction(self.useful_rows, self.rows) if self.rows else None,
        per_batch_useful_share=self.batch_share_sum / self.batches if self.batches else None,
        slot_occupancy=Fraction(self.slot_rows, self.batch_size * self.steps) if self.steps else None,
        queue_wait=queue, ttft=ttft, tpot=tpot, e2e=e2e, itl=self.itl(),
        peak_kv_tokens=self.peak_tokens, peak_kv_blocks=self.peak_blocks,
        kv_capacity_blocks=self.pool.capacity_blocks, block_size=self.pool.block_size,
    )


def _rank(q: int, n: int) -> int:
    return -(-q * n // 100) - 1  # nearest rank, 0-based (results.percentile)


def _percentiles(values: list[int], flags: list[bool], clock: TickClock) -> Percentiles | None:
    """``Percentiles.of`` for times given in ticks with their number types: the same elements, exact mean."""
    if not values:
        return None
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)  # stable, as sorted(values)
    p50, p90, p99, top = order[_rank(50, n)], order[_rank(90, n)], order[_rank(99, n)], order[-1]
    time = clock.time
    return Percentiles(time(values[p50], flags[p50]), time(values[p90], flags[p90]), time(values[p99], flags[p99]),
                       mean=Fraction(sum(values), clock.denominator * n), max=time(values[top], flags[top]))


def _percentiles_of_ratios(ticks: list[int], divisors: list[int], denominator: int) -> Percentiles | None:
    """``Percentiles.of`` for the Fractions ticks / (denominator x divisor), found by selection, exact.

    Correctly rounded division is monotone, so ordering by the floats of the values orders the
    exact values up to ties among equal floats; each rank's element is then chosen exactly within
    its group of equal floats (compared by cross-multiplication), so the result is the element
    ``sorted`` of the Fractions would give, with no Fraction made but the five returned.
    """
    if not ticks:
        return None
    n = len(ticks)
    approx: list[Any]
    try:
        approx = [t / (q * denominator) for t, q in zip(ticks, divisors, strict=True)]  # [s], correctly rounded
    except OverflowError:  # a value beyond a float's range: order the exact values
        approx = [Fraction(t, q * denominator) for t, q in zip(ticks, divisors, strict=True)]
    order = sorted(range(n), key=approx.__getitem__)
    positions: dict[Any, tuple[int, int]] = {}  # float -> (first, last + 1) positions in ``order``
    for position, i in enumerate(order):
        value = approx[i]
        first, _ = positions.get(value, (position, position))
        positions[value] = (first, position + 1)

    def at_rank(rank: int) -> int:
        first, stop = positions[approx[order[rank]]]
        if stop - first == 1:
            return order[rank]
        def exact_order(a: int, b: int) -> int:
            return ticks[a] * divisors[b] - ticks[b] * divisors[a]

        group = sorted(order[first:stop], key=functools.cmp_to_key(exact_order))  # stable: ties keep their order
        return group[rank - first]

    def at(i: int) -> Fraction:
        return Fraction(ticks[i], denominator * divisors[i])

    by_divisor: dict[int, int] = {}  # divisor -> sum of its ticks (few divisors: one product each)
    for t, q in zip(ticks, divisors, strict=True):
        by_divisor[q] = by_divisor.get(q, 0) + t
    common = math.lcm(*by_divisor)
    mean = Fraction(sum(t * (common // q) for q, t in by_divisor.items()), denominator * common * n)
    return Percentiles(at(at_rank(_rank(50, n))), at(at_rank(_rank(90, n))), at(at_rank(_rank(99, n))),
                       mean=mean, max=at(at_rank(n - 1)))


def _validated(requests: Iterable[Request], cost_model: Any, kv_pool: KVPool | None, record_steps: bool,
               max_steps: int | None, max_model_len: int | None = None) -> tuple[tuple[Request, ...], KVPool]:
    """The step engine's checks, in its order (``policies._Run``)."""
    if not isinstance(cost_model, CostModel):  # pragma: no cover - the caller falls back to the step engine first
        raise InvalidValueError("cost_model", cost_model, "expected a cost model")
    if kv_pool is not None and not isinstance(kv_pool, KVPool):
        raise InvalidValueError("kv_pool", kv_pool, "expected a roofline.sim.KVPool or None")
    if not isinstance(record_steps, bool):
        raise InvalidValueError("record_steps", record_steps, "must be True or False")
    if max_steps is not None:
        check_count("max_steps", max_steps, minimum=0)
    if max_model_len is not None:
        check_count("max_model_len", max_model_len, minimum=1)
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
        check_requests(requests)  # raises the step engine's error, naming the requests
    out = tuple(requests)
    if any(type(r) is not Request for r in out) or len({r.id for r in out}) != len(out):
        check_requests(out)  # raises the step engine's error (or passes a subclass of Request)
    return out, kv_pool if kv_pool is not None else KVPool.unlimited()


def _check_order(requests: tuple[Request, ...], ticks: list[int]) -> None:
    """Arrivals in order, checked on ticks; on a fault ``check_requests`` raises its error."""
    previous = -1
    for t in ticks:
        if t < previous:
            check_requests(requests)
            raise AssertionError("check_requests passed out-of-order arrivals")  # pragma: no cover
        previous = t


def _event_run(requests: Any, cost_model: Any, kv_pool: KVPool | None, record_steps: bool,
               max_steps: int | None, extra_times: tuple[Any, ...], max_model_len: int | None = None,
               budget: int | None = None, max_tokens: int = 1) -> _EventRun:
    """The run on its tick clock (the caller checked that the cost model states its stretch terms)."""
    spec = requests.spec if isinstance(requests, Workload) else None
    reqs, pool = _validated(requests, cost_model, kv_pool, record_steps, max_steps, max_model_len)
    windows, pool = _windowed_pool(cost_model, pool)  # the step engine's rule, and its refusal of a mismatched pool
    arrivals = [cost_model.to_time(r.arrival_s) for r in reqs]
    tokens = max(max_tokens, max((r.prompt_tokens for r in reqs), default=1))
    costs = TickCosts.build(cost_model, [*arrivals, *extra_times], windows, max_tokens=tokens)
    assert costs is not None
    run = _EventRun(reqs, arrivals, cost_model, costs, pool, record_steps, max_steps, max_model_len=max_model_len,
                    budget=budget)
    run.spec = spec
    return run


def on_fine_enough_clock(serve: Any, tokens: int = 1) -> Any:
    """``serve(max_tokens)`` from ``tokens``, started again on a finer clock (twice the tokens at least) while a
    step needs weights its clock does not cover (:class:`ClockTooCoarse`; a mixture of experts only)."""
    while True:
        try:
            return serve(tokens)
        except ClockTooCoarse as coarse:
            tokens = max(coarse.tokens, 2 * tokens)


def serve_serial_events(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    kv_pool: KVPool | None = None,
    max_model_len: int | None = None,
    record_steps: bool = False,
    max_steps: int | None = None,
) -> SimResult:
    """Serve one request at a time, first come first served, on the event engine.

    Parameters, Returns and Raises as :func:`~roofline.sim.serve_serial`, whose results this
    equals exactly (every request's times, the summary, ITL included, and the step table
    when recorded, here a :class:`StretchTable`).

    Notes
    -----
    Each request is one prefill step and a stretch of O - 1 decode steps priced in closed
    form, so the cost is O(1) per request whatever its length; the ITL percentiles come
    from a sweep over the requests' context intervals (a step's duration grows with its
    context). A cost model without stretch sums (float mode, or another class) is served
    by the step engine (:func:`~roofline.sim.serve_serial`) instead.

    Examples
    --------
    One request of 10^9 output tokens, exact, at once:

    >>> from roofline.sim import Request, UnitCostModel
    >>> r = serve_serial_events([Request(id=0, arrival_s=0, prompt_tokens=1, output_tokens=10**9)], UnitCostModel())
    >>> r.requests[0].handed_back_s, r.summary.steps
    (1000000000, 1000000000)
    """
    _refuse_closed_loop(requests, "serve_serial")
    if isinstance(stretch_terms(cost_model), str):
        return serve_serial(requests, cost_model, kv_pool=kv_pool, max_model_len=max_model_len,
                            record_steps=record_steps, max_steps=max_steps, engine="step")
    requests = _listed(requests)

    def serve(tokens: int) -> SimResult:
        run = _event_run(requests, cost_model, kv_pool, record_steps, max_steps, (), max_model_len,
                         max_tokens=tokens)
        run.serve_one_by_one()
        return run.result("serial", {"max_model_len": max_model_len, "engine": "event"})

    return on_fine_enough_clock(serve)


def serve_static_events(
    requests: Iterable[Request],
    cost_model: Any,
    *,
    batch_size: int = 8,
    max_wait: Any = None,
    kv_pool: KVPool | None = None,
    max_num_batched_tokens: int | None = None,
    max_model_len: int | None = None,
    record_steps: bool = False,
    max_steps: int | None = None,
) -> SimResult:
    """Static batching on the event engine.

    Parameters, Returns and Raises as :func:`~roofline.sim.serve_static`, whose results this
    equals exactly (every request's times, the summary, and the step table when recorded,
    here a :class:`StretchTable`).

    Notes
    -----
    A batch of m rows is one padded prefill and a stretch of o_max - 1 decode steps at
    context sum m (p_max + j); each row's finish is the closed-form sum up to its own last
    step. A cost model without stretch sums is served by
    :func:`~roofline.sim.serve_static` instead.

    Examples
    --------
    >>> from roofline.sim import Request, UnitCostModel
    >>> reqs = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=o) for i, o in enumerate([100, 1000])]
    >>> s = serve_static_events(reqs, UnitCostModel(), batch_size=2).summary
    >>> s.steps, s.long_run_useful_share
    (1000, Fraction(11, 20))
    """
    _refuse_closed_loop(requests, "serve_static")
    check_count("batch_size", batch_size, minimum=1)
    _opt_time("max_wait", max_wait)
    if max_num_batched_tokens is not None:
        check_count("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    if isinstance(stretch_terms(cost_model), str):
        return serve_static(requests, cost_model, batch_size=batch_size, max_wait=max_wait, kv_pool=kv_pool,
                            max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                            record_steps=record_steps, max_steps=max_steps, engine="step")
    extra = () if max_wait is None else (cost_model.to_time(max_wait),)
    requests = _listed(requests)

    def serve(tokens: int) -> SimResult:
        run = _event_run(requests, cost_model, kv_pool, record_steps, max_steps, extra, max_model_len,
                         max_num_batched_tokens, max_tokens=tokens)
        wait = None
        if max_wait is not None:
            w = cost_model.to_time(max_wait)
            wait = (run.clock.ticks(w), not isinstance(w, int))
        run.batch_size = batch_size
        run.serve_batches(batch_size, wait)
        return run.result("static", {"batch_size": batch_size,
                                     "max_wait_s": None if max_wait is None else float(max_wait),
                                     "max_num_batched_tokens": max_num_batched_tokens, "max_model_len": max_model_len,
                                     "engine": "event"})

    return on_fine_enough_clock(serve)


_policies._EVENT_ENGINE.update(serial=serve_serial_events, static=serve_static_events)
