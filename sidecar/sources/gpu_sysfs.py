"""Device figures of AMD and Intel GPUs from sysfs and hwmon, the way the kernel's drivers print them.

NVML answers for NVIDIA cards; for the others the drivers' own sysfs files are the figures a tool
without a vendor SDK can read (``sidecar/sources/sysfs.py`` lists the cards, this reads each one):

- amdgpu (``drivers/gpu/drm/amd/pm/amdgpu_pm.c``, ``amdgpu_vram_mgr.c``, ``amdgpu_gtt_mgr.c``):
  ``device/gpu_busy_percent`` and ``mem_busy_percent``; ``mem_info_{vram,vis_vram,gtt}_{used,total}``
  (bytes); ``pp_dpm_sclk``/``pp_dpm_mclk`` (the DPM levels, the current one starred); ``unique_id``,
  ``product_name``; hwmon ``power1_average`` or ``power1_input`` (µW; on an APU it includes the
  CPU), ``power1_cap`` (µW), ``temp<n>_input`` (m°C; 1 edge, 2 junction, 3 mem, labelled by
  ``temp<n>_label``; temp1 is hidden on the MI300 family), ``freq1_input`` sclk and ``freq2_input``
  mclk (Hz); whether and why its clocks are held down, from the binary ``gpu_metrics``
  (``sidecar/sources/amdgpu_metrics.py``: the kernel's ``SMU_THROTTLER_*`` names where the struct's
  revision has ASIC-independent bits; unknown for the others).
- i915: the card's ``gt/gt0/rps_{act,cur,RP0,max}_freq_mhz`` (older kernels: the card's
  ``gt_*_freq_mhz``), ``gt/gt0/throttle_reason_*`` (0 or 1); on discrete cards hwmon ``energy1_input``
  (µJ, cumulative) and ``power1_max`` (PL1, µW; 0 = disabled). Mainline i915 prints no local-memory
  size; Intel's out-of-tree i915 prints the card's ``lmem_total_bytes``.
- xe: ``device/tile<t>/gt<g>/freq0/{act,cur,rp0,max}_freq`` (MHz) and ``freq0/throttle/{status,
  reason_*}``; ``device/tile<t>/physical_vram_size_bytes`` (kernels that print it; the physical
  size, reserved pages included); hwmon ``energy1_input`` (card) or ``energy2_input`` (package),
  ``power1_max``, ``temp2_input`` (package) and ``temp3_input`` (VRAM).

A card the kernel has runtime-suspended (``device/power/runtime_status`` reads ``suspended``: powered
down, nothing runs on it) is not read: amdgpu's pm files and xe's frequency files take a runtime-PM
reference, which wakes it (kernels before amdgpu's ``amdgpu_pm_get_access_if_active``), and a monitor
must not keep a laptop's GPU awake. Its figures say ``runtime_suspended`` and nothing else.

Every figure is optional: a file that is absent, unreadable, over ``sysfs.MAX_FILE_BYTES``, malformed or
out of its physical range is None, never 0. A power figure from an energy counter needs two
readings: ``GpuFiguresSampler`` keeps the previous one per device. Nothing here raises; reads stay
inside the card's device folder (its real path must lie under the sysfs root) and open no link.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from hostfs.paths import HOST, HostPaths
from sidecar.sources.amdgpu_metrics import ThrottleResidency, read_gpu_metrics, residency_reasons
from sidecar.sources.sysfs import (
    SystemGpu,
    list_system_gpus,
    listdir_bounded,
    read_product_name,
    read_text_bounded,
    text_value,
)

MAX_HWMON_DIRS = 8  # hwmon devices of one card (i915: the device's and one per GT)
MAX_HWMON_ENTRIES = 512  # files in one hwmon folder (amdgpu: ~40)
MAX_TEMPERATURES = 16
MAX_TILES = 8
_MIB = 1024 * 1024
_INT = re.compile(r"-?[0-9]{1,20}")
_HWMON = re.compile(r"hwmon[0-9]{1,6}")
_TEMP_INPUT = re.compile(r"temp([0-9]{1,3})_input")
_DPM_LEVEL = re.compile(r"\s*([0-9A-Za-z]{1,4}):\s*([0-9]{1,7})\s*mhz\s*(\*?)\s*", re.IGNORECASE)
_LINK_SPEED = re.compile(r"([0-9]{1,3}(?:\.[0-9]{1,3})?) GT/s(?: PCIe)?")
# Channels the drivers document, for a hwmon that prints no temp<n>_label (older kernels).
_TEMP_CHANNELS = {
    "amdgpu": {1: "edge", 2: "junction", 3: "mem"},
    "xe": {2: "pkg", 3: "vram"},
}
_CORE_SENSORS = ("edge", "junction", "pkg")  # in the order `temperature_c` prefers them
_HOTSPOT_SENSORS = ("junction", "hotspot")
_MEMORY_SENSORS = ("mem", "vram")
_INTEL_DRIVERS = ("i915", "xe")


@dataclass(frozen=True, slots=True)
class TemperatureReading:
    sensor: str  # the hwmon label ("edge", "junction", "mem"), else the documented channel, else "temp<n>"
    temperature_c: float


@dataclass(frozen=True, slots=True)
class GpuSysfsFigures:
    """One card's device figures at one instant (None: the driver does not give it, or it could
    not be read)."""

    card: str  # "card0"
    pci: str | None  # "0000:c1:00.0"
    vendor: str  # "AMD", "Intel", ... (sysfs.VENDORS)
    driver: str | None  # "amdgpu", "i915", "xe"
    hwmon: str | None = None  # the name of the hwmon device read ("amdgpu", "i915", "xe")
    busy_pct: float | None = None  # amdgpu gpu_busy_percent: the SMU's estimate of the GFX load
    memory_busy_pct: float | None = None  # amdgpu mem_busy_percent
    vram_total_mib: float | None = None
    vram_used_mib: float | None = None
    visible_vram_total_mib: float | None = None  # the CPU-visible part (amdgpu)
    visible_vram_used_mib: float | None = None
    gtt_total_mib: float | None = None  # system memory the GPU maps (amdgpu; an APU's working set)
    gtt_used_mib: float | None = None
    power_w: float | None = None
    power_source: str | None = None  # "power1_average", "power1_input", or the energy file
    energy_uj: int | None = None  # cumulative counter as read (i915, xe); the sampler turns it to power
    energy_source: str | None = None  # "energy1_input" (card) or "energy2_input" (package)
    power_limit_w: float | None = None  # amdgpu power1_cap, Intel power1_max (PL1); None: no limit set
    temperatures: tuple[TemperatureReading, ...] = ()
    gfx_clock_mhz: float | None = (
        None  # actual: amdgpu freq1_input (else the starred sclk level), Intel act_freq
    )
    gfx_clock_max_mhz: float | None = None  # amdgpu top sclk level, Intel RP0 (else the max request)
    gfx_dpm_level: str | None = None  # amdgpu's starred pp_dpm_sclk level ("2", "S" for deep sleep)
    mem_clock_mhz: float | None = None  # amdgpu freq2_input, else the starred mclk level
    mem_clock_max_mhz: float | None = None
    throttled: bool | None = None  # the driver's throttle status; None where it does not say
    # the driver's names: Intel's files' ("pl1", "thermal"), amdgpu's SMU_THROTTLER_* bits ("ppt0",
    # "temp_hotspot") or residency counters ("ppt_pwr"); () not throttled (or for no reason it
    # names); None unknown
    throttle_reasons: tuple[str, ...] | None = None
    # MI300's gpu_metrics residency counters as read; the sampler turns two into throttle_reasons
    throttle_residency: ThrottleResidency | None = None
    unique_id: str | None = None  # amdgpu unique_id (16 hex digits)
    product_name: str | None = None  # amdgpu product_name (from the board's FRU), printable ASCII
    link_speed_gts: float | None = None  # PCIe current_link_speed, GT/s
    link_width: int | None = None  # current_link_width, lanes
    link_max_speed_gts: float | None = None
    link_max_width: int | None = None
    runtime_suspended: bool = False  # powered down by runtime PM: idle, its other figures not read

    def _temperature(self, sensors: tuple[str, ...]) -> float | None:
        by_sensor = {t.sensor: t.temperature_c for t in self.temperatures}
        return next((by_sensor[s] for s in sensors if s in by_sensor), None)

    @property
    def temperature_c(self) -> float | None:
        """The die's: edge, else junction (the MI300 family hides edge), else package, else the
        first sensor that is not the memory's."""
        core = self._temperature(_CORE_SENSORS)
        if core is not None:
            return core
        return next((t.temperature_c for t in self.temperatures if t.sensor not in _MEMORY_SENSORS), None)

    @property
    def hotspot_temperature_c(self) -> float | None:
        return self._temperature(_HOTSPOT_SENSORS)

    @property
    def memory_temperature_c(self) -> float | None:
        return self._temperature(_MEMORY_SENSORS)


