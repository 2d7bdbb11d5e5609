"""The simulated driver, checked through the real nvidia-ml-py in child processes.

nvidia-ml-py loads libnvidia-ml.so.1 once per process, so each check runs in a child started with
`fake_nvml.env()`; checks are grouped to keep the number of interpreter starts small.
"""

from __future__ import annotations

import inspect
import os
import re
import textwrap
import time
from pathlib import Path

import pytest

from tests.fakenvml import NOT_SUPPORTED_QUERIES, build_library, gpu, render_scenario, write_scenario

# Shared by the snippets: NVML's return code for a call (0 on success).
PRELUDE = """
import ctypes, json, time
import pynvml as N

def code(fn, *args, **kw):
    try:
        fn(*args, **kw)
        return 0
    except N.NVMLError as e:
        return e.value
"""


def run(fake_nvml, body: str):
    return fake_nvml.run(PRELUDE + textwrap.dedent(body))


def test_build_is_cached_by_source_hash(fake_nvml_lib_dir: Path, tmp_path: Path):
    first = build_library(tmp_path)
    mtime = first.stat().st_mtime_ns
    again = build_library(tmp_path)
    assert again == first and again.name == "libnvidia-ml.so.1"
    assert again.stat().st_mtime_ns == mtime, "an unchanged source must not be recompiled"
    # The soname is what lets a caller load it by absolute path before pynvml asks for the name.
    assert b"libnvidia-ml.so.1" in first.read_bytes()


def _symbols_the_witnesses_use() -> set[str]:
    """C symbols gpustat and nvitop reach through nvidia-ml-py, found by reading their sources."""
    import gpustat.core
    import nvitop.api.device
    import nvitop.api.libnvml
    import nvitop.api.process
    import pynvml

    names: set[str] = set()
    for mod in (gpustat.core, nvitop.api.device, nvitop.api.process, nvitop.api.libnvml):
        names |= set(re.findall(r"nvml[A-Z]\w+", inspect.getsource(mod)))
    symbols: set[str] = set()
    for name in names:
        fn = getattr(pynvml, name, None)
        if inspect.isfunction(fn):
            symbols |= set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', inspect.getsource(fn)))
    # nvitop builds these names at run time (f"{func}{suffix}"), so no regex sees them.
    symbols |= {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetDriverModel_v2",
    }
    return symbols


def test_exports_what_gpustat_and_nvitop_call(fake_nvml):
    wanted = _symbols_the_witnesses_use()
    assert len(wanted) > 30  # the scan found the real call sites, not an empty set
    found = fake_nvml.run(
        f"""
        import ctypes, json
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        names = {sorted(wanted | {"nvmlDeviceGetRunningProcessDetailList", "nvmlErrorString"})!r}
        print(json.dumps([n for n in names if hasattr(lib, n)]))
        """
    )
    pair = {"nvmlDeviceGetConfComputeMemSizeInfo", "nvmlDeviceGetRunningProcessDetailList"}
    assert wanted - pair <= set(found), f"missing: {sorted(wanted - pair - set(found))}"
    # Both or neither, or nvitop reads process entries with the wrong struct.
    assert len(pair & set(found)) in (0, 2)


