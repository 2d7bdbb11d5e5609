"""A job's placement from its processes' payloads (sidecar/poll/placement.py): the ranks' key first,
the most common key when processes disagree, what an older probe's payload (no key) still gives,
the last answer kept once the ranks are gone, the run's owner beside its key; ProcessPods on
processes in no pod."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

from hostfs.procid import process_start_ticks
from probe_wire.records import ProbePayload
from sidecar.poll.placement import Placement, distributed_facts
from sidecar.sources.kubelet.lookup import PodLookup, ProcessPods
from tests.helpers.records import record_of


def payload(role: str, rank: int | None, key: str | None = "k1", **over) -> ProbePayload:
    """A process's payload as the segment source hands it up."""
    fields = {
        "role": role, "rank": rank, "world_size": 4, "hostname": "node-a", "job_key": key,
        "job_key_source": "launch" if key else None, "node_rank": 1, "restart_count": 0, **over,
    }
    return record_of(**fields)


def test_ranks_name_the_run_and_workers_follow():
    found = distributed_facts([
        payload("main", None, key=None),
        payload("rank", 3),
        payload("rank", 2, restart_count=2),
        payload("dataloader-worker", 2, key=None),
    ])
    assert (found.job_key, found.job_key_source, found.world_size, found.node_rank) == ("k1", "launch", 4, 1)
    assert (found.restart_count, found.hostname, found.ranks) == (2, "node-a", (2, 3))


def test_disagreeing_processes_take_the_most_common_key_then_the_lowest_rank():
    assert distributed_facts([payload("rank", 1, "b"), payload("rank", 0, "a"), payload("rank", 2, "b")]).job_key == "b"
    assert distributed_facts([payload("rank", 1, "b"), payload("rank", 0, "a")]).job_key == "a"


def test_a_plain_job_is_no_run_and_an_old_probe_s_rank_is_one_without_key():
    assert distributed_facts([payload("main", None, key=None)]) is None
    assert distributed_facts([]) is None
    # A payload from before job_key: read as None.
    old = record_of(role="rank", rank=0, world_size=2, drop=("job_key", "job_key_source", "node_rank", "restart_count"))
    found = distributed_facts([old])
    assert (found.job_key, found.world_size, found.ranks) == (None, 2, (0,))
    # A Slurm job that is no rank still names its run.
    slurm = distributed_facts([payload("main", None, "123.0", job_key_source="slurm")])
    assert (slurm.job_key, slurm.job_key_source, slurm.ranks) == ("123.0", "slurm", ())


def test_the_last_placement_stays_once_the_ranks_are_gone():
    def tree(*pids):
        return SimpleNamespace(processes=[SimpleNamespace(pid=p, start_ticks=1) for p in pids], target_alive=True)

    facts = SimpleNamespace(processes=(), gpus=())
    place = Placement(None)
    reads = {11: SimpleNamespace(payload=payload("rank", 0)), 12: SimpleNamespace(payload=payload("rank", 1))}
    first, pod = place.update(tree(10, 11, 12), reads, facts)
    assert first["job_key"] == "k1" and first["ranks"] == [0, 1] and pod is None
    assert place.update(tree(10), {}, facts)[0] == first


def test_the_same_payloads_give_the_same_objects_and_any_change_new_ones():
    """Made again only when a payload, the owner or the pod changed: otherwise the last poll's
    document objects (never changed once made) serve again, equal to what a fresh Placement makes."""
    tree = SimpleNamespace(processes=[SimpleNamespace(pid=p, start_ticks=1) for p in (10, 11)], target_alive=True)
    facts = SimpleNamespace(processes=(), gpus=())
    place = Placement(None)
    reads = {10: SimpleNamespace(payload=payload("rank", 0)), 11: SimpleNamespace(payload=payload("rank", 1))}
    first = place.update(tree, reads, facts, 1000)
    assert place.update(tree, dict(reads), facts, 1000) is first
    assert Placement(None).update(tree, reads, facts, 1000) == first
    # A republished payload (another object) with another key; then the owner learnt afresh.
    reads[11] = SimpleNamespace(payload=payload("rank", 1, "k2"))
    reads[10] = SimpleNamespace(payload=payload("rank", 0, "k2"))
    second = place.update(tree, reads, facts, 1000)
    assert second[0]["job_key"] == "k2" and second == Placement(None).update(tree, reads, facts, 1000)
    third = place.update(tree, reads, facts, 1001)
    assert third[0]["uid"] == 1001 and third[0]["job_key"] == "k2"


def test_the_run_s_key_carries_its_owner_which_no_process_chooses():
    """Any user can set TORCHELASTIC_RUN_ID: the key is the run's with the uid of the job's root (what
    the cluster view and `dsh_job_info` key a run on), kept once known."""
    tree = SimpleNamespace(processes=[SimpleNamespace(pid=10, start_ticks=1)], target_alive=True)
    facts = SimpleNamespace(processes=(), gpus=())
    place = Placement(None)
    run, _ = place.update(tree, {10: SimpleNamespace(payload=payload("rank", 1, "run-42"))}, facts, 65533)
    assert (run["job_key"], run["uid"], run["ranks"]) == ("run-42", 65533, [1])
    assert place.update(tree, {}, facts, None)[0]["uid"] == 65533
    unknown, _ = Placement(None).update(tree, {10: SimpleNamespace(payload=payload("rank", 0))}, facts)
    assert unknown["uid"] is None  # the root's owner unread (gone before it was): no uid, never a guess


def test_the_pod_lookup_is_handed_the_uuids_of_the_gpus_the_job_uses() -> None:
    """Made as the lookup reads them (a job in no pod never does): each GPU a process of the job is
    listed on, in the GPUs' order, once; none without a UUID."""
    from sidecar.poll.placement import _job_gpu_uuids
    from sidecar.verdict import Facts, GpuFacts, ProcessFacts, ProcGpu

    def proc(pid: int, *gpus: int) -> ProcessFacts:
        return ProcessFacts(pid=pid, ppid=1, depth=1, name="python", gpu=tuple(ProcGpu(i, 10.0, 5) for i in gpus))

    gpus = (GpuFacts(0, uuid="GPU-a"), GpuFacts(1, uuid="GPU-b"), GpuFacts(2, uuid=None), GpuFacts(3, uuid="GPU-d"))
    facts = Facts(target_pid=1, processes=(proc(10, 3, 0), proc(11, 3), proc(12, 2), proc(13)), gpus=gpus)
    assert list(_job_gpu_uuids(facts)) == ["GPU-a", "GPU-d"]
    assert list(_job_gpu_uuids(Facts(target_pid=1, gpus=gpus))) == []


def test_process_pods_of_processes_in_no_pod(tmp_path):
    pods = ProcessPods(PodLookup(pods_url="", socket_path=str(tmp_path / "absent.sock")), max_processes=2)
    children = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) for _ in range(3)]
    try:
        for c in children:
            assert pods.pod_of(c.pid, process_start_ticks(c.pid)) is None
        assert len(pods._cgroups) == 2  # bounded: the oldest identity forgotten
        assert pods.pod_of(os.getpid(), process_start_ticks(os.getpid())) is None
        assert pods.pod_of(2**22 + 999, None) is None  # gone: no pod, no error
    finally:
        for c in children:
            c.stdin.close()
            c.wait()
