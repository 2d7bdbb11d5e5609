"""The watch document (issue 40; declared in contract_watch.py): a job's verdict now, the events of its
watch log after a cursor (sidecar/verdict/watch.py) and, in an answer that carries news, its run
against the previous one. What both watchers read, the DSH plugin's `gpu_watch` over HTTP and the
MCP server's `watch_job` (over HTTP or in its own process), so that they tell the same things.

Never waits: a watcher polls with the cursor it was given. A long poll would hold one of the
server's few threads (sidecar/serve/wsgi.py THREADS) per watcher for its whole wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sidecar.common.catalogue import Ref, ref, render
from sidecar.common.runs import run_id
from sidecar.documents import contract
from sidecar.documents.bounds import MAX_MESSAGE_CHARS, clip
from sidecar.documents.runs import AmbiguousRun, NoPreviousRun, RunsUnavailable, UnknownRun
from sidecar.verdict.watch import WatchEvent, WatchLog, event_text, events_since

Doc = dict[str, Any]
NOT_ENOUGH_EVIDENCE = "not-enough-evidence"  # contract_runs.OUTCOMES's (verdict/compare.py's word)


def _text(text: Ref) -> tuple[str, Doc]:
    as_dict = text.as_dict(clip)
    return clip(render(as_dict, "en"), MAX_MESSAGE_CHARS), as_dict


def _event(e: WatchEvent) -> Doc:
    text, text_ref = _text(event_text(e))
    return {
        "number": e.number,
        "kind": e.kind,
        "time_unix_s": e.time_unix_s,
        "status": e.status,
        "previous_status": e.previous_status,
        "codes": list(e.codes[:64]),
        "text": text,
        "text_ref": text_ref,
    }


def watch_document(
    summary: Doc,
    time_unix_s: float,
    interval_s: float,
    log: WatchLog,
    since: tuple[int, int] | None,
    run_key: str | None,
) -> Doc:
    """The job's WatchDocument: `summary` (document.status_summary's, of the poll at `time_unix_s`), the
    events of `log` after `since` (verdict.watch.parse_cursor's; None: none), `run_key` its run's key
    in the ledger (None: not recorded). No comparison: `with_comparison` adds it where there is news."""
    events, omitted = events_since(log, since)
    doc = {
        "schema": contract.SCHEMA,
        "time_unix_s": time_unix_s,
        "interval_s": interval_s,
        "job_id": summary["job_id"],
        "run": run_key,
        "alive": summary["target"]["alive"] and not log.ended,
        "status": summary["status"],
        "message": summary["message"],
        "message_ref": summary["message_ref"],
        "warnings": summary["warnings"],
        "cursor": log.cursor,
        "events": [_event(e) for e in events],
        "events_omitted": omitted,
        "comparison": None,
    }
    return contract.check_if_enabled(doc, "watch")


def with_comparison(doc: Doc, compare: Callable[[str], Doc] | None) -> Doc:
    """`doc` with its comparison when it carries news (events, or its job has ended): its run against
    the previous run of the same command in the same folder, `compare` the runs source's
    compare_document (None: this sidecar keeps no runs); else `doc` as it is (the ledger is not read
    for an answer that tells nothing: watchers ask every few seconds)."""
    if not doc["events"] and doc["alive"]:
        return doc
    return contract.check_if_enabled({**doc, "comparison": comparison(doc["run"], compare)}, "watch")


def comparison(run_key: str | None, compare: Callable[[str], Doc] | None) -> Doc:
    """A WatchComparison of the run `run_key` (None: not recorded) against its previous run."""
    if compare is None:
        return _no_comparison(ref("watch.compare.no-runs"), None)
    if run_key is None:
        return _no_comparison(ref("watch.compare.not-recorded"), None)
    try:
        found = compare(run_key)
    except NoPreviousRun:
        return _no_comparison(ref("watch.compare.no-previous"), run_id(run_key))
    except (UnknownRun, AmbiguousRun):  # its first batch not written yet; a key names one run
        return _no_comparison(ref("watch.compare.not-recorded"), None)
    except RunsUnavailable as exc:
        return _no_comparison(ref("watch.compare.unavailable", reason=clip(str(exc), 200)), run_id(run_key))
    return {
        "outcome": found["outcome"],
        "message": found["message"],
        "message_ref": found["message_ref"],
        "run": found["run"]["id"],
        "baseline": found["baseline"]["id"],
    }


def _no_comparison(why: Ref, run: str | None) -> Doc:
    text, text_ref = _text(why)
    return {
        "outcome": NOT_ENOUGH_EVIDENCE,
        "message": text,
        "message_ref": text_ref,
        "run": run,
        "baseline": None,
    }
