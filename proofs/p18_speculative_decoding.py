#!/usr/bin/env python3
"""Claim (p18): a 1B draft speeds Llama 3.1 8B up 1.72x at batch 1 on an H100, and stops paying at batch 176.

Run ``python proofs/p18_speculative_decoding.py`` (or ``roofline prove p18``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p18_speculative_decoding.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p18_speculative_decoding import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
