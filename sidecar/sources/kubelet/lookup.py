"""A process's pod by name: its cgroup gives the pod's UID and container id (``sources/pods.py``,
only from a cgroup rooted where the kubelet puts pods), and the node's kubelet the pod's namespace
and name.

What names a pod, in order:

1. the kubelet's Pods API (``pods_api``): by the cgroup's UID, and the container's name by its id;
2. the kubelet's pod-resources API (``pod_resources``): it names no UID, so a pod is taken only
   when it is the one pod holding the GPUs the process uses (the driver says which it uses, the
   kubelet which pod holds them);
3. else nothing: the UID and the container's id are the cgroup's (source ``cgroup``), and what the
   process says of itself (``POD_NAME``/``POD_NAMESPACE`` in its environment, its service account's
   namespace file, its hostname) is shown as ``self-reported``.

What a process says of itself never names a pod for the kubelet's sources: a process sets its own
environment and hostname, and a hostname matched against pod-resources' names, or an answer kept
per UID after such a match, named another pod's job after the process's claim. Only the kubelet's
own answer for a UID is kept per UID (a pod's name and namespace never change), at most
``max_pods``; the pod-resources answer is matched again at each lookup, and the self-reported view
is kept per process (``ProcessPods``), never for another one.

The kubelet is asked at most once per ``list_every_s`` whatever the number of new pods. A process's
files are read in the /proc of the lookup's ``host`` (hostfs.paths: --path.procfs).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from hostfs.paths import HOST, HostPaths
from hostfs.procroot import open_in_root, proc_root
from sidecar.sources.kubelet import pod_resources, pods_api
from sidecar.sources.kubelet.names import label_name, subdomain_name
from sidecar.sources.pods import CgroupPod, process_pod, trusted_prefixes

SOCKET_ENV = "DSH_KUBELET_POD_RESOURCES_SOCKET"
CGROUP_ROOT_ENV = "DSH_KUBELET_CGROUP_ROOT"  # --kubelet-cgroup-root's default
LIST_EVERY_S = 10.0
MAX_PODS_CACHED = 1024
MAX_ENVIRON_BYTES = 128 * 1024
MAX_SMALL_FILE_BYTES = 256
SERVICE_ACCOUNT_NAMESPACE = "var/run/secrets/kubernetes.io/serviceaccount/namespace"

# What named a pod (the document's pod.source, dsh_job_info's pod_source).
SOURCE_KUBELET = "kubelet"  # the Pods API, by the cgroup's UID
SOURCE_POD_RESOURCES = "pod-resources"  # the pod holding the process's GPUs
SOURCE_SELF_REPORTED = "self-reported"  # the process's own environment and hostname
SOURCE_CGROUP = "cgroup"  # nothing named it: the UID and container id are the cgroup's
TRUSTED_SOURCES = frozenset({SOURCE_KUBELET, SOURCE_POD_RESOURCES})


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str | None
    name: str | None
    container: str | None  # the container's name
    container_id: str | None  # 64 hex digits, from the cgroup
    source: str  # one of the SOURCE_* above
    why: str | None  # why the kubelet's sources did not name it; None when one did


@dataclass(frozen=True, slots=True)
class _Holder:
    """A pod of pod-resources' answer holding a device, and its container holding it."""

    namespace: str
    name: str
    container: str


class _ResourceIndex:
    """Pod-resources' answer by device id: one pass per answer, then a lookup per device."""

    def __init__(self, listed: list[pod_resources.ResourcePod]) -> None:
        self.by_device: dict[str, list[_Holder]] = {}
        for p in listed:
            for c in p.containers:
                for d in c.device_ids:
                    self.by_device.setdefault(d, []).append(_Holder(p.namespace, p.name, c.name))

    def holder(self, devices: Iterable[str]) -> tuple[str, str, str | None] | None:
        """(namespace, name, container) of the one pod holding any of ``devices``; None when none
        or several do. The container is named when one container holds them all."""
        holders = [h for d in devices for h in self.by_device.get(d, ())]
        pods = {(h.namespace, h.name) for h in holders}
        if len(pods) != 1:
            return None
        containers = {h.container for h in holders}
        namespace, name = pods.pop()
        return namespace, name, containers.pop() if len(containers) == 1 else None


