"""The DRM fdinfo reader (sidecar/sources/drm) over fixture /proc trees built from the kernel's format
(Documentation/gpu/drm-usage-stats.rst) and published samples: amdgpu (a June 2024 report,
Umio-Yasuno/amdgpu_top#87, and the 5.14-5.18 key names), i915 (Documentation/gpu/i915.rst), xe
(xe_drm_client.c's DOC block). A fixture's fds are links to plain files: ``stat_fd`` says which of
them a real /proc would show as DRM character devices (major 226), since mknod needs privileges."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.documents.bounds import one_line, printable
from sidecar.sources.drm import DrmFdIndex, DrmSampler, parse_fdinfo, read_drm_clients
from sidecar.sources.drm.fdinfo import MAX_FDINFO_BYTES, MAX_NAME_CHARS
from tests.helpers.drm_samples import AMDGPU, AMDGPU_OLD, FD_HEAD, I915, MAXFREQ, XE, FakeProc, FakeStat


@pytest.fixture
def proc(tmp_path):
    return FakeProc(tmp_path)


def _parse(text: str):
    info = parse_fdinfo(text.encode())
    assert info is not None
    return info


def test_amdgpu_current_sample_memory_alias_and_identity():
    info = _parse(AMDGPU)
    assert (info.driver, info.pdev, info.client_id, info.pasid) == ("amdgpu", "0000:08:00.0", 217, 32784)
    assert [(e.name, e.busy_ns, e.capacity) for e in info.engines] == [("gfx", 107322799, 1)]
    vram = {r.name: r for r in info.regions}["vram"]
    assert vram.resident_mib == 2068 / 1024 and vram.total_mib is None and vram.used_mib == 2068 / 1024
    # The common helper's keys and the deprecated alias together: resident wins, nothing is summed.
    both = _parse(AMDGPU + "drm-total-vram:\t4 MiB\ndrm-resident-vram:\t3 MiB\n")
    vram = {r.name: r for r in both.regions}["vram"]
    assert (vram.total_mib, vram.resident_mib) == (4.0, 3.0)


def test_amdgpu_old_key_names():
    info = _parse(AMDGPU_OLD)
    assert (info.driver, info.pdev, info.client_id, info.pasid, info.old_amdgpu) == (
        "amdgpu",
        "0000:08:00.0",
        None,
        32771,
        True,
    )
    assert {e.name: e.busy_pct for e in info.engines} == {"compute0": 0.0, "gfx0": 12.5}
    assert {r.name: r.resident_mib for r in info.regions} == {"cpu": 0.0, "gtt": 2.0, "vram": 16.0}


def test_i915_and_xe_samples():
    i915 = _parse(I915)
    assert {e.name: (e.busy_ns, e.capacity) for e in i915.engines} == {
        "copy": (2035071108, 1),
        "render": (9288864723, 1),
        "video": (0, 2),
        "video-enhance": (0, 1),
    }
    regions = {r.name: r for r in i915.regions}
    assert regions["system0"].total_mib == 3.0 and regions["system0"].resident_mib == 3.0  # bare bytes
    assert regions["local0"].used_mib == 512.0  # total when no resident
    xe = _parse(XE)
    engines = {e.name: e for e in xe.engines}
    assert (engines["rcs"].cycles, engines["rcs"].total_cycles, engines["ccs"].capacity) == (
        28257900,
        7655183225,
        4,
    )
    assert engines["rcs"].busy_ns is None
    vram0 = {r.name: r for r in xe.regions}["vram0"]
    assert (vram0.total_mib, vram0.shared_mib, vram0.active_mib, vram0.resident_mib) == (
        23992 / 1024,
        16.0,
        0.0,
        23992 / 1024,
    )
    msm = _parse(MAXFREQ)
    assert msm.pdev is None and [(e.cycles, e.maxfreq_hz) for e in msm.engines] == [(1000, 800_000_000)]


def test_malformed_and_oversized_fdinfo():
    lines = [
        "drm-driver:\tamdgpu",
        "no colon at all",
        ":\tno key",
        "drm-client-id:\t-3",  # not a count: no client id
        "drm-pdev:\tnot-a-pci-address",
        "drm-engine-gfx:\tlots ns",
        "drm-engine-compute:\t12",  # no unit: not ns
        "drm-engine-capacity-gfx:\t0",  # 0 is forbidden: stays 1
        "drm-resident-vram:\t5 GB",  # not a unit the kernel prints
        "drm-resident-gtt:\t2 MiB",
        "drm-engine-" + "x" * 100 + ":\t5 ns",  # key over the bound
        "drm-engine-dma:\t" + "9" * 200 + " ns",  # value over the bound
        "drm-engine-bad name!:\t5 ns",
        "\x00\xff garbage:\x1b",
    ]
    info = _parse("\n".join(lines) + "\n")
    assert (info.driver, info.client_id, info.pdev, info.engines) == ("amdgpu", None, None, ())
    assert [(r.name, r.resident_mib) for r in info.regions] == [("gtt", 2.0)]
    assert parse_fdinfo(b"") is None and parse_fdinfo(FD_HEAD.encode()) is None  # not a DRM fd
    assert parse_fdinfo(b"drm-driver:\tbad driver name\n") is None
    assert parse_fdinfo(b"\xff\xfe" * 20000) is None
    # Only the first MAX_FDINFO_BYTES are read; a line cut there is dropped.
    padding = "drm-padding:\t" + "p" * 100 + "\n"
    big = "drm-driver:\txe\n" + padding * (MAX_FDINFO_BYTES // len(padding) + 1) + "drm-client-id:\t7\n"
    cut = parse_fdinfo(big.encode())
    assert cut is not None and cut.driver == "xe" and cut.client_id is None
    boundary = "drm-driver:\txe\n" + "drm-client-id:\t12345"
    filler = "x" * (MAX_FDINFO_BYTES - len(boundary) + 2)
    cut = parse_fdinfo((filler + "\n" + boundary).encode())  # the id straddles the bound
    assert cut is not None and cut.client_id is None


def test_client_name_with_control_and_bidi_characters_is_kept_out_and_clipped():
    evil = "trainer\x1b[31m\u202enip.exe\u200b\r\x07"
    info = _parse(AMDGPU + f"drm-client-name:\t{evil}\n")
    assert info.client_name == "trainer[31mnip.exe"
    assert one_line(info.client_name) == info.client_name == printable(info.client_name)
    long = _parse(AMDGPU + "drm-client-name:\t" + "n" * 100 + "\n")
    assert long.client_name == "n" * MAX_NAME_CHARS


def test_clients_deduplicated_across_dup_fds_and_forked_children(proc):
    parent, child = 4100, 4101
    proc.fd(parent, 5, AMDGPU)
    proc.fd(parent, 9, AMDGPU)  # dup()'d: the same client
    proc.fd(child, 5, AMDGPU)  # inherited by a DataLoader worker forked after GPU init
    proc.fd(child, 7, AMDGPU.replace("drm-client-id:\t217", "drm-client-id:\t218"))  # its own open
    proc.fd(child, 3, "pos:\t0\nflags:\t02\n", target="/dev/null")  # a real character device, major 1
    clients = read_drm_clients([child, parent, 999999], host=proc.host, stat_fd=FakeStat())
    assert [(c.pid, c.fd, c.info.client_id) for c in clients] == [(parent, 5, 217), (child, 7, 218)]
    assert clients[0].vram_mib == 2068 / 1024 and clients[0].gtt_mib == 8.0 and clients[0].system_mib == 0.0


def test_fd_index_rereads_one_fd_a_client_and_scans_again_when_it_shows_another(proc):
    index = DrmFdIndex(clock=lambda: 0.0)  # never old enough to be scanned again for its age
    proc.fd(60, 5, AMDGPU)
    proc.fd(60, 9, AMDGPU)  # dup()'d

    def read():
        clients = read_drm_clients([60], host=proc.host, stat_fd=FakeStat(), index=index)
        return [(c.fd, c.info.client_id) for c in clients]

    assert read() == [(5, 217)] and index.scans == 1
    dup = proc.root / "60" / "fdinfo" / "9"
    dup.unlink()  # the dup's fdinfo is not read again: no scan for it
    assert read() == [(5, 217)] and index.scans == 1
    dup.write_text(AMDGPU)
    # fd 5's number now on another client, as many fds as before: 217 is still held through fd 9.
    proc.rewrite(60, 5, AMDGPU.replace("drm-client-id:\t217", "drm-client-id:\t300"))
    assert read() == [(5, 300), (9, 217)] and index.scans == 2


def test_gtt_only_apu_and_remapped_node(proc):
    apu = (
        "drm-driver:\tamdgpu\ndrm-pdev:\t0000:c4:00.0\ndrm-client-id:\t31\n"
        "drm-total-vram:\t14 MiB\ndrm-resident-vram:\t14 MiB\ndrm-total-gtt:\t24160 MiB\ndrm-resident-gtt:\t24160 MiB\n"
    )
    gpu0 = str(proc.root.parent / "gpu0")  # --device=/dev/dri/renderD128:/dev/gpu0
    Path(gpu0).write_text("")
    proc.fd(77, 4, apu, target=gpu0)
    (client,) = read_drm_clients([77], host=proc.host, stat_fd=FakeStat(remapped={gpu0}))
    assert (client.gtt_mib, client.vram_mib, client.system_mib) == (24160.0, 14.0, None)


def test_non_drm_fds_and_denied_stat(proc):
    # A link to a plain file whose fdinfo (somehow) reads as DRM: the real stat says not a device.
    plain = proc.root.parent / "notes.txt"
    plain.write_text("")
    proc.fd(50, 3, AMDGPU, target=str(plain))
    assert read_drm_clients([50], host=proc.host) == ()  # os.stat, no seam
    # stat denied: the fdinfo decides (a driver named: DRM; none: not).
    denied_drm = proc.fd(51, 4, I915)
    denied_other = proc.fd(51, 6, FD_HEAD)
    fake = FakeStat(denied={denied_drm, denied_other})
    assert [(c.fd, c.info.driver) for c in read_drm_clients([51], host=proc.host, stat_fd=fake)] == [
        (4, "i915")
    ]
    # A process whose fd folder is not one (gone meanwhile, hidden): skipped, no exception.
    (proc.root / "52").mkdir()
    (proc.root / "52" / "fd").write_text("")
    assert read_drm_clients([52, 53], host=proc.host, stat_fd=fake) == ()


def _use(sample, pid):
    (use,) = [u for u in sample.clients if u.client.pid == pid]
    return {e.name: e.busy_pct for e in use.engines}


def test_sampler_utilisation_exact_for_ns_cycles_and_maxfreq(proc):
    now = [10_000_000_000]
    sampler = DrmSampler(host=proc.host, clock_ns=lambda: now[0], stat_fd=FakeStat())
    proc.fd(1, 3, I915)
    proc.fd(2, 3, XE)
    proc.fd(3, 3, MAXFREQ)
    proc.fd(4, 3, AMDGPU_OLD)
    proc.fd(5, 3, AMDGPU)
    first = sampler.sample([1, 2, 3, 4, 5])
    assert _use(first, 1) == {"copy": None, "render": None, "video": None, "video-enhance": None}
    assert _use(first, 2) == {"ccs": None, "rcs": None} and _use(first, 3) == {"gpu": None}
    assert _use(first, 4) == {"compute0": 0.0, "gfx0": 12.5}  # the driver's own average
    now[0] += 1_000_000_000
    proc.rewrite(
        1,
        3,
        I915.replace("9288864723", str(9288864723 + 250_000_000)).replace("video:\t0", "video:\t1000000000"),
    )
    proc.rewrite(
        2,
        3,
        XE.replace("rcs:\t28257900", f"rcs:\t{28257900 + 100}")
        .replace("ccs:\t0", "ccs:\t400")
        .replace("7655183225", "7655183625"),
    )
    proc.rewrite(3, 3, MAXFREQ.replace("1000\n", f"{1000 + 400_000_000}\n"))
    proc.rewrite(
        5,
        3,
        AMDGPU.replace("107322799", str(107322799 + 3_000_000_000)) + "drm-engine-compute:\t500000000 ns\n",
    )
    second = sampler.sample([1, 2, 3, 4, 5])
    # render: 0.25 s busy in 1 s; video: 1 s over 2 engines; copy idle.
    assert _use(second, 1) == {"copy": 0.0, "render": 25.0, "video": 50.0, "video-enhance": 0.0}
    # rcs: 100 of 400 GPU ticks; ccs: 400 of 400 ticks over 4 engines.
    assert _use(second, 2) == {"ccs": 25.0, "rcs": 25.0}
    assert _use(second, 3) == {"gpu": 50.0}  # 4e8 cycles in 1 s at 800 MHz
    # gfx: 3 s busy in 1 s (a burst the kernel accounted late): clamped; compute, first printed now: from 0.
    assert _use(second, 5) == {"compute": 50.0, "gfx": 100.0}


def test_sampler_counters_going_backwards_keep_the_previous_mark(proc):
    now = [0]
    sampler = DrmSampler(host=proc.host, clock_ns=lambda: now[0], stat_fd=FakeStat())
    proc.fd(1, 3, I915)
    assert _use(sampler.sample([1]), 1)["render"] is None
    now[0] = 1_000_000_000
    proc.rewrite(1, 3, I915.replace("9288864723", "9288000000"))  # went back
    assert _use(sampler.sample([1]), 1)["render"] is None
    now[0] = 2_000_000_000
    proc.rewrite(1, 3, I915.replace("9288864723", str(9288864723 + 500_000_000)))
    # Measured from the kept mark (t = 0): 0.5 s busy in 2 s.
    assert _use(sampler.sample([1]), 1)["render"] == 25.0
    # A client that left and came back starts again with no rate.
    assert sampler.sample([]).clients == ()
    now[0] = 3_000_000_000
    assert _use(sampler.sample([1]), 1)["render"] is None
