"""The verdict on AMD and Intel machines (issue 41): which GPU a CPU-only torch is told to build for,
and the hints that name that build (the tables are vendor_wheels.py's); and why a ROCm build of torch
(torch.version.hip set) has no GPU, torch.cuda.is_available() being False.

ROCm builds reuse torch.cuda for the AMD GPU, so the verdict's cuda-unavailable covers them, with
ROCm's own reasons, in the order a user would check them:

1. the devices are hidden: HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES (HIP
   honours it too) empty or -1;
2. the machine has no AMD GPU the kernel shows (the OS's graphics devices);
3. the kernel has no KFD (/sys/class/kfd/kfd: amdgpu without HSA support, or not loaded);
4. the process's /dev has no /dev/kfd while the host has one: a container started without
   `--device /dev/kfd`;
5. the process cannot open /dev/kfd or a render node: not in the group that owns it (render or
   video) while the node is not open to others;
6. else torch could not initialise HIP, for a reason only its own error tells.

Whose GPUs a torch build counts (runtime_vendor, counts_gpu): a ROCm build's torch.cuda counts the
AMD GPUs the amdgpu driver drives, an XPU build's torch.xpu the Intel GPUs XPU builds run on, any
other build's torch.cuda NVIDIA's; and the variables that hide some of them (visibility_masks).
"""

from __future__ import annotations

from probe_wire.records import RuntimeRecord
from sidecar.common.catalogue import Ref, ref
from sidecar.verdict.facts import (
    AMD_VENDOR,
    INTEL_VENDOR,
    NVIDIA_VENDOR,
    VENDOR_AMD,
    VENDOR_INTEL,
    VENDOR_NVIDIA,
    DeviceNodeFacts,
    Facts,
    SystemGpuFacts,
    amd_in_system,
    is_xpu_build,
    nvidia_in_system,
)
from sidecar.verdict.vendor_wheels import ROCM_WHEELS, rocm_wheel, xpu_capable, xpu_wheel

__all__ = ["HIDING_VALUES", "cpu_build_gpu", "rocm_build_hint", "rocm_unavailable_reason", "xpu_build_hint"]
__all__ += ["counts_gpu", "framework_count", "runtime_vendor", "visibility_masks"]


def _rocms(torch_version: str) -> str:
    """The ROCm versions of the wheels of the torch `torch_version` (a release the table has)."""
    major, minor = (int(x) for x in torch_version.split(".")[:2])
    return ", ".join(ROCM_WHEELS[major, minor])


def rocm_build_hint(torch_version: str | None) -> Ref:
    """How to replace a CPU-only torch with the ROCm build of the same version (vendor_wheels.py)."""
    w = rocm_wheel(torch_version)
    if w.kind == "unknown":
        return ref("hint.cpu-build.rocm.unknown", torch=w.torch)
    return ref("hint.cpu-build.rocm", torch=w.torch, tag=str(w.tag), rocms=_rocms(w.torch))


def xpu_build_hint(torch_version: str | None) -> Ref:
    """How to replace a CPU-only torch with the XPU build of the same version (vendor_wheels.py);
    a torch older than every XPU build is told to upgrade."""
    w = xpu_wheel(torch_version)
    if w is None:
        return ref("hint.cpu-build.xpu.too-old", torch=str(torch_version))
    if w.kind == "unknown":
        return ref("hint.cpu-build.xpu.unknown", torch=w.torch)
    return ref("hint.cpu-build.xpu", torch=w.torch)


def cpu_build_gpu(f: Facts) -> str | None:
    """The GPU a CPU-only torch is told to build for: "nvidia" wherever there is an NVIDIA GPU (a
    laptop's Intel iGPU beside it changes nothing), else "amd" for an AMD GPU the amdgpu driver
    drives (ROCm needs it; the older radeon driver's cards have no ROCm), else "intel" for an Intel
    GPU that PyTorch's XPU builds run on; None: none worth a wheel."""
    if nvidia_in_system(f):
        return "nvidia"
    if any(s.vendor == AMD_VENDOR and s.driver == "amdgpu" for s in f.system_gpus):
        return "amd"
    if any(s.vendor == INTEL_VENDOR and xpu_capable(s.device_id) for s in f.system_gpus):
        return "intel"
    return None


def runtime_vendor(rt: RuntimeRecord) -> str:
    """Whose GPUs this torch counts and runs on: VENDOR_AMD for a ROCm build (its torch.cuda is
    HIP's), VENDOR_INTEL for an XPU build, else VENDOR_NVIDIA (a CUDA build; a CPU-only build's
    torch.cuda, which counts none)."""
    if rt.hip_build is not None:
        return VENDOR_AMD
    if rt.cuda_build is None and is_xpu_build(rt):
        return VENDOR_INTEL
    return VENDOR_NVIDIA


def framework_count(rt: RuntimeRecord) -> int | None:
    """How many GPUs this torch can use (None: its probe did not say): torch.xpu's count for an XPU
    build, torch.cuda's otherwise (a ROCm build's counts AMD GPUs)."""
    return rt.xpu_device_count if runtime_vendor(rt) == VENDOR_INTEL else rt.device_count


