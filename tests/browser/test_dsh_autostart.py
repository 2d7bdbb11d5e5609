"""DSH without a terminal (issue 14): the plugin starts and supervises the sidecar itself.

Real DSH 0.1.0-rc.8 from a fresh DSH_HOME, the plugin added as a user adds it, and NO sidecar
running: nothing answers at the configured URL. The plugin must then start `dsh-sidecar` itself
(a real process, found here through /proc), show a job started under the session's workspace in
the session's GPU tab and in the chip, restart the sidecar after a kill -9, say how to install it
when the command is missing, answer the agent tool `gpu_status` through DSH's own tool pipeline
(`ctx.tools.execute`, run by the test-only host plugin tests/browser/dsh_tool_runner), and stop
the sidecar when DSH stops.

The sidecar runs in discovery mode (no --pid: every job of the user), so the session's GPU tab
must pick its jobs: one started under the workspace, one whose environment carries the session's
DSH_SESSION_ID (what DSH's shell tool gives every command it runs), and not one started elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.fakenvml import gpu
from tests.helpers.browser import scroll_into_view
from tests.helpers.dashboard_stack import GPU_NAMES
from tests.helpers.dsh_env import REPO, TOOL_RUNNER_DIR, DshHome, DshWeb, get_json, start_dsh_web
from tests.helpers.dsh_jobs import (
    SIDECAR_BIN,
    closed_port,
    cpu_model_job,
    managed_sidecar,
    simulated_gpu_env,
    wait_running,
)
from tests.helpers.dsh_page import API, new_page, open_session, plugin_errors, shot, wait_for_panel
from tests.helpers.fake_prometheus import FakePrometheus, two_nodes_and_a_silent_one
from tests.helpers.harness import API as API_SIDECAR
from tests.helpers.harness import FakeJob, Sidecar, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.dsh, pytest.mark.slow]


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, IndexError, ValueError):
            break
        out.append(pid)
    return out


def run_tool(web: DshWeb, name: str, args: dict) -> dict:
    q = urllib.parse.urlencode({"name": name, "args": json.dumps(args)})
    code, body = get_json(web.url, f"/dsh-gpu-test-tools/execute?{q}", timeout_s=30)
    assert code == 200, body
    return body


def _text_of(message: dict) -> str:
    """A chat message's text, whether its content is a string or a list of parts."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return str(content)


def _tool_call(call_id: str, name: str, args: dict) -> list[dict]:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": usage},
    ]


def _say(text: str) -> list[dict]:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
    ]


# The completion notice DSH's tool-jobs gives the owner of a background job that finished.
NOTICE = re.compile(r"background job (gpu-watch-\d+) \(gpu-watch: [^)]*\) finished")


