"""Who may read a sidecar on this machine (issue 26): real users (setpriv), real sidecars, real
HTTP over loopback.

- A user's own sidecar without a token answers only that user's and root's connections (the
  client socket's owner in /proc/net/tcp); every other user gets a 403 saying why; /healthz stays open.
- A root sidecar (discovery, --pid, run) never serves without a token: it makes one and prints it.
- The job a root discovery sidecar answers without ?job= (HTTP and `dsh-sidecar mcp`'s gpu_status)
  is the caller's own newest, never another user's; none, saying so, when the caller has none; and
  each job it lists says whether it is the caller's (`yours`).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from hostfs.procid import process_identity
from probe_wire import segment_path
from tests.fakenvml import gpu
from tests.helpers.harness import API, METRICS_AT_ONCE, FakeJob, Sidecar, wait_for
from tests.helpers.other_users import NOBODY, STRANGER, get_as, write_as

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users"),
]


def test_a_users_sidecar_without_a_token_serves_only_that_user_and_root():
    env = {**os.environ, "LD_LIBRARY_PATH": "/nonexistent"}  # no driver: nobody cannot read the fake one
    with Sidecar(["--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=env, as_uid=NOBODY) as sc:
        wait_for(lambda: get_as(NOBODY, f"{sc.url}{API}/jobs")[0] == 200, 30, 0.3, "the owner's jobs list")
        assert sc.get(f"{API}/jobs")[0] == 200  # root (this test process)
        for path in (f"{API}/jobs", f"{API}/status", f"{API}/history", f"{API}/schema", "/metrics", "/"):
            code, body = get_as(STRANGER, sc.url + path)
            assert code == 403, (path, code, body)
            assert f"uid {STRANGER}" in body["error"] and "serves only its own user" in body["error"], body
            assert "--token" in body["error"], body  # and what to do about it
        assert get_as(STRANGER, sc.url + "/healthz")[0] == 200  # liveness says nothing of anyone's jobs
        serving = next(line for line in sc.lines if line.startswith("dsh-sidecar: serving "))
        assert sc.token is None and "other users of this machine are refused" in serving, sc.lines


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("how", ["pid", "run"])
def test_a_root_sidecar_watching_one_job_makes_a_token(how, sleeper, fake_nvml):
    fake_nvml.write({"gpus": [gpu(0)]})
    args = ["--pid", str(sleeper.pid)] if how == "pid" else ["run", "--"]
    head, tail = (args, []) if how == "pid" else (["run"], ["--", "sleep", "300"])
    with Sidecar([*head, "--port", "0", *METRICS_AT_ONCE, "--interval", "0.3", *tail], env=fake_nvml.env()) as sc:
        made = sc.token
        assert made and len(made) >= 32, sc.lines
        assert any(f"{sc.url}/?token={made}" in line for line in sc.lines), sc.lines
        wait_for(lambda: sc.get(f"{API}/status")[0] == 200, 20, what="the status with the token")
        for path in (f"{API}/status", f"{API}/jobs", "/metrics"):
            assert get_as(NOBODY, sc.url + path)[0] == 401, path  # another user, who never saw the line
        # The page itself holds no data (a browser cannot send the header when it loads it).
        code, body = get_as(NOBODY, sc.url + "/")
        assert code == 200 and "<!doctype html>" in str(body).lower()
        assert get_as(NOBODY, f"{sc.url}{API}/status", made)[0] == 200  # whom root gave the token


def _job_id(pid: int) -> str:
    ident = process_identity(pid)
    assert ident is not None
    return f"{ident[0]}-{ident[1]}"


@pytest.fixture
def two_users_jobs(tmp_path):
    """Root's job (a model on the CPU), then a newer one of nobody's (a model on cuda:0)."""
    model = {"name": "r", "device": "cpu", "devices": ["cpu"], "params": 10}
    mine = FakeJob(tmp_path / "root-job", {"main": {"payload": {"role": "main", "models": [model]}}}, detach=True)
    theirs = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sleep", "300"],
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: process_identity(theirs.pid), what="nobody's process")
        write_as(NOBODY, theirs.pid)
        yield _job_id(mine.pid), _job_id(theirs.pid)
    finally:
        theirs.kill()
        theirs.wait()
        mine.stop()
        if os.path.lexists(segment_path(theirs.pid)):
            os.unlink(segment_path(theirs.pid))


def test_roots_default_job_is_the_callers_own(two_users_jobs, fake_nvml):
    root_job, nobodys_job = two_users_jobs
    fake_nvml.write({"gpus": [gpu(0)]})
    with Sidecar(["--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
        wait_for(
            lambda: {root_job, nobodys_job} <= {j["id"] for j in sc.get(f"{API}/jobs")[1]["jobs"]},
            30,
            0.3,
            "both users' jobs listed",
        )
        assert sc.get(f"{API}/status")[1]["job_id"] == root_job  # root: root's job
        assert sc.get(f"{API}/jobs")[1]["default_job"] == root_job
        assert sc.get(f"{API}/history")[0] == 200
        code, doc = get_as(NOBODY, f"{sc.url}{API}/status", sc.token)
        assert code == 200 and doc["job_id"] == nobodys_job, doc
        code, doc = get_as(NOBODY, f"{sc.url}{API}/jobs", sc.token)
        assert code == 200 and doc["default_job"] == nobodys_job, doc
        # each listed job says whether it is the asking user's (the page puts those first)
        def yours(doc: dict) -> dict[str, bool | None]:
            return {j["id"]: j["yours"] for j in doc["jobs"] if j["id"] in (root_job, nobodys_job)}

        assert yours(doc) == {root_job: False, nobodys_job: True}, doc
        assert yours(sc.get(f"{API}/jobs")[1]) == {root_job: True, nobodys_job: False}
        assert yours(get_as(NOBODY, f"{sc.url}{API}/status", sc.token)[1]) == {root_job: False, nobodys_job: True}
        code, doc = get_as(NOBODY, f"{sc.url}{API}/watch", sc.token)  # a watch too: the caller's own job
        assert code == 200 and doc["job_id"] == nobodys_job, doc
        for route in ("status", "history", "watch"):  # a user with no job of their own gets none of another's
            code, body = get_as(STRANGER, f"{sc.url}{API}/{route}", sc.token)
            assert code == 404 and "none of the jobs here is yours" in body["error"], (route, body)
        code, doc = get_as(STRANGER, f"{sc.url}{API}/jobs", sc.token)
        assert code == 200 and doc["default_job"] is None, doc
        # a job asked for by id is served as before
        code, doc = get_as(STRANGER, f"{sc.url}{API}/status?job={root_job}", sc.token)
        assert code == 200 and doc["job_id"] == root_job

        from sidecar.serve import mcp_server
        from sidecar.sources import http_get

        # `dsh-sidecar mcp --url` as root: gpu_status() with no job is root's job
        out, text = mcp_server.call(mcp_server.HttpBackend(sc.url, sc.token, get=http_get.get), "gpu_status", {})
        assert out is not None and out["job_id"] == root_job, text
        out, text = mcp_server.call(mcp_server.HttpBackend(sc.url, sc.token, get=http_get.get), "list_jobs", {})
        assert out is not None and out["default_job"] == root_job, text


def test_mcp_gpu_status_without_a_job_is_the_agents_users_own(two_users_jobs):
    """`dsh-sidecar mcp` as root, polling here: gpu_status() answers root's job, never nobody's newer one."""
    from sidecar.poll.discovery import JobsPoller
    from sidecar.serve import mcp_server

    root_job, nobodys_job = two_users_jobs
    backend = mcp_server.LocalBackend(JobsPoller(interval_s=0.3, history_s=60))
    try:
        wait_for(
            lambda: {root_job, nobodys_job} <= {j["id"] for j in mcp_server.call(backend, "list_jobs", {})[0]["jobs"]},
            30,
            0.3,
            "both users' jobs listed",
        )
        out, text = mcp_server.call(backend, "gpu_status", {})
        assert out is not None and out["job_id"] == root_job, text
        out, text = mcp_server.call(backend, "gpu_status", {"job": nobodys_job})
        assert out is not None and out["job_id"] == nobodys_job, text  # asked for by id: served
    finally:
        backend.close()
