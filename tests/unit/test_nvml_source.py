"""NvmlSource against the simulated driver, through the real nvidia-ml-py.

The driver library is loaded once per process, so NvmlSource runs in a child (`fake_nvml.run`
for one-shot checks, `fake_nvml.worker()` when the test changes the scenario between polls).
"""

from __future__ import annotations

import ctypes.util

import pynvml
import pytest

from sidecar.sources import nvml as nvml_mod
from tests.fakenvml import DEFAULT_FIELD_ERRORS, gpu

NO_MIG = {"gpu_instance_id": None, "compute_instance_id": None, "mig_index": None}

PRELUDE = """
import dataclasses, json
import pynvml
from sidecar.sources.nvml import NvmlSource, nvml_summary

def snap(s):
    return dataclasses.asdict(s)

def by_index(s):
    return {d.index: d for d in s.devices}

# Counts real init attempts, to see the backoff.
init_attempts = []
_real_init = pynvml.nvmlInit
def _counting_init():
    init_attempts.append(1)
    return _real_init()
pynvml.nvmlInit = _counting_init

class Clock:  # the backoff's clock, moved by hand
    t = 1000.0
    def __call__(self):
        return self.t
clock = Clock()
"""


def worker(fake_nvml):
    w = fake_nvml.worker()
    w(PRELUDE)
    return w


def test_values(fake_nvml, sleepers):
    compute, graphics, both, unknown_mem = sleepers(4)
    fake_nvml.write(
        {
            "driver_version": "550.54.15",
            "cuda_driver_version": 12040,
            "gpus": [
                gpu(
                    0,
                    name="NVIDIA A100-SXM4-80GB",
                    pci_bus_id="00000000:3B:00.0",
                    memory_total_mib=81920,
                    memory_used_mib=20480,
                    memory_reserved_mib=512,
                    util_gpu=88,
                    util_mem=35,
                    temperature_c=66,
                    power_mw=250500,
                    processes=[
                        {"pid": compute, "used_mib": 15000, "sm_util": 80, "mem_util": 30},
                        {"pid": graphics, "used_mib": 300, "sm_util": 3, "mem_util": 1, "type": "graphics"},
                        {"pid": both, "used_mib": 5000, "type": "both"},  # holds memory, computes nothing
                    ],
                ),
                gpu(1, name="NVIDIA L4", processes=[{"pid": unknown_mem, "used_mib": None, "sm_util": 12}]),
            ],
        }
    )
    s = fake_nvml.run(PRELUDE + "src = NvmlSource(); print(json.dumps(snap(src.poll()))); src.close()")
    assert s["ok"] is True and s["error"] is None
    assert (s["driver"], s["cuda_driver"]) == ("550.54.15", "12.4")
    assert s["call_errors"] == {}
    d0, d1 = s["devices"]
    assert d0["index"] == 0 and d0["uuid"] == gpu(0)["uuid"]
    assert (d0["name"], d0["pci_bus_id"]) == ("NVIDIA A100-SXM4-80GB", "00000000:3B:00.0")
    # v2 memory: "used" without the driver's reservation, like nvidia-smi.
    assert (d0["mem_total_mib"], d0["mem_used_mib"]) == (81920, 20480)
    assert (d0["util_gpu"], d0["util_mem"]) == (88, 35)
    # Temperature and power (issue 15's efficiency fields): watts from NVML's milliwatts.
    assert (d0["temperature_c"], d0["power_w"]) == (66.0, 250.5)
    assert d0["lost"] is False and d0["field_errors"] == DEFAULT_FIELD_ERRORS
    assert d0["processes"] == [
        {"pid": compute, "used_mib": 15000, "sm_util": 80, "mem_util": 30, "types": ["compute"], **NO_MIG},
        # listed by both queries, reported once with both types; no sample = idle = 0
        {"pid": both, "used_mib": 5000, "sm_util": 0, "mem_util": 0, "types": ["compute", "graphics"], **NO_MIG},
        {"pid": graphics, "used_mib": 300, "sm_util": 3, "mem_util": 1, "types": ["graphics"], **NO_MIG},
    ]
    assert d1["name"] == "NVIDIA L4"
    assert d1["processes"] == [
        {"pid": unknown_mem, "used_mib": None, "sm_util": 12, "mem_util": 0, "types": ["compute"], **NO_MIG}
    ]


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None,
    reason="a real NVIDIA driver library is installed, so 'missing library' cannot be staged",
)
def test_missing_library(fake_nvml, tmp_path):
    empty = tmp_path / "no-driver"
    empty.mkdir()
    got = fake_nvml.run(
        PRELUDE
        + """
src = NvmlSource(clock=clock)
first, second = src.poll(), src.poll()
src.close()
print(json.dumps({"first": snap(first), "second": snap(second), "attempts": len(init_attempts),
                  "summary": nvml_summary()}))
""",
        extra_env={"LD_LIBRARY_PATH": str(empty)},
    )
    first = got["first"]
    assert first["ok"] is False and first["devices"] == []
    assert first["error"] == "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver is installed"
    assert got["second"]["error"] == first["error"]
    assert got["attempts"] == 1  # the second poll, inside the backoff, did not try again
    summary = got["summary"]
    assert summary["library_found"] is False and summary["device_count"] is None
    assert "not found" in summary["error"]


