"""What one poll reads of many GPU processes (sidecar/sources/drm: DrmFdIndex's budget, issue 41
item 11): the processes never read, then those read longest ago, up to ``max_reads`` a call; the
others keep their last reading, and a client read again after polls left out has its rate over the
whole time since its last read, never a 0 made of counters not read."""

from __future__ import annotations

from pathlib import Path

from hostfs.paths import HostPaths
from sidecar.poll.vendor_gpus import VendorGpuSampler
from sidecar.sources.drm import DrmFdIndex, DrmSampler, read_drm_clients
from sidecar.sources.drm.users import DrmUserScan
from sidecar.sources.sysfs import list_system_gpus
from tests.helpers.drm_samples import AMDGPU, FakeProc, FakeStat
from tests.helpers.drm_tree import amd_sysfs

PIDS = [4001, 4002, 4003, 4004, 4005]


def _client(client_id: int, gfx_ns: int) -> str:
    return AMDGPU.replace("drm-client-id:\t217", f"drm-client-id:\t{client_id}").replace(
        "drm-engine-gfx:\t107322799", f"drm-engine-gfx:\t{gfx_ns}"
    )


def _tree(tmp_path: Path) -> FakeProc:
    proc = FakeProc(tmp_path)
    for pid in PIDS:
        proc.fd(pid, 5, _client(pid, 0))
    return proc


def test_each_call_reads_the_new_processes_then_the_ones_read_longest_ago(tmp_path):
    proc = _tree(tmp_path)
    index = DrmFdIndex(clock=lambda: 0.0, max_reads=2)

    def read(pids=PIDS):
        clients = read_drm_clients(pids, host=proc.host, stat_fd=FakeStat(), index=index)
        return [c.pid for c in clients], index.last_due

    assert read() == (PIDS, {*PIDS})  # never read: all of them, whatever the budget
    assert read() == ([4001, 4002], {4001, 4002})
    assert read() == ([4003, 4004], {4003, 4004})
    assert read() == ([4001, 4005], {4005, 4001})
    assert read([*PIDS, 4006]) == ([4002, 4003], {4002, 4003, 4006})  # 4006: new, read, no DRM fd
    # Within the budget: every process at every call.
    assert read(PIDS[:2]) == (PIDS[:2], None)


def test_a_client_read_after_polls_left_out_has_its_rate_over_the_whole_interval(tmp_path):
    proc = _tree(tmp_path)
    now_ns = [0]
    sampler = DrmSampler(
        host=proc.host,
        clock_ns=lambda: now_ns[0],
        stat_fd=FakeStat(),
        index=DrmFdIndex(clock=lambda: 0.0, max_reads=1),
    )
    first = sampler.sample(PIDS[:2])
    assert first.unread == frozenset() and [u.engines[0].busy_pct for u in first.clients] == [None, None]
    for pid in PIDS[:2]:
        proc.rewrite(pid, 5, _client(pid, 1_000_000_000))  # 1 s busy in the 2 s to come
    now_ns[0] = 1_000_000_000
    second = sampler.sample(PIDS[:2])
    assert second.unread == {4002} and [(u.client.pid, u.engines[0].busy_pct) for u in second.clients] == [
        (4001, 100.0)
    ]
    now_ns[0] = 2_000_000_000
    third = sampler.sample(PIDS[:2])
    # 4002: 1 s busy over the 2 s since its first read (not over the 1 s since the last sample).
    assert third.unread == {4001} and [(u.client.pid, u.engines[0].busy_pct) for u in third.clients] == [
        (4002, 50.0)
    ]


def test_the_rows_of_processes_not_read_stay_as_last_read(tmp_path):
    proc = _tree(tmp_path)
    sysfs = amd_sysfs(tmp_path)
    host = HostPaths(procfs=str(proc.root), sysfs=str(sysfs))
    index = DrmFdIndex(clock=lambda: 0.0, max_reads=2)
    sampler = VendorGpuSampler(host=host, drm=DrmSampler(host=host, stat_fd=FakeStat(), index=index))
    gpus = sampler.gpus(list_system_gpus(host=host), 0)
    first = sampler.poll(PIDS, gpus)
    assert sorted(first.by_pid) == PIDS
    proc.rewrite(
        4005, 5, _client(4005, 0).replace("drm-memory-vram:\t2068 KiB", "drm-memory-vram:\t4096 KiB")
    )
    second = sampler.poll(PIDS, gpus)
    assert sorted(second.by_pid) == PIDS  # three not read: their rows as before
    assert second.by_pid[4005] == first.by_pid[4005]  # 4005's new memory waits for its read
    sampler.poll(PIDS, gpus)
    fourth = sampler.poll(PIDS, gpus)
    assert 4005 in index.last_due and fourth.by_pid[4005][0].mem_used_mib == 4.0
    # A process gone from the job goes at once, read or not.
    assert sorted(sampler.poll(PIDS[:4], gpus).by_pid) == PIDS[:4]
    # GPUs numbered anew (NVML's count grew): the rows not read follow their GPU's number.
    moved = sampler.gpus(list_system_gpus(host=host), 3)
    after = sampler.poll(PIDS[:4], moved)
    radeon = next(g.index for g in moved if g.pci_bus_id == "0000:08:00.0")
    assert index.last_due and set(after.by_pid) == set(PIDS[:4]) > index.last_due
    assert {row.index for rows in after.by_pid.values() for row in rows} == {radeon} != {0}


