"""The page's efficiency strip and history charts, on hand-made documents (schema 2, checked against
the contract) served by `create_app` with a static source, driven in Debian's Chromium.

Three machines: an H100 whose clocks are held down by heat, on a PCIe link below its maximum, with
GPM figures; an A100 in MIG mode (no per-process SM %, no GPM, and why); and a machine with no NVIDIA
GPU, whose history shows the job's CPU, resident memory and rates.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from werkzeug.serving import make_server

from sidecar.serve.server import ServerConfig, create_app
from tests.helpers.browser import screenshot, wait_js
from tests.helpers.efficiency_docs import (
    GPM_UNSUPPORTED,
    FixedSource,
    a100_mig,
    data_wait_doc,
    gpu_page_doc,
    h100,
    history_doc,
    main_process,
    obj,
    status_doc,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


# --------------------------------------------------------------------------- documents


# --------------------------------------------------------------------------- a server of fixed documents


@pytest.fixture
def serve() -> Iterator:
    servers = []

    def start(status: dict, history: dict) -> str:
        srv = make_server(
            "127.0.0.1", 0, create_app(ServerConfig(), FixedSource(status, history)), threaded=True
        )
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_port}/"

    yield start
    for srv in servers:
        srv.shutdown()


def wait_strip(page) -> None:
    wait_js(
        page, "() => { const s = document.querySelector('[data-testid=efficiency]'); return s && !s.hidden; }"
    )


# --------------------------------------------------------------------------- tests


def test_strip_on_a_throttled_h100(serve, pages):
    page = pages.open(serve(*gpu_page_doc()))
    wait_strip(page)

    # The step breakdown: one stacked bar, each segment as wide as its share of the step.
    bar = page.locator("[data-testid=eff-stack]").bounding_box()
    segs = page.eval_on_selector_all(
        "[data-testid=eff-seg]",
        "ss => ss.map(s => ({key: s.dataset.key, width: s.getBoundingClientRect().width}))",
    )
    assert [s["key"] for s in segs] == ["data", "forward", "optimizer", "other"]
    for s, share in zip(segs, (0.4, 0.3, 0.1, 0.2), strict=True):
        assert s["width"] == pytest.approx(bar["width"] * share, abs=2), s
    legend = page.inner_text("[data-testid=eff-step]")
    assert "Data wait 40 %" in legend and "Forward 30 %" in legend and "Optimizer 10 %" in legend
    summary = page.inner_text("[data-testid=eff-step-summary]")
    assert "85 ms per step" in summary and "120 steps" in summary

    # Clocks held down: the thermal reason is a problem, the power cap is neutral.
    assert "1200 of 1980 MHz" in page.inner_text("[data-testid=eff-clock]")
    reasons = page.eval_on_selector_all(
        "[data-testid=eff-reason]", "rs => rs.map(r => [r.dataset.reason, r.dataset.kind, r.textContent])"
    )
    assert ["hw_thermal_slowdown", "problem", "hardware thermal slowdown"] in reasons
    assert ["sw_power_cap", "neutral", "power cap"] in reasons
    problem_bg, neutral_bg = (
        page.eval_on_selector(f"[data-reason={r}]", "e => getComputedStyle(e).backgroundColor")
        for r in ("hw_thermal_slowdown", "sw_power_cap")
    )
    assert problem_bg != neutral_bg
    assert "350 of 700 W" in page.inner_text("[data-testid=eff-power]")
    assert "87 °C" in page.inner_text("[data-testid=eff-temp]")

    # The PCIe link trained below its maximum is flagged.
    pcie = page.locator("[data-testid=eff-pcie]")
    assert pcie.get_attribute("data-flag") == "bad"
    assert "Gen3 x16 of Gen5 x16" in pcie.inner_text() and "below its maximum" in pcie.inner_text()

    # GPM figures, and no "n/a" line since they are all there (traffic too).
    gpm = page.inner_text("[data-testid=eff-gpm]")
    assert "SM activity 62 %" in gpm.replace("\n", " ") and "SM occupancy 31 %" in gpm.replace("\n", " ")
    assert "Tensor cores" in gpm and "1.5 GB/s" in gpm
    assert page.locator("[data-testid=eff-gpm-na]").count() == 0

    # Precision, loader settings and host syncs.
    precision = page.inner_text("[data-testid=eff-precision]")
    assert "float32" in precision and "highest" in precision
    loader = page.inner_text("[data-testid=eff-loader]")
    assert "num_workers" in loader and "64" in loader and "[64, 3, 224, 224]" in loader
    assert "host syncs 3 per step" in page.inner_text("[data-testid=eff-step]").replace("\n", " ")

    # History: GPM SM activity and occupancy beside utilisation; power with its limit; no CPU charts.
    wait_js(
        page, "() => document.querySelectorAll('[data-testid=chart-util] [data-testid=series]').length === 3"
    )
    keys = page.eval_on_selector_all(
        "[data-testid=chart-util] [data-testid=series]", "ps => ps.map(p => p.dataset.key)"
    )
    assert keys == ["0", "0-sm-active", "0-sm-occupancy"]
    last = page.eval_on_selector(
        "[data-testid=chart-util] [data-key='0-sm-active']", "p => Number(p.dataset.last)"
    )
    assert last == pytest.approx(60)
    assert page.is_visible("[data-testid=chart-power]") and page.is_visible("[data-testid=chart-temp]")
    assert page.is_hidden("[data-testid=chart-cpu]")
    assert page.locator("[data-testid=process-row] [data-testid=sm]").inner_text() == "88 %"
    screenshot(page, "efficiency", element="[data-testid=efficiency]")
    screenshot(page, "efficiency-full", full_page=True)
    assert not pages.errors, pages.errors


def test_mig_gpu_without_gpm(serve, pages):
    main = main_process(
        [obj("ProcessGpu", index=0, mem_used_mib=4200.0, sm_util_pct=None, mig_index=1)], device="cuda:0"
    )
    page = pages.open(serve(status_doc([a100_mig()], [main]), history_doc(gpu=True)))
    wait_strip(page)
    # Per-process SM utilisation does not exist on MIG: said so, never a 0 %.
    assert page.locator("[data-testid=process-row] [data-testid=sm]").inner_text() == "n/a on MIG"
    assert "n/a on MIG" in page.inner_text("[data-testid=gpu-card] [data-testid=gpu-util]")
    assert page.inner_text("[data-testid=fact-util] dd") == "n/a on MIG"
    # The card lists the MIG instances, the job's process in its own.
    mig = page.locator("[data-testid=gpu-card] [data-testid=mig-device]")
    assert mig.count() == 2
    text = mig.nth(1).inner_text()
    assert "GI 2" in text and "pid 4242" in text and "4.1 GiB of 9.6 GiB" in text, text
    assert "pid" not in mig.nth(0).inner_text()
    # GPM fields are null: the strip says why, once.
    na = page.inner_text("[data-testid=eff-gpm-na]")
    assert na == f"GPM metrics n/a: {GPM_UNSUPPORTED}"
    assert page.locator("[data-testid=eff-gpm]").count() == 0
    assert "clocks not held down" in page.inner_text("[data-testid=eff-reasons]")
    assert page.locator("[data-testid=eff-pcie]").get_attribute("data-flag") is None
    screenshot(page, "mig", full_page=True)
    assert not pages.errors, pages.errors


def test_no_nvidia_gpu_charts_the_jobs_cpu(serve, pages):
    main = main_process([], device="cpu")
    page = pages.open(serve(status_doc([], [main], nvml_ok=False, model_gpu=None), history_doc(gpu=False)))
    wait_js(page, "() => Number(document.querySelector('[data-testid=chart-cpu] svg').dataset.points) >= 20")
    for name in ("cpu", "rss", "rate"):
        assert page.is_visible(f"[data-testid=chart-{name}]"), name
        assert page.locator(f"[data-testid=chart-{name}] .chart-empty").is_hidden(), name
    for name in ("mem", "util", "power", "temp"):
        assert page.is_hidden(f"[data-testid=chart-{name}]"), name
    cpu_last = page.eval_on_selector(
        "[data-testid=chart-cpu] [data-testid=series]", "p => Number(p.dataset.last)"
    )
    assert cpu_last == 169
    rss_last = page.eval_on_selector(
        "[data-testid=chart-rss] [data-testid=series]", "p => Number(p.dataset.last)"
    )
    assert rss_last == 2190
    rates = page.eval_on_selector_all(
        "[data-testid=chart-rate] [data-testid=series]", "ps => ps.map(p => p.dataset.key)"
    )
    assert rates == ["forward", "step"]
    assert page.is_visible("[data-testid=chart-cpu-note]")
    # The strip still shows what the probe knows (steps, precision, loader); no GPU block.
    wait_strip(page)
    assert page.locator("[data-testid=eff-gpu]").count() == 0
    assert page.locator("[data-testid=eff-seg]").count() == 4
    screenshot(page, "cpu-history", full_page=True)
    assert not pages.errors, pages.errors


def mi300x(index: int) -> dict:
    """An AMD GPU as the sidecar lists it after NVML's: amdgpu's figures in the same fields (its
    shader clock in sm_clock_mhz), no compute capability, no GPM, no clock reasons (amdgpu says none)."""
    return obj(
        "Gpu",
        index=index,
        vendor="amd",
        driver="amdgpu",
        name="AMD Instinct MI300X OAM",
        pci_bus_id="0000:0c:00.0",
        util_pct=87.0,
        mem_used_mib=77_824.0,
        mem_total_mib=196_592.0,
        sm_clock_mhz=2100,
        sm_clock_max_mhz=2100,
        mem_clock_mhz=1300,
        power_w=650.0,
        power_limit_w=750.0,
        temperature_c=61.0,
        clock_event_reasons=None,
    )


@pytest.mark.parametrize(("locale", "clock"), [("en-US", "GPU clock"), ("zh-CN", "GPU 时钟")])
def test_an_amd_gpus_strip_is_worded_as_its_card_never_with_nvidias_sm(serve, pages, locale, clock):
    """A ROCm job's model on the MI300X, GPU 1 beside NVIDIA's GPU 0: its block is headed as its card
    ("GPU 1 · AMD"), its clock is the GPU's, and no NVIDIA-only word (SM, compute capability) is in it."""
    main = main_process(
        [
            obj(
                "ProcessGpu",
                index=1,
                mem_used_mib=76_000.0,
                sm_util_pct=None,
                vendor="amd",
                pci_bus_id="0000:0c:00.0",
                unknown_reason="rocm-compute",
            )
        ],
        device="cuda:0",
    )
    nvidia = {**h100(), "framework_index": None}
    page = pages.open(
        serve(status_doc([nvidia, mi300x(1)], [main], model_gpu=1), history_doc(gpu=True)), locale=locale
    )
    wait_strip(page)
    block = page.locator("[data-testid=eff-gpu]")
    assert block.get_attribute("data-index") == "1"
    assert page.inner_text("[data-testid=eff-gpu] h3") == "GPU 1 · AMD"
    assert page.inner_text("[data-testid=eff-gpu] h3") == page.inner_text(
        "[data-testid=gpu-card][data-index='1'] .gpu-index"
    )
    assert clock in page.inner_text("[data-testid=eff-clock]") and "2100" in page.inner_text(
        "[data-testid=eff-clock]"
    )
    assert "SM" not in block.inner_text() and "compute capability" not in block.inner_text()
    assert not pages.errors, pages.errors


