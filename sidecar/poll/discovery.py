"""Discovery: every job of the user (root: of every user), without a pid.

A job is found through its probe segments (/dev/shm's names, followed from inotify's events:
sources/segment_dir.py; never a scan of /proc) and through NVML's per-process lists (GPU work without
a probe), then grouped under its root (poll/finder.py): the topmost ancestor that is probed, uses a
GPU, or is a known launcher (sources/lineage.py). Each job is watched by its own `Poller` (the --pid
machinery, unchanged: its process tree, its segments, its verdict, its history); NVML and sysfs are
read once per poll for all of them. A finished job stays listed, marked exited, for `history_s`
seconds. What one user's segments may cost a poll is bounded per user (names kept, owner checks,
the reading time of large payloads; a user past a budget has its jobs polled in turn: JobTurns), so
that another user's jobs are found and polled on time whatever that user does. Every source reads the
/proc and /sys of ``host`` (--path.procfs, --path.sysfs).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from sidecar.documents import contract, document
from sidecar.poll.collect import gpu_facts, job_id
from sidecar.poll.finder import MAX_CANDIDATES, REDISCOVER_EVERY_POLLS, JobFinder
from sidecar.poll.history import HistoryBudget
from sidecar.poll.poller import (
    SYSFS_EVERY_POLLS,
    NvmlPolling,
    NvmlView,
    Poller,
    _NvmlDown,
    machine_sources,
    poll_nvml,
    read_system_gpus,
)
from sidecar.poll.vendor_figures import DeviceFigures
from sidecar.poll.vendor_gpus import VendorGpuSampler
from sidecar.sources.drm import DrmUserScan
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.kubelet.lookup import ProcessPods
from sidecar.sources.proctree import ProcessTreeSource, open_file_budget
from sidecar.sources.segment_dir import SHM_DIR
from sidecar.sources.segments import FOREIGN_CHECK_EVERY_POLLS, ReadBudget, SegmentSource
from sidecar.verdict import GpuFacts, Rules

if TYPE_CHECKING:
    from sidecar.poll.recorder import Recording
    from sidecar.sources.sysfs import SystemGpu

MAX_JOBS = 256  # watched at once; the newest are kept


class _Every(Enum):
    CALLER = "every caller"


EVERY_CALLER = _Every.CALLER  # the documents as published: no caller to choose a default job for
Caller = int | None | _Every  # whose view: a uid, None (a caller not told apart), or EVERY_CALLER
# The samples of every job's history together (history.HistoryBudget): whatever --history, the
# number of jobs and their GPUs, discovery's histories never hold more (docs/reliability.md).
HISTORY_MAX_BYTES = 32 << 20
# A user who ran past a budget (the reading time of large payloads, probe_wire/follower.py
# ReadBudget; the owner checks of a flood of names, sources/segment_dir.py) in this poll or the FLAGGED_POLLS
# before is "flagged": FLAGGED_JOB_POLLS of their jobs polled a poll (one every other poll), in turn.
FLAGGED_POLLS = 20
FLAGGED_JOB_POLLS = 0.5


class _SharedNvml:
    """What a job's Poller sees as its NVML source: the snapshot this poll took for every job."""

    def __init__(self) -> None:
        self.snapshot: NvmlView = _NvmlDown("NVML not polled yet")

    def poll(self) -> NvmlView:
        return self.snapshot

    def close(self) -> None:
        pass


@dataclass
class _Job:
    root: tuple[int, int]  # the root's identity (pid, start ticks)
    poller: Poller
    found_unix_s: float
    owner: int | None = None  # the root's real uid when found (its poller's says it after)
    polled: int = -1  # the poll that polled it last


