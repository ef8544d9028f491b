"""Workloads: closed-loop clients and seeded open-loop generators (docs/conventions.md, "Workloads").

* :class:`ClosedLoop`: N clients, each sending its next request when its previous one is
  handed back, plus an optional think time ("concurrency N" benchmarks). The arrivals are
  created by the scheduler as it runs; :func:`~roofline.sim.serve_continuous` accepts it.
* Seeded generators (numpy's ``default_rng``; the same seed gives the same workload):
  arrival times (:func:`arrival_times`: Poisson at a rate, gamma with a coefficient of
  variation, or a burst at t = 0) and lengths (:func:`lengths`: fixed, uniform, capped
  exponential, lognormal, or resampled from a trace); :func:`synthetic_workload` combines
  them (with shared system prompts and multi-turn conversations whose block hashes name
  shared content, for prefix caching), :func:`anyscale_workload` is the Anyscale
  continuous-batching benchmark's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from typing import Any, overload

import attrs
import numpy as np

from .._checks import check_count, check_nonnegative, check_number, check_positive, check_scalar
from ..errors import InvalidValueError, WorkloadSizeError
from .requests import MAX_ARRIVAL_S, MAX_TOKENS, Request

__all__ = [
    "ClosedLoop",
    "Workload",
    "ARRIVAL_PROCESSES",
    "LENGTH_DISTRIBUTIONS",
    "TIME_RESOLUTION",
    "MAX_PROMPTS",
    "arrival_times",
    "lengths",
    "synthetic_workload",
    "anyscale_workload",
    "ANYSCALE_CAPS",
    "DEFAULT_TURN_GAP_S",
    "DEFAULT_HASH_BLOCK",
    "MAX_HASHED_BLOCKS",
]


def _clients(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_count(attribute.name, value, minimum=1)


def _think(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    check_scalar(attribute.name, value)
    check_nonnegative(attribute.name, value)
    if value > MAX_ARRIVAL_S:  # the arrivals it makes would pass it (and 10**400 is no float for to_dict)
        raise InvalidValueError(attribute.name, value, f"must be <= {MAX_ARRIVAL_S:.0e} s (MAX_ARRIVAL_S, the latest "
                                "arrival a request may have)")


def _lengths(value: Iterable[Any]) -> tuple[tuple[int, int], ...]:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise InvalidValueError("lengths", value, "expected a sequence of (prompt_tokens, output_tokens) pairs")
    out: list[tuple[int, int]] = []
    for i, pair in enumerate(value):
        if isinstance(pair, Request):
            pair = (pair.prompt_tokens, pair.output_tokens)
        try:
            p, o = pair
        except (TypeError, ValueError):
            raise InvalidValueError(f"lengths[{i}]", pair, "expected (prompt_tokens, output_tokens)") from None
        for field, tokens in ((f"lengths[{i}].prompt_tokens", p), (f"lengths[{i}].output_tokens", o)):
            check_count(field, tokens, minimum=1)
            if tokens > MAX_TOKENS:
                raise InvalidValueError(field, tokens, f"must be <= {MAX_TOKENS:.0e} (MAX_TOKENS)")
        out.append((int(p), int(o)))  # a numpy integer as a Python int (the Requests made from it take no numpy)
    return tuple(out)


@attrs.frozen
class ClosedLoop:
    """A closed-loop workload: ``clients`` clients send the requests of ``lengths`` in order.

    Parameters
    ----------
    clients : int >= 1
        N, the clients (the concurrency). Clients 0..N-1 send requests 0..N-1 at t = 0.
    lengths : sequence of (prompt_tokens, output_tokens) pairs, or of Requests (their arrival
        times are ignored)
        The requests in the order they are sent; M = len(lengths) requests in all.
    think_time_s : [s] >= 0, default 0
        Z: a client sends its next request Z after its previous one is handed back.
    seed : int or None
        The seed that drew the lengths (recorded with the result; not used here).

    Raises
    ------
    InvalidValueError
        A bad client count, think time or length.

    Notes
    -----
    docs/conventions.md, "Workloads": request N + k is sent by the client whose request is
    the (k + 1)-th to be handed back (ties: in the order the scheduler hands them back), at
    that hand-back time + Z. A request rejected on arrival (it can never fit, or exceeds
    ``max_model_len``) counts as handed back at its arrival. Over whole client cycles
    (Little's law), requests per second = N / (mean E2E + Z) exactly when rates are measured
    over the clients' mean span (see ``tests/test_sim_workloads.py``).

    Examples
    --------
    >>> from roofline.sim import ClosedLoop, UnitCostModel, serve_continuous
    >>> r = serve_continuous(ClosedLoop(clients=1, lengths=[(4, 3), (4, 2)]), UnitCostModel())
    >>> [(x.arrival_s, x.handed_back_s, x.client) for x in r.requests]
    [(0, 3, 0), (3, 5, 0)]
    """

    clients: int = attrs.field(validator=_clients)
    lengths: tuple[tuple[int, int], ...] = attrs.field(converter=_lengths)
    think_time_s: Any = attrs.field(default=0, validator=_think)
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description."""
        return {"kind": "closed_loop", "clients": self.clients, "requests": len(self.lengths),
                "think_time_s": float(self.think_time_s), "seed": self.seed}


# --------------------------------------------------------------------------- seeded generators

#: Arrival processes of :func:`arrival_times`.
ARRIVAL_PROCESSES = ("poisson", "gamma", "burst")
#: Length distributions of :func:`lengths` ("trace" resamples (P, O) pairs in :func:`synthetic_workload`).
LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "exponential", "lognormal", "trace")
#: Generated arrival times are rounded to this grid [s] (exact Fractions with small denominators).
TIME_RESOLUTION = Fraction(1, 10**6)
#: Most requests a generator makes at once (10^7, 500 times the shipped conversation trace): a
#: larger count would fill memory before the first step, so it is refused before it starts.
MAX_PROMPTS = 10**7
#: Least share of draws a length cap may keep (exponential, lognormal lengths are redrawn until <= cap):
#: below it, :func:`lengths` refuses the cap instead of drawing for ever (1% is 100 draws per length).
MIN_KEPT_SHARE = 0.01

