"""Where a discovery poll's CPU goes: the scenario of `bench_sidecar.py discovery` (4 jobs of 16
probed processes over 8 simulated GPUs), with each part of the poll timed by a wrapper.

    unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=256m tmpfs /dev/shm && \
        .venv/bin/python benchmarks/discovery_parts.py'              # the jobs republish every 50 ms
    ... benchmarks/discovery_parts.py --publish-interval 1000        # nothing republished: the fixed cost

Prints the median CPU per poll and, per part, the mean ms per poll (parts nest: "segments" holds
"read_consistent"; "facts" holds "process_facts"). The wrappers cost about 1 µs a call, so the
parts add up to a little more than the poll without them. Not a test: figures for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench_sidecar import GAP_S, PUBLISH_S, REPO, TIMED_SNIPPET, Driver, discovery_scenario, ms, run_snippet

POLL_BY_PARTS = (
    r"""
import collections, json, sys, time
import probe_wire.follower as follower
import sidecar.poll.collect as collect, sidecar.poll.history as history, sidecar.poll.poller as poller
from sidecar.sources.proctree import ProcessTreeSource
from sidecar.sources.segments import SegmentSource
try:
    import sidecar.poll.discovery as jobs, sidecar.sources.segment_dir as sweeper
except ImportError:  # --checkout of a commit before poll/jobs.py was poll/discovery.py (it swept itself)
    import sidecar.poll.jobs as jobs
    sweeper = jobs

"""
    + TIMED_SNIPPET
    + r"""
for owner, name, label in [
    (jobs, "poll_nvml", "nvml"), (jobs.JobsPoller, "_discover", "discover"), (sweeper, "sweep_dead_segments", "sweep"),
    (jobs.JobsPoller, "_publish", "publish"), (poller.Poller, "poll_once", "job polls"),
    (ProcessTreeSource, "poll", "process trees"), (SegmentSource, "poll", "segments"),
    (follower, "read_consistent", "read_consistent"), (collect.FactCollector, "facts", "facts"),
    (collect, "process_facts", "process_facts"), (poller, "history_sample", "history samples"),
    (poller, "decide", "verdicts"), (poller.document, "status_summary", "status summaries"),
]:
    timed(owner, name, label)
n, gap_s = int(sys.argv[2]), float(sys.argv[3])
p = jobs.JobsPoller(interval_s=1.5)
for _ in range(5):
    p.poll_once()
spent.clear()
cpu = []
for _ in range(n):
    time.sleep(gap_s)
    c = time.process_time()
    p.poll_once()
    cpu.append(time.process_time() - c)
print(json.dumps({"cpu": cpu, "parts": {k: 1000 * v / n for k, v in spent.items()}}))
"""
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=100)
    parser.add_argument(
        "--publish-interval", type=float, default=PUBLISH_S, help="seconds (default: as the benchmark)"
    )
    parser.add_argument(
        "--checkout", type=Path, default=REPO, help="the sidecar of another checkout (default: this one)"
    )
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=1000 * GAP_S,
        help="the pause before each poll (0: back to back, caches warm)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        driver = Driver(work / "driver")
        with discovery_scenario(work, driver, publish_interval_s=args.publish_interval):
            out = run_snippet(
                POLL_BY_PARTS, driver, 0, args.polls, args.gap_ms / 1000, args.checkout.resolve()
            )
    print(
        f"CPU per poll, median: {ms(out['cpu']):.2f} ms (publish interval {args.publish_interval} s, "
        f"{args.gap_ms:.0f} ms before each poll)"
    )
    for label, value in sorted(out["parts"].items(), key=lambda kv: -kv[1]):
        print(f"  {label:<18} {value:6.3f} ms")
    print(json.dumps(out["parts"]))


if __name__ == "__main__":
    main()
