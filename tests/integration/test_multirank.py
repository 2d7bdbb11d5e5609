"""Multi-rank jobs: a real two-rank torch.distributed job (gloo, on the CPU) watched through its
launcher, and simulated GPU ranks that share a GPU or sit on the wrong one.

The real job is `torch.multiprocessing.spawn` with two ranks, each calling
`init_process_group("gloo")` then `probe.register(model)`, the way torchrun-launched code does; its
launcher (the pid the sidecar is given) runs no probe. The GPU cases use fake ranks (the probe's own
writer) with the simulated driver: torch here is a CPU build."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from probe_wire import read_segment
from tests.fakenvml import gpu
from tests.helpers.gloo_job import DDP_JOB
from tests.helpers.harness import (
    METRICS_AT_ONCE,
    REPO,
    FakeJob,
    Sidecar,
    codes,
    cuda_runtime,
    python_env,
    wait_for,
)

pytestmark = pytest.mark.slow

UUIDS = [gpu(0)["uuid"], gpu(1)["uuid"]]

LAUNCHERS = {
    "spawn": [sys.executable],
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"],
}


def metric_samples(body: bytes) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), s.value)
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
    ]


@pytest.mark.parametrize("launcher_kind", sorted(LAUNCHERS))
def test_real_two_rank_gloo_job_through_its_launcher(tmp_path, fake_nvml, launcher_kind):
    script = tmp_path / "train_ddp.py"
    script.write_text(DDP_JOB)
    stop = tmp_path / "stop"
    # One idle NVIDIA GPU the CPU-only ranks do not use.
    fake_nvml.write({"gpus": [gpu(0)]})
    env = python_env({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DSH_PROBE_INTERVAL_S": "0.25"})
    launcher = subprocess.Popen(
        [*LAUNCHERS[launcher_kind], str(script), str(tmp_path / "store"), str(stop)],
        env=env,
        cwd=REPO,
        start_new_session=True,  # the whole job can be ended as one process group
    )
    try:
        args = ["--pid", str(launcher.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.5", "--job-name", "ddp"]
        with Sidecar(args, env=fake_nvml.env()) as sc:

            def two_ranks(d):
                ranks = [p for p in d["processes"] if p["role"] == "rank"]
                return len(ranks) == 2 and all(
                    p["models"] and p["models"][0]["forward_calls"] > 0 for p in ranks
                )

            doc = sc.wait_status(two_ranks, timeout_s=60, what="two ranks with a registered model")
            assert launcher.poll() is None
            by_pid = {p["pid"]: p for p in doc["processes"]}
            top = by_pid[launcher.pid]
            assert top["has_probe"] is False and top["role"] is None and doc["target"]["pid"] == launcher.pid
            ranks = sorted((p for p in doc["processes"] if p["role"] == "rank"), key=lambda p: p["rank"])
            assert [p["rank"] for p in ranks] == [0, 1]
            assert [p["local_rank"] for p in ranks] == [0, 1]
            assert [p["world_size"] for p in ranks] == [2, 2]
            assert all(p["ppid"] == launcher.pid for p in ranks)
            for p in ranks:
                (m,) = p["models"]
                assert (
                    m["name"] == "Sequential"
                    and m["device"] == "cpu"
                    and m["param_count"] == 16 * 32 + 32 + 32 * 4 + 4
                )
                assert p["gpu"] == []
            # The probe records the backend (the status document has no field for it yet).
            for p in ranks:
                payload = read_segment(p["pid"]).payload
                assert payload["dist_backend"] == "gloo" and payload["rank"] == p["rank"]
                # GROUP_RANK: one node (torchrun sets it; mp.spawn sets nothing to read).
                assert payload["node_rank"] == (0 if launcher_kind == "torchrun" else None), payload
            # One run, one key: the ranks' own, in the document and on dsh_job_info.
            run = doc["distributed"]
            keys = {read_segment(p["pid"]).payload["job_key"] for p in ranks}
            assert keys == {run["job_key"]} and run["job_key"]
            assert run["job_key_source"] == ("torchelastic" if launcher_kind == "torchrun" else "launch")
            assert (run["ranks"], run["world_size"]) == ([0, 1], 2)
            assert doc["pod"] is None
            # A CPU-only torch on a machine with an NVIDIA GPU.
            assert doc["status"] == "CPU" and "cpu-build" in codes(doc)
            assert not codes(doc) & {"rank-shared-gpu", "rank-device-mismatch"}

            # The same ranks in /metrics.
            code, body = sc.get("/metrics")
            assert code == 200
            samples = metric_samples(body)
            rank_info = sorted(
                (lbl["rank"], lbl["local_rank"], lbl["world_size"], "pid" in lbl, lbl["job_name"])
                for n, lbl, _ in samples
                if n == "dsh_rank_info"
            )
            # No pid label (bounded cardinality: docs/metrics.md); one series per rank.
            assert rank_info == [(str(p["rank"]), str(p["rank"]), "2", False, "ddp") for p in ranks]
            models = sorted(
                (lbl["rank"], lbl["device"], lbl["model"]) for n, lbl, _ in samples if n == "dsh_model_info"
            )
            assert models == [("0", "cpu", "Sequential"), ("1", "cpu", "Sequential")]
            assert {lbl["status"] for n, lbl, v in samples if n == "dsh_status" and v == 1} == {"CPU"}
            (job_info,) = [lbl for n, lbl, _ in samples if n == "dsh_job_info"]
            assert (job_info["job_key"], job_info["world_size"]) == (run["job_key"], "2")

            # The job ends on its own: both ranks leave the group and the launcher exits 0.
            stop.write_text("")
            assert launcher.wait(30) == 0
            doc = sc.wait_status(lambda d: not d["target"]["alive"], what="the job's exit")
            assert "target-exited" in codes(doc)
    finally:
        stop.write_text("")  # ranks still training leave on their own
        try:  # torchrun's workers may sit in process groups of their own: every descendant too
            ranks = psutil.Process(launcher.pid).children(recursive=True)
        except psutil.Error:
            ranks = []
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
        for rank in ranks:
            try:
                rank.kill()
            except psutil.Error:
                pass


# ---------------------------------------------------------------------------------------------
# Simulated GPU ranks
# ---------------------------------------------------------------------------------------------
def gpu_rank(rank: int, local_rank: int, device: str, **runtime) -> dict:
    return {
        "payload": {
            "role": "rank",
            "rank": rank,
            "local_rank": local_rank,
            "world_size": 2,
            "dist_backend": "nccl",
            "runtime": cuda_runtime(UUIDS, **runtime),
            "models": [
                {
                    "name": "Net",
                    "class": "Net",
                    "params": 1000,
                    "device": device,
                    "devices": [device],
                    "input_device": device,
                }
            ],
        }
    }


def active_warnings(sc: Sidecar) -> dict[str, set[str]]:
    """code -> the `dsh_warning_active` series' severities, from /metrics."""
    code, body = sc.get("/metrics")
    assert code == 200
    out: dict[str, set[str]] = {}
    for n, lbl, v in metric_samples(body):
        if n == "dsh_warning_active" and v == 1:
            out.setdefault(lbl["code"], set()).add(lbl["severity"])
    return out


