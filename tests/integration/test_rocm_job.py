"""A job whose model is on an AMD GPU through a ROCm build of torch, from its first poll to its end
(issue 41: "on the fixture trees every verdict is right at the start, steady state and end of a
job"). The torch here is a CPU build, so the training process is a FakeJob that publishes what a
ROCm build's probe does (torch.version.hip set, torch.cuda available, its model on `cuda:0`, whose
PCI address is the Radeon's, steps going on); a fixture /proc gives its pid a DRM client on that
Radeon (amdgpu) and a fixture /sys the card's own figures; the sidecar reads both
(``--procfs``/``--sysfs``), as it reads the real ones.

ROCm submits its compute through KFD's user queues, which the render node's engine counters leave
out (amdgpu_top#49): a ROCm process's DRM engine time is not its compute. Here the sidecar cannot
match the process to KFD's files (as from a container, where KFD names host pids), so the verdict
must go by the card's busy figure: a GPU running at 70 % whose client's engine time stands still is
busy, not idle; idle-gpu comes only once the card itself is idle while the steps go on, and never at
the first polls, before a rate can be had. A second view (``--once``) has KFD's files and two AMD
GPUs, one of them hidden by HIP_VISIBLE_DEVICES."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakenvml import make_fake_sysfs
from tests.helpers.drm_tree import MI_PCI, RADEON_PCI, MirroredProc, amd_sysfs, amdgpu_fdinfo
from tests.helpers.gpu_sysfs_trees import RADEON
from tests.helpers.harness import METRICS_AT_ONCE, FakeJob, Sidecar, codes
from tests.helpers.sidecar_cli import cli
from tests.helpers.vendor_watch import Engine, Watch, gpu, metric_samples, row, set_busy, steps, warning

pytestmark = pytest.mark.slow

HIP = "6.2.41133-dd7f95766"
RADEON_NAME = "AMD Radeon RX 7900 XTX"
CLIENT, FD, VRAM_KIB = 217, 5, 4 * 1024 * 1024  # 4 GiB of VRAM through the render node
BUSY = 0.6  # the client's GFX engine share while it submits work
CARD_BUSY_PCT = 70
IDLE_WINDOW_S = 2.0
# Warnings that have no place on this job at any time: torch has the GPU and the model is on it.
NEVER = {"cpu-build", "cuda-unavailable", "model-on-cpu", "device-count-mismatch", "worker-cuda"}


def rocm_runtime(**over: Any) -> dict[str, Any]:
    """What a ROCm build of torch on one Radeon publishes: the GPU is `cuda:0`, at the card's address."""
    rt = {
        "torch": "2.6.0+rocm6.2.4",
        "cuda_build": None,
        "hip_build": HIP,
        "cuda_available": True,
        "cuda_initialized": True,
        "device_count": 1,
        "devices": [{"index": 0, "name": RADEON_NAME, "uuid": None, "pci_bus_id": RADEON_PCI}],
    }
    rt.update(over)
    return rt


def job_spec(runtime: dict[str, Any]) -> dict[str, Any]:
    model = {
        "name": "Net",
        "class": "Net",
        "params": 1_000_000,
        "device": "cuda:0",
        "devices": ["cuda:0"],
        "input_device": "cuda:0",
    }
    return {"payload": {"runtime": runtime, "models": [model]}, "forward_rate_hz": 20}


def test_a_rocm_job_on_an_amd_gpu_from_its_first_poll_to_its_end(tmp_path: Path, fake_nvml: Any) -> None:
    """No NVIDIA driver (the simulated one with no scenario does not load): an AMD machine's. The
    job starts with the card idle, then the card gets busy, then the client's engine time stands
    still while the card stays busy; the job ends busy."""
    sysfs = make_fake_sysfs(tmp_path / "amd" / "sys", [{**RADEON, "pci": RADEON_PCI}])
    set_busy(sysfs, 0)
    rules = json.dumps({"idle_window_s": IDLE_WINDOW_S})
    with FakeJob(tmp_path / "job", {"main": job_spec(rocm_runtime())}) as job:
        proc = MirroredProc(tmp_path / "amd", job.pid)
        proc.drm_fd(FD, amdgpu_fdinfo(CLIENT, VRAM_KIB, 1))
        engine = Engine(proc, 0.0, fd=FD, client=CLIENT, vram_kib=VRAM_KIB)
        args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.5", *METRICS_AT_ONCE]
        args += ["--procfs", str(proc.root), "--sysfs", str(sysfs)]
        try:
            with Sidecar(args, env=fake_nvml.env({"DSH_SIDECAR_RULES": rules})) as sc:
                watch = Watch(sc)
                _start(watch, job.pid)
                _busy(watch, job.pid, engine, sysfs)
                engine.stop()
                _end(watch, job, proc)
        finally:
            engine.stop()


