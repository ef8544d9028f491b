#!/usr/bin/env python3
"""Claim (p04): 128 KiB of KV per token; a ~53 GB cache is full at ~404 sequences of 1,000 tokens.

Run ``python proofs/p04_kv_cache.py`` (or ``roofline prove p04``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p04_kv_cache.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p04_kv_cache import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
