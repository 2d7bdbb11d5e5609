"""The AMD and Intel GPUs' device figures (sources/gpu_sysfs.py) as the fields NVML's GPUs fill in
GpuFacts: utilisation, memory, power, temperature, clocks and why the clocks are held down (not the
PCIe link: see ``with_figures``).

- Utilisation: amdgpu's ``gpu_busy_percent`` (the SMU's estimate of the GFX load: what the idle
  rule reads for a ROCm job, whose per-process utilisation the kernel does not count). Intel's
  drivers print no busy figure: None.
- Memory: VRAM used and total. An APU (VRAM total under ``APU_VRAM_MAX_MIB``: the small carve-out
  the firmware reserves) works mostly in GTT, the system memory the GPU maps: its memory is the
  carve-out and GTT together, as the per-process rows count GTT when there is no VRAM.
- Clock event reasons: Intel's throttle reasons named as NVML's (``INTEL_CLOCK_EVENTS``: what each
  means matches NVML's description; a reason without a match is left out, and a throttle whose every
  reason is left out is None: unknown, never "nothing holds the clocks"). Intel's actual GT clock at
  0 is the GT asleep in RC6: NVML's ``gpu_idle``. amdgpu's ``gpu_metrics`` bits likewise
  (``AMD_CLOCK_EVENTS``); a revision without its ASIC-independent bits says nothing: None, unless
  amdsmi answers (below).
- amdsmi (sources/amdsmi_source.py, the optional ``[amd]`` extra): where it loads, an amdgpu card's
  figures that sysfs did not give are taken from it (``fill_from_amdsmi``: sysfs wins wherever it
  gave one), and its violation flags (MI300 and newer) name why the clocks are held down
  (``AMD_CLOCK_EVENTS`` too). The import is tried once, when the first amdgpu card is read;
  without it nothing is read and the figures are sysfs's alone.
- A runtime-suspended card (powered down: idle) is not read: its utilisation is 0 (amdgpu) and its
  clocks' reason ``gpu_idle``; its memory total is the last one read.

How often: an amdgpu card each poll (at most every ``FIGURES_MIN_INTERVAL_S``: the idle rule needs
the busy figure of the poll; amdgpu_top and nvtop read it as often); an Intel card at most every
``INTEL_FIGURES_EVERY_S`` (i915's throttle and xe's frequency files take a runtime-PM reference: read
less often than the drivers' autosuspend delays, 10 s and 1 s, an idle iGPU can still power down).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sidecar.sources.amdsmi_source import LOADER, AmdSmiLoader, AmdSmiReader
from sidecar.sources.gpu_sysfs import GpuFiguresSampler, GpuSysfsFigures
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.sysfs import SystemGpu
from sidecar.verdict.facts import VENDOR_AMD, VENDOR_INTEL, GpuFacts

__all__ = [
    "AMD_CLOCK_EVENTS",
    "APU_VRAM_MAX_MIB",
    "INTEL_CLOCK_EVENTS",
    "DeviceFigures",
    "fill_from_amdsmi",
    "vendor_gpu_facts",
    "with_figures",
]

APU_VRAM_MAX_MIB = 2048.0  # APUs' default carve-outs are 512 MiB to 1 GiB; no ROCm dGPU has under 2 GiB
FIGURES_MIN_INTERVAL_S = 1.0
INTEL_FIGURES_EVERY_S = 20.0
_INTEL_DRIVERS = ("i915", "xe")
# Intel's throttle reasons (i915 gt/gt0/throttle_reason_*, xe freq0/throttle/reason_*) -> NVML's
# clock event reasons (nvml_names.CLOCK_EVENT_REASONS), by what each says:
INTEL_CLOCK_EVENTS = {
    # the firmware's power budget (RAPL PL1 sustained, PL2 burst; psys: the platform's): NVML's
    # "SW power scaling ... reducing the clocks" at the power limit, the GPU working as designed
    "pl1": "sw_power_cap",
    "pl2": "sw_power_cap",
    "psys_pl1": "sw_power_cap",
    "psys_pl2": "sw_power_cap",
    # the platform's critical power signal: NVML's external power brake
    "psys_crit": "hw_power_brake_slowdown",
    # PL4 (peak current), the VR's current limits and PROCHOT#: the hardware's fast protection,
    # NVML's "HW slowdown ... power draw too high ... or external assertion"
    "pl4": "hw_slowdown",
    "vr_tdc": "hw_slowdown",
    "iccmax": "hw_slowdown",
    "prochot": "hw_slowdown",
    # the firmware's thermal limits (RATL: running-average thermal limit): NVML's SW thermal slowdown
    "thermal": "sw_thermal_slowdown",
    "ratl": "sw_thermal_slowdown",
    "soc_thermal": "sw_thermal_slowdown",
    "soc_avg_thermal": "sw_thermal_slowdown",
    "mem_thermal": "sw_thermal_slowdown",
    # the voltage regulator's thermal alert: a hardware thermal signal
    "vr_thermalert": "hw_thermal_slowdown",
    "vr_thermal": "hw_thermal_slowdown",
}
# amdgpu's SMU_THROTTLER_* bits (sources/amdgpu_metrics.AMD_THROTTLERS) -> NVML's clock event
# reasons, grouped as Intel's are above:
AMD_CLOCK_EVENTS = {
    # package power tracking and the APU's power limits: the firmware's power budget
    **dict.fromkeys(("ppt0", "ppt1", "ppt2", "ppt3", "spl", "fppt", "sppt", "sppt_apu"), "sw_power_cap"),
    # current limits (thermal/electrical design current, peak current control) and PROCHOT: the
    # hardware's fast protection, as Intel's VR TDC, ICCMAX and PROCHOT
    **dict.fromkeys(
        ("tdc_gfx", "tdc_soc", "tdc_mem", "tdc_vdd", "tdc_cvip", "edc_cpu", "edc_gfx", "apcc"), "hw_slowdown"
    ),
    "prochot_cpu": "hw_slowdown",
    "prochot_gfx": "hw_slowdown",
    # the firmware's temperature limits (die, hotspot, memory, SoC, liquid coolant)
    **dict.fromkeys(
        (
            "temp_gpu",
            "temp_core",
            "temp_mem",
            "temp_edge",
            "temp_hotspot",
            "temp_soc",
            "temp_liquid0",
            "temp_liquid1",
        ),
        "sw_thermal_slowdown",
    ),
    # the voltage regulators' temperatures and VRHOT#: a hardware thermal signal, as Intel's VR alert
    **dict.fromkeys(
        ("temp_vr_gfx", "temp_vr_soc", "temp_vr_mem0", "temp_vr_mem1", "vrhot0", "vrhot1"),
        "hw_thermal_slowdown",
    ),
    # the reliability (FIT) limiter: NVML's reliability. PPM (platform power management) has no match.
    "fit": "reliability",
    # amdsmi's violation flags (amdsmi_source.VIOLATION_FLAGS, MI300 and newer), where sysfs said nothing
    "ppt_pwr": "sw_power_cap",  # PVIOL: package power tracking holds the clocks at the power limit
    "socket_thrm": "sw_thermal_slowdown",  # TVIOL: the firmware's socket thermal limit
    "hbm_thrm": "sw_thermal_slowdown",  # the firmware's memory thermal limit (Intel's mem_thermal)
    "prochot_thrm": "hw_slowdown",  # PROCHOT: the hardware's fast protection (Intel's prochot)
    "vr_thrm": "hw_thermal_slowdown",  # the voltage regulator's thermal signal (Intel's vr_thermal)
}
_CLOCK_EVENTS_OF = {"i915": INTEL_CLOCK_EVENTS, "xe": INTEL_CLOCK_EVENTS, "amdgpu": AMD_CLOCK_EVENTS}
# sysfs.SystemGpu.vendor -> GpuFacts.vendor, for the vendors read here (NVIDIA's is NVML's)
_VENDOR_OF = {"AMD": VENDOR_AMD, "Intel": VENDOR_INTEL}


def vendor_gpu_facts(system_gpus: Sequence[SystemGpu], first_index: int) -> tuple[GpuFacts, ...]:
    """The AMD and Intel GPUs of ``system_gpus``, numbered from ``first_index`` in card order, without
    their figures (DeviceFigures.gpus adds them)."""
    out: list[GpuFacts] = []
    for s in system_gpus:
        vendor = _VENDOR_OF.get(s.vendor)
        if vendor is not None:
            out.append(
                GpuFacts(
                    first_index + len(out), name=s.name, pci_bus_id=s.pci, vendor=vendor, driver=s.driver
                )
            )
    return tuple(out)


def _int(x: float | None) -> int | None:
    return None if x is None else round(x)


def _memory(f: GpuSysfsFigures) -> tuple[float | None, float | None]:
    """(used, total) MiB: VRAM; an APU's carve-out and GTT together."""
    used, total = f.vram_used_mib, f.vram_total_mib
    if total is not None and total < APU_VRAM_MAX_MIB and f.gtt_total_mib and f.gtt_total_mib > total:
        gtt_used = f.gtt_used_mib
        used = None if used is None or gtt_used is None else used + gtt_used
        total += f.gtt_total_mib
    return used, total


