"""Hysteresis: a pure step that carries a small state from one poll to the next, so that no warning
flaps between two polls."""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace

from sidecar.verdict.efficiency import rule_data_starved, rule_hollow_utilisation, rule_host_syncs
from sidecar.verdict.facts import SEVERITY_ORDER, Facts, Finding, Rules, Verdict
from sidecar.verdict.memory_growth import rule_memory_growth
from sidecar.verdict.rules import Rule, rule_idle_gpu
from sidecar.verdict.stragglers import rule_straggler_rank_held

# What `from sidecar.verdict import ...` gives (sidecar/verdict/__init__.py).
__all__ = ["RELEASED_AT", "UNHELD_CODES", "HysteresisState", "Release", "settle"]

# Warnings that say what the job is (whether it runs, its probe, its torch build, its models' and
# inputs' devices, the driver's answer), read exactly at each poll rather than measured against a
# threshold: they go as soon as their fact does. Held, they would contradict the status and the
# facts beside them ("no probe" beside a model; "the input is on the CPU" beside an input on the
# model's GPU, for seconds after a model moved mid-run).
UNHELD_CODES = frozenset(
    {"no-probe", "probe-unreadable", "job-stopped", "cpu-build", "cuda-unavailable", "model-on-cpu"}
    | {"mixed-devices", "no-parameters", "nvml-unavailable", "input-mismatch", "rank-device-mismatch"}
    # Figures read exactly too, with no threshold of theirs a held one could be released at: the
    # driver's clock event reasons and clocks, a PCIe link's generation and width, the devices the
    # system and the framework count, the probe's publish failures. Their release is "the evidence
    # is gone": held, they would say a poll-old clock, link or count beside this poll's.
    | {"throttled", "pcie-degraded", "device-count-mismatch", "probe-error"}
)


@dataclass(frozen=True)
class Release:
    """How a held warning is checked against this poll's facts: `rule` (the one that raises it;
    straggler-rank's without the confirmation it had when raised) run again on them about the
    processes it named, each threshold of `thresholds` ((the Rules field it is raised at, the field
    it is released at)) at its release value. `about`: its message's params that say what it is
    about (a GPU, a rank), which this poll's finding must say too; a GPU it names is the only one the
    rule looks at."""

    rule: Rule
    thresholds: tuple[tuple[str, str], ...]
    about: tuple[str, ...] = ()


# Warnings about a figure measured against a threshold: held, such a warning is its Release's rule
# run on this poll's facts, its thresholds at their release values: it says this poll's figures,
# never those of the poll that raised it, and goes as soon as a figure is past its release value or
# the evidence under it is gone (too few steps, no window, another GPU or rank). Each release value
# is a Rules field of its own, beside the threshold it releases (facts.py says why that value).
RELEASED_AT: dict[str, Release] = {
    "data-starved": Release(rule_data_starved, (("data_wait_starved", "data_wait_released"),)),
    "host-syncs": Release(rule_host_syncs, (("host_syncs_per_step", "host_syncs_released"),)),
    "idle-gpu": Release(rule_idle_gpu, (("idle_util_pct", "idle_util_released_pct"),)),
    "memory-growth": Release(
        rule_memory_growth,
        (("growth_min_mib", "growth_released_mib"), ("growth_min_fraction", "growth_released_fraction")),
    ),
    "hollow-utilisation": Release(
        rule_hollow_utilisation,
        (
            ("hollow_util_pct", "hollow_util_released_pct"),
            ("hollow_sm_activity", "hollow_sm_activity_released"),
            ("hollow_sm_occupancy", "hollow_sm_occupancy_released"),
        ),
        about=("gpu",),
    ),
    "straggler-rank": Release(
        rule_straggler_rank_held, (("straggler_wait_fraction", "straggler_wait_released"),), about=("rank",)
    ),
}


@dataclass(frozen=True)
class HysteresisState:
    """Per warning code: the last observed warning and how many polls in a row it was absent."""

    held: tuple[tuple[str, Finding, int], ...] = ()


def settle(
    prev: HysteresisState,
    verdict: Verdict,
    rules: Rules | None = None,
    live_pids: set[int] | None = None,
    facts: Facts | None = None,
) -> tuple[Verdict, HysteresisState]:
    """Keep a warning shown until it has been absent for `hysteresis_off_polls` polls in a row, so a
    condition hovering at a threshold does not flap between two polls. A warning appears at once:
    hiding a real problem for a few polls is worse than showing it early. A held warning about
    processes that have all exited goes at once (``live_pids``): its condition cannot hover, and
    frameworks that recreate their DataLoader workers every epoch would otherwise keep it up.
    Warnings that state a fact the poll reads exactly (UNHELD_CODES) are never held.

    Given the poll's ``facts``: a held warning of RELEASED_AT shows their figures and goes with them,
    and once the job has ended nothing is held (its final state is what its final facts say, the
    same whether the sidecar polls on, as --pid does, or stops there, as discovery does)."""
    off_polls = (rules or Rules()).hysteresis_off_polls
    seen = {w.code: w for w in verdict.warnings}
    held: list[tuple[str, Finding, int]] = []
    shown = list(verdict.warnings)
    ended = facts is not None and not facts.target_alive
    for code, w, absent in () if ended else prev.held:
        if code in seen or code in UNHELD_CODES:
            continue
        if live_pids is not None and w.pids and not live_pids.intersection(w.pids):
            continue
        if absent + 1 >= off_polls:
            continue
        now = w if facts is None or code not in RELEASED_AT else _as_now(facts, code, w)
        if now is not None:
            held.append((code, now, absent + 1))
            shown.append(now)
    held.extend((code, w, 0) for code, w in seen.items())
    shown.sort(key=lambda w: SEVERITY_ORDER[w.severity])
    state = HysteresisState(tuple(held))
    if len(shown) == len(verdict.warnings) and all(map(operator.is_, shown, verdict.warnings)):
        return verdict, state  # nothing held back, nothing reordered (most polls): no copy to make
    return replace(verdict, warnings=tuple(shown)), state


def _as_now(facts: Facts, code: str, held: Finding) -> Finding | None:
    """The held warning `held` as this poll's facts have it, its thresholds at their release values;
    None when they no longer give it (a figure is past its release value, its evidence is gone)."""
    release = RELEASED_AT[code]
    rules = replace(facts.rules, **{raised: getattr(facts.rules, at) for raised, at in release.thresholds})
    named = set(held.pids)
    processes = tuple(p for p in facts.processes if not named or p.pid in named)
    about = {name: held.message.params.get(name) for name in release.about}
    gpus = facts.gpus if "gpu" not in about else tuple(g for g in facts.gpus if g.index == about["gpu"])
    now = replace(facts, processes=processes, gpus=gpus, rules=rules)
    return next(
        (
            w
            for w in release.rule(now)
            if w.code == code and all(w.message.params.get(name) == v for name, v in about.items())
        ),
        None,
    )
