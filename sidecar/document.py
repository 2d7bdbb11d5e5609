"""Facts from the sources → verdict facts, and verdict → the status document (schema 1).

Pure functions: the poller does the I/O and hands the results here. The status document is the
contract the page, the DSH plugin and `--once --json` share: absent values are null, never
missing keys.
"""

from __future__ import annotations

import json
from typing import Any

from probe.segment import MODEL_COLLECTED, PUBLISH_FAILED
from sidecar import bounds
from sidecar.bounds import MAX_ID_CHARS, MAX_MESSAGE_CHARS, clip, clip_args, clip_opt
from sidecar.catalogue import Ref, render
from sidecar.verdict import (
    Facts,
    Finding,
    GpuFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    SystemGpuFacts,
    Verdict,
    model_nvml_index,
)

SCHEMA = 1
MIB = 1048576.0


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _float(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    return float(x) if isinstance(x, int | float) else None


def _str(x: Any, limit: int = bounds.MAX_TEXT_CHARS) -> str | None:
    """A string from a process, clipped (sidecar/bounds.py); anything else None."""
    return clip_opt(x, limit)


def models_from_payload(payload: dict[str, Any]) -> tuple[ModelFacts, ...]:
    out = []
    for m in payload.get("models") or ():
        if not isinstance(m, dict):
            continue
        devices = m.get("devices")
        kinds = (
            list(dict.fromkeys(d for d in devices if isinstance(d, str))) if isinstance(devices, list) else []
        )
        out.append(
            ModelFacts(
                name=_str(m.get("name")) or _str(m.get("class")) or "model",
                device=_str(m.get("device"), MAX_ID_CHARS),
                devices=tuple(clip(d, MAX_ID_CHARS) for d in kinds[: bounds.MAX_DEVICES_SHOWN]),
                params=_int(m.get("params")),
                input_device=_str(m.get("input_device"), MAX_ID_CHARS),
                forward_calls=_int(m.get("forward_calls")) or 0,
                forward_rate_hz=_float(m.get("forward_rate_hz")),
                data_wait_fraction=_float(m.get("data_wait_fraction")),
                train_steps=_int(m.get("train_steps")),
                step_rate_hz=_float(m.get("step_rate_hz")),
                step_source=_str(m.get("step_source")),
                shared_memory=m.get("shared_memory") if isinstance(m.get("shared_memory"), bool) else None,
            )
        )
    return tuple(out)


def cuda_memory_mib(payload: dict[str, Any]) -> float | None:
    total = None
    for m in payload.get("memory") or ():
        if isinstance(m, dict) and _int(m.get("reserved_bytes")) is not None:
            total = (total or 0.0) + m["reserved_bytes"] / MIB
    return total


# What multiprocessing's own helper processes run (python -c "from multiprocessing.X import main; ...").
_MP_HELPER_MODULES = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _python_c_code(cmdline: tuple[str, ...] | None) -> str:
    """The code of ``python [flags] -c CODE``, after interpreter flags such as -B, -s, -E; else ""."""
    if not cmdline:
        return ""
    head = list(cmdline[1:8])
    return head[head.index("-c") + 1] if "-c" in head[:-1] else ""


def is_mp_helper(cmdline: tuple[str, ...] | None) -> bool:
    """multiprocessing's resource tracker or forkserver process: it never runs the user's code."""
    code = _python_c_code(cmdline)
    return any(m in code for m in _MP_HELPER_MODULES)


def publish_failure(payload: dict[str, Any]) -> str | None:
    """The message of a fallback payload (probe.segment.PUBLISH_FAILED), else None."""
    errors = payload.get("errors")
    last = errors[-1] if isinstance(errors, list) and errors else None
    if isinstance(last, dict) and last.get("where") == PUBLISH_FAILED:
        return _str(last.get("message")) or "unknown error"
    return None


def collected_models(payload: dict[str, Any]) -> tuple[str, ...]:
    errors = payload.get("errors")
    if not isinstance(errors, list):
        return ()
    names = (_str(e.get("message")) for e in errors if isinstance(e, dict) and e.get("where") == MODEL_COLLECTED)
    return tuple(sorted({n for n in names if n}))[: bounds.MAX_MODELS_SHOWN]


def is_mp_child(cmdline: tuple[str, ...] | None) -> bool:
    """Started by multiprocessing's spawn or forkserver (a DataLoader worker, a spawned rank): such a
    process runs only what it was handed, and the probe only if that imports it."""
    code = _python_c_code(cmdline)
    return any(m in code for m in ("multiprocessing.spawn", "multiprocessing.forkserver"))


def process_facts(proc, read, gpu: tuple[ProcGpu, ...], target_pid: int) -> ProcessFacts:
    """`proc` is a proctree.ProcInfo, `read` a segments.ProbeRead or None."""
    payload = read.payload if read is not None else None
    runtime = payload.get("runtime") if payload and isinstance(payload.get("runtime"), dict) else None
    return ProcessFacts(
        pid=proc.pid,
        ppid=proc.ppid,
        depth=proc.depth,
        name=clip(proc.name) if isinstance(proc.name, str) else proc.name,
        is_target=proc.pid == target_pid,
        probe_state=read.state if read is not None else "missing",
        probe_error=_str(read.error) if read is not None else None,
        probe_unreadable=bool(read and read.unreadable),
        role=_str(payload.get("role"), MAX_ID_CHARS) if payload else None,
        worker_id=_int(payload.get("worker_id")) if payload else None,
        rank=_int(payload.get("rank")) if payload else None,
        local_rank=_int(payload.get("local_rank")) if payload else None,
        world_size=_int(payload.get("world_size")) if payload else None,
        dist_backend=_str(payload.get("dist_backend"), MAX_ID_CHARS) if payload else None,
        loader=_str(payload.get("loader"), MAX_ID_CHARS) if payload else None,
        mp_helper=is_mp_helper(getattr(proc, "cmdline", None)),
        mp_child=is_mp_child(getattr(proc, "cmdline", None)),
        publish_failure=publish_failure(payload) if payload else None,
        collected_models=collected_models(payload) if payload else (),
        runtime=runtime,
        cuda_memory_mib=cuda_memory_mib(payload) if payload else None,
        models=models_from_payload(payload) if payload else (),
        gpu=gpu,
    )


def _runtime_summary(facts: Facts) -> dict[str, Any]:
    procs = sorted((p for p in facts.processes if p.runtime), key=lambda p: (not p.is_target, p.depth))
    rt = procs[0].runtime if procs else {}
    return {
        "torch": _str(rt.get("torch"), MAX_ID_CHARS),
        "cuda_build": _str(rt.get("cuda_build"), MAX_ID_CHARS),
        "cudnn": _int(rt.get("cudnn")),
        "cuda_available": rt.get("cuda_available") if isinstance(rt.get("cuda_available"), bool) else None,
        "device_count": _int(rt.get("device_count")),
        "cuda_visible_devices": _str(rt.get("cuda_visible_devices"), MAX_ID_CHARS),
    }


def _framework_indices(facts: Facts) -> dict[int, int]:
    """NVML index -> the `cuda:N` that names that device in the job's main framework process (the
    first process with devices, the target first). Computed once per document: asked once per GPU
    it cost O(GPUs^2 x devices) per poll, most of a poll's time on a 64-GPU scenario."""
    procs = sorted((p for p in facts.processes if p.runtime), key=lambda p: (not p.is_target, p.depth))
    for p in procs:
        count = _int(p.runtime.get("device_count")) or 0
        if not count:
            continue
        out: dict[int, int] = {}
        for n in range(count):
            index = model_nvml_index(p, ModelFacts("", f"cuda:{n}"), facts.gpus)
            if index is not None and index not in out:
                out[index] = n
        return out
    return {}


def process_entry(p: ProcessFacts, cmdline: tuple[str, ...] | None) -> dict[str, Any]:
    """A process's entry in the status document, less cpu_percent and rss_mb (set per poll)."""
    return {
        "pid": p.pid,
        "ppid": p.ppid,
        "depth": p.depth,
        "role": p.role,
        "probe": p.has_probe,
        "probe_state": p.probe_state,
        "name": p.name,
        "cmdline": clip_args(cmdline) if cmdline is not None else None,
        "cpu_percent": None,
        "rss_mb": None,
        "rank": p.rank,
        "local_rank": p.local_rank,
        "world_size": p.world_size,
        "dist_backend": p.dist_backend,
        "worker_id": p.worker_id,
        "loader": p.loader,
        "cuda_memory_mb": None if p.cuda_memory_mib is None else round(p.cuda_memory_mib, 1),
        "models": [
            {
                "name": m.name,
                "device": m.device,
                "devices": list(m.devices),
                "params": m.params,
                "input_device": m.input_device,
                "forward_calls": m.forward_calls,
                "forward_rate_hz": m.forward_rate_hz,
                "data_wait_fraction": m.data_wait_fraction,
                "train_steps": m.train_steps,
                "step_rate_hz": m.step_rate_hz,
                "step_source": m.step_source,
                "shared_memory": m.shared_memory,
            }
            for m in p.models[: bounds.MAX_MODELS_SHOWN]
        ],
        "models_omitted": max(0, len(p.models) - bounds.MAX_MODELS_SHOWN),
        "gpu": [{"index": g.index, "mem_used_mb": g.mem_used_mib, "sm_util": g.sm_util} for g in p.gpu],
        "probe_error": p.probe_error if p.probe_state not in ("ok", "missing") else None,
    }


def status_document(
    facts: Facts,
    verdict: Verdict,
    *,
    time_s: float,
    interval_s: float,
    target_name: str | None,
    target_cmdline: list[str] | None,
    target_create_time: float | None,
    proc_info: dict[int, Any],
    other_processes: dict[int, int],
    events: list[dict[str, Any]],
    entry_cache: dict[int, tuple] | None = None,
) -> dict[str, Any]:
    """The status document. ``entry_cache`` (owned by the caller, kept between calls) lets a process
    whose facts are the very same object as last time reuse its entry: nothing in a document is
    ever modified after it is made, so entries may share their lists."""
    model_gpu = next((g for g in facts.gpus if g.index == verdict.model_gpu_index), None)
    framework = _framework_indices(facts)
    runtime = _runtime_summary(facts)
    processes = []
    fresh: dict[int, tuple] = {}
    budget_bytes = bounds.MAX_PROCESS_BYTES
    for p in facts.processes:
        if len(processes) == bounds.MAX_PROCESSES_SHOWN:
            break
        info = proc_info.get(p.pid)
        cmdline = info.cmdline if info else None
        hit = entry_cache.get(p.pid) if entry_cache is not None else None
        if hit is not None and hit[0] is p and hit[1] is cmdline:
            entry, size = hit[2].copy(), hit[3]  # the same facts: only what the OS says per poll is new
        else:
            entry = process_entry(p, cmdline)
            size = len(json.dumps(entry, ensure_ascii=False).encode())
        if size > budget_bytes:
            break  # hostile sizes: the rest is counted in processes_omitted
        budget_bytes -= size
        fresh[p.pid] = (p, cmdline, entry, size)
        rss_mib = info.rss_mib if info else None
        entry["cpu_percent"] = info.cpu_percent if info else None
        entry["rss_mb"] = None if rss_mib is None else round(rss_mib, 1)
        processes.append(entry)
    if entry_cache is not None:
        entry_cache.clear()
        entry_cache.update(fresh)
    shown_events = events[-bounds.MAX_EVENTS_SHOWN :]
    return {
        "schema": SCHEMA,
        "time": time_s,
        "interval_s": interval_s,
        "target": {
            "pid": facts.target_pid,
            "alive": facts.target_alive,
            "name": clip_opt(target_name),
            "cmdline": clip_args(target_cmdline) if target_cmdline is not None else None,
            "create_time": target_create_time,
        },
        "status": verdict.status,
        "message": _english(verdict.message),
        "message_ref": _ref_entry(verdict.message),
        "warnings": [_warning_entry(w) for w in verdict.warnings],
        "model_device": verdict.model_device,
        "input_device": verdict.input_device,
        "cuda_available": runtime["cuda_available"],
        "device_count": runtime["device_count"],
        "gpu_util": model_gpu.util if model_gpu else None,
        "mem_used_mb": model_gpu.mem_used_mib if model_gpu else None,
        "runtime": runtime,
        "nvml": {
            "ok": facts.nvml_ok,
            "driver": facts.driver,
            "cuda_driver": facts.cuda_driver,
            "error": facts.nvml_error,
        },
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "pci_bus_id": g.pci_bus_id,
                "util": g.util,
                "mem_util": g.mem_util,
                "mem_used_mb": g.mem_used_mib,
                "mem_total_mb": g.mem_total_mib,
                "framework_index": framework.get(g.index),
                "lost": g.lost,
                "field_errors": dict(g.field_errors),  # why a null field is null, per NVML
                "other_processes": other_processes.get(g.index, 0),
            }
            for g in facts.gpus
        ],
        "system_gpus": [
            {"vendor": s.vendor, "name": s.name, "pci": s.pci, "driver": s.driver, "nvml_index": s.nvml_index}
            for s in facts.system_gpus
        ],
        "processes": processes,
        "processes_omitted": len(facts.processes) - len(processes),
        "events": [{**e, "name": clip_opt(e.get("name"))} for e in shown_events],
        "events_omitted": len(events) - len(shown_events),
    }


