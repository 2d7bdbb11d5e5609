"""The seqlock under fire: a writer process publishing flat out while this process reads, and writers
killed with SIGKILL mid-publish. A torn or inconsistent payload must never be accepted as "ok".

The writers publish payloads whose every part repeats the publish counter (see
tests/helpers/probe_scenarios.consistent_payload) and change length with it, so any mix of two publishes shows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from probe_wire import read_segment, remove_segment
from tests.helpers.probe_scenarios import payload_problem

REPO = Path(__file__).resolve().parents[2]


def start(*args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.probe_scenarios", *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdin=subprocess.PIPE,  # a stress writer publishes until a line comes here
        stdout=subprocess.PIPE,
        text=True,
    )
    ready = json.loads(proc.stdout.readline())
    assert ready["ready"] is True and ready["pid"] == proc.pid
    return proc, ready


def test_concurrent_reader_never_accepts_a_torn_payload():
    writer, ready = start("stress_writer", "60")
    pid, ticks = ready["pid"], ready["start_ticks"]
    states: dict[str, int] = {}
    counters = []
    try:
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            r = read_segment(pid, expected_start_ticks=ticks)
            states[r.state] = states.get(r.state, 0) + 1
            if r.state == "ok":
                problem = payload_problem(r.payload, r.published_at)
                assert problem is None, problem
                counters.append(r.payload["models"][0]["forward_calls"])
            else:
                assert r.state == "busy", (r.state, r.error)
        writer.stdin.write("\n")
        writer.stdin.flush()
        published = json.loads(writer.stdout.readline())["published"]
    finally:
        writer.kill()
        writer.wait()
        remove_segment(pid)
    assert states.get("ok", 0) >= 1000, states
    assert counters == sorted(counters), "a read went back in time"
    assert len(set(counters)) > 100, "the writer barely moved: the test proved little"
    assert published > len(set(counters)) / 2


def test_sigkill_at_random_moments_leaves_an_intact_payload_or_busy():
    rng = random.Random(1234)
    outcomes: dict[str, int] = {}
    for _ in range(12):
        writer, ready = start("stress_writer", "30")
        pid, ticks = ready["pid"], ready["start_ticks"]
        try:
            time.sleep(rng.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGKILL)
            writer.wait()
            r = read_segment(pid, expected_start_ticks=ticks)
            outcomes[r.state] = outcomes.get(r.state, 0) + 1
            assert r.state in ("ok", "busy"), (r.state, r.error)
            if r.state == "ok":
                problem = payload_problem(r.payload, r.published_at)
                assert problem is None, problem
            # Without the dead writer's identity the segment is simply stale or busy, never ok.
            assert read_segment(pid).state in ("stale", "busy")
        finally:
            writer.stdout.close()
            remove_segment(pid)
    assert sum(outcomes.values()) == 12


def test_writer_killed_inside_a_publish_reads_busy_never_half_a_payload():
    writer, ready = start("half_written")
    pid, ticks = ready["pid"], ready["start_ticks"]
    try:
        os.kill(pid, signal.SIGKILL)
        writer.wait()
        r = read_segment(pid, expected_start_ticks=ticks, attempts=4)
        assert r.state == "busy" and "odd" in r.error
        assert r.payload is None
        assert r.writer_pid is None  # nothing from a header caught mid-write is passed on
    finally:
        writer.stdout.close()
        assert remove_segment(pid) is True
