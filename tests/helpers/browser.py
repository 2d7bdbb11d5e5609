"""Debian's Chromium through Playwright for the browser tests: launching it, pages that record
their errors, waiting on a page, screenshots. The fixtures that use these live in
tests/browser/conftest.py. Never runs `playwright install`: the browser is /usr/bin/chromium.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("DSH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # The page's "live" pulse (and DSH's motion) redraws every frame: a third of an open page's CPU.
    # A test that needs the motion asks for it with a context's reduced_motion="no-preference".
    "--force-prefers-reduced-motion",
    # Chromium's new headless mode is the whole browser: every window preloads its address bar's
    # suggestion popup (a WebUI page in a renderer of its own, about 0.7 CPU-s per window). Nobody
    # types into an address bar here. Chromium merges this list with Playwright's own.
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup",
]
# Where screenshots go. Tests write only to temporary folders: scripts/screenshots.sh sets this to
# docs/screenshots to refresh the documentation's pictures; otherwise a folder of the test session.
SCREENSHOTS_ENV = "DSH_SCREENSHOTS_DIR"
_screenshots: dict[str, Path] = {}


def wait_js(page, expression: str, arg: Any = None, timeout_ms: int = 15_000, interval_ms: int = 100):
    """Poll `expression` (a JS function source, called with `arg`) until it returns something truthy.

    Not page.wait_for_function: its polling evals the predicate inside the page, which the sidecar's
    Content-Security-Policy (no 'unsafe-eval') rightly forbids; page.evaluate is not subject to it.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    last = None
    while True:
        last = page.evaluate(expression, arg)
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_ms} ms waiting for JS: {expression[:200]} (last: {last!r})"
            )
        page.wait_for_timeout(interval_ms)


def launch_chromium(pw, extra_args: tuple[str, ...] = ()):
    return pw.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args])


# A root sidecar always has a token (it makes one): the token of each stack's sidecar, by its
# origin, so a page opened on it sends `Authorization: Bearer` as a user's own client would.
SIDECAR_TOKENS: dict[str, str] = {}


def origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass
class Pages:
    """Opens pages in fresh browser contexts; records page errors; closes everything at teardown."""

    browser: Any
    contexts: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def open(
        self,
        url: str,
        *,
        width: int = 1280,
        height: int = 800,
        locale: str = "en-US",
        color_scheme: str = "light",
        reduced_motion: str | None = None,  # None: the browser's (reduced, CHROMIUM_ARGS)
        wait_loaded: bool = True,
    ):
        token = SIDECAR_TOKENS.get(origin(url))
        ctx = self.browser.new_context(
            viewport={"width": width, "height": height},
            locale=locale,
            color_scheme=color_scheme,
            reduced_motion=reduced_motion,
            extra_http_headers={"Authorization": f"Bearer {token}"} if token else None,
        )
        self.contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(15_000)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: (
                self.errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None
            ),
        )
        page.goto(url)
        if wait_loaded:
            wait_js(page, "() => !document.body.classList.contains('loading')")
        return page

    def close(self) -> None:
        for ctx in self.contexts:
            try:
                ctx.close()
            except Exception:  # noqa: BLE001 -- every context closes, whatever one raised
                pass
        self.contexts.clear()


def set_screenshots_dir(path: Path) -> None:
    """Where this session's screenshots go (the conftest's screenshots_dir fixture decides)."""
    _screenshots["dir"] = path


def scroll_into_view(page, css: str) -> None:
    """Scroll the element that `css` selects into view, found and scrolled in one turn of the page's
    JS. A locator's scroll_into_view_if_needed resolves the element first and fails ("not attached
    to the DOM") when a re-render replaces it before the scroll; a view that remounts a section while
    it settles does that."""
    found = page.evaluate(
        "css => { const e = document.querySelector(css); if (e) e.scrollIntoView({block: 'nearest'}); return !!e; }",
        css,
    )
    assert found, f"nothing on the page matches {css}"


def screenshot_path(name: str) -> Path:
    """The file for screenshot NAME (e.g. "page-gpu") in the session's screenshot folder."""
    return _screenshots["dir"] / f"{name}.png"


def screenshot(
    page, name: str, full_page: bool = False, element: str | None = None, keep_mouse: bool = False
) -> Path:
    """Save page-NAME.png in the screenshot folder (docs/screenshots via scripts/screenshots.sh)."""
    path = screenshot_path(f"page-{name}")
    if not keep_mouse:
        page.mouse.move(0, 0)
    if element:  # a Playwright selector (">> xpath=..." too): the element with a margin of page around it
        loc = page.locator(element)
        loc.scroll_into_view_if_needed()
        box = loc.bounding_box()
        assert box, f"nothing on the page matches {element}"
        vw = page.viewport_size["width"]
        x, y = max(0, box["x"] - 12), max(0, box["y"] - 12)
        page.screenshot(
            path=str(path),
            clip={"x": x, "y": y, "width": min(vw - x, box["width"] + 24), "height": box["height"] + 24},
        )
    else:
        if full_page:  # from the top: scrolled, the sticky header would be drawn across the middle
            page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(path), full_page=full_page)
    return path


# The box the elements a selector matches cover together, in the viewport's coordinates, the first
# scrolled into view first (one turn of the page's JS: a re-render cannot come between a scroll and
# the measure). A heading counts for its text, not for its block, which is as wide as its section.
_UNION_BOX_JS = """css => {
  const els = [...document.querySelectorAll(css)];
  if (!els.length) return null;
  els[0].scrollIntoView({block: 'nearest'});
  const box = e => {
    if (!/^H[1-6]$/.test(e.tagName)) return e.getBoundingClientRect();
    const text = document.createRange();
    text.selectNodeContents(e);
    return text.getBoundingClientRect();
  };
  const rs = els.map(box);
  const left = Math.min(...rs.map(r => r.left)), top = Math.min(...rs.map(r => r.top));
  const right = Math.max(...rs.map(r => r.right)), bottom = Math.max(...rs.map(r => r.bottom));
  return {x: left, y: top, width: right - left, height: bottom - top};
}"""


def _clip(page, path: Path, css: str, margin_px: int = 12) -> None:
    """Save the part of the page that the elements `css` (a CSS selector: document.querySelectorAll)
    selects cover together, with a margin of page around it, so their borders are not cut."""
    box = page.evaluate(_UNION_BOX_JS, css)
    assert box, f"nothing on the page matches {css}"
    vw = page.viewport_size["width"]
    x, y = max(0, box["x"] - margin_px), max(0, box["y"] - margin_px)
    width, height = min(vw - x, box["width"] + 2 * margin_px), box["height"] + 2 * margin_px
    page.screenshot(path=str(path), clip={"x": x, "y": y, "width": width, "height": height})


def screenshot_clip(page, name: str, css: str) -> Path:
    """Save NAME.png, its prefix given ("page-amd", "dsh-amd"): the elements `css` selects, together
    (a section's title and its cards), the mouse out of the way."""
    path = screenshot_path(name)
    page.mouse.move(0, 0)
    _clip(page, path, css)
    return path
