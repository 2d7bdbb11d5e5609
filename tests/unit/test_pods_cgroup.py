"""sources/pods.py: a process's pod UID and container id from the lines of /proc/PID/cgroup, as
kubelets with each cgroup driver and container runtime write them; and bounded against what a
process can name its own cgroups."""

from __future__ import annotations

import pytest

from sidecar.sources.pods import (
    DEFAULT_PREFIXES,
    MAX_CGROUP_FILE_BYTES,
    CgroupPod,
    cgroup_root_prefixes,
    pod_from_cgroup_file,
    pod_from_path,
    pod_uid,
    trusted_prefixes,
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


# Issue 37 item 6: a user's delegated cgroup subtree (systemd's user@UID.service, a rootless
# container's) can hold any names below it; only the kubelet's root names a pod.
CRAFTED = [
    f"/user.slice/user-1000.slice/user@1000.service/kubepods/pod{UID}/{CID}",
    f"/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
    f"/system.slice/kubepods/burstable/pod{UID}/{CID}",
    f"/kubepods-evil/pod{UID}/{CID}",  # a name with "kubepods" in it is not the kubelet's
    f"/../user.slice/user-1000.slice/user@1000.service/kubepods/pod{UID}/{CID}",  # climbing first, then a user's
]


@pytest.mark.parametrize("path", CRAFTED)
def test_a_delegated_subtree_names_no_pod(path):
    assert pod_from_path(path) is None
    assert pod_from_cgroup_file(f"0::{path}\n".encode()) is None
    # Configured elsewhere, the kubelet's root still is not a user's subtree.
    assert pod_from_path(path, trusted_prefixes("/kube")) is None


def test_a_pod_nested_in_a_container_s_own_cgroups_is_the_outer_pod():
    # A container that may write its own cgroups (privileged, or v2 delegation) nests another pod's
    # names below its own: the first pod below kubepods is the one it runs in.
    other = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
    path = f"/kubepods/burstable/pod{UID}/{CID}/kubepods/pod{other}/{'e' * 64}"
    assert pod_from_path(path) == CgroupPod(UID, CID, None)
    systemd = (
        f"/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope/"
        f"kubepods-pod{other.replace('-', '_')}.slice/cri-containerd-{'e' * 64}.scope"
    )
    assert pod_from_path(systemd) == CgroupPod(UID, CID, "containerd")


@pytest.mark.parametrize(
    ("root", "path", "runtime"),
    [
        # the kubelet's --cgroup-root=/kube with the cgroupfs driver, and with systemd's
        ("/kube", f"/kube/kubepods/besteffort/pod{UID}/{CID}", None),
        ("/kube", f"/kube.slice/kube-kubepods.slice/kube-kubepods-pod{SYSTEMD_UID}.slice/crio-{CID}.scope", "cri-o"),
        # the root given as systemd's slices
        ("/kube.slice", f"/kube.slice/kube-kubepods.slice/kube-kubepods-pod{SYSTEMD_UID}.slice/crio-{CID}.scope", "cri-o"),
        # two levels deep
        ("/nodes/n1", f"/nodes/n1/kubepods/pod{UID}/{CID}", None),
    ],
)
def test_a_configured_cgroup_root_names_pods_below_it_alone(root, path, runtime):
    assert pod_from_path(path) is None  # not where the kubelet puts pods by default
    assert pod_from_path(path, trusted_prefixes(root)) == CgroupPod(UID, CID, runtime)
    assert pod_from_path(f"/user.slice{path}", trusted_prefixes(root)) is None  # below a user's: not it


def test_the_top_of_the_hierarchy_and_kind_s_root_are_the_defaults():
    for path in (
        f"/kubepods/pod{UID}/{CID}",
        f"/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
        f"/kubelet/kubepods/burstable/pod{UID}/{CID}",
        f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
        f"/../../kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
        f"/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
    ):
        found = pod_from_path(path, DEFAULT_PREFIXES)
        assert found is not None and (found.uid, found.container_id) == (UID, CID), path


@pytest.mark.parametrize("root", ["kube", "", "/a/../b", "/a/./b", "/a b", "/" + "x" * 2000, "/a\nb"])
def test_a_cgroup_root_that_is_no_absolute_cgroup_path_is_refused(root):
    with pytest.raises(ValueError):
        cgroup_root_prefixes(root)
