"""The kubelet's pod-resources API (v1, ``List``): the pods of the node, their containers and the
device ids each holds (a GPU's UUID for ``nvidia.com/gpu``). gRPC over the kubelet's unix socket.

It names pods by namespace and name, never by UID: the lookup (``sources/kubelet/lookup.py``) joins
a process to its pod only through the devices the pod holds (the GPUs the process uses), never
through what the process says of itself. grpcio is optional: without it ``list_pods`` says so and
the sidecar goes on.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sidecar.sources.kubelet.names import label_name, subdomain_name

if TYPE_CHECKING:  # imported where it is used: grpcio and protobuf are optional
    from sidecar.sources.kubelet.api_pb2 import ListPodResourcesResponse

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# One List answers within this or not at all: the poll thread waits on it.
LIST_TIMEOUT_S = 1.0
# What one answer may hold: the kubelet's own limit for this API is 16 MiB (110 pods a node by
# default use a few hundred KiB); and what the sidecar keeps of it.
MAX_RESPONSE_BYTES = 16 << 20
MAX_PODS = 4096
MAX_CONTAINERS_PER_POD = 64
MAX_DEVICE_IDS_PER_CONTAINER = 256
MAX_DEVICE_ID_CHARS = 128
UNAVAILABLE_NO_GRPC = "grpcio/protobuf not installed (pip install 'dsh-gpu-dashboard[kubernetes]')"


@dataclass(frozen=True, slots=True)
class ResourceContainer:
    name: str
    device_ids: tuple[str, ...]  # every device the kubelet's device plugins gave it


@dataclass(frozen=True, slots=True)
class ResourcePod:
    namespace: str
    name: str
    containers: tuple[ResourceContainer, ...]


def list_pods(socket_path: str = DEFAULT_SOCKET, timeout_s: float = LIST_TIMEOUT_S) -> tuple[list[ResourcePod] | None, str | None]:
    """(the node's pods, None), or (None, why not): no socket there, grpcio missing, a server that
    does not answer ``v1.PodResourcesLister/List`` within ``timeout_s``. Never raises."""
    try:
        if not stat.S_ISSOCK(os.stat(socket_path).st_mode):
            return None, f"{socket_path} is not a socket"
    except OSError as e:
        return None, f"no kubelet pod-resources socket at {socket_path} ({e.strerror})"
    try:
        import grpc

        from sidecar.sources.kubelet import api_pb2, api_pb2_grpc
    except Exception:  # noqa: BLE001 -- ImportError, or a protobuf runtime older than the stubs
        return None, UNAVAILABLE_NO_GRPC
    options = [
        ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
        ("grpc.enable_http_proxy", 0),
    ]
    try:
        with grpc.insecure_channel(f"unix://{socket_path}", options=options) as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            answer = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout_s)
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else None
        return None, f"pod-resources List failed: {getattr(code, 'name', code)}"[:256]
    except Exception as e:  # noqa: BLE001 -- a poll must never fail on a kubelet's answer
        return None, f"pod-resources List failed: {type(e).__name__}"
    return _pods(answer), None


def _pods(answer: ListPodResourcesResponse) -> list[ResourcePod]:
    """The answer's pods, bounded, with names of a Kubernetes name's shape only."""
    pods = []
    for pod in answer.pod_resources[:MAX_PODS]:
        namespace, name = label_name(pod.namespace), subdomain_name(pod.name)
        if namespace is None or name is None:
            continue
        containers = []
        for c in pod.containers[:MAX_CONTAINERS_PER_POD]:
            cname = label_name(c.name)
            if cname is None:
                continue
            ids = [d for dev in c.devices for d in dev.device_ids if len(d) <= MAX_DEVICE_ID_CHARS]
            containers.append(ResourceContainer(cname, tuple(ids[:MAX_DEVICE_IDS_PER_CONTAINER])))
        pods.append(ResourcePod(namespace, name, tuple(containers)))
    return pods