def wait_metrics_warnings(sc: Sidecar, pred, what: str) -> dict[str, set[str]]:
    def check():
        w = active_warnings(sc)
        return w if pred(w) else None

    return wait_for(check, 10, 0.2, what)


def nvml_ranks(pid0: int, gpu0: int, pid1: int, gpu1: int) -> dict:
    """Each rank's process on the GPU the driver lists it on."""
    procs: dict[int, list] = {0: [], 1: []}
    procs[gpu0].append({"pid": pid0, "used_mib": 3000, "sm_util": 50})
    procs[gpu1].append({"pid": pid1, "used_mib": 3000, "sm_util": 50})
    return {
        "gpus": [
            gpu(i, util_gpu=60 if procs[i] else 0, memory_used_mib=3000 * len(procs[i]), processes=procs[i])
            for i in (0, 1)
        ]
    }


def test_ranks_sharing_a_gpu_and_a_rank_on_the_wrong_gpu(tmp_path, fake_nvml):
    specs = {
        "launcher": {"probe": False, "children": ["rank0", "rank1"]},
        # Both ranks believe they are local rank 0 (two single-node launches on one machine): they share
        # GPU 0, each on the GPU its LOCAL_RANK names.
        "rank0": gpu_rank(0, 0, "cuda:0"),
        "rank1": gpu_rank(1, 0, "cuda:0"),
    }
    with FakeJob(tmp_path / "job", specs, root="launcher") as job:
        r0, r1 = job.pids["rank0"], job.pids["rank1"]
        fake_nvml.write(nvml_ranks(r0, 0, r1, 0))
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
            doc = sc.wait_status(lambda d: "rank-shared-gpu" in codes(d), what="rank-shared-gpu")
            (w,) = [w for w in doc["warnings"] if w["code"] == "rank-shared-gpu"]
            assert sorted(w["pids"]) == sorted([r0, r1]) and "GPU 0" in w["message"]
            assert "set_device(local_rank)" in w["hint"]
            assert "rank-device-mismatch" not in codes(doc)
            assert doc["status"] == "GPU"
            ranks = sorted((p for p in doc["processes"] if p["role"] == "rank"), key=lambda p: p["rank"])
            assert [(p["rank"], p["gpu"][0]["index"], p["models"][0]["device"]) for p in ranks] == [
                (0, 0, "cuda:0"),
                (1, 0, "cuda:0"),
            ]
            warns = wait_metrics_warnings(sc, lambda w: "rank-shared-gpu" in w, "rank-shared-gpu in /metrics")
            assert warns["rank-shared-gpu"] == {"warning"} and "rank-device-mismatch" not in warns

            # The second rank now says LOCAL_RANK=1 but keeps its model on cuda:0: both warnings.
            job.update("rank1", gpu_rank(1, 1, "cuda:0"))
            doc = sc.wait_status(
                lambda d: {"rank-shared-gpu", "rank-device-mismatch"} <= codes(d), what="both rank warnings"
            )
            (w,) = [w for w in doc["warnings"] if w["code"] == "rank-device-mismatch"]
            assert w["pids"] == [r1] and "LOCAL_RANK=1" in w["message"] and "cuda:0" in w["message"]
            warns = wait_metrics_warnings(
                sc, lambda w: {"rank-shared-gpu", "rank-device-mismatch"} <= set(w), "both in /metrics"
            )
            assert warns["rank-device-mismatch"] == {"warning"}

            # Fixed: each rank on the GPU of its LOCAL_RANK. Both warnings clear, in the document and
            # in /metrics (after the verdict's hysteresis of a few polls).
            job.update("rank1", gpu_rank(1, 1, "cuda:1"))
            fake_nvml.write(nvml_ranks(r0, 0, r1, 1))
            doc = sc.wait_status(
                lambda d: not codes(d) & {"rank-shared-gpu", "rank-device-mismatch"}, what="warnings cleared"
            )
            ranks = sorted((p for p in doc["processes"] if p["role"] == "rank"), key=lambda p: p["rank"])
            assert [(p["rank"], p["gpu"][0]["index"]) for p in ranks] == [(0, 0), (1, 1)]
            wait_metrics_warnings(
                sc, lambda w: not set(w) & {"rank-shared-gpu", "rank-device-mismatch"}, "cleared in /metrics"
            )


