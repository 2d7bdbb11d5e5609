"""decide() with a VerdictMemo gives what decide() without one gives, poll after poll.

The memo reuses the status and the findings of every rule but RECENT_RULES and AGE_RULES while the
facts other than `recent` and `target_age_s` are equal to the last call's. That holds only if those
rules never read either: checked with facts whose `recent` or `target_age_s` raises at any use.
Then the memoised and the fresh verdicts are compared over sequences in which the facts stay,
change, come back, and only the window and the job's age move.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from sidecar.verdict import AGE_RULES, RECENT_RULES, RULES, Facts, VerdictMemo, decide, status_and_message
from tests.helpers.verdict_facts import idle_recent
from tests.helpers.verdict_tables import CASES, EFFICIENCY_CASES

ALL_FACTS: list[Facts] = [c[1] for c in CASES] + [c[1] for c in EFFICIENCY_CASES]


class Untouchable(tuple):
    """A `recent` that fails the test when read in any way (truth, length, iteration, index)."""

    def _read(self, *args, **kwargs):
        raise AssertionError("read Facts.recent")

    __bool__ = __len__ = __iter__ = __getitem__ = __reversed__ = __contains__ = _read


class UntouchableAge(float):
    """A `target_age_s` that fails the test when used in any way (compared, formatted, added)."""

    def _read(self, *args: object, **kwargs: object) -> bool:
        raise AssertionError("read Facts.target_age_s")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = __bool__ = __format__ = _read  # type: ignore[assignment]
    __float__ = __int__ = __add__ = __sub__ = __radd__ = __rsub__ = __mul__ = __truediv__ = _read
    __hash__ = float.__hash__


# The job's age at a poll: unknown, within the probe's grace (probe_grace_s) and past it.
AGES = [None, 0.5, 4.0, 30.0, 86400.0]

RECENTS = [
    (),
    idle_recent(0.0),
    idle_recent(0.0, calls_start=0, calls_end=0),
    idle_recent(60.0),
    idle_recent(1.0, span_s=200.0, n=30),
]


@pytest.mark.parametrize("f", ALL_FACTS, ids=[c[0] for c in CASES] + [c[0] for c in EFFICIENCY_CASES])
def test_only_the_recent_rules_read_the_window(f):
    blind = f.with_recent(Untouchable())
    status_and_message(blind)
    for rule in RULES:
        if rule not in RECENT_RULES:
            list(rule(blind))


@pytest.mark.parametrize("f", ALL_FACTS, ids=[c[0] for c in CASES] + [c[0] for c in EFFICIENCY_CASES])
def test_only_the_age_rules_read_the_job_s_age(f: Facts) -> None:
    blind = replace(f, target_age_s=UntouchableAge(3.0))
    status_and_message(blind)
    for rule in RULES:
        if rule not in AGE_RULES:
            list(rule(blind))


def test_the_age_rules_do_read_it() -> None:
    for rule in AGE_RULES:
        read = False
        for f in ALL_FACTS:
            try:
                list(rule(replace(f, target_age_s=UntouchableAge(3.0))))
            except AssertionError:
                read = True
                break
        assert read, rule.__name__


def test_the_recent_rules_do_read_it():
    """RECENT_RULES is not larger than it needs: each of its rules reads the window somewhere."""
    for rule in RECENT_RULES:
        read = False
        for f in ALL_FACTS:
            try:
                list(rule(f.with_recent(Untouchable())))
            except AssertionError:
                read = True
                break
        assert read, rule.__name__


def _sequence(rng: random.Random, n: int) -> list[Facts]:
    """Polls: mostly the same facts as the last poll (equal copies, not the same object), with a
    new window each time; sometimes other facts, sometimes the facts of a few polls back."""
    out: list[Facts] = []
    current = rng.choice(ALL_FACTS)
    for _ in range(n):
        roll = rng.random()
        if roll < 0.25:
            current = rng.choice(ALL_FACTS)
        elif roll < 0.35 and out:
            current = rng.choice(out[-5:])
        elif roll < 0.45:
            current = replace(current, target_alive=not current.target_alive)
        copy = replace(
            current,
            processes=tuple(replace(p) for p in current.processes),  # equal, new objects
            target_age_s=rng.choice(AGES),
        )
        out.append(copy.with_recent(rng.choice(RECENTS)))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_memoised_verdicts_equal_fresh_ones(seed):
    rng = random.Random(seed)
    memo = VerdictMemo()
    hits = 0
    for f in _sequence(rng, 150):
        before = memo.key
        got = decide(f, memo)
        hits += before is not None and memo.key is before
        assert repr(got) == repr(decide(f)), f
    assert hits > 20  # the memo was used, not only refilled


def test_a_poll_that_moves_only_the_window_and_the_age_reuses_the_memo() -> None:
    """What changes at every poll of a steady job is no part of the key: with it (target_age_s
    was), every poll asked every rule again."""
    for f in ALL_FACTS:
        memo = VerdictMemo()
        decide(replace(f, target_age_s=1.0).with_recent(RECENTS[1]), memo)
        key = memo.key
        again = replace(f, target_age_s=2.5, processes=tuple(replace(p) for p in f.processes))
        decide(again.with_recent(RECENTS[3]), memo)
        assert memo.key is key


def test_a_rule_that_raises_leaves_no_entry(monkeypatch):
    import sidecar.verdict.status as status

    memo = VerdictMemo()
    f = ALL_FACTS[0]
    decide(f, memo)

    def boom(_f):
        raise RuntimeError("boom")

    monkeypatch.setattr(status, "RULES", (*RULES[:1], boom, *RULES[1:]))
    with pytest.raises(RuntimeError):
        decide(replace(f, target_alive=not f.target_alive), memo)
    assert memo.key is None
