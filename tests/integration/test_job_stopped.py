"""A stopped job (issue 12 item 11): `kill -STOP` leaves the probe's last figures in place, which
read as a healthy job. The real poller over a real stopped writer says `job-stopped`, for how long,
and lets it go once the job is continued."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from sidecar.common.catalogue import render
from sidecar.poll.poller import Poller
from tests.helpers.harness import REPO, python_env, wait_for


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_stopped_job_is_reported_with_how_long_and_not_after_it_resumes():
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.stress_jobs", "once"], env=python_env(), cwd=REPO, stdout=subprocess.PIPE
    )
    now = [1000.0]
    poller = Poller(job.pid, interval_s=1.0, system_gpus_fn=list, clock=lambda: now[0])
    try:
        assert job.stdout.readline() == b"published\n"
        doc = poller.poll_once()
        assert doc["processes"][0]["probe_state"] == "ok"
        assert "job-stopped" not in {w["code"] for w in doc["warnings"]}
        os.kill(job.pid, signal.SIGSTOP)
        wait_for(lambda: _state(job.pid) == "T", what="the job stopped")
        for step_s in (0.0, 5.0, 7.0):
            now[0] += step_s
            doc = poller.poll_once()
        (w,) = [w for w in doc["warnings"] if w["code"] == "job-stopped"]
        assert w["pids"] == [job.pid] and w["severity"] == "warning"
        assert f"The job is stopped (process {job.pid}, for 12 s at least)" in w["message"]
        assert "至少 12 秒" in render(w["message_ref"], "zh") and f"kill -CONT {job.pid}" in w["hint"]
        os.kill(job.pid, signal.SIGCONT)
        wait_for(lambda: _state(job.pid) != "T", what="the job continued")
        for _ in range(poller.rules.hysteresis_off_polls):  # a warning is held that many polls
            now[0] += 1.0
            doc = poller.poll_once()
        assert "job-stopped" not in {w["code"] for w in doc["warnings"]}
    finally:
        poller.stop()
        job.send_signal(signal.SIGCONT)
        job.terminate()
        job.wait()
