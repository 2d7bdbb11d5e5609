"""Training jobs at the edges of their life, shared by the final-state tests (integration and browser)."""

from __future__ import annotations

import sys

from tests.helpers.harness import Sidecar

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


def final_document(job: str, tmp_path, grace_s: float = 5, keep: list | None = None) -> dict:
    """Run ``job`` under ``dsh-sidecar run`` and return the status once the job has exited; with
    ``keep``, the sidecar is appended to it and left serving (for --grace seconds)."""
    script = tmp_path / "job.py"
    script.write_text(job)
    # The probe publishes every 5 s: counts made since the last publish reach the sidecar only
    # through the publish the probe makes at exit.
    env = {"DSH_PROBE_INTERVAL_S": "5"}
    args = ["run", "--interval", "0.1", "--grace", str(grace_s), "--port", "0", "--", sys.executable, str(script)]
    sc = Sidecar(args, env=env)
    try:
        return sc.wait_status(lambda d: not d["target"]["alive"], timeout_s=90, what="the job's exit")
    finally:
        if keep is None:
            sc.stop()
        else:
            keep.append(sc)
