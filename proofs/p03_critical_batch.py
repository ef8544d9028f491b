#!/usr/bin/env python3
"""Claim (p03): math catches up with reading only at a few hundred sequences, and never at 1,000 tokens of context.

Run ``python proofs/p03_critical_batch.py`` (or ``roofline prove p03``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p03_critical_batch.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p03_critical_batch import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
