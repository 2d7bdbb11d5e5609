"""All ranks of a real two-rank gloo job (tests/helpers/gloo_job.py) publish one job key, however
it was launched: torchrun with a static rendezvous (its run id is "none": the launch hash of the
master and the agent) and mp.spawn (no master in the environment: the hash of the spawning parent).
Two runs of the same command are two keys. torchrun --standalone (its random run id, source
"torchelastic") is tests/integration/test_multirank.py's job: its ranks agree on it there."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from probe_wire import read_segment
from tests.helpers.gloo_job import DDP_JOB
from tests.helpers.harness import REPO, python_env, wait_for

pytestmark = pytest.mark.slow
pytest.importorskip("torch")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launcher(kind: str) -> list[str]:
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    if kind == "torchrun-static":
        return [*run, "--nnodes=1", "--master-addr=127.0.0.1", f"--master-port={_free_port()}"]
    return [sys.executable]


def _rank_payloads(launcher: subprocess.Popen) -> list[dict] | None:
    """Both ranks' payloads once both have joined the process group, else None."""
    out = []
    for child in psutil.Process(launcher.pid).children(recursive=True):
        read = read_segment(child.pid)
        if read.payload is not None and read.payload.get("role") == "rank":
            out.append(read.payload)
    return out if len(out) == 2 and all(p["dist_backend"] for p in out) else None


def _run_keys(tmp_path, kind: str) -> list[tuple]:
    """(job_key, job_key_source, rank, node_rank) of each rank of one run, once both publish."""
    script = tmp_path / "train_ddp.py"
    script.write_text(DDP_JOB)
    # A folder of each run's own: the second run of a test must not find the first's stop file (its
    # ranks would leave after one step, before both were seen) nor its file store.
    run = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=tmp_path))
    stop = run / "stop"
    env = python_env({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DSH_PROBE_INTERVAL_S": "0.25"})
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "JOBSET_NAME", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    launcher = subprocess.Popen(
        [*_launcher(kind), str(script), str(run / "store"), str(stop)],
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        payloads = wait_for(
            lambda: _rank_payloads(launcher),
            timeout_s=90,
            interval_s=0.2,
            what=f"two initialised ranks of {kind}",
        )
        return sorted((p["job_key"], p["job_key_source"], p["rank"], p["node_rank"]) for p in payloads)
    finally:
        stop.write_text("")
        try:
            launcher.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


@pytest.mark.parametrize(
    ("kind", "source"),
    [("torchrun-static", "launch"), ("spawn", "launch")],
)
def test_all_local_ranks_agree_on_the_job_key(tmp_path, kind, source):
    first = _run_keys(tmp_path, kind)
    keys = {k for k, *_ in first}
    assert len(keys) == 1 and None not in keys, first
    assert [(s, r) for _, s, r, _ in first] == [(source, 0), (source, 1)]
    if kind.startswith("torchrun"):
        assert [n for *_, n in first] == [0, 0]  # GROUP_RANK: one node
    # The same command again is another job.
    again = _run_keys(tmp_path, kind)
    assert {k for k, *_ in again} != keys
