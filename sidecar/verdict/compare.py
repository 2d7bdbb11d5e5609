"""Two runs compared (issue 40): is the run judged faster or slower than its baseline, beyond the
noise of the two runs themselves, and where does the difference come from. Facts in, verdict out:
`compare_runs(run, baseline)` takes the ledger's `RunDetail`s (sidecar/common/runs.py) and reads
nothing else; which run is the baseline (`previous_run`) is the ledger's to answer.

Steady minutes. Every figure is measured over the run's steady minutes: its minute rows after the
warm-up, which is the first row in which the run counted steps (and any row before it: the model
loading, the probe not yet registered). The first minute and not the first N steps: the ledger keeps
minutes, not steps, so N steps would be rounded to whole rows anyway, and the right N depends on the
job (seconds of steps for a small model, minutes for a large one). The first minute is where the
first steps are slow (CUDA context, cuDNN autotuning, torch.compile, DataLoader workers starting and
filling their prefetch queue), and it is partial besides (the run starts within it). A merged row
(older minutes downsampled) that holds that first minute is dropped whole: the warm-up is in it.
Rows without the figure are left out of that figure.

The figures, each a mean over the steady rows: the throughput (steps/s) and the step breakdown
(data wait, forward, backward, optimizer and other shares of the step) are means over the polls that
had them (a row weighs its polls: a partial minute counts for what it saw); the GPU busy share is the
busy GPU-seconds over the held GPU-seconds. Higher is better for both.

Noise: each run's own minute-to-minute spread. The per-minute values give each run's variance s² (a
merged row brings its minutes' sum of squares, `step_rate_sq_hz2`; where a merged row has none, and
for the busy share, whose rows keep no squares, s² is the spread of the rows' means about the run's
mean weighted by their minutes over (rows - 1), the estimator of a per-minute variance from means of
groups of known sizes), and its standard error s/√n over its n steady minutes. The band is
k = `compare_noise_k` (3) standard errors of the difference of the two means, √(se_run² + se_base²),
and never under `compare_noise_floor` (2 %) of the larger of the two values. k = 3 and not 2:
minutes are not independent (a run drifts with its GPU's temperature, with batches that grow),
which makes s/√n too small, and the runs are short: with 3 to 10 steady minutes each, the
difference has 4 to 18 degrees of freedom, whose t distribution puts its two-sided 95 % point at
2.8 to 2.1 standard errors and its 99 % point at 4.6 to 2.9. At 3, two runs that differ only by
their seed read WITHIN NOISE but about 1 time in 130 with ten minutes each (1 in 25 with three
each: the minimum is a minimum), while a 10 % change over ten minutes of 3 % spread (3 standard
errors: 4 %) still shows. The floor: two runs differ by more than their own spread says (boost
clocks, the host's other load, the order of the data), and a 1 % change is not worth a REGRESSION.
The difference is |run - baseline| and the floor is taken of the larger value, so compare(a, b)
says IMPROVEMENT exactly when compare(b, a) says REGRESSION.

Not enough evidence: fewer than `compare_min_minutes` (3) steady minutes with the figure in either
run, or a spread that cannot be measured (one merged row), answers NOT ENOUGH EVIDENCE, never a
verdict on evidence that cannot carry it.

Causes: the step time is 1 / steps per second; each phase's share of the step times the step time
is its seconds per step in each run, and the differences of those explain the difference of the
step times. The backward is a part of the breakdown's other share (the probe times it apart within
the time between optimizer steps): the part `other` is the rest of that share. The part of the
step the breakdown does not cover (a phase unknown in one run, shares summing under 1; shares
summing over 1 are scaled to 1) is the part `whole-step`. The parts that
moved the way the step time did are the causes, each with its difference over the sum of theirs as
its share: shares lie in [0, 1] and sum to 1 with the parts that moved the other way left out (a
forward that got faster while the data wait grew more does not explain a slowdown). Ranked by
share; a part under `compare_min_cause_share` is not named; causes are given only with an
IMPROVEMENT or a REGRESSION of the throughput.

A cause is attributed further to the reasons the two runs show for it (compare_reasons.py): the
DataLoader settings changed (data wait); the slower run's GPU throttled with a hardware reason, or
its clocks lower, another GPU model, another precision, more processes on its GPUs (the GPU phases);
more host syncs per step; another torch or driver version. `Comparison.reasons` ranks the reasons by
the shares of the causes each is named for (thermal throttling behind a slower forward, backward
and optimizer step explains all three's shares).

Codes: a cause's code is the part of the step (data-wait, forward, backward, optimizer, other,
whole-step), its reasons' codes say why (throttled, clocks, gpu-model, precision, gpu-shared,
host-syncs, loader-settings, torch-version, driver-version): one vocabulary, two levels, so that a
reader sees both where the time went and what the runs show of why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sidecar.common.catalogue import Ref, ref
from sidecar.common.runs import MinuteFigures, RunDetail, RunSetup
from sidecar.verdict.compare_reasons import (
    PHASE_BACKWARD,
    PHASE_DATA_WAIT,
    PHASE_FORWARD,
    PHASE_OPTIMIZER,
    PHASE_OTHER,
    PHASE_WHOLE_STEP,
    REASONS,
    Reason,
    Side,
    reasons_for,
)
from sidecar.verdict.facts import Rules

__all__ = [
    "FIGURES",
    "FIGURE_GPU_BUSY",
    "FIGURE_THROUGHPUT",
    "NOTE_COMMAND",
    "NOTE_GPU_COUNT",
    "NOTE_HOST",
    "NOTE_NO_STEPS",
    "NOTE_SAME_RUN",
    "NOTE_WORLD_SIZE",
    "OUTCOMES",
    "OUTCOME_IMPROVEMENT",
    "OUTCOME_NOT_COMPARABLE",
    "OUTCOME_NOT_ENOUGH_EVIDENCE",
    "OUTCOME_REGRESSION",
    "OUTCOME_WITHIN_NOISE",
    "PARTS",
    "Cause",
    "Comparability",
    "Comparison",
    "FigureChange",
    "Note",
    "Reason",
    "ReasonShare",
    "comparability",
    "compare_runs",
    "steady_minutes",
]

OUTCOME_IMPROVEMENT = "improvement"
OUTCOME_REGRESSION = "regression"
OUTCOME_WITHIN_NOISE = "within-noise"
OUTCOME_NOT_ENOUGH_EVIDENCE = "not-enough-evidence"
OUTCOME_NOT_COMPARABLE = "not-comparable"  # a comparison's only: the runs cannot be compared at all
OUTCOMES = (
    OUTCOME_IMPROVEMENT,
    OUTCOME_REGRESSION,
    OUTCOME_WITHIN_NOISE,
    OUTCOME_NOT_ENOUGH_EVIDENCE,
    OUTCOME_NOT_COMPARABLE,
)
_OUTCOME_TEXT = {
    OUTCOME_IMPROVEMENT: "compare.outcome.improvement",
    OUTCOME_REGRESSION: "compare.outcome.regression",
    OUTCOME_WITHIN_NOISE: "compare.outcome.within-noise",
}

FIGURE_THROUGHPUT = "throughput"  # training steps per second
FIGURE_GPU_BUSY = "gpu-busy"  # GPU-seconds held with work over GPU-seconds held, 0-1
FIGURES = (FIGURE_THROUGHPUT, FIGURE_GPU_BUSY)
_FIGURE_WORD = {FIGURE_THROUGHPUT: "compare.figure.throughput", FIGURE_GPU_BUSY: "compare.figure.gpu-busy"}

# The parts of the step, in the breakdown's order, with the minute figure of each phase's share.
_PHASE_FRACTIONS: tuple[tuple[str, Callable[[MinuteFigures], float | None]], ...] = (
    (PHASE_DATA_WAIT, lambda m: m.data_wait_fraction),
    (PHASE_FORWARD, lambda m: m.forward_fraction),
    (PHASE_BACKWARD, lambda m: m.backward_fraction),
    (PHASE_OPTIMIZER, lambda m: m.optimizer_fraction),
    (PHASE_OTHER, lambda m: m.other_fraction),
)
PARTS = (*(code for code, _ in _PHASE_FRACTIONS), PHASE_WHOLE_STEP)
_PART_TEXT = {
    PHASE_DATA_WAIT: "compare.cause.data-wait",
    PHASE_FORWARD: "compare.cause.forward",
    PHASE_BACKWARD: "compare.cause.backward",
    PHASE_OPTIMIZER: "compare.cause.optimizer",
    PHASE_OTHER: "compare.cause.other",
    PHASE_WHOLE_STEP: "compare.cause.whole-step",
}

# What makes two runs incomparable, and what differs between two comparable ones (flagged).
NOTE_SAME_RUN = "same-run"
NOTE_NO_STEPS = "no-steps"
NOTE_COMMAND = "command"
NOTE_HOST = "host"
NOTE_WORLD_SIZE = "world-size"
NOTE_GPU_COUNT = "gpu-count"
_INCOMPARABLE = (NOTE_SAME_RUN, NOTE_NO_STEPS)


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FigureChange:
    """One figure of the two runs judged against the noise."""

    figure: str  # FIGURE_*
    baseline: float | None  # steps/s, or the busy share 0-1; None: the run has no steady minute with it
    run: float | None
    change: float | None  # (run - baseline) / baseline; None where either is unknown or baseline 0
    band: float | None  # the noise band, relative to the baseline like `change` (None likewise)
    minutes: tuple[int, int]  # steady minutes with the figure: (baseline's, run's)
    outcome: str  # OUTCOME_* (never OUTCOME_NOT_COMPARABLE)
    text: Ref


@dataclass(frozen=True, slots=True)
class Cause:
    """A part of the step whose time changed the way the step time did."""

    code: str  # the part: PHASE_* (data-wait, forward, backward, optimizer, other, whole-step)
    share: float  # of the step time's difference this part explains, 0-1
    baseline_s: float  # the part's seconds per step in the baseline
    run_s: float
    baseline_fraction: float  # the part's share of the step in the baseline, 0-1
    run_fraction: float
    reasons: tuple[Reason, ...]  # why, as far as the runs show, most specific first
    text: Ref


@dataclass(frozen=True, slots=True)
class ReasonShare:
    """A reason over every cause it is named for: 'throttled explains 100 % of the difference'."""

    reason: Reason
    share: float  # the sum of those causes' shares, 0-1
    parts: tuple[str, ...]  # those causes' codes, ranked
    text: Ref


@dataclass(frozen=True, slots=True)
class Note:
    code: str  # NOTE_*
    text: Ref


@dataclass(frozen=True, slots=True)
class Comparability:
    comparable: bool
    # Why not (NOTE_SAME_RUN, NOTE_NO_STEPS), or what differs between comparable runs (flags).
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True, slots=True)
class Comparison:
    """`run` judged against `baseline`."""

    run: str  # the run judged: its ledger key
    baseline: str
    outcome: str  # the throughput's outcome, or OUTCOME_NOT_COMPARABLE
    throughput: FigureChange
    gpu_busy: FigureChange
    step_s: tuple[float | None, float | None]  # seconds per step: (baseline's, run's)
    causes: tuple[Cause, ...]  # ranked by share, largest first
    reasons: tuple[ReasonShare, ...]  # the causes' reasons, ranked by the share they explain
    comparability: Comparability
    text: Ref  # the headline: the throughput's text, or why the runs are not comparable


# ---------------------------------------------------------------------------------------------
# Steady minutes and their figures
# ---------------------------------------------------------------------------------------------
def _known(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _rate(m: MinuteFigures) -> float | None:
    """The row's step rate, where it is one (a negative or non-finite one is not)."""
    rate = _known(m.step_rate_hz)
    return rate if rate is not None and rate >= 0 and m.polls > 0 else None


