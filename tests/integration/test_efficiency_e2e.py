"""Efficiency end to end: real processes publishing probe payloads, the simulated driver, a real
sidecar over loopback. What the probe says of a step (breakdown, syncs, loader and precision
settings) and what the driver says of a GPU (clocks, PCIe, GPM, MIG) reach the status document,
the verdict's warnings, the history and /metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakenvml import gpu, make_fake_sysfs
from tests.helpers.harness import FakeJob, Sidecar, codes, cuda_runtime, wait_for

pytestmark = pytest.mark.slow

UUID0 = gpu(0)["uuid"]


@pytest.fixture
def env(fake_nvml, tmp_path: Path):
    sysfs = make_fake_sysfs(
        tmp_path / "sys", [{"pci": "0000:10:00.0", "vendor": "0x10de", "driver": "nvidia"}]
    )
    return fake_nvml.env({"DSH_SYSFS_ROOT": str(sysfs)})


def sidecar(pid: int, env, *extra: str) -> Sidecar:
    return Sidecar(["--pid", str(pid), "--port", "0", "--interval", "0.3", *extra], env=env)


STEPS = {
    "window_s": 10.0,
    "steps": 40,
    "step_s": 0.25,
    "data_wait_fraction": 0.7,
    "forward_fraction": 0.1,
    "optimizer_fraction": 0.05,
    "other_fraction": 0.15,
}
LOADER = {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "batch_size": 8}


def model(device="cuda:0", **kw):
    return {
        "name": "Net",
        "class": "Net",
        "params": 1000,
        "device": device,
        "devices": [device],
        "input_device": device,
        "param_dtypes": ["float32"],
        "autocast": "off",
        "input_shape": [8, 3, 32, 32],
        "loader_settings": LOADER,
        **kw,
    }


def test_step_breakdown_syncs_and_loader_settings_reach_document_warnings_and_metrics(
    tmp_path, fake_nvml, env
):
    spec = {
        "payload": {
            "runtime": cuda_runtime([UUID0]),
            "models": [model()],
            "steps": STEPS,
            "math": {
                "allow_tf32_matmul": False,
                "cudnn_allow_tf32": True,
                "float32_matmul_precision": "highest",
                "cudnn_benchmark": False,
            },
            "syncs_per_step": 24.0,
        },
        "forward_rate_hz": 20,
    }
    with FakeJob(tmp_path / "job", {"main": spec}) as job:
        fake_nvml.write(
            {"gpus": [gpu(0, util_gpu=30, processes=[{"pid": job.pid, "used_mib": 2048, "sm_util": 30}])]}
        )
        with sidecar(job.pid, env) as sc:
            doc = sc.wait_status(
                lambda d: {"data-starved", "host-syncs"} <= codes(d), what="the probe's warnings"
            )
            (p,) = doc["processes"]
            assert p["step_breakdown"] == STEPS
            assert p["syncs_per_step"] == 24.0 and p["math"]["float32_matmul_precision"] == "highest"
            (m,) = p["models"]
            assert (
                m["loader_settings"] == LOADER
                and m["param_dtypes"] == ["float32"]
                and m["input_shape"] == [8, 3, 32, 32]
            )
            (w,) = [w for w in doc["warnings"] if w["code"] == "data-starved"]
            assert "70%" in w["message"] and "num_workers=0, pin_memory=False" in w["hint"]
            (w,) = [w for w in doc["warnings"] if w["code"] == "host-syncs"]
            assert "24 times" in w["message"] and w["pids"] == [job.pid]
            status, body = sc.get("/metrics")
            assert status == 200
            line = next(
                x
                for x in body.decode().splitlines()
                if x.startswith("dsh_process_step_fraction") and 'phase="data_wait"' in x
            )
            assert line.endswith(" 0.7") and f'pid="{job.pid}"' in line


def test_without_a_gpu_the_history_carries_cpu_rss_and_rates(tmp_path, fake_nvml):
    """A CPU training run on a machine with no NVIDIA driver: the charts have something to draw."""
    env = fake_nvml.env()
    empty = tmp_path / "no-driver"
    empty.mkdir()
    env["LD_LIBRARY_PATH"] = str(empty)
    spec = {
        "payload": {
            "runtime": {
                "torch": "2.13.0+cpu",
                "cuda_build": None,
                "cuda_available": False,
                "device_count": 0,
            },
            "models": [model("cpu", forward_rate_hz=12.5, train_steps=10, step_rate_hz=3.0)],
        },
        "forward_rate_hz": 20,
    }
    with FakeJob(tmp_path / "job", {"main": spec}) as job:
        with sidecar(job.pid, env) as sc:
            sc.wait_status(lambda d: d["status"] == "CPU", what="a CPU verdict")

            def filled():
                samples = sc.history()["samples"]
                full = [s for s in samples if s["cpu_pct"] is not None and s["rss_mib"] is not None]
                return full if len(full) >= 2 else None

            samples = wait_for(filled, what="history samples with the job's CPU and RSS")
            last = samples[-1]
            assert last["gpus"] == [] and last["rss_mib"] > 1
            assert last["forward_rate_hz"] is not None and last["forward_rate_hz"] > 0
            assert last["step_rate_hz"] == 3.0
            json.dumps(last)  # plain JSON
