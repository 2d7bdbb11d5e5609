"""What a poll returns: `NvmlSnapshot`, its `GpuInfo` per device, their processes and MIG devices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


# slots: a poll makes one per GPU process (64 in the discovery benchmark); 15 % cheaper to make
@dataclass(slots=True)
class GpuProcess:
    pid: int
    used_mib: float | None  # exact (bytes / 2^20); None: NVML says not available (e.g. WDDM)
    sm_util: int | None  # percent; 0 when NVML has no recent sample (idle); None if unsupported
    mem_util: int | None
    types: tuple[str, ...]  # ("compute",), ("graphics",) or ("compute", "graphics")
    # MIG: the instance it runs in (None without MIG: NVML's 0xFFFFFFFF), and the index of that
    # instance's MIG device among GpuInfo.mig_devices.
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mig_index: int | None = None


@dataclass
class MigDevice:
    index: int  # MIG device index within its GPU (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str | None = None  # "MIG-..."
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None


# slots: 38 fields made every poll for each GPU: half the cost of making it with a __dict__
@dataclass(slots=True)
class GpuInfo:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None  # NVML's form, "00000000:01:00.0"
    mem_total_mib: float | None = None  # exact: the driver's bytes / 2^20
    mem_used_mib: float | None = None
    util_gpu: int | None = None  # percent of the sample period with a kernel running
    util_mem: int | None = None
    lost: bool = False
    field_errors: dict[str, str] = field(default_factory=dict)  # field -> why it is None
    processes: list[GpuProcess] = field(default_factory=list)
    # Efficiency (issue 15): each None with its reason in field_errors under the field's own name.
    compute_capability: str | None = None  # "9.0"
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_event_reasons: tuple[str, ...] | None = None  # active reasons (nvml_names.CLOCK_EVENT_REASONS)
    power_w: float | None = None
    power_limit_w: float | None = None  # enforced
    temperature_c: float | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    # GPM (Hopper and newer), from two samples one poll apart: nvml_names.GPM_FIELDS.
    sm_activity_fraction: float | None = None
    sm_occupancy_fraction: float | None = None
    tensor_activity_fraction: float | None = None
    dram_activity_fraction: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None
    mig_mode: bool | None = None
    mig_devices: list[MigDevice] = field(default_factory=list)
    # NVML's energy counter (nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver was
    # loaded; Volta and newer); None where it does not answer. Read by the runs recorder alone (its
    # increase is a run's energy): not a fact of the verdict, nor a field of the documents.
    energy_mj: int | None = None
    # What GpuFacts carries for the other vendors' GPUs (poll/vendor_gpus.py): an NVML device is
    # NVIDIA's, and NVML names no kernel driver. Not fields: no NVML call reads them.
    vendor: ClassVar[str] = "nvidia"
    driver: ClassVar[str | None] = None


@dataclass
class NvmlSnapshot:
    ok: bool
    error: str | None = None  # one line, when not ok
    driver: str | None = None  # "550.54.15"
    cuda_driver: str | None = None  # "12.4"
    devices: list[GpuInfo] = field(default_factory=list)
    call_errors: dict[str, str] = field(default_factory=dict)  # NVML function -> last failure this poll
    time: float = 0.0  # UNIX seconds
