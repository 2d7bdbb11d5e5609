"""Where a job runs: its distributed identity (the key its processes publish, its owner, its ranks
on this node, the node's rank) and its Kubernetes pod. The status document's ``distributed`` and
``pod`` objects, the jobs list's too, and the labels of ``dsh_job_info``.

Both are the job's, not a process's: the key and the node come from its probed processes' payloads
(the ranks' first: a DataLoader worker names no launch key), the pod from its root's cgroup
(a job's tree is one container's). The key names a run only with its owner, the real uid of the
job's root: any user can set TORCHELASTIC_RUN_ID to another's run id, so another user's process
under the same key is another job (a tree of its own here, a job of its own across nodes:
sidecar/documents/cluster.py). Each poll's answer is kept when the next one has none (the
ranks of an mp.spawn job exit before their launcher; a job that has ended still shows where it ran).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from operator import is_
from typing import Any

from probe_wire.records import ProbePayload
from sidecar.documents.bounds import MAX_ID_CHARS, MAX_TEXT_CHARS, clip_opt
from sidecar.sources.kubelet.lookup import TRUSTED_SOURCES, ProcessPods
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import ProbeRead
from sidecar.verdict import Facts

# The ranks a job's `distributed` lists (those on this node: a node runs at most a few dozen).
MAX_RANKS_SHOWN = 64


@dataclass(frozen=True, slots=True)
class DistributedFacts:
    job_key: str | None  # what every process of the job publishes alike, on every node
    job_key_source: str | None  # torchelastic, slurm, pod, launch
    world_size: int | None
    node_rank: int | None
    restart_count: int | None
    hostname: str | None
    ranks: tuple[int, ...]  # the global ranks of its processes on this node, ascending


@dataclass(frozen=True, slots=True)
class PodFacts:
    namespace: str | None
    pod: str | None
    uid: str
    container: str | None
    container_id: str | None  # 64 hex digits, from the cgroup (named or not)
    source: str | None  # kubelet, pod-resources, self-reported, cgroup (lookup.py's SOURCE_*)


def distributed_facts(payloads: list[ProbePayload]) -> DistributedFacts | None:
    """The job's distributed identity from its processes' payloads; None when none of them is a
    rank or names a job key."""
    ranks = [p for p in payloads if p.role == "rank"]
    keyed = [p for p in (ranks or payloads) if p.job_key is not None] or [
        p for p in payloads if p.job_key is not None
    ]
    if not ranks and not keyed:
        return None
    key = source = None
    if keyed:
        # Processes of one tree that disagree (a hand-made environment): the most common key,
        # the lowest rank's among equals.
        votes = Counter(p.job_key for p in keyed)
        key = max(votes, key=lambda k: (votes[k], -min(_rank(p) for p in keyed if p.job_key == k)))
        source = next(p.job_key_source for p in keyed if p.job_key == key)
    about = ranks or keyed
    return DistributedFacts(
        clip_opt(key, MAX_TEXT_CHARS),
        clip_opt(source, MAX_ID_CHARS),
        next((p.world_size for p in about if p.world_size is not None), None),
        next((p.node_rank for p in about if p.node_rank is not None), None),
        max((p.restart_count for p in about if p.restart_count is not None), default=None),
        clip_opt(next((p.hostname for p in about if p.hostname is not None), None)),
        tuple(sorted({p.rank for p in ranks if p.rank is not None}))[:MAX_RANKS_SHOWN],
    )


def _rank(p: ProbePayload) -> int:
    return p.rank if p.rank is not None else 1 << 62


class Placement:
    """One job's placement, kept between polls. ``pods``: shared by the jobs of one sidecar (one
    PodLookup, so one kubelet call per interval for all of them); None looks no pod up."""

    def __init__(self, pods: ProcessPods | None = None) -> None:
        self.pods = pods
        self.distributed: DistributedFacts | None = None
        self.pod: PodFacts | None = None
        self.owner_uid: int | None = None  # the job's root's real uid, once known
        self._pod_of: tuple[int, int | None] | None = None  # the root whose pod was found
        # The payloads `distributed` was last made of (most polls: the very same objects again), and
        # the document objects last made of (distributed, owner_uid, pod): made again only on a change.
        self._payloads: list[ProbePayload] = []
        self._shown: tuple[
            DistributedFacts | None,
            int | None,
            PodFacts | None,
            tuple[dict[str, Any] | None, dict[str, Any] | None],
        ] = (None, None, None, (None, None))

    def update(
        self, tree: TreeSnapshot, reads: dict[int, ProbeRead], facts: Facts, owner_uid: int | None = None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """This poll's (distributed, pod) document objects (contract: Distributed, Pod). ``owner_uid``:
        the real uid of the job's root (None: unknown), the half of the run's key that no process
        of the job chooses."""
        if owner_uid is not None:
            self.owner_uid = owner_uid
        payloads = [
            r.payload for p in tree.processes if (r := reads.get(p.pid)) is not None and r.payload is not None
        ]
        if len(payloads) != len(self._payloads) or not all(map(is_, payloads, self._payloads)):
            found = distributed_facts(payloads)  # of the same payloads (never changed): the same again
            if found is not None:
                self.distributed = found
            self._payloads = payloads
        if self.pods is not None and tree.target_alive and tree.processes:
            self._update_pod(self.pods, tree.processes[0], payloads, facts)
        dist, uid, pod, shown = self._shown
        if dist is not self.distributed or uid != self.owner_uid or pod is not self.pod:
            # Documents are never changed once made: the last poll's objects serve again.
            dist, uid, pod = self.distributed, self.owner_uid, self.pod
            shown = (
                None if dist is None else {**asdict(dist), "ranks": list(dist.ranks), "uid": uid},
                None if pod is None else asdict(pod),
            )
            self._shown = (dist, uid, pod, shown)
        return shown

    def _update_pod(
        self, pods: ProcessPods, root: ProcInfo, payloads: list[ProbePayload], facts: Facts
    ) -> None:
        ident = (root.pid, root.start_ticks)
        if self.pod is not None and self.pod.source in TRUSTED_SOURCES and self._pod_of == ident:
            return  # named by the kubelet: a pod's name never changes
        hostname = next((p.hostname for p in payloads if p.hostname), None)
        info = pods.pod_of(root.pid, root.start_ticks, hostname=hostname, gpu_uuids=_job_gpu_uuids(facts))
        self._pod_of = ident
        if info is not None:
            self.pod = PodFacts(
                clip_opt(info.namespace, MAX_ID_CHARS),
                clip_opt(info.name),
                info.uid,
                clip_opt(info.container, MAX_ID_CHARS),
                info.container_id,
                info.source,
            )


def _job_gpu_uuids(facts: Facts) -> Iterator[str]:
    """The UUIDs of the GPUs the job's processes use, found as the pod lookup reads them: it does
    only for a process in a pod's cgroup that the kubelet's pod list does not name (a job in no pod,
    most polls, costs no look at its processes' GPUs)."""
    used = {g.index for p in facts.processes for g in p.gpu}
    for g in facts.gpus:
        if g.index in used and g.uuid:
            yield g.uuid
