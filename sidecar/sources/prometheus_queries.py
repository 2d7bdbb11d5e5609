"""The cluster view's PromQL: one instant query per field of ClusterAnswers
(sidecar/common/cluster_answers.py), over the metric names the exporter writes
(sidecar/common/metric_names.py, the one definition sidecar/serve/metrics.py writes them by), asked
of one Prometheus at one instant and handed up typed.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.common import metric_names as names
from sidecar.common.cluster_answers import STRAGGLER_CONFIRM_S, ClusterAnswers
from sidecar.common.usage import JobGpuUsage
from sidecar.sources.prometheus import PrometheusApi, PrometheusError, Sample

LOOK_BACK = "10m"  # a node that reported within this and no longer does is `node-missing`

# ClusterAnswers's field -> its PromQL, in the fields' order (tests/unit/test_cluster_view.py: one query a
# field, no more). Every answer is a vector.
CLUSTER_QUERIES: dict[str, str] = {
    "sidecars": names.SIDECAR_INFO,
    "sidecars_recent": f"max_over_time({names.SIDECAR_INFO}[{LOOK_BACK}])",
    "up": "up",
    "poll_age_s": f"time() - {names.SIDECAR_LAST_POLL}",
    "jobs": names.JOB_INFO,
    "jobs_recent": f"max_over_time({names.JOB_INFO}[{LOOK_BACK}])",
    "status": f"{names.STATUS} == 1",
    "ranks": names.RANK_INFO,
    "step_fraction": names.PROCESS_STEP_FRACTION,
    "rank_backward": names.RANK_BACKWARD_FRACTION,
    "rank_steps": names.RANK_WINDOW_STEPS,
    "rank_backward_before": f"{names.RANK_BACKWARD_FRACTION} offset {STRAGGLER_CONFIRM_S}s",
    "rank_steps_before": f"{names.RANK_WINDOW_STEPS} offset {STRAGGLER_CONFIRM_S}s",
    "forward_rate": f"sum without (model) (rate({names.MODEL_FORWARD_CALLS}_total[1m]))",
    "rank_gpu_mem": names.PROCESS_GPU_MEMORY,
    "gpu_util": names.GPU_UTILIZATION,
    "gpu_mem_used": names.GPU_MEMORY_USED,
    "gpu_mem_total": names.GPU_MEMORY_TOTAL,
    "gpu_sm_clock": names.GPU_SM_CLOCK,
    "gpu_sm_activity": names.GPU_SM_ACTIVITY,
    "gpu_clock_events": f"{names.GPU_CLOCK_EVENT_ACTIVE} == 1",
}


def read_cluster_answers(api: PrometheusApi, at_unix_s: float) -> tuple[ClusterAnswers, int | None]:
    """Every query of the cluster view evaluated at ``at_unix_s``, within the api's one timeout for
    all of them: the answers, and the uid of the process that served them (None: another host).
    Raises PrometheusError (sidecar/sources/prometheus.py) when Prometheus does not answer them all."""
    answers = api.query_all(CLUSTER_QUERIES, at_unix_s=at_unix_s)
    return ClusterAnswers(**answers.results), answers.server_uid


# -- GPU-hours accounted over a fleet (`dsh-sidecar report --prometheus`) ---------------------------------
# The recording rules of deploy/dsh-accounting.yml (tests/unit/test_accounting_rules.py keeps the file
# and these names equal). Each holds what a job used of a GPU in the rules' interval (a minute), so a
# window's total is the sum of its values, whatever the interval.
HELD_RULE = "dsh:job_gpu_held_seconds:increase1m"  # GPU-seconds the job held the GPU
BUSY_RULE = "dsh:job_gpu_busy_seconds:increase1m"  # of those, with work
ENERGY_RULE = "dsh:job_gpu_energy_joules:increase1m"  # the GPU's energy while held (from its power)
JOB_INFO_RULE = "dsh:job_info:max_over_time1m"  # dsh_job_info, kept each minute
ACCOUNTING_RULES = (HELD_RULE, BUSY_RULE, ENERGY_RULE, JOB_INFO_RULE)
# How far back a report looks for any sign that the rules are loaded, when its window has no series.
ACCOUNTING_LOOK_BACK = "90d"


def accounting_queries(window_s: float) -> dict[str, str]:
    """The report's PromQL over the `window_s` seconds before the instant it is asked at. A value at
    time t is the minute up to t: those in (start, end] are the window's. Prometheus 2 includes a
    range's start, 3 does not: a millisecond less is the same window for both."""
    w = f"[{max(1, round(window_s * 1000) - 1)}ms]"
    return {
        "held": f"sum_over_time({HELD_RULE}{w})",
        "held_minutes": f"count_over_time({HELD_RULE}{w})",
        "busy": f"sum_over_time({BUSY_RULE}{w})",
        "energy": f"sum_over_time({ENERGY_RULE}{w})",
        "energy_minutes": f"count_over_time({ENERGY_RULE}{w})",
        "info": f"last_over_time({JOB_INFO_RULE}{w})",
    }