#: Seconds from one turn of a generated conversation to the next (:func:`synthetic_workload`'s ``turn_gap_s``).
DEFAULT_TURN_GAP_S = 10
#: Tokens per hashed block of a generated workload (vLLM's default ``--block-size``, 16).
DEFAULT_HASH_BLOCK = 16
#: Most block hashes a generated workload holds (10^8, about 3 GB of Python ints; the shipped Mooncake
#: conversation trace has 0.3 million): more is refused before any is made, not left to fill memory.
MAX_HASHED_BLOCKS = 10**8

#: The caps of the Anyscale benchmark's output lengths [tokens].
ANYSCALE_CAPS = (32, 128, 512, 1536)


@attrs.frozen
class Workload:
    """Requests in arrival order with the description that generated them (the seed included).

    A sequence of :class:`~roofline.sim.Request`: pass it to any policy as the requests.

    Attributes
    ----------
    requests : tuple of Request
    spec : dict, JSON-ready: the generator, its parameters and its seed
    """

    requests: tuple[Request, ...]
    spec: dict[str, Any]

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    def __len__(self) -> int:
        return len(self.requests)

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Request, ...]: ...

    def __getitem__(self, index: int | slice) -> Request | tuple[Request, ...]:
        return self.requests[index]


def _rng(seed: Any) -> np.random.Generator:
    check_count("seed", seed, minimum=0)
    return np.random.default_rng(seed)


def _float_op(field: str, value: Any, op: Any) -> float:
    """``op()``, a float computed from ``value``, refused by ``field`` if it overflows or divides by zero."""
    try:
        out = float(op())
    except (OverflowError, ZeroDivisionError):
        out = math.inf
    if not math.isfinite(out) or out <= 0:
        raise InvalidValueError(field, value, "too large or too small to compute with floats")
    return out


def _check_n(field: str, n: Any) -> None:
    check_count(field, n, minimum=0)
    if n > MAX_PROMPTS:
        raise InvalidValueError(field, n, f"must be <= {MAX_PROMPTS:,} requests (MAX_PROMPTS)")


