"""Where the host's /proc and /sys are, for the layers above the sources: ``HostPaths`` (hostfs.paths),
which the CLI makes from ``--path.procfs`` and ``--path.sysfs`` and hands down to every source that
reads them (as ``host=``). Only sidecar/sources/ imports hostfs itself (pyproject.toml's contracts):
the layers above take this value from here and never read the OS."""

from __future__ import annotations

from hostfs.paths import HOST, HostPaths

__all__ = ["HOST", "HostPaths"]
