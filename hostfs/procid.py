"""Who a process is, read from /proc the same way by the probe, the wire format and the sidecar.

A process is ``(pid, start_ticks)``: field 22 of ``/proc/<pid>/stat``, its start time in clock ticks
since boot (an exact integer, world-readable). Standard library only: the probe imports this module
inside the training process and the sidecar imports it for the process tree, the reader and the cleanup.
Each function reads the /proc of ``host`` (hostfs.paths.HostPaths; the host's own by default).

Everything here answers for the PID namespace of the /proc that this process sees; ``proc_is_ours``
says whether that is its own namespace (it is not inside ``unshare -p`` without ``--mount-proc``),
without which no pid read here may be taken as "dead".
"""

from __future__ import annotations

import os

from hostfs.paths import HOST, HostPaths

__all__ = [
    "ZOMBIE_STATES",
    "leader_real_uid",
    "pid_namespace_id",
    "proc_is_ours",
    "process_identity",
    "process_parent",
    "process_real_uid",
    "process_start_ticks",
    "process_state",
]

# A zombie or a dead task does nothing more: its segment is finished although its pid still shows.
ZOMBIE_STATES = ("Z", "X", "x")


def _stat_fields(pid: int, host: HostPaths) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name; [0] is field 3 (state)."""
    try:
        with open(host.proc_path(int(pid), "stat"), "rb") as f:
            data = f.read(4096)
    except (OSError, ValueError):
        return None
    # comm (field 2) may hold spaces and parentheses: the fields after it start after the LAST ')'.
    close = data.rfind(b")")
    if close < 0:
        return None
    rest = data[close + 1 :].split()
    return rest if len(rest) > 19 else None


def process_identity(pid: int, *, host: HostPaths = HOST) -> tuple[int, int] | None:
    """``(pid, start_ticks since boot)`` of a process that runs; None when the pid is gone, is a
    zombie (it will never write again), or /proc cannot say."""
    rest = _stat_fields(pid, host)
    if rest is None or rest[0].decode("ascii", "replace") in ZOMBIE_STATES:
        return None
    try:
        return (int(pid), int(rest[19]))  # rest[0] is field 3 (state), so field 22 is rest[19]
    except ValueError:
        return None


def process_parent(pid: int, *, host: HostPaths = HOST) -> tuple[int, int] | None:
    """``(pid, start_ticks)`` of the parent of a running ``pid`` (field 4 of its stat, then the
    parent's own identity); None when either is gone or /proc cannot say. A launcher's identity:
    every process it started names the same one, and a pid reused later names another."""
    rest = _stat_fields(pid, host)
    if rest is None:
        return None
    try:
        ppid = int(rest[1])  # rest[0] is field 3 (state), so field 4 (ppid) is rest[1]
    except ValueError:
        return None
    return process_identity(ppid, host=host) if ppid > 0 else None


def process_start_ticks(pid: int, *, host: HostPaths = HOST) -> int | None:
    """Start time of a running ``pid`` in clock ticks since boot (``process_identity``); None when it
    is gone or a zombie."""
    ident = process_identity(pid, host=host)
    return None if ident is None else ident[1]


def process_state(pid: int, *, host: HostPaths = HOST) -> str | None:
    """Field 3 of ``/proc/<pid>/stat`` (R, S, D, T, t, Z, ...); None when gone."""
    rest = _stat_fields(pid, host)
    return None if rest is None else rest[0].decode("ascii", "replace")


def process_real_uid(pid: int, *, host: HostPaths = HOST) -> int | None:
    """The real uid of ``pid`` (first field of the ``Uid:`` line of /proc/<pid>/status); None when
    gone or unreadable."""
    try:
        with open(host.proc_path(int(pid), "status"), "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def leader_real_uid(pid: int, *, host: HostPaths = HOST) -> int | None:
    """The real uid of ``pid`` when it is a process (the leader of its thread group: the pid a
    process's own getpid() gives, which names its segment); None when it is another process's
    thread, gone or unreadable. /proc answers for a thread's id as for a process's."""
    tgid = None
    try:
        with open(host.proc_path(int(pid), "status"), "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    tgid = int(line.split()[1])
                elif line.startswith(b"Uid:"):
                    return int(line.split()[1]) if tgid == int(pid) else None
    except (OSError, ValueError, IndexError):
        return None
    return None


# (pid, /proc root, namespace id) of the last read: a process never changes PID namespace (unshare
# and setns move only its children), and a child, which may be in another one, has another pid.
_PIDNS_READ: tuple[int, HostPaths, int] | None = None


def pid_namespace_id(*, host: HostPaths = HOST) -> int:
    """This process's PID namespace as one nonzero u64 (device << 32 | inode of
    /proc/self/ns/pid); 0 when it cannot be read (no /proc, or a kernel without namespaces).
    Read once per process and /proc (a reader asks at every changed payload)."""
    global _PIDNS_READ
    pid = os.getpid()
    last = _PIDNS_READ
    if last is not None and last[0] == pid and (last[1] is host or last[1] == host):
        return last[2]
    try:
        st = os.stat(host.proc_path("self", "ns", "pid"))
    except OSError:
        return 0
    ns = ((st.st_dev & 0xFFFFFFFF) << 32) | (st.st_ino & 0xFFFFFFFF)
    _PIDNS_READ = (pid, host, ns)
    return ns


def proc_is_ours(*, host: HostPaths = HOST) -> bool:
    """Whether the /proc we read shows our own PID namespace: /proc/self names our pid. Inside
    ``unshare -p -f`` without ``--mount-proc`` it shows the parent's, where a pid we cannot find
    says nothing about a process of ours."""
    try:
        return os.readlink(host.proc_path("self")) == str(os.getpid())
    except OSError:
        return False