class FakeLlm:
    """A DeepSeek-compatible chat endpoint on loopback (POST /chat/completions, SSE). A request that
    offers the gpu_status tool and has no tool result yet gets a call of it; the next one (with the
    result) a short answer; any other request (the session title) a word. A session whose first
    message asks to watch (with `watch_job` set) gets a call of gpu_watch, then, once DSH brings the
    watch's completion notice, a call of job_output with its id. Every request is kept."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.watch_job: str | None = None  # the job a session asked to watch has the model watch
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                llm.requests.append(body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in llm.answer(body):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> list[dict]:
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        messages = body.get("messages") or []
        first = next((_text_of(m) for m in messages if m.get("role") == "user"), "")
        if self.watch_job and "gpu_watch" in tools and "watch" in first:
            return self._watching(messages)
        answered = any(m.get("role") == "tool" for m in messages)
        if "gpu_status" in tools and not answered:
            return _tool_call("call_gpu_1", "gpu_status", {})
        return _say("Your model is on the CPU: move it with model.to('cuda')." if answered else "GPU check")

    def _watching(self, messages: list[dict]) -> list[dict]:
        done = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
        if "call_watch_1" not in done:
            return _tool_call("call_watch_1", "gpu_watch", {"job": self.watch_job, "until": "end"})
        notice = next((n for m in messages if m.get("role") == "user" and (n := NOTICE.search(_text_of(m)))), None)
        if notice is None:
            return _say("I will be told when the job ends.")
        if "call_watch_output_1" not in done:
            return _tool_call("call_watch_output_1", "job_output", {"job_id": notice.group(1)})
        return _say("The job ended.")

    def tool_results(self, call_id: str = "call_gpu_1") -> list[str]:
        return [
            _text_of(m)
            for body in self.requests
            for m in body.get("messages") or []
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]

    def notices(self) -> list[str]:
        """The completion notices DSH brought the model, each once."""
        found = (_text_of(m) for body in self.requests for m in body.get("messages") or [] if m.get("role") == "user")
        return list(dict.fromkeys(t for t in found if NOTICE.search(t)))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Autostarted:
    web: DshWeb
    job: FakeJob
    other: FakeJob
    workspace: Path
    home: DshHome
    base: Path
    llm: FakeLlm
    prometheus: FakePrometheus


# Rank 0 of the Prometheus's run-7 (two_nodes_and_a_silent_one): a job of four ranks across nodes.
RANK_0_OF_RUN_7 = {"role": "rank", "rank": 0, "local_rank": 0, "world_size": 4, "job_key": "run-7", "job_key_source": "torchelastic"}


@pytest.fixture(scope="module")
def autostarted(dsh_launcher: Path, fake_nvml_lib_dir: Path, tmp_path_factory) -> Iterator[Autostarted]:
    if not SIDECAR_BIN.exists():
        pytest.skip(f"{SIDECAR_BIN} is not installed (pip install -e .)")
    base = tmp_path_factory.mktemp("dsh-autostart")
    workspace = base / "work"  # where `dsh web` starts: the workspace root
    workspace.mkdir()
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    nvml, gpu_env, sysfs_args = simulated_gpu_env(base, fake_nvml_lib_dir)
    # a training job started from the workspace (a rank of the cluster's run: its GPU tab shows the
    # Cluster section), and one of another project (not this session's)
    job = cpu_model_job(base / "job", workspace, run=RANK_0_OF_RUN_7)
    other = cpu_model_job(base / "other", elsewhere)
    web = None
    llm = FakeLlm()  # the session's agent asks this "model", which calls gpu_status
    # the Prometheus of the plugin's prometheusUrl: a two-node job whose rank 3 the others wait for
    prometheus = FakePrometheus(two_nodes_and_a_silent_one(straggler=3))
    try:
        nvml.write({"driver_version": "550.54.15", "cuda_driver_version": 12040,
                    "gpus": [gpu(0, name=GPU_NAMES[0], util_gpu=0, memory_used_mib=0)]})
        home = DshHome.create(base / "home", dsh_launcher)
        home.add_plugin()
        home.add_plugin(TOOL_RUNNER_DIR)
        port = closed_port()  # no sidecar answers there
        home.write_plugin_config(
            sidecarUrl=f"http://127.0.0.1:{port}",
            token=None,
            timeoutMs=2000,
            autostart=True,
            sidecarCommand=str(SIDECAR_BIN),
            sidecarArgs=["--interval", "0.5", *sysfs_args],  # discovery: every job of the user
            prometheusUrl=prometheus.url,
        )
        web = start_dsh_web(home, workspace, extra_env={**gpu_env, "DEEPSEEK_BASE_URL": llm.url})
        yield Autostarted(web, job, other, workspace, home, base, llm, prometheus)
    finally:
        if web is not None:
            web.stop()
        prometheus.close()
        llm.close()
        job.stop()
        other.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_the_plugin_starts_the_sidecar_itself(autostarted: Autostarted) -> None:
    web = autostarted.web
    s = wait_running(web)
    pid = s["pid"]
    argv = cmdline(pid)
    # a real dsh-sidecar process, a child of DSH, on a free loopback port, its token kept off argv
    assert any(Path(a).name == "dsh-sidecar" for a in argv[:2]), argv
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "0"], argv
    # the plugin's prometheusUrl setting becomes the started sidecar's --prometheus
    assert argv[argv.index("--prometheus") + 1] == autostarted.prometheus.url, argv
    assert web.process.pid in ancestors(pid), (ancestors(pid), web.process.pid)
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    token = [e for e in environ if e.startswith(b"DSH_SIDECAR_TOKEN=")]
    assert token and len(token[0]) > len("DSH_SIDECAR_TOKEN=") + 30
    assert not any(token[0].split(b"=", 1)[1].decode() in a for a in argv)
    # DSH's own credentials (its model API key) stay out of the sidecar's environment
    assert not any(e.startswith(b"DEEPSEEK_API_KEY=") for e in environ)
    # the token is the plugin's own: the sidecar refuses anyone without it
    code, _ = get_json(s["url"], "/api/dsh-gpu-dashboard/status")
    assert code == 401
    code, cfg = get_json(web.url, f"{API}/config")
    assert cfg["tokenSet"] is False and token[0].split(b"=", 1)[1].decode() not in json.dumps(cfg)
    # ... while the proxy reaches it
    pids = {autostarted.job.pid, autostarted.other.pid}
    code, jobs = wait_for(
        lambda: (r := get_json(web.url, f"{API}/jobs"))[0] == 200 and pids <= {j["root_pid"] for j in r[1]["jobs"]} and r,
        30,
        0.3,
        "both jobs in the discovery sidecar's /jobs",
    )
    assert jobs["mode"] == "discovery"
    job_id = next(j["id"] for j in jobs["jobs"] if j["root_pid"] == autostarted.job.pid)
    code, doc = get_json(web.url, f"{API}/status?job={job_id}")
    assert code == 200 and doc["target"]["pid"] == autostarted.job.pid


def test_the_gpu_tab_and_the_chip_show_the_workspace_job_and_survive_a_kill(
    chromium, autostarted: Autostarted
) -> None:
    web = autostarted.web
    first = wait_running(web)
    jobs = get_json(web.url, f"{API}/jobs")[1]["jobs"]
    job_id = next(j["id"] for j in jobs if j["root_pid"] == autostarted.job.pid)
    other_id = next(j["id"] for j in jobs if j["root_pid"] == autostarted.other.pid)
    errors: list[str] = []
    sessions: list[str] = []
    ctx, page = new_page(chromium, web.url, errors)
    page.on(
        "request",
        lambda r: sessions.extend(urllib.parse.parse_qs(urllib.parse.urlparse(r.url).query).get("session", []))
        if f"{API}/jobs" in r.url
        else None,
    )
    shell_job = None
    try:
        chip = wait_for_panel(page)
        summary = page.locator('[data-testid="dsh-gpu-chip-jobs"]')
        summary.wait_for(timeout=30_000)
        # the chip summarises every job of the user, the worst first (both jobs here are CPU)
        assert int(summary.get_attribute("data-count")) >= 2
        assert summary.get_attribute("data-worst") == "CPU"

        open_session(page)
        rows = page.locator('[data-testid="dsh-gpu-session-job"]:not([data-link="none"])')
        row = page.locator(f'[data-testid="dsh-gpu-session-job"][data-job-id="{job_id}"]')
        row.wait_for(timeout=30_000)
        assert row.get_attribute("data-link") == "workspace"
        assert str(autostarted.job.pid) in row.inner_text()
        # another project's job: listed below, marked as not this session's
        other_row = page.locator(f'[data-job-id="{other_id}"]')
        other_row.wait_for(timeout=30_000)
        assert other_row.get_attribute("data-link") == "none"
        # a job whose environment carries this session's id (as DSH's shell tool sets it) joins
        sid = sessions[-1]
        # the host knows the session (ctx.sessions): its header's cwd is the workspace
        code, mine = get_json(web.url, f"{API}/jobs?session={urllib.parse.quote(sid)}")
        assert code == 200 and mine["session"]["id"] == sid, mine
        assert mine["session"]["from"] == "session", mine["session"]
        assert mine["session"]["workspaces"] == [str(autostarted.workspace.resolve())]
        assert [j["id"] for j in mine["jobs"]] == [job_id]
        shell_job = cpu_model_job(
            autostarted.base / "shell-job", autostarted.base / "elsewhere", env={**os.environ, "DSH_SESSION_ID": sid}
        )
        shell_row = page.locator('[data-testid="dsh-gpu-session-job"][data-link="shell"]')
        shell_row.wait_for(timeout=30_000)
        assert str(shell_job.pid) in shell_row.inner_text()
        assert rows.count() == 2
        assert page.locator(f'[data-job-id="{other_id}"]').get_attribute("data-link") == "none"
        row.click()
        view = page.locator('[data-testid="dsh-gpu-view"][data-state="ok"]')
        view.wait_for(timeout=30_000)
        # the session's job, through ?job=: the verdict of the CPU model
        code, doc = get_json(web.url, f"{API}/status?job={urllib.parse.quote(job_id)}")
        assert code == 200 and doc["job_id"] == job_id
        assert doc["status"] in view.inner_text() or doc["status"] == chip.get_attribute("data-status")
        # which session asked: the host answers its workspace
        shot(page, "autostart-session-tab")

        # kill -9 the sidecar the plugin started: it comes back (backoff), so does the data
        os.kill(first["pid"], signal.SIGKILL)
        again = wait_running(web, 40, not_pid=first["pid"])
        assert again["restarts"] >= 1 and again["pid"] != first["pid"]
        assert not alive(first["pid"])
        page.wait_for_function(
            """() => { const v = document.querySelector('[data-testid="dsh-gpu-view"]');
                       return v && v.dataset.state === 'ok' }""",
            timeout=30_000,
        )
        code, doc = wait_for(
            lambda: (r := get_json(web.url, f"{API}/status?job={urllib.parse.quote(job_id)}"))[0] == 200 and r,
            30,
            0.3,
            "status after the restart",
        )
        assert doc["target"]["pid"] == autostarted.job.pid
        row.wait_for()
        page.wait_for_selector('[data-testid="dsh-gpu-chip"][data-state="ok"]', timeout=30_000)
        # settings: the sidecar the plugin started, and a snippet that keeps the autostart keys
        page.get_by_role("button", name="Settings").first.click()
        page.get_by_text("GPU dashboard", exact=True).last.click()
        started = page.locator('[data-testid="dsh-gpu-started-sidecar"][data-state="running"]')
        started.wait_for(timeout=30_000)
        # The row first shows the config it had, then the one it asks for afresh on opening.
        pid = str(managed_sidecar(web)["pid"])
        page.wait_for_function(
            """([pid]) => { const e = document.querySelector('[data-testid="dsh-gpu-started-sidecar"]');
                           return e && e.innerText.includes(pid) && e.innerText.includes('restarted 1') }""",
            arg=[pid],
            timeout=30_000,
        )
        yaml = page.locator('[data-testid="dsh-gpu-yaml"]').inner_text()
        assert "autostart: true" in yaml and f'sidecarCommand: "{SIDECAR_BIN}"' in yaml, yaml
        assert "launchWorkspace: true" in yaml, yaml
        assert not plugin_errors(errors), errors
    finally:
        ctx.close()
        if shell_job is not None:
            shell_job.stop()


CLUSTER_CELLS = """() => {
  const all = (sel) => [...document.querySelectorAll(sel)];
  const slow = document.querySelector('[data-testid="dsh-gpu-cluster-warning"][data-code="straggler-rank"]');
  return {
    nodes: all('[data-testid="dsh-gpu-cluster-node"]').map((r) => [r.dataset.node, r.dataset.reporting]),
    codes: all('[data-testid="dsh-gpu-cluster-warning"]').map((e) => e.dataset.code),
    straggler: slow ? slow.textContent : '',
    waits: all('[data-testid="dsh-gpu-cluster-rank"] [data-col="collectiveWait"]').map((e) => e.textContent),
  };
}"""


def test_the_gpu_tab_shows_the_cluster_of_the_prometheus_setting(chromium, autostarted: Autostarted) -> None:
    # prometheusUrl set: the GPU tab's Cluster section, through the plugin's proxy and the sidecar
    # it started with --prometheus, lays out the same cells as the page (tests/browser/test_cluster_page.py).
    wait_running(autostarted.web)
    errors: list[str] = []
    ctx, page = new_page(chromium, autostarted.web.url, errors)
    try:
        wait_for_panel(page)
        open_session(page)
        section = page.locator('[data-testid="dsh-gpu-cluster"]')
        section.wait_for(timeout=30_000)
        # Read in one evaluation: the view may remount the section while it settles on the session's job.
        expected_nodes = [["node-a", "true"], ["node-a", "true"], ["node-b", "true"], ["node-b", "true"], ["node-c", "false"]]
        shown = wait_for(
            lambda: (v := page.evaluate(CLUSTER_CELLS))["nodes"] == expected_nodes and len(v["waits"]) == 4 and v,
            30,
            0.3,
            "the Cluster section with both nodes, the silent one and four ranks",
        )
        assert sorted(shown["codes"]) == ["node-missing", "straggler-rank"], shown
        assert "Rank 3 (node node-b, GPU 1)" in shown["straggler"], shown
        assert "because of its data wait" in shown["straggler"], shown
        assert shown["waits"] == ["40 %", "40 %", "40 %", "0 %"], shown
        scroll_into_view(page, '[data-testid="dsh-gpu-cluster"]')  # the view may still remount it
        page.mouse.move(0, 0)
        shot(page, "cluster")
        assert page.locator('[data-testid="dsh-gpu-cluster-error"]').count() == 0
        assert not plugin_errors(errors), errors
    finally:
        ctx.close()


def test_gpu_status_tool_through_dsh_tool_pipeline(autostarted: Autostarted) -> None:
    web = autostarted.web
    wait_running(web)
    code, schemas = get_json(web.url, "/dsh-gpu-test-tools/schemas")
    assert code == 200, schemas
    tool = next(t for t in schemas["tools"] if t["name"] == "gpu_status")
    assert "job" in tool["parameters"]["properties"]

    def verdict() -> dict | None:
        r = run_tool(web, "gpu_status", {})
        jobs = (r.get("value") or {}).get("jobs") or []
        return r if jobs and jobs[0]["status"] == "CPU" else None

    r = wait_for(verdict, 30, 0.5, "a CPU verdict from gpu_status")
    assert r["isError"] is False, r
    value = r["value"]
    assert value["workspace"] == str(autostarted.workspace.resolve())
    (j,) = value["jobs"]
    assert j["pid"] == autostarted.job.pid and j["link"] == "workspace"
    assert j["model_device"] == "cpu" and j["input_devices"] == ["cpu"]
    assert j["gpus"] and j["gpus"][0]["name"] == GPU_NAMES[0]
    hinted = [w for w in j["warnings"] if w["hint"]]
    assert hinted, j["warnings"]
    text = "".join(c.get("text", "") for c in r["content"])
    assert f"Job {j['job']} (pid {j['pid']}): CPU." in text
    assert "model on cpu" in text and hinted[0]["hint"] in text
    # one job by id, and a bad id answered as a value the model can read
    one = run_tool(web, "gpu_status", {"job": j["job"]})
    assert one["isError"] is False and one["value"]["jobs"][0]["job"] == j["job"]
    bad = run_tool(web, "gpu_status", {"job": "nope"})
    assert bad["isError"] is False and "not a job id" in bad["value"]["error"]
    # wrong arguments: the tool throws, DSH's pipeline turns it into a failed result
    wrong = run_tool(web, "gpu_status", {"job": 5})
    assert wrong["isError"] is True and "optional argument" in wrong["error"]["message"], wrong
    assert wrong["content"][0]["text"].startswith("Error:"), wrong


def test_the_session_agent_calls_gpu_status_and_reads_the_verdict(chromium: Browser, autostarted: Autostarted) -> None:
    """The real agent loop: this test's session sends a message to the (fake) model, which calls
    gpu_status; DSH runs it for that session (exec.agent.session) and sends the verdict back."""
    llm = autostarted.llm
    wait_running(autostarted.web)
    before = len(llm.tool_results())  # another test's session may have asked already
    errors: list[str] = []
    ctx, page = new_page(chromium, autostarted.web.url, errors)
    try:
        wait_for_panel(page)
        open_session(page)  # sends "is my model on the GPU?"
        results = wait_for(
            lambda: llm.tool_results()[before:], 60, 0.3, "this session's gpu_status result in a model request"
        )
    finally:
        ctx.close()
    text = results[0]
    assert "Job " in text and f"(pid {autostarted.job.pid})" in text and ": CPU." in text, text
    assert "model on cpu" in text and "Hint:" in text, text
    assert f"(pid {autostarted.other.pid})" not in text  # another project's job is not this session's
    offered = next(b for b in llm.requests if any(t["function"]["name"] == "gpu_status" for t in b.get("tools") or []))
    tool = next(t["function"] for t in offered["tools"] if t["function"]["name"] == "gpu_status")
    assert "GPU" in tool["description"] and "job" in tool["parameters"]["properties"]


def test_gpu_watch_is_offered_and_without_an_agent_says_why_it_cannot_start(autostarted: Autostarted) -> None:
    """Through DSH's tool pipeline with no agent (the test runner's call): DSH's job registry serves
    only agents whose composition loads its job controls, so the watch cannot start; the tool says
    so as a value, and DSH goes on."""
    web = autostarted.web
    wait_running(web)
    code, schemas = get_json(web.url, "/dsh-gpu-test-tools/schemas")
    tool = next(t for t in schemas["tools"] if t["name"] == "gpu_watch")
    assert tool["parameters"]["properties"]["until"]["enum"] == ["worse", "error", "end"]
    jobs = wait_for(lambda: (r := get_json(web.url, f"{API}/jobs"))[0] == 200 and r[1]["jobs"], 30, 0.3, "a job")
    job_id = next(j["id"] for j in jobs if j["root_pid"] == autostarted.job.pid)
    r = run_tool(web, "gpu_watch", {"job": job_id})
    assert r["isError"] is False, r
    assert r["value"]["job"] == job_id and r["value"]["background_job"] is None, r
    assert r["value"]["error"].startswith("DSH would not start the background watch: background jobs unavailable"), r
    text = "".join(c.get("text", "") for c in r["content"])
    assert text.startswith("gpu_watch: DSH would not start") and "Ask gpu_status" in text, text
    wrong = run_tool(web, "gpu_watch", {"until": "soon"})
    assert wrong["isError"] is True and "two optional arguments" in wrong["error"]["message"], wrong
    assert get_json(web.url, f"{API}/config")[0] == 200  # DSH goes on


def test_the_session_agent_is_told_when_its_watched_job_ends(chromium: Browser, autostarted: Autostarted) -> None:
    """Issue 40, the agent is told, not asked: the session's (fake) model calls gpu_watch on a job of
    the workspace; DSH runs the watch as a background job owned by the session's agent. The job
    ends; the watch settles, DSH opens a turn on the idle agent with its completion notice, and the
    model reads the watch's output with job_output: the end, the final verdict and the comparison."""
    llm, web = autostarted.llm, autostarted.web
    wait_running(web)
    watched = cpu_model_job(autostarted.base / "watched", autostarted.workspace)
    ctx = None
    try:

        def listed() -> str | None:
            code, doc = get_json(web.url, f"{API}/jobs")
            return next((j["id"] for j in doc["jobs"] if j["root_pid"] == watched.pid), None) if code == 200 else None

        llm.watch_job = job_id = wait_for(listed, 30, 0.3, "the watched job in the sidecar's /jobs")
        errors: list[str] = []
        ctx, page = new_page(chromium, web.url, errors)
        wait_for_panel(page)
        open_session(page, "watch my training job")
        (started,) = wait_for(lambda: llm.tool_results("call_watch_1")[:1], 60, 0.3, "the gpu_watch result")
        assert f"Watching job {job_id} (CPU now) in the background job gpu-watch-" in started, started
        watched.stop()
        (output,) = wait_for(
            lambda: llm.tool_results("call_watch_output_1")[:1], 60, 0.3, "the watch's output, read after DSH's notice"
        )
        assert not plugin_errors(errors), errors
    finally:
        llm.watch_job = None
        if ctx is not None:
            ctx.close()
        watched.stop()
    (notice,) = llm.notices()
    assert f"(gpu-watch: gpu_watch {job_id} until end) finished [status: completed" in notice, notice
    assert output.startswith(f"gpu_watch (until end): job {job_id}: The job ended; its final verdict: CPU"), output
    assert "model-on-cpu" in output and f"Job {job_id} has ended: its verdict is final." in output, output
    assert "Against the previous run of the same command in the same folder" in output, output
    assert "<untrusted-data>" in output and "[status: completed" in output, output


