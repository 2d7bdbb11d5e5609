"""The cluster document: one view of every node and every multi-node job, built from what the nodes'
sidecars exported and one Prometheus scraped (docs/deploy.md, "One job across nodes").

Pure: Prometheus's answers in (ClusterAnswers, sidecar/common/cluster_answers.py, as the Prometheus
source asks them: sidecar/sources/prometheus_queries.py), a JSON-ready document out. A node is the
target's `node` label (deploy/prometheus.yml sets it from the target file or the host name), else
its `instance`. A job
spans nodes by its `job_key` (the probe's distributed identity on `dsh_job_info`) with its owner's
`uid`: a job key is whatever a process's environment says (TORCHELASTIC_RUN_ID), so another user's
process that names the victim's run is a job of its own, never a rank of the victim's. A uid is
numeric and per node: a user with a different uid on each node makes one job per uid (the nodes
of one cluster share their users' uids in practice: LDAP, Slurm). A job without a key is its
node's alone. Every series is matched to its node through `instance`, so two sidecars on
one node (one per job) stay apart.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sidecar.common.catalogue import render
from sidecar.common.cluster_answers import STRAGGLER_CONFIRM_S, ClusterAnswers, Samples
from sidecar.common.nvml_names import CLOCK_EVENT_REASONS
from sidecar.documents import contract
from sidecar.documents.bounds import MAX_MESSAGE_CHARS, clip
from sidecar.documents.contract_cluster import (  # the bounds, declared with the document
    MAX_CLUSTER_JOBS,
    MAX_CLUSTER_NODES,
    MAX_JOB_RANKS,
    MAX_NODE_GPUS,
)
from sidecar.verdict.cluster import (
    ClusterGpus,
    JobFacts,
    NodeFacts,
    job_findings,
    job_straggler,
    node_findings,
)
from sidecar.verdict.facts import VENDORS, Finding
from sidecar.verdict.stragglers import RankWait, relative_waits, throttle_reason

STALE_POLL_S = 30.0  # a sidecar whose last poll is older than this is stuck: its figures are old
MIB = 1048576
REASON_NAMES = frozenset(name for _, name in CLOCK_EVENT_REASONS)

STEP_PHASES = ("data_wait", "forward", "optimizer", "other")
# A job across nodes: (its `job_key`, else `<node>/<job_id>`; its owner's `uid` label, "" when none).
JobKey = tuple[str, str]


def node_of(labels: Mapping[str, str]) -> str:
    return labels.get("node") or labels.get("instance") or "?"


def _number(x: float, digits: int = 3) -> float | None:
    return round(x, digits) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _count(x: float) -> int | None:
    return int(x) if isinstance(x, (int, float)) and math.isfinite(x) and 0 <= x < 1 << 53 else None


def _node_facts(answers: ClusterAnswers) -> dict[str, NodeFacts]:
    """Every node seen within the look-back window, and whether it reports now."""
    now = {node_of(labels) for labels, _ in answers.sidecars}
    down = {node_of(labels) for labels, v in answers.up if v == 0}
    ages: dict[str, float] = {}
    for labels, age in answers.poll_age_s:
        node = node_of(labels)
        ages[node] = max(ages.get(node, 0.0), age)  # the stalest sidecar of the node speaks for it
    seen = now | {node_of(labels) for labels, _ in answers.sidecars_recent}
    facts = {}
    for node in sorted(seen)[:MAX_CLUSTER_NODES]:
        poll_age_s = _number(ages[node], 1) if node in ages else None
        why = _silence(node in down, node in now, poll_age_s)
        facts[node] = NodeFacts(node, why == "", why, poll_age_s)
    return facts


def _silence(scrape_fails: bool, sampled_now: bool, poll_age_s: float | None) -> str:
    """Why a node does not report ("" when it does): Prometheus cannot scrape it, it has no sample
    now (its sidecar stopped or left the targets), or its sidecar's last poll is too old."""
    if scrape_fails:
        return "down"
    if not sampled_now:
        return "gone"
    if poll_age_s is not None and poll_age_s > STALE_POLL_S:
        return "stale"
    return ""


