"""The efficiency fields (issue 15) through the real nvidia-ml-py and NvmlSource, against fakenvml.

NVML loads once per process, so every poll runs in a child (`fake_nvml.run` / `fake_nvml.worker`).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import time

import pynvml
import pytest

from sidecar.common.nvml_names import GPM_FIELDS
from sidecar.sources.nvml import (
    GPM_FIRST_SAMPLE,
    GPM_INVALID_VALUE,
    GPM_UNSUPPORTED,
    MAX_MIG_DEVICES,
    MIG_NO_PROCESS_UTILIZATION,
)
from tests.fakenvml import DEFAULT_FIELD_ERRORS, gpu, nvml_header, scenarios

GPM_NAMES = [name for name, _id, _scale in GPM_FIELDS]

PRELUDE = """
import dataclasses, json, time
import pynvml
from sidecar.sources.nvml import NvmlSource

def devices(snapshot):
    return [dataclasses.asdict(d) for d in snapshot.devices]
"""

# not_supported name -> the GpuInfo field it empties.
QUERY_FIELD = {
    "clock_event_reasons": "clock_event_reasons",
    "sm_clock": "sm_clock_mhz",
    "mem_clock": "mem_clock_mhz",
    "sm_clock_max": "sm_clock_max_mhz",
    "pcie_gen": "pcie_link_gen",
    "pcie_gen_max": "pcie_link_gen_max",
    "pcie_width": "pcie_link_width",
    "pcie_width_max": "pcie_link_width_max",
    "power": "power_w",
    "power_limit": "power_limit_w",
    "temperature": "temperature_c",
    "compute_capability": "compute_capability",
    "mig_mode": "mig_mode",
}


def poll_twice(fake_nvml, scenario: dict, gap_s: float = 0.0) -> tuple[dict, dict]:
    """Two polls of one NvmlSource (GPM needs the second); each as {snapshot fields, devices}."""
    fake_nvml.write(scenario)
    return tuple(
        fake_nvml.run(
            PRELUDE
            + f"""
src = NvmlSource()
out = []
for _ in range(2):
    s = src.poll()
    out.append({{"call_errors": s.call_errors, "devices": devices(s)}})
    time.sleep({gap_s})
