"""Planted faults: every formula a proof calls or is linked to is perturbed in turn; a check of that proof must fail.

The formulas planted in a proof are the union of two sets. The *called* ones are derived,
not listed: the session's single unperturbed run of each proof (the ``proof_runs`` fixture
in tests/conftest.py) records every registry entry called while it runs, directly or
through the reference scheduler and the estimate API. The *linked* ones are those whose
registry entry (``REGISTRY[name].proof``) names the proof: a formula that says a proof
derives it must be checked by that proof, not merely sit beside it. Each planted fault
scales one fast path's result by 1 + 1/1000 (an integer result gets + 1), wherever the
package looks the fast path up; the proof is run once per fault with its output captured,
up to its first failed check (tests/conftest.py; what follows cannot uncatch the fault).
A fault counts as caught only when a check of the proof fails (a crash does not count).
The score must be 100 %.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

import roofline.formulas as f
from roofline.proofs import proof_names

NAMES = proof_names()


def _linked(proof: str) -> set[str]:
    """The registered formulas whose registry entry names ``proof`` (a module name, ``p13_decode_stretch``)."""
    return {name for name, spec in f.REGISTRY.items() if spec.proof == f"{proof}.py"}


def test_the_harness_plants_the_fault_where_the_package_looks_it_up(proof_runs):
    """Inside the harness a planted fault changes the result of f.<name>, its .unchecked and REGISTRY[name].fast."""
    harness = proof_runs.harness
    kw = dict(batch=4, length_sum=1600, length_max=1000)
    with harness.installed():
        harness.fault = "static_useful_share"
        faulty = Fraction(2, 5) * (1 + Fraction(1, 1000))
        assert f.static_useful_share(**kw) == faulty
        assert f.static_useful_share.unchecked(**kw) == faulty
        assert f.REGISTRY["static_useful_share"].fast(**kw) == faulty
        harness.fault = "blocks_per_sequence"
        assert f.blocks_per_sequence(context=1000, block_size=16) == 64
        harness.fault = None
    assert f.static_useful_share(**kw) == Fraction(2, 5)
    assert f.REGISTRY["static_useful_share"].fast is f.static_useful_share


@pytest.mark.parametrize("name", NAMES)
def test_each_proof_uses_registered_formulas(proof_runs, name):
    """Each proof calls at least one registered formula (recorded, not listed), and passes unperturbed."""
    assert proof_runs.uses[name], f"{name} calls no registered formula"
    assert proof_runs.verdicts[name].passed, proof_runs.verdicts[name].line()


def test_the_registry_links_the_proofs_that_derive_these_formulas():
    """Registry links the checks below rely on (a formula named by a proof must be called by it)."""
    assert {"stretch_time_no_overlap", "stretch_steps_until_no_overlap"} <= _linked("p13_decode_stretch")
    assert "chunk_attention_pairs" in _linked("p10_chunked_prefill")
    assert "moe_arithmetic_intensity" in _linked("p09_moe")


@pytest.mark.parametrize("name", NAMES)
def test_each_proof_calls_the_formulas_its_registry_links_name(proof_runs, name):
    """A formula whose registry entry names a proof is called by its run (else no planted fault there can be caught)."""
    uncalled = sorted(_linked(name) - proof_runs.uses[name])
    assert not uncalled, f"{name} does not call {uncalled}"


@pytest.mark.parametrize("name", NAMES)
def test_every_planted_fault_is_caught_by_a_check(proof_runs, name, capsys):
    """Score = caught / planted over every formula the proof calls or is linked to; it must be 100 %.

    One test per proof, so that the test workers share the planted runs.
    """
    harness = proof_runs.harness
    formulas = sorted(proof_runs.uses[name] | _linked(name))  # the unperturbed run, before the faults
    missed = []
    with harness.installed():
        for formula in formulas:
            verdict, _ = harness.run(name, fault=formula)
            checks = [x for x in verdict.failures if not x.startswith("error:")]
            if not checks:
                missed.append(f"{formula}: {verdict.failures or 'all checks passed'}")
    caught = len(formulas) - len(missed)
    with capsys.disabled():
        print(f"\n{name}: planted faults {caught} of {len(formulas)} caught")
    assert formulas, f"{name}: no formula to plant a fault in"
    assert not missed, f"{name}: {caught} of {len(formulas)} planted faults caught; missed:\n" + "\n".join(missed)


def test_a_planted_run_stops_at_its_first_failed_check(proof_runs):
    """With a fault planted, a proof stops at the first check that fails: one failure, fewer checks than its
    unperturbed run; without a fault it runs to its end, and the check recorder is put back after either."""
    from roofline.proofs._proof import Proof

    record = Proof._record
    whole = proof_runs.verdicts["p02_batching"]
    with proof_runs.harness.installed():
        faulty, _ = proof_runs.harness.run("p02_batching", fault="throughput")
        again, _ = proof_runs.harness.run("p02_batching")
    assert faulty.failures == ("fast path throughput = symbolic",)
    assert 0 < faulty.checks < whole.checks
    assert again.passed and again.checks == whole.checks
    assert Proof._record is record
