"""Every route and every `dsh-sidecar` command that README.md and docs/*.md show works as written.

Routes: each path the docs give the sidecar (`GET /...`, a bare `/name` such as `/metrics`, a URL on
the sidecar's port, `/api/dsh-gpu-dashboard/...` anywhere) is requested from a real sidecar on
loopback, started with --prometheus (a tiny one, tests/helpers/fake_prometheus.py) so that the
cluster route is on too: none may answer 404 or 405. A shorthand (`/jobs` for
`/api/dsh-gpu-dashboard/jobs`) is a route no one can request, and fails. The first segments of
filesystem and cgroup paths (`/dev/shm`, `/proc/<pid>`, `/kubepods`) are no routes; the DSH
plugin's own routes (`/dsh-gpu-dashboard/api/...`, served by DSH) are dsh_plugin/test's.

Commands: each `dsh-sidecar ...` in a code block or a backtick span (with `\\` continuations, and a
Kubernetes `command: ["dsh-sidecar", ...]` array) names a subcommand the CLI has and only flags its
real argparse parser (sidecar/cli/args.py) knows; after `run`'s `--` comes the job's command.

Each checker is tried on planted wrong text too, so an empty answer means something.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.cli import args as cli_args
from sidecar.cli import args_runs as cli_args_runs
from tests.helpers.fake_prometheus import FakePrometheus, two_nodes_and_a_silent_one
from tests.helpers.harness import Sidecar

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# First segments (up to a dot) of paths the docs name that are files, cgroups, shared-memory names
# or placeholders, not routes.
NOT_ROUTES = frozenset(
    {"dev", "proc", "sys", "etc", "tmp", "var", "usr", "opt", "home", "run", "root", "path"}
    | {"host"}  # a container's mount of the host's /proc and /sys (--path.procfs /host/proc)
    | {"kube", "kubepods", "kubelet", "user", "dsh-probe"}
)
# Other servers' routes the docs name, each with whose it is.
OTHER_SERVERS = {
    "/api": "DSH's own API",
    "/api/v1/query": "Prometheus's HTTP API",
}
PLUGIN_ROUTES = "dsh-gpu-dashboard"  # /dsh-gpu-dashboard/api/...: DSH serves them (docs/dsh-plugin.md)

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_FENCE = re.compile(r"^\s*```")
_SPAN = re.compile(r"`([^`]+)`")
_URL = re.compile(r"https?://[\w.\-\[\]:]+?:(\d+)(/[^\s`'\")<>\]]*)?")
_BARE = re.compile(r"(?:(?<=^)|(?<=[\s`(\"']))(/[A-Za-z0-9_][^\s`'\"()<>,;|]*)")
_GET_ROOT = re.compile(r"\b(?:GET|HEAD) /(?=[\s`]|$)")
_COMMAND = re.compile(r"(?:(?<=^)|(?<=[\s`(]))(?:[\w.~$/-]*/)?dsh-sidecar(?=\s|$)")
_YAML_ARRAY = re.compile(r"\[\s*\"dsh-sidecar\"")
SUBCOMMANDS = {
    None: cli_args.serve_parser,
    "run": cli_args.run_parser,
    "doctor": cli_args.doctor_parser,
    "mcp": cli_args.mcp_parser,
    "cluster": cli_args.cluster_parser,
    "report": cli_args_runs.report_parser,
    "runs": cli_args_runs.runs_parser,
    "compare": cli_args_runs.compare_parser,
}


def _route(path: str) -> str:
    """The path alone: no `[optional part]`, query, fragment or trailing punctuation."""
    path = re.split(r"[\[?#]", path, maxsplit=1)[0]
    return path.rstrip(".:,") or "/"


def route_mentions(text: str, port: int = cli_args.DEFAULT_PORT) -> list[tuple[int, str]]:
    """(line, route) for each sidecar route the text names."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(_COMMENT.sub("", text).splitlines(), 1):
        for m in _URL.finditer(line):
            if int(m.group(1)) == port:
                found.append((number, _route(m.group(2) or "/")))
        without_urls = _URL.sub(" ", line)
        found += [(number, "/") for _ in _GET_ROOT.finditer(without_urls)]
        for m in _BARE.finditer(without_urls):
            route = _route(m.group(1))
            first = route.split("/")[1]
            if route.endswith("/"):
                continue  # a prefix (`under /api/dsh-gpu-dashboard/`) names the routes below it, not one
            if (
                first.split(".")[0] not in NOT_ROUTES
                and first != PLUGIN_ROUTES
                and route not in OTHER_SERVERS
            ):
                found.append((number, route))
    return found


