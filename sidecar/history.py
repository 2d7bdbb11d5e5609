"""A bounded ring buffer of poll samples, and the job's task events.

Samples are stored as tuples, not dicts: a day at 1.5 s is 57,600 samples, and a dict per GPU and
per process per sample would cost several times the memory for the same numbers.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sidecar.verdict import RecentSample

MAX_EVENTS = 1000


@dataclass(frozen=True, slots=True)
class Sample:
    time: float
    gpus: tuple[tuple[int, float | None, float | None], ...]  # (index, util %, mem used MiB)
    processes: tuple[tuple[int, float | None, float | None], ...]  # (pid, GPU mem MiB, SM %)
    recent: RecentSample  # what the verdict's windowed rules need

    def as_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "gpus": [{"index": i, "util": u, "mem_used_mb": m} for i, u, m in self.gpus],
            "processes": [{"pid": p, "gpu_mem_mb": m, "sm_util": s} for p, m, s in self.processes],
        }


class History:
    def __init__(self, history_s: float, interval_s: float):
        self.history_s = history_s
        self.capacity = max(2, math.ceil(history_s / interval_s) + 1)
        self._samples: deque[Sample] = deque(maxlen=self.capacity)
        self._events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self._event_keys: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()

    def append(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)
            # The deque bounds the count; time bounds it too when polls ran late.
            while self._samples and self._samples[0].time < sample.time - self.history_s:
                self._samples.popleft()

    def add_events(self, events: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            for ev in events:
                key = (ev.get("pid"), ev.get("time"), ev.get("name"))
                if key in self._event_keys:
                    continue
                if len(self._events) == self._events.maxlen:
                    old = self._events[0]
                    self._event_keys.discard((old.get("pid"), old.get("time"), old.get("name")))
                self._events.append(ev)
                self._event_keys.add(key)

    def samples(self, since: float | None = None) -> list[Sample]:
        with self._lock:
            if since is None:
                return list(self._samples)
            return [s for s in self._samples if s.time > since]

    def recent(self, window_s: float) -> tuple[RecentSample, ...]:
        with self._lock:
            if not self._samples:
                return ()
            cutoff = self._samples[-1].time - window_s
            out = []
            for s in reversed(self._samples):
                out.append(s.recent)
                if s.time < cutoff:
                    break  # keep one sample older than the window: rules need the window's start
            return tuple(reversed(out))

    def events(self, since: float | None = None) -> list[dict[str, Any]]:
        with self._lock:
            evs = sorted(self._events, key=lambda e: e.get("time") or 0.0)
        return evs if since is None else [e for e in evs if (e.get("time") or 0.0) > since]

    def __len__(self) -> int:
        return len(self._samples)
