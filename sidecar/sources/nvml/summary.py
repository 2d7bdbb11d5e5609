"""`dsh-sidecar doctor`'s one-shot description of the driver."""

from __future__ import annotations

from typing import Any

from sidecar.sources.nvml._lib import (
    LIBRARY_NOT_FOUND,
    NvmlError,
    Recorder,
    binding_problem,
    call,
    cuda_version_text,
    init_reason,
    is_nvml_error,
    pynvml,
    text,
)


def nvml_summary() -> dict[str, Any]:
    """One-shot description of the driver for `dsh-sidecar doctor`; never raises.

    {library_found, driver, cuda_driver, device_count, devices: [{index, name, uuid, error}], error}

    ``error`` says why the driver as a whole cannot be used; a device that fails alone (a lost GPU)
    says so in its own ``error``, and the others are still listed as usable.
    """
    out: dict[str, Any] = {
        "library_found": False,
        "driver": None,
        "cuda_driver": None,
        "device_count": None,
        "devices": [],
        "error": None,
    }
    problem = binding_problem()
    if problem is not None:
        out["error"] = problem
        return out
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 -- NVMLError, or what a broken binding raises: the summary says which
        code = getattr(exc, "value", None) if is_nvml_error(exc) else None
        out["library_found"] = code is not None and code != LIBRARY_NOT_FOUND
        out["error"] = init_reason(exc)
        return out
    out["library_found"] = True
    recorder = Recorder()
    try:
        out["driver"] = text(recorder.get("driver", pynvml.nvmlSystemGetDriverVersion))
        out["cuda_driver"] = cuda_version_text(recorder.get("cuda_driver", pynvml.nvmlSystemGetCudaDriverVersion))
        count = recorder.get("device_count", pynvml.nvmlDeviceGetCount)
        out["device_count"] = count
        out["devices"] = [_device(i) for i in range(count or 0)]
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 -- shutting down a dead driver must not hide the summary
            pass
    if recorder.call_errors:
        out["error"] = "; ".join(f"{k}: {v}" for k, v in recorder.call_errors.items())
    return out


def _device(index: int) -> dict[str, Any]:
    where = f"GPU {index}"
    mine = Recorder()  # this device's failures, its own "error"

    def ask(key: str, fn: Any, *args: Any) -> Any:
        try:
            return call(fn, *args)
        except NvmlError as err:
            mine.record(err, where, None, key)
            return None

    h = ask("handle", pynvml.nvmlDeviceGetHandleByIndex, index)
    name = uuid = None
    if h is not None:
        name = text(ask("name", pynvml.nvmlDeviceGetName, h))
        uuid = text(ask("uuid", pynvml.nvmlDeviceGetUUID, h))
    error = "; ".join(sorted(set(mine.call_errors.values()))) or None
    return {"index": index, "name": name, "uuid": uuid, "error": error}