def _gpus(answers: ClusterAnswers) -> dict[str, list[dict[str, Any]]]:
    """Each node's GPUs: (node, gpu index) -> the figures the cluster view shows."""
    gpus: dict[tuple[str, str], dict[str, Any]] = {}

    def entry(labels: Mapping[str, str]) -> dict[str, Any]:
        key = (node_of(labels), labels.get("gpu", ""))
        if key not in gpus:
            gpus[key] = {
                "index": _int(labels.get("gpu")),
                "uuid": labels.get("uuid"),
                "name": labels.get("name"),
                "vendor": None,
                "util_pct": None,
                "mem_used_mib": None,
                "mem_total_mib": None,
                "sm_clock_mhz": None,
                "sm_activity_fraction": None,
                "clock_events": [],
            }
        return gpus[key]

    for samples, field, scale in (
        (answers.gpu_util, "util_pct", 1.0),
        (answers.gpu_mem_used, "mem_used_mib", 1 / MIB),
        (answers.gpu_mem_total, "mem_total_mib", 1 / MIB),
        (answers.gpu_sm_clock, "sm_clock_mhz", 1e-6),
        (answers.gpu_sm_activity, "sm_activity_fraction", 1.0),
    ):
        for labels, value in samples:
            g = entry(labels)
            g[field] = _number(value * scale, 1 if scale != 1.0 else 3)
            if labels.get("vendor") in VENDORS:  # only names the sidecar exports: nothing else is trusted
                g["vendor"] = labels["vendor"]
    for labels, _ in answers.gpu_clock_events:
        reason = labels.get("reason", "")
        if reason in REASON_NAMES:  # only names the sidecar exports: nothing else is trusted
            entry(labels)["clock_events"].append(reason)
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (node, _), g in sorted(gpus.items(), key=lambda kv: (kv[0][0], kv[1]["index"] or 0)):
        g["clock_events"].sort()
        by_node[node].append(g)
    return by_node


def _job_keys(samples: Samples) -> dict[tuple[str, str], JobKey]:
    """(instance, job_id) -> the job's cross-node key: its `job_key`, else node/job_id, with its
    owner's uid (an older sidecar's job without one: ""). Two owners' jobs under one `job_key` are
    two jobs, wherever they run."""
    keys = {}
    for labels, _ in samples:
        local = (labels.get("instance", ""), labels.get("job_id", ""))
        key = labels.get("job_key") or f"{node_of(labels)}/{labels.get('job_id', '')}"
        keys[local] = (key, labels.get("uid", ""))
    return keys


class _RankRows:
    """Each job's rank rows as the series name them: (instance, job_id) -> job key, rank label -> row."""

    def __init__(self, keys: Mapping[tuple[str, str], JobKey]) -> None:
        self.keys = keys
        self.jobs: dict[JobKey, dict[str, dict[str, Any]]] = defaultdict(dict)
        self.world: dict[JobKey, int] = {}

    def row(self, labels: Mapping[str, str]) -> dict[str, Any] | None:
        key = self.keys.get((labels.get("instance", ""), labels.get("job_id", "")))
        rank = labels.get("rank", "")
        if key is None or rank == "" or _int(rank) is None:
            return None
        rows = self.jobs[key]
        if rank not in rows:
            if len(rows) >= MAX_JOB_RANKS:
                return None
            rows[rank] = {
                "rank": _int(rank),
                "local_rank": None,
                "node": node_of(labels),
                "job_id": labels.get("job_id"),
                "gpus": [],
                "forward_rate_per_s": None,
                **{f"{p}_fraction": None for p in STEP_PHASES},
                "backward_fraction": None,
                "collective_wait_fraction": None,
                "window_steps": None,
            }
        return rows[rank]

    def add_ranks(self, samples: Samples) -> None:
        for labels, _ in samples:
            r = self.row(labels)
            if r is not None:
                r["local_rank"] = _int(labels.get("local_rank"))
                size = _int(labels.get("world_size"))
                if size:
                    self.world[self.keys[(labels.get("instance", ""), labels.get("job_id", ""))]] = size

    def add_values(
        self, samples: Samples, field: str, convert: Callable[[float], float | int | None], *, rank_role: bool = False
    ) -> None:
        """Each sample's value, converted, into its row's `field` (`{phase}` in it: the sample's phase)."""
        for labels, value in samples:
            if rank_role and labels.get("role") != "rank":
                continue
            if "{phase}" in field and labels.get("phase") not in STEP_PHASES:
                continue
            r = self.row(labels)
            if r is not None:
                r[field.format(phase=labels.get("phase"))] = convert(value)

    def add_forward_rates(self, samples: Samples) -> None:
        for labels, value in samples:
            r = self.row(labels)
            if r is not None:
                r["forward_rate_per_s"] = _number((r["forward_rate_per_s"] or 0.0) + value, 2)

    def add_gpus(self, samples: Samples) -> None:
        for labels, _ in samples:
            r = self.row(labels) if labels.get("role") == "rank" else None
            gpu = _int(labels.get("gpu"))
            if r is not None and gpu is not None and gpu not in r["gpus"]:
                r["gpus"].append(gpu)


