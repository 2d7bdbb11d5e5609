"""straggler-rank end to end: real DDP jobs of 2 and 4 ranks (gloo, on the CPU, each rank probed)
where one rank sleeps in its DataLoader or in its forward, watched through their launcher by a real
sidecar; a balanced job; and simulated GPU ranks where one rank's GPU is throttled (the simulated
driver: torch here is a CPU build)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakenvml import gpu
from tests.helpers.harness import METRICS_AT_ONCE, REPO, FakeJob, Sidecar, codes, cuda_runtime, python_env
from tests.helpers.straggler_job import STRAGGLER_JOB

pytestmark = pytest.mark.slow

SLOW_S = 0.15  # what the slow rank adds to each of its steps
MIN_STEPS = 30  # Rules.straggler_min_steps


def stragglers(doc: dict) -> list[dict]:
    return [w for w in doc["warnings"] if w["code"] == "straggler-rank"]


class Job:
    """The straggler job, its ranks started by torch.multiprocessing (fork); ended (every rank) on exit."""

    def __init__(self, tmp_path, world: int, slow_rank: int, mode: str):
        script = tmp_path / "train_straggler.py"
        script.write_text(STRAGGLER_JOB)
        self.stop = tmp_path / "stop"
        env = python_env({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DSH_PROBE_INTERVAL_S": "0.25"})
        argv = [str(tmp_path / "store"), str(self.stop), str(world), str(slow_rank), mode, str(SLOW_S)]
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *argv], env=env, cwd=REPO, start_new_session=True
        )

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self.stop.write_text("")  # ranks still training leave on their own
        try:
            ranks = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            ranks = []
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for rank in ranks:
            try:
                rank.kill()
            except psutil.Error:
                pass


def measured(world: int):
    """The status has every rank's wait from windows of MIN_STEPS steps or more."""

    def pred(d: dict) -> bool:
        waits = d["rank_waits"] or []
        return len(waits) == world and all(w["steps"] >= MIN_STEPS for w in waits)

    return pred


