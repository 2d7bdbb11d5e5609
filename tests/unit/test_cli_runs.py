"""Where a polling command's runs ledger is and how it is opened (sidecar/cli/runs.py): --no-runs
and --once record nothing; a ledger that cannot be opened is said once and the sidecar serves live."""

from __future__ import annotations

import os
import sys
import types

import pytest

from sidecar.cli import runs
from sidecar.cli.args import run_parser, serve_parser
from sidecar.poll.recorder import Recording


class _Sink:
    fault = None

    def write(self, batch):
        pass

    def detail(self, key):
        return None

    def maintain(self, now_unix_s):
        pass


@pytest.fixture
def ledger(monkeypatch):
    """A stand-in for sidecar.sources.ledger: its opener records the paths it was given."""
    module = types.ModuleType(runs.LEDGER_MODULE)
    opened: list[str] = []

    def open_ledger(path: str):
        opened.append(path)
        if "unwritable" in path:
            raise PermissionError(f"[Errno 13] Permission denied: {path!r}")
        return _Sink()

    module.open_ledger = open_ledger  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, runs.LEDGER_MODULE, module)
    return opened


def test_the_options_of_each_polling_command():
    for parser, extra in ((serve_parser(), []), (run_parser(), ["--", "true"])):
        args = parser.parse_args(["--runs-db", "/tmp/x.sqlite3", *extra])
        assert (args.runs_db, args.no_runs) == ("/tmp/x.sqlite3", False)
        assert parser.parse_args(["--no-runs", *extra]).no_runs is True


def test_no_runs_and_once_open_nothing(ledger):
    assert runs.open_recording(serve_parser().parse_args(["--no-runs"])) is None
    assert runs.open_recording(serve_parser().parse_args(["--once"])) is None
    assert ledger == []


def test_the_given_path_then_dsh_runs_db_then_the_default(ledger, tmp_path, monkeypatch):
    rec = runs.open_recording(serve_parser().parse_args(["--runs-db", str(tmp_path / "r.sqlite3")]), batched=True)
    assert isinstance(rec, Recording) and rec.batched and ledger == [str(tmp_path / "r.sqlite3")]
    monkeypatch.setenv("DSH_RUNS_DB", str(tmp_path / "env.sqlite3"))
    runs.open_recording(serve_parser().parse_args([]))
    assert ledger[-1] == str(tmp_path / "env.sqlite3")
    monkeypatch.delenv("DSH_RUNS_DB")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    runs.open_recording(serve_parser().parse_args([]))
    want = str(tmp_path / "state" / "dsh-gpu-dashboard" / "runs.sqlite3")
    assert ledger[-1] == (runs.ROOT_RUNS_DB if os.geteuid() == 0 else want)


def test_default_path_follows_xdg(monkeypatch, tmp_path):
    if os.geteuid() == 0:
        assert runs.default_runs_db() == "/var/lib/dsh-gpu-dashboard/runs.sqlite3"
        return
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert runs.default_runs_db() == str(tmp_path / ".local/state/dsh-gpu-dashboard/runs.sqlite3")


def test_a_ledger_that_cannot_be_opened_is_said_once_and_nothing_is_recorded(ledger, capsys):
    args = serve_parser().parse_args(["--runs-db", "/unwritable/runs.sqlite3"])
    assert runs.open_recording(args) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs are not recorded" in err and "/unwritable/runs.sqlite3" in err
    assert "Permission denied" in err


def test_without_a_ledger_module_nothing_is_recorded(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, runs.LEDGER_MODULE, None)  # import fails
    assert runs.open_recording(serve_parser().parse_args([])) is None
    assert capsys.readouterr().err == ""
