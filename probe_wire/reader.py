"""The reader: ``read_segment`` and what it found (``SegmentRead``).

Everything the reader sees is untrusted input (any process of the same uid can write the file), so
``read_segment`` never raises, never reads more than the file's bounded size, and validates every
payload type against the schema before handing the payload out. /proc is ``host``'s (hostfs.paths;
the host's own by default). Standard library and msgpack only.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import zlib

from hostfs.paths import HOST, HostPaths
from hostfs.procid import pid_namespace_id, process_real_uid, process_start_ticks
from hostfs.procroot import open_in_root
from probe_wire.codec import decode_payload
from probe_wire.header import (
    FLAG_CLOSED,
    FLAG_TRIMMED,
    FORMAT_VERSION,
    HEADER,
    HEADER_BYTES,
    MAGIC,
    MAX_SEGMENT_BYTES,
    PIDNS,
    PIDNS_OFFSET,
    SEQ,
    SEQ_OFFSET,
)
from probe_wire.names import random_name_suffixes, segment_path
from probe_wire.prefix import PrefixSlot, decode_with_prefix, find_prefix
from probe_wire.schema import validate_payload

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

    from probe_wire.home import SegmentHome

    # What a read reports of its header: SegmentRead's fields after ``error``, in its order
    # (writer_pid, writer_start_ticks, published_at, trimmed, seq, writer_pidns).
    ReadHeader = tuple[int, int, float, bool, int, int]

__all__ = ["SegmentRead", "read_segment"]

# A writer finishes a publish in microseconds; a seq that stays odd this long belongs to a writer that
# is stuck or died mid-publish.
READ_ATTEMPTS = 16
_RETRY_SLEEP_S = 0.0002
# What one read may copy of payloads over its retries: a payload up to half this is retried on every
# attempt, a longer one copied at most twice (a 16 MiB file whose crc never matches costs 32 MiB,
# not READ_ATTEMPTS times 16). A writer publishes in microseconds, so a second copy of a large
# payload that is still torn is a writer that keeps publishing or lies: the next poll reads again.
PAYLOAD_COPY_BUDGET_BYTES = 1 << 20
# The error of a segment its writer closed (state "missing", its last payload kept).
CLOSED_ERROR = "the writer closed this segment"


class SegmentRead:
    """What ``read_segment`` found. ``payload`` is the validated dict when ``state == "ok"``, and
    the writer's last payload when it closed the segment (``state == "missing"``, ``error ==
    CLOSED_ERROR``); None otherwise.

    A plain slotted class rather than a dataclass: dataclasses imports inspect, which would double
    what ``import probe`` costs a training script.
    """

    __slots__ = (
        "error",
        "payload",
        "pid",
        "published_at",
        "seq",
        "state",
        "trimmed",
        "writer_pid",
        "writer_pidns",
        "writer_start_ticks",
    )

    def __init__(
        self,
        pid: int,
        state: str,
        payload: dict[str, Any] | None = None,
        error: str | None = None,
        writer_pid: int | None = None,
        writer_start_ticks: int | None = None,
        published_at: float | None = None,
        trimmed: bool = False,
        seq: int | None = None,
        writer_pidns: int | None = None,
    ) -> None:
        self.pid = pid
        self.state = state
        self.payload = payload
        self.error = error
        self.writer_pid = writer_pid
        self.writer_start_ticks = writer_start_ticks
        self.published_at = published_at
        self.trimmed = trimmed
        self.seq = seq
        self.writer_pidns = writer_pidns  # 0: a writer that did not record it

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in _READ_FIELDS)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentRead) and self._fields() == other._fields()

    # A mutable payload inside: not hashable (Python's idiom; typeshed types object.__hash__ a method).
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in _READ_FIELDS if name != "payload")
        return f"SegmentRead({inner}, payload={'{...}' if self.payload is not None else None})"


_READ_FIELDS = (
    "pid",
    "state",
    "payload",
    "error",
    "writer_pid",
    "writer_start_ticks",
    "published_at",
    "trimmed",
    "seq",
    "writer_pidns",
)


def read_segment(
    pid: int,
    expected_start_ticks: int | None = None,
    *,
    attempts: int = READ_ATTEMPTS,
    home: SegmentHome | None = None,
    host: HostPaths = HOST,
) -> SegmentRead:
    """Read and validate ``pid``'s segment. Never raises; see SegmentRead.state for the outcomes.

    ``stale``: the header's writer start_ticks differs from ``expected_start_ticks`` or, when that is
    None, from the live process's (a pid that is not running makes every segment of it stale).
    ``home``: where the segment of a process in other namespaces is (probe_wire.home.segment_home);
    None: ``/dev/shm/dsh-probe.<pid>``, written in our PID namespace. ``host``: whose /proc says
    who the process is (hostfs.paths).
    """
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return SegmentRead(pid=-1, state="missing", error=f"not a pid: {pid!r:.40}")
    try:
        return _read_segment(pid, expected_start_ticks, max(1, int(attempts)), home, host)
    except Exception as e:  # noqa: BLE001 -- the contract is "never raises"; say what went wrong instead
        return SegmentRead(pid=pid, state="corrupt", error=f"reader failed: {type(e).__name__}: {e}"[:300])


def _read_segment(
    pid: int, expected_start_ticks: int | None, attempts: int, home: SegmentHome | None, host: HostPaths
) -> SegmentRead:
    r = _read_named(pid, None, expected_start_ticks, attempts, None, home, host)
    if r.state == "ok":
        return r
    # The writer may have found its name taken and published under its fallback name.
    ticks = expected_start_ticks if expected_start_ticks is not None else process_start_ticks(pid, host=host)
    if ticks is None:
        return r
    r = better_read(r, _read_named(pid, ticks, expected_start_ticks, attempts, None, home, host))
    if r.state == "ok":
        return r
    # ... or found both taken and published under a random name.
    for suffix in own_random_names(pid, ticks, home, host=host):
        r = better_read(r, _read_named(pid, ticks, expected_start_ticks, attempts, suffix, home, host))
        if r.state == "ok":
            break
    return r


def own_random_names(
    pid: int, ticks: int, home: SegmentHome | None = None, *, host: HostPaths = HOST
) -> list[str]:
    """The random names of ``pid`` as ``ticks`` (names.random_name_suffixes) that its real user owns:
    the only ones that can be its segment."""
    owner = process_real_uid(pid, host=host)
    if owner is None:
        return []
    if home is None:
        return random_name_suffixes(pid, ticks, owner)
    try:
        fd = open_in_root(home.root, "dev/shm", os.O_RDONLY | os.O_DIRECTORY, follow_last=True)
    except OSError:
        return []
    try:
        return random_name_suffixes(home.name_pid, ticks, owner, fd)
    finally:
        os.close(fd)


def better_read(primary: SegmentRead, fallback: SegmentRead) -> SegmentRead:
    """The read to report of a process's names: a good one, else what is there at all."""
    if fallback.state == "ok" or (primary.state == "missing" and fallback.state != "missing"):
        return fallback
    return primary


