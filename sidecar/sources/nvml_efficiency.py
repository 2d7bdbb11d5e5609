"""The efficiency fields of `GpuInfo` (issue 15): clocks and why they are held down, power,
temperature, the PCIe link, GPM activity (Hopper and newer) and MIG devices.

Called from `NvmlSource._poll_device`; every NVML call goes through the same `_Calls` helper, so a
query the GPU cannot answer costs its own field (None, the reason in `field_errors[<field>]`) and
never the others. What each poll costs, per GPU:

- every poll: clock event reasons, SM and memory clocks, power, enforced power limit, temperature
  (6 calls), and on a GPM GPU one sample plus one metrics computation (2);
- every RARE_EVERY_POLLS polls (like the UUID check): max SM clock, the four PCIe link queries (the
  current generation and width every poll while they read below the maximum) and the MIG mode (and, with MIG on, the MIG devices' handles and ids): they change with a reset, a
  link retraining or an operator's command, not between two polls;
- once per GPU identity: compute capability and whether GPM is supported.

GPM metrics are rates between two samples: the first poll of a GPU has one sample and reports
"first sample" for the GPM fields. NVML wants the two samples more than 100 ms apart (nvml.h), far
below the sidecar's poll interval.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sidecar.common.nvml_names import (
    CLOCK_EVENT_REASONS,
    GPM_FIELDS,
    GPM_FIRST_SAMPLE,
    GPU_EFFICIENCY_FIELDS,
)

if TYPE_CHECKING:
    from sidecar.sources.nvml import GpuInfo, GpuProcess, Queries, _Calls

# How often the rarely changing queries are repeated (the same period as the UUID check).
RARE_EVERY_POLLS = 10

GPM_UNSUPPORTED = "this GPU has no GPM (it needs a Hopper or newer GPU)"
# A GPM value the driver answered that no rate or share can be (NaN, infinite, negative): None with
# this reason, never passed on (a NaN made the status document invalid JSON, so the page lost every
# job; a negative share read as "few SMs busy" and raised hollow-utilisation).
GPM_INVALID_VALUE = "NVML answered an impossible value"
# MIG devices looked for per GPU at most (A100 and H100 split into 7; a driver's count past this is
# not believed).
MAX_MIG_DEVICES = 64
MIG_NO_PROCESS_UTILIZATION = "per-process utilisation is not available on a MIG-enabled GPU (NVML)"
NO_INSTANCE_ID = 0xFFFFFFFF  # NVML's "not in a MIG instance" in process entries (GpuProcess: None)
_GPM_NAMES = tuple(name for name, _id, _scale in GPM_FIELDS)
# nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2, then 40-byte nvmlGpmMetric_t entries
# whose first 16 bytes are metricId, nvmlReturn, value (tests/fakenvml/fakenvml.c static_asserts).
_GPM_HEADER_BYTES = 24
_GPM_METRIC_BYTES = 40
_GPM_ENTRY = struct.Struct("<Iid")
# The fields read every RARE_EVERY_POLLS polls, kept with their errors between.
_RARE_FIELDS = (
    "sm_clock_max_mhz",
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width",
    "pcie_link_width_max",
)


@dataclass
class MigHandle:
    index: int
    handle: Any
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


@dataclass
class EfficiencyState:
    """What one GPU identity remembers between polls (replaced when the identity changes)."""

    events_v2: bool = True  # False once the driver lacks nvmlDeviceGetCurrentClocksEventReasons
    polls_since_rare: int = RARE_EVERY_POLLS  # so the first poll reads them
    rare: dict[str, Any] = field(default_factory=dict)
    rare_errors: dict[str, str] = field(default_factory=dict)
    compute_capability: str | None = None
    compute_capability_final: bool = False  # read, or known unsupported: not asked again
    compute_capability_error: str | None = None
    gpm_supported: bool | None = None  # None: not asked yet
    gpm_reason: str = GPM_UNSUPPORTED
    gpm_samples: list[Any] = field(default_factory=list)  # two nvmlGpmSample_t, alternately current
    gpm_current: int = 0
    gpm_have_previous: bool = False
    gpm_request: Any = None  # a c_nvmlGpmMetricsGet_t with the metric ids filled in, reused
    mig_mode: bool | None = None
    mig_handles: list[MigHandle] = field(default_factory=list)


def poll(calls: _Calls, q: Queries, info: GpuInfo, es: EfficiencyState, h: Any, where: str) -> bool:
    """Fill `info`'s efficiency fields; True when the GPU turned out to be lost."""
    errors = info.field_errors
    lost = _clock_events(calls, q, info, es, h, where)
    sm = calls(errors, "sm_clock_mhz", where, q.sm_clock, h)
    mem = calls(errors, "mem_clock_mhz", where, q.mem_clock, h)
    info.sm_clock_mhz, info.mem_clock_mhz = sm, mem
    power_mw = calls(errors, "power_w", where, q.power, h)
    limit_mw = calls(errors, "power_limit_w", where, q.power_limit, h)
    info.power_w = power_mw / 1000 if power_mw is not None else None
    info.power_limit_w = limit_mw / 1000 if limit_mw is not None else None
    temperature = calls(errors, "temperature_c", where, q.temperature, h)
    info.temperature_c = float(temperature) if temperature is not None else None
    if lost or calls.code == _nvml.GPU_IS_LOST:
        return True
    if es.polls_since_rare >= RARE_EVERY_POLLS:
        if _read_rare(calls, es, h, where):
            return True
        es.polls_since_rare = 0
    elif _link_below_max(es.rare) and _read_link_now(calls, es, h, where):
        return True
    es.polls_since_rare += 1
    for name in _RARE_FIELDS:
        setattr(info, name, es.rare.get(name))
    errors.update(es.rare_errors)
    info.compute_capability = es.compute_capability
    if es.compute_capability_error is not None:
        errors["compute_capability"] = es.compute_capability_error
    info.mig_mode = es.mig_mode
    return _gpm(calls, info, es, h, where) or _mig_devices(calls, info, es, where)


