"""The sidecar under load: longer runs of tests/stress/test_load.py (what holds: docs/reliability.md).

    .venv/bin/python benchmarks/load_sidecar.py clients [--clients 50 --seconds 60 --period 1.0]
    .venv/bin/python benchmarks/load_sidecar.py churn [--seconds 60 --churn-period 0.1]
    .venv/bin/python benchmarks/load_sidecar.py flood [--connections 150]
    .venv/bin/python benchmarks/load_sidecar.py slowloris [--connections 200 --seconds 60 --line-period 5]
    .venv/bin/python benchmarks/load_sidecar.py all

`clients`: a real `dsh-sidecar` at the default interval (1.5 s) watches a busy simulated job (8
GPUs, 64 processes, each with a probe segment published every second) while N page-like clients
each GET the status and then history?since=<last sample> every --period seconds (0: back to back)
over keep-alive connections. Reports errors, p50/p99 latency per route, the poll cadence (gaps
between consecutive history samples, against the interval), the mean poll time from /metrics, and
the sidecar's CPU share and RSS during the run.

`churn`: the job starts one child and stops the oldest every --churn-period seconds (every other
one with SIGKILL, leaving its segment for the sidecar to remove); the sidecar polls every 0.5 s
and keeps 20 s of history.
Reports its RSS over time, the history length and any segment of a killed child left behind.

`flood`: N connections that send half a request line and then nothing; reports whether a new client
still gets an answer (sidecar/serve/wsgi.py closes the most stalled connection past 256 and any request
not complete 10 s after its first byte).

`slowloris`: N connections that each send a request line and then one header line every
--line-period seconds, never finishing (a connection the sidecar closes is reopened at once), while
a new client GETs /healthz and the status every 0.5 s: its latencies, failures, and the sidecar's RSS.

The same code (clients, churn, slowloris) runs shorter in tests/stress/test_load.py. No GPU needed (tests/fakenvml).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_sidecar import Driver  # noqa: E402

from probe_wire import segment_path  # noqa: E402
from tests.fakenvml import gpu  # noqa: E402
from tests.helpers.harness import API, Sidecar, temporary_runs_ledger  # noqa: E402
from tests.helpers.loadgen import (  # noqa: E402
    BusyJob,
    busy_scenario,
    cadence,
    get,
    history_times,
    measure_under_slowloris,
    poll_duration,
    proc_cpu_rss,
    run_clients,
)

INTERVAL_S = 1.5


def clients(work: Path, driver: Driver, n: int, seconds: float, period: float) -> dict:
    with BusyJob(work, processes=64, gpus=8) as job:
        driver.write(busy_scenario(job.pids, 8))
        with Sidecar(["--pid", str(job.pid), "--port", "0"], env=driver.env()) as sc:
            sc.wait_status(lambda d: len(d["processes"]) == 64 and d["processes"][-1]["gpu"], what="busy job")
            port = int(sc.url.rsplit(":", 1)[1])
            time.sleep(3)
            before = poll_duration(get("127.0.0.1", port, "/metrics", sc.token)[1].decode())
            cpu0, rss0, _ = proc_cpu_rss(sc.proc.pid)
            t0, m0 = time.time(), time.monotonic()
            result = run_clients(
                "127.0.0.1", port, clients=n, duration_s=seconds, period_s=period, token=sc.token
            )
            t1, m1 = time.time(), time.monotonic()
            cpu1, rss1, hwm = proc_cpu_rss(sc.proc.pid)
            after = poll_duration(get("127.0.0.1", port, "/metrics", sc.token)[1].decode())
            times = [
                t for t in history_times("127.0.0.1", port, token=sc.token) if t0 - INTERVAL_S <= t <= t1
            ]
    summary = result.summary()
    cad = cadence(times, INTERVAL_S)
    polls = after["polls"] - before["polls"]
    mean_poll_ms = (
        (after["mean_ms"] * after["polls"] - before["mean_ms"] * before["polls"]) / polls
        if polls
        else float("nan")
    )
    out = {
        "load": summary,
        "cadence": cad,
        "mean_poll_ms_under_load": round(mean_poll_ms, 2),
        "sidecar_cpu_share_pct": round(100 * (cpu1 - cpu0) / (m1 - m0), 2),
        "sidecar_rss_mib": {"start": round(rss0, 1), "end": round(rss1, 1), "peak": round(hwm, 1)},
    }
    mode = f"every {period} s" if period else "back to back"
    print(
        f"\n## {n} clients, {seconds:.0f} s, each polling status + history {mode} (8 GPUs x 64 processes)\n"
    )
    print("| requests | errors | req/s | status p50 | status p99 | history p50 | history p99 | max |")
    print("|---|---|---|---|---|---|---|---|")
    s, h = summary["status"], summary["history"]
    print(
        f"| {summary['requests']} | {summary['errors']} | {summary['requests_per_s']} | {s['p50_ms']} ms | "
        f"{s['p99_ms']} ms | {h['p50_ms']} ms | {h['p99_ms']} ms | {max(s['max_ms'] or 0, h['max_ms'] or 0)} ms |"
    )
    print(
        "\n| polls | gap min | gap median | gap max | worst deviation from 1.5 s | mean poll | sidecar CPU | sidecar RSS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {cad['gaps'] + 1} | {cad['gap_min_s']} s | {cad['gap_p50_s']} s | {cad['gap_max_s']} s | "
        f"{cad['worst_deviation_pct']}% | {out['mean_poll_ms_under_load']} ms | "
        f"{out['sidecar_cpu_share_pct']}% of a core | {rss1:.1f} MiB (peak {hwm:.1f}) |"
    )
    if summary["first_errors"]:
        print("\nfirst errors:", *summary["first_errors"], sep="\n  ")
    return out


def churn(work: Path, driver: Driver, seconds: float, period: float) -> dict:
    driver.write({"gpus": [gpu(0)]})
    with BusyJob(work, processes=16, gpus=1, churn_period_s=period) as job:
        driver.write({"gpus": [gpu(0, util_gpu=90, processes=[{"pid": job.pid, "used_mib": 5000}])]})
        # A 20 s history (41 samples at most): full after a third of the run, so the run shows it stays so.
        args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.5", "--history", "20"]
        with Sidecar(args, env=driver.env()) as sc:
            port = int(sc.url.rsplit(":", 1)[1])
            sc.wait_status(lambda d: len(d["processes"]) >= 10, what="churning tree")
            t0 = time.monotonic()
            series = []
            while time.monotonic() - t0 < seconds:
                time.sleep(5)
                _, rss, _ = proc_cpu_rss(sc.proc.pid)
                hist = json.loads(get("127.0.0.1", port, f"{API}/history", sc.token)[1])
                doc = json.loads(get("127.0.0.1", port, f"{API}/status", sc.token)[1])
                series.append(
                    {
                        "t_s": round(time.monotonic() - t0),
                        "rss_mib": round(rss, 1),
                        "history": len(hist["samples"]),
                        "processes": len(doc["processes"]),
                    }
                )
            info = json.loads(job.out.read_text())
            time.sleep(1.0)
            left = [pid for pid in info["killed"] if os.path.exists(segment_path(pid))]
            alive = sc.proc.poll() is None
            errors = [line for line in sc.err_lines if "Traceback" in line]
    print(
        f"\n## Process tree churn: one child started and the oldest stopped every {period} s for {seconds:.0f} s\n"
    )
    print(
        f"{info['churned']} children started, {len(info['killed'])} of the stopped ones SIGKILLed; "
        f"segments of killed children left behind: {len(left)}; sidecar alive: {alive}; tracebacks: {len(errors)}\n"
    )
    print("| t | sidecar RSS | history samples (cap 41) | processes shown |")
    print("|---|---|---|---|")
    for row in series:
        print(f"| {row['t_s']} s | {row['rss_mib']} MiB | {row['history']} | {row['processes']} |")
    return {
        "churned": info["churned"],
        "killed": len(info["killed"]),
        "left_behind": left,
        "alive": alive,
        "tracebacks": errors,
        "series": series,
    }


def flood(work: Path, driver: Driver, connections: int) -> dict:
    """Idle connections that never finish a request (a slow client, or a local user doing it on
    purpose): does a new client still get an answer?"""
    import socket

    driver.write({"gpus": [gpu(0)]})
    with BusyJob(work, processes=2, gpus=1) as job:
        with Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.5"], env=driver.env()) as sc:
            port = int(sc.url.rsplit(":", 1)[1])
            socks = []
            for _ in range(connections):
                s = socket.create_connection(("127.0.0.1", port), 5)
                s.sendall(b"GET / HTTP/1.1\r\n")  # and nothing more
                socks.append(s)
            time.sleep(0.5)

            def probe() -> str:
                t = time.monotonic()
                try:
                    code, _ = get_with_timeout(port, 5.0)
                    return f"HTTP {code} in {1000 * (time.monotonic() - t):.0f} ms"
                except OSError as exc:
                    return f"no answer ({type(exc).__name__}) after {time.monotonic() - t:.1f} s"

            during = probe()
            for s in socks:
                s.close()
            time.sleep(0.5)
            after = probe()
            log = [line for line in sc.err_lines if "connection limit" in line]
    print(f"\n## {connections} idle half-open connections\n")
    print(f"A new GET /healthz while they are open: {during}; after they close: {after}.")
    if log:
        print(f"The sidecar logged: {log[0]!r}")
    return {"connections": connections, "during": during, "after": after, "log": log[:1]}


def slowloris(work: Path, driver: Driver, connections: int, seconds: float, line_period_s: float) -> dict:
    driver.write({"gpus": [gpu(0)]})
    with BusyJob(work, processes=8, gpus=1) as job:
        driver.write(busy_scenario(job.pids, 1))
        with Sidecar(["--pid", str(job.pid), "--port", "0"], env=driver.env()) as sc:
            sc.wait_status(lambda d: len(d["processes"]) == 8, what="job of 8 processes")
            port = int(sc.url.rsplit(":", 1)[1])
            _, rss0, _ = proc_cpu_rss(sc.proc.pid)
            result = measure_under_slowloris(
                sc.proc.pid, port, connections, seconds, line_period_s, token=sc.token
            )
    print(
        f"\n## {connections} connections trickling one header line every {line_period_s} s, {seconds:.0f} s\n"
    )
    print("| route | requests | failed | p50 | p99 | max |")
    print("|---|---|---|---|---|---|")
    for path, r in result["routes"].items():
        print(
            f"| {path} | {r['requests']} | {r['failed']} | {r['p50_ms']} ms | {r['p99_ms']} ms | {r['max_ms']} ms |"
        )
    print(
        f"\nSlow connections still open at the end: {result['slow_open_at_end']} of {connections}; "
        f"reopened after the sidecar closed them: {result['reopened']}. Sidecar RSS {rss0:.1f} MiB before, "
        f"{result['rss_mib']:.1f} MiB at the end (peak {result['rss_peak_mib']:.1f})."
    )
    return result


def get_with_timeout(port: int, timeout_s: float) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def main() -> int:
    temporary_runs_ledger()  # the sidecars it starts record their runs (the default) into a temporary ledger
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["clients", "churn", "flood", "slowloris", "all"])
    ap.add_argument(
        "--connections",
        type=int,
        default=None,
        help="flood: idle connections (150); slowloris: slow ones (200)",
    )
    ap.add_argument("--line-period", type=float, default=5.0, help="slowloris: seconds between header lines")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument(
        "--period", type=float, default=1.0, help="seconds between one client's polls (0: back to back)"
    )
    ap.add_argument("--churn-period", type=float, default=0.1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    print(
        f"# load_sidecar.py {args.what} on {platform.node()}: {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f} at start"
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="load-sidecar-") as tmp:
        work = Path(tmp)
        driver = Driver(work)
        if args.what in ("clients", "all"):
            results["clients"] = clients(work, driver, args.clients, args.seconds, args.period)
        if args.what in ("churn", "all"):
            results["churn"] = churn(work, driver, args.seconds, args.churn_period)
        if args.what in ("flood", "all"):
            results["flood"] = flood(work, driver, args.connections or 150)
        if args.what in ("slowloris", "all"):
            results["slowloris"] = slowloris(
                work, driver, args.connections or 200, args.seconds, args.line_period
            )
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