def test_the_sidecar_stops_with_dsh(dsh_launcher: Path, tmp_path: Path) -> None:
    """A DSH of its own: stopping the module's would leave the tests after this one without it."""
    if not SIDECAR_BIN.exists():
        pytest.skip(f"{SIDECAR_BIN} is not installed (pip install -e .)")
    home = DshHome.create(tmp_path / "home", dsh_launcher)
    home.add_plugin()
    home.write_plugin_config(
        sidecarUrl=f"http://127.0.0.1:{closed_port()}", token=None, timeoutMs=2000,
        sidecarCommand=str(SIDECAR_BIN), sidecarArgs=["--interval", "0.5"],
    )
    with start_dsh_web(home, tmp_path / "work") as web:
        pid = wait_running(web)["pid"]
        # SIGTERM to DSH alone (not its process group): DSH disposes its plugins, ours stops the sidecar
        os.kill(web.process.pid, signal.SIGTERM)
        web.process.proc.wait(30)
        wait_for(lambda: not alive(pid), 10, 0.1, f"the sidecar (pid {pid}) to stop with DSH")


def test_a_missing_sidecar_command_shows_how_to_install_it(
    chromium, dsh_launcher: Path, tmp_path: Path
) -> None:
    home = DshHome.create(tmp_path / "home", dsh_launcher)
    home.add_plugin()
    home.add_plugin(TOOL_RUNNER_DIR)
    missing = str(tmp_path / "nowhere" / "bin" / "dsh-sidecar")  # a venv not made yet
    home.write_plugin_config(
        sidecarUrl=f"http://127.0.0.1:{closed_port()}", token=None, timeoutMs=1000, sidecarCommand=missing
    )
    with start_dsh_web(home, tmp_path / "work") as web:
        code, body = wait_for(
            lambda: (r := get_json(web.url, f"{API}/status"))[0] == 502 and r, 20, 0.2, "sidecar-missing"
        )
        assert body["error"] == "sidecar-missing" and body["command"] == missing, body
        # the install goes into the Python autostart runs: the venv of the configured <venv>/bin/dsh-sidecar
        venv = tmp_path / "nowhere"
        assert body["install"] == f"python3 -m venv {venv} && {venv}/bin/python -m pip install -e {REPO}", body
        assert "sidecarCommand" in body["hint"]
        assert managed_sidecar(web)["state"] == "missing"
        errors: list[str] = []
        ctx, page = new_page(chromium, web.url, errors)
        try:
            chip = wait_for_panel(page)
            page.wait_for_selector('[data-testid="dsh-gpu-chip"][data-state="missing"]', timeout=30_000)
            chip.click()
            card = page.locator('[data-testid="dsh-gpu-glance"] [data-testid="dsh-gpu-sidecar-missing"]')
            card.wait_for()
            text = card.inner_text()
            assert "The sidecar is not installed" in text and missing in text
            assert page.locator('[data-testid="dsh-gpu-install-command"]').inner_text() == body["install"]
            page.mouse.move(0, 0)
            shot(page, "sidecar-missing")
            assert not plugin_errors(errors), errors
        finally:
            ctx.close()
        r = run_tool(web, "gpu_status", {})
        assert r["isError"] is False and "cannot be started" in r["value"]["error"]
        assert "sidecarCommand" in r["value"]["hint"] and body["install"] in r["value"]["hint"]
        assert "cannot be started" in r["content"][0]["text"]
        assert web.process.proc.poll() is None, web.log()


