"""Device figures of AMD and Intel cards from a fixture /sys (sidecar/sources/gpu_sysfs.py): amdgpu's
device files and hwmon (an MI300X without edge sensor, a Radeon, a GTT-only APU), i915's and xe's
clocks, throttle reasons and hwmon, power from an energy counter over two readings, and the files a
broken or hostile tree holds (absent, malformed, oversized, links, loops, a FIFO)."""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from pathlib import Path

import pytest

from hostfs.paths import HostPaths
from sidecar.sources.gpu_sysfs import (
    GpuFiguresSampler,
    GpuSysfsFigures,
    TemperatureReading,
    parse_dpm_levels,
    read_all_gpu_figures,
    read_gpu_figures,
)
from sidecar.sources.sysfs import MAX_FILE_BYTES, list_system_gpus
from tests.fakenvml import make_fake_sysfs
from tests.helpers.gpu_sysfs_trees import APU, I915_IGPU, MI300X, RADEON, XE_DGPU

NVIDIA = {"card": "card2", "pci": "0000:41:00.0", "vendor": "0x10de", "device": "0x2330", "driver": "nvidia"}


def _tree(tmp_path: Path, *cards) -> HostPaths:
    return HostPaths(sysfs=str(make_fake_sysfs(tmp_path / "sys", [copy.deepcopy(c) for c in cards])))


def _one(host: HostPaths) -> GpuSysfsFigures:
    (figures,) = read_all_gpu_figures(host=host)
    return figures


def test_mi300x_every_figure_and_no_edge_sensor(tmp_path):
    host = _tree(tmp_path, RADEON, MI300X, NVIDIA)
    radeon, mi300x = read_all_gpu_figures(host=host)  # NVIDIA's card is NVML's: left out
    assert mi300x == GpuSysfsFigures(
        card="card1",
        pci="0000:c1:00.0",
        vendor="AMD",
        driver="amdgpu",
        hwmon="amdgpu",
        busy_pct=87.0,
        memory_busy_pct=34.0,
        vram_total_mib=196608.0,
        vram_used_mib=81920.0,
        visible_vram_total_mib=196608.0,
        visible_vram_used_mib=81920.0,
        gtt_total_mib=491520.0,
        gtt_used_mib=1024.0,
        power_w=412.0,
        power_source="power1_input",
        power_limit_w=750.0,
        temperatures=(TemperatureReading("junction", 61.0), TemperatureReading("mem", 48.0)),
        gfx_clock_mhz=1311.0,  # hwmon's measured sclk, not the DPM level's 1300
        gfx_clock_max_mhz=2100.0,
        gfx_dpm_level="1",
        mem_clock_mhz=1300.0,
        mem_clock_max_mhz=1300.0,
        unique_id="5e2f0b4a9c3d1e77",
        product_name="AMD Instinct MI300X OAM",
        link_speed_gts=32.0,
        link_width=16,
        link_max_speed_gts=32.0,
        link_max_width=16,
    )
    # No edge sensor: the die's temperature is the junction's; the memory's stays apart.
    assert (mi300x.temperature_c, mi300x.hotspot_temperature_c, mi300x.memory_temperature_c) == (
        61.0,
        61.0,
        48.0,
    )
    assert (mi300x.throttled, mi300x.throttle_reasons, mi300x.energy_uj) == (None, None, None)
    # The Radeon: power1_average preferred over power1_input, edge is the die's temperature.
    assert (radeon.power_w, radeon.power_source, radeon.power_limit_w) == (35.0, "power1_average", 327.0)
    assert (radeon.temperature_c, radeon.hotspot_temperature_c, radeon.memory_temperature_c) == (
        45.0,
        52.0,
        58.0,
    )
    assert (radeon.visible_vram_total_mib, radeon.visible_vram_used_mib, radeon.gtt_used_mib) == (
        256.0,
        128.0,
        48.0,
    )
    assert (radeon.gfx_dpm_level, radeon.mem_clock_mhz, radeon.mem_clock_max_mhz) == ("2", 96.0, 1249.0)
    assert (radeon.unique_id, radeon.product_name) == (None, None)


