"""The cluster document from Prometheus's answers (sidecar/documents/cluster.py), the cluster rules
(sidecar/verdict/cluster.py), the Prometheus client (sidecar/sources/prometheus.py) and the cluster
view's queries (sidecar/sources/prometheus_queries.py) against a real HTTP server on loopback. tests/integration/test_cluster.py runs it against a real Prometheus."""

from __future__ import annotations

import json
import os
import threading
import urllib.parse
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sidecar.cli.cluster import cluster_text
from sidecar.common.cluster_answers import ClusterAnswers
from sidecar.documents.cluster import STALE_POLL_S, build_cluster
from sidecar.sources.prometheus import MAX_REPLY_BYTES, PrometheusApi, PrometheusError, check_url
from sidecar.sources.prometheus_queries import CLUSTER_QUERIES, read_cluster_answers

A, B, C = "10.0.0.1:8765", "10.0.0.2:8765", "10.0.0.3:8765"
NODE = {A: "node-a", B: "node-b", C: "node-c"}


def s(instance: str, value: float = 1.0, **labels) -> tuple[dict[str, str], float]:
    """A sample as Prometheus returns it: the target's labels (instance, job, node) and the series'."""
    return ({"instance": instance, "job": "dsh", "node": NODE[instance], **labels}, value)


def two_node_job(world_size: int = 4, nodes=(A, B)) -> dict[str, list]:
    """A 4-rank job, two ranks on each node, keyed `run-7`; node-a's GPU 0 is slowed by heat."""
    r: dict[str, list] = {f.name: [] for f in fields(ClusterAnswers)}
    for n, inst in enumerate(nodes):
        r["sidecars"].append(s(inst, version="1"))
        r["sidecars_recent"].append(s(inst, version="1"))
        r["up"].append(s(inst))
        r["poll_age_s"].append(s(inst, 1.2))
        job = {"job_id": f"{100 + n}-5", "job_key": "run-7"}
        r["jobs"].append(s(inst, **job, root_pid=str(100 + n), user="ana", process="torchrun"))
        r["jobs_recent"].append(s(inst, **job))
        r["status"].append(s(inst, job_id=job["job_id"], status="GPU"))
        for local in range(2):
            rank = str(2 * n + local)
            r["ranks"].append(
                s(inst, job_id=job["job_id"], rank=rank, local_rank=str(local), world_size=str(world_size))
            )
            for phase, share in (("data_wait", 0.1), ("forward", 0.3), ("optimizer", 0.2), ("other", 0.4)):
                r["step_fraction"].append(
                    s(inst, share, job_id=job["job_id"], role="rank", rank=rank, phase=phase)
                )
            r["forward_rate"].append(s(inst, 9.5, job_id=job["job_id"], rank=rank))
            r["rank_gpu_mem"].append(
                s(inst, 2**30, job_id=job["job_id"], role="rank", gpu=str(local), rank=rank)
            )
        for g in range(2):
            gl = {"gpu": str(g), "uuid": f"GPU-{n}{g}", "name": "NVIDIA H100"}
            r["gpu_util"].append(s(inst, 90.0, **gl))
            r["gpu_mem_used"].append(s(inst, 20 * 2**30, **gl))
            r["gpu_mem_total"].append(s(inst, 80 * 2**30, **gl))
            r["gpu_sm_clock"].append(s(inst, 1.98e9, **gl))
            r["gpu_sm_activity"].append(s(inst, 0.71, **gl))
    r["gpu_clock_events"].append(
        s(nodes[0], **{"gpu": "0", "uuid": "GPU-00", "name": "NVIDIA H100", "reason": "sw_thermal_slowdown"})
    )
    return r


def cluster_doc(r: dict[str, list], **kw) -> dict:
    """The cluster document of answers ``r`` (by ClusterAnswers's field names)."""
    return build_cluster(ClusterAnswers(**r), **kw)


def codes(doc: dict, where: str = "jobs") -> list[str]:
    if where == "nodes":
        return [w["code"] for w in doc["warnings"]]
    return [w["code"] for j in doc["jobs"] for w in j["warnings"]]


