"""The page's Runs view (issue 40), looked at as a person does: a sidecar started with `--runs-db` on
a ledger of runs (tests/helpers/runs_ledger.py: `python train.py` in one folder with num_workers=4,
then the same with num_workers=0, whose data wait is half the step) lists them, the newest first;
opening the second shows its verdict timeline and its minutes charted; "Compare with the previous
run" says REGRESSION with data wait the first cause and the loader setting as its evidence, in
English and in Chinese. A sidecar started with `--no-runs` says runs are not recorded and how to
turn them on, never a broken view."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sidecar.sources.ledger import Ledger, LedgerBatch
from tests.fakenvml import FakeNvml, gpu
from tests.helpers.browser import Pages, screenshot, wait_js
from tests.helpers.harness import REPO, FakeJob, Sidecar
from tests.helpers.ledger_runs import identity, record
from tests.helpers.runs_ledger import FORGED, fill, short

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(120)]

MODELS = [{"name": "net", "device": "cpu", "devices": ["cpu"], "params": 5}]
SPEC = {"main": {"payload": {"role": "main", "models": MODELS}}}
# How often the Runs view reads the list again (the page's one definition).
REFRESH_MS = int(re.search(r"RUNS_REFRESH_MS = (\d+);", (REPO / "sidecar/static/page/runs.js").read_text())[1])
ROWS = """() => [...document.querySelectorAll('[data-testid=run-row]')].map((r) => [
  r.dataset.runId, r.querySelector('[data-col=command]').textContent, r.querySelector('[data-col=state]').textContent])"""


@dataclass
class RunsStack:
    job: FakeJob
    sidecar: Sidecar
    nvml: FakeNvml
    ids: dict[str, str]
    db: Path

    def url(self, sidecar: Sidecar | None = None) -> str:
        sc = sidecar or self.sidecar
        return f"{sc.url}/?token={sc.token}#runs" if sc.token else f"{sc.url}/#runs"


@pytest.fixture(scope="module")
def runs_stack(fake_nvml_lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunsStack]:
    base = tmp_path_factory.mktemp("runs-stack")
    db = base / "runs.sqlite3"
    # hours ago, not the helper's fixed day: the recording sidecar merges minutes older than a week
    runs = fill(db, t0=(time.time() // 60) * 60 - 4 * 3_600, base_workers="4")
    nvml = FakeNvml(lib_dir=fake_nvml_lib_dir, scenario_path=base / "scenario.txt")
    nvml.write({"gpus": [gpu(0)]})
    try:
        with (
            FakeJob(base / "job", SPEC, detach=True) as job,
            Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.5", "--runs-db", str(db)], env=nvml.env()) as sc,
        ):
            yield RunsStack(job, sc, nvml, {name: short(rec) for name, rec in runs.items()}, db)
    finally:
        nvml.close()
        shutil.rmtree(base, ignore_errors=True)


def test_the_runs_are_listed_opened_and_compared_with_the_previous_run(runs_stack: RunsStack, pages: Pages) -> None:
    ids = runs_stack.ids
    page = pages.open(runs_stack.url())
    wait_js(page, "() => document.querySelectorAll('[data-testid=run-row]').length >= 4")
    assert page.eval_on_selector("[data-testid=hero]", "e => getComputedStyle(e).display") == "none", "the live view is away"
    rows = page.evaluate(ROWS)
    ledger_rows = [r for r in rows if r[0] in ids.values()]
    # the newest start first (the watched job, recorded too, may come before them)
    assert [r[0] for r in ledger_rows] == [ids["forged"], ids["other"], ids["slow"], ids["base"]], rows
    assert ledger_rows[2][1] == "python train.py" and ledger_rows[1][2] == "running", rows
    forged = ledger_rows[0][1]
    assert "forged line" in forged and not any(c in forged for c in "\x1b\n\r\u202e\u2028"), repr(forged)
    assert FORGED not in page.inner_text("[data-testid=runs-view]")

    page.click(f"[data-run-id='{ids['base']}'] [data-testid=run-open]")
    wait_js(page, "() => document.querySelector('[data-testid=run-no-previous]')")
    assert page.eval_on_selector("[data-testid=run-compare]", "e => e.disabled"), "the first run has none before it"
    page.click(f"[data-run-id='{ids['slow']}'] [data-testid=run-open]")
    wait_js(page, "() => document.querySelectorAll('[data-testid=run-change]').length === 2")
    changes = page.inner_text("[data-testid=run-timeline]")
    assert "warnings: data-wait" in changes and "no warnings" in changes, changes
    assert "num_workers=0" in page.inner_text("[data-testid=run-detail] .run-facts")
    wait_js(page, "() => Number(document.querySelector('[data-testid=run-chart-rate] svg')?.dataset.points) === 10")
    assert page.eval_on_selector("[data-testid=run-chart-util] svg", "e => Number(e.dataset.points)") >= 10

    page.click("[data-testid=run-compare]")
    wait_js(page, "() => document.querySelector('[data-testid=compare]')")
    assert page.inner_text("[data-testid=compare-outcome]") == "REGRESSION"
    assert page.eval_on_selector_all(
        "[data-testid=compare-figure]", "es => es.map((e) => [e.dataset.figure, e.dataset.outcome])"
    ) == [["throughput", "regression"], ["gpu-busy", "within-noise"]]
    causes = page.eval_on_selector_all("[data-testid=compare-cause]", "es => es.map((e) => e.dataset.code)")
    assert causes[0] == "data-wait", causes
    first = page.inner_text("[data-testid=compare-cause] >> nth=0")
    assert first.startswith("100 %") and "data wait" in first and "num_workers=4 → num_workers=0" in first, first
    assert ids["base"] in page.inner_text("[data-testid=compare]"), "says which run it is compared with"
    if os.environ.get("DSH_SCREENSHOTS_DIR"):
        screenshot(page, "runs", full_page=True)

    # A run recorded while the view is shown appears in the list without picking the view again.
    late = record(identity(9, time.time() - 120, command=("python", "late.py")), time.time())
    with Ledger(runs_stack.db) as ledger:
        assert ledger.write(LedgerBatch(runs=(late,)))
    wait_js(page, f"() => document.querySelector(\"[data-run-id='{short(late)}']\")", timeout_ms=REFRESH_MS + 5_000)
    assert page.inner_text("[data-testid=compare-outcome]") == "REGRESSION", "the open comparison stays"

    page.click("[data-testid=lang-switch]")
    wait_js(page, "() => document.querySelector('[data-testid=compare-outcome]')?.textContent === '回退'")
    assert "等待数据" in page.inner_text("[data-testid=compare-cause] >> nth=0")
    assert page.inner_text("[data-testid=view-runs]") == "运行记录"
    page.click("[data-testid=view-live]")
    wait_js(page, "() => getComputedStyle(document.querySelector('[data-testid=hero]')).display !== 'none'")
    assert page.eval_on_selector("[data-testid=runs-view]", "e => e.hidden")
    assert not pages.errors, pages.errors


def test_a_sidecar_that_keeps_no_runs_says_how_to_turn_them_on(runs_stack: RunsStack, pages: Pages) -> None:
    with Sidecar(["--pid", str(runs_stack.job.pid), "--port", "0", "--interval", "0.5", "--no-runs"], env=runs_stack.nvml.env()) as sc:
        page = pages.open(runs_stack.url(sc))
        wait_js(page, "() => document.querySelector('[data-testid=runs-off]')")
        text = page.inner_text("[data-testid=runs-off]")
        assert "Runs are not recorded" in text and "--no-runs" in text and "--runs-db PATH" in text, text
        assert "Runs: where they live and how to compare" in text
        assert page.locator("[data-testid=runs-table]").count() == 0
        assert page.eval_on_selector("[data-testid=runs-view]", "e => e.dataset.state") == "off"
        if os.environ.get("DSH_SCREENSHOTS_DIR"):
            screenshot(page, "runs-off")
    # the page's own error for the 404 is not a script error
    assert not pages.errors, pages.errors
