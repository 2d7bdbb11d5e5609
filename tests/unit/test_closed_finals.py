"""The final publishes of probed children that exited before a monitor's first poll
(sources/segments.py closed_finals: --pid's and discovery's first poll, issue 39 item 16): a segment
its writer closed is taken for a live parent its payload names only when that parent's user wrote it
after the parent started. A real writer (probe_wire's) in a child process that exits; the names are
read from /dev/shm, where the readers look."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hostfs.procid import process_identity
from probe_wire import SegmentWriter, empty_payload
from probe_wire.names import segment_path
from sidecar.sources import segments
from sidecar.sources.segments import closed_finals
from tests.helpers.closed_final import CLOSED_FINAL_WRITER
from tests.helpers.harness import REPO

NOBODY = 65534


@pytest.fixture
def exited_child():
    """(its pid, its start ticks, its parent: this test process) of a writer that closed its segment and exited."""
    r = subprocess.run(
        [sys.executable, "-c", CLOSED_FINAL_WRITER, str(os.getpid())],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    pid, ticks = (int(x) for x in r.stdout.split())
    assert os.path.exists(segment_path(pid)), "the writer's final publish under its name"
    yield pid, ticks
    for path in (segment_path(pid), segment_path(pid, ticks)):
        if os.path.lexists(path):
            os.unlink(path)


def test_a_closed_segment_is_taken_for_the_live_parent_it_names_that_started_before_it(exited_child):
    pid, ticks = exited_child
    me = process_identity(os.getpid())
    assert me is not None and me[1] <= ticks
    names = [(pid, None, None)]
    found = closed_finals(names, {os.getpid(): me[1]}.get)
    assert list(found) == [(pid, ticks)] and found[(pid, ticks)][0] == os.getpid()
    assert found[(pid, ticks)][1].ppid == os.getpid()
    # a parent that started after the segment was written is another process under that pid
    assert closed_finals(names, {os.getpid(): ticks + 1}.get) == {}
    # a process it does not name, or none at all
    assert closed_finals(names, {os.getpid() + 1: me[1]}.get) == {}
    assert closed_finals(names, lambda ppid: None) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another user")
def test_a_closed_segment_of_another_user_than_the_parent_is_not_taken(exited_child):
    pid, _ = exited_child
    me = process_identity(os.getpid())
    assert me is not None
    os.chown(segment_path(pid), NOBODY, NOBODY)  # planted by another user, naming our process
    assert closed_finals([(pid, None, None)], {os.getpid(): me[1]}.get) == {}


def test_the_names_read_are_bounded_in_all_and_per_pid(exited_child, monkeypatch):
    """A flood of names in /dev/shm costs a first poll a bounded number of header reads: at most
    EXITED_BEFORE_NAMES_READ in all and EXITED_BEFORE_NAMES_PER_PID a pid, so the real final
    publish behind a flood of other pids' names may be missed, never paid for without end."""
    pid, ticks = exited_child
    me = process_identity(os.getpid())
    assert me is not None
    opened: list[str] = []
    real = segments.header_identity
    monkeypatch.setattr(segments, "header_identity", lambda path: (opened.append(path), real(path))[1])
    one_pid = [(pid + 1, None, f"x{i}") for i in range(1000)]  # names of one pid, none of them a segment
    assert closed_finals([*one_pid, (pid, None, None)], {os.getpid(): me[1]}.get) != {}
    assert len(opened) == segments.EXITED_BEFORE_NAMES_PER_PID + 1
    opened.clear()
    many_pids = [(10_000_000 + i, None, None) for i in range(5000)]
    assert closed_finals([*many_pids, (pid, None, None)], {os.getpid(): me[1]}.get) == {}
    assert len(opened) == segments.EXITED_BEFORE_NAMES_READ


def test_a_live_writers_segment_is_not_read_for_a_final_publish(monkeypatch):
    """The segment of a writer that still lives is no exited child's: its payload (up to the
    segment's size, 16 MiB) is never read."""
    w = SegmentWriter()
    try:
        payload = empty_payload(os.getpid(), w.start_ticks)
        payload["ppid"] = os.getppid()
        w.publish(payload)
        reads: list[int] = []
        monkeypatch.setattr(segments, "read_segment", lambda pid, **kw: reads.append(pid))
        parent = process_identity(os.getppid())
        assert parent is not None
        assert closed_finals([(os.getpid(), None, None)], {os.getppid(): parent[1]}.get) == {}
        assert reads == []
    finally:
        w.close()