def _ranks(
    answers: ClusterAnswers, keys: Mapping[tuple[str, str], JobKey]
) -> tuple[dict[JobKey, dict[str, dict[str, Any]]], dict[JobKey, int]]:
    """(job key -> rank label -> the rank's row (node, local rank, step shares, forward rate, GPUs),
    job key -> world size: its ranks', else its `dsh_job_info`'s, which a job's sidecar exports
    from its distributed identity before any rank series)."""
    rows = _RankRows(keys)
    for labels, _ in answers.jobs_recent:
        size = _int(labels.get("world_size"))
        key = keys.get((labels.get("instance", ""), labels.get("job_id", "")))
        if size and key is not None:
            rows.world[key] = max(size, rows.world.get(key, 0))
    rows.add_ranks(answers.ranks)
    rows.add_values(answers.step_fraction, "{phase}_fraction", _number, rank_role=True)
    rows.add_values(answers.rank_backward, "backward_fraction", _number)
    rows.add_values(answers.rank_steps, "window_steps", _count)
    rows.add_forward_rates(answers.forward_rate)
    rows.add_gpus(answers.rank_gpu_mem)
    return rows.jobs, rows.world


def _rank_wait(
    rank: int, node: str, backward: float | None, steps: int | None, row: Mapping[str, Any] | None = None
) -> RankWait | None:
    if backward is None or steps is None:
        return None
    row = row or {}
    gpus: Sequence[int] = row.get("gpus") or ()
    return RankWait(
        rank,
        None,  # Prometheus's series carry no pid
        steps,
        0.0,
        backward,
        row.get("data_wait_fraction"),
        row.get("forward_fraction"),
        row.get("optimizer_fraction"),
        gpus[0] if len(gpus) == 1 else None,
        node,
    )


def _waits_now(rows: Iterable[dict[str, Any]]) -> tuple[RankWait, ...]:
    """The job's ranks with a measured backward now, each with its collective wait; the rows get it."""
    found = (_rank_wait(r["rank"], r["node"], r["backward_fraction"], r["window_steps"], r) for r in rows)
    waits = relative_waits(w for w in found if w is not None)
    by_rank = {w.rank: w.collective_wait_fraction for w in waits}
    for r in rows:
        r["collective_wait_fraction"] = _number(by_rank[r["rank"]]) if r["rank"] in by_rank else None
    return waits


def _waits_before(
    answers: ClusterAnswers, keys: Mapping[tuple[str, str], JobKey]
) -> dict[JobKey, list[RankWait]]:
    """job key -> its ranks' backward shares STRAGGLER_CONFIRM_S ago (one a rank: the first)."""
    steps = {
        (labels.get("instance", ""), labels.get("job_id", ""), labels.get("rank", "")): _count(v)
        for labels, v in answers.rank_steps_before
    }
    jobs: dict[JobKey, dict[int, RankWait]] = defaultdict(dict)
    for labels, value in answers.rank_backward_before:
        local = (labels.get("instance", ""), labels.get("job_id", ""))
        key, rank = keys.get(local), _int(labels.get("rank"))
        if key is None or rank is None or len(jobs[key]) >= MAX_JOB_RANKS:
            continue
        w = _rank_wait(rank, node_of(labels), _number(value), steps.get((*local, labels.get("rank", ""))))
        if w is not None:
            jobs[key].setdefault(rank, w)
    return {key: list(ranks.values()) for key, ranks in jobs.items()}


def _cluster_gpus(gpus: Mapping[str, list[dict[str, Any]]]) -> ClusterGpus:
    return {
        (node, g["index"]): (throttle_reason(g["clock_events"]), g["sm_clock_mhz"], g["vendor"])
        for node, listed in gpus.items()
        for g in listed
    }


def _warning(f: Finding) -> dict[str, Any]:
    """A finding in English (the CLI, agents) and as catalogue references (the page and the plugin
    render them in the reader's language); node and job names come from labels, so they are clipped."""
    message, hint = f.message.as_dict(clip), f.hint.as_dict(clip) if f.hint else None
    return {
        "code": f.code,
        "severity": f.severity,
        "message": clip(render(message), MAX_MESSAGE_CHARS),
        "hint": clip(render(hint), MAX_MESSAGE_CHARS) if hint else None,
        "message_ref": message,
        "hint_ref": hint,
    }


