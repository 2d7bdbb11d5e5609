"""NvmlSource over the simulated driver's scenarios (tests/fakenvml): busy GPUs, the efficiency
scenarios, MIG (as root and not), an older driver, NOT_SUPPORTED everywhere, a lost GPU, no driver,
and a machine that changes under a running source (a GPU swapped at its index, a pid back idle,
devices appearing, a GPU lost and back).

Every poll is held to check_snapshot's invariants (tests/helpers/nvml_polls.py) and, field by
field, to what the scenario says it must report (expected_device: worked out from the scenario's
keys and NVML's units, never from running the source); each scenario's telling figures are also
written out by hand below. Faults (missing functions, failing calls) are tests/unit/test_nvml_failing_calls.py's.
"""

from __future__ import annotations

import pytest

from sidecar.sources.nvml import GPM_FIRST_SAMPLE, RARE_EVERY_POLLS, UUID_CHECK_EVERY_POLLS
from tests.fakenvml import DEFAULT_FIELD_ERRORS, gpu, scenarios
from tests.helpers.nvml_polls import GPM_NAMES, MEASUREMENTS, Machine, by_pid, expected_device

# NVML reports the pids the driver lists; NvmlSource never looks them up, so they need not exist.
PIDS = list(range(300000, 300040))
POLLS = RARE_EVERY_POLLS + 2  # past the period of the rarely read queries
ALL_QUERIES = [
    "utilization", "memory", "temperature", "power", "power_limit", "processes", "process_utilization",
    "pci", "compute_capability", "clock_event_reasons", "sm_clock", "mem_clock", "sm_clock_max",
    "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "mig_mode",
]  # fmt: skip


def busy() -> dict:
    """Four A100s: one with five kinds of process, one with 25 processes, one idle with a slow link
    and two clock event reasons, one whose driver lacks the v2 memory query."""
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

# The telling figures of each efficiency scenario, as tests/fakenvml/README.md's builder table
# states them (GPU 0, from the second poll on: GPM needs two samples).
FIGURES = {
    "throttled": {
        "util_gpu": 99, "sm_clock_mhz": 1035, "sm_clock_max_mhz": 1980, "temperature_c": 88.0,
        "power_w": 690.0, "power_limit_w": 700.0, "compute_capability": "9.0",
        "clock_event_reasons": ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"],
        "sm_activity_fraction": 0.60, "sm_occupancy_fraction": 0.30, "tensor_activity_fraction": 0.40,
        "dram_activity_fraction": 0.35, "mem_used_mib": 60000.0,
    },
    "power_capped": {
        "util_gpu": 100, "clock_event_reasons": ["sw_power_cap"], "power_w": 700.0, "power_limit_w": 700.0,
        "sm_clock_mhz": 1600, "sm_clock_max_mhz": 1980, "temperature_c": 70.0, "sm_activity_fraction": 0.85,
        "tensor_activity_fraction": 0.60,
    },
    "degraded_link": {
        "util_gpu": 40, "pcie_link_gen": 1, "pcie_link_gen_max": 4, "pcie_link_width": 4,
        "pcie_link_width_max": 16, "sm_activity_fraction": None, "compute_capability": "8.0",
    },
    "busy_but_hollow": {
        "util_gpu": 95, "sm_activity_fraction": 0.10, "sm_occupancy_fraction": 0.05,
        "tensor_activity_fraction": 0.0, "dram_activity_fraction": 0.03, "clock_event_reasons": [],
        "sm_clock_mhz": 1980,
    },
    "tensor_heavy": {
        "util_gpu": 98, "sm_activity_fraction": 0.92, "sm_occupancy_fraction": 0.45,
        "tensor_activity_fraction": 0.80, "dram_activity_fraction": 0.55, "power_w": 600.0,
        "clock_event_reasons": [],
    },
    "mig": {"util_gpu": None, "mig_mode": True, "mem_used_mib": 20000.0},
    "mig_unprivileged": {"util_gpu": None, "mig_mode": True},
    "throttle_reasons_only": {"clock_event_reasons": ["sw_power_cap"], "power_w": 700.0},
}  # fmt: skip
# The processes of each efficiency scenario: (pid, MiB, SM %, MIG device index).
FIGURES_PROCESSES = {
    "throttled": [(PIDS[0], 60000.0, 99, None)],
    "power_capped": [(PIDS[0], 70000.0, 100, None)],
    "degraded_link": [(PIDS[0], 20000.0, 40, None)],
    "busy_but_hollow": [(PIDS[0], 4000.0, 95, None)],
    "tensor_heavy": [(PIDS[0], 50000.0, 98, None)],
    "mig": [(PIDS[0], 12000.0, None, 0), (PIDS[1], 8000.0, None, 1)],
    "mig_unprivileged": [(PIDS[0], 12000.0, None, 0), (PIDS[1], 8000.0, None, 1)],
    "throttle_reasons_only": [(PIDS[0], 70000.0, 100, None)],
}


