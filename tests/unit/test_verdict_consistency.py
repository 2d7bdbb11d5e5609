"""Issue 25 item 4: a verdict never says two opposite things, in a job's first seconds or ever.

`no-probe` never stands beside a probed verdict (the hysteresis held it for 3 polls after the probe
appeared), and a probe that runs but cannot be read (another user's private segment) is
`probe-unreadable` alone, never also "add two lines to your training script".
"""

from __future__ import annotations

import pytest

from sidecar.verdict import HysteresisState, ProcessFacts, Rules, decide, settle
from sidecar.verdict.rules import PROBE_PRESENT_STATES, UNHELD_CODES
from tests.helpers.verdict_facts import CPU_RT, en, facts, model, proc

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
