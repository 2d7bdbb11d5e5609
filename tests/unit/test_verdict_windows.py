"""The verdict's windowed rules held to their specification: `_idle_window` and `memory_growth` over
random sample sequences (tests/helpers/verdict_random.py: times in order, out of order, a clock
stepped back, equal, gaps in the memory figures, spans shorter and longer than the rules' windows)
and odd ones (NaN and infinite times and windows).

- Finite times and windows: each result is what its docstring states (check_idle_window,
  check_memory_growth).
- Any times and windows: memory_growth never raises, and a growth it finds is made of the
  samples' own times and figures; a window _idle_window gives is the history's own samples,
  each once, in its order after the first.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from sidecar.verdict import Facts, RecentSample, Rules, decide, memory_growth
from sidecar.verdict.rules import MemoryGrowth, _idle_window
from tests.helpers.verdict_facts import facts, model, proc
from tests.helpers.verdict_random import random_rules, random_samples


def outcome(fn, *args):
    """What a call gives: ("value", its value), or ("raises", the type of what it raised)."""
    try:
        return "value", fn(*args)
    except Exception as e:  # noqa: BLE001 -- what a call raises is part of its outcome
        return "raises", type(e)


# ---------------------------------------------------------------------------------------------
# What each function's docstring promises, on finite times and windows
# ---------------------------------------------------------------------------------------------
def _finite(recent, *windows: float) -> bool:
    return all(math.isfinite(s.time) for s in recent) and not any(w != w for w in windows)


def check_idle_window(f: Facts) -> None:
    """_idle_window: "the recent samples covering the idle window (and the one before it), or None
    when history is too short" (the window: the idle_window_s seconds up to the newest sample)."""
    recent, window_s = f.recent, f.rules.idle_window_s
    got = _idle_window(f)
    if not recent:
        assert got is None
        return
    now = recent[-1].time
    cutoff = now - window_s
    inside = [i for i, s in enumerate(recent) if s.time >= cutoff]
    before = [i for i, s in enumerate(recent) if s.time < cutoff]
    too_short = not before and now - recent[inside[0]].time < window_s
    assert (got is None) == too_short, (got, window_s, [s.time for s in recent])
    if got is None:
        return
    at = {id(s): i for i, s in enumerate(recent)}
    picked = [at.get(id(s)) for s in got]  # the very samples of the history
    # Every sample of the window in the history's order, after the last one before it (the last in
    # the history's order: a clock stepped back may put it after some of the window's).
    assert picked == ([before[-1]] if before else []) + inside, (picked, before, inside)


def check_memory_growth(recent, rules: Rules) -> None:
    """memory_growth, as its docstring states it: the window is the samples with a memory figure
    from growth_window_s before the last such sample to it; it grows when it holds 3 figures or more
    over growth_min_span_s at least, its last figure exceeds its first by growth_min_mib and
    growth_min_fraction of the first, and growth_monotonic_fraction of its steps do not decrease.
    Any iterable of samples gives the same."""
    got = memory_growth(recent, rules)
    assert repr(memory_growth(iter(recent), rules)) == repr(got)
    assert repr(memory_growth(list(recent), rules)) == repr(got)
    figures = [(s.time, s.tree_gpu_mem_mib) for s in recent if s.tree_gpu_mem_mib is not None]
    window = [(t, m) for t, m in figures if t >= figures[-1][0] - rules.growth_window_s] if figures else []
    if len(window) < 3:
        assert got is None, (got, window)
        return
    (t0, first), (t1, last) = window[0], window[-1]
    steps = [b - a for (_, a), (_, b) in zip(window, window[1:])]
    grows = (
        t1 - t0 >= rules.growth_min_span_s
        and last - first >= rules.growth_min_mib
        and last - first >= rules.growth_min_fraction * max(first, 1.0)
        and sum(d >= 0 for d in steps) / len(steps) >= rules.growth_monotonic_fraction
    )
    assert (got is not None) == grows, (got, window, rules)
    if got is not None:
        # The window's own figures and times, of their own types (an int figure stays an int).
        assert repr(got) == repr(MemoryGrowth(first, last, t0, t1)), (got, window)


def random_cases(seed: int) -> list[tuple[tuple[RecentSample, ...], Rules]]:
    rng = random.Random(seed)
    return [(random_samples(rng), random_rules(rng)) for _ in range(100)]


@pytest.mark.parametrize("seed", range(40))
def test_idle_window_and_memory_growth_keep_their_promises(seed):
    checked = 0
    for recent, rules in random_cases(seed):
        if _finite(recent, rules.idle_window_s):
            check_idle_window(Facts(target_pid=1, recent=recent, rules=rules))
        if _finite(recent, rules.growth_window_s):
            check_memory_growth(recent, rules)
            checked += 1
    assert checked >= 60  # most random cases are finite: the promises are checked on them


