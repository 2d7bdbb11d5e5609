"""Issue 11 item 8: a job stopped by SIGTERM/SIGKILL leaves its segments in /dev/shm until some
sidecar sweeps them; the first probe of the user's next process removes those of dead writers,
once, and leaves live writers' segments and other users' files alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probe_wire import remove_segment, segment_path
from probe_wire.cleanup import FINAL_SPARED_S
from tests.helpers.closed_final import CLOSED_FINAL_WRITER

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
WRITER = (
    "import sys, time; from probe_wire import SegmentWriter; import probe_wire as segment; "
    "w = SegmentWriter(); w.publish(segment.empty_payload()); print(w.pid, flush=True); time.sleep(60)"
)
PROBED = (
    "import json, time, torch, probe; from probe._state import PROBE; "
    "m = probe.register(torch.nn.Linear(2, 2)); time.sleep(1.0); print(json.dumps(PROBE.swept))"
)


def env(**extra: str) -> dict:
    e = dict(os.environ, PYTHONPATH=str(REPO), DSH_PROBE_INTERVAL_S="0.2")
    e.update(extra)
    return e


def start_writer() -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", WRITER], env=env(), stdout=subprocess.PIPE, text=True)
    assert int(p.stdout.readline()) == p.pid
    return p


def test_the_first_probe_removes_dead_writers_segments_of_its_user_only():
    dead = start_writer()
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    live = start_writer()
    others = start_writer() if os.getuid() == 0 else None
    try:
        if others is not None:  # the dead writer's file, as another user's would be
            others.send_signal(signal.SIGKILL)
            others.wait()
            os.chown(segment_path(others.pid), 65534, 65534)
        assert os.path.exists(segment_path(dead.pid))
        out = subprocess.run([sys.executable, "-c", PROBED], env=env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        swept = json.loads(out.stdout.strip().splitlines()[-1])
        assert dead.pid in swept and not os.path.exists(segment_path(dead.pid))
        assert live.pid not in swept and os.path.exists(segment_path(live.pid))
        if others is not None:  # a dead writer of another user: not this user's to remove
            assert others.pid not in swept and os.path.exists(segment_path(others.pid))
    finally:
        live.kill()
        live.wait()
        time.sleep(0.1)
        for p in (live, others):
            if p is not None and os.path.exists(segment_path(p.pid)):
                os.unlink(segment_path(p.pid))


def _closed_final() -> int:
    """The pid of a writer that published, closed its segment keeping that last publish (as the
    probe does when its process exits) and exited."""
    out = subprocess.run(
        [sys.executable, "-c", CLOSED_FINAL_WRITER, str(os.getpid())],
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(out.stdout.split()[0])
    assert os.path.exists(segment_path(pid))
    return pid


def test_the_first_probe_leaves_a_final_publish_of_a_moment_ago_and_sweeps_an_old_one():
    """A rank that ended just before its sibling started its probe left its final publish for the
    monitor (a sidecar's next poll, a `--once` after the ranks ended): the sibling's start sweep once
    removed it, and the job's final state lost that rank. Left now for FINAL_SPARED_S; one older
    than that is a leftover nobody read, swept as a killed writer's is at any age."""
    fresh, old = _closed_final(), _closed_final()
    aged = time.time() - FINAL_SPARED_S - 1
    os.utime(segment_path(old), (aged, aged))
    killed = start_writer()
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    try:
        out = subprocess.run([sys.executable, "-c", PROBED], env=env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        swept = json.loads(out.stdout.strip().splitlines()[-1])
        assert fresh not in swept and os.path.exists(segment_path(fresh))
        assert old in swept and not os.path.exists(segment_path(old))
        assert killed.pid in swept and not os.path.exists(segment_path(killed.pid))
    finally:
        for pid in (fresh, old, killed.pid):
            remove_segment(pid)
