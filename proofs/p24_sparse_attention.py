#!/usr/bin/env python3
"""Claim (p24): DeepSeek sparse attention caps the read, not the cache (DeepSeek-V3.2 against V3 on 8 H200).

Run ``python proofs/p24_sparse_attention.py`` (or ``roofline prove p17``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p24_sparse_attention.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p24_sparse_attention import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
