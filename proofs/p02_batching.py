#!/usr/bin/env python3
"""Claim (p02): 8 requests side by side make 8 tokens in about the same step, so throughput rises ~8x.

Run ``python proofs/p02_batching.py`` (or ``roofline prove p02``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p02_batching.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p02_batching import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