def _read_named(
    pid: int,
    name_ticks: int | None,
    expected: int | None,
    attempts: int,
    suffix: str | None = None,
    home: SegmentHome | None = None,
    host: HostPaths = HOST,
) -> SegmentRead:
    opened = open_segment(pid, name_ticks, suffix, home, host=host)
    if isinstance(opened, SegmentRead):
        return opened
    fd, size = opened
    try:
        return read_consistent(fd, pid, size, expected, attempts, home=home, host=host)[0]
    finally:
        os.close(fd)


def open_segment(
    pid: int, name_ticks: int | None = None, suffix: str | None = None, home: SegmentHome | None = None,
    *, host: HostPaths = HOST,
) -> tuple[int, int] | SegmentRead:
    """(fd, size) of a segment file of ``pid`` once it is known to be a plausible one, else why not."""
    try:
        # O_NONBLOCK: a FIFO planted under our name must not hang the reader; O_NOFOLLOW: nor a link.
        if home is None:
            path = segment_path(pid, name_ticks, suffix=suffix)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        else:
            inside = segment_path(home.name_pid, name_ticks, "dev/shm", suffix)
            path = f"{home.root}/{inside}"
            fd = open_in_root(home.root, inside, os.O_RDONLY | os.O_NONBLOCK, follow_last=False)
    except FileNotFoundError:
        return SegmentRead(pid=pid, state="missing", error=f"{path} does not exist")
    except PermissionError as e:
        return _owner_mismatch(pid, path, host) or SegmentRead(
            pid=pid, state="foreign-owner", error=f"cannot open {path}: {e.strerror}"
        )
    except OSError as e:
        if e.errno == errno.ELOOP:
            return SegmentRead(pid=pid, state="corrupt", error=f"{path} is a symbolic link")
        return SegmentRead(pid=pid, state="corrupt", error=f"cannot open {path}: {e.strerror}")
    try:
        problem = _file_problem(pid, path, os.fstat(fd), host)
    except BaseException:
        os.close(fd)
        raise
    if problem is not None:
        os.close(fd)
        return problem
    return fd, os.fstat(fd).st_size


