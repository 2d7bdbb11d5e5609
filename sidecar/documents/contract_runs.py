"""The runs documents' declarations (issue 40): the runs the ledger remembers (GET
/api/dsh-gpu-dashboard/runs, `dsh-sidecar runs --json`), one run with its timeline and minutes
(`/runs/<id>`), and two runs compared (`/compare?a=&b=`, `dsh-sidecar compare --json`). Built by
sidecar/documents/runs.py from the ledger's records (sidecar/common/runs.py) and the comparison
(sidecar/verdict/compare.py). Kept apart from contract.py only for its length; contract.py lists
them among its documents, so the schema, docs/api.md and the JSDoc typedefs carry them."""

from __future__ import annotations

from sidecar.documents.contract_types import BOOL, INT, NUM, STR, Enum, F, Lazy, ListOf, Obj

MAX_RUNS_LISTED = 500  # runs in one runs document (`truncated` says when more matched)
MAX_RUN_MINUTES = 2_000  # the newest minute rows of a run document (`minutes_omitted` counts the rest)
MAX_RUN_TIMELINE = 500  # the newest verdict changes of a run document (`timeline_omitted`)
MAX_CANDIDATES = 10  # runs an ambiguous id names in its error
MAX_SETTINGS = 32  # DataLoader settings of a run
RUN_STATES = ("live", "exited")  # sidecar/common/runs.py RUN_LIVE, RUN_EXITED
# sidecar/verdict/compare.py's words, repeated here so that the contract reads without the verdict;
# tests/unit/test_runs_documents.py keeps the two equal.
OUTCOMES = ("improvement", "regression", "within-noise", "not-enough-evidence", "not-comparable")
FIGURES = ("throughput", "gpu-busy")
PARTS = ("data-wait", "forward", "backward", "optimizer", "other", "whole-step")
REASONS = (
    "throttled",
    "clocks",
    "gpu-model",
    "precision",
    "gpu-shared",
    "host-syncs",
    "loader-settings",
    "torch-version",
    "driver-version",
)
NOTES = ("same-run", "no-steps", "command", "host", "world-size", "gpu-count")
BASELINE_CHOICES = ("given", "previous")

_TEXT = Lazy("TextRef")

RUN = Obj(
    "Run",
    "One run as the ledger keeps it: a job (its root process) on one boot of one host, with its totals.",
    {
        "id": F(
            STR,
            "its short id, what a person types (`dsh-sidecar compare ID`): the first hex digits of the "
            "SHA-256 of `key`, 8 or more (more where two listed runs share 8); `key` and `job_id` are "
            "accepted too",
        ),
        "key": F(STR, "the ledger's key: `<boot id>/<job_id>`, never reused"),
        "job_id": F(STR, "`<root pid>-<root start ticks>`, the status document's `job_id` while it ran"),
        "host": F(STR, "the host it ran on"),
        "user": F(STR, "its user's name", null=True),
        "uid": F(INT, "its user's uid", null=True),
        "command": F(ListOf(STR), "its root's command line, redacted when recorded, clipped"),
        "cwd": F(STR, "the folder it ran in", null=True),
        "started_unix_s": F(NUM, "when its root started"),
        "last_seen_unix_s": F(NUM, "the last poll that saw it", null=True),
        "ended_unix_s": F(
            NUM, "when it was seen to end; null: live, or its sidecar stopped first", null=True
        ),
        "state": F(Enum(RUN_STATES), "`live` until it is seen to end, then `exited`"),
        "exit_code": F(INT, "its exit code, where known (`dsh-sidecar run` knows its child's)", null=True),
        "status": F(STR, "its verdict's last status (the status document's `status`)", null=True),
        "warnings": F(ListOf(STR, 64), "its verdict's last warning codes"),
        "wall_s": F(NUM, "its wall time as recorded"),
        "steps": F(INT, "training steps counted", null=True),
        "step_rate_hz": F(NUM, "`steps` over `wall_s`", null=True),
        "gpu_held_s": F(NUM, "GPU-seconds it held (memory allocated on a GPU), summed over GPUs"),
        "gpu_busy_s": F(NUM, "GPU-seconds held with work"),
        "energy_j": F(NUM, "energy of its GPUs, where NVML's counter answers", null=True),
        "gpu_mem_peak_mib": F(NUM, "its processes' GPU memory at its peak", null=True),
        "power_peak_w": F(NUM, "its GPUs' peak power draw", null=True),
        "temperature_peak_c": F(NUM, "its GPUs' peak temperature", null=True),
        "gpu_models": F(ListOf(STR, 64), "the GPUs its processes used, by name"),
        "distributed_key": F(STR, "the key its distributed run's ranks share", null=True),
        "world_size": F(INT, "WORLD_SIZE", null=True),
        "slurm_job": F(STR, "its Slurm job (SLURM_JOB_ID or the cgroup's)", null=True),
        "pod": F(STR, "its Kubernetes pod, `<namespace>/<name>`", null=True),
    },
)

