"""A process's pod by name: its cgroup gives the pod's UID and container id (``sources/pods.py``),
and the node's kubelet the pod's namespace and name.

Asked in order, the first that answers wins:

1. the kubelet's Pods API (``pods_api``): by UID, and the container's name by its id;
2. the kubelet's pod-resources API (``pod_resources``): it names no UID, so a pod is taken only
   when it is the one pod holding a GPU the process uses, or the one pod named as the process's
   hostname (a pod's hostname is its name unless its spec says otherwise);
3. the process's own view: ``POD_NAME``/``POD_NAMESPACE`` in its environment (the downward API),
   else its service account's namespace file and its hostname. What a process says of itself;
   ``source`` says so.

The kubelet is asked at most once per ``list_every_s`` whatever the number of new pods, and a
pod's answer is kept per UID (a pod's name and namespace never change), at most ``max_pods``.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from probe_wire.procfs import proc_path
from probe_wire.procroot import open_in_root, proc_root
from sidecar.sources.kubelet import pod_resources, pods_api
from sidecar.sources.kubelet.names import label_name, subdomain_name
from sidecar.sources.pods import CgroupPod, process_pod

SOCKET_ENV = "DSH_KUBELET_POD_RESOURCES_SOCKET"
LIST_EVERY_S = 10.0
MAX_PODS_CACHED = 1024
UNRESOLVED_RETRY_S = 30.0  # a pod no source named is asked about again after this
MAX_ENVIRON_BYTES = 128 * 1024
MAX_SMALL_FILE_BYTES = 256
SERVICE_ACCOUNT_NAMESPACE = "var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str | None
    name: str | None
    container: str | None  # the container's name
    container_id: str | None  # 64 hex digits, from the cgroup
    source: str | None  # "kubelet" | "pod-resources" | "process"; None: not named
    why: str | None  # why no source named it (each source's reason), None when one did


@dataclass(frozen=True, slots=True)
class _Named:
    namespace: str
    name: str
    source: str
    containers_by_id: dict[str, str]  # kubelet: container id -> name
    containers_by_device: dict[str, str]  # pod-resources: device id -> container name


class PodLookup:
    def __init__(
        self,
        *,
        pods_url: str | None = None,
        socket_path: str | None = None,
        timeout_s: float = pod_resources.LIST_TIMEOUT_S,
        list_every_s: float = LIST_EVERY_S,
        max_pods: int = MAX_PODS_CACHED,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.pods_url = pods_url if pods_url is not None else os.environ.get(pods_api.URL_ENV)
        self.socket_path = socket_path or os.environ.get(SOCKET_ENV) or pod_resources.DEFAULT_SOCKET
        self.timeout_s = timeout_s
        self.list_every_s = list_every_s
        self.max_pods = max_pods
        self.clock = clock
        # uid -> what named it; or (retry at, why) for a pod no source named
        self._cache: OrderedDict[str, _Named | tuple[float, str]] = OrderedDict()
        self._kubelet: tuple[float, dict | None, str | None] | None = None  # (when, pods, why not)
        self._resources: tuple[float, list | None, str | None] | None = None

    def pod_of(self, pid: int, *, hostname: str | None = None, gpu_uuids: Iterable[str] = ()) -> PodInfo | None:
        """The pod of the running process ``pid``; None when it runs in no pod. Never raises."""
        try:
            cg = process_pod(pid)
            return None if cg is None else self.lookup(cg, pid, hostname=hostname, gpu_uuids=gpu_uuids)
        except Exception:  # noqa: BLE001 -- a poll never fails on a pod's name
            return None

    def lookup(self, cg: CgroupPod, pid: int, *, hostname: str | None = None, gpu_uuids: Iterable[str] = ()) -> PodInfo:
        now = self.clock()
        cached = self._cache.get(cg.uid)
        if isinstance(cached, tuple) and cached[0] > now:
            return _own_view(cg, pid, hostname, cached[1])
        if not isinstance(cached, _Named):
            cached = self._ask(cg, hostname, set(gpu_uuids), now)
            self._cache[cg.uid] = cached
            while len(self._cache) > self.max_pods:
                self._cache.popitem(last=False)
        self._cache.move_to_end(cg.uid)
        if isinstance(cached, tuple):
            return _own_view(cg, pid, hostname, cached[1])
        container = cached.containers_by_id.get(cg.container_id or "")
        if container is None:
            hits = {cached.containers_by_device[u] for u in gpu_uuids if u in cached.containers_by_device}
            container = hits.pop() if len(hits) == 1 else None
        return PodInfo(cg.uid, cached.namespace, cached.name, container, cg.container_id, cached.source, None)

    def _ask(self, cg: CgroupPod, hostname: str | None, gpus: set[str], now: float) -> _Named | tuple[float, str]:
        pods, why_kubelet = self._kubelet_pods(now)
        pod = (pods or {}).get(cg.uid)
        if pod is not None:
            return _Named(pod.namespace, pod.name, "kubelet", pod.containers, {})
        if pods is not None:
            why_kubelet = f"the kubelet lists no pod {cg.uid}"
        listed, why_resources = self._resource_pods(now)
        named = _match_resources(listed or [], hostname, gpus)
        if named is not None:
            return named
        if listed is not None:
            why_resources = "no pod-resources pod holds its GPUs or is named as its hostname"
        return (now + UNRESOLVED_RETRY_S, f"{why_kubelet}; {why_resources}")

    def _kubelet_pods(self, now: float):
        if not self.pods_url:
            return None, f"kubelet Pods API not configured ({pods_api.URL_ENV})"
        if self._kubelet is None or now - self._kubelet[0] >= self.list_every_s:
            self._kubelet = (now, *pods_api.fetch_pods(self.pods_url, self.timeout_s))
        return self._kubelet[1], self._kubelet[2]

    def _resource_pods(self, now: float):
        if self._resources is None or now - self._resources[0] >= self.list_every_s:
            self._resources = (now, *pod_resources.list_pods(self.socket_path, self.timeout_s))
        return self._resources[1], self._resources[2]


def _match_resources(listed: list, hostname: str | None, gpus: set[str]) -> _Named | None:
    """The one pod holding one of ``gpus``, else the one pod named ``hostname``."""
    by_gpu = [p for p in listed if any(gpus.intersection(c.device_ids) for c in p.containers)] if gpus else []
    by_name = [p for p in listed if hostname and p.name == hostname]
    for found in (by_gpu, by_name):
        if len(found) == 1:
            p = found[0]
            devices = {d: c.name for c in p.containers for d in c.device_ids}
            return _Named(p.namespace, p.name, "pod-resources", {}, devices)
    return None


def _own_view(cg: CgroupPod, pid: int, hostname: str | None, why: str) -> PodInfo:
    """What the process says of its pod: the downward API's variables, else its service account's
    namespace and its hostname."""
    env = _environ(pid)
    namespace = label_name(env.get("POD_NAMESPACE")) or label_name(_small_file(pid, SERVICE_ACCOUNT_NAMESPACE))
    name = subdomain_name(env.get("POD_NAME")) or subdomain_name(hostname)
    if namespace is None and name is None:
        return PodInfo(cg.uid, None, None, None, cg.container_id, None, why)
    return PodInfo(cg.uid, namespace, name, None, cg.container_id, "process", None)


def _environ(pid: int) -> dict[str, str]:
    """POD_NAME and POD_NAMESPACE of the process's initial environment (bounded read)."""
    try:
        with open(proc_path(int(pid), "environ"), "rb") as f:
            data = f.read(MAX_ENVIRON_BYTES)
    except OSError:
        return {}
    out = {}
    for item in data.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key in (b"POD_NAME", b"POD_NAMESPACE"):
            out[key.decode()] = value[:MAX_SMALL_FILE_BYTES].decode("ascii", "replace")
    return out


