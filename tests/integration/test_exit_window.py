"""Issue 11: the last state keeps the probe when a job exits.

The probe closes its segment at exit (atexit) while the process still lives through interpreter
teardown; a poll in that window used to record "no probe", and the final status read "UNKNOWN ...
no probe in the job". The job below holds that window open for 0.8 s after the probe closed (an
atexit handler registered before ``import probe`` runs after the probe's), with the sidecar polling
every 0.1 s: every poll in the window falls in it.
"""

from __future__ import annotations

import sys

import pytest

from tests.helpers.harness import Sidecar, codes

pytest.importorskip("torch")

JOB = """
import atexit, time
atexit.register(time.sleep, {linger_s})  # runs after the probe's own atexit handler
import torch, probe
model = probe.register(torch.nn.Linear(4, 2), name="exit-window")
for _ in range(20):
    model(torch.ones(8, 4))
    time.sleep(0.02)
"""


def final_status(linger_s: float, tmp_path) -> dict:
    args = ["run", "--interval", "0.1", "--grace", "5", "--port", "0", "--", sys.executable, "-c"]
    with Sidecar([*args, JOB.format(linger_s=linger_s)]) as sc:
        return sc.wait_status(lambda d: not d["target"]["alive"], timeout_s=60, what="the job's exit")


def assert_probed(doc: dict) -> None:
    assert "no-probe" not in codes(doc) and doc["status"] != "UNKNOWN", (doc["status"], doc["message"])
    target = [p for p in doc["processes"] if p["pid"] == doc["target"]["pid"]][0]
    assert [m["name"] for m in target["models"]] == ["exit-window"]


def test_a_poll_between_the_probe_closing_and_the_exit_keeps_the_last_facts(tmp_path):
    assert_probed(final_status(0.8, tmp_path))


@pytest.mark.slow
def test_short_runs_never_end_without_their_probe(tmp_path):
    for _ in range(4):
        assert_probed(final_status(0.0, tmp_path))
