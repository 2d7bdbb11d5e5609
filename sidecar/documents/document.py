"""Facts and the verdict → the status and history documents (schema 2, sidecar/documents/contract.py).

Presentation only: the facts come from sidecar/poll/collect.py, the decisions from the verdict; nothing
here reads a source or decides anything. The documents are the contract the page, the DSH plugin,
`--once --json` and agents share: sidecar/documents/contract.py declares every key (absent values are null,
never missing keys).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from probe_wire.records import RuntimeRecord
from sidecar.common.catalogue import Ref, render
from sidecar.common.nvml_names import GPU_EFFICIENCY_FIELDS
from sidecar.documents import bounds, contract
from sidecar.documents.bounds import MAX_ID_CHARS, MAX_MESSAGE_CHARS, clip, clip_args, clip_opt
from sidecar.documents.inputs import (  # noqa: F401 -- re-exported: the shapes documents are made of
    Doc,
    History,
    HistorySample,
    ProcessInfo,
    Root,
    Target,
)
from sidecar.documents.watch import watch_document
from sidecar.verdict import (
    VENDOR_NVIDIA,
    Facts,
    Finding,
    GpuFacts,
    ModelFacts,
    ProcessFacts,
    Verdict,
    cuda_availability,
    memory_growth,
    model_nvml_index,
)
from sidecar.verdict.stragglers import rank_waits
from sidecar.verdict.watch import WatchLog

SCHEMA = contract.SCHEMA
# A job's (distributed, pod) document objects (sidecar/poll/placement.py), each None when unknown.
Placement = tuple[Doc | None, Doc | None]
T = TypeVar("T")
# A process's entry with what it was made of: (facts, command line, entry, its JSON size in bytes).
CachedEntry = tuple[ProcessFacts, "Sequence[str] | None", Doc, int]


class SummaryMemo(TypedDict, total=False):
    """status_summary's memo (its caller's, one per job): what the last call made, and of what."""

    # the target's name and command line (the objects), and their texts for display
    target: tuple[str | None, Sequence[str] | None, tuple[str | None, list[str] | None]]
    # the verdict's message and findings, and their rendered message and warning entries
    rendered: tuple[Ref, tuple[Finding, ...], tuple[str, Doc], list[Doc]]


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _bool(x: Any) -> bool | None:
    return x if isinstance(x, bool) else None


def _str(x: Any, limit: int = bounds.MAX_TEXT_CHARS) -> str | None:
    """A string from a process, clipped (sidecar/documents/bounds.py); anything else None."""
    return clip_opt(x, limit)


def _runtime_summary(facts: Facts) -> dict[str, Any]:
    procs = sorted(
        (p for p in facts.processes if p.runtime is not None), key=lambda p: (not p.is_target, p.depth)
    )
    rt = procs[0].runtime if procs else None
    if rt is None:
        rt = RuntimeRecord()  # no probe told: every field absent
    cuda = cuda_availability(rt)
    devices = _runtime_devices(rt)
    return {
        "torch": _str(rt.torch, MAX_ID_CHARS),
        "cuda_build": _str(rt.cuda_build, MAX_ID_CHARS),
        "hip_build": _str(rt.hip_build, MAX_ID_CHARS),
        "xpu_build": _str(rt.xpu_build, MAX_ID_CHARS),
        "cudnn": _int(rt.cudnn),
        "cuda_available": _bool(rt.cuda_available),
        "device_count": _int(rt.device_count),
        "cuda_visible_devices": _str(rt.cuda_visible_devices, MAX_ID_CHARS),
        "hip_visible_devices": _str(rt.hip_visible_devices, MAX_ID_CHARS),
        "rocr_visible_devices": _str(rt.rocr_visible_devices, MAX_ID_CHARS),
        "gpu_device_ordinal": _str(rt.gpu_device_ordinal, MAX_ID_CHARS),
        "cuda_driver_loadable": _bool(rt.cuda_driver_loadable),
        "xpu_available": _bool(rt.xpu_available),
        "xpu_device_count": _int(rt.xpu_device_count),
        "ze_affinity_mask": _str(rt.ze_affinity_mask, MAX_ID_CHARS),
        "devices": devices[: bounds.MAX_RUNTIME_DEVICES_SHOWN],
        "devices_omitted": max(0, len(devices) - bounds.MAX_RUNTIME_DEVICES_SHOWN),
        "cuda_ref": None if cuda is None else _ref_entry(cuda),
    }


def _runtime_devices(rt: RuntimeRecord) -> list[dict[str, Any]]:
    """The runtime's `cuda:N` then `xpu:N` devices as the document's RuntimeDevice entries (each
    list at most schema.MAX_DEVICES long: the reader refuses longer ones)."""
    named = [("cuda", d) for d in rt.devices] + [("xpu", d) for d in rt.xpu_devices or ()]
    return [
        {
            "device": f"{kind}:{d.index}",
            "name": _str(d.name) or "?",
            "pci_bus_id": _str(d.pci_bus_id, MAX_ID_CHARS),
            "gcn_arch": _str(d.gcn_arch, MAX_ID_CHARS),
        }
        for kind, d in named
    ]


def _framework_indices(facts: Facts) -> dict[int, int]:
    """NVML index -> the `cuda:N` that names that device in the job's main framework process (the
    first process with devices, the target first). Computed once per document: asked once per GPU
    it cost O(GPUs^2 x devices) per poll, most of a poll's time on a 64-GPU scenario."""
    procs = sorted(
        (p for p in facts.processes if p.runtime is not None), key=lambda p: (not p.is_target, p.depth)
    )
    for p in procs:
        count = (p.runtime.device_count if p.runtime is not None else None) or 0
        if not count:
            continue
        out: dict[int, int] = {}
        for n in range(count):
            index = model_nvml_index(p, ModelFacts("", f"cuda:{n}"), facts.gpus)
            if index is not None and index not in out:
                out[index] = n
        return out
    return {}


