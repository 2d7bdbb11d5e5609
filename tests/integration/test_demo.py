"""The README's first command: `./scripts/demo.sh` (a training job watched by the sidecar, with the
URL). Run here as the script's own last line (`dsh-sidecar run ... -- python scripts/demo_train.py`),
read from the script so the two cannot drift apart; the install steps before it are the venv's.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from probe_wire.names import list_segment_pids
from tests.helpers.harness import REPO, python_env, wait_for

pytest.importorskip("torch")

API = "/api/dsh-gpu-dashboard"


def demo_command(*train_args: str) -> list[str]:
    """demo.sh's `exec .venv/bin/dsh-sidecar run ...` line with a free port, this venv's programs and
    `train_args` for the script's "$@"."""
    line = next(
        ln
        for ln in (REPO / "scripts" / "demo.sh").read_text().splitlines()
        if ln.startswith("exec .venv/bin/")
    )
    line = line.replace('"${PORT:-8765}"', "0").replace('"$@"', shlex.join(train_args))
    bin_dir = Path(sys.executable).parent
    return [
        str(bin_dir / w[len(".venv/bin/") :]) if w.startswith(".venv/bin/") else w
        for w in shlex.split(line[5:])
    ]


class Demo:
    def __init__(self, fake_nvml) -> None:
        self.proc = subprocess.Popen(
            demo_command("--minutes", "2"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=python_env(base=fake_nvml.env()),
            cwd=REPO,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def url(self) -> str | None:
        line = next((ln for ln in self.lines if ln.startswith("dsh-sidecar: serving ")), None)
        return line.split()[2].rstrip("/") if line else None

    def get(self, path: str) -> dict:
        req = urllib.request.Request(self.url() + path)
        # run as root, the demo's sidecar makes a token and prints the page's address with it
        made = next((ln.rsplit("?token=", 1)[1] for ln in self.lines if "?token=" in ln), None)
        if made:
            req.add_header("Authorization", f"Bearer {made}")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)


def test_the_demo_shows_its_job_and_stops_cleanly_on_ctrl_c(fake_nvml):
    """The demo serves its job's verdict (the model, the main process and its two DataLoader
    workers), and Ctrl-C ends training, the workers and the sidecar: exit 0, no traceback from any
    of them, no segment left behind. A Ctrl-C that landed while a worker handed over a batch made
    that worker print a multiprocessing traceback, 2 runs in 5."""
    fake_nvml.write({"gpus": []})
    demo = Demo(fake_nvml)
    try:
        wait_for(
            lambda: any("epoch 1:" in ln for ln in demo.lines), 120, what=f"the first epoch: {demo.lines}"
        )

        def three_processes() -> dict | None:
            # The workers' probes publish a moment after the workers start: wait for their roles too.
            d = demo.get(f"{API}/status")
            return d if len(d["processes"]) == 3 and all(p["role"] for p in d["processes"]) else None

        doc = wait_for(three_processes, 30, what="the job's three probed processes")
        assert [m["name"] for p in doc["processes"] for m in p["models"]] == ["spiral-mlp"], doc["processes"]
        roles = sorted(p["role"] or "" for p in doc["processes"])
        assert roles == ["dataloader-worker", "dataloader-worker", "main"], roles
        pids = [p["pid"] for p in doc["processes"]]
        demo.proc.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reaches the sidecar, which passes it on
        assert demo.proc.wait(60) == 0, demo.lines
    finally:
        if demo.proc.poll() is None:
            demo.proc.kill()
            demo.proc.wait(10)
    demo.reader.join(10)  # every line, the workers' last included
    out = "\n".join(demo.lines)
    assert "demo_train: interrupted" in out and "the sidecar stops now" in out, out
    assert "Traceback" not in out, out
    left = set(pids) & set(list_segment_pids())
    assert not left, f"segments left behind: {left}"
