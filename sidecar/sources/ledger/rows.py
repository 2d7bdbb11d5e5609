"""How the run records (sidecar/common/runs.py) become rows of the ledger and come back.

Columns are named after the records' fields, and each field's stored kind follows from its type:
text capped at MAX_TEXT_CHARS, finite floats, 64-bit integers, tuples as bounded JSON text (an empty
tuple is NULL). Reading back is validation, not trust: the file may have been edited or come from
elsewhere, so a value of the wrong kind is dropped to the field's default (None, (), 0.0), a string is
capped again, and a row whose required field (a run's key, host, start; a minute's start; a change's
time and status) is not valid is dropped whole.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

from sidecar.common.runs import (
    MinuteFigures,
    RunIdentity,
    RunRecord,
    RunSetup,
    RunTotals,
    VerdictChange,
)
from sidecar.sources.ledger.bounds import MAX_JSON_CHARS, MAX_LIST_ITEMS, MAX_TEXT_CHARS

_INT64 = 1 << 63
_INVALID = object()  # a stored value of the wrong kind


@dataclass(frozen=True, slots=True)
class Column:
    name: str  # the record's field, the table's column
    kind: str  # the field's type as written in runs.py
    part: str  # which record of a run row holds it: identity, setup, totals or state (RunRecord's own)
    required: bool  # no default: a row without a valid value is dropped
    default: object


def _columns(cls: type, part: str, skip: Sequence[str] = ()) -> tuple[Column, ...]:
    out = []
    for f in fields(cls):
        if f.name in skip:
            continue
        if f.type not in _DECODERS:
            raise TypeError(f"{cls.__name__}.{f.name}: the ledger stores no {f.type!r} (add a kind to rows.py)")
        default: object = f.default
        if default is MISSING and f.default_factory is not MISSING:
            default = f.default_factory()
        out.append(Column(f.name, str(f.type), part, default is MISSING, None if default is MISSING else default))
    return tuple(out)


# -- values in ---------------------------------------------------------------------------------------

def _text_in(value: object) -> str | None:
    return value[:MAX_TEXT_CHARS] if isinstance(value, str) else None


def _float_in(value: object) -> float | None:
    if type(value) is float:  # the common case first: a write encodes ~60 floats a run and minute
        return value if value - value == 0.0 else None  # inf - inf and nan - nan are nan
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _int_in(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64:
        return value
    return None


def _strs_in(value: object) -> str | None:
    if not value:
        return None
    if type(value) is tuple:
        return _strs_json(value)  # a tuple of anything: _strs_json checks the items
    return _strs_json(tuple(value)) if isinstance(value, list) else None


@functools.lru_cache(maxsize=1_024)
def _strs_json(value: tuple[object, ...]) -> str | None:
    """A run's tuples (its command, GPU models, warnings) are written again at every write: their JSON
    text is kept for the next."""
    items = [s[:MAX_TEXT_CHARS] for s in value[:MAX_LIST_ITEMS] if isinstance(s, str)]
    return _json_capped(items)


def _pairs_in(value: object) -> str | None:
    if not value:
        return None
    if type(value) is tuple:
        return _pairs_json(value)
    return _pairs_json(tuple(value)) if isinstance(value, list) else None


@functools.lru_cache(maxsize=256)
def _pairs_json(value: tuple[object, ...]) -> str | None:
    items = [
        [p[0][:MAX_TEXT_CHARS], p[1][:MAX_TEXT_CHARS]]
        for p in value[:MAX_LIST_ITEMS]
        if isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str)
    ]
    return _json_capped(items)


def _json_capped(items: list[Any]) -> str | None:
    """JSON text of `items` within MAX_JSON_CHARS: items are dropped from the end until it fits."""
    while items:
        text = json.dumps(items, ensure_ascii=False, separators=(",", ":"))
        if len(text) <= MAX_JSON_CHARS:
            return text
        items = items[: len(items) // 2]
    return None


# -- values out --------------------------------------------------------------------------------------

def _text_out(value: object) -> object:
    return value[:MAX_TEXT_CHARS] if isinstance(value, str) else _INVALID


def _float_out(value: object) -> object:
    return _float_in(value) if _float_in(value) is not None else _INVALID


def _int_out(value: object) -> object:
    return value if _int_in(value) is not None else _INVALID


def _json_list(value: object) -> list[Any] | None:
    if not isinstance(value, str) or len(value) > MAX_JSON_CHARS:
        return None
    try:
        items = json.loads(value)
    except ValueError:
        return None
    return items[:MAX_LIST_ITEMS] if isinstance(items, list) else None


def _strs_out(value: object) -> object:
    items = _json_list(value)
    if items is None or not all(isinstance(s, str) for s in items):
        return _INVALID
    return tuple(s[:MAX_TEXT_CHARS] for s in items)


def _pairs_out(value: object) -> object:
    items = _json_list(value)
    if items is None or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str) for p in items
    ):
        return _INVALID
    return tuple((p[0][:MAX_TEXT_CHARS], p[1][:MAX_TEXT_CHARS]) for p in items)


_ENCODERS = {
    "str": _text_in,
    "str | None": _text_in,
    "float": _float_in,
    "float | None": _float_in,
    "int": _int_in,
    "int | None": _int_in,
    "tuple[str, ...]": _strs_in,
    "tuple[tuple[str, str], ...]": _pairs_in,
}
_DECODERS = {
    "str": _text_out,
    "str | None": _text_out,
    "float": _float_out,
    "float | None": _float_out,
    "int": _int_out,
    "int | None": _int_out,
    "tuple[str, ...]": _strs_out,
    "tuple[tuple[str, str], ...]": _pairs_out,
}

_STATE_SKIP = ("identity", "setup", "totals")
RUN_COLUMNS = (
    _columns(RunIdentity, "identity")
    + _columns(RunSetup, "setup")
    + _columns(RunTotals, "totals")
    + _columns(RunRecord, "state", skip=_STATE_SKIP)
)
MINUTE_COLUMNS = _columns(MinuteFigures, "minute")
CHANGE_COLUMNS = _columns(VerdictChange, "change")


def encode(column: Column, value: object) -> object:
    """The value as stored; a required field that is not valid is stored as its kind's zero (the
    caller's bug must not cost the batch)."""
    stored = _ENCODERS[column.kind](value)
    if stored is None and column.required:
        return "" if column.kind == "str" else 0
    return stored