def build_cluster(
    answers: ClusterAnswers,
    *,
    now_unix_s: float,
    prometheus: str,
    prometheus_uid: int | None = None,
    job: str | None = None,
) -> dict[str, Any]:
    """The cluster document (docs/deploy.md, "One job across nodes"). `job` keeps only the jobs of that key (or
    job_id), whoever owns them, whatever their size; without it every distributed job is shown,
    multi-node ones first, and the others are counted (`undistributed_jobs`)."""
    nodes = _node_facts(answers)
    gpus = _gpus(answers)
    keys_now = _job_keys(answers.jobs)
    keys_recent = {**keys_now, **_job_keys(answers.jobs_recent)}
    ranks, world = _ranks(answers, keys_recent)
    before = _waits_before(answers, keys_recent)
    cluster_gpus = _cluster_gpus(gpus)
    node_by_instance = {
        labels.get("instance", ""): node_of(labels)
        for samples in (answers.jobs_recent, answers.sidecars, answers.sidecars_recent)
        for labels, _ in samples
    }
    status = {
        (labels.get("instance", ""), labels.get("job_id", "")): labels.get("status")
        for labels, _ in answers.status
    }
    where_now: dict[JobKey, set[str]] = defaultdict(set)
    where_recent: dict[JobKey, set[str]] = defaultdict(set)
    statuses: dict[JobKey, set[str]] = defaultdict(set)
    for (instance, job_id), key in keys_recent.items():
        node = node_by_instance.get(instance) or instance or "?"
        where_recent[key].add(node)
        if (instance, job_id) in keys_now:
            where_now[key].add(node)
            said = status.get((instance, job_id))
            if said is not None and said in contract.STATUSES:  # a label: only the verdict's words
                statuses[key].add(said)
    asked = [k for k in where_recent if job is None or k[0] == job or k[0].endswith(f"/{job}")]
    wanted = asked if job is not None else [
        k for k in asked if _distributed(world.get(k), len(ranks.get(k, {})), len(where_recent[k]))
    ]
    wanted.sort(key=lambda k: (-len(where_recent[k]), k[0], _int(k[1]) or 0, k[1]))
    jobs = []
    for key in wanted[:MAX_CLUSTER_JOBS]:
        rows = ranks.get(key, {})
        size = world.get(key)
        facts = JobFacts(
            key[0],
            size,
            frozenset(r["rank"] for r in rows.values()),
            frozenset(where_now[key]),
            frozenset(where_recent[key]),
        )
        now = _waits_now(rows.values())
        findings = job_findings(facts, list(nodes.values()))
        slow = job_straggler(key[0], now, before.get(key, ()), cluster_gpus, STRAGGLER_CONFIRM_S)
        jobs.append(
            {
                "job_key": key[0],
                "uid": _int(key[1]),
                "world_size": size,
                "nodes": sorted(where_recent[key]),
                "status": _one_status(statuses[key]),
                "ranks": sorted(rows.values(), key=lambda r: r["rank"]),
                "warnings": [_warning(f) for f in (*findings, *([slow] if slow else []))],
            }
        )
    doc = {
        "schema": contract.SCHEMA,
        "time_unix_s": round(now_unix_s, 3),
        "prometheus": prometheus,
        "prometheus_uid": prometheus_uid,
        "job": job,
        "nodes": _node_rows(nodes, gpus),
        "jobs": jobs,
        "undistributed_jobs": len(asked) - len(wanted),
        "warnings": [_warning(f) for f in node_findings(list(nodes.values()))],
    }
    return contract.check_if_enabled(doc, "cluster")


def _distributed(world_size: int | None, ranks: int, nodes: int) -> bool:
    """A job of more than one rank: its world size says so, or more ranks or nodes than one were seen.
    A job of one process (or one rank) on one node is its own page's: the cluster view lists it not,
    or one node's every notebook and script would bury the runs it is for (issue 39 item 3)."""
    return (world_size or 0) > 1 or ranks > 1 or nodes > 1


def _node_rows(nodes: Mapping[str, NodeFacts], gpus: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        {
            "node": n.node,
            "reporting": n.reporting,
            "why": n.why or None,
            "poll_age_s": n.poll_age_s,
            "gpus": gpus.get(n.node, [])[:MAX_NODE_GPUS],
        }
        for n in nodes.values()
    ]


def _one_status(statuses: Iterable[str]) -> str | None:
    """The job's status over its nodes: one they agree on, MIXED where they differ."""
    found = set(statuses)
    return None if not found else found.pop() if len(found) == 1 else "MIXED"
