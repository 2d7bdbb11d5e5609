"""GET /api/dsh-gpu-dashboard/watch of the Flask app: a job's watch log (sidecar/verdict/watch.py) read
through its cursor, with its run against the previous one from a real runs source over a ledger in a
temporary folder (sidecar/poll/runs_source.py) where the answer carries news."""

from __future__ import annotations

import pytest

from sidecar.common.catalogue import ref
from sidecar.documents import contract, contract_watch
from sidecar.documents.document import OneJob
from sidecar.poll.runs_source import LedgerRuns
from sidecar.serve.server import API, ServerConfig, create_app
from sidecar.verdict import Finding, Verdict
from sidecar.verdict import watch as verdict_watch
from sidecar.verdict.watch import WatchLog, watch_step
from tests.helpers.runs_ledger import fill, short

T0 = 1_733_140_000.0


def verdict(status: str, *errors: str) -> Verdict:
    found = tuple(Finding(c, "error", ref("warning.model-on-cpu", model="Net")) for c in errors)
    return Verdict(status, ref("message.gpu"), found, None, None, None)


class WatchedJob(OneJob):
    """One job's summary and watch log, as a poller keeps them (Poller._watched)."""

    interval_s = 0.5

    def __init__(self, job_id: str, run_key: str | None) -> None:
        self.job_id, self._run_key = job_id, run_key
        self.log, self.alive, self.status, self.t = WatchLog(), True, "GPU", T0

    def poll(self, v: Verdict, alive: bool = True) -> None:
        self.t += 0.5
        self.log, self.alive, self.status = watch_step(self.log, v, alive, self.t), alive, v.status

    def _watched(self):
        summary = {
            "job_id": self.job_id,
            "target": {"alive": self.alive},
            "status": self.status,
            "message": "the model runs on the GPU",
            "message_ref": {"id": "message.gpu", "params": {}},
            "warnings": [],
        }
        return summary, self.t, self.log

    @property
    def run_key(self):
        return self._run_key

    def snapshot(self):
        return None, self.t


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("watch-ledger") / "runs.sqlite3"
    recorded = fill(path)
    source = LedgerRuns(path)
    yield source, recorded
    source.close()


def watch(source, runs_source=None, query: str = ""):
    client = create_app(ServerConfig(), source, runs=runs_source).test_client()
    r = client.get(f"{API}/watch{query}")
    body = r.get_json()
    if r.status_code == 200:
        contract.check(body, "watch")
    return r.status_code, body


def test_the_contract_says_the_verdict_s_words():
    assert contract_watch.EVENT_KINDS == verdict_watch.EVENT_KINDS
    assert contract_watch.MAX_WATCH_EVENTS == verdict_watch.MAX_EVENTS


def test_a_watch_starts_with_no_event_and_its_cursor_gives_what_came_after(runs):
    source_runs, recorded = runs
    job = WatchedJob("2-200", recorded["slow"].identity.key)
    job.poll(verdict("GPU"))
    code, first = watch(job, source_runs)
    assert code == 200 and first["events"] == [] and first["comparison"] is None
    assert first["job_id"] == "2-200" and first["alive"] is True and first["status"] == "GPU"
    assert first["run"] == recorded["slow"].identity.key and first["interval_s"] == 0.5
    job.poll(verdict("GPU"))
    code, same = watch(job, source_runs, f"?since={first['cursor']}")
    assert (
        code == 200
        and same["events"] == []
        and same["cursor"] == first["cursor"]
        and same["comparison"] is None
    )
    job.poll(verdict("CPU", "model-on-cpu"))
    code, news = watch(job, source_runs, f"?job=2-200&since={first['cursor']}")
    assert code == 200
    assert [(e["kind"], e["status"], e["previous_status"], e["codes"]) for e in news["events"]] == [
        ("worse", "CPU", "GPU", []),
        ("error", "CPU", None, ["model-on-cpu"]),
    ]
    assert news["events"][0]["text"] == "The verdict got worse: GPU → CPU."
    # news: the run against the previous run of the same command in the same folder (base)
    c = news["comparison"]
    assert c["outcome"] == "regression" and c["run"] == short(recorded["slow"])
    assert c["baseline"] == short(recorded["base"]) and c["message"].startswith("Throughput: REGRESSION")
    code, after = watch(job, source_runs, f"?since={news['cursor']}")
    assert after["events"] == [] and after["comparison"] is None
    job.poll(verdict("CPU", "model-on-cpu"), alive=False)
    code, end = watch(job, source_runs, f"?since={news['cursor']}")
    assert [(e["kind"], e["codes"]) for e in end["events"]] == [("ended", ["model-on-cpu"])]
    assert end["alive"] is False and end["comparison"]["outcome"] == "regression"
    # a job that has ended tells its comparison to a watch that starts after the end, too
    code, late = watch(job, source_runs)
    assert late["events"] == [] and late["alive"] is False and late["comparison"]["outcome"] == "regression"


@pytest.mark.parametrize(
    ("run", "with_runs", "said"),
    [
        ("base", True, "no earlier run of the same command in the same folder is recorded"),
        (None, True, "this job's run is not in the runs ledger"),
        ("unknown", True, "this job's run is not in the runs ledger"),
        ("slow", False, "this sidecar keeps no runs"),
    ],
)
def test_news_without_a_comparison_says_why_there_is_none(runs, run, with_runs, said):
    source_runs, recorded = runs
    key = recorded[run].identity.key if run in recorded else ("boot/9-9" if run else None)
    job = WatchedJob("9-9", key)
    job.poll(verdict("GPU"))
    job.poll(verdict("GPU"), alive=False)
    code, doc = watch(job, source_runs if with_runs else None)
    c = doc["comparison"]
    assert code == 200 and c["outcome"] == "not-enough-evidence" and said in c["message"], c
    assert c["baseline"] is None and c["run"] == (short(recorded["base"]) if run == "base" else None)


def test_a_bad_cursor_is_a_400_and_an_unknown_job_a_404(runs):
    job = WatchedJob("2-200", None)
    job.poll(verdict("GPU"))
    for bad in ("abc", "1-2-3", "%0a", "1" * 20 + "-1"):
        code, doc = watch(job, None, f"?since={bad}")
        assert code == 400 and doc["error"].startswith("since must be a cursor"), bad
    code, doc = watch(job, None, "?job=7-7")
    assert code == 404 and "no job '7-7' here" in doc["error"]


def test_before_the_first_poll_the_watch_is_a_503():
    job = WatchedJob("2-200", None)
    job._watched = lambda: (None, None, WatchLog())
    assert watch(job)[0] == 503
