"""Security properties, checked on the real processes: loopback by default, the token compared in
constant time, segments private (0600) and refused across users unless root, and secrets in command
lines redacted everywhere they are shown or exported (status, history, --once, /metrics)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest

from hostfs.procid import process_start_ticks
from probe_wire import SegmentWriter, read_segment, segment_path
from sidecar.common.catalogue import render
from sidecar.serve.server import _token_ok
from tests.helpers.harness import METRICS_AT_ONCE, REPO, Sidecar, python_env, wait_for
from tests.helpers.other_users import FORGER, NOBODY, write_as
from tests.helpers.stress_jobs import variant


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on `port`, from /proc/net/tcp and tcp6."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state = fields[1], fields[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:
                if len(addr) == 8:
                    out.add(".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    out.add(addr)
    return out


def test_default_bind_is_loopback_only(fake_nvml):
    fake_nvml.write({"gpus": []})
    with Sidecar(["--pid", str(os.getpid()), "--port", "0", *METRICS_AT_ONCE], env=fake_nvml.env()) as sc:
        port = int(sc.url.rsplit(":", 1)[1])
        assert sc.url.startswith("http://127.0.0.1:")
        assert listening_addresses(port) == {"127.0.0.1"}


def test_token_comparison_takes_the_same_time_wherever_the_guess_goes_wrong():
    """With `==` a guess wrong in its first byte is rejected far faster than one wrong in its last
    byte of 64 KiB (memcmp stops at the first difference), which lets an attacker find a token byte
    by byte. The sidecar's check must take the same time for both. The same measurement applied to
    `==` shows the difference, so the test can tell the two apart."""
    token = "k" * 65536
    early, late = "x" + token[1:], token[:-1] + "x"
    assert not _token_ok(token, early) and not _token_ok(token, late) and _token_ok(token, token)

    def best_of(fn, repeats: int = 9, loops: int = 40) -> float:
        # The minimum of several timings: preemption on a busy machine only ever adds time.
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(loops):
                fn()
            times.append(time.perf_counter() - t)
        return min(times)

    ratio = statistics.median(
        best_of(lambda: _token_ok(token, late)) / best_of(lambda: _token_ok(token, early)) for _ in range(3)
    )
    assert 0.6 < ratio < 1.7, f"late/early rejection time ratio {ratio:.2f}"
    naive = best_of(lambda: token == late, loops=400) / best_of(lambda: token == early, loops=400)
    assert naive > 3, naive


# -------------------------------------------------------------------------------------------------
# Segments: private to their owner; the sidecar refuses another user's unless it runs as root.

# The sidecar as an unprivileged user. Everything it imports lazily is imported before the uid
# drops: the interpreter itself lives under /root (mode 0700).
AS_NOBODY = f"""
import json, os, sys
import sidecar.cli.main, sidecar.poll.poller, sidecar.documents.document, sidecar.verdict, sidecar.poll.history, sidecar.sources.redact
import sidecar.sources.proctree, sidecar.sources.segments, sidecar.sources.nvml, sidecar.sources.sysfs
import psutil, pynvml, msgpack, encodings.idna
os.setgroups([])
os.setgid({NOBODY})
os.setuid({NOBODY})
sys.exit(sidecar.cli.main.main(sys.argv[1:]))
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the sidecar as another user")


@pytest.fixture
def job_with_segment():
    """A live process and a segment published for it (by root, the job's user here)."""
    proc = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    ticks = process_start_ticks(proc.pid)
    w = SegmentWriter(pid=proc.pid, start_ticks=ticks)
    w.publish(variant(proc.pid, ticks, 0))
    yield proc.pid, w
    w.close()
    proc.kill()
    proc.wait()


