"""The /metrics contract written out against a status document, apart from sidecar/serve/metrics.py:
the samples a scrape of the same poll must hold.
"""

from __future__ import annotations

from typing import Any

MIB = 1048576
DOC_FAMILIES = {
    "dsh_gpu_utilization_percent",
    "dsh_gpu_memory_used_bytes",
    "dsh_gpu_memory_total_bytes",
    "dsh_process_gpu_memory_used_bytes",
    "dsh_process_gpu_sm_utilization_percent",
    "dsh_model_info",
    "dsh_model_forward_calls_total",
    "dsh_rank_info",
    "dsh_job_info",
    "dsh_status",
    "dsh_warning_active",
    "dsh_gpu_sm_clock_hz",
    "dsh_gpu_clock_event_active",
    "dsh_gpu_power_watts",
    "dsh_gpu_power_limit_watts",
    "dsh_gpu_temperature_celsius",
    "dsh_gpu_pcie_link_generation",
    "dsh_gpu_pcie_link_width",
    "dsh_gpu_sm_activity_ratio",
    "dsh_gpu_sm_occupancy_ratio",
    "dsh_gpu_tensor_activity_ratio",
    "dsh_gpu_dram_activity_ratio",
    "dsh_process_step_fraction",
    "dsh_rank_collective_wait_fraction",
    "dsh_rank_backward_fraction",
    "dsh_rank_window_steps",
    "dsh_job_gpu_held",
    "dsh_job_gpu_busy",
}
IDLE_UTIL_PCT = 5.0  # the verdict's default idle threshold (sidecar/verdict/thresholds.py Rules), written out
# Written out here, apart from sidecar/serve/metrics.py: metric -> (Gpu field, scale).
GPU_GAUGES = {
    "dsh_gpu_sm_clock_hz": ("sm_clock_mhz", 1e6),
    "dsh_gpu_power_watts": ("power_w", 1),
    "dsh_gpu_power_limit_watts": ("power_limit_w", 1),
    "dsh_gpu_temperature_celsius": ("temperature_c", 1),
    "dsh_gpu_pcie_link_generation": ("pcie_link_gen", 1),
    "dsh_gpu_pcie_link_width": ("pcie_link_width", 1),
    "dsh_gpu_sm_activity_ratio": ("sm_activity_fraction", 1),
    "dsh_gpu_sm_occupancy_ratio": ("sm_occupancy_fraction", 1),
    "dsh_gpu_tensor_activity_ratio": ("tensor_activity_fraction", 1),
    "dsh_gpu_dram_activity_ratio": ("dram_activity_fraction", 1),
}
CLOCK_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
    "board_limit",
    "reliability",
)


def sample_set(samples, names=DOC_FAMILIES) -> set[tuple[str, tuple, float]]:
    return {(n, tuple(sorted(lbl.items())), v) for n, lbl, v in samples if n in names}


def _expected_rank(add, job: str, p: dict[str, Any]) -> None:
    """A rank process's own series: what it is, its backward share and its window's steps."""
    add(
        "dsh_rank_info",
        {"job_id": job, "rank": p["rank"], "local_rank": p["local_rank"], "world_size": p["world_size"]},
        1,
    )
    steps = p.get("step_breakdown") or {}
    if steps.get("backward_fraction") is not None:
        add("dsh_rank_backward_fraction", {"job_id": job, "rank": p["rank"]}, steps["backward_fraction"])
        if steps.get("steps") is not None:
            add("dsh_rank_window_steps", {"job_id": job, "rank": p["rank"]}, steps["steps"])


def _expected_hold(add, job: str, doc: dict[str, Any]) -> None:
    """The job's hold on each GPU a process of it is listed on, and whether that GPU works (its
    utilisation, else its GPM SM activity, against the default idle threshold)."""
    on = {g["index"] for p in doc["processes"] for g in p["gpu"]}
    for g in doc["gpus"]:
        if g["index"] not in on:
            continue
        lbl = {"job_id": job, "gpu": g["index"], "uuid": g["uuid"], "name": g["name"], "vendor": g.get("vendor")}
        add("dsh_job_gpu_held", lbl, 1)
        util = g["util_pct"]
        if util is None and g.get("sm_activity_fraction") is not None:
            util = 100 * g["sm_activity_fraction"]
        if util is not None:
            add("dsh_job_gpu_busy", lbl, 1 if util >= IDLE_UTIL_PCT else 0)