def _clock_events(f: GpuSysfsFigures) -> tuple[str, ...] | None:
    """NVML's names of why the clocks are held down; None where the driver does not say."""
    names = _CLOCK_EVENTS_OF.get(f.driver or "")
    if names is None:
        return None
    if f.driver in _INTEL_DRIVERS and f.gfx_clock_mhz == 0:
        return ("gpu_idle",)  # the GT in RC6: whatever the throttle files hold, it runs nothing
    if f.throttled is None or f.throttle_reasons is None:
        return None
    named = tuple(dict.fromkeys(n for r in f.throttle_reasons if (n := names.get(r))))
    if f.throttled and not named:
        return None  # throttled for reasons NVML has no name for
    return named


def fill_from_amdsmi(f: GpuSysfsFigures, amd: AmdSmiReader) -> GpuSysfsFigures:
    """``f`` with the figures sysfs did not give taken from amdsmi; sysfs wins wherever it gave one,
    and amdsmi is asked only for what is missing. A runtime-suspended card is not asked (the library
    would wake it)."""
    pci = f.pci
    if pci is None or f.runtime_suspended or pci not in amd.pcis:
        return f
    changes: dict[str, object] = {}
    if f.busy_pct is None or f.memory_busy_pct is None:
        gfx_pct, umc_pct = amd.activity_pct(pci)
        changes.update(busy_pct=f.busy_pct if f.busy_pct is not None else gfx_pct)
        changes.update(memory_busy_pct=f.memory_busy_pct if f.memory_busy_pct is not None else umc_pct)
    if f.vram_used_mib is None or f.vram_total_mib is None:
        used_mib, total_mib = amd.vram_mib(pci)
        changes.update(vram_used_mib=f.vram_used_mib if f.vram_used_mib is not None else used_mib)
        changes.update(vram_total_mib=f.vram_total_mib if f.vram_total_mib is not None else total_mib)
    if f.power_limit_w is None:
        changes.update(power_limit_w=amd.power_cap_w(pci))
    if f.throttle_reasons is None:
        violations = amd.violations(pci)
        if violations is not None:
            changes.update(throttled=bool(violations.active), throttle_reasons=violations.active)
    return replace(f, **changes) if changes else f  # type: ignore[arg-type]


