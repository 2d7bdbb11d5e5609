"""The page's job switcher: a discovery sidecar (no --pid) watching two jobs shows both, and a click
shows the other job's verdict, processes and history, and keeps the choice in the address."""

from __future__ import annotations

import pytest

from tests.fakenvml import gpu
from tests.helpers.browser import wait_js
from tests.helpers.harness import FakeJob, Sidecar, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]


def spec(name: str, device: str) -> dict:
    return {
        "payload": {
            "role": "main",
            "models": [{"name": name, "device": device, "devices": [device], "params": 5}],
        }
    }


def test_two_jobs_one_switcher(tmp_path, fake_nvml, pages):
    fake_nvml.write({"gpus": [gpu(0)]})
    a = FakeJob(tmp_path / "a", {"main": spec("alpha-net", "cpu")}, detach=True)
    b = FakeJob(tmp_path / "b", {"main": spec("beta-net", "meta")}, detach=True)
    try:
        with Sidecar(["--port", "0", "--interval", "0.3"], env=fake_nvml.env()) as sc:

            def both():
                code, body = sc.get("/api/dsh-gpu-dashboard/jobs")
                ids = {j["root_pid"]: j["id"] for j in body["jobs"]} if code == 200 else {}
                return ids if {a.pid, b.pid} <= set(ids) else None

            ids = wait_for(both, 20, what="both jobs listed")
            # As root, discovery shows every user's jobs: its page wants the token it made itself.
            page = pages.open(f"{sc.url}/?token={sc.token}" if sc.token else sc.url)
            wait_js(page, "() => document.querySelectorAll('[data-testid=job]').length >= 2")
            shown = page.eval_on_selector("[data-testid=job][aria-pressed=true]", "e => e.dataset.jobId")
            other = ids[b.pid] if shown == ids[a.pid] else ids[a.pid]
            other_model = "beta-net" if other == ids[b.pid] else "alpha-net"
            page.click(f"[data-testid=job][data-job-id='{other}']")
            wait_js(
                page,
                "m => document.querySelector('[data-testid=message]').textContent.includes(m)",
                other_model,
            )
            assert f"job={other}" in page.url
            assert (
                page.eval_on_selector("[data-testid=job][aria-pressed=true]", "e => e.dataset.jobId") == other
            )
            # A reload keeps the job; a job that is gone falls back to the default one.
            page.reload()
            wait_js(
                page,
                "m => document.querySelector('[data-testid=message]').textContent.includes(m)",
                other_model,
            )
            assert not pages.errors, pages.errors
            page.goto(sc.url + "?job=1-1")
            wait_js(page, "() => !location.search.includes('job=1-1')")
            wait_js(page, "() => document.querySelectorAll('[data-testid=job]').length >= 2")
            # The browser logs the one 404 it got for the unknown job; nothing else went wrong.
            assert pages.errors and all("404" in e for e in pages.errors), pages.errors
    finally:
        a.stop()
        b.stop()
