"""Two runs compared (sidecar/verdict/compare.py): RunDetails built from synthetic minute figures that
model issue 40's scenarios, each judged as the issue says it must be, and properties that hold of
every comparison, whatever the runs:

- scenarios: num_workers 4 -> 0 is a REGRESSION caused by the data wait, the loader setting named;
  two seeds of one run are WITHIN NOISE (twenty pairs of them); clocks that drop with a thermal
  reason are a REGRESSION caused by a throttled GPU (clocks that drop at the power cap alone: lower
  clocks, not throttled); fp32 -> autocast bf16 is an IMPROVEMENT, the precision named; another
  GPU and torch named, most specific first; more processes on the GPU named as such (against the
  slower run only); a setting named only for the parts it can act on; a part that moved the other
  way explains nothing; a breakdown that counts twice scaled to the step; the warm-up minute left
  out; two steady minutes never judged; the same run, or one without steps, not comparable;
- the noise band is k standard errors of the difference of the means, computed here with
  `statistics` from the per-minute values, and merged rows (with their sums of squares) give the
  band their minutes give;
- properties: swapping the runs swaps IMPROVEMENT and REGRESSION (also at the floor's edge, where a
  floor of one run only would not); identical runs are WITHIN NOISE; causes only with a change,
  shares in [0, 1] summing to 1 at most, ranked, and so the reasons' shares; evidence under the
  minimum never gives a verdict; every text renders completely in English and Chinese.

A run here is a step made of phases (seconds each); a minute's step rate is 1 / (its step time) times
a noise draw of the run's own spread, its breakdown the phases' shares, its GPU busy while the step
does not wait for data.
"""

from __future__ import annotations

import math
import random
import re
import statistics
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.common.catalogue import Ref, load, placeholders, render
from sidecar.common.runs import MinuteFigures, RunDetail, RunIdentity, RunRecord, RunSetup, RunTotals
from sidecar.verdict.compare import (
    NOTE_COMMAND,
    NOTE_GPU_COUNT,
    NOTE_NO_STEPS,
    NOTE_SAME_RUN,
    OUTCOME_IMPROVEMENT,
    OUTCOME_NOT_COMPARABLE,
    OUTCOME_NOT_ENOUGH_EVIDENCE,
    OUTCOME_REGRESSION,
    OUTCOME_WITHIN_NOISE,
    Comparison,
    comparability,
    compare_runs,
    steady_minutes,
)
from sidecar.verdict.compare_reasons import (
    PHASE_BACKWARD,
    PHASE_DATA_WAIT,
    PHASE_FORWARD,
    REASON_CLOCKS,
    REASON_GPU_MODEL,
    REASON_GPU_SHARED,
    REASON_LOADER_SETTINGS,
    REASON_PRECISION,
    REASON_THROTTLED,
    REASON_TORCH_VERSION,
)
from sidecar.verdict.efficiency import THROTTLE_REASONS
from sidecar.verdict.facts import Rules
from tests.helpers.hypothesis_profiles import examples

RULES = Rules()
A100 = "NVIDIA A100-SXM4-80GB"
SETUP = RunSetup(
    torch_version="2.13.0",
    torch_cuda="12.8",
    driver_version="580.65.06",
    gpu_models=(A100,),
    precision="float32",
    loader=(("num_workers", "4"), ("pin_memory", "True")),
    processes=1,
)
# Seconds per step of each phase: a model whose step is 0.2 s, 5 % of it waiting for data.
STEP = {"data": 0.010, "forward": 0.060, "backward": 0.090, "optimizer": 0.030, "other": 0.010}
GPU_PHASES = ("forward", "backward", "optimizer")
START = 1_800_000_000.0  # a multiple of 60, as the ledger's minutes start


