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
from typing import NamedTuple, Protocol

from hostfs.paths import HOST, HostPaths
from sidecar.sources.drm.fdinfo import MAX_FDINFO_BYTES, DrmFdinfo, ParsedFdinfo, parse_fdinfo_again

DRM_MAJOR = 226
MAX_PROCESSES = 1024
MAX_FD_ENTRIES = 65536  # a process may hold a million sockets; the listing stops here
MAX_DRM_FDS_PER_PROCESS = 64
FD_RESCAN_S = 5.0  # a process's fd numbers are listed again after this (amdgpu_top scans every 5 s)
# Every fd stat()ed again after this many times as long (5 minutes), whatever the count and numbers
# say: only a DRM fd opened on the number of an fd closed between two looks waits this long.
FD_RESCAN_COUNTED_FACTOR = 60
# Processes whose DRM fds are read at one call (a poll), beside those never read: beyond this, the
# ones read longest ago, the rest keep their last read (a job of 1,000 GPU processes costs a poll
# what one of 64 does; each of its processes is read every 16th poll).
MAX_READS_PER_CALL = 64
SCAN_READS = 4  # what a scan of a process's fds costs, in rereads of its clients' fdinfo


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


class DrmClient(NamedTuple):
    """One DRM client (one open of a GPU device), credited to ``pid``."""

    pid: int  # the lowest pid holding it
    fd: int  # that pid's lowest fd on it
    info: DrmFdinfo

    @property
    def key(self) -> ClientKey:
        """What identifies the client across fds, processes and samples."""
        return client_key(self.pid, self.fd, self.info)

    def memory_mib(self) -> tuple[float | None, float | None, float | None]:
        """(vram_mib, gtt_mib, system_mib) in one pass over the regions."""
        vram = gtt = system = None
        for r in self.info.regions:
            used = r.used_mib
            if used is None:
                continue
            name = r.name
            if name.startswith(_VRAM_PREFIXES):
                vram = used if vram is None else vram + used
            elif name == _GTT:
                gtt = used if gtt is None else gtt + used
            elif name.startswith(_SYSTEM_PREFIXES):
                system = used if system is None else system + used
        return vram, gtt, system

    @property
    def vram_mib(self) -> float | None:
        """Device memory (every vram/local region), resident where printed; None: no such region."""
        return self.memory_mib()[0]

    @property
    def gtt_mib(self) -> float | None:
        """System memory mapped for the GPU (amdgpu, xe): where an APU's working set lives."""
        return self.memory_mib()[1]

    @property
    def system_mib(self) -> float | None:
        return self.memory_mib()[2]


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
    return [(fd, parsed.info) for fd, parsed in _scan(pid, host, stat_fd)[0] if parsed.info is not None]


def _scan(
    pid: int, host: HostPaths, stat_fd: StatFd, last_reads: dict[int, ParsedFdinfo] | None = None
) -> tuple[list[tuple[int, ParsedFdinfo]], list[int]]:
    """Each DRM fd of ``pid`` with its fdinfo read, that names a driver, and its fd numbers.
    ``last_reads``: by fd, the fdinfo last read there (parsed again from it)."""
    try:
        fds = _fd_numbers(host.proc_path(pid, "fd"))
    except OSError:
        return [], []
    out: list[tuple[int, ParsedFdinfo]] = []
    last: ParsedFdinfo | None = None  # a dup()'d fd reads the same bytes: parsed once
    for fd in fds:
        is_drm = _drm_fd(host.proc_path(pid, "fd", fd), stat_fd)
        if is_drm is False:
            continue
        data = _read_bounded(host.proc_path(pid, "fdinfo", fd))
        if data is None:
            continue
        last = parse_fdinfo_again(last_reads.get(fd, last) if last_reads else last, data)
        # Major 226 with an fdinfo that names no driver: a kernel before 5.14, nothing to read.
        if last.info is not None:
            out.append((fd, last))
            if len(out) >= MAX_DRM_FDS_PER_PROCESS:
                break
    return out, fds


@dataclass(slots=True)
class _KeptClient:
    """A client's lowest DRM fd in its process, and its fdinfo's last read."""

    fd: int
    key: ClientKey
    parsed: ParsedFdinfo