class PodLookup:
    def __init__(
        self,
        *,
        pods_url: str | None = None,
        socket_path: str | None = None,
        cgroup_root: str | None = None,
        timeout_s: float = pod_resources.LIST_TIMEOUT_S,
        list_every_s: float = LIST_EVERY_S,
        max_pods: int = MAX_PODS_CACHED,
        clock: Callable[[], float] = time.monotonic,
        host: HostPaths = HOST,
    ) -> None:
        self.host = host
        self.pods_url = pods_url if pods_url is not None else os.environ.get(pods_api.URL_ENV)
        self.socket_path = socket_path or os.environ.get(SOCKET_ENV) or pod_resources.DEFAULT_SOCKET
        # Where the kubelet puts pods (ValueError for a root that is no cgroup path).
        self.cgroup_prefixes = trusted_prefixes(cgroup_root if cgroup_root is not None else os.environ.get(CGROUP_ROOT_ENV))
        self.timeout_s = timeout_s
        self.list_every_s = list_every_s
        self.max_pods = max_pods
        self.clock = clock
        self._by_uid: OrderedDict[str, pods_api.KubeletPod] = OrderedDict()  # the kubelet's answers only
        # (when, pods by UID, why not)
        self._kubelet: tuple[float, dict[str, pods_api.KubeletPod] | None, str | None] | None = None
        self._resources: tuple[float, _ResourceIndex | None, str | None] | None = None

    def pod_of(self, pid: int, *, hostname: str | None = None, gpu_uuids: Iterable[str] = ()) -> PodInfo | None:
        """The pod of the running process ``pid``; None when it runs in none. Never raises."""
        try:
            cg = process_pod(pid, self.cgroup_prefixes, host=self.host)
            return None if cg is None else self.lookup(cg, pid, hostname=hostname, gpu_uuids=gpu_uuids)
        except Exception:  # noqa: BLE001 -- a poll never fails on a pod's name
            return None

    def lookup(self, cg: CgroupPod, pid: int, *, hostname: str | None = None, gpu_uuids: Iterable[str] = ()) -> PodInfo:
        """The pod as the kubelet names it (``named``), else as the process says (self-reported)."""
        found = self.named(cg, gpu_uuids)
        if found.source != SOURCE_CGROUP:
            return found
        return self_reported(found, pid, hostname, self.host) or found

    def named(self, cg: CgroupPod, gpu_uuids: Iterable[str] = ()) -> PodInfo:
        """The pod as the kubelet names it: by the cgroup's UID (Pods API), else as the one pod
        holding the GPUs ``gpu_uuids`` (pod-resources); else source ``cgroup`` and why."""
        known = self._by_uid.get(cg.uid)
        if known is not None:
            self._by_uid.move_to_end(cg.uid)
            return _from_kubelet(cg, known)
        now = self.clock()
        pods, why_kubelet = self._kubelet_pods(now)
        pod = (pods or {}).get(cg.uid)
        if pod is not None:
            self._by_uid[cg.uid] = pod
            while len(self._by_uid) > self.max_pods:
                self._by_uid.popitem(last=False)
            return _from_kubelet(cg, pod)
        if pods is not None:
            why_kubelet = f"the kubelet lists no pod {cg.uid}"
        index, why_resources = self._resource_index(now)
        held = index.holder(gpu_uuids) if index is not None else None
        if held is not None:
            namespace, name, container = held
            return PodInfo(cg.uid, namespace, name, container, cg.container_id, SOURCE_POD_RESOURCES, None)
        if index is not None:
            why_resources = "no one pod-resources pod holds its GPUs"
        return PodInfo(cg.uid, None, None, None, cg.container_id, SOURCE_CGROUP, f"{why_kubelet}; {why_resources}")

    def _kubelet_pods(self, now: float) -> tuple[dict[str, pods_api.KubeletPod] | None, str | None]:
        if not self.pods_url:
            return None, f"kubelet Pods API not configured ({pods_api.URL_ENV})"
        if self._kubelet is None or now - self._kubelet[0] >= self.list_every_s:
            self._kubelet = (now, *pods_api.fetch_pods(self.pods_url, self.timeout_s, host=self.host))
        return self._kubelet[1], self._kubelet[2]

    def _resource_index(self, now: float) -> tuple[_ResourceIndex | None, str | None]:
        if self._resources is None or now - self._resources[0] >= self.list_every_s:
            listed, why = pod_resources.list_pods(self.socket_path, self.timeout_s)
            self._resources = (now, None if listed is None else _ResourceIndex(listed), why)
        return self._resources[1], self._resources[2]