# The documents without their `schema` (run_documents adds it first).
RUNS_DOCUMENT = Obj(
    "RunsDocument",
    "GET /api/dsh-gpu-dashboard/runs[?since=], `dsh-sidecar runs --json`: the runs the ledger remembers, "
    "the last seen first.",
    {
        "time_unix_s": F(NUM, "when the ledger was read"),
        "since_unix_s": F(NUM, "runs last seen at or after this; null: all", null=True),
        "runs": F(ListOf(RUN, MAX_RUNS_LISTED), "the runs, the last seen first (at most 500)"),
        "truncated": F(BOOL, "more runs matched than are listed: ask with a later `since`"),
        "notice": F(STR, "what the ledger said when opened (a damaged file moved aside)", null=True),
    },
)

SETTING = Obj(
    "RunSetting",
    "One DataLoader setting of a run, as the probe reported it.",
    {"name": F(STR, "the setting, e.g. `num_workers`"), "value": F(STR, "its value, as text")},
)

SETUP = Obj(
    "RunSetup",
    "What a run ran on and with (the latest known of each).",
    {
        "torch_version": F(STR, "torch's version", null=True),
        "torch_cuda": F(STR, "the CUDA (or HIP) torch was built with", null=True),
        "driver_version": F(STR, "the NVIDIA driver", null=True),
        "precision": F(STR, "`float32`, `autocast bfloat16`, `tf32`, ...", null=True),
        "loader": F(ListOf(SETTING, MAX_SETTINGS), "its DataLoader's settings"),
        "processes": F(INT, "its processes (the most seen)", null=True),
    },
)

VERDICT_CHANGE = Obj(
    "RunVerdictChange",
    "The run's verdict when it changed.",
    {
        "time_unix_s": F(NUM, "when"),
        "status": F(STR, "the status then"),
        "warnings": F(ListOf(STR, 64), "the warning codes then"),
    },
)

