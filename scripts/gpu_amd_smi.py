"""What AMD's own tools say of a process's VRAM, for scripts/gpu_check_amd.py: `amd-smi process
--json`, else `rocm-smi --showpids --json`, parsed defensively (their JSON has changed shape between
ROCm releases). A shape not recognised is an error that says so, never a 0.

Shapes handled, from the CLIs' own source (ROCm/amdsmi `amdsmi_cli/amdsmi_commands.py` `process`
and `amdsmi_logger.py` `_store_output_amdsmi`/`_print_json_output`, tags rocm-5.7.0 to rocm-6.2.x;
ROCm/rocm-systems `projects/amdsmi/amdsmi_cli/amdsmi_commands.py` for ROCm 7; ROCm/rocm_smi_lib
`python_smi_tools/rocm_smi.py` `showPids`/`print2DArray`/`printSysLog`):

- amd-smi, ROCm 6.2 on: ``[{"gpu": 0, "process_list": [{"process_info": {"name", "pid",
  "memory_usage": {"gtt_mem", "cpu_mem", "vram_mem"}, "mem_usage", "usage", ...}}]}]``, each
  figure ``{"value": N, "unit": "B"}``; ``"process_info": "No running processes detected"`` when
  none.
- amd-smi, ROCm 5.7 to 6.1: ``[{"gpu": 0, "process_info": {...}}]`` for one process (the logger
  merges a lone dict into the GPU's entry), ``[{"gpu": 0, "values": [{"process_info": {...}}, ...]}]``
  for several, ``"process_info": "Not Found"`` for none; figures are bare byte counts.
- amd-smi, by process (ROCm 7's ``_process_sort_by_pid``): ``[{"pid", "name", "gpus": [{"gpu_index",
  "mem", "memory_usage": {"vram_mem", ...}, ...}]}]``.
- rocm-smi ``--showpids [details] --json``: ``{"system": {"PID<pid>": "<name>, <gpu count>, <vram
  bytes>, <sdma>, <cu occupancy>"}}`` (the name lower-cased, its spaces turned into ", "); no GPU
  index (the count is not one: ROCm/rocm_smi_lib#166), so its row covers all the process's GPUs.

Human-readable strings (``"2.0 GB"``, 1024-based as amd-smi's ``convert_bytes_to_readable``) are
read too, should a version print them in JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MIB = 2**20
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 2**10,
    "kib": 2**10,
    "mb": 2**20,
    "mib": 2**20,
    "gb": 2**30,
    "gib": 2**30,
    "tb": 2**40,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")
_ROCM_SMI_PID = re.compile(r"PID(\d+)")


@dataclass(frozen=True)
class SmiProcess:
    pid: int
    gpu: int | None  # the tool's GPU number (amd-smi's); None: rocm-smi's row, all its GPUs
    vram_bytes: int | None  # None: the tool printed no VRAM figure it could be read from
    field: str  # where the figure came from ("memory_usage.vram_mem", "mem", "rocm-smi vram")


@dataclass(frozen=True)
class SmiReading:
    tool: str
    processes: tuple[SmiProcess, ...] = ()
    shape: str = ""  # which shape was recognised
    error: str | None = None  # why nothing could be read: not run, no JSON, a shape not known

    def rows_of(self, pid: int) -> list[SmiProcess]:
        return [p for p in self.processes if p.pid == pid]

    def vram_mib_of(self, pid: int, gpu: int | None = None) -> float | None:
        """The pid's VRAM in MiB on amd-smi GPU ``gpu`` (any GPU when None or rocm-smi's row), summed
        over the rows that match; None when no row has a figure."""
        rows = [
            p for p in self.rows_of(pid) if p.vram_bytes is not None and (gpu is None or p.gpu in (gpu, None))
        ]
        return sum(p.vram_bytes or 0 for p in rows) / MIB if rows else None


def size_bytes(value: Any) -> int | None:
    """A memory figure as bytes: a bare number (bytes), ``{"value": N, "unit": "B"}``, or a string
    ``"2048"`` / ``"2.0 GB"``; None for ``"N/A"`` and anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, dict) and "value" in value:
        inner = value["value"]
        unit = str(value.get("unit") or "")
        return size_bytes(f"{inner} {unit}") if isinstance(inner, (int, float, str)) else None
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        factor = _UNITS.get(m.group(2).lower()) if m else None
        return int(float(m.group(1)) * factor) if m and factor is not None else None
    return None


