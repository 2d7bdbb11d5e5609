"""What Prometheus answered for the cluster view, typed: one field per query of the view, each that
query's samples (a series' labels and its value at the view's instant).

The Prometheus source asks the queries (sidecar/sources/prometheus_queries.py holds their PromQL, one
a field of ClusterAnswers) and hands this up; the cluster document (sidecar/documents/cluster.py)
reads it. Neither imports the other: this is the vocabulary they share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# One query's answer: each series' labels (the target's instance, job and node, the series' own)
# and its value, NaN for a value that is not a finite number.
Samples = Sequence[tuple[Mapping[str, str], float]]

# A cross-node straggler is named only when the same rank was the straggler this long before too:
# three scrapes at the shipped 5 s interval, so two different samples of every rank. The ``_before``
# answers are the series this long before the view's instant.
STRAGGLER_CONFIRM_S = 15


@dataclass(frozen=True, slots=True)
class ClusterAnswers:
    """Every answer of the cluster view (an absent one: no series)."""

    sidecars: Samples = ()  # the sidecars that report now (dsh_sidecar_info)
    sidecars_recent: Samples = ()  # the sidecars that reported within the look-back window
    up: Samples = ()  # Prometheus's own `up` of each target: 0 when its scrape fails
    poll_age_s: Samples = ()  # seconds since each sidecar's last poll
    jobs: Samples = ()  # each job a sidecar reports now (dsh_job_info)
    jobs_recent: Samples = ()  # each job reported within the look-back window
    status: Samples = ()  # each job's status, the one series of value 1
    ranks: Samples = ()  # each rank of each job (dsh_rank_info)
    step_fraction: Samples = ()  # each process's share of its step in each phase
    rank_backward: Samples = ()  # each rank's backward share now
    rank_steps: Samples = ()  # the steps each rank's window holds now
    rank_backward_before: Samples = ()  # each rank's backward share STRAGGLER_CONFIRM_S ago
    rank_steps_before: Samples = ()  # the steps each rank's window held STRAGGLER_CONFIRM_S ago
    forward_rate: Samples = ()  # each process's forward calls a second, over its models
    rank_gpu_mem: Samples = ()  # each process's memory on each GPU (bytes)
    gpu_util: Samples = ()  # each GPU's utilisation (percent)
    gpu_mem_used: Samples = ()  # bytes
    gpu_mem_total: Samples = ()  # bytes
    gpu_sm_clock: Samples = ()  # Hz
    gpu_sm_activity: Samples = ()  # a ratio 0-1
    gpu_clock_events: Samples = ()  # each clock event reason active on each GPU, the series of value 1