def _record(value: Any) -> dict[str, Any] | None:
    """A slotted fact record (StepBreakdown, MathSettings, ...) as its contract object, or None."""
    return None if value is None else {f.name: getattr(value, f.name) for f in fields(value)}


def process_entry(
    p: ProcessFacts, cmdline: Sequence[str] | None, pci_of: Mapping[int, str | None] | None = None
) -> dict[str, Any]:
    """``pci_of``: each GPU's PCI address by index (NVML's rows carry the index alone)."""
    """A process's entry in the status document, less cpu_pct and rss_mib (set per poll)."""
    return {
        "pid": p.pid,
        "ppid": p.ppid,
        "depth": p.depth,
        "role": p.role,
        "has_probe": p.has_probe,
        "exited": p.exited,
        "probe_state": p.probe_state,
        "probe_error": p.probe_error if p.probe_state not in ("ok", "missing") else None,
        "name": p.name,
        "cmdline": clip_args(cmdline) if cmdline is not None else None,
        "cpu_pct": None,
        "rss_mib": None,
        "rank": p.rank,
        "local_rank": p.local_rank,
        "world_size": p.world_size,
        "dist_backend": p.dist_backend,
        "worker_id": p.worker_id,
        "loader": p.loader,
        "cuda_reserved_mib": p.cuda_memory_mib,
        "models": [
            {
                "name": m.name,
                "device": m.device,
                "devices": list(m.devices),
                "param_count": m.params,
                "input_device": m.input_device,
                "forward_calls": m.forward_calls,
                "forward_rate_hz": m.forward_rate_hz,
                "data_wait_fraction": m.data_wait_fraction,
                "train_steps": m.train_steps,
                "step_rate_hz": m.step_rate_hz,
                "step_source": m.step_source,
                "shared_memory": m.shared_memory,
                "param_dtypes": list(m.param_dtypes),
                "autocast": m.autocast,
                "input_shape": list(m.input_shape) if m.input_shape is not None else None,
                "loader_settings": _record(m.loader_settings),
                "data_wait_batches": m.data_wait_batches,
            }
            for m in p.models[: bounds.MAX_MODELS_SHOWN]
        ],
        "models_omitted": max(0, len(p.models) - bounds.MAX_MODELS_SHOWN),
        "gpu": [
            {
                "index": g.index,
                "vendor": g.vendor,
                "pci_bus_id": g.pci if g.pci is not None else (pci_of or {}).get(g.index),
                "mem_used_mib": g.mem_used_mib,
                "sm_util_pct": g.sm_util,
                "unknown_reason": g.unknown_reason,
                "mig_index": g.mig_index,
            }
            for g in p.gpu
        ],
        "step_breakdown": _record(p.steps),
        "math": _record(p.math),
        "syncs_per_step": p.syncs_per_step,
    }


