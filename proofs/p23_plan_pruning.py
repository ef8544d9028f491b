#!/usr/bin/env python3
"""Claim (p23): the pruning rules of roofline plan follow from the bound.

Run ``python proofs/p23_plan_pruning.py`` (or ``roofline prove p19``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p23_plan_pruning.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p23_plan_pruning import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
