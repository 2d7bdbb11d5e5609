"""Where a `--pid` poll's CPU goes at the running benchmark's cadence (`bench_sidecar.py running`:
8 GPUs x 64 processes republishing every second, a poll every 0.25 s), each part timed by a wrapper.

    .venv/bin/python benchmarks/running_parts.py --polls 120

Prints the median CPU per poll and, per part, the mean ms per poll (parts nest: "segments" holds
"read_consistent"). The wrappers cost about 1 us a call. Not a test: figures for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_sidecar import TIMED_SNIPPET, Driver, ms, run_snippet

from tests.helpers.loadgen import BusyJob, busy_scenario

POLL_BY_PARTS = (
    r"""
import collections, json, sys, time
import probe_wire.follower as follower
import sidecar.poll.collect as collect, sidecar.poll.poller as poller
from sidecar.sources.proctree import ProcessTreeSource
from sidecar.sources.segments import SegmentSource

"""
    + TIMED_SNIPPET
    + r"""
for owner, name, label in [
    (poller, "poll_nvml", "nvml"), (ProcessTreeSource, "poll", "process tree"), (SegmentSource, "poll", "segments"),
    (follower, "read_consistent", "read_consistent"), (collect.FactCollector, "facts", "facts"),
    (poller, "history_sample", "history sample"), (poller.History, "recent", "history recent"),
    (poller, "decide", "verdict"), (poller, "settle", "settle"),
    (poller.document, "status_summary", "status summary"), (poller.Poller, "_document", "document"),
]:
    timed(owner, name, label)
root, n, gap_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
p = poller.Poller(root, interval_s=gap_s, lazy_document=True)  # as the serving CLI makes it
for _ in range(5):
    p.poll_once()
spent.clear()
cpu = []
next_at = time.monotonic()
for _ in range(n):
    next_at += gap_s
    time.sleep(max(0.0, next_at - time.monotonic()))
    c = time.process_time()
    p.poll_once()
    cpu.append(time.process_time() - c)
print(json.dumps({"cpu": cpu, "parts": {k: 1000 * v / n for k, v in spent.items()}}))
"""
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=120)
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between polls (default 0.25)")
    parser.add_argument(
        "--checkout",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the sidecar of another checkout",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        driver = Driver(work / "driver")
        with BusyJob(work, processes=64, gpus=8) as job:
            driver.write(busy_scenario(job.pids, 8))
            time.sleep(1.5)  # every segment published
            out = run_snippet(
                POLL_BY_PARTS, driver, job.pid, args.polls, args.interval, args.checkout.resolve()
            )
    mean = 1000 * sum(out["cpu"]) / len(out["cpu"])
    print(
        f"CPU per poll: median {ms(out['cpu']):.2f} ms, mean {mean:.2f} ms, p90 {ms(out['cpu'], 90):.2f} ms "
        f"(a poll every {args.interval} s; the parts are means)"
    )
    for label, value in sorted(out["parts"].items(), key=lambda kv: -kv[1]):
        print(f"  {label:<18} {value:6.3f} ms")
    print(json.dumps(out["parts"]))


if __name__ == "__main__":
    main()
