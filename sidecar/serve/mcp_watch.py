"""The MCP tool `watch_job(job?, since?, timeout_s?)` (issue 40, "the agent is told, not asked";
`dsh-sidecar mcp`, sidecar/serve/mcp_server.py): waits until the job's verdict gets worse, an error
appears or the job ends, and says so with the verdict now and the run against the previous run of the
same command, or says that nothing happened within the timeout. Either way it gives the cursor to
call it again with, so that a watch goes on without missing an event.

The events are the sidecar's watch (sidecar/verdict/watch.py, GET /watch: documents/watch.py), which
the tool asks every poll interval; the sidecar never waits for it. The wait stays under the tool
timeout of the common clients (DSH's MCP client and most others: 60 s): MAX_WATCH_S. MCP resource
subscriptions would notify without a wait, but DSH's MCP client bridges tools only, and the 2026-07-28
specification replaces them.

Event texts are the catalogue's words, statuses and warning codes: said as they are. The verdict's
message and warnings quote what the processes wrote: inside the <untrusted-data> block.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from sidecar.documents.bounds import MAX_ID_CHARS, MAX_MESSAGE_CHARS, clip, clip_opt, one_line_all
from sidecar.serve.mcp_schemas import DEFAULT_WATCH_S, MAX_WATCH_S, MIN_WATCH_S
from sidecar.serve.mcp_text import untrusted, warning_items

POLL_MIN_S, POLL_MAX_S = 0.25, 2.0  # how often the sidecar is asked: its poll interval, within these
MAX_WARNINGS_SHOWN = 8


class WatchBackend(Protocol):
    """What the tool reads (mcp_server's HttpBackend and LocalBackend); their ToolError on failure."""

    def watch(self, job: str | None, since: str | None) -> dict[str, Any]: ...


def _args(args: dict[str, Any], error: type[Exception]) -> tuple[str | None, str | None, float]:
    job, since, timeout_s = args.get("job"), args.get("since"), args.get("timeout_s", DEFAULT_WATCH_S)
    if job is not None and not isinstance(job, str):
        raise error("job must be a job id (a string) from list_jobs, or omitted for the default job")
    if since is not None and not isinstance(since, str):
        raise error("since must be the cursor of an earlier watch_job answer (a string), or omitted")
    if timeout_s is None:
        timeout_s = DEFAULT_WATCH_S
    try:
        ok = (
            not isinstance(timeout_s, bool)
            and isinstance(timeout_s, int | float)
            and math.isfinite(timeout_s)
        )
    except OverflowError:  # an integer of hundreds of digits is valid JSON
        ok = False
    if not ok:
        raise error(f"timeout_s must be a number of seconds, {MIN_WATCH_S:g} to {MAX_WATCH_S:g}")
    wait_s = min(MAX_WATCH_S, max(MIN_WATCH_S, float(timeout_s)))
    return (job or None) and job[: MAX_ID_CHARS * 2], (since or None) and since[:64], wait_s


def watch_job(
    backend: WatchBackend,
    args: dict[str, Any],
    error: type[Exception],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, Any], str]:
    """Ask the backend's watch until it has news (events, or the job has ended) or the wait is over."""
    job, since, wait_s = _args(args, error)
    deadline = clock() + wait_s
    doc = backend.watch(job, since)
    job = doc["job_id"]  # the default job, once chosen, is the one watched
    while not doc["events"] and doc["alive"] and clock() < deadline:
        pause = min(POLL_MAX_S, max(POLL_MIN_S, float(doc["interval_s"])))
        sleep(max(0.0, min(pause, deadline - clock())))
        doc = backend.watch(job, doc["cursor"])
    told = bool(doc["events"]) or not doc["alive"]
    out = _structured(doc, timed_out=not told, waited_s=wait_s)
    return out, _text(one_line_all(out))


def _structured(doc: dict[str, Any], *, timed_out: bool, waited_s: float) -> dict[str, Any]:
    c = doc["comparison"]
    return {
        "job_id": clip(doc["job_id"], MAX_ID_CHARS),
        "alive": doc["alive"],
        "timed_out": timed_out,
        "waited_s": waited_s,
        "cursor": clip(doc["cursor"], 64),
        "events": [
            {
                "number": e["number"],
                "kind": e["kind"],
                "time_unix_s": e["time_unix_s"],
                "status": e["status"],
                "previous_status": e["previous_status"],
                "codes": [clip(x, MAX_ID_CHARS) for x in e["codes"]],
                "text": clip(e["text"], MAX_MESSAGE_CHARS),
            }
            for e in doc["events"]
        ],
        "events_omitted": doc["events_omitted"],
        "status": doc["status"],
        "message": clip(doc["message"], MAX_MESSAGE_CHARS),
        "warnings": warning_items(doc["warnings"], MAX_WARNINGS_SHOWN),
        "comparison": None
        if c is None
        else {
            "outcome": c["outcome"],
            "message": clip(c["message"], MAX_MESSAGE_CHARS),
            "run": clip_opt(c["run"], MAX_ID_CHARS),
            "baseline": clip_opt(c["baseline"], MAX_ID_CHARS),
        },
    }


def _text(out: dict[str, Any]) -> str:
    job, cursor = out["job_id"], out["cursor"]
    if out["timed_out"]:
        lines = [
            f"No event in {out['waited_s']:g} s: job {job} is {out['status']} and still running. To go on "
            f'watching, call watch_job(job="{job}", since="{cursor}").'
        ]
    else:
        lines = [f"Job {job}: " + " ".join(e["text"] for e in out["events"])] if out["events"] else []
        if out["events_omitted"]:
            lines.append(f"({out['events_omitted']} earlier event(s) are no longer kept.)")
        if not out["alive"]:
            lines.append(f"Job {job} has ended: its verdict is final, nothing more will be told.")
        else:
            lines.append(f'To hear of what comes next, call watch_job(job="{job}", since="{cursor}").')
    c = out["comparison"]
    if c is not None:
        against = f" (run {c['run']} against {c['baseline']})" if c["baseline"] else ""
        lines.append(
            f"Against the previous run of the same command in the same folder{against}: {c['message']}"
        )
    data = [f"Job {job} now: {out['status']}: {out['message']}"]
    data += [
        f"- [{w['severity']}] {w['code']}: {w['message']}" + (f" Hint: {w['hint']}" if w["hint"] else "")
        for w in out["warnings"]
        if w["severity"] != "info"
    ]
    return "\n".join(lines + untrusted(data))
