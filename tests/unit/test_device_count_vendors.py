"""device-count-mismatch and worker-cuda on AMD and Intel machines (issue 41: the same verdicts with
the same quality).

- A ROCm build's torch.cuda counts AMD GPUs: those it does not see are AMD GPUs hidden by
  HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES (named, with their values, where they leave some out),
  never NVIDIA GPUs or "integrated GPUs that cannot run CUDA"; the others (an NVIDIA card, an iGPU, a
  radeon-driven card) cannot run ROCm.
- An XPU build's torch.xpu counts Intel GPUs (ZE_AFFINITY_MASK hides them); torch.cuda's 0 there is
  no mismatch.
- A machine whose only GPU no torch here can use (an Alder Lake iGPU beside a CPU-only torch, a CUDA
  build on an AMD-only machine) has no mismatch to tell: cpu-build or cuda-unavailable say it.
- worker-cuda names the context a ROCm (HIP) or XPU (Level Zero) worker pays for, and the device
  batches go to; NVIDIA's texts render exactly as they did.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from probe_wire.records import DeviceRecord, RuntimeRecord
from sidecar.verdict import GpuFacts, ProcGpu, SystemGpuFacts, decide
from tests.helpers.verdict_facts import (
    CPU_RT,
    CUDA_RT,
    H200,
    INTEL_CARD,
    NVIDIA_CARD,
    XPU_RT,
    en,
    facts,
    model,
    proc,
    zh,
)

UNFILLED = re.compile(r"\{\w+\}")

MI_A = SystemGpuFacts("AMD", "AMD GPU", "0000:0c:00.0", "amdgpu", None, device_id="0x74a1")
MI_B = SystemGpuFacts("AMD", "AMD GPU", "0000:1c:00.0", "amdgpu", None, device_id="0x74a1")
RADEON_HD = SystemGpuFacts("AMD", "AMD GPU", "0000:05:00.0", "radeon", None, device_id="0x6798")  # no ROCm
ARC = SystemGpuFacts("Intel", "Intel GPU", "0000:03:00.0", "i915", None, device_id="0x56a0", integrated=False)
ARC_B = replace(ARC, pci="0000:04:00.0")
METEOR_LAKE = SystemGpuFacts(
    "Intel", "Intel integrated graphics", "0000:00:02.0", "i915", None, device_id="0x7d55", integrated=True
)
UHD_770 = replace(INTEL_CARD, device_id="0x4680")  # Alder Lake: no XPU build runs on it

ROCM_RT = RuntimeRecord(
    torch="2.6.0+rocm6.2.4",
    hip_build="6.2.41133-dd7f95766",
    cuda_available=True,
    cuda_initialized=True,
    device_count=1,
    devices=(DeviceRecord(0, "AMD Instinct MI300X", None, "0000:0c:00.0"),),
)


def amd_machine(rt, *system, **kw):
    """A ROCm job training on cuda:0 on a machine without NVIDIA's driver, the OS listing `system`."""
    return facts(proc(runtime=rt, models=[model("cuda:0")], **kw), gpus=(), nvml_ok=False, system=system)


def xpu_job(rt, *system, nvml_ok=False):
    return facts(proc(runtime=rt, models=[model("xpu:0")]), gpus=(), nvml_ok=nvml_ok, system=system)


def mismatch(f):
    found = [w for w in decide(f).warnings if w.code == "device-count-mismatch"]
    assert len(found) <= 1, found
    return found[0] if found else None


def texts(w):
    """The finding's message and hint in English, after checking both render whole in both languages."""
    for text in (en(w.message), en(w.hint), zh(w.message), zh(w.hint)):
        assert not UNFILLED.search(text), text
    return en(w.message), en(w.hint)


@pytest.mark.parametrize(
    ("name", "value"),
    [("HIP_VISIBLE_DEVICES", "0"), ("ROCR_VISIBLE_DEVICES", "1"), ("CUDA_VISIBLE_DEVICES", "0")],
)
def test_amd_gpus_a_rocm_builds_mask_hides_are_named_as_hidden_by_it(name, value):
    field = {
        "HIP_VISIBLE_DEVICES": "hip_visible_devices",
        "ROCR_VISIBLE_DEVICES": "rocr_visible_devices",
        "CUDA_VISIBLE_DEVICES": "cuda_visible_devices",
    }[name]
    w = mismatch(amd_machine(replace(ROCM_RT, **{field: value}), MI_A, MI_B))
    assert w is not None and w.severity == "warning"
    message, hint = texts(w)
    assert message == (
        "The system sees 2 graphics devices, the framework can use 1; not usable: "
        f"1 AMD GPU(s), hidden by {name}='{value}'."
    )
    assert hint == (
        f"{name}='{value}' hides AMD GPUs from torch: unset it, or list every AMD GPU the job should use "
        "(`rocm-smi` lists them)."
    )
    assert f"{name}='{value}'" in zh(w.message) and "AMD GPU" in zh(w.message)
    # The ROCm build's count is of AMD GPUs: nothing is said of NVIDIA, CUDA or integrated GPUs.
    for word in ("NVIDIA", "integrated", "CUDA"):
        assert word not in (message + hint).replace("CUDA_VISIBLE_DEVICES", ""), word


