"""The memory-growth rule: a job whose GPU memory keeps growing over the growth window (a leak, a
cache that never stops filling), judged on the history's samples (facts in, finding out)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import islice
from operator import attrgetter
from typing import NamedTuple

from sidecar.common.catalogue import ref
from sidecar.verdict.facts import (
    Facts,
    Finding,
    RecentSample,
    Rules,
    all_models,
    hint_device_type,
    samples_in_order,
)

_time = attrgetter("time")


class MemoryGrowth(NamedTuple):
    first_mib: float
    last_mib: float
    start_unix_s: float
    end_unix_s: float


def memory_growth(samples: Iterable[RecentSample], rules: Rules) -> MemoryGrowth | None:
    """The job's GPU memory at the start and end of the growth window when it grows steadily over
    it, else None. The one decision of "memory growing": the warning and the document's
    `memory_growth` both come from here.

    The window is the samples with a memory figure from `growth_window_s` before the last such
    sample to it; it grows when it holds 3 figures or more over `growth_min_span_s` at least, its
    last figure exceeds its first by `growth_min_mib` and `growth_min_fraction` of the first, and
    `growth_monotonic_fraction` of its steps do not decrease. All must hold: with times in order,
    the window's ends are found by bisection and only a window that grew is walked step by step."""
    if not isinstance(samples, tuple):
        samples = tuple(samples)  # an iterable is passed once; a list may change in place later
    if not samples or not samples_in_order(samples) or samples[-1].tree_gpu_mem_mib is None:
        return _memory_growth_scan(samples, rules)
    end = len(samples) - 1
    end_time = samples[end].time
    cutoff = end_time - rules.growth_window_s
    if cutoff != cutoff:  # NaN
        return _memory_growth_scan(samples, rules)
    # Times in order: from `start` on, each is in the window. Not past `end` (a negative window).
    start = bisect_left(samples, cutoff, 0, end, key=_time)
    while samples[start].tree_gpu_mem_mib is None:
        start += 1  # stops at `end` at the latest
    if end - start < 2 or end_time - samples[start].time < rules.growth_min_span_s:
        return None
    first, last = samples[start].tree_gpu_mem_mib, samples[end].tree_gpu_mem_mib
    if first is None or last is None or not _grown_enough(first, last, rules):  # (never None: see above)
        return None
    return _steady(
        [
            (s.time, s.tree_gpu_mem_mib)
            for s in islice(samples, start, None)
            if s.tree_gpu_mem_mib is not None
        ],
        rules,
    )


def _grown_enough(first: float, last: float, rules: Rules) -> bool:
    grown = last - first
    return not (grown < rules.growth_min_mib or grown < rules.growth_min_fraction * max(first, 1.0))


def _steady(pts: list[tuple[float, float]], rules: Rules) -> MemoryGrowth | None:
    """The growth of the window `pts` ((time, MiB) of its samples with a figure), once its ends
    grew enough: when it has 3 figures and most of its steps do not decrease."""
    if len(pts) < 3:
        return None
    steps = [b[1] - a[1] for a, b in zip(pts, pts[1:])]
    non_decreasing = sum(1 for d in steps if d >= 0) / len(steps)
    if non_decreasing < rules.growth_monotonic_fraction:
        return None
    return MemoryGrowth(pts[0][1], pts[-1][1], pts[0][0], pts[-1][0])


def _memory_growth_scan(samples: Iterable[RecentSample], rules: Rules) -> MemoryGrowth | None:
    """memory_growth of samples in any order, or whose last one has no memory figure."""
    pts = [(s.time, s.tree_gpu_mem_mib) for s in samples if s.tree_gpu_mem_mib is not None]
    if len(pts) < 3:
        return None
    now = pts[-1][0]
    pts = [pt for pt in pts if pt[0] >= now - rules.growth_window_s]
    if len(pts) < 3 or pts[-1][0] - pts[0][0] < rules.growth_min_span_s:
        return None
    if not _grown_enough(pts[0][1], pts[-1][1], rules):
        return None
    return _steady(pts, rules)


def rule_memory_growth(f: Facts) -> Iterable[Finding]:
    """The job's GPU memory as its rows sum it: NVML's, an AMD GPU's DRM and KFD memory, an Intel
    GPU's DRM memory (an iGPU's: the system memory its clients hold). Where no figure exists (an
    unread process, no rows) the samples' is None and nothing grows."""
    grown = memory_growth(f.recent, f.rules)
    if grown:
        first, last = grown.first_mib, grown.last_mib
        span = min(f.rules.growth_window_s, f.recent[-1].time - f.recent[0].time)
        yield Finding(
            "memory-growth",
            "warning",
            ref("warning.memory-growth", first=f"{first:.0f}", last=f"{last:.0f}", seconds=f"{span:.0f}"),
            # torch.xpu has no memory_summary(): memory_stats() gives its allocator's figures.
            ref(
                "hint.memory-growth.xpu"
                if hint_device_type(m for _, m in all_models(f)) == "xpu"
                else "hint.memory-growth"
            ),
            tuple(p.pid for p in f.processes if p.uses_gpu),
        )
