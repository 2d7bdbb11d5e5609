"""The runs ledger of a polling command (--pid, run, discovery): where it is (--runs-db, else
$DSH_RUNS_DB, else the ledger's default path), opened once; None where it is turned off (--no-runs,
--once) or cannot be opened, which is said once: the sidecar then serves live without recording, and
never exits for it."""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from pathlib import Path

from sidecar.cli.args import host_paths
from sidecar.poll.recorder import Recording, RunRecorder
from sidecar.poll.run_figures import MINUTE_S
from sidecar.verdict import Rules


def ledger_path(args: argparse.Namespace) -> Path:
    """The ledger every command reads or writes: --runs-db (its default $DSH_RUNS_DB), else the
    ledger's default: the user's XDG state folder, root's /var/lib."""
    given = getattr(args, "runs_db", None)
    if given:
        return Path(given)
    from sidecar.sources.ledger import default_ledger_path

    return default_ledger_path(os.environ, os.geteuid(), os.path.expanduser("~"))


def open_recording(args: argparse.Namespace, *, batched: bool = False) -> Recording | None:
    """The sidecar's Recording of runs, or None (recording off, or a ledger that cannot be opened:
    the reason printed once on stderr)."""
    if getattr(args, "no_runs", False) or getattr(args, "once", False):
        return None
    from sidecar.sources.ledger import Ledger, LedgerError

    path = ledger_path(args)
    try:
        ledger = Ledger(path)
    except (LedgerError, OSError) as exc:  # why the ledger cannot be used: said once, then live only
        print(f"dsh-sidecar: runs are not recorded: {exc}", file=sys.stderr, flush=True)
        return None
    if ledger.notice:  # a damaged file was moved aside and a new ledger started
        print(f"dsh-sidecar: {ledger.notice}", file=sys.stderr, flush=True)
    atexit.register(ledger.close)  # after the pollers' last writes (their stop())
    period_s = getattr(args, "runs_period", None) or MINUTE_S  # the hidden --runs-period (tests)
    return Recording(ledger, host=host_paths(args), batched=batched, period_s=period_s)


def recorder(recording: Recording | None, rules: Rules, interval_s: float) -> RunRecorder | None:
    return None if recording is None else recording.recorder(rules, interval_s)