def test_only_the_masks_that_leave_amd_gpus_out_are_named():
    """ROCR_VISIBLE_DEVICES lists both GPUs, HIP_VISIBLE_DEVICES (which numbers what ROCr left) one:
    HIP's hides; a mask listing as many GPUs as the machine has hides none."""
    rt = replace(ROCM_RT, rocr_visible_devices="0,1", hip_visible_devices="1")
    message, hint = texts(mismatch(amd_machine(rt, MI_A, MI_B)))
    assert "hidden by HIP_VISIBLE_DEVICES='1'." in message and "ROCR" not in message + hint
    # Every GPU listed, one of them not seen all the same: no variable to blame; ROCm's support.
    rt = replace(ROCM_RT, hip_visible_devices="0,1")
    message, hint = texts(mismatch(amd_machine(rt, MI_A, MI_B)))
    assert message.endswith("not usable: 1 AMD GPU(s).") and "hidden by" not in message
    assert "ROCm version may not support it" in hint and "`rocminfo`" in hint


def test_a_rocm_build_that_cannot_use_its_gpus_points_to_cuda_unavailable():
    rt = replace(ROCM_RT, cuda_available=False, device_count=0, hip_visible_devices="")
    f = amd_machine(rt, MI_A)
    message, hint = texts(mismatch(f))
    assert "1 AMD GPU(s), hidden by HIP_VISIBLE_DEVICES=''" in message
    assert hint == "torch cannot use the AMD GPUs here (see the error above)."
    (unavailable,) = [w for w in decide(f).warnings if w.code == "cuda-unavailable"]
    assert "HIP_VISIBLE_DEVICES='' hides every AMD GPU" in en(unavailable.message)


def test_a_rocm_build_seeing_every_amd_gpu_calls_the_others_ones_rocm_cannot_run():
    """An NVIDIA card and a radeon-driven card beside the MI300X: neither runs ROCm (info); the ROCm
    build seeing its one AMD GPU has none hidden, and the model belongs on it (`cuda`)."""
    assert mismatch(amd_machine(ROCM_RT, MI_A)) is None
    assert mismatch(amd_machine(replace(ROCM_RT, device_count=2), MI_A, MI_B)) is None
    w = mismatch(amd_machine(ROCM_RT, MI_A, NVIDIA_CARD, RADEON_HD))
    assert w is not None and w.severity == "info"
    message, hint = texts(w)
    assert message == (
        "The system sees 3 graphics devices, the framework can use 1; not usable: "
        "NVIDIA GPU (0000:01:00.0); AMD GPU (0000:05:00.0)."
    )
    assert hint.startswith("ROCm runs only on AMD GPUs that the amdgpu driver drives")
    assert hint.endswith("Make sure the model is on the AMD device (`cuda`).")
    # Both: the hidden AMD GPU and the card that cannot run ROCm.
    hidden = replace(ROCM_RT, hip_visible_devices="0")
    message, hint = texts(mismatch(amd_machine(hidden, MI_A, MI_B, NVIDIA_CARD)))
    assert message.endswith("NVIDIA GPU (0000:01:00.0); 1 AMD GPU(s), hidden by HIP_VISIBLE_DEVICES='0'.")
    assert "cannot run this ROCm build" in hint and "HIP_VISIBLE_DEVICES='0' hides AMD GPUs" in hint


def test_an_igpu_no_build_runs_on_beside_a_cpu_only_torch_is_no_mismatch():
    """An Alder Lake iGPU (no XPU build runs on it), no NVIDIA, no AMD: a CPU-only torch uses what
    there is to use. It was told the iGPU "cannot run CUDA" and to put the model on an NVIDIA device
    the machine does not have. With NVML loaded and no NVIDIA GPU, the same."""
    job = proc(runtime=CPU_RT, models=[model("cpu")])
    for f in (
        facts(job, gpus=(), nvml_ok=False, system=(UHD_770,)),
        facts(job, gpus=(), nvml_ok=True, system=(UHD_770,)),
        facts(proc(runtime=None), gpus=(), nvml_ok=True, system=(UHD_770,)),  # NVML's count alone
    ):
        v = decide(f)
        assert mismatch(f) is None and v.status in ("CPU", "UNKNOWN"), [w.code for w in v.warnings]
        assert "cpu-build" not in [w.code for w in v.warnings]
    # An iGPU XPU builds run on: cpu-build names the XPU wheel, once (no mismatch beside it).
    f = facts(job, gpus=(), nvml_ok=False, system=(METEOR_LAKE,))
    codes = [w.code for w in decide(f).warnings]
    assert codes.count("cpu-build") == 1 and "device-count-mismatch" not in codes
    # A CUDA build on an AMD-only machine: cuda-unavailable says there is no NVIDIA GPU; no mismatch.
    cuda = replace(CUDA_RT, cuda_available=False, device_count=0)
    f = facts(proc(runtime=cuda, models=[model("cpu")]), gpus=(), nvml_ok=False, system=(MI_A,))
    codes = [w.code for w in decide(f).warnings]
    assert "cuda-unavailable" in codes and "device-count-mismatch" not in codes


