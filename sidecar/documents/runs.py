"""The runs documents (issue 40; declared in contract_runs.py): the ledger's typed records
(sidecar/common/runs.py) and a comparison (sidecar/verdict/compare.py) in, JSON-ready documents out.
Presentation only: which runs, and which is the baseline, the caller's runs source answers
(sidecar/poll/runs_source.py, reading the ledger).

Also the words a person uses for runs, one definition each for the CLI, the routes and the MCP
tools: a run named by its short id, its key or its job id (`check_run_name`, `matching_runs`), and
`since` as `7d`, `12h`, `30m`, an ISO date or a UNIX time (`parse_since`).

Everything the ledger hands back is input (a command line and a folder are the user's text; the file
may have been edited): strings are clipped here, and the JSON the routes and the CLI print escapes
steering characters (bounds.json_text); the CLI's text makes them one_line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import fields
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from sidecar.common.catalogue import Ref, render
from sidecar.common.runs import RUN_ID_DIGITS, MinuteFigures, RunDetail, RunRecord, run_id
from sidecar.documents import contract
from sidecar.documents.bounds import MAX_ID_CHARS, MAX_MESSAGE_CHARS, clip, clip_args, clip_opt
from sidecar.documents.contract_runs import (
    MAX_CANDIDATES,
    MAX_RUN_MINUTES,
    MAX_RUN_TIMELINE,
    MAX_RUNS_LISTED,
    MAX_SETTINGS,
)

if TYPE_CHECKING:  # the comparison is imported where one is made (a sidecar's start needs none)
    from sidecar.verdict.compare import Cause, Comparison, FigureChange, Note, Reason, ReasonShare

Doc = dict[str, Any]  # a document: its shape is contract_runs.py's, checked at run time (DSH_CONTRACT_CHECK)

# A run's name as given: a short id (hex), a job id (`<pid>-<ticks>`) or a key (`<boot id>/<job id>`).
MAX_RUN_NAME_CHARS = 128
RUN_NAME = re.compile(rf"[A-Za-z0-9._:/-]{{1,{MAX_RUN_NAME_CHARS}}}")
MIN_ID_DIGITS = 4  # the shortest prefix of a short id accepted
_HEX = re.compile(r"[0-9a-f]+")
MAX_SINCE_CHARS = 40
MAX_SINCE_S = 10 * 366 * 86_400.0  # `since` at most ten years back
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)\s*([smhdw])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3_600.0, "d": 86_400.0, "w": 604_800.0}


# ---------------------------------------------------------------------------------------------
# What the runs source raises (the server and the CLI answer each with its own words and code)
# ---------------------------------------------------------------------------------------------
class RunsError(Exception):
    """A runs question that cannot be answered; the message says why and what to do."""


class RunsUnavailable(RunsError):
    """The ledger cannot be opened or read (its LedgerError's message)."""


class UnknownRun(RunsError):
    """No run of that name (`candidates`: none)."""

    candidates: tuple[Doc, ...] = ()


class AmbiguousRun(RunsError):
    """More than one run of that name: `candidates`, Run documents, say which."""

    def __init__(self, message: str, candidates: Sequence[Doc]) -> None:
        super().__init__(message)
        self.candidates = tuple(candidates)


class NoPreviousRun(RunsError):
    """`compare` without a baseline, for a run whose command in its folder never ran before."""


# ---------------------------------------------------------------------------------------------
# Names and times as a person gives them
# ---------------------------------------------------------------------------------------------
def check_run_name(text: str) -> str:
    """`text` when it can name a run (letters, digits and `._:/-`, at most 128), else ValueError
    whose message never quotes the text (it may hold control or bidi characters)."""
    if not RUN_NAME.fullmatch(text):
        raise ValueError(
            f"a run is named by its id (hex digits, as `dsh-sidecar runs` lists it), its job id "
            f"(PID-TICKS) or its key: letters, digits and ._:/- only, at most {MAX_RUN_NAME_CHARS}"
        )
    return text


def matching_keys(names: Iterable[tuple[str, str]], name: str) -> list[str]:
    """The keys of the runs `name` (check_run_name's) names, of the (key, job id) pairs given: the
    one whose key it is; else those whose job id it is, or whose short id starts with it
    (MIN_ID_DIGITS hex digits or more)."""
    names = list(names)
    if any(key == name for key, _ in names):
        return [name]
    prefix = name.lower() if len(name) >= MIN_ID_DIGITS and _HEX.fullmatch(name.lower()) else None
    return [
        key
        for key, job_id in names
        if job_id == name or (prefix is not None and run_id(key, 64).startswith(prefix))
    ]


def shown_ids(keys: Iterable[str]) -> dict[str, str]:
    """Each key's short id as listed together: RUN_ID_DIGITS digits, two more for all of them while two
    share them (one length: the column stays aligned, and each is a prefix of the run's id)."""
    keys = list(dict.fromkeys(keys))
    digests = {key: run_id(key, 64) for key in keys}
    digits = RUN_ID_DIGITS
    while digits < 64 and len({d[:digits] for d in digests.values()}) < len(digests):
        digits += 2
    return {key: d[:digits] for key, d in digests.items()}


class WindowTime(NamedTuple):
    """A time as a person gives it: `ago_s` before now (a duration) or `at_unix_s`."""

    ago_s: float | None = None
    at_unix_s: float | None = None

    def resolve(self, now_unix_s: float) -> float:
        return now_unix_s - self.ago_s if self.ago_s is not None else float(self.at_unix_s or 0.0)


def parse_when(text: str) -> WindowTime:
    """A time of `since` (the runs route and command) and `--since` / `--until` (report): a duration
    back from now (`7d`, `12h`, `30m`, `90s`, `2w`), an ISO date or time (`2026-12-01`,
    `2026-12-01T08:00`: UTC unless it gives `Z` or an offset) or a UNIX time in seconds
    (`@1764979200`, or the bare number the history route takes). ValueError saying what is accepted."""
    text = text.strip()
    usage = (
        "a duration back from now (7d, 12h, 30m), a UTC date or time in ISO 8601 (2026-12-01, "
        "2026-12-01T08:00) or a UNIX time in seconds (@1764979200)"
    )
    if not text or len(text) > MAX_SINCE_CHARS or not text.isascii() or not text.isprintable():
        raise ValueError(usage)
    duration = _DURATION.fullmatch(text.lower())
    if duration:
        back_s = float(duration.group(1)) * _UNIT_S[duration.group(2)]
        if back_s > MAX_SINCE_S:
            raise ValueError(f"at most ten years back: {usage}")
        return WindowTime(ago_s=back_s)
    try:
        value = float(text.removeprefix("@"))
    except ValueError:
        value = None
    if value is not None:
        if not math.isfinite(value) or value < 0:
            raise ValueError(usage)
        return WindowTime(at_unix_s=value)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(usage) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return WindowTime(at_unix_s=when.timestamp())


def parse_since(text: str, now_unix_s: float) -> float:
    """`since` as a UNIX time (parse_when, resolved at ``now_unix_s``); ValueError naming `since`."""
    try:
        return parse_when(text).resolve(now_unix_s)
    except ValueError as exc:
        said = str(exc)
        raise ValueError(f"since is {said}" if said.startswith("a duration") else f"since: {said}") from None


# ---------------------------------------------------------------------------------------------
# The documents
# ---------------------------------------------------------------------------------------------
def _number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _strs(values: Iterable[str], limit: int) -> list[str]:
    return [clip(v, MAX_ID_CHARS) for v in list(values)[:limit]]


def run_entry(record: RunRecord, shown_id: str | None = None) -> Doc:
    """A Run: the record as the runs list shows it (`shown_id`: shown_ids', else the short id)."""
    i, t = record.identity, record.totals
    wall_s = t.wall_s if math.isfinite(t.wall_s) and t.wall_s > 0 else 0.0
    rate = t.steps / wall_s if t.steps is not None and wall_s > 0 else None
    return {
        "id": shown_id or run_id(i.key),
        "key": clip(i.key),
        "job_id": clip(i.job_id, MAX_ID_CHARS),
        "host": clip(i.host),
        "user": clip_opt(i.user, MAX_ID_CHARS),
        "uid": i.uid,
        "command": clip_args(i.command),
        "cwd": clip_opt(i.cwd),
        "started_unix_s": i.started_unix_s,
        "last_seen_unix_s": _number(record.last_seen_unix_s),
        "ended_unix_s": _number(record.ended_unix_s),
        "state": record.state,
        "exit_code": record.exit_code,
        "status": clip_opt(record.status, MAX_ID_CHARS),
        "warnings": _strs(record.warnings, 64),
        "wall_s": wall_s,
        "steps": t.steps,
        "step_rate_hz": _number(rate),
        "gpu_held_s": t.gpu_held_s if math.isfinite(t.gpu_held_s) else 0.0,
        "gpu_busy_s": t.gpu_busy_s if math.isfinite(t.gpu_busy_s) else 0.0,
        "energy_j": _number(t.energy_j),
        "gpu_mem_peak_mib": _number(t.gpu_mem_peak_mib),
        "power_peak_w": _number(t.power_peak_w),
        "temperature_peak_c": _number(t.temperature_peak_c),
        "gpu_models": _strs(record.setup.gpu_models, 64),
        "distributed_key": clip_opt(i.distributed_key),
        "world_size": i.world_size,
        "slurm_job": clip_opt(i.slurm_job, MAX_ID_CHARS),
        "pod": clip_opt(i.pod),
    }


def runs_document(
    records: Sequence[RunRecord],
    *,
    time_unix_s: float,
    since_unix_s: float | None,
    truncated: bool,
    notice: str | None = None,
) -> Doc:
    """The RunsDocument of `records` (the last seen first, as the ledger lists them)."""
    listed = list(records[:MAX_RUNS_LISTED])
    ids = shown_ids(r.identity.key for r in listed)
    doc = {
        "schema": contract.SCHEMA,
        "time_unix_s": time_unix_s,
        "since_unix_s": since_unix_s,
        "runs": [run_entry(r, ids[r.identity.key]) for r in listed],
        "truncated": truncated or len(records) > len(listed),
        "notice": clip_opt(notice, MAX_MESSAGE_CHARS),
    }
    return contract.check_if_enabled(doc, "runs")


def _minute(m: MinuteFigures) -> Doc:
    out: Doc = {}
    for f in fields(MinuteFigures):
        if f.name == "step_rate_sq_hz2":
            continue  # the comparison's, not a reader's
        value = getattr(m, f.name)
        if f.name == "clock_reasons":
            out[f.name] = _strs(value, 32)
        elif isinstance(value, float):
            out[f.name] = _number(value) if f.default is None else (value if math.isfinite(value) else 0.0)
        else:
            out[f.name] = value
    return out


def run_document(detail: RunDetail, previous: RunRecord | None = None) -> Doc:
    """The RunDocument of `detail` (the ledger's, oldest first), naming its `previous` run."""
    s = detail.record.setup
    timeline = detail.timeline[-MAX_RUN_TIMELINE:]
    minutes = detail.minutes[-MAX_RUN_MINUTES:]
    doc = {
        "schema": contract.SCHEMA,
        "run": run_entry(detail.record),
        "setup": {
            "torch_version": clip_opt(s.torch_version, MAX_ID_CHARS),
            "torch_cuda": clip_opt(s.torch_cuda, MAX_ID_CHARS),
            "driver_version": clip_opt(s.driver_version, MAX_ID_CHARS),
            "precision": clip_opt(s.precision, MAX_ID_CHARS),
            "loader": [
                {"name": clip(name, MAX_ID_CHARS), "value": clip(value, MAX_ID_CHARS)}
                for name, value in s.loader[:MAX_SETTINGS]
            ],
            "processes": s.processes,
        },
        "previous": None if previous is None else run_id(previous.identity.key),
        "timeline": [
            {
                "time_unix_s": c.time_unix_s,
                "status": clip(c.status, MAX_ID_CHARS),
                "warnings": _strs(c.warnings, 64),
            }
            for c in timeline
        ],
        "timeline_omitted": len(detail.timeline) - len(timeline),
        "minutes": [_minute(m) for m in minutes],
        "minutes_omitted": len(detail.minutes) - len(minutes),
    }
    return contract.check_if_enabled(doc, "run")


def _text(ref: Ref) -> Doc:
    """`text` (English, clipped) and `text_ref` (its params clipped: they quote commands and hosts)."""
    as_dict = ref.as_dict(clip)
    return {"text": clip(render(as_dict, "en"), MAX_MESSAGE_CHARS), "text_ref": as_dict}


def _figure(f: FigureChange) -> Doc:
    return {
        "figure": f.figure,
        "baseline": _number(f.baseline),
        "run": _number(f.run),
        "change_ratio": _number(f.change),
        "band_ratio": _number(f.band),
        "baseline_minutes": f.minutes[0],
        "run_minutes": f.minutes[1],
        "outcome": f.outcome,
        **_text(f.text),
    }


def _reason(r: Reason) -> Doc:
    return {
        "code": r.code,
        "baseline": clip(r.baseline),
        "run": clip(r.run),
        "detail": clip_opt(r.detail, MAX_ID_CHARS),
        **_text(r.text),
    }


def _cause(c: Cause) -> Doc:
    return {
        "code": c.code,
        "share_fraction": c.share,
        "baseline_s": c.baseline_s,
        "run_s": c.run_s,
        "baseline_fraction": c.baseline_fraction,
        "run_fraction": c.run_fraction,
        "reasons": [_reason(r) for r in c.reasons],
        **_text(c.text),
    }


def _reason_share(r: ReasonShare) -> Doc:
    return {"code": r.reason.code, "share_fraction": r.share, "parts": list(r.parts), **_text(r.text)}


def _note(n: Note) -> Doc:
    return {"code": n.code, **_text(n.text)}


def compare_document(comparison: Comparison, run: RunRecord, baseline: RunRecord, *, chosen: bool) -> Doc:
    """The CompareDocument of `comparison` (`run` judged against `baseline`); `chosen`: the ledger
    chose the baseline (the previous run), else the caller named it."""
    c = comparison
    ids = shown_ids((run.identity.key, baseline.identity.key))
    headline = _text(c.text)
    doc = {
        "schema": contract.SCHEMA,
        "run": run_entry(run, ids[run.identity.key]),
        "baseline": run_entry(baseline, ids[baseline.identity.key]),
        "baseline_choice": "previous" if chosen else "given",
        "outcome": c.outcome,
        "message": headline["text"],
        "message_ref": headline["text_ref"],
        "throughput": _figure(c.throughput),
        "gpu_busy": _figure(c.gpu_busy),
        "baseline_step_s": _number(c.step_s[0]),
        "run_step_s": _number(c.step_s[1]),
        "causes": [_cause(x) for x in c.causes],
        "reasons": [_reason_share(x) for x in c.reasons],
        "comparable": c.comparability.comparable,
        "notes": [_note(n) for n in c.comparability.notes],
    }
    return contract.check_if_enabled(doc, "compare")


def ambiguous(name: str, records: Sequence[RunRecord]) -> AmbiguousRun:
    """The error for a name that fits several runs, listing them (the first MAX_CANDIDATES)."""
    shown = list(records[:MAX_CANDIDATES])
    ids = shown_ids(r.identity.key for r in shown)
    more = f" (and {len(records) - len(shown)} more)" if len(records) > len(shown) else ""
    listing = "; ".join(
        f"{ids[r.identity.key]} ({r.identity.job_id} on {clip(r.identity.host, 64)})" for r in shown
    )
    return AmbiguousRun(
        f"{name} names {len(records)} runs: {listing}{more}; give more of the id",
        [run_entry(r, ids[r.identity.key]) for r in shown],
    )
