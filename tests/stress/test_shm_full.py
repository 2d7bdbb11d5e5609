"""/dev/shm full, for real: a real torch job with the real probe runs in a private mount namespace
(`unshare -m`) whose /dev/shm is a 256 KiB tmpfs. Nothing outside the namespace sees the small
/dev/shm, so other jobs on the machine are unaffected. (The probe has no setting for its shared-memory
directory; POSIX shm_open always uses /dev/shm on Linux, so a mount namespace is the way to test.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.harness import REPO, python_env

# The training runs a fixed number of steps (a minute at most): what it proves does not depend on
# how fast the machine is, so these run beside other tests.
pytestmark = pytest.mark.slow
STEPS = 400

SETUP = """
set -e
mount -t tmpfs -o size=256k,mode=1777 dsh-stress-shm /dev/shm
if [ "$FILL_KIB" -gt 0 ]; then
  dd if=/dev/zero of=/dev/shm/filler bs=1024 count="$FILL_KIB" status=none 2>/dev/null || true
fi
exec "$@"
"""


def _can_unshare_mounts() -> str | None:
    if not shutil.which("unshare"):
        return "no unshare(1)"
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs -o size=64k t /dev/shm"],
        capture_output=True,
        text=True,
    )
    return (
        None
        if r.returncode == 0
        else f"cannot mount a tmpfs in a private mount namespace: {r.stderr.strip()}"
    )


@pytest.fixture(scope="module")
def namespace_ok():
    why = _can_unshare_mounts()
    if why:
        pytest.skip(f"{why} (needs root or CAP_SYS_ADMIN)")


def train_in_small_shm(tmp_path: Path, fill_kib: int, *args: str) -> dict:
    out = tmp_path / "result.json"
    env = python_env({"FILL_KIB": str(fill_kib), "DSH_PROBE_INTERVAL_S": "0.05"})
    r = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            SETUP,
            "sh",
            sys.executable,
            "-m",
            "tests.helpers.stress_jobs",
            "train",
            "--out",
            str(out),
            *args,
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return json.loads(out.read_text())


def test_full_shm_turns_the_probe_off_with_one_warning_and_training_goes_on(tmp_path, namespace_ok):
    result = train_in_small_shm(tmp_path, 240, "--steps", str(STEPS), "--seconds", "60")  # 16 KiB left: a segment needs 64
    (warning,) = result["probe_warnings"]
    assert "No space left on device" in warning and "dsh probe disabled" in warning
    assert result["status"]["enabled"] is False and "No space left" in result["status"]["reason"]
    # Training was not disturbed: it made every step and learnt.
    assert result["steps"] == STEPS and result["loss_last"] < result["loss_first"] / 10
    assert result["other_warnings"] == []
    # Nothing half-created is left behind, and later probe calls (events every 50 steps) stay silent.
    assert result["shm_entries"] == [] and result["segment_inode_start"] is None


def test_shm_filling_up_after_the_segment_exists_changes_nothing(tmp_path, namespace_ok):
    """The segment is allocated up front (posix_fallocate): a /dev/shm that fills later can neither
    fail a publish nor kill the job with SIGBUS."""
    result = train_in_small_shm(tmp_path, 0, "--steps", str(STEPS), "--seconds", "60", "--fill-shm-after", "20")
    assert result["shm_free_after_fill"] == 0
    assert result["probe_warnings"] == [] and result["snapshot_errors"] == []
    assert result["status"]["enabled"] is True
    assert result["status"]["publishes"] > result["publishes_at_fill"] + 5  # kept publishing
    assert result["own_read"] == "ok" and result["segment_inode_start"] == result["segment_inode_end"]
    assert result["loss_last"] < result["loss_first"] / 10
