"""The 64-byte segment header: layout, magic, flags, sizes, and the seqlock protocol it carries.

Writer protocol (one writer per segment, the owning process): seq+1 (odd), payload bytes, header
fields (all but the writer's identity, written once at creation), seq+1 (even). Reader protocol: read the header, retry while seq is odd, copy the payload,
re-read seq and retry if it moved, then verify length bounds and crc32. The crc is what makes the
reader safe on weakly ordered CPUs too, where Python gives no memory barriers: a torn copy that
slipped past the seq check fails the crc and is retried, never accepted.
"""

from __future__ import annotations

import os
import stat
import struct

# Exported by the package. The structs and offsets of single fields (SEQ, FIELDS, PIDNS, FLAGS,
# PUBLISH, PREFIX) and header_identity are for the writer, the reader and the cleaner of this package.
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
    "SegmentError",
]

MAGIC = b"DSHPRB\x00\x01"
FORMAT_VERSION = 1
# magic, version, header size, seq, writer pid, flags, writer start_ticks, payload length,
# payload crc32, published_at, writer PID namespace: offsets 0, 8, 12, 16, 24, 28, 32, 40, 44, 48, 56.
# HEADER leaves the last 8 bytes out: a header packed with HEADER has 0 there, the mark of a writer
# that did not record its namespace (still read, never swept).
HEADER = struct.Struct("<8sIIQIIQIId8x")
HEADER_BYTES = HEADER.size  # 64
SEQ = struct.Struct("<Q")
SEQ_OFFSET = 16
PREFIX = struct.Struct("<8sII")  # magic, version, header size (offset 0)
FIELDS = struct.Struct("<IIQIId")  # pid, flags, start_ticks, length, crc, published_at (offset 24)
FIELDS_OFFSET = 24
# What each publish writes: length, crc, published_at (offset 40). The writer's identity (pid,
# start_ticks) is written once, before the segment has a public name, and never again: struct's
# pack_into zero-fills its span before packing, so a writer SIGKILLed inside a publish that rewrote
# the identity could leave pid 0 there, and no cleaner could then prove the segment's writer dead.
PUBLISH = struct.Struct("<IId")
PUBLISH_OFFSET = 40
# Written once at creation (hostfs.procid.pid_namespace_id; 0: unknown), never under the seqlock.
PIDNS = struct.Struct("<Q")
PIDNS_OFFSET = 56
FLAGS = struct.Struct("<I")
FLAGS_OFFSET = 28
FLAG_TRIMMED = 1
# Set (under the seqlock) by a writer that is closing for good: a reader that keeps the file open
# learns that this file is finished, even if the same process later creates a new one by the name.
FLAG_CLOSED = 2

DEFAULT_SEGMENT_BYTES = 64 * 1024
MIN_SEGMENT_BYTES = 4 * 1024
# The reader refuses bigger files: it is the bound on what one read may allocate.
MAX_SEGMENT_BYTES = 16 * 1024 * 1024


class SegmentError(OSError):
    """The writer could not create or write its segment (no posix_ipc, no /dev/shm, ENOSPC, ...)."""


def read_header(path: str) -> tuple[bytes, os.stat_result] | None:
    """The header's bytes, as they are whatever its seq says, and the stat of the regular file at
    ``path``; None when it is no such file or shorter than a header. Never follows a link, never
    blocks on a FIFO, never raises."""
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
    return (raw, st) if len(raw) >= HEADER_BYTES else None


def header_identity(path: str) -> tuple[int, int, int, os.stat_result] | None:
    """(writer pid, writer start_ticks, writer PID namespace, the file's stat) from ``read_header``;
    None where it gives nothing. Never raises."""
    read = read_header(path)
    if read is None:
        return None
    raw, st = read
    wpid, _, ticks = FIELDS.unpack_from(raw, FIELDS_OFFSET)[:3]
    return wpid, ticks, PIDNS.unpack_from(raw, PIDNS_OFFSET)[0], st
