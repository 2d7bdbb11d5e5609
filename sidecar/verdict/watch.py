"""What is worth telling a watcher (issue 40, "the agent is told, not asked"): facts in, events out.

A watcher (the DSH plugin's `gpu_watch`, the MCP server's `watch_job`) wants to hear when a job's
verdict gets worse, an error appears or the job ends, never every poll. `watch_step` folds one
poll's settled verdict (hysteresis applied) into the job's `WatchLog`, a value carried from poll to
poll as the hysteresis state is, and gives the next log, with the events this poll raised in it (the
very same log when it raised none and nothing it remembers changed: most polls).

The events, at most one of each kind a poll:

- `worse`: the status fell in STATUS_RANK (GPU above MIXED above CPU) below the last status that had
  evidence. UNKNOWN is no evidence either way (a job's first polls, before its probe publishes; a
  probe that cannot be read): never a baseline and never a fall; the next status with evidence is
  measured against the one before it. The first status with evidence is the baseline, not an event:
  a job that starts on the CPU is told by its error (`model-on-cpu`, `cpu-build`, `cuda-unavailable`
  are errors), not by a fall it never made. A status that rises raises nothing.
- `error`: a warning of severity error whose code has not been told for this job yet. A warning held
  by hysteresis or standing is in every poll's verdict, and one that goes and comes back (a test loop
  whose inputs stay on the CPU, every epoch) is the same news again: each code is told once a job.
- `ended`: the poll that finds the job's root gone. Exactly one, and the last: it carries the final
  verdict (its status and its error codes: the final facts' verdict, nothing held), and the log
  raises nothing after it.

A job's first polls raise nothing: their status is UNKNOWN until the probe publishes, and no rule
gives an error before its facts are there (no-probe is an info through the job's grace period,
`probe_grace_s`, and a warning after it).

The log keeps the newest MAX_EVENTS events, each numbered (its count: 1, 2, ...), and a cursor that
names the log and its count, so that a watcher asks for the events after the cursor it last had and
misses none. A cursor of another log (the sidecar restarted under the job) is older than every event
of this log: they are all new to that watcher.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from sidecar.common.catalogue import Ref, ref
from sidecar.verdict.facts import Verdict

__all__ = [
    "EVENT_ENDED",
    "EVENT_ERROR",
    "EVENT_KINDS",
    "EVENT_WORSE",
    "MAX_EVENTS",
    "STATUS_RANK",
    "WatchEvent",
    "WatchLog",
    "event_text",
    "events_since",
    "parse_cursor",
    "watch_step",
]

EVENT_WORSE = "worse"
EVENT_ERROR = "error"
EVENT_ENDED = "ended"
EVENT_KINDS = (EVENT_WORSE, EVENT_ERROR, EVENT_ENDED)
# Where the compute goes, best last: the order a fall is measured in. UNKNOWN is not in it: no
# evidence is neither better nor worse than some.
STATUS_RANK = {"CPU": 0, "MIXED": 1, "GPU": 2}
MAX_EVENTS = 32  # kept per job: a watcher further behind is told how many it missed
_CURSOR = re.compile(r"(\d{1,16})-(\d{1,9})")


@dataclass(frozen=True, slots=True)
class WatchEvent:
    number: int  # its place in the job's log: 1, 2, ...
    kind: str  # EVENT_*
    time_unix_s: float  # the poll that raised it
    status: str  # the status then (for `ended`: the final one)
    previous_status: str | None = None  # `worse`: the status it fell from
    codes: tuple[str, ...] = ()  # `error`: the new error codes; `ended`: the final verdict's


@dataclass(frozen=True, slots=True)
class WatchLog:
    """One job's watch: what the next poll is measured against, and the events so far."""

    epoch: int | None = None  # the first poll's time in ms: names this log in its cursors
    baseline: str | None = None  # the last status with evidence (a key of STATUS_RANK)
    told: frozenset[str] = frozenset()  # the error codes told already
    ended: bool = False
    count: int = 0  # events raised so far (the newest's number)
    events: tuple[WatchEvent, ...] = ()  # the newest MAX_EVENTS, oldest first

    @property
    def cursor(self) -> str:
        """What a watcher hands back to hear of the events after this log's newest."""
        return f"{self.epoch or 0}-{self.count}"


