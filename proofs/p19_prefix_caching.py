#!/usr/bin/env python3
"""Claim (p19): prefix caching: a cached prefill is the chunk formula; shared blocks count once.

Run ``python proofs/p19_prefix_caching.py`` (or ``roofline prove p19``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p19_prefix_caching.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p19_prefix_caching import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
