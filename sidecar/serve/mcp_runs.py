"""The MCP tools over the run ledger (issue 40; `dsh-sidecar mcp`, sidecar/serve/mcp_server.py):
`list_runs(since?)`, the runs remembered, and `compare_runs(run, other?)`, one run judged against
another (default: the previous run of the same command in the same folder), the causes ranked.

Arguments in, (structured content, text for the model) out, from the runs and compare documents
(sidecar/documents/runs.py) a Backend hands back. Commands, folders, hosts and the reasons' and notes'
texts (they quote GPU names, versions, DataLoader settings and commands the processes reported) go
to the model only inside the <untrusted-data> block; the figures' and the causes' texts are numbers
and catalogue words, said outside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sidecar.documents.bounds import (
    MAX_ID_CHARS,
    MAX_MESSAGE_CHARS,
    clip,
    clip_args,
    clip_opt,
    one_line,
    one_line_all,
)
from sidecar.documents.runs import RunsError
from sidecar.serve.mcp_schemas import DEFAULT_SINCE, MAX_RUNS_SHOWN
from sidecar.serve.source import RunsSource


class RunsBackend(Protocol):
    """What the runs tools read (mcp_server's HttpBackend and LocalBackend); ToolError on failure."""

    def runs(self, since: str | None) -> dict[str, Any]: ...

    def compare(self, run: str, other: str | None) -> dict[str, Any]: ...


def _name_arg(args: dict[str, Any], key: str, error: type[Exception]) -> str | None:
    value = args.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise error(f"{key} must be a run's id (a string) from list_runs")
    return value[: MAX_ID_CHARS * 2]


def _run(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": clip(r["id"], MAX_ID_CHARS),
        "job_id": clip(r["job_id"], MAX_ID_CHARS),
        "host": clip(r["host"]),
        "command": clip_args(r["command"]),
        "cwd": clip_opt(r["cwd"]),
        **{k: r[k] for k in ("started_unix_s", "wall_s", "state", "exit_code", "steps", "step_rate_hz")},
        "status": clip_opt(r["status"], MAX_ID_CHARS),
        "warnings": [clip(w, MAX_ID_CHARS) for w in r["warnings"][:32]],
        "gpu_held_s": r["gpu_held_s"],
        "gpu_busy_s": r["gpu_busy_s"],
    }


def _run_line(r: dict[str, Any]) -> str:
    state = "live" if r["state"] == "live" else ("exited" if r["exit_code"] is None else f"exit {r['exit_code']}")
    rate = "" if r["step_rate_hz"] is None else f", {r['step_rate_hz']:.3g} steps/s"
    command = clip(" ".join(r["command"]).replace("`", "\\u0060"), 80) or "?"
    return (
        f"- {r['id']} on {r['host']}: {state}, {r['wall_s']:.0f} s, verdict {r['status'] or '?'}"
        f"{' (' + ', '.join(r['warnings']) + ')' if r['warnings'] else ''}{rate}, "
        f"GPU-hours held {r['gpu_held_s'] / 3600:.2f} busy {r['gpu_busy_s'] / 3600:.2f}; `{command}` in {r['cwd'] or '?'}"
    )


def list_runs(
    backend: RunsBackend, args: dict[str, Any], untrusted: Callable[[list[str]], list[str]], error: type[Exception]
) -> tuple[dict[str, Any], str]:
    since = args.get("since", DEFAULT_SINCE)
    if since is not None and not isinstance(since, str):
        raise error("since must be a duration such as 7d or 12h, or an ISO date")
    doc = backend.runs(since or None)
    runs = [_run(r) for r in doc["runs"][:MAX_RUNS_SHOWN]]
    out = {"runs": runs, "runs_omitted": len(doc["runs"]) - len(runs), "truncated": doc["truncated"]}
    when = f"since {since}" if since else "ever"
    if not runs:
        return out, f"No run is recorded {when}."
    lines = [f"{len(runs)} run(s) seen {when}, the last seen first; compare one with compare_runs(run=ID):"]
    lines += untrusted([_run_line(r) for r in one_line_all(runs)])
    if out["runs_omitted"] or out["truncated"]:
        lines.append("(more runs are recorded: ask with a later since)")
    return out, "\n".join(lines)


def _texted(items: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{**{k: x[k] for k in keys}, "text": clip(x["text"], MAX_MESSAGE_CHARS)} for x in items]


def compare_runs(
    backend: RunsBackend, args: dict[str, Any], untrusted: Callable[[list[str]], list[str]], error: type[Exception]
) -> tuple[dict[str, Any], str]:
    run = _name_arg(args, "run", error)
    if run is None:
        raise error("run is required: a run's id from list_runs")
    doc = backend.compare(run, _name_arg(args, "other", error))
    figure_keys = ("figure", "baseline", "run", "change_ratio", "band_ratio", "outcome")
    out = {
        "run": _run(doc["run"]),
        "baseline": _run(doc["baseline"]),
        "baseline_choice": doc["baseline_choice"],
        "outcome": doc["outcome"],
        "message": clip(doc["message"], MAX_MESSAGE_CHARS),
        "throughput": _texted([doc["throughput"]], *figure_keys)[0],
        "gpu_busy": _texted([doc["gpu_busy"]], *figure_keys)[0],
        "causes": [
            {**_texted([c], "code", "share_fraction")[0], "reasons": _texted(c["reasons"], "code")} for c in doc["causes"]
        ],
        "reasons": _texted(doc["reasons"], "code", "share_fraction"),
        "comparable": doc["comparable"],
        "notes": _texted(doc["notes"], "code"),
    }
    return out, _compare_text(one_line_all(out), untrusted)


def _compare_text(out: dict[str, Any], untrusted: Callable[[list[str]], list[str]]) -> str:
    which = "the previous run of the same command in the same folder" if out["baseline_choice"] == "previous" else "the run given"
    lines = [f"Run {out['run']['id']} against {which}, {out['baseline']['id']}:"]
    if out["comparable"]:
        lines += [out["throughput"]["text"], out["gpu_busy"]["text"]]
        if out["causes"]:
            lines.append("Causes, largest first:")
            lines += [f"- {c['code']}: {c['text']}" for c in out["causes"]]
    else:
        lines.append(f"Not comparable ({', '.join(n['code'] for n in out['notes'])}): see below.")
    # the reasons and notes quote what the processes reported (GPU names, versions, settings, commands)
    data = [_run_line(out["run"]), _run_line(out["baseline"])]
    data += [f"reason {r['code']}: {r['text']}" for r in out["reasons"]]
    data += [f"note {n['code']}: {n['text']}" for n in out["notes"]]
    return "\n".join(lines + untrusted(data))


# ---------------------------------------------------------------------------------------------
# The backends' halves for runs
# ---------------------------------------------------------------------------------------------
# The runs routes' own refusals (sidecar/serve/server.py, sidecar/poll/runs_source.py): passed on as
# they are said; any other 4xx of those routes is a sidecar that predates them.
_RUNS_REFUSALS = ("this sidecar keeps no runs", "no run ", "no earlier run", "the runs cannot be read", "the run ")


def http_refusal(code: int, reason: str) -> str | None:
    """The tool error for the runs routes' HTTP `code` with the sidecar's `reason`, or None: not a
    runs answer (the caller says what it says of any other)."""
    if code not in (400, 404, 503):
        return None
    if reason.startswith(_RUNS_REFUSALS) or (code == 400 and reason):
        return one_line(clip(reason, MAX_MESSAGE_CHARS))
    if code == 404:
        return "this sidecar does not serve runs (HTTP 404): run the same dsh-gpu-dashboard version on both sides"
    return None


def local_answer(
    source: RunsSource | None, make: Callable[[RunsSource], dict[str, Any]], error: type[Exception]
) -> dict[str, Any]:
    """A runs document from the source in this process, its refusals as `error`s."""
    if source is None:
        raise error("no runs are read here: this MCP server was started without a runs ledger")
    try:
        return make(source)
    except (RunsError, ValueError) as exc:
        raise error(one_line(clip(str(exc), MAX_MESSAGE_CHARS))) from None
