"""Efficiency checks for scripts/gpu_check.py (issue 15), on a real NVIDIA GPU.

1. Every efficiency field of GpuInfo, read through NvmlSource (two polls, so GPM has its pair of
   samples), printed per GPU with the reason of each None; then the CPU one poll costs.
2. Two workloads on cuda:0, each in a child process for WORKLOAD_S seconds while this process polls
   NVML once a second:
   - busy-but-hollow: fp32 (64 x 8192) @ (8192 x 64) matmuls back to back: a kernel is nearly always
     running (NVML util high) but each one occupies a few SMs (GPM SM activity low), no tensor cores;
   - tensor-heavy: bf16 8192 x 8192 matmuls: tensor activity high.
   For each it prints NVML util and GPM SM activity / occupancy / tensor activity, and checks that
   the two can be told apart. Without GPM (before Hopper) those checks are SKIP.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from sidecar.common.nvml_names import GPU_EFFICIENCY_FIELDS

WORKLOAD_S = 12.0  # per workload; the whole script stays well under three minutes
WARMUP_S = 3.0

EFFICIENCY_FIELDS = (*GPU_EFFICIENCY_FIELDS, "mig_devices")

WORKLOADS = {
    "busy-but-hollow": """
import sys, time, torch
torch.backends.cuda.matmul.allow_tf32 = False  # plain FP32: no tensor cores
a = torch.randn(64, 8192, device="cuda")
b = torch.randn(8192, 64, device="cuda")
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(200):
        c = a @ b  # a 64 x 64 output: a handful of thread blocks, on a few of the SMs
    torch.cuda.synchronize()
""",
    "tensor-heavy": """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