def test_a_sidecar_answering_401_at_the_url_makes_the_plugin_start_its_own(
    chromium, dsh_launcher: Path, fake_nvml_lib_dir: Path, tmp_path: Path
) -> None:
    """Root's node-wide sidecar (a token the user was not given) on the configured URL: the plugin
    starts the user's own sidecar instead of showing 401, and the settings row names both URLs."""
    nvml, gpu_env, sysfs_args = simulated_gpu_env(tmp_path, fake_nvml_lib_dir)
    nvml.write({"gpus": [gpu(0, name=GPU_NAMES[0])]})
    home = DshHome.create(tmp_path / "home", dsh_launcher)
    home.add_plugin()
    with Sidecar(["--port", "0", "--interval", "0.5", "--token", "roots-node-wide-token"], env=nvml.env()) as root:
        assert root.get(f"{API_SIDECAR}/jobs")[0] == 401
        home.write_plugin_config(
            sidecarUrl=root.url, token=None, timeoutMs=2000, sidecarCommand=str(SIDECAR_BIN),
            sidecarArgs=["--interval", "0.5", *sysfs_args],
        )
        with start_dsh_web(home, tmp_path / "work", extra_env=gpu_env) as web:
            ours = wait_running(web)
            assert ours["url"] and ours["url"] != root.url, ours
            assert ours["because"].startswith(f"{root.url} answered HTTP 401"), ours
            wait_for(lambda: get_json(web.url, f"{API}/jobs")[0] == 200, 30, 0.2, "the jobs through our sidecar")
            errors: list[str] = []
            ctx, page = new_page(chromium, web.url, errors)
            try:
                wait_for_panel(page)
                page.get_by_role("button", name="Settings").first.click()
                page.get_by_text("GPU dashboard", exact=True).last.click()
                because = page.locator('[data-testid="dsh-gpu-started-because"]')
                because.wait_for()
                text = because.inner_text()
                assert root.url in text and "401" in text and ours["url"] in text, text
                assert not plugin_errors(errors), errors
            finally:
                ctx.close()


