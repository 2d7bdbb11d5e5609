"""The browser as a fixture of every test layer: Debian's Chromium through Playwright
(tests/helpers/browser.py), one per test session, pages that record their errors, and the folder
screenshots go to. Imported by tests/conftest.py.

Never runs `playwright install`: the browser is /usr/bin/chromium (apt-get install chromium).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.browser import CHROMIUM, SCREENSHOTS_ENV, Pages, launch_chromium, set_screenshots_dir

__all__ = ["chromium", "pages", "playwright_session", "screenshots_dir"]


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
