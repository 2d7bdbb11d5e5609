"""`dsh-sidecar report --prometheus` and DshGpuHeldIdle on a real Prometheus scraping a real sidecar.

One job holds memory on two fake GPUs (tests/fakenvml): GPU 0 at 0 % utilisation and 60 W (held
with no work), GPU 1 at 90 % and 250 W. Prometheus loads the shipped configuration and rule files,
the accounting rules' minute made two seconds and the alert's 30 minutes two seconds (test copies:
tests/helpers/prometheus.py), with 1 s scrapes. Then:

- DshGpuHeldIdle fires for GPU 0, with the job's id and its user, and never for GPU 1;
- the report (the real CLI in this process) gives each GPU the GPU-seconds Prometheus's raw samples
  of `dsh_job_gpu_held` say it was held (counted here from the raw series, apart from the rules),
  GPU 0 none busy, GPU 1 all busy, energy at each GPU's power, GPU 0 first (held with no work).
"""

from __future__ import annotations

import json
import os
import pwd
import time

import pytest

from sidecar.cli.main import main
from sidecar.common.exit_codes import EXIT_OK
from tests.fakenvml import gpu
from tests.helpers.harness import API, METRICS_AT_ONCE, FakeJob, Sidecar, wait_for
from tests.helpers.prometheus import NEEDS_PROMETHEUS, Prometheus, shipped_config

pytestmark = NEEDS_PROMETHEUS
TOKEN = "report-s3cret-token"
RULE_S = 2  # the test copy's accounting minute
USER = pwd.getpwuid(os.getuid()).pw_name
SLURM_JOB = "4242"


def test_the_fleet_report_and_the_held_idle_alert(tmp_path, fake_nvml, capsys):
    # Discovery (no --pid), as a fleet's sidecars run: dsh_job_info names the job's user and its
    # Slurm job (the sidecar user's own process: its SLURM_JOB_ID counts).
    slurm = {**os.environ, "SLURM_JOB_ID": SLURM_JOB}
    with FakeJob(tmp_path / "job", {"main": {"probe": False}}, detach=True, env=slurm) as job:
        fake_nvml.write(
            {
                "gpus": [
                    gpu(0, util_gpu=0, memory_used_mib=1000, processes=[{"pid": job.pid, "used_mib": 1000}]),
                    gpu(
                        1,
                        util_gpu=90,
                        power_mw=250_000,
                        memory_used_mib=2000,
                        processes=[{"pid": job.pid, "used_mib": 2000}],
                    ),
                ]
            }
        )
        args = ["--port", "0", *METRICS_AT_ONCE, "--interval", "0.5", "--token", TOKEN]
        with Sidecar(args, env=fake_nvml.env(), token=TOKEN) as sc:
            doc = wait_for(lambda: _on_both_gpus(sc, job.pid), 20, 0.2, "the job on both GPUs")
            jobs = sc.get(f"{API}/jobs")[1]["jobs"]
            assert [j["slurm_job"] for j in jobs if j["id"] == doc["job_id"]] == [SLURM_JOB]
            runs = wait_for(
                lambda: [r for r in sc.get(f"{API}/runs")[1]["runs"] if r["job_id"] == doc["job_id"]],
                20,
                0.2,
                "the job's run recorded",
            )
            assert runs[0]["slurm_job"] == SLURM_JOB  # the run ledger's key for `dsh-sidecar report`
            port = int(sc.url.rsplit(":", 1)[1])
            config = shipped_config(
                tmp_path, [(port, "node-a")], TOKEN, accounting_interval_s=RULE_S, held_idle_for_s=2
            )
            prom = Prometheus(config, tmp_path)
            try:
                _check(prom, doc["job_id"], capsys)
            finally:
                prom.stop()


def _on_both_gpus(sc: Sidecar, pid: int) -> dict | None:
    """The job's status document once discovery has it on both GPUs (other jobs may be found too)."""
    _, jobs = sc.get(f"{API}/jobs")
    ids = [j["id"] for j in (jobs or {}).get("jobs") or () if j["root_pid"] == pid]
    if not ids:
        return None
    code, doc = sc.get(f"{API}/status?job={ids[0]}")
    on = {g["index"] for p in doc["processes"] for g in p["gpu"]} if code == 200 else set()
    return doc if on == {0, 1} else None


def _check(prom: Prometheus, job_id: str, capsys) -> None:
    wait_for(lambda: len(prom.query("dsh_job_gpu_held")) == 2, 20, 0.25, "the hold series")
    started = time.time()
    firing = wait_for(
        lambda: prom.query('ALERTS{alertname="DshGpuHeldIdle", alertstate="firing"}'),
        20,
        0.25,
        "DshGpuHeldIdle",
    )
    labels = [m for m, _ in firing]
    assert len(labels) == 1 and labels[0]["gpu"] == "0" and labels[0]["job_id"] == job_id, labels
    assert labels[0]["user"] == USER and labels[0]["node"] == "node-a" and labels[0]["slurm_job"] == SLURM_JOB
    time.sleep(max(0.0, started + 4 - time.time()))  # a few accounting minutes
    until = time.time()
    # The held seconds from Prometheus's raw 1 s scrapes, apart from the rules.
    window = f"[{round(until - started) + 60}s]"
    raw = {m["gpu"]: v for m, v in prom.query(f"count_over_time(dsh_job_gpu_held{window})")}
    assert (
        main(
            [
                "report",
                "--prometheus",
                prom.url,
                "--since",
                f"@{started - 60}",
                "--until",
                f"@{until}",
                "--by",
                "gpu",
                "--json",
            ]
        )
        == EXIT_OK
    )
    report = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in report["rows"]}
    assert list(rows) == ["node-a/0", "node-a/1"], rows  # held with no work first
    for index, watts in (("0", 60.0), ("1", 250.0)):
        row = rows[f"node-a/{index}"]
        held_s = row["gpu_held_h"] * 3600
        # a rule's first and last value may cover part of its interval: within two of them
        assert abs(held_s - raw[index]) <= 2 * RULE_S + 1, (index, held_s, raw)
        assert row["energy_kwh"] * 3.6e6 == pytest.approx(watts * held_s, rel=0.01)
        assert row["users"] == [USER] and row["runs"] == 1 and row["slurm_jobs"] == [SLURM_JOB]
    assert rows["node-a/0"]["gpu_busy_h"] == 0 and rows["node-a/0"]["gpu_idle_held_h"] > 0
    assert rows["node-a/1"]["gpu_idle_held_h"] < 1e-9
