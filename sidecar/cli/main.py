"""`dsh-sidecar`: attach to a training job and answer "is it really running on the GPU?".

    dsh-sidecar [--host 127.0.0.1] [--port 8765] [--interval 1.5] [--history 600] [--token T]
                                    every job of this user (root: of every user), found by itself
    dsh-sidecar --pid PID [serve options]           one job: the process tree under PID
    dsh-sidecar [--pid PID] --once [--json]
    dsh-sidecar run [serve options] -- CMD [ARGS...]
    dsh-sidecar doctor [--python PYTHON] [--json]
    dsh-sidecar mcp [--url URL [--token T] | --pid PID] [--interval 1.5] [--history 600]
                                    an MCP server over stdio (docs/mcp.md; needs the [mcp] extra)
    dsh-sidecar mcp [options] --add-to-dsh [PROFILE]
                                    add that server to a DSH profile and exit (sidecar/cli/dsh_patch.py)
    dsh-sidecar cluster --prometheus URL [--job KEY] [--json]
                                    one job across nodes, from Prometheus (docs/deploy.md)
    dsh-sidecar report [--since 7d] [--until T] [--by user|job|gpu] [--json|--csv]
                       [--runs-db PATH | --prometheus URL]
                                    GPU-hours held, busy and held with no work (sidecar/cli/report.py)
    dsh-sidecar runs [--since 7d] [--json] [--runs-db PATH]
    dsh-sidecar compare RUN [OTHER] [--json] [--runs-db PATH]
                                    the runs remembered, and two compared (sidecar/cli/runs_commands.py)

Exit codes: sidecar/common/exit_codes.py (shown by `--help` and in docs/api.md). Every failure
prints one line saying what happened and what to do, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, TypedDict

from sidecar.cli.args import (
    DEFAULT_GRACE_S,
    SIDECAR_SECRET_ENV,
    PortError,
    UsageError,
    bad_host,
    check_serve_args,
    check_token,
    cluster_parser,
    doctor_parser,
    fail,
    host_paths,
    mcp_parser,
    print_to_a_pipe,
    rules_from_env,
    run_parser,
    serve_parser,
)
from sidecar.cli.summary import human_summary, jobs_summary
from sidecar.common.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_NO_PID,
    EXIT_OK,
    EXIT_PORT,
    EXIT_RUN_CANNOT_EXECUTE,
    EXIT_RUN_NOT_FOUND,
    EXIT_RUN_NOT_STARTED,
    EXIT_SIGNAL_BASE,
    EXIT_USAGE,
)
from sidecar.documents.bounds import json_text
from sidecar.serve.hosts import is_loopback_host
from sidecar.sources.host import HostPaths

if TYPE_CHECKING:  # each imported where it is used: a command loads only what it runs
    from sidecar.poll.discovery import JobsPoller
    from sidecar.poll.poller import Poller
    from sidecar.poll.recorder import RunRecorder
    from sidecar.serve.wsgi import SidecarWSGIServer
    from sidecar.sources.kubelet.lookup import ProcessPods
    from sidecar.sources.ledger import Ledger
    from sidecar.verdict import Rules

    AnyPoller = Poller | JobsPoller  # --pid and `run`'s, or discovery's


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "run":
            try:
                return _main_run(run_parser().parse_args(argv[1:]))
            except (UsageError, PortError) as exc:  # before the job started: a code no job's own
                return fail(EXIT_RUN_NOT_STARTED, str(exc))
        if argv and argv[0] == "doctor":
            from sidecar.cli.doctor import run_doctor

            return run_doctor(doctor_parser().parse_args(argv[1:]))
        if argv and argv[0] == "mcp":
            return _main_mcp(mcp_parser().parse_args(argv[1:]))
        if argv and argv[0] == "cluster":
            from sidecar.cli.cluster import run_cluster

            return run_cluster(cluster_parser().parse_args(argv[1:]))
        if argv and argv[0] == "report":
            from sidecar.cli.args_runs import report_parser
            from sidecar.cli.report import run_report

            return run_report(report_parser().parse_args(argv[1:]))
        if argv and argv[0] in ("runs", "compare"):
            # Imported by these commands only: the comparison and its documents (~35 ms) are no
            # part of a sidecar's start.
            from sidecar.cli import runs_commands
            from sidecar.cli.args_runs import compare_parser, runs_parser

            if argv[0] == "runs":
                return runs_commands.run_runs(runs_parser().parse_args(argv[1:]))
            return runs_commands.run_compare(compare_parser().parse_args(argv[1:]))
        return _main_serve(serve_parser().parse_args(argv))
    except UsageError as exc:
        return fail(EXIT_USAGE, str(exc))
    except PortError as exc:
        return fail(EXIT_PORT, str(exc))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _pid_exists(args: argparse.Namespace) -> bool:
    """Whether --pid names a process that has not exited, in --path.procfs."""
    from sidecar.sources.proctree import pid_exists

    return pid_exists(args.pid, host=host_paths(args))


def _pods(args: argparse.Namespace) -> ProcessPods:
    """The pod lookup the pollers share: the kubelet's cgroup root is --kubelet-cgroup-root's."""
    from sidecar.sources.kubelet.lookup import PodLookup, ProcessPods

    return ProcessPods(PodLookup(cgroup_root=args.kubelet_cgroup_root, host=host_paths(args)))


class PollerOptions(TypedDict):
    """What every poller of the serve, run and mcp commands is given (Poller's and JobsPoller's
    keyword arguments): the options' interval, history and rules, the shared pod lookup, and where
    /proc and /sys are."""

    interval_s: float
    history_s: float
    rules: Rules
    pods: ProcessPods
    host: HostPaths


def _poller_options(args: argparse.Namespace, rules: Rules) -> PollerOptions:
    return PollerOptions(
        interval_s=args.interval, history_s=args.history, rules=rules, pods=_pods(args), host=host_paths(args)
    )


def _main_serve(args: argparse.Namespace) -> int:
    if args.json and not args.once:
        raise UsageError(
            "--json prints one status document and needs --once (dsh-sidecar --pid PID --once --json)"
        )
    if not args.once:
        check_serve_args(args)
    if args.pid is None:
        return _main_discover(args)
    if not _pid_exists(args):
        return fail(
            EXIT_NO_PID,
            f"no process with pid {args.pid}: is the job running? Find it with "
            "`pgrep -af python`, or start it with `dsh-sidecar run -- python train.py`",
        )
    from sidecar.poll.poller import Poller

    rules = rules_from_env()
    if args.once:
        poller = Poller(args.pid, **_poller_options(args, rules))
        try:
            doc = poller.poll_once()
        finally:
            poller.stop()
        text = json_text(doc, indent=2) if args.json else human_summary(doc)
        return print_to_a_pipe(text)
    sock = _listen(args)
    poller = Poller(
        args.pid, lazy_document=True, recorder=_recorder(args, rules), **_poller_options(args, rules)
    )
    _SIGNALS.install()
    return _serve(args, poller, sock, child=None)


def _main_discover(args: argparse.Namespace) -> int:
    """Without --pid: every job of this user (root: every user's), found by the sidecar."""
    from sidecar.poll.discovery import JobsPoller

    rules = rules_from_env()
    sock = None if args.once else _listen(args)
    from sidecar.cli.runs import open_recording

    poller = JobsPoller(recording=open_recording(args, batched=True), **_poller_options(args, rules))
    if args.once:
        try:
            jobs = poller.poll_once()
            docs = poller.documents()
        finally:
            poller.stop()
        if args.json:
            text = json_text({"jobs": jobs, "documents": docs}, indent=2)
        else:
            text = jobs_summary(jobs, docs)
        return print_to_a_pipe(text)
    assert sock is not None  # bound above for all but --once, which has returned
    _SIGNALS.install()
    return _serve(args, poller, sock, child=None)


def _mcp_url(url: str, token: str | None) -> str:
    """--url: http(s)://host[:port][/prefix], no credentials, query or fragment. Any host the user
    names is theirs to choose; a token sent in clear text beyond loopback gets a warning."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {url!r} is not an http:// or https:// URL, e.g. http://127.0.0.1:8765")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise UsageError(f"--url {url!r}: give scheme, host, port (and path) only; the token goes in --token")
    if parts.scheme == "http" and token and not is_loopback_host(parts.hostname):
        print(
            f"dsh-sidecar: warning: --url {parts.hostname} is not this machine and http:// sends the token "
            "in clear text; use an SSH tunnel (ssh -L 8765:127.0.0.1:8765 HOST) or https://",
            file=sys.stderr,
            flush=True,
        )
    return url.strip()


def _main_mcp(args: argparse.Namespace) -> int:
    """`dsh-sidecar mcp`: stdout is the MCP channel; every message of ours goes to stderr. With
    --add-to-dsh it serves nothing: the same options, checked the same way, go into DSH's profile."""
    try:
        import mcp.server.lowlevel  # noqa: F401  (the optional SDK: fail here, before polling)
    except ImportError:
        return fail(EXIT_USAGE, "the MCP server needs the MCP SDK: pip install 'dsh-gpu-dashboard[mcp]'")
    url = ""
    if args.url is not None:
        if args.pid is not None:
            raise UsageError("--url reads a running sidecar and --pid polls here: give one of them")
        check_token(args.token, loopback=True)
        url = _mcp_url(args.url, args.token)
    elif args.pid is not None and not _pid_exists(args):
        return fail(EXIT_NO_PID, f"no process with pid {args.pid}: is the job running?")
    if args.add_to_dsh is not None:
        from sidecar.cli.dsh_patch import add_to_dsh

        return add_to_dsh(args)
    from sidecar.serve import mcp_server

    if args.url is not None:
        from sidecar.sources import http_get

        get = partial(http_get.get, host=host_paths(args))  # whose server it is: --path.procfs's tables
        backend: mcp_server.Backend = mcp_server.HttpBackend(url, args.token, get=get)
    else:
        rules = rules_from_env()
        poller: AnyPoller
        if args.pid is not None:
            from sidecar.poll.poller import Poller

            poller = Poller(args.pid, recorder=_recorder(args, rules), **_poller_options(args, rules))
        else:
            from sidecar.cli.runs import open_recording
            from sidecar.poll.discovery import JobsPoller

            poller = JobsPoller(recording=open_recording(args, batched=True), **_poller_options(args, rules))
        from sidecar.cli.runs_commands import runs_source

        backend = mcp_server.LocalBackend(poller, runs=runs_source(args, ledger=_recording_ledger(poller)))
    mcp_server.serve(backend)
    return EXIT_OK


def _serving_token(given: str | None, poller: AnyPoller) -> tuple[str | None, bool]:
    """(the token the server wants, whether it was made here). Any user of this machine can reach a
    loopback port, and a root sidecar reads every user's processes (discovery: every user's jobs;
    --pid and `run`: a job's commands, working directory and models), and root's connections are
    not told apart from the owner's: without --token it makes one, shown only to whoever started
    it (as Jupyter does). Another user's sidecar without a token serves its own user and root only
    (sidecar.serve.peers.OwnerOnly)."""
    if not given and os.geteuid() == 0:
        return secrets.token_urlsafe(24), True
    return given, False


def page_urls(host: str, port: int) -> list[str]:
    """The page's addresses to print, the first on the "serving" line. For --host 0.0.0.0 or ::,
    which no browser on another machine can open: this machine's name, then its interfaces'
    addresses (the Host check answers the name and every address); else the bound host."""
    from sidecar.serve.hosts import is_wildcard_bind
    from sidecar.sources.interfaces import host_name, interface_addresses

    hosts = [host_name(), *interface_addresses(ipv6=":" in host)] if is_wildcard_bind(host) else [host]
    return [f"http://{f'[{h}]' if ':' in h else h}:{port}/" for h in hosts]


def _announce(urls: list[str], token: str | None, generated: bool, watching: str, every_user: bool) -> None:
    """The lines a person reads to open the page. The last one is the address to open, with the
    token when the page needs one: without it the page's data requests answer 401, and a person
    copies the last line, not one scrolled above it."""
    url = urls[0]
    # The URL stays the line's third word (tools parse it); the rest says how to open it.
    how = (
        "open the page with its token, below"
        if generated
        else "a token is required, below"
        if token
        else "open it in a browser; other users of this machine are refused"
    )
    print(f"dsh-sidecar: serving {url} (watching {watching}; {how})", flush=True)
    if len(urls) > 1:
        print(f"dsh-sidecar: also by this machine's addresses: {', '.join(urls[1:])}", flush=True)
    if generated:
        shown = "every user's jobs are shown" if every_user else "it runs as root"
        print(
            f"dsh-sidecar: {shown}, so a token keeps the other users of this machine "
            f"out (choose your own with --token or DSH_SIDECAR_TOKEN); the page: {url}?token={token}",
            flush=True,
        )
    elif token:
        print(f"dsh-sidecar: a token is required: open {url}?token=<your token>", flush=True)


def _listen(args: argparse.Namespace, *, before_job: bool = False) -> socket.socket:
    """The listening socket on --host/--port, bound before the poller (and `run`'s job) starts, so
    a port that is taken ends the sidecar before anything began."""
    from sidecar.serve.wsgi import bind_listener

    try:
        return bind_listener(args.host, args.port)
    except ValueError:  # waitress: a host that does not resolve ("Invalid host/port specified.")
        raise UsageError(bad_host(args.host)) from None
    except OSError as exc:
        what = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror or exc})"
        raise PortError(
            f"port {args.port} on {args.host} {what}: choose another with --port PORT "
            "(--port 0 picks a free one), or stop the other sidecar"
            + ("; the job was not started" if before_job else "")
        ) from None


