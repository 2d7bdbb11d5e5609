"""NvmlSource when the driver lacks functions or its calls fail, against the simulated driver.

- A driver without a function (FUNCTION_NOT_FOUND, for good): the source falls back where NVML
  has an older call for the same fact (v1 memory, the _v2 process lists, the throttle reasons, the
  single getters for the field-values batch), else that fact is None with the reason.
- Every NVML function a poll calls failing, with each of six codes, then answering again: while it
  fails, exactly the facts it reads are None (or, with GPU_IS_LOST, the device may be reported
  lost), with NVML's wording of the code in field_errors; nothing else changes; once it answers
  again the poll reports what it reported before the fault.

What each function reads is written out by hand in `during`; every poll is also held to
check_snapshot's invariants (tests/helpers/nvml_polls.py).
"""

from __future__ import annotations

import copy

import pytest

from sidecar.sources.nvml import GPM_UNSUPPORTED, RARE_EVERY_POLLS, UUID_CHECK_EVERY_POLLS
from tests.fakenvml import gpu, scenarios
from tests.helpers.nvml_polls import (
    GPM_NAMES,
    GPU_IS_LOST,
    MEASUREMENTS,
    NOT_FOUND,
    NOT_SUPPORTED,
    REASON_KEY,
    REASONS,
    Machine,
    by_pid,
    expected_device,
)

PIDS = list(range(300000, 300040))


def machine_gpus() -> list[dict]:
    """Three A100s (five kinds of process; 25 processes; idle, its link below its maximum, two clock
    event reasons) and a Hopper with GPM running one process."""
    procs = [
        {"pid": PIDS[0], "used_mib": 15000, "sm_util": 80, "mem_util": 30},
        {"pid": PIDS[1], "used_mib": 300, "sm_util": 3, "mem_util": 1, "type": "graphics"},
        {"pid": PIDS[2], "used_mib": 5000, "type": "both"},
        {"pid": PIDS[3], "used_mib": None, "sm_util": 12},
        {"pid": PIDS[4], "used_mib": 1, "sm_util": 250, "mem_util": 5},  # a driver's garbage sample
    ]
    return [
        gpu(0, util_gpu=88, util_mem=35, processes=procs, memory_used_mib=20480, memory_reserved_mib=512),
        gpu(1, processes=[{"pid": p, "used_mib": 100 + p % 7, "sm_util": p % 90} for p in PIDS[5:30]]),
        gpu(2, pcie_gen=1, pcie_width=4, clock_event_reasons=["sw_power_cap", "gpu_idle"]),
        scenarios.tensor_heavy_gpu(PIDS[30], index=3),
    ]


def expected(gpus: list[dict], first_poll: bool = False) -> list[dict]:
    return [expected_device(g, i, first_poll) for i, g in enumerate(gpus)]


def reported(snapshot: dict) -> list[dict]:
    return [by_pid(d) for d in snapshot["devices"]]


# ---------------------------------------------------------------------------------------------
# Functions the driver lacks
# ---------------------------------------------------------------------------------------------
# call_errors are keyed by nvidia-ml-py's name of the call, which for these is not the symbol's.
CALL_ERROR_KEY = {
    "nvmlDeviceGetCount_v2": "nvmlDeviceGetCount",
    "nvmlDeviceGetMemoryInfo_v2": "nvmlDeviceGetMemoryInfo",
}
FNF = REASONS[13]  # "Function Not Found"
V3_LISTS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3")


def _none(d: dict, *fields: str, reason: str = FNF) -> None:
    for name in fields:
        d[name] = None
        d["field_errors"][REASON_KEY[name]] = reason


def _lacking_v2_memory(want: list[dict], gpus: list[dict]) -> None:
    # As on a driver before 515: v1 memory, whose "used" counts the driver's reservation.
    for d, g in zip(want, gpus):
        d["mem_used_mib"] = expected_device({**g, "not_supported": ["memory_v2"]}, d["index"])["mem_used_mib"]
    assert want[0]["mem_used_mib"] == 20480 + 512


def _lacking_getters(want: list[dict], _gpus: list[dict]) -> None:
    for d in want:
        _none(d, "power_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz")


def _lacking_utilisation(want: list[dict], _gpus: list[dict]) -> None:
    for d in want:
        _none(d, "util_gpu", "util_mem")
        for p in d["processes"].values():
            p["sm_util"] = p["mem_util"] = None
        if d["processes"]:
            d["field_errors"]["process_utilization"] = FNF
        _none(d, *GPM_NAMES, reason=f"{GPM_UNSUPPORTED}: {FNF}")


def _lacking_power_limit(want: list[dict], _gpus: list[dict]) -> None:
    for d in want:
        _none(d, "power_limit_w")


def _same(_want: list[dict], _gpus: list[dict]) -> None:
    pass


