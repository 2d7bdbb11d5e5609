"""Fixture /proc and /sys trees that attach AMD GPU use to a real process (issue 41): the sidecar's
``--path.procfs`` root mirrors the real /proc (every entry a link to the real one) except the
watched process's ``fd/`` and ``fdinfo/``, which hold an amdgpu DRM client; ``--path.sysfs`` has
AMD cards (tests.fakenvml.make_fake_sysfs) and, when asked, ROCm's KFD files.

A fixture fd must ``stat`` as a character device of the DRM major (226): as root, a device node made
with mknod (never opened); otherwise a link into a folder we may not search, whose stat is EACCES,
which the reader answers by reading the fdinfo and finding a driver in it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from tests.fakenvml import make_fake_sysfs

FD_HEAD = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1009\n"
RADEON_PCI = "0000:08:00.0"  # a Radeon card: DRM client stats (the render node's engines)
MI_PCI = "0000:c1:00.0"  # an MI-series card: ROCm compute through KFD
KFD_GPU_ID = 53895
IGPU_PCI = "0000:00:02.0"  # a laptop's Intel iGPU (i915)
DGPU_PCI = "0000:01:00.0"  # and its NVIDIA card


def amdgpu_fdinfo(client_id: int, vram_kib: int, gfx_ns: int | None, pdev: str = RADEON_PCI) -> str:
    """An amdgpu client's fdinfo as 6.x kernels print it (amdgpu_top#87's sample's keys)."""
    text = (
        FD_HEAD + f"pasid:\t32784\ndrm-driver:\tamdgpu\ndrm-pdev:\t{pdev}\ndrm-client-id:\t{client_id}\n"
        f"drm-memory-vram:\t{vram_kib} KiB\ndrm-memory-gtt: \t8192 KiB\ndrm-memory-cpu: \t0 KiB\n"
    )
    return text + (f"drm-engine-gfx:\t{gfx_ns} ns\n" if gfx_ns is not None else "")


def i915_fdinfo(client_id: int, render_ns: int = 0, pdev: str = IGPU_PCI) -> str:
    """An i915 client's fdinfo (the kernel's drm-usage-stats keys, as a 6.x i915 prints them)."""
    return (
        FD_HEAD + f"drm-driver:\ti915\ndrm-pdev:\t{pdev}\ndrm-client-id:\t{client_id}\n"
        f"drm-total-system0:\t4096 KiB\ndrm-resident-system0:\t4096 KiB\n"
        f"drm-engine-render:\t{render_ns} ns\ndrm-engine-copy:\t0 ns\n"
    )


def _drm_node(root: Path) -> Path:
    """A path whose stat is a DRM character device (226, 128), or EACCES when we cannot make one."""
    node = root / "dev" / "dri" / "renderD128"
    node.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(226, 128))
        return node
    except PermissionError:
        hidden = root / "hidden"
        hidden.mkdir()
        (hidden / "renderD128").write_text("")
        hidden.chmod(0)  # stat of what is inside: EACCES (not for root, who makes the node above)
        return hidden / "renderD128"


class MirroredProc:
    """``root``/proc: the real /proc, but the fds of ``pid`` (and of ``more``, and of each pid ``own``
    adds) are fixtures."""

    def __init__(self, root: Path, pid: int, *more: int) -> None:
        self.root = root / "proc"
        self.pid = pid
        self.root.mkdir(parents=True)
        fixed = {str(p) for p in (pid, *more)}
        for name in os.listdir("/proc"):
            if name not in fixed:
                (self.root / name).symlink_to(f"/proc/{name}")
        self._node = _drm_node(root)
        for p in (pid, *more):
            self.own(p)

    def own(self, pid: int) -> None:
        """Make ``pid``'s entry (a process started after this tree was made, or one mirrored so far)
        the real one's but for its fds: none but fd 0 (/dev/null) until ``drm_fd`` adds some."""
        own = self.root / str(pid)
        if own.is_symlink():
            own.unlink()
        own.mkdir()
        for name in os.listdir(f"/proc/{pid}"):
            if name not in ("fd", "fdinfo"):
                (own / name).symlink_to(f"/proc/{pid}/{name}")
        (own / "fd").mkdir()
        (own / "fdinfo").mkdir()
        (own / "fd" / "0").symlink_to("/dev/null")  # not a DRM fd: skipped
        (own / "fdinfo" / "0").write_text(FD_HEAD)

    def gone(self, pid: int) -> None:
        """``pid`` has exited (and been reaped): its entry goes, as the kernel's does."""
        shutil.rmtree(self.root / str(pid))

    def drm_fd(self, fd: int, fdinfo: str, pid: int | None = None) -> None:
        own = self.root / str(self.pid if pid is None else pid)
        (own / "fd" / str(fd)).symlink_to(self._node)
        (own / "fdinfo" / str(fd)).write_text(fdinfo)

    def rewrite(self, fd: int, fdinfo: str, pid: int | None = None) -> None:
        """The fd's fdinfo now reads ``fdinfo``: replaced whole, so a reader meanwhile sees the old
        text or the new one, never a part (the kernel prints it at each read)."""
        path = self.root / str(self.pid if pid is None else pid) / "fdinfo" / str(fd)
        tmp = path.with_name(f".{fd}.tmp")
        tmp.write_text(fdinfo)
        os.replace(tmp, path)


