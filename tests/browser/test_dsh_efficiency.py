"""The plugin's efficiency strip and its CPU charts inside a real DSH 0.1.0-rc.8, fed by a sidecar app
(`create_app`) serving the hand-made, contract-checked documents of test_efficiency_page.py: a
throttled H100 with GPM figures (and two data waits over two windows), then a machine without an
NVIDIA GPU."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from sidecar.serve.server import ServerConfig, create_app
from tests.helpers.browser import screenshot_path
from tests.helpers.dsh_env import (
    DSH_VERSION,
    FAILED_TO_LOAD,
    DshHome,
    DshUnavailable,
    ensure_dsh,
    start_dsh_web,
)
from tests.helpers.dsh_page import new_page, open_session, plugin_errors, wait_for_panel
from tests.helpers.efficiency_docs import (
    FixedSource,
    data_wait_doc,
    history_doc,
    main_process,
    status_doc,
)

pytestmark = [pytest.mark.browser, pytest.mark.dsh, pytest.mark.slow, pytest.mark.timeout(300)]

VIEW = '[data-testid="dsh-gpu-view"]'


def test_strip_and_cpu_charts_in_dsh(chromium, tmp_path: Path) -> None:
    try:
        launcher = ensure_dsh()
    except DshUnavailable as exc:
        pytest.skip(f"DSH {DSH_VERSION} cannot be installed on this machine: {exc}")
    source = FixedSource(*data_wait_doc())
    srv = make_server("127.0.0.1", 0, create_app(ServerConfig(), source), threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    home = DshHome.create(tmp_path / "home", launcher)
    home.add_plugin()
    home.write_plugin_config(sidecarUrl=f"http://127.0.0.1:{srv.server_port}", token=None, timeoutMs=2000)
    web = start_dsh_web(home, tmp_path / "work")
    errors: list[str] = []
    try:
        ctx, page = new_page(chromium, web.url, errors)
        wait_for_panel(page)
        open_session(page)
        strip = page.locator('[data-testid="dsh-gpu-efficiency"]')
        strip.wait_for()
        bar = strip.locator('[data-testid="dsh-gpu-eff-stack"]').bounding_box()
        segs = strip.locator('[data-testid="dsh-gpu-eff-seg"]')
        widths = [segs.nth(i).bounding_box()["width"] for i in range(segs.count())]
        assert widths == pytest.approx([bar["width"] * f for f in (0.4, 0.3, 0.1, 0.2)], abs=2)
        problem = strip.locator('[data-reason="hw_thermal_slowdown"]')
        assert problem.get_attribute("data-kind") == "problem"
        assert problem.inner_text() == "hardware thermal slowdown"
        assert strip.locator('[data-testid="dsh-gpu-eff-pcie"]').get_attribute("data-flag") == "bad"
        assert "62 %" in strip.locator('[data-testid="dsh-gpu-eff-gpm"]').inner_text()
        # One data wait per window, named, as on the page: the bar's figure in the main process's row.
        legend = strip.locator('[data-testid="dsh-gpu-eff-seg"][data-key="data"]').get_attribute("title")
        assert legend == "Data wait 40 % (last 10 s)"
        page.wait_for_function("""() => document.querySelectorAll('[data-testid="dsh-gpu-process"]').length === 2""")
        waits = page.eval_on_selector_all(
            '[data-testid="dsh-gpu-process"]',
            """rs => rs.map(r => [Number(r.dataset.pid),
                 r.querySelector('[data-testid="dsh-gpu-data-wait-value"]').textContent,
                 (r.querySelector('[data-testid="dsh-gpu-data-wait-window"]') || {}).textContent || null])""",
        )
        assert sorted(waits) == [[4242, "40 %", "last 10 s"], [4343, "70 %", "last 12 batches"]]
        page.wait_for_selector('[data-testid="dsh-gpu-chart-power"]')
        page.wait_for_function(
            """() => document.querySelectorAll('[data-testid="dsh-gpu-chart-util-body"] path.series').length === 3"""
        )
        page.set_viewport_size({"width": 1400, "height": 1500})
        page.mouse.move(0, 0)
        page.screenshot(path=str(screenshot_path("dsh-efficiency")))

        # No NVIDIA GPU: the history charts the job's CPU, RSS and rates (newer samples arrive).
        main = main_process([], device="cpu")
        source.status = status_doc([], [main], nvml_ok=False, model_gpu=None)
        source.history = history_doc(gpu=False, later_s=30)
        page.wait_for_selector('[data-testid="dsh-gpu-history"][data-mode="cpu"]')
        page.wait_for_function(
            """() => ['cpu', 'rss', 'rate'].every(n =>
                 document.querySelectorAll(`[data-testid="dsh-gpu-chart-${n}-body"] path.series`).length >= 1)"""
        )
        # the step rate is only in the newer samples: they reached the chart
        page.wait_for_selector(
            '[data-testid="dsh-gpu-chart-rate-body"] path.series[data-key="step"]', state="attached"
        )
        points = page.get_attribute('[data-testid="dsh-gpu-chart-cpu-body"] svg', "data-points")
        assert int(points) >= 20
        assert page.locator('[data-testid="dsh-gpu-chart-mem"]').count() == 0
        page.set_viewport_size({"width": 1400, "height": 1500})
        page.mouse.move(0, 0)
        page.screenshot(path=str(screenshot_path("dsh-efficiency-cpu")))
        assert page.locator(VIEW).locator('[data-testid="dsh-gpu-eff-gpu"]').count() == 0
        assert FAILED_TO_LOAD not in page.inner_text("body")
        assert not plugin_errors(errors), errors
        ctx.close()
    finally:
        web.stop()
        srv.shutdown()
        shutil.rmtree(tmp_path / "home", ignore_errors=True)