def _where(labels: Mapping[str, str]) -> tuple[str, str]:
    """(instance, job): a series' target and the job it is of (the user's, with --metrics-per-user)."""
    return labels.get("instance", ""), labels.get("job_id") or labels.get("user", "")


def _node(labels: Mapping[str, str]) -> str:
    return labels.get("node") or labels.get("instance") or "?"


def _uid(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def fleet_usage(answers: Mapping[str, list[Sample]]) -> tuple[JobGpuUsage, ...]:
    """The answers of accounting_queries as one JobGpuUsage per job and GPU; jobs named by their
    latest dsh_job_info (user, uid, pod, Slurm job where a sidecar exports one)."""
    info = {_where(s.labels): s.labels for s in answers["info"]}

    def by_series(name: str) -> dict[tuple[str, ...], float]:
        return {(*_where(s.labels), s.labels.get("gpu", "")): s.value for s in answers[name] if s.value == s.value}

    minutes, busy = by_series("held_minutes"), by_series("busy")
    energy, energy_minutes = by_series("energy"), by_series("energy_minutes")
    out: list[JobGpuUsage] = []
    for s in answers["held"]:
        key = (*_where(s.labels), s.labels.get("gpu", ""))
        if s.value != s.value:  # NaN: a sample that was no number
            continue
        job = info.get(key[:2], {})
        held_s = s.value
        # the share of the held minutes whose energy is known (a GPU whose power NVML stopped giving)
        known = min(1.0, energy_minutes.get(key, 0.0) / minutes[key]) if minutes.get(key) else 0.0
        namespace, pod = job.get("namespace"), job.get("pod")
        out.append(
            JobGpuUsage(
                job=f"{_node(s.labels)}/{key[1]}",
                job_id=s.labels.get("job_id"),
                host=_node(s.labels),
                user=job.get("user") or s.labels.get("user") or None,
                uid=_uid(job.get("uid")),
                slurm_job=job.get("slurm_job") or None,
                pod=f"{namespace}/{pod}" if namespace and pod else (pod or None),
                gpu=f"{_node(s.labels)}/{key[2]}" if key[2] else None,
                gpu_model=s.labels.get("name") or None,
                gpu_held_s=held_s,
                gpu_busy_s=min(held_s, busy.get(key, 0.0)),
                energy_j=energy.get(key),
                energy_held_s=held_s * known,
            )
        )
    return tuple(out)


def read_fleet_usage(api: PrometheusApi, since_unix_s: float, until_unix_s: float) -> tuple[JobGpuUsage, ...]:
    """Every job's use of every GPU in [since, until) as the fleet's Prometheus recorded it (its
    recording rules, deploy/dsh-accounting.yml). Raises PrometheusError when it does not answer, or
    has none of the rules' series (they are not loaded)."""
    answers = api.query_all(accounting_queries(until_unix_s - since_unix_s), at_unix_s=until_unix_s)
    if not answers.results["held"]:
        # Nothing held in the window is an answer, unless Prometheus has not recorded the rule lately at all.
        ever = api.query(f"count(last_over_time({HELD_RULE}[{ACCOUNTING_LOOK_BACK}]))", at_unix_s=until_unix_s)
        if not ever:
            raise PrometheusError(
                f"Prometheus at {api.url} has no {HELD_RULE} series in the last {ACCOUNTING_LOOK_BACK}: load "
                "deploy/dsh-accounting.yml into it (rule_files, docs/deploy.md)"
            )
    return fleet_usage(answers.results)