def _serve(
    args: argparse.Namespace, poller: AnyPoller, sock: socket.socket, child: subprocess.Popen[bytes] | None
) -> int:
    """Serve on `sock` (_listen's) until the job is gone (and its grace is over) or a signal."""
    server, read = _start_server(args, poller, sock)
    try:
        _supervise(args, poller, child, read)
    finally:  # whatever ends the wait: the poller and the server stop, once
        poller.stop()
        try:
            server.close()
        except Exception:  # noqa: BLE001 -- in a finally: nothing may replace what is already on its way out
            pass
    if child is not None:
        rc = child.returncode
        return EXIT_SIGNAL_BASE - rc if rc is not None and rc < 0 else (rc or 0)
    return EXIT_OK


def _start_server(
    args: argparse.Namespace, poller: AnyPoller, sock: socket.socket
) -> tuple[SidecarWSGIServer, threading.Event]:
    """The app on `sock`, served from its own thread, the poller started, the URL announced; with
    the event set once something has read it (ServerConfig.read)."""
    from sidecar.cli.cluster import cluster_cache
    from sidecar.cli.runs_commands import runs_source
    from sidecar.serve.hosts import host_policy
    from sidecar.serve.metrics import make_metrics
    from sidecar.serve.peers import OwnerOnly, own_uid
    from sidecar.serve.server import ServerConfig, create_app
    from sidecar.serve.wsgi import create_server
    from sidecar.sources.sockets import client_socket_uid

    token, generated = _serving_token(args.token, poller)
    socket_owner = partial(client_socket_uid, host=host_paths(args))  # the tables of --path.procfs
    config = ServerConfig(
        token=token,
        peers=None if token else OwnerOnly(own_uid(), socket_owner),
        socket_owner=socket_owner,
        interval_s=args.interval,
        job_name=args.job_name,
        hosts=host_policy(args.host, tuple(args.allow_host)),
    )
    app = create_app(
        config,
        poller,
        metrics=make_metrics(
            poller,
            args.job_name,
            args.metrics_max_jobs,
            min_job_age_s=args.metrics_min_job_age,
            per_user=args.metrics_per_user,
        ),
        cluster=cluster_cache(args),
        runs=runs_source(args, ledger=_recording_ledger(poller)),
    )
    server = create_server(app, sock)
    urls = page_urls(args.host, server.effective_port)
    poller.start()
    threading.Thread(target=server.run, name="dsh-sidecar-http", daemon=True).start()
    watching = f"pid {poller.target_pid}" if poller.target_pid is not None else _whose_jobs()
    _announce(urls, token, generated, watching, every_user=poller.target_pid is None)
    return server, config.read


