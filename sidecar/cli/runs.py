"""The runs ledger of a polling command (--pid, run, discovery): where it is (--runs-db, else the
default path), opened once; None where it is turned off (--no-runs, --once) or cannot be opened, which
is said once: the sidecar then serves live without recording, and never exits for it."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import cast

from sidecar.cli.args import host_paths
from sidecar.poll.recorder import Recording, RunRecorder, RunSink
from sidecar.verdict import Rules

APP_DIR = "dsh-gpu-dashboard"
RUNS_FILE = "runs.sqlite3"
ROOT_RUNS_DB = f"/var/lib/{APP_DIR}/{RUNS_FILE}"
# The ledger's module and its opener (sidecar/sources/ledger: Ledger, opened from a path with owner
# checks), looked up by name: this command runs without it where it is not built in.
LEDGER_MODULE = "sidecar.sources.ledger"
LEDGER_OPENER = "open_ledger"


def default_runs_db() -> str:
    """$XDG_STATE_HOME/dsh-gpu-dashboard/runs.sqlite3 (XDG's default ~/.local/state); root's under
    /var/lib. A stand-in for the ledger's own paths module, which the ledger's branch brings."""
    if os.geteuid() == 0:
        return ROOT_RUNS_DB
    state = os.environ.get("XDG_STATE_HOME")
    if not state or not os.path.isabs(state):  # XDG: a relative path is invalid and ignored
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, APP_DIR, RUNS_FILE)


def _opener() -> Callable[[str], RunSink] | None:
    try:
        module = importlib.import_module(LEDGER_MODULE)
    except ImportError:
        return None
    opener = getattr(module, LEDGER_OPENER, None)
    return cast("Callable[[str], RunSink]", opener) if callable(opener) else None


def open_recording(args: argparse.Namespace, *, batched: bool = False) -> Recording | None:
    """The sidecar's Recording of runs, or None (recording off, or a ledger that cannot be opened:
    the reason printed once on stderr)."""
    if getattr(args, "no_runs", False) or getattr(args, "once", False):
        return None
    opener = _opener()
    if opener is None:
        return None  # this build has no ledger: nothing to record into
    path = args.runs_db or default_runs_db()
    try:
        sink = opener(path)
    except Exception as exc:  # noqa: BLE001 -- any reason the ledger cannot be opened: said once, then live only
        print(f"dsh-sidecar: runs are not recorded: cannot open the runs ledger {path}: {exc}", file=sys.stderr, flush=True)
        return None
    return Recording(sink, host=host_paths(args), batched=batched)


def recorder(recording: Recording | None, rules: Rules, interval_s: float) -> RunRecorder | None:
    return None if recording is None else recording.recorder(rules, interval_s)
