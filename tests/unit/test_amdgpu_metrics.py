"""amdgpu's binary gpu_metrics (sidecar/sources/amdgpu_metrics.py): files packed field by field from
kgd_pp_interface.h's structs (a dGPU's v1.3, an APU's v2.2, v2.1 without ASIC-independent bits), the
throttle bits set and clear; broken files (truncated, a wrong structure_size, an unknown revision,
oversized, a link) unknown; the figures of a Radeon whose file says it is held at its hotspot
temperature, named as NVML's reasons, and the throttled verdict on it while a job runs there."""

from __future__ import annotations

import copy
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from hostfs.paths import HostPaths
from sidecar.poll.vendor_figures import with_figures
from sidecar.sources.amdgpu_metrics import (
    AMD_THROTTLERS,
    MAX_GPU_METRICS_BYTES,
    VIOLATION_NAMES,
    GpuMetricsThrottle,
    ThrottleResidency,
    parse_gpu_metrics,
    read_gpu_metrics,
    residency_reasons,
)
from sidecar.sources.gpu_sysfs import GpuFiguresSampler, GpuSysfsFigures, read_all_gpu_figures
from sidecar.verdict import GpuFacts, ProcGpu, decide
from tests.fakenvml import make_fake_sysfs
from tests.helpers.gpu_sysfs_trees import MI300X, RADEON
from tests.helpers.verdict_facts import en, facts, proc

# Each struct's fields in order ('<': no implicit padding; the structs carry their own).
_V1_3 = (
    "<HBB"
    + "6H"
    + "3H"
    + "H"
    + "Q"
    + "Q"
    + "7H"
    + "7H"
    + "I"
    + "H"
    + "2H"
    + "H"
    + "2I"
    + "4H"
    + "Q"
    + "3H"
    + "H"
    + "Q"
)
_V2_1 = "<HBB" + "2H8H2H" + "2H" + "Q" + "4H8H" + "6H" + "6H8H2H" + "I" + "H" + "3H"
_V2_2 = _V2_1 + "Q"
PPT0, TEMP_HOTSPOT, SPL, PROCHOT_GFX = (
    1 << AMD_THROTTLERS[n] for n in ("ppt0", "temp_hotspot", "spl", "prochot_gfx")
)


def v1_3(throttle_status: int, indep: int) -> bytes:
    """A dGPU's gpu_metrics_v1_3: 56 °C edge, 1800 MHz gfxclk, the throttle fields as given."""
    fields = [struct.calcsize(_V1_3), 1, 3]
    fields += [56, 71, 60, 50, 48, 52] + [95, 40, 0] + [230, 10**9, 123456789]
    fields += [1800, 1000, 1200, 0, 0, 0, 0] + [1800, 1000, 1200, 0, 0, 0, 0]
    fields += [throttle_status, 1500, 16, 160, 0, 1000, 500] + [0] * 4 + [42] + [900, 1050, 1350, 0, indep]
    return struct.pack(_V1_3, *fields)


def v2(layout: str, content: int, throttle_status: int, indep: int | None = None) -> bytes:
    """An APU's gpu_metrics_v2_<content>: 65 °C gfx, 15 W socket, the throttle fields as given."""
    fields = [struct.calcsize(layout), 2, content]
    fields += [6500, 6000] + [5000] * 8 + [4800, 4800] + [90, 0] + [123456789]
    fields += (
        [15000, 8000, 2000, 5000] + [900] * 8 + [1900, 1000, 2400, 1600, 0, 0] + [1900] * 6 + [3000] * 10
    )
    fields += [throttle_status, 0, 0, 0, 0] + ([] if indep is None else [indep])
    return struct.pack(layout, *fields)


def test_layouts_are_the_kernels_sizes():
    assert (len(v1_3(0, 0)), len(v2(_V2_1, 1, 0)), len(v2(_V2_2, 2, 0, 0))) == (120, 120, 128)


