"""What one user's segments may cost root's discovery a poll (issue 37 item 9): the owner checks of
a user's names (sources/segment_dir.py SegmentOwners: OWNER_CHECKS_PER_POLL a poll, the rest waiting in
turn; never another user's), and the turns of a flagged user's jobs (poll/discovery.py JobTurns)."""

from __future__ import annotations

import os
import subprocess
import threading
from types import SimpleNamespace

import pytest

import sidecar.sources.segment_dir as segment_dir
from hostfs.procid import process_start_ticks
from probe_wire.shm_index import NameIndex
from sidecar.poll.discovery import FLAGGED_POLLS, JobTurns
from sidecar.sources.segment_dir import FLOODING_WAITING, OWNER_CHECKS_PER_POLL, SegmentOwners

OTHER = 65534


@pytest.fixture
def checks(monkeypatch) -> list[int]:
    """The pids whose process segment_dir.leader_real_uid read, since the list was last cleared."""
    read: list[int] = []
    real = segment_dir.leader_real_uid
    monkeypatch.setattr(segment_dir, "leader_real_uid", lambda pid, **kw: read.append(pid) or real(pid, **kw))
    return read


def _touch(path, uid: int | None = None) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    if uid is not None:
        os.chown(path, uid, uid)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make another user's files")
def test_a_users_flood_of_names_waits_for_its_checks_and_another_users_segment_does_not(tmp_path, checks):
    shm = tmp_path / "shm"
    shm.mkdir()
    names = NameIndex(str(shm))
    owners = SegmentOwners(None, names)
    try:
        owners.update(names.take_changed(), bounded=False)  # the first poll: what is there, whole
        flood = range(200000, 200000 + 3 * FLOODING_WAITING)
        for pid in flood:
            _touch(shm / f"dsh-probe.{pid}", OTHER)  # no such processes: never a job
        mine = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
        try:
            _touch(shm / f"dsh-probe.{mine.pid}")
            names.refresh()
            checks.clear()
            owners.update(names.take_changed())
            assert owners.found == {mine.pid: os.getuid()}  # judged in the same poll
            assert len([p for p in checks if p in flood]) == OWNER_CHECKS_PER_POLL
            assert owners.deferred == {OTHER} and owners.flooding() == {OTHER}
            polls = 1
            while owners.deferred:
                names.refresh()
                owners.update(names.take_changed())
                polls += 1
            assert polls == len(flood) // OWNER_CHECKS_PER_POLL and owners.flooding() == set()
            assert owners.found == {mine.pid: os.getuid()}
        finally:
            mine.kill()
            mine.wait()
    finally:
        names.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make another user's files")
def test_a_squatters_spent_checks_never_make_the_process_wait(tmp_path):
    """The name another user squats comes first among a process's names: its owner's checks spent
    by that user's flood, the process's own file (its fallback name) is judged on its own user's."""
    shm = tmp_path / "shm"
    shm.mkdir()
    mine = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    names = NameIndex(str(shm))
    try:
        _touch(shm / f"dsh-probe.{mine.pid}", OTHER)
        _touch(shm / f"dsh-probe.{mine.pid}.{process_start_ticks(mine.pid)}")
        names.refresh()
        owners = SegmentOwners(None, names)
        owners.update(set())  # a poll, whose checks count from here
        owners._checks[OTHER] = OWNER_CHECKS_PER_POLL  # spent by the squatter's flood this poll
        owners._judge(mine.pid)
        assert owners.found == {mine.pid: os.getuid()} and owners.deferred == set()
    finally:
        mine.kill()
        mine.wait()
        names.close()


def test_a_thread_id_names_no_segment(tmp_path):
    """A probe names its segment by its process's getpid(): a name under one of its threads' ids
    (which /proc answers for too) is no process's own."""
    shm = tmp_path / "shm"
    shm.mkdir()
    started, release, tids = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=lambda: (tids.append(threading.get_native_id()), started.set(), release.wait()))
    thread.start()
    names = NameIndex(str(shm))
    try:
        started.wait()
        _touch(shm / f"dsh-probe.{tids[0]}")
        _touch(shm / f"dsh-probe.{os.getpid()}")
        names.refresh()
        owners = SegmentOwners(None, names)
        owners.update(names.take_changed(), bounded=False)
        assert owners.found == {os.getpid(): os.getuid()}
    finally:
        release.set()
        thread.join()
        names.close()


def _job(uid: int) -> SimpleNamespace:
    root = SimpleNamespace(uid=uid)
    return SimpleNamespace(poller=SimpleNamespace(target_gone_at=None, root_info=lambda: root), owner=uid, polled=-1)


def test_a_flagged_users_jobs_are_polled_in_turn_and_the_others_at_every_poll():
    turns = JobTurns()
    jobs = [(f"f{i}", _job(OTHER)) for i in range(4)] + [(f"v{i}", _job(1000)) for i in range(2)]
    turns.flag({OTHER}, 0)
    polled: list[list[str]] = []
    for poll in range(1, 9):
        now = [jid for jid, job in turns.to_poll(jobs)]
        for jid, job in jobs:
            if jid in now:
                job.polled = poll
        polled.append(now)
    assert all({"v0", "v1"} <= set(now) for now in polled)
    assert set(polled[0]) == {"f0", "f1", "f2", "f3", "v0", "v1"}  # each found job is polled once
    flooder = [[j for j in now if j.startswith("f")] for now in polled[1:]]
    assert flooder == [["f0"], [], ["f1"], [], ["f2"], [], ["f3"]]  # then one every other poll, in turn
    turns.flag(set(), 9 + FLAGGED_POLLS)  # no budget run past since: the flag ends
    assert {jid for jid, _ in turns.to_poll(jobs)} == {jid for jid, _ in jobs}
