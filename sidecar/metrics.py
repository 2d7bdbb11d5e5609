"""Prometheus exposition of the latest poll: a custom collector that reads what the poller
published, so a scrape never triggers a poll (scrapes cost nothing to the job)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sidecar import __version__
from sidecar.verdict import STATUSES

MIB = 1048576
# Poll durations are a few ms; buckets from 0.5 ms to 1 s.
POLL_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class SidecarCollector:
    def __init__(self, poller: Any, job_name: str | None = None):
        self.poller = poller
        self.job_name = job_name
        self._bucket_counts = [0] * (len(POLL_BUCKETS_S) + 1)
        self._sum_s = 0.0
        self._count = 0

    def _labels(self, names: list[str]) -> list[str]:
        return [*names, "job_name"] if self.job_name is not None else names

    def _values(self, values: list[str]) -> list[str]:
        return [*values, self.job_name] if self.job_name is not None else values

    def _drain_durations(self) -> None:
        durations = self.poller.poll_durations_s
        taken = list(durations)
        del durations[: len(taken)]
        for d in taken:
            self._count += 1
            self._sum_s += d
            for i, bound in enumerate(POLL_BUCKETS_S):
                if d <= bound:
                    self._bucket_counts[i] += 1
                    break
            else:
                self._bucket_counts[-1] += 1

    def collect(self) -> Iterator[Metric]:
        doc, _ = self.poller.snapshot()
        L, V = self._labels, self._values
        info = GaugeMetricFamily("dsh_sidecar_info", "The sidecar's version.", labels=L(["version"]))
        info.add_metric(V([__version__]), 1)
        yield info

        self._drain_durations()
        cumulative, buckets = 0, []
        for bound, n in zip([*map(str, POLL_BUCKETS_S), "+Inf"], self._bucket_counts):
            cumulative += n
            buckets.append((bound, cumulative))
        hist = HistogramMetricFamily(
            "dsh_sidecar_poll_duration_seconds", "Wall time of one poll of all sources.", labels=L([])
        )
        hist.add_metric(V([]), buckets, self._sum_s)
        yield hist

        errors = CounterMetricFamily(
            "dsh_sidecar_poll_errors", "Polls in which a source failed, by source.", labels=L(["source"])
        )
        for source in ("proctree", "probe", "nvml", "sysfs", "poll"):
            errors.add_metric(V([source]), float(self.poller.poll_errors.get(source, 0)))
        yield errors

        if doc is None:
            return
        yield from self._from_document(doc)

    def _from_document(self, doc: dict[str, Any]) -> Iterator[Metric]:
        L, V = self._labels, self._values
        util = GaugeMetricFamily(
            "dsh_gpu_utilization_percent", "GPU utilisation (NVML).", labels=L(["gpu", "uuid", "name"])
        )
        used = GaugeMetricFamily(
            "dsh_gpu_memory_used_bytes", "GPU memory used (NVML).", labels=L(["gpu", "uuid", "name"])
        )
        total = GaugeMetricFamily(
            "dsh_gpu_memory_total_bytes", "GPU memory total (NVML).", labels=L(["gpu", "uuid", "name"])
        )
        for g in doc["gpus"]:
            labels = V([str(g["index"]), g["uuid"] or "", g["name"] or ""])
            if g["util"] is not None:
                util.add_metric(labels, g["util"])
            if g["mem_used_mb"] is not None:
                used.add_metric(labels, g["mem_used_mb"] * MIB)
            if g["mem_total_mb"] is not None:
                total.add_metric(labels, g["mem_total_mb"] * MIB)
        yield from (util, used, total)

        pmem = GaugeMetricFamily(
            "dsh_process_gpu_memory_used_bytes",
            "GPU memory used by a process of the job.",
            labels=L(["pid", "role", "gpu", "rank"]),
        )
        psm = GaugeMetricFamily(
            "dsh_process_gpu_sm_utilization_percent",
            "SM utilisation of a process of the job.",
            labels=L(["pid", "role", "gpu", "rank"]),
        )
        minfo = GaugeMetricFamily(
            "dsh_model_info", "A registered model and its device.", labels=L(["pid", "model", "device"])
        )
        mcalls = CounterMetricFamily(
            "dsh_model_forward_calls", "Forward calls of a registered model.", labels=L(["pid", "model"])
        )
        for p in doc["processes"]:
            rank = "" if p.get("rank") is None else str(p["rank"])
            role = p["role"] or ""
            for g in p["gpu"]:
                labels = V([str(p["pid"]), role, str(g["index"]), rank])
                if g["mem_used_mb"] is not None:
                    pmem.add_metric(labels, g["mem_used_mb"] * MIB)
                if g["sm_util"] is not None:
                    psm.add_metric(labels, g["sm_util"])
            for m in p["models"]:
                minfo.add_metric(V([str(p["pid"]), m["name"], m["device"] or ""]), 1)
                mcalls.add_metric(V([str(p["pid"]), m["name"]]), float(m["forward_calls"] or 0))
        yield from (pmem, psm, minfo, mcalls)

        status = GaugeMetricFamily("dsh_status", "The verdict, one-hot.", labels=L(["status"]))
        for s in STATUSES:
            status.add_metric(V([s]), 1.0 if doc["status"] == s else 0.0)
        yield status
        warn = GaugeMetricFamily("dsh_warning_active", "Active warnings.", labels=L(["code", "severity"]))
        for w in doc["warnings"]:
            warn.add_metric(V([w["code"], w["severity"]]), 1)
        yield warn


def make_metrics(poller: Any, job_name: str | None = None) -> Callable[[], tuple[bytes, str]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidecarCollector(poller, job_name))

    def render() -> tuple[bytes, str]:
        return generate_latest(registry), CONTENT_TYPE_LATEST

    return render