def _code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line, text to look for commands in): a code block's lines, `\\` continuations joined and
    comments dropped, a `["dsh-sidecar", ...]` array as its words; elsewhere each backtick span."""
    in_code, pending, start = False, "", 0
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if _FENCE.match(line):
            in_code = not in_code
            continue
        if not in_code:
            yield from ((number, m.group(1)) for m in _SPAN.finditer(line))
            continue
        line = re.sub(r"(^|\s)#.*$", "", line)
        pending, start = (pending + " " + line, start) if pending else (line, number)
        if _YAML_ARRAY.search(pending) and "]" not in pending.split('"dsh-sidecar"', 1)[1]:
            continue  # the array goes on
        if pending.rstrip().endswith("\\"):
            pending = pending.rstrip()[:-1]
            continue
        array = _YAML_ARRAY.search(pending)
        if array:
            words = json.loads(pending[array.start() : pending.index("]", array.start()) + 1])
            pending = " ".join(words)
        yield start, pending
        pending = ""


def command_mentions(text: str) -> list[tuple[int, list[str]]]:
    """(line, the words after `dsh-sidecar`) for each command the text shows, to its end (a
    comment, a pipe, `;`, `&&`, the span's end); not a name given to a flag (`docker --name
    dsh-sidecar`) or a Kubernetes object (`secret generic dsh-sidecar`); after a launcher's own
    flags (`srun --ntasks-per-node=1 dsh-sidecar run ...`) it is the command."""
    found = []
    for number, chunk in _code_lines(text):
        for m in _COMMAND.finditer(chunk):
            before = chunk[: m.start()].split()
            if before and ((before[-1].startswith("-") and "=" not in before[-1]) or before[-1] == "generic"):
                continue  # the value of another program's flag (`--name dsh-sidecar`), or a secret's name
            words, depth = [], 0
            for word in chunk[m.end() :].split():
                if word in (";", "&&", "||") or (word == "|" and depth == 0):
                    break
                if word == "dsh-sidecar" or word.endswith("/dsh-sidecar"):
                    break  # the next command (two in one span)
                depth += word.count("[") - word.count("]")
                words.append(word.strip("[]\"'"))
            found.append((number, [w for w in words if w]))
    return found


def command_problems(text: str) -> list[str]:
    """Each unknown subcommand or flag, one line each, checked by the CLI's own parsers."""
    problems = []
    for number, words in command_mentions(text):
        sub = words[0] if words and re.fullmatch(r"[a-z]+", words[0]) else None
        if sub is not None and sub not in SUBCOMMANDS:
            problems.append(f"line {number}: dsh-sidecar {sub}: no such command")
            continue
        known = SUBCOMMANDS[sub]()._option_string_actions
        for word in words[1 if sub else 0 :]:
            if word == "--" and sub == "run":
                break  # the job's own command
            flag = word.split("=", 1)[0].rstrip(",.:)")
            if flag.startswith("-") and flag not in ("-", "--", "...") and flag not in known:
                problems.append(
                    f"line {number}: dsh-sidecar {sub or ''} {flag}: no such flag".replace("  ", " ")
                )
    return problems


def test_every_command_in_the_docs_has_its_subcommand_and_flags() -> None:
    counted = 0
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        counted += len(command_mentions(text))
        assert command_problems(text) == [], doc.relative_to(REPO)
    assert counted >= 40, "the docs show the commands; an extractor that finds few is broken"


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    env = {k: v for k, v in os.environ.items() if k != "DSH_PROMETHEUS_URL"}
    env["LD_LIBRARY_PATH"] = "/nonexistent"  # no NVML: the routes, not the GPUs
    env["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))  # the runs routes read a ledger there
    with (
        FakePrometheus(two_nodes_and_a_silent_one()) as prometheus,
        Sidecar(["--pid", str(os.getpid()), "--port", "0", "--prometheus", prometheus.url], env=env) as sc,
    ):
        sc.wait_status(lambda doc: doc, what="a first poll")
        yield sc


def test_every_route_in_the_docs_answers_on_a_real_sidecar(sidecar: Sidecar) -> None:
    mentions: dict[str, list[str]] = {}
    for doc in DOCS:
        for number, route in route_mentions(doc.read_text(encoding="utf-8")):
            mentions.setdefault(route, []).append(f"{doc.relative_to(REPO)}:{number}")
    assert {"/", "/healthz", "/metrics", "/api/dsh-gpu-dashboard/jobs"} <= set(mentions), sorted(mentions)
    missing = {
        route: (code, where)
        for route, where in mentions.items()
        if (code := sidecar.get(route, timeout_s=10)[0]) in (404, 405)
    }
    assert missing == {}, "routes the docs give that the sidecar does not serve"
    assert sidecar.get("/jobs")[0] == 404  # what a shorthand gets (with the token: not a 401)


def test_the_checkers_find_what_is_wrong() -> None:
    planted = (
        "Run `dsh-sidecar --pid PID --bogus` or `dsh-sidecar serve`; `dsh-sidecar run --once -- x --y`.\n"
        "```bash\n"
        "dsh-sidecar doctor --python PY   # /jobs lists them\n"
        "dsh-sidecar cluster \\\n"
        "    --prometheus URL --nodes 3\n"
        "docker run --name dsh-sidecar --pid=host image dsh-sidecar --pid 1 --hots 0.0.0.0\n"
        "srun --ntasks-per-node=1 dsh-sidecar run --job-name J --nnodes 2 -- torchrun --nnodes 2\n"
        "```\n"
        "```yaml\n"
        'command: ["dsh-sidecar", "run", "--port", "8765",\n'
        '          "--gracee", "30", "--", "torchrun", "--nproc-per-node=8"]\n'
        "```\n"
        "See `GET /api/dsh-gpu-dashboard/status[?job=ID]`, `GET /`, http://node:8765/metrics, /dev/shm/x,\n"
        "http://prometheus:9090/api/v1/query and `/dsh-gpu-dashboard/api/jobs` (DSH's). <!-- /gone -->\n"
        "Documents under `/api/dsh-gpu-dashboard/`.\n"
    )
    assert command_problems(planted) == [
        "line 1: dsh-sidecar --bogus: no such flag",
        "line 1: dsh-sidecar serve: no such command",
        "line 1: dsh-sidecar run --once: no such flag",
        "line 4: dsh-sidecar cluster --nodes: no such flag",
        "line 6: dsh-sidecar --hots: no such flag",
        "line 7: dsh-sidecar run --nnodes: no such flag",
        "line 10: dsh-sidecar run --gracee: no such flag",
    ]
    assert sorted(route_mentions(planted)) == [
        (3, "/jobs"),
        (13, "/"),
        (13, "/api/dsh-gpu-dashboard/status"),
        (13, "/metrics"),
    ]


