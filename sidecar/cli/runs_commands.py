"""`dsh-sidecar runs` and `dsh-sidecar compare`: the run ledger's documents (sidecar/documents/runs.py,
read through sidecar/poll/runs_source.py) as a table and a judgement, or as JSON; and the runs
source a serving sidecar hands its server.

Everything printed from the ledger is the user's own text (commands, folders) or the file's (it is
input): the text is made one_line (no escape sequence, line break or bidi override reaches the
terminal) and the JSON escapes every steering character (bounds.json_text).

Exit codes: sidecar/common/exit_codes.py (EXIT_LEDGER, EXIT_NO_RUN, EXIT_NO_PREVIOUS).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from sidecar.cli.args import fail, print_to_a_pipe, rules_from_env
from sidecar.cli.runs import ledger_path
from sidecar.common.exit_codes import EXIT_LEDGER, EXIT_NO_PREVIOUS, EXIT_NO_RUN, EXIT_OK, EXIT_USAGE
from sidecar.documents.bounds import clip, json_text, one_line_all
from sidecar.documents.runs import (
    AmbiguousRun,
    NoPreviousRun,
    RunsUnavailable,
    UnknownRun,
    check_run_name,
    parse_since,
)
from sidecar.poll.runs_source import LedgerRuns
from sidecar.sources.ledger import Ledger, ledger_exists

COMMAND_CHARS = 40  # of a command in the runs table
FOLDER_CHARS = 32  # of a folder, its end kept


def runs_source(args: argparse.Namespace, ledger: Ledger | None = None) -> LedgerRuns | None:
    """The server's runs source: `ledger` where the sidecar has one open (the recorder's: one
    connection, one lock), else the ledger of --runs-db (or the default), opened when first asked;
    None with --no-runs (the runs routes then say so)."""
    if getattr(args, "no_runs", False):
        return None
    if ledger is not None:
        return LedgerRuns(ledger=ledger, rules=rules_from_env())
    return LedgerRuns(ledger_path(args), rules=rules_from_env())


def run_runs(args: argparse.Namespace) -> int:
    path = ledger_path(args)
    try:
        since = None if args.since is None else parse_since(args.since, time.time())
    except ValueError as exc:
        return fail(EXIT_USAGE, f"--since: {exc}")
    source = LedgerRuns(path)
    try:
        doc = source.runs_document(since)
    except RunsUnavailable as exc:
        return fail(EXIT_LEDGER, str(exc))
    finally:
        source.close()
    if not ledger_exists(path):
        print(
            f"dsh-sidecar: no runs are recorded yet: a sidecar records the runs it watches in {path} "
            "(--runs-db PATH chooses another ledger)",
            file=sys.stderr if args.json else sys.stdout,
            flush=True,
        )
        if not args.json:
            return EXIT_OK
    print_to_a_pipe(json_text(doc, indent=1) if args.json else runs_text(one_line_all(doc)))
    return EXIT_OK


def run_compare(args: argparse.Namespace) -> int:
    try:
        run = check_run_name(args.run)
        other = None if args.other is None else check_run_name(args.other)
    except ValueError as exc:
        return fail(EXIT_USAGE, str(exc))
    path = ledger_path(args)
    if not ledger_exists(path):
        return fail(
            EXIT_NO_RUN,
            f"no runs are recorded yet: a sidecar records them in {path} (--runs-db PATH for another)",
        )
    source = LedgerRuns(path, rules=rules_from_env())
    try:
        doc = source.compare_document(run, other)
    except RunsUnavailable as exc:
        return fail(EXIT_LEDGER, str(exc))
    except (UnknownRun, AmbiguousRun) as exc:
        return fail(EXIT_NO_RUN, str(exc))
    except NoPreviousRun as exc:
        return fail(EXIT_NO_PREVIOUS, str(exc))
    finally:
        source.close()
    print_to_a_pipe(json_text(doc, indent=1) if args.json else compare_text(one_line_all(doc)))
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------
def _when(unix_s: float | None) -> str:
    return "-" if unix_s is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(unix_s))


def duration_text(seconds: float) -> str:
    """`42s`, `5m10s`, `3h02m`, `2d04h`."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3_600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3_600}h{s % 3_600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3_600:02d}h"


