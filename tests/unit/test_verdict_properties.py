"""decide() over the verdict tables' facts and RANDOM_FACTS random ones (tests/helpers/verdict_random.py),
held to what must hold of every verdict, whatever the facts:

- the same facts give the same verdict: twice, from facts made afresh, through a VerdictMemo that
  saw other facts before;
- a known status; known codes, each once, of known severities, sorted by severity; every text of
  it renders in English and Chinese;
- what a verdict names is the job's: the pids of a warning are its processes', its stopped ones' or
  its target's; the GPU a warning names, and model_gpu_index, is one the facts hold (NVML's, or
  a process's row; the efficiency rules': a GPU of the job that NVML lists and has not lost);
- each warning fires exactly when the fact its code stands for holds (codes.py's one-line
  summaries, the rules' conditions), or, for the rules measured against thresholds, only when the
  fact it measures is there;
- the status follows the models' device types (status.py);
- over two polls (the second `next_poll` of the first), a warning the second poll's facts do not give
  is held only as they have it: never one of UNHELD_CODES; one whose figures are measured against a
  threshold with the figures an oracle here computes from those facts at the release values (and
  gone exactly when they give none); any other (whose text names only who and where) as it was
  raised (issue 39 item 14).

The tables hold decide() to hand-written statuses and codes per named case (test_verdict.py,
test_verdict_efficiency.py). Facts with a NaN time in their history are left out here: decide()
raises on them (test_verdict_windows.py's xfail).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import fields, replace
from statistics import mean
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS
from sidecar.common.catalogue import Ref
from sidecar.verdict import (
    ACCELERATOR_TYPES,
    STATUSES,
    Facts,
    Finding,
    ProcessFacts,
    VerdictMemo,
    decide,
    device_type,
    memory_growth,
)
from sidecar.verdict.codes import CODES, NOT_FROM_DECIDE
from sidecar.verdict.efficiency import THROTTLE_REASONS
from sidecar.verdict.facts import NVIDIA_VENDOR, SEVERITY_ORDER, pct, plist
from sidecar.verdict.hysteresis import RELEASED_AT, UNHELD_CODES
from sidecar.verdict.rules import PROBE_PRESENT_STATES
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.verdict_facts import en, settled_facts, zh
from tests.helpers.verdict_random import all_facts, next_poll, random_facts


def _no_nan_time(f: Facts) -> bool:
    return not any(math.isnan(s.time) for s in f.recent)


FACTS = [(name, f) for name, f in all_facts() if _no_nan_time(f)]
# The efficiency rules judge the job's GPUs: the GPU they name is one of those.
EFFICIENCY_CODES = {
    "throttled",
    "pcie-degraded",
    "hollow-utilisation",
    "no-tensor-cores",
    "mig-no-process-util",
}


def fresh(f: Facts) -> Facts:
    """Equal facts made anew, no object shared with ``f`` (nor what was derived from it)."""
    return replace(f, **{fld.name: copy.deepcopy(getattr(f, fld.name)) for fld in fields(f)})


def codes(v) -> list[str]:
    return [w.code for w in v.warnings]


def _refs(r):
    """A text reference and the references among its params, nested."""
    if isinstance(r, Ref):
        yield r
        for value in r.params.values():
            yield from _refs(value)


def _models(f: Facts):
    return [(p, m) for p in f.processes for m in p.models]


# The GPUs the sidecar reads: NVIDIA's (and a ROCm build's AMD GPU) as `cuda`, Intel's as `xpu`.
GPU_TYPES = {"cuda", "xpu"}


def _on_gpu(types) -> bool:
    return bool(GPU_TYPES & set(types))


# ---------------------------------------------------------------------------------------------
# Determinism, form, references
# ---------------------------------------------------------------------------------------------
def test_the_same_facts_give_the_same_verdict():
    memo = VerdictMemo()
    for name, f in FACTS:
        v = decide(f)
        assert decide(f) == v, name
        assert decide(fresh(f)) == v, name
        assert decide(f, memo) == v, name  # the memo holds the last facts' verdict parts
        assert decide(f.with_recent(f.recent[1:]), memo) == decide(f.with_recent(f.recent[1:])), name


def check_form(f: Facts, v) -> None:
    assert v.status in STATUSES
    assert en(v.message) and zh(v.message)
    assert len(set(codes(v))) == len(codes(v)), codes(v)
    severities = [SEVERITY_ORDER[w.severity] for w in v.warnings]
    assert severities == sorted(severities)
    for w in v.warnings:
        assert w.code in CODES, w.code
        assert en(w.message) and zh(w.message), w.code
        assert w.hint is None or (en(w.hint) and zh(w.hint)), w.code


def check_references(f: Facts, v) -> None:
    job_pids = {p.pid for p in f.processes} | {pid for pid, _ in f.stopped} | {f.target_pid}
    listed = {g.index for g in f.gpus}
    known = listed | {row.index for p in f.processes for row in p.gpu}
    job_gpus = {g.index for g in f.job_gpus}
    for w in v.warnings:
        assert set(w.pids) <= job_pids, (w.code, w.pids, job_pids)
        for r in (*_refs(w.message), *_refs(w.hint)):
            if "gpu" in r.params and isinstance(r.params["gpu"], int):
                gpu = r.params["gpu"]
                assert gpu in (job_gpus if w.code in EFFICIENCY_CODES else known), (w.code, gpu)
    assert v.model_gpu_index is None or v.model_gpu_index in known


def test_every_verdict_is_well_formed_and_names_only_what_the_facts_hold():
    for _name, f in FACTS:
        v = decide(f)
        check_form(f, v)
        check_references(f, v)


# ---------------------------------------------------------------------------------------------
# Each rule's condition
# ---------------------------------------------------------------------------------------------
def _runtimes(f: Facts):
    return [p.runtime for p in f.processes if p.runtime is not None]


def _nvidia(f: Facts) -> bool:
    return any(g.vendor == "nvidia" for g in f.gpus) or any(s.vendor == NVIDIA_VENDOR for s in f.system_gpus)


def _types(f: Facts) -> set[str]:
    return set().union(*(m.types for _, m in _models(f)))


def _gpu_work_in_child(f: Facts) -> bool:
    target = next((p for p in f.processes if p.is_target), None)
    return bool(target and not target.uses_gpu and any(not p.is_target and p.uses_gpu for p in f.processes))


def _input_mismatch(f: Facts) -> bool:
    return any(
        m.input_device and m.device and m.device not in (DEVICE_MIXED, DEVICE_NO_PARAMETERS)
        and m.input_device != m.device and device_type(m.input_device) != "meta"
        for _, m in _models(f)
    )  # fmt: skip


# code -> the fact it stands for: the warning is there if and only if it holds.
EXACTLY_WHEN = {
    "target-exited": lambda f: not f.target_alive,
    "job-stopped": lambda f: f.target_alive and bool(f.stopped),
    "nvml-unavailable": lambda f: not f.nvml_ok,
    "pid-namespace": lambda f: f.pid_namespace_suspect,
    "no-probe": lambda f: (
        f.target_alive and not any(p.has_probe or p.probe_state in PROBE_PRESENT_STATES for p in f.processes)
    ),
    "probe-unreadable": lambda f: any(p.probe_unreadable for p in f.processes),
    "probe-error": lambda f: any(p.publish_failure for p in f.processes),
    "host-syncs": lambda f: any(
        p.syncs_per_step is not None and p.syncs_per_step >= f.rules.host_syncs_per_step for p in f.processes
    ),
    "memory-growth": lambda f: memory_growth(f.recent, f.rules) is not None,
    "no-parameters": lambda f: any(m.device == DEVICE_NO_PARAMETERS for _, m in _models(f)),
    "registered-before-compile": lambda f: any(m.compiled_uncounted for _, m in _models(f)),
    "worker-cuda": lambda f: any(
        p.role == "dataloader-worker" and (p.gpu_mem_mib > 0 or (p.cuda_memory_mib or 0) > 0)
        for p in f.processes
    ),
    "unregistered-gpu-process": lambda f: any(p.uses_gpu and not p.has_probe for p in f.processes),
    "model-on-cpu": lambda f: any(
        m.types == {"cpu"}
        and p.runtime is not None
        and (p.runtime.cuda_available is True or p.runtime.xpu_available is True)
        for p, m in _models(f)
    ),
    "cuda-unavailable": lambda f: any(rt.cuda_build and rt.cuda_available is False for rt in _runtimes(f)),
    "cpu-build": lambda f: (
        _nvidia(f)
        and any(
            rt.torch and rt.cuda_build is None and rt.hip_build is None and rt.xpu_build is None
            for rt in _runtimes(f)
        )
    ),
    "mixed-devices": lambda f: any(len(m.types) > 1 for _, m in _models(f)) or len(_types(f)) > 1,
    "gpu-work-in-child": _gpu_work_in_child,
    "input-mismatch": _input_mismatch,
    "mig-no-process-util": lambda f: any(g.mig_mode for g in f.job_gpus),
}


def _ranks(f: Facts) -> list:
    return [p for p in f.processes if p.role == "rank"]


def _data_waits(f: Facts) -> list[float]:
    """The data waits measured over enough steps to say (a breakdown's steps, a loader's batches)."""
    least = f.rules.data_starved_min_steps
    waits = [
        p.steps.data_wait_fraction
        for p in f.processes
        if p.steps and p.steps.steps >= least and p.steps.data_wait_fraction is not None
    ]
    return waits + [
        m.data_wait_fraction
        for _, m in _models(f)
        if m.data_wait_fraction is not None and (m.data_wait_batches or 0) >= least
    ]


# code -> a fact it needs: the warning is there only when it holds (the rule also weighs thresholds).
ONLY_WHEN = {
    "throttled": lambda f: (
        f.target_alive and any(set(g.clock_event_reasons or ()) & set(THROTTLE_REASONS) for g in f.job_gpus)
    ),
    "pcie-degraded": lambda f: any(
        None not in (g.pcie_link_gen, g.pcie_link_gen_max, g.pcie_link_width, g.pcie_link_width_max)
        and (g.pcie_link_gen < g.pcie_link_gen_max or g.pcie_link_width < g.pcie_link_width_max)
        for g in f.job_gpus
    ),
    "hollow-utilisation": lambda f: any(
        g.util is not None and g.util >= f.rules.hollow_util_pct for g in f.job_gpus
    ),
    "no-tensor-cores": lambda f: any(
        m.autocast == "off" and m.forward_calls > 0 and set(m.param_dtypes) == {"float32"}
        for _, m in _models(f)
    ),
    "idle-gpu": lambda f: len(f.recent) >= 2 and any(_on_gpu(m.types) for _, m in _models(f)),
    "data-starved": lambda f: any(w >= f.rules.data_wait_starved for w in _data_waits(f)),
    "rank-shared-gpu": lambda f: len(_ranks(f)) >= 2,
    "rank-device-mismatch": lambda f: any(
        p.local_rank is not None and any(device_type(m.device) in GPU_TYPES for m in p.models)
        for p in _ranks(f)
    ),
    "shared-model-unprobed-child": lambda f: any(m.shared_memory for _, m in _models(f)),
    "device-count-mismatch": lambda f: bool(f.system_gpus),
    "straggler-rank": lambda f: f.target_alive and len(_ranks(f)) >= 2,
}


def _data_wait_of(f: Facts, p: ProcessFacts) -> float | None:
    """The process's data wait, over enough evidence to say: its breakdown over
    `data_starved_min_steps` steps, else the most its models' loaders wait over as many batches."""
    least = f.rules.data_starved_min_steps
    if p.steps is not None and p.steps.steps >= least:
        return p.steps.data_wait_fraction
    waits = [
        m.data_wait_fraction
        for m in p.models
        if m.data_wait_fraction is not None and m.forward_calls > 0 and (m.data_wait_batches or 0) >= least
    ]
    return max(waits, default=None)


