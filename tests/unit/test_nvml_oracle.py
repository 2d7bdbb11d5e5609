"""NvmlSource against the code as it was (tests/helpers/nvml_before.py): over the simulated driver's
scenarios (busy GPUs, the efficiency scenarios, MIG, NOT_SUPPORTED everywhere, lost GPUs, a GPU
swapped at its index, devices appearing), missing functions and errors injected into every call a
poll makes, both sources poll the same driver in turns and must return the same snapshot: same
values (floats to the bit, by repr), same types, same dict order, same field and call errors."""

from __future__ import annotations

import pytest

from tests.fakenvml import gpu, scenarios

PRELUDE = """
import dataclasses
import pynvml
from sidecar.sources.nvml import NvmlSource
from tests.helpers import nvml_before

MISSING = set()  # functions the driver lacks (FUNCTION_NOT_FOUND from nvidia-ml-py's lookup)
FAIL = {}  # function -> the code it answers instead of running
_real_lookup = pynvml._nvmlGetFunctionPointer

def _lookup(name):
    if name in MISSING:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    fn = _real_lookup(name)
    def maybe_failing(*args):
        code = FAIL.get(name)
        return fn(*args) if code is None else code
    return maybe_failing

pynvml._nvmlGetFunctionPointer = _lookup

def view(snap):
    d = dataclasses.asdict(snap)
    d.pop("time")
    return repr(d)

def start():
    global old, new
    old, new = nvml_before.NvmlSource(), NvmlSource()

def both(polls):
    out = []
    for _ in range(polls):
        a, b = view(old.poll()), view(new.poll())
        out.append([a, b])
    return out
"""

PIDS = list(range(300000, 300040))


def _busy() -> dict:
    procs = [
        {"pid": PIDS[0], "used_mib": 15000, "sm_util": 80, "mem_util": 30},
        {"pid": PIDS[1], "used_mib": 300, "sm_util": 3, "mem_util": 1, "type": "graphics"},
        {"pid": PIDS[2], "used_mib": 5000, "type": "both"},
        {"pid": PIDS[3], "used_mib": None, "sm_util": 12},
        {"pid": PIDS[4], "used_mib": 1, "sm_util": 250, "mem_util": 5},  # a driver's garbage sample
    ]
    return {
        "gpus": [
            gpu(0, util_gpu=88, util_mem=35, processes=procs, memory_used_mib=20480, memory_reserved_mib=512),
            gpu(1, processes=[{"pid": p, "used_mib": 100 + p % 7, "sm_util": p % 90} for p in PIDS[5:30]]),
            gpu(2, pcie_gen=1, pcie_width=4, clock_event_reasons=["sw_power_cap", "gpu_idle"]),
            gpu(3, memory_total_bytes=85899345920, memory_used_bytes=123456789, not_supported=["memory_v2"]),
        ]
    }


ALL_QUERIES = [
    "utilization", "memory", "temperature", "power", "power_limit", "processes", "process_utilization",
    "pci", "compute_capability", "clock_event_reasons", "sm_clock", "mem_clock", "sm_clock_max",
    "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "mig_mode",
]  # fmt: skip

SCENARIOS = {
    "busy": _busy(),
    "throttled": scenarios.throttled(PIDS[0]),
    "power_capped": scenarios.power_capped(PIDS[0]),
    "degraded_link": scenarios.degraded_link(PIDS[0]),
    "busy_but_hollow": scenarios.busy_but_hollow(PIDS[0]),
    "tensor_heavy": scenarios.tensor_heavy(PIDS[0]),
    "mig": scenarios.mig((PIDS[0], PIDS[1])),
    "mig_unprivileged": scenarios.mig((PIDS[0], PIDS[1]), mig_unprivileged=True),
    "throttle_reasons_only": scenarios.throttle_reasons_only(PIDS[0]),
    "not_supported": {"gpus": [gpu(0, not_supported=ALL_QUERIES, processes=[{"pid": PIDS[0]}]), gpu(1)]},
    "lost": {"gpus": [gpu(0, processes=[{"pid": PIDS[0], "sm_util": 5}]), gpu(1, lost=True)]},
    "init_error": {"init_error": "DRIVER_NOT_LOADED", "gpus": [gpu(0)]},
}

