"""The sidecar killed and restarted under a running job, and pids reused by new processes.

PID reuse is made real, not simulated: as root, writing N-1 to /proc/sys/kernel/ns_last_pid makes
the next process of this PID namespace get pid N (if free), so a test can start a new process with
the exact pid of one it just killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostfs.procid import process_start_ticks
from probe_wire import read_segment, remove_segment, segment_path
from sidecar.poll.poller import Poller
from tests.fakenvml import gpu
from tests.helpers.harness import REPO, Sidecar, codes, python_env, wait_for
from tests.helpers.recording_source import RecordingSegmentSource
from tests.helpers.stress_jobs import is_exact_variant, set_next_pid
from tests.helpers.zygote import wait_gone

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def can_choose_pids() -> bool:
    return os.geteuid() == 0 and os.access(NS_LAST_PID, os.W_OK)


needs_pid_control = pytest.mark.skipif(
    not can_choose_pids(), reason="needs root and a writable /proc/sys/kernel/ns_last_pid to reuse a pid"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_sidecar_sigkilled_and_restarted_reattaches_and_the_job_never_notices(
    tmp_path, fake_nvml, sidecar_env, sysfs_args
):
    out, stop = tmp_path / "train.json", tmp_path / "stop"
    fake_nvml.write({"gpus": [gpu(0)]})
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.stress_jobs", "train", "--out", str(out), "--stop-file", str(stop)],
        env=python_env({"DSH_PROBE_INTERVAL_S": "0.1"}),
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout.readline().strip() == "training"
        port = free_port()
        args = ["--pid", str(job.pid), "--port", str(port), "--interval", "0.2", *sysfs_args]

        def calls(doc: dict) -> int:
            models = doc["processes"][0]["models"] if doc["processes"] else []
            return models[0]["forward_calls"] if models else 0

        last = 0
        for round_, how in enumerate(("SIGKILL", "SIGKILL", "SIGTERM")):
            with Sidecar(args, env=sidecar_env) as sc:
                assert sc.url == f"http://127.0.0.1:{port}"  # the same port, straight after a SIGKILL
                doc = sc.wait_status(
                    lambda d, last=last: calls(d) > last, what=f"round {round_}: re-attached"
                )
                (p,) = doc["processes"]
                assert doc["target"]["pid"] == job.pid and doc["target"]["alive"] is True
                assert p["has_probe"] is True and p["probe_state"] == "ok" and p["models"][0]["name"] == "mlp"
                assert "probe-unreadable" not in codes(doc) and "target-exited" not in codes(doc)
                last = calls(doc)
                code = sc.stop(sig_term=how == "SIGTERM")
                assert code == (0 if how == "SIGTERM" else -signal.SIGKILL)
            assert job.poll() is None, "the job died with its sidecar"
            assert read_segment(job.pid).state in ("ok", "busy"), "a sidecar removed a live job's segment"
        stop.touch()
        assert job.wait(60) == 0
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    result = read_json(out)
    assert result["probe_warnings"] == [] and result["snapshot_errors"] == [], result
    assert result["status"]["enabled"] is True and result["status"]["publishes"] >= 10
    assert result["segment_inode_start"] == result["segment_inode_end"] is not None, "segment replaced"
    assert result["own_read"] == "ok" and result["loss_last"] < result["loss_first"]
    print(f"\njob: {result['steps']} steps, longest step gap {result['max_step_gap_s'] * 1000:.0f} ms")


def spawn_at(pid: int, argv: list[str], tries: int = 30, **kw) -> subprocess.Popen:
    """Start `argv` with exactly `pid` (it must be free); skip when another process keeps taking it."""
    for _ in range(tries):
        if os.path.exists(f"/proc/{pid}"):
            break
        set_next_pid(pid)
        p = subprocess.Popen(argv, **kw)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    pytest.skip(f"pid {pid} was taken by another process before this test could reuse it")


def zygote_spawn_at(zygote, mode: str, pid: int, tries: int = 30) -> int:
    for _ in range(tries):
        if os.path.exists(f"/proc/{pid}"):
            break
        got = zygote.spawn(mode, at=pid)
        if got == pid:
            return got
        os.kill(got, signal.SIGKILL)
        wait_gone(got)
    pytest.skip(f"pid {pid} was taken by another process before this test could reuse it")


@needs_pid_control
def test_a_reused_pid_in_the_tree_is_a_new_process(zygote):
    src = RecordingSegmentSource()
    poller = Poller(zygote.pid, interval_s=0.1, segment_source=src, system_gpus_fn=list)
    old = zygote.spawn("once")
    old_ticks = process_start_ticks(old)
    wait_for(lambda: read_segment(old).state == "ok", what="first writer's publish")
    doc = poller.poll_once()
    (shown,) = [p for p in doc["processes"] if p["pid"] == old]
    assert shown["has_probe"] is True and [m["name"] for m in shown["models"]] == ["net0"]
    time.sleep(0.03)  # start times are in clock ticks (10 ms): make the newcomer's differ
    os.kill(old, signal.SIGKILL)
    wait_gone(old)
    assert os.path.exists(segment_path(old))  # SIGKILL skips the probe's cleanup
    new = zygote_spawn_at(zygote, "idle", old)
    new_ticks = process_start_ticks(new)
    assert new == old and new_ticks != old_ticks
    doc = poller.poll_once()
    (shown,) = [p for p in doc["processes"] if p["pid"] == new]
    assert src.last[new].state == "stale" and src.last[new].payload is None
    # The newcomer is not the dead writer: no probe, none of its models, nothing "unreadable".
    assert shown["has_probe"] is False and shown["models"] == [] and shown["probe_state"] == "stale"
    assert "probe-unreadable" not in codes(doc)
    # ...and the dead writer's segment, stale now, was removed by that same poll.
    assert not os.path.exists(segment_path(new))


@needs_pid_control
def test_a_new_writer_replaces_the_leftover_of_its_pid_and_cleaners_spare_it(zygote):
    old = zygote.spawn("once")
    old_ticks = process_start_ticks(old)
    wait_for(lambda: read_segment(old).state == "ok", what="first writer's publish")
    time.sleep(0.03)
    os.kill(old, signal.SIGKILL)
    wait_gone(old)
    assert read_segment(old).state == "stale"  # no live process: what is there is stale
    new = zygote_spawn_at(zygote, "once", old)
    new_ticks = process_start_ticks(new)
    r = wait_for(lambda: (r := read_segment(new)).state == "ok" and r, what="second writer's publish")
    assert r.writer_start_ticks == new_ticks != old_ticks
    assert is_exact_variant(r.payload, new, new_ticks)
    # A cleaner that still thinks of the old process must not delete the newcomer's segment.
    assert remove_segment(new, expected_start_ticks=old_ticks) is False
    assert read_segment(new).state == "ok"


@needs_pid_control
@pytest.mark.slow
def test_sidecar_does_not_adopt_a_process_that_reuses_the_target_pid(tmp_path: Path, fake_nvml, sidecar_env, sysfs_args):
    fake_nvml.write({"gpus": [gpu(0)]})
    target = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.stress_jobs", "once"],
        env=python_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    newcomer = None
    try:
        assert target.stdout.readline() == b"published\n"
        with Sidecar(
            ["--pid", str(target.pid), "--port", "0", "--interval", "0.2", "--stay", *sysfs_args], env=sidecar_env
        ) as sc:
            sc.wait_status(lambda d: d["processes"] and d["processes"][0]["models"], what="target's model")
            pid = target.pid
            target.kill()
            target.wait()
            newcomer = spawn_at(
                pid,
                [sys.executable, "-m", "tests.helpers.stress_jobs", "wait", "--name", "imposter"],
                env=python_env(),
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            doc = sc.wait_status(lambda d: not d["target"]["alive"], what="target exited")
            assert "target-exited" in codes(doc)
            wait_for(lambda: not os.path.exists(segment_path(pid)), 10, what="old segment removed")
            newcomer.stdin.write(b"go\n")
            newcomer.stdin.flush()
            assert newcomer.stdout.readline() == b"published\n"
            t0 = time.time()
            wait_for(lambda: sc.status()["time_unix_s"] > t0 + 0.6, what="three more polls")
            doc = sc.status()
            assert doc["target"]["alive"] is False and doc["target"]["pid"] == pid
            assert [m["name"] for m in doc["processes"][0]["models"]] == ["net0"]  # the dead target's
            assert "imposter0" not in str(doc)
            r = read_segment(pid)
            assert r.state == "ok" and r.payload["models"][0]["name"] == "imposter0", (
                "newcomer's segment removed"
            )
    finally:
        for p in (target, newcomer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def read_json(path: Path, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.05)
    raise AssertionError(f"{path} did not appear in {timeout_s} s")