class JobTurns:
    """Which running jobs a poll polls: every one, but of a flagged user (``flag``: ran past a
    budget) FLAGGED_JOB_POLLS a poll, the longest unpolled first (a job is always polled once when
    found, to be listed). What one user does never takes a turn from another user's jobs."""

    def __init__(self) -> None:
        self._flagged: dict[int, int] = {}  # uid -> the poll its flag ends at
        self._credit: dict[int, float] = {}  # uid (flagged) -> job polls it has in hand

    def flag(self, uids: set[int], poll: int) -> None:
        """``uids`` ran past a budget at poll ``poll``: flagged for FLAGGED_POLLS polls after it."""
        for uid in uids:
            self._flagged[uid] = poll + 1 + FLAGGED_POLLS
        for uid in [u for u, until in self._flagged.items() if until <= poll + 1]:
            del self._flagged[uid]
            self._credit.pop(uid, None)

    def to_poll(self, jobs: list[tuple[str, _Job]]) -> list[tuple[str, _Job]]:
        running = [(jid, job) for jid, job in jobs if job.poller.target_gone_at is None]
        if not self._flagged:
            return running  # most polls: every job
        for uid in self._flagged:
            self._credit[uid] = min(1.0, self._credit.get(uid, 0.0) + FLAGGED_JOB_POLLS)
        out: list[tuple[str, _Job]] = []
        for jid, job in sorted(running, key=lambda kv: kv[1].polled):  # the longest unpolled first
            owner = _owner(job)
            if owner is not None and owner in self._flagged and job.polled >= 0:
                if self._credit[owner] < 1:
                    continue
                self._credit[owner] -= 1
            out.append((jid, job))
        return out


@dataclass(frozen=True)
class _Published:
    """What one poll published for the server, all of a piece: the jobs document and, for each job
    it lists, that job's poller and status document. A request reads one of these, and every
    document it answers with comes from it, so a job the poll thread drops meanwhile is still found
    by a request that saw it listed."""

    jobs: dict[str, Any]  # the jobs document
    # job id as listed -> (its poller, what gives its status document of that poll: made when first
    # asked for)
    docs: dict[str, tuple[Poller, Callable[[], dict[str, Any]]]]
    gpus: tuple[
        GpuFacts, ...
    ]  # the machine's GPUs as facts, this poll (document.gpu_entries makes them entries)
    nvml_pids_by_gpu: dict[int, int]  # processes NVML lists on each GPU

    def jobs_for(self, caller_uid: Caller) -> dict[str, Any]:
        """The jobs document as `caller_uid` sees it (its default job)."""
        if caller_uid is EVERY_CALLER:
            return self.jobs
        return {**self.jobs, "default_job": _callers_default(self.jobs, caller_uid)}

    def find(
        self, job: str | None, caller_uid: Caller
    ) -> tuple[str, Poller, Callable[[], dict[str, Any]]] | None:
        """(job id, its poller, its status document) of `job`, else of the caller's default job."""
        if job is not None:
            jid: str | None = job
        elif caller_uid is EVERY_CALLER:
            jid = self.jobs["default_job"]
        else:
            jid = _callers_default(self.jobs, caller_uid)
            if jid is None and self.jobs["jobs"]:
                raise document.NoDefaultJob(caller_uid)
        found = self.docs.get(jid) if jid is not None else None
        if jid is None or found is None:
            if job is not None:
                raise document.UnknownJob(job)
            return None
        return (jid, *found)

    def status(self, job: str | None, caller_uid: Caller) -> dict[str, Any] | None:
        found = self.find(job, caller_uid)
        if found is None:
            return None
        listed = self.jobs_for(caller_uid)  # this poll's list: a job is always in its own
        return contract.check_if_enabled({**found[2](), "jobs": listed["jobs"]}, "status")

    def history(self, job: str | None, since: float | None, caller_uid: Caller) -> dict[str, Any] | None:
        found = self.find(job, caller_uid)
        if found is None:
            return None
        jid, poller, _ = found
        return document.history_document(poller.history, since, poller.interval_s, jid)

    def watch(
        self, job: str | None, since: tuple[int, int] | None, caller_uid: Caller
    ) -> dict[str, Any] | None:
        found = self.find(job, caller_uid)
        if found is None:
            return None
        jid, poller, _ = found
        return poller.watch_document(jid, since)

    def documents(self) -> list[dict[str, Any]]:
        listed = self.jobs["jobs"]
        return [{**doc(), "jobs": listed} for _, doc in self.docs.values()]

    def gpus_document(self) -> dict[str, Any]:
        return {"gpus": document.gpu_entries(self.gpus, self.nvml_pids_by_gpu)}


