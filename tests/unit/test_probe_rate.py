"""Rates a person can read: counts per second over a 10 s window, not per publish tick (issue 11.7)."""

from __future__ import annotations

import random
import time

import pytest

from probe._rate import RATE_WINDOW_S, RateWindow

torch = pytest.importorskip("torch")

from probe.hooks import ModelRecord  # noqa: E402


def readings(step_s: float, tick_s: float = 1.0, run_s: float = 60.0, jitter_s: float = 0.05) -> list[float]:
    """A loop that does one call every ``step_s``, read by a ModelRecord at publish ticks that come
    every ``tick_s`` give or take ``jitter_s`` (a busy machine), as the publisher does."""
    rng = random.Random(7)
    rec = ModelRecord(torch.nn.Linear(1, 1), "rate", torch, lambda *a: None, lambda: None)
    t0 = time.monotonic()
    out, t = [], 0.0
    while t < run_s:
        t += tick_s + rng.uniform(-jitter_s, jitter_s)
        rec.forward_calls = int(t / step_s)
        rec.update_rate(t0 + t)
        if t > RATE_WINDOW_S + tick_s:  # once a whole window has been seen
            out.append(rec.rate_hz)
    return out


@pytest.mark.parametrize("step_s", [0.5, 0.6, 2.5, 0.004])
def test_the_forward_rate_is_steady_for_a_steady_loop(step_s):
    rates = readings(step_s)
    truth = 1 / step_s
    # Within one call per window of the truth (plus 2 % for the window's edges), every tick.
    tolerance = 1.0 / RATE_WINDOW_S + 0.02 * truth
    assert max(abs(r - truth) for r in rates) <= tolerance, (truth, min(rates), max(rates))


def test_a_stopped_loop_reads_zero_within_a_window_and_the_first_ticks_say_something():
    w = RateWindow(0.0)
    assert w.update(0.1, 5) == 0.0  # 0.1 s says nothing yet
    assert w.update(1.0, 10) == pytest.approx(10.0)
    for t in range(2, 12):
        w.update(float(t), 10 * t)
    assert w.rate_hz == pytest.approx(10.0)
    for t in range(12, 12 + int(RATE_WINDOW_S) + 2):
        w.update(float(t), 110)  # stopped at 11 s
    assert w.rate_hz == 0.0


def test_the_ring_stays_small_whatever_the_tick():
    w = RateWindow(0.0)
    for i in range(1, 10_000):
        w.update(i * 0.01, i)
    assert len(w.samples) <= 18 and w.rate_hz == pytest.approx(100.0, rel=0.01)
