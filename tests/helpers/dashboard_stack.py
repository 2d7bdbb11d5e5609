"""A real dashboard stack for the browser tests, and the job payloads and NVML scenarios it runs.

A *stack* is a fake training job (tests.helpers.fake_job, publishing probe facts through the probe's
own segment writer), the simulated NVIDIA driver (tests/fakenvml) reporting that job's pids, a fake
/sys with an Intel iGPU beside the NVIDIA cards, and the real sidecar
(`python -m sidecar.cli --pid PID --port 0 --interval 0.5 --stay`) serving the page. The fixtures
that start stacks live in tests/browser/conftest.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tests.fakenvml import FakeNvml, gpu, make_fake_sysfs
from tests.helpers.browser import SIDECAR_TOKENS, origin
from tests.helpers.harness import FakeJob, Sidecar, cuda_runtime

# The two simulated NVIDIA cards and their PCI addresses as sysfs writes them.
GPU_NAMES = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
INTEL_PCI = "0000:00:02.0"


def nvidia_pci(index: int) -> str:
    # tests.fakenvml.gpu(i) uses pci_bus_id "00000000:{i + 0x10:02X}:00.0"
    return f"0000:{index + 0x10:02x}:00.0"


def model(
    name: str,
    device: str,
    *,
    input_device: str | None = None,
    params: int = 11_689_512,
    data_wait: float | None = 0.12,
    cls: str = "ResNet",
) -> dict:
    """A model entry exactly as the probe publishes it (every key present, strict types)."""
    devices = [] if device in ("no-parameters",) else (["cpu", "cuda:0"] if device == "mixed" else [device])
    return {
        "name": name,
        "class": cls,
        "params": params,
        "device": device,
        "devices": devices,
        "input_device": input_device,
        "forward_calls": 0,
        "forward_rate_hz": 12.5,
        "last_forward_time": time.time(),
        "data_wait_fraction": data_wait,
        "data_wait_s": None,
        "step_s": 0.08,
    }


def events(*names: str) -> list[dict]:
    now = time.time()
    return [{"time": now - (len(names) - i) * 0.5, "name": n} for i, n in enumerate(names)]


def gpu_job_specs(uuids: list[str]) -> dict[str, dict]:
    """main (model on cuda:0) → two DataLoader workers (probe) and a helper without the probe."""
    return {
        "main": {
            "payload": {
                "role": "main",
                "script": "train.py",
                "runtime": cuda_runtime(uuids),
                "models": [model("resnet18", "cuda:0", input_device="cuda:0")],
                "events": events("train_start", "epoch 1"),
            },
            "children": ["worker0", "worker1", "helper"],
        },
        "worker0": {"payload": {"role": "dataloader-worker", "worker_id": 0}},
        "worker1": {"payload": {"role": "dataloader-worker", "worker_id": 1}},
        "helper": {"probe": False},
    }


def cpu_job_specs() -> dict[str, dict]:
    rt = {
        "torch": "2.5.1+cpu",
        "cuda_build": None,
        "cudnn": None,
        "cuda_available": False,
        "cuda_initialized": False,
        "device_count": 0,
        "devices": [],
    }
    return {
        "main": {
            "payload": {
                "role": "main",
                "script": "train.py",
                "runtime": rt,
                "models": [model("resnet18", "cpu", input_device="cpu")],
                "events": events("train_start"),
            },
        }
    }


def gpu_scenario(
    pids: dict[str, int], *, util0: int = 87, mem0: int = 3072, util1: int = 0, mem1: int = 0, sm0: int = 85
) -> dict:
    """Two NVIDIA GPUs; the job's main process works on GPU 0."""
    return {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "gpus": [
            gpu(
                0,
                name=GPU_NAMES[0],
                util_gpu=util0,
                util_mem=40,
                memory_used_mib=mem0 + 512,
                processes=[{"pid": pids["main"], "used_mib": mem0, "sm_util": sm0}],
            ),
            gpu(1, name=GPU_NAMES[1], util_gpu=util1, memory_used_mib=mem1, memory_total_mib=81559),
        ],
    }


def sysfs_cards(n_nvidia: int) -> list[dict]:
    cards = [
        {
            "pci": INTEL_PCI,
            "vendor": "0x8086",
            "device": "0x9a49",
            "class": "0x030000",
            "driver": "i915",
            "connectors": ["eDP-1"],
        }
    ]
    for i in range(n_nvidia):
        cards.append(
            {
                "pci": nvidia_pci(i),
                "vendor": "0x10de",
                "device": "0x20b5",
                "class": "0x030200",
                "driver": "nvidia",
            }
        )
    return cards


@dataclass
class Stack:
    job: FakeJob
    sidecar: Sidecar
    nvml: FakeNvml

    @property
    def url(self) -> str:
        return self.sidecar.url + "/"

    def pid(self, name: str) -> int:
        return self.job.pids[name]

    def stop(self) -> None:
        try:
            self.sidecar.stop()
        finally:
            self.job.stop()


class StackFactory:
    def __init__(self, lib_dir: Path, base: Path):
        self.lib_dir = lib_dir
        self.base = base
        self.stacks: list[Stack] = []

    def start(
        self,
        name: str,
        specs: dict[str, dict],
        scenario,
        *,
        n_sysfs_nvidia: int = 2,
        expect_status: str | None = None,
        extra_env: dict | None = None,
    ) -> Stack:
        """Start job → write the NVML scenario (it needs the job's pids) → start the sidecar."""
        root = self.base / name
        root.mkdir(parents=True)
        nvml = FakeNvml(lib_dir=self.lib_dir, scenario_path=root / "scenario.txt")
        job = FakeJob(root / "job", specs)
        try:
            nvml.write(scenario(job.pids) if callable(scenario) else scenario)
            sysfs = make_fake_sysfs(root / "sys", sysfs_cards(n_sysfs_nvidia))
            env = nvml.env(extra_env)
            args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.5", "--stay", "--path.sysfs", str(sysfs)]
            sidecar = Sidecar(args, env=env)
        except BaseException:
            job.stop()
            raise
        stack = Stack(job, sidecar, nvml)
        self.stacks.append(stack)
        if sidecar.token and sidecar.url:
            SIDECAR_TOKENS[origin(sidecar.url)] = sidecar.token
        # The sidecar must see the whole tree (4 processes with children) before pages look at it.
        try:
            want = len(specs)
            sidecar.wait_status(
                lambda d: (
                    len(d["processes"]) >= want and (expect_status is None or d["status"] == expect_status)
                ),
                timeout_s=30,
                what=f"{name}: {want} processes" + (f" and status {expect_status}" if expect_status else ""),
            )
        except BaseException:
            stack.stop()
            raise
        return stack

    def close(self) -> None:
        for s in reversed(self.stacks):
            s.stop()
        self.stacks.clear()
