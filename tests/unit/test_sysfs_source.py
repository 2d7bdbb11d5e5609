"""OS graphics devices from a fake /sys laid out (links included) like the kernel's."""

from __future__ import annotations

import os
from pathlib import Path

from hostfs.paths import HostPaths
from sidecar.sources.sysfs import SystemGpu, list_system_gpus
from tests.fakenvml import make_fake_sysfs

INTEL_IGPU = {
    "pci": "0000:00:02.0",
    "vendor": "0x8086",
    "device": "0x9a49",
    "class": "0x030000",
    "driver": "i915",
    "connectors": ["eDP-1", "HDMI-A-1"],
}
NVIDIA_DGPU = {
    "pci": "0000:01:00.0",
    "vendor": "0x10de",
    "device": "0x25a2",
    "class": "0x030200",  # 3D controller: the Optimus dGPU drives no display
    "driver": "nvidia",
}


def _sys(root) -> HostPaths:
    return HostPaths(sysfs=str(root))


def test_intel_plus_nvidia_laptop(tmp_path: Path):
    root = make_fake_sysfs(tmp_path / "sys", [INTEL_IGPU, NVIDIA_DGPU])
    assert list_system_gpus(host=_sys(root)) == [
        SystemGpu(
            vendor="Intel",
            vendor_id="0x8086",
            device_id="0x9a49",
            name="Intel integrated graphics",
            pci="0000:00:02.0",
            driver="i915",
            card="card0",
            pci_class="0x030000",
            integrated=True,
        ),
        SystemGpu(
            vendor="NVIDIA",
            vendor_id="0x10de",
            device_id="0x25a2",
            name="NVIDIA GPU",
            pci="0000:01:00.0",
            driver="nvidia",
            card="card1",
            pci_class="0x030200",
        ),
    ]
    # The connectors really are in the tree, next to the cards: they were skipped, not absent.
    assert (root / "class" / "drm" / "card0-eDP-1").is_dir()


def test_other_vendors_unbound_driver_and_card_order(tmp_path: Path):
    root = make_fake_sysfs(
        tmp_path / "sys",
        [
            {
                "card": "card10",
                "pci": "0000:0a:00.0",
                "vendor": "0x1002",
                "device": "0x73bf",
                "driver": "amdgpu",
            },
            {"card": "card2", "pci": "0000:03:00.0", "vendor": "0x10DE", "device": "0x1EB8", "driver": None},
            {"card": "card3", "pci": "0000:04:00.0", "vendor": "0x1a03", "device": "0x2000", "driver": "ast"},
        ],
    )
    gpus = list_system_gpus(host=_sys(root))
    assert [g.card for g in gpus] == ["card2", "card3", "card10"]  # numeric, not string, order
    nvidia, aspeed, amd = gpus
    # An NVIDIA card the kernel sees but no driver owns: the reason NVML finds nothing.
    assert (nvidia.vendor, nvidia.vendor_id, nvidia.device_id, nvidia.driver) == (
        "NVIDIA",
        "0x10de",
        "0x1eb8",
        None,
    )
    assert (aspeed.vendor, aspeed.name, aspeed.driver) == ("unknown (0x1a03)", "unknown GPU (0x1a03)", "ast")
    assert (amd.vendor, amd.name, amd.pci, amd.driver) == ("AMD", "AMD GPU", "0000:0a:00.0", "amdgpu")


def test_no_drm_directory_or_no_sysfs(tmp_path: Path):
    assert list_system_gpus(host=_sys(tmp_path)) == []  # a root without class/drm (a container)
    assert list_system_gpus(host=_sys(tmp_path / "does-not-exist")) == []
    assert list_system_gpus(host=_sys(make_fake_sysfs(tmp_path / "empty", []))) == []


def test_broken_entries_are_skipped(tmp_path: Path):
    root = make_fake_sysfs(
        tmp_path / "sys",
        [
            # simpledrm/efifb: a DRM card on a non-PCI device without a vendor file
            {"card": "card0", "pci": "simple-framebuffer.0", "vendor_file": False},
            {
                "card": "card1",
                "pci": "0000:00:02.0",
                "vendor": "0x8086",
                "device": "0x46a6",
                "driver": "i915",
            },
            {"card": "card2", "dangling": True},  # hot-unplugged while we listed
            {
                "card": "card3",
                "pci": "0000:01:00.0",
                "vendor": "0x10de",
                "device": "0x2684",
                "driver": "nvidia",
            },
        ],
    )
    drm = root / "class" / "drm"
    (drm / "card4").mkdir()  # a card directory without a device link
    (drm / "cardX").mkdir()  # not a card name at all
    (drm / "renderD128").mkdir()
    gpus = list_system_gpus(host=_sys(root))
    assert [(g.card, g.vendor, g.pci) for g in gpus] == [
        ("card1", "Intel", "0000:00:02.0"),
        ("card3", "NVIDIA", "0000:01:00.0"),
    ]


def test_unreadable_device_file_costs_only_that_field(tmp_path: Path):
    root = make_fake_sysfs(tmp_path / "sys", [NVIDIA_DGPU])
    device_file = root / "devices" / "pci0000:00" / "0000:01:00.0" / "device"
    device_file.unlink()
    os.mkdir(device_file)  # reading a directory fails like an unreadable attribute
    (gpu,) = list_system_gpus(host=_sys(root))
    assert (gpu.vendor, gpu.device_id, gpu.driver) == ("NVIDIA", None, "nvidia")


