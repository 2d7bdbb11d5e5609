"""A run as the ledger keeps it, typed: what the recorder (sidecar/poll) writes, what the ledger
(sidecar/sources/ledger) stores and reads back, and what the comparison and the accounting
(sidecar/verdict) take. None of them imports another for these words: this is their vocabulary.

A run is a job as the sidecar sees it (its root process: pid and start ticks) on one boot of one
host: `RunIdentity.key` is "<boot id>/<job id>", so a sidecar restarted under a running job finds
the same run, and a reboot that reuses a pid never does. Figures carry their units in their names;
None is "not known" (never 0).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

# Statuses a run's verdict can have (the status document's `status`), and how a run ended.
RUN_LIVE = "live"  # still watched by a sidecar (or the sidecar stopped first: `ended_unix_s` None)
RUN_EXITED = "exited"


def run_key(boot_id: str, job_id: str) -> str:
    """The ledger's key of a run: the job (pid-start ticks) on one boot of the host."""
    return f"{boot_id}/{job_id}"


# A run's short id, the one a person types (`dsh-sidecar compare 3f2a9c1b`): the first hex digits
# of the SHA-256 of its key. A function of the key alone, so the same run has the same id in every
# listing, on every sidecar and after a restart; 8 digits (32 bits) are unique among a ledger's runs
# but about once in 100 ledgers of 10,000 runs, and a listing shows more digits where two agree.
RUN_ID_DIGITS = 8


def run_id(key: str, digits: int = RUN_ID_DIGITS) -> str:
    """The run's short id (its key's SHA-256, the first `digits` hex digits)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:digits]


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """What is known of a run when it is first seen; never changes afterwards."""

    key: str  # run_key(boot_id, job_id)
    job_id: str  # "<pid>-<start ticks>", the status document's job_id
    host: str
    started_unix_s: float
    uid: int | None = None
    user: str | None = None
    command: tuple[str, ...] = ()
    cwd: str | None = None
    distributed_key: str | None = None  # the job key ranks of one distributed job share
    world_size: int | None = None
    slurm_job: str | None = None  # SLURM_JOB_ID, or the job named by the cgroup path (a SLUID too)
    pod: str | None = None  # "<namespace>/<name>" when a kubelet named the pod


@dataclass(frozen=True, slots=True)
class RunSetup:
    """What the run runs on and with: learned from the probe and NVML, possibly polls after the
    start (a probe publishes after `register`); the ledger keeps the latest known of each."""

    torch_version: str | None = None
    torch_cuda: str | None = None  # torch.version.cuda (or hip): the toolkit torch was built with
    driver_version: str | None = None
    gpu_models: tuple[str, ...] = ()  # the names of the GPUs the job's processes use
    precision: str | None = None  # "float32", "bfloat16", "float16", "autocast bfloat16", "tf32"...
    loader: tuple[tuple[str, str], ...] = ()  # DataLoader settings: ("num_workers", "4"), ...
    processes: int | None = None  # the job's processes (the largest count seen)


@dataclass(frozen=True, slots=True)
class VerdictChange:
    """The run's verdict when it changed: its status and the codes of its warnings then."""

    time_unix_s: float
    status: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MinuteFigures:
    """One minute of a run (older minutes are merged into longer spans: `span_s`, `minutes`):
    means over the polls that had the figure, peaks, and the minute's share of the totals.

    Means of a merged span are weighted by the polls that had them; `step_rate_sq_hz2` (the sum of
    the squares of each merged minute's step rate) keeps the per-minute spread a comparison's noise
    is measured from."""

    start_unix_s: float  # the minute's start (a multiple of its span)
    # A minute (run_figures.MINUTE_S; tests record shorter rows: --runs-period), an hour once merged.
    span_s: float = 60.0
    minutes: int = 1  # rows merged into this one (1 until downsampled): the comparison's samples
    polls: int = 0
    steps: int | None = None  # training steps counted in the span
    step_rate_hz: float | None = None
    step_rate_sq_hz2: float | None = None
    data_wait_fraction: float | None = None  # shares of the step (the step breakdown)
    forward_fraction: float | None = None
    backward_fraction: float | None = None
    optimizer_fraction: float | None = None
    other_fraction: float | None = None
    syncs_per_step: float | None = None
    gpu_util_pct: float | None = None  # the job's GPUs, averaged
    gpu_mem_used_mib: float | None = None  # the job's processes' GPU memory, summed
    gpu_mem_peak_mib: float | None = None
    sm_activity_fraction: float | None = None  # GPM, where the GPU has it
    tensor_activity_fraction: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    clock_reasons: tuple[str, ...] = ()  # every clock-event reason seen in the span (NVML's names)
    power_w: float | None = None
    power_peak_w: float | None = None
    temperature_c: float | None = None
    temperature_peak_c: float | None = None
    gpu_processes: int | None = None  # processes on the job's GPUs, the job's own and others (most seen)
    cpu_pct: float | None = None
    rss_mib: float | None = None
    gpu_held_s: float = 0.0  # GPU-seconds the job held (memory allocated on a GPU), per GPU summed
    gpu_busy_s: float = 0.0  # GPU-seconds held with work (verdict.accounting.gpu_works)
    energy_j: float | None = None  # NVML's energy counter's increase on the job's GPUs, where it answers


@dataclass(frozen=True, slots=True)
class RunTotals:
    """The whole run: sums of its minutes and its peaks."""

    wall_s: float = 0.0
    steps: int | None = None
    gpu_held_s: float = 0.0
    gpu_busy_s: float = 0.0
    energy_j: float | None = None
    gpu_mem_peak_mib: float | None = None
    power_peak_w: float | None = None
    temperature_peak_c: float | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the ledger lists it."""

    identity: RunIdentity
    setup: RunSetup = field(default_factory=RunSetup)
    totals: RunTotals = field(default_factory=RunTotals)
    last_seen_unix_s: float | None = None  # the last poll that saw it
    ended_unix_s: float | None = None  # None: not seen to end (live, or its sidecar stopped first)
    exit_code: int | None = None  # where known (`run` knows its child's)
    status: str | None = None  # the last verdict's status
    warnings: tuple[str, ...] = ()  # the last verdict's warning codes

    @property
    def state(self) -> str:
        return RUN_LIVE if self.ended_unix_s is None else RUN_EXITED


@dataclass(frozen=True, slots=True)
class RunDetail:
    """One run with its timeline and its minutes, oldest first."""

    record: RunRecord
    timeline: tuple[VerdictChange, ...] = ()
    minutes: tuple[MinuteFigures, ...] = ()


@dataclass(frozen=True, slots=True)
class LedgerBatch:
    """What one write of the recorder puts in the ledger, in one transaction: runs upserted (by
    key), minutes upserted (by run key and start: the current minute again as it grows) and verdict
    changes appended."""

    runs: tuple[RunRecord, ...] = ()
    minutes: tuple[tuple[str, MinuteFigures], ...] = ()  # (run key, minute)
    changes: tuple[tuple[str, VerdictChange], ...] = ()  # (run key, change)
