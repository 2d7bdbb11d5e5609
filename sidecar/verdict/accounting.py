"""GPU-hours accounted (issue 40, `dsh-sidecar report`): per user, job or GPU model, the GPU-hours
held (memory allocated on a GPU), busy (held with the GPU's utilisation at or above the idle
threshold) and held but idle (held - busy: a GPU held with no work, the headline), the energy, and
the runs, with their Slurm jobs and pods, over a window [since, until).

Pure: it takes the ledger's runs (RunDetail, sidecar/common/runs.py) or a fleet's per job and GPU
figures (JobGpuUsage, sidecar/common/usage.py, from Prometheus) and reads nothing itself.

- A minute row partly inside the window counts in proportion: its figures times the share of its
  span inside [since, until) (merged hour rows the same way, so an hour row half inside counts half).
- `--by gpu` from the ledger is by GPU model: a minute's figures are the job's GPUs summed, with no
  split per GPU, so a run's figures are shared out over `RunSetup.gpu_models` (one name a GPU) in
  proportion to how many of its GPUs are of each model (all of one model for nearly every job); a
  run that never named its GPUs counts under "unknown". From Prometheus each GPU is its own.
- Energy is summed over the minutes that know it; None where none does (never 0), and
  `energy_known_fraction` says what share of the held GPU-hours it covers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from sidecar.common.runs import MinuteFigures, RunDetail
from sidecar.common.usage import BY_JOB, BY_USER, GROUPINGS, JobGpuUsage

S_PER_H = 3600.0
J_PER_KWH = 3.6e6
UNKNOWN = "unknown"  # the key of what the source could not name (a user, a GPU model)
MAX_NAMES = 32  # Slurm jobs, pods, users, hosts, models listed in one row (sorted; `*_count` has all)


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One user, job or GPU model over the window (or the total of them all)."""

    key: str
    runs: int
    gpu_held_h: float
    gpu_busy_h: float
    gpu_idle_held_h: float  # held - busy: memory held with no work
    energy_kwh: float | None  # None: no minute of it knew the energy
    energy_known_fraction: float | None  # of the held GPU-hours, the share whose energy is known
    users: tuple[str, ...] = ()
    slurm_jobs: tuple[str, ...] = ()
    slurm_job_count: int = 0
    pods: tuple[str, ...] = ()
    pod_count: int = 0
    hosts: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()
    job_id: str | None = None  # --by job: the job's id and command
    command: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Accounting:
    by: str
    since_unix_s: float
    until_unix_s: float
    rows: tuple[UsageRow, ...]  # the most GPU-hours held idle first
    total: UsageRow


def gpu_works(util_pct: float | None, sm_activity_fraction: float | None, idle_util_pct: float) -> bool | None:
    """Whether a held GPU counts as busy: its utilisation at or above the idle threshold (the
    verdict's `Rules.idle_util_pct`), else its GPM SM activity as a percentage; None where neither
    is known (MIG has no device utilisation): no busy figure then, so that time counts as held, not busy."""
    util = util_pct
    if util is None and sm_activity_fraction is not None:
        util = sm_activity_fraction * 100
    return None if util is None else util >= idle_util_pct


def _overlap_fraction(minute: MinuteFigures, since_unix_s: float, until_unix_s: float) -> float:
    """The share of the row's span inside [since, until)."""
    span_s = minute.span_s if minute.span_s > 0 else 60.0
    start, end = minute.start_unix_s, minute.start_unix_s + span_s
    inside_s = min(end, until_unix_s) - max(start, since_unix_s)
    return max(0.0, min(1.0, inside_s / span_s))


def _model_shares(models: tuple[str, ...]) -> list[tuple[str | None, float]]:
    if not models:
        return [(None, 1.0)]
    counts = Counter(models)
    return [(model, n / len(models)) for model, n in sorted(counts.items())]