def watch(tmp_path, fake_nvml, world: int, slow_rank: int, mode: str, pred, what: str):
    """Run the job under a sidecar until ``pred(status)`` holds; (that status, /metrics samples)."""
    fake_nvml.write({"gpus": [gpu(0)]})
    with Job(tmp_path, world, slow_rank, mode) as job:
        args = ["--pid", str(job.proc.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.5"]
        with Sidecar(args, env=fake_nvml.env()) as sc:
            doc = sc.wait_status(pred, timeout_s=90, what=what)
            code, body = sc.get("/metrics")
            assert code == 200
            samples = [
                (s.name, dict(s.labels), s.value)
                for f in text_string_to_metric_families(body.decode())
                for s in f.samples
            ]
            return doc, samples


# The cause (data or forward) and the job's size are found independently: each cause once, the
# slow rank once the last of four and once rank 0 of two.
@pytest.mark.parametrize(
    ("world", "slow_rank", "mode", "cause"),
    [(4, 3, "data", "its data wait"), (2, 0, "forward", "its forward")],
    ids=["4-ranks-data", "2-ranks-forward"],
)
def test_the_slow_rank_and_its_cause_are_named(tmp_path, fake_nvml, world, slow_rank, mode, cause):
    doc, samples = watch(
        tmp_path, fake_nvml, world, slow_rank, mode, lambda d: stragglers(d), f"straggler-rank for rank {slow_rank}"
    )
    (w,) = stragglers(doc)
    ranks = {p["rank"]: p["pid"] for p in doc["processes"] if p["role"] == "rank"}
    assert w["pids"][0] == ranks[slow_rank] and sorted(w["pids"]) == sorted(ranks.values())
    # Its node is the host name its probe reports.
    assert f"Rank {slow_rank} (pid {ranks[slow_rank]}, node {os.uname().nodename})" in w["message"], w["message"]
    assert f"because of {cause}," in w["message"], w["message"]
    waits = {r["rank"]: r for r in doc["rank_waits"]}
    assert waits[slow_rank]["collective_wait_fraction"] == 0.0
    others = [r["collective_wait_fraction"] for k, r in waits.items() if k != slow_rank]
    # The others wait about SLOW_S of a step of about SLOW_S + the base: well over the threshold.
    assert min(others) > 0.3, waits
    phase = {"data": "data_wait_fraction", "forward": "forward_fraction"}[mode]
    assert all(waits[slow_rank][phase] > r[phase] + 0.3 for k, r in waits.items() if k != slow_rank), waits
    series = {lbl["rank"]: (set(lbl), v) for n, lbl, v in samples if n == "dsh_rank_collective_wait_fraction"}
    assert sorted(series) == [str(r) for r in range(world)]
    assert all(labels == {"job_id", "rank"} for labels, _ in series.values())
    assert min(series.items(), key=lambda kv: kv[1][1])[0] == str(slow_rank)
    # What a comparison across nodes needs: each rank's own backward, the straggler's the least.
    backward = {lbl["rank"]: v for n, lbl, v in samples if n == "dsh_rank_backward_fraction"}
    assert sorted(backward) == sorted(series) and min(backward, key=backward.get) == str(slow_rank)


def test_a_balanced_job_gets_no_straggler(tmp_path, fake_nvml):
    """Four ranks alike: measured for several polls after each holds 30 steps, never a straggler."""
    seen: list[dict] = []

    def pred(d: dict) -> bool:
        assert not stragglers(d), d["warnings"]
        if measured(4)(d):
            seen.append(d)
        # 4 s of measured polls: twice the confirmation, at the sidecar's own clock.
        return len(seen) > 1 and seen[-1]["time_unix_s"] - seen[0]["time_unix_s"] >= 4.0

    doc, samples = watch(tmp_path, fake_nvml, 4, -1, "none", pred, "4 s of a measured balanced job")
    assert all(r["collective_wait_fraction"] < 0.1 for r in doc["rank_waits"]), doc["rank_waits"]
    assert len([n for n, _, _ in samples if n == "dsh_rank_collective_wait_fraction"]) == 4


# ---------------------------------------------------------------------------------------------
# Simulated GPU ranks: one rank's GPU throttled
# ---------------------------------------------------------------------------------------------
UUIDS = [gpu(i)["uuid"] for i in range(4)]


def gpu_rank(rank: int, backward_fraction: float) -> dict:
    """A rank on cuda:<rank> whose probe reports a step breakdown of 40 steps."""
    device = f"cuda:{rank}"
    steps = {
        "window_s": 10.0,
        "steps": 40,
        "step_s": 0.25,
        "data_wait_fraction": 0.05,
        "forward_fraction": 0.35,
        "optimizer_fraction": 0.05,
        "other_fraction": 0.55,
        "backward_fraction": backward_fraction,
    }
    model = {"name": "Net", "class": "Net", "params": 1000, "device": device, "devices": [device], "input_device": device}
    payload = {
        "role": "rank",
        "rank": rank,
        "local_rank": rank,
        "world_size": 4,
        "dist_backend": "nccl",
        "runtime": cuda_runtime(UUIDS, device_count=4),
        "models": [model],
        "steps": steps,
    }
    return {"payload": payload}


def test_a_rank_on_a_throttled_gpu_is_named_with_its_gpu(tmp_path, fake_nvml):
    specs = {"launcher": {"probe": False, "children": [f"rank{r}" for r in range(4)]}}
    specs |= {f"rank{r}": gpu_rank(r, 0.30 if r == 1 else 0.50) for r in range(4)}
    with FakeJob(tmp_path / "job", specs, root="launcher") as job:
        pids = [job.pids[f"rank{r}"] for r in range(4)]
        fake_nvml.write(
            {
                "gpus": [
                    gpu(
                        i,
                        util_gpu=90,
                        memory_used_mib=3000,
                        processes=[{"pid": pids[i], "used_mib": 3000, "sm_util": 90}],
                        **({"clock_event_reasons": ["hw_thermal_slowdown"], "sm_clock_mhz": 1005} if i == 1 else {}),
                    )
                    for i in range(4)
                ]
            }
        )
        start = time.monotonic()
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
            doc = sc.wait_status(lambda d: stragglers(d), timeout_s=30, what="straggler-rank")
            (w,) = stragglers(doc)
            assert w["pids"][0] == pids[1]
            assert f"Rank 1 (pid {pids[1]}, GPU 1)" in w["message"], w["message"]  # its payload names no host
            assert "a throttled GPU (GPU 1: hardware thermal slowdown, SM clock 1005 MHz)" in w["message"]
            assert "cooling" in w["hint"]
            assert "throttled" in codes(doc)  # the GPU's own warning beside it
            # Confirmed at two polls 2 s apart: never at the first poll.
            assert time.monotonic() - start >= 2.0
