"""The sidecar's kubelet clients against real servers: a gRPC server on a unix socket speaking the
real pod-resources v1 protobuf (the stubs in sidecar/sources/kubelet), a kubelet Pods API over
HTTP, and the fallbacks: no socket, a socket that is not gRPC, one that never answers (bounded),
and the process's own view (the downward API's variables), shown as self-reported and never
taken for the kubelet's answer nor kept for another process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

grpc = pytest.importorskip("grpc", reason="grpcio is the kubernetes extra (in the test extras)")

from sidecar.sources.kubelet import api_pb2, api_pb2_grpc, pod_resources, pods_api  # noqa: E402
from sidecar.sources.kubelet.lookup import PodLookup  # noqa: E402
from sidecar.sources.pods import CgroupPod  # noqa: E402
from tests.helpers.harness import REPO, python_env  # noqa: E402
from tests.helpers.stranger import StrangerListener, can_switch_user  # noqa: E402

UID = "1f2e3d4c-5b6a-4980-a1b2-c3d4e5f60718"
OTHER_UID = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
CID = "ab" * 32
GPU = "GPU-11111111-2222-3333-4444-555555555555"


def resources_response() -> api_pb2.ListPodResourcesResponse:
    gpu = api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU])
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="trainer-0",
                namespace="research",
                containers=[
                    api_pb2.ContainerResources(name="sidecar-logs"),
                    api_pb2.ContainerResources(name="pytorch", devices=[gpu], cpu_ids=[2, 3]),
                ],
            ),
            api_pb2.PodResources(name="web-7f9c", namespace="default", containers=[api_pb2.ContainerResources(name="nginx")]),
            # not Kubernetes names: never taken
            api_pb2.PodResources(name="Bad Name", namespace="default"),
        ]
    )


class Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, response: api_pb2.ListPodResourcesResponse):
        self.calls = 0
        self.response = response

    def List(self, request, context):  # noqa: N802 -- the service's method name
        self.calls += 1
        return self.response


def _serve_pod_resources(path: str, response: api_pb2.ListPodResourcesResponse):
    """A kubelet's pod-resources server on the unix socket ``path`` answering ``response``."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    lister = Lister(response)
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server, lister


@pytest.fixture
def kubelet_socket(tmp_path):
    path = str(tmp_path / "kubelet.sock")
    server, lister = _serve_pod_resources(path, resources_response())
    yield path, lister
    server.stop(grace=None)


def test_list_reads_the_real_protobuf(kubelet_socket):
    path, lister = kubelet_socket
    pods, why = pod_resources.list_pods(path)
    assert why is None
    assert [(p.namespace, p.name) for p in pods] == [("research", "trainer-0"), ("default", "web-7f9c")]
    assert pods[0].containers[1] == pod_resources.ResourceContainer("pytorch", (GPU,))
    assert lister.calls == 1


def test_lookup_names_a_pod_by_its_gpu_and_asks_once(kubelet_socket):
    path, lister = kubelet_socket
    now = [100.0]
    lookup = PodLookup(pods_url="", socket_path=path, clock=lambda: now[0])
    by_gpu = lookup.lookup(CgroupPod(UID, CID, "containerd"), os.getpid(), gpu_uuids=[GPU])
    assert (by_gpu.namespace, by_gpu.name, by_gpu.container, by_gpu.source) == ("research", "trainer-0", "pytorch", "pod-resources")
    assert by_gpu.uid == UID and by_gpu.container_id == CID and by_gpu.why is None
    # A hostname is what the process says: it names no pod through pod-resources.
    by_name = lookup.lookup(CgroupPod(OTHER_UID, None, None), os.getpid(), hostname="web-7f9c")
    assert by_name.source == "self-reported" and by_name.name == "web-7f9c" and by_name.namespace is None
    assert lister.calls == 1  # one List within list_every_s, whatever the number of new pods
    now[0] += 11
    lookup.lookup(CgroupPod("0" * 32, None, None), os.getpid(), gpu_uuids=[GPU])
    assert lister.calls == 2


VICTIM_UID = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
ATTACKER_UID = "3e4f5a6b-7c8d-4e9f-a0b1-c2d3e4f5a6b7"
VICTIM_CID = "ef" * 32


def attack_response() -> api_pb2.ListPodResourcesResponse:
    """The node's pods: the victim's holding the GPU, the attacker's holding none."""
    gpu = api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU])
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="trainer-0", namespace="research", containers=[api_pb2.ContainerResources(name="pytorch", devices=[gpu])]
            ),
            api_pb2.PodResources(name="attacker-pod", namespace="team-b", containers=[api_pb2.ContainerResources(name="main")]),
        ]
    )


