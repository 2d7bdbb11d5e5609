"""Name squatting (issue 12 item 6): another user holds `dsh-probe.<pid>` before the probe of that
pid starts. The probe still publishes (under `dsh-probe.<pid>.<start_ticks>`, which the sidecar
reads), warns once, and never follows or writes through a planted link; `doctor` names what was
planted. Real processes, a real second uid (os.chown), real links."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from hostfs.procid import process_start_ticks
from probe_wire import has_live_segment, segment_path
from probe_wire.cleanup import sweep_dead_segments
from probe_wire.names import SHM_DIR
from tests.helpers.harness import REPO, python_env

SQUATTER = 65533
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create another uid's file")

# The job imports and activates the probe only when told to, once the test has planted its name.
JOB = """
import json, sys
sys.stdin.readline()
import probe
ok = probe.activate()
probe.event("second")  # a second publish: the warning is still said once
print(json.dumps({"ok": ok, **probe.status()}), flush=True)
sys.stdin.readline()
"""


def start_job() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", JOB],
        env=python_env(),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def plant(path: str, how: str, victim: str) -> None:
    if how == "symlink":
        os.symlink(victim, path)
    else:
        with open(path, "wb") as f:
            f.write(b"squatted")
        os.chown(path, SQUATTER, SQUATTER)


def sidecar_once(pid: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "--pid", str(pid), "--once", "--json"],
        env=python_env({"LD_LIBRARY_PATH": "/nonexistent"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@needs_root
@pytest.mark.parametrize("how", ["file of another user", "symlink"])
def test_a_squatted_name_does_not_silence_the_probe(tmp_path, how):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    job = start_job()
    primary = segment_path(job.pid)
    try:
        plant(primary, how, str(victim))
        ticks = process_start_ticks(job.pid)
        job.stdin.write("\n")
        job.stdin.flush()
        status = json.loads(job.stdout.readline())
        assert status["ok"] is True and status["enabled"] is True, status
        assert status["segment"] == f"/dsh-probe.{job.pid}.{ticks}"
        doc = sidecar_once(job.pid)
        (p,) = doc["processes"]
        assert p["probe_state"] == "ok" and p["has_probe"] is True, p
        assert victim.read_bytes() == b"precious", "the probe wrote through a planted link"
        assert os.path.islink(primary) == (how == "symlink")
    finally:
        out, err = job.communicate("\n", timeout=30)
        if os.path.lexists(primary):
            os.unlink(primary)
    assert err.count("is taken by") == 1, err  # warned once
    assert ("symbolic link" if how == "symlink" else f"uid {SQUATTER}") in err
    assert not os.path.exists(segment_path(job.pid, ticks)), "its own exit removes the fallback name"


@needs_root
def test_doctor_reports_planted_links_and_files_owned_by_others(tmp_path):
    live = subprocess.Popen(["sleep", "300"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    planted = [segment_path(live.pid), segment_path(dead.pid)]
    try:
        plant(planted[0], "file", "")
        plant(planted[1], "symlink", str(tmp_path / "nowhere"))
        out = subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "doctor", "--json"],
            env=python_env({"LD_LIBRARY_PATH": "/nonexistent"}),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 1, out.stderr  # problems found
        report = json.loads(out.stdout)
        shm = report["shm"]
        assert f"{planted[1]} (symbolic link)" in shm["links"]
        assert f"{planted[0]}: owned by uid {SQUATTER}, process {live.pid} runs as uid 0" in shm["foreign_files"]
        text = " ".join(p["problem"] for p in report["problems"])
        assert planted[0] in text and planted[1] in text
        assert not (tmp_path / "nowhere").exists()
    finally:
        live.kill()
        live.wait()
        for path in planted:
            if os.path.lexists(path):
                os.unlink(path)



# A launcher that starts the job when told (after the test planted its names): the job's parent.
LAUNCHER = "import os, subprocess, sys; os.read(0, 1); sys.exit(subprocess.call([sys.executable, '-c', sys.argv[1]]))"
# The job: says its pid, starts its probe when told, keeps its model, says its segment, waits.
MAIN_JOB = """
import json, os, sys
print(os.getpid(), flush=True)
sys.stdin.readline()
import torch, probe
model = probe.register(torch.nn.Linear(2, 2))
model(torch.zeros(1, 2))
print(json.dumps(probe.status()), flush=True)
sys.stdin.readline()
"""


@needs_root
@pytest.mark.parametrize("whose", ["the job's parent", "the job itself"])
def test_a_stray_file_under_a_pid_never_makes_the_main_process_a_child(whose):
    """Issue 25 item 8: another user's empty `dsh-probe.<pid>`, named after the job's parent (a shell,
    a launcher) or after the job's main process, planted before its probe starts: the sidecar's
    poll shows the main process as `main`, its probe read."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, MAIN_JOB],
        env=python_env(),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    planted = []
    try:
        launcher.stdin.write("\n")  # the launcher starts the job
        launcher.stdin.flush()
        job_pid = int(launcher.stdout.readline())
        planted.append(segment_path(launcher.pid if whose == "the job's parent" else job_pid))
        plant(planted[0], "file of another user", "")
        launcher.stdin.write("\n")  # the job starts its probe
        launcher.stdin.flush()
        status = json.loads(launcher.stdout.readline())
        assert status["enabled"] is True, status
        doc = sidecar_once(job_pid)
        (p,) = [p for p in doc["processes"] if p["pid"] == job_pid]
        assert p["probe_state"] == "ok" and p["role"] == "main", p
    finally:
        launcher.communicate("\n", timeout=60)
        for path in planted:
            if os.path.lexists(path):
                os.unlink(path)


