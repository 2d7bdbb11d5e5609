"""Which process a pid is, and whose: read once per process while that process lives.

Discovery (sidecar/poll/discovery.py) looks up every candidate pid (probed, or listed by NVML) at every
poll: a non-root sidecar keeps only its own user's GPU processes, and the candidates' identities
(pid, start time) say whether their roots are still the ones found. Reading /proc for each costs
about 30 µs cold, 2 ms a poll on a node with 64 GPU processes: more than the rest of the discovery's
own work. A pidfd (Linux 5.3) names one process, never a pid that a newcomer may reuse, and becomes
readable when that process exits: one poll(2) over all of them says which pids are still the
processes that were read. A process's start time never changes; its real uid changes only when a
privileged process calls setuid(2) (a root launcher dropping to a user, `su`), so that is read
again every RECHECK_EVERY_POLLS polls as well. Without pidfds (another kernel or OS, a descriptor
budget spent) every lookup reads /proc again. /proc is ``host``'s (hostfs.paths: --path.procfs).
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from hostfs.paths import HOST, HostPaths
from hostfs.procid import proc_is_ours, process_identity, process_real_uid

# A live process's uid is read again this often (polls): the bound on how long a setuid(2) by a
# privileged process goes unseen. Discovery redoes its roots as often (jobs.REDISCOVER_EVERY_POLLS).
RECHECK_EVERY_POLLS = 10


def next_recheck(poll: int, pid: int, every_polls: int) -> int:
    """The next poll after ``poll`` at which ``pid``'s uid is read again: every ``every_polls``
    polls, at a phase set by the pid, so that the processes first read at one poll (a node's
    every GPU process, at the sidecar's start) are read again spread over the polls, not at once."""
    return poll + every_polls - (poll + pid) % every_polls


T = TypeVar("T")


@dataclass(slots=True)
class _Known:
    """A process followed by its pidfd, and what was read of it (None: not read yet)."""

    fd: int
    asked: int  # the poll it was last asked about at
    identity: tuple[int, int] | None = None
    uid: int | None = None
    uid_due: int = 0  # the poll to read the uid again at


def _exited(fd: int) -> bool:
    one = select.poll()  # not select(): a descriptor past 1024 (the server raises its limit) is fine
    one.register(fd, select.POLLIN)
    return bool(one.poll(0))


class KnownProcesses:
    """What hostfs.procid says of a pid (`identity`, `real_uid`), remembered per process.

    Call `new_poll()` once per poll, after the pids to look up were listed (NVML's snapshot, the
    segment listing): it forgets the processes that exited, so a pid listed after its process
    exited is read afresh, whoever has it now, and says which pids those were. Not thread-safe:
    one poller owns it."""

    def __init__(
        self,
        max_open: int,
        *,
        read_identity: Callable[[int], tuple[int, int] | None] | None = None,
        read_uid: Callable[[int], int | None] | None = None,
        recheck_every_polls: int = RECHECK_EVERY_POLLS,
        host: HostPaths = HOST,
    ) -> None:
        """``read_identity`` and ``read_uid``: hostfs.procid's readers of ``host``'s /proc unless
        given (a test counts the reads)."""
        self.max_open = max(0, int(max_open))
        self.read_identity = read_identity or partial(process_identity, host=host)
        self.read_uid = read_uid or partial(process_real_uid, host=host)
        self.recheck_every_polls = recheck_every_polls
        self._known: dict[int, _Known] = {}
        self._pid_of_fd: dict[int, int] = {}
        self._exits = select.poll()  # the pidfds of _known, readable once their process exits
        self._poll = 0
        # A pidfd names the pid in our PID namespace, /proc in its own: only where they agree
        # (not under `unshare -p` without a /proc of its own) is a pidfd the process /proc shows.
        self._have_pidfd = hasattr(os, "pidfd_open") and proc_is_ours(host=host)

    def __len__(self) -> int:
        return len(self._known)

    def new_poll(self) -> set[int]:
        """Forgets the processes that exited since the last poll; their pids. Every
        RECHECK_EVERY_POLLS polls, forgets as well the live ones not asked about since (a process
        NVML listed once, then never again), whose pidfds would hold the budget for good."""
        self._poll += 1
        exited = set()
        if self._known:
            for fd, _ in self._exits.poll(0):
                exited.add(self._pid_of_fd[fd])
                self._forget(self._pid_of_fd[fd])
            if self._poll % self.recheck_every_polls == 0:
                unused_before = self._poll - self.recheck_every_polls
                for pid in [pid for pid, entry in self._known.items() if entry.asked < unused_before]:
                    self._forget(pid)
        return exited

    def identity(self, pid: int) -> tuple[int, int] | None:
        entry = self._known.get(pid)
        if entry is not None and entry.identity is not None:
            entry.asked = self._poll
            return entry.identity  # a process's start time never changes
        kept, identity = self._read(pid, entry, self.read_identity)
        if kept is not None:
            kept.identity = identity
        return identity

    def real_uid(self, pid: int) -> int | None:
        entry = self._known.get(pid)
        if entry is not None and entry.uid is not None and self._poll < entry.uid_due:
            entry.asked = self._poll
            return entry.uid
        kept, uid = self._read(pid, entry, self.read_uid)
        if kept is not None:
            kept.uid = uid
            kept.uid_due = next_recheck(self._poll, pid, self.recheck_every_polls)
        return uid

    def _read(self, pid: int, entry: _Known | None, read: Callable[[int], T | None]) -> tuple[_Known | None, T | None]:
        """``read(pid)``, and the entry to keep it in: None where the process is not followed (no
        pidfd for it) or is forgotten (it exited, or the read found nothing)."""
        if entry is None:
            if not self._have_pidfd or len(self._known) >= self.max_open:
                return None, read(pid)
            try:
                fd = os.pidfd_open(pid)
            # Gone, a thread's id, no pidfds in this kernel, a number no pid can be (NVML's rows are
            # unsigned 32-bit): read it as it is now, as without pidfds.
            except (OSError, OverflowError, ValueError):
                return None, read(pid)
            entry = _Known(fd, self._poll)
            self._known[pid] = entry
            self._pid_of_fd[fd] = pid
            self._exits.register(fd, select.POLLIN)
        value = read(pid)
        # Still alive after the read: the pid was the pidfd's process all along (a pid is reused
        # only once its process has exited), so what was read is that process's.
        if value is None or _exited(entry.fd):
            self._forget(pid)
            return None, value
        entry.asked = self._poll
        return entry, value

    def _forget(self, pid: int) -> None:
        fd = self._known.pop(pid).fd
        del self._pid_of_fd[fd]
        self._exits.unregister(fd)
        os.close(fd)

    def close(self) -> None:
        for pid in list(self._known):
            self._forget(pid)
