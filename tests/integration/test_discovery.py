"""Discovery: `dsh-sidecar` without --pid finds every job of its user, groups each job's processes
under the job's root, and lists jobs that start and end while it runs; a non-root sidecar never
shows another user's job.

Jobs are started detached (their parent is init, not this test process): discovery groups a process
under its topmost probed ancestor, and the test process may run a probe of its own. The machine may
run other jobs too, so every assertion is about the jobs the test started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from hostfs.procid import process_identity
from probe_wire import segment_path
from tests.fakenvml import gpu
from tests.helpers.gloo_job import DDP_JOB
from tests.helpers.harness import METRICS_AT_ONCE, REPO, FakeJob, Sidecar, python_env, wait_for
from tests.helpers.other_users import write_as

pytestmark = pytest.mark.slow

API = "/api/dsh-gpu-dashboard"
NOBODY = 65534


def jobs_by_root(sc: Sidecar) -> dict[int, dict]:
    code, body = sc.get(f"{API}/jobs")
    assert code == 200, body
    return {j["root_pid"]: j for j in body["jobs"]}


def job_doc(sc: Sidecar, job_id: str) -> dict:
    code, body = sc.get(f"{API}/status?job={job_id}")
    assert code == 200, body
    return body


def model(name: str, device: str = "cpu") -> dict:
    return {"name": name, "device": device, "devices": [device], "params": 10}


def detached(cmd: list[str], env: dict, cwd) -> None:
    subprocess.run(
        ["sh", "-c", '"$@" </dev/null >/dev/null 2>&1 &', "sh", *cmd], env=env, cwd=cwd, check=True
    )


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def test_three_jobs_found_without_a_pid_and_grouped_under_their_roots(tmp_path, fake_nvml):
    fake_nvml.write({"gpus": [gpu(0)]})
    plain = FakeJob(
        tmp_path / "plain", {"main": {"payload": {"role": "main", "models": [model("plain")]}}}, detach=True
    )
    workers = {
        f"w{i}": {"payload": {"role": "dataloader-worker", "worker_id": i}, "forward_rate_hz": 0}
        for i in (0, 1)
    }
    loader = FakeJob(
        tmp_path / "loader",
        {
            "main": {"payload": {"role": "main", "models": [model("net")]}, "children": ["w0", "w1"]},
            **workers,
        },
        detach=True,
    )
    # A real launcher with two real ranks (torch.distributed.run, gloo on the CPU).
    script, stop = tmp_path / "train_ddp.py", tmp_path / "stop"
    script.write_text(DDP_JOB)
    env = python_env({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DSH_PROBE_INTERVAL_S": "0.25"})
    launcher_cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    detached([*launcher_cmd, str(script), str(tmp_path / "store"), str(stop)], env, tmp_path)
    try:
        with Sidecar(["--port", "0", *METRICS_AT_ONCE, "--interval", "0.5"], env=fake_nvml.env()) as sc:

            def launcher_job():
                for j in jobs_by_root(sc).values():
                    if (
                        j["command"]
                        and "torch.distributed.run" in " ".join(j["command"])
                        and str(script) in j["command"]
                    ):
                        doc = job_doc(sc, j["id"])
                        ranks = [p for p in doc["processes"] if p["role"] == "rank" and p["models"]]
                        if len(ranks) == 2:
                            return j, doc
                return None

            ddp, ddp_doc = wait_for(launcher_job, 90, 0.5, what="the launcher's job with its two ranks")
            jobs = jobs_by_root(sc)
            assert plain.pid in jobs and loader.pid in jobs
            rank_pids = {p["pid"] for p in ddp_doc["processes"] if p["role"] == "rank"}
            worker_pids = {loader.pids["w0"], loader.pids["w1"]}
            # Ranks and workers belong to their jobs, never to jobs of their own.
            assert not (rank_pids | worker_pids) & set(jobs), sorted(jobs)
            assert ddp["process_count"] >= 3 and ddp["has_model"] and ddp["status"] == "CPU"
            loader_doc = job_doc(sc, jobs[loader.pid]["id"])
            roles = sorted((p["pid"], p["role"]) for p in loader_doc["processes"])
            assert roles == sorted(
                [
                    (loader.pid, "main"),
                    (loader.pids["w0"], "dataloader-worker"),
                    (loader.pids["w1"], "dataloader-worker"),
                ]
            )
            plain_doc = job_doc(sc, jobs[plain.pid]["id"])
            assert plain_doc["status"] == "CPU" and [
                m["name"] for m in plain_doc["processes"][0]["models"]
            ] == ["plain"]
            for j in (jobs[plain.pid], jobs[loader.pid], ddp):
                doc = job_doc(sc, j["id"])
                assert doc["job_id"] == j["id"] and doc["target"]["pid"] == j["root_pid"]
                assert {x["id"] for x in doc["jobs"]} >= {
                    jobs[plain.pid]["id"],
                    jobs[loader.pid]["id"],
                    ddp["id"],
                }
                assert j["user"] and j["uid"] == os.getuid() and j["alive"] and j["ended_unix_s"] is None
            # Each job's history, and an unknown job.
            code, hist = sc.get(f"{API}/history?job={ddp['id']}")
            assert code == 200 and hist["job_id"] == ddp["id"]
            assert sc.get(f"{API}/status?job=1-1")[0] == 404
            # /metrics: every job's series, told apart by job_id.
            code, metrics = sc.get("/metrics")
            text = metrics.decode() if isinstance(metrics, bytes) else str(metrics)
            for j in (jobs[plain.pid], jobs[loader.pid], ddp):
                assert f'job_id="{j["id"]}"' in text
    finally:
        stop.write_text("")
        plain.stop()
        loader.stop()


def test_a_job_started_and_ended_while_the_sidecar_runs_stays_listed_as_exited(tmp_path, fake_nvml):
    fake_nvml.write({"gpus": [gpu(0)]})
    with Sidecar(["--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
        sc.get(f"{API}/jobs")
        job = FakeJob(
            tmp_path / "j", {"main": {"payload": {"role": "main", "models": [model("late")]}}}, detach=True
        )
        try:
            found = wait_for(lambda: jobs_by_root(sc).get(job.pid), 20, what="the new job")
            assert found["alive"] and found["has_model"]
        finally:
            job.stop()
        ended = wait_for(
            lambda: (j := jobs_by_root(sc).get(job.pid)) and not j["alive"] and j,
            20,
            what="the job marked exited",
        )
        assert ended["ended_unix_s"] is not None and ended["id"] == found["id"]
        doc = job_doc(sc, found["id"])
        assert doc["target"]["alive"] is False and "target-exited" in {w["code"] for w in doc["warnings"]}


def test_a_worker_that_published_before_its_trainer_is_absorbed_and_leaves_no_run(tmp_path, fake_nvml):
    """A DataLoader worker whose probe published before its trainer's did is found as a job of its
    own; once the trainer publishes, the worker is in the trainer's job, and the run recorded for the
    worker's job is gone from the ledger (it never was a run)."""
    fake_nvml.write({"gpus": [gpu(0)]})
    with Sidecar(["--port", "0", "--interval", "0.3"], env=fake_nvml.env()) as sc:
        job = FakeJob(
            tmp_path / "w",
            {"main": {"probe": False, "children": ["worker"]}, "worker": {"payload": {"role": "worker"}}},
            detach=True,
        )
        try:
            worker = job.pids["worker"]
            alone = wait_for(lambda: jobs_by_root(sc).get(worker), 20, what="the worker found as a job")

            def run_ids() -> set[str]:
                code, body = sc.get(f"{API}/runs")
                assert code == 200, body
                return {r["job_id"] for r in body["runs"]}

            wait_for(lambda: alone["id"] in run_ids(), 20, what="the worker's job recorded as a run")
            job.update("main", {"children": ["worker"], "payload": {"role": "main", "models": [model("net")]}})
            trainer = wait_for(
                lambda: (j := jobs_by_root(sc)).get(job.pid) and worker not in j and j[job.pid],
                20,
                what="the worker's job absorbed into its trainer's",
            )
            assert worker in {p["pid"] for p in job_doc(sc, trainer["id"])["processes"]}
            wait_for(lambda: trainer["id"] in run_ids(), 20, what="the trainer's run recorded")
            assert alone["id"] not in run_ids()
        finally:
            job.stop()


