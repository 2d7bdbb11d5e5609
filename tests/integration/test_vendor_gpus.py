"""AMD GPUs per process, end to end (issue 41): a real process, whose fds a fixture /proc shows as an
amdgpu DRM client and whose ROCm use a fixture KFD tree tells, watched by the sidecar as a user runs
it (``dsh-sidecar --pid PID --once --json --path.procfs --path.sysfs``) and by its poller over two
polls (utilisation is a rate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from probe_wire.schema import empty_payload
from probe_wire.writer import SegmentWriter
from sidecar.poll.poller import Poller
from sidecar.poll.vendor_gpus import VendorGpuSampler
from sidecar.sources.drm import DrmFdIndex, DrmSampler
from sidecar.sources.host import HostPaths
from tests.helpers.drm_tree import MI_PCI, RADEON_PCI, MirroredProc, amd_sysfs, amdgpu_fdinfo
from tests.helpers.sidecar_cli import cli

MIB = 1024 * 1024


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _amd(doc):
    return {g["pci_bus_id"]: g for g in doc["gpus"] if g["vendor"] == "amd"}


def test_the_cli_shows_the_amd_gpus_and_the_processs_vram(tmp_path, sleeper):
    proc = MirroredProc(tmp_path, sleeper.pid)
    proc.drm_fd(5, amdgpu_fdinfo(217, vram_kib=4096, gfx_ns=107322799))
    proc.drm_fd(6, amdgpu_fdinfo(217, vram_kib=4096, gfx_ns=107322799))  # a dup of it: counted once
    sysfs = amd_sysfs(tmp_path)
    mi_device = sysfs / "devices" / "pci0000:00" / MI_PCI  # the MI card's driver prints its figures
    for name, value in (
        ("gpu_busy_percent", 87),
        ("mem_info_vram_used", 80 << 30),
        ("mem_info_vram_total", 192 << 30),
        ("product_name", "AMD Instinct MI300X OAM"),  # its board's FRU name
    ):
        (mi_device / name).write_text(f"{value}\n")
    out = cli(
        "--pid",
        str(sleeper.pid),
        "--once",
        "--json",
        "--path.procfs",
        str(proc.root),
        "--path.sysfs",
        str(sysfs),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    amd = _amd(doc)
    assert set(amd) == {RADEON_PCI, MI_PCI}
    radeon = amd[RADEON_PCI]
    # The MI card by its board's name, the Radeon (no FRU name) by the generic one.
    assert radeon["driver"] == "amdgpu" and radeon["name"] == "AMD GPU"
    assert amd[MI_PCI]["name"] == "AMD Instinct MI300X OAM"
    # The Radeon's driver prints no figures here: null (never 0); the MI card's are its own. The
    # job's own client is no other process's: none others use the Radeon.
    mi = amd[MI_PCI]
    assert (mi["util_pct"], mi["mem_used_mib"], mi["mem_total_mib"]) == (87.0, 80 * 1024, 192 * 1024)
    assert radeon["util_pct"] is None and radeon["mem_used_mib"] is None
    assert (radeon["other_process_count"], radeon["other_process_names"]) == (0, [])
    (target,) = [p for p in doc["processes"] if p["pid"] == sleeper.pid]
    (use,) = target["gpu"]
    assert use["index"] == radeon["index"] and use["vendor"] == "amd" and use["pci_bus_id"] == RADEON_PCI
    assert use["mem_used_mib"] == 4.0  # 4096 KiB of VRAM (GTT is not added: it has VRAM)
    # One poll: no rate yet, and it says so.
    assert use["sm_util_pct"] is None and use["unknown_reason"] == "first-sample"
    assert doc["status"] == "GPU"


def test_two_polls_give_drm_utilisation_and_kfd_gives_rocm_memory(tmp_path, sleeper):
    pid = sleeper.pid
    proc = MirroredProc(tmp_path, pid)
    proc.drm_fd(5, amdgpu_fdinfo(217, vram_kib=2048, gfx_ns=1_000_000_000))
    sysfs = amd_sysfs(tmp_path, kfd_pids={pid: 512 * MIB, 1: 0})  # pid 1 merely opened /dev/kfd
    host = HostPaths(procfs=str(proc.root), sysfs=str(sysfs))
    clock = iter([10_000_000_000, 11_000_000_000])
    sampler = VendorGpuSampler(
        host=host, drm=DrmSampler(host=host, clock_ns=lambda: next(clock), index=DrmFdIndex())
    )
    poller = Poller(pid, nvml_source=object(), host=host, vendor_gpus=sampler)
    poller.poll_once()
    proc.rewrite(5, amdgpu_fdinfo(217, vram_kib=2048, gfx_ns=1_500_000_000))  # busy 0.5 s of the 1 s
    doc = poller.poll_once()
    amd = _amd(doc)
    (target,) = [p for p in doc["processes"] if p["pid"] == pid]
    uses = {g["pci_bus_id"]: g for g in target["gpu"]}
    assert set(uses) == {RADEON_PCI, MI_PCI}
    radeon, mi = uses[RADEON_PCI], uses[MI_PCI]
    assert (
        radeon["sm_util_pct"] == 50.0 and radeon["unknown_reason"] is None and radeon["mem_used_mib"] == 2.0
    )
    assert radeon["index"] == amd[RADEON_PCI]["index"]
    # ROCm compute: KFD's VRAM, and no per-process utilisation (null with its reason, not 0).
    assert (
        mi["mem_used_mib"] == 512.0 and mi["sm_util_pct"] is None and mi["unknown_reason"] == "rocm-compute"
    )
    assert mi["index"] == amd[MI_PCI]["index"]
    assert doc["status"] == "GPU"
    facts = poller._last_facts
    assert facts is not None and set(facts.job_gpu_indices) == {radeon["index"], mi["index"]}
    # The job's GPU use is in its history: memory summed; utilisation unknown, since the MI card's
    # part is (the known 50 % is a floor: read as the whole, a floor under the idle threshold would
    # call a job idle whose unknown part is busy).
    assert facts.recent[-1].tree_gpu_mem_mib == 514.0 and facts.recent[-1].tree_sm_util is None
    assert sampler.drm.index is not None and sampler.drm.index.scans == 1  # the second poll reused the fds


# ---------------------------------------------------------------------------------------------
# A ROCm build of torch that found no GPU, in a real poll: why (issue 41 item 6)
# ---------------------------------------------------------------------------------------------
def _publish_rocm_without_gpu(writer: SegmentWriter, pid: int) -> None:
    runtime = {
        **empty_payload()["runtime"],
        "torch": "2.6.0+rocm6.2.4",
        "hip_build": "6.2.41133-dd7f95766",
        "cuda_available": False,
        "device_count": 0,
    }
    writer.publish_bytes(msgpack.packb({**empty_payload(pid, writer.start_ticks), "runtime": runtime}))


def _cuda_unavailable(doc) -> str:
    (w,) = [w for w in doc["warnings"] if w["code"] == "cuda-unavailable"]
    return w["message"]


def _run_as(own: Path, uid: int) -> None:
    """The process's status with effective, saved and filesystem ids ``uid`` and no supplementary
    groups (a setuid program's); its real uid, which owns its segment, kept."""
    real = (own / "status").read_text()
    (own / "status").unlink()
    lines = []
    for line in real.splitlines():
        key = line.partition(":")[0]
        if key in ("Uid", "Gid"):
            line = f"{key}:\t{line.split()[1]}\t{uid}\t{uid}\t{uid}"
        elif key == "Groups":
            line = "Groups:\t"
        lines.append(line)
    (own / "status").write_text("\n".join(lines) + "\n")


def test_a_rocm_build_without_a_gpu_is_told_why_in_a_real_poll(tmp_path, live_pid):
    """The poller reads KFD's presence and the process's device nodes as it sees them (its own
    /proc/<pid>/root): no KFD; then KFD but no /dev/kfd in its /dev (a container without
    --device /dev/kfd); then /dev/kfd it may not open."""
    proc = MirroredProc(tmp_path, live_pid)
    sysfs = amd_sysfs(tmp_path)  # two AMD cards, no /sys/class/kfd
    host = HostPaths(procfs=str(proc.root), sysfs=str(sysfs))
    writer = SegmentWriter(pid=live_pid)
    try:
        _publish_rocm_without_gpu(writer, live_pid)
        doc = Poller(live_pid, nvml_source=object(), host=host).poll_once()
        assert "the kernel has no KFD device" in _cuda_unavailable(doc)

        (sysfs / "class" / "kfd" / "kfd").mkdir(parents=True)
        root = proc.root / str(live_pid) / "root"
        root.unlink()  # its own root: a fixture /dev
        (root / "dev" / "dri").mkdir(parents=True)
        (root / "dev" / "dri" / "renderD128").write_text("")
        poller = Poller(live_pid, nvml_source=object(), host=host)
        assert "/dev/kfd is not in the process's /dev" in _cuda_unavailable(poller.poll_once())

        (root / "dev" / "kfd").write_text("")
        os.chmod(root / "dev" / "kfd", 0o660)  # this test's user's and group's, not the process's:
        _run_as(proc.root / str(live_pid), 54321)  # its effective ids are another user's (root passes)
        doc = Poller(live_pid, nvml_source=object(), host=host).poll_once()
        assert "the process cannot open /dev/kfd" in _cuda_unavailable(doc)
    finally:
        writer.close()
