"""A process's Kubernetes pod, read from its cgroup: the pod UID and the container id.

The kubelet puts each container in a cgroup whose path names the pod and the container. With the
systemd cgroup driver (cgroup v1 or v2)::

    /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, '-' as '_'>.slice/cri-containerd-<id>.scope

and with the cgroupfs driver::

    /kubepods/burstable/pod<uid>/<64 hex container id>

(Guaranteed pods have no QoS level; kind and k3s nest all of it under a ``kubelet.slice`` or
``kubelet-`` prefix.) The container's scope names its runtime: ``cri-containerd-``, ``crio-``,
``docker-`` or a bare id. A reader in its own cgroup namespace sees the same segments below a
``/..`` prefix, so the path is read segment by segment, not from its root.

``/proc/PID/cgroup`` is what the process (any local user, a pod) can shape through its own cgroup
names: every read is bounded, and a UID or an id is taken only in its exact shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from probe_wire.procfs import proc_path

# What one /proc/PID/cgroup read takes at most: a v1 machine lists a line per hierarchy (about 13),
# each path under 4 KiB in practice; a longer file is cut, never read whole.
MAX_CGROUP_FILE_BYTES = 64 * 1024
MAX_CGROUP_LINES = 64
MAX_CGROUP_PATH_CHARS = 4096

# A pod UID: the API server's RFC 4122 UUID, or a static (mirror) pod's 32-hex hash.
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_HASH_UID_RE = re.compile(r"^[0-9a-f]{32}$")
# "pod<uid>" in a segment of a kubepods hierarchy: the whole segment (cgroupfs) or its last
# dash-separated part (systemd: "kubepods-burstable-pod<uid>.slice").
_POD_SEGMENT_RE = re.compile(r"^(?:.*-)?pod([0-9a-f_-]{32,36})(?:\.slice)?$")
# The container's scope: its runtime's prefix (None: a bare id, the cgroupfs driver's).
_CONTAINER_RE = re.compile(r"^(cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")
_RUNTIMES = {
    "cri-containerd-": "containerd",
    "containerd-": "containerd",
    "crio-": "cri-o",
    "docker-": "docker",
    None: None,
}


@dataclass(frozen=True, slots=True)
class CgroupPod:
    """What a cgroup path says of a process's pod."""

    uid: str  # the pod's UID, as the API server spells it (dashes, lower case)
    container_id: str | None  # 64 hex digits; None for a process of the pod's own cgroup (rare)
    runtime: str | None  # "containerd", "cri-o", "docker"; None when the path does not say


def pod_uid(raw: str) -> str | None:
    """The pod UID in a cgroup's "pod<uid>" part (systemd writes its dashes as '_'), or None
    when it is not a UID's shape."""
    uid = raw.replace("_", "-")
    if _UUID_RE.match(uid) or _HASH_UID_RE.match(uid):
        return uid
    return None


def pod_from_path(path: str) -> CgroupPod | None:
    """The pod and container a cgroup path names, or None when it is no kubelet's pod cgroup.

    The pod is the last "pod<uid>" segment below a segment naming ``kubepods``; the container, the
    segment right after it when that is a container's scope."""
    if len(path) > MAX_CGROUP_PATH_CHARS:
        return None
    parts = [p for p in path.split("/") if p]
    seen_kubepods = False
    found: CgroupPod | None = None
    for i, part in enumerate(parts):
        seen_kubepods = seen_kubepods or "kubepods" in part
        if not seen_kubepods:
            continue
        m = _POD_SEGMENT_RE.match(part)
        uid = pod_uid(m.group(1)) if m else None
        if uid is None:
            continue
        container_id = runtime = None
        if i + 1 < len(parts):
            c = _CONTAINER_RE.match(parts[i + 1])
            if c:
                container_id, runtime = c.group(2), _RUNTIMES[c.group(1)]
        found = CgroupPod(uid, container_id, runtime)
    return found


def pod_from_cgroup_file(data: bytes) -> CgroupPod | None:
    """The pod of a process from the bytes of its ``/proc/PID/cgroup``: the unified (v2) line
    first, else the first v1 hierarchy whose path names a pod. Bounded: MAX_CGROUP_FILE_BYTES,
    MAX_CGROUP_LINES, MAX_CGROUP_PATH_CHARS."""
    text = data[:MAX_CGROUP_FILE_BYTES].decode("utf-8", "replace")
    unified: CgroupPod | None = None
    legacy: CgroupPod | None = None
    for line in text.split("\n")[:MAX_CGROUP_LINES]:
        fields = line.split(":", 2)  # hierarchy-ID:controllers:path (the path may hold ':')
        if len(fields) != 3:
            continue
        found = pod_from_path(fields[2])
        if found is None:
            continue
        if fields[0] == "0" and fields[1] == "":
            unified = unified or found
        elif legacy is None or (legacy.container_id is None and found.container_id is not None):
            legacy = found
    return unified or legacy


def process_pod(pid: int) -> CgroupPod | None:
    """The pod of a running process (``/proc/PID/cgroup``); None when it runs in none or its
    cgroup file cannot be read."""
    try:
        with open(proc_path(int(pid), "cgroup"), "rb") as f:
            data = f.read(MAX_CGROUP_FILE_BYTES)
    except (OSError, ValueError):
        return None
    return pod_from_cgroup_file(data)
