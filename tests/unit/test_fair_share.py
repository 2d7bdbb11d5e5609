"""On a shared machine root's discovery lists every user's jobs within bounds (MAX_JOBS_SHOWN in
/jobs, MAX_JOBS watched): one user starting hundreds of jobs must not push another user's jobs out
of either (found by an attacker review: 65 processes with segments hid a victim's job)."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.documents import bounds
from sidecar.documents.document import fair_share
from sidecar.poll.discovery import MAX_JOBS, JobsPoller, _Job


def test_each_owner_gets_turns_and_the_order_is_kept():
    items = [("flood", i) for i in range(100)] + [("victim", 0), ("victim", 1), ("other", 0)]
    shown = fair_share(items, 10, lambda it: it[0])
    assert len(shown) == 10
    assert {("victim", 0), ("victim", 1), ("other", 0)} <= set(shown)
    assert [it for it in shown if it[0] == "flood"] == [("flood", i) for i in range(7)]  # its best
    assert shown == [it for it in items if it in shown]  # the given order
    assert fair_share(items[:5], 10, lambda it: it[0]) == items[:5]


@dataclass
class _Info:
    uid: int


class _StubPoller:
    """What _trim reads of a job's Poller: when its root exited, whose it is, stop() and history."""

    def __init__(self, uid: int, gone_at: float | None = None):
        self.target_gone_at, self._uid, self.stopped = gone_at, uid, False
        self.history = None  # what the budget forgets of a dropped job (none here)

    def root_info(self):
        return _Info(self._uid)

    def stop(self):
        self.stopped = True


def test_a_flood_of_another_users_jobs_never_drops_a_watched_job():
    poller = JobsPoller(nvml_source=object(), system_gpus_fn=list, uid=None)
    victim = _Job((10, 1), _StubPoller(1000), found_unix_s=1.0)  # the oldest job of all
    poller._jobs["victim"] = victim
    for n in range(MAX_JOBS + 50):
        poller._jobs[f"flood-{n}"] = _Job((100 + n, 1), _StubPoller(65534), found_unix_s=10.0 + n)
    poller._trim()
    assert len(poller._jobs) == MAX_JOBS
    assert poller._jobs.get("victim") is victim and not victim.poller.stopped
    # the flood's oldest went, its newest stayed
    assert "flood-0" not in poller._jobs and f"flood-{MAX_JOBS + 49}" in poller._jobs
    assert bounds.MAX_JOBS_SHOWN < MAX_JOBS  # /jobs shares its own bound the same way (jobs_document)


def test_the_jobs_list_shows_a_victims_job_among_a_flood(monkeypatch):
    from sidecar.documents import contract
    from sidecar.documents.document import jobs_document

    monkeypatch.setenv(contract.CHECK_ENV, "0")  # entries reduced to the keys the ordering reads
    flood = [
        {"id": f"f{n}", "uid": 65534, "start_time_unix_s": 100.0 + n}
        for n in range(bounds.MAX_JOBS_SHOWN + 1)
    ]
    victim = {"id": "v", "uid": 1000, "start_time_unix_s": 1.0}  # the oldest of all
    doc = jobs_document([victim, *flood], time_s=0.0, interval_s=1.5, mode="discovery", default_job=None)
    ids = [j["id"] for j in doc["jobs"]]
    assert "v" in ids and len(ids) == bounds.MAX_JOBS_SHOWN and doc["jobs_omitted"] == 2
    assert ids[0] == f"f{bounds.MAX_JOBS_SHOWN}" and ids[-1] == "v"  # still newest first
