"""Cleanup across PID namespaces (issue 12 item 5): a segment is removed only when its writer is
provably dead in the reader's own PID namespace. Real namespaces (`unshare -p -f --mount-proc`, as
root), real writers, the sidecar's own segment source; and a zombie writer, dead at once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import zlib

import pytest

import probe_wire as segment
from hostfs.procid import pid_namespace_id, process_start_ticks
from probe_wire import MAGIC, SegmentWriter, read_segment, segment_path
from probe_wire.codec import _pack
from sidecar.poll.poller import Poller
from sidecar.sources.proctree import TreeSnapshot
from sidecar.sources.segments import SegmentSource
from tests.helpers.harness import REPO, python_env, wait_for
from tests.helpers.recording_source import RecordingSegmentSource
from tests.helpers.stress_jobs import variant

needs_unshare = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)"
)


@pytest.fixture
def host_job():
    """A live writer in our namespace: its segment must survive every foreign sidecar."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.stress_jobs", "once"], env=python_env(), cwd=REPO, stdout=subprocess.PIPE
    )
    assert proc.stdout.readline() == b"published\n"
    yield proc.pid
    proc.terminate()
    proc.wait()


def in_new_pid_namespace(code: str, *args: str, **kw) -> subprocess.Popen:
    """`code` run by python as pid 1 of a new PID namespace with its own /proc, sharing /dev/shm."""
    return subprocess.Popen(
        ["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", code, *args],
        env=python_env({"LD_LIBRARY_PATH": "/nonexistent"}),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        **kw,
    )


@needs_unshare
def test_a_sidecar_in_another_pid_namespace_never_sweeps_our_live_segments(host_job):
    """The issue's reproduction: such a sidecar took "pid not visible" for "process dead" and
    removed the segments of every job on the host on its first poll."""
    code = "import sys, sidecar.cli.main; sys.exit(sidecar.cli.main.main(['--pid', '1', '--once', '--json']))"
    proc = in_new_pid_namespace(code)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert json.loads(out)["target"]["pid"] == 1
    assert os.path.exists(segment_path(host_job)), "a sidecar of another PID namespace removed a live segment"
    assert read_segment(host_job).state == "ok"


WRITER_IN_NS = """
import os, sys
from hostfs.procid import process_start_ticks
from probe_wire import SegmentWriter, empty_payload
w = SegmentWriter()
w.publish(empty_payload(start_ticks=w.start_ticks))
print(w.name, w.pidns, flush=True)
sys.stdin.readline()
w.close()
"""


@needs_unshare
def test_our_sidecar_never_sweeps_the_segment_of_a_writer_in_another_namespace():
    """The writer is pid 1 of its namespace: `dsh-probe.1`, while our pid 1 is another process
    (alive, other start ticks). Before, the sweep read it as stale and removed it."""
    proc = in_new_pid_namespace(WRITER_IN_NS)
    try:
        name, pidns = proc.stdout.readline().split()
        assert name == "/dsh-probe.1" and int(pidns) != pid_namespace_id()
        r = read_segment(1)
        assert r.state == "stale" and "another PID namespace" in r.error, r
        src = SegmentSource()
        src.poll(TreeSnapshot(os.getpid(), True, ()))  # the first poll sweeps the whole of /dev/shm
        assert segment.sweep_dead_segments() == []
        # (a dead writer's segment another test left in this /dev/shm may go: that sweep is right)
        assert os.path.exists(segment_path(1)) and 1 not in src.removed, src.removed
    finally:
        proc.communicate("\n", timeout=30)
    assert not os.path.exists(segment_path(1))  # its own close still removes it


def test_a_zombie_writer_s_segment_goes_at_once(host_job):
    """SIGKILLed and not reaped (state Z): dead, so its segment goes at the next poll, the one that
    says the target exited, not when someone reaps it."""
    src = RecordingSegmentSource()
    poller = Poller(host_job, interval_s=0.1, segment_source=src, system_gpus_fn=list)
    try:
        assert poller.poll_once()["target"]["alive"] is True
        assert src.last[host_job].state == "ok"
        os.kill(host_job, signal.SIGKILL)
        wait_for(lambda: _state(host_job) == "Z", what="a zombie")
        doc = poller.poll_once()
        assert doc["target"]["alive"] is False
        assert not os.path.exists(segment_path(host_job)), "a zombie's segment kept"
        assert host_job in src.removed
    finally:
        poller.stop()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def legacy_segment(pid: int, ticks: int) -> None:
    """The bytes a writer of before the namespace field wrote: the last 8 header bytes zero."""
    data = _pack(variant(pid, ticks, 0))
    header = segment.HEADER.pack(MAGIC, 1, 64, 2, pid, 0, ticks, len(data), zlib.crc32(data), 1000.0)
    with open(segment_path(pid), "wb") as f:
        f.write((header + data).ljust(65536, b"\0"))
    os.chmod(segment_path(pid), 0o600)


def test_a_header_without_the_namespace_field_is_still_read_but_never_swept():
    proc = subprocess.Popen(["sleep", "300"])
    try:
        ticks = process_start_ticks(proc.pid)
        legacy_segment(proc.pid, ticks)
        r = read_segment(proc.pid)
        assert r.state == "ok" and r.writer_pidns == 0
        # Its writer (as far as the header says) is dead: the pid now runs other start ticks. With no
        # namespace recorded that proves nothing, so it stays.
        legacy_segment(proc.pid, ticks - 1)
        assert read_segment(proc.pid).state == "stale"
        assert segment.remove_if_dead(proc.pid) is False and os.path.exists(segment_path(proc.pid))
        # The same file with our namespace recorded is provably a dead writer's.
        w = SegmentWriter(pid=proc.pid, start_ticks=ticks - 1)
        assert w.name == f"/dsh-probe.{proc.pid}.{ticks - 1}"  # the legacy file was not ours to replace
        w.detach()
        assert segment.remove_if_dead(proc.pid, ticks - 1) is True
    finally:
        proc.kill()
        proc.wait()
        segment.remove_segment(proc.pid)
