"""Where a polling command's runs ledger is and how it is opened (sidecar/cli/runs.py), with the real
ledger (sidecar/sources/ledger) on temporary paths: --no-runs and --once record nothing; a ledger
that cannot be opened is said once and the sidecar serves live; a damaged one is said and replaced."""

from __future__ import annotations

import os

from sidecar.cli import runs
from sidecar.cli.args import run_parser, serve_parser
from sidecar.poll.recorder import Recording
from sidecar.sources.ledger import Ledger


def test_the_options_of_each_polling_command():
    for parser, extra in ((serve_parser(), []), (run_parser(), ["--", "true"])):
        args = parser.parse_args(["--runs-db", "/tmp/x.sqlite3", *extra])
        assert (args.runs_db, args.no_runs) == ("/tmp/x.sqlite3", False)
        assert parser.parse_args(["--no-runs", *extra]).no_runs is True


def test_no_runs_and_once_open_nothing(tmp_path):
    db = tmp_path / "runs" / "runs.sqlite3"
    assert runs.open_recording(serve_parser().parse_args(["--no-runs", "--runs-db", str(db)])) is None
    assert runs.open_recording(serve_parser().parse_args(["--once", "--runs-db", str(db)])) is None
    assert not db.parent.exists()


def test_the_given_path_then_dsh_runs_db_then_the_default(tmp_path, monkeypatch):
    rec = runs.open_recording(serve_parser().parse_args(["--runs-db", str(tmp_path / "a" / "r.sqlite3")]), batched=True)
    assert isinstance(rec, Recording) and rec.batched and isinstance(rec.sink, Ledger)
    assert rec.sink.path == tmp_path / "a" / "r.sqlite3" and rec.fault is None
    rec.sink.close()
    monkeypatch.setenv("DSH_RUNS_DB", str(tmp_path / "env.sqlite3"))
    assert runs.ledger_path(serve_parser().parse_args([])) == tmp_path / "env.sqlite3"
    monkeypatch.delenv("DSH_RUNS_DB")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    want = "/var/lib/dsh-gpu-dashboard/runs.sqlite3" if os.geteuid() == 0 else str(
        tmp_path / "state" / "dsh-gpu-dashboard" / "runs.sqlite3"
    )
    assert str(runs.ledger_path(serve_parser().parse_args([]))) == want


def test_a_ledger_that_cannot_be_opened_is_said_once_and_nothing_is_recorded(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    path = tmp_path / "a-file" / "runs.sqlite3"  # its folder would have to be inside a file
    assert runs.open_recording(serve_parser().parse_args(["--runs-db", str(path)])) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dsh-sidecar: runs are not recorded: ") and str(tmp_path) in err


def test_a_damaged_ledger_is_said_and_a_new_one_started(tmp_path, capsys):
    folder = tmp_path / "runs"
    folder.mkdir(mode=0o700)
    db = folder / "runs.sqlite3"
    db.write_bytes(b"not a database, " * 512)
    db.chmod(0o600)
    rec = runs.open_recording(serve_parser().parse_args(["--runs-db", str(db)]))
    assert rec is not None and rec.fault is None
    rec.sink.close()
    err = capsys.readouterr().err
    assert err.startswith("dsh-sidecar: ") and err.count("\n") == 1
    assert any(p.name.startswith("runs.sqlite3.corrupt-") for p in folder.iterdir())


def test_the_hidden_runs_period_reaches_the_recording_and_is_checked(tmp_path, capsys):
    """--runs-period (tests only, not in --help): a ledger row's span, a minute by default."""
    db = str(tmp_path / "r.sqlite3")
    for parser, extra in ((serve_parser(), []), (run_parser(), ["--", "true"])):
        assert "--runs-period" not in parser.format_help()
        default = runs.open_recording(parser.parse_args(["--runs-db", db, *extra]))
        short = runs.open_recording(parser.parse_args(["--runs-db", db, "--runs-period", "2", *extra]))
        assert default is not None and short is not None
        assert (default.period_s, short.period_s) == (60.0, 2.0)
        default.sink.close()
        short.sink.close()
    # under a second, not a whole number of them to the hour, over a minute, not a number of seconds
    for bad in ("0.5", "7", "120", "0", "nan"):
        try:
            serve_parser().parse_args(["--runs-period", bad])
        except SystemExit as exc:
            assert exc.code == 2
        else:
            raise AssertionError(f"--runs-period {bad} was taken")
        assert "argument --runs-period" in capsys.readouterr().err