def test_every_scenario_value_reads_back(fake_nvml, sleepers):
    a, b, c = sleepers(3)
    fake_nvml.write(
        {
            "driver_version": "535.104.05",
            "cuda_driver_version": 12020,
            "gpus": [
                {
                    "name": "NVIDIA GeForce RTX 3090",
                    "uuid": "GPU-3090aaaa-bbbb-cccc-dddd-eeeeffff0000",
                    "serial": "1324020012345",
                    "pci_bus_id": "00000000:0a:00.0",
                    "pci_device_id": 0x220410DE,
                    "memory_total_mib": 24576,
                    "memory_used_mib": 6000,
                    "memory_reserved_mib": 300,
                    "util_gpu": 87,
                    "util_mem": 41,
                    "temperature_c": 71,
                    "power_mw": 312500,
                    "power_limit_mw": 350000,
                    "compute_capability": (8, 6),
                    "processes": [
                        {"pid": a, "used_mib": 4000, "sm_util": 80, "mem_util": 30, "type": "compute"},
                        {"pid": b, "used_mib": None, "sm_util": 5, "mem_util": 1, "type": "graphics"},
                        {"pid": c, "used_mib": 1500, "sm_util": 0, "mem_util": 0, "type": "both"},
                    ],
                },
                gpu(1, name="NVIDIA A10"),
            ],
        }
    )
    got = run(
        fake_nvml,
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        pci = N.nvmlDeviceGetPciInfo(h)
        util = N.nvmlDeviceGetUtilizationRates(h)
        MIB = 1 << 20
        procs = lambda ps: [[p.pid, None if p.usedGpuMemory is None else p.usedGpuMemory // MIB,
                             p.gpuInstanceId] for p in ps]
        samples = N.nvmlDeviceGetProcessUtilization(h, 0)
        print(json.dumps({
            "count": N.nvmlDeviceGetCount(),
            "driver": N.nvmlSystemGetDriverVersion(),
            "cuda": N.nvmlSystemGetCudaDriverVersion(),
            "cuda_v2": N.nvmlSystemGetCudaDriverVersion_v2(),
            "name": N.nvmlDeviceGetName(h),
            "uuid": N.nvmlDeviceGetUUID(h),
            "serial": N.nvmlDeviceGetSerial(h),
            "index": N.nvmlDeviceGetIndex(h),
            "pci": [pci.busId, pci.busIdLegacy, pci.domain, pci.bus, pci.device, pci.pciDeviceId],
            "by_pci": N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId("0000:0A:00.0")),
            "by_uuid": N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(N.nvmlDeviceGetUUID(h))),
            "mem_v1": [m1.total // MIB, m1.used // MIB, m1.free // MIB],
            "mem_v2": [m2.total // MIB, m2.used // MIB, m2.reserved // MIB, m2.free // MIB],
            "util": [util.gpu, util.memory],
            "temp": N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
            "temp_v": N.nvmlDeviceGetTemperatureV(h, N.NVML_TEMPERATURE_GPU),
            "power": N.nvmlDeviceGetPowerUsage(h),
            "limit": N.nvmlDeviceGetEnforcedPowerLimit(h),
            "cc": list(N.nvmlDeviceGetCudaComputeCapability(h)),
            "compute": procs(N.nvmlDeviceGetComputeRunningProcesses(h)),
            "graphics": procs(N.nvmlDeviceGetGraphicsRunningProcesses(h)),
            "compute_v2": procs(N.nvmlDeviceGetComputeRunningProcesses_v2(h)),
            "samples": sorted([s.pid, s.smUtil, s.memUtil, s.timeStamp] for s in samples),
            "now_us": time.time() * 1e6,
            "name1": N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(1)),
            "error_string": N.nvmlErrorString(N.NVML_ERROR_GPU_IS_LOST),
        }))
        """,
    )
    assert got["count"] == 2
    assert got["driver"] == "535.104.05"
    assert got["cuda"] == got["cuda_v2"] == 12020
    assert got["name"] == "NVIDIA GeForce RTX 3090"
    assert got["uuid"] == "GPU-3090aaaa-bbbb-cccc-dddd-eeeeffff0000"
    assert got["serial"] == "1324020012345"
    assert got["index"] == 0 and got["by_pci"] == 0 and got["by_uuid"] == 0
    assert got["pci"] == ["00000000:0A:00.0", "0000:0A:00.0", 0, 10, 0, 0x220410DE]
    # v1 "used" includes the driver's reservation; v2 reports it separately.
    assert got["mem_v1"] == [24576, 6300, 24576 - 6300]
    assert got["mem_v2"] == [24576, 6000, 300, 24576 - 6300]
    assert got["util"] == [87, 41]
    assert got["temp"] == got["temp_v"] == 71
    assert got["power"] == 312500 and got["limit"] == 350000
    assert got["cc"] == [8, 6]
    assert got["compute"] == [[a, 4000, 0xFFFFFFFF], [c, 1500, 0xFFFFFFFF]]
    assert got["graphics"] == [[b, None, 0xFFFFFFFF], [c, 1500, 0xFFFFFFFF]]
    assert got["compute_v2"] == got["compute"]
    # Only processes that used the GPU have samples; the idle one (c) has none.
    assert [s[:3] for s in got["samples"]] == sorted([[a, 80, 30], [b, 5, 1]])
    stamp = got["samples"][0][3]
    assert stamp % 166666 == 0 and 0 <= got["now_us"] - stamp < 2_000_000
    assert got["name1"] == "NVIDIA A10"
    assert got["error_string"] == "GPU is lost"


def test_v1_process_entries_have_the_legacy_layout(fake_nvml, sleepers):
    (pid,) = sleepers(1)
    fake_nvml.write({"gpus": [gpu(0, processes=[{"pid": pid, "used_mib": 777}])]})
    got = run(
        fake_nvml,
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        fn = N._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
        class V1(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
        n = ctypes.c_uint(4)
        buf = (V1 * 4)()
        ret = fn(h, ctypes.byref(n), buf)
        print(json.dumps([ret, n.value, buf[0].pid, buf[0].usedGpuMemory >> 20, ctypes.sizeof(V1)]))
        """,
    )
    assert got == [0, 1, pid, 777, 16]


