"""The documents the sidecar serves (schema 2): their one typed definition.

Everything a client reads is declared here, once, with its type and meaning; units are in the
names (`_mib` MiB, `_pct` percent 0-100, `_s` seconds, `_unix_s` UNIX time in seconds, `_hz` per
second, `_bytes` bytes, `_fraction` 0-1). From these declarations come:

- the JSON Schema served at `GET /api/dsh-gpu-dashboard/schema` (`json_schema()`),
- the field tables of `docs/api.md` (`markdown()`),
- the JSDoc typedefs of `sidecar/static/shared/contract.js`, used by the page and the DSH plugin (`jsdoc()`).

`python -m sidecar.documents.contract --write` regenerates the two files; a test fails when they are
not current. Every key is always present (absent values are null), and no other key is allowed: a field
added to a document without its line here fails every test that builds it (`DSH_CONTRACT_CHECK=1`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from sidecar.documents.contract_cluster import cluster_document
from sidecar.documents.contract_devices import (  # re-exported: contract.GPU and the rest
    GPU,
    NVML,
    RUNTIME,
    SYSTEM_GPU,
)
from sidecar.documents.contract_jobs import job_documents
from sidecar.documents.contract_report import report_declaration
from sidecar.documents.contract_runs import run_documents
from sidecar.documents.contract_types import (  # re-exported: the contract's words
    BOOL,
    INT,
    NUM,
    STR,
    Enum,
    F,
    Lazy,
    ListOf,
    MapOf,
    Obj,
    OneOf,
    Prim,
)
from sidecar.documents.contract_watch import watch_document
from sidecar.verdict.facts import UTIL_UNKNOWN, VENDORS

SCHEMA = 2
SCHEMA_ID = "https://dsh-gpu-dashboard.invalid/schema/2"
CHECK_ENV = "DSH_CONTRACT_CHECK"


# ---------------------------------------------------------------------------------------------
# The documents
# ---------------------------------------------------------------------------------------------
STATUSES = ("GPU", "CPU", "MIXED", "UNKNOWN")
SEVERITIES = ("error", "warning", "info")

TEXT_REF = Obj(
    "TextRef",
    "A text of the catalogue (sidecar/static/shared/i18n/<lang>.json) and what fills its {placeholders}. "
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

LOADER_SETTINGS = Obj(
    "LoaderSettings",
    "The DataLoader that feeds a model, as it was built.",
    {
        "num_workers": F(INT, "worker processes (0: batches are made in the training loop)", null=True),
        "pin_memory": F(BOOL, "batches in page-locked memory (faster, asynchronous copies)", null=True),
        "persistent_workers": F(BOOL, "workers kept between epochs", null=True),
        "batch_size": F(INT, "samples per batch", null=True),
        "prefetch_factor": F(INT, "batches each worker loads ahead (null without workers)", null=True),
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
        "data_wait_fraction": F(
            NUM,
            "share of step time spent waiting for the next batch (0-1), over `data_wait_batches`",
            null=True,
        ),
        "train_steps": F(INT, "training steps its step_source counted", null=True),
        "step_rate_hz": F(NUM, "training steps per second over the last 10 s", null=True),
        "step_source": F(Enum(("lightning", "transformers", "optimizer")), "what counted them", null=True),
        "shared_memory": F(BOOL, "parameters in shared memory (hogwild); null off the CPU", null=True),
        "param_dtypes": F(ListOf(STR, 16), "dtypes of its parameters (`float32`, `bfloat16`, ...)"),
        "autocast": F(STR, "`off`, or the dtype autocast ran the last forward in", null=True),
        "input_shape": F(ListOf(INT, 8), "shape of the last forward's first tensor input", null=True),
        "loader_settings": F(LOADER_SETTINGS, "its DataLoader's settings", null=True),
        "data_wait_batches": F(
            INT, "the newest batches `data_wait_fraction` covers: its window (fewer early on)", null=True
        ),
    },
)

_REASONS = "; ".join(f"`{k}`: {v}" for k, v in UTIL_UNKNOWN.items())  # what a vendor cannot tell
PROCESS_GPU = Obj(
    "ProcessGpu",
    "What the driver says of one process on one GPU: NVML; AMD and Intel: DRM fdinfo and ROCm's KFD.",
    {
        "index": F(INT, "the GPU's index (Gpu.index)"),
        "vendor": F(Enum(VENDORS), "the GPU's vendor"),
        "pci_bus_id": F(STR, "the GPU's PCI address (as Gpu.pci_bus_id)", null=True),
        "mem_used_mib": F(
            NUM,
            "GPU memory it uses there (NVIDIA: exact; AMD, Intel: VRAM, else GTT, else system memory: an iGPU's)",
            null=True,
        ),
        "sm_util_pct": F(
            NUM, "its SM (AMD, Intel: busiest engine's) utilisation; null: MIG, unknown_reason", null=True
        ),
        "unknown_reason": F(Enum(tuple(UTIL_UNKNOWN)), "why sm_util_pct is null: " + _REASONS, null=True),
        "mig_index": F(INT, "the MIG device it runs in (Gpu.mig_devices); null without MIG", null=True),
    },
)

STEP_BREAKDOWN = Obj(
    "StepBreakdown",
    "Where this process's training steps spent their wall time over the probe's last window.",
    {
        "window_s": F(NUM, "the window the figures cover (the newest steps)"),
        "steps": F(INT, "steps in it"),
        "step_s": F(NUM, "mean step time", null=True),
        "data_wait_fraction": F(NUM, "waiting for the next batch, over `window_s`", null=True),
        "forward_fraction": F(NUM, "in the registered models' forward", null=True),
        "optimizer_fraction": F(NUM, "in optimizer.step()", null=True),
        "other_fraction": F(NUM, "the rest (backward, logging, host code)", null=True),
        "backward_fraction": F(
            NUM,
            "the part of `other_fraction` between optimizer steps less forward and data wait: backward, the loss, and the collectives run there (DDP's all-reduce)",
            null=True,
        ),
    },
)

MATH_SETTINGS = Obj(
    "MathSettings",
    "The process's torch math settings that decide whether tensor cores can work on fp32.",
    {
        "allow_tf32_matmul": F(BOOL, "torch.backends.cuda.matmul.allow_tf32", null=True),
        "cudnn_allow_tf32": F(BOOL, "torch.backends.cudnn.allow_tf32", null=True),
        "float32_matmul_precision": F(STR, "torch.get_float32_matmul_precision()", null=True),
        "cudnn_benchmark": F(BOOL, "torch.backends.cudnn.benchmark", null=True),
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
        "exited": F(
            BOOL,
            "it has exited: its last facts (the final counts its probe published at exit), kept for the job's final state",
        ),
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
        "gpu": F(ListOf(PROCESS_GPU), "its use of each GPU"),
        "step_breakdown": F(STEP_BREAKDOWN, "where its training steps' time goes (probe)", null=True),
        "math": F(MATH_SETTINGS, "its torch math settings (probe)", null=True),
        "syncs_per_step": F(
            NUM,
            "host-device synchronisations per step; null unless counted (register(model, syncs=True))",
            null=True,
        ),
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

DISTRIBUTED = Obj(
    "Distributed",
    "Where the job sits in a distributed run (its probed processes' payloads; the ranks' first).",
    {
        "job_key": F(
            STR,
            "the same for every process of the run, on every node (join nodes on it; `dsh_job_info`'s `job_key`)",
            null=True,
        ),
        "job_key_source": F(
            STR,
            "torchelastic (torchrun's run id), slurm (job.step), pod (a JobSet), launch (a hash of "
            "MASTER_ADDR:MASTER_PORT across nodes, of the launcher on one node)",
            null=True,
        ),
        "world_size": F(INT, "WORLD_SIZE: ranks in the run, all nodes", null=True),
        "node_rank": F(INT, "this node's rank (GROUP_RANK, NODE_RANK, SLURM_NODEID)", null=True),
        "restart_count": F(INT, "restarts of the run's workers (TORCHELASTIC_RESTART_COUNT)", null=True),
        "hostname": F(STR, "the host name the ranks see (a pod's name in Kubernetes)", null=True),
        "ranks": F(ListOf(INT, 64), "the global ranks of the job's processes here, ascending"),
        "uid": F(
            INT,
            "the real uid of the job's root: with `job_key`, the run's key (any user can set another's "
            "run id: a process of another uid under the same key is another job; `dsh_job_info`'s `uid`)",
            null=True,
        ),
    },
)

POD = Obj(
    "Pod",
    "The Kubernetes pod the job's root runs in (its cgroup, where the kubelet puts pods; the kubelet its name).",
    {
        "namespace": F(STR, "the pod's namespace", null=True),
        "pod": F(STR, "the pod's name", null=True),
        "uid": F(STR, "the pod's UID (from the cgroup)"),
        "container": F(STR, "the container's name", null=True),
        "container_id": F(
            STR, "the container's id, 64 hex digits (from the cgroup, named or not)", null=True
        ),
        "source": F(
            STR,
            "what named it: kubelet (Pods API, by the UID), pod-resources (the pod holding the job's "
            "GPUs), self-reported (the process's own environment and hostname: a claim), cgroup (nothing "
            "named it: the UID and container id only)",
            null=True,
        ),
    },
)

RANK_WAIT = Obj(
    "RankWait",
    "One torch.distributed rank of the job and its wait in the collectives, from its step breakdown "
    "(the `straggler-rank` warning's evidence). Step time is the same on every rank; what differs is "
    "where it goes: the rank the others wait for waits least.",
    {
        "rank": F(INT, "torch.distributed rank"),
        "pid": F(INT, "its process"),
        "steps": F(INT, "steps in its breakdown's window"),
        "collective_wait_fraction": F(
            NUM, "its `backward_fraction` beyond the least of any rank's: its wait for the slowest rank"
        ),
        "data_wait_fraction": F(NUM, "as in its step breakdown", null=True),
        "forward_fraction": F(NUM, "as in its step breakdown", null=True),
        "optimizer_fraction": F(NUM, "as in its step breakdown", null=True),
        "gpu_index": F(INT, "NVML index of its model's GPU", null=True),
    },
)

JOB, JOBS_DOCUMENT = job_documents(SCHEMA, STATUSES)  # declared in contract_jobs.py

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
        "model_gpu_index": F(INT, "`index` in `gpus` of the GPU that model is on", null=True),
        "memory_growth": F(MEMORY_GROWTH, "present while GPU memory keeps growing", null=True),
        "distributed": F(
            DISTRIBUTED, "the distributed run the job is part of, null when it is none", null=True
        ),
        "pod": F(POD, "the Kubernetes pod the job runs in, null outside one", null=True),
        "rank_waits": F(
            ListOf(RANK_WAIT, 256),
            "each rank's wait in the collectives, by rank; null with fewer than two ranks measured",
            null=True,
        ),
        "runtime": F(RUNTIME, "the torch build"),
        "nvml": F(NVML, "the driver"),
        "gpus": F(ListOf(GPU), "the GPUs: NVIDIA's by NVML index, then AMD's and Intel's"),
        "system_gpus": F(ListOf(SYSTEM_GPU), "graphics devices the OS lists"),
        "processes": F(ListOf(PROCESS, 256), "the job's processes (at most 256)"),
        "processes_omitted": F(INT, "processes left out (count or size bound)"),
        "events": F(ListOf(EVENT, 100), "the last 100 events"),
        "events_omitted": F(INT, "older events left out"),
        "jobs": F(
            ListOf(JOB, 64),
            "in discovery mode, every job (as GET /api/dsh-gpu-dashboard/jobs lists them); else null",
            null=True,
        ),
    },
)

SAMPLE_GPU = Obj(
    "SampleGpu",
    "One GPU in one history sample.",
    {
        "index": F(INT, "NVML index"),
        "util_pct": F(NUM, "utilisation", null=True),
        "mem_used_mib": F(NUM, "memory in use", null=True),
        "sm_activity_fraction": F(NUM, "GPM SM activity", null=True),
        "sm_occupancy_fraction": F(NUM, "GPM SM occupancy", null=True),
        "tensor_activity_fraction": F(NUM, "GPM tensor-core activity", null=True),
        "sm_clock_mhz": F(INT, "SM clock", null=True),
        "power_w": F(NUM, "power draw", null=True),
        "temperature_c": F(NUM, "temperature", null=True),
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
        "cpu_pct": F(NUM, "the job's CPU, summed over its processes (percent of one core)", null=True),
        "rss_mib": F(NUM, "the job's resident memory, summed over its processes", null=True),
        "forward_rate_hz": F(NUM, "forward calls per second, summed over its models", null=True),
        "step_rate_hz": F(NUM, "training steps per second, summed over its models", null=True),
        "recorded": F(
            BOOL,
            "true: not a poll of this sidecar but a minute of the run the runs ledger kept from before the "
            "sidecar started (a restart under a running job): at the minute's middle, the minute's means; "
            "its GPU rows carry the job's means on each of its GPUs, memory and power shared evenly; no processes",
        ),
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

CLUSTER_DOCUMENT = cluster_document(SCHEMA, STATUSES, SEVERITIES)  # declared in contract_cluster.py
REPORT_DOCUMENT = report_declaration(SCHEMA)  # declared in contract_report.py
WATCH_DOCUMENT = watch_document(SCHEMA, STATUSES)  # declared in contract_watch.py

DOCUMENTS = {
    "status": STATUS_DOCUMENT,
    "history": HISTORY_DOCUMENT,
    "jobs": JOBS_DOCUMENT,
    "cluster": CLUSTER_DOCUMENT,
    "report": REPORT_DOCUMENT,
    "watch": WATCH_DOCUMENT,
    **run_documents(SCHEMA),  # runs, run, compare: declared in contract_runs.py
}


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


_PRIM_OK: dict[str, Callable[[object], bool]] = {
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
        return (
            None
            if any(_problem(v, o, False, at) is None for o in t.options)
            else f"{at}: no option fits {v!r:.60}"
        )
    o = _OBJECTS[t.name] if isinstance(t, Lazy) else t
    if not isinstance(v, dict):
        return f"{at}: expected {o.name} (an object), got {type(v).__name__}"
    if v.keys() != o.fields.keys():
        extra, missing = sorted(set(v) - set(o.fields)), sorted(set(o.fields) - set(v))
        return f"{at}: {o.name} " + "; ".join(
            s
            for s in (f"unknown keys {extra}" if extra else "", f"missing keys {missing}" if missing else "")
            if s
        )
    return next((p for k, f in o.fields.items() if (p := _problem(v[k], f.type, f.null, f"{at}.{k}"))), None)


def check(doc: object, document: str) -> None:
    """Raise ContractError when `doc` is not a valid `document` (a key of DOCUMENTS)."""
    if not _OBJECTS:
        _OBJECTS.update(object_types())
    problem = _problem(doc, DOCUMENTS[document], False, document)
    if problem:
        raise ContractError(f"{document} document breaks schema {SCHEMA}: {problem[:400]}")


def check_if_enabled(doc: dict[str, Any], document: str) -> dict[str, Any]:
    """`check` when DSH_CONTRACT_CHECK=1 (the test suite sets it for every process it starts)."""
    if os.environ.get(CHECK_ENV) == "1":
        check(doc, document)
    return doc


if __name__ == "__main__":
    from sidecar.documents.contract_docs import main

    sys.exit(main(sys.argv[1:]))
