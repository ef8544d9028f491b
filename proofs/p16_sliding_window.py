#!/usr/bin/env python3
"""Claim (p16): sliding windows let Gemma 3 27B hold 25 sequences of 32K tokens on an H200, not 4.

Run ``python proofs/p16_sliding_window.py`` (or ``roofline prove p16``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p16_sliding_window.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p16_sliding_window import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
