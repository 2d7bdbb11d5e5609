"""Issue 39 item 2: the README's DSH path, as a user on a fresh DSH home walks it.

`"$DSH" web  # from your project's folder: its workspace`. DSH 0.1.0-rc.8 has no flag or variable
for a workspace: its page creates sessions only in a registered workspace, a fresh home has none,
and its folder browser opens at the home folder, so a user who picked that saw every job of the
project "not linked to this session". The plugin registers the launch folder (host/workspace.js).

Here HOME is a folder of its own (tests/helpers/dsh_env.py start_dsh_web), the project folder holds
one live training job and many that have exited (as a day of runs leaves them), and the sidecar is
the one the plugin starts itself. Without a click on any workspace picker, the session's GPU tab
lists the live job first, linked through the workspace, with the exited ones collapsed under
"Exited jobs (N)"; the chip counts only live jobs; the glance card shows the live job.
"""

from __future__ import annotations

import shutil
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.fakenvml import gpu
from tests.helpers.dashboard_stack import GPU_NAMES
from tests.helpers.dsh_env import DshHome, DshWeb, get_json, start_dsh_web
from tests.helpers.dsh_jobs import SIDECAR_BIN, closed_port, cpu_model_job, simulated_gpu_env, wait_running
from tests.helpers.dsh_page import API, new_page, open_session, plugin_errors, shot, wait_for_panel
from tests.helpers.harness import FakeJob, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.dsh, pytest.mark.slow]

EXITED_JOBS = 8  # enough that the live job would sit below a screenful of rows if it were not first


@dataclass
class Launched:
    web: DshWeb
    project: Path
    user_home: Path
    live: FakeJob
    exited_ids: list[str]


def listed(web: DshWeb) -> dict[int, dict[str, Any]]:
    """The jobs of the plugin's /jobs (every job of the user), by root pid."""
    code, body = get_json(web.url, f"{API}/jobs")
    return {j["root_pid"]: j for j in body.get("jobs", [])} if code == 200 else {}


def exited_jobs(web: DshWeb, base: Path, project: Path, n: int) -> list[str]:
    """`n` jobs started in the project folder, each seen running by the sidecar, then stopped: their
    ids once /jobs lists every one of them as exited."""
    jobs = [cpu_model_job(base / f"exited-{i}", project) for i in range(n)]
    try:
        pids = {j.pid for j in jobs}
        wait_for(lambda: pids <= set(listed(web)), 60, 0.3, f"the {n} short jobs in /jobs")
    finally:
        for j in jobs:
            j.stop()

    def all_exited() -> list[str] | None:
        rows = listed(web)
        done = [rows[p] for p in pids if p in rows and rows[p].get("alive") is False]
        return [r["id"] for r in done] if len(done) == len(pids) else None

    ids: list[str] = wait_for(all_exited, 60, 0.3, f"the {n} short jobs listed as exited")
    return ids


