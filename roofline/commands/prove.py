"""``roofline prove``: run the proof of every claim of the lesson and print one verdict per claim.

Each proof (``roofline.proofs.pNN_<topic>``, also runnable as ``python proofs/pNN_<topic>.py``
from a checkout) derives its claim step by step with SymPy, checks every step exactly and
compares the lesson's rounded figures with stated ranges. This command runs them in this
process and prints ``PASS <name>: <what it derived>`` or ``FAIL <name>: ... (failed: <checks>)``,
then a total (with --json, one JSON document). Exit status 0 when every claim passes, 1 when
one fails, 2 for an unknown name.

Examples: ``roofline prove``, ``roofline prove p01 p05 --verbose``, ``roofline prove --list``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from typing import Any

from ..units import fit_width
from ._args import plain


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``prove`` subcommand."""
    p = sub.add_parser(
        "prove",
        help="run the proof of every claim and print one verdict per claim",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="proofs to run: a name (p01_one_request), its file name or a unique prefix (p01); "
                        "default: all")
    p.add_argument("-v", "--verbose", action="store_true", help="print every derivation in full, then the verdicts")
    p.add_argument("--list", action="store_true", help="list the proofs (all, or the named ones) and their claims, "
                                                         "run nothing")
    p.add_argument("--json", action="store_true", help="print the verdicts (or the list) as JSON")
    p.set_defaults(func=run)


def run(args: Any) -> int:
    """Run the proofs; print the verdicts; 0 if all pass, 1 otherwise."""
    from .. import proofs

    # every name is resolved before anything runs: an unknown one is exit 2, whatever the options
    selected = [proofs.resolve_name(n) for n in args.names] if args.names else proofs.proof_names()
    if args.list:
        claims = {}
        for name in selected:
            doc = (importlib.import_module(f"roofline.proofs.{name}").__doc__ or "").strip().splitlines()
            claims[name] = doc[0].split(": ", 1)[-1] if doc else ""
        print(json.dumps(claims, indent=2) if args.json else "\n".join(f"{n}: {c}" for n, c in claims.items()))
        return 0
    start = time.perf_counter()
    verdicts = []
    for name in selected:
        verdict = proofs.run_proof(name)
        verdicts.append(verdict)
        if args.verbose and not args.json:
            print(verdict.output)
        if not args.json:
            print(fit_width(verdict.line()), flush=True)
    passed = sum(v.passed for v in verdicts)
    checks = sum(v.checks for v in verdicts)
    if args.json:
        print(json.dumps({"passed": passed, "claims": len(verdicts), "checks": checks, "verdicts": [
            {"name": v.name, "passed": v.passed, "summary": v.summary, "checks": v.checks,
             "failures": list(v.failures), "seconds": round(v.seconds, 3),
             **({"output": v.output} if args.verbose else {})} for v in verdicts]}, indent=2))
    else:
        print(f"{passed} of {len(verdicts)} claims pass ({checks} checks, {time.perf_counter() - start:.1f} s)")
    if passed != len(verdicts):
        print("roofline prove: run a failed proof alone to see its derivation, e.g. "
              f"`roofline prove {next(v.name for v in verdicts if not v.passed)} --verbose`", file=sys.stderr)
    return 0 if passed == len(verdicts) else 1