def _idle_hint_wait(f: Facts, pids: set[int] | None = None) -> str | None:
    """The data wait idle-gpu's hint quotes: data-starved's evidence, of the processes with a model
    on the GPU (of `pids`), at data-starved's threshold."""
    waits = [
        w
        for p in f.processes
        if (pids is None or p.pid in pids)
        and any(_on_gpu(m.types) for m in p.models)
        and (w := _data_wait_of(f, p)) is not None
    ]
    return f"{max(waits):.0%}" if waits and max(waits) >= f.rules.data_wait_starved else None


def check_rules(f: Facts, v) -> None:
    given = set(codes(v))
    for w in v.warnings:
        if w.code == "idle-gpu":  # its hint blames data loading over data-starved's evidence alone
            assert w.hint.params.get("wait") == _idle_hint_wait(f), (w.hint, _idle_hint_wait(f))
    for code, holds in EXACTLY_WHEN.items():
        assert (code in given) == bool(holds(f)), code
    for code, needed in ONLY_WHEN.items():
        assert code not in given or needed(f), code
    assert given <= set(EXACTLY_WHEN) | set(ONLY_WHEN), given - set(EXACTLY_WHEN) - set(ONLY_WHEN)
    # no-probe waits for the probe (an info) in the job's first seconds only.
    age_s = f.target_age_s
    waiting = age_s is not None and 0.0 <= age_s < f.rules.probe_grace_s
    assert all((w.severity == "info") == waiting for w in v.warnings if w.code == "no-probe")