@dataclass(slots=True)
class _KeptProcess:
    scanned: float  # the index's clock at its last scan
    fd_count: int  # the size of its /proc/<pid>/fd then
    counted: bool  # that size was its count of fds (Linux 6.2+; before, 0; a fixture's folder: bytes)
    clients: list[_KeptClient]
    numbers: list[int]  # its fd numbers at the last listing
    listed: float  # when (the index's clock)
    keys: tuple[ClientKey, ...] = ()  # its clients' keys


class DrmFdIndex:
    """Which fds of each process are DRM fds, kept between polls: listing and stat()ing every fd is
    the costly part of a read (a process may hold thousands of sockets), the fdinfo of its one or two
    DRM fds is not. Only one fd per client is kept (the lowest: a dup()'d fd says the same), with its
    fdinfo's last read: a read that changed only engine counters is not parsed whole again
    (fdinfo.parse_fdinfo_again). A process's fds are scanned again (every one stat()ed) when a kept
    fd no longer reads as its client (closed, or the number reused), when its fd count changed (the
    size of /proc/<pid>/fd where it is the count, Linux 6.2+), when its fd numbers changed (listed
    every ``rescan_s`` where the size tells nothing: older kernels, or a process holding no client
    yet), and every ``counted_factor`` x ``rescan_s`` (FD_RESCAN_COUNTED_FACTOR x FD_RESCAN_S: 5
    minutes) whatever they say: a DRM fd opened on the number of one closed in between, or a new
    client on the number of a closed dup, is found by then.

    ``max_reads`` bounds what a call reads (``due``): the processes never read, then those read
    longest ago; a scan counts as SCAN_READS of them."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rescan_s: float = FD_RESCAN_S,
        max_reads: int | None = MAX_READS_PER_CALL,
        reread: bool = True,
        counted_factor: int = FD_RESCAN_COUNTED_FACTOR,
    ) -> None:
        """``max_reads``: processes read at one call beside those never read (None: every one).
        ``reread``: read the kept fds' fdinfo at each call (their figures); False: only at a scan
        (who holds which GPU is all that is asked: DrmUserScan). ``counted_factor``: how many
        times ``rescan_s`` a process holding a client waits for a scan on a kernel that counts fds."""
        self._clock = clock
        self._reread = reread
        self._counted_factor = counted_factor
        self._rescan_s = rescan_s
        self._max_reads = max_reads
        self._kept: dict[int, _KeptProcess] = {}  # in the order they were last read, oldest first
        self.scans = 0  # full scans made (what the index saves is the rest)
        self.last_due: set[int] | None = None  # the last call's due(): what other per-pid reads follow

    def due(self, pids: list[int]) -> set[int] | None:
        """Which of ``pids`` to read at this call: those never read, then the ones read longest ago,
        up to ``max_reads`` of those; None: every one."""
        self.last_due = None
        if self._max_reads is None or len(pids) <= self._max_reads:
            return None
        due = {p for p in pids if p not in self._kept}
        left = self._max_reads
        asked = set(pids)
        now = self._clock()
        for pid, kept in self._kept.items():
            if left <= 0:
                break
            if pid in asked:
                due.add(pid)
                # A scan (listing and stat()ing every fd) counts as SCAN_READS rereads, a listing 2.
                due_scan, due_listing = self._scan_due(kept, now), self._listing_due(kept, now)
                left -= SCAN_READS if due_scan else 2 if due_listing else 1
        self.last_due = due
        return due

    def _scan_due(self, kept: _KeptProcess, now: float) -> bool:
        """A full scan (every fd stat()ed) is due."""
        return now - kept.scanned >= self._rescan_s * self._counted_factor

    def _listing_due(self, kept: _KeptProcess, now: float) -> bool:
        """Its fd numbers are to be listed again (a kernel whose fd count tells nothing)."""
        return not (kept.counted and kept.clients) and now - kept.listed >= self._rescan_s

    def scanned_at(self, pid: int) -> float | None:
        """When ``pid``'s fds were last scanned (the index's clock); None: not kept."""
        kept = self._kept.get(pid)
        return kept.scanned if kept else None

    def kept_keys(self, pid: int) -> tuple[ClientKey, ...]:
        """The keys of ``pid``'s clients as last read; nothing read."""
        kept = self._kept.get(pid)
        return kept.keys if kept else ()

    def drm_fds(self, pid: int, *, host: HostPaths, stat_fd: StatFd) -> list[tuple[int, DrmFdinfo]]:
        """process_drm_fds(pid), from the kept fds when they still hold; a client's dup()'d fds
        only from a scan."""
        now = self._clock()
        kept = self._kept.get(pid)
        if kept is not None and not kept.counted:
            count = kept.fd_count  # a size that tells nothing (an older kernel): not asked again
        else:
            try:
                count = os.stat(host.proc_path(pid, "fd")).st_size
            except OSError:
                self._kept.pop(pid, None)
                return []
        if kept is not None and kept.fd_count == count and not self._scan_due(kept, now):
            same = True
            if self._listing_due(kept, now):
                try:  # the same fd numbers as at the last listing: nothing opened or closed in between
                    same = _fd_numbers(host.proc_path(pid, "fd")) == kept.numbers
                except OSError:
                    same = False
                kept.listed = now
            if same and not self._reread:
                return [(c.fd, c.parsed.info) for c in kept.clients if c.parsed.info is not None]
            out = _reread(pid, kept.clients, host) if same else None
            if out is not None:
                self._kept[pid] = self._kept.pop(pid)  # read last: goes to the end
                return out
        self.scans += 1
        found, numbers = _scan(pid, host, stat_fd, {c.fd: c.parsed for c in kept.clients} if kept else None)
        clients: dict[ClientKey, _KeptClient] = {}
        for fd, parsed in found:
            assert parsed.info is not None  # _scan keeps only fds that name a driver
            key = client_key(pid, fd, parsed.info)
            if key not in clients:
                clients[key] = _KeptClient(fd, key, parsed)
        self._kept.pop(pid, None)
        counted = count == len(numbers) > 0
        self._kept[pid] = _KeptProcess(
            now, count, counted, list(clients.values()), numbers, now, tuple(clients)
        )
        return [(fd, parsed.info) for fd, parsed in found if parsed.info is not None]

    def keep_only(self, pids: set[int]) -> None:
        for pid in [p for p in self._kept if p not in pids]:
            del self._kept[pid]


