"""Browser-test fixtures: a real dashboard stack (tests/helpers/dashboard_stack.py) and DSH. The
browser itself (`pages`, `chromium`) is a fixture of every test layer: tests/helpers/browser_fixtures.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakenvml import gpu
from tests.helpers.dashboard_stack import Stack, StackFactory, gpu_job_specs, gpu_scenario
from tests.helpers.dsh_env import DSH_VERSION, DshUnavailable, ensure_dsh


@pytest.fixture
def stacks(fake_nvml_lib_dir: Path, tmp_path: Path) -> Iterator[StackFactory]:
    f = StackFactory(fake_nvml_lib_dir, tmp_path / "stacks")
    yield f
    f.close()


@pytest.fixture(scope="module")
def gpu_stack(fake_nvml_lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One GPU job shared by the read-only tests of a module (starting a stack costs seconds)."""
    base = tmp_path_factory.mktemp("gpu-stack")
    f = StackFactory(fake_nvml_lib_dir, base)
    uuids = [gpu(0)["uuid"], gpu(1)["uuid"]]
    try:
        yield f.start("gpu", gpu_job_specs(uuids), gpu_scenario, expect_status="GPU")
    finally:
        f.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def dsh_launcher() -> Path:
    try:
        return ensure_dsh()
    except DshUnavailable as exc:
        pytest.skip(
            f"DSH {DSH_VERSION} cannot be installed on this machine, so the plugin cannot be tested: {exc}"
        )
