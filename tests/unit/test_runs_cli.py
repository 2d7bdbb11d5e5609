"""`dsh-sidecar runs` and `dsh-sidecar compare` in this process (sidecar.cli.main.main) on ledgers
in a temporary folder, filled through the ledger's own API (tests/helpers/runs_ledger.py): the
table and the judgement, their JSON, the ids a person types, and every refusal with its exit code
and one line that says what to do. Nothing the ledger holds reaches the terminal as a control or
bidi character."""

from __future__ import annotations

import json
import os
import re

import pytest

from sidecar.cli.main import main
from sidecar.common.exit_codes import EXIT_LEDGER, EXIT_NO_PREVIOUS, EXIT_NO_RUN, EXIT_OK, EXIT_USAGE
from sidecar.documents import contract
from tests.helpers.runs_ledger import FORGED, fill, short

STEERING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "state" / "runs.sqlite3"
    return path, fill(path)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_lists_the_runs_last_seen_first_with_what_a_person_reads(capsys, ledger):
    path, runs = ledger
    code, out, err = cli(capsys, "runs", "--runs-db", str(path))
    assert code == EXIT_OK and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["id", "started", "took", "state", "verdict"]
    ids = [line.split()[0] for line in lines[1:5]]
    assert ids == [short(runs[n]) for n in ("forged", "other", "slow", "base")]  # the last seen first
    slow = lines[3]
    assert "10m00s" in slow and "exit 0" in slow and "GPU (data-wait)" in slow and "python train.py" in slow
    assert " 2400 " in slow and " 0.33 " in slow  # steps; GPU-hours held (2 GPUs x 10 minutes)
    assert "live" in lines[2] and "python eval.py" in lines[2]
    assert lines[-1] == "compare a run with the one before it: dsh-sidecar compare ID"
    assert "user" not in lines[0]  # one user's ledger


def test_a_ledger_of_several_users_names_each_runs_user(capsys, ledger):
    import dataclasses

    from sidecar.sources.ledger import Ledger, LedgerBatch

    path, runs = ledger
    other = runs["other"]  # root's ledger holds every user's runs: bob's beside ada's
    ident = dataclasses.replace(other.identity, key=other.identity.key + "-bob", user="bob", uid=1001)
    bob = dataclasses.replace(other, identity=ident, last_seen_unix_s=(other.last_seen_unix_s or 0) + 1)
    with Ledger(path) as writer:
        assert writer.write(LedgerBatch((bob,)))
    _, out, _ = cli(capsys, "runs", "--runs-db", str(path))
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["id", "user"]
    assert lines[2].split()[:2] == [short(bob), "bob"] and lines[3].split()[:2] == [short(other), "ada"]


def test_runs_since_and_json_keep_to_the_contract(capsys, ledger):
    path, runs = ledger
    code, out, _ = cli(capsys, "runs", "--runs-db", str(path), "--json", "--since", "2026-11-30T03:02:00Z")
    assert code == EXIT_OK
    doc = json.loads(out)
    contract.check(doc, "runs")
    # last seen at or after 03:02 UTC: `other` (03:00 to 03:05) and `forged` (03:30 to 03:35)
    assert [r["key"] for r in doc["runs"]] == [runs["forged"].identity.key, runs["other"].identity.key]
    assert doc["since_unix_s"] == runs["other"].identity.started_unix_s + 120
    assert doc["runs"][1]["state"] == "live" and doc["runs"][1]["steps"] is None
    code, out, _ = cli(capsys, "runs", "--runs-db", str(path), "--since", "1h")  # an hour back from now
    assert code == EXIT_OK and out.startswith("no runs recorded since ")


def test_compare_defaults_to_the_previous_run_and_names_the_cause(capsys, ledger):
    path, runs = ledger
    code, out, err = cli(capsys, "compare", short(runs["slow"])[:5], "--runs-db", str(path))
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0].startswith(f"run {short(runs['slow'])} (python train.py; /home/ada/proj; started ")
    assert lines[1].startswith(
        f"against the previous run of the same command in the same folder, {short(runs['base'])} "
    )
    assert lines[3].startswith("Throughput: REGRESSION, 4 steps/s → 2.5 steps/s (-37.5%; noise ±")
    assert lines[4].startswith("GPU busy share: WITHIN NOISE")
    causes = out.split("causes, largest first:\n")[1].splitlines()
    assert causes[0].startswith("  - Waiting for data: 20.0 ms → 200.0 ms per step (8% → 50% of the step)")
    assert causes[1] == "      DataLoader settings changed: num_workers=8 → num_workers=0."
    assert "{" not in out  # every catalogue placeholder was filled


def test_compare_json_and_the_other_run_given_by_job_id(capsys, ledger):
    path, runs = ledger
    code, out, _ = cli(
        capsys, "compare", runs["base"].identity.job_id, runs["slow"].identity.key, "--json", "--runs-db", str(path)
    )
    assert code == EXIT_OK
    doc = json.loads(out)
    contract.check(doc, "compare")
    assert doc["baseline_choice"] == "given" and doc["outcome"] == "improvement"
    assert doc["causes"][0]["code"] == "data-wait" and doc["causes"][0]["reasons"][0]["code"] == "loader-settings"
    assert doc["message_ref"]["id"] == "compare.outcome.improvement" and doc["message"].startswith("Throughput:")


