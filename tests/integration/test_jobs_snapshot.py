"""Discovery's server side reads one snapshot: the jobs document and every listed job's poller and
status document are published together at the end of a poll, under the lock. A job dropped by the
poll thread between a request's look at the jobs list and its look-up of the job must not turn a
listed job into a 404, nor the default job into a 503 (issue 14 follow-up).

Real per-job pollers of real `sleep` processes; discovery itself is replaced by a schedule in
which two of the three jobs take turns, so the default job (the newest running one) changes at
every poll."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from sidecar.documents import document
from sidecar.poll.discovery import JobsPoller, _Job
from sidecar.poll.poller import Poller, _NvmlDown
from sidecar.sources.proctree import ProcessTreeSource
from tests.helpers.harness import wait_for


class _NoNvml:
    def poll(self):
        return _NvmlDown("no NVML in this test")

    def close(self) -> None:
        pass


class TakingTurns(JobsPoller):
    """Job 0 always; jobs 1 and 2 by turns (each poll drops one and adds the other)."""

    def __init__(self, pids: list[int], **kw):
        super().__init__(nvml_source=_NoNvml(), system_gpus_fn=list, uid=None, **kw)
        self.pids = pids

    def _discover(self, now, nvml) -> None:
        want = {self.pids[0], self.pids[1 + self.poll_count % 2]}
        for jid, job in list(self._jobs.items()):
            if job.root[0] not in want:
                job.poller.stop()
                del self._jobs[jid]
        have = {job.root[0] for job in self._jobs.values()}
        for pid in want - have:
            ticks = ProcessTreeSource(pid).target_start_ticks
            self._jobs[f"{pid}-{ticks}"] = _Job((pid, ticks), self._new_poller(pid), now)


def test_requests_never_see_a_listed_job_missing_while_jobs_come_and_go(tmp_path):
    procs = []
    for _ in range(3):  # started in turn: job 0 is the oldest, never the default while 1 or 2 runs
        procs.append(subprocess.Popen(["sleep", "60"]))
        time.sleep(0.02)
    poller = TakingTurns([p.pid for p in procs], interval_s=0.001, shm_dir=str(tmp_path))
    failures: list[str] = []
    stop = threading.Event()
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: a window of a few bytecodes is found

    def reader() -> None:
        while not stop.is_set():
            try:
                doc = poller.status_document(None)
                if doc is None:
                    failures.append("the default job answered None (503) after the first poll")
                elif doc["job_id"] not in {j["id"] for j in doc["jobs"]}:
                    failures.append(f"job {doc['job_id']}'s document lists other jobs")
                jobs = doc["jobs"] if doc else []
                for j in jobs:
                    if j["root_pid"] == procs[0].pid:
                        poller.status_document(j["id"])  # listed in every poll: never unknown
                        poller.history_document(j["id"], None)
                if poller.history_document(None, None) is None:
                    failures.append("the default job's history answered None (503)")
            except document.UnknownJob as e:
                failures.append(f"UnknownJob {e}")
            except Exception as e:  # noqa: BLE001 -- reported by the assertion below
                failures.append(repr(e))

    try:
        poller.poll_once()
        assert poller.status_document(None) is not None
        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline and len(failures) < 5:
            poller.poll_once()
        stop.set()
        for t in threads:
            t.join(timeout=30)
    finally:
        sys.setswitchinterval(old_switch)
        stop.set()
        poller.stop()
        for p in procs:
            p.kill()
            p.wait()
    assert not failures, failures[:5]
    assert poller.poll_count > 20


def test_a_lazy_document_is_the_document_an_eager_poller_makes_and_its_summary_the_same_job_entry():
    """Discovery's pollers make each job's status summary at every poll and the whole document only
    when asked: the same document, and the same jobs-list entry, as the --pid poller's."""
    target = subprocess.Popen(["sleep", "60"])
    # Both pollers read its command line once: wait until it is sleep's, not the forked Python's
    # (empty) between fork and exec.
    wait_for(lambda: Path(f"/proc/{target.pid}/cmdline").read_bytes().startswith(b"sleep"), what="the exec")
    pollers = [
        Poller(target.pid, nvml_source=_NoNvml(), system_gpus_fn=list, clock=lambda: 0.0, lazy_document=lazy)
        for lazy in (False, True)
    ]
    try:
        for n in range(3):
            for p in pollers:
                p.clock = lambda n=n: 1000.0 + 1.5 * n
                p.poll_once()
            (eager, _), (lazy, _) = (p.snapshot() for p in pollers)
            for doc in (eager, lazy):  # what the OS says per poll may differ between the two reads
                for q in doc["processes"]:
                    q["cpu_pct"] = q["rss_mib"] = None
            assert lazy == eager
            summary, whole = pollers[1].published()
            assert whole is not None and whole() is lazy  # made once
            assert document.job_entry(summary, None, None) == document.job_entry(document.summary_of_document(eager))
    finally:
        for p in pollers:
            p.stop()
        target.kill()
        target.wait()
