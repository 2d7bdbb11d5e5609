"""AMD and Intel GPUs' device figures as their facts (issue 41; sidecar/poll/vendor_figures.py): a
fixture /sys with an MI300X, a GTT-only APU, an i915 iGPU and an xe card read through DeviceFigures
as the poller does (amdgpu each poll, Intel every 20 s, a runtime-suspended card never), Intel's
throttle reasons named as NVML's clock event reasons, and the throttled rule on an Intel GPU."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

from hostfs.paths import HostPaths
from sidecar.poll.vendor_figures import (
    INTEL_FIGURES_EVERY_S,
    DeviceFigures,
    with_figures,
)
from sidecar.sources.gpu_sysfs import GpuSysfsFigures
from sidecar.sources.sysfs import list_system_gpus
from sidecar.verdict import GpuFacts, ProcGpu, decide
from tests.fakenvml import make_fake_sysfs
from tests.helpers.gpu_sysfs_trees import APU, I915_IGPU, MI300X, XE_DGPU
from tests.helpers.verdict_facts import en, facts, proc, zh

S = 1_000_000_000  # ns


class Clock:
    def __init__(self) -> None:
        self.ns = 100 * S

    def __call__(self) -> int:
        return self.ns


def _cards(tmp_path: Path):
    cards = [copy.deepcopy(c) for c in (MI300X, APU, I915_IGPU, XE_DGPU)]
    for position, card in enumerate(cards):
        card["card"] = f"card{position}"
    root = make_fake_sysfs(tmp_path / "sys", cards)
    return root, HostPaths(sysfs=str(root))


def _device(root: Path, pci: str) -> Path:
    return root / "devices" / "pci0000:00" / pci


def test_each_vendors_figures_become_the_gpus_facts_and_what_it_cannot_tell_stays_none(tmp_path):
    root, host = _cards(tmp_path)
    listed = list_system_gpus(host=host)
    clock = Clock()
    devices = DeviceFigures(host=host, clock_ns=clock)
    mi, apu, igpu, xe = devices.gpus(listed, 1)  # after NVML's GPU 0
    assert [g.index for g in (mi, apu, igpu, xe)] == [1, 2, 3, 4]
    assert (mi.util, mi.mem_util, mi.mem_used_mib, mi.mem_total_mib) == (87.0, 34.0, 80 * 1024, 192 * 1024)
    assert (mi.power_w, mi.power_limit_w, mi.temperature_c) == (412.0, 750.0, 61.0)  # junction: no edge
    assert (mi.sm_clock_mhz, mi.sm_clock_max_mhz, mi.mem_clock_mhz) == (1311, 2100, 1300)
    # The card's internal link, not the slot's: left out (pcie-degraded would misread it).
    assert (mi.pcie_link_gen, mi.pcie_link_width, xe.pcie_link_gen, xe.pcie_link_width) == (None,) * 4
    assert mi.clock_event_reasons is None  # no gpu_metrics file in the fixture: unknown, never ()
    # The APU: a 512 MiB carve-out, its working set in GTT: both are its memory.
    assert (apu.util, apu.mem_used_mib, apu.mem_total_mib) == (12.0, 256 + 6 * 1024, 512 + 16 * 1024)
    # i915: no busy figure (None, never 0); PL1 and thermal throttling named as NVML's reasons.
    assert (igpu.util, igpu.mem_used_mib, igpu.sm_clock_mhz, igpu.sm_clock_max_mhz) == (None, None, 300, 1350)
    assert igpu.clock_event_reasons == ("sw_power_cap", "sw_thermal_slowdown")
    # xe: VRAM size, no used figure; power needs a second energy reading.
    assert (xe.util, xe.mem_used_mib, xe.mem_total_mib, xe.power_w, xe.power_limit_w) == (
        None,
        None,
        12 * 1024,
        None,
        190.0,
    )
    assert xe.clock_event_reasons == () and xe.temperature_c == 54.0

    # Half a second on: nothing read again, the very same tuple (the facts' caches compare by `is`).
    clock.ns += S // 2
    (_device(root, MI300X["pci"]) / "gpu_busy_percent").write_text("3\n")
    assert devices.gpus(listed, 1) == (mi, apu, igpu, xe)
    assert devices.gpus(listed, 1) is devices.gpus(listed, 1)
    # A second on: amdgpu read again; the Intel cards not (their files wake the GPU: every 20 s).
    clock.ns += S
    hwmon = next((_device(root, XE_DGPU["pci"]) / "hwmon").iterdir())
    (hwmon / "energy1_input").write_text(f"{123456789 + 150 * 20_000_000}\n")  # 150 W over 20 s
    mi2, _, _, xe2 = devices.gpus(listed, 1)
    assert mi2.util == 3.0 and xe2 == xe and xe2.power_w is None
    clock.ns = 100 * S + int(INTEL_FIGURES_EVERY_S * S)
    xe3 = devices.gpus(listed, 1)[3]
    assert xe3.power_w == 150.0


def test_a_runtime_suspended_card_is_not_read_and_is_idle(tmp_path):
    root, host = _cards(tmp_path)
    listed = list_system_gpus(host=host)
    clock = Clock()
    devices = DeviceFigures(host=host, clock_ns=clock)
    devices.gpus(listed, 0)
    power = _device(root, MI300X["pci"]) / "power"
    power.mkdir()
    (power / "runtime_status").write_text("suspended\n")
    clock.ns += 2 * S
    mi = devices.gpus(listed, 0)[0]
    assert (mi.util, mi.clock_event_reasons, mi.mem_used_mib, mi.mem_total_mib, mi.power_w) == (
        0.0,
        ("gpu_idle",),
        None,
        192 * 1024,  # the total it had
        None,
    )
    (power / "runtime_status").write_text("active\n")
    clock.ns += 2 * S
    assert devices.gpus(listed, 0)[0].util == 87.0


INTEL = GpuSysfsFigures("card0", "0000:00:02.0", "Intel", "xe", gfx_clock_mhz=1500.0)
GPU = GpuFacts(1, pci_bus_id="0000:00:02.0", vendor="intel", driver="xe")


def test_intel_throttle_reasons_map_to_nvmls_or_stay_unknown():
    def reasons(**kw):
        return with_figures(GPU, replace(INTEL, **kw)).clock_event_reasons

    assert reasons(throttled=False, throttle_reasons=()) == ()
    assert reasons(throttled=True, throttle_reasons=("pl1", "pl2", "prochot")) == (
        "sw_power_cap",
        "hw_slowdown",
    )
    assert reasons(throttled=True, throttle_reasons=("vr_thermalert",)) == ("hw_thermal_slowdown",)
    # Throttled for a reason NVML has no name for: unknown, never "nothing holds the clocks".
    assert reasons(throttled=True, throttle_reasons=("p0_freq",)) is None
    assert reasons(throttled=None, throttle_reasons=None) is None
    # The GT asleep (actual clock 0): idle, whatever the throttle files hold.
    assert reasons(throttled=True, throttle_reasons=("thermal",), gfx_clock_mhz=0.0) == ("gpu_idle",)
    assert with_figures(GPU, None) is GPU


def test_throttled_on_an_intel_gpu_points_at_its_drivers_files_not_nvidia_smi():
    hot = replace(GPU, clock_event_reasons=("sw_thermal_slowdown",), sm_clock_mhz=800, sm_clock_max_mhz=2850)
    row = ProcGpu(1, 500.0, 40.0, None, "intel", GPU.pci_bus_id)
    f = facts(proc(gpu=[row]), gpus=(hot,), nvml_ok=False)
    (w,) = [w for w in decide(f).warnings if w.code == "throttled"]
    hint = en(w.hint)
    assert (
        "nvidia-smi" not in hint
        and "/sys/bus/pci/devices/0000:00:02.0/" in hint
        and "800 MHz" in en(w.message)
    )
    # Its clock is the GT's: "SM" is NVIDIA's word, NVIDIA's GPUs keep it.
    assert "GPU clock 800 MHz of 2850 MHz" in en(w.message) and "SM" not in en(w.message)
    assert "GPU 时钟 800 MHz" in zh(w.message) and "SM" not in zh(w.message)
    nvidia = replace(hot, vendor="nvidia", driver=None)
    (w,) = [
        w
        for w in decide(facts(proc(gpu=[replace(row, vendor="nvidia")]), gpus=(nvidia,))).warnings
        if w.code == "throttled"
    ]
    assert "SM clock 800 MHz of 2850 MHz" in en(w.message)
    # Asleep (gpu_idle): a slowdown that costs the job nothing.
    idle = replace(hot, clock_event_reasons=("gpu_idle", "sw_thermal_slowdown"))
    assert not [
        w
        for w in decide(facts(proc(gpu=[row]), gpus=(idle,), nvml_ok=False)).warnings
        if w.code == "throttled"
    ]


def test_discoverys_jobs_share_one_reading_of_each_card(tmp_path):
    """Every job's poller takes the cards' figures from discovery's one DeviceFigures: a card read
    once a poll, and one GPU tuple for all the jobs (their samples share the packed rows)."""
    from sidecar.poll.discovery import JobsPoller

    root, sys_host = _cards(tmp_path)
    host = HostPaths(procfs="/proc", sysfs=sys_host.sysfs)
    listed = list_system_gpus(host=host)
    discovery = JobsPoller(nvml_source=object(), system_gpus_fn=list, uid=None, host=host)
    first, second = discovery._new_poller(101), discovery._new_poller(102)
    mine = discovery._vendor.gpus(listed, 0)
    assert first._vendor.gpus(listed, 0) is mine and second._vendor.gpus(listed, 0) is mine
    assert mine[0].util == 87.0