def steady_minutes(minutes: Iterable[MinuteFigures]) -> tuple[MinuteFigures, ...]:
    """The rows a comparison measures, oldest first: those after the first that counted steps (or,
    in a run that never counted any, after its first polled row)."""
    rows = sorted(minutes, key=lambda m: m.start_unix_s)
    first = next((i for i, m in enumerate(rows) if _rate(m) is not None), None)
    if first is None:
        first = next((i for i, m in enumerate(rows) if m.polls > 0), len(rows))
    return tuple(rows[first + 1 :])


def _poll_mean(rows: Sequence[MinuteFigures], get: Callable[[MinuteFigures], float | None]) -> float | None:
    total = polls = 0.0
    for m in rows:
        value = _known(get(m))
        if value is not None and m.polls > 0:
            total += value * m.polls
            polls += m.polls
    return total / polls if polls else None


@dataclass(frozen=True, slots=True)
class _Sample:
    """One row's value of a figure: a mean over `minutes` minutes, with their sum of squares where
    the row kept it (a single minute's is its value squared)."""

    value: float
    minutes: int
    sum_sq: float | None


@dataclass(frozen=True, slots=True)
class _Measure:
    mean: float | None
    minutes: int
    standard_error: float | None  # of the mean; None: the spread cannot be measured