def test_one_job_across_two_nodes_shows_every_rank_node_and_gpu():
    doc = cluster_doc(two_node_job(), now_unix_s=1000.0, prometheus="http://p:9090")
    assert [n["node"] for n in doc["nodes"]] == ["node-a", "node-b"]
    assert all(n["reporting"] for n in doc["nodes"])
    (job,) = doc["jobs"]
    assert job["job_key"] == "run-7" and job["world_size"] == 4 and job["status"] == "GPU"
    assert job["nodes"] == ["node-a", "node-b"]
    assert [(r["rank"], r["node"], r["local_rank"], r["gpus"]) for r in job["ranks"]] == [
        (0, "node-a", 0, [0]),
        (1, "node-a", 1, [1]),
        (2, "node-b", 0, [0]),
        (3, "node-b", 1, [1]),
    ]
    assert job["ranks"][0]["data_wait_fraction"] == 0.1 and job["ranks"][3]["forward_rate_per_s"] == 9.5
    g = doc["nodes"][0]["gpus"][0]
    assert (g["util_pct"], g["mem_used_mib"], g["mem_total_mib"], g["sm_clock_mhz"]) == (
        90.0,
        20480.0,
        81920.0,
        1980.0,
    )
    assert g["clock_events"] == ["sw_thermal_slowdown"] and doc["nodes"][1]["gpus"][0]["clock_events"] == []
    assert codes(doc) == [] and codes(doc, "nodes") == []
    text = cluster_text(doc)
    assert "job run-7: GPU, 4 of 4 ranks on 2 node(s): node-a, node-b" in text
    assert "sw_thermal_slowdown" in text and "1980 MHz" in text


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("gone", "gone"),  # the sidecar stopped: Prometheus has no sample now, had one 5 minutes ago
        ("down", "down"),  # the scrape fails: up == 0, no sample now
        ("stale", "stale"),  # scraped, but its poller is stuck
    ],
)
def test_a_node_that_stops_reporting_is_node_missing_with_why(change, why):
    r = two_node_job()
    if change in ("gone", "down"):
        for name in (
            "sidecars",
            "jobs",
            "status",
            "ranks",
            "step_fraction",
            "forward_rate",
            "rank_gpu_mem",
            "poll_age_s",
        ):
            r[name] = [x for x in r[name] if x[0]["instance"] != B]
        for name in ("gpu_util", "gpu_mem_used", "gpu_mem_total", "gpu_sm_clock", "gpu_sm_activity"):
            r[name] = [x for x in r[name] if x[0]["instance"] != B]
        if change == "down":
            r["up"] = [(lab, 0.0 if lab["instance"] == B else 1.0) for lab, _ in r["up"]]
    else:
        r["poll_age_s"] = [
            (lab, STALE_POLL_S + 5 if lab["instance"] == B else v) for lab, v in r["poll_age_s"]
        ]
    doc = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090")
    node_b = doc["nodes"][1]
    assert (node_b["node"], node_b["reporting"], node_b["why"]) == ("node-b", False, why)
    assert codes(doc, "nodes") == ["node-missing"]
    assert "node-b" in doc["warnings"][0]["message"] and "node-b" in doc["warnings"][0]["hint"]
    (job,) = doc["jobs"]
    assert codes(doc) == ["node-missing"], "the job says which of its nodes went silent"
    assert "ranks-missing" not in codes(doc), "a silent node explains the missing ranks: no second warning"
    assert "MISSING (" + why + ")" in cluster_text(doc)


def test_ranks_missing_when_a_node_of_the_job_never_ran_a_sidecar():
    doc = cluster_doc(two_node_job(world_size=6), now_unix_s=1000.0, prometheus="http://p:9090")
    assert codes(doc) == ["ranks-missing"] and codes(doc, "nodes") == []
    assert "4 of the 6 ranks" in doc["jobs"][0]["warnings"][0]["message"]
    assert "missing: 4, 5" in doc["jobs"][0]["warnings"][0]["message"]


def test_jobs_without_a_key_stay_on_their_node_and_job_filter_picks_one():
    r = two_node_job()
    for name in ("jobs", "jobs_recent"):
        r[name] = [({k: v for k, v in lab.items() if k != "job_key"}, v) for lab, v in r[name]]
    doc = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090")
    assert sorted(j["job_key"] for j in doc["jobs"]) == ["node-a/100-5", "node-b/101-5"]
    one = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090", job="101-5")
    assert [j["job_key"] for j in one["jobs"]] == ["node-b/101-5"]
    assert [x["rank"] for x in one["jobs"][0]["ranks"]] == [2, 3]
    none = cluster_doc(two_node_job(), now_unix_s=1000.0, prometheus="http://p:9090", job="other")
    assert none["jobs"] == [] and "no job other" in cluster_text(none)


