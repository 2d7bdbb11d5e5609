"""`dsh-sidecar` as a user runs it: exit codes, one clear line per failure, --once, run, doctor."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from probe_wire.records import RuntimeRecord
from sidecar.cli.args import DEFAULT_GRACE_S, MIN_INTERVAL_S
from sidecar.common import catalogue
from sidecar.common.exit_codes import EXIT_RUN_NOT_STARTED, EXIT_USAGE
from sidecar.verdict import Facts, GpuFacts, cuda_unavailable_reason
from tests.fakenvml import FakeNvml, gpu
from tests.helpers.document_keys import MODEL_KEYS, PROCESS_KEYS, STATUS_KEYS
from tests.helpers.harness import REPO, FakeJob, Sidecar, cuda_runtime, python_env, wait_for
from tests.helpers.sidecar_cli import cli

pytestmark = pytest.mark.slow


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def assert_one_clear_line(r: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    err = r.stderr.strip().splitlines()
    assert err, "a failure must say something"
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--json"], ["--once"]),
        (["--host", "0.0.0.0"], ["--token"]),  # discovery serves too: the same rules
        (["--pid", "abc"], ["not a process id"]),
        (["--pid", "-5"], ["--pid"]),
        (["--pid", "1", "--port", "70000"], ["0-65535"]),
        (["--pid", "1", "--interval", "0.05"], ["below 0.1"]),
        (["--pid", "1", "--interval", "-1"], ["positive"]),
        (["--pid", "1", "--interval", "nan"], ["positive"]),
        (["--pid", "1", "--bogus"], ["unrecognized arguments: --bogus"]),
        (
            ["--pid", "1", "--kubelet-cgroup-root", "kube/../x"],
            ["--kubelet-cgroup-root", "absolute cgroup path"],
        ),
        (["--pid", "1", "--path.procfs", ""], ["--path.procfs", "not a directory's path"]),
        (["doctor", "--path.sysfs", ""], ["--path.sysfs", "not a directory's path"]),
        (["--pid", "1", "--host", "0.0.0.0"], ["--token"]),
        (["doctor", "--nope"], ["unrecognized"]),
    ],
)
def test_bad_usage_exits_2(args, needles):
    assert_one_clear_line(cli(*args), 2, *needles)


ME = str(subprocess.os.getpid())


@pytest.mark.parametrize(
    "argv",
    [
        ["--pid", ME],
        ["--pid", ME, "--once"],
        ["run", "--", sys.executable, "-c", "raise SystemExit(7)"],  # never started: not its exit code
        ["mcp", "--pid", ME],
        ["mcp", "--url", "http://127.0.0.1:1"],  # does not poll: the interval is refused alike
    ],
    ids=["serve", "once", "run", "mcp", "mcp-url"],
)
def test_an_interval_below_the_minimum_is_bad_usage_with_the_one_message(argv):
    """One minimum (args.MIN_INTERVAL_S), checked once where --interval is parsed: every command that
    takes it refuses a shorter one alike, with one message, before anything starts (bad usage: 2, and
    `run`'s own 125)."""
    too_short_s = MIN_INTERVAL_S / 2
    at = argv.index("--") if "--" in argv else len(argv)
    r = cli(*argv[:at], "--interval", str(too_short_s), *argv[at:])
    code = EXIT_RUN_NOT_STARTED if argv[0] == "run" else EXIT_USAGE
    assert_one_clear_line(r, code, f"argument --interval: {too_short_s} s is below {MIN_INTERVAL_S} s")


def test_the_minimum_interval_itself_is_allowed():
    r = cli("--pid", ME, "--once", "--interval", str(MIN_INTERVAL_S))
    assert r.returncode == 0, (r.stdout, r.stderr)


@pytest.mark.parametrize(
    "args, code, needles",
    [
        (["run"], 125, ["nothing to run"]),
        (["run", "--bogus", "--", "true"], 125, ["unrecognized arguments: --bogus"]),
        (["run", "--", "/nonexistent/binary"], 127, ["cannot start", "the job did not run"]),
        (["run", "--", "/etc/passwd"], 126, ["cannot start", "Permission denied"]),
    ],
)
def test_run_that_never_started_its_job_exits_with_a_code_no_job_uses(
    args: list[str], code: int, needles: list[str]
) -> None:
    """`run` passes its job's code through, and a job's own bad usage is often 2: `run`'s failures
    before the job starts are 125 (its own), 126 and 127 (the command cannot run), as for `env`."""
    assert_one_clear_line(cli(*args), code, *needles)


def test_run_of_a_job_that_fails_at_once_returns_its_code_at_once(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """`run -- python nope.py`: python's own 2 comes back, not after a 10 s grace nobody watches."""
    fake_nvml.write({"gpus": []})
    started = time.monotonic()
    proc = start_job_run(fake_nvml, [sys.executable, str(tmp_path / "nope.py")])
    # Each line with when it came: a slow run says whether its start or its stop was slow.
    lines = [(time.monotonic() - started, line) for line in proc.stdout]
    code, stderr = proc.wait(60), proc.stderr.read()
    took_s = time.monotonic() - started
    stdout = "".join(line for _, line in lines)
    assert code == 2, (stdout, stderr)
    assert "can't open file" in stderr and "dsh-sidecar: error" not in stderr, stderr
    assert "exited with exit code 2" in stdout and "nothing has read the sidecar" in stdout, stdout
    # It stops once the job is gone, not after the 10 s grace: timed from the line that says so, as
    # the sidecar's start (imports, the driver, the bind) took 5 to 13 s beside the suite's load.
    gone_at_s = next(at_s for at_s, line in lines if "exited with exit code 2" in line)
    timeline = [f"{at_s:.1f} s: {line[:60]}" for at_s, line in lines]
    assert took_s - gone_at_s < DEFAULT_GRACE_S / 2, f"{timeline}, exit at {took_s:.1f} s"


def test_run_serves_its_default_grace_once_something_read_it(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    """The default grace is for whoever reads the sidecar (the page, a scrape): read once, it serves
    on after the job so they see the end."""
    fake_nvml.write({"gpus": []})
    read = tmp_path / "read"  # the job ends once the test has read the sidecar, however slow its start
    job = (  # waits for the file, never past 60 s (a test that failed before it must not leave it behind)
        f"import os, sys, time\nend = time.monotonic() + 60\n"
        f"while not os.path.exists({str(read)!r}) and time.monotonic() < end: time.sleep(0.05)\nsys.exit(3)"
    )
    proc = start_run(fake_nvml, job)
    out = proc.stdout
    assert out is not None
    try:
        url = next(line.split()[2] for line in out if line.startswith("dsh-sidecar: serving "))
        with urllib.request.urlopen(url + "healthz", timeout=10) as answer:
            assert answer.status == 200
        read.touch()
        for line in out:
            if "exited with exit code 3" in line:
                assert "the sidecar stops in 10 s" in line, line
                gone_at = time.monotonic()
                break
        with urllib.request.urlopen(url + "healthz", timeout=10) as answer:  # still serving
            assert answer.status == 200
        assert proc.wait(30) == 3
        assert time.monotonic() - gone_at >= 9
    finally:
        proc.kill()
        proc.wait()


def test_missing_pid_exits_3():
    pid = dead_pid()
    r = cli("--pid", str(pid))
    assert_one_clear_line(r, 3, f"no process with pid {pid}")
    assert_one_clear_line(cli("--pid", str(pid), "--once"), 3, "no process")


def test_port_in_use_exits_4():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = cli("--pid", str(subprocess.os.getpid()), "--port", str(port))
    assert_one_clear_line(r, 4, f"port {port}", "in use", "--port 0")


def test_non_loopback_with_token_is_allowed_and_enforced(fake_nvml):
    fake_nvml.write({"gpus": []})
    with Sidecar(
        ["--pid", str(subprocess.os.getpid()), "--host", "127.0.0.2", "--port", "0", "--token", "t0k"],
        env=fake_nvml.env(),
    ) as sc:
        assert sc.url.startswith("http://127.0.0.2:")
        sc.token = None
        assert sc.get("/api/dsh-gpu-dashboard/status")[0] == 401
        assert sc.get("/healthz")[0] == 200
        sc.token = "t0k"
        code, _ = sc.get("/api/dsh-gpu-dashboard/status")
        assert code in (200, 503)


def host_get(port: int, path: str, host: str) -> int:
    """The status code of GET path on 127.0.0.1:port sent with `Host: host`."""
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return int(s.makefile("rb").readline().split()[1])


def test_allow_host_adds_names_to_a_wildcard_bind(fake_nvml):
    fake_nvml.write({"gpus": []})
    token = "a-token-of-24-characters"
    with Sidecar(
        [
            "--pid",
            str(subprocess.os.getpid()),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--token",
            token,
            "--allow-host",
            "gpu-node-07.example.org",
            "--allow-host",
            "dsh.test",
        ],
        env=fake_nvml.env(),
    ) as sc:
        port = int(sc.url.rsplit(":", 1)[1])
        for host in (
            "gpu-node-07.example.org",
            f"dsh.test:{port}",
            "10.9.8.7:8765",
            "localhost",
            socket.gethostname(),
        ):
            assert host_get(port, "/healthz", host) == 200, host
        for host in ("evil.example", f"evil.example:{port}", "dsh.test.evil.example"):
            assert host_get(port, "/healthz", host) == 421, host


@pytest.mark.skipif(os.geteuid() != 0, reason="a root sidecar is the one that makes a token of its own")
def test_the_last_line_a_root_sidecar_prints_is_the_page_with_its_token(fake_nvml: FakeNvml) -> None:
    """Issue 39 item 1: a person opens the address of the last line printed. Root's `serving` line
    came last, and its address without the token shows a page whose requests all answer 401."""
    fake_nvml.write({"gpus": []})
    with Sidecar(["--pid", str(os.getpid()), "--port", "0"], env=fake_nvml.env()) as sc:
        assert sc.token and len(sc.token) >= 32, sc.lines
        serving = next(i for i, line in enumerate(sc.lines) if line.startswith("dsh-sidecar: serving "))
        assert "below" in sc.lines[serving], sc.lines
        assert sc.lines[-1].endswith(f" {sc.url}/?token={sc.token}") and serving < len(sc.lines) - 1, sc.lines


@pytest.mark.parametrize("bind", ["0.0.0.0", "::"])
def test_a_wildcard_bind_prints_addresses_another_machine_can_open(fake_nvml: FakeNvml, bind: str) -> None:
    """0.0.0.0 is no address a browser elsewhere can open: the sidecar prints this machine's name
    and its interfaces' addresses (those `hostname -I` lists, of the bound family), each answering."""
    fake_nvml.write({"gpus": []})
    token = "a-token-of-24-characters"
    args = ["--pid", str(os.getpid()), "--host", bind, "--port", "0", "--token", token]
    with Sidecar(args, env=fake_nvml.env(), token=token) as sc:
        assert sc.url is not None
        port = int(sc.url.rsplit(":", 1)[1])
        assert sc.url == f"http://{socket.gethostname()}:{port}", sc.lines
        wait_for(lambda: any("?token=" in line for line in sc.lines), 10, 0.1, "the token line")
        out = "\n".join(sc.lines)
        assert "0.0.0.0" not in out and "[::]" not in out, out
        assert f"open http://{socket.gethostname()}:{port}/?token=<your token>" in out, out
        prefix = "dsh-sidecar: also by this machine's addresses: "
        shown = [
            u.rstrip(",") for line in sc.lines if line.startswith(prefix) for u in line[len(prefix) :].split()
        ]
        v6 = ":" in bind
        if shutil.which("hostname"):  # a test worker in its own network namespace has loopback alone
            listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
            expected = [a for a in listed if (":" in a) == v6 and not a.lower().startswith("fe80")]
            assert shown == [f"http://[{a}]:{port}/" if v6 else f"http://{a}:{port}/" for a in expected][:8]
        for url in shown:  # reached at that address, and the Host check answers it
            with urllib.request.urlopen(url + "healthz", timeout=5) as answer:
                assert answer.status == 200, url


def test_once_json_matches_the_status_schema(tmp_path, fake_nvml):
    fake_nvml.write({"gpus": [gpu(0, util_gpu=33)]})
    spec = {
        "payload": {
            "runtime": cuda_runtime([gpu(0)["uuid"]]),
            "models": [
                {"name": "Net", "class": "Net", "params": 10, "device": "cuda:0", "devices": ["cuda:0"]}
            ],
        }
    }
    with FakeJob(tmp_path / "job", {"main": spec}) as job:  # its segment is there once its pid is
        r = cli("--pid", str(job.pid), "--once", "--json", env=fake_nvml.env())
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert set(doc) >= STATUS_KEYS and doc["status"] == "GPU" and doc["gpus"][0]["util_pct"] == 33
        assert (
            set(doc["processes"][0]) >= PROCESS_KEYS and set(doc["processes"][0]["models"][0]) >= MODEL_KEYS
        )
        human = cli("--pid", str(job.pid), "--once", env=fake_nvml.env())
        assert human.returncode == 0
        assert human.stdout.startswith("GPU: Model Net runs on cuda:0")
        assert "GPU 0 NVIDIA A100-SXM4-80GB: 33% busy" in human.stdout


def test_secrets_are_redacted_in_cmdlines(tmp_path, fake_nvml):
    fake_nvml.write({"gpus": []})
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(30)",
            "--api-key",
            "sk-123",
            "--token=abc",
            "password=hunter2",
            "https://u:pw@host/x",
        ]
    )
    try:
        r = cli("--pid", str(p.pid), "--once", "--json", env=fake_nvml.env())
        doc = json.loads(r.stdout)
        text = json.dumps(doc)
        for secret in ("sk-123", "abc", "hunter2", ":pw@"):
            assert secret not in text
        assert "--api-key" in doc["target"]["cmdline"] and "***" in doc["target"]["cmdline"]
    finally:
        p.kill()
        p.wait()


def start_run(fake_nvml, script: str, *options: str, env: dict | None = None) -> subprocess.Popen:
    """`dsh-sidecar run [options] -- python -c SCRIPT` with the simulated driver."""
    return start_job_run(fake_nvml, [sys.executable, "-c", script], "--interval", "0.2", *options, env=env)


def start_job_run(fake_nvml, job: list[str], *options: str, env: dict | None = None) -> subprocess.Popen:
    """`dsh-sidecar run [options] -- JOB...` with the simulated driver, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "run", "--port", "0", *options, "--", *job],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(base=fake_nvml.env(env or {})),
        cwd=REPO,
    )


def test_run_with_its_port_taken_never_starts_the_job(fake_nvml, tmp_path):
    """The port is bound before the job starts: taken, the sidecar says so and exits 125, and the job
    (which would leave a marker file at once) never ran."""
    fake_nvml.write({"gpus": []})
    marker = tmp_path / "the-job-ran"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_run(fake_nvml, f"open({str(marker)!r}, 'w').close()", "--port", str(port))
        out, err = proc.communicate(timeout=60)
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_one_clear_line(r, 125, f"port {port}", "in use", "--port PORT", "the job was not started")
    assert not marker.exists(), "the job started although the sidecar could not serve"
    assert "serving" not in out, out


def test_run_keeps_the_sidecar_token_from_the_job(fake_nvml, tmp_path):
    fake_nvml.write({"gpus": []})
    seen = tmp_path / "env.json"
    script = f"import json, os; json.dump(dict(os.environ), open({str(seen)!r}, 'w'))"
    proc = start_run(
        fake_nvml, script, "--grace", "0", env={"DSH_SIDECAR_TOKEN": "s3cret-token-of-the-sidecar"}
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (out, err)
    job_env = json.loads(seen.read_text())
    assert "DSH_SIDECAR_TOKEN" not in job_env
    assert "s3cret-token-of-the-sidecar" not in json.dumps(job_env)
    assert job_env.get("PATH")  # the rest of the environment is the job's as before


def test_once_into_a_closed_pipe_ends_quietly(fake_nvml):
    """`dsh-sidecar --once | head -2`: the reader is gone before the summary is written."""
    fake_nvml.write({"gpus": []})
    for extra in ([], ["--json"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "--pid", str(subprocess.os.getpid()), "--once", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=python_env(base=fake_nvml.env()),
            cwd=REPO,
        )
        proc.stdout.close()  # before it writes anything: the write meets EPIPE, every time
        err = proc.stderr.read().decode()
        assert proc.wait(30) == 0, err
        assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_run_says_which_signal_killed_the_job(fake_nvml):
    fake_nvml.write({"gpus": []})
    proc = start_run(fake_nvml, "import os, time; time.sleep(1); os.kill(os.getpid(), 9)", "--grace", "0")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + 9, (out, err)
    assert "was killed by SIGKILL" in out and "exit code -9" not in out, out
    assert "the sidecar stops in 0 s (--stay would keep it serving)" in out, out


def test_run_starts_the_job_and_exits_with_its_code(fake_nvml):
    fake_nvml.write({"gpus": []})
    script = "import sys, time; time.sleep(1.5); sys.exit(7)"
    proc = start_run(fake_nvml, script, "--grace", "0.5")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 7, (out, err)
    assert "dsh-sidecar: serving http://127.0.0.1:" in out and "exited with exit code 7" in out


def test_run_forwards_sigterm(fake_nvml):
    fake_nvml.write({"gpus": []})
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
        "print('child ready', flush=True)\ntime.sleep(60)\n"
    )
    proc = start_run(fake_nvml, script)
    seen = set()
    for line in proc.stdout:
        seen |= {k for k in ("child ready", "dsh-sidecar: serving") if k in line}
        if len(seen) == 2:
            break
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 42, (out, err)
    # The signal ends the sidecar with its job, at once: it does not announce a grace it skips.
    assert "the sidecar stops now" in out and "stops in" not in out, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("watching", [["--pid", str(os.getpid())], []])
def test_a_signal_stops_a_serving_sidecar_at_once(
    fake_nvml: FakeNvml, sig: signal.Signals, watching: list[str]
) -> None:
    """--pid and discovery sleep until a signal or the job's end (no timer wakes them): a signal
    still ends them at once, exit 0, without a word of a job that ended."""
    fake_nvml.write({"gpus": []})
    with Sidecar([*watching, "--port", "0"], env=fake_nvml.env()) as sc:
        if watching:
            sc.wait_status(lambda doc: True, 30, "a first poll")
        started = time.monotonic()
        sc.proc.send_signal(sig)
        assert sc.proc.wait(5) == 0, sc.err_lines
        assert time.monotonic() - started < 3
        assert not any("the job" in line for line in sc.lines), sc.lines


def test_doctor_on_this_machine():
    """No NVIDIA driver here, and torch is the CPU build: doctor must say both."""
    r = cli("doctor")
    assert r.returncode == 0, r.stderr
    assert "NVIDIA driver: NVML library not found" in r.stdout
    assert "CPU-only build" in r.stdout
    report = json.loads(cli("doctor", "--json").stdout)
    assert report["torch"]["cuda_build"] is None and report["torch"]["torch"].startswith("2.")
    assert report["nvml"]["library_found"] is False


def test_doctor_with_a_gpu_and_a_cpu_only_torch(fake_nvml):
    fake_nvml.write({"gpus": [gpu(0)], "cuda_driver_version": 12040})
    report = json.loads(cli("doctor", "--json", env=fake_nvml.env()).stdout)
    assert report["nvml"]["device_count"] == 1
    (problem,) = report["problems"]
    # The torch here is 2.13, whose oldest CUDA wheel is cu126: upgrade the driver rather than
    # `pip install torch --index-url .../cu124`, which would install torch 2.6.
    assert "CPU-only build" in problem["problem"] and "cu124" not in problem["fix"]
    version = report["torch"]["torch"].split("+")[0]
    assert f"torch=={version} --index-url" in problem["fix"]
    if version.startswith("2.13."):
        assert "upgrade the NVIDIA driver" in problem["fix"] and "whl/cu126" in problem["fix"]


def test_doctor_with_one_gpu_lost_still_lists_the_other_as_usable(fake_nvml):
    fake_nvml.write({"gpus": [gpu(0), gpu(1, lost=True)], "cuda_driver_version": 12040})
    r = cli("doctor", env=fake_nvml.env())
    assert r.returncode == 1, r.stderr  # a problem ([!!]): a script or CI step can stop on it
    assert "[ok] NVIDIA driver" in r.stdout and "NVML is not usable" not in r.stdout
    report = json.loads(cli("doctor", "--json", env=fake_nvml.env()).stdout)
    nv = report["nvml"]
    assert nv["error"] is None and nv["device_count"] == 2
    d0, d1 = nv["devices"]
    assert d0["error"] is None and d0["uuid"] == gpu(0)["uuid"]
    assert d1["error"] == "GPU 1: GPU is lost"
    (lost,) = [p for p in report["problems"] if "GPU 1" in p["problem"]]
    assert "nvidia-smi -r -i 1" in lost["fix"]
    assert "GPU 1: " in r.stdout and "[!!] GPU 1: GPU is lost" in r.stdout


def test_doctor_exits_1_on_a_problem_and_0_without(fake_nvml: FakeNvml) -> None:
    """Every `[!!]` is a problem with its fix, and a problem is exit code 1 (text and --json alike)."""
    fake_nvml.write({"gpus": [gpu(0)], "cuda_driver_version": 12040})  # a GPU, and torch is CPU-only here
    r = cli("doctor", env=fake_nvml.env())
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "[!!] torch" in r.stdout and "Problems, and how to fix them:" in r.stdout, r.stdout
    assert cli("doctor", "--json", env=fake_nvml.env()).returncode == 1
    r = cli("doctor")  # no NVIDIA GPU at all: a CPU-only torch is what this machine needs
    assert r.returncode == 0 and "[!!]" not in r.stdout and "Problems" not in r.stdout, r.stdout


@pytest.mark.parametrize("python", ["/nonexistent/python", "no-such-python-here"])
def test_doctor_says_a_python_that_does_not_exist_is_missing(python: str) -> None:
    r = cli("doctor", "--python", python)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"[!!] Python: the Python {python} is missing" in r.stdout, r.stdout
    assert "pip install" not in r.stdout, "installing torch into a Python that does not exist is no fix"
    report = json.loads(cli("doctor", "--json", "--python", python).stdout)
    (problem,) = report["problems"]
    assert "is missing" in problem["problem"] and "--python" in problem["fix"] and "pip" not in problem["fix"]


def test_doctor_says_a_python_that_cannot_run_cannot_run(tmp_path: Path) -> None:
    not_a_program = tmp_path / "python"
    not_a_program.write_text("")  # not executable
    r = cli("doctor", "--python", str(not_a_program))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"the Python {not_a_program} cannot be run (Permission denied)" in r.stdout, r.stdout
    assert "pip install" not in r.stdout


def torchless_venv(path) -> str:
    """A real venv holding the sidecar's dependencies but no torch (links into this venv's
    site-packages, torch's own packages left out): a sidecar installed apart from the training job."""
    import sysconfig
    from pathlib import Path

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    python = Path(path) / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("torch", "functorch", "nvidia")):
            (Path(site) / entry.name).symlink_to(entry)
    probe = subprocess.run([str(python), "-c", "import torch"], capture_output=True, timeout=60)
    assert probe.returncode != 0, "the venv must not see torch"
    return str(python)