def _standard_error(samples: Sequence[_Sample]) -> float | None:
    """s/√n of the per-minute values (see the module's docstring: Noise)."""
    n = sum(s.minutes for s in samples)
    if n < 2:
        return None
    mean = sum(s.value * s.minutes for s in samples) / n
    if all(s.minutes == 1 or s.sum_sq is not None for s in samples):
        squares = sum(s.value * s.value if s.minutes == 1 else (s.sum_sq or 0.0) for s in samples)
        variance = (squares - n * mean * mean) / (n - 1)
    elif len(samples) >= 2:
        variance = sum(s.minutes * (s.value - mean) ** 2 for s in samples) / (len(samples) - 1)
    else:
        return None
    return math.sqrt(max(0.0, variance) / n)


def _throughput(rows: Sequence[MinuteFigures]) -> _Measure:
    samples = []
    for m in rows:
        rate = _rate(m)
        if rate is not None:
            minutes = max(1, m.minutes)
            samples.append(_Sample(rate, minutes, _known(m.step_rate_sq_hz2) if minutes > 1 else None))
    return _Measure(_poll_mean(rows, _rate), sum(s.minutes for s in samples), _standard_error(samples))


def _busy(rows: Sequence[MinuteFigures]) -> _Measure:
    samples = []
    held = busy = 0.0
    for m in rows:
        if math.isfinite(m.gpu_held_s) and math.isfinite(m.gpu_busy_s) and m.gpu_held_s > 0:
            share = min(1.0, max(0.0, m.gpu_busy_s / m.gpu_held_s))
            samples.append(_Sample(share, max(1, m.minutes), None))
            held += m.gpu_held_s
            busy += min(m.gpu_held_s, max(0.0, m.gpu_busy_s))
    mean = busy / held if held else None
    return _Measure(mean, sum(s.minutes for s in samples), _standard_error(samples))


