"""The NVML calls a poll makes for every GPU, made without nvidia-ml-py's wrappers: the process
lists and utilisation samples read into buffers kept between polls, the getters of every poll
called through their function pointers into outputs kept between calls, and the scalar fields
batched into one nvmlDeviceGetFieldValues call. These run only once nvidia-ml-py has initialised
NVML; their errors are the wrappers' (NVMLError), which `_lib.call` turns into its exceptions."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Iterable
from typing import Any

from sidecar.sources.nvml._lib import (
    INSUFFICIENT_SIZE,
    NOT_FOUND,
    OTHER_EXCEPTION,
    SUCCESS,
    pynvml,
    raise_code,
)

# The two list queries are read with NVML's own function pointers (resolved and cached by
# nvidia-ml-py) into plain buffers. nvidia-ml-py's wrappers return one `_PrintableStructure` per
# entry whose every attribute read runs a Python-level __getattribute__; with 64 processes that was
# ~80% of a poll. The layouts are NVML's ABI (tests/fakenvml/fakenvml.c static_asserts them).
# nvmlProcessInfo_v2_t (== _v3): pid, usedGpuMemory, gpuInstanceId, computeInstanceId
PROCESS_ENTRY = struct.Struct("<I4xQII")
# nvmlProcessUtilizationSample_t: pid, timeStamp, smUtil, memUtil, encUtil, decUtil
SAMPLE_ENTRY = struct.Struct("<I4xQIIII")
NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE as an unsigned long long


# The getters every poll calls for every GPU (memory, utilisation, clocks, power, temperature, clock
# event reasons: 9 of its ~12 calls), called through NVML's function pointer into an output kept
# between calls. nvidia-ml-py's wrapper of each makes the output object, looks the pointer up and
# checks the code in three more Python calls, and each field read of its structures runs a
# Python-level __getattribute__. The errors are the wrapper's: NVMLError(code), and
# FUNCTION_NOT_FOUND (from nvidia-ml-py's lookup) while the driver lacks the function.
_MEMORY = struct.Struct("<QQQ")  # nvmlMemory_t: total, free, used
_MEMORY_V2 = struct.Struct("<I4xQQQQ")  # nvmlMemory_v2_t: version, total, reserved, free, used
_UTILIZATION = struct.Struct("<II")  # nvmlUtilization_t: gpu, memory


def _direct(name: str, symbol: str, out: Any, read: Callable[[Any], Any], *fixed: Any) -> Callable[[Any], Any]:
    """`symbol(handle, *fixed, &out)` as nvidia-ml-py's wrapper `name` returns it: `read(out)`."""
    args = (*fixed, ctypes.byref(out))
    fn = None
    value = read is _value  # most getters: read here, not through one more call

    def query(handle: Any) -> Any:
        nonlocal fn
        if fn is None:
            fn = pynvml._nvmlGetFunctionPointer(symbol)  # cached only once found, as nvidia-ml-py does
        ret = fn(handle, *args)
        if ret != SUCCESS:
            raise_code(ret)
        return out.value if value else read(out)

    query.__name__ = name  # what call_errors is keyed by
    return query


def _value(out: Any) -> Any:
    return out.value


def _total_used(layout: struct.Struct, total_at: int, used_at: int) -> Callable[[Any], tuple[int, int]]:
    def read(out: Any) -> tuple[int, int]:
        fields = layout.unpack_from(out)
        return fields[total_at], fields[used_at]

    return read