def run(fake_nvml, scenario: dict, polls: int = POLLS) -> list[dict]:
    m = Machine(fake_nvml)
    m.write(scenario)
    m.start()
    return m.polls(polls)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_poll_reports_what_the_scenario_says(fake_nvml, name):
    scenario = SCENARIOS[name]
    snapshots = run(fake_nvml, scenario)
    for n, s in enumerate(snapshots):
        if "init_error" in scenario:
            assert not s["ok"] and s["error"].startswith("NVIDIA driver not loaded"), s
            continue
        for d, g in zip(s["devices"], scenario["gpus"], strict=True):
            if not g.get("lost"):
                assert by_pid(d) == expected_device(g, d["index"], first_poll=n == 0), (name, n)
        if not any(g.get("lost") for g in scenario["gpus"]):
            assert s["call_errors"] == {}, (name, n, s["call_errors"])


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_the_efficiency_scenarios_figures(fake_nvml, name):
    first, *_, last = run(fake_nvml, SCENARIOS[name], polls=3)
    d = last["devices"][0]
    for field, value in FIGURES[name].items():
        assert d[field] == pytest.approx(value), field
    processes = sorted((p["pid"], p["used_mib"], p["sm_util"], p["mig_index"]) for p in d["processes"])
    assert processes == FIGURES_PROCESSES[name]
    if "gpm" in SCENARIOS[name]["gpus"][0]:  # a Hopper: GPM from its second poll on
        assert {k: first["devices"][0]["field_errors"][k] for k in GPM_NAMES} == dict.fromkeys(
            GPM_NAMES, GPM_FIRST_SAMPLE
        )
        assert all(d[k] is not None for k in GPM_NAMES)


def test_the_busy_machines_figures(fake_nvml):
    *_, s = run(fake_nvml, SCENARIOS["busy"], polls=2)
    d0, d1, d2, d3 = s["devices"]
    assert (d0["util_gpu"], d0["util_mem"], d0["mem_total_mib"]) == (88, 35, 81920.0)
    assert d0["mem_used_mib"] == 20480.0  # v2: the driver's 512 MiB reservation left out
    assert {p["pid"]: (p["used_mib"], p["sm_util"], p["mem_util"], p["types"]) for p in d0["processes"]} == {
        PIDS[0]: (15000.0, 80, 30, ["compute"]),
        PIDS[1]: (300.0, 3, 1, ["graphics"]),
        PIDS[2]: (5000.0, 0, 0, ["compute", "graphics"]),  # listed by both queries: one row, no sample
        PIDS[3]: (None, 12, 0, ["compute"]),  # memory "not available"
        PIDS[4]: (1.0, 0, 0, ["compute"]),  # its 250 % sample dropped
    }
    assert sorted(p["pid"] for p in d1["processes"]) == PIDS[5:30]
    assert sum(p["used_mib"] for p in d1["processes"]) == sum(100 + p % 7 for p in PIDS[5:30])
    assert (
        d2["pcie_link_gen"],
        d2["pcie_link_gen_max"],
        d2["pcie_link_width"],
        d2["pcie_link_width_max"],
    ) == (1, 4, 4, 16)
    assert d2["clock_event_reasons"] == ["gpu_idle", "sw_power_cap"] and d2["processes"] == []
    # v1 memory (no v2 on this driver), exact bytes: 80 GiB, and 123456789 B as MiB to the bit.
    assert (d3["mem_total_mib"], d3["mem_used_mib"]) == (81920.0, 123456789 / 1048576)
    assert [d["field_errors"] for d in (d0, d1, d2, d3)] == [DEFAULT_FIELD_ERRORS] * 4
    assert [(d["uuid"], d["power_w"], d["temperature_c"]) for d in s["devices"]] == [
        (gpu(i)["uuid"], 60.0, 35.0) for i in range(4)
    ]


