"""The probe's payload as typed records: what the sidecar's segment source hands up once a payload
has passed schema 1's validation (``schema.validate_payload``), so that nothing above the source
reads a payload's dict.

Each record is one map of the schema: its fields are the map's keys, in the schema's order, of the
schema's types (a list is a tuple, a map its record, an optional value ``X | None``), the wire's
names kept (their units with them: ``reserved_bytes``, ``window_s``, ``forward_rate_hz``; a ``time``
is Unix seconds) but for ``class``, a keyword: ``class_name``. tests/unit/test_payload_records.py
holds every record to its map of the schema.

``payload_record`` builds them, once per new payload, from the clean copy the validator returns (it
has every key of the schema, an absent "added within schema 1" one as None). The sidecar imports this
module; the probe never does (dataclasses costs a training script's import).

The records are frozen to the type checker and slotted dataclasses at run time (``_record``): a frozen
dataclass's ``__init__`` sets each field through ``object.__setattr__``, which made a rank's payload
cost about 17 us to build instead of 3 (a source builds one for each new payload of every process, at
most polls). Nothing mutates a record: downstream caches compare them by identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = [
    "DeviceRecord",
    "ErrorRecord",
    "EventRecord",
    "LoaderSettingsRecord",
    "MathRecord",
    "MemoryRecord",
    "ModelRecord",
    "ProbePayload",
    "RuntimeRecord",
    "StepsRecord",
    "payload_record",
    "runtime_record",
]

_T = TypeVar("_T")

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform  # the type checker's own stubs: no run-time dependency

    @dataclass_transform(frozen_default=True)
    def _record(cls: type[_T]) -> type[_T]: ...

else:

    def _record(cls: type[_T]) -> type[_T]:
        return dataclass(slots=True)(cls)


@_record
class DeviceRecord:
    """A CUDA device as the process numbers it (``cuda:<index>``)."""

    index: int
    name: str
    uuid: str | None


@_record
class RuntimeRecord:
    """The process's torch and CUDA as it found them. Every field defaults to the schema's empty
    value (``schema.empty_runtime()``): a record made with a few fields reads as a payload's would."""

    torch: str | None = None
    cuda_build: str | None = None
    cudnn: int | None = None
    cuda_available: bool | None = None
    cuda_initialized: bool = False
    device_count: int | None = None
    devices: tuple[DeviceRecord, ...] = ()
    cuda_visible_devices: str | None = None
    cuda_device_order: str | None = None
    mps_available: bool | None = None
    xpu_available: bool | None = None
    cuda_driver_loadable: bool | None = None  # None: not asked (probe/facts.py)
    hip_build: str | None = None  # torch.version.hip: a ROCm build, whose torch.cuda is the AMD GPU
    hip_visible_devices: str | None = None
    rocr_visible_devices: str | None = None


@_record
class MemoryRecord:
    """What the CUDA caching allocator holds on one device."""

    device: str
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int


@_record
class StepsRecord:
    """Where a training step's wall time went over the probe's last window: fractions 0-1."""

    window_s: float
    steps: int
    step_s: float | None
    data_wait_fraction: float | None
    forward_fraction: float | None
    optimizer_fraction: float | None
    other_fraction: float | None
    backward_fraction: float | None


@_record
class MathRecord:
    """The process's math settings that decide whether tensor cores can work."""

    allow_tf32_matmul: bool | None
    cudnn_allow_tf32: bool | None
    float32_matmul_precision: str | None
    cudnn_benchmark: bool | None


@_record
class LoaderSettingsRecord:
    """The DataLoader a model is fed from, as it was built."""

    num_workers: int | None
    pin_memory: bool | None
    persistent_workers: bool | None
    batch_size: int | None
    prefetch_factor: int | None


@_record
class ModelRecord:
    name: str
    class_name: str  # the wire's "class"
    params: int
    device: str  # a device, or schema.DEVICE_MIXED / DEVICE_NO_PARAMETERS
    devices: tuple[str, ...]
    input_device: str | None
    forward_calls: int
    forward_rate_hz: float
    last_forward_time: float | None  # Unix seconds
    data_wait_fraction: float | None
    data_wait_s: float | None
    step_s: float | None
    train_steps: int | None
    step_rate_hz: float | None
    step_source: str | None
    shared_memory: bool | None
    param_dtypes: tuple[str, ...] | None
    autocast: str | None
    input_shape: tuple[int, ...] | None
    loader_settings: LoaderSettingsRecord | None
    compiled_uncounted: bool | None
    data_wait_batches: int | None


@_record
class EventRecord:
    time: float  # Unix seconds
    name: str


@_record
class ErrorRecord:
    time: float  # Unix seconds
    where: str  # schema.PUBLISH_FAILED, schema.MODEL_COLLECTED, or where in the probe it happened
    message: str


