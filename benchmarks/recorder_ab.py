"""What recording runs (sidecar/poll/recorder.py, issue 40) adds to a --pid poll: two Pollers of
the same busy job side by side in one process, one with a RunRecorder and one without, polled in
alternating turns (which goes first alternates too), each poll after a GAP_S pause (the job
republishes meanwhile, as between two polls 1.5 s apart).

    .venv/bin/python benchmarks/recorder_ab.py [--rounds 300] [--runs-db PATH]

The job is bench_sidecar's (8 GPUs x 64 processes on the simulated driver); the ledger is the real
one (sidecar/sources/ledger, at --runs-db or in a temporary folder). Prints the median CPU of one
poll of each, the difference in ms and as a share, the recording's own part (Poller._record, the
ledger's writes included) and the median CPU of one ledger write. Not a test. The target: at most
5 % of a poll. Measured (2-vCPU VM, 400 rounds, two runs): +1.8 % and +3.1 % side by side (3.33
against 3.39 ms, 3.50 against 3.61 ms); the recording itself 0.083 and 0.094 ms a poll on average
(0.067 and 0.073 ms median), one ledger write 0.24 ms, 7 writes in 400 rounds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_sidecar import GAP_S, PUBLISH_S, Driver, run_snippet

from tests.helpers.loadgen import BusyJob, busy_scenario

AB = r"""
import json, statistics, sys, time
from sidecar.poll.poller import Poller
from sidecar.poll.recorder import Recording

root, rounds, gap_s, runs_db = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), RUNS_DB

from sidecar.sources.ledger import Ledger

sink = Ledger(runs_db)
writes = []
real_write = sink.write
def write(batch):
    c = time.process_time()
    try:
        return real_write(batch)
    finally:
        writes.append(time.process_time() - c)
sink.write = write
plain = Poller(root, interval_s=1.5)
recording = Poller(root, interval_s=1.5, recorder=Recording(sink).recorder(interval_s=1.5))
for _ in range(5):
    plain.poll_once(); recording.poll_once()
observed = []
real_record = recording._record
def record(*a, **k):
    c = time.process_time()
    try:
        return real_record(*a, **k)
    finally:
        observed.append(time.process_time() - c)
recording._record = record
spent = {"without": [], "with": []}
for r in range(rounds):
    for name, p in ((("without", plain), ("with", recording)) if r % 2 else (("with", recording), ("without", plain))):
        time.sleep(gap_s)
        c = time.process_time()
        p.poll_once()
        spent[name].append(time.process_time() - c)
med = {k: statistics.median(v) for k, v in spent.items()}
print(json.dumps({"without_ms": 1000 * med["without"], "with_ms": 1000 * med["with"],
                  "observe_ms": 1000 * statistics.median(observed), "observe_mean_ms": 1000 * statistics.mean(observed),
                  "writes": len(writes), "write_ms": 1000 * statistics.median(writes) if writes else None}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--runs-db", default=None, help="the ledger's file (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        driver = Driver(work / "driver")
        db = args.runs_db or str(work / "runs" / "runs.sqlite3")
        with BusyJob(work, processes=64, gpus=8, publish_interval_s=PUBLISH_S) as job:
            driver.write(busy_scenario(job.pids, 8))
            time.sleep(1.5)  # every segment published
            out = run_snippet(AB.replace("RUNS_DB", repr(db)), driver, job.pid, args.rounds, GAP_S)
    share = (out["with_ms"] - out["without_ms"]) / out["without_ms"]
    print(json.dumps(out))
    print(
        f"without recording {out['without_ms']:.3f} ms, with {out['with_ms']:.3f} ms CPU per poll (median of "
        f"{args.rounds}): +{out['with_ms'] - out['without_ms']:.3f} ms, {100 * share:+.1f} %; "
        f"the poll's recording (Poller._record): {out['observe_ms']:.3f} ms median, {out['observe_mean_ms']:.3f} ms mean; "
        f"{out['writes']} ledger writes, {out['write_ms']:.3f} ms each (median)"
    )


if __name__ == "__main__":
    main()
