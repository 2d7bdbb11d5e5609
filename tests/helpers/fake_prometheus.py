"""A tiny Prometheus on loopback: the HTTP API's instant query (`GET /api/v1/query`) answered from
fixed vectors, one per query of the cluster view (sidecar/sources/prometheus_queries.py), for
tests of the cluster route and page that need no real Prometheus (tests/helpers/prometheus.py runs
one where the scraping itself is under test)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sidecar.sources.prometheus_queries import CLUSTER_QUERIES

Vectors = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]
NODE_A, NODE_B, NODE_C = "10.0.0.1:8765", "10.0.0.2:8765", "10.0.0.3:8765"
NODE_NAMES = {NODE_A: "node-a", NODE_B: "node-b", NODE_C: "node-c"}


def sample(instance: str, value: float = 1.0, **labels: str) -> tuple[dict[str, str], float]:
    """A sample as Prometheus returns it: the target's labels (instance, job, node) and the series'."""
    return ({"instance": instance, "job": "dsh", "node": NODE_NAMES[instance], **labels}, value)


def two_nodes_and_a_silent_one(
    job_key: str = "run-7", straggler: int | None = None, single_process_jobs: int = 0
) -> dict[str, list]:
    """Job `job_key` with ranks 0-1 on node-a and 2-3 on node-b, each node two H100s (node-a's GPU 0
    slowed by heat); node-c reported within the look-back window and has no sample now (`gone`).
    Rank 3 waits longest for its data; with `straggler`, that rank's backward is the least of the
    four now and STRAGGLER_CONFIRM_S ago (windows of 40 steps): the one the others wait for. With
    `single_process_jobs`, node-a also runs that many jobs of one process (no job key, no rank)."""
    r: dict[str, list] = {name: [] for name in CLUSTER_QUERIES}
    for i in range(single_process_jobs):
        job_id = f"{1291 + i}-7"
        r["jobs"].append(sample(NODE_A, job_id=job_id))
        r["jobs_recent"].append(sample(NODE_A, job_id=job_id))
        r["status"].append(sample(NODE_A, job_id=job_id, status="CPU"))
    r["sidecars_recent"].append(sample(NODE_C, version="1"))
    for n, inst in enumerate((NODE_A, NODE_B)):
        for name in ("sidecars", "sidecars_recent"):
            r[name].append(sample(inst, version="1"))
        r["up"].append(sample(inst))
        r["poll_age_s"].append(sample(inst, 1.2))
        job = {"job_id": f"{100 + n}-5", "job_key": job_key}
        r["jobs"].append(sample(inst, **job))
        r["jobs_recent"].append(sample(inst, **job))
        r["status"].append(sample(inst, job_id=job["job_id"], status="GPU"))
        for local in range(2):
            rank = str(2 * n + local)
            ids = {"job_id": job["job_id"], "rank": rank}
            r["ranks"].append(sample(inst, **ids, local_rank=str(local), world_size="4"))
            for phase, share in (("data_wait", 0.1 + 0.5 * (rank == "3")), ("forward", 0.3), ("optimizer", 0.1), ("other", 0.2)):
                r["step_fraction"].append(sample(inst, share, **ids, role="rank", phase=phase))
            r["forward_rate"].append(sample(inst, 9.5, **ids))
            r["rank_gpu_mem"].append(sample(inst, 2**30, **ids, role="rank", gpu=str(local)))
            backward = 0.1 if straggler == int(rank) else 0.5
            for when in ("", "_before"):
                r[f"rank_backward{when}"].append(sample(inst, backward, **ids))
                r[f"rank_steps{when}"].append(sample(inst, 40, **ids))
        for g in range(2):
            gl = {"gpu": str(g), "uuid": f"GPU-{n}{g}", "name": "NVIDIA H100"}
            r["gpu_util"].append(sample(inst, 90.0 - 40 * g, **gl))
            r["gpu_mem_used"].append(sample(inst, 20 * 2**30, **gl))
            r["gpu_mem_total"].append(sample(inst, 80 * 2**30, **gl))
            r["gpu_sm_clock"].append(sample(inst, 1.98e9, **gl))
            r["gpu_sm_activity"].append(sample(inst, 0.71, **gl))
    r["gpu_clock_events"].append(
        sample(NODE_A, gpu="0", uuid="GPU-00", name="NVIDIA H100", reason="sw_thermal_slowdown")
    )
    return r


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        server: FakePrometheus = self.server.owner  # type: ignore[attr-defined]
        url = urllib.parse.urlsplit(self.path)
        promql = urllib.parse.parse_qs(url.query).get("query", [""])[0]
        code, body = server.answer(url.path, promql)
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if body.startswith(b"{") else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class FakePrometheus:
    """Answers each query of CLUSTER_QUERIES with `vectors[name]` (empty when absent); `failing` makes every
    answer an HTTP 503 that is not JSON. `queries` counts the queries asked."""

    def __init__(self, vectors: Vectors):
        self.vectors = vectors
        self.failing = False
        self.queries = 0
        self._names = {promql: name for name, promql in CLUSTER_QUERIES.items()}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def answer(self, path: str, promql: str) -> tuple[int, bytes]:
        with self._lock:
            self.queries += 1
        if self.failing:
            return 503, b"Service Unavailable"
        if path != "/api/v1/query" or promql not in self._names:
            return 400, json.dumps({"status": "error", "error": f"unknown query {promql!r}"}).encode()
        result = [
            {"metric": dict(labels), "value": [0, repr(float(value))]}
            for labels, value in self.vectors.get(self._names[promql], ())
        ]
        return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakePrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
