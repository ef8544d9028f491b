#!/usr/bin/env python3
"""Claim (p13): a stretch of decode steps of a fixed batch is priced in closed form.

Run ``python proofs/p13_decode_stretch.py`` (or ``roofline prove p13``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p13_decode_stretch.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p13_decode_stretch import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
