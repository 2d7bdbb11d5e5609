"""What `dsh-sidecar report` reads of the ledger: the runs with time in a window, each with only
the figures GPU-hours are summed from (a minute row's start, span, GPU-seconds held and busy,
energy), read at a fraction of the cost of detail() (which decodes every figure of every row).
Validated as rows.py validates any row: the file is input too."""

from __future__ import annotations

import sqlite3

from sidecar.common.runs import MinuteFigures, RunDetail, RunRecord
from sidecar.sources.ledger.bounds import DOWNSAMPLED_SPAN_S, MAX_DETAIL_MINUTES
from sidecar.sources.ledger.rows import MINUTE_COLUMNS, _decode

USAGE_FIELDS = ("start_unix_s", "span_s", "gpu_held_s", "gpu_busy_s", "energy_j")
_COLUMNS = tuple(c for c in MINUTE_COLUMNS if c.name in USAGE_FIELDS)
_SELECT = (
    f"SELECT {', '.join(c.name for c in _COLUMNS)} FROM minutes "
    "WHERE run = ? AND start_unix_s > ? AND start_unix_s < ? ORDER BY start_unix_s LIMIT ?"
)


def usage_details(
    conn: sqlite3.Connection, runs: tuple[RunRecord, ...], since_unix_s: float, until_unix_s: float
) -> tuple[RunDetail, ...]:
    """Each of `runs` that started before `until_unix_s` with its rows that may overlap the window
    (a row spans at most DOWNSAMPLED_SPAN_S: one that starts that long before `since` ends by it)."""
    out = []
    for record in runs:
        if record.identity.started_unix_s >= until_unix_s:
            continue
        rows = conn.execute(
            _SELECT, (record.identity.key, since_unix_s - DOWNSAMPLED_SPAN_S, until_unix_s, MAX_DETAIL_MINUTES)
        )
        minutes = []
        for row in rows:
            values = _decode(_COLUMNS, row)
            if values is not None:
                minutes.append(MinuteFigures(**values))
        out.append(RunDetail(record=record, minutes=tuple(minutes)))
    return tuple(out)