def test_a_gpu_process_without_a_probe_is_found_through_nvml(tmp_path, fake_nvml):
    job = FakeJob(tmp_path / "g", {"main": {"probe": False}}, detach=True)
    try:
        fake_nvml.write(
            {"gpus": [gpu(0, util_gpu=70, processes=[{"pid": job.pid, "used_mib": 3000, "sm_util": 70}])]}
        )
        with Sidecar(["--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
            found = wait_for(lambda: jobs_by_root(sc).get(job.pid), 20, what="the GPU process as a job")
            assert found["gpus"] == [0] and not found["has_model"] and found["status"] == "GPU"
            doc = job_doc(sc, found["id"])
            assert doc["processes"][0]["gpu"][0]["mem_used_mib"] == 3000
    finally:
        job.stop()


# The sidecar as an unprivileged user: everything it imports is imported before the uid drops (the
# interpreter lives under /root, mode 0700).
AS_NOBODY = textwrap.dedent(
    f"""
    import os, sys
    import sidecar.cli.main, sidecar.poll.discovery, sidecar.poll.poller, sidecar.documents.document, sidecar.poll.collect, sidecar.verdict
    import sidecar.poll.history, sidecar.sources.redact, sidecar.common.catalogue, sidecar.documents.contract, sidecar.sources.lineage
    import sidecar.sources.proctree, sidecar.sources.segments, sidecar.sources.nvml, sidecar.sources.sysfs
    import psutil, pynvml, msgpack, encodings.idna, jsonschema
    sidecar.common.catalogue.load("en")
    os.setgroups([])
    os.setgid({NOBODY})
    os.setuid({NOBODY})
    sys.exit(sidecar.cli.main.main(sys.argv[1:]))
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the sidecar as another user")
def test_a_non_root_sidecar_shows_its_users_jobs_only(tmp_path):
    mine = FakeJob(
        tmp_path / "root-job", {"main": {"payload": {"role": "main", "models": [model("r")]}}}, detach=True
    )
    theirs = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sleep", "300"],
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: process_identity(theirs.pid), what="nobody's process")
        write_as(NOBODY, theirs.pid)  # nobody's probe segment, written by nobody

        def once(as_nobody: bool) -> dict:
            head = [sys.executable, "-c", AS_NOBODY] if as_nobody else [sys.executable, "-m", "sidecar.cli"]
            r = subprocess.run(
                [*head, "--once", "--json"],
                cwd="/",
                env=python_env(
                    {"LD_LIBRARY_PATH": "/nonexistent"}
                ),  # no driver: nobody cannot read the fake one
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        seen_by_nobody = {j["root_pid"] for j in once(True)["jobs"]["jobs"]}
        assert theirs.pid in seen_by_nobody and mine.pid not in seen_by_nobody
        seen_by_root = {j["root_pid"] for j in once(False)["jobs"]["jobs"]}
        assert {theirs.pid, mine.pid} <= seen_by_root
    finally:
        theirs.kill()
        theirs.wait()
        mine.stop()
        for path in (segment_path(theirs.pid),):
            if os.path.lexists(path):
                os.unlink(path)


def _once(*flags: str) -> subprocess.CompletedProcess:
    """`dsh-sidecar --once [flags]` without --pid, as a user runs it."""
    r = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "--once", *flags],
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r


def test_once_without_a_pid_prints_every_job_and_says_so_when_there_is_none(tmp_path):
    from sidecar.cli.summary import jobs_summary

    job = FakeJob(
        tmp_path / "o", {"main": {"payload": {"role": "main", "models": [model("once")]}}}, detach=True
    )
    try:
        r = _once()
        ident = process_identity(job.pid)
        job_id = f"{ident[0]}-{ident[1]}"
        assert f"  {job_id}" in r.stdout and f"job {job_id}:" in r.stdout and "model: once@cpu" in r.stdout
        out = json.loads(_once("--json").stdout)
        (doc,) = [d for d in out["documents"] if d["job_id"] == job_id]
        # each document as /status?job= gives it: with every job listed (docs/api.md)
        assert doc["jobs"] == out["jobs"]["jobs"] and job_id in {j["id"] for j in doc["jobs"]}
    finally:
        job.stop()
    empty = {"jobs": [], "default_job": None}
    assert "no jobs found" in jobs_summary(empty, []) and "--pid PID" in jobs_summary(empty, [])


@pytest.mark.skipif(os.geteuid() != 0, reason="root's discovery is the one that shows every user's jobs")
def test_roots_discovery_never_serves_every_users_jobs_without_a_token(fake_nvml):
    """Root's discovery lists every user's jobs (commands, working directories, models), and any user
    of the machine can connect to a loopback port: without --token it makes a token of its own and
    shows it only to whoever started it; a token given is used as given."""
    fake_nvml.write({"gpus": [gpu(0)]})
    with Sidecar(["--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
        made = sc.token
        assert made and len(made) >= 32, sc.lines
        # The last line printed is that address (issue 39 item 1): the one a person copies.
        assert sc.lines[-1].endswith(f" {sc.url}/?token={made}"), sc.lines
        # The "serving" line sends the reader to that link, not to the bare URL (which answers 401).
        serving = next(line for line in sc.lines if line.startswith("dsh-sidecar: serving "))
        assert "with its token" in serving and "open it in a browser" not in serving, serving
        for path in (f"{API}/jobs", f"{API}/status", f"{API}/history", "/metrics", "/version"):
            sc.token = None
            assert sc.get(path)[0] == 401, path  # another user, who never saw the line
            sc.token = made
        wait_for(lambda: sc.get(f"{API}/jobs")[0] == 200, 20, what="the jobs list with the token")
        sc.token = None
        assert sc.get("/healthz")[0] == 200  # liveness says nothing of anyone's jobs
    with Sidecar(
        ["--port", "0", *METRICS_AT_ONCE, "--interval", "0.3", "--token", "chosen-token"],
        env=fake_nvml.env(),
        token="chosen-token",
    ) as sc:
        assert not any("?token=chosen-token" in line for line in sc.lines)  # never printed
        serving = next(line for line in sc.lines if line.startswith("dsh-sidecar: serving "))
        assert "a token is required" in serving and "open it in a browser" not in serving, serving
        wait_for(lambda: sc.get(f"{API}/jobs")[0] == 200, 20, what="the jobs list with the chosen token")
        sc.token = "wrong"
        assert sc.get(f"{API}/jobs")[0] == 401
