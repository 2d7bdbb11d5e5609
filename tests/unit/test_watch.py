"""What is a watch event (sidecar/verdict/watch.py): a job's polls, through decide and settle as the
poller runs them, folded into its watch log; its first seconds and its last included."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.common.catalogue import render
from sidecar.verdict import Finding, HysteresisState, ProcGpu, Verdict, decide, settle
from sidecar.verdict.watch import (
    EVENT_ENDED,
    EVENT_ERROR,
    EVENT_WORSE,
    MAX_EVENTS,
    WatchLog,
    event_text,
    events_since,
    parse_cursor,
    watch_step,
)
from tests.helpers.verdict_facts import CPU_RT, CUDA_RT, facts, model, proc

T0 = 1_733_140_000.0
ON_GPU = proc(models=[model("cuda:0", inp="cuda:0")], gpu=[ProcGpu(0, 900.0, 70.0)])
ON_CPU = proc(models=[model("cpu", inp="cpu")])  # a usable GPU, the model never moved: model-on-cpu
NO_PROBE = proc(runtime=None)


class Job:
    """A job's polls as the poller makes them: decide, settle, then the watch step."""

    def __init__(self) -> None:
        self.log = WatchLog()
        self.state = HysteresisState()
        self.t = T0

    def poll(self, *procs, alive: bool = True, age_s: float = 60.0):
        f = facts(*procs, target_alive=alive, target_age_s=age_s)
        verdict, self.state = settle(self.state, decide(f), f.rules, {p.pid for p in f.processes}, f)
        before = self.log.count
        self.log = watch_step(self.log, verdict, alive, self.t)
        self.t += 1.5
        return verdict, [e for e in self.log.events if e.number > before]


def test_a_job_s_first_seconds_raise_nothing_until_the_verdict_has_evidence():
    job = Job()
    for age in (0.5, 2.0, 5.0, 10.0):  # no probe yet, within its grace: an info, status UNKNOWN
        verdict, events = job.poll(NO_PROBE, age_s=age)
        assert verdict.status == "UNKNOWN" and [w.severity for w in verdict.warnings] == ["info"]
        assert events == []
    verdict, events = job.poll(ON_GPU, age_s=12.0)  # the probe publishes: the first evidence
    assert verdict.status == "GPU" and events == []
    assert job.log.baseline == "GPU"


def test_a_fall_and_a_new_error_are_told_once_and_the_end_once_with_the_final_verdict():
    job = Job()
    job.poll(ON_GPU)
    verdict, events = job.poll(ON_CPU)
    assert verdict.status == "CPU"
    assert [(e.kind, e.previous_status, e.status, e.codes) for e in events] == [
        (EVENT_WORSE, "GPU", "CPU", ()),
        (EVENT_ERROR, None, "CPU", ("model-on-cpu",)),
    ]
    assert [e.number for e in events] == [1, 2]
    for _ in range(5):  # the error stands, poll after poll: told already
        assert job.poll(ON_CPU)[1] == []
    verdict, events = job.poll(ON_CPU, alive=False)  # the root is gone: its final state
    assert [(e.kind, e.status, e.codes) for e in events] == [(EVENT_ENDED, "CPU", ("model-on-cpu",))]
    assert job.log.ended
    for p in (ON_GPU, ON_CPU, NO_PROBE):  # nothing after the end, whatever the polls say
        assert job.poll(p, alive=False)[1] == []
        assert job.poll(p)[1] == []
    assert job.log.count == 3


def test_a_job_that_ends_in_its_first_poll_raises_one_ended():
    job = Job()
    _, events = job.poll(NO_PROBE, alive=False, age_s=0.2)
    assert [(e.kind, e.status, e.codes) for e in events] == [(EVENT_ENDED, "UNKNOWN", ())]
    assert render(event_text(events[0]), "en") == "The job ended; its final verdict: UNKNOWN."


def test_improvements_raise_nothing_and_unknown_is_no_evidence_either_way():
    job = Job()
    job.poll(ON_CPU)
    assert job.log.baseline == "CPU" and job.log.count == 1  # the error only: no fall from nowhere
    assert job.poll(ON_GPU)[1] == []  # CPU -> GPU: better
    assert job.poll(NO_PROBE)[1] == []  # GPU -> UNKNOWN: the evidence is gone, not worse
    assert job.log.baseline == "GPU"
    _, events = job.poll(ON_CPU)  # measured against the last status with evidence
    assert [(e.kind, e.previous_status) for e in events] == [(EVENT_WORSE, "GPU")]


