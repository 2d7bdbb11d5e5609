"""The sidecar's view of the NVIDIA driver, through NVML (nvidia-ml-py's `pynvml`).

`NvmlSource().poll()` returns an `NvmlSnapshot` and never raises. Every NVML call goes through one
helper (`_Calls.__call__`) that turns an `NVMLError` into a missing value (None) plus a recorded
reason, so one unsupported or failing query costs one field, never the poll. (nvitop's
`libnvml.nvmlQuery` follows the same idea.)

Decisions worth knowing when reading the values:

- Memory prefers `nvmlDeviceGetMemoryInfo_v2`, whose "used" excludes the driver's reservation (as
  gpustat and nvitop report it). When v2 is missing (drivers before 515) or fails, it falls back to
  v1, whose "used" includes the reservation: a few hundred MiB more on an idle GPU.
- Per-process utilisation: NVML returns samples only for processes that used the GPU since the
  timestamp we pass, and NOT_FOUND when there are none. NOT_FOUND therefore means idle, so a
  process in the running list without a sample gets `sm_util = mem_util = 0`. A sample counts if
  it arrived in this poll or is at most `util_hold_s` old: polling faster than the driver's sample
  period (1/6 s to 1 s) then repeats the last value instead of flapping to 0. The values are None
  only when the query itself fails (NOT_SUPPORTED, e.g. under MIG). Samples over 100 % (which
  drivers occasionally emit) are dropped.
- NOT_SUPPORTED is an answer, not a failure: it lands in the device's `field_errors`, not in the
  snapshot's `call_errors`, so a GPU that cannot report utilisation (MIG) does not count as an
  error every poll.
- A lost GPU (GPU_IS_LOST) keeps the identity last seen at its index, `lost=True`, every
  measurement None; the other devices are unaffected.
- The process lists and utilisation samples are read straight into buffers kept between polls,
  and the other queries of every poll called through NVML's function pointers into outputs kept
  between calls (nvml_direct.py); the rarer ones use nvidia-ml-py's wrappers.
- A poll asks each GPU what something shows (memory, utilisation, process lists and samples: 5 calls
  when the buffers fit; the efficiency fields, nvml_efficiency.py: 6, +2 with GPM), its UUID every
  UUID_CHECK_EVERY_POLLS polls: NVML calls are what a poll's CPU goes to, more so on a real driver.
- Initialisation is lazy (first poll) and, when it fails, retried with exponential backoff rather
  than on every poll: a missing driver makes each attempt cost a failed dlopen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sidecar.sources import nvml_efficiency

try:
    import pynvml
except ImportError:  # the sidecar still serves process and probe facts without NVML
    pynvml = None  # type: ignore[assignment]

MIB = 1 << 20
LIBRARY = "libnvidia-ml.so.1"

# pynvml's constants, spelled out so this module imports (and reports) without nvidia-ml-py.
SUCCESS = 0
UNINITIALIZED = 1
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


def _binding_problem() -> str | None:
    if pynvml is None:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    if not official_pynvml():
        return "the installed 'pynvml' is not NVIDIA's nvidia-ml-py; reinstall nvidia-ml-py"
    return None


def _reason(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # str() of an NVMLError may itself call into the library
        return f"NVML error {getattr(exc, 'value', '?')}"


def _init_reason(exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    return _INIT_REASONS.get(code, f"NVML initialisation failed: {_reason(exc)}")  # type: ignore[arg-type]


def _text(value: Any) -> str | None:
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


# --------------------------------------------------------------------------------------------
# What a poll returns
# --------------------------------------------------------------------------------------------
# slots: a poll makes one per GPU process (64 in the discovery benchmark); 15 % cheaper to make
@dataclass(slots=True)
class GpuProcess:
    pid: int
    used_mib: float | None  # exact (bytes / 2^20); None: NVML says not available (e.g. WDDM)
    sm_util: int | None  # percent; 0 when NVML has no recent sample (idle); None if unsupported
    mem_util: int | None
    types: tuple[str, ...]  # ("compute",), ("graphics",) or ("compute", "graphics")
    # MIG: the instance it runs in (None without MIG: NVML's 0xFFFFFFFF), and the index of that
    # instance's MIG device among GpuInfo.mig_devices.
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mig_index: int | None = None


@dataclass
class MigDevice:
    index: int  # MIG device index within its GPU (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str | None = None  # "MIG-..."
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None


# slots: 38 fields made every poll for each GPU: half the cost of making it with a __dict__
@dataclass(slots=True)
class GpuInfo:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None  # NVML's form, "00000000:01:00.0"
    mem_total_mib: float | None = None  # exact: the driver's bytes / 2^20
    mem_used_mib: float | None = None
    util_gpu: int | None = None  # percent of the sample period with a kernel running
    util_mem: int | None = None
    lost: bool = False
    field_errors: dict[str, str] = field(default_factory=dict)  # field -> why it is None
    processes: list[GpuProcess] = field(default_factory=list)
    # Efficiency (issue 15): each None with its reason in field_errors under the field's own name.
    compute_capability: str | None = None  # "9.0"
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_event_reasons: tuple[str, ...] | None = None  # active reasons (nvml_names.CLOCK_EVENT_REASONS)
    power_w: float | None = None
    power_limit_w: float | None = None  # enforced
    temperature_c: float | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    # GPM (Hopper and newer), from two samples one poll apart: nvml_names.GPM_FIELDS.
    sm_activity_fraction: float | None = None
    sm_occupancy_fraction: float | None = None
    tensor_activity_fraction: float | None = None
    dram_activity_fraction: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None
    mig_mode: bool | None = None
    mig_devices: list[MigDevice] = field(default_factory=list)


@dataclass
class NvmlSnapshot:
    ok: bool
    error: str | None = None  # one line, when not ok
    driver: str | None = None  # "550.54.15"
    cuda_driver: str | None = None  # "12.4"
    devices: list[GpuInfo] = field(default_factory=list)
    call_errors: dict[str, str] = field(default_factory=dict)  # NVML function -> last failure this poll
    time: float = 0.0  # UNIX seconds


# --------------------------------------------------------------------------------------------
# The one place NVML is called
# --------------------------------------------------------------------------------------------
class _Calls:
    """Runs NVML queries for one poll; failures become None plus a reason."""

    __slots__ = ("call_errors", "code")

    def __init__(self) -> None:
        self.call_errors: dict[str, str] = {}
        self.code = SUCCESS  # the last call's NVML return code, for the caller's control flow

    def __call__(
        self,
        errors: dict[str, str] | None,
        key: str,
        where: str,
        fn: Callable[..., Any],
        *args: Any,
        quiet: tuple[int, ...] = (),
    ) -> Any:
        """`fn(*args)`, or None with `errors[key]` (and `call_errors`) saying why.

        INSUFFICIENT_SIZE is retried once: list queries size their buffer in one call and fill it
        in a second, and a process starting in between makes the second call fail. Codes in
        `quiet` are expected answers and recorded nowhere.
        """
        try:
            value = fn(*args)
        except Exception as exc:  # NVMLError, and anything a binding bug may raise
            return self._failed(exc, errors, key, where, fn, args, quiet)
        self.code = SUCCESS
        return value

    def _failed(
        self,
        exc: Exception,
        errors: dict[str, str] | None,
        key: str,
        where: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        quiet: tuple[int, ...],
    ) -> Any:
        """`__call__` after `fn` raised: the one retry, then None and the reason (kept out of the
        successful call's path, which is nearly every call)."""
        code = _error_code(exc)
        if code == INSUFFICIENT_SIZE:
            try:
                value = fn(*args)
            except Exception as again:
                exc, code = again, _error_code(again)
            else:
                self.code = SUCCESS
                return value
        self.code = code
        if code in quiet:
            return None  # before the reason: str() of an NVMLError asks the library for its wording
        reason = _reason(exc) if code != OTHER_EXCEPTION else f"{type(exc).__name__}: {exc}"
        if errors is not None:
            errors[key] = reason
        if code != NOT_SUPPORTED:
            name = getattr(fn, "__name__", key)
            self.call_errors[name] = f"{where}: {reason}" if where else reason
        return None


def _error_code(exc: BaseException) -> int:
    return getattr(exc, "value", OTHER_EXCEPTION) if _is_nvml_error(exc) else OTHER_EXCEPTION


def _is_nvml_error(exc: BaseException) -> bool:
    return pynvml is not None and isinstance(exc, pynvml.NVMLError)


# Here, not at the top: nvml_direct reads the codes above when imported first (see its end).
from sidecar.sources.nvml_direct import (  # noqa: E402
    NOT_AVAILABLE,
    PROCESS_ENTRY,
    PROCESS_LISTS,
    SAMPLE_ENTRY,
    ListBuffer,
    Queries,
    process_samples,
)

# How often the UUID at each index is asked for (see _poll_device).
UUID_CHECK_EVERY_POLLS = 10




@dataclass
class _DeviceState:
    """What one NVML index remembers between polls."""

    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    mem_v2: bool = True  # False once the driver lacks nvmlDeviceGetMemoryInfo_v2
    procs_v3: bool = True  # False once the driver lacks the _v3 process lists
    last_seen_us: int = 0  # lastSeenTimeStamp for nvmlDeviceGetProcessUtilization
    samples: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # pid -> (time µs, sm, mem)
    lists: dict[str, ListBuffer] = field(
        default_factory=lambda: {
            "compute": ListBuffer(PROCESS_ENTRY),
            "graphics": ListBuffer(PROCESS_ENTRY),
            "samples": ListBuffer(SAMPLE_ENTRY),
        }
    )
    polls_since_uuid: int = 0
    efficiency: nvml_efficiency.EfficiencyState = field(default_factory=nvml_efficiency.EfficiencyState)


class NvmlSource:
    """Polls NVML; see the module docstring for what the values mean."""

    def __init__(
        self,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        util_hold_s: float = 1.0,
    ):
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.util_hold_s = util_hold_s
        self._clock = clock
        self._lock = threading.Lock()
        self._initialised = False
        self._closed = False
        self._init_error: str | None = None
        self._next_init_at: float | None = None  # None: try at the next poll
        self._backoff_s = retry_initial_s
        self._driver: str | None = None
        self._cuda_driver: str | None = None
        self._devices: list[_DeviceState] = []
        self._queries: Queries | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def _ensure_init(self, now: float) -> str | None:
        """None when NVML is usable; else the reason (attempting init only when backoff allows)."""
        if self._initialised:
            return None
        if self._next_init_at is not None and now < self._next_init_at:
            return self._init_error
        problem = _binding_problem()
        if problem is None:
            try:
                pynvml.nvmlInit()
            except Exception as exc:
                problem = _init_reason(exc) if _is_nvml_error(exc) else f"NVML initialisation failed: {exc!r}"
        if problem is not None:
            self._init_error = problem
            self._next_init_at = now + self._backoff_s
            self._backoff_s = min(self._backoff_s * 2, self.retry_max_s)
            return problem
        self._initialised = True
        self._init_error = None
        self._next_init_at = None
        self._backoff_s = self.retry_initial_s
        self._devices = []
        self._queries = Queries()
        return None

    def close(self) -> None:
        """Shut NVML down if this source initialised it; later polls report the source closed."""
        with self._lock:
            self._closed = True
            if self._initialised:
                self._initialised = False
                for st in self._devices:
                    nvml_efficiency.free_gpm(st.efficiency)
                try:
                    pynvml.nvmlShutdown()
                except Exception:
                    pass  # shutting down a dead driver must not stop the sidecar from exiting

    def __enter__(self) -> NvmlSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- polling --------------------------------------------------------------------------------
    def poll(self) -> NvmlSnapshot:
        with self._lock:
            started = time.time()
            if self._closed:
                return NvmlSnapshot(ok=False, error="NVML source closed", time=started)
            try:
                return self._poll(started)
            except Exception as exc:  # a bug here must cost one poll, not the sidecar
                return NvmlSnapshot(
                    ok=False, error=f"internal error while polling NVML: {exc!r}", time=started
                )

    def _poll(self, started: float) -> NvmlSnapshot:
        problem = self._ensure_init(self._clock())
        if problem is not None:
            return NvmlSnapshot(ok=False, error=problem, time=started)
        calls = _Calls()
        if self._driver is None:
            self._driver = _text(calls(None, "driver", "", pynvml.nvmlSystemGetDriverVersion))
        if self._cuda_driver is None:
            self._cuda_driver = cuda_version_text(
                calls(None, "cuda_driver", "", pynvml.nvmlSystemGetCudaDriverVersion)
            )
        count = calls(None, "device_count", "", pynvml.nvmlDeviceGetCount)
        if count is None:
            return NvmlSnapshot(
                ok=False,
                error=f"NVML cannot count devices: {calls.call_errors.get('nvmlDeviceGetCount', '?')}",
                driver=self._driver,
                cuda_driver=self._cuda_driver,
                call_errors=calls.call_errors,
                time=started,
            )
        if len(self._devices) != count:
            for st in self._devices:
                nvml_efficiency.free_gpm(st.efficiency)
            self._devices = [_DeviceState() for _ in range(count)]
        now_us = int(started * 1_000_000)
        devices = [self._poll_device(calls, i, self._devices[i], now_us) for i in range(count)]
        return NvmlSnapshot(
            ok=True,
            driver=self._driver,
            cuda_driver=self._cuda_driver,
            devices=devices,
            call_errors=calls.call_errors,
            time=started,
        )

    def _poll_device(self, calls: _Calls, index: int, st: _DeviceState, now_us: int) -> GpuInfo:
        info = GpuInfo(index=index)
        errors = info.field_errors
        where = f"GPU {index}"
        n = pynvml
        if st.handle is None:
            st.handle = calls(errors, "handle", where, n.nvmlDeviceGetHandleByIndex, index)
            if st.handle is None:
                return self._unusable(info, st, calls.code)
        h = st.handle

        if st.uuid is not None and st.polls_since_uuid < UUID_CHECK_EVERY_POLLS:
            # The identity of the GPU at this index changes only when the driver is reset with
            # another GPU there: asked for every few polls, not every time.
            st.polls_since_uuid += 1
            uuid = st.uuid
        else:
            uuid = _text(calls(errors, "uuid", where, n.nvmlDeviceGetUUID, h))
            if uuid is None:
                return self._unusable(info, st, calls.code)
            st.polls_since_uuid = 0
        if uuid != st.uuid:
            # A different GPU at this index (or the first poll): forget what belonged to the old one.
            name = _text(calls(errors, "name", where, n.nvmlDeviceGetName, h))
            pci = calls(errors, "pci_bus_id", where, n.nvmlDeviceGetPciInfo, h)
            if calls.code == GPU_IS_LOST:
                return self._unusable(info, st, calls.code)
            nvml_efficiency.free_gpm(st.efficiency)
            st = self._devices[index] = _DeviceState(
                handle=h,
                uuid=uuid,
                name=name,
                pci_bus_id=_text(pci.busId) if pci is not None else None,
                mem_v2=st.mem_v2,  # these two describe the driver, not the GPU
                procs_v3=st.procs_v3,
                efficiency=nvml_efficiency.EfficiencyState(events_v2=st.efficiency.events_v2),
                # Start the sample window one hold period back rather than at 0: a real driver
                # would otherwise hand over its whole buffer of old samples on the first call.
                last_seen_us=now_us - int(self.util_hold_s * 1_000_000),
            )
        info.uuid, info.name, info.pci_bus_id = st.uuid, st.name, st.pci_bus_id

        q = self._queries
        mem = None
        if st.mem_v2:
            mem = calls(None, "memory", where, q.memory_v2, h)
            if calls.code == FUNCTION_NOT_FOUND:
                st.mem_v2 = False  # a driver before 515; it will not grow the function
        if mem is None and calls.code != GPU_IS_LOST:
            mem = calls(errors, "memory", where, q.memory, h)
        if calls.code == GPU_IS_LOST:
            return self._unusable(info, st, calls.code)
        if mem is not None:
            # Exact: bytes / 2^20 is exact in a double, so the bytes come back exactly (metrics).
            info.mem_total_mib = mem[0] / MIB
            info.mem_used_mib = mem[1] / MIB

        util = calls(errors, "utilization", where, q.utilization, h)
        if calls.code == GPU_IS_LOST:
            return self._unusable(info, st, calls.code)
        if util is not None:
            info.util_gpu, info.util_mem = util

        lost = nvml_efficiency.poll(calls, q, info, st.efficiency, h, where)
        processes = [] if lost else self._processes(calls, errors, where, st)
        if lost or calls.code == GPU_IS_LOST:
            return self._unusable(info, st, GPU_IS_LOST)
        if info.mig_mode:
            processes = nvml_efficiency.mig_view(calls, errors, where, st.efficiency, info, processes)
        elif processes:
            self._process_utilisation(calls, errors, where, st, processes, now_us)
            if calls.code == GPU_IS_LOST:
                return self._unusable(info, st, calls.code)
        else:
            st.samples.clear()  # nothing to ask about; saves the call and its NOT_FOUND
        info.processes = processes
        return info

    def _processes(
        self, calls: _Calls, errors: dict[str, str], where: str, st: _DeviceState
    ) -> list[GpuProcess]:
        by_pid: dict[int, GpuProcess] = {}
        no_id = nvml_efficiency.NO_INSTANCE_ID
        for kind in ("compute", "graphics"):
            fn = PROCESS_LISTS[kind, st.procs_v3]
            entries = calls(errors, "processes", where, fn, st.handle, st.lists[kind])
            if calls.code == FUNCTION_NOT_FOUND and st.procs_v3:
                # A driver before 510: the same 24-byte entries under the _v2 name.
                st.procs_v3 = False
                errors.pop("processes", None)
                calls.call_errors.pop(fn.__name__, None)
                fn = PROCESS_LISTS[kind, False]
                entries = calls(errors, "processes", where, fn, st.handle, st.lists[kind])
            if calls.code == GPU_IS_LOST:
                return []
            types = (kind,)
            for pid, used, gi, ci in entries or ():
                used_mib = None if used == NOT_AVAILABLE else used / MIB
                known = by_pid.get(pid)
                if known is None:
                    gi = None if gi == no_id else gi
                    by_pid[pid] = GpuProcess(pid, used_mib, None, None, types, gi, None if ci == no_id else ci)
                else:
                    # A process with both contexts is listed twice; keep one row with both types.
                    known.types = (*known.types, kind)
                    if known.used_mib is None:
                        known.used_mib = used_mib
        return list(by_pid.values())

    def _process_utilisation(
        self,
        calls: _Calls,
        errors: dict[str, str],
        where: str,
        st: _DeviceState,
        processes: list[GpuProcess],
        now_us: int,
    ) -> None:
        samples = calls(
            errors,
            "process_utilization",
            where,
            process_samples,
            st.handle,
            st.lists["samples"],
            st.last_seen_us,
            quiet=(NOT_FOUND,),  # no new samples: nobody used the GPU since last time
        )
        if samples is None and calls.code != NOT_FOUND:
            return  # unsupported or failed: the processes keep sm_util None (unknown)
        kept = st.samples
        last_seen_us = st.last_seen_us
        fresh: set[int] = set()
        for pid, stamp, sm, mem, _enc, _dec in samples or ():
            if stamp > last_seen_us:
                last_seen_us = stamp
            if sm > 100 or mem > 100:
                continue  # garbage some drivers emit for a context's first sample
            previous = kept.get(pid)
            if previous is None or stamp >= previous[0]:
                kept[pid] = (stamp, sm, mem)
                fresh.add(pid)
        st.last_seen_us = last_seen_us
        held_since_us = now_us - int(self.util_hold_s * 1_000_000)
        with_sample = 0  # listed processes with a kept sample (a process is listed once)
        for p in processes:
            sample = kept.get(p.pid)
            if sample is None:
                p.sm_util, p.mem_util = 0, 0
                continue
            with_sample += 1
            if sample[0] >= held_since_us or p.pid in fresh:
                p.sm_util, p.mem_util = sample[1], sample[2]
            else:
                p.sm_util, p.mem_util = 0, 0
        if with_sample == len(kept):
            return  # every kept sample belongs to a listed process: none to forget
        listed = {p.pid for p in processes}
        for pid in [pid for pid in kept if pid not in listed]:
            del kept[pid]  # gone from the GPU; a reused pid must not inherit its numbers

    @staticmethod
    def _unusable(info: GpuInfo, st: _DeviceState, code: int) -> GpuInfo:
        """A device whose handle or identity could not be read: lost, or otherwise broken."""
        info.uuid, info.name, info.pci_bus_id = st.uuid, st.name, st.pci_bus_id
        info.mem_total_mib = info.mem_used_mib = None
        info.util_gpu = info.util_mem = None
        nvml_efficiency.clear(info)
        info.processes = []
        info.lost = code == GPU_IS_LOST
        if info.lost and not info.field_errors:
            info.field_errors["uuid"] = _reason(pynvml.NVMLError(GPU_IS_LOST))
        st.samples.clear()
        st.polls_since_uuid = UUID_CHECK_EVERY_POLLS  # look at its identity again next time
        if not info.lost:
            st.handle = None  # e.g. INVALID_ARGUMENT after a driver reset: fetch a fresh handle next time
        return info


# --------------------------------------------------------------------------------------------
# `dsh-sidecar doctor`
# --------------------------------------------------------------------------------------------
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
    problem = _binding_problem()
    if problem is not None:
        out["error"] = problem
        return out
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        code = getattr(exc, "value", None) if _is_nvml_error(exc) else None
        out["library_found"] = code is not None and code != LIBRARY_NOT_FOUND
        out["error"] = _init_reason(exc) if code is not None else f"NVML initialisation failed: {exc!r}"
        return out
    out["library_found"] = True
    calls = _Calls()
    try:
        out["driver"] = _text(calls(None, "driver", "", pynvml.nvmlSystemGetDriverVersion))
        out["cuda_driver"] = cuda_version_text(
            calls(None, "cuda_driver", "", pynvml.nvmlSystemGetCudaDriverVersion)
        )
        count = calls(None, "device_count", "", pynvml.nvmlDeviceGetCount)
        out["device_count"] = count
        for i in range(count or 0):
            where = f"GPU {i}"
            dcalls = _Calls()
            h = dcalls(None, "handle", where, pynvml.nvmlDeviceGetHandleByIndex, i)
            name = uuid = None
            if h is not None:
                name = _text(dcalls(None, "name", where, pynvml.nvmlDeviceGetName, h))
                uuid = _text(dcalls(None, "uuid", where, pynvml.nvmlDeviceGetUUID, h))
            error = "; ".join(sorted(set(dcalls.call_errors.values()))) or None
            out["devices"].append({"index": i, "name": name, "uuid": uuid, "error": error})
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    if calls.call_errors:
        out["error"] = "; ".join(f"{k}: {v}" for k, v in calls.call_errors.items())
    return out
