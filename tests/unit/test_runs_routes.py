"""The runs routes (GET /api/dsh-gpu-dashboard/runs, /runs/<id>, /compare?a=&b=) of the Flask app
with a real runs source (sidecar/poll/runs_source.py) over a ledger in a temporary folder: the
documents keep to the contract, runs are named as a person names them, parameters are checked before
the ledger is read, the token guards them as it guards /status, and a sidecar without a ledger, or
with one it cannot read, says so."""

from __future__ import annotations

import os
from urllib.parse import quote

import pytest

from sidecar.documents import contract
from sidecar.poll.runs_source import LedgerRuns
from sidecar.serve.server import API, ServerConfig, create_app
from tests.helpers.runs_ledger import fill, short
from tests.helpers.static_source import StaticSource

TOKEN = "runs-route-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "state" / "runs.sqlite3"
    return path, fill(path)


def app_client(runs, token: str | None = TOKEN):
    return create_app(ServerConfig(token=token), StaticSource({"schema": 2}, 1.0), runs=runs).test_client()


@pytest.fixture
def client(ledger):
    source = LedgerRuns(ledger[0])
    yield app_client(source)
    source.close()


def get(client, path: str):
    r = client.get(f"{API}{path}", headers=AUTH)
    return r.status_code, r.get_json()


def test_the_runs_list_keeps_to_the_contract_and_since_narrows_it(client, ledger):
    _, runs = ledger
    code, doc = get(client, "/runs")
    assert code == 200
    contract.check(doc, "runs")
    assert [r["id"] for r in doc["runs"]] == [short(runs[n]) for n in ("forged", "other", "slow", "base")]
    since = runs["other"].identity.started_unix_s + 120
    code, doc = get(client, f"/runs?since={since:.0f}")
    assert code == 200 and [r["id"] for r in doc["runs"]] == [short(runs["forged"]), short(runs["other"])]
    assert get(client, "/runs?since=2026-11-30T03:02:00Z")[1]["runs"] == doc["runs"]
    assert get(client, "/runs?since=30m")[1]["runs"] == []  # the runs ended days before now
    for bad in ("abc", "nan", "-5", "7y", "1e999", "%1b[2J", "9" * 41):
        code, doc = get(client, f"/runs?since={bad}")
        assert code == 400 and doc["error"].startswith("since is a duration back from now"), bad


def test_one_run_by_its_id_job_id_or_key_with_its_timeline_and_minutes(client, ledger):
    _, runs = ledger
    slow = runs["slow"]
    code, doc = get(client, f"/runs/{short(slow)}")
    assert code == 200
    contract.check(doc, "run")
    assert doc["run"]["key"] == slow.identity.key and doc["previous"] == short(runs["base"])
    assert [(c["status"], c["warnings"]) for c in doc["timeline"]] == [("GPU", []), ("GPU", ["data-wait"])]
    assert len(doc["minutes"]) == 10 and doc["minutes"][3]["data_wait_fraction"] == 0.5
    assert doc["setup"]["loader"][0] == {"name": "num_workers", "value": "0"}
    for name in (short(slow)[:4], slow.identity.job_id, slow.identity.key):  # a key has a slash in it
        assert get(client, f"/runs/{name}")[1] == doc, name
    assert get(client, f"/runs/{short(runs['base'])}")[1]["previous"] is None


def test_compare_with_the_previous_run_and_with_a_run_given(client, ledger):
    _, runs = ledger
    code, doc = get(client, f"/compare?a={short(runs['slow'])}")
    assert code == 200
    contract.check(doc, "compare")
    assert doc["baseline"]["id"] == short(runs["base"]) and doc["baseline_choice"] == "previous"
    assert doc["outcome"] == "regression" and [c["code"] for c in doc["causes"]] == ["data-wait"]
    assert doc["throughput"]["outcome"] == "regression" and doc["gpu_busy"]["outcome"] == "within-noise"
    assert doc["reasons"][0]["code"] == "loader-settings" and doc["reasons"][0]["share_fraction"] == 1.0
    code, given = get(client, f"/compare?a={short(runs['base'])}&b={short(runs['slow'])}")
    assert code == 200 and given["baseline_choice"] == "given" and given["outcome"] == "improvement"
    code, other = get(client, f"/compare?a={short(runs['other'])}&b={short(runs['base'])}")
    assert code == 200 and other["outcome"] == "not-comparable" and not other["comparable"]
    assert [n["code"] for n in other["notes"]] == ["no-steps", "command"]


@pytest.mark.parametrize(
    ("query", "code", "needle"),
    [
        ("", 400, "a is required"),
        ("a=", 400, "a is required"),
        ("a=%1b%5b2J", 400, "letters, digits and ._:/- only"),
        ("a=ab%E2%80%AEcd", 400, "letters, digits and ._:/- only"),
        ("a=ab%0Acd", 400, "letters, digits and ._:/- only"),
        ("a=" + "a" * 129, 400, "at most 128"),
        ("a=abcdef12", 404, "no run abcdef12 is recorded"),
        ("a=abc", 404, "no run abc is recorded"),  # under four digits: no id prefix
    ],
)
def test_compare_parameters_are_checked(client, query, code, needle):
    got, doc = get(client, f"/compare?{query}")
    assert (got, doc["status"]) == (code, code) and needle in doc["error"], doc


