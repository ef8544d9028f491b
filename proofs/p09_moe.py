#!/usr/bin/env python3
"""Claim (p09): a MoE model needs a far larger batch than a dense one of the same active size to be compute-bound.

Run ``python proofs/p09_moe.py`` (or ``roofline prove p09``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p09_moe.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p09_moe import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