def _block_with(text: str, needle: str) -> str:
    """The fenced code block of `text` that holds `needle`."""
    blocks: list[str] = re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M)
    for block in blocks:
        if needle in block:
            return block
    raise AssertionError(f"no code block holds {needle!r}")


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed"
)
def test_deploy_md_prometheus_install_step_passes_promtool_as_written(tmp_path: Path) -> None:
    """docs/deploy.md's install step, run as written with /etc/prometheus moved to a temporary
    folder (and the file given to the current user rather than `prometheus`), makes
    `promtool check config deploy/prometheus.yml` pass; without it the check fails, as the doc says."""
    etc = tmp_path / "etc" / "prometheus"
    etc.mkdir(parents=True)
    config = tmp_path / "deploy" / "prometheus.yml"
    config.parent.mkdir()
    config.write_text((REPO / "deploy" / "prometheus.yml").read_text().replace("/etc/prometheus", str(etc)))
    for rules in ("dsh-alerts.yml", "dsh-accounting.yml"):  # the rule files, next to it
        shutil.copy(REPO / "deploy" / rules, config.parent)
    block = _block_with((REPO / "docs" / "deploy.md").read_text(encoding="utf-8"), "promtool check config")
    assert "dsh-sidecar.token" in block, "the block installs the token file the config reads"
    script = block.replace("/etc/prometheus", str(etc)).replace(
        "chown prometheus:prometheus", f"chown {os.getuid()}:{os.getgid()}"
    )
    env = {**os.environ, "DSH_SIDECAR_TOKEN": "a-token-of-the-sidecars-0123456789"}

    def run(commands: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", commands],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    before = run("promtool check config deploy/prometheus.yml")
    assert before.returncode != 0 and "dsh-sidecar.token" in before.stdout + before.stderr
    r = run(script)
    assert r.returncode == 0, r.stdout + r.stderr
    token = etc / "dsh-sidecar.token"
    assert token.read_text() == env["DSH_SIDECAR_TOKEN"] and token.stat().st_mode & 0o777 == 0o600
