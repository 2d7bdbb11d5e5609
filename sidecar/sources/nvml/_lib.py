"""The bottom of the NVML package: nvidia-ml-py's handle, NVML's return codes, and calls that raise.

`call(fn, *args)` runs one query and raises an `NvmlError` subclass named for what the code means
(`GpuLost`, `NotSupported`, `FunctionNotFound`, `NotFound`) instead of handing the caller a code to
check; `Recorder` keeps, for one poll, the last failure of each NVML function. Every module above
this one imports from here; this one imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import pynvml as pynvml  # `as`: re-exported, the package's modules import it from here
except ImportError:  # the sidecar still serves process and probe facts without NVML
    pynvml = None

MIB = 1 << 20
LIBRARY = "libnvidia-ml.so.1"

# NVML's return codes (nvml.h's NVML_SUCCESS and NVML_ERROR_<name>; tests/unit/test_nvml_efficiency.py
# checks them against the header), spelled out so the package imports (and reports) without
# nvidia-ml-py.
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
OTHER_EXCEPTION = -1  # not an NVMLError at all (ctypes, decoding, a binding bug)

_INIT_REASONS = {
    LIBRARY_NOT_FOUND: f"NVML library not found ({LIBRARY}): no NVIDIA driver is installed",
    DRIVER_NOT_LOADED: "NVIDIA driver not loaded: the library is installed but the kernel module is not",
    LIB_RM_VERSION_MISMATCH: (
        "NVIDIA driver/library version mismatch: the driver was upgraded without reloading the "
        "kernel module (reboot)"
    ),
    NO_PERMISSION: "no permission to open the NVIDIA device files (/dev/nvidia*)",
}


def official_pynvml() -> bool:
    """True when `pynvml` is NVIDIA's nvidia-ml-py, not the old look-alike of the same name."""
    return pynvml is not None and hasattr(pynvml, "_nvmlGetFunctionPointer")


def binding_problem() -> str | None:
    if pynvml is None:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    if not official_pynvml():
        return "the installed 'pynvml' is not NVIDIA's nvidia-ml-py; reinstall nvidia-ml-py"
    return None


def is_nvml_error(exc: BaseException) -> bool:
    return pynvml is not None and isinstance(exc, pynvml.NVMLError)


def reason(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # noqa: BLE001 -- str() of an NVMLError may itself call into the library
        return f"NVML error {getattr(exc, 'value', '?')}"


def init_reason(exc: BaseException) -> str:
    if not is_nvml_error(exc):
        return f"NVML initialisation failed: {exc!r}"
    code = getattr(exc, "value", None)
    return _INIT_REASONS.get(code, f"NVML initialisation failed: {reason(exc)}")  # type: ignore[arg-type]


def text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def cuda_version_text(version: int | None) -> str | None:
    """NVML's integer CUDA version (12040) as people write it ("12.4")."""
    if not isinstance(version, int) or version <= 0:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def raise_code(code: int) -> Any:
    """Raise what nvidia-ml-py raises for `code` (the direct calls' errors are the wrappers')."""
    raise pynvml.NVMLError(code)


# --------------------------------------------------------------------------------------------
# Calls that raise
# --------------------------------------------------------------------------------------------
class NvmlError(Exception):
    """A query failed: `code` (OTHER_EXCEPTION when it was no NVMLError), `function` (the NVML name
    a poll's call_errors are keyed by) and, made only when asked for, `reason`."""

    def __init__(self, code: int, cause: BaseException, function: str | None):
        super().__init__(code)
        self.code, self.cause, self.function = code, cause, function

    @property
    def reason(self) -> str:
        # Made on demand: str() of an NVMLError asks the library for its wording.
        if self.code == OTHER_EXCEPTION:
            return f"{type(self.cause).__name__}: {self.cause}"
        return reason(self.cause)


class NotSupported(NvmlError):
    """NOT_SUPPORTED: an answer about the GPU (it cannot report this), not a failure."""


class GpuLost(NvmlError):
    """GPU_IS_LOST: the GPU fell off the bus; nothing more can be asked of it this poll."""


class FunctionNotFound(NvmlError):
    """The driver (or the binding) lacks the function: it will not grow it while we run."""


class NotFound(NvmlError):
    """NOT_FOUND: nothing to report (no process samples, no MIG device at an index)."""


_BY_CODE: dict[int, type[NvmlError]] = {
    NOT_SUPPORTED: NotSupported,
    GPU_IS_LOST: GpuLost,
    FUNCTION_NOT_FOUND: FunctionNotFound,
    NOT_FOUND: NotFound,
}


def error_code(exc: BaseException) -> int:
    return getattr(exc, "value", OTHER_EXCEPTION) if is_nvml_error(exc) else OTHER_EXCEPTION


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, or the failure raised as an `NvmlError` subclass.

    INSUFFICIENT_SIZE is retried once: list queries size their buffer in one call and fill it in a
    second, and a process starting in between makes the second call fail.
    """
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 -- NVMLError, and anything a binding bug may raise
        return retry_or_raise(exc, fn, args)


def retry_or_raise(exc: Exception, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """What `call` does once ``fn(*args)`` raised ``exc``: its value retried, or the failure raised."""
    code = error_code(exc)
    if code == INSUFFICIENT_SIZE:
        try:
            return fn(*args)
        except Exception as again:  # noqa: BLE001 -- as the first call's: translated below
            exc, code = again, error_code(again)
    raise _BY_CODE.get(code, NvmlError)(code, exc, getattr(fn, "__name__", None)) from None


class Recorder:
    """One poll's NVML failures: function -> "where: reason" (NOT_SUPPORTED is an answer, not kept)."""

    __slots__ = ("call_errors",)

    def __init__(self) -> None:
        self.call_errors: dict[str, str] = {}

    def record(self, err: NvmlError, where: str, errors: dict[str, str] | None, key: str) -> None:
        """`err` as `errors[key]` (when errors is given) and in call_errors."""
        why = err.reason
        if errors is not None:
            errors[key] = why
        if not isinstance(err, NotSupported):
            self.call_errors[err.function or key] = f"{where}: {why}" if where else why

    def get(self, key: str, fn: Callable[..., Any], *args: Any, errors: dict[str, str] | None = None) -> Any:
        """A machine-wide query (no device): its value, or None with the failure recorded (and its
        reason as `errors[key]` when errors is given)."""
        try:
            return call(fn, *args)
        except NvmlError as err:
            self.record(err, "", errors, key)
            return None


NO_INSTANCE_ID = 0xFFFFFFFF  # NVML's "not in a MIG instance" in process entries (GpuProcess: None)
