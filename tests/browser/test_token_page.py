"""Issue 39 item 1: a page opened without its sidecar's token. The sidecar is up and answers every
data request with HTTP 401; the page said "Sidecar unreachable ... start it next to your training
job", which sent a newcomer to start a second one. A 401 is a state of its own: the sidecar needs its
token, and the address to open is the one it printed, with ?token=."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.fakenvml import FakeNvml
from tests.helpers.browser import Pages, screenshot, wait_js
from tests.helpers.harness import Sidecar

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

TOKEN = "the-sidecars-own-token-0123"
BOX = "[data-testid=needs-token]"


@pytest.fixture
def sidecar(fake_nvml: FakeNvml) -> Iterator[Sidecar]:
    fake_nvml.write({"gpus": []})
    sleeper = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        args = ["--pid", str(sleeper.pid), "--port", "0", "--interval", "0.3", "--token", TOKEN]
        with Sidecar(args, env=fake_nvml.env(), token=TOKEN) as sc:
            yield sc
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_page_without_its_token_says_so_and_where_the_address_is(sidecar: Sidecar, pages: Pages) -> None:
    assert sidecar.url
    page = pages.open(f"{sidecar.url}/?refresh=0.5", wait_loaded=False, height=560)
    page.locator(BOX).wait_for(state="visible", timeout=10_000)
    assert page.locator("[data-testid=unreachable]").is_hidden()
    text = page.inner_text(BOX)
    assert "This sidecar needs its token" in text and "the tab has no token" in text, text
    assert "unreachable" not in text.lower() and "dsh-sidecar --pid" not in text, text
    # The address as the sidecar printed it, the token left for the reader to take from there.
    assert page.inner_text("[data-testid=token-address]") == f"{sidecar.url}/?token=…"
    assert "HTTP 401" in text
    screenshot(page, "token")
    page.click("[data-testid=lang-switch]")  # the note is the catalogue's, in both languages
    wait_js(page, "() => document.querySelector('[data-testid=needs-token] h2').textContent === '此 sidecar 需要它的 token'")
    page.click("[data-testid=lang-switch]")

    # A token the sidecar refuses (an earlier run's): said so, still not "unreachable".
    page.goto(f"{sidecar.url}/?token=an-earlier-runs-token&refresh=0.5")
    wait_js(page, "() => /refused the token this tab has/.test(document.querySelector('[data-testid=needs-token]').innerText)")
    assert page.locator("[data-testid=unreachable]").is_hidden()

    # The address it printed: the page shows the job, and no note.
    page.goto(f"{sidecar.url}/?token={TOKEN}&refresh=0.5")
    wait_js(page, "() => document.querySelector('[data-testid=badge]').dataset.status !== ''")
    assert page.locator(BOX).is_hidden() and page.locator("[data-testid=unreachable]").is_hidden()
    page.goto(f"{sidecar.url}/?refresh=0.5")  # the tab keeps its token: nothing to say
    wait_js(page, "() => document.querySelector('[data-testid=badge]').dataset.status !== ''")
    assert page.locator(BOX).is_hidden()
    # Console errors are the browser's own lines for the 401 answers; the page itself threw nothing.
    assert not [e for e in pages.errors if e.startswith("pageerror")], pages.errors
