"""One job across two nodes, as `dsh-sidecar cluster` shows it: a torchrun `--nnodes 2` job on gloo
(one agent per "node", rendezvous on loopback) whose rank on node-b is slower in its forward, one
sidecar per node (`--pid` its agent), a real Prometheus scraping both through the shipped
deploy/prometheus.yml with each target's `node` label, and the real command reading Prometheus's
HTTP API: every rank and node, then `straggler-rank` for node-b's rank, which neither node's sidecar
can see alone, on the command line and on the page of a sidecar started with `--prometheus` (the
picture in docs/deploy.md). Then node-b's sidecar stops: `node-missing`."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.fakenvml import gpu
from tests.helpers.browser import screenshot, wait_js
from tests.helpers.harness import METRICS_AT_ONCE, REPO, Sidecar, python_env, wait_for
from tests.helpers.prometheus import NEEDS_PROMETHEUS, Prometheus, free_port, shipped_config
from tests.helpers.sidecar_cli import cli
from tests.helpers.straggler_job import STRAGGLER_JOB

pytestmark = NEEDS_PROMETHEUS

TOKEN = "cluster-test-token-0123456789"
NODES = ("node-a", "node-b")
SLOW_S = 0.15  # what rank 1 (node-b) adds to each forward


def cluster(prom: Prometheus, *args: str) -> tuple[int, str]:
    r = cli("cluster", "--prometheus", prom.url, *args)
    assert r.returncode in (0, 1), (r.returncode, r.stdout, r.stderr)
    return r.returncode, r.stdout


def codes(job: dict) -> list[str]:
    return [w["code"] for w in job["warnings"]]


def agent(node_rank: int, master_port: int, script, stop, log) -> subprocess.Popen:
    """torchrun's agent of one node: one rank each, static rendezvous on loopback."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--node-rank",
            str(node_rank),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(master_port),
            str(script),
            *(str(script.with_name("store")), str(stop), "2", "1", "forward", str(SLOW_S)),
        ],
        env=python_env({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DSH_PROBE_INTERVAL_S": "0.25"}),
        cwd=script.parent,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


# The page's Cluster section: every node row, every rank row, and the job's straggler warning.
PAGE_VIEW = """() => {
  const ranks = [...document.querySelectorAll('[data-testid=cluster-rank-row]')];
  const slow = document.querySelector('[data-testid=cluster-job-warnings] [data-code=straggler-rank]');
  if (ranks.length < 2 || !slow) return null;
  return {
    nodes: [...document.querySelectorAll('[data-testid=cluster-node-row]')].map((r) => [r.dataset.node, r.dataset.reporting]),
    ranks: ranks.map((r) => [r.dataset.rank, r.querySelector('[data-col=node]').textContent]),
    straggler: slow.textContent,
  };
}"""


def page_of_the_job(pages, prom: Prometheus, agent_pid: int, env: dict) -> dict:
    """What the page of a sidecar started with --prometheus shows of the job (and its picture)."""
    args = ["--pid", str(agent_pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.5", "--token", TOKEN, "--prometheus", prom.url]
    with Sidecar(args, env=env, token=TOKEN) as viewer:
        page = pages.open(f"{viewer.url}/?token={TOKEN}")
        shown = wait_js(page, PAGE_VIEW, timeout_ms=30_000)
        screenshot(page, "cluster-two-nodes", element="[data-testid=cluster]")
        assert not pages.errors, pages.errors
        return shown


def test_a_two_node_job_in_the_cluster_view_and_a_node_that_goes_missing(tmp_path, fake_nvml, pages):
    fake_nvml.write({"gpus": [gpu(0, util_gpu=37, memory_used_mib=5000)]})
    script, stop = tmp_path / "ddp.py", tmp_path / "stop"
    script.write_text(STRAGGLER_JOB)
    master_port = free_port()
    logs = [open(tmp_path / f"agent{n}.log", "wb") for n in range(2)]
    agents = [agent(n, master_port, script, stop, logs[n]) for n in range(2)]
    sidecars: list[Sidecar] = []
    prom = None
    try:
        for a in agents:
            args = ["--pid", str(a.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.5", "--token", TOKEN]
            sidecars.append(Sidecar(args, env=fake_nvml.env(), token=TOKEN))
        keys = [
            sc.wait_status(lambda d: (d.get("distributed") or {}).get("job_key"), 60, "the rank's job key")[
                "distributed"
            ]["job_key"]
            for sc in sidecars
        ]
        assert keys[0] == keys[1], f"both nodes' ranks agree on the job key: {keys}"
        ports = [int(sc.url.rsplit(":", 1)[1]) for sc in sidecars]
        prom = Prometheus(shipped_config(tmp_path, list(zip(ports, NODES)), TOKEN), tmp_path)

        def whole_job():
            rc, out = cluster(prom, "--json", "--job", keys[0])
            doc = json.loads(out)
            jobs = doc["jobs"]
            ok = (
                rc == 0
                and len(jobs) == 1
                and [r["rank"] for r in jobs[0]["ranks"]] == [0, 1]
                and all(r["forward_rate_per_s"] for r in jobs[0]["ranks"])
            )
            return doc if ok else None

        doc = wait_for(whole_job, 60, 1.0, "the cluster view to show both ranks with their rates")
        (job,) = doc["jobs"]
        assert job["job_key"] == keys[0] and job["world_size"] == 2 and job["nodes"] == list(NODES)
        assert [(r["rank"], r["node"], r["local_rank"]) for r in job["ranks"]] == [
            (0, "node-a", 0),
            (1, "node-b", 0),
        ]
        assert all(r["forward_fraction"] is not None for r in job["ranks"])
        assert job["status"] == "CPU" and "node-missing" not in codes(job) and "ranks-missing" not in codes(job)
        assert [(n["node"], n["reporting"]) for n in doc["nodes"]] == [("node-a", True), ("node-b", True)]
        assert [(g["index"], g["util_pct"]) for n in doc["nodes"] for g in n["gpus"]] == [
            (0, 37.0),
            (0, 37.0),
        ]

        # Each node's sidecar sees one rank: only the view across nodes finds the one the other waits for.
        def straggler():
            rc, out = cluster(prom, "--json", "--job", keys[0])
            (job,) = json.loads(out)["jobs"]
            found = [w for w in job["warnings"] if w["code"] == "straggler-rank"]
            return (rc, job, found[0]) if found else None

        rc, job, w = wait_for(straggler, 90, 1.0, "straggler-rank for rank 1 on node-b")
        assert rc == 1 and codes(job) == ["straggler-rank"], job["warnings"]
        assert w["message"].startswith(f"Rank 1 (node node-b) makes the other ranks of job {keys[0]} wait "), w
        assert "because of its forward" in w["message"], w["message"]
        waits = {r["rank"]: r["collective_wait_fraction"] for r in job["ranks"]}
        assert waits[1] == 0.0 and waits[0] >= 0.3, waits
        for d in (sc.status() for sc in sidecars):
            assert not d["rank_waits"] and "straggler-rank" not in [w["code"] for w in d["warnings"]], d["warnings"]
        rc, text = cluster(prom, "--job", keys[0])
        assert rc == 1 and f"job {keys[0]}: CPU, 2 of 2 ranks on 2 node(s): node-a, node-b" in text, text
        assert "warning: straggler-rank: Rank 1 (node node-b)" in text, text
        print(text)  # docs/deploy.md shows this view
        shown = page_of_the_job(pages, prom, agents[0].pid, fake_nvml.env())
        assert shown["nodes"] == [["node-a", "true"], ["node-b", "true"]], shown
        assert shown["ranks"] == [["0", "node-a"], ["1", "node-b"]], shown
        assert "Rank 1 (node node-b)" in shown["straggler"] and "because of its forward" in shown["straggler"], shown

        # node-b's sidecar stops: Prometheus's scrape of it fails, and the view says so.
        sidecars.pop().stop()
        stopped_at = time.monotonic()

        def missing():
            rc, out = cluster(prom, "--json")
            d = json.loads(out)
            b = [n for n in d["nodes"] if n["node"] == "node-b"]
            return (rc, d) if b and not b[0]["reporting"] else None

        rc, doc = wait_for(missing, 30, 0.5, "node-b to be missing")
        assert time.monotonic() - stopped_at < 30
        assert rc == 1
        assert [(n["node"], n["reporting"], n["why"]) for n in doc["nodes"]] == [
            ("node-a", True, None),
            ("node-b", False, "down"),
        ]
        assert [w["code"] for w in doc["warnings"]] == ["node-missing"]
        (job,) = [j for j in doc["jobs"] if j["job_key"] == keys[0]]
        assert [w["code"] for w in job["warnings"]] == ["node-missing"] and "node-b" in job["warnings"][0][
            "message"
        ]
        rc, text = cluster(prom)
        assert rc == 1 and "node-b  MISSING (down)" in text, text
    finally:
        stop.touch()
        for sc in sidecars:
            sc.stop()
        if prom is not None:
            prom.stop()
        for a in agents:
            try:
                a.wait(60)
            except subprocess.TimeoutExpired:
                a.kill()
                a.wait()
        for log in logs:
            log.close()


def test_cluster_without_prometheus_says_so_and_exits_5():
    port = free_port()  # nothing listens there
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sidecar.cli",
            "cluster",
            "--prometheus",
            f"http://127.0.0.1:{port}",
            "--timeout",
            "2",
        ],
        env=python_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 5 and "no answer from Prometheus" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "cluster"],
        env={k: v for k, v in python_env().items() if k != "DSH_PROMETHEUS_URL"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--prometheus" in r.stderr
