"""The parsers of the commands that read the runs ledger: `report`, `runs` and `compare` (the polling
commands' --runs-db / --no-runs are sidecar/cli/args.py's)."""

from __future__ import annotations

import argparse

from sidecar.cli.args import (
    _add_path_options,
    _bounded_seconds,
    _Parser,
    _prometheus_user_option,
    runs_db_option,
)
from sidecar.documents.runs import WindowTime, parse_when


def _window_time(text: str) -> WindowTime:
    """--since / --until (documents.runs.parse_when: one reading of a time for every command)."""
    try:
        return parse_when(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a time: {text!r}: {exc}") from None


def report_parser() -> argparse.ArgumentParser:
    from sidecar.common.usage import GROUPINGS

    p = _Parser(
        prog="dsh-sidecar report",
        description="GPU-hours held (memory allocated on a GPU), busy and held with no work, energy and runs, "
        "per user, job or GPU over a window, the most held with no work first: from this user's run ledger "
        "(root: every user's under /var/lib), or from a fleet's Prometheus with --prometheus (its recording "
        "rules: deploy/dsh-accounting.yml, docs/deploy.md).",
    )
    p.add_argument(
        "--since",
        type=_window_time,
        default=WindowTime(ago_s=7 * 86400.0),
        metavar="T",
        help="the window's start: a duration ago (7d, 36h, 90m), a UTC time in ISO 8601 or @UNIX_SECONDS (default 7d)",
    )
    p.add_argument(
        "--until",
        type=_window_time,
        default=WindowTime(ago_s=0.0),
        metavar="T",
        help="the window's end, excluded (default: now)",
    )
    p.add_argument(
        "--by", choices=GROUPINGS, default=GROUPINGS[0], help="a row per user (default), job, or GPU"
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--json", action="store_true", help="print the report document as JSON (docs/api.md: ReportDocument)"
    )
    out.add_argument("--csv", action="store_true", help="print the rows as CSV (RFC 4180), for a spreadsheet")
    where = p.add_mutually_exclusive_group()
    runs_db_option(where, "the run ledger to read, where the sidecars record")
    where.add_argument(
        "--prometheus",
        default=None,
        metavar="URL",
        help="a fleet's Prometheus, e.g. http://prometheus:9090, that loads deploy/dsh-accounting.yml",
    )
    _prometheus_user_option(p)
    p.add_argument(
        "--timeout",
        type=_bounded_seconds(60.0, zero_ok=False),
        default=10.0,
        help="with --prometheus: seconds to wait for all of its answers (default 10, at most 60)",
    )
    _add_path_options(p)
    return p


def runs_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dsh-sidecar runs",
        description="The runs the sidecars recorded, the last seen first: id, start, duration, state, "
        "verdict, steps, GPU-hours, command and folder. Compare one with `dsh-sidecar compare ID`.",
    )
    p.add_argument(
        "--since",
        default=None,
        metavar="WHEN",
        help="only runs seen since WHEN: a duration back from now (7d, 12h, 30m), a UTC date or time in "
        "ISO 8601 (2026-12-01, 2026-12-01T08:00) or @UNIX_SECONDS",
    )
    p.add_argument(
        "--json", action="store_true", help="print the runs document as JSON (docs/api.md, RunsDocument)"
    )
    runs_db_option(p)
    return p


def compare_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dsh-sidecar compare",
        description="Is RUN faster or slower than OTHER (default: the previous run of the same command in "
        "the same folder), beyond the two runs' own noise, and why: throughput and GPU busy share judged "
        "IMPROVEMENT, REGRESSION or WITHIN NOISE, the causes ranked by the share of the difference each explains.",
    )
    p.add_argument(
        "run", metavar="RUN", help="a run's id as `dsh-sidecar runs` lists it (or its job id or key)"
    )
    p.add_argument("other", metavar="OTHER", nargs="?", default=None, help="the run to compare it with")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the compare document as JSON (docs/api.md, CompareDocument)",
    )
    runs_db_option(p)
    return p