def _clock_events(calls: _Calls, q: Queries, info: GpuInfo, es: EfficiencyState, h: Any, where: str) -> bool:
    n = _nvml.pynvml
    errors = info.field_errors
    mask = None
    if es.events_v2:
        fn = q.clock_events
        if fn is not None:
            mask = calls(errors, "clock_event_reasons", where, fn, h)
        if fn is None or calls.code == _nvml.FUNCTION_NOT_FOUND:
            # A driver (or binding) before the 535 rename: the same bits under the older name.
            es.events_v2 = False
            errors.pop("clock_event_reasons", None)
            calls.call_errors.pop("nvmlDeviceGetCurrentClocksEventReasons", None)
    if not es.events_v2:
        mask = calls(errors, "clock_event_reasons", where, n.nvmlDeviceGetCurrentClocksThrottleReasons, h)
    if mask is not None:
        info.clock_event_reasons = tuple(name for bit, name in CLOCK_EVENT_REASONS if mask & bit)
    return calls.code == _nvml.GPU_IS_LOST


def _read_rare(calls: _Calls, es: EfficiencyState, h: Any, where: str) -> bool:
    """The queries whose answers change rarely; True when the GPU is lost."""
    n = _nvml.pynvml
    errors: dict[str, str] = {}
    rare = {
        "sm_clock_max_mhz": calls(
            errors, "sm_clock_max_mhz", where, n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM
        ),
        "pcie_link_gen": calls(errors, "pcie_link_gen", where, n.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "pcie_link_gen_max": calls(
            errors, "pcie_link_gen_max", where, n.nvmlDeviceGetMaxPcieLinkGeneration, h
        ),
        "pcie_link_width": calls(errors, "pcie_link_width", where, n.nvmlDeviceGetCurrPcieLinkWidth, h),
        "pcie_link_width_max": calls(
            errors, "pcie_link_width_max", where, n.nvmlDeviceGetMaxPcieLinkWidth, h
        ),
    }
    if calls.code == _nvml.GPU_IS_LOST:
        return True
    if not es.compute_capability_final:
        cc_errors: dict[str, str] = {}
        cc = calls(cc_errors, "compute_capability", where, n.nvmlDeviceGetCudaComputeCapability, h)
        es.compute_capability = f"{cc[0]}.{cc[1]}" if cc is not None else None
        es.compute_capability_error = cc_errors.get("compute_capability")
        es.compute_capability_final = cc is not None or calls.code == _nvml.NOT_SUPPORTED
    mode = calls(errors, "mig_mode", where, n.nvmlDeviceGetMigMode, h)
    es.mig_mode = mode[0] == n.NVML_DEVICE_MIG_ENABLE if mode is not None else None
    es.mig_handles = _mig_handles(calls, errors, h, where) if es.mig_mode else []
    es.rare, es.rare_errors = rare, errors
    return calls.code == _nvml.GPU_IS_LOST


def _link_below_max(rare: dict[str, Any]) -> bool:
    gen, gen_max = rare.get("pcie_link_gen"), rare.get("pcie_link_gen_max")
    width, width_max = rare.get("pcie_link_width"), rare.get("pcie_link_width_max")
    return (gen is not None and gen_max is not None and gen < gen_max) or (
        width is not None and width_max is not None and width < width_max
    )


def _read_link_now(calls: _Calls, es: EfficiencyState, h: Any, where: str) -> bool:
    """The link's current generation and width, afresh: an idle GPU lowers its link and raises it
    again within a poll of work starting, so a reading below the maximum is never kept between
    polls (pcie-degraded would otherwise judge a busy GPU by its idle link). True when lost."""
    n = _nvml.pynvml
    errors = es.rare_errors
    for name, fn in (
        ("pcie_link_gen", n.nvmlDeviceGetCurrPcieLinkGeneration),
        ("pcie_link_width", n.nvmlDeviceGetCurrPcieLinkWidth),
    ):
        errors.pop(name, None)
        es.rare[name] = calls(errors, name, where, fn, h)
        if calls.code == _nvml.GPU_IS_LOST:
            return True
    return False


def _mig_handles(calls: _Calls, errors: dict[str, str], h: Any, where: str) -> list[MigHandle]:
    """The MIG devices that exist now: NVML numbers them 0..max-1 with gaps (NOT_FOUND)."""
    n = _nvml.pynvml
    found = []
    count = calls(errors, "mig_devices", where, n.nvmlDeviceGetMaxMigDeviceCount, h)
    if count is not None and count > MAX_MIG_DEVICES:
        # A driver answering 0xFFFFFFFF would cost billions of calls a poll: the first ones only.
        errors["mig_devices"] = (
            f"NVML reported {count} MIG devices at most; looked at the first {MAX_MIG_DEVICES}"
        )
        count = MAX_MIG_DEVICES
    for k in range(count or 0):
        mh = calls(
            errors,
            "mig_devices",
            where,
            n.nvmlDeviceGetMigDeviceHandleByIndex,
            h,
            k,
            quiet=(_nvml.NOT_FOUND,),
        )
        if mh is None:
            continue
        uuid = _nvml._text(calls(errors, "mig_devices", where, n.nvmlDeviceGetUUID, mh))
        gi = calls(errors, "mig_devices", where, n.nvmlDeviceGetGpuInstanceId, mh)
        ci = calls(errors, "mig_devices", where, n.nvmlDeviceGetComputeInstanceId, mh)
        found.append(MigHandle(k, mh, uuid, gi, ci))
    return found


def _gpm_none(info: GpuInfo, reason: str) -> None:
    errors = info.field_errors
    for name in _GPM_NAMES:
        errors[name] = reason


def _gpm(calls: _Calls, info: GpuInfo, es: EfficiencyState, h: Any, where: str) -> bool:
    """GPM activity between the previous poll's sample and this one's; True when the GPU is lost."""
    n = _nvml.pynvml
    scratch: dict[str, str] = {}
    if es.gpm_supported is None:
        support = calls(scratch, "gpm", where, getattr(n, "nvmlGpmQueryDeviceSupport", None) or _missing, h)
        if support is not None:
            es.gpm_supported = bool(support.isSupportedDevice)
        elif calls.code in (_nvml.NOT_SUPPORTED, _nvml.FUNCTION_NOT_FOUND):
            es.gpm_supported, es.gpm_reason = False, f"{GPM_UNSUPPORTED}: {scratch['gpm']}"
        else:  # a passing failure: ask again next poll
            _gpm_none(info, scratch["gpm"])
            return calls.code == _nvml.GPU_IS_LOST
    if not es.gpm_supported:
        _gpm_none(info, es.gpm_reason)
        return False
    if not es.gpm_samples:
        first = calls(scratch, "gpm", where, n.nvmlGpmSampleAlloc)
        second = calls(scratch, "gpm", where, n.nvmlGpmSampleAlloc) if first is not None else None
        if second is None:
            free_gpm(es, [first])
            _gpm_none(info, scratch["gpm"])
            return False
        es.gpm_samples = [first, second]
    current = es.gpm_samples[es.gpm_current]
    if calls(scratch, "gpm", where, n.nvmlGpmSampleGet, h, current) is None:
        es.gpm_have_previous = False  # the next good sample starts a new pair
        _gpm_none(info, scratch["gpm"])
        return calls.code == _nvml.GPU_IS_LOST
    es.gpm_current ^= 1
    if not es.gpm_have_previous:
        es.gpm_have_previous = True
        _gpm_none(info, GPM_FIRST_SAMPLE)
        return False
    request = es.gpm_request
    if request is None:
        request = es.gpm_request = n.c_nvmlGpmMetricsGet_t()
        request.version = n.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_FIELDS)
        for i, (_name, metric_id, _scale) in enumerate(GPM_FIELDS):
            request.metrics[i].metricId = metric_id
    request.sample1, request.sample2 = es.gpm_samples[es.gpm_current], current  # (previous, current)
    if calls(scratch, "gpm", where, n.nvmlGpmMetricsGet, request) is None:
        _gpm_none(info, scratch["gpm"])
        return False
    errors = info.field_errors
    for i, (name, _id, scale) in enumerate(GPM_FIELDS):
        # Read from the struct's bytes: attribute access on nvidia-ml-py's structures is slow.
        _metric, ret, value = _GPM_ENTRY.unpack_from(request, _GPM_HEADER_BYTES + i * _GPM_METRIC_BYTES)
        if ret == _nvml.SUCCESS:
            scaled = value * scale
            if not math.isfinite(scaled) or scaled < 0.0:
                errors[name] = f"{GPM_INVALID_VALUE}: {value!r}"
            else:
                # A share (`_fraction`, 0-1 by its name) a little over 1 is sampling jitter: at most 1.
                setattr(info, name, min(scaled, 1.0) if name.endswith("_fraction") else scaled)
        else:
            errors[name] = _nvml._reason(n.NVMLError(ret))
    return False


