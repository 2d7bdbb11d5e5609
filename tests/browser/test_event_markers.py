"""The history charts stay readable when a job logs an event every 0.4 s (the demo logs one a
second): events that fall closer than a marker's room share one marker with their count (charts.js
eventMarkers), a chart draws a bounded number of them, and the screenshot of a chart is mostly chart,
not markers. Each marker says what it is without hovering ("12 events", or its event's name), and no
label overlaps another label or line, at the chart's right edge too (issue 39 item 11: bare numbers,
▼18 ▼9 ▼32, explained only on hover, piled up at the right edge).

The page is fed as by a sidecar that ran along a 10-minute job: each /history answer brings the next
minute (its samples, and the events newer than `since`, the last 100 of them, as the contract says).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.serving import make_server

from sidecar.documents import contract
from sidecar.serve.server import ServerConfig, create_app
from tests.helpers.browser import Pages, screenshot, wait_js
from tests.helpers.efficiency_docs import gpu_page_doc, obj
from tests.helpers.harness import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

JOB_S = 600
EVENT_EVERY_S = 0.4
MINUTE_S = 60
MARKER_RGB = (0x7C, 0x3A, 0xED)  # style.css: svg .event
MARKERS_MAX = 24  # charts.js EVENT_MARKERS_MAX, which the page's own data also tells (data-count)


class DemoReplay:
    """A job of JOB_S seconds (a sample a second, an event every 0.4 s), a minute more per /history."""

    interval_s = 1.0

    def __init__(self) -> None:
        self.status, _ = gpu_page_doc()
        self.end = self.status["time_unix_s"]
        start = self.end - JOB_S
        gpu = {"util_pct": 90.0, "mem_used_mib": 30_000.0, "power_w": 340.0, "temperature_c": 85.0}
        self.samples = [
            obj("Sample", time_unix_s=start + k, gpus=[obj("SampleGpu", index=0, **gpu)], cpu_pct=150.0)
            for k in range(JOB_S + 1)
        ]
        n = int(JOB_S / EVENT_EVERY_S)
        self.events = [
            obj("Event", time_unix_s=start + i * EVENT_EVERY_S, name=f"step_{i}", pid=4242) for i in range(n)
        ]
        self.now = start + MINUTE_S
        self.lock = threading.Lock()

    def snapshot(self):
        return self.status, self.status["time_unix_s"]

    def status_document(self, job=None):
        return self.status

    def history_document(self, job=None, since=None):
        with self.lock:
            now, self.now = self.now, min(self.end, self.now + MINUTE_S)
        fresh = [e for e in self.events if e["time_unix_s"] <= now and (since is None or e["time_unix_s"] > since)]
        doc = obj(
            "HistoryDocument",
            schema=2,
            interval_s=self.interval_s,
            job_id="4242-1",
            samples=[
                s for s in self.samples if s["time_unix_s"] <= now and (since is None or s["time_unix_s"] > since)
            ],
            events=fresh[-100:],
            events_omitted=max(0, len(fresh) - 100),
        )
        contract.check(doc, "history")
        return doc

    def jobs_document(self):
        return None


@pytest.fixture
def demo_page(pages) -> Iterator:
    source = DemoReplay()
    srv = make_server("127.0.0.1", 0, create_app(ServerConfig(), source), threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    page = pages.open(f"http://127.0.0.1:{srv.server_port}/?refresh=0.2", width=1280, height=1400)
    # the whole job reached the page: the charts' last sample is the job's last
    wait_js(
        page,
        "end => Number(document.querySelector('[data-testid=chart-util]').dataset.lastTime) === end",
        source.end,
        timeout_ms=30_000,
    )
    yield page
    srv.shutdown()


def marker_colour_share(page, png: bytes) -> float:
    """The share of the image's pixels in the markers' colour (decoded by the browser itself)."""
    return page.evaluate(
        """async ([b64, rgb]) => {
            const img = new Image();
            img.src = `data:image/png;base64,${b64}`;
            await img.decode();
            const c = document.createElement('canvas');
            c.width = img.width; c.height = img.height;
            const g = c.getContext('2d');
            g.drawImage(img, 0, 0);
            const px = g.getImageData(0, 0, c.width, c.height).data;
            let hit = 0;
            for (let i = 0; i < px.length; i += 4) {
              // the marker's purple, drawn solid or at its line's opacity over the chart
              const [r, gg, b] = [px[i], px[i + 1], px[i + 2]];
              if (Math.abs(r - rgb[0]) < 45 && Math.abs(gg - rgb[1]) < 60 && Math.abs(b - rgb[2]) < 30) hit += 1;
            }
            return hit / (px.length / 4);
        }""",
        [base64.b64encode(png).decode(), list(MARKER_RGB)],
    )


def test_an_event_every_0_4_s_leaves_the_charts_readable(demo_page, pages, tmp_path):
    page = demo_page
    charts = ("mem", "util", "power", "temp")
    deadline = time.monotonic() + 10
    while True:  # the last answer's events drawn too (the page draws after it merged them)
        markers = {
            name: page.eval_on_selector_all(
                f"[data-testid=chart-{name}] [data-testid=event-marker]",
                "ms => ms.map(m => ({count: Number(m.dataset.count || 1), label: (m.querySelector('.event-label') || {}).textContent || null, title: m.querySelector('title').textContent}))",
            )
            for name in charts
        }
        if sum(m["count"] for m in markers["util"]) >= 300 or time.monotonic() > deadline:
            break
        page.wait_for_timeout(100)
    total = sum(m["count"] for m in markers["util"])
    assert total >= 300, f"the page's charts show {total} events of the last 300 s"
    for name, ms in markers.items():
        assert 0 < len(ms) <= MARKERS_MAX, f"{name}: {len(ms)} markers"
        assert sum(m["count"] for m in ms) == total, name  # every chart: the same events
    merged = [m for m in markers["util"] if m["count"] > 1]
    assert merged, "events 0.4 s apart merge"
    for m in merged:
        assert m["label"] == f"{m['count']} events"  # what the number counts, without hovering
        lines = m["title"].split("\n")
        assert lines[0] == f"{m['count']} events" and "step_" in lines[1], m["title"]
    # The tooltip over a merged marker says how many and lists them.
    marker = page.locator("[data-testid=chart-util] [data-testid=event-marker].event-merged").nth(2)
    # None while the page redraws the chart (every 0.2 s here): asked again until it is drawn.
    box = wait_for(lambda: marker.locator("line:not(.event-span)").bounding_box(), 10, 0.05, "a merged marker drawn")
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    wait_js(page, "() => !document.querySelector('[data-testid=tooltip]').hidden")
    assert " events\n" in page.inner_text("[data-testid=tooltip] .tt-event")

    png_path = tmp_path / "util-chart.png"
    page.mouse.move(0, 0)
    png = page.locator("[data-testid=chart-util] .chart-body").screenshot(path=str(png_path))
    share = marker_colour_share(page, png)
    assert share < 0.03, f"markers cover {share:.1%} of the utilisation chart ({png_path})"
    screenshot(page, "events-every-0.4s", element="[data-testid=chart-util]")
    assert not pages.errors, pages.errors


# Every marker of a chart as drawn: its count, its label's text and box, its line's x; the chart's box.
GEOMETRY = """(chart) => {
  const svg = document.querySelector(`[data-testid=chart-${chart}] svg`);
  const box = (r) => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
  const markers = [...svg.querySelectorAll('[data-testid=event-marker]')].map((m) => {
    const label = m.querySelector('.event-label');
    return {
      count: Number(m.dataset.count), name: m.dataset.name ?? null,
      label: label ? label.textContent : null, box: label ? box(label.getBoundingClientRect()) : null,
      line: m.querySelector('line:not(.event-span)').getBoundingClientRect().left,
    };
  });
  return {svg: box(svg.getBoundingClientRect()), markers};
}"""


def assert_labels_readable_and_apart(geometry: dict[str, Any], what: str) -> None:
    svg, markers = geometry["svg"], geometry["markers"]
    assert markers, what
    for m in markers:
        expected = f"{m['count']} events" if m["count"] > 1 else m["name"]
        assert m["label"] == expected and m["box"]["right"] > m["box"]["left"], (what, m)
        assert svg["left"] <= m["box"]["left"] and m["box"]["right"] <= svg["right"], (what, "leaves the chart", m, svg)
    boxes = sorted((m["box"] for m in markers), key=lambda b: b["left"])
    for a, b in zip(boxes, boxes[1:]):
        assert a["right"] <= b["left"], (what, "labels overlap", a, b)
    for m in markers:
        for other in markers:
            if other is not m:
                assert not m["box"]["left"] <= other["line"] <= m["box"]["right"], (what, "a label over a line", m, other)


def test_every_marker_says_what_it_is_and_no_label_overlaps_another(demo_page: Any, pages: Pages) -> None:
    page = demo_page
    wait_js(page, "() => document.querySelectorAll('[data-testid=chart-util] .event-label').length > 0")
    shown = None
    for width in (1280, 900, 560):  # as wide as a laptop's window, and as narrow as a phone's
        page.set_viewport_size({"width": width, "height": 1400})
        page.wait_for_timeout(300)  # the charts redraw on resize (and every 0.2 s here)
        for chart in ("util", "mem"):
            geometry = page.evaluate(GEOMETRY, chart)
            assert_labels_readable_and_apart(geometry, f"{chart} at {width} px")
            # however narrow, every event is in a marker, the newest ones at the right edge too
            total = sum(m["count"] for m in geometry["markers"])
            assert shown is None or total == shown, (chart, width, total, shown)
            shown = total
    page.set_viewport_size({"width": 1280, "height": 1400})
    assert not pages.errors, pages.errors
