"""NvmlSource polled against the simulated driver (tests/fakenvml), with NVML functions made missing
or failing, and what a snapshot must say of a scenario, worked out from the scenario alone.

- `Machine`: one simulated machine and one worker process that runs `NvmlSource` against it
  (nvidia-ml-py loads the driver once per process); `polls(n)` gives each poll's snapshot as a dict
  (`dataclasses.asdict`, less the time), and holds every one to `check_snapshot`.
- `missing(...)` / `fail(function, code)`: faults injected at nvidia-ml-py's symbol lookup, so
  whichever route the source takes to a fact meets them: a missing function answers
  FUNCTION_NOT_FOUND, a failing one the code given instead of running. A fact read through
  nvmlDeviceGetFieldValues meets the fault of the getter it stands for (FIELD_GETTER), so "reading
  power fails" means the same whichever call reads it.
- `expected_device(gpu)`: what NvmlSource must report for a scenario's GPU dict, from the scenario
  keys' documented defaults and meanings (tests/fakenvml/README.md) and NVML's units (nvml.h):
  MiB = bytes / 2^20, watts = mW / 1000, GPM percentages as fractions, MiB/s as bytes/s. Never from
  running the source.
- `check_snapshot(snapshot, scenario)`: what holds of every poll whatever the scenario, the
  faults or the poll's place in a run (see its docstring).
"""

from __future__ import annotations

from typing import Any

from sidecar.common.nvml_names import CLOCK_EVENT_REASONS, GPM_FIELDS, GPM_FIRST_SAMPLE
from sidecar.sources.nvml import GPM_UNSUPPORTED, MIG_NO_PROCESS_UTILIZATION
from tests.fakenvml import FakeNvml, PythonWorker

MIB = 1 << 20

# The worker's side (see the module docstring).
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
    maybe_failing.__name__ = name
    return maybe_failing

pynvml._nvmlGetFunctionPointer = _lookup

def view(snap):
    d = dataclasses.asdict(snap)
    d.pop("time")
    return d
