"""The rank the others wait for (`straggler-rank`), from each rank's step breakdown.

Step time cannot find a slow rank: the collectives make every rank's step as long as the slowest
one's. What differs is where each rank spends it. A rank that reaches the collective late waits
least in it, and the others wait for it there. The probe's `backward_fraction` is the time between
optimizer steps less forward and data wait: the backward pass, the loss, and the collectives
(DDP's gradient all-reduce runs in the backward). The ranks' own backward compute is about the same
(one model, one batch size), so what a rank spends there beyond the rank that spends least is its
collective wait, and the rank that spends least is the straggler. Its cause is the phase in which
it spends more than the others (data wait, forward, optimizer), or its GPU when that one alone is
throttled.

The finding is made only from a window of at least `straggler_min_steps` steps on every rank, and
only once the same rank has been the straggler at consecutive polls at least
`straggler_confirm_s` apart (`RecentSample.straggler`, which samples.history_sample fills with
`straggler_candidate` at each poll).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from statistics import median

from sidecar.common.catalogue import Ref, ref
from sidecar.common.memo import for_the_same_objects
from sidecar.verdict.efficiency import THROTTLE_REASONS
from sidecar.verdict.facts import (
    VENDOR_NVIDIA,
    Facts,
    Finding,
    GpuFacts,
    ProcessFacts,
    RecentSample,
    Rules,
    StepBreakdown,
    model_nvml_index,
)

__all__ = [
    "STRAGGLER_RULES",
    "RankWait",
    "Straggler",
    "pick_straggler",
    "rank_waits",
    "straggler_candidate",
    "throttle_reason",
]
__all__ += ["rule_straggler_rank_held"]

# The phases compared to name the cause: (cause, the StepBreakdown field).
_PHASES = (
    ("data-wait", "data_wait_fraction"),
    ("forward", "forward_fraction"),
    ("optimizer", "optimizer_fraction"),
)
# Each cause's hint, written out so the catalogue's test finds every id the verdict names.
_HINTS = {
    "data-wait": "hint.straggler-rank.data-wait",
    "forward": "hint.straggler-rank.forward",
    "optimizer": "hint.straggler-rank.optimizer",
    "throttled-gpu": "hint.straggler-rank.throttled-gpu",
    "other": "hint.straggler-rank.other",
}
Throttle = Callable[["RankWait"], "str | None"]  # a rank -> its GPU's throttle reason, None: not braked
# A phase is the cause when the straggler spends this share of the others' wait more in it than
# they do (a 200 ms sleep in forward: about all of it).
_CAUSE_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class RankWait:
    """One rank's share of its steps in each phase, and its wait in the collectives (0-1)."""

    rank: int
    pid: int | None  # None where the source has no pids (the cluster view: Prometheus's series)
    steps: int
    collective_wait_fraction: float
    backward_fraction: float
    data_wait_fraction: float | None
    forward_fraction: float | None
    optimizer_fraction: float | None
    gpu_index: int | None  # NVML index of its model's GPU
    node: str | None = None  # the node it runs on, where ranks of several nodes are compared


@dataclass(frozen=True, slots=True)
class Straggler:
    rank: int
    pid: int | None
    wait_fraction: float  # the others' mean collective wait: what the straggler costs each step
    cause: str  # data-wait | forward | optimizer | throttled-gpu | other
    steps: int  # the fewest steps a rank's window holds
    gpu_index: int | None
    node: str | None = None


def _gpu_of(p: ProcessFacts, gpus: tuple[GpuFacts, ...]) -> int | None:
    for m in p.models:
        index = model_nvml_index(p, m, gpus)
        if index is not None:
            return index
    used = [g.index for g in p.gpu if g.in_use]
    return used[0] if len(used) == 1 else None


def rank_waits(f: Facts) -> tuple[RankWait, ...]:
    """Each live rank with a measured backward (one process a rank, the first), by rank; () with
    fewer than two such ranks, where no rank can wait for another."""
    return _rank_waits(f.processes, f.gpus)


