"""The command line's words: its parsers, the checks of what they parsed, its exit codes and limits.

One definition each, used by `main` (sidecar/cli/main.py) and the usage text it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from sidecar import __version__
from sidecar.common.exit_codes import (
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_RUN_NOT_STARTED,
    EXIT_USAGE,
    exit_codes_text,
)
from sidecar.documents import bounds
from sidecar.serve.hosts import is_loopback_host, valid_host_name
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.pods import cgroup_root_prefixes

if TYPE_CHECKING:  # imported where it is used: not every command reads the rules
    from sidecar.verdict import Rules
MIN_INTERVAL_S = 0.1
CHEAP_INTERVAL_S = 0.5
DEFAULT_PORT = 8765
MIN_REMOTE_TOKEN_CHARS = 16
MAX_HISTORY_S = 86400.0  # a day: 57,601 samples at 1.5 s, 69-143 MiB (docs/performance.md)
MAX_GRACE_S = 86400.0  # a day; --stay serves for ever
# Without --grace: how long a sidecar that something has read (the page, a scrape, an API call)
# serves on after its job, so they see the end; one nothing has read has no one to show it to and
# stops with its job (`run -- python nope.py` returns at once).
DEFAULT_GRACE_S = 10.0
# Variables that carry the sidecar's own secrets: the job started by `run` never sees them.
SIDECAR_SECRET_ENV = ("DSH_SIDECAR_TOKEN",)
KUBELET_CGROUP_ROOT_ENV = "DSH_KUBELET_CGROUP_ROOT"  # sources/kubelet/lookup.py reads the same


class UsageError(Exception):
    pass


class PortError(Exception):
    """The port cannot be bound: EXIT_PORT."""


def fail(code: int, message: str) -> int:
    # a message may quote what another program said (Prometheus's error, a process's name): one line,
    # never an escape sequence of theirs on the user's terminal
    print(f"dsh-sidecar: error: {bounds.one_line(message)}", file=sys.stderr, flush=True)
    return code


def print_to_a_pipe(text: str, end: str = "\n") -> int:
    """Print `text`; a reader that stops early (`| head -2`) ends it quietly, as for any Unix tool."""
    try:
        print(text, end=end, flush=True)
    except BrokenPipeError:
        # Python would flush stdout again at exit and print a traceback: point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """argparse with our exit code for bad usage (`run`'s own: its job's codes pass through)."""

    def __init__(self, *args: Any, usage_exit: int = EXIT_USAGE, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.usage_exit = usage_exit

    def error(self, message: str) -> NoReturn:  # argparse's message, our exit code and one hint line
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr, flush=True)
        raise SystemExit(self.usage_exit)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _interval_s(text: str) -> float:
    """--interval (serve, run, mcp): the one check of its minimum, with its one message."""
    value = _positive_float(text)
    if value < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"{text} s is below {MIN_INTERVAL_S} s: polling NVML and /proc that often costs a core; "
            f"use {CHEAP_INTERVAL_S} or more"
        )
    return value


def _bounded_seconds(limit_s: float, *, zero_ok: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, at most `limit_s` (inf, nan and 1e12 are
    refused: they would never end or would size a buffer by them)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        low_ok = value >= 0 if zero_ok else value > 0
        if not (low_ok and value <= limit_s):  # also refuses nan
            least = "0 or more" if zero_ok else "a positive number of"
            raise argparse.ArgumentTypeError(f"must be {least} seconds, at most {limit_s:.0f}: {text!r}")
        return value

    return parse


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535 (0 picks a free port): {text!r}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a process id is a positive integer: {text!r}")
    return value


def _metric_jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of jobs: {text!r}") from None
    if not 0 <= value <= bounds.MAX_METRIC_JOBS_FLAG:
        raise argparse.ArgumentTypeError(f"--metrics-max-jobs is 0-{bounds.MAX_METRIC_JOBS_FLAG}: {text!r}")
    return value


def _host_name(text: str) -> str:
    if not valid_host_name(text):
        raise argparse.ArgumentTypeError(
            f"not a host name or IP address: {text!r} (give the name alone, e.g. gpu-node-07.example.org)"
        )
    return text.strip()


def _cgroup_root(text: str) -> str:
    try:
        cgroup_root_prefixes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (give the kubelet's --cgroup-root, e.g. /kube)") from None
    return text


def _add_kubelet_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubelet-cgroup-root",
        type=_cgroup_root,
        default=os.environ.get(KUBELET_CGROUP_ROOT_ENV) or None,
        metavar="PATH",
        help="the kubelet's --cgroup-root when it is neither / nor kind's /kubelet: a process's cgroup "
        "names a pod only when rooted there (default: $DSH_KUBELET_CGROUP_ROOT)",
    )


def _root_path(text: str) -> str:
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"not a directory's path: {text!r}")
    return text


def _add_path_options(p: argparse.ArgumentParser) -> None:
    """--path.procfs and --path.sysfs (node_exporter's names; --procfs and --sysfs, the short ones):
    where the host's /proc and /sys are, for a sidecar in a container that mounts them elsewhere (e.g.
    /host/proc, /host/sys), or a test's fixture trees."""
    p.add_argument(
        "--path.procfs",
        "--procfs",
        dest="path_procfs",
        type=_root_path,
        default=HOST.procfs,
        metavar="PATH",
        help=f"where the host's /proc is mounted: processes, their owners and sockets are read there "
        f"(default {HOST.procfs})",
    )
    p.add_argument(
        "--path.sysfs",
        "--sysfs",
        dest="path_sysfs",
        type=_root_path,
        default=HOST.sysfs,
        metavar="PATH",
        help=f"where the host's /sys is mounted: the OS's graphics devices are read there (default {HOST.sysfs})",
    )