def test_a_session_whose_workspace_holds_no_job_shows_the_machines_jobs_marked_unlinked(
    chromium, dsh_launcher: Path, fake_nvml_lib_dir: Path, tmp_path: Path
) -> None:
    """DSH started in a folder that is not the job's: the chip counts the user's jobs, so the session's
    GPU tab lists them too (marked "not linked to this session", with why) and shows the chosen one,
    instead of "no job"."""
    nvml, gpu_env, sysfs_args = simulated_gpu_env(tmp_path, fake_nvml_lib_dir)
    nvml.write({"driver_version": "550.54.15", "cuda_driver_version": 12040,
                "gpus": [gpu(0, name=GPU_NAMES[0], util_gpu=0, memory_used_mib=0)]})
    project = tmp_path / "project"
    project.mkdir()
    job = cpu_model_job(tmp_path / "job", project)
    home = DshHome.create(tmp_path / "home", dsh_launcher)
    home.add_plugin()
    home.write_plugin_config(
        sidecarUrl=f"http://127.0.0.1:{closed_port()}", token=None, timeoutMs=2000,
        sidecarCommand=str(SIDECAR_BIN), sidecarArgs=["--interval", "0.5", *sysfs_args],
    )
    try:
        with start_dsh_web(home, tmp_path / "empty-workspace", extra_env=gpu_env) as web:
            wait_running(web)
            job_id = wait_for(
                lambda: next((j["id"] for j in get_json(web.url, f"{API}/jobs")[1].get("jobs", [])
                              if j["root_pid"] == job.pid), None),
                30, 0.3, "the job in the sidecar's /jobs",
            )
            errors: list[str] = []
            ctx, page = new_page(chromium, web.url, errors)
            try:
                wait_for_panel(page)
                page.locator('[data-testid="dsh-gpu-chip-jobs"]').wait_for(timeout=30_000)
                open_session(page)
                row = page.locator(f'[data-testid="dsh-gpu-session-job"][data-job-id="{job_id}"]')
                try:
                    row.wait_for(timeout=30_000)
                except Exception as exc:  # say what the tab and the host showed
                    shown = page.locator('[data-testid="dsh-gpu-view"]').inner_text()[:2000]
                    raise AssertionError(f"tab: {shown!r}; /jobs: {get_json(web.url, f'{API}/jobs')}") from exc
                assert row.get_attribute("data-link") == "none"
                why = row.locator('[data-testid="dsh-gpu-session-job-link"]').inner_text()
                assert "not linked to this session" in why and str(project.resolve()) in why, why
                assert str((tmp_path / "empty-workspace").resolve()) in why, why
                assert page.locator('[data-testid="dsh-gpu-session-others"]').count() == 1
                assert page.locator('[data-testid="dsh-gpu-session-empty"]').count() == 1  # none linked
                # the tab shows a job's verdict, not an empty view: the chosen job's hero
                row.click()
                page.wait_for_function(
                    """([pid]) => { const v = document.querySelector('[data-testid="dsh-gpu-view"]');
                                   return v && v.dataset.state === 'ok' && v.innerText.includes(pid) }""",
                    arg=[str(job.pid)],
                    timeout=30_000,
                )
                assert not plugin_errors(errors), errors
            finally:
                ctx.close()
    finally:
        job.stop()


