"""The probe's shared-memory wire format, on its own: the only package that defines it (docs/design.md).

One POSIX shared-memory segment per process, ``/dsh-probe.<pid>`` (``/dev/shm/dsh-probe.<pid>`` on
Linux), mode 0600, fixed size: a 64-byte little-endian header guarded by a seqlock, then a msgpack
payload. The probe writes it inside training processes; the sidecar reads it without importing the
probe. Standard library, msgpack, posix_ipc (only when a writer is created) and hostfs (who a
process is, from /proc): no torch, no probe, no sidecar.

    names     segment names and paths, listing /dev/shm
    header    the header's layout, magic, flags and sizes; the seqlock protocol
    schema    the payload schema (schema 1), its validators, ``empty_payload``, its text for the docs
    records   a validated payload as typed records (``payload_record``, ``ProbePayload``), for the sidecar
    codec     msgpack: encoding trimmed to fit, bounded decoding
    prefix    a payload's leading bytes (identity, role, runtime), decoded once per process
    home      where the segment of a process in other namespaces (a container) is: ``segment_home``
    writer    ``SegmentWriter``
    reader    ``read_segment``, ``SegmentRead``
    follower  ``SegmentFollower``: a monitor's reader, keeping files open poll after poll;
              ``ReadBudget``: what reading large payloads may cost a monitor's poll, per user
    shm_index ``NameIndex``: /dev/shm's names for a monitor, kept from inotify's events
    cleanup   ``remove_segment``, ``remove_if_dead``, ``sweep_dead_segments``

Importing this package runs nothing and imports none of them. The names the modules export (their
``__all__``) are names of the package too, imported on first use (``probe_wire.read_segment``); a
module imported for one, say ``probe_wire.schema``, costs only what it imports itself. A program that
must have imported everything before it changes user or root (the sidecar, run under another uid)
imports what it uses from the modules, at its own import.
"""

from __future__ import annotations

import importlib

# Where the names this package exports live: each module's ``__all__`` says what it exports.
# Looked in in this order, each after what it imports: a name of the follower costs the reader too,
# but not the writer (mmap, posix_ipc).
_MODULES = (
    "names", "header", "home", "schema", "records", "codec", "prefix", "cleanup", "reader", "follower",
    "shm_index", "writer",
)


def __getattr__(name: str) -> object:
    """``probe_wire.<name>``: the name from the module whose ``__all__`` has it, imported then."""
    if not name.startswith("_") and name not in _MODULES:  # a module not imported yet is no name
        for module in _MODULES:
            found = importlib.import_module(f"{__name__}.{module}")
            if name in found.__all__:
                value = globals()[name] = getattr(found, name)
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    exported = (n for m in _MODULES for n in importlib.import_module(f"{__name__}.{m}").__all__)
    return sorted(set(globals()) | set(exported))
