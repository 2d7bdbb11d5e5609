"""sources/pods.py: a process's pod UID and container id from the lines of /proc/PID/cgroup, as
kubelets with each cgroup driver and container runtime write them; and bounded against what a
process can name its own cgroups."""

from __future__ import annotations

import pytest

from sidecar.sources.pods import (
    MAX_CGROUP_FILE_BYTES,
    CgroupPod,
    pod_from_cgroup_file,
    pod_from_path,
    pod_uid,
)

UID = "1f2e3d4c-5b6a-4980-a1b2-c3d4e5f60718"
SYSTEMD_UID = UID.replace("-", "_")
CID = "0123456789abcdef" * 4
STATIC_UID = "6b4f5c0e1234567890abcdef01234567"  # a static (mirror) pod: the manifest's hash

CASES = [
    # cgroup v2, systemd driver, containerd, burstable
    (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        CgroupPod(UID, CID, "containerd"),
    ),
    # guaranteed QoS: no QoS level in the path
    (f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n", CgroupPod(UID, CID, "containerd")),
    # CRI-O, besteffort
    (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/crio-{CID}.scope\n",
        CgroupPod(UID, CID, "cri-o"),
    ),
    # docker (cri-dockerd) with the systemd driver
    (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/docker-{CID}.scope\n",
        CgroupPod(UID, CID, "docker"),
    ),
    # cgroup v1, cgroupfs driver: bare ids, the UID with its dashes; every hierarchy names it
    (
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n",
        CgroupPod(UID, CID, None),
    ),
    # cgroup v1 with systemd (CentOS 7 style): memory line, and an unrelated first line
    (
        f"13:pids:/user.slice\n9:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        CgroupPod(UID, CID, "containerd"),
    ),
    # kind / k3s: everything under kubelet.slice
    (
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        CgroupPod(UID, CID, "containerd"),
    ),
    # read from inside a cgroup namespace: the path climbs with '..' first
    (
        f"0::/../../kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
        CgroupPod(UID, CID, "containerd"),
    ),
    # a static pod's UID is the manifest's 32-hex hash
    (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-{CID}.scope\n",
        CgroupPod(STATIC_UID, CID, "containerd"),
    ),
    # the pod's own cgroup (no container below it)
    (f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice\n", CgroupPod(UID, None, None)),
    # CRI-O's conmon is no container
    (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/crio-conmon-{CID}.scope\n",
        CgroupPod(UID, None, None),
    ),
    # not a pod
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("0::/system.slice/containerd.service\n", None),
    (f"0::/docker/{CID}\n", None),
    (f"0::/system.slice/docker-{CID}.scope\n", None),
    # pod-like names outside a kubepods hierarchy
    (f"0::/user.slice/pod{UID}/{CID}\n", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "want"), CASES)
def test_real_cgroup_lines(text, want):
    assert pod_from_cgroup_file(text.encode()) == want


@pytest.mark.parametrize(
    "raw",
    [
        "1f2e3d4c-5b6a-4980-a1b2-c3d4e5f6071",  # one short
        "1f2e3d4c-5b6a-4980-a1b2-c3d4e5f607189",  # one long
        "1F2E3D4C-5B6A-4980-A1B2-C3D4E5F60718",  # the API server writes lower case
        "1f2e3d4c_5b6a-4980-a1b2c-3d4e5f60718",  # dashes in the wrong places
        "zzzzzzzz-5b6a-4980-a1b2-c3d4e5f60718",
        "________-____-____-____-____________",
    ],
)
def test_only_a_uid_s_shape_is_a_uid(raw):
    assert pod_uid(raw) is None
    assert pod_from_path(f"/kubepods/burstable/pod{raw}/{CID}") is None


def test_container_ids_of_other_shapes_are_not_taken():
    for bad in (CID[:-1], CID + "0", CID.upper(), f"cri-containerd-{CID[:32]}.scope", f"runc-{CID}.scope"):
        assert pod_from_path(f"/kubepods/pod{UID}/{bad}") == CgroupPod(UID, None, None), bad


def test_the_v2_line_wins_over_v1_lines():
    other = "2" * 64
    text = f"4:memory:/kubepods/pod{UID}/{other}\n0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/crio-{CID}.scope\n"
    assert pod_from_cgroup_file(text.encode()) == CgroupPod(UID, CID, "cri-o")


def test_hostile_files_are_bounded():
    # A process names its own cgroups (with delegation): a path longer than the bound is not read,
    # lines past the bound are not looked at, and a file past the byte bound is cut.
    long_path = "0::/" + "x/" * 5000 + f"kubepods/pod{UID}/{CID}\n"
    assert pod_from_cgroup_file(long_path.encode()) is None
    many = "".join(f"{i}:x:/\n" for i in range(1, 100)) + f"0::/kubepods/pod{UID}/{CID}\n"
    assert pod_from_cgroup_file(many.encode()) is None
    padded = b"1:x:/" + b"y" * MAX_CGROUP_FILE_BYTES + f"\n0::/kubepods/pod{UID}/{CID}\n".encode()
    assert pod_from_cgroup_file(padded) is None
    assert pod_from_cgroup_file(b"\xff\xfe:\x00:" + b"/kubepods/pod\xff" * 10) is None
