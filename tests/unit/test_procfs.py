"""One redirectable /proc root (probe_wire.procfs.PROCFS_PATH): the process tree, the owners'
lookups and the identity readers all read the tree it names, here a small fake one in tmp_path."""

from __future__ import annotations

import os

import pytest

from probe_wire import procfs, procid
from sidecar.sources.owners import KnownProcesses
from sidecar.sources.proctree import ProcessTreeSource, pid_visible

TRAINER, WORKER = 4100, 4101
TICKS = {TRAINER: 777001, WORKER: 777042}
UID = 4321


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
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{UID}\t{UID}\t{UID}\t{UID}\nNSpid:\t{pid}\n")


@pytest.fixture
def fake_proc(tmp_path, monkeypatch):
    root = tmp_path / "proc"
    # What the tree source checks for before it trusts the kernel's children lists.
    (root / "self" / "task" / str(os.getpid())).mkdir(parents=True)
    (root / "self" / "task" / str(os.getpid()) / "children").write_text("")
    (root / "sys" / "kernel").mkdir(parents=True)
    (root / "sys" / "kernel" / "ns_last_pid").write_text(f"{WORKER}\n")
    _process(root, TRAINER, "trainer", 1, (WORKER,), ["python", "train.py", "--epochs", "3"])
    _process(root, WORKER, "pt_data_worker", TRAINER, (), ["python", "train.py"])
    monkeypatch.setattr(procfs, "PROCFS_PATH", str(root))
    return root


def test_proc_path_joins_under_the_root(monkeypatch):
    assert procfs.proc_path() == "/proc"
    assert procfs.proc_path(12, "task", 13, "children") == "/proc/12/task/13/children"
    monkeypatch.setattr(procfs, "PROCFS_PATH", "/elsewhere")
    assert procfs.proc_path("self") == "/elsewhere/self"


def test_the_process_tree_reads_the_fake_tree(fake_proc):
    tree = ProcessTreeSource(TRAINER)
    assert tree.target_start_ticks == TICKS[TRAINER]
    snap = tree.poll()
    assert snap.error is None and snap.target_alive
    got = [(p.pid, p.ppid, p.depth, p.start_ticks, p.name, tuple(p.cmdline)) for p in snap.processes]
    assert got == [
        (TRAINER, 1, 0, TICKS[TRAINER], "trainer", ("python", "train.py", "--epochs", "3")),
        (WORKER, TRAINER, 1, TICKS[WORKER], "pt_data_worker", ("python", "train.py")),
    ]
    assert pid_visible(WORKER) and not pid_visible(WORKER + 1)
    # The trainer's pid is another process's now (a later start): the job is gone.
    (fake_proc / str(TRAINER) / "stat").write_text(_stat(TRAINER, "other", 1, TICKS[TRAINER] + 5))
    assert tree.poll().target_alive is False
    tree.close()


def test_owners_and_identities_read_the_fake_tree(fake_proc):
    assert procid.process_identity(WORKER) == (WORKER, TICKS[WORKER])
    assert procid.process_real_uid(TRAINER) == UID
    assert procid.process_state(TRAINER) == "S"
    assert not procid.proc_is_ours()  # the fake tree's "self" is no link to this process
    known = KnownProcesses(max_open=8)
    known.new_poll()
    assert known.identity(TRAINER) == (TRAINER, TICKS[TRAINER])
    assert known.real_uid(WORKER) == UID
    assert known.identity(WORKER + 7) is None
    known.close()