def test_a_dgpus_v1_3_names_the_independent_bits_and_keeps_the_asic_ones_raw():
    hot = parse_gpu_metrics(v1_3(0x0000_4001, PPT0 | TEMP_HOTSPOT))
    assert hot == GpuMetricsThrottle(1, 3, 0x4001, PPT0 | TEMP_HOTSPOT)
    assert (hot.throttled, hot.reasons) == (True, ("ppt0", "temp_hotspot"))
    cool = parse_gpu_metrics(v1_3(0, 0))
    assert cool is not None and (cool.throttled, cool.reasons) == (False, ())
    # ASIC bits the driver did not translate, or independent bits without a name yet: throttled, why unknown.
    for unnamed in (v1_3(0x80, 0), v1_3(0, 1 << 12)):
        m = parse_gpu_metrics(unnamed)
        assert m is not None and (m.throttled, m.reasons) == (True, ())


def test_an_apus_v2_2_and_a_v2_1_without_independent_bits():
    m = parse_gpu_metrics(v2(_V2_2, 2, 0x3, SPL | PROCHOT_GFX))
    assert m is not None and (m.format_revision, m.content_revision) == (2, 2)
    assert (m.throttled, m.reasons) == (True, ("spl", "prochot_gfx"))
    clear = parse_gpu_metrics(v2(_V2_2, 2, 0, 0))
    assert clear is not None and (clear.throttled, clear.reasons) == (False, ())
    # v2.1: the ASIC's bits alone. Set: throttled, why unknown; clear: unknown, never "not throttled".
    old = parse_gpu_metrics(v2(_V2_1, 1, 0x10))
    assert old is not None and (old.throttled, old.reasons, old.indep_throttle_status) == (True, None, None)
    old_clear = parse_gpu_metrics(v2(_V2_1, 1, 0))
    assert old_clear is not None and (old_clear.throttled, old_clear.reasons) == (None, None)


def _with_header(
    data: bytes, size: int | None = None, fmt: int | None = None, content: int | None = None
) -> bytes:
    old_size, old_fmt, old_content = struct.unpack_from("<HBB", data)
    header = struct.pack(
        "<HBB",
        old_size if size is None else size,
        old_fmt if fmt is None else fmt,
        old_content if content is None else content,
    )
    return header + data[4:]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x78\x00\x01",  # shorter than the header
        v1_3(1, TEMP_HOTSPOT)[:-1],  # truncated: structure_size says 120
        v1_3(1, TEMP_HOTSPOT)[:100],
        _with_header(v1_3(1, TEMP_HOTSPOT), size=128),  # structure_size not the bytes read
        _with_header(v1_3(1, TEMP_HOTSPOT) + bytes(8), size=128),  # the bytes' length, not v1.3's size
        _with_header(v1_3(1, TEMP_HOTSPOT), content=9),  # a revision not known here
        _with_header(v1_3(1, TEMP_HOTSPOT), content=0),  # v1.0: not naturally aligned, not read
        _with_header(v2(_V2_1, 1, 1), content=0),
        _with_header(v2(_V2_2, 2, 1, 1), fmt=3, content=0),  # v3.0: residency counters, not read
        _with_header(v1_3(1, TEMP_HOTSPOT), fmt=0),
        bytes(MAX_GPU_METRICS_BYTES + 1),
    ],
)
def test_a_broken_or_unknown_file_is_unknown_never_not_throttled(data):
    assert parse_gpu_metrics(data) is None


def test_reading_the_file_is_bounded_and_opens_no_link(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "gpu_metrics").write_bytes(v1_3(0, TEMP_HOTSPOT))
    assert read_gpu_metrics(str(good)) == GpuMetricsThrottle(1, 3, 0, TEMP_HOTSPOT)
    big = tmp_path / "big"
    big.mkdir()
    (big / "gpu_metrics").write_bytes(v1_3(0, TEMP_HOTSPOT) + bytes(MAX_GPU_METRICS_BYTES))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "gpu_metrics").symlink_to(good / "gpu_metrics")
    assert [read_gpu_metrics(str(d)) for d in (big, linked, tmp_path / "absent")] == [None, None, None]


def _radeon(tmp_path: Path, metrics: bytes | None) -> GpuSysfsFigures:
    root = make_fake_sysfs(tmp_path / "sys", [copy.deepcopy(RADEON)])
    if metrics is not None:
        (root / "devices" / "pci0000:00" / RADEON["pci"] / "gpu_metrics").write_bytes(metrics)
    (figures,) = read_all_gpu_figures(host=HostPaths(sysfs=str(root)))
    return figures


GPU = GpuFacts(1, pci_bus_id=RADEON["pci"], vendor="amd", driver="amdgpu")


