"""Runs for the ledger's tests and benchmarks (sidecar/sources/ledger): typed records as the
recorder makes them, a simulated day of short jobs written through the API, and the child process
the real-process tests start (`python -m tests.helpers.ledger_runs write PATH PREFIX COUNT`)."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from sidecar.common.runs import MinuteFigures, RunIdentity, RunRecord, RunSetup, RunTotals, VerdictChange
from sidecar.sources.ledger import Ledger, LedgerBatch

BOOT = "6f1c2b8e-3d4a-4f5b-9c7d-0e1f2a3b4c5d"
DAY_START_UNIX_S = 1_796_000_400.0  # 2026-11-30 01:00 UTC, a multiple of 60
JOBS_PER_HOUR = 1_000


def run_key(i: int, prefix: str = "") -> str:
    return f"{BOOT}/{prefix}{100_000 + i}-{9_000_000 + i}"


def identity(i: int, started_unix_s: float, *, prefix: str = "", command: tuple[str, ...] | None = None,
             cwd: str = "/home/ada/proj", uid: int | None = 1000) -> RunIdentity:
    return RunIdentity(
        key=run_key(i, prefix), job_id=f"{prefix}{100_000 + i}-{9_000_000 + i}", host="gpu-node-07",
        started_unix_s=started_unix_s, uid=uid, user="ada",
        command=command if command is not None else ("python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py", f"--seed={i % 7}"),
        cwd=cwd, world_size=2,
    )


SETUP = RunSetup(
    torch_version="2.9.1+cu128", torch_cuda="12.8", driver_version="575.57.08",
    gpu_models=("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"), precision="autocast bfloat16",
    loader=(("num_workers", "8"), ("pin_memory", "True")), processes=18,
)


def minute(start_unix_s: float, *, polls: int = 40, rate_hz: float = 4.0, seconds: float = 60.0) -> MinuteFigures:
    """A full minute of a busy job on two GPUs."""
    return MinuteFigures(
        start_unix_s=start_unix_s, polls=polls, steps=int(rate_hz * seconds), step_rate_hz=rate_hz,
        step_rate_sq_hz2=rate_hz**2, data_wait_fraction=0.08, forward_fraction=0.31, backward_fraction=0.47,
        optimizer_fraction=0.1, other_fraction=0.04, syncs_per_step=1.0, gpu_util_pct=93.5,
        gpu_mem_used_mib=61_234.0, gpu_mem_peak_mib=63_100.0, sm_activity_fraction=0.71,
        tensor_activity_fraction=0.42, sm_clock_mhz=1_755.0, sm_clock_max_mhz=1_980.0,
        clock_reasons=("SwPowerCap",), power_w=612.0, power_peak_w=698.0, temperature_c=64.0,
        temperature_peak_c=71.0, gpu_processes=2, cpu_pct=310.0, rss_mib=9_800.0,
        gpu_held_s=2 * seconds, gpu_busy_s=1.9 * seconds, energy_j=612.0 * seconds,
    )


def record(ident: RunIdentity, seen_unix_s: float, *, ended: bool = False, status: str = "ok",
           warnings: tuple[str, ...] = ()) -> RunRecord:
    wall_s = seen_unix_s - ident.started_unix_s
    return RunRecord(
        identity=ident, setup=SETUP,
        totals=RunTotals(wall_s=wall_s, steps=int(4 * wall_s), gpu_held_s=2 * wall_s, gpu_busy_s=1.9 * wall_s,
                         energy_j=612.0 * wall_s, gpu_mem_peak_mib=63_100.0, power_peak_w=698.0,
                         temperature_peak_c=71.0),
        last_seen_unix_s=seen_unix_s, ended_unix_s=seen_unix_s if ended else None,
        exit_code=0 if ended else None, status=status, warnings=warnings,
    )


def simulate(ledger: Ledger, hours: float, *, start_unix_s: float = DAY_START_UNIX_S,
             jobs_per_hour: int = JOBS_PER_HOUR, seed: int = 40) -> int:
    """Short jobs (2 to 5 minutes each, a verdict change at the start and one a minute in, every third
    with a warning later) starting evenly, written as a discovery sidecar would: one batch a minute
    holding every live job's run and current minute, maintain() every hour. Returns the jobs run."""
    rng = random.Random(seed)
    jobs = int(hours * jobs_per_hour)
    gap_s = 3_600.0 / jobs_per_hour
    spans = [(start_unix_s + i * gap_s, rng.uniform(120.0, 300.0)) for i in range(jobs)]
    end = start_unix_s + hours * 3_600.0 + 300.0
    first = 0
    t = start_unix_s + 60.0
    while t <= end + 60.0:
        runs, minutes, changes = [], [], []
        while first < jobs and spans[first][0] + spans[first][1] < t - 60.0:
            first += 1
        for i in range(first, jobs):
            started, lasts = spans[i]
            if started >= t:
                break
            seen = min(t, started + lasts)
            ended = seen < t
            warn = ("DATA_WAIT",) if i % 3 == 0 and seen - started > 90.0 else ()
            ident = identity(i, started)
            runs.append(record(ident, seen, ended=ended, warnings=warn))
            minute_start = (seen // 60.0) * 60.0
            minutes.append((ident.key, minute(minute_start, polls=int(seen - minute_start) // 2 + 1)))
            if started >= t - 60.0:
                changes.append((ident.key, VerdictChange(started, "starting")))
            if started + 60.0 >= t - 60.0 and started + 60.0 < t:
                changes.append((ident.key, VerdictChange(started + 60.0, "ok")))
            if warn and started + 90.0 >= t - 60.0:
                changes.append((ident.key, VerdictChange(started + 90.0, "warning", warn)))
        ledger.write(LedgerBatch(tuple(runs), tuple(minutes), tuple(changes)))
        if int(t - start_unix_s) % 3_600 == 0:
            ledger.maintain(t)
        t += 60.0
    ledger.maintain(t)
    return jobs


def file_bytes(path: Path) -> int:
    """The ledger's bytes on disk: the database and its side files."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += os.stat(f"{path}{suffix}").st_size
        except FileNotFoundError:
            pass
    return total


def _write_loop(path: str, prefix: str, count: int) -> None:
    """Writes `count` batches (each a run of its own, a shared run, and a minute of each) once a line
    comes on stdin, printing each batch's number once it is committed: the parent knows what must
    have survived a kill."""
    ledger = Ledger(path)
    shared = identity(0, DAY_START_UNIX_S, prefix="shared-")
    print("ready", flush=True)
    sys.stdin.readline()  # the parent's go: two writers start together
    first = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
    for n in range(count):
        now = DAY_START_UNIX_S + 60.0 * (n + 1)
        own = identity(n, DAY_START_UNIX_S + n, prefix=prefix)
        batch = LedgerBatch(
            runs=(record(own, now), record(shared, now)),
            minutes=((own.key, minute(now)), (shared.key, minute(now))),
            changes=((own.key, VerdictChange(now, "ok")),),
        )
        if not ledger.write(batch):
            print(f"fault {ledger.fault}", flush=True)
            sys.exit(1)
        print(n, flush=True)
    print(f"done {first} {time.monotonic()}", flush=True)
    ledger.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["write"]:
        _write_loop(sys.argv[2], sys.argv[3], int(sys.argv[4]))
