"""/metrics keeps a bounded number of series however jobs and their processes churn.

A real discovery-mode sidecar (simulated NVML, two GPUs) watches two long-lived probed jobs whose
DataLoader workers are replaced several times a second (a new pid each, on a GPU), while short-lived
probed jobs (on the GPUs too) start and end throughout. Every scrape of /metrics over the churn is
parsed and every distinct series (name and labels) counted: the count stays within
`series_bound(gpus, max_jobs)`, the formula docs/metrics.md states (jobs cap x series per job +
per-GPU series + the sidecar's own). Before the bound, each new pid and each new job added series.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.serve.metrics import series_bound
from tests.fakenvml import gpu
from tests.helpers.harness import METRICS_AT_ONCE, REPO, Sidecar, python_env, wait_for

pytestmark = pytest.mark.slow

GPUS = 2
MAX_JOBS = 2  # --metrics-max-jobs: small, so the cap is reached by the churn
SHORT_JOB_S = 1.5  # how long each short job lives
SHORT_JOBS_AT_ONCE = 3


def _busy(out: Path, children: int, churn_period_s: float = 0.0, run_id: str | None = None) -> subprocess.Popen:
    """A probed job tree (tests/helpers/stress_jobs.py busy): a root with role main and `children`
    processes (rank 1, then DataLoader workers), the oldest worker replaced every churn period."""
    cmd = [sys.executable, "-m", "tests.helpers.stress_jobs", "busy", "--children", str(children)]
    cmd += ["--gpus", str(GPUS), "--out", str(out), "--publish-interval", "0.3"]
    if churn_period_s:
        cmd += ["--churn-period", str(churn_period_s)]
    # Each job a distributed run of its own (torchrun's run id): its key is on dsh_job_info alone.
    env = python_env({"TORCHELASTIC_RUN_ID": run_id or out.stem})
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL)


def _pids(out: Path) -> list[int]:
    try:
        info = json.loads(out.read_text())
    except (OSError, ValueError):
        return []
    return [info["root"], *info["children"]]


def _series(text: str) -> set[tuple[str, frozenset]]:
    return {
        (s.name, frozenset(s.labels.items()))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _scenario(pids: list[int]) -> dict:
    """Every process of every job on a GPU, so each pid could make per-process GPU series."""
    procs = [[], []]
    for i, pid in enumerate(dict.fromkeys(pids)):
        procs[i % GPUS].append({"pid": pid, "used_mib": 100 + i, "sm_util": 5})
    return {"gpus": [gpu(i, processes=procs[i]) for i in range(GPUS)]}


# 12 s of churn: 8 or more short jobs (4x the jobs cap) and ~60 replaced workers per long job, where
# one job past the cap, or one pid in a label, already breaks the bound; 30 s proved no more.
# at_once: every job has series from its first poll, so the churn meets the jobs cap; without it (the
# default, --metrics-min-job-age) the short jobs never get series at all.
@pytest.mark.parametrize(("churn_s", "at_once"), [(12.0, True), (12.0, False)])
def test_series_stay_within_the_bound_over_churn(no_probe_here, tmp_path, fake_nvml, churn_s, at_once):
    fake_nvml.write(_scenario([]))
    procs: list[subprocess.Popen] = []
    try:
        longs = [tmp_path / f"long{i}.json" for i in range(2)]
        for out in longs:
            procs.append(_busy(out, children=3, churn_period_s=0.2))
        wait_for(lambda: all(_pids(o) for o in longs), 30, what="the long jobs")
        args = ["--port", "0", "--interval", "0.3", "--metrics-max-jobs", str(MAX_JOBS)]
        args += list(METRICS_AT_ONCE) if at_once else []
        with Sidecar(args, env=fake_nvml.env()) as sc:

            def scrape() -> str:
                code, body = sc.get("/metrics")
                assert code == 200, body
                return body.decode()

            # The long jobs are exported (the oldest live jobs) before the churn starts.
            def jobs_exported() -> bool:
                return (
                    len({dict(lbl)["job_id"] for name, lbl in _series(scrape()) if name == "dsh_status"})
                    >= MAX_JOBS
                )

            wait_for(jobs_exported, 30, 0.3, what="the long jobs' series")
            seen: set[tuple[str, frozenset]] = set()
            omitted_max = 0.0
            shorts: list[tuple[float, subprocess.Popen, Path]] = []
            n_short = 0
            end = time.monotonic() + churn_s
            while time.monotonic() < end:
                now = time.monotonic()
                for short in [s for s in shorts if now - s[0] > SHORT_JOB_S]:
                    short[1].terminate()
                    short[1].wait(10)
                    shorts.remove(short)
                if len(shorts) < SHORT_JOBS_AT_ONCE:
                    n_short += 1
                    out = tmp_path / f"short{n_short}.json"
                    shorts.append((now, _busy(out, children=1), out))
                    procs.append(shorts[-1][1])
                live = [*longs, *(s[2] for s in shorts)]
                fake_nvml.write(_scenario([pid for out in live for pid in _pids(out)]))
                text = scrape()
                seen |= _series(text)
                for family in text_string_to_metric_families(text):
                    if family.name == "dsh_jobs_omitted":
                        omitted_max = max([omitted_max, *(s.value for s in family.samples)])
                time.sleep(0.25)  # the churn's pace (a scrape and a scenario every ~0.3 s), no wait

        bound = series_bound(GPUS, MAX_JOBS)
        assert len(seen) <= bound, (len(seen), bound, sorted(n for n, _ in seen)[-20:])
        assert n_short >= churn_s / SHORT_JOB_S
        # The churn reached the exporter: short jobs were found and left out past the cap, or (the
        # default) were younger than the minimum age, never counted as omitted...
        assert omitted_max >= 1 if at_once else omitted_max == 0
        # ...and per-process series were exported, keyed by role and rank, never by pid.
        per_process = [dict(lbl) for name, lbl in seen if name == "dsh_process_gpu_memory_used_bytes"]
        assert any(lbl["role"] == "dataloader-worker" for lbl in per_process), per_process
        assert not any("pid" in dict(lbl) for _, lbl in seen)
        # Every job has its own run key, short ones too: one dsh_job_info series per exported job,
        # and the key on no other series.
        runs = sorted(dict(lbl)["job_key"] for name, lbl in seen if name == "dsh_job_info")
        assert runs == ["long0", "long1"], runs
        assert not any("job_key" in dict(lbl) for name, lbl in seen if name != "dsh_job_info")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
