"""Bounded memory under churn (issue 26 item 9): an exited job is sampled no more, and discovery's
histories together hold at most a byte budget, however many jobs and GPUs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

from hostfs.procid import process_start_ticks
from probe_wire import read_segment
from sidecar.poll.discovery import JobsPoller
from sidecar.poll.history import History, HistoryBudget, Sample, sample_bytes
from sidecar.verdict import RecentSample
from tests.helpers.harness import REPO, python_env, wait_for


def _sample(t: float, gpus: int = 8) -> Sample:
    rows = [(i, 50.0, 1000.0, 0.5, 0.4, 0.1, 1410.0, 300.0, 60.0) for i in range(gpus)]
    return Sample(t, rows, [(100, 900.0, 40.0)], RecentSample(t, None, None, 0, None))


def test_histories_sharing_a_budget_never_hold_more_than_it_together():
    one = sample_bytes(_sample(0.0))
    budget = HistoryBudget(50 * one)
    histories = [History(3600.0, 1.5, budget) for _ in range(8)]
    for n in range(400):  # 8 jobs x 400 samples: 64 times the budget
        for h in histories:
            h.append(_sample(float(n)))
        assert budget.total_bytes <= budget.max_bytes
    assert budget.total_bytes == sum(h.bytes for h in histories) == sum(sample_bytes(s) for h in histories for s in h.samples())
    assert all(len(h) >= 5 for h in histories)  # shared out: the largest gives first
    assert all(h.samples()[-1].time == 399.0 for h in histories)  # the newest kept, the oldest gone
    budget.leave(histories[0])
    assert budget.total_bytes == sum(h.bytes for h in histories[1:])


def test_an_exited_job_is_sampled_no_more(tmp_path):
    # Started through a shell that exits at once: its parent is init, not this test process (which
    # may run the probe itself and would then be the job's root).
    out = subprocess.run(
        ["sh", "-c", '"$0" -m tests.helpers.stress_jobs once >/dev/null 2>&1 & echo $!', sys.executable],
        env=python_env(), cwd=REPO, capture_output=True, text=True, check=True,
    )
    job = SimpleNamespace(pid=int(out.stdout))
    job.kill = lambda: os.kill(job.pid, signal.SIGKILL) if process_start_ticks(job.pid) else None
    job.wait = lambda: wait_for(lambda: process_start_ticks(job.pid) is None, what="the job's end")
    poller = JobsPoller(nvml_source=object(), system_gpus_fn=list, history_s=3600.0)
    try:
        wait_for(lambda: read_segment(job.pid).state == "ok", what="the job's segment")
        poller.poll_once()
        (watched,) = [j for j in poller._jobs.values() if j.root[0] == job.pid]
        job.kill()
        job.wait()
        wait_for(lambda: poller.poll_once() and watched.poller.target_gone_at is not None, what="its exit")
        n = len(watched.poller.history)
        for _ in range(5):
            poller.poll_once()
        assert len(watched.poller.history) == n  # before: one more sample per poll for history_s
        listed = {j["root_pid"]: j for j in poller.jobs_document()["jobs"]}
        assert job.pid in listed and listed[job.pid]["alive"] is False  # still listed, as exited
    finally:
        job.kill()
        job.wait()
        poller.stop()
