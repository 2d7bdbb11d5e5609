"""The run ledger's faults (sidecar/sources/ledger): a damaged file at open is moved aside and a new
one started, with a notice; a full disk drops batches into a `fault` the caller reads, never an
exception, and writing resumes when there is room; a folder that cannot be written is a clear error
at open. (A process killed mid-write and two writers at once: tests/integration/test_ledger_processes.py.)"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from sidecar.common.runs import VerdictChange
from sidecar.sources.ledger import Ledger, LedgerAccessError, LedgerBatch, Retention
from tests.helpers.ledger_runs import DAY_START_UNIX_S as T0
from tests.helpers.ledger_runs import identity, minute, record

STAMP_UNIX_S = 1_796_515_200.0  # 2026-12-06 00:00:00 UTC: the clock of the ledger under test
MOVED = "runs.sqlite3.corrupt-20261206T000000Z"


def _fill(path: Path, runs: int) -> None:
    with Ledger(path) as ledger:
        for i in range(runs):
            ident = identity(i, T0 + i)
            assert ledger.write(LedgerBatch(runs=(record(ident, T0 + i + 60),),
                                            minutes=tuple((ident.key, minute(T0 + 60 * m)) for m in range(5))))


def _reopened(path: Path) -> tuple[Ledger, list[str]]:
    ledger = Ledger(path, clock=lambda: STAMP_UNIX_S)
    return ledger, sorted(p.name for p in path.parent.iterdir())


def test_garbage_is_moved_aside_and_a_new_ledger_started(tmp_path):
    path = tmp_path / "runs.sqlite3"
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    os.chmod(path, 0o600)
    ledger, names = _reopened(path)
    with ledger:
        assert ledger.notice is not None
        assert str(path) in ledger.notice and MOVED in ledger.notice and "moved aside" in ledger.notice
        assert ledger.write(LedgerBatch(runs=(record(identity(1, T0), T0 + 60),)))
        assert len(ledger.runs()) == 1
    assert (tmp_path / MOVED).read_bytes() == garbage
    assert MOVED in names and "runs.sqlite3" in names


def test_a_truncated_ledger_is_moved_aside_with_its_side_files(tmp_path):
    path = tmp_path / "runs.sqlite3"
    _fill(path, 200)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    Path(f"{path}-wal").write_bytes(b"")  # a side file of the damaged file goes with it
    os.chmod(f"{path}-wal", 0o600)
    ledger, names = _reopened(path)
    with ledger:
        assert ledger.notice is not None and MOVED in ledger.notice
        assert ledger.runs() == ()
    assert f"{MOVED}-wal" in names
    assert (tmp_path / MOVED).stat().st_size == size // 2


def test_a_healthy_ledger_is_never_moved(tmp_path):
    path = tmp_path / "runs.sqlite3"
    _fill(path, 20)
    ledger, names = _reopened(path)
    with ledger:
        assert ledger.notice is None and len(ledger.runs()) == 20
    assert not [n for n in names if "corrupt" in n]


def test_a_full_disk_drops_batches_into_a_fault_and_writing_resumes_when_there_is_room(tmp_path):
    """SQLITE_FULL as max_page_count gives it (a full disk answers the same): write() returns False
    and never raises, the batch is not there, `fault` says so since the first failure; maintain()
    (here over its size cap) frees room and the next write clears the fault."""
    now = [T0]
    small = Retention(size_cap_bytes=96 << 10, hard_cap_bytes=160 << 10)
    ledger = Ledger(tmp_path / "runs.sqlite3", retention=small, clock=lambda: now[0])
    written = 0
    for i in range(1_000):
        ident = identity(i, T0 + i)
        now[0] = T0 + i
        batch = LedgerBatch(runs=(record(ident, T0 + i + 60),), minutes=((ident.key, minute(T0)),),
                            changes=((ident.key, VerdictChange(T0 + i, "ok")),))
        if not ledger.write(batch):
            break
        written += 1
    assert 0 < written < 1_000, "the cap was never reached"
    fault = ledger.fault
    assert fault is not None and "full" in fault.text and str(ledger.path) in fault.text
    assert (fault.since_unix_s, fault.dropped_batches) == (T0 + written, 1)
    assert ledger.detail(identity(written, 0).key) is None  # the failed batch is not half there
    assert len(ledger.runs(limit=10_000)) == written

    now[0] += 5
    assert not ledger.write(batch)
    assert ledger.fault is not None and (ledger.fault.since_unix_s, ledger.fault.dropped_batches) == (T0 + written, 2)

    done = ledger.maintain(T0 + written + 120)
    assert done.runs_over_cap > 0 and done.used_bytes <= small.size_cap_bytes
    assert ledger.write(batch)
    assert ledger.fault is None
    assert ledger.detail(identity(written, 0).key) is not None
    ledger.close()


def test_a_folder_that_cannot_be_written_is_a_clear_error_at_open(tmp_path):
    folder = tmp_path / "ledger"
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o500)
    try:
        with pytest.raises(LedgerAccessError) as err:
            Ledger(folder / "runs.sqlite3")
        assert str(folder) in str(err.value) and "not writable (mode 0500)" in str(err.value)
        assert "chmod u+w" in str(err.value)
        assert list(folder.iterdir()) == []
        os.chmod(folder, 0o700)
        _fill(folder / "runs.sqlite3", 3)
        os.chmod(folder, 0o500)  # an existing ledger in a folder made read-only since
        with pytest.raises(LedgerAccessError, match="not writable"):
            Ledger(folder / "runs.sqlite3")
    finally:
        os.chmod(folder, 0o700)


def test_a_missing_folder_that_cannot_be_made_is_a_clear_error(tmp_path):
    parent = tmp_path / "locked"
    parent.mkdir(mode=0o500)
    try:
        if os.geteuid() == 0:  # root makes folders anywhere: a file in the way instead
            os.chmod(parent, 0o700)
            (parent / "state").write_text("")
            target = parent / "state" / "dsh-gpu-dashboard" / "runs.sqlite3"
        else:
            target = parent / "dsh-gpu-dashboard" / "runs.sqlite3"
        with pytest.raises(LedgerAccessError, match=r"(cannot make|cannot look at) the ledger's folder .*dsh-gpu-dashboard"):
            Ledger(target)
    finally:
        os.chmod(parent, 0o700)
