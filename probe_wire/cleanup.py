"""Whose a segment is: a live process's own (``has_live_segment``); removing a writer's own
(``remove_segment``) and those of writers provably dead (``remove_if_dead``, ``sweep_dead_segments``),
never a live process's nor another PID namespace's. Each reads the /proc of ``host`` (the host's
own by default: hostfs.paths)."""

from __future__ import annotations

import os
import time

from hostfs.paths import HOST, HostPaths
from hostfs.procid import (
    ZOMBIE_STATES,
    pid_namespace_id,
    proc_is_ours,
    process_identity,
    process_real_uid,
    process_state,
)
from probe_wire.header import FLAG_CLOSED, FLAGS, FLAGS_OFFSET, header_identity, read_header
from probe_wire.names import MAX_LISTED_NAMES, SCRATCH_RE, SHM_DIR, random_name_suffixes, scan, segment_path

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["FINAL_SPARED_S", "has_live_segment", "remove_if_dead", "remove_segment", "sweep_dead_segments"]

# How long a probe's start sweep leaves a closed final publish (the probe keeps one when its process
# exits, for a monitor's next poll: writer.close(keep_final=True)) to the monitors: a sibling rank
# that ended a moment before this process started its probe left its job's final state, which a
# sidecar's next poll (or `--once` run after the ranks ended) still has to read. Older ones are
# leftovers nobody read: swept as any dead writer's.
FINAL_SPARED_S = 600.0
_CLOCK_SKEW_S = 60.0  # a file modified this far in the future is not taken for recent


def has_live_segment(pid: int, shm_dir: str = SHM_DIR, *, host: HostPaths = HOST) -> bool:
    """Whether the running process ``pid`` has a segment of its own under one of its names: a
    regular file owned by its real uid (only the process writes its segment) whose header names it,
    pid and start_ticks, and our PID namespace when the header records one. A name alone proves
    nothing: another user's file planted under it, a leftover of a dead writer that had the pid
    before, another namespace's segment are not its. Never raises."""
    try:
        ident = process_identity(pid, host=host)
        uid = process_real_uid(pid, host=host)
        if ident is None or uid is None:
            return False
        ns = pid_namespace_id(host=host)
        # Its own name, then the fallback it takes when squatted, then the random names it takes
        # when both are (one listing of shm_dir, only for a process whose two names hold nothing of it).
        paths = [segment_path(pid, None, shm_dir), segment_path(pid, ident[1], shm_dir)]
        for i, path in enumerate(paths):
            head = header_identity(path)
            if head is not None:
                wpid, ticks, wns, st = head
                names_it = wpid == int(pid) & 0xFFFFFFFF and ticks == ident[1] and (not wns or wns == ns)
                if names_it and st.st_uid == uid:
                    return True
            if i == 1:
                own = random_name_suffixes(pid, ident[1], uid, shm_dir)
                paths += [segment_path(pid, ident[1], shm_dir, suffix) for suffix in own]
        return False
    except Exception:  # noqa: BLE001 -- asked from inside a training process: never raise into it
        return False


def remove_segment(pid: int, expected_start_ticks: int | None = None) -> bool:
    """Unlink ``pid``'s segment (the ``dsh-probe.<pid>`` name); True when a file was removed. Never
    raises. What a process does with its own segment, and tests with theirs: a monitor that cleans
    up after others uses ``remove_if_dead``.

    With ``expected_start_ticks`` the file is removed only if its header names that writer, so a
    cleaner racing a new process that got the same pid does not delete the newcomer's segment.
    """
    path = segment_path(pid)
    if expected_start_ticks is not None:
        head = header_identity(path)
        if head is None or head[1] != expected_start_ticks:
            return False
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _writer_dead(pid: int, start_ticks: int, host: HostPaths) -> bool:
    """Provably dead in our PID namespace: no such pid, a zombie, or the pid is another process now.
    A pid whose /proc entry exists but cannot be read (hidepid) proves nothing."""
    try:
        os.stat(host.proc_path(int(pid)))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if process_state(pid, host=host) in ZOMBIE_STATES:
        return True
    ident = process_identity(pid, host=host)
    return ident is not None and ident[1] != start_ticks