class JobsPoller:
    """Watches every job it can find. The documents are built by each job's Poller; this class
    finds jobs, polls them, and answers for them (the same document methods as document.OneJob)."""

    mode = "discovery"
    target_pid = None  # for the CLI's messages: no single target
    target_gone_at = None  # discovery never ends with a job

    def __init__(
        self,
        *,
        interval_s: float = 1.5,
        history_s: float = 600.0,
        rules: Rules | None = None,
        nvml_source: NvmlPolling | None = None,
        system_gpus_fn: Callable[[], list[SystemGpu]] | None = None,
        uid: int | None = -1,
        shm_dir: str = SHM_DIR,
        clock: Callable[[], float] = time.time,
        pods: ProcessPods | None = None,
        host: HostPaths = HOST,
        recording: Recording | None = None,
    ) -> None:
        """``host``: where the /proc and /sys that every source reads are (the host's own).
        ``recording``: every job's run kept in the runs ledger (poll/recorder.py), each poll's
        batches written once (``batched``); None records nothing."""
        self.recording = recording
        self.interval_s = interval_s
        self.history_s = history_s
        self.rules = rules or Rules()
        self.uid = (os.getuid() or None) if uid == -1 else uid  # None: every user's jobs (root)
        self.shm_dir = shm_dir
        self.host = host
        self.clock = clock
        self.nvml_source, self.system_gpus_fn = machine_sources(nvml_source, system_gpus_fn, host)
        self._shared = _SharedNvml()
        self._history_budget = HistoryBudget(HISTORY_MAX_BYTES)
        # One PodLookup for every job: one kubelet call per interval.
        self._pods = pods if pods is not None else ProcessPods(host=host)
        self._system_gpus_cache: list[SystemGpu] = []
        self._gpu_facts: tuple[GpuFacts, ...] = ()
        # The AMD and Intel GPUs after NVML's (each job's poller reads its processes' use of them)
        self._vendor_devices = DeviceFigures(host=host)  # each card read once a poll, for every job
        self._vendor_users = DrmUserScan(host=host)  # who else uses each card: one scan for every job
        self._vendor = VendorGpuSampler(host=host, devices=self._vendor_devices, users=self._vendor_users)
        self._vendor_first_index = 0
        self._all_gpus: tuple[GpuFacts, ...] = ()  # NVML's and those: the machine's GPUs this poll
        self._jobs: dict[str, _Job] = {}
        self._finder = JobFinder(self.uid, shm_dir, lambda: self.poll_count, host=host)
        self._reads = ReadBudget()  # large payloads' reading time per user, shared by every job's segments
        self._turns = JobTurns()
        self.poll_count = 0
        self.poll_errors: Counter[str] = Counter()
        self.poll_durations_s: list[float] = []
        self.last_poll_time: float | None = None
        self._published: _Published | None = None
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- finding and dropping jobs ------------------------------------------------------------------
    def _discover(self, now: float, nvml: NvmlView) -> None:
        roots = self._finder.find(nvml)
        self._add_jobs({r for r in roots.values() if job_id(*r) not in self._jobs}, now)
        for jid, job in list(self._jobs.items()):
            # A job found through a process that now has a job above it (a DataLoader worker seen
            # before its trainer's probe started) was never a job of its own: it is absorbed.
            if roots.get(job.root, job.root) != job.root:
                self._drop(jid, absorbed=True)

    def _add_jobs(self, new_roots: set[tuple[int, int]], now: float) -> None:
        """A job for each new root that fits in MAX_JOBS shared out among users with the jobs
        watched (document.fair_share, newest first): a flood of one user's roots never costs a
        poller each only to be trimmed, nor takes another user's place. Each job's owner is read
        here, from its root's process: what shares them out even when its own poll fails."""
        if not new_roots:
            return
        owned = [(r, self._finder.processes.real_uid(r[0])) for r in new_roots]
        if len(self._jobs) + len(owned) > MAX_JOBS:
            watched = [(job.root, _owner(job)) for job in self._jobs.values()]
            newest_first = sorted(watched + owned, key=lambda ro: -ro[0][1])
            kept = {ro[0] for ro in document.fair_share(newest_first, MAX_JOBS, lambda ro: ro[1])}
            owned = [ro for ro in owned if ro[0] in kept]
        for root, uid in owned:
            self._jobs[job_id(*root)] = _Job(root, self._new_poller(root[0]), now, uid)

    def _new_poller(self, root_pid: int) -> Poller:
        # Each job keeps open its share of half the descriptors (MAX_JOBS of them at once): a job of
        # a thousand threads, watched under many roots, must not spend them all (EMFILE made every
        # other job's poll read nothing).
        per_job = open_file_budget(share=0.5, cap=1 << 20) // (2 * MAX_JOBS)  # two sources a job
        return Poller(
            root_pid,
            tree_source=ProcessTreeSource(root_pid, max_open_files=per_job, host=self.host),
            interval_s=self.interval_s,
            history_s=self.history_s,
            rules=self.rules,
            nvml_source=self._shared,
            # swept once for all jobs, below; /dev/shm's names (where the followers read: SHM_DIR)
            # and the reading budget shared by all
            segment_source=SegmentSource(
                sweep_foreign=False,
                max_open=per_job,
                budget=self._reads,
                names=self._finder.names if self.shm_dir == SHM_DIR else None,
                host=self.host,
            ),
            system_gpus_fn=self._system_gpus,
            clock=self.clock,
            gpu_facts_fn=self._shared_gpu_facts,
            lazy_document=True,  # a job's whole document is made when someone asks for it
            history_budget=self._history_budget,
            pods=self._pods,
            host=self.host,
            recorder=None if self.recording is None else self.recording.recorder(self.rules, self.interval_s),
            vendor_gpus=VendorGpuSampler(
                host=self.host, devices=self._vendor_devices, users=self._vendor_users
            ),
        )

    def _shared_gpu_facts(self) -> tuple[GpuFacts, ...]:
        return self._gpu_facts

    def _system_gpus(self) -> list[SystemGpu]:
        return self._system_gpus_cache

    # -- one poll --------------------------------------------------------------------------------
    def poll_once(self) -> dict[str, Any]:
        with self._poll_lock:
            return self._poll_once_locked()

    def _poll_once_locked(self) -> dict[str, Any]:
        started = time.perf_counter()
        now = self.clock()
        self._reads.new_poll()
        self._shared.snapshot = snap = poll_nvml(self.nvml_source, self.poll_errors)
        # The devices as facts once for every job (each job's collector splits the rows by its tree).
        self._gpu_facts = tuple(gpu_facts(d) for d in snap.devices) if snap.ok else ()
        if self.poll_count % SYSFS_EVERY_POLLS == 0:
            self._system_gpus_cache = read_system_gpus(
                self.system_gpus_fn, self.poll_errors, self._system_gpus_cache
            )
        self._vendor_first_index = max(
            self._vendor_first_index, 1 + max((g.index for g in self._gpu_facts), default=-1)
        )
        self._all_gpus = self._gpu_facts + self._vendor.gpus(
            self._system_gpus_cache, self._vendor_first_index
        )
        self._discover(now, self._shared.snapshot)
        if self.poll_count % FOREIGN_CHECK_EVERY_POLLS == 0:
            self._sweep_dead_writers()
        self._poll_jobs(now)
        if self.recording is not None:
            self.recording.flush(now)  # every job's batch due this poll, in one write
        self._trim()
        published = self._publish(now)
        jobs = published.jobs
        with self._lock:
            self._published = published
            self.last_poll_time = now
            self.poll_count += 1
            self.poll_durations_s.append(time.perf_counter() - started)
            del self.poll_durations_s[:-1000]
        return jobs

    def _sweep_dead_writers(self) -> None:
        """Dead writers' leftovers, of every job (our own PID namespace only); not the segments the
        jobs read ok at the last poll (live writers: each job's source cleans up after its own
        processes), which would cost a read of each and of its process's start time. The other name
        under such a pid is still swept: a dead writer's that had the pid before."""
        live: dict[int, int | None] = {}
        for job in self._jobs.values():
            live.update(job.poller.segment_source.live_writers())
        # the first poll's final publishes of exited children: their jobs' first polls read them next
        live.update({pid: ticks for pid, ticks in self._finder.finals})  # the name of that writer is spared
        try:
            # A part of the names, each pid's whole, from where the last sweep stopped: a directory
            # flooded with names costs a sweep SWEEP_NAMES judgements (sources/segment_dir.py).
            self._finder.segments.sweep_dead(live)
        except Exception:  # noqa: BLE001 -- counted: a sweep must never fail the poll
            self.poll_errors["probe"] += 1

    def _poll_jobs(self, now: float) -> None:
        """The running jobs whose turn it is (JobTurns) polled, each by its own Poller; an exited one
        dropped after history_s."""
        for _, job in self._turns.to_poll(list(self._jobs.items())):
            job.polled = self.poll_count
            try:
                job.poller.poll_once()  # the poll that finds the root gone is its last
            except Exception as exc:
                self.poll_errors["poll"] += 1
                if isinstance(exc, contract.ContractError):
                    raise
            if job.poller.target_gone_at is not None:
                # An exited job is sampled no more: its last documents and history stand, and its
                # sources' files and /proc descriptors are given back now.
                job.poller.stop()
        for jid, job in list(self._jobs.items()):
            ended = job.poller.target_gone_at
            if ended is not None and now - ended > self.history_s:
                self._drop(jid)
        self._turns.flag(
            self._reads.deferred | self._reads.owing() | self._finder.owners.flooding(), self.poll_count
        )

    def _drop(self, jid: str, *, absorbed: bool = False) -> None:
        """Stops watching a job; an ``absorbed`` one (part of another job all along) leaves no run."""
        job = self._jobs.pop(jid)
        if absorbed:
            job.poller.forget_run()
        job.poller.stop()
        self._history_budget.leave(job.poller.history)

    def _trim(self) -> None:
        """At most MAX_JOBS, shared out among users (document.fair_share: one user's many jobs never
        push another's out); within a user's, running jobs before exited ones, the newest first."""
        if len(self._jobs) <= MAX_JOBS:
            return
        best_first = sorted(
            self._jobs.items(), key=lambda kv: (kv[1].poller.target_gone_at is not None, -kv[1].found_unix_s)
        )
        keep = {jid for jid, _ in document.fair_share(best_first, MAX_JOBS, lambda kv: _owner(kv[1]))}
        for jid, _ in best_first:
            if jid not in keep:
                self._drop(jid)

    def _publish(self, now: float) -> _Published:
        """The jobs document, and the status document of every job polled at least once (each made
        when it is first asked for; the jobs list needs only each job's status summary)."""
        docs: dict[str, tuple[Poller, Callable[[], dict[str, Any]]]] = {}
        entries: list[dict[str, Any]] = []
        for job in self._jobs.values():
            summary, doc = job.poller.published()
            if summary is not None and doc is not None:
                docs[summary["job_id"]] = (job.poller, doc)
                entries.append(document.job_entry(summary, job.poller.root_info(), job.poller.ended_unix_s))
        jobs = document.jobs_document(
            entries, time_s=now, interval_s=self.interval_s, mode=self.mode, default_job=_default_job(entries)
        )
        snap = self._shared.snapshot
        counts = {d.index: len(d.processes) for d in snap.devices} if snap.ok else {}
        return _Published(jobs, docs, gpus=self._all_gpus, nvml_pids_by_gpu=counts)

    # -- what the server reads (from its own threads: only what the last poll published) -------
    def _latest(self) -> _Published | None:
        with self._lock:
            return self._published

    def jobs_document(self, caller_uid: Caller = EVERY_CALLER) -> dict[str, Any] | None:
        published = self._latest()
        return None if published is None else published.jobs_for(caller_uid)

    def status_document(
        self, job: str | None = None, caller_uid: Caller = EVERY_CALLER
    ) -> dict[str, Any] | None:
        """A job's document with the jobs list in it; without `job`, the default job's (given a
        caller_uid: that caller's, see for_caller). With no job found yet, None (the server answers
        503 until the first poll, then 404 for ?job=)."""
        published = self._latest()
        return None if published is None else published.status(job, caller_uid)

    def history_document(
        self, job: str | None = None, since: float | None = None, caller_uid: Caller = EVERY_CALLER
    ) -> dict[str, Any] | None:
        published = self._latest()
        return None if published is None else published.history(job, since, caller_uid)

    def watch_document(
        self, job: str | None = None, since: tuple[int, int] | None = None, caller_uid: Caller = EVERY_CALLER
    ) -> dict[str, Any] | None:
        published = self._latest()
        return None if published is None else published.watch(job, since, caller_uid)

    def for_caller(self, caller_uid: Callable[[], int | None]) -> JobsPoller | _CallerView:
        """This poller as one caller sees it. Root's discovery lists every user's jobs, and the job
        it answers without ?job= (its default) is the caller's own newest, never another user's:
        none (NoDefaultJob) when the caller has no job or cannot be told (`caller_uid()` None). A
        user's own discovery lists only that user's jobs: unchanged."""
        if self.uid is not None:
            return self
        return _CallerView(self, caller_uid())

    def documents(self) -> list[dict[str, Any]]:
        """Every job's status document (for --once --json and /metrics), each with the jobs list in
        it, as status_document gives it."""
        published = self._latest()
        return [] if published is None else published.documents()

    def gpus_document(self) -> dict[str, Any] | None:
        """{"gpus": [...]} of the last poll, as a status document lists them, for /metrics when no
        job is listed (every process on a GPU then counts as another's)."""
        published = self._latest()
        return None if published is None else published.gpus_document()

    def snapshot(self) -> tuple[dict[str, Any] | None, float | None]:
        """The default job's document and the last poll's time (/healthz)."""
        with self._lock:
            last = self.last_poll_time
        try:
            return self.status_document(None), last
        except document.UnknownJob:
            return None, last

    # -- the loop --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dsh-sidecar-jobs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 -- counted for /metrics; the thread polls again whatever one poll raised
                self.poll_errors["poll"] += 1
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._poll_lock:
            for job in self._jobs.values():
                job.poller.stop()
            if self.recording is not None:
                self.recording.flush(self.clock())  # what each job's stop wrote of its run
            self._finder.close()
            try:
                self.nvml_source.close()
            except Exception:  # noqa: BLE001 -- closing must finish whatever a dead driver raises
                pass


