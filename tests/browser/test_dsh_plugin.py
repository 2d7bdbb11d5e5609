"""The dsh-gpu-dashboard plugin inside a real DSH 0.1.0-rc.8 web workbench.

Each DSH boots from a fresh temporary DSH_HOME; the plugin goes in exactly as a user installs it
(`dsh plugin --profile web add <checkout>/dsh_plugin`), and its config is overridden in
$DSH_HOME/profiles/web/cordis.patch.yml. The data comes from the real sidecar
(`python -m sidecar.cli --pid PID --port 0 --interval 0.5 --stay`) watching real processes:
the browser conftest's GPU job (simulated NVIDIA driver) and, for the "sidecar down" case, a
sleeping child. Every process a test starts is stopped by its pid.

DSH itself is installed by scripts/install_dsh.sh into a reused cache directory (CI runs it
before the tests); these tests skip, saying why, only when that install is impossible here.
Screenshots go to dsh-*.png in a temporary folder (scripts/screenshots.sh: docs/screenshots).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.common.catalogue import render
from tests.helpers.dsh_env import (
    FAILED_TO_LOAD,
    PLUGIN_DIR,
    DshHome,
    DshWeb,
    Managed,
    get_json,
    node_binary,
    raw_get,
    start_dsh_web,
)
from tests.helpers.dsh_page import API, new_page, open_session, plugin_errors, shot, wait_for_panel
from tests.helpers.harness import METRICS_AT_ONCE, Sidecar, python_env, wait_for
from tests.helpers.other_users import NOBODY, get_as

pytestmark = [pytest.mark.browser, pytest.mark.dsh, pytest.mark.slow]

START_COMMANDS = ("dsh-sidecar --pid", "dsh-sidecar run -- python train.py")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def dsh_gpu(dsh_launcher: Path, gpu_stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DshWeb]:
    """DSH with the plugin, pointed at the real sidecar of the conftest's GPU job."""
    base = tmp_path_factory.mktemp("dsh-gpu")
    home = DshHome.create(base / "home", dsh_launcher)
    home.add_plugin()
    # a root sidecar makes a token of its own: the plugin is given it, as a user would give it
    home.write_plugin_config(sidecarUrl=gpu_stack.sidecar.url, token=gpu_stack.sidecar.token, timeoutMs=2000)
    web = start_dsh_web(home, base / "work")
    try:
        # Before it proxies, the plugin asks the configured URL once whether a sidecar answers there
        # (autostart's probe, up to timeoutMs): until then it answers 503 "sidecar-starting".
        wait_for(
            lambda: get_json(web.url, f"{API}/status")[1].get("error") != "sidecar-starting",
            15,
            0.2,
            "the plugin's probe of the configured sidecar",
        )
        yield web
    finally:
        web.stop()
        shutil.rmtree(base, ignore_errors=True)


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


# --------------------------------------------------------------------------- the plugin package