class Queries:
    """One initialised source's `_direct` getters (each keeps its output: one poll at a time)."""

    __slots__ = (
        "memory_v2",
        "memory",
        "utilization",
        "sm_clock",
        "mem_clock",
        "power",
        "power_limit",
        "temperature",
        "clock_events",
        "energy",
    )

    def __init__(self) -> None:
        n = pynvml
        memory_v2 = ctypes.create_string_buffer(_MEMORY_V2.size)
        _MEMORY_V2.pack_into(memory_v2, 0, n.nvmlMemory_v2, 0, 0, 0, 0)
        self.memory_v2 = _direct(
            "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", memory_v2, _total_used(_MEMORY_V2, 1, 4)
        )
        memory = ctypes.create_string_buffer(_MEMORY.size)
        self.memory = _direct("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo", memory, _total_used(_MEMORY, 0, 2))
        utilization = ctypes.create_string_buffer(_UTILIZATION.size)
        self.utilization = _direct(
            "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetUtilizationRates", utilization, _UTILIZATION.unpack_from
        )
        clock = "nvmlDeviceGetClockInfo"
        self.sm_clock = _direct(clock, clock, ctypes.c_uint(), _value, ctypes.c_uint(n.NVML_CLOCK_SM))
        self.mem_clock = _direct(clock, clock, ctypes.c_uint(), _value, ctypes.c_uint(n.NVML_CLOCK_MEM))
        power, limit = "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit"
        self.power = _direct(power, power, ctypes.c_uint(), _value)
        self.power_limit = _direct(limit, limit, ctypes.c_uint(), _value)
        temperature = "nvmlDeviceGetTemperature"
        self.temperature = _direct(
            temperature, temperature, ctypes.c_uint(), _value, ctypes.c_uint(n.NVML_TEMPERATURE_GPU)
        )
        energy = "nvmlDeviceGetTotalEnergyConsumption"  # unsigned long long, millijoules
        self.energy = _direct(energy, energy, ctypes.c_ulonglong(), _value)
        # None when the binding predates the 535 rename (efficiency.py then uses the older name).
        events = "nvmlDeviceGetCurrentClocksEventReasons"
        self.clock_events = (
            _direct(events, events, ctypes.c_ulonglong(), _value) if hasattr(n, events) else None
        )



class ListBuffer:
    """A list query's buffer, kept between polls with its capacity, and the count it is called with
    (made once: a ctypes object and a reference to it cost about 1 us a call to make)."""

    __slots__ = ("buf", "capacity", "count", "count_ref", "entry")

    def __init__(self, entry: struct.Struct) -> None:
        self.entry = entry
        self.capacity = 0
        self.buf: Any = None
        self.count = ctypes.c_uint(0)
        self.count_ref = ctypes.byref(self.count)


def read_list(fn: Any, handle: Any, lb: ListBuffer, *tail: Any, empty: int | None = None) -> list[tuple[int, ...]]:
    """NVML's sizing protocol, with the buffer of the last poll offered first.

    A call with a buffer of ``capacity`` entries fills it (SUCCESS) or says how many are needed
    (INSUFFICIENT_SIZE); a call without one only counts. So once a buffer exists one call usually
    does, and only a list that outgrew it costs the count and a fill into a new buffer with room to
    spare (2n+5, as nvidia-ml-py allocates), which absorbs processes appearing between the two
    calls. If even that is not enough the fill fails INSUFFICIENT_SIZE and the helper retries once.
    An empty list is SUCCESS, or NOT_FOUND (process samples): ``empty``, the code that reads as an
    empty list here rather than as an error (an idle GPU answers it at every poll; raised, it cost two
    exceptions per GPU).
    """
    entry, count, count_ref = lb.entry, lb.count, lb.count_ref
    count.value = lb.capacity
    if lb.capacity:
        buf = lb.buf
        ret = fn(handle, buf, count_ref, *tail) if tail else fn(handle, count_ref, buf)
        if ret == SUCCESS:
            n = min(count.value, lb.capacity)
            return list(entry.iter_unpack(memoryview(buf)[: n * entry.size])) if n else []
    else:
        ret = fn(handle, None, count_ref, *tail) if tail else fn(handle, count_ref, None)
        if ret == SUCCESS:
            return []
    if ret == empty:
        return []
    if ret != INSUFFICIENT_SIZE:
        raise_code(ret)
    capacity = count.value * 2 + 5
    buf = ctypes.create_string_buffer(capacity * entry.size)
    count.value = capacity
    ret = fn(handle, buf, count_ref, *tail) if tail else fn(handle, count_ref, buf)
    if ret == empty:
        return []
    if ret != SUCCESS:
        raise_code(ret)
    lb.buf, lb.capacity = buf, capacity
    return list(entry.iter_unpack(memoryview(buf)[: min(count.value, capacity) * entry.size]))