def _at(*times, mem=1000.0):
    return tuple(
        RecentSample(t, 0.0, mem if mem is None else mem + 100.0 * i, i, 0.0) for i, t in enumerate(times)
    )


INF, NAN = math.inf, math.nan
EDGE_SAMPLES = [
    _at(),
    _at(5.0),
    _at(NAN),
    _at(NAN, NAN),
    _at(1.0, NAN, 3.0),
    _at(1.0, 2.0, INF),
    _at(-INF, -INF, 0.0),
    _at(INF, INF),
    _at(0.0, 0.0, 0.0, 0.0),
    _at(0.0, 60.0, 120.0, 119.0, 180.0),  # the clock stepped back a second
    _at(*(1.5 * i for i in range(82))),
    _at(*(1.5 * i for i in range(82)), mem=None),
    tuple(
        replace(s, tree_gpu_mem_mib=None) if i % 3 else s
        for i, s in enumerate(_at(*(10.0 * i for i in range(40))))
    ),
]
EDGE_RULES = [
    Rules(),
    Rules(idle_window_s=INF, growth_window_s=INF),
    Rules(idle_window_s=-1.0, growth_window_s=-1.0),
    Rules(idle_window_s=NAN, growth_window_s=NAN),
    Rules(idle_window_s=0.0, growth_window_s=0.0, growth_min_span_s=0.0, growth_min_mib=0.0),
]


@pytest.mark.parametrize("rules", EDGE_RULES, ids=repr)
@pytest.mark.parametrize("recent", EDGE_SAMPLES, ids=lambda r: ",".join(f"{s.time:g}" for s in r[:5]))
def test_odd_samples_and_rules_keep_the_promises_where_they_apply(recent, rules):
    if _finite(recent, rules.idle_window_s):
        check_idle_window(Facts(target_pid=1, recent=recent, rules=rules))
    if _finite(recent, rules.growth_window_s):
        check_memory_growth(recent, rules)


def check_any_times(recent, rules: Rules) -> None:
    """What holds whatever the times and windows, NaN and infinities included."""
    kind, grown = outcome(memory_growth, recent, rules)
    assert kind == "value", grown
    if grown is not None:
        pairs = {(s.time, s.tree_gpu_mem_mib) for s in recent if s.tree_gpu_mem_mib is not None}
        assert (grown.start_unix_s, grown.first_mib) in pairs and (grown.end_unix_s, grown.last_mib) in pairs
    kind, window = outcome(_idle_window, Facts(target_pid=1, recent=recent, rules=rules))
    if kind == "value" and window is not None:
        at = {id(s): i for i, s in enumerate(recent)}
        picked = [at.get(id(s)) for s in window]
        # The history's own samples, each once; in its order but for the first (the last one before
        # the window, which a clock stepped back may put after some of the window's).
        assert None not in picked and len(set(picked)) == len(picked), picked
        assert picked[1:] == sorted(picked[1:]), picked


@pytest.mark.parametrize("seed", range(40))
def test_any_times_and_windows_give_samples_of_the_history(seed):
    for recent, rules in random_cases(seed):
        check_any_times(recent, rules)


@pytest.mark.parametrize("rules", EDGE_RULES, ids=repr)
@pytest.mark.parametrize("recent", EDGE_SAMPLES, ids=lambda r: ",".join(f"{s.time:g}" for s in r[:5]))
def test_odd_samples_and_rules_give_samples_of_the_history(recent, rules):
    if not (rules.idle_window_s != rules.idle_window_s or any(s.time != s.time for s in recent)):
        check_any_times(recent, rules)
    else:  # a NaN time or window: the idle window may raise, see below; memory growth may not
        assert outcome(memory_growth, recent, rules)[0] == "value"


def test_a_nan_time_in_the_history_does_not_make_the_verdict_raise():
    f = facts(proc(models=[model("cuda:0")]), recent=_at(math.nan))
    decide(f)


def test_random_samples_cover_the_cases():
    """The random sequences above reach each path of both functions."""
    rng = random.Random(0)
    seen = set()
    for _ in range(4000):
        recent, rules = random_samples(rng), random_rules(rng)
        f = Facts(target_pid=1, recent=recent, rules=rules)
        times = [s.time for s in recent]
        in_order = all(a <= b for a, b in zip(times, times[1:]))
        seen.add(("in order" if in_order else "out of order", outcome(_idle_window, f)[1] is None))
        grown = outcome(memory_growth, recent, rules)
        seen.add(("growth", in_order, grown[0], grown[1] is None))
        seen.add(("finite", all(map(math.isfinite, times))))
    assert {("finite", True), ("finite", False)} <= seen
    assert {("in order", True), ("in order", False), ("out of order", True), ("out of order", False)} <= seen
    assert {("growth", True, "value", False), ("growth", False, "value", False)} <= seen
    assert ("growth", True, "value", True) in seen
