"""Discovery follows /dev/shm's names (probe_wire/shm_index.py): from inotify's events, listing
the directory once; without them, listing it again only when the directory changed (its mtime), and
never trusting a listing whose mtime was too young to be settled (the kernel stamps directories from a
coarse clock: two changes within one tick leave one mtime)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from hostfs.procid import process_identity, process_real_uid
from probe_wire import remove_segment, segment_path
from sidecar.poll.discovery import REDISCOVER_EVERY_POLLS, JobsPoller
from sidecar.poll.finder import JobFinder
from sidecar.sources.owners import next_recheck
from tests.helpers.closed_final import CLOSED_FINAL_WRITER
from tests.helpers.harness import REPO, python_env


def _poller(shm) -> JobsPoller:
    p = JobsPoller(shm_dir=str(shm), nvml_source=object(), system_gpus_fn=list)
    p.poll_count = 1  # not a REDISCOVER poll
    return p


class _Finder:
    """A discovery's finder of segments, following the directory's events or not (``watch``), with
    the polls it counts and the listings of the directory it made."""

    def __init__(self, shm, watch: bool) -> None:
        self.poll = 1  # not a REDISCOVER poll
        self.finder = JobFinder(None, str(shm), lambda: self.poll, watch=watch)
        assert self.finder.names.watching == watch

    def pids(self) -> set[int]:
        return self.finder._segment_pids()

    @property
    def listings(self) -> int:
        return self.finder.names._listings


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "mtime"])
def test_an_unchanged_directory_is_not_listed_again_and_a_new_name_is_found_at_once(tmp_path, watch):
    shm = tmp_path / "shm"
    shm.mkdir()
    mine = shm / f"dsh-probe.{os.getpid()}"
    mine.write_bytes(b"")
    _age(shm, 5)
    f = _Finder(shm, watch)
    assert f.pids() == {os.getpid()}
    assert f.pids() == {os.getpid()} and f.listings == 1  # reused
    mine.unlink()  # the directory changes: found at once (by its event, or listed again)
    _age(shm, 5)
    assert f.pids() == set() and f.listings == (1 if watch else 2)
    f.poll = REDISCOVER_EVERY_POLLS  # and, without events, every REDISCOVER_EVERY_POLLS-th poll lists anyway
    f.pids()
    assert f.listings == (1 if watch else 3)


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "mtime"])
def test_a_listing_taken_while_the_mtime_was_young_is_not_reused(tmp_path, watch):
    shm = tmp_path / "shm"
    shm.mkdir()
    f = _Finder(shm, watch)
    assert f.pids() == set()  # the directory was made just now: its mtime may move no more
    listed = f.listings
    # A name made within the same clock tick keeps the directory's mtime: planted here by hand.
    mtime_ns = os.stat(shm).st_mtime_ns
    (shm / f"dsh-probe.{os.getpid()}").write_bytes(b"")
    os.utime(shm, ns=(mtime_ns, mtime_ns))
    assert f.pids() == {os.getpid()} and f.listings == listed + (0 if watch else 1)


def test_the_sweep_of_dead_writers_skips_the_segments_the_jobs_read_ok(tmp_path, monkeypatch):
    """Discovery's sweep of /dev/shm leaves out the pids whose segments a job read ok at the last
    poll (live writers): reading each of them again cost a poll milliseconds every 20 polls."""
    from types import SimpleNamespace

    import sidecar.poll.discovery as discovery
    import sidecar.sources.segment_dir as segment_dir
    from hostfs.paths import HOST
    from sidecar.sources.segments import ProbeRead, SegmentSource
    from tests.helpers.records import record_of

    shm = tmp_path / "shm"
    shm.mkdir()
    p = _poller(shm)
    source = SegmentSource(sweep_foreign=False)
    source._last_ok[(4242, 7)] = ProbeRead(4242, "ok", record_of(4242), None, False)
    job = SimpleNamespace(
        poller=SimpleNamespace(segment_source=source, poll_once=lambda: None, target_gone_at=None)
    )
    p._jobs = {"4242-7": job}  # type: ignore[dict-item]
    p._discover = lambda now, nvml: None  # type: ignore[method-assign]
    p._publish = lambda now: SimpleNamespace(jobs={})  # type: ignore[method-assign]
    swept = []
    monkeypatch.setattr(segment_dir, "sweep_dead_segments", lambda **kw: swept.append(kw))
    monkeypatch.setattr(discovery, "poll_nvml", lambda source, errors: SimpleNamespace(ok=False, devices=()))
    p.poll_count = 0  # a sweep poll
    p.poll_once()
    # The names as discovery follows them, a part at a time: here none.
    assert swept == [{"skip": {4242: 7}, "shm_dir": str(shm), "names": ([], []), "host": HOST}]


def test_the_os_devices_are_matched_to_nvml_once_for_the_same_inputs():
    from sidecar.poll.collect import system_gpu_facts
    from sidecar.sources.sysfs import SystemGpu
    from sidecar.verdict import GpuFacts

    gpus = (GpuFacts(0, "GPU-0", "A100", "00000000:10:00.0", 1.0, 1.0, 1.0, 2.0),)
    system = [SystemGpu("NVIDIA", "0x10de", "0x20b0", "NVIDIA GPU", "0000:10:00.0", "nvidia")]
    first = system_gpu_facts(system, gpus)
    assert first[0].nvml_index == 0 and system_gpu_facts(system, gpus) is first
    moved = [
        SystemGpu("NVIDIA", "0x10de", "0x20b0", "NVIDIA GPU", "0000:11:00.0", "nvidia")
    ]  # another list: matched again
    assert system_gpu_facts(moved, gpus)[0].nvml_index is None


def test_the_sweep_skips_only_the_names_a_live_writer_may_hold(monkeypatch):
    """A pid read ok at the last poll is a live writer's, but other names under that pid may be
    the leftovers of a dead writer that had the pid before it (its fallback name, or the pid's own
    name when the live writer publishes under its fallback): the sweep still removes those."""
    import subprocess

    import probe_wire as wire
    from hostfs.procid import process_start_ticks
    from probe_wire.names import segment_path

    proc = subprocess.Popen(["sleep", "60"])
    pid, writers = proc.pid, []
    try:
        ticks = process_start_ticks(pid)
        live = wire.SegmentWriter(pid=pid, start_ticks=ticks)
        writers.append(live)
        dead = wire.SegmentWriter(pid=pid, start_ticks=ticks - 1)  # the name is taken: its fallback
        dead.detach()  # killed: its file stays
        assert os.path.exists(segment_path(pid, ticks - 1))
        # (Membership: other processes' dead leftovers may lie in /dev/shm too, and go with them.)
        assert pid in wire.sweep_dead_segments(skip={pid: ticks})
        assert not os.path.exists(segment_path(pid, ticks - 1)) and os.path.exists(segment_path(pid))
        # The live writer under its fallback name (its own was taken when it started), a dead
        # writer's leftover under the pid's own name.
        os.rename(segment_path(pid), segment_path(pid, ticks))
        dead = wire.SegmentWriter(pid=pid, start_ticks=ticks - 1)
        dead.detach()
        assert pid in wire.sweep_dead_segments(skip={pid: ticks})
        assert not os.path.exists(segment_path(pid)) and os.path.exists(segment_path(pid, ticks))
        assert pid not in wire.sweep_dead_segments(skip={pid: ticks})  # the live writer's name stays
    finally:
        for w in writers:
            w.detach()
        proc.kill()
        proc.wait()
        for name_ticks in (None, ticks, ticks - 1):
            try:
                os.unlink(segment_path(pid, name_ticks))
            except OSError:
                pass


def test_a_user_s_discovery_reads_each_gpu_process_s_owner_once_and_keeps_only_its_own(tmp_path):
    """NVML lists every GPU process at every poll; a non-root sidecar keeps its own user's, reading
    each process's real uid once while it lives (sources/owners.py), not at every poll."""
    mine = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    other_user = os.geteuid() == 0 and shutil.which("setpriv")
    theirs = (
        subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
        if other_user
        else None
    )
    try:
        if theirs is not None:
            deadline = time.monotonic() + 10
            while process_real_uid(theirs.pid) != 65534:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        gone = 2**22 + 1  # no process has it
        listed = [mine.pid, gone] + ([theirs.pid] if theirs else [])
        nvml = SimpleNamespace(
            ok=True, devices=[SimpleNamespace(processes=[SimpleNamespace(pid=p) for p in listed])]
        )
        shm = tmp_path / "shm"
        shm.mkdir()
        p = JobsPoller(shm_dir=str(shm), nvml_source=object(), system_gpus_fn=list, uid=os.getuid())
        reads: list[int] = []
        real = p._finder.processes.read_uid
        p._finder.processes.read_uid = lambda pid: reads.append(pid) or real(pid)
        p._finder.processes.recheck_every_polls = every = 100

        def expected_reads(pid: int) -> int:  # the first, and a recheck if one falls in the 5 polls
            return 1 + (next_recheck(1, pid, every) <= 5)

        for _ in range(5):
            p._finder.processes.new_poll()
            assert p._finder._candidates(nvml)[1] == {mine.pid}
        assert reads.count(mine.pid) == expected_reads(mine.pid) and reads.count(gone) == 5
        if theirs is not None:
            assert reads.count(theirs.pid) == expected_reads(theirs.pid)
        p.stop()
        assert len(p._finder.processes) == 0
    finally:
        for proc in (mine, theirs):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_a_candidate_whose_process_exited_is_looked_up_again_at_the_next_poll(tmp_path):
    """A GPU process's exit (its pidfd) redoes the roots at once, whether or not NVML still lists
    its pid (a pid reused by another process would be read as that process)."""
    gpu_proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        ident = process_identity(gpu_proc.pid)
        nvml = SimpleNamespace(
            ok=True, devices=[SimpleNamespace(processes=[SimpleNamespace(pid=gpu_proc.pid)])]
        )
        shm = tmp_path / "shm"
        shm.mkdir()
        p = JobsPoller(shm_dir=str(shm), nvml_source=object(), system_gpus_fn=list)
        p.poll_count = 1  # not a REDISCOVER poll
        p._discover(0.0, nvml)
        assert ident in p._finder.roots and len(p._jobs) == 1
        p.poll_count = 2
        p._discover(0.0, nvml)
        assert ident in p._finder.roots  # the same candidates, nothing exited: kept
        gpu_proc.kill()
        gpu_proc.wait()
        p.poll_count = 3
        p._discover(0.0, nvml)  # NVML's stale list still names the pid
        assert ident not in p._finder.roots
        p.stop()
    finally:
        gpu_proc.kill()
        gpu_proc.wait()