def test_apu_gtt_holds_the_working_set(tmp_path):
    apu = _one(_tree(tmp_path, APU))
    assert (apu.vram_total_mib, apu.vram_used_mib, apu.gtt_total_mib, apu.gtt_used_mib) == (
        512.0,
        256.0,
        16384.0,
        6144.0,
    )
    assert (apu.visible_vram_total_mib, apu.mem_clock_mhz, apu.power_limit_w) == (None, None, None)
    # Deep sleep is the starred level; with no hwmon clock the level's own is the clock.
    assert (apu.gfx_dpm_level, apu.gfx_clock_mhz, apu.gfx_clock_max_mhz) == ("S", 400.0, 2700.0)
    assert (apu.busy_pct, apu.power_w, apu.power_source, apu.temperature_c) == (
        12.0,
        18.0,
        "power1_input",
        55.0,
    )
    assert apu.link_speed_gts is None  # an integrated part has no PCIe link files


def test_i915_igpu_clocks_and_throttle_reasons(tmp_path):
    igpu = _one(_tree(tmp_path, I915_IGPU))
    assert igpu == GpuSysfsFigures(
        card="card0",
        pci="0000:00:02.0",
        vendor="Intel",
        driver="i915",
        gfx_clock_mhz=300.0,
        gfx_clock_max_mhz=1350.0,  # RP0, the hardware's, not the 1300 requested
        throttled=True,
        throttle_reasons=("pl1", "thermal"),
    )
    assert (igpu.temperature_c, igpu.power_w) == (None, None)  # no hwmon on an integrated i915


def test_i915_older_kernel_card_files_and_dgpu_hwmon_choice(tmp_path):
    old = copy.deepcopy(I915_IGPU)
    old["card_files"] = {k: v for k, v in old["card_files"].items() if not k.startswith("gt/")}
    old["card_files"]["gt_act_freq_mhz"] = "0\n"  # asleep in RC6: a real 0 MHz
    dg2 = {
        "card": "card1",
        "pci": "0000:03:00.0",
        "vendor": "0x8086",
        "device": "0x56a0",
        "driver": "i915",
        "card_files": {"lmem_total_bytes": f"{16 * 1024**3}\n"},
        # The GT's hwmon comes first by number; the device's ("i915") is the card's.
        "hwmon": [
            {"name": "i915_gt0\n", "energy1_input": "5\n"},
            {"name": "i915\n", "energy1_input": "777\n", "power1_max": "0\n"},
        ],
    }
    igpu, arc = read_all_gpu_figures(host=_tree(tmp_path, old, dg2))
    assert (igpu.gfx_clock_mhz, igpu.gfx_clock_max_mhz, igpu.throttled, igpu.throttle_reasons) == (
        0.0,
        1350.0,
        None,
        None,
    )
    assert (arc.hwmon, arc.energy_uj, arc.energy_source, arc.vram_total_mib) == (
        "i915",
        777,
        "energy1_input",
        16384.0,
    )
    assert (arc.power_limit_w, arc.power_w, arc.vram_used_mib) == (None, None, None)  # PL1 0 = disabled


def test_xe_dgpu_power_from_two_energy_readings(tmp_path):
    host = _tree(tmp_path, XE_DGPU)
    now = [10_000_000_000]
    sampler = GpuFiguresSampler(host=host, clock_ns=lambda: now[0])
    (first,) = sampler.sample()
    assert (first.power_w, first.power_source, first.energy_uj) == (None, None, 123456789)
    assert (first.gfx_clock_mhz, first.gfx_clock_max_mhz, first.throttled, first.throttle_reasons) == (
        2850.0,
        2850.0,
        False,
        (),
    )
    assert (first.vram_total_mib, first.vram_used_mib, first.power_limit_w) == (12288.0, None, 190.0)
    assert first.temperatures == (TemperatureReading("pkg", 54.0), TemperatureReading("vram", 62.0))
    assert (first.temperature_c, first.memory_temperature_c, first.link_width) == (54.0, 62.0, 1)

    energy = (
        Path(host.sysfs) / "devices" / "pci0000:00" / "0000:04:00.0" / "hwmon" / "hwmon0" / "energy1_input"
    )
    energy.write_text(f"{123456789 + 45_000_000}\n")  # 45 J
    now[0] += 500_000_000  # in 0.5 s
    (second,) = sampler.sample()
    assert (second.power_w, second.power_source) == (90.0, "energy1_input")

    energy.write_text("1000\n")  # the driver was reloaded: the counter restarted
    now[0] += 500_000_000
    (third,) = sampler.sample()
    assert third.power_w is None
    energy.write_text(f"{1000 + 30_000_000}\n")
    now[0] += 1_000_000_000
    (fourth,) = sampler.sample()
    assert fourth.power_w == 30.0  # from the restarted counter on


