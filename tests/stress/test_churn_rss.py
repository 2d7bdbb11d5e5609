"""Issue 26 item 9: a root discovery sidecar with `--history 3600`, 8 simulated GPUs and a churn of
short-lived probed jobs keeps its memory bounded: RSS (VmRSS) and peak RSS (VmHWM) at most
RSS_BOUND_MIB. The jobs are real processes forked by the zygote (tests/stress/conftest.py), each
publishing a real segment (a model on cuda:0, 1 to 14 models) through the probe's own writer without
importing torch, each its own job (the zygote runs no probe and uses no GPU)."""

from __future__ import annotations

import os
import signal
import time
from collections import deque

import pytest

from tests.fakenvml import make_fake_sysfs
from tests.fakenvml.scenarios import hopper_gpu
from tests.helpers.harness import API, Sidecar, wait_for

pytestmark = pytest.mark.slow

GPUS = 8
JOBS = 800  # started over the test, BATCH at a time
BATCH = 8
ALIVE_BATCHES = 3  # batches running at once: a job lives for about that many batches
RSS_BOUND_MIB = 120
CHURN_BUDGET_S = 90  # the churn's loop stops here whatever it reached (the test's bound: 2 minutes)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root's discovery watches every user's jobs")


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of ``pid``, in MiB, from /proc/PID/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024  # kB
    return out


def listed_roots(sc: Sidecar) -> set[int]:
    code, body = sc.get(f"{API}/jobs")
    return {j["root_pid"] for j in body["jobs"]} if code == 200 else set()


def _missed(sc: Sidecar, missing: set[int], started: int) -> str:
    """Why a batch was not listed: the jobs missing (and whether each still runs), the roots listed
    (this test process's pid among them: it was taken for a job process), the sidecar's poll counts
    and errors, its last words."""
    states = {}
    for pid in sorted(missing):
        try:
            with open(f"/proc/{pid}/stat") as f:
                states[pid] = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            states[pid] = "gone"
    code, body = sc.get(f"{API}/jobs")
    listed = sorted(j["root_pid"] for j in body["jobs"])[:20] if code == 200 else f"HTTP {code}"
    _, metrics = sc.get("/metrics")
    counters = [
        line for line in metrics.decode().splitlines() if line.startswith(("dsh_sidecar_poll", "dsh_poll"))
    ]
    return (
        f"started {started}, missing {states}, listed {listed} (this test: {os.getpid()}), {counters[:12]}, "
        f"stderr {sc.err_lines[-10:]}"
    )


@needs_root
def test_a_root_discovery_sidecar_under_job_churn_stays_under_its_rss_bound(
    no_probe_here, fake_nvml, zygote, tmp_path
):
    fake_nvml.write({"gpus": [hopper_gpu(i) for i in range(GPUS)]})
    sysfs = make_fake_sysfs(
        tmp_path / "sys",
        [{"pci": f"0000:{0x10 + i:02x}:00.0", "vendor": "0x10de", "driver": "nvidia"} for i in range(GPUS)],
    )
    env = fake_nvml.env()
    args = ["--port", "0", "--interval", "0.25", "--history", "3600", "--path.sysfs", str(sysfs)]
    with Sidecar(args, env=env) as sc:
        running: deque[list[int]] = deque()
        seen: set[int] = set()
        started = 0
        end = time.monotonic() + CHURN_BUDGET_S
        while started < JOBS and time.monotonic() < end:
            batch = [zygote.spawn("once") for _ in range(BATCH)]
            started += BATCH
            running.append(batch)

            # Each batch is seen by the sidecar before the next starts (a job it never saw costs it
            # nothing); the oldest running batch then ends (SIGTERM: the writers close their files).
            def listed(wanted: frozenset[int] = frozenset(batch)) -> bool:
                seen.update(listed_roots(sc))
                return wanted <= seen

            try:
                wait_for(listed, 30, 0.05, "the batch listed")
            except AssertionError as e:  # what the next failure needs to be told apart (slow or stuck)
                raise AssertionError(f"{e}: {_missed(sc, set(batch) - seen, started)}") from None
            if len(running) > ALIVE_BATCHES:
                for pid in running.popleft():
                    os.kill(pid, signal.SIGTERM)
            if started % (10 * BATCH) == 0:  # readers too: jobs' status and history documents
                code, body = sc.get(f"{API}/jobs")
                for job in body["jobs"][:: max(1, len(body["jobs"]) // 8)]:
                    assert sc.get(f"{API}/status?job={job['id']}")[0] == 200
                    assert sc.get(f"{API}/history?job={job['id']}")[0] == 200
        assert started >= JOBS / 2, f"only {started} jobs started in {CHURN_BUDGET_S} s"
        for batch in running:
            for pid in batch:
                os.kill(pid, signal.SIGTERM)
        code, jobs = sc.get(f"{API}/jobs")
        assert code == 200 and jobs["jobs"], jobs
        mem = memory_mib(sc.proc.pid)
        print(f"\n{started} jobs, {len(jobs['jobs'])} listed at the end (bounds.MAX_JOBS_SHOWN): {mem}")
        assert len(seen & set(zygote.spawned)) == started  # every job was watched
        assert mem["VmRSS"] <= RSS_BOUND_MIB and mem["VmHWM"] <= RSS_BOUND_MIB, mem
