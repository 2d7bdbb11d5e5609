"""The probe across real processes: DataLoader workers (fork, spawn), forked and spawned children,
exit and kill, DSH_PROBE=0, a missing posix_ipc, and what ``import probe`` costs.

Each scenario runs in its own interpreter (tests/helpers/probe_scenarios.py) and reports JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probe_wire import has_live_segment, read_segment, remove_segment, segment_path
from probe_wire.cleanup import remove_if_dead
from probe_wire.header import DEFAULT_SEGMENT_BYTES, FIELDS, FIELDS_OFFSET, FLAG_CLOSED, FLAGS, FLAGS_OFFSET

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


def run_scenario(*args: str, env: dict | None = None, timeout_s: float = 120, expect_rc: int = 0) -> dict:
    full_env = dict(os.environ)
    full_env.pop("DSH_PROBE", None)
    full_env["PYTHONPATH"] = str(REPO)
    # The parent publishes only when told to: a seq that moves was moved by somebody else.
    full_env["DSH_PROBE_INTERVAL_S"] = "600"
    full_env.update(env or {})
    out = subprocess.run(
        [sys.executable, "-m", "tests.helpers.probe_scenarios", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert out.returncode == expect_rc, (
        f"rc {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr[-4000:]}"
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stdout + out.stderr[-4000:]
    return json.loads(lines[-1])


def expected_parent_role() -> str:
    # A scenario's parent is this test process: if it runs the probe too, the scenario is its "child".
    return "child" if has_live_segment(os.getpid()) else "main"


@pytest.mark.slow
@pytest.mark.parametrize(
    "start_method, register_loader",
    [("fork", "1"), ("spawn", "1"), ("fork", "0")],
    ids=["fork", "spawn", "fork-loader-not-registered"],
)
def test_dataloader_workers_publish_their_own_segments(tmp_path, start_method, register_loader):
    report = run_scenario(
        "loader", start_method, register_loader, env={"PROBE_TEST_MARKER_DIR": str(tmp_path)}, timeout_s=150
    )
    parent = report["parent_pid"]
    worker_pids = report["worker_pids"]
    assert len(worker_pids) == 2
    assert sorted(report["workers"]) == sorted(str(p) for p in worker_pids), "a worker never published"
    seen_ids = set()
    for wpid, w in report["workers"].items():
        p = w["payload"]
        assert w["writer_pid"] == int(wpid) == p["pid"]
        assert p["role"] == "dataloader-worker"
        assert p["ppid"] == parent
        assert p["models"] == []  # the trainer's models (copied into a forked worker) are not the worker's
        assert p["runtime"]["torch"]
        seen_ids.add(p["worker_id"])
    assert seen_ids == {0, 1}
    # The parent's segment: still the parent's, and never written by a worker (the parent did not
    # publish in between, so its seqlock counter did not move).
    during = report["parent_during"]
    assert during["state"] == "ok" and during["payload"]["pid"] == parent
    assert during["payload"]["role"] == expected_parent_role()
    assert during["seq"] == report["parent_before"]["seq"]
    # Loading was not disturbed, the user's worker_init_fn still ran, and workers cleaned up on exit.
    assert report["batches_ok"] is True
    assert sorted(f.name.split("-")[1] for f in tmp_path.iterdir()) == ["0", "1"]
    assert report["segments_left"] == []
    net = [m for m in report["parent_after"]["payload"]["models"] if m["name"] == "net"][0]
    assert net["forward_calls"] == 11
    if register_loader == "1":
        assert 0.0 < net["data_wait_fraction"] <= 1.0
        assert 0.0 < net["data_wait_s"] <= net["step_s"]
    else:
        assert net["data_wait_fraction"] is None


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_two_registered_loaders_load_as_without_the_probe(tmp_path, start_method):
    """Issue 11: spawn and forkserver workers crashed when the loader had no worker_init_fn."""
    report = run_scenario(
        "two_loaders", start_method, env={"PROBE_TEST_MARKER_DIR": str(tmp_path)}, timeout_s=200
    )
    assert report["batches_ok"] is True
    assert report["forward_calls"] == report["calls"] == 8
    # Persistent train workers (2) publish as workers; the user's worker_init_fn ran in the
    # validation worker once per epoch, after ours.
    assert len(report["worker_roles"]) == 2
    assert set(report["worker_roles"].values()) == {"dataloader-worker"}
    assert len([f for f in tmp_path.iterdir() if f.name.startswith("init-0-")]) == 2


@pytest.mark.slow
def test_spawned_workers_of_an_mp_spawn_rank_publish_without_loader_registered(tmp_path):
    """Issue 39 item 15: an mp.spawn rank registers its model alone; its DataLoader's workers start
    by spawn (the rank's start method) and never ran the probe, so they had no segment and no role,
    while the same loader's workers in a main process (forked) had both."""
    report = run_scenario("spawn_rank_loader", "1", env={"PROBE_TEST_MARKER_DIR": str(tmp_path)}, timeout_s=120)
    assert report["start_method"] == "spawn"
    assert len(report["worker_pids"]) == 2
    assert report["roles"] == {str(p): "dataloader-worker" for p in report["worker_pids"]}
    assert report["batches_ok"] is True
    # The user's worker_init_fn still ran in each worker (after ours), with its worker id.
    assert sorted(f.name.split("-")[1] for f in tmp_path.iterdir()) == ["0", "1"]


def test_forked_child_gets_its_own_segment_and_leaves_the_parents_alone():
    report = run_scenario("fork_child")
    parent, child = report["parent_pid"], report["child"]
    assert report["child_exit"] == 0
    assert child["state"] == "ok"
    cp = child["payload"]
    assert cp["pid"] == child["pid"] != parent and cp["ppid"] == parent
    assert cp["role"] == "child"
    (m,) = cp["models"]
    assert m["name"] == "forked-net" and m["forward_calls"] == 5  # the child's own calls only
    assert cp["events"] == [] and cp["errors"] == []
    assert report["child_segment_left"]  # its atexit left its final publish, closed...
    assert left_closed_with_its_final_publish(child["pid"])["models"][0]["forward_calls"] == 5
    before, after = report["parent_before"], report["parent_after"]
    assert after["state"] == "ok"  # ...and not the parent's
    assert after["seq"] == before["seq"] and after["payload"] == before["payload"]
    assert after["payload"]["models"][0]["forward_calls"] == 3
    assert report["parent_final_calls"] == 3


def test_spawned_child_that_imports_the_probe_is_a_child():
    report = run_scenario("spawn_child")
    child = report["child"]
    assert child["activated"] is True and child["state"] == "ok"
    assert child["payload"]["role"] == "child" and child["payload"]["ppid"] == report["parent_pid"]
    assert child["payload"]["runtime"]["torch"] is None  # it never imported torch, nor did the probe


def left_closed_with_its_final_publish(pid: int) -> dict:
    """A process whose last publish named models leaves that publish behind at exit, marked closed
    and shrunk to it, for a monitor whose next poll comes after the process's end (issue 25 item 1);
    a monitor's cleanup then removes it, its writer being provably dead. Returns the final payload."""
    path = Path(segment_path(pid))
    raw = path.read_bytes()
    assert len(raw) < DEFAULT_SEGMENT_BYTES, len(raw)  # a few KiB of /dev/shm, not the segment
    assert FLAGS.unpack_from(raw, FLAGS_OFFSET)[0] & FLAG_CLOSED
    r = read_segment(pid, expected_start_ticks=FIELDS.unpack_from(raw, FIELDS_OFFSET)[2])
    assert r.state == "missing" and r.payload is not None, (r.state, r.error)
    assert remove_if_dead(pid) and not path.exists()
    return r.payload


def test_normal_exit_leaves_only_its_final_publish():
    report = run_scenario("register_then", "return")
    assert report["state"] == "ok"
    pid = int(report["status"]["segment"].rsplit(".", 1)[1])
    assert left_closed_with_its_final_publish(pid)["models"]


def test_sys_exit_with_an_error_code_leaves_it_too():
    report = run_scenario("register_then", "exception", expect_rc=3)
    pid = int(report["status"]["segment"].rsplit(".", 1)[1])
    assert left_closed_with_its_final_publish(pid)["models"]


def test_sigkilled_process_leaves_a_segment_that_reads_stale_and_can_be_removed():
    report = run_scenario("register_then", "sigkill", expect_rc=-9)
    pid = int(report["status"]["segment"].rsplit(".", 1)[1])
    try:
        r = read_segment(pid)
        assert r.state == "stale" and "not running" in r.error
        # The last payload is intact for whoever knows the dead process's identity.
        r = read_segment(pid, expected_start_ticks=report["start_ticks"])
        assert r.state == "ok" and r.payload["events"][-1]["name"] == "about to exit"
    finally:
        assert remove_segment(pid, expected_start_ticks=report["start_ticks"]) is True


def test_dsh_probe_0_turns_everything_off():
    report = run_scenario("disabled", env={"DSH_PROBE": "0"})
    assert report["same_model"] is True
    assert report["hooks"] == 0
    assert report["activate"] is False and report["snapshot"] is None
    assert report["status"]["enabled"] is False and report["status"]["reason"] == "DSH_PROBE=0"
    assert report["segment_exists"] is False
    assert report["threads"] == ["MainThread"]
    assert report["output_shape"] == [1, 2]


def test_without_posix_ipc_register_warns_once_and_does_nothing():
    report = run_scenario("no_posix_ipc")
    assert len(report["warnings"]) == 1 and "posix_ipc" in report["warnings"][0]
    assert report["status"]["enabled"] is False and "posix_ipc" in report["status"]["reason"]
    assert report["segment_exists"] is False
    assert report["hooks"] == 0
    assert report["output_shape"] == [1, 2]


# What only a registered model, an event or a publish needs: loaded then, never by ``import probe``
# (probe/__init__.py says what the import loads; benchmarks/import_probe.py times it).
AFTER_REGISTER = (
    "probe._models",
    "probe._publisher",
    "probe.hooks",
    "probe.instrument",
    "probe.facts",
    "probe._distributed",
    "probe_wire.schema",
    "probe_wire.writer",
    "probe_wire.cleanup",
    "probe_wire.codec",
    "probe_wire.names",
    "msgpack",
    "posix_ipc",
)


def test_import_probe_is_light():
    report = run_scenario("import")
    assert report["heavy"] == []
    assert report["import_s"] < 0.5  # measured around 5-10 ms; generous for a loaded CI box
    assert "probe._state" in report["ours"]  # the control: the list is of what the import loaded
    assert [m for m in AFTER_REGISTER if m in report["ours"]] == []
    assert all(importlib.util.find_spec(m) for m in AFTER_REGISTER)  # each a module: no name misspelt
