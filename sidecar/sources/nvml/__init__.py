"""The sidecar's view of the NVIDIA driver, through NVML: `NvmlSource().poll()` -> `NvmlSnapshot`.

The package, bottom up (each module imports only those before it): `_lib` (codes, the binding,
calls that raise `GpuLost` / `NotSupported` / `NvmlError`), `snapshot` (what a poll returns),
`direct` (the per-poll calls made without nvidia-ml-py's wrappers, the field-values batch),
`query` (`DeviceQuery`, one GPU's part of a poll), `processes`, `mig`, `efficiency`, `source`
(`NvmlSource`) and `summary` (`dsh-sidecar doctor`). What other modules use is exported here.
"""

from sidecar.common.nvml_names import GPM_FIRST_SAMPLE
from sidecar.sources.nvml._lib import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    INSUFFICIENT_SIZE,
    LIB_RM_VERSION_MISMATCH,
    LIBRARY,
    LIBRARY_NOT_FOUND,
    MIB,
    NO_INSTANCE_ID,
    NO_PERMISSION,
    NOT_FOUND,
    NOT_SUPPORTED,
    OTHER_EXCEPTION,
    SUCCESS,
    UNINITIALIZED,
    FunctionNotFound,
    GpuLost,
    NotFound,
    NotSupported,
    NvmlError,
    Recorder,
    call,
    cuda_version_text,
    official_pynvml,
)
from sidecar.sources.nvml.direct import (
    FIELD_VALUE_BYTES,
    GPM_ENTRY,
    GPM_HEADER_BYTES,
    GPM_METRIC_BYTES,
)
from sidecar.sources.nvml.efficiency import (
    BATCHED_FIELDS,
    GPM_INVALID_VALUE,
    GPM_UNSUPPORTED,
    RARE_EVERY_POLLS,
)
from sidecar.sources.nvml.mig import MAX_MIG_DEVICES, MIG_NO_PROCESS_UTILIZATION
from sidecar.sources.nvml.query import DeviceQuery
from sidecar.sources.nvml.snapshot import GpuInfo, GpuProcess, MigDevice, NvmlSnapshot
from sidecar.sources.nvml.source import UUID_CHECK_EVERY_POLLS, NvmlSource
from sidecar.sources.nvml.summary import nvml_summary

__all__ = [
    "BATCHED_FIELDS",
    "DRIVER_NOT_LOADED",
    "FIELD_VALUE_BYTES",
    "FUNCTION_NOT_FOUND",
    "GPM_ENTRY",
    "GPM_FIRST_SAMPLE",
    "GPM_HEADER_BYTES",
    "GPM_INVALID_VALUE",
    "GPM_METRIC_BYTES",
    "GPM_UNSUPPORTED",
    "GPU_IS_LOST",
    "INSUFFICIENT_SIZE",
    "LIBRARY",
    "LIBRARY_NOT_FOUND",
    "LIB_RM_VERSION_MISMATCH",
    "MAX_MIG_DEVICES",
    "MIB",
    "MIG_NO_PROCESS_UTILIZATION",
    "NOT_FOUND",
    "NOT_SUPPORTED",
    "NO_INSTANCE_ID",
    "NO_PERMISSION",
    "OTHER_EXCEPTION",
    "RARE_EVERY_POLLS",
    "SUCCESS",
    "UNINITIALIZED",
    "UUID_CHECK_EVERY_POLLS",
    "DeviceQuery",
    "FunctionNotFound",
    "GpuInfo",
    "GpuLost",
    "GpuProcess",
    "MigDevice",
    "NotFound",
    "NotSupported",
    "NvmlError",
    "NvmlSnapshot",
    "NvmlSource",
    "Recorder",
    "call",
    "cuda_version_text",
    "nvml_summary",
    "official_pynvml",
]