# How often `run` looks whether its job has exited (it waits for no poll to say so).
CHILD_CHECK_S = 0.2


def _supervise(
    args: argparse.Namespace, poller: AnyPoller, child: subprocess.Popen[bytes] | None, read: threading.Event
) -> None:
    """Wait until the job is gone and its grace is over (never with --stay), or a signal came.
    Only `run` wakes on a timer, to look at its child; --pid sleeps until a signal or the poll that
    finds the job gone (Poller.on_end), and discovery until a signal: each wake-up costs about
    75 us of CPU, and five a second were a tenth of what a --pid sidecar polling every 0.25 s costs."""
    from sidecar.poll.poller import Poller

    stop, interrupted, wake = _SIGNALS.stop, _SIGNALS.received, _SIGNALS.wake
    if child is None and isinstance(poller, Poller):
        poller.on_end = wake.set
    gone_since: float | None = None
    grace_s = 0.0
    while not stop.is_set():
        # Looked at after each wake-up is cleared: a wake-up set since is kept for the next wait.
        alive = child.poll() is None if child is not None else poller.target_gone_at is None
        if not alive:
            if gone_since is None:
                gone_since = time.monotonic()
                grace_s = _grace_s(args, read)
                _say_job_gone(args, poller, child, interrupted, grace_s)
            if not args.stay and (interrupted or time.monotonic() - gone_since >= grace_s):
                return
        wake.wait(_wake_after_s(args, child, gone_since, grace_s))
        wake.clear()


