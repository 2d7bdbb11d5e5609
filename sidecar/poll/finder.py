"""Discovery's candidates and their roots: the probe segments this sidecar may read (the names of
/dev/shm, probe_wire/shm_index.py) and NVML's GPU processes, each walked up to its job's root
(sources/lineage.py). Used by sidecar/poll/jobs.py."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from probe_wire.procid import leader_real_uid
from probe_wire.shm_index import NameIndex
from sidecar.documents import document
from sidecar.sources import lineage
from sidecar.sources.owners import KnownProcesses
from sidecar.sources.proctree import open_file_budget

# Candidates seen at once at most (segments + NVML rows): a neighbour creating 65,536 files in
# /dev/shm must not make a poll walk 65,536 ancestries.
MAX_CANDIDATES = 1024
REDISCOVER_EVERY_POLLS = 10
# Processes whose owner a poll reads from /proc for the segment files of one user (the files' owner):
# a user's thousand names cost each poll at most this many reads (about 30 µs each here), another
# user's new segment is looked at in the same poll whatever that user does; a job that starts with
# a hundred probed processes (ranks and their DataLoader workers) is whole by the second poll.
OWNER_CHECKS_PER_POLL = 64
# A user with more files than this waiting for their checks is flooding: flagged (poll/jobs.py).
FLOODING_WAITING = 4 * OWNER_CHECKS_PER_POLL


class SegmentOwners:
    """The pids that have a segment file of their own process's user (only the process writes its
    segment): ``found`` (pid -> that uid), kept up to date from the index's changed pids.

    A file's verdict is kept per (pid, inode, owner), and read from /proc (the pid's real uid, and
    that the pid is a process, not another process's thread: a probe names its segment by its
    getpid()) at most OWNER_CHECKS_PER_POLL times a poll for the files of one user; the rest wait,
    in turn, for the next polls (``deferred``: the users that had some wait this poll)."""

    def __init__(self, uid: int | None, names: NameIndex) -> None:
        self.uid = uid  # None: every user's (root)
        self.names = names
        self.found: dict[int, int] = {}
        self.version = 0  # moves whenever ``found`` changes
        self.deferred: set[int] = set()
        self._stats: dict[int, list[tuple[int, int]]] = {}  # pid -> (inode, owner) of its kept regular files
        self._verdicts: dict[int, dict[tuple[int, int], bool]] = {}  # pid -> (inode, owner) -> its own?
        self._waiting: dict[int, dict[int, None]] = {}  # owner -> pids waiting for a check, in order
        self._checks: dict[int, int] = {}  # owner -> checks made this poll
        self._leaders: dict[int, int | None] = {}  # pid -> leader_real_uid, this poll
        self._most = OWNER_CHECKS_PER_POLL  # checks a user's files may have this poll

    def update(self, changed: set[int], bounded: bool = True) -> None:
        """Judges again the pids whose names changed (their files lstat'ed anew), then the waiting
        ones, as far as each user's checks go (``bounded``; else all: the first poll judges what
        /dev/shm holds, as a listing did)."""
        self.deferred, self._checks, self._leaders = set(), {}, {}
        self._most = OWNER_CHECKS_PER_POLL if bounded else 1 << 62
        for pid in changed:
            self._stats.pop(pid, None)
            if pid not in self.names:
                self._verdicts.pop(pid, None)
            self._judge(pid)
        for owner, waiting in list(self._waiting.items()):
            while waiting and self._checks.get(owner, 0) < self._most:
                pid = next(iter(waiting))
                del waiting[pid]
                self._judge(pid)
            if waiting:
                self.deferred.add(owner)
            else:
                self._waiting.pop(owner, None)

    def flooding(self) -> set[int]:
        """The users with more than FLOODING_WAITING pids waiting for a check."""
        return {owner for owner, waiting in self._waiting.items() if len(waiting) > FLOODING_WAITING}

    def _file_stats(self, pid: int) -> list[tuple[int, int]]:
        stats = self._stats.get(pid)
        if stats is None:
            stats = []
            for ticks, suffix in self.names.names_of(pid):
                try:
                    st = os.lstat(os.path.join(self.names.shm_dir, _file_name(pid, ticks, suffix)))
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and (self.uid is None or st.st_uid == self.uid):
                    stats.append((st.st_ino, st.st_uid))
            self._stats[pid] = stats
        return stats

    def _judge(self, pid: int) -> None:
        """Whether ``pid`` has a file of its own: the first of its files whose verdict says so. A
        file whose owner has no check left this poll is passed over; when no other is the
        process's own, the pid waits for that owner's next checks (what was found of it stands)."""
        verdicts = self._verdicts.setdefault(pid, {})
        waits_on = None
        for key in self._file_stats(pid):
            ok = verdicts.get(key)
            if ok is None:
                leader = self._leader(pid, key[1])
                if leader is _SPENT:
                    waits_on = key[1] if waits_on is None else waits_on
                    continue
                ok = verdicts[key] = leader == key[1]  # None (no such process) is nobody's
            if ok:
                if self.found.get(pid) != key[1]:
                    self.found[pid] = key[1]
                    self.version += 1
                return
        if waits_on is not None:
            self._waiting.setdefault(waits_on, {})[pid] = None
            self.deferred.add(waits_on)
            return
        if self.found.pop(pid, None) is not None:
            self.version += 1
        if not verdicts:
            self._verdicts.pop(pid, None)

    def _leader(self, pid: int, owner: int) -> object:
        """leader_real_uid(pid), read once a poll, on ``owner``'s checks; _SPENT when none is left."""
        if pid in self._leaders:
            return self._leaders[pid]
        if self._checks.get(owner, 0) >= self._most:
            return _SPENT
        self._checks[owner] = self._checks.get(owner, 0) + 1
        leader = self._leaders[pid] = leader_real_uid(pid)
        return leader


