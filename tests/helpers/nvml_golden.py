"""Golden snapshots of `NvmlSource` over the simulated driver's scenarios.

Each case is a script of steps (write a scenario, change what the driver lacks or fails, poll N
times) run in one process against `tests/fakenvml`; a poll's result is the `repr` of its
`NvmlSnapshot` as a dict, without the time: values (floats to the bit), types, dict order, field and
call errors. `tests/unit/nvml_golden.json.gz` keeps every case's reprs as made by the code when they were
last regenerated; `tests/unit/test_nvml_oracle.py` runs the cases again and compares. The file is
regenerated only deliberately, by a change meant to change what NVML snapshots say:

    .venv/bin/python -m tests.helpers.nvml_golden --regenerate

Storage: each distinct repr once, keyed by its sha256; each case a list of those keys.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.fakenvml import FakeNvml, PythonWorker, build_library, gpu, scenarios

# gzip: 1.2 MB of reprs compress to ~32 KB; the digests alone would lose the diff a mismatch shows.
GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "nvml_golden.json.gz"

# The worker's side. Faults are injected at nvidia-ml-py's symbol lookup, so whichever route the
# source takes to a fact meets them: a function in MISSING is FUNCTION_NOT_FOUND, one in FAIL answers
# the given code instead of running. A fact read through nvmlDeviceGetFieldValues meets the fault of
# the getter it stands for (FIELD_GETTER): its field answers that code (NOT_SUPPORTED when the getter
# is missing), so "reading power fails" means the same whichever call reads it.
PRELUDE = r"""
import ctypes, dataclasses
import pynvml
from sidecar.sources.nvml import NvmlSource

MISSING = set()
FAIL = {}
FIELD_GETTER = {185: "nvmlDeviceGetPowerUsage", 186: "nvmlDeviceGetPowerUsage",
                190: "nvmlDeviceGetEnforcedPowerLimit", 308: "nvmlDeviceGetTemperature"}
_FIELD_BYTES, _RETURN_AT = 40, 28  # nvmlFieldValue_t: size, offset of nvmlReturn (nvml.h)
_real_lookup = pynvml._nvmlGetFunctionPointer

def _fields(fn):
    def batched(handle, count, values):
        ret = fn(handle, count, values)
        address = ctypes.cast(values, ctypes.c_void_p).value
        for i in range(count.value if hasattr(count, "value") else count):
            entry = address + i * _FIELD_BYTES
            getter = FIELD_GETTER.get(ctypes.c_uint.from_address(entry).value)
            code = 3 if getter in MISSING else FAIL.get(getter)
            if code is not None:
                ctypes.c_int.from_address(entry + _RETURN_AT).value = code
        return ret
    return batched

def _lookup(name):
    if name in MISSING:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    fn = _real_lookup(name)
    if name == "nvmlDeviceGetFieldValues":
        fn = _fields(fn)
    def maybe_failing(*args):
        code = FAIL.get(name)
        return fn(*args) if code is None else code
    return maybe_failing

pynvml._nvmlGetFunctionPointer = _lookup

def view(snap):
    d = dataclasses.asdict(snap)
    d.pop("time")
    return repr(d)

def polls(n):
    return [view(source.poll()) for _ in range(n)]
