"""The job key the probe publishes (probe/_distributed.py), from the environments the launchers
make: torchrun's run id (its default "none" ignored), Slurm's job and step, a JobSet's pod, and the
hash of what the ranks share when none of those names the job."""

from __future__ import annotations

import os

import pytest

from hostfs.procid import process_identity, process_parent
from probe import _distributed

TORCHRUN_STATIC = {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def key(env: dict, is_rank: bool = True, hostname: str | None = "node-a") -> tuple:
    return _distributed.job_key(env, is_rank, hostname)


def test_torchrun_run_id_names_the_job_on_every_node():
    env = {"TORCHELASTIC_RUN_ID": "exp-42", "SLURM_JOB_ID": "7", "MASTER_ADDR": "a", "MASTER_PORT": "1"}
    assert key(env) == ("exp-42", "torchelastic")
    assert key(env, is_rank=False) == ("exp-42", "torchelastic")  # any process of the job


@pytest.mark.parametrize("run_id", ["none", "", "  "])
def test_torchrun_default_run_id_is_no_name(run_id):
    assert key({"TORCHELASTIC_RUN_ID": run_id, "SLURM_JOB_ID": "1234"}) == ("1234", "slurm")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SLURM_JOB_ID": "1234"}, "1234"),
        ({"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0"}, "1234.0"),
        ({"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "2", "SLURM_CLUSTER_NAME": "alps"}, "alps/1234.2"),
    ],
)
def test_slurm_job_and_step(env, expected):
    assert key(env) == (expected, "slurm")
    assert key(env, is_rank=False) == (expected, "slurm")


def test_jobset_pod_names_the_job_with_its_namespace():
    env = {"JOBSET_NAME": "llm-pretrain", "KUBERNETES_SERVICE_HOST": "10.96.0.1", "POD_NAMESPACE": "research"}
    assert key(env) == ("research/llm-pretrain", "pod")
    # Outside Kubernetes the variable is just a variable.
    assert key({"JOBSET_NAME": "x", **TORCHRUN_STATIC, "GROUP_WORLD_SIZE": "2"})[1] == "launch"


def test_nodes_of_one_multi_node_launch_agree_whoever_launched_them():
    # Node 0 and node 1 of one static torchrun: other hosts, other launchers, the same master.
    node0 = {**TORCHRUN_STATIC, "GROUP_WORLD_SIZE": "2", "GROUP_RANK": "0"}
    node1 = {**TORCHRUN_STATIC, "GROUP_WORLD_SIZE": "2", "GROUP_RANK": "1"}
    k0, k1 = key(node0, hostname="node-a"), key(node1, hostname="node-b")
    assert k0 == k1 and k0[1] == "launch" and len(k0[0]) == 16
    # WORLD_SIZE over LOCAL_WORLD_SIZE says the same without GROUP_WORLD_SIZE (a DataLoader worker too).
    by_sizes = {**TORCHRUN_STATIC, "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}
    assert key(by_sizes, is_rank=False) == k0
    # Another master (another job running at the same time) is another key.
    assert key({**node0, "MASTER_PORT": "29501"}) != k0


def test_one_node_launch_is_keyed_by_its_launcher():
    env = {**TORCHRUN_STATIC, "GROUP_WORLD_SIZE": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    k, source = key(env)
    assert source == "launch"
    assert key(env, hostname="node-b")[0] != k  # another host's launcher of the same pid
    # A process that is no rank (a DataLoader worker: its parent is its rank) names no launch key.
    assert key(env, is_rank=False) == (None, None)
    assert key({}, is_rank=False) == (None, None)
    # mp.spawn without a master: the parent alone.
    assert key({}, is_rank=True)[1] == "launch"


def test_process_parent_is_the_parents_identity():
    assert process_parent(os.getpid()) == process_identity(os.getppid())
    assert process_parent(2**22 + 12345) is None


def test_node_rank_and_restarts():
    d = _distributed.distributed(True, "h", {"GROUP_RANK": "3", "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_RUN_ID": "r"})
    assert d == {"job_key": "r", "job_key_source": "torchelastic", "node_rank": 3, "restart_count": 2}
    d = _distributed.distributed(False, "h", {"SLURM_NODEID": "1", "SLURM_RESTART_COUNT": "x"})
    assert (d["node_rank"], d["restart_count"]) == (1, None)
    assert _distributed.distributed(False, "h", {}) == {
        "job_key": None, "job_key_source": None, "node_rank": None, "restart_count": None
    }


def test_keys_are_bounded():
    k, _ = key({"TORCHELASTIC_RUN_ID": "x" * 5000})
    assert len(k) == _distributed.KEY_MAX_CHARS