def test_an_error_that_goes_and_comes_back_is_told_once():
    job = Job()
    job.poll(ON_GPU)
    mismatch = proc(models=[model("cuda:0", inp="cpu")], gpu=[ProcGpu(0, 900.0, 70.0)])
    _, events = job.poll(mismatch)
    assert [(e.kind, e.codes) for e in events] == [(EVENT_ERROR, ("input-mismatch",))]
    assert job.poll(ON_GPU)[1] == []
    assert job.poll(mismatch)[1] == []


def test_a_job_that_starts_on_a_cpu_build_is_told_by_its_error_not_a_fall():
    job = Job()
    cpu_build = proc(runtime=CPU_RT, models=[model("cpu", inp="cpu")])
    verdict, events = job.poll(cpu_build)
    assert verdict.status == "CPU"
    assert [(e.kind, e.codes) for e in events] == [(EVENT_ERROR, ("cpu-build",))]


def test_a_steady_poll_gives_the_same_log_object():
    job = Job()
    job.poll(ON_GPU)
    before = job.log
    job.poll(ON_GPU)
    assert job.log is before


def _verdict(status: str, *codes: str) -> Verdict:
    from sidecar.common.catalogue import ref

    found = tuple(Finding(c, "error", ref("warning.model-on-cpu", model="m")) for c in codes)
    return Verdict(status, ref("message.gpu"), found, None, None, None)


def test_the_cursor_gives_the_events_after_it_and_says_how_many_it_no_longer_keeps():
    log = watch_step(WatchLog(), _verdict("GPU"), True, T0)
    start = parse_cursor(log.cursor)
    assert events_since(log, None) == ((), 0) and events_since(log, start) == ((), 0)
    for i in range(MAX_EVENTS + 5):  # a new error code each poll
        log = watch_step(log, _verdict("GPU", f"code-{i}"), True, T0 + i)
    events, omitted = events_since(log, start)
    assert len(events) == MAX_EVENTS and omitted == 5 and events[0].number == 6
    events, omitted = events_since(log, parse_cursor(log.cursor))
    assert events == () and omitted == 0
    middle = (start[0], log.count - 2)
    assert [e.number for e in events_since(log, middle)[0]] == [log.count - 1, log.count]
    # a cursor of another log (a sidecar restarted under the job): every event here is new to it
    assert len(events_since(log, (start[0] + 1, 3))[0]) == MAX_EVENTS
    assert len(events_since(log, (start[0], log.count + 7))[0]) == MAX_EVENTS


@pytest.mark.parametrize("bad", ["", "12", "a-1", "1-", "-1", "1-2-3", "1" * 17 + "-1", "1-\n"])
def test_a_cursor_that_is_not_one_is_refused_without_being_quoted(bad):
    with pytest.raises(ValueError) as caught:
        parse_cursor(bad)
    assert "since must be a cursor" in str(caught.value) and (not bad or bad not in str(caught.value))


def test_the_events_say_what_happened_in_both_languages():
    log = watch_step(WatchLog(), _verdict("GPU"), True, T0)
    log = watch_step(log, _verdict("MIXED", "input-mismatch"), True, T0 + 1)
    log = watch_step(log, _verdict("MIXED", "input-mismatch"), False, T0 + 2)
    texts = [render(event_text(e), "en") for e in log.events]
    assert texts == [
        "The verdict got worse: GPU → MIXED.",
        "An error appeared: input-mismatch (status MIXED).",
        "The job ended; its final verdict: MIXED, with the error(s) input-mismatch.",
    ]
    assert all("{" not in render(event_text(e), "zh") for e in log.events)


def test_a_cuda_runtime_that_loses_cuda_is_an_error_once():
    job = Job()
    job.poll(ON_GPU)
    lost = proc(runtime=replace(CUDA_RT, cuda_available=False), models=[model("cpu", inp="cpu")])
    verdict, events = job.poll(lost)
    assert verdict.status == "CPU"
    assert [(e.kind, e.codes) for e in events] == [(EVENT_WORSE, ()), (EVENT_ERROR, ("cuda-unavailable",))]
