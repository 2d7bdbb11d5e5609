"""AMD and Intel GPUs in the facts and the verdict (issue 41): the OS's devices become GPUs after
NVML's, a process's DRM and KFD figures become its rows on them, and the verdict reads those rows as
it reads NVML's, while no figure that cannot be told reads as 0."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

from sidecar.poll.samples import history_sample
from sidecar.poll.vendor_gpus import VendorGpuSampler, VendorJoin, VendorReading, vendor_gpu_facts
from sidecar.sources.drm import DrmSampler
from sidecar.sources.host import HostPaths
from sidecar.sources.segments import ProbeRead
from sidecar.sources.sysfs import SystemGpu, list_system_gpus
from sidecar.verdict import Facts, GpuFacts, ModelFacts, ProcessFacts, ProcGpu, decide, map_cuda_index
from sidecar.verdict.facts import nvidia_in_system
from tests.fakenvml import make_fake_sysfs
from tests.helpers.drm_tree import MI_PCI, amd_sysfs
from tests.helpers.gpu_sysfs_trees import I915_IGPU, RADEON
from tests.helpers.records import FULL_RUNTIME, record_of

SYSTEM = [
    SystemGpu("Intel", "0x8086", "0x9a49", "Intel integrated graphics", "0000:00:02.0", "i915", "card0"),
    SystemGpu("NVIDIA", "0x10de", "0x2204", "NVIDIA GPU", "0000:01:00.0", "nvidia", "card1"),
    SystemGpu("AMD", "0x1002", "0x744c", "AMD GPU", "0000:08:00.0", "amdgpu", "card2"),
]


def test_the_oss_amd_and_intel_gpus_are_numbered_after_nvmls():
    got = vendor_gpu_facts(SYSTEM, first_index=1)  # NVML has GPU 0 (the NVIDIA card)
    assert [(g.index, g.vendor, g.pci_bus_id, g.driver, g.name) for g in got] == [
        (1, "intel", "0000:00:02.0", "i915", "Intel integrated graphics"),
        (2, "amd", "0000:08:00.0", "amdgpu", "AMD GPU"),
    ]
    assert all(g.util is None and g.mem_used_mib is None and g.mem_total_mib is None for g in got)


def test_kfd_rows_only_for_a_process_with_figures_and_none_on_nvidia_machines(tmp_path: Path):
    # Pid 4242 holds VRAM on the MI card; pid 4300 merely opened /dev/kfd (zero figures).
    sysfs = amd_sysfs(tmp_path, kfd_pids={4242: 3 * 1024**3, 4300: 0})
    (tmp_path / "proc").mkdir()  # no fds of theirs to read: KFD alone
    host = HostPaths(procfs=str(tmp_path / "proc"), sysfs=str(sysfs))
    sampler = VendorGpuSampler(host=host)
    listed = list_system_gpus(host=host)
    gpus = sampler.gpus(listed, 0)
    assert sampler.gpus(listed, 0) is gpus  # the same tuple while nothing changed (the caches' `is`)
    reading = sampler.poll([4242, 4300], gpus)
    (row,) = reading.by_pid[4242]
    assert (row.vendor, row.pci, row.mem_used_mib, row.sm_util, row.unknown_reason) == (
        "amd",
        MI_PCI,
        3072.0,
        None,
        "rocm-compute",
    )
    assert 4300 not in reading.by_pid
    nvidia_only = sampler.gpus([SYSTEM[1]], 1)
    assert nvidia_only == () and sampler.poll([4242], nvidia_only).by_pid == {}


AMD = GpuFacts(0, name="AMD GPU", pci_bus_id="0000:08:00.0", vendor="amd", driver="amdgpu")


def _facts(row: ProcGpu, *, nvml_ok: bool = False, models: tuple[ModelFacts, ...] = ()) -> Facts:
    proc = ProcessFacts(pid=10, is_target=True, gpu=(row,), models=models)
    return Facts(target_pid=10, processes=(proc,), nvml_ok=nvml_ok, gpus=(AMD,))


def test_the_verdict_sees_amd_use_as_nvidia_use_and_unknown_is_not_idle():
    used = ProcGpu(0, 900.0, None, None, "amd", "0000:08:00.0", "rocm-compute")
    f = _facts(used)
    assert f.processes[0].uses_gpu and f.job_gpu_indices == (0,)
    assert decide(f).status == "GPU"
    # An AMD GPU is no NVIDIA GPU: no CUDA verdict reads it as one, and cuda:0 is not mapped to it.
    assert not nvidia_in_system(f)
    assert map_cuda_index(f.processes[0], 0, f.gpus) is None
    # NVML answers (a laptop's NVIDIA card) and the AMD row's utilisation is unknown: not 0 (idle).
    sample = history_sample(1.0, _facts(used, nvml_ok=True))
    assert sample.recent.tree_sm_util is None and sample.recent.tree_gpu_mem_mib == 900.0
    idle = ProcGpu(0, 900.0, 0.0, None, "amd", "0000:08:00.0")
    assert history_sample(1.0, _facts(idle, nvml_ok=True)).recent.tree_sm_util == 0.0
    # A process that opened the device and holds nothing on it does not use it.
    assert (
        not _facts(ProcGpu(0, 0.0, None, None, "amd", "0000:08:00.0", "first-sample")).processes[0].uses_gpu
    )


def _drm_proc(root: Path, pid: int, fdinfo: dict[int, str]) -> HostPaths:
    """``root``/proc with ``pid``'s DRM fds (links whose stat the sampler's seam calls a DRM node)."""
    own = root / "proc" / str(pid)
    (own / "fd").mkdir(parents=True)
    (own / "fdinfo").mkdir()
    for fd, text in fdinfo.items():
        (own / "fd" / str(fd)).symlink_to("/dev/null")
        (own / "fdinfo" / str(fd)).write_text(text)
    return HostPaths(procfs=str(root / "proc"), sysfs=str(root / "sys"))


def _drm_node(path: str) -> SimpleNamespace:
    return SimpleNamespace(st_mode=stat.S_IFCHR | 0o666, st_rdev=os.makedev(226, 128))


def test_an_igpus_process_uses_system_memory_and_amdgpus_cpu_region_is_not_its_gpu_memory(tmp_path: Path):
    """An i915 iGPU's clients print only system regions (its memory is the system's): their row's
    memory is their resident system memory, not null. An amdgpu client's "cpu" region, beside its VRAM
    and GTT, is system memory the GPU does not use: its row stays at its VRAM (0 here)."""
    head = "pos:\t0\nflags:\t02100002\n"
    i915 = (
        head + "drm-driver:\ti915\ndrm-client-id:\t42\ndrm-pdev:\t0000:00:02.0\n"
        "drm-total-system0:\t24 MiB\ndrm-resident-system0:\t20 MiB\ndrm-total-stolen-system0:\t0\n"
    )
    amdgpu = (
        head + "drm-driver:\tamdgpu\ndrm-client-id:\t7\ndrm-pdev:\t0000:08:00.0\n"
        "drm-memory-vram:\t0 KiB\ndrm-memory-gtt:\t0 KiB\ndrm-memory-cpu:\t4096 KiB\n"
    )
    host = _drm_proc(tmp_path, 4242, {5: i915, 6: amdgpu})
    make_fake_sysfs(tmp_path / "sys", [I915_IGPU, {**RADEON, "card": "card1", "pci": "0000:08:00.0"}])
    sampler = VendorGpuSampler(host=host, drm=DrmSampler(host=host, stat_fd=_drm_node))
    gpus = sampler.gpus(list_system_gpus(host=host), 0)
    rows = {r.pci: r for r in sampler.poll([4242], gpus).by_pid[4242]}
    assert (rows["0000:00:02.0"].vendor, rows["0000:00:02.0"].mem_used_mib) == ("intel", 20.0)
    assert (rows["0000:08:00.0"].vendor, rows["0000:08:00.0"].mem_used_mib) == ("amd", 0.0)


def test_a_rocm_builds_amd_rows_have_no_utilisation_from_its_drm_engines():
    """ROCm submits its compute through KFD's queues, which the render node's engine counters leave
    out: a ROCm process's DRM engine figure (0 % here, while it may run the GPU flat out) is not its
    utilisation, even where KFD's files did not name it (a sidecar in a container). Its iGPU row and
    the rows of a CUDA build, or of a process without a probe, are as the DRM reader made them."""
    amd = ProcGpu(2, 4096.0, 0.0, None, "amd", "0000:08:00.0")
    igpu = ProcGpu(1, 20.0, 12.0, None, "intel", "0000:00:02.0")
    first = ProcGpu(2, 64.0, None, None, "amd", "0000:08:00.0", "first-sample")
    gpus = tuple(vendor_gpu_facts(SYSTEM, first_index=1))
    reading = VendorReading(gpus, {10: [amd, igpu], 11: [first], 12: [amd], 13: [amd]})
    rocm = {**FULL_RUNTIME, "cuda_build": None, "hip_build": "6.2.41133", "torch": "2.6.0+rocm6.2.4"}
    reads = {
        10: ProbeRead(10, "ok", record_of(10, runtime=rocm), None, False),
        11: ProbeRead(11, "ok", record_of(11, runtime=rocm), None, False),
        12: ProbeRead(12, "ok", record_of(12, runtime=FULL_RUNTIME), None, False),  # a CUDA build
    }
    _, by_pid, _ = VendorJoin().join((), {}, reading, {}, reads)
    unknown = ProcGpu(2, 4096.0, None, None, "amd", "0000:08:00.0", "rocm-compute")
    assert by_pid[10] == [unknown, igpu]
    assert by_pid[11] == [ProcGpu(2, 64.0, None, None, "amd", "0000:08:00.0", "rocm-compute")]
    assert by_pid[12] == [amd] and by_pid[13] == [amd]
    # No reads given: the rows as they were.
    assert VendorJoin().join((), {}, reading, {})[1][10] == [amd, igpu]
