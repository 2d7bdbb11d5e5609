"""Where /proc and /sys are is one parameter (hostfs.paths.HostPaths, the CLI's --path.procfs and
--path.sysfs): the process tree, the boot time, the owners' lookups, the lineage and the identity
readers all read the /proc it names, here a small fake one in tmp_path, and the CLI takes both."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hostfs import procid
from hostfs.paths import HOST, HostPaths
from sidecar.sources import lineage
from sidecar.sources.owners import KnownProcesses
from sidecar.sources.proctree import ProcessTreeSource, pid_exists, pid_visible
from tests.fakenvml import make_fake_sysfs
from tests.helpers.sidecar_cli import cli

REPO = Path(__file__).resolve().parents[2]
TRAINER, WORKER = 4100, 4101
TICKS = {TRAINER: 777001, WORKER: 777042}
UID = 4321
BOOT_UNIX_S = 1_700_000_000  # the fake /proc/stat's btime
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int, comm: str, ppid: int, start_ticks: int, state: str = "S") -> str:
    # Fields 3.. of proc(5): state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss, then the rest.
    after = [state, ppid, pid, pid, 0, -1, 4194304, 0, 0, 0, 0, 30, 12, 0, 0, 20, 0, 3, 0, start_ticks]
    after += [10_000_000, 256] + [0] * 30
    return f"{pid} ({comm}) " + " ".join(map(str, after)) + "\n"


def _process(root, pid: int, comm: str, ppid: int, children: tuple[int, ...], argv: list[str]) -> None:
    d = root / str(pid)
    (d / "task" / str(pid)).mkdir(parents=True)
    (d / "stat").write_text(_stat(pid, comm, ppid, TICKS[pid]))
    (d / "task" / str(pid) / "children").write_text("".join(f"{c} " for c in children))
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "status").write_text(f"Name:\t{comm}\nTgid:\t{pid}\nUid:\t{UID}\t{UID}\t{UID}\t{UID}\nNSpid:\t{pid}\n")


@pytest.fixture
def fake_proc(tmp_path):
    root = tmp_path / "proc"
    # What the tree source checks for before it trusts the kernel's children lists.
    (root / "self" / "task" / str(os.getpid())).mkdir(parents=True)
    (root / "self" / "task" / str(os.getpid()) / "children").write_text("")
    (root / "sys" / "kernel").mkdir(parents=True)
    (root / "sys" / "kernel" / "ns_last_pid").write_text(f"{WORKER}\n")
    (root / "stat").write_text(f"cpu  1 2 3 4\nbtime {BOOT_UNIX_S}\nprocesses 5\n")
    _process(root, TRAINER, "trainer", 1, (WORKER,), ["python", "train.py", "--epochs", "3"])
    _process(root, WORKER, "pt_data_worker", TRAINER, (), ["python", "train.py"])
    (root / str(TRAINER) / "cwd").symlink_to(tmp_path)
    return root


def test_host_paths_join_under_their_roots_and_are_frozen():
    assert HOST == HostPaths() and hash(HOST) == hash(HostPaths("/proc", "/sys"))
    assert HOST.proc_path() == "/proc" and HOST.sys_path() == "/sys"
    assert HOST.proc_path(12, "task", 13, "children") == "/proc/12/task/13/children"
    assert HOST.sys_path("class", "drm") == "/sys/class/drm"
    elsewhere = HostPaths(procfs="/host/proc/", sysfs="/host/sys")
    assert elsewhere != HOST and elsewhere == HostPaths("/host/proc", "/host/sys")
    assert elsewhere.proc_path("self") == "/host/proc/self" and elsewhere.sys_path("bus") == "/host/sys/bus"
    assert HostPaths(procfs="/").proc_path(1, "stat") == "/1/stat"
    with pytest.raises(AttributeError):
        HOST.procfs = "/elsewhere"  # type: ignore[misc]
    assert HOST.procfs == "/proc"


def test_the_process_tree_reads_the_fake_tree(fake_proc):
    host = HostPaths(procfs=str(fake_proc))
    tree = ProcessTreeSource(TRAINER, host=host)
    assert tree.target_start_ticks == TICKS[TRAINER]
    snap = tree.poll()
    assert snap.error is None and snap.target_alive
    got = [(p.pid, p.ppid, p.depth, p.start_ticks, p.name, tuple(p.cmdline)) for p in snap.processes]
    assert got == [
        (TRAINER, 1, 0, TICKS[TRAINER], "trainer", ("python", "train.py", "--epochs", "3")),
        (WORKER, TRAINER, 1, TICKS[WORKER], "pt_data_worker", ("python", "train.py")),
    ]
    # The boot time is the fake /proc/stat's btime, not the host's (psutil.boot_time()'s).
    assert snap.processes[0].create_time == BOOT_UNIX_S + TICKS[TRAINER] / CLK_TCK
    assert pid_visible(WORKER, host=host) and not pid_visible(WORKER + 1, host=host)
    # The trainer's pid is another process's now (a later start): the job is gone.
    (fake_proc / str(TRAINER) / "stat").write_text(_stat(TRAINER, "other", 1, TICKS[TRAINER] + 5))
    assert tree.poll().target_alive is False
    tree.close()


def test_owners_identities_and_lineage_read_the_fake_tree(fake_proc, tmp_path):
    host = HostPaths(procfs=str(fake_proc))
    assert procid.process_identity(WORKER, host=host) == (WORKER, TICKS[WORKER])
    assert procid.process_parent(WORKER, host=host) == (TRAINER, TICKS[TRAINER])
    assert procid.process_real_uid(TRAINER, host=host) == UID
    assert procid.leader_real_uid(TRAINER, host=host) == UID
    assert procid.process_state(TRAINER, host=host) == "S"
    assert not procid.proc_is_ours(host=host)  # the fake tree's "self" is no link to this process
    assert procid.pid_namespace_id(host=host) == 0  # nor has it a ns/pid
    known = KnownProcesses(max_open=8, host=host)
    known.new_poll()
    assert known.identity(TRAINER) == (TRAINER, TICKS[TRAINER])
    assert known.real_uid(WORKER) == UID
    assert known.identity(WORKER + 7) is None
    known.close()
    assert lineage.ancestors(WORKER, host=host) == (TRAINER, 1)
    info = lineage.root_info(TRAINER, host=host)
    assert (info.uid, info.cwd) == (UID, str(tmp_path))
    assert lineage.job_root(WORKER, lambda pid, argv: pid == TRAINER, host=host) == (TRAINER, TICKS[TRAINER])


def test_pid_exists_reads_the_fake_tree(fake_proc):
    host = HostPaths(procfs=str(fake_proc))
    assert pid_exists(TRAINER, host=host) and not pid_exists(WORKER + 1, host=host)
    (fake_proc / str(WORKER) / "stat").write_text(_stat(WORKER, "pt_data_worker", TRAINER, TICKS[WORKER], "Z"))
    assert not pid_exists(WORKER, host=host)  # a zombie has exited
    assert pid_exists(os.getpid()) and not pid_exists(TRAINER)  # the host's own /proc: no fake pids


def test_the_cli_reads_the_proc_and_sys_its_flags_name(fake_proc, tmp_path):
    """`--path.procfs` and `--path.sysfs` reach every source: the job under the fake trainer (a pid
    the host does not run) is the fake tree's, and the OS's graphics devices are the fake /sys's."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        pytest.skip("this kernel lists no children files: the tree would be read through psutil")
    # The sidecar is another process: its "self" (whose children files say the kernel lists them)
    # is the real one.
    shutil.rmtree(fake_proc / "self")
    (fake_proc / "self").symlink_to("/proc/self")
    sys_root = make_fake_sysfs(tmp_path / "sys", [{"pci": "0000:00:02.0", "vendor": "0x8086", "driver": "i915"}])
    r = cli(
        "--pid", str(TRAINER), "--once", "--json",
        "--path.procfs", str(fake_proc), "--path.sysfs", str(sys_root),
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["target"]["pid"] == TRAINER
    assert doc["target"]["create_time_unix_s"] == pytest.approx(BOOT_UNIX_S + TICKS[TRAINER] / CLK_TCK)
    assert sorted(p["pid"] for p in doc["processes"]) == [TRAINER, WORKER]
    assert [(g["vendor"], g["pci"], g["driver"]) for g in doc["system_gpus"]] == [("Intel", "0000:00:02.0", "i915")]
    # Without the flag the host's own /proc is read: it runs no such pid.
    assert cli("--pid", str(TRAINER), "--once").returncode == 3


def test_the_short_flags_name_the_same_roots(tmp_path):
    """--procfs and --sysfs are --path.procfs and --path.sysfs, in every command that reads /proc."""
    from sidecar.cli.args import host_paths, mcp_parser, serve_parser

    for parser in (serve_parser(), mcp_parser()):
        args = parser.parse_args(["--procfs", str(tmp_path / "proc"), "--sysfs", str(tmp_path / "sys")])
        assert host_paths(args) == HostPaths(procfs=str(tmp_path / "proc"), sysfs=str(tmp_path / "sys"))


def test_hostfs_imports_the_standard_library_only():
    """What hostfs/ruff.toml asks, in a fresh interpreter: the probe imports hostfs inside
    training processes."""
    code = (
        "import sys; before = set(sys.modules); import hostfs.paths, hostfs.procid, hostfs.procroot; "
        "print(' '.join(set(sys.modules) - before))"
    )
    # -S: no site-packages (their .pth files import modules of their own); the repository is the cwd.
    added = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, timeout=60,
        cwd=REPO, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.split()
    assert {"hostfs.paths", "hostfs.procid", "hostfs.procroot"} <= set(added)
    others = {m.split(".")[0] for m in added} - set(sys.stdlib_module_names) - {"hostfs"}
    assert others == set(), others
