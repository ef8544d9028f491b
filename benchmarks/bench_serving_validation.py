"""Serving-level validation: every shipped serving point simulated as it was run, with its timing.

Each point of ``roofline/data/measurements/serving.json`` (a published run under load: closed
loop at its concurrency, fixed lengths) runs through the scheduler under its engine profile's
estimate (:func:`roofline.calibrate.serving.simulate_point`); the table is the one ``roofline
validate`` prints (serving section), followed by the wall-clock time of each simulation. Not a
test: timings depend on the machine; the suite checks one point (tests/test_fidelity.py).

Run from the repository root::

    python benchmarks/bench_serving_validation.py
    python benchmarks/bench_serving_validation.py --requests-per-client 8
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests-per-client", type=int, default=4,
                        help="requests each closed-loop client sends (default: 4, as roofline validate)")
    args = parser.parse_args(argv)

    from roofline.calibrate.serving import load_serving, simulate_point
    from roofline.commands.validate import format_serving

    rows, times = [], []
    for point in load_serving():
        start = time.perf_counter()
        rows.append(simulate_point(point, requests_per_client=args.requests_per_client))
        times.append((point.id, time.perf_counter() - start))
    print(format_serving(rows))
    print()
    for name, seconds in times:
        print(f"  {name}: {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
