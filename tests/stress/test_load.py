"""Load held: 50 page-like clients against a sidecar watching a busy job (8 GPUs, 64 processes, each
with a probe segment), a process tree churning every 100 ms, and the history's bound. Short runs;
benchmarks/load_sidecar.py runs the same for longer, printing its figures."""

from __future__ import annotations

import json
import os
import time

import pytest

from probe_wire import segment_path
from sidecar.poll.history import History
from sidecar.serve.wsgi import REQUEST_DEADLINE_S
from tests.fakenvml import gpu
from tests.helpers.harness import API, Sidecar, wait_for
from tests.helpers.loadgen import (
    BusyJob,
    busy_scenario,
    cadence,
    get,
    history_times,
    measure_under_slowloris,
    proc_cpu_rss,
    run_clients,
)

DEFAULT_INTERVAL_S = 1.5


def history_span_s(port: int, token: str | None) -> float:
    times = [s["time_unix_s"] for s in json.loads(get("127.0.0.1", port, f"{API}/history", token)[1])["samples"]]
    return times[-1] - times[0] if times else 0.0


@pytest.mark.slow
@pytest.mark.alone  # the poll cadence within 10 % under 50 clients: other tests' load would move it
def test_50_clients_polling_status_and_history_for_10_s(tmp_path, fake_nvml, sysfs):
    with BusyJob(tmp_path, processes=64, gpus=8) as job:
        fake_nvml.write(busy_scenario(job.pids, 8))
        env = fake_nvml.env()
        args = ["--pid", str(job.pid), "--port", "0", "--path.sysfs", str(sysfs)]
        with Sidecar(args, env=env) as sc:  # the default interval
            doc = sc.wait_status(
                lambda d: len(d["processes"]) == 64 and len(d["gpus"]) == 8 and d["processes"][-1]["gpu"],
                what="the whole busy job",
            )
            assert doc["interval_s"] == DEFAULT_INTERVAL_S
            assert sum(p["has_probe"] for p in doc["processes"]) == 64
            port = int(sc.url.rsplit(":", 1)[1])
            cpu0, _, _ = proc_cpu_rss(sc.proc.pid)
            t0, m0 = time.time(), time.monotonic()
            result = run_clients("127.0.0.1", port, clients=50, duration_s=10.0, period_s=1.0, token=sc.token)
            t1, m1 = time.time(), time.monotonic()
            cpu1, rss, hwm = proc_cpu_rss(sc.proc.pid)
            times = [t for t in history_times("127.0.0.1", port, token=sc.token) if t0 - DEFAULT_INTERVAL_S <= t <= t1]
            summary = result.summary()
            cad = cadence(times, DEFAULT_INTERVAL_S)
            print(
                f"\nload: {json.dumps(summary)}\ncadence: {json.dumps(cad)}\n"
                f"sidecar: {100 * (cpu1 - cpu0) / (m1 - m0):.1f}% of a core under load, RSS {rss:.1f} MiB (peak {hwm:.1f})"
            )
            assert result.errors == [], result.errors[:5]
            assert summary["status"]["n"] >= 400 and summary["history"]["n"] >= 400  # ~50 x 10 each
            assert cad["gaps"] >= 5 and cad["worst_deviation_pct"] <= 10, cad
            assert sc.proc.poll() is None