def minute(
    i: int,
    phases: dict[str, float],
    noise: float = 1.0,
    *,
    clock: float = 1980.0,
    reasons: tuple[str, ...] = (),
    processes: int = 1,
) -> MinuteFigures:
    step_s = sum(phases.values())
    rate = noise / step_s
    return MinuteFigures(
        start_unix_s=START + 60 * i,
        polls=60,
        steps=round(rate * 60),
        step_rate_hz=rate,
        data_wait_fraction=phases["data"] / step_s,
        forward_fraction=phases["forward"] / step_s,
        backward_fraction=phases["backward"] / step_s,
        optimizer_fraction=phases["optimizer"] / step_s,
        # the probe's other share holds the backward (its backward_fraction is a part of it)
        other_fraction=(phases["other"] + phases["backward"]) / step_s,
        syncs_per_step=1.0,
        sm_clock_mhz=clock,
        sm_clock_max_mhz=1980.0,
        clock_reasons=reasons,
        gpu_processes=processes,
        gpu_held_s=60.0,
        gpu_busy_s=60.0 * min(1.0, (1 - phases["data"] / step_s) * noise),
    )


def detail(
    key: str,
    minutes: list[MinuteFigures] | tuple[MinuteFigures, ...],
    setup: RunSetup = SETUP,
    command: tuple[str, ...] = ("python", "train.py"),
) -> RunDetail:
    identity = RunIdentity(key=f"boot/{key}", job_id=key, host="node1", started_unix_s=START, command=command)
    return RunDetail(RunRecord(identity, setup=setup), minutes=tuple(minutes))


def run(
    key: str,
    phases: dict[str, float] = STEP,
    *,
    seed: int = 0,
    steady: int = 10,
    spread: float = 0.02,
    setup: RunSetup = SETUP,
    clock: float = 1980.0,
    reasons: tuple[str, ...] = (),
    processes: int = 1,
) -> RunDetail:
    """A run: its warm-up minute (a quarter of the rate) and `steady` minutes of `spread` noise."""
    rng = random.Random(seed)
    noises = [0.25, *(rng.gauss(1.0, spread) for _ in range(steady))]
    rows = [
        minute(i, phases, noise, clock=clock, reasons=reasons, processes=processes)
        for i, noise in enumerate(noises)
    ]
    return detail(key, rows, setup)


def scaled(phases: dict[str, float], factor: float, names: tuple[str, ...]) -> dict[str, float]:
    return {name: s * factor if name in names else s for name, s in phases.items()}


def rescaled(minutes: list[MinuteFigures] | tuple[MinuteFigures, ...], factor: float) -> list[MinuteFigures]:
    return [
        m
        if m.step_rate_hz is None
        else replace(
            m,
            step_rate_hz=m.step_rate_hz * factor,
            step_rate_sq_hz2=None if m.step_rate_sq_hz2 is None else m.step_rate_sq_hz2 * factor * factor,
        )
        for m in minutes
    ]


# Scales of a run's rates: about the floor, and between 1 + floor and 1 / (1 - floor), where a floor
# taken of one of the two runs (not of the larger) would judge a and b unlike b and a.
_BETWEEN = (1 + RULES.compare_noise_floor + 1 / (1 - RULES.compare_noise_floor)) / 2
FACTORS = (0.5, 0.98, 1.0, 1.02, 2.0, _BETWEEN, 1 / _BETWEEN)


MIRROR = {
    OUTCOME_IMPROVEMENT: OUTCOME_REGRESSION,
    OUTCOME_REGRESSION: OUTCOME_IMPROVEMENT,
    OUTCOME_WITHIN_NOISE: OUTCOME_WITHIN_NOISE,
    OUTCOME_NOT_ENOUGH_EVIDENCE: OUTCOME_NOT_ENOUGH_EVIDENCE,
}


UNFILLED = re.compile(r"\{\w+\}")


def texts(c: Comparison) -> list[Ref]:
    found = [c.text, c.throughput.text, c.gpu_busy.text, *(n.text for n in c.comparability.notes)]
    for cause in c.causes:
        found += [cause.text, *(r.text for r in cause.reasons)]
    return found + [r.text for r in c.reasons]


def assert_renders(c: Comparison) -> None:
    for text in texts(c):
        for lang in ("en", "zh"):
            assert text.id in load(lang), text.id
            assert placeholders(load("en")[text.id]) <= set(text.params), (text.id, text.params)
            rendered = render(text, lang)
            assert rendered and not UNFILLED.search(rendered), rendered


