"""Expected useful share of static batching for iid lengths: the closed form against the scheduler.

``roofline.formulas.expected_useful_share_discrete_uniform(batch=B, min_length=a,
length_range=r)`` is E[sum O_i / (B max O_i)] for B output lengths drawn iid uniform
on {a, ..., a + r} (proofs/p06_expected_useful_share.py). Two checks against the
reference scheduler's own useful share (its step records: useful rows / rows):

* exact: for small B and r, the scheduler is run on **every** one of the (r + 1)^B
  equally likely length vectors; the mean of its shares equals the closed form exactly;
* Monte Carlo: for larger B and r, N = 400 scheduler runs on lengths drawn with a
  seeded numpy generator; the closed form lies within 6 standard errors of the mean
  (6 s / sqrt(N), s the sample standard deviation: a false alarm about once in 5e8
  runs under the normal approximation).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.sim import Request, UnitCostModel, serve_static

RUNS = 400
Z = 6

#: Cheap simulation oracles run at least 200 examples, more under a bigger profile (tests/conftest.py).
AT_LEAST_200 = settings(settings.get_profile("simulation_oracle"))


def simulated_share(lengths: Any, *, prompt: int = 1) -> Fraction:
    """The scheduler's useful share of one static batch holding ``lengths`` (useful rows / occupied rows)."""
    requests = [Request(id=i, arrival_s=0, prompt_tokens=prompt, output_tokens=int(o)) for i, o in enumerate(lengths)]
    result = serve_static(requests, UnitCostModel(), batch_size=len(requests), record_steps=True)
    share = Fraction(sum(s.useful_rows for s in result.steps), sum(s.batch for s in result.steps))
    assert share == result.summary.long_run_useful_share
    return share


@AT_LEAST_200
@given(batch=st.integers(1, 3), min_length=st.integers(1, 12), length_range=st.integers(0, 5))
def test_mean_share_over_every_outcome_equals_the_closed_form_exactly(batch: int, min_length: int,
                                                                      length_range: int) -> None:
    """Averaged over all (r + 1)^B equally likely length vectors, the scheduler's share = the closed form."""
    support = range(min_length, min_length + length_range + 1)
    shares = [simulated_share(v) for v in itertools.product(support, repeat=batch)]
    mean = sum(shares, Fraction(0)) / len(shares)
    assert mean == f.expected_useful_share_discrete_uniform(batch=batch, min_length=min_length,
                                                            length_range=length_range)


def _share_fast(lengths: np.ndarray) -> Fraction:
    requests = [Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=int(o)) for i, o in enumerate(lengths)]
    result = serve_static(requests, UnitCostModel(), batch_size=len(requests), record_steps=False)
    return result.summary.long_run_useful_share


@given(batch=st.integers(2, 16), min_length=st.integers(1, 30), length_range=st.integers(0, 60),
       seed=st.integers(0, 2**32 - 1))
def test_mean_share_over_many_runs_is_within_six_standard_errors_of_the_closed_form(
    batch: int, min_length: int, length_range: int, seed: int
) -> None:
    """Mean share of 400 seeded scheduler runs with iid uniform lengths is within 6 s / sqrt(400) of the closed form."""
    rng = np.random.default_rng(seed)
    samples = rng.integers(min_length, min_length + length_range + 1, size=(RUNS, batch))
    shares = np.array([float(_share_fast(row)) for row in samples])
    mean, sd = shares.mean(), shares.std(ddof=1)
    expected = float(f.expected_useful_share_discrete_uniform(batch=batch, min_length=min_length,
                                                              length_range=length_range))
    bound = Z * sd / math.sqrt(RUNS) + 1e-12
    note(f"mean={mean} expected={expected} bound={bound}")
    assert abs(mean - expected) <= bound


def test_lesson_spread_example_one_to_forty_in_batches_of_eight() -> None:
    """Lengths uniform on 1..40, batches of 8: closed form 0.5689 (numpy: 0.5690); 4,000 runs agree within 0.01."""
    expected = f.expected_useful_share_discrete_uniform(batch=8, min_length=1, length_range=39)
    assert round(float(expected), 4) == 0.5689
    rng = np.random.default_rng(20240607)
    shares = [float(_share_fast(row)) for row in rng.integers(1, 41, size=(4000, 8))]
    assert abs(np.mean(shares) - float(expected)) < 0.01
