"""`?token=` in a real browser: the cookie it is traded for belongs to one sidecar, so logging into a
second sidecar on the same host (another port) leaves the first one logged in."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.harness import Sidecar

pytestmark = [pytest.mark.browser]

STATUS = "/api/dsh-gpu-dashboard/status"


def test_two_sidecars_keep_their_own_login(chromium, fake_nvml):
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
        ):
            ctx = chromium.new_context()
            try:
                page = ctx.new_page()
                page.set_default_timeout(15_000)

                def status_of(base: str) -> int:
                    page.goto(base + "/healthz")  # same origin as the sidecar, so its cookie goes along
                    return page.evaluate("async (u) => (await fetch(u, {cache: 'no-store'})).status", STATUS)

                assert status_of(a.url) == 401
                page.goto(f"{a.url}/?token={tokens[0]}")
                assert "token=" not in page.url
                assert status_of(a.url) == 200
                page.goto(f"{b.url}/?token={tokens[1]}")
                assert status_of(b.url) == 200
                assert status_of(a.url) == 200, "logging into the second sidecar logged out the first"
                names = sorted(c["name"] for c in ctx.cookies())
                ports = sorted(u.rsplit(":", 1)[1] for u in (a.url, b.url))
                assert names == sorted(f"dsh_sidecar_token_{p}" for p in ports), names
            finally:
                ctx.close()
    finally:
        sleeper.kill()
        sleeper.wait()
