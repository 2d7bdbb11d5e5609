"""The documents the sidecar serves (schema 2): their one typed definition.

Everything a client reads is declared here, once, with its type and meaning; units are in the
names (`_mib` MiB, `_pct` percent 0-100, `_s` seconds, `_unix_s` UNIX time in seconds, `_hz` per
second, `_bytes` bytes, `_fraction` 0-1). From these declarations come:

- the JSON Schema served at `GET /api/dsh-gpu-dashboard/schema` (`json_schema()`),
- the field tables of `docs/api.md` (`markdown()`),
- the JSDoc typedefs of `sidecar/static/contract.js`, used by the page and the DSH plugin (`jsdoc()`).

`python -m sidecar.contract --write` regenerates the two files; a test fails when they are not
current. Every key is always present (absent values are null), and no other key is allowed: a
field added to a document without its line here fails every test that builds that document, since
the tests run with `DSH_CONTRACT_CHECK=1` (`check()`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

SCHEMA = 2
SCHEMA_ID = "https://dsh-gpu-dashboard.invalid/schema/2"
CHECK_ENV = "DSH_CONTRACT_CHECK"


# ---------------------------------------------------------------------------------------------
# The type language: small on purpose (JSON's types, lists, objects, maps, enums)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prim:
    json: str  # JSON Schema type name
    js: str  # JSDoc type


INT = Prim("integer", "number")
NUM = Prim("number", "number")
STR = Prim("string", "string")
BOOL = Prim("boolean", "boolean")


@dataclass(frozen=True)
class Enum:
    values: tuple[Any, ...]


@dataclass(frozen=True)
class ListOf:
    item: Any
    max_items: int | None = None


@dataclass(frozen=True)
class MapOf:
    """An object with free string keys (values all of one type)."""

    value: Any


@dataclass(frozen=True)
class OneOf:
    options: tuple[Any, ...]


@dataclass(frozen=True)
class F:
    """A field: its type, whether it may be null, and what it means (units are in the name)."""

    type: Any
    doc: str
    null: bool = False


@dataclass(frozen=True)
class Obj:
    name: str
    doc: str
    fields: dict[str, F]


class Lazy:
    """A reference to an object type declared later (recursive types)."""

    def __init__(self, name: str):
        self.name = name


# ---------------------------------------------------------------------------------------------
# The documents
# ---------------------------------------------------------------------------------------------
STATUSES = ("GPU", "CPU", "MIXED", "UNKNOWN")
SEVERITIES = ("error", "warning", "info")

TEXT_REF = Obj(
    "TextRef",
    "A text of the catalogue (sidecar/static/i18n/<lang>.json) and what fills its {placeholders}. "
    "A param is a display-ready, language-neutral string or number, or itself a TextRef.",
    {
        "id": F(STR, "catalogue key"),
        "params": F(MapOf(OneOf((STR, NUM, Lazy("TextRef")))), "placeholder name -> value"),
    },
)

WARNING = Obj(
    "Warning",
    "One warning of the verdict, most severe first.",
    {
        "code": F(STR, "stable identifier, e.g. `idle-gpu` (README lists them)"),
        "severity": F(Enum(SEVERITIES), "error, warning or info"),
        "pids": F(ListOf(INT), "the processes it is about"),
        "message": F(STR, "what is wrong, in English"),
        "hint": F(STR, "what to do, in English", null=True),
        "message_ref": F(TEXT_REF, "the message in the catalogue, for any language"),
        "hint_ref": F(TEXT_REF, "the hint in the catalogue", null=True),
    },
)

TARGET = Obj(
    "Target",
    "The watched process (the root of the job's tree).",
    {
        "pid": F(INT, "process id"),
        "alive": F(BOOL, "false once it has exited"),
        "name": F(STR, "process name", null=True),
        "cmdline": F(ListOf(STR), "its command line, redacted and clipped", null=True),
        "create_time_unix_s": F(NUM, "when it started", null=True),
    },
)

RUNTIME = Obj(
    "Runtime",
    "The job's torch build as its main probed process reports it.",
    {
        "torch": F(STR, "torch version", null=True),
        "cuda_build": F(STR, "CUDA version torch was built for; null for a CPU-only build", null=True),
        "cudnn": F(INT, "cuDNN version", null=True),
        "cuda_available": F(BOOL, "torch.cuda.is_available() in that process", null=True),
        "device_count": F(INT, "CUDA devices torch sees", null=True),
        "cuda_visible_devices": F(STR, "CUDA_VISIBLE_DEVICES of that process", null=True),
    },
)

NVML = Obj(
    "Nvml",
    "The NVIDIA driver as NVML answers.",
    {
        "ok": F(BOOL, "NVML could be queried"),
        "driver": F(STR, "driver version", null=True),
        "cuda_driver": F(STR, "highest CUDA version the driver supports", null=True),
        "error": F(STR, "why NVML cannot be queried", null=True),
    },
)

GPU = Obj(
    "Gpu",
    "One NVIDIA GPU (NVML).",
    {
        "index": F(INT, "NVML index (nvidia-smi's numbering)"),
        "uuid": F(STR, "GPU-... UUID", null=True),
        "name": F(STR, "product name", null=True),
        "pci_bus_id": F(STR, "PCI address", null=True),
        "util_pct": F(NUM, "time a kernel ran over the driver's last sample period", null=True),
        "mem_util_pct": F(NUM, "time device memory was read or written", null=True),
        "mem_used_mib": F(NUM, "memory in use (exact: the driver's bytes / 2^20)", null=True),
        "mem_total_mib": F(NUM, "memory in all (exact)", null=True),
        "framework_index": F(INT, "N of the `cuda:N` that names it in the job's main process", null=True),
        "lost": F(BOOL, "the driver reports the GPU lost (fell off the bus)"),
        "field_errors": F(MapOf(STR), "why a null field is null, per NVML (field -> error)"),
        "other_process_count": F(INT, "processes outside this job that use the GPU"),
    },
)

SYSTEM_GPU = Obj(
    "SystemGpu",
    "A graphics device the OS lists (sysfs), NVIDIA or not.",
    {
        "vendor": F(STR, "NVIDIA, Intel, AMD, ..."),
        "name": F(STR, "device name"),
        "pci": F(STR, "PCI address", null=True),
        "driver": F(STR, "kernel driver bound to it", null=True),
        "nvml_index": F(INT, "the NVML index of the same device; null: CUDA cannot use it", null=True),
    },
)

MODEL = Obj(
    "Model",
    "A model registered with the probe in that process.",
    {
        "name": F(STR, "its name (the attribute or class name)"),
        "device": F(STR, "`cpu`, `cuda:0`, ..., `mixed`, `meta`, `no-parameters`", null=True),
        "devices": F(ListOf(STR), "every device its parameters are on"),
        "param_count": F(INT, "number of parameters", null=True),
        "input_device": F(STR, "device of the last forward call's first tensor input", null=True),
        "forward_calls": F(INT, "forward calls counted since registration"),
        "forward_rate_hz": F(NUM, "forward calls per second over the last 10 s", null=True),
        "data_wait_fraction": F(NUM, "share of step time spent waiting for the next batch (0-1)", null=True),
        "train_steps": F(INT, "training steps a framework callback counted", null=True),
        "step_rate_hz": F(NUM, "training steps per second over the last 10 s", null=True),
        "step_source": F(Enum(("lightning", "transformers")), "the callback counting steps", null=True),
        "shared_memory": F(BOOL, "parameters in shared memory (hogwild); null off the CPU", null=True),
    },
)

PROCESS_GPU = Obj(
    "ProcessGpu",
    "What NVML says of one process on one GPU.",
    {
        "index": F(INT, "NVML index of the GPU"),
        "mem_used_mib": F(NUM, "GPU memory the process uses there (exact)", null=True),
        "sm_util_pct": F(NUM, "its SM utilisation there over the last sample period", null=True),
    },
)

PROCESS = Obj(
    "Process",
    "A process of the job's tree, the target first, depth-first.",
    {
        "pid": F(INT, "process id"),
        "ppid": F(INT, "parent pid", null=True),
        "depth": F(INT, "0 for the target, 1 for its children, ..."),
        "role": F(STR, "main, dataloader-worker, rank, child (null without a probe)", null=True),
        "has_probe": F(BOOL, "its probe's facts are read"),
        "probe_state": F(STR, "ok, missing, busy, corrupt, stale, owner-mismatch, ..."),
        "probe_error": F(STR, "why its probe cannot be read", null=True),
        "name": F(STR, "process name"),
        "cmdline": F(ListOf(STR), "command line, redacted and clipped", null=True),
        "cpu_pct": F(NUM, "CPU time since the previous poll, percent of one core", null=True),
        "rss_mib": F(NUM, "resident memory", null=True),
        "rank": F(INT, "torch.distributed rank", null=True),
        "local_rank": F(INT, "LOCAL_RANK", null=True),
        "world_size": F(INT, "WORLD_SIZE", null=True),
        "dist_backend": F(STR, "nccl, gloo, ...", null=True),
        "worker_id": F(INT, "DataLoader worker id", null=True),
        "loader": F(STR, "the loader a DataLoader worker serves (train, validation)", null=True),
        "cuda_reserved_mib": F(NUM, "memory its CUDA caching allocator holds (probe)", null=True),
        "models": F(ListOf(MODEL), "registered models (at most 8)"),
        "models_omitted": F(INT, "registered models left out"),
        "gpu": F(ListOf(PROCESS_GPU), "its use of each GPU (NVML)"),
    },
)

EVENT = Obj(
    "Event",
    "A marker of the job (`probe.event(name)`, framework hooks), oldest first.",
    {
        "time_unix_s": F(NUM, "when it happened"),
        "name": F(STR, "its name"),
        "pid": F(INT, "the process that recorded it"),
    },
)

MEMORY_GROWTH = Obj(
    "MemoryGrowth",
    "The job's GPU memory growing steadily (the `memory-growth` warning's evidence).",
    {
        "first_mib": F(NUM, "job's GPU memory at the window's start"),
        "last_mib": F(NUM, "and now"),
        "start_unix_s": F(NUM, "the window's start"),
        "end_unix_s": F(NUM, "the window's end (the last poll)"),
        "rate_mib_per_min": F(NUM, "(last - first) / window"),
    },
)

JOB = Obj(
    "Job",
    "One job: a process tree found through its probe segments or its GPU use, grouped under its root "
    "(the topmost ancestor that is probed, uses a GPU, or is a known launcher such as torchrun).",
    {
        "id": F(STR, "`<root pid>-<root start ticks>`: the job's identity, never reused"),
        "root_pid": F(INT, "the root process"),
        "command": F(ListOf(STR), "the root's command line, redacted and clipped", null=True),
        "user": F(STR, "the root's user name (its uid as text when the name is unknown)", null=True),
        "uid": F(INT, "the root's real uid", null=True),
        "cwd": F(STR, "the root's working directory (null when it cannot be read)", null=True),
        "ancestor_pids": F(ListOf(INT, 32), "the root's parent, its parent, ... up to pid 1 (session linkage)"),
        "start_time_unix_s": F(NUM, "when the root started", null=True),
        "alive": F(BOOL, "false once the root has exited"),
        "ended_unix_s": F(NUM, "when the sidecar saw it exit", null=True),
        "status": F(Enum(STATUSES), "the job's verdict"),
        "message": F(STR, "the verdict in one sentence, in English"),
        "message_ref": F(TEXT_REF, "the same in the catalogue"),
        "first_warning": F(WARNING, "the most severe warning", null=True),
        "warning_count": F(INT, "warnings of the verdict"),
        "gpus": F(ListOf(INT), "NVML indices of the GPUs the job uses"),
        "process_count": F(INT, "processes in its tree"),
        "has_model": F(BOOL, "a model is registered with the probe"),
    },
)

JOBS_DOCUMENT = Obj(
    "JobsDocument",
    "GET /api/dsh-gpu-dashboard/jobs: every job this sidecar watches, the newest first.",
    {
        "schema": F(Enum((SCHEMA,)), "the document's schema; a client that reads another says so"),
        "time_unix_s": F(NUM, "when the last poll ran"),
        "interval_s": F(NUM, "time between polls"),
        "mode": F(Enum(("pid", "discovery")), "`pid`: one job given by --pid; `discovery`: every job found"),
        "default_job": F(STR, "the job /status answers without ?job= (the newest with a model)", null=True),
        "jobs": F(ListOf(JOB, 64), "the jobs, newest first (at most 64)"),
        "jobs_omitted": F(INT, "jobs left out"),
    },
)

STATUS_DOCUMENT = Obj(
    "StatusDocument",
    "GET /api/dsh-gpu-dashboard/status: the job now.",
    {
        "schema": F(Enum((SCHEMA,)), "the document's schema; a client that reads another says so"),
        "time_unix_s": F(NUM, "when the poll behind it ran"),
        "interval_s": F(NUM, "time between polls"),
        "job_id": F(STR, "this job's id (see JobsDocument)"),
        "target": F(TARGET, "the watched process"),
        "status": F(Enum(STATUSES), "where the compute goes"),
        "message": F(STR, "the verdict in one sentence, in English"),
        "message_ref": F(TEXT_REF, "the same in the catalogue"),
        "warnings": F(ListOf(WARNING), "most severe first"),
        "model_device": F(STR, "device of the first registered model", null=True),
        "input_device": F(STR, "device of its inputs", null=True),
        "model_gpu_index": F(INT, "NVML index of the GPU that model is on (see `gpus`)", null=True),
        "memory_growth": F(MEMORY_GROWTH, "present while GPU memory keeps growing", null=True),
        "runtime": F(RUNTIME, "the torch build"),
        "nvml": F(NVML, "the driver"),
        "gpus": F(ListOf(GPU), "NVIDIA GPUs, by NVML index"),
        "system_gpus": F(ListOf(SYSTEM_GPU), "graphics devices the OS lists"),
        "processes": F(ListOf(PROCESS, 256), "the job's processes (at most 256)"),
        "processes_omitted": F(INT, "processes left out (count or size bound)"),
        "events": F(ListOf(EVENT, 100), "the last 100 events"),
        "events_omitted": F(INT, "older events left out"),
        "jobs": F(ListOf(JOB, 64), "in discovery mode, every job (as /jobs lists them); else null", null=True),
    },
)

SAMPLE_GPU = Obj(
    "SampleGpu",
    "One GPU in one history sample.",
    {
        "index": F(INT, "NVML index"),
        "util_pct": F(NUM, "utilisation", null=True),
        "mem_used_mib": F(NUM, "memory in use", null=True),
    },
)

SAMPLE_PROCESS = Obj(
    "SampleProcess",
    "One GPU process of the job in one history sample.",
    {
        "pid": F(INT, "process id"),
        "gpu_mem_mib": F(NUM, "its GPU memory, all GPUs", null=True),
        "sm_util_pct": F(NUM, "its SM utilisation, summed over GPUs", null=True),
    },
)

SAMPLE = Obj(
    "Sample",
    "One poll in the history.",
    {
        "time_unix_s": F(NUM, "when the poll ran"),
        "gpus": F(ListOf(SAMPLE_GPU), "per GPU"),
        "processes": F(ListOf(SAMPLE_PROCESS), "per GPU process of the job"),
    },
)

HISTORY_DOCUMENT = Obj(
    "HistoryDocument",
    "GET /api/dsh-gpu-dashboard/history[?since=UNIX_S]: the ring buffer, oldest first.",
    {
        "schema": F(Enum((SCHEMA,)), "the document's schema; a client that reads another says so"),
        "interval_s": F(NUM, "time between polls"),
        "job_id": F(STR, "the job these samples are of"),
        "samples": F(ListOf(SAMPLE), "samples newer than `since`"),
        "events": F(ListOf(EVENT, 100), "events newer than `since` (the last 100)"),
        "events_omitted": F(INT, "older events left out"),
    },
)

DOCUMENTS = {"status": STATUS_DOCUMENT, "history": HISTORY_DOCUMENT, "jobs": JOBS_DOCUMENT}


# ---------------------------------------------------------------------------------------------
# Walking the declarations
# ---------------------------------------------------------------------------------------------
def object_types() -> dict[str, Obj]:
    """Every object type the documents use, by name, in first-use order."""
    out: dict[str, Obj] = {}

    def visit(t: Any) -> None:
        if isinstance(t, Obj):
            if t.name in out:
                return
            out[t.name] = t
            for f in t.fields.values():
                visit(f.type)
        elif isinstance(t, ListOf):
            visit(t.item)
        elif isinstance(t, MapOf):
            visit(t.value)
        elif isinstance(t, OneOf):
            for o in t.options:
                visit(o)

    for doc in DOCUMENTS.values():
        visit(doc)
    return out


def _schema_of(t: Any, null: bool = False) -> dict[str, Any]:
    if isinstance(t, Prim):
        return {"type": [t.json, "null"] if null else t.json}
    if isinstance(t, Enum):
        return {"enum": [*t.values, None] if null else list(t.values)}
    if isinstance(t, Obj | Lazy):
        ref = {"$ref": f"#/$defs/{t.name}"}
        return {"anyOf": [ref, {"type": "null"}]} if null else ref
    if isinstance(t, ListOf):
        out: dict[str, Any] = {"type": ["array", "null"] if null else "array", "items": _schema_of(t.item)}
        if t.max_items is not None:
            out["maxItems"] = t.max_items
        return out
    if isinstance(t, MapOf):
        return {"type": ["object", "null"] if null else "object", "additionalProperties": _schema_of(t.value)}
    if isinstance(t, OneOf):
        return {"anyOf": [_schema_of(o) for o in t.options] + ([{"type": "null"}] if null else [])}
    raise TypeError(f"no JSON Schema for {t!r}")


def _object_schema(o: Obj) -> dict[str, Any]:
    props = {name: {**_schema_of(f.type, f.null), "description": f.doc} for name, f in o.fields.items()}
    return {
        "type": "object",
        "description": o.doc,
        "properties": props,
        "required": list(o.fields),
        "additionalProperties": False,
    }


def json_schema(document: str | None = None) -> dict[str, Any]:
    """The JSON Schema (2020-12) of one document ("status", "history"), or of either."""
    top = (
        {"$ref": f"#/$defs/{DOCUMENTS[document].name}"}
        if document
        else {"anyOf": [{"$ref": f"#/$defs/{d.name}"} for d in DOCUMENTS.values()]}
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "dsh-gpu-dashboard sidecar documents, schema 2",
        **top,
        "$defs": {name: _object_schema(o) for name, o in object_types().items()},
    }


class ContractError(ValueError):
    pass


def _is_int(v: Any) -> bool:  # JSON Schema's integer: 2 and 2.0, never true
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


_PRIM_OK = {
    "integer": _is_int,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
}
_OBJECTS: dict[str, Obj] = {}


def _problem(v: Any, t: Any, null: bool, at: str) -> str | None:
    """Why `v` is not of type `t` (the first reason found), or None. The same rules as the JSON
    Schema above (a test runs both on the same documents), a few times faster: the test suite
    checks every document every poll builds."""
    if v is None:
        return None if null else f"{at}: null where a value is required"
    if isinstance(t, Prim):
        return None if _PRIM_OK[t.json](v) else f"{at}: expected {t.json}, got {type(v).__name__}"
    if isinstance(t, Enum):
        ok = any(v == x and type(v) is type(x) for x in t.values)
        return None if ok else f"{at}: {v!r} is not one of {list(t.values)}"
    if isinstance(t, ListOf):
        if not isinstance(v, list):
            return f"{at}: expected a list, got {type(v).__name__}"
        if t.max_items is not None and len(v) > t.max_items:
            return f"{at}: {len(v)} items, at most {t.max_items}"
        return next((p for i, x in enumerate(v) if (p := _problem(x, t.item, False, f"{at}[{i}]"))), None)
    if isinstance(t, MapOf):
        if not isinstance(v, dict):
            return f"{at}: expected an object, got {type(v).__name__}"
        return next((p for k, x in v.items() if (p := _problem(x, t.value, False, f"{at}.{k}"))), None)
    if isinstance(t, OneOf):
        return None if any(_problem(v, o, False, at) is None for o in t.options) else f"{at}: no option fits {v!r:.60}"
    o = _OBJECTS[t.name] if isinstance(t, Lazy) else t
    if not isinstance(v, dict):
        return f"{at}: expected {o.name} (an object), got {type(v).__name__}"
    if v.keys() != o.fields.keys():
        extra, missing = sorted(set(v) - set(o.fields)), sorted(set(o.fields) - set(v))
        return f"{at}: {o.name} " + "; ".join(
            s for s in (f"unknown keys {extra}" if extra else "", f"missing keys {missing}" if missing else "") if s
        )
    return next((p for k, f in o.fields.items() if (p := _problem(v[k], f.type, f.null, f"{at}.{k}"))), None)


def check(doc: Any, document: str) -> None:
    """Raise ContractError when `doc` is not a valid `document` ("status", "history", "jobs")."""
    if not _OBJECTS:
        _OBJECTS.update(object_types())
    problem = _problem(doc, DOCUMENTS[document], False, document)
    if problem:
        raise ContractError(f"{document} document breaks schema {SCHEMA}: {problem[:400]}")


def check_if_enabled(doc: Any, document: str) -> Any:
    """`check` when DSH_CONTRACT_CHECK=1 (the test suite sets it for every process it starts)."""
    if os.environ.get(CHECK_ENV) == "1":
        check(doc, document)
    return doc


# ---------------------------------------------------------------------------------------------
# Generated files
# ---------------------------------------------------------------------------------------------
def _type_text(t: Any, js: bool) -> str:
    if isinstance(t, Prim):
        return t.js if js else t.json
    if isinstance(t, Enum):
        values = [json.dumps(v) for v in t.values]
        return "|".join(values) if js else ("one of " + ", ".join(values) if len(values) > 1 else values[0])
    if isinstance(t, Obj | Lazy):
        return t.name
    if isinstance(t, ListOf):
        inner = _type_text(t.item, js)
        return f"Array<{inner}>" if js else f"list of {inner}"
    if isinstance(t, MapOf):
        inner = _type_text(t.value, js)
        return f"Object<string, {inner}>" if js else f"map of {inner}"
    if isinstance(t, OneOf):
        return ("(" + "|".join(_type_text(o, js) for o in t.options) + ")") if js else " or ".join(
            _type_text(o, js) for o in t.options
        )
    raise TypeError(repr(t))


GENERATED = "GENERATED by `python -m sidecar.contract --write` from sidecar/contract.py; do not edit."


def markdown() -> str:
    """docs/api.md: every object type as a table."""
    lines = [
        "# The sidecar's documents (schema 2)",
        "",
        f"<!-- {GENERATED} -->",
        "",
        "Routes: `GET /api/dsh-gpu-dashboard/status[?job=ID]` (a `StatusDocument`), `GET "
        "/api/dsh-gpu-dashboard/history[?job=ID][&since=UNIX_S]` (a `HistoryDocument`), `GET "
        "/api/dsh-gpu-dashboard/jobs` (a `JobsDocument`), `GET /api/dsh-gpu-dashboard/schema` (the JSON "
        "Schema of all three). Without `job`, `status` and `history` answer for the `default_job`; an "
        "unknown job is a 404 with a JSON reason. `dsh-sidecar --pid PID --once --json` prints a "
        "`StatusDocument`; without `--pid` (discovery), `{\"jobs\": JobsDocument, \"documents\": "
        "[StatusDocument, ...]}`. Every key is always present; absent values are `null`. Units are in the "
        "names: `_mib` MiB (2^20 bytes), `_pct` percent 0-100, `_s` seconds, `_unix_s` UNIX time in "
        "seconds, `_hz` per second, `_fraction` 0-1. A client that gets another `schema` must say so "
        "rather than guess.",
        "",
    ]
    for o in object_types().values():
        lines += [f"## {o.name}", "", o.doc, "", "| field | type | meaning |", "|---|---|---|"]
        for name, f in o.fields.items():
            kind = _type_text(f.type, js=False) + (" or null" if f.null else "")
            lines.append(f"| `{name}` | {kind} | {f.doc.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def jsdoc() -> str:
    """sidecar/static/contract.js: SCHEMA and JSDoc typedefs for the page and the DSH plugin."""
    out = [f"// {GENERATED}", "", f"export const SCHEMA = {SCHEMA}", ""]
    for o in object_types().values():
        out += ["/**", f" * {o.doc}", f" * @typedef {{Object}} {o.name}"]
        for name, f in o.fields.items():
            kind = _type_text(f.type, js=True) + ("|null" if f.null else "")
            out.append(f" * @property {{{kind}}} {name} {f.doc}")
        out += [" */", ""]
    return "\n".join(out)


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATED_FILES = {
    os.path.join(_ROOT, "docs", "api.md"): markdown,
    os.path.join(_ROOT, "sidecar", "static", "contract.js"): jsdoc,
}


def main(argv: list[str]) -> int:
    if argv == ["--schema"]:
        print(json.dumps(json_schema(), indent=2))
        return 0
    if argv != ["--write"]:
        print("usage: python -m sidecar.contract --write | --schema", file=sys.stderr)
        return 2
    for path, make in GENERATED_FILES.items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(make())
        print(f"wrote {os.path.relpath(path, _ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
