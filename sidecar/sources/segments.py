"""Probe segments of the processes in the tree, read with the probe's own reader.

Each read fails alone: a corrupt, busy, stale or foreign segment is reported for its pid and the
poll goes on. A segment that is busy for one read keeps its last good payload (a writer was caught
mid-publish); only a segment that stays unreadable is reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from probe import segment as wire
from sidecar.sources.proctree import TreeSnapshot, pid_visible

# Consecutive busy reads after which a segment counts as unreadable rather than mid-publish.
BUSY_POLLS_UNREADABLE = 3
# Segments of live processes outside the tree (other jobs) are checked for staleness this often.
FOREIGN_CHECK_EVERY_POLLS = 20
UNREADABLE_STATES = ("corrupt", "foreign-owner")


@dataclass(frozen=True)
class ProbeRead:
    pid: int
    state: str  # probe.segment states: ok | missing | initialising | busy | corrupt | stale | foreign-owner
    payload: dict[str, Any] | None  # the latest good payload of this identity, even when state is busy
    error: str | None
    unreadable: bool  # corrupt, foreign, or busy for too long
    writer_start_ticks: int | None = None  # from the header: names the writer a stale segment belongs to


class SegmentSource:
    def __init__(self, *, clean_dead: bool = True):
        self.clean_dead = clean_dead
        self._last_good: dict[tuple[int, int | None], dict[str, Any]] = {}
        self._busy_count: dict[tuple[int, int | None], int] = {}
        self.removed: list[int] = []  # pids whose dead segments this source removed (for tests/logs)
        self._cleanups = 0

    def poll(self, tree: TreeSnapshot) -> dict[int, ProbeRead]:
        out: dict[int, ProbeRead] = {}
        live = set()
        for proc in tree.processes:
            ident = proc.identity
            live.add(ident)
            try:
                r = wire.read_segment(proc.pid, expected_start_ticks=proc.start_ticks)
            except Exception as exc:  # the reader promises not to raise; a poll must not trust that
                out[proc.pid] = ProbeRead(proc.pid, "corrupt", None, f"reader failed: {exc}", True)
                continue
            if r.state == "ok":
                self._last_good[ident] = r.payload
                self._busy_count.pop(ident, None)
                out[proc.pid] = ProbeRead(proc.pid, "ok", r.payload, None, False)
                continue
            busy = self._busy_count.get(ident, 0) + 1 if r.state == "busy" else 0
            self._busy_count[ident] = busy
            unreadable = r.state in UNREADABLE_STATES or busy >= BUSY_POLLS_UNREADABLE
            payload = self._last_good.get(ident) if r.state in ("busy", "corrupt") else None
            out[proc.pid] = ProbeRead(proc.pid, r.state, payload, r.error, unreadable, r.writer_start_ticks)
        for ident in list(self._last_good):
            if ident not in live:
                del self._last_good[ident]
        for ident in list(self._busy_count):
            if ident not in live:
                del self._busy_count[ident]
        if self.clean_dead:
            self._remove_dead_segments(out)
        return out

    def _remove_dead_segments(self, reads: dict[int, ProbeRead]) -> None:
        """Unlink segments whose writer is gone: its pid no longer exists, or the pid now belongs to
        another process (start time mismatch). A zeroed header is a writer initialising: left alone.

        The tree's own segments were read against their live identity a moment ago: that read says
        whether one is stale, so it is not read (and validated) a second time. The segments of
        other live processes are checked every FOREIGN_CHECK_EVERY_POLLS polls only: on a node
        running other jobs they would otherwise cost a full read each, every poll."""
        try:
            pids = wire.list_segment_pids()
        except Exception:
            return
        self._cleanups += 1
        # The first poll, then every Nth.
        check_foreign = (self._cleanups - 1) % FOREIGN_CHECK_EVERY_POLLS == 0
        for pid in pids:
            if not pid_visible(pid):
                if self._remove(pid):
                    self.removed.append(pid)
                continue
            read = reads.get(pid)
            if read is not None:
                if read.state == "stale" and self._remove(pid, read.writer_start_ticks):
                    self.removed.append(pid)
                continue
            if not check_foreign:
                continue
            try:
                live_ticks = wire.process_start_ticks(pid)
                r = wire.read_segment(pid, expected_start_ticks=live_ticks)
            except Exception:
                continue
            if r.state == "stale" and self._remove(pid, r.writer_start_ticks):
                self.removed.append(pid)
        del self.removed[:-256]

    @staticmethod
    def _remove(pid: int, stale_writer_ticks: int | None = None) -> bool:
        """Unlink; for a stale segment only while its header still names the dead writer, so a
        newcomer with the reused pid that recreated its segment meanwhile keeps it."""
        try:
            return wire.remove_segment(pid, expected_start_ticks=stale_writer_ticks)
        except Exception:
            return False
