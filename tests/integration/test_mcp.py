"""`dsh-sidecar mcp` through the MCP SDK's own client over stdio: a real sidecar (or in-process
polling) watching fake jobs whose GPU side is the simulated driver (tests/fakenvml)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.fakenvml import gpu, make_fake_sysfs
from tests.helpers.harness import REPO, FakeJob, Sidecar, cuda_runtime, python_env
from tests.helpers.stranger import PortToggler, StrangerListener, can_switch_user

anyio = pytest.importorskip("anyio")


def run_async(main) -> None:
    """anyio.run in a thread of its own: Playwright's sync API (the browser tests, earlier in the same
    session) leaves an asyncio loop running in the main thread, where anyio.run refuses to start."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, main).result()


pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from sidecar.serve import mcp_server  # noqa: E402
from sidecar.sources import http_get  # noqa: E402

pytestmark = pytest.mark.slow

UUID0 = gpu(0)["uuid"]
TOKEN = "s3cret-token-for-mcp-tests"
TOOLS = {"list_jobs", "gpu_status", "gpu_history", "list_runs", "compare_runs", "watch_job"}
# What each tool is called with where any call will do: compare_runs requires its run.
TOOL_ARGUMENTS = {"compare_runs": {"run": "0123abcd"}}


@pytest.fixture
def env(fake_nvml):
    return fake_nvml.env({"DSH_SIDECAR_RULES": json.dumps({"idle_window_s": 2.0})})


@pytest.fixture
def sysfs_args(tmp_path: Path) -> list[str]:
    """A sidecar that polls reads this fake /sys (one NVIDIA card), not the machine's."""
    sysfs = make_fake_sysfs(
        tmp_path / "sys", [{"pci": "0000:10:00.0", "vendor": "0x10de", "driver": "nvidia"}]
    )
    return ["--path.sysfs", str(sysfs)]


def model(device: str, name: str = "ResNet") -> dict:
    return {
        "name": name,
        "class": name,
        "params": 1000,
        "device": device,
        "devices": [device],
        "input_device": device,
    }


GPU_SPEC = {"payload": {"runtime": cuda_runtime([UUID0]), "models": [model("cuda:0")]}}
CPU_RUNTIME = {"torch": "2.13.0+cpu", "cuda_build": None, "cuda_available": False, "device_count": 0}
CPU_SPEC = {"payload": {"runtime": CPU_RUNTIME, "models": [model("cpu", "MLP")]}}


def busy_gpu(pid: int) -> dict:
    proc = {"pid": pid, "used_mib": 4000, "sm_util": 85}
    return {"gpus": [gpu(0, memory_used_mib=4200, util_gpu=87, processes=[proc])]}


