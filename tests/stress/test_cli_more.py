"""Every wrong flag and value of `dsh-sidecar`: one clear error line, the documented exit code (2 bad
usage, 3 no such pid, 4 port cannot be bound; `run`, whose job's codes pass through: 125 before the
job started, 126 a command that cannot be executed), no traceback, and nothing started. Extends the
table in tests/integration/test_cli.py (which this file does not repeat)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.harness import REPO, python_env


def cli(*args: str, env: dict | None = None, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", *args],
        capture_output=True,
        text=True,
        env=python_env(env),
        cwd=REPO,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def assert_one_error_line(r: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """Exactly one line says what went wrong; argparse may print its usage above it, nothing else."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, r.stderr
    (line,) = errors
    assert line.startswith("dsh-sidecar"), line
    others = [x for x in r.stderr.splitlines() if x != line and not x.startswith(("usage:", " "))]
    assert others == [], r.stderr
    for needle in needles:
        assert needle in line, (needle, line)
    assert r.stdout == ""  # nothing was served or printed as if it had worked
    return line


BAD_USAGE = [
    (["--pid", "1", "--history", "0"], ["--history", "positive"]),
    (["--pid", "1", "--history", "-5"], ["--history"]),
    (["--pid", "1", "--history", "abc"], ["--history", "not a number"]),
    (["--pid", "1", "--history", "inf"], ["--history"]),
    (["--pid", "1", "--interval", "inf"], ["--interval"]),
    (["--pid", "1", "--interval", "0"], ["--interval"]),
    (["--pid", "1", "--interval", ""], ["--interval", "not a number"]),
    (["--pid", "1", "--interval", "1e-400"], ["--interval"]),
    (["--pid", "1", "--grace", "abc"], ["--grace"]),
    (["--pid", "1", "--grace", "-1"], ["--grace"]),
    (["--pid", "1", "--grace", "nan"], ["--grace"]),
    (["--pid", "1", "--port", "-1"], ["--port", "0-65535"]),
    (["--pid", "1", "--port", ""], ["--port", "not a port"]),
    (["--pid", "1", "--port", "80.5"], ["--port", "not a port"]),
    (["--pid", "0"], ["--pid", "positive"]),
    (["--pid", "1.5"], ["--pid", "not a process id"]),
    (["--pid", "0x10"], ["--pid", "not a process id"]),
    (["--pid"], ["--pid", "expected one argument"]),
    (["--pid", "1", "extra"], ["unrecognized arguments: extra"]),
    (["--pid", "1", "--once", "--interval", "0.01"], ["--interval"]),
    (["--pid", "1", "--host", ""], ["--token"]),
    (["--pid", "1", "--host", "::"], ["--token"]),
    (["--pid", "1", "--host", "192.168.1.10"], ["--token"]),
    (["--pid", "1", "--host", "example.com"], ["--token"]),
    (["--pid", "1", "--host", "0.0.0.0", "--token", ""], ["--token"]),
    (["--pid", "1", "--host", "no-such-host.invalid", "--token", "t"], ["--host", "resolve"]),
    (["--pid", "1", "--host", "a..b", "--token", "t"], ["--host", "resolve"]),
    (["--pid", "1", "--allow-host", "node:8765"], ["--allow-host", "not a host name"]),
    (["--pid", "1", "--allow-host", "http://node"], ["--allow-host", "not a host name"]),
    (["--pid", "1", "--allow-host", "*.example"], ["--allow-host", "not a host name"]),
    (["--pid", "1", "--allow-host", ""], ["--allow-host", "not a host name"]),
    (["--pid", "1", "--host", "0.0.0.0", "--token", "short-token"], ["token", "at least 16"]),
    (["--pid", "1", "--host", "0.0.0.0", "--token", "x" * 15], ["token", "at least 16"]),
    (["--pid", "1", "--token", "tök én-and-more-characters"], ["token", "printable ASCII"]),
    (["--pid", "1", "--token", " "], ["token", "printable ASCII"]),
    (["--pid", "1", "--host", "0.0.0.0", "--token", "with space in a long token"], ["printable ASCII"]),
    (["--pid", "1", "--grace", "inf"], ["--grace", "at most"]),
    (["--pid", "1", "--grace", "1e12"], ["--grace", "at most"]),
    (["--pid", "1", "--history", "1e12"], ["--history", "at most"]),
    (["--pid", "1", "--json"], ["--json", "--once"]),
    (["serve"], ["unrecognized arguments: serve"]),
    (["doctor", "--python"], ["--python", "expected one argument"]),
    (["doctor", "--json", "extra"], ["unrecognized arguments: extra"]),
]