def host_paths(args: argparse.Namespace) -> HostPaths:
    """The /proc and /sys that --path.procfs and --path.sysfs name, handed to every source."""
    return HostPaths(procfs=args.path_procfs, sysfs=args.path_sysfs)


def _add_serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; others need --token)"
    )
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help="port (default 8765; 0 picks a free one)")
    p.add_argument(
        "--interval",
        type=_interval_s,
        default=1.5,
        help=f"seconds between polls (default 1.5, at least {MIN_INTERVAL_S})",
    )
    p.add_argument(
        "--history",
        type=_bounded_seconds(MAX_HISTORY_S, zero_ok=False),
        default=600.0,
        help=f"seconds of history to keep (default 600, at most {MAX_HISTORY_S:.0f})",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("DSH_SIDECAR_TOKEN"),
        help="require 'Authorization: Bearer TOKEN' (default: $DSH_SIDECAR_TOKEN)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        type=_host_name,
        metavar="NAME",
        help="also answer requests whose Host header is NAME (repeatable; the bound host, loopback "
        "names and, for 0.0.0.0 or ::, this machine's name and its addresses are always answered)",
    )
    p.add_argument("--job-name", default=None, help="adds a job_name label to /metrics")
    p.add_argument(
        "--metrics-max-jobs",
        type=_metric_jobs,
        default=bounds.MAX_METRIC_JOBS,
        metavar="N",
        help=f"per-job series in /metrics for at most N live jobs, the oldest (default {bounds.MAX_METRIC_JOBS}; "
        "dsh_jobs_omitted counts the rest)",
    )
    p.add_argument(
        "--metrics-min-job-age",
        type=_bounded_seconds(3600.0, zero_ok=True),
        default=bounds.METRICS_MIN_JOB_AGE_S,
        metavar="S",
        help=f"a job gets per-job series in /metrics once it has run S seconds (default "
        f"{bounds.METRICS_MIN_JOB_AGE_S:g}): a stream of short jobs adds none",
    )
    p.add_argument(
        "--metrics-per-user",
        action="store_true",
        help="per-user aggregates instead of per-job series in /metrics (label `user`, no job_id): "
        "for fleets, series that do not grow with the jobs",
    )
    p.add_argument(
        "--prometheus",
        default=os.environ.get("DSH_PROMETHEUS_URL"),
        metavar="URL",
        help="the Prometheus that scrapes every node's sidecar, e.g. http://prometheus:9090: serves "
        "the cluster view at /api/dsh-gpu-dashboard/cluster and on the page (default: $DSH_PROMETHEUS_URL)",
    )
    _prometheus_user_option(p)
    p.add_argument("--stay", action="store_true", help="keep serving after the job has exited")
    p.add_argument(
        "--grace",
        type=_bounded_seconds(MAX_GRACE_S, zero_ok=True),
        default=None,
        help=f"seconds to keep serving after the job exits, at most {MAX_GRACE_S:.0f} (default: "
        f"{DEFAULT_GRACE_S:g} once anything has read this sidecar (the page, a scrape, the API), else 0: "
        "nobody would see the end; see --stay)",
    )
    _add_kubelet_option(p)
    _add_path_options(p)
    _add_runs_options(p)


