"""Shared test configuration: Hypothesis profiles.

Profiles (chosen by the HYPOTHESIS_PROFILE environment variable):

* ``default``: keeps the whole suite within a few minutes on 2 cores (CI): 60 examples
  per property; the cheap simulation oracles of tests/test_properties_*.py ask for at
  least 200 (``AT_LEAST_200``);
* ``thorough``: many more examples, for a release or a change to a formula: 1,000 per
  property (the simulation oracles included), and the reproduction blob of any failure.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