def _missing(*_args: Any) -> Any:
    """Stands in for a GPM function an old nvidia-ml-py lacks: FUNCTION_NOT_FOUND, as from the driver."""
    raise _nvml.pynvml.NVMLError(_nvml.FUNCTION_NOT_FOUND)


def free_gpm(es: EfficiencyState, samples: list[Any] | None = None) -> None:
    """Give the GPM sample buffers back to NVML (identity change, close); never raises."""
    for sample in es.gpm_samples if samples is None else samples:
        if sample is None:
            continue
        try:
            _nvml.pynvml.nvmlGpmSampleFree(sample)
        except Exception:
            pass  # a dead driver must not stop the sidecar from closing
    if samples is None:
        es.gpm_samples, es.gpm_have_previous, es.gpm_request = [], False, None


def _mig_devices(calls: _Calls, info: GpuInfo, es: EfficiencyState, where: str) -> bool:
    """Memory of each MIG device, every poll (the handles and ids come from the rare queries)."""
    if not es.mig_mode:
        return False
    n = _nvml.pynvml
    MigDevice = _nvml.MigDevice
    for mh in es.mig_handles:
        mem = calls(info.field_errors, "mig_devices", where, n.nvmlDeviceGetMemoryInfo, mh.handle)
        if calls.code == _nvml.GPU_IS_LOST:
            return True
        info.mig_devices.append(
            MigDevice(
                mh.index,
                mh.uuid,
                mh.gpu_instance_id,
                mh.compute_instance_id,
                mem.used / _nvml.MIB if mem is not None else None,
                mem.total / _nvml.MIB if mem is not None else None,
            )
        )
    return False


