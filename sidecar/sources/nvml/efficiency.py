"""The efficiency fields of `GpuInfo` (issue 15): clocks and why they are held down, power,
temperature, the PCIe link, GPM activity (Hopper and newer) and MIG devices.

Called from `NvmlSource` (source.py) with the device's `DeviceQuery`, so a query the GPU cannot
answer costs its own field (None, the reason in `field_errors[<field>]`) and never the others. What each poll costs, per GPU:

- every poll: clock event reasons, SM and memory clocks, and power, enforced power limit and
  temperature in one nvmlDeviceGetFieldValues call where the driver offers those fields (4 calls;
  6 with the single getters), and on a GPM GPU one sample plus one metrics computation (2);
- every RARE_EVERY_POLLS polls (like the UUID check): max SM clock, the four PCIe link queries (the
  current generation and width every poll while they read below the maximum) and the MIG mode (and, with MIG on, the MIG devices' handles and ids: mig.py): they change with a reset, a
  link retraining or an operator's command, not between two polls;
- once per GPU identity: compute capability and whether GPM is supported.

GPM metrics are rates between two samples: the first poll of a GPU has one sample and reports
"first sample" for the GPM fields. NVML wants the two samples more than 100 ms apart (nvml.h), far
below the sidecar's poll interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sidecar.common.nvml_names import (
    CLOCK_EVENT_REASONS,
    GPM_FIELDS,
    GPM_FIRST_SAMPLE,
    GPU_EFFICIENCY_FIELDS,
)
from sidecar.sources.nvml import mig
from sidecar.sources.nvml._lib import (
    FUNCTION_NOT_FOUND,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    SUCCESS,
    FunctionNotFound,
    GpuLost,
    NotSupported,
    NvmlError,
    pynvml,
    reason,
)
from sidecar.sources.nvml.direct import GPM_ENTRY, GPM_HEADER_BYTES, GPM_METRIC_BYTES, FieldValues
from sidecar.sources.nvml.query import DeviceQuery
from sidecar.sources.nvml.snapshot import GpuInfo

# How often the rarely changing queries are repeated (the same period as the UUID check).
RARE_EVERY_POLLS = 10

GPM_UNSUPPORTED = "this GPU has no GPM (it needs a Hopper or newer GPU)"
# A GPM value the driver answered that no rate or share can be (NaN, infinite, negative): None with
# this reason, never passed on (a NaN made the status document invalid JSON, so the page lost every
# job; a negative share read as "few SMs busy" and raised hollow-utilisation).
GPM_INVALID_VALUE = "NVML answered an impossible value"
_GPM_NAMES = tuple(name for name, _id, _scale in GPM_FIELDS)
# The fields read every RARE_EVERY_POLLS polls, kept with their errors between.
_RARE_FIELDS = (
    "sm_clock_max_mhz",
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width",
    "pcie_link_width_max",
)

# The scalars batched into nvmlDeviceGetFieldValues: field -> NVML_FI_DEV_* id (nvml.h) whose answer
# is the single getter's. nvmlDeviceGetPowerUsage is the 1-second average on the GPUs that offer
# NVML_FI_DEV_POWER_AVERAGE (Ampere but GA100, and newer) and the instant power on the others, which
# answer that field NOT_SUPPORTED and so are read with the getter; NVML_FI_DEV_GPU_TEMP is the
# temperature the getter rounds to a whole degree.
POWER_AVERAGE, POWER_CURRENT_LIMIT, GPU_TEMP = 185, 190, 308
BATCHED_FIELDS = (("power_w", POWER_AVERAGE), ("power_limit_w", POWER_CURRENT_LIMIT), ("temperature_c", GPU_TEMP))
# Per-field answers that mean "not offered through the batch" for this GPU (an older driver answers
# an id it does not know INVALID_ARGUMENT): the field is read with its getter from then on.
_NOT_OFFERED = (NOT_SUPPORTED, INVALID_ARGUMENT)


@dataclass
class EfficiencyState:
    """What one GPU identity remembers between polls (replaced when the identity changes)."""

    events_v2: bool = True  # False once the driver lacks nvmlDeviceGetCurrentClocksEventReasons
    field_values: bool = True  # False once the driver lacks nvmlDeviceGetFieldValues
    batch: FieldValues | None = None  # the fields still asked through the batch (None: not made yet)
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
    mig_handles: list[mig.MigHandle] = field(default_factory=list)
    energy_supported: bool = True  # False once the GPU (or the driver) answered it has no energy counter


def poll(q: DeviceQuery, es: EfficiencyState) -> None:
    """Fill `q.info`'s efficiency fields; raises GpuLost when the GPU turns out to be lost."""
    info, queries, h = q.info, q.queries, q.handle
    batched = _batched(q, es)
    _clock_events(q, es)
    info.sm_clock_mhz = q.reading("sm_clock_mhz", queries.sm_clock, h)
    info.mem_clock_mhz = q.reading("mem_clock_mhz", queries.mem_clock, h)
    power_mw = batched.get(POWER_AVERAGE)
    if power_mw is None:
        power_mw = q.reading("power_w", queries.power, h)
    limit_mw = batched.get(POWER_CURRENT_LIMIT)
    if limit_mw is None:
        limit_mw = q.reading("power_limit_w", queries.power_limit, h)
    info.power_w = power_mw / 1000 if power_mw is not None else None
    info.power_limit_w = limit_mw / 1000 if limit_mw is not None else None
    temperature = batched.get(GPU_TEMP)
    if temperature is not None:
        info.temperature_c = float(math.floor(temperature + 0.5))  # the getter's whole degree
    else:
        temperature = q.get("temperature_c", queries.temperature, h)
        info.temperature_c = float(temperature) if temperature is not None else None
    if es.energy_supported:
        _energy(q, es)
    if es.polls_since_rare >= RARE_EVERY_POLLS:
        _read_rare(q, es)
        es.polls_since_rare = 0
    elif _link_below_max(es.rare):
        _read_link_now(q, es)
    es.polls_since_rare += 1
    for name in _RARE_FIELDS:
        setattr(info, name, es.rare.get(name))
    q.errors.update(es.rare_errors)
    info.compute_capability = es.compute_capability
    if es.compute_capability_error is not None:
        q.errors["compute_capability"] = es.compute_capability_error
    info.mig_mode = es.mig_mode
    _gpm(q, es)
    if es.mig_mode:
        mig.devices(q, es.mig_handles)


