"""`dsh-sidecar`'s exit codes: one definition each, used by the commands (sidecar/cli/) and rendered
into `--help` and docs/api.md (sidecar/documents/contract_docs.py), which is where users read them.

`run` passes its job's own exit code through once the job has started, so its own failures keep
clear of the codes a job uses: 125, 126 and 127, as `env`, `nice` and `timeout` do (a job's bad
usage is often 2, which the other commands use for theirs).
"""

from __future__ import annotations

import textwrap
from typing import NamedTuple

EXIT_OK = 0
EXIT_PROBLEMS = 1  # `doctor` found a problem; `cluster`'s view has a warning
EXIT_USAGE = 2
EXIT_NO_PID = 3
EXIT_PORT = 4
EXIT_PROMETHEUS = 5  # `cluster`, `report --prometheus`: Prometheus did not answer a query
EXIT_DSH_PROFILE = 6  # `mcp --add-to-dsh`: the DSH profile's patch file cannot be read, written or added to
EXIT_LEDGER = 7  # `report`: the run ledger is missing or cannot be read; `runs`, `compare`: it cannot be read
EXIT_NO_RUN = 8  # `compare`: no run of that name, or more than one
EXIT_NO_PREVIOUS = 9  # `compare RUN` without OTHER: no earlier run of the same command in the same folder
EXIT_RUN_NOT_STARTED = 125  # `run` failed before it started the job (usage, port): the job never ran
EXIT_RUN_CANNOT_EXECUTE = 126  # `run`: the command exists but cannot be executed
EXIT_RUN_NOT_FOUND = 127  # `run`: no such command
EXIT_SIGNAL_BASE = 128  # a job killed by signal N: 128 + N, as a shell says it
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT) before anything ran


class ExitCode(NamedTuple):
    code: str  # a number, or the words for a range
    commands: str
    meaning: str


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(str(EXIT_OK), "every command", "ok; `doctor`: no problem found; `cluster`: every node and rank reports"),
    ExitCode(
        str(EXIT_PROBLEMS),
        "`doctor`, `cluster`",
        "`doctor` found a problem (each is listed with its fix); `cluster`: the view has a warning "
        "(`node-missing`, `ranks-missing`, `straggler-rank`)",
    ),
    ExitCode(
        str(EXIT_USAGE),
        "every command but `run`",
        "bad usage: a flag, a value or an environment variable ($DSH_SIDECAR_RULES, $DSH_SIDECAR_TOKEN); "
        "the line on stderr says which",
    ),
    ExitCode(str(EXIT_NO_PID), "`--pid`, `mcp --pid`", "no process with that pid (or it is a zombie)"),
    ExitCode(str(EXIT_PORT), "serving (not `run`)", "the port is in use or cannot be bound"),
    ExitCode(str(EXIT_PROMETHEUS), "`cluster`, `report --prometheus`", "Prometheus did not answer"),
    ExitCode(
        str(EXIT_DSH_PROFILE),
        "`mcp --add-to-dsh`",
        "the DSH profile's cordis.patch.yml cannot be read or written, or holds what a row cannot be added "
        "to (the line on stderr says which and what to do)",
    ),
    ExitCode(
        str(EXIT_LEDGER),
        "`report`, `runs`, `compare`",
        "the run ledger is missing (`report`: no run recorded yet, or another --runs-db; `runs` says so and "
        "exits 0) or cannot be read (another user's file, one others may write, a newer schema, a read "
        "that failed); the line on stderr says which and what to do",
    ),
    ExitCode(
        str(EXIT_NO_RUN),
        "`compare`",
        "no recorded run has that id, or more than one has (the line on stderr lists them): `dsh-sidecar runs` lists the ids",
    ),
    ExitCode(
        str(EXIT_NO_PREVIOUS),
        "`compare`",
        "RUN alone, and no earlier run of the same command in the same folder is recorded: name the run to compare it with",
    ),
    ExitCode(
        str(EXIT_INTERRUPTED),
        "every command",
        "interrupted (Ctrl-C) while starting, or during `--once`, `doctor`, `cluster`, `report`; a serving sidecar "
        "stops with 0, and `run` forwards Ctrl-C to the job and exits with the job's code",
    ),
    ExitCode(
        str(EXIT_RUN_NOT_STARTED),
        "`run`",
        "dsh-sidecar failed before it started the job (bad usage, the port in use or not bindable; "
        "the line on stderr says which): the job never ran",
    ),
    ExitCode(
        str(EXIT_RUN_CANNOT_EXECUTE), "`run`", "the command exists but cannot be executed (no permission, not a program)"
    ),
    ExitCode(str(EXIT_RUN_NOT_FOUND), "`run`", "the command was not found"),
    ExitCode(
        "any other",
        "`run`",
        f"the job ran: its own exit code, passed through ({EXIT_SIGNAL_BASE}+N when signal N killed it); "
        "`dsh-sidecar: the job (pid P) exited with exit code C` on stdout says so",
    ),
)


def exit_codes_text(width_chars: int = 100) -> str:
    """The table for `--help`: plain text, each code's lines indented under it."""
    code_chars = max(len(e.code) for e in EXIT_CODES)
    lines = ["exit codes:"]
    for e in EXIT_CODES:
        text = f"{e.commands}: {e.meaning}".replace("`", "")
        lines += textwrap.wrap(
            text,
            width_chars,
            initial_indent=f"  {e.code:<{code_chars}}  ",
            subsequent_indent=" " * (code_chars + 4),
        )
    return "\n".join(lines)


def exit_codes_markdown() -> list[str]:
    """The table for docs/api.md."""
    lines = ["| exit code | commands | meaning |", "|---|---|---|"]
    lines += [f"| {e.code} | {e.commands} | {e.meaning.replace('|', '/')} |" for e in EXIT_CODES]
    return lines
