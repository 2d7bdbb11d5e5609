"""Discovery's candidates from segment names: a name another user planted (under any pid, pid 1
included) neither makes a job nor, by the thousand, pushes a real job's segment out of the
MAX_CANDIDATES cap (issue 14's shared host: anyone can create files in /dev/shm)."""

from __future__ import annotations

import os
import subprocess

import pytest

from hostfs.procid import process_identity
from sidecar.poll.discovery import MAX_CANDIDATES, JobsPoller
from tests.helpers.harness import wait_for

NOBODY = 65534
VICTIM = 1000

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to own files and run processes as other uids"
)


def _plant(shm, name: str, uid: int) -> None:
    path = shm / name
    path.write_bytes(b"")
    os.chown(path, uid, uid)


def _poller(shm, uid: int | None) -> JobsPoller:
    return JobsPoller(uid=uid, shm_dir=str(shm), nvml_source=object(), system_gpus_fn=list)


def test_planted_names_neither_make_jobs_nor_hide_a_real_one(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    victim = subprocess.Popen(
        ["setpriv", f"--reuid={VICTIM}", f"--regid={VICTIM}", "--clear-groups", "sleep", "60"],
        stdin=subprocess.DEVNULL,
    )
    mine = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)  # root's, no probe
    try:
        wait_for(lambda: process_identity(victim.pid), what="the victim's process")
        wait_for(lambda: open(f"/proc/{victim.pid}/status").read().count(f"\t{VICTIM}\t") > 0, what="setuid")
        _plant(shm, f"dsh-probe.{victim.pid}", VICTIM)  # the victim's own segment
        # The neighbour's flood: names that sort first (pid 1), and a name for root's process.
        for n in range(MAX_CANDIDATES):
            _plant(shm, f"dsh-probe.1.{n}", NOBODY)
        _plant(shm, "dsh-probe.1", NOBODY)
        _plant(shm, f"dsh-probe.{mine.pid}", NOBODY)
        for uid in (None, VICTIM):  # a root sidecar, and the victim's own
            assert _poller(shm, uid)._finder._segment_pids() == {victim.pid}, uid
    finally:
        for p in (victim, mine):
            p.kill()
            p.wait()
