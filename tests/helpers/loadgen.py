"""Load against a real sidecar, shared by tests/stress/test_load.py (short runs) and
benchmarks/load_sidecar.py (longer runs; what holds: docs/reliability.md): a busy simulated job, page-like
HTTP clients, and the measurements (latency percentiles, poll cadence, CPU share, RSS)."""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakenvml import gpu
from tests.helpers.harness import API, REPO, python_env

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class BusyJob:
    """`python -m tests.helpers.stress_jobs busy`: a root publishing its probe segment and one for each of
    its `processes - 1` children (real `sleep` processes), optionally starting one child and
    stopping the oldest every `churn_period_s` (every other one with SIGKILL, its segment left for
    the sidecar to clean up)."""

    def __init__(
        self,
        directory: Path,
        processes: int = 64,
        gpus: int = 8,
        publish_interval_s: float = 1.0,
        churn_period_s: float = 0.0,
        env: Mapping[str, str] | None = None,
    ):
        self.out = Path(directory) / "busy-job.json"
        self.out.unlink(missing_ok=True)  # a previous job's pids must not be taken for this one's
        self.gpus = gpus
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers.stress_jobs",
                "busy",
                "--children",
                str(processes - 1),
                "--gpus",
                str(gpus),
                "--publish-interval",
                str(publish_interval_s),
                "--churn-period",
                str(churn_period_s),
                "--out",
                str(self.out),
            ],
            env=python_env(base=env),
            cwd=REPO,
        )
        deadline = time.monotonic() + 60 + processes * 0.05
        while True:
            try:
                info = json.loads(self.out.read_text())
                break
            except (FileNotFoundError, ValueError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("busy job did not start") from None
                time.sleep(0.05)
        self.pid: int = info["root"]
        self.children: list[int] = info["children"]

    @property
    def pids(self) -> list[int]:
        return [self.pid, *self.children]

    def current_children(self) -> list[int]:
        return json.loads(self.out.read_text())["children"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> BusyJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def busy_scenario(pids: list[int], gpus: int, per_gpu_cap: int = 512) -> dict:
    """The simulated driver's view: process i on GPU i % gpus (at most `per_gpu_cap` per GPU, the
    simulated driver's limit), every GPU busy."""
    per: list[list[dict]] = [[] for _ in range(gpus)]
    for i, pid in enumerate(pids):
        g = per[i % gpus]
        if len(g) < per_gpu_cap:
            g.append({"pid": pid, "used_mib": 2000 + i % 100, "sm_util": 30 + i % 60, "mem_util": 20})
    return {
        "gpus": [
            gpu(
                i,
                util_gpu=80 + i % 20,
                util_mem=40,
                memory_used_mib=sum(p["used_mib"] for p in per[i]) + 500,
                processes=per[i],
            )
            for i in range(gpus)
        ]
    }


def proc_cpu_rss(pid: int) -> tuple[float, float, float]:
    """(CPU seconds used so far, RSS MiB, peak RSS MiB) of a live process."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    fields = raw[raw.rfind(b")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    rss = int(fields[21]) * PAGE / 1048576
    hwm = rss
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return cpu, rss, hwm


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class LoadResult:
    clients: int
    duration_s: float
    period_s: float
    latencies_s: dict[str, list[float]] = field(default_factory=lambda: {"status": [], "history": []})
    errors: list[str] = field(default_factory=list)
    requests: int = 0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "clients": self.clients,
            "duration_s": self.duration_s,
            "period_s": self.period_s,
            "requests": self.requests,
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
            "requests_per_s": round(self.requests / self.duration_s, 1),
        }
        for route, lat in self.latencies_s.items():
            out[route] = {
                "n": len(lat),
                "p50_ms": round(percentile(lat, 50) * 1000, 2),
                "p99_ms": round(percentile(lat, 99) * 1000, 2),
                "max_ms": round(max(lat) * 1000, 2) if lat else None,
            }
        return out


def run_clients(
    host: str, port: int, clients: int, duration_s: float, period_s: float, token: str | None = None
) -> LoadResult:
    """`clients` threads, each doing what the page does every `period_s` (0: back to back):
    GET status, then GET history?since=<last sample it has>. Keep-alive connections."""
    result = LoadResult(clients, duration_s, period_s)
    lock = threading.Lock()
    start = time.monotonic() + 0.2
    stop_at = start + duration_s
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def client(seed: int) -> None:
        rng = random.Random(seed)
        conn = http.client.HTTPConnection(host, port, timeout=30)
        last: float | None = None
        lat_s: list[float] = []
        lat_h: list[float] = []
        errors: list[str] = []
        n = 0
        next_at = start + rng.uniform(0, period_s)
        while True:
            now = time.monotonic()
            if now >= stop_at:
                break
            if now < next_at:
                time.sleep(min(next_at - now, stop_at - now))
                continue
            next_at += period_s
            for route in ("status", "history"):
                path = f"{API}/{route}" + (
                    f"?since={last!r}" if route == "history" and last is not None else ""
                )
                t = time.perf_counter()
                try:
                    conn.request("GET", path, headers=headers)
                    r = conn.getresponse()
                    body = r.read()
                    dt = time.perf_counter() - t
                    n += 1
                    if r.status != 200:
                        errors.append(f"{route}: HTTP {r.status} {body[:100]!r}")
                        continue
                    (lat_s if route == "status" else lat_h).append(dt)
                    if route == "history":
                        samples = json.loads(body)["samples"]
                        if samples:
                            last = samples[-1]["time_unix_s"]
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    n += 1
                    errors.append(f"{route}: {type(exc).__name__}: {exc}")
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.close()
        with lock:
            result.latencies_s["status"].extend(lat_s)
            result.latencies_s["history"].extend(lat_h)
            result.errors.extend(errors)
            result.requests += n

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + 120)
    return result


def cadence(times: list[float], interval_s: float) -> dict[str, Any]:
    """How regular the polls were: the gaps between consecutive history samples."""
    gaps = [b - a for a, b in zip(times, times[1:])]
    if not gaps:
        return {"gaps": 0}
    worst = max(abs(g - interval_s) for g in gaps)
    return {
        "gaps": len(gaps),
        "interval_s": interval_s,
        "gap_min_s": round(min(gaps), 4),
        "gap_p50_s": round(percentile(gaps, 50), 4),
        "gap_max_s": round(max(gaps), 4),
        "worst_deviation_pct": round(100 * worst / interval_s, 2),
    }


def poll_duration(metrics_text: str) -> dict[str, float]:
    """Mean poll wall time from the /metrics histogram (`dsh_sidecar_poll_duration_seconds`)."""
    total = count = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("dsh_sidecar_poll_duration_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith("dsh_sidecar_poll_duration_seconds_count"):
            count = float(line.rsplit(" ", 1)[1])
    return {"polls": count, "mean_ms": round(1000 * total / count, 2) if count else float("nan")}


def get(host: str, port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def history_times(host: str, port: int, since: float | None = None, token: str | None = None) -> list[float]:
    status, body = get(host, port, f"{API}/history" + (f"?since={since!r}" if since is not None else ""), token)
    assert status == 200, body[:200]
    return [s["time_unix_s"] for s in json.loads(body)["samples"]]


class Slowloris:
    """`connections` sockets that each send a request line and then one header line every
    `line_period_s` seconds, never finishing (the slow-client attack). A connection the server
    closes is reopened at once, so the pressure stays at `connections` open sockets."""

    def __init__(self, host: str, port: int, connections: int, line_period_s: float = 5.0):
        self.addr = (host, port)
        self.connections = connections
        self.line_period_s = line_period_s
        self.reopened = 0
        self._stop = threading.Event()
        self._socks = [self._open() for _ in range(connections)]
        self._thread = threading.Thread(target=self._trickle, name="slowloris", daemon=True)
        self._thread.start()

    def _open(self) -> socket.socket:
        s = socket.create_connection(self.addr, 10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        s.setblocking(False)  # a timeout would make every check below wait for data first
        return s

    def _trickle(self) -> None:
        n = 0
        while not self._stop.wait(self.line_period_s):
            n += 1
            for i, s in enumerate(self._socks):
                if self._stop.is_set():
                    return
                try:
                    if not _still_open(s):
                        raise ConnectionResetError
                    s.sendall(b"X-Slow-%d: %d\r\n" % (n, i))
                except OSError:  # closed by the server: open another one in its place
                    s.close()
                    try:
                        self._socks[i] = self._open()
                        self.reopened += 1
                    except OSError:
                        pass

    def open_count(self) -> int:
        """Sockets the server has not closed."""
        return sum(_still_open(s) for s in self._socks)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self._socks:
            s.close()

    def __enter__(self) -> Slowloris:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _still_open(s: socket.socket) -> bool:
    """False once the peer has closed (EOF or reset); `s` is non-blocking."""
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def timed_get(
    host: str, port: int, path: str, timeout_s: float, token: str | None = None
) -> tuple[int | None, float, str]:
    """(status or None, seconds, error) of one GET on a fresh connection, as a new client sees it."""
    t = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        r.read()
        return r.status, time.monotonic() - t, ""
    except OSError as exc:
        return None, time.monotonic() - t, type(exc).__name__
    finally:
        conn.close()


def measure_under_slowloris(
    pid: int, port: int, connections: int, seconds: float, line_period_s: float, token: str | None = None
) -> dict:
    """A new client's GETs every 0.5 s while `connections` slow ones trickle (shared with the test)."""
    paths = ["/healthz", f"{API}/status"]
    times: dict[str, list[float]] = {p: [] for p in paths}
    failed: dict[str, list[str]] = {p: [] for p in paths}
    with Slowloris("127.0.0.1", port, connections, line_period_s) as attack:
        time.sleep(0.5)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for path in paths:
                status, took_s, error = timed_get("127.0.0.1", port, path, timeout_s=5.0, token=token)
                times[path].append(took_s)
                if status != 200:
                    failed[path].append(f"{status or error} after {took_s:.1f} s")
            time.sleep(0.5)
        slow_open, reopened = attack.open_count(), attack.reopened
        _, rss, hwm = proc_cpu_rss(pid)
    routes = {
        p: {
            "requests": len(times[p]),
            "failed": len(failed[p]),
            "first_failures": failed[p][:3],
            "p50_ms": round(1000 * percentile(times[p], 50), 1),
            "p99_ms": round(1000 * percentile(times[p], 99), 1),
            "max_ms": round(1000 * max(times[p]), 1),
        }
        for p in paths
    }
    return {
        "routes": routes,
        "slow_open_at_end": slow_open,
        "reopened": reopened,
        "rss_mib": rss,
        "rss_peak_mib": hwm,
    }
