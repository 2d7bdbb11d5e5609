"""Names of the segments: ``/dsh-probe.<pid>``, its fallbacks, the writers' scratch names, listing.

One POSIX shared-memory segment per process, ``/dsh-probe.<pid>`` (``/dev/shm/dsh-probe.<pid>`` on
Linux); ``/dsh-probe.<pid>.<start_ticks>`` when a writer found its own name taken; and
``/dsh-probe.<pid>.<start_ticks>.<random hex>`` when both were taken (another user can plant the
first two for the next pids and plausible start ticks, never a name drawn at random when the writer
starts). Standard library only.
"""

from __future__ import annotations

import os
import re
import stat

__all__ = [
    "SHM_DIR",
    "list_segment_files",
    "list_segment_pids",
    "list_segments",
    "parse_name",
    "random_name_suffixes",
    "segment_name",
    "segment_path",
]

SHM_DIR = "/dev/shm"
_NAME_PREFIX = "dsh-probe."
# The random part of a writer's last name: 8 bytes, so that no one guesses it ahead of the writer.
RANDOM_SUFFIX_BYTES = 8
_SUFFIX = f"[0-9a-f]{{{2 * RANDOM_SUFFIX_BYTES}}}"
# dsh-probe.<pid>; the fallback dsh-probe.<pid>.<start_ticks> of a writer whose name was taken; the
# random name dsh-probe.<pid>.<start_ticks>.<hex> of a writer whose two names were taken.
_NAME_RE = re.compile(rf"^dsh-probe\.([1-9][0-9]{{0,9}})(?:\.(0|[1-9][0-9]{{0,19}})(?:\.({_SUFFIX}))?)?$")
_SUFFIX_RE = re.compile(rf"^{_SUFFIX}$")
# A directory whose mtime is younger than this may change again without a new mtime (the kernel
# stamps it from a coarse clock): a listing made then is not reused.
LISTING_SETTLED_S = 0.1
# Names one listing keeps, of each kind: a directory flooded with names costs bounded time and memory.
MAX_LISTED_NAMES = 1 << 16
# Random names of one process kept, of those its own user owns (its writer makes one).
MAX_OWN_RANDOM_NAMES = 4
# A writer builds its segment under a scratch name that says whose it is (PID namespace, pid,
# start_ticks), then links it to its public name: the public name never shows a half-made file, and
# the scratch file of a writer killed meanwhile can be judged by its name alone.
SCRATCH_PREFIX = "dsh-probe-new."
SCRATCH_RE = re.compile(r"^dsh-probe-new\.([0-9]{1,20})\.([1-9][0-9]{0,9})\.([0-9]{1,20})\.[0-9a-f]{8}$")


def segment_name(pid: int, start_ticks: int | None = None, suffix: str | None = None) -> str:
    """POSIX shared-memory name of ``pid``'s segment: ``/dsh-probe.<pid>``; with ``start_ticks``, the
    fallback name ``/dsh-probe.<pid>.<start_ticks>`` a writer takes when the first is taken; with
    ``suffix`` too, the random name ``/dsh-probe.<pid>.<start_ticks>.<suffix>`` it takes when both are."""
    return "/" + _file_name(pid, start_ticks, suffix)


def segment_path(
    pid: int, start_ticks: int | None = None, shm_dir: str = SHM_DIR, suffix: str | None = None
) -> str:
    """File backing ``pid``'s segment on Linux: ``/dev/shm/dsh-probe.<pid>[.<start_ticks>[.<suffix>]]``
    (in ``shm_dir``, which tests and a sidecar given another directory set)."""
    return os.path.join(shm_dir, _file_name(pid, start_ticks, suffix))


def _file_name(pid: int, start_ticks: int | None, suffix: str | None = None) -> str:
    base = f"{_NAME_PREFIX}{int(pid)}"
    if start_ticks is None:
        return base
    if suffix is None:
        return f"{base}.{int(start_ticks)}"
    if not _SUFFIX_RE.match(suffix):
        raise ValueError(f"not a segment name's random suffix: {suffix!r:.40}")
    return f"{base}.{int(start_ticks)}.{suffix}"


