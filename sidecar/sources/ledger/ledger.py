"""The run ledger: every run a user's sidecars saw, in one SQLite file per user (WAL), written in
batches by the recorder (sidecar/poll) and read back as the typed records of sidecar/common/runs.py.

- `Ledger(path)` opens it (opening.py: owner-checked, 0700/0600; a damaged file is moved aside and a
  new one started, `notice` says so; a newer ledger than this code knows is refused).
- `write(batch)`: one BEGIN IMMEDIATE transaction per batch: runs and minutes are upserts (two
  sidecars of one user may write the same run at once), verdict changes appended. A write that fails
  (disk full, the file locked past BUSY_TIMEOUT_S, an I/O error) never raises: the batch is dropped,
  `fault` says what and since when, and the next write that succeeds clears it.
- `runs()`, `detail()`, `previous()`: the records, validated and bounded as they are read.
- `maintain(now)`: retention and downsampling (retention.py), called rarely (hourly).

One connection, used by one thread at a time (a lock): the poller writes, the server may read.
Never share a Ledger across fork().
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sidecar.common.runs import LedgerBatch, RunDetail, RunRecord
from sidecar.sources.ledger import bounds, retention
from sidecar.sources.ledger.opening import LedgerError, LedgerVersionError, move_aside, prepare
from sidecar.sources.ledger.rows import (
    CHANGE_NAMES,
    MINUTE_NAMES,
    RUN_NAMES,
    UPSERT_MINUTE,
    UPSERT_RUN,
    append_changes,
    change_row,
    minute_figures,
    minute_row,
    run_record,
    run_row,
    valid,
    verdict_change,
)
from sidecar.sources.ledger.schema import APPLICATION_ID, LATEST_VERSION, migrate, user_version
from sidecar.sources.ledger.usage import usage_details

T = TypeVar("T")
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_WRITE = "a write"  # what failed: a write drops its batch (reads and maintain() drop nothing)


@dataclass(frozen=True, slots=True)
class LedgerFault:
    """Why the ledger is not recording now: the first failure's text, since when, and the batches
    dropped since."""

    text: str
    since_unix_s: float
    dropped_batches: int = 1


@dataclass(frozen=True, slots=True)
class Retention:
    """maintain()'s limits (bounds.py's defaults; tests make them small)."""

    run_retention_s: float = bounds.RUN_RETENTION_S
    minute_retention_s: float = bounds.MINUTE_RETENTION_S
    size_cap_bytes: int = bounds.SIZE_CAP_BYTES
    hard_cap_bytes: int = bounds.HARD_CAP_BYTES


@dataclass(frozen=True, slots=True)
class Maintained:
    """What one maintain() did."""

    runs_expired: int = 0  # not seen for the retention
    minutes_merged: int = 0  # minute rows merged into hour rows
    runs_over_cap: int = 0  # deleted, oldest first, to bring the file under the size cap
    used_bytes: int = 0  # after


class Ledger:
    def __init__(
        self,
        path: Path | str,
        *,
        uid: int | None = None,
        retention: Retention | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Opens (making where missing) the ledger at `path`, which must be `uid`'s (default: the
        effective user's). Raises LedgerError (LedgerAccessError, LedgerVersionError) when it cannot
        be used; a damaged file is moved aside instead, and `notice` says so."""
        self.path = Path(path)
        self.uid = os.geteuid() if uid is None else uid
        self.retention = retention or Retention()
        self.notice: str | None = None
        self._clock = clock
        self._fault: LedgerFault | None = None
        self._lock = threading.Lock()
        self._conn = self._open()

    # -- opening -------------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        prepare(self.path, self.uid)
        why = _damage(self.path)
        if why is not None:
            self.notice = move_aside(self.path, why, self._clock())
            prepare(self.path, self.uid)
        conn = _connect(self.path)
        try:
            _check_kind(conn, self.path)
            _configure(conn, self.path, self.retention)
            migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise LedgerError(f"cannot open the ledger {self.path}: {exc}") from None
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- faults --------------------------------------------------------------------------------------

    @property
    def fault(self) -> LedgerFault | None:
        """None while writes succeed; else the fault since the first failed write."""
        return self._fault

    def _failed(self, what: str, exc: BaseException) -> None:
        """Records a failure (under the lock): the first one's text and time stay until a write
        succeeds; each failed write counts a dropped batch."""
        dropped = 1 if what == _WRITE else 0
        if self._fault is None:
            self._fault = LedgerFault(f"the ledger {self.path}: {what} failed: {exc}", self._clock(), dropped)
        else:
            f = self._fault
            self._fault = LedgerFault(f.text, f.since_unix_s, f.dropped_batches + dropped)

    def _transaction(self, what: str, work: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
        """`work` in one BEGIN IMMEDIATE transaction (the write lock taken first: a deferred one that
        read before writing could fail with a BUSY that waiting cannot cure). (False, None) when
        SQLite failed: rolled back, recorded as the fault."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = work(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                self._failed(what, exc)
                return False, None
            if what == _WRITE:
                self._fault = None  # writing works again
            return True, result

    def _read(self, work: Callable[[sqlite3.Connection], T], empty: T) -> T:
        """`work` in one read transaction (one snapshot, kept short: a long reader stops the WAL's
        checkpoints); `empty` when SQLite failed (a fault is recorded)."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN")
                try:
                    return work(conn)
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._failed("a read", exc)
                return empty

    # -- writing -------------------------------------------------------------------------------------

    def write(self, batch: LedgerBatch) -> bool:
        """Records `batch` whole, or not at all: False when it was dropped (see `fault`)."""
        ok, _ = self._transaction(_WRITE, lambda conn: _write(conn, batch))
        return ok

    def forget(self, key: str) -> bool:
        """Deletes the run `key` whole (a job discovery found through a process that turned out to
        be part of another job's: never a run of its own); False when the ledger failed."""
        ok, _ = self._transaction("forget", lambda conn: retention.delete_runs(conn, (key,)))
        return ok

    # -- reading -------------------------------------------------------------------------------------

    def runs(self, since_unix_s: float | None = None, limit: int = 100) -> tuple[RunRecord, ...]:
        """The runs last seen at or after `since_unix_s` (all when None), last seen first, at most
        `limit` (and MAX_LISTED_RUNS)."""
        limit = max(0, min(limit, bounds.MAX_LISTED_RUNS))
        since = -1e300 if since_unix_s is None else since_unix_s

        def read(conn: sqlite3.Connection) -> tuple[RunRecord, ...]:
            rows = conn.execute(
                f"SELECT {RUN_NAMES} FROM runs WHERE last_seen_unix_s >= ? ORDER BY last_seen_unix_s DESC LIMIT ?",
                (since, limit),
            )
            return valid(run_record(r) for r in rows)

        return self._read(read, ())

    def names(self, limit: int = bounds.MAX_LISTED_RUNS) -> tuple[tuple[str, str], ...]:
        """(key, job id) of the runs, last seen first, at most `limit`: what a run's short name is
        looked up in, without reading whole records (a tenth of the time)."""
        limit = max(0, min(limit, bounds.MAX_LISTED_RUNS))

        def read(conn: sqlite3.Connection) -> tuple[tuple[str, str], ...]:
            rows = conn.execute("SELECT key, job_id FROM runs ORDER BY last_seen_unix_s DESC LIMIT ?", (limit,))
            return tuple(
                (key[: bounds.MAX_TEXT_CHARS], job[: bounds.MAX_TEXT_CHARS])
                for key, job in rows
                if isinstance(key, str) and isinstance(job, str)
            )

        return self._read(read, ())

    def detail(self, key: str) -> RunDetail | None:
        """The run with its timeline and minutes, oldest first (the newest MAX_TIMELINE changes and
        MAX_DETAIL_MINUTES rows); None when the ledger has no such run."""
        return self._read(lambda conn: _detail(conn, key), None)

    def usage(self, since_unix_s: float, until_unix_s: float) -> tuple[RunDetail, ...]:
        """The runs seen within [since, until) (runs()'s bound), each with only the figures of its
        minutes GPU-hours are summed from (usage.py): what `dsh-sidecar report` reads."""
        runs = self.runs(since_unix_s, limit=bounds.MAX_LISTED_RUNS)
        return self._read(lambda conn: usage_details(conn, runs, since_unix_s, until_unix_s), ())

    def previous(self, key: str) -> RunRecord | None:
        """The run of the same command (argv) in the same folder by the same user that started last
        before `key` did; None when there is none, or `key`'s run has no command or folder."""
        return self._read(lambda conn: _previous(conn, key), None)

    # -- retention -----------------------------------------------------------------------------------

    def maintain(self, now_unix_s: float | None = None) -> Maintained:
        """Expires old runs, downsamples old minutes, keeps the file under the size cap, gives the
        freed pages back and truncates the WAL. Each chunk is its own transaction (MAINTAIN_CHUNK_ROWS),
        so a writer waits at most one chunk. Failures are recorded as the fault, never raised."""
        now = self._clock() if now_unix_s is None else now_unix_s
        r, chunk = self.retention, bounds.MAINTAIN_CHUNK_ROWS
        expired = self._repeat(lambda c: retention.delete_runs_seen_before(c, now - r.run_retention_s, chunk))
        merged = self._repeat(lambda c: retention.downsample(c, now - r.minute_retention_s, chunk))
        over = 0
        while True:
            ok, used = self._transaction("maintain", retention.used_bytes)
            if not ok or used is None or used <= r.size_cap_bytes:
                break
            ok, deleted = self._transaction("maintain", lambda c: retention.delete_oldest_runs(c, _cap_chunk(c)))
            if not ok or not deleted:
                break
            over += deleted
        with self._lock:
            try:
                # executescript steps it to the end: execute() stops after its first page freed
                self._conn.executescript("PRAGMA incremental_vacuum;")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error as exc:
                self._failed("maintain", exc)
        _, used = self._transaction("maintain", retention.used_bytes)
        return Maintained(expired, merged, over, used or 0)

    def _repeat(self, step: Callable[[sqlite3.Connection], int]) -> int:
        total = 0
        while True:
            ok, done = self._transaction("maintain", step)
            if not ok or not done:
                return total
            total += done


