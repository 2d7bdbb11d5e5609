"""Issue 25 item 4: a verdict never says two opposite things, in a job's first seconds or ever.
Issue 39 item 14: nor a held warning anything its poll's facts do not say.

`no-probe` never stands beside a probed verdict (the hysteresis held it for 3 polls after the probe
appeared), and a probe that runs but cannot be read (another user's private segment) is
`probe-unreadable` alone, never also "add two lines to your training script".
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.verdict import (
    HysteresisState,
    ProcessFacts,
    Rules,
    StepBreakdown,
    Verdict,
    decide,
    settle,
)
from sidecar.verdict.hysteresis import UNHELD_CODES
from sidecar.verdict.rules import PROBE_PRESENT_STATES
from tests.helpers.verdict_facts import CPU_RT, en, facts, model, proc, settled_facts
from tests.helpers.verdict_tables import job, steps

RULES = Rules(hysteresis_off_polls=3)


def codes(v) -> set[str]:
    return {w.code for w in v.warnings}


def settled(verdicts):
    state, out = HysteresisState(), []
    for v in verdicts:
        shown, state = settle(state, v, RULES)
        out.append(shown)
    return out


def unprobed(state: str = "missing", pid: int = 100) -> ProcessFacts:
    unreadable = state in ("foreign-owner", "corrupt", "owner-mismatch")
    return ProcessFacts(pid=pid, role=None, is_target=True, probe_state=state, probe_unreadable=unreadable)


def test_no_probe_goes_the_poll_the_probe_appears():
    before = decide(facts(unprobed()))
    after = decide(facts(proc(models=[model("cuda:0", inp="cuda:0")])))
    assert "no-probe" in codes(before) and after.status == "GPU"
    shown = settled([before, after, after])
    assert ["no-probe" in codes(v) for v in shown] == [True, False, False]


@pytest.mark.parametrize("state", sorted(PROBE_PRESENT_STATES))
def test_a_probe_that_cannot_be_read_is_not_a_missing_probe(state):
    v = decide(facts(unprobed(state)))
    assert "no-probe" not in codes(v)
    assert "no probe in the job" not in en(v.message)
    if state in ("foreign-owner", "corrupt"):
        assert "probe-unreadable" in codes(v)


def test_another_users_sidecar_says_probe_unreadable_alone():
    v = decide(facts(unprobed("foreign-owner")))
    assert codes(v) == {"probe-unreadable"}
    assert "cannot be read" in en(v.message) and "two lines" not in " ".join(en(w.hint) for w in v.warnings)


def test_a_planted_file_under_the_pid_does_not_hide_a_missing_probe():
    """owner-mismatch: the file is another user's, not the process's: it may run no probe at all."""
    v = decide(facts(unprobed("owner-mismatch")))
    assert {"no-probe", "probe-unreadable"} <= codes(v)


def test_a_model_moved_to_the_gpu_is_not_still_on_the_cpu():
    on_cpu = decide(facts(proc(models=[model("cpu")])))
    on_gpu = decide(facts(proc(models=[model("cuda:0", inp="cuda:0")])))
    assert "model-on-cpu" in codes(on_cpu) and on_gpu.status == "GPU"
    assert ["model-on-cpu" in codes(v) for v in settled([on_cpu, on_gpu])] == [True, False]


def test_unheld_codes_are_codes_of_rules():
    from sidecar.common.catalogue import load

    known = {k.split(".", 1)[1] for k in load("en") if k.startswith("warning.")}
    assert UNHELD_CODES <= known


def test_a_cpu_build_warning_goes_with_the_cpu_build():
    cpu = decide(facts(proc(runtime=CPU_RT, models=[model("cpu")])))
    gpu = decide(facts(proc(models=[model("cuda:0", inp="cuda:0")])))
    assert "cpu-build" in codes(cpu)
    assert ["cpu-build" in codes(v) for v in settled([cpu, gpu])] == [True, False]


# -- issue 39 item 14: a held warning says this poll's figures and goes with its facts ------------
def starved(v: Verdict) -> list[str]:
    return [en(w.message) for w in v.warnings if w.code == "data-starved"]


def test_a_held_data_starved_says_this_polls_wait() -> None:
    """It said "53 %" beside a breakdown of 0.47."""
    shown = settled_facts([job(steps=steps(0.53)), job(steps=steps(0.47)), job(steps=steps(0.45))])
    assert [starved(v) for v in shown] == [
        ["Process 100 waits for data 53% of each training step."],
        ["Process 100 waits for data 47% of each training step."],
        ["Process 100 waits for data 45% of each training step."],
    ]


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(steps(0.02), id="the wait fell under the release value"),
        pytest.param(steps(0.45, n=2), id="too few steps to say"),
        pytest.param(None, id="no breakdown"),
    ],
)
def test_a_held_data_starved_goes_with_its_facts(after: StepBreakdown | None) -> None:
    shown = settled_facts([job(steps=steps(0.6)), job(steps=after)])
    assert [bool(starved(v)) for v in shown] == [True, False]


def test_a_held_data_starved_names_only_the_processes_that_were_starved() -> None:
    """Held, the rule runs again about the processes it named: another at 45 % never crossed 0.5."""
    other = proc(200, is_target=False, models=[model("cuda:0")], steps=steps(0.45))
    shown = settled_facts([job(steps=steps(0.6)), facts(proc(models=[model("cuda:0")], steps=steps(0.45)), other)])
    assert [w.pids for w in shown[1].warnings if w.code == "data-starved"] == [(100,)]


def test_an_input_mismatch_goes_the_poll_the_input_is_where_the_model_is() -> None:
    """A GPU model moved mid-run: "the input is on the CPU" was held 2 polls beside an input on the GPU."""
    before = facts(proc(models=[model("cuda:0", inp="cpu")]))
    moved = facts(proc(models=[model("cuda:0", inp="cuda:0")]))
    shown = settled_facts([before, moved, moved])
    assert ["input-mismatch" in codes(v) for v in shown] == [True, False, False]


def test_a_job_that_ended_holds_nothing() -> None:
    """Its final state is what its final facts say, whether the sidecar polls on (--pid) or not
    (discovery): never a warning of a poll before, with that poll's figure."""
    running = [job(steps=steps(0.56)), job(steps=steps(0.47))]
    assert starved(settled_facts(running)[-1]) == ["Process 100 waits for data 47% of each training step."]
    ended = settled_facts([*running, replace(job(steps=steps(0.47)), target_alive=False)])[-1]
    assert not starved(ended)
    ended = settled_facts([*running, replace(job(steps=steps(0.56)), target_alive=False)])[-1]
    assert starved(ended) == ["Process 100 waits for data 56% of each training step."]


# -- issue 39 item 19: a job still importing is waited for, not told to add two lines -------------
@pytest.mark.parametrize(
    "age_s, waiting",
    [(0.0, True), (3.0, True), (Rules().probe_grace_s, False), (600.0, False), (None, False), (-5.0, False)],
)
def test_no_probe_in_a_jobs_first_seconds_is_waiting_for_it(age_s: float | None, waiting: bool) -> None:
    """Before `probe_grace_s` (a negative age: a clock other than the job's; None: unknown age)."""
    (w,) = [w for w in decide(replace(facts(unprobed()), target_age_s=age_s)).warnings if w.code == "no-probe"]
    assert (w.severity, en(w.message).startswith("Waiting for the probe")) == (
        ("info", True) if waiting else ("warning", False)
    )
    assert ("Add two lines" in en(w.hint)) is not waiting, en(w.hint)
    if waiting:
        assert f"started {age_s:.0f} s ago" in en(w.message) and f"{Rules().probe_grace_s:.0f} s" in en(w.hint)
