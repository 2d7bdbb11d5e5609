"""The cluster document's declarations (GET /api/dsh-gpu-dashboard/cluster, `dsh-sidecar cluster
--json`): one job across nodes as the Prometheus that scrapes every node's sidecar has it
(sidecar/documents/cluster.py builds it). Kept apart from contract.py only for its length;
contract.py lists it among DOCUMENTS, so the schema, docs/api.md and the JSDoc typedefs carry it."""

from __future__ import annotations

from sidecar.common.nvml_names import CLOCK_EVENT_REASONS
from sidecar.documents.contract_types import BOOL, INT, NUM, STR, Enum, F, Lazy, ListOf, Obj
from sidecar.verdict.facts import VENDORS

# Why a node stopped reporting (sidecar/verdict/cluster.py NodeFacts.why).
SILENCES = ("down", "gone", "stale")
MAX_CLUSTER_NODES = 512
MAX_CLUSTER_JOBS = 64
MAX_JOB_RANKS = 4096
MAX_NODE_GPUS = 64


CLUSTER_GPU = Obj(
    "ClusterGpu",
    "One GPU of a node, as its sidecar exported it (`dsh_gpu_*`).",
    {
        "index": F(INT, "NVML index on its node", null=True),
        "uuid": F(STR, "GPU-... UUID", null=True),
        "name": F(STR, "product name", null=True),
        "vendor": F(Enum(VENDORS), "who made it (its `vendor` label); null: not one of these", null=True),
        "util_pct": F(NUM, "utilisation", null=True),
        "mem_used_mib": F(NUM, "memory in use", null=True),
        "mem_total_mib": F(NUM, "memory in all", null=True),
        "sm_clock_mhz": F(NUM, "SM clock now (an AMD or Intel GPU's: its GPU clock)", null=True),
        "sm_activity_fraction": F(NUM, "GPM: share of SMs busy (Hopper and newer)", null=True),
        "clock_events": F(
            ListOf(Enum(tuple(name for _, name in CLOCK_EVENT_REASONS))),
            "why its clocks are held down now (NVML's clock event reasons); empty: nothing holds them",
        ),
    },
)

CLUSTER_NODE = Obj(
    "ClusterNode",
    "One node: the `node` label of its scrape target, else its `instance`.",
    {
        "node": F(STR, "its name"),
        "reporting": F(BOOL, "scraped now, with a fresh poll"),
        "why": F(
            Enum(SILENCES),
            "why it does not report: `down` (the scrape fails), `gone` (no sample now), `stale` (its last poll is old)",
            null=True,
        ),
        "poll_age_s": F(NUM, "since its sidecar's last poll (the stalest of its sidecars)", null=True),
        "gpus": F(ListOf(CLUSTER_GPU, MAX_NODE_GPUS), "its GPUs, by index"),
    },
)

CLUSTER_RANK = Obj(
    "ClusterRank",
    "One torch.distributed rank of a job, from its node's sidecar.",
    {
        "rank": F(INT, "global rank"),
        "local_rank": F(INT, "LOCAL_RANK", null=True),
        "node": F(STR, "the node it runs on"),
        "job_id": F(STR, "the job's id on that node's sidecar", null=True),
        "gpus": F(ListOf(INT, MAX_NODE_GPUS), "NVML indices of the GPUs it uses on its node"),
        "forward_rate_per_s": F(NUM, "forward calls per second over the last minute", null=True),
        "data_wait_fraction": F(NUM, "share of its step time waiting for the next batch", null=True),
        "forward_fraction": F(NUM, "in forward", null=True),
        "optimizer_fraction": F(NUM, "in optimizer.step()", null=True),
        "other_fraction": F(NUM, "the rest (backward, collectives, host code)", null=True),
        "backward_fraction": F(
            NUM, "between optimizer steps less forward and data wait: backward and the collectives", null=True
        ),
        "collective_wait_fraction": F(
            NUM,
            "its `backward_fraction` beyond the least of the job's ranks on every node: its wait for the "
            "slowest rank (about 0: the rank the others wait for)",
            null=True,
        ),
        "window_steps": F(INT, "steps in the window its fractions are measured over", null=True),
    },
)


def _warning(severities: tuple[str, ...]) -> Obj:
    return Obj(
        "ClusterWarning",
        "A finding of the cluster view (`node-missing`, `ranks-missing`, `straggler-rank`), in English and as catalogue references.",
        {
            "code": F(STR, "stable identifier (README lists them)"),
            "severity": F(Enum(severities), "error, warning or info"),
            "message": F(STR, "what is wrong, in English"),
            "hint": F(STR, "what to do, in English", null=True),
            "message_ref": F(Lazy("TextRef"), "the message in the catalogue, for any language"),
            "hint_ref": F(Lazy("TextRef"), "the hint in the catalogue", null=True),
        },
    )


def cluster_document(schema: int, statuses: tuple[str, ...], severities: tuple[str, ...]) -> Obj:
    """The ClusterDocument, in the words contract.py gives it (its schema, statuses, severities)."""
    warning = _warning(severities)
    job = Obj(
        "ClusterJob",
        "A job over the nodes that ran it, keyed by its distributed `job_key` (a job without one: `<node>/<job_id>`) "
        "and its owner's `uid`: another user's processes under the same key are another job. A uid is a "
        "node's: one user with a different uid on each node is one job per uid.",
        {
            "job_key": F(STR, "the key that joins its nodes' jobs"),
            "uid": F(
                INT,
                "the real uid of its root on every node (`dsh_job_info`'s `uid`); null: its sidecars export none",
                null=True,
            ),
            "world_size": F(INT, "WORLD_SIZE its ranks (or its `dsh_job_info`) report", null=True),
            "nodes": F(ListOf(STR, MAX_CLUSTER_NODES), "the nodes that ran it within the last 10 minutes"),
            "status": F(
                Enum(statuses),
                "its verdict where its nodes agree, MIXED where they differ",
                null=True,
            ),
            "ranks": F(ListOf(CLUSTER_RANK, MAX_JOB_RANKS), "its ranks, by rank"),
            "warnings": F(
                ListOf(warning), "`node-missing` for its silent nodes, `ranks-missing`, `straggler-rank`"
            ),
        },
    )
    return Obj(
        "ClusterDocument",
        "GET /api/dsh-gpu-dashboard/cluster[?job=KEY] (a sidecar started with --prometheus), "
        "`dsh-sidecar cluster --json`: every node and multi-node job Prometheus has.",
        {
            "schema": F(Enum((schema,)), "the document's schema; a client that reads another says so"),
            "time_unix_s": F(NUM, "the instant every query was evaluated at"),
            "prometheus": F(STR, "the Prometheus it was read from"),
            "prometheus_uid": F(
                INT,
                "the user whose process served that Prometheus on this machine (ours, root or a "
                "--prometheus-user: no other is asked); null: another host",
                null=True,
            ),
            "job": F(STR, "the job asked for (?job=KEY), null: every job", null=True),
            "nodes": F(
                ListOf(CLUSTER_NODE, MAX_CLUSTER_NODES), "every node seen within the last 10 minutes, by name"
            ),
            "jobs": F(
                ListOf(job, MAX_CLUSTER_JOBS),
                "the distributed jobs (world size over 1, or ranks or nodes more than one; with ?job=KEY: "
                "that job, whatever its size), those on most nodes first",
            ),
            "undistributed_jobs": F(
                INT, "the jobs of one process or one rank on one node: counted here, not listed in `jobs`"
            ),
            "warnings": F(ListOf(warning), "`node-missing` for each silent node"),
        },
    )