def test_xe_vram_is_every_tiles_or_none(tmp_path):
    two_tiles = copy.deepcopy(XE_DGPU)
    two_tiles["device_files"]["tile1/physical_vram_size_bytes"] = f"{4 * 1024**3}\n"
    one_unknown = copy.deepcopy(XE_DGPU)
    one_unknown["card"], one_unknown["pci"] = "card2", "0000:05:00.0"
    one_unknown["device_files"]["tile1/gt2/freq0/act_freq"] = "1\n"  # a tile without its size file
    both, partial = read_all_gpu_figures(host=_tree(tmp_path, two_tiles, one_unknown))
    assert (both.vram_total_mib, partial.vram_total_mib) == (16384.0, None)


def test_sampler_no_time_passed_forgotten_cards_and_direct_power(tmp_path):
    host = _tree(tmp_path, RADEON, XE_DGPU)
    sampler = GpuFiguresSampler(host=host, clock_ns=lambda: 0)
    radeon, xe = read_all_gpu_figures(host=host)
    assert sampler.sample_figures([radeon, xe], 5)[0].power_w == 35.0  # a card's own power passes untouched
    assert sampler.sample_figures([xe], 5)[0].power_w is None  # no time passed
    sampler.sample_figures([radeon], 6)  # the xe card went away: its mark is forgotten
    assert sampler.sample_figures([xe], 1_000_000_000)[0].power_w is None
    # A card that reads its power and also counts energy: the reading is kept, not the counter's.
    both = [replace(radeon, energy_uj=e, energy_source="energy1_input") for e in (0, 10**9)]
    sampler.sample_figures(both[:1], 0)
    assert sampler.sample_figures(both[1:], 1_000_000_000)[0].power_w == 35.0


def test_unlabelled_hwmon_uses_the_documented_channels(tmp_path):
    old_amd = copy.deepcopy(RADEON)
    old_amd["hwmon"] = [{"name": "amdgpu\n", "temp1_input": "40000\n", "temp2_input": "47000\n"}]
    nouveau = {
        "card": "card1",
        "pci": "0000:02:00.0",
        "vendor": "0x10de",
        "device": "0x1eb8",
        "driver": "nouveau",
    }
    nouveau["hwmon"] = [{"name": "nouveau\n", "temp1_input": "39000\n", "power1_input": "21000000\n"}]
    amd, nv = read_all_gpu_figures(host=_tree(tmp_path, old_amd, nouveau))
    assert amd.temperatures == (TemperatureReading("edge", 40.0), TemperatureReading("junction", 47.0))
    assert (amd.temperature_c, amd.hotspot_temperature_c) == (40.0, 47.0)
    # A driver without documented channels: named by channel, and still the die's temperature.
    assert nv.temperatures == (TemperatureReading("temp1", 39.0),)
    assert (nv.temperature_c, nv.power_w, nv.busy_pct) == (39.0, 21.0, None)


