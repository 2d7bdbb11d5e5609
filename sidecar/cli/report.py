"""`dsh-sidecar report`: GPU-hours held, busy and held with no work, per user, job or GPU, from the run
ledger (sidecar/sources/ledger) or a fleet's Prometheus (sidecar/sources/prometheus_queries.py),
summed by sidecar/verdict/accounting.py, as a table, JSON (the ReportDocument) or CSV.

Every string a process or a ledger file chose (a command, a user, a pod, a Slurm id, a host) is made
one line of visible text before it is printed (documents/bounds.one_line: no escape sequence, no bidi
override, no line break of theirs); a CSV cell that a spreadsheet would read as a formula (= + - @)
is prefixed with a `'`, as OWASP's CSV-injection advice says.

Exit codes: sidecar/common/exit_codes.py.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any

from sidecar.cli.args import UsageError, fail, print_to_a_pipe
from sidecar.common.exit_codes import EXIT_LEDGER, EXIT_PROMETHEUS, EXIT_USAGE
from sidecar.documents.bounds import json_text, one_line, one_line_all
from sidecar.documents.contract import SCHEMA, check_if_enabled
from sidecar.documents.report import report_document
from sidecar.verdict.accounting import Accounting, account, runs_usage

FORMULA_STARTS = ("=", "+", "-", "@")  # what a spreadsheet reads as the start of a formula
CSV_FIELDS = (
    "key",
    "runs",
    "gpu_held_h",
    "gpu_busy_h",
    "gpu_idle_held_h",
    "energy_kwh",
    "energy_known_fraction",
    "users",
    "slurm_jobs",
    "slurm_job_count",
    "pods",
    "pod_count",
    "hosts",
    "gpu_models",
    "job_id",
    "command",
)


def run_report(args: argparse.Namespace) -> int:
    now = time.time()
    since, until = args.since.resolve(now), args.until.resolve(now)
    if not since < until:
        return fail(EXIT_USAGE, f"--since ({_when(since)}) must come before --until ({_when(until)})")
    if args.prometheus:
        try:
            accounting, location = _from_prometheus(args, since, until), args.prometheus
        except (ValueError, UsageError) as exc:
            return fail(EXIT_USAGE, str(exc))
        except _SourceError as exc:
            return fail(EXIT_PROMETHEUS, str(exc))
        source = "prometheus"
    else:
        try:
            accounting, location = _from_ledger(args, since, until)
        except _SourceError as exc:
            return fail(EXIT_LEDGER, str(exc))
        source = "ledger"
    doc = check_if_enabled(
        report_document(accounting, schema=SCHEMA, source=source, location=location, now_unix_s=now), "report"
    )
    if args.json:
        return print_to_a_pipe(json_text(doc, indent=1))
    if args.csv:
        return print_to_a_pipe(report_csv(doc), end="")
    return print_to_a_pipe(report_text(doc), end="")


class _SourceError(Exception):
    """The ledger or Prometheus could not be read: the message says why and what to do."""


def _from_ledger(args: argparse.Namespace, since: float, until: float) -> tuple[Accounting, str]:
    from sidecar.cli.runs import ledger_path
    from sidecar.sources.ledger import Ledger, LedgerError
    from sidecar.sources.ledger.bounds import MAX_LISTED_RUNS

    uid = os.geteuid()
    path = str(ledger_path(args))
    if not os.path.exists(path):
        raise _SourceError(
            f"no run ledger at {path}: a sidecar records runs there as it watches them (--runs-db names another file)"
        )
    try:
        ledger = Ledger(path, uid=uid)
    except LedgerError as exc:
        raise _SourceError(str(exc)) from None
    with ledger:
        details = ledger.usage(since, until)
        if ledger.fault is not None:
            raise _SourceError(ledger.fault.text)
    if len(details) == MAX_LISTED_RUNS:
        print(
            f"dsh-sidecar: warning: the window holds over {MAX_LISTED_RUNS} runs: only the {MAX_LISTED_RUNS} "
            "seen last are counted (narrow it with --since)",
            file=sys.stderr,
        )
    usages = runs_usage(details, since, until)
    return account(usages, args.by, since, until), path


def _from_prometheus(args: argparse.Namespace, since: float, until: float) -> Accounting:
    from sidecar.cli.cluster import prometheus_api
    from sidecar.sources.prometheus import PrometheusError
    from sidecar.sources.prometheus_queries import read_fleet_usage

    api = prometheus_api(args, args.timeout)
    try:
        usages = read_fleet_usage(api, since, until)
    except PrometheusError as exc:
        raise _SourceError(str(exc)) from None
    return account(usages, args.by, since, until)


# -- printing ---------------------------------------------------------------------------------------------


def _when(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _hours(value: float) -> str:
    return f"{value:.2f}"


def _energy(row: dict[str, Any]) -> str:
    if row["energy_kwh"] is None:
        return "-"
    known = row["energy_known_fraction"]
    partial = "" if known is None or known >= 0.995 else f" ({known:.0%} known)"
    return f"{row['energy_kwh']:.2f}{partial}"


def _idle_share(row: dict[str, Any]) -> str:
    return f"{row['gpu_idle_held_h'] / row['gpu_held_h']:.0%}" if row["gpu_held_h"] > 0 else "-"


def _names(values: list[str], count: int) -> str:
    shown = ",".join(values[:3])
    return (shown + f" +{count - 3}") if count > 3 else (shown or "-")


def _cells(row: dict[str, Any], by: str) -> list[str]:
    figures = [
        _hours(row["gpu_held_h"]),
        _hours(row["gpu_busy_h"]),
        _hours(row["gpu_idle_held_h"]),
        _idle_share(row),
        _energy(row),
    ]
    if by == "job":
        command = " ".join(row["command"])
        return [
            row["key"]
            if row["job_id"] is None
            else f"{row['job_id']}@{_names(row['hosts'], len(row['hosts']))}",
            _names(row["users"], len(row["users"])),
            _names(row["slurm_jobs"], row["slurm_job_count"]),
            _names(row["pods"], row["pod_count"]),
            *figures,
            command[:60] + ("…" if len(command) > 60 else ""),
        ]
    return [row["key"], str(row["runs"]), str(row["slurm_job_count"]), str(row["pod_count"]), *figures]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def report_text(doc: dict[str, Any]) -> str:
    """The report for people: one line a row, the most GPU-hours held with no work first."""
    doc = one_line_all(doc)  # every string a process chose, made one line of visible text
    by = doc["by"]
    lines = [
        f"GPU-hours by {by} from {_when(doc['since_unix_s'])} to {_when(doc['until_unix_s'])} "
        f"({doc['source']}: {doc['location']}), the most GPU-hours held with no work first"
    ]
    if not doc["rows"]:
        lines.append("no run used a GPU in this window")
        return "\n".join(lines) + "\n"
    head = ["held h", "busy h", "idle-held h", "idle share", "energy kWh"]
    if by == "job":
        header = ["job", "user", "slurm job", "pod", *head, "command"]
    else:
        header = [by, "runs", "slurm jobs", "pods", *head]
    rows = [header, *(_cells(r, by) for r in doc["rows"])]
    total = _cells(doc["total"], "total")
    rows.append(["total", *total[1:]] if by != "job" else ["total", "", "", "", *total[4:], ""])
    lines += _table(rows)
    return "\n".join(lines) + "\n"


def csv_cell(value: Any) -> str:
    """One CSV cell: numbers as they are, None empty, lists joined by spaces, text made one visible
    line and kept from being read as a formula."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    text = " ".join(value) if isinstance(value, list) else str(value)
    text = one_line(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def report_csv(doc: dict[str, Any]) -> str:
    """The rows and the total as CSV (RFC 4180: CRLF line ends, cells quoted where they hold a comma,
    a quote or a line break), a header line first."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["by", *CSV_FIELDS])
    for row in [*doc["rows"], doc["total"]]:
        writer.writerow([doc["by"], *(csv_cell(row[f]) for f in CSV_FIELDS)])
    return out.getvalue()