def _add_runs_options(p: argparse.ArgumentParser) -> None:
    runs_db_option(p, "the runs ledger: every run watched is kept there, its history outliving the sidecar")
    p.add_argument("--no-runs", action="store_true", help="keep no runs ledger: watch live only")
    # Hidden, for tests: the span of a ledger row in seconds (default a minute). A comparison needs
    # minutes of a run after its first; tests record runs of seconds (tests/integration/test_compare_runs.py).
    p.add_argument("--runs-period", type=_runs_period_s, default=None, help=argparse.SUPPRESS)


def _runs_period_s(text: str) -> float:
    from sidecar.poll.run_figures import check_period_s

    try:
        return check_period_s(_positive_float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc}") from None


# The usage line names every command (argparse's own would list only the serve options); lines
# after the first start with spaces, as argparse's wrapped usage does.
SERVE_USAGE = """dsh-sidecar [--pid PID] [--once [--json]] [serve options]
       dsh-sidecar run [serve options] -- CMD [ARGS...]
       dsh-sidecar doctor [--python PYTHON] [--json]
       dsh-sidecar mcp [--url URL [--token T] | --pid PID] [--add-to-dsh [PROFILE]]
       dsh-sidecar cluster --prometheus URL [--job KEY] [--json]
       dsh-sidecar report [--since 7d] [--until T] [--by user|job|gpu] [--json|--csv]
                          [--runs-db PATH | --prometheus URL]
       dsh-sidecar runs [--since 7d] [--json] [--runs-db PATH]
       dsh-sidecar compare RUN [OTHER] [--json] [--runs-db PATH]
       serve options: [--host HOST] [--port PORT] [--interval S] [--history S] [--token T]
                      [--allow-host NAME] [--job-name NAME] [--prometheus URL] [--stay] [--grace S]
                      [--kubelet-cgroup-root PATH] [--path.procfs PATH] [--path.sysfs PATH]
                      [--runs-db PATH | --no-runs]"""


def serve_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dsh-sidecar",
        usage=SERVE_USAGE,
        description="Watch a training job's process tree and tell whether its model really runs on the GPU.",
        # raw: the exit codes' table keeps its lines; the paragraph above it is wrapped here
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.fill(
            "Other commands: 'dsh-sidecar run -- CMD ...' starts and watches CMD; 'dsh-sidecar doctor' checks "
            "this machine; 'dsh-sidecar mcp' serves MCP tools over stdio (docs/mcp.md); 'dsh-sidecar cluster' "
            "shows a job across nodes (docs/deploy.md); 'dsh-sidecar report' accounts GPU-hours held, busy "
            "and held with no work; 'dsh-sidecar runs' lists the runs remembered and 'dsh-sidecar compare RUN' "
            "compares one with the run before it (README, Runs).",
            100,
        )
        + "\n\n"
        + exit_codes_text(),
    )
    p.add_argument(
        "--pid",
        type=_pid,
        default=None,
        help="process id of one training job (or its launcher); without it, every job of this user is "
        "found and watched (root: of every user)",
    )
    p.add_argument("--once", action="store_true", help="poll once, print a summary and exit")
    p.add_argument(
        "--json",
        action="store_true",
        help="with --once: print the status document as JSON (without --pid: the jobs list and every "
        "job's document)",
    )
    p.add_argument("--version", action="version", version=f"dsh-sidecar {__version__}")
    _add_serve_options(p)
    return p