def test_a_root_is_looked_for_only_under_a_fresh_read_of_the_candidate_s_owner(tmp_path):
    """A cached uid can be up to a recheck period old (a privileged setuid since): a new root is
    found only when the candidate is the sidecar user's when read afresh (lineage.job_root's owner)."""
    gpu_proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        nvml = SimpleNamespace(
            ok=True, devices=[SimpleNamespace(processes=[SimpleNamespace(pid=gpu_proc.pid)])]
        )
        shm = tmp_path / "shm"
        shm.mkdir()
        someone_else = os.getuid() + 4242
        p = JobsPoller(shm_dir=str(shm), nvml_source=object(), system_gpus_fn=list, uid=someone_else)
        p._finder.processes.read_uid = lambda pid: someone_else  # the stale cache: "the sidecar user's"
        p.poll_count = 1
        p._discover(0.0, nvml)
        assert p._finder.candidates_seen == {gpu_proc.pid}  # through the filter, on the cached word
        assert p._finder.roots == {} and p._jobs == {}  # but the fresh read says whose it is
        p.stop()
    finally:
        gpu_proc.kill()
        gpu_proc.wait()


def _gpu_rows(*pids: int, ok: bool = True) -> SimpleNamespace:
    """An NVML reading whose GPU lists ``pids`` (or one whose call failed: ``ok=False``)."""
    rows = [SimpleNamespace(pid=pid) for pid in pids]
    return SimpleNamespace(ok=ok, devices=[SimpleNamespace(processes=rows)] if ok else [])


