"""Issue 39 item 4: `dsh-sidecar mcp ... --add-to-dsh` puts the MCP server in a DSH profile that DSH
then reads, on a fresh DSH home and on one that has rows already.

A fresh `$DSH_HOME/profiles/web/cordis.patch.yml` holds `[]`; appending docs/mcp.md's `- insert:`
block after it made `dsh web --dump-config` die with a YAMLException. Each test here runs the real
command (a subprocess, as a user types it) and then the real DSH 0.1.0-rc.8: its `--dump-config`
must succeed and show the row, and `dsh web` must connect the server and give DSH's tool registry
its tools (read through the test-only runner plugin, tests/browser/dsh_tool_runner), reaching a
sidecar that wants the token the row passes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from sidecar.common.exit_codes import EXIT_DSH_PROFILE, EXIT_OK
from tests.fakenvml import FakeNvml, gpu
from tests.helpers.dsh_env import (
    TOOL_RUNNER_DIR,
    DshHome,
    DshUnavailable,
    ensure_dsh,
    get_json,
    start_dsh_web,
)
from tests.helpers.harness import FakeJob, Sidecar, cuda_runtime, python_env, wait_for

pytest.importorskip("mcp")
pytestmark = [pytest.mark.slow, pytest.mark.dsh]

TOKEN = "s3cret-token-for-the-dsh-profile"
ROW_START = "- id: mcp-gpu"


@pytest.fixture(scope="module")
def launcher() -> Path:
    try:
        return ensure_dsh()
    except DshUnavailable as exc:
        pytest.skip(str(exc))


def add_to_dsh(home: DshHome, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """`dsh-sidecar mcp ARGS --add-to-dsh` as a user runs it, with DSH_HOME pointing at `home`."""
    entry = Path(sys.executable).with_name("dsh-sidecar")
    command = [str(entry)] if entry.exists() else [sys.executable, "-m", "sidecar.cli"]
    env = python_env({"DSH_HOME": str(home.path)})
    env.pop("DSH_SIDECAR_TOKEN", None)
    if token:
        env["DSH_SIDECAR_TOKEN"] = token
    return subprocess.run(
        [*command, "mcp", *args, "--add-to-dsh"], env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )


def dump_config(home: DshHome) -> str:
    proc = home.run_dsh("web", "--dump-config", timeout_s=120)
    out: str = proc.stdout
    assert proc.returncode == 0 and "YAMLException" not in out, out[-3000:]
    return out


def rows_of(dump: str, start: str) -> list[list[str]]:
    """Each row of the composed profile that begins with the line `start`, as its lines."""
    lines = dump.splitlines()
    rows = []
    for i, line in enumerate(lines):
        if line == start:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(("- ", "#"))), len(lines))
            rows.append(lines[i:end])
    return rows


def test_a_fresh_profile_gets_the_server_and_dsh_starts_it_with_the_token(
    launcher: Path, tmp_path: Path, fake_nvml: FakeNvml
) -> None:
    home = DshHome.create(tmp_path / "dsh-home", launcher)
    dump_config(home)  # DSH makes the web profile: its patch file holds `[]`
    patch = home.web_profile / "cordis.patch.yml"
    assert [ln for ln in patch.read_text().splitlines() if ln.strip() and not ln.startswith("#")] == ["[]"]
    job = FakeJob(
        tmp_path / "job", {"main": {"payload": {"runtime": cuda_runtime([gpu(0)["uuid"]]), "models": []}}}
    )
    try:
        fake_nvml.write({"gpus": [gpu(0, processes=[{"pid": job.pid, "used_mib": 500}])]})
        args = ["--pid", str(job.pid), "--port", "0", "--interval", "0.3", "--token", TOKEN]
        with Sidecar(args, env=fake_nvml.env(), token=TOKEN) as sc:
            assert sc.url is not None
            # the token comes from the environment, as a user keeps it: never into the file
            r = add_to_dsh(home, "--url", sc.url, token=TOKEN)
            assert r.returncode == EXIT_OK and r.stderr == "", r
            assert f"added the MCP server 'gpu' (row mcp-gpu) in {patch}" in r.stdout, r.stdout
            assert TOKEN not in patch.read_text()
            (row,) = rows_of(dump_config(home), ROW_START)
            text = "\n".join(row)
            assert "name: '@deepseek-ai/dsh-mcp-client'" in text and "serverName: gpu" in text, text
            assert sc.url in text and "DSH_SIDECAR_TOKEN: !!js process.env.DSH_SIDECAR_TOKEN" in text, text

            # DSH starts the server with that row and registers its tools; a call reaches the sidecar
            home.add_plugin(TOOL_RUNNER_DIR)
            extra = {"DSH_SIDECAR_TOKEN": TOKEN, "PYTHONPATH": python_env()["PYTHONPATH"]}
            with start_dsh_web(home, tmp_path / "work", extra_env=extra) as web:
                names = wait_for(
                    lambda: {t["name"] for t in get_json(web.url, "/dsh-gpu-test-tools/schemas")[1]["tools"]}
                    >= {"mcp__gpu__list_jobs", "mcp__gpu__gpu_status", "mcp__gpu__gpu_history"},
                    60, 0.5, "DSH's tool registry to hold the MCP server's tools",
                )
                assert names
                q = urllib.parse.urlencode({"name": "mcp__gpu__list_jobs", "args": json.dumps({})})
                code, result = get_json(web.url, f"/dsh-gpu-test-tools/execute?{q}", timeout_s=30)
                assert code == 200 and result["isError"] is False, result
                text = json.dumps(result["content"])
                # the sidecar answered with the job: it took the token (a 401 is a tool error naming it)
                assert f"(pid {job.pid}, " in text and "token" not in text, result
    finally:
        job.stop()


def test_an_existing_profile_keeps_its_rows_and_a_second_run_replaces_the_first(
    launcher: Path, tmp_path: Path
) -> None:
    home = DshHome.create(tmp_path / "dsh-home", launcher)
    home.add_plugin()  # the dashboard plugin, as the README adds it, and its config row
    home.write_plugin_config(sidecarUrl="http://127.0.0.1:8799", token=None, timeoutMs=1500)
    patch = home.web_profile / "cordis.patch.yml"
    assert add_to_dsh(home, "--url", "http://127.0.0.1:8765").returncode == EXIT_OK
    r = add_to_dsh(home, "--url", "http://127.0.0.1:8766", "--interval", "0.5")
    assert r.returncode == EXIT_OK and "replaced the MCP server 'gpu'" in r.stdout, r
    dump = dump_config(home)
    (row,) = rows_of(dump, ROW_START)
    text = "\n".join(row)
    assert "http://127.0.0.1:8766" in text and "8765" not in text and "'0.5'" in text, text
    assert "DSH_SIDECAR_TOKEN" not in text  # no token given: no env passed
    (plugin,) = [r for r in rows_of(dump, "- id: dsh-gpu-dashboard") if any("config:" in ln for ln in r)]
    assert any("http://127.0.0.1:8799" in ln for ln in plugin) and any("1500" in ln for ln in plugin), plugin

    # what it cannot add to is refused with exit 6, the file left as it was
    flow = "[{id: dsh-gpu-dashboard, config: {timeoutMs: 1500}}]\n"
    patch.write_text(flow)
    r = add_to_dsh(home, "--url", "http://127.0.0.1:8765")
    assert r.returncode == EXIT_DSH_PROFILE and r.stdout == "", r
    assert r.stderr.startswith("dsh-sidecar: error: cannot add the MCP server to ") and "by hand" in r.stderr, r
    assert patch.read_text() == flow
