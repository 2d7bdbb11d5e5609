"""Whose process a pid is: its real uid, read once per process while that process lives.

A non-root discovery sidecar keeps only its own user's GPU processes (sidecar/jobs.py), and NVML
lists every GPU process at every poll. Reading /proc/PID/status for each costs about 30 µs cold,
2 ms a poll on a node with 64 GPU processes: more than the rest of the discovery's own work. A
pidfd (Linux 5.3) names one process, never a pid that a newcomer may reuse, and becomes readable
when that process exits: one poll(2) over all of them says which pids are still the processes whose
uid was read. A process's real uid changes only when a privileged process calls setuid(2) (a root
launcher dropping to a user, `su`), so it is read again every RECHECK_EVERY_POLLS polls as well.
Without pidfds (another kernel or OS, a descriptor budget spent) every lookup reads /proc again.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable

from probe_wire.procid import process_real_uid

# A live process's uid is read again this often (polls): the bound on how long a setuid(2) by a
# privileged process goes unseen. Discovery redoes its roots as often (jobs.REDISCOVER_EVERY_POLLS).
RECHECK_EVERY_POLLS = 10


def next_recheck(poll: int, pid: int, every_polls: int) -> int:
    """The next poll after ``poll`` at which ``pid``'s uid is read again: every ``every_polls``
    polls, at a phase set by the pid, so that the processes first read at one poll (a node's
    every GPU process, at the sidecar's start) are read again spread over the polls, not at once."""
    return poll + every_polls - (poll + pid) % every_polls


def _exited(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


class RealUids:
    """`real_uid(pid)` as probe_wire.procid.process_real_uid says it, remembered per process.

    Call `new_poll()` once per poll, after the pids to look up were listed (NVML's snapshot): it
    forgets the processes that exited, so a pid listed after its process exited is read afresh,
    whoever has it now. Not thread-safe: one poller owns it."""

    def __init__(
        self,
        max_open: int,
        *,
        read_uid: Callable[[int], int | None] = process_real_uid,
        recheck_every_polls: int = RECHECK_EVERY_POLLS,
    ):
        self.max_open = max(0, int(max_open))
        self.read_uid = read_uid
        self.recheck_every_polls = recheck_every_polls
        self._known: dict[int, tuple[int, int, int]] = {}  # pid -> (pidfd, uid, poll to read it again at)
        self._pid_of_fd: dict[int, int] = {}
        self._exits = select.poll()  # the pidfds of _known, readable once their process exits
        self._poll = 0
        self._have_pidfd = hasattr(os, "pidfd_open")

    def __len__(self) -> int:
        return len(self._known)

    def new_poll(self) -> None:
        self._poll += 1
        if self._known:
            for fd, _ in self._exits.poll(0):
                self._forget(self._pid_of_fd[fd])

    def real_uid(self, pid: int) -> int | None:
        entry = self._known.get(pid)
        if entry is not None:
            if self._poll < entry[2]:
                return entry[1]
            self._forget(pid)
        if not self._have_pidfd or len(self._known) >= self.max_open:
            return self.read_uid(pid)
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone, a thread's id, no pidfds in this kernel: read it as it is now
            return self.read_uid(pid)
        uid = self.read_uid(pid)
        # Still alive after the read: the pid was the pidfd's process all along (a pid is reused
        # only once its process has exited), so the uid read is that process's.
        if uid is None or _exited(fd):
            os.close(fd)
            return uid
        self._known[pid] = (fd, uid, next_recheck(self._poll, pid, self.recheck_every_polls))
        self._pid_of_fd[fd] = pid
        self._exits.register(fd, select.POLLIN)
        return uid

    def _forget(self, pid: int) -> None:
        fd = self._known.pop(pid)[0]
        del self._pid_of_fd[fd]
        self._exits.unregister(fd)
        os.close(fd)

    def close(self) -> None:
        for pid in list(self._known):
            self._forget(pid)