@pytest.mark.slow
@pytest.mark.alone  # an RSS bound over a 10 s churn, and 100 children forked in it
def test_a_tree_churning_every_100_ms_does_not_grow_the_sidecar(tmp_path, fake_nvml, sysfs):
    fake_nvml.write({"gpus": [gpu(0)]})
    with BusyJob(tmp_path, processes=16, gpus=1, churn_period_s=0.1) as job:
        fake_nvml.write({"gpus": [gpu(0, util_gpu=90, processes=[{"pid": job.pid, "used_mib": 5000}])]})
        env = fake_nvml.env()
        args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.2", "--history", "4", "--path.sysfs", str(sysfs)]
        with Sidecar(args, env=env) as sc:
            port = int(sc.url.rsplit(":", 1)[1])
            sc.wait_status(lambda d: len(d["processes"]) >= 10, what="the churning tree")
            # Warm-up: the history ring spans (nearly) its 4 s window, so it grows no more; allocator
            # pools and caches fill on the way.
            capacity = History(4, 0.2).capacity
            wait_for(lambda: history_span_s(port, sc.token) >= 3.5, 20, 0.2, "the history ring to fill")
            rss = [proc_cpu_rss(sc.proc.pid)[1]]
            counts = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.5)
                rss.append(proc_cpu_rss(sc.proc.pid)[1])
                doc = sc.status()
                counts.append(len(doc["processes"]))
                code, body = get("127.0.0.1", port, f"{API}/history", sc.token)
                assert code == 200
                hist = json.loads(body)
                assert len(hist["samples"]) <= capacity
                assert len(hist["events"]) <= 1000
            info = json.loads(job.out.read_text())
            # The sidecar's next poll removes the last SIGKILLed child's segment: a few polls' grace.
            try:
                wait_for(
                    lambda: not any(os.path.exists(segment_path(pid)) for pid in info["killed"]),
                    2.0,
                    0.05,
                    "the SIGKILLed children's segments to go",
                )
            except AssertionError:
                pass  # the assertion below names them
            left = [pid for pid in info["killed"] if os.path.exists(segment_path(pid))]
            print(
                f"\nchurned {info['churned']} children; RSS MiB {rss[0]:.1f} -> {rss[-1]:.1f}; tree sizes {counts}"
            )
            assert info["churned"] >= 100 and len(info["killed"]) >= 50
            assert left == [], f"segments of SIGKILLed children left behind: {left}"
            assert max(rss) - rss[0] < 6, rss
            assert max(counts) <= 18 and sc.proc.poll() is None
            assert not [line for line in sc.err_lines if "Traceback" in line]


@pytest.mark.slow
@pytest.mark.alone  # a new client served within 2 s while 600 connections trickle
@pytest.mark.parametrize("connections", [200, 600])  # 600: over the connection limit (eviction)
def test_trickling_connections_never_lock_out_a_new_client(tmp_path, fake_nvml, connections):
    """Slowloris: each slow connection sends a header line every 2 s and never finishes (the
    sidecar's deadline closes it; it comes back at once). A new client is served within 2 s."""
    with BusyJob(tmp_path, processes=4, gpus=1) as job:
        fake_nvml.write(busy_scenario(job.pids, 1))
        with Sidecar(["--pid", str(job.pid), "--port", "0"], env=fake_nvml.env()) as sc:
            sc.wait_status(lambda d: len(d["processes"]) == 4, what="job of 4 processes")
            port = int(sc.url.rsplit(":", 1)[1])
            _, rss0, _ = proc_cpu_rss(sc.proc.pid)
            # The request deadline closes the first slow connections, the next line replaces them.
            result = measure_under_slowloris(
                sc.proc.pid, port, connections, seconds=REQUEST_DEADLINE_S + 3, line_period_s=2.0, token=sc.token
            )
            print(f"\n{connections} slow connections: {json.dumps(result)}")
            for path, r in result["routes"].items():
                assert r["failed"] == 0, (path, r["first_failures"])
                assert r["max_ms"] < 2000, (path, r)
            assert result["reopened"] >= min(connections, 200), "the deadline never closed a slow connection"
            assert result["rss_peak_mib"] - rss0 < 20, result
            assert sc.proc.poll() is None


def test_a_day_of_history_at_the_default_interval_is_bounded():
    """24 h at 1.5 s is 57,601 samples at most, however long the sidecar runs; its memory is
    measured in benchmarks/bench_sidecar.py (docs/performance.md)."""
    from sidecar.poll.history import Sample
    from sidecar.verdict import RecentSample

    h = History(86400, 1.5)
    assert h.capacity == 57_601
    t = 1_700_000_000.0
    for i in range(h.capacity + 5000):
        h.append(Sample(t + i * 1.5, ((0, 50, 1000),), ((42, 900.0, 40),), RecentSample(t, 40, 900.0, i, 50)))
    assert len(h) == h.capacity and h.samples()[0].time == t + 5000 * 1.5
    # Late polls: time bounds it too (a sample older than 24 h before the newest is dropped).
    h.append(Sample(t + 10**6, (), (), RecentSample(t + 10**6, None, None, 0, None)))
    assert len(h) == 1