class _Encoder:
    """A record's stored values in one pass: its fields read at once (attrgetter), each encoded by
    its kind's function; required ones that came out None are then fixed by `encode`."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = tuple(columns)
        names = [c.name for c in columns]
        get = operator.attrgetter(*names)  # a tuple of the values (of more than one name)
        self.read: Callable[[object], tuple[object, ...]] = get if len(names) > 1 else lambda r: (get(r),)
        self.kinds = tuple(_ENCODERS[c.kind] for c in columns)
        self.required = tuple(i for i, c in enumerate(columns) if c.required)

    def __call__(self, record: object) -> list[object]:
        row: list[object] = [f(v) for f, v in zip(self.kinds, self.read(record))]
        for i in self.required:
            if row[i] is None:
                row[i] = encode(self.columns[i], None)
        return row


def _decode(columns: Sequence[Column], row: Sequence[object]) -> dict[str, Any] | None:
    """Field -> value for one stored row; None when a required value is not valid. (Any: the values
    are checked against each column's kind here, which mypy cannot follow into the constructors.)"""
    out: dict[str, Any] = {}
    for column, value in zip(columns, row):
        decoded = _INVALID if value is None else _DECODERS[column.kind](value)
        if decoded is _INVALID:
            if column.required:
                return None
            decoded = column.default
        out[column.name] = decoded
    return out


# -- records <-> rows --------------------------------------------------------------------------------

def run_row(record: RunRecord) -> tuple[object, ...]:
    """The stored values of RUN_COLUMNS for a record; a run never seen by a poll is last seen at its start."""
    row = _IDENTITY(record.identity) + _SETUP(record.setup) + _TOTALS(record.totals) + _STATE(record)
    seen = RUN_COLUMN_INDEX["last_seen_unix_s"]
    if row[seen] is None:
        row[seen] = row[RUN_COLUMN_INDEX["started_unix_s"]]
    return tuple(row)


def run_record(row: Sequence[object]) -> RunRecord | None:
    values = _decode(RUN_COLUMNS, row)
    if values is None:
        return None
    parts: dict[str, dict[str, Any]] = {"identity": {}, "setup": {}, "totals": {}, "state": {}}
    for column in RUN_COLUMNS:
        parts[column.part][column.name] = values[column.name]
    return RunRecord(
        identity=RunIdentity(**parts["identity"]),
        setup=RunSetup(**parts["setup"]),
        totals=RunTotals(**parts["totals"]),
        **parts["state"],
    )


def minute_row(run_key: str, minute: MinuteFigures) -> tuple[object, ...]:
    return (run_key[:MAX_TEXT_CHARS], *_MINUTE(minute))


def minute_figures(row: Sequence[object]) -> MinuteFigures | None:
    values = _decode(MINUTE_COLUMNS, row)
    return None if values is None else MinuteFigures(**values)


def change_row(run_key: str, change: VerdictChange) -> tuple[object, ...]:
    return (run_key[:MAX_TEXT_CHARS], *_CHANGE(change))


def verdict_change(row: Sequence[object]) -> VerdictChange | None:
    values = _decode(CHANGE_COLUMNS, row)
    return None if values is None else VerdictChange(**values)


def valid(items: Iterable[Any | None]) -> tuple[Any, ...]:
    """The items that decoded (a dropped row is None)."""
    return tuple(item for item in items if item is not None)


RUN_COLUMN_INDEX = {c.name: i for i, c in enumerate(RUN_COLUMNS)}
_IDENTITY, _SETUP, _TOTALS, _STATE = (
    _Encoder([c for c in RUN_COLUMNS if c.part == part]) for part in ("identity", "setup", "totals", "state")
)
_MINUTE = _Encoder(MINUTE_COLUMNS)
_CHANGE = _Encoder(CHANGE_COLUMNS)
RUN_NAMES = ", ".join(c.name for c in RUN_COLUMNS)
MINUTE_NAMES = ", ".join(c.name for c in MINUTE_COLUMNS)
CHANGE_NAMES = ", ".join(c.name for c in CHANGE_COLUMNS)


# -- statements --------------------------------------------------------------------------------------

def _greatest(name: str, table: str) -> str:
    """The larger of the stored and the new value, either where the other is NULL (SQLite's max()
    of a NULL is NULL)."""
    return f"coalesce(max({table}.{name}, excluded.{name}), {table}.{name}, excluded.{name})"


def _run_merge(column: Column) -> str:
    """How an upsert merges a run written by two sidecars (discovery and `dsh-sidecar run` may both
    watch one job), or again by one: nothing known is ever erased by a None; identity stays as first
    known; setup takes the latest known; totals, peaks and last seen only grow; the end is the
    earliest seen; the last verdict is the one seen last."""
    n = column.name
    if column.part == "identity":
        return f"{n} = coalesce(runs.{n}, excluded.{n})"
    if column.part == "setup":
        if n == "processes":  # the largest count seen
            return f"{n} = {_greatest(n, 'runs')}"
        return f"{n} = coalesce(excluded.{n}, runs.{n})"
    if column.part == "totals" or n == "last_seen_unix_s":
        return f"{n} = {_greatest(n, 'runs')}"
    if n == "ended_unix_s":
        return f"{n} = coalesce(min(runs.{n}, excluded.{n}), runs.{n}, excluded.{n})"
    if n == "exit_code":
        return f"{n} = coalesce(excluded.{n}, runs.{n})"
    # status, warnings: the verdict of the latest poll
    return f"{n} = CASE WHEN excluded.last_seen_unix_s >= runs.last_seen_unix_s THEN excluded.{n} ELSE runs.{n} END"


def _placeholders(count: int) -> str:
    return ", ".join("?" * count)


UPSERT_RUN = (
    f"INSERT INTO runs ({RUN_NAMES}) VALUES ({_placeholders(len(RUN_COLUMNS))}) "
    "ON CONFLICT(key) DO UPDATE SET " + ", ".join(_run_merge(c) for c in RUN_COLUMNS if c.name != "key")
)
# The minute of a live run grows at each write; a second sidecar's copy with fewer polls never
# replaces a fuller one.
UPSERT_MINUTE = (
    f"INSERT INTO minutes (run, {MINUTE_NAMES}) VALUES ({_placeholders(len(MINUTE_COLUMNS) + 1)}) "
    "ON CONFLICT(run, start_unix_s) DO UPDATE SET "
    + ", ".join(f"{c.name} = excluded.{c.name}" for c in MINUTE_COLUMNS if c.name != "start_unix_s")
    + " WHERE excluded.polls >= minutes.polls"
)
INSERT_CHANGE = (
    f"INSERT OR IGNORE INTO verdict_changes (run, {CHANGE_NAMES}) VALUES ({_placeholders(len(CHANGE_COLUMNS) + 1)})"
)
LAST_CHANGE = (
    "SELECT status, warnings FROM verdict_changes WHERE run = ? AND time_unix_s <= ? "
    "ORDER BY time_unix_s DESC LIMIT 1"
)


def append_changes(conn: sqlite3.Connection, rows: Iterable[tuple[object, ...]]) -> None:
    """Appends each change unless the run's change before it says the same (two sidecars watching
    one job see the same change at nearly the same time: the timeline keeps one)."""
    for row in rows:
        last = conn.execute(LAST_CHANGE, (row[0], row[1])).fetchone()
        if last is not None and (last[0], last[1]) == (row[2], row[3]):
            continue
        conn.execute(INSERT_CHANGE, row)
