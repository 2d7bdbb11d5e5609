"""Issue 11: a CUDA build of torch that cannot use an older driver is reported as such.

torch's CUDA 13.0 on a driver of CUDA 12.4: NVML counts the GPU, ``torch.cuda.is_available()`` is
False, and the script trains on the CPU. The probe said ``cuda_available: true`` and the verdict
"a GPU is usable but the model is on the CPU". The torch here is a CPU build, so the scenario gives
it a CUDA version and an NVML count (what a cu130 wheel has) and loads a stand-in libcuda.so.1
that answers cuDriverGetVersion and records any call that would initialise CUDA.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

SCENARIO = """
import json, torch
torch.version.cuda = "13.0"
torch.cuda._device_count_nvml = lambda: 1
import probe
model = probe.register(torch.nn.Linear(2, 2))
rt = probe.snapshot()["runtime"]
keys = ("cuda_build", "cuda_available", "cuda_initialized", "device_count", "cuda_driver_loadable")
print(json.dumps({k: rt[k] for k in keys}))
"""


@pytest.fixture(scope="module")
def fake_cuda_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fakecuda")
    cc = shutil.which(os.environ.get("CC", "gcc")) or "gcc"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(out / "libcuda.so.1"), str(REPO / "tests/fakenvml/fakecuda.c")],
        check=True,
        capture_output=True,
    )
    return out


def run(fake_cuda_dir: Path | None, tmp_path: Path, driver_version: int) -> tuple[dict, str]:
    """The scenario's runtime facts, and the CUDA calls that initialise CUDA it made; with
    `fake_cuda_dir` None, no libcuda.so.1 is on the library path."""
    calls = tmp_path / "calls.txt"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(REPO),
        LD_LIBRARY_PATH=str(fake_cuda_dir or tmp_path),
        FAKE_CUDA_DRIVER_VERSION=str(driver_version),
        FAKE_CUDA_CALLS=str(calls),
        DSH_PROBE_INTERVAL_S="600",
    )
    out = subprocess.run([sys.executable, "-c", SCENARIO], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), calls.read_text() if calls.exists() else ""


def test_a_driver_of_an_older_cuda_major_makes_cuda_unavailable(fake_cuda_dir, tmp_path):
    rt, calls = run(fake_cuda_dir, tmp_path, 12040)
    assert rt == {
        "cuda_build": "13.0",
        "cuda_available": False,
        "cuda_initialized": False,
        "device_count": 1,
        "cuda_driver_loadable": True,
    }
    assert calls == ""  # nothing that initialises CUDA (and poisons fork) was called


def test_a_driver_of_the_same_major_keeps_the_nvml_answer(fake_cuda_dir, tmp_path):
    rt, calls = run(fake_cuda_dir, tmp_path, 13020)
    assert rt["cuda_available"] is True and rt["device_count"] == 1 and rt["cuda_driver_loadable"] is True
    assert calls == ""


def test_nvml_without_the_cuda_driver_library_makes_cuda_unavailable(tmp_path):
    """A container started with NVIDIA_DRIVER_CAPABILITIES=utility: NVML (nvidia-smi) answers, but
    libcuda.so.1 is not mounted and torch.cuda.is_available() is False. The probe said True."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has a CUDA driver library on its default search path")
    rt, calls = run(None, tmp_path, 13020)
    assert rt == {
        "cuda_build": "13.0",
        "cuda_available": False,
        "cuda_initialized": False,
        "device_count": 1,
        "cuda_driver_loadable": False,
    }
    assert calls == ""


# Issue 39 item 6: NVML cannot count (no libnvidia-ml.so.1), and the script asks torch whether CUDA
# is available. A cu130 wheel's is_available() runs cudaGetDeviceCount: cuInit, then the count. This
# torch is a CPU build, so the scenario's is_available() makes those driver calls itself.
ASKED = """
import ctypes, json, sys, torch
torch.version.cuda = "13.0"
torch.cuda._device_count_nvml = lambda: -1  # what torch's NVML counter says without libnvidia-ml
import probe
model = probe.register(torch.nn.Linear(2, 2))
keys = ("cuda_available", "device_count", "cuda_initialized")
before = {k: probe.snapshot()["runtime"][k] for k in keys}
def is_available():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    n = ctypes.c_int(0)
    return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0
available = is_available() if sys.argv[1] == "ask" else None
after = {k: probe.snapshot()["runtime"][k] for k in keys}
print(json.dumps({"before": before, "available": available, "after": after}))
"""


def run_asked(fake_cuda_dir: Path | None, tmp_path: Path, ask: bool, **env_over: str) -> tuple[dict, str]:
    calls = tmp_path / "calls.txt"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(REPO),
        LD_LIBRARY_PATH=str(fake_cuda_dir or tmp_path),
        FAKE_CUDA_DRIVER_VERSION="13000",
        FAKE_CUDA_CALLS=str(calls),
        DSH_PROBE_INTERVAL_S="600",
        **env_over,
    )
    out = subprocess.run(
        [sys.executable, "-c", ASKED, "ask" if ask else "no"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), calls.read_text() if calls.exists() else ""


def test_is_available_asked_by_the_script_is_reported_without_initialising_cuda(fake_cuda_dir, tmp_path):
    got, calls = run_asked(fake_cuda_dir, tmp_path, ask=True)
    unknown = {"cuda_available": None, "device_count": None, "cuda_initialized": False}
    assert got["before"] == unknown  # nobody asked yet, and the probe does not
    assert got["available"] is True
    assert got["after"] == {"cuda_available": True, "device_count": 1, "cuda_initialized": False}
    assert calls == "cuInit\n"  # the script's one call: none of the probe's


def test_is_available_false_asked_by_the_script_is_reported(fake_cuda_dir, tmp_path):
    got, calls = run_asked(fake_cuda_dir, tmp_path, ask=True, FAKE_CUDA_INIT_RESULT="100")
    assert got["available"] is False
    assert got["after"] == {"cuda_available": False, "device_count": 0, "cuda_initialized": False}
    assert calls == "cuInit\n"


def test_not_asked_stays_unknown(fake_cuda_dir, tmp_path):
    got, calls = run_asked(fake_cuda_dir, tmp_path, ask=False)
    assert got["before"] == got["after"] == {"cuda_available": None, "device_count": None, "cuda_initialized": False}
    assert calls == ""


def test_no_nvidia_driver_at_all_is_cuda_unavailable(tmp_path):
    """pip's default torch (a CUDA build) on a machine without the NVIDIA driver: neither NVML nor
    libcuda.so.1 loads, and is_available() is False whether or not the script asked."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has a CUDA driver library on its default search path")
    got, calls = run_asked(None, tmp_path, ask=True)
    assert got["available"] is False
    assert got["before"]["cuda_available"] is False and got["after"]["cuda_available"] is False
    assert calls == ""