def _quantise(seconds: float) -> Fraction:
    return round(Fraction(seconds) / TIME_RESOLUTION) * TIME_RESOLUTION


def arrival_times(n: int, *, process: str = "poisson", rate: Any = None, cv: Any = 1,
                  seed: int = 0) -> list[Fraction]:
    """Seeded arrival times [s] of n requests, the first at 0.

    Parameters
    ----------
    n : int >= 0
    process : {"poisson", "gamma", "burst"}
        "poisson": gaps exponential with mean 1 / rate. "gamma": gaps gamma-distributed with
        mean 1 / rate and coefficient of variation ``cv`` (shape 1 / cv^2; cv = 1 is Poisson;
        vLLM's ``--burstiness`` is the shape, so cv = 1 / sqrt(burstiness)). "burst": every
        request at t = 0 (``rate`` ignored).
    rate : [requests/s] > 0 (not for "burst")
    cv : [1] > 0, default 1 ("gamma" only)
    seed : int >= 0

    Returns
    -------
    list of Fraction [s], non-decreasing, on the :data:`TIME_RESOLUTION` grid.

    Raises
    ------
    InvalidValueError
        A bad count, process, rate, cv or seed.

    Notes
    -----
    docs/conventions.md, "Workloads". The same arguments give the same times.

    Examples
    --------
    >>> arrival_times(3, process="burst")
    [Fraction(0, 1), Fraction(0, 1), Fraction(0, 1)]
    >>> t = arrival_times(20_000, rate=4, seed=1)
    >>> round(float(t[-1] / (len(t) - 1)), 2)
    0.25
    """
    _check_n("n", n)
    if not isinstance(process, str) or process not in ARRIVAL_PROCESSES:
        raise InvalidValueError("process", process, f"expected one of {', '.join(ARRIVAL_PROCESSES)}")
    rng = _rng(seed)
    if process == "burst":
        return [Fraction(0)] * n
    if rate is None:
        if n == 0:
            return []
        raise InvalidValueError("rate", rate, f"the {process} process needs a rate in requests/s")
    check_scalar("rate", rate)
    check_positive("rate", rate)
    mean = _float_op("rate", rate, lambda: 1 / float(rate))
    if process != "poisson":
        check_scalar("cv", cv)
        check_positive("cv", cv)
        shape = _float_op("cv", cv, lambda: 1 / float(cv) ** 2)
        scale = _float_op("cv", cv, lambda: mean / shape)
    if n == 0:
        return []
    gaps = rng.exponential(mean, n - 1) if process == "poisson" else rng.gamma(shape, scale, n - 1)
    cumulative = np.cumsum(gaps)
    if n > 1 and not (np.isfinite(cumulative[-1]) and cumulative[-1] <= MAX_ARRIVAL_S):
        raise InvalidValueError("rate", rate, f"the arrivals at this rate pass MAX_ARRIVAL_S={MAX_ARRIVAL_S:.0e} s")
    times = [Fraction(0)]
    for t in cumulative:
        times.append(max(times[-1], _quantise(float(t))))
    return times


