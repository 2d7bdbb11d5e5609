"""How big the run ledger grows in a day of 1,000 short jobs an hour (sidecar/sources/ledger), the
figure behind LEDGER_DAY_BYTES_MAX (sidecar/sources/ledger/bounds.py), which
tests/unit/test_ledger_retention.py asserts for its share of the day.

    .venv/bin/python benchmarks/ledger_size.py [--hours 24] [--dir DIR] [--json FILE]

The jobs (tests/helpers/ledger_runs.py `simulate`) last 2 to 5 minutes each, with a verdict change at
the start, one a minute in, and a warning in every third; they are written as a discovery sidecar
writes them (one batch a minute of every live job's run and current minute), with maintain() every
simulated hour. The size is the database and its -wal and -shm files on disk. Not a test.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sidecar.sources.ledger import Ledger
from sidecar.sources.ledger.bounds import LEDGER_DAY_BYTES_MAX
from tests.helpers.ledger_runs import file_bytes, simulate


def measure(hours: float, folder: Path) -> dict[str, float]:
    path = folder / "runs.sqlite3"
    t0 = time.perf_counter()
    with Ledger(path) as ledger:
        jobs = simulate(ledger, hours)
        fault = ledger.fault
    written_s = time.perf_counter() - t0
    if fault is not None:
        raise SystemExit(f"the ledger failed: {fault}")
    size = file_bytes(path)
    t0 = time.perf_counter()
    Ledger(path).close()  # opening checks the file (quick_check): what a sidecar's start pays
    open_s = time.perf_counter() - t0
    conn = sqlite3.connect(path)
    counts = {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("runs", "minutes", "verdict_changes")
    }
    conn.close()
    return {
        "hours": hours,
        "jobs": jobs,
        "bytes": size,
        "bytes_per_job": size / jobs,
        **counts,
        "write_s": written_s,
        "open_s": open_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the ledger goes (default: a temporary folder)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        r = measure(args.hours, Path(tmp))
    bound = LEDGER_DAY_BYTES_MAX * args.hours / 24.0
    print(
        "| hours | jobs | runs / minutes / changes | file | per job | bound (LEDGER_DAY_BYTES_MAX share) | open (quick_check) |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {r['hours']:g} | {r['jobs']:,} | {r['runs']:,} / {r['minutes']:,} / {r['verdict_changes']:,} "
        f"| {r['bytes'] / 2**20:.1f} MiB ({r['bytes']:,} B) | {r['bytes_per_job']:,.0f} B | {bound / 2**20:.1f} MiB "
        f"| {r['open_s'] * 1e3:.0f} ms |"
    )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