def check_status(f: Facts, v) -> None:
    """GPU when the models with a device are all on one accelerator type (or, none having one, a
    process of the job uses a GPU), CPU when they are all on the CPU, MIXED when on several types,
    UNKNOWN otherwise."""
    types = set().union(*(m.types for _, m in _models(f) if m.types))
    if len(types) > 1:
        want = "MIXED"
    elif types:
        (kind,) = types
        want = "GPU" if kind in ACCELERATOR_TYPES else "CPU" if kind == "cpu" else "UNKNOWN"
    else:
        want = "GPU" if any(p.uses_gpu for p in f.processes) else "UNKNOWN"
    assert v.status == want, (v.status, want, types)
    if want != "GPU":
        assert v.model_gpu_index is None or want == "MIXED"
    if not f.target_alive and f.processes:
        assert v.message.id == "message.exited" and v.message.params["pid"] == f.target_pid


def test_each_warning_fires_when_its_fact_holds_and_the_status_follows_the_models():
    for _name, f in FACTS:
        v = decide(f)
        check_rules(f, v)
        check_status(f, v)


def test_the_facts_reach_every_rule_and_status():
    """The properties above are not held vacuously: over these facts each code fires (so every rule
    runs) and each one of EXACTLY_WHEN is also absent somewhere; every status is given."""
    # Every code decide() gives has its condition here (the cluster view's own are not decide()'s).
    assert set(EXACTLY_WHEN) | set(ONLY_WHEN) == set(CODES) - NOT_FROM_DECIDE
    fired, statuses = set(), set()
    for _, f in FACTS:
        v = decide(f)
        fired |= set(codes(v))
        statuses.add(v.status)
    assert fired == set(EXACTLY_WHEN) | set(ONLY_WHEN), (set(EXACTLY_WHEN) | set(ONLY_WHEN)) - fired
    assert statuses == set(STATUSES)
    assert all(any(code not in codes(decide(f)) for _, f in FACTS[:50]) for code in EXACTLY_WHEN)
    assert len(FACTS) >= len(all_facts()) - 5  # few facts left out for a NaN time