def _wake_after_s(
    args: argparse.Namespace, child: subprocess.Popen[bytes] | None, gone_since: float | None, grace_s: float
) -> float | None:
    """How long the supervisor may sleep unless woken: None, until a signal or the job's end."""
    if child is not None:
        return CHILD_CHECK_S
    if gone_since is not None and not args.stay:
        return max(0.0, grace_s - (time.monotonic() - gone_since))
    return None


def _grace_s(args: argparse.Namespace, read: threading.Event) -> float:
    """--grace as given; without it DEFAULT_GRACE_S once something has read the sidecar, else 0."""
    if args.grace is not None:
        return float(args.grace)
    return DEFAULT_GRACE_S if read.is_set() else 0.0


def _say_job_gone(
    args: argparse.Namespace,
    poller: AnyPoller,
    child: subprocess.Popen[bytes] | None,
    interrupted: list[int],
    grace_s: float,
) -> None:
    code = child.returncode if child is not None else None
    if args.stay:
        tail = "; still serving (--stay), Ctrl-C to stop"
    elif interrupted:  # the signal stopped the job: the sidecar follows it now, no grace
        tail = "; the sidecar stops now"
    elif args.grace is None and grace_s == 0:
        tail = "; nothing has read the sidecar, so it stops now (--grace S or --stay would keep it serving)"
    else:
        tail = f"; the sidecar stops in {grace_s:g} s (--stay would keep it serving)"
    print(f"dsh-sidecar: the job (pid {poller.target_pid}) {exit_note(code)}{tail}", flush=True)
    if child is not None:
        poller.poll_once()  # record the exit now, not one interval later
        from sidecar.poll.poller import Poller

        if isinstance(poller, Poller):  # `run`'s: always one job
            poller.record_exit_code(code)  # the run's end with the child's exit code


