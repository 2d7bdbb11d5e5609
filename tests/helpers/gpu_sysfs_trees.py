"""AMD and Intel cards for `tests.fakenvml.make_fake_sysfs`, with the device files their drivers print.

Formats follow the kernel's: amdgpu's `amdgpu_pm.c` (DOC hwmon, pp_dpm_*: `<level>: <n>Mhz`, the current
level starred; "S" is deep sleep), `amdgpu_vram_mgr.c`/`amdgpu_gtt_mgr.c` (bytes); i915's
`intel_gt_sysfs_pm.c` (`rps_*_freq_mhz`, `throttle_reason_*` 0/1) and hwmon ABI
(`sysfs-driver-intel-i915-hwmon`); xe's `xe_gt_freq.c`, `xe_gt_throttle.c`, `xe_tile_sysfs.c` and
hwmon ABI (`sysfs-driver-intel-xe-hwmon`); PCI's `current_link_speed` ("32.0 GT/s PCIe"). The figures
are plausible for each part, not copied from a machine: tests compare against the numbers here.
"""

from __future__ import annotations

from typing import Any

GIB = 1024**3

MI300X: dict[str, Any] = {
    "card": "card1",
    "pci": "0000:c1:00.0",
    "vendor": "0x1002",
    "device": "0x74a1",
    "class": "0x038000",
    "driver": "amdgpu",
    "device_files": {
        "gpu_busy_percent": "87\n",
        "mem_busy_percent": "34\n",
        "mem_info_vram_total": f"{192 * GIB}\n",
        "mem_info_vram_used": f"{80 * GIB}\n",
        "mem_info_vis_vram_total": f"{192 * GIB}\n",  # large BAR: all of it is visible
        "mem_info_vis_vram_used": f"{80 * GIB}\n",
        "mem_info_gtt_total": f"{480 * GIB}\n",
        "mem_info_gtt_used": f"{1 * GIB}\n",
        "pp_dpm_sclk": "0: 500Mhz\n1: 1300Mhz *\n2: 2100Mhz\n",
        "pp_dpm_mclk": "0: 900Mhz\n1: 1300Mhz *\n",
        "unique_id": "5e2f0b4a9c3d1e77\n",
        "product_name": "AMD Instinct MI300X OAM\n",
        "current_link_speed": "32.0 GT/s PCIe\n",
        "current_link_width": "16\n",
        "max_link_speed": "32.0 GT/s PCIe\n",
        "max_link_width": "16\n",
    },
    "hwmon": [
        {
            "name": "amdgpu\n",
            # temp1 (edge) is hidden on GC 9.4.3: junction and memory only.
            "temp2_input": "61000\n",
            "temp2_label": "junction\n",
            "temp3_input": "48000\n",
            "temp3_label": "mem\n",
            "power1_input": "412000000\n",  # no power1_average on this part
            "power1_cap": "750000000\n",
            "freq1_input": "1311000000\n",
            "freq1_label": "sclk\n",
            "freq2_input": "1300000000\n",
            "freq2_label": "mclk\n",
        }
    ],
}

RADEON: dict[str, Any] = {
    "card": "card0",
    "pci": "0000:03:00.0",
    "vendor": "0x1002",
    "device": "0x744c",
    "driver": "amdgpu",
    "device_files": {
        "gpu_busy_percent": "3\n",
        "mem_info_vram_total": f"{24 * GIB}\n",
        "mem_info_vram_used": f"{2 * GIB}\n",
        "mem_info_vis_vram_total": "268435456\n",  # a 256 MiB BAR
        "mem_info_vis_vram_used": "134217728\n",
        "mem_info_gtt_total": f"{32 * GIB}\n",
        "mem_info_gtt_used": "50331648\n",
        "pp_dpm_sclk": "0: 500Mhz \n1: 1200Mhz \n2: 2482Mhz *\n",
        "pp_dpm_mclk": "0: 96Mhz *\n1: 456Mhz \n2: 1249Mhz \n",
        "current_link_speed": "16.0 GT/s PCIe\n",
        "current_link_width": "16\n",
        "max_link_speed": "16.0 GT/s PCIe\n",
        "max_link_width": "16\n",
    },
    "hwmon": [
        {
            "name": "amdgpu\n",
            "temp1_input": "45000\n",
            "temp1_label": "edge\n",
            "temp2_input": "52000\n",
            "temp2_label": "junction\n",
            "temp3_input": "58000\n",
            "temp3_label": "mem\n",
            "power1_average": "35000000\n",
            "power1_input": "36000000\n",
            "power1_cap": "327000000\n",
            "freq1_input": "2482000000\n",
            "freq2_input": "96000000\n",
        }
    ],
}

