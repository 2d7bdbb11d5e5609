"""Where the host's process and system filesystems are: ``HostPaths(procfs="/proc", sysfs="/sys")``.

One small frozen value, handed as a parameter (``host=``) to every reader of /proc and /sys, as
node_exporter's ``--path.procfs`` and ``--path.sysfs`` and prometheus_client's ``proc=`` root are:
the sidecar's CLI makes it from those flags, a test from a small tree of its own in a temporary
folder. Every reader defaults to ``HOST`` (the real ones), so what runs inside a training process
(the probe) passes nothing. Readers build each path with ``proc_path`` / ``sys_path`` at the read.

A plain slotted class rather than a dataclass: the probe imports this module, and dataclasses
imports inspect (milliseconds of a training process's start). Standard library only, nothing at
import.
"""

from __future__ import annotations

__all__ = ["HOST", "HostPaths"]


def _root(path: str) -> str:
    """``path`` without a trailing slash (``/`` stays itself): joined paths have no ``//``."""
    return path.rstrip("/") or "/"


class HostPaths:
    """The roots of the process filesystem (``procfs``) and of the kernel's sysfs (``sysfs``)."""

    __slots__ = ("procfs", "sysfs")
    procfs: str
    sysfs: str

    def __init__(self, procfs: str = "/proc", sysfs: str = "/sys") -> None:
        object.__setattr__(self, "procfs", _root(procfs))
        object.__setattr__(self, "sysfs", _root(sysfs))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"HostPaths is frozen: {name} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"HostPaths is frozen: {name} cannot be deleted")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostPaths) and (self.procfs, self.sysfs) == (other.procfs, other.sysfs)

    def __hash__(self) -> int:
        return hash((self.procfs, self.sysfs))

    def __repr__(self) -> str:
        return f"HostPaths(procfs={self.procfs!r}, sysfs={self.sysfs!r})"

    def proc_path(self, *parts: object) -> str:
        """``<procfs>/part/part...``: ``proc_path(pid, "stat")`` is ``/proc/<pid>/stat``."""
        return _join(self.procfs, parts)

    def sys_path(self, *parts: object) -> str:
        """``<sysfs>/part/part...``: ``sys_path("class", "drm")`` is ``/sys/class/drm``."""
        return _join(self.sysfs, parts)


def _join(root: str, parts: tuple[object, ...]) -> str:
    if not parts:
        return root
    return ("" if root == "/" else root) + "/" + "/".join(map(str, parts))


# The host's own /proc and /sys: every reader's default.
HOST = HostPaths()