def mig_processes(
    calls: _Calls, errors: dict[str, str], where: str, es: EfficiencyState
) -> list[GpuProcess] | None:
    """Compute processes read per MIG device: the parent's aggregate list needs privileges (nvml.h).

    MIG has no graphics contexts, so the compute list is all there is. None when a list failed.
    """
    n = _nvml.pynvml
    found: list[GpuProcess] = []
    for mh in es.mig_handles:
        entries = calls(errors, "processes", where, n.nvmlDeviceGetComputeRunningProcesses, mh.handle)
        if entries is None:
            return None
        for e in entries:
            used = e.usedGpuMemory
            process = _nvml.GpuProcess(
                e.pid, used / _nvml.MIB if used is not None else None, None, None, ("compute",)
            )
            gi, ci = e.gpuInstanceId, e.computeInstanceId
            process.gpu_instance_id = mh.gpu_instance_id if gi == NO_INSTANCE_ID else gi
            process.compute_instance_id = mh.compute_instance_id if ci == NO_INSTANCE_ID else ci
            found.append(process)
    return found


def map_processes(info: GpuInfo, processes: list[GpuProcess]) -> None:
    """Each process's MIG device (by GPU instance, then compute instance), as MigDevice.index."""
    if not info.mig_devices:
        return
    for p in processes:
        for m in info.mig_devices:
            if p.gpu_instance_id == m.gpu_instance_id and p.compute_instance_id in (
                m.compute_instance_id,
                None,
            ):
                p.mig_index = m.index
                break