@for_the_same_objects  # asked by the history's sample, the rule and the document of one poll
def _rank_waits(processes: tuple[ProcessFacts, ...], gpus: tuple[GpuFacts, ...]) -> tuple[RankWait, ...]:
    seen: dict[int, tuple[ProcessFacts, StepBreakdown, float]] = {}  # rank -> its first process
    for p in processes:
        s = p.steps
        if p.role != "rank" or p.rank is None or p.exited or s is None or s.backward_fraction is None:
            continue
        seen.setdefault(p.rank, (p, s, s.backward_fraction))
    if len(seen) < 2:
        return ()
    return relative_waits(
        RankWait(
            rank,
            p.pid,
            s.steps,
            0.0,
            backward_fraction,
            s.data_wait_fraction,
            s.forward_fraction,
            s.optimizer_fraction,
            _gpu_of(p, gpus),
        )
        for rank, (p, s, backward_fraction) in sorted(seen.items())
    )


def relative_waits(ranks: Iterable[RankWait]) -> tuple[RankWait, ...]:
    """The ranks (one each) with their collective wait: their backward beyond the least of them;
    () with fewer than two, where no rank can wait for another."""
    ranks = tuple(ranks)
    if len(ranks) < 2:
        return ()
    least = min(w.backward_fraction for w in ranks)
    return tuple(replace(w, collective_wait_fraction=max(0.0, w.backward_fraction - least)) for w in ranks)


def throttle_reason(reasons: Iterable[str] | None) -> str | None:
    """The reason the hardware brakes a GPU with these active clock event reasons, most telling
    first; None when it does not."""
    active = set(reasons or ())
    return next((r for r in THROTTLE_REASONS if r in active), None)


def _throttle(g: GpuFacts | None) -> str | None:
    return throttle_reason(g.clock_event_reasons if g is not None else None)


def _cause(throttle_of: Throttle, slow: RankWait, others: Sequence[RankWait], wait: float) -> str:
    """What the straggler spends more time on than the others: the phase with the largest excess,
    its GPU when that alone among the ranks' is throttled (a throttled GPU slows forward and
    optimizer, not the data wait), else other."""
    excess = {}
    for cause, name in _PHASES:
        mine = getattr(slow, name)
        theirs = [v for o in others if (v := getattr(o, name)) is not None]
        if mine is not None:
            excess[cause] = mine - (median(theirs) if theirs else 0.0)
    best = max(excess, key=excess.__getitem__, default=None)
    named = best if best is not None and excess[best] >= _CAUSE_SHARE * wait else "other"
    if named != "data-wait" and throttle_of(slow) is not None:
        mine = (slow.node, slow.gpu_index)
        if not any(throttle_of(o) for o in others if (o.node, o.gpu_index) != mine):
            return "throttled-gpu"
    return named


def pick_straggler(waits: Sequence[RankWait], rules: Rules, throttle_of: Throttle) -> Straggler | None:
    """The rank every other rank waits for, and why (`throttle_of(rank)`: its GPU's throttle reason
    or None); None on a balanced job, before each rank's window holds enough steps, or where two
    ranks or more wait about as little. Pure: the node's rule and the cluster view share it."""
    if len(waits) < 2:
        return None
    fewest = min(w.steps for w in waits)
    if fewest < rules.straggler_min_steps:
        return None
    ordered = sorted(waits, key=lambda w: w.collective_wait_fraction)
    slow, others = ordered[0], ordered[1:]
    if others[0].collective_wait_fraction < rules.straggler_wait_fraction:
        return None  # some other rank waits about as little: no one rank holds the rest back
    wait = sum(o.collective_wait_fraction for o in others) / len(others)
    cause = _cause(throttle_of, slow, others, wait)
    return Straggler(slow.rank, slow.pid, wait, cause, fewest, slow.gpu_index, slow.node)


def straggler_candidate(f: Facts) -> Straggler | None:
    """The rank every other rank waits for at this poll, and why; None on a balanced job, before
    each rank's window holds enough steps, or where two ranks or more wait about as little."""
    return _candidate(f.processes, f.gpus, f.rules)