def test_compare_refusals_each_with_its_code_and_one_line(capsys, ledger, tmp_path):
    path, runs = ledger
    db = ("--runs-db", str(path))
    code, _, err = cli(capsys, "compare", short(runs["base"]), *db)
    assert code == EXIT_NO_PREVIOUS and "no earlier run of the same command in the same folder" in err
    code, _, err = cli(capsys, "compare", "abcdef12", *db)
    assert code == EXIT_NO_RUN and "no run abcdef12 is recorded" in err and "dsh-sidecar runs" in err
    code, _, err = cli(capsys, "compare", "100001-9000001", "--runs-db", str(tmp_path / "none.sqlite3"))
    assert code == EXIT_NO_RUN and "no runs are recorded yet" in err
    for text in (f"{short(runs['base'])[:4]}\x1b[2J", "ab\u202ecd", "ab\ncd", "x" * 200, "ab cd"):
        code, out, err = cli(capsys, "compare", text, *db)
        assert code == EXIT_USAGE and out == "" and err.count("\n") == 1, (text, err)
        assert "letters, digits and ._:/- only" in err and not STEERING.search(err)
    assert not STEERING.search(err)


def test_an_ambiguous_id_lists_the_runs_it_could_be(capsys, ledger):
    path, runs = ledger
    # job ids are per boot: the same job id on another boot is another run
    import dataclasses

    from sidecar.common.runs import run_key
    from sidecar.sources.ledger import Ledger, LedgerBatch

    base = runs["base"]
    twin = dataclasses.replace(
        base, identity=dataclasses.replace(base.identity, key=run_key("another-boot", base.identity.job_id))
    )
    with Ledger(path) as ledger:
        assert ledger.write(LedgerBatch((twin,)))
    code, _, err = cli(capsys, "compare", base.identity.job_id, "--runs-db", str(path))
    assert code == EXIT_NO_RUN and f"{base.identity.job_id} names 2 runs: " in err and "give more of the id" in err
    assert short(base) in err and short(twin) in err


def test_nothing_from_the_ledger_reaches_the_terminal_as_a_control_character(capsys, ledger):
    path, runs = ledger
    _, table, _ = cli(capsys, "runs", "--runs-db", str(path))
    code, text, _ = cli(capsys, "compare", short(runs["forged"]), short(runs["base"]), "--runs-db", str(path))
    assert code == EXIT_OK
    _, as_json, _ = cli(capsys, "runs", "--json", "--runs-db", str(path))
    for out in (table, text, as_json):
        assert not STEERING.search(out), out
    assert "\\u001b[2J" in table and "forged" in table  # shown escaped, never obeyed
    assert "- 9999 forged line" not in table.splitlines()  # no line of its own
    assert json.loads(as_json)["runs"][0]["command"][1] == FORGED  # the JSON still carries the text
    assert "\\u202e" in as_json  # the bidi override escaped in the JSON text itself


def test_no_ledger_is_no_runs_yet_and_an_unsafe_one_is_refused(capsys, tmp_path):
    missing = tmp_path / "state" / "runs.sqlite3"
    code, out, _ = cli(capsys, "runs", "--runs-db", str(missing))
    assert code == EXIT_OK and out.startswith(f"dsh-sidecar: no runs are recorded yet: a sidecar records the runs it watches in {missing}")
    assert not missing.exists() and not missing.parent.exists()  # reading never makes one
    code, out, err = cli(capsys, "runs", "--json", "--runs-db", str(missing))
    assert code == EXIT_OK and json.loads(out)["runs"] == [] and "no runs are recorded yet" in err
    fill(missing)
    os.chmod(missing, 0o666)  # another user could have written it
    code, out, err = cli(capsys, "runs", "--runs-db", str(missing))
    assert code == EXIT_LEDGER and out == "" and "is writable by group or others" in err and err.count("\n") == 1
    code, _, err = cli(capsys, "runs", "--since", "3 fortnights", "--runs-db", str(missing))
    assert code == EXIT_USAGE and "--since: since is a duration back from now" in err


def test_the_default_ledger_is_the_users_state_folder(capsys, tmp_path, monkeypatch):
    """Without --runs-db: $XDG_STATE_HOME/dsh-gpu-dashboard/runs.sqlite3 (root: /var/lib's), the
    file the recorder writes by default."""
    from argparse import Namespace

    from sidecar.cli.runs import ledger_path

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    given = Namespace(runs_db=str(tmp_path / "given.sqlite3"))
    assert ledger_path(given) == tmp_path / "given.sqlite3"
    if os.geteuid() == 0:
        assert str(ledger_path(Namespace(runs_db=None))) == "/var/lib/dsh-gpu-dashboard/runs.sqlite3"
        return
    fill(tmp_path / "xdg" / "dsh-gpu-dashboard" / "runs.sqlite3")
    code, out, _ = cli(capsys, "runs")
    assert code == EXIT_OK and len(out.splitlines()) == 6  # the header, four runs, the hint
