#!/usr/bin/env python3
"""Claim (p12): the Anyscale benchmark, run as one ``roofline simulate`` command per cap on the reference scheduler.

Run ``python proofs/p12_anyscale_scheduler.py`` (or ``roofline prove p12``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p12_anyscale_scheduler.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p12_anyscale_scheduler import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
