#!/usr/bin/env python3
"""Claim (p07): the Anyscale measurement set beside the roofline model's prediction, gap stated.

Run ``python proofs/p07_anyscale.py`` (or ``roofline prove p07``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p07_anyscale.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p07_anyscale import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
