"""A ROCm build's `cuda:N` is the AMD GPU in the PCI slot the probe gives for that device (issue 41
item 5): HIP_VISIBLE_DEVICES renumbers, HIP's order is not the kernel's, so only the address says
which GPU it is. The mapping reaches model_gpu_index, the status, idle-gpu (the AMD GPU's device
busy %, since ROCm's per-process utilisation is unknown) and the status document; NVIDIA's mapping
is as it was."""

from __future__ import annotations

from dataclasses import replace

from probe_wire.records import DeviceRecord, RuntimeRecord
from sidecar.documents.contract import check
from sidecar.documents.document import status_document
from sidecar.poll.collect import TargetInfo
from sidecar.poll.samples import history_sample
from sidecar.verdict import GpuFacts, ProcGpu, decide, map_cuda_index, model_gpu_index, pci_slot
from tests.helpers.verdict_facts import CUDA_RT, H200, en, facts, model, proc

HIP = "6.2.41133-dd7f95766"
# NVML's GPU 0, then the two AMD GPUs the OS lists (vendor_gpus numbers them after NVML's).
MI_A = GpuFacts(1, name="AMD GPU", pci_bus_id="0000:0c:00.0", vendor="amd", driver="amdgpu", util=0.0)
MI_B = GpuFacts(2, name="AMD GPU", pci_bus_id="0000:1c:00.0", vendor="amd", driver="amdgpu", util=0.0)
GPUS = (H200, MI_A, MI_B)
# HIP_VISIBLE_DEVICES="1,0": cuda:0 is the second AMD GPU, cuda:1 the first (torch's pci ids:
# function 0, as the probe writes them).
ROCM_RT = RuntimeRecord(
    torch="2.6.0+rocm6.2.4",
    hip_build=HIP,
    cuda_available=True,
    cuda_initialized=True,
    device_count=2,
    devices=(
        DeviceRecord(0, "AMD Instinct MI300X", None, "0000:1c:00.0"),
        DeviceRecord(1, "AMD Instinct MI300X", None, "0000:0c:00.0"),
    ),
    hip_visible_devices="1,0",
)


def test_pci_slots_compare_domain_bus_and_device_in_any_spelling():
    assert pci_slot("0000:0c:00.0") == pci_slot("00000000:0C:00.0") == pci_slot("0000:0c:00.3") == (0, 12, 0)
    assert pci_slot("0000:0c") is None and pci_slot("zz:0c:00.0") is None and pci_slot(None) is None


def test_a_rocm_builds_cuda_devices_are_the_amd_gpus_at_their_pci_addresses():
    p = proc(runtime=ROCM_RT)
    assert [map_cuda_index(p, n, GPUS) for n in (0, 1, 2)] == [2, 1, None]
    # NVIDIA's mapping is as it was: cuda:0 of a CUDA build is NVML's GPU 0.
    assert map_cuda_index(proc(runtime=CUDA_RT), 0, GPUS) == 0
    # An address no AMD GPU has (an NVIDIA one included): no GPU, never NVML's GPU N.
    elsewhere = replace(ROCM_RT, devices=(DeviceRecord(0, "x", None, H200.pci_bus_id or "0000:01:00.0"),))
    assert map_cuda_index(proc(runtime=elsewhere), 0, GPUS) is None
    # No address (an older probe or torch): the machine's only AMD GPU is cuda:0; of two, none.
    bare = replace(ROCM_RT, devices=())
    assert map_cuda_index(proc(runtime=bare), 0, (H200, MI_A)) == 1
    assert map_cuda_index(proc(runtime=bare), 1, (H200, MI_A)) is None
    assert map_cuda_index(proc(runtime=bare), 0, GPUS) is None


def _job(util: float, *, steps=(0, 400)):
    """Ten polls of a ROCm job training on cuda:0 (MI_B) at ``util`` % busy, its KFD row's
    utilisation unknown (rocm-compute), steps going on."""
    gpu_b = replace(MI_B, util=util)
    gpus = (H200, MI_A, gpu_b)
    row = ProcGpu(2, 4096.0, None, None, "amd", MI_B.pci_bus_id, "rocm-compute")
    samples = []
    f = None
    for i in range(10):
        m = replace(model("cuda:0"), train_steps=steps[0] + (steps[1] - steps[0]) * i // 9)
        f = facts(proc(runtime=ROCM_RT, models=[m], gpu=[row]), gpus=gpus)
        samples.append(history_sample(1000.0 + 1.5 * i, f).recent)
    assert f is not None
    return f.with_recent(tuple(samples))


def test_idle_gpu_on_an_amd_gpu_from_its_device_busy_while_steps_go_on():
    f = _job(0.0)
    p, m = f.model_pairs[0]
    assert model_gpu_index(f, p, m) == 2 and f.job_gpu_indices == (2,)
    assert f.recent[-1].tree_sm_util is None and f.recent[-1].model_gpu_util == 0.0
    v = decide(f)
    assert v.status == "GPU" and v.model_gpu_index == 2
    assert [w.code for w in v.warnings if w.code == "idle-gpu"] == ["idle-gpu"]
    # Paused (no steps): not idle-gpu.
    assert "idle-gpu" not in [w.code for w in decide(_job(0.0, steps=(400, 400))).warnings]


def test_a_busy_amd_gpu_is_gpu_status_with_its_utilisation_and_the_document_maps_it():
    f = _job(93.0)
    v = decide(f)
    assert v.status == "GPU" and "idle-gpu" not in [w.code for w in v.warnings]
    assert "93%" in en(v.message)
    doc = status_document(
        f,
        v,
        time_s=1015.0,
        interval_s=1.5,
        target=TargetInfo(100, "python", ["python", "train.py"], 990.0, 99000),
        proc_info={},
        other_processes={},
        events=[],
    )
    check(doc, "status")
    assert doc["model_gpu_index"] == 2
    framework = {g["index"]: g["framework_index"] for g in doc["gpus"]}
    assert framework == {0: None, 1: 1, 2: 0}  # cuda:1 and cuda:0 on the AMD cards, none on NVML's
