"""The probe's shared-memory wire format: the only module that defines it (docs/design.md).

One POSIX shared-memory segment per process, ``/dsh-probe.<pid>`` (``/dev/shm/dsh-probe.<pid>`` on
Linux), mode 0600, fixed size. A 64-byte little-endian header guarded by a seqlock, then a msgpack
payload. The sidecar imports the reader half of this module, so it must stay importable without
torch, without posix_ipc and without the rest of ``probe``: standard library and msgpack only.

Writer protocol (one writer per segment, the owning process): seq+1 (odd), payload bytes, header
fields, seq+1 (even). Reader protocol: read the header, retry while seq is odd, copy the payload,
re-read seq and retry if it moved, then verify length bounds and crc32. The crc is what makes the
reader safe on weakly ordered CPUs too, where Python gives no memory barriers: a torn copy that
slipped past the seq check fails the crc and is retried, never accepted.

Everything the reader sees is untrusted input (any process of the same uid can write the file), so
``read_segment`` never raises, never reads more than the file's bounded size, and validates every
payload type against the schema before handing the payload out.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import re
import stat
import struct
import time
import zlib

import msgpack

from probe.procid import (
    ZOMBIE_STATES,
    pid_namespace_id,
    proc_is_ours,
    process_identity,
    process_real_uid,
    process_state,
)

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "FLAG_CLOSED",
    "FLAG_TRIMMED",
    "FORMAT_VERSION",
    "HEADER",
    "HEADER_BYTES",
    "MAGIC",
    "MAX_SEGMENT_BYTES",
    "MIN_SEGMENT_BYTES",
    "ROLES",
    "SCHEMA",
    "SHM_DIR",
    "SegmentError",
    "SegmentFollower",
    "SegmentRead",
    "SegmentWriter",
    "empty_payload",
    "encode_payload",
    "list_segment_pids",
    "list_segments",
    "process_identity",
    "process_start_ticks",
    "read_segment",
    "remove_if_dead",
    "remove_segment",
    "segment_name",
    "segment_path",
    "sweep_dead_segments",
    "validate_payload",
]

MAGIC = b"DSHPRB\x00\x01"
FORMAT_VERSION = 1
SCHEMA = 1
# magic, version, header size, seq, writer pid, flags, writer start_ticks, payload length,
# payload crc32, published_at, writer PID namespace: offsets 0, 8, 12, 16, 24, 28, 32, 40, 44, 48, 56.
# HEADER leaves the last 8 bytes out (they were reserved and zero before the namespace went there, so
# a header packed with HEADER is that of a writer that did not record it: still read, never swept).
HEADER = struct.Struct("<8sIIQIIQIId8x")
HEADER_BYTES = HEADER.size  # 64
_SEQ = struct.Struct("<Q")
_SEQ_OFFSET = 16
_PREFIX = struct.Struct("<8sII")  # magic, version, header size (offset 0)
_FIELDS = struct.Struct("<IIQIId")  # pid, flags, start_ticks, length, crc, published_at (offset 24)
_FIELDS_OFFSET = 24
# Written once at creation (probe.procid.pid_namespace_id; 0: unknown), never under the seqlock.
_PIDNS = struct.Struct("<Q")
_PIDNS_OFFSET = 56
_FLAGS = struct.Struct("<I")
_FLAGS_OFFSET = 28
FLAG_TRIMMED = 1
# Set (under the seqlock) by a writer that is closing for good: a reader that keeps the file open
# learns that this file is finished, even if the same process later creates a new one by the name.
FLAG_CLOSED = 2
# ``where`` of the one error a fallback payload carries when the probe's payload could not be
# published: the sidecar reports it (probe-error) instead of the facts it no longer has.
PUBLISH_FAILED = "publish-failed"
# ``where`` of the error recorded when a registered model was garbage-collected (its message: the
# model's name): the sidecar says so instead of "no model is registered yet".
MODEL_COLLECTED = "model-collected"

DEFAULT_SEGMENT_BYTES = 64 * 1024
MIN_SEGMENT_BYTES = 4 * 1024
# The reader refuses bigger files: it is the bound on what one read may allocate.
MAX_SEGMENT_BYTES = 16 * 1024 * 1024

SHM_DIR = "/dev/shm"
_NAME_PREFIX = "dsh-probe."
# dsh-probe.<pid>, or the fallback dsh-probe.<pid>.<start_ticks> of a writer whose name was taken.
_NAME_RE = re.compile(r"^dsh-probe\.([1-9][0-9]{0,9})(?:\.(0|[1-9][0-9]{0,19}))?$")
# A writer builds its segment under a scratch name that says whose it is (PID namespace, pid,
# start_ticks), then links it to its public name: the public name never shows a half-made file, and
# the scratch file of a writer killed meanwhile can be judged by its name alone.
_SCRATCH_PREFIX = "dsh-probe-new."
_SCRATCH_RE = re.compile(r"^dsh-probe-new\.([0-9]{1,20})\.([1-9][0-9]{0,9})\.([0-9]{1,20})\.[0-9a-f]{8}$")

ROLES = ("main", "dataloader-worker", "rank", "child")
# foreign-owner: this reader may not read the file (another uid's, and we are not root);
# owner-mismatch: the file's owner is not the uid the process runs as, so that process did not write it.
STATES = ("ok", "missing", "initialising", "busy", "corrupt", "stale", "foreign-owner", "owner-mismatch")

# A writer finishes a publish in microseconds; a seq that stays odd this long belongs to a writer that
# is stuck or died mid-publish.
_READ_ATTEMPTS = 16
# A follower looks for the fallback name of a process whose own name is free every this many reads.
FALLBACK_CHECK_EVERY = 8
_RETRY_SLEEP_S = 0.0002


class SegmentError(OSError):
    """The writer could not create or write its segment (no posix_ipc, no /dev/shm, ENOSPC, ...)."""


def segment_name(pid: int, start_ticks: int | None = None) -> str:
    """POSIX shared-memory name of ``pid``'s segment: ``/dsh-probe.<pid>``; with ``start_ticks``, the
    fallback name ``/dsh-probe.<pid>.<start_ticks>`` a writer takes when the first is taken."""
    return "/" + _file_name(pid, start_ticks)


def segment_path(pid: int, start_ticks: int | None = None) -> str:
    """File backing ``pid``'s segment on Linux: ``/dev/shm/dsh-probe.<pid>[.<start_ticks>]``."""
    return os.path.join(SHM_DIR, _file_name(pid, start_ticks))


