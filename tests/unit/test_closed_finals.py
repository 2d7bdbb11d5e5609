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
from probe_wire.names import segment_path
from sidecar.sources.segments import closed_finals
from tests.helpers.harness import REPO

NOBODY = 65534
WRITER = """
import os, sys
import probe_wire as segment
w = segment.SegmentWriter()
payload = segment.empty_payload(os.getpid(), w.start_ticks)
payload["ppid"] = int(sys.argv[1])
w.publish(payload)
w.close(keep_final=True)
print(os.getpid(), w.start_ticks, flush=True)
"""


@pytest.fixture
def exited_child():
    """(its pid, its start ticks, its parent: this test process) of a writer that closed its segment and exited."""
    r = subprocess.run(
        [sys.executable, "-c", WRITER, str(os.getpid())], cwd=REPO, capture_output=True, text=True, check=True
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
