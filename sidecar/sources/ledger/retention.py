"""What Ledger.maintain() does, a chunk at a time (the caller wraps each chunk in one transaction):
delete the runs not seen for the retention, merge minutes older than a week into hour rows, and
delete the runs seen longest ago while the file's used pages exceed the size cap.

Merging keeps what a comparison reads: means weighted by the polls that had them, sums of the
counted figures (steps, GPU-seconds, energy), peaks as maxima, and the sum of each minute's squared
step rate, so the spread between minutes survives in the hour row.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import fields

from sidecar.common.runs import MinuteFigures
from sidecar.sources.ledger.bounds import DOWNSAMPLED_SPAN_S, MAX_LIST_ITEMS
from sidecar.sources.ledger.rows import MINUTE_NAMES, minute_figures, minute_row, valid
from sidecar.sources.ledger.schema import UNMERGED

# How each MinuteFigures field is merged (a test checks every field is in one of these).
MEANS = (
    "step_rate_hz", "data_wait_fraction", "forward_fraction", "backward_fraction", "optimizer_fraction",
    "other_fraction", "syncs_per_step", "gpu_util_pct", "gpu_mem_used_mib", "sm_activity_fraction",
    "tensor_activity_fraction", "sm_clock_mhz", "power_w", "temperature_c", "cpu_pct", "rss_mib",
)
PEAKS = ("gpu_mem_peak_mib", "sm_clock_max_mhz", "power_peak_w", "temperature_peak_c", "gpu_processes")
SUMS = ("minutes", "polls", "gpu_held_s", "gpu_busy_s")
SUMS_KNOWN = ("steps", "energy_j")  # None when no merged row knew it
SPECIAL = ("start_unix_s", "span_s", "step_rate_sq_hz2", "clock_reasons")


def merge_minutes(rows: Sequence[MinuteFigures], start_unix_s: float, span_s: float) -> MinuteFigures:
    """One row for `rows` (minutes, or minutes and an earlier merged row of the same span)."""
    values: dict[str, object] = {"start_unix_s": start_unix_s, "span_s": span_s}
    for name in MEANS:
        weighted = [(v, max(r.polls, 1)) for r in rows if (v := getattr(r, name)) is not None]
        total = sum(w for _, w in weighted)
        values[name] = sum(v * w for v, w in weighted) / total if weighted else None
    for name in PEAKS:
        known = [v for r in rows if (v := getattr(r, name)) is not None]
        values[name] = max(known) if known else None
    for name in SUMS:
        values[name] = sum(getattr(r, name) for r in rows)
    for name in SUMS_KNOWN:
        known = [v for r in rows if (v := getattr(r, name)) is not None]
        values[name] = sum(known) if known else None
    squares = [_rate_sq(r) for r in rows]
    known_sq = [s for s in squares if s is not None]
    values["step_rate_sq_hz2"] = sum(known_sq) if known_sq else None
    values["clock_reasons"] = tuple(sorted({c for r in rows for c in r.clock_reasons}))[:MAX_LIST_ITEMS]
    return MinuteFigures(**values)  # type: ignore[arg-type]  # each value is its field's kind, built above


def _rate_sq(row: MinuteFigures) -> float | None:
    """A row's sum of squared per-minute step rates: a minute that says only its rate gives its square."""
    if row.step_rate_sq_hz2 is not None:
        return row.step_rate_sq_hz2
    return None if row.step_rate_hz is None else row.step_rate_hz**2


def delete_runs(conn: sqlite3.Connection, keys: Sequence[str]) -> None:
    params = [(k,) for k in keys]
    conn.executemany("DELETE FROM minutes WHERE run = ?", params)
    conn.executemany("DELETE FROM verdict_changes WHERE run = ?", params)
    conn.executemany("DELETE FROM runs WHERE key = ?", params)


def delete_runs_seen_before(conn: sqlite3.Connection, before_unix_s: float, limit: int) -> int:
    """Deletes up to `limit` runs last seen before `before_unix_s`, oldest first."""
    keys = [
        str(k)
        for (k,) in conn.execute(
            "SELECT key FROM runs WHERE last_seen_unix_s < ? ORDER BY last_seen_unix_s LIMIT ?",
            (before_unix_s, limit),
        )
    ]
    delete_runs(conn, keys)
    return len(keys)


def delete_oldest_runs(conn: sqlite3.Connection, count: int) -> int:
    return delete_runs_seen_before(conn, math.inf, count)


def downsample(conn: sqlite3.Connection, before_unix_s: float, limit: int) -> int:
    """Merges the minute rows of up to about `limit` rows' whole hours that end by `before_unix_s`
    into one row per run and hour; returns the rows merged (0: nothing left to merge)."""
    span = DOWNSAMPLED_SPAN_S
    cutoff = math.floor(before_unix_s / span) * span
    found = conn.execute(
        f"SELECT run, start_unix_s FROM minutes WHERE {UNMERGED} AND start_unix_s < ? LIMIT ?", (cutoff, limit)
    ).fetchall()
    hours = {(str(run), math.floor(float(start) / span) * span) for run, start in found}
    merged = 0
    for run, hour in sorted(hours):
        bounds = (run, hour, hour + span)
        rows = conn.execute(
            f"SELECT {MINUTE_NAMES} FROM minutes WHERE run = ? AND start_unix_s >= ? AND start_unix_s < ?", bounds
        ).fetchall()
        conn.execute("DELETE FROM minutes WHERE run = ? AND start_unix_s >= ? AND start_unix_s < ?", bounds)
        figures = valid(minute_figures(r) for r in rows)
        if figures:
            row = minute_row(run, merge_minutes(figures, hour, span))
            conn.execute(f"INSERT INTO minutes (run, {MINUTE_NAMES}) VALUES ({', '.join('?' * len(row))})", row)
        merged += len(rows)
    return merged


def used_bytes(conn: sqlite3.Connection) -> int:
    """The bytes of the file's pages in use (the free list's pages are given back by incremental_vacuum)."""
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return (pages - free) * size


def check_fields() -> set[str]:
    """MinuteFigures fields no merge rule names (a test asserts none: a new field must be given one)."""
    named = {*MEANS, *PEAKS, *SUMS, *SUMS_KNOWN, *SPECIAL}
    return {f.name for f in fields(MinuteFigures)} - named
