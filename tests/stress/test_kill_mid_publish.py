"""The training process SIGKILLed mid-publish: never a torn payload, the target marked exited, the
last state and the history kept, the dead segment removed.

The loop test forks writers that publish back to back (so a kill at a random moment mostly lands
between `seq+1` and `seq+1` of a publish) and runs the sidecar's own poller over their tree, checking
every read; the last test does the same once with the real `dsh-sidecar` over HTTP."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from hostfs.procid import process_start_ticks
from probe_wire import read_segment, segment_path
from probe_wire.header import header_identity
from sidecar.poll.poller import Poller
from tests.fakenvml import gpu
from tests.helpers.harness import REPO, Sidecar, codes, python_env, wait_for
from tests.helpers.recording_source import RecordingSegmentSource
from tests.helpers.stress_jobs import is_exact_variant
from tests.helpers.zygote import wait_gone

KILLS = 100
CONCURRENT = 6
# What a live writer's segment may read as. "corrupt" is not among them: a healthy writer must
# never be reported as corrupt, whatever moment the reader catches it at.
LIVE_STATES = {"ok", "busy", "initialising", "missing"}


def test_100_writers_sigkilled_mid_publish_never_yield_a_torn_payload(zygote):
    rng = random.Random(20241202)
    src = RecordingSegmentSource()
    poller = Poller(zygote.pid, interval_s=0.05, segment_source=src, system_gpus_fn=list)
    live: dict[int, tuple[int, float]] = {}  # pid -> (start_ticks, kill at)
    hot: set[int] = set()
    dead_states: Counter[str] = Counter()
    hot_dead_states: Counter[str] = Counter()
    live_states: Counter[str] = Counter()
    removed_after_one_poll: list[int] = []
    killed: list[int] = []
    accepted = 0
    started = time.monotonic()
    try:
        while len(killed) < KILLS:
            while len(live) < CONCURRENT:
                # A third publish back to back (killed mid-publish nearly always); the others pause
                # 2 ms between publishes, as a probe would between its (much rarer) publishes.
                mode = "hot" if len(hot) < CONCURRENT // 3 else "paced"
                pid = zygote.spawn(mode)
                if mode == "hot":
                    hot.add(pid)
                live[pid] = (process_start_ticks(pid), time.monotonic() + rng.uniform(0.002, 0.05))
            doc = poller.poll_once()
            # The segments of writers killed before this poll are gone after it.
            for pid in removed_after_one_poll:
                if process_start_ticks(pid) is not None:
                    continue  # the pid went to a new process meanwhile (pid_max wraps): not "dead" now
                assert not os.path.exists(segment_path(pid)), (
                    f"dead writer {pid}'s segment left behind: {read_segment(pid)}, {header_identity(segment_path(pid))}, header bytes {Path(segment_path(pid)).read_bytes()[:64].hex()}"
                )
            removed_after_one_poll.clear()
            for pid, r in src.last.items():
                if pid == zygote.pid:
                    assert r.state == "missing"
                    continue
                ticks = live[pid][0]
                live_states[r.state] += 1
                assert r.state in LIVE_STATES, (pid, r.state, r.error)
                if r.payload is not None:  # ok, or the last good payload kept through a busy read
                    assert is_exact_variant(r.payload, pid, ticks), f"torn payload accepted from {pid}"
                    accepted += r.state == "ok"
            # Killed writers may stay listed, marked exited, while no live one has published yet
            # (the job's final state keeps what its probed processes did: issue 25 item 1).
            shown = {p["pid"]: p for p in doc["processes"] if not p["exited"]}
            assert set(shown) == {zygote.pid, *live}
            assert {p["pid"] for p in doc["processes"] if p["exited"]} <= set(killed)
            assert not any(p["probe_state"] == "corrupt" for p in doc["processes"]), doc["processes"]
            now = time.monotonic()
            for pid, (ticks, kill_at) in list(live.items()):
                if now < kill_at:
                    continue
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid)  # the zygote reaps it at once
                r = read_segment(pid, expected_start_ticks=ticks)
                dead_states[r.state] += 1
                if pid in hot:
                    hot_dead_states[r.state] += 1
                    hot.discard(pid)
                if r.state == "ok":
                    assert is_exact_variant(r.payload, pid, ticks), f"torn payload accepted from dead {pid}"
                else:
                    # busy: killed between the two seq increments; initialising/missing: before its
                    # first publish (an empty file, killed between shm_open and ftruncate, included).
                    assert r.state in {"busy", "initialising", "missing"}, r
                del live[pid]
                killed.append(pid)
                removed_after_one_poll.append(pid)
        elapsed = time.monotonic() - started
    finally:
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue  # already gone: must not hide the failure that brought us here
            wait_gone(pid)
    poller.poll_once()
    left = [p for p in killed + list(live) if os.path.exists(segment_path(p))]
    assert left == [], f"segments left behind: {left}"
    print(
        f"\n{len(killed)} SIGKILLs in {elapsed:.1f} s, {poller.poll_count} polls; "
        f"dead segment states {dict(dead_states)} (back-to-back writers: {dict(hot_dead_states)}); live reads {dict(live_states)}; {accepted} payloads accepted"
    )
    # The kills really landed mid-publish often, and the reader really accepted payloads meanwhile.
    assert dead_states["busy"] >= 10, dead_states
    assert accepted >= 50, live_states
    assert elapsed < 60


def test_segment_of_size_0_is_initialising(sleepers):
    """Found by the loop above: a writer caught between shm_open and ftruncate left an empty file
    that read as "corrupt", so the sidecar flagged probe-unreadable for a process only starting."""
    (pid,) = sleepers(1)
    path = segment_path(pid)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)  # what shm_open(O_CREAT|O_EXCL) leaves
    os.close(fd)
    try:
        r = read_segment(pid)
        assert r.state == "initialising", r
    finally:
        os.unlink(path)


def stat_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def header_seq(pid: int) -> int:
    with open(segment_path(pid), "rb") as f:
        return int.from_bytes(f.read(24)[16:24], "little")


def kill_mid_publish(pid: int, tries: int = 500) -> int:
    """SIGSTOP the writer at arbitrary moments until it is caught with an odd seq (inside a
    publish), then SIGKILL it there. Returns the number of tries it took."""
    for attempt in range(1, tries + 1):
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: stat_state(pid) == "T", 5, 0.0002, "writer stopped")
        if header_seq(pid) % 2 == 1:
            os.kill(pid, signal.SIGKILL)
            return attempt
        os.kill(pid, signal.SIGCONT)
        time.sleep(random.uniform(0, 0.003))
    raise AssertionError(f"writer {pid} never caught mid-publish in {tries} tries")


@pytest.mark.slow
def test_sidecar_keeps_last_state_and_history_after_sigkill_mid_publish(tmp_path, fake_nvml, sidecar_env, sysfs_args):
    job = subprocess.Popen([sys.executable, "-m", "tests.helpers.stress_jobs", "slow"], env=python_env(), cwd=REPO)
    try:
        wait_for(lambda: read_segment(job.pid).state in ("ok", "busy"), what="writer's segment")
        ticks = process_start_ticks(job.pid)
        fake_nvml.write(
            {
                "gpus": [
                    gpu(0, util_gpu=90, memory_used_mib=5000, processes=[{"pid": job.pid, "used_mib": 4800}])
                ]
            }
        )
        with Sidecar(
            ["--pid", str(job.pid), "--port", "0", "--interval", "0.2", "--stay", *sysfs_args], env=sidecar_env
        ) as sc:
            docs = []

            def gpu_with_history():
                docs.append(sc.status())
                return docs[-1]["status"] == "GPU" and len(sc.history()["samples"]) >= 8

            wait_for(gpu_with_history, 30, 0.1, "GPU verdict and 8 samples")
            for doc in docs:  # a healthy writer, however busy, is never reported unreadable
                assert doc["processes"][0]["probe_state"] in ("ok", "busy"), doc["processes"][0]
                assert "probe-unreadable" not in codes(doc)
            before = sc.history()["samples"]
            models_before = docs[-1]["processes"][0]["models"]
            assert models_before and all(m["device"] == "cuda:0" for m in models_before)
            tries = kill_mid_publish(job.pid)
            job.wait()
            wait_for(lambda: not os.path.exists(segment_path(job.pid)), 10, what="dead segment removed")
            doc = sc.wait_status(lambda d: not d["target"]["alive"], what="target exited")
            assert "target-exited" in codes(doc) and doc["status"] == "GPU"
            assert "probe-unreadable" not in codes(doc)
            (p,) = doc["processes"]
            assert p["pid"] == job.pid and p["models"] and p["models"][0]["device"] == "cuda:0"
            assert {m["name"] for m in p["models"]} <= {f"net{j}" for j in range(14)}
            assert p["gpu"] == []  # the driver no longer sees a dead process
            after = sc.history()["samples"]
            assert [s["time_unix_s"] for s in after[: len(before)]] == [s["time_unix_s"] for s in before]
            assert len(after) >= len(before)
            # It keeps serving (--stay) and keeps polling.
            time.sleep(0.6)
            assert sc.history()["samples"][-1]["time_unix_s"] > after[-1]["time_unix_s"]
            assert sc.get("/healthz")[0] == 200 and sc.proc.poll() is None
            assert "Traceback" not in "\n".join(sc.err_lines)
            assert read_segment(job.pid, expected_start_ticks=ticks).state == "missing"
            print(f"\nwriter caught mid-publish after {tries} SIGSTOPs")
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
