"""Ready-made fakenvml scenarios for the efficiency fields (issue 15): one GPU each, in NVML's units.

Each `<name>(...)` returns a whole scenario (`{"gpus": [...]}`) for `fake_nvml.write`; each
`<name>_gpu(...)` returns just the GPU dict, to combine several on one machine. `pid` is a live
process (e.g. from the `sleepers` fixture) listed as the GPU's compute process; None lists none.
Every builder takes `index` (the NVML index it will get, which keeps UUIDs and bus ids distinct) and
overrides of any GPU key. What the sidecar should read back is in each docstring; the README's
"Scenario builders" table lists them all.
"""

from __future__ import annotations

from typing import Any

from tests.fakenvml import gpu

__all__ = [
    "busy_but_hollow",
    "busy_but_hollow_gpu",
    "degraded_link",
    "degraded_link_gpu",
    "hopper_gpu",
    "mig",
    "mig_gpu",
    "power_capped",
    "power_capped_gpu",
    "tensor_heavy",
    "tensor_heavy_gpu",
    "throttle_reasons_only",
    "throttled",
    "throttled_gpu",
]

# Idle GPM rates of a Hopper GPU (NVML metric name without NVML_GPM_METRIC_ -> percent or MiB/s).
HOPPER_IDLE_GPM = {
    "sm_util": 0.0,
    "sm_occupancy": 0.0,
    "any_tensor_util": 0.0,
    "dram_bw_util": 0.0,
    "pcie_tx_per_sec": 0.0,
    "pcie_rx_per_sec": 0.0,
    "nvlink_total_tx_per_sec": 0.0,
    "nvlink_total_rx_per_sec": 0.0,
}


def _procs(pid: int | None, used_mib: int, sm_util: int) -> list[dict[str, Any]]:
    return [] if pid is None else [{"pid": pid, "used_mib": used_mib, "sm_util": sm_util, "mem_util": 20}]


def _scenario(g: dict[str, Any], **machine: Any) -> dict[str, Any]:
    return {**machine, "gpus": [g]}


def hopper_gpu(index: int = 0, **overrides: Any) -> dict[str, Any]:
    """An idle H100 SXM5: compute capability 9.0, GPM supported (all rates 0), PCIe Gen5 x16,
    1980 MHz max SM clock, 700 W limit, MIG-capable but off."""
    g = gpu(
        index,
        name="NVIDIA H100 80GB HBM3",
        pci_device_id=0x233010DE,
        compute_capability=(9, 0),
        memory_total_mib=81559,
        power_mw=70_000,
        power_limit_mw=700_000,
        sm_clock_mhz=345,  # idle clocks drop; the max is what the GPU may boost to
        sm_clock_max_mhz=1980,
        mem_clock_mhz=2619,
        mem_clock_max_mhz=2619,
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        clock_event_reasons=["gpu_idle"],
        gpm=dict(HOPPER_IDLE_GPM),
    )
    g.update(overrides)
    return g


def throttled_gpu(
    pid: int | None,
    index: int = 0,
    reasons: tuple[str, ...] = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"),
    **overrides: Any,
) -> dict[str, Any]:
    """A busy Hopper held down by the hardware: SM clock 1035 of 1980 MHz, 88 °C, 690 of 700 W, the
    given clock event reasons (default hw_slowdown + hw_thermal_slowdown + hw_power_brake_slowdown),
    util 99 %, GPM SM activity 60 %."""
    g = hopper_gpu(
        index,
        util_gpu=99,
        util_mem=60,
        temperature_c=88,
        power_mw=690_000,
        sm_clock_mhz=1035,
        clock_event_reasons=list(reasons),
        gpm={**HOPPER_IDLE_GPM, "sm_util": 60.0, "sm_occupancy": 30.0, "any_tensor_util": 40.0, "dram_bw_util": 35.0},
        memory_used_mib=60_000,
        processes=_procs(pid, 60_000, 99),
    )
    g.update(overrides)
    return g


def throttled(pid: int | None, **kw: Any) -> dict[str, Any]:
    return _scenario(throttled_gpu(pid, **kw))


def power_capped_gpu(pid: int | None, index: int = 0, **overrides: Any) -> dict[str, Any]:
    """The software power cap alone (sw_power_cap): 700 of 700 W, SM clock 1600 of 1980 MHz, 70 °C,
    util 100 %, GPM SM activity 85 %, tensor 60 %. Normal under heavy load, unlike throttled()."""
    g = hopper_gpu(
        index,
        util_gpu=100,
        util_mem=70,
        temperature_c=70,
        power_mw=700_000,
        sm_clock_mhz=1600,
        clock_event_reasons=["sw_power_cap"],
        gpm={**HOPPER_IDLE_GPM, "sm_util": 85.0, "sm_occupancy": 40.0, "any_tensor_util": 60.0, "dram_bw_util": 50.0},
        memory_used_mib=70_000,
        processes=_procs(pid, 70_000, 100),
    )
    g.update(overrides)
    return g