def _ref_entry(ref: Ref) -> dict[str, Any]:
    """A reference as the document carries it ({"id", "params"}), its string params clipped: they
    quote names, pids and errors taken from processes, and the page renders them as they are."""
    return ref.as_dict(clip)


def _english(ref: Ref) -> str:
    """The English text of a reference, rendered from its clipped params and clipped itself."""
    return clip(render(_ref_entry(ref), "en"), MAX_MESSAGE_CHARS)


def _warning_entry(w: Finding) -> dict[str, Any]:
    """A warning: its code, severity and pids, its message and hint as references (for the page and
    the plugin, which render them in the user's language) and in English (for the CLI and agents)."""
    return {
        "code": w.code,
        "severity": w.severity,
        "pids": list(w.pids[: bounds.MAX_PROCESSES_SHOWN]),
        "message": _english(w.message),
        "hint": _english(w.hint) if w.hint is not None else None,
        "message_ref": _ref_entry(w.message),
        "hint_ref": _ref_entry(w.hint) if w.hint is not None else None,
    }


def system_gpu_facts(system_gpus, gpus: tuple[GpuFacts, ...]) -> tuple[SystemGpuFacts, ...]:
    """Match OS graphics devices to NVML devices by PCI address (NVML writes an 8-digit domain)."""

    def norm(pci: str | None) -> str | None:
        if not pci:
            return None
        parts = pci.lower().split(":")
        try:
            return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}" if len(parts) == 3 else pci.lower()
        except ValueError:
            return pci.lower()

    by_pci = {norm(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
    return tuple(
        SystemGpuFacts(
            vendor=s.vendor,
            name=s.name,
            pci=s.pci,
            driver=s.driver,
            nvml_index=by_pci.get(norm(s.pci)),
        )
        for s in system_gpus
    )