def _start(watch: Watch, pid: int) -> None:
    """The first polls: the model on the Radeon, the process's VRAM at once, its utilisation not a
    number (a ROCm process's engine time is not its compute), and no idle-gpu before the idle
    window has passed, idle as the card is; then idle-gpu, the steps going on."""
    doc = watch.until(lambda d: "idle-gpu" in codes(d), what="idle-gpu")
    first = watch.first_poll()
    radeon = gpu(first, RADEON_PCI)
    assert (radeon["vendor"], radeon["driver"], radeon["framework_index"]) == ("amd", "amdgpu", 0)
    assert radeon["util_pct"] == 0.0
    for t, d in watch.docs.items():
        (use,) = row(d, pid)["gpu"]
        assert (use["index"], use["vendor"], use["pci_bus_id"]) == (radeon["index"], "amd", RADEON_PCI)
        assert use["mem_used_mib"] == VRAM_KIB / 1024, use
        assert use["sm_util_pct"] is None and use["unknown_reason"] == "rocm-compute", use
        assert d["status"] == "GPU" and d["model_gpu_index"] == radeon["index"], d["message"]
        assert not NEVER & codes(d), d["warnings"]
        if t - first["time_unix_s"] < IDLE_WINDOW_S:
            assert "idle-gpu" not in codes(d), (t - first["time_unix_s"], d["warnings"])
    assert steps(doc, pid) > steps(first, pid)
    w = warning(doc, "idle-gpu")
    assert w["pids"] == [pid] and w["severity"] == "warning", w


def _busy(watch: Watch, pid: int, engine: Engine, sysfs: Path) -> None:
    """The card at 70 %, the client's engine busy: idle-gpu goes, the status says how busy the GPU
    is. Then the client's engine time stands still while the card stays busy (ROCm compute goes
    through KFD, not the render node): busy still, never idle-gpu."""
    engine.busy = BUSY
    set_busy(sysfs, CARD_BUSY_PCT)
    doc = watch.until(lambda d: "idle-gpu" not in codes(d), what="idle-gpu to go")
    assert gpu(doc, RADEON_PCI)["util_pct"] == CARD_BUSY_PCT, doc["gpus"]
    assert doc["status"] == "GPU" and f"{CARD_BUSY_PCT}% busy" in doc["message"], doc["message"]
    assert "cuda:0" in doc["message"], doc["message"]
    assert not NEVER & codes(doc), doc["warnings"]
    metrics = metric_samples(watch.sc)
    (held,) = [labels for labels, v in metrics["dsh_job_gpu_held"] if v == 1]
    assert held["vendor"] == "amd" and held["gpu"] == str(gpu(doc, RADEON_PCI)["index"]), held

    engine.busy = 0.0
    t0 = doc["time_unix_s"]
    late = watch.until(lambda d: d["time_unix_s"] - t0 >= IDLE_WINDOW_S + 1, what="a window of flat engines")
    assert steps(late, pid) > steps(doc, pid) and late["status"] == "GPU", late["message"]
    for d in watch.docs.values():
        if d["time_unix_s"] >= t0:
            assert not {"idle-gpu", *NEVER} & codes(d), d["warnings"]


def _end(watch: Watch, job: FakeJob, proc: MirroredProc) -> None:
    """The job ends, busy: its final state keeps its model on the Radeon, and says it exited."""
    job.stop()
    proc.gone(job.pid)
    doc = watch.until(lambda d: not d["target"]["alive"], what="the job's end")
    assert "target-exited" in codes(doc) and doc["status"] == "GPU", doc["message"]
    assert "exited" in doc["message"], doc["message"]
    final = row(doc, job.pid)
    assert final["exited"] and final["models"][0]["device"] == "cuda:0"
    assert doc["model_gpu_index"] == gpu(doc, RADEON_PCI)["index"]
    assert not {"idle-gpu", *NEVER} & codes(doc), doc["warnings"]


def test_a_rocm_job_on_an_mi_card_through_kfd_with_the_radeon_hidden(tmp_path: Path, fake_nvml: Any) -> None:
    """One poll (``--once``) of a ROCm job on the MI-series card of a machine with a Radeon too,
    HIP_VISIBLE_DEVICES=1 leaving torch the MI card alone: its memory from KFD's files (no DRM
    client), its utilisation ROCm compute's (unknown), the model on the MI card, and the Radeon named
    as the AMD GPU that HIP_VISIBLE_DEVICES hides, never as a GPU that "cannot run CUDA"."""
    runtime = rocm_runtime(
        devices=[{"index": 0, "name": "AMD Instinct MI300X", "uuid": None, "pci_bus_id": MI_PCI}],
        hip_visible_devices="1",
    )
    with FakeJob(tmp_path / "job", {"main": job_spec(runtime)}) as job:
        proc = MirroredProc(tmp_path / "amd", job.pid)
        sysfs = amd_sysfs(tmp_path / "amd", kfd_pids={job.pid: 3 * 1024**3})
        out = cli(
            *("--pid", str(job.pid), "--once", "--json", "--procfs", str(proc.root), "--sysfs", str(sysfs)),
            env=fake_nvml.env(),
        )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    mi = gpu(doc, MI_PCI)
    (use,) = row(doc, job.pid)["gpu"]
    assert (use["index"], use["vendor"], use["mem_used_mib"]) == (mi["index"], "amd", 3072.0), use
    assert use["sm_util_pct"] is None and use["unknown_reason"] == "rocm-compute", use
    assert doc["status"] == "GPU" and doc["model_gpu_index"] == mi["index"], doc["message"]
    assert (mi["framework_index"], gpu(doc, RADEON_PCI)["framework_index"]) == (0, None)
    w = warning(doc, "device-count-mismatch")
    assert w["severity"] == "warning" and w["message"] == (
        "The system sees 2 graphics devices, the framework can use 1; not usable: "
        "1 AMD GPU(s), hidden by HIP_VISIBLE_DEVICES='1'."
    ), w
    assert w["hint"].startswith("HIP_VISIBLE_DEVICES='1' hides AMD GPUs from torch"), w
    assert not {"idle-gpu", "cpu-build", "cuda-unavailable", "model-on-cpu"} & codes(doc), doc["warnings"]
