#!/usr/bin/env python3
"""Claim (p21): expert parallelism: DeepSeek-V3 on 8 and 16 H200, dispatch and combine against TP.

Run ``python proofs/p21_expert_parallel.py`` (or ``roofline prove p21``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p21_expert_parallel.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p21_expert_parallel import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
