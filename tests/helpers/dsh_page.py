"""The plugin's page inside a real DSH, as the DSH browser tests drive it: pages that record their
errors, a session and its GPU tab opened as a user does, the plugin's panel, screenshots.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from playwright.sync_api import Page
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


def open_session(page: Page, message: str = "is my model on the GPU?") -> None:
    """Start a session as a user of the README does (`dsh web` from the project's folder): no
    workspace to pick, the New Session DSH opens in the launch folder takes the message at once.
    Then open its GPU tab."""
    box = page.locator("textarea").first
    box.wait_for()
    try:
        # without a workspace DSH's box is read-only and asks "Choose a workspace to start"
        page.locator("textarea:not([readonly])").first.wait_for(timeout=20_000)
    except PlaywrightTimeout:
        page.screenshot(path=os.path.join(tempfile.gettempdir(), "dsh-open-session-failed.png"))
        raise AssertionError(
            "DSH opened no session in the launch folder (its message box asks to choose a workspace); "
            f"the plugin's /api/config says: {page.evaluate(CONFIG_WORKSPACE)}"
        ) from None
    box.fill(message)
    box.press("Enter")
    tab = page.get_by_role("tab", name="GPU", exact=True).first
    try:
        tab.wait_for(timeout=20_000)
    except Exception:
        page.screenshot(path=os.path.join(tempfile.gettempdir(), "dsh-open-session-failed.png"))
        raise
    tab.click()


# What the plugin says of the launch folder's workspace (host/workspace.js), for a failure's message.
CONFIG_WORKSPACE = f"""async () => {{
  try {{ return JSON.stringify((await (await fetch('{API}/config')).json()).workspace) }}
  catch (e) {{ return String(e) }}
}}"""


def plugin_errors(errors: list[str]) -> list[str]:
    return [e for e in errors if "dsh-gpu" in e or "dsh_gpu" in e or "dgd-" in e]
