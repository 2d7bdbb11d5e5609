"""Where a process's segment is, for a reader outside the process's namespaces (a sidecar on the
node, a process in a container): ``segment_home``.

A probe in a container writes ``/dev/shm/dsh-probe.<its pid>`` in its own ``/dev/shm`` (a pod's
own tmpfs) under the pid it has in its own PID namespace. A reader in another mount namespace
reaches that directory through ``/proc/<pid>/root`` (``hostfs.procroot``), and takes the
innermost pid of the ``NSpid:`` line of ``/proc/<pid>/status`` as the name's pid and the header's
writer; the header's PID namespace must be the process's own (``/proc/<pid>/ns/pid``). The owner
checks are those of every read: the file's owner is the process's real uid. /proc is ``host``'s
(hostfs.paths; the host's own by default). Standard library only.
"""

from __future__ import annotations

import os

from hostfs.paths import HOST, HostPaths

__all__ = ["SegmentHome", "segment_home"]

MAX_STATUS_BYTES = 64 * 1024
MAX_NSPID_LEVELS = 32  # the kernel nests PID namespaces 32 deep at most


class SegmentHome:
    """A process's segment directory and names, as a reader outside its namespaces sees them."""

    __slots__ = ("name_pid", "pid", "pidns", "root")

    def __init__(self, pid: int, name_pid: int, pidns: int, root: str) -> None:
        self.pid = pid  # the process, in the reader's PID namespace
        self.name_pid = name_pid  # the pid it has in its own namespace: its names and its header's
        self.pidns = pidns  # its PID namespace as the header records it (0: not known)
        self.root = root  # /proc/<pid>/root: its root directory

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentHome) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__
        )

    # Not hashable (Python's idiom for an __eq__ on mutable fields; typeshed types it a method).
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SegmentHome(pid={self.pid}, name_pid={self.name_pid}, pidns={self.pidns:#x})"


def _ns_id(path: str) -> int | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return ((st.st_dev & 0xFFFFFFFF) << 32) | (st.st_ino & 0xFFFFFFFF)


def innermost_pid(pid: int, *, host: HostPaths = HOST) -> int | None:
    """The pid ``pid`` has in its own PID namespace: the last of its ``NSpid:`` line."""
    try:
        with open(host.proc_path(int(pid), "status"), "rb") as f:
            data = f.read(MAX_STATUS_BYTES)
    except (OSError, ValueError):
        return None
    for line in data.split(b"\n"):
        if line.startswith(b"NSpid:"):
            fields = line.split()[1 : MAX_NSPID_LEVELS + 1]
            try:
                return int(fields[-1]) if fields else None
            except ValueError:
                return None
    return None


def segment_home(pid: int, *, host: HostPaths = HOST) -> SegmentHome | None:
    """Where ``pid``'s segment is when the process runs in another mount or PID namespace than the
    reader; None when it shares both (its segment is the reader's ``/dev/shm/dsh-probe.<pid>``) or
    its namespaces cannot be read (another user's process, without CAP_SYS_PTRACE: read as ever)."""
    proc = host.proc_path
    mnt, own_mnt = _ns_id(proc(int(pid), "ns", "mnt")), _ns_id(proc("self", "ns", "mnt"))
    pidns, own_pidns = _ns_id(proc(int(pid), "ns", "pid")), _ns_id(proc("self", "ns", "pid"))
    if mnt is None or own_mnt is None or pidns is None or own_pidns is None or (mnt == own_mnt and pidns == own_pidns):
        return None
    name_pid = innermost_pid(pid, host=host) if pidns != own_pidns else int(pid)
    if name_pid is None:
        return None
    return SegmentHome(int(pid), name_pid, pidns, proc(int(pid), "root"))