# ---------------------------------------------------------------------------------------------
# Issue 40's scenarios
# ---------------------------------------------------------------------------------------------
def test_num_workers_4_then_0_is_a_regression_from_the_data_wait_with_the_loader_setting_named():
    # The same compute per step; with no workers, loading takes 45 % of the step instead of 5 %.
    compute_s = sum(STEP.values()) - STEP["data"]
    starved = {**STEP, "data": 0.45 * compute_s / 0.55}
    no_workers = replace(SETUP, loader=(("num_workers", "0"), ("pin_memory", "True")))
    c = compare_runs(run("b", starved, seed=2, setup=no_workers), run("a", seed=1))
    assert c.outcome == c.throughput.outcome == OUTCOME_REGRESSION
    assert c.throughput.change is not None and -0.45 < c.throughput.change < -0.38
    assert c.gpu_busy.outcome == OUTCOME_REGRESSION  # the GPU idles while the step waits
    top = c.causes[0]
    assert top.code == PHASE_DATA_WAIT and top.share > 0.9
    assert round(top.baseline_fraction, 2) == 0.05 and round(top.run_fraction, 2) == 0.45
    reason = top.reasons[0]
    assert (reason.code, reason.baseline, reason.run) == (
        REASON_LOADER_SETTINGS,
        "num_workers=4",
        "num_workers=0",
    )
    assert "num_workers=4 → num_workers=0" in render(reason.text)
    assert [r.reason for r in c.reasons] == [reason] and c.reasons[0].parts == (PHASE_DATA_WAIT,)
    assert "5% → 45%" in render(top.text)
    assert_renders(c)


def test_two_seeds_of_one_run_are_within_noise():
    for pair in range(20):
        a = run("a", seed=2 * pair, spread=0.03)
        b = run("b", seed=2 * pair + 1, spread=0.03)
        c = compare_runs(a, b)
        assert c.throughput.outcome == OUTCOME_WITHIN_NOISE, (pair, c.throughput)
        assert c.gpu_busy.outcome == OUTCOME_WITHIN_NOISE, (pair, c.gpu_busy)
        assert c.causes == ()


def test_a_ten_percent_slower_run_with_the_same_spread_is_a_regression():
    # The band is not so wide that a real change hides in it: 10 % over ten minutes of 3 % spread.
    c = compare_runs(
        run("a", scaled(STEP, 1.1, tuple(STEP)), seed=3, spread=0.03), run("b", seed=4, spread=0.03)
    )
    assert c.throughput.outcome == OUTCOME_REGRESSION


def test_clocks_dropping_with_a_thermal_reason_is_a_regression_caused_by_a_throttled_gpu():
    hot = scaled(STEP, 1980 / 1400, GPU_PHASES)  # the GPU phases run at the clock
    # pin_memory changed too: a loader setting, named for the data wait only, so not here.
    pinned = replace(SETUP, loader=(("num_workers", "4"), ("pin_memory", "False")))
    throttled = run("a", hot, seed=5, setup=pinned, clock=1400.0, reasons=("hw_thermal_slowdown",))
    c = compare_runs(throttled, run("b", seed=6))
    assert c.outcome == OUTCOME_REGRESSION
    top = c.causes[0]
    assert top.code in (PHASE_FORWARD, PHASE_BACKWARD)
    forward = next(cause for cause in c.causes if cause.code == PHASE_FORWARD)
    assert forward.run_fraction > forward.baseline_fraction  # the forward's share of the step rose
    reason = top.reasons[0]
    assert (reason.code, reason.baseline, reason.run) == (REASON_THROTTLED, "1980 MHz", "1400 MHz")
    assert reason.detail == "hw_thermal_slowdown" and reason.detail in THROTTLE_REASONS
    assert "hardware thermal slowdown" in render(reason.text)
    assert "硬件温控降频" in render(reason.text, "zh")
    assert not any(cause.code == PHASE_DATA_WAIT for cause in c.causes)  # the data wait did not grow
    assert all([r.code for r in cause.reasons] == [REASON_THROTTLED] for cause in c.causes)
    # Throttling is behind every part that slowed: it explains the difference (but for the noise's).
    assert [r.reason.code for r in c.reasons] == [REASON_THROTTLED] and c.reasons[0].share > 0.95
    assert render(c.reasons[0].text).startswith("100% of the difference: GPU throttled")
    assert_renders(c)