def test_init_failure_backs_off_then_recovers(fake_nvml):
    fake_nvml.write({"init_error": "DRIVER_NOT_LOADED", "gpus": [gpu(0, name="NVIDIA H100")]})
    w = worker(fake_nvml)
    w("src = NvmlSource(retry_initial_s=1.0, retry_max_s=4.0, clock=clock)")
    poll_at = "clock.t = 1000.0 + {}; s = src.poll(); result = [s.ok, s.error, len(init_attempts)]"
    first = w(poll_at.format(0))
    assert first[0] is False and first[1].startswith("NVIDIA driver not loaded")
    assert first[2] == 1
    # Attempts at 0, 1, 3, 7, 11: the delay doubles (1, 2, 4) and stops at retry_max_s (4).
    expected_attempts = {0.5: 1, 1.0: 2, 2.9: 2, 3.0: 3, 6.9: 3, 7.0: 4, 10.9: 4, 11.0: 5}
    for t, attempts in expected_attempts.items():
        ok, _, n = w(poll_at.format(t))
        assert (ok, n) == (False, attempts), f"at +{t}s"
    fake_nvml.write({"gpus": [gpu(0, name="NVIDIA H100")]})  # the driver comes back
    ok, error, n = w(poll_at.format(12.0))
    assert (ok, n) == (False, 5), "fixed, but the next attempt is not due until +15s"
    ok, error, n = w(poll_at.format(15.0))
    assert (ok, error, n) == (True, None, 6)
    assert w("result = [d.name for d in src.poll().devices]") == ["NVIDIA H100"]
    assert w("src.poll(); result = len(init_attempts)") == 6  # initialised once, then left alone
    w("src.close(); src.close()")  # idempotent
    assert w("s = src.poll(); result = [s.ok, s.error]") == [False, "NVML source closed"]
    # nvmlShutdown ran exactly once: the library's reference count is back to zero.
    assert w("result = pynvml._nvmlGetFunctionPointer('nvmlShutdown')()") == pynvml.NVML_ERROR_UNINITIALIZED


def test_gpu_lost_mid_run(fake_nvml, sleepers):
    a, b = sleepers(2)
    healthy = [
        gpu(0, util_gpu=50, processes=[{"pid": a, "used_mib": 1000, "sm_util": 40}]),
        gpu(1, name="NVIDIA A10", util_gpu=70, memory_used_mib=9000, processes=[{"pid": b, "sm_util": 60}]),
    ]
    fake_nvml.write({"gpus": healthy})
    w = worker(fake_nvml)
    w("src = NvmlSource()")
    before = w("result = snap(src.poll())")
    assert [d["lost"] for d in before["devices"]] == [False, False]

    fake_nvml.write({"gpus": [healthy[0], {**healthy[1], "lost": True}]})
    s = w("result = snap(src.poll())")
    assert s["ok"] is True
    d0, d1 = s["devices"]
    assert d0["lost"] is False and d0["util_gpu"] == 50 and [p["pid"] for p in d0["processes"]] == [a]
    assert d1["lost"] is True
    # Identity is what we knew before it fell off the bus; every measurement is unknown.
    assert (d1["uuid"], d1["name"]) == (gpu(1)["uuid"], "NVIDIA A10")
    measurements = ("mem_total_mib", "mem_used_mib", "util_gpu", "util_mem")
    assert [d1[k] for k in measurements] == [None] * len(measurements)
    assert d1["processes"] == []
    assert "GPU is lost" in d1["field_errors"].values()
    assert s["call_errors"] and all(v == "GPU 1: GPU is lost" for v in s["call_errors"].values())

    fake_nvml.write({"gpus": healthy})
    d1 = w("result = snap(src.poll())")["devices"][1]
    assert (d1["lost"], d1["util_gpu"], d1["mem_used_mib"]) == (False, 70, 9000)
    w("src.close()")


