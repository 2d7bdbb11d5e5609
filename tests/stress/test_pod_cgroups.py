"""Processes in real cgroups named as the kubelet names them (cgroup v2 mounted by the test, as
root): the sidecar's lookup names each one's pod UID and container, and a sidecar watching one of
them shows its pod (named by a kubelet Pods API on loopback) in the status document and on
dsh_job_info. The same names below a user's delegated subtree name no pod; below a configured
kubelet cgroup root they do; without any kubelet the cgroup's UID and container id still show,
and what a process says of itself shows as self-reported, for it alone. Cleaned up always:
processes moved back and killed, cgroups removed, the hierarchy unmounted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sidecar.sources.kubelet.lookup import PodLookup, ProcessPods
from tests.helpers.harness import API, METRICS_AT_ONCE, REPO, Sidecar, python_env

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


def _job(procs, env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB], env={**python_env(), **(env or {})}, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
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


def _pods_api(pods: dict) -> ThreadingHTTPServer:
    """A kubelet's ``GET /pods`` on loopback answering ``pods`` (a PodList)."""
    body = json.dumps(pods).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_watched_job_in_a_pod_shows_its_pod_in_the_document_and_on_job_info(cgroup2, sidecar_env, sysfs_args):
    root, made, procs = cgroup2
    job = _job(procs)
    _move(root, made, f"{BURSTABLE}/cri-containerd-{CID}.scope", job.pid)
    pod_list = {
        "kind": "PodList",
        "items": [
            {
                "metadata": {"uid": UID, "namespace": "research", "name": "trainer-0"},
                "status": {"containerStatuses": [{"name": "pytorch", "containerID": f"containerd://{CID}"}]},
            }
        ],
    }
    server = _pods_api(pod_list)
    try:
        env = {**sidecar_env, "DSH_KUBELET_PODS_URL": f"http://127.0.0.1:{server.server_port}/pods"}
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2", *sysfs_args], env=env) as sc:
            doc = sc.wait_status(lambda d: d["pod"] is not None, what="the job's pod")
            assert doc["pod"] == {
                "namespace": "research", "pod": "trainer-0", "uid": UID, "container": "pytorch", "container_id": CID,
                "source": "kubelet",
            }
            code, jobs = sc.get(f"{API}/jobs")
            assert code == 200 and jobs["jobs"][0]["pod"] == doc["pod"]
            code, body = sc.get("/metrics")
            (info,) = [line for line in body.decode().splitlines() if line.startswith("dsh_job_info{")]
            assert 'namespace="research"' in info and 'pod="trainer-0"' in info and 'container="pytorch"' in info
            assert 'pod_source="kubelet"' in info
    finally:
        server.shutdown()
        server.server_close()


POD_LIST = {
    "kind": "PodList",
    "items": [
        {
            "metadata": {"uid": UID, "namespace": "research", "name": "trainer-0"},
            "status": {"containerStatuses": [{"name": "pytorch", "containerID": f"containerd://{CID}"}]},
        }
    ],
}
# A user's delegated subtree (systemd's user@UID.service): its owner may create any cgroup below it.
DELEGATED = "user.slice/user-1000.slice/user@1000.service/app.slice"


def _job_info(sc) -> str:
    code, body = sc.get("/metrics")
    assert code == 200
    (info,) = [line for line in body.decode().splitlines() if line.startswith("dsh_job_info{")]
    return info


def _polls_on(sc, seconds: float) -> dict:
    """The status once the sidecar has polled for ``seconds`` after its first document with the job."""
    first = sc.wait_status(lambda d: d["processes"], what="the job's first poll")
    return sc.wait_status(lambda d: d["time_unix_s"] >= first["time_unix_s"] + seconds, what=f"{seconds} s of polls")


