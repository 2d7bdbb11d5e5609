"""The poll loop: every interval, read each source once (each failing alone), decide the verdict,
append a history sample and publish the status document. HTTP requests only read what the last
poll published; they never touch /proc, /dev/shm or NVML.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Union

from sidecar.documents import document
from sidecar.documents.contract import ContractError
from sidecar.poll.collect import FactCollector, TargetInfo
from sidecar.poll.gpu_access import RocmAccess
from sidecar.poll.history import History, HistoryBudget, Sample
from sidecar.poll.placement import Placement
from sidecar.poll.samples import SampleMemo, history_sample, recorded_sample
from sidecar.poll.vendor_gpus import VendorGpuSampler, VendorReading
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.kubelet.lookup import ProcessPods
from sidecar.sources.lineage import RootInfo, root_info
from sidecar.sources.proctree import ProcessTreeSource, ProcInfo, TreeSnapshot, pid_visible
from sidecar.sources.segments import ProbeRead, SegmentSource
from sidecar.verdict import (
    Facts,
    GpuFacts,
    HysteresisState,
    ProcessFacts,
    Rules,
    Verdict,
    VerdictMemo,
    decide,
    runs_not_recorded,
    settle,
)
from sidecar.verdict.watch import WatchLog, watch_step

if TYPE_CHECKING:  # the nvml package imports the binding: imported where a source is made
    from sidecar.poll.recorder import Recording, RunRecorder
    from sidecar.sources.nvml.snapshot import GpuInfo, NvmlSnapshot
    from sidecar.sources.sysfs import SystemGpu

# How often the OS graphics devices are re-read: they change only on hot-plug.
SYSFS_EVERY_POLLS = 20


class Poller(document.OneJob):
    """Polls one job (the tree under `target_pid`) and keeps its latest documents."""

    def __init__(
        self,
        target_pid: int,
        *,
        interval_s: float = 1.5,
        history_s: float = 600.0,
        rules: Rules | None = None,
        tree_source: ProcessTreeSource | None = None,
        segment_source: SegmentSource | None = None,
        nvml_source: NvmlPolling | None = None,
        system_gpus_fn: Callable[[], list[SystemGpu]] | None = None,
        clock: Callable[[], float] = time.time,
        gpu_facts_fn: Callable[[], tuple[GpuFacts, ...]] | None = None,
        lazy_document: bool = False,
        history_budget: HistoryBudget | None = None,
        pods: ProcessPods | None = None,
        host: HostPaths = HOST,
        recorder: RunRecorder | None = None,
        vendor_gpus: VendorGpuSampler | None = None,
    ) -> None:
        """``host``: where the /proc and /sys that the sources made here read are (the host's own).
        ``recorder``: keeps the run in the runs ledger (poll/recorder.py); None records nothing.
        ``vendor_gpus``: reads the AMD and Intel GPUs' use (one under ``host`` unless given)."""
        self.target_pid = target_pid
        self.recorder = recorder
        # The NVML snapshot's devices as facts, when someone else made them for this poll
        # (discovery: once for all its jobs); None: this poller makes them.
        self.gpu_facts_fn = gpu_facts_fn
        # Make only the status summary at each poll, the whole document when it is first asked for
        # (snapshot()): a serving sidecar, whose document is made only when a route asks for it
        # (a page open, /metrics scraped), and discovery, whose server asks for one job's at a time.
        self.lazy_document = lazy_document
        self._latest_summary: dict[str, Any] | None = None
        self.interval_s = interval_s
        self.rules = rules or Rules()
        self.tree_source = tree_source or ProcessTreeSource(target_pid, host=host)
        self.segment_source = segment_source or SegmentSource(host=host)
        self.nvml_source, self.system_gpus_fn = machine_sources(nvml_source, system_gpus_fn, host)
        self.clock = clock
        self.history: History = History(history_s, interval_s, history_budget)
        self.poll_count = 0
        self.poll_errors: Counter[str] = Counter()
        self.poll_durations_s: list[float] = []  # read (never drained) by the metrics collector
        self.last_poll_time: float | None = None
        self.latest: dict[str, Any] | _Deferred | None = None  # the last status document, or its _Deferred
        self.latest_verdict: Verdict | None = None
        self.target_gone_at: float | None = None
        # Called once, by the poll that finds the target gone (the CLI's supervisor sleeps till then).
        self.on_end: Callable[[], None] | None = None
        self._hysteresis = HysteresisState()
        self._watch = WatchLog()  # what a watcher is told (verdict/watch.py), as of the last poll
        self._verdict_memo = VerdictMemo()  # the last poll's verdict, reused where the facts are the same
        self._sample_memo = SampleMemo()  # the same for the history sample's process rows and sums
        self._last_facts: Facts | None = None  # the last poll's, with what the verdict derived of them
        self._live: tuple[tuple[ProcessFacts, ...], set[int]] = ((), set())  # its processes and their pids
        self._system_gpus: list[SystemGpu] = []
        self._vendor = vendor_gpus or VendorGpuSampler(
            host=host
        )  # the AMD and Intel GPUs and the tree's use of them
        self._vendor_first_index = 0  # their first GPU number: after NVML's, never lower than before
        self._other_names: dict[int, tuple[str, ...]] = {}  # AMD/Intel GPU -> others' names, last poll
        self._rocm = RocmAccess(host)  # KFD, and the device nodes of a ROCm build that found no GPU
        self._collector = FactCollector(
            target_pid, self.rules, partial(pid_visible, host=host), partial(root_info, host=host)
        )
        # The job's distributed identity and pod; ``pods`` is shared by discovery's jobs.
        self._placement = Placement(pods if pods is not None else ProcessPods(host=host))
        self._entry_cache: dict[int, document.CachedEntry] = {}
        self._entry_lock = threading.Lock()
        self._summary_memo: document.SummaryMemo = {}
        self._lock = threading.Lock()  # guards what snapshot() reads
        self._poll_lock = threading.Lock()  # one poll at a time (poll_once)
        self._stop = threading.Event()
        # What the loop sleeps on between polls: held until stop() releases it. A timed acquire of a
        # plain lock costs ~20 us less a wake-up than Event.wait (its Condition's Python code).
        self._sleep = threading.Lock()
        self._sleep.acquire()
        self._thread: threading.Thread | None = None
        self.poll_lag_s: list[float] = []

    # -- one poll --------------------------------------------------------------------------------
    def poll_once(self) -> dict[str, Any]:
        """One poll; safe from any thread. Polls never overlap: the poller thread and a caller (the
        CLI polls once more when the job exits) take turns, because the sources keep state between
        polls that only one poll at a time may touch (the segment follower's open files, the
        process tree's kept /proc files, the hysteresis, the caches)."""
        with self._poll_lock:
            return self._poll_once_locked()

    def _poll_once_locked(self) -> dict[str, Any]:
        started = time.perf_counter()
        now = self.clock()
        tree = self.tree_source.poll()
        if tree.error:
            self.poll_errors["proctree"] += 1
        reads = self.segment_source.poll(tree)
        self.poll_errors["probe"] += sum(1 for r in reads.values() if r.unreadable)
        nvml = poll_nvml(self.nvml_source, self.poll_errors)
        if self.poll_count % SYSFS_EVERY_POLLS == 0:
            self._system_gpus = read_system_gpus(self.system_gpus_fn, self.poll_errors, self._system_gpus)
        if not tree.target_alive and self.target_gone_at is None:
            self.target_gone_at = now
            if self.on_end is not None:
                self.on_end()
        facts = self._facts(now, tree, reads, nvml)
        if self.recorder is not None and self.recorder.identity is None:
            self._begin_recording(now, facts)
        sample = history_sample(now, facts, self._collector.proc_info, self._sample_memo)
        self.history.append(sample)
        facts = self._last_facts = facts.with_recent(
            self.history.recent(max(self.rules.idle_window_s, self.rules.growth_window_s))
        )
        if facts.processes is not self._live[0]:  # the same tuple (a steady tree): the same pids
            self._live = (facts.processes, {p.pid for p in facts.processes})
        live = self._live[1]
        verdict = decide(facts, self._verdict_memo)
        verdict, self._hysteresis = settle(self._hysteresis, verdict, self.rules, live, facts)
        self.history.add_events(self._events(reads))
        made = _Made(
            time_s=now,
            interval_s=self.interval_s,
            target=self._collector.target,
            proc_info=self._collector.proc_info,
            other_processes=self._collector.other_processes,
            other_names=self._other_names,
            events=self.history.events(),
        )
        root = self._collector.target.root  # None until the root was read
        placement = self._placement.update(tree, reads, facts, root.uid if root is not None else None)
        if self.recorder is not None:
            verdict = self._record(now, facts, verdict, sample, nvml)
        summary = document.status_summary(
            facts, verdict, target=made["target"], memo=self._summary_memo, placement=placement
        )
        watch = watch_step(self._watch, verdict, facts.target_alive, now)
        doc: dict[str, Any] | _Deferred
        if self.lazy_document:
            doc = _Deferred(partial(self._document, facts, verdict, summary, made))
        else:
            doc = self._document(facts, verdict, summary, made)
        with self._lock:
            self.latest = doc
            self._latest_summary = summary
            self._watch = watch
            self.latest_verdict = verdict
            self.last_poll_time = now
            self.poll_count += 1
            self.poll_durations_s.append(time.perf_counter() - started)
            del self.poll_durations_s[:-1000]
        return summary if isinstance(doc, _Deferred) else doc

    def _facts(self, now: float, tree: TreeSnapshot, reads: dict[int, ProbeRead], nvml: NvmlView) -> Facts:
        gpus, vendor = self._gpu_inputs(tree, nvml)
        self._other_names = vendor.other_names if vendor is not None else {}
        departed = getattr(self.segment_source, "departed", None)
        self._collector.kfd_present = self._rocm.kfd_present()
        facts = self._collector.facts(now, tree, reads, nvml, self._system_gpus, gpus, departed, vendor)
        facts = self._rocm.with_access(facts)  # a ROCm build without a GPU: may it open the nodes?
        facts.keep_derived(self._last_facts)  # of the very same processes and GPUs: not made again
        return facts

    def _gpu_inputs(
        self, tree: TreeSnapshot, nvml: NvmlView
    ) -> tuple[tuple[GpuFacts, ...] | None, VendorReading | None]:
        """NVML's devices as facts when someone else made them (else None: the collector makes
        them), and the AMD and Intel GPUs with the tree's use of them (after NVML's)."""
        gpus = self.gpu_facts_fn() if self.gpu_facts_fn is not None else None
        return gpus, self._vendor_reading(tree, nvml)

    def _vendor_reading(self, tree: TreeSnapshot, nvml: NvmlView) -> VendorReading | None:
        """The AMD and Intel GPUs the OS lists, numbered after NVML's, and the tree's use of them
        (nothing read on a machine without any); a failure is counted under sysfs, never raised."""
        if not self._system_gpus:
            return None
        try:
            nvml_next = 1 + max((d.index for d in nvml.devices), default=-1) if nvml.ok else 0
            self._vendor_first_index = max(self._vendor_first_index, nvml_next)
            gpus = self._vendor.gpus(self._system_gpus, self._vendor_first_index)
            return self._vendor.poll(tree.pids() if tree.target_alive else (), gpus)
        except Exception:  # noqa: BLE001 -- counted; the poll goes on with NVML's GPUs alone
            self.poll_errors["sysfs"] += 1
            return None

    def _begin_recording(self, now: float, facts: Facts) -> None:
        """The run's first sight (its target seen alive): what the ledger kept of it before this
        sidecar goes into the history, one recorded sample a minute."""
        assert self.recorder is not None
        target = self._collector.target
        if target.start_ticks is None:
            return  # never seen alive: no run to record
        try:
            earlier = self.recorder.begin(now, target)
        except Exception:  # noqa: BLE001 -- recording never fails a poll; counted for /metrics
            self.poll_errors["runs"] += 1
            return
        window = now - self.history.history_s
        indices = facts.job_gpu_indices
        self.history.prefill(
            recorded_sample(m, indices, now) for m in earlier if m.start_unix_s + m.span_s / 2 >= window
        )

    def _record(self, now: float, facts: Facts, verdict: Verdict, sample: Sample, nvml: NvmlView) -> Verdict:
        """This poll recorded; the verdict with runs-not-recorded while the ledger fails."""
        recorder = self.recorder
        assert recorder is not None
        if recorder.identity is not None:
            try:
                recorder.observe(
                    now,
                    facts,
                    verdict,
                    self._collector.target,
                    self._placement,
                    sample,
                    self._collector.other_processes,
                    nvml.devices,
                )
            except Exception:  # noqa: BLE001 -- recording never fails a poll; counted for /metrics
                self.poll_errors["runs"] += 1
        fault = recorder.recording.fault
        return verdict if fault is None else runs_not_recorded(verdict, fault)

    @property
    def recording(self) -> Recording | None:
        """What the recorder records into (its ledger), None when this job is not recorded."""
        return None if self.recorder is None else self.recorder.recording

    def forget_run(self) -> None:
        """This job's run deleted from the ledger, nothing more of it written (poll/recorder.py's
        ``forget``): discovery found the job through a process that is part of another job."""
        if self.recorder is None:
            return
        with self._poll_lock:
            try:
                self.recorder.forget()
            except Exception:  # noqa: BLE001 -- recording never fails the sidecar; counted for /metrics
                self.poll_errors["runs"] += 1

    def record_exit_code(self, code: int | None) -> None:
        """The job's exit code into its run (``dsh-sidecar run`` knows its child's), between polls:
        the ledger is written from one thread at a time."""
        if self.recorder is None:
            return
        with self._poll_lock:
            try:
                self.recorder.set_exit_code(code, self.clock())
            except Exception:  # noqa: BLE001 -- recording never fails the sidecar; counted for /metrics
                self.poll_errors["runs"] += 1

    def _document(
        self, facts: Facts, verdict: Verdict, summary: dict[str, Any], made: _Made
    ) -> dict[str, Any]:
        # Lazy documents are made in the server's threads: one at a time, for the entry cache.
        with self._entry_lock:
            return document.status_document(
                facts, verdict, summary=summary, entry_cache=self._entry_cache, **made
            )

    @staticmethod
    def _events(reads: dict[int, ProbeRead]) -> list[dict[str, Any]]:
        return [
            {"time_unix_s": ev.time, "name": ev.name, "pid": pid}
            for pid, r in reads.items()
            if r.payload is not None
            for ev in r.payload.events
        ]

    # -- the loop --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dsh-sidecar-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            lag = time.monotonic() - next_at
            self.poll_lag_s.append(lag)
            del self.poll_lag_s[:-1000]
            try:
                self.poll_once()
            except Exception as exc:  # noqa: BLE001 -- keep polling: the next poll may succeed; count it for /metrics
                self.poll_errors["poll"] += 1
                if isinstance(exc, ContractError):  # only under DSH_CONTRACT_CHECK=1 (tests): say it
                    print(f"dsh-sidecar: {exc}", file=sys.stderr, flush=True)
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow source): skip missed slots rather than bursting
                next_at = time.monotonic()
                delay = 0
            self._sleep.acquire(timeout=delay)

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            try:
                self._sleep.release()  # ends the loop's sleep at once
            except RuntimeError:  # released already by a stop() at the same moment
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        # Never close a source under a poll still running in another thread; a poll stuck past the
        # join above (a hung driver call) keeps its sources, and the exit that follows frees them.
        if not self._poll_lock.acquire(timeout=5):
            return
        try:
            if self.recorder is not None:
                try:
                    self.recorder.close()  # the run's last polls written
                except Exception:  # noqa: BLE001 -- stopping must finish whatever the ledger raises
                    self.poll_errors["runs"] += 1
            for source in (self.nvml_source, self.segment_source, self.tree_source):
                try:
                    source.close()
                except Exception:  # noqa: BLE001 -- one source's close must not leave the others open
                    pass
        finally:
            self._poll_lock.release()

    def root_info(self) -> RootInfo | None:
        return self._collector.target.root

    @property
    def ended_unix_s(self) -> float | None:
        return self.target_gone_at

    def snapshot(self) -> tuple[dict[str, Any] | None, float | None]:
        with self._lock:
            doc, last = self.latest, self.last_poll_time
        return (doc.get() if isinstance(doc, _Deferred) else doc), last

    def published(self) -> tuple[dict[str, Any] | None, Callable[[], dict[str, Any]] | None]:
        """The last poll's status summary (document.status_summary: what a jobs-list entry is made
        of) and a callable that gives that poll's whole status document; (None, None) before the
        first poll."""
        with self._lock:
            doc, summary = self.latest, self._latest_summary
        if doc is None:
            return None, None
        return summary, (doc.get if isinstance(doc, _Deferred) else lambda: doc)

    def _summary(self) -> tuple[dict[str, Any] | None, float | None]:
        with self._lock:
            return self._latest_summary, self.last_poll_time

    def _watched(self) -> tuple[dict[str, Any] | None, float | None, WatchLog]:
        with self._lock:  # the summary and the log of one poll
            return self._latest_summary, self.last_poll_time, self._watch

    @property
    def run_key(self) -> str | None:
        identity = self.recorder.identity if self.recorder is not None else None
        return identity.key if identity is not None else None


