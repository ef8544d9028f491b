#!/usr/bin/env python3
"""Claim (p15): the estimate is the bound with an engine's constants; two vLLM rows fix them, a third checks them.

Run ``python proofs/p15_estimate.py`` (or ``roofline prove p15``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p15_estimate.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p15_estimate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
