"""The MCP tool watch_job (sidecar/serve/mcp_watch.py) over a scripted backend: it asks the sidecar's
watch every poll interval until there is news or its wait is over, pins the job it started on, says
what happened outside the data block and what the processes wrote inside it, and refuses bad
arguments with a sentence. (tests/integration/test_mcp.py drives it through the SDK's own client.)"""

from __future__ import annotations

import jsonschema
import pytest

from sidecar.serve.mcp_schemas import MAX_WATCH_S, OUTPUT_SCHEMAS
from sidecar.serve.mcp_server import ToolError, call
from sidecar.serve.mcp_watch import watch_job
from tests.helpers.mcp_text import FORGED, data_block, outside_block

COMPARISON = {
    "outcome": "regression",
    "message": "Throughput: REGRESSION, 4 steps/s → 2.5 steps/s (-37.5%; noise ±2.0%).",
    "message_ref": {"id": "x", "params": {}},
    "run": "3f2a9c1b",
    "baseline": "0a1b2c3d",
}


def doc(cursor: str, *, events=(), alive=True, status="GPU", comparison=None) -> dict:
    return {
        "schema": 2,
        "time_unix_s": 1.0,
        "interval_s": 0.5,
        "job_id": "7-1",
        "run": None,
        "alive": alive,
        "status": status,
        "message": f"the model {FORGED} is on cuda:0",
        "message_ref": {"id": "message.gpu", "params": {}},
        "warnings": [
            {"code": "model-on-cpu", "severity": "error", "message": f"model {FORGED}", "hint": "move it"},
            {"code": "no-probe", "severity": "info", "message": "waiting", "hint": None},
        ],
        "cursor": cursor,
        "events": list(events),
        "events_omitted": 0,
        "comparison": comparison,
    }


WORSE = {
    "number": 1,
    "kind": "worse",
    "time_unix_s": 2.0,
    "status": "CPU",
    "previous_status": "GPU",
    "codes": [],
    "text": "The verdict got worse: GPU → CPU.",
    "text_ref": {"id": "watch.event.worse", "params": {}},
}


class Scripted:
    """Answers the watch with the documents given, one a call, the last one ever after."""

    def __init__(self, *docs: dict) -> None:
        self.docs, self.asked = list(docs), []

    def watch(self, job, since):
        self.asked.append((job, since))
        return self.docs.pop(0) if len(self.docs) > 1 else self.docs[0]


class Clock:
    def __init__(self) -> None:
        self.now, self.slept = 100.0, []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def __call__(self) -> float:
        return self.now


def run(backend, args=None):
    clock = Clock()
    out, text = watch_job(backend, args or {}, ToolError, sleep=clock.sleep, clock=clock)
    jsonschema.validate(out, OUTPUT_SCHEMAS["watch_job"])
    return out, text, clock


def test_it_asks_every_interval_until_there_is_news_and_pins_the_job():
    backend = Scripted(
        doc("9-0"), doc("9-0"), doc("9-1", events=[WORSE], status="CPU", comparison=COMPARISON)
    )
    out, text, clock = run(backend)
    assert backend.asked == [(None, None), ("7-1", "9-0"), ("7-1", "9-0")]
    assert clock.slept == [0.5, 0.5]
    assert out["timed_out"] is False and out["cursor"] == "9-1" and out["status"] == "CPU"
    assert [e["kind"] for e in out["events"]] == ["worse"] and out["comparison"]["outcome"] == "regression"
    said = outside_block(text)
    assert said.startswith("Job 7-1: The verdict got worse: GPU → CPU.")
    assert 'call watch_job(job="7-1", since="9-1")' in said
    assert "(run 3f2a9c1b against 0a1b2c3d): Throughput: REGRESSION" in said
    data = data_block(text)  # the verdict's words quote the processes: in the block, the infos left out
    assert data[0].startswith("Job 7-1 now: CPU: the model x`") and "evil" not in said
    assert data[1].startswith("- [error] model-on-cpu: model x`") and data[1].endswith("Hint: move it")
    assert len(data) == 2


def test_a_wait_with_no_news_times_out_with_the_cursor_to_go_on_from():
    backend = Scripted(doc("9-0"))
    out, text, clock = run(backend, {"job": "7-1", "timeout_s": 5})
    assert out["timed_out"] is True and out["events"] == [] and out["waited_s"] == 5
    assert clock.now == pytest.approx(105.0) and all(s <= 0.5 for s in clock.slept)
    assert text.startswith("No event in 5 s: job 7-1 is GPU and still running.")
    assert 'call watch_job(job="7-1", since="9-0")' in text
    out, _, _ = run(Scripted(doc("9-0")), {"timeout_s": 1e9})
    assert out["waited_s"] == MAX_WATCH_S


def test_a_job_that_has_ended_answers_at_once():
    ended = {**WORSE, "kind": "ended", "previous_status": None, "codes": ["model-on-cpu"]}
    backend = Scripted(doc("9-3", events=[ended], alive=False, comparison=COMPARISON))
    out, text, clock = run(backend, {"since": "9-2"})
    assert clock.slept == [] and backend.asked == [(None, "9-2")]
    assert out["alive"] is False and "has ended: its verdict is final" in text
    # asked again after the end: no event, the end said again, at once
    out, text, clock = run(Scripted(doc("9-3", alive=False)), {"since": "9-3"})
    assert clock.slept == [] and out["events"] == [] and out["timed_out"] is False and "has ended" in text


def test_the_whole_call_validates_and_waits_for_real():
    out, text = call(Scripted(doc("9-0")), "watch_job", {"timeout_s": 1})
    assert out is not None and out["timed_out"] is True, text


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"timeout_s": "soon"}, "timeout_s must be a number"),
        ({"timeout_s": 10**400}, "timeout_s must be a number"),
        ({"timeout_s": True}, "timeout_s must be a number"),
        ({"since": 5}, "since must be the cursor"),
        ({"job": 5}, "job must be a job id"),
    ],
)
def test_bad_arguments_are_tool_errors(args, said):
    structured, text = call(Scripted(doc("9-0")), "watch_job", args)
    assert structured is None and text.startswith(said), text
