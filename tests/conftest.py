"""Shared test configuration: Hypothesis profiles.

Profiles (chosen by the HYPOTHESIS_PROFILE environment variable):

* ``default``: keeps the whole suite within a few minutes on 2 cores (CI): 60 examples
  per property; the cheap simulation oracles of tests/test_oracle_*.py ask for at
  least 200 (profile ``simulation_oracle``, registered here);
* ``wheel``: 10 examples per property, for CI's second run of the suite against the
  installed wheel (that run checks packaging, not the properties);
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
settings.register_profile(
    "wheel",
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The simulation oracles (formula vs the reference scheduler) are cheap and catch the most:
# at least 200 examples each, more where the active profile asks for more. Test modules use
# it as ``@settings(settings.get_profile("simulation_oracle"))`` (no import from conftest).
settings.register_profile(
    "simulation_oracle",
    parent=settings(),
    max_examples=max(200, settings().max_examples) if os.environ.get("HYPOTHESIS_PROFILE") != "wheel" else 10,
)
# The generated-bad-input tests of every entry point (tests/test_fuzz_*.py): one run per
# formula or command each, so fewer examples by default; the thorough profile gives 500.
_FUZZ = {"default": 25, "thorough": 500, "wheel": 5}
settings.register_profile(
    "fuzz",
    parent=settings(),
    max_examples=_FUZZ.get(os.environ.get("HYPOTHESIS_PROFILE", "default"), 25),
)
