"""The Flask app alone, with an injected source: routes, auth, errors, static files."""

from __future__ import annotations

import pytest

from sidecar.documents.contract import check
from sidecar.documents.document import job_entry, jobs_document
from sidecar.poll.history import GPU_COLUMNS, JOB_COLUMNS, Sample
from sidecar.serve.server import API, ServerConfig, create_app
from sidecar.sources.lineage import RootInfo
from sidecar.verdict import RecentSample
from tests.helpers.static_source import StaticSource


@pytest.fixture
def client():
    app = create_app(ServerConfig(), StaticSource({"schema": 2, "status": "GPU"}, 123.0))
    return app.test_client()


def test_status_and_healthz(client):
    r = client.get(f"{API}/status")
    assert r.status_code == 200 and r.json == {"job_id": "42-7", "schema": 2, "status": "GPU"}
    assert client.get("/healthz").json == {"ok": True, "last_poll": 123.0}
    assert "Access-Control-Allow-Origin" not in r.headers


def test_status_before_first_poll_is_503():
    c = create_app(ServerConfig(), StaticSource()).test_client()
    r = c.get(f"{API}/status")
    assert r.status_code == 503 and "retry" in r.json["error"]
    assert c.get("/healthz").json == {"ok": False, "last_poll": None}


def test_history_since(client):
    body = client.get(f"{API}/history").json
    assert [s["time_unix_s"] for s in body["samples"]] == [100.0, 101.0, 102.0]
    assert body["samples"][0] == {
        "time_unix_s": 100.0,
        "gpus": [
            {
                "index": 0,
                "util_pct": 50.0,
                "mem_used_mib": 1000.0,
                **dict.fromkeys(GPU_COLUMNS[3:]),  # the efficiency columns: absent here, so null
            }
        ],
        "processes": [{"pid": 42, "gpu_mem_mib": 900.0, "sm_util_pct": 40.0}],
        **dict.fromkeys(JOB_COLUMNS),
        "recorded": False,  # this sidecar's poll, not a minute the runs ledger kept from before it
    }
    assert [s["time_unix_s"] for s in client.get(f"{API}/history?since=100.5").json["samples"]] == [
        101.0,
        102.0,
    ]
    assert client.get(f"{API}/history?since=102").json["events"] == []


def test_history_is_json_with_infinite_sums():
    """Finite per-model rates from a process (the schema allows up to 1.8e308) can sum to inf; the
    history carries that as null, never as a bare Infinity that no JSON parser accepts."""
    inf = float("inf")
    source = StaticSource({"schema": 2}, 1.0)
    source.history.append(
        Sample(
            103.0,
            ((0, inf, 1.0, *[None] * 6),),
            ((42, inf, 1.0),),
            RecentSample(103.0, 1.0, 1.0, 1, 1.0),
            job=(1.0, 2.0, inf, -inf),
        )
    )
    r = create_app(ServerConfig(), source).test_client().get(f"{API}/history?since=102.5")
    assert b"Infinity" not in r.data and b"NaN" not in r.data
    (last,) = r.json["samples"]
    assert last["forward_rate_hz"] is None and last["step_rate_hz"] is None and last["cpu_pct"] == 1
    assert last["gpus"][0]["util_pct"] is None and last["processes"][0]["gpu_mem_mib"] is None


@pytest.mark.parametrize("since", ["abc", "nan", "inf", "1e999", "%00"])
def test_history_bad_since_is_400(client, since):
    r = client.get(f"{API}/history?since={since}")
    assert r.status_code == 400 and "since" in r.json["error"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_and_head(client, method):
    assert client.open(f"{API}/status", method=method).status_code == 405


def test_head(client):
    assert client.head(f"{API}/status").status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/static/../server.py",
        "/static/..%2fserver.py",
        "/static/%2e%2e/cli.py",
        "/static//etc/passwd",
    ],
)
def test_unknown_and_traversal_are_4xx(client, path):
    r = client.get(path)
    assert 400 <= r.status_code < 500
    assert b"def create_app" not in r.data and b"root:" not in r.data


