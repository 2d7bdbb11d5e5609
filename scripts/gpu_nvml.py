"""The NVML package against a real driver, for scripts/gpu_check.py: the fields the poll reads through
one nvmlDeviceGetFieldValues call answer on this GPU as their single getters do, and the snapshot
is the same whether the batch is used or not (the simulated driver's tests hold the same rule; this
is where the real driver is asked)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict

import pynvml

from sidecar.sources.nvml import BATCHED_FIELDS, NvmlSource
from sidecar.sources.nvml.direct import FieldValues

Check = Callable[[str, bool | None, str], None]

# Power is averaged by the driver over about a second and read a moment apart: within this much.
POWER_TOLERANCE_W = 15.0
# Snapshot fields that move between two polls on a live GPU; every other field must be equal.
MOVING_FIELDS = {
    "util_gpu", "util_mem", "mem_used_mib", "power_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz",
    "sm_activity_fraction", "sm_occupancy_fraction", "tensor_activity_fraction", "dram_activity_fraction",
    "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
    "clock_event_reasons", "processes",
}


def _getter_values(handle) -> dict[str, float]:
    return {
        "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
        "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
        "temperature_c": float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
    }


def field_values(check: Check) -> None:
    """Each batched field's answer code and value beside its getter's, on every GPU."""
    pynvml.nvmlInit()
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            batch = FieldValues(field_id for _name, field_id in BATCHED_FIELDS)
            answers = batch.read(handle)
            single = _getter_values(handle)
            for name, field_id in BATCHED_FIELDS:
                code, value = answers[field_id]
                if code != 0:  # not offered: the getter is used, which is what the poll does
                    check(f"GPU {index} field {field_id} ({name})", None, f"nvmlReturn {code}: read with its getter")
                    continue
                got = value / 1000 if name.startswith("power") else float(math.floor(value + 0.5))
                want = single[name]
                ok = abs(got - want) <= (POWER_TOLERANCE_W if name == "power_w" else 0.0 if name == "power_limit_w" else 1.0)
                check(f"GPU {index} field {field_id} ({name})", ok, f"batch {got:g}, getter {want:g}")
    finally:
        pynvml.nvmlShutdown()


def _steady(snapshot) -> list[dict]:
    out = []
    for d in snapshot.devices:
        row = {k: v for k, v in asdict(d).items() if k not in MOVING_FIELDS}
        out.append(row)
    return out


def batch_or_getters(check: Check) -> None:
    """Two sources polled in turns, one with the batch and one with it switched off: the same
    steady fields and the same errors, and both read the moving ones."""
    with NvmlSource() as batched, NvmlSource() as plain:
        batched.poll(), plain.poll()
        for state in plain._devices:  # the poll then reads every batched field with its getter
            state.efficiency.field_values = False
        cpu = {"batched": [], "getters": []}
        for i in range(20):
            order = ((batched, "batched"), (plain, "getters")) if i % 2 == 0 else ((plain, "getters"), (batched, "batched"))
            snaps = {}
            for src, name in order:
                started = time.process_time()
                snaps[name] = src.poll()
                cpu[name].append(time.process_time() - started)
            time.sleep(0.1)
        a, b = snaps["batched"], snaps["getters"]
    same = _steady(a) == _steady(b)
    check("nvml batch vs getters: steady fields", same, "equal" if same else "differ (see the rows above)")
    if not same:
        for x, y in zip(_steady(a), _steady(b), strict=False):
            print({k: (x[k], y.get(k)) for k in x if x[k] != y.get(k)})
    read = all(d.power_w is not None and d.temperature_c is not None for d in a.devices)
    check("nvml batch: power and temperature read", read, f"{len(a.devices)} GPU(s)")
    med = {k: sorted(v)[len(v) // 2] * 1000 for k, v in cpu.items()}
    check("nvml poll CPU, batch vs getters", None,
          f"median {med['batched']:.3f} ms vs {med['getters']:.3f} ms over 20 polls in turns")


STEPS = (field_values, batch_or_getters)
