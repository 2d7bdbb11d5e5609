"""Graphics devices the operating system sees, from /sys/class/drm.

NVML only knows NVIDIA GPUs. On a laptop with Intel or AMD integrated graphics beside an NVIDIA
card, or a machine whose NVIDIA card has no driver bound, only the kernel's view tells the whole
story ("your GPU is there but nouveau owns it", "this laptop has only Intel graphics").

The kernel knows no marketing names but one: amdgpu prints the board's FRU product name on the
cards that carry one (``product_name``: Instinct and some Radeon Pro boards; the string cached at
probe, so reading it wakes no suspended card). Every other card gets a generic name: its vendor's,
and an Intel GPU's says "integrated" only where it is one (``_intel_integrated``).

`list_system_gpus()` never raises; the tree read is ``host``'s sysfs (hostfs.paths: --path.sysfs),
the host's own /sys by default (tests build fake trees with `tests.fakenvml.make_fake_sysfs`).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths

VENDORS = {"0x10de": "NVIDIA", "0x8086": "Intel", "0x1002": "AMD"}
_GENERIC_NAMES = {
    "NVIDIA": "NVIDIA GPU",
    "Intel": "Intel GPU",
    "AMD": "AMD GPU",
}
INTEL_INTEGRATED_NAME = "Intel integrated graphics"
# Intel's integrated graphics device is at a fixed address: bus 0, device 2 (function 0; its SR-IOV
# virtual functions 1-7), on the root complex of the CPU or SoC that holds it (Intel's datasheets:
# "Integrated Graphics Device, Bus 0, Device 2"; the kernel's early quirks look for it on bus 0,
# QEMU's IGD passthrough at 00:02.0). A discrete card (Arc, Data Center GPU Flex or Max) is a PCIe endpoint behind a
# root port and its own switch, on a bus of its own: never 00:02. The address, not a memory figure:
# mainline i915 prints no local-memory size, and the cards are listed before any figure is read.
_INTEL_INTEGRATED_SLOT = re.compile(r"0000:00:02\.[0-7]")
MAX_FILE_BYTES = 4096  # a sysfs attribute is at most a page; pp_dpm_sclk is ~100 bytes
MAX_PRODUCT_NAME = 64  # amdgpu's FRU product name field is at most 64 bytes (63 and a NUL)
# card0, card1, ...; not connectors (card0-HDMI-A-1) or render nodes (renderD128).
_CARD = re.compile(r"card\d+")
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True)
class SystemGpu:
    vendor: str  # "NVIDIA", "Intel", "AMD" or "unknown (0x1234)"
    vendor_id: str  # as the kernel writes it: "0x10de"
    device_id: str | None  # "0x2204"
    name: str  # amdgpu's product_name where it prints one, else generic ("AMD GPU", "Intel GPU")
    pci: str | None  # "0000:01:00.0", the device link's target
    driver: str | None  # bound kernel driver ("nvidia", "nouveau", "i915", "amdgpu"); None: unbound
    card: str = ""  # "card0"
    pci_class: str | None = None  # "0x030000" VGA, "0x030200" 3D controller (the Optimus dGPU)
    # Intel: at its integrated graphics device's address, 00:02 (True), or elsewhere (False: a
    # discrete card, or an iGPU a VM was given at another address); None for the others (an AMD
    # APU's address does not say, and the listing reads no figure)
    integrated: bool | None = None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def read_bytes_bounded(path: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """A regular file's bytes, at most ``limit``; None when absent, a link, not a regular file
    (a FIFO would block an open without O_NONBLOCK), unreadable or longer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    if size > limit:
        return None
    return b"".join(chunks)


def read_text_bounded(path: str) -> str | None:
    """A regular file's text, at most MAX_FILE_BYTES (``read_bytes_bounded``), as ASCII."""
    data = read_bytes_bounded(path)
    return None if data is None else data.decode("ascii", errors="replace")


def text_value(path: str, limit: int) -> str | None:
    """A short printable ASCII string (control and other characters dropped), clipped; None if empty."""
    text = read_text_bounded(path)
    if text is None:
        return None
    kept = "".join(ch for ch in text.strip() if " " <= ch <= "~")
    return kept[:limit] or None


def read_product_name(device: str) -> str | None:
    """amdgpu's ``device/product_name`` as a name to show: printable ASCII (an escape sequence, a NUL
    or a byte outside ASCII is data from a board's EEPROM, not text: dropped; a tab or a line break
    is a space), runs of spaces made one, at most MAX_PRODUCT_NAME characters; None when absent or
    empty (amdgpu prints an empty line for a board without FRU data)."""
    text = read_text_bounded(os.path.join(device, "product_name"))
    if text is None:
        return None
    kept = "".join(ch if " " <= ch <= "~" else " " if ch in "\t\n\r\v\f" else "" for ch in text)
    return " ".join(kept.split())[:MAX_PRODUCT_NAME].rstrip() or None


def _intel_integrated(pci: str | None) -> bool:
    return pci is not None and _INTEL_INTEGRATED_SLOT.fullmatch(pci) is not None


def _card_name(vendor: str, vendor_id: str, device: str, driver: str | None, pci: str | None) -> str:
    if vendor == "AMD" and driver == "amdgpu":
        product = read_product_name(device)
        if product is not None:
            return product
    if vendor == "Intel" and _intel_integrated(pci):
        return INTEL_INTEGRATED_NAME
    return _GENERIC_NAMES.get(vendor, f"unknown GPU ({vendor_id})")


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
    pci = _pci_address(device)
    return SystemGpu(
        vendor=vendor,
        vendor_id=vendor_id,
        device_id=device_id.lower() if device_id else None,
        name=_card_name(vendor, vendor_id, device, driver, pci),
        pci=pci,
        driver=driver,
        card=card,
        pci_class=_read(os.path.join(device, "class")),
        integrated=_intel_integrated(pci) if vendor == "Intel" else None,
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
