"""Which AMD (ROCm) or Intel (XPU) build of torch to suggest for a CPU-only torch, and which Intel GPUs
PyTorch's XPU builds run on: the counterpart of wheels.py for the other two vendors.

As for CUDA, a suggestion keeps the user's torch version (`pip install torch==X.Y.Z --index-url
.../rocmA.B`): an index without that version would make pip install an older torch, so a torch minor
not in a table gets no index at all, never a guessed one, and the hint points to pytorch.org's
selector instead.

ROCm. `ROCM_WHEELS`: torch minor -> the ROCm versions of its wheel indexes
(https://download.pytorch.org/whl/rocmX.Y[.Z]), as published:
- https://pytorch.org/get-started/previous-versions/ (the "# ROCM x.y (Linux only)" pip commands):
  2.0.x rocm5.4.2; 2.4.1 rocm6.1; 2.5.0 and 2.5.1 rocm6.1 and rocm6.2; 2.6.0 rocm6.1 and rocm6.2.4;
  2.7.0 and 2.7.1 rocm6.3; 2.8.0 rocm6.4; 2.9.0 and 2.9.1 rocm6.4; 2.10.0 rocm7.1.
- pytorch/pytorch RELEASE.md, "Release Compatibility Matrix", its "Stable ROCm" column: 2.1 ROCm
  5.6, 2.2 5.7, 2.3 6.0, 2.4 6.1, ... 2.10 7.1, 2.11, 2.12 and 2.13 7.2 (the same matrix wheels.py
  takes its CUDA columns from); the column names the index but for 2.0, whose "ROCm 5.4" is the
  index rocm5.4.2 (hence the pip commands first). The 2.1 to 2.3 indexes (rocm5.6, rocm5.7,
  rocm6.0) carry every patch release of their minor (torch==2.1.0+rocm5.6, 2.2.2+rocm5.7,
  2.3.1+rocm6.0 are pinned by that name in public install scripts).
The newest ROCm of a minor is the one suggested: the runtime comes inside the wheel (only the kernel's
amdgpu driver is needed), and newer ROCm supports more GPUs (RDNA 4 needs 6.4).

XPU. One index, https://download.pytorch.org/whl/xpu, with every release from 2.5 (PyTorch's "Getting
Started on Intel GPU", docs/source/notes/get_start_xpu.rst: "Intel GPUs support (Prototype) is ready
from PyTorch* 2.5", release wheels at that index). `XPU_WHEEL_MINORS` is 2.5 to 2.13, the releases
this project knows; an older torch has no XPU build (the hint says to upgrade, which is no downgrade),
a newer one gets the selector.

The Intel GPUs it runs on (same page, "Hardware Prerequisite"): Data Center GPU Max (Ponte Vecchio),
Arc A-series (Alchemist), Arc B-series (Battlemage), Core Ultra with Arc graphics (Meteor Lake,
Arrow Lake, Lunar Lake, Panther Lake); Intel's Data Center GPU Flex (Arctic Sound-M) is the same DG2
silicon. `XPU_DEVICE_IDS` holds their PCI device ids as the kernel lists them
(torvalds/linux include/drm/intel/pciids.h: INTEL_DG2_IDS, INTEL_ATS_M_IDS, INTEL_PVC_IDS,
INTEL_MTL_IDS, INTEL_ARL_IDS, INTEL_LNL_IDS, INTEL_BMG_IDS, INTEL_PTL_IDS). Older integrated graphics
(UHD, Iris Xe of Tiger Lake to Raptor Lake) are not there: they get no XPU advice.
"""

from __future__ import annotations

import re

from sidecar.verdict.wheels import NoWheel, WheelChoice, WheelIndex

__all__ = ["ROCM_WHEELS", "XPU_DEVICE_IDS", "XPU_WHEEL_MINORS", "rocm_wheel", "xpu_capable", "xpu_wheel"]

ROCM_WHEELS: dict[tuple[int, int], tuple[str, ...]] = {
    (2, 0): ("5.4.2",),
    (2, 1): ("5.6",),
    (2, 2): ("5.7",),
    (2, 3): ("6.0",),
    (2, 4): ("6.1",),
    (2, 5): ("6.1", "6.2"),
    (2, 6): ("6.1", "6.2.4"),
    (2, 7): ("6.3",),
    (2, 8): ("6.4",),
    (2, 9): ("6.4",),
    (2, 10): ("7.1",),
    (2, 11): ("7.2",),
    (2, 12): ("7.2",),
    (2, 13): ("7.2",),
}

