"""Probe-segment writers forked by a zygote (`python -m tests.helpers.stress_jobs zygote`: a new
writer in about 1 ms, reaped the moment it dies), and waiting for a killed process to be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import probe_wire as segment
from tests.helpers.harness import REPO, python_env


def gone(pid: int) -> bool:
    """True once `pid` no longer exists (killed and reaped)."""
    return not os.path.exists(f"/proc/{pid}")


def wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} still exists {timeout_s} s after SIGKILL: {_where(pid)}")
        time.sleep(0.0005)


def _where(pid: int) -> str:
    """What a process that will not go is doing: its state (Z: nobody reaped it; D: stuck in the
    kernel) and where in the kernel it waits."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip()
        return (
            f"state {fields.get('State', '?').strip()}, ppid {fields.get('PPid', '?').strip()}, "
            f"threads {fields.get('Threads', '?').strip()}, wchan {wchan or '-'}"
        )
    except (OSError, ValueError) as e:
        return f"gone while looking ({e})"


class Zygote:
    """`python -m tests.helpers.stress_jobs zygote`: forks writers in ~1 ms (no interpreter start-up) and
    reaps them the moment they die. `spawn(mode, at=None)` returns the new pid."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.stress_jobs", "zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=python_env(),
            cwd=REPO,
        )
        self.spawned: list[int] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def spawn(self, mode: str, at: int | None = None) -> int:
        self.proc.stdin.write(f"spawn {mode}{'' if at is None else f' {at}'}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"zygote exited with {self.proc.wait()}")
        pid = int(line)
        self.spawned.append(pid)
        return pid

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for pid in self.spawned:  # a writer killed mid-test leaves its segment: remove ours only
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if gone(pid):
                segment.remove_segment(pid)
