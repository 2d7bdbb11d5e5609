"""What one write to the run ledger costs (sidecar/sources/ledger `Ledger.write`): CPU and wall time
per write, the median of N, for the batches the recorder writes.

    .venv/bin/python benchmarks/ledger_write.py [--writes 2000] [--dir DIR] [--json FILE]

- `poll`: a `--pid` sidecar's write at each poll: its run upserted (totals grown) and its current
  minute upserted again (one more poll in it);
- `minute`: the write that opens a new minute, with a verdict change appended;
- `8 jobs`: a discovery poll's write of 8 jobs (8 runs, 8 minutes).

The ledger is a fresh file in DIR (default: a temporary folder under /tmp), with the production
settings (WAL, synchronous=NORMAL). CPU is this process's user+system time (time.process_time),
which is what the issue's budget counts (at most 5 % of a poll's CPU). Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sidecar.common.runs import VerdictChange
from sidecar.sources.ledger import Ledger, LedgerBatch
from tests.helpers.ledger_runs import DAY_START_UNIX_S, identity, minute, record

POLL_S = 1.5  # the default interval: a minute holds 40 polls


def _batches(kind: str, n: int) -> LedgerBatch:
    """The n-th write of `kind`: times move on by one poll (or one minute) a write."""
    if kind == "poll":
        t = DAY_START_UNIX_S + POLL_S * n
        ident = identity(1, DAY_START_UNIX_S)
        start = (t // 60.0) * 60.0
        return LedgerBatch(
            runs=(record(ident, t),),
            minutes=((ident.key, minute(start, polls=int((t - start) / POLL_S) + 1)),),
        )
    if kind == "minute":
        t = DAY_START_UNIX_S + 60.0 * n
        ident = identity(2, DAY_START_UNIX_S)
        status = "warning" if n % 2 else "ok"
        return LedgerBatch(
            runs=(record(ident, t, status=status),),
            minutes=((ident.key, minute(t, polls=1)),),
            changes=((ident.key, VerdictChange(t, status, ("DATA_WAIT",) if n % 2 else ())),),
        )
    t = DAY_START_UNIX_S + POLL_S * n
    start = (t // 60.0) * 60.0
    idents = [identity(10 + j, DAY_START_UNIX_S) for j in range(8)]
    return LedgerBatch(
        runs=tuple(record(i, t) for i in idents),
        minutes=tuple((i.key, minute(start, polls=int((t - start) / POLL_S) + 1)) for i in idents),
    )


def measure(kind: str, writes: int, folder: Path) -> dict[str, float]:
    ledger = Ledger(folder / f"{kind.replace(' ', '_')}.sqlite3")
    batches = [_batches(kind, n) for n in range(writes)]
    for b in batches[:50]:  # warm: statement cache, pages
        ledger.write(b)
    batches = batches[50:]
    cpu_us, wall_us = [], []
    for b in batches:
        c0, w0 = time.process_time(), time.perf_counter()
        ok = ledger.write(b)
        cpu_us.append((time.process_time() - c0) * 1e6)
        wall_us.append((time.perf_counter() - w0) * 1e6)
        if not ok:
            raise SystemExit(f"write failed: {ledger.fault}")
    ledger.close()
    q = statistics.quantiles(wall_us, n=100)
    return {
        "writes": len(batches),
        "cpu_us_mean": statistics.fmean(cpu_us),  # process_time ticks coarsely: the mean, not the median
        "wall_us_median": statistics.median(wall_us),
        "wall_us_p99": q[98],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the ledger files go (default: a temporary folder)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = {
            kind: measure(kind, args.writes, Path(tmp) / "ledger") for kind in ("poll", "minute", "8 jobs")
        }
    print("| write | writes | CPU µs (mean) | wall µs (median) | wall µs (p99) |")
    print("|---|---|---|---|---|")
    for kind, r in results.items():
        print(
            f"| {kind} | {r['writes']} | {r['cpu_us_mean']:.0f} | {r['wall_us_median']:.0f} | {r['wall_us_p99']:.0f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