def test_an_xpu_builds_count_is_torch_xpus_of_intel_gpus():
    """torch.cuda counts nothing in an XPU build: its 0 beside an Arc GPU the build uses is no
    mismatch. ZE_AFFINITY_MASK hiding one of two Arc GPUs is named; an Alder Lake iGPU or an NVIDIA
    card beside the Arc cannot run the XPU build."""
    assert mismatch(xpu_job(XPU_RT, ARC)) is None
    assert mismatch(xpu_job(replace(XPU_RT, xpu_device_count=2), ARC, ARC_B)) is None
    w = mismatch(xpu_job(replace(XPU_RT, ze_affinity_mask="0"), ARC, ARC_B))
    assert w is not None and w.severity == "warning"
    message, hint = texts(w)
    assert message.endswith("not usable: 1 Intel GPU(s), hidden by ZE_AFFINITY_MASK='0'.")
    assert hint.startswith("ZE_AFFINITY_MASK='0' hides Intel GPUs from torch") and "`sycl-ls`" in hint
    # Sub-devices of one GPU (`0.0,0.1`) leave the other GPU out; a mask listing both hides none.
    message, _ = texts(mismatch(xpu_job(replace(XPU_RT, ze_affinity_mask="0.0,0.1"), ARC, ARC_B)))
    assert "hidden by ZE_AFFINITY_MASK='0.0,0.1'" in message
    message, hint = texts(mismatch(xpu_job(replace(XPU_RT, ze_affinity_mask="0,1"), ARC, ARC_B)))
    assert "hidden by" not in message and "Level Zero" in hint
    for other in (UHD_770, NVIDIA_CARD):
        w = mismatch(xpu_job(XPU_RT, ARC, other))
        assert w is not None and w.severity == "info"
        message, hint = texts(w)
        assert f"({other.pci})" in message and "XPU builds run only on the Intel GPUs" in hint
        assert hint.endswith("Make sure the model is on the Intel device (`xpu`).") and "CUDA" not in hint
    # An older probe that did not count XPU devices: nothing to compare.
    assert mismatch(xpu_job(replace(XPU_RT, xpu_device_count=None), ARC, ARC_B)) is None


def test_nvidias_device_count_texts_render_as_they_did():
    """The laptop (Intel iGPU + NVIDIA dGPU) with a CUDA build, a CPU-only build, and a machine with a
    second NVIDIA GPU hidden: the very texts of before, in both languages."""
    laptop = mismatch(facts(proc(models=[model("cuda:0")]), system=(INTEL_CARD, NVIDIA_CARD)))
    assert texts(laptop) == (
        "The system sees 2 graphics devices, the framework can use 1; not usable: "
        "Intel integrated graphics (0000:00:02.0).",
        "An integrated Intel or AMD GPU cannot run CUDA; that is expected. "
        "Make sure the model is on the NVIDIA device (`cuda`).",
    )
    assert (
        zh(laptop.hint)
        == "Intel 或 AMD 集成显卡无法运行 CUDA，这是正常的。请确认模型在 NVIDIA 设备（`cuda`）上。"
    )
    cpu = mismatch(facts(proc(runtime=CPU_RT, models=[model("cpu")]), system=(INTEL_CARD, NVIDIA_CARD)))
    assert texts(cpu)[0].endswith("not usable: Intel integrated graphics (0000:00:02.0); 1 NVIDIA GPU(s).")
    assert zh(cpu.message).endswith("不可用：Intel integrated graphics (0000:00:02.0)；1 个 NVIDIA GPU。")
    second = replace(NVIDIA_CARD, pci="0000:02:00.0", nvml_index=1)
    hidden = mismatch(facts(proc(models=[model("cuda:0")]), system=(NVIDIA_CARD, second)))
    assert texts(hidden) == (
        "The system sees 2 graphics devices, the framework can use 1; not usable: 1 NVIDIA GPU(s).",
        "An NVIDIA GPU is hidden from the framework: check CUDA_VISIBLE_DEVICES and the driver.",
    )


