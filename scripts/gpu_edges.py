"""The edges of a job on a real CUDA GPU (issue 25), for scripts/gpu_check.py: what the verdict
says when the job exits (mp.spawn ranks on cuda:0, final counts), when NVML answers but the CUDA
driver library is missing (a mount namespace hides libcuda.so.1, as a container started with
NVIDIA_DRIVER_CAPABILITIES=utility does), and when a registered model is then compiled."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from tests.helpers.harness import Sidecar, codes

SPAWN_JOB = """
import time, torch, torch.multiprocessing as mp

def main_worker(rank, forwards):
    import probe
    model = probe.register(torch.nn.Linear(256, 256).to("cuda:0"), name="rank-model")
    x = torch.randn(64, 256, device="cuda:0")
    for _ in range(forwards[rank]):
        model(x)
    torch.cuda.synchronize()
    time.sleep(0.8)
    for _ in range(forwards[rank]):
        model(x)
    torch.cuda.synchronize()

if __name__ == "__main__":
    mp.spawn(main_worker, nprocs=2, args=([37, 53],))
    time.sleep(0.2)
"""

NO_LIBCUDA_JOB = """
import time, torch, probe
model = probe.register(torch.nn.Linear(8, 8), name="no-libcuda")
print("cuda_available", torch.cuda.is_available(), flush=True)
for _ in range(100):
    model(torch.ones(2, 8))
    time.sleep(0.05)
"""

COMPILE_JOB = """
import time, torch, probe
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512)).to("cuda:0")
probe.register(model, name="compiled")
model = torch.compile(model)  # nanoGPT's order: register, then compile
x = torch.randn(128, 512, device="cuda:0")
for _ in range(200):
    model(x).sum().backward()
torch.cuda.synchronize()
time.sleep(3)
"""


def _final(job: str, env: dict | None = None, timeout_s: float = 240) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "job.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(job))
        args = ["run", "--interval", "0.2", "--grace", "5", "--port", "0", "--", sys.executable, path]
        with Sidecar(args, env={**os.environ, **(env or {})}) as sc:
            return sc.wait_status(lambda d: not d["target"]["alive"], timeout_s=timeout_s, what="the job's exit")


def final_state(check) -> None:
    doc = _final(SPAWN_JOB, {"DSH_PROBE_INTERVAL_S": "5"})
    ranks = sorted((p for p in doc["processes"] if p["models"]), key=lambda p: p["models"][0]["forward_calls"])
    calls = [p["models"][0]["forward_calls"] for p in ranks]
    check("final state: ranks kept", doc["status"] == "GPU" and "no-probe" not in codes(doc),
          f"{doc['status']}: {doc['message'][:70]}")
    check("final state: exact counts", calls == [74, 106], f"{calls} (want [74, 106]), exited "
          f"{[p['exited'] for p in ranks]}, devices {[p['models'][0]['device'] for p in ranks]}")


def _libcuda_path() -> str | None:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("libcuda.so.1 ") and "x86-64" in line:
            return os.path.realpath(line.rsplit("=>", 1)[1].strip())
    return None


def no_libcuda(check) -> None:
    lib = _libcuda_path()
    if lib is None or shutil.which("unshare") is None:
        check("no libcuda: cuda-unavailable", None, f"libcuda {lib}, unshare {shutil.which('unshare')}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "job.py")
        with open(path, "w") as f:
            f.write(NO_LIBCUDA_JOB)
        # The job alone sees /dev/null where libcuda.so.1 is; NVML (libnvidia-ml) stays.
        hide = f"mount --bind /dev/null {lib} && exec {sys.executable} {path}"
        args = ["run", "--interval", "0.2", "--grace", "3", "--port", "0", "--", "unshare", "-m", "sh", "-c", hide]
        with Sidecar(args, env=dict(os.environ)) as sc:
            doc = sc.wait_status(lambda d: any(p["models"] for p in d["processes"]), timeout_s=90, what="the probe")
    warned = [w for w in doc["warnings"] if w["code"] == "cuda-unavailable"]
    check("no libcuda: cuda-unavailable", bool(warned) and "libcuda" in warned[0]["message"],
          (warned[0]["message"] if warned else f"{doc['status']}: {sorted(codes(doc))}")[:100])
    check("no libcuda: never 'usable'", "model-on-cpu" not in codes(doc) and "is available" not in doc["message"],
          doc["message"][:100])


def compiled(check) -> None:
    doc = _final(COMPILE_JOB)
    models = [m for p in doc["processes"] for m in p["models"]]
    calls = [m["forward_calls"] for m in models]
    warned = "registered-before-compile" in codes(doc)
    check("register then compile", bool(models) and (any(calls) or warned),
          f"forward_calls {calls}, registered-before-compile {'shown' if warned else 'absent'}")


STEPS = (final_state, no_libcuda, compiled)