def _file_name(pid: int, start_ticks: int | None) -> str:
    base = f"{_NAME_PREFIX}{int(pid)}"
    return base if start_ticks is None else f"{base}.{int(start_ticks)}"


def process_start_ticks(pid: int) -> int | None:
    """Start time of a running ``pid`` in clock ticks since boot (probe.procid.process_identity);
    None when it is gone or a zombie."""
    ident = process_identity(pid)
    return None if ident is None else ident[1]


def list_segments(shm_dir: str = SHM_DIR, max_names: int = 1 << 16) -> list[tuple[int, int | None]]:
    """(pid, start_ticks of a fallback name or None) of each ``dsh-probe.*`` name in ``shm_dir``,
    sorted; [] when it is unreadable."""
    return _scan(shm_dir, max_names)[0]


def _scan(shm_dir: str, max_names: int) -> tuple[list[tuple[int, int | None]], list[str]]:
    """Segment names and scratch names in ``shm_dir``: at most ``max_names`` of each, so that a
    directory flooded with names costs a sweep bounded time and memory."""
    names: list[tuple[int, int | None]] = []
    scratch: list[str] = []
    try:
        with os.scandir(shm_dir) as entries:
            for entry in entries:
                name = entry.name
                if not name.startswith("dsh-probe"):
                    continue
                m = _NAME_RE.match(name)
                if m and len(names) < max_names:
                    names.append((int(m.group(1)), None if m.group(2) is None else int(m.group(2))))
                elif name.startswith(_SCRATCH_PREFIX) and len(scratch) < max_names:
                    scratch.append(name)
                if len(names) >= max_names and len(scratch) >= max_names:
                    break
    except OSError:
        return [], []
    names.sort(key=lambda n: (n[0], -1 if n[1] is None else n[1]))
    return names, scratch


def list_segment_pids(shm_dir: str = SHM_DIR) -> list[int]:
    """Pids that have a ``dsh-probe.<pid>`` (or fallback) file in ``shm_dir``, sorted."""
    return sorted({pid for pid, _ in list_segments(shm_dir)})


def remove_segment(pid: int, expected_start_ticks: int | None = None) -> bool:
    """Unlink ``pid``'s segment (the ``dsh-probe.<pid>`` name); True when a file was removed. Never
    raises. What a process does with its own segment, and tests with theirs: a monitor that cleans
    up after others uses ``remove_if_dead``.

    With ``expected_start_ticks`` the file is removed only if its header names that writer, so a
    cleaner racing a new process that got the same pid does not delete the newcomer's segment.
    """
    path = segment_path(pid)
    if expected_start_ticks is not None:
        head = _header_identity(path)
        if head is None or head[1] != expected_start_ticks:
            return False
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _header_identity(path: str) -> tuple[int, int, int, os.stat_result] | None:
    """(writer pid, writer start_ticks, writer PID namespace, the file's stat) from the header of
    the regular file at ``path``, whatever its seq says; None when it is no such file or shorter than
    a header. Never follows a link, never blocks on a FIFO, never raises."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        raw = os.pread(fd, HEADER_BYTES, 0) if stat.S_ISREG(st.st_mode) else b""
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) < HEADER_BYTES:
        return None
    wpid, _, ticks = _FIELDS.unpack_from(raw, _FIELDS_OFFSET)[:3]
    return wpid, ticks, _PIDNS.unpack_from(raw, _PIDNS_OFFSET)[0], st


def _writer_dead(pid: int, start_ticks: int) -> bool:
    """Provably dead in our PID namespace: no such pid, a zombie, or the pid is another process now.
    A pid whose /proc entry exists but cannot be read (hidepid) proves nothing."""
    try:
        os.stat(f"/proc/{int(pid)}")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if process_state(pid) in ZOMBIE_STATES:
        return True
    ident = process_identity(pid)
    return ident is not None and ident[1] != start_ticks


def remove_if_dead(
    pid: int, start_ticks: int | None = None, *, our_pidns: int | None = None, owner_uid: int | None = None
) -> bool:
    """Unlink the segment ``dsh-probe.<pid>`` (with ``start_ticks``: its fallback name) only if its
    writer is provably dead in our own PID namespace; True when removed. Never raises.

    Provably dead: our /proc shows our namespace, the header names ``pid`` and the same PID
    namespace as ours (a segment of another namespace, or of a writer too old to record it, is never
    removed: "not visible here" is not "dead"), and that writer no longer runs (_writer_dead). The
    name is unlinked only while it still is the very file judged, so a newcomer's is never removed."""
    try:
        ns = pid_namespace_id() if our_pidns is None else our_pidns
        if not ns or not proc_is_ours():
            return False
        path = segment_path(pid, start_ticks)
        head = _header_identity(path)
        if head is None:
            return False
        wpid, ticks, wns, st = head
        if owner_uid is not None and st.st_uid != owner_uid:
            return False
        if wns != ns or wpid != int(pid) & 0xFFFFFFFF or (start_ticks is not None and ticks != start_ticks):
            return False
        if not _writer_dead(pid, ticks):
            return False
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