def _batched(q: DeviceQuery, es: EfficiencyState) -> dict[int, Any]:
    """The batched fields that answered this poll (field id -> value). A failed call, or a field
    that did not answer, leaves its fields to their getters: what they say (value or failure) is
    what the snapshot shows, so the batch never changes a value or an error, only the calls."""
    if not es.field_values:
        return {}
    if es.batch is None:
        es.batch = FieldValues(field_id for _name, field_id in BATCHED_FIELDS)
    if not es.batch.field_ids:
        return {}
    try:
        answers = es.batch.read(q.handle)
    except FunctionNotFound:
        es.field_values = False
        return {}
    except Exception:  # noqa: BLE001 -- the getters ask again, and say what is wrong
        return {}
    kept = [field_id for field_id in es.batch.field_ids if answers[field_id][0] not in _NOT_OFFERED]
    if len(kept) != len(es.batch.field_ids):
        es.batch = FieldValues(kept)
    return {field_id: value for field_id, (code, value) in answers.items() if code == SUCCESS}


def _clock_events(q: DeviceQuery, es: EfficiencyState) -> None:
    mask = None
    if es.events_v2:
        fn = q.queries.clock_events
        try:
            mask = q.attempt("clock_event_reasons", fn, q.handle) if fn is not None else None
        except FunctionNotFound as err:
            # A driver (or binding) before the 535 rename: the same bits under the older name.
            es.events_v2 = False
            q.errors.pop("clock_event_reasons", None)
            q.recorder.call_errors.pop(err.function or "", None)
        except GpuLost:
            raise
        except NvmlError:
            pass
        if fn is None:  # a binding before the 535 rename lacks the wrapper
            es.events_v2 = False
    if not es.events_v2:
        mask = q.get("clock_event_reasons", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, q.handle)
    if mask is not None:
        q.info.clock_event_reasons = event_reasons(mask)


@lru_cache(maxsize=64)  # a GPU's mask reads the same most polls, and few masks ever occur
def event_reasons(mask: int) -> tuple[str, ...]:
    """The names of the clock event reasons whose bits ``mask`` has, in CLOCK_EVENT_REASONS' order."""
    return tuple(name for bit, name in CLOCK_EVENT_REASONS if mask & bit)


