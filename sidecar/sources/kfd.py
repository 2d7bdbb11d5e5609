"""ROCm compute per process, from the kernel's KFD sysfs (``drivers/gpu/drm/amd/amdkfd``).

HIP and ROCr submit work through ``/dev/kfd`` user queues, which the render node's fdinfo never sees
(amdgpu_top#49): a ROCm training job reads 0 % there. KFD keeps, per process that opened /dev/kfd,
``/sys/class/kfd/kfd/proc/<pid>/`` (the host-namespace pid) with, per GPU id, ``vram_<id>`` (bytes),
``sdma_<id>`` (cumulative SDMA busy time, µs), ``stats_<id>/cu_occupancy`` (compute units occupied
now) and ``stats_<id>/evicted_ms``; and ``queues/<qid>/`` per user queue. GPU ids map to devices
through ``/sys/class/kfd/kfd/topology/nodes/<n>/`` (``gpu_id``, 0 on CPU nodes; ``properties``
with ``domain`` and ``location_id`` = bus << 8 | devfn, the partition in bits 31:28 on partitioned
parts; some kernels OR-ed the partition into the low bits on GC 9.4.3, which this cannot undo).

A process that merely opened /dev/kfd has a directory with zero figures: it is reported with them;
whether it uses the GPU is for the verdict to say. Every file is optional; a process that vanished
is skipped; ``read_kfd_processes`` and ``read_kfd_topology`` never raise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths
from sidecar.sources.sysfs import listdir_bounded

MAX_PROCESSES = 1024
MAX_GPUS = 64  # GPU ids per process, and topology nodes (an 8-GPU MI300X in CPX mode: 64 partitions)
MAX_QUEUES = 1024
MAX_VALUE_BYTES = 64
MAX_PROPERTIES_BYTES = 16 * 1024  # a node's properties file is ~1.5 KiB
_MIB = 1024 * 1024
_PER_GPU = re.compile(r"(vram|sdma|stats)_([0-9]{1,10})")
_NUMBER = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True, slots=True)
class KfdNode:
    """One GPU (or partition) of the KFD topology."""

    gpu_id: int
    pci: str | None  # "0000:c1:00.0"; None when the properties lack domain or location_id
    partition: int  # location_id bits 31:28 (0 on an unpartitioned GPU)
    render_minor: int | None  # drm_render_minor: /dev/dri/renderD<minor>
    vendor_id: int | None
    device_id: int | None


@dataclass(frozen=True, slots=True)
class KfdGpuUse:
    """What KFD says about one process on one GPU (None: the file is absent or unreadable)."""

    gpu_id: int
    pci: str | None  # from the topology; None when the id is not in it
    vram_mib: float | None
    sdma_busy_us: int | None  # cumulative
    cu_occupancy: int | None  # compute units occupied now
    evicted_ms: int | None  # cumulative time its queues were evicted


@dataclass(frozen=True, slots=True)
class KfdProcess:
    pid: int  # host-namespace pid
    pasid: int | None
    queue_count: int | None  # user queues now (None: the queues folder is unreadable)
    gpus: tuple[KfdGpuUse, ...]  # by GPU id

    @property
    def vram_mib(self) -> float:
        return sum(g.vram_mib or 0.0 for g in self.gpus)


def _read_small(path: str, limit: int = MAX_VALUE_BYTES) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("ascii", errors="replace").strip()
    except OSError:
        return None


def _number(path: str) -> int | None:
    text = _read_small(path)
    return int(text) if text is not None and _NUMBER.fullmatch(text) else None


def _mib(path: str) -> float | None:
    size_bytes = _number(path)
    return size_bytes / _MIB if size_bytes is not None else None


def _properties(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        value = value.strip()
        if name and _NUMBER.fullmatch(value):
            out.setdefault(name, int(value))
    return out


def _pci(domain: int | None, location_id: int | None) -> str | None:
    if domain is None or location_id is None or domain > 0xFFFFFFFF:
        return None
    bus, devfn = (location_id >> 8) & 0xFF, location_id & 0xFF
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"


def read_kfd_topology(*, host: HostPaths = HOST) -> tuple[KfdNode, ...]:
    """The GPU nodes of KFD's topology, by GPU id; () when there is no KFD."""
    base = host.sys_path("class", "kfd", "kfd", "topology", "nodes")
    nodes: list[KfdNode] = []
    for name in listdir_bounded(base, MAX_GPUS * 4):  # CPU nodes count too
        gpu_id = _number(os.path.join(base, name, "gpu_id"))
        if not gpu_id:
            continue  # a CPU node (0), or unreadable
        props = _properties(_read_small(os.path.join(base, name, "properties"), MAX_PROPERTIES_BYTES) or "")
        location_id = props.get("location_id")
        nodes.append(
            KfdNode(
                gpu_id=gpu_id,
                pci=_pci(props.get("domain"), location_id),
                partition=(location_id or 0) >> 28,
                render_minor=props.get("drm_render_minor"),
                vendor_id=props.get("vendor_id"),
                device_id=props.get("device_id"),
            )
        )
    return tuple(sorted(nodes, key=lambda n: n.gpu_id)[:MAX_GPUS])


