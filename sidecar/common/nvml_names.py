"""NVML's names for what the efficiency fields report, without importing NVML: the contract, the
metrics and the verdict import these, the NVML source maps the driver's bits and ids onto them."""

from __future__ import annotations

__all__ = ["CLOCK_EVENT_REASONS", "GPM_FIELDS", "GPM_FIRST_SAMPLE", "GPU_EFFICIENCY_FIELDS"]

# Why every GPM field is None on a GPU that has GPM, until its second sample (one poll later): the
# verdict must read it as "not known yet", never as "idle".
GPM_FIRST_SAMPLE = "first sample: GPM metrics need two samples one poll apart"

# nvmlClocksEventReason* bits (nvml.h; the older names were nvmlClocksThrottleReason*), in bit order.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x0001, "gpu_idle"),
    (0x0002, "applications_clocks_setting"),
    (0x0004, "sw_power_cap"),
    (0x0008, "hw_slowdown"),
    (0x0010, "sync_boost"),
    (0x0020, "sw_thermal_slowdown"),
    (0x0040, "hw_thermal_slowdown"),
    (0x0080, "hw_power_brake_slowdown"),
    (0x0100, "display_clock_setting"),
    (0x0200, "board_limit"),
    (0x0400, "reliability"),
)

# GpuInfo / contract field -> NVML_GPM_METRIC_* id (nvml.h) and the scale from NVML's unit to ours:
# utilisations come in percent (0-100) and become fractions (0-1); PCIe and NVLink rates come in
# MiB/s and become bytes/s.
GPM_FIELDS: tuple[tuple[str, int, float], ...] = (
    ("sm_activity_fraction", 2, 0.01),  # NVML_GPM_METRIC_SM_UTIL
    ("sm_occupancy_fraction", 3, 0.01),  # NVML_GPM_METRIC_SM_OCCUPANCY
    ("tensor_activity_fraction", 5, 0.01),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    ("dram_activity_fraction", 10, 0.01),  # NVML_GPM_METRIC_DRAM_BW_UTIL
    ("pcie_tx_bytes_per_s", 20, 1048576.0),  # NVML_GPM_METRIC_PCIE_TX_PER_SEC
    ("pcie_rx_bytes_per_s", 21, 1048576.0),  # NVML_GPM_METRIC_PCIE_RX_PER_SEC
    ("nvlink_tx_bytes_per_s", 61, 1048576.0),  # NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
    ("nvlink_rx_bytes_per_s", 60, 1048576.0),  # NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
)

# The scalar efficiency fields of a GPU, named alike in sources.nvml.GpuInfo, verdict.GpuFacts and the
# contract's Gpu: the collector and the document copy exactly these (tests/unit/test_contract.py
# checks the three agree).
GPU_EFFICIENCY_FIELDS: tuple[str, ...] = (
    "compute_capability",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_mhz",
    "clock_event_reasons",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width",
    "pcie_link_width_max",
    *(name for name, _, _ in GPM_FIELDS),
    "mig_mode",
)
