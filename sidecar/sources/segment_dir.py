"""The segment directory (/dev/shm): its probe segment names as discovery follows them, whose they
are, and the sweep of dead writers' leftovers; the doctor's report of names someone else holds.

- ``SegmentDirectory``: the names (probe_wire/shm_index.py ``NameIndex``, kept from inotify's events),
  the pids that have a segment file of their own (``SegmentOwners``: owner checks read from /proc
  within a budget per user), and ``sweep_dead``, which judges a part of the names at a time.
- ``planted_names``: links, non-files and other users' files under segment names (`dsh-sidecar
  doctor`).

Every /proc read is ``host``'s (hostfs.paths: --path.procfs). Used by discovery (sidecar/poll/finder.py,
sidecar/poll/discovery.py) and the doctor (sidecar/cli/doctor.py), which read no directory themselves.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths
from hostfs.procid import leader_real_uid, process_real_uid
from probe_wire.cleanup import sweep_dead_segments
from probe_wire.names import SHM_DIR, list_segment_files, segment_path
from probe_wire.shm_index import NameIndex

__all__ = [
    "FLOODING_WAITING",
    "OWNER_CHECKS_PER_POLL",
    "SHM_DIR",
    "SWEEP_NAMES",
    "PlantedNames",
    "SegmentDirectory",
    "SegmentOwners",
    "planted_names",
]

# Processes whose owner a poll reads from /proc for the segment files of one user (the files' owner):
# a user's thousand names cost each poll at most this many reads (about 30 µs each here), another
# user's new segment is looked at in the same poll whatever that user does; a job that starts with
# a hundred probed processes (ranks and their DataLoader workers) is whole by the second poll.
OWNER_CHECKS_PER_POLL = 64
# A user with more files than this waiting for their checks is flooding: flagged (poll/discovery.py).
FLOODING_WAITING = 4 * OWNER_CHECKS_PER_POLL
# Names the sweep of dead writers' segments judges at a time (every FOREIGN_CHECK_EVERY_POLLS polls,
# each name an open and a read of its header, ~20 µs): /dev/shm's names are swept a part at a time.
SWEEP_NAMES = 128
# Planted names the doctor lists of each kind (all are counted): a flood must not flood the report.
MAX_LISTED = 100


class SegmentOwners:
    """The pids that have a segment file of their own process's user (only the process writes its
    segment): ``found`` (pid -> that uid), kept up to date from the index's changed pids.

    A file's verdict is kept per (pid, inode, owner), and read from /proc (the pid's real uid, and
    that the pid is a process, not another process's thread: a probe names its segment by its
    getpid()) at most OWNER_CHECKS_PER_POLL times a poll for the files of one user; the rest wait,
    in turn, for the next polls (``deferred``: the users that had some wait this poll)."""

    def __init__(self, uid: int | None, names: NameIndex, *, host: HostPaths = HOST) -> None:
        self.uid = uid  # None: every user's (root)
        self.names = names
        self.host = host
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
        leader = self._leaders[pid] = leader_real_uid(pid, host=self.host)
        return leader


_SPENT = object()  # a user's checks of this poll are spent


def _file_name(pid: int, ticks: int | None, suffix: str | None) -> str:
    if ticks is None:
        return f"dsh-probe.{pid}"
    return f"dsh-probe.{pid}.{ticks}" + (f".{suffix}" if suffix else "")


class SegmentDirectory:
    """The segment names of ``shm_dir`` for discovery: ``names`` (the index, ``watch``: from
    inotify's events), ``owners`` (the pids with a file of their own, of ``uid``'s; None: anyone's),
    and the sweep of dead writers' segments (``sweep_dead``). Not thread-safe: one poller owns it."""

    def __init__(
        self, uid: int | None, shm_dir: str = SHM_DIR, *, watch: bool = True, host: HostPaths = HOST
    ) -> None:
        self.shm_dir = shm_dir
        self.host = host
        self.names = NameIndex(shm_dir, watch=watch, host=host)
        self.owners = SegmentOwners(uid, self.names, host=host)
        self._swept_to = -1  # the last pid the last sweep judged the names of
        self._scratch_swept_to = ""  # and the last scratch name

    def update(self, *, relist: bool, bounded: bool) -> None:
        """One poll's look at the directory: what changed (``relist``: see NameIndex.refresh), then
        the owner checks of the pids whose names changed (``bounded``: see SegmentOwners.update)."""
        self.names.refresh(relist=relist)
        self.owners.update(self.names.take_changed(), bounded=bounded)

    def sweep_dead(self, live: dict[int, int | None]) -> list[int]:
        """Removes the segments (and scratch files) of writers provably dead in our own PID namespace
        (probe_wire.cleanup.sweep_dead_segments) among SWEEP_NAMES of the names, each pid's whole,
        from where the last sweep stopped: a directory flooded with names costs a sweep SWEEP_NAMES
        judgements. ``live``: pid -> start ticks of the writers whose segments read ok (skipped where
        that writer may hold the name). The pids whose files went."""
        part, self._swept_to = self.names.names_after(self._swept_to, SWEEP_NAMES)
        scratch = self.names.scratch_after(self._scratch_swept_to, SWEEP_NAMES)
        self._scratch_swept_to = scratch[-1] if scratch else ""
        return sweep_dead_segments(skip=live, shm_dir=self.shm_dir, names=(part, scratch), host=self.host)

    def close(self) -> None:
        self.names.close()


@dataclass(frozen=True)
class PlantedNames:
    """Segment names someone else holds (``planted_names``): each kind counted in full, at most
    MAX_LISTED of each described (path, and why)."""

    links: tuple[str, ...]  # links and other non-files under segment names
    links_count: int
    foreign_files: tuple[str, ...]  # files of another user than the process they name
    foreign_files_count: int


def planted_names(shm_dir: str = SHM_DIR, *, host: HostPaths = HOST) -> PlantedNames:
    """Segment names that someone else holds: links or other non-files planted under them, and files
    owned by another user than the process they name (forged facts, or a name squatted so that the
    process's probe must fall back to dsh-probe.PID.START_TICKS). For a pid that does not run, a
    file of another user than us counts (it waits for the next process to get that pid)."""
    links: list[str] = []
    foreign: list[str] = []
    me = os.geteuid()
    for pid, ticks, suffix in list_segment_files(shm_dir):
        path = segment_path(pid, ticks, shm_dir, suffix)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            kind = "symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            links.append(f"{path} ({kind})")
            continue
        owner = process_real_uid(pid, host=host)
        if owner is not None and st.st_uid != owner:
            foreign.append(f"{path}: owned by uid {st.st_uid}, process {pid} runs as uid {owner}")
        elif owner is None and st.st_uid != me:
            foreign.append(f"{path}: owned by uid {st.st_uid}, no process {pid} runs")
    return PlantedNames(tuple(links[:MAX_LISTED]), len(links), tuple(foreign[:MAX_LISTED]), len(foreign))
