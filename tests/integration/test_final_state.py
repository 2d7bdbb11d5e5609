"""Issue 25 item 1: the final state keeps every probed process of the job.

An ``mp.spawn`` job (pytorch/examples imagenet ``--multiprocessing-distributed``) registers its model
in the ranks only; the ranks exit, then the parent a moment later. A hogwild job's children train
and exit while the parent goes on. The last state must say what ran: the ranks or children, their
models, devices and final forward counts (published at exit, not one publish interval late).
"""

from __future__ import annotations

import sys

import pytest

from tests.helpers.harness import Sidecar, codes

pytest.importorskip("torch")

SPAWN_JOB = """
import sys, time
import torch, torch.multiprocessing as mp

def main_worker(rank, forwards):
    import probe
    model = probe.register(torch.nn.Linear(4, 2), name=f"rank-model")
    for _ in range(forwards[rank]):
        model(torch.ones(2, 4))
    time.sleep(0.6)  # seen alive by at least one poll
    for _ in range(forwards[rank]):  # the last of them after the probe's last periodic publish
        model(torch.ones(2, 4))
    print(f"rank {rank} made {2 * forwards[rank]} forwards", flush=True)

if __name__ == "__main__":
    mp.spawn(main_worker, nprocs=2, args=([37, 53],))
    time.sleep(0.2)  # the parent outlives its ranks, as imagenet's main() does
"""

HOGWILD_JOB = """
import time
import torch, torch.multiprocessing as mp
import probe

def train(rank, model, n):
    for _ in range(n):
        model(torch.ones(2, 4))
    time.sleep(0.6)

if __name__ == "__main__":
    model = probe.register(torch.nn.Linear(4, 2), name="hogwild-net")
    model.share_memory()
    ctx = mp.get_context("fork")
    children = [ctx.Process(target=train, args=(r, model, 40 + r)) for r in range(2)]
    for c in children:
        c.start()
    for c in children:
        c.join()
    with torch.no_grad():  # the parent tests the trained model
        for _ in range(7):
            model(torch.ones(2, 4))
    time.sleep(0.3)
"""


def final_document(job: str, tmp_path) -> dict:
    script = tmp_path / "job.py"
    script.write_text(job)
    # The probe publishes every 5 s: counts made since the last publish reach the sidecar only
    # through the publish the probe makes at exit.
    env = {"DSH_PROBE_INTERVAL_S": "5"}
    args = ["run", "--interval", "0.1", "--grace", "5", "--port", "0", "--", sys.executable, str(script)]
    with Sidecar(args, env=env) as sc:
        return sc.wait_status(lambda d: not d["target"]["alive"], timeout_s=90, what="the job's exit")


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
