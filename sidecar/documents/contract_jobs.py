"""The job list's declarations: a Job (a line of GET /api/dsh-gpu-dashboard/jobs, and of a status
document's `jobs` in discovery mode) and the JobsDocument. Kept apart from contract.py only for its
length; contract.py lists them among its documents, so the schema, docs/api.md and the JSDoc typedefs
carry them. The types declared in contract.py are named here by reference (Lazy)."""

from __future__ import annotations

from sidecar.documents.bounds import MAX_JOBS_SHOWN
from sidecar.documents.contract_types import BOOL, INT, NUM, STR, Enum, F, Lazy, ListOf, Obj


def job_documents(schema: int, statuses: tuple[str, ...]) -> tuple[Obj, Obj]:
    """(Job, JobsDocument), in the words contract.py gives them (its schema and statuses)."""
    job = Obj(
        "Job",
        "One job: a process tree found through its probe segments or its GPU use, grouped under its root "
        "(the topmost ancestor that is probed, uses a GPU, or is a known launcher such as torchrun).",
        {
            "id": F(STR, "`<root pid>-<root start ticks>`: the job's identity, never reused"),
            "root_pid": F(INT, "the root process"),
            "command": F(ListOf(STR), "the root's command line, redacted and clipped", null=True),
            "user": F(STR, "the root's user name (its uid as text when the name is unknown)", null=True),
            "uid": F(INT, "the root's real uid", null=True),
            "yours": F(
                BOOL,
                "the root's uid is that of the user who asked (the HTTP API, where the kernel's socket "
                "tables prove a loopback caller's uid); null: not told (no proven caller, or no uid)",
                null=True,
            ),
            "cwd": F(STR, "the root's working directory (null when it cannot be read)", null=True),
            "ancestor_pids": F(
                ListOf(INT, 32), "the root's parent, its parent, ... up to pid 1 (session linkage)"
            ),
            "slurm_job": F(
                STR,
                "the Slurm job the root runs in: its cgroup's (`job_J`, or Slurm 26.05's SLUID), else SLURM_JOB_ID "
                "in its environment when it is the sidecar's user's own process; null outside Slurm",
                null=True,
            ),
            "start_time_unix_s": F(NUM, "when the root started", null=True),
            "alive": F(BOOL, "false once the root has exited"),
            "ended_unix_s": F(NUM, "when the sidecar saw it exit", null=True),
            "status": F(Enum(statuses), "the job's verdict"),
            "message": F(STR, "the verdict in one sentence, in English"),
            "message_ref": F(Lazy("TextRef"), "the same in the catalogue"),
            "first_warning": F(Lazy("Warning"), "the most severe warning", null=True),
            "warning_count": F(INT, "warnings of the verdict"),
            "gpus": F(ListOf(INT), "NVML indices of the GPUs the job uses"),
            "process_count": F(INT, "processes in its tree"),
            "has_model": F(BOOL, "a model is registered with the probe"),
            "distributed": F(Lazy("Distributed"), "its distributed run, null when it is none", null=True),
            "pod": F(Lazy("Pod"), "its Kubernetes pod, null outside one", null=True),
        },
    )
    jobs_document = Obj(
        "JobsDocument",
        "GET /api/dsh-gpu-dashboard/jobs: every job this sidecar watches, the newest first.",
        {
            "schema": F(Enum((schema,)), "the document's schema; a client that reads another says so"),
            "time_unix_s": F(NUM, "when the last poll ran"),
            "interval_s": F(NUM, "time between polls"),
            "mode": F(
                Enum(("pid", "discovery")), "`pid`: one job given by --pid; `discovery`: every job found"
            ),
            "default_job": F(
                STR,
                "the job GET /api/dsh-gpu-dashboard/status answers without ?job= (the newest with a model; "
                "root's discovery: the caller's own)",
                null=True,
            ),
            "jobs": F(
                ListOf(job, MAX_JOBS_SHOWN),
                "the jobs, newest first (at most 64, shared out among users: one user's many jobs never "
                "push another's out)",
            ),
            "jobs_omitted": F(INT, "jobs left out"),
        },
    )
    return job, jobs_document
