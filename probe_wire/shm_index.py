"""The segment names of /dev/shm for a monitor that looks at them every poll: ``NameIndex``, kept up
to date from the kernel's inotify events instead of a listing of the directory at every change.

A listing costs about half a microsecond per name the directory holds, whoever made the names:
100,000 names another user planted cost every listing 45 ms, and that user moves the directory's
mtime (which said when to list again) as often as they like. From the events, a refresh costs what
changed since the last one; the directory is listed whole only when the index is made, and again
only when the kernel dropped events (its queue was full), then at most SCAN_NAMES_PER_REFRESH names a
refresh. Without inotify (another kernel, a user out of watches) it lists the directory whenever its
mtime moved, as the monitor did before.

What it keeps is bounded: MAX_NAMES_PER_PID names of one pid and MAX_LISTED_NAMES in all; past those
a name is kept only when it is the running process's own (a regular file of its real uid, under its
start ticks or none, as the /proc of its ``host`` says: hostfs.paths), up to as many again, so that
another user's names under a pid never take the place of its process's. The names not kept are counted per pid (``crowded``). Linux and the standard
library only (ctypes for inotify). Not thread-safe: one poller owns it.
"""

from __future__ import annotations

import bisect
import os
import stat
import struct
import time

from hostfs.paths import HOST, HostPaths
from hostfs.procid import process_identity, process_real_uid
from probe_wire.names import (
    LISTING_SETTLED_S,
    MAX_LISTED_NAMES,
    MAX_OWN_RANDOM_NAMES,
    SCRATCH_RE,
    SHM_DIR,
    parse_name,
)

__all__ = ["NameIndex"]

# Names of one pid kept (a writer makes at most three: its own, its fallback, one random name).
MAX_NAMES_PER_PID = 64
# Entries of the directory one refresh reads while it lists the directory again (after the kernel
# dropped events): about 1 ms here.
SCAN_NAMES_PER_REFRESH = 2048
# inotify(7): IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE; the directory itself deleted or
# moved, the watch gone, the queue overflowed; watch only a directory.
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
IN_ONLYDIR = 0x01000000
_WATCHED = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
_LOST = IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
# Bytes of events one refresh reads at most: about the kernel's default queue (16,384 events of
# ~40 bytes); the rest waits for the next refresh (or overflows the queue: a listing then).
EVENTS_PER_REFRESH_BYTES = 1 << 20


class _Kept:
    """A kept name: its start ticks and random suffix (None where the name has none), the listing
    generation that saw it last, and whether it is its running process's own (None: not asked)."""

    __slots__ = ("gen", "own", "suffix", "ticks")

    def __init__(self, ticks: int | None, suffix: str | None, gen: int, own: bool | None) -> None:
        self.ticks = ticks
        self.suffix = suffix
        self.gen = gen
        self.own = own