def lengths(n: int, *, distribution: str = "fixed", mean: int, range_ratio: Any = 0, cap: int | None = None,
            sigma: Any = 1, seed: int = 0) -> list[int]:
    """Seeded token lengths (prompt or output) of n requests.

    Parameters
    ----------
    n : int >= 0
    distribution : {"fixed", "uniform", "exponential", "lognormal"}
        "fixed": ``mean`` each. "uniform": integers uniform on
        [max(1, floor(mean (1 - r))), ceil(mean (1 + r))] (vLLM's random dataset with
        ``--random-range-ratio`` r). "exponential": round(X), X exponential of mean
        ``mean``, kept only if <= ``cap`` (redrawn otherwise; the Anyscale benchmark's
        ``capped_exponential``), 0 served as 1. "lognormal": round(X), X lognormal with mean
        ``mean`` and log-space standard deviation ``sigma`` (kept only if <= ``cap`` when a
        cap is given), 0 served as 1.
    mean : int >= 1 [tokens]
    range_ratio : [1] in [0, 1), default 0 ("uniform")
    cap : int >= 1 or None [tokens] ("exponential": required; "lognormal": optional)
        Refused with "fixed" and "uniform" (not drawn against a cap), and when it keeps under
        :data:`MIN_KEPT_SHARE` of the draws (they are redrawn until kept).
    sigma : > 0, default 1 ("lognormal")
    seed : int >= 0

    Returns
    -------
    list of int >= 1 [tokens]

    Raises
    ------
    InvalidValueError
        A bad count, distribution, mean, ratio, cap, sigma or seed.

    Notes
    -----
    docs/conventions.md, "Workloads". Sources: vLLM ``benchmarks/benchmark_serving.py``
    (random dataset); anyscale/llm-continuous-batching-benchmarks, ``benchmark_throughput.py``
    (``gen_random_response_lens``).

    Examples
    --------
    >>> lengths(3, mean=512)
    [512, 512, 512]
    >>> max(lengths(1000, distribution="exponential", mean=128, cap=32, seed=0))
    32
    """
    _check_n("n", n)
    check_count("mean", mean, minimum=1)
    if not isinstance(distribution, str) or distribution not in LENGTH_DISTRIBUTIONS[:-1]:
        raise InvalidValueError("distribution", distribution,
                                f"expected one of {', '.join(LENGTH_DISTRIBUTIONS[:-1])}")
    if cap is not None:
        check_count("cap", cap, minimum=1)
        if cap > MAX_TOKENS:  # a float meets it below (the kept share): 10**400 would overflow there
            raise InvalidValueError("cap", cap, f"must be <= {MAX_TOKENS:.0e} (MAX_TOKENS)")
    if cap is not None and distribution in ("fixed", "uniform"):
        raise InvalidValueError("cap", cap, f"caps exponential and lognormal lengths; {distribution} lengths "
                                "are not drawn against a cap (they would exceed it)")
    rng = _rng(seed)
    if distribution == "fixed":
        return [mean] * n
    if distribution == "uniform":
        check_scalar("range_ratio", range_ratio)
        check_number("range_ratio", range_ratio)
        if not 0 <= range_ratio < 1:
            raise InvalidValueError("range_ratio", range_ratio, "must be in [0, 1)")
        low = max(1, math.floor(mean * (1 - Fraction(range_ratio))))
        high = math.ceil(mean * (1 + Fraction(range_ratio)))
        return [int(x) for x in rng.integers(low, high + 1, n)]
    if distribution == "exponential":
        if cap is None:
            raise InvalidValueError("cap", cap, "the capped exponential needs a cap in tokens")
        # P(round(X) <= cap) = P(X < cap + 1/2)
        kept = -math.expm1(-(cap + 0.5) / mean)

        def draw() -> float:
            return float(rng.exponential(mean))
    else:
        check_scalar("sigma", sigma)
        check_positive("sigma", sigma)
        s = float(sigma)
        mu = math.log(mean) - s * s / 2
        kept = 1.0 if cap is None else 0.5 * math.erfc(-(math.log(cap + 0.5) - mu) / (s * math.sqrt(2)))

        def draw() -> float:
            return float(rng.lognormal(mu, s))
    if kept < MIN_KEPT_SHARE:  # the draws are redrawn until kept: a cap that keeps almost none never ends
        raise InvalidValueError("cap", cap, f"keeps a share {kept:.2g} of the {distribution} draws of mean {mean}, "
                                f"under {MIN_KEPT_SHARE:g} (they are redrawn until kept, so the draws would not end "
                                "in time): raise the cap or lower the mean")
    out: list[int] = []
    while len(out) < n:
        value = round(draw())
        if cap is None or value <= cap:
            out.append(max(1, value))
    return out