src.close()
print(json.dumps(out))
"""
        )
    )


# --------------------------------------------------------------------------- layouts


def test_gpm_layouts_agree_between_header_binding_and_reader():
    """nvidia-ml-py's ctypes mirror, nvml.h (fakenvml.c static_asserts the same numbers) and the
    offsets the NVML source reads the metrics at."""
    from sidecar.sources import nvml as eff

    header = nvml_header().read_text()
    header_max = int(re.search(r"NVML_GPM_METRIC_MAX\s*=\s*(\d+)", header).group(1))
    assert pynvml.NVML_GPM_METRIC_MAX == header_max
    assert ctypes.sizeof(pynvml.c_nvmlGpmMetric_t) == eff.GPM_METRIC_BYTES == 40
    assert pynvml.c_nvmlGpmMetric_t.value.offset == 8 and pynvml.c_nvmlGpmMetric_t.nvmlReturn.offset == 4
    assert pynvml.c_nvmlGpmMetricsGet_t.metrics.offset == eff.GPM_HEADER_BYTES == 24
    assert ctypes.sizeof(pynvml.c_nvmlGpmMetricsGet_t) == 24 + 40 * header_max
    assert eff.GPM_ENTRY.size == 16
    assert pynvml.NVML_GPM_METRICS_GET_VERSION == 1 and pynvml.NVML_GPM_SUPPORT_VERSION == 1
    for name, metric_id, _scale in GPM_FIELDS:  # nvml_names' ids are the header's
        assert re.search(rf"NVML_GPM_METRIC_\w+\s*=\s*{metric_id},", header), name


def test_the_return_codes_and_field_ids_are_the_header_s():
    """The NVML source's return codes (_lib) and batched field ids (efficiency) carry nvml.h's
    values: NVML_SUCCESS, NVML_ERROR_<name>, NVML_FI_DEV_<name>."""
    from sidecar.sources.nvml import _lib, efficiency

    header = nvml_header().read_text()

    def defined(name: str) -> int:
        found = re.search(rf"\b{name}\s*=\s*(-?\d+)\s*,|#define\s+{name}\s+(-?\d+)\b", header)
        assert found, name
        return int(found.group(1) or found.group(2))

    codes = [name for name in vars(_lib) if name.isupper() and isinstance(getattr(_lib, name), int)]
    codes = [name for name in codes if name not in ("MIB", "OTHER_EXCEPTION", "NO_INSTANCE_ID")]
    assert {"SUCCESS", "NOT_SUPPORTED", "INVALID_ARGUMENT", "FUNCTION_NOT_FOUND", "GPU_IS_LOST"} <= set(codes)
    for name in codes:
        assert getattr(_lib, name) == defined("NVML_SUCCESS" if name == "SUCCESS" else f"NVML_ERROR_{name}"), name
    assert defined("NVML_ERROR_FUNCTION_NOT_FOUND") == 13  # the control: the lookup reads the header
    for name in ("POWER_AVERAGE", "POWER_CURRENT_LIMIT", "GPU_TEMP"):
        assert getattr(efficiency, name) == defined(f"NVML_FI_DEV_{name}"), name


def test_the_layout_static_asserts_bite(tmp_path):
    """The static_asserts in fakenvml.c are real checks: a wrong one stops the build."""
    src = tmp_path / "wrong.c"
    src.write_text(
        '#include <assert.h>\n#include "nvml.h"\nstatic_assert(sizeof(nvmlGpmMetric_t) == 48, "x");\n'
    )
    cmd = ["gcc", "-std=c11", "-c", "-I", str(nvml_header().parent), "-o", str(tmp_path / "o.o"), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode != 0 and "static assertion failed" in proc.stderr
    src.write_text(src.read_text().replace("== 48", "== 40"))
    assert subprocess.run(cmd, capture_output=True).returncode == 0


# --------------------------------------------------------------------------- values


def test_throttled_hopper_every_field(fake_nvml, sleepers):
    (pid,) = sleepers(1)
    first, second = poll_twice(fake_nvml, scenarios.throttled(pid))
    (d,) = second["devices"]
    assert second["call_errors"] == {}
    assert d["compute_capability"] == "9.0"
    assert (d["sm_clock_mhz"], d["sm_clock_max_mhz"], d["mem_clock_mhz"]) == (1035, 1980, 2619)
    assert d["clock_event_reasons"] == ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert (d["power_w"], d["power_limit_w"], d["temperature_c"]) == (690.0, 700.0, 88.0)
    assert (d["pcie_link_gen"], d["pcie_link_gen_max"], d["pcie_link_width"], d["pcie_link_width_max"]) == (
        5,
        5,
        16,
        16,
    )
    assert d["sm_activity_fraction"] == pytest.approx(0.60)
    assert d["sm_occupancy_fraction"] == pytest.approx(0.30)
    assert d["tensor_activity_fraction"] == pytest.approx(0.40)
    assert d["dram_activity_fraction"] == pytest.approx(0.35)
    assert d["pcie_tx_bytes_per_s"] == 0.0 and d["nvlink_rx_bytes_per_s"] == 0.0
    assert (d["mig_mode"], d["mig_devices"]) == (False, [])
    assert d["field_errors"] == {}  # a Hopper reports everything, once it has two GPM samples
    # The first poll: everything but GPM, which has one sample only.
    (d1,) = first["devices"]
    assert d1["field_errors"] == {name: GPM_FIRST_SAMPLE for name in GPM_NAMES}
    assert all(d1[name] is None for name in GPM_NAMES)
    assert d1["sm_clock_mhz"] == 1035 and d1["clock_event_reasons"] == d["clock_event_reasons"]


def test_power_capped_alone_degraded_link_and_rates(fake_nvml, sleepers):
    a, b = sleepers(2)
    gpus = [
        scenarios.power_capped_gpu(a, 0),
        scenarios.degraded_link_gpu(b, 1),
        scenarios.hopper_gpu(
            2, gpm={"pcie_tx_per_sec": 1024, "pcie_rx_per_sec": 2.5, "nvlink_total_tx_per_sec": 100}
        ),
        gpu(3, clock_event_reasons=0),  # an int mask works too: no reason active
    ]
    _, second = poll_twice(fake_nvml, {"gpus": gpus})
    capped, link, rates, calm = second["devices"]
    assert capped["clock_event_reasons"] == ["sw_power_cap"]
    assert (capped["power_w"], capped["power_limit_w"], capped["sm_clock_mhz"]) == (700.0, 700.0, 1600)
    assert (
        link["pcie_link_gen"],
        link["pcie_link_gen_max"],
        link["pcie_link_width"],
        link["pcie_link_width_max"],
    ) == (
        1,
        4,
        4,
        16,
    )
    assert link["field_errors"] == DEFAULT_FIELD_ERRORS  # an A100: no GPM, nothing else missing
    assert link["compute_capability"] == "8.0"
    # MiB/s -> bytes/s
    assert rates["pcie_tx_bytes_per_s"] == 1024 * 1048576.0
    assert rates["pcie_rx_bytes_per_s"] == 2.5 * 1048576.0
    assert rates["nvlink_tx_bytes_per_s"] == 100 * 1048576.0
    assert calm["clock_event_reasons"] == []  # empty: read, and nothing active (not None)


def test_busy_but_hollow_and_tensor_heavy_tell_apart(fake_nvml, sleepers):
    a, b = sleepers(2)
    gpus = [scenarios.busy_but_hollow_gpu(a, 0), scenarios.tensor_heavy_gpu(b, 1)]
    _, second = poll_twice(fake_nvml, {"gpus": gpus})
    hollow, heavy = second["devices"]
    assert hollow["util_gpu"] == 95 and heavy["util_gpu"] == 98  # NVML's util cannot tell them apart
    assert hollow["sm_activity_fraction"] == pytest.approx(0.10)
    assert hollow["sm_occupancy_fraction"] == pytest.approx(0.05)
    assert hollow["tensor_activity_fraction"] == 0.0
    assert heavy["tensor_activity_fraction"] == pytest.approx(0.80)
    assert heavy["sm_activity_fraction"] == pytest.approx(0.92)


def test_impossible_gpm_values_are_refused_and_shares_capped(fake_nvml):
    """A driver answering NaN, infinity or a negative rate: None with the reason (a NaN made the
    status document invalid JSON); a share over 100 % is capped at 1."""
    gpm = {
        **scenarios.HOPPER_IDLE_GPM,
        "sm_util": float("nan"),
        "sm_occupancy": float("inf"),
        "any_tensor_util": -5.0,
        "dram_bw_util": 101.5,
        "pcie_tx_per_sec": 1e308,  # finite, but not once scaled to bytes/s
        "pcie_rx_per_sec": 10.0,
    }
    _, second = poll_twice(fake_nvml, {"gpus": [scenarios.hopper_gpu(0, gpm=gpm)]})
    (d,) = second["devices"]
    for name in (
        "sm_activity_fraction",
        "sm_occupancy_fraction",
        "tensor_activity_fraction",
        "pcie_tx_bytes_per_s",
    ):
        assert d[name] is None, name
        assert d["field_errors"][name].startswith(GPM_INVALID_VALUE), name
    assert d["dram_activity_fraction"] == 1.0
    assert d["pcie_rx_bytes_per_s"] == 10.0 * 1048576


# --------------------------------------------------------------------------- failures, one at a time


def test_each_query_fails_alone(fake_nvml, sleepers):
    """GPU i lacks exactly query i: its field is None with NVML's reason; every other field reads."""
    (pid,) = sleepers(1)
    names = list(QUERY_FIELD)
    gpus = [
        scenarios.hopper_gpu(i, not_supported=[q], processes=[{"pid": pid, "sm_util": 5}])
        for i, q in enumerate(names)
    ]
    _, second = poll_twice(fake_nvml, {"gpus": gpus})
    assert second["call_errors"] == {}  # NOT_SUPPORTED is an answer, not a failed call
    for missing, d in zip(names, second["devices"], strict=True):
        field = QUERY_FIELD[missing]
        assert d[field] is None, missing
        assert d["field_errors"] == {field: "Not Supported"}, missing
        for other in QUERY_FIELD.values():
            if other != field:
                assert d[other] is not None, (missing, other)
        assert d["sm_activity_fraction"] is not None and d["processes"][0]["sm_util"] == 5


