"""A bounded ring buffer of poll samples, and the job's task events.

Samples are stored as tuples, not dicts: a day at 1.5 s is 57,600 samples, and a dict per GPU and
per process per sample would cost several times the memory for the same numbers.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import deque
from collections.abc import Iterable
from itertools import chain
from typing import Any, cast

from sidecar.documents.bounds import clip_opt
from sidecar.verdict import RecentSample, RecentWindow, times_in_order

MAX_EVENTS = 1000


_NAN = float("nan")


# The columns of a sample's rows, named as in the contract's SampleGpu / SampleProcess / Sample; the
# first column of a row is its index or pid. samples.history_sample fills them in this order.
GPU_COLUMNS = (
    "index",
    "util_pct",
    "mem_used_mib",
    "sm_activity_fraction",
    "sm_occupancy_fraction",
    "tensor_activity_fraction",
    "sm_clock_mhz",
    "power_w",
    "temperature_c",
)
PROCESS_COLUMNS = ("pid", "gpu_mem_mib", "sm_util_pct")
JOB_COLUMNS = ("cpu_pct", "rss_mib", "forward_rate_hz", "step_rate_hz")


Row = Iterable[float | None]  # a row of values, None for "no value"


def pack(rows: Iterable[Row]) -> array[float]:
    """Rows as doubles, NaN for "no value": a fraction of the memory of tuples of float objects."""
    flat = list(chain.from_iterable(rows))
    try:
        # Most rows (a poll's processes, its job's sums) have every value, and finite: packed in
        # one call, and a sum says they all were finite (an infinite or NaN value makes it so, and
        # so do finite values too large to add, which the loop below then packs one by one).
        packed = array("d", cast("list[float]", flat))  # a None in it raises TypeError: see below
        if math.isfinite(sum(packed)):
            return packed
    except (TypeError, OverflowError):  # a None; an int too large for a double: the loop below says which
        pass
    # An infinite value is no value either: two models' finite forward rates can sum to inf, which
    # JSON cannot carry (/history answered a bare Infinity, and the page's charts stopped).
    return array("d", [_NAN if v is None or not math.isfinite(v) else v for v in flat])


def _unpack(flat: array[float], width: int) -> tuple[tuple[Any, ...], ...]:
    """The rows: their first value (an index, a pid: always there) an int, NaN None."""
    vals = [None if v != v else v for v in flat]  # NaN != NaN
    return tuple((int(flat[i]), *vals[i + 1 : i + width]) for i in range(0, len(vals), width))


def _num(v: float | None) -> float | int | None:
    return int(v) if v is not None and v.is_integer() else v


class Sample:
    """One poll: per GPU (GPU_COLUMNS), per GPU process of the job (PROCESS_COLUMNS), the job's sums
    (JOB_COLUMNS), and what the verdict's windowed rules need. Stored packed: a day of samples must
    stay small (docs/performance.md has the figures). `gpus` and `processes` may come packed already
    (pack()): discovery's jobs share one poll's GPU rows, a steady job's polls their process rows
    (never changed once packed). ``recorded``: not a poll of this sidecar but a minute of the run
    that the runs ledger kept from before it started (History.prefill; recorded_sample)."""

    __slots__ = ("time", "_gpus", "_processes", "_job", "recent", "recorded")

    def __init__(
        self,
        time: float,
        gpus: array[float] | Iterable[Row],
        processes: array[float] | Iterable[Row],
        recent: RecentSample,
        job: Row = (None,) * len(JOB_COLUMNS),
        recorded: bool = False,
    ) -> None:
        self.time = time
        self.recorded = recorded
        self._gpus = gpus if isinstance(gpus, array) else pack(gpus)
        self._processes = processes if isinstance(processes, array) else pack(processes)
        self._job = pack((job,))
        self.recent = recent

    @property
    def gpus(self) -> tuple[tuple[Any, ...], ...]:
        return _unpack(self._gpus, len(GPU_COLUMNS))

    @property
    def processes(self) -> tuple[tuple[Any, ...], ...]:
        return _unpack(self._processes, len(PROCESS_COLUMNS))

    @property
    def job(self) -> tuple[float | None, ...]:
        return tuple(None if v != v else v for v in self._job)

    def as_dict(self) -> dict[str, Any]:
        gpus = [
            {"index": row[0], **{k: _num(v) for k, v in zip(GPU_COLUMNS[1:], row[1:])}} for row in self.gpus
        ]
        return {
            "time_unix_s": self.time,
            "gpus": gpus,
            "processes": [
                {"pid": p, "gpu_mem_mib": _num(m), "sm_util_pct": _num(s)} for p, m, s in self.processes
            ],
            **{k: _num(v) for k, v in zip(JOB_COLUMNS, self.job)},
            "recorded": self.recorded,
        }


# What a Sample costs besides its arrays' items: the Sample, its three arrays' headers and its
# RecentSample. An estimate that errs high: a sample of 8 GPUs and one process counts 1,232 bytes,
# where tracemalloc sees about 1,060.
SAMPLE_OVERHEAD_BYTES = 600


def sample_bytes(sample: Sample) -> int:
    """What `sample` counts against a HistoryBudget."""
    arrays = (sample._gpus, sample._processes, sample._job)
    return SAMPLE_OVERHEAD_BYTES + sum(a.itemsize * len(a) for a in arrays)


class HistoryBudget:
    """Bytes of samples shared by many histories (discovery's jobs): when they hold more than
    `max_bytes` together, the oldest samples of the largest go first, so no number of jobs, nor of
    their processes, grows the sidecar past it."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.total_bytes = 0
        self._histories: list[History] = []
        self._lock = threading.Lock()

    def join(self, history: History) -> None:
        with self._lock:
            self._histories.append(history)

    def leave(self, history: History) -> None:
        with self._lock:
            if history in self._histories:
                self._histories.remove(history)
                self.total_bytes -= history.bytes
                history.bytes = 0

    def added(self, history: History, n_bytes: int) -> None:
        """Called by `history` (outside its lock) after it stored `n_bytes` more."""
        with self._lock:
            self.total_bytes += n_bytes
            while self.total_bytes > self.max_bytes:
                largest = max(self._histories, key=lambda h: h.bytes, default=None)
                if largest is None or not largest.bytes:
                    break
                self.total_bytes -= largest.drop_oldest()


class History:
    def __init__(self, history_s: float, interval_s: float, budget: HistoryBudget | None = None):
        self.history_s = history_s
        self.bytes = 0  # sample_bytes of the samples held
        self.budget = budget
        self.capacity = max(2, math.ceil(history_s / interval_s) + 1)
        self._samples: deque[Sample] = deque(maxlen=self.capacity)
        # Minutes the runs ledger kept of the run from before this sidecar (prefill): shown before
        # the polls, never in recent()'s windows (the rules judge this sidecar's polls alone).
        self._recorded: deque[Sample] = deque()
        self._events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self._event_keys: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()
        # recent()'s last answer, kept up to date by append() rather than found again by a scan of
        # the ring at each poll: its window_s (None: none kept), and its samples' times and
        # RecentSamples (apart: the answer is then a copy of a deque, no loop).
        self._window_s: float | None = None
        self._window_times: deque[float] = deque()
        self._window: deque[RecentSample] = deque()
        if budget is not None:
            budget.join(self)

    def append(self, sample: Sample) -> None:
        with self._lock:
            before = self.bytes
            if self._samples and not sample.time >= self._samples[-1].time:
                # The clock went back: which samples recent() answers is a scan's to say again.
                self._window_s = None
            if len(self._samples) == self._samples.maxlen:
                self.bytes -= sample_bytes(self._samples[0])
            self._samples.append(sample)
            self.bytes += sample_bytes(sample)
            # The deque bounds the count; time bounds it too when polls ran late.
            while self._samples and self._samples[0].time < sample.time - self.history_s:
                self.bytes -= sample_bytes(self._samples.popleft())
            while self._recorded and self._recorded[0].time < sample.time - self.history_s:
                self.bytes -= sample_bytes(self._recorded.popleft())
            if self._window_s is not None:
                self._window_times.append(sample.time)
                self._window.append(sample.recent)
                while len(self._window) > len(self._samples):  # the ring dropped them: both end alike
                    self._window_times.popleft()
                    self._window.popleft()
            grown = self.bytes - before
        if self.budget is not None:
            self.budget.added(self, grown)

    def prefill(self, samples: Iterable[Sample]) -> None:
        """Recorded minutes (Sample.recorded) from before the first poll, oldest first: shown by
        samples() before the polls while within history_s of the newest."""
        with self._lock:
            before = self.bytes
            for s in samples:
                if not self._recorded or s.time > self._recorded[-1].time:
                    self._recorded.append(s)
                    self.bytes += sample_bytes(s)
            grown = self.bytes - before
        if self.budget is not None:
            self.budget.added(self, grown)

    def drop_oldest(self) -> int:
        """Drops the oldest sample (the budget's call); the bytes freed."""
        with self._lock:
            if self._recorded:
                freed = sample_bytes(self._recorded.popleft())
                self.bytes -= freed
                return freed
            if not self._samples:
                return 0
            freed = sample_bytes(self._samples.popleft())
            self.bytes -= freed
            while len(self._window) > len(self._samples):
                self._window_times.popleft()
                self._window.popleft()
            return freed

    def add_events(self, events: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            for ev in events:
                # Kept up to MAX_EVENTS, so each name is clipped here: a process chooses them.
                ev = {**ev, "name": clip_opt(ev.get("name"))}
                key = (ev.get("pid"), ev.get("time_unix_s"), ev.get("name"))
                if key in self._event_keys:
                    continue
                if len(self._events) == self._events.maxlen:
                    old = self._events[0]
                    self._event_keys.discard((old.get("pid"), old.get("time_unix_s"), old.get("name")))
                self._events.append(ev)
                self._event_keys.add(key)

    def samples(self, since: float | None = None) -> list[Sample]:
        with self._lock:
            if self._recorded:
                first = self._samples[0].time if self._samples else None
                out = [
                    s
                    for s in self._recorded
                    if (since is None or s.time > since) and (first is None or s.time < first)
                ]
            else:
                out = []
            if since is None:
                return out + list(self._samples) if out else list(self._samples)
            return out + [s for s in self._samples if s.time > since]

    def recent(self, window_s: float) -> tuple[RecentSample, ...]:
        """The samples of the last `window_s` seconds, and the one before them: rules need the
        window's start."""
        with self._lock:
            if not self._samples:
                return ()
            cutoff = self._samples[-1].time - window_s
            times = self._window_times
            if window_s == self._window_s:
                # Its times are in order and only grew since (append() saw to both), so the samples
                # that fell out of the window are at its start.
                while len(times) > 1 and times[1] < cutoff:
                    times.popleft()
                    self._window.popleft()
            else:
                window = self._scan(cutoff)
                times = deque(s.time for s in window)
                self._window_s = window_s if times_in_order(times) else None
                self._window_times, self._window = times, deque(s.recent for s in window)
            # In order when kept (the scan found it so, and append() keeps it so): the rules then
            # need not look (RecentWindow).
            return RecentWindow(self._window) if self._window_s == window_s else tuple(self._window)

    def _scan(self, cutoff: float) -> list[Sample]:
        out = []
        for s in reversed(self._samples):
            out.append(s)
            if s.time < cutoff:
                break  # keep one sample older than the window
        out.reverse()
        return out

    def events(self, since: float | None = None) -> list[dict[str, Any]]:
        with self._lock:
            evs = sorted(self._events, key=lambda e: e.get("time_unix_s") or 0.0)
        return evs if since is None else [e for e in evs if (e.get("time_unix_s") or 0.0) > since]

    def __len__(self) -> int:
        return len(self._samples)