def json_in(text: str) -> Any:
    """The first JSON value in a tool's output: amd-smi and rocm-smi may print a warning line (a
    missing render/video group, a library notice) before it. Raises ValueError when there is none."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^[ \t]*[\[{]", text, re.MULTILINE):
        try:
            return decoder.raw_decode(text, m.end() - 1)[0]
        except json.JSONDecodeError:
            continue
    raise ValueError("no JSON in its output")


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _record(info: Any, gpu: int | None) -> SmiProcess | None:
    """One amd-smi process_info (or by-process GPU entry with its pid filled in)."""
    if not isinstance(info, dict):
        return None  # "No running processes detected", "Not Found", "N/A"
    pid = _int(info.get("pid"))
    if pid is None:
        return None
    usage = info.get("memory_usage")
    if isinstance(usage, dict) and "vram_mem" in usage:
        return SmiProcess(pid, gpu, size_bytes(usage["vram_mem"]), "memory_usage.vram_mem")
    for key in ("mem_usage", "mem"):  # all of its memory: only where VRAM is not told apart
        if key in info:
            return SmiProcess(pid, gpu, size_bytes(info[key]), key)
    return SmiProcess(pid, gpu, None, "none")


def _gpu_entries(data: Any) -> Iterator[dict[str, Any]]:
    """The per-GPU (or per-process) objects of amd-smi's output: a list of them, one alone, or a
    list under one key of a wrapping object."""
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict):
                yield item
    elif isinstance(data, dict):
        if any(k in data for k in ("gpu", "pid", "process_list", "process_info")):
            yield data
        else:
            lists = [v for v in data.values() if isinstance(v, list)]
            if len(lists) == 1:
                yield from _gpu_entries(lists[0])


def _infos(entry: dict[str, Any]) -> Iterator[Any]:
    for key in ("process_list", "values"):
        items = entry.get(key)
        if isinstance(items, dict):
            items = [items]
        if isinstance(items, list):
            for item in items:
                yield item.get("process_info") if isinstance(item, dict) and "process_info" in item else item
    if "process_info" in entry:
        yield entry["process_info"]


def parse_amd_smi_process(text: str) -> SmiReading:
    tool = "amd-smi process"
    try:
        data = json_in(text)
    except ValueError as exc:
        return SmiReading(tool, error=f"{exc}: {text.strip()[:80]!r}")
    out: list[SmiProcess] = []
    shapes: set[str] = set()
    for entry in _gpu_entries(data):
        if isinstance(entry.get("gpus"), list) and "pid" in entry:  # by process
            shapes.add("by-pid")
            for g in entry["gpus"]:
                if isinstance(g, dict):
                    rec = _record({**g, "pid": entry["pid"]}, _int(g.get("gpu_index", g.get("gpu"))))
                    out += [rec] if rec else []
            continue
        if "gpu" not in entry:
            continue
        shapes.add("process_list" if "process_list" in entry else "values (ROCm 5.7-6.1)")
        out += [r for r in (_record(info, _int(entry["gpu"])) for info in _infos(entry)) if r]
    if not shapes:
        keys = sorted(data)[:6] if isinstance(data, dict) else type(data).__name__
        return SmiReading(tool, error=f"JSON of a shape not known (top level: {keys}); amd-smi's version?")
    return SmiReading(tool, tuple(out), "+".join(sorted(shapes)))


def parse_rocm_smi_pids(text: str) -> SmiReading:
    tool = "rocm-smi --showpids"
    try:
        data = json_in(text)
    except ValueError as exc:
        return SmiReading(tool, error=f"{exc}: {text.strip()[:80]!r}")
    if not isinstance(data, dict):
        return SmiReading(tool, error=f"JSON of a shape not known (a {type(data).__name__})")
    system = data.get("system", {})
    if not isinstance(system, dict):
        return SmiReading(tool, error="JSON of a shape not known ('system' is not an object)")
    out = []
    for key, value in system.items():
        m = _ROCM_SMI_PID.fullmatch(str(key))
        if not m:
            continue
        fields = [f.strip() for f in str(value).split(",")]
        # name (may hold ", "), gpu count, vram bytes, sdma, cu occupancy: count from the end
        vram = size_bytes(fields[-3]) if len(fields) >= 5 else None
        out.append(SmiProcess(int(m.group(1)), None, vram, "rocm-smi vram"))
    return SmiReading(tool, tuple(out), "system/PID")


def parse_amd_smi_list(text: str) -> dict[int, str]:
    """`amd-smi list --json`: amd-smi's GPU number -> PCI address (``bdf``), lower-case; {} when
    it cannot be read."""
    try:
        data = json_in(text)
    except ValueError:
        return {}
    out = {}
    for entry in _gpu_entries(data):
        gpu, bdf = _int(entry.get("gpu")), entry.get("bdf")
        if gpu is not None and isinstance(bdf, str):
            out[gpu] = bdf.strip().lower()
    return out


def pci_key(address: str | None) -> str | None:
    """A PCI address with its domain at 4 digits and lower-case ("00000000:C1:00.0" and
    "0000:c1:00.0" are one device)."""
    if not address:
        return None
    parts = address.strip().lower().split(":")
    if len(parts) == 3:
        parts[0] = f"{int(parts[0], 16):04x}" if re.fullmatch(r"[0-9a-f]+", parts[0]) else parts[0]
    elif len(parts) == 2:
        parts.insert(0, "0000")
    return ":".join(parts)


def within_pct(measured: float | None, reference: float | None, pct: float = 5.0) -> bool:
    """``measured`` within ``pct`` % of ``reference`` (both known, reference above 0)."""
    if measured is None or reference is None or reference <= 0:
        return False
    return abs(measured - reference) <= reference * pct / 100.0
