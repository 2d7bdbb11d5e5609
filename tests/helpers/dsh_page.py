"""The plugin's page inside a real DSH, as the DSH browser tests drive it: pages that record their
errors, a session and its GPU tab opened as a user does, the plugin's panel, screenshots.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.helpers.browser import screenshot_path
from tests.helpers.dsh_env import (
    FAILED_TO_LOAD,
)

API = "/dsh-gpu-dashboard/api"


def new_page(browser, url: str, errors: list[str], *, width: int = 1400, height: int = 900):
    ctx = browser.new_context(
        viewport={"width": width, "height": height}, locale="en-US", color_scheme="light"
    )
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.goto(url)
    return ctx, page


def wait_for_panel(page, testid: str = "dsh-gpu-chip", timeout_ms: int = 30_000):
    """Wait for our test id, racing against DSH's whole-page "Failed to load plugins"."""
    page.wait_for_function(
        """([tid, failed]) => !!document.querySelector(`[data-testid="${tid}"]`)
                              || document.body.innerText.includes(failed)""",
        arg=[testid, FAILED_TO_LOAD],
        timeout=timeout_ms,
    )
    body = page.inner_text("body")
    assert FAILED_TO_LOAD not in body, f"DSH could not load its plugins:\n{body[:2000]}"
    return page.locator(f'[data-testid="{testid}"]')


def shot(page, name: str) -> Path:
    path = screenshot_path(f"dsh-{name}")
    page.screenshot(path=str(path))
    return path


def open_session(page) -> None:
    """Create a session the way a user does (workspace = the test's folder), then open its GPU tab."""
    choose = page.get_by_text("Choose workspace", exact=True)
    if choose.count():
        # DSH may restore a workspace of an earlier session meanwhile: the picker, or its button,
        # then goes on its own, and the session box below is there (its wait fails the test if not).
        try:
            choose.first.click(timeout=5_000)
        except PlaywrightTimeout:
            pass
        open_button = page.get_by_role("button", name="Open", exact=True)
        try:
            open_button.wait_for(timeout=10_000)
        except PlaywrightTimeout:
            pass
        else:
            open_button.click()
            choose.first.wait_for(state="detached")
    page.keyboard.press("Escape")  # close a workspace menu, should one be open
    box = page.locator("textarea").first
    box.wait_for()
    box.fill("is my model on the GPU?")
    box.press("Enter")
    tab = page.get_by_role("tab", name="GPU", exact=True).first
    try:
        tab.wait_for(timeout=20_000)
    except Exception:
        page.screenshot(path=os.path.join(tempfile.gettempdir(), "dsh-open-session-failed.png"))
        raise
    tab.click()


def plugin_errors(errors: list[str]) -> list[str]:
    return [e for e in errors if "dsh-gpu" in e or "dsh_gpu" in e or "dgd-" in e]
