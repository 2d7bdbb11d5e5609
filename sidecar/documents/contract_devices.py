"""The contract's declarations of the job's torch build and of the GPUs (sidecar/documents/contract.py
imports and serves them): the `Runtime` the probe reports, the driver (`Nvml`), each GPU (`Gpu`, its
MIG devices) and the graphics devices the OS lists (`SystemGpu`)."""

from __future__ import annotations

from sidecar.common.nvml_names import CLOCK_EVENT_REASONS
from sidecar.documents import bounds
from sidecar.documents.contract_types import BOOL, INT, NUM, STR, Enum, F, Lazy, ListOf, MapOf, Obj
from sidecar.verdict.facts import VENDORS

RUNTIME_DEVICE = Obj(
    "RuntimeDevice",
    "A device as the job's torch numbers it, once that process initialised it.",
    {
        "device": F(STR, "what the script calls it: `cuda:0` (an AMD GPU too in a ROCm build), `xpu:0`"),
        "name": F(STR, "product name, as torch gives it"),
        "pci_bus_id": F(
            STR,
            "PCI address (`0000:c1:00.0`): the GPU it is, whatever the visible-devices variables renumbered",
            null=True,
        ),
        "gcn_arch": F(STR, "a ROCm build's gcnArchName (`gfx942:sramecc+:xnack-`)", null=True),
    },
)

RUNTIME = Obj(
    "Runtime",
    "The job's torch build as its main probed process reports it.",
    {
        "torch": F(STR, "torch version", null=True),
        "cuda_build": F(
            STR, "CUDA version torch was built for; null for a CPU-only, ROCm or XPU build", null=True
        ),
        "hip_build": F(
            STR,
            "ROCm (HIP) version torch was built for: its AMD GPUs are `cuda:N`; null otherwise",
            null=True,
        ),
        "xpu_build": F(STR, "the XPU (Intel GPU) toolchain torch was built with; null otherwise", null=True),
        "cudnn": F(INT, "cuDNN version", null=True),
        "cuda_available": F(BOOL, "torch.cuda.is_available() in that process (ROCm builds too)", null=True),
        "device_count": F(INT, "CUDA (or ROCm) devices torch sees", null=True),
        "cuda_visible_devices": F(STR, "CUDA_VISIBLE_DEVICES of that process", null=True),
        "hip_visible_devices": F(
            STR, "HIP_VISIBLE_DEVICES of that process (ROCm: on what ROCr leaves)", null=True
        ),
        "rocr_visible_devices": F(
            STR, "ROCR_VISIBLE_DEVICES of that process (ROCm, applied first)", null=True
        ),
        "gpu_device_ordinal": F(STR, "GPU_DEVICE_ORDINAL of that process (ROCm: HIP and OpenCL)", null=True),
        "cuda_driver_loadable": F(
            BOOL,
            "the CUDA driver library (libcuda.so.1) loads in that process; NVML works without it",
            null=True,
        ),
        "xpu_available": F(
            BOOL,
            "torch.xpu.is_available() in that process; null until known without initialising XPU",
            null=True,
        ),
        "xpu_device_count": F(INT, "XPU devices torch sees", null=True),
        "ze_affinity_mask": F(STR, "ZE_AFFINITY_MASK of that process (XPU)", null=True),
        "devices": F(
            ListOf(RUNTIME_DEVICE),
            f"the devices torch numbers in that process, `cuda:N` then `xpu:N` (at most {bounds.MAX_RUNTIME_DEVICES_SHOWN})",
        ),
        "devices_omitted": F(INT, "devices left out"),
        "cuda_ref": F(Lazy("TextRef"), "whether CUDA is available, as text (or not known yet)", null=True),
    },
)

NVML = Obj(
    "Nvml",
    "The NVIDIA driver as NVML answers.",
    {
        "ok": F(BOOL, "NVML could be queried"),
        "driver": F(STR, "driver version", null=True),
        "cuda_driver": F(STR, "highest CUDA version the driver supports", null=True),
        "error": F(STR, "why NVML cannot be queried", null=True),
    },
)

MIG_DEVICE = Obj(
    "MigDevice",
    "One MIG instance of a GPU in MIG mode, a device of its own.",
    {
        "index": F(INT, "MIG device index within its GPU"),
        "uuid": F(STR, "MIG-... UUID", null=True),
        "gpu_instance_id": F(INT, "GPU instance id", null=True),
        "compute_instance_id": F(INT, "compute instance id", null=True),
        "mem_used_mib": F(NUM, "memory in use in this instance (exact)", null=True),
        "mem_total_mib": F(NUM, "memory of this instance (exact)", null=True),
    },
)