def power_capped(pid: int | None, **kw: Any) -> dict[str, Any]:
    return _scenario(power_capped_gpu(pid, **kw))


def degraded_link_gpu(pid: int | None, index: int = 0, **overrides: Any) -> dict[str, Any]:
    """An A100 (no GPM) whose PCIe link trained at x4 Gen1 of x16 Gen4; util 40 %."""
    g = gpu(
        index,
        util_gpu=40,
        pcie_gen=1,
        pcie_gen_max=4,
        pcie_width=4,
        pcie_width_max=16,
        memory_used_mib=20_000,
        processes=_procs(pid, 20_000, 40),
    )
    g.update(overrides)
    return g


def degraded_link(pid: int | None, **kw: Any) -> dict[str, Any]:
    return _scenario(degraded_link_gpu(pid, **kw))


def busy_but_hollow_gpu(pid: int | None, index: int = 0, **overrides: Any) -> dict[str, Any]:
    """Busy by NVML's utilisation (95 %: a kernel was running) yet hollow inside: GPM SM activity
    10 %, occupancy 5 %, tensor 0 %, DRAM 3 % (tiny kernels one after another). Full clocks, no
    clock event reason."""
    g = hopper_gpu(
        index,
        util_gpu=95,
        util_mem=3,
        temperature_c=45,
        power_mw=150_000,
        sm_clock_mhz=1980,
        clock_event_reasons=[],
        gpm={**HOPPER_IDLE_GPM, "sm_util": 10.0, "sm_occupancy": 5.0, "any_tensor_util": 0.0, "dram_bw_util": 3.0},
        memory_used_mib=4_000,
        processes=_procs(pid, 4_000, 95),
    )
    g.update(overrides)
    return g


def busy_but_hollow(pid: int | None, **kw: Any) -> dict[str, Any]:
    return _scenario(busy_but_hollow_gpu(pid, **kw))


def tensor_heavy_gpu(pid: int | None, index: int = 0, **overrides: Any) -> dict[str, Any]:
    """Large bf16 matmuls: util 98 %, GPM SM activity 92 %, occupancy 45 %, tensor activity 80 %,
    DRAM 55 %, 600 of 700 W, full clocks, no clock event reason."""
    g = hopper_gpu(
        index,
        util_gpu=98,
        util_mem=55,
        temperature_c=65,
        power_mw=600_000,
        sm_clock_mhz=1980,
        clock_event_reasons=[],
        gpm={**HOPPER_IDLE_GPM, "sm_util": 92.0, "sm_occupancy": 45.0, "any_tensor_util": 80.0, "dram_bw_util": 55.0},
        memory_used_mib=50_000,
        processes=_procs(pid, 50_000, 98),
    )
    g.update(overrides)
    return g


def tensor_heavy(pid: int | None, **kw: Any) -> dict[str, Any]:
    return _scenario(tensor_heavy_gpu(pid, **kw))


def mig_gpu(pids: tuple[int | None, int | None], index: int = 0, **overrides: Any) -> dict[str, Any]:
    """An A100 in MIG mode with two 3g.40gb MIG devices (GPU instances 1 and 2, compute instance 0
    each, 40192 MiB); pids[0] runs in the first (12000 MiB), pids[1] in the second (8000 MiB).
    With MIG on, NVML reports no GPU utilisation and no per-process utilisation.
    `mig_unprivileged=True` makes the parent's process lists answer NO_PERMISSION (not root)."""
    first, second = pids
    procs = []
    if first is not None:
        procs.append({"pid": first, "used_mib": 12_000, "gpu_instance_id": 1, "compute_instance_id": 0})
    if second is not None:
        procs.append({"pid": second, "used_mib": 8_000, "gpu_instance_id": 2, "compute_instance_id": 0})
    g = gpu(
        index,
        memory_used_mib=20_000,
        mig=[
            {
                "uuid": f"MIG-{index:08x}-aaaa-4000-8000-000000000001",
                "gpu_instance_id": 1,
                "compute_instance_id": 0,
                "memory_total_mib": 40_192,
                "memory_used_mib": 12_000,
            },
            {
                "uuid": f"MIG-{index:08x}-aaaa-4000-8000-000000000002",
                "gpu_instance_id": 2,
                "compute_instance_id": 0,
                "memory_total_mib": 40_192,
                "memory_used_mib": 8_000,
            },
        ],
        processes=procs,
    )
    g.update(overrides)
    return g


def mig(pids: tuple[int | None, int | None], **kw: Any) -> dict[str, Any]:
    return _scenario(mig_gpu(pids, **kw))


def throttle_reasons_only(pid: int | None, **kw: Any) -> dict[str, Any]:
    """A driver from before the 535 rename (525.85.12): only nvmlDeviceGetCurrentClocksThrottleReasons
    answers; the GPU is power capped (sw_power_cap), as power_capped()."""
    g = power_capped_gpu(pid, throttle_reasons_only=True, **kw)
    return _scenario(g, driver_version="525.85.12", cuda_driver_version=12000)