"""

# NVML's wording of the codes the tests inject (nvmlErrorString; fakenvml.c answers the same).
REASONS = {
    3: "Not Supported",
    4: "Insufficient Permissions",
    6: "Not Found",
    7: "Insufficient Size",
    13: "Function Not Found",
    15: "GPU is lost",
    999: "Unknown Error",
}
NOT_SUPPORTED, NOT_FOUND, GPU_IS_LOST = 3, 6, 15

# The fields of a GpuInfo that measure something (None on a lost GPU), and the field_errors key that
# says why each is None when it is (the efficiency fields under their own names).
GPM_NAMES = tuple(name for name, _id, _scale in GPM_FIELDS)
REASON_KEY = {
    "mem_total_mib": "memory",
    "mem_used_mib": "memory",
    "util_gpu": "utilization",
    "util_mem": "utilization",
    **{
        name: name
        for name in (
            "compute_capability", "sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz",
            "clock_event_reasons", "power_w", "power_limit_w", "temperature_c", "pcie_link_gen",
            "pcie_link_gen_max", "pcie_link_width", "pcie_link_width_max", *GPM_NAMES, "mig_mode",
        )
    },
}  # fmt: skip
MEASUREMENTS = tuple(REASON_KEY)

# A scenario's `not_supported` query -> the GpuInfo fields it empties (README's key table).
NOT_SUPPORTED_FIELDS = {
    "utilization": ("util_gpu", "util_mem"),
    "memory": ("mem_total_mib", "mem_used_mib"),
    "temperature": ("temperature_c",),
    "power": ("power_w",),
    "power_limit": ("power_limit_w",),
    "pci": ("pci_bus_id",),
    "compute_capability": ("compute_capability",),
    "clock_event_reasons": ("clock_event_reasons",),
    "sm_clock": ("sm_clock_mhz",),
    "mem_clock": ("mem_clock_mhz",),
    "sm_clock_max": ("sm_clock_max_mhz",),
    "pcie_gen": ("pcie_link_gen",),
    "pcie_gen_max": ("pcie_link_gen_max",),
    "pcie_width": ("pcie_link_width",),
    "pcie_width_max": ("pcie_link_width_max",),
    "mig_mode": ("mig_mode",),
}
_TYPES = {"compute": ["compute"], "graphics": ["graphics"], "both": ["compute", "graphics"]}
_GPM_METRIC = {"sm_activity_fraction": "sm_util", "sm_occupancy_fraction": "sm_occupancy",
               "tensor_activity_fraction": "any_tensor_util", "dram_activity_fraction": "dram_bw_util",
               "pcie_tx_bytes_per_s": "pcie_tx_per_sec", "pcie_rx_bytes_per_s": "pcie_rx_per_sec",
               "nvlink_tx_bytes_per_s": "nvlink_total_tx_per_sec",
               "nvlink_rx_bytes_per_s": "nvlink_total_rx_per_sec"}  # fmt: skip


class Machine:
    """One simulated machine and the worker that polls it: write a scenario, start a source,
    poll. Every poll is held to check_snapshot against the scenario last written."""

    def __init__(self, fake_nvml: FakeNvml) -> None:
        self.nvml = fake_nvml
        self.worker: PythonWorker = fake_nvml.worker()
        self.worker(PRELUDE)
        self.scenario: dict[str, Any] = {}

    def write(self, scenario: dict[str, Any]) -> None:
        # A sample every microsecond: each poll gets fresh per-process samples, so whether a value
        # is held or 0 never depends on when a driver sample period ended.
        self.scenario = {**scenario, "sample_period_us": 1}
        self.nvml.write(self.scenario)

    def start(self, util_hold_s: float = 1.0) -> None:
        self.worker(f"source = NvmlSource(util_hold_s={util_hold_s!r})")

    def missing(self, *functions: str) -> None:
        self.worker(f"MISSING.update({list(functions)!r})")

    def fail(self, function: str, code: int) -> None:
        self.worker(f"FAIL[{function!r}] = {code}")

    def clear(self) -> None:
        self.worker("FAIL.clear()")

    def polls(self, n: int) -> list[dict[str, Any]]:
        got = self.worker(f"result = [view(source.poll()) for _ in range({int(n)})]")
        for snapshot in got:
            check_snapshot(snapshot, self.scenario)
        return got

    def poll(self) -> dict[str, Any]:
        return self.polls(1)[0]


# ---------------------------------------------------------------------------------------------
# What a scenario says a poll must report
# ---------------------------------------------------------------------------------------------
def _int_or(g: dict[str, Any], key: str, default: int) -> int:
    value = g.get(key)
    return default if value is None else int(value)


def _memory(g: dict[str, Any]) -> tuple[float, float]:
    """(total, used) in MiB as NVML reports them: v2's "used" leaves out the driver's reservation;
    without v2 (not_supported memory_v2) v1's "used" includes it."""
    total = g.get("memory_total_bytes", _int_or(g, "memory_total_mib", 81920) * MIB)
    used = g.get("memory_used_bytes", _int_or(g, "memory_used_mib", 0) * MIB)
    if "memory_v2" in (g.get("not_supported") or ()):
        used += _int_or(g, "memory_reserved_mib", 0) * MIB
    return total / MIB, used / MIB


def reasons(names_or_mask: Any) -> list[str]:
    """Clock event reasons as NvmlSource lists them: nvml_names.CLOCK_EVENT_REASONS' bit order."""
    if isinstance(names_or_mask, int):
        return [name for bit, name in CLOCK_EVENT_REASONS if names_or_mask & bit]
    given = set(names_or_mask or ())
    return [name for _bit, name in CLOCK_EVENT_REASONS if name in given]


