"""Floods that must not hide a job from root's discovery (issue 26 item 8). Two real users: a
neighbour who floods /dev/shm, and a victim whose job is found only through its probe segment (no
NVML row: no driver here). Real processes, real threads, real files of each uid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from probe_wire import segment_path
from probe_wire.procid import process_identity
from sidecar.poll.jobs import MAX_CANDIDATES
from tests.helpers.harness import REPO, python_env, wait_for
from tests.helpers.other_users import FORGER, NOBODY, write_as

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two other users"),
]

FLOODER, VICTIM = NOBODY, FORGER


def _flood_child(write_fd: int, hold_fd: int, n_threads: int) -> None:
    """As FLOODER: n_threads threads, each naming an empty `dsh-probe.<its thread id>` (a thread id is
    a pid /proc answers for, owned by the flooder: the file's owner is "the process's" user). Sends
    the ids, then holds until the parent closes `hold_fd`'s other end."""
    code = 1
    try:
        os.setgroups([])
        os.setgid(FLOODER)
        os.setuid(FLOODER)
        threading.stack_size(64 * 1024)
        release = threading.Event()
        tids: list[int] = []
        lock = threading.Lock()

        def squat() -> None:
            tid = threading.get_native_id()
            os.close(os.open(segment_path(tid), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            with lock:
                tids.append(tid)
            release.wait()

        threads = [threading.Thread(target=squat, daemon=True) for _ in range(n_threads)]
        for t in threads:
            t.start()
        while len(tids) < n_threads:
            threading.Event().wait(0.01)
        os.write(write_fd, (json.dumps(tids) + "\n").encode())
        os.read(hold_fd, 1)  # the parent closes its end: done
        for tid in tids:
            os.unlink(segment_path(tid))
        code = 0
    finally:
        os._exit(code)


def _new_tid() -> int:
    ids: list[int] = []
    t = threading.Thread(target=lambda: ids.append(threading.get_native_id()))
    t.start()
    t.join()
    return ids[0]


def _far_from_wrapping(needed: int) -> None:
    """Makes the next `needed` pids come in increasing order: when the kernel's pid counter is within
    `needed` of pid_max, short-lived threads take the pids up to it (bounded by pid_max)."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    last = _new_tid()
    if last + needed < pid_max:
        return
    for _ in range(pid_max):
        tid = _new_tid()
        if tid < last:
            return  # wrapped: the counter starts again from the bottom
        last = tid


@pytest.fixture
def flood():
    """FLOODER's MAX_CANDIDATES + 6 segment files, each under a live thread id of FLOODER's, taken
    in increasing pid order (a process started next has a larger pid than all of them)."""
    _far_from_wrapping(2 * MAX_CANDIDATES)
    ids_r, ids_w = os.pipe()
    hold_r, hold_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ids_r)
        os.close(hold_w)
        _flood_child(ids_w, hold_r, MAX_CANDIDATES + 6)
    os.close(ids_w)
    os.close(hold_r)
    tids: list[int] = []
    try:
        with os.fdopen(ids_r) as f:
            tids = json.loads(f.readline())
        yield tids
    finally:
        os.close(hold_w)
        os.waitpid(child, 0)
        for tid in tids:
            if os.path.lexists(segment_path(tid)):
                os.unlink(segment_path(tid))


def _roots_discovery() -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "--once", "--json"],
        env=python_env({"LD_LIBRARY_PATH": "/nonexistent"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_flood_of_one_users_segments_never_hides_another_users_job(flood):
    """1,030 empty segments of the flooder (before: the cap of MAX_CANDIDATES was taken in pid order,
    all by the flood, and the victim's job, started after it, was never looked at)."""
    victim = subprocess.Popen(
        ["setpriv", f"--reuid={VICTIM}", f"--regid={VICTIM}", "--clear-groups", "sleep", "300"],
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: process_identity(victim.pid), what="the victim's process")
        assert victim.pid > max(flood), "pids wrapped: the flood must come first in pid order"
        write_as(VICTIM, victim.pid)  # the victim's probe segment, written by the victim's uid
        doc = _roots_discovery()
        roots = {j["root_pid"]: j for j in doc["jobs"]["jobs"]}
        assert victim.pid in roots, sorted(roots)[-5:]
        assert roots[victim.pid]["uid"] == VICTIM
    finally:
        victim.kill()
        victim.wait()
        if os.path.lexists(segment_path(victim.pid)):
            os.unlink(segment_path(victim.pid))
