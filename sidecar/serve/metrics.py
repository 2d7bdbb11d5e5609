"""Prometheus exposition of the latest poll: a custom collector that reads what the poller
published, so a scrape never triggers a poll (scrapes cost the job nothing).

Every job-level figure comes from one status document, the one `GET /api/dsh-gpu-dashboard/status`
serves for the same poll; `dsh_sidecar_last_poll_timestamp_seconds` is that document's `time`, so a
scrape can be matched with the document it was made from. The metric names, labels and their
meaning are listed in docs/metrics.md.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from sidecar import __version__
from sidecar.common import metric_names as names
from sidecar.common.nvml_names import CLOCK_EVENT_REASONS
from sidecar.documents.bounds import (
    MAX_LABEL_CHARS,
    MAX_METRIC_JOBS,
    MAX_METRIC_MODELS,
    MAX_METRIC_PROCESS_KEYS,
    MAX_METRIC_WARNINGS,
    METRICS_MIN_JOB_AGE_S,
    clip,
)
from sidecar.documents.document import fair_share
from sidecar.verdict import STATUSES, Rules
from sidecar.verdict.accounting import gpu_works

MIB = 1048576
# The classic text format, which every Prometheus reads. prometheus_client 0.22+ labels the same
# bytes "version=1.0.0" (UTF-8 names); the names here are all legacy ones, so 0.0.4 is exact.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A poll is a few ms (one /proc walk, one segment read per process, a handful of NVML calls); the
# top buckets catch a stalled driver.
POLL_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Sources the poller counts failures for (sidecar/poll/poller.py); always exported, 0 until one fails.
ERROR_SOURCES = ("proctree", "probe", "nvml", "sysfs", "poll")

# A GPU is the machine's, not a job's: no job_id. `vendor`: nvidia, amd or intel (the status
# document's Gpu.vendor): AMD and Intel GPUs have series of what is read of them.
GPU_LABELS = ["gpu", "uuid", "name", "vendor"]
# Per-job series carry the job's id (`<root pid>-<root start ticks>`, the status document's job_id):
# one sidecar per node covers every job on it (discovery), and --pid series look the same. No
# per-process series has a `pid`: DataLoader workers and launched helpers get a new pid every epoch or
# call, and every pid would be a new series for Prometheus to keep; processes of a job that share
# the other labels are summed (memory, SM use, forward calls) or averaged (step shares).
PROCESS_GPU_LABELS = ["job_id", "role", "gpu", "rank"]
MODEL_INFO_LABELS = ["job_id", "model", "device", "rank"]
MODEL_CALLS_LABELS = ["job_id", "model", "rank"]
RANK_LABELS = ["job_id", "rank", "local_rank", "world_size"]
STATUS_LABELS = ["job_id", "status"]
STEP_LABELS = ["job_id", "role", "rank", "phase"]
RANK_WAIT_LABELS = ["job_id", "rank"]  # no node, no GPU: the rank names them (dsh_rank_info, the pod)
# One series per job with what describes it, so the per-process series need not repeat it: where it
# runs too (its distributed run's key, the same on every node, and its pod), which the high-rate
# series get through a join on job_id rather than as labels of their own.
JOB_INFO_LABELS = ["job_id", "root_pid", "user", "process"]
JOB_INFO_LABELS += [
    "job_key",
    "job_key_source",
    "world_size",
    "node_rank",
    "hostname",
    "namespace",
    "pod",
    "container",
]
# The run's owner (its root's real uid): a job key is anyone's to set, so a run across nodes is
# (job_key, uid) (sidecar/documents/cluster.py); empty, as job_key, for a job that is no run.
JOB_INFO_LABELS += ["uid"]
# What named the pod (the document's pod.source): a self-reported name is the process's claim.
JOB_INFO_LABELS += ["pod_source"]
# Its Slurm job (the jobs list's slurm_job): what `dsh-sidecar report --prometheus` keys runs by.
JOB_INFO_LABELS += ["slurm_job"]
# The GPU's efficiency gauges: (metric, help, Gpu field in the status document, scale to the unit).
GPU_EFFICIENCY_GAUGES = (
    (names.GPU_SM_CLOCK, "SM clock (NVML).", "sm_clock_mhz", 1e6),
    (names.GPU_POWER, "Power draw (NVML).", "power_w", 1.0),
    ("dsh_gpu_power_limit_watts", "Enforced power limit (NVML).", "power_limit_w", 1.0),
    ("dsh_gpu_temperature_celsius", "GPU temperature (NVML).", "temperature_c", 1.0),
    ("dsh_gpu_pcie_link_generation", "PCIe link generation now (NVML).", "pcie_link_gen", 1.0),
    ("dsh_gpu_pcie_link_width", "PCIe link width now, lanes (NVML).", "pcie_link_width", 1.0),
    (
        names.GPU_SM_ACTIVITY,
        "Share of SMs busy, 0-1 (NVML GPM, Hopper and newer).",
        "sm_activity_fraction",
        1.0,
    ),
    (
        "dsh_gpu_sm_occupancy_ratio",
        "Resident warps over the maximum, 0-1 (NVML GPM).",
        "sm_occupancy_fraction",
        1.0,
    ),
    (
        "dsh_gpu_tensor_activity_ratio",
        "Share of time tensor cores worked, 0-1 (NVML GPM).",
        "tensor_activity_fraction",
        1.0,
    ),
    (
        "dsh_gpu_dram_activity_ratio",
        "DRAM bandwidth used over its peak, 0-1 (NVML GPM).",
        "dram_activity_fraction",
        1.0,
    ),
)
STEP_PHASES = ("data_wait", "forward", "optimizer", "other")  # StepBreakdown's <phase>_fraction
# A job's hold on a GPU: the GPU's identity rides along (no series of its own: one per job and GPU).
JOB_GPU_LABELS = ["job_id", "gpu", "uuid", "name", "vendor"]
WARNING_LABELS = ["job_id", "code", "severity"]


def _text(x: Any) -> str:
    """A label value: "" for None (Prometheus treats an empty label as an absent one), clipped to
    MAX_LABEL_CHARS (a process chooses its model names)."""
    return "" if x is None else clip(str(x), MAX_LABEL_CHARS)


class _Family:
    """A metric family whose samples are folded by label set: Prometheus rejects a whole scrape that
    repeats a series, and processes of one job that share every label make one series. `how` says
    how: "first" keeps the first value (info series), "sum" adds them (memory, SM use, calls),
    "mean" averages them (shares of a step, each 0-1)."""

    def __init__(self, family: GaugeMetricFamily | CounterMetricFamily, extra: list[str], how: str = "first"):
        self._metric = family
        self.extra = extra
        self.how = how
        self._values: dict[tuple[str, ...], list[float]] = {}  # label set -> [total, count]

    def add(self, values: Iterable[Any], value: float) -> None:
        key = (*(_text(v) for v in values), *self.extra)
        seen = self._values.get(key)
        if seen is None:
            self._values[key] = [float(value), 1]
        elif self.how != "first":
            seen[0] += float(value)
            seen[1] += 1

    @property
    def family(self) -> GaugeMetricFamily | CounterMetricFamily:
        for key, (total, n) in self._values.items():
            self._metric.add_metric(list(key), total / n if self.how == "mean" else total)
        self._values = {}
        return self._metric


class SidecarCollector:
    """Reads `poller.snapshot()` (the latest status document and its poll time), `poll_count`,
    `poll_durations_s` (the last 1000 poll durations) and `poll_errors` (a Counter by source).

    `min_job_age_s`: a job younger than this has no per-job series yet (a stream of short jobs adds
    none); `per_user`: the per-job families are labelled by `user` instead of `job_id` and summed
    (or averaged) over each user's jobs, with no `dsh_job_info` and no counters (a sum of counters
    would drop as a job ends): a fleet's series then do not grow with its jobs at all."""

    def __init__(
        self,
        poller: Any,
        job_name: str | None = None,
        max_jobs: int = MAX_METRIC_JOBS,
        *,
        min_job_age_s: float = METRICS_MIN_JOB_AGE_S,
        per_user: bool = False,
    ):
        self.poller = poller
        self.max_jobs = max_jobs
        self.min_job_age_s = min_job_age_s
        self.per_user = per_user
        self.job_name = job_name or None  # "" is no name: an empty label is an absent one
        # The verdict's idle threshold (DSH_SIDECAR_RULES may tune it): a held GPU below it has no work.
        self.idle_util_pct = float(
            getattr(getattr(poller, "rules", None), "idle_util_pct", Rules().idle_util_pct)
        )
        self._lock = threading.Lock()  # waitress serves scrapes on several threads
        self._bucket_counts = [0] * (len(POLL_BUCKETS_S) + 1)  # the last one is +Inf
        self._sum_s = 0.0  # the count is the +Inf bucket
        self._seen_polls = 0

    # -- helpers ---------------------------------------------------------------------------------
    def _label_names(self, names: list[str]) -> list[str]:
        return [*names, "job_name"] if self.job_name is not None else list(names)

    def _extra(self) -> list[str]:
        return [self.job_name] if self.job_name is not None else []

    def _gauge(self, name: str, doc: str, labels: list[str], how: str = "first") -> _Family:
        return _Family(GaugeMetricFamily(name, doc, labels=self._label_names(labels)), self._extra(), how)

    def _job_counter(self, name: str, doc: str, labels: list[str], how: str = "first") -> _Family:
        names = ["user", *labels[1:]] if self.per_user else labels
        return self._counter(name, doc, names, how)

    def _job_gauge(
        self, name: str, doc: str, labels: list[str], how: str = "first", per_user_how: str = ""
    ) -> _Family:
        """A per-job family: labelled by `user` instead of `job_id` with --metrics-per-user, where the
        jobs of one user fold together `per_user_how` (default: as `how`)."""
        if self.per_user:
            return self._gauge(name, doc, ["user", *labels[1:]], per_user_how or how)
        return self._gauge(name, doc, labels, how)

    def _counter(self, name: str, doc: str, labels: list[str], how: str = "first") -> _Family:
        # CounterMetricFamily appends `_total` to the sample name: `name` is given without it.
        return _Family(CounterMetricFamily(name, doc, labels=self._label_names(labels)), self._extra(), how)

    def _observe_new_polls(self) -> None:
        """Fold the durations of the polls since the last scrape into the cumulative histogram.

        The poller keeps the last 1000 durations and counts every poll; reading both under its lock
        tells which entries are new, so the list is never modified here and concurrent scrapes (or a
        second collector) do not steal each other's observations. Polls older than the last 1000
        (a scrape gap of over 1000 intervals) are not in the histogram."""
        lock = getattr(self.poller, "_lock", None)
        with lock if lock is not None else contextlib.nullcontext():
            total = int(getattr(self.poller, "poll_count", 0))
            durations = list(getattr(self.poller, "poll_durations_s", ()))
        new = total - self._seen_polls
        if new < 0:  # a different poller object or a reset: start over
            new = total
        self._seen_polls = total
        for d in durations[len(durations) - min(new, len(durations)) :]:
            self._sum_s += d
            for i, bound in enumerate(POLL_BUCKETS_S):
                if d <= bound:
                    self._bucket_counts[i] += 1
                    break
            else:
                self._bucket_counts[-1] += 1

    # -- the collector -----------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        doc, last_poll = self.poller.snapshot()
        with self._lock:  # built whole under the lock: a generator must not hold it across yields
            own = list(self._self_metrics(doc, last_poll))
        yield from own
        if doc is not None:
            # Discovery: every job's document (they share the GPUs); --pid: the one.
            # An exited job stays in discovery's list for --history seconds (an hour in deploy/'s unit);
            # its last verdict is not exported meanwhile, or DshModelOnCpu and DshJobError would keep
            # firing for a job that ended. (--pid exports the final state: the sidecar exits after --grace.)
            docs = (
                [d for d in self.poller.documents() if (d.get("target") or {}).get("alive", True)]
                if hasattr(self.poller, "documents")
                else [doc]
            )
            yield from self._gpu_metrics(doc)
            yield from self._job_metrics(docs)
        elif hasattr(self.poller, "gpus_document"):
            # Discovery on a node that runs no job: its GPUs are still exported (Grafana's GPU panels
            # and the temperature and throttling alerts do not go blank between jobs).
            gpus = self.poller.gpus_document()
            if gpus is not None:
                yield from self._gpu_metrics(gpus)

    def _self_metrics(self, doc: dict[str, Any] | None, last_poll: float | None) -> Iterator[Metric]:
        info = self._gauge(names.SIDECAR_INFO, "The sidecar's version (always 1).", ["version"])
        info.add([__version__], 1)
        yield info.family

        stamp = self._gauge(
            names.SIDECAR_LAST_POLL,
            "UNIX time of the poll these metrics come from: the status document's `time_unix_s`.",
            [],
        )
        when = doc.get("time_unix_s") if doc is not None else None
        if when is None:
            when = last_poll
        if when is not None:
            stamp.add([], when)
        yield stamp.family

        self._observe_new_polls()
        cumulative, buckets = 0, []
        for bound, n in zip([*(repr(float(b)) for b in POLL_BUCKETS_S), "+Inf"], self._bucket_counts):
            cumulative += n
            buckets.append((bound, cumulative))
        hist = HistogramMetricFamily(
            "dsh_sidecar_poll_duration_seconds",
            "Wall time of one poll of all sources.",
            labels=self._label_names([]),
        )
        hist.add_metric(self._extra(), buckets, self._sum_s)
        yield hist

        errors = self._counter(
            "dsh_sidecar_poll_errors", "Polls in which a source failed, by source.", ["source"]
        )
        counts = dict(getattr(self.poller, "poll_errors", {}) or {})
        for source in (*ERROR_SOURCES, *sorted(set(counts) - set(ERROR_SOURCES))):
            errors.add([source], counts.get(source, 0))
        yield errors.family

    def _gpu_metrics(self, doc: dict[str, Any]) -> Iterator[Metric]:
        util = self._gauge(
            names.GPU_UTILIZATION, "GPU utilisation, 0-100 (NVML; AMD and Intel: where read).", GPU_LABELS
        )
        used = self._gauge(
            names.GPU_MEMORY_USED, "GPU memory in use (NVML; AMD and Intel: where read).", GPU_LABELS
        )
        total = self._gauge(
            names.GPU_MEMORY_TOTAL, "GPU memory in all (NVML; AMD and Intel: where read).", GPU_LABELS
        )
        for g in doc.get("gpus") or ():
            labels = [g.get("index"), g.get("uuid"), g.get("name"), g.get("vendor")]
            if g.get("util_pct") is not None:
                util.add(labels, g["util_pct"])
            if g.get("mem_used_mib") is not None:
                used.add(labels, g["mem_used_mib"] * MIB)  # exact: the document's MiB are bytes / 2^20
            if g.get("mem_total_mib") is not None:
                total.add(labels, g["mem_total_mib"] * MIB)
        yield from (util.family, used.family, total.family)
        yield from self._gpu_efficiency_metrics(doc)

    def _gpu_efficiency_metrics(self, doc: dict[str, Any]) -> Iterator[Metric]:
        gauges = [
            (self._gauge(name, help, GPU_LABELS), key, scale)
            for name, help, key, scale in GPU_EFFICIENCY_GAUGES
        ]
        events = self._gauge(
            names.GPU_CLOCK_EVENT_ACTIVE,
            "1 while NVML reports this clock event reason (what holds the clocks down), else 0.",
            [*GPU_LABELS, "reason"],
        )
        for g in doc.get("gpus") or ():
            labels = [g.get("index"), g.get("uuid"), g.get("name"), g.get("vendor")]
            for family, key, scale in gauges:
                if g.get(key) is not None:  # unsupported is absent, never 0
                    family.add(labels, g[key] * scale)
            active = g.get("clock_event_reasons")
            if active is not None:
                for _, reason in CLOCK_EVENT_REASONS:
                    events.add([*labels, reason], 1 if reason in active else 0)
        yield from (family.family for family, _, _ in gauges)
        yield events.family

    def _job_metrics(self, docs: list[dict[str, Any]]) -> Iterator[Metric]:
        # A job gets series once it has lived min_job_age_s: a short job is gone before a scrape
        # could carry its figures, and each would be series of its own for Prometheus to keep.
        grown = [d for d in docs if _job_age_s(d) >= self.min_job_age_s]
        shown = grown if self.per_user else exported_jobs(grown, self.max_jobs)
        omitted = self._gauge(
            "dsh_jobs_omitted",
            "Live jobs with no per-job series: over --metrics-max-jobs (the oldest are exported).",
            [],
        )
        omitted.add([], len(grown) - len(shown))
        f = self._job_families()
        entries = {j.get("id"): j for d in docs[:1] for j in d.get("jobs") or ()}
        for doc in shown:
            entry = entries.get(doc.get("job_id")) or {}
            user = entry.get("user") or entry.get("uid")
            self._one_job(
                doc, (user, entry.get("slurm_job")), f, user if self.per_user else doc.get("job_id")
            )
        if self.per_user:  # per job by nature (info) or not summable (a counter drops as a job ends)
            del f["job"], f["mcalls"]
        yield omitted.family
        yield from (family.family for family in f.values())

    def _job_families(self) -> dict[str, _Family]:
        """The per-job families, empty, by the short name `_one_job` fills them through."""
        return {
            "job": self._job_gauge(
                names.JOB_INFO,
                "A live job and what describes it (always 1): its root's pid, user and process name, its "
                "distributed run (key and owner uid, world size, node rank, host), its Kubernetes pod and its "
                "Slurm job.",
                JOB_INFO_LABELS,
            ),
            "pmem": self._job_gauge(
                names.PROCESS_GPU_MEMORY,
                "GPU memory used by the job's processes of one role and rank, per GPU (NVML; AMD and Intel: DRM, KFD).",
                PROCESS_GPU_LABELS,
                "sum",
            ),
            "psm": self._job_gauge(
                "dsh_process_gpu_sm_utilization_percent",
                "SM utilisation of the job's processes of one role and rank, per GPU, 0-100 (NVML; AMD and Intel: the busiest DRM engine).",
                PROCESS_GPU_LABELS,
                "sum",
            ),
            "minfo": self._job_gauge(
                "dsh_model_info", "A registered model and the device it is on (always 1).", MODEL_INFO_LABELS
            ),
            "mcalls": self._job_counter(
                names.MODEL_FORWARD_CALLS,
                "Forward calls of a registered model, summed over the rank's processes.",
                MODEL_CALLS_LABELS,
                "sum",
            ),
            "rinfo": self._job_gauge(
                names.RANK_INFO,
                "A torch.distributed rank of the job (a process with role 'rank'; always 1).",
                RANK_LABELS,
            ),
            "status": self._job_gauge(
                names.STATUS,
                "The verdict, one-hot over GPU/CPU/MIXED/UNKNOWN (--metrics-per-user: the user's jobs with it).",
                STATUS_LABELS,
                per_user_how="sum",
            ),
            "warn": self._job_gauge(
                "dsh_warning_active",
                "A warning of the verdict that is active now (always 1; --metrics-per-user: the user's jobs with it).",
                WARNING_LABELS,
                per_user_how="sum",
            ),
            "rwait": self._job_gauge(
                "dsh_rank_collective_wait_fraction",
                "Share of the rank's training step spent waiting in the collectives for the slowest "
                "rank, 0-1 (its backward beyond the least of this node's ranks; the slowest waits least).",
                RANK_WAIT_LABELS,
            ),
            "rbackward": self._job_gauge(
                names.RANK_BACKWARD_FRACTION,
                "Share of the rank's training step between optimizer steps less forward and data wait: "
                "backward and the collectives, 0-1. Across nodes, the rank with the least is the one the "
                "others wait for.",
                RANK_WAIT_LABELS,
            ),
            "rsteps": self._job_gauge(
                names.RANK_WINDOW_STEPS,
                "Training steps in the probe's window that the rank's step fractions are measured over.",
                RANK_WAIT_LABELS,
            ),
            "phase": self._job_gauge(
                names.PROCESS_STEP_FRACTION,
                "Share of the training-step wall time in each phase over the probe's window, 0-1, "
                "averaged over the job's processes of one role and rank.",
                STEP_LABELS,
                "mean",
            ),
            **self._hold_families(),
        }

    def _hold_families(self) -> dict[str, _Family]:
        """The job's hold on each GPU (the accounting's: deploy/dsh-accounting.yml)."""
        return {
            "held": self._job_gauge(
                names.JOB_GPU_HELD,
                "1 while the job's processes hold memory on the GPU (--metrics-per-user: the user's jobs that do).",
                JOB_GPU_LABELS,
                per_user_how="sum",
            ),
            "busy": self._job_gauge(
                names.JOB_GPU_BUSY,
                "Of a GPU the job holds: 1 while its utilisation is at or above the idle threshold, 0 while it "
                "is held with no work; absent where the utilisation is unknown.",
                JOB_GPU_LABELS,
                per_user_how="sum",
            ),
        }

    def _one_job(
        self, doc: dict[str, Any], owner: tuple[Any, str | None], f: dict[str, _Family], job: Any
    ) -> None:
        """One job's series, within the per-job bounds (series_bound); `owner` is (its user, its
        Slurm job) from its jobs-list entry; `job` is the value of the families' first label (the
        job's id, or its user's name with --metrics-per-user)."""
        user, slurm_job = owner
        target = doc.get("target") or {}
        run = doc.get("distributed") or {}
        pod = doc.get("pod") or {}
        f["job"].add(
            [
                job,
                target.get("pid"),
                user,
                target.get("name"),
                run.get("job_key"),
                run.get("job_key_source"),
                run.get("world_size"),
                run.get("node_rank"),
                run.get("hostname"),
                pod.get("namespace"),
                pod.get("pod"),
                pod.get("container"),
                run.get("uid"),
                pod.get("source"),
                slurm_job,
            ],
            1,
        )
        keys: set[tuple[str, str]] = set()
        models: set[tuple[str, str]] = set()
        ranks: set[str] = set()
        for p in doc.get("processes") or ():
            rank = p.get("rank")
            key = (_text(p.get("role")), _text(rank))
            if key not in keys and len(keys) >= MAX_METRIC_PROCESS_KEYS:
                continue  # a process claiming yet another role or rank: the status document has it
            keys.add(key)
            for g in p.get("gpu") or ():
                labels = [job, p.get("role"), g.get("index"), rank]
                if g.get("mem_used_mib") is not None:
                    f["pmem"].add(labels, g["mem_used_mib"] * MIB)
                if g.get("sm_util_pct") is not None:
                    f["psm"].add(labels, g["sm_util_pct"])
            for name, m in model_labels(p.get("models") or ()):
                if (name, key[1]) not in models:
                    if len(models) >= MAX_METRIC_MODELS:
                        continue
                    models.add((name, key[1]))
                    # One device per (model, rank): processes of a rank that disagree keep the first.
                    f["minfo"].add([job, name, m.get("device"), rank], 1)
                f["mcalls"].add([job, name, rank], m.get("forward_calls") or 0)
            if p.get("role") == "rank" and key[1] not in ranks:
                ranks.add(key[1])
                self._one_rank(job, p, f)
            for name in STEP_PHASES:
                share = (p.get("step_breakdown") or {}).get(f"{name}_fraction")
                if share is not None:
                    f["phase"].add([job, p.get("role"), rank, name], share)
        self._job_gpus(doc, job, f)
        for w in (doc.get("rank_waits") or ())[:MAX_METRIC_PROCESS_KEYS]:
            f["rwait"].add([job, w.get("rank")], w.get("collective_wait_fraction"))
        for s in STATUSES:
            f["status"].add([job, s], 1 if doc.get("status") == s else 0)
        for w in (doc.get("warnings") or ())[:MAX_METRIC_WARNINGS]:  # most severe first
            f["warn"].add([job, w.get("code"), w.get("severity")], 1)

    def _job_gpus(self, doc: dict[str, Any], job: Any, f: dict[str, _Family]) -> None:
        """The GPUs the job holds (a process of it listed on the GPU: the driver lists a process where
        it has a context, which holds memory) and whether each works: the GPU's utilisation, else its
        GPM SM activity, against the idle threshold."""
        held = {g.get("index") for p in doc.get("processes") or () for g in p.get("gpu") or ()}
        for g in doc.get("gpus") or ():
            if g.get("index") not in held:
                continue
            labels = [job, g.get("index"), g.get("uuid"), g.get("name"), g.get("vendor")]
            f["held"].add(labels, 1)
            busy = gpu_works(g.get("util_pct"), g.get("sm_activity_fraction"), self.idle_util_pct)
            if busy is not None:
                f["busy"].add(labels, 1 if busy else 0)

    @staticmethod
    def _one_rank(job: Any, p: dict[str, Any], f: dict[str, _Family]) -> None:
        """A rank's own series (the first process of the rank): what it is, its backward share and
        the steps that share is measured over (the cluster view compares ranks across nodes by them)."""
        rank = p.get("rank")
        f["rinfo"].add([job, rank, p.get("local_rank"), p.get("world_size")], 1)
        steps = p.get("step_breakdown") or {}
        if steps.get("backward_fraction") is not None:
            f["rbackward"].add([job, rank], steps["backward_fraction"])
            if steps.get("steps") is not None:
                f["rsteps"].add([job, rank], steps["steps"])


