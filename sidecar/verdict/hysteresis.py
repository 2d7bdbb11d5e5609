"""Hysteresis: a pure step that carries a small state from one poll to the next, so that no warning
flaps between two polls."""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace

from sidecar.verdict.facts import SEVERITY_ORDER, Finding, Rules, Verdict
from sidecar.verdict.rules import UNHELD_CODES

# What `from sidecar.verdict import ...` gives (sidecar/verdict/__init__.py).
__all__ = ["HysteresisState", "settle"]


@dataclass(frozen=True)
class HysteresisState:
    """Per warning code: the last observed warning and how many polls in a row it was absent."""

    held: tuple[tuple[str, Finding, int], ...] = ()


def settle(
    prev: HysteresisState, verdict: Verdict, rules: Rules | None = None, live_pids: set[int] | None = None
) -> tuple[Verdict, HysteresisState]:
    """Keep a warning shown until it has been absent for `hysteresis_off_polls` polls in a row, so a
    condition hovering at a threshold does not flap between two polls. A warning appears at once:
    hiding a real problem for a few polls is worse than showing it early. A held warning about
    processes that have all exited goes at once (``live_pids``): its condition cannot hover, and
    frameworks that recreate their DataLoader workers every epoch would otherwise keep it up.
    Warnings that state a fact the poll reads exactly (rules.UNHELD_CODES) are never held."""
    off_polls = (rules or Rules()).hysteresis_off_polls
    seen = {w.code: w for w in verdict.warnings}
    held: list[tuple[str, Finding, int]] = []
    shown = list(verdict.warnings)
    for code, w, absent in prev.held:
        if code in seen or code in UNHELD_CODES:
            continue
        if live_pids is not None and w.pids and not live_pids.intersection(w.pids):
            continue
        if absent + 1 < off_polls:
            held.append((code, w, absent + 1))
            shown.append(w)
    held.extend((code, w, 0) for code, w in seen.items())
    shown.sort(key=lambda w: SEVERITY_ORDER[w.severity])
    state = HysteresisState(tuple(held))
    if len(shown) == len(verdict.warnings) and all(map(operator.is_, shown, verdict.warnings)):
        return verdict, state  # nothing held back, nothing reordered (most polls): no copy to make
    return replace(verdict, warnings=tuple(shown)), state