@settings(max_examples=examples(400), deadline=None)
@given(seed=st.integers(0, 2**32))
def test_random_facts_beyond_the_fixed_seeds(seed):
    f = random_facts(seed)
    if not _no_nan_time(f):
        return
    v = decide(f)
    assert decide(fresh(f)) == v
    check_form(f, v)
    check_references(f, v)
    check_rules(f, v)
    check_status(f, v)
    after = next_poll(f, seed)
    if _no_nan_time(after):
        check_held(f, after)


# ---------------------------------------------------------------------------------------------
# A held warning: this poll's figures, gone with its facts (issue 39 item 14)
# ---------------------------------------------------------------------------------------------
def _named(f: Facts, held: Finding) -> list[ProcessFacts]:
    """The processes of `f` a held warning is about: those it named (all, where it named none)."""
    return [p for p in f.processes if not held.pids or p.pid in held.pids]


def _held_data_starved(f: Facts, held: Finding) -> dict[str, Any] | None:
    waits = {
        p.pid: w
        for p in _named(f, held)
        if (p.steps is not None or p.models)
        and (w := _data_wait_of(f, p)) is not None
        and w >= f.rules.data_wait_released
    }
    return {"wait": f"{max(waits.values()):.0%}", "pids": plist(waits)} if waits else None


