"""The MCP tools list_runs and compare_runs through the official MCP SDK's client, in process
(`mcp.Client(server)`: the SDK's in-memory transport to the server `dsh-sidecar mcp` builds), over
both backends: a sidecar's runs routes over HTTP (the Flask app with a real runs source, its answers
handed to HttpBackend's `get`) and a runs source in the MCP server's own process (LocalBackend).
What the ledger holds reaches the model inside the untrusted-data block and the structured content
without control or bidi characters; every refusal is a one-line tool error."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import pytest

from sidecar.common.http_answer import HttpAnswer
from sidecar.poll.runs_source import LedgerRuns
from sidecar.serve import mcp_server
from sidecar.serve.server import ServerConfig, create_app
from tests.helpers.runs_ledger import fill, short
from tests.helpers.static_source import StaticSource

anyio = pytest.importorskip("anyio")
mcp = pytest.importorskip("mcp")
if not hasattr(mcp, "Client"):
    pytest.skip("mcp.Client (the SDK's in-process client) needs mcp 2.x", allow_module_level=True)

TOKEN = "mcp-runs-token-0123456789"
SINCE = "2026-11-01"  # before every run of tests/helpers/runs_ledger.py
STEERING = ("\x1b", "\n", "\r", "\u2028", "\u202e")


class _Flask:
    """HttpBackend's `get` answered by the app itself (no socket: the routes, the guards, the JSON)."""

    def __init__(self, runs: LedgerRuns | None) -> None:
        self.client = create_app(ServerConfig(token=TOKEN), StaticSource({"schema": 2}, 1.0), runs=runs).test_client()

    def __call__(self, url: str, *, timeout_s: float, max_body_bytes: int, headers: dict[str, str]) -> HttpAnswer:
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        r = self.client.get(path, headers=headers)
        return HttpAnswer(r.status_code, r.content_type or "", r.data)


class _Idle(StaticSource):
    """LocalBackend's poller, never polled: the runs tools do not wait for a poll."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _http(path: Path | None) -> mcp_server.HttpBackend:
    return mcp_server.HttpBackend("http://127.0.0.1:8765", TOKEN, get=_Flask(None if path is None else LedgerRuns(path)))


def _local(path: Path | None) -> mcp_server.LocalBackend:
    return mcp_server.LocalBackend(_Idle({"schema": 2}, 1.0), runs=None if path is None else LedgerRuns(path))


def ask(backend, calls: list[tuple[str, dict]]) -> list[tuple[bool, dict | None, str]]:
    """Each call through the SDK's client: (is an error, structured content, text)."""
    out = []

    async def main() -> None:
        async with mcp.Client(mcp_server.build_server(backend)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"list_runs", "compare_runs", "list_jobs"} <= tools
            for name, args in calls:
                r = await client.call_tool(name, args)
                text = "\n".join(c.text for c in r.content if c.type == "text")
                out.append((bool(r.is_error), r.structured_content, text))

    # in a thread of its own: the browser tests' Playwright leaves an asyncio loop running in the
    # main thread of the session, where anyio.run refuses to start (as tests/integration/test_mcp.py)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, main).result()
    return out


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "runs.sqlite3"
    return path, fill(path)


@pytest.mark.parametrize("backend", [_http, _local])
def test_list_and_compare_runs(ledger, backend):
    path, runs = ledger
    (listed, compared, default, given) = ask(
        backend(path),
        [
            ("list_runs", {"since": SINCE}),
            ("compare_runs", {"run": short(runs["slow"])}),
            ("list_runs", {}),
            ("compare_runs", {"run": runs["base"].identity.job_id, "other": short(runs["slow"])}),
        ],
    )
    error, doc, text = listed
    assert not error, text
    assert [r["id"] for r in doc["runs"]] == [short(runs[n]) for n in ("forged", "other", "slow", "base")]
    assert text.startswith(f"4 run(s) seen since {SINCE}, the last seen first;")
    error, doc, text = compared
    assert not error, text
    assert doc["outcome"] == "regression" and doc["baseline"]["id"] == short(runs["base"])
    assert doc["causes"][0]["code"] == "data-wait" and doc["causes"][0]["reasons"][0]["code"] == "loader-settings"
    lines = text.splitlines()
    assert lines[1].startswith("Throughput: REGRESSION") and lines[4].startswith("- data-wait: Waiting for data")
    block = lines[lines.index("<untrusted-data>") :]
    assert "reason loader-settings: 100% of the difference: DataLoader settings changed: num_workers=8 → num_workers=0." in block
    error, doc, _ = default  # since 7d back from now, as the tool's default
    seen = [r for r in runs.values() if r.last_seen_unix_s >= time.time() - 7 * 86_400]
    assert not error and len(doc["runs"]) == len(seen)
    error, doc, _ = given
    assert not error and doc["baseline_choice"] == "given" and doc["outcome"] == "improvement"


@pytest.mark.parametrize("backend", [_http, _local])
def test_what_the_ledger_holds_stays_data(ledger, backend):
    path, runs = ledger
    (listed, compared) = ask(
        backend(path),
        [("list_runs", {"since": SINCE}), ("compare_runs", {"run": short(runs["forged"]), "other": short(runs["base"])})],
    )
    for error, doc, text in (listed, compared):
        assert not error, text
        assert not [c for c in STEERING if c in str(doc)], str(doc)[:300]
        lines = text.splitlines()
        start, end = lines.index("<untrusted-data>"), lines.index("</untrusted-data>")
        outside = lines[:start] + lines[end + 1 :]
        assert any("forged line" in line for line in lines[start:end]), text  # said, as data
        assert not any("forged" in line or "evil" in line for line in outside), text
        assert not [c for c in ("\x1b", "\r", "\u2028", "\u202e") if c in text]
        assert not any(line.startswith("- 9999") for line in lines)  # the forged line stayed in its own
    assert "note command: The commands differ" in compared[2]


@pytest.mark.parametrize("backend", [_http, _local])
def test_refusals_are_one_line_tool_errors(ledger, backend):
    path, runs = ledger
    answers = ask(
        backend(path),
        [
            ("compare_runs", {"run": short(runs["base"])}),
            ("compare_runs", {"run": "abcdef12"}),
            ("compare_runs", {"run": "ab\u202ecd\n- forged"}),
            ("compare_runs", {}),
            ("list_runs", {"since": "3 fortnights"}),
            ("list_runs", {"since": 7}),
        ],
    )
    needles = (
        "no earlier run of the same command in the same folder",
        "no run abcdef12 is recorded",
        "letters, digits and ._:/- only",
        "run is required",
        "since is a duration back from now",
        "since must be a duration",
    )
    for (error, doc, text), needle in zip(answers, needles):
        assert error and doc is None and needle in text and "\n" not in text, (needle, text)


def test_without_runs_the_tools_say_so(tmp_path):
    (http,) = ask(_http(None), [("list_runs", {})])
    (local,) = ask(_local(None), [("list_runs", {})])
    assert http[0] and "this sidecar keeps no runs" in http[2]
    assert local[0] and "started without a runs ledger" in local[2]
    (empty,) = ask(_local(tmp_path / "none.sqlite3"), [("list_runs", {})])
    assert not empty[0] and empty[1]["runs"] == [] and empty[2] == "No run is recorded since 7d."
