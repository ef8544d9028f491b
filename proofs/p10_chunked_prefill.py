#!/usr/bin/env python3
"""Claim (p10): deciding the batch after every step, with chunked prefill, stops prefill from stalling decodes.

Run ``python proofs/p10_chunked_prefill.py`` (or ``roofline prove p10``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p10_chunked_prefill.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p10_chunked_prefill import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