def _fractions(rows: Sequence[MinuteFigures]) -> dict[str, float]:
    """Each phase's mean share of the step, where known, scaled down to sum to 1 at most. The
    breakdown's other share holds the backward's (the probe's backward_fraction is the part of its
    other_fraction between optimizer steps): the part `other` is what is left of it beside the
    backward."""
    found: dict[str, float] = {}
    for code, get in _PHASE_FRACTIONS:
        value = _poll_mean(rows, get)
        if value is not None:
            found[code] = min(1.0, max(0.0, value))
    if PHASE_OTHER in found and PHASE_BACKWARD in found:
        found[PHASE_OTHER] = max(0.0, found[PHASE_OTHER] - found[PHASE_BACKWARD])
    total = sum(found.values())
    return {code: value / total for code, value in found.items()} if total > 1 else found


def _side(detail: RunDetail) -> tuple[Side, _Measure, _Measure, dict[str, float]]:
    rows = steady_minutes(detail.minutes)
    rate = _throughput(rows)
    reasons: set[str] = set()
    for m in rows:
        reasons.update(m.clock_reasons)
    side = Side(
        setup=detail.record.setup,
        sm_clock_mhz=_poll_mean(rows, lambda m: m.sm_clock_mhz),
        clock_reasons=frozenset(reasons),
        syncs_per_step=_poll_mean(rows, lambda m: m.syncs_per_step),
        gpu_processes=_poll_mean(rows, lambda m: None if m.gpu_processes is None else float(m.gpu_processes)),
    )
    return side, rate, _busy(rows), _fractions(rows)


# ---------------------------------------------------------------------------------------------
# Judging a figure
# ---------------------------------------------------------------------------------------------
def _outcome(base: _Measure, run: _Measure, rules: Rules) -> tuple[str, float | None]:
    """The outcome and the band (in the figure's unit) of `run` against `base`."""
    if (
        base.mean is None
        or run.mean is None
        or base.standard_error is None
        or run.standard_error is None
        or min(base.minutes, run.minutes) < rules.compare_min_minutes
    ):
        return OUTCOME_NOT_ENOUGH_EVIDENCE, None
    band = max(
        rules.compare_noise_floor * max(abs(base.mean), abs(run.mean)),
        # sorted: the same band whichever run is the baseline, to the last bit
        rules.compare_noise_k * math.hypot(*sorted((base.standard_error, run.standard_error))),
    )
    difference = run.mean - base.mean
    if abs(difference) <= band:
        return OUTCOME_WITHIN_NOISE, band
    return (OUTCOME_IMPROVEMENT if difference > 0 else OUTCOME_REGRESSION), band