def sweep_dead_segments(
    skip: set[int] = frozenset(), shm_dir: str = SHM_DIR, owner_uid: int | None = None
) -> list[int]:
    """``remove_if_dead`` over every segment name in ``shm_dir`` but those of pids in ``skip``, and
    over the writers' scratch files (``_SCRATCH_RE``) left by a writer killed while creating its
    segment; the pids whose files went. With ``owner_uid``, only files of that owner. Never raises."""
    removed: list[int] = []
    try:
        ns = pid_namespace_id()
        if not ns or not proc_is_ours():
            return removed
        names, scratch = _scan(shm_dir, 1 << 16)
        for pid, ticks in names:
            if pid not in skip and remove_if_dead(pid, ticks, our_pidns=ns, owner_uid=owner_uid):
                removed.append(pid)
        for name in scratch:
            m = _SCRATCH_RE.match(name)
            if m and int(m.group(1)) == ns and _writer_dead(int(m.group(2)), int(m.group(3))):
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


# ----------------------------------------------------------------------------------------------
# Payload schema. Validation is strict (bool is not an int, int is not a float) because the payload
# is untrusted: a wrong type is rejected with the path of the offending field.


class _Opt:
    __slots__ = ("kind",)

    def __init__(self, kind: Any) -> None:
        self.kind = kind


class _Added:
    """A field added within schema 1: a payload of an older probe lacks it, and reads as None."""

    __slots__ = ("kind",)

    def __init__(self, kind: Any) -> None:
        self.kind = kind


class _List:
    __slots__ = ("item", "max_items")

    def __init__(self, item: Any, max_items: int) -> None:
        self.item = item
        self.max_items = max_items


class _Enum:
    __slots__ = ("values",)

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values


class _Exact:
    """An int that must be this one value (the schema number): part of the schema, so the checker
    and the generated validator both enforce it instead of each caller remembering to."""

    __slots__ = ("value", "what")

    def __init__(self, value: int, what: str) -> None:
        self.value = value
        self.what = what


MAX_STR_CHARS = 4096
MAX_EVENTS = 64
MAX_ERRORS = 16
MAX_MODELS = 1024
MAX_DEVICES = 256

_RUNTIME = {
    "torch": _Opt(str),
    "cuda_build": _Opt(str),
    "cudnn": _Opt(int),
    "cuda_available": _Opt(bool),
    "cuda_initialized": bool,
    "device_count": _Opt(int),
    "devices": _List({"index": int, "name": str, "uuid": _Opt(str)}, MAX_DEVICES),
    "cuda_visible_devices": _Opt(str),
    "cuda_device_order": _Opt(str),
    "mps_available": _Opt(bool),
    "xpu_available": _Opt(bool),
}
_MEMORY = {
    "device": str,
    "allocated_bytes": int,
    "reserved_bytes": int,
    "peak_allocated_bytes": int,
    "peak_reserved_bytes": int,
}
_MODEL = {
    "name": str,
    "class": str,
    "params": int,
    "device": str,
    "devices": _List(str, MAX_DEVICES),
    "input_device": _Opt(str),
    "forward_calls": int,
    "forward_rate_hz": float,
    "last_forward_time": _Opt(float),
    "data_wait_fraction": _Opt(float),
    "data_wait_s": _Opt(float),
    "step_s": _Opt(float),
    # Added within schema 1 (framework callbacks, probe._steps): absent in older probes' payloads.
    "train_steps": _Added(int),
    "step_rate_hz": _Added(float),
    "step_source": _Added(str),
    "shared_memory": _Added(bool),
}
_PAYLOAD = {
    "schema": _Exact(SCHEMA, "schema"),
    "pid": int,
    "ppid": _Opt(int),
    "start_ticks": _Opt(int),
    "argv0": _Opt(str),
    "script": _Opt(str),
    "hostname": _Opt(str),
    "role": _Enum(ROLES),
    "worker_id": _Opt(int),
    "rank": _Opt(int),
    "local_rank": _Opt(int),
    "world_size": _Opt(int),
    "dist_backend": _Opt(str),
    "loader": _Added(str),  # a DataLoader worker: the label of the loader it serves ("train", "validation")
    "runtime": _RUNTIME,
    "memory": _List(_MEMORY, MAX_DEVICES),
    "models": _List(_MODEL, MAX_MODELS),
    "events": _List({"time": float, "name": str}, MAX_EVENTS),
    "errors": _List({"time": float, "where": str, "message": str}, MAX_ERRORS),
    "published_at": float,
    "trimmed": bool,
}


class _Invalid(ValueError):
    pass


