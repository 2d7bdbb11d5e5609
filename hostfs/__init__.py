"""The host's /proc (and where /sys is), read the same way by the probe, the wire format and the
sidecar's sources: the one package below all three that reads process files (docs/design.md).

    paths     ``HostPaths(procfs="/proc", sysfs="/sys")``: where they are, handed to every reader
              as ``host=`` (``HOST``, the host's own, by default: the probe passes nothing)
    procid    who a process is: (pid, start_ticks), its parent, state, real uid, PID namespace
    procroot  files inside another process's root (/proc/<pid>/root), its links followed inside it

Standard library only (hostfs/ruff.toml), nothing at import: the probe imports it inside training
processes. Of the sidecar, only ``sidecar/sources/`` imports it (pyproject.toml's import contracts).
"""
