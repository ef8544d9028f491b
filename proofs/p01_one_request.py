#!/usr/bin/env python3
"""Claim (p01): one request at a time reads all the weights for every token, and everyone else queues.

Run ``python proofs/p01_one_request.py`` (or ``roofline prove p01``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p01_one_request.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p01_one_request import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