def test_the_backward_is_the_part_of_the_breakdown_s_other_share_it_says():
    # The probe's other_fraction holds its backward_fraction (minute() records them so): a slower
    # backward is the backward's difference, not the other part's too (each once, in seconds).
    c = compare_runs(
        run("a", scaled(STEP, 2.0, ("backward",)), seed=25, spread=0.0), run("b", seed=26, spread=0.0)
    )
    assert c.outcome == OUTCOME_REGRESSION
    assert [cause.code for cause in c.causes] == [PHASE_BACKWARD] and math.isclose(c.causes[0].share, 1.0)
    (backward,) = c.causes
    assert math.isclose(backward.baseline_s, STEP["backward"]) and math.isclose(
        backward.run_s, 2 * STEP["backward"]
    )
    assert math.isclose(backward.baseline_fraction, STEP["backward"] / sum(STEP.values()))


def test_a_breakdown_that_counts_twice_is_scaled_to_the_step():
    # Shares summing over 1 (phases that overlap) are scaled to sum to 1: a breakdown whose every
    # share is doubled gives the seconds per step of one that is not.
    slow, fast = run("a", scaled(STEP, 1.5, GPU_PHASES), seed=23), run("b", seed=24)
    names = (
        "data_wait_fraction",
        "forward_fraction",
        "backward_fraction",
        "optimizer_fraction",
        "other_fraction",
    )

    def doubled(d: RunDetail) -> RunDetail:
        return replace(
            d, minutes=tuple(replace(m, **{n: 2 * getattr(m, n) for n in names}) for m in d.minutes)
        )

    plain, twice = compare_runs(slow, fast), compare_runs(doubled(slow), doubled(fast))
    assert [c.code for c in twice.causes] == [c.code for c in plain.causes] and plain.causes
    for p, t in zip(plain.causes, twice.causes):
        assert math.isclose(t.run_s, p.run_s) and math.isclose(t.baseline_s, p.baseline_s)
        assert math.isclose(t.share, p.share)


def test_clocks_lower_at_the_power_cap_alone_are_lower_clocks_not_throttling():
    slow = run("a", scaled(STEP, 1980 / 1600, GPU_PHASES), seed=7, clock=1600.0, reasons=("sw_power_cap",))
    c = compare_runs(slow, run("b", seed=8))
    assert c.outcome == OUTCOME_REGRESSION
    assert [r.code for r in c.causes[0].reasons] == [REASON_CLOCKS]


def test_fp32_then_autocast_bf16_is_an_improvement_with_the_precision_named():
    bf16 = replace(SETUP, precision="autocast bfloat16")
    fast = run("a", scaled(STEP, 1 / 2.5, ("forward", "backward")), seed=9, setup=bf16)
    c = compare_runs(fast, run("b", seed=10))
    assert c.outcome == OUTCOME_IMPROVEMENT
    assert c.throughput.change is not None and c.throughput.change > 0.5
    assert {cause.code for cause in c.causes[:2]} == {PHASE_FORWARD, PHASE_BACKWARD}
    for cause in c.causes[:2]:
        assert cause.run_s < cause.baseline_s
        reason = cause.reasons[0]
        assert (reason.code, reason.baseline, reason.run) == (
            REASON_PRECISION,
            "float32",
            "autocast bfloat16",
        )
    # Swapped, the same facts make a regression with the same precision named.
    back = compare_runs(run("b", seed=10), fast)
    assert back.outcome == OUTCOME_REGRESSION
    assert back.causes[0].reasons[0].code == REASON_PRECISION
    assert (back.causes[0].reasons[0].baseline, back.causes[0].reasons[0].run) == (
        "autocast bfloat16",
        "float32",
    )
    assert_renders(c)


def test_a_part_that_moved_the_other_way_explains_nothing():
    # bf16 and no workers at once: the forward and backward got faster, the data wait grew more.
    both = replace(
        SETUP, precision="autocast bfloat16", loader=(("num_workers", "0"), ("pin_memory", "True"))
    )
    phases = {**scaled(STEP, 1 / 2, ("forward", "backward")), "data": 0.2}
    c = compare_runs(run("a", phases, seed=21, setup=both), run("b", seed=22))
    assert c.outcome == OUTCOME_REGRESSION
    assert [cause.code for cause in c.causes] == [PHASE_DATA_WAIT]
    assert 0.95 < c.causes[0].share <= 1  # not the 165 % the data wait is of the net difference
    assert [r.code for r in c.causes[0].reasons] == [
        REASON_LOADER_SETTINGS
    ]  # precision acts on the GPU phases


