"""Where a command's CPU goes, by kind of process: run COMMAND (the test suite) while every process on
the machine is sampled from /proc, then print each kind's CPU seconds and process count.

    python3 benchmarks/suite_cpu.py -- bash scripts/test.sh
    python3 benchmarks/suite_cpu.py --json cpu.json -- .ci/run   # a fresh clone: install included

Stdlib only, so it runs before scripts/test.sh has made `.venv`.

Every process that starts while COMMAND runs is counted, in every PID namespace (the isolated test
workers' included), whoever reaps it: its user + system time at the last sample. A process that
lives less than one sample period (default 0.2 s) is missed, and one that outlives COMMAND counts
only up to COMMAND's end. The samples cost the machine about 1 % of a core.

A kind is the program a process runs, read from its command line: a torch training program, a
pytest worker, a sidecar, Chromium, DSH's node. `import torch` alone costs a process about
1.6 CPU-s on a 2-vCPU VM, so the count of torch processes bounds how fast the suite can be.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass

TICKS_PER_S = os.sysconf("SC_CLK_TCK")

# (kind, pattern on the command line), the first that matches wins.
KINDS: list[tuple[str, re.Pattern[str]]] = [
    (kind, re.compile(pattern))
    for kind, pattern in [
        ("chromium", r"chrom|headless_shell|^/proc/self/exe --type="),
        ("playwright driver", r"playwright/driver"),
        ("dsh (node)", r"^\S*node\b|/dsh\b"),
        ("pytest worker", r"exec\(eval\(sys\.stdin\.readline"),
        ("pytest", r"-m pytest\b"),
        ("torch: multiprocessing child (spawn, forkserver)", r"multiprocessing\.(spawn|forkserver)"),
        ("torchrun agent", r"torch\.distributed\.run"),
        ("torch: tests/programs", r"tests/programs/"),
        ("sidecar", r"sidecar\.cli|dsh-sidecar"),
        ("prometheus", r"prometheus"),
        ("test helper job", r"-m tests\.helpers\.|/pytest-of-[^/]+/.*\.py"),
        ("python -c", r"python\S* (-\S+ )*-c "),
        ("kernel thread", r"^\["),
    ]
]


@dataclass
class Seen:
    command: str
    ticks: int


def kind_of(command: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(command):
            return kind
    return "other: " + os.path.basename(command.split(" ", 1)[0])[:40]


def _stat(pid: str) -> tuple[int, int] | None:
    """(user + system ticks, start time in ticks) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # after the name, which may hold spaces and ')'
    return int(fields[11]) + int(fields[12]), int(fields[19])


def _command(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        if command:
            return command[:400]
        with open(f"/proc/{pid}/comm", "rb") as f:
            return "[" + f.read().decode("utf-8", "replace").strip() + "]"
    except OSError:
        return "[gone]"


def sample(before: set[tuple[str, int]], seen: dict[tuple[str, int], Seen]) -> None:
    """One pass over /proc: every process not running before COMMAND, by (pid, start time)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        stat = _stat(pid)
        if stat is None:
            continue
        ticks, started = stat
        key = (pid, started)
        if key in before:
            continue
        if key in seen:
            seen[key].ticks = ticks
        else:
            seen[key] = Seen(_command(pid), ticks)


def existing() -> set[tuple[str, int]]:
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (stat := _stat(pid)) is not None:
            out.add((pid, stat[1]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--period-s", type=float, default=0.2, help="seconds between samples")
    parser.add_argument("--json", help="write every process's command and CPU seconds here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")

    before = existing()
    seen: dict[tuple[str, int], Seen] = {}
    started = time.monotonic()
    try:
        proc = subprocess.Popen(command)
    except OSError as e:
        parser.error(f"cannot run {command[0]!r}: {e.strerror}")
    while proc.poll() is None:
        sample(before, seen)
        time.sleep(args.period_s)
    sample(before, seen)
    wall_s = time.monotonic() - started

    cpu_s: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for s in seen.values():
        kind = kind_of(s.command)
        cpu_s[kind] += s.ticks / TICKS_PER_S
        count[kind] += 1
    total = sum(cpu_s.values())
    print(
        f"\n`{' '.join(command)}`: exit {proc.returncode}, {wall_s:.0f} s, {total:.0f} CPU-s in {len(seen)} processes"
    )
    print(f"({os.cpu_count()} CPUs: {total / max(wall_s, 1e-9):.2f} of them busy on average)\n")
    print("| kind of process | CPU-s | share | processes |\n|---|---:|---:|---:|")
    for kind, s in cpu_s.most_common():
        share = 100 * s / total if total else 0.0  # a command that took no measurable CPU
        print(f"| {kind} | {s:.1f} | {share:.0f} % | {count[kind]} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"command": s.command, "cpu_s": s.ticks / TICKS_PER_S} for s in seen.values()], f)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
