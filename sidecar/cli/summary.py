"""What `dsh-sidecar --once` prints without --json: a job's verdict and facts as a few lines of
text, and (discovery) one line per job before each job's. Every name and command in them is a
process's own, so each is made one line first (bounds.one_line_all)."""

from __future__ import annotations

from typing import Any

from sidecar.common import catalogue
from sidecar.documents.bounds import one_line_all


def human_summary(doc: dict[str, Any]) -> str:
    doc = one_line_all(doc)  # names and commands are the processes' own: never a line or escape of theirs
    lines = []
    t = doc["target"]
    lines.append(f"{doc['status']}: {doc['message']}")
    lines.append(f"  target pid {t['pid']} ({t.get('name') or '?'}), {'running' if t['alive'] else 'exited'}")
    for w in doc["warnings"]:
        lines.append(f"  [{w['severity']}] {w['code']}: {w['message']}")
        if w.get("hint"):
            lines.append(f"      hint: {w['hint']}")
    rt = doc["runtime"]
    if rt.get("torch"):
        build = _build(rt)
        # torch's CUDA beside the driver's (the NVML line below): the library CUDA needs and NVML does not.
        lib = ", libcuda.so.1 does not load" if rt.get("cuda_driver_loadable") is False else ""
        cuda = catalogue.render(rt.get("cuda_ref")) or "n/a"  # the page's and the plugin's text
        lines.append(f"torch {rt['torch']} ({build}), CUDA: {cuda}{lib}")
    nv = doc["nvml"]
    lines.append(
        f"NVIDIA driver: {nv['driver']} (CUDA {nv['cuda_driver']})"
        if nv["ok"]
        else f"NVIDIA driver: unavailable ({nv['error']})"
    )
    for g in doc["gpus"]:
        lines.append(
            f"  GPU {g['index']} {g['name']}: {_fmt(g['util_pct'], '%')} busy, "
            f"{_fmt(g['mem_used_mib'], ' MiB')} / {_fmt(g['mem_total_mib'], ' MiB')}"
        )
    for s in doc["system_gpus"]:
        usable = "" if s["nvml_index"] is not None else " (not usable by CUDA)"
        lines.append(f"  OS device {s['pci']}: {s['name']} [{s['driver'] or 'no driver'}]{usable}")
    lines.append("processes:")
    for p in doc["processes"]:
        role = p["role"] or ("no probe" if not p["has_probe"] else "?")
        models = ", ".join(f"{m['name']}@{m['device']}" for m in p["models"]) or "-"
        gpu = ", ".join(f"GPU{g['index']} {_fmt(g['mem_used_mib'], ' MiB')}" for g in p["gpu"]) or "-"
        lines.append(
            f"  {'  ' * p.get('depth', 0)}{p['pid']} {p['name']} [{role}] model: {models} gpu: {gpu}"
        )
    return "\n".join(lines)


def _build(rt: dict[str, Any]) -> str:
    """What torch was built for: a ROCm build has no CUDA version and is no CPU-only build."""
    for key, name in (("cuda_build", "CUDA"), ("hip_build", "ROCm"), ("xpu_build", "XPU")):
        if rt.get(key):
            return f"{name} {rt[key]}"
    return "CPU-only build"


def jobs_summary(jobs: dict[str, Any], docs: list[dict[str, Any]]) -> str:
    """--once without --pid: one line per job, then each job's summary."""
    if not jobs["jobs"]:
        return (
            "no jobs found: nothing of yours runs the probe or uses a GPU (add `import probe; "
            "probe.register(model)` to the training script, or watch one process with --pid PID)"
        )
    jobs = one_line_all(jobs)  # as in human_summary
    lines = [f"{len(jobs['jobs'])} job(s):"]
    for j in jobs["jobs"]:
        default = " (default)" if j["id"] == jobs["default_job"] else ""
        command = " ".join(j["command"] or ()) or "?"
        lines.append(f"  {j['id']}{default} [{j['status']}] {j['user'] or '?'}: {command}")
    by_id = {d["job_id"]: d for d in docs}
    for j in jobs["jobs"]:
        if j["id"] in by_id:
            lines += ["", f"job {j['id']}:", human_summary(by_id[j["id"]])]
    return "\n".join(lines)


def _fmt(x: Any, unit: str) -> str:
    if x is None:
        return "n/a"
    return f"{x:.0f}{unit}" if isinstance(x, float) else f"{x}{unit}"