def _job_age_s(doc: dict[str, Any]) -> float:
    """How long the job has run at its document's poll (its root's start to the poll); infinite
    where either is unknown: a document that cannot say is not held back."""
    started = (doc.get("target") or {}).get("create_time_unix_s")
    now = doc.get("time_unix_s")
    if not isinstance(started, (int, float)) or not isinstance(now, (int, float)):
        return math.inf
    return now - started


def exported_jobs(docs: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The live jobs that get per-job series: at most `limit`, the oldest first, shared out among
    users (document.fair_share), so a stream of short jobs can neither push a long one's series
    out nor add series once the cap is reached, and one user's jobs never crowd out another's."""
    if len(docs) <= limit:
        return docs
    uids = {j.get("id"): j.get("uid") for d in docs[:1] for j in d.get("jobs") or ()}

    def started(d: dict[str, Any]) -> tuple[float, str]:
        when = (d.get("target") or {}).get("create_time_unix_s")
        return (when if isinstance(when, (int, float)) else math.inf, str(d.get("job_id")))

    oldest = sorted(docs, key=started)
    return fair_share(oldest, limit, lambda d: uids.get(d.get("job_id")))


def series_bound(gpus: int, max_jobs: int = MAX_METRIC_JOBS) -> int:
    """The most series one scrape can hold with `gpus` GPUs: jobs cap x series per job + per-GPU
    series + the sidecar's own (docs/metrics.md states the same formula)."""
    # memory and SM per GPU, the phases, rank info, the rank's backward and collective wait
    per_key = 2 * gpus + len(STEP_PHASES) + 3
    per_job = (
        1  # dsh_job_info
        + 2 * gpus  # dsh_job_gpu_held, dsh_job_gpu_busy
        + len(STATUSES)
        + MAX_METRIC_WARNINGS
        + MAX_METRIC_PROCESS_KEYS * per_key
        + 2 * MAX_METRIC_MODELS  # dsh_model_info, dsh_model_forward_calls_total
    )
    per_gpu = 3 + len(GPU_EFFICIENCY_GAUGES) + len(CLOCK_EVENT_REASONS)
    own = 2 + len(POLL_BUCKETS_S) + 3 + len(ERROR_SOURCES) + 1  # info, stamp, histogram, errors, omitted
    return max_jobs * per_job + gpus * per_gpu + own


def model_labels(models: Iterable[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(the `model` label, the model) for one process's models: a name registered twice in one
    process gets `#2`, `#3`, ... in registration order so each model keeps its own series (the name
    is clipped to leave room for it)."""
    seen: dict[str, int] = {}
    for m in models:
        name = _text(m.get("name"))
        n = seen.get(name, 0) + 1
        seen[name] = n
        suffix = "" if n == 1 else f"#{n}"
        yield clip(name, MAX_LABEL_CHARS - len(suffix)) + suffix, m


def make_metrics(
    poller: Any,
    job_name: str | None = None,
    max_jobs: int = MAX_METRIC_JOBS,
    *,
    min_job_age_s: float = METRICS_MIN_JOB_AGE_S,
    per_user: bool = False,
) -> Callable[[], tuple[bytes, str]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SidecarCollector(poller, job_name, max_jobs, min_job_age_s=min_job_age_s, per_user=per_user)
    )

    def render() -> tuple[bytes, str]:
        return generate_latest(registry), CONTENT_TYPE

    return render
