"""The cluster view's rules: what Prometheus's record of every node's sidecar says is wrong with a
job that spans nodes. Pure: the facts the cluster document gathered in, findings out.

A node that stopped reporting is told apart from one that never ran a sidecar: the first was seen
within the look-back window (`dsh_sidecar_info` over it) and has no fresh sample now; the second
shows only as ranks missing against the job's world size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.common.catalogue import ref
from sidecar.verdict.facts import Finding, Rules
from sidecar.verdict.rules import finding
from sidecar.verdict.stragglers import RankWait, cause_ref, hint_ref, pick_straggler, relative_waits, where

# Why a node is silent -> what the user reads (each id written out: the catalogue test scans for them).
SILENCE_MESSAGES = {
    "down": "warning.node-missing.down",
    "gone": "warning.node-missing.gone",
    "stale": "warning.node-missing.stale",
}


@dataclass(frozen=True)
class NodeFacts:
    node: str
    reporting: bool  # scraped now (`up` 1, a current dsh_sidecar_info) and its poll is fresh
    why: str  # "" when reporting; else "down" (scrape fails) | "gone" (no sample) | "stale" (old poll)
    poll_age_s: float | None  # seconds since its last poll, where Prometheus still has it


@dataclass(frozen=True)
class JobFacts:
    key: str
    world_size: int | None
    ranks_seen: frozenset[int]
    nodes_now: frozenset[str]  # nodes whose sidecar shows the job now
    nodes_recent: frozenset[str]  # nodes whose sidecar showed it within the look-back window


def _age(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.0f} s"


def node_findings(nodes: Sequence[NodeFacts]) -> list[Finding]:
    """`node-missing` for each node seen within the window that no longer reports."""
    out = []
    for n in sorted(nodes, key=lambda n: n.node):
        if not n.reporting:
            out.append(
                finding(
                    "node-missing",
                    "warning",
                    ref(SILENCE_MESSAGES[n.why], node=n.node, age=_age(n.poll_age_s)),
                    ref("hint.node-missing", node=n.node),
                )
            )
    return out


def job_findings(job: JobFacts, nodes: Sequence[NodeFacts]) -> list[Finding]:
    """`node-missing` for a node that ran the job and stopped reporting; `ranks-missing` when every
    node that ran it reports and fewer ranks than the world size show (a node without a sidecar)."""
    silent = sorted(n.node for n in nodes if not n.reporting and n.node in job.nodes_recent)
    out = [
        finding(
            "node-missing",
            "warning",
            ref("warning.node-missing.job", node=node, job=job.key),
            ref("hint.node-missing", node=node),
        )
        for node in silent
    ]
    if not silent and job.world_size and len(job.ranks_seen) < job.world_size:
        absent = sorted(set(range(job.world_size)) - job.ranks_seen)
        shown = ", ".join(map(str, absent[:16])) + (", ..." if len(absent) > 16 else "")
        out.append(
            finding(
                "ranks-missing",
                "warning",
                ref(
                    "warning.ranks-missing",
                    seen=len(job.ranks_seen),
                    world=job.world_size,
                    ranks=shown,
                    job=job.key,
                ),
                ref("hint.ranks-missing"),
            )
        )
    return out


# A GPU of the cluster, (node, NVML index) -> (its throttle reason or None, its SM clock in MHz or
# None, its vendor or None).
ClusterGpus = Mapping[tuple[str | None, int | None], tuple[str | None, float | None, str | None]]
_NO_GPU: tuple[str | None, float | None, str | None] = (None, None, None)


def job_straggler(
    job: str,
    now: Sequence[RankWait],
    before: Sequence[RankWait],
    gpus: ClusterGpus,
    confirm_s: float,
    rules: Rules = Rules(),
) -> Finding | None:
    """`straggler-rank` across nodes: the rank of `job` every other rank waits for in the ranks'
    figures now (`now`, their backward shares, one node's or many) and `confirm_s` earlier
    (`before`), the same rank both times; as on one node (sidecar/verdict/stragglers.py), with the
    node named."""

    def throttle_of(w: RankWait) -> str | None:
        return gpus.get((w.node, w.gpu_index), _NO_GPU)[0]

    s = pick_straggler(relative_waits(now), rules, throttle_of)
    if s is None:
        return None
    earlier = pick_straggler(relative_waits(before), rules, lambda w: None)
    if earlier is None or earlier.rank != s.rank:
        return None
    reason, clock, vendor = gpus.get((s.node, s.gpu_index), _NO_GPU)
    message = ref(
        "warning.straggler-rank.cluster",
        rank=s.rank,
        where=where(s.node, s.gpu_index).removeprefix(", "),
        job=job,
        wait=f"{s.wait_fraction:.0%}",
        cause=cause_ref(s, reason, clock, vendor),
        steps=s.steps,
        confirm=f"{confirm_s:.0f} s",
    )
    return finding("straggler-rank", "warning", message, hint_ref(s))
