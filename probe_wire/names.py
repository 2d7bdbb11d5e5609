"""Names of the segments: ``/dsh-probe.<pid>``, its fallback, the writers' scratch names, listing.

One POSIX shared-memory segment per process, ``/dsh-probe.<pid>`` (``/dev/shm/dsh-probe.<pid>`` on
Linux); ``/dsh-probe.<pid>.<start_ticks>`` when a writer found its own name taken. Standard library
only.
"""

from __future__ import annotations

import os
import re

__all__ = ["SHM_DIR", "list_segment_pids", "list_segments", "segment_name", "segment_path"]

SHM_DIR = "/dev/shm"
_NAME_PREFIX = "dsh-probe."
# dsh-probe.<pid>, or the fallback dsh-probe.<pid>.<start_ticks> of a writer whose name was taken.
_NAME_RE = re.compile(r"^dsh-probe\.([1-9][0-9]{0,9})(?:\.(0|[1-9][0-9]{0,19}))?$")
# A writer builds its segment under a scratch name that says whose it is (PID namespace, pid,
# start_ticks), then links it to its public name: the public name never shows a half-made file, and
# the scratch file of a writer killed meanwhile can be judged by its name alone.
SCRATCH_PREFIX = "dsh-probe-new."
SCRATCH_RE = re.compile(r"^dsh-probe-new\.([0-9]{1,20})\.([1-9][0-9]{0,9})\.([0-9]{1,20})\.[0-9a-f]{8}$")


def segment_name(pid: int, start_ticks: int | None = None) -> str:
    """POSIX shared-memory name of ``pid``'s segment: ``/dsh-probe.<pid>``; with ``start_ticks``, the
    fallback name ``/dsh-probe.<pid>.<start_ticks>`` a writer takes when the first is taken."""
    return "/" + _file_name(pid, start_ticks)


def segment_path(pid: int, start_ticks: int | None = None, shm_dir: str = SHM_DIR) -> str:
    """File backing ``pid``'s segment on Linux: ``/dev/shm/dsh-probe.<pid>[.<start_ticks>]`` (in
    ``shm_dir``, which tests and a sidecar given another directory set)."""
    return os.path.join(shm_dir, _file_name(pid, start_ticks))


def _file_name(pid: int, start_ticks: int | None) -> str:
    base = f"{_NAME_PREFIX}{int(pid)}"
    return base if start_ticks is None else f"{base}.{int(start_ticks)}"


def list_segments(shm_dir: str = SHM_DIR, max_names: int = 1 << 16) -> list[tuple[int, int | None]]:
    """(pid, start_ticks of a fallback name or None) of each ``dsh-probe.*`` name in ``shm_dir``,
    sorted; [] when it is unreadable."""
    return scan(shm_dir, max_names)[0]


def scan(shm_dir: str, max_names: int) -> tuple[list[tuple[int, int | None]], list[str]]:
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
                elif name.startswith(SCRATCH_PREFIX) and len(scratch) < max_names:
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