def test_a_radeon_held_at_its_hotspot_limit_is_thermally_throttled(tmp_path):
    figures = _radeon(tmp_path, v1_3(0x4001, PPT0 | TEMP_HOTSPOT))
    assert (figures.throttled, figures.throttle_reasons) == (True, ("ppt0", "temp_hotspot"))
    hot = with_figures(GPU, figures)
    assert hot.clock_event_reasons == ("sw_power_cap", "sw_thermal_slowdown")

    def reasons(names):
        return with_figures(GPU, replace(figures, throttle_reasons=names)).clock_event_reasons

    assert reasons(("tdc_gfx", "prochot_gfx")) == ("hw_slowdown",)
    assert reasons(("vrhot0", "temp_vr_gfx")) == ("hw_thermal_slowdown",)
    assert reasons(("ppm",)) is None  # throttled for a reason NVML has no name for: unknown
    assert with_figures(GPU, replace(figures, throttled=False, throttle_reasons=())).clock_event_reasons == ()
    # No gpu_metrics (an older kernel): unknown, as before.
    assert with_figures(GPU, _radeon(tmp_path / "old", None)).clock_event_reasons is None

    # A job on it: the throttled verdict names the thermal slowdown and the card's own clock.
    busy = replace(hot, util=97.0, sm_clock_mhz=1100, sm_clock_max_mhz=2500, temperature_c=98.0)
    row = ProcGpu(1, 8000.0, 97.0, None, "amd", GPU.pci_bus_id)
    (w,) = [
        w
        for w in decide(facts(proc(gpu=[row]), gpus=(busy,), nvml_ok=False)).warnings
        if w.code == "throttled"
    ]
    assert "GPU clock 1100 MHz of 2500 MHz" in en(w.message) and "98 °C" in en(w.message)
    assert "nvidia-smi" not in en(w.hint) and RADEON["pci"] in en(w.hint)
    # Only its power budget holding the clocks: the GPU working as designed, no warning.
    capped = replace(busy, clock_event_reasons=("sw_power_cap",))
    assert not [
        w
        for w in decide(facts(proc(gpu=[row]), gpus=(capped,), nvml_ok=False)).warnings
        if w.code == "throttled"
    ]


# MI300's v1.6-v1.8: the fields before accumulation_counter (header, three temperatures, power, two
# activities; v1.7 and v1.8: mem_max_bandwidth; the energy and clock counters), then the counter and
# the five residency counters (prochot, ppt, socket_thm, vr_thm, hbm_thm), in kgd_pp_interface.h's order.
_V1_6_HEAD = "<HBB" + "3H" + "H" + "2H" + "Q" + "Q"
_V1_7_HEAD = "<HBB" + "3H" + "H" + "2H" + "Q" + "Q" + "Q"
_COUNTERS = "6I"
SIZES = {6: 1664, 7: 2208, 8: 3360}  # sizeof gpu_metrics_v1_6, v1_7, v1_8


def v1_counted(content: int, accumulated: int, residency: tuple[int, int, int, int, int]) -> bytes:
    """An MI300's gpu_metrics_v1_<content> (6, 7 or 8): filled with 0xFF as the driver starts it, the
    header, then the accumulation counter and the residency counters as given."""
    head = _V1_6_HEAD if content == 6 else _V1_7_HEAD
    data = bytearray(b"\xff" * SIZES[content])
    struct.pack_into("<HBB", data, 0, SIZES[content], 1, content)
    struct.pack_into("<" + _COUNTERS, data, struct.calcsize(head), accumulated, *residency)
    return bytes(data)


@pytest.mark.parametrize("content", [6, 7, 8])
def test_an_mi300s_residency_counters_say_nothing_alone_and_name_what_held_the_clocks_between_two(content):
    first = parse_gpu_metrics(v1_counted(content, 10_000, (5, 100, 0, 7, 0)))
    assert first is not None and first.residency == ThrottleResidency(10_000, (5, 100, 0, 7, 0))
    assert (first.throttled, first.reasons) == (None, None)  # one reading: unknown, never "not throttled"
    later = parse_gpu_metrics(v1_counted(content, 11_000, (5, 400, 250, 7, 0)))
    assert later is not None and later.residency is not None
    assert residency_reasons(first.residency, later.residency) == ("ppt_pwr", "socket_thrm")
    assert residency_reasons(later.residency, later.residency) is None  # no cycle passed: unknown
    calm = ThrottleResidency(12_000, later.residency.counters)
    assert residency_reasons(later.residency, calm) == ()  # cycles passed, none held
    # Not comparable: a counter went back (the driver reloaded, a u32 wrapped), or one throttler
    # counted for more cycles than passed.
    assert residency_reasons(later.residency, ThrottleResidency(50, (0, 0, 0, 0, 0))) is None
    assert residency_reasons(later.residency, ThrottleResidency(12_000, (5, 300, 250, 7, 0))) is None
    assert residency_reasons(later.residency, ThrottleResidency(11_010, (5, 420, 250, 7, 0))) is None
    assert VIOLATION_NAMES == ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm")


