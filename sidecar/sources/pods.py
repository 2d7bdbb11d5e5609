"""A process's Kubernetes pod, read from its cgroup: the pod UID and the container id.

The kubelet puts each container in a cgroup whose path names the pod and the container. With the
systemd cgroup driver (cgroup v1 or v2)::

    /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, '-' as '_'>.slice/cri-containerd-<id>.scope

and with the cgroupfs driver::

    /kubepods/burstable/pod<uid>/<64 hex container id>

(Guaranteed pods have no QoS level.) The container's scope names its runtime: ``cri-containerd-``,
``crio-``, ``docker-`` or a bare id.

Only a path rooted where the kubelet puts pods names one. Any user with a delegated cgroup subtree
(systemd's ``user@UID.service``, a rootless container) can create ``kubepods/pod<uid>/<id>`` below
it, naming any pod it likes; the kubelet's own cgroups are root's, at the kubelet's cgroup root:
the top of the hierarchy (its default ``--cgroup-root=/``), kind's ``/kubelet`` (``kubelet.slice/
kubelet-kubepods.slice`` with the systemd driver), or the root the sidecar is told
(``--kubelet-cgroup-root``, the kubelet's own flag's value). A reader in its own cgroup namespace
(the sidecar in a pod) sees the paths of other cgroups relative to its own, climbing first:
``/../../kubepods-besteffort-pod<uid>.slice/...``. Those ancestors are the sidecar's own cgroup's,
so a path of ``..`` segments followed by a segment of the kubelet's hierarchy is rooted there too.
Below the kubepods cgroup the first "pod<uid>" segment is the pod: a container that may write its
own cgroups can nest another "pod<uid>" below its own, never above.

``/proc/PID/cgroup`` is what the process (any local user, a pod) can shape through its own cgroup
names: every read is bounded, and a UID or an id is taken only in its exact shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths

# What one /proc/PID/cgroup read takes at most: a v1 machine lists a line per hierarchy (about 13),
# each path under 4 KiB in practice; a longer file is cut, never read whole.
MAX_CGROUP_FILE_BYTES = 64 * 1024
MAX_CGROUP_LINES = 64
MAX_CGROUP_PATH_CHARS = 4096
MAX_CGROUP_ROOT_CHARS = 1024  # a configured cgroup root (--kubelet-cgroup-root)
MAX_SEGMENTS_TO_POD = 3  # segments below kubepods up to the pod's: see pod_from_path
# A segment of a configured cgroup root: systemd's unit names and cgroupfs's usual ones.
_ROOT_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_.:@+\\-]{1,255}$")

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


def cgroup_root_prefixes(root: str) -> tuple[tuple[str, ...], ...]:
    """The segments that lead to the kubelet's kubepods cgroup under its cgroup root ``root`` (the
    kubelet's ``--cgroup-root``: ``/``, ``/kube``, or a systemd slice such as ``/kube.slice``), with
    either cgroup driver: ``/kube`` gives ``kube/kubepods`` (cgroupfs) and ``kube.slice/
    kube-kubepods.slice`` (systemd). ValueError when ``root`` is not an absolute cgroup path."""
    if not isinstance(root, str) or not root.startswith("/") or len(root) > MAX_CGROUP_ROOT_CHARS:
        raise ValueError(f"not an absolute cgroup path of at most {MAX_CGROUP_ROOT_CHARS} characters: {root!r}")
    parts = tuple(p for p in root.split("/") if p)
    bad = [p for p in parts if p in (".", "..") or not _ROOT_SEGMENT_RE.match(p)]
    if bad:
        raise ValueError(f"{root!r}: {bad[0]!r} is not a cgroup's name")
    prefixes = [(*parts, "kubepods")]
    if parts and parts[-1].endswith(".slice"):  # given as systemd's slices: the child slice repeats it
        prefixes.append((*parts, f"{parts[-1][: -len('.slice')]}-kubepods.slice"))
    elif not any(p.endswith(".slice") for p in parts):  # the kubelet's cgroup name, as systemd spells it
        name = (*parts, "kubepods")
        prefixes.append(tuple("-".join(name[: i + 1]) + ".slice" for i in range(len(name))))
    return tuple(prefixes)


# The top of the hierarchy (the kubelet's default) and kind's nodes (``--cgroup-root=/kubelet``).
DEFAULT_PREFIXES = cgroup_root_prefixes("/") + cgroup_root_prefixes("/kubelet")


def trusted_prefixes(configured_root: str | None) -> tuple[tuple[str, ...], ...]:
    """The defaults and, when given, the configured cgroup root's (ValueError when it is none)."""
    return DEFAULT_PREFIXES + (cgroup_root_prefixes(configured_root) if configured_root else ())