def test_another_gpu_and_torch_are_named_most_specific_first():
    v100 = replace(SETUP, gpu_models=("Tesla V100-SXM2-32GB",), torch_version="2.12.1")
    c = compare_runs(run("a", scaled(STEP, 2.0, GPU_PHASES), seed=25, setup=v100), run("b", seed=26))
    assert c.outcome == OUTCOME_REGRESSION
    for cause in c.causes:
        assert [(r.code, r.baseline, r.run) for r in cause.reasons] == [
            (REASON_GPU_MODEL, A100, "Tesla V100-SXM2-32GB"),
            (REASON_TORCH_VERSION, "2.13.0", "2.12.1"),
        ]
    assert [r.reason.code for r in c.reasons] == [REASON_GPU_MODEL, REASON_TORCH_VERSION]
    eight = replace(SETUP, gpu_models=(A100,) * 8)
    c = compare_runs(run("a", scaled(STEP, 2.0, GPU_PHASES), seed=25, setup=eight), run("b", seed=26))
    assert c.causes[0].reasons[0].run == f"8 × {A100}"
    assert [n.code for n in c.comparability.notes] == [NOTE_GPU_COUNT]


def test_more_processes_on_the_gpu_are_named_for_a_slower_forward():
    crowded = run("a", scaled(STEP, 1.5, GPU_PHASES), seed=11, processes=3)
    c = compare_runs(crowded, run("b", seed=12))
    assert c.outcome == OUTCOME_REGRESSION
    reason = c.causes[0].reasons[0]
    assert (reason.code, reason.baseline, reason.run) == (REASON_GPU_SHARED, "1", "3")
    # The faster run's extra processes explain nothing of the slower's slowdown.
    c = compare_runs(run("a", scaled(STEP, 1.5, GPU_PHASES), seed=11), run("b", seed=12, processes=3))
    assert all(r.code != REASON_GPU_SHARED for cause in c.causes for r in cause.reasons)


def test_swapped_runs_about_the_floor_swap_their_outcomes():
    # Runs of no spread, whose band is the floor, one scaled between 1 + floor and 1 / (1 - floor)
    # from the other: a floor taken of one run only (not of the larger) would judge them unalike.
    b = run("b", spread=0.0)
    for factor, outcome in (
        (_BETWEEN, OUTCOME_WITHIN_NOISE),
        (1 / _BETWEEN, OUTCOME_WITHIN_NOISE),
        (1.5, OUTCOME_IMPROVEMENT),
        (1 / 1.5, OUTCOME_REGRESSION),
    ):
        a = detail("a", rescaled(b.minutes, factor))
        ab, ba = compare_runs(a, b), compare_runs(b, a)
        assert (ab.throughput.outcome, ba.throughput.outcome) == (outcome, MIRROR[outcome]), factor


def test_the_warm_up_minute_is_left_out():
    a, b = run("a", seed=13), run("b", seed=14)
    cold = list(a.minutes)
    cold[0] = minute(0, STEP, 0.01)  # a first minute at 1 % of the rate: compile, autotune
    late = [
        MinuteFigures(start_unix_s=START - 120, polls=30),
        MinuteFigures(start_unix_s=START - 60, polls=60),
    ]
    slow_start = detail("a", [*late, *cold])
    assert steady_minutes(slow_start.minutes) == tuple(cold[1:])  # rows before the first steps go too
    c = compare_runs(slow_start, b)
    assert c.throughput.outcome == OUTCOME_WITHIN_NOISE
    steady_rates = [m.step_rate_hz for m in cold[1:]]
    assert c.throughput.run is not None
    assert math.isclose(
        c.throughput.run, statistics.fmean(r for r in steady_rates if r is not None), rel_tol=1e-12
    )
    assert c.throughput.minutes == (10, 10)


def test_two_steady_minutes_never_judge_even_a_halved_rate():
    c = compare_runs(run("a", scaled(STEP, 2.0, tuple(STEP)), steady=2), run("b", steady=30))
    assert c.throughput.outcome == OUTCOME_NOT_ENOUGH_EVIDENCE
    assert c.gpu_busy.outcome == OUTCOME_NOT_ENOUGH_EVIDENCE
    assert c.causes == () and c.throughput.minutes == (30, 2)
    assert "2" in render(c.text) and "3" in render(c.text)
    assert_renders(c)