def _type_name(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _path(at: Any) -> str:
    """The dotted path of a field, built only when it is reported: ``at`` is a chain of
    (parent, suffix) pairs, cheaper to extend on every field than a formatted string."""
    parts = []
    while isinstance(at, tuple):
        at, step = at
        parts.append(f"[{step}]" if type(step) is int else f".{step}")
    parts.append(at)
    return "".join(reversed(parts))


def _check(value: Any, kind: Any, at: Any) -> Any:
    """Return a clean copy of ``value`` checked against ``kind``; raise _Invalid with the path."""
    if kind is int:
        if type(value) is not int:
            raise _Invalid(f"{_path(at)}: expected int, got {_type_name(value)}")
        return value
    if kind is str:
        if type(value) is not str:
            raise _Invalid(f"{_path(at)}: expected str, got {_type_name(value)}")
        if len(value) > MAX_STR_CHARS:
            raise _Invalid(f"{_path(at)}: string longer than {MAX_STR_CHARS}")
        return value
    if isinstance(kind, _Opt | _Added):
        return None if value is None else _check(value, kind.kind, at)
    if kind is float:
        if type(value) is not float:
            raise _Invalid(f"{_path(at)}: expected float, got {_type_name(value)}")
        if not math.isfinite(value):
            raise _Invalid(f"{_path(at)}: not a finite number")
        return value
    if kind is bool:
        if type(value) is not bool:
            raise _Invalid(f"{_path(at)}: expected bool, got {_type_name(value)}")
        return value
    if isinstance(kind, _Enum):
        if type(value) is not str or value not in kind.values:
            raise _Invalid(f"{_path(at)}: expected one of {'|'.join(kind.values)}, got {value!r:.40}")
        return value
    if isinstance(kind, _Exact):
        if type(value) is not int or value != kind.value:
            raise _Invalid(f"{_path(at)}: unsupported {kind.what} {value!r:.20} (this reader knows {kind.value})")
        return value
    if isinstance(kind, _List):
        if type(value) is not list:
            raise _Invalid(f"{_path(at)}: expected array, got {_type_name(value)}")
        if len(value) > kind.max_items:
            raise _Invalid(f"{_path(at)}: more than {kind.max_items} items")
        item = kind.item
        return [_check(v, item, (at, i)) for i, v in enumerate(value)]
    if isinstance(kind, dict):
        if type(value) is not dict:
            raise _Invalid(f"{_path(at)}: expected map, got {_type_name(value)}")
        out = {}
        for key, sub in kind.items():
            if key not in value:
                if isinstance(sub, _Added):
                    out[key] = None
                    continue
                raise _Invalid(f"{_path(at)}.{key}: missing")
            out[key] = _check(value[key], sub, (at, key))
        # Unknown keys are dropped, not rejected: a newer probe may add fields within schema 1.
        return out
    raise AssertionError(f"bad schema kind at {_path(at)}")  # a bug in this module, not bad input


class _Gen:
    """Writes the schema out as straight-line Python: the same checks as ``_check`` without its
    recursion and dispatch, about four times faster. It only says yes (the clean copy) or no
    (None); on no, ``_check`` runs to name the offending field, so both must accept exactly the
    same payloads (tests/unit/test_probe_segment.py compares them on generated and hostile input)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {"_M": _MISSING, "_fin": math.isfinite, "_MAXS": MAX_STR_CHARS}
        self.n = 0

    def var(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def check(self, src: str, kind: Any, depth: int) -> str:
        """Emit the checks of ``src`` (a variable) against ``kind``; return the clean value's expression."""
        fail = "return None"
        if isinstance(kind, _Added):
            kind = _Opt(kind.kind)  # presence was settled by the enclosing map
        if isinstance(kind, _Opt):
            inner = kind.kind
            if inner in (int, str, float, bool):
                self.emit(depth, f"if {src} is not None:")
                self.check(src, inner, depth + 1)
                return src
            out = self.var()
            self.emit(depth, f"{out} = None")
            self.emit(depth, f"if {src} is not None:")
            val = self.check(src, inner, depth + 1)
            self.emit(depth + 1, f"{out} = {val}")
            return out
        if kind is int or kind is bool:
            self.emit(depth, f"if type({src}) is not {kind.__name__}: {fail}")
            return src
        if kind is str:
            self.emit(depth, f"if type({src}) is not str or len({src}) > _MAXS: {fail}")
            return src
        if kind is float:
            self.emit(depth, f"if type({src}) is not float or not _fin({src}): {fail}")
            return src
        if isinstance(kind, _Enum):
            name = f"E{self.var()}"
            self.consts[name] = frozenset(kind.values)
            self.emit(depth, f"if type({src}) is not str or {src} not in {name}: {fail}")
            return src
        if isinstance(kind, _Exact):
            self.emit(depth, f"if type({src}) is not int or {src} != {int(kind.value)}: {fail}")
            return src
        if isinstance(kind, _List):
            out, item = self.var(), self.var()
            self.emit(depth, f"if type({src}) is not list or len({src}) > {kind.max_items}: {fail}")
            if kind.item in (int, str, float, bool):
                # Plain items: checked in place, copied in one C call.
                self.emit(depth, f"for {item} in {src}:")
                self.check(item, kind.item, depth + 1)
                self.emit(depth, f"{out} = list({src})")
                return out
            self.emit(depth, f"{out} = []")
            self.emit(depth, f"for {item} in {src}:")
            val = self.check(item, kind.item, depth + 1)
            self.emit(depth + 1, f"{out}.append({val})")
            return out
        if isinstance(kind, dict):
            self.emit(depth, f"if type({src}) is not dict: {fail}")
            fields = []
            for key, sub in kind.items():
                v = self.var()
                if isinstance(sub, _Added):
                    self.emit(depth, f"{v} = {src}.get({key!r})")
                else:
                    self.emit(depth, f"{v} = {src}.get({key!r}, _M)")
                    self.emit(depth, f"if {v} is _M: {fail}")
                fields.append(f"{key!r}: {self.check(v, sub, depth)}")
            out = self.var()
            self.emit(depth, f"{out} = {{{', '.join(fields)}}}")
            return out
        raise AssertionError(f"bad schema kind {kind!r}")


_MISSING = object()


def _compile_validator(schema: dict) -> Any:
    gen = _Gen()
    gen.emit(0, "def fast(p):")
    result = gen.check("p", schema, 1)
    gen.emit(1, f"return {result}")
    namespace = dict(gen.consts)
    exec(compile("\n".join(gen.lines), "<probe.segment schema 1>", "exec"), namespace)  # noqa: S102 -- generated from the constant schema above, never from input
    return namespace["fast"]


_fast_validate = _compile_validator(_PAYLOAD)


def validate_payload(payload: Any) -> tuple[dict | None, str | None]:
    """Check an unpacked payload against schema 1: (clean copy, None) or (None, reason)."""
    try:
        clean = _fast_validate(payload)
        if clean is not None:
            return clean, None
        # Rejected (or an odd case): the slow checker says why, with the field's path.
        return _slow_validate(payload)
    except RecursionError:
        return None, "payload: nested too deeply"


def _slow_validate(payload: Any) -> tuple[dict | None, str | None]:
    try:
        return _check(payload, _PAYLOAD, "payload"), None
    except _Invalid as e:
        return None, str(e)
    except RecursionError:
        return None, "payload: nested too deeply"


def empty_payload(pid: int | None = None, start_ticks: int | None = None) -> dict:
    """A schema-1 payload with every key present and every value empty: the base the probe fills."""
    return {
        "schema": SCHEMA,
        "pid": os.getpid() if pid is None else int(pid),
        "ppid": None,
        "start_ticks": start_ticks,
        "argv0": None,
        "script": None,
        "hostname": None,
        "role": "main",
        "worker_id": None,
        "rank": None,
        "local_rank": None,
        "world_size": None,
        "dist_backend": None,
        "loader": None,
        "runtime": {
            "torch": None,
            "cuda_build": None,
            "cudnn": None,
            "cuda_available": None,
            "cuda_initialized": False,
            "device_count": None,
            "devices": [],
            "cuda_visible_devices": None,
            "cuda_device_order": None,
            "mps_available": None,
            "xpu_available": None,
        },
        "memory": [],
        "models": [],
        "events": [],
        "errors": [],
        "published_at": time.time(),
        "trimmed": False,
    }


def _pack(payload: dict) -> bytes:
    try:
        return msgpack.packb(payload, use_bin_type=True)
    except UnicodeEncodeError:
        # A str that is not Unicode text (a Latin-1 path or environment value decoded with
        # surrogateescape, a lone surrogate in an event name): "?" for what UTF-8 cannot carry,
        # rather than a publish that fails for good.
        return msgpack.packb(payload, use_bin_type=True, unicode_errors="replace")


def encode_payload(payload: dict, capacity_bytes: int) -> tuple[bytes, bool]:
    """msgpack ``payload`` into at most ``capacity_bytes``: (bytes, trimmed).

    Too big a payload loses, in this order, its oldest events, its oldest errors and its last models
    until it fits, and says so with ``trimmed``; only a payload whose fixed part alone is too big
    raises SegmentError. ``payload`` itself is not modified.
    """
    data = _pack(payload)
    if len(data) <= capacity_bytes:
        return data, bool(payload.get("trimmed"))
    p = dict(payload)
    p["trimmed"] = True
    for key, keep_newest in (("events", True), ("errors", True), ("models", False)):
        items = list(p.get(key) or [])
        while items:
            data = _pack(p)
            if len(data) <= capacity_bytes:
                return data, True
            # Halving keeps the number of re-packs logarithmic in the list's length.
            drop = max(1, len(items) // 2)
            items = items[drop:] if keep_newest else items[:-drop]
            p[key] = items
    data = _pack(p)
    if len(data) <= capacity_bytes:
        return data, True
    raise SegmentError(
        errno.EMSGSIZE, f"payload needs {len(data)} bytes even trimmed; segment holds {capacity_bytes}"
    )


# ----------------------------------------------------------------------------------------------
# Writer


def _describe(path: str) -> str:
    """What sits at ``path``, for a message: a link, another user's file, another namespace's."""
    try:
        st = os.lstat(path)
    except OSError:
        return "something that vanished"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "something that is not a regular file"
    if st.st_uid != os.geteuid():
        return f"a file of uid {st.st_uid}"
    head = _header_identity(path)
    if head is not None and head[2] and head[2] != pid_namespace_id():
        return "a segment of another PID namespace"
    return "a file whose writer may still run"


class SegmentWriter:
    """Creates ``/dsh-probe.<pid>`` (0600, allocated up front) and publishes payloads into it.

    Allocation up front (posix_fallocate, else explicit zero writes) makes a full /dev/shm fail here
    with ENOSPC instead of killing the process with SIGBUS on a later write to the mapping. One
    writer per segment; callers serialise ``publish`` (the probe holds its lock).

    The file is made whole under a scratch name first (sized, allocated, its header naming the
    writer and its PID namespace), then hard-linked to its public name: ``link`` never replaces nor
    follows what already sits there. When ``dsh-probe.<pid>`` is taken by anything but a provably
    dead writer's segment (another user's file, a link, a live segment of another PID namespace),
    the writer publishes as ``dsh-probe.<pid>.<start_ticks>`` instead and says why in
    ``fallback_reason``.
    """

    def __init__(
        self,
        pid: int | None = None,
        start_ticks: int | None = None,
        size_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        try:
            import posix_ipc
        except ImportError as e:
            raise SegmentError(errno.ENOSYS, f"posix_ipc is not installed ({e})") from None
        if not MIN_SEGMENT_BYTES <= size_bytes:
            raise ValueError(f"size_bytes must be at least {MIN_SEGMENT_BYTES}")
        self.pid = os.getpid() if pid is None else int(pid)
        ticks = process_start_ticks(self.pid) if start_ticks is None else start_ticks
        # 0 stands for "unknown" (no /proc): the header field is an unsigned integer.
        self.start_ticks = int(ticks or 0)
        self.pidns = pid_namespace_id()
        self.name = segment_name(self.pid)
        self.fallback_reason: str | None = None
        self.size_bytes = int(size_bytes)
        self.capacity_bytes = self.size_bytes - HEADER_BYTES
        self._seq = 0
        self._mm: mmap.mmap | None = None
        self._posix_ipc = posix_ipc
        self._create()

    def _create(self) -> None:
        ipc = self._posix_ipc
        mode = stat.S_IRUSR | stat.S_IWUSR
        scratch = f"/{_SCRATCH_PREFIX}{self.pidns}.{self.pid}.{self.start_ticks}.{os.urandom(4).hex()}"
        try:
            # O_CREAT | O_EXCL: a fresh file, never one planted under the (random) name.
            shm = ipc.SharedMemory(scratch, flags=ipc.O_CREX, mode=mode, size=0)
        except (ipc.Error, OSError, ValueError) as e:
            raise SegmentError(errno.EIO, f"cannot create {self.name}: {e}") from None
        fd = shm.fd
        try:
            os.fchmod(fd, mode)  # the creation mode went through the umask
            os.ftruncate(fd, self.size_bytes)
            self._allocate(fd)
            self._mm = mmap.mmap(fd, self.size_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            # Who wrote it, before any name shows it: a cleaner can then judge it from its header.
            _FIELDS.pack_into(self._mm, _FIELDS_OFFSET, self.pid & 0xFFFFFFFF, 0, self.start_ticks, 0, 0, 0.0)
            _PIDNS.pack_into(self._mm, _PIDNS_OFFSET, self.pidns)
            self.name = self._link_public(SHM_DIR + scratch)
        except OSError as e:
            self.detach()
            raise SegmentError(
                e.errno or errno.EIO, f"cannot allocate {self.name}: {e.strerror or e}"
            ) from None
        finally:
            shm.close_fd()
            self._unlink_quietly(scratch)

    def _link_public(self, scratch_path: str) -> str:
        """Give the made file its public name (see the class doc); the name taken."""
        taken = []
        for ticks in (None, self.start_ticks):
            path = segment_path(self.pid, ticks)
            for attempt in (0, 1):
                try:
                    os.link(scratch_path, path, follow_symlinks=False)
                    if taken:
                        self.fallback_reason = f"{taken[0]}: publishing as {path} instead"
                    return segment_name(self.pid, ticks)
                except FileExistsError:
                    # A leftover of a dead process that had this pid before us (SIGKILL skips
                    # atexit) is replaced; anything else is left alone.
                    if attempt == 0 and remove_if_dead(self.pid, ticks):
                        continue
                    taken.append(f"{path} is taken by {_describe(path)}")
                    break
        raise SegmentError(errno.EEXIST, f"{'; '.join(taken)}: not ours to replace")

    def _allocate(self, fd: int) -> None:
        try:
            os.posix_fallocate(fd, 0, self.size_bytes)
            return
        except AttributeError:
            pass  # no posix_fallocate on this platform
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
        chunk = b"\0" * 65536
        for offset in range(0, self.size_bytes, len(chunk)):
            os.pwrite(fd, chunk[: self.size_bytes - offset], offset)

    def _unlink_quietly(self, name: str | None = None) -> None:
        try:
            self._posix_ipc.unlink_shared_memory(self.name if name is None else name)
        except Exception:  # noqa: BLE001 -- cleanup after a failure already being reported
            pass

    @property
    def closed(self) -> bool:
        return self._mm is None

    # The three steps of one publish, separate so the tests can stop a writer between them.
    def _begin(self) -> None:
        self._seq += 1
        _SEQ.pack_into(self._mm, _SEQ_OFFSET, self._seq)

    def _fill(self, data: bytes, flags: int, published_at: float) -> None:
        mm = self._mm
        mm[HEADER_BYTES : HEADER_BYTES + len(data)] = data
        _PREFIX.pack_into(mm, 0, MAGIC, FORMAT_VERSION, HEADER_BYTES)
        _FIELDS.pack_into(
            mm,
            _FIELDS_OFFSET,
            self.pid & 0xFFFFFFFF,
            flags,
            self.start_ticks,
            len(data),
            zlib.crc32(data),
            published_at,
        )

    def _end(self) -> None:
        self._seq += 1
        _SEQ.pack_into(self._mm, _SEQ_OFFSET, self._seq)

    def publish_bytes(self, data: bytes, trimmed: bool = False, published_at: float | None = None) -> None:
        """Publish an already encoded payload (at most ``capacity_bytes``)."""
        if self._mm is None:
            raise SegmentError(errno.EBADF, f"{self.name} is closed")
        if len(data) > self.capacity_bytes:
            raise SegmentError(errno.EMSGSIZE, f"{len(data)} bytes do not fit in {self.capacity_bytes}")
        if published_at is None:
            published_at = time.time()
        self._begin()
        try:
            self._fill(data, FLAG_TRIMMED if trimmed else 0, float(published_at))
        finally:
            # Even after a failed fill the seq must go even again, or readers would see "busy" forever;
            # the crc then tells them whether what is there is whole.
            self._end()

    def publish(self, payload: dict) -> bool:
        """Encode (trimming if needed) and publish ``payload``; returns whether it was trimmed."""
        data, trimmed = encode_payload(payload, self.capacity_bytes)
        published_at = payload.get("published_at")
        self.publish_bytes(data, trimmed, published_at if isinstance(published_at, float) else None)
        return trimmed

    def detach(self) -> None:
        """Unmap without unlinking: what a forked child does with its parent's segment."""
        mm, self._mm = self._mm, None
        if mm is not None:
            mm.close()

    def close(self, unlink: bool = True) -> None:
        """Unmap, and unlink the name unless told not to. Idempotent.

        Unlinking first marks the header closed (FLAG_CLOSED, under the seqlock), so a reader that
        keeps this file open (SegmentFollower) drops it instead of following a dead file."""
        if unlink and self._mm is not None and self._seq:
            try:
                self._begin()
                flags = _FLAGS.unpack_from(self._mm, _FLAGS_OFFSET)[0]
                _FLAGS.pack_into(self._mm, _FLAGS_OFFSET, flags | FLAG_CLOSED)
                self._end()
            except (ValueError, OSError):
                pass  # unmapped under us: nothing a reader could still see
        self.detach()
        if unlink:
            try:
                self._posix_ipc.unlink_shared_memory(self.name)
            except self._posix_ipc.ExistentialError:
                pass


# ----------------------------------------------------------------------------------------------
# Reader


class SegmentRead:
    """What ``read_segment`` found. ``payload`` is the validated dict only when ``state == "ok"``.

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
        payload: dict | None = None,
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

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in _READ_FIELDS)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentRead) and self._fields() == other._fields()

    __hash__ = None  # mutable payload inside: not hashable, as the frozen dataclass with a dict was not

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


def _unpack(data: bytes) -> Any:
    n = len(data)
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        use_list=True,
        max_str_len=min(n, MAX_STR_CHARS * 4),
        max_bin_len=0,
        max_ext_len=0,
        max_array_len=min(n, MAX_MODELS),
        max_map_len=min(n, 64),
    )


def read_segment(
    pid: int, expected_start_ticks: int | None = None, *, attempts: int = _READ_ATTEMPTS
) -> SegmentRead:
    """Read and validate ``pid``'s segment. Never raises; see SegmentRead.state for the outcomes.

    ``stale``: the header's writer start_ticks differs from ``expected_start_ticks`` or, when that is
    None, from the live process's (a pid that is not running makes every segment of it stale).
    """
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return SegmentRead(pid=-1, state="missing", error=f"not a pid: {pid!r:.40}")
    try:
        return _read_segment(pid, expected_start_ticks, max(1, int(attempts)))
    except Exception as e:  # noqa: BLE001 -- the contract is "never raises"; say what went wrong instead
        return SegmentRead(pid=pid, state="corrupt", error=f"reader failed: {type(e).__name__}: {e}"[:300])


def _read_segment(pid: int, expected_start_ticks: int | None, attempts: int) -> SegmentRead:
    r = _read_named(pid, None, expected_start_ticks, attempts)
    if r.state == "ok":
        return r
    # The writer may have found its name taken and published under its fallback name.
    ticks = expected_start_ticks if expected_start_ticks is not None else process_start_ticks(pid)
    if ticks is None:
        return r
    return _better(r, _read_named(pid, ticks, expected_start_ticks, attempts))


def _better(primary: SegmentRead, fallback: SegmentRead) -> SegmentRead:
    """The read to report of a process's two names: a good one, else what is there at all."""
    if fallback.state == "ok" or (primary.state == "missing" and fallback.state != "missing"):
        return fallback
    return primary


def _read_named(pid: int, name_ticks: int | None, expected: int | None, attempts: int) -> SegmentRead:
    opened = _open_segment(pid, name_ticks)
    if isinstance(opened, SegmentRead):
        return opened
    fd, size = opened
    try:
        return _read_consistent(fd, pid, size, expected, attempts)[0]
    finally:
        os.close(fd)


def _open_segment(pid: int, name_ticks: int | None = None) -> tuple[int, int] | SegmentRead:
    """(fd, size) of a segment file of ``pid`` once it is known to be a plausible one, else why not."""
    path = segment_path(pid, name_ticks)
    try:
        # O_NONBLOCK: a FIFO planted under our name must not hang the reader; O_NOFOLLOW: nor a link.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return SegmentRead(pid=pid, state="missing", error=f"{path} does not exist")
    except PermissionError as e:
        return _owner_mismatch(pid, path) or SegmentRead(
            pid=pid, state="foreign-owner", error=f"cannot open {path}: {e.strerror}"
        )
    except OSError as e:
        if e.errno == errno.ELOOP:
            return SegmentRead(pid=pid, state="corrupt", error=f"{path} is a symbolic link")
        return SegmentRead(pid=pid, state="corrupt", error=f"cannot open {path}: {e.strerror}")
    try:
        problem = _file_problem(pid, path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    if problem is not None:
        os.close(fd)
        return problem
    return fd, os.fstat(fd).st_size


def _owner_mismatch(pid: int, path: str, st: os.stat_result | None = None) -> SegmentRead | None:
    """Only the process itself writes its segment, so the file's owner is the uid it runs as.
    Whoever reads (root included), another owner means another user wrote it: never believed. A
    process gone meanwhile has no uid to compare: its file is judged by its header alone (nothing of
    a process that is not running is shown as running)."""
    owner = process_real_uid(pid)
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


def _file_problem(pid: int, path: str, st: os.stat_result) -> SegmentRead | None:
    """Why the opened file at ``path`` cannot be ``pid``'s segment, or None."""
    if not stat.S_ISREG(st.st_mode):
        return SegmentRead(pid=pid, state="corrupt", error=f"{path} is not a regular file")
    # Only the process itself writes its segment, so the file's owner is the uid it runs as.
    # Whoever reads (root included), another owner means another user wrote it: never believed.
    mismatch = _owner_mismatch(pid, path, st)
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


def _read_consistent(
    fd: int, pid: int, size: int, expected: int | None, attempts: int
) -> tuple[SegmentRead, bytes | None]:
    """The read, and for an ok one the header and payload bytes it was made from."""
    last = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(_RETRY_SLEEP_S)
        raw = os.pread(fd, HEADER_BYTES, 0)
        if len(raw) < HEADER_BYTES:
            return (SegmentRead(pid=pid, state="corrupt", error="file shorter than the header"), None)
        magic, version, hsize, seq, wpid, flags, ticks, length, crc, published_at = HEADER.unpack(raw)
        wns = _PIDNS.unpack_from(raw, _PIDNS_OFFSET)[0]
        if seq & 1:
            last = SegmentRead(
                pid=pid, state="busy", error=f"writer mid-publish (seq {seq} odd) on every try", seq=seq
            )
            continue
        if seq == 0 and magic == b"\0" * 8:
            return (SegmentRead(pid=pid, state="initialising", error="header not written yet"), None)
        common = dict(
            pid=pid,
            writer_pid=wpid,
            writer_start_ticks=ticks,
            published_at=published_at,
            trimmed=bool(flags & FLAG_TRIMMED),
            seq=seq,
            writer_pidns=wns,
        )
        # Header checks are only trusted once seq proves the header was not being rewritten under us.
        reason = None
        if magic != MAGIC:
            reason = f"bad magic {magic!r}"
        elif version != FORMAT_VERSION:
            reason = f"unsupported format version {version}"
        elif hsize != HEADER_BYTES:
            reason = f"header size {hsize}, expected {HEADER_BYTES}"
        elif length > size - HEADER_BYTES:
            reason = f"payload length {length} exceeds the segment's {size - HEADER_BYTES} bytes"
        elif length == 0:
            reason = "payload length 0"
        if reason is not None:
            if _read_seq(fd) != seq:
                continue
            return (SegmentRead(state="corrupt", error=reason, **common), None)
        if flags & FLAG_CLOSED:
            if _read_seq(fd) != seq:
                continue
            return (SegmentRead(state="missing", error="the writer closed this segment", **common), None)
        data = os.pread(fd, length, HEADER_BYTES)
        if _read_seq(fd) != seq:
            last = SegmentRead(state="busy", error="writer kept publishing during every try", **common)
            continue
        if len(data) != length:
            return (
                SegmentRead(state="corrupt", error="file shorter than the payload length", **common),
                None,
            )
        if zlib.crc32(data) != crc:
            # Retried once more before condemning it: on weakly ordered CPUs a torn copy can get past
            # the seq check, and the next try sees the writer's finished state.
            last = SegmentRead(state="corrupt", error="payload crc32 mismatch", **common)
            continue
        r = _finish(data, expected, common)
        return r, (raw + data if r.state == "ok" else None)
    return (
        last if last is not None else SegmentRead(pid=pid, state="busy", error="no consistent read")
    ), None


def _read_seq(fd: int) -> int:
    raw = os.pread(fd, _SEQ.size, _SEQ_OFFSET)
    return _SEQ.unpack(raw)[0] if len(raw) == _SEQ.size else -1


def _finish(data: bytes, expected: int | None, common: dict) -> SegmentRead:
    pid = common["pid"]
    if common["writer_pid"] != pid & 0xFFFFFFFF:
        return SegmentRead(state="corrupt", error=f"header names writer pid {common['writer_pid']}", **common)
    ticks = common["writer_start_ticks"]
    wns, ours = common["writer_pidns"], pid_namespace_id()
    if wns and ours and wns != ours:
        # Its pid is a pid of that namespace: whatever runs under that number here, it is not this.
        return SegmentRead(state="stale", error=f"written in another PID namespace ({wns:#x})", **common)
    if expected is None:
        live = process_start_ticks(pid)
        if live is None:
            return SegmentRead(state="stale", error=f"process {pid} is not running", **common)
        if ticks != live:
            return SegmentRead(
                state="stale",
                error=f"writer start_ticks {ticks} != live process's {live} (pid reused)",
                **common,
            )
    elif ticks != expected:
        return SegmentRead(
            state="stale", error=f"writer start_ticks {ticks} != expected {expected}", **common
        )
    try:
        obj = _unpack(data)
    except Exception as e:  # noqa: BLE001 -- msgpack raises several unrelated types on bad input
        return SegmentRead(state="corrupt", error=f"bad msgpack: {type(e).__name__}: {e}"[:300], **common)
    payload, reason = validate_payload(obj)
    if payload is None:
        return SegmentRead(state="corrupt", error=reason, **common)
    if payload["pid"] != pid:
        return SegmentRead(
            state="corrupt", error=f"payload.pid {payload['pid']} in segment of {pid}", **common
        )
    if payload["start_ticks"] is not None and payload["start_ticks"] != ticks:
        return SegmentRead(state="corrupt", error="payload.start_ticks differs from the header's", **common)
    return SegmentRead(state="ok", payload=payload, **common)


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

    def __init__(self, max_open: int = 256) -> None:
        self.max_open = max(0, int(max_open))
        # identity -> (fd, size when opened, bytes of the last good read, that read)
        self._open: dict[tuple[int, int], tuple[int, int, bytes, SegmentRead]] = {}
        self._missing_reads: dict[tuple[int, int], int] = {}  # identity -> reads that found no file

    def __len__(self) -> int:
        return len(self._open)

    def read(self, pid: int, start_ticks: int) -> SegmentRead:
        ident = (pid, start_ticks)
        try:
            entry = self._open.get(ident)
            if entry is not None:
                fd, size, raw, last = entry
                if os.pread(fd, len(raw), 0) == raw:
                    return last
                r, raw = _read_consistent(fd, pid, size, start_ticks, _READ_ATTEMPTS)
                if raw is not None:
                    self._open[ident] = (fd, size, raw, r)
                    return r
                self._drop(ident)
            r = self._open_read(ident, None)
            if r.state != "ok" and self._try_fallback(ident, r):
                # Published under the fallback name when its own name was taken.
                r = _better(r, self._open_read(ident, start_ticks))
            return r
        except Exception as e:  # noqa: BLE001 -- same contract as read_segment: never raises
            self._drop(ident)
            return SegmentRead(
                pid=pid, state="corrupt", error=f"reader failed: {type(e).__name__}: {e}"[:300]
            )

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

    def _open_read(self, ident: tuple[int, int], name_ticks: int | None) -> SegmentRead:
        pid, start_ticks = ident
        opened = _open_segment(pid, name_ticks)
        if isinstance(opened, SegmentRead):
            return opened
        fd, size = opened
        keep = False
        try:
            r, raw = _read_consistent(fd, pid, size, start_ticks, _READ_ATTEMPTS)
            keep = raw is not None and len(self._open) < self.max_open
            if keep:
                self._open[ident] = (fd, size, raw, r)
            return r
        finally:
            if not keep:
                os.close(fd)

    def retain(self, identities: set) -> None:
        """Close the files of every identity not in ``identities`` (processes that left the tree)."""
        for ident in [i for i in self._open if i not in identities]:
            self._drop(ident)
        for ident in [i for i in self._missing_reads if i not in identities]:
            del self._missing_reads[ident]

    def close(self) -> None:
        for ident in list(self._open):
            self._drop(ident)
        self._missing_reads.clear()

    def _drop(self, ident: tuple[int, int]) -> None:
        entry = self._open.pop(ident, None)
        if entry is not None:
            try:
                os.close(entry[0])
            except OSError:
                pass