def _gpm(g: dict[str, Any], first_poll: bool) -> tuple[dict[str, float | None], dict[str, str]]:
    """The GPM fields and their reasons: none before Hopper; none on a GPM GPU's first poll (one
    sample); else each metric's rate scaled (a share capped at 1), 0.0 when the scenario leaves it
    out, None when it says NOT_SUPPORTED."""
    gpm = g.get("gpm")
    if gpm is None:
        return dict.fromkeys(GPM_NAMES), dict.fromkeys(GPM_NAMES, GPM_UNSUPPORTED)
    if first_poll:
        return dict.fromkeys(GPM_NAMES), dict.fromkeys(GPM_NAMES, GPM_FIRST_SAMPLE)
    values: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    for name, _id, scale in GPM_FIELDS:
        rate = gpm.get(_GPM_METRIC[name], 0.0)
        if rate is None:
            values[name], errors[name] = None, REASONS[NOT_SUPPORTED]
        else:
            values[name] = min(rate * scale, 1.0) if name.endswith("_fraction") else rate * scale
    return values, errors


def _processes(g: dict[str, Any], mig_on: bool) -> dict[int, dict[str, Any]]:
    """Each listed process by pid: its memory (None: NVML's "not available"), its types, its
    utilisation (0 without a sample: NOT_FOUND means idle; a sample over 100 % is dropped; None on
    MIG, which has none) and, on MIG, its instance and the MIG device it runs in."""
    if "processes" in (g.get("not_supported") or ()):
        return {}
    mig_at = {m.get("gpu_instance_id", k + 1): k for k, m in enumerate(g.get("mig") or ())}
    no_util = mig_on or "process_utilization" in (g.get("not_supported") or ())
    out = {}
    for p in g.get("processes") or ():
        used = p.get("used_mib", 0)
        sm, mem = p.get("sm_util", 0), p.get("mem_util", 0)
        if sm > 100 or mem > 100:
            sm, mem = 0, 0
        gi = p.get("gpu_instance_id") if mig_on else None
        ci = p.get("compute_instance_id") if mig_on else None
        out[p["pid"]] = {
            "pid": p["pid"],
            "used_mib": None if used is None else float(used),
            "sm_util": None if no_util else sm,
            "mem_util": None if no_util else mem,
            "types": _TYPES[p.get("type", "compute")],
            "gpu_instance_id": gi,
            "compute_instance_id": ci,
            "mig_index": mig_at.get(gi) if mig_on else None,
        }
    return out


def _mig_devices(g: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "index": k,
            "uuid": m.get("uuid"),
            "gpu_instance_id": m.get("gpu_instance_id", k + 1),
            "compute_instance_id": m.get("compute_instance_id", 0),
            "mem_used_mib": float(m.get("memory_used_mib", 0)),
            "mem_total_mib": float(m.get("memory_total_mib", 9856)),
        }
        for k, m in enumerate(g.get("mig") or ())
    ]


class EnergyCounter:
    """What NvmlSource reads of fakenvml's energy counter: it grows with the time between queries,
    so the expected value is any whole number of millijoules from the scenario's start on."""

    def __init__(self, start_mj: int) -> None:
        self.start_mj = start_mj

    def __eq__(self, other: object) -> bool:
        return type(other) is int and other >= self.start_mj

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<an energy counter from {self.start_mj} mJ>"


def expected_energy(g: dict[str, Any]) -> EnergyCounter | None:
    """None where the GPU has no energy counter (before Volta; not_supported energy)."""
    cc = g.get("compute_capability", (8, 0))
    if cc[0] < 7 or "energy" in (g.get("not_supported") or ()):
        return None
    return EnergyCounter(_int_or(g, "energy_mj", 0))


