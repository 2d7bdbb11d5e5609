"""DRM fdinfo samples from the kernel's format (Documentation/gpu/drm-usage-stats.rst) and published
reports, and a fixture /proc of DRM fds, shared by the fdinfo reader's tests. A fixture's fds are
links to plain files: ``FakeStat`` says which of them a real /proc would show as DRM character
devices (major 226), since mknod needs privileges."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from hostfs.paths import HostPaths

FD_HEAD = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1009\n"
# amdgpu_top#87, June 2024 (drm-memory-gtt with the space before the tab amdgpu prints).
AMDGPU = (
    FD_HEAD + "pasid:\t32784\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:08:00.0\ndrm-client-id:\t217\n"
    "drm-memory-vram:\t2068 KiB\ndrm-memory-gtt: \t8192 KiB\ndrm-memory-cpu: \t0 KiB\n"
    "drm-engine-gfx:\t107322799 ns\n"
)
# amdgpu 5.14-5.18: no drm-driver, "kB", per-ring percentages.
AMDGPU_OLD = (
    FD_HEAD + "pdev:\t0000:08:00.0\npasid:\t32771\nvram mem:\t16384 kB\ngtt mem:\t2048 kB\ncpu mem:\t0 kB\n"
    "gfx0:\t12.5%\ncompute0:\t0.0%\n"
)
I915 = (
    FD_HEAD + "drm-driver:\ti915\ndrm-client-id:\t42\ndrm-pdev:\t0000:00:02.0\n"
    "drm-total-system0:\t3 MiB\ndrm-resident-system0:\t3145728\ndrm-total-local0:\t512 MiB\n"
    "drm-engine-render:\t9288864723 ns\ndrm-engine-copy:\t2035071108 ns\ndrm-engine-video:\t0 ns\n"
    "drm-engine-capacity-video:\t2\ndrm-engine-video-enhance:\t0 ns\n"
)
XE = (
    FD_HEAD + "drm-driver:\txe\ndrm-client-id:\t4\ndrm-pdev:\t0000:03:00.0\n"
    "drm-total-system:\t0\ndrm-resident-system:\t0\ndrm-total-gtt:\t192 KiB\ndrm-resident-gtt:\t192 KiB\n"
    "drm-total-vram0:\t23992 KiB\ndrm-shared-vram0:\t16 MiB\ndrm-active-vram0:\t0\n"
    "drm-resident-vram0:\t23992 KiB\ndrm-total-stolen:\t0\n"
    "drm-cycles-rcs:\t28257900\ndrm-total-cycles-rcs:\t7655183225\n"
    "drm-cycles-ccs:\t0\ndrm-total-cycles-ccs:\t7655183225\ndrm-engine-capacity-ccs:\t4\n"
)
# A driver that gives cycles and a maximum frequency (the spec's third form; no pdev off PCI).
MAXFREQ = FD_HEAD + "drm-driver:\tmsm\ndrm-client-id:\t9\ndrm-cycles-gpu:\t1000\ndrm-maxfreq-gpu:\t800 MHz\n"


@dataclass(frozen=True)
class _Stat:
    st_mode: int
    st_rdev: int


class FakeStat:
    """``stat`` of a fixture's fd: a link into <root>/dev/dri/ (or to a remapped node named in
    ``remapped``) is a DRM character device; a link named in ``denied`` is EACCES; the rest is
    the real stat of what the link points to."""

    def __init__(self, denied: set[str] = frozenset(), remapped: set[str] = frozenset()) -> None:
        self.denied, self.remapped = denied, remapped

    def __call__(self, path: str) -> _Stat | os.stat_result:
        if path in self.denied:
            raise PermissionError(13, "Permission denied", path)
        target = os.readlink(path)
        if "/dev/dri/" in target or target in self.remapped:
            return _Stat(stat.S_IFCHR | 0o666, os.makedev(226, 128))
        return os.stat(path)


class FakeProc:
    def __init__(self, root: Path) -> None:
        self.root = root / "proc"
        self.dev = root / "dev" / "dri"
        self.dev.mkdir(parents=True)
        (self.dev / "renderD128").write_text("")
        self.host = HostPaths(procfs=str(self.root))

    def fd(self, pid: int, fd: int, fdinfo: str | bytes, target: str | None = None) -> str:
        """fd ``fd`` of ``pid`` on ``target`` (the render node by default); returns the fd's path."""
        for sub in ("fd", "fdinfo"):
            (self.root / str(pid) / sub).mkdir(parents=True, exist_ok=True)
        link = self.root / str(pid) / "fd" / str(fd)
        link.symlink_to(target or str(self.dev / "renderD128"))
        data = fdinfo.encode() if isinstance(fdinfo, str) else fdinfo
        (self.root / str(pid) / "fdinfo" / str(fd)).write_bytes(data)
        return str(link)

    def rewrite(self, pid: int, fd: int, fdinfo: str) -> None:
        (self.root / str(pid) / "fdinfo" / str(fd)).write_text(fdinfo)
