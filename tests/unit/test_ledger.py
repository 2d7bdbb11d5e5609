"""The run ledger (sidecar/sources/ledger): where the file is, opening it safely on a shared host,
its schema's migrations from every earlier version, and writing and reading the typed records,
including rows a tampered file holds."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from sidecar.common.runs import MinuteFigures, RunIdentity, RunRecord, RunSetup, RunTotals, VerdictChange
from sidecar.sources.ledger import (
    Ledger,
    LedgerAccessError,
    LedgerBatch,
    LedgerVersionError,
    default_ledger_path,
)
from sidecar.sources.ledger.bounds import MAX_JSON_CHARS, MAX_LIST_ITEMS, MAX_TEXT_CHARS
from sidecar.sources.ledger.rows import CHANGE_COLUMNS, MINUTE_COLUMNS, RUN_COLUMNS
from sidecar.sources.ledger.schema import LATEST_VERSION, MIGRATIONS, migrate
from tests.helpers.ledger_runs import DAY_START_UNIX_S as T0
from tests.helpers.ledger_runs import identity, minute, record

ME = os.geteuid()
OTHER_UID = 54_321
needs_root = pytest.mark.skipif(ME != 0, reason="making a file another user's needs root (chown)")


def _mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- where ------------------------------------------------------------------------------------------------

def test_default_path_follows_xdg_and_root_goes_to_var_lib():
    home = "/home/ada"
    assert default_ledger_path({}, 1000, home) == Path("/home/ada/.local/state/dsh-gpu-dashboard/runs.sqlite3")
    assert default_ledger_path({"XDG_STATE_HOME": "/data/state"}, 1000, home) == Path(
        "/data/state/dsh-gpu-dashboard/runs.sqlite3"
    )
    # XDG: an empty or relative value is ignored
    for ignored in ("", "relative/state"):
        assert default_ledger_path({"XDG_STATE_HOME": ignored}, 1000, home).parent.parent == Path(
            "/home/ada/.local/state"
        )
    assert default_ledger_path({"XDG_STATE_HOME": "/data/state"}, 0, "/root") == Path(
        "/var/lib/dsh-gpu-dashboard/runs.sqlite3"
    )


# -- opening safely ------------------------------------------------------------------------------------------

def test_a_new_ledger_is_private_whatever_the_umask(tmp_path):
    path = tmp_path / "state" / "dsh-gpu-dashboard" / "runs.sqlite3"
    old = os.umask(0)
    try:
        with Ledger(path) as ledger:
            assert ledger.write(LedgerBatch(runs=(record(identity(1, T0), T0 + 60),)))
            assert Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists()
            modes = {p.name: _mode(p) for p in path.parent.iterdir()}
    finally:
        os.umask(old)
    assert _mode(path.parent) == 0o700
    assert modes == {"runs.sqlite3": 0o600, "runs.sqlite3-wal": 0o600, "runs.sqlite3-shm": 0o600}


def test_a_folder_others_may_write_is_refused(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(LedgerAccessError) as err:
        Ledger(folder / "runs.sqlite3")
    assert str(folder) in str(err.value) and "chmod go-w" in str(err.value)
    assert not (folder / "runs.sqlite3").exists()


def test_a_folder_or_file_of_another_user_is_refused(tmp_path):
    """Seen as user OTHER_UID, everything here is someone else's: refused, named, nothing written."""
    path = tmp_path / "mine" / "runs.sqlite3"
    Ledger(path).close()
    before = path.read_bytes()
    with pytest.raises(LedgerAccessError) as err:
        Ledger(path, uid=OTHER_UID)
    text = str(err.value)
    assert str(path.parent) in text and f"uid {ME}" in text and f"uid {OTHER_UID}" in text
    assert "Remove it" in text and "another ledger path" in text
    assert path.read_bytes() == before