@asynccontextmanager
async def mcp_client(args: list[str], env):
    """`python -m sidecar.cli mcp ARGS` spawned and driven by the SDK's stdio client."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sidecar.cli", "mcp", *args],
        env=python_env(base=env),
        cwd=str(REPO),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()  # also lets the client validate structured content
        assert {t.name for t in listed.tools} == TOOLS
        yield session


async def call(session, name: str, **arguments):
    result = await session.call_tool(name, arguments)
    text = "\n".join(c.text for c in result.content if c.type == "text")
    return result, text


def structured(result):
    """structuredContent (mcp 1.x spells the attribute so, 2.x structured_content)."""
    return result.structured_content if hasattr(result, "structured_content") else result.structuredContent


def is_error(result) -> bool:
    return result.is_error if hasattr(result, "is_error") else result.isError


def ok(result, text: str) -> dict:
    assert not is_error(result), text
    assert isinstance(structured(result), dict), text
    return structured(result)


def err(result, text: str) -> str:
    assert is_error(result) and structured(result) is None, text
    assert "Traceback" not in text and text.count("\n") == 0, text
    return text


def test_gpu_job_through_a_running_sidecar_with_a_token(tmp_path, fake_nvml, env, sysfs_args):
    with FakeJob(tmp_path / "job", {"main": GPU_SPEC}) as job:
        fake_nvml.write(busy_gpu(job.pid))
        args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.3", "--token", TOKEN, *sysfs_args]
        with Sidecar(args, env=env, token=TOKEN) as sc:
            doc = sc.wait_status(lambda d: d["status"] == "GPU" and d["gpus"][0]["util_pct"] == 87)

            async def main():
                async with mcp_client(["--url", sc.url + "/", "--token", TOKEN], env) as s:
                    jobs = ok(*await call(s, "list_jobs"))
                    (j,) = jobs["jobs"]
                    assert j["id"] == doc["job_id"] == jobs["default_job"] and j["root_pid"] == job.pid
                    assert j["status"] == "GPU" and j["alive"] is True and j["gpus"] == [0]

                    result, text = await call(s, "gpu_status")
                    st = ok(result, text)
                    assert st["model_device"] == "cuda:0" and st["model_on_gpu"] is True
                    assert st["gpus"][0]["util_pct"] == 87 and st["gpus"][0]["mem_total_mib"] == 81920
                    assert text.startswith("Yes: the model is on cuda:0 (GPU 0") and st["processes"] == 1
                    assert ok(*await call(s, "gpu_status", job=doc["job_id"]))["job_id"] == doc["job_id"]

                    hist = ok(*await call(s, "gpu_history", seconds=60))
                    assert hist["sample_count"] >= 2 and hist["seconds"] == 60
                    (g,) = hist["gpus"]
                    assert g["util_pct_max"] == 87 and g["mem_used_mib_last"] == 4200
                    assert 1 <= len(g["util_pct_timeline"]) <= mcp_server.TIMELINE_POINTS
                    assert (
                        ok(*await call(s, "gpu_history", seconds=1e12))["seconds"] == mcp_server.MAX_SECONDS
                    )
                    assert ok(*await call(s, "gpu_history", seconds=0))["seconds"] == mcp_server.MIN_SECONDS

                    assert "list_jobs" in err(*await call(s, "gpu_status", job="123-456"))
                    assert "list_jobs" in err(*await call(s, "gpu_history", job="123-456"))
                    assert "seconds must be" in err(*await call(s, "gpu_history", seconds="soon"))
                async with mcp_client(["--url", sc.url, "--token", "wrong-token"], env) as s:
                    assert "check --token" in err(*await call(s, "list_jobs"))
                async with mcp_client(["--url", sc.url], {**env, "DSH_SIDECAR_TOKEN": ""}) as s:
                    assert "requires a token" in err(*await call(s, "gpu_status"))

            run_async(main)


def test_watch_job_is_told_of_a_fall_an_error_and_the_end(tmp_path, fake_nvml, env, sysfs_args):
    """watch_job (issue 40: the agent is told, not asked) through the SDK's client and a running
    sidecar: a wait with nothing to tell times out with its cursor; the model moved to the CPU while
    nobody waited is told from that cursor (the status fell, and model-on-cpu is an error); the job's
    end is told once, with its final verdict and the comparison the ledger can give."""
    with FakeJob(tmp_path / "job", {"main": GPU_SPEC}) as job:
        fake_nvml.write(busy_gpu(job.pid))
        args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.3", "--token", TOKEN, "--stay", *sysfs_args]
        with Sidecar(args, env=env, token=TOKEN) as sc:
            sc.wait_status(lambda d: d["status"] == "GPU")

            async def main():
                async with mcp_client(["--url", sc.url, "--token", TOKEN], env) as s:
                    result, text = await call(s, "watch_job", timeout_s=1)
                    quiet = ok(result, text)
                    assert quiet["timed_out"] is True and quiet["events"] == [] and quiet["status"] == "GPU"
                    assert f'since="{quiet["cursor"]}"' in text
                    on_cpu = {"payload": {"runtime": cuda_runtime([UUID0]), "models": [model("cpu")]}}
                    job.update("main", on_cpu)
                    sc.wait_status(lambda d: d["status"] == "CPU")
                    result, text = await call(s, "watch_job", since=quiet["cursor"], timeout_s=20)
                    fell = ok(result, text)
                    assert [(e["kind"], e["previous_status"], e["status"]) for e in fell["events"]] == [
                        ("worse", "GPU", "CPU"),
                        ("error", None, "CPU"),
                    ], text
                    assert fell["events"][1]["codes"] == ["model-on-cpu"] and fell["timed_out"] is False
                    assert text.startswith(f"Job {fell['job_id']}: The verdict got worse: GPU → CPU.")
                    # a new run of a command never run before: nothing to compare it with, said so
                    assert fell["comparison"]["outcome"] == "not-enough-evidence"
                    assert "no earlier run" in fell["comparison"]["message"], fell["comparison"]
                    job.stop()
                    result, text = await call(s, "watch_job", since=fell["cursor"], timeout_s=20)
                    end = ok(result, text)
                    assert [(e["kind"], e["status"], e["codes"]) for e in end["events"]] == [
                        ("ended", "CPU", ["model-on-cpu"])
                    ], text
                    assert end["alive"] is False and "has ended" in text
                    result, text = await call(s, "watch_job", since=end["cursor"], timeout_s=20)
                    after = ok(result, text)  # at once: an ended job has nothing more to tell
                    assert after["events"] == [] and after["alive"] is False and after["timed_out"] is False
                    assert "since must be a cursor" in err(*await call(s, "watch_job", since="soon"))

            run_async(main)


@pytest.mark.skipif(not can_switch_user(), reason="needs root and setpriv to run a second user")
def test_no_request_and_no_token_to_a_port_another_user_took_over(tmp_path, fake_nvml, env, sysfs_args):
    """Our sidecar answers, then stops; another user (nobody) binds the same port and answers with a
    made-up "on cuda:0". The next tool call must send nothing there (no token) and say why."""
    with FakeJob(tmp_path / "job", {"main": CPU_SPEC}) as job:
        fake_nvml.write({"gpus": [gpu(0)]})
        port = free_port()
        args = [
            "--pid",
            str(job.pid),
            "--port",
            str(port),
            "--interval",
            "0.3",
            "--token",
            TOKEN,
            *sysfs_args,
        ]

        async def main():
            async with mcp_client(["--url", f"http://127.0.0.1:{port}", "--token", TOKEN], env) as s:
                with Sidecar(args, env=env, token=TOKEN) as sc:
                    sc.wait_status(lambda d: d["status"] == "CPU")
                    assert ok(*await call(s, "list_jobs"))["jobs"][0]["root_pid"] == job.pid
                with StrangerListener(port) as stranger:
                    for tool in TOOLS:
                        text = err(*await call(s, tool, **TOOL_ARGUMENTS.get(tool, {})))
                        assert "another user (uid 65534)" in text and "no token" in text, text
                    assert stranger.requests == [], stranger.requests

        run_async(main)


RACE_CALLS = 200


@pytest.mark.skipif(not can_switch_user(), reason="needs root and setpriv to act as another user")
def test_no_token_to_a_user_who_binds_the_port_in_bursts(env):
    """The sidecar is gone and another user binds its port 2 ms at a time, 2 ms free between: a
    check of the port's listener before connecting races that (70 of 200 calls sent the token when
    it was the check). The connection that would carry the token is proved instead: 0 of 200."""
    port = free_port()

    async def main():
        async with mcp_client(["--url", f"http://127.0.0.1:{port}", "--token", TOKEN], env) as s:
            with PortToggler(port) as toggler:
                told = []
                for n in range(RACE_CALLS):
                    tool = sorted(TOOLS)[n % len(TOOLS)]
                    told.append(err(*await call(s, tool, **TOOL_ARGUMENTS.get(tool, {}))))
                got = list(toggler.requests)
        assert toggler.tokens() == [] and got == [], (len(toggler.tokens()), len(got))
        refused = [t for t in told if "another user (uid 65534)" in t and "no token" in t]
        assert not any("cuda:0" in t for t in told)
        # the listener was met (not only a closed port) in some of the calls
        assert refused, told[:5]

    run_async(main)


def test_cpu_build_job_in_process_with_pid(tmp_path, fake_nvml, env, sysfs_args):
    """No --url: this process polls (--pid: one job's Poller); the cpu-build warning and its hint."""
    fake_nvml.write({"gpus": [gpu(0)]})
    with FakeJob(tmp_path / "job", {"main": CPU_SPEC}) as job:

        async def main():
            ledger = ["--runs-db", str(tmp_path / "runs.sqlite3")]
            async with mcp_client(
                ["--pid", str(job.pid), "--interval", "0.3", *ledger, *sysfs_args], env
            ) as s:
                for _ in range(50):  # the probe's facts may take a poll or two to appear
                    result, text = await call(s, "gpu_status")
                    st = ok(result, text)
                    if st["status"] == "CPU":
                        break
                    await anyio.sleep(0.2)
                assert st["status"] == "CPU" and st["model_device"] == "cpu" and st["model_on_gpu"] is False
                (w,) = [w for w in st["warnings"] if w["code"] == "cpu-build"]
                assert w["severity"] == "error" and w["hint"]
                assert text.startswith("No: the model is on cpu") and w["hint"] in text
                (j,) = ok(*await call(s, "list_jobs"))["jobs"]
                assert j["root_pid"] == job.pid and j["first_warning"]["code"] == "cpu-build"
                # Polled here, the job is recorded as a sidecar's would be, and list_runs reads it.
                runs = ok(*await call(s, "list_runs"))["runs"]
                assert [r["job_id"] for r in runs] == [j["id"]], runs
                # the watch in this process: nothing new within a second, the cursor to go on from
                w = ok(*await call(s, "watch_job", timeout_s=1))
                assert w["timed_out"] is True and w["status"] == "CPU" and w["job_id"] == j["id"]
                assert "since must be a cursor" in err(*await call(s, "watch_job", since="1-2-3"))

        run_async(main)


def test_discovery_in_process_finds_the_job(tmp_path, fake_nvml, env, sysfs_args):
    """Neither --url nor --pid: sidecar.poll.discovery.JobsPoller finds the job through its probe segment."""
    with FakeJob(tmp_path / "job", {"main": GPU_SPEC}, detach=True) as job:  # parent: init, not pytest
        fake_nvml.write(busy_gpu(job.pid))

        async def main():
            async with mcp_client(["--interval", "0.3", *sysfs_args], env) as s:
                for _ in range(50):
                    result, text = await call(s, "list_jobs")
                    mine = [j for j in (structured(result) or {}).get("jobs", []) if j["root_pid"] == job.pid]
                    if mine and mine[0]["status"] == "GPU":
                        break
                    await anyio.sleep(0.2)
                assert mine and mine[0]["status"] == "GPU", text
                st = ok(*await call(s, "gpu_status", job=mine[0]["id"]))
                assert st["model_device"] == "cuda:0" and st["gpus"][0]["util_pct"] == 87
                assert ok(*await call(s, "gpu_history", job=mine[0]["id"]))["sample_count"] >= 1

        run_async(main)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_sidecar_that_is_down_is_a_tool_error(env):
    async def main():
        async with mcp_client(["--url", f"http://127.0.0.1:{free_port()}"], env) as s:
            for tool in TOOLS:
                assert "start one with `dsh-sidecar`" in err(
                    *await call(s, tool, **TOOL_ARGUMENTS.get(tool, {}))
                )

    run_async(main)


# -- the HTTP backend against hostile or foreign servers (in this process) -----------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}

    def do_GET(self):
        code, headers, body = self.routes.get(self.path.split("?")[0], (404, {}, b"{}"))
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def foreign():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Handler.routes
    server.shutdown()
    server.server_close()
    _Handler.routes = {}


def test_http_backend_refuses_big_answers_redirects_and_other_schemas(foreign):
    base, routes = foreign
    jobs = "/api/dsh-gpu-dashboard/jobs"
    routes[jobs] = (200, {"Content-Type": "application/json"}, b" " * (mcp_server.MAX_RESPONSE_BYTES + 1))
    assert (
        "more than 4 MiB"
        in mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "list_jobs", {})[1]
    )
    routes[jobs] = (302, {"Location": "http://evil.example/steal"}, b"")
    structured, text = mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "list_jobs", {})
    assert structured is None and "never follows" in text and "evil.example" in text
    routes[jobs] = (200, {}, json.dumps({"schema": 3, "jobs": []}).encode())
    assert "schema 3" in mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "list_jobs", {})[1]
    routes[jobs] = (200, {}, b"<html>")
    assert (
        "did not answer JSON"
        in mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "list_jobs", {})[1]
    )
    routes[jobs] = (200, {}, json.dumps({"schema": 2, "jobs": [{"id": "x"}]}).encode())  # off the contract
    assert (
        "not a schema 2 document"
        in mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "list_jobs", {})[1]
    )
    assert (
        "does not serve"
        in mcp_server.call(mcp_server.HttpBackend(base + "/nope", get=http_get.get), "list_jobs", {})[1]
    )
    # a sidecar older than watch_job: no watch route, said so (not "check --url")
    said = mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "watch_job", {"job": "1-2"})[1]
    assert "has no watch route (HTTP 404)" in said, said
    job = {"id": "1-2", "root_pid": 1, "command": ["x"] * 100, "user": "u" * 5000, "status": "GPU"}
    job |= {"message": "m" * 10_000, "first_warning": None, "gpus": list(range(500)), "alive": True}
    jobs_doc = {"schema": 2, "mode": "pid", "default_job": "1-2", "jobs": [job] * 100, "jobs_omitted": 0}
    routes[jobs] = (200, {}, json.dumps(jobs_doc).encode())
    out, text = mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "list_jobs", {})
    assert len(out["jobs"]) == 64 and out["jobs_omitted"] == 36 and len(text) < 64 * 1200, len(text)
    j = out["jobs"][0]
    assert (
        len(j["message"]) == 512
        and len(j["user"]) == 256
        and len(j["gpus"]) == 64
        and len(j["command"]) == 33
    )
    routes[jobs] = (200, {}, json.dumps({**jobs_doc, "jobs": [{**job, "root_pid": "one"}]}).encode())
    out, text = mcp_server.call(mcp_server.HttpBackend(base, get=http_get.get), "list_jobs", {})
    assert out is None and "not a schema 2 document" in text and "'one'" in text, text


