"""Counts per second over a window, for the forward rate and the step rate alike.

``RateWindow`` turns a counter into calls (or steps) per second over the last ``RATE_WINDOW_S``
seconds, from a small ring of (time, count) samples taken at publish ticks: a 0.5 s step reads
2.0/s instead of jumping between 0, 1 and 2 from one 1 s tick to the next. Standard library only.
"""

from __future__ import annotations

import collections

__all__ = ["RATE_MIN_SPAN_S", "RATE_SAMPLES_PER_WINDOW", "RATE_WINDOW_S", "RateWindow"]

RATE_WINDOW_S = 10.0
# A span shorter than this says nothing (publishes forced by events come microseconds apart).
RATE_MIN_SPAN_S = 0.2
# Samples kept per window: the window's start is known to within 1/16 of it.
RATE_SAMPLES_PER_WINDOW = 16


class RateWindow:
    """Count per second over the last ``window_s`` seconds, fed at publish ticks (monotonic time)."""

    __slots__ = ("rate_hz", "samples", "window_s")

    def __init__(self, now_mono: float, count: int = 0, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: collections.deque[tuple[float, int]] = collections.deque(
            [(now_mono, count)], maxlen=RATE_SAMPLES_PER_WINDOW + 2
        )
        self.rate_hz = 0.0

    def update(self, now_mono: float, count: int) -> float:
        s = self.samples
        start = now_mono - self.window_s
        # Keep the newest sample at or before the window's start: the window is then always full.
        while len(s) > 1 and s[1][0] <= start:
            s.popleft()
        t0, c0 = s[0]
        span = now_mono - t0
        if span >= RATE_MIN_SPAN_S:
            self.rate_hz = max(0.0, (count - c0) / span)
        if now_mono - s[-1][0] >= self.window_s / RATE_SAMPLES_PER_WINDOW:
            s.append((now_mono, count))
        return self.rate_hz

    def reset(self, now_mono: float, count: int = 0) -> None:
        self.samples.clear()
        self.samples.append((now_mono, count))
        self.rate_hz = 0.0
