"""GPU time a job used over a window, typed: what the accounting (sidecar/verdict/accounting.py)
sums into `dsh-sidecar report`. It comes from the ledger's minutes (accounting.runs_usage) or from a
fleet's Prometheus (sidecar/sources/prometheus_queries.py reads the recording rules of
deploy/dsh-accounting.yml); neither imports the other: this is their vocabulary.

Figures carry their units in their names; None is "not known" (never 0).
"""

from __future__ import annotations

from dataclasses import dataclass

# What a report groups by (`--by`).
BY_USER = "user"
BY_JOB = "job"
BY_GPU = "gpu"
GROUPINGS = (BY_USER, BY_JOB, BY_GPU)


@dataclass(frozen=True, slots=True)
class JobGpuUsage:
    """One job's use of one GPU (or of its GPUs of one model, where the source cannot tell them
    apart) within the window."""

    job: str  # the run's key in the ledger; "<node>/<job_id>" from Prometheus
    job_id: str | None = None  # "<pid>-<start ticks>", the status document's job_id
    host: str | None = None
    user: str | None = None
    uid: int | None = None
    slurm_job: str | None = None
    pod: str | None = None  # "<namespace>/<name>"
    command: tuple[str, ...] = ()
    gpu: str | None = None  # the GPU itself where known ("<node>/<index>"), else None
    gpu_model: str | None = None
    gpu_held_s: float = 0.0  # GPU-seconds the job held memory on it
    gpu_busy_s: float = 0.0  # of those, with the GPU's utilisation at or above the idle threshold
    energy_j: float | None = None  # the GPU's energy while held, summed where known
    energy_held_s: float = 0.0  # held GPU-seconds whose energy is known (energy_j covers these)