def expected_device(g: dict[str, Any], index: int, first_poll: bool = False) -> dict[str, Any]:
    """What NvmlSource reports for the scenario GPU ``g`` at ``index`` (a GPU it has polled before
    unless ``first_poll``): every GpuInfo field, processes as a dict by pid, and field_errors."""
    if g.get("lost"):
        raise ValueError("a lost GPU's report depends on what was seen before: see check_snapshot")
    total, used = _memory(g)
    mig_on = bool(g.get("mig_mode", bool(g.get("mig"))))
    cc = g.get("compute_capability", (8, 0))
    gpm, errors = _gpm(g, first_poll)
    d: dict[str, Any] = {
        "index": index,
        "uuid": g["uuid"],
        "name": g.get("name", "NVIDIA A100-SXM4-80GB"),
        "pci_bus_id": g["pci_bus_id"],
        "mem_total_mib": total,
        "mem_used_mib": used,
        "util_gpu": None if mig_on else _int_or(g, "util_gpu", 0),
        "util_mem": None if mig_on else _int_or(g, "util_mem", 0),
        "lost": False,
        "processes": _processes(g, mig_on),
        "compute_capability": f"{cc[0]}.{cc[1]}",
        "sm_clock_mhz": _int_or(g, "sm_clock_mhz", 1410),
        "sm_clock_max_mhz": _int_or(g, "sm_clock_max_mhz", 1410),
        "mem_clock_mhz": _int_or(g, "mem_clock_mhz", 1593),
        "clock_event_reasons": reasons(g.get("clock_event_reasons") or 0),
        "power_w": _int_or(g, "power_mw", 60000) / 1000,
        "power_limit_w": _int_or(g, "power_limit_mw", 400000) / 1000,
        "temperature_c": float(_int_or(g, "temperature_c", 35)),
        "pcie_link_gen": _int_or(g, "pcie_gen", 4),
        "pcie_link_gen_max": _int_or(g, "pcie_gen_max", 4),
        "pcie_link_width": _int_or(g, "pcie_width", 16),
        "pcie_link_width_max": _int_or(g, "pcie_width_max", 16),
        **gpm,
        "mig_mode": mig_on,
        "mig_devices": _mig_devices(g) if mig_on else [],
        "energy_mj": expected_energy(g),
    }
    if mig_on:  # NVML: neither device nor per-process utilisation with MIG on
        errors["utilization"] = REASONS[NOT_SUPPORTED]
        errors["process_utilization"] = MIG_NO_PROCESS_UTILIZATION
    for query in g.get("not_supported") or ():
        if query == "process_utilization" and d["processes"]:  # asked only about listed processes
            errors["process_utilization"] = REASONS[NOT_SUPPORTED]
        elif query == "processes":
            errors["processes"] = REASONS[NOT_SUPPORTED]
        elif query == "pci" and not first_poll:
            d["pci_bus_id"] = None  # the identity is read when a GPU is first seen: so is its reason
            continue
        for name in NOT_SUPPORTED_FIELDS.get(query, ()):
            d[name] = None
            errors[REASON_KEY.get(name, name)] = REASONS[NOT_SUPPORTED]
    d["field_errors"] = errors
    return d


def by_pid(device: dict[str, Any]) -> dict[str, Any]:
    """A reported device with its processes as a dict by pid (the order NVML lists them in is the
    driver's, not a promise)."""
    return {**device, "processes": {p["pid"]: p for p in device["processes"]}}


