#!/usr/bin/env python3
"""Claim (p11): a 70B model on 8 GPUs pays the all-reduce's latency, not its bandwidth, until batch 132.

Run ``python proofs/p11_tensor_parallel.py`` (or ``roofline prove p11``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p11_tensor_parallel.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p11_tensor_parallel import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