def _cap_chunk(conn: sqlite3.Connection) -> int:
    """Runs deleted at a time while over the size cap: a twentieth of them (at least one)."""
    count = int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
    return max(1, min(count // 20, bounds.MAINTAIN_CHUNK_ROWS))


def _write(conn: sqlite3.Connection, batch: LedgerBatch) -> None:
    if batch.runs:
        conn.executemany(UPSERT_RUN, [run_row(r) for r in batch.runs])
    if batch.minutes:
        conn.executemany(UPSERT_MINUTE, [minute_row(k, m) for k, m in batch.minutes])
    if batch.changes:
        append_changes(conn, [change_row(k, c) for k, c in batch.changes])


def _detail(conn: sqlite3.Connection, key: str) -> RunDetail | None:
    row = conn.execute(f"SELECT {RUN_NAMES} FROM runs WHERE key = ?", (key,)).fetchone()
    record = None if row is None else run_record(row)
    if record is None:
        return None
    changes = conn.execute(
        f"SELECT {CHANGE_NAMES} FROM verdict_changes WHERE run = ? ORDER BY time_unix_s DESC LIMIT ?",
        (key, bounds.MAX_TIMELINE),
    ).fetchall()
    minutes = conn.execute(
        f"SELECT {MINUTE_NAMES} FROM minutes WHERE run = ? ORDER BY start_unix_s DESC LIMIT ?",
        (key, bounds.MAX_DETAIL_MINUTES),
    ).fetchall()
    return RunDetail(
        record=record,
        timeline=valid(verdict_change(r) for r in reversed(changes)),
        minutes=valid(minute_figures(r) for r in reversed(minutes)),
    )


def _previous(conn: sqlite3.Connection, key: str) -> RunRecord | None:
    row = conn.execute("SELECT cwd, command, uid, started_unix_s FROM runs WHERE key = ?", (key,)).fetchone()
    if row is None or row[0] is None or row[1] is None:
        return None
    found = conn.execute(
        f"SELECT {RUN_NAMES} FROM runs WHERE cwd = ? AND command = ? AND uid IS ? AND started_unix_s < ? "
        "AND key != ? ORDER BY started_unix_s DESC LIMIT 1",
        (*row, key),
    ).fetchone()
    return None if found is None else run_record(found)


# -- opening ---------------------------------------------------------------------------------------------

def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: this module says BEGIN and COMMIT itself (Python 3.10's sqlite3 has no
    # `autocommit`); check_same_thread=False: the Ledger's lock serialises every use.
    try:
        return sqlite3.connect(
            str(path), timeout=bounds.BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot open the ledger {path}: {exc}") from None


def _is_damage(exc: sqlite3.Error) -> bool:
    """SQLITE_CORRUPT or SQLITE_NOTADB (error codes from Python 3.11; the message before)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc)
    return "malformed" in text or "not a database" in text


def _damage(path: Path) -> str | None:
    """Why the file is damaged (quick_check: the b-trees without the indexes' contents, in time
    proportional to the file), or None. Any other failure (locked past the timeout) is not damage.
    Read-only: closing it neither checkpoints into a damaged file nor deletes its -wal (moved aside
    with it)."""
    try:
        conn = sqlite3.connect(
            f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=bounds.BUSY_TIMEOUT_S, isolation_level=None
        )
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot open the ledger {path}: {exc}") from None
    try:
        found = conn.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        if _is_damage(exc):
            return str(exc)
        raise LedgerError(f"cannot open the ledger {path}: {exc}") from None
    finally:
        conn.close()
    if found is None or found[0] != "ok":
        return f"quick_check: {str(found[0] if found else 'no answer')[:200]}"
    return None


def _check_kind(conn: sqlite3.Connection, path: Path) -> None:
    # One snapshot: another sidecar may be making a new file's first tables, its id and version
    # meanwhile (one transaction of migrate's); read apart, the tables could be seen without the id.
    conn.execute("BEGIN")
    try:
        version = user_version(conn)
        app = int(conn.execute("PRAGMA application_id").fetchone()[0])
        tables = int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])
    finally:
        conn.execute("COMMIT")
    if app != APPLICATION_ID and (app != 0 or version != 0 or tables):
        raise LedgerVersionError(
            f"{path} is an SQLite database but not a run ledger (application id {app:#x}): it is left as "
            "it is. Move it away, or choose another ledger path"
        )
    if version > LATEST_VERSION:
        raise LedgerVersionError(
            f"the ledger {path} is of version {version}, newer than this dsh-sidecar knows ({LATEST_VERSION}): "
            "it is left as it is (never downgraded). Run a newer dsh-sidecar, or choose another ledger path"
        )


def _configure(conn: sqlite3.Connection, path: Path, retention: Retention) -> None:
    # auto_vacuum takes effect only before the first table: a new file's pages freed by maintain()
    # can then be given back (incremental_vacuum); an older file keeps its mode.
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise LedgerError(f"the ledger {path} cannot use a write-ahead log (journal mode {mode}): is it on a network file system?")
    # NORMAL in WAL: always consistent, survives the process's crash; after a power loss the last
    # commits may be lost, which for samples of a run is the right trade for a cheap commit.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA journal_size_limit = {int(bounds.WAL_LIMIT_BYTES)}")
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {max(1, retention.hard_cap_bytes // page_size)}")
