"""The probe's shared-memory wire format, on its own: the only package that defines it (docs/design.md).

One POSIX shared-memory segment per process, ``/dsh-probe.<pid>`` (``/dev/shm/dsh-probe.<pid>`` on
Linux), mode 0600, fixed size: a 64-byte little-endian header guarded by a seqlock, then a msgpack
payload. The probe writes it inside training processes; the sidecar reads it without importing the
probe. Standard library, msgpack, and posix_ipc (only when a writer is created): no torch, no probe,
no sidecar.

    names     segment names and paths, listing /dev/shm
    header    the header's layout, magic, flags and sizes; the seqlock protocol
    schema    the payload schema (schema 1), its validators, ``empty_payload``, its text for the docs
    codec     msgpack: encoding trimmed to fit, bounded decoding
    procid    who a process is, read from /proc (pid, start_ticks, uid, PID namespace)
    writer    ``SegmentWriter``
    reader    ``read_segment``, ``SegmentRead``
    follower  ``SegmentFollower``: a monitor's reader, keeping files open poll after poll
    cleanup   ``remove_segment``, ``remove_if_dead``, ``sweep_dead_segments``

Importing this package runs nothing and imports none of them: each name below is imported from its
module on first use (``probe_wire.read_segment``), so a user of one module pays for that one alone.
"""

from __future__ import annotations

import importlib

_MODULES = {
    "names": ("SHM_DIR", "list_segment_pids", "list_segments", "segment_name", "segment_path"),
    "header": (
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
    ),
    "schema": (
        "MODEL_COLLECTED",
        "PUBLISH_FAILED",
        "ROLES",
        "SCHEMA",
        "STATES",
        "empty_payload",
        "payload_shape_text",
        "validate_payload",
    ),
    "codec": ("decode_payload", "encode_payload"),
    "procid": (
        "ZOMBIE_STATES",
        "pid_namespace_id",
        "proc_is_ours",
        "process_identity",
        "process_real_uid",
        "process_start_ticks",
        "process_state",
    ),
    "writer": ("SegmentWriter",),
    "reader": ("SegmentRead", "read_segment"),
    "follower": ("FALLBACK_CHECK_EVERY", "SegmentFollower"),
    "cleanup": ("remove_if_dead", "remove_segment", "sweep_dead_segments"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