def runs_usage(details: Iterable[RunDetail], since_unix_s: float, until_unix_s: float) -> tuple[JobGpuUsage, ...]:
    """Each run's use of its GPUs (one item per GPU model it named) within [since, until); a run
    with no minute inside the window gives none."""
    out: list[JobGpuUsage] = []
    for detail in details:
        held = busy = energy = energy_held = 0.0
        energy_known = inside = False
        for m in detail.minutes:
            share = _overlap_fraction(m, since_unix_s, until_unix_s)
            if share <= 0.0:
                continue
            inside = True
            held += m.gpu_held_s * share
            busy += min(m.gpu_busy_s, m.gpu_held_s) * share
            if m.energy_j is not None:
                energy_known = True
                energy += m.energy_j * share
                energy_held += m.gpu_held_s * share
        if not inside:
            continue
        ident = detail.record.identity
        for model, part in _model_shares(detail.record.setup.gpu_models):
            out.append(
                JobGpuUsage(
                    job=ident.key,
                    job_id=ident.job_id,
                    host=ident.host,
                    user=ident.user,
                    uid=ident.uid,
                    slurm_job=ident.slurm_job,
                    pod=ident.pod,
                    command=ident.command,
                    gpu_model=model,
                    gpu_held_s=held * part,
                    gpu_busy_s=busy * part,
                    energy_j=energy * part if energy_known else None,
                    energy_held_s=energy_held * part,
                )
            )
    return tuple(out)


def user_name(usage: JobGpuUsage) -> str:
    if usage.user:
        return usage.user
    return f"uid {usage.uid}" if usage.uid is not None else UNKNOWN


def _key(usage: JobGpuUsage, by: str) -> str:
    if by == BY_USER:
        return user_name(usage)
    if by == BY_JOB:
        return usage.job
    return usage.gpu or usage.gpu_model or UNKNOWN


def _names(values: Iterable[str | None]) -> tuple[tuple[str, ...], int]:
    known = sorted({v for v in values if v})
    return tuple(known[:MAX_NAMES]), len(known)


def _row(key: str, items: list[JobGpuUsage], *, a_job: bool = False) -> UsageRow:
    """`a_job`: the row is one job's (--by job): its id and command are shown."""
    held_s = sum(u.gpu_held_s for u in items)
    busy_s = min(held_s, sum(u.gpu_busy_s for u in items))
    known = [u for u in items if u.energy_j is not None]
    energy_held_s = sum(u.energy_held_s for u in known)
    slurm, slurm_count = _names(u.slurm_job for u in items)
    pods, pod_count = _names(u.pod for u in items)
    first = items[0]
    return UsageRow(
        key=key,
        runs=len({u.job for u in items}),
        gpu_held_h=held_s / S_PER_H,
        gpu_busy_h=busy_s / S_PER_H,
        gpu_idle_held_h=max(0.0, held_s - busy_s) / S_PER_H,
        energy_kwh=sum(u.energy_j or 0.0 for u in known) / J_PER_KWH if known else None,
        energy_known_fraction=(min(1.0, energy_held_s / held_s) if held_s > 0 else None) if known else None,
        users=_names(user_name(u) for u in items)[0],
        slurm_jobs=slurm,
        slurm_job_count=slurm_count,
        pods=pods,
        pod_count=pod_count,
        hosts=_names(u.host for u in items)[0],
        gpu_models=_names(u.gpu_model for u in items)[0],
        job_id=first.job_id if a_job else None,
        command=first.command if a_job else (),
    )


def _order(row: UsageRow) -> tuple[float, float, str]:
    return (-row.gpu_idle_held_h, -row.gpu_held_h, row.key)


def account(usages: Iterable[JobGpuUsage], by: str, since_unix_s: float, until_unix_s: float) -> Accounting:
    """The usages grouped by `by` (user, job or gpu), the most GPU-hours held idle first, and their total."""
    if by not in GROUPINGS:
        raise ValueError(f"--by is one of {', '.join(GROUPINGS)}: {by!r}")
    items = list(usages)
    groups: dict[str, list[JobGpuUsage]] = {}
    for u in items:
        groups.setdefault(_key(u, by), []).append(u)
    rows = sorted((_row(key, group, a_job=by == BY_JOB) for key, group in groups.items()), key=_order)
    total = _row("total", items) if items else _empty_total()
    return Accounting(by, since_unix_s, until_unix_s, tuple(rows), total)


def _empty_total() -> UsageRow:
    return UsageRow(
        key="total", runs=0, gpu_held_h=0.0, gpu_busy_h=0.0, gpu_idle_held_h=0.0,
        energy_kwh=None, energy_known_fraction=None,
    )
