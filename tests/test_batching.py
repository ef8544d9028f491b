"""Batching formulas: static batching's per-batch useful share and waits, serial waits (the lesson's values).

The fast paths are compared with their SymPy derivations exactly by the registry-wide test in
tests/test_formulas.py; the expected share over random lengths is tested in tests/test_useful_share.py.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

import roofline.formulas as f


def test_case_q4_and_the_lessons_batch():
    """6, 50, 300 -> 356/900; 50, 500 -> 55 %; the lesson's 100, 200, 300, 1,000 -> 40 %."""
    # source: the static-batching tutorials' example
    assert f.static_useful_share(batch=3, length_sum=356, length_max=300) == Fraction(356, 900)
    assert f.static_useful_share(batch=2, length_sum=550, length_max=500) == Fraction(55, 100)
    assert f.static_useful_share(batch=4, length_sum=1600, length_max=1000) == Fraction(2, 5)


def test_the_lessons_waits():
    """At 5 ms/step the 100-token answer waits 4.5 s; a request one step late waits 4.995 s; user 100 waits 99 s."""
    step = Fraction(5, 1000)
    assert f.static_handback_delay(output_tokens=100, length_max=1000, step_time=step) == Fraction(9, 2)
    assert f.static_join_wait(arrival_time=step, length_max=1000, step_time=step) == Fraction(4995, 1000)
    assert f.serial_wait(position=100, service_time=1) == 99
    assert f.serial_completion_time(position=100, service_time=1) == 100
    assert f.serial_mean_wait(requests=100, service_time=1) == Fraction(99, 2)


def test_static_useful_share_broadcasts_arrays():
    """numpy arrays give the elementwise per-batch shares: the static-batching tutorials' example's 356/900 and 55 %."""
    share = f.static_useful_share(batch=np.array([3, 2]), length_sum=np.array([356, 550]),
                                  length_max=np.array([300, 500]))
    assert np.allclose(share, [356 / 900, 0.55])