def with_figures(gpu: GpuFacts, f: GpuSysfsFigures | None) -> GpuFacts:
    """``gpu`` with ``f``'s figures (None: not read, ``gpu`` as it is)."""
    if f is None:
        return gpu
    if f.runtime_suspended:
        return replace(
            gpu,
            util=0.0 if f.driver == "amdgpu" else None,
            mem_used_mib=None,
            mem_total_mib=_memory(f)[1],
            clock_event_reasons=("gpu_idle",),
        )
    used, total = _memory(f)
    return replace(
        gpu,
        util=f.busy_pct,
        mem_util=f.memory_busy_pct,
        mem_used_mib=used,
        mem_total_mib=total,
        sm_clock_mhz=_int(f.gfx_clock_mhz),
        sm_clock_max_mhz=_int(f.gfx_clock_max_mhz),
        mem_clock_mhz=_int(f.mem_clock_mhz),
        clock_event_reasons=_clock_events(f),
        power_w=f.power_w,
        power_limit_w=f.power_limit_w,
        temperature_c=f.temperature_c,
        # No PCIe link: the GPU function of Radeon and Arc cards sits behind the card's own PCIe
        # switch, and its link is that internal one (an Arc's reads Gen1 x1), not the slot's, which
        # pcie-degraded would misread as a degraded link.
    )


