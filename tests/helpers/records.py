"""Payload records as the segment source hands them up (probe_wire.records.ProbePayload): a payload
made from the schema's empty payload with the fields a test gives, passed through the schema's
validator and built by ``payload_record``, the very parts the source runs on what it reads
(sidecar/sources/segments.py). A model, a step breakdown or math settings given in part are filled
in with the values below, so a test names only what it is about.
"""

from __future__ import annotations

from typing import Any

from probe_wire.records import ProbePayload, payload_record
from probe_wire.schema import empty_payload, validate_payload

# A runtime with every field set: a CUDA build of torch that sees one GPU.
FULL_RUNTIME: dict[str, Any] = {
    "torch": "2.5.1",
    "cuda_build": "12.4",
    "cudnn": 90100,
    "cuda_available": True,
    "cuda_initialized": True,
    "device_count": 1,
    "devices": [{"index": 0, "name": "A100", "uuid": "GPU-1"}],
    "cuda_visible_devices": "0",
    "cuda_device_order": "PCI_BUS_ID",
    "mps_available": False,
    "xpu_available": False,
    "cuda_driver_loadable": True,
    "hip_build": None,
    "hip_visible_devices": None,
    "rocr_visible_devices": None,
}
# A model's fields as a probe publishes them for a model on cuda:0 that has not run yet.
MODEL: dict[str, Any] = {
    "name": "Net",
    "class": "Net",
    "params": 1000,
    "device": "cuda:0",
    "devices": ["cuda:0"],
    "input_device": None,
    "forward_calls": 0,
    "forward_rate_hz": 0.0,
    "last_forward_time": None,
    "data_wait_fraction": None,
    "data_wait_s": None,
    "step_s": None,
}
STEPS: dict[str, Any] = {"window_s": 10.0, "steps": 0}
STEPS |= dict.fromkeys(("step_s", "data_wait_fraction", "forward_fraction", "optimizer_fraction", "other_fraction"))
MATH: dict[str, Any] = dict.fromkeys(("allow_tf32_matmul", "cudnn_allow_tf32", "float32_matmul_precision", "cudnn_benchmark"))


def payload(pid: int = 5, *, drop: tuple[str, ...] = (), **fields: Any) -> dict[str, Any]:
    """A schema-1 payload of process ``pid`` with ``fields`` set (a model, ``steps`` and ``math``
    completed from MODEL, STEPS and MATH) and the top-level keys in ``drop`` left out (an older
    probe's payload)."""
    p = empty_payload(pid=pid, start_ticks=1000 + pid)
    p["published_at"] = 1_700_000_000.0
    if "models" in fields:
        fields["models"] = [{**MODEL, **m} for m in fields["models"]]
    for key, base in (("steps", STEPS), ("math", MATH)):
        if fields.get(key) is not None:
            fields[key] = {**base, **fields[key]}
    p.update(fields)
    for key in drop:
        del p[key]
    return p


def record(p: dict[str, Any]) -> ProbePayload:
    """The record the segment source hands up for payload ``p``; ValueError, with the validator's
    reason, for a payload the source would call corrupt."""
    clean, reason = validate_payload(p)
    if clean is None:
        raise ValueError(reason)
    return payload_record(clean)


def record_of(pid: int = 5, *, drop: tuple[str, ...] = (), **fields: Any) -> ProbePayload:
    """``record(payload(pid, drop=drop, **fields))``."""
    return record(payload(pid, drop=drop, **fields))
