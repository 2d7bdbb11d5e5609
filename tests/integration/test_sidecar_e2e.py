"""The sidecar end to end: real processes, real shared memory, NVML through the simulated driver,
HTTP over loopback. The GPU side is simulated (torch here is a CPU build): a process publishes
probe facts through the probe's own writer while the simulated driver reports the same pid."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from sidecar.common.catalogue import render
from tests.fakenvml import gpu, make_fake_sysfs
from tests.helpers.document_keys import GPU_KEYS, MODEL_KEYS, PROCESS_KEYS, STATUS_KEYS
from tests.helpers.harness import FakeJob, Sidecar, codes, cuda_runtime, wait_for

pytestmark = pytest.mark.slow

UUID0 = gpu(0)["uuid"]


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return make_fake_sysfs(
        tmp_path / "sys", [{"pci": "0000:10:00.0", "vendor": "0x10de", "driver": "nvidia"}]
    )


@pytest.fixture
def env(fake_nvml):
    return fake_nvml.env({"DSH_SIDECAR_RULES": json.dumps({"idle_window_s": 2.0})})


def gpu_model(device="cuda:0", inp="cuda:0", name="ResNet", **kw):
    return {
        "name": name,
        "class": name,
        "params": 11_000_000,
        "device": device,
        "devices": [device],
        "input_device": inp,
        **kw,
    }


def trainer_spec(**payload):
    return {"payload": {"runtime": cuda_runtime([UUID0]), "models": [gpu_model()], **payload}}


def nvidia_row(doc, index: int) -> dict:
    """What a process's row on an NVIDIA GPU carries beside NVML's figures (issue 41's keys)."""
    (g,) = [g for g in doc["gpus"] if g["index"] == index]
    return {"vendor": "nvidia", "pci_bus_id": g["pci_bus_id"], "unknown_reason": None}


def sidecar(pid: int, env, sysfs: Path, *extra: str) -> Sidecar:
    """The sidecar of the job under `pid`; the OS's graphics devices are the fake /sys's."""
    return Sidecar(
        ["--pid", str(pid), "--port", "0", "--interval", "0.3", "--path.sysfs", str(sysfs), *extra], env=env
    )


def test_status_document_schema_and_gpu_verdict(tmp_path, fake_nvml, env, sysfs):
    with FakeJob(tmp_path / "job", {"main": trainer_spec()}) as job:
        fake_nvml.write(
            {
                "gpus": [
                    gpu(
                        0,
                        memory_used_mib=4200,
                        util_gpu=87,
                        processes=[{"pid": job.pid, "used_mib": 4000, "sm_util": 85}],
                    )
                ]
            }
        )
        with sidecar(job.pid, env, sysfs) as sc:
            doc = sc.wait_status(
                lambda d: d["status"] == "GPU" and d["processes"][0]["gpu"], what="GPU verdict"
            )
            assert set(doc) >= STATUS_KEYS
            assert doc["schema"] == 2 and doc["interval_s"] == 0.3
            assert doc["target"]["pid"] == job.pid and doc["target"]["alive"] is True
            assert doc["model_device"] == "cuda:0" and doc["model_gpu_index"] == 0
            g = doc["gpus"][0]
            assert g["util_pct"] == 87 and g["mem_used_mib"] == 4200
            assert "cuda:0" in doc["message"] and "A100" in doc["message"]
            assert doc["nvml"]["ok"] is True and doc["nvml"]["driver"]
            (g,) = doc["gpus"]
            assert (
                set(g) >= GPU_KEYS
                and g["uuid"] == UUID0
                and g["framework_index"] == 0
                and g["mem_total_mib"] == 81920
            )
            (p,) = doc["processes"]
            assert set(p) >= PROCESS_KEYS and p["role"] == "main" and p["has_probe"] is True
            assert set(p["models"][0]) >= MODEL_KEYS
            assert p["gpu"] == [
                {"index": 0, "mem_used_mib": 4000, "sm_util_pct": 85, "mig_index": None, **nvidia_row(doc, 0)}
            ]
            assert doc["system_gpus"][0]["nvml_index"] == 0
            assert doc["runtime"]["cuda_build"] == "12.4" and doc["runtime"]["cuda_available"] is True
            assert not codes(doc) & {"input-mismatch", "no-probe", "nvml-unavailable", "model-on-cpu"}


def test_cpu_model_with_an_nvidia_gpu_present_is_cpu_build(tmp_path, fake_nvml, env, sysfs):
    cpu_rt = {"torch": "2.13.0+cpu", "cuda_build": None, "cuda_available": False, "device_count": 0}
    spec = {"payload": {"runtime": cpu_rt, "models": [gpu_model("cpu", "cpu", name="MLP")]}}
    fake_nvml.write({"gpus": [gpu(0)]})
    with FakeJob(tmp_path / "job", {"main": spec}) as job, sidecar(job.pid, env, sysfs) as sc:
        doc = sc.wait_status(lambda d: d["status"] == "CPU", what="CPU verdict")
        assert "cpu-build" in codes(doc)
        assert doc["warnings"][0]["code"] == "cpu-build" and doc["warnings"][0]["severity"] == "error"
        assert "CPU-only build" in doc["message"] and doc["message"] == render(doc["message_ref"])
        first = doc["warnings"][0]
        assert first["message_ref"]["id"] == "warning.cpu-build" and first["message"] == render(first["message_ref"])
        assert "CPU" in render(first["message_ref"], "zh") and render(first["hint_ref"], "zh")


def test_inputs_left_on_cpu_then_idle_gpu_then_memory_freed(tmp_path, fake_nvml, env, sysfs):
    spec = trainer_spec(models=[gpu_model(inp="cpu")])
    with FakeJob(tmp_path / "job", {"main": spec}) as job:
        busy = {"pid": job.pid, "used_mib": 4000, "sm_util": 80}
        fake_nvml.write({"gpus": [gpu(0, memory_used_mib=4100, util_gpu=80, processes=[busy])]})
        with sidecar(job.pid, env, sysfs) as sc:
            doc = sc.wait_status(lambda d: "input-mismatch" in codes(d), what="input-mismatch")
            assert doc["input_device"] == "cpu" and doc["status"] == "GPU"
            # The GPU goes idle while forward calls continue: idle-gpu after the (shortened) window.
            job.update("main", trainer_spec())
            fake_nvml.write(
                {"gpus": [gpu(0, memory_used_mib=4100, util_gpu=0, processes=[{**busy, "sm_util": 0}])]}
            )
            doc = sc.wait_status(lambda d: "idle-gpu" in codes(d), what="idle-gpu")
            (w,) = [w for w in doc["warnings"] if w["code"] == "idle-gpu"]
            assert job.pid in w["pids"] and "data loading" in w["hint"]
            # Freeing memory shows in the history.
            t0 = time.time()
            fake_nvml.write(
                {
                    "gpus": [
                        gpu(
                            0,
                            memory_used_mib=600,
                            util_gpu=0,
                            processes=[{**busy, "used_mib": 500, "sm_util": 0}],
                        )
                    ]
                }
            )
            wait_for(
                lambda: any(s["gpus"][0]["mem_used_mib"] == 600 for s in sc.history(t0)["samples"]),
                10,
                what="freed memory in the history",
            )
            samples = sc.history()["samples"]
            mems = [s["gpus"][0]["mem_used_mib"] for s in samples]
            assert 4100 in mems and mems[-1] == 600
            assert [p["gpu_mem_mib"] for p in samples[-1]["processes"]] == [500]
            assert all(a["time_unix_s"] < b["time_unix_s"] for a, b in zip(samples, samples[1:]))


def test_blind_spot_launcher_child_and_workers(tmp_path, fake_nvml, env, sysfs):
    """Attached to a launcher that does no GPU work, the sidecar finds the training child and its
    DataLoader workers, with the GPU use the driver assigns to the child."""
    specs = {
        "launcher": {"probe": False, "children": ["trainer"]},
        "trainer": {**trainer_spec(), "children": ["worker0", "worker1"]},
        "worker0": {
            "payload": {"role": "dataloader-worker", "worker_id": 0, "runtime": cuda_runtime([UUID0])}
        },
        "worker1": {
            "payload": {"role": "dataloader-worker", "worker_id": 1, "runtime": cuda_runtime([UUID0])}
        },
    }
    with FakeJob(tmp_path / "job", specs, root="launcher") as job:
        trainer = job.pids["trainer"]
        fake_nvml.write(
            {
                "gpus": [
                    gpu(
                        0,
                        memory_used_mib=9000,
                        util_gpu=70,
                        processes=[{"pid": trainer, "used_mib": 8800, "sm_util": 66}],
                    )
                ]
            }
        )
        with sidecar(job.pid, env, sysfs) as sc:
            doc = sc.wait_status(
                lambda d: len(d["processes"]) == 4 and d["status"] == "GPU", what="whole tree"
            )
            by_pid = {p["pid"]: p for p in doc["processes"]}
            assert by_pid[job.pid]["has_probe"] is False and by_pid[job.pid]["role"] is None
            assert by_pid[trainer]["role"] == "main" and by_pid[trainer]["ppid"] == job.pid
            assert by_pid[trainer]["gpu"] == [
                {"index": 0, "mem_used_mib": 8800, "sm_util_pct": 66, "mig_index": None, **nvidia_row(doc, 0)}
            ]
            workers = sorted(
                (p for p in doc["processes"] if p["role"] == "dataloader-worker"),
                key=lambda p: p["worker_id"],
            )
            assert [w["worker_id"] for w in workers] == [0, 1]
            assert all(w["ppid"] == trainer for w in workers)
            assert "gpu-work-in-child" in codes(doc)
            assert "worker-cuda" not in codes(doc)
            # A worker that touches CUDA is called out.
            fake_nvml.write(
                {
                    "gpus": [
                        gpu(
                            0,
                            memory_used_mib=9500,
                            util_gpu=70,
                            processes=[
                                {"pid": trainer, "used_mib": 8800, "sm_util": 66},
                                {"pid": job.pids["worker1"], "used_mib": 300, "sm_util": 0},
                            ],
                        )
                    ]
                }
            )
            doc = sc.wait_status(lambda d: "worker-cuda" in codes(d), what="worker-cuda")
            (w,) = [w for w in doc["warnings"] if w["code"] == "worker-cuda"]
            assert w["pids"] == [job.pids["worker1"]]


def test_igpu_beside_dgpu_names_the_intel_device(tmp_path, fake_nvml):
    sysfs = make_fake_sysfs(
        tmp_path / "sys",
        [
            {"pci": "0000:00:02.0", "vendor": "0x8086", "device": "0x9a49", "driver": "i915"},
            {"pci": "0000:10:00.0", "vendor": "0x10de", "device": "0x2684", "driver": "nvidia"},
        ],
    )
    env = fake_nvml.env()
    fake_nvml.write({"gpus": [gpu(0)]})
    with FakeJob(tmp_path / "job", {"main": trainer_spec()}) as job, sidecar(job.pid, env, sysfs) as sc:
        doc = sc.wait_status(lambda d: "device-count-mismatch" in codes(d), what="device-count-mismatch")
        (w,) = [w for w in doc["warnings"] if w["code"] == "device-count-mismatch"]
        assert "Intel" in w["message"] and "0000:00:02.0" in w["message"] and "can use 1" in w["message"]
        intel = [s for s in doc["system_gpus"] if s["vendor"] == "Intel"]
        assert intel and intel[0]["nvml_index"] is None and intel[0]["driver"] == "i915"


def test_no_driver_then_failing_driver(tmp_path, fake_nvml, sysfs):
    empty = tmp_path / "no-driver"
    empty.mkdir()
    env = fake_nvml.env()
    env["LD_LIBRARY_PATH"] = str(empty)
    with FakeJob(tmp_path / "job", {"main": trainer_spec()}) as job:
        with sidecar(job.pid, env, sysfs) as sc:
            doc = sc.wait_status(lambda d: d["status"] == "GPU", what="verdict from the probe alone")
            assert doc["nvml"]["ok"] is False and "not found" in doc["nvml"]["error"]
            assert doc["gpus"] == [] and "nvml-unavailable" in codes(doc)
            (w,) = [w for w in doc["warnings"] if w["code"] == "nvml-unavailable"]
            assert w["severity"] == "warning"  # the OS sees an NVIDIA card: this is a real problem
        fake_nvml.write({"init_error": "DRIVER_NOT_LOADED", "gpus": [gpu(0)]})
        with sidecar(job.pid, fake_nvml.env(), sysfs) as sc:
            doc = sc.wait_status(lambda d: "nvml-unavailable" in codes(d), what="driver not loaded")
            assert doc["nvml"]["ok"] is False and "not loaded" in doc["nvml"]["error"].lower()
            # The driver comes up: the sidecar retries with backoff and recovers without a restart.
            fake_nvml.write({"gpus": [gpu(0, util_gpu=55)]})
            doc = sc.wait_status(lambda d: d["nvml"]["ok"], timeout_s=30, what="NVML recovery")
            assert doc["gpus"][0]["util_pct"] == 55


def test_gpu_lost_and_not_supported(tmp_path, fake_nvml, env, sysfs):
    fake_nvml.write({"gpus": [gpu(0, util_gpu=40), gpu(1, util_gpu=60, not_supported=["utilization"])]})
    with FakeJob(tmp_path / "job", {"main": trainer_spec()}) as job, sidecar(job.pid, env, sysfs) as sc:
        doc = sc.wait_status(lambda d: len(d["gpus"]) == 2, what="two GPUs")
        assert doc["gpus"][0]["util_pct"] == 40 and doc["gpus"][1]["util_pct"] is None
        assert doc["gpus"][1]["mem_total_mib"] == 81920
        fake_nvml.write({"gpus": [gpu(0, lost=True), gpu(1, util_gpu=60)]})
        doc = sc.wait_status(lambda d: d["gpus"][0]["lost"], what="GPU lost")
        assert doc["gpus"][0]["util_pct"] is None and doc["gpus"][0]["mem_used_mib"] is None
        assert doc["gpus"][1]["util_pct"] == 60
        assert sc.get("/healthz")[1]["ok"] is True


def test_target_exit_keeps_last_state_and_cleans_segment(tmp_path, fake_nvml, env, sysfs):
    fake_nvml.write({"gpus": [gpu(0)]})
    job = FakeJob(tmp_path / "job", {"main": trainer_spec()})
    with sidecar(job.pid, env, sysfs, "--grace", "2") as sc:
        sc.wait_status(lambda d: d["status"] == "GPU")
        os.kill(job.pid, signal.SIGKILL)  # no atexit: the segment stays behind
        job.proc.wait()
        assert os.path.exists(f"/dev/shm/dsh-probe.{job.pid}")
        doc = sc.wait_status(lambda d: not d["target"]["alive"], what="target exited")
        assert "target-exited" in codes(doc) and doc["status"] == "GPU" and "exited" in doc["message"]
        assert doc["processes"] and doc["processes"][0]["models"][0]["device"] == "cuda:0"
        wait_for(lambda: not os.path.exists(f"/dev/shm/dsh-probe.{job.pid}"), 10, what="dead segment removed")
        assert sc.proc.wait(15) == 0  # serves for the grace period, then exits 0
    assert any("exited" in line for line in sc.lines)
