"""`dsh-sidecar mcp`: the sidecar's answers as MCP tools, over stdio (docs/mcp.md).

Six tools, each returning structured content (matching its declared output schema) and a short
English text for the model: `list_jobs`, `gpu_status(job?)`, `gpu_history(job?, seconds?)`, over
the run ledger `list_runs(since?)`, `compare_runs(run, other?)` (sidecar/serve/mcp_runs.py), and
`watch_job(job?, since?, timeout_s?)`, which waits for the job's verdict to get worse, an error or its
end (sidecar/serve/mcp_watch.py). They
read a running sidecar over HTTP (--url) or poll in this process (sidecar.poll.discovery.JobsPoller; with
--pid, one job's Poller). Every failure becomes a tool error of one sentence that says what to do.

The `mcp` package (the official SDK, an optional extra) is imported only by `build_server()`: the
summaries below are plain functions of the documents. The output schemas keep to the subset of
JSON Schema that DSH's MCP client enforces (type, oneOf, properties, required, items, enum, const).
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS
from sidecar import __version__
from sidecar.common.http_answer import HttpAnswer, HttpError
from sidecar.documents import contract
from sidecar.documents.bounds import (
    MAX_ID_CHARS,
    MAX_JOBS_SHOWN,
    MAX_MESSAGE_CHARS,
    PROXY_MAX_BODY_BYTES,
    clip,
    clip_args,
    clip_opt,
    one_line,
    one_line_all,
    printable_all,
)
from sidecar.documents.document import NoDefaultJob, UnknownJob
from sidecar.documents.runs import parse_since
from sidecar.documents.watch import with_comparison
from sidecar.serve import mcp_runs, mcp_watch
from sidecar.serve.mcp_gpus import MAX_GPUS_SHOWN, busy_text, gpu_items, gpu_lines, model_on_gpu
from sidecar.serve.mcp_schemas import (
    DEFAULT_SECONDS,
    DESCRIPTIONS,
    INPUT_SCHEMAS,
    MAX_SECONDS,
    MIN_SECONDS,
    OUTPUT_SCHEMAS,
)
from sidecar.serve.mcp_text import DEVICE, command_text, device_text, untrusted, warning_items
from sidecar.serve.source import Documents, DocumentSource, RunsSource
from sidecar.verdict.watch import parse_cursor

API = "/api/dsh-gpu-dashboard"
HTTP_TIMEOUT_S = 5.0
MAX_RESPONSE_BYTES = PROXY_MAX_BODY_BYTES  # 4 MiB, as through DSH's proxy
MAX_EVENTS_SHOWN = 20  # events in a gpu_history answer; `events_omitted` counts the rest
TIMELINE_POINTS = 12  # per GPU in a gpu_history answer: means over equal slices of the window
MAX_WARNINGS_SHOWN = 32  # the verdict has a dozen codes
FIRST_POLL_WAIT_S = 10.0  # in process: how long a tool waits for the first poll
START_HINT = "start one with `dsh-sidecar` (or `dsh-sidecar run -- python train.py`)"


class ToolError(Exception):
    """What the model reads when a tool fails: one sentence, with what to do."""


class Backend(Protocol):
    """Where the documents come from; each method raises ToolError, never anything else."""

    def jobs(self) -> dict[str, Any]: ...

    def status(self, job: str | None) -> dict[str, Any]: ...

    def history(self, job: str | None, since: float | None) -> dict[str, Any]: ...

    def runs(self, since: str | None) -> dict[str, Any]: ...

    def compare(self, run: str, other: str | None) -> dict[str, Any]: ...

    def watch(self, job: str | None, since: str | None) -> dict[str, Any]: ...

    def close(self) -> None: ...


def _checked(doc: Any, what: str) -> dict[str, Any]:
    """A document of schema 2, or a ToolError saying which schema it is."""
    if not isinstance(doc, dict):
        raise ToolError(
            f"the sidecar's {what} answer is not a JSON object: check --url points at a dsh-sidecar"
        )
    if doc.get("schema") != contract.SCHEMA:
        raise ToolError(
            f"the sidecar answers schema {clip(json.dumps(doc.get('schema')), 16)}, this MCP server reads schema "
            f"{contract.SCHEMA}: install the same dsh-gpu-dashboard version on both sides"
        )
    return doc


# ---------------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------------
# get(url, timeout_s=, max_body_bytes=, headers=) -> HttpAnswer, raising HttpError: the sources' one
# door for HTTP answers (sidecar/sources/http_get.py), handed in by the CLI.
HttpGet = Callable[..., HttpAnswer]


class HttpBackend:
    """A running sidecar, over HTTP: `get` proves, on the connection that carries the request, that
    a sidecar on this machine is ours or root's before the token goes out; 5 s for each answer in
    all; redirects refused; 4 MiB at most."""

    def __init__(
        self, url: str, token: str | None = None, *, get: HttpGet, timeout_s: float = HTTP_TIMEOUT_S
    ):
        self.base = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._http_get = get

    def jobs(self) -> dict[str, Any]:
        return self._get("jobs", {}, None)

    def status(self, job: str | None) -> dict[str, Any]:
        return self._get("status", {"job": job}, job)

    def history(self, job: str | None, since: float | None) -> dict[str, Any]:
        return self._get("history", {"job": job, "since": None if since is None else f"{since:.3f}"}, job)

    def runs(self, since: str | None) -> dict[str, Any]:
        return self._get("runs", {"since": since}, None)

    def compare(self, run: str, other: str | None) -> dict[str, Any]:
        return self._get("compare", {"a": run, "b": other}, None)

    def watch(self, job: str | None, since: str | None) -> dict[str, Any]:
        return self._get("watch", {"job": job, "since": since}, job)

    def close(self) -> None:
        pass

    def _get(self, route: str, params: dict[str, str | None], job: str | None) -> dict[str, Any]:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.base}{API}/{route}" + (f"?{query}" if query else "")
        headers = {"Accept": "application/json", "User-Agent": f"dsh-sidecar-mcp/{__version__}"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            answer = self._http_get(
                url, timeout_s=self.timeout_s, max_body_bytes=MAX_RESPONSE_BYTES, headers=headers
            )
        except HttpError as exc:
            raise ToolError(self._transport_error(exc)) from None
        if answer.status != 200:
            refusal = (
                mcp_runs.http_refusal(answer.status, _error_text(answer.body))
                if route in ("runs", "compare")
                else None
            )
            if route == "watch" and answer.status == 400:  # a cursor that is not one: the route says so
                refusal = one_line(clip(_error_text(answer.body), MAX_MESSAGE_CHARS))
            raise ToolError(refusal or self._http_error(answer.status, _error_text(answer.body), job, route))
        try:
            doc = json.loads(answer.body)
        except (ValueError, RecursionError):
            raise ToolError(f"{self.base} did not answer JSON: check --url points at a dsh-sidecar") from None
        return _checked(doc, route)

    def _transport_error(self, exc: HttpError) -> str:
        if exc.kind == "peer":
            whose = "another user" if exc.peer_uid is None else f"another user (uid {exc.peer_uid})"
            return (
                f"refused to ask {self.base}: it is served by {whose}, not by you or root, so no request "
                "and no token was sent there: start your own sidecar (`dsh-sidecar`) and pass the URL it "
                "prints to --url"
            )
        if exc.kind == "redirect":
            return (
                f"the sidecar URL redirects to {clip(exc.location, 120)!r}, which this MCP server never "
                "follows: give --url the sidecar's own address (as `dsh-sidecar` prints it)"
            )
        if exc.kind == "too-large":
            return (
                f"the sidecar at {self.base} answered more than {MAX_RESPONSE_BYTES >> 20} MiB, which this MCP "
                "server refuses: ask for a shorter history (seconds) or check --url"
            )
        return f"no sidecar answers at {self.base} ({clip(str(exc), 120)}): {START_HINT}, or check --url"

    def _http_error(self, code: int, reason: str, job: str | None, route: str) -> str:
        if code == 401:
            return (
                f"the sidecar at {self.base} refused the token (HTTP 401): check --token or DSH_SIDECAR_TOKEN "
                "(it must be the token the sidecar was started with)"
                if self.token
                else f"the sidecar at {self.base} requires a token (HTTP 401): pass --token TOKEN or set "
                "DSH_SIDECAR_TOKEN"
            )
        if code == 404 and job is None and reason.startswith("none of the jobs here is yours"):
            return NO_JOB_OF_YOURS
        if code == 403:
            return f"the sidecar at {self.base} refused this user (HTTP 403): {clip(reason, 300)}"
        if code == 404 and job is not None and reason.startswith("no job"):
            return f"no job {clip(job, MAX_ID_CHARS)!r} on this sidecar: call list_jobs for the job ids"
        if code == 404 and route == "watch":  # a sidecar older than watch_job
            return f"{self.base} has no watch route (HTTP 404): run the same dsh-gpu-dashboard version on both sides"
        if code == 404:
            return f"{self.base} does not serve the dsh-gpu-dashboard API (HTTP 404): check --url"
        if code == 503:
            return "the sidecar has not completed its first poll yet: retry in a few seconds"
        if code == 421:
            return (
                f"the sidecar does not answer to the host name in {self.base} (HTTP 421): use the address it "
                "prints, or start it with --allow-host NAME"
            )
        return f"the sidecar at {self.base} answered HTTP {code}: {clip(reason, 200) or 'no reason given'}"


# A sidecar that lists every user's jobs (root's) never answers with another user's job by default.
NO_JOB_OF_YOURS = (
    "none of the jobs this sidecar lists is yours, so there is no default job: call list_jobs and "
    "pass gpu_status the job id you mean"
)


def _error_text(body: bytes) -> str:
    """The sidecar's {"error": ...} of an HTTP error, or ''."""
    try:
        doc = json.loads(body[: 64 * 1024])
        return str(doc.get("error") or "") if isinstance(doc, dict) else ""
    except (ValueError, RecursionError):
        return ""