def machine_sources(
    nvml_source: NvmlPolling | None,
    system_gpus_fn: Callable[[], list[SystemGpu]] | None,
    host: HostPaths = HOST,
) -> tuple[NvmlPolling, Callable[[], list[SystemGpu]]]:
    """The sources of what the machine has (NVML, the OS's graphics devices under ``host``'s
    sysfs), the real ones unless given (tests give their own)."""
    if nvml_source is None:
        from sidecar.sources.nvml import NvmlSource

        nvml_source = NvmlSource()
    if system_gpus_fn is None:
        from sidecar.sources.sysfs import list_system_gpus

        system_gpus_fn = partial(list_system_gpus, host=host)
    return nvml_source, system_gpus_fn


def poll_nvml(source: NvmlPolling, errors: Counter[str]) -> NvmlView:
    """One NVML snapshot; a failure is counted in `errors` and read as "NVML down", never raised."""
    try:
        snap = source.poll()
    except Exception as exc:  # noqa: BLE001 -- the source promises not to raise; the poll must not depend on it
        errors["nvml"] += 1
        return _NvmlDown(f"NVML source failed: {exc}")
    if not snap.ok or snap.call_errors:
        errors["nvml"] += 1
    return snap


def read_system_gpus(
    fn: Callable[[], list[SystemGpu]], errors: Counter[str], previous: list[SystemGpu]
) -> list[SystemGpu]:
    """The OS's graphics devices; the previous list when they cannot be read (counted)."""
    try:
        return list(fn())
    except Exception:  # noqa: BLE001 -- counted; the previous list stands whatever the reader raised
        errors["sysfs"] += 1
        return previous