def test_strip_in_chinese(serve, pages):
    page = pages.open(serve(*gpu_page_doc()), locale="zh-CN")
    wait_strip(page)
    assert page.inner_text("[data-testid=efficiency] .block-title") == "效率"
    assert "等待数据 40 %" in page.inner_text("[data-testid=eff-step]")
    reason = page.inner_text("[data-reason=hw_thermal_slowdown]")
    assert reason == "硬件温控降频"
    assert "低于最大值" in page.inner_text("[data-testid=eff-pcie]")
    assert not pages.errors, pages.errors


def test_strip_fits_a_narrow_window(serve, pages):
    page = pages.open(serve(*gpu_page_doc()), width=420, height=900)
    wait_strip(page)
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"no horizontal scrolling on a 420 px window (overflow {overflow} px)"
    strip = page.locator("[data-testid=efficiency]").bounding_box()
    assert strip["x"] >= 0 and strip["x"] + strip["width"] <= 420
    screenshot(page, "efficiency-narrow", full_page=True)
    assert not pages.errors, pages.errors


def table_waits(page) -> dict[int, tuple[str, str | None]]:
    """Each process row's data wait: (its figure, the window it names)."""
    return {
        pid: tuple(cell)
        for pid, cell in page.eval_on_selector_all(
            "[data-testid=process-row]",
            """rs => rs.map(r => { const c = r.querySelector('[data-testid=data-wait]');
                const w = c.querySelector('[data-testid=data-wait-window]');
                return [Number(r.dataset.pid), [c.querySelector('[data-testid=data-wait-value]').textContent,
                                                w ? w.textContent : null]]; })""",
        )
    }