def _read_rare(q: DeviceQuery, es: EfficiencyState) -> None:
    """The queries whose answers change rarely; raises GpuLost when the GPU is lost."""
    n, h = pynvml, q.handle
    errors: dict[str, str] = {}
    rare = {
        "sm_clock_max_mhz": q.reading("sm_clock_max_mhz", n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM, into=errors),
        "pcie_link_gen": q.reading("pcie_link_gen", n.nvmlDeviceGetCurrPcieLinkGeneration, h, into=errors),
        "pcie_link_gen_max": q.reading("pcie_link_gen_max", n.nvmlDeviceGetMaxPcieLinkGeneration, h, into=errors),
        "pcie_link_width": q.reading("pcie_link_width", n.nvmlDeviceGetCurrPcieLinkWidth, h, into=errors),
        "pcie_link_width_max": q.get("pcie_link_width_max", n.nvmlDeviceGetMaxPcieLinkWidth, h, into=errors),
    }
    if not es.compute_capability_final:
        cc_errors: dict[str, str] = {}
        try:
            cc = q.attempt("compute_capability", n.nvmlDeviceGetCudaComputeCapability, h, into=cc_errors)
        except NvmlError as err:
            cc, es.compute_capability_final = None, isinstance(err, NotSupported)
        else:
            es.compute_capability_final = True
        es.compute_capability = f"{cc[0]}.{cc[1]}" if cc is not None else None
        es.compute_capability_error = cc_errors.get("compute_capability")
    mode = q.get("mig_mode", n.nvmlDeviceGetMigMode, h, into=errors)
    es.mig_mode = mode[0] == n.NVML_DEVICE_MIG_ENABLE if mode is not None else None
    es.mig_handles = mig.handles(q, errors) if es.mig_mode else []
    es.rare, es.rare_errors = rare, errors


def _energy(q: DeviceQuery, es: EfficiencyState) -> None:
    """NVML's energy counter (millijoules since the driver was loaded). Asked no more once the GPU
    answers NOT_SUPPORTED (before Volta) or the driver lacks the function; any other failure is this
    poll's None (in call_errors, as any failed call). Never in field_errors: the counter is the runs
    recorder's, no field of the documents."""
    try:
        q.info.energy_mj = q.attempt("energy_mj", q.queries.energy, q.handle, into={})
    except (NotSupported, FunctionNotFound):
        es.energy_supported = False
    except GpuLost:
        raise
    except NvmlError:
        pass


def _link_below_max(rare: dict[str, Any]) -> bool:
    gen, gen_max = rare.get("pcie_link_gen"), rare.get("pcie_link_gen_max")
    width, width_max = rare.get("pcie_link_width"), rare.get("pcie_link_width_max")
    return (gen is not None and gen_max is not None and gen < gen_max) or (
        width is not None and width_max is not None and width < width_max
    )


def _read_link_now(q: DeviceQuery, es: EfficiencyState) -> None:
    """The link's current generation and width, afresh: an idle GPU lowers its link and raises it
    again within a poll of work starting, so a reading below the maximum is never kept between
    polls (pcie-degraded would otherwise judge a busy GPU by its idle link)."""
    n = pynvml
    errors = es.rare_errors
    for name, fn in (
        ("pcie_link_gen", n.nvmlDeviceGetCurrPcieLinkGeneration),
        ("pcie_link_width", n.nvmlDeviceGetCurrPcieLinkWidth),
    ):
        errors.pop(name, None)
        es.rare[name] = q.get(name, fn, q.handle, into=errors)


def _gpm_none(info: GpuInfo, why: str) -> None:
    info.field_errors.update(_gpm_reasons(why))


@lru_cache(maxsize=16)  # a handful of reasons (unsupported, first sample, a failure's), each poll
def _gpm_reasons(why: str) -> dict[str, str]:
    """Each GPM field with the reason it has no value (never changed: only read)."""
    return dict.fromkeys(_GPM_NAMES, why)


