"""Probe segments of the processes in the tree, read with the probe's own reader (probe_wire).

Each read fails alone: a corrupt, busy, stale or foreign segment is reported for its pid and the
poll goes on. A segment that is busy for one read keeps its last good payload (a writer was caught
mid-publish); only a segment that stays unreadable is reported as such. Who a process is comes from
the /proc of ``host`` (hostfs.paths: --path.procfs).

A payload goes up as its typed record (probe_wire.records.ProbePayload), built here once per new
payload from the reader's validated copy: nothing above the sources reads a payload's dict. A payload
the schema refuses never has one: its read is "corrupt", with the reader's reason (the field's path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hostfs.paths import HOST, HostPaths
from hostfs.procid import process_real_uid, process_start_ticks
from probe_wire.cleanup import remove_if_dead, sweep_dead_segments
from probe_wire.follower import ReadBudget as ReadBudget  # re-exported: discovery shares one (`as`)
from probe_wire.follower import SegmentFollower
from probe_wire.header import header_identity
from probe_wire.home import SegmentHome, segment_home
from probe_wire.names import MAX_LISTED_NAMES, SHM_DIR, scan, segment_path
from probe_wire.reader import SegmentRead, read_segment
from probe_wire.records import ProbePayload, payload_record
from probe_wire.shm_index import NameIndex
from sidecar.sources.proctree import TreeSnapshot, open_file_budget

# Consecutive busy reads after which a segment counts as unreadable rather than mid-publish.
BUSY_POLLS_UNREADABLE = 3
# Segments of live processes outside the tree (other jobs) are checked for staleness this often.
FOREIGN_CHECK_EVERY_POLLS = 20
UNREADABLE_STATES = ("corrupt", "foreign-owner", "owner-mismatch")
# Final publishes of children that exited before the first poll, taken at most (a launcher's ranks).
MAX_EXITED_BEFORE = 64
# ...looked for within bounds: /dev/shm is anyone's to flood, and a job's first poll must not pay for
# it (tests/stress/test_discovery_floods.py). Names whose header is read at most, and per pid (a real
# writer leaves one name; a flood of names under one pid must not hide every other pid's).
EXITED_BEFORE_NAMES_READ = 256
EXITED_BEFORE_NAMES_PER_PID = 2

Identity = tuple[int, int | None]  # (pid, start ticks): a process


# Slotted, not frozen: one is made for each new payload at each poll, and a frozen dataclass sets
# each field through object.__setattr__ (as verdict.facts says of the per-process facts). Nothing
# mutates a read: downstream caches compare reads by identity.
@dataclass(slots=True)
class ProbeRead:
    pid: int
    state: str  # one of probe_wire.schema.STATES
    payload: ProbePayload | None  # the latest good payload of this identity, even when state is busy
    error: str | None
    unreadable: bool  # corrupt, foreign, or busy for too long
    writer_start_ticks: int | None = None  # from the header: names the writer a stale segment belongs to
    closed: bool = False  # the writer closed its segment (the probe does at exit): payload is its last


def closed_finals(
    names: list[tuple[int, int | None, str | None]],
    parent_start_ticks: Callable[[int], int | None],
    *,
    shm_dir: str = SHM_DIR,
    host: HostPaths = HOST,
) -> dict[Identity, tuple[int, ProbePayload]]:
    """The last publishes that writers which closed their segments left under ``names`` (the probe
    keeps one that named models when its process exits), each whose payload names as its parent a
    process that ``parent_start_ticks`` gives the start ticks of (None: not a parent to take), written
    by that parent's user after it started: writer identity -> (parent pid, payload). At most
    MAX_EXITED_BEFORE, out of at most EXITED_BEFORE_NAMES_READ names (EXITED_BEFORE_NAMES_PER_PID a
    pid); a live writer's segment is skipped before its payload is read. Never raises."""
    out: dict[Identity, tuple[int, ProbePayload]] = {}
    read_per_pid: dict[int, int] = {}
    read = 0
    for pid, ticks, suffix in names:
        if len(out) >= MAX_EXITED_BEFORE or read >= EXITED_BEFORE_NAMES_READ:
            break
        if read_per_pid.get(pid, 0) >= EXITED_BEFORE_NAMES_PER_PID:
            continue
        read_per_pid[pid] = read_per_pid.get(pid, 0) + 1
        read += 1
        try:
            head = header_identity(segment_path(pid, ticks, shm_dir, suffix if ticks is not None else None))
            if head is None or head[0] != pid or (pid, head[1]) in out:
                continue
            if process_start_ticks(pid, host=host) == head[1]:
                continue  # its writer lives: no exited child's final publish (and maybe a big live one)
            r = read_segment(pid, expected_start_ticks=head[1], host=host)
            raw = r.payload if r.state == "missing" else None  # closed: its writer's last publish
            ppid = raw["ppid"] if raw is not None else None
            started = parent_start_ticks(ppid) if isinstance(ppid, int) else None
            if raw is None or ppid is None or started is None or head[1] < started:
                continue
            if head[3].st_uid != process_real_uid(ppid, host=host):
                continue
            out[(pid, head[1])] = (ppid, payload_record(raw))
        except Exception:  # noqa: BLE001 -- the reader and the records promise not to raise
            continue
    return out