@for_the_same_objects  # as _rank_waits: one poll's facts, asked twice
def _candidate(
    processes: tuple[ProcessFacts, ...], gpus: tuple[GpuFacts, ...], rules: Rules
) -> Straggler | None:
    # The first of a repeated index, as Facts does; asked for a rank's index, None where it has none.
    by_index: dict[int | None, GpuFacts] = {g.index: g for g in reversed(gpus)}
    return pick_straggler(_rank_waits(processes, gpus), rules, lambda w: _throttle(by_index.get(w.gpu_index)))


def confirmed(recent: Sequence[RecentSample], rank: int, confirm_s: float) -> bool:
    """The newest polls, back to one at least `confirm_s` older than the newest, all named `rank`."""
    newest = None
    for s in reversed(recent):
        if s.straggler is None or s.straggler[0] != rank:
            return False
        if newest is None:
            newest = s.time
        elif newest - s.time >= confirm_s:
            return True
    return False


def cause_ref(s: Straggler, reason: str | None, sm_clock_mhz: float | None, vendor: str | None) -> Ref:
    """The straggler's cause as the message names it; a throttled GPU with its reason and clock (an
    AMD or Intel GPU's is its GPU clock: "SM" is NVIDIA's word)."""
    if s.cause != "throttled-gpu":
        return ref(f"straggler-cause.{s.cause}")
    clock = "?" if sm_clock_mhz is None else f"{sm_clock_mhz:g} MHz"
    gpu = "?" if s.gpu_index is None else s.gpu_index  # known: only a GPU of a known index is throttled
    key = "straggler-cause.throttled-gpu" + ("" if vendor in (None, VENDOR_NVIDIA) else ".gpu-clock")
    return ref(key, gpu=gpu, reason=ref(f"clock-reason.{reason}"), clock=clock)


def hint_ref(s: Straggler) -> Ref:
    return ref(_HINTS[s.cause], rank=s.rank, pid=s.pid if s.pid is not None else "<pid>")


def where(node: str | None, gpu_index: int | None) -> str:
    """ ", node N, GPU G" as far as known: display-ready, the same in every language."""
    parts = ([f"node {node}"] if node else []) + ([f"GPU {gpu_index}"] if gpu_index is not None else [])
    return "".join(f", {part}" for part in parts)


def _hostname(f: Facts, pid: int | None) -> str | None:
    return next((p.hostname for p in f.processes if p.pid == pid), None)


def rule_straggler_rank(f: Facts) -> Iterable[Finding]:
    if not f.target_alive:
        return
    s = straggler_candidate(f)
    if s is None or not confirmed(f.recent, s.rank, f.rules.straggler_confirm_s):
        return
    yield _straggler_finding(f, s)


def rule_straggler_rank_held(f: Facts) -> Iterable[Finding]:
    """straggler-rank as a held one is checked (hysteresis.RELEASED_AT): this poll's straggler, without
    the confirmation at consecutive polls, which it had when it was raised. The history's samples
    name the rank of each poll at the raise threshold, not at the release value it is held to."""
    if not f.target_alive:
        return
    s = straggler_candidate(f)
    if s is not None:
        yield _straggler_finding(f, s)


def _straggler_finding(f: Facts, s: Straggler) -> Finding:
    g = f.gpus_by_index.get(s.gpu_index) if s.gpu_index is not None else None
    message = ref(
        "warning.straggler-rank",
        rank=s.rank,
        pid=s.pid if s.pid is not None else "<pid>",  # as hint_ref: a node's ranks all have one
        where=where(_hostname(f, s.pid), s.gpu_index),
        wait=f"{s.wait_fraction:.0%}",
        cause=cause_ref(s, _throttle(g), *((g.sm_clock_mhz, g.vendor) if g is not None else (None, None))),
        steps=s.steps,
    )
    others = sorted(w.pid for w in rank_waits(f) if w.pid is not None and w.pid != s.pid)
    pids = (s.pid, *others) if s.pid is not None else tuple(others)
    return Finding("straggler-rank", "warning", message, hint_ref(s), pids)


STRAGGLER_RULES = (rule_straggler_rank,)