def test_running_scenario_changes_are_picked_up(fake_nvml):
    fake_nvml.write({"gpus": [gpu(0, util_gpu=10)]})
    w = fake_nvml.worker()
    w(PRELUDE + "N.nvmlInit()")
    read = "result = [N.nvmlDeviceGetCount(), N.nvmlDeviceGetUtilizationRates(N.nvmlDeviceGetHandleByIndex(0)).gpu]"
    assert w(read) == [1, 10]
    # Two same-length rewrites between reads: the second file tends to get the inode number the
    # first reader saw back, and file mtimes tick coarsely, so (inode, size, mtime) could repeat.
    for util in (11, 33, 55, 77):
        fake_nvml.write({"gpus": [gpu(0, util_gpu=util - 1)]})
        fake_nvml.write({"gpus": [gpu(0, util_gpu=util)]})
        assert w(read) == [1, util]
    fake_nvml.write({"gpus": [gpu(0, util_gpu=5), gpu(1), gpu(2, name="NVIDIA H100 80GB HBM3")]})
    assert w(read) == [3, 5]
    assert w("result = N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(2))") == "NVIDIA H100 80GB HBM3"


def test_sizing_protocol(fake_nvml, sleepers):
    pids = sleepers(3)
    procs = [{"pid": p, "used_mib": 100, "sm_util": 10} for p in pids]
    fake_nvml.write({"gpus": [gpu(0, processes=procs), gpu(1)]})
    got = run(
        fake_nvml,
        """
        N.nvmlInit()
        busy, idle = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        fn = N._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
        out = {}
        n = ctypes.c_uint(0)
        out["ask"] = [fn(busy, ctypes.byref(n), None), n.value]
        buf = (N.c_nvmlProcessInfo_v3_t * 3)()
        n.value = 2
        out["short"] = [fn(busy, ctypes.byref(n), buf), n.value]
        n.value = 3
        out["exact"] = [fn(busy, ctypes.byref(n), buf), n.value, [buf[i].pid for i in range(3)]]
        n.value = 0
        out["empty"] = [fn(idle, ctypes.byref(n), None), n.value]
        out["null_count"] = fn(busy, None, None)
        util = N._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
        n.value = 0
        out["util_ask"] = [util(busy, None, ctypes.byref(n), ctypes.c_ulonglong(0)), n.value]
        print(json.dumps(out))
        """,
    )
    assert got["ask"] == [7, 3]  # INSUFFICIENT_SIZE with the needed count
    assert got["short"] == [7, 3]
    assert got["exact"] == [0, 3, pids]
    assert got["empty"] == [0, 0]  # no processes: SUCCESS straight away
    assert got["null_count"] == 2  # INVALID_ARGUMENT
    assert got["util_ask"] == [7, 3]