XPU_WHEEL_MINORS: frozenset[tuple[int, int]] = frozenset((2, m) for m in range(5, 14))
XPU_FIRST_MINOR = (2, 5)

# PCI device ids (lower case, as sysfs writes them) of the Intel GPUs PyTorch's XPU builds support.
XPU_DEVICE_IDS: frozenset[str] = frozenset(
    f"0x{i:04x}"
    for i in (
        # DG2: Arc A-series (G10, G11, G12)
        *(0x56A0, 0x56A1, 0x56A2, 0x56BE, 0x56BF, 0x5690, 0x5691, 0x5692),
        *(0x56A5, 0x56A6, 0x56B0, 0x56B1, 0x56BA, 0x56BB, 0x56BC, 0x56BD, 0x5693, 0x5694, 0x5695),
        *(0x56A3, 0x56A4, 0x56B2, 0x56B3, 0x5696, 0x5697),
        # ATS-M: Data Center GPU Flex 170 / 140
        *(0x56C0, 0x56C2, 0x56C1),
        # PVC: Data Center GPU Max
        *(0x0B69, 0x0B6E, 0x0BD4, 0x0BD5, 0x0BD6, 0x0BD7, 0x0BD8, 0x0BD9, 0x0BDA, 0x0BDB),
        *(0x0BE0, 0x0BE1, 0x0BE5),
        # MTL: Meteor Lake; ARL: Arrow Lake; LNL: Lunar Lake
        *(0x7D40, 0x7D45, 0x7D55, 0x7D60, 0x7DD5),
        *(0x7D51, 0x7DD1, 0x7D41, 0x7D67, 0xB640),
        *(0x6420, 0x64A0, 0x64B0),
        # BMG: Arc B-series
        *(0xE202, 0xE209, 0xE20B, 0xE20C, 0xE20D, 0xE210, 0xE211, 0xE212, 0xE216),
        *(0xE220, 0xE221, 0xE222, 0xE223),
        # PTL: Panther Lake
        *(0xB080, 0xB081, 0xB082, 0xB083, 0xB084, 0xB085, 0xB086, 0xB087, 0xB08F, 0xB090, 0xB0A0, 0xB0B0),
    )
)

# A release's version, less a local label ("2.13.0+cpu" -> "2.13.0"), as wheels.py reads it.
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\+[\w.]+)?")


def _release(torch_version: str | None) -> tuple[str, tuple[int, int]] | None:
    m = _RELEASE.fullmatch(str(torch_version or "").strip())
    if m is None:
        return None
    return f"{m.group(1)}.{m.group(2)}.{m.group(3)}", (int(m.group(1)), int(m.group(2)))


def rocm_tag(rocm: str) -> str:
    return f"rocm{rocm}"


def rocm_wheel(torch_version: str | None) -> WheelChoice:
    """The ROCm index of `torch_version` to suggest: its newest ROCm; "unknown" for a minor the
    table lacks (or a dev build)."""
    found = _release(torch_version)
    if found is None:
        return NoWheel("unknown", str(torch_version or "?"), None)
    pin, minor = found
    rocms = ROCM_WHEELS.get(minor)
    if not rocms:
        return NoWheel("unknown", pin, None)
    return WheelIndex("index", pin, rocm_tag(rocms[-1]))


def xpu_wheel(torch_version: str | None) -> WheelChoice | None:
    """The XPU index for `torch_version` ("xpu"); "unknown" for a minor newer than the table (or a
    dev build); None for a torch older than the first XPU release (no XPU build of it exists)."""
    found = _release(torch_version)
    if found is None:
        return NoWheel("unknown", str(torch_version or "?"), None)
    pin, minor = found
    if minor < XPU_FIRST_MINOR:
        return None
    if minor not in XPU_WHEEL_MINORS:
        return NoWheel("unknown", pin, None)
    return WheelIndex("index", pin, "xpu")


def xpu_capable(device_id: str | None) -> bool:
    """An Intel GPU of this PCI device id ("0x56a0") runs PyTorch's XPU builds."""
    return bool(device_id) and str(device_id).strip().lower() in XPU_DEVICE_IDS