@needs_root
def test_a_planted_file_or_side_file_is_refused(tmp_path):
    path = tmp_path / "mine" / "runs.sqlite3"
    Ledger(path).close()
    os.chown(path, OTHER_UID, -1)  # another user's database in the user's folder
    with pytest.raises(LedgerAccessError, match=rf"{path} is owned by uid {OTHER_UID}"):
        Ledger(path)
    os.chown(path, ME, -1)
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")
    os.chown(wal, OTHER_UID, -1)  # a side file SQLite would replay
    with pytest.raises(LedgerAccessError, match=rf"{wal} is owned by uid {OTHER_UID}"):
        Ledger(path)


def test_the_folder_above_must_be_the_users_and_sticky_if_anyone_may_write_it(tmp_path):
    above = tmp_path / "above"
    above.mkdir()
    os.chmod(above, 0o777)
    with pytest.raises(LedgerAccessError, match=r"writable by anyone and not sticky \(mode 0777\)"):
        Ledger(above / "dsh-gpu-dashboard" / "runs.sqlite3")
    os.chmod(above, 0o1777)  # as /tmp: entries only their owners rename
    Ledger(above / "dsh-gpu-dashboard" / "runs.sqlite3").close()
    if ME == 0:  # a folder above of another user's
        os.chown(above, OTHER_UID, -1)
        with pytest.raises(LedgerAccessError, match=rf"{above}, which holds the ledger's folder, is owned by uid {OTHER_UID}"):
            Ledger(above / "dsh-gpu-dashboard" / "runs.sqlite3")


@needs_root
def test_a_folder_link_of_another_user_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "dsh-gpu-dashboard"
    link.symlink_to(real)
    os.lchown(link, OTHER_UID, -1)
    with pytest.raises(LedgerAccessError, match="symbolic link owned by uid"):
        Ledger(link / "runs.sqlite3")
    assert list(real.iterdir()) == []


def test_links_and_writable_files_are_refused_and_readable_ones_made_private(tmp_path):
    folder = tmp_path / "ledger"
    folder.mkdir(mode=0o700)
    path = folder / "runs.sqlite3"
    target = tmp_path / "elsewhere"
    target.write_bytes(b"the user's other file")
    path.symlink_to(target)
    with pytest.raises(LedgerAccessError, match="symbolic link"):
        Ledger(path)
    assert target.read_bytes() == b"the user's other file"
    path.unlink()

    Ledger(path).close()
    os.chmod(path, 0o666)
    with pytest.raises(LedgerAccessError, match=r"writable by group or others \(mode 0666\)"):
        Ledger(path)
    os.chmod(path, 0o644)  # readable by others only: the user's own, made private
    Ledger(path).close()
    assert _mode(path) == 0o600

    Path(f"{path}-shm").unlink(missing_ok=True)
    Path(f"{path}-shm").symlink_to(target)
    with pytest.raises(LedgerAccessError, match="-shm is a symbolic link"):
        Ledger(path)


def test_a_newer_ledger_or_another_database_is_refused_untouched(tmp_path):
    path = tmp_path / "runs.sqlite3"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    conn.close()
    with pytest.raises(LedgerVersionError) as err:
        Ledger(path)
    assert str(path) in str(err.value) and "never downgraded" in str(err.value)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION + 1
    conn.close()

    other = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (text)")
    conn.close()
    os.chmod(other, 0o600)
    with pytest.raises(LedgerVersionError, match="not a run ledger"):
        Ledger(other)