def test_output_schemas_stay_in_dshs_enforced_subset():
    allowed = {"type", "oneOf", "properties", "required", "additionalProperties", "items", "enum", "const"}
    allowed |= {"description", "title", "default", "examples"}

    def walk(node):
        assert set(node) <= allowed, set(node) - allowed
        assert ("type" in node) != ("oneOf" in node), node
        for sub in node.get("properties", {}).values():
            walk(sub)
        for sub in node.get("oneOf", []) + ([node["items"]] if "items" in node else []):
            walk(sub)

    for schema in [*mcp_server.OUTPUT_SCHEMAS.values(), *mcp_server.INPUT_SCHEMAS.values()]:
        walk(schema)


def test_cli_without_the_sdk_and_cli_import_cost():
    env = python_env()
    blocked = (
        "import sys; sys.modules['mcp'] = None; from sidecar.cli.main import main; sys.exit(main(['mcp']))"
    )
    r = subprocess.run(
        [sys.executable, "-c", blocked], env=env, cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.strip().count("\n") == 0 and "pip install 'dsh-gpu-dashboard[mcp]'" in r.stderr, r.stderr
    light = "import sys, sidecar.cli.main; assert not [m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')]"
    subprocess.run([sys.executable, "-c", light], env=env, cwd=REPO, check=True, timeout=30)


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["--url", "file:///etc/passwd"], 2, "not an http:// or https:// URL"),
        (["--url", "http://"], 2, "not an http:// or https:// URL"),
        (["--url", "http://127.0.0.1:99999"], 2, "not an http:// or https:// URL"),
        (["--url", "http://me:pw@127.0.0.1:8765"], 2, "the token goes in --token"),
        (["--url", "http://127.0.0.1:8765/?job=1"], 2, "the token goes in --token"),
        (["--url", "http://127.0.0.1:8765", "--pid", "1"], 2, "give one of them"),
        (["--url", "http://127.0.0.1:8765", "--token", "a b"], 2, "printable ASCII"),
        (["--interval", "0.01"], 2, "is below 0.1 s"),
        (["--history", "0"], 2, "--history"),
        (["--pid", "999999999"], 3, "no process with pid 999999999"),
        (["--bogus"], 2, "unrecognized arguments: --bogus"),
    ],
)
def test_bad_usage_is_one_line_before_anything_starts(args, code, needle):
    r = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "mcp", *args],
        env=python_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert r.returncode == code and r.stdout == "" and len(errors) == 1, r
    assert needle in errors[0] and "Traceback" not in r.stderr, r.stderr


