"""Tests write only to temporary folders: a screenshot lands outside the checkout unless
scripts/screenshots.sh asks for docs/screenshots (DSH_SCREENSHOTS_DIR)."""

from __future__ import annotations

import os

import pytest

from tests.helpers.browser import SCREENSHOTS_ENV, screenshot
from tests.helpers.harness import REPO

pytestmark = [pytest.mark.browser]


def test_a_test_screenshot_never_lands_in_the_checkout(chromium, pages):
    if os.environ.get(SCREENSHOTS_ENV):
        pytest.skip(f"{SCREENSHOTS_ENV} is set: scripts/screenshots.sh asked for the documentation's folder")
    page = pages.browser.new_page()
    try:
        page.set_content("<p>hello</p>")
        path = screenshot(page, "probe-of-the-folder")
    finally:
        page.close()
    assert path.is_file() and path.stat().st_size > 0
    assert not path.resolve().is_relative_to(REPO), f"a test wrote {path} inside the checkout {REPO}"
