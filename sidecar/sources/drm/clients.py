"""The DRM clients a set of processes hold: their open DRM fds, each fd's fdinfo, one entry a client.

A DRM fd is a ``/proc/<pid>/fd`` entry that ``stat`` shows as a character device of major 226 (the
DRM major, as nvtop's ``is_drm_fd``): a path match on ``/dev/dri/*`` misses a node a container
remapped (``--device=/dev/dri/renderD128:/dev/gpu0``). When ``stat`` is denied the fdinfo is read
anyway and counts when it names a driver. A client is counted once however many fds and processes
share it (dup()'d fds, DataLoader workers forked after GPU init): keyed on ``(pdev, client id)``,
else amdgpu's ``(pdev, pasid)``, credited to the lowest pid that holds it (amdgpu_top credits the
first pid it meets). A client with neither id (amdgpu 5.14-5.18 without pasid, a driver that prints
none) cannot be told apart from a dup of itself: it is counted per fd.

Bounded: MAX_PROCESSES pids a call, MAX_FD_ENTRIES entries listed per process, MAX_DRM_FDS_PER_PROCESS
fdinfo reads per process, MAX_FDINFO_BYTES a read. A process that vanished, or whose fds we may not
list (ENOENT, ESRCH, EACCES, ...), is skipped: ``read_drm_clients`` never raises for one.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from hostfs.paths import HOST, HostPaths
from sidecar.sources.drm.fdinfo import MAX_FDINFO_BYTES, DrmFdinfo, parse_fdinfo

DRM_MAJOR = 226
MAX_PROCESSES = 1024
MAX_FD_ENTRIES = 65536  # a process may hold a million sockets; the listing stops here
MAX_DRM_FDS_PER_PROCESS = 64
FD_RESCAN_S = 5.0  # a process's fds are stat()ed again after this (amdgpu_top: 5 s)


class FdStat(Protocol):
    """What is looked at in a stat result (``os.stat_result`` is one)."""

    @property
    def st_mode(self) -> int: ...
    @property
    def st_rdev(self) -> int: ...


# stat of one /proc/<pid>/fd/<n> (following the link to the device): a seam for fixture trees, whose
# fds cannot be character devices without privileges (mknod).
StatFd = Callable[[str], FdStat]
# Region names by what they are: device memory, the GPU's window on system memory, system memory.
_VRAM_PREFIXES = ("vram", "local")  # amdgpu "vram", xe "vram0", i915 "local0"
_GTT = "gtt"
_SYSTEM_PREFIXES = ("cpu", "system", "memory")  # amdgpu "cpu", i915 "system0", xe "system"


ClientKey = tuple[str | None, str, int] | tuple[int, int]


def client_key(pid: int, fd: int, info: DrmFdinfo) -> ClientKey:
    """DrmClient(pid, fd, info).key, without making the client."""
    if info.client_id is not None:
        return (info.pdev, "client", info.client_id)
    if info.pasid is not None:
        return (info.pdev, "pasid", info.pasid)
    return (pid, fd)


@dataclass(frozen=True, slots=True)
class DrmClient:
    """One DRM client (one open of a GPU device), credited to ``pid``."""

    pid: int  # the lowest pid holding it
    fd: int  # that pid's lowest fd on it
    info: DrmFdinfo

    @property
    def key(self) -> ClientKey:
        """What identifies the client across fds, processes and samples."""
        return client_key(self.pid, self.fd, self.info)

    def _region_mib(self, accept: Callable[[str], bool]) -> float | None:
        used = [r.used_mib for r in self.info.regions if accept(r.name) and r.used_mib is not None]
        return sum(used) if used else None

    @property
    def vram_mib(self) -> float | None:
        """Device memory (every vram/local region), resident where printed; None: no such region."""
        return self._region_mib(lambda n: n.startswith(_VRAM_PREFIXES))

    @property
    def gtt_mib(self) -> float | None:
        """System memory mapped for the GPU (amdgpu, xe): where an APU's working set lives."""
        return self._region_mib(lambda n: n == _GTT)

    @property
    def system_mib(self) -> float | None:
        return self._region_mib(lambda n: n.startswith(_SYSTEM_PREFIXES))


def _drm_fd(path: str, stat_fd: StatFd) -> bool | None:
    """True: a DRM device; False: something else; None: unknown (stat denied: ask the fdinfo)."""
    try:
        st = stat_fd(path)
    except PermissionError:
        return None
    except OSError:
        return False  # gone, or a link to nothing
    return stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == DRM_MAJOR


def _fd_numbers(fd_dir: str) -> list[int]:
    out: list[int] = []
    with os.scandir(fd_dir) as entries:
        for entry in entries:
            if entry.name.isdigit():
                out.append(int(entry.name))
            if len(out) >= MAX_FD_ENTRIES:
                break
    return sorted(out)