def running_processes(symbol: str) -> Callable[[Any, ListBuffer], list[tuple[int, ...]]]:
    def query(handle: Any, lb: ListBuffer) -> list[tuple[int, ...]]:
        return read_list(pynvml._nvmlGetFunctionPointer(symbol), handle, lb)

    query.__name__ = symbol
    return query


def process_samples(handle: Any, lb: ListBuffer, last_seen_us: int) -> list[tuple[int, ...]]:
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    return read_list(fn, handle, lb, ctypes.c_ulonglong(last_seen_us), empty=NOT_FOUND)


process_samples.__name__ = "nvmlDeviceGetProcessUtilization"

PROCESS_LISTS = {
    ("compute", True): running_processes("nvmlDeviceGetComputeRunningProcesses_v3"),
    ("graphics", True): running_processes("nvmlDeviceGetGraphicsRunningProcesses_v3"),
    ("compute", False): running_processes("nvmlDeviceGetComputeRunningProcesses_v2"),
    ("graphics", False): running_processes("nvmlDeviceGetGraphicsRunningProcesses_v2"),
}


# nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2, then 40-byte nvmlGpmMetric_t entries
# whose first 16 bytes are metricId, nvmlReturn, value (tests/fakenvml/fakenvml.c static_asserts).
GPM_HEADER_BYTES = 24
GPM_METRIC_BYTES = 40
GPM_ENTRY = struct.Struct("<Iid")


# nvmlFieldValue_t (nvml.h; fakenvml.c static_asserts it): fieldId, scopeId, timestamp, latencyUsec,
# valueType, nvmlReturn, then the value union at 32; 40 bytes.
FIELD_VALUE_BYTES = 40
_FIELD_HEAD = struct.Struct("<II16xIi")  # fieldId, scopeId, valueType, nvmlReturn
_VALUE_AT = 32
# nvmlValueType_t -> how the union's bytes read: DOUBLE, UNSIGNED_INT, UNSIGNED_LONG,
# UNSIGNED_LONG_LONG, SIGNED_LONG_LONG, SIGNED_INT, UNSIGNED_SHORT.
_VALUE_TYPES = {
    0: struct.Struct("<d"),
    1: struct.Struct("<I"),
    2: struct.Struct("<Q"),
    3: struct.Struct("<Q"),
    4: struct.Struct("<q"),
    5: struct.Struct("<i"),
    6: struct.Struct("<H"),
}


class FieldValues:
    """A device's batch of NVML fields: one nvmlDeviceGetFieldValues call fills every entry, each
    with its own nvmlReturn. The buffer (field ids written once) is kept between polls."""

    __slots__ = ("buf", "count", "field_ids")

    def __init__(self, field_ids: Iterable[int]) -> None:
        self.field_ids = tuple(field_ids)
        self.count = ctypes.c_int(len(self.field_ids))
        self.buf = ctypes.create_string_buffer(FIELD_VALUE_BYTES * len(self.field_ids))
        for i, field_id in enumerate(self.field_ids):
            struct.pack_into("<II", self.buf, i * FIELD_VALUE_BYTES, field_id, 0)

    def read(self, handle: Any) -> dict[int, tuple[int, Any]]:
        """field id -> (its nvmlReturn, its value or None); raises NVMLError when the call fails."""
        ret = _field_values()(handle, self.count, self.buf)
        if ret != SUCCESS:
            raise_code(ret)
        out: dict[int, tuple[int, Any]] = {}
        buf = self.buf
        for i in range(len(self.field_ids)):
            at = i * FIELD_VALUE_BYTES
            field_id, _scope, value_type, code = _FIELD_HEAD.unpack_from(buf, at)
            layout = _VALUE_TYPES.get(value_type)
            if code == SUCCESS and layout is None:
                code = OTHER_EXCEPTION  # a value type this reader does not know: not a value
            value = layout.unpack_from(buf, at + _VALUE_AT)[0] if code == SUCCESS and layout is not None else None
            out[field_id] = (code, value)
        return out


_FIELD_VALUES_FN: list[Any] = []


def _field_values() -> Any:
    if not _FIELD_VALUES_FN:  # cached only once found, as nvidia-ml-py does
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
        _FIELD_VALUES_FN.append(fn)
    return _FIELD_VALUES_FN[0]