def _owner_mismatch(pid: int, path: str, host: HostPaths, st: os.stat_result | None = None) -> SegmentRead | None:
    """Only the process itself writes its segment, so the file's owner is the uid it runs as.
    Whoever reads (root included), another owner means another user wrote it: never believed. A
    process gone meanwhile has no uid to compare: its file is judged by its header alone (nothing of
    a process that is not running is shown as running)."""
    owner = process_real_uid(pid, host=host)
    if owner is None:
        return None
    if st is None:
        try:
            st = os.lstat(path)  # the file we may not open still says whose it is
        except OSError:
            return None
    if st.st_uid == owner:
        return None
    return SegmentRead(
        pid=pid,
        state="owner-mismatch",
        error=f"{path} is owned by uid {st.st_uid}, process runs as uid {owner}: ignored",
    )


def _file_problem(pid: int, path: str, st: os.stat_result, host: HostPaths) -> SegmentRead | None:
    """Why the opened file at ``path`` cannot be ``pid``'s segment, or None."""
    if not stat.S_ISREG(st.st_mode):
        return SegmentRead(pid=pid, state="corrupt", error=f"{path} is not a regular file")
    # Only the process itself writes its segment, so the file's owner is the uid it runs as.
    # Whoever reads (root included), another owner means another user wrote it: never believed.
    mismatch = _owner_mismatch(pid, path, host, st)
    if mismatch is not None:
        return mismatch
    euid = os.geteuid()
    if st.st_uid != euid and euid != 0:
        return SegmentRead(
            pid=pid, state="foreign-owner", error=f"{path} belongs to uid {st.st_uid}, we are uid {euid}"
        )
    size = st.st_size
    if size == 0:
        # A writer of an older version between shm_open (which creates an empty file) and ftruncate.
        return SegmentRead(pid=pid, state="initialising", error="segment created, not sized yet")
    if size < HEADER_BYTES or size > MAX_SEGMENT_BYTES:
        return SegmentRead(
            pid=pid, state="corrupt", error=f"size {size} outside [{HEADER_BYTES}, {MAX_SEGMENT_BYTES}] bytes"
        )
    return None


def _header_problem(magic: bytes, version: int, hsize: int, length: int, size: int) -> str | None:
    """Why a header read whole (an even seq) is not one this reader can use; None when it is."""
    if magic != MAGIC:
        return f"bad magic {magic!r}"
    if version != FORMAT_VERSION:
        return f"unsupported format version {version}"
    if hsize != HEADER_BYTES:
        return f"header size {hsize}, expected {HEADER_BYTES}"
    if length > size - HEADER_BYTES:
        return f"payload length {length} exceeds the segment's {size - HEADER_BYTES} bytes"
    if length == 0:
        return "payload length 0"
    return None


def _read_bytes(raw: bytes, data: bytes, end: int, copied: bool) -> bytes:
    """The header and payload bytes of an ok read: ``raw`` when it held the payload too."""
    return raw[:end] if copied else raw[:HEADER_BYTES] + data


def read_consistent(
    fd: int, pid: int, size: int, expected: int | None, attempts: int,
    slot: PrefixSlot | None = None, first: bytes | None = None, home: SegmentHome | None = None,
    host: HostPaths = HOST,
) -> tuple[SegmentRead, bytes | None]:
    """The read, and for an ok one the header and payload bytes it was made from. ``slot``: the
    process's payload prefix (probe_wire/prefix.py), used and kept up to date by a follower.
    ``first``: what one pread at offset 0 has just copied (a follower's check of its last read): the
    first try's copy of the header and, when they hold all of it, of the payload, in place of preads
    of their own. They were copied before the seq is read again, as the preads' would have been."""
    last = None
    copied_bytes = 0  # payload bytes copied by the tries so far
    for attempt in range(attempts):
        if attempt:
            time.sleep(_RETRY_SLEEP_S)
        raw = os.pread(fd, HEADER_BYTES, 0) if attempt or first is None else first
        if len(raw) < HEADER_BYTES:
            return (SegmentRead(pid=pid, state="corrupt", error="file shorter than the header"), None)
        magic, version, hsize, seq, wpid, flags, ticks, length, crc, published_at = HEADER.unpack_from(raw)
        wns = PIDNS.unpack_from(raw, PIDNS_OFFSET)[0]
        if seq & 1:
            last = SegmentRead(
                pid=pid, state="busy", error=f"writer mid-publish (seq {seq} odd) on every try", seq=seq
            )
            continue
        if seq == 0 and magic == b"\0" * 8:
            return (SegmentRead(pid=pid, state="initialising", error="header not written yet"), None)
        # What every read of this try reports of the header: SegmentRead's fields after ``error``, in
        # its order (positional: a dict of them spread as keywords cost a changed payload 0.6 us of 12).
        header = (wpid, ticks, published_at, bool(flags & FLAG_TRIMMED), seq, wns)
        # Header checks are only trusted once seq proves the header was not being rewritten under us.
        reason = _header_problem(magic, version, hsize, length, size)
        if reason is not None:
            if _read_seq(fd) != seq:
                continue
            return (SegmentRead(pid, "corrupt", None, reason, *header), None)
        if copied_bytes and copied_bytes + length > max(2 * length, PAYLOAD_COPY_BUDGET_BYTES):
            break  # see PAYLOAD_COPY_BUDGET_BYTES: ``last`` says why the copies so far failed
        copied_bytes += length
        end = HEADER_BYTES + length
        copied = len(raw) >= end  # the payload came with the header (in ``first``)
        data = raw[HEADER_BYTES:end] if copied else os.pread(fd, length, HEADER_BYTES)
        if _read_seq(fd) != seq:
            last = SegmentRead(pid, "busy", None, "writer kept publishing during every try", *header)
            continue
        if len(data) != length:
            return (SegmentRead(pid, "corrupt", None, "file shorter than the payload length", *header), None)
        if zlib.crc32(data) != crc:
            # Retried once more before condemning it: on weakly ordered CPUs a torn copy can get past
            # the seq check, and the next try sees the writer's finished state.
            last = SegmentRead(pid, "corrupt", None, "payload crc32 mismatch", *header)
            continue
        r = _finish(data, expected, pid, header, slot, home, host)
        if flags & FLAG_CLOSED:
            # The writer's last publish, made as it exited: the segment is gone ("missing"), and a
            # reader that still held the file learns the final facts (never kept to follow).
            return SegmentRead(pid, "missing", r.payload, CLOSED_ERROR, *header), None
        return r, (_read_bytes(raw, data, end, copied) if r.state == "ok" else None)
    return (
        last if last is not None else SegmentRead(pid=pid, state="busy", error="no consistent read")
    ), None