# Every function a poll calls, by the name NVML exports it under.
POLL_FUNCTIONS = [
    "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetUUID", "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMigMode",
    "nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlDeviceGetCount_v2",
]  # fmt: skip

CODES = [3, 4, 6, 7, 15, 999]  # NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, INSUFFICIENT_SIZE, GPU_IS_LOST, UNKNOWN


def _write(fake_nvml, scenario: dict) -> None:
    # A sample every microsecond: each poll gets fresh per-process samples, so whether a value is
    # held or 0 never depends on when a driver sample period ended between the two sources' polls.
    fake_nvml.write({**scenario, "sample_period_us": 1})


def _same(pairs: list[list[str]]) -> None:
    for i, (old, new) in enumerate(pairs):
        assert new == old, f"poll {i}"


@pytest.fixture
def w(fake_nvml):
    worker = fake_nvml.worker()
    worker(PRELUDE)
    return worker


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenarios(fake_nvml, w, name):
    _write(fake_nvml, SCENARIOS[name])
    w("start()")
    _same(w("result = both(12)"))  # past the rare queries' period


def test_changes_between_polls(fake_nvml, w):
    _write(fake_nvml, _busy())
    w("start()")
    _same(w("result = both(3)"))
    swapped = _busy()
    swapped["gpus"][1] = gpu(1, uuid="GPU-swapped", name="NVIDIA L4", processes=[{"pid": PIDS[6], "sm_util": 3}])
    swapped["gpus"][0]["processes"] = swapped["gpus"][0]["processes"][1:]
    _write(fake_nvml, swapped)
    _same(w("result = both(12)"))
    # The pid back, idle (no samples), within the hold: it must not inherit the old process's numbers.
    back = {"gpus": [dict(swapped["gpus"][0], processes=[{"pid": PIDS[0]}]), *swapped["gpus"][1:]]}
    _write(fake_nvml, back)
    _same(w("result = both(2)"))
    _write(fake_nvml, {"gpus": [*swapped["gpus"], gpu(4, lost=True), gpu(5)]})  # devices appear
    _same(w("result = both(3)"))
    _write(fake_nvml, {"gpus": [gpu(0, lost=True), *swapped["gpus"][1:]]})  # lost, then back
    _same(w("result = both(2)"))
    _write(fake_nvml, swapped)
    _same(w("result = both(12)"))


@pytest.mark.parametrize(
    "missing",
    [
        ["nvmlDeviceGetMemoryInfo_v2"],
        ["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"],
        ["nvmlDeviceGetCurrentClocksEventReasons"],
        ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo"],
        ["nvmlGpmQueryDeviceSupport", "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetUtilizationRates"],
    ],
)
def test_missing_functions(fake_nvml, w, missing):
    _write(fake_nvml, {"gpus": [*_busy()["gpus"], scenarios.tensor_heavy_gpu(PIDS[30], index=4)]})
    w(f"MISSING.update({missing!r}); start()")
    _same(w("result = both(12)"))


@pytest.mark.parametrize("function", POLL_FUNCTIONS)
def test_errors_injected(fake_nvml, w, function):
    _write(fake_nvml, {"gpus": [*_busy()["gpus"][:3], scenarios.tensor_heavy_gpu(PIDS[30], index=3)]})
    w("start()")
    _same(w("result = both(2)"))
    for code in CODES:
        w(f"FAIL[{function!r}] = {code}")
        _same(w("result = both(2)"))
        w("FAIL.clear()")
        _same(w("result = both(11)"))  # and the recovery, past a rare read