def test_process_utilization_only_newer_samples(fake_nvml, sleepers):
    busy, idle = sleepers(2)
    period = 100_000
    fake_nvml.write(
        {
            "sample_period_us": period,
            "gpus": [
                gpu(0, processes=[{"pid": busy, "sm_util": 60, "mem_util": 20}, {"pid": idle}]),
                gpu(1, processes=[{"pid": idle}]),
            ],
        }
    )
    got = run(
        fake_nvml,
        """
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        first = N.nvmlDeviceGetProcessUtilization(h0, 0)
        seen = first[0].timeStamp
        again = code(N.nvmlDeviceGetProcessUtilization, h0, seen)
        time.sleep(0.25)  # more than one sample period
        later = N.nvmlDeviceGetProcessUtilization(h0, seen)
        print(json.dumps({
            "first": [[s.pid, s.smUtil, s.memUtil] for s in first],
            "again": again,
            "later": [[s.pid, s.smUtil, s.timeStamp - seen] for s in later],
            "all_idle": code(N.nvmlDeviceGetProcessUtilization, h1, 0),
        }))
        """,
    )
    assert got["first"] == [[busy, 60, 20]]  # the idle process has no sample
    assert got["again"] == 6  # NOT_FOUND: nothing newer than what we saw
    assert len(got["later"]) == 1 and got["later"][0][:2] == [busy, 60]
    assert got["later"][0][2] >= 2 * period  # timestamps advance with real time
    assert got["all_idle"] == 6


def test_init_reference_counting_and_uninitialized(fake_nvml):
    fake_nvml.write({"gpus": [gpu(0)]})
    got = run(
        fake_nvml,
        """
        N._LoadNvmlLibrary()
        count = N._nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")
        n = ctypes.c_uint(99)
        out = {"before": count(ctypes.byref(n))}
        N.nvmlInit(); N.nvmlInit()
        out["after_init"] = [count(ctypes.byref(n)), n.value]
        N.nvmlShutdown()
        out["one_left"] = count(ctypes.byref(n))
        N.nvmlShutdown()
        out["after_shutdown"] = count(ctypes.byref(n))
        out["extra_shutdown"] = N._nvmlGetFunctionPointer("nvmlShutdown")()
        out["driver"] = code(N.nvmlSystemGetDriverVersion)
        print(json.dumps(out))
        """,
    )
    assert got == {
        "before": 1,  # UNINITIALIZED
        "after_init": [0, 1],
        "one_left": 0,  # init is reference counted
        "after_shutdown": 1,
        "extra_shutdown": 1,
        "driver": 1,
    }


