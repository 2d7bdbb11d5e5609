"""The history's ring, and what a poll adds to it: the incremental paths (recent()'s window kept
between polls, one poll's GPU rows packed once for every job, facts' derived values kept when the
poller sets `recent`) answer what the straightforward computation answers."""

from __future__ import annotations

import math
import random
from array import array
from dataclasses import fields, replace

from probe_wire.records import RuntimeRecord
from sidecar.poll.history import History, Sample, pack
from sidecar.poll.samples import history_sample
from sidecar.verdict import (
    Facts,
    GpuFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    RecentWindow,
    SystemGpuFacts,
    times_in_order,
)
from sidecar.verdict.facts import _DERIVED_FACTS, samples_in_order


def _sample(t: float) -> Sample:
    return Sample(t, (), (), RecentSample(t, None, None, 0, None))


def _scanned(history: History, window_s: float) -> tuple[RecentSample, ...]:
    """recent() as specified: the samples of the last window_s seconds, and the one before them
    (the last one older than the window's start; none when no sample is older)."""
    samples = history.samples()
    if not samples:
        return ()
    cutoff = samples[-1].time - window_s
    start = max((i for i, s in enumerate(samples) if s.time < cutoff), default=0)
    return tuple(s.recent for s in samples[start:])


def test_recent_is_the_window_a_scan_finds_across_wraps_late_polls_and_clock_jumps():
    rng = random.Random(7)
    history = History(history_s=30.0, interval_s=1.5)  # 21 samples: the ring wraps many times
    t = 1000.0
    checked = in_orders = 0
    for i in range(3000):
        # Mostly regular polls; some late (the ring drops by age), repeated, or the clock going back.
        t += 1.5 if rng.random() < 0.85 else rng.choice([0.0, 0.2, 7.0, 45.0, -3.0, -40.0])
        history.append(_sample(t))
        window_s = 10.0 if i % 500 < 450 else rng.choice([0.0, 4.0, 10.0, 100.0])
        recent, scanned = history.recent(window_s), _scanned(history, window_s)
        assert recent == scanned, f"poll {i}"
        # Handed over as in order (the rules then do not look) exactly when it is.
        in_order = times_in_order([r.time for r in scanned])
        assert (type(recent) is RecentWindow) == in_order and type(recent) in (tuple, RecentWindow), f"poll {i}"
        in_orders += in_order
        checked += 1
    assert checked == 3000 and len(history) <= history.capacity
    assert 0 < in_orders < checked  # both kinds of window were met


def test_a_window_in_order_is_one_whatever_its_times():
    assert samples_in_order(RecentWindow()) and not samples_in_order(())
    one = (RecentSample(float("nan"), None, None, 0, None),)
    assert not samples_in_order(one) and not times_in_order([float("nan")])
    assert samples_in_order(tuple(RecentSample(t, None, None, 0, None) for t in (1.0, 1.0, 2.0)))
    assert not samples_in_order([RecentSample(t, None, None, 0, None) for t in (1.0, 3.0, 2.0, 4.0)])


def test_recent_of_a_steady_job_is_its_last_samples():
    history = History(history_s=600.0, interval_s=1.5)
    for i in range(1000):  # 401 kept
        history.append(_sample(1.5 * i))
        recent = history.recent(120.0)
    # The newest at 1498.5: 1378.5 on is the window, 1377.0 the sample before it.
    assert [r.time for r in recent] == [1.5 * i for i in range(918, 1000)]
    assert history.recent(120.0) == recent  # asking again changes nothing


def test_pack_makes_no_value_of_none_and_of_infinities():
    rows = ((1, None, 2.5), (math.inf, -math.inf, float("nan")), (True, 0, -0.0))
    packed = pack(rows)
    assert isinstance(packed, array)
    assert [None if v != v else v for v in packed] == [1.0, None, 2.5, None, None, None, 1.0, 0.0, -0.0]


def _facts(gpu_util: float) -> Facts:
    gpus = tuple(
        GpuFacts(i, f"GPU-{i}", util=gpu_util + i, mem_used_mib=100.0 * i, power_w=300.0) for i in range(4)
    )
    procs = tuple(
        ProcessFacts(
            pid=10 + i,
            runtime=RuntimeRecord(torch="2"),
            models=(ModelFacts("net", f"cuda:{i}", (f"cuda:{i}",), forward_calls=5),),
            gpu=(ProcGpu(i, 1000.0, 50.0),),
        )
        for i in range(4)
    )
    return Facts(target_pid=10, processes=procs, nvml_ok=True, gpus=gpus)