def run_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dsh-sidecar run",
        description="Start CMD, watch it, and serve the dashboard; exits with CMD's exit code once it ran.",
        usage_exit=EXIT_RUN_NOT_STARTED,
    )
    _add_serve_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    return p


def doctor_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dsh-sidecar doctor",
        description=f"Check this machine: driver, GPUs, torch. Exits {EXIT_PROBLEMS} when it finds a problem "
        f"(each listed with its fix), {EXIT_OK} when none.",
    )
    p.add_argument("--python", default=sys.executable, help="the Python interpreter of your training job")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    _add_path_options(p)
    return p


def mcp_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dsh-sidecar mcp",
        description="An MCP server over stdio with the tools list_jobs, gpu_status, gpu_history, list_runs and compare_runs "
        "(docs/mcp.md). It reads a running sidecar (--url) or polls in this process.",
    )
    p.add_argument(
        "--url", default=None, help="a running sidecar, e.g. http://127.0.0.1:8765 (default: poll here)"
    )
    p.add_argument(
        "--token",
        default=os.environ.get("DSH_SIDECAR_TOKEN"),
        help="the sidecar's token, sent as 'Authorization: Bearer TOKEN' (default: $DSH_SIDECAR_TOKEN)",
    )
    p.add_argument("--pid", type=_pid, default=None, help="without --url: watch only the job under PID")
    p.add_argument(
        "--interval",
        type=_interval_s,
        default=1.5,
        help=f"without --url: seconds between polls (default 1.5, at least {MIN_INTERVAL_S})",
    )
    p.add_argument(
        "--add-to-dsh",
        nargs="?",
        const="web",
        default=None,
        metavar="PROFILE",
        help="do not serve: add this server, with these options, to the DSH profile PROFILE (default web: "
        "$DSH_HOME/profiles/web/cordis.patch.yml) and exit; running it again replaces that row",
    )
    p.add_argument(
        "--history",
        type=_bounded_seconds(MAX_HISTORY_S, zero_ok=False),
        default=600.0,
        help=f"without --url: seconds of history to keep (default 600, at most {MAX_HISTORY_S:.0f})",
    )
    runs_db_option(
        p,
        "without --url: the runs ledger, where the jobs polled here are kept and list_runs and compare_runs read",
    )
    p.add_argument("--no-runs", action="store_true", help="without --url: keep no runs ledger, read none")
    _add_kubelet_option(p)
    _add_path_options(p)
    return p


def cluster_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dsh-sidecar cluster",
        description="One view of a job across nodes: every node's GPUs, every rank's step shares and "
        "forward rate, and nodes that stopped reporting, read from the Prometheus that scrapes the "
        "nodes' sidecars (docs/deploy.md).",
    )
    p.add_argument(
        "--prometheus",
        default=os.environ.get("DSH_PROMETHEUS_URL"),
        metavar="URL",
        help="Prometheus's web address, e.g. http://prometheus:9090 (default: $DSH_PROMETHEUS_URL)",
    )
    _prometheus_user_option(p)
    p.add_argument(
        "--job", default=None, metavar="KEY", help="only the job of this key (the `job_key` label) or job_id"
    )
    p.add_argument("--json", action="store_true", help="print the cluster document as JSON")
    p.add_argument(
        "--timeout",
        type=_bounded_seconds(60.0, zero_ok=False),
        default=5.0,
        help="seconds to wait for all of the view's answers (default 5, at most 60)",
    )
    _add_path_options(p)
    return p


def runs_db_option(p: argparse._ActionsContainer, what: str = "the runs ledger") -> None:
    """--runs-db, the one declaration of the flag every command that records or reads runs has:
    ``what`` says what the command does with the file."""
    p.add_argument(
        "--runs-db",
        default=os.environ.get("DSH_RUNS_DB") or None,
        metavar="PATH",
        help=f"{what} (default: $DSH_RUNS_DB, else $XDG_STATE_HOME/dsh-gpu-dashboard/runs.sqlite3, "
        "~/.local/state when unset; root: /var/lib/dsh-gpu-dashboard/runs.sqlite3)",
    )