def test_the_machine_scan_asks_who_holds_a_gpu_and_reads_no_figures_between_scans(tmp_path):
    proc = _tree(tmp_path)
    scan = DrmUserScan(host=proc.host, stat_fd=FakeStat(), clock=lambda: 0.0, refresh_s=0.0)
    assert {u.pid for u in scan.users().by_pdev["0000:08:00.0"]} == set(PIDS)
    for pid in PIDS:
        (proc.root / str(pid) / "fdinfo" / "5").unlink()  # a reread would find the client gone
    assert {u.pid for u in scan.users().by_pdev["0000:08:00.0"]} == set(PIDS)
    assert scan.index.scans == len(PIDS)


def test_fd_numbers_listed_again_find_a_new_client_and_spare_the_stat_of_every_fd(tmp_path):
    proc = _tree(tmp_path)
    now = [0.0]
    index = DrmFdIndex(clock=lambda: now[0], rescan_s=5.0, max_reads=None)

    def read():
        return [
            (c.pid, c.info.client_id)
            for c in read_drm_clients([4001], host=proc.host, stat_fd=FakeStat(), index=index)
        ]

    assert read() == [(4001, 4001)] and index.scans == 1
    now[0] = 6.0  # fd numbers listed again: the same ones, no scan
    assert read() == [(4001, 4001)] and index.scans == 1
    proc.fd(4001, 9, _client(77, 0))  # a second client (a fixture's folder size says nothing of it)
    now[0] = 12.0
    assert read() == [(4001, 4001), (4001, 77)] and index.scans == 2
    now[0] = 12.0 + 5.0 * 60  # every fd stat()ed again after 5 minutes, whatever the listing says
    assert read() == [(4001, 4001), (4001, 77)] and index.scans == 3


def test_a_users_name_is_read_again_when_its_fds_are_scanned_again(tmp_path):
    proc = _tree(tmp_path)
    comm = proc.root / "4001" / "comm"
    comm.write_text("python3\n")
    now = [0.0]
    scan = DrmUserScan(host=proc.host, stat_fd=FakeStat(), clock=lambda: now[0], refresh_s=0.0)

    def name() -> str:
        (user,) = [u for u in scan.users().by_pdev["0000:08:00.0"] if u.pid == 4001]
        return user.name

    assert name() == "python3"
    comm.write_text("Xorg\n")
    now[0] = 30.0  # no scan of its fds: the name it had
    assert name() == "python3"
    now[0] = 61.0  # its fds scanned again (USERS_FD_RESCAN_S): its name read again
    assert name() == "Xorg"


def test_a_process_with_a_new_client_beside_a_known_one_has_no_rate_yet_on_that_gpu(tmp_path):
    proc = _tree(tmp_path)
    sysfs = amd_sysfs(tmp_path)
    host = HostPaths(procfs=str(proc.root), sysfs=str(sysfs))
    now_ns = [0]
    index = DrmFdIndex(clock=lambda: now_ns[0] / 1e9)  # fd numbers listed again 5 s on
    sampler = VendorGpuSampler(
        host=host, drm=DrmSampler(host=host, clock_ns=lambda: now_ns[0], stat_fd=FakeStat(), index=index)
    )
    gpus = sampler.gpus(list_system_gpus(host=host), 0)
    sampler.poll([4001], gpus)
    proc.rewrite(4001, 5, _client(4001, 5_000_000_000))
    proc.fd(4001, 9, _client(88, 0))  # a second client of its own, read for the first time
    now_ns[0] = 10_000_000_000
    (row,) = sampler.poll([4001], gpus).by_pid[4001]
    # Not 50 %: the new client's share of the GPU is not known yet.
    assert (row.sm_util, row.unknown_reason) == (None, "first-sample")
    proc.rewrite(4001, 9, _client(88, 2_500_000_000))
    proc.rewrite(4001, 5, _client(4001, 10_000_000_000))
    now_ns[0] = 20_000_000_000
    (row,) = sampler.poll([4001], gpus).by_pid[4001]
    assert (row.sm_util, row.unknown_reason) == (75.0, None)
