"""The cluster view's PromQL: one instant query per field of ClusterAnswers
(sidecar/common/cluster_answers.py), over the metric names the exporter writes
(sidecar/common/metric_names.py, the one definition sidecar/serve/metrics.py writes them by), asked
of one Prometheus at one instant and handed up typed.
"""

from __future__ import annotations

from sidecar.common import metric_names as names
from sidecar.common.cluster_answers import STRAGGLER_CONFIRM_S, ClusterAnswers
from sidecar.sources.prometheus import PrometheusApi

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
