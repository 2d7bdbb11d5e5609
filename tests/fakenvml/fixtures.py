"""Pytest fixtures for the simulated NVIDIA driver (imported by tests/conftest.py).

- `fake_nvml_lib_dir` (session): the compiled libnvidia-ml.so.1, built once per session.
- `fake_nvml` (function): a `FakeNvml` with its own scenario file; `.write()`, `.env()`, `.run()`,
  `.worker()`. No scenario is written up front: until a test writes one the library answers
  nvmlInit with DRIVER_NOT_LOADED, which keeps forgotten setup from passing silently.
- `sleepers` (function): `sleepers(n)` starts n real sleeping processes and returns their pids.
  NVML reports host pids and gpustat/nvitop look each one up with psutil, so simulated GPU
  processes must be alive; all are killed at teardown.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakenvml import FakeNvml, build_library

__all__ = ["fake_nvml_lib_dir", "fake_nvml", "sleepers", "Sleepers"]


@pytest.fixture(scope="session")
def fake_nvml_lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_library(tmp_path_factory.mktemp("fakenvml-lib")).parent


@pytest.fixture
def fake_nvml(fake_nvml_lib_dir: Path, tmp_path: Path) -> Iterator[FakeNvml]:
    scenario_dir = tmp_path / "fakenvml"
    scenario_dir.mkdir()
    nvml = FakeNvml(lib_dir=fake_nvml_lib_dir, scenario_path=scenario_dir / "scenario.txt")
    yield nvml
    nvml.close()


class Sleepers:
    """Real child processes that only sleep; stand-ins for CUDA processes in a scenario."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def __call__(self, n: int = 1) -> list[int]:
        # /bin/sleep rather than python: 64 of them start in milliseconds on a 2-core machine.
        started = [
            subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            for _ in range(n)
        ]
        self._procs.extend(started)
        return [p.pid for p in started]

    def kill(self, pid: int) -> None:
        """End one of them early (a process that exits while it still appears in a scenario)."""
        for p in self._procs:
            if p.pid == pid:
                p.kill()
                p.wait()

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
        for p in self._procs:
            p.wait()
        self._procs.clear()


@pytest.fixture
def sleepers() -> Iterator[Sleepers]:
    s = Sleepers()
    yield s
    s.close()