def test_not_supported_fields_are_none_with_a_reason(fake_nvml, sleepers):
    (pid,) = sleepers(1)
    fake_nvml.write(
        {
            "gpus": [
                gpu(
                    0,
                    not_supported=["power", "temperature", "utilization", "process_utilization"],
                    processes=[{"pid": pid, "used_mib": 700, "sm_util": 90}],
                ),
                # An old driver's GPU: no memory info v2, so v1 (whose "used" includes the reserve).
                gpu(1, not_supported=["memory_v2"], memory_used_mib=1000, memory_reserved_mib=250),
                gpu(2, not_supported=["processes"], util_gpu=9),
            ]
        }
    )
    s = fake_nvml.run(PRELUDE + "src = NvmlSource(); print(json.dumps(snap(src.poll())))")
    d0, d1, d2 = s["devices"]
    assert (d0["util_gpu"], d0["util_mem"]) == (None, None)
    assert d0["field_errors"] == {
        **DEFAULT_FIELD_ERRORS,
        "utilization": "Not Supported",
        "process_utilization": "Not Supported",
        "power_w": "Not Supported",
        "temperature_c": "Not Supported",
    }
    assert d0["mem_total_mib"] == 81920  # the rest of the device still reads
    # Listed, but utilisation unknown (not 0: the query failed, it did not say "idle").
    assert d0["processes"] == [
        {"pid": pid, "used_mib": 700, "sm_util": None, "mem_util": None, "types": ["compute"], **NO_MIG}
    ]
    assert d1["mem_used_mib"] == 1250 and d1["field_errors"] == DEFAULT_FIELD_ERRORS
    assert (
        d2["processes"] == [] and d2["field_errors"] == {**DEFAULT_FIELD_ERRORS, "processes": "Not Supported"} and d2["util_gpu"] == 9
    )
    # NOT_SUPPORTED is the device's answer, not a failed call.
    assert s["call_errors"] == {}


def test_process_utilisation_not_found_means_idle(fake_nvml, sleepers):
    (pid,) = sleepers(1)

    def scenario(sm: int) -> dict:
        # A long sample period, so every poll below falls in one period unless the test waits.
        return {
            "sample_period_us": 400_000,
            "gpus": [gpu(0, processes=[{"pid": pid, "used_mib": 900, "sm_util": sm}])],
        }

    fake_nvml.write(scenario(0))
    w = worker(fake_nvml)
    w("src = NvmlSource(util_hold_s=0.9)")
    sm = (
        "d = src.poll().devices[0]; result = [[p.pid, p.sm_util] for p in d.processes] + "
        "[{k: v for k, v in d.field_errors.items() if k not in DEFAULT_FIELD_ERRORS}]"
    )
    w(f"DEFAULT_FIELD_ERRORS = {DEFAULT_FIELD_ERRORS!r}")
    assert w(sm) == [[pid, 0], {}]  # NOT_FOUND: idle, and not an error

    fake_nvml.write(scenario(75))
    assert w(sm) == [[pid, 75], {}]
    # Polled again within the driver's sample period: NOT_FOUND, but the last sample still holds.
    assert w(sm) == [[pid, 75], {}]
    fake_nvml.write(scenario(0))
    w("import time; time.sleep(1.0)")  # longer than util_hold_s and than one sample period
    assert w(sm) == [[pid, 0], {}]

    fake_nvml.write(scenario(250))  # a nonsense sample, dropped rather than reported
    w("time.sleep(0.45)")
    assert w(sm) == [[pid, 0], {}]
    w("src.close()")


