"""Short jobs of two users churning under a root discovery sidecar: its RSS over time and the
distinct series its /metrics showed (issue 37 item 10's run, at its rate: ~4 jobs a second).

    sudo .venv/bin/python benchmarks/churn_metrics.py --seconds 600            # the 10-minute run
    sudo .venv/bin/python benchmarks/churn_metrics.py --seconds 120 --json out.json
    sudo .venv/bin/python benchmarks/churn_metrics.py --sidecar-args=--metrics-per-user

Each job is a forked process that publishes a probe segment (the probe's own SegmentWriter), lives
`--job-s` seconds and exits; every other one runs as uid 65534. The sidecar is the real
`python -m sidecar.cli` (discovery, --interval 0.5). Every 5 s /metrics is scraped and its series
counted; every 10 s the sidecar's VmRSS is read. Needs root (two users, a root sidecar).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from probe_wire import SegmentWriter  # noqa: E402
from tests.helpers.stress_jobs import variant  # noqa: E402

TOKEN = "churn-benchmark-token-0123456789"
OTHER_UID = 65534
_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})?) ", re.M)


def _job(life_s: float, as_uid: int | None) -> None:
    """In a forked child: publish one segment, live, close it. Never returns."""
    code = 1
    try:
        if as_uid is not None:
            os.setgroups([])
            os.setgid(as_uid)
            os.setuid(as_uid)
        w = SegmentWriter()
        w.publish(variant(os.getpid(), w.start_ticks, 0))
        time.sleep(life_s)
        w.close()
        code = 0
    finally:
        os._exit(code)


def _start_sidecar(extra: list[str]) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "--port", "0", "--interval", "0.5", "--token", TOKEN, *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("dsh-sidecar: serving "):
            return proc, line.split()[2].rstrip("/")
    raise SystemExit("the sidecar did not start")


def _scrape(url: str) -> set[str]:
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    return {m.group(1) for m in _SERIES.finditer(text) if not m.group(1).startswith("#")}


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(seconds: float, jobs_per_s: float, job_s: float, sidecar_args: list[str]) -> dict:
    proc, url = _start_sidecar(sidecar_args)
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    started = time.monotonic()
    series: set[str] = set()
    rss: list[tuple[float, float]] = []
    jobs = 0
    next_job = next_scrape = next_rss = started
    try:
        while (now := time.monotonic()) - started < seconds:
            if now >= next_job:
                if os.fork() == 0:
                    _job(job_s, OTHER_UID if jobs % 2 else None)
                jobs += 1
                next_job += 1 / jobs_per_s
            if now >= next_scrape:
                series |= _scrape(url)
                next_scrape += 5
            if now >= next_rss:
                rss.append((round(now - started, 1), round(_rss_mib(proc.pid), 1)))
                next_rss += 10
            time.sleep(max(0.0, min(next_job, next_scrape, next_rss) - time.monotonic()))
    finally:
        proc.terminate()
        proc.wait(10)
    per_job = {s for s in series if "job_id=" in s}
    return {
        "seconds": seconds,
        "jobs_started": jobs,
        "distinct_series": len(series),
        "distinct_per_job_series": len(per_job),
        "series_per_hour": round(len(series) * 3600 / seconds),
        "rss_mib": rss,
        "sidecar_args": sidecar_args,
    }


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> int:
    from tests.helpers.harness import temporary_runs_ledger

    temporary_runs_ledger()  # the sidecars it starts record their runs (the default) into a temporary ledger
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--jobs-per-s", type=float, default=4.0)
    p.add_argument("--job-s", type=float, default=1.0)
    p.add_argument("--sidecar-args", default="", help="extra sidecar arguments, space-separated")
    p.add_argument("--json", default="", help="also write the result here")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("churn_metrics.py: needs root (a root sidecar, jobs of two users)", file=sys.stderr)
        return 2
    result = run(args.seconds, args.jobs_per_s, args.job_s, args.sidecar_args.split())
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