def parse_name(name: str) -> tuple[int, int | None, str | None] | None:
    """(pid, start_ticks or None, random suffix or None) of a segment's file name, None for any
    other name."""
    m = _NAME_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), None if m.group(2) is None else int(m.group(2)), m.group(3)


def random_suffix() -> str:
    """A fresh random suffix for a writer's random name."""
    return os.urandom(RANDOM_SUFFIX_BYTES).hex()


def list_segments(shm_dir: str = SHM_DIR, max_names: int = MAX_LISTED_NAMES) -> list[tuple[int, int | None]]:
    """(pid, start_ticks of a fallback name or None) of each ``dsh-probe.<pid>[.<start_ticks>]`` name
    in ``shm_dir``, sorted; [] when it is unreadable. Random names: ``list_segment_files``."""
    return [(pid, ticks) for pid, ticks, suffix in scan(shm_dir, max_names)[0] if suffix is None]


def list_segment_files(
    shm_dir: str = SHM_DIR, max_names: int = MAX_LISTED_NAMES
) -> list[tuple[int, int | None, str | None]]:
    """(pid, start_ticks or None, random suffix or None) of each segment name in ``shm_dir``, random
    names included (``segment_path(pid, ticks, shm_dir, suffix)`` is its file), sorted; at most
    ``max_names``; [] when it is unreadable."""
    return scan(shm_dir, max_names)[0]


def random_name_suffixes(pid: int, start_ticks: int, owner_uid: int, shm_dir: str | int = SHM_DIR) -> list[str]:
    """The suffixes of the random names ``dsh-probe.<pid>.<start_ticks>.<hex>`` in ``shm_dir`` whose
    file is a regular file of ``owner_uid`` (the process's real user: only it writes its segment),
    at most MAX_OWN_RANDOM_NAMES ([] when unreadable). One listing of the directory, for a process
    whose two other names hold no segment of its; another user's names under the same prefix (any
    number of them) cost an lstat each and never take the place of the process's own. ``shm_dir``
    may be an open directory's descriptor (another process's /dev/shm, hostfs.procroot)."""
    prefix = f"{_file_name(pid, start_ticks)}."
    found: list[str] = []
    looked = 0
    try:
        with os.scandir(shm_dir) as entries:
            for entry in entries:
                name = entry.name
                if not name.startswith(prefix) or not _SUFFIX_RE.match(name[len(prefix) :]):
                    continue
                looked += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_uid == owner_uid:
                    found.append(name[len(prefix) :])
                if len(found) >= MAX_OWN_RANDOM_NAMES or looked >= MAX_LISTED_NAMES:
                    break
    except OSError:
        return []
    return found


def scan(shm_dir: str, max_names: int) -> tuple[list[tuple[int, int | None, str | None]], list[str]]:
    """Segment names (pid, start_ticks or None, random suffix or None) and scratch names in
    ``shm_dir``: at most ``max_names`` of each, so that a directory flooded with names costs a sweep
    bounded time and memory."""
    names: list[tuple[int, int | None, str | None]] = []
    scratch: list[str] = []
    try:
        with os.scandir(shm_dir) as entries:
            for entry in entries:
                name = entry.name
                if not name.startswith("dsh-probe"):
                    continue
                m = _NAME_RE.match(name)
                if m and len(names) < max_names:
                    ticks = None if m.group(2) is None else int(m.group(2))
                    names.append((int(m.group(1)), ticks, m.group(3)))
                elif name.startswith(SCRATCH_PREFIX) and len(scratch) < max_names:
                    scratch.append(name)
                if len(names) >= max_names and len(scratch) >= max_names:
                    break
    except OSError:
        return [], []
    names.sort(key=lambda n: (n[0], -1 if n[1] is None else n[1], n[2] or ""))
    return names, scratch


def list_segment_pids(shm_dir: str = SHM_DIR) -> list[int]:
    """Pids that have a ``dsh-probe.<pid>`` (or fallback or random name) file in ``shm_dir``, sorted."""
    return sorted({pid for pid, _, _ in list_segment_files(shm_dir)})
