"""The job's process tree: the target and all its descendants.

A process is (pid, start_ticks), never a pid alone. On Linux the tree is read straight from /proc:
the kernel lists a task's children in /proc/<pid>/task/<tid>/children, and one read of
/proc/<pid>/stat gives ppid, CPU ticks, RSS and the start time, so a poll costs a few reads per
process instead of psutil's scan of every process on the machine. What never changes for a
process (name, cmdline, create time) is read once per identity. Elsewhere psutil does the work.
/proc is ``host``'s (hostfs.paths: --path.procfs), the host's own by default.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from operator import is_

import psutil

from hostfs.paths import HOST, HostPaths
from hostfs.procid import process_identity, process_state
from sidecar.sources.boot import boot_time_s
from sidecar.sources.redact import redact_args

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# The children lists are read at least this often even when no pid was allocated (see _walk_known):
# a bound on what a /proc that misreports the last pid could hide.
FULL_WALK_EVERY_POLLS = 10
# A forked child execs within moments of its start (a spawned worker, a shell's `exec`), and a fork
# has its parent's command line until then, with the same command name when both are python: a
# name and command line read in a process's first seconds are read again until they are older.
EXEC_WINDOW_S = 3.0
# When other processes of the machine moved the last pid since the last walk, the pids allocated
# meanwhile are looked at one by one (is any a child of the tree?) while they number at most this
# share of the tree's members; past it, the children lists are read. Looking at a pid (an open, read
# and close of its stat) costs about 9 us; reading the lists, about 1.6 us a member more than a walk
# of the known tree: past one pid for 6 members, the lists cost less (a 64-process job on a machine
# that starts 30 processes between two polls paid 0.29 ms for the pids, where the lists cost 0.1).
NEW_PIDS_PER_MEMBER = 1 / 6


@dataclass(slots=True)  # not frozen: see verdict.ModelFacts
class ProcInfo:
    pid: int
    ppid: int | None
    start_ticks: int | None
    create_time: float | None
    name: str
    cmdline: tuple[str, ...]  # redacted
    cpu_percent: float | None  # of one core, since the previous poll
    rss_mib: float | None
    depth: int  # 0 for the target
    state: str | None = None  # field 3 of /proc/PID/stat: R, S, D, T (stopped), t (traced), ...

    @property
    def identity(self) -> tuple[int, int | None]:
        return (self.pid, self.start_ticks)


@dataclass(frozen=True)
class TreeSnapshot:
    target_pid: int
    target_alive: bool
    processes: tuple[ProcInfo, ...]  # parents before children
    error: str | None = None

    def pids(self) -> set[int]:
        return {p.pid for p in self.processes}


class _Stat:
    __slots__ = ("comm", "cpu_ticks", "ppid", "rss_pages", "start_ticks", "state", "threads")

    def __init__(self, raw: bytes):
        # The command name is in parentheses and may itself contain spaces and parentheses, so the
        # fields are counted from the last ')'. fields[k] is field k + 3 of proc(5).
        end = raw.rindex(b")")
        self.comm = raw[raw.index(b"(") + 1 : end]  # changes at an exec (same pid and start time)
        fields = raw[end + 2 :].split(None, 22)  # up to rss; the other 30 unsplit
        self.state = fields[0].decode()
        self.ppid = int(fields[1])
        self.cpu_ticks = int(fields[11]) + int(fields[12])
        self.threads = int(fields[17])
        self.start_ticks = int(fields[19])
        self.rss_pages = int(fields[21])


# The psutil statuses the verdict asks about, as /proc/PID/stat spells them.
_PSUTIL_STATES = {psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t", psutil.STATUS_RUNNING: "R"}


def _parse_stat(raw: bytes) -> _Stat | None:
    try:
        return _Stat(raw)
    except (IndexError, ValueError):
        return None


def open_file_budget(share: float = 0.25, cap: int = 1024) -> int:
    """How many files a source may keep open: ``share`` of this process's descriptor limit, at most
    ``cap``, so that a large tree never starves the HTTP server of sockets."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 64
    if soft == resource.RLIM_INFINITY:
        return cap
    return max(0, min(cap, int(soft * share)))