def synthetic_workload(
    num_prompts: int,
    *,
    arrival: str = "poisson",
    rate: Any = None,
    cv: Any = 1,
    input_len: int = 1024,
    output_len: int = 128,
    input_distribution: str = "fixed",
    output_distribution: str = "fixed",
    range_ratio: Any = 0,
    input_cap: int | None = None,
    output_cap: int | None = None,
    sigma: Any = 1,
    trace: Sequence[Request] | None = None,
    seed: int = 0,
    prefix_len: int = 0,
    num_prefixes: int = 1,
    num_turns: int = 1,
    turn_gap_s: Any = DEFAULT_TURN_GAP_S,
    hash_block_size: int = DEFAULT_HASH_BLOCK,
) -> Workload:
    """A seeded open-loop workload: arrivals from :func:`arrival_times`, lengths from :func:`lengths`.

    Parameters
    ----------
    num_prompts : int >= 0 (vLLM's ``--num-prompts``)
    arrival : {"poisson", "gamma", "burst"}; rate : [requests/s]; cv : [1]
        As :func:`arrival_times`.
    input_len, output_len : int >= 1 [tokens], the means
    input_distribution, output_distribution : {"fixed", "uniform", "exponential", "lognormal", "trace"}
        As :func:`lengths`; "trace" (both must be "trace") resamples (prompt, output) pairs
        of ``trace`` uniformly with replacement, keeping each pair together.
    range_ratio, sigma : as :func:`lengths`; input_cap, output_cap : its ``cap``
    trace : sequence of Request or None
    seed : int >= 0
        The arrivals, prompts, outputs and prefix choices use seeds derived from it (numpy's
        SeedSequence), so changing one distribution does not change the others' draws.
    prefix_len : int >= 0 [tokens], default 0
        S: a shared system prompt prepended to every first turn's drawn input length (vLLM's
        ``--random-prefix-len``).
    num_prefixes : int >= 1, default 1
        N distinct prefixes of S tokens; each conversation draws one uniformly (> 1 needs S > 0).
    num_turns : int >= 1, default 1
        T turns per conversation: turn t + 1's prompt is turn t's prompt, its output, then a new
        user message of a drawn input length. ``num_prompts`` counts conversations (T x
        ``num_prompts`` requests).
    turn_gap_s : [s] >= 0, default 10 (:data:`DEFAULT_TURN_GAP_S`)
        Turn t + 1 arrives this long after turn t (open loop), on the :data:`TIME_RESOLUTION` grid.
    hash_block_size : int >= 1 [tokens/block], default 16 (:data:`DEFAULT_HASH_BLOCK`, vLLM's block size)
        The block of the requests' ``block_hashes``; equal content up to a block gives equal hashes.

    Returns
    -------
    Workload (ids 0, 1, ... in arrival order, ties by conversation then turn; ``spec`` records
    every parameter and the seed). With S > 0 or T > 1 each request carries ``block_hashes`` of
    its full blocks (single-turn: of its shared-prefix blocks only).

    Raises
    ------
    InvalidValueError
        Any bad parameter, named by its field (``arrival``, not arrival_times' ``process``; ``trace[i]``
        for an element of ``trace`` that is not a Request; ``range_ratio`` and ``sigma`` whatever the
        distributions, as the spec records them), or "trace" without a trace (or for only one of the two
        lengths); ``num_prefixes`` above 1 without a ``prefix_len``; ``num_turns`` whose requests pass
        :data:`MAX_PROMPTS` or whose prompts grow past MAX_TOKENS; ``num_turns`` (or ``prefix_len``, single
        turns) whose block hashes would pass :data:`MAX_HASHED_BLOCKS`; ``turn_gap_s`` whose last turn
        arrives past MAX_ARRIVAL_S.

    Notes
    -----
    docs/conventions.md, "Workloads" (shared prefixes and conversations).

    Examples
    --------
    >>> w = synthetic_workload(4, arrival="burst", input_len=512, output_len=64, seed=7)
    >>> [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in w][:1], w.spec["seed"]
    ([(Fraction(0, 1), 512, 64)], 7)
    """
    _check_n("num_prompts", num_prompts)
    for field, name in (("arrival", arrival), ("input_distribution", input_distribution),
                        ("output_distribution", output_distribution)):
        if not isinstance(name, str):
            raise InvalidValueError(field, name, "expected a name (str)")
    if arrival not in ARRIVAL_PROCESSES:  # arrival_times calls it process; here it is arrival
        raise InvalidValueError("arrival", arrival, f"expected one of {', '.join(ARRIVAL_PROCESSES)}")
    check_count("seed", seed, minimum=0)
    # recorded in the spec as floats whatever the distributions, so checked whatever the distributions
    check_scalar("range_ratio", range_ratio)
    check_number("range_ratio", range_ratio)
    if not 0 <= range_ratio < 1:
        raise InvalidValueError("range_ratio", range_ratio, "must be in [0, 1)")
    check_scalar("sigma", sigma)
    check_positive("sigma", sigma)
    _float_op("sigma", sigma, lambda: sigma)
    if trace is not None:
        if not isinstance(trace, Sequence) or isinstance(trace, (str, bytes)):
            raise InvalidValueError("trace", trace, "expected a sequence of roofline.sim.Request (load_trace's)")
        for i, request in enumerate(trace):
            if not isinstance(request, Request):
                raise InvalidValueError(f"trace[{i}]", request, "expected a roofline.sim.Request")
    for field, mean in (("input_len", input_len), ("output_len", output_len)):
        if "trace" not in (input_distribution, output_distribution):
            check_count(field, mean, minimum=1)
            if mean > MAX_TOKENS:
                raise InvalidValueError(field, mean, f"must be <= {MAX_TOKENS:.0e} (MAX_TOKENS)")
    gap = _check_turns(num_prompts, prefix_len, num_prefixes, num_turns, turn_gap_s, hash_block_size)
    # spawn(4)'s first three children are spawn(3)'s: the prefix draws add a stream, changing no other draw
    arrival_seed, input_seed, output_seed, prefix_seed = (int(s.generate_state(1)[0])
                                                          for s in np.random.SeedSequence(seed).spawn(4))
    times = arrival_times(num_prompts, process=arrival, rate=rate, cv=cv, seed=arrival_seed)
    count = num_prompts * num_turns  # one drawn (input, output) pair per turn: conversation c's turn t is c T + t
    if "trace" in (input_distribution, output_distribution):
        if input_distribution != output_distribution:
            raise InvalidValueError("input_distribution", input_distribution,
                                    "resampling a trace draws (prompt, output) pairs: give 'trace' for both")
        if not trace:
            raise InvalidValueError("trace", trace, "resampling needs a non-empty trace")
        picks = np.random.default_rng(input_seed).integers(0, len(trace), count)
        prompts = [trace[int(k)].prompt_tokens for k in picks]
        outputs = [trace[int(k)].output_tokens for k in picks]
    else:
        drawn = []
        for which, dist, mean, cap, stream in (("input", input_distribution, input_len, input_cap, input_seed),
                                               ("output", output_distribution, output_len, output_cap, output_seed)):
            try:
                drawn.append(lengths(count, distribution=dist, mean=mean, range_ratio=range_ratio, cap=cap,
                                     sigma=sigma, seed=stream))
            except InvalidValueError as err:  # name this workload's field: input_cap, output_distribution...
                ours = {"cap": f"{which}_cap", "distribution": f"{which}_distribution",
                        "mean": f"{which}_len"}.get(err.field)
                if ours is None:
                    raise
                raise InvalidValueError(ours, err.value, err.reason) from None
        prompts, outputs = drawn
    requests = _conversations(times, prompts, outputs, prefix_len, num_prefixes, num_turns, gap, hash_block_size,
                              prefix_seed)
    spec = {"kind": "open_loop", "num_prompts": num_prompts, "arrival": arrival,
            "rate": None if rate is None or arrival == "burst" else float(rate),
            "cv": float(cv) if arrival == "gamma" else None, "input_len": input_len, "output_len": output_len,
            "input_distribution": input_distribution, "output_distribution": output_distribution,
            "range_ratio": float(range_ratio), "input_cap": input_cap, "output_cap": output_cap,
            "sigma": float(sigma), "seed": seed, "prefix_len": prefix_len, "num_prefixes": num_prefixes,
            "num_turns": num_turns, "turn_gap_s": float(gap) if num_turns > 1 else None,
            "hash_block_size": hash_block_size if prefix_len or num_turns > 1 else None}
    return Workload(requests, spec)