# A Ryzen APU's Radeon: a 512 MiB carve-out, the working set in GTT, deep sleep now.
APU: dict[str, Any] = {
    "card": "card0",
    "pci": "0000:c4:00.0",
    "vendor": "0x1002",
    "device": "0x15bf",
    "driver": "amdgpu",
    "device_files": {
        "gpu_busy_percent": "12\n",
        "mem_info_vram_total": "536870912\n",
        "mem_info_vram_used": "268435456\n",
        "mem_info_gtt_total": f"{16 * GIB}\n",
        "mem_info_gtt_used": f"{6 * GIB}\n",
        "pp_dpm_sclk": "S: 400Mhz *\n0: 800Mhz\n1: 2700Mhz\n",
    },
    "hwmon": [
        {"name": "amdgpu\n", "temp1_input": "55000\n", "temp1_label": "edge\n", "power1_input": "18000000\n"}
    ],
}

I915_IGPU: dict[str, Any] = {
    "card": "card0",
    "pci": "0000:00:02.0",
    "vendor": "0x8086",
    "device": "0x9a49",
    "driver": "i915",
    "card_files": {
        "gt_act_freq_mhz": "300\n",
        "gt_cur_freq_mhz": "350\n",
        "gt_max_freq_mhz": "1350\n",
        "gt_RP0_freq_mhz": "1350\n",
        "gt/gt0/rps_act_freq_mhz": "300\n",
        "gt/gt0/rps_cur_freq_mhz": "350\n",
        "gt/gt0/rps_max_freq_mhz": "1300\n",  # the user's request, below the hardware's RP0
        "gt/gt0/rps_RP0_freq_mhz": "1350\n",
        "gt/gt0/throttle_reason_status": "1\n",
        "gt/gt0/throttle_reason_pl1": "1\n",
        "gt/gt0/throttle_reason_pl2": "0\n",
        "gt/gt0/throttle_reason_pl4": "0\n",
        "gt/gt0/throttle_reason_thermal": "1\n",
        "gt/gt0/throttle_reason_prochot": "0\n",
        "gt/gt0/throttle_reason_ratl": "0\n",
        "gt/gt0/throttle_reason_vr_thermalert": "0\n",
        "gt/gt0/throttle_reason_vr_tdc": "0\n",
    },
}

XE_DGPU: dict[str, Any] = {
    "card": "card1",
    "pci": "0000:04:00.0",
    "vendor": "0x8086",
    "device": "0xe20b",
    "driver": "xe",
    "device_files": {
        "tile0/physical_vram_size_bytes": f"{12 * GIB}\n",
        "tile0/gt0/freq0/act_freq": "2850\n",
        "tile0/gt0/freq0/cur_freq": "2850\n",
        "tile0/gt0/freq0/rp0_freq": "2850\n",
        "tile0/gt0/freq0/max_freq": "2850\n",
        "tile0/gt0/freq0/min_freq": "400\n",
        "tile0/gt0/freq0/throttle/status": "0\n",
        "tile0/gt0/freq0/throttle/reason_pl1": "0\n",
        "tile0/gt0/freq0/throttle/reason_pl2": "0\n",
        "tile0/gt0/freq0/throttle/reason_thermal": "0\n",
        "tile0/gt1/freq0/act_freq": "1000\n",  # the media GT
        "current_link_speed": "2.5 GT/s PCIe\n",  # the card's own link to its on-board switch
        "current_link_width": "1\n",
    },
    "hwmon": [
        {
            "name": "xe\n",
            "energy1_input": "123456789\n",
            "energy2_input": "100000000\n",
            "power1_max": "190000000\n",
            "power1_rated_max": "190000000\n",
            "power1_cap": "250000000\n",  # PL2, a burst limit: not the one reported
            "temp2_input": "54000\n",  # no labels: the ABI's package and VRAM channels
            "temp3_input": "62000\n",
        }
    ],
}