def test_the_energy_counter_grows_by_power_times_time_and_is_asked_no_more_where_unsupported(fake_nvml):
    """nvmlDeviceGetTotalEnergyConsumption: mJ; GPU 0 (Hopper, 700 W) from 5e9 mJ grows by about
    power x the time between the two polls; GPU 1 (cc 6.0, before Volta) and GPU 2 (not_supported)
    answer NOT_SUPPORTED: None, never a field error nor a failed call."""
    gpus = [
        scenarios.hopper_gpu(0, power_mw=700_000, energy_mj=5_000_000_000),
        gpu(1, compute_capability=(6, 0)),
        scenarios.hopper_gpu(2, not_supported=["energy"]),
    ]
    fake_nvml.write({"gpus": gpus})
    out = fake_nvml.run(
        PRELUDE
        + """
src = NvmlSource()
polls = []
for _ in range(2):
    t = time.monotonic()
    s = src.poll()
    polls.append((t, s.call_errors, devices(s)))
    time.sleep(0.2)
asked = [(pynvml.nvmlDeviceGetHandleByIndex(i), i) for i in (1, 2)]
codes = []
for h, _ in asked:
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        codes.append(0)
    except pynvml.NVMLError as e:
        codes.append(e.value)
src.close()
print(json.dumps({"polls": polls, "codes": codes}))
"""
    )
    (t0, errors0, first), (t1, errors1, second) = out["polls"]
    assert errors0 == errors1 == {}
    assert first[0]["energy_mj"] == 5_000_000_000
    grown_mj = second[0]["energy_mj"] - first[0]["energy_mj"]
    # 700 W for the time between the two queries: at least the 0.2 s slept, less than the polls' gap + 0.5 s
    assert 700 * 1000 * 0.2 <= grown_mj <= 700 * 1000 * (t1 - t0 + 0.5)
    for d in (*first[1:], *second[1:]):
        assert d["energy_mj"] is None and "energy_mj" not in d["field_errors"]
    assert out["codes"] == [pynvml.NVML_ERROR_NOT_SUPPORTED] * 2