class _Deferred:
    """A status document made when it is first asked for, once, from what its poll captured
    (discovery: the document of a job nobody looks at is never made)."""

    __slots__ = ("_build", "_doc", "_lock")

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self._build: Callable[[], dict[str, Any]] | None = build
        self._doc: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def get(self) -> dict[str, Any]:
        if self._doc is None:
            with self._lock:
                if self._doc is None:
                    assert self._build is not None
                    self._doc, self._build = self._build(), None
        return self._doc


class _NvmlDown:
    """An NVML snapshot's stand-in when the source failed: not ok, nothing listed (the nvml package,
    which imports the binding, is not imported for it)."""

    ok = False
    devices: tuple[GpuInfo, ...] = ()
    driver: str | None = None
    cuda_driver: str | None = None
    call_errors: dict[str, str] = {}  # never written: a down source made no call

    def __init__(self, error: str) -> None:
        self.error: str | None = error


NvmlView = Union["NvmlSnapshot", _NvmlDown]  # what a poll's NVML reading is


class NvmlPolling(Protocol):
    """An NVML source (sources.nvml's NvmlSource; the tests' own)."""

    def poll(self) -> NvmlView: ...
    def close(self) -> None: ...


class _Made(TypedDict):
    """What a poll hands document.status_document besides the facts, verdict and summary."""

    time_s: float
    interval_s: float
    target: TargetInfo
    proc_info: dict[int, ProcInfo]
    other_processes: dict[int, int]
    other_names: dict[int, tuple[str, ...]]
    events: list[dict[str, Any]]