class LocalPoller(DocumentSource, Protocol):
    """A poller run in this process (sidecar.poll's Poller or JobsPoller), as LocalBackend runs it."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class LocalBackend:
    """Polling in this process: a sidecar.poll.discovery.JobsPoller, or one job's sidecar.poll.poller.Poller (--pid).
    Both have the same three document methods; a document is None until the first poll."""

    def __init__(
        self,
        poller: LocalPoller,
        first_poll_wait_s: float = FIRST_POLL_WAIT_S,
        runs: RunsSource | None = None,
    ) -> None:
        self.poller = poller
        self.runs_source = runs  # the run ledger's reader (None: --no-runs)
        self.first_poll_wait_s = first_poll_wait_s
        # The agent is this process's user: root's discovery answers it with root's own job by
        # default, never another user's (JobsPoller.for_caller).
        view: Callable[[Callable[[], int | None]], Documents] | None = getattr(poller, "for_caller", None)
        self._seen: Callable[[], Documents] = (
            (lambda: view(os.geteuid)) if view is not None else (lambda: poller)
        )
        poller.start()

    def jobs(self) -> dict[str, Any]:
        return self._ask(lambda: self._seen().jobs_document(), None)

    def status(self, job: str | None) -> dict[str, Any]:
        return self._ask(lambda: self._seen().status_document(job), job)

    def history(self, job: str | None, since: float | None) -> dict[str, Any]:
        return self._ask(lambda: self._seen().history_document(job, since), job)

    def runs(self, since: str | None) -> dict[str, Any]:
        return mcp_runs.local_answer(
            self.runs_source,
            lambda r: r.runs_document(parse_since(since, time.time()) if since else None),
            ToolError,
        )

    def compare(self, run: str, other: str | None) -> dict[str, Any]:
        return mcp_runs.local_answer(self.runs_source, lambda r: r.compare_document(run, other), ToolError)

    def watch(self, job: str | None, since: str | None) -> dict[str, Any]:
        try:
            cursor = parse_cursor(since) if since else None
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        compare = self.runs_source.compare_document if self.runs_source is not None else None

        def make() -> dict[str, Any] | None:
            doc = self._seen().watch_document(job, cursor)
            return None if doc is None else with_comparison(doc, compare)

        return self._ask(make, job)

    def close(self) -> None:
        self.poller.stop()

    def _ask(self, make: Callable[[], dict[str, Any] | None], job: str | None) -> dict[str, Any]:
        deadline = time.monotonic() + self.first_poll_wait_s
        while self.poller.jobs_document() is None:  # the first poll has not completed
            if time.monotonic() >= deadline:
                raise ToolError("the first poll has not completed yet: retry in a few seconds")
            time.sleep(0.1)
        try:
            doc = make()
        except NoDefaultJob:
            raise ToolError(NO_JOB_OF_YOURS) from None
        except UnknownJob:
            raise ToolError(
                f"no job {clip(job or '', MAX_ID_CHARS)!r} here: call list_jobs for the job ids"
            ) from None
        if doc is None:
            raise ToolError(
                "no training job found (none of this user's processes publishes probe facts or uses a GPU): "
                "start the job with `import probe` in it, or retry in a few seconds"
            )
        return _checked(doc, "document")


# ---------------------------------------------------------------------------------------------
# The tools: arguments in, (structured content, text for the model) out
# ---------------------------------------------------------------------------------------------
def _job_arg(args: dict[str, Any]) -> str | None:
    job = args.get("job")
    if job is None or job == "":
        return None
    if not isinstance(job, str):
        raise ToolError("job must be a job id (a string) from list_jobs, or omitted for the default job")
    return job[: MAX_ID_CHARS * 2]


def _seconds_arg(args: dict[str, Any]) -> float:
    seconds = args.get("seconds", DEFAULT_SECONDS)
    if seconds is None:
        return DEFAULT_SECONDS
    try:
        ok = not isinstance(seconds, bool) and isinstance(seconds, int | float) and math.isfinite(seconds)
    except OverflowError:  # an integer of hundreds of digits is valid JSON
        ok = False
    if not ok:
        raise ToolError(f"seconds must be a number of seconds, {MIN_SECONDS:g} to {MAX_SECONDS:g}")
    return min(MAX_SECONDS, max(MIN_SECONDS, float(seconds)))


def list_jobs(backend: Backend, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    doc = backend.jobs()
    jobs = [
        {
            "id": clip(j["id"], MAX_ID_CHARS),
            "root_pid": j["root_pid"],
            "command": clip_args(j["command"]) if j["command"] is not None else None,
            "user": clip_opt(j["user"]),
            "status": j["status"],
            "message": clip(j["message"], MAX_MESSAGE_CHARS),
            "first_warning": (
                {
                    "code": clip(j["first_warning"]["code"], MAX_ID_CHARS),
                    "message": clip(j["first_warning"]["message"], MAX_MESSAGE_CHARS),
                }
                if j["first_warning"]
                else None
            ),
            "gpus": j["gpus"][:MAX_GPUS_SHOWN],
            "alive": j["alive"],
        }
        for j in doc["jobs"][:MAX_JOBS_SHOWN]
    ]
    out = {
        "mode": clip(doc["mode"], MAX_ID_CHARS),
        "default_job": clip_opt(doc["default_job"], MAX_ID_CHARS),
        "jobs": jobs,
        "jobs_omitted": doc["jobs_omitted"] + len(doc["jobs"]) - len(jobs),
    }
    if not jobs:
        return out, "The sidecar watches no training job right now."
    shown = one_line_all(out)
    lines = [f"{len(jobs)} job(s), newest first (default: {shown['default_job'] or 'none'}):"]
    data = []
    for j in shown["jobs"]:
        state = "" if j["alive"] else ", exited"
        gpus = ", GPUs " + ",".join(map(str, j["gpus"])) if j["gpus"] else ""
        data.append(
            f"- {j['id']} (pid {j['root_pid']}, {j['user'] or '?'}{state}{gpus}) `{command_text(j['command'])}`: "
            f"{j['status']}: {j['message']}"
        )
        if j["first_warning"]:
            data.append(f"  warning {j['first_warning']['code']}: {j['first_warning']['message']}")
    lines += untrusted(data)
    if doc["jobs_omitted"]:
        lines.append(f"({doc['jobs_omitted']} older jobs left out)")
    return out, "\n".join(lines)


def gpu_status(backend: Backend, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    doc = backend.status(_job_arg(args))
    device = clip_opt(doc["model_device"], MAX_ID_CHARS)
    out = {
        "job_id": clip(doc["job_id"], MAX_ID_CHARS),
        "alive": doc["target"]["alive"],
        "status": doc["status"],
        "message": clip(doc["message"], MAX_MESSAGE_CHARS),
        "model_device": device,
        "input_device": clip_opt(doc["input_device"], MAX_ID_CHARS),
        "model_on_gpu": model_on_gpu(device),
        "warnings": warning_items(doc["warnings"], MAX_WARNINGS_SHOWN),
        "gpus": gpu_items(doc["gpus"]),
        "processes": len(doc["processes"]) + doc["processes_omitted"],
    }
    return out, _status_text(one_line_all(out), doc.get("model_gpu_index"))


def _status_text(out: dict[str, Any], gpu_index: int | None) -> str:
    device, inputs = out["model_device"], out["input_device"]
    gpu = next((g for g in out["gpus"] if g["index"] == gpu_index), None)
    if out["status"] == "MIXED" or device == DEVICE_MIXED:
        answer = "Partly: the job's parameters are on several device types (see the verdict below)."
    elif device == DEVICE_NO_PARAMETERS:
        answer = "Unknown: the registered model has no parameters, so it has no device of its own."
    elif out["model_on_gpu"]:
        where = f" (GPU {gpu['index']}, {gpu['name'] or 'unnamed'}, {busy_text(gpu)})" if gpu else ""
        answer = f"Yes: the model is on {device_text(device)}{where}."
        if inputs is not None and not model_on_gpu(inputs):
            answer += (
                f" But its inputs are on {device_text(inputs)}: move each batch to {device_text(device)}."
            )
    elif device is None:
        answer = "Unknown: no model is registered with the probe in this job."
    else:
        answer = f"No: the model is on {device_text(device)}, not on a GPU."
    lines = [answer]
    if not out["alive"]:
        lines.append("The job has exited.")
    said, used_by = gpu_lines(out["gpus"])
    lines += ["GPUs:", *said] if said else []
    data = [f"Job {out['job_id']}: {out['status']}: {out['message']}", *used_by]
    if device is not None and not DEVICE.fullmatch(device):
        data.append(f"Model device: {device}")
    hints = [w for w in out["warnings"] if w["hint"]]
    if hints:
        data.append("Hints:")
        data += [f"- [{w['severity']}] {w['code']}: {w['hint']}" for w in hints]
    return "\n".join(lines + untrusted(data))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _mib(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f} MiB"


def gpu_history(backend: Backend, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    job, seconds = _job_arg(args), _seconds_arg(args)
    doc = backend.history(job, time.time() - seconds)
    samples = doc["samples"]
    if samples:  # the window ends at the newest sample (another machine's clock may differ from ours)
        newest = samples[-1]["time_unix_s"]
        samples = [s for s in samples if s["time_unix_s"] >= newest - seconds]
    events = doc["events"][-MAX_EVENTS_SHOWN:]
    out = {
        "job_id": clip(doc["job_id"], MAX_ID_CHARS),
        "seconds": seconds,
        "interval_s": doc["interval_s"],
        "sample_count": len(samples),
        "first_unix_s": samples[0]["time_unix_s"] if samples else None,
        "last_unix_s": samples[-1]["time_unix_s"] if samples else None,
        "gpus": _per_gpu(samples),
        "events": [
            {"time_unix_s": e["time_unix_s"], "name": clip(e["name"]), "pid": e["pid"]} for e in events
        ],
        "events_omitted": doc["events_omitted"] + len(doc["events"]) - len(events),
    }
    job_gpu = any(s["processes"] for s in samples)  # a sample lists the job's GPU processes only
    return out, _history_text(one_line_all(out), job_gpu)


def _per_gpu(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    series: dict[int, list[tuple[float, float | None, float | None]]] = {}
    for s in samples:
        for g in s["gpus"]:
            series.setdefault(g["index"], []).append((s["time_unix_s"], g["util_pct"], g["mem_used_mib"]))
    out = []
    for index, points in sorted(series.items())[:MAX_GPUS_SHOWN]:
        utils = [u for _, u, _ in points if u is not None]
        mems = [m for _, _, m in points if m is not None]
        out.append(
            {
                "index": index,
                "util_pct_min": min(utils) if utils else None,
                "util_pct_mean": round(sum(utils) / len(utils), 1) if utils else None,
                "util_pct_max": max(utils) if utils else None,
                "mem_used_mib_last": points[-1][2],
                "mem_used_mib_max": max(mems) if mems else None,
                "util_pct_timeline": _timeline(points),
            }
        )
    return out


def _timeline(points: list[tuple[float, float | None, float | None]]) -> list[float | None]:
    """Mean utilisation over TIMELINE_POINTS equal slices of the samples' span (None: no sample)."""
    t0, t1 = points[0][0], points[-1][0]
    n = min(TIMELINE_POINTS, len(points))
    width = (t1 - t0) / n if t1 > t0 else 1.0
    buckets: list[list[float]] = [[] for _ in range(n)]
    for t, util, _ in points:
        if util is not None:
            buckets[min(n - 1, int((t - t0) / width))].append(util)
    return [round(sum(b) / len(b), 1) if b else None for b in buckets]


