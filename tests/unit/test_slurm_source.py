"""A process's Slurm job (sidecar/sources/slurm.py) and the host's boot (sidecar/sources/boot.py),
read from fixture /proc trees: the cgroup layouts slurmstepd makes (v1, v2, SLUID job names), the
environment of the reader's own processes only, and hostile values taken in no other shape."""

from __future__ import annotations

import os

import pytest

from sidecar.sources.boot import UNKNOWN_BOOT, boot_id
from sidecar.sources.host import HostPaths
from sidecar.sources.slurm import (
    MAX_CGROUP_FILE_BYTES,
    job_from_cgroup_path,
    job_id_value,
    slurm_job,
)

ME = os.getuid()
OTHER = ME + 1000


def _proc(tmp_path, pid: int, *, uid: int, cgroup: bytes | None = None, environ: bytes | None = None) -> HostPaths:
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    if cgroup is not None:
        (d / "cgroup").write_bytes(cgroup)
    if environ is not None:
        (d / "environ").write_bytes(environ)
    return HostPaths(procfs=str(tmp_path / "proc"))


V1 = "12:memory:/slurm/uid_{uid}/job_{job}/step_0/task_0\n11:cpuset:/slurm/uid_{uid}/job_{job}/step_0\n0::/\n"
V2 = "0::/system.slice/slurmstepd.scope/job_{job}/step_batch/user/task_0\n"


@pytest.mark.parametrize(
    ("text", "uid", "want"),
    [
        (V1.format(uid=ME, job=4242), ME, "4242"),
        (V1.format(uid=ME, job=4242).replace("/slurm/", "/slurm_node07/"), ME, "4242"),  # several slurmds
        (V2.format(job=987654), ME, "987654"),
        (V2.format(job=9).replace("slurmstepd.scope", "node07_slurmstepd.scope"), ME, "9"),
        (V2.format(job="s0123456789ABC"), ME, "s0123456789ABC"),  # a SLUID (Slurm 25.11)
        (V2.format(job="S0123456789abc"), ME, "S0123456789abc"),  # either case, as str2sluid takes it
        (V1.format(uid=OTHER, job=4242), ME, None),  # another uid's cgroup named in a process of ME
        ("0::/user.slice/user-1000.slice/user@1000.service/slurm/uid_1000/job_1/step_0\n", 1000, None),
        ("0::/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/job_1\n", 1000, None),
        ("0::/system.slice/sshd.service/job_5\n", ME, None),
        (V2.format(job="1" * 21), ME, None),  # longer than any job number
        (V2.format(job="sILOU456789ABC"), ME, None),  # I, L, O, U: no Crockford digits
        (V2.format(job="s0123456789AB"), ME, None),  # a SLUID is 14 characters
        (V2.format(job="42\u202e"), ME, None),  # a bidi override
        (V2.format(job="42\x1b[31m"), ME, None),
        (V2.format(job="٤٢"), ME, None),  # Arabic-Indic digits: not ASCII
    ],
)
def test_a_job_is_named_by_the_cgroup_only_in_slurmstepd_s_layouts(tmp_path, text, uid, want):
    host = _proc(tmp_path, 100, uid=uid, cgroup=text.encode())
    assert slurm_job(100, ME, host=host) == want


def test_the_environment_is_read_only_for_the_reader_s_own_processes(tmp_path):
    env = b"HOME=/home/ada\0SLURM_JOB_ID=31337\0SLURM_JOB_NAME=train\0"
    mine = _proc(tmp_path, 200, uid=ME, cgroup=b"0::/user.slice\n", environ=env)
    assert slurm_job(200, ME, host=mine) == "31337"
    theirs = _proc(tmp_path, 201, uid=OTHER, cgroup=b"0::/user.slice\n", environ=env)
    assert slurm_job(201, ME, host=theirs) is None
    # the cgroup (made by slurmstepd, root) names another user's job
    cg = _proc(tmp_path, 202, uid=OTHER, cgroup=V1.format(uid=OTHER, job=77).encode(), environ=env)
    assert slurm_job(202, ME, host=cg) == "77"
    # and wins over what the process's own environment says
    both = _proc(tmp_path, 203, uid=ME, cgroup=V2.format(job=55).encode(), environ=env)
    assert slurm_job(203, ME, host=both) == "55"


@pytest.mark.parametrize(
    "value",
    [b"", b"12\n34", b"1" * 21, b"42 ", b"\xff\xfe", b"4\xe2\x80\xae2", b"12;rm -rf /", b"s0123456789ABC\x00x"],
)
def test_hostile_environment_values_are_refused(tmp_path, value):
    host = _proc(tmp_path, 300, uid=ME, environ=b"A=1\0SLURM_JOB_ID=" + value + b"\0")
    want = "s0123456789ABC" if value.startswith(b"s0123456789ABC\x00") else None  # NUL ends a variable
    assert slurm_job(300, ME, host=host) == want


def test_reads_are_bounded_and_missing_files_say_nothing(tmp_path):
    late = b"0::/" + b"x" * MAX_CGROUP_FILE_BYTES + b"\n" + V2.format(job=1).encode()
    host = _proc(tmp_path, 400, uid=OTHER, cgroup=late)
    assert slurm_job(400, ME, host=host) is None  # the job's line lies past what is read
    env = b"A=" + b"y" * (256 * 1024) + b"\0SLURM_JOB_ID=5\0"
    host = _proc(tmp_path, 401, uid=ME, environ=env)
    assert slurm_job(401, ME, host=host) is None
    assert slurm_job(402, ME, host=HostPaths(procfs=str(tmp_path / "nothing"))) is None


def test_job_values_and_paths():
    assert job_id_value("0") == "0" and job_id_value(None) is None and job_id_value("12\n") is None
    assert job_from_cgroup_path("/slurm/uid_5/job_6", None) is None  # owner unknown: v1 proves nothing
    assert job_from_cgroup_path("slurm/uid_5/job_6/step_0", 5) is None  # not absolute


def test_boot_id_then_btime_then_unknown(tmp_path):
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    host = HostPaths(procfs=str(proc))
    assert boot_id(host=host) == UNKNOWN_BOOT
    (proc / "stat").write_text("cpu  1 2 3\nbtime 1765000000\nprocesses 5\n")
    assert boot_id(host=host) == "btime-1765000000"
    (proc / "sys/kernel/random/boot_id").write_text("not a uuid\n")
    assert boot_id(host=host) == "btime-1765000000"
    (proc / "sys/kernel/random/boot_id").write_text("0F4B5C6D-1111-4222-8333-444455556666\n")
    assert boot_id(host=host) == "0f4b5c6d-1111-4222-8333-444455556666"