# ---------------------------------------------------------------------------------------------
# What every poll holds
# ---------------------------------------------------------------------------------------------
def check_snapshot(s: dict[str, Any], scenario: dict[str, Any]) -> None:
    """What holds of every poll of every scenario, whatever was injected or seen before:

    - not ok: no devices and a one-line reason; ok: one device per scenario GPU, at its index, and
      the scenario's driver and CUDA versions ("12.4" for 12040);
    - a lost device (every scenario-lost GPU is), or one whose identity could not be read, has no
      measurement, no process, no MIG device, and says why in field_errors;
    - every measurement is None or the scenario's value in the source's units; every None one of a
      device not lost has its reason in field_errors; every field_errors reason is non-empty text;
    - processes: each pid once, each one the scenario lists on that GPU, with its memory, types
      among the scenario's, utilisation 0..100 (None only with its reason); all of them when the
      process lists did not fail;
    - call_errors never holds NOT_SUPPORTED (an answer, not a failure); each names its GPU.
    """
    gpus = scenario.get("gpus") or []
    if not s["ok"]:
        assert s["devices"] == [] and s["error"] and "\n" not in s["error"], s
        return
    assert s["error"] is None
    assert [d["index"] for d in s["devices"]] == list(range(len(gpus)))
    assert s["driver"] == scenario.get("driver_version", "550.54.15")
    version = scenario.get("cuda_driver_version", 12040)
    assert s["cuda_driver"] == f"{version // 1000}.{version % 1000 // 10}"
    for value in s["call_errors"].values():
        assert not value.endswith(REASONS[NOT_SUPPORTED]), s["call_errors"]
        where = value.split(":", 1)[0]
        assert where.startswith("GPU ") and int(where[4:]) < len(gpus), s["call_errors"]
    for d, g in zip(s["devices"], gpus, strict=True):
        _check_device(d, g)


def _check_device(d: dict[str, Any], g: dict[str, Any]) -> None:
    errors = d["field_errors"]
    assert all(isinstance(v, str) and v for v in errors.values()), errors
    if g.get("lost"):
        assert d["lost"], d
    if d["lost"] or "uuid" in errors or "handle" in errors:  # lost, or which GPU it is unknown
        assert all(d[name] is None for name in MEASUREMENTS), d
        assert d["processes"] == [] and d["mig_devices"] == [] and errors, d
        return
    assert d["uuid"] is None or d["uuid"].startswith("GPU-"), d["uuid"]
    want = expected_device(g, d["index"])
    for name in MEASUREMENTS:
        if d[name] is None:
            assert REASON_KEY[name] in errors, (name, errors)
        elif name == "mem_used_mib":  # v2's, or v1's (counting the driver's reservation) after v2 failed
            v1 = _memory({**g, "not_supported": ["memory_v2"]})[1]
            assert d[name] in (want[name], v1), (name, d[name], want[name], v1)
        elif name in GPM_NAMES:
            assert d[name] == want[name] and d[name] >= 0.0, (name, d[name], want[name])
        else:
            # A value read every RARE_EVERY_POLLS polls may still be the last scenario's: it must
            # be a value some scenario could give, of the field's type at least.
            assert d[name] == want[name] or name in _RARE, (name, d[name], want[name])
    _check_processes(d, g, want)


_RARE = ("sm_clock_max_mhz", "pcie_link_gen_max", "pcie_link_width_max", "pcie_link_width", "pcie_link_gen",
         "compute_capability", "mig_mode")  # fmt: skip


def _check_processes(d: dict[str, Any], g: dict[str, Any], want: dict[str, Any]) -> None:
    listed = [p["pid"] for p in d["processes"]]
    assert len(listed) == len(set(listed)), listed  # no process twice
    scenario = {p["pid"]: p for p in g.get("processes") or ()}
    errors = d["field_errors"]
    for p in d["processes"]:
        assert p["pid"] in scenario, (p["pid"], sorted(scenario))
        expected = want["processes"].get(p["pid"])
        if expected is None:  # the scenario's processes, its process lists answered NOT_SUPPORTED
            continue
        assert p["used_mib"] == expected["used_mib"], (p, expected)
        assert set(p["types"]) <= set(_TYPES[scenario[p["pid"]].get("type", "compute")]), p
        for key in ("sm_util", "mem_util"):
            if p[key] is None:
                assert "process_utilization" in errors, (p, errors)
            else:
                assert 0 <= p[key] <= 100 and p[key] in (0, expected[key]), (p, expected)
    if "processes" not in errors:
        assert set(listed) == set(want["processes"]), (listed, sorted(want["processes"]))