def _prometheus_user_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prometheus-user",
        type=_user_uid,
        default=None,
        metavar="USER",
        help="a Prometheus on this machine is asked only when its port is served by you or root, or by "
        "this user (a name or uid: the `prometheus` user a distribution's package runs it as); "
        "default: $DSH_PROMETHEUS_USER",
    )


def _user_uid(text: str) -> int:
    """A user name or uid, as a uid (argparse type)."""
    import pwd

    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise argparse.ArgumentTypeError(f"no user {text!r} on this machine") from None


def prometheus_trusted_uids(args: argparse.Namespace) -> frozenset[int]:
    """The users besides ours and root whose local Prometheus may be asked (--prometheus-user)."""
    uid = args.prometheus_user
    if uid is None and os.environ.get("DSH_PROMETHEUS_USER"):
        try:
            uid = _user_uid(os.environ["DSH_PROMETHEUS_USER"])
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"$DSH_PROMETHEUS_USER: {exc}") from None
    return frozenset() if uid is None else frozenset({uid})


def check_serve_args(args: argparse.Namespace) -> None:
    if args.interval < CHEAP_INTERVAL_S:  # at least MIN_INTERVAL_S: _interval_s checked
        print(
            f"dsh-sidecar: warning: --interval {args.interval} s is short: NVML polling itself costs CPU, and the "
            "driver's utilisation samples are ~1/6-1 s apart",
            file=sys.stderr,
            flush=True,
        )
    if not is_loopback_host(args.host) and not args.token:
        raise UsageError(
            f"--host {args.host} is reachable from other machines: add --token TOKEN (or set "
            "DSH_SIDECAR_TOKEN) so only you can read it"
        )
    try:  # before anything starts (`run` would otherwise start the job first)
        socket.getaddrinfo(args.host, None)
    except (OSError, UnicodeError):
        raise UsageError(bad_host(args.host)) from None
    check_token(args.token, loopback=is_loopback_host(args.host))
    if args.prometheus:
        from sidecar.sources.prometheus import check_url  # the HTTP door: imported only when asked for

        try:
            check_url(args.prometheus)
        except ValueError as exc:
            raise UsageError(f"--prometheus: {exc}") from None
        prometheus_trusted_uids(args)  # a $DSH_PROMETHEUS_USER that names no user: said now


def check_token(token: str | None, loopback: bool) -> None:
    """A Bearer header carries printable ASCII only: any other token would never match. Beyond
    loopback anyone on the network may guess, so it must be long too."""
    if not token:
        return
    if not all("!" <= c <= "~" for c in token):
        raise UsageError(
            "the token must be printable ASCII without spaces (a Bearer header cannot carry other "
            "characters), e.g. one from `openssl rand -hex 16`"
        )
    if not loopback and len(token) < MIN_REMOTE_TOKEN_CHARS:
        raise UsageError(
            f"the token is {len(token)} characters: a sidecar reachable from other machines needs at "
            f"least {MIN_REMOTE_TOKEN_CHARS} (e.g. `openssl rand -hex 16`)"
        )


def bad_host(host: str) -> str:
    return (
        f"--host {host!r} is neither an address nor a name this machine can resolve: give an IP "
        "address (127.0.0.1, or 0.0.0.0 for every interface) or a resolvable host name"
    )


def rules_from_env() -> Rules:
    """DSH_SIDECAR_RULES='{"idle_window_s": 3}' tunes the verdict's thresholds (also used by tests)."""
    from sidecar.verdict import Rules

    raw = os.environ.get("DSH_SIDECAR_RULES")
    if not raw:
        return Rules()
    try:
        values = json.loads(raw)
        rules = Rules(**values)
        for name, value in vars(rules).items():  # every threshold is a number; a str fails every poll
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                raise TypeError(f"{name} must be a number, got {value!r}")
        return rules
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"DSH_SIDECAR_RULES is not valid ({exc}); expected JSON like '{{\"idle_window_s\": 10}}'"
        ) from None


# ---------------------------------------------------------------------------------------------