class _ProcFiles:
    """/proc files read every poll, kept open between polls (within ``max_open`` descriptors).

    Rereading an open /proc file from offset 0 regenerates it: one pread instead of open, read and
    close. It is also safer: a descriptor stays bound to the process it was opened for, so once that
    process is gone it reads nothing (ESRCH), never the stat of a newcomer that reused the pid.
    """

    def __init__(self, max_open: int, host: HostPaths = HOST):
        self.max_open = max_open
        self.host = host
        self._files: dict[tuple[int, int], int] = {}  # (pid, tid or 0 for stat) -> fd
        self._tids: dict[int, tuple[int, ...]] = {}  # pid -> its threads at the last listing
        self._ticks: dict[int, int] = {}  # pid -> start_ticks of the process the files are of
        # pid -> a kept stat file's last bytes and their parse: an idle process's stat reads the same
        # bytes poll after poll (its start time is in them, so equal bytes are the same process).
        self._parsed: dict[int, tuple[bytes, _Stat]] = {}

    def _reread(self, key: tuple[int, int]) -> bytes | None:
        """What a kept file says now; None when there is no kept file or its process is gone."""
        fd = self._files.get(key)
        if fd is None:
            return None
        try:
            return os.pread(fd, 4096, 0)
        except OSError:
            return None

    def _open_read(self, key: tuple[int, int], path: str) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            raw = os.read(fd, 4096)
        except OSError:
            os.close(fd)
            return None
        if len(self._files) < self.max_open:
            self._files[key] = fd
        else:
            os.close(fd)
        return raw

    def last_pid(self) -> int | None:
        """The last pid allocated in our PID namespace: it moves whenever a process or thread is
        created, in our namespace or one nested in it. From /proc/sys/kernel/ns_last_pid, else the
        last field of /proc/loadavg (which LXCFS or a sandbox may make up: a 0 counts as unknown)."""
        raw = self._reread((0, 0))
        if not raw:
            raw = self._open_read((0, 0), self.host.proc_path("sys", "kernel", "ns_last_pid"))
            if not raw:
                raw = self._open_read((0, 0), self.host.proc_path("loadavg"))
        try:
            value = int(raw.rsplit(None, 1)[-1]) if raw else 0
        except ValueError:
            return None
        return value or None

    def stat(self, pid: int) -> _Stat | None:
        key = (pid, 0)
        fd = self._files.get(key)
        if fd is not None:
            # _reread, inlined: every process of the tree, every poll
            try:
                raw = os.pread(fd, 4096, 0)
            except OSError:
                raw = None
            if raw:
                last = self._parsed.get(pid)
                if last is not None and last[0] == raw:
                    return last[1]
                st = _parse_stat(raw)
                if st is not None:
                    self._parsed[pid] = (raw, st)
                return st
            # The process it was kept for is gone (ESRCH): whatever has this pid now is another
            # process, so none of the old one's files may be read for it.
            self._forget(pid)
        raw = self._open_read(key, self.host.proc_path(pid, "stat"))
        st = _parse_stat(raw) if raw else None
        if st is not None:
            if self._ticks.get(pid, st.start_ticks) != st.start_ticks:
                # Its stat was not kept (the budget), but its threads' children files were: they
                # belong to the process that had this pid before.
                self._forget_threads(pid)
            self._ticks[pid] = st.start_ticks
        return st

    def children(self, pid: int, threads: int) -> list[int]:
        """Children of every thread of ``pid`` (the kernel lists them per thread); call after
        ``stat(pid)``, which makes sure the kept files are that process's."""
        tids = self._tids.get(pid)
        # A single-threaded process whose only thread is its leader needs no listing of its tasks.
        if threads != 1 or tids != (pid,):
            try:
                listed = tuple(int(t) for t in os.listdir(self.host.proc_path(pid, "task")))
            except (OSError, ValueError):
                return []
            if tids:
                for tid in set(tids).difference(listed):
                    self._close((pid, tid))  # a thread that ended
            self._tids[pid] = tids = listed
        kids: list[int] = []
        for tid in tids:
            key = (pid, tid)
            # An empty file is a thread without children: kept open all the same.
            raw = (
                self._reread(key)
                if key in self._files
                else self._open_read(key, self.host.proc_path(pid, "task", tid, "children"))
            )
            if raw:
                try:
                    kids.extend(map(int, raw.split()))
                except ValueError:
                    continue
        return kids

    def _forget(self, pid: int) -> None:
        self._close((pid, 0))
        self._ticks.pop(pid, None)
        self._forget_threads(pid)

    def _forget_threads(self, pid: int) -> None:
        for tid in self._tids.pop(pid, ()):
            self._close((pid, tid))

    def retain(self, pids: set[int]) -> None:
        """Close what belongs to processes no longer in the tree (pid 0 is the last-pid file: kept)."""
        for key in [k for k in self._files if k[0] not in pids and k[0]]:
            self._close(key)
        for pid in [p for p in self._tids if p not in pids]:
            del self._tids[pid]
        for pid in [p for p in self._ticks if p not in pids]:
            del self._ticks[pid]

    def close(self) -> None:
        for key in list(self._files):
            self._close(key)

    def _close(self, key: tuple[int, int]) -> None:
        if key[1] == 0:
            self._parsed.pop(key[0], None)
        fd = self._files.pop(key, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _boot_time(host: HostPaths) -> float:
    """When the machine booted (Unix seconds): the ``btime`` line of ``host``'s /proc/stat, as
    psutil.boot_time() reads the host's own; psutil's answer only where there is no /proc (not
    Linux), which it reads from elsewhere."""
    btime = boot_time_s(host=host)
    if btime is not None:
        return float(btime)
    try:
        if not os.path.isdir(host.proc_path()):
            return psutil.boot_time()
    except Exception:  # noqa: BLE001 -- psutil raises its own and OSError types on odd systems
        pass
    return time.time() - time.monotonic()


def _has_children_files(host: HostPaths) -> bool:
    return os.path.exists(host.proc_path("self", "task", os.getpid(), "children"))


def read_nspid(pid: int, *, host: HostPaths = HOST) -> tuple[int, ...] | None:
    """The pid of a process in each nested PID namespace, outermost (ours) first."""
    try:
        with open(host.proc_path(pid, "status")) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return tuple(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        return None
    return None


def pid_visible(pid: int, *, host: HostPaths = HOST) -> bool:
    if os.path.isdir(host.proc_path()):
        return os.path.exists(host.proc_path(pid))
    return psutil.pid_exists(pid)


def pid_exists(pid: int, *, host: HostPaths = HOST) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has): the CLI's check of --pid.
    A process whose state cannot be read (another user's, under hidepid) exists."""
    if not os.path.isdir(host.proc_path()):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
        except psutil.Error:
            return True  # exists but belongs to someone else
    try:
        os.stat(host.proc_path(int(pid)))
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # there, but not ours to read
    return process_state(pid, host=host) != "Z"


class ProcessTreeSource:
    """Polls the tree under one target pid. The target is pinned by its start time, so a pid
    reused after the job died is reported as "exited", never adopted."""

    def __init__(
        self, target_pid: int, *, max_processes: int = 4096, max_open_files: int | None = None,
        host: HostPaths = HOST,
    ):
        self.target_pid = target_pid
        self.max_processes = max_processes
        self.host = host
        self._have_proc = os.path.isdir(host.proc_path())
        self._use_proc = self._have_proc and _has_children_files(host)
        self._boot_time = _boot_time(host)
        self._static: dict[tuple[int, int], tuple[bytes, tuple[str, tuple[str, ...]]]] = {}  # ident -> (comm, info)
        self._last_walk_s: float | None = None  # when the last poll walked the tree (monotonic)
        self._processes: tuple[ProcInfo, ...] = ()  # what the last poll that walked it found
        self._infos: dict[tuple[int, int], tuple[_Stat, ProcInfo]] = {}  # the last poll's, by identity
        self._psutil_procs: dict[int, psutil.Process] = {}
        self._files = _ProcFiles(open_file_budget() if max_open_files is None else max_open_files, host)
        self._known_kids: dict[int, tuple[int, ...]] | None = None  # pid -> its children, last walk
        self._walk_last_pid: int | None = None
        self._polls_since_full = 0
        self.target_start_ticks: int | None = None
        st = self._files.stat(target_pid) if self._use_proc else None
        if st is not None:
            self.target_start_ticks = st.start_ticks
        elif not self._use_proc and psutil.pid_exists(target_pid):
            try:
                self.target_start_ticks = self._start_ticks(psutil.Process(target_pid))
            except psutil.Error:
                pass

    def poll(self) -> TreeSnapshot:
        try:
            if self._use_proc:
                return self._poll_proc()
            return self._poll_psutil()
        except Exception as exc:  # noqa: BLE001 -- a poll must never die of one odd process
            return TreeSnapshot(self.target_pid, False, (), error=f"process tree: {exc}")

    # -- Linux: /proc --------------------------------------------------------------------------
    def _poll_proc(self) -> TreeSnapshot:
        now = time.monotonic()
        files = self._files
        # Read before the walk: a process started during it shows as a new last pid next time.
        last_pid = files.last_pid()
        root = files.stat(self.target_pid)
        if root is None or root.start_ticks != self.target_start_ticks or root.state in ("Z", "X"):
            files.close()
            self._known_kids = None
            return TreeSnapshot(self.target_pid, False, ())
        walk = None
        self._polls_since_full += 1
        if (
            last_pid is not None
            and self._known_kids is not None
            and self._polls_since_full < FULL_WALK_EVERY_POLLS
            and (last_pid == self._walk_last_pid or self._none_joined(self._walk_last_pid, last_pid))
        ):
            walk = self._walk_known(root, self._known_kids)
        same_tree = walk is not None
        if walk is None:
            walk = self._walk_full(root)
            self._polls_since_full = 0
        self._walk_last_pid = last_pid
        out: list[ProcInfo] = []
        last_infos, infos = self._infos, {}
        # The CPU share since the last poll, of the ticks this poll's stat and the last poll's give:
        # a process the last poll did not walk has none (a walk that leaves one out is a full walk,
        # which forgets it). This loop runs for every process of the tree at every poll.
        last_now, self._last_walk_s = self._last_walk_s, now
        since_s = 0.0 if last_now is None else now - last_now  # since the last walk (none: no time)
        moved = since_s > 0.0
        add = out.append
        for pid, depth, st in walk:
            ident = (pid, st.start_ticks)
            last = last_infos.get(ident)
            if last is not None and last[0] is st and moved and last[1].depth == depth and last[1].cpu_percent == 0.0:
                infos[ident] = last  # an idle process (most of a tree): what the general case below gives
                add(last[1])
                continue
            if last is None or not moved:
                cpu = None
            elif last[0] is st:
                cpu = 0.0  # the very same stat bytes (see _ProcFiles.stat): no tick since, what the sum gives
            else:
                cpu = round(100.0 * (st.cpu_ticks - last[0].cpu_ticks) / _CLK_TCK / since_s, 1)
            # An idle process's stat parses to the very same _Stat: its last ProcInfo again, one
            # object less to make and for the facts' caches to compare.
            if last is None or last[0] is not st or last[1].depth != depth or last[1].cpu_percent != cpu:
                last = (st, self._proc_info(pid, ident, st, cpu, depth))
            infos[ident] = last
            add(last[1])
        self._infos = infos
        if len(out) == len(self._processes) and all(map(is_, out, self._processes)):
            procs = self._processes  # each the last poll's: the same tuple, for the caches above
        else:
            procs = self._processes = tuple(out)
        seen = infos.keys()  # the identities walked (a walk lists each process once)
        if not same_tree:
            files.retain({pid for pid, _, _ in walk})
            # Forget identities that are gone, so the caches stay bounded by the live tree.
            for ident in list(self._static):
                if ident not in seen:
                    del self._static[ident]
        return TreeSnapshot(self.target_pid, True, procs)

    def _walk_full(self, root: _Stat) -> list[tuple[int, int, _Stat]]:
        """The tree from the kernel's children lists: (pid, depth, stat), parents before children.
        Remembers each process's children for _walk_known."""
        files = self._files
        walk: list[tuple[int, int, _Stat]] = []
        known: dict[int, tuple[int, ...]] = {}
        stack: list[tuple[int, int, _Stat]] = [(self.target_pid, 0, root)]
        while stack and len(walk) < self.max_processes:
            pid, depth, st = stack.pop()
            walk.append((pid, depth, st))
            kids = files.children(pid, st.threads)
            if len(kids) > 1:
                kids.sort(reverse=True)
            mine = []
            for kid in kids:
                kst = files.stat(kid)
                # A zombie does no work (its parent will reap it); one reparented meanwhile is not ours.
                if kst is not None and kst.ppid == pid and kst.state not in ("Z", "X"):
                    stack.append((kid, depth + 1, kst))
                    mine.append(kid)
            known[pid] = tuple(mine)
        self._known_kids = known
        return walk

    def _none_joined(self, since: int | None, last: int) -> bool:
        """Whether no process (or thread) allocated a pid in (since, last] can have joined the tree:
        each is gone, or its parent is no member of the last walk. A process joins the tree only as
        a new child of a member (forked: a new pid, so in that range) or as an orphan handed to a
        member that is a subreaper (its parent died: _walk_known sees the parent gone); an orphan
        that was forked since is in the range too, with the member as its parent by now. A thread
        of a member names the member's parent: counted as joined (a full walk, never a miss).
        False when the range is unknown, wrapped round or larger than NEW_PIDS_PER_MEMBER of the
        members."""
        members = self._known_kids
        assert members is not None
        if since is None or not 0 < last - since <= len(members) * NEW_PIDS_PER_MEMBER:
            return False
        for pid in range(since + 1, last + 1):
            try:
                fd = os.open(self.host.proc_path(pid, "stat"), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # gone already (its children, if any, have pids in the range too)
            except OSError:
                return False
            try:
                raw = os.read(fd, 4096)
            except OSError:
                return False  # e.g. ESRCH: it exited between the open and the read; be safe
            finally:
                os.close(fd)
            st = _parse_stat(raw) if raw else None
            if st is None or st.ppid in members:
                return False
        return True

    def _walk_known(self, root: _Stat, known: dict[int, tuple[int, ...]]) -> list[tuple[int, int, _Stat]] | None:
        """The last walk's tree again, when no process was created since (the namespace's last pid
        has not moved), so no process can have gained a child: only each member's stat is read.
        None as soon as a member is gone, a zombie, or has another parent (an exit can move its
        children to a subreaper): the caller then walks the children lists. ``known``: the last
        walk's children lists (self._known_kids)."""
        # Looked up once: this loop runs for every process of the tree at most polls.
        stat, cap = self._files.stat, self.max_processes
        walk: list[tuple[int, int, _Stat]] = []
        stack: list[tuple[int, int, _Stat]] = [(self.target_pid, 0, root)]
        add, push, pop = walk.append, stack.append, stack.pop
        while stack and len(walk) < cap:
            item = pop()
            add(item)
            pid, depth = item[0], item[1] + 1
            kids = known.get(pid)
            if kids is None:
                return None  # not walked last time (the cap): read the lists
            for kid in kids:
                kst = stat(kid)
                if kst is None or kst.ppid != pid or kst.state in ("Z", "X"):
                    return None
                push((kid, depth, kst))
        return walk

    def close(self) -> None:
        self._files.close()

    def _proc_info(self, pid: int, ident: tuple[int, int], st: _Stat, cpu: float | None, depth: int) -> ProcInfo:
        create_time = self._boot_time + st.start_ticks / _CLK_TCK
        name, cmdline = self._static_info(pid, ident, st.comm, create_time)
        rss_mib = st.rss_pages * (_PAGE_SIZE / 1048576)
        return ProcInfo(pid, st.ppid, st.start_ticks, create_time, name, cmdline, cpu, rss_mib, depth, st.state)

    def _static_info(
        self, pid: int, ident: tuple[int, int], comm: bytes, create_time: float
    ) -> tuple[str, tuple[str, ...]]:
        """Name and command line, read once per identity and again when the stat's command name
        changed: an exec keeps the pid and start time (a spawned child is forked, then execs). One
        read in the process's first EXEC_WINDOW_S is not kept: an exec to the same name would not
        change the stat's, and the fork's command line (its parent's) would stay."""
        cached = self._static.get(ident)
        if cached is not None and cached[0] == comm:
            return cached[1]
        name = ""
        args: list[str] = []
        try:
            with open(self.host.proc_path(pid, "comm")) as f:
                name = f.read().strip()
            with open(self.host.proc_path(pid, "cmdline"), "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            pass
        info = (name, tuple(redact_args(args)))
        if time.time() - create_time >= EXEC_WINDOW_S:
            self._static[ident] = (comm, info)
        return info

    # -- portable: psutil ------------------------------------------------------------------------
    def _start_ticks(self, p: psutil.Process) -> int | None:
        """The identity the probe writes (ticks since boot, hostfs.procid), never psutil's
        create_time in ticks since 1970: a kernel without the children files still has /proc/PID/stat.
        Without /proc (not Linux) it is worked back from create_time. None: gone or a zombie."""
        if self._have_proc:
            ident = process_identity(p.pid, host=self.host)
            return None if ident is None else ident[1]
        return round((p.create_time() - self._boot_time) * _CLK_TCK)

    def _poll_psutil(self) -> TreeSnapshot:
        try:
            root = psutil.Process(self.target_pid)
            if self._start_ticks(root) != self.target_start_ticks or self.target_start_ticks is None:
                return TreeSnapshot(self.target_pid, False, ())
            procs = [root, *root.children(recursive=True)][: self.max_processes]
        except psutil.Error:
            return TreeSnapshot(self.target_pid, False, ())
        depth = {self.target_pid: 0}
        out = []
        for p in procs:
            try:
                ticks = self._start_ticks(p)
                if ticks is None:
                    continue  # exited, or a zombie: it does no work (as on the /proc path)
                with p.oneshot():
                    ppid = p.ppid()
                    cached = self._psutil_procs.setdefault(p.pid, p)
                    out.append(
                        ProcInfo(
                            pid=p.pid,
                            ppid=ppid,
                            start_ticks=ticks,
                            create_time=p.create_time(),
                            name=p.name(),
                            cmdline=tuple(redact_args(p.cmdline())),
                            cpu_percent=cached.cpu_percent(None),
                            rss_mib=p.memory_info().rss / 1048576,
                            depth=depth.get(ppid, 0) + 1 if p.pid != self.target_pid else 0,
                            state=_PSUTIL_STATES.get(p.status()),
                        )
                    )
                    depth[p.pid] = out[-1].depth
            except psutil.Error:
                continue
        return TreeSnapshot(self.target_pid, True, tuple(out))