# name -> (the functions the driver lacks, what that changes, the functions named in call_errors)
LACKING = {
    "memory v2": (["nvmlDeviceGetMemoryInfo_v2"], _lacking_v2_memory, set()),
    "v3 process lists": (list(V3_LISTS), _same, set()),
    "clock event reasons": (["nvmlDeviceGetCurrentClocksEventReasons"], _same, set()),
    "power, temperature, clocks": (
        ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo"],
        _lacking_getters,
        {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo"},
    ),
    "GPM, utilisation": (
        ["nvmlGpmQueryDeviceSupport", "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetUtilizationRates"],
        _lacking_utilisation,
        {"nvmlDeviceGetProcessUtilization", "nvmlDeviceGetUtilizationRates"},
    ),
    "field values": (["nvmlDeviceGetFieldValues"], _same, set()),
    "field values, power limit": (
        ["nvmlDeviceGetFieldValues", "nvmlDeviceGetEnforcedPowerLimit"],
        _lacking_power_limit,
        {"nvmlDeviceGetEnforcedPowerLimit"},
    ),
}


@pytest.mark.parametrize("name", list(LACKING))
def test_a_driver_without_a_function(fake_nvml, name):
    functions, change, named = LACKING[name]
    gpus = machine_gpus()
    m = Machine(fake_nvml)
    m.write({"gpus": gpus})
    m.missing(*functions)
    m.start()
    for n, s in enumerate(m.polls(RARE_EVERY_POLLS + 2)):
        want = expected(gpus, first_poll=n == 0)
        change(want, gpus)
        assert reported(s) == want, (name, n)
        # The facts lost are failures at every poll; a missing function that has a stand-in, or that
        # only says the GPU has no GPM, at most at the first (when the source finds it missing).
        found_missing = {CALL_ERROR_KEY.get(f, f) for f in functions} if n == 0 else set()
        assert named <= set(s["call_errors"]) <= named | found_missing, s["call_errors"]
        assert all(v.endswith(FNF) for v in s["call_errors"].values())


# ---------------------------------------------------------------------------------------------
# Calls that fail, then answer again
# ---------------------------------------------------------------------------------------------
# 4 NO_PERMISSION, 7 INSUFFICIENT_SIZE, 999 an UNKNOWN error
CODES = [NOT_SUPPORTED, 4, NOT_FOUND, 7, GPU_IS_LOST, 999]
UNUSABLE = "unusable"  # the device's identity could not be read: no measurement at all
# Not asked while the preferred call answers (v2 memory, the new clock-event-reasons name, the v3
# lists), or whose failure the getters make up for (the field-values batch).
UNASKED = {
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetFieldValues",
}
# Asked every RARE_EVERY_POLLS polls (or, identity, every UUID_CHECK_EVERY_POLLS), the link's
# current figures every poll only while below the maximum: a fault shows within that many polls.
RARE = {
    "nvmlDeviceGetUUID": ("uuid",),
    "nvmlDeviceGetMaxClockInfo": ("sm_clock_max_mhz",),
    "nvmlDeviceGetCurrPcieLinkGeneration": ("pcie_link_gen",),
    "nvmlDeviceGetCurrPcieLinkWidth": ("pcie_link_width",),
    "nvmlDeviceGetMaxPcieLinkGeneration": ("pcie_link_gen_max",),
    "nvmlDeviceGetMaxPcieLinkWidth": ("pcie_link_width_max",),
    "nvmlDeviceGetMigMode": ("mig_mode",),
}
# Asked every poll: the fields each one reads.
EVERY_POLL = {
    "nvmlDeviceGetUtilizationRates": ("util_gpu", "util_mem"),
    "nvmlDeviceGetClockInfo": ("sm_clock_mhz", "mem_clock_mhz"),
    "nvmlDeviceGetPowerUsage": ("power_w",),
    "nvmlDeviceGetEnforcedPowerLimit": ("power_limit_w",),
    "nvmlDeviceGetTemperature": ("temperature_c",),
    "nvmlDeviceGetCurrentClocksEventReasons": ("clock_event_reasons",),
    "nvmlGpmSampleGet": GPM_NAMES,  # on a GPU with GPM
    "nvmlGpmMetricsGet": GPM_NAMES,
    "nvmlDeviceGetMemoryInfo_v2": (),  # v1 stands in
    "nvmlDeviceGetComputeRunningProcesses_v3": (),  # the processes: see `during`
    "nvmlDeviceGetGraphicsRunningProcesses_v3": (),
    "nvmlDeviceGetProcessUtilization": (),
    "nvmlDeviceGetCount_v2": (),  # no device at all
}
FUNCTIONS = sorted([*UNASKED, *RARE, *EVERY_POLL])


def during(function: str, code: int, g: dict, index: int) -> dict | str:
    """What device ``index`` (scenario GPU ``g``) reports while ``function`` answers ``code``
    (GPU_IS_LOST aside: the device may then be reported lost instead, see the test)."""
    want = expected_device(g, index)
    reason, errors = REASONS[code], want["field_errors"]
    if function in UNASKED:
        return want
    if function == "nvmlDeviceGetUUID":
        return UNUSABLE
    if function == "nvmlDeviceGetMemoryInfo_v2":  # v1: "used" counts the driver's reservation
        want["mem_used_mib"] = expected_device({**g, "not_supported": ["memory_v2"]}, index)["mem_used_mib"]
    elif function in V3_LISTS:  # only the other list's processes, with only its type
        kind = "compute" if "Compute" in function else "graphics"
        other = "graphics" if kind == "compute" else "compute"
        want["processes"] = {
            pid: {**p, "types": [other]} for pid, p in want["processes"].items() if other in p["types"]
        }
        errors["processes"] = reason
    elif function == "nvmlDeviceGetProcessUtilization":
        if code != NOT_FOUND:  # NOT_FOUND: no new sample, the last one holds
            for p in want["processes"].values():
                p["sm_util"] = p["mem_util"] = None
            if want["processes"]:
                errors["process_utilization"] = reason
    elif function.startswith("nvmlGpm"):
        if g.get("gpm") is not None:
            _none(want, *GPM_NAMES, reason=reason)
    else:
        _none(want, *(RARE.get(function) or EVERY_POLL[function]), reason=reason)
    return want


def _lost_or_unusable(d: dict, before: dict, lost: bool) -> None:
    """A device whose identity (or, GPU_IS_LOST, any query) failed: the identity seen before, no
    measurement, no process."""
    assert d["lost"] is lost
    assert (d["uuid"], d["name"], d["pci_bus_id"]) == (before["uuid"], before["name"], before["pci_bus_id"])
    assert all(d[name] is None for name in MEASUREMENTS) and d["processes"] == {} and d["mig_devices"] == []


def check_during(function: str, code: int, s: dict, gpus: list[dict], before: list[dict]) -> None:
    if function == "nvmlDeviceGetCount_v2":
        assert not s["ok"] and s["error"].startswith("NVML cannot count devices: "), s
        assert s["error"] == f"NVML cannot count devices: {REASONS[code]}"
        return
    for d, g, old in zip(reported(s), gpus, before, strict=True):
        want = during(function, code, g, d["index"])
        if code == GPU_IS_LOST and d["lost"]:
            _lost_or_unusable(d, old, lost=True)  # the source may take one lost answer as the GPU lost
        elif want == UNUSABLE:
            _lost_or_unusable(d, old, lost=False)
        else:
            assert d == want, (function, code, d["index"])


def check_call_errors(function: str, code: int, faulty: list[dict]) -> None:
    """call_errors: each poll's failed calls. A failure other than NOT_SUPPORTED (an answer, not a
    failure) is there at the polls that asked the function: every one, or, a rarely asked one,
    at least one of the window's."""
    asked = function not in UNASKED and not (
        function == "nvmlDeviceGetProcessUtilization" and code == NOT_FOUND
    )
    if code == NOT_SUPPORTED or not asked:  # NOT_FOUND: no new utilisation sample, not a failure
        assert all(s["call_errors"] == {} for s in faulty), [s["call_errors"] for s in faulty]
        return
    key = CALL_ERROR_KEY.get(function, function)
    named = [s["call_errors"].get(key) for s in faulty]
    assert all(named) if function not in RARE else any(named), (function, code, named)
    assert all(v.endswith(REASONS[code]) for v in named if v), named
    assert all(set(s["call_errors"]) <= {key} for s in faulty), [s["call_errors"] for s in faulty]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_failing_call_costs_exactly_its_facts_until_it_answers_again(fake_nvml, function):
    gpus = machine_gpus()
    m = Machine(fake_nvml)
    m.write({"gpus": gpus})
    m.start(util_hold_s=60.0)  # a sample holds through the test: NOT_FOUND keeps the last one
    _, healthy = m.polls(2)
    assert reported(healthy) == expected(gpus) and healthy["call_errors"] == {}
    before = expected(gpus)  # what it reported, its energy counter (which grows) as any value from its start
    # Long enough for a rarely asked function to be asked; its answer is kept until asked again.
    window = max(RARE_EVERY_POLLS, UUID_CHECK_EVERY_POLLS) + 1 if function in RARE else 2
    for code in CODES:
        m.fail(function, code)
        faulty = m.polls(window)
        for s in faulty if function not in RARE else faulty[-1:]:
            check_during(function, code, s, gpus, before)
        check_call_errors(function, code, faulty)
        m.clear()
        *_, recovered = m.polls(RARE_EVERY_POLLS + 1)
        assert reported(recovered) == copy.deepcopy(before), (function, code)
        assert recovered["call_errors"] == {}


def test_a_device_count_not_supported_says_so(fake_nvml):
    m = Machine(fake_nvml)
    m.write({"gpus": [gpu(0)]})
    m.start()
    m.fail("nvmlDeviceGetCount_v2", NOT_SUPPORTED)
    assert m.poll()["error"] == "NVML cannot count devices: Not Supported"