# ---------------------------------------------------------------------------------------------
# The noise band
# ---------------------------------------------------------------------------------------------
def test_the_band_is_k_standard_errors_of_the_difference_with_a_floor():
    a, b = run("a", seed=15, steady=6, spread=0.05), run("b", seed=16, steady=9, spread=0.05)
    rates_a = [m.step_rate_hz or 0.0 for m in a.minutes[1:]]
    rates_b = [m.step_rate_hz or 0.0 for m in b.minutes[1:]]
    se = math.sqrt(statistics.variance(rates_a) / 6 + statistics.variance(rates_b) / 9)
    c = compare_runs(a, b)
    expected = max(
        RULES.compare_noise_k * se, RULES.compare_noise_floor * max(map(statistics.fmean, (rates_a, rates_b)))
    )
    assert c.throughput.band is not None and c.throughput.baseline is not None
    assert math.isclose(c.throughput.band * c.throughput.baseline, expected, rel_tol=1e-9)
    assert RULES.compare_noise_k * se > RULES.compare_noise_floor * statistics.fmean(rates_b)  # not the floor
    # A spread of nothing: the floor.
    flat = compare_runs(run("a", spread=0.0), run("b", spread=0.0))
    assert flat.throughput.band is not None and math.isclose(flat.throughput.band, RULES.compare_noise_floor)


def merged(rows: tuple[MinuteFigures, ...], size: int) -> list[MinuteFigures]:
    """The rows downsampled `size` minutes to a row, as the ledger merges them (sum of squares kept)."""
    out = []
    for i in range(0, len(rows), size):
        group = rows[i : i + size]
        rates = [m.step_rate_hz or 0.0 for m in group]
        out.append(
            replace(
                group[0],
                span_s=60.0 * len(group),
                minutes=len(group),
                polls=sum(m.polls for m in group),
                step_rate_hz=statistics.fmean(rates),
                step_rate_sq_hz2=sum(r * r for r in rates),
                gpu_held_s=sum(m.gpu_held_s for m in group),
                gpu_busy_s=sum(m.gpu_busy_s for m in group),
            )
        )
    return out


def test_merged_rows_with_their_squares_give_the_band_their_minutes_give():
    a, b = run("a", seed=17, steady=12, spread=0.04), run("b", seed=18, steady=12, spread=0.04)
    fine = compare_runs(a, b)
    coarse = compare_runs(detail("a", [a.minutes[0], *merged(a.minutes[1:], 3)]), b)
    assert coarse.throughput.minutes == fine.throughput.minutes == (12, 12)
    assert coarse.throughput.run is not None and fine.throughput.run is not None
    assert math.isclose(coarse.throughput.run, fine.throughput.run, rel_tol=1e-12)
    assert coarse.throughput.band is not None and fine.throughput.band is not None
    assert math.isclose(coarse.throughput.band, fine.throughput.band, rel_tol=1e-9)
    # Without the squares the spread is measured between the rows: still judged, a band of its own.
    no_squares = [replace(m, step_rate_sq_hz2=None) for m in merged(a.minutes[1:], 3)]
    rough = compare_runs(detail("a", [a.minutes[0], *no_squares]), b)
    assert rough.throughput.outcome != OUTCOME_NOT_ENOUGH_EVIDENCE and rough.throughput.band is not None
    # One merged row and no squares: no spread to measure, so no verdict.
    lone = compare_runs(detail("a", [a.minutes[0], replace(no_squares[0], minutes=12)]), b)
    assert lone.throughput.outcome == OUTCOME_NOT_ENOUGH_EVIDENCE