def _check_turns(num_prompts: int, prefix_len: Any, num_prefixes: Any, num_turns: Any, turn_gap_s: Any,
                 hash_block_size: Any) -> Fraction:
    """The prefix and conversation parameters checked (docs/conventions.md, "Workloads"); the gap [s] on the grid."""
    check_count("prefix_len", prefix_len, minimum=0)
    if prefix_len > MAX_TOKENS:
        raise InvalidValueError("prefix_len", prefix_len, f"must be <= {MAX_TOKENS:.0e} (MAX_TOKENS)")
    check_count("num_prefixes", num_prefixes, minimum=1)
    if num_prefixes > 1 and not prefix_len:
        raise InvalidValueError("num_prefixes", num_prefixes, "distinct prefixes need a prefix_len above 0")
    if num_prefixes > MAX_PROMPTS:
        raise InvalidValueError("num_prefixes", num_prefixes, f"must be <= {MAX_PROMPTS:,} (MAX_PROMPTS)")
    check_count("num_turns", num_turns, minimum=1)
    if num_prompts * num_turns > MAX_PROMPTS:
        raise InvalidValueError("num_turns", num_turns, f"{num_prompts:,} conversations of {num_turns:,} turns "
                                f"pass MAX_PROMPTS = {MAX_PROMPTS:,} requests")
    check_count("hash_block_size", hash_block_size, minimum=1)
    if hash_block_size > MAX_TOKENS:
        raise InvalidValueError("hash_block_size", hash_block_size, f"must be <= {MAX_TOKENS:.0e} (MAX_TOKENS)")
    check_scalar("turn_gap_s", turn_gap_s)
    check_nonnegative("turn_gap_s", turn_gap_s)
    if turn_gap_s * (num_turns - 1) > MAX_ARRIVAL_S or turn_gap_s > MAX_ARRIVAL_S:
        raise InvalidValueError("turn_gap_s", turn_gap_s, f"the last turn would arrive past MAX_ARRIVAL_S = "
                                f"{MAX_ARRIVAL_S:.0e} s")
    return round(Fraction(turn_gap_s) / TIME_RESOLUTION) * TIME_RESOLUTION