@pytest.mark.parametrize(
    "data",
    [
        _with_header(v1_counted(6, 1, (0,) * 5), size=SIZES[7]),  # structure_size not the bytes read
        v1_counted(7, 1, (0,) * 5)[: SIZES[6]],  # v1.7 cut to v1.6's size: its size is v1.7's
        _with_header(v1_counted(6, 1, (0,) * 5)[:288], size=288, content=4),  # v1.4: no reason named
        _with_header(v1_counted(6, 1, (0,) * 5)[:328], size=328, content=5),  # v1.5: likewise
        _with_header(v1_counted(8, 1, (0,) * 5)[:16], size=16, content=9),  # v1.9: pointers, not a table
    ],
)
def test_a_broken_or_unread_mi300_file_is_unknown(data):
    assert parse_gpu_metrics(data) is None


def test_an_mi300_held_by_its_power_and_thermal_limits_is_throttled_from_its_second_poll(tmp_path):
    """The sampler keeps a card's last counters (by PCI address): its first poll unknown, then what
    held the clocks since the previous poll, named as NVML's reasons; a job on it gets the throttled
    warning while the socket's thermal limit holds it, none once nothing does, and a driver reload
    (counters back to 0) is unknown for a poll, never "not throttled"."""
    root = make_fake_sysfs(tmp_path / "sys", [copy.deepcopy(MI300X)])
    metrics = root / "devices" / "pci0000:00" / MI300X["pci"] / "gpu_metrics"
    sampler = GpuFiguresSampler(host=HostPaths(sysfs=str(root)), clock_ns=lambda: 0)

    def poll(accumulated: int, residency: tuple[int, int, int, int, int]) -> GpuSysfsFigures:
        metrics.write_bytes(v1_counted(8, accumulated, residency))
        (figures,) = sampler.sample()
        return figures

    gpu = GpuFacts(0, pci_bus_id=MI300X["pci"], vendor="amd", driver="amdgpu")
    first = poll(1_000, (0, 0, 0, 0, 0))
    assert (first.throttled, first.throttle_reasons) == (None, None)
    assert with_figures(gpu, first).clock_event_reasons is None
    hot = poll(2_000, (0, 600, 900, 0, 0))
    assert (hot.throttled, hot.throttle_reasons) == (True, ("ppt_pwr", "socket_thrm"))
    held = with_figures(gpu, hot)
    assert held.clock_event_reasons == ("sw_power_cap", "sw_thermal_slowdown")
    busy = replace(held, util=99.0, sm_clock_mhz=1300, sm_clock_max_mhz=2100, temperature_c=95.0)
    row = ProcGpu(0, 100_000.0, None, None, "amd", MI300X["pci"])

    def throttled(g: GpuFacts) -> list:
        return [
            w
            for w in decide(facts(proc(gpu=[row]), gpus=(g,), nvml_ok=False)).warnings
            if w.code == "throttled"
        ]

    (w,) = throttled(busy)
    assert "GPU clock 1300 MHz of 2100 MHz" in en(w.message) and MI300X["pci"] in en(w.hint)
    cool = poll(3_000, (0, 600, 900, 0, 0))
    assert (cool.throttled, cool.throttle_reasons) == (False, ())
    assert not throttled(replace(busy, clock_event_reasons=with_figures(gpu, cool).clock_event_reasons))
    reloaded = poll(10, (0, 0, 0, 0, 0))
    assert (reloaded.throttled, reloaded.throttle_reasons) == (None, None)
    assert poll(1_010, (0, 0, 0, 0, 400)).throttle_reasons == ("hbm_thrm",)
