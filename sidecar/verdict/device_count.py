"""The device-count-mismatch rule: the OS lists more GPUs than the job's torch can use. Which GPUs
count is the build's (vendors.runtime_vendor): a CUDA (or CPU-only) build's torch.cuda counts
NVIDIA's, a ROCm build's the AMD GPUs the amdgpu driver drives, an XPU build's torch.xpu the Intel
GPUs XPU builds run on; the variables that hide some of them are named (HIP_VISIBLE_DEVICES,
ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK)."""

from __future__ import annotations

from collections.abc import Iterable

from probe_wire.records import RuntimeRecord
from sidecar.common.catalogue import Ref, ref
from sidecar.verdict.facts import (
    AMD_VENDOR,
    INTEL_VENDOR,
    NVIDIA_VENDOR,
    VENDOR_AMD,
    VENDOR_INTEL,
    VENDOR_NVIDIA,
    Facts,
    Finding,
    SystemGpuFacts,
    runtimes,
)
from sidecar.verdict.vendors import counts_gpu, framework_count, runtime_vendor, visibility_masks

# By the vendor whose GPUs the framework counts (vendors.runtime_vendor): its name in the texts, the
# device a model on its GPU is on, the tool that lists its GPUs, why the others cannot run its build,
# and why one of its own is hidden where no variable hides it.
_NAMES = {VENDOR_NVIDIA: NVIDIA_VENDOR, VENDOR_AMD: AMD_VENDOR, VENDOR_INTEL: INTEL_VENDOR}
_DEVICES = {VENDOR_NVIDIA: "cuda", VENDOR_AMD: "cuda", VENDOR_INTEL: "xpu"}  # a ROCm build's is `cuda`
_TOOLS = {VENDOR_AMD: "rocm-smi", VENDOR_INTEL: "sycl-ls"}
_OTHERS_HINTS = {
    VENDOR_NVIDIA: "hint.device-count-mismatch.others.cuda",
    VENDOR_AMD: "hint.device-count-mismatch.others.rocm",
    VENDOR_INTEL: "hint.device-count-mismatch.others.xpu",
}
_HIDDEN_HINTS = {
    VENDOR_NVIDIA: "hint.device-count-mismatch.hidden",
    VENDOR_AMD: "hint.device-count-mismatch.hidden.rocm",
    VENDOR_INTEL: "hint.device-count-mismatch.hidden.xpu",
}


def _others_hint(vendor: str, others: list[SystemGpuFacts]) -> str:
    """Why the GPUs of other vendors cannot run the build; beside a CUDA build, "integrated" only
    where every one of them is Intel's iGPU (the laptop's): an Arc card, an AMD GPU, a server's BMC
    display (ASPEED) are not said to be one."""
    if vendor == VENDOR_NVIDIA and all(s.integrated for s in others):
        return "hint.device-count-mismatch.integrated"
    return _OTHERS_HINTS[vendor]


def _mismatch_why(f: Facts, vendor: str, rt: RuntimeRecord | None, hidden: int, masks: str) -> Ref:
    """Why the framework cannot use ``hidden`` GPUs of its vendor's (none: where the model belongs)."""
    if not hidden:
        return ref("hint.device-count-mismatch", vendor=_NAMES[vendor], device=_DEVICES[vendor])
    if vendor == VENDOR_NVIDIA:
        if rt is not None and any(not r.cuda_build or r.cuda_available is False for _, r in runtimes(f)):
            return ref("hint.device-count-mismatch.no-cuda")
    elif vendor == VENDOR_AMD and rt is not None and rt.cuda_available is False:
        return ref("hint.device-count-mismatch.no-cuda.rocm")  # cuda-unavailable says why
    elif masks:
        return ref(
            "hint.device-count-mismatch.hidden.masked",
            masks=masks,
            vendor=_NAMES[vendor],
            tool=_TOOLS[vendor],
        )
    return ref(_HIDDEN_HINTS[vendor])


def rule_device_count_mismatch(f: Facts) -> Iterable[Finding]:
    """The OS lists more GPUs than the framework can use: GPUs of the vendor its torch is built for
    that it does not see (hidden: CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ZE_AFFINITY_MASK, a
    broken driver), and others it can never run on (an iGPU beside an NVIDIA card). Nothing where the
    machine has no GPU of that vendor and the framework uses none: cpu-build or cuda-unavailable say
    what there is to say (which build would use the GPU there is), and a GPU no build runs on (an
    older Intel iGPU beside a CPU-only torch) is no mismatch."""
    if not f.system_gpus:
        return
    rt = next((r for _, r in runtimes(f) if framework_count(r) is not None), None)
    vendor = VENDOR_NVIDIA if rt is None else runtime_vendor(rt)
    if rt is not None:
        usable = framework_count(rt)
    else:  # no probe told: NVML's GPUs (the AMD and Intel GPUs after them are the OS's list's)
        usable = sum(1 for g in f.gpus if g.vendor == VENDOR_NVIDIA) if f.nvml_ok else None
    if usable is None or len(f.system_gpus) <= usable:
        return
    own = [s for s in f.system_gpus if counts_gpu(s, vendor)]
    others = [s for s in f.system_gpus if not counts_gpu(s, vendor)]
    hidden = max(0, len(own) - usable) if rt is not None else sum(1 for s in own if s.nvml_index is None)
    if not hidden and not usable:
        return
    masks = visibility_masks(rt, len(own)) if rt is not None and hidden else ""
    name = _NAMES[vendor]
    if masks:
        counted = ref("devices.hidden.masked", count=hidden, vendor=name, masks=masks)
    else:
        counted = ref("devices.hidden", count=hidden, vendor=name)
    named = "; ".join(f"{s.name} ({s.pci})" if s.pci else s.name for s in others)
    if named and hidden:
        devices = ref("devices.others-and-hidden", others=named, hidden=counted)
    elif hidden:
        devices = counted
    else:
        devices = ref("devices.others", others=named) if named else ref("devices.unknown")
    why = _mismatch_why(f, vendor, rt, hidden, masks)
    yield Finding(
        "device-count-mismatch",
        "warning" if hidden else "info",
        ref("warning.device-count-mismatch", total=len(f.system_gpus), usable=usable, devices=devices),
        ref(_others_hint(vendor, others), then=why) if others else why,
    )