def test_no_previous_run_is_404_saying_what_to_do(client, ledger):
    _, runs = ledger
    code, doc = get(client, f"/compare?a={short(runs['base'])}")
    assert code == 404 and "no earlier run of the same command in the same folder" in doc["error"]
    assert f"compare {short(runs['base'])} OTHER" in doc["error"]


def test_an_id_two_runs_share_answers_400_with_the_candidates(ledger):
    import dataclasses

    from sidecar.common.runs import run_key
    from sidecar.sources.ledger import Ledger, LedgerBatch

    path, runs = ledger
    base = runs["base"]
    twin = dataclasses.replace(base, identity=dataclasses.replace(base.identity, key=run_key("boot-2", base.identity.job_id)))
    with Ledger(path) as writer:
        assert writer.write(LedgerBatch((twin,)))
    source = LedgerRuns(path)
    code, doc = get(app_client(source), f"/compare?a={base.identity.job_id}")
    source.close()
    assert code == 400 and "names 2 runs" in doc["error"]
    assert {c["key"] for c in doc["candidates"]} == {base.identity.key, twin.identity.key}
    for candidate in doc["candidates"]:
        contract.check({"schema": 2, "time_unix_s": 0.0, "since_unix_s": None, "runs": [candidate],
                        "truncated": False, "notice": None}, "runs")


def test_the_token_guards_the_runs_routes_as_it_guards_status(client, ledger):
    _, runs = ledger
    for path in ("/runs", f"/runs/{short(runs['slow'])}", f"/compare?a={short(runs['slow'])}", "/status"):
        assert client.get(f"{API}{path}").status_code == 401, path
        assert client.get(f"{API}{path}", headers={"Authorization": "Bearer nope"}).status_code == 401, path
        assert client.get(f"{API}{path}", headers=AUTH).status_code == 200, path
    assert client.post(f"{API}/runs", headers=AUTH).status_code == 405


def test_what_the_ledger_holds_is_served_without_a_steering_character(client, ledger):
    _, runs = ledger
    r = client.get(f"{API}/runs/{short(runs['forged'])}", headers=AUTH)
    assert r.status_code == 200
    body = r.data.decode()
    assert "\u202e" not in body and "\u2028" not in body and "\\u202e" in body  # escaped, the text kept
    assert r.get_json()["run"]["command"][1].startswith("x\x1b[2J\n- 9999")  # JSON escapes C0 itself


def test_without_a_ledger_file_no_runs_and_none_is_made(tmp_path):
    path = tmp_path / "state" / "runs.sqlite3"
    source = LedgerRuns(path)
    client = app_client(source)
    code, doc = get(client, "/runs")
    assert code == 200 and doc["runs"] == [] and doc["truncated"] is False
    assert get(client, "/runs/abcd")[0] == 404 and get(client, "/compare?a=abcd")[0] == 404
    assert not path.parent.exists()


def test_no_runs_kept_is_404_and_a_ledger_that_cannot_be_read_is_503(ledger):
    path, runs = ledger
    off = app_client(None)
    for route in ("/runs", f"/runs/{short(runs['slow'])}", "/compare?a=abcd"):
        code, doc = get(off, route)
        assert code == 404 and "this sidecar keeps no runs: it was started with --no-runs" in doc["error"], route
    # /version says so first: the page's Runs view asks it, not a route that must 404
    assert off.get("/version", headers=AUTH).get_json()["runs"] is False
    os.chmod(path, 0o666)
    source = LedgerRuns(path)
    assert app_client(source).get("/version", headers=AUTH).get_json()["runs"] is True
    code, doc = get(app_client(source), "/runs")
    assert code == 503 and doc["error"].startswith("the runs cannot be read: ") and "writable by group" in doc["error"]
    os.chmod(path, 0o600)  # put right: the next question opens it
    assert get(app_client(source), "/runs")[0] == 200
    source.close()


def test_a_run_id_in_a_path_is_quoted_and_checked(client):
    code, doc = get(client, "/runs/" + quote("ab\u202ecd"))
    assert code == 400 and "letters, digits" in doc["error"]


def test_a_ledger_the_sidecar_has_open_is_read_and_left_open(ledger):
    """The recorder's ledger, handed in: one connection for writing and reading; closing the
    source leaves it to its owner."""
    from sidecar.sources.ledger import Ledger

    path, runs = ledger
    with Ledger(path) as shared:
        source = LedgerRuns(ledger=shared)
        assert get(app_client(source), f"/runs/{short(runs['slow'])}")[1]["previous"] == short(runs["base"])
        source.close()
        assert len(shared.runs()) == 4  # still open
