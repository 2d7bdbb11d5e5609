"""The cluster route's reader (GET /api/dsh-gpu-dashboard/cluster): the cluster document of a
sidecar started with --prometheus, cached so that many page tabs and plugins cost Prometheus one
set of queries per CACHE_S, with at most one set in flight.

The server depends on this interface, never on Prometheus: `sidecar.cli` hands in the function that
asks it (sidecar/poll/cluster.py read_cluster, its errors turned into ClusterError)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

Document = dict[str, Any]
# Prometheus scrapes every 15 s by default: a fresher answer than this would show nothing new.
CACHE_S = 5.0
MAX_CACHED_JOBS = 16  # ?job= values remembered at once (each a document of up to a few MiB)
MAX_JOB_CHARS = 256  # a job key is a label value: Prometheus's client clips those to 256 too


class ClusterError(Exception):
    """Prometheus did not answer: the message says why (the route answers 502 with it)."""


class ClusterBusy(Exception):
    """A query set is in flight and no earlier answer for this job is kept (the route answers 503)."""


class ClusterCache:
    """`read(job)` behind a cache of CACHE_S per job and a lock: one read in flight at a time. A
    request that finds a read in flight gets the last answer for its job however old (else
    ClusterBusy) rather than holding one of the server's few threads for Prometheus's timeout."""

    def __init__(
        self,
        read: Callable[[str | None], Document],
        *,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._read = read
        self._cache_s = cache_s
        self._clock = clock
        self._reading = threading.Lock()
        self._answers: OrderedDict[str | None, tuple[float, Document | None, str | None]] = OrderedDict()
        self.reads = 0  # sets of queries asked of Prometheus (tests count them)

    def get(self, job: str | None) -> Document:
        """The cluster document for `job` (None: every job). ClusterError: Prometheus failed;
        ClusterBusy: another read is in flight and none for `job` is kept."""
        answer = self._answers.get(job)
        if answer is not None and self._clock() - answer[0] < self._cache_s:
            return _unpack(answer)
        if not self._reading.acquire(blocking=False):
            if answer is None:
                raise ClusterBusy("a cluster query is in flight; retry in a moment")
            return _unpack(answer)
        try:
            answer = self._answers.get(job)  # another thread may have read it meanwhile
            if answer is None or self._clock() - answer[0] >= self._cache_s:
                answer = self._fetch(job)
        finally:
            self._reading.release()
        return _unpack(answer)

    def _fetch(self, job: str | None) -> tuple[float, Document | None, str | None]:
        self.reads += 1
        answer: tuple[float, Document | None, str | None]
        try:
            answer = (self._clock(), self._read(job), None)
        except ClusterError as exc:
            answer = (self._clock(), None, str(exc) or "Prometheus did not answer")
        self._answers[job] = answer
        self._answers.move_to_end(job)
        while len(self._answers) > MAX_CACHED_JOBS:
            self._answers.popitem(last=False)
        return answer


def _unpack(answer: tuple[float, Document | None, str | None]) -> Document:
    _, doc, error = answer
    if error is not None:
        raise ClusterError(error)
    assert doc is not None
    return doc
