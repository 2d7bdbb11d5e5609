"""The watch document's declarations (issue 40, "the agent is told, not asked"): GET
/api/dsh-gpu-dashboard/watch?job=ID&since=CURSOR, what the DSH plugin's `gpu_watch` and the MCP
server's `watch_job` poll. Built by sidecar/documents/watch.py from a job's watch log
(sidecar/verdict/watch.py). Kept apart from contract.py only for its length; contract.py lists it among
its documents, so the schema, docs/api.md and the JSDoc typedefs carry it. The types declared in
contract.py are named here by reference (Lazy)."""

from __future__ import annotations

from sidecar.documents.contract_runs import OUTCOMES
from sidecar.documents.contract_types import BOOL, INT, NUM, STR, Enum, F, Lazy, ListOf, Obj

# sidecar/verdict/watch.py's words, repeated here so that the contract reads without the verdict;
# tests/unit/test_watch_route.py keeps the two equal.
EVENT_KINDS = ("worse", "error", "ended")
MAX_WATCH_EVENTS = 32  # verdict/watch.py MAX_EVENTS: the events a job's log keeps


def watch_document(schema: int, statuses: tuple[str, ...]) -> Obj:
    """The WatchDocument, in the words contract.py gives it (its schema and statuses)."""
    text_ref = Lazy("TextRef")
    event = Obj(
        "WatchEvent",
        "What a watcher is told: the verdict got worse, an error appeared, or the job ended.",
        {
            "number": F(INT, "its place in the job's watch: 1, 2, ..."),
            "kind": F(
                Enum(EVENT_KINDS),
                "`worse`: the status fell (GPU above MIXED above CPU; UNKNOWN is no evidence either way) below "
                "the last status with evidence; `error`: a warning of severity error appeared whose code had not "
                "been told for this job; `ended`: the job's root exited (once, the last event)",
            ),
            "time_unix_s": F(NUM, "the poll that raised it"),
            "status": F(Enum(statuses), "the status then; `ended`: the final one"),
            "previous_status": F(Enum(statuses), "`worse`: the status it fell from; else null", null=True),
            "codes": F(
                ListOf(STR, 64), "`error`: the new error codes; `ended`: the final verdict's error codes"
            ),
            "text": F(STR, "what happened, in English"),
            "text_ref": F(text_ref, "the same in the catalogue"),
        },
    )
    comparison = Obj(
        "WatchComparison",
        "The job's run judged against the previous run of the same command in the same folder (GET "
        "/api/dsh-gpu-dashboard/compare?a=RUN), or why it cannot be: `not-enough-evidence` with the reason.",
        {
            "outcome": F(
                Enum(OUTCOMES), "the comparison's outcome (the throughput's), as a CompareDocument's"
            ),
            "message": F(STR, "its headline, or why there is no comparison, in English"),
            "message_ref": F(text_ref, "the same in the catalogue"),
            "run": F(STR, "the job's run, by its short id; null when it is not recorded", null=True),
            "baseline": F(STR, "the run it was compared with, by its short id; null: none", null=True),
        },
    )
    return Obj(
        "WatchDocument",
        "GET /api/dsh-gpu-dashboard/watch[?job=ID][&since=CURSOR]: a job's verdict now and what happened "
        "since `cursor`. Never waits: a watcher asks again with the `cursor` it was given and hears of every "
        "event once (a job keeps its newest 32). Without `since`, no event (a watch that starts now).",
        {
            "schema": F(Enum((schema,)), "the document's schema; a client that reads another says so"),
            "time_unix_s": F(NUM, "when the poll behind it ran"),
            "interval_s": F(NUM, "time between polls: how often asking again can tell something new"),
            "job_id": F(STR, "the job watched (see JobsDocument)"),
            "run": F(STR, "its run in the runs ledger, by its key; null when not recorded", null=True),
            "alive": F(BOOL, "false once the job's root has exited: its verdict is final, no event follows"),
            "status": F(Enum(statuses), "where the compute goes now"),
            "message": F(STR, "the verdict in one sentence, in English"),
            "message_ref": F(text_ref, "the same in the catalogue"),
            "warnings": F(ListOf(Lazy("Warning")), "most severe first, as in the StatusDocument"),
            "cursor": F(STR, "the watch so far: pass it as `since` to hear only of what comes after"),
            "events": F(ListOf(event, MAX_WATCH_EVENTS), "the events after `since`, oldest first"),
            "events_omitted": F(INT, "events after `since` the job no longer keeps"),
            "comparison": F(
                comparison,
                "in an answer with events or whose job has ended: its run against the previous one; else null",
                null=True,
            ),
        },
    )
