#!/usr/bin/env python3
"""Claim (p20): pipeline parallelism and groups across nodes: Llama 3.1 405B BF16 on H100 SXM nodes.

Run ``python proofs/p20_pipeline_parallel.py`` (or ``roofline prove p19``): it prints the derivation,
each step checked, and exits with status 0 when every check passes, 1 otherwise.
The derivation itself, with the full Claim, Assumptions and Sources, is
``roofline/proofs/p20_pipeline_parallel.py``, shipped inside the package so that ``roofline prove``
also works from an installed wheel; this file is the script students run.
"""

import sys

from roofline.proofs.p20_pipeline_parallel import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