@pytest.mark.parametrize("args, needles", BAD_USAGE, ids=[" ".join(a) or "none" for a, _ in BAD_USAGE])
def test_bad_usage_is_one_line_and_exit_2(args, needles):
    assert_one_error_line(cli(*args), 2, *needles)


# `run`: the same checks, before its job starts; 125 (not 2, which a job's own bad usage often is)
RUN_BAD_USAGE = [
    (["run", "--host", "0.0.0.0", "--token", "short", "--", "true"], ["at least 16"]),
    (["run", "--grace", "inf", "--", "true"], ["--grace", "at most"]),
    (["run", "--port", "abc", "--", "true"], ["--port"]),
    (["run", "--interval", "0", "--", "true"], ["--interval"]),
    (["run", "--host", "10.0.0.1", "--", "true"], ["--token"]),
    (["run", "--grace", "-1", "--", "true"], ["--grace"]),
    (["run", "--"], ["nothing to run"]),
]


@pytest.mark.parametrize("args, needles", RUN_BAD_USAGE, ids=[" ".join(a) for a, _ in RUN_BAD_USAGE])
def test_bad_run_usage_is_one_line_and_exit_125(args, needles):
    assert_one_error_line(cli(*args), 125, *needles)


@pytest.mark.parametrize(
    "rules",
    ["{not json", '{"bogus": 1}', "[1, 2]", '{"idle_window_s": "x"}', '{"hysteresis_off_polls": null}'],
)
def test_bad_rules_environment_is_exit_2(rules):
    # A threshold of the wrong type used to pass here and then fail every poll (a traceback with
    # --once, a sidecar answering 503 forever without it).
    for extra in (["--once"], ["--port", "0"]):
        r = cli("--pid", "1", *extra, env={"DSH_SIDECAR_RULES": rules, "LD_LIBRARY_PATH": "/nonexistent"})
        assert_one_error_line(r, 2, "DSH_SIDECAR_RULES")


def test_token_from_an_empty_environment_variable_does_not_count():
    r = cli("--pid", "1", "--host", "0.0.0.0", env={"DSH_SIDECAR_TOKEN": ""})
    assert_one_error_line(r, 2, "--token")


def test_bad_run_options_start_nothing(tmp_path):
    marker = tmp_path / "started"
    for args in (
        ["run", "--port", "abc"],
        ["run", "--host", "10.0.0.1"],
        ["run", "--host", "no-such-host.invalid", "--token", "t"],
        ["run", "--interval", "0.01"],
    ):
        r = cli(*args, "--", "touch", str(marker))
        assert r.returncode == 125 and "Traceback" not in r.stderr, r.stderr
        assert not marker.exists(), f"{args} started the job before refusing"


def test_pids_that_do_not_exist_are_exit_3():
    zombie = subprocess.Popen(["true"])
    try:
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # exited, not yet reaped: a zombie
            with open(f"/proc/{zombie.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        for pid in (str(zombie.pid), "99999999999999999999", "4194305"):
            for extra in ([], ["--once"], ["--once", "--json"]):
                assert_one_error_line(cli("--pid", pid, *extra), 3, f"no process with pid {pid}")
    finally:
        zombie.wait()


def test_an_address_that_is_not_ours_is_exit_4():
    r = cli("--pid", "1", "--host", "192.0.2.1", "--token", "a-token-of-24-characters", "--port", "0")
    assert_one_error_line(r, 4, "cannot be bound")


def test_run_on_an_address_that_is_not_ours_is_exit_125_and_starts_nothing(tmp_path):
    marker = tmp_path / "started"
    remote = ["--host", "192.0.2.1", "--token", "a-token-of-24-characters", "--port", "0"]
    r = cli("run", *remote, "--", "touch", str(marker))
    assert_one_error_line(r, 125, "cannot be bound", "the job was not started")
    assert not marker.exists(), "the job started before the sidecar found it could not serve"


@pytest.mark.parametrize("args", [["-h"], ["--help"], ["--version"], ["run", "-h"], ["doctor", "-h"]])
def test_help_and_version_exit_0(args):
    r = cli(*args)
    assert r.returncode == 0 and r.stdout and r.stderr == "" and "Traceback" not in r.stdout
