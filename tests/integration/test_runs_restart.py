"""Every run remembered, end to end (issue 40): a real `dsh-sidecar --pid` records a job into its
runs ledger; killed with SIGKILL and started again under the same job, the new sidecar shows the
earlier minutes in /history (marked `recorded`), and `/runs` lists the run through the ledger the
recorder holds open. Real processes, a real SQLite file, the simulated driver."""

from __future__ import annotations

import os
import signal

import pytest

from tests.fakenvml import gpu
from tests.helpers.harness import API, FakeJob, Sidecar, cuda_runtime, wait_for

pytestmark = pytest.mark.slow

UUID0 = gpu(0)["uuid"]


def _job_spec() -> dict:
    model = {"name": "Net", "class": "Net", "params": 1000, "device": "cuda:0", "devices": ["cuda:0"]}
    return {"payload": {"runtime": cuda_runtime([UUID0]), "models": [model]}}


def _sidecar(pid: int, ledger: str, env) -> Sidecar:
    return Sidecar(["--pid", str(pid), "--port", "0", "--interval", "0.3", "--runs-db", ledger], env=env)


def test_a_sidecar_killed_and_started_again_shows_the_runs_earlier_minutes(tmp_path, fake_nvml):
    ledger = str(tmp_path / "state" / "runs.sqlite3")
    env = fake_nvml.env()
    with FakeJob(tmp_path / "job", {"main": _job_spec()}) as job:
        fake_nvml.write(
            {
                "gpus": [
                    gpu(0, memory_used_mib=2100, util_gpu=90, processes=[{"pid": job.pid, "used_mib": 2000}])
                ]
            }
        )
        first = _sidecar(job.pid, ledger, env)
        try:
            first.wait_status(lambda d: d["status"] == "GPU", what="the GPU verdict")
            # The first verdict is a change: written at once, not at the next 10 s write.
            code, runs = wait_for(
                lambda: (lambda r: r if r[0] == 200 and r[1]["runs"] else None)(first.get(f"{API}/runs")),
                10,
                0.2,
                "the run in the ledger",
            )
            (run,) = runs["runs"]
            assert run["job_id"] == first.status()["job_id"] and run["state"] == "live"
            os.kill(first.proc.pid, signal.SIGKILL)  # no clean stop: only what was written survives
            first.proc.wait(10)
        finally:
            first.stop()
        assert os.stat(ledger).st_mode & 0o777 == 0o600

        with _sidecar(job.pid, ledger, env) as second:
            history = wait_for(
                lambda: (lambda h: h if any(s["recorded"] for s in h["samples"]) else None)(second.history()),
                10,
                0.2,
                "the recorded minutes in /history",
            )
            recorded = [s for s in history["samples"] if s["recorded"]]
            live = [s for s in history["samples"] if not s["recorded"]]
            # The earlier minute (its part before the kill: the job is seconds old) comes before this
            # sidecar's own polls, with the job's GPU figures.
            assert recorded and max(s["time_unix_s"] for s in recorded) <= min(
                (s["time_unix_s"] for s in live), default=float("inf")
            )
            assert any(g["util_pct"] == 90 for s in recorded for g in s["gpus"]), recorded
            code, again = second.get(f"{API}/runs")
            assert code == 200 and [r["id"] for r in again["runs"]] == [run["id"]]  # one run, not two