def test_token_required_on_every_data_route_as_a_header_only():
    c = create_app(ServerConfig(token="s3cret"), StaticSource({"schema": 2}, 1.0)).test_client()
    assert c.get("/healthz").status_code == 200
    assert c.get(f"{API}/status").status_code == 401
    assert c.get(f"{API}/status", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get(f"{API}/status", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/metrics").status_code == 401
    # The page's files carry no data and load without the token; the page sends it as a header.
    r = c.get("/?token=s3cret")
    assert r.status_code == 200 and r.mimetype == "text/html" and "Set-Cookie" not in r.headers
    assert c.get(f"{API}/status").status_code == 401  # nothing was traded for a cookie
    c.set_cookie("dsh_sidecar_token_80", "s3cret")
    r = c.get(f"{API}/status")
    assert r.status_code == 401 and "Max-Age=0" in r.headers["Set-Cookie"]  # refused, and expired


def test_jobs_route_and_job_selection():
    doc = {"job_id": "42-7", "schema": 2, "status": "GPU"}
    c = create_app(ServerConfig(), StaticSource(doc, 1.0)).test_client()
    assert c.get(f"{API}/status?job=42-7").json["status"] == "GPU"
    assert c.get(f"{API}/history?job=42-7").json["job_id"] == "42-7"
    for path in (f"{API}/status?job=42-8", f"{API}/history?job=nope", f"{API}/status?job="):
        r = c.get(path)
        assert r.status_code == 404 and r.is_json and f"{API}/jobs" in r.json["error"], path
    r = c.get(f"{API}/status?job=" + "x" * 5000)
    assert r.status_code == 404 and len(r.json["error"]) < 200  # the echoed id is bounded
    fresh = create_app(ServerConfig(), StaticSource()).test_client()
    assert fresh.get(f"{API}/jobs").status_code == 503


class _TwoUsersJobs(StaticSource):
    """Discovery's documents as root's sidecar publishes them: ada's job, bob's newer one, and one
    whose owner could not be read; the status document lists them as /jobs does."""

    def __init__(self):
        def entry(pid: int, root: RootInfo | None) -> dict:
            summary = {
                "job_id": f"{pid}-1",
                "target": {
                    "pid": pid,
                    "alive": True,
                    "cmdline": ["python", "train.py"],
                    "create_time_unix_s": float(pid),
                },
                "status": "GPU",
                "message": "the job computes on the GPU",
                "message_ref": {"id": "verdict.gpu", "params": {}},
                "warnings": [],
                "job_processes": {"gpus": [0], "process_count": 1, "has_model": True},
            }
            return job_entry(summary, root, None)

        entries = [entry(10, ADA), entry(20, BOB), entry(30, None)]
        self.jobs = jobs_document(entries, time_s=1.0, interval_s=1.0, mode="discovery", default_job=None)
        super().__init__({"schema": 2, "jobs": self.jobs["jobs"]}, 1.0)

    def jobs_document(self):
        return self.jobs


ADA, BOB = RootInfo(1000, "ada", "/home/ada", (1,)), RootInfo(1001, "bob", "/home/bob", (1,))


def test_listed_jobs_are_marked_yours_for_the_user_of_each_connection():
    """`yours` is the requesting socket's owner's (ServerConfig.socket_owner, sources/sockets.py's
    lookup in the CLI), per request: ada's connection and bob's see the same jobs, each its own
    marked; a caller who cannot be told apart sees none marked, and the poll's documents stay as
    published."""
    server_port = 8765
    owners = {("127.0.0.1", 40000, server_port): ADA.uid, ("127.0.0.1", 40001, server_port): BOB.uid}
    source = _TwoUsersJobs()
    app = create_app(
        ServerConfig(socket_owner=lambda addr, port, ours: owners.get((addr, port, ours))), source
    )
    c = app.test_client()

    def yours(route: str, client_port: int) -> dict[str, bool | None]:
        r = c.get(
            f"{API}/{route}",
            base_url=f"http://127.0.0.1:{server_port}",
            environ_base={"REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": str(client_port)},
        )
        assert r.status_code == 200, r.json
        if route == "jobs":
            check(r.json, "jobs")
        return {j["user"]: j["yours"] for j in r.json["jobs"]}

    for route in ("jobs", "status"):
        assert yours(route, 40000) == {"ada": True, "bob": False, None: None}, route
        assert yours(route, 40001) == {"ada": False, "bob": True, None: None}, route
        assert yours(route, 40002) == {"ada": None, "bob": None, None: None}, route  # not in the tables
    assert all(j["yours"] is None for j in source.jobs["jobs"])  # the published list is shared: untouched
    assert all(j["yours"] is None for j in source.doc["jobs"])
    # without a lookup (the app alone), nobody is told apart
    alone = create_app(ServerConfig(), source).test_client()
    assert [j["yours"] for j in alone.get(f"{API}/jobs").json["jobs"]] == [None, None, None]