def mig_view(
    calls: _Calls,
    errors: dict[str, str],
    where: str,
    es: EfficiencyState,
    info: GpuInfo,
    processes: list[GpuProcess],
) -> list[GpuProcess]:
    """The processes of a MIG-enabled GPU, each with its MIG device; no per-process utilisation.

    The parent's list (as root) already carries each process's instance ids. Without the
    privileges it fails (NO_PERMISSION), and the lists are read per MIG device instead.
    """
    if "processes" in errors:
        per_device = mig_processes(calls, {}, where, es)
        if per_device is not None:
            errors.pop("processes")
            for name in (
                "nvmlDeviceGetComputeRunningProcesses_v3",
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
                "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetGraphicsRunningProcesses_v2",
            ):
                calls.call_errors.pop(name, None)
            processes = per_device
    # nvml.h: "On MIG-enabled GPUs, querying process utilization is not currently supported."
    errors["process_utilization"] = MIG_NO_PROCESS_UTILIZATION
    map_processes(info, processes)
    return processes


def clear(info: GpuInfo) -> None:
    """A lost GPU: no efficiency value stands (the reasons already recorded stay)."""
    for name in GPU_EFFICIENCY_FIELDS:
        setattr(info, name, None)
    info.mig_devices = []


# Last: nvml imports this module at its top, and this one needs nvml only when called. Either can be
# imported first this way.
from sidecar.sources import nvml as _nvml  # noqa: E402