def _rate_text(hz: float | None) -> Ref | str:
    if hz is None:
        return "?"
    return ref("compare.unit.steps-per-s", value=f"{hz:.0f}" if hz >= 100 else f"{hz:.3g}")


def _share_text(share: float | None) -> str:
    return "?" if share is None else f"{share * 100:.0f}%"


def _judge(figure: str, base: _Measure, run: _Measure, rules: Rules) -> FigureChange:
    outcome, band = _outcome(base, run, rules)
    change = band_rel = None
    if base.mean and run.mean is not None:  # relative to a baseline that is known and not 0
        change = (run.mean - base.mean) / base.mean
        band_rel = None if band is None else band / base.mean
    minutes = (base.minutes, run.minutes)
    word = ref(_FIGURE_WORD[figure])
    if outcome == OUTCOME_NOT_ENOUGH_EVIDENCE:
        text = ref(
            "compare.outcome.not-enough-evidence",
            figure=word,
            baseline_minutes=base.minutes,
            run_minutes=run.minutes,
            min=rules.compare_min_minutes,
        )
    else:
        show = _rate_text if figure == FIGURE_THROUGHPUT else _share_text
        text = ref(
            _OUTCOME_TEXT[outcome],
            figure=word,
            baseline=show(base.mean),
            run=show(run.mean),
            change="?" if change is None else f"{change * 100:+.1f}%",
            band="?" if band_rel is None else f"{band_rel * 100:.1f}%",
        )
    return FigureChange(figure, base.mean, run.mean, change, band_rel, minutes, outcome, text)


# ---------------------------------------------------------------------------------------------
# Causes
# ---------------------------------------------------------------------------------------------
def _parts(fractions: dict[str, float], other: dict[str, float]) -> dict[str, float]:
    """The run's share of the step per part: the phases both runs know, the rest `whole-step`."""
    shares = {code: fractions[code] for code, _ in _PHASE_FRACTIONS if code in fractions and code in other}
    shares[PHASE_WHOLE_STEP] = max(0.0, 1.0 - sum(shares.values()))
    return shares


def _causes(
    base: tuple[Side, float, dict[str, float]], run: tuple[Side, float, dict[str, float]], rules: Rules
) -> tuple[Cause, ...]:
    """The parts of the step that explain the step time's difference, ranked (module docstring)."""
    (base_side, base_step_s, base_fr), (run_side, run_step_s, run_fr) = base, run
    difference_s = run_step_s - base_step_s
    if difference_s == 0:
        return ()
    sign = 1.0 if difference_s > 0 else -1.0
    base_parts, run_parts = _parts(base_fr, run_fr), _parts(run_fr, base_fr)
    moved = {
        code: (run_parts[code] * run_step_s - base_parts[code] * base_step_s) * sign
        for code in PARTS
        if code in run_parts
    }
    gross_s = sum(d for d in moved.values() if d > 0)
    causes = []
    for code, delta_s in moved.items():
        share = delta_s / gross_s if gross_s > 0 else 0.0
        if delta_s <= 0 or share < rules.compare_min_cause_share:
            continue
        b_s, r_s = base_parts[code] * base_step_s, run_parts[code] * run_step_s
        text = ref(
            _PART_TEXT[code],
            baseline=f"{b_s * 1000:.1f} ms",
            run=f"{r_s * 1000:.1f} ms",
            baseline_share=_share_text(base_parts[code]),
            run_share=_share_text(run_parts[code]),
            share=_share_text(share),
        )
        reasons = reasons_for(code, base_side, run_side, slower_is_run=sign > 0, rules=rules)
        causes.append(Cause(code, share, b_s, r_s, base_parts[code], run_parts[code], reasons, text))
    return tuple(sorted(causes, key=lambda c: (-c.share, PARTS.index(c.code))))


# ---------------------------------------------------------------------------------------------
# Comparability and the comparison
# ---------------------------------------------------------------------------------------------
def _counted_steps(detail: RunDetail) -> bool:
    return bool(detail.record.totals.steps) or any(_rate(m) is not None for m in detail.minutes)


