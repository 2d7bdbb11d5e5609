"""Issue 25 item 1: the final state keeps every probed process of the job.

An ``mp.spawn`` job (pytorch/examples imagenet ``--multiprocessing-distributed``) registers its model
in the ranks only; the ranks exit, then the parent a moment later. A hogwild job's children train
and exit while the parent goes on. The last state must say what ran: the ranks or children, their
models, devices and final forward counts (published at exit, not one publish interval late).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from probe_wire import remove_segment
from tests.helpers.exit_jobs import HOGWILD_JOB, SPAWN_JOB, final_document
from tests.helpers.harness import REPO, codes, python_env
from tests.helpers.sidecar_cli import cli

pytest.importorskip("torch")

pytestmark = pytest.mark.slow


def _where_finals_went(pids: list[int]) -> str:
    """What a test missing a rank's final publish needs to tell its causes apart: the segments
    /dev/shm holds under those pids (gone: removed, or never kept), and the sidecars running beside
    the test (one left by an earlier test sweeps dead writers' segments)."""
    names = sorted(n for n in os.listdir("/dev/shm") if any(n.split(".")[1:2] == [str(pid)] for pid in pids))
    ps = subprocess.run(["ps", "-eo", "pid,ppid,etimes,args"], capture_output=True, text=True).stdout
    sidecars = [line.strip()[:160] for line in ps.splitlines() if "sidecar.cli" in line or "dsh-sidecar" in line]
    return f"segments {names}, sidecars running {sidecars}"


def probed(doc: dict) -> list[dict]:
    return [p for p in doc["processes"] if p["models"]]


def test_the_ranks_of_an_mp_spawn_job_stay_in_its_final_state(tmp_path):
    doc = final_document(SPAWN_JOB, tmp_path)
    assert "no-probe" not in codes(doc) and doc["status"] == "CPU", (doc["status"], doc["message"])
    ranks = sorted(probed(doc), key=lambda p: p["models"][0]["forward_calls"])
    assert [p["models"][0]["forward_calls"] for p in ranks] == [74, 106]
    assert all(p["exited"] and p["models"][0]["device"] == "cpu" for p in ranks)
    target = next(p for p in doc["processes"] if p["pid"] == doc["target"]["pid"])
    assert not target["models"]


def test_the_children_of_a_hogwild_job_stay_in_its_final_state(tmp_path):
    doc = final_document(HOGWILD_JOB, tmp_path)
    assert "no-probe" not in codes(doc) and doc["status"] == "CPU", (doc["status"], doc["message"])
    by_role = {}
    for p in probed(doc):
        by_role.setdefault(p["role"], []).append(p["models"][0]["forward_calls"])
    assert sorted(by_role.get("child", [])) == [40, 41], by_role
    assert by_role.get("main") == [7], by_role
    children = [p for p in probed(doc) if p["role"] == "child"]
    assert all(p["exited"] for p in children)


def test_the_final_state_keeps_no_unprobed_helper(tmp_path):
    """Issue 39 item 19: the final state kept the job's unprobed helpers (multiprocessing's resource
    tracker here; a torchrun agent under a launcher script) with no role. What stays: the target,
    the processes that ran the probe, and any that used a GPU."""
    doc = final_document(SPAWN_JOB, tmp_path)
    target = doc["target"]["pid"]
    others = [(p["pid"], p["name"], p["role"]) for p in doc["processes"] if p["pid"] != target]
    assert others and all(role for _, _, role in others), others
    assert len(probed(doc)) == 2


LAUNCHER_JOB = """
import os, subprocess, sys, time
RANK = '''
import os, torch, probe
model = probe.register(torch.nn.Linear(4, 2), name="rank-model")
for _ in range(5 + int(os.environ["RANK"])):
    model(torch.ones(2, 4))
'''
ranks = []
for r in (0, 1):
    ranks.append(subprocess.Popen([sys.executable, "-c", RANK], env={**os.environ, "RANK": str(r)}))
    if os.environ.get("STAGGERED"):  # rank 1 starts (and sweeps) once rank 0 has ended
        ranks[-1].wait()
print("ranks", " ".join(str(p.pid) for p in ranks), flush=True)
for p in ranks:
    p.wait()
print("ranks done", flush=True)
time.sleep(60)  # a launcher (torchrun's agent) outlives its ranks
"""


@pytest.mark.parametrize(("how", "staggered"), [("pid", False), ("discovery", False), ("pid", True)])
def test_once_after_the_ranks_exit_while_the_launcher_lives_shows_their_final_state(tmp_path, how, staggered):
    """Issue 39 item 16: `--once` run just after the ranks of a launcher (torchrun's agent, without
    the probe) exited while the launcher lives on said UNKNOWN and no-probe, though the ranks' final
    publishes were there; its first poll's cleanup then removed them. In discovery the launcher is no
    candidate (neither probed nor on a GPU) and the first poll's sweep of dead writers' segments ran
    before the job's poll: the ranks' closed segments now name it, and that sweep spares them.
    ``staggered``: rank 1 starts once rank 0 has ended, and its probe's start sweep once removed
    rank 0's final publish (a dead writer's segment): it spares one of a moment ago now."""
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER_JOB)
    env = python_env({"DSH_PROBE_INTERVAL_S": "5", **({"STAGGERED": "1"} if staggered else {})})
    job = subprocess.Popen([sys.executable, str(script)], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    ranks: list[int] = []
    try:
        assert job.stdout is not None
        ranks = [int(p) for p in job.stdout.readline().split()[1:]]
        assert job.stdout.readline().strip() == "ranks done"
        before = _where_finals_went(ranks)
        r = cli(*(["--pid", str(job.pid)] if how == "pid" else []), "--once", "--json", env=env)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        if how == "discovery":
            docs = [d for d in doc["documents"] if d["target"]["pid"] == job.pid]
            assert len(docs) == 1, [(d["target"]["pid"], d["message"]) for d in doc["documents"]]
            doc = docs[0]
        assert "no-probe" not in codes(doc) and doc["status"] == "CPU", (doc["status"], doc["message"], codes(doc))
        kept = {p["pid"]: p for p in doc["processes"] if p["models"]}
        assert sorted(kept) == sorted(ranks), f"before: {before}; after: {_where_finals_went(ranks)}"
        for pid, rank in zip(ranks, (0, 1)):
            p = kept[pid]
            assert p["exited"] and p["ppid"] == job.pid
            assert [(m["name"], m["forward_calls"]) for m in p["models"]] == [("rank-model", 5 + rank)]
    finally:
        job.kill()
        job.wait()
        for pid in ranks:  # their final publishes, left for a monitor: ours to remove
            remove_segment(pid)