def _owner(job: _Job) -> int | None:
    uid = getattr(job.poller.root_info(), "uid", None)
    return job.owner if uid is None else uid


class _CallerView:
    """JobsPoller's documents with its default job chosen for one caller (for_caller)."""

    def __init__(self, poller: JobsPoller, caller_uid: int | None) -> None:
        self.poller, self.caller_uid = poller, caller_uid

    def jobs_document(self) -> dict[str, Any] | None:
        return self.poller.jobs_document(self.caller_uid)

    def status_document(self, job: str | None = None) -> dict[str, Any] | None:
        return self.poller.status_document(job, self.caller_uid)

    def history_document(self, job: str | None = None, since: float | None = None) -> dict[str, Any] | None:
        return self.poller.history_document(job, since, self.caller_uid)

    def watch_document(
        self, job: str | None = None, since: tuple[int, int] | None = None
    ) -> dict[str, Any] | None:
        return self.poller.watch_document(job, since, self.caller_uid)


def _callers_default(jobs: dict[str, Any], caller_uid: int | None) -> str | None:
    """The default job among the listed jobs whose root belongs to `caller_uid` (None: nobody's)."""
    if caller_uid is None:
        return None
    return _default_job([j for j in jobs["jobs"] if j["uid"] == caller_uid])


def _default_job(entries: list[dict[str, Any]]) -> str | None:
    """The job /status answers without ?job=: the newest running job with a registered model, else
    the newest running one, else the newest."""
    newest = sorted(entries, key=lambda j: -(j["start_time_unix_s"] or 0.0))
    for pick in (lambda j: j["alive"] and j["has_model"], lambda j: j["alive"], lambda j: True):
        for j in newest:
            if pick(j):
                job_id: str = j["id"]  # the contract's Job.id
                return job_id
    return None


__all__ = ["MAX_CANDIDATES", "MAX_JOBS", "REDISCOVER_EVERY_POLLS", "JobsPoller"]