# -- DSH's own MCP client (@deepseek-ai/dsh-mcp-client) and its schema subset -------------------
DSH_ROW = """- insert:
    - id: mcp-gpu
      name: '@deepseek-ai/dsh-mcp-client'
      config:
        serverName: gpu
        transport: stdio
        command: {command}
        args: {args}
        failOnStartupError: true
        env:
          DSH_SIDECAR_TOKEN: !!js process.env.MCP_TEST_TOKEN
"""
DSH_CHECK = """
import { assertObjectJsonSchema, validateJsonSchemaValue } from '@deepseek-ai/dsh-tools';
import { readFileSync } from 'node:fs';
const { schemas, inputs, values } = JSON.parse(readFileSync(process.argv[1], 'utf8'));
for (const s of [...Object.values(schemas), ...Object.values(inputs)]) assertObjectJsonSchema(s);
const bad = Object.entries(values).flatMap(([name, v]) => validateJsonSchemaValue(schemas[name], v, name));
if (bad.length) { console.error(bad.join('; ')); process.exit(1); }
console.log('ok', Object.keys(values).length);
"""


@pytest.mark.dsh
def test_dsh_mcp_client_boots_with_it_and_enforces_its_schemas(tmp_path, fake_nvml, env, sysfs_args):
    """DSH's validator accepts the schemas and real answers; `dsh web` with the docs/mcp.md row and
    failOnStartupError boots only when the client connected and registered the tools."""
    dsh_env = pytest.importorskip("tests.helpers.dsh_env")
    try:
        launcher = dsh_env.ensure_dsh()
    except dsh_env.DshUnavailable as exc:
        pytest.skip(str(exc))
    with FakeJob(tmp_path / "job", {"main": GPU_SPEC}) as job:
        fake_nvml.write(busy_gpu(job.pid))
        args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.3", "--token", TOKEN, *sysfs_args]
        with Sidecar(args, env=env, token=TOKEN) as sc:
            sc.wait_status(lambda d: d["status"] == "GPU")
            backend = mcp_server.HttpBackend(sc.url, TOKEN, get=http_get.get)
            values = {
                n: mcp_server.call(backend, n, {"seconds": 30, "timeout_s": 1})[0]
                for n in mcp_server.TOOLS
                if n != "compare_runs"
            }
            # The job's run (recorded as the sidecar watches it) against itself: a real answer
            # (not comparable: the same run), whose shape DSH's validator checks all the same.
            run = values["list_runs"]["runs"][0]["id"]
            values["compare_runs"] = mcp_server.call(backend, "compare_runs", {"run": run, "other": run})[0]
            assert all(values.values()), values
            payload = tmp_path / "check.json"
            payload.write_text(
                json.dumps(
                    {
                        "schemas": mcp_server.OUTPUT_SCHEMAS,
                        "inputs": mcp_server.INPUT_SCHEMAS,
                        "values": values,
                    }
                )
            )
            node = launcher.parent.parent / "node" / "bin" / "node"
            r = subprocess.run(
                [str(node), "--input-type=module", "-e", DSH_CHECK, str(payload)],
                cwd=launcher.parent.parent / "app",
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0 and r.stdout.startswith(f"ok {len(mcp_server.TOOLS)}"), r.stderr[-2000:]

            home = dsh_env.DshHome.create(tmp_path / "dsh-home", launcher)
            home.web_profile.mkdir(parents=True)
            entry = Path(sys.executable).with_name("dsh-sidecar")
            command, cmd_args = (
                (str(entry), []) if entry.exists() else (sys.executable, ["-m", "sidecar.cli"])
            )
            row = DSH_ROW.format(
                command=json.dumps(command), args=json.dumps([*cmd_args, "mcp", "--url", sc.url])
            )
            (home.web_profile / "cordis.patch.yml").write_text(row)
            extra = {"MCP_TEST_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}
            with dsh_env.start_dsh_web(home, tmp_path / "work", extra_env=extra) as dsh:
                assert "mcp-client(gpu)" not in dsh.log()