MINUTE = Obj(
    "RunMinute",
    "One minute of a run (older ones are merged into hours: `span_s`, `minutes`): means over the polls "
    "that had the figure, peaks, and the minute's share of the totals.",
    {
        "start_unix_s": F(NUM, "the span's start (a multiple of its length)"),
        "span_s": F(NUM, "the span's length: 60 s, 3600 once merged"),
        "minutes": F(INT, "minutes merged into it (1 until downsampled)"),
        "polls": F(INT, "polls it holds"),
        "steps": F(INT, "training steps counted in it", null=True),
        "step_rate_hz": F(
            NUM,
            "training steps per second: a framework callback's, else the step breakdown's (a plain loop)",
            null=True,
        ),
        "data_wait_fraction": F(NUM, "share of the step waiting for data", null=True),
        "forward_fraction": F(NUM, "share in forward", null=True),
        "backward_fraction": F(NUM, "share in backward: a part of `other_fraction`", null=True),
        "optimizer_fraction": F(NUM, "share in optimizer.step()", null=True),
        "other_fraction": F(NUM, "the rest of the step, the backward included", null=True),
        "syncs_per_step": F(NUM, "host-device synchronisations per step", null=True),
        "gpu_util_pct": F(NUM, "its GPUs' utilisation, averaged", null=True),
        "gpu_mem_used_mib": F(NUM, "its processes' GPU memory, summed", null=True),
        "gpu_mem_peak_mib": F(NUM, "and at its peak", null=True),
        "sm_activity_fraction": F(NUM, "GPM SM activity", null=True),
        "tensor_activity_fraction": F(NUM, "GPM tensor-core activity", null=True),
        "sm_clock_mhz": F(NUM, "SM clock", null=True),
        "sm_clock_max_mhz": F(NUM, "the SM clock's maximum", null=True),
        "clock_reasons": F(ListOf(STR, 32), "every clock-event reason seen in it (NVML's names)"),
        "power_w": F(NUM, "power draw", null=True),
        "power_peak_w": F(NUM, "and at its peak", null=True),
        "temperature_c": F(NUM, "temperature", null=True),
        "temperature_peak_c": F(NUM, "and at its peak", null=True),
        "gpu_processes": F(INT, "processes on its GPUs, its own and others (the most seen)", null=True),
        "cpu_pct": F(NUM, "its CPU, percent of one core", null=True),
        "rss_mib": F(NUM, "its resident memory", null=True),
        "gpu_held_s": F(NUM, "GPU-seconds held in it"),
        "gpu_busy_s": F(NUM, "GPU-seconds held with work in it"),
        "energy_j": F(NUM, "its GPUs' energy in it", null=True),
    },
)

RUN_DOCUMENT = Obj(
    "RunDocument",
    "GET /api/dsh-gpu-dashboard/runs/<id>: one run with its setup, verdict timeline and minutes, oldest first.",
    {
        "run": F(RUN, "the run"),
        "setup": F(SETUP, "what it ran on and with"),
        "previous": F(
            STR,
            "the short id of the previous run of the same command in the same folder (`compare`'s default)",
            null=True,
        ),
        "timeline": F(
            ListOf(VERDICT_CHANGE, MAX_RUN_TIMELINE), "its verdict's changes, oldest first (the newest 500)"
        ),
        "timeline_omitted": F(INT, "older changes left out"),
        "minutes": F(ListOf(MINUTE, MAX_RUN_MINUTES), "its minutes, oldest first (the newest 2,000 rows)"),
        "minutes_omitted": F(INT, "older rows left out"),
    },
)

FIGURE_CHANGE = Obj(
    "FigureChange",
    "One figure of two runs judged against their own minute-to-minute noise.",
    {
        "figure": F(Enum(FIGURES), "`throughput` (steps/s) or `gpu-busy` (busy over held GPU-seconds, 0-1)"),
        "baseline": F(NUM, "the baseline's value over its steady minutes", null=True),
        "run": F(NUM, "the run's", null=True),
        "change_ratio": F(NUM, "(run - baseline) / baseline: -0.25 is 25 % less", null=True),
        "band_ratio": F(NUM, "the noise band, relative to the baseline like `change_ratio`", null=True),
        "baseline_minutes": F(INT, "the baseline's steady minutes with the figure"),
        "run_minutes": F(INT, "the run's"),
        "outcome": F(Enum(OUTCOMES[:-1]), "improvement, regression, within-noise or not-enough-evidence"),
        "text": F(STR, "the judgement in one sentence, in English"),
        "text_ref": F(_TEXT, "the same in the catalogue"),
    },
)

REASON = Obj(
    "CompareReason",
    "What the two runs show of why a part of the step changed.",
    {
        "code": F(Enum(REASONS), "the reason"),
        "baseline": F(STR, "its fact in the baseline, display-ready"),
        "run": F(STR, "and in the run"),
        "detail": F(STR, "`throttled`: NVML's clock-event reason", null=True),
        "text": F(STR, "in English"),
        "text_ref": F(_TEXT, "in the catalogue"),
    },
)