def _read_bounded(path: str) -> bytes | None:
    """Up to MAX_FDINFO_BYTES + 1 bytes of ``path``; None when it cannot be read. os.open and
    os.read: 4 system calls for an fdinfo, where open() adds an fstat, an ioctl and an lseek."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        left = MAX_FDINFO_BYTES + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def process_drm_fds(
    pid: int, *, host: HostPaths = HOST, stat_fd: StatFd = os.stat
) -> list[tuple[int, DrmFdinfo]]:
    """``(fd, fdinfo)`` of each DRM fd of ``pid``, lowest fd first; [] when it has none, is gone
    or hides its fds from us."""
    try:
        fds = _fd_numbers(host.proc_path(pid, "fd"))
    except OSError:
        return []
    out: list[tuple[int, DrmFdinfo]] = []
    last: tuple[bytes | None, DrmFdinfo | None] = (None, None)  # a dup()'d fd reads the same bytes
    for fd in fds:
        is_drm = _drm_fd(host.proc_path(pid, "fd", fd), stat_fd)
        if is_drm is False:
            continue
        data = _read_bounded(host.proc_path(pid, "fdinfo", fd))
        if data is not None and data != last[0]:
            last = (data, parse_fdinfo(data))
        info = last[1] if data is not None else None
        # Major 226 with an fdinfo that names no driver: a kernel before 5.14, nothing to read.
        if info is not None:
            out.append((fd, info))
            if len(out) >= MAX_DRM_FDS_PER_PROCESS:
                break
    return out


class DrmFdIndex:
    """Which fds of each process are DRM fds, kept between polls: listing and stat()ing every fd is
    the costly part of a read (a process may hold thousands of sockets), the fdinfo of its one or two
    DRM fds is not. Only one fd per client is kept (the lowest: a dup()'d fd says the same). A
    process's fds are scanned again when FD_RESCAN_S have passed, when its fd count changed (the
    size of /proc/<pid>/fd, Linux 6.2+; before, a constant, and the age alone decides), or when a
    kept fd no longer reads as the same client (closed, or the number reused). A DRM fd opened in
    between, with as many fds as before, is found by the next scan, as is a new client on the number
    of a dup that was closed."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, rescan_s: float = FD_RESCAN_S) -> None:
        self._clock = clock
        self._rescan_s = rescan_s
        # pid -> (scanned, fd count, (fd, client key) of each client's lowest DRM fd)
        self._kept: dict[int, tuple[float, int, tuple[tuple[int, ClientKey], ...]]] = {}
        self.scans = 0  # full scans made (what the index saves is the rest)

    def drm_fds(self, pid: int, *, host: HostPaths, stat_fd: StatFd) -> list[tuple[int, DrmFdinfo]]:
        """process_drm_fds(pid), from the kept fds when they still hold; a client's dup()'d fds
        only from a scan."""
        try:
            count = os.stat(host.proc_path(pid, "fd")).st_size
        except OSError:
            self._kept.pop(pid, None)
            return []
        now = self._clock()
        kept = self._kept.get(pid)
        if kept is not None and now - kept[0] < self._rescan_s and kept[1] == count:
            out = self._reread(pid, kept[2], host)
            if out is not None:
                return out
        self.scans += 1
        out = process_drm_fds(pid, host=host, stat_fd=stat_fd)
        clients: dict[ClientKey, int] = {}
        for fd, info in out:
            clients.setdefault(client_key(pid, fd, info), fd)
        self._kept[pid] = (now, count, tuple((fd, key) for key, fd in clients.items()))
        return out

    @staticmethod
    def _reread(
        pid: int, fds: tuple[tuple[int, ClientKey], ...], host: HostPaths
    ) -> list[tuple[int, DrmFdinfo]] | None:
        out: list[tuple[int, DrmFdinfo]] = []
        for fd, key in fds:
            data = _read_bounded(host.proc_path(pid, "fdinfo", fd))
            info = parse_fdinfo(data) if data is not None else None
            if info is None or client_key(pid, fd, info) != key:
                return None  # closed or reused: scan again
            out.append((fd, info))
        return out

    def keep_only(self, pids: set[int]) -> None:
        for pid in [p for p in self._kept if p not in pids]:
            del self._kept[pid]


def read_drm_clients(
    pids: Iterable[int],
    *,
    host: HostPaths = HOST,
    stat_fd: StatFd = os.stat,
    index: DrmFdIndex | None = None,
) -> tuple[DrmClient, ...]:
    """The DRM clients of ``pids`` (the lowest MAX_PROCESSES of them), each once, in order of pid
    then fd. ``index``: the DRM fds found by earlier reads (kept up to date here)."""
    seen: set[object] = set()
    out: list[DrmClient] = []
    asked = sorted({p for p in pids if p > 0})[:MAX_PROCESSES]
    if index is not None:
        index.keep_only(set(asked))
    for pid in asked:
        found = (
            index.drm_fds(pid, host=host, stat_fd=stat_fd)
            if index is not None
            else process_drm_fds(pid, host=host, stat_fd=stat_fd)
        )
        for fd, info in found:
            key = client_key(pid, fd, info)
            if key not in seen:
                seen.add(key)
                out.append(DrmClient(pid=pid, fd=fd, info=info))
    return tuple(out)
