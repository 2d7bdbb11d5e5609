"""gpu_status's GPUs (sidecar/serve/mcp_server.py): each one's vendor and figures and, for an AMD or
Intel GPU, what its driver cannot tell (a figure null for that reason, said in words, never a 0),
and who else uses it. The other processes' names are what those processes called themselves: they
are said only inside the untrusted block."""

from __future__ import annotations

import re
from typing import Any

from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS
from sidecar.documents.bounds import MAX_ID_CHARS, clip_opt, printable
from sidecar.verdict.facts import ACCELERATOR_TYPES

MAX_GPUS_SHOWN = 64  # GPUs per answer (a node has 8 or 16)
# A kernel driver's name (amdgpu, i915, xe): said outside the block only when it looks like one.
_DRIVER = re.compile(r"[a-z][a-z0-9_]{0,31}")
_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}


def _cannot_tell(g: dict[str, Any]) -> list[str]:
    """What an AMD or Intel GPU's driver does not report, as short phrases (NVIDIA's: NVML's
    field_errors say it, and an answer gives the figures as they are)."""
    if g.get("vendor", "nvidia") == "nvidia":
        return []
    driver = g.get("driver")
    who = driver if isinstance(driver, str) and _DRIVER.fullmatch(driver) else "its driver"
    out = []
    if g.get("util_pct") is None:
        out.append(f"utilisation unknown: {who} reports none")
    if g.get("mem_used_mib") is None:
        out.append(f"memory in use unknown: {who} reports none")
    if g.get("other_process_count") is None:
        out.append("other processes not read")
    return out


def gpu_items(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The status document's GPUs as gpu_status's value gives them."""
    out = []
    for g in gpus[:MAX_GPUS_SHOWN]:
        names = g.get("other_process_names")
        out.append(
            {
                **{k: g[k] for k in ("index", "util_pct", "mem_used_mib", "mem_total_mib")},
                "name": clip_opt(g["name"]),
                "vendor": g.get("vendor", "nvidia"),
                "cannot_tell": _cannot_tell(g),
                "other_process_count": g.get("other_process_count"),
                "other_process_names": (
                    None if names is None else [printable(clip_opt(n, MAX_ID_CHARS) or "") for n in names]
                ),
            }
        )
    return out


def model_on_gpu(device: str | None) -> bool | None:
    """True for a model on a GPU (cuda:N, NVIDIA's or a ROCm build's AMD GPU; xpu:N, Intel's; mps),
    False for one wholly on another device, None when it cannot be said: no model, a model without
    parameters (no device at all) or one split over devices ("mixed")."""
    if device is None or device in (DEVICE_NO_PARAMETERS, DEVICE_MIXED):
        return None
    return device.partition(":")[0] in ACCELERATOR_TYPES


def busy_text(gpu: dict[str, Any]) -> str:
    """How busy a GPU is, for the answer line; an AMD or Intel driver's unknown said as such."""
    unknown = gpu["util_pct"] is None and gpu["cannot_tell"]  # why: in the GPU's own line
    return "utilisation unknown" if unknown else f"{_pct(gpu['util_pct'])} busy"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _mem(g: dict[str, Any]) -> str:
    used, total = g["mem_used_mib"], g["mem_total_mib"]
    if used is None:
        return ""
    return f", {used:.0f} of {total:.0f} MiB" if total is not None else f", {used:.0f} MiB"


def gpu_lines(gpus: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(lines said outside the block, lines of data for it): one line per GPU with its vendor,
    figures and what cannot be told; the other processes' names as data."""
    said: list[str] = []
    data: list[str] = []
    for g in gpus:
        vendor = _VENDOR_NAMES.get(g["vendor"], "another vendor")
        figures = [] if g["util_pct"] is None and g["cannot_tell"] else [f"{_pct(g['util_pct'])} busy"]
        line = f"- GPU {g['index']} ({vendor}): " + "; ".join(figures + g["cannot_tell"]) + _mem(g)
        count = g["other_process_count"]
        if count:
            line += f"; {count} other process(es) use it" + (
                " (named below)" if g["other_process_names"] else ""
            )
        said.append(line)
        if g["other_process_names"]:
            data.append(f"GPU {g['index']} is also used by: {', '.join(g['other_process_names'])}")
    return said, data
