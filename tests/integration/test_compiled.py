"""A model registered, then compiled (nanoGPT's order), in real processes: its calls are counted
through the compiled module, and where they cannot be (a registered block inlined into a compiled
parent) the sidecar's document says why and how to fix it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tests.helpers.harness import REPO, Sidecar, codes, python_env

pytestmark = pytest.mark.slow

CALLS = 12


def run_job(mode: str, backend: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tests.helpers.compiled_job", mode, backend, str(CALLS)],
        env=python_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0 and "torch.compile" not in out.stderr and "dynamo" not in out.stderr:
        raise AssertionError(out.stderr[-4000:])
    if out.returncode != 0:
        pytest.skip(f"torch.compile does not run here: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


BACKENDS = ["aot_eager"] + (["inductor"] if shutil.which("gcc") or shutil.which("cc") else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_registered_then_compiled_counts_every_call_in_a_fresh_process(backend):
    got = run_job("whole", backend)
    assert got["dynamo_before"] is False  # the probe turned counting on when dynamo was imported
    m = got["model"]
    assert (m["forward_calls"], m["compiled_uncounted"]) == (CALLS, False)
    assert m["last_forward_time"] is not None and len(got["losses"]) == CALLS


def test_sidecar_warns_when_a_registered_block_runs_inlined_in_a_compiled_parent(tmp_path, fake_nvml):
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.compiled_job", "inlined", "aot_eager", "0"],
        env=python_env({"DSH_PROBE_INTERVAL_S": "0.25"}),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.3"], env=fake_nvml.env()) as sc:
            doc = sc.wait_status(
                lambda d: "registered-before-compile" in codes(d), 120, what="the registered-before-compile warning"
            )
            w = next(w for w in doc["warnings"] if w["code"] == "registered-before-compile")
            assert "compiled-job" in w["message"] and w["pids"] == [job.pid]
            assert "probe.register(model)" in w["hint"] and "after `torch.compile`" in w["hint"]
            assert w["hint_ref"] == {"id": "hint.registered-before-compile", "params": {}}
            (m,) = [m for p in doc["processes"] for m in p["models"] if m["name"] == "compiled-job"]
            assert m["forward_calls"] == 0  # the reason the warning is there
    finally:
        job.kill()
        job.wait()