def watch_step(log: WatchLog, verdict: Verdict, alive: bool, time_unix_s: float) -> WatchLog:
    """The log after one poll: `verdict` (settled), whether the job's root is `alive`, the poll's time."""
    if log.ended:
        return log
    epoch = log.epoch if log.epoch is not None else int(time_unix_s * 1000)
    if not alive:
        final = _error_codes(verdict)
        return _with(log, epoch, [(EVENT_ENDED, None, final)], verdict.status, time_unix_s, ended=True)
    raised: list[tuple[str, str | None, tuple[str, ...]]] = []
    rank = STATUS_RANK.get(verdict.status)
    baseline = log.baseline if rank is None else verdict.status
    if rank is not None and log.baseline is not None and rank < STATUS_RANK[log.baseline]:
        raised.append((EVENT_WORSE, log.baseline, ()))
    new = tuple(c for c in _error_codes(verdict) if c not in log.told)
    if new:
        raised.append((EVENT_ERROR, None, new))
    if not raised and baseline == log.baseline and epoch == log.epoch:
        return log
    return _with(
        replace(log, baseline=baseline, told=log.told | set(new)), epoch, raised, verdict.status, time_unix_s
    )


def _error_codes(verdict: Verdict) -> tuple[str, ...]:
    """The codes of the verdict's errors, in its order (most severe first), each once."""
    return tuple(dict.fromkeys(w.code for w in verdict.warnings if w.severity == "error"))


def _with(
    log: WatchLog,
    epoch: int,
    raised: list[tuple[str, str | None, tuple[str, ...]]],
    status: str,
    time_unix_s: float,
    *,
    ended: bool = False,
) -> WatchLog:
    events = [
        WatchEvent(log.count + i, kind, time_unix_s, status, previous, codes)
        for i, (kind, previous, codes) in enumerate(raised, 1)
    ]
    kept = (*log.events, *events)[-MAX_EVENTS:]
    return replace(log, epoch=epoch, ended=ended or log.ended, count=log.count + len(events), events=kept)


def parse_cursor(text: str) -> tuple[int, int]:
    """(epoch, count) of a cursor as WatchLog.cursor writes it, else ValueError (never quoting it)."""
    m = _CURSOR.fullmatch(text)
    if m is None:
        raise ValueError(
            "since must be a cursor of an earlier watch answer (digits-digits, e.g. 1733140000000-2)"
        )
    return int(m.group(1)), int(m.group(2))


def events_since(log: WatchLog, since: tuple[int, int] | None) -> tuple[tuple[WatchEvent, ...], int]:
    """The events after the cursor `since` (parse_cursor's), oldest first, and how many of those the
    log no longer keeps. None: none (a watch that starts now). A cursor of another log: all of them."""
    if since is None:
        return (), 0
    epoch, count = since
    after = count if epoch == (log.epoch or 0) and count <= log.count else 0
    events = tuple(e for e in log.events if e.number > after)
    return events, max(0, log.count - after - len(events))


def event_text(event: WatchEvent) -> Ref:
    """What the event says, in the catalogue's words (statuses and codes only: no process's text)."""
    codes = ", ".join(event.codes)
    if event.kind == EVENT_WORSE:
        return ref("watch.event.worse", previous=event.previous_status or "?", status=event.status)
    if event.kind == EVENT_ERROR:
        return ref("watch.event.error", codes=codes, status=event.status)
    if codes:
        return ref("watch.event.ended.errors", status=event.status, codes=codes)
    return ref("watch.event.ended", status=event.status)