@pytest.fixture
def attack_socket(tmp_path):
    path = str(tmp_path / "kubelet.sock")
    server, _ = _serve_pod_resources(path, attack_response())
    yield path
    server.stop(grace=None)


def _waiting_process(env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", READY_THEN_WAIT], env={**os.environ, **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # Read only once it runs: during its execve its environment reads empty.
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_a_process_s_claims_name_no_pod_for_the_kubelet_nor_poison_the_victim_s(attack_socket):
    """Issue 37 item 7: a process whose hostname was another pod's name was named after that pod
    (source pod-resources), and an attacker's claim looked up first under the victim's next pod
    UID was kept for that UID: the victim's job, holding that pod's GPU, shown as
    team-b/attacker-pod."""
    lookup = PodLookup(pods_url="", socket_path=attack_socket)
    claims_victim = _waiting_process({"POD_NAME": "trainer-0", "POD_NAMESPACE": "research"})
    try:
        # The attacker's claim comes first, under the victim's UID, with its own pod's hostname.
        first = lookup.lookup(CgroupPod(VICTIM_UID, None, None), claims_victim.pid, hostname="attacker-pod")
        # Its hostname the victim's pod name, in its own pod.
        mimic = lookup.lookup(CgroupPod(ATTACKER_UID, None, None), os.getpid(), hostname="trainer-0")
        # The victim's job, holding the GPU: its own pod, from the devices its pod holds.
        victim = lookup.lookup(CgroupPod(VICTIM_UID, VICTIM_CID, "containerd"), os.getpid(), gpu_uuids=[GPU])
        assert (victim.namespace, victim.name, victim.container, victim.source) == ("research", "trainer-0", "pytorch", "pod-resources")
        assert victim.container_id == VICTIM_CID
        # The claims are shown as what they are, never as the kubelet's answer.
        assert first.source == "self-reported" and (first.namespace, first.name) == ("research", "trainer-0")
        assert (mimic.source, mimic.name, mimic.container) == ("self-reported", "trainer-0", None)
    finally:
        claims_victim.communicate(b"", timeout=30)


def test_without_a_socket_the_lookup_says_why_and_takes_the_process_s_own_view(tmp_path):
    lookup = PodLookup(pods_url="", socket_path=str(tmp_path / "absent.sock"))
    proc = subprocess.Popen(
        [sys.executable, "-c", READY_THEN_WAIT],
        env={**os.environ, "POD_NAME": "trainer-1", "POD_NAMESPACE": "team-a"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    # Read only once it runs: during its execve its environment reads empty.
    assert proc.stdout.readline() == b"ready\n"
    try:
        info = lookup.lookup(CgroupPod(UID, CID, "containerd"), proc.pid)
        assert (info.namespace, info.name, info.source) == ("team-a", "trainer-1", "self-reported")
        # No view of its own: nothing named, and why; the cgroup's UID and container id still.
        bare = lookup.lookup(CgroupPod(OTHER_UID, CID, None), os.getpid())
        assert (bare.source, bare.name, bare.uid, bare.container_id) == ("cgroup", None, OTHER_UID, CID)
        assert "not configured" in bare.why and "no kubelet pod-resources socket" in bare.why
    finally:
        proc.communicate(b"", timeout=30)


def test_hostile_process_view_is_not_taken(tmp_path):
    lookup = PodLookup(pods_url="", socket_path=str(tmp_path / "absent.sock"))
    proc = subprocess.Popen(
        [sys.executable, "-c", READY_THEN_WAIT],
        env={**os.environ, "POD_NAME": "x" * 300, "POD_NAMESPACE": "Team\x1b[31m"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    # Read only once it runs: during its execve its environment reads empty.
    assert proc.stdout.readline() == b"ready\n"
    try:
        info = lookup.lookup(CgroupPod(UID, None, None), proc.pid, hostname="host.example")
        assert info.namespace is None and info.name == "host.example"
    finally:
        proc.communicate(b"", timeout=30)


READY_THEN_WAIT = "import sys; print('ready', flush=True); sys.stdin.read()"


def _serve_unix(path: str, answer: bytes | None) -> tuple[socket.socket, threading.Thread, list]:
    """A unix socket that accepts and writes ``answer`` then closes (None: says nothing, ever)."""
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(8)
    held: list[socket.socket] = []

    def run():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            if answer is None:
                held.append(conn)
            else:
                try:
                    conn.sendall(answer)
                finally:
                    conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv, t, held


@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", None], ids=["not-grpc", "silent"])
def test_a_socket_that_is_no_kubelet_costs_at_most_the_timeout(tmp_path, answer):
    path = str(tmp_path / "kubelet.sock")
    srv, _, held = _serve_unix(path, answer)
    try:
        t0 = time.monotonic()
        pods, why = pod_resources.list_pods(path, timeout_s=0.5)
        took = time.monotonic() - t0
        assert pods is None and why.startswith("pod-resources List failed:"), why
        assert took < 5.0, took  # 0.5 s asked; the margin is the machine's load, not the client
    finally:
        srv.close()
        for conn in held:
            conn.close()


def test_a_file_that_is_not_a_socket(tmp_path):
    path = tmp_path / "kubelet.sock"
    path.write_text("")
    assert pod_resources.list_pods(str(path)) == (None, f"{path} is not a socket")


def test_without_grpcio_the_sidecar_says_why(tmp_path, kubelet_socket):
    path, _ = kubelet_socket
    code = (
        "import sys; sys.modules['grpc'] = None\n"
        "from sidecar.sources.kubelet import pod_resources\n"
        f"print(pod_resources.list_pods({path!r})[1])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=python_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == pod_resources.UNAVAILABLE_NO_GRPC


POD_LIST = {
    "kind": "PodList",
    "apiVersion": "v1",
    "items": [
        {
            "metadata": {"name": "trainer-0", "namespace": "research", "uid": UID},
            "status": {"containerStatuses": [{"name": "pytorch", "containerID": f"containerd://{CID}"}]},
        },
        {"metadata": {"name": "evil", "namespace": "x", "uid": "../../etc"}},
    ],
}


def _pods_api(pod_list: dict) -> ThreadingHTTPServer:
    """A kubelet's ``GET /pods`` on loopback answering ``pod_list``."""
    body = json.dumps(pod_list).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def pods_endpoint():
    server = _pods_api(POD_LIST)
    yield f"http://127.0.0.1:{server.server_address[1]}/pods"
    server.shutdown()
    server.server_close()


def test_the_kubelet_pods_api_names_pod_and_container_by_uid_and_id(pods_endpoint, tmp_path):
    pods, why = pods_api.fetch_pods(pods_endpoint)
    assert why is None and list(pods) == [UID]
    lookup = PodLookup(pods_url=pods_endpoint, socket_path=str(tmp_path / "absent.sock"))
    info = lookup.lookup(CgroupPod(UID, CID, "containerd"), os.getpid())
    assert (info.namespace, info.name, info.container, info.source) == ("research", "trainer-0", "pytorch", "kubelet")


def test_a_kubelet_pods_api_that_is_down_says_why(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    pods, why = pods_api.fetch_pods(f"http://127.0.0.1:{port}/pods", timeout_s=0.5)
    assert pods is None and why.startswith("kubelet Pods API: cannot connect") and "refused" in why, why


@pytest.mark.skipif(not can_switch_user(), reason="needs root and setpriv to act as another user")
def test_a_pods_api_port_another_user_serves_is_not_asked():
    """The Pods API is asked with the service account's token: a server on this machine gets the
    request only when it is root's (the kubelet) or ours (sidecar/sources/http_get.py)."""
    with StrangerListener() as stranger:
        pods, why = pods_api.fetch_pods(f"{stranger.url}/pods", timeout_s=2)
        assert pods is None and "another user (uid 65534)" in why, why
        assert stranger.requests == []


def test_the_cache_is_bounded_and_holds_the_kubelet_s_answers_alone(tmp_path):
    many = {"kind": "PodList", "items": [{"metadata": {"name": f"p-{i}", "namespace": "ns", "uid": f"{i:032x}"}} for i in range(50)]}
    server = _pods_api(many)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/pods"
        lookup = PodLookup(pods_url=url, socket_path=str(tmp_path / "absent.sock"), max_pods=8)
        for i in range(50):
            assert lookup.lookup(CgroupPod(f"{i:032x}", None, None), os.getpid()).name == f"p-{i}"
        lookup.lookup(CgroupPod("f" * 32, None, None), os.getpid(), hostname="p-1")  # a claim: not kept
        assert len(lookup._by_uid) == 8 and "f" * 32 not in lookup._by_uid
    finally:
        server.shutdown()
        server.server_close()
