"""Why an amdgpu card's clocks are held down, from its binary ``device/gpu_metrics`` file.

The file is one C struct, as ``drivers/gpu/drm/amd/include/kgd_pp_interface.h`` lays it out: a
``metrics_table_header`` (u16 ``structure_size``, u8 ``format_revision``, u8 ``content_revision``),
then the fields of ``gpu_metrics_v<format>_<content>`` in natural alignment, little-endian; the
driver writes ``sizeof`` the struct, tail padding included. Format 1 is a dGPU's, format 2 an APU's.
Two fields say why the clocks are held down:

- ``throttle_status`` (u32): the firmware's own bits, whose meaning changes with the ASIC. Kept as
  read, never decoded: non-zero says throttled, not why.
- ``indep_throttle_status`` (u64, v1.3, v2.2 and later v2): the same, translated by the driver into
  the ASIC-independent ``SMU_THROTTLER_*_BIT`` positions of ``drivers/gpu/drm/amd/pm/swsmu/inc/
  amdgpu_smu.h`` (``AMD_THROTTLERS``): package power tracking and the APU power limits, current
  limits (TDC, EDC, peak current control), temperatures, VRHOT and PROCHOT. Its names are the
  kernel's, lower-cased (``ppt0``, ``temp_hotspot``); ``sidecar/poll/vendor_figures.py`` names them
  as NVML's clock event reasons.

The MI300 family's v1.6-v1.8 have neither: its firmware counts instead, in ``accumulation_counter``
(u32: the firmware's accumulation cycles) and one u32 residency counter a throttler (PROCHOT, package
power tracking, the socket's, the voltage regulators' and the HBM's thermal limits: the cycles each
held the clocks), what amd-smi's violation status (PVIOL, TVIOL) is made of. One reading says nothing
of now: ``residency_reasons`` names the throttlers that held the clocks between two readings, by
amd-smi's names (``VIOLATION_NAMES``); ``sources/gpu_sysfs.GpuFiguresSampler`` keeps the last one.

Read: v1.1-v1.3, v1.6-v1.8 and v2.1-v2.4 (``_LAYOUTS``, ``_RESIDENCY_LAYOUTS``). Not read (None:
unknown): v1.0 and v2.0 (not naturally aligned: the kernel says not to use them), v1.4 and v1.5
(MI300's first: only the ASIC's own ``throttle_status``, which names no reason), v1.9 (attributes
behind kernel pointers, not a table), v3.0 (residency counters without an accumulation
count), and any revision this module does not know. A file that is absent, a link, not regular, over
``MAX_GPU_METRICS_BYTES``, shorter than its ``structure_size`` says, or whose size is not its
revision's is None. Nothing here raises.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import NamedTuple

from sidecar.sources.sysfs import read_bytes_bounded

__all__ = [
    "AMD_THROTTLERS",
    "MAX_GPU_METRICS_BYTES",
    "VIOLATION_NAMES",
    "GpuMetricsThrottle",
    "ThrottleResidency",
    "parse_gpu_metrics",
    "read_gpu_metrics",
    "residency_reasons",
]

MAX_GPU_METRICS_BYTES = 4096  # a sysfs attribute is at most a page; the largest struct is 3,360 bytes
_HEADER = struct.Struct("<HBB")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# (format_revision, content_revision) -> (sizeof the struct, offset of throttle_status, offset of
# indep_throttle_status or None), from kgd_pp_interface.h's field order in natural alignment.
_LAYOUTS: dict[tuple[int, int], tuple[int, int, int | None]] = {
    (1, 1): (96, 68, None),
    (1, 2): (104, 68, None),  # v1.1 + firmware_timestamp
    (1, 3): (120, 68, 112),  # v1.2 + voltages, padding, indep_throttle_status
    (2, 1): (120, 108, None),
    (2, 2): (128, 108, 120),  # v2.1 + indep_throttle_status
    (2, 3): (152, 108, 120),  # v2.2 + average temperatures
    (2, 4): (168, 108, 120),  # v2.3 + voltages and currents (164 bytes, padded to 8)
}

# (1, content_revision) -> (sizeof the struct, offset of accumulation_counter), for the revisions that
# count throttle residency: the five counters follow it, u32 each, in VIOLATION_NAMES' order.
_RESIDENCY_LAYOUTS: dict[tuple[int, int], tuple[int, int]] = {
    (1, 6): (1664, 32),
    (1, 7): (2208, 40),  # v1.6 + mem_max_bandwidth before the energy counter, XGMI link status
    (1, 8): (3360, 40),  # v1.7 with larger per-partition stats
}
# The residency counters (prochot_, ppt_, socket_thm_, vr_thm_, hbm_thm_residency_acc) by amd-smi's
# names for them (amdsmi_get_violation_status's active_* flags: sources/amdsmi_source.py).
VIOLATION_NAMES = ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm")
_RESIDENCY = struct.Struct("<6I")  # accumulation_counter, then one counter a VIOLATION_NAMES name

# SMU_THROTTLER_<NAME>_BIT -> bit position in indep_throttle_status (amdgpu_smu.h). Bits not listed
# (8-15, 24-31, 48-55, 58-63) have no meaning yet: set, they say throttled without saying why.
AMD_THROTTLERS: dict[str, int] = {
    # power: package power tracking limits, the APU's sustained/fast/slow power limits
    "ppt0": 0,
    "ppt1": 1,
    "ppt2": 2,
    "ppt3": 3,
    "spl": 4,
    "fppt": 5,
    "sppt": 6,
    "sppt_apu": 7,
    # current: thermal design current, electrical design current, peak current control
    "tdc_gfx": 16,
    "tdc_soc": 17,
    "tdc_mem": 18,
    "tdc_vdd": 19,
    "tdc_cvip": 20,
    "edc_cpu": 21,
    "edc_gfx": 22,
    "apcc": 23,
    # temperature
    "temp_gpu": 32,
    "temp_core": 33,
    "temp_mem": 34,
    "temp_edge": 35,
    "temp_hotspot": 36,
    "temp_soc": 37,
    "temp_vr_gfx": 38,
    "temp_vr_soc": 39,
    "temp_vr_mem0": 40,
    "temp_vr_mem1": 41,
    "temp_liquid0": 42,
    "temp_liquid1": 43,
    "vrhot0": 44,
    "vrhot1": 45,
    "prochot_cpu": 46,
    "prochot_gfx": 47,
    # other: platform power management, the reliability (FIT) limiter
    "ppm": 56,
    "fit": 57,
}


class ThrottleResidency(NamedTuple):
    """The cumulative counters of one v1.6-v1.8 reading, as read."""

    accumulation_counter: int  # the firmware's accumulation cycles
    counters: tuple[int, ...]  # the cycles each throttler held the clocks, in VIOLATION_NAMES' order


@dataclass(frozen=True, slots=True)
class GpuMetricsThrottle:
    """The throttle fields of one gpu_metrics reading."""

    format_revision: int
    content_revision: int
    throttle_status: int | None  # u32, ASIC-dependent bits as read; None: the revision has none
    indep_throttle_status: int | None  # u64, SMU_THROTTLER_* bits; None: the revision has none
    residency: ThrottleResidency | None = None  # v1.6-v1.8's counters (residency_reasons)

    @property
    def throttled(self) -> bool | None:
        """Any bit of either field set. Without the independent field a clear ASIC field is not
        "not throttled" (what its bits mean is the ASIC's): None, and so are residency counters
        read once."""
        if self.throttle_status or self.indep_throttle_status:
            return True
        return False if self.indep_throttle_status is not None else None

    @property
    def reasons(self) -> tuple[str, ...] | None:
        """The independent bits set, by the kernel's names in bit order; None without that field."""
        bits = self.indep_throttle_status
        if bits is None:
            return None
        return tuple(name for name, bit in AMD_THROTTLERS.items() if bits >> bit & 1)


def parse_gpu_metrics(data: bytes) -> GpuMetricsThrottle | None:
    """The throttle fields of a gpu_metrics file's bytes; None for a revision not read here, a
    ``structure_size`` other than the bytes' length or the revision's size, or too few bytes."""
    if len(data) < _HEADER.size or len(data) > MAX_GPU_METRICS_BYTES:
        return None
    size, fmt, content = _HEADER.unpack_from(data)
    counted = _RESIDENCY_LAYOUTS.get((fmt, content))
    if counted is not None:
        if size != len(data) or size != counted[0]:
            return None
        acc, *counters = _RESIDENCY.unpack_from(data, counted[1])
        return GpuMetricsThrottle(fmt, content, None, None, ThrottleResidency(acc, tuple(counters)))
    layout = _LAYOUTS.get((fmt, content))
    if layout is None or size != len(data) or size != layout[0]:
        return None
    _, status_at, indep_at = layout
    return GpuMetricsThrottle(
        format_revision=fmt,
        content_revision=content,
        throttle_status=_U32.unpack_from(data, status_at)[0],
        indep_throttle_status=None if indep_at is None else _U64.unpack_from(data, indep_at)[0],
    )


def read_gpu_metrics(device: str) -> GpuMetricsThrottle | None:
    """``parse_gpu_metrics`` of ``device``'s ``gpu_metrics`` (the PCI device folder), read bounded;
    None when absent or unreadable (older kernels, parts without it)."""
    data = read_bytes_bounded(os.path.join(device, "gpu_metrics"), MAX_GPU_METRICS_BYTES)
    return None if data is None else parse_gpu_metrics(data)


def residency_reasons(before: ThrottleResidency, after: ThrottleResidency) -> tuple[str, ...] | None:
    """The ``VIOLATION_NAMES`` of the throttlers that held the clocks between two readings of one
    card (any cycle: amd-smi's active flags), () none; None when the readings cannot be compared: no
    accumulation cycle between them, a counter that went back (the driver reloaded, or a u32 wrapped:
    the next pair is compared again), or a throttler counted for more cycles than passed."""
    passed = after.accumulation_counter - before.accumulation_counter
    held = [a - b for a, b in zip(after.counters, before.counters, strict=True)]
    if passed <= 0 or any(not 0 <= cycles <= passed for cycles in held):
        return None
    return tuple(name for name, cycles in zip(VIOLATION_NAMES, held, strict=True) if cycles > 0)
