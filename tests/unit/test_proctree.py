"""The process tree read from /proc: real processes, threads that fork, exits, zombies.

The source keeps /proc files open between polls (see proctree._ProcFiles); these tests check that
what it reports is the tree, whether files are kept or not, and that it lets go of the files of
processes that left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sidecar.sources.proctree import ProcessTreeSource
from tests.helpers.harness import wait_for

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")

PARENT = r"""
import subprocess, sys, threading
kids, zombies, hold, spawned = [], [], threading.Event(), threading.Event()
def spawn_from_thread():
    kids.append(subprocess.Popen(["sleep", "120"]))
    spawned.set()
    hold.wait()  # the thread stays: its child is listed under this thread, not the main one
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "kid":
        kids.append(subprocess.Popen(["sleep", "120"]))
    elif cmd == "threadkid":
        threading.Thread(target=spawn_from_thread, daemon=True).start()
        spawned.wait()
    elif cmd == "grandkid":
        kids.append(subprocess.Popen([sys.executable, "-c",
            "import subprocess, sys; p = subprocess.Popen(['sleep', '120']); print(p.pid, flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        kids[-1].grandkid = int(kids[-1].stdout.readline())
    elif cmd == "killfirst":
        kids[0].kill(); kids[0].wait(); kids.pop(0)
    elif cmd == "subreaper":
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    elif cmd == "zombie":
        zombies.append(subprocess.Popen(["true"]))  # never waited for
    print(" ".join(f"{k.pid}:{getattr(k, 'grandkid', 0)}" for k in kids), flush=True)
"""


class Parent:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def do(self, cmd: str) -> list[tuple[int, int]]:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        return [tuple(int(x) for x in item.split(":")) for item in line]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def parent():
    p = Parent()
    yield p
    p.close()
    subprocess.run(["pkill", "-KILL", "-P", str(p.proc.pid)], check=False)


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state first)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _children(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def _settled(pid: int) -> bool:
    """True once `pid` runs `sleep` and its stat reads the same twice in a row (the caller polls)."""
    with open(f"/proc/{pid}/comm") as f:
        comm = f.read().strip()
    now = _stat(pid)
    before, _last_stat[pid] = _last_stat.get(pid), now
    return comm == "sleep" and now[0] == "S" and now == before


_last_stat: dict[int, list[str]] = {}


def shape(snap) -> dict[int, tuple[int | None, int]]:
    return {p.pid: (p.ppid, p.depth) for p in snap.processes}


@pytest.mark.parametrize("max_open_files", [None, 0, 3])
def test_tree_with_kids_grandkids_and_a_kid_forked_by_a_thread(parent, max_open_files):
    src = ProcessTreeSource(parent.proc.pid, max_open_files=max_open_files)
    root = parent.proc.pid
    assert shape(src.poll()) == {root: (os.getpid(), 0)}
    kids = parent.do("kid")
    kids = parent.do("grandkid")
    kids = parent.do("threadkid")
    deadline = time.monotonic() + 10
    while True:
        got = shape(src.poll())
        want = {root: (os.getpid(), 0)}
        for pid, grandkid in kids:
            want[pid] = (root, 1)
            if grandkid:
                want[grandkid] = (pid, 2)
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert got == want
    # The same answer poll after poll, from the kept files.
    assert shape(src.poll()) == want
    snap = src.poll()
    assert snap.target_alive and snap.processes[0].pid == root
    assert all(p.start_ticks and p.create_time and p.rss_mib is not None for p in snap.processes)
    if max_open_files is not None:
        assert len(src._files._files) <= max_open_files
    src.close()
    assert not src._files._files


def test_a_kid_that_exits_leaves_the_tree_and_its_files_are_closed(parent):
    src = ProcessTreeSource(parent.proc.pid)
    parent.do("kid")
    kids = parent.do("kid")
    (first, _), (second, _) = kids
    assert set(shape(src.poll())) == {parent.proc.pid, first, second}
    held = {k[0] for k in src._files._files}
    assert first in held and second in held
    parent.do("killfirst")
    assert set(shape(src.poll())) == {parent.proc.pid, second}
    assert first not in {k[0] for k in src._files._files}
    src.close()


def test_a_zombie_is_not_listed(parent):
    src = ProcessTreeSource(parent.proc.pid)
    parent.do("zombie")
    # `true` has exited, unreaped: its parent's only child, in state Z.
    wait_for(lambda: [_stat(c)[0] for c in _children(parent.proc.pid)] == ["Z"], 10, 0.01, "a zombie")
    assert set(shape(src.poll())) == {parent.proc.pid}
    src.close()


def test_a_target_that_exits_is_reported_gone_and_every_file_closed(parent):
    src = ProcessTreeSource(parent.proc.pid)
    parent.do("kid")
    assert len(src.poll().processes) == 2 and src._files._files
    parent.close()
    snap = src.poll()
    assert not snap.target_alive and snap.processes == ()
    assert not src._files._files


def test_without_new_processes_the_children_lists_are_not_read_again(parent, monkeypatch):
    src = ProcessTreeSource(parent.proc.pid)
    kids = parent.do("grandkid")
    first = shape(src.poll())
    assert len(first) == 3
    listed = []
    real = src._files.children
    monkeypatch.setattr(src._files, "children", lambda pid, threads: listed.append(pid) or real(pid, threads))
    for _ in range(50):  # until a poll during which nothing on this machine started a process
        listed.clear()
        last = src._files.last_pid()
        assert shape(src.poll()) == first
        if src._files.last_pid() == last:
            assert listed == []
            break
        time.sleep(0.02)
    else:
        pytest.fail("no quiet moment on this machine to check the shortcut in")
    # A new process anywhere: the lists are read again, and the new kid is found.
    kids = parent.do("kid")
    assert set(shape(src.poll())) == {parent.proc.pid, kids[0][0], kids[0][1], kids[1][0]}
    assert parent.proc.pid in listed
    src.close()


def _quiet_poll(src, listed: list, before=None, tries: int = 50):
    """Poll until one poll's pid range held only what ``before`` (a callable run just before the
    poll) started: no other process of the machine started one meanwhile. The pids the children
    lists were read for at that poll, and the tree it found."""
    for _ in range(tries):
        listed.clear()
        start = src._files.last_pid()
        if before is not None:
            before()
        mid = src._files.last_pid()
        got = shape(src.poll())
        if src._files.last_pid() == mid and (before is None or mid != start):
            return list(listed), got
        time.sleep(0.02)
    pytest.fail("no quiet moment on this machine to check the shortcut in")


def test_processes_started_outside_the_tree_cost_no_walk_of_the_children_lists(parent, monkeypatch):
    src = ProcessTreeSource(parent.proc.pid)
    ((kid, grandkid),) = parent.do("grandkid")
    first = shape(src.poll())
    listed: list[int] = []
    real = src._files.children
    monkeypatch.setattr(src._files, "children", lambda pid, threads: listed.append(pid) or real(pid, threads))
    outsiders: list[subprocess.Popen] = []
    # A tree of 3 (whose lists cost less than looking at one new pid) looks at the new pids as a
    # large tree does (of 6 members a new pid, by default).
    monkeypatch.setattr("sidecar.sources.proctree.NEW_PIDS_PER_MEMBER", 100)
    try:
        # A process of this test (no member of the tree) starts and stays; another starts and ends.
        read, got = _quiet_poll(
            src,
            listed,
            lambda: (
                outsiders.append(subprocess.Popen(["sleep", "60"])) or subprocess.run(["true"], check=True)
            ),
        )
        assert got == first and read == []
        # Past NEW_PIDS_PER_MEMBER new pids a member, the lists are read.
        monkeypatch.setattr("sidecar.sources.proctree.NEW_PIDS_PER_MEMBER", 0)
        read, got = _quiet_poll(src, listed, lambda: subprocess.run(["true"], check=True))
        assert got == first and parent.proc.pid in read
    finally:
        for p in outsiders:
            p.kill()
            p.wait()
    src.close()


@pytest.mark.parametrize("how", ["kid", "threadkid", "grandkid"])
def test_a_member_that_forks_is_walked_at_the_next_poll_beside_outside_processes(parent, how, monkeypatch):
    """The pids allocated since the last walk are looked at: a new child of a member (started by a
    thread, whose own pid names the member's parent; or a child that forked a grandkid at once) is
    found at the very next poll, with processes outside the tree started in the same interval."""
    monkeypatch.setattr("sidecar.sources.proctree.NEW_PIDS_PER_MEMBER", 100)  # looked at, not listed
    src = ProcessTreeSource(parent.proc.pid)
    assert set(shape(src.poll())) == {parent.proc.pid}
    subprocess.run(["true"], check=True)
    ((kid, grandkid),) = parent.do(how)
    subprocess.run(["true"], check=True)
    want = {parent.proc.pid, kid} | ({grandkid} if grandkid else set())
    assert set(shape(src.poll())) == want
    src.close()


def test_an_exit_that_moves_a_grandkid_to_a_subreaper_is_seen_without_any_new_process(parent):
    src = ProcessTreeSource(parent.proc.pid)
    parent.do("subreaper")
    ((kid, grandkid),) = parent.do("grandkid")
    assert shape(src.poll()) == {
        parent.proc.pid: (os.getpid(), 0),
        kid: (parent.proc.pid, 1),
        grandkid: (kid, 2),
    }
    parent.do("killfirst")  # the grandkid's parent dies: the kernel hands it to the subreaper
    deadline = time.monotonic() + 5
    while True:
        got = shape(src.poll())
        if got.get(grandkid) == (parent.proc.pid, 1) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert got == {parent.proc.pid: (os.getpid(), 0), grandkid: (parent.proc.pid, 1)}
    src.close()


def test_a_last_pid_that_never_moves_still_finds_new_kids_within_a_bounded_number_of_polls(
    parent, monkeypatch
):
    from sidecar.sources.proctree import FULL_WALK_EVERY_POLLS

    src = ProcessTreeSource(parent.proc.pid)
    monkeypatch.setattr(src._files, "last_pid", lambda: 12345)  # a /proc that makes it up
    assert set(shape(src.poll())) == {parent.proc.pid}
    ((kid, _),) = parent.do("kid")
    found_after = next((n for n in range(1, FULL_WALK_EVERY_POLLS + 1) if kid in shape(src.poll())), None)
    assert found_after is not None and found_after <= FULL_WALK_EVERY_POLLS
    src.close()


def test_the_last_pid_moves_when_a_process_starts():
    src = ProcessTreeSource(os.getpid())
    before = src._files.last_pid()
    subprocess.run(["true"], check=True)
    after = src._files.last_pid()
    assert before is not None and after is not None and after != before
    src.close()


def test_files_kept_for_a_previous_owner_of_a_pid_are_not_read_for_the_new_one(parent):
    from sidecar.sources.proctree import _ProcFiles

    pid = parent.proc.pid
    files = _ProcFiles(max_open=8)
    st = files.stat(pid)
    files.children(pid, st.threads)
    kept_children = [k for k in files._files if k[0] == pid and k[1]]
    assert kept_children  # the leader's children file is kept
    # As if the stat had not been kept (the budget) and the pid had belonged to another process
    # when these children files were opened: the next stat must drop them.
    files._close((pid, 0))
    files._ticks[pid] = st.start_ticks - 1
    again = files.stat(pid)
    assert again.start_ticks == st.start_ticks
    assert not [k for k in files._files if k[0] == pid and k[1]] and pid not in files._tids
    assert files.children(pid, again.threads) == []  # read afresh: the parent has no kids yet
    files.close()


def test_the_psutil_fallback_uses_the_probe_s_identity_and_keeps_live_segments(monkeypatch):
    """Issue 12 item 7: on a kernel without /proc/PID/task/TID/children the tree comes from psutil,
    whose start_ticks were ticks since 1970 (create_time * CLK_TCK) while the probe writes ticks since
    boot: every live child's segment read as stale and was unlinked."""
    from hostfs.procid import process_start_ticks
    from probe_wire import segment_path
    from sidecar.sources import proctree
    from sidecar.sources.segments import SegmentSource
    from tests.helpers.harness import REPO, python_env

    monkeypatch.setattr(proctree, "_has_children_files", lambda host: False)  # such a kernel
    job = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -m tests.helpers.stress_jobs once & wait"],
        cwd=REPO,
        env=python_env(),
        stdout=subprocess.PIPE,
    )
    writer = None
    try:
        assert job.stdout.readline() == b"published\n"
        with open(f"/proc/{job.pid}/task/{job.pid}/children") as f:
            (writer,) = (int(x) for x in f.read().split())
        source = ProcessTreeSource(job.pid)
        assert not source._use_proc
        tree = source.poll()
        ticks = {p.pid: p.start_ticks for p in tree.processes}
        assert ticks == {job.pid: process_start_ticks(job.pid), writer: process_start_ticks(writer)}
        segments = SegmentSource()
        for _ in range(2):
            reads = segments.poll(source.poll())
            assert reads[writer].state == "ok", reads[writer]
        assert os.path.exists(segment_path(writer)) and segments.removed == []
        segments.close()
    finally:
        if writer is not None:
            os.kill(writer, 15)  # SIGTERM: the writer closes (unlinks) its segment; sh's wait returns
        else:
            job.kill()
        job.wait(timeout=30)


def _fresh_fields(info) -> tuple:
    """What a ProcInfo says apart from its CPU share (which needs two polls)."""
    return (
        info.pid,
        info.ppid,
        info.start_ticks,
        info.create_time,
        info.name,
        info.cmdline,
        info.rss_mib,
        info.depth,
        info.state,
    )


def test_an_idle_process_keeps_its_info_object_and_any_change_in_its_stat_makes_a_new_one(parent):
    src = ProcessTreeSource(parent.proc.pid)
    ((kid, _),) = parent.do("kid")
    # The kid has exec'd sleep and sleeps: its stat stops changing.
    wait_for(lambda: _settled(kid), 10, 0.02, f"kid {kid} to settle in sleep")
    infos = [{p.pid: p for p in src.poll().processes}[kid] for _ in range(3)]
    assert infos[0].cpu_percent is None and infos[1].cpu_percent == 0.0
    assert infos[2] is infos[1]  # nothing changed: the same object
    # The reused object says what a source that never saw the kid reads now.
    other = ProcessTreeSource(parent.proc.pid)
    assert _fresh_fields({p.pid: p for p in other.poll().processes}[kid]) == _fresh_fields(infos[2])
    os.kill(kid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 5
        while (stopped := {p.pid: p for p in src.poll().processes}[kid]).state != "T":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert stopped is not infos[2] and stopped.cpu_percent == 0.0
    finally:
        os.kill(kid, signal.SIGCONT)
    src.close()
    other.close()


def test_the_cpu_share_is_the_ticks_between_two_walks_over_the_time_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Of the stats two consecutive walks read: none at the first walk, none when the clock did
    not move since the last walk, else the ticks' difference over the time between (0.0 for the
    very same stat)."""
    from sidecar.sources import proctree

    times = [100.0, 100.5, 100.5, 102.0, 102.0 + 1e-9, 103.0]
    clock = iter(times)
    monkeypatch.setattr(proctree.time, "monotonic", lambda: next(clock))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        src = ProcessTreeSource(spinner.pid)
        last = None
        for i, now in enumerate(times):
            (info,) = src.poll().processes
            stat = src._infos[info.identity][0]
            if last is None or now <= times[i - 1]:
                assert info.cpu_percent is None, i
            else:
                ticks = stat.cpu_ticks - last.cpu_ticks
                assert info.cpu_percent == round(
                    100.0 * ticks / proctree._CLK_TCK / (now - times[i - 1]), 1
                ), i
            last = stat
            time.sleep(0.03)  # a few ticks of the spinner's
        src.close()
    finally:
        spinner.kill()
        spinner.wait()


def test_a_process_that_execs_shows_its_new_name_and_command_line():
    """An exec keeps the pid and the start time (the identity): a spawned child is forked with its
    parent's command line, then execs. The cached name and command line must follow it."""
    code = "import os, sys; sys.stdin.readline(); os.execvp('sleep', ['sleep', '60'])"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        src = ProcessTreeSource(proc.pid)
        wait_for(lambda: src.poll().processes[0].cmdline[-1:] == (code,), 10, 0.02, "the python command line")
        before = src.poll().processes[0]
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        wait_for(lambda: src.poll().processes[0].name == "sleep", 10, 0.02, "the exec to show")
        after = src.poll().processes[0]
        assert (after.pid, after.start_ticks) == (before.pid, before.start_ticks)
        assert after.cmdline == ("sleep", "60")
        src.close()
    finally:
        proc.kill()
        proc.wait()


def test_an_exec_to_the_same_name_in_a_process_s_first_seconds_shows_the_new_command_line():
    """A fork has its parent's command line until it execs, and python exec'ing python keeps the
    stat's command name: read in the process's first seconds (EXEC_WINDOW_S), the command line is
    read again, so the one a poll caught before the exec does not stay."""
    code = (
        "import os, sys; sys.stdin.readline(); "
        "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', 'after-exec'])"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        src = ProcessTreeSource(proc.pid)
        wait_for(lambda: src.poll().processes[0].cmdline[-1:] == (code,), 10, 0.02, "the first command line")
        name = src.poll().processes[0].name
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        wait_for(lambda: src.poll().processes[0].cmdline[-1:] == ("after-exec",), 2, 0.02, "the exec to show")
        assert src.poll().processes[0].name == name  # the same name: only the command line tells
        src.close()
    finally:
        proc.kill()
        proc.wait()
