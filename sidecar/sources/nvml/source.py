"""The sidecar's view of the NVIDIA driver, through NVML (nvidia-ml-py's `pynvml`).

`NvmlSource().poll()` returns an `NvmlSnapshot` and never raises. Each GPU is asked through a
`DeviceQuery` (query.py) whose calls turn an NVML failure into a missing value (None) plus a recorded
reason, so one unsupported or failing query costs one field, never the poll; GPU_IS_LOST raises
`GpuLost`, caught once per device. (nvitop's `libnvml.nvmlQuery` follows the same idea.)

The package, bottom up: `_lib` (codes, the binding, calls that raise), `snapshot` (what a poll
returns), `direct` (the per-poll calls without nvidia-ml-py's wrappers), `query` (`DeviceQuery`),
then `processes`, `mig`, `efficiency`, and this module; `summary` is `dsh-sidecar doctor`'s.

Decisions worth knowing when reading the values:

- Memory prefers `nvmlDeviceGetMemoryInfo_v2`, whose "used" excludes the driver's reservation (as
  gpustat and nvitop report it). When v2 is missing (drivers before 515) or fails, it falls back to
  v1, whose "used" includes the reservation: a few hundred MiB more on an idle GPU.
- Per-process utilisation: see processes.py.
- NOT_SUPPORTED is an answer, not a failure: it lands in the device's `field_errors`, not in the
  snapshot's `call_errors`, so a GPU that cannot report utilisation (MIG) does not count as an
  error every poll.
- A lost GPU (GPU_IS_LOST) keeps the identity last seen at its index, `lost=True`, every
  measurement None; the other devices are unaffected.
- The process lists and utilisation samples are read straight into buffers kept between polls,
  and the other queries of every poll called through NVML's function pointers into outputs kept
  between calls (direct.py); the rarer ones use nvidia-ml-py's wrappers.
- A poll asks each GPU what something shows (memory, utilisation, process lists and samples: 5 calls
  when the buffers fit; the efficiency fields, efficiency.py: 4 with the batched fields, 6 without,
  +2 with GPM), its UUID every UUID_CHECK_EVERY_POLLS polls: NVML calls are what a poll's CPU goes
  to, more so on a real driver.
- Initialisation is lazy (first poll) and, when it fails, retried with exponential backoff rather
  than on every poll: a missing driver makes each attempt cost a failed dlopen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sidecar.sources.nvml import efficiency, mig, processes
from sidecar.sources.nvml._lib import (
    GPU_IS_LOST,
    MIB,
    FunctionNotFound,
    GpuLost,
    NvmlError,
    Recorder,
    binding_problem,
    cuda_version_text,
    init_reason,
    pynvml,
    reason,
    text,
)
from sidecar.sources.nvml.direct import PROCESS_ENTRY, SAMPLE_ENTRY, ListBuffer, Queries
from sidecar.sources.nvml.query import DeviceQuery
from sidecar.sources.nvml.snapshot import GpuInfo, NvmlSnapshot

# How often the UUID at each index is asked for (see _identity).
UUID_CHECK_EVERY_POLLS = 10


@dataclass
class DeviceState:
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
    efficiency: efficiency.EfficiencyState = field(default_factory=efficiency.EfficiencyState)


class _Unusable(Exception):
    """The device's handle or identity could not be read (other than GPU_IS_LOST)."""


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
        self._devices: list[DeviceState] = []
        self._queries: Queries | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def _ensure_init(self, now: float) -> str | None:
        """None when NVML is usable; else the reason (attempting init only when backoff allows)."""
        if self._initialised:
            return None
        if self._next_init_at is not None and now < self._next_init_at:
            return self._init_error
        problem = binding_problem()
        if problem is None:
            try:
                pynvml.nvmlInit()
            except Exception as exc:  # noqa: BLE001 -- NVMLError, or what a broken binding raises: said below
                problem = init_reason(exc)
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
                    efficiency.free_gpm(st.efficiency)
                try:
                    pynvml.nvmlShutdown()
                except Exception:  # noqa: BLE001 -- shutting down a dead driver must not stop the sidecar from exiting
                    pass

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
            except Exception as exc:  # noqa: BLE001 -- a bug here must cost one poll, not the sidecar
                return NvmlSnapshot(ok=False, error=f"internal error while polling NVML: {exc!r}", time=started)

    def _poll(self, started: float) -> NvmlSnapshot:
        problem = self._ensure_init(self._clock())
        if problem is not None:
            return NvmlSnapshot(ok=False, error=problem, time=started)
        recorder = Recorder()
        if self._driver is None:
            self._driver = text(recorder.get("driver", pynvml.nvmlSystemGetDriverVersion))
        if self._cuda_driver is None:
            self._cuda_driver = cuda_version_text(recorder.get("cuda_driver", pynvml.nvmlSystemGetCudaDriverVersion))
        count_errors: dict[str, str] = {}  # the count's reason, NOT_SUPPORTED too (call_errors leaves it out)
        count = recorder.get("device_count", pynvml.nvmlDeviceGetCount, errors=count_errors)
        if count is None:
            return NvmlSnapshot(
                ok=False,
                error=f"NVML cannot count devices: {count_errors.get('device_count', '?')}",
                driver=self._driver,
                cuda_driver=self._cuda_driver,
                call_errors=recorder.call_errors,
                time=started,
            )
        if len(self._devices) != count:
            for st in self._devices:
                efficiency.free_gpm(st.efficiency)
            self._devices = [DeviceState() for _ in range(count)]
        now_us = int(started * 1_000_000)
        devices = [self._poll_device(recorder, i, now_us) for i in range(count)]
        return NvmlSnapshot(
            ok=True,
            driver=self._driver,
            cuda_driver=self._cuda_driver,
            devices=devices,
            call_errors=recorder.call_errors,
            time=started,
        )

    def _poll_device(self, recorder: Recorder, index: int, now_us: int) -> GpuInfo:
        """One GPU: its one catch of GpuLost (and of an unreadable identity) is here."""
        assert self._queries is not None  # made by _ensure_init, which _poll passed before asking
        q = DeviceQuery(recorder, index, GpuInfo(index=index), self._devices[index], self._queries, now_us)
        try:
            self._identity(q)
            self._measure(q)
        except GpuLost:
            return self._unusable(q, lost=True)
        except _Unusable:
            return self._unusable(q, lost=False)
        return q.info

    def _identity(self, q: DeviceQuery) -> None:
        """The handle, and which GPU it is; a different GPU at the index starts a fresh state."""
        st = q.state
        if st.handle is None:
            st.handle = q.get("handle", pynvml.nvmlDeviceGetHandleByIndex, q.index)
            if st.handle is None:
                raise _Unusable
        q.handle = h = st.handle
        if st.uuid is not None and st.polls_since_uuid < UUID_CHECK_EVERY_POLLS:
            # The identity of the GPU at this index changes only when the driver is reset with
            # another GPU there: asked for every few polls, not every time.
            st.polls_since_uuid += 1
            uuid = st.uuid
        else:
            uuid = text(q.get("uuid", pynvml.nvmlDeviceGetUUID, h))
            if uuid is None:
                raise _Unusable
            st.polls_since_uuid = 0
        if uuid != st.uuid:
            # A different GPU at this index (or the first poll): forget what belonged to the old one.
            name = text(q.reading("name", pynvml.nvmlDeviceGetName, h))  # the PCI query decides lost
            pci = q.get("pci_bus_id", pynvml.nvmlDeviceGetPciInfo, h)
            efficiency.free_gpm(st.efficiency)
            st = q.state = self._devices[q.index] = DeviceState(
                handle=h,
                uuid=uuid,
                name=name,
                pci_bus_id=text(pci.busId) if pci is not None else None,
                mem_v2=st.mem_v2,  # these describe the driver, not the GPU
                procs_v3=st.procs_v3,
                efficiency=efficiency.EfficiencyState(
                    events_v2=st.efficiency.events_v2, field_values=st.efficiency.field_values
                ),
                # Start the sample window one hold period back rather than at 0: a real driver
                # would otherwise hand over its whole buffer of old samples on the first call.
                last_seen_us=q.now_us - int(self.util_hold_s * 1_000_000),
            )
        q.info.uuid, q.info.name, q.info.pci_bus_id = st.uuid, st.name, st.pci_bus_id

    def _measure(self, q: DeviceQuery) -> None:
        st, info, h, queries = q.state, q.info, q.handle, q.queries
        mem = None
        if st.mem_v2:
            try:
                mem = q.attempt("memory", queries.memory_v2, h, into=None)
            except FunctionNotFound:
                st.mem_v2 = False  # a driver before 515; it will not grow the function
            except GpuLost:
                raise
            except NvmlError:
                pass
        if mem is None:
            mem = q.get("memory", queries.memory, h)
        if mem is not None:
            # Exact: bytes / 2^20 is exact in a double, so the bytes come back exactly (metrics).
            info.mem_total_mib = mem[0] / MIB
            info.mem_used_mib = mem[1] / MIB
        util = q.get("utilization", queries.utilization, h)
        if util is not None:
            info.util_gpu, info.util_mem = util
        efficiency.poll(q, st.efficiency)
        found = processes.running(q)
        if info.mig_mode:
            found = mig.view(q, st.efficiency.mig_handles, found)
        elif found:
            processes.utilisation(q, found, self.util_hold_s)
        else:
            st.samples.clear()  # nothing to ask about; saves the call and its NOT_FOUND
        info.processes = found

    def _unusable(self, q: DeviceQuery, lost: bool) -> GpuInfo:
        """A device lost, or whose handle or identity could not be read."""
        info, st = q.info, q.state
        info.uuid, info.name, info.pci_bus_id = st.uuid, st.name, st.pci_bus_id
        info.mem_total_mib = info.mem_used_mib = None
        info.util_gpu = info.util_mem = None
        efficiency.clear(info)
        info.processes = []
        info.lost = lost
        if lost and not info.field_errors:
            info.field_errors["uuid"] = reason(pynvml.NVMLError(GPU_IS_LOST))
        st.samples.clear()
        st.polls_since_uuid = UUID_CHECK_EVERY_POLLS  # look at its identity again next time
        if not lost:
            st.handle = None  # e.g. INVALID_ARGUMENT after a driver reset: fetch a fresh handle next time
        return info
