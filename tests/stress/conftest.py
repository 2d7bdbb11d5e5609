"""Fixtures of the stress tests: a zygote that forks probe writers on command, the simulated
driver's environment for a real sidecar, and a check that every test leaves no segment of its own
processes behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import probe_wire as segment
from sidecar.sources.segments import SegmentSource
from tests.fakenvml import make_fake_sysfs
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
    """`python -m tests.stress.jobs zygote`: forks writers in ~1 ms (no interpreter start-up) and
    reaps them the moment they die. `spawn(mode, at=None)` returns the new pid."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.stress.jobs", "zygote"],
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


@pytest.fixture
def no_probe_here() -> None:
    """This test process runs no probe while the test runs: earlier tests in it may have started
    one (in-process framework tests), and discovery would then group the zygote's jobs under it,
    their topmost probed ancestor, instead of each on its own."""
    from probe_wire import has_live_segment

    if has_live_segment(os.getpid()):
        from probe._state import PROBE

        PROBE.shutdown()


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


class RecordingSegmentSource(SegmentSource):
    """The sidecar's own segment source; keeps what the last poll read so a test can check it."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.last: dict = {}

    def poll(self, tree):
        self.last = super().poll(tree)
        return self.last


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return make_fake_sysfs(
        tmp_path / "sys", [{"pci": "0000:10:00.0", "vendor": "0x10de", "driver": "nvidia"}]
    )


@pytest.fixture
def sidecar_env(fake_nvml, sysfs):
    return fake_nvml.env(
        {"DSH_SYSFS_ROOT": str(sysfs), "DSH_SIDECAR_RULES": json.dumps({"idle_window_s": 2.0})}
    )


def read_json(path: Path, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.05)
    raise AssertionError(f"{path} did not appear in {timeout_s} s")