def single_process_jobs(r: dict[str, list], inst: str, n: int) -> list[str]:
    """`n` jobs of one process on node `inst`, as its sidecar exports them: a `dsh_job_info` each
    (no job_key, no world size: not distributed), a status, no rank series. Their job ids."""
    ids = [f"{1291 + i}-7" for i in range(n)]
    for job_id in ids:
        r["jobs"].append(s(inst, job_id=job_id, root_pid=job_id.split("-")[0], user="ana", process="python"))
        r["jobs_recent"].append(s(inst, job_id=job_id))
        r["status"].append(s(inst, job_id=job_id, status="CPU"))
    return ids


def test_jobs_of_one_process_are_counted_not_listed() -> None:
    """Issue 39 item 3: a node's twenty notebooks and scripts were twenty jobs of the view, each an
    empty table ("0 of - ranks") above the run it is for. Only distributed jobs are listed (world size
    over 1: from the ranks, or from dsh_job_info before any rank reports); the rest is a count."""
    r = two_node_job()
    ids = single_process_jobs(r, A, 20)
    # a job whose dsh_job_info says WORLD_SIZE=2 before any of its ranks' series: distributed
    r["jobs"].append(s(B, job_id="500-1", job_key="run-8", world_size="2"))
    r["jobs_recent"].append(s(B, job_id="500-1", job_key="run-8", world_size="2"))
    # one of WORLD_SIZE=1 (a launcher's single rank): not distributed
    r["jobs_recent"].append(s(B, job_id="600-1", job_key="run-9", world_size="1"))
    r["ranks"].append(s(B, job_id="600-1", rank="0", local_rank="0", world_size="1"))
    doc = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090")
    assert [(j["job_key"], j["world_size"]) for j in doc["jobs"]] == [("run-7", 4), ("run-8", 2)]
    assert doc["undistributed_jobs"] == 21
    text = cluster_text(doc)
    assert "0 of - ranks" not in text and text.count("\njob ") == 2, text
    assert text.rstrip().endswith("21 job(s) of one process or one rank on one node are not listed"), text
    assert "cluster from http://p:9090: 2 node(s), 2 job(s)" in text
    # asked for by name, a job of one process is shown, whatever its size
    one = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090", job=ids[3])
    assert [j["job_key"] for j in one["jobs"]] == [f"node-a/{ids[3]}"] and one["undistributed_jobs"] == 0
    # none of them: no line about them
    assert "not listed" not in cluster_text(cluster_doc(two_node_job(), now_unix_s=1000.0, prometheus="p"))


def owned_by(r: dict[str, list], uid: str) -> dict[str, list]:
    """The job's dsh_job_info series with its owner's uid, as a sidecar exports it."""
    for name in ("jobs", "jobs_recent"):
        r[name] = [({**lab, "uid": uid}, v) for lab, v in r[name]]
    return r


def another_users_rank(
    r: dict[str, list], inst: str, job_id: str, rank: str = "1", world_size: str = "8"
) -> None:
    """A process of uid 65533 on node `inst` that set the victim's TORCHELASTIC_RUN_ID (`run-7`),
    RANK and WORLD_SIZE: a job of its own on its node (its own root), CPU, with a forward rate."""
    job = {"job_id": job_id, "job_key": "run-7", "uid": "65533"}
    r["jobs"].append(s(inst, **job, root_pid=job_id.split("-")[0], user="mallory", process="python"))
    r["jobs_recent"].append(s(inst, **job))
    r["status"].append(s(inst, job_id=job_id, status="CPU"))
    r["ranks"].append(s(inst, job_id=job_id, rank=rank, local_rank="0", world_size=world_size))
    r["forward_rate"].append(s(inst, 9.5, job_id=job_id, rank=rank))
    r["rank_backward"].append(s(inst, 0.05, job_id=job_id, rank=rank))
    r["rank_steps"].append(s(inst, 40, job_id=job_id, rank=rank))