def _whose_jobs() -> str:
    from sidecar.sources.lineage import user_name

    return "every user's jobs" if os.getuid() == 0 else f"every job of {user_name(os.getuid())}"


def exit_note(returncode: int | None) -> str:
    """How the job ended: "exited with exit code 7", "was killed by SIGKILL" (Popen says -9)."""
    if returncode is None:
        return "exited"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with exit code {returncode}"


class _Signals:
    """SIGINT/SIGTERM handling installed before the job starts, so a signal that arrives while the
    server is still binding is forwarded to the job (or ends the sidecar), never lost."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.wake = threading.Event()  # set with stop, and by the poll that finds the job gone
        self.received: list[int] = []
        self.child: subprocess.Popen[bytes] | None = None

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        child = self.child
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signum)  # the job decides how to stop; we follow it
            except ProcessLookupError:
                pass
        else:
            self.stop.set()
            self.wake.set()


_SIGNALS = _Signals()


def _main_run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError(
            "nothing to run: give the command after --, e.g. `dsh-sidecar run -- python train.py`"
        )
    check_serve_args(args)
    rules = rules_from_env()
    # Every check that can fail comes before the job starts, the port last: a job that started
    # would have to be killed again (a training script may have written checkpoints by then).
    sock = _listen(args, before_job=True)
    _SIGNALS.install()
    try:
        # Its own session: a terminal's Ctrl-C reaches us once and we forward it once. The
        # listening socket is not inherited (Python's sockets are close-on-exec).
        env = {k: v for k, v in os.environ.items() if k not in SIDECAR_SECRET_ENV}
        child = subprocess.Popen(cmd, start_new_session=True, env=env)
    except OSError as exc:  # the job never ran: the shell's codes for "not found", "cannot execute"
        sock.close()
        code = EXIT_RUN_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_RUN_CANNOT_EXECUTE
        return fail(code, f"cannot start {cmd[0]!r}: {exc.strerror or exc}; the job did not run")
    _SIGNALS.child = child
    if _SIGNALS.received:  # a signal came between install and Popen
        child.send_signal(_SIGNALS.received[-1])
    from sidecar.poll.poller import Poller

    poller = Poller(
        child.pid, lazy_document=True, recorder=_recorder(args, rules), **_poller_options(args, rules)
    )
    return _serve(args, poller, sock, child=child)


def _recording_ledger(poller: AnyPoller) -> Ledger | None:
    """The ledger the poller records into, for the runs routes: one connection (and its lock) for
    the recorder's writes and the routes' reads, not two."""
    from sidecar.sources.ledger import Ledger

    sink = poller.recording.sink if poller.recording is not None else None
    return sink if isinstance(sink, Ledger) else None


def _recorder(args: argparse.Namespace, rules: Rules) -> RunRecorder | None:
    """The job's run recorder (sidecar/cli/runs.py): None with --no-runs or --once, or when the
    runs ledger cannot be opened (said once)."""
    from sidecar.cli.runs import open_recording, recorder

    return recorder(open_recording(args), rules, args.interval)


if __name__ == "__main__":
    sys.exit(main())