def _history_text(out: dict[str, Any], job_gpu: bool = True) -> str:
    if not out["sample_count"]:
        return f"No samples in the last {out['seconds']:g} s for job {out['job_id']}."
    span = out["last_unix_s"] - out["first_unix_s"]
    lines = [
        f"Job {out['job_id']}: {out['sample_count']} samples from the last {out['seconds']:g} s, spanning "
        f"{span:.0f} s (summarised per GPU; the raw samples are not returned)."
    ]
    if out["gpus"]:
        lines.append(
            "Whole-GPU figures: every process on a GPU counts, not only this job's."
            if job_gpu
            else "No process of this job used a GPU in these samples; the figures below are other processes' use."
        )
    for g in out["gpus"]:
        timeline = " ".join("-" if u is None else f"{u:.0f}" for u in g["util_pct_timeline"])
        lines.append(
            f"GPU {g['index']}: utilisation min {_pct(g['util_pct_min'])}, mean {_pct(g['util_pct_mean'])}, "
            f"max {_pct(g['util_pct_max'])}; memory now {_mib(g['mem_used_mib_last'])}, peak "
            f"{_mib(g['mem_used_mib_max'])}; timeline (%, oldest first): {timeline}"
        )
    if not out["gpus"]:
        lines.append("No GPU in these samples.")
    if out["events"]:
        more = f" ({out['events_omitted']} older left out)" if out["events_omitted"] else ""
        lines.append(
            f"{len(out['events'])} events{more}; the latest {min(5, len(out['events']))}, oldest first:"
        )
        lines += untrusted([f"- {e['name']}" for e in out["events"][-5:]])
    return "\n".join(lines)