def _small_file(pid: int, path: str) -> str | None:
    """A small text file in the process's own root (``probe_wire.procroot``: its links followed
    inside it); None when it cannot be read."""
    try:
        fd = open_in_root(proc_root(pid), path, os.O_RDONLY | os.O_NONBLOCK, follow_last=True)
    except OSError:
        return None
    try:
        return os.read(fd, MAX_SMALL_FILE_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


MAX_PROCESSES_CACHED = 1024


class ProcessPods:
    """The pod of a process by its identity (pid, start ticks): its cgroup read once (a process
    stays in its pod), its name from ``lookup`` (one PodLookup for all jobs: the kubelet is asked
    at most once per ``list_every_s``, within its timeout, whatever the number of jobs). Called
    inside the poll; never raises."""

    def __init__(self, lookup: PodLookup | None = None, max_processes: int = MAX_PROCESSES_CACHED):
        self.lookup = lookup if lookup is not None else PodLookup()
        self.max_processes = max_processes
        self._cgroups: OrderedDict[tuple[int, int | None], CgroupPod | None] = OrderedDict()

    def pod_of(
        self, pid: int, start_ticks: int | None, *, hostname: str | None = None, gpu_uuids: Iterable[str] = ()
    ) -> PodInfo | None:
        key = (pid, start_ticks)
        try:
            if key in self._cgroups:
                cg = self._cgroups[key]
                self._cgroups.move_to_end(key)
            else:
                cg = self._cgroups[key] = process_pod(pid)
                while len(self._cgroups) > self.max_processes:
                    self._cgroups.popitem(last=False)
            return None if cg is None else self.lookup.lookup(cg, pid, hostname=hostname, gpu_uuids=gpu_uuids)
        except Exception:  # noqa: BLE001 -- a poll never fails on a pod's name
            return None