def laptop_sysfs(root: Path) -> Path:
    """``root``/sys of a laptop: an Intel iGPU (i915) and an NVIDIA card (NVML drives it)."""
    return make_fake_sysfs(
        root / "sys",
        [
            {
                "pci": IGPU_PCI,
                "vendor": "0x8086",
                "device": "0x9a49",
                "driver": "i915",
                "connectors": ["eDP-1"],
            },
            {
                "pci": DGPU_PCI,
                "vendor": "0x10de",
                "device": "0x2520",
                "class": "0x030200",
                "driver": "nvidia",
            },
        ],
    )


def named_process(folder: Path, name: str) -> subprocess.Popen:
    """A real sleeping process whose kernel name (``comm``) is ``name``: /bin/sleep run through a link
    of that name (the kernel names a process after the file it ran)."""
    link = folder / name
    link.symlink_to(shutil.which("sleep") or "/bin/sleep")
    return subprocess.Popen([str(link), "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def amd_sysfs(root: Path, *, kfd_pids: dict[int, int] | None = None) -> Path:
    """``root``/sys with a Radeon card (card0) and an MI-series card (card1), both amdgpu; with
    ``kfd_pids`` (pid -> VRAM bytes on the MI card), KFD's topology and those processes' files."""
    sysfs = make_fake_sysfs(
        root / "sys",
        [
            {"pci": RADEON_PCI, "vendor": "0x1002", "device": "0x744c", "driver": "amdgpu"},
            {"pci": MI_PCI, "vendor": "0x1002", "device": "0x74a1", "class": "0x038000", "driver": "amdgpu"},
        ],
    )
    if kfd_pids is not None:
        kfd_tree(sysfs, kfd_pids)
    return sysfs


def kfd_tree(sysfs: Path, kfd_pids: dict[int, int], pci: str = MI_PCI) -> None:
    """KFD's topology with one GPU (id KFD_GPU_ID, at ``pci``, an MI300X's ids) and the files of the
    processes in ``kfd_pids`` (pid -> VRAM bytes on it), under ``sysfs``/class/kfd/kfd."""
    kfd = sysfs / "class" / "kfd" / "kfd"
    node = kfd / "topology" / "nodes" / "1"
    node.mkdir(parents=True)
    (node / "gpu_id").write_text(f"{KFD_GPU_ID}\n")
    domain, bus, device_function = pci.split(":")
    slot, function = device_function.split(".")
    # KFD's location_id: the bus, device and function as the PCI BDF number (0xc100 for c1:00.0)
    location = int(bus, 16) << 8 | int(slot, 16) << 3 | int(function)
    (node / "properties").write_text(
        f"vendor_id 4098\ndevice_id 29857\nlocation_id {location}\ndomain {int(domain, 16)}\n"
    )
    for pid, vram_bytes in kfd_pids.items():
        proc = kfd / "proc" / str(pid)
        proc.mkdir(parents=True)
        (proc / "pasid").write_text("32770\n")
        (proc / f"vram_{KFD_GPU_ID}").write_text(f"{vram_bytes}\n")
        (proc / f"sdma_{KFD_GPU_ID}").write_text("0\n")
