"""Which processes of the machine hold a DRM client on each GPU: who else uses an AMD or Intel GPU
(a laptop's iGPU: the compositor, a browser), as NVML's process lists say it for NVIDIA's.

One bounded scan, owner-aware as the rest of sources/ is: a sidecar running as root reads every
process; any other reads its own user's alone (another user's fds are not ours to list: the scan
skips them rather than be refused one by one). At most MAX_SCANNED_PROCESSES processes a scan, the
lowest pids (a desktop's compositor and browser start early); ``DrmUsers.truncated`` says when
more were left out. Listing and stat()ing every fd of every process is the costly part: the scan
runs every USERS_REFRESH_S at most, and keeps each process's DRM fds between scans (DrmFdIndex,
rescanned after USERS_FD_RESCAN_S or when the process's fd count changed). One scan serves every
job of a discovery sidecar: thread-safe.

A process's name is its ``comm`` as the kernel keeps it (15 bytes, set by the process itself):
untrusted text, decoded with replacement here and cleaned where it is shown (sidecar/documents).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hostfs.paths import HOST, HostPaths
from sidecar.sources.drm.clients import DrmFdIndex, StatFd

MAX_SCANNED_PROCESSES = 1024
USERS_REFRESH_S = 15.0  # who else uses a GPU changes at human pace (a browser opened)
USERS_FD_RESCAN_S = 60.0  # a process's fds listed again after this with as many fds as before
MAX_COMM_BYTES = 64  # the kernel's comm is 16 bytes with its NUL; a fixture's may be longer

_EVERYONE = -1


@dataclass(frozen=True, slots=True)
class DrmUser:
    pid: int
    name: str  # /proc/<pid>/comm, undecodable bytes replaced; not cleaned


@dataclass(frozen=True, slots=True)
class DrmUsers:
    """One scan: the processes with a DRM client on each GPU, by its PCI address (drm-pdev), in
    pid order."""

    by_pdev: Mapping[str, tuple[DrmUser, ...]] = field(default_factory=dict)
    scanned: int = 0  # processes whose fds were read
    truncated: bool = False  # more processes were ours to read than MAX_SCANNED_PROCESSES


def _comm(pid: int, host: HostPaths) -> str:
    try:
        with open(host.proc_path(pid, "comm"), "rb") as f:
            raw = f.read(MAX_COMM_BYTES)
    except OSError:
        return "?"
    return raw.rstrip(b"\n").decode("utf-8", "replace") or "?"


def scanned_pids(host: HostPaths, uid: int | None, limit: int) -> tuple[list[int], bool]:
    """The lowest ``limit`` pids of ``host``'s /proc whose processes ``uid`` owns (every one for
    None), and whether more were left out. The owner is /proc/<pid>'s (the process's effective uid)."""
    found: list[int] = []
    try:
        with os.scandir(host.proc_path()) as entries:
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                if uid is not None:
                    try:
                        if entry.stat().st_uid != uid:  # follows a link (a fixture tree's to the real one)
                            continue
                    except OSError:
                        continue  # gone
                found.append(int(entry.name))
    except OSError:
        return [], False
    found.sort()
    return found[:limit], len(found) > limit


class DrmUserScan:
    """The machine's DRM users (``users()``), scanned again once USERS_REFRESH_S have passed."""

    def __init__(
        self,
        *,
        host: HostPaths = HOST,
        uid: int | None = _EVERYONE,
        refresh_s: float = USERS_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        stat_fd: StatFd = os.stat,
        limit: int = MAX_SCANNED_PROCESSES,
    ) -> None:
        """``uid``: whose processes are read (None: everyone's); by default everyone's for root,
        else this process's own user's."""
        if uid == _EVERYONE:
            euid = os.geteuid()
            uid = None if euid == 0 else euid
        self.uid = uid
        self._host = host
        self._refresh_s = refresh_s
        self._clock = clock
        self._stat_fd = stat_fd
        self._limit = limit
        self.index = DrmFdIndex(
            clock=clock, rescan_s=USERS_FD_RESCAN_S, max_reads=None, reread=False, counted_factor=1
        )
        self._lock = threading.Lock()
        self._last: tuple[float, DrmUsers] | None = None
        self.scans = 0
        self._users: dict[int, tuple[float | None, DrmUser]] = {}  # pid -> (its fds' scan, its user)

    def users(self) -> DrmUsers:
        """The last scan's users, or a new scan's when the last is USERS_REFRESH_S old."""
        with self._lock:
            now = self._clock()
            if self._last is None or now - self._last[0] >= self._refresh_s:
                self._last = (now, self._scan())
            return self._last[1]

    def _scan(self) -> DrmUsers:
        self.scans += 1
        pids, truncated = scanned_pids(self._host, self.uid, self._limit)
        self.index.keep_only(set(pids))
        by_pdev: dict[str, list[DrmUser]] = {}
        for pid in pids:
            found = self.index.drm_fds(pid, host=self._host, stat_fd=self._stat_fd)
            pdevs = sorted({info.pdev for _, info in found if info.pdev})
            if not pdevs:
                continue
            user = self._user(pid)
            for pdev in pdevs:
                by_pdev.setdefault(pdev, []).append(user)
        self._users = {p: u for p, u in self._users.items() if self.index.scanned_at(p) is not None}
        return DrmUsers({k: tuple(v) for k, v in by_pdev.items()}, len(pids), truncated)

    def _user(self, pid: int) -> DrmUser:
        """``pid``'s user, its name read again only after its fds were scanned again (a pid reused
        by another process has other fds: a scan)."""
        scanned = self.index.scanned_at(pid)
        last = self._users.get(pid)
        if last is None or last[0] != scanned:
            last = self._users[pid] = (scanned, DrmUser(pid, _comm(pid, self._host)))
        return last[1]


__all__ = ["MAX_SCANNED_PROCESSES", "DrmUser", "DrmUserScan", "DrmUsers", "scanned_pids"]