def test_swapped_ranks_are_a_device_mismatch_without_sharing(tmp_path, fake_nvml):
    specs = {
        "launcher": {"probe": False, "children": ["rank0", "rank1"]},
        "rank0": gpu_rank(0, 0, "cuda:1"),
        "rank1": gpu_rank(1, 1, "cuda:0"),
    }
    with FakeJob(tmp_path / "job", specs, root="launcher") as job:
        r0, r1 = job.pids["rank0"], job.pids["rank1"]
        fake_nvml.write(nvml_ranks(r0, 1, r1, 0))
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
            doc = sc.wait_status(lambda d: "rank-device-mismatch" in codes(d), what="rank-device-mismatch")
            (w,) = [w for w in doc["warnings"] if w["code"] == "rank-device-mismatch"]
            assert sorted(w["pids"]) == sorted([r0, r1])
            assert "rank-shared-gpu" not in codes(doc)
            warns = wait_metrics_warnings(sc, lambda w: "rank-device-mismatch" in w, "mismatch in /metrics")
            assert "rank-shared-gpu" not in warns


def test_one_visible_gpu_per_rank_is_not_a_mismatch(tmp_path, fake_nvml):
    """The other common layout: the launcher sets CUDA_VISIBLE_DEVICES=<local rank> per rank, so each
    rank sees exactly its own GPU as cuda:0. Rank 1 on cuda:0 is NVML GPU 1: nothing is wrong."""
    specs = {
        "launcher": {"probe": False, "children": ["rank0", "rank1"]},
        "rank0": gpu_rank(
            0,
            0,
            "cuda:0",
            cuda_visible_devices="0",
            device_count=1,
            devices=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": UUIDS[0]}],
        ),
        "rank1": gpu_rank(
            1,
            1,
            "cuda:0",
            cuda_visible_devices="1",
            device_count=1,
            devices=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": UUIDS[1]}],
        ),
    }
    with FakeJob(tmp_path / "job", specs, root="launcher") as job:
        fake_nvml.write(nvml_ranks(job.pids["rank0"], 0, job.pids["rank1"], 1))
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
            doc = sc.wait_status(
                lambda d: sum(1 for p in d["processes"] if p["role"] == "rank" and p["gpu"]) == 2,
                what="both ranks on their GPUs",
            )
            # Three more polls (0.3 s each): a warning that needs a few polls to show would be there.
            doc = sc.wait_status(lambda d, t0=doc["time_unix_s"]: d["time_unix_s"] >= t0 + 0.9, what="three more polls")
            assert "rank-shared-gpu" not in codes(doc)
            assert "rank-device-mismatch" not in codes(doc)
