"""Graphics devices the operating system sees, from /sys/class/drm.

NVML only knows NVIDIA GPUs. On a laptop with Intel or AMD integrated graphics beside an NVIDIA
card, or a machine whose NVIDIA card has no driver bound, only the kernel's view tells the whole
story ("your GPU is there but nouveau owns it", "this laptop has only Intel graphics").

`list_system_gpus()` never raises; the tree read is ``host``'s sysfs (hostfs.paths: --path.sysfs),
the host's own /sys by default (tests build fake trees with `tests.fakenvml.make_fake_sysfs`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths

VENDORS = {"0x10de": "NVIDIA", "0x8086": "Intel", "0x1002": "AMD"}
_GENERIC_NAMES = {
    "NVIDIA": "NVIDIA GPU",
    "Intel": "Intel integrated graphics",
    "AMD": "AMD GPU",
}
# card0, card1, ...; not connectors (card0-HDMI-A-1) or render nodes (renderD128).
_CARD = re.compile(r"card\d+")
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True)
class SystemGpu:
    vendor: str  # "NVIDIA", "Intel", "AMD" or "unknown (0x1234)"
    vendor_id: str  # as the kernel writes it: "0x10de"
    device_id: str | None  # "0x2204"
    name: str  # generic ("NVIDIA GPU"): the kernel has no marketing names
    pci: str | None  # "0000:01:00.0", the device link's target
    driver: str | None  # bound kernel driver ("nvidia", "nouveau", "i915", "amdgpu"); None: unbound
    card: str = ""  # "card0"
    pci_class: str | None = None  # "0x030000" VGA, "0x030200" 3D controller (the Optimus dGPU)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _pci_address(device: str) -> str | None:
    address = os.path.basename(os.path.realpath(device)).lower()
    return address if _PCI_ADDRESS.fullmatch(address) else None


def _card_number(name: str) -> int:
    return int(name[4:])


def list_system_gpus(*, host: HostPaths = HOST) -> list[SystemGpu]:
    """Every DRM card backed by a device with a vendor id, in card order; [] when none or no /sys."""
    base = host.sys_path("class", "drm")
    try:
        names = [n for n in os.listdir(base) if _CARD.fullmatch(n)]
    except OSError:
        return []
    out: list[SystemGpu] = []
    seen_pci: set[str] = set()
    for name in sorted(names, key=_card_number):
        try:
            gpu = _read_card(os.path.join(base, name, "device"), name)
        except Exception:  # noqa: BLE001 -- one odd entry (permissions, a racing hot-unplug) must not hide the others
            gpu = None
        if gpu is None:
            continue
        if gpu.pci is not None:
            if gpu.pci in seen_pci:
                continue  # one device, two cards (rare: a second DRM driver on the same function)
            seen_pci.add(gpu.pci)
        out.append(gpu)
    return out


def _read_card(device: str, card: str) -> SystemGpu | None:
    vendor_id = _read(os.path.join(device, "vendor"))
    if vendor_id is None:
        # No vendor: a dangling link, or a firmware framebuffer (simpledrm, efifb) that is not a
        # PCI device and not a GPU anyone can compute on.
        return None
    vendor_id = vendor_id.lower()
    device_id = _read(os.path.join(device, "device"))
    vendor = VENDORS.get(vendor_id, f"unknown ({vendor_id})")
    driver_link = os.path.join(device, "driver")
    try:
        driver = os.path.basename(os.readlink(driver_link))
    except OSError:
        driver = None  # no driver bound: the hardware is there, nothing drives it
    return SystemGpu(
        vendor=vendor,
        vendor_id=vendor_id,
        device_id=device_id.lower() if device_id else None,
        name=_GENERIC_NAMES.get(vendor, f"unknown GPU ({vendor_id})"),
        pci=_pci_address(device),
        driver=driver,
        card=card,
        pci_class=_read(os.path.join(device, "class")),
    )


def listdir_bounded(path: str, limit: int) -> list[str]:
    """Up to ``limit`` names in ``path`` (a /sys folder, whose size no one bounds for us), sorted; [] when it is gone or unreadable."""
    out: list[str] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                out.append(entry.name)
                if len(out) >= limit:
                    break
    except OSError:
        return []
    return sorted(out)
