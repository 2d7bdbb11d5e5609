"""DNS rebinding, for real: Chromium resolves evil.example to 127.0.0.1 (as a rebinding attacker's
DNS would) and the sidecar must refuse every route to that name, while 127.0.0.1 works as before."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.helpers.browser import launch_chromium, wait_js

pytestmark = [pytest.mark.browser]

EVIL = "evil.example"
ROUTES = ["/", "/healthz", "/api/dsh-gpu-dashboard/status", "/api/dsh-gpu-dashboard/history", "/metrics"]


@pytest.fixture(scope="module")
def rebinding_browser(playwright_session) -> Iterator:
    browser = launch_chromium(playwright_session, (f"--host-resolver-rules=MAP {EVIL} 127.0.0.1",))
    try:
        yield browser
    finally:
        browser.close()


def test_a_rebound_name_reads_nothing_and_loopback_still_works(rebinding_browser, gpu_stack):
    port = gpu_stack.sidecar.url.rsplit(":", 1)[1]
    main_pid = str(gpu_stack.pid("main"))
    ctx = rebinding_browser.new_context()
    try:
        page = ctx.new_page()
        page.set_default_timeout(15_000)
        # The control: the same browser reads the page and the document through 127.0.0.1.
        # (a root sidecar makes a token: the user opens the address it prints)
        token = gpu_stack.sidecar.token
        page.goto(f"http://127.0.0.1:{port}/" + (f"?token={token}" if token else ""))
        wait_js(page, "() => document.querySelector('[data-testid=badge]')?.textContent.includes('GPU')")

        # The attacker's page, now same-origin with the sidecar under the attacker's name.
        response = page.goto(f"http://{EVIL}:{port}/")
        assert response is not None and response.status == 421, response and response.status
        body = json.loads(page.inner_text("body"))
        assert body["status"] == 421 and EVIL in body["error"] and "--allow-host" in body["error"]
        assert page.evaluate("() => location.origin") == f"http://{EVIL}:{port}"
        answers = page.evaluate(
            """async (routes) => Promise.all(routes.map(async (r) => {
                   const res = await fetch(r, {cache: 'no-store'});
                   return [r, res.status, await res.text()];
               }))""",
            ROUTES,
        )
        for route, status, text in answers:
            assert status == 421, (route, status, text[:200])
            assert main_pid not in text and "train.py" not in text, (route, text[:200])
            assert json.loads(text)["status"] == 421
    finally:
        ctx.close()