def test_doctor_from_a_venv_without_torch_names_the_python_and_how_to_check_another(tmp_path):
    python = torchless_venv(tmp_path / "sidecar-venv")
    r = subprocess.run(
        [python, "-m", "sidecar.cli", "doctor"],
        capture_output=True,
        text=True,
        env=python_env(),
        cwd=REPO,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr  # no torch where the check looked: a problem
    assert f"Python checked for torch: {python} (the Python dsh-sidecar runs under)" in r.stdout, r.stdout
    assert "dsh-sidecar doctor --python" in r.stdout
    (problem,) = [p for p in r.stdout.splitlines() if "torch is not installed" in p and p.startswith("  - ")]
    assert python in problem
    report = json.loads(
        subprocess.run(
            [python, "-m", "sidecar.cli", "doctor", "--json"],
            capture_output=True,
            text=True,
            env=python_env(),
            cwd=REPO,
            timeout=120,
        ).stdout
    )
    assert report["python"] == python and report["python_is_sidecars"] is True
    (fix,) = [p["fix"] for p in report["problems"] if "torch is not installed" in p["problem"]]
    assert f"{python} -m pip install torch" in fix and "--python" in fix
    # the training job's Python, given with --python: checked, and named as given
    r = subprocess.run(
        [python, "-m", "sidecar.cli", "doctor", "--python", sys.executable],
        capture_output=True,
        text=True,
        env=python_env(),
        cwd=REPO,
        timeout=120,
    )
    assert f"Python checked for torch: {sys.executable} (given with --python)" in r.stdout, r.stdout
    assert "CPU-only build" in r.stdout


@pytest.mark.parametrize("args", [["--help"], ["--bogus"], ["docter"]])
def test_the_usage_line_lists_every_command(args):
    """`--help` and every usage error show how to call each command, not only the serve options."""
    r = cli(*args)
    usage = (r.stdout if args == ["--help"] else r.stderr).split("\n\n")[0]
    assert usage.startswith("usage: dsh-sidecar"), usage
    for command in (
        "dsh-sidecar run ",
        "dsh-sidecar doctor",
        "dsh-sidecar mcp",
        "dsh-sidecar runs",
        "dsh-sidecar compare RUN",
        "--pid PID",
        "--once",
    ):
        assert command in usage, (command, usage)


def cuda13_torch_python(path: Path) -> str:
    """A Python whose torch is a CUDA 13.0 build that cannot use CUDA (this torch is a CPU build:
    a sitecustomize gives it the version a cu130 wheel has and the error its `torch.cuda.init()`
    raises without a usable driver), as `doctor --python` runs it."""
    site = path / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text(
        "import torch\n"
        "torch.version.cuda = '13.0'\n"
        "def init():\n"
        "    raise RuntimeError('Found no NVIDIA driver on your system.')\n"
        "torch.cuda.init = init\n"
    )
    python = path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return str(python)


def _no_libcuda_here() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    return False


@pytest.mark.skipif(not _no_libcuda_here(), reason="this machine has a CUDA driver library")
@pytest.mark.parametrize("cuda_driver_version", [12040, 13000])
def test_doctor_says_libcuda_does_not_load_as_the_sidecars_verdict_does(
    fake_nvml: FakeNvml, tmp_path: Path, cuda_driver_version: int
) -> None:
    """Issue 39 item 18: NVML answers, libcuda.so.1 is missing, torch is a CUDA 13 build. doctor
    advised a driver upgrade (driver 12.4) or a generic failure (13.0), later it crashed; the
    verdict's diagnosis (sidecar/verdict/rules.py cuda_unavailable_reason) is that the library does
    not load, whatever the driver's age."""
    fake_nvml.write({"gpus": [gpu(0)], "cuda_driver_version": cuda_driver_version})
    python = cuda13_torch_python(tmp_path / "cu130")
    r = cli("doctor", "--json", "--python", python, env=fake_nvml.env())
    assert r.returncode == 1, (r.stdout, r.stderr)
    report = json.loads(r.stdout)
    assert report["torch"]["cuda_build"] == "13.0" and report["torch"]["cuda_available"] is False
    (problem,) = [p for p in report["problems"] if "CUDA is not available" in p["problem"]]
    driver = f"{cuda_driver_version // 1000}.{cuda_driver_version % 1000 // 10}"
    facts = Facts(target_pid=0, nvml_ok=True, cuda_driver=driver, gpus=(GpuFacts(0),))
    rt = RuntimeRecord(
        torch=report["torch"]["torch"], cuda_build="13.0", cuda_available=False, cuda_driver_loadable=False
    )
    reason, hint = (catalogue.render(x) for x in cuda_unavailable_reason(facts, rt))
    assert "libcuda.so.1" in reason and reason in problem["problem"], problem
    assert problem["fix"] == hint and "NVIDIA_DRIVER_CAPABILITIES" in hint
    assert "Upgrade the NVIDIA driver" not in problem["fix"]
    text = cli("doctor", "--python", python, env=fake_nvml.env()).stdout
    assert "libcuda.so.1) does not load" in text, text


def test_doctor_with_libcuda_and_an_older_driver_says_the_driver_is_older(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """The same torch with a driver library of CUDA 12.4 present: the driver is too old for it."""
    lib = tmp_path / "libcuda"
    lib.mkdir()
    cc = shutil.which(os.environ.get("CC", "gcc")) or "gcc"
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            str(lib / "libcuda.so.1"),
            str(REPO / "tests/fakenvml/fakecuda.c"),
        ],
        check=True,
        capture_output=True,
    )
    fake_nvml.write({"gpus": [gpu(0)], "cuda_driver_version": 12040})
    env = fake_nvml.env()
    env["LD_LIBRARY_PATH"] = f"{lib}:{env['LD_LIBRARY_PATH']}"
    report = json.loads(
        cli("doctor", "--json", "--python", cuda13_torch_python(tmp_path / "cu130"), env=env).stdout
    )
    assert report["torch"]["cuda_driver_loadable"] is True
    (problem,) = [p for p in report["problems"] if "CUDA is not available" in p["problem"]]
    assert "the driver supports CUDA 12.4, older than torch's CUDA 13.0" in problem["problem"], problem
    assert "libcuda" not in problem["problem"]
