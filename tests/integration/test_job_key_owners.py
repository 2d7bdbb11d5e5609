"""One user cannot join another user's job (issue 37 item 5). Two real users on one node: root runs a
real two-rank gloo job (tests/helpers/straggler_job.py) under torchrun with the rendezvous id
`run-42`; uid 65533 runs one CPU process that imports the probe and sets the same run id, RANK=1 and
WORLD_SIZE=8. A root discovery sidecar lists them as two jobs, each with its owner's uid beside the
key (the status documents' `distributed.uid`, `dsh_job_info`'s `uid`), and the cluster view that a
real Prometheus feeds keys a run by (job_key, uid): the victim's run keeps its status, world size,
ranks and forward rates, and the other user's rank is a job of its own. Keyed by job_key alone the
two merged: world size 8, `ranks-missing`, rank 1's forward rate the sum of both processes'."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakenvml import gpu
from tests.helpers.harness import API, METRICS_AT_ONCE, Sidecar, python_env, wait_for
from tests.helpers.other_users import STRANGER
from tests.helpers.prometheus import NEEDS_PROMETHEUS, Prometheus, free_port, shipped_config
from tests.helpers.sidecar_cli import cli
from tests.helpers.straggler_job import STRAGGLER_JOB

pytestmark = [
    *NEEDS_PROMETHEUS,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user"),
]
pytest.importorskip("torch")

TOKEN = "job-key-owners-token-0123456789"
RUN_ID = "run-42"
NODE = "node-a"

# The other user's process. Its uid drops before the probe starts (register), so its segment is its
# own user's file; what it imports is imported before, as root: the interpreter lives under /root
# (mode 0700), where uid 65533 cannot read, so `setpriv ... python` cannot start it
# (tests/integration/test_discovery.py drops its uid the same way).
# It forwards faster than the victim's ranks, so a merged rank 1 would show a rate far from rank 0's.
ATTACKER = textwrap.dedent(
    f"""
    import os, sys, threading, time
    import torch
    import probe, probe._state, probe._publisher, probe._models, probe.instrument, probe.facts
    torch.set_num_threads(1)
    net, x = torch.nn.Linear(16, 4), torch.randn(8, 16)
    net(x)  # whatever torch loads on a first forward, loaded as root
    os.setgroups([])
    os.setgid({STRANGER})
    os.setuid({STRANGER})
    net = probe.register(net)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print(os.getuid(), flush=True)
    while not done.is_set():
        net(x)
        done.wait(0.005)  # the job's own pace: about 150 forwards a second
    """
)


def _cluster_json(prom: Prometheus) -> dict:
    r = cli("cluster", "--prometheus", prom.url, "--json", "--job", RUN_ID)
    assert r.returncode in (0, 1), (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout)


def _runs(sc: Sidecar) -> dict[int, dict] | None:
    """uid -> the listed job of `run-42` of that owner, once both owners' ranks are seen."""
    code, body = sc.get(f"{API}/jobs")
    if code != 200:
        return None
    runs = {j["uid"]: j for j in body["jobs"] if (j["distributed"] or {}).get("job_key") == RUN_ID}
    ok = (runs.get(0) or {}).get("distributed", {}).get("ranks") == [0, 1] and STRANGER in runs
    return runs if ok else None


def _job_info(sc: Sidecar) -> list[dict[str, str]]:
    code, body = sc.get("/metrics")
    assert code == 200, body
    text = body.decode() if isinstance(body, bytes) else body
    return [
        s.labels
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "dsh_job_info" and s.labels.get("job_key") == RUN_ID
    ]


def _forward_rates(prom: Prometheus) -> dict[tuple[str, str], float]:
    """(job_id, rank) -> the forward rate Prometheus has for it (the cluster view's own query)."""
    found = prom.query("sum without (model) (rate(dsh_model_forward_calls_total[1m]))")
    return {(labels.get("job_id", ""), labels.get("rank", "")): v for labels, v in found if v > 0}


def _rate_at(prom: Prometheus, job_id: str, rank: str, at_unix_s: float) -> float:
    """One job's rank's forward rate alone, at the instant the cluster view was evaluated at (its query,
    its rounding)."""
    series = f'dsh_model_forward_calls_total{{job_id="{job_id}",rank="{rank}"}}'
    data = prom.api("query", query=f"sum without (model) (rate({series}[1m]))", time=f"{at_unix_s:.3f}")
    (found,) = data["result"]
    return round(float(found["value"][1]), 2)


