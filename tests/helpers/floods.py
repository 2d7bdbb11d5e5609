"""Floods of /dev/shm by one real user against root's discovery, each measured beside a control run
in the same process (issue 37 item 9). Run as root in a private /dev/shm, as the tests do:

    unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=600m tmpfs /dev/shm && \
        .venv/bin/python -m tests.helpers.floods names'        # or: big, threads

Prints one JSON object: for the control and the flood phase (one after the other, each with a fresh
in-process `JobsPoller`: root's discovery, no NVML), the poller's own poll durations (ms), their
mean after the first poll (the poller's start: what /dev/shm holds is listed then), the mean CPU
time of this thread per poll (what the other users of a shared machine do moves it less), and the
poll (1 = the first after its start) at which the victim's job (uid 65533, started after the
second poll) was first listed; and the flood's mean over the control's (`ratio`, `cpu_ratio`).

The floods, all by uid 65534:
- names: 100,000 names `dsh-probe.<its pid>.<ticks>.<hex>` of one process of the flooder (its own
  start ticks for a few, other ticks for the rest), and /dev/shm's mtime moved every 50 ms;
- big: 16 segments of 16 MiB (one per process of the flooder), each holding a 16 MiB payload, whose
  writer then only moves the sequence number, every 50 ms;
- threads: 1,030 threads of the flooder, each naming an empty `dsh-probe.<its thread id>`.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hostfs.procid import pid_namespace_id, process_identity, process_start_ticks
from probe_wire.header import (
    FORMAT_VERSION,
    HEADER,
    HEADER_BYTES,
    MAGIC,
    MAX_SEGMENT_BYTES,
    PIDNS,
    PIDNS_OFFSET,
    SEQ,
    SEQ_OFFSET,
)
from probe_wire.names import SHM_DIR, segment_path
from sidecar.poll.discovery import JobsPoller
from tests.helpers.other_users import FORGER, NOBODY, write_as

FLOODER, VICTIM = NOBODY, FORGER
NAMES = 100_000
OWN_TICKS_NAMES = 4  # of them under the flooder's own start ticks: its process's random names
MTIME_BUMP_S = 0.05
BIG_SEGMENTS = 16
THREADS = 1030


def _as_flooder(body: Callable[..., None]) -> Iterator[None]:
    """Runs ``body(ready)`` in a forked child as FLOODER; yields once the child called ``ready()``,
    and ends the child (it cleans up after itself) when the caller's block ends."""
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.close(ready_r)
            os.close(hold_w)
            os.setgroups([])
            os.setgid(FLOODER)
            os.setuid(FLOODER)
            done = threading.Event()
            threading.Thread(target=lambda: (os.read(hold_r, 1), done.set()), daemon=True).start()

            def ready() -> None:
                os.write(ready_w, b"1")

            body(ready, done)
            code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(hold_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise RuntimeError("the flooder failed to start")
        yield
    finally:
        os.close(hold_w)
        os.close(ready_r)
        os.waitpid(child, 0)


def _names_flood(ready, done) -> None:
    pid = os.getpid()
    ticks = process_start_ticks(pid)
    made = []
    for i in range(NAMES):
        t = ticks if i < OWN_TICKS_NAMES else ticks + 1 + i % 7
        path = segment_path(pid, t, suffix=os.urandom(8).hex())
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        made.append(path)
    ready()
    bump = os.path.join(SHM_DIR, f"bump.{pid}")
    while not done.wait(MTIME_BUMP_S):
        os.close(os.open(bump, os.O_CREAT | os.O_WRONLY, 0o600))  # a name made and removed: a new mtime
        os.unlink(bump)
    for path in made:
        os.unlink(path)


def _big_segment(pid: int) -> mmap.mmap:
    """A 16 MiB segment of ``pid``, its header naming it, holding a 16 MiB payload of bytes that are
    not msgpack (its crc right: a reader copies and checks all of it before it can tell)."""
    ticks = process_start_ticks(pid) or 0
    fd = os.open(segment_path(pid), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, MAX_SEGMENT_BYTES)
        mm = mmap.mmap(fd, MAX_SEGMENT_BYTES)
    finally:
        os.close(fd)
    length = MAX_SEGMENT_BYTES - HEADER_BYTES
    data = b"\xc1" * length  # 0xc1: a byte msgpack never uses
    mm[HEADER_BYTES:] = data
    HEADER.pack_into(
        mm, 0, MAGIC, FORMAT_VERSION, HEADER_BYTES, 2, pid, 0, ticks, length, zlib.crc32(data), time.time()
    )
    PIDNS.pack_into(mm, PIDNS_OFFSET, pid_namespace_id())
    return mm


def _big_flood(ready, done) -> None:
    """BIG_SEGMENTS processes of the flooder, each with a 16 MiB segment, whose seq then moves by 2
    every MTIME_BUMP_S (a "publish" of the same bytes: no CPU to speak of)."""
    hold_r, hold_w = os.pipe()
    kids = []
    for _ in range(BIG_SEGMENTS):
        kid = os.fork()
        if kid == 0:
            os.close(hold_w)
            os.read(hold_r, 1)
            os._exit(0)
        kids.append(kid)
    maps = [_big_segment(kid) for kid in kids]
    ready()
    while not done.wait(MTIME_BUMP_S):
        for mm in maps:
            SEQ.pack_into(mm, SEQ_OFFSET, SEQ.unpack_from(mm, SEQ_OFFSET)[0] + 2)
    os.close(hold_w)
    for kid in kids:
        os.unlink(segment_path(kid))
        os.waitpid(kid, 0)


def _threads_flood(ready, done) -> None:
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

    for _ in range(THREADS):
        threading.Thread(target=squat, daemon=True).start()
    while len(tids) < THREADS:
        time.sleep(0.01)
    ready()
    done.wait()
    release.set()
    for tid in tids:
        os.unlink(segment_path(tid))


FLOODS = {"names": _names_flood, "big": _big_flood, "threads": _threads_flood}


@contextmanager
def _victim() -> Iterator[int]:
    proc = subprocess.Popen(
        ["setpriv", f"--reuid={VICTIM}", f"--regid={VICTIM}", "--clear-groups", "sleep", "300"],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while process_identity(proc.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        if os.path.lexists(segment_path(proc.pid)):
            os.unlink(segment_path(proc.pid))


def measure(polls: int, interval_s: float, victim_after: int = 2) -> dict:
    """A fresh poller's ``polls`` polls, one every ``interval_s`` (as its own loop paces them), the
    victim's job started after poll ``victim_after``: the poller's start (its first listing of
    /dev/shm), each poll's duration (ms; the poller's own figures), their mean after the first, and
    the poll after the victim's start that first listed its job (1: the next one)."""
    t0 = time.perf_counter()
    p = JobsPoller(interval_s=interval_s, uid=None, nvml_source=object(), system_gpus_fn=list)
    start_ms = 1000 * (time.perf_counter() - t0)
    listed_at = None
    cpu_ms: list[float] = []
    try:
        with _victim() as victim:
            for i in range(polls):
                t0 = time.monotonic()
                if i == victim_after:
                    write_as(VICTIM, victim)
                c0 = time.thread_time()
                doc = p.poll_once()
                cpu_ms.append(1000 * (time.thread_time() - c0))
                if listed_at is None and i >= victim_after and any(j["root_pid"] == victim for j in doc["jobs"]):
                    listed_at = i - victim_after + 1
                threading.Event().wait(max(0.0, interval_s - (time.monotonic() - t0)))
    finally:
        p.stop()
    ms = [1000 * d for d in p.poll_durations_s]
    return {
        "start_ms": round(start_ms, 2),
        "poll_ms": [round(d, 2) for d in ms],
        "mean_ms": sum(ms[1:]) / len(ms[1:]),
        "max_ms": max(ms),
        "cpu_mean_ms": sum(cpu_ms[1:]) / len(cpu_ms[1:]),
        "victim_listed_at_poll": listed_at,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("flood", choices=sorted(FLOODS))
    parser.add_argument("--polls", type=int, default=16)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between polls' starts")
    args = parser.parse_args()
    control = measure(args.polls, args.interval)
    t0 = time.monotonic()
    with contextmanager(_as_flooder)(FLOODS[args.flood]):
        setup_s = time.monotonic() - t0
        flood = measure(args.polls, args.interval)
    out = {"flood": args.flood, "setup_s": round(setup_s, 1), "control": control, "flood_run": flood}
    out["ratio"] = flood["mean_ms"] / control["mean_ms"]
    out["cpu_ratio"] = flood["cpu_mean_ms"] / control["cpu_mean_ms"]
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
