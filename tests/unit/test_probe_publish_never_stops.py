"""Issue 12 item 9: no string stops the probe publishing, and a publish that fails says so.

A script path in Latin-1, ``CUDA_VISIBLE_DEVICES=$'0\\xff'`` or ``probe.event('ev\\udcff')`` made
every later publish fail, silently, and the sidecar then asked a script that calls register() to
call it. Each scenario runs in its own interpreter, with bytes in its environment and argv that
are not UTF-8, and reads its own segment as the sidecar does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

NON_UTF8 = """
import json, sys, torch, probe
from probe_wire import read_segment
model = probe.register(torch.nn.Linear(2, 2), name="net")
probe.event("ev\\udcff")
model(torch.ones(1, 2))
probe.refresh()
r = read_segment(__import__("os").getpid())
net = [m for m in r.payload["models"] if m["name"] == "net"][0]
print(json.dumps({"state": r.state, "cvd": r.payload["runtime"]["cuda_visible_devices"],
                  "argv0": r.payload["argv0"], "events": [e["name"] for e in r.payload["events"]],
                  "calls": net["forward_calls"], "errors": r.payload["errors"]}))
"""

FAILING = """
import json, os, torch, probe
from probe import facts
from probe_wire import read_segment
model = probe.register(torch.nn.Linear(2, 2), name="net")
facts.runtime = lambda torch: {"torch": object()}  # a fact msgpack cannot carry
probe.refresh()
r = read_segment(os.getpid())
print(json.dumps({"state": r.state, "models": r.payload["models"], "errors": r.payload["errors"]}))
"""


def run(code: str, script_dir: Path) -> dict:
    script = script_dir / "caf\xe9.py"  # a Latin-1 name: b"caf\\xe9.py" on disk
    script_path = os.fsencode(script_dir) + b"/caf\xe9.py"
    with open(script_path, "w") as f:
        f.write(code)
    env = dict(os.environb)
    env.update({b"PYTHONPATH": os.fsencode(REPO), b"CUDA_VISIBLE_DEVICES": b"0\xff", b"DSH_PROBE_INTERVAL_S": b"600"})
    out = subprocess.run([os.fsencode(sys.executable), script_path], env=env, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    assert script.name  # keeps the name readable in a failure
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def test_strings_that_are_not_utf8_are_published_with_replacement_characters(tmp_path):
    r = run(NON_UTF8, tmp_path)
    assert r["state"] == "ok" and r["errors"] == []
    assert r["cvd"] == "0?" and r["argv0"].endswith("caf?.py") and "ev?" in r["events"]
    assert r["calls"] == 1  # publishing goes on after them


def test_a_payload_that_cannot_be_published_is_replaced_by_the_error(tmp_path):
    r = run(FAILING, tmp_path)
    assert r["state"] == "ok" and r["models"] == []
    assert r["errors"][-1]["where"] == "publish-failed" and "TypeError" in r["errors"][-1]["message"]
