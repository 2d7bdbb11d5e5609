"""Dashboard stacks of machines with AMD and Intel GPUs, for the browser tests and the documentation's
screenshots (issue 41): the fake job tree of tests.helpers.fake_job, real desktop processes
(tests.helpers.drm_tree.named_process), a fixture /proc that attaches DRM clients to them and a
fixture /sys with the cards of tests.helpers.gpu_sysfs_trees, read by the real sidecar
(`python -m sidecar.cli --pid PID --port 0 --stay --path.procfs DIR --path.sysfs DIR`).

* AMD: a ROCm job whose model is on `cuda:0`, the MI300X (its VRAM through KFD: ROCm compute has no
  per-process busy time), beside a Radeon the desktop draws with (Xorg and gnome-shell, DRM
  clients). No NVIDIA driver: the simulated one without a scenario does not load.
* Laptop: the job on the NVIDIA card (the simulated driver), the Intel iGPU used by the compositor
  and a browser.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.fakenvml import FakeNvml, gpu, make_fake_sysfs
from tests.helpers.browser import SIDECAR_TOKENS, origin
from tests.helpers.dashboard_stack import events, model
from tests.helpers.drm_tree import (
    DGPU_PCI,
    MI_PCI,
    MirroredProc,
    amdgpu_fdinfo,
    i915_fdinfo,
    kfd_tree,
    named_process,
)
from tests.helpers.gpu_sysfs_trees import I915_IGPU, MI300X, RADEON
from tests.helpers.harness import FakeJob, Sidecar, cuda_runtime

GIB = 1024**3
MI300X_NAME = "AMD Instinct MI300X"  # torch.cuda.get_device_name on a ROCm build
JOB_KFD_VRAM_BYTES = 76 * GIB  # the job's VRAM on the MI300X, as KFD tells it
RADEON_USERS = {"Xorg": 262_144, "gnome-shell": 196_608}  # the desktop on the Radeon: VRAM KiB
LAPTOP_DGPU_NAME = "NVIDIA GeForce RTX 4070 Laptop GPU"
IGPU_USERS = ("Xorg", "firefox")  # the laptop's compositor and browser on its iGPU
# The fake job's tree: the main process and two DataLoader workers (they hold no GPU memory).
_WORKERS = {
    "worker0": {"payload": {"role": "dataloader-worker", "worker_id": 0}},
    "worker1": {"payload": {"role": "dataloader-worker", "worker_id": 1}},
}


def rocm_runtime() -> dict:
    """What a ROCm build of torch on an MI300X publishes: `cuda:0` is the GPU at MI_PCI."""
    return {
        "torch": "2.6.0+rocm6.2.4",
        "hip_build": "6.2.41133-dd7f95766",
        "cuda_build": None,
        "cudnn": None,
        "cuda_available": True,
        "cuda_initialized": True,
        "device_count": 1,
        "devices": [
            {
                "index": 0,
                "name": MI300X_NAME,
                "uuid": None,
                "pci_bus_id": MI_PCI,
                "gcn_arch": "gfx942:sramecc+:xnack-",
            }
        ],
    }


def _job_specs(runtime: dict) -> dict[str, dict]:
    main = {
        "role": "main",
        "script": "train.py",
        "runtime": runtime,
        "models": [model("resnet50", "cuda:0", input_device="cuda:0", params=25_557_032)],
        "events": events("train_start", "epoch 1"),
    }
    return {"main": {"payload": main, "children": list(_WORKERS)}, **_WORKERS}


@dataclass
class VendorStack:
    """A job, the desktop's processes and the sidecar that watches them; stop() ends each by its pid."""

    job: FakeJob
    desktop: list[subprocess.Popen]
    sidecar: Sidecar | None = None
    nvml: FakeNvml | None = None
    job_id: str = ""  # the status document's, once the sidecar shows the job

    @property
    def sidecar_url(self) -> str:
        assert self.sidecar is not None and self.sidecar.url
        return self.sidecar.url

    @property
    def url(self) -> str:
        """The page's address."""
        return self.sidecar_url + "/"

    @property
    def token(self) -> str | None:
        """The token a root sidecar makes for itself (None otherwise)."""
        return self.sidecar.token if self.sidecar is not None else None

    def pid(self, name: str) -> int:
        return self.job.pids[name]

    def stop(self) -> None:
        try:
            if self.sidecar is not None:
                self.sidecar.stop()
        finally:
            self.job.stop()
            for p in self.desktop:
                p.kill()
                p.wait()


def _desktop(folder: Path, names) -> list[subprocess.Popen]:
    folder.mkdir(parents=True)
    return [named_process(folder, n) for n in names]


