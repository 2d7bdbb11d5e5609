"""Browser-test fixtures: Debian's Chromium through Playwright (tests/helpers/browser.py), and a
real dashboard stack (tests/helpers/dashboard_stack.py).

Never runs `playwright install`: the browser is /usr/bin/chromium (apt-get install chromium).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakenvml import gpu
from tests.helpers.browser import CHROMIUM, SCREENSHOTS_ENV, Pages, launch_chromium, set_screenshots_dir
from tests.helpers.dashboard_stack import Stack, StackFactory, gpu_job_specs, gpu_scenario
from tests.helpers.dsh_env import DSH_VERSION, DshUnavailable, ensure_dsh


@pytest.fixture(scope="session")
def playwright_session():
    """One Playwright for the session (a second sync_playwright() in the same thread is refused)."""
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"Debian's Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def chromium(playwright_session):
    browser = launch_chromium(playwright_session)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def pages(chromium) -> Iterator[Pages]:
    p = Pages(chromium)
    yield p
    p.close()


@pytest.fixture(scope="session", autouse=True)
def screenshots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$DSH_SCREENSHOTS_DIR if set (scripts/screenshots.sh), else a temporary folder of this session."""
    given = os.environ.get(SCREENSHOTS_ENV)
    path = Path(given).resolve() if given else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    set_screenshots_dir(path)
    return path


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