def test_gpm_per_metric_failure_and_unsupported_gpu(fake_nvml):
    gpus = [
        scenarios.hopper_gpu(
            0, gpm={"sm_util": 33, "nvlink_total_rx_per_sec": None}
        ),  # a PCIe card: no NVLink
        gpu(1),  # A100: isSupportedDevice = 0
    ]
    first, second = poll_twice(fake_nvml, {"gpus": gpus})
    hopper, ampere = second["devices"]
    assert hopper["sm_activity_fraction"] == pytest.approx(0.33)
    assert hopper["nvlink_rx_bytes_per_s"] is None
    assert hopper["field_errors"] == {"nvlink_rx_bytes_per_s": "Not Supported"}
    assert hopper["nvlink_tx_bytes_per_s"] == 0.0
    for d in (first["devices"][1], ampere):
        assert all(d[name] is None for name in GPM_NAMES)
        assert {k: d["field_errors"][k] for k in GPM_NAMES} == {name: GPM_UNSUPPORTED for name in GPM_NAMES}


def test_throttle_reasons_fallback_on_an_older_driver(fake_nvml, sleepers):
    (pid,) = sleepers(1)
    fake_nvml.write(scenarios.throttle_reasons_only(pid))
    # The fake: the new name is "missing", the old one answers.
    direct = fake_nvml.run(
        """
        import json, pynvml as N
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        try:
            N.nvmlDeviceGetCurrentClocksEventReasons(h)
            new = "answered"
        except N.NVMLError_FunctionNotFound:
            new = "function not found"
        print(json.dumps([new, N.nvmlDeviceGetCurrentClocksThrottleReasons(h)]))
        """
    )
    assert direct == ["function not found", 0x4]
    w = fake_nvml.worker()
    w(PRELUDE + "src = NvmlSource()")
    for _ in range(2):
        got = w(
            "s = src.poll(); d = s.devices[0]; "
            "result = [d.clock_event_reasons, d.field_errors.get('clock_event_reasons'), s.call_errors, "
            "src._devices[0].efficiency.events_v2]"
        )
        assert got == [["sw_power_cap"], None, {}, False]
    # Remembered per driver: the new name is not tried again. The source calls it through its
    # function pointer (sources/nvml/direct.py), looked up by name until found: counted there.
    w(
        "names = []\n"
        "_lookup = pynvml._nvmlGetFunctionPointer\n"
        "pynvml._nvmlGetFunctionPointer = lambda name: (names.append(name), _lookup(name))[1]\n"
        "src.poll(); src.poll()"
    )
    assert w("result = names.count('nvmlDeviceGetCurrentClocksEventReasons')") == 0
    assert w("result = names.count('nvmlDeviceGetCurrentClocksThrottleReasons')") == 2  # the wrapper's
    w("src.close()")