@pytest.mark.parametrize(
    ("locale", "bar", "main", "helper"),
    [
        ("en-US", "Data wait 40 % (last 10 s)", ("40 %", "last 10 s"), ("70 %", "last 12 batches")),
        ("zh-CN", "等待数据 40 %（最近 10 秒）", ("40 %", "最近 10 秒"), ("70 %", "最近 12 个批次")),
    ],
)
def test_the_bar_and_the_table_show_one_data_wait_each_named_by_its_window(
    serve, pages, locale, bar, main, helper
):
    page = pages.open(serve(*data_wait_doc()), locale=locale)
    wait_strip(page)
    wait_js(page, "() => document.querySelectorAll('[data-testid=process-row]').length === 2")
    legend = page.inner_text("[data-testid=eff-seg-label][data-key=data]")
    assert legend == bar
    # The main process's row: the bar's own figure and window, not its model's 90 % of other batches.
    assert table_waits(page) == {4242: main, 4343: helper}
    assert page.get_attribute("[data-testid=eff-seg][data-key=data]", "title") == bar
    screenshot(page, f"data-wait-{locale}", full_page=True)
    assert not pages.errors, pages.errors


def test_a_pod_no_kubelet_named_shows_its_container_id(serve, pages):
    """Issue 37 item 8: the cgroup's container id, with no kubelet to name the pod, is on the page
    where the pod is: its short form, the full id in the title."""
    cid = "0123456789ab" + "cd" * 26
    uid = "1f2e3d4c-5b6a-4980-a1b2-c3d4e5f60718"
    doc = status_doc([], [main_process([], device="cpu")], model_gpu=None)
    doc["pod"] = obj("Pod", uid=uid, container_id=cid, source="cgroup")
    page = pages.open(serve(doc, history_doc(gpu=False)))
    wait_js(page, "() => !!document.querySelector('[data-testid=fact-pod] dd')")
    dd = page.locator("[data-testid=fact-pod] dd")
    assert dd.inner_text() == f"unnamed pod {uid} · container 0123456789ab"
    assert dd.get_attribute("title") == f"pod UID {uid} · container id {cid}"
    assert not pages.errors, pages.errors
