"""Check that a built wheel holds every file the package tracks in git (code, data, py.typed).

CI's second run against the installed wheel exists to catch a file the wheel forgot (a trace,
a preset, a measurement table). This names such a file directly, for every file under
``roofline/``, rather than hoping a test happens to read it.

Usage: ``python tools/check_wheel.py dist/roofline-*.whl`` from the checkout (a git clone);
exit status 1 and the missing paths when any is absent, 0 otherwise.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile


def missing(wheel: str) -> list[str]:
    """The git-tracked paths under roofline/ that the wheel lacks (sorted)."""
    tracked = subprocess.run(["git", "ls-files", "roofline"], check=True, capture_output=True,
                             text=True).stdout.split()
    with zipfile.ZipFile(wheel) as archive:
        held = set(archive.namelist())
    return sorted(path for path in tracked if path not in held)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/check_wheel.py WHEEL", file=sys.stderr)
        return 2
    absent = missing(argv[0])
    for path in absent:
        print(f"the wheel lacks {path}", file=sys.stderr)
    if not absent:
        print(f"the wheel holds all tracked files under roofline/ ({argv[0]})")
    return 1 if absent else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