# Issue 26 item 8b: both names squatted for many pids and plausible start ticks (the attack planted
# 30,012 files for the next pids). Planted here for the pids up to the victim's, which no new
# process of a neighbour's test gets.
SQUAT_PIDS = 1000
SQUAT_TICKS = 7  # start ticks each side of the victim's
SQUAT_RANDOM = 100  # names under the victim's random prefix too, with a segment forged by the squatter


def squat_as(uid: int, pid: int, ticks: int) -> list[str]:
    """Plant, from a forked child running as ``uid`` (a real second user, as an attacker), both names
    of every pid in (pid - SQUAT_PIDS, pid] for start ticks within SQUAT_TICKS of ``ticks``: for
    ``pid`` itself a valid segment that claims a model of the squatter's, under its name and under
    SQUAT_RANDOM names of its random prefix; empty files elsewhere (created with O_EXCL: never
    another's file). The paths planted."""
    from probe_wire import SegmentWriter
    from tests.helpers.stress_jobs import variant

    randoms = [f"{segment_path(pid, ticks)}.{i:016x}" for i in range(SQUAT_RANDOM)]
    empty = []
    for p in range(max(1, pid - SQUAT_PIDS + 1), pid + 1):
        empty += [segment_path(p)] if p != pid else []
        empty += [segment_path(p, t) for t in range(ticks - SQUAT_TICKS, ticks + SQUAT_TICKS + 1)]
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            forged = SegmentWriter(pid=pid, start_ticks=ticks)  # takes dsh-probe.<pid>, free so far
            forged.publish(variant(pid, ticks, 0))
            for path in randoms:
                os.link(segment_path(pid), path)
            forged.detach()
            for path in empty:
                try:
                    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                except FileExistsError:
                    pass
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return [segment_path(pid), *randoms, *empty]


@needs_root
def test_both_names_squatted_for_many_pids_cannot_silence_the_probe():
    """Issue 26 item 8b: another user holds dsh-probe.<pid> and dsh-probe.<pid>.<start_ticks> (for
    its pid and a thousand others, fifteen start ticks each) and a forged segment under names of its
    random prefix. The probe publishes under a random name of its own; the sidecar reads it, by
    --pid and by discovery, with the job's role and model (never the forged one), and the name goes
    with the job."""
    job = subprocess.Popen(
        [sys.executable, "-c", MAIN_JOB],
        env=python_env(),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    planted: list[str] = []
    try:
        pid = int(job.stdout.readline())
        ticks = process_start_ticks(pid)
        planted = squat_as(SQUATTER, pid, ticks)
        # Pids below SQUAT_PIDS squat fewer (a fresh PID namespace starts at 1).
        squatted_pids = min(SQUAT_PIDS, pid)
        assert sum(os.path.exists(p) for p in planted) > squatted_pids * (2 * SQUAT_TICKS + 1)
        job.stdin.write("\n")  # the job starts its probe
        job.stdin.flush()
        status = json.loads(job.stdout.readline())
        assert status["enabled"] is True, status
        assert re.fullmatch(rf"/dsh-probe\.{pid}\.{ticks}\.[0-9a-f]{{16}}", status["segment"]), status
        assert has_live_segment(pid)

        parent_role = "child" if has_live_segment(os.getpid()) else "main"

        def main_process(doc: dict) -> dict:
            (p,) = [p for p in doc["processes"] if p["pid"] == pid]
            # The job's parent is this test process: when it runs the probe too, the job is its child.
            assert p["probe_state"] == "ok" and p["role"] == parent_role, p
            assert [m["name"] for m in p["models"]] == ["Linear"], p["models"]
            return p

        main_process(sidecar_once(pid))
        out = subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "--once", "--json"],
            env=python_env({"LD_LIBRARY_PATH": "/nonexistent"}),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        (doc,) = [d for d in json.loads(out.stdout)["documents"] if any(p["pid"] == pid for p in d["processes"])]
        main_process(doc)
    finally:
        job.communicate("\n", timeout=60)
        for path in planted:
            if os.path.lexists(path):
                os.unlink(path)
    # Its exit leaves its final publish (it named a model) under the random name, marked closed, and
    # the sweep of dead writers removes it there too.
    if os.path.exists(SHM_DIR + status["segment"]):
        assert pid in sweep_dead_segments(owner_uid=os.getuid())
    assert not os.path.exists(SHM_DIR + status["segment"]), "its random name is removed"


def test_a_dead_writers_random_name_is_swept():
    """A writer whose two names were taken, killed (no atexit): the sweep removes its random name,
    and leaves the files it cannot prove a dead writer's."""
    from probe_wire import SegmentWriter, sweep_dead_segments

    gone = subprocess.Popen(["true"])
    gone.wait()
    taken = [segment_path(gone.pid), segment_path(gone.pid, 12345)]
    for path in taken:
        with open(path, "wb") as f:
            f.write(b"taken")
    try:
        writer = SegmentWriter(pid=gone.pid, start_ticks=12345)
        writer.detach()  # killed: nothing unlinked
        assert re.fullmatch(rf"/dsh-probe\.{gone.pid}\.12345\.[0-9a-f]{{16}}", writer.name), writer.name
        assert "is taken by" in writer.fallback_reason
        assert gone.pid in sweep_dead_segments()
        assert not os.path.exists(SHM_DIR + writer.name)
        assert all(os.path.exists(p) for p in taken)
    finally:
        for path in taken:
            if os.path.lexists(path):
                os.unlink(path)