GPU = Obj(
    "Gpu",
    "One GPU: NVIDIA's (NVML), or AMD's or Intel's (the OS's list, DRM and KFD; figures not read are null).",
    {
        "index": F(
            INT,
            "NVIDIA: NVML index (nvidia-smi's numbering); AMD and Intel: numbered after NVML's, in card order",
        ),
        "vendor": F(Enum(VENDORS), "who made it: the source of its figures"),
        "driver": F(
            STR,
            "AMD and Intel: the kernel driver bound to it (`amdgpu`, `i915`, `xe`); NVIDIA: null",
            null=True,
        ),
        "uuid": F(STR, "GPU-... UUID", null=True),
        "name": F(
            STR,
            "product name (AMD: the board's, where amdgpu prints one (`product_name`), else `AMD GPU`; "
            "Intel: `Intel integrated graphics` at the iGPU's address 00:02, else `Intel GPU`)",
            null=True,
        ),
        "pci_bus_id": F(STR, "PCI address (NVML writes an 8-digit domain, sysfs a 4-digit one)", null=True),
        "util_pct": F(NUM, "time a kernel ran over the driver's last sample period", null=True),
        "mem_util_pct": F(NUM, "time device memory was read or written", null=True),
        "mem_used_mib": F(NUM, "memory in use (exact: the driver's bytes / 2^20)", null=True),
        "mem_total_mib": F(NUM, "memory in all (exact)", null=True),
        "framework_index": F(INT, "N of the `cuda:N` that names it in the job's main process", null=True),
        "lost": F(BOOL, "the driver reports the GPU lost (fell off the bus)"),
        "field_errors": F(MapOf(STR), "why a null field is null, per NVML (field -> error)"),
        "other_process_count": F(
            INT,
            "processes outside this job that use the GPU (NVIDIA: NVML's lists; AMD and Intel: those with "
            "a DRM client on it, the sidecar's user's alone unless it runs as root, rescanned every 15 s); "
            "null: not read",
            null=True,
        ),
        "other_process_names": F(
            ListOf(STR),
            "AMD and Intel: the names (`comm`) of those processes, each once, at most 8 (control and "
            "format characters removed); null: not read (NVIDIA's are not)",
            null=True,
        ),
        "other_process_names_omitted": F(INT, "names of those processes left out of `other_process_names`"),
        "compute_capability": F(STR, "`8.0`, `9.0`, ...: tensor cores from 7.0", null=True),
        "sm_clock_mhz": F(INT, "SM clock now", null=True),
        "sm_clock_max_mhz": F(INT, "the SM clock's maximum", null=True),
        "mem_clock_mhz": F(INT, "memory clock now", null=True),
        "clock_event_reasons": F(
            ListOf(Enum(tuple(name for _, name in CLOCK_EVENT_REASONS))),
            "why the clocks are held down now (NVML's clock event reasons); empty: nothing holds them",
            null=True,
        ),
        "power_w": F(NUM, "power draw", null=True),
        "power_limit_w": F(NUM, "enforced power limit", null=True),
        "temperature_c": F(NUM, "GPU temperature", null=True),
        "pcie_link_gen": F(INT, "PCIe link generation now", null=True),
        "pcie_link_gen_max": F(INT, "the highest generation the link can train at", null=True),
        "pcie_link_width": F(INT, "PCIe lanes now", null=True),
        "pcie_link_width_max": F(INT, "the link's full width", null=True),
        "sm_activity_fraction": F(
            NUM, "GPM: share of SMs busy over the last poll (Hopper and newer)", null=True
        ),
        "sm_occupancy_fraction": F(NUM, "GPM: resident warps over the maximum", null=True),
        "tensor_activity_fraction": F(NUM, "GPM: share of time tensor cores worked", null=True),
        "dram_activity_fraction": F(NUM, "GPM: DRAM bandwidth used over its peak", null=True),
        "pcie_tx_bytes_per_s": F(NUM, "GPM: PCIe traffic from the GPU", null=True),
        "pcie_rx_bytes_per_s": F(NUM, "GPM: PCIe traffic to the GPU", null=True),
        "nvlink_tx_bytes_per_s": F(NUM, "GPM: NVLink traffic sent, all links", null=True),
        "nvlink_rx_bytes_per_s": F(NUM, "GPM: NVLink traffic received, all links", null=True),
        "mig_mode": F(BOOL, "MIG is on: per-process utilisation is not available", null=True),
        "mig_devices": F(ListOf(MIG_DEVICE), "its MIG instances while MIG is on"),
    },
)

SYSTEM_GPU = Obj(
    "SystemGpu",
    "A graphics device the OS lists (sysfs), NVIDIA or not.",
    {
        "vendor": F(STR, "NVIDIA, Intel, AMD, ..."),
        "name": F(
            STR,
            "device name: its vendor's generic one (`NVIDIA GPU`, `unknown GPU (0x1a03)`); an AMD or Intel GPU's as Gpu.name",
        ),
        "pci": F(STR, "PCI address", null=True),
        "driver": F(STR, "kernel driver bound to it", null=True),
        "nvml_index": F(INT, "the NVML index of the same device; null: CUDA cannot use it", null=True),
    },
)
