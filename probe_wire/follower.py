"""The follower: a monitor's reader of many live processes' segments, poll after poll."""

from __future__ import annotations

import os
import time

from hostfs.paths import HOST, HostPaths
from hostfs.procid import process_real_uid
from probe_wire.header import HEADER, HEADER_BYTES, SEQ, SEQ_OFFSET
from probe_wire.names import LISTING_SETTLED_S, SHM_DIR
from probe_wire.prefix import PrefixSlot
from probe_wire.reader import (
    CLOSED_ERROR,
    READ_ATTEMPTS,
    SegmentRead,
    better_read,
    open_segment,
    own_random_names,
    read_consistent,
)

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from probe_wire.home import SegmentHome
    from probe_wire.shm_index import NameIndex

    # A kept file (see _keep): its fd, its size when opened, the bytes of its last good read, that
    # read, the bytes to copy when reading it again, its prefix slot.
    Kept = tuple[int, int, bytes, SegmentRead, int, PrefixSlot]
    FileKey = tuple[int, int, int, int]  # a file as fstat says it: st_dev, st_ino, st_size, st_mtime_ns

__all__ = ["FALLBACK_CHECK_EVERY", "ReadBudget", "SegmentFollower"]

# A follower looks for the fallback name of a process whose own name is free every this many reads.
FALLBACK_CHECK_EVERY = 8
# Bytes a follower's check of its last read copies beyond that read's: a new payload up to this much
# longer is then read whole by that one pread (an event or a longer number adds tens of bytes).
READ_SLACK_BYTES = 1024
# Reads that a file gives again for as long as its header stays the same (its payload's bytes, the
# writer's identity and the identity asked for are all fixed by then): see _judged_read.
JUDGED_STATES = frozenset({"corrupt", "stale"})
# Only a payload longer than this is judged by its header: a shorter one is read again each poll
# (at most PAYLOAD_COPY_BUDGET_BYTES of copies, as ever), so a file rewritten in place with write()
# under the same header, within one mtime tick, is never misjudged where that costs little.
JUDGE_BY_HEADER_BYTES = 64 * 1024
# What reading one user's payloads longer than JUDGE_BY_HEADER_BYTES (a probe's default segment holds
# 64 KiB; only a probe given a larger DSH_PROBE_SEGMENT_BYTES writes more) may cost a monitor's poll,
# on average: a copy, crc and decode of 16 MiB takes 20 ms and more here.
LARGE_READ_S_PER_POLL = 0.00025


class ReadBudget:
    """The time a monitor's polls give to reading large payloads (over JUDGE_BY_HEADER_BYTES), per
    user: the owner of the files, whose processes wrote them. Each poll (``new_poll()``) gives each
    user ``per_poll_s`` more, up to ``per_poll_s``; a large payload is read only while its user's time
    is above 0, and what the read took is taken off (a long read is owed: that user's next large
    reads wait until the polls have paid it back). One user's sixteen 16 MiB segments republished
    at every poll then cost the poll ``per_poll_s`` on average, and nothing of another user's time.
    Shared by the followers of every job of a discovery sidecar. ``deferred``: the users whose reads
    waited this poll."""

    def __init__(self, per_poll_s: float = LARGE_READ_S_PER_POLL) -> None:
        self.per_poll_s = per_poll_s
        self._left: dict[int, float] = {}  # uid -> seconds left, when less than per_poll_s
        self.deferred: set[int] = set()

    def new_poll(self) -> None:
        for uid, left in list(self._left.items()):
            if left + self.per_poll_s >= self.per_poll_s:
                del self._left[uid]  # whole again
            else:
                self._left[uid] = left + self.per_poll_s
        self.deferred = set()

    def allows(self, uid: int) -> bool:
        if self._left.get(uid, self.per_poll_s) > 0:
            return True
        self.deferred.add(uid)
        return False

    def owing(self) -> set[int]:
        """The users whose reads took more than their time: their next ones wait."""
        return {uid for uid, left in self._left.items() if left <= 0}

    def spend(self, uid: int, seconds: float) -> None:
        self._left[uid] = self._left.get(uid, self.per_poll_s) - seconds


