"""The most loaded rank of expert parallelism: exact expectation by enumeration, and sampled (docs/conventions.md,
"Expert parallelism").

Under uniform routing (each of a step's B tokens picks k distinct experts of E, every k-subset equally
likely, tokens independent; R ranks of E / R experts each) the tokens reaching one given rank, N_r, are
Binomial(B, 1 - q) (:func:`roofline.formulas.ranks_reached`: their mean is B (1 - q)), but the R counts are
not independent, and E[max_r N_r], what the slowest rank's dispatch carries, has no closed form. This module
computes it two ways, neither a registered SymPy formula:

* :func:`expected_max_rank_load`: exact (a Fraction), by a dynamic programme over the tokens whose state is
  the sorted vector of the R counts (ranks are interchangeable under uniform routing), for small R and B
  (its domain is stated there);
* :func:`sampled_max_rank_load`: Monte Carlo with a seed (float, with its standard error), for any size.

Both are checked against each other and against a hand enumeration in proof p21 and tests. The step time is
not priced with them: the roofline step stays at the mean rank, a lower bound (the slowest rank's share is
reported in docs/parallelism.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from math import comb
from typing import Any

import numpy as np

from ._checks import check_int
from .errors import InvalidValueError

__all__ = ["reach_set_counts", "expected_max_rank_load", "sampled_max_rank_load", "MAX_STATES"]

#: The most count vectors (multisets of R counts in 0..B, C(B + R, R)) :func:`expected_max_rank_load` enumerates.
MAX_STATES = 5_000


def _check(num_experts: Any, experts_per_token: Any, expert_parallel_size: Any, batch: Any) -> tuple[int, ...]:
    check_int("num_experts", num_experts, minimum=1)
    check_int("experts_per_token", experts_per_token, minimum=1)
    check_int("expert_parallel_size", expert_parallel_size, minimum=1)
    check_int("batch", batch, minimum=1)
    E, k, R, B = int(num_experts), int(experts_per_token), int(expert_parallel_size), int(batch)
    if k > E:
        raise InvalidValueError("experts_per_token", k, f"exceeds num_experts={E} (k distinct experts)")
    if E % R:
        raise InvalidValueError("expert_parallel_size", R, f"does not divide num_experts={E} (E / R experts a rank)")
    return E, k, R, B


def reach_set_counts(*, num_experts: int, experts_per_token: int, expert_parallel_size: int) -> tuple[int, ...]:
    """k-subsets of the E experts whose experts sit on exactly a given set of j ranks, for j = 0 .. R [subsets].

    By inclusion-exclusion over the set's ranks, m = E / R experts each:
    a_j = sum_{i=0}^{j} (-1)^i C(j, i) C((j - i) m, k); sum_j C(R, j) a_j = C(E, k), and a token reaches a given
    set of j ranks exactly with probability a_j / C(E, k).

    Raises
    ------
    InvalidValueError
        Sizes that are not integers >= 1, k > E, or R not dividing E (naming the field).

    Examples
    --------
    >>> reach_set_counts(num_experts=4, experts_per_token=2, expert_parallel_size=2)  # experts {0,1} | {2,3}
    (0, 1, 4)
    """
    E, k, R, _ = _check(num_experts, experts_per_token, expert_parallel_size, 1)
    m = E // R
    return tuple(sum((-1) ** i * comb(j, i) * comb((j - i) * m, k) for i in range(j + 1)) for j in range(R + 1))


def _raises(groups: list[tuple[int, int]], j: int) -> Iterator[tuple[tuple[int, ...], int]]:
    """Ways to add 1 to j of the positions, grouped by equal counts: (how many of each group, multiplicity)."""
    if not groups:
        if j == 0:
            yield (), 1
        return
    (_, size), rest = groups[0], groups[1:]
    room = sum(s for _, s in rest)
    for t in range(max(0, j - room), min(size, j) + 1):
        for tail, ways in _raises(rest, j - t):
            yield (t, *tail), comb(size, t) * ways


def expected_max_rank_load(*, num_experts: int, experts_per_token: int, expert_parallel_size: int,
                           batch: int) -> Fraction:
    """E[max_r N_r]: the expected tokens of a step of B reaching the most loaded of R ranks [tokens], exact.

    N_r counts the step's tokens with at least one of their k experts on rank r (each such token's hidden
    state is dispatched to r once, docs/conventions.md, "Expert parallelism"); E[N_r] = B (1 - q) for every r.
    The expectation is a sum over the B tokens' reached-rank sets, enumerated as a dynamic programme over the
    tokens on the sorted count vector (each token adds 1 to the ranks of a set of j ranks with probability
    a_j / C(E, k), :func:`reach_set_counts`), in integers over the common denominator C(E, k)^B.

    Parameters
    ----------
    num_experts : int >= 1 (E); experts_per_token : int in [1, E] (k); expert_parallel_size : int >= 1 dividing E
    (R); batch : int >= 1 (B)

    Returns
    -------
    Fraction [tokens], in [B (1 - q), B]; B (1 - q) = B at R = 1.

    Raises
    ------
    InvalidValueError
        As :func:`reach_set_counts`, a batch not an integer >= 1, or a size past the domain: C(B + R, R) >
        :data:`MAX_STATES` count vectors (field ``batch``; :func:`sampled_max_rank_load` takes any size).

    Examples
    --------
    >>> expected_max_rank_load(num_experts=4, experts_per_token=2, expert_parallel_size=2, batch=2)
    Fraction(35, 18)
    """
    E, k, R, B = _check(num_experts, experts_per_token, expert_parallel_size, batch)
    if comb(B + R, R) > MAX_STATES:
        raise InvalidValueError("batch", B, f"with expert_parallel_size={R} the exact enumeration's C(B + R, R) = "
                                f"{comb(B + R, R):,} count vectors exceed {MAX_STATES:,}: sampled_max_rank_load")
    a = reach_set_counts(num_experts=E, experts_per_token=k, expert_parallel_size=R)
    states: dict[tuple[int, ...], int] = {(0,) * R: 1}
    for _ in range(B):
        nxt: dict[tuple[int, ...], int] = {}
        for counts, weight in states.items():
            groups: list[tuple[int, int]] = []
            for c in counts:  # sorted descending: runs of equal counts
                if groups and groups[-1][0] == c:
                    groups[-1] = (c, groups[-1][1] + 1)
                else:
                    groups.append((c, 1))
            for j in range(1, min(k, R) + 1):
                if not a[j]:
                    continue
                for raised, ways in _raises(groups, j):
                    new: list[int] = []
                    for (c, size), t in zip(groups, raised, strict=True):
                        new += [c + 1] * t + [c] * (size - t)
                    key = tuple(sorted(new, reverse=True))
                    nxt[key] = nxt.get(key, 0) + weight * ways * a[j]
        states = nxt
    total = sum(w * counts[0] for counts, w in states.items())
    return Fraction(total, comb(E, k) ** B)


def sampled_max_rank_load(*, num_experts: int, experts_per_token: int, expert_parallel_size: int, batch: int,
                          trials: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Monte Carlo E[max_r N_r] [tokens] and its standard error [tokens], seeded (reproducible).

    Each trial draws the step's B tokens' k distinct experts uniformly (numpy's ``default_rng(seed)``: the k
    smallest of E uniform keys per token), maps them to ranks (expert e on rank e // (E / R)), counts the
    tokens reaching each rank and keeps the largest count.

    Parameters
    ----------
    num_experts, experts_per_token, expert_parallel_size, batch : as :func:`expected_max_rank_load` (any size)
    trials : int >= 2, default 2000; seed : int >= 0, default 0

    Returns
    -------
    (mean, standard error) [tokens], floats.

    Raises
    ------
    InvalidValueError
        As :func:`reach_set_counts`; trials < 2, a negative seed.
    """
    E, k, R, B = _check(num_experts, experts_per_token, expert_parallel_size, batch)
    check_int("trials", trials, minimum=2)
    check_int("seed", seed, minimum=0)
    rng = np.random.default_rng(int(seed))
    m = E // R
    maxima = np.empty(int(trials))
    chunk = max(1, 4_000_000 // (B * E))
    for start in range(0, int(trials), chunk):
        n = min(chunk, int(trials) - start)
        experts = np.argpartition(rng.random((n, B, E)), k - 1, axis=2)[:, :, :k] if k < E else \
            np.broadcast_to(np.arange(E), (n, B, E))
        reached = np.zeros((n, B, R), dtype=bool)
        np.put_along_axis(reached, experts // m, True, axis=2)
        maxima[start:start + n] = reached.sum(axis=1).max(axis=1)
    return float(maxima.mean()), float(maxima.std(ddof=1) / np.sqrt(len(maxima)))


def _mean_load(num_experts: int, experts_per_token: int, expert_parallel_size: int, batch: int) -> Fraction:
    """B (1 - q) [tokens]: the tokens reaching one rank in expectation (for the checks)."""
    E, k, R, B = _check(num_experts, experts_per_token, expert_parallel_size, batch)
    return B * (1 - Fraction(comb(E - E // R, k), comb(E, k)))

