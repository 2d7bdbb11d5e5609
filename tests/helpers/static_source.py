"""A server source of fixed documents: what the poller would publish, held still, with a short
history (document.OneJob's API, as the poller has it).
"""

from __future__ import annotations

from sidecar.documents.document import OneJob
from sidecar.poll.history import History, Sample
from sidecar.verdict import RecentSample


class StaticSource(OneJob):
    """What the poller publishes, fixed: the app reads documents made from `snapshot()` and
    `history` (document.OneJob, as the poller does)."""

    interval_s = 1.0

    def __init__(self, doc=None, last=None):
        self.doc, self.last = ({"job_id": "42-7", **doc} if doc is not None else None), last
        self.history = History(history_s=60, interval_s=1)
        for t in (100.0, 101.0, 102.0):
            self.history.append(
                Sample(
                    t,
                    ((0, 50.0, 1000.0, *[None] * 6),),
                    ((42, 900.0, 40.0),),
                    RecentSample(t, 40.0, 900.0, 1, 50.0),
                )
            )
        self.history.add_events([{"time_unix_s": 101.5, "name": "start", "pid": 42}])

    def snapshot(self):
        return self.doc, self.last