def test_beside_a_cuda_build_only_intels_igpu_is_called_integrated():
    """A workstation's Arc card, a Radeon or a server's BMC display (ASPEED) beside the NVIDIA card the
    job runs on cannot run CUDA, but none is an integrated GPU: the hint says only what is true of
    them. An iGPU among them is not enough: every one must be one for the laptop's words."""
    aspeed = SystemGpuFacts("unknown (0x1a03)", "unknown GPU (0x1a03)", "0000:03:00.0", "ast", None)
    radeon = SystemGpuFacts("AMD", "AMD GPU", "0000:05:00.0", "amdgpu", None, device_id="0x744c")
    for others in ((ARC,), (radeon,), (aspeed,), (INTEL_CARD, ARC)):
        w = mismatch(facts(proc(models=[model("cuda:0")]), system=(*others, NVIDIA_CARD)))
        assert w is not None and w.severity == "info", others
        message, hint = texts(w)
        assert "integrated" not in hint and "集成" not in zh(w.hint), hint
        assert hint == (
            "Only NVIDIA GPUs run CUDA: the other graphics devices here cannot; that is expected. "
            "Make sure the model is on the NVIDIA device (`cuda`)."
        )
        assert zh(w.hint).startswith("只有 NVIDIA GPU 能运行 CUDA")
    assert (
        "not usable: Intel GPU (0000:03:00.0)."
        in texts(mismatch(facts(proc(models=[model("cuda:0")]), system=(ARC, NVIDIA_CARD))))[0]
    )


def test_without_a_probe_the_framework_count_is_nvmls_gpus_not_the_oss_igpu():
    """No probe (the count is NVML's): the laptop's iGPU, listed among the GPUs after NVML's (issue
    41's rows), is not a GPU CUDA can use."""
    igpu = GpuFacts(1, name="Intel integrated graphics", pci_bus_id="0000:00:02.0", vendor="intel")
    f = facts(proc(runtime=None), gpus=(H200, igpu), system=(INTEL_CARD, NVIDIA_CARD))
    message, _ = texts(mismatch(f))
    assert message.endswith("the framework can use 1; not usable: Intel integrated graphics (0000:00:02.0).")


def _worker(runtime, gpu):
    return proc(201, runtime=runtime, role="dataloader-worker", is_target=False, gpu=[gpu], ppid=100)


def _worker_cuda(trainer_rt, worker_rt, gpu):
    f = facts(proc(runtime=trainer_rt, models=[model("cuda:0")]), _worker(worker_rt, gpu), gpus=())
    (w,) = [w for w in decide(f).warnings if w.code == "worker-cuda"]
    assert w.pids == (201,)
    for text in (en(w.message), en(w.hint), zh(w.message), zh(w.hint)):
        assert not UNFILLED.search(text), text
    return en(w.message), en(w.hint), zh(w.message)


AMD_ROW = ProcGpu(5, 300.0, None, None, "amd", "0000:0c:00.0", "rocm-compute")
INTEL_ROW = ProcGpu(5, 300.0, None, None, "intel", "0000:03:00.0", "first-sample")
NVIDIA_ROW = ProcGpu(0, 300.0, 0.0)


def test_worker_cuda_names_the_context_the_jobs_runtime_makes():
    cuda = _worker_cuda(CUDA_RT, CUDA_RT, NVIDIA_ROW)
    assert cuda == (
        "DataLoader worker(s) 201 hold GPU memory: each worker pays for its own CUDA context.",
        "Keep Dataset.__getitem__ on the CPU; move whole batches to the GPU in the training loop "
        "(`pin_memory=True`, `x.to('cuda', non_blocking=True)`).",
        "DataLoader 工作进程 201 占用了 GPU 显存：每个工作进程都有自己的 CUDA 上下文。",
    )
    # A ROCm job's worker (its own probe's runtime, or, without one, its trainer's): HIP's context;
    # its batches go to `cuda` all the same.
    for worker_rt in (ROCM_RT, None):
        message, hint, _ = _worker_cuda(ROCM_RT, worker_rt, AMD_ROW)
        assert message.endswith("each worker pays for its own HIP context on the AMD GPU.")
        assert "CUDA" not in message and "x.to('cuda'" in hint
    message, hint, zh_message = _worker_cuda(XPU_RT, XPU_RT, INTEL_ROW)
    assert message.endswith("its own XPU (Level Zero) context on the Intel GPU.") and "x.to('xpu'" in hint
    assert "XPU（Level Zero）上下文" in zh_message
    # A CPU-only torch whose worker holds AMD memory (a library opened the GPU): no runtime's context
    # to name; on an NVIDIA GPU, CUDA's as before.
    message, _, _ = _worker_cuda(CPU_RT, CPU_RT, AMD_ROW)
    assert message.endswith("each worker pays for its own GPU context.")
    assert _worker_cuda(CPU_RT, CPU_RT, NVIDIA_ROW)[0].endswith("its own CUDA context.")
