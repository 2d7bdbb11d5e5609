"""Real processes for integration and browser tests: a fake job tree publishing probe facts, and
a real `dsh-sidecar` started as a subprocess, talked to over loopback HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
API = "/api/dsh-gpu-dashboard"
RUNS_DB_ENV = "DSH_RUNS_DB"


_runs_ledger: str | None = None


def temporary_runs_ledger() -> str:
    """Points $DSH_RUNS_DB (--runs-db's default) at a temporary file of this process's, removed at
    its exit: every sidecar a test or a benchmark starts records its runs there (recording is on
    by default), never in the user's own ledger (even one $DSH_RUNS_DB names), nor root's /var/lib."""
    global _runs_ledger
    if _runs_ledger is None:
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="dsh-test-runs-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _runs_ledger = os.path.join(folder, "runs.sqlite3")
    os.environ[RUNS_DB_ENV] = _runs_ledger
    return _runs_ledger


def wait_for(
    pred: Callable[[], Any], timeout_s: float = 15.0, interval_s: float = 0.1, what: str = "condition"
):
    deadline = time.monotonic() + timeout_s
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 -- the condition may read a file or URL that is not there yet
            last_exc = exc
        time.sleep(interval_s)
    raise AssertionError(
        f"timed out after {timeout_s} s waiting for {what}"
        + (f" (last error: {last_exc})" if last_exc else "")
    )


def python_env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = dict(base if base is not None else os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


class FakeJob:
    """A tree of `tests.helpers.fake_job` processes, described by name → spec. With `detach`, the
    root is started through a shell that exits at once, so its parent is init (or a subreaper), not
    this test process: discovery groups a job under its topmost probed ancestor, and the test
    process may run a probe of its own."""

    def __init__(
        self,
        directory: Path,
        specs: dict[str, dict],
        root: str = "main",
        env: Mapping[str, str] | None = None,
        detach: bool = False,
        cwd: str | os.PathLike[str] | None = None,
    ):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root = root
        for name, spec in specs.items():
            self.update(name, spec)
        cmd = [sys.executable, "-m", "tests.helpers.fake_job", str(self.dir), root]
        env = python_env(base=env)
        if detach:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
            subprocess.run(
                ["sh", "-c", '"$@" </dev/null >/dev/null 2>&1 &', "sh", *cmd],
                env=env,
                cwd=cwd or REPO,
                check=True,
            )
            self.proc = None
        else:
            self.proc = subprocess.Popen(cmd, env=env, cwd=cwd or REPO)
        self.names = list(specs)
        self.pids = {n: wait_for(lambda n=n: self._pid(n), what=f"fake job {n} to start") for n in specs}

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.dir / f"{name}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def update(self, name: str, spec: dict) -> None:
        tmp = self.dir / f"{name}.json.tmp"
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, self.dir / f"{name}.json")

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else self.pids[self.root]

    def stop(self) -> None:
        if self.proc is None:
            self._stop_detached()
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _stop_detached(self) -> None:
        from hostfs.procid import process_identity

        ident = process_identity(self.pid)
        if ident is None:
            return
        os.kill(self.pid, signal.SIGTERM)
        try:
            wait_for(lambda: process_identity(self.pid) != ident, 10, what=f"detached job {self.pid} to exit")
        except AssertionError:
            os.kill(self.pid, signal.SIGKILL)

    def __enter__(self) -> FakeJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Sidecar arguments for tests that read a fresh job's per-job series in /metrics: a job has them
# from its first poll instead of after --metrics-min-job-age (tests/unit/test_metrics_bounds.py and
# tests/stress/test_metrics_cardinality.py test that gate itself).
METRICS_AT_ONCE = ("--metrics-min-job-age", "0")


class Sidecar:
    """`python -m sidecar.cli ...` on a free port; `.status()`, `.history()`, `.wait_status()`."""

    def __init__(
        self,
        args: list[str],
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        as_uid: int | None = None,
    ):
        self.token = token
        # as_uid: the sidecar of another (real) user, started through setpriv
        user = (
            [] if as_uid is None else ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups"]
        )
        self.proc = subprocess.Popen(
            [*user, sys.executable, "-m", "sidecar.cli", *args],
            env=python_env(base=env),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.err_lines: list[str] = []
        self._url = threading.Event()
        self.url: str | None = None
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines, True), daemon=True).start()
        threading.Thread(
            target=self._read, args=(self.proc.stderr, self.err_lines, False), daemon=True
        ).start()
        if not self._url.wait(30):
            self.stop()
            raise AssertionError(f"sidecar did not start: {self.lines} {self.err_lines}")

    def _read(self, stream, sink: list[str], find_url: bool) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))
            if not find_url:
                continue
            if "?token=" in line and "<your token>" not in line and self.token is None:
                # the token a root sidecar made for itself (printed last, after "serving")
                self.token = line.rstrip().rsplit("?token=", 1)[1]
            if line.startswith("dsh-sidecar: serving "):
                self.url = line.split()[2].rstrip("/")
            # Started once the last line of its announcement is out: the "serving" line, or the
            # address with the token that it says comes below.
            if (self.url and "?token=" in line) or (
                line.startswith("dsh-sidecar: serving ") and "below)" not in line
            ):
                self._url.set()

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                body = r.read()
                return r.status, json.loads(
                    body
                ) if r.headers.get_content_type() == "application/json" else body
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                return e.code, json.loads(body)
            except ValueError:
                return e.code, body

    def status(self) -> dict:
        code, body = self.get(f"{API}/status")
        assert code == 200, body
        return body

    def history(self, since: float | None = None) -> dict:
        code, body = self.get(f"{API}/history" + (f"?since={since}" if since is not None else ""))
        assert code == 200, body
        return body

    def wait_status(self, pred: Callable[[dict], Any], timeout_s: float = 20.0, what: str = "status") -> dict:
        last: dict = {}

        def check():
            nonlocal last
            code, body = self.get(f"{API}/status")
            if code != 200:
                return None
            last = body
            return body if pred(body) else None

        try:
            return wait_for(check, timeout_s, 0.2, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last status: {json.dumps(last)[:3000]}") from None

    def stop(self, sig_term: bool = True) -> int:
        if self.proc.poll() is None:
            self.proc.terminate() if sig_term else self.proc.kill()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> Sidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def codes(doc: dict) -> set[str]:
    return {w["code"] for w in doc["warnings"]}


def cuda_runtime(uuids: list[str], **over: Any) -> dict[str, Any]:
    """The runtime facts a CUDA build of torch on a GPU machine publishes."""
    rt = {
        "torch": "2.5.1+cu124",
        "cuda_build": "12.4",
        "cudnn": 90100,
        "cuda_available": True,
        "cuda_initialized": True,
        "device_count": len(uuids),
        "devices": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "uuid": u} for i, u in enumerate(uuids)],
    }
    rt.update(over)
    return rt