"""

PIDS = list(range(300000, 300040))

ALL_QUERIES = [
    "utilization", "memory", "temperature", "power", "power_limit", "processes", "process_utilization",
    "pci", "compute_capability", "clock_event_reasons", "sm_clock", "mem_clock", "sm_clock_max",
    "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "mig_mode",
]  # fmt: skip

# Every function a poll calls, by the name NVML exports it under.
POLL_FUNCTIONS = [
    "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetUUID", "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMigMode",
    "nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlDeviceGetCount_v2", "nvmlDeviceGetFieldValues",
]  # fmt: skip

CODES = [3, 4, 6, 7, 15, 999]  # NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, INSUFFICIENT_SIZE, GPU_IS_LOST, UNKNOWN

MISSING_SETS = [
    ["nvmlDeviceGetMemoryInfo_v2"],
    ["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"],
    ["nvmlDeviceGetCurrentClocksEventReasons"],
    ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo"],
    ["nvmlGpmQueryDeviceSupport", "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetUtilizationRates"],
    ["nvmlDeviceGetFieldValues"],
    ["nvmlDeviceGetFieldValues", "nvmlDeviceGetEnforcedPowerLimit"],
]


def busy() -> dict:
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


SCENARIOS = {
    "busy": busy(),
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

# A step: ("write", scenario), ("exec", code for the worker) or ("poll", n).
Step = tuple[str, Any]


def write_step(scenario: dict) -> Step:
    # A sample every microsecond: each poll gets fresh per-process samples, so whether a value is
    # held or 0 never depends on when a driver sample period ended.
    return ("write", {**scenario, "sample_period_us": 1})


START: Step = ("exec", "source = NvmlSource()")


def _changes() -> list[Step]:
    swapped = busy()
    swapped["gpus"][1] = gpu(1, uuid="GPU-swapped", name="NVIDIA L4", processes=[{"pid": PIDS[6], "sm_util": 3}])
    swapped["gpus"][0]["processes"] = swapped["gpus"][0]["processes"][1:]
    # The pid back, idle (no samples), within the hold: it must not inherit the old process's numbers.
    back = {"gpus": [dict(swapped["gpus"][0], processes=[{"pid": PIDS[0]}]), *swapped["gpus"][1:]]}
    return [
        write_step(busy()), START, ("poll", 3),
        write_step(swapped), ("poll", 12),
        write_step(back), ("poll", 2),
        write_step({"gpus": [*swapped["gpus"], gpu(4, lost=True), gpu(5)]}), ("poll", 3),  # devices appear
        write_step({"gpus": [gpu(0, lost=True), *swapped["gpus"][1:]]}), ("poll", 2),  # lost, then back
        write_step(swapped), ("poll", 12),
    ]  # fmt: skip


def _errors_injected(function: str) -> list[Step]:
    steps = [write_step({"gpus": [*busy()["gpus"][:3], scenarios.tensor_heavy_gpu(PIDS[30], index=3)]}), START, ("poll", 2)]
    for code in CODES:
        # ... and the recovery, past a rare read
        steps += [("exec", f"FAIL[{function!r}] = {code}"), ("poll", 2), ("exec", "FAIL.clear()"), ("poll", 11)]
    return steps


def cases() -> dict[str, list[Step]]:
    """Every golden case by name (the test ids)."""
    out: dict[str, list[Step]] = {}
    for name, scenario in SCENARIOS.items():
        out[f"scenario-{name}"] = [write_step(scenario), START, ("poll", 12)]  # past the rare queries' period
    out["changes"] = _changes()
    with_hopper = {"gpus": [*busy()["gpus"], scenarios.tensor_heavy_gpu(PIDS[30], index=4)]}
    for missing in MISSING_SETS:
        out["missing-" + "+".join(missing)] = [
            write_step(with_hopper),
            ("exec", f"MISSING.update({missing!r}); source = NvmlSource()"),
            ("poll", 12),
        ]
    for function in POLL_FUNCTIONS:
        out[f"errors-{function}"] = _errors_injected(function)
    return out


def run(steps: list[Step], nvml: FakeNvml, worker: PythonWorker) -> list[str]:
    """The case's polls, as reprs, run in `worker` (a fresh process with PRELUDE run)."""
    views: list[str] = []
    for kind, arg in steps:
        if kind == "write":
            nvml.write(arg)
        elif kind == "exec":
            worker(arg)
        else:
            views.extend(worker(f"result = polls({int(arg)})"))
    return views


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def load() -> tuple[dict[str, str], dict[str, list[str]]]:
    """(repr by digest, digests by case) as committed."""
    data = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    return data["reprs"], data["cases"]


def _machines() -> Iterator[Callable[[], tuple[FakeNvml, PythonWorker]]]:
    with tempfile.TemporaryDirectory(prefix="nvml-golden-") as tmp:
        lib_dir = build_library(Path(tmp) / "lib").parent
        made: list[FakeNvml] = []

        def machine() -> tuple[FakeNvml, PythonWorker]:
            scenario_dir = Path(tmp) / f"case{len(made)}"
            scenario_dir.mkdir()
            nvml = FakeNvml(lib_dir=lib_dir, scenario_path=scenario_dir / "scenario.txt")
            made.append(nvml)
            worker = nvml.worker()
            worker(PRELUDE)
            return nvml, worker

        try:
            yield machine
        finally:
            for nvml in made:
                nvml.close()


def regenerate() -> None:
    reprs: dict[str, str] = {}
    by_case: dict[str, list[str]] = {}
    for machine in _machines():
        for name, steps in cases().items():
            nvml, worker = machine()
            views = run(steps, nvml, worker)
            worker.close()
            by_case[name] = [digest(v) for v in views]
            for v in views:
                reprs[digest(v)] = v
    text = json.dumps({"reprs": reprs, "cases": by_case}, indent=0, sort_keys=True) + "\n"
    GOLDEN.write_bytes(gzip.compress(text.encode(), mtime=0))
    print(f"{GOLDEN}: {len(by_case)} cases, {sum(map(len, by_case.values()))} polls, {len(reprs)} distinct snapshots")


if __name__ == "__main__":
    if "--regenerate" not in sys.argv:
        raise SystemExit(__doc__)
    regenerate()
