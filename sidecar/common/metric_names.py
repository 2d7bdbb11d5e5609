"""The names of the metrics that are both exported (sidecar/serve/metrics.py writes them) and read
back through Prometheus (the cluster view's queries, sidecar/sources/prometheus_queries.py): one
definition each, so the two cannot drift apart. docs/metrics.md describes them."""

from __future__ import annotations

SIDECAR_INFO = "dsh_sidecar_info"
SIDECAR_LAST_POLL = "dsh_sidecar_last_poll_timestamp_seconds"
JOB_INFO = "dsh_job_info"
STATUS = "dsh_status"
RANK_INFO = "dsh_rank_info"
PROCESS_STEP_FRACTION = "dsh_process_step_fraction"
RANK_BACKWARD_FRACTION = "dsh_rank_backward_fraction"
RANK_WINDOW_STEPS = "dsh_rank_window_steps"
MODEL_FORWARD_CALLS = "dsh_model_forward_calls"  # a counter: exposed and queried as ..._total
PROCESS_GPU_MEMORY = "dsh_process_gpu_memory_used_bytes"
GPU_UTILIZATION = "dsh_gpu_utilization_percent"
GPU_MEMORY_USED = "dsh_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "dsh_gpu_memory_total_bytes"
GPU_SM_CLOCK = "dsh_gpu_sm_clock_hz"
GPU_SM_ACTIVITY = "dsh_gpu_sm_activity_ratio"
GPU_CLOCK_EVENT_ACTIVE = "dsh_gpu_clock_event_active"
GPU_POWER = "dsh_gpu_power_watts"
# A job's hold on a GPU (1 while its processes have memory there) and whether the GPU works meanwhile
# (1: utilisation at or above the idle threshold, 0: held with no work): what the accounting rules of
# deploy/dsh-accounting.yml integrate into GPU-seconds, and what DshGpuHeldIdle alerts on.
JOB_GPU_HELD = "dsh_job_gpu_held"
JOB_GPU_BUSY = "dsh_job_gpu_busy"