def test_missing_malformed_and_oversized_files_are_none(tmp_path):
    card = copy.deepcopy(RADEON)
    card["device_files"].update(
        {
            "gpu_busy_percent": "busy\n",
            "mem_busy_percent": "250\n",  # not a percentage
            "mem_info_vram_total": "-5\n",
            "mem_info_vram_used": "1073741824"
            + " " * MAX_FILE_BYTES
            + "\n",  # over the cap: no prefix is trusted
            "mem_info_gtt_used": "",
            "pp_dpm_sclk": "0: 500Mhz *\n1: 2482Mhz *\n",  # two current levels: none is
            "pp_dpm_mclk": "garbage\n0: 96Mhz *\n",
            "unique_id": "not-hex!\n",
            "product_name": "\x1b[31mRadeon\x00 Pro\n",
            "current_link_speed": "Unknown\n",
            "current_link_width": "0\n",
        }
    )
    del card["device_files"]["mem_info_vis_vram_total"]
    card["hwmon"] = [
        {
            "name": "amdgpu\n",
            "temp1_input": "99999999\n",  # 100 000 °C: not a reading
            "temp1_label": "edge\n",
            "temp2_input": "52000\n",
            "temp2_label": "junction\n",
            "power1_average": "-1\n",
            "power1_input": "36000000\n",
            "power1_cap": "x\n",
            "freq1_input": "\n",
        }
    ]
    f = _one(_tree(tmp_path, card))
    assert (f.busy_pct, f.memory_busy_pct, f.vram_total_mib, f.vram_used_mib, f.gtt_used_mib) == (None,) * 5
    assert (f.visible_vram_total_mib, f.visible_vram_used_mib, f.gtt_total_mib) == (None, 128.0, 32768.0)
    assert (f.gfx_dpm_level, f.gfx_clock_mhz, f.gfx_clock_max_mhz) == (None, None, 2482.0)
    assert (f.mem_clock_mhz, f.mem_clock_max_mhz, f.unique_id) == (None, None, None)
    assert f.product_name == "[31mRadeon Pro"  # control characters dropped
    assert (f.link_speed_gts, f.link_width, f.link_max_speed_gts, f.link_max_width) == (None, None, 16.0, 16)
    assert f.temperatures == (TemperatureReading("junction", 52.0),)
    assert (f.temperature_c, f.power_w, f.power_source, f.power_limit_w) == (52.0, 36.0, "power1_input", None)


def test_links_loops_fifos_and_paths_outside_the_root(tmp_path):
    card = copy.deepcopy(RADEON)
    card["device_files"]["gpu_busy_percent"] = "3\n"
    host = _tree(tmp_path, card)
    root = Path(host.sysfs)
    device = root / "devices" / "pci0000:00" / "0000:03:00.0"
    outside = tmp_path / "secret"
    outside.write_text("42\n")
    (device / "gpu_busy_percent").unlink()
    (device / "gpu_busy_percent").symlink_to(outside)  # an attribute is never a link
    (device / "mem_busy_percent").unlink(missing_ok=True)
    os.mkfifo(device / "mem_busy_percent")  # opening it for reading would block
    hwmon = device / "hwmon"
    (hwmon / "hwmon0").rename(hwmon / "hwmon7")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "name").write_text("amdgpu\n")
    (planted / "temp1_input").write_text("99000\n")
    (hwmon / "hwmon2").symlink_to(planted)  # first by number, and named as the driver: a link all the same
    (hwmon / "hwmon3").symlink_to(hwmon)  # a loop among the hwmon folders
    (hwmon / "hwmon1").symlink_to("hwmon1")  # and one onto itself
    (f,) = read_all_gpu_figures(host=host)
    assert (f.busy_pct, f.memory_busy_pct, f.hwmon, f.temperature_c) == (None, None, "amdgpu", 45.0)

    gpus = list_system_gpus(host=host)
    drm = root / "class" / "drm"
    (drm / "card0" / "device").unlink()
    (drm / "card0" / "device").symlink_to(tmp_path)  # a device outside the sysfs root
    assert read_gpu_figures(gpus[0], host=host) is None
    (drm / "card0").unlink()
    (drm / "card0").symlink_to("card0")  # a card link looping onto itself
    assert read_gpu_figures(gpus[0], host=host) is None
    assert read_all_gpu_figures(host=host) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0: 500Mhz\n1: 800Mhz *\n2: 1000Mhz\n", ("1", 800.0, 1000.0)),
        ("0: 96Mhz *\n1: 456Mhz \n", ("0", 96.0, 456.0)),
        ("S: 400Mhz *\n0: 800Mhz\n1: 2700Mhz\n", ("S", 400.0, 2700.0)),
        ("0: 500MHz\n1: 900MHz\n", (None, None, 900.0)),  # no current level starred
    ],
)
def test_dpm_levels(text, expected):
    levels = parse_dpm_levels(text)
    assert levels is not None
    assert (levels.current_level, levels.current_mhz, levels.max_mhz) == expected
    assert parse_dpm_levels("") is None
    assert parse_dpm_levels("0: fast *\n") is None
