"""AMD and Intel GPUs beside NVML's, per process: the GPUs the OS lists (sources/sysfs.py) and what
the job's processes use of them, from the kernel's DRM client stats (sources/drm) and ROCm's KFD
(sources/kfd.py), as the same facts NVML's devices and rows make (GpuFacts, ProcGpu).

- A GPU: every AMD or Intel device the OS lists, numbered after NVML's (``index``: the documents'
  GPU number; NVML's own numbers never move), with its PCI address, driver and name, and its device
  figures (busy %, memory, power, temperature, clocks) from sysfs: poll/vendor_figures.py.
- A process's row on one GPU (keyed by PCI address): memory from DRM (VRAM; GTT when it has no
  VRAM: an APU's working set; system memory when its driver prints neither region: an i915 iGPU's
  clients have only ``system0``, the GPU's memory being the system's) or KFD's VRAM (the larger:
  ROCm's buffers may show in both), and its
  busiest DRM engine's utilisation between two polls. What cannot be told is None with a reason
  (facts.UTIL_UNKNOWN): a first reading, a driver that prints no engine time, ROCm compute.
- KFD: a process that merely opened /dev/kfd (no VRAM, no occupied compute unit) uses no GPU.
- A ROCm build of torch (its probe says torch.version.hip): its rows on AMD GPUs have no utilisation
  (rocm-compute) even where KFD's files did not name it (a sidecar in a container, where KFD names
  host pids): HIP submits its compute through KFD's user queues, which the render node's engine
  counters leave out (amdgpu_top#49), so their standing still is no idleness (VendorJoin).
- Who else uses a GPU (``VendorReading.other_processes`` and ``other_names``, by GPU number): the
  processes outside the job with a DRM client on it, from one slow scan of the machine's processes
  (sources/drm/users.py) shared by every job: NVML's process lists say it for NVIDIA's.

Nothing is read on a machine without AMD or Intel GPUs: an NVIDIA machine's polls are as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sidecar.poll.vendor_figures import DeviceFigures, vendor_gpu_facts
from sidecar.sources.drm import DrmClientUse, DrmFdIndex, DrmSampler, DrmUsers, DrmUserScan
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.kfd import KfdNode, KfdProcess, read_kfd_processes, read_kfd_topology
from sidecar.sources.segments import ProbeRead
from sidecar.sources.sysfs import SystemGpu
from sidecar.verdict.facts import VENDOR_AMD, GpuFacts, ProcGpu

__all__ = ["VendorGpuSampler", "VendorJoin", "VendorReading", "vendor_gpu_facts"]

KFD_TOPOLOGY_EVERY_POLLS = 20  # as the OS's GPU list (poller.SYSFS_EVERY_POLLS)
ROCM_COMPUTE = "rocm-compute"  # facts.UTIL_UNKNOWN's reason for a ROCm process's utilisation
FIRST_SAMPLE = "first-sample"  # ... for a client read once (no rate yet)


@dataclass
class VendorReading:
    """One poll's AMD and Intel GPUs, and the rows of the pids asked for, by pid."""

    gpus: tuple[GpuFacts, ...] = ()
    by_pid: dict[int, list[ProcGpu]] = field(default_factory=dict)
    # GPU number -> processes outside the pids asked for with a DRM client on it, and their names
    # (distinct, in pid order); no entry: not read (the scan failed)
    other_processes: dict[int, int] = field(default_factory=dict)
    other_names: dict[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class _Use:
    """One process's use of one GPU, as DRM and KFD tell it."""

    vram_mib: float | None = None
    gtt_mib: float | None = None
    system_mib: float | None = None
    util_pct: float | None = None
    unknown_reason: str | None = None
    kfd_vram_mib: float | None = None

    def add_client(self, use: DrmClientUse) -> None:
        client = use.client
        vram_mib, gtt_mib, system_mib = client.memory_mib()
        self.vram_mib = _plus(self.vram_mib, vram_mib)
        self.gtt_mib = _plus(self.gtt_mib, gtt_mib)
        self.system_mib = _plus(self.system_mib, system_mib)
        known = [e.busy_pct for e in use.engines if e.busy_pct is not None]
        if known:
            self.util_pct = min(100.0, (self.util_pct or 0.0) + max(known))
        elif use.engines:
            self.unknown_reason = self.unknown_reason or FIRST_SAMPLE
        elif client.info.driver == "amdgpu" and not client.info.old_amdgpu:
            # amdgpu prints an engine once it has been busy: none printed is none busy yet.
            self.util_pct = self.util_pct or 0.0
        else:
            self.unknown_reason = self.unknown_reason or "no-engine-counters"

    def row(self, index: int, vendor: str, pci: str) -> ProcGpu:
        drm_mib = self.vram_mib if self.vram_mib else (self.gtt_mib if self.gtt_mib else self.vram_mib)
        if self.vram_mib is None and self.gtt_mib is None:
            # No VRAM or GTT region at all: an integrated GPU whose driver (i915) maps system memory
            # only. (amdgpu's "cpu" region, beside its VRAM and GTT, is not the GPU's memory.)
            drm_mib = self.system_mib
        mem = max((m for m in (drm_mib, self.kfd_vram_mib) if m is not None), default=None)
        util, unknown = self.util_pct, self.unknown_reason
        if self.kfd_vram_mib is not None:
            util, unknown = None, ROCM_COMPUTE  # its engines' time leaves out the KFD queues' work
        elif unknown == FIRST_SAMPLE:
            util = None  # a client with no rate yet beside one with: the sum is not known yet
        elif util is not None:
            unknown = None
        return ProcGpu(index, mem, util, None, vendor, pci, unknown)


def _plus(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


class VendorGpuSampler:
    """Reads, at each poll, the DRM clients and KFD figures of a set of pids (one job's, or every
    job's of a discovery poll). Keeps the DRM counters between polls (utilisation is a rate) and the
    pids' DRM fds (DrmFdIndex). Bounded as the readers are (1,024 pids a poll). Not thread-safe: one
    poll at a time."""

    def __init__(
        self,
        *,
        host: HostPaths = HOST,
        drm: DrmSampler | None = None,
        devices: DeviceFigures | None = None,
        users: DrmUserScan | None = None,
    ) -> None:
        """``devices``: the cards' figures, shared by discovery's jobs (one read a poll); its own
        under ``host`` unless given. ``users``: the machine's DRM users, shared by discovery's jobs
        (one scan for all); its own under ``host`` unless given."""
        self._host = host
        self.drm = drm or DrmSampler(host=host, index=DrmFdIndex())
        self.devices = devices or DeviceFigures(host=host)
        self.users = users or DrmUserScan(host=host)
        self._topology: tuple[KfdNode, ...] = ()
        self._rows: dict[int, list[ProcGpu]] = {}  # each pid's rows at the last poll
        self._polls = 0

    def gpus(self, system_gpus: Sequence[SystemGpu], first_index: int) -> tuple[GpuFacts, ...]:
        """The AMD and Intel GPUs of ``system_gpus`` numbered from ``first_index``, with their device
        figures (DeviceFigures.gpus: the same tuple while nothing changed)."""
        return self.devices.gpus(system_gpus, first_index)

    def poll(self, pids: Iterable[int], gpus: tuple[GpuFacts, ...]) -> VendorReading:
        """The rows of ``pids`` on ``gpus`` (this poll's vendor_gpu_facts); nothing read when empty."""
        if not gpus:
            return VendorReading()
        if self._polls % KFD_TOPOLOGY_EVERY_POLLS == 0 and any(g.vendor == VENDOR_AMD for g in gpus):
            self._topology = read_kfd_topology(host=self._host)
        self._polls += 1
        pid_set = {p for p in pids if p > 0}
        by_pci = {g.pci_bus_id: g for g in gpus if g.pci_bus_id}
        uses: dict[tuple[int, str], _Use] = {}
        sample = self.drm.sample(pid_set)
        for use in sample.clients:
            pci = use.client.info.pdev
            if pci in by_pci:
                uses.setdefault((use.client.pid, pci), _Use()).add_client(use)
        if self._topology:
            _add_kfd(uses, self._read_kfd(pid_set - sample.unread), by_pci)
        out = VendorReading(gpus)
        if sample.unread:
            # Not read at this poll (the fd index's budget): their rows as at their last read, on
            # the GPUs still listed (numbered as now)
            out.by_pid = _kept_rows(self._rows, sample.unread, by_pci)
        for (pid, pci), u in sorted(uses.items()):
            g = by_pci[pci]
            out.by_pid.setdefault(pid, []).append(u.row(g.index, g.vendor, pci))
        self._rows = out.by_pid
        _add_others(out, self.users.users(), by_pci, pid_set)
        return out

    def _read_kfd(self, pids: set[int]) -> Iterable[KfdProcess]:
        """KFD's figures of ``pids`` (those whose DRM fds were read at this poll)."""
        return read_kfd_processes(pids, host=self._host, topology=self._topology, brief=True)


def _kept_rows(
    rows: dict[int, list[ProcGpu]], pids: frozenset[int], by_pci: dict[str, GpuFacts]
) -> dict[int, list[ProcGpu]]:
    """The rows of ``pids`` as last made, on the GPUs of ``by_pci`` (renumbered where a GPU's
    number moved; gone with their GPU)."""
    out: dict[int, list[ProcGpu]] = {}
    for pid in pids & rows.keys():
        kept = []
        for row in rows[pid]:
            g = by_pci.get(row.pci or "")
            if g is not None:
                kept.append(row if row.index == g.index else replace(row, index=g.index))
        if kept:
            out[pid] = kept
    return out


def _add_others(out: VendorReading, users: DrmUsers, by_pci: dict[str, GpuFacts], pids: set[int]) -> None:
    """Each GPU's users outside ``pids`` (the job's): their count and distinct names."""
    for pci, g in by_pci.items():
        others = [u for u in users.by_pdev.get(pci, ()) if u.pid not in pids]
        out.other_processes[g.index] = len(others)
        out.other_names[g.index] = tuple(dict.fromkeys(u.name for u in others))


def _add_kfd(
    uses: dict[tuple[int, str], _Use], kfd: Iterable[KfdProcess], by_pci: dict[str, GpuFacts]
) -> None:
    for process in kfd:
        for g in process.gpus:
            # Opened /dev/kfd and holds nothing on this GPU: no use of it.
            if g.pci not in by_pci or not (g.vram_mib or g.cu_occupancy):
                continue
            u = uses.setdefault((process.pid, str(g.pci)), _Use())
            # Occupied compute units without VRAM (0.0) is ROCm compute still.
            u.kfd_vram_mib = max(g.vram_mib or 0.0, u.kfd_vram_mib or 0.0)


def _rocm_build(read: ProbeRead | None) -> bool:
    """The process's probe says its torch is a ROCm build (torch.version.hip)."""
    payload = None if read is None else read.payload
    return payload is not None and payload.runtime.hip_build is not None


def rocm_rows(rows: Sequence[ProcGpu]) -> list[ProcGpu]:
    """A ROCm build's rows: on an AMD GPU, its utilisation unknown (ROCM_COMPUTE), never its DRM
    engines' figure, which leaves out the compute it submits through KFD's queues."""
    return [
        ProcGpu(r.index, r.mem_used_mib, None, r.mig_index, r.vendor, r.pci, ROCM_COMPUTE)
        if r.vendor == VENDOR_AMD and r.unknown_reason != ROCM_COMPUTE
        else r
        for r in rows
    ]


class VendorJoin:
    """NVML's GPUs and rows with the AMD and Intel ones after them: the same tuple of GPUs while
    both parts are the same (the facts' caches compare GPUs with `is`); NVML's alone when there are
    no others (an NVIDIA machine's facts are as they were). A ROCm build's rows are rocm_rows."""

    def __init__(self) -> None:
        self._last: tuple[tuple[GpuFacts, ...], tuple[GpuFacts, ...], tuple[GpuFacts, ...]] = ((), (), ())

    def join(
        self,
        gpus: tuple[GpuFacts, ...],
        by_pid: dict[int, list[ProcGpu]],
        vendor: VendorReading | None,
        others: dict[int, int],
        reads: Mapping[int, ProbeRead] | None = None,
    ) -> tuple[tuple[GpuFacts, ...], dict[int, list[ProcGpu]], dict[int, int]]:
        """``others``: NVML's count of other processes by GPU number, with theirs after it.
        ``reads``: the processes' probe reads by pid (which say a ROCm build)."""
        if vendor is None or not vendor.gpus:
            return gpus, by_pid, others
        last_nvml, last_others, joined = self._last
        if last_nvml is not gpus or last_others is not vendor.gpus:
            joined = gpus + vendor.gpus
            self._last = (gpus, vendor.gpus, joined)
        if vendor.by_pid:
            by_pid = {**by_pid}
            for pid, rows in vendor.by_pid.items():
                if reads is not None and _rocm_build(reads.get(pid)):
                    rows = rocm_rows(rows)
                by_pid[pid] = [*by_pid.get(pid, ()), *rows]
        if vendor.other_processes:
            others = {**others, **vendor.other_processes}
        return joined, by_pid, others
