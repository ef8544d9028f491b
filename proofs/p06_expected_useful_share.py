#!/usr/bin/env python3
"""Claim (p06): the expected useful share of a static batch with iid random lengths, exactly.

Run ``python proofs/p06_expected_useful_share.py`` (or ``roofline prove p06``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p06_expected_useful_share.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p06_expected_useful_share import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