def _held_host_syncs(f: Facts, held: Finding) -> dict[str, Any] | None:
    syncs = {
        p.pid: p.syncs_per_step
        for p in _named(f, held)
        if p.syncs_per_step is not None and p.syncs_per_step >= f.rules.host_syncs_released
    }
    return {"syncs": f"{max(syncs.values()):.0f}", "pids": plist(syncs)} if syncs else None


def _held_idle_gpu(f: Facts, held: Finding) -> dict[str, Any] | None:
    """The samples from `idle_window_s` before the last and the one before them, all under the
    release value, over which steps (else forward calls) went on, with a model on the GPU."""
    on_gpu = {p.pid for p in _named(f, held) if any(_on_gpu(m.types) for m in p.models)}
    if not on_gpu or not f.recent:
        return None
    now = f.recent[-1].time
    cutoff = now - f.rules.idle_window_s
    window = [s for s in f.recent if s.time >= cutoff]
    older = [s for s in f.recent if s.time < cutoff]
    if not older and (not window or now - window[0].time < f.rules.idle_window_s):
        return None
    window = older[-1:] + window
    utils = [s.tree_sm_util if s.tree_sm_util is not None else s.model_gpu_util for s in window]
    if (
        len(window) < 2
        or None in utils
        or max(u for u in utils if u is not None) >= f.rules.idle_util_released_pct
    ):
        return None
    first, last = window[0], window[-1]
    if first.train_steps is not None and last.train_steps is not None:
        working = last.train_steps > first.train_steps
    else:
        working = last.forward_calls > first.forward_calls
    if not working:
        return None
    return {
        "threshold": f"{f.rules.idle_util_released_pct:.0f}%",
        "seconds": f"{last.time - first.time:.0f}",
        "hint.wait": _idle_hint_wait(f, on_gpu),
    }


def _held_memory_growth(f: Facts, held: Finding) -> dict[str, Any] | None:
    at = replace(f.rules, growth_min_mib=f.rules.growth_released_mib)
    grown = memory_growth(f.recent, replace(at, growth_min_fraction=f.rules.growth_released_fraction))
    return None if grown is None else {"first": f"{grown.first_mib:.0f}", "last": f"{grown.last_mib:.0f}"}


def _held_hollow(f: Facts, held: Finding) -> dict[str, Any] | None:
    """Its GPU, one of the job's (its named processes'), still busy by NVML's figure and hollow by
    GPM's at the release values, and busy with the job's own kernels."""
    index, r = held.message.params["gpu"], f.rules
    job = replace(f, processes=tuple(_named(f, held)))
    g = next((g for g in job.job_gpus if g.index == index), None)
    if g is None or g.util is None or g.util < r.hollow_util_released_pct:
        return None
    sm, occ = g.sm_activity_fraction, g.sm_occupancy_fraction
    hollow = (sm is not None and sm < r.hollow_sm_activity_released) or (
        sm is None and occ is not None and occ < r.hollow_sm_occupancy_released
    )
    own = [u.sm_util for p in job.processes for u in p.gpu if u.index == index and u.sm_util is not None]
    if not hollow or (own and sum(own) < r.hollow_own_share * g.util):
        return None
    return {
        "util": pct(g.util),
        "sm": pct(None if sm is None else sm * 100),
        "occupancy": pct(None if occ is None else occ * 100),
    }