def status_summary(
    facts: Facts,
    verdict: Verdict,
    *,
    target: Target,
    memo: SummaryMemo | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """What a jobs-list entry is made of (`job_entry` reads only these): the job, its verdict, and
    its processes in brief (`job_processes`), made from the facts. Discovery makes this for every
    job at every poll, and a job's whole document (its process entries) only when it is asked for.
    ``memo`` (owned by the caller, kept between calls): a verdict's texts equal to the last call's
    are not rendered again (documents are never modified, so they may share them). ``placement``:
    the job's (distributed, pod) objects (sidecar/poll/placement.py), None when unknown."""
    memo = memo if memo is not None else {}
    distributed, pod = placement if placement is not None else (None, None)
    message, warnings = _rendered(verdict, memo)
    name, cmdline = _target_texts(target, memo)
    return {
        "job_id": target.job_id,
        "target": {
            "pid": facts.target_pid,
            "alive": facts.target_alive,
            "name": name,
            "cmdline": cmdline,
            "create_time_unix_s": target.create_time,
        },
        "status": verdict.status,
        "message": message[0],
        "message_ref": message[1],
        "warnings": warnings,
        "model_gpu_index": verdict.model_gpu_index,
        "job_processes": _job_processes(
            len(facts.processes),
            (g.index for p in facts.processes for g in p.gpu),
            any(p.models for p in facts.processes),
            verdict.model_gpu_index,
        ),
        "distributed": distributed,
        "pod": pod,
    }


def _target_texts(target: Target, memo: SummaryMemo) -> tuple[str | None, list[str] | None]:
    """The target's name and command line, clipped for display; the last call's while the target's
    are the same objects (a job's target is read once, when it is first seen)."""
    last = memo.get("target")
    if last is not None and last[0] is target.name and last[1] is target.cmdline:
        return last[2]
    texts = (clip_opt(target.name), clip_args(target.cmdline) if target.cmdline is not None else None)
    memo["target"] = (target.name, target.cmdline, texts)
    return texts


def _rendered(verdict: Verdict, memo: SummaryMemo) -> tuple[tuple[str, dict[str, Any]], list[dict[str, Any]]]:
    """The verdict's message (English, reference) and warning entries; the last call's when the
    message and the findings are equal to its (most polls: the verdict stands)."""
    last = memo.get("rendered")
    if last is not None and last[0] == verdict.message and last[1] == verdict.warnings:
        return last[2], last[3]
    message = (_english(verdict.message), _ref_entry(verdict.message))
    warnings = [_warning_entry(w) for w in verdict.warnings]
    memo["rendered"] = (verdict.message, verdict.warnings, message, warnings)
    return message, warnings


def _job_processes(
    count: int, gpu_indices: Iterable[int], has_model: bool, model_gpu_index: int | None
) -> dict[str, Any]:
    """The job's processes in brief, as its jobs-list entry shows them: how many, the GPUs they use
    (NVML's rows and the model's GPU), whether any has a registered model."""
    gpus = set(gpu_indices)
    if model_gpu_index is not None:
        gpus.add(model_gpu_index)
    return {"process_count": count, "gpus": sorted(gpus), "has_model": has_model}


def summary_of_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A status document as status_summary gives it (the --pid sidecar's jobs list, and sources
    that only have documents): the brief made from its process entries."""
    procs = doc["processes"]
    brief = _job_processes(
        len(procs) + doc["processes_omitted"],
        (g["index"] for p in procs for g in p["gpu"]),
        any(p["models"] for p in procs),
        doc["model_gpu_index"],
    )
    return {**doc, "job_processes": brief}


def status_document(
    facts: Facts,
    verdict: Verdict,
    *,
    time_s: float,
    interval_s: float,
    target: Target,
    proc_info: Mapping[int, ProcessInfo],
    other_processes: dict[int, int],
    events: list[dict[str, Any]],
    other_names: Mapping[int, tuple[str, ...]] | None = None,
    entry_cache: dict[int, CachedEntry] | None = None,
    jobs: list[dict[str, Any]] | None = None,
    summary: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The status document. ``entry_cache`` (owned by the caller, kept between calls) lets a process
    whose facts are the very same object as last time reuse its entry: nothing in a document is
    ever modified after it is made, so entries may share their lists. ``target`` is a
    collect.TargetInfo (name, cmdline, create time as first seen). ``summary``: what
    status_summary made of the same arguments, when the caller made it already."""
    if summary is None:
        summary = status_summary(facts, verdict, target=target)
    processes = _process_entries(facts, proc_info, entry_cache)
    shown_events = events[-bounds.MAX_EVENTS_SHOWN :]
    doc = {
        "schema": SCHEMA,
        "time_unix_s": time_s,
        "interval_s": interval_s,
        "job_id": summary["job_id"],
        "target": summary["target"],
        "status": summary["status"],
        "message": summary["message"],
        "message_ref": summary["message_ref"],
        "warnings": summary["warnings"],
        "model_device": verdict.model_device,
        "input_device": verdict.input_device,
        "model_gpu_index": summary["model_gpu_index"],
        "memory_growth": _memory_growth(facts),
        "distributed": summary["distributed"],
        "pod": summary["pod"],
        "rank_waits": _rank_waits(facts),
        "runtime": _runtime_summary(facts),
        "nvml": {
            "ok": facts.nvml_ok,
            "driver": facts.driver,
            "cuda_driver": facts.cuda_driver,
            "error": facts.nvml_error,
        },
        "gpus": _gpu_entries(facts, other_processes, other_names or {}),
        "system_gpus": [
            {"vendor": s.vendor, "name": s.name, "pci": s.pci, "driver": s.driver, "nvml_index": s.nvml_index}
            for s in facts.system_gpus
        ],
        "processes": processes,
        "processes_omitted": len(facts.processes) - len(processes),
        "events": [{**e, "name": clip_opt(e.get("name"))} for e in shown_events],
        "events_omitted": len(events) - len(shown_events),
        "jobs": jobs,
    }
    return contract.check_if_enabled(doc, "status")


def _process_entries(
    facts: Facts, proc_info: Mapping[int, ProcessInfo], entry_cache: dict[int, CachedEntry] | None
) -> list[Doc]:
    """Process entries, within the count and size bounds (sidecar/documents/bounds.py)."""
    processes: list[Doc] = []
    fresh: dict[int, CachedEntry] = {}
    budget_bytes = bounds.MAX_PROCESS_BYTES
    pci_of = {g.index: g.pci_bus_id for g in facts.gpus}
    for p in facts.processes:
        if len(processes) == bounds.MAX_PROCESSES_SHOWN:
            break
        info = proc_info.get(p.pid)
        cmdline = info.cmdline if info else None
        hit = entry_cache.get(p.pid) if entry_cache is not None else None
        if hit is not None and hit[0] is p and hit[1] is cmdline:
            entry, size = hit[2].copy(), hit[3]  # the same facts: only what the OS says per poll is new
        else:
            entry = process_entry(p, cmdline, pci_of)
            size = len(json.dumps(entry, ensure_ascii=False).encode())
        if size > budget_bytes:
            break  # hostile sizes: the rest is counted in processes_omitted
        budget_bytes -= size
        fresh[p.pid] = (p, cmdline, entry, size)
        entry["cpu_pct"] = info.cpu_percent if info and not p.exited else None
        entry["rss_mib"] = info.rss_mib if info and not p.exited else None
        processes.append(entry)
    if entry_cache is not None:
        entry_cache.clear()
        entry_cache.update(fresh)
    return processes


def _gpu_entries(
    facts: Facts, other_processes: dict[int, int], other_names: Mapping[int, tuple[str, ...]]
) -> list[dict[str, Any]]:
    framework = _framework_indices(facts)
    return [
        {
            "index": g.index,
            "vendor": g.vendor,
            "driver": g.driver,
            "uuid": g.uuid,
            "name": g.name,
            "pci_bus_id": g.pci_bus_id,
            "util_pct": g.util,
            "mem_util_pct": g.mem_util,
            "mem_used_mib": g.mem_used_mib,
            "mem_total_mib": g.mem_total_mib,
            "framework_index": framework.get(g.index),
            "lost": g.lost,
            "field_errors": dict(g.field_errors),  # why a null field is null, per NVML
            # NVML lists every process on its GPUs; AMD's and Intel's come from a scan (None: not read)
            "other_process_count": other_processes.get(g.index, 0 if g.vendor == VENDOR_NVIDIA else None),
            **_other_names(other_names.get(g.index)),
            **{name: getattr(g, name) for name in GPU_EFFICIENCY_FIELDS},
            "clock_event_reasons": list(g.clock_event_reasons) if g.clock_event_reasons is not None else None,
            "mig_devices": [_record(m) for m in g.mig_devices],
        }
        for g in facts.gpus
    ]


def _other_names(names: tuple[str, ...] | None) -> dict[str, Any]:
    """The names of a GPU's other processes as shown: what a process named itself, cleaned of
    control and format characters (bidi overrides, line breaks), clipped, at most
    MAX_OTHER_NAMES_SHOWN of them."""
    if names is None:
        return {"other_process_names": None, "other_process_names_omitted": 0}
    shown = list(dict.fromkeys(clip(bounds.printable(n), MAX_ID_CHARS) or "?" for n in names))
    cut = shown[: bounds.MAX_OTHER_NAMES_SHOWN]
    return {"other_process_names": cut, "other_process_names_omitted": len(shown) - len(cut)}


def gpu_entries(gpus: tuple[GpuFacts, ...], other_processes: dict[int, int]) -> list[dict[str, Any]]:
    """The machine's GPUs as a status document lists them, without a job (discovery's /metrics on
    a node that runs none: the GPUs are still the node's to watch)."""
    return _gpu_entries(Facts(target_pid=0, gpus=gpus), other_processes, {})


def _memory_growth(facts: Facts) -> dict[str, float] | None:
    """The verdict's memory-growth evidence (verdict.memory_growth decides; this only presents)."""
    grown = memory_growth(facts.recent, facts.rules)
    if grown is None:
        return None
    span_s = grown.end_unix_s - grown.start_unix_s
    return {
        "first_mib": grown.first_mib,
        "last_mib": grown.last_mib,
        "start_unix_s": grown.start_unix_s,
        "end_unix_s": grown.end_unix_s,
        "rate_mib_per_min": (grown.last_mib - grown.first_mib) * 60.0 / span_s if span_s > 0 else 0.0,
    }


def _rank_waits(facts: Facts) -> list[dict[str, Any]] | None:
    """Each rank's wait in the collectives (verdict.stragglers measures; this only presents)."""
    waits = rank_waits(facts)[: bounds.MAX_PROCESSES_SHOWN]
    if not waits:
        return None
    return [
        {
            "rank": w.rank,
            "pid": w.pid,
            "steps": w.steps,
            "collective_wait_fraction": w.collective_wait_fraction,
            "data_wait_fraction": w.data_wait_fraction,
            "forward_fraction": w.forward_fraction,
            "optimizer_fraction": w.optimizer_fraction,
            "gpu_index": w.gpu_index,
        }
        for w in waits
    ]


def history_document(history: History, since: float | None, interval_s: float, job_id: str) -> dict[str, Any]:
    """GET /history: the samples and events newer than ``since`` (UNIX s; None: all)."""
    events = history.events(since)
    shown = events[-bounds.MAX_EVENTS_SHOWN :]
    doc = {
        "schema": SCHEMA,
        "interval_s": interval_s,
        "job_id": job_id,
        "samples": [s.as_dict() for s in history.samples(since)],
        "events": shown,
        "events_omitted": len(events) - len(shown),
    }
    return contract.check_if_enabled(doc, "history")


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


# ---------------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------------
class UnknownJob(LookupError):
    """A ?job=ID that this sidecar does not watch (or no longer lists)."""


class NoDefaultJob(LookupError):
    """No ?job=, and none of the jobs listed is the caller's: a sidecar that lists every user's
    jobs never answers with another user's (args[0]: the caller's uid, None when unknown)."""


def job_entry(
    summary: dict[str, Any], root: Root | None = None, ended_unix_s: float | None = None
) -> dict[str, Any]:
    """A job's line in the jobs list, from its status summary (status_summary, or
    summary_of_document for a status document); ``root`` is a sources.lineage.RootInfo (owner,
    working directory, ancestors) or None when unknown."""
    target = summary["target"]
    brief = summary["job_processes"]
    return {
        "id": summary["job_id"],
        "root_pid": target["pid"],
        "command": target["cmdline"],
        "user": clip_opt(root.user) if root else None,
        "uid": root.uid if root else None,
        "yours": None,  # whose request it answers is known per request only (for_viewer)
        "cwd": clip_opt(root.cwd, bounds.MAX_TEXT_CHARS) if root else None,
        "ancestor_pids": list(root.ancestor_pids) if root else [],
        "slurm_job": clip_opt(root.slurm_job) if root else None,
        "start_time_unix_s": target["create_time_unix_s"],
        "alive": target["alive"],
        "ended_unix_s": ended_unix_s,
        "status": summary["status"],
        "message": summary["message"],
        "message_ref": summary["message_ref"],
        "first_warning": summary["warnings"][0] if summary["warnings"] else None,
        "warning_count": len(summary["warnings"]),
        "gpus": brief["gpus"],
        "process_count": brief["process_count"],
        "has_model": brief["has_model"],
        # .get: a peer's document from a sidecar before these fields (sidecar/serve/peers.py)
        "distributed": summary.get("distributed"),
        "pod": summary.get("pod"),
    }


def jobs_document(
    entries: list[dict[str, Any]], *, time_s: float, interval_s: float, mode: str, default_job: str | None
) -> dict[str, Any]:
    """GET /jobs: newest first (by the root's start), within bounds.MAX_JOBS_SHOWN shared out among
    users (fair_share)."""
    ordered = sorted(entries, key=lambda j: -(j["start_time_unix_s"] or 0.0))
    shown = fair_share(ordered, bounds.MAX_JOBS_SHOWN, lambda j: j["uid"])
    doc = {
        "schema": SCHEMA,
        "time_unix_s": time_s,
        "interval_s": interval_s,
        "mode": mode,
        "default_job": default_job,
        "jobs": shown,
        "jobs_omitted": len(ordered) - len(shown),
    }
    return contract.check_if_enabled(doc, "jobs")


def for_viewer(doc: dict[str, Any], viewer_uid: int | None) -> dict[str, Any]:
    """A status or jobs document as the user `viewer_uid` sees it (None: a caller not told apart):
    each listed job's `yours` says whether its root is that user's. A new document; the poll's own,
    shared by every request, is never changed."""
    jobs = doc.get("jobs")
    if viewer_uid is None or not isinstance(jobs, list):  # as polled: `yours` null (job_entry)
        return doc
    marked = [{**j, "yours": None if j["uid"] is None else j["uid"] == viewer_uid} for j in jobs]
    return {**doc, "jobs": marked}


def fair_share(items: list[T], limit: int, owner: Callable[[T], Hashable]) -> list[T]:
    """At most ``limit`` of ``items`` (best first), shared out among their owners in turns: each
    owner's best, then each one's second, ... So on a shared machine one user's hundred jobs never
    push another user's jobs out (root's discovery lists every user's). Kept in ``items``' order."""
    if len(items) <= limit:
        return items
    queues: dict[Hashable, list[T]] = {}
    for item in items:
        queues.setdefault(owner(item), []).append(item)
    chosen: set[int] = set()
    depth = 0
    while len(chosen) < limit:
        for queue in queues.values():
            if depth < len(queue) and len(chosen) < limit:
                chosen.add(id(queue[depth]))
        depth += 1
    return [item for item in items if id(item) in chosen]


class OneJob:
    """The documents of a sidecar that watches one job (--pid), as the server asks for them.
    Needs ``snapshot()``, ``history``, ``interval_s``; ``root_info()`` and ``ended_unix_s`` refine the
    jobs list when the subclass knows them."""

    interval_s: float = 1.5
    if TYPE_CHECKING:  # what a subclass provides (the poller; the tests' static sources)
        history: History

        def snapshot(self) -> tuple[dict[str, Any] | None, float | None]: ...

    def root_info(self) -> Root | None:
        return None

    @property
    def ended_unix_s(self) -> float | None:
        """When the job ended (UNIX s), where the subclass knows it."""
        return None

    def _own(self, job: str | None) -> dict[str, Any] | None:
        doc, _ = self.snapshot()
        if job is not None and (doc is None or job != doc["job_id"]):
            raise UnknownJob(job)
        return doc

    def status_document(self, job: str | None = None) -> dict[str, Any] | None:
        return self._own(job)

    def history_document(self, job: str | None = None, since: float | None = None) -> dict[str, Any] | None:
        doc = self._own(job)
        return None if doc is None else history_document(self.history, since, self.interval_s, doc["job_id"])

    def _summary(self) -> tuple[dict[str, Any] | None, float | None]:
        """The last status summary and its poll's time (a subclass that keeps its summary says so)."""
        doc, _ = self.snapshot()
        return (None, None) if doc is None else (summary_of_document(doc), doc["time_unix_s"])

    def _watched(self) -> tuple[dict[str, Any] | None, float | None, WatchLog]:
        """The last status summary, its poll's time and the job's watch log as of that poll (a
        subclass that keeps a watch log says so; else one that never saw an event)."""
        summary, time_s = self._summary()
        return summary, time_s, WatchLog()

    @property
    def run_key(self) -> str | None:
        """The job's run in the runs ledger (its key), where the subclass records it."""
        return None

    def watch_document(
        self, job: str | None = None, since: tuple[int, int] | None = None
    ) -> dict[str, Any] | None:
        """The job's WatchDocument (documents/watch.py), without its comparison: the events after the
        cursor `since` (verdict.watch.parse_cursor's)."""
        summary, time_s, log = self._watched()
        if summary is None or time_s is None:
            if job is not None:
                raise UnknownJob(job)
            return None
        if job is not None and job != summary["job_id"]:
            raise UnknownJob(job)
        return watch_document(summary, time_s, self.interval_s, log, since, self.run_key)

    def jobs_document(self) -> dict[str, Any] | None:
        summary, time_s = self._summary()
        if summary is None or time_s is None:  # both or neither: a summary is its poll's
            return None
        entry = job_entry(summary, self.root_info(), self.ended_unix_s)
        return jobs_document(
            [entry],
            time_s=time_s,
            interval_s=self.interval_s,
            mode="pid",
            default_job=summary["job_id"],
        )