@pytest.fixture(scope="module")
def launched(dsh_launcher: Path, fake_nvml_lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    if not SIDECAR_BIN.exists():
        pytest.skip(f"{SIDECAR_BIN} is not installed (pip install -e .)")
    base = tmp_path_factory.mktemp("dsh-workspace")
    project = base / "project"
    project.mkdir()
    nvml, gpu_env, sysfs_args = simulated_gpu_env(base, fake_nvml_lib_dir)
    nvml.write({"driver_version": "550.54.15", "cuda_driver_version": 12040,
                "gpus": [gpu(0, name=GPU_NAMES[0], util_gpu=0, memory_used_mib=0)]})
    home = DshHome.create(base / "dsh-home", dsh_launcher)  # fresh: no workspace, no session yet
    home.add_plugin()
    home.write_plugin_config(
        sidecarUrl=f"http://127.0.0.1:{closed_port()}", token=None, timeoutMs=2000,
        sidecarCommand=str(SIDECAR_BIN), sidecarArgs=["--interval", "0.5", *sysfs_args],
    )
    web = None
    live = None
    try:
        web = start_dsh_web(home, project, extra_env=gpu_env)
        wait_running(web)
        # the live job first: every exited one started after it, so newest-first alone would bury it
        live = cpu_model_job(base / "live", project)
        wait_for(lambda: live.pid in listed(web), 60, 0.3, "the live job in /jobs")
        ids = exited_jobs(web, base, project, EXITED_JOBS)
        yield Launched(web, project.resolve(), home.path / "user-home", live, ids)
    finally:
        if web is not None:
            web.stop()
        if live is not None:
            live.stop()
        shutil.rmtree(base, ignore_errors=True)


def session_of_requests(page: Page, sessions: list[str]) -> None:
    """Record the session id of every /jobs?session= request the page makes."""
    page.on(
        "request",
        lambda r: sessions.extend(urllib.parse.parse_qs(urllib.parse.urlparse(r.url).query).get("session", []))
        if f"{API}/jobs" in r.url
        else None,
    )


def test_dsh_web_from_the_project_folder_makes_it_the_sessions_workspace(chromium: Browser, launched: Launched) -> None:
    web = launched.web
    assert not launched.user_home.resolve().is_relative_to(launched.project)
    assert not launched.project.is_relative_to(launched.user_home.resolve())
    errors: list[str] = []
    sessions: list[str] = []
    ctx, page = new_page(chromium, web.url, errors)
    session_of_requests(page, sessions)
    try:
        wait_for_panel(page)
        # the New Session DSH opens is in the project folder: its workspace chip (the button that
        # opens the picker) names it; without a workspace it would read "Choose workspace"
        chip = page.get_by_role("button", name="Choose workspace").first
        wait_for(lambda: chip.inner_text().strip() == "project", 30, 0.3, "the workspace chip to name the project")
        open_session(page)  # types the message: fails if DSH asks to choose a workspace
        row = page.locator(f'[data-testid="dsh-gpu-session-job"][data-job-id="{launched_id(launched)}"]')
        row.wait_for(timeout=30_000)
        assert row.get_attribute("data-link") == "workspace"
        sid = wait_for(lambda: sessions and sessions[-1], 10, 0.2, "the session's /jobs request")
        code, mine = get_json(web.url, f"{API}/jobs?session={urllib.parse.quote(sid)}")
        assert code == 200 and mine["session"] == {"id": sid, "workspaces": [str(launched.project)], "from": "session"}
        assert page.locator('[data-testid="dsh-gpu-session-empty"]').count() == 0
        shot(page, "workspace-session")
        # issue 40: the session's runs (each job here was recorded), the newest first, compared with the one before
        code, recorded = get_json(web.url, f"{API}/runs?session={urllib.parse.quote(sid)}")
        assert code == 200 and {launched_id(launched), *launched.exited_ids} <= {r["job_id"] for r in recorded["runs"]}
        assert all(r["cwd"].startswith(str(launched.project)) for r in recorded["runs"]), recorded["runs"]
        runs = page.locator('[data-testid="dsh-gpu-run"]')
        wait_for(lambda: runs.count() == len(recorded["runs"]), 30, 0.3, "the session's runs in the GPU tab")
        # each job here runs its own script (another command): none has a previous run, as the tab says
        newest = runs.first.get_attribute("data-run-id")
        code, refusal = get_json(web.url, f"{API}/compare?a={newest}")
        assert code == 404 and "no earlier run of the same command in the same folder" in refusal["error"], refusal
        runs.first.locator('[data-testid="dsh-gpu-run-compare"]').click()
        said = page.locator('[data-testid="dsh-gpu-compare-error"]')
        said.wait_for(timeout=15_000)
        assert said.inner_text().startswith("Cannot compare: ") and "no earlier run" in said.inner_text()
        assert not plugin_errors(errors), errors
    finally:
        ctx.close()
    # the plugin says what it registered (the settings page and a failure's message show it)
    code, cfg = get_json(web.url, f"{API}/config")
    assert code == 200 and cfg["launchWorkspace"] is True, cfg
    assert cfg["workspace"] == {"state": "registered", "path": str(launched.project), "detail": None}, cfg


def launched_id(launched: Launched) -> str:
    job_id: str = listed(launched.web)[launched.live.pid]["id"]
    return job_id


ROWS = """() => {
  const tab = document.querySelector('[data-testid="dsh-gpu-session-jobs"]');
  if (!tab) return null;
  const exited = tab.querySelector('[data-testid="dsh-gpu-session-exited"]');
  return {
    rows: [...tab.querySelectorAll('[data-testid="dsh-gpu-session-job"]')].map((r) => ({
      id: r.dataset.jobId, link: r.dataset.link, visible: r.checkVisibility() })),
    exitedCount: exited ? Number(exited.dataset.count) : 0,
    exitedOpen: exited ? exited.open : null,
    exitedLabel: exited ? exited.querySelector('summary').textContent : '',
  };
}"""


def test_the_live_job_comes_first_and_the_chip_counts_live_jobs(chromium: Browser, launched: Launched) -> None:
    web = launched.web
    live_id = launched_id(launched)
    errors: list[str] = []
    ctx, page = new_page(chromium, web.url, errors)
    try:
        wait_for_panel(page)
        open_session(page)
        shown = wait_for(
            lambda: (v := page.evaluate(ROWS)) and v["exitedCount"] >= EXITED_JOBS and v,
            30, 0.3, f"the session's jobs with {EXITED_JOBS} exited ones",
        )
        # the live job first, linked through the workspace, the one the tab shows
        assert shown["rows"][0] == {"id": live_id, "link": "workspace", "visible": True}, shown
        page.locator(f'[data-testid="dsh-gpu-view"][data-selected-job="{live_id}"]').wait_for(timeout=30_000)
        # every exited job of the project below, collapsed under "Exited jobs (N)"
        assert shown["exitedOpen"] is False, shown
        assert shown["exitedLabel"] == f"Exited jobs ({shown['exitedCount']})", shown
        hidden = [r["id"] for r in shown["rows"] if not r["visible"]]
        assert set(launched.exited_ids) <= set(hidden), shown
        assert live_id not in hidden
        shot(page, "session-jobs")  # docs/dsh-plugin.md: the user's live job first, the exited ones collapsed

        # the chip counts the live jobs of the user (other tests' may come and go: read both at once)
        chip = page.locator('[data-testid="dsh-gpu-chip-jobs"]')

        def counts() -> tuple[int, int, int] | None:
            rows = listed(web)
            live = sum(1 for j in rows.values() if j.get("alive") is not False)
            n = int(chip.get_attribute("data-count") or -1)
            return (n, live, len(rows)) if n == live else None

        n, live, total = wait_for(counts, 30, 0.5, "the chip's count to equal the live jobs in /jobs")
        assert n >= 1 and total >= n + EXITED_JOBS, (n, live, total)

        # the glance card opens on the job the session shows: the live one
        page.locator('[data-testid="dsh-gpu-chip"]').click()
        glance = page.locator('[data-testid="dsh-gpu-glance"]')
        glance.wait_for()
        page.wait_for_function(
            """([pid]) => { const g = document.querySelector('[data-testid="dsh-gpu-glance"]');
                           return g && g.innerText.includes(`PID ${pid}`) }""",
            arg=[str(launched.live.pid)],
            timeout=30_000,
        )
        shot(page, "workspace-exited-jobs")
        assert not plugin_errors(errors), errors
    finally:
        ctx.close()