def _state(run: dict[str, Any]) -> str:
    if run["state"] == "live":
        return "live"
    return "exited" if run["exit_code"] is None else f"exit {run['exit_code']}"


def _verdict(run: dict[str, Any]) -> str:
    status = run["status"] or "-"
    warnings = run["warnings"]
    if not warnings:
        return status
    more = f" +{len(warnings) - 2}" if len(warnings) > 2 else ""
    return f"{status} ({', '.join(warnings[:2])}{more})"


def _folder(cwd: str | None) -> str:
    if not cwd:
        return "-"
    home = os.path.expanduser("~")
    if home not in ("", "/") and (cwd == home or cwd.startswith(home + "/")):
        cwd = "~" + cwd[len(home) :]
    return cwd if len(cwd) <= FOLDER_CHARS else "…" + cwd[-(FOLDER_CHARS - 1) :]


def _hours(seconds: float) -> str:
    return f"{seconds / 3_600:.2f}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def runs_text(doc: dict[str, Any]) -> str:
    """The runs document as a table, the last seen first."""
    runs = doc["runs"]
    if not runs:
        since = f" since {_when(doc['since_unix_s'])}" if doc["since_unix_s"] is not None else ""
        return f"no runs recorded{since}"
    users = len({r["user"] or r["uid"] for r in runs}) > 1  # root's ledger: every user's runs
    rows = [
        [
            "id",
            "started",
            "took",
            "state",
            "verdict",
            "steps",
            "steps/s",
            "GPU-h held",
            "busy",
            "command",
            "folder",
        ]
    ]
    if users:
        rows[0].insert(1, "user")
    for r in runs:
        rows.append(
            [
                r["id"],
                _when(r["started_unix_s"]),
                duration_text(r["wall_s"]),
                _state(r),
                _verdict(r),
                "-" if r["steps"] is None else str(r["steps"]),
                "-" if r["step_rate_hz"] is None else f"{r['step_rate_hz']:.3g}",
                _hours(r["gpu_held_s"]),
                _hours(r["gpu_busy_s"]),
                clip(" ".join(r["command"]), COMMAND_CHARS) or "-",
                _folder(r["cwd"]),
            ]
        )
        if users:
            rows[-1].insert(1, r["user"] or str(r["uid"] if r["uid"] is not None else "-"))
    lines = _table(rows)
    if doc["truncated"]:
        lines.append(f"(only the {len(runs)} last seen are listed: narrow it with --since)")
    if doc["notice"]:
        lines.append(f"note: {doc['notice']}")
    lines.append("compare a run with the one before it: dsh-sidecar compare ID")
    return "\n".join(lines)


def _run_line(run: dict[str, Any]) -> str:
    command = clip(" ".join(run["command"]), 60) or "?"
    return f"{run['id']} ({command}; {_folder(run['cwd'])}; started {_when(run['started_unix_s'])}, took {duration_text(run['wall_s'])})"


def compare_text(doc: dict[str, Any]) -> str:
    """The compare document as a person reads it: the two runs, the judgement of each figure, the
    causes ranked with their evidence, the reasons, and what differs between the runs."""
    which = (
        "the previous run of the same command in the same folder"
        if doc["baseline_choice"] == "previous"
        else "the run given"
    )
    lines = [f"run {_run_line(doc['run'])}", f"against {which}, {_run_line(doc['baseline'])}", ""]
    if doc["comparable"]:
        lines += [doc["throughput"]["text"], doc["gpu_busy"]["text"]]
    else:
        lines.append(doc["message"])
    if doc["causes"]:
        lines += ["", "causes, largest first:"]
        for cause in doc["causes"]:
            lines.append(f"  - {cause['text']}")
            lines += [f"      {reason['text']}" for reason in cause["reasons"]]
    if doc["reasons"]:
        lines += ["", "why, as far as the runs show:"]
        lines += [f"  - {r['text']}" for r in doc["reasons"]]
    notes = [n for n in doc["notes"] if doc["comparable"] or n["code"] not in ("same-run", "no-steps")]
    if notes:
        lines += ["", "note:"]
        lines += [f"  - {n['text']}" for n in notes]
    return "\n".join(lines)
