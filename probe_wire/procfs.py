"""Where /proc is: the one root every reader of process files under probe_wire, the probe and the
sidecar goes through (psutil's ``PROCFS_PATH`` habit).

Readers build their paths with ``proc_path`` at each read, never from a copy of the root taken at
import, so a test can point ``PROCFS_PATH`` at a small tree of its own (``monkeypatch.setattr``) and
every reader sees it. Standard library only, and nothing at import: the probe imports it.
"""

from __future__ import annotations

__all__ = ["proc_path"]

# The root of the process filesystem; set it (a test's fake tree) before the reads it should serve.
PROCFS_PATH = "/proc"


def proc_path(*parts: object) -> str:
    """``PROCFS_PATH/part/part...``: ``proc_path(pid, "stat")`` is ``/proc/<pid>/stat``."""
    if not parts:
        return PROCFS_PATH
    return PROCFS_PATH + "/" + "/".join(map(str, parts))
