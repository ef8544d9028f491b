#!/usr/bin/env python3
"""Claim (p08): iteration-level scheduling keeps every slot busy while requests wait.

Run ``python proofs/p08_continuous_batching.py`` (or ``roofline prove p08``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p08_continuous_batching.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p08_continuous_batching import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