def _conversations(times: Sequence[Fraction], drawn_in: Sequence[int], drawn_out: Sequence[int], prefix_len: int,
                   num_prefixes: int, num_turns: int, gap: Fraction, block: int, seed: int) -> tuple[Request, ...]:
    """The requests of :func:`synthetic_workload`: conversation c's turn t from draw c T + t, its prefix drawn
    uniformly, its hashes naming its content block by block (docs/conventions.md, "Workloads")."""
    prefix_of = np.random.default_rng(seed).integers(0, num_prefixes, len(times)) if num_prefixes > 1 else None
    hashed = prefix_len > 0 or num_turns > 1
    if hashed and len(times):  # the sizes first, at numpy's speed: 10^5 turns took minutes to refuse
        _check_hash_budget(times, drawn_in, drawn_out, prefix_len, num_turns, gap, block)
    ids: dict[tuple[int, int, int], int] = {}  # (0, prefix, j) or (1, conversation, j) -> its hash id
    made = []
    for c, start in enumerate(times):
        k = 0 if prefix_of is None else int(prefix_of[c])
        prompt = prefix_len
        for t in range(num_turns):
            d = c * num_turns + t
            prompt += drawn_in[d] if t == 0 else drawn_out[d - 1] + drawn_in[d]
            if prompt > MAX_TOKENS:
                raise InvalidValueError("num_turns", num_turns, f"turn {t + 1}'s prompt of {prompt:.3e} tokens "
                                        f"passes MAX_TOKENS = {MAX_TOKENS:.0e}")
            if start + t * gap > MAX_ARRIVAL_S:
                raise InvalidValueError("turn_gap_s", float(gap), f"turn {t + 1} would arrive past MAX_ARRIVAL_S = "
                                        f"{MAX_ARRIVAL_S:.0e} s")
            full = 0 if not hashed else prompt // block if num_turns > 1 else min(prompt, prefix_len) // block
            made.append((start + t * gap, c, t, prompt, drawn_out[d], (k, full)))
    total = sum(full for *_, (_, full) in made)
    if total > MAX_HASHED_BLOCKS:  # each hashed block is a Python int held by its request
        raise _too_many_hashes(num_turns, prefix_len, sum(x[3] if num_turns > 1 else min(x[3], prefix_len)
                                                            for x in made), total, block)
    made.sort(key=lambda x: (x[0], x[1], x[2]))
    out = []
    for i, (a, c, _, p, o, (k, full)) in enumerate(made):
        h = tuple(ids.setdefault((0, k, j) if (j + 1) * block <= prefix_len else (1, c, j), len(ids))
                  for j in range(full))
        out.append(Request(id=i, arrival_s=a, prompt_tokens=p, output_tokens=o, block_hashes=h,
                           hash_block_size=block if h else None))
    return tuple(out)


