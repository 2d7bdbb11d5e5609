"""NVML present, CUDA driver library absent (issue 25): a container started with
NVIDIA_DRIVER_CAPABILITIES=utility has a working nvidia-smi and no libcuda.so.1, and torch cannot
use CUDA there. A real torch process runs the probe against the simulated NVML (one GPU) with no
libcuda.so.1 on its library path; a real sidecar reads it over loopback.

The torch here is a CPU build, so the script gives it the CUDA version a cu124 wheel has (as
tests/unit/test_probe_cuda_driver.py does); NVML's count comes through torch's own NVML counter
from the simulated driver. The probe used to publish what NVML implied (cuda_available True), and
the verdict said "a GPU is usable but model Net is on the CPU"."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakenvml import gpu
from tests.helpers.harness import REPO, Sidecar, codes, python_env
from tests.helpers.sidecar_cli import cli

pytest.importorskip("torch")

SCRIPT = """
import time, torch
torch.version.cuda = "12.4"  # a cu124 wheel's torch (this one is a CPU build)
import probe
model = probe.register(torch.nn.Linear(4, 4))
x = torch.randn(2, 4)
print("ready", flush=True)
while True:
    model(x)
    time.sleep(0.05)
"""


@pytest.fixture
def no_libcuda():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    pytest.skip("this machine has a CUDA driver library on its default search path")


def test_nvml_without_libcuda_is_cuda_unavailable_not_a_model_left_on_the_cpu(
    fake_nvml, no_libcuda, tmp_path: Path
):
    fake_nvml.write({"gpus": [gpu(0)], "cuda_driver_version": 12040})
    env = fake_nvml.env({"DSH_PROBE_INTERVAL_S": "0.2"})
    job = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=python_env(base=env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout.readline().strip() == "ready"
        with Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.3"], env=env) as sc:
            doc = sc.wait_status(lambda d: d["processes"] and d["processes"][0]["models"], what="the model")
        assert doc["runtime"]["cuda_available"] is False and doc["runtime"]["cuda_driver_loadable"] is False
        assert "cuda-unavailable" in codes(doc) and "model-on-cpu" not in codes(doc)
        (w,) = [w for w in doc["warnings"] if w["code"] == "cuda-unavailable"]
        assert "NVML sees 1 GPU(s), but the CUDA driver library (libcuda.so.1) does not load" in w["message"]
        assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in w["hint"]
        assert doc["status"] == "CPU" and "libcuda.so.1" in doc["message"]
        human = cli("--pid", str(job.pid), "--once", env=env)
        assert human.returncode == 0, human.stderr
        assert "cuda available: False, libcuda.so.1 does not load" in human.stdout
    finally:
        job.kill()
        job.wait()