""",
}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def record_fields(check: Callable[[str, bool | None, str], None]) -> None:
    """Every efficiency field of every GPU, through NvmlSource."""
    from sidecar.sources.nvml import NvmlSource

    with NvmlSource() as src:
        src.poll()
        time.sleep(1.0)  # GPM wants its two samples more than 100 ms apart
        snap = src.poll()
        # What a poll costs with the real driver (the simulated one only approximates it): CPU per
        # poll over 20 polls 0.2 s apart, the rarely read queries included twice.
        cpu_s = []
        for _ in range(20):
            time.sleep(0.2)
            started = time.process_time()
            src.poll()
            cpu_s.append(time.process_time() - started)
    check("nvml efficiency poll", snap.ok, snap.error or f"{len(snap.devices)} GPU(s)")
    check("nvml poll CPU (real driver)", None if not snap.ok else True,
          f"median {1000 * statistics.median(cpu_s):.2f} ms, max {1000 * max(cpu_s):.2f} ms "
          f"for {len(snap.devices)} GPU(s)")
    for d in snap.devices:
        print(f"\nGPU {d.index} {d.name}: efficiency fields")
        for name in EFFICIENCY_FIELDS:
            value = getattr(d, name)
            if name == "mig_devices":
                value = [asdict(m) for m in value]
            why = f"   ({d.field_errors[name]})" if name in d.field_errors else ""
            print(f"  {name:26} {_fmt(value)}{why}")
        others = {k: v for k, v in d.field_errors.items() if k not in EFFICIENCY_FIELDS}
        if others:
            print(f"  other field_errors: {others}")
        basics = ("compute_capability", "sm_clock_mhz", "power_w", "power_limit_w", "temperature_c", "pcie_link_gen")
        missing = [n for n in basics if getattr(d, n) is None]
        check(f"GPU {d.index} basic efficiency fields", not missing, "all read" if not missing else f"None: {missing}")
        if d.pcie_link_gen is not None and d.pcie_link_gen_max is not None:
            check(f"GPU {d.index} PCIe link", d.pcie_link_gen <= d.pcie_link_gen_max,
                  f"Gen{d.pcie_link_gen} x{d.pcie_link_width} of Gen{d.pcie_link_gen_max} x{d.pcie_link_width_max}")
        gpm_read = d.sm_activity_fraction is not None
        hopper = d.compute_capability is not None and tuple(map(int, d.compute_capability.split("."))) >= (9, 0)
        check(f"GPU {d.index} GPM", gpm_read if hopper else None,
              "read" if gpm_read else d.field_errors.get("sm_activity_fraction", "?"))


def _median(values: list[float | int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def run_workload(name: str) -> dict[str, float | None]:
    """Run one workload in a child while polling GPU 0 once a second; medians of what NVML said."""
    from sidecar.sources.nvml import NvmlSource

    child = subprocess.Popen([sys.executable, "-c", WORKLOADS[name], str(WORKLOAD_S)])
    rows: list[Any] = []
    try:
        with NvmlSource() as src:
            src.poll()
            time.sleep(WARMUP_S)  # CUDA context, allocation and the first kernels
            src.poll()  # GPM: the sample the first measured pair starts from
            while child.poll() is None and len(rows) < WORKLOAD_S - WARMUP_S - 1:
                time.sleep(1.0)
                snap = src.poll()
                if snap.ok and snap.devices:
                    rows.append(snap.devices[0])
    finally:
        try:
            child.wait(timeout=WORKLOAD_S + 60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    result = {
        "util_gpu": _median([r.util_gpu for r in rows]),
        "sm_activity": _median([r.sm_activity_fraction for r in rows]),
        "sm_occupancy": _median([r.sm_occupancy_fraction for r in rows]),
        "tensor_activity": _median([r.tensor_activity_fraction for r in rows]),
        "dram_activity": _median([r.dram_activity_fraction for r in rows]),
        "sm_clock_mhz": _median([r.sm_clock_mhz for r in rows]),
        "power_w": _median([r.power_w for r in rows]),
        "samples": len(rows),
        "exit": child.returncode,
    }
    reasons = sorted({reason for r in rows for reason in (r.clock_event_reasons or ())})
    print(f"\n{name}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in result.items()) + f", clock events {reasons}")
    return result


def workloads(check: Callable[[str, bool | None, str], None]) -> None:
    hollow = run_workload("busy-but-hollow")
    heavy = run_workload("tensor-heavy")
    for name, r in (("busy-but-hollow", hollow), ("tensor-heavy", heavy)):
        check(f"{name} ran", r["exit"] == 0 and r["samples"] > 0, f"exit {r['exit']}, {r['samples']} samples")
    print("\n| workload | NVML util % | GPM SM activity | SM occupancy | tensor activity | DRAM activity |")
    print("|---|---|---|---|---|---|")
    for name, r in (("busy-but-hollow", hollow), ("tensor-heavy", heavy)):
        print(f"| {name} | {_fmt(r['util_gpu'])} | {_fmt(r['sm_activity'])} | {_fmt(r['sm_occupancy'])} | "
              f"{_fmt(r['tensor_activity'])} | {_fmt(r['dram_activity'])} |")
    if hollow["sm_activity"] is None or heavy["sm_activity"] is None:
        check("hollow vs tensor-heavy (GPM)", None, "no GPM on this GPU: NVML util alone cannot tell them apart")
        return
    check("busy-but-hollow looks busy to NVML util", (hollow["util_gpu"] or 0) >= 50, f"util {hollow['util_gpu']} %")
    check("busy-but-hollow is hollow to GPM", hollow["sm_activity"] < 0.3,
          f"SM activity {hollow['sm_activity']:.2f}, occupancy {_fmt(hollow['sm_occupancy'])}")
    check("tensor-heavy uses the tensor cores", (heavy["tensor_activity"] or 0) > 0.3,
          f"tensor activity {_fmt(heavy['tensor_activity'])}")
    check("GPM tells them apart", heavy["sm_activity"] > hollow["sm_activity"] + 0.3,
          f"SM activity {heavy['sm_activity']:.2f} vs {hollow['sm_activity']:.2f}")
