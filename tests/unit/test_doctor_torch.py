"""doctor's torch problems: a CUDA build of torch that cannot use CUDA is told why, by the verdict's
own reasons (sidecar.verdict.cuda_unavailable_reason), from the report of the user's interpreter."""

from __future__ import annotations

from sidecar.cli.doctor import _torch_problems
from sidecar.verdict import Facts, GpuFacts

CUDA_TORCH = {"torch": "2.13.0", "cuda_build": "12.6", "cuda_available": False, "device_count": 0, "error": None}


def test_a_cuda_torch_that_cudas_visible_devices_hides_every_gpu_from_is_told_so():
    report = {**CUDA_TORCH, "cuda_visible_devices": ""}
    problems = _torch_problems(report, "python3", Facts(target_pid=0, gpus=(GpuFacts(0),)), True)
    assert [p["problem"] for p in problems] == ["CUDA is not available to torch: CUDA_VISIBLE_DEVICES='' hides every GPU"]


def test_a_cuda_torch_newer_than_the_driver_is_told_so_with_its_torch_init_error():
    report = {**CUDA_TORCH, "cuda_visible_devices": None, "cuda_init_error": "driver too old"}
    facts = Facts(target_pid=0, gpus=(GpuFacts(0),), cuda_driver="12.2")
    (problem,) = _torch_problems(report, "python3", facts, True)
    assert problem["problem"].startswith("CUDA is not available to torch: ")
    assert "12.2" in problem["problem"] and "12.6" in problem["problem"]
    assert problem["problem"].endswith("(torch says: driver too old)")
    # torch 2.13 has no wheel for CUDA 12.2 or older (sidecar/verdict/wheels.py): a newer driver it is
    assert "Upgrade the NVIDIA driver" in problem["fix"] and "CUDA 12.6" in problem["fix"]
