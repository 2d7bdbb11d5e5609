"""Discovery's candidates and their roots: the probe segments this sidecar may read (the names of
/dev/shm and whose they are: sources/segment_dir.py) and NVML's GPU processes, each walked up to its
job's root (sources/lineage.py). Used by sidecar/poll/discovery.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sidecar.documents import document
from sidecar.sources import lineage
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.owners import KnownProcesses
from sidecar.sources.proctree import open_file_budget
from sidecar.sources.segment_dir import SegmentDirectory
from sidecar.sources.segments import closed_finals

if TYPE_CHECKING:
    from sidecar.poll.collect import NvmlReading


# Candidates seen at once at most (segments + NVML rows): a neighbour creating 65,536 files in
# /dev/shm must not make a poll walk 65,536 ancestries.
MAX_CANDIDATES = 1024
REDISCOVER_EVERY_POLLS = 10


class JobFinder:
    """Which processes are the roots of jobs: the candidates (the probe segments this sidecar may
    read, NVML's GPU processes), each walked up to its job's root (sources/lineage.py). The roots are
    found again only when the candidates change, one of their processes exited, or every
    REDISCOVER_EVERY_POLLS-th poll."""

    def __init__(
        self,
        uid: int | None,
        shm_dir: str,
        poll_count: Callable[[], int],
        watch: bool = True,
        *,
        host: HostPaths = HOST,
    ) -> None:
        self.uid = uid  # None: every user's jobs (root)
        self.shm_dir = shm_dir
        self.host = host
        self.poll_count = poll_count  # the poller's polls so far
        self.roots: dict[tuple[int, int], tuple[int, int]] = {}  # candidate identity -> root identity
        self._walked: dict[tuple[int, int], frozenset[int]] = {}  # candidate identity -> the ancestors walked
        self.candidates_seen: set[int] = set()
        # The candidates' identities and owners, read once per process (sources/owners.py)
        self.processes = KnownProcesses(open_file_budget(share=0.125, cap=MAX_CANDIDATES), host=host)
        # /dev/shm's names and whose they are; ``names`` and ``owners`` are its own, for discovery
        self.segments = SegmentDirectory(uid, shm_dir, watch=watch, host=host)
        self.names, self.owners = self.segments.names, self.segments.owners
        self._judged_once = False
        # At the first poll only: the final publishes of probed children that exited before it,
        # whose parent lives (closed_finals): writer (pid, start ticks) -> parent pid. Their parent is a
        # candidate, and the sweep of that poll spares their files, so its job's first poll finds
        # them (SegmentSource._exited_before): `--once` just after a launcher's ranks ended.
        self.finals: dict[tuple[int, int | None], int] = {}
        self._probed: tuple[int, set[int]] = (-1, set())  # (owners.version, the pids it gave)
        self._gpu_seen: set[int] = set()  # the GPU processes of the last poll whose NVML call worked

    def find(self, nvml: NvmlReading) -> dict[tuple[int, int], tuple[int, int]]:
        """The roots of this poll, by candidate identity (after NVML's snapshot ``nvml``)."""
        # After NVML's snapshot and before the listing: each pid listed is looked up as it is now.
        exited = self.processes.new_poll()
        first = not self._judged_once
        probed, gpu = self._candidates(nvml)
        self.finals = self._closed_finals(probed) if first else {}
        if self.finals:
            probed = probed | set(self.finals.values())

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
            # A root found before stays unless a candidate among the ancestors its walk passed came
            # or went: a trainer that started its probe after its DataLoader worker did is the
            # worker's root from now on (discovery absorbs the worker's job), and a parent that was
            # a job process no longer is (its probe ended; the first poll's parent of closed finals,
            # a candidate for that poll only) is nobody's root from now on.
            # A poll whose NVML call failed knows nothing of the GPU processes: the ones it lost
            # are not taken for gone (a job split for one poll, its pieces absorbed at the next).
            went = self.candidates_seen - candidates - (set() if nvml.ok else self._gpu_seen)
            changed = (candidates - self.candidates_seen) | went
            roots: dict[tuple[int, int], tuple[int, int]] = {}
            walks: dict[tuple[int, int], frozenset[int]] = {}
            for pid in candidates:
                ident = self.processes.identity(pid)
                if ident is None:
                    continue
                root, walked = self.roots.get(ident), self._walked.get(ident, frozenset())
                if root is None or not walked.isdisjoint(changed):
                    found = lineage.job_root_walk(pid, is_job_process, owner=self.uid, host=self.host)
                    if found is None:
                        continue
                    root, walked = found
                roots[ident], walks[ident] = root, walked
            self.roots, self._walked = roots, walks  # forgets identities no longer seen
            self.candidates_seen = candidates
            if nvml.ok:
                self._gpu_seen = gpu
        return self.roots

    def _segment_pids(self) -> set[int]:
        """Pids with a segment this sidecar may read: its own user's (root: anyone's), and only a
        segment whose file belongs to the process's own user (SegmentOwners). The names come from
        the index, which follows the directory's changes (sources/segment_dir.py); without inotify
        it lists the directory again when its mtime moved, and every REDISCOVER_EVERY_POLLS-th poll.
        The owner checks come before the MAX_CANDIDATES cap, and the cap is shared out among the
        files' owners (document.fair_share): names another user planted (any pid, pid 1 included)
        never make a job, and one user's flood of segments (a thousand threads' ids each naming a
        file) never takes the place of another user's job."""
        self.segments.update(
            relist=self.poll_count() % REDISCOVER_EVERY_POLLS == 0, bounded=self._judged_once
        )
        self._judged_once = True
        version, pids = self._probed
        if version != self.owners.version:
            found = sorted(self.owners.found.items())
            pids = {pid for pid, _ in document.fair_share(found, MAX_CANDIDATES, lambda f: f[1])}
            self._probed = (self.owners.version, pids)
        return pids

    def _candidates(self, nvml: NvmlReading) -> tuple[set[int], set[int]]:
        probed = self._segment_pids()
        gpu = {p.pid for d in (nvml.devices if nvml.ok else ()) for p in d.processes}
        owned = [(pid, self.processes.real_uid(pid)) for pid in sorted(gpu)]
        if self.uid is not None:
            owned = [(pid, uid) for pid, uid in owned if uid == self.uid]
        # Shared out among users, as the segments are: one user's thousand GPU processes never hide
        # another's.
        return probed, {pid for pid, _ in document.fair_share(owned, MAX_CANDIDATES, lambda f: f[1])}

    def _closed_finals(self, writers: set[int]) -> dict[tuple[int, int | None], int]:
        """closed_finals among the names of pids that are not live writers of their own, whose
        parent is a live process (of this sidecar's user, when it has one)."""

        def parent_start_ticks(ppid: int) -> int | None:
            ident = self.processes.identity(ppid)
            if ident is None or (self.uid is not None and self.processes.real_uid(ppid) != self.uid):
                return None
            return ident[1]

        names = [n for n in self.names.names() if n[0] not in writers]
        found = closed_finals(names, parent_start_ticks, shm_dir=self.shm_dir, host=self.host)
        return {writer: ppid for writer, (ppid, _) in found.items()}

    def close(self) -> None:
        self.processes.close()
        self.segments.close()
