"""The cluster route (GET /api/dsh-gpu-dashboard/cluster) of a real sidecar started with
--prometheus, against a tiny Prometheus on loopback (tests/helpers/fake_prometheus.py): the
document keeps to the contract, answers are cached and one query set is in flight, and a sidecar
without --prometheus or with a failing Prometheus says so (404, 502)."""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request

import pytest

from sidecar.documents import contract
from sidecar.serve.cluster import CACHE_S, ClusterBusy, ClusterCache, ClusterError
from sidecar.sources.prometheus_queries import CLUSTER_QUERIES
from tests.helpers.fake_prometheus import FakePrometheus, two_nodes_and_a_silent_one
from tests.helpers.harness import API, Sidecar
from tests.helpers.sidecar_cli import cli

TOKEN = "cluster-route-token-0123456789"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DSH_PROMETHEUS_URL"}


@pytest.fixture(scope="module")
def prometheus():
    with FakePrometheus(two_nodes_and_a_silent_one()) as p:
        yield p


@pytest.fixture(scope="module")
def sidecar(prometheus):
    with Sidecar(["--port", "0", "--prometheus", prometheus.url, "--token", TOKEN], env=_env(), token=TOKEN) as s:
        yield s


def test_the_route_serves_the_cluster_document_by_the_contract(sidecar):
    code, doc = sidecar.get(f"{API}/cluster")
    assert code == 200, doc
    contract.check(doc, "cluster")
    assert [(n["node"], n["reporting"], n["why"]) for n in doc["nodes"]] == [
        ("node-a", True, None),
        ("node-b", True, None),
        ("node-c", False, "gone"),
    ]
    assert doc["nodes"][0]["gpus"][0]["clock_events"] == ["sw_thermal_slowdown"]
    assert [w["code"] for w in doc["warnings"]] == ["node-missing"]
    assert doc["warnings"][0]["message_ref"]["id"] == "warning.node-missing.gone"
    (job,) = doc["jobs"]
    assert (job["job_key"], job["status"], [r["rank"] for r in job["ranks"]]) == ("run-7", "GPU", [0, 1, 2, 3])
    assert sidecar.get("/version")[1]["cluster"] is True  # the page asks the route only then
    code, only = sidecar.get(f"{API}/cluster?job=no-such-job")
    assert code == 200 and only["job"] == "no-such-job" and only["jobs"] == []


def test_answers_are_cached_and_one_query_set_is_in_flight(sidecar, prometheus):
    sidecar.get(f"{API}/cluster?job=run-7")  # fills the cache for this job
    before = prometheus.queries
    codes: list[int] = []

    def ask():
        codes.append(sidecar.get(f"{API}/cluster?job=run-7")[0])

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert codes == [200] * 8
    assert prometheus.queries - before in (0, len(CLUSTER_QUERIES)), "at most one query set within the cache time"


def test_the_route_wants_the_token(sidecar):
    req = urllib.request.Request(sidecar.url + f"{API}/cluster")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 401


def test_without_prometheus_404_and_a_failing_one_502():
    with Sidecar(["--port", "0"], env=_env()) as plain:
        code, body = plain.get(f"{API}/cluster")
        assert code == 404 and "--prometheus" in body["error"]
        assert plain.get("/version")[1]["cluster"] is False
    with FakePrometheus({}) as failing:
        failing.failing = True
        with Sidecar(["--port", "0", "--prometheus", failing.url], env=_env()) as s:
            code, body = s.get(f"{API}/cluster")
            assert code == 502 and "HTTP 503" in body["error"], body


def test_a_url_that_is_not_prometheus_s_is_a_usage_error():
    done = cli("--prometheus", "ftp://prometheus:9090", "--port", "0", env=_env(), timeout_s=30)
    assert done.returncode == 2 and "not a Prometheus URL" in done.stderr


def test_the_cache_keeps_an_answer_and_never_waits_for_a_read_in_flight():
    now = [100.0]
    reads: list[str | None] = []
    entered, release = threading.Event(), threading.Event()

    def read(job):
        reads.append(job)
        if job == "slow":
            entered.set()
            release.wait(10)
        if job == "bad":
            raise ClusterError("no answer from Prometheus")
        return {"job": job}

    cache = ClusterCache(read, clock=lambda: now[0])
    assert cache.get(None) == {"job": None}
    now[0] += CACHE_S - 0.1
    assert cache.get(None) == {"job": None} and reads == [None]
    now[0] += 0.2
    assert cache.get(None) == {"job": None} and reads == [None, None]
    with pytest.raises(ClusterError, match="no answer"):
        cache.get("bad")
    with pytest.raises(ClusterError):  # a failure is cached too: a down Prometheus is not hammered
        cache.get("bad")
    assert reads.count("bad") == 1
    slow = threading.Thread(target=cache.get, args=("slow",))
    slow.start()
    assert entered.wait(10)
    now[0] += CACHE_S
    assert cache.get(None) == {"job": None}, "an old answer rather than a wait"
    with pytest.raises(ClusterBusy):
        cache.get("other")
    release.set()
    slow.join(10)
    assert cache.reads == len(reads)