def test_summary_for_doctor(fake_nvml):
    fake_nvml.write({"cuda_driver_version": 12020, "gpus": [gpu(0, name="NVIDIA A10"), gpu(1, lost=True)]})
    got = fake_nvml.run(PRELUDE + "print(json.dumps(nvml_summary()))")
    assert got["library_found"] is True
    assert (got["driver"], got["cuda_driver"], got["device_count"]) == ("550.54.15", "12.2", 2)
    assert got["devices"] == [
        {"index": 0, "name": "NVIDIA A10", "uuid": gpu(0)["uuid"], "error": None},
        {"index": 1, "name": None, "uuid": None, "error": "GPU 1: GPU is lost"},
    ]
    assert got["error"] is None  # one lost GPU is that GPU's problem, not the driver's

    fake_nvml.write({"init_error": "DRIVER_NOT_LOADED"})
    got = fake_nvml.run(PRELUDE + "print(json.dumps(nvml_summary()))")
    assert got["library_found"] is True and got["device_count"] is None
    assert got["error"].startswith("NVIDIA driver not loaded")


# ------------------------------------------------------------------------- in-process, no driver


def _device_query(index: int = 0) -> nvml_mod.DeviceQuery:
    return nvml_mod.DeviceQuery(nvml_mod.Recorder(), index, nvml_mod.GpuInfo(index=index), None, None, 0)


def test_the_helper_turns_errors_into_reasons():
    recorder = nvml_mod.Recorder()
    errors: dict[str, str] = {}

    def fails(code):
        def fn():
            raise pynvml.NVMLError(code)

        fn.__name__ = f"nvmlFails{code}"
        return fn

    def on(index):
        q = nvml_mod.DeviceQuery(recorder, index, nvml_mod.GpuInfo(index=index), None, None, 0)
        q.errors = errors
        return q

    assert on(0).get("power_w", fails(pynvml.NVML_ERROR_NOT_SUPPORTED)) is None
    with pytest.raises(nvml_mod.NotSupported):
        nvml_mod.call(fails(pynvml.NVML_ERROR_NOT_SUPPORTED))
    with pytest.raises(nvml_mod.GpuLost):  # recorded, and raised: it ends the device's poll
        on(3).get("uuid", fails(pynvml.NVML_ERROR_GPU_IS_LOST))
    assert on(3).reading("uuid", fails(pynvml.NVML_ERROR_GPU_IS_LOST)) is None  # recorded only
    with pytest.raises(nvml_mod.NotFound):  # an expected answer: the caller records it, or not
        nvml_mod.call(fails(pynvml.NVML_ERROR_NOT_FOUND))

    def broken():
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad byte")

    assert on(1).get("name", broken) is None
    assert errors["power_w"] == "Not Supported"
    assert errors["uuid"] == "GPU is lost"
    assert errors["name"].startswith("UnicodeDecodeError")
    assert recorder.call_errors == {
        "nvmlFails15": "GPU 3: GPU is lost",
        "broken": "GPU 1: " + errors["name"],
    }


def test_the_helper_retries_a_sizing_race_once():
    replies = iter([pynvml.NVML_ERROR_INSUFFICIENT_SIZE, "filled"])

    def racy():
        reply = next(replies)
        if isinstance(reply, int):
            raise pynvml.NVMLError(reply)
        return reply

    assert _device_query().get("processes", racy, into={}) == "filled"

    def always_short():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)

    errors: dict[str, str] = {}
    assert _device_query().get("processes", always_short, into=errors) is None
    assert errors == {"processes": "Insufficient Size"}


def test_small_pure_parts():
    assert nvml_mod.official_pynvml() is True
    assert [nvml_mod.cuda_version_text(v) for v in (12040, 11080, 12000, 0, None)] == [
        "12.4",
        "11.8",
        "12.0",
        None,
        None,
    ]
    # The module's own copies of NVML's codes must match the binding's.
    for name in ("NOT_SUPPORTED", "NOT_FOUND", "INSUFFICIENT_SIZE", "GPU_IS_LOST", "FUNCTION_NOT_FOUND"):
        assert getattr(nvml_mod, name) == getattr(pynvml, f"NVML_ERROR_{name}")
