"""Which boot of the host this is: the kernel's boot id (/proc/sys/kernel/random/boot_id, a random
UUID made at each boot), else its boot time (``btime`` of /proc/stat). A run's ledger key is a job
(pid and start ticks) on one boot: pids and start ticks begin again at each boot."""

from __future__ import annotations

import re

from hostfs.paths import HOST, HostPaths

MAX_READ_BYTES = 4096  # both files are a line or two where it matters; never read whole
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
UNKNOWN_BOOT = "unknown-boot"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_READ_BYTES)
    except OSError:
        return None


def boot_id(*, host: HostPaths = HOST) -> str:
    """The kernel's boot id (lower-case UUID); "btime-<seconds>" when only /proc/stat says;
    UNKNOWN_BOOT when neither can be read."""
    raw = _read(host.proc_path("sys", "kernel", "random", "boot_id"))
    if raw is not None:
        text = raw.strip().decode("ascii", "replace").lower()
        if _UUID_RE.fullmatch(text):
            return text
    btime = boot_time_s(host=host)
    return f"btime-{btime}" if btime is not None else UNKNOWN_BOOT


def boot_time_s(*, host: HostPaths = HOST) -> int | None:
    """When the machine booted (UNIX seconds): the ``btime`` line of ``host``'s /proc/stat (what
    psutil.boot_time() reads of the host's own); None when it cannot be read."""
    stat = _read(host.proc_path("stat"))
    for line in (stat or b"").split(b"\n"):
        if line.startswith(b"btime "):
            value = line[6:].strip()
            if value.isdigit() and len(value) <= 20:
                return int(value)
    return None
