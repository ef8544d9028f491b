#!/usr/bin/env python3
"""Claim (p05): static batching runs at the pace of its longest request: 1,000 steps, 40 % useful.

Run ``python proofs/p05_static_batching.py`` (or ``roofline prove p05``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p05_static_batching.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p05_static_batching import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