# --------------------------------------------------------------------------- caching, identity, loss


def test_rare_queries_are_read_every_tenth_poll(fake_nvml):
    from sidecar.sources.nvml import RARE_EVERY_POLLS

    fake_nvml.write({"gpus": [gpu(0, pcie_width=16)]})
    w = fake_nvml.worker()
    w(PRELUDE + "src = NvmlSource()")
    assert w("result = src.poll().devices[0].pcie_link_width") == 16
    fake_nvml.write({"gpus": [gpu(0, pcie_width=8, power_mw=123_000)]})
    seen = [
        w("d = src.poll().devices[0]; result = [d.pcie_link_width, d.power_w]")
        for _ in range(RARE_EVERY_POLLS)
    ]
    # Power is read every poll; the link width on the 10th poll after the last read.
    assert all(power == 123.0 for _width, power in seen)
    assert [width for width, _power in seen] == [16] * (RARE_EVERY_POLLS - 1) + [8]
    w("src.close()")


def test_a_link_below_its_maximum_is_read_afresh_every_poll(fake_nvml):
    """An idle GPU lowers its link (Gen1) and raises it as work starts: a low reading is never kept
    for ten polls, or pcie-degraded would judge a busy GPU by its idle link."""
    fake_nvml.write({"gpus": [gpu(0, pcie_gen=1, pcie_gen_max=4)]})
    w = fake_nvml.worker()
    w(PRELUDE + "src = NvmlSource()")
    assert w("result = src.poll().devices[0].pcie_link_gen") == 1
    fake_nvml.write({"gpus": [gpu(0, pcie_gen=4, pcie_gen_max=4, util_gpu=90)]})
    assert w("result = src.poll().devices[0].pcie_link_gen") == 4  # the next poll, not the 10th
    fake_nvml.write({"gpus": [gpu(0, pcie_gen=2, pcie_gen_max=4)]})
    # At its maximum, the link is read every tenth poll again.
    assert w("result = src.poll().devices[0].pcie_link_gen") == 4
    w("src.close()")


def test_gpm_samples_follow_the_gpu_identity_and_are_freed(fake_nvml):
    fake_nvml.write({"gpus": [scenarios.hopper_gpu(0, gpm={"sm_util": 50})]})
    w = fake_nvml.worker()
    w(
        PRELUDE + "freed = []\n"
        "_free = pynvml.nvmlGpmSampleFree\n"
        "pynvml.nvmlGpmSampleFree = lambda s: (freed.append(1), _free(s))[1]\n"
        "src = NvmlSource()\n"
        "def gpm():\n"
        "    d = src.poll().devices[0]\n"
        "    return [d.sm_activity_fraction, d.field_errors.get('sm_activity_fraction')]\n"
    )
    assert w("result = gpm()") == [None, GPM_FIRST_SAMPLE]
    assert w("result = gpm()") == [0.5, None]
    assert w("result = gpm()") == [0.5, None]
    # Another GPU at index 0 (a reset with a different board): samples freed, a new first sample.
    fake_nvml.write({"gpus": [scenarios.hopper_gpu(0, uuid="GPU-ffffffff-0000-4000-8000-000000000000")]})
    w("src._devices[0].polls_since_uuid = 99")  # due for its identity check now, not in 10 polls
    assert w("result = [gpm(), len(freed)]") == [[None, GPM_FIRST_SAMPLE], 2]
    assert w("result = gpm()") == [0.0, None]
    w("src.close()")
    assert w("result = len(freed)") == 4


