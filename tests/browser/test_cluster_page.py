"""The page's Cluster section: a sidecar started with --prometheus (a tiny Prometheus on loopback,
tests/helpers/fake_prometheus.py) shows a distributed job every node's GPUs, the node that stopped
reporting marked with why, the job's ranks and the cluster warnings, in English and Chinese; a job of
one process gets one line, not a table for each of the node's jobs (issue 39 item 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakenvml import FakeNvml, gpu
from tests.helpers.browser import Pages, screenshot, wait_js
from tests.helpers.fake_prometheus import FakePrometheus, two_nodes_and_a_silent_one
from tests.helpers.harness import FakeJob, Sidecar

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

MODELS = [{"name": "net", "device": "cpu", "devices": ["cpu"], "params": 5}]
SPEC = {"main": {"payload": {"role": "main", "models": MODELS}}}
# Rank 0 of run-7 (the Prometheus's job): a job of four ranks across nodes.
RANK_SPEC = {
    "main": {
        "payload": {
            "role": "rank", "rank": 0, "local_rank": 0, "world_size": 4, "job_key": "run-7",
            "job_key_source": "torchelastic", "models": MODELS,
        }
    }
}
ROWS = """() => [...document.querySelectorAll('[data-testid=cluster-node-row]')].map((r) => [
  r.dataset.node, r.dataset.reporting, r.querySelector('[data-col=state]')?.textContent ?? '',
  r.querySelector('[data-col=gpu]')?.textContent ?? ''])"""


def test_the_cluster_section_shows_both_nodes_and_the_missing_one(tmp_path, fake_nvml, pages):
    fake_nvml.write({"gpus": [gpu(0)]})
    env = {k: v for k, v in fake_nvml.env().items() if k != "DSH_PROMETHEUS_URL"}
    with (
        FakePrometheus(two_nodes_and_a_silent_one(straggler=3, single_process_jobs=5)) as prometheus,
        FakeJob(tmp_path / "job", RANK_SPEC, detach=True) as job,
        Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.3", "--prometheus", prometheus.url], env=env) as sc,
    ):
        page = pages.open(f"{sc.url}/?token={sc.token}" if sc.token else sc.url)
        wait_js(page, "() => document.querySelectorAll('[data-testid=cluster-rank-row]').length === 4")
        assert page.eval_on_selector("[data-testid=cluster]", "e => e.hidden") is False
        # the job's own run alone: the node's five jobs of one process are neither tables nor a line here
        jobs = page.eval_on_selector_all("[data-testid=cluster-job]", "es => es.map((e) => e.dataset.jobKey)")
        assert jobs == ["run-7"] and page.locator("[data-testid=cluster-line]").count() == 0
        assert page.evaluate(ROWS) == [
            ["node-a", "true", "reporting", "0"],
            ["node-a", "true", "", "1"],
            ["node-b", "true", "reporting", "0"],
            ["node-b", "true", "", "1"],
            ["node-c", "false", "missing: no longer reports", "—"],
        ]
        assert page.eval_on_selector("[data-node=node-c] [data-col=state]", "e => e.dataset.flag") == "missing"
        reasons = page.eval_on_selector_all("[data-reason]", "es => es.map((e) => e.textContent)")
        assert reasons == ["software thermal slowdown"]
        codes = page.eval_on_selector_all("[data-testid=cluster-warning]", "es => es.map((e) => e.dataset.code)")
        assert codes == ["node-missing", "straggler-rank"]
        slow = page.inner_text("[data-testid=cluster-warning][data-code=straggler-rank]")
        assert "Rank 3 (node node-b, GPU 1)" in slow and "because of its data wait" in slow, slow
        high = page.eval_on_selector_all("[data-testid=cluster-rank-row] [data-flag=high]", "es => es.length")
        assert high == 1, "rank 3's data wait (60 %) is flagged"
        waits = page.eval_on_selector_all(
            "[data-testid=cluster-rank-row] [data-col=collectiveWait]", "es => es.map((e) => e.textContent)"
        )
        assert waits == ["40 %", "40 %", "40 %", "0 %"], waits
        if os.environ.get("DSH_SCREENSHOTS_DIR"):
            screenshot(page, "cluster", element="[data-testid=cluster]")
        page.click("[data-testid=lang-switch]")
        wait_js(page, "() => document.querySelector('[data-node=node-c] [data-col=state]').textContent === '缺失：已停止上报'")
        assert not pages.errors, pages.errors


def test_a_job_of_one_process_gets_one_line_not_a_table_per_job(tmp_path: Path, fake_nvml: FakeNvml, pages: Pages) -> None:
    """Issue 39 item 3: with --prometheus, the page of a single-process job drew 22 empty tables
    ("Job vm/1291-... · — 0 of — ranks ... No rank reports.") above its own process table."""
    fake_nvml.write({"gpus": [gpu(0)]})
    env = {k: v for k, v in fake_nvml.env().items() if k != "DSH_PROMETHEUS_URL"}
    with (
        FakePrometheus(two_nodes_and_a_silent_one(single_process_jobs=22)) as prometheus,
        FakeJob(tmp_path / "job", SPEC, detach=True) as job,
        Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.3", "--prometheus", prometheus.url], env=env) as sc,
    ):
        page = pages.open(f"{sc.url}/" + (f"?token={sc.token}" if sc.token else ""))
        wait_js(page, "() => document.querySelector('[data-testid=cluster-line]')")
        section = page.locator("[data-testid=cluster]")
        assert section.is_visible()
        assert section.inner_text().strip() == (
            f"Cluster (from {prometheus.url}): 3 node(s), 1 distributed job(s). This job is not distributed: "
            "it has no rows there."
        )
        assert section.locator("table, h2, h3, [data-testid=cluster-job]").count() == 0
        wait_js(page, "() => document.querySelectorAll('[data-testid=process-row]').length === 1")
        screenshot(page, "cluster-single-process")
        page.click("[data-testid=lang-switch]")
        wait_js(page, "() => /本作业不是分布式作业/.test(document.querySelector('[data-testid=cluster-line]').textContent)")
        assert not pages.errors, pages.errors
