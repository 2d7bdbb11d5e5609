"""`?token=` in a real browser: the page keeps the token in its tab's sessionStorage (per origin:
host and port) and sends it as `Authorization: Bearer`. No cookie holds it, so another user's
listener on another loopback port of the same host receives nothing, and two sidecars on one host
keep their own logins."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.harness import Sidecar
from tests.helpers.stranger import StrangerListener, can_switch_user

pytestmark = [pytest.mark.browser]

STATUS = "/api/dsh-gpu-dashboard/status"


def open_and_expect(page, url: str, base: str, status: int) -> None:
    """Go to `url` and wait until the page's own status request to `base` is answered `status`."""
    with page.expect_response(lambda r: r.url.startswith(base + STATUS) and r.status == status):
        page.goto(url)


@pytest.mark.skipif(not can_switch_user(), reason="needs root and setpriv to run a second user")
def test_the_token_reaches_no_other_port_and_each_sidecar_keeps_its_login(chromium, fake_nvml):
    fake_nvml.write({"gpus": []})
    sleeper = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    tokens = ["first-sidecar-token-0123", "second-sidecar-token-456"]
    try:
        with (
            Sidecar(
                ["--pid", str(sleeper.pid), "--port", "0", "--token", tokens[0]], env=fake_nvml.env()
            ) as a,
            Sidecar(
                ["--pid", str(sleeper.pid), "--port", "0", "--token", tokens[1]], env=fake_nvml.env()
            ) as b,
            StrangerListener() as stranger,
        ):
            ctx = chromium.new_context()
            try:
                page = ctx.new_page()
                page.set_default_timeout(15_000)
                open_and_expect(page, f"{a.url}/", a.url, 401)  # no token yet
                open_and_expect(page, f"{a.url}/?token={tokens[0]}", a.url, 200)
                assert "token=" not in page.url
                open_and_expect(page, f"{a.url}/", a.url, 200)  # the tab keeps its login
                assert ctx.cookies() == [], ctx.cookies()

                open_and_expect(page, f"{b.url}/?token={tokens[1]}", b.url, 200)
                open_and_expect(page, f"{a.url}/", a.url, 200)  # logging into b kept a's login

                # another user's listener on another port of the same host (the page's CSP keeps
                # its own requests on its origin; a navigation is what would carry a cookie there)
                page.goto(f"{stranger.url}/")
                assert stranger.wait_for_request(10.0)
                leaked = [r for r in stranger.requests for t in tokens if t in repr(r["headers"])]
                assert leaked == [], leaked
            finally:
                ctx.close()
    finally:
        sleeper.kill()
        sleeper.wait()