class SegmentFollower:
    """Reads the segments of a set of live processes poll after poll, keeping each file open.

    What a monitor wants from ``read_segment`` every second for dozens of processes. A file is kept
    open only after a good read of it under the identity (pid, start_ticks) asked for, and then:
    bytes (header and payload) that are the very bytes of the last good read give the same
    SegmentRead again, without decoding or validating anything (one pread); other bytes (a new
    publish, a writer mid-publish) are read through the same file with the usual seqlock protocol.
    Only a writer owns its file, so the file stays right for that identity while it lives: if the
    name is removed the writer goes on writing into the file, and a writer that closes marks it
    FLAG_CLOSED first. Any read that is not ok drops the file and tries the path afresh, so what
    ``read`` returns is what ``read_segment`` says of that file. At most ``max_open`` files are kept.
    Not thread-safe: one poller owns it. ``read`` never raises.
    """

    def __init__(
        self, max_open: int = 256, names: NameIndex | None = None, budget: ReadBudget | None = None,
        *, host: HostPaths = HOST,
    ) -> None:
        """``names``: /dev/shm's names as a monitor follows them (the random names are looked up
        there, not listed); ``budget``: what reading large payloads may cost a poll, per user;
        ``host``: whose /proc says who the processes are (hostfs.paths)."""
        self.max_open = max(0, int(max_open))
        self.host = host
        self.names = names
        self.budget = budget
        self._open: dict[tuple[int, int], Kept] = {}  # identity -> its kept file
        self._missing_reads: dict[tuple[int, int], int] = {}  # identity -> reads that found no file
        # identity -> its payloads' prefix (probe_wire/prefix.py): a new publish decodes only the rest
        self._prefixes: dict[tuple[int, int], PrefixSlot] = {}
        # identity -> {its file: (header bytes, the corrupt or stale read made under that header)}:
        # such a file is judged again only when its header changes (see _judged_read)
        self._judged: dict[tuple[int, int], dict[FileKey, tuple[bytes, SegmentRead]]] = {}
        # identity -> (/dev/shm's (st_dev, st_ino, st_mtime_ns) when listed, the random names of it
        # then): a process whose two names are squatted costs a listing only when the directory changed
        self._random: dict[tuple[int, int], tuple[tuple[int, int, int], list[str]]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def read(self, pid: int, start_ticks: int, home: SegmentHome | None = None) -> SegmentRead:
        """``home``: where a process in other namespaces keeps its segment (probe_wire.home)."""
        ident = (pid, start_ticks)
        try:
            entry = self._open.get(ident)
            if entry is not None:
                r = self._reread(ident, entry, home)
                if r is not None:
                    return r
            r = self._open_read(ident, None, None, home)
            if r.state != "ok" and self._try_fallback(ident, r):
                # Published under the fallback name when its own name was taken, under a random name
                # when both were.
                r = better_read(r, self._open_read(ident, start_ticks, None, home))
                suffixes = self._random_names(ident, home) if r.state != "ok" else ()
                for suffix in suffixes:
                    r = better_read(r, self._open_read(ident, start_ticks, suffix, home))
                    if r.state == "ok":
                        break
            return r
        except Exception as e:  # noqa: BLE001 -- same contract as read_segment: never raises
            self._drop(ident)
            return SegmentRead(
                pid=pid, state="corrupt", error=f"reader failed: {type(e).__name__}: {e}"[:300]
            )

    def _reread(self, ident: tuple[int, int], entry: Kept, home: SegmentHome | None) -> SegmentRead | None:
        """A read of the file kept for ``ident`` (``entry``); None when it was dropped, to be read
        afresh by its name."""
        fd, size, raw, last, want, slot = entry
        if len(raw) > HEADER_BYTES + JUDGE_BY_HEADER_BYTES:
            # A large payload is judged by its header: the same header is the same publish (a
            # writer moves seq at each), for one pread of 64 bytes rather than a copy of it all.
            first = os.pread(fd, HEADER_BYTES, 0)
            if first == raw[:HEADER_BYTES]:
                return last
        else:
            # The check of the last read's bytes is the first try of a new read too: it copies
            # them and a little more, and a new publish that fits in that costs the seqlock read
            # only its seq check (read_consistent's ``first``).
            first = os.pread(fd, want, 0)
            if first.startswith(raw):
                return last
        budget = self.budget
        uid = self._large_read_owner(fd, first)  # None without a budget
        if uid is not None and budget is not None and not budget.allows(uid):
            return last  # its user's reading time is spent: the last payload stands till its turn
        started = time.perf_counter()
        r, fresh = read_consistent(fd, ident[0], size, ident[1], READ_ATTEMPTS, slot, first, home, self.host)
        if uid is not None and budget is not None:
            budget.spend(uid, time.perf_counter() - started)
        if fresh is not None:
            self._keep(ident, fd, size, fresh, r, slot)
            return r
        if r.state in JUDGED_STATES and size > HEADER_BYTES + JUDGE_BY_HEADER_BYTES:
            self._remember_judged(ident, fd, os.pread(fd, HEADER_BYTES, 0), r)
        self._drop(ident)
        if r.error == CLOSED_ERROR:
            return r  # the writer's last publish: its name is gone (or another's) by now
        return None

    def _large_read_owner(self, fd: int, head: bytes) -> int | None:
        """The owner of the file ``fd`` when its header ``head`` announces a payload over
        JUDGE_BY_HEADER_BYTES and the follower has a ReadBudget to charge its read to; else None."""
        if self.budget is None or len(head) < HEADER_BYTES or _length(head) <= JUDGE_BY_HEADER_BYTES:
            return None
        return os.fstat(fd).st_uid

    def _put_off(self, ident: tuple[int, int], length: int, uid: int) -> SegmentRead:
        """What a read put off by the budget gives: the last verdict on a file of ``ident`` made by
        its header (corrupt, stale), else "busy", saying why (unreadable after a few polls)."""
        files = self._judged.get(ident)
        if files:
            return next(reversed(files.values()))[1]
        return SegmentRead(
            pid=ident[0], state="busy",
            error=f"a payload of {length} bytes put off: uid {uid}'s large segments had their reading time",
        )

    def read_held(self, pid: int, start_ticks: int) -> SegmentRead | None:
        """A read of the file held for (pid, start_ticks), None when none is held: what a process
        that has left the tree published last (its closed segment's final payload, read as
        "missing" with that payload). Never opens a path: the name may be another process's now."""
        if (pid, start_ticks) not in self._open:
            return None
        return self.read(pid, start_ticks)

    def _keep(self, ident: tuple[int, int], fd: int, size: int, raw: bytes, r: SegmentRead, slot: PrefixSlot) -> None:
        """Keep ``fd`` (``size``: the file's size when opened) after the good read ``r`` of the
        bytes ``raw``. The next read copies ``raw``'s length and READ_SLACK_BYTES more, never more
        than ``size``: a bound that a process growing its file cannot move."""
        self._open[ident] = (fd, size, raw, r, min(size, len(raw) + READ_SLACK_BYTES), slot)

    def _slot(self, ident: tuple[int, int]) -> PrefixSlot:
        slot = self._prefixes.get(ident)
        if slot is None:
            slot = self._prefixes[ident] = PrefixSlot()
        return slot

    def _try_fallback(self, ident: tuple[int, int], primary: SegmentRead) -> bool:
        """Whether to look for the fallback name too: always while something else holds the name;
        with nothing there (most processes run no probe) every FALLBACK_CHECK_EVERY reads, which
        halves what such a process costs a poll. A writer falls back only when its name was held at
        its start, so what this can delay is only the case of a squatter gone since."""
        if primary.state != "missing":
            return True
        n = self._missing_reads.get(ident, 0)
        self._missing_reads[ident] = n + 1
        return n % FALLBACK_CHECK_EVERY == 0

    def _random_names(self, ident: tuple[int, int], home: SegmentHome | None = None) -> list[str]:
        """The random names of ``ident`` in /dev/shm (reader.own_random_names), listed again only
        when the directory changed (a name is made or removed only by changing its mtime) or its
        last listing was made within LISTING_SETTLED_S of a change. In another process's root
        (``home``) they are listed each time: both its names squatted there is rare."""
        if home is not None:
            return own_random_names(*ident, home, host=self.host)
        if self.names is not None:
            # The monitor follows the directory's names (probe_wire/shm_index.py): no listing.
            cached = self._random.get(ident)
            key = (-1, -1, self.names.version)
            if cached is None or cached[0] != key:
                owner = process_real_uid(ident[0], host=self.host)
                suffixes = [] if owner is None else self.names.random_suffixes(*ident, owner)
                cached = self._random[ident] = (key, suffixes)
            return cached[1]
        try:
            st = os.stat(SHM_DIR)
        except OSError:
            return []
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        cached = self._random.get(ident)
        if cached is not None and cached[0] == key:
            return cached[1]
        suffixes = own_random_names(*ident, host=self.host)
        if time.time_ns() - key[2] > LISTING_SETTLED_S * 1e9:
            self._random[ident] = (key, suffixes)
        else:
            self._random.pop(ident, None)
        return suffixes

    def _open_read(
        self, ident: tuple[int, int], name_ticks: int | None, suffix: str | None = None,
        home: SegmentHome | None = None,
    ) -> SegmentRead:
        pid, start_ticks = ident
        opened = open_segment(pid, name_ticks, suffix, home, host=self.host)
        if isinstance(opened, SegmentRead):
            return opened
        fd, size = opened
        keep = False
        try:
            judged = self._judged_read(ident, fd)
            if judged is not None:
                return judged
            first = None
            uid = None
            budget = self.budget
            if budget is not None and size > HEADER_BYTES + JUDGE_BY_HEADER_BYTES:
                first = os.pread(fd, HEADER_BYTES, 0)  # the header says how long the payload is
                uid = self._large_read_owner(fd, first)
                if uid is not None and not budget.allows(uid):
                    return self._put_off(ident, _length(first), uid)
            slot = self._slot(ident)
            started = time.perf_counter()
            r, raw = read_consistent(fd, pid, size, start_ticks, READ_ATTEMPTS, slot, first, home, self.host)
            if uid is not None and budget is not None:
                budget.spend(uid, time.perf_counter() - started)
            keep = raw is not None and len(self._open) < self.max_open
            if keep and raw is not None:  # (keep: raw is there)
                self._keep(ident, fd, size, raw, r, slot)
            elif r.state in JUDGED_STATES and size > HEADER_BYTES + JUDGE_BY_HEADER_BYTES:
                # (a file that cannot hold a payload worth judging by its header costs no more pread)
                self._remember_judged(ident, fd, os.pread(fd, HEADER_BYTES, 0), r)
            return r
        finally:
            if not keep:
                os.close(fd)

    def _judged_read(self, ident: tuple[int, int], fd: int) -> SegmentRead | None:
        """The corrupt or stale read this very file gave under this very header, if any. A writer
        moves its seq on every publish, so the same header is the same publish: judged again, a
        planted 16 MiB file would cost a copy of its payload every poll; judged by its header, one
        pread. The file's size and mtime are part of it too, so a file rewritten with write() (not
        how a writer publishes) is judged again."""
        files = self._judged.get(ident)
        if not files:
            return None
        st = os.fstat(fd)
        judged = files.get((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        if judged is None or os.pread(fd, HEADER_BYTES, 0) != judged[0]:
            return None
        return judged[1]

    def _remember_judged(self, ident: tuple[int, int], fd: int, head: bytes, r: SegmentRead) -> None:
        """Keep the corrupt or stale read ``r`` of ``fd``, whose header is ``head`` now."""
        # The verdict was made under the header it names the seq of (read_consistent checks the seq
        # again after its copy): when that is the seq in ``head``, ``head`` is that header.
        if r.state not in JUDGED_STATES or len(head) < HEADER_BYTES or r.seq is None:
            return
        if r.seq != SEQ.unpack_from(head, SEQ_OFFSET)[0] or _length(head) <= JUDGE_BY_HEADER_BYTES:
            return
        try:
            st = os.fstat(fd)
        except OSError:
            return  # nothing remembered: the next poll judges the file afresh
        files = self._judged.setdefault(ident, {})
        if len(files) >= 2:  # a process has two names; more files than that are replaced ones
            files.clear()
        files[(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)] = (head, r)

    def retain(self, identities: set[tuple[int, int | None]]) -> None:
        """Close the files of every identity not in ``identities`` (processes that left the tree)."""
        # Most polls find no process gone: the subset tests say so in C, without the loops.
        if not self._open.keys() <= identities:
            for ident in [i for i in self._open if i not in identities]:
                self._drop(ident)
        if not self._missing_reads.keys() <= identities:
            for ident in [i for i in self._missing_reads if i not in identities]:
                del self._missing_reads[ident]
        if not self._prefixes.keys() <= identities:
            for ident in [i for i in self._prefixes if i not in identities]:
                del self._prefixes[ident]
        if not self._judged.keys() <= identities:
            for ident in [i for i in self._judged if i not in identities]:
                del self._judged[ident]
        if not self._random.keys() <= identities:
            for ident in [i for i in self._random if i not in identities]:
                del self._random[ident]

    def close(self) -> None:
        for ident in list(self._open):
            self._drop(ident)
        self._missing_reads.clear()
        self._prefixes.clear()
        self._judged.clear()
        self._random.clear()

    def _drop(self, ident: tuple[int, int]) -> None:
        entry = self._open.pop(ident, None)
        if entry is not None:
            try:
                os.close(entry[0])
            except OSError:
                pass


def _length(head: bytes) -> int:
    """The payload length a header claims."""
    length: int = HEADER.unpack_from(head)[7]
    return length