def _held_straggler(f: Facts, held: Finding) -> dict[str, Any] | None:
    """Its rank still the one that waits least in the collectives (its backward beyond the least
    rank's), the next one waiting the release value more at least, every rank over enough steps."""
    first_of_rank: dict[int, ProcessFacts] = {}
    for p in _named(f, held):
        if (
            p.role == "rank"
            and p.rank is not None
            and not p.exited
            and p.steps
            and p.steps.backward_fraction is not None
        ):
            first_of_rank.setdefault(p.rank, p)
    ranks = sorted(first_of_rank.values(), key=lambda p: p.rank or 0)
    if (
        not f.target_alive
        or len(ranks) < 2
        or min(p.steps.steps for p in ranks if p.steps) < f.rules.straggler_min_steps
    ):
        return None
    least = min(p.steps.backward_fraction for p in ranks if p.steps and p.steps.backward_fraction is not None)
    waits = sorted(((p.steps.backward_fraction or 0.0) - least, p.rank) for p in ranks if p.steps)
    (_, slow), others = waits[0], [w for w, _ in waits[1:]]
    if waits[1][0] < f.rules.straggler_wait_released or slow != held.message.params["rank"]:
        return None
    return {
        "rank": slow,
        "wait": f"{mean(others):.0%}",
        "steps": min(p.steps.steps for p in ranks if p.steps),
    }


# code -> what a held warning of that code says at a poll of these facts (message params, "hint."
# the hint's), or None where they no longer give it: from the facts, as codes.py and facts.py's
# release values say, not from the rules.
HELD_FIGURES: dict[str, Callable[[Facts, Finding], dict[str, Any] | None]] = {
    "data-starved": _held_data_starved,
    "host-syncs": _held_host_syncs,
    "idle-gpu": _held_idle_gpu,
    "memory-growth": _held_memory_growth,
    "hollow-utilisation": _held_hollow,
    "straggler-rank": _held_straggler,
}


def check_held(before: Facts, after: Facts) -> set[tuple[str, bool]]:
    """settle() over the polls `before` and `after`: what the second shows beyond what its facts give
    is held as they have it. Returns (code, held) for each warning of HELD_FIGURES that the first
    poll raised and the second's facts do not give: held, or gone with its facts."""
    first, second = settled_facts([before, after])
    given = {w.code: w for w in decide(after).warnings}
    shown = {w.code: w for w in second.warnings}
    assert set(shown) >= set(given) and all(shown[c] == w for c, w in given.items())
    live, seen = {p.pid for p in after.processes}, set()
    for raised in first.warnings:
        code, now = raised.code, shown.get(raised.code)
        if code in given:
            continue
        if code in UNHELD_CODES or not after.target_alive or (raised.pids and not live & set(raised.pids)):
            assert now is None, (code, now)
        elif code not in HELD_FIGURES:
            assert now == raised, code  # what it names is who and where (tests/unit/test_verdict_held.py)
        else:
            expected = HELD_FIGURES[code](after, raised)
            assert (now is not None) == (expected is not None), (code, now, expected)
            seen.add((code, now is not None))
            for name, value in (expected or {}).items():
                assert now is not None
                ref = now.hint if name.startswith("hint.") else now.message
                assert ref is not None and ref.params.get(name.removeprefix("hint.")) == value, (
                    code,
                    name,
                    ref,
                )
    assert set(shown) <= set(given) | {w.code for w in first.warnings}
    return seen


def _two_polls(f: Facts, seeds: range) -> list[Facts]:
    return [next_poll(f, seed) for seed in seeds]


def test_a_held_warning_says_this_polls_figures_and_goes_with_its_facts() -> None:
    """Over the tables' and random facts, each followed by several next polls; and not vacuously:
    each code of HELD_FIGURES (the codes whose figures are measured against a threshold) is held at
    some, and gone with its facts at others."""
    assert set(HELD_FIGURES) == set(RELEASED_AT)
    seen: set[tuple[str, bool]] = set()
    for _name, f in FACTS:
        for after in _two_polls(f, range(12 if _name.startswith("table") else 4)):
            if _no_nan_time(after):
                seen |= check_held(f, after)
    assert seen == {(code, held) for code in HELD_FIGURES for held in (True, False)}, seen
