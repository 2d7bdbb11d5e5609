"""A real Prometheus (the Debian package) on a free loopback port with a temporary storage directory,
for the tests that scrape real sidecars (tests/integration/test_prometheus.py, test_cluster.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.harness import REPO, wait_for

PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None
)
# The marks of a test module that runs a real Prometheus (DSH_REQUIRE_ALL=1 turns the skip into a failure).
NEEDS_PROMETHEUS = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="the prometheus binary is not installed (Debian: apt-get install prometheus; scripts/test.sh does it)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, config: Path, directory: Path):
        self.log = directory / "prometheus.log"
        for _attempt in range(3):  # another process may take the free port before we bind it
            self.port = free_port()
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(
                    [
                        PROMETHEUS,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={directory / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            self.url = f"http://127.0.0.1:{self.port}"
            try:
                wait_for(self._ready, 30, 0.2, "Prometheus to be ready")
                return
            except AssertionError:
                self.stop()
                if "address already in use" not in self.log.read_text():
                    raise AssertionError(
                        f"Prometheus did not start: {self.log.read_text()[-3000:]}"
                    ) from None
        raise AssertionError("no free port for Prometheus after 3 tries")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"Prometheus exited with {self.proc.returncode}")
        with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
            return r.status == 200

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        data = self.api("query", query=promql)
        assert data["resultType"] == "vector", data
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _replace_once(text: str, old: str, new: str, where: str = "deploy/prometheus.yml") -> str:
    assert text.count(old) == 1, f"{where} no longer has exactly one {old!r}"
    return text.replace(old, new)


def accounting_rules_copy(directory: Path, interval_s: int, held_idle_for_s: int) -> Path:
    """deploy/dsh-accounting.yml in `directory`, its minute made `interval_s` seconds (the group's
    interval, the ranges and the seconds a value covers, which must stay equal) and DshGpuHeldIdle's
    `for` `held_idle_for_s`: a test cannot wait a minute per rule evaluation."""
    text = (REPO / "deploy" / "dsh-accounting.yml").read_text()
    text = _replace_once(text, "    interval: 1m", f"    interval: {interval_s}s", "deploy/dsh-accounting.yml")
    assert text.count("[1m]") == 4 and text.count(") * 60") == 2, "deploy/dsh-accounting.yml's minute moved"
    text = text.replace("[1m]", f"[{interval_s}s]").replace(") * 60", f") * {interval_s}")
    text = _replace_once(text, "        for: 30m", f"        for: {held_idle_for_s}s", "deploy/dsh-accounting.yml")
    path = directory / "dsh-accounting.yml"
    path.write_text(text)
    return path


def shipped_config(
    directory: Path, targets: list[tuple[int, str | None]], token: str, *, accounting_interval_s: int = 1,
    held_idle_for_s: int = 1800,
) -> Path:
    """deploy/prometheus.yml with its /etc paths moved to `directory` and 1 s intervals, scraping the
    sidecars on loopback `targets` ((port, node label or None for the host name)) with `token`; its
    rule files beside it, the accounting rules' minute made `accounting_interval_s` seconds."""
    (directory / "targets").mkdir()
    entries = [
        {"targets": [f"127.0.0.1:{port}"], **({"labels": {"node": node}} if node else {})}
        for port, node in targets
    ]
    (directory / "targets" / "sidecars.json").write_text(json.dumps(entries))
    token_file = directory / "dsh-sidecar.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    text = (REPO / "deploy" / "prometheus.yml").read_text()
    text = _replace_once(text, "/etc/prometheus/dsh-sidecar.token", str(token_file))
    text = _replace_once(text, "/etc/prometheus/dsh-targets/*.json", str(directory / "targets" / "*.json"))
    text = _replace_once(text, "  scrape_interval: 15s", "  scrape_interval: 1s")
    text = _replace_once(text, "  evaluation_interval: 15s", "  evaluation_interval: 1s")
    text = _replace_once(text, "    scrape_interval: 5s", "    scrape_interval: 1s")
    text = _replace_once(text, "    scrape_timeout: 4s", "    scrape_timeout: 1s")
    shutil.copy(REPO / "deploy" / "dsh-alerts.yml", directory / "dsh-alerts.yml")
    accounting_rules_copy(directory, accounting_interval_s, held_idle_for_s)
    path = directory / "prometheus.yml"
    path.write_text(text)
    return path