def _gpu_ids(names: Iterable[str]) -> list[int]:
    ids = {int(m.group(2)) for n in names if (m := _PER_GPU.fullmatch(n))}
    return sorted(ids)[:MAX_GPUS]


def read_kfd_process(
    pid: int, *, host: HostPaths = HOST, topology: Iterable[KfdNode] = (), brief: bool = False
) -> KfdProcess | None:
    """What KFD holds for ``pid``; None when it never opened /dev/kfd (or has exited). ``brief``:
    its VRAM and occupied compute units alone (what a poll uses), the rest None."""
    base = host.sys_path("class", "kfd", "kfd", "proc", pid)
    names = listdir_bounded(base, MAX_GPUS * 4 + 16)
    if not names:
        return None
    pci_of = {n.gpu_id: n.pci for n in topology}
    gpus = tuple(
        KfdGpuUse(
            gpu_id=gpu_id,
            pci=pci_of.get(gpu_id),
            vram_mib=_mib(os.path.join(base, f"vram_{gpu_id}")),
            sdma_busy_us=None if brief else _number(os.path.join(base, f"sdma_{gpu_id}")),
            cu_occupancy=_number(os.path.join(base, f"stats_{gpu_id}", "cu_occupancy")),
            evicted_ms=None if brief else _number(os.path.join(base, f"stats_{gpu_id}", "evicted_ms")),
        )
        for gpu_id in _gpu_ids(names)
    )
    if brief:
        return KfdProcess(pid=pid, pasid=None, queue_count=None, gpus=gpus)
    queues = os.path.join(base, "queues")
    queue_count = len(listdir_bounded(queues, MAX_QUEUES)) if os.path.isdir(queues) else None
    return KfdProcess(pid=pid, pasid=_number(os.path.join(base, "pasid")), queue_count=queue_count, gpus=gpus)


def read_kfd_processes(
    pids: Iterable[int] | None = None,
    *,
    host: HostPaths = HOST,
    topology: Iterable[KfdNode] | None = None,
    brief: bool = False,
) -> tuple[KfdProcess, ...]:
    """KFD's processes among ``pids`` (every one KFD lists when None), the lowest MAX_PROCESSES, by pid.
    ``topology`` (read here when None) maps GPU ids to PCI addresses."""
    bound = MAX_PROCESSES * 4
    names = listdir_bounded(host.sys_path("class", "kfd", "kfd", "proc"), bound)
    listed = {int(n) for n in names if n.isdigit()}
    # One listing of KFD's processes, not a look for each pid (most hold no KFD queue); a listing cut
    # at its bound tells nothing of the pids past it: each is looked for.
    wanted = listed if pids is None else {p for p in pids if p > 0 and (p in listed or len(names) >= bound)}
    nodes = tuple(topology) if topology is not None else read_kfd_topology(host=host)
    out = []
    for pid in sorted(wanted)[:MAX_PROCESSES]:
        process = read_kfd_process(pid, host=host, topology=nodes, brief=brief)
        if process is not None:
            out.append(process)
    return tuple(out)