def test_each_sample_has_its_own_polls_gpus_and_jobs_of_one_poll_share_them():
    a, b = _facts(10.0), _facts(60.0)
    first = history_sample(1.0, a)
    again = history_sample(1.0, replace(a, target_pid=99))  # another job of a's poll
    other = history_sample(2.0, b)  # the next poll's GPU facts, as many of them: its own rows
    assert [g[1] for g in first.gpus] == [10.0, 11.0, 12.0, 13.0]
    assert [g[1] for g in other.gpus] == [60.0, 61.0, 62.0, 63.0]
    assert again.gpus == first.gpus and again._gpus is first._gpus
    assert first.recent.model_gpu_util == 10.0 and other.recent.model_gpu_util == 60.0


def test_facts_with_recent_keep_what_they_derived_and_only_that():
    facts = _facts(10.0)
    history_sample(1.0, facts)  # asks for model_gpu_indices, as the poller's sample does
    recent = (RecentSample(1.0, 50.0, 4000.0, 20, 10.0),)
    kept = facts.with_recent(recent)
    fresh = replace(facts, recent=recent)
    assert kept.recent == recent and kept == fresh
    # Its fields, and derived facts only: nothing else of the old facts rides along.
    assert set(kept.__dict__) <= {f.name for f in fields(Facts)} | set(_DERIVED_FACTS)
    assert kept.model_gpu_indices is facts.model_gpu_indices
    assert (
        kept.model_gpu_indices
        == fresh.model_gpu_indices
        == {id(m): i for i, (p, m) in enumerate((p, m) for p in facts.processes for m in p.models)}
    )
    assert kept.job_gpu_indices == fresh.job_gpu_indices == (0, 1, 2, 3)


def _other_fields(f: Facts) -> Facts:
    """``f`` with every field but processes and GPUs changed (the same processes and GPU objects)."""
    return replace(
        f,
        target_pid=f.target_pid + 1,
        target_alive=not f.target_alive,
        nvml_ok=not f.nvml_ok,
        nvml_error="changed",
        driver="1.0",
        cuda_driver="9.9",
        system_gpus=() if f.system_gpus else (SystemGpuFacts("NVIDIA", "A100", "0000:01:00.0", "nvidia", 0),),
        kfd_present=not f.kfd_present,
        pid_namespace_suspect=not f.pid_namespace_suspect,
        stopped=((1, 2.0),),
        target_age_s=12345.0,
        recent=(RecentSample(1.0, 50.0, 4000.0, 20, 10.0),),
        rules=replace(f.rules, idle_util_pct=f.rules.idle_util_pct + 1),
    )


def test_derived_facts_are_made_of_processes_and_gpus_alone() -> None:
    """What Facts.keep_derived relies on: every derived fact is the same whatever the other fields."""
    from tests.helpers.verdict_tables import CASES, EFFICIENCY_CASES

    base = _facts(1.0)
    moved = _other_fields(base)
    assert {f.name for f in fields(Facts) if getattr(moved, f.name) == getattr(base, f.name)} == {"processes", "gpus"}
    for _name, f in [(c[0], c[1]) for c in CASES + EFFICIENCY_CASES] + [("steady", _facts(10.0))]:
        other = _other_fields(f)
        for name in _DERIVED_FACTS:
            assert repr(getattr(other, name)) == repr(getattr(f, name)), (_name, name)


def test_new_facts_keep_what_the_last_derived_of_the_same_processes_and_gpus() -> None:
    last = _facts(10.0).with_recent(())
    for name in _DERIVED_FACTS:
        getattr(last, name)
    same = replace(last, target_age_s=3.0)  # new facts of the very same processes and GPUs
    same.keep_derived(last)
    assert all(same.__dict__[name] is last.__dict__[name] for name in _DERIVED_FACTS)
    # Other processes (equal, but new objects) or other GPUs: derived afresh, and equal.
    for other in (
        replace(last, processes=tuple(replace(p) for p in last.processes)),
        replace(last, gpus=tuple(replace(g) for g in last.gpus)),
    ):
        other.keep_derived(last)
        assert not set(_DERIVED_FACTS) & set(other.__dict__)
        assert other.job_gpu_indices == last.job_gpu_indices
    fresh = replace(last)
    fresh.keep_derived(None)
    assert not set(_DERIVED_FACTS) & set(fresh.__dict__)