@pytest.fixture
def parent_and_child():
    """(parent, child): a shell and the `sleep` it started, both alive."""
    parent = subprocess.Popen(["bash", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        yield parent.pid, child
    finally:
        parent.kill()
        parent.wait()
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass


def test_a_parent_that_stops_being_a_job_process_is_nobody_s_root_from_the_next_poll(
    tmp_path, parent_and_child
):
    """A root found once is kept while nothing among the ancestors its walk passed changes; a parent
    that was a job process and no longer is (a GPU process that left NVML's list, a probe that ended,
    the first poll's parent of closed finals) leaves its probed child a job of its own. A poll whose
    NVML call failed changes nobody's root: it knows nothing of the GPU processes."""
    parent, child = parent_and_child
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / f"dsh-probe.{child}").write_bytes(b"")  # the child is probed (its name, its user's file)
    p = _poller(shm)
    p._discover(0.0, _gpu_rows(parent))
    child_id, parent_id = process_identity(child), process_identity(parent)
    assert p._finder.roots[child_id] == parent_id  # the topmost job process: the GPU process above it
    p.poll_count = 2
    p._discover(0.0, _gpu_rows(ok=False))
    assert p._finder.roots[child_id] == parent_id  # NVML failed: the parent is not taken for gone
    p.poll_count = 3
    p._discover(0.0, _gpu_rows(parent))
    assert p._finder.roots[child_id] == parent_id
    p.poll_count = 4
    p._discover(0.0, _gpu_rows())
    assert p._finder.roots[child_id] == child_id  # the parent left the GPU: the child is its own root
    assert child_id in {job.root for job in p._jobs.values()}
    p.stop()


def test_the_parent_of_closed_finals_is_a_root_for_the_first_poll_only():
    """The first poll takes the live parent of a probed child's final publish for a job process (its
    job shows what the child left); from the next poll it is not one, and a probed child it still has
    is a job of its own (a test worker whose earlier tests left such finals once kept every job that
    a later test started under it as its own, for good)."""
    script = f'{sys.executable} -c "$W" $$ >/dev/null; sleep 60 & echo $!; wait'
    env = python_env({"W": CLOSED_FINAL_WRITER})
    parent = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    child = int(parent.stdout.readline())  # after the writer (the parent's other child) has exited
    finals: list[tuple[int, int | None]] = []
    p = JobsPoller(nvml_source=object(), system_gpus_fn=list)  # /dev/shm: where the finals are
    try:
        with open(segment_path(child), "xb"):  # the live child is probed: its name, its user's file
            pass
        p.poll_count = 1
        p._discover(0.0, _gpu_rows())
        finals = list(p._finder.finals)
        child_id, parent_id = process_identity(child), process_identity(parent.pid)
        assert list(p._finder.finals.values()) == [parent.pid]
        assert p._finder.roots[child_id] == parent_id
        p.poll_count = 2
        p._discover(0.0, _gpu_rows())
        assert p._finder.roots[child_id] == child_id
    finally:
        p.stop()
        parent.kill()
        parent.wait()
        os.kill(child, signal.SIGKILL)
        os.unlink(segment_path(child))
        for pid, ticks in finals:
            remove_segment(pid, ticks)
