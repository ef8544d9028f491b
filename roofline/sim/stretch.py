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

The core, for the policies built on it (:mod:`roofline.sim.batches`, :mod:`roofline.sim.continuous`, on the
stretch clock of :mod:`roofline.sim.clock`):

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

The step table of serial and static runs on this clock (:class:`StretchTable`) stores one row
per batch and expands a stretch into its steps only when they are read.

Conventions: docs/conventions.md, "One step" and "Serving policies".
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

from .._checks import check_count
from ..errors import InvalidValueError
from ..formulas.stretch import lines_steps_until, lines_sum
from .cost import stretch_terms
from .kv import KVPool, LayerWindows, held_kv, prompt_pairs
from .results import DECODE, PREFILL, StepRecord, StepTable

__all__ = [
    "TickClock",
    "TickCosts",
    "advance",
    "blocks_growth",
    "first_pool_overflow",
    "StretchTable",
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

    __slots__ = ("clock", "wm", "km", "kt", "fc", "ac", "oh", "pr", "sr", "unit_decode", "unit_prefill",
                 "decode_fraction", "prefill_fraction", "windows", "varying", "max_tokens", "_weights", "_wm", "_ar0",
                 "_ar1", "_power", "_model", "_rows")

    def __init__(self, clock: TickClock, *, wm: int = 0, km: int = 0, fc: int = 0, ac: int = 0, oh: int = 0,
                 unit_decode: int | None = None, unit_prefill: int | None = None, decode_fraction: bool = True,
                 prefill_fraction: bool = True, kt: int | None = None, windows: LayerWindows | None = None,
                 weights: Any = None, link: tuple[int, int] = (0, 0), max_tokens: int = 0, pr: int = 0,
                 sr: int = 0) -> None:
        self.clock = clock
        self.wm, self.km, self.fc, self.ac, self.oh = wm, km, fc, ac, oh
        self.pr = pr  # ticks each decode row adds to its step, outside the max (StretchTerms.per_row)
        self.sr = sr  # ticks of memory each decode row's recurrent state takes, inside the max (StretchTerms.state)
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
        self._rows: dict[int, tuple[int, int]] = {}  # batch -> (decode_weights, decode_overhead): per batch, once

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
                    link=(t(terms.link_latency), t(terms.link_per_token)), max_tokens=max_tokens,
                    pr=t(terms.per_row), sr=t(terms.state))
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

    def decode_weights(self, batch: int) -> int:
        """Ticks of memory a decode step of ``batch`` rows moves whatever its contexts: :meth:`weights` plus the
        rows' recurrent states (a hybrid model; 0 otherwise)."""
        return self.weights(batch) + self.sr * batch

    def decode_overhead(self, batch: int) -> int:
        """Ticks outside the max of a decode step of ``batch`` rows: :meth:`overhead` plus ``batch`` x pr."""
        return self.overhead(batch) + self.pr * batch

    def _decode_rows(self, batch: int) -> tuple[int, int]:
        """(:meth:`decode_weights`, :meth:`decode_overhead`) of ``batch`` rows, made once per batch (a stretch's
        closed form and each decode step read them)."""
        rows = self._rows.get(batch)
        if rows is None:
            rows = self._rows[batch] = (self.decode_weights(batch), self.decode_overhead(batch))
        return rows

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
        return lines_sum(self.decode_weights(batch) + self.km * s0, self.km * batch * slope,
                         self.fc * batch + self.ac * s0, self.ac * batch * slope, self.decode_overhead(batch), steps)

    def decode(self, batch: int, context_sum: int) -> int:
        """Ticks of one decode step (:func:`roofline.formulas.step_time` x D)."""
        if self.unit_decode is not None:
            return self.unit_decode
        weights, overhead = self._decode_rows(batch)
        m = weights + self.km * context_sum
        c = self.fc * batch + self.ac * context_sum
        return (m if m >= c else c) + overhead

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
        m = self.weights(n) + self.sr * decode_rows + self.km * (context_sum + cached_tokens) + self.kt * prefill_tokens
        c = self.fc * n + self.ac * (context_sum + attention_pairs)
        return (m if m >= c else c) + self.overhead(n) + self.pr * decode_rows

    def lines(self, batch: int, context_sum: int, slope: int | None = None) -> tuple[int, int, int, int, int]:
        """(m0, ms, c0, cs, oh): step j of the stretch lasts max(m0 + ms j, c0 + cs j) + oh ticks.

        ``slope``: what the context sum grows by per step (None: ``batch``, one token per row; with
        sliding windows, the layers still growing, summed over the rows: token-layers per step).
        """
        if self.unit_decode is not None:
            return self.unit_decode, 0, 0, 0, 0
        grow = batch if slope is None else slope
        weights, overhead = self._decode_rows(batch)
        return (weights + self.km * context_sum, self.km * grow, self.fc * batch + self.ac * context_sum,
                self.ac * grow, overhead)

    def stretch(self, batch: int, context_sum: int, steps: int, slope: int | None = None) -> int:
        """Ticks of ``steps`` decode steps of a fixed batch whose context sum starts at ``context_sum`` and grows by
        ``slope`` per step (None: ``batch``; see :meth:`lines`).

        :func:`roofline.formulas.stretch_time` x D, in O(1) (the line kernel on integers).
        """
        if self.unit_decode is not None:
            return self.unit_decode * steps
        return lines_sum(*self.lines(batch, context_sum, slope), steps)

    def steps_until(self, batch: int, context_sum: int, target: int, slope: int | None = None) -> int:
        """The least n >= 0 with ``stretch(batch, context_sum, n, slope) >= target`` (exact; target in ticks)."""
        if self.unit_decode is not None:
            return 0 if target <= 0 else -(-target // self.unit_decode)
        return lines_steps_until(*self.lines(batch, context_sum, slope), target)


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

    def add_batch(self, start: int, start_fraction: bool, rows: int, p_max: int, o_max: int, prompt_sum: int,
                  outputs: list[int] | None) -> None:
        """One static batch of ``rows`` rows starting at ``start`` ticks (a Fraction in the step clock's types when
        ``start_fraction``): prompts padded to ``p_max`` (``prompt_sum`` real tokens), ``outputs`` the rows'
        output lengths sorted (None for one row: [o_max])."""
        self._b_first.append(self._n)
        self._b_start.append(int(start))
        self._b_start_fraction.append(start_fraction)
        self._b_rows.append(rows)
        self._b_p_max.append(p_max)
        self._b_o_max.append(o_max)
        self._b_prompt_sum.append(prompt_sum)
        self._b_outputs.append(outputs)
        self._n += o_max

    def add_prefill(self, *args: Any) -> None:
        """Not used: the stretch clock adds whole batches (:meth:`add_batch`)."""
        raise TypeError("a StretchTable is filled batch by batch")

    def add_decode(self, *args: Any) -> None:
        """Not used: the stretch clock adds whole batches (:meth:`add_batch`)."""
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


def on_fine_enough_clock(serve: Any, tokens: int = 1) -> Any:
    """``serve(max_tokens)`` from ``tokens``, started again on a finer clock (twice the tokens at least) while a
    step needs weights its clock does not cover (:class:`ClockTooCoarse`; a mixture of experts only)."""
    while True:
        try:
            return serve(tokens)
        except ClockTooCoarse as coarse:
            tokens = max(coarse.tokens, 2 * tokens)