def test_another_owner_under_the_same_key_is_a_job_of_its_own_on_each_node():
    """The grouping: a job across nodes is (job_key, uid). Another user's processes under the victim's
    key, on a node of the victim's run and on a node of their own, make one job of that user."""
    r = owned_by(two_node_job(), "1000")
    for name in ("sidecars", "sidecars_recent", "up"):
        r[name].append(s(C, version="1") if name != "up" else s(C))
    another_users_rank(r, A, "300-9", rank="1")
    another_users_rank(r, C, "400-9", rank="5")
    doc = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090")
    assert [(j["job_key"], j["uid"], j["nodes"]) for j in doc["jobs"]] == [
        ("run-7", 1000, ["node-a", "node-b"]),
        ("run-7", 65533, ["node-a", "node-c"]),
    ]
    assert [(x["rank"], x["node"], x["job_id"]) for x in doc["jobs"][1]["ranks"]] == [
        (1, "node-a", "300-9"),
        (5, "node-c", "400-9"),
    ]
    # Without a uid label (a sidecar from before it): grouped by the key alone, as then.
    assert [j["uid"] for j in cluster_doc(two_node_job(), now_unix_s=1000.0, prometheus="p")["jobs"]] == [
        None
    ]


def test_another_users_rank_under_the_victims_key_leaves_the_victims_job_untouched():
    """Issue 37 item 5: uid 65533 runs one CPU process with TORCHELASTIC_RUN_ID=run-7, RANK=1,
    WORLD_SIZE=8 on node-a. Keyed by job_key alone it merged into the victim's run: status MIXED,
    world size 8, `ranks-missing`, rank 1's forward rate doubled. It is a job of its own."""
    r = owned_by(two_node_job(), "1000")
    another_users_rank(r, A, "300-9")
    doc = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090")
    victim, other = doc["jobs"]
    assert (victim["job_key"], victim["uid"], victim["status"], victim["world_size"]) == (
        "run-7",
        1000,
        "GPU",
        4,
    )
    assert [(x["rank"], x["node"], x["forward_rate_per_s"]) for x in victim["ranks"]] == [
        (0, "node-a", 9.5),
        (1, "node-a", 9.5),
        (2, "node-b", 9.5),
        (3, "node-b", 9.5),
    ]
    assert victim["warnings"] == [] and victim["nodes"] == ["node-a", "node-b"]
    assert (other["job_key"], other["uid"], other["status"], other["world_size"]) == (
        "run-7",
        65533,
        "CPU",
        8,
    )
    assert [(x["rank"], x["job_id"], x["forward_rate_per_s"]) for x in other["ranks"]] == [(1, "300-9", 9.5)]
    assert [w["code"] for w in other["warnings"]] == ["ranks-missing"]
    # `--job run-7` shows both, each under its owner's uid.
    one = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090", job="run-7")
    assert [(j["job_key"], j["uid"]) for j in one["jobs"]] == [("run-7", 1000), ("run-7", 65533)]
    text = cluster_text(one)
    assert "job run-7 (uid 1000): GPU, 4 of 4 ranks on 2 node(s): node-a, node-b" in text, text
    assert "job run-7 (uid 65533): CPU, 1 of 8 ranks on 1 node(s): node-a" in text, text