def _gpm_supported(q: DeviceQuery, es: EfficiencyState) -> bool | None:
    """Whether the GPU has GPM, asked once per identity; None after a passing failure (asked again
    next poll, the GPM fields None with its reason)."""
    if es.gpm_supported is not None:
        return es.gpm_supported
    scratch: dict[str, str] = {}
    fn = getattr(pynvml, "nvmlGpmQueryDeviceSupport", None) or _missing
    try:
        es.gpm_supported = bool(q.attempt("gpm", fn, q.handle, into=scratch).isSupportedDevice)
    except (NotSupported, FunctionNotFound):
        es.gpm_supported, es.gpm_reason = False, f"{GPM_UNSUPPORTED}: {scratch['gpm']}"
    except NvmlError as err:
        _gpm_none(q.info, scratch["gpm"])
        if isinstance(err, GpuLost):
            raise
    return es.gpm_supported


def _gpm(q: DeviceQuery, es: EfficiencyState) -> None:
    """GPM activity between the previous poll's sample and this one's; raises GpuLost when lost."""
    supported = _gpm_supported(q, es)
    if supported is None:
        return
    if not supported:
        _gpm_none(q.info, es.gpm_reason)
        return
    n = pynvml
    scratch: dict[str, str] = {}
    if not es.gpm_samples:
        first = q.reading("gpm", n.nvmlGpmSampleAlloc, into=scratch)
        second = q.reading("gpm", n.nvmlGpmSampleAlloc, into=scratch) if first is not None else None
        if second is None:
            free_gpm(es, [first])
            _gpm_none(q.info, scratch["gpm"])
            return
        es.gpm_samples = [first, second]
    current = es.gpm_samples[es.gpm_current]
    try:
        q.attempt("gpm", n.nvmlGpmSampleGet, q.handle, current, into=scratch)
    except NvmlError as err:
        es.gpm_have_previous = False  # the next good sample starts a new pair
        _gpm_none(q.info, scratch["gpm"])
        if isinstance(err, GpuLost):
            raise
        return
    es.gpm_current ^= 1
    if not es.gpm_have_previous:
        es.gpm_have_previous = True
        _gpm_none(q.info, GPM_FIRST_SAMPLE)
        return
    request = es.gpm_request
    if request is None:
        request = es.gpm_request = n.c_nvmlGpmMetricsGet_t()
        request.version = n.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_FIELDS)
        for i, (_name, metric_id, _scale) in enumerate(GPM_FIELDS):
            request.metrics[i].metricId = metric_id
    request.sample1, request.sample2 = es.gpm_samples[es.gpm_current], current  # (previous, current)
    if q.reading("gpm", n.nvmlGpmMetricsGet, request, into=scratch) is None:
        _gpm_none(q.info, scratch["gpm"])
        return
    _gpm_values(q.info, request)


def _gpm_values(info: GpuInfo, request: Any) -> None:
    errors = info.field_errors
    for i, (name, _id, scale) in enumerate(GPM_FIELDS):
        # Read from the struct's bytes: attribute access on nvidia-ml-py's structures is slow.
        _metric, ret, value = GPM_ENTRY.unpack_from(request, GPM_HEADER_BYTES + i * GPM_METRIC_BYTES)
        if ret == SUCCESS:
            scaled = value * scale
            if not math.isfinite(scaled) or scaled < 0.0:
                errors[name] = f"{GPM_INVALID_VALUE}: {value!r}"
            else:
                # A share (`_fraction`, 0-1 by its name) a little over 1 is sampling jitter: at most 1.
                setattr(info, name, min(scaled, 1.0) if name.endswith("_fraction") else scaled)
        else:
            errors[name] = reason(pynvml.NVMLError(ret))


def _missing(*_args: Any) -> Any:
    """Stands in for a GPM function an old nvidia-ml-py lacks: FUNCTION_NOT_FOUND, as from the driver."""
    raise pynvml.NVMLError(FUNCTION_NOT_FOUND)


def free_gpm(es: EfficiencyState, samples: list[Any] | None = None) -> None:
    """Give the GPM sample buffers back to NVML (identity change, close); never raises."""
    for sample in es.gpm_samples if samples is None else samples:
        if sample is None:
            continue
        try:
            pynvml.nvmlGpmSampleFree(sample)
        except Exception:  # noqa: BLE001 -- a dead driver must not stop the sidecar from closing
            pass
    if samples is None:
        es.gpm_samples, es.gpm_have_previous, es.gpm_request = [], False, None


def clear(info: GpuInfo) -> None:
    """A lost GPU: no efficiency value stands (the reasons already recorded stay)."""
    for name in GPU_EFFICIENCY_FIELDS:
        setattr(info, name, None)
    info.mig_devices = []