def _read_seq(fd: int) -> int:
    raw = os.pread(fd, SEQ.size, SEQ_OFFSET)
    return SEQ.unpack(raw)[0] if len(raw) == SEQ.size else -1


def _identity_problem(
    pid: int, expected: int | None, header: ReadHeader, home: SegmentHome | None, host: HostPaths
) -> SegmentRead | None:
    """Why the header's writer is not ``pid`` as ``expected`` (None: the live process's start
    ticks), or None. ``header``: SegmentRead's fields after ``error``, as read_consistent found them.
    With ``home``, the writer is named by its pid in its own namespace, which is ``home``'s."""
    wpid, ticks, _, _, _, wns = header
    if wpid != (pid if home is None else home.name_pid) & 0xFFFFFFFF:
        return SegmentRead(pid, "corrupt", None, f"header names writer pid {wpid}", *header)
    ours = pid_namespace_id(host=host) if home is None else home.pidns
    if wns and ours and wns != ours:
        # Its pid is a pid of that namespace: whatever runs under that number here, it is not this.
        return SegmentRead(pid, "stale", None, f"written in another PID namespace ({wns:#x})", *header)
    if expected is None:
        live = process_start_ticks(pid, host=host)
        if live is None:
            return SegmentRead(pid, "stale", None, f"process {pid} is not running", *header)
        if ticks != live:
            return SegmentRead(
                pid, "stale", None, f"writer start_ticks {ticks} != live process's {live} (pid reused)", *header
            )
    elif ticks != expected:
        return SegmentRead(pid, "stale", None, f"writer start_ticks {ticks} != expected {expected}", *header)
    return None


def _finish(
    data: bytes, expected: int | None, pid: int, header: ReadHeader, slot: PrefixSlot | None = None,
    home: SegmentHome | None = None, host: HostPaths = HOST,
) -> SegmentRead:
    """The read of ``data``, a consistent copy of ``pid``'s payload; ``header``: what read_consistent
    found in the header (SegmentRead's fields after ``error``)."""
    problem = _identity_problem(pid, expected, header, home, host)
    if problem is not None:
        return problem
    ticks = header[1]
    payload = decode_with_prefix(slot.prefix, data) if slot is not None and slot.prefix is not None else None
    if payload is None:
        try:
            obj = decode_payload(data)
        except Exception as e:  # noqa: BLE001 -- msgpack raises several unrelated types on bad input
            return SegmentRead(pid, "corrupt", None, f"bad msgpack: {type(e).__name__}: {e}"[:300], *header)
        payload, reason = validate_payload(obj)
        if payload is None:
            return SegmentRead(pid, "corrupt", None, reason, *header)
        if slot is not None:
            slot.prefix = find_prefix(data, obj, payload)
    if payload["pid"] != (pid if home is None else home.name_pid):
        return SegmentRead(pid, "corrupt", None, f"payload.pid {payload['pid']} in segment of {pid}", *header)
    if payload["start_ticks"] is not None and payload["start_ticks"] != ticks:
        return SegmentRead(pid, "corrupt", None, "payload.start_ticks differs from the header's", *header)
    return SegmentRead(pid, "ok", payload, None, *header)