def counts_gpu(s: SystemGpuFacts, vendor: str) -> bool:
    """Whether a build for ``vendor``'s GPUs (runtime_vendor) can count this GPU the OS lists: ROCm
    needs the amdgpu driver (the older radeon driver's cards have none), XPU builds run on the Intel
    GPUs vendor_wheels lists."""
    if vendor == VENDOR_AMD:
        return s.vendor == AMD_VENDOR and s.driver == "amdgpu"
    if vendor == VENDOR_INTEL:
        return s.vendor == INTEL_VENDOR and xpu_capable(s.device_id)
    return s.vendor == NVIDIA_VENDOR


# What hides every device, for ROCr's and HIP's masks alike (CUDA's "NoDevFiles" is NVIDIA's own).
HIDING_VALUES = ("", "-1")


# The variables that choose the AMD GPUs a ROCm build sees, with the RuntimeRecord field of each:
# ROCr's first (it masks below HIP, whose own masks then number what ROCr left), then HIP's, CUDA's
# (HIP honours it too) and ROCclr's ordinal.
ROCM_MASKS = (
    ("ROCR_VISIBLE_DEVICES", "rocr_visible_devices"),
    ("HIP_VISIBLE_DEVICES", "hip_visible_devices"),
    ("CUDA_VISIBLE_DEVICES", "cuda_visible_devices"),
    ("GPU_DEVICE_ORDINAL", "gpu_device_ordinal"),
)
XPU_MASKS = (("ZE_AFFINITY_MASK", "ze_affinity_mask"),)  # Level Zero's


def _set_masks(rt: RuntimeRecord, masks: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    return [(name, str(value)) for name, field in masks if (value := getattr(rt, field)) is not None]


def _listed(value: str, sub_devices: bool) -> int:
    """How many devices a mask's value lets through: its comma-separated entries (indices or UUIDs;
    Level Zero's `device.sub-device` entries count their device once); none for a hiding value."""
    if value.strip() in HIDING_VALUES:
        return 0
    entries = [e.strip() for e in value.split(",") if e.strip()]
    return len({e.partition(".")[0] for e in entries}) if sub_devices else len(entries)


def visibility_masks(rt: RuntimeRecord, gpus: int) -> str:
    """The variables set in the process that let a ROCm build fewer than ``gpus`` AMD GPUs, or an
    XPU build fewer than ``gpus`` Intel GPUs (the machine's that it could count), as `NAME='value'`,
    comma-separated; "" when none does (and for NVIDIA's: CUDA_VISIBLE_DEVICES has its own text)."""
    vendor = runtime_vendor(rt)
    masks = ROCM_MASKS if vendor == VENDOR_AMD else XPU_MASKS if vendor == VENDOR_INTEL else ()
    sub_devices = vendor == VENDOR_INTEL
    return ", ".join(
        f"{name}={value!r}" for name, value in _set_masks(rt, masks) if _listed(value, sub_devices) < gpus
    )


def _hidden(rt: RuntimeRecord) -> tuple[str, str] | None:
    """(variable, value) of the first of ROCr's, HIP's and CUDA's masks that hides every device."""
    for name, value in _set_masks(rt, ROCM_MASKS[:3]):
        if value.strip() in HIDING_VALUES:
            return name, value
    return None


def _group(node: DeviceNodeFacts) -> str:
    return node.group or str(node.gid)


def rocm_unavailable_reason(f: Facts, rt: RuntimeRecord) -> tuple[Ref, Ref]:
    """(reason, hint) for a ROCm build of torch that cannot use the AMD GPU."""
    hidden = _hidden(rt)
    if hidden is not None:
        name, value = hidden
        return (
            ref("reason.rocm.hidden", name=name, value=repr(value)),
            ref("hint.cuda-unavailable.rocm.hidden", name=name),
        )
    if not amd_in_system(f):
        return ref("reason.rocm.no-amd"), ref("hint.cuda-unavailable.rocm.no-amd")
    if f.kfd_present is False:
        return ref("reason.rocm.no-kfd"), ref("hint.cuda-unavailable.rocm.no-kfd")
    access = next((p.gpu_access for p in f.processes if p.runtime is rt and p.gpu_access), None)
    if access is not None:
        if f.kfd_present and not access.has_kfd:
            return ref("reason.rocm.no-kfd-node"), ref("hint.cuda-unavailable.rocm.no-kfd-node")
        denied = access.denied
        if denied:
            groups = sorted({_group(n) for n in denied})
            return (
                ref(
                    "reason.rocm.no-permission",
                    nodes=", ".join(n.path for n in denied[:3]),
                    groups="/".join(groups),
                ),
                ref("hint.cuda-unavailable.rocm.no-permission", groups=",".join(groups)),
            )
    return ref("reason.rocm.init-failed", hip=str(rt.hip_build)), ref("hint.cuda-unavailable.rocm")
