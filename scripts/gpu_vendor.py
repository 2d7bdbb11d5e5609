"""Which GPU check scripts/gpu_check.sh runs: NVIDIA's (scripts/gpu_check.py) or AMD's
(scripts/gpu_check_amd.py), from what this machine has.

- NVIDIA: ``nvidia-smi`` on PATH, or ``/dev/nvidia0``.
- AMD (ROCm): ``/dev/kfd`` (ROCm's compute device) and a DRM card the amdgpu driver drives (the
  OS's list of GPUs, sidecar.sources.sysfs: the same reader the sidecar uses).
- Both: NVIDIA's (what the script ran before it had an AMD path), with a note that ``--amd`` runs
  the other. Neither: ``none``; the script then runs NVIDIA's, which fails at once.

``python scripts/gpu_vendor.py`` prints ``VENDOR<TAB>why``; the roots can be moved for fixture
trees with ``GPU_CHECK_SYSFS`` (default /sys) and ``GPU_CHECK_DEVFS`` (default /dev).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

from hostfs.paths import HostPaths
from sidecar.sources.sysfs import SystemGpu, list_system_gpus

AMD_DRIVER = "amdgpu"


@dataclass(frozen=True)
class Detected:
    vendor: str  # "nvidia", "amd" or "none"
    why: str
    amd_cards: tuple[SystemGpu, ...] = ()


def amd_cards(sysfs: str = "/sys") -> tuple[SystemGpu, ...]:
    """The DRM cards an AMD GPU backs with the amdgpu driver bound (unbound or radeon-driven
    cards cannot run ROCm)."""
    return tuple(
        g
        for g in list_system_gpus(host=HostPaths(sysfs=sysfs))
        if g.vendor == "AMD" and g.driver == AMD_DRIVER
    )


def detect(
    sysfs: str = "/sys", devfs: str = "/dev", which: Callable[[str], str | None] = shutil.which
) -> Detected:
    nvidia = [
        why
        for why, ok in (
            ("nvidia-smi on PATH", which("nvidia-smi") is not None),
            (f"{devfs}/nvidia0", os.path.exists(os.path.join(devfs, "nvidia0"))),
        )
        if ok
    ]
    kfd = os.path.exists(os.path.join(devfs, "kfd"))
    cards = amd_cards(sysfs)
    amd = kfd and bool(cards)
    amd_why = ", ".join(f"{c.card} {c.pci}" for c in cards)
    if nvidia:
        note = f"; an AMD GPU too ({amd_why}): --amd checks it" if amd else ""
        return Detected("nvidia", " and ".join(nvidia) + note, cards)
    if amd:
        return Detected("amd", f"{devfs}/kfd and amdgpu card(s) {amd_why}", cards)
    missing = [] if kfd else [f"no {devfs}/kfd"]
    if not cards:
        missing.append(f"no card driven by amdgpu in {sysfs}/class/drm")
    return Detected(
        "none", f"no NVIDIA GPU (no nvidia-smi, no {devfs}/nvidia0); no AMD GPU ({', '.join(missing)})", cards
    )


def detect_here() -> Detected:
    return detect(os.environ.get("GPU_CHECK_SYSFS", "/sys"), os.environ.get("GPU_CHECK_DEVFS", "/dev"))


if __name__ == "__main__":
    found = detect_here()
    print(f"{found.vendor}\t{found.why}")
    sys.exit(0)
