"""Processes in real cgroups named as the kubelet names them (cgroup v2 mounted by the test, as
root): the sidecar's lookup names each one's pod UID and container. Cleaned up always: processes
moved back and killed, cgroups removed, the hierarchy unmounted."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from sidecar.sources.kubelet.lookup import PodLookup
from tests.helpers.harness import REPO, python_env

UID = "1f2e3d4c-5b6a-4980-a1b2-c3d4e5f60718"
CID = "cd" * 32
BURSTABLE = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"
CGROUPFS_UID = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
JOB = "import sys; from probe_wire import SegmentWriter, empty_payload; w = SegmentWriter(); " \
      "w.publish(empty_payload(start_ticks=w.start_ticks)); print('ready', flush=True); sys.stdin.readline(); w.close()"


@pytest.fixture
def cgroup2():
    if os.geteuid() != 0:
        pytest.skip("needs root to mount cgroup2")
    root = tempfile.mkdtemp(prefix="dsh-cg2-")
    if subprocess.run(["mount", "-t", "cgroup2", "none", root], capture_output=True).returncode != 0:
        os.rmdir(root)
        pytest.skip("cgroup2 cannot be mounted here")
    made: list[str] = []
    procs: list[subprocess.Popen] = []
    try:
        yield root, made, procs
    finally:
        for proc in procs:
            try:
                with open(os.path.join(root, "cgroup.procs"), "w") as f:
                    f.write(str(proc.pid))
            except OSError:
                pass
            proc.kill()
            proc.wait()
        for path in reversed(made):
            try:
                os.rmdir(path)
            except OSError:
                pass
        subprocess.run(["umount", root], check=False)
        os.rmdir(root)


def _job(procs) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", JOB], env=python_env(), cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    procs.append(proc)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def _move(root, made, rel: str, pid: int) -> None:
    path = root
    for part in rel.split("/"):
        path = os.path.join(path, part)
        if not os.path.isdir(path):
            os.mkdir(path)
            made.append(path)
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(pid))


def test_probed_processes_in_kubelet_cgroups_are_named_by_pod_and_container(cgroup2, tmp_path):
    root, made, procs = cgroup2
    systemd_job, cgroupfs_job, plain = _job(procs), _job(procs), _job(procs)
    _move(root, made, f"{BURSTABLE}/cri-containerd-{CID}.scope", systemd_job.pid)
    _move(root, made, f"kubepods/besteffort/pod{CGROUPFS_UID}/{CID}", cgroupfs_job.pid)
    _move(root, made, "user.slice/session-1.scope", plain.pid)
    lookup = PodLookup(pods_url="", socket_path=str(tmp_path / "absent.sock"))
    a = lookup.pod_of(systemd_job.pid)
    assert (a.uid, a.container_id) == (UID, CID), a
    b = lookup.pod_of(cgroupfs_job.pid)
    assert (b.uid, b.container_id) == (CGROUPFS_UID, CID), b
    assert lookup.pod_of(plain.pid) is None
    assert lookup.pod_of(os.getpid()) is None