def _gpu_count(setup: RunSetup) -> int | None:
    return len(setup.gpu_models) or None


def comparability(run: RunDetail, baseline: RunDetail) -> Comparability:
    """Whether `run` can be compared with `baseline` at all, and what differs between them that a
    reader should know (another command, host, world size, GPU count: comparable, but flagged)."""
    ri, bi = run.record.identity, baseline.record.identity
    notes: list[Note] = []
    if ri.key == bi.key:
        notes.append(Note(NOTE_SAME_RUN, ref("compare.note.same-run", run=ri.job_id)))
    for detail in (run, baseline):
        if not _counted_steps(detail):
            job = detail.record.identity.job_id
            notes.append(Note(NOTE_NO_STEPS, ref("compare.note.no-steps", run=job)))
    differs: tuple[tuple[str, str, object, object], ...] = (
        (NOTE_COMMAND, "compare.note.command", " ".join(ri.command) or None, " ".join(bi.command) or None),
        (NOTE_HOST, "compare.note.host", ri.host or None, bi.host or None),
        (NOTE_WORLD_SIZE, "compare.note.world-size", ri.world_size, bi.world_size),
        (
            NOTE_GPU_COUNT,
            "compare.note.gpu-count",
            _gpu_count(run.record.setup),
            _gpu_count(baseline.record.setup),
        ),
    )
    for code, text_id, mine, theirs in differs:
        if mine is not None and theirs is not None and mine != theirs:
            notes.append(Note(code, ref(text_id, run=str(mine), baseline=str(theirs))))
    comparable = not any(n.code in _INCOMPARABLE for n in notes)
    return Comparability(comparable, tuple(notes))


def compare_runs(run: RunDetail, baseline: RunDetail, rules: Rules | None = None) -> Comparison:
    """`run` judged against `baseline`: throughput and GPU busy share, each IMPROVEMENT,
    REGRESSION, WITHIN NOISE or NOT ENOUGH EVIDENCE, and the causes of a throughput change."""
    rules = rules or Rules()
    base_side, base_rate, base_busy, base_fr = _side(baseline)
    run_side, run_rate, run_busy, run_fr = _side(run)
    throughput = _judge(FIGURE_THROUGHPUT, base_rate, run_rate, rules)
    gpu_busy = _judge(FIGURE_GPU_BUSY, base_busy, run_busy, rules)
    step_s = (_step_s(base_rate.mean), _step_s(run_rate.mean))
    fit = comparability(run, baseline)
    causes: tuple[Cause, ...] = ()
    base_step_s, run_step_s = step_s
    changed = throughput.outcome in (OUTCOME_IMPROVEMENT, OUTCOME_REGRESSION)
    if fit.comparable and changed and base_step_s is not None and run_step_s is not None:
        causes = _causes((base_side, base_step_s, base_fr), (run_side, run_step_s, run_fr), rules)
    outcome, text = throughput.outcome, throughput.text
    if not fit.comparable:
        why = next(n for n in fit.notes if n.code in _INCOMPARABLE)
        outcome, text = OUTCOME_NOT_COMPARABLE, ref("compare.outcome.not-comparable", reason=why.text)
    return Comparison(
        run.record.identity.key,
        baseline.record.identity.key,
        outcome,
        throughput,
        gpu_busy,
        step_s,
        causes,
        _reason_shares(causes),
        fit,
        text,
    )


def _reason_shares(causes: tuple[Cause, ...]) -> tuple[ReasonShare, ...]:
    """Each reason the causes name, with the shares of the causes it is named for summed. A reason
    rests on the two runs alone, never on the part (compare_reasons.py), so it is the same Reason
    wherever it is named and the sum is at most 1."""
    found: dict[str, tuple[Reason, float, tuple[str, ...]]] = {}
    for cause in causes:
        for reason in cause.reasons:
            _, share, parts = found.get(reason.code, (reason, 0.0, ()))
            found[reason.code] = (reason, share + cause.share, (*parts, cause.code))
    ranked = sorted(found.values(), key=lambda f: (-f[1], REASONS.index(f[0].code)))
    return tuple(
        ReasonShare(
            reason, share, parts, ref("compare.reason-share", share=_share_text(share), reason=reason.text)
        )
        for reason, share, parts in ranked
    )


def _step_s(rate_hz: float | None) -> float | None:
    return 1.0 / rate_hz if rate_hz is not None and rate_hz > 0 else None