@dataclass
class _Card:
    sampler: GpuFiguresSampler  # its own: power from energy needs the card's previous reading
    read_ns: int | None = None
    figures: GpuSysfsFigures | None = None


class DeviceFigures:
    """Each AMD and Intel card's latest figures, read when due (see the module's docstring), keyed
    by PCI address. One for a poller; discovery's jobs share one (a card read once a poll, not once
    a job). Not thread-safe: the polls that share it run one at a time."""

    def __init__(
        self,
        *,
        host: HostPaths = HOST,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        amdsmi: AmdSmiLoader = LOADER,
    ) -> None:
        self._host = host
        self._clock_ns = clock_ns
        self._amdsmi = amdsmi  # asked for its reader when the first amdgpu card is read
        self._cards: dict[str, _Card] = {}
        self._made: tuple[tuple[GpuFacts, ...], tuple[GpuSysfsFigures | None, ...], tuple[GpuFacts, ...]]
        self._made = ((), (), ())
        self._base: tuple[tuple[object, ...], tuple[GpuFacts, ...]] = ((), ())

    def _due(self, card: _Card, driver: str | None, now_ns: int) -> bool:
        every_s = INTEL_FIGURES_EVERY_S if driver in _INTEL_DRIVERS else FIGURES_MIN_INTERVAL_S
        return card.read_ns is None or now_ns - card.read_ns >= every_s * 1e9

    def _read(self, s: SystemGpu, now_ns: int) -> GpuSysfsFigures | None:
        card = self._cards.get(s.pci or "")
        if card is None:
            card = self._cards[s.pci or ""] = _Card(
                GpuFiguresSampler(host=self._host, clock_ns=self._clock_ns)
            )
        if self._due(card, s.driver, now_ns):
            read = card.sampler.sample([s])
            fresh = read[0] if read else None
            if fresh is not None and s.driver == "amdgpu" and not fresh.runtime_suspended:
                amd = self._amdsmi.get()  # None (for good) where amdsmi did not load
                if amd is not None:
                    fresh = fill_from_amdsmi(fresh, amd)
            if fresh is not None and fresh.runtime_suspended and card.figures is not None:
                # powered down: the memory total it had is still its total
                last = card.figures
                fresh = replace(fresh, vram_total_mib=last.vram_total_mib, gtt_total_mib=last.gtt_total_mib)
            card.read_ns, card.figures = now_ns, fresh
        return card.figures

    def gpus(self, system_gpus: Sequence[SystemGpu], first_index: int) -> tuple[GpuFacts, ...]:
        """vendor_gpu_facts of ``system_gpus`` numbered from ``first_index``, with their figures; the
        same tuple as the last call's while neither the GPUs nor their figures changed (the facts'
        caches compare GPUs by identity)."""
        key = (first_index, *system_gpus)
        last_key, base = self._base
        if len(key) != len(last_key) or not all(a is b or a == b for a, b in zip(key, last_key, strict=True)):
            base = vendor_gpu_facts(system_gpus, first_index)
            self._base = (key, base)
        now_ns = self._clock_ns()
        by_pci = {s.pci: s for s in system_gpus if s.pci}
        figures = tuple(
            self._read(s, now_ns) if (s := by_pci.get(g.pci_bus_id or "")) is not None else None for g in base
        )
        if len(self._cards) > len(by_pci):  # cards gone (hot-unplug, a driver unbound)
            self._cards = {pci: c for pci, c in self._cards.items() if pci in by_pci}
        last_base, last_figures, last_out = self._made
        if last_base is base and len(figures) == len(last_figures):
            if all(a is b or a == b for a, b in zip(figures, last_figures, strict=True)):
                return last_out
        out = tuple(with_figures(g, f) for g, f in zip(base, figures, strict=True))
        self._made = (base, figures, out)
        return out
