"""NvmlSource.poll of another commit against this checkout's, in one process.

    git worktree add /tmp/nvml-base REV
    .venv/bin/python benchmarks/nvml_ab.py /tmp/nvml-base --rounds 400 --gap 0.03

The simulated driver shows the discovery benchmark's GPUs (8, busy, 64 processes, 8 a GPU). Both
sources poll it in alternating turns (which one goes first alternates too), each poll after a
`--gap` pause (0: back to back, warm caches; the discovery poll's 60 ms leaves them cold), and each
pair of snapshots must be equal. Prints the median seconds of one poll of each, in ms. Not a test:
figures for docs/performance.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_sidecar import PIN, REPO, Driver, busy_scenario

AB = r"""
import dataclasses, importlib, json, statistics, sys, time
rounds, gap_s, base = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]

def source_from(checkout):
    # NvmlSource as `checkout` has it: its sidecar package imported afresh.
    for name in [m for m in sys.modules if m == "sidecar" or m.startswith("sidecar.")]:
        del sys.modules[name]
    sys.path.insert(0, checkout)
    try:
        return importlib.import_module("sidecar.sources.nvml").NvmlSource()
    finally:
        sys.path.remove(checkout)

old, new = source_from(base), source_from(".")

def view(snap):
    d = dataclasses.asdict(snap)
    d.pop("time")
    return repr(d)

for _ in range(20):
    assert view(old.poll()) == view(new.poll())
spent = {"old": [], "new": []}
clock = time.perf_counter
for r in range(rounds):
    for name, src in ((("old", old), ("new", new)) if r % 2 else (("new", new), ("old", old))):
        time.sleep(gap_s)
        t = clock()
        src.poll()
        spent[name].append(clock() - t)
print(json.dumps({k: round(1000 * statistics.median(v), 4) for k, v in spent.items()}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="a checkout of the commit to compare with (git worktree add DIR REV)")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds before each poll (default 0)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        driver = Driver(Path(d) / "driver")
        driver.write(busy_scenario(list(range(200000, 200064)), 8))  # NvmlSource never looks the pids up
        out = subprocess.run(
            [*PIN, sys.executable, "-c", AB, str(args.rounds), str(args.gap), str(Path(args.base).resolve())],
            env=driver.env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    print(out.stdout.strip(), "ms per poll, median")


if __name__ == "__main__":
    main()
