"""The standalone page against the REAL sidecar, driven in Debian's Chromium.

Each stack is: a fake job tree publishing probe facts (probe_wire's writer), the simulated NVIDIA
driver reporting the job's pids, a fake /sys with an Intel iGPU, and `python -m sidecar.cli`.
Screenshots go to page-*.png in a temporary folder (scripts/screenshots.sh: docs/screenshots).
"""

from __future__ import annotations

import colorsys
import json
import re
import time

import pytest

from sidecar.common.catalogue import render
from tests.fakenvml import gpu
from tests.helpers.browser import screenshot, wait_js
from tests.helpers.dashboard_stack import GPU_NAMES, cpu_job_specs, gpu_job_specs, gpu_scenario

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

BADGE = "[data-testid=badge]"


def hex_to_rgb(color: str) -> str:
    c = color.lstrip("#")
    r, g, b = (int(c[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgb({r}, {g}, {b})"


def hue_sat(color: str) -> tuple[float, float]:
    """(hue in degrees, HLS saturation) of a #rrggbb colour."""
    c = color.lstrip("#")
    h, _, sat = colorsys.rgb_to_hls(*(int(c[i : i + 2], 16) / 255 for i in (0, 2, 4)))
    return h * 360, sat


def format_module(page, expr: str):
    """Evaluate `expr` with F = the page's own format.js (the single source of truth)."""
    return page.evaluate(
        f"async () => {{ const F = await import(new URL('static/shared/format.js', location.href)); return {expr}; }}"
    )


def badge_state(page) -> dict:
    return page.eval_on_selector(
        BADGE,
        "b => ({status: b.dataset.status, text: b.textContent.trim(), bg: getComputedStyle(b).backgroundColor})",
    )


def wait_badge(page, status: str, timeout_ms: int = 15_000) -> None:
    wait_js(
        page, "s => document.querySelector('[data-testid=badge]').dataset.status === s", status, timeout_ms
    )


def rows(page) -> list[dict]:
    return page.eval_on_selector_all(
        "[data-testid=process-row]",
        """rs => rs.map(r => ({
            pid: Number(r.dataset.pid), ppid: Number(r.dataset.ppid), depth: Number(r.dataset.depth),
            probe: r.dataset.probe, role: r.querySelector('[data-testid=role]').textContent.trim(),
            model: r.querySelector('[data-testid=model-device]').textContent.trim(),
            input: r.querySelector('[data-testid=input-device]').textContent.trim(),
            mem: r.querySelector('[data-testid=gpu-mem]').textContent.trim(),
            sm: r.querySelector('[data-testid=sm]').textContent.trim(),
            wait: r.querySelector('[data-testid=data-wait]').textContent.trim(),
        }))""",
    )


def wait_text(page, selector: str, expected: str, timeout_ms: int = 10_000) -> None:
    wait_js(
        page,
        "([sel, want]) => document.querySelector(sel).innerText.trim() === want",
        [selector, expected],
        timeout_ms,
    )


def series(page, chart: str) -> dict[str, dict]:
    return page.eval_on_selector_all(
        f"[data-testid=chart-{chart}] [data-testid=series]",
        "ps => Object.fromEntries(ps.map(p => [p.dataset.key, {points: Number(p.dataset.points), "
        "last: Number(p.dataset.last), d: p.getAttribute('d')}]))",
    )


# --------------------------------------------------------------------------- GPU job


def test_gpu_job_badge_cards_and_process_tree(gpu_stack, pages):
    page = pages.open(gpu_stack.url)
    wait_badge(page, "GPU")
    colors = format_module(page, "F.STATUS_COLORS")
    b = badge_state(page)
    assert b["text"] == "On GPU"
    assert b["bg"] == hex_to_rgb(colors["GPU"])
    assert "cuda:0" in page.inner_text("[data-testid=message]")
    assert page.inner_text("[data-testid=fact-model-device]").strip().endswith("cuda:0")

    # One card per simulated NVIDIA GPU, in NVML order, with the scenario's names and numbers.
    cards = page.locator("[data-testid=gpu-card][data-vendor=NVIDIA]")
    assert cards.count() == 2
    assert [cards.nth(i).locator("[data-testid=gpu-name]").inner_text() for i in range(2)] == GPU_NAMES
    card0 = cards.nth(0)
    assert card0.get_attribute("data-model-here") == "true"
    assert card0.locator("[data-testid=gpu-framework]").inner_text() == "PyTorch sees it as cuda:0"
    assert cards.nth(1).get_attribute("data-model-here") == "false"
    assert "87 %" in card0.locator("[data-testid=gpu-util]").inner_text()
    assert "3.5 GiB of 80 GiB" in card0.locator("[data-testid=gpu-mem]").inner_text()  # 3072 + 512 MiB
    main_pid = gpu_stack.pid("main")
    assert card0.locator(f"[data-testid=gpu-procs] li[data-pid='{main_pid}']").count() == 1
    assert "No process of this job uses it" in cards.nth(1).locator("[data-testid=gpu-procs]").inner_text()

    # The Intel iGPU from the fake sysfs: a card of its own after NVML's (issue 41), with its driver
    # and PCI address, no job process on it, and never listed again as a device CUDA cannot use.
    igpu = page.locator("[data-testid=gpu-card][data-vendor=Intel]")
    assert igpu.count() == 1 and igpu.get_attribute("data-index") == "2"
    text = igpu.inner_text()
    assert "Intel" in text and "i915" in text and "0000:00:02.0" in text
    assert "No process of this job uses it" in igpu.locator("[data-testid=gpu-procs]").inner_text()
    assert page.locator("[data-testid=igpu-card]").count() == 0

    # The process tree: main at depth 0, its three children indented under it.
    got = {r["pid"]: r for r in rows(page)}
    pids = {n: gpu_stack.pid(n) for n in ("main", "worker0", "worker1", "helper")}
    assert set(got) == set(pids.values())
    main = got[pids["main"]]
    assert (main["depth"], main["probe"], main["role"]) == (0, "true", "main")
    assert main["model"].startswith("cuda:0") and "resnet18" in main["model"]
    assert main["input"] == "cuda:0"
    assert (main["mem"], main["sm"], main["wait"]) == ("3 GiB", "85 %", "12 %")
    for n, role in (("worker0", "data worker 0"), ("worker1", "data worker 1")):
        r = got[pids[n]]
        assert (r["depth"], r["ppid"], r["probe"], r["role"]) == (1, pids["main"], "true", role)
    helper = got[pids["helper"]]
    assert (helper["depth"], helper["probe"], helper["role"]) == (1, "false", "no probe")
    order = [r["pid"] for r in rows(page)]
    assert order[0] == pids["main"], "children are listed under their parent"

    # Runtime footer and last-updated.
    assert "2.5.1+cu124" in page.inner_text("[data-testid=runtime]")
    wait_js(page, "() => document.querySelector('[data-testid=last-updated]').classList.contains('live')")
    assert page.locator("[data-testid=unreachable]").is_hidden()

    wait_js(page, "() => Number(document.querySelector('[data-testid=chart-mem] svg').dataset.points) >= 4")
    screenshot(page, "gpu")
    screenshot(page, "gpu-full", full_page=True)

    # Dark mode follows prefers-color-scheme; the badge keeps its status colour.
    dark = pages.open(gpu_stack.url, color_scheme="dark")
    wait_badge(dark, "GPU")
    assert badge_state(dark)["bg"] == hex_to_rgb(colors["GPU"])
    assert dark.evaluate("getComputedStyle(document.body).backgroundColor") != "rgb(245, 246, 248)"
    screenshot(dark, "gpu-dark")
    assert not pages.errors, pages.errors


def test_the_live_pulse_stops_for_a_reader_who_asked_for_less_motion(gpu_stack, pages):
    def dot_animation(page) -> str:
        wait_js(page, "() => document.body.classList.contains('live')")
        return page.evaluate("getComputedStyle(document.querySelector('.badge-dot')).animationName")

    assert dot_animation(pages.open(gpu_stack.url, reduced_motion="no-preference")) == "pulse"
    assert dot_animation(pages.open(gpu_stack.url, reduced_motion="reduce")) == "none"
    assert not pages.errors, pages.errors


def test_warnings_with_hints(gpu_stack, pages):
    page = pages.open(gpu_stack.url)
    wait_badge(page, "GPU")
    doc = gpu_stack.sidecar.status()
    assert doc["warnings"], "the iGPU beside the NVIDIA cards gives at least an info note"
    items = page.locator("[data-testid=warning]")
    assert items.count() == len(doc["warnings"])
    for w in doc["warnings"]:
        item = page.locator(f"[data-testid=warning][data-code='{w['code']}']")
        assert item.get_attribute("data-severity") == w["severity"]
        # Backticks in the sidecar's text become <code>; the words are all there.
        assert item.locator("[data-testid=warning-message]").inner_text() == w["message"].replace("`", "")
        if w["hint"]:
            assert item.locator("[data-testid=warning-hint]").inner_text() == w["hint"].replace("`", "")
    info = page.locator("[data-testid=warning][data-severity=info]").first
    sev = format_module(page, "F.SEVERITY_COLORS")
    assert info.locator(".sev").evaluate("e => getComputedStyle(e).backgroundColor") == hex_to_rgb(
        sev["info"]
    )


# How many event markers of chart NAME name an event WORD (in their title: a marker of merged events lists them).
MARKER_TITLES = """([name, word]) => [...document.querySelectorAll(`[data-testid=chart-${name}] [data-testid=event-marker]`)]
    .filter(m => m.querySelector('title').textContent.includes(word)).length"""


def marker_titles(page, chart: str, word: str) -> int:
    return page.evaluate(MARKER_TITLES, [chart, word])


def test_charts_draw_and_move_when_the_scenario_changes(gpu_stack, pages):
    page = pages.open(gpu_stack.url + "?refresh=0.5")
    wait_js(
        page,
        "() => document.querySelectorAll('[data-testid=chart-mem] [data-testid=series]').length === 2",
        timeout_ms=20_000,
    )
    wait_js(page, "() => Number(document.querySelector('[data-testid=chart-util] svg').dataset.points) >= 6")
    before_mem, before_util = series(page, "mem"), series(page, "util")
    assert set(before_mem) == {"0", "1"} and set(before_util) == {"0", "1"}
    assert before_util["0"]["last"] == 87 and before_util["1"]["last"] == 0
    assert before_mem["0"]["last"] == 3584
    # Task events from the probe are drawn as markers on both charts (events 0.5 s apart share one).
    assert marker_titles(page, "mem", "epoch 1") == 1
    counts = page.eval_on_selector_all(
        "[data-testid=chart-util] [data-testid=event-marker]", "ms => ms.map(m => Number(m.dataset.count))"
    )
    assert sum(counts) >= 2, counts

    # The job's GPU memory jumps, GPU 1 gets busy, and the job reports a new task event.
    main_spec = json.loads((gpu_stack.job.dir / "main.json").read_text())
    main_spec["payload"]["events"].append({"time": time.time(), "name": "checkpoint"})
    gpu_stack.job.update("main", main_spec)
    gpu_stack.nvml.write(gpu_scenario(gpu_stack.job.pids, util0=42, mem0=20480, util1=30, mem1=1024))
    try:
        wait_js(
            page,
            """() => { const p = document.querySelector('[data-testid=chart-mem] [data-testid=series][data-key="0"]');
                          return p && Number(p.dataset.last) === 20992; }""",
            timeout_ms=20_000,
        )
        wait_js(
            page,
            """() => { const p = document.querySelector('[data-testid=chart-util] [data-testid=series][data-key="1"]');
                          return p && Number(p.dataset.last) === 30; }""",
        )
        _charts_after_change(page, before_mem)
    finally:
        gpu_stack.nvml.write(gpu_scenario(gpu_stack.job.pids))
        gpu_stack.sidecar.wait_status(
            lambda d: d["gpus"][0]["util_pct"] == 87 and d["gpus"][0]["mem_used_mib"] == 3584, what="the first scenario back"
        )
    assert not pages.errors, pages.errors


def _charts_after_change(page, before_mem):
    wait_js(page, MARKER_TITLES, ["mem", "checkpoint"])
    after_mem, after_util = series(page, "mem"), series(page, "util")
    assert after_mem["0"]["points"] > before_mem["0"]["points"]
    assert after_mem["0"]["d"] != before_mem["0"]["d"]
    assert after_util["0"]["last"] == 42
    # The y axis rescales to show the new maximum (20.5 GiB) instead of clipping it.
    labels = page.eval_on_selector_all(
        "[data-testid=chart-mem] .axis text", "ts => ts.map(t => t.textContent)"
    )
    assert any(re.fullmatch(r"(2[05]|30) GiB", s) for s in labels), labels
    # The GPU card follows too: at the next refresh at the latest (the page asks for the status, then
    # for the history, and a poll between the two gives the charts a sample the card shows later).
    wait_js(
        page,
        """() => { const c = document.querySelector('[data-testid=gpu-card]');
                      return c && c.innerText.includes('20.5 GiB of 80 GiB'); }""",
    )

    # The window selector changes the time span of both charts.
    def span() -> float:
        return float(page.get_attribute("[data-testid=chart-util] svg", "data-span"))

    assert span() == 300, "5 min by default"
    page.click("[data-testid=window-60]")
    assert page.get_attribute("[data-testid=window-60]", "aria-pressed") == "true"
    assert page.get_attribute("[data-testid=window-300]", "aria-pressed") == "false"
    assert span() == 60 and float(page.get_attribute("[data-testid=chart-mem] svg", "data-span")) == 60
    page.click("[data-testid=window-all]")
    assert page.get_attribute("[data-testid=window-all]", "aria-pressed") == "true"
    assert 10 <= span() < 120, "all = the samples collected so far (plus the events just before them)"
    assert page.evaluate("localStorage.getItem('dsh-gpu-dashboard.window')") == "all"

    # Values on hover, at the newest sample: the tooltip names each GPU with its value.
    history_section = "[data-testid=chart-mem] >> xpath=ancestor::section"
    page.locator(history_section).scroll_into_view_if_needed()
    box = page.locator("[data-testid=chart-mem] svg").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 14, box["y"] + box["height"] / 2)
    tip = page.locator("[data-testid=tooltip]")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "GPU 0" in text and "GPU 1" in text and "20.5 GiB" in text, text
    assert page.locator("[data-testid=chart-util] .crosshair").count() == 1, "both charts share the crosshair"
    screenshot(page, "charts", element=history_section, keep_mouse=True)
    page.mouse.move(0, 0)
    tip.wait_for(state="hidden")


def assert_warnings_in(page, doc: dict, lang: str) -> None:
    """Every warning's message and hint shown in `lang`, rendered from its references."""
    assert doc["warnings"], "the iGPU beside the NVIDIA cards gives at least an info note"
    for w in doc["warnings"]:
        item = f"[data-testid=warning][data-code='{w['code']}']"
        message = render(w["message_ref"], lang)
        assert lang == "en" or message != w["message"], "not translated"
        wait_text(page, f"{item} [data-testid=warning-message]", message.replace("`", ""))
        if w["hint_ref"]:
            wait_text(page, f"{item} [data-testid=warning-hint]", render(w["hint_ref"], lang).replace("`", ""))


def test_language_switch_follows_browser_and_is_remembered(gpu_stack, pages):
    page = pages.open(gpu_stack.url, locale="zh-CN")
    wait_badge(page, "GPU")
    doc = gpu_stack.sidecar.status()
    assert badge_state(page)["text"] == "在 GPU 上"
    wait_text(page, "[data-testid=message]", render(doc["message_ref"], "zh").replace("`", ""))
    assert_warnings_in(page, doc, "zh")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    assert page.inner_text("[data-testid=lang-switch]") == "English"
    roles = {r["pid"]: r["role"] for r in rows(page)}
    assert roles[gpu_stack.pid("helper")] == "无探针"
    screenshot(page, "gpu-zh")

    page.click("[data-testid=lang-switch]")
    assert badge_state(page)["text"] == "On GPU"
    wait_text(page, "[data-testid=message]", doc["message"].replace("`", ""))
    assert_warnings_in(page, doc, "en")
    # Issue 39 item 12: the button names Chinese in Latin letters too, so it reads without a CJK font.
    label = page.inner_text("[data-testid=lang-switch]")
    assert "中文" in label and re.sub(r"[^\x00-\x7f]", "", label).strip(" /") == "ZH", label
    assert page.evaluate("localStorage.getItem('dsh-gpu-dashboard.lang')") == "en"
    page.reload()
    wait_badge(page, "GPU")
    assert badge_state(page)["text"] == "On GPU", "the choice survives a reload"
    # ?lang= in the URL wins over the remembered choice.
    page.goto(gpu_stack.url + "?lang=zh")
    wait_badge(page, "GPU")
    assert badge_state(page)["text"] == "在 GPU 上"
    assert not pages.errors, pages.errors


def test_catalogues_and_format_rules(gpu_stack, pages):
    page = pages.open(gpu_stack.url)
    en, zh = format_module(page, "[Object.keys(F.CATALOGUE.en).sort(), Object.keys(F.CATALOGUE.zh).sort()]")
    assert en == zh and len(en) > 80
    assert format_module(
        page, "[F.pickLang(['de-DE', 'zh-TW', 'en']), F.pickLang(['en-GB']), F.pickLang([])]"
    ) == ["zh", "en", "en"]
    assert format_module(
        page, "[F.fmtMiB(512), F.fmtMiB(3584), F.fmtMiB(null), F.fmtPct(87), F.fmtPct(2.46)]"
    ) == ["512 MiB", "3.5 GiB", "—", "87 %", "2.5 %"]
    chip = format_module(
        page,
        "F.summarize({status: 'CPU', message: 'm', message_ref: {id: 'reason.cpu.no-accelerator', params: {}},"
        " model_gpu_index: 1, gpus: [{index: 0, util_pct: 90}, {index: 1, util_pct: 3}],"
        " warnings: [{severity: 'info', message: 'i'}, {severity: 'error', message: 'e'}]}, 'zh')",
    )
    assert (chip["status"], chip["label"], chip["message"], chip["util"], chip["worst"]) == (
        "CPU",
        "在 CPU 上",
        "未使用任何加速器",
        "3 %",
        "error",
    )
    assert format_module(
        page, "[F.utilLevel(null), F.utilLevel(2), F.utilLevel(30), F.utilLevel(60), F.utilLevel(95)]"
    ) == ["none", "idle", "low", "ok", "high"]
    # The colours mean what the issue says: GPU green, CPU orange, MIXED amber, UNKNOWN grey; errors
    # red, warnings amber, notes grey.
    hues = {k: hue_sat(v) for k, v in format_module(page, "F.STATUS_COLORS").items()}
    assert 90 <= hues["GPU"][0] <= 160 and hues["GPU"][1] > 0.4
    assert 15 <= hues["CPU"][0] < 32 and hues["CPU"][1] > 0.6
    assert 32 <= hues["MIXED"][0] <= 50 and hues["MIXED"][1] > 0.6
    assert hues["UNKNOWN"][1] < 0.2
    sev = {k: hue_sat(v) for k, v in format_module(page, "F.SEVERITY_COLORS").items()}
    assert (sev["error"][0] < 12 or sev["error"][0] > 345) and sev["error"][1] > 0.5
    assert 30 <= sev["warning"][0] <= 50 and sev["info"][1] < 0.2
    # Every static label of the page comes from the catalogue.
    keys = page.eval_on_selector_all("[data-i18n]", "es => es.map(e => e.dataset.i18n)")
    assert keys and set(keys) <= set(en)


def test_refresh_pauses_while_the_tab_is_hidden(gpu_stack, pages):
    page = pages.open(gpu_stack.url + "?refresh=0.3")
    wait_badge(page, "GPU")
    hits: list[str] = []
    page.on("request", lambda r: hits.append(r.url) if "/status" in r.url else None)
    page.wait_for_timeout(1500)
    assert len(hits) >= 3, f"?refresh=0.3 polls about 3 times a second, got {len(hits)} in 1.5 s"
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
        "Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    page.wait_for_timeout(400)
    hits.clear()
    page.wait_for_timeout(1500)
    assert hits == [], "no polling while the tab is hidden"
    assert "Paused" in page.inner_text("[data-testid=last-updated]")
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
        "Object.defineProperty(document, 'visibilityState', {value: 'visible', configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    page.wait_for_timeout(800)
    assert len(hits) >= 1, "polling resumes at once when the tab is visible again"


def test_narrow_window_is_readable(gpu_stack, pages):
    page = pages.open(gpu_stack.url, width=420, height=900)
    wait_badge(page, "GPU")
    wait_js(page, "() => Number(document.querySelector('[data-testid=chart-mem] svg').dataset.points) >= 2")
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"no horizontal scrolling on a 420 px window (overflow {overflow} px)"
    # Cards stack in one column; the badge stays fully visible.
    boxes = [page.locator("[data-testid=gpu-card]").nth(i).bounding_box() for i in range(2)]
    assert boxes[0]["x"] == boxes[1]["x"] and boxes[1]["y"] > boxes[0]["y"]
    badge = page.locator(BADGE).bounding_box()
    assert badge["x"] >= 0 and badge["x"] + badge["width"] <= 420
    screenshot(page, "narrow")
    screenshot(page, "narrow-full", full_page=True)


# --------------------------------------------------------------------------- CPU and UNKNOWN jobs


def test_cpu_build_is_orange_with_an_error_and_its_fix(stacks, pages):
    def scenario(pids):
        return {"gpus": [gpu(0, name=GPU_NAMES[0], util_gpu=0, memory_used_mib=3)]}

    stack = stacks.start("cpu", cpu_job_specs(), scenario, n_sysfs_nvidia=1, expect_status="CPU")
    page = pages.open(stack.url)
    wait_badge(page, "CPU")
    colors = format_module(page, "F.STATUS_COLORS")
    b = badge_state(page)
    assert b["text"] == "On CPU" and b["bg"] == hex_to_rgb(colors["CPU"])
    err = page.locator("[data-testid=warning][data-code=cpu-build]")
    assert err.get_attribute("data-severity") == "error"
    assert "CPU-only" in err.locator("[data-testid=warning-message]").inner_text()
    assert "pip install" in err.locator("[data-testid=warning-hint]").inner_text()
    assert err.locator("code").count() >= 1, "commands in hints are shown as code"
    assert page.locator("[data-testid=warning]").first.get_attribute("data-code") == "cpu-build", (
        "errors first"
    )
    sev = format_module(page, "F.SEVERITY_COLORS")
    assert err.locator(".sev").evaluate("e => getComputedStyle(e).backgroundColor") == hex_to_rgb(
        sev["error"]
    )
    main = {r["pid"]: r for r in rows(page)}[stack.pid("main")]
    assert main["model"].startswith("cpu") and main["input"] == "cpu"
    assert "CPU-only build" in page.inner_text("[data-testid=runtime]")
    card = page.locator("[data-testid=gpu-card][data-vendor=NVIDIA]")
    assert card.count() == 1 and card.locator("[data-testid=gpu-framework]").inner_text() == (
        "PyTorch cannot use CUDA in this job"
    )
    screenshot(page, "cpu")
    page.click("[data-testid=lang-switch]")
    assert badge_state(page)["text"] == "在 CPU 上"
    assert "仅支持 CPU" in err.locator("[data-testid=warning-message]").inner_text()
    screenshot(page, "cpu-zh")
    assert not pages.errors, pages.errors


def test_job_without_probe_is_unknown_and_grey(stacks, pages):
    specs = {"main": {"probe": False}}
    stack = stacks.start(
        "unknown", specs, {"gpus": [gpu(0, name=GPU_NAMES[0])]}, n_sysfs_nvidia=1, expect_status="UNKNOWN"
    )
    page = pages.open(stack.url)
    wait_badge(page, "UNKNOWN")
    colors = format_module(page, "F.STATUS_COLORS")
    b = badge_state(page)
    assert b["text"] == "Unknown" and b["bg"] == hex_to_rgb(colors["UNKNOWN"])
    hint = page.locator("[data-testid=warning][data-code=no-probe] [data-testid=warning-hint]")
    assert "probe.register(model)" in hint.inner_text()
    (row,) = rows(page)
    assert (row["pid"], row["probe"], row["role"], row["model"]) == (
        stack.pid("main"),
        "false",
        "no probe",
        "—",
    )
    screenshot(page, "unknown")
    assert not pages.errors, pages.errors


def test_a_page_without_a_document_claims_no_status(stacks, pages):
    # Before the first document the badge says so and carries no status: a reader waiting for
    # UNKNOWN (a person or a script) must not take "not loaded yet" for the verdict.
    stack = stacks.start(
        "nodoc", {"main": {"probe": False}}, {"gpus": [gpu(0)]}, n_sysfs_nvidia=1, expect_status="UNKNOWN"
    )
    ctx = pages.browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    pages.contexts.append(ctx)
    held = ctx.new_page()
    held.route("**/api/**", lambda route: None)  # never answered
    held.goto(stack.url)
    b = badge_state(held)
    assert (b["status"], b["text"]) == ("", "No status yet")
    page = pages.open(stack.url)
    wait_badge(page, "UNKNOWN")
    assert badge_state(page)["text"] == "Unknown"


# --------------------------------------------------------------------------- unreachable


def test_unreachable_after_the_sidecar_stops(stacks, pages):
    stack = stacks.start(
        "down", gpu_job_specs([gpu(0)["uuid"], gpu(1)["uuid"]]), gpu_scenario, expect_status="GPU"
    )
    # A page whose sidecar never answers shows only the unreachable state (requests refused).
    token = stack.sidecar.token  # a root sidecar's own (it makes one)
    ctx = pages.browser.new_context(
        viewport={"width": 1280, "height": 800},
        locale="en-US",
        extra_http_headers={"Authorization": f"Bearer {token}"} if token else None,
    )
    pages.contexts.append(ctx)
    fresh = ctx.new_page()
    fresh.route("**/api/**", lambda route: route.abort("connectionrefused"))
    fresh.goto(stack.url)
    fresh.locator("[data-testid=unreachable]").wait_for(state="visible", timeout=10_000)
    assert fresh.locator("[data-testid=hero]").is_hidden()
    assert "Not updated yet" in fresh.inner_text("[data-testid=last-updated]")

    page = pages.open(stack.url + "?refresh=0.5")
    wait_badge(page, "GPU")
    box = page.locator("[data-testid=unreachable]")
    assert box.is_hidden()
    stack.sidecar.stop()
    box.wait_for(state="visible", timeout=10_000)
    text = box.inner_text()
    assert "Sidecar unreachable" in text
    assert "dsh-sidecar --pid <PID>" in text and "dsh-sidecar run -- python train.py" in text
    assert page.get_attribute("[data-testid=unreachable-command]", "class") == "cmd-attach"
    assert "down" in page.get_attribute("[data-testid=last-updated]", "class")
    # The last known state stays on screen, dimmed, with its age.
    assert badge_state(page)["status"] == "GPU"
    assert page.evaluate("document.body.classList.contains('stale')")
    wait_js(
        page,
        "() => /Updated [0-9]+ s ago/.test(document.querySelector('[data-testid=last-updated]').textContent)",
    )
    screenshot(page, "unreachable")
