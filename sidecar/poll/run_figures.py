"""What the recorder (poll/recorder.py) takes of one poll, and how a minute of a run is added up
from its polls: ``poll_figures`` (the poll's values, in MEAN_FIELDS' order), ``MinuteSums`` (a
minute's sums, peaks and shares, made into a ``MinuteFigures``), and ``run_setup`` (what the run
runs on and with).

A minute's mean of a figure is over the polls that had it (None: no poll had it, never 0). Peaks
are the largest value a poll had. A GPU is held where the job's processes have memory on it, and
busy where it is held and works (verdict.accounting's gpu_works: its utilisation at or above
Rules.idle_util_pct, else GPM's SM activity; neither known, as under MIG: held, not busy). A poll's share of the held and busy GPU-seconds is the time since
the job's previous poll (at most MAX_GAP_POLLS intervals: a sidecar suspended for an hour holds
nothing for it), credited whole to the minute the poll falls in. A poll's step rate is its models'
(a framework's callback counts their steps), else its step breakdowns' (a plain loop's optimizer
steps): ``poll_figures``.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import is_
from typing import Final

from sidecar.common.runs import MinuteFigures, RunSetup
from sidecar.verdict import ACCELERATOR_TYPES, Facts, GpuFacts, StepBreakdown, device_type
from sidecar.verdict.accounting import gpu_works

# A ledger row's span: the recorder adds a run's polls up per MINUTE_S (its `period_s`, set by the
# polling commands' hidden --runs-period, which tests shorten to seconds: a comparison needs minutes
# of a run, and a test cannot wait minutes). Each row keeps its span (MinuteFigures.span_s), so every
# reader of the rows (accounting, the history, the merge into hours) goes by the row's own span.
MINUTE_S: Final = 60.0
# What --runs-period may be: a whole number of rows to the hour (a merged row is an hour: rows never
# straddle one), and at least a second (a row is the polls of its span).
MIN_PERIOD_S: Final = 1.0
# A poll accounts for at most this many intervals since the job's previous poll (discovery polls a
# flagged user's jobs every other poll: 2 intervals are real time, 3 leave room for a late poll).
MAX_GAP_POLLS: Final = 3.0

# The figures a minute averages over its polls, in the order poll_figures gives them; named as
# MinuteFigures' fields.
MEAN_FIELDS: Final = (
    "step_rate_hz",
    "data_wait_fraction",
    "forward_fraction",
    "backward_fraction",
    "optimizer_fraction",
    "other_fraction",
    "syncs_per_step",
    "gpu_util_pct",
    "gpu_mem_used_mib",
    "sm_activity_fraction",
    "tensor_activity_fraction",
    "sm_clock_mhz",
    "power_w",
    "temperature_c",
    "cpu_pct",
    "rss_mib",
)
_STEP_FRACTIONS = (
    "data_wait_fraction",
    "forward_fraction",
    "backward_fraction",
    "optimizer_fraction",
    "other_fraction",
)
_I = {name: i for i, name in enumerate(MEAN_FIELDS)}
MEM_AT, POWER_AT, TEMPERATURE_AT = _I["gpu_mem_used_mib"], _I["power_w"], _I["temperature_c"]

Figures = tuple[float | None, ...]  # MEAN_FIELDS' values of one poll


class GpuPart:
    """What a poll's GPUs and processes say of the job's GPUs: the GPU-side figures made once for
    the very same GPU facts (gpu_facts reuses a GPU's facts while it reads the same), the
    processes' in one pass over them."""

    __slots__ = (
        "processes",
        "gpus",
        "others",
        "job_gpus",
        "gpu_side",
        "values",
        "held",
        "busy",
        "gpu_processes",
        "indices",
        "breakdown_rate_hz",
    )
    gpu_side: GpuSide
    job_gpus: tuple[GpuFacts, ...]

    def __init__(
        self,
        facts: Facts,
        other_processes: Mapping[int, int],
        idle_util_pct: float,
        last: GpuPart | None = None,
    ) -> None:
        self.processes, self.gpus, self.others = facts.processes, facts.gpus, other_processes
        self.job_gpus = job_gpus = facts.job_gpus
        self.indices = indices = facts.job_gpu_indices
        side: GpuSide
        if (
            last is not None
            and len(last.job_gpus) == len(job_gpus)
            and all(map(is_, last.job_gpus, job_gpus))
        ):
            side = last.gpu_side
        else:
            side = GpuSide(job_gpus, idle_util_pct)
        self.gpu_side = side
        held_at: set[int] = set()
        own = 0
        steps: list[StepBreakdown] = []
        syncs: list[float] = []
        rate_hz: float | None = None
        for p in facts.processes:
            for g in p.gpu:
                if g.index in indices:
                    own += 1
                if g.mem_used_mib:
                    held_at.add(g.index)
            if p.steps is not None:
                steps.append(p.steps)
                if p.steps.step_s is not None and p.steps.step_s > 0:
                    rate_hz = (rate_hz or 0.0) + 1.0 / p.steps.step_s
            if p.syncs_per_step is not None:
                syncs.append(p.syncs_per_step)
        self.held = len(held_at)
        self.busy = len(held_at & side.working)
        shares = (
            # a share a breakdown does not have is left out (None: no loader timed, no step yet)
            tuple(
                _mean([v for s in steps if (v := getattr(s, name)) is not None]) for name in _STEP_FRACTIONS
            )
            if steps
            else _NO_SHARES
        )
        self.values = (*shares, _mean(syncs), *side.values)
        # The steps per second of the step breakdowns (summed over the processes, as the models'
        # rates are): a plain loop's steps, which no framework callback counts (poll_figures).
        self.breakdown_rate_hz = rate_hz
        self.gpu_processes = own + sum(other_processes.get(i, 0) for i in indices)


class GpuSide:
    """The job's GPUs' figures: utilisation, GPM activity, SM clock and temperature averaged, power
    summed, the hottest, the highest maximum clock and every clock-event reason; and which of them
    work (verdict.accounting's gpu_works: what /metrics and `report` count as busy too)."""

    __slots__ = ("values", "working", "temperature_peak", "clock_max", "reasons")

    def __init__(self, job_gpus: tuple[GpuFacts, ...], idle_util_pct: float) -> None:
        cols: list[list[float]] = [[], [], [], [], [], [], []]
        util, sm, tensor, clock, power, temp, clock_max = cols
        reasons: set[str] = set()
        working: set[int] = set()
        for g in job_gpus:
            for col, v in zip(
                cols,
                (
                    g.util,
                    g.sm_activity_fraction,
                    g.tensor_activity_fraction,
                    g.sm_clock_mhz,
                    g.power_w,
                    g.temperature_c,
                    g.sm_clock_max_mhz,
                ),
            ):
                if v is not None:
                    col.append(float(v))
            if gpu_works(g.util, g.sm_activity_fraction, idle_util_pct):
                working.add(g.index)
            reasons.update(g.clock_event_reasons or ())
        self.values = (
            _mean(util),
            _mean(sm),
            _mean(tensor),
            _mean(clock),
            sum(power) if power else None,
            _mean(temp),
        )
        self.working = frozenset(working)
        self.temperature_peak = max(temp) if temp else None
        self.clock_max = max(clock_max) if clock_max else None
        self.reasons = frozenset(reasons)


_NO_SHARES: tuple[float | None, ...] = (None,) * len(_STEP_FRACTIONS)


def gpu_part(
    last: GpuPart | None, facts: Facts, other_processes: Mapping[int, int], idle_util_pct: float
) -> GpuPart:
    """``last`` again for the very same processes and GPUs (and other processes' counts)."""
    if (
        last is not None
        and last.processes is facts.processes
        and last.gpus is facts.gpus
        and (last.others is other_processes or last.others == other_processes)
    ):
        return last
    return GpuPart(facts, other_processes, idle_util_pct, last)


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


def poll_figures(
    part: GpuPart,
    step_rate_hz: float | None,
    gpu_mem_mib: float | None,
    cpu_pct: float | None,
    rss_mib: float | None,
) -> Figures:
    """One poll's MEAN_FIELDS: the history sample's job sums (``step_rate_hz``, the job's processes'
    GPU memory, CPU and RSS) and ``part``'s. The step rate is the models' where a framework's
    callback counts their steps (Lightning, the HF Trainer), else the step breakdown's: in a plain
    loop only the breakdown counts steps (optimizer steps, else DataLoader batches, over the probe's
    window), and a run without a step rate cannot be compared."""
    v = part.values
    rate_hz = step_rate_hz if step_rate_hz is not None else part.breakdown_rate_hz
    return (rate_hz, *v[:6], v[6], gpu_mem_mib, *v[7:], cpu_pct, rss_mib)


class MinuteSums:
    """One minute of a run as its polls add up."""

    __slots__ = (
        "start_unix_s",
        "span_s",
        "polls",
        "sums",
        "counts",
        "mem_peak",
        "power_peak",
        "temperature_peak",
        "clock_max",
        "reasons",
        "gpu_processes",
        "steps",
        "held_s",
        "busy_s",
        "energy_j",
    )

    def __init__(self, start_unix_s: float, span_s: float = MINUTE_S) -> None:
        self.start_unix_s = start_unix_s
        self.span_s = span_s
        self.polls = 0
        self.sums = [0.0] * len(MEAN_FIELDS)
        self.counts = [0] * len(MEAN_FIELDS)
        self.mem_peak: float | None = None
        self.power_peak: float | None = None
        self.temperature_peak: float | None = None
        self.clock_max: float | None = None
        self.reasons: frozenset[str] = frozenset()
        self.gpu_processes: int | None = None
        self.steps: int | None = None
        self.held_s = 0.0
        self.busy_s = 0.0
        self.energy_j: float | None = None

    def add(self, figures: Figures, part: GpuPart, dt_s: float) -> None:
        self.polls += 1
        sums, counts = self.sums, self.counts
        for i, v in enumerate(figures):
            if v is not None:
                sums[i] += v
                counts[i] += 1
        self.mem_peak = _peak(self.mem_peak, figures[MEM_AT])
        self.power_peak = _peak(self.power_peak, figures[POWER_AT])
        side = part.gpu_side
        self.temperature_peak = _peak(self.temperature_peak, side.temperature_peak)
        self.clock_max = _peak(self.clock_max, side.clock_max)
        if not side.reasons <= self.reasons:
            self.reasons = self.reasons | side.reasons
        if part.indices or self.gpu_processes is not None:
            self.gpu_processes = max(self.gpu_processes or 0, part.gpu_processes)
        self.held_s += dt_s * part.held
        self.busy_s += dt_s * part.busy

    def figures(self) -> MinuteFigures:
        means = [s / n if n else None for s, n in zip(self.sums, self.counts)]
        named = dict(zip(MEAN_FIELDS, means))
        rate = named["step_rate_hz"]
        return MinuteFigures(
            start_unix_s=self.start_unix_s,
            span_s=self.span_s,
            polls=self.polls,
            steps=self.steps,
            step_rate_sq_hz2=None if rate is None else rate * rate,
            gpu_mem_peak_mib=self.mem_peak,
            sm_clock_max_mhz=self.clock_max,
            clock_reasons=tuple(sorted(self.reasons)),
            power_peak_w=self.power_peak,
            temperature_peak_c=self.temperature_peak,
            gpu_processes=self.gpu_processes,
            gpu_held_s=self.held_s,
            gpu_busy_s=self.busy_s,
            energy_j=self.energy_j,
            **named,  # type: ignore[arg-type]  # MEAN_FIELDS are MinuteFigures' float | None fields
        )

    @classmethod
    def resumed(cls, m: MinuteFigures) -> MinuteSums:
        """The sums a recorded minute was made of (as near as its means say: each mean's polls are
        taken to be all the minute's polls), to go on adding to after a restart."""
        out = cls(m.start_unix_s, m.span_s)
        out.polls = m.polls
        for i, name in enumerate(MEAN_FIELDS):
            mean = getattr(m, name)
            if mean is not None and m.polls:
                out.sums[i], out.counts[i] = mean * m.polls, m.polls
        out.mem_peak, out.power_peak, out.temperature_peak = (
            m.gpu_mem_peak_mib,
            m.power_peak_w,
            m.temperature_peak_c,
        )
        out.clock_max, out.reasons, out.gpu_processes = (
            m.sm_clock_max_mhz,
            frozenset(m.clock_reasons),
            m.gpu_processes,
        )
        out.steps, out.held_s, out.busy_s, out.energy_j = m.steps, m.gpu_held_s, m.gpu_busy_s, m.energy_j
        return out


def _peak(peak: float | None, v: float | None) -> float | None:
    if v is None:
        return peak
    return v if peak is None or v > peak else peak


def minute_start(t_unix_s: float, period_s: float = MINUTE_S) -> float:
    """The start of the row `t_unix_s` falls in: a multiple of `period_s` (MINUTE_S: a minute)."""
    return t_unix_s - t_unix_s % period_s


def check_period_s(period_s: float) -> float:
    """`period_s` if a row may span it (MIN_PERIOD_S to MINUTE_S, a whole number of rows to the
    hour), else ValueError saying what may."""
    rows_per_hour = 3600.0 / period_s if period_s > 0 else 0.0
    if not (MIN_PERIOD_S <= period_s <= MINUTE_S and rows_per_hour == round(rows_per_hour)):
        raise ValueError(
            f"a row spans {MIN_PERIOD_S:g} to {MINUTE_S:g} s, a whole number of them to the hour "
            f"(1, 2, 5, 10, 30, 60...): not {period_s:g}"
        )
    return period_s


# -- what the run runs on --------------------------------------------------------------------------
def run_setup(facts: Facts, last: RunSetup, most_processes: int = 0) -> RunSetup:
    """``last`` with what these facts say: each value the latest known (a value these facts do not
    have keeps the last one), the processes the most seen (``most_processes``, these facts' or the
    last setup's)."""
    torch = cuda = None
    for _, rt in facts.probed_runtimes:
        if rt.torch:
            torch, cuda = rt.torch, rt.cuda_build
            break
    models = tuple(g.name for g in facts.job_gpus if g.name)
    loader = _loader(facts)
    live = max(most_processes, sum(1 for p in facts.processes if not p.exited))
    new = RunSetup(
        torch_version=torch or last.torch_version,
        torch_cuda=cuda or last.torch_cuda,
        driver_version=facts.driver or last.driver_version,
        gpu_models=models or last.gpu_models,
        precision=_precision(facts) or last.precision,
        loader=loader or last.loader,
        processes=max(live, last.processes or 0) or last.processes,
    )
    return last if new == last else new


def _loader(facts: Facts) -> tuple[tuple[str, str], ...]:
    for _, m in facts.model_pairs:
        s = m.loader_settings
        if s is not None:
            fields = (
                ("num_workers", s.num_workers),
                ("batch_size", s.batch_size),
                ("pin_memory", s.pin_memory),
                ("persistent_workers", s.persistent_workers),
                ("prefetch_factor", s.prefetch_factor),
            )
            return tuple((k, str(v)) for k, v in fields if v is not None)
    return ()


def _precision(facts: Facts) -> str | None:
    """The first model on an accelerator (else the first model): "autocast <dtype>" under autocast,
    "tf32" for float32 weights with TF32 matmuls allowed, else its parameters' dtypes ("+"-joined)."""
    pairs = facts.model_pairs
    pick = next(((p, m) for p, m in pairs if device_type(m.device) in ACCELERATOR_TYPES), None) or next(
        iter(pairs), None
    )
    if pick is None:
        return None
    proc, model = pick
    if model.autocast and model.autocast != "off":
        return f"autocast {model.autocast}"
    dtypes = model.param_dtypes
    math = proc.math
    if (
        dtypes == ("float32",)
        and math is not None
        and (math.allow_tf32_matmul or math.float32_matmul_precision in ("high", "medium"))
    ):
        return "tf32"
    return "+".join(dtypes) if dtypes else None