# --------------------------------------------------------------------------- bounded reads


def _int(path: str) -> int | None:
    text = read_text_bounded(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if _INT.fullmatch(text) else None


def _scaled(path: str, divisor: float, low: float, high: float) -> float | None:
    """The file's integer over ``divisor``, when it lies in [low, high] (a physical range)."""
    value = _int(path)
    if value is None:
        return None
    scaled = value / divisor
    return scaled if low <= scaled <= high else None


def _mib(path: str) -> float | None:
    return _scaled(path, _MIB, 0, 2**44)  # 16 PiB: anything above is not a GPU's memory


def _pct(path: str) -> float | None:
    return _scaled(path, 1, 0, 100)


def _real_dir_under(path: str, root: str) -> str | None:
    """``path`` resolved, when it is a directory under ``root`` (resolved); a link loop resolves to
    a path that is no directory."""
    real = os.path.realpath(path)
    if os.path.commonpath([real, root]) != root or not os.path.isdir(real):
        return None
    return real


def _is_real_dir(path: str) -> bool:
    """A directory and not a link to one: the kernel makes hwmon and tile folders as real ones."""
    return not os.path.islink(path) and os.path.isdir(path)


def _hwmon_dirs(device: str) -> list[str]:
    """``device/hwmon/hwmon<n>`` (that folder holds nothing else), in numeric order, at most
    MAX_HWMON_DIRS."""
    base = os.path.join(device, "hwmon")
    names = [n for n in listdir_bounded(base, 4 * MAX_HWMON_DIRS) if _HWMON.fullmatch(n)]
    names.sort(key=lambda n: int(n[len("hwmon") :]))
    return [os.path.join(base, n) for n in names if _is_real_dir(os.path.join(base, n))][:MAX_HWMON_DIRS]


# --------------------------------------------------------------------------- hwmon


@dataclass(frozen=True, slots=True)
class _Hwmon:
    name: str | None
    power_w: float | None
    power_source: str | None
    energy_uj: int | None
    energy_source: str | None
    power_limit_w: float | None
    temperatures: tuple[TemperatureReading, ...]
    sclk_mhz: float | None
    mclk_mhz: float | None


def _pick_hwmon(device: str, driver: str | None) -> str | None:
    """The card's hwmon folder: the one named as the driver (i915 also has one per GT, "i915_gt0"),
    else the first."""
    dirs = _hwmon_dirs(device)
    for folder in dirs:
        name = text_value(os.path.join(folder, "name"), 64)
        if name is not None and name == driver:
            return folder
    return dirs[0] if dirs else None


def _temperatures(folder: str, names: list[str], driver: str | None) -> tuple[TemperatureReading, ...]:
    channels = sorted({int(m.group(1)) for n in names if (m := _TEMP_INPUT.fullmatch(n))})
    documented = _TEMP_CHANNELS.get(driver or "", {})
    out: list[TemperatureReading] = []
    for channel in channels[:MAX_TEMPERATURES]:
        celsius = _scaled(os.path.join(folder, f"temp{channel}_input"), 1000, -100, 300)
        if celsius is None:
            continue
        label = text_value(os.path.join(folder, f"temp{channel}_label"), 32)
        sensor = (label or documented.get(channel) or f"temp{channel}").lower()
        out.append(TemperatureReading(sensor, celsius))
    return tuple(out)


_POWER_W_MAX = 100_000.0  # no card draws 100 kW: a larger figure is not a reading


def _watts(path: str) -> float | None:
    return _scaled(path, 1e6, 0, _POWER_W_MAX)


def _read_hwmon(device: str, driver: str | None) -> _Hwmon | None:
    folder = _pick_hwmon(device, driver)
    if folder is None:
        return None
    names = listdir_bounded(folder, MAX_HWMON_ENTRIES)
    power_w, power_source = None, None
    for source in ("power1_average", "power1_input"):  # "not all products support both" (amdgpu)
        power_w = _watts(os.path.join(folder, source)) if source in names else None
        if power_w is not None:
            power_source = source
            break
    energy_uj, energy_source = None, None
    for source in ("energy1_input", "energy2_input"):  # xe: card, else package
        energy_uj = _int(os.path.join(folder, source)) if source in names else None
        if energy_uj is not None and energy_uj >= 0:
            energy_source = source
            break
        energy_uj = None
    # amdgpu's limit is power1_cap; Intel's sustained one is power1_max (xe's power1_cap is PL2, a burst).
    limit_file = "power1_max" if driver in _INTEL_DRIVERS else "power1_cap"
    limit_w = _watts(os.path.join(folder, limit_file))
    return _Hwmon(
        name=text_value(os.path.join(folder, "name"), 64),
        power_w=power_w,
        power_source=power_source,
        energy_uj=energy_uj,
        energy_source=energy_source,
        power_limit_w=limit_w or None,  # 0: the limit is disabled, not a limit of 0 W
        temperatures=_temperatures(folder, names, driver),
        sclk_mhz=_scaled(os.path.join(folder, "freq1_input"), 1e6, 0, 100_000),
        mclk_mhz=_scaled(os.path.join(folder, "freq2_input"), 1e6, 0, 100_000),
    )


# --------------------------------------------------------------------------- amdgpu


@dataclass(frozen=True, slots=True)
class DpmLevels:
    current_level: str | None  # the starred level's name: "0".."7", or "S" (deep sleep)
    current_mhz: float | None
    max_mhz: float | None  # the highest level


def parse_dpm_levels(text: str | None) -> DpmLevels | None:
    """``pp_dpm_sclk``/``pp_dpm_mclk``: ``<level>: <n>Mhz`` a line, the current one ending in ``*``.
    None when no line is one; a file with two starred lines has no current level."""
    if text is None:
        return None
    levels: list[tuple[str, int, bool]] = []
    for line in text.splitlines()[:64]:
        if not line.strip():
            continue
        m = _DPM_LEVEL.fullmatch(line)
        if m is None:
            return None  # a line of another format: trust none of it
        levels.append((m.group(1), int(m.group(2)), m.group(3) == "*"))
    if not levels:
        return None
    starred = [level for level in levels if level[2]]
    current = starred[0] if len(starred) == 1 else None
    return DpmLevels(
        current_level=current[0] if current else None,
        current_mhz=float(current[1]) if current else None,
        max_mhz=float(max(mhz for _, mhz, _ in levels)),
    )


def _amdgpu_figures(device: str) -> dict[str, object]:
    def at(name: str) -> str:
        return os.path.join(device, name)

    sclk = parse_dpm_levels(read_text_bounded(at("pp_dpm_sclk")))
    mclk = parse_dpm_levels(read_text_bounded(at("pp_dpm_mclk")))
    unique_id = text_value(at("unique_id"), 32)
    metrics = read_gpu_metrics(device)
    return {
        "busy_pct": _pct(at("gpu_busy_percent")),
        "memory_busy_pct": _pct(at("mem_busy_percent")),
        "vram_total_mib": _mib(at("mem_info_vram_total")),
        "vram_used_mib": _mib(at("mem_info_vram_used")),
        "visible_vram_total_mib": _mib(at("mem_info_vis_vram_total")),
        "visible_vram_used_mib": _mib(at("mem_info_vis_vram_used")),
        "gtt_total_mib": _mib(at("mem_info_gtt_total")),
        "gtt_used_mib": _mib(at("mem_info_gtt_used")),
        "gfx_clock_mhz": sclk.current_mhz if sclk else None,  # replaced by hwmon's freq1_input
        "gfx_clock_max_mhz": sclk.max_mhz if sclk else None,
        "gfx_dpm_level": sclk.current_level if sclk else None,
        "mem_clock_mhz": mclk.current_mhz if mclk else None,
        "mem_clock_max_mhz": mclk.max_mhz if mclk else None,
        "unique_id": unique_id if unique_id and re.fullmatch(r"[0-9a-fA-F]{1,32}", unique_id) else None,
        "product_name": read_product_name(device),
        "throttled": metrics.throttled if metrics else None,
        "throttle_reasons": metrics.reasons if metrics else None,
        "throttle_residency": metrics.residency if metrics else None,
    }


# --------------------------------------------------------------------------- Intel


def _first_mhz(*paths: str) -> float | None:
    """The first of ``paths`` that holds a clock in MHz (0 is one: the GT asleep in RC6)."""
    for path in paths:
        mhz = _scaled(path, 1, 0, 100_000)
        if mhz is not None:
            return mhz
    return None


def _throttle(
    folder: str, status_name: str, reason_prefix: str
) -> tuple[bool | None, tuple[str, ...] | None]:
    """Intel's throttle files: ``status`` and one ``<prefix><reason>`` a reason, each 0 or 1."""
    status = _int(os.path.join(folder, status_name))
    if status not in (0, 1):
        return None, None
    reasons = []
    for name in listdir_bounded(folder, 256):
        if name.startswith(reason_prefix) and name != status_name and _int(os.path.join(folder, name)) == 1:
            reasons.append(name[len(reason_prefix) :])
    return status == 1, tuple(reasons)


def _i915_figures(card_dir: str) -> dict[str, object]:
    gt0 = os.path.join(card_dir, "gt", "gt0")  # the render GT

    def gt(name: str) -> str:
        return os.path.join(gt0, name)

    def card(name: str) -> str:  # older kernels: the card's gt_*_freq_mhz only
        return os.path.join(card_dir, name)

    throttled, reasons = _throttle(gt0, "throttle_reason_status", "throttle_reason_")
    lmem_mib = _mib(card("lmem_total_bytes"))  # out-of-tree i915 only
    return {
        "gfx_clock_mhz": _first_mhz(gt("rps_act_freq_mhz"), card("gt_act_freq_mhz")),
        "gfx_clock_max_mhz": _first_mhz(
            gt("rps_RP0_freq_mhz"), card("gt_RP0_freq_mhz"), gt("rps_max_freq_mhz"), card("gt_max_freq_mhz")
        ),
        "throttled": throttled,
        "throttle_reasons": reasons,
        "vram_total_mib": lmem_mib or None,  # 0: no local memory (an integrated part)
    }


def _xe_figures(device: str) -> dict[str, object]:
    # Probed by name, not listed: the device folder holds a hundred other entries. Ids start at 0.
    tiles = [t for t in (f"tile{i}" for i in range(MAX_TILES)) if _is_real_dir(os.path.join(device, t))]
    # tile0/gt0 is the primary (render) GT; gt1 is the media GT on the parts that split them.
    freq = os.path.join(device, tiles[0] if tiles else "tile0", "gt0", "freq0")
    throttled, reasons = _throttle(os.path.join(freq, "throttle"), "status", "reason_")
    sizes = [_mib(os.path.join(device, t, "physical_vram_size_bytes")) for t in tiles]
    known = [s for s in sizes if s is not None]
    return {
        "gfx_clock_mhz": _first_mhz(os.path.join(freq, "act_freq")),
        "gfx_clock_max_mhz": _first_mhz(os.path.join(freq, "rp0_freq"), os.path.join(freq, "max_freq")),
        "throttled": throttled,
        "throttle_reasons": reasons,
        # Every tile's or none: a sum over some tiles would be a wrong total.
        "vram_total_mib": sum(known) if known and len(known) == len(sizes) else None,
    }


# --------------------------------------------------------------------------- one card


def _link_speed(path: str) -> float | None:
    text = read_text_bounded(path)
    m = _LINK_SPEED.fullmatch(text.strip()) if text else None
    return float(m.group(1)) if m else None


def _link_width(path: str) -> int | None:
    width = _int(path)
    return width if width is not None and 1 <= width <= 64 else None


def _runtime_suspended(device: str) -> bool:
    """Runtime PM has powered the device down (reading power/runtime_status wakes nothing)."""
    text = read_text_bounded(os.path.join(device, "power", "runtime_status"))
    return text is not None and text.strip() == "suspended"


def read_gpu_figures(gpu: SystemGpu, *, host: HostPaths = HOST) -> GpuSysfsFigures | None:
    """What ``gpu``'s driver prints about it now; None when its card folder is gone or resolves
    outside the sysfs root. Energy counters are returned as read (``energy_uj``): power from them
    is ``GpuFiguresSampler``'s."""
    root = os.path.realpath(host.sysfs)
    card_dir = _real_dir_under(host.sys_path("class", "drm", gpu.card), root)
    device = _real_dir_under(host.sys_path("class", "drm", gpu.card, "device"), root)
    if card_dir is None or device is None:
        return None
    if _runtime_suspended(device):
        return GpuSysfsFigures(gpu.card, gpu.pci, gpu.vendor, gpu.driver, runtime_suspended=True)
    fields: dict[str, object] = {}
    if gpu.driver == "amdgpu":
        fields.update(_amdgpu_figures(device))
    elif gpu.driver == "i915":
        fields.update(_i915_figures(card_dir))
    elif gpu.driver == "xe":
        fields.update(_xe_figures(device))
    hwmon = _read_hwmon(device, gpu.driver)
    if hwmon is not None:
        fields.update(
            hwmon=hwmon.name,
            power_w=hwmon.power_w,
            power_source=hwmon.power_source,
            energy_uj=hwmon.energy_uj,
            energy_source=hwmon.energy_source,
            power_limit_w=hwmon.power_limit_w,
            temperatures=hwmon.temperatures,
        )
        if hwmon.sclk_mhz is not None:  # the measured clock beats the DPM level's nominal one
            fields["gfx_clock_mhz"] = hwmon.sclk_mhz
        if hwmon.mclk_mhz is not None:
            fields["mem_clock_mhz"] = hwmon.mclk_mhz
    return GpuSysfsFigures(
        card=gpu.card,
        pci=gpu.pci,
        vendor=gpu.vendor,
        driver=gpu.driver,
        link_speed_gts=_link_speed(os.path.join(device, "current_link_speed")),
        link_width=_link_width(os.path.join(device, "current_link_width")),
        link_max_speed_gts=_link_speed(os.path.join(device, "max_link_speed")),
        link_max_width=_link_width(os.path.join(device, "max_link_width")),
        **fields,  # type: ignore[arg-type]
    )


def read_all_gpu_figures(
    gpus: Iterable[SystemGpu] | None = None,
    *,
    host: HostPaths = HOST,
    skip_drivers: Iterable[str] = ("nvidia",),
) -> tuple[GpuSysfsFigures, ...]:
    """``read_gpu_figures`` for each card (``list_system_gpus`` when None), in card order, leaving
    out the cards bound to ``skip_drivers`` (NVIDIA's: NVML reads those) and unbound ones."""
    skip = set(skip_drivers)
    cards = list_system_gpus(host=host) if gpus is None else list(gpus)
    out = []
    for gpu in cards:
        if gpu.driver is None or gpu.driver in skip:
            continue
        figures = read_gpu_figures(gpu, host=host)
        if figures is not None:
            out.append(figures)
    return tuple(out)


# --------------------------------------------------------------------------- figures over an interval


@dataclass(frozen=True, slots=True)
class _EnergyMark:
    t_ns: int
    energy_uj: int


class GpuFiguresSampler:
    """Reads the cards' figures and turns their cumulative counters into figures over the interval
    since the previous sample: where a card gives an energy counter and no power, its power
    ``Δenergy_µJ / Δt_µs`` W; where it gives throttle residency counters (MI300), the throttlers that
    held its clocks (amdgpu_metrics.residency_reasons). A card's first sample has neither; a counter
    that went back (driver reload, wrap) restarts from the new value. Keyed by PCI address (card
    names can change after a reload), else by card; forgets cards it no longer sees."""

    def __init__(self, *, host: HostPaths = HOST, clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._host = host
        self._clock_ns = clock_ns
        self._marks: dict[tuple[str, str], _EnergyMark] = {}
        self._residency: dict[str, ThrottleResidency] = {}

    def sample(self, gpus: Iterable[SystemGpu] | None = None) -> tuple[GpuSysfsFigures, ...]:
        figures = read_all_gpu_figures(gpus, host=self._host)
        return self.sample_figures(figures, self._clock_ns())

    def sample_figures(self, figures: Iterable[GpuSysfsFigures], t_ns: int) -> tuple[GpuSysfsFigures, ...]:
        """The figures read at monotonic ``t_ns`` over the interval since the last (what ``sample``
        does after its read)."""
        marks: dict[tuple[str, str], _EnergyMark] = {}
        residency: dict[str, ThrottleResidency] = {}
        out = [self._throttle(self._power(f, t_ns, marks), residency) for f in figures]
        self._marks, self._residency = marks, residency
        return tuple(out)

    def _power(
        self, f: GpuSysfsFigures, t_ns: int, marks: dict[tuple[str, str], _EnergyMark]
    ) -> GpuSysfsFigures:
        if f.energy_uj is None or f.energy_source is None:
            return f
        key = (f.pci or f.card, f.energy_source)
        prev = self._marks.get(key)
        marks[key] = _EnergyMark(t_ns, f.energy_uj)
        if f.power_w is not None or prev is None:
            return f
        dt_ns, d_uj = t_ns - prev.t_ns, f.energy_uj - prev.energy_uj
        watts = d_uj * 1000.0 / dt_ns if dt_ns > 0 and d_uj >= 0 else None
        if watts is not None and watts <= _POWER_W_MAX:
            f = replace(f, power_w=watts, power_source=f.energy_source)
        return f

    def _throttle(self, f: GpuSysfsFigures, residency: dict[str, ThrottleResidency]) -> GpuSysfsFigures:
        if f.throttle_residency is None:
            return f
        key = f.pci or f.card
        prev = self._residency.get(key)
        residency[key] = f.throttle_residency
        reasons = None if prev is None else residency_reasons(prev, f.throttle_residency)
        if reasons is None:
            return f
        return replace(f, throttled=bool(reasons), throttle_reasons=reasons)
