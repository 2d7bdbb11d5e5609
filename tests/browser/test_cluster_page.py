"""The page's Cluster section: a sidecar started with --prometheus (a tiny Prometheus on loopback,
tests/helpers/fake_prometheus.py) shows every node's GPUs, the node that stopped reporting marked
with why, the job's ranks and the cluster warnings, in English and Chinese."""

from __future__ import annotations

import os

import pytest

from tests.fakenvml import gpu
from tests.helpers.browser import screenshot, wait_js
from tests.helpers.fake_prometheus import FakePrometheus, two_nodes_and_a_silent_one
from tests.helpers.harness import FakeJob, Sidecar

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

SPEC = {"main": {"payload": {"role": "main", "models": [{"name": "net", "device": "cpu", "devices": ["cpu"], "params": 5}]}}}
ROWS = """() => [...document.querySelectorAll('[data-testid=cluster-node-row]')].map((r) => [
  r.dataset.node, r.dataset.reporting, r.querySelector('[data-col=state]')?.textContent ?? '',
  r.querySelector('[data-col=gpu]')?.textContent ?? ''])"""


def test_the_cluster_section_shows_both_nodes_and_the_missing_one(tmp_path, fake_nvml, pages):
    fake_nvml.write({"gpus": [gpu(0)]})
    env = {k: v for k, v in fake_nvml.env().items() if k != "DSH_PROMETHEUS_URL"}
    with (
        FakePrometheus(two_nodes_and_a_silent_one(straggler=3)) as prometheus,
        FakeJob(tmp_path / "job", SPEC, detach=True) as job,
        Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.3", "--prometheus", prometheus.url], env=env) as sc,
    ):
        page = pages.open(f"{sc.url}/?token={sc.token}" if sc.token else sc.url)
        wait_js(page, "() => document.querySelectorAll('[data-testid=cluster-rank-row]').length === 4")
        assert page.eval_on_selector("[data-testid=cluster]", "e => e.hidden") is False
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