def with_backward(
    r: dict[str, list], now: dict[int, float], before: dict[int, float] | None, steps: int = 40
) -> dict:
    """The job's ranks' backward shares now and STRAGGLER_CONFIRM_S ago (None: no sample then), each
    from a window of `steps` steps."""
    for key, shares in (("", now), ("_before", before or {})):
        for rank, share in shares.items():
            inst = (A, B)[rank // 2]
            labels = {"job_id": f"{100 + rank // 2}-5", "rank": str(rank)}
            r[f"rank_backward{key}"].append(s(inst, share, **labels))
            r[f"rank_steps{key}"].append(s(inst, steps, **labels))
    return r


def straggler_warnings(doc: dict) -> list[dict]:
    return [w for j in doc["jobs"] for w in j["warnings"] if w["code"] == "straggler-rank"]


# Rank 3 (node-b) reaches the all-reduce last: it waits least in backward, the others about 30 %.
SLOW_3 = {0: 0.40, 1: 0.41, 2: 0.39, 3: 0.10}


def test_a_straggler_across_nodes_is_named_with_its_node_gpu_and_cause():
    r = with_backward(two_node_job(), SLOW_3, SLOW_3)
    for i, (labels, _) in enumerate(r["step_fraction"]):
        if labels["rank"] == "3" and labels["phase"] == "forward":
            r["step_fraction"][i] = (labels, 0.6)  # its forward: 0.3 more than the others'
    doc = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090")
    (w,) = straggler_warnings(doc)
    assert w["message"].startswith(
        "Rank 3 (node node-b, GPU 1) makes the other ranks of job run-7 wait 30%"
    ), w
    assert "because of its forward" in w["message"] and "over the last 40 steps" in w["message"]
    assert w["message_ref"]["id"] == "warning.straggler-rank.cluster"
    assert w["hint_ref"]["id"] == "hint.straggler-rank.forward" and "--pid <pid>" in w["hint"]
    (job,) = doc["jobs"]
    waits = {
        r["rank"]: (r["backward_fraction"], r["collective_wait_fraction"], r["window_steps"])
        for r in job["ranks"]
    }
    assert waits == {0: (0.4, 0.3, 40), 1: (0.41, 0.31, 40), 2: (0.39, 0.29, 40), 3: (0.1, 0.0, 40)}
    text = cluster_text(doc)
    assert "warning: straggler-rank: Rank 3 (node node-b, GPU 1)" in text, text
    assert any(line.split()[:1] == ["rank"] and line.split()[-1] == "waits" for line in text.splitlines()), (
        text
    )
    assert [line.split()[-1] for line in text.splitlines() if line.startswith("  3 ")] == ["0%"], text


def test_a_throttled_gpu_on_another_node_is_the_cause():
    # node-a's GPU 0 is braked by heat (two_node_job); rank 0 runs on it and holds the others back.
    slow_0 = {0: 0.10, 1: 0.40, 2: 0.41, 3: 0.39}
    doc = cluster_doc(with_backward(two_node_job(), slow_0, slow_0), now_unix_s=1000.0, prometheus="p")
    (w,) = straggler_warnings(doc)
    assert "Rank 0 (node node-a, GPU 0)" in w["message"]
    assert "a throttled GPU (GPU 0: software thermal slowdown, SM clock 1980 MHz)" in w["message"], w[
        "message"
    ]


def with_vendor(r: dict[str, list], vendor: str) -> dict[str, list]:
    """Every GPU series of ``r`` with a ``vendor`` label, as a sidecar exports them."""
    for name, samples in r.items():
        if name.startswith("gpu_"):
            r[name] = [({**labels, "vendor": vendor}, value) for labels, value in samples]
    return r


def test_an_amd_gpu_s_clock_is_its_gpu_clock_in_the_cause_and_the_table():
    """ "SM clock" is NVIDIA's word: an MI300X node's throttled GPU is named with its GPU clock, and
    the node table's clock column says so; a vendor label the sidecar never exports is not taken."""
    slow_0 = {0: 0.10, 1: 0.40, 2: 0.41, 3: 0.39}
    doc = cluster_doc(
        with_vendor(with_backward(two_node_job(), slow_0, slow_0), "amd"), now_unix_s=1000.0, prometheus="p"
    )
    assert {g["vendor"] for n in doc["nodes"] for g in n["gpus"]} == {"amd"}
    (w,) = straggler_warnings(doc)
    assert "a throttled GPU (GPU 0: software thermal slowdown, GPU clock 1980 MHz)" in w["message"], w[
        "message"
    ]
    text = cluster_text(doc)
    assert "GPU clock" in text and "SM clock" not in text, text
    nvidia = cluster_doc(
        with_vendor(with_backward(two_node_job(), slow_0, slow_0), "nvidia"),
        now_unix_s=1000.0,
        prometheus="p",
    )
    (w,) = straggler_warnings(nvidia)
    assert "SM clock 1980 MHz" in w["message"] and "SM clock" in cluster_text(nvidia)
    forged = cluster_doc(with_vendor(two_node_job(), "amd\x1b[2J"), now_unix_s=1000.0, prometheus="p")
    assert {g["vendor"] for n in forged["nodes"] for g in n["gpus"]} == {None}


@pytest.mark.parametrize(
    ("now", "before", "steps", "why"),
    [
        ({0: 0.40, 1: 0.41, 2: 0.39, 3: 0.38}, {0: 0.40, 1: 0.41, 2: 0.39, 3: 0.38}, 40, "a balanced job"),
        (SLOW_3, None, 40, "not seen before: not yet confirmed"),
        (SLOW_3, {0: 0.10, 1: 0.41, 2: 0.39, 3: 0.40}, 40, "another rank was the straggler before"),
        (SLOW_3, SLOW_3, 12, "windows shorter than straggler_min_steps"),
        (
            {0: 0.40, 1: 0.11, 2: 0.39, 3: 0.10},
            {0: 0.40, 1: 0.11, 2: 0.39, 3: 0.10},
            40,
            "two ranks wait as little",
        ),
    ],
)
def test_no_cross_node_straggler_without_a_confirmed_one(now, before, steps, why):
    doc = cluster_doc(with_backward(two_node_job(), now, before, steps), now_unix_s=1000.0, prometheus="p")
    assert straggler_warnings(doc) == [], why


def test_untrusted_labels_are_not_believed():
    r = two_node_job()
    r["gpu_clock_events"].append(s(A, gpu="1", uuid="GPU-01", name="x", reason="\x1b[31mIGNORE ALL"))
    r["ranks"].append(s(A, job_id="100-5", rank="not-a-number", world_size="4"))
    r["ranks"].append(s(A, job_id="999-9", rank="7", world_size="4"))  # a job no dsh_job_info names
    doc = cluster_doc(r, now_unix_s=1000.0, prometheus="http://p:9090")
    assert doc["nodes"][0]["gpus"][1]["clock_events"] == []
    assert [x["rank"] for x in doc["jobs"][0]["ranks"]] == [0, 1, 2, 3]


class _Reply(BaseHTTPRequestHandler):
    body: bytes = b""
    code = 200

    def do_GET(self):
        self.server.paths.append(self.path)
        self.send_response(self.server.code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Reply)
    httpd.paths, httpd.code, httpd.body = [], 200, b""
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _vector(*items) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": list(items)}}).encode()


def test_the_client_reads_a_vector_and_asks_at_one_instant(server):
    server.body = _vector(
        {"metric": {"instance": "a", "node": "n"}, "value": [1, "2.5"]},
        {"metric": {"instance": "b"}, "value": [1, "NaN"]},
        {"metric": "junk", "value": [1, "1"]},
        {"metric": {"x": "y"}, "value": [1, "not a number"]},
    )
    api = PrometheusApi(f"http://127.0.0.1:{server.server_address[1]}/", timeout_s=2)
    samples = api.query("up", at_unix_s=123.5)
    assert samples[0] == ({"instance": "a", "node": "n"}, 2.5)
    assert len(samples) == 2 and samples[1].value != samples[1].value  # NaN kept as NaN
    assert server.paths == ["/api/v1/query?query=up&time=123.500"]


@pytest.mark.parametrize(
    ("code", "body", "says"),
    [
        (400, json.dumps({"status": "error", "error": "parse error at char 3"}).encode(), "parse error"),
        (200, b"<html>not prometheus</html>", "did not answer JSON"),
        (502, b"Bad Gateway", "HTTP 502"),
        (
            200,
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
            "not a vector",
        ),
        (200, b"[" + b"1," * (MAX_REPLY_BYTES // 2) + b"1]", "over"),
    ],
)
def test_the_client_turns_every_bad_answer_into_one_clear_error(server, code, body, says):
    server.code, server.body = code, body
    api = PrometheusApi(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5)
    with pytest.raises(PrometheusError, match=says):
        api.query("up")


def test_each_answer_of_the_cluster_view_has_its_one_query():
    assert list(CLUSTER_QUERIES) == [f.name for f in fields(ClusterAnswers)]
    assert len(set(CLUSTER_QUERIES.values())) == len(CLUSTER_QUERIES)


def test_the_cluster_answers_are_asked_at_one_instant_and_handed_up_typed(server):
    server.body = _vector({"metric": {"instance": "a", "node": "n"}, "value": [1, "2.5"]})
    api = PrometheusApi(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5)
    answers, uid = read_cluster_answers(api, 123.5)
    asked = [urllib.parse.parse_qs(urllib.parse.urlsplit(p).query) for p in server.paths]
    assert [q["query"] for q in asked] == [[promql] for promql in CLUSTER_QUERIES.values()]
    assert {q["time"][0] for q in asked} == {"123.500"}
    assert type(answers) is ClusterAnswers and uid == os.getuid()  # served on loopback, by this process
    assert all(
        list(getattr(answers, f.name)) == [({"instance": "a", "node": "n"}, 2.5)]
        for f in fields(ClusterAnswers)
    )


def test_no_listener_and_bad_urls():
    with pytest.raises(PrometheusError, match="no answer from Prometheus"):
        PrometheusApi("http://127.0.0.1:9", timeout_s=1).query("up")
    for bad in ("ftp://p:9090", "http://", "p:9090", "http://p:9090/?q=1"):
        with pytest.raises(ValueError, match="not a Prometheus URL"):
            check_url(bad)