def _below_kubepods(parts: list[str], prefixes: tuple[tuple[str, ...], ...]) -> int | None:
    """Where the segments below the kubelet's kubepods cgroup start, or None when the path is not
    rooted where the kubelet puts pods."""
    climbs = 0
    while climbs < len(parts) and parts[climbs] == "..":
        climbs += 1
    if climbs:
        # Relative to the reader's own cgroup: the segment after the climb is a child of one of its
        # ancestors, which only the kubelet's hierarchy holds when it names kubepods.
        return climbs if climbs < len(parts) and "kubepods" in parts[climbs] else None
    for prefix in prefixes:
        if tuple(parts[: len(prefix)]) == prefix:
            return len(prefix)
    return None


def pod_from_path(path: str, prefixes: tuple[tuple[str, ...], ...] = DEFAULT_PREFIXES) -> CgroupPod | None:
    """The pod and container a cgroup path names, or None when it is no kubelet's pod cgroup.

    The path must be rooted where the kubelet puts pods (``prefixes``, see ``trusted_prefixes``);
    the pod is the first "pod<uid>" segment below kubepods (after the QoS level, if any), the
    container the segment right after it when that is a container's scope."""
    if len(path) > MAX_CGROUP_PATH_CHARS:
        return None
    parts = [p for p in path.split("/") if p]
    start = _below_kubepods(parts, prefixes)
    if start is None:
        return None
    # The pod's segment is at most the third below the start: [QoS level,] pod; in a namespace,
    # [kubepods.slice, QoS level,] pod. Deeper ones are a container's own cgroups.
    for i in range(start, min(start + MAX_SEGMENTS_TO_POD, len(parts))):
        m = _POD_SEGMENT_RE.match(parts[i])
        uid = pod_uid(m.group(1)) if m else None
        if uid is None:
            continue
        container_id = runtime = None
        if i + 1 < len(parts):
            c = _CONTAINER_RE.match(parts[i + 1])
            if c:
                container_id, runtime = c.group(2), _RUNTIMES[c.group(1)]
        return CgroupPod(uid, container_id, runtime)
    return None


def pod_from_cgroup_file(data: bytes, prefixes: tuple[tuple[str, ...], ...] = DEFAULT_PREFIXES) -> CgroupPod | None:
    """The pod of a process from the bytes of its ``/proc/PID/cgroup``: the unified (v2) line
    first, else the first v1 hierarchy whose path names a pod (``pod_from_path``). Bounded:
    MAX_CGROUP_FILE_BYTES, MAX_CGROUP_LINES, MAX_CGROUP_PATH_CHARS."""
    text = data[:MAX_CGROUP_FILE_BYTES].decode("utf-8", "replace")
    unified: CgroupPod | None = None
    legacy: CgroupPod | None = None
    for line in text.split("\n")[:MAX_CGROUP_LINES]:
        fields = line.split(":", 2)  # hierarchy-ID:controllers:path (the path may hold ':')
        if len(fields) != 3:
            continue
        found = pod_from_path(fields[2], prefixes)
        if found is None:
            continue
        if fields[0] == "0" and fields[1] == "":
            unified = unified or found
        elif legacy is None or (legacy.container_id is None and found.container_id is not None):
            legacy = found
    return unified or legacy


def process_pod(
    pid: int, prefixes: tuple[tuple[str, ...], ...] = DEFAULT_PREFIXES, *, host: HostPaths = HOST
) -> CgroupPod | None:
    """The pod of a running process (``/proc/PID/cgroup`` of ``host``'s /proc); None when it runs in
    none or its cgroup file cannot be read."""
    try:
        with open(host.proc_path(int(pid), "cgroup"), "rb") as f:
            data = f.read(MAX_CGROUP_FILE_BYTES)
    except (OSError, ValueError):
        return None
    return pod_from_cgroup_file(data, prefixes)