def expected_from_document(doc: dict[str, Any], job_name: str | None) -> set[tuple[str, tuple, float]]:
    """The contract written out against the status document, independently of sidecar/serve/metrics.py:
    processes of the job that share every label make one series, summed ("sum"), averaged
    ("mean") or the first one's ("first")."""
    folded: dict[tuple[str, tuple], tuple[str, list[float]]] = {}
    job = doc.get("job_id")

    def add(name: str, labels: dict[str, Any], value: float, how: str = "first") -> None:
        labels = {k: "" if v is None else str(v) for k, v in labels.items()}
        if job_name:
            labels["job_name"] = job_name
        folded.setdefault((name, tuple(sorted(labels.items()))), (how, []))[1].append(float(value))

    for g in doc["gpus"]:
        lbl = {"gpu": g["index"], "uuid": g["uuid"], "name": g["name"], "vendor": g.get("vendor")}
        if g["util_pct"] is not None:
            add("dsh_gpu_utilization_percent", lbl, g["util_pct"])
        if g["mem_used_mib"] is not None:
            add("dsh_gpu_memory_used_bytes", lbl, g["mem_used_mib"] * MIB)
        if g["mem_total_mib"] is not None:
            add("dsh_gpu_memory_total_bytes", lbl, g["mem_total_mib"] * MIB)
        for name, (key, scale) in GPU_GAUGES.items():
            if g.get(key) is not None:
                add(name, lbl, g[key] * scale)
        if g.get("clock_event_reasons") is not None:
            for reason in CLOCK_REASONS:
                add(
                    "dsh_gpu_clock_event_active",
                    {**lbl, "reason": reason},
                    reason in g["clock_event_reasons"],
                )
    for p in doc["processes"]:
        for g in p["gpu"]:
            lbl = {"job_id": job, "role": p["role"], "gpu": g["index"], "rank": p["rank"]}
            if g["mem_used_mib"] is not None:
                add("dsh_process_gpu_memory_used_bytes", lbl, g["mem_used_mib"] * MIB, "sum")
            if g["sm_util_pct"] is not None:
                add("dsh_process_gpu_sm_utilization_percent", lbl, g["sm_util_pct"], "sum")
        for m in p["models"]:
            add(
                "dsh_model_info",
                {"job_id": job, "model": m["name"], "device": m["device"], "rank": p["rank"]},
                1,
            )
            add(
                "dsh_model_forward_calls_total",
                {"job_id": job, "model": m["name"], "rank": p["rank"]},
                m["forward_calls"],
                "sum",
            )
        for phase in ("data_wait", "forward", "optimizer", "other"):
            share = (p.get("step_breakdown") or {}).get(f"{phase}_fraction")
            if share is not None:
                lbl = {"job_id": job, "role": p["role"], "rank": p["rank"], "phase": phase}
                add("dsh_process_step_fraction", lbl, share, "mean")
        if p["role"] == "rank":
            _expected_rank(add, job, p)
    _expected_hold(add, job, doc)
    for w in doc.get("rank_waits") or ():
        add("dsh_rank_collective_wait_fraction", {"job_id": job, "rank": w["rank"]}, w["collective_wait_fraction"])
    for s in ("GPU", "CPU", "MIXED", "UNKNOWN"):
        add("dsh_status", {"job_id": job, "status": s}, 1 if doc["status"] == s else 0)
    for w in doc["warnings"]:
        add("dsh_warning_active", {"job_id": job, "code": w["code"], "severity": w["severity"]}, 1)
    root = doc["target"]
    entry = next((j for j in doc.get("jobs") or () if j["id"] == job), {})
    user, slurm_job = entry.get("user"), entry.get("slurm_job")
    run, pod = doc["distributed"] or {}, doc["pod"] or {}
    placement = {k: run.get(k) for k in ("job_key", "job_key_source", "world_size", "node_rank", "hostname", "uid")}
    placement |= {k: pod.get(k) for k in ("namespace", "pod", "container")} | {"pod_source": pod.get("source")}
    add("dsh_job_info", {"job_id": job, "root_pid": root["pid"], "user": user, "process": root["name"], **placement,
                          "slurm_job": slurm_job}, 1)
    out = []
    for (name, labels), (how, values) in folded.items():
        value = values[0] if how == "first" else sum(values) / (len(values) if how == "mean" else 1)
        out.append((name, dict(labels), value))
    return sample_set(out)
