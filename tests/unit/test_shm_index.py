"""/dev/shm's names as a monitor follows them (probe_wire/shm_index.py): from inotify's events after
one listing; the directory listed again, a bounded part a refresh, only when the kernel dropped
events; at most MAX_NAMES_PER_PID names of a pid kept, past which only its running process's own
names are; without inotify, listed whenever the mtime moved. Real files in a temporary directory."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from hostfs.procid import process_start_ticks
from probe_wire.names import list_segment_files
from probe_wire.shm_index import MAX_NAMES_PER_PID, NameIndex


@pytest.fixture
def shm(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    return d


@pytest.fixture
def index(shm) -> Iterator[NameIndex]:
    i = NameIndex(str(shm))
    assert i.watching, "inotify is there on Linux"
    yield i
    i.close()


def _touch(path) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def test_names_come_and_go_with_the_events_without_a_listing(shm, index):
    _touch(shm / "dsh-probe.1234")
    _touch(shm / "dsh-probe.1234.99")
    _touch(shm / f"dsh-probe.1234.99.{'ab' * 8}")
    _touch(shm / "dsh-probe-new.1.1234.99.0badcafe")
    _touch(shm / "not-ours")
    version = index.version
    index.refresh()
    assert index.names() == list_segment_files(str(shm)) == [(1234, None, None), (1234, 99, None), (1234, 99, "ab" * 8)]
    assert index.scratch_names() == ["dsh-probe-new.1.1234.99.0badcafe"]
    assert index.version > version and index.take_changed() == {1234} and index.take_changed() == set()
    os.unlink(shm / "dsh-probe.1234.99")
    index.refresh()
    assert index.names() == [(1234, None, None), (1234, 99, "ab" * 8)] and index.take_changed() == {1234}
    version = index.version
    _touch(shm / "bump")  # the directory's mtime moves, nothing of ours changes
    os.unlink(shm / "bump")
    index.refresh()
    assert index.version == version and index.take_changed() == set()
    assert index._listings == 1  # the first listing only


def test_a_pid_crowded_with_names_keeps_its_process_s_own(shm, index):
    """Another user's thousand names under a running process's pid (here: names under start ticks
    that are not its own) take MAX_NAMES_PER_PID places; the process's own random name made after
    them is kept all the same, and found as its own."""
    proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        pid, ticks = proc.pid, process_start_ticks(proc.pid)
        for i in range(1000):
            _touch(shm / f"dsh-probe.{pid}.{ticks + 1}.{i:016x}")
        index.refresh()
        assert len(index) == MAX_NAMES_PER_PID and index.crowded[pid] == 1000 - MAX_NAMES_PER_PID
        own = "cd" * 8
        _touch(shm / f"dsh-probe.{pid}.{ticks}.{own}")
        index.refresh()
        assert index.random_suffixes(pid, ticks, os.getuid()) == [own]
        assert len(index) == MAX_NAMES_PER_PID + 1
    finally:
        proc.kill()
        proc.wait()


def test_events_the_kernel_dropped_are_made_up_by_a_listing_a_part_at_a_time(shm, index):
    """More names at once than inotify's queue holds: the queue overflows, and the directory is
    listed again, SCAN_NAMES_PER_REFRESH names a refresh; names removed meanwhile are not brought back."""
    with open("/proc/sys/fs/inotify/max_queued_events") as f:
        queue = int(f.read())
    index.scan_per_refresh = 1000
    n = queue + 2000
    for i in range(n):
        _touch(shm / f"dsh-probe.{100000 + i}")
    index.refresh()
    assert index._listings == 2 and index._scan is not None  # listing again, a part so far
    os.unlink(shm / f"dsh-probe.{100000 + n - 1}")  # the last made: not listed yet
    refreshes = 1
    while index._scan is not None:
        index.refresh()
        refreshes += 1
    assert refreshes >= n // 1000
    assert index.names() == list_segment_files(str(shm), max_names=n) and len(index) == n - 1


def test_without_inotify_the_directory_is_listed_when_its_mtime_moves(shm):
    index = NameIndex(str(shm), watch=False)
    try:
        assert not index.watching
        t = os.stat(shm).st_mtime - 5
        os.utime(shm, (t, t))
        index.refresh(relist=True)
        listed = index._listings
        index.refresh()
        assert index._listings == listed  # unchanged, settled: not listed again
        _touch(shm / "dsh-probe.4321")
        index.refresh()
        assert index._listings == listed + 1 and index.names() == [(4321, None, None)]
    finally:
        index.close()


def test_a_sweep_takes_the_names_a_part_at_a_time_each_pid_whole(shm, index):
    for pid in (10, 20, 30):
        _touch(shm / f"dsh-probe.{pid}")
        _touch(shm / f"dsh-probe.{pid}.7")
    index.refresh()
    part, last = index.names_after(-1, 3)
    assert part == [(10, None, None), (10, 7, None), (20, None, None), (20, 7, None)] and last == 20
    part, last = index.names_after(last, 3)
    assert part == [(30, None, None), (30, 7, None), (10, None, None), (10, 7, None)] and last == 10
    scratch = [f"dsh-probe-new.1.{pid}.7.0badcafe" for pid in (10, 20, 30)]
    for name in scratch:
        _touch(shm / name)
    index.refresh()
    assert index.scratch_after("", 2) == scratch[:2] and index.scratch_after(scratch[1], 2) == [scratch[2], scratch[0]]