def _reread(pid: int, clients: list[_KeptClient], host: HostPaths) -> list[tuple[int, DrmFdinfo]] | None:
    """Each kept client's fdinfo read again; None when one no longer reads as its client (closed,
    or its number reused): scan again."""
    out: list[tuple[int, DrmFdinfo]] = []
    for client in clients:
        data = _read_bounded(host.proc_path(pid, "fdinfo", client.fd))
        if data is None:
            return None
        parsed = parse_fdinfo_again(client.parsed, data)
        info = parsed.info
        if info is None or (
            info is not client.parsed.info and client_key(pid, client.fd, info) != client.key
        ):
            return None
        client.parsed = parsed
        out.append((client.fd, info))
    return out


def read_drm_clients(
    pids: Iterable[int],
    *,
    host: HostPaths = HOST,
    stat_fd: StatFd = os.stat,
    index: DrmFdIndex | None = None,
) -> tuple[DrmClient, ...]:
    """The DRM clients of ``pids`` (the lowest MAX_PROCESSES of them), each once, in order of pid
    then fd. ``index``: the DRM fds found by earlier reads (kept up to date here), and which
    processes to read at this call (DrmFdIndex.due, kept in its ``last_due``): the others' clients
    are left out (their last read stands), and no process read is credited with one of them."""
    seen: set[object] = set()
    out: list[DrmClient] = []
    asked = sorted({p for p in pids if p > 0})[:MAX_PROCESSES]
    due = None
    if index is not None:
        index.keep_only(set(asked))
        due = index.due(asked)
    for pid in asked:
        if due is not None and pid not in due:
            seen.update(index.kept_keys(pid))  # type: ignore[union-attr]  # (due: an index's)
            continue
        if index is None:
            found = process_drm_fds(pid, host=host, stat_fd=stat_fd)
        else:
            found = index.drm_fds(pid, host=host, stat_fd=stat_fd)
        for fd, info in found:
            key = client_key(pid, fd, info)
            if key not in seen:
                seen.add(key)
                out.append(DrmClient(pid, fd, info))
    return tuple(out)