class SegmentSource:
    def __init__(
        self, *, clean_dead: bool = True, max_open: int | None = None, sweep_foreign: bool = True,
        names: NameIndex | None = None, budget: ReadBudget | None = None, host: HostPaths = HOST,
    ) -> None:
        """``names`` and ``budget``: what discovery shares among its jobs' sources (/dev/shm's names
        as it follows them, the reading time of large payloads per user): probe_wire.follower."""
        self.clean_dead = clean_dead
        self.host = host
        # Discovery watches many jobs, each with its own source: the sweep of the whole of /dev/shm
        # is done once for all of them (sidecar/poll/discovery.py), not once per job.
        self.sweep_foreign = sweep_foreign
        self._follower = SegmentFollower(open_file_budget() if max_open is None else max_open, names, budget, host=host)
        self._names = names
        # identity -> its last good payload: the reader's validated copy, and the record made of it
        self._last_good: dict[Identity, tuple[dict[str, Any], ProbePayload]] = {}
        self._last_ok: dict[Identity, ProbeRead] = {}
        self._busy_count: dict[Identity, int] = {}
        self._prev_live: set[Identity] = set()
        self.removed: list[int] = []  # pids whose dead segments this source removed (for tests/logs)
        # identity -> the last read of each probed process that left the tree at the last poll; at the
        # first poll, of the tree's children that had already exited (_exited_before)
        self.departed: dict[Identity, ProbeRead] = {}
        self._polled = False
        self._cleanups = 0
        # identity -> where its segment is when it runs in other namespaces (a container), None when
        # it shares ours: looked up once per process (a process never changes PID namespace)
        self._homes: dict[Identity, SegmentHome | None] = {}
        # identity -> (the follower's last read of it, the ok ProbeRead _judged made of that read):
        # the follower gives the very same read while nothing was published (poll's shortcut)
        self._same: dict[Identity, tuple[SegmentRead, ProbeRead]] = {}

    def poll(self, tree: TreeSnapshot) -> dict[int, ProbeRead]:
        out: dict[int, ProbeRead] = {}
        live: set[Identity] = set()
        # Looked up once for the loop, which runs for every process of the tree at every poll.
        read_one, add_live, follow, homes, same = self._read_one, live.add, self._follower.read, self._homes, self._same
        for proc in tree.processes:
            pid, ticks = proc.pid, proc.start_ticks
            ident = (pid, ticks)  # proc.identity
            add_live(ident)
            kept = same.get(ident)
            if kept is not None and ticks is not None:
                # Most processes of a tree, most polls: the follower gives the very read it gave
                # last time (not republished), which made this very ProbeRead (_judged).
                try:
                    r = follow(pid, ticks, homes[ident])
                except Exception:  # noqa: BLE001 -- as _read_one: the reader promises not to raise
                    out[pid] = read_one(pid, ident)
                    continue
                out[pid] = kept[1] if r is kept[0] else read_one(pid, ident, r)
            else:
                out[pid] = read_one(pid, ident)
        gone = self._prev_live - live
        self.departed = self._departed(gone) if gone else {}
        if not self._polled:  # before the first cleanup below, which removes their files
            self._polled = True
            self.departed.update(self._exited_before(tree))
        self._follower.retain(live)
        self._prev_live = live
        for ident in gone:
            self._homes.pop(ident, None)
            self._same.pop(ident, None)
            self._last_good.pop(ident, None)
            self._last_ok.pop(ident, None)
            self._busy_count.pop(ident, None)
        if self.clean_dead:
            self._remove_dead_segments(out, gone)
        return out

    def _read_one(self, pid: int, ident: Identity, r: SegmentRead | None = None) -> ProbeRead:
        """What process ``ident``'s segment says now; ``r``: its read, when the caller made it."""
        ticks, homes = ident[1], self._homes
        self._same.pop(ident, None)
        if r is None:
            try:
                if ident in homes:
                    home = homes[ident]
                else:
                    home = homes[ident] = segment_home(pid, host=self.host)
                r = read_segment(pid, home=home, host=self.host) if ticks is None else self._follower.read(pid, ticks, home)
            except Exception as exc:  # noqa: BLE001 -- the reader promises not to raise; a poll must not trust that
                return ProbeRead(pid, "corrupt", None, f"reader failed: {exc}", True)
        try:
            read = self._judged(pid, ident, r)
        except Exception as exc:  # noqa: BLE001 -- a validated payload always makes a record; a poll must not trust that
            return ProbeRead(pid, "corrupt", None, f"payload record failed: {exc!r}", True)
        if read.state == "ok" and not read.closed and ticks is not None:
            self._same[ident] = (r, read)  # what the same read gives again, at the next poll
        return read

    def _judged(self, pid: int, ident: Identity, r: SegmentRead) -> ProbeRead:
        """The read ``r`` of process ``ident`` as the poll hands it up."""
        last_ok = self._last_ok
        if r.state == "ok" and r.payload is not None:  # an ok read has its payload (probe_wire.reader)
            prev = last_ok.get(ident)
            if prev is not None and self._last_good[ident][0] is r.payload:
                return prev  # not republished since: the very same read, for caches downstream
            record = self._keep(ident, r.payload)
            self._busy_count.pop(ident, None)
            last_ok[ident] = read = ProbeRead(pid, "ok", record, None, False)
            return read
        if r.state == "missing" and (r.payload is not None or ident in self._last_good):
            # The probe closes its segment at exit while the process still lives (atexit, then
            # interpreter teardown): its last facts (the final publish, when this read saw it)
            # stand for as long as the process does.
            prev = last_ok.get(ident)
            if r.payload is not None or prev is None or not prev.closed:
                record = self._keep(ident, r.payload) if r.payload is not None else self._last_good[ident][1]
                prev = last_ok[ident] = ProbeRead(pid, "ok", record, None, False, closed=True)
            return prev
        last_ok.pop(ident, None)
        busy = self._busy_count.get(ident, 0) + 1 if r.state == "busy" else 0
        self._busy_count[ident] = busy
        unreadable = r.state in UNREADABLE_STATES or busy >= BUSY_POLLS_UNREADABLE
        good = self._last_good.get(ident) if r.state in ("busy", "corrupt") else None
        return ProbeRead(pid, r.state, None if good is None else good[1], r.error, unreadable, r.writer_start_ticks)

    def _record(self, ident: Identity, raw: dict[str, Any]) -> ProbePayload:
        """The record of ``raw``, a payload the reader validated: the last one's when it is the very
        same payload, made with the last one's runtime when the two share that map (a follower's
        payloads of one process do while its runtime stands: probe_wire/prefix.py)."""
        last = self._last_good.get(ident)
        if last is None:
            return payload_record(raw)
        if last[0] is raw:
            return last[1]
        return payload_record(raw, last[1].runtime if last[0]["runtime"] is raw["runtime"] else None)

    def _keep(self, ident: Identity, raw: dict[str, Any]) -> ProbePayload:
        """The record of ``raw``, kept as the process's last good payload."""
        record = self._record(ident, raw)
        self._last_good[ident] = (raw, record)
        return record

    def _departed(self, gone: set[Identity]) -> dict[Identity, ProbeRead]:
        """The last reads of the probed processes that left the tree since the last poll: their
        final publish when the file is still held (the probe publishes its last counts as it exits,
        between two polls), else the last good read."""
        out = {}
        for ident in gone:
            pid, ticks = ident
            last = self._last_ok.get(ident)
            try:
                r = self._follower.read_held(pid, ticks) if ticks is not None else None
                if r is None and ticks is not None:
                    # Never read while it lived (shorter than a poll): the probe leaves a process's
                    # last publish under its name when it named models (SegmentWriter keep_final).
                    r = read_segment(pid, expected_start_ticks=ticks, home=self._homes.get(ident), host=self.host)
                raw = r.payload if r is not None and r.state in ("ok", "missing") else None
                good = self._last_good.get(ident)
                if raw is not None and (last is None or good is None or raw is not good[0]):
                    out[ident] = ProbeRead(pid, "ok", self._record(ident, raw), None, False, closed=True)
                    continue
            except Exception:  # noqa: BLE001 -- the follower, the reader and the records promise not to raise
                pass
            if last is not None:
                out[ident] = last
        return out

    def _exited_before(self, tree: TreeSnapshot, shm_dir: str = SHM_DIR) -> dict[Identity, ProbeRead]:
        """The final publishes of the tree's probed children that exited before this source's first
        poll (``--once``, or a sidecar started, just after a launcher's ranks ended while it lives on):
        closed_finals of the names in ``shm_dir`` whose parent is a process of the tree. Never raises:
        a poll goes on without them."""
        starts = {p.pid: p.start_ticks for p in tree.processes}
        try:
            # Discovery's index when there is one (its names, at most 64 a pid, without listing a
            # directory someone may have flooded); --pid lists the directory once.
            names = self._names.names() if self._names is not None else scan(shm_dir, MAX_LISTED_NAMES)[0]
        except Exception:  # noqa: BLE001 -- the listing promises not to raise; a poll must not trust that
            return {}
        found = closed_finals([n for n in names if n[0] not in starts], starts.get, shm_dir=shm_dir, host=self.host)
        return {ident: ProbeRead(ident[0], "ok", record, None, False, closed=True) for ident, (_, record) in found.items()}

    def live_writers(self) -> dict[int, int | None]:
        """Pid -> start_ticks of the live processes whose segment read ok at the last poll: the
        segment read is no dead writer's leftover (another name under the pid may be one)."""
        return {pid: ticks for pid, ticks in self._last_ok}

    def close(self) -> None:
        self._follower.close()

    def _remove_dead_segments(self, reads: dict[int, ProbeRead], gone: set[Identity]) -> None:
        """Unlink the segments whose writer is provably dead in our own PID namespace (see
        probe_wire.cleanup.remove_if_dead: a segment of another namespace, or of a writer too old to say
        which, is never removed; a zombie writer is dead).

        The tree's own stale segments are looked at each poll; a process that left the tree since
        the last poll is checked at once, under both its names. The whole of /dev/shm (leftovers of
        other jobs) is looked at on the first poll and then every FOREIGN_CHECK_EVERY_POLLS polls:
        on a node running other jobs it would otherwise cost a read of every foreign segment."""
        for pid, read in reads.items():
            if read.state == "stale" and remove_if_dead(pid, host=self.host):
                self.removed.append(pid)
        for pid, ticks in gone:
            if pid in reads:
                continue  # the pid is back in the tree as a new process: its read decided above
            for name_ticks in (None, ticks) if ticks is not None else (None,):
                if remove_if_dead(pid, name_ticks, host=self.host):
                    self.removed.append(pid)
        self._cleanups += 1
        if self.sweep_foreign and (self._cleanups - 1) % FOREIGN_CHECK_EVERY_POLLS == 0:
            self.removed.extend(sweep_dead_segments(skip=set(reads), host=self.host))
        del self.removed[:-256]