def test_a_lost_gpu_has_no_efficiency_values(fake_nvml):
    fake_nvml.write({"gpus": [scenarios.hopper_gpu(0), gpu(1)]})
    w = fake_nvml.worker()
    w(PRELUDE + "src = NvmlSource(); src.poll()")
    fake_nvml.write({"gpus": [scenarios.hopper_gpu(0, lost=True), gpu(1)]})
    lost, fine = w("result = devices(src.poll())")
    assert lost["lost"] is True
    for name in [*QUERY_FIELD.values(), *GPM_NAMES]:
        assert lost[name] is None, name
    assert lost["mig_devices"] == []
    assert fine["power_w"] == 60.0 and fine["lost"] is False
    w("src.close()")


# --------------------------------------------------------------------------- MIG


def _mig_view(d: dict) -> dict:
    return {
        "util_gpu": d["util_gpu"],
        "mig_mode": d["mig_mode"],
        "mig_devices": d["mig_devices"],
        "processes": sorted(
            (
                p["pid"],
                p["used_mib"],
                p["gpu_instance_id"],
                p["compute_instance_id"],
                p["mig_index"],
                p["sm_util"],
            )
            for p in d["processes"]
        ),
        "errors": {k: v for k, v in d["field_errors"].items() if k not in DEFAULT_FIELD_ERRORS},
    }


@pytest.mark.parametrize("unprivileged", [False, True], ids=["root", "unprivileged"])
def test_mig_devices_and_process_mapping(fake_nvml, sleepers, unprivileged):
    a, b = sleepers(2)
    _, second = poll_twice(fake_nvml, scenarios.mig((a, b), mig_unprivileged=unprivileged))
    (d,) = second["devices"]
    # Root reads the parent's aggregate list; an unprivileged caller gets NO_PERMISSION there and
    # the sidecar reads each MIG device's list instead: the same answer either way.
    assert second["call_errors"] == {}
    assert _mig_view(d) == {
        "util_gpu": None,  # NVML: not supported with MIG on
        "mig_mode": True,
        "mig_devices": [
            {
                "index": 0,
                "uuid": "MIG-00000000-aaaa-4000-8000-000000000001",
                "gpu_instance_id": 1,
                "compute_instance_id": 0,
                "mem_used_mib": 12000.0,
                "mem_total_mib": 40192.0,
            },
            {
                "index": 1,
                "uuid": "MIG-00000000-aaaa-4000-8000-000000000002",
                "gpu_instance_id": 2,
                "compute_instance_id": 0,
                "mem_used_mib": 8000.0,
                "mem_total_mib": 40192.0,
            },
        ],
        "processes": sorted([(a, 12000.0, 1, 0, 0, None), (b, 8000.0, 2, 0, 1, None)]),
        "errors": {"utilization": "Not Supported", "process_utilization": MIG_NO_PROCESS_UTILIZATION},
    }


def test_a_driver_claiming_billions_of_mig_devices_costs_a_bounded_poll(fake_nvml, sleepers):
    """nvmlDeviceGetMaxMigDeviceCount is the bound of a loop of NVML calls: a driver answering
    0xFFFFFFFF must not make a poll call billions of times. The first MAX_MIG_DEVICES indices are
    looked at, the devices among them found, and the error says why the rest were not."""
    a, b = sleepers(2)
    started = time.monotonic()
    _, second = poll_twice(fake_nvml, scenarios.mig((a, b), mig_max_devices=0xFFFFFFFF))
    assert time.monotonic() - started < 60
    (d,) = second["devices"]
    assert [m["gpu_instance_id"] for m in d["mig_devices"]] == [1, 2]
    assert sorted(p["mig_index"] for p in d["processes"]) == [0, 1]
    assert d["field_errors"]["mig_devices"] == (
        f"NVML reported {0xFFFFFFFF} MIG devices at most; looked at the first {MAX_MIG_DEVICES}"
    )