def test_a_pod_s_names_in_a_user_s_delegated_subtree_name_no_pod(cgroup2, sidecar_env, sysfs_args):
    """Issue 37 item 6: a process in ``<delegated subtree>/kubepods/pod<victim UID>/<victim
    container id>`` was attributed to the victim's pod and container (source kubelet)."""
    root, made, procs = cgroup2
    crafted = _job(procs)
    _move(root, made, f"{DELEGATED}/kubepods/burstable/pod{UID}/{CID}", crafted.pid)
    server = _pods_api(POD_LIST)
    try:
        env = {**sidecar_env, "DSH_KUBELET_PODS_URL": f"http://127.0.0.1:{server.server_port}/pods"}
        assert PodLookup(pods_url=env["DSH_KUBELET_PODS_URL"]).pod_of(crafted.pid) is None
        with Sidecar(["--pid", str(crafted.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2", *sysfs_args], env=env) as sc:
            doc = _polls_on(sc, 1.0)
            assert doc["pod"] is None
            info = _job_info(sc)
            assert 'pod=""' in info and 'namespace=""' in info and 'pod_source=""' in info, info
    finally:
        server.shutdown()
        server.server_close()


def test_a_configured_kubelet_cgroup_root_names_the_pods_below_it(cgroup2, sidecar_env, sysfs_args):
    root, made, procs = cgroup2
    job = _job(procs)
    _move(root, made, f"kube/kubepods/besteffort/pod{UID}/{CID}", job.pid)
    server = _pods_api(POD_LIST)
    try:
        env = {**sidecar_env, "DSH_KUBELET_PODS_URL": f"http://127.0.0.1:{server.server_port}/pods"}
        args = ["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2", "--kubelet-cgroup-root", "/kube"]
        args += sysfs_args
        with Sidecar(args, env=env) as sc:
            doc = sc.wait_status(lambda d: d["pod"] is not None, what="the job's pod")
            assert (doc["pod"]["pod"], doc["pod"]["container_id"], doc["pod"]["source"]) == ("trainer-0", CID, "kubelet")
    finally:
        server.shutdown()
        server.server_close()


def test_without_a_kubelet_the_cgroup_s_pod_and_container_id_show(cgroup2, sidecar_env, sysfs_args, tmp_path):
    """Issue 37 item 8: the container's id, parsed from the cgroup, reaches the document when no
    kubelet answers (no Pods API, no pod-resources socket)."""
    root, made, procs = cgroup2
    job = _job(procs)
    _move(root, made, f"{BURSTABLE}/cri-containerd-{CID}.scope", job.pid)
    env = {k: v for k, v in sidecar_env.items() if k != "DSH_KUBELET_PODS_URL"}
    env["DSH_KUBELET_POD_RESOURCES_SOCKET"] = str(tmp_path / "absent.sock")
    with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2", *sysfs_args], env=env) as sc:
        doc = sc.wait_status(lambda d: d["pod"] is not None, what="the job's pod")
        assert doc["pod"] == {
            "namespace": None, "pod": None, "uid": UID, "container": None, "container_id": CID, "source": "cgroup"
        }
        assert 'pod_source="cgroup"' in _job_info(sc)


def test_what_a_process_says_of_itself_is_self_reported_and_its_own(cgroup2, tmp_path):
    """Issue 37 item 7: a process's POD_NAME is shown as its claim (source self-reported), never
    as the kubelet's, and never given to another process of the same pod."""
    root, made, procs = cgroup2
    claimer = _job(procs, {"POD_NAME": "victim-pod", "POD_NAMESPACE": "team-a"})
    quiet = _job(procs)
    for proc in (claimer, quiet):
        _move(root, made, f"{BURSTABLE}/cri-containerd-{CID}.scope", proc.pid)
    pods = ProcessPods(PodLookup(pods_url="", socket_path=str(tmp_path / "absent.sock")))
    a = pods.pod_of(claimer.pid, None)
    assert (a.namespace, a.name, a.uid, a.container_id, a.source) == ("team-a", "victim-pod", UID, CID, "self-reported")
    b = pods.pod_of(quiet.pid, None)
    assert (b.namespace, b.name, b.uid, b.container_id, b.source) == (None, None, UID, CID, "cgroup")