CAUSE = Obj(
    "CompareCause",
    "A part of the step whose time changed the way the step time did, with the share of the difference it explains.",
    {
        "code": F(Enum(PARTS), "the part of the step"),
        "share_fraction": F(NUM, "of the step time's difference it explains (the causes sum to 1)"),
        "baseline_s": F(NUM, "its seconds per step in the baseline"),
        "run_s": F(NUM, "in the run"),
        "baseline_fraction": F(NUM, "its share of the baseline's step"),
        "run_fraction": F(NUM, "of the run's"),
        "reasons": F(ListOf(REASON, len(REASONS)), "why, as far as the runs show, most specific first"),
        "text": F(STR, "in English"),
        "text_ref": F(_TEXT, "in the catalogue"),
    },
)

REASON_SHARE = Obj(
    "CompareReasonShare",
    "A reason over every cause it is named for: `throttled explains 100 % of the difference`.",
    {
        "code": F(Enum(REASONS), "the reason"),
        "share_fraction": F(NUM, "the shares of those causes, summed"),
        "parts": F(ListOf(Enum(PARTS), len(PARTS)), "those causes"),
        "text": F(STR, "in English"),
        "text_ref": F(_TEXT, "in the catalogue"),
    },
)

NOTE = Obj(
    "CompareNote",
    "Why two runs cannot be compared (`same-run`, `no-steps`), or what differs between two comparable ones.",
    {
        "code": F(Enum(NOTES), "what"),
        "text": F(STR, "in English"),
        "text_ref": F(_TEXT, "in the catalogue"),
    },
)

COMPARE_DOCUMENT = Obj(
    "CompareDocument",
    "GET /api/dsh-gpu-dashboard/compare?a=RUN[&b=OTHER], `dsh-sidecar compare --json`: run `a` judged "
    "against `b` (default: the previous run of the same command in the same folder).",
    {
        "run": F(RUN, "the run judged"),
        "baseline": F(RUN, "the run it is judged against"),
        "baseline_choice": F(Enum(BASELINE_CHOICES), "`given` (b), or `previous` (chosen by the ledger)"),
        "outcome": F(Enum(OUTCOMES), "the throughput's outcome, or `not-comparable`"),
        "message": F(STR, "the headline, in English"),
        "message_ref": F(_TEXT, "the same in the catalogue"),
        "throughput": F(FIGURE_CHANGE, "steps per second"),
        "gpu_busy": F(FIGURE_CHANGE, "the GPU busy share"),
        "baseline_step_s": F(NUM, "the baseline's seconds per step", null=True),
        "run_step_s": F(NUM, "the run's", null=True),
        "causes": F(
            ListOf(CAUSE, len(PARTS)), "the parts of the step that explain a throughput change, largest first"
        ),
        "reasons": F(ListOf(REASON_SHARE, len(REASONS)), "the causes' reasons, by the share they explain"),
        "comparable": F(BOOL, "false: see `notes` (the same run, or one that counted no steps)"),
        "notes": F(ListOf(NOTE, len(NOTES)), "why not comparable, or what differs"),
    },
)


def run_documents(schema: int) -> dict[str, Obj]:
    """The runs, run and compare documents, in contract.py's schema."""
    version = F(Enum((schema,)), "the document's schema; a client that reads another says so")
    return {
        "runs": Obj(RUNS_DOCUMENT.name, RUNS_DOCUMENT.doc, {"schema": version, **RUNS_DOCUMENT.fields}),
        "run": Obj(RUN_DOCUMENT.name, RUN_DOCUMENT.doc, {"schema": version, **RUN_DOCUMENT.fields}),
        "compare": Obj(
            COMPARE_DOCUMENT.name, COMPARE_DOCUMENT.doc, {"schema": version, **COMPARE_DOCUMENT.fields}
        ),
    }
