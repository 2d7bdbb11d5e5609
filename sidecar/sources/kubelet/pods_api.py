"""The kubelet's Pods API: ``GET /pods`` on the kubelet's HTTPS port (10250, with the service
account's token: RBAC ``nodes/proxy`` get) or its read-only HTTP port (10255, off by default).
Unlike pod-resources it names each pod by its UID and each container's id, so a process's cgroup
joins it exactly. The URL comes from ``DSH_KUBELET_PODS_URL`` (deploy/kubernetes sets it to the
node's address); without it this source is off.
"""

from __future__ import annotations

import json
import os
import ssl
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths
from sidecar.common.http_answer import HttpError
from sidecar.sources import http_get
from sidecar.sources.kubelet.names import label_name, subdomain_name
from sidecar.sources.pods import pod_uid

URL_ENV = "DSH_KUBELET_PODS_URL"
# The kubelet's serving certificate is often self-signed (no serverTLSBootstrap): verification
# against the cluster CA is the default, this turns it off.
INSECURE_ENV = "DSH_KUBELET_INSECURE_TLS"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT_S = 1.0
# A PodList of 110 pods is a few MiB at most; what one answer may cost to read and parse.
MAX_RESPONSE_BYTES = 16 << 20
MAX_PODS = 4096
MAX_CONTAINERS_PER_POD = 64
MAX_TOKEN_BYTES = 16 << 10
# "containerd://<64 hex>", "cri-o://...", "docker://...": the id is what the cgroup names.
_ID_PREFIXES = ("containerd://", "cri-o://", "docker://")


@dataclass(frozen=True, slots=True)
class KubeletPod:
    uid: str
    namespace: str
    name: str
    containers: dict[str, str]  # container id (64 hex) -> container name


def fetch_pods(
    url: str | None = None, timeout_s: float = REQUEST_TIMEOUT_S, *, host: HostPaths = HOST
) -> tuple[dict[str, KubeletPod] | None, str | None]:
    """(pod UID -> KubeletPod, None) or (None, why not). Never raises. ``host``: whose /proc says
    who serves a local kubelet address (sources/http_get.py)."""
    url = url if url is not None else os.environ.get(URL_ENV)
    if not url:
        return None, f"kubelet Pods API not configured ({URL_ENV})"
    if not url.startswith(("http://", "https://")):
        return None, f"{URL_ENV} is not an http(s) URL"
    headers = {"Accept": "application/json"}
    context = None
    if url.startswith("https://"):
        token = _read_small(os.path.join(SERVICE_ACCOUNT_DIR, "token"), MAX_TOKEN_BYTES)
        if token:
            headers["Authorization"] = f"Bearer {token.strip()}"
        context = _tls_context()
    try:  # the one HTTP door: a server on this machine gets the token only if it is root's or ours
        answer = http_get.get(
            url, timeout_s=timeout_s, max_body_bytes=MAX_RESPONSE_BYTES, headers=headers, ssl_context=context,
            host=host,
        )
    except HttpError as e:
        return None, f"kubelet Pods API: {e}"[:256]
    if answer.status != 200:
        return None, f"kubelet Pods API answered HTTP {answer.status}"
    body = answer.body
    try:
        return parse_pod_list(json.loads(body)), None
    except (ValueError, RecursionError) as e:
        return None, f"kubelet Pods API: not a PodList ({type(e).__name__})"


def parse_pod_list(doc: object) -> dict[str, KubeletPod]:
    """The pods of a PodList document, by UID; entries not of the expected shapes are skipped."""
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ValueError("no items")
    pods: dict[str, KubeletPod] = {}
    for item in items[:MAX_PODS]:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue
        uid = pod_uid(meta["uid"]) if isinstance(meta.get("uid"), str) else None
        namespace, name = label_name(meta.get("namespace")), subdomain_name(meta.get("name"))
        if uid is None or namespace is None or name is None:
            continue
        status = item.get("status")
        containers: dict[str, str] = {}
        for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
            entries = status.get(key) if isinstance(status, dict) else None
            for c in entries[:MAX_CONTAINERS_PER_POD] if isinstance(entries, list) else ():
                cid = _container_id(c.get("containerID")) if isinstance(c, dict) else None
                cname = label_name(c.get("name")) if cid else None
                if cid and cname:
                    containers[cid] = cname
        pods[uid] = KubeletPod(uid, namespace, name, containers)
    return pods


def _container_id(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    for prefix in _ID_PREFIXES:
        if value.startswith(prefix):
            cid = value[len(prefix) :]
            return cid if len(cid) == 64 and all(ch in "0123456789abcdef" for ch in cid) else None
    return None


def _tls_context() -> ssl.SSLContext:
    if os.environ.get(INSECURE_ENV) == "1":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    ca = os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt")
    return ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)


def _read_small(path: str, limit: int) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("ascii", "replace")
    except OSError:
        return None
