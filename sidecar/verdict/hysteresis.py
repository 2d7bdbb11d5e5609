"""Hysteresis: a pure step that carries a small state from one poll to the next, so that no warning
flaps between two polls."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from sidecar.verdict.efficiency import rule_data_starved, rule_host_syncs
from sidecar.verdict.facts import SEVERITY_ORDER, Facts, Finding, Rules, Verdict

# What `from sidecar.verdict import ...` gives (sidecar/verdict/__init__.py).
__all__ = ["RELEASED_AT", "UNHELD_CODES", "HysteresisState", "settle"]

# Warnings that say what the job is (whether it runs, its probe, its torch build, its models' and
# inputs' devices, the driver's answer), read exactly at each poll rather than measured against a
# threshold: they go as soon as their fact does. Held, they would contradict the status and the
# facts beside them ("no probe" beside a model; "the input is on the CPU" beside an input on the
# model's GPU, for seconds after a model moved mid-run).
UNHELD_CODES = frozenset(
    {"no-probe", "probe-unreadable", "job-stopped", "cpu-build", "cuda-unavailable", "model-on-cpu"}
    | {"mixed-devices", "no-parameters", "nvml-unavailable", "input-mismatch", "rank-device-mismatch"}
)

# Warnings about a figure measured against a threshold: code -> (its rule, the Rules field of the
# threshold, the field of the value it is released at). Held, such a warning is its rule run again on
# this poll's facts (about the processes it named) with the threshold at the release value: it says
# this poll's figure, never the one of the poll that raised it, and goes as soon as the figure is
# past the release value or the evidence under it is gone (too few steps).
RELEASED_AT: dict[str, tuple[Callable[[Facts], Iterable[Finding]], str, str]] = {
    "data-starved": (rule_data_starved, "data_wait_starved", "data_wait_released"),
    "host-syncs": (rule_host_syncs, "host_syncs_per_step", "host_syncs_released"),
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
    """The held warning `held` as this poll's facts have it, its threshold at its release value; None
    when they no longer give it (the figure is past the release value, or its evidence is gone)."""
    rule, threshold, release = RELEASED_AT[code]
    rules = replace(facts.rules, **{threshold: getattr(facts.rules, release)})
    named = set(held.pids)
    processes = tuple(p for p in facts.processes if not named or p.pid in named)
    return next((w for w in rule(replace(facts, processes=processes, rules=rules)) if w.code == code), None)
