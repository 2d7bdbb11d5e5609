"""A real training job on an AMD or Intel GPU, from its first poll to its end (issue 41 item 9): a
CPU-torch job (a small model, ``probe.register``, a DataLoader with one forked worker) whose pids a
fixture /proc attaches DRM clients to, as the NVIDIA tests attach GPU use through the simulated
driver; the sidecar reads that /proc and a fixture /sys (``--path.procfs``, ``--path.sysfs``).

The torch here is a CPU build, so the model is on the CPU while its process holds VRAM on the AMD
GPU. The honest verdict: status CPU, because torch is a CPU build (``cpu-build``, whose hint names
the ROCm wheel of this torch version: the machine's GPU is an amdgpu one); not ``model-on-cpu``
(torch cannot reach the GPU: moving the model is not the fix), and never ``idle-gpu``, even with the
GPU idle while steps go on (no model is on it).

One job serves both views (its imports cost seconds of CPU): the AMD view follows it from its
start to its end, and the Intel view reads it once while it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fakenvml import make_fake_sysfs
from tests.helpers.drm_tree import FD_HEAD, RADEON_PCI, MirroredProc, amdgpu_fdinfo
from tests.helpers.gpu_sysfs_trees import I915_IGPU, RADEON
from tests.helpers.harness import METRICS_AT_ONCE, REPO, Sidecar, codes, python_env, wait_for
from tests.helpers.sidecar_cli import cli
from tests.helpers.vendor_watch import Engine, Watch, gpu, metric_samples, row, set_busy, steps, warning

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

JOB = """
import os, sys, time, torch, probe

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 1_000_000
    def __getitem__(self, i):
        return torch.randn(8), torch.tensor(i % 2)

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
loader = torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=1, persistent_workers=True)
probe.register(model, loader=loader)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 3:
        print("stepping", flush=True)
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.1)  # a 100 ms step: the worker keeps well ahead of it
"""

TRAINER_CLIENT, WORKER_CLIENT = 217, 300
TRAINER_FD, WORKER_FD = 5, 7
TRAINER_VRAM_KIB, WORKER_VRAM_KIB = 4096, 65536
BUSY = 0.6  # the share of time the trainer's client keeps the GFX engine busy
# Meteor Lake's iGPU (Core Ultra "Arc graphics"), driven by i915: PyTorch's XPU builds run on it.
MTL_PCI, MTL_DEVICE = "0000:00:02.0", "0x7d55"
INTEL_CLIENT = 42
# Intel's clock reading of I915_IGPU: 300 MHz now, held down by its power budget (PL1) and heat.
INTEL_CLOCK_MHZ, INTEL_EVENTS = 300, ["sw_power_cap", "sw_thermal_slowdown"]


class Job:
    """The training process and its DataLoader worker."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True)
        script = directory / "train.py"
        script.write_text(JOB)
        self.stop_file = directory / "stop"
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(self.stop_file)],
            env=python_env({"DSH_PROBE_INTERVAL_S": "0.25"}),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.pid = self.proc.pid
        self._stepping = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self._worker: int | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "stepping":
                self._stepping.set()

    def wait_stepping(self) -> None:
        assert self._stepping.wait(60), "the job made no steps"

    @property
    def worker(self) -> int:
        """The pid of its DataLoader worker (its one child)."""
        if self._worker is None:
            self.wait_stepping()
            (self._worker,) = (
                int(p)
                for task in os.listdir(f"/proc/{self.pid}/task")
                for p in Path(f"/proc/{self.pid}/task/{task}/children").read_text().split()
            )
        return self._worker

    def end(self) -> int:
        """Ask it to stop after its step; its exit code."""
        self.stop_file.write_text("")
        return self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _i915_fdinfo(client_id: int, render_ns: int) -> str:
    """An i915 client on an iGPU (Documentation/gpu/i915.rst's keys): its memory is the system's."""
    return (
        FD_HEAD + f"drm-driver:\ti915\ndrm-client-id:\t{client_id}\ndrm-pdev:\t{MTL_PCI}\n"
        "drm-total-system0:\t24 MiB\ndrm-shared-system0:\t0\ndrm-active-system0:\t0\n"
        "drm-resident-system0:\t20 MiB\ndrm-purgeable-system0:\t0\ndrm-total-stolen-system0:\t0\n"
        f"drm-engine-render:\t{render_ns} ns\ndrm-engine-copy:\t0 ns\ndrm-engine-video:\t0 ns\n"
        "drm-engine-capacity-video:\t2\ndrm-engine-video-enhance:\t0 ns\n"
    )


