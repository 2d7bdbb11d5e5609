"""A ROCm job in a container on an AMD machine, watched from outside it (issue 41 item 9): the job
runs in PID and mount namespaces of its own (`unshare -m -p -f --mount-proc` as root, a private
/dev/shm, as a pod's), so it is pid 1 to itself and publishes its segment there; the sidecar on the
host finds it by its host pid (NSpid), and the GPU use the kernel names by host pid (its DRM fds in
/proc, its KFD files) is its own: a fixture /proc attaches an amdgpu client to the host pid, a
fixture KFD tree the ROCm compute, and its cgroup is a container's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers.drm_tree import MI_PCI, RADEON_PCI, MirroredProc, amd_sysfs, amdgpu_fdinfo
from tests.helpers.harness import REPO, python_env, wait_for
from tests.helpers.sidecar_cli import cli

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)"
)

MIB = 1024 * 1024
KFD_VRAM = 6 * 1024 * MIB  # the MI card's VRAM its ROCm compute holds
CONTAINER_CGROUP = "0::/kubepods.slice/kubepods-pod1234.slice/cri-containerd-0123abcd.scope\n"
WRITER = """
import sys
from probe_wire import SegmentWriter, empty_payload
w = SegmentWriter()
p = empty_payload(start_ticks=w.start_ticks)
p["runtime"].update(RUNTIME)
p["models"] = [dict(MODEL)]
w.publish(p)
print(w.name, flush=True)
sys.stdin.readline()
w.close()
"""
# A ROCm build on the MI card: its cuda:0 is the GPU at that address (HIP renumbers; the address says).
RUNTIME = {
    "torch": "2.6.0+rocm6.2.4",
    "cuda_build": None,
    "hip_build": "6.2.41134",
    "cuda_available": True,
    "cuda_initialized": True,
    "device_count": 1,
    "devices": [{"index": 0, "name": "AMD Instinct MI300X", "uuid": None, "pci_bus_id": MI_PCI}],
}
MODEL = {
    "name": "in-a-pod",
    "class": "Net",
    "params": 1_000_000,
    "device": "cuda:0",
    "devices": ["cuda:0"],
    "input_device": "cuda:0",
    "forward_calls": 3,
    "forward_rate_hz": 0.0,
    "last_forward_time": None,
    "data_wait_fraction": None,
    "data_wait_s": None,
    "step_s": None,
}


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


@pytest.fixture
def contained_job():
    """(the job's host pid, its launcher's): pid 1 of its own PID namespace."""
    code = f"RUNTIME = {RUNTIME!r}\nMODEL = {MODEL!r}\n{WRITER}"
    proc = subprocess.Popen(
        ["unshare", "-m", "-p", "-f", "--mount-proc", "bash", "-c",
         'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"', "bash", sys.executable, "-c", code],
        env=python_env(),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "/dsh-probe.1"
        kids = wait_for(lambda: _children(proc.pid), what="the contained job's pid")
        yield kids[0], proc.pid
    finally:
        proc.communicate("\n", timeout=60)


def test_a_contained_rocm_jobs_gpu_use_is_its_own_by_its_host_pid(tmp_path, contained_job):
    pid, launcher = contained_job
    with open(f"/proc/{pid}/status") as f:
        assert any(line.split()[1:] == [str(pid), "1"] for line in f if line.startswith("NSpid:"))
    proc = MirroredProc(tmp_path, launcher, pid)
    (proc.root / str(pid) / "cgroup").unlink()
    (proc.root / str(pid) / "cgroup").write_text(CONTAINER_CGROUP)  # a pod's container
    proc.drm_fd(5, amdgpu_fdinfo(217, vram_kib=2048, gfx_ns=1_000, pdev=RADEON_PCI), pid=pid)
    sysfs = amd_sysfs(tmp_path, kfd_pids={pid: KFD_VRAM})  # KFD names the host pid
    out = cli(
        "--pid",
        str(launcher),
        "--once",
        "--json",
        "--path.procfs",
        str(proc.root),
        "--path.sysfs",
        str(sysfs),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (entry,) = [p for p in doc["processes"] if p["pid"] == pid]
    assert [m["name"] for m in entry["models"]] == ["in-a-pod"], entry
    uses = {g["pci_bus_id"]: g for g in entry["gpu"]}
    assert set(uses) == {RADEON_PCI, MI_PCI}
    assert uses[RADEON_PCI]["mem_used_mib"] == 2.0  # its render-node client's VRAM
    mi = uses[MI_PCI]
    assert (mi["mem_used_mib"], mi["sm_util_pct"], mi["unknown_reason"]) == (6144.0, None, "rocm-compute")
    # Its model's cuda:0 is the MI card (the address its probe reports), and that is where it runs.
    mi_gpu = next(g for g in doc["gpus"] if g["pci_bus_id"] == MI_PCI)
    assert doc["model_device"] == "cuda:0" and doc["model_gpu_index"] == mi_gpu["index"], doc[
        "model_gpu_index"
    ]
    assert doc["status"] == "GPU", doc["warnings"]
    # The launcher (outside the job's namespace, pid 1's parent) holds no GPU of its own.
    (outer,) = [p for p in doc["processes"] if p["pid"] == launcher]
    assert outer["gpu"] == []