def test_mig_handles_in_the_fake(fake_nvml, sleepers):
    (a,) = sleepers(1)
    fake_nvml.write(scenarios.mig((a, None), mig_unprivileged=True))
    got = fake_nvml.run(
        """
        import json, pynvml as N
        def code(fn, *args):
            try:
                fn(*args)
                return 0
            except N.NVMLError as e:
                return e.value
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        m0 = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
        out = {
            "mode": list(N.nvmlDeviceGetMigMode(h)),
            "max": N.nvmlDeviceGetMaxMigDeviceCount(h),
            "gap": code(N.nvmlDeviceGetMigDeviceHandleByIndex, h, 2),
            "beyond": code(N.nvmlDeviceGetMigDeviceHandleByIndex, h, 7),
            "is_mig": [N.nvmlDeviceIsMigDeviceHandle(h).value, N.nvmlDeviceIsMigDeviceHandle(m0).value],
            "parent_back": N.nvmlDeviceGetUUID(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m0)),
            "gi_on_parent": code(N.nvmlDeviceGetGpuInstanceId, h),
            "parent_procs": code(N.nvmlDeviceGetComputeRunningProcesses, h),
            "mig_procs": [[p.pid, p.gpuInstanceId, p.computeInstanceId] for p in N.nvmlDeviceGetComputeRunningProcesses(m0)],
            "proc_util": code(N.nvmlDeviceGetProcessUtilization, h, 0),
            "on_mig_handle": code(N.nvmlDeviceGetPowerUsage, m0),
        }
        print(json.dumps(out))
        """
    )
    assert got == {
        "mode": [1, 1],
        "max": 7,
        "gap": pynvml.NVML_ERROR_NOT_FOUND,
        "beyond": pynvml.NVML_ERROR_INVALID_ARGUMENT,
        "is_mig": [0, 1],
        "parent_back": "GPU-00000000-1111-4222-8333-000000000000",
        "gi_on_parent": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "parent_procs": pynvml.NVML_ERROR_NO_PERMISSION,
        "mig_procs": [[a, 1, 0]],
        "proc_util": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "on_mig_handle": pynvml.NVML_ERROR_INVALID_ARGUMENT,
    }


def test_gpm_api_checks_in_the_fake(fake_nvml):
    fake_nvml.write({"gpus": [scenarios.hopper_gpu(0, gpm={"sm_util": 12.5}), gpu(1)]})
    got = fake_nvml.run(
        """
        import json, pynvml as N
        def code(fn, *args):
            try:
                fn(*args)
                return 0
            except N.NVMLError as e:
                return e.value
        N.nvmlInit()
        h, a100 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        s1, s2 = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
        req = N.c_nvmlGpmMetricsGet_t()
        req.version = N.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = 2
        req.metrics[0].metricId = N.NVML_GPM_METRIC_SM_UTIL
        req.metrics[1].metricId = N.NVML_GPM_METRIC_MAX
        req.sample1, req.sample2 = s1, s2
        out = {"support": [N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice,
                           N.nvmlGpmQueryDeviceSupport(a100).isSupportedDevice]}
        out["unfilled"] = code(N.nvmlGpmMetricsGet, req)
        out["a100_sample"] = code(N.nvmlGpmSampleGet, a100, s1)
        N.nvmlGpmSampleGet(h, s1)
        N.nvmlGpmSampleGet(h, s2)
        N.nvmlGpmMetricsGet(req)
        out["metrics"] = [[req.metrics[i].nvmlReturn, req.metrics[i].value] for i in range(2)]
        req.version = 2
        out["version"] = code(N.nvmlGpmMetricsGet, req)
        N.nvmlGpmSampleFree(s1)
        N.nvmlGpmSampleFree(s2)
        print(json.dumps(out))
        """
    )
    assert got == {
        "support": [1, 0],
        "unfilled": pynvml.NVML_ERROR_INVALID_ARGUMENT,
        "a100_sample": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "metrics": [[0, 12.5], [pynvml.NVML_ERROR_INVALID_ARGUMENT, 0.0]],
        "version": pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    }


def test_scenario_writer_rejects_mistakes():
    from tests.fakenvml import render_scenario

    with pytest.raises(ValueError, match="clock event reason"):
        render_scenario({"gpus": [gpu(0, clock_event_reasons=["hw_slow"])]})
    with pytest.raises(ValueError, match="GPM metric"):
        render_scenario({"gpus": [gpu(0, gpm={"sm_utilisation": 5})]})
    with pytest.raises(ValueError, match="mig"):
        render_scenario({"gpus": [gpu(0, mig=[{"gi": 1}])]})
    text = render_scenario({"gpus": [gpu(0, clock_event_reasons=["sw_power_cap", "hw_slowdown"])]})
    assert "clock_event_reasons 12" in text.splitlines()
