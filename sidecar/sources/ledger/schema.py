"""The ledger's schema: numbered migrations, each applied once, in order, in a transaction of its
own, and `PRAGMA user_version` saying how far a file has come. A migration once shipped never
changes (files out there were made by it): the next change is the next migration.

Tuples are JSON text (NULL when empty). `minutes` and `verdict_changes` are WITHOUT ROWID tables
clustered on (run, time): a run's rows are read together, and a second write of the same minute
is an upsert of the same row.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

# `PRAGMA application_id`: what tells this file from another program's SQLite database ("dshL").
APPLICATION_ID = 0x6473684C


@dataclass(frozen=True, slots=True)
class Migration:
    version: int  # user_version once applied
    why: str
    statements: tuple[str, ...]


_V1 = (
    f"PRAGMA application_id = {APPLICATION_ID}",
    """CREATE TABLE runs (
        key TEXT PRIMARY KEY NOT NULL,
        job_id TEXT NOT NULL,
        host TEXT NOT NULL,
        started_unix_s REAL NOT NULL,
        uid INTEGER,
        user TEXT,
        command TEXT,
        cwd TEXT,
        distributed_key TEXT,
        world_size INTEGER,
        slurm_job TEXT,
        pod TEXT,
        torch_version TEXT,
        torch_cuda TEXT,
        driver_version TEXT,
        gpu_models TEXT,
        precision TEXT,
        loader TEXT,
        processes INTEGER,
        wall_s REAL,
        steps INTEGER,
        gpu_held_s REAL,
        gpu_busy_s REAL,
        energy_j REAL,
        gpu_mem_peak_mib REAL,
        power_peak_w REAL,
        temperature_peak_c REAL,
        last_seen_unix_s REAL NOT NULL,
        ended_unix_s REAL,
        exit_code INTEGER,
        status TEXT,
        warnings TEXT
    )""",
    "CREATE INDEX runs_by_last_seen ON runs (last_seen_unix_s)",
    """CREATE TABLE minutes (
        run TEXT NOT NULL,
        start_unix_s REAL NOT NULL,
        span_s REAL,
        minutes INTEGER,
        polls INTEGER,
        steps INTEGER,
        step_rate_hz REAL,
        step_rate_sq_hz2 REAL,
        data_wait_fraction REAL,
        forward_fraction REAL,
        backward_fraction REAL,
        optimizer_fraction REAL,
        other_fraction REAL,
        syncs_per_step REAL,
        gpu_util_pct REAL,
        gpu_mem_used_mib REAL,
        gpu_mem_peak_mib REAL,
        sm_activity_fraction REAL,
        tensor_activity_fraction REAL,
        sm_clock_mhz REAL,
        sm_clock_max_mhz REAL,
        clock_reasons TEXT,
        power_w REAL,
        power_peak_w REAL,
        temperature_c REAL,
        temperature_peak_c REAL,
        gpu_processes INTEGER,
        cpu_pct REAL,
        rss_mib REAL,
        gpu_held_s REAL,
        gpu_busy_s REAL,
        energy_j REAL,
        PRIMARY KEY (run, start_unix_s)
    ) WITHOUT ROWID""",
    """CREATE TABLE verdict_changes (
        run TEXT NOT NULL,
        time_unix_s REAL NOT NULL,
        status TEXT NOT NULL,
        warnings TEXT,
        PRIMARY KEY (run, time_unix_s)
    ) WITHOUT ROWID""",
)

# v2: what maintain() and previous() look up. "The previous run of this command in this folder by
# this user" was a scan of every run; downsampling looked at every minute row for the ones not yet
# merged (a partial index holds only those: merged rows leave it).
# The rows not yet downsampled (retention.py's query names the same condition, so the partial index
# is used): minute rows; a merged row spans DOWNSAMPLED_SPAN_S (bounds.py, 3600 s).
UNMERGED = "span_s < 3600"
_V2 = (
    "CREATE INDEX runs_by_command ON runs (cwd, command, uid, started_unix_s)",
    f"CREATE INDEX minutes_unmerged ON minutes (start_unix_s) WHERE {UNMERGED}",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "runs, their minutes and verdict changes; runs listed by last seen", _V1),
    Migration(2, "indexes: the previous run of a command, the minutes not yet downsampled", _V2),
)
LATEST_VERSION = MIGRATIONS[-1].version


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Applies the migrations the file has not had, each in one BEGIN IMMEDIATE transaction (DDL is
    transactional in SQLite: a step is whole or absent). The version is read again inside the
    transaction: two sidecars opening a new file at once apply each step once. Returns the version."""
    for migration in migrations:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if user_version(conn) < migration.version:
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {int(migration.version)}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return user_version(conn)