_SPENT = object()  # a user's checks of this poll are spent


def _file_name(pid: int, ticks: int | None, suffix: str | None) -> str:
    if ticks is None:
        return f"dsh-probe.{pid}"
    return f"dsh-probe.{pid}.{ticks}" + (f".{suffix}" if suffix else "")


class JobFinder:
    """Which processes are the roots of jobs: the candidates (the probe segments this sidecar may
    read, NVML's GPU processes), each walked up to its job's root (sources/lineage.py). The roots are
    found again only when the candidates change, one of their processes exited, or every
    REDISCOVER_EVERY_POLLS-th poll."""

    def __init__(self, uid: int | None, shm_dir: str, poll_count: Callable[[], int], watch: bool = True) -> None:
        self.uid = uid  # None: every user's jobs (root)
        self.shm_dir = shm_dir
        self.poll_count = poll_count  # the poller's polls so far
        self.roots: dict[tuple[int, int], tuple[int, int]] = {}  # candidate identity -> root identity
        self.candidates_seen: set[int] = set()
        # The candidates' identities and owners, read once per process (sources/owners.py)
        self.processes = KnownProcesses(open_file_budget(share=0.125, cap=MAX_CANDIDATES))
        self.names = NameIndex(shm_dir, watch=watch)
        self.owners = SegmentOwners(uid, self.names)
        self._judged_once = False
        self._probed: tuple[int, set[int]] = (-1, set())  # (owners.version, the pids it gave)

    def find(self, nvml) -> dict[tuple[int, int], tuple[int, int]]:
        """The roots of this poll, by candidate identity (after NVML's snapshot ``nvml``)."""
        # After NVML's snapshot and before the listing: each pid listed is looked up as it is now.
        exited = self.processes.new_poll()
        probed, gpu = self._candidates(nvml)

        def is_job_process(pid: int, argv: tuple[str, ...]) -> bool:
            return pid in probed or pid in gpu or lineage.is_launcher(argv)

        candidates = probed | gpu
        # The same candidates as last poll (most polls): the same roots, without a /proc read. A new
        # candidate (a process that just started its probe, maybe a job's parent) redoes them all,
        # and so does a candidate's process that exited (its pid may be another's now), and every
        # REDISCOVER_EVERY_POLLS-th poll (a pid reused between two polls, where no pidfd says so).
        if (
            candidates != self.candidates_seen
            or not exited.isdisjoint(candidates)
            or self.poll_count() % REDISCOVER_EVERY_POLLS == 0
        ):
            roots: dict[tuple[int, int], tuple[int, int]] = {}
            for pid in candidates:
                ident = self.processes.identity(pid)
                if ident is None:
                    continue
                root = self.roots.get(ident) or lineage.job_root(pid, is_job_process, owner=self.uid)
                if root is not None:
                    roots[ident] = root
            self.roots = roots  # forgets identities no longer seen
            self.candidates_seen = candidates
        return self.roots

    def _segment_pids(self) -> set[int]:
        """Pids with a segment this sidecar may read: its own user's (root: anyone's), and only a
        segment whose file belongs to the process's own user (SegmentOwners). The names come from
        the index, which follows the directory's changes (probe_wire/shm_index.py); without inotify
        it lists the directory again when its mtime moved, and every REDISCOVER_EVERY_POLLS-th poll.
        The owner checks come before the MAX_CANDIDATES cap, and the cap is shared out among the
        files' owners (document.fair_share): names another user planted (any pid, pid 1 included)
        never make a job, and one user's flood of segments (a thousand threads' ids each naming a
        file) never takes the place of another user's job."""
        self.names.refresh(relist=self.poll_count() % REDISCOVER_EVERY_POLLS == 0)
        self.owners.update(self.names.take_changed(), bounded=self._judged_once)
        self._judged_once = True
        version, pids = self._probed
        if version != self.owners.version:
            found = sorted(self.owners.found.items())
            pids = {pid for pid, _ in document.fair_share(found, MAX_CANDIDATES, lambda f: f[1])}
            self._probed = (self.owners.version, pids)
        return pids

    def _candidates(self, nvml) -> tuple[set[int], set[int]]:
        probed = self._segment_pids()
        gpu = {p.pid for d in (nvml.devices if nvml.ok else ()) for p in d.processes}
        owned = [(pid, self.processes.real_uid(pid)) for pid in sorted(gpu)]
        if self.uid is not None:
            owned = [(pid, uid) for pid, uid in owned if uid == self.uid]
        # Shared out among users, as the segments are: one user's thousand GPU processes never hide
        # another's.
        return probed, {pid for pid, _ in document.fair_share(owned, MAX_CANDIDATES, lambda f: f[1])}

    def close(self) -> None:
        self.processes.close()
        self.names.close()