def test_fake_tree_resolves_like_the_kernels(tmp_path: Path):
    """The helper other tests rely on: cardN/device resolves to the PCI device directory."""
    root = make_fake_sysfs(tmp_path / "sys", [INTEL_IGPU])
    device = root / "class" / "drm" / "card0" / "device"
    assert device.resolve() == (root / "devices" / "pci0000:00" / "0000:00:02.0").resolve()
    assert os.readlink(device / "driver").endswith("bus/pci/drivers/i915")
    assert not os.path.isabs(os.readlink(root / "class" / "drm" / "card0"))  # relative, as in /sys


# --------------------------------------------------------------------------- names


def _amd(pci: str, card: str, product_name: str | None, driver: str = "amdgpu") -> dict:
    files = {} if product_name is None else {"product_name": product_name}
    return {
        "card": card,
        "pci": pci,
        "vendor": "0x1002",
        "device": "0x74a1",
        "driver": driver,
        "device_files": files,
    }


def test_an_amd_card_is_named_by_its_boards_product_name(tmp_path: Path):
    """amdgpu prints the FRU's product name on the boards that carry one (Instinct): that is the card's
    name. Where it prints none, or an empty line, or only junk, the generic name stays."""
    root = make_fake_sysfs(
        tmp_path / "sys",
        [
            _amd("0000:0c:00.0", "card0", "AMD Instinct MI300X OAM\n"),
            _amd("0000:1c:00.0", "card1", None),  # a Radeon: no FRU, no file (6.x kernels)
            _amd("0000:2c:00.0", "card2", "\n"),  # no FRU data on an older kernel: an empty line
            _amd("0000:3c:00.0", "card3", "\x1b[2J\x00\n"),  # nothing printable but "[2J"
            _amd("0000:4c:00.0", "card4", "\x00\x07\t \x1b\n"),  # nothing printable at all
            _amd("0000:5c:00.0", "card5", "AMD Instinct MI300X OAM\n", driver="radeon"),  # not amdgpu's file
        ],
    )
    names = [g.name for g in list_system_gpus(host=_sys(root))]
    assert names == ["AMD Instinct MI300X OAM", "AMD GPU", "AMD GPU", "[2J", "AMD GPU", "AMD GPU"]


def test_a_product_name_is_cleaned_and_bounded(tmp_path: Path):
    """The name is an EEPROM's bytes shown on a page, in /metrics labels and to an agent: control
    characters (an escape, a bidi override as raw bytes) go, a tab or line break is a space, runs of
    spaces become one,
    at most 64 characters (amdgpu's own field's size); a file over a page is not read at all."""
    hostile = "\x1b[31mAMD\tInstinct\u202e MI300X\r\nOAM  " + "X" * 200 + "\n"
    root = make_fake_sysfs(
        tmp_path / "sys",
        [
            _amd("0000:0c:00.0", "card0", hostile),
            _amd("0000:1c:00.0", "card1", "A" * 5000),
        ],
    )
    first, huge = list_system_gpus(host=_sys(root))
    assert first.name.startswith("[31mAMD Instinct MI300X OAM X") and len(first.name) == 64, first.name
    assert all(" " <= ch <= "~" for ch in first.name) and "  " not in first.name
    assert huge.name == "AMD GPU"


def test_only_intels_integrated_device_is_called_integrated(tmp_path: Path):
    """Intel's iGPU sits at bus 0, device 2 (its SR-IOV virtual functions at 00:02.1-7); an Arc or Data
    Center GPU is on a bus of its own, whichever driver (i915, xe) drives it: never "integrated"."""
    intel = {"vendor": "0x8086", "class": "0x030000"}
    root = make_fake_sysfs(
        tmp_path / "sys",
        [
            {**intel, "card": "card0", "pci": "0000:00:02.0", "device": "0x7d55", "driver": "xe"},
            {**intel, "card": "card1", "pci": "0000:00:02.1", "device": "0xa7a0", "driver": "i915"},  # a VF
            {
                **intel,
                "card": "card2",
                "pci": "0000:03:00.0",
                "device": "0x56a0",
                "driver": "i915",
            },  # Arc A770
            {**intel, "card": "card3", "pci": "0000:83:00.0", "device": "0xe20b", "driver": "xe"},  # Arc B580
            {
                **intel,
                "card": "card4",
                "pci": "0000:3a:00.0",
                "device": "0x0bd5",
                "driver": "i915",
                "class": "0x038000",
            },  # Max 1550
            {
                **intel,
                "card": "card5",
                "pci": "0000:00:04.0",
                "device": "0x56a0",
                "driver": "i915",
            },  # bus 0, not device 2
        ],
    )
    names = [(g.pci, g.name) for g in list_system_gpus(host=_sys(root))]
    assert names == [
        ("0000:00:02.0", "Intel integrated graphics"),
        ("0000:00:02.1", "Intel integrated graphics"),
        ("0000:03:00.0", "Intel GPU"),
        ("0000:83:00.0", "Intel GPU"),
        ("0000:3a:00.0", "Intel GPU"),
        ("0000:00:04.0", "Intel GPU"),
    ]
