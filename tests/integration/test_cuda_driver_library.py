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
import time
from pathlib import Path

import pytest

from sidecar.common.catalogue import render
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
        assert "CUDA: not available, libcuda.so.1 does not load" in human.stdout
    finally:
        job.kill()
        job.wait()


# Issue 39 item 6: a cu130 torch where NVML cannot answer (no libnvidia-ml.so.1) and the driver
# library loads. Until the script asks, nobody knows whether CUDA is available (the probe never
# initialises CUDA to find out); once it has asked (is_available(): cuInit, then the count, made
# here by hand for this CPU build's torch), the probe says what it answered.
ASKING_SCRIPT = """
import ctypes, sys, time, torch
torch.version.cuda = "13.0"  # a cu130 wheel's torch (this one is a CPU build)
import probe
model = probe.register(torch.nn.Linear(4, 4))
print("ready", flush=True)
sys.stdin.readline()
lib = ctypes.CDLL("libcuda.so.1")  # torch.cuda.is_available(), as the CUDA runtime makes it
n = ctypes.c_int(0)
print("available", lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0, flush=True)
while True:
    model(torch.randn(2, 4))
    time.sleep(0.05)
"""


def test_cuda_availability_is_one_text_in_the_document_and_once(tmp_path: Path) -> None:
    lib = tmp_path / "libcuda"
    lib.mkdir()
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib / "libcuda.so.1"), str(REPO / "tests/fakenvml/fakecuda.c")],
        check=True, capture_output=True,
    )
    env = python_env({"DSH_PROBE_INTERVAL_S": "0.1", "LD_LIBRARY_PATH": str(lib), "FAKE_CUDA_DRIVER_VERSION": "13000"})
    job = subprocess.Popen(
        [sys.executable, "-c", ASKING_SCRIPT], env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert job.stdout is not None and job.stdin is not None
        assert job.stdout.readline().strip() == "ready"
        texts = []
        for _ in range(2):
            with Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.2"], env=env) as sc:
                doc = sc.wait_status(lambda d: d["processes"] and d["processes"][0]["models"], what="the model")
            rt = doc["runtime"]
            text = render(rt["cuda_ref"])
            human = cli("--pid", str(job.pid), "--once", env=env)
            assert human.returncode == 0, human.stderr
            assert f"torch {rt['torch']} (CUDA 13.0), CUDA: {text}\n" in human.stdout, human.stdout
            texts.append((rt["cuda_available"], rt["device_count"], rt["cuda_ref"]["id"], text))
            job.stdin.write("\n")
            job.stdin.flush()
            if len(texts) == 1:
                assert job.stdout.readline().strip() == "available True"
                time.sleep(0.3)  # a publish after the script asked
        assert texts[0][:3] == (None, None, "summary.cudaUnknown"), texts
        assert "not known yet" in texts[0][3]
        assert texts[1] == (True, 1, "summary.cudaYes", "available · 1 device(s)"), texts
    finally:
        job.kill()
        job.wait()