def _intel_view(tmp_path: Path, job: Job, env: dict[str, str]) -> None:
    """The running job as a laptop's Intel iGPU would show it (one poll, as a user's ``--once``): its
    card's clocks and why they are held down; no busy figure (i915 prints none: null, never 0); the
    process's row with its memory and, at a first reading, no utilisation and the reason why; the
    verdict's cpu-build names the XPU wheel."""
    proc = MirroredProc(tmp_path, job.pid)
    proc.drm_fd(5, _i915_fdinfo(INTEL_CLIENT, 9_288_864_723))
    sysfs = make_fake_sysfs(tmp_path / "sys", [{**I915_IGPU, "pci": MTL_PCI, "device": MTL_DEVICE}])
    out = cli(
        *("--pid", str(job.pid), "--once", "--json", "--procfs", str(proc.root), "--sysfs", str(sysfs)),
        env=env,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    igpu = gpu(doc, MTL_PCI)
    assert (igpu["vendor"], igpu["driver"]) == ("intel", "i915")
    assert igpu["util_pct"] is None and igpu["mem_used_mib"] is None
    assert igpu["other_process_count"] == 0  # read: no other process of the machine holds a client on it
    assert igpu["sm_clock_mhz"] == INTEL_CLOCK_MHZ and igpu["clock_event_reasons"] == INTEL_EVENTS
    (use,) = row(doc, job.pid)["gpu"]
    assert (use["index"], use["vendor"], use["pci_bus_id"]) == (igpu["index"], "intel", MTL_PCI)
    assert use["mem_used_mib"] == 20.0  # resident in system memory: an iGPU's memory is the system's
    assert use["sm_util_pct"] is None and use["unknown_reason"] == "first-sample"
    assert doc["status"] == "CPU"
    build = warning(doc, "cpu-build")
    assert "download.pytorch.org/whl/xpu" in build["hint"] and "torch==2.13.0" in build["hint"], build
    assert not {"model-on-cpu", "idle-gpu", "data-starved", "worker-cuda", "device-count-mismatch"} & codes(
        doc
    ), doc["warnings"]


def _amd_sysfs(root: Path) -> Path:
    """A Radeon card (amdgpu) at the address the fixture's clients name, with its driver's figures."""
    return make_fake_sysfs(root / "sys", [{**RADEON, "pci": RADEON_PCI}])


def test_a_cpu_torch_job_on_an_amd_gpu_from_its_first_poll_to_its_end(tmp_path: Path, fake_nvml: Any) -> None:
    """The AMD view from the job's start to its end, and the Intel view of it once while it runs. No
    NVIDIA driver (the simulated one with no scenario does not load): an AMD or Intel machine's."""
    job = Job(tmp_path / "job")
    proc = MirroredProc(tmp_path / "amd", job.pid)
    proc.drm_fd(TRAINER_FD, amdgpu_fdinfo(TRAINER_CLIENT, TRAINER_VRAM_KIB, 1))
    sysfs = _amd_sysfs(tmp_path / "amd")
    engine = Engine(proc, BUSY, fd=TRAINER_FD, client=TRAINER_CLIENT, vram_kib=TRAINER_VRAM_KIB)
    rules = json.dumps({"idle_window_s": 2.0})
    args = ["--pid", str(job.pid), "--port", "0", "--interval", "1", *METRICS_AT_ONCE]
    args += ["--path.procfs", str(proc.root), "--path.sysfs", str(sysfs)]
    try:
        with Sidecar(args, env=fake_nvml.env({"DSH_SIDECAR_RULES": rules})) as sc:
            watch = Watch(sc)
            _start(watch, job)
            _steady(watch, job, proc, sysfs, engine)
            _intel_view(tmp_path / "intel", job, fake_nvml.env())
            engine.stop()  # before the job's entries go
            _end(watch, job, proc)
    finally:
        engine.stop()
        job.kill()


def _start(watch: Watch, job: Job) -> None:
    """The first polls: the process's VRAM at once; its utilisation unknown at its first reading
    (a rate needs two), a number from the second; nothing said of idleness or data on no evidence."""
    doc = watch.until(lambda d: steps(d, job.pid) >= 5, what="the job's first steps")
    first_t = watch.first_poll()["time_unix_s"]
    for t, d in sorted(watch.docs.items()):
        (use,) = row(d, job.pid)["gpu"]
        assert (use["vendor"], use["pci_bus_id"], use["mem_used_mib"]) == ("amd", RADEON_PCI, 4.0)
        if t == first_t:
            assert use["sm_util_pct"] is None and use["unknown_reason"] == "first-sample", use
        else:
            assert use["sm_util_pct"] is not None and use["unknown_reason"] is None, use
        assert not {"idle-gpu", "data-starved", "worker-cuda", "model-on-cpu"} & codes(d), d["warnings"]
    assert doc["status"] == "CPU", doc["message"]


def _steady(watch: Watch, job: Job, proc: MirroredProc, sysfs: Path, engine: Engine) -> None:
    # Its worker, forked after the trainer opened the GPU, shares the trainer's client: counted once,
    # the trainer's (a forked worker holds nothing of its own).
    worker = job.worker
    proc.own(worker)
    proc.drm_fd(TRAINER_FD, amdgpu_fdinfo(TRAINER_CLIENT, TRAINER_VRAM_KIB, 1), pid=worker)
    doc = watch.until(
        lambda d: any(p["pid"] == worker for p in d["processes"]) and row(d, job.pid)["gpu"],
        what="the worker",
    )
    assert row(doc, worker)["role"] == "dataloader-worker" and row(doc, worker)["gpu"] == []
    (use,) = row(doc, job.pid)["gpu"]
    assert use["mem_used_mib"] == 4.0 and 40.0 <= use["sm_util_pct"] <= 80.0, use  # ~60 % busy
    radeon = gpu(doc, RADEON_PCI)
    assert use["index"] == radeon["index"]
    assert (radeon["vendor"], radeon["driver"], radeon["util_pct"]) == ("amd", "amdgpu", 3.0)
    assert (radeon["mem_used_mib"], radeon["mem_total_mib"]) == (2048.0, 24576.0)
    assert (radeon["sm_clock_mhz"], radeon["mem_clock_mhz"], radeon["temperature_c"]) == (2482, 96, 45.0)
    assert radeon["power_w"] == 35.0 and radeon["power_limit_w"] == 327.0
    # The verdict: the model is on the CPU because torch is a CPU build on an AMD machine.
    assert doc["status"] == "CPU" and "CPU-only" in doc["message"], doc["message"]
    build = warning(doc, "cpu-build")
    assert build["severity"] == "error" and build["pids"] == [job.pid], build
    assert "torch==2.13.0" in build["hint"] and "whl/rocm7.2" in build["hint"], build
    # (Nor device-count-mismatch: it called the Radeon a GPU that "cannot run CUDA; that is expected".)
    assert not {"model-on-cpu", "idle-gpu", "data-starved", "worker-cuda", "device-count-mismatch"} & codes(
        doc
    ), doc["warnings"]
    metrics = metric_samples(watch.sc)
    (util,) = [v for labels, v in metrics["dsh_gpu_utilization_percent"] if labels["vendor"] == "amd"]
    assert util == 3.0
    (held,) = [labels for labels, v in metrics["dsh_job_gpu_held"] if v == 1]
    assert held["vendor"] == "amd" and held["gpu"] == str(radeon["index"]), held

    # The worker opens the GPU itself: a worker holding GPU memory of its own.
    proc.drm_fd(WORKER_FD, amdgpu_fdinfo(WORKER_CLIENT, WORKER_VRAM_KIB, None), pid=worker)
    doc = watch.until(lambda d: "worker-cuda" in codes(d), what="worker-cuda")
    assert warning(doc, "worker-cuda")["pids"] == [worker]
    (wuse,) = row(doc, worker)["gpu"]
    assert wuse["mem_used_mib"] == 64.0 and wuse["index"] == radeon["index"]

    # The GPU goes idle while the steps go on: its busy figure and the client's engine time stop.
    engine.busy = 0.0
    set_busy(sysfs, 0)
    idle_from = watch.until(
        lambda d: gpu(d, RADEON_PCI)["util_pct"] == 0.0 and row(d, job.pid)["gpu"][0]["sm_util_pct"] == 0.0,
        what="the idle GPU",
    )
    doc = watch.until(
        lambda d: d["time_unix_s"] - idle_from["time_unix_s"] >= 3.0, what="the idle window to pass"
    )
    assert steps(doc, job.pid) > steps(idle_from, job.pid)
    # No model is on the GPU: its idleness is no verdict on this job (cpu-build is).
    assert "idle-gpu" not in codes(doc) and "cpu-build" in codes(doc), doc["warnings"]


def _end(watch: Watch, job: Job, proc: MirroredProc) -> None:
    worker = job.worker
    assert job.end() == 0
    for pid in (worker, job.pid):
        wait_for(lambda pid=pid: not os.path.exists(f"/proc/{pid}/stat"), 10, what=f"{pid} to be reaped")
        proc.gone(pid)
    doc = watch.until(lambda d: not d["target"]["alive"], what="the job's end")
    assert "target-exited" in codes(doc) and doc["status"] == "CPU", doc["message"]
    final = {p["pid"]: p for p in doc["processes"]}
    assert {job.pid, worker} <= set(final), final
    assert all(final[p]["exited"] and final[p]["gpu"] == [] for p in (job.pid, worker))
    assert final[job.pid]["models"][0]["device"] == "cpu"
    radeon = gpu(doc, RADEON_PCI)  # the card's last reading stays
    assert (radeon["util_pct"], radeon["mem_used_mib"], radeon["vendor"]) == (0.0, 2048.0, "amd")
    (util,) = [
        v
        for labels, v in metric_samples(watch.sc)["dsh_gpu_utilization_percent"]
        if labels["vendor"] == "amd"
    ]
    assert util == 0.0
