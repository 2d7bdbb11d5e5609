"""The verdict's windowed rules and its verdicts, held to their specification and to frozen digests.

- `_idle_window` and `memory_growth` over random sample sequences (times in order, out of order: a
  clock stepped back, equal, with gaps in the memory figures, spans shorter and longer than the
  rules' windows) and odd ones (NaN and infinite times and windows): each result has the properties
  its docstring states, and all the results together have the digest WINDOWS_DIGEST.
- `decide()` over facts made with the verdict tests' helpers, tables and random ones: a digest of
  each verdict's repr, in verdict_digests.json.

Both digests were computed by the code once and frozen. A change meant to change verdicts or
windows regenerates them deliberately, and says why in its commit:

      .venv/bin/python -m tests.unit.test_verdict_unchanged --regenerate
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sidecar.sources.nvml import GPM_FIRST_SAMPLE, GPM_UNSUPPORTED
from sidecar.verdict import (
    Facts,
    GpuFacts,
    LoaderSettings,
    MathSettings,
    ProcGpu,
    RecentSample,
    Rules,
    StepBreakdown,
    decide,
    memory_growth,
)
from sidecar.verdict.rules import MemoryGrowth, _idle_window
from tests.helpers.verdict_facts import (
    CPU_RT,
    CUDA_RT,
    H200,
    INTEL_CARD,
    NVIDIA_CARD,
    TWO_GPU_RT,
    model,
    proc,
)
from tests.helpers.verdict_tables import CASES, EFFICIENCY_CASES

DIGESTS = Path(__file__).with_name("verdict_digests.json")
RANDOM_FACTS = 600


def outcome(fn, *args):
    """What a call gives: its value, or the type of what it raised (some impossible inputs raise,
    e.g. a NaN time: the digests hold that too)."""
    try:
        return "value", fn(*args)
    except Exception as e:  # noqa: BLE001 -- what a call raises is part of its outcome
        return "raises", type(e)


# ---------------------------------------------------------------------------------------------
# Random samples and rules
# ---------------------------------------------------------------------------------------------
def random_times(rng: random.Random, n: int) -> list[float]:
    t = rng.choice([0.0, 1000.0, 1.7e9])
    step = rng.choice([0.05, 0.5, 1.5, 1.5, 3.0, 10.0, 30.0])
    times = []
    for _ in range(n):
        times.append(t)
        t += rng.choice([step, step, step, step * rng.random(), 0.0, step * 3])
    shape = rng.random()
    if shape < 0.15 and n > 1:  # the clock stepped back once
        at = rng.randrange(1, n)
        back = rng.choice([step, 30.0, 200.0, 1e6])
        times = times[:at] + [x - back for x in times[at:]]
    elif shape < 0.2:
        rng.shuffle(times)
    elif shape < 0.25 and n:  # a few equal times
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(n)
            times[i] = times[max(0, i - 1)]
        times.sort()
    elif shape < 0.27 and n:
        times[rng.randrange(n)] = rng.choice([math.nan, math.inf, -math.inf])
    return times


def random_mem(rng: random.Random, n: int) -> list[float | None]:
    kind = rng.choice(["flat", "grow", "grow", "saw", "noise", "none", "late"])
    base = rng.choice([0.0, 0.5, 100.0, 1000.0, 30000.0])
    rate = rng.choice([1.0, 5.0, 60.0, 300.0])
    out: list[float | None] = []
    for i in range(n):
        if kind == "flat":
            v = base
        elif kind == "grow":
            v = base + rate * i + (rng.choice([0, 0, 0, -rate * 2]) if rng.random() < 0.2 else 0)
        elif kind == "saw":
            v = base + (3000.0 if i % 2 else 0.0)
        elif kind == "noise":
            v = base + rng.uniform(-500, 2000)
        elif kind == "late":
            v = None if i < n // 2 else base + rate * i
        else:
            v = None
        if v is not None and rng.random() < 0.08:
            v = None
        out.append(v)
    if n and rng.random() < 0.1:
        out[-1] = None
    return out


def random_samples(rng: random.Random) -> tuple[RecentSample, ...]:
    n = rng.choice([0, 1, 2, 3, 4, 5, 8, 13, 40, 81, 82, 120, 200])
    times, mem = random_times(rng, n), random_mem(rng, n)
    util = rng.choice([None, 0.0, 2.0, 50.0])
    calls, steps = 0, rng.choice([None, 0])
    out = []
    for t, m in zip(times, mem):
        calls += rng.choice([0, 1, 8])
        if steps is not None:
            steps += rng.choice([0, 1])
        sm = util if rng.random() > 0.05 else rng.choice([None, 80.0])
        out.append(RecentSample(t, sm, m, calls, rng.choice([util, None, 1.0]), steps))
    return tuple(out)


def random_rules(rng: random.Random) -> Rules:
    if rng.random() < 0.4:
        return Rules()
    return replace(
        Rules(),
        idle_window_s=rng.choice([-1.0, 0.0, 1.0, 10.0, 10.0, 30.0, 200.0, math.inf]),
        idle_util_pct=rng.choice([5.0, 60.0]),
        growth_window_s=rng.choice([-1.0, 0.0, 10.0, 60.0, 120.0, 120.0, 1000.0, math.inf]),
        growth_min_span_s=rng.choice([0.0, 5.0, 60.0, 60.0, 200.0]),
        growth_min_mib=rng.choice([0.0, 256.0, 256.0, 5000.0]),
        growth_min_fraction=rng.choice([0.0, 0.1, 0.1, 2.0]),
        growth_monotonic_fraction=rng.choice([0.0, 0.8, 0.8, 1.0]),
    )


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


def window_outcomes(recent, rules: Rules) -> str:
    """Both functions' outcomes on one case, as text for WINDOWS_DIGEST: the idle window as the
    indices of its samples (each the very sample of the history: ids map back to indices)."""
    f = Facts(target_pid=1, recent=recent, rules=rules)
    kind, window = outcome(_idle_window, f)
    if kind == "value" and window is not None:
        at = {id(s): i for i, s in enumerate(recent)}
        window = [at.get(id(s)) for s in window]
    return f"{kind} {window!r} | {outcome(memory_growth, recent, rules)!r}"


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


def windows_digest() -> str:
    cases = [case for seed in range(40) for case in random_cases(seed)]
    cases += [(recent, rules) for rules in EDGE_RULES for recent in EDGE_SAMPLES]
    text = "\n".join(window_outcomes(recent, rules) for recent, rules in cases)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# windows_digest() as the code gave it: NaN times and windows included, which no promise above
# covers (a NaN time makes either function raise or give None). Regenerate deliberately: see the
# module's docstring.
WINDOWS_DIGEST = "443d47805d1b2b5f4f85"


def test_idle_window_and_memory_growth_give_the_frozen_outcomes():
    assert windows_digest() == WINDOWS_DIGEST, (
        "the idle window or memory growth changed on some case (a change meant to change them "
        "regenerates the digest: see this module's docstring)"
    )


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
    assert {("in order", True), ("in order", False), ("out of order", True), ("out of order", False)} <= seen
    assert {("growth", True, "value", False), ("growth", False, "value", False)} <= seen
    assert ("growth", True, "value", True) in seen


# ---------------------------------------------------------------------------------------------
# Random facts, made with the verdict tests' helpers
# ---------------------------------------------------------------------------------------------
def random_gpu(rng: random.Random, index: int) -> GpuFacts:
    pick = rng.choice
    gen_max, width_max = pick([None, 4, 5]), pick([None, 16])
    return replace(
        H200,
        index=index,
        uuid=pick([f"GPU-{index:04x}aaaa", None, "GPU-aaaa"]),
        name=pick(["NVIDIA H200", None]),
        util=pick([None, 0.0, 3.0, 50.0, 80.0, 97.0]),
        mem_used_mib=pick([None, 0.0, 1000.0]),
        lost=rng.random() < 0.05,
        field_errors=pick(
            [(), (), (("tensor_activity_fraction", GPM_FIRST_SAMPLE),), (("utilization", GPM_UNSUPPORTED),)]
        ),
        compute_capability=pick([None, "6.1", "7.0", "8.0", "9.0", "9.0", "x"]),
        sm_clock_mhz=pick([None, 900, 1980]),
        sm_clock_max_mhz=pick([None, 1980]),
        clock_event_reasons=pick(
            [
                None,
                (),
                ("gpu_idle",),
                ("sw_power_cap",),
                ("hw_thermal_slowdown",),
                ("gpu_idle", "hw_slowdown"),
                ("sw_power_cap", "hw_power_brake_slowdown"),
                ("sw_thermal_slowdown",),
            ]
        ),
        power_w=pick([None, 300.0]),
        power_limit_w=pick([None, 700.0]),
        temperature_c=pick([None, 91.0]),
        pcie_link_gen=pick([None, 1, 4, 5]),
        pcie_link_gen_max=gen_max,
        pcie_link_width=pick([None, 4, 16]),
        pcie_link_width_max=width_max,
        sm_activity_fraction=pick([None, None, 0.1, 0.7]),
        sm_occupancy_fraction=pick([None, None, 0.05, 0.5]),
        tensor_activity_fraction=pick([None, None, 0.0, 0.01, 0.3]),
        pcie_tx_bytes_per_s=pick([None, None, 1e3, 1e9]),
        pcie_rx_bytes_per_s=pick([None, 1e8]),
        mig_mode=pick([None, False, False, True]),
    )


DEVICES = [
    "cpu",
    "cuda:0",
    "cuda:0",
    "cuda:1",
    "cuda:2",
    "mixed",
    "no-parameters",
    "mps:0",
    "cuda:x",
    "cuda",
    None,
]
RUNTIMES = [
    None,
    CPU_RT,
    CUDA_RT,
    CUDA_RT,
    TWO_GPU_RT,
    {**CUDA_RT, "cuda_available": False},
    {**TWO_GPU_RT, "devices": [], "cuda_visible_devices": "1,0"},
    {**TWO_GPU_RT, "devices": [], "cuda_visible_devices": "GPU-0001"},
    {**CUDA_RT, "cuda_visible_devices": ""},
    {"torch": "2.5.1+cu124", "cuda_build": "12.8", "cuda_available": False, "device_count": 0},
]


def random_model(rng: random.Random, i: int):
    pick = rng.choice
    device = pick(DEVICES)
    devices = None
    if device == "mixed":
        devices = pick([("cpu", "cuda:0"), ("cuda:0", "cuda:1"), ()])
    elif rng.random() < 0.1:  # a payload whose device and devices disagree
        devices = pick([("cpu",), ("cuda:1",), ("cuda:0", "cuda:0"), ("mps:0", "cuda:0")])
    m = model(
        device,
        devices=devices,
        inp=pick([None, None, "cpu", "cuda:0", "cuda:1", "meta"]),
        calls=pick([0, 10, 500]),
        name=pick(["Net", "Net", "Head", f"M{i}"]),
        wait=pick([None, 0.1, 0.6, 0.95]),
    )
    return replace(
        m,
        train_steps=pick([None, None, 0, 625]),
        shared_memory=pick([None, False, True]),
        param_dtypes=pick([(), ("float32",), ("float32",), ("bfloat16",), ("float32", "float16")]),
        autocast=pick([None, "off", "off", "bfloat16"]),
        loader_settings=pick([None, LoaderSettings(2, False, None, 32)]),
    )


def random_process(rng: random.Random, i: int, gpu_count: int):
    pick = rng.choice
    role = pick(["main", "rank", "rank", "dataloader-worker", None]) if i else pick(["main", "rank"])
    rows = [
        ProcGpu(rng.randrange(max(gpu_count, 1) + 1), pick([None, 0.0, 900.0]), pick([None, 0, 3, 70]))
        for _ in range(pick([0, 0, 1, 1, 2]))
    ]
    return proc(
        100 + i,
        runtime=pick(RUNTIMES),
        models=[random_model(rng, i) for _ in range(pick([0, 0, 1, 1, 1, 2, 3]))],
        gpu=rows,
        role=role,
        is_target=i == 0 and rng.random() > 0.05,
        ppid=pick([None, 100, 101]) if i else None,
        local_rank=pick([None, 0, 1, i]),
        mp_child=pick([False, True]),
        mp_helper=rng.random() < 0.1,
        probe_unreadable=rng.random() < 0.05,
        probe_error=pick([None, "bad header"]),
        publish_failure=pick([None] * 9 + ["too large"]),
        cuda_memory_mib=pick([None, 0.0, 512.0]),
        collected_models=pick([(), ("Old",)]),
        steps=pick([None, StepBreakdown(10.0, pick([2, 20]), 0.5, pick([None, 0.2, 0.7]), 0.1)]),
        math=pick(
            [
                None,
                MathSettings(False, True, "highest"),
                MathSettings(True, None, "high"),
                MathSettings(None, False, None),
            ]
        ),
        syncs_per_step=pick([None, None, 2.0, 40.0]),
    )


def random_facts(seed: int) -> Facts:
    rng = random.Random(seed)
    pick = rng.choice
    gpu_count = pick([0, 1, 1, 2, 4])
    gpus = [random_gpu(rng, i) for i in range(gpu_count)]
    if gpus and rng.random() < 0.1:
        gpus.append(random_gpu(rng, 0))  # a repeated index
    processes = [random_process(rng, i, gpu_count) for i in range(pick([0, 1, 1, 2, 3, 5, 8]))]
    nvml_ok = rng.random() > 0.15
    recent = random_samples(rng)
    if rng.random() < 0.3:  # an idle GPU while the job works, a few polls long
        recent = tuple(
            RecentSample(
                1000.0 + 1.5 * i, pick([0.0, 1.0]), 500.0 + pick([0, 300]) * i, 10 * i, 0.0, pick([None, i])
            )
            for i in range(pick([3, 9, 82]))
        )
    return Facts(
        target_pid=processes[0].pid if processes else 100,
        target_alive=rng.random() > 0.1,
        processes=tuple(processes),
        nvml_ok=nvml_ok,
        nvml_error=None if nvml_ok else pick([None, "NVML library not found"]),
        driver="550.54" if nvml_ok else None,
        cuda_driver=pick(["12.4", "12.2", None]) if nvml_ok else None,
        gpus=tuple(gpus) if nvml_ok else (),
        system_gpus=tuple(
            pick([(), (), (NVIDIA_CARD,), (NVIDIA_CARD, INTEL_CARD), (NVIDIA_CARD, NVIDIA_CARD)])
        ),
        pid_namespace_suspect=rng.random() < 0.05,
        stopped=pick([(), (), ((100, 3.0),), ((101, 7.5), (102, 1.0))]),
        recent=recent,
        rules=random_rules(rng),
    )


def all_cases() -> list[tuple[str, Facts]]:
    cases = [(f"table: {c[0]}", c[1]) for c in CASES]
    cases += [(f"efficiency: {c[0]}", c[1]) for c in EFFICIENCY_CASES]
    cases += [(f"random {seed}", random_facts(seed)) for seed in range(RANDOM_FACTS)]
    return cases


def digest(f: Facts) -> str:
    kind, got = outcome(decide, f)
    text = repr(got) if kind == "value" else f"raises {got.__name__}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def test_decide_gives_the_verdicts_it_gave():
    """Each case of the digests file, as the verdict gave it when the file was frozen. A table case
    added since is not in the file (regenerating adds it); an edited one says so by its digest."""
    want = json.loads(DIGESTS.read_text())
    cases = [(name, f) for name, f in all_cases() if name in want]
    assert sum(name.startswith("random ") for name, _ in cases) == RANDOM_FACTS
    changed = [name for name, f in cases if digest(f) != want[name]]
    assert not changed, (
        f"{len(changed)} of {len(cases)} verdicts changed, e.g. {changed[:5]} "
        "(a change meant to change verdicts regenerates the digests: see this module's docstring)"
    )


def test_random_facts_reach_the_rules():
    """The random facts make most warnings and every status at least once."""
    codes, statuses = set(), set()
    for _, f in all_cases():
        kind, v = outcome(decide, f)
        if kind == "raises":
            continue  # a NaN time: see outcome
        statuses.add(v.status)
        codes.update(w.code for w in v.warnings)
    assert statuses == {"GPU", "CPU", "MIXED", "UNKNOWN"}
    expected = {
        "idle-gpu", "memory-growth", "throttled", "pcie-degraded", "hollow-utilisation", "no-tensor-cores",
        "data-starved", "host-syncs", "mig-no-process-util", "rank-shared-gpu", "rank-device-mismatch",
        "input-mismatch", "mixed-devices", "model-on-cpu", "worker-cuda", "no-parameters",
    }  # fmt: skip
    assert expected <= codes, expected - codes


if __name__ == "__main__" and "--regenerate" in sys.argv:
    DIGESTS.write_text(json.dumps({name: digest(f) for name, f in all_cases()}, indent=0) + "\n")
    print(f"{DIGESTS}: {len(all_cases())} verdicts")
    source = Path(__file__).read_text()
    frozen = f'WINDOWS_DIGEST = "{WINDOWS_DIGEST}"'
    assert source.count(frozen) == 1, frozen
    Path(__file__).write_text(source.replace(frozen, f'WINDOWS_DIGEST = "{windows_digest()}"'))
    print(f"{__file__}: WINDOWS_DIGEST")