def _from_kubelet(cg: CgroupPod, pod: pods_api.KubeletPod) -> PodInfo:
    container = pod.containers.get(cg.container_id or "")
    return PodInfo(cg.uid, pod.namespace, pod.name, container, cg.container_id, SOURCE_KUBELET, None)


def self_reported(found: PodInfo, pid: int, hostname: str | None, host: HostPaths = HOST) -> PodInfo | None:
    """``found`` (a pod no kubelet source named) with what the process says of its pod: the
    downward API's variables, else its service account's namespace and its hostname; None when it
    says nothing of a Kubernetes name's shape."""
    env = _environ(pid, host)
    namespace = label_name(env.get("POD_NAMESPACE")) or label_name(_small_file(pid, SERVICE_ACCOUNT_NAMESPACE, host))
    name = subdomain_name(env.get("POD_NAME")) or subdomain_name(hostname)
    if namespace is None and name is None:
        return None
    return replace(found, namespace=namespace, name=name, container=None, source=SOURCE_SELF_REPORTED)


def _environ(pid: int, host: HostPaths) -> dict[str, str]:
    """POD_NAME and POD_NAMESPACE of the process's initial environment (bounded read)."""
    try:
        with open(host.proc_path(int(pid), "environ"), "rb") as f:
            data = f.read(MAX_ENVIRON_BYTES)
    except OSError:
        return {}
    out = {}
    for item in data.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key in (b"POD_NAME", b"POD_NAMESPACE"):
            out[key.decode()] = value[:MAX_SMALL_FILE_BYTES].decode("ascii", "replace")
    return out


def _small_file(pid: int, path: str, host: HostPaths) -> str | None:
    """A small text file in the process's own root (``hostfs.procroot``: its links followed
    inside it); None when it cannot be read."""
    try:
        fd = open_in_root(proc_root(pid, host=host), path, os.O_RDONLY | os.O_NONBLOCK, follow_last=True)
    except OSError:
        return None
    try:
        return os.read(fd, MAX_SMALL_FILE_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


MAX_PROCESSES_CACHED = 1024


class _Seen:
    """What one process's identity gave: its cgroup's pod, and its own view of it once read."""

    __slots__ = ("cg", "own", "own_read")

    def __init__(self, cg: CgroupPod | None):
        self.cg = cg
        self.own: PodInfo | None = None
        self.own_read = False


class ProcessPods:
    """The pod of a process by its identity (pid, start ticks): its cgroup read once (a process
    stays in its pod), its name from ``lookup`` (one PodLookup for all jobs: the kubelet is asked
    at most once per ``list_every_s``, within its timeout, whatever the number of jobs), what it
    says of itself read once too and kept for that process alone. Called inside the poll; never
    raises. A process's files are read in the /proc of ``lookup.host`` (without a lookup: ``host``)."""

    def __init__(
        self, lookup: PodLookup | None = None, max_processes: int = MAX_PROCESSES_CACHED, *, host: HostPaths = HOST
    ):
        self.lookup = lookup if lookup is not None else PodLookup(host=host)
        self.max_processes = max_processes
        self._cgroups: OrderedDict[tuple[int, int | None], _Seen] = OrderedDict()

    def pod_of(
        self, pid: int, start_ticks: int | None, *, hostname: str | None = None, gpu_uuids: Iterable[str] = ()
    ) -> PodInfo | None:
        key = (pid, start_ticks)
        try:
            seen = self._cgroups.get(key)
            if seen is not None:
                self._cgroups.move_to_end(key)
            else:
                seen = self._cgroups[key] = _Seen(process_pod(pid, self.lookup.cgroup_prefixes, host=self.lookup.host))
                while len(self._cgroups) > self.max_processes:
                    self._cgroups.popitem(last=False)
            if seen.cg is None:
                return None
            found = self.lookup.named(seen.cg, gpu_uuids)
            if found.source != SOURCE_CGROUP:
                return found
            if not seen.own_read:
                seen.own, seen.own_read = self_reported(found, pid, hostname, self.lookup.host), True
            return found if seen.own is None else replace(seen.own, why=found.why)
        except Exception:  # noqa: BLE001 -- a poll never fails on a pod's name
            return None
