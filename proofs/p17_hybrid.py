#!/usr/bin/env python3
"""Claim (p17): in the same memory a Qwen3-Next-80B-A3B sequence reaches 5.95x the context of a dense Qwen3-4B.

Run ``python proofs/p17_hybrid.py`` (or ``roofline prove p17``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p17_hybrid.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p17_hybrid import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
