"""Efficiency end to end: real processes publishing probe payloads, the simulated driver, a real
sidecar over loopback. What the probe says of a step (breakdown, syncs, loader and precision
settings) and what the driver says of a GPU (clocks, PCIe, GPM, MIG) reach the status document,
the verdict's warnings, the history and /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakenvml import gpu, make_fake_sysfs, scenarios
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

UUID0 = gpu(0)["uuid"]


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return make_fake_sysfs(
        tmp_path / "sys", [{"pci": "0000:10:00.0", "vendor": "0x10de", "driver": "nvidia"}]
    )


@pytest.fixture
def env(fake_nvml):
    return fake_nvml.env({"DSH_SIDECAR_RULES": json.dumps({"idle_window_s": 2.0})})


def sidecar(pid: int, env, *extra: str, sysfs: Path | None = None) -> Sidecar:
    """The sidecar of the job under `pid`; with `sysfs`, the OS's graphics devices are that fake /sys's."""
    paths = [] if sysfs is None else ["--path.sysfs", str(sysfs)]
    return Sidecar(
        ["--pid", str(pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.3", *paths, *extra], env=env
    )


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
    tmp_path, fake_nvml, env, sysfs
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
        with sidecar(job.pid, env, sysfs=sysfs) as sc:
            doc = sc.wait_status(
                lambda d: {"data-starved", "host-syncs"} <= codes(d), what="the probe's warnings"
            )
            (p,) = doc["processes"]
            assert p["step_breakdown"] == {**STEPS, "backward_fraction": None}  # a payload without it
            assert p["syncs_per_step"] == 24.0 and p["math"]["float32_matmul_precision"] == "highest"
            (m,) = p["models"]
            assert (
                m["loader_settings"] == {**LOADER, "prefetch_factor": None}  # a payload without it
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
            # Keyed by job and role, not pid (bounded cardinality: docs/metrics.md).
            assert line.endswith(" 0.7") and 'role="main"' in line and "pid=" not in line


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


# ---------------------------------------------------------------------------------------------
# The driver's side: one scenario of tests/fakenvml/scenarios.py each
# ---------------------------------------------------------------------------------------------
FP32_MATH = {
    "allow_tf32_matmul": False,
    "cudnn_allow_tf32": False,
    "float32_matmul_precision": "highest",
    "cudnn_benchmark": False,
}


def gpu_job(tmp_path, **payload):
    spec = {"payload": {"runtime": cuda_runtime([UUID0]), "models": [model()], "math": FP32_MATH, **payload}}
    return FakeJob(tmp_path / "job", {"main": spec})


def metric_lines(sc, name):
    status, body = sc.get("/metrics")
    assert status == 200
    return [x for x in body.decode().splitlines() if x.startswith(name + "{")]


def test_throttled_by_heat_and_power_brake_but_never_by_the_power_cap_alone(tmp_path, fake_nvml, env, sysfs):
    with gpu_job(tmp_path) as job:
        fake_nvml.write(scenarios.throttled(job.pid))
        with sidecar(job.pid, env, sysfs=sysfs) as sc:
            doc = sc.wait_status(lambda d: "throttled" in codes(d), what="throttled")
            (g,) = doc["gpus"]
            assert {"hw_thermal_slowdown", "hw_power_brake_slowdown"} <= set(g["clock_event_reasons"])
            assert (g["sm_clock_mhz"], g["sm_clock_max_mhz"], g["temperature_c"]) == (1035, 1980, 88)
            assert (g["power_w"], g["power_limit_w"]) == (690, 700)
            (w,) = [w for w in doc["warnings"] if w["code"] == "throttled"]
            assert "hardware power brake" in w["message"] and "1035 MHz of 1980 MHz" in w["message"]
            assert w["pids"] == [job.pid] and "administrator" in w["hint"]
            active = {
                x.split('reason="')[1].split('"')[0]: x.rsplit(" ", 1)[1]
                for x in metric_lines(sc, "dsh_gpu_clock_event_active")
            }
            assert active["hw_thermal_slowdown"] == "1.0" and active["sw_power_cap"] == "0.0"
            # The same GPU at its power cap under full load: the GPU working as designed.
            fake_nvml.write(scenarios.power_capped(job.pid))
            doc = sc.wait_status(
                lambda d: (
                    d["gpus"][0]["clock_event_reasons"] == ["sw_power_cap"] and "throttled" not in codes(d)
                ),
                what="the power cap alone, no throttled warning",
            )


def test_degraded_link_while_the_job_works(tmp_path, fake_nvml, env, sysfs):
    with gpu_job(tmp_path) as job:
        fake_nvml.write(scenarios.degraded_link(job.pid))
        with sidecar(job.pid, env, sysfs=sysfs) as sc:
            doc = sc.wait_status(lambda d: "pcie-degraded" in codes(d), what="pcie-degraded")
            g = doc["gpus"][0]
            assert (
                g["pcie_link_gen"],
                g["pcie_link_width"],
                g["pcie_link_gen_max"],
                g["pcie_link_width_max"],
            ) == (1, 4, 4, 16)
            (w,) = [w for w in doc["warnings"] if w["code"] == "pcie-degraded"]
            assert "Gen1 x4" in w["message"] and "Gen4 x16" in w["message"]
            # No GPM on an A100: null with the reason, never 0.
            assert g["sm_activity_fraction"] is None and g["field_errors"].get("sm_activity_fraction")


def test_busy_but_hollow_and_tensor_cores_told_apart(tmp_path, fake_nvml, env, sysfs):
    with gpu_job(tmp_path) as job:
        fake_nvml.write(scenarios.busy_but_hollow(job.pid))
        with sidecar(job.pid, env, sysfs=sysfs) as sc:
            doc = sc.wait_status(
                lambda d: {"hollow-utilisation", "no-tensor-cores"} <= codes(d),
                what="hollow and fp32 on Hopper",
            )
            g = doc["gpus"][0]
            assert g["util_pct"] == 95 and abs(g["sm_activity_fraction"] - 0.10) < 1e-9
            assert abs(g["sm_occupancy_fraction"] - 0.05) < 1e-9 and g["compute_capability"] == "9.0"
            (ratio,) = metric_lines(sc, "dsh_gpu_sm_activity_ratio")
            assert float(ratio.rsplit(" ", 1)[1]) == pytest.approx(0.10)
            # Large bf16 matmuls keep the tensor cores busy: neither warning.
            fake_nvml.write(scenarios.tensor_heavy(job.pid))
            sc.wait_status(
                lambda d: (
                    not ({"hollow-utilisation", "no-tensor-cores"} & codes(d))
                    and (d["gpus"][0]["tensor_activity_fraction"] or 0) > 0.5
                ),
                what="tensor-heavy: no hollow, no no-tensor-cores",
            )


def test_mig_shows_instances_and_says_per_process_utilisation_is_unavailable(tmp_path, fake_nvml, env, sysfs):
    with gpu_job(tmp_path) as job:
        fake_nvml.write(scenarios.mig((job.pid, None)))
        with sidecar(job.pid, env, "--history", "60", sysfs=sysfs) as sc:
            doc = sc.wait_status(lambda d: "mig-no-process-util" in codes(d), what="mig-no-process-util")
            g = doc["gpus"][0]
            assert g["mig_mode"] is True and [m["gpu_instance_id"] for m in g["mig_devices"]] == [1, 2]
            assert g["mig_devices"][0]["mem_used_mib"] == 12000
            (row,) = doc["processes"][0]["gpu"]
            assert row["mig_index"] == 0 and row["sm_util_pct"] is None and row["mem_used_mib"] == 12000
            time.sleep(3.0)  # past the 2 s idle window: forward calls go on, utilisation is unknown
            assert "idle-gpu" not in codes(sc.status())  # unknown utilisation is not idleness


SLOW_LOADER_JOB = """
import time, torch, probe

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        # 4 items a batch: ~100 ms of loading for ~1 ms of compute, so loading dominates even when
        # the machine's load stretches the compute (and the data wait's own timing) many times over.
        time.sleep(0.025)
        return torch.randn(8), torch.tensor(i % 2)

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
loader = torch.utils.data.DataLoader(Slow(), batch_size=4)
probe.register(model, loader=loader)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_real_training_loop_starved_by_its_loader(tmp_path, fake_nvml):
    """Real torch, the real probe, a real sidecar: the loop waits for a slow DataLoader, and the
    panel says so, with the breakdown and the loader's own settings."""
    script = tmp_path / "train.py"
    script.write_text(SLOW_LOADER_JOB)
    job = subprocess.Popen(
        [sys.executable, str(script)],
        env=python_env({"DSH_PROBE_INTERVAL_S": "0.25"}),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with sidecar(job.pid, fake_nvml.env()) as sc:
            # data-starved comes once the breakdown or the loader's timing covers 5 steps (the
            # breakdown's window fills after a few; its first steps include the start's imports).
            doc = sc.wait_status(
                lambda d: (
                    "data-starved" in codes(d)
                    and any(
                        (b := p["step_breakdown"] or {}).get("steps", 0) >= 5 and b["data_wait_fraction"] > 0.5
                        for p in d["processes"]
                    )
                ),
                60,
                what="data-starved from the real probe, and 5 steps in its breakdown",
            )
            (p,) = [p for p in doc["processes"] if p["pid"] == job.pid]
            b = p["step_breakdown"]
            assert b["steps"] >= 5 and b["data_wait_fraction"] > 0.5, b
            assert b["optimizer_fraction"] is not None and b["forward_fraction"] is not None
            total = sum(
                b[k]
                for k in ("data_wait_fraction", "forward_fraction", "optimizer_fraction", "other_fraction")
            )
            assert abs(total - 1.0) < 0.05, b
            (m,) = p["models"]
            assert m["loader_settings"] == {
                "num_workers": 0,
                "pin_memory": False,
                "persistent_workers": False,
                "batch_size": 4,
                "prefetch_factor": None,  # torch's, without workers
            }
            assert m["param_dtypes"] == ["float32"] and m["input_shape"] == [4, 8]
            # the window of the model's data wait: the batches timed so far (at least the 5 steps')
            assert m["data_wait_fraction"] > 0.5 and m["data_wait_batches"] >= 5, m
            assert p["math"] is not None and p["syncs_per_step"] is None  # not asked for, and no CUDA
            (w,) = [w for w in doc["warnings"] if w["code"] == "data-starved"]
            # A CPU job: its loader's settings quoted, and never pin_memory (it only speeds copies to
            # an accelerator).
            assert "num_workers=0, persistent_workers=False" in w["hint"] and "pin_memory" not in w["hint"]
    finally:
        job.kill()
        job.wait()