def _serve(stack: VendorStack, root: Path, proc: MirroredProc, sysfs: Path, expect) -> VendorStack:
    """Start the sidecar on the fixture trees and wait until its document shows what `expect` wants."""
    assert stack.nvml is not None
    args = ["--pid", str(stack.job.pid), "--port", "0", "--interval", "0.5", "--stay"]
    args += ["--path.procfs", str(proc.root), "--path.sysfs", str(sysfs)]
    stack.sidecar = Sidecar(args, env=stack.nvml.env())
    if stack.sidecar.token and stack.sidecar.url:
        SIDECAR_TOKENS[origin(stack.sidecar.url)] = stack.sidecar.token
    doc = stack.sidecar.wait_status(
        lambda d: len(d["processes"]) >= len(stack.job.pids) and expect(d),
        timeout_s=30,
        what=f"the {root.name} machine's cards",
    )
    stack.job_id = doc["job_id"]
    return stack


def _others(doc: dict, vendor: str) -> int:
    return sum(g.get("other_process_count") or 0 for g in doc["gpus"] if g["vendor"] == vendor)


def start_amd_stack(base: Path, lib_dir: Path) -> VendorStack:
    """The MI300X machine: the ROCm job on the MI300X, the desktop on the Radeon."""
    root = base / "amd"
    root.mkdir(parents=True)
    job = FakeJob(root / "job", _job_specs(rocm_runtime()))
    stack = VendorStack(job, [], nvml=FakeNvml(lib_dir=lib_dir, scenario_path=root / "no-nvidia.txt"))
    try:
        stack.desktop = _desktop(root / "bin", RADEON_USERS)
        proc = MirroredProc(root, job.pid, *(p.pid for p in stack.desktop))
        for client, (p, vram_kib) in enumerate(zip(stack.desktop, RADEON_USERS.values()), start=10):
            proc.drm_fd(7, amdgpu_fdinfo(client, vram_kib, 5_000_000_000, pdev=RADEON["pci"]), pid=p.pid)
        sysfs = make_fake_sysfs(root / "sys", [RADEON, MI300X])
        kfd_tree(sysfs, {job.pid: JOB_KFD_VRAM_BYTES}, pci=MI300X["pci"])
        return _serve(stack, root, proc, sysfs, lambda d: _others(d, "amd") >= len(RADEON_USERS))
    except BaseException:
        stack.stop()
        raise


def laptop_scenario(pids: dict[str, int]) -> dict:
    """The laptop's NVIDIA card (at DGPU_PCI), the job's main process training on it."""
    return {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "gpus": [
            gpu(
                0,
                name=LAPTOP_DGPU_NAME,
                pci_bus_id="0000" + DGPU_PCI.upper(),  # NVML's spelling: 00000000:01:00.0
                memory_total_mib=8188,
                memory_used_mib=5120,
                util_gpu=92,
                util_mem=48,
                temperature_c=71,
                power_mw=88_000,
                processes=[{"pid": pids["main"], "used_mib": 4608, "sm_util": 90}],
            )
        ],
    }


def start_laptop_stack(base: Path, lib_dir: Path) -> VendorStack:
    """The laptop: the job on the NVIDIA card, the compositor and a browser on the Intel iGPU."""
    root = base / "laptop"
    root.mkdir(parents=True)
    nvml = FakeNvml(lib_dir=lib_dir, scenario_path=root / "scenario.txt")
    uuid = gpu(0)["uuid"]
    runtime = cuda_runtime([uuid], devices=[{"index": 0, "name": LAPTOP_DGPU_NAME, "uuid": uuid}])
    job = FakeJob(root / "job", _job_specs(runtime))
    stack = VendorStack(job, [], nvml=nvml)
    try:
        nvml.write(laptop_scenario(job.pids))
        stack.desktop = _desktop(root / "bin", IGPU_USERS)
        proc = MirroredProc(root, job.pid, *(p.pid for p in stack.desktop))
        for client, p in enumerate(stack.desktop, start=10):
            proc.drm_fd(7, i915_fdinfo(client, render_ns=3_000_000_000), pid=p.pid)
        dgpu = {
            "pci": DGPU_PCI,
            "vendor": "0x10de",
            "device": "0x2860",
            "class": "0x030200",
            "driver": "nvidia",
        }
        sysfs = make_fake_sysfs(
            root / "sys", [{**I915_IGPU, "connectors": ["eDP-1"]}, {**dgpu, "card": "card1"}]
        )
        return _serve(stack, root, proc, sysfs, lambda d: _others(d, "intel") >= len(IGPU_USERS))
    except BaseException:
        stack.stop()
        raise