def sidecar_once(pid: int, as_nobody: bool, json_out: bool = True) -> subprocess.CompletedProcess:
    args = ["--pid", str(pid), "--once", *(["--json"] if json_out else [])]
    cmd = (
        [sys.executable, "-c", AS_NOBODY, *args]
        if as_nobody
        else [sys.executable, "-m", "sidecar.cli", *args]
    )
    return subprocess.run(
        cmd,
        cwd="/",
        env=python_env({"LD_LIBRARY_PATH": "/nonexistent"}),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_segments_are_0600_whatever_the_umask(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.stress_jobs", "once"],
        env=python_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.umask(0),
    )
    try:
        assert proc.stdout.readline() == b"published\n"
        st = os.stat(segment_path(proc.pid))
        assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
    finally:
        proc.terminate()
        proc.wait()


@needs_root
@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_sidecar_as_another_user_refuses_the_segment_and_says_why(job_with_segment, mode):
    pid, _ = job_with_segment
    os.chmod(segment_path(pid), mode)
    r = sidecar_once(pid, as_nobody=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (p,) = doc["processes"]
    assert p["probe_state"] == "foreign-owner" and p["has_probe"] is False and p["models"] == []
    why = "Permission denied" if mode == 0o600 else f"belongs to uid 0, we are uid {NOBODY}"
    assert why in p["probe_error"], p["probe_error"]
    (w,) = [w for w in doc["warnings"] if w["code"] == "probe-unreadable"]
    assert w["pids"] == [pid] and why in w["message"] and "same user" in w["hint"]
    human = sidecar_once(pid, as_nobody=True, json_out=False)
    assert "probe-unreadable" in human.stdout and why in human.stdout and "same user" in human.stdout
    assert os.path.exists(segment_path(pid)), "an unprivileged sidecar removed another user's segment"


@pytest.fixture
def nobody_job():
    """A job of uid 65534 with a child that runs no probe: `sh` and its `sleep`."""
    proc = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c", "sleep 300 & wait"],
        stdin=subprocess.DEVNULL,
    )
    kid = wait_for(lambda: _children(proc.pid), what="the job's child")[0]
    yield proc.pid, kid
    proc.kill()
    proc.wait()
    os.kill(kid, 9)
    for pid in (proc.pid, kid):
        for path in (segment_path(pid), segment_path(pid, process_start_ticks(pid) or 0)):
            if os.path.lexists(path):
                os.unlink(path)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


@needs_root
def test_root_sidecar_reads_the_segment_of_the_jobs_own_user(nobody_job):
    pid, _ = nobody_job
    write_as(NOBODY, pid)
    assert os.stat(segment_path(pid)).st_uid == NOBODY
    assert read_segment(pid).state == "ok"
    doc = json.loads(sidecar_once(pid, as_nobody=False).stdout)
    (p,) = [p for p in doc["processes"] if p["pid"] == pid]
    assert p["probe_state"] == "ok" and p["models"][0]["name"] == "net0"


@needs_root
@pytest.mark.parametrize("reader", ["root", "the job's user"])
def test_a_segment_forged_by_another_user_is_ignored_whoever_reads(nobody_job, reader):
    """Issue 12 item 1: uid 65533 writes valid segments for uid 65534's job and its probe-less
    child; a root sidecar reported the forged model on cuda:0. Now neither counts, and the warning
    says whose file it is without telling a root sidecar to run as the job's user."""
    pid, kid = nobody_job
    for target in (pid, kid):
        write_as(FORGER, target)
    r = sidecar_once(pid, as_nobody=reader != "root")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    shown = {p["pid"]: p for p in doc["processes"]}
    assert set(shown) == {pid, kid}
    why = f"is owned by uid {FORGER}, process runs as uid {NOBODY}: ignored"
    for target in (pid, kid):
        p = shown[target]
        assert p["probe_state"] == "owner-mismatch" and p["has_probe"] is False and p["models"] == [], p
        assert why in p["probe_error"], p["probe_error"]
    assert doc["status"] != "GPU"
    (w,) = [w for w in doc["warnings"] if w["code"] == "probe-unreadable"]
    assert sorted(w["pids"]) == sorted([pid, kid]) and why in w["message"]
    assert "same user" not in w["hint"] and "another user" in w["hint"] and render(w["hint_ref"], "zh")
    assert os.path.exists(segment_path(pid)), "the reader removed another user's file"


# -------------------------------------------------------------------------------------------------
# Redaction

SECRETS = [
    "sk-live-0123456789",
    "abc123token",
    "hunter2",
    "pw0rd",
    "hf_SECRETxyz",
    "AKIAxyz/secret",
    "p@ss-w0rd",
]
SECRET_ARGS = [
    "--api-key",
    "sk-live-0123456789",
    "--token=abc123token",
    "password=hunter2",
    "https://user:pw0rd@db.example/x",
    "--hf_token",
    "hf_SECRETxyz",
    "AWS_SECRET_ACCESS_KEY=AKIAxyz/secret",
    "--db-password=p@ss-w0rd",
]
JOB = (
    "import subprocess, sys, time\n"
    "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', *sys.argv[1:]])\n"
    "print(kid.pid, flush=True)\n"
    "try:\n    time.sleep(300)\nfinally:\n    kid.kill()\n"
)


def test_secrets_in_command_lines_are_redacted_everywhere(fake_nvml):
    fake_nvml.write({"gpus": []})
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, *SECRET_ARGS], stdout=subprocess.PIPE, text=True, env=python_env()
    )
    try:
        kid = int(job.stdout.readline())
        wait_for(lambda: os.path.exists(f"/proc/{kid}"), what="child")
        with Sidecar(
            ["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2", "--job-name", "redaction"],
            env=fake_nvml.env(),
        ) as sc:
            doc = sc.wait_status(lambda d: len(d["processes"]) == 2, what="both processes")
            outputs = {
                "status": json.dumps(doc),
                "history": json.dumps(sc.history()),
                "metrics": sc.get("/metrics")[1].decode(),
            }
            once = subprocess.run(
                [sys.executable, "-m", "sidecar.cli", "--pid", str(job.pid), "--once"],
                capture_output=True,
                text=True,
                env=python_env(fake_nvml.env()),
                cwd=REPO,
                timeout=60,
            )
            outputs["--once"] = once.stdout
            outputs["--once --json"] = subprocess.run(
                [sys.executable, "-m", "sidecar.cli", "--pid", str(job.pid), "--once", "--json"],
                capture_output=True,
                text=True,
                env=python_env(fake_nvml.env()),
                cwd=REPO,
                timeout=60,
            ).stdout
        for where, text in outputs.items():
            for secret in SECRETS:
                assert secret not in text, f"{secret!r} shown in {where}"
        for p in doc["processes"]:
            assert "--api-key" in p["cmdline"] and "***" in p["cmdline"], p["cmdline"]
        assert doc["target"]["cmdline"] == doc["processes"][0]["cmdline"]
        assert "https://user:***@db.example/x" in doc["target"]["cmdline"]
        assert once.returncode == 0, once.stderr
    finally:
        job.kill()
        job.wait()
        try:
            os.kill(kid, 9)
        except (ProcessLookupError, NameError):
            pass
