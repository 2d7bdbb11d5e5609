"""A process's access to the AMD GPU's device nodes as the verdict's fact (ProcessFacts.gpu_access),
from the two reads of sidecar/sources/gpu_access.py, and the kernel's KFD (Facts.kfd_present): what
the ROCm reasons of cuda-unavailable (verdict/vendors.py) are decided from.

``RocmAccess`` reads both for a poller, cheaply: KFD once every ``ACCESS_EVERY_POLLS`` polls (it
appears only when amdgpu loads), and a process's access only for a ROCm build of torch that has no
GPU (``torch.version.hip`` set, ``torch.cuda.is_available()`` False), again once every
``ACCESS_EVERY_POLLS`` polls per process (group membership changes only with a new login)."""

from __future__ import annotations

from dataclasses import replace

from sidecar.sources.gpu_access import group_name, kfd_present, read_credentials, read_gpu_nodes
from sidecar.sources.host import HOST, HostPaths
from sidecar.verdict import DeviceNodeFacts, Facts, GpuAccessFacts, ProcessFacts

__all__ = ["ACCESS_EVERY_POLLS", "RocmAccess", "gpu_access_facts", "needs_gpu_access"]

ACCESS_EVERY_POLLS = 20  # as the OS's GPU list (poller.SYSFS_EVERY_POLLS)


def gpu_access_facts(pid: int, host: HostPaths = HOST) -> GpuAccessFacts | None:
    """Whether ``pid`` may open the AMD GPU's device nodes (ProcessFacts.gpu_access): its groups and
    /dev/kfd and the render nodes as it sees them; None when either cannot be read. A few reads: for
    a ROCm build without a GPU only (the verdict's cuda-unavailable reasons), not every process."""
    creds, nodes = read_credentials(pid, host=host), read_gpu_nodes(pid, host=host)
    if creds is None or nodes is None:
        return None
    named = tuple(DeviceNodeFacts(n.path, n.mode, n.uid, n.gid, group_name(n.gid)) for n in nodes)
    return GpuAccessFacts(creds.uid, creds.gid, creds.groups, named)


def needs_gpu_access(p: ProcessFacts) -> bool:
    """A live process whose ROCm build of torch found no GPU: cuda-unavailable asks why."""
    rt = p.runtime
    return rt is not None and rt.hip_build is not None and rt.cuda_available is False and not p.exited


class RocmAccess:
    """KFD's presence (``kfd_present``, each ``ACCESS_EVERY_POLLS`` polls) and the access facts of
    the processes that need them (``with_access``). One a poller; not thread-safe."""

    def __init__(self, host: HostPaths = HOST) -> None:
        self._host = host
        self._polls = 0
        self._kfd: bool | None = None
        self._access: dict[int, tuple[int, GpuAccessFacts | None]] = {}  # pid -> (poll read, facts)
        self._last: tuple[tuple[ProcessFacts, ...], tuple[ProcessFacts, ...]] = ((), ())

    def kfd_present(self) -> bool | None:
        """The kernel's KFD, read at this poll when due (call once a poll, before with_access)."""
        if self._polls % ACCESS_EVERY_POLLS == 0:
            self._kfd = kfd_present(host=self._host)
        self._polls += 1
        return self._kfd

    def with_access(self, facts: Facts) -> Facts:
        """``facts`` with each process that needs_gpu_access given its access facts; ``facts`` itself
        when none does (every poll of every job but a ROCm build's that found no GPU)."""
        procs = facts.processes
        if not any(needs_gpu_access(p) for p in procs):
            if self._access:
                self._access.clear()
            return facts
        poll = self._polls
        changed = False
        for p in procs:
            if needs_gpu_access(p):
                seen = self._access.get(p.pid)
                if seen is None or poll - seen[0] >= ACCESS_EVERY_POLLS:
                    access = gpu_access_facts(p.pid, self._host)
                    changed |= seen is None or seen[1] != access
                    self._access[p.pid] = (poll, access)
        last_in, last_out = self._last
        if changed or last_in is not procs:
            out = tuple(
                replace(p, gpu_access=self._access[p.pid][1]) if needs_gpu_access(p) else p for p in procs
            )
            self._last = (procs, out)
        else:
            out = last_out
        return replace(facts, processes=out)