def _too_many_hashes(num_turns: int, prefix_len: int, tokens: Any, blocks: Any, block: int) -> WorkloadSizeError:
    """The refusal of a workload whose block hashes pass :data:`MAX_HASHED_BLOCKS` (field num_turns, or
    prefix_len for single turns), with the tokens hashed: its prompts' (single turns: their shared prefixes')."""
    field, value = ("num_turns", num_turns) if num_turns > 1 else ("prefix_len", prefix_len)
    return WorkloadSizeError(field, value, f"the prompts need {blocks:.3e} block hashes of {block} tokens, more "
                             f"than MAX_HASHED_BLOCKS = {MAX_HASHED_BLOCKS:,}: give a larger hash_block_size "
                             "or shorter prompts", prompt_tokens=tokens, blocks=blocks, block=block)


def _check_hash_budget(times: Sequence[Fraction], drawn_in: Sequence[int], drawn_out: Sequence[int],
                       prefix_len: int, num_turns: int, gap: Fraction, block: int) -> None:
    """Refuse, before any request is made, the drawn conversations whose block hashes clearly pass
    :data:`MAX_HASHED_BLOCKS` (by more than 1 %, counted in float64, exact below 2^53 tokens a prompt).

    Where the requests' own loop would refuse something else first (a prompt past MAX_TOKENS, a turn past
    MAX_ARRIVAL_S) or the count is within 1 % of the limit, nothing is decided here: the loop decides
    exactly, so that this check changes no outcome, only when it comes.
    """
    n = len(times)
    grow = np.asarray(drawn_in, dtype=np.float64).reshape(n, num_turns)
    if num_turns > 1:
        grow[:, 1:] += np.asarray(drawn_out, dtype=np.float64).reshape(n, num_turns)[:, :-1]
    prompts = prefix_len + np.cumsum(grow, axis=1)
    if not prompts.max() < 0.99 * MAX_TOKENS or max(times) + (num_turns - 1) * gap > MAX_ARRIVAL_S:
        return
    hashed = prompts if num_turns > 1 else np.minimum(prompts, prefix_len)  # single turns: the prefix only
    blocks = float(np.floor_divide(hashed, block).sum())
    if blocks > 1.01 * MAX_HASHED_BLOCKS:
        raise _too_many_hashes(num_turns, prefix_len, float(hashed.sum()), blocks, block)


def anyscale_workload(cap: int, *, seed: int = 0, num_prompts: int = 1000) -> Workload:
    """The Anyscale continuous-batching benchmark's workload: a burst of 512-token prompts, capped exponential outputs.

    Parameters
    ----------
    cap : int >= 1 [tokens], the output cap (the benchmark's: 32, 128, 512, 1,536)
    seed : int >= 0
    num_prompts : int >= 0, default 1,000

    Returns
    -------
    Workload: ``num_prompts`` requests at t = 0, 512 prompt tokens, outputs round(X) with X
    exponential of mean 128 kept if <= cap (0 served as 1).

    Raises
    ------
    InvalidValueError

    Notes
    -----
    Anyscale, "How continuous batching enables 23x throughput in LLM inference while reducing
    p50 latency" (2023); anyscale/llm-continuous-batching-benchmarks (``benchmark_throughput.py``).

    Examples
    --------
    >>> w = anyscale_workload(32)
    >>> len(w), {r.prompt_tokens for r in w}, max(r.output_tokens for r in w)
    (1000, {512}, 32)
    """
    return synthetic_workload(num_prompts, arrival="burst", input_len=512, output_len=128,
                              output_distribution="exponential", output_cap=cap, seed=seed)
