"""One discovery poll of two checkouts, side by side on one scenario: the noise of setting up the
scenario anew for each (run to run, about ±20 % on a 2-vCPU VM) left out.

    git worktree add /tmp/base 9a54028
    unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=256m tmpfs /dev/shm && \
        .venv/bin/python benchmarks/discovery_ab.py /tmp/base . --rounds 8'

Starts `bench_sidecar.discovery`'s scenario once (4 jobs x 16 probed processes, 8 GPUs, 1,000
unrelated processes), then runs its poll snippet (`DISCOVERY_POLL`) from each checkout in turn,
in alternating order, each in a fresh process: prints each run's median CPU per poll and the median
of the medians. Not a test: figures for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench_sidecar import DISCOVERY_POLL, GAP_S, Driver, discovery_scenario, run_snippet


def poll_ms(checkout: Path, driver: Driver, roots: str, polls: int) -> float:
    found = run_snippet(DISCOVERY_POLL, driver, roots, polls, GAP_S, checkout)
    if found["jobs"] != 4:
        raise RuntimeError(f"{checkout} found {found['jobs']} of the scenario's 4 jobs")
    return 1000 * statistics.median(found["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", type=Path, nargs=2, help="two repository checkouts (A, B)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--polls", type=int, default=100)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkouts]
    medians: dict[Path, list[float]] = {c: [] for c in checkouts}
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        driver = Driver(work / "driver")
        with discovery_scenario(work, driver, unrelated=1000) as jobs:
            roots = json.dumps([j.pid for j in jobs])
            for r in range(args.rounds):
                for c in checkouts if r % 2 == 0 else checkouts[::-1]:
                    medians[c].append(poll_ms(c, driver, roots, args.polls))
    print("| checkout | CPU per poll, median of the runs' medians | each run |")
    print("|---|---|---|")
    for c in checkouts:
        runs = " ".join(f"{m:.2f}" for m in medians[c])
        print(f"| {c} | {statistics.median(medians[c]):.2f} ms | {runs} |")


if __name__ == "__main__":
    main()