class _MigratedMeanwhile:
    """A connection on which another sidecar's migrate() commits a new file's tables, id and version
    right after `PRAGMA application_id` is read: the moment two sidecars opening a new ledger at
    once met in, one of them taking the other's fresh file for another program's database."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path = conn, path

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        cursor = self.conn.execute(sql, *args)
        if sql == "PRAGMA application_id":
            other = sqlite3.connect(self.path, isolation_level=None)
            migrate(other)
            other.close()
        return cursor


def test_a_new_ledger_another_sidecar_migrates_meanwhile_is_a_ledger(tmp_path):
    from sidecar.sources.ledger.ledger import _check_kind

    path = tmp_path / "runs.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")  # as the other sidecar's _configure left it
    _check_kind(_MigratedMeanwhile(conn, path), path)  # type: ignore[arg-type]  # its execute alone
    conn.close()
    with Ledger(path) as ledger:
        assert ledger.runs() == ()


# -- schema ------------------------------------------------------------------------------------------------

def test_the_tables_hold_every_field_of_the_records(tmp_path):
    with Ledger(tmp_path / "runs.sqlite3") as ledger:
        pass
    conn = sqlite3.connect(tmp_path / "runs.sqlite3")
    columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in ("runs", "minutes", "verdict_changes")}
    conn.close()
    assert ledger.fault is None
    assert columns["runs"] == [c.name for c in RUN_COLUMNS]
    assert columns["minutes"] == ["run", *(c.name for c in MINUTE_COLUMNS)]
    assert columns["verdict_changes"] == ["run", *(c.name for c in CHANGE_COLUMNS)]
    fields = {f.name for cls in (RunIdentity, RunSetup, RunTotals) for f in dataclasses.fields(cls)}
    fields |= {f.name for f in dataclasses.fields(RunRecord)} - {"identity", "setup", "totals"}
    assert set(columns["runs"]) == fields
    assert set(columns["minutes"]) - {"run"} == {f.name for f in dataclasses.fields(MinuteFigures)}


@pytest.mark.parametrize("version", range(len(MIGRATIONS)))
def test_a_ledger_of_every_earlier_version_migrates_with_its_rows(tmp_path, version):
    """A file made by migrations[:version], rows put in as that version's tables hold them, opened by
    this code: at the latest version, every row there."""
    path = tmp_path / "runs.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, MIGRATIONS[:version]) == version
    if version >= 1:  # v1's tables: a run, a minute, a change
        conn.execute(
            "INSERT INTO runs (key, job_id, host, started_unix_s, uid, command, cwd, last_seen_unix_s, status)"
            " VALUES ('b/1-2', '1-2', 'node', ?, 1000, '[\"python\",\"train.py\"]', '/w', ?, 'ok')",
            (T0, T0 + 120),
        )
        conn.execute("INSERT INTO minutes (run, start_unix_s, span_s, minutes, polls, steps) VALUES ('b/1-2', ?, 60, 1, 30, 240)", (T0,))
        conn.execute("INSERT INTO verdict_changes (run, time_unix_s, status) VALUES ('b/1-2', ?, 'ok')", (T0,))
    conn.close()
    os.chmod(path, 0o600)
    with Ledger(path) as ledger:
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        conn.close()
        assert {"runs_by_last_seen", "runs_by_command", "minutes_unmerged"} <= indexes
        detail = ledger.detail("b/1-2")
        if version == 0:
            assert detail is None and ledger.runs() == ()
            return
        assert detail is not None
        assert detail.record.identity.command == ("python", "train.py") and detail.record.status == "ok"
        assert detail.minutes == (MinuteFigures(T0, polls=30, steps=240),)
        assert detail.timeline == (VerdictChange(T0, "ok"),)


# -- writing and reading -----------------------------------------------------------------------------------

def test_a_run_reads_back_as_written(tmp_path):
    ident = identity(1, T0)
    rec = record(ident, T0 + 180, ended=True, status="warning", warnings=("DATA_WAIT", "HELD_IDLE"))
    mins = tuple((ident.key, minute(T0 + 60 * i)) for i in range(3))
    changes = ((ident.key, VerdictChange(T0, "starting")), (ident.key, VerdictChange(T0 + 90, "warning", ("DATA_WAIT",))))
    with Ledger(tmp_path / "runs.sqlite3") as ledger:
        assert ledger.write(LedgerBatch(runs=(rec,), minutes=mins, changes=changes))
        detail = ledger.detail(ident.key)
        assert ledger.detail("no/such") is None
    assert detail is not None
    assert detail.record == rec and detail.record.state == "exited"
    assert detail.minutes == tuple(m for _, m in mins)
    assert detail.timeline == tuple(c for _, c in changes)


def test_a_forgotten_run_is_gone_whole_and_the_others_stay(tmp_path):
    kept, gone = identity(1, T0), identity(2, T0)
    with Ledger(tmp_path / "runs.sqlite3") as ledger:
        for ident in (kept, gone):
            ledger.write(LedgerBatch(runs=(record(ident, T0 + 60),), minutes=((ident.key, minute(T0)),),
                                     changes=((ident.key, VerdictChange(T0, "starting")),)))
        assert ledger.forget(gone.key) and ledger.forget("no/such")
        assert ledger.detail(gone.key) is None and [r.identity.key for r in ledger.runs()] == [kept.key]
        left = ledger.detail(kept.key)
        assert left is not None and len(left.minutes) == 1 and len(left.timeline) == 1
    with sqlite3.connect(tmp_path / "runs.sqlite3") as conn:  # no orphan minutes or changes of the run
        for table in ("minutes", "verdict_changes"):
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE run = ?", (gone.key,)).fetchone() == (0,)


def test_the_current_minute_grows_and_two_sidecars_merge_one_run(tmp_path):
    ident = identity(1, T0)
    with Ledger(tmp_path / "runs.sqlite3") as a, Ledger(tmp_path / "runs.sqlite3") as b:
        a.write(LedgerBatch(runs=(record(ident, T0 + 30),), minutes=((ident.key, minute(T0, polls=10)),),
                            changes=((ident.key, VerdictChange(T0, "starting")),)))
        a.write(LedgerBatch(minutes=((ident.key, minute(T0, polls=20, rate_hz=5.0)),)))
        # the second sidecar (started later: smaller totals, fewer polls of the minute) knows the pod
        # and the exit, and saw the same change a moment later
        later = dataclasses.replace(ident, pod="team/trainer-0", started_unix_s=T0 + 5)
        b.write(LedgerBatch(
            runs=(dataclasses.replace(record(later, T0 + 50, ended=True, status="warning", warnings=("X",)),
                                      totals=RunTotals(wall_s=10.0), setup=RunSetup(processes=3)),),
            minutes=((ident.key, minute(T0, polls=5, rate_hz=1.0)),),
            changes=((ident.key, VerdictChange(T0 + 1, "starting")),),
        ))
        detail = a.detail(ident.key)
    assert detail is not None
    rec = detail.record
    assert rec.identity.started_unix_s == T0 and rec.identity.pod == "team/trainer-0"
    assert rec.totals.wall_s == 30.0 and rec.totals.steps == 120  # the larger totals stay
    assert rec.setup.processes == 18 and rec.setup.torch_version == "2.9.1+cu128"  # nothing erased
    assert (rec.last_seen_unix_s, rec.ended_unix_s, rec.exit_code) == (T0 + 50, T0 + 50, 0)
    assert (rec.status, rec.warnings) == ("warning", ("X",))  # the verdict seen last
    assert detail.minutes == (minute(T0, polls=20, rate_hz=5.0),)  # the fuller copy of the minute
    assert detail.timeline == (VerdictChange(T0, "starting"),)  # one change, not two


def test_runs_are_listed_last_seen_first_and_previous_is_the_same_command_in_the_same_folder(tmp_path):
    cmd = ("python", "train.py", "--lr", "3e-4")
    runs = [
        identity(1, T0, command=cmd),
        identity(2, T0 + 100, command=cmd),
        identity(3, T0 + 200, command=cmd, cwd="/elsewhere"),
        identity(4, T0 + 300, command=(*cmd, "--fast")),
        identity(5, T0 + 400, command=cmd, uid=1001),
        identity(6, T0 + 500, command=cmd),
        identity(7, T0 + 600, command=()),
    ]
    with Ledger(tmp_path / "runs.sqlite3") as ledger:
        ledger.write(LedgerBatch(runs=tuple(record(r, r.started_unix_s + 50) for r in runs)))
        listed = [r.identity.key for r in ledger.runs()]
        since = [r.identity.key for r in ledger.runs(since_unix_s=T0 + 451, limit=10)]
        limited = ledger.runs(limit=2)
        prev6, prev2, prev1 = ledger.previous(runs[5].key), ledger.previous(runs[1].key), ledger.previous(runs[0].key)
        assert ledger.previous(runs[6].key) is None and ledger.previous("no/such") is None
    assert listed == [r.key for r in reversed(runs)]
    assert since == [runs[6].key, runs[5].key]
    assert [r.identity.key for r in limited] == [runs[6].key, runs[5].key]
    assert prev6 is not None and prev6.identity.key == runs[1].key
    assert prev2 is not None and prev2.identity.key == runs[0].key
    assert prev1 is None


def test_oversized_values_are_bounded_on_the_way_in(tmp_path):
    huge = "x" * (MAX_TEXT_CHARS * 3)
    ident = identity(1, T0, command=tuple(f"--arg{i}={huge}" for i in range(MAX_LIST_ITEMS * 2)), cwd=huge)
    rec = dataclasses.replace(record(ident, T0 + 60), warnings=("W",) * 10_000)
    nan = dataclasses.replace(minute(T0), step_rate_hz=float("nan"), power_w=float("inf"))
    with Ledger(tmp_path / "runs.sqlite3") as ledger:
        assert ledger.write(LedgerBatch(runs=(rec,), minutes=((ident.key, nan),)))
        detail = ledger.detail(ident.key)
    assert detail is not None
    got = detail.record
    assert got.identity.cwd == huge[:MAX_TEXT_CHARS]
    assert 0 < len(got.identity.command) <= MAX_LIST_ITEMS
    assert all(len(a) <= MAX_TEXT_CHARS for a in got.identity.command)
    assert len(json.dumps(got.identity.command)) <= MAX_JSON_CHARS
    assert got.warnings == ("W",) * MAX_LIST_ITEMS
    assert detail.minutes[0].step_rate_hz is None and detail.minutes[0].power_w is None


def test_tampered_rows_are_dropped_or_read_as_unknown(tmp_path):
    path = tmp_path / "runs.sqlite3"
    good, bad = identity(1, T0), identity(2, T0 + 1)
    with Ledger(path) as ledger:
        ledger.write(LedgerBatch(
            runs=(record(good, T0 + 60), record(bad, T0 + 61)),
            minutes=((good.key, minute(T0)), (good.key, minute(T0 + 60))),
            changes=((good.key, VerdictChange(T0, "ok")), (good.key, VerdictChange(T0 + 60, "warning"))),
        ))
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE runs SET host = x'0102' WHERE key = ?", (bad.key,))  # a required field of the wrong kind
            conn.execute(
                "UPDATE runs SET wall_s = 'lots', uid = 'root', command = '{\"not\": \"a list\"}', gpu_models = 'oops',"
                " loader = '[[1, 2]]', user = ?, warnings = ? WHERE key = ?",
                ("u" * 100_000, "[" + ",".join(['"W"'] * 20_000) + "]", good.key),
            )
            conn.execute("UPDATE minutes SET start_unix_s = 'noon' WHERE start_unix_s = ?", (T0,))
            conn.execute("UPDATE minutes SET polls = 2.5, gpu_util_pct = x'00ff', clock_reasons = '[1]'")
            conn.execute("UPDATE verdict_changes SET status = x'03' WHERE time_unix_s = ?", (T0,))
        conn.close()
        listed = ledger.runs()
        detail = ledger.detail(good.key)
        assert ledger.detail(bad.key) is None
    assert [r.identity.key for r in listed] == [good.key]
    assert detail is not None
    rec = detail.record
    assert rec.totals.wall_s == 0.0 and rec.identity.uid is None and rec.identity.command == ()
    assert rec.setup.gpu_models == () and rec.setup.loader == ()
    assert rec.identity.user == "u" * MAX_TEXT_CHARS
    assert rec.warnings == ()  # longer than MAX_JSON_CHARS: not read
    assert [m.start_unix_s for m in detail.minutes] == [T0 + 60]
    assert detail.minutes[0].polls == 0 and detail.minutes[0].gpu_util_pct is None
    assert detail.minutes[0].clock_reasons == ()
    assert detail.timeline == (VerdictChange(T0 + 60, "warning"),)
