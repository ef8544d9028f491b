"""Shared test configuration: Hypothesis profiles, and the proofs run once per session.

It also puts tests/ on the import path for tests/_naive.py.

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

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

#: tests/_naive.py (the naive oracles' KV rules, shared by two test files) is imported as ``_naive``;
#: the importlib import mode puts no test directory on the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

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


# --------------------------------------------------------------------------- the proofs, run once per session


def _perturbed(value: Any) -> Any:
    """A planted fault: an integer result + 1, any other number scaled by 1 + 1/1000 (None stays None)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iu":
            return value + 1
        return value * (1 + Fraction(1, 1000)) if value.dtype.kind == "O" else value * (1 + 1 / 1000)
    if isinstance(value, Fraction):
        return value * (1 + Fraction(1, 1000))
    return value * (1 + 1 / 1000)


class ProofHarness:
    """Runs the proofs in this process with every registered fast path wrapped where the package looks it up.

    Each wrapper records that its formula was called (so which proof uses which formula is
    derived, not listed) and, for the one formula named by ``fault``, returns
    :func:`_perturbed` of the true result, from the checked call and from ``.unchecked``
    alike. The wrappers replace the attribute in every loaded ``roofline`` module that
    holds the fast path (``roofline.formulas``, its topic module, ``from ..formulas import``
    bindings) and the ``REGISTRY`` entry's ``fast``; :meth:`installed` puts the originals
    back on exit.
    """

    def __init__(self) -> None:
        import roofline.formulas as f
        from roofline import proofs

        for module in ("roofline.sim", "roofline.estimate",
                       *(f"roofline.proofs.{name}" for name in proofs.proof_names())):
            importlib.import_module(module)
        self.registry = f.REGISTRY
        self.specs = dict(f.REGISTRY)
        self.names = proofs.proof_names()
        self.fault: str | None = None
        self.used: set[str] = set()
        self.sites = {
            name: [(module, name) for key, module in list(sys.modules.items())
                   if key.startswith("roofline") and getattr(module, name, None) is spec.fast]
            for name, spec in self.specs.items()
        }

    def _wrap(self, name: str, fast: Any) -> Any:
        def checked(**kwargs: Any) -> Any:
            self.used.add(name)
            value = fast(**kwargs)
            return _perturbed(value) if self.fault == name else value

        def unchecked(**kwargs: Any) -> Any:
            self.used.add(name)
            value = fast.unchecked(**kwargs)
            return _perturbed(value) if self.fault == name else value

        functools.update_wrapper(checked, fast)
        checked.unchecked = unchecked  # type: ignore[attr-defined]
        return checked

    @contextlib.contextmanager
    def installed(self) -> Iterator[ProofHarness]:
        """Wrap every fast path for the duration of the block."""
        try:
            for name, spec in self.specs.items():
                wrapper = self._wrap(name, spec.fast)
                for module, attr in self.sites[name]:
                    setattr(module, attr, wrapper)
                self.registry[name] = attrs.evolve(spec, fast=wrapper)
            yield self
        finally:
            for name, spec in self.specs.items():
                for module, attr in self.sites[name]:
                    setattr(module, attr, spec.fast)
                self.registry[name] = spec
            self.fault = None

    def run(self, name: str, fault: str | None = None) -> tuple[Any, frozenset[str]]:
        """Run one proof (output captured) with ``fault`` planted; its Verdict and the formulas it called.

        With a fault planted the proof stops at its first failed check (:func:`_first_failure_stops`):
        whether a fault is caught (a check failed) is then known, and what follows cannot change that;
        a fault no check catches runs the whole proof, as without the fault. Without a fault the
        proof runs to its end.
        """
        from roofline import proofs

        self.fault, self.used = fault, set()
        try:
            with _first_failure_stops() if fault is not None else contextlib.nullcontext():
                verdict = proofs.run_proof(name)
        finally:
            self.fault = None
        return verdict, frozenset(self.used)


@contextlib.contextmanager
def _first_failure_stops() -> Iterator[None]:
    """Within the block a proof's failed check is recorded as usual and then stops the proof (CheckFailed).

    ``run_proof`` reports a stopped proof's failures as they stand, so its Verdict names the first
    failed check; the rest of the derivation (the costly simulations of p07, p10) is not run.
    """
    from roofline.proofs._proof import CheckFailed, Proof

    record = Proof._record

    def stopping(self: Proof, ok: bool, label: str, detail: str = "") -> bool:
        if not record(self, ok, label, detail):
            raise CheckFailed(label)
        return True

    Proof._record = stopping  # type: ignore[method-assign]
    try:
        yield
    finally:
        Proof._record = record  # type: ignore[method-assign]


class _Runs(Mapping[str, Any]):
    """One field of every proof's unperturbed run, by proof name; a proof runs the first time any field is read.

    So that a test about one proof (and each xdist worker) runs only the proofs it reads; ``items()``
    runs them all.
    """

    def __init__(self, runs: ProofRuns, field: int) -> None:
        self._runs, self._field = runs, field

    def __getitem__(self, name: str) -> Any:
        return self._runs.run(name)[self._field]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs.harness.names)

    def __len__(self) -> int:
        return len(self._runs.harness.names)


class ProofRuns:
    """Every proof run once, unperturbed (when first asked for): its Verdict and the registered formulas it called."""

    def __init__(self, harness: ProofHarness) -> None:
        self.harness = harness
        self._done: dict[str, tuple[Any, frozenset[str]]] = {}
        self.verdicts: Mapping[str, Any] = _Runs(self, 0)
        self.uses: Mapping[str, frozenset[str]] = _Runs(self, 1)

    def run(self, name: str) -> tuple[Any, frozenset[str]]:
        """The proof's (Verdict, formulas called), run now under the harness if it has not run yet."""
        if name not in self._done:
            if name not in self.harness.names:
                raise KeyError(name)
            with self.harness.installed():
                self._done[name] = self.harness.run(name)
        return self._done[name]


@pytest.fixture(scope="session")
def proof_runs() -> ProofRuns:
    """Each proof run at most once per test session, when a test first reads it (tests/test_proofs.py and
    tests/test_planted_faults.py share it)."""
    return ProofRuns(ProofHarness())
