"""Rebuild the shipped traces ``roofline/data/traces/*.csv.gz`` from the publisher's CSV files.

Usage: ``python tools/ship_traces.py DIR`` where DIR holds the Azure Public Dataset's
``AzureLLMInferenceTrace_conv.csv`` and ``AzureLLMInferenceTrace_code.csv``
(github.com/Azure/AzurePublicDataset, folder ``data/``; CC-BY 4.0), or the same bytes
under the names ``azure_llm_2023_conv.csv`` and ``azure_llm_2023_code.csv``.

The bytes are compressed unchanged (gzip level 9, header time 0 and no file name in the
header), so a rebuild with the same zlib gives the same files; see
``roofline/data/traces/NOTICE``.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "roofline" / "data" / "traces"
NAMES = {"conv": "azure_llm_2023_conv.csv", "code": "azure_llm_2023_code.csv"}


def main(argv: list[str]) -> int:
    """Compress the two traces found in ``argv[0]`` into roofline/data/traces; return 0, or 2 on a missing file."""
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(argv[0])
    for key, name in NAMES.items():
        candidates = [source / name, source / f"AzureLLMInferenceTrace_{key}.csv"]
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            print(f"tools/ship_traces.py: none of {', '.join(map(str, candidates))} exists", file=sys.stderr)
            return 2
        data = found.read_bytes()
        out = TARGET / f"{name}.gz"
        out.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        print(f"{found} ({len(data):,} bytes) -> {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
