"""Settings that decide how fast the math can go: TF32 and cuDNN flags, dtypes, autocast, the loader.

Everything here only reads: no setter is ever called, and torch's getters that would warn, initialise
CUDA or raise are avoided or caught (reading a flag never changes it). Torch is handed in by the
caller; nothing here imports it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["autocast_of", "dtype_name", "input_shape", "loader_settings", "math_settings"]

INPUT_SHAPE_MAX_DIMS = 8
DTYPE_NAME_MAX_CHARS = 64
_TORCH_PREFIX = "torch."


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    name = str(dtype)
    if name.startswith(_TORCH_PREFIX):
        name = name[len(_TORCH_PREFIX) :]
    return name[:DTYPE_NAME_MAX_CHARS]


def _call(getter: Any) -> Any:
    try:
        return getter() if callable(getter) else None
    except Exception:  # noqa: BLE001 -- e.g. torch refusing to answer after a mix of TF32 APIs
        return None


def _new_api_tf32(c: Any, backend: str, op: str) -> bool | None:
    """Whether TF32 is on for ``backend``/``op`` by torch's newer ``fp32_precision`` settings, where
    "none" defers to the backend's, then to the generic setting; None when not answerable."""
    getter = getattr(c, "_get_fp32_precision_getter", None)
    if getter is None:
        return None
    for key in ((backend, op), (backend, "all"), ("generic", "all")):
        value = _call(lambda key=key: getter(*key))
        if value == "tf32":
            return True
        if value == "ieee":
            return False
    return None


def _bool_or_none(value: Any) -> bool | None:
    return value if type(value) is bool else None


def math_settings(torch: Any) -> dict[str, Any]:
    """The payload's ``math``: read through torch._C's getters (the Python properties in front of
    some of them warn or raise in some torch versions)."""
    c = getattr(torch, "_C", None)
    matmul_tf32 = _bool_or_none(_call(getattr(c, "_get_cublas_allow_tf32", None)))
    precision = _call(getattr(c, "_get_float32_matmul_precision", None))
    if matmul_tf32 is None:
        # torch >= 2.9 refuses the legacy getter once the program mixed the old and new TF32 APIs.
        matmul_tf32 = _new_api_tf32(c, "cuda", "matmul")
    if type(precision) is not str:
        precision = None if matmul_tf32 is None else ("high" if matmul_tf32 else "highest")
    cudnn_tf32 = _bool_or_none(_call(getattr(c, "_get_cudnn_allow_tf32", None)))
    if cudnn_tf32 is None:
        cudnn_tf32 = _new_api_tf32(c, "cuda", "conv")
    return {
        "allow_tf32_matmul": matmul_tf32,
        "cudnn_allow_tf32": cudnn_tf32,
        "float32_matmul_precision": precision[:64] if precision is not None else None,
        "cudnn_benchmark": _bool_or_none(_call(getattr(c, "_get_cudnn_benchmark", None))),
    }


def autocast_of(torch: Any, device_type: str) -> str:
    """"off", or the dtype autocast is on with for ``device_type`` right now (inside a forward)."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except TypeError:  # an older torch: no device argument, CUDA only; the CPU has its own getter
        enabled = torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()
    if not enabled:
        return "off"
    try:
        return dtype_name(torch.get_autocast_dtype(device_type))
    except (AttributeError, TypeError):
        getter = torch.get_autocast_cpu_dtype if device_type == "cpu" else torch.get_autocast_gpu_dtype
        return dtype_name(getter())


def input_shape(tensor: Any) -> list[int] | None:
    """The tensor's shape, its first 8 dimensions (None for a shape that is not plain ints)."""
    try:
        dims = tuple(tensor.shape)[:INPUT_SHAPE_MAX_DIMS]
        return [int(d) for d in dims]
    except Exception:  # noqa: BLE001 -- a symbolic or odd shape says nothing we can publish
        return None


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


def loader_settings(loader: Any) -> dict[str, Any] | None:
    """The DataLoader's num_workers, pin_memory, persistent_workers, batch_size (from its batch
    sampler when it was built with one) and prefetch_factor, read from its instance attributes; None
    for anything else."""
    if loader is None:
        return None
    attrs = getattr(loader, "__dict__", None)
    if type(attrs) is not dict:
        return None
    batch_size = _int_or_none(attrs.get("batch_size"))
    if batch_size is None:
        sampler_attrs = getattr(attrs.get("batch_sampler"), "__dict__", None)
        if type(sampler_attrs) is dict:
            batch_size = _int_or_none(sampler_attrs.get("batch_size"))
    return {
        "num_workers": _int_or_none(attrs.get("num_workers")),
        "pin_memory": _bool_or_none(attrs.get("pin_memory")),
        "persistent_workers": _bool_or_none(attrs.get("persistent_workers")),
        "batch_size": batch_size,
        "prefetch_factor": _int_or_none(attrs.get("prefetch_factor")),
    }