def _watch(path: str) -> int | None:
    """A non-blocking inotify descriptor watching the names of the directory ``path``; None where
    there is none to be had (not Linux, no libc, the user's limit on instances or watches)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd: int = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError, ImportError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(path), _WATCHED) < 0:
        os.close(fd)
        return None
    return fd


def _dir_key(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


class NameIndex:
    """The segment and scratch names of ``shm_dir`` (see the module's docstring). ``refresh()`` once
    a poll; ``version`` moves whenever a kept name comes or goes; ``take_changed()`` says the pids
    whose kept names changed since it was last asked."""

    def __init__(
        self,
        shm_dir: str = SHM_DIR,
        *,
        max_names: int = MAX_LISTED_NAMES,
        names_per_pid: int = MAX_NAMES_PER_PID,
        scan_per_refresh: int = SCAN_NAMES_PER_REFRESH,
        watch: bool = True,
        host: HostPaths = HOST,
    ) -> None:
        self.shm_dir = shm_dir
        self.host = host
        self.max_names = max_names
        self.names_per_pid = names_per_pid
        self.scan_per_refresh = scan_per_refresh
        self._pids: dict[int, dict[str, _Kept]] = {}  # pid -> {file name: what is kept of it}
        self._scratch: dict[str, int] = {}  # scratch file name -> generation
        self._count = 0  # names kept in _pids
        self.crowded: dict[int, int] = {}  # pid -> its names seen and not kept
        self.version = 0
        self._changed: set[int] = set()
        # A listing: each name it sees is marked with its generation; what it did not see when it
        # ends is gone. Names removed while it runs are not taken from what it read before.
        self._gen = 0
        self._scan: os._ScandirIterator[str] | None = None
        self._scan_gone: set[str] = set()
        self._listings = 0  # begun so far
        # pid -> (start ticks, real uid) of its process, or None: read once a refresh (_own)
        self._procs: dict[int, tuple[int, int] | None] = {}
        self._fd = _watch(shm_dir) if watch else None
        self._watched = _dir_key(shm_dir)
        self._listed_key: tuple[int, int, int] | None = None  # (without inotify) as the last listing saw it
        self._list_whole()  # the first listing: what the directory holds now

    @property
    def watching(self) -> bool:
        """Whether the index follows the kernel's events (else it lists when the mtime moved)."""
        return self._fd is not None

    def __len__(self) -> int:
        return self._count

    def __contains__(self, pid: object) -> bool:
        """Whether some name of ``pid`` is kept."""
        return pid in self._pids

    def close(self) -> None:
        self._close_scan()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- keeping up ------------------------------------------------------------------------------
    def refresh(self, relist: bool = False) -> None:
        """What changed since the last refresh. ``relist``: without inotify, list even when the
        directory's mtime did not move (with it, check that the watched directory is still the one
        at ``shm_dir``: one stat)."""
        self._procs.clear()
        if self._fd is None:
            if relist or self._listed_key is None or _dir_key(self.shm_dir) != self._listed_key:
                self._list_whole()
            return
        lost = self._read_events(self._fd)
        if relist and (_dir_key(self.shm_dir) or (0, 0))[:2] != (self._watched or (0, 0))[:2]:
            lost = True  # another directory at the path now (a new mount): watch it instead
        if lost:
            self._rewatch()
            self._begin_scan()
        if self._scan is not None:
            self._continue_scan(self.scan_per_refresh)

    def _list_whole(self) -> None:
        """Lists the directory to its end. Without inotify, remembers the directory as it was: a
        name is made, removed or renamed there only by changing its mtime, but a listing made while
        the mtime was younger than LISTING_SETTLED_S is not trusted (two changes within one tick of
        the kernel's coarse clock leave one mtime)."""
        key = _dir_key(self.shm_dir)
        self._begin_scan()
        self._continue_scan(None)
        settled = key is not None and time.time_ns() - key[2] > LISTING_SETTLED_S * 1e9
        self._listed_key = key if settled else None

    def _rewatch(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = _watch(self.shm_dir)
        self._watched = _dir_key(self.shm_dir)

    def _read_events(self, fd: int) -> bool:
        """Applies the events queued since the last refresh; True when some were lost (the kernel's
        queue overflowed, the directory went): the directory must be listed again."""
        lost = False
        budget = EVENTS_PER_REFRESH_BYTES
        while budget > 0:
            try:
                buf = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                return True
            if not buf:
                break
            budget -= len(buf)
            at, end = 0, len(buf)
            while at + _EVENT.size <= end:
                mask, n = _EVENT.unpack_from(buf, at)[1::2]
                raw = buf[at + _EVENT.size : at + _EVENT.size + n]
                at += _EVENT.size + n
                if mask & _LOST:
                    lost = True
                    continue
                name = os.fsdecode(raw.rstrip(b"\0"))
                if not name.startswith("dsh-probe"):
                    continue  # most of the directory's traffic: not ours
                if mask & (IN_CREATE | IN_MOVED_TO):
                    self._scan_gone.discard(name)
                    self._appeared(name)
                else:
                    if self._scan is not None and len(self._scan_gone) < self.max_names:
                        self._scan_gone.add(name)
                    self._gone(name)
        return lost

    def _appeared(self, name: str) -> None:
        parsed = parse_name(name)
        if parsed is None:
            if SCRATCH_RE.match(name) and (name in self._scratch or len(self._scratch) < self.max_names):
                self._scratch[name] = self._gen
            return
        pid, ticks, suffix = parsed
        names = self._pids.get(pid)
        if names is not None and name in names:
            names[name].gen = self._gen
            if self._listings > 1:
                # Listed again: events were lost, or none are followed. Its file may have been
                # replaced under the same name since it was last looked at: it counts as changed.
                self._changed.add(pid)
            return
        kept = 0 if names is None else len(names)
        own = None
        if kept >= self.names_per_pid or self._count >= self.max_names:
            # Full: only the running process's own name, up to as many again.
            own = self._own(pid, ticks, name)
            if not own or kept >= 2 * self.names_per_pid or self._count >= 2 * self.max_names:
                self.crowded[pid] = self.crowded.get(pid, 0) + 1
                return
        if names is None:
            names = self._pids[pid] = {}
        names[name] = _Kept(ticks, suffix, self._gen, own)
        self._count += 1
        self._moved(pid)

    def _gone(self, name: str) -> None:
        parsed = parse_name(name)
        if parsed is None:
            self._scratch.pop(name, None)
            return
        pid = parsed[0]
        names = self._pids.get(pid)
        if names is not None and names.pop(name, None) is not None:
            self._count -= 1
            if not names:
                del self._pids[pid]
            self._moved(pid)
        elif self.crowded.get(pid):
            self.crowded[pid] -= 1
            if not self.crowded[pid]:
                del self.crowded[pid]

    def _moved(self, pid: int) -> None:
        self.version += 1
        self._changed.add(pid)

    def _own(self, pid: int, ticks: int | None, name: str) -> bool:
        """Whether the file ``name`` may be the running process ``pid``'s own segment: under its
        start ticks (or none), a regular file of its real uid (only the process writes its own)."""
        if pid in self._procs:
            proc = self._procs[pid]
        else:
            ident, uid = process_identity(pid, host=self.host), process_real_uid(pid, host=self.host)
            proc = self._procs[pid] = None if ident is None or uid is None else (ident[1], uid)
        if proc is None or (ticks is not None and ticks != proc[0]):
            return False
        try:
            st = os.lstat(os.path.join(self.shm_dir, name))
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_uid == proc[1]

    # -- listing ---------------------------------------------------------------------------------
    def _begin_scan(self) -> None:
        self._close_scan()
        self._gen += 1
        self._listings += 1
        self._scan_gone = set()
        self.crowded = {}  # counted again by this listing
        try:
            self._scan = os.scandir(self.shm_dir)
        except OSError:
            self._scan = None
            self._end_scan()  # no directory: nothing in it

    def _continue_scan(self, most: int | None) -> None:
        """Reads on in the listing, ``most`` entries at most (None: to its end)."""
        n = 0
        scan = self._scan
        assert scan is not None  # the callers ask only while a listing is open
        try:
            for entry in scan:
                name = entry.name
                if name.startswith("dsh-probe") and name not in self._scan_gone:
                    self._appeared(name)
                n += 1
                if most is not None and n >= most:
                    return
        except OSError:
            pass
        self._close_scan()
        self._end_scan()

    def _end_scan(self) -> None:
        """The listing is whole: the names it did not see (nor an event since it began) are gone."""
        gen = self._gen
        for pid in [p for p, names in self._pids.items() if any(v.gen != gen for v in names.values())]:
            names = self._pids[pid]
            for name in [n for n, v in names.items() if v.gen != gen]:
                del names[name]
                self._count -= 1
            if not names:
                del self._pids[pid]
            self._moved(pid)
        self._scratch = {n: g for n, g in self._scratch.items() if g == gen}
        self._scan_gone = set()

    def _close_scan(self) -> None:
        if self._scan is not None:
            self._scan.close()
            self._scan = None

    # -- what it says ----------------------------------------------------------------------------
    def take_changed(self) -> set[int]:
        """The pids whose kept names came or went since the last call."""
        changed, self._changed = self._changed, set()
        return changed

    def pids(self) -> list[int]:
        return list(self._pids)

    def names_of(self, pid: int) -> list[tuple[int | None, str | None]]:
        """(start ticks or None, random suffix or None) of each kept name of ``pid``: its own name
        first, then its fallback names, then its random names."""
        names = self._pids.get(pid)
        if not names:
            return []
        return sorted(((v.ticks, v.suffix) for v in names.values()), key=_name_order)

    def names(self) -> list[tuple[int, int | None, str | None]]:
        """(pid, start ticks or None, random suffix or None) of every kept segment name, sorted as
        names.list_segment_files sorts them."""
        return [(pid, t, s) for pid in sorted(self._pids) for t, s in self.names_of(pid)]

    def scratch_names(self) -> list[str]:
        return list(self._scratch)

    def scratch_after(self, name: str, most: int) -> list[str]:
        """At most ``most`` scratch names after ``name`` (in name order, from the first again past
        the last): a sweep's part of them."""
        names = sorted(self._scratch)
        start = bisect.bisect_right(names, name) % max(1, len(names))
        return (names[start:] + names[:start])[:most]

    def names_after(self, pid: int, most: int) -> tuple[list[tuple[int, int | None, str | None]], int]:
        """Every kept name of the pids after ``pid`` (in pid order, from the first again past the
        last) until at least ``most`` names, or all; and the last pid taken (-1 when none): a
        sweep's part of the names, the next one's from there."""
        pids = sorted(self._pids)
        start = bisect.bisect_right(pids, pid) % max(1, len(pids))
        out: list[tuple[int, int | None, str | None]] = []
        last = -1
        for p in pids[start:] + pids[:start]:
            if len(out) >= most:
                break
            out.extend((p, t, s) for t, s in self.names_of(p))
            last = p
        return out, last

    def random_suffixes(self, pid: int, start_ticks: int, owner_uid: int) -> list[str]:
        """The suffixes of ``pid``'s random names under ``start_ticks`` whose file is a regular file
        of ``owner_uid``, at most MAX_OWN_RANDOM_NAMES (as names.random_name_suffixes finds them, from
        the kept names: one lstat each)."""
        found: list[str] = []
        for ticks, suffix in self.names_of(pid):
            if ticks != start_ticks or suffix is None:
                continue
            try:
                st = os.lstat(os.path.join(self.shm_dir, f"dsh-probe.{pid}.{ticks}.{suffix}"))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_uid == owner_uid:
                found.append(suffix)
                if len(found) >= MAX_OWN_RANDOM_NAMES:
                    break
        return found


def _name_order(name: tuple[int | None, str | None]) -> tuple[int, str]:
    ticks, suffix = name
    return (-1 if ticks is None else ticks, suffix or "")