def test_a_gpu_that_supports_nothing(fake_nvml):
    first, s = run(fake_nvml, SCENARIOS["not_supported"], polls=2)
    d0, d1 = s["devices"]
    for name in MEASUREMENTS:
        if name not in GPM_NAMES:
            assert d0[name] is None, name
    assert d0["pci_bus_id"] is None and d0["processes"] == []
    assert {k: v for k, v in d0["field_errors"].items() if k not in GPM_NAMES} == {
        k: "Not Supported"
        for k in ("memory", "utilization", "temperature_c", "power_w", "power_limit_w", "processes",
                  "compute_capability", "clock_event_reasons", "sm_clock_mhz", "mem_clock_mhz",
                  "sm_clock_max_mhz", "pcie_link_gen", "pcie_link_gen_max", "pcie_link_width",
                  "pcie_link_width_max", "mig_mode")
    }  # fmt: skip
    assert s["call_errors"] == {}  # NOT_SUPPORTED is an answer, not a failed call
    assert first["devices"][0]["field_errors"]["pci_bus_id"] == "Not Supported"  # asked when first seen
    assert d0["uuid"] == gpu(0)["uuid"] and d0["lost"] is False
    assert d1["util_gpu"] == 0 and d1["power_w"] == 60.0 and d1["field_errors"] == DEFAULT_FIELD_ERRORS


def test_a_gpu_lost_from_the_start(fake_nvml):
    for s in run(fake_nvml, SCENARIOS["lost"], polls=3):
        d0, d1 = s["devices"]
        assert [(p["pid"], p["sm_util"]) for p in d0["processes"]] == [(PIDS[0], 5)]
        assert d1["lost"] is True and (d1["uuid"], d1["name"]) == (None, None)  # never seen
        assert "GPU is lost" in d1["field_errors"].values()
        assert s["call_errors"] and set(s["call_errors"].values()) == {"GPU 1: GPU is lost"}


def test_a_machine_that_changes_under_a_running_source(fake_nvml):
    m = Machine(fake_nvml)
    m.write(busy())
    m.start()
    before = m.polls(3)[-1]["devices"]
    assert before[1]["uuid"] == gpu(1)["uuid"] and PIDS[0] in {p["pid"] for p in before[0]["processes"]}

    # Another board at index 1 (a driver reset), and the first process gone from GPU 0.
    swapped = busy()
    swapped["gpus"][1] = gpu(
        1, uuid="GPU-swapped", name="NVIDIA L4", processes=[{"pid": PIDS[6], "sm_util": 3}]
    )
    swapped["gpus"][0]["processes"] = swapped["gpus"][0]["processes"][1:]
    m.write(swapped)
    seen = m.polls(UUID_CHECK_EVERY_POLLS + 2)
    for s in seen:  # what the GPU shows is read at once; which GPU it is, at its next identity check
        d0, d1 = s["devices"][:2]
        assert PIDS[0] not in {p["pid"] for p in d0["processes"]}
        assert [(p["pid"], p["sm_util"]) for p in d1["processes"]] == [(PIDS[6], 3)]
        assert (d1["uuid"], d1["name"]) in {
            (gpu(1)["uuid"], "NVIDIA A100-SXM4-80GB"),
            ("GPU-swapped", "NVIDIA L4"),
        }
    assert (seen[-1]["devices"][1]["uuid"], seen[-1]["devices"][1]["name"]) == ("GPU-swapped", "NVIDIA L4")

    # The first pid back on GPU 0, idle (no sample), within the hold of its old 80 %: it must not
    # inherit the old process's numbers.
    back = {"gpus": [dict(swapped["gpus"][0], processes=[{"pid": PIDS[0]}]), *swapped["gpus"][1:]]}
    m.write(back)
    for s in m.polls(2):
        assert [(p["pid"], p["sm_util"], p["used_mib"]) for p in s["devices"][0]["processes"]] == [
            (PIDS[0], 0, 0.0)
        ]

    # Two devices appear: one lost, never seen (no identity), one new.
    m.write({"gpus": [*swapped["gpus"], gpu(4, lost=True), gpu(5)]})
    for s in m.polls(3):
        assert len(s["devices"]) == 6
        lost, new = s["devices"][4:]
        assert lost["lost"] and lost["uuid"] is None
        assert by_pid(new) == expected_device(gpu(5), 5)
        assert not any(d["lost"] for d in s["devices"][:4])

    # GPU 0 lost (and the two new ones gone): the others read on.
    m.write({"gpus": [gpu(0, lost=True), *swapped["gpus"][1:]]})
    for s in m.polls(2):
        assert [d["lost"] for d in s["devices"]] == [True, False, False, False]
        assert s["devices"][1]["uuid"] == "GPU-swapped"

    # GPU 0 back: every device as the scenario says, once the rare queries are read again.
    m.write(swapped)
    *_, s = m.polls(POLLS)
    for d, g in zip(s["devices"], swapped["gpus"], strict=True):
        assert by_pid(d) == expected_device(g, d["index"])
    assert s["call_errors"] == {}