@_record
class ProbePayload:
    """One validated payload of a probe (docs/design.md, "Probe payload")."""

    schema: int
    pid: int
    ppid: int | None
    start_ticks: int | None
    argv0: str | None
    script: str | None
    hostname: str | None
    role: str  # one of schema.ROLES
    worker_id: int | None
    rank: int | None
    local_rank: int | None
    world_size: int | None
    dist_backend: str | None
    job_key: str | None
    job_key_source: str | None
    node_rank: int | None
    restart_count: int | None
    loader: str | None
    runtime: RuntimeRecord
    memory: tuple[MemoryRecord, ...]
    models: tuple[ModelRecord, ...]
    events: tuple[EventRecord, ...]
    errors: tuple[ErrorRecord, ...]
    published_at: float  # Unix seconds
    trimmed: bool
    steps: StepsRecord | None
    math: MathRecord | None
    syncs_per_step: float | None


# ----------------------------------------------------------------------------------------------
# From the validator's clean copy: every key there, each of its schema's type. Written out field by
# field: a source builds one for every new payload of every process, most of them at every poll.


def runtime_record(r: dict[str, Any]) -> RuntimeRecord:
    """A validated payload's ``runtime`` map as its record."""
    return RuntimeRecord(
        r["torch"],
        r["cuda_build"],
        r["cudnn"],
        r["cuda_available"],
        r["cuda_initialized"],
        r["device_count"],
        tuple(DeviceRecord(d["index"], d["name"], d["uuid"]) for d in r["devices"]),
        r["cuda_visible_devices"],
        r["cuda_device_order"],
        r["mps_available"],
        r["xpu_available"],
        r["cuda_driver_loadable"],
        r["hip_build"],
        r["hip_visible_devices"],
        r["rocr_visible_devices"],
    )


def _loader_settings(s: dict[str, Any] | None) -> LoaderSettingsRecord | None:
    if s is None:
        return None
    return LoaderSettingsRecord(
        s["num_workers"], s["pin_memory"], s["persistent_workers"], s["batch_size"], s["prefetch_factor"]
    )


def _model(m: dict[str, Any]) -> ModelRecord:
    dtypes, shape = m["param_dtypes"], m["input_shape"]
    return ModelRecord(
        m["name"],
        m["class"],
        m["params"],
        m["device"],
        tuple(m["devices"]),
        m["input_device"],
        m["forward_calls"],
        m["forward_rate_hz"],
        m["last_forward_time"],
        m["data_wait_fraction"],
        m["data_wait_s"],
        m["step_s"],
        m["train_steps"],
        m["step_rate_hz"],
        m["step_source"],
        m["shared_memory"],
        None if dtypes is None else tuple(dtypes),
        m["autocast"],
        None if shape is None else tuple(shape),
        _loader_settings(m["loader_settings"]),
        m["compiled_uncounted"],
        m["data_wait_batches"],
    )


def _steps(s: dict[str, Any] | None) -> StepsRecord | None:
    if s is None:
        return None
    return StepsRecord(
        s["window_s"],
        s["steps"],
        s["step_s"],
        s["data_wait_fraction"],
        s["forward_fraction"],
        s["optimizer_fraction"],
        s["other_fraction"],
        s["backward_fraction"],
    )


def _math(s: dict[str, Any] | None) -> MathRecord | None:
    if s is None:
        return None
    return MathRecord(s["allow_tf32_matmul"], s["cudnn_allow_tf32"], s["float32_matmul_precision"], s["cudnn_benchmark"])


def payload_record(p: dict[str, Any], runtime: RuntimeRecord | None = None) -> ProbePayload:
    """The record of ``p``, a payload as ``schema.validate_payload`` returned it (its clean copy:
    anything else is a KeyError or a record of the wrong types). ``runtime``: the record of ``p``'s
    runtime map when the caller has it already (a follower's payloads of one process share the map,
    probe_wire/prefix.py)."""
    return ProbePayload(
        p["schema"],
        p["pid"],
        p["ppid"],
        p["start_ticks"],
        p["argv0"],
        p["script"],
        p["hostname"],
        p["role"],
        p["worker_id"],
        p["rank"],
        p["local_rank"],
        p["world_size"],
        p["dist_backend"],
        p["job_key"],
        p["job_key_source"],
        p["node_rank"],
        p["restart_count"],
        p["loader"],
        runtime_record(p["runtime"]) if runtime is None else runtime,
        tuple(
            MemoryRecord(
                m["device"], m["allocated_bytes"], m["reserved_bytes"], m["peak_allocated_bytes"], m["peak_reserved_bytes"]
            )
            for m in p["memory"]
        ),
        tuple(map(_model, p["models"])),
        tuple(EventRecord(e["time"], e["name"]) for e in p["events"]),
        tuple(ErrorRecord(e["time"], e["where"], e["message"]) for e in p["errors"]),
        p["published_at"],
        p["trimmed"],
        _steps(p["steps"]),
        _math(p["math"]),
        p["syncs_per_step"],
    )