def test_the_plugin_finds_the_sidecar_of_its_checkouts_venv(dsh_launcher: Path, tmp_path: Path) -> None:
    """The README's path: `dsh plugin --profile web add ./dsh_plugin` from a checkout whose sidecar is in
    .venv (scripts/demo.sh, the install card's command), `dsh web` from a shell whose PATH has no
    dsh-sidecar, the default config: the plugin starts <checkout>/.venv/bin/dsh-sidecar by itself."""
    venv_sidecar = REPO / ".venv" / "bin" / "dsh-sidecar"
    if not venv_sidecar.exists():
        pytest.skip(f"{venv_sidecar} is not installed (python3 -m venv .venv && .venv/bin/pip install -e .)")
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "dsh-sidecar").exists()
    )
    home = DshHome.create(tmp_path / "home", dsh_launcher)
    home.add_plugin()
    home.write_plugin_config(sidecarUrl=f"http://127.0.0.1:{closed_port()}", token=None, timeoutMs=2000)
    with start_dsh_web(home, tmp_path / "work", extra_env={"PATH": f"{dsh_launcher.parent}{os.pathsep}{path}"}) as web:
        s = wait_running(web)
        assert s["executable"] == str(venv_sidecar), s
        assert cmdline(s["pid"])[1] == str(venv_sidecar) or cmdline(s["pid"])[0] == str(venv_sidecar)
        wait_for(lambda: get_json(web.url, f"{API}/jobs")[0] == 200, 30, 0.2, "the jobs through the checkout's sidecar")
