"""Outside witnesses: gpustat and nvitop, unmodified, read the simulated driver correctly.

They load libnvidia-ml.so.1 through nvidia-ml-py like any user's tools would, and they look every
pid up with psutil, so the scenario's processes are real sleeping children. If the simulated
driver disagreed with what NVIDIA's binding expects (a struct layout, a sizing reply, a version
word), these tools would show wrong numbers or crash, and our own source could not be trusted on
it either.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fakenvml import gpu


def _scenario(pids: list[int]) -> dict:
    a, b, c = pids
    return {
        "driver_version": "550.54.15",
        "gpus": [
            gpu(
                0,
                name="NVIDIA A100-SXM4-80GB",
                memory_total_mib=81920,
                memory_used_mib=30000,
                memory_reserved_mib=600,
                util_gpu=93,
                util_mem=40,
                temperature_c=64,
                power_mw=287000,
                processes=[
                    {"pid": a, "used_mib": 20000, "sm_util": 70, "mem_util": 30, "type": "compute"},
                    {"pid": b, "used_mib": 10000, "sm_util": 20, "mem_util": 10, "type": "both"},
                ],
            ),
            gpu(1, name="NVIDIA L4", memory_total_mib=23034, memory_used_mib=512, util_gpu=0),
            gpu(2, name="NVIDIA T4", lost=True, processes=[{"pid": c, "used_mib": 100}]),
        ],
    }


def test_gpustat_json_reads_the_scenario(fake_nvml, sleepers):
    pids = sleepers(3)
    fake_nvml.write(_scenario(pids))
    proc = subprocess.run(
        [sys.executable, "-m", "gpustat", "--json"],
        env=fake_nvml.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["driver_version"] == "550.54.15"
    g0, g1, g2 = doc["gpus"]
    assert g0["name"] == "NVIDIA A100-SXM4-80GB"
    # gpustat uses memory info v2: "used" without the driver's reservation.
    assert (g0["memory.used"], g0["memory.total"]) == (30000, 81920)
    assert (g0["utilization.gpu"], g0["temperature.gpu"], g0["power.draw"]) == (93, 64, 287)
    # The "both" process is in both NVML lists; gpustat shows it once.
    assert sorted((p["pid"], p["gpu_memory_usage"]) for p in g0["processes"]) == [
        (pids[0], 20000),
        (pids[1], 10000),
    ]
    assert all(p["command"] == "sleep" for p in g0["processes"])  # psutil found the real pids
    assert (g1["name"], g1["memory.used"], g1["memory.total"], g1["processes"]) == (
        "NVIDIA L4",
        512,
        23034,
        [],
    )
    assert g2["name"] == "((GPU is lost))"


def test_nvitop_api_reads_the_scenario(fake_nvml, sleepers):
    pids = sleepers(3)
    fake_nvml.write(_scenario(pids))
    got = fake_nvml.run(
        """
        import json
        from nvitop import Device, GpuProcess, NA
        out = []
        for d in Device.all():
            s = d.as_snapshot()
            procs = GpuProcess.take_snapshots(d.processes().values(), failsafe=True)
            na = lambda v: None if v is NA else v
            out.append({
                "name": na(s.name), "used": na(s.memory_used), "total": na(s.memory_total),
                "util": na(s.gpu_utilization), "temp": na(s.temperature),
                "procs": sorted([p.pid, na(p.gpu_memory), na(p.gpu_sm_utilization), p.type, p.name]
                                for p in procs),
            })
        print(json.dumps(out))
        """
    )
    mib = 1 << 20
    g0, g1, g2 = got
    assert (g0["name"], g0["used"], g0["total"]) == ("NVIDIA A100-SXM4-80GB", 30000 * mib, 81920 * mib)
    assert (g0["util"], g0["temp"]) == (93, 64)
    assert g0["procs"] == sorted(
        [
            [pids[0], 20000 * mib, 70, "C", "sleep"],
            [pids[1], 10000 * mib, 20, "C+G", "sleep"],
        ]
    )
    assert (g1["name"], g1["used"], g1["util"], g1["procs"]) == ("NVIDIA L4", 512 * mib, 0, [])
    # nvitop turns GPU_IS_LOST into N/A values rather than failing.
    assert (g2["name"], g2["used"], g2["procs"]) == (None, None, [])


def test_our_source_agrees_with_nvitop(fake_nvml, sleepers):
    pids = sleepers(3)
    fake_nvml.write(_scenario(pids))
    got = fake_nvml.run(
        """
        import json
        from nvitop import Device, NA
        from sidecar.sources.nvml import NvmlSource
        src = NvmlSource()
        snap = src.poll()
        ours = [[d.index, d.name, d.mem_used_mib, d.util_gpu, d.lost,
                 sorted([p.pid, p.used_mib, p.sm_util] for p in d.processes)] for d in snap.devices]
        theirs = []
        for d in Device.all():
            lost = d.name() is NA
            procs = d.processes().values()
            theirs.append([d.index, None if lost else d.name(),
                           None if lost else d.memory_used() >> 20, None if lost else d.gpu_utilization(),
                           lost, sorted([p.pid, p.gpu_memory() >> 20, p.gpu_sm_utilization()] for p in procs)])
        src.close()
        print(json.dumps({"ours": ours, "theirs": theirs}))
        """
    )
    assert got["ours"] == got["theirs"]
    assert got["ours"][0][5] == sorted([[pids[0], 20000, 70], [pids[1], 10000, 20]])


def test_our_efficiency_fields_agree_with_nvitop(fake_nvml, sleepers):
    """Clocks, power, temperature, compute capability and MIG devices as nvitop reads them from the
    same simulated driver (a throttled Hopper and an A100 in MIG mode with two MIG devices)."""
    from tests.fakenvml import scenarios

    a, b, c = sleepers(3)
    fake_nvml.write({"gpus": [scenarios.throttled_gpu(a, 0), scenarios.mig_gpu((b, c), 1)]})
    got = fake_nvml.run(
        """
        import json
        from nvitop import Device, NA
        from sidecar.sources.nvml import NvmlSource
        src = NvmlSource()
        snap = src.poll()
        ours = [[d.sm_clock_mhz, d.mem_clock_mhz, d.sm_clock_max_mhz, d.temperature_c, d.power_w,
                 d.power_limit_w, d.compute_capability, d.mig_mode,
                 [[m.uuid, m.gpu_instance_id, m.compute_instance_id, m.mem_total_mib] for m in d.mig_devices]]
                for d in snap.devices]
        theirs = []
        for d in Device.all():
            cc = d.cuda_compute_capability()
            theirs.append([d.sm_clock(), d.memory_clock(), d.max_sm_clock(), float(d.temperature()),
                           d.power_usage() / 1000, d.power_limit() / 1000, f"{cc[0]}.{cc[1]}",
                           d.is_mig_mode_enabled(),
                           [[m.uuid(), m.gpu_instance_id(), m.compute_instance_id(), m.memory_total() / (1 << 20)]
                            for m in d.mig_devices()]])
        src.close()
        print(json.dumps({"ours": ours, "theirs": theirs}))
        """
    )
    assert got["ours"] == got["theirs"]
    assert got["ours"][0][:3] == [1035, 2619, 1980]
    assert [m[0] for m in got["ours"][1][8]] == [
        "MIG-00000001-aaaa-4000-8000-000000000001",
        "MIG-00000001-aaaa-4000-8000-000000000002",
    ]


def test_gpustat_reads_efficiency_scenarios(fake_nvml, sleepers):
    """gpustat still reads a machine with a Hopper (GPM, clocks) and a MIG-enabled A100."""
    from tests.fakenvml import scenarios

    a, b, c = sleepers(3)
    fake_nvml.write({"gpus": [scenarios.tensor_heavy_gpu(a, 0), scenarios.mig_gpu((b, c), 1)]})
    proc = subprocess.run(
        [sys.executable, "-m", "gpustat", "--json"], env=fake_nvml.env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    g0, g1 = json.loads(proc.stdout)["gpus"]
    assert (g0["name"], g0["utilization.gpu"], g0["power.draw"], g0["enforced.power.limit"]) == (
        "NVIDIA H100 80GB HBM3",
        98,
        600,
        700,
    )
    assert g1["utilization.gpu"] is None  # MIG on: NVML reports no utilisation
    assert sorted(p["pid"] for p in g1["processes"]) == sorted([b, c])
