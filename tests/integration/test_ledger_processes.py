"""The run ledger (sidecar/sources/ledger) with real processes: two sidecars of one user writing the
same file at once, and a writer killed with SIGKILL mid-write. Whatever happens, the file passes
`PRAGMA integrity_check` and holds every batch a writer had committed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from sidecar.sources.ledger import Ledger
from tests.helpers.ledger_runs import identity

REPO = Path(__file__).resolve().parents[2]
BATCHES = 600  # per writer: about half a second of writing each


def _writer(path: Path, prefix: str, count: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.ledger_runs", "write", str(path), prefix, str(count)],
        cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_two_writers_at_once_lose_nothing_and_corrupt_nothing(tmp_path):
    path = tmp_path / "runs.sqlite3"
    writers = [_writer(path, prefix, BATCHES) for prefix in ("a-", "b-")]
    for w in writers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    outputs = [w.communicate(timeout=120)[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs
    (a0, a1), (b0, b1) = ([float(t) for t in out.split()[-2:]] for out in outputs)
    assert max(a0, b0) < min(a1, b1), "the two writers never wrote at the same time"
    assert _integrity(path) == "ok"
    with Ledger(path) as ledger:
        keys = {r.identity.key for r in ledger.runs(limit=10_000)}
        shared = ledger.detail(identity(0, 0, prefix="shared-").key)
        own = ledger.detail(identity(BATCHES - 1, 0, prefix="b-").key)
    expected = {identity(n, 0, prefix=p).key for p in ("a-", "b-") for n in range(BATCHES)}
    assert keys == expected | {identity(0, 0, prefix="shared-").key}
    assert shared is not None and len(shared.minutes) == BATCHES  # both wrote each minute: one row each
    assert own is not None and len(own.minutes) == 1 and len(own.timeline) == 1


def test_a_writer_killed_mid_write_leaves_every_committed_batch(tmp_path):
    path = tmp_path / "runs.sqlite3"
    child = _writer(path, "k-", 1_000_000)
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    committed = []
    while len(committed) < 400:
        committed.append(int(child.stdout.readline()))
    child.send_signal(signal.SIGKILL)
    rest = child.stdout.read()  # what it printed before it died was committed too
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    committed += [int(line) for line in rest.split()]
    assert committed == list(range(len(committed)))

    assert _integrity(path) == "ok"
    with Ledger(path) as ledger:
        assert ledger.notice is None
        keys = {r.identity.key for r in ledger.runs(limit=10_000)}
    assert {identity(n, 0, prefix="k-").key for n in committed} <= keys
    assert len(keys) <= len(committed) + 2  # the shared run, and at most the batch it was writing
