"""Size bounds on everything the sidecar takes from a process and shows: one definition each.

A process controls its probe segment (up to 16 MiB) and its command line; unbounded, one segment
with 1,000 models named with 4,000 emoji made a 144 MB status document. Every string is clipped
(with an ellipsis) and every list cut (with a count of what was left out) where the status
document, the history route and /metrics are built, so that the document stays under
MAX_STATUS_BYTES however hostile the segments. The DSH plugin's proxy caps what it passes on at
PROXY_MAX_BODY_BYTES (dsh_plugin/host/index.js repeats the number; a test keeps the two equal).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

ELLIPSIS = "…"
MAX_TEXT_CHARS = 256  # a name, a path, an argument, an event name, an error message
MAX_ID_CHARS = 64  # a device ("cuda:0"), a role, a backend, a version
MAX_MESSAGE_CHARS = 512  # a verdict message or hint (they quote names, pids, devices)
MAX_CMDLINE_ARGS = 32  # arguments shown per command line; a last "… N more" says what was cut
MAX_CMDLINE_CHARS = 1024  # all arguments of one command line together
MAX_MODELS_SHOWN = 8  # per process; `models_omitted` counts the rest
MAX_DEVICES_SHOWN = 8  # per model
MAX_OTHER_NAMES_SHOWN = (
    8  # names of the other processes on a GPU; `other_process_names_omitted` counts the rest
)
MAX_RUNTIME_DEVICES_SHOWN = (
    64  # the job's torch's devices (8 GPUs of 8 partitions); `devices_omitted` counts the rest
)
MAX_PROCESSES_SHOWN = 256  # `processes_omitted` counts the rest
MAX_PROCESS_BYTES = 512 * 1024  # process entries together, as JSON (the cheap half of the budget)
MAX_EVENTS_SHOWN = 100  # the most recent ones; `events_omitted` counts the rest
MAX_JOBS_SHOWN = 64  # the newest jobs in /jobs and in a discovery-mode status document
MAX_LABEL_CHARS = MAX_ID_CHARS  # a /metrics label value: a process names its models and itself
# /metrics exports per-job series for at most MAX_METRIC_JOBS live jobs (default of
# --metrics-max-jobs; `dsh_jobs_omitted` counts the rest) and, per job, at most
# MAX_METRIC_PROCESS_KEYS (role, rank) pairs of processes, MAX_METRIC_MODELS (model, rank) pairs and
# MAX_METRIC_WARNINGS warnings: a training process chooses its ranks, roles and model names, and
# every distinct value is a series Prometheus keeps. `sidecar.serve.metrics.series_bound` is the sum.
MAX_METRIC_JOBS = 32
# A job gets per-job series in /metrics once it has run this long (--metrics-min-job-age): two of
# the shipped 5 s scrapes. A shorter job is gone before a scrape could show it, and each one would
# be a set of series of its own (a stream of 4 short jobs a second made ~288,000 series an hour).
METRICS_MIN_JOB_AGE_S = 10.0
MAX_METRIC_JOBS_FLAG = 1024  # the most --metrics-max-jobs accepts (sidecar/poll/discovery.py watches 256)
MAX_METRIC_PROCESS_KEYS = 16
MAX_METRIC_MODELS = 16
MAX_METRIC_WARNINGS = 32
MAX_STATUS_BYTES = 1024 * 1024  # what the bounds above guarantee for the status document
PROXY_MAX_BODY_BYTES = 4 * 1024 * 1024  # status or history through the DSH proxy


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` cut to at most `limit` characters, the last an ellipsis when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def clip_opt(text: object, limit: int = MAX_TEXT_CHARS) -> str | None:
    """A string clipped; anything else None (the document's "absent")."""
    return clip(text, limit) if isinstance(text, str) else None


def clip_args(args: Iterable[str]) -> list[str]:
    """A command line for display: at most MAX_CMDLINE_ARGS arguments of MAX_TEXT_CHARS each,
    MAX_CMDLINE_CHARS in all; a last element "… N more" when arguments were left out."""
    out: list[str] = []
    total = 0
    args = list(args)
    for arg in args:
        if len(out) == MAX_CMDLINE_ARGS or total >= MAX_CMDLINE_CHARS:
            break
        shown = clip(arg, min(MAX_TEXT_CHARS, MAX_CMDLINE_CHARS - total))
        out.append(shown)
        total += len(shown)
    if len(out) < len(args):
        out.append(f"{ELLIPSIS} {len(args) - len(out)} more")
    return out


def one_line(text: str) -> str:
    """Text a process controls (a command line, a process or model name, a message that quotes one)
    as part of one line of text for a reader: a terminal (`--once`) or an agent (MCP). Line breaks
    and other control and format characters (escape sequences, bidi overrides) become `\\uXXXX`, so
    it can neither start a line of its own (a forged job, an instruction) nor drive the terminal."""
    return "".join(
        f"\\u{ord(ch):04x}" if unicodedata.category(ch)[0] in "CZ" and ch != " " else ch for ch in text
    )


def printable(text: str) -> str:
    """Text a process controls, as data for a program (an agent's structured content): control and
    format characters (escape sequences, line breaks, bidi overrides, zero-width ones) removed, the
    space kept. What is left reads the same everywhere it is shown."""
    return "".join(ch for ch in text if ch == " " or unicodedata.category(ch)[0] not in "CZ")


def printable_all(value: Any) -> Any:
    """``value`` with every string in it made ``printable`` (keys too: a map's keys may be names)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_all(k): printable_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_all(v) for v in value]
    return value


def one_line_all(value: Any) -> Any:
    """``value`` (a document, or a part of one) with every string in it made ``one_line``."""
    if isinstance(value, str):
        return one_line(value)
    if isinstance(value, dict):
        return {k: one_line_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [one_line_all(v) for v in value]
    return value


# Characters that steer how text is shown rather than being shown: C1 controls and DEL, bidi and
# other format characters (U+202E, zero-width ones, tags), line and paragraph separators, lone
# surrogates. JSON may carry them raw; no JSON of ours does. The classes Cc, Cf, Zl, Zp and Cs of
# Unicode 15, beyond ASCII (JSON escapes C0 itself); tests/unit/test_bounds_text.py checks the set
# against the interpreter's unicodedata.
_STEERING_CHARS = re.compile(
    "[\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd"
    "\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f]"
)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_steering(json_text: str) -> str:
    """JSON text with every steering character escaped as \\uXXXX. In the output of json.dumps they
    can stand only inside strings, where the escape means the same character."""
    return _STEERING_CHARS.sub(_json_escape, json_text)


def json_text(value: Any, indent: int | None = None) -> str:
    """JSON for a reader (a terminal, a page, an agent): other scripts' letters as they are (1-4 bytes,
    not 6-12), but no steering character raw."""
    return escape_steering(json.dumps(value, ensure_ascii=False, indent=indent))
