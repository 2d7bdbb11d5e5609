"""sources/owners.KnownProcesses: a process's identity and real uid read once while it lives, with
real processes and real pidfds; every answer checked against hostfs.procid's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hostfs.procid import process_identity, process_real_uid
from sidecar.sources import owners
from sidecar.sources.owners import KnownProcesses, next_recheck

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux 5.3+)")


class CountingReader:
    def __init__(self, also=None):
        self.calls: list[int] = []
        self.also = also

    def __call__(self, pid: int) -> int | None:
        self.calls.append(pid)
        if self.also is not None:
            self.also(pid)
        return process_real_uid(pid)


@pytest.fixture
def sleepers():
    procs: list[subprocess.Popen] = []

    def start(n: int = 1, code: str | None = None) -> list[subprocess.Popen]:
        for _ in range(n):
            argv = [sys.executable, "-c", code] if code else ["sleep", "60"]
            procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        return procs[-n:]

    yield start
    for p in procs:
        p.kill()
        p.wait()


# Rechecks further off than any test polls: next_recheck's phase (a pid) stays below pid_max, 2**22.
NO_RECHECK = 2**23


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_live_process_is_read_once_and_answered_as_procid_does(sleepers):
    [p] = sleepers()
    reader = CountingReader()
    uids = KnownProcesses(8, read_uid=reader)
    for _ in range(next_recheck(1, p.pid, owners.RECHECK_EVERY_POLLS) - 1):  # polls 1 to the last before
        uids.new_poll()
        assert uids.real_uid(p.pid) == process_real_uid(p.pid) == os.getuid()
    assert reader.calls == [p.pid]
    uids.close()


def test_an_exited_process_is_forgotten_at_the_next_poll(sleepers):
    [p, q] = sleepers(2)
    reader = CountingReader()
    uids = KnownProcesses(8, read_uid=reader, recheck_every_polls=NO_RECHECK)
    uids.new_poll()
    assert uids.real_uid(p.pid) == uids.real_uid(q.pid) == os.getuid()
    p.kill()
    p.wait()  # reaped: its pid is free for a newcomer
    uids.new_poll()
    assert len(uids) == 1  # q's pidfd kept, p's closed
    assert uids.real_uid(p.pid) is None  # read again: no process has the pid now
    assert uids.real_uid(q.pid) == os.getuid()
    assert reader.calls == [p.pid, q.pid, p.pid]
    uids.close()


def test_a_process_exiting_during_the_read_is_not_remembered(sleepers):
    [p] = sleepers()

    def kill(pid):
        p.kill()
        p.wait()

    reader = CountingReader(also=kill)
    uids = KnownProcesses(8, read_uid=reader)
    uids.new_poll()
    uids.real_uid(p.pid)
    assert len(uids) == 0
    uids.new_poll()
    assert uids.real_uid(p.pid) is None
    assert reader.calls == [p.pid, p.pid]


def test_a_live_process_is_read_again_every_recheck_polls(sleepers):
    [p] = sleepers()
    read_at: list[int] = []
    uids = KnownProcesses(8, read_uid=lambda pid: read_at.append(uids._poll) or process_real_uid(pid), recheck_every_polls=3)
    for _ in range(12):
        uids.new_poll()
        uids.real_uid(p.pid)
    gaps = [b - a for a, b in zip(read_at, read_at[1:], strict=False)]
    assert read_at[0] == 1 and 1 <= gaps[0] <= 3 and set(gaps[1:]) == {3}
    uids.close()


def test_the_rechecks_of_processes_read_at_one_poll_are_spread_over_the_polls():
    every = owners.RECHECK_EVERY_POLLS
    for poll in (1, 7, 1000):
        due = [next_recheck(poll, pid, every) for pid in range(5000, 5000 + every)]
        assert sorted(due) == list(range(poll + 1, poll + every + 1))  # one a poll, none later than the bound
        assert all(next_recheck(d, pid, every) == d + every for d, pid in zip(due, range(5000, 5000 + every), strict=True))


@pytest.mark.skipif(os.geteuid() != 0, reason="a process changes its real uid only with privilege")
def test_a_setuid_is_seen_within_the_recheck_bound(sleepers):
    nobody = 65534
    [p] = sleepers(code=f"import os, time; time.sleep(0.3); os.setuid({nobody}); time.sleep(60)")
    uids = KnownProcesses(8, recheck_every_polls=2)
    uids.new_poll()
    assert uids.real_uid(p.pid) == 0
    deadline = time.monotonic() + 10
    while process_real_uid(p.pid) != nobody:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    seen = []
    for _ in range(2):
        uids.new_poll()
        seen.append(uids.real_uid(p.pid))
    assert seen[-1] == nobody
    uids.close()


def test_the_descriptor_budget_holds_and_close_frees_every_pidfd(sleepers):
    procs = sleepers(3)
    before = open_fds()
    reader = CountingReader()
    uids = KnownProcesses(2, read_uid=reader, recheck_every_polls=NO_RECHECK)
    for _ in range(3):
        uids.new_poll()
        assert [uids.real_uid(p.pid) for p in procs] == [os.getuid()] * 3
    assert len(uids) == 2 and open_fds() == before + 2
    assert len(reader.calls) == 2 + 3  # the third process, over budget, is read at every poll
    uids.close()
    assert len(uids) == 0 and open_fds() == before


def test_without_pidfds_every_lookup_reads(sleepers, monkeypatch):
    [p] = sleepers()
    reader = CountingReader()
    uids = KnownProcesses(8, read_uid=reader)
    monkeypatch.setattr(uids, "_have_pidfd", False)
    for _ in range(3):
        uids.new_poll()
        assert uids.real_uid(p.pid) == os.getuid()
    assert reader.calls == [p.pid] * 3 and len(uids) == 0


def test_a_pid_that_names_no_process_is_answered_none_and_kept_nowhere():
    # Above any pid the kernel hands out (pid_max is at most 2**22).
    uids = KnownProcesses(8)
    uids.new_poll()
    assert uids.real_uid(2**22 + 1) is None and len(uids) == 0


def test_an_identity_is_read_once_while_the_process_lives_and_its_exit_is_reported(sleepers):
    [p, q] = sleepers(2)
    reads: list[int] = []
    known = KnownProcesses(8, read_identity=lambda pid: reads.append(pid) or process_identity(pid))
    for _ in range(25):  # no recheck: a start time never changes
        assert known.new_poll() == set()
        assert known.identity(p.pid) == process_identity(p.pid) == (p.pid, process_identity(p.pid)[1])
        assert known.real_uid(p.pid) == os.getuid()  # the same pidfd serves both
        assert known.identity(q.pid) == process_identity(q.pid)
    assert reads == [p.pid, q.pid] and len(known) == 2
    p.kill()
    p.wait()
    assert known.new_poll() == {p.pid} and len(known) == 1
    assert known.identity(p.pid) is None and reads[-1] == p.pid
    assert known.new_poll() == set()
    known.close()


def test_a_zombie_has_no_identity_and_is_not_remembered(sleepers):
    [p] = sleepers()
    p.kill()
    deadline = time.monotonic() + 10
    while process_identity(p.pid) is not None:  # killed, not reaped: a zombie
        assert time.monotonic() < deadline
        time.sleep(0.01)
    known = KnownProcesses(8)
    known.new_poll()
    assert known.identity(p.pid) is None and len(known) == 0
    p.wait()


@pytest.mark.parametrize("pid", [2**31, 2**32 + 5, 2**64, -1, 0])
def test_a_number_no_pid_can_be_is_answered_as_procid_does_without_raising(pid):
    known = KnownProcesses(8)
    known.new_poll()
    assert known.identity(pid) == process_identity(pid)
    assert known.real_uid(pid) == process_real_uid(pid)
    assert len(known) == 0


def test_a_process_not_asked_about_for_a_recheck_period_gives_its_pidfd_back(sleepers):
    [asked, listed_once] = sleepers(2)
    known = KnownProcesses(8, recheck_every_polls=5)
    known.new_poll()
    known.identity(listed_once.pid)
    for _ in range(11):
        known.new_poll()
        known.identity(asked.pid)
    assert set(known._known) == {asked.pid}  # the other's slot freed, though its process lives
    known.close()


def test_no_pidfds_where_proc_shows_another_pid_namespace(sleepers, monkeypatch):
    [p] = sleepers()
    monkeypatch.setattr(owners, "proc_is_ours", lambda **kw: False)
    known = KnownProcesses(8)
    known.new_poll()
    assert known.identity(p.pid) == process_identity(p.pid) and len(known) == 0
