"""The proofs of the lesson's claims, one module per claim, and the runner of ``roofline prove``.

Each module ``roofline.proofs.pNN_<topic>`` states its Claim, Assumptions and Sources in
its docstring and defines ``derive(proof)``, which derives the claim step by step,
checks every step exactly (SymPy ``simplify(a - b) == 0`` or exact equality) and prints
it with its value for the lesson's scenario (Llama 3.1 8B in BF16 on an H100 SXM), and
``main()``. Importing a module does no work.

The modules live inside the package so that ``roofline prove`` works from an installed
wheel; ``proofs/pNN_<topic>.py`` at the repository root are the scripts students run
(``python proofs/p01_one_request.py``), each a thin wrapper around its module.

Examples
--------
>>> names = proof_names()
>>> names[0], len(names) >= 8
('p01_one_request', True)
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
import time
import traceback
from collections.abc import Iterable

import attrs

from ..errors import InvalidValueError
from ._proof import CheckFailed, Proof

__all__ = ["Verdict", "proof_names", "resolve_name", "run_proof", "run_proofs", "Proof"]

_NAME = re.compile(r"^p\d\d_[a-z0-9_]+$")


@attrs.frozen
class Verdict:
    """The outcome of one proof.

    Attributes
    ----------
    name : str, the proof's module name
    passed : bool, every check passed (and at least one was made)
    summary : str, the proof's one-line summary of what it derived
    checks : int, checks made
    failures : tuple of str, labels of the failed checks (or the error that stopped it)
    seconds : float, wall time
    output : str, the full derivation as printed
    """

    name: str
    passed: bool
    summary: str
    checks: int
    failures: tuple[str, ...]
    seconds: float
    output: str

    def line(self) -> str:
        """``PASS p01_one_request: <summary>`` or ``FAIL ...: <summary> (failed: ...)``."""
        head = f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.summary or '(no summary)'}"
        if not self.passed:
            head += f" (failed: {'; '.join(self.failures) or 'no checks made'})"
        return head


def proof_names() -> list[str]:
    """The proof modules shipped in this package, sorted (``p01_...``, ``p02_...``)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if _NAME.match(m.name))


def resolve_name(name: str) -> str:
    """The proof module's name for ``name``: itself, its file name (``p01_one_request.py``) or a prefix (``p01``).

    Raises
    ------
    InvalidValueError
        If no proof (or more than one) has that name.
    """
    names = proof_names()
    key = name.removesuffix(".py") if isinstance(name, str) else name
    matches = [n for n in names if n == key] or [n for n in names if isinstance(key, str) and n.startswith(key)]
    if len(matches) != 1:
        raise InvalidValueError("proof", name, f"expected one of {', '.join(names)}")
    return matches[0]


def run_proof(name: str) -> Verdict:
    """Run one proof in this process and return its :class:`Verdict` (never raises for a failed check).

    Parameters
    ----------
    name : str
        A name of :func:`proof_names`; a file name (``p01_one_request.py``) or a unique
        prefix (``p01``) is accepted.

    Raises
    ------
    InvalidValueError
        If no proof (or more than one) has that name.
    """
    module_name = resolve_name(name)
    out = io.StringIO()
    proof = Proof(module_name, stream=out)
    start = time.perf_counter()
    failures: list[str]
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
        module.derive(proof)
        failures = list(proof.failures)
    except CheckFailed:
        failures = list(proof.failures)
    except Exception as exc:  # a crash is a failed proof, with its traceback in the output
        out.write(traceback.format_exc())
        failures = [*proof.failures, f"error: {type(exc).__name__}: {exc}"]
    seconds = time.perf_counter() - start
    passed = proof.checks > 0 and not failures
    return Verdict(module_name, passed, proof.summary, proof.checks, tuple(failures), seconds, out.getvalue())


def run_proofs(names: Iterable[str] | None = None, *, jobs: int = 1) -> list[Verdict]:
    """Run the named proofs (all of them by default); one :class:`Verdict` each, in the order named.

    ``jobs`` (an int >= 1): worker processes (standard library ``concurrent.futures``); 1 runs them here, one
    after another. Each proof is independent of the others, so the verdicts are the same either way (but their
    ``seconds``). Raises InvalidValueError for a name as :func:`run_proof` does (before any runs), or for
    ``jobs`` not an int >= 1.
    """
    chosen = [resolve_name(n) for n in (proof_names() if names is None else names)]
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidValueError("jobs", jobs, "expected an integer >= 1")
    if jobs == 1 or len(chosen) < 2:
        return [run_proof(n) for n in chosen]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawned, not forked: a fork of a process with threads (a test runner's) may deadlock, and Python 3.12
    # warns of it; each worker imports the package afresh (a second or two)
    with ProcessPoolExecutor(max_workers=min(jobs, len(chosen)), mp_context=multiprocessing.get_context("spawn")
                             ) as pool:
        return list(pool.map(run_proof, chosen))