def remove_if_dead(
    pid: int,
    start_ticks: int | None = None,
    *,
    our_pidns: int | None = None,
    owner_uid: int | None = None,
    shm_dir: str = SHM_DIR,
    suffix: str | None = None,
    spare_finals_s: float = 0.0,
    host: HostPaths = HOST,
) -> bool:
    """Unlink the segment ``dsh-probe.<pid>`` (with ``start_ticks``: its fallback name; with
    ``suffix`` too: its random name) only if its writer is provably dead in our own PID namespace;
    True when removed. Never raises.

    Provably dead: our /proc shows our namespace, the header names ``pid`` and the same PID
    namespace as ours (a segment of another namespace, or of a writer too old to record it, is never
    removed: "not visible here" is not "dead"), and that writer no longer runs (_writer_dead). The
    name is unlinked only while it still is the very file judged, so a newcomer's is never removed.
    ``spare_finals_s``: a closed final publish younger than this is left (``_recent_final``)."""
    try:
        ns = pid_namespace_id(host=host) if our_pidns is None else our_pidns
        if not ns or not proc_is_ours(host=host):
            return False
        path = segment_path(pid, start_ticks, shm_dir, suffix if start_ticks is not None else None)
        head = header_identity(path)
        if head is None:
            return False
        wpid, ticks, wns, st = head
        if owner_uid is not None and st.st_uid != owner_uid:
            return False
        if wns != ns or wpid != int(pid) & 0xFFFFFFFF or (start_ticks is not None and ticks != start_ticks):
            return False
        if not _writer_dead(pid, ticks, host):
            return False
        if spare_finals_s > 0 and _recent_final(path, spare_finals_s, time.time()):
            return False  # a final publish a monitor has yet to read (FINAL_SPARED_S)
        return _unlink_if_same(path, st)
    except Exception:  # noqa: BLE001 -- a cleaner must never fail its caller's poll
        return False


def _unlink_if_same(path: str, st: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False


def _live_writers_name(
    pid: int, ticks: int | None, skip: Collection[int] | dict[int, int | None], listed: set[tuple[int, int | None]]
) -> bool:
    """Whether the name (pid, ticks of a fallback or random name or None) may be the live writer's
    that ``skip`` names for ``pid``, without reading it: its fallback and random names; its own name
    unless one of those is there too (a writer takes them only when its own name was taken).
    ``listed``: the (pid, ticks) of every name listed."""
    live = skip.get(pid) if isinstance(skip, dict) else None
    if live is None:
        return True  # which writer lives is not known: every name of the pid may be its
    return ticks == live if ticks is not None else (pid, live) not in listed


def _recent_final(path: str, spare_s: float, now: float) -> bool:
    """Whether the file at ``path`` is a closed segment (FLAG_CLOSED) whose last change, by the
    kernel's clock, is less than ``spare_s`` old. Never follows a link, never blocks, never raises."""
    read = read_header(path)
    if read is None:
        return False
    raw, st = read
    (flags,) = FLAGS.unpack_from(raw, FLAGS_OFFSET)
    return bool(flags & FLAG_CLOSED) and -_CLOCK_SKEW_S <= now - st.st_mtime < spare_s


def sweep_dead_segments(
    skip: Collection[int] | dict[int, int | None] = frozenset(),
    shm_dir: str = SHM_DIR,
    owner_uid: int | None = None,
    names: tuple[list[tuple[int, int | None, str | None]], list[str]] | None = None,
    *,
    spare_finals_s: float = 0.0,
    host: HostPaths = HOST,
) -> list[int]:
    """``remove_if_dead`` over every segment name in ``shm_dir`` but those ``skip`` leaves out, and
    over the writers' scratch files (``SCRATCH_RE``) left by a writer killed while creating its
    segment; the pids whose files went. With ``owner_uid``, only files of that owner. Never raises.

    ``skip``: pids whose names are all left out, or a dict of live writers' pids to their
    start_ticks (None: not known), whose names are left out only where that writer may hold them
    (_live_writers_name): a dead writer that had the pid before may have left the other one.
    ``names``: the (segment names, scratch names) to judge, every name of each pid among them, in
    place of a listing of ``shm_dir`` (a monitor that follows the directory's names sweeps a part of
    them at a time: probe_wire/shm_index.py). ``spare_finals_s``: closed final publishes younger
    than this are left (a probe's start sweep: FINAL_SPARED_S)."""
    removed: list[int] = []
    try:
        ns = pid_namespace_id(host=host)
        if not ns or not proc_is_ours(host=host):
            return removed
        segments, scratch = scan(shm_dir, MAX_LISTED_NAMES) if names is None else names
        listed = {(pid, ticks) for pid, ticks, _ in segments}
        for pid, ticks, suffix in segments:
            if pid in skip and _live_writers_name(pid, ticks, skip, listed):
                continue
            # The name as listed in shm_dir: judged and removed there, not under SHM_DIR.
            if remove_if_dead(
                pid,
                ticks,
                our_pidns=ns,
                owner_uid=owner_uid,
                shm_dir=shm_dir,
                suffix=suffix,
                spare_finals_s=spare_finals_s,
                host=host,
            ):
                removed.append(pid)
        for name in scratch:
            m = SCRATCH_RE.match(name)
            if m and int(m.group(1)) == ns and _writer_dead(int(m.group(2)), int(m.group(3)), host):
                try:
                    if owner_uid is not None and os.lstat(os.path.join(shm_dir, name)).st_uid != owner_uid:
                        continue
                    os.unlink(os.path.join(shm_dir, name))
                    removed.append(int(m.group(2)))
                except OSError:
                    pass
    except Exception:  # noqa: BLE001 -- a cleaner must never fail its caller's poll
        pass
    return removed