def test_init_errors(fake_nvml):
    body = """
        print(json.dumps(code(N.nvmlInit)))
        """
    # No scenario file yet: the machine looks like one without a loaded kernel module.
    assert run(fake_nvml, body) == 9
    fake_nvml.write({"init_error": "DRIVER_NOT_LOADED", "gpus": [gpu(0)]})
    assert run(fake_nvml, body) == 9
    fake_nvml.write({"init_error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "gpus": [gpu(0)]})
    assert run(fake_nvml, body) == 18
    fake_nvml.write({"init_error": None, "gpus": [gpu(0)]})
    assert run(fake_nvml, body) == 0


# A pynvml call that exercises each not_supported category, on handle `h`.
CATEGORY_CALLS = {
    "utilization": "N.nvmlDeviceGetUtilizationRates(h)",
    "memory": "N.nvmlDeviceGetMemoryInfo(h)",
    "memory_v2": "N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)",
    "temperature": "N.nvmlDeviceGetTemperature(h, 0)",
    "power": "N.nvmlDeviceGetPowerUsage(h)",
    "power_limit": "N.nvmlDeviceGetEnforcedPowerLimit(h)",
    "processes": "N.nvmlDeviceGetComputeRunningProcesses(h)",
    "process_utilization": "N.nvmlDeviceGetProcessUtilization(h, 0)",
    "pci": "N.nvmlDeviceGetPciInfo(h)",
    "compute_capability": "N.nvmlDeviceGetCudaComputeCapability(h)",
    "encoder": "N.nvmlDeviceGetEncoderUtilization(h)",
    "decoder": "N.nvmlDeviceGetDecoderUtilization(h)",
    "clock_event_reasons": "N.nvmlDeviceGetCurrentClocksEventReasons(h)",
    "sm_clock": "N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)",
    "mem_clock": "N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)",
    "sm_clock_max": "N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM)",
    "pcie_gen": "N.nvmlDeviceGetCurrPcieLinkGeneration(h)",
    "pcie_gen_max": "N.nvmlDeviceGetMaxPcieLinkGeneration(h)",
    "pcie_width": "N.nvmlDeviceGetCurrPcieLinkWidth(h)",
    "pcie_width_max": "N.nvmlDeviceGetMaxPcieLinkWidth(h)",
    "mig_mode": "N.nvmlDeviceGetMigMode(h)",
    "energy": "N.nvmlDeviceGetTotalEnergyConsumption(h)",
}


def test_not_supported_per_query(fake_nvml, sleepers):
    assert set(CATEGORY_CALLS) == set(NOT_SUPPORTED_QUERIES)
    (pid,) = sleepers(1)
    # GPU i lacks exactly category i; processes are busy so process utilisation has samples.
    procs = [{"pid": pid, "sm_util": 50}]
    names = list(CATEGORY_CALLS)
    fake_nvml.write({"gpus": [gpu(i, not_supported=[q], processes=procs) for i, q in enumerate(names)]})
    got = run(
        fake_nvml,
        f"""
        N.nvmlInit()
        calls = {CATEGORY_CALLS!r}
        names = {names!r}
        table = {{}}
        for i, missing in enumerate(names):
            h = N.nvmlDeviceGetHandleByIndex(i)
            table[missing] = {{q: code(lambda: eval(expr)) for q, expr in calls.items()}}
        print(json.dumps(table))
        """,
    )
    for missing, codes in got.items():
        for query, rc in codes.items():
            # "memory" covers both calls; "memory_v2" only the v2 one.
            expected = 3 if query == missing or (missing == "memory" and query == "memory_v2") else 0
            assert rc == expected, f"GPU lacking {missing!r}: {query} returned {rc}"


def test_lost_gpu_fails_every_query_and_only_its_own(fake_nvml, sleepers):
    (pid,) = sleepers(1)
    procs = [{"pid": pid, "sm_util": 50}]
    fake_nvml.write({"gpus": [gpu(0, processes=procs), gpu(1, lost=True, processes=procs)]})
    got = run(
        fake_nvml,
        f"""
        N.nvmlInit()
        calls = {list(CATEGORY_CALLS.values())!r} + [
            "N.nvmlDeviceGetName(h)", "N.nvmlDeviceGetUUID(h)", "N.nvmlDeviceGetIndex(h)",
            "N.nvmlDeviceGetFanSpeed(h)", "N.nvmlDeviceGetGraphicsRunningProcesses(h)",
        ]
        out = {{}}
        for i in (0, 1):
            h = N.nvmlDeviceGetHandleByIndex(i)  # a lost GPU still has a handle
            out[i] = sorted({{code(lambda: eval(expr)) for expr in calls}})
        out["by_uuid"] = code(N.nvmlDeviceGetHandleByUUID, "GPU-00000001-1111-4222-8333-000000000001")
        print(json.dumps(out))
        """,
    )
    assert got["0"] == [0, 3]  # fine, apart from the fan this library never models
    assert got["1"] == [15]  # GPU_IS_LOST, whatever the query
    assert got["by_uuid"] == 15


def test_version_and_argument_checks(fake_nvml):
    fake_nvml.write({"gpus": [gpu(0)]})
    got = run(
        fake_nvml,
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        mem2 = N._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")
        m = N.c_nvmlMemory_v2_t()
        m.version = 0x01000028  # right size, wrong version
        name = ctypes.create_string_buffer(8)
        bogus = ctypes.cast(ctypes.c_void_p(0x1234), N.c_nvmlDevice_t)
        print(json.dumps({
            "mem_v2_bad_version": mem2(h, ctypes.byref(m)),
            "mem_v2_via_binding": code(N.nvmlDeviceGetMemoryInfo, h, version=N.nvmlMemory_v2),
            "bad_index": code(N.nvmlDeviceGetHandleByIndex, 5),
            "bad_handle": code(N.nvmlDeviceGetName, bogus),
            "null_out": N._nvmlGetFunctionPointer("nvmlDeviceGetPowerUsage")(h, None),
            "short_name": N._nvmlGetFunctionPointer("nvmlDeviceGetName")(h, name, ctypes.c_uint(8)),
            "unknown_uuid": code(N.nvmlDeviceGetHandleByUUID, "GPU-nope"),
        }))
        """,
    )
    assert got == {
        "mem_v2_bad_version": 25,  # ARGUMENT_VERSION_MISMATCH
        "mem_v2_via_binding": 0,
        "bad_index": 2,  # INVALID_ARGUMENT
        "bad_handle": 2,
        "null_out": 2,
        "short_name": 7,  # INSUFFICIENT_SIZE
        "unknown_uuid": 6,  # NOT_FOUND
    }


def test_write_scenario_rejects_mistakes(tmp_path: Path):
    path = tmp_path / "s.txt"
    with pytest.raises(ValueError, match="utilisation"):
        write_scenario(path, {"gpus": [{"utilisation": 5}]})
    with pytest.raises(ValueError, match="not_supported"):
        write_scenario(path, {"gpus": [{"not_supported": ["fan"]}]})
    with pytest.raises(ValueError, match="NVML error"):
        write_scenario(path, {"init_error": "DRIVER_NOT_LOADDED"})
    with pytest.raises(ValueError, match="single line"):
        write_scenario(path, {"gpus": [{"name": "two\nlines"}]})
    assert not path.exists() and list(tmp_path.iterdir()) == []  # no stray temp files either
    text = render_scenario({"gpus": [{"processes": [{"pid": 7, "used_mib": None, "type": "both"}]}]})
    assert "proc 7 -1 0 0 3" in text.splitlines()


def test_write_scenario_always_moves_mtime_forward(tmp_path: Path):
    """Each new file's mtime is later than the one it replaces.

    The library keys on (inode, size, mtime). Renamed files reuse inode numbers (A, B, A, ...), a
    scenario edit often keeps the size, and on kernels with coarse timestamps two writes within a
    tick share an mtime, so a strictly increasing mtime is what makes every write visible. A file
    stamped in the future stands in for "same tick" here, deterministically.
    """
    path = tmp_path / "s.txt"
    write_scenario(path, {"gpus": [{"util_gpu": 10}]})
    future = time.time_ns() + 5_000_000_000
    os.utime(path, ns=(future, future))
    write_scenario(path, {"gpus": [{"util_gpu": 11}]})
    assert path.stat().st_mtime_ns > future
    assert "util_gpu 11" in path.read_text().splitlines()
