"""Issue 25 item 1, on the page: the final state of an mp.spawn job shows its ranks, marked exited,
with their models and devices (a real job under a real `dsh-sidecar run`, left serving)."""

from __future__ import annotations

import pytest

from tests.helpers.browser import screenshot, wait_js
from tests.helpers.exit_jobs import SPAWN_JOB, final_document

pytestmark = pytest.mark.browser
pytest.importorskip("torch")


def test_the_page_shows_an_exited_jobs_ranks_marked_exited(pages, tmp_path):
    kept = []
    try:
        doc = final_document(SPAWN_JOB, tmp_path, grace_s=120, keep=kept)
        ranks = {p["pid"] for p in doc["processes"] if p["models"]}
        assert len(ranks) == 2
        sc = kept[0]  # as root, `run` makes a token and prints the page's address with it
        page = pages.open(sc.url + "/" + (f"?token={sc.token}" if sc.token else ""))
        rows = "[data-testid=process-row]"
        wait_js(page, f"() => document.querySelectorAll('{rows}').length === {len(doc['processes'])}")
        exited = page.eval_on_selector_all(
            rows, "rs => rs.filter(r => r.querySelector('[data-testid=exited]')).map(r => +r.dataset.pid)"
        )
        assert set(exited) == {p["pid"] for p in doc["processes"]}  # the job has ended: every process
        devices = page.eval_on_selector_all(
            rows, "rs => rs.map(r => [+r.dataset.pid, r.querySelector('[data-testid=model-device]').innerText])"
        )
        assert all("cpu" in text and "rank-model" in text for pid, text in devices if pid in ranks), devices
        assert page.inner_text("[data-testid=exited]").strip() == "exited"
        screenshot(page, "final-state-exited", full_page=True)
        assert not pages.errors, pages.errors
    finally:
        for sc in kept:
            sc.stop()