def _start_victim(tmp_path) -> subprocess.Popen:
    """torchrun, one node, two ranks, rendezvous id `run-42`: torchrun gives its ranks
    TORCHELASTIC_RUN_ID=run-42 (the probe's job key, source torchelastic)."""
    script = tmp_path / "ddp.py"
    script.write_text(STRAGGLER_JOB)
    env = python_env({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DSH_PROBE_INTERVAL_S": "0.25"})
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "JOBSET_NAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        env.pop(name, None)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2"]
    launcher += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id={RUN_ID}"]
    with open(tmp_path / "victim.log", "wb") as log:
        return subprocess.Popen(
            [*launcher, str(script), str(tmp_path / "store"), str(tmp_path / "stop"), "2", "-1", "none", "0"],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _start_attacker() -> subprocess.Popen:
    env = python_env({"OMP_NUM_THREADS": "1", "DSH_PROBE_INTERVAL_S": "0.25"})
    env.update({"TORCHELASTIC_RUN_ID": RUN_ID, "RANK": "1", "WORLD_SIZE": "8"})
    env.pop("LOCAL_RANK", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", ATTACKER], env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == str(STRANGER), "the other user's process did not drop to its uid"
    return proc


def _stop(victim, attacker, tmp_path) -> None:
    (tmp_path / "stop").touch()
    if attacker is not None:
        attacker.stdin.close()
    for proc in (p for p in (victim, attacker) if p is not None):
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            if proc is victim:
                os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its ranks
            else:
                proc.kill()
            proc.wait()


def test_another_users_process_under_the_victims_run_id_is_a_job_of_its_own(tmp_path, fake_nvml):
    fake_nvml.write({"gpus": [gpu(0)]})
    victim = attacker = prom = None
    try:
        victim = _start_victim(tmp_path)
        attacker = _start_attacker()
        args = ["--port", "0", *METRICS_AT_ONCE, "--interval", "0.5", "--token", TOKEN]
        with Sidecar(args, env=fake_nvml.env(), token=TOKEN) as sc:
            runs = wait_for(lambda: _runs(sc), 90, 0.5, "both owners' processes of run-42 listed")
            mine, theirs = runs[0], runs[STRANGER]
            # On the node: two jobs (two roots, two owners), each with its owner beside the key.
            assert mine["id"] != theirs["id"] and mine["root_pid"] == victim.pid and theirs["root_pid"] == attacker.pid
            assert (mine["status"], mine["distributed"]["world_size"], mine["distributed"]["uid"]) == ("CPU", 2, 0)
            assert (theirs["distributed"]["ranks"], theirs["distributed"]["world_size"]) == ([1], 8)
            assert theirs["distributed"]["uid"] == STRANGER
            info = wait_for(lambda: len(_job_info(sc)) == 2 and _job_info(sc), 10, 0.5, "both jobs on /metrics")
            assert sorted((i["job_id"], i["uid"]) for i in info) == sorted(
                [(mine["id"], "0"), (theirs["id"], str(STRANGER))]
            )

            # Across nodes: what Prometheus scraped, as `dsh-sidecar cluster` shows it.
            port = int(sc.url.rsplit(":", 1)[1])
            prom = Prometheus(shipped_config(tmp_path, [(port, NODE)], TOKEN), tmp_path)
            wanted = {(mine["id"], "0"), (mine["id"], "1"), (theirs["id"], "1")}
            wait_for(lambda: wanted <= set(_forward_rates(prom)), 60, 1.0, "every rank's forward rate in Prometheus")
            doc = _cluster_json(prom)
        by_owner = {j["uid"]: j for j in doc["jobs"]}
        assert sorted((j["job_key"], j["uid"]) for j in doc["jobs"]) == [(RUN_ID, 0), (RUN_ID, STRANGER)], doc["jobs"]
        run = by_owner[0]
        assert (run["status"], run["world_size"], run["nodes"]) == ("CPU", 2, [NODE]), run
        assert "ranks-missing" not in [w["code"] for w in run["warnings"]], run["warnings"]
        assert [(r["rank"], r["job_id"]) for r in run["ranks"]] == [(0, mine["id"]), (1, mine["id"])]
        other = by_owner[STRANGER]
        assert (other["world_size"], [(r["rank"], r["job_id"]) for r in other["ranks"]]) == (8, [(1, theirs["id"])])
        # Each rank 1's forward rate is its own process's, never the sum of both (keyed by job_key
        # alone, the victim's rank 1 showed its rate plus the other user's).
        at = doc["time_unix_s"]
        assert run["ranks"][1]["forward_rate_per_s"] == _rate_at(prom, mine["id"], "1", at) > 0, run["ranks"]
        assert other["ranks"][0]["forward_rate_per_s"] == _rate_at(prom, theirs["id"], "1", at) > 0, other["ranks"]
    finally:
        _stop(victim, attacker, tmp_path)
        if prom is not None:
            prom.stop()
