"""The report document (`dsh-sidecar report --json`, declared in contract_report.py) from the
accounting (sidecar/verdict/accounting.py). Every string in it came from a process or a ledger file
(a command, a user, a pod, a Slurm id): clipped here; the printers make them safe to show."""

from __future__ import annotations

from typing import Any

from sidecar.documents.bounds import clip, clip_args
from sidecar.verdict.accounting import Accounting, UsageRow


def _row(row: UsageRow) -> dict[str, Any]:
    return {
        "key": clip(row.key),
        "runs": row.runs,
        "gpu_held_h": row.gpu_held_h,
        "gpu_busy_h": row.gpu_busy_h,
        "gpu_idle_held_h": row.gpu_idle_held_h,
        "energy_kwh": row.energy_kwh,
        "energy_known_fraction": row.energy_known_fraction,
        "users": [clip(u) for u in row.users],
        "slurm_jobs": [clip(s) for s in row.slurm_jobs],
        "slurm_job_count": row.slurm_job_count,
        "pods": [clip(p) for p in row.pods],
        "pod_count": row.pod_count,
        "hosts": [clip(h) for h in row.hosts],
        "gpu_models": [clip(m) for m in row.gpu_models],
        "job_id": None if row.job_id is None else clip(row.job_id),
        "command": clip_args(row.command),
    }


def report_document(accounting: Accounting, *, schema: int, source: str, location: str, now_unix_s: float) -> dict[str, Any]:
    return {
        "schema": schema,
        "time_unix_s": now_unix_s,
        "source": source,
        "location": clip(location),
        "since_unix_s": accounting.since_unix_s,
        "until_unix_s": accounting.until_unix_s,
        "by": accounting.by,
        "rows": [_row(r) for r in accounting.rows],
        "total": _row(accounting.total),
    }
