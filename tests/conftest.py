"""Shared test configuration: Hypothesis profiles and the path to ../shared.

Profiles (chosen by the HYPOTHESIS_PROFILE environment variable):

* ``default``: keeps the whole suite within a few minutes on 2 cores (CI);
* ``thorough``: many more examples, for a release or a change to a formula.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
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
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared beside the checkout (design notes, cases, traces); it must exist."""
    assert SHARED.is_dir(), f"expected the shared folder at {SHARED}"
    return SHARED
