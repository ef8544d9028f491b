#!/usr/bin/env python3
"""Claim (p22): disaggregated prefill and decode: the KV transfer, TTFT and TPOT across two pools.

Run ``python proofs/p22_disaggregated.py`` (or ``roofline prove p22``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p22_disaggregated.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p22_disaggregated import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