# ---------------------------------------------------------------------------------------------
# Comparability
# ---------------------------------------------------------------------------------------------
def test_comparability():
    a, b = run("a", seed=19), run("b", seed=20)
    assert comparability(a, b).comparable and comparability(a, b).notes == ()
    itself = compare_runs(a, a)
    assert itself.outcome == OUTCOME_NOT_COMPARABLE and itself.causes == ()
    assert [n.code for n in itself.comparability.notes] == [NOTE_SAME_RUN]
    other_args = detail("c", a.minutes, command=("python", "train.py", "--num-workers", "0"))
    fit = comparability(other_args, b)
    assert fit.comparable and [n.code for n in fit.notes] == [NOTE_COMMAND]
    assert "--num-workers 0" in render(fit.notes[0].text)
    # The same run read twice (a live run, minutes apart): still itself, never a cause found.
    later = compare_runs(replace(a, minutes=tuple(rescaled(a.minutes, 0.5))), a)
    assert later.outcome == OUTCOME_NOT_COMPARABLE and later.causes == ()
    idle = detail(
        "d", [MinuteFigures(start_unix_s=START + 60 * i, polls=60, gpu_held_s=60.0) for i in range(5)]
    )
    c = compare_runs(idle, b)
    assert c.outcome == OUTCOME_NOT_COMPARABLE and [n.code for n in c.comparability.notes] == [NOTE_NO_STEPS]
    assert c.throughput.outcome == OUTCOME_NOT_ENOUGH_EVIDENCE
    counted = replace(idle, record=replace(idle.record, totals=RunTotals(steps=100)))
    assert comparability(counted, b).comparable
    assert_renders(c)
    assert_renders(itself)


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------
SETUPS = (
    SETUP,
    replace(SETUP, precision="autocast bfloat16"),
    replace(SETUP, loader=(("num_workers", "0"),)),
    replace(SETUP, gpu_models=("NVIDIA H100 80GB HBM3",) * 2, driver_version="590.1", processes=2),
    RunSetup(),
)
_fraction = st.one_of(st.none(), st.floats(0.0, 1.0))
_rate = st.floats(0.1, 50.0)
# Mostly enough rows to judge (a run needs 3 steady minutes), sometimes too few; mostly polled rows.
# (sampled_from picks by index: one_of would merge its repeated branches.)
_COUNT = st.sampled_from((0, 1, 2, 3, *range(4, 9), *range(4, 9)))
_POLLS = st.sampled_from((0, 1, 30, 60, 60, 60))
_RATE_KINDS = st.sampled_from(("rate",) * 5 + ("none", "zero", "nan"))
_SPECIAL_RATES: dict[str, float | None] = {"none": None, "zero": 0.0, "nan": math.nan}
# What a row shows beside its rate and GPU time: two of these are drawn per run and each row takes
# one (fewer draws per row keep the properties fast; the rows of a run still differ in them).
_looks = st.fixed_dictionaries(
    {
        "data_wait_fraction": _fraction,
        "forward_fraction": _fraction,
        "backward_fraction": _fraction,
        "optimizer_fraction": _fraction,
        "other_fraction": _fraction,
        "syncs_per_step": st.one_of(st.none(), st.floats(0.0, 50.0)),
        "sm_clock_mhz": st.one_of(st.none(), st.floats(300.0, 2000.0)),
        "clock_reasons": st.lists(st.sampled_from((*THROTTLE_REASONS, "sw_power_cap")), max_size=2).map(
            tuple
        ),
        "gpu_processes": st.one_of(st.none(), st.integers(1, 4)),
    }
)


@st.composite
def rows(draw: st.DrawFn, count: st.SearchStrategy[int] = _COUNT) -> list[MinuteFigures]:
    looks = (draw(_looks), draw(_looks))
    out = []
    for i in range(draw(count)):
        kind = draw(_RATE_KINDS)
        rate = draw(_rate) if kind == "rate" else _SPECIAL_RATES[kind]
        minutes = draw(st.sampled_from((1, 1, 1, 3)))
        sq = None
        if rate is not None and minutes > 1 and draw(st.booleans()):
            sq = minutes * rate * rate * (1 + draw(st.floats(0.0, 0.5)))
        held = draw(st.floats(0.0, 60.0 * minutes))
        out.append(
            MinuteFigures(
                start_unix_s=START + 60 * i,
                minutes=minutes,
                polls=draw(_POLLS),
                step_rate_hz=rate,
                step_rate_sq_hz2=sq,
                gpu_held_s=held,
                gpu_busy_s=held * draw(st.floats(0.0, 1.0)),
                **looks[draw(st.integers(0, 1))],
            )
        )
    return out