TOOLS: dict[str, Callable[[Backend, dict[str, Any]], tuple[dict[str, Any], str]]] = {
    "list_jobs": list_jobs,
    "gpu_status": gpu_status,
    "gpu_history": gpu_history,
    "list_runs": lambda backend, args: mcp_runs.list_runs(backend, args, untrusted, ToolError),
    "compare_runs": lambda backend, args: mcp_runs.compare_runs(backend, args, untrusted, ToolError),
    "watch_job": lambda backend, args: mcp_watch.watch_job(backend, args, ToolError),
}


def call(backend: Backend, name: str, args: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    """One tool call: (structured content, text), or (None, the error's sentence)."""
    tool = TOOLS.get(name)
    if tool is None:
        return None, f"no tool {clip(str(name), 64)!r}: the tools are {', '.join(TOOLS)}"
    import jsonschema  # a dependency of the SDK; only a document off its contract fails here

    try:
        structured, text = tool(backend, args or {})
        # Names, commands and events go to the agent as data: no escape sequence, line break or
        # bidi override of a process reaches it, in the structured content either.
        structured = printable_all(structured)
        jsonschema.validate(structured, OUTPUT_SCHEMAS[name])
        return structured, text
    except ToolError as exc:
        return None, str(exc)
    except jsonschema.ValidationError as exc:
        return None, (
            f"the sidecar's answer is not a schema {contract.SCHEMA} document ({clip(exc.message, 80)}): "
            "install the same dsh-gpu-dashboard version on both sides"
        )
    except (
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        AttributeError,
    ) as exc:  # a document off its contract
        return None, (
            f"the sidecar's answer is not a schema {contract.SCHEMA} document ({type(exc).__name__}: "
            f"{clip(str(exc), 80)}): install the same dsh-gpu-dashboard version on both sides"
        )


# ---------------------------------------------------------------------------------------------
# The MCP server (the SDK is imported here only)
# ---------------------------------------------------------------------------------------------
INSTRUCTIONS = (
    "Tools of dsh-gpu-dashboard: they tell whether a PyTorch training job really runs on the GPU. "
    "Call gpu_status first; list_jobs when several jobs run; gpu_history for utilisation over time; "
    "list_runs and compare_runs for finished runs and why one is slower than another; watch_job to be "
    "told when a job's verdict gets worse, an error appears or the job ends, instead of asking again and again."
)


def build_server(backend: Backend) -> Any:
    """The SDK's low-level Server with the three tools: mcp 2.x takes the handlers in its constructor,
    mcp 1.10+ through decorators (and turns a raised exception into an error result). Any: 2.x's
    Server or 1.x's, whichever SDK is installed (both have run and create_initialization_options).
    The models are made with model_validate from their wire names (inputSchema, isError), which
    both name them by: 1.x's fields, 2.x's aliases."""
    import inspect

    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server

    tools = [
        types.Tool.model_validate(
            {
                "name": name,
                "description": DESCRIPTIONS[name],
                "inputSchema": INPUT_SCHEMAS[name],
                "outputSchema": OUTPUT_SCHEMAS[name],
            }
        )
        for name in TOOLS
    ]

    async def run_tool(
        name: str, arguments: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, list[types.TextContent]]:
        structured, text = await anyio.to_thread.run_sync(call, backend, name, arguments)
        return structured, [types.TextContent(type="text", text=text)]

    if "on_call_tool" not in inspect.signature(Server.__init__).parameters:
        return _server_v1(Server, tools, run_tool)

    # `object`: the request's context and the listing's params, neither read here.
    async def on_list_tools(ctx: object, params: object) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        structured, content = await run_tool(params.name, params.arguments)
        if structured is None:
            return types.CallToolResult.model_validate({"content": content, "isError": True})
        return types.CallToolResult.model_validate({"content": content, "structuredContent": structured})

    return Server(
        "dsh-gpu-dashboard",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _server_v1(
    server_class: Any,
    tools: list[Any],
    run_tool: Callable[[str, dict[str, Any] | None], Awaitable[tuple[dict[str, Any] | None, list[Any]]]],
) -> Any:
    """mcp 1.10 to 1.x: decorators; a failed call raises, which the SDK answers with isError. Any:
    1.x's Server, its tools and contents, which the type checker sees as 2.x's (if at all): its
    decorators are called as functions, so that they are not checked against 2.x's."""
    server = server_class("dsh-gpu-dashboard", version=__version__, instructions=INSTRUCTIONS)

    async def _list_tools() -> list[Any]:
        return tools

    async def _call_tool(name: str, arguments: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        structured, content = await run_tool(name, arguments)
        if structured is None:
            raise ToolError(content[0].text)
        return content, structured

    server.list_tools()(_list_tools)
    server.call_tool(validate_input=False)(_call_tool)  # call() checks the arguments with clearer sentences
    return server


def serve(backend: Backend) -> None:
    """Serve MCP over stdin/stdout until the client closes stdin."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(backend)

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    try:
        anyio.run(run)
    finally:
        backend.close()