def test_plugin_unit_tests(dsh_launcher: Path) -> None:
    """The plugin's node tests: host half (loopback checks, config fallback, route table, proxy
    against a fake sidecar) and the browser half's pure parts (response classification, strings)."""
    files = sorted(glob.glob(str(PLUGIN_DIR / "test" / "*.test.mjs")))
    assert files, "dsh_plugin/test/*.test.mjs is missing"
    proc = subprocess.run(
        [str(node_binary(dsh_launcher)), "--test", *files],
        cwd=PLUGIN_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert re.search(r"^# fail 0$", proc.stdout, re.M), proc.stdout[-3000:]


def test_committed_bundle_matches_sources(dsh_launcher: Path) -> None:
    """dist/client.js (committed, so `dsh plugin add` works from a checkout) is what the sources
    and the shared sidecar/static/shared/format.js build to; rebuild with `npm run build` when it is not."""
    node = str(node_binary(dsh_launcher))
    if not (PLUGIN_DIR / "node_modules" / "esbuild").is_dir():
        npm = shutil.which("npm")
        assert npm, "npm is needed to install the plugin's build tool (esbuild)"
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=PLUGIN_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = subprocess.run(
        [node, "scripts/build.mjs", "--check"], cwd=PLUGIN_DIR, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bundle = (PLUGIN_DIR / "dist" / "client.js").read_text()
    assert "window.__ModuleLoader__.load" in bundle
    requires = set(re.findall(r"""\brequire\(\s*["']([^"']+)["']\s*\)""", bundle))
    assert requires <= {"react", "react/jsx-runtime"}, requires
    pkg = json.loads((PLUGIN_DIR / "package.json").read_text())
    patch = (PLUGIN_DIR / "cordis.patch.yml").read_text()
    assert re.search(rf"^\s+name: {re.escape(pkg['name'])}\s*$", patch, re.M), (
        "the patch row name must equal the package name"
    )
    assert pkg["exports"]["./package.json"] == "./package.json"


# --------------------------------------------------------------------------- host half in DSH


def test_proxy_forwards_to_the_real_sidecar(dsh_gpu: DshWeb, gpu_stack) -> None:
    code, doc = get_json(dsh_gpu.url, f"{API}/status")
    assert code == 200, doc
    direct = gpu_stack.sidecar.status()
    assert doc["schema"] == direct["schema"] == 2
    assert doc["status"] == direct["status"] == "GPU"
    assert {p["pid"] for p in doc["processes"]} == {p["pid"] for p in direct["processes"]}
    assert gpu_stack.pid("main") in {p["pid"] for p in doc["processes"]}

    status, headers, body = raw_get(dsh_gpu.url, f"{API}/status", method="HEAD")
    assert status == 200 and body == b"" and "json" in headers["content-type"]

    code, hist = get_json(dsh_gpu.url, f"{API}/history?since=not-a-number")
    assert code == 200 and hist["schema"] == 2 and isinstance(hist["samples"], list)
    wait_for(
        lambda: len(get_json(dsh_gpu.url, f"{API}/history")[1]["samples"]) >= 2,
        15,
        0.5,
        "two history samples",
    )
    samples = get_json(dsh_gpu.url, f"{API}/history")[1]["samples"]
    cut = samples[-2]["time_unix_s"]
    code, newer = get_json(dsh_gpu.url, f"{API}/history?since={cut}")
    assert code == 200
    assert newer["samples"] and all(s["time_unix_s"] > cut for s in newer["samples"])

    code, cfg = get_json(dsh_gpu.url, f"{API}/config")
    assert code == 200
    assert cfg["sidecarUrl"] == gpu_stack.sidecar.url and cfg["warnings"] == [] and cfg["tokenSet"] is True


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_proxy_serves_only_dshs_own_user(dsh_gpu: DshWeb) -> None:
    """DSH rc.8 has no login: another local user's curl to DSH's port gets none of the sidecar's
    data (nor the config), a 403 saying why; DSH's own user (root here) is served."""
    for path in ("/status", "/jobs", "/history", "/config", "/jobs?session=s1"):
        code, body = get_as(NOBODY, f"{dsh_gpu.url}{API}{path}")
        assert code == 403 and body["error"] == "forbidden-user", (path, code, body)
        assert f"uid {NOBODY}" in body["detail"] and "DSH's own user" in body["detail"], body
        assert get_json(dsh_gpu.url, f"{API}{path}")[0] == 200, path


def test_proxy_refuses_foreign_host_and_unknown_paths(dsh_gpu: DshWeb) -> None:
    for host in (
        "evil.example",
        f"evil.example:{dsh_gpu.port}",
        f"127.0.0.1.nip.io:{dsh_gpu.port}",
        "10.0.0.1",
    ):
        code, body = get_json(dsh_gpu.url, f"{API}/status", host=host)
        assert code == 403, (host, body)
        assert body["error"] == "forbidden"
    code, body = get_json(dsh_gpu.url, f"{API}/status", headers={"Origin": "https://evil.example"})
    assert code == 403, body
    for method in ("POST", "PUT", "DELETE"):
        code, body = get_json(dsh_gpu.url, f"{API}/status", method=method)
        assert code == 405, (method, body)
    for path in (
        f"{API}/healthz",
        f"{API}/metrics",
        f"{API}/version",
        f"{API}/status/extra",
        f"{API}/http://example.com/",
        f"{API}/?url=http://127.0.0.1:1/",
        "/dsh-gpu-dashboard/static/index.html",
    ):
        code, body = get_json(dsh_gpu.url, path)
        assert code == 404, (path, code, body)
        assert isinstance(body, dict) and body["error"] == "not-found", (path, body)
    # Dot segments: DSH's router resolves them before routing, so these land outside the plugin's
    # prefix (DSH's own page) or on its 404 -- never on the sidecar.
    for path in (
        f"{API}/%2e%2e/%2e%2e/metrics",
        f"{API}/../../api/dsh-gpu-dashboard/status",
        f"{API}/status/../../../metrics",
    ):
        code, headers, body = raw_get(dsh_gpu.url, path)
        if "json" in headers.get("content-type", ""):
            assert code == 404 and json.loads(body)["error"] == "not-found", (path, code, body[:300])
        else:
            assert b'"schema"' not in body and b"dsh_gpu" not in body, (path, code, body[:300])


def test_bad_config_falls_back_to_defaults_with_a_warning(dsh_launcher: Path, tmp_path: Path) -> None:
    """Invalid config exits rc.8's dsh process unless the plugin absorbs it: DSH must still serve."""
    home = DshHome.create(tmp_path / "home", dsh_launcher)
    home.add_plugin()
    home.write_plugin_config(sidecarUrl="http://example.com:8765", token=5, timeoutMs="soon")
    with start_dsh_web(home, tmp_path / "work") as web:
        code, cfg = get_json(web.url, f"{API}/config")
        assert code == 200, cfg
        assert cfg["sidecarUrl"] == "http://127.0.0.1:8765"
        assert cfg["timeoutMs"] == 2000 and cfg["tokenSet"] is False
        assert len(cfg["warnings"]) == 3, cfg["warnings"]
        assert any("loopback" in w for w in cfg["warnings"])
        status, headers, _ = raw_get(web.url, "/")
        assert status == 200 and "text/html" in headers["content-type"]
        wait_for(
            lambda: re.search(r"dsh-gpu-dashboard: config: sidecarUrl .*example\.com.* loopback", web.log()),
            10,
            0.2,
            "the config warning in the dsh web output",
        )
        assert web.process.proc.poll() is None, web.log()


# --------------------------------------------------------------------------- browser half in DSH


def test_chip_glance_view_and_settings_show_the_sidecar_data(chromium, dsh_gpu: DshWeb, gpu_stack) -> None:
    doc = gpu_stack.sidecar.status()
    errors: list[str] = []
    ctx, page = new_page(chromium, dsh_gpu.url, errors)
    try:
        chip = wait_for_panel(page)
        page.wait_for_selector('[data-testid="dsh-gpu-chip"][data-state="ok"]')
        assert chip.get_attribute("data-status") == doc["status"] == "GPU"
        assert chip.locator('[data-testid="dsh-gpu-chip-status"]').inner_text() == "GPU"
        assert re.fullmatch(r"\d+(\.\d)? %", chip.locator('[data-testid="dsh-gpu-chip-util"]').inner_text())
        # DSH's own UI is all there beside it
        assert page.get_by_role("button", name="Settings").count() >= 1
        assert page.get_by_text("New Session").count() >= 1

        # glance card
        chip.click()
        glance = page.locator('[data-testid="dsh-gpu-glance"]')
        glance.wait_for()
        text = glance.inner_text()
        assert doc["message"] in text
        assert glance.locator('[data-testid="dsh-gpu-badge"]').get_attribute("data-status") == "GPU"
        # the two simulated NVIDIA GPUs and the fake sysfs's Intel iGPU, a card of its own (issue 41)
        assert glance.locator('[data-testid="dsh-gpu-glance-gpu"]').count() == len(doc["gpus"]) == 3
        assert [g["vendor"] for g in doc["gpus"]] == ["nvidia", "nvidia", "intel"]
        for g in doc["gpus"]:
            assert g["name"] in text
        first_warning = sorted(
            doc["warnings"], key=lambda w: ["error", "warning", "info"].index(w["severity"])
        )
        if first_warning:
            assert first_warning[0]["message"] in text
        # the card floats above the page without hiding the chip
        gbox, cbox = glance.bounding_box(), chip.bounding_box()
        assert gbox["y"] + gbox["height"] <= cbox["y"] + 1
        page.mouse.move(0, 0)
        shot(page, "glance")
        page.keyboard.press("Escape")
        glance.wait_for(state="detached")

        # the GPU view inside a session
        open_session(page)
        view = page.locator('[data-testid="dsh-gpu-view"]')
        view.wait_for()
        # The tab shows the job once the session's job list has answered, the job is chosen from it
        # and its status fetched (choosing starts the status afresh): wait for that, not for the
        # first "ok", which may be the status fetched before the job was chosen.
        job = doc["job_id"]
        page.wait_for_selector(
            f'[data-testid="dsh-gpu-view"][data-state="ok"][data-selected-job="{job}"][data-job-id="{job}"]'
        )
        assert view.locator('[data-testid="dsh-gpu-badge"]').first.get_attribute("data-status") == "GPU"
        assert view.locator('[data-testid="dsh-gpu-card"]').count() == len(doc["gpus"])
        # the Intel iGPU is a card (above), never listed again as a device CUDA cannot use
        assert view.locator('[data-testid="dsh-gpu-card"][data-vendor="Intel"]').count() == 1
        assert view.locator('[data-testid="dsh-gpu-igpu"]').count() == 0
        rows = view.locator('[data-testid="dsh-gpu-process"]')
        pids = {int(rows.nth(i).get_attribute("data-pid")) for i in range(rows.count())}
        assert {gpu_stack.pid("main"), gpu_stack.pid("worker0"), gpu_stack.pid("worker1")} <= pids
        main_row = view.locator(f'[data-testid="dsh-gpu-process"][data-pid="{gpu_stack.pid("main")}"]')
        assert "resnet18" in main_row.inner_text() and "cuda:0" in main_row.inner_text()
        # history charts draw the sidecar's samples (one series per GPU)
        page.wait_for_function(
            """() => document.querySelectorAll('[data-testid="dsh-gpu-chart-util-body"] path.series').length >= 2
                  && document.querySelectorAll('[data-testid="dsh-gpu-chart-mem-body"] path.series').length >= 2"""
        )
        assert "train_start" in view.locator('[data-testid="dsh-gpu-events"]').inner_text()
        assert "tests.helpers.fake_job" in main_row.inner_text()  # argv joined with spaces
        view.locator('[data-testid="dsh-gpu-window-60"]').click()
        assert view.locator('[data-testid="dsh-gpu-window-60"]').get_attribute("aria-pressed") == "true"
        page.set_viewport_size({"width": 1400, "height": 1500})
        time.sleep(0.5)
        page.mouse.move(0, 0)
        shot(page, "view")
        page.set_viewport_size({"width": 1400, "height": 900})

        # settings section
        page.get_by_role("button", name="Settings").first.click()
        page.get_by_text("GPU dashboard", exact=True).last.click()
        settings = page.locator('[data-testid="dsh-gpu-settings"]')
        settings.wait_for()
        page.wait_for_selector('[data-testid="dsh-gpu-connection"][data-state="ok"]')
        assert settings.locator('[data-testid="dsh-gpu-connection-state"]').inner_text() == "Connected"
        assert gpu_stack.sidecar.url in settings.locator('[data-testid="dsh-gpu-effective-url"]').inner_text()
        assert "$DSH_HOME/profiles/web/cordis.patch.yml" in settings.inner_text()
        settings.locator('[data-testid="dsh-gpu-url-input"]').fill("http://127.0.0.1:9999")
        yaml = settings.locator('[data-testid="dsh-gpu-yaml"]').inner_text()
        assert "- id: dsh-gpu-dashboard" in yaml and "sidecarUrl: http://127.0.0.1:9999" in yaml
        assert gpu_stack.sidecar.url in settings.locator('[data-testid="dsh-gpu-url-differs"]').inner_text()
        settings.locator('[data-testid="dsh-gpu-refresh-input"]').fill("5")
        settings.locator('[data-testid="dsh-gpu-save"]').click()
        stored = json.loads(page.evaluate("() => localStorage.getItem('dsh-gpu-dashboard.settings')"))
        assert stored["refreshS"] == 5 and stored["sidecarUrl"] == "http://127.0.0.1:9999"
        page.mouse.move(0, 0)
        shot(page, "settings")

        assert page.locator('[data-testid="dsh-gpu-error"]').count() == 0
        assert not plugin_errors(errors), errors
        assert FAILED_TO_LOAD not in page.inner_text("body")
    finally:
        ctx.close()


def test_sidecar_down_dsh_still_boots_and_the_panel_says_unreachable(
    chromium, dsh_launcher: Path, tmp_path: Path
) -> None:
    # A real sidecar on a real (sleeping) process, then stopped: its port is closed from here on.
    child = Managed.start("sleeping job", ["sleep", "600"], env=python_env(), cwd=tmp_path)
    try:
        sidecar = Sidecar(["--pid", str(child.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.5", "--stay"])
        try:
            url = sidecar.url
            sidecar.wait_status(lambda d: d["status"] in ("UNKNOWN", "CPU"), what="a first verdict")
        finally:
            sidecar.stop()
        port = int(url.rsplit(":", 1)[1])
        wait_for(lambda: port_closed(port), 10, 0.2, "the sidecar's port to close")

        home = DshHome.create(tmp_path / "home", dsh_launcher)
        home.add_plugin()
        home.write_plugin_config(sidecarUrl=url, token=None, timeoutMs=1000, autostart=False)
        with start_dsh_web(home, tmp_path / "work") as web:
            code, body = get_json(web.url, f"{API}/status")
            assert code == 502, body
            assert body["error"] == "sidecar-unreachable" and body["url"] == url
            assert all(c in body["hint"] for c in START_COMMANDS)

            errors: list[str] = []
            ctx, page = new_page(chromium, web.url, errors)
            try:
                chip = wait_for_panel(page)
                page.wait_for_selector('[data-testid="dsh-gpu-chip"][data-state="unreachable"]')
                assert "no sidecar" in chip.inner_text()
                assert page.get_by_role("button", name="Settings").count() >= 1
                chip.click()
                card = page.locator('[data-testid="dsh-gpu-glance"] [data-testid="dsh-gpu-unreachable"]')
                card.wait_for()
                text = card.inner_text()
                assert "Sidecar unreachable" in text
                assert all(c in text for c in START_COMMANDS), text
                assert url in text
                page.mouse.move(0, 0)
                shot(page, "unreachable")

                page.keyboard.press("Escape")

                # a sidecar that comes back (here: a new one with a token, wired in through the
                # user patch, which DSH hot-reloads) turns the chip green without a page reload
                token = "t0ken-for-the-test"
                sidecar2 = Sidecar(
                    ["--pid", str(child.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.5", "--stay", "--token", token],
                    token=token,
                )
                try:
                    sidecar2.wait_status(lambda d: True, what="a first poll")
                    home.write_plugin_config(
                        sidecarUrl=sidecar2.url, token=token, timeoutMs=1000, autostart=False
                    )
                    try:
                        page.wait_for_selector(
                            '[data-testid="dsh-gpu-chip"][data-state="ok"]', timeout=30_000
                        )
                    except Exception as exc:
                        raise AssertionError(
                            f"chip not ok after the config change: config={get_json(web.url, f'{API}/config')}"
                            f" status={get_json(web.url, f'{API}/status')[0]}"
                            f" chip={chip.get_attribute('data-state')} sidecar2={sidecar2.url}"
                        ) from exc
                    assert chip.get_attribute("data-status") in ("UNKNOWN", "CPU")
                    code, doc = get_json(web.url, f"{API}/status")
                    assert code == 200 and doc["target"]["pid"] == child.pid, doc
                    # the token really is needed: without it the sidecar refuses
                    code, _ = get_json(sidecar2.url, "/api/dsh-gpu-dashboard/status")
                    assert code == 401
                finally:
                    sidecar2.stop()

                # ... and one that dies while DSH runs turns it back, in the chip and in a session
                page.wait_for_selector(
                    '[data-testid="dsh-gpu-chip"][data-state="unreachable"]', timeout=30_000
                )
                open_session(page)
                page.locator('[data-testid="dsh-gpu-view"] [data-testid="dsh-gpu-unreachable"]').wait_for()
                page.get_by_role("tab", name="Chat").first.click()
                page.locator('[data-testid="dsh-gpu-view"]').wait_for(state="detached")
                assert page.locator('[data-testid="dsh-gpu-error"]').count() == 0
                assert not plugin_errors(errors), errors
                assert web.process.proc.poll() is None, web.log()
            finally:
                ctx.close()
    finally:
        child.stop()


def test_follows_dsh_language_and_dark_theme(chromium, dsh_gpu: DshWeb, gpu_stack) -> None:
    doc = gpu_stack.sidecar.status()
    errors: list[str] = []
    ctx = chromium.new_context(viewport={"width": 1400, "height": 900}, locale="zh-CN", color_scheme="dark")
    try:
        page = ctx.new_page()
        page.set_default_timeout(20_000)
        page.goto(dsh_gpu.url)
        chip = wait_for_panel(page)
        page.wait_for_selector('[data-testid="dsh-gpu-chip"][data-state="ok"]')
        assert page.evaluate("document.documentElement.lang").startswith("zh")
        chip.click()
        glance = page.locator('[data-testid="dsh-gpu-glance"]')
        glance.wait_for()
        text = glance.inner_text()
        message_zh = render(doc["message_ref"], "zh")
        assert message_zh and message_zh != doc["message"] and message_zh in text
        ranked = sorted(doc["warnings"], key=lambda w: ["error", "warning", "info"].index(w["severity"]))
        if ranked:  # warnings are translated too, from their references
            warning_zh = render(ranked[0]["message_ref"], "zh")
            assert warning_zh != ranked[0]["message"] and warning_zh in text, (warning_zh, text)
        assert "在 GPU 上" in text  # status.GPU from the shared zh catalogue
        # theme variables: the card is dark when DSH is dark
        bg = page.evaluate(
            "() => getComputedStyle(document.querySelector('[data-testid=dsh-gpu-glance]')).backgroundColor"
        )
        rgb = [int(x) for x in re.findall(r"\d+", bg)[:3]]
        assert sum(rgb) / 3 < 100, bg
        page.mouse.move(0, 0)
        shot(page, "glance-zh-dark")
        assert not plugin_errors(errors), errors
    finally:
        ctx.close()


def test_a_broken_bundle_shows_an_error_card_and_dsh_still_works(
    chromium, dsh_launcher: Path, tmp_path: Path
) -> None:
    """The module body is wrapped: if it throws, DSH still boots and the panel says what broke."""
    broken = tmp_path / "dsh_plugin_broken"
    shutil.copytree(PLUGIN_DIR, broken, ignore=shutil.ignore_patterns("node_modules", "test"))
    bundle = broken / "dist" / "client.js"
    marker = "// ---- esbuild output"
    text = bundle.read_text()
    assert marker in text
    bundle.write_text(text.replace(marker, 'throw new Error("simulated plugin failure")\n' + marker, 1))

    home = DshHome.create(tmp_path / "home", dsh_launcher)
    home.add_plugin(broken)
    home.write_plugin_config(sidecarUrl="http://127.0.0.1:9", token=None, timeoutMs=500)
    with start_dsh_web(home, tmp_path / "work") as web:
        errors: list[str] = []
        ctx, page = new_page(chromium, web.url, errors)
        try:
            card = wait_for_panel(page, "dsh-gpu-error")
            assert "simulated plugin failure" in (card.get_attribute("title") or "") + card.inner_text()
            assert page.get_by_role("button", name="Settings").count() >= 1
            assert page.get_by_text("New Session").count() >= 1
            assert page.locator('[data-testid="dsh-gpu-chip"]').count() == 0
            assert FAILED_TO_LOAD not in page.inner_text("body")
        finally:
            ctx.close()