def flat(minutes: list[MinuteFigures], rate: float) -> list[MinuteFigures]:
    """The rows with every known rate `rate`: a run of no spread, whose band is the floor."""
    return [
        m
        if m.step_rate_hz is None
        else replace(
            m,
            step_rate_hz=rate,
            step_rate_sq_hz2=None if m.step_rate_sq_hz2 is None else m.minutes * rate * rate,
        )
        for m in minutes
    ]


@st.composite
def pairs(draw: st.DrawFn) -> tuple[RunDetail, RunDetail]:
    """Two runs: unrelated, or the second the first with its rates scaled about the noise band (the
    first perhaps flat, so that the floor is the band and the scale falls about it)."""
    base_rows = draw(rows())
    if draw(st.booleans()):
        base_rows = flat(base_rows, draw(_rate))
    b = detail("b", base_rows, draw(st.sampled_from(SETUPS)))
    if draw(st.booleans()):
        return detail("a", draw(rows()), draw(st.sampled_from(SETUPS))), b
    factor = draw(st.one_of(st.sampled_from(FACTORS), st.floats(0.975, 1.025)))
    return detail("a", rescaled(b.minutes, factor), draw(st.sampled_from(SETUPS))), b


@settings(max_examples=examples(100), deadline=None)
@given(pairs())
def test_properties_of_every_comparison(pair):
    a, b = pair
    ab, ba = compare_runs(a, b), compare_runs(b, a)
    # Swapping the runs swaps IMPROVEMENT and REGRESSION, figure by figure.
    for figure in ("throughput", "gpu_busy"):
        assert MIRROR[getattr(ab, figure).outcome] == getattr(ba, figure).outcome, figure
    assert ab.outcome in (ab.throughput.outcome, OUTCOME_NOT_COMPARABLE)
    # Causes only with a change of the throughput; shares in [0, 1], summing to 1 at most, ranked.
    for c in (ab, ba):
        if c.causes:
            assert c.outcome in (OUTCOME_IMPROVEMENT, OUTCOME_REGRESSION)
        shares = [cause.share for cause in c.causes]
        assert all(RULES.compare_min_cause_share <= s <= 1 for s in shares), shares
        assert sum(shares) <= 1 + 1e-9 and shares == sorted(shares, reverse=True)
        explained = [r.share for r in c.reasons]
        assert all(0 < s <= 1 + 1e-9 for s in explained) and explained == sorted(explained, reverse=True)
        assert {r.reason.code for r in c.reasons} == {r.code for cause in c.causes for r in cause.reasons}
        assert len({cause.code for cause in c.causes}) == len(c.causes)
        for figure in (c.throughput, c.gpu_busy):
            if min(figure.minutes) < RULES.compare_min_minutes:
                assert figure.outcome == OUTCOME_NOT_ENOUGH_EVIDENCE
        assert_renders(c)


@settings(max_examples=examples(50), deadline=None)
@given(rows())
def test_identical_runs_are_within_noise(minutes):
    c = compare_runs(detail("a", minutes), detail("b", minutes))
    for figure in (c.throughput, c.gpu_busy):
        assert figure.outcome in (OUTCOME_WITHIN_NOISE, OUTCOME_NOT_ENOUGH_EVIDENCE)
        if figure.outcome == OUTCOME_WITHIN_NOISE:
            assert figure.change in (0.0, None)
    assert c.causes == ()


@settings(max_examples=examples(50), deadline=None)
@given(rows(st.integers(0, RULES.compare_min_minutes)), rows(), st.sampled_from(SETUPS))
def test_too_little_evidence_never_judges(short, other, setup):
    # The first row with steps is the warm-up: at most min_minutes single-minute rows leave fewer
    # steady minutes than a judgement needs (merged rows made single: rows() merges some).
    short = [replace(m, minutes=1, step_rate_sq_hz2=None) for m in short]
    for c in (
        compare_runs(detail("a", short, setup), detail("b", other)),
        compare_runs(detail("b", other), detail("a", short, setup)),
    ):
        assert c.throughput.outcome == OUTCOME_NOT_ENOUGH_EVIDENCE
        assert c.gpu_busy.outcome == OUTCOME_NOT_ENOUGH_EVIDENCE
        assert c.causes == ()
